/*
 * sim.h — sg-sim internals: the scenario (scenario.c), one simulated row
 * (sim.c) and the reports (report.c).
 *
 * A scenario describes clusters (each one engine of tools/common/engine.c),
 * multi-turn session traffic, background load injected straight into
 * engines, how the router sees the clusters (stats interval, staleness),
 * the TTFT SLO, and the lb-config fields of each algorithm.  A row is one
 * algorithm with last_cluster_affinity off, on or not applicable; every row
 * replays the same traffic (all random draws are keyed by the seed and the
 * session or stream, never by what routing did).
 */
#ifndef SG_SIM_H
#define SG_SIM_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "stargate.h"
#include "common/engine.h"

#define SIM_MAX_ROWS		16
#define SIM_MAX_CLUSTERS	1024
#define SIM_MAX_BG		64
#define SIM_MAX_RETRIES		8
#define SIM_MAX_CLASSES		16	/* (model, routing key) traffic classes */
#define SIM_MAX_DRAINS		16
#define SIM_MAX_BURSTS		16
#define SIM_ALG_PERFECT		(-1)	/* the perfect-knowledge row */

enum { DIST_UNIFORM = 0, DIST_LOGNORMAL, DIST_PARETO, DIST_EXPONENTIAL };

/*
 * A distribution: uniform integer in [min, max] (the default), or
 * lognormal (median a, sigma b), Pareto (shape a, scale b) or exponential
 * (mean a), each clamped to [min, max].
 */
typedef struct sim_dist {
	int		kind;
	uint64_t	min, max;
	double		a, b;
} sim_dist;

typedef struct sim_cluster {
	char		id[SG_ID_MAX + 1];
	double		rtt_ms;
	eng_config	eng;
	uint32_t	models;		/* bit i: serves class model i */
} sim_cluster;

/* A cluster out of the candidate list between two times. */
typedef struct sim_drain {
	size_t		cluster;
	double		start_ms, end_ms;
	bool		restart;	/* returns with an empty cache */
} sim_drain;

/* A traffic class: a share of the sessions with its model and key. */
typedef struct sim_class {
	double		weight;
	char		model[SG_ID_MAX + 1];
	char		routing_key[SG_ID_MAX + 1];
	bool		has_routing_key;
	uint32_t	model_idx;	/* index into scenario.models */
} sim_class;

/* One request of a trace, grouped by session, turns in order. */
typedef struct sim_treq {
	double		t_ms;		/* not sent before */
	double		think_ms;	/* after the previous answer */
	uint64_t	input, output;
	uint32_t	turn;
	uint32_t	cls;		/* traffic class */
	uint32_t	sess;		/* while loading: the session */
} sim_treq;

typedef struct sim_tsess {
	const char	*id;		/* session id: the cache affinity key */
	size_t		 first, n;	/* requests [first, first + n) */
} sim_tsess;

typedef struct sim_trace {
	sim_tsess	*sess;		/* by first-turn time, then file order */
	size_t		 nsess;
	sim_treq	*req;
	size_t		 nreq;
	char		*strings;	/* session ids */
} sim_trace;

/* Poisson arrivals straight into one cluster's engine. */
typedef struct sim_bg {
	size_t		cluster;
	double		start_ms, end_ms;
	double		rate_per_s;
	sim_dist	input, output;
	bool		cache;		/* each request has its own cache entry */
} sim_bg;

typedef struct sim_sessions {
	double		rate_per_s;	/* Poisson session arrivals */
	sim_dist	turns;
	sim_dist	think;		/* milliseconds; default exponential */
	sim_dist	first_input;	/* prompt tokens of turn 1 */
	sim_dist	turn_input;	/* new prompt tokens of each later turn */
	sim_dist	output;
	uint64_t	max_context;	/* prompt cap */
	uint32_t	priority;
	/* arrival rate profile: rate * (1 + amp * sin(2 pi (t - phase) /
	 * period)) * the factor of the burst t is in (thinning) */
	double		diurnal_amp, diurnal_period_ms, diurnal_phase_ms;
	size_t		nbursts;
	struct {
		double	start_ms, end_ms, factor;
	}		bursts[SIM_MAX_BURSTS];
} sim_sessions;

/* One row of the comparison. */
typedef struct sim_row {
	int		alg;		/* enum sg_algorithm, or SIM_ALG_PERFECT */
	int		lca;		/* -1 not applicable, 0 off, 1 on */
	char		name[48];	/* "wait-and-widen/on", "pulsar" */
	sg_lbconf	*conf;		/* built from the scenario (NULL: perfect) */
	/* perfect: wait-and-widen's max_queued, the objective (oracle.h),
	 * how long to wait for the cluster that holds the most cache */
	uint64_t	max_queued;
	int		objective;
	double		patience_ms;
} sim_row;

typedef struct scenario {
	char		 name[128];
	uint64_t	 seed;
	double		 duration_ms;	/* session arrivals and turns start before */
	double		 warmup_ms;	/* requests counted from here */
	char		 model[SG_ID_MAX + 1];
	char		 routing_key[SG_ID_MAX + 1];
	bool		 has_routing_key;
	double		 stats_interval_ms;
	double		 stats_staleness_ms;
	double		 recheck_cap_ms;
	bool		 has_max_wait;
	uint64_t	 max_wait_ms;
	unsigned	 retries;
	double		 slo_ttft_ms;
	size_t		 nclusters;
	sim_cluster	*clusters;
	sim_sessions	 sessions;
	size_t		 nclasses;	/* >= 1; class 0 is model/routing_key */
	sim_class	 classes[SIM_MAX_CLASSES];
	size_t		 nmodels;	/* distinct class models */
	const char	*models[SIM_MAX_CLASSES];
	bool		 has_trace;	/* sessions come from trace */
	sim_trace	 trace;
	size_t		 ndrains;
	sim_drain	 drains[SIM_MAX_DRAINS];
	size_t		 nbg;
	sim_bg		 bg[SIM_MAX_BG];
	size_t		 nrows;
	sim_row		 rows[SIM_MAX_ROWS];
} scenario;

typedef struct sim_result {
	uint64_t	requests;	/* arrived in the window */
	uint64_t	completed;	/* got a first token */
	uint64_t	rejected;	/* routing rejections and exhausted retries */
	uint64_t	retries;
	uint64_t	returning;	/* selected requests with a previous cluster */
	uint64_t	left;		/* ... selected elsewhere */
	uint64_t	good;		/* completed within the TTFT SLO */
	uint64_t	decisions;	/* sg_router_decide calls (all requests) */
	uint64_t	simulated;	/* session requests simulated (all) */
	uint64_t	background;	/* background requests submitted */
	double		input_tokens;
	double		reused_tokens;
	/* at each dispatch of a counted request: the prefix cached on the
	 * chosen cluster, and the longest on any cluster it could go to */
	double		took_prefix;
	double		best_prefix;
	double		kv_reuse;
	double		ttft_p50_ms;
	double		ttft_p99_ms;
	double		goodput_rps;
	double		left_share;
	double		mean_wait_ms;
	double		sim_end_ms;
} sim_result;

/* The row of the perfect-knowledge router, or -1. */
int	scenario_bound_row(const scenario *sc);
int	sim_grow(void **p, size_t *cap, size_t elem, size_t want,
	    size_t first);

/*
 * Read and check a scenario file (strict JSON: unknown fields and wrong
 * types are errors naming the field) and build each row's lb-config.
 * Returns 0, SG_EINVAL (bad content; err says where), or an errno when the
 * file cannot be read.
 */
int	scenario_load(scenario *sc, const char *path, sg_error *err);
/* The same from an open stream; path names it in messages and is the base
 * of a relative trace path ("-": the standard input, the working
 * directory). */
int	scenario_loadf(scenario *sc, FILE *fp, const char *path,
	    sg_error *err);
/* Keep only the named rows ("a,b,c"); SG_EINVAL naming an unknown one. */
int	scenario_select_rows(scenario *sc, const char *list, sg_error *err);
void	scenario_free(scenario *sc);

/*
 * A scenario's generated session traffic, drawn once for every row to
 * replay (traffic.c): per session its arrival, class and turns, per turn
 * the prompt draw, the answer's size and the think time after it.
 */
typedef struct sim_tturn {
	uint32_t	in;		/* first prompt, or growth of the context */
	uint32_t	out;		/* answer tokens */
	double		think;		/* ms before the next turn; 0: last */
} sim_tturn;

typedef struct sim_traffic {
	size_t		 nsess;
	double		*arrive;	/* nsess + 1: the last is past the end */
	uint32_t	*first;		/* nsess + 1: session i's turns from */
	uint8_t		*cls;
	sim_tturn	*turn;
	size_t		 nturn;
} sim_traffic;

/* Draw sc's traffic.  *out is NULL (rows draw live) for a trace, sizes
 * beyond 32 bits or too many turns.  Returns 0 or SG_ENOMEM. */
int	sim_traffic_new(const scenario *sc, sim_traffic **out, sg_error *err);
void	sim_traffic_free(sim_traffic *tr);

/* Simulate one row.  Returns 0, SG_ENOMEM, or SG_EINVAL for a router
 * error (err says which). */
int	sim_run(const scenario *sc, const sim_row *row, sim_result *out,
	    sg_error *err);
/* The same replaying tr (sim_traffic_new of sc; NULL: draw live), with
 * the same result. */
int	sim_run_traffic(const scenario *sc, const sim_row *row,
	    const sim_traffic *tr, sim_result *out, sg_error *err);

/*
 * The scenario's session traffic as an NDJSON trace (trace.c): one request
 * a line, sessions in arrival order, a function of the scenario and the
 * seed only.  Returns 0, SG_ENOMEM or -1 on a write error.
 */
int	trace_export(FILE *fp, const scenario *sc);
/* Read an NDJSON trace into sc->trace (messages name the line).  Returns
 * 0, SG_EINVAL, SG_ENOMEM or an errno when the file cannot be opened. */
int	trace_load(scenario *sc, const char *path, sg_error *err);
void	trace_free(sim_trace *t);

/* Random draws shared by the simulation and the trace export (sim.c). */
uint64_t sim_stream_seed(uint64_t seed, uint64_t stream, uint64_t idx);
uint64_t sim_rnd(uint64_t *s);
double	sim_unif(uint64_t *s);
double	sim_expo(uint64_t *s, double mean);
uint64_t sim_draw(uint64_t *s, const sim_dist *d);
double	sim_draw_ms(uint64_t *s, const sim_dist *d);
/* The next session arrival after t (the rate profile applied), or
 * INFINITY at or past the end. */
double	sim_next_arrival(const scenario *sc, uint64_t *rng, double t);
/* A session's traffic class, drawn from its own stream. */
uint32_t sim_draw_class(const scenario *sc, uint32_t session);

/* Reports (return 0 or -1 on a write error). */
int	report_table(FILE *fp, const scenario *sc, const sim_result *res);
int	report_json(FILE *fp, const scenario *sc, const sim_result *res);
int	report_csv(FILE *fp, const scenario *sc, const sim_result *res);
int	report_svg(FILE *fp, const scenario *sc, const sim_result *res);

#endif /* SG_SIM_H */
