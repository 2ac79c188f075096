/*
 * proxy.h — sg-proxy internals shared by its files (router role, SPEC.md
 * §6, ref §1, §2.3, §6).
 *
 * One file per concern:
 *   main.c      options into a pconf, validation, --check, the listening
 *               socket, workers (fork), the master's signal loop, pid file;
 *   worker.c    one event loop per worker: evhttp server, signals, drain;
 *   http.c      endpoints, header extraction, JSON error replies;
 *   route.c     the routing loop (decide, timed waits, retries, finalise);
 *   forward.c   one upstream attempt: header filtering, response pass-
 *               through with backpressure, client disconnects;
 *   upstream.c  libcurl multi driven by the worker's libevent loop (stats
 *               polls, and attempts with --upstream-client curl);
 *   h1.c        the native HTTP/1.1 client of attempts (the default);
 *   stats.c     stats polling into the fleet, measured RTT, readiness;
 *   clusters.c  cluster-file generations (build, swap on SIGHUP);
 *   metrics.c   the stargate_* families and their label rules;
 *   plog.c      the logger sink (logfmt on stderr) and the clock.
 *
 * Ownership: a worker owns one proxy (event base, curl multi, router,
 * fleet).  Cluster definitions live in a refcounted generation (cgen); a
 * request holds a reference to the generation it started under, so a
 * reload never frees what an in-flight request reads.  Per-cluster state
 * that must survive reloads (fleet index, measured RTT, the previous vLLM
 * sample) lives in a cstate, keyed by the fleet index, never freed before
 * exit.
 */
#ifndef SG_PROXY_H
#define SG_PROXY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>
#include <event2/event.h>
#include <event2/http.h>

#include "stargate.h"
#include "sg_clusterfile.h"
#include "sg_fleet.h"
#include "sg_log.h"
#include "sg_metrics.h"
#include "sg_vllm.h"

#include "dlog.h"
#include "h1.h"
#include "otlp.h"

#define PROXY_HWM		(256u << 10)	/* client output high-water mark */
#define PROXY_DRAIN_MS		30000		/* SIGTERM drain bound */
#define PROXY_URL_MAX		8192		/* upstream URL bytes */

/* --- options ---------------------------------------------------------------- */

typedef struct pconf {
	const char	*role;
	const char	*listen;		/* ADDR:PORT as given */
	char		 host[256];		/* parsed address */
	uint16_t	 port;
	const char	*clusters;		/* cluster file path */
	const char	*lbconf;		/* NULL: permissive default */
	unsigned	 workers;
	int		 log_level;		/* enum sg_log_level */
	uint64_t	 seed;
	const char	*port_file;
	const char	*pid_file;
	uint64_t	 max_body;
	uint64_t	 max_header_bytes;
	uint64_t	 max_headers;
	uint64_t	 header_timeout_ms;
	uint64_t	 body_timeout_ms;
	uint64_t	 connect_timeout_ms;
	uint64_t	 upstream_timeout_ms;
	uint64_t	 max_retries;
	uint64_t	 ready_timeout_ms;
	uint64_t	 drain_timeout_ms;
	const char	*decision_log;
	double		 decision_log_sample;
	const char	*metrics_prefix;
	bool		 check;
	bool		 upstream_curl;		/* --upstream-client curl */
} pconf;

/* --- cluster generations ------------------------------------------------------ */

typedef struct cstate cstate;
typedef struct xfer xfer;
typedef struct preq preq;
typedef struct proxy proxy;

/* One cluster of a generation. */
typedef struct pcl {
	const sg_clusterdef	*def;		/* borrowed from the generation */
	size_t			 fidx;		/* fleet index */
	cstate			*cs;
	size_t			 url_len;
} pcl;

/* The candidates of one model, in cluster-file order. */
typedef struct pmodel {
	const char	*name;			/* borrowed from a def */
	size_t		*fidx;			/* fleet indices */
	size_t		 n;
} pmodel;

typedef struct cgen {
	unsigned	 refs;
	sg_clusterfile	*cf;
	pcl		*cl;			/* cf->n clusters */
	size_t		 n;
	pmodel		*models;		/* sorted by name */
	size_t		 nmodels;
	pcl		**byf;			/* fleet index -> pcl (or NULL) */
	size_t		 nbyf;
} cgen;

/* Per fleet index, for the life of the worker. */
struct cstate {
	char		*id;			/* fleet id (stable storage) */
	size_t		 id_len;
	size_t		 fidx;
	const pcl	*cur;			/* in the current generation, or NULL */
	xfer		*poll;			/* stats request in flight */
	double		 poll_sent_ms;
	bool		 have_rtt;		/* measured rtt available */
	double		 rtt_ms;		/* EWMA of the stats round trip */
	bool		 have_prev;
	sg_vllm_sample	 prev;
	double		 prev_ms;
	double		 prev_tps;
	uint64_t	 polls_failed;
	bool		 failing;		/* last poll failed (logged once) */
	char		*buf;			/* stats response being read */
	size_t		 blen, bcap;
	size_t		 blimit;
	sg_series	*age;			/* stats age gauge */
	sg_series	*errors;		/* poll failures counter */
	h1_upstream	*h1up;			/* native client: address */
};

/* --- upstream transfers ------------------------------------------------------- */

typedef void (*xfer_done_fn)(xfer *x, CURLcode rc);

struct xfer {
	CURL		*easy;
	proxy		*p;
	xfer_done_fn	 done;
	void		*owner;
	bool		 active;		/* added to the multi */
	xfer		*next;			/* free list */
	char		 errbuf[CURL_ERROR_SIZE];
};

/* --- requests ------------------------------------------------------------------- */

enum preq_phase {
	PQ_FREE = 0,
	PQ_ROUTING,		/* deciding or waiting on the timer */
	PQ_UPSTREAM,		/* attempt in flight, no reply started */
	PQ_STREAMING,		/* reply started to the client */
};

struct preq {
	proxy			*p;
	struct evhttp_request	*req;
	struct evhttp_connection *conn;
	cgen			*gen;
	const pmodel		*model;		/* NULL: model not served */
	double			 t0;		/* arrival, monotonic ms */
	int			 phase;
	sg_request		 sr;
	bool			 has_budget;	/* x-stargate-max-wait-ms */
	uint64_t		 budget_ms;
	struct event		*timer;		/* waits and the idle check */
	struct event		*watch;		/* client EOF while we work */
	/* exclusions: ids of the fleet (stable storage) */
	const char		**excl;
	size_t			 nexcl, excap;
	unsigned		 attempts;
	unsigned		 retries;
	unsigned		 waits;		/* timed routing waits */
	const char		*endpoint;	/* ref §1.1 endpoint label */
	bool			 close_after;	/* draining: Connection: close */
	bool			 u_retryable;	/* x-stargate-retryable: true */
	bool			 routed;	/* routing_duration observed */
	bool			 failed_any;	/* a failure was recorded */
	/* labels (bounded) */
	const char		*lbl_rk;	/* routing key or "" */
	const char		*lbl_model;	/* served model or "" */
	char			 alg[40];	/* algorithm of the last decision */
	/* current attempt */
	const pcl		*cur;
	size_t			 fidx;
	uint64_t		 resv;
	xfer			*x;
	h1_xfer			*hx;		/* native client transfer */
	char			*hblk;		/* native: header block */
	size_t			 hblen, hbcap;
	struct curl_slist	*hdrs;
	char			*url;
	size_t			 urlcap;
	bool			 has_eq;
	uint64_t		 eq_ms;
	double			 attempt_t0;
	double			 last_data_ms;
	int			 ustatus;	/* upstream status, 0 before */
	char			 ureason[64];
	bool			 uheaders_done;
	bool			 discard;	/* retryable refusal: drop the body */
	char			 retry_reason[64];
	bool			 paused;
	bool			 got_bytes;
	struct evbuffer		*chunk;
	char			 akey[DLOG_AFFINITY_KEY_LEN + 1];
	otlp_span		 span;		/* proxy_openai_request */
	otlp_span		 aspan;		/* proxy_upstream_http_request */
	bool			 has_parent;
	otlp_ctx		 parent;
	preq			*prev, *next;	/* live list or free list */
};

/* --- metrics ---------------------------------------------------------------------- */

typedef struct pmetrics {
	sg_metric	*requests;
	sg_metric	*attempts;
	sg_metric	*retries;
	sg_metric	*exhausted;
	sg_metric	*selections;
	sg_metric	*kv_fallback;
	sg_metric	*session;
	sg_metric	*admission;
	sg_metric	*routing_dur;
	sg_metric	*proxy_dur;
	sg_metric	*replay;
	sg_metric	*active;
	sg_metric	*stats_age;
	sg_metric	*stats_errors;
	sg_metric	*inflight;
} pmetrics;

/* --- the worker ------------------------------------------------------------------- */

struct proxy {
	const pconf		*conf;
	sg_lbconf		*lb;
	sg_router		*rt;
	sg_metrics		*reg;
	pmetrics		 m;
	sg_logger		*log;
	otlp_exporter		*otlp;
	dlog			*dlog;
	sg_header		*hdrs;		/* scratch: max_headers entries */
	char			*hbuf;		/* scratch: one header line */
	size_t			 hbufcap;
	bool			 is_worker;	/* a forked child */
	int			 worker_no;
	int			 listen_fd;
	struct event_base	*base;
	struct evhttp		*http;
	struct evhttp_bound_socket *bound;
	struct event		*sig_term, *sig_int, *sig_hup;
	struct event		*drain_timer;
	bool			 draining;
	/* upstream */
	CURLM			*multi;
	struct event		*curl_timer;
	xfer			*free_xfers;
	h1_pool			*h1;		/* NULL: attempts use curl */
	/* clusters */
	sg_fleet		*fleet;
	cgen			*gen;
	cstate			**cs;
	size_t			 ncs, cscap;
	struct event		*stats_timer;
	double			 t_start;
	bool			 ready;
	sg_snapshot		*view;
	size_t			*view_idx;
	size_t			 view_cap;
	/* requests */
	preq			*live;
	preq			*free_reqs;
	size_t			 inflight;
	size_t			 flushing;	/* final replies being written */
	uint64_t		 served;
};

/* --- plog.c ------------------------------------------------------------------------ */

double	mono_ms(void);				/* CLOCK_MONOTONIC in ms */
double	wall_s(void);				/* unix time in s */
void	ms_to_tv(double ms, struct timeval *tv);
/* The stderr logger (logfmt). NULL on failure. */
sg_logger *plog_new(int level);

/* --- main.c -------------------------------------------------------------------------- */

/* Load and check the cluster file: 0, or an sysexits code after reporting. */
int	conf_load_clusters(const char *path, sg_clusterfile **out, bool quiet,
	    sg_error *err);

/* --- worker.c ------------------------------------------------------------------------- */

extern proxy *proxy_self;			/* this process's worker */
int	worker_run(proxy *p);			/* sysexits code */
/* Count a final reply until evhttp has written it (drain waits for it). */
void	worker_track_reply(struct evhttp_request *req);
void	worker_maybe_exit(proxy *p);		/* draining and idle: stop */

/* --- upstream.c ----------------------------------------------------------------------- */

int	upstream_init(proxy *p);
void	upstream_fini(proxy *p);
xfer	*xfer_get(proxy *p);			/* reset easy handle */
int	xfer_start(xfer *x);			/* add to the multi */
void	xfer_stop(xfer *x);			/* remove, no callback */
void	xfer_put(xfer *x);			/* back to the free list */

/* --- http.c ------------------------------------------------------------------------------ */

void	http_dispatch(struct evhttp_request *req, void *arg);
void	http_send_error(struct evhttp_request *req, int status,
	    const char *code, const char *message);
void	http_send_overloaded(struct evhttp_request *req);
const char *http_reason(int status);

/* --- route.c ------------------------------------------------------------------------------ */

/* Begin routing an accepted, parsed request. */
void	route_start(preq *q);
/* An attempt ended with a retryable refusal or a connect error: exclude
 * the cluster and decide again, within the budget; false if no budget. */
bool	route_retry_allowed(preq *q);
void	route_retry(preq *q, const char *reason);
/* Finish a request that never got an upstream reply. */
void	route_fail(preq *q, int status, const char *code, const char *msg);
/* The request's timer: a routing wait, or the upstream idle check. */
void	route_on_timer(evutil_socket_t fd, short what, void *arg);

/* --- forward.c ------------------------------------------------------------------------------ */

preq	*preq_get(proxy *p);
void	preq_put(preq *q);			/* release everything */
/* The request is over (reply sent or client gone): account and free. */
void	preq_finish(preq *q, int status);
/* Add a cluster id (stable storage) to the exclusions; -1 when full. */
int	preq_exclude(preq *q, const char *id);
void	forward_idle_check(preq *q);
/* Watch the client socket for EOF while the request is being served. */
void	forward_watch_client(preq *q);
void	forward_start(preq *q, const pcl *cl, size_t fidx);
/* Native client: resolve the upstream addresses of the current clusters
 * (at start and after a reload, never per request). */
void	forward_prepare(proxy *p);
void	forward_cancel(preq *q);		/* stop the attempt, release */
void	forward_close_client(struct evhttp_connection *c, void *arg);
/* Precomputed forbidden-header check (request and response lists). */
bool	header_forbidden(const char *name, size_t len);

/* --- stats.c --------------------------------------------------------------------------------- */

int	stats_init(proxy *p);
void	stats_poll_all(proxy *p);
void	stats_fini(proxy *p);
bool	stats_ready(proxy *p);
/* Fill gauges that are computed on read (active servers, ages). */
void	stats_update_gauges(proxy *p);

/* --- clusters.c ------------------------------------------------------------------------------ */

/* New generation from a parsed file (taken over on success). */
int	gen_build(proxy *p, sg_clusterfile *cf, cgen **out, sg_error *err);
void	gen_ref(cgen *g);
void	gen_unref(cgen *g);
const pmodel *gen_model(const cgen *g, const char *name);
/* Install g as current (old released). */
void	gen_install(proxy *p, cgen *g);
/* SIGHUP: reload the cluster file; keep the old one on error. */
void	gen_reload(proxy *p);
void	cstates_free(proxy *p);

/* --- metrics.c ------------------------------------------------------------------------------- */

int	metrics_declare(sg_metrics *reg, const char *prefix, pmetrics *m,
	    sg_error *err);
void	metrics_request(preq *q, const char *server, int status);
void	metrics_attempt(preq *q, const char *server, const char *result);
void	metrics_retry(preq *q, const char *reason);
void	metrics_exhausted(preq *q, const char *reason);
void	metrics_selection(preq *q, const sg_decision *d, const sg_algdef *def);
void	metrics_admission(preq *q, const char *reason);
void	metrics_routing_duration(preq *q, double seconds);
void	metrics_proxy_duration(preq *q, const char *server, double seconds);
void	metrics_replay(preq *q, size_t bytes);
/* Session series at zero for every served model whose definition has
 * last_cluster_affinity (routing_key ""), before any traffic. */
void	metrics_session_zero(proxy *p, const cgen *g);

#endif /* SG_PROXY_H */
