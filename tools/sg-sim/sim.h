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

/* Uniform integer in [min, max]. */
typedef struct sim_dist {
	uint64_t	min, max;
} sim_dist;

typedef struct sim_cluster {
	char		id[SG_ID_MAX + 1];
	double		rtt_ms;
	eng_config	eng;
} sim_cluster;

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
	double		think_ms;	/* mean of an exponential */
	sim_dist	first_input;	/* prompt tokens of turn 1 */
	sim_dist	turn_input;	/* new prompt tokens of each later turn */
	sim_dist	output;
	uint64_t	max_context;	/* prompt cap */
	uint32_t	priority;
} sim_sessions;

/* One row of the comparison. */
typedef struct sim_row {
	int		alg;		/* enum sg_algorithm */
	int		lca;		/* -1 not applicable, 0 off, 1 on */
	char		name[48];	/* "wait-and-widen/on", "pulsar" */
	sg_lbconf	*conf;		/* built from the scenario */
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
	double		kv_reuse;
	double		ttft_p50_ms;
	double		ttft_p99_ms;
	double		goodput_rps;
	double		left_share;
	double		mean_wait_ms;
	double		sim_end_ms;
} sim_result;

/*
 * Read and check a scenario file (strict JSON: unknown fields and wrong
 * types are errors naming the field) and build each row's lb-config.
 * Returns 0, SG_EINVAL (bad content; err says where), or an errno when the
 * file cannot be read.
 */
int	scenario_load(scenario *sc, const char *path, sg_error *err);
/* Keep only the named rows ("a,b,c"); SG_EINVAL naming an unknown one. */
int	scenario_select_rows(scenario *sc, const char *list, sg_error *err);
void	scenario_free(scenario *sc);

/* Simulate one row.  Returns 0, SG_ENOMEM, or SG_EINVAL for a router
 * error (err says which). */
int	sim_run(const scenario *sc, const sim_row *row, sim_result *out,
	    sg_error *err);

/* Reports (return 0 or -1 on a write error). */
int	report_table(FILE *fp, const scenario *sc, const sim_result *res);
int	report_json(FILE *fp, const scenario *sc, const sim_result *res);
int	report_csv(FILE *fp, const scenario *sc, const sim_result *res);
int	report_svg(FILE *fp, const scenario *sc, const sim_result *res);

#endif /* SG_SIM_H */
