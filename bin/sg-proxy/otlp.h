/*
 * otlp.h — W3C trace context and OTLP/HTTP JSON span export for sg-proxy
 * (sg-proxy(8) "Spans", stargate-lb-config(5)).
 *
 * Trace context: traceparent headers are parsed and formatted by the W3C
 * Trace Context rules (version 00; higher versions are read by the 00
 * layout; version ff, upper-case hex, all-zero ids are invalid).
 *
 * Spans: an otlp_span is a fixed-size value the caller embeds in its
 * per-request state (no allocation, nothing to free).  otlp_span_start()
 * always gives the span a trace context, so traceparent can be propagated
 * even when nothing is recorded; the span records only when an exporter
 * exists and the parent (if any) is sampled (ParentBased(AlwaysOn)).  Every
 * setter is a cheap no-op on a span that does not record.
 *
 * Export: otlp_span_end() serializes the span into the exporter's bounded
 * queue (drop and count when full, never block).  The exporter owns a
 * CURLM driven by the daemon's event_base (socket and timer callbacks), and
 * POSTs one OTLP/HTTP JSON body to <endpoint>/v1/traces every flush interval
 * or when a batch is full; at most one request is in flight, with a
 * timeout; failures are counted, batches are not retried.
 *
 * Without an endpoint otlp_exporter_new() gives a NULL exporter, which
 * every function accepts: spans then carry context but record nothing.
 * One exporter per worker process, created after fork() on that worker's
 * event_base; curl_global_init() must have run before.  Not thread-safe.
 */
#ifndef SG_PROXY_OTLP_H
#define SG_PROXY_OTLP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sg_common.h"

struct event_base;

/* --- trace context -------------------------------------------------------- */

#define OTLP_TRACE_ID_LEN	16	/* bytes */
#define OTLP_SPAN_ID_LEN	8	/* bytes */
#define OTLP_TRACEPARENT_LEN	55	/* "00-<32>-<16>-<2>", without NUL */
#define OTLP_FLAG_SAMPLED	0x01

typedef struct otlp_ctx {
	uint8_t	trace_id[OTLP_TRACE_ID_LEN];
	uint8_t	span_id[OTLP_SPAN_ID_LEN];
	uint8_t	flags;
} otlp_ctx;

/*
 * Parse a traceparent header value (surrounding spaces and tabs ignored).
 * Returns true and fills out when valid; false (out untouched) otherwise.
 */
bool	otlp_traceparent_parse(const char *s, size_t len, otlp_ctx *out);

/* Format c as a version-00 traceparent: OTLP_TRACEPARENT_LEN chars + NUL. */
void	otlp_traceparent_format(const otlp_ctx *c,
	    char out[OTLP_TRACEPARENT_LEN + 1]);

/* Random non-zero ids (a fast PRNG seeded from libsodium, reseeded in a
 * child after fork()). */
void	otlp_random_trace_id(uint8_t id[OTLP_TRACE_ID_LEN]);
void	otlp_random_span_id(uint8_t id[OTLP_SPAN_ID_LEN]);

/* Wall clock, Unix nanoseconds. */
uint64_t otlp_now_ns(void);

/* --- spans ---------------------------------------------------------------- */

/* Span names of stargate-metrics(7). */
#define OTLP_SPAN_REQUEST	"proxy_openai_request"
#define OTLP_SPAN_ATTEMPT	"proxy_upstream_http_request"

enum otlp_kind {		/* OTLP SpanKind values */
	OTLP_KIND_INTERNAL = 1,
	OTLP_KIND_SERVER = 2,
	OTLP_KIND_CLIENT = 3,
};

enum otlp_status {		/* OTLP StatusCode values */
	OTLP_STATUS_UNSET = 0,
	OTLP_STATUS_OK = 1,
	OTLP_STATUS_ERROR = 2,
};

enum otlp_attr_type {
	OTLP_ATTR_STR = 1,
	OTLP_ATTR_INT,
	OTLP_ATTR_DOUBLE,
	OTLP_ATTR_BOOL,
};

#define OTLP_NAME_MAX		63	/* span name bytes (longer: truncated) */
#define OTLP_KEY_MAX		47	/* attribute key bytes (longer: dropped) */
#define OTLP_STR_MAX		95	/* string value bytes (longer: truncated) */
#define OTLP_MSG_MAX		127	/* status message bytes (truncated) */
#define OTLP_MAX_ATTRS		16	/* attributes per span (more: dropped) */

typedef struct otlp_attr {
	char	key[OTLP_KEY_MAX + 1];
	int	type;			/* enum otlp_attr_type */
	int64_t	i;
	double	d;
	bool	b;
	char	s[OTLP_STR_MAX + 1];
} otlp_attr;

struct otlp_exporter;

typedef struct otlp_span {
	struct otlp_exporter *exp;	/* NULL: not recording */
	bool	recording;
	otlp_ctx ctx;			/* this span's context */
	bool	has_parent;
	uint8_t	parent_id[OTLP_SPAN_ID_LEN];
	char	name[OTLP_NAME_MAX + 1];
	int	kind;			/* enum otlp_kind */
	uint64_t start_ns, end_ns;
	int	status;			/* enum otlp_status */
	char	status_msg[OTLP_MSG_MAX + 1];
	unsigned nattrs;
	unsigned dropped_attrs;
	otlp_attr attrs[OTLP_MAX_ATTRS];
} otlp_span;

/*
 * Start span s now.  parent is the remote context (the parsed traceparent
 * of the request) or a local span's ctx, NULL for a root: the trace id and
 * the sampled flag come from it, a root gets a new trace id.  The span
 * records iff exp is not NULL, not shut down, and parent is NULL or
 * sampled; its ctx.flags has OTLP_FLAG_SAMPLED set iff it records (or, with
 * no exporter, as the parent had it).  Always succeeds.
 */
void	otlp_span_start(struct otlp_exporter *exp, otlp_span *s,
	    const char *name, int kind, const otlp_ctx *parent);

/* traceparent for propagation (to the engine: the attempt span's). */
void	otlp_span_traceparent(const otlp_span *s,
	    char out[OTLP_TRACEPARENT_LEN + 1]);

/*
 * Attributes: setting a key again replaces its value; past OTLP_MAX_ATTRS
 * keys the attribute is dropped and counted.  NULL string values are
 * skipped.  String values must not be secrets (session ids, affinity keys,
 * prompts, API keys); invalid UTF-8 is sanitized on export.
 */
void	otlp_span_str(otlp_span *s, const char *key, const char *val);
void	otlp_span_strn(otlp_span *s, const char *key, const char *val,
	    size_t n);
void	otlp_span_int(otlp_span *s, const char *key, int64_t v);
void	otlp_span_double(otlp_span *s, const char *key, double v);
void	otlp_span_bool(otlp_span *s, const char *key, bool v);

/* Status (enum otlp_status); msg (may be NULL) is kept for ERROR only. */
void	otlp_span_status(otlp_span *s, int status, const char *msg);

/*
 * End s now and queue it for export (dropped and counted when the queue is
 * full or the exporter is shut down).  Afterwards s no longer records;
 * ending twice is a no-op.  The exporter must outlive its spans' ends.
 */
void	otlp_span_end(otlp_span *s);

/* --- exporter ------------------------------------------------------------- */

typedef struct otlp_exporter otlp_exporter;

typedef struct otlp_options {
	const char *endpoint;		/* OTEL_EXPORTER_OTLP_ENDPOINT; NULL or
					   "" = no exporter.  A path ending in
					   /v1/traces is used as is, else
					   /v1/traces is appended */
	const char *service_name;	/* resource service.name; NULL = "sg-proxy" */
	unsigned    flush_interval_ms;	/* 0 = 1000 */
	unsigned    batch_spans;	/* flush at this many; 0 = 512 */
	size_t	    queue_spans;	/* queue bound (spans); 0 = 4096 */
	unsigned    timeout_ms;		/* per POST; 0 = 10000 */
} otlp_options;

typedef struct otlp_stats {
	uint64_t queued;		/* spans waiting now */
	uint64_t exported;		/* spans accepted by the collector (2xx) */
	uint64_t dropped;		/* spans dropped: queue full, shut down */
	uint64_t failed;		/* spans in batches that failed */
	uint64_t requests;		/* POSTs completed */
	uint64_t request_failures;	/* POSTs failed (transport or non-2xx) */
} otlp_stats;

/*
 * Create the exporter on base.  With no endpoint, *out = NULL and 0.
 * Errors: SG_ECONFIG (endpoint not http:// or https://, or too long),
 * SG_ENOMEM, with err filled.
 */
int	otlp_exporter_new(otlp_exporter **out, struct event_base *base,
	    const otlp_options *o, sg_error *err);

/*
 * Shut down: stop accepting spans, send what is queued (the in-flight POST
 * first, then the rest, in batches), and call done(arg) exactly once from
 * the loop when everything is sent or failed, or when timeout_ms has
 * passed (in-flight POSTs are then abandoned).  done may be NULL.  The
 * loop must keep running until done is called.  A second call is a no-op
 * (its done is not called).  NULL exporter: done is not called.
 */
void	otlp_exporter_shutdown(otlp_exporter *e, unsigned timeout_ms,
	    void (*done)(void *arg), void *arg);

/*
 * For after the daemon's loop has returned: shutdown and run the loop
 * (event_base_loop) until the final flush is over or timeout_ms passed.
 * Other events still registered on the base run too.
 */
void	otlp_exporter_drain(otlp_exporter *e, unsigned timeout_ms);

/* Counters (all zero for a NULL exporter). */
void	otlp_exporter_stats(const otlp_exporter *e, otlp_stats *st);

/* Free (abandons anything queued or in flight).  NULL is a no-op. */
void	otlp_exporter_free(otlp_exporter *e);

#endif /* SG_PROXY_OTLP_H */
