/*
 * proxy.h — sg-proxy internals shared by its files (sg-proxy(8): the router
 * role, stargate-headers(7); the gateway stage, stargate-headers(7)).
 *
 * One file per concern:
 *   main.c      options into a pconf, validation, --check, the listening
 *               socket, workers (fork), the master's signal loop, pid file;
 *   worker.c    one event loop per worker: the h1s server, signals, drain;
 *   h1s.c       the native HTTP/1.1 server (the client side);
 *   http.c      endpoints, header extraction, JSON error replies;
 *   route.c     the routing loop (decide, timed waits, retries, finalise);
 *   forward.c   one upstream attempt: header filtering, response pass-
 *               through with backpressure, client disconnects;
 *   upstream.c  libcurl multi driven by the worker's libevent loop (stats
 *               polls, and attempts with --upstream-client curl);
 *   h1.c        the native HTTP/1.1 client of attempts (the default);
 *   h1lex.h     the HTTP/1.1 lexical rules h1.c and h1s.c share;
 *   stats.c     stats polling into the fleet, measured RTT, readiness;
 *   clusters.c  cluster-file generations (build, swap on SIGHUP);
 *   metrics.c   the stargate_* families and their label rules;
 *   plog.c      the logger sink (logfmt on stderr) and the clock;
 *   gateway.c   the gateway stage (--role gateway and all): API keys,
 *               identity, trusted headers, store lookup and write, the
 *               gateway role's forward to --router-url, response hygiene;
 *   gwjson.c    the byte-level scan that finds a body's top-level "model"
 *               (request rewrite, response rewrite of unary JSON and SSE).
 *
 * Roles: router (trusted headers in, clusters out), gateway (client in,
 * trusted headers out to --router-url), all (both: the gateway stage
 * builds the trusted headers and hands them to the router stage in
 * memory through sg_gateway_request, then route.c and forward.c run as in
 * the router role).  A request with q->gw.on passed the gateway stage.
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

#include "stargate.h"
#include "sg_clusterfile.h"
#include "sg_fleet.h"
#include "sg_log.h"
#include "sg_metrics.h"
#include "sg_vllm.h"
#include "sg_gateway.h"
#include "sg_identity.h"
#include "sg_lcconf.h"
#include "sg_store.h"

#include "dlog.h"
#include "h1.h"
#include "h1s.h"
#include "otlp.h"

#define PROXY_HWM		(256u << 10)	/* client output high-water mark */
#define PROXY_DRAIN_MS		30000		/* SIGTERM drain bound */
#define PROXY_URL_MAX		8192		/* upstream URL bytes */
#define PROXY_MAX_TARGET	8192		/* request target, 414 beyond */

/* --- options ---------------------------------------------------------------- */

enum prole {
	ROLE_ALL = 0,
	ROLE_GATEWAY,
	ROLE_ROUTER,
};

typedef struct pconf {
	const char	*role;
	int		 role_id;		/* enum prole */
	const char	*router_url;		/* --role gateway */
	const char	*api_keys;		/* --api-keys FILE */
	sg_lcconf	 lc;			/* last-cluster settings */
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
	uint64_t	 keepalive_timeout_ms;
	uint64_t	 send_timeout_ms;
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

/* A growable byte buffer (kept and reused: no allocation once grown). */
typedef struct pbuf {
	char		*b;
	size_t		 len, cap;
} pbuf;

/* --- cluster generations ------------------------------------------------------ */

typedef struct cstate cstate;
typedef struct xfer xfer;
typedef struct preq preq;
typedef struct proxy proxy;
typedef struct gwpoll gwpoll;

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
	PQ_LOOKUP,		/* gateway: store lookup in flight */
	PQ_UPSTREAM,		/* attempt in flight, no reply started */
	PQ_STREAMING,		/* reply started to the client */
};

/* Response rewrite of the public model id (gateway stage). */
enum rw_mode {
	RW_NONE = 0,		/* pass through */
	RW_JSON,		/* unary JSON: rewrite the top-level model once */
	RW_SSE,			/* event stream: each data line */
};

/* The gateway stage of one request (q->gw). */
#define GW_LIT_IN	96	/* model literals kept in the request */

typedef struct gwreq {
	bool			 on;		/* passed the gateway stage */
	sg_identity		 id;
	sg_gateway_route	 rt;
	sg_gateway_headers	 gh;
	char			 rid[160];	/* request id */
	unsigned char		 key[SG_LC_DIGEST_LEN];	/* the store key's
						 * digest */
	bool			 has_key;	/* eligible: lookup and write */
	char			 hint[SG_ID_MAX + 1];
	size_t			 hint_len;	/* strlen(hint) */
	sg_store_lookup_req	 lk;
	bool			 lk_pending;
	uint64_t		 lk_t0;		/* sg_store_mono_ns */
	otlp_span		 lspan;		/* last_cluster_lookup */
	char			*body;		/* rewritten request body */
	size_t			 blen, bcap;
	const char		*send;		/* what is sent: body, or the
						 * request's own rewritten in
						 * place (blen bytes) */
	char			*pub;		/* public id, JSON literal */
	size_t			 publen;
	char			*routed;	/* routed model, JSON literal */
	size_t			 routedlen;
	char			 pubin[GW_LIT_IN];	/* pub when it fits */
	char			 routedin[GW_LIT_IN];	/* routed ... */
	int			 rw;		/* enum rw_mode */
	bool			 rw_done;	/* JSON: decided */
	bool			 rw_midline;	/* SSE: passing a long line */
	char			*rb;		/* rewrite buffer */
	size_t			 rblen, rbcap;
	char			 ucluster[SG_ID_MAX + 1]; /* gateway role */
	unsigned		 uerrcodes;	/* x-stargate-error-code count */
	bool			 uoverloaded;	/* ... overloaded_error */
	bool			 remembered;	/* store write issued */
	int64_t			 ulen;		/* upstream Content-Length, -1 */
	bool			 held;		/* reply start deferred */
	int			 hstatus;
	char			 hreason[64];
} gwreq;

struct preq {
	bool			 oom;		/* a reply header or body byte
						 * could not be queued */
	proxy			*p;
	h1s_req			*req;		/* NULL once answered or gone */
	cgen			*gen;
	const pmodel		*model;		/* NULL: model not served */
	double			 t0;		/* arrival, monotonic ms */
	double			 now_ms;	/* a clock reading route_step may
						 * take as its own (the lookup's
						 * end), else 0 */
	int			 phase;
	sg_request		 sr;
	bool			 has_budget;	/* x-stargate-max-wait-ms */
	uint64_t		 budget_ms;
	struct event		*timer;		/* waits and the idle check */
	/* exclusions: ids of the fleet (stable storage) */
	const char		**excl;
	size_t			 nexcl, excap;
	unsigned		 attempts;
	unsigned		 retries;
	unsigned		 waits;		/* timed routing waits */
	const char		*endpoint;	/* stargate-headers(7) endpoint label */
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
	int64_t			 ulen;		/* upstream Content-Length, -1 */
	char			 ureason[64];
	bool			 uheaders_done;
	bool			 discard;	/* retryable refusal: drop the body */
	char			 retry_reason[64];
	bool			 paused;
	bool			 got_bytes;
	pbuf			 ob;		/* gateway: rewritten output */
	char			 akey[DLOG_AFFINITY_KEY_LEN + 1];
	otlp_span		 span;		/* proxy_openai_request */
	otlp_span		 aspan;		/* proxy_upstream_http_request */
	bool			 has_parent;
	otlp_ctx		 parent;
	bool			 attached;	/* route_attach done */
	gwreq			 gw;
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
	/* gateway (llm_api_gateway_*, no prefix) */
	sg_metric	*lc_lookups;
	sg_metric	*lc_writes;
	sg_metric	*lc_dur;
	sg_metric	*lc_conn;
	/* their series by result, found on first use (gateway.c) */
	sg_series	*lc_lookups_s[5];
	sg_series	*lc_writes_s[2];
	sg_series	*lc_dur_s;
} pmetrics;

/* One API key of --api-keys. */
typedef struct apikey {
	unsigned char	 hash[32];		/* SHA-256 of the bearer key */
	char		*routing_key;		/* NULL: from the model id */
	bool		 has_priority;
	uint32_t	 priority;
} apikey;

/* A store write waiting for its commit record. */
typedef struct gwwrite {
	uint64_t	 seq;
	unsigned char	 key[SG_LC_DIGEST_LEN];	/* the store key's digest */
	char		 cl[SG_ID_MAX + 1];
	size_t		 cl_len;		/* strlen(cl) */
	bool		 batched;		/* in p->wb, not yet queued */
	unsigned	 folded;		/* later writes of the key folded
						 * into this one (gateway.c) */
	otlp_span	 span;			/* last_cluster_write */
	char		 rid[160];
	char		 model[128];
	char		 rk[128];
	struct gwwrite	*next;
	struct gwwrite	*hnext, **hprev;	/* p->wh chain (pending) */
} gwwrite;

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
	bool			 gw_edge;	/* role gateway or all */
	apikey			*keys;		/* --api-keys */
	size_t			 nkeys;
	sg_store		*store;		/* this worker's, or NULL */
	struct event		*store_ev;	/* commit records */
	gwwrite			*wq, *wq_tail;	/* writes awaiting commit */
	gwwrite			*wb, *wb_tail;	/* writes not yet queued */
	size_t			 nwb;
	struct event		*wb_timer;	/* hands the batch over */
	gwwrite			*wfree;
	gwwrite			**wh;		/* pending writes by key */
	size_t			 wpending;
	h1_upstream		*router_up;	/* --router-url */
	gwpoll			*rpoll;		/* its /readyz, /v1/models */
	double			 last_timeout_log;
	bool			 is_worker;	/* a forked child */
	int			 worker_no;
	int			 listen_fd;
	struct event_base	*base;
	h1s_server		*srv;
	pbuf			 scratch;	/* error bodies, /metrics */
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
	sg_series		*inflight_s;	/* its gauge (series are never
						 * removed: looked up once) */
	size_t			 flushing;	/* final replies being written */
	uint64_t		 served;
};

/* --- plog.c ------------------------------------------------------------------------ */

double	mono_ms(void);				/* CLOCK_MONOTONIC in ms */
double	wall_s(void);				/* unix time in s */
/* prefix and v in decimal into buf (NUL-terminated; "" if cap is too
 * small): labels and numeric fields on the request path, without printf. */
size_t	fmt_label(char *buf, size_t cap, const char *prefix, uint64_t v);
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
/* Count a final reply until h1s has written it (drain waits for it);
 * the request's lifecycle callbacks are the worker's from now on. */
void	worker_track_reply(h1s_req *req);
void	worker_maybe_exit(proxy *p);		/* draining and idle: stop */

/* --- upstream.c ----------------------------------------------------------------------- */

int	upstream_init(proxy *p);
void	upstream_fini(proxy *p);
xfer	*xfer_get(proxy *p);			/* reset easy handle */
int	xfer_start(xfer *x);			/* add to the multi */
void	xfer_stop(xfer *x);			/* remove, no callback */
void	xfer_put(xfer *x);			/* back to the free list */

/* --- http.c ------------------------------------------------------------------------------ */

/* The server's callbacks (worker.c installs them). */
extern const h1s_cbs http_cbs;
void	http_send_error(h1s_req *req, int status, const char *code,
	    const char *message);
void	http_send_overloaded(h1s_req *req);
const char *http_reason(int status);
/* pbuf: append (0, or -1 out of memory), a JSON string literal. */
int	pbuf_add(pbuf *b, const void *p, size_t n);
void	pbuf_json_str(pbuf *b, const char *s);
void	pbuf_free(pbuf *b);
/* The request's fields as an sg_header list in the worker's scratch
 * array (pointers into the request: no copy); *n their count. */
const sg_header *http_header_list(proxy *p, const h1s_req *req, size_t *n);

/* --- route.c ------------------------------------------------------------------------------ */

/* Attach the request to its connection (the close callback), start its
 * span, count it in flight.  Idempotent. */
void	route_attach(preq *q);
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
void	forward_start(preq *q, const pcl *cl, size_t fidx);
/* Native client: resolve the upstream addresses of the current clusters
 * (at start and after a reload, never per request). */
void	forward_prepare(proxy *p);
void	forward_cancel(preq *q);		/* stop the attempt, release */
/* h1s on_close: the client left before its answer was complete. */
void	forward_close_client(h1s_req *r, void *arg);
/* Precomputed forbidden-header check (request and response lists). */
bool	header_forbidden(const char *name, size_t len);

/* Exported for gateway.c. */
void	forward_abort_client(preq *q);
int	forward_hblk_add(preq *q, const char *name, size_t nl, const char *v,
	    size_t vl);
/* Which client fields a header block gets (forward_client_headers). */
typedef bool (*hdr_pass_fn)(const char *name, size_t len);
/* Append the client's fields that pass to q's header block. */
int	forward_client_headers(preq *q, hdr_pass_fn pass);
/* Send bytes to the client; pause the upstream transfer while more than
 * PROXY_HWM are unsent (resumed from h1s_on_drain). */
void	forward_send(preq *q, const char *p, size_t n);
/* Stage body bytes in q->ob (gateway rewrite); a failure sets q->oom (the
 * reply is then cut, never sent with a hole).  0 or -1. */
int	forward_chunk_add(preq *q, const void *p, size_t n);
/* Copy an upstream response's fields that pass to the client reply
 * (q->req); pass NULL: every field that is not forbidden. */
void	forward_copy_response(preq *q, const h1_resp *r,
	    bool (*pass)(preq *q, const char *name, size_t nl));

/* --- gateway.c ------------------------------------------------------------------------------ */

/* Load --api-keys (main, before fork): 0 or a reported sysexits code. */
int	gateway_load_keys(proxy *p, const char *path);
void	gateway_free_keys(proxy *p);
/* Worker start and stop: the store (opened after fork), the router
 * upstream.  0 or a sysexits code. */
int	gateway_worker_init(proxy *p);
void	gateway_worker_fini(proxy *p);
/* A routed request on the gateway edge (instead of the router path). */
void	gateway_accept(proxy *p, h1s_req *req, const char *endpoint);
/* The request's timer while in PQ_LOOKUP or on the gateway role. */
void	gateway_on_timer(preq *q);
/* Release the gateway state of a request (preq_put). */
void	gateway_release(preq *q);
/* Cancel a pending lookup (forward_cancel). */
void	gateway_cancel(preq *q);
/* Response headers toward the client (role all, start_reply): status
 * mapping, x-request-id, the session id, and the store write on 2xx. */
int	gateway_reply_start(preq *q, int status, const char *cluster_id);
/* The headers of a reply the proxy makes itself (errors). */
void	gateway_reply_headers(preq *q);
/* Rewrite and send body bytes; flush at the end of the body. */
void	gateway_emit(preq *q, const char *ptr, size_t len, bool flush);
/* Start the client reply; a small unary JSON reply being rewritten is
 * held until its body is complete, then sent with its Content-Length. */
void	gateway_send_start(preq *q, int status, const char *reason);
/* Pick the rewrite mode from the upstream's Content-Type. */
void	gateway_rw_mode(preq *q, const char *ctype, size_t len);
void	gateway_update_gauges(proxy *p);
/* Role all, for forward.c: the engine's header block from the client's
 * headers and the trusted ones; an upstream head's gateway facts; which
 * upstream response headers reach the client. */
int	gateway_engine_headers(preq *q);
bool	gateway_client_header_passes(const char *name, size_t len);
void	gateway_note_headers(preq *q, const h1_resp *r);
bool	gateway_response_passes(preq *q, const char *name, size_t nl);
bool	gateway_idle(proxy *p);			/* no store write pending */
/* GET /v1/models on the gateway edge: the public ids (sg-proxy(8)); the
 * list of names (sorted) under routing key rk (NULL: none); a 502. */
void	gateway_models(proxy *p, h1s_req *req);
void	gateway_models_reply(proxy *p, h1s_req *req, const char *rk,
	    const char *const *names, size_t n);
void	gateway_models_error(h1s_req *req, const char *why);
/* Why the gateway edge is not ready ("router not ready", "store
 * unavailable"), or NULL when it is. */
const char *gateway_unready(proxy *p);

/* --- gwpoll.c: the gateway role's router, polled on the loop ---------------------- */

/* Start polling --router-url (role gateway; else nothing).  0 or -1. */
int	gwpoll_init(proxy *p);
/* Stop; after h1_pool_free. */
void	gwpoll_fini(proxy *p);
/* The router's last /readyz answered 200, recently. */
bool	gwpoll_ready(const proxy *p);
/* Answer req's GET /v1/models from the router's (async, on the loop),
 * under routing key rk.  0, or -1: out of memory (nothing sent). */
int	gwpoll_models(proxy *p, h1s_req *req, const char *rk);

/* --- gwjson.c ------------------------------------------------------------------------------- */

enum { GJ_FOUND = 0, GJ_ABSENT, GJ_MORE };
/* Find the top-level "model" member's value in the JSON text s[0..n):
 * GJ_FOUND with its token span [*voff, *voff + *vlen), GJ_ABSENT (not an
 * object, malformed, or no such member), GJ_MORE (the text ends first). */
int	gj_find_model(const char *s, size_t n, size_t *voff, size_t *vlen);
/* s[0..n) as a JSON string literal (quotes included), malloc'd; NULL:
 * out of memory. */
char	*gj_quote(const char *s, size_t n, size_t *outlen);
#define GJ_QUOTE_MAX(n)	((n) * 6 + 3)
size_t	 gj_quote_to(char *o, const char *s, size_t n);

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
/* The llm_api_gateway_* families; with zero series: every label value. */
int	metrics_declare_gateway(sg_metrics *reg, pmetrics *m, bool zero,
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
