/*
 * forward.c — one upstream attempt of a routed request, and the request
 * context's life (stargate-headers(7); sg-proxy(8)).
 *
 * Upstream client: the native HTTP/1.1 client (h1.c, the default) or
 * libcurl multi (upstream.c, --upstream-client curl); the attempt logic
 * is shared, only the transport glue (the "native client" section and
 * forward_start) differs.
 *
 * Request headers: every client header goes to the engine except the
 * hop-by-hop ones, host, content-length (the client sets it), expect, the
 * consumed x-routing-method, the gateway's x-stargate-last-cluster-id,
 * the internal x-stargate-retryable / -retry-reason / -retry-after-ms /
 * -expected-queue-ms / -error-code, and traceparent (replaced by the
 * attempt span's).  Added: x-stargate-expected-queue-ms when known.
 * The body is the evhttp input buffer, kept (made contiguous once) for
 * replay on a retry.
 *
 * Response: the upstream status line and its headers, filtered by the same
 * list (content-length kept, so a unary reply is not re-chunked), plus
 * x-stargate-cluster-id.  The reply starts when the upstream headers are
 * complete; body bytes are passed on as they arrive (SSE included).
 * A 429/503 with x-stargate-retryable: true while the retry budget lasts
 * is not passed on: its body is drained (so the connection is reused), the
 * reservation released, the cluster excluded, and route.c decides again.
 * A transport error before any response byte is retried the same way
 * (reason connect_failover); with no budget left it is a 502.
 *
 * Backpressure: when the client connection's output buffer holds more
 * than PROXY_HWM bytes, the transfer is paused (native: h1_pause once the
 * chunk is queued, the kernel keeps the rest; curl: CURL_WRITEFUNC_PAUSE,
 * curl keeps the bytes); the write-complete callback
 * of the last chunk sent resumes it once the client has drained it.
 *
 * Timeouts: connect (--connect-timeout-ms) by the client; idle (no upstream byte
 * for --upstream-timeout-ms, not counting time paused for a slow client)
 * by the request's timer: 504 before the reply started, else the client
 * connection is closed (a truncated reply must not look complete).
 *
 * A client that goes away cancels the transfer and releases the
 * reservation; the request context never touches the evhttp request again.
 *
 * Role all (q->gw.on): the engine's headers are the client's that pass the
 * gateway (its own headers and x-request-id replaced by the trusted ones)
 * plus the trusted headers a remote router would pass on; the body is the
 * gateway's rewritten copy; the response head and body go through the
 * gateway's hygiene and rewrite (gateway.c), and x-stargate-cluster-id
 * is not added (the selection is written to the store instead).
 */
#include <sys/queue.h>

#include <sys/socket.h>

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "proxy.h"

/* --- header filtering --------------------------------------------------------- */

static const char *const common_drop[] = {
	"connection", "proxy-connection", "keep-alive", "transfer-encoding",
	"te", "trailer", "upgrade", "host", "x-routing-method",
	"x-stargate-retryable", "x-stargate-retry-reason",
	"x-stargate-retry-after-ms", "x-stargate-expected-queue-ms",
	"x-stargate-error-code", NULL,
};
static const char *const request_drop[] = {
	"content-length", "expect", "x-stargate-last-cluster-id",
	"traceparent", NULL,
};
static const char *const response_drop[] = {
	"x-stargate-cluster-id", NULL,
};

static bool
in_list(const char *const *l, const char *name, size_t len)
{
	for (; *l != NULL; l++)
		if (strlen(*l) == len && strncasecmp(*l, name, len) == 0)
			return true;
	return false;
}

static void on_client_readable(evutil_socket_t fd, short what, void *arg);

bool
header_forbidden(const char *name, size_t len)
{
	return in_list(common_drop, name, len) ||
	    in_list(request_drop, name, len);
}

static bool
response_forbidden(const char *name, size_t len)
{
	return in_list(common_drop, name, len) ||
	    in_list(response_drop, name, len);
}

/* --- request contexts ---------------------------------------------------------- */

/*
 * evhttp stops reading a connection while its request is being served, so
 * a client that goes away during a routing wait or before the first
 * upstream byte would go unnoticed.  A one-shot read event on the socket
 * peeks: EOF or an error frees the connection (its close callback then
 * cancels the request); data (a pipelined request) ends the watch.
 */
static void
on_client_readable(evutil_socket_t fd, short what, void *arg)
{
	preq *q = arg;
	char c;
	ssize_t n;

	(void)what;
	n = recv(fd, &c, 1, MSG_PEEK);
	if (n > 0 || q->conn == NULL)
		return;
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK ||
	    errno == EINTR)) {
		event_add(q->watch, NULL);
		return;
	}
	evhttp_connection_free(q->conn);	/* runs forward_close_client */
}

void
forward_watch_client(preq *q)
{
	struct bufferevent *bev;
	evutil_socket_t fd;

	if (q->conn == NULL ||
	    (bev = evhttp_connection_get_bufferevent(q->conn)) == NULL ||
	    (fd = bufferevent_getfd(bev)) < 0)
		return;
	if (event_assign(q->watch, q->p->base, fd, EV_READ, on_client_readable,
	    q) == 0)
		event_add(q->watch, NULL);
}

preq *
preq_get(proxy *p)
{
	preq *q = p->free_reqs;

	if (q != NULL)
		p->free_reqs = q->next;
	else {
		if ((q = calloc(1, sizeof(*q))) == NULL)
			return NULL;
		if ((q->chunk = evbuffer_new()) == NULL ||
		    (q->timer = evtimer_new(p->base, route_on_timer, q)) ==
		    NULL ||
		    (q->watch = event_new(p->base, -1, 0, on_client_readable,
		    q)) == NULL) {
			if (q->chunk != NULL)
				evbuffer_free(q->chunk);
			if (q->timer != NULL)
				event_free(q->timer);
			free(q);
			return NULL;
		}
	}
	q->p = p;
	q->req = NULL;
	q->conn = NULL;
	q->gen = NULL;
	q->model = NULL;
	q->t0 = mono_ms();
	q->phase = PQ_ROUTING;
	sg_request_init(&q->sr);
	q->has_budget = false;
	q->budget_ms = 0;
	q->nexcl = 0;
	q->attempts = q->retries = q->waits = 0;
	q->routed = q->failed_any = false;
	q->lbl_rk = q->lbl_model = "";
	q->alg[0] = '\0';
	q->endpoint = "";
	q->cur = NULL;
	q->resv = 0;
	q->x = NULL;
	q->hx = NULL;
	q->hdrs = NULL;
	q->ustatus = 0;
	q->oom = false;
	q->close_after = false;
	q->attached = false;
	q->prev = NULL;
	q->next = p->live;
	if (p->live != NULL)
		p->live->prev = q;
	p->live = q;
	return q;
}

void
preq_put(preq *q)
{
	proxy *p = q->p;

	forward_cancel(q);
	gateway_release(q);
	event_del(q->watch);
	if (q->conn != NULL)
		evhttp_connection_set_closecb(q->conn, NULL, NULL);
	q->conn = NULL;
	q->req = NULL;
	sg_request_release(&q->sr);
	if (q->gen != NULL)
		gen_unref(q->gen);
	q->gen = NULL;
	evbuffer_drain(q->chunk, evbuffer_get_length(q->chunk));
	q->phase = PQ_FREE;
	if (q->prev != NULL)
		q->prev->next = q->next;
	else
		p->live = q->next;
	if (q->next != NULL)
		q->next->prev = q->prev;
	q->prev = NULL;
	q->next = p->free_reqs;
	p->free_reqs = q;
}

void
preq_finish(preq *q, int status)
{
	proxy *p = q->p;

	otlp_span_int(&q->span, "http.status_code", status);
	otlp_span_int(&q->span, "routing.retry_attempts", q->waits);
	otlp_span_int(&q->span, "proxy.attempt", q->attempts);
	otlp_span_end(&q->span);
	otlp_span_end(&q->aspan);
	p->inflight--;
	p->served++;
	sg_series_add(sg_metric_series(p->m.inflight, NULL), -1);
	preq_put(q);
	worker_maybe_exit(p);
}

int
preq_exclude(preq *q, const char *id)
{
	if (q->nexcl == q->excap) {
		size_t cap = q->excap == 0 ? 8 : q->excap * 2;
		const char **n;

		if (cap > SG_MAX_EXCLUDED)
			return -1;
		if ((n = realloc(q->excl, cap * sizeof(*n))) == NULL)
			return -1;
		q->excl = n;
		q->excap = cap;
	}
	q->excl[q->nexcl++] = id;
	return 0;
}

static void
release_resv(preq *q)
{
	if (q->resv != 0)
		sg_fleet_release(q->p->fleet, q->fidx, q->resv);
	q->resv = 0;
}

void
forward_cancel(preq *q)
{
	if (q->x != NULL) {
		xfer_put(q->x);
		q->x = NULL;
	}
	if (q->hx != NULL) {
		h1_cancel(q->hx);	/* closes the connection: the engine
					 * stops work nobody will read */
		q->hx = NULL;
	}
	if (q->hdrs != NULL)
		curl_slist_free_all(q->hdrs);
	q->hdrs = NULL;
	release_resv(q);
	gateway_cancel(q);
	evtimer_del(q->timer);
}

/*
 * Close the client connection (a reply cut short must not look whole).
 * What is already queued for the client goes out first, in one
 * non-blocking write (a client that is not reading loses the rest): the
 * head and the events the engine did send are the client's, only the end
 * of the chunked body is missing.
 */
void
forward_abort_client(preq *q)
{
	struct evhttp_connection *c = q->conn;
	struct bufferevent *bev;
	struct evbuffer *out;
	evutil_socket_t fd;

	if (c != NULL) {
		evhttp_connection_set_closecb(c, NULL, NULL);
		q->conn = NULL;
		q->req = NULL;
		if ((bev = evhttp_connection_get_bufferevent(c)) != NULL &&
		    (fd = bufferevent_getfd(bev)) >= 0) {
			out = bufferevent_get_output(bev);
			/* the socket bufferevent keeps its start frozen */
			evbuffer_unfreeze(out, 1);
			(void)evbuffer_write(out, fd);
		}
		evhttp_connection_free(c);
	}
}

void
forward_close_client(struct evhttp_connection *c, void *arg)
{
	preq *q = arg;
	sg_log_rec r;

	(void)c;
	sg_log_begin(&r, q->p->log, SG_LOG_INFO, wall_s(),
	    "client went away");
	sg_log_str(&r, "request_id", q->sr.request_id);
	sg_log_u64(&r, "attempts", q->attempts);
	sg_log_end(&r);
	forward_cancel(q);
	/*
	 * A client that went away while we still owed it an answer leaves
	 * the request detached from its connection: it is ours to free.
	 * At shutdown the request is still attached and libevent frees it.
	 */
	if (q->req != NULL && evhttp_request_get_connection(q->req) == NULL)
		evhttp_request_free(q->req);
	q->req = NULL;
	q->conn = NULL;
	metrics_request(q, q->cur != NULL ? q->cur->cs->id : "", 499);
	preq_finish(q, 499);
}

/* --- the attempt ------------------------------------------------------------------ */

static int
add_header(preq *q, const char *line)
{
	struct curl_slist *n = curl_slist_append(q->hdrs, line);

	if (n == NULL)
		return -1;
	q->hdrs = n;
	return 0;
}

static int
build_headers(preq *q)
{
	struct evkeyvalq *in = evhttp_request_get_input_headers(q->req);
	struct evkeyval *kv;
	bool ctype = false, accept = false;
	char *buf = q->p->hbuf;
	size_t i;
	size_t cap = q->p->hbufcap;
	char tp[OTLP_TRACEPARENT_LEN + 1];

	TAILQ_FOREACH(kv, in, next) {
		size_t nl = strlen(kv->key);

		if (header_forbidden(kv->key, nl) ||
		    (q->gw.on && !gateway_client_header_passes(kv->key)))
			continue;
		if (strcasecmp(kv->key, "content-type") == 0)
			ctype = true;
		else if (strcasecmp(kv->key, "accept") == 0)
			accept = true;
		if ((size_t)snprintf(buf, cap, "%s: %s", kv->key, kv->value) >=
		    cap)
			continue;	/* cannot happen: headers are bounded */
		if (add_header(q, buf) != 0)
			return -1;
	}
	for (i = 0; q->gw.on && i < q->gw.gh.n; i++) {
		const sg_header *h = &q->gw.gh.h[i];

		if (header_forbidden(h->name, strlen(h->name)))
			continue;
		snprintf(buf, cap, "%s: %s", h->name, h->value);
		if (add_header(q, buf) != 0)
			return -1;
	}
	/* curl's own defaults would add headers the client did not send. */
	if (add_header(q, "Expect:") != 0 ||
	    (!ctype && add_header(q, "Content-Type:") != 0) ||
	    (!accept && add_header(q, "Accept:") != 0))
		return -1;
	if (q->has_eq) {
		snprintf(buf, cap, "x-stargate-expected-queue-ms: %llu",
		    (unsigned long long)q->eq_ms);
		if (add_header(q, buf) != 0)
			return -1;
	}
	otlp_span_traceparent(&q->aspan, tp);
	snprintf(buf, cap, "traceparent: %s", tp);
	return add_header(q, buf);
}

/* Header value as the start of a trimmed token (NUL-terminated copy). */
static void
copy_trimmed(char *dst, size_t cap, const char *v, size_t n)
{
	sg_trim(&v, &n);
	if (n >= cap)
		n = cap - 1;
	memcpy(dst, v, n);
	dst[n] = '\0';
}

/* A retry reason used as a label must be a short plain token. */
static const char *
reason_label(const char *s)
{
	size_t i;

	if (s[0] == '\0')
		return "retryable_upstream_response";
	for (i = 0; s[i] != '\0'; i++)
		if (!(isalnum((unsigned char)s[i]) || s[i] == '_' ||
		    s[i] == '-' || s[i] == '.') || i >= 48)
			return "other";
	return s;
}

static void
start_reply(preq *q)
{
	struct evkeyvalq *out = evhttp_request_get_output_headers(q->req);
	double now = mono_ms();
	char res[32];
	int status = q->ustatus;

	if (q->gw.on)
		status = gateway_reply_start(q, q->ustatus, q->cur->cs->id);
	else if (evhttp_add_header(out, "x-stargate-cluster-id",
	    q->cur->cs->id) != 0)
		q->oom = true;
	if (q->close_after && evhttp_add_header(out, "Connection", "close") != 0)
		q->oom = true;
	if (q->oom)
		return;		/* not started: the caller answers 502 */
	q->phase = PQ_STREAMING;
	snprintf(res, sizeof(res), "upstream_%d", q->ustatus);
	metrics_attempt(q, q->cur->cs->id, res);
	metrics_proxy_duration(q, q->cur->cs->id, (now - q->t0) / 1000.0);
	otlp_span_int(&q->aspan, "proxy.upstream_status", q->ustatus);
	otlp_span_double(&q->aspan, "proxy.time_to_first_byte_ms",
	    now - q->attempt_t0);
	if (q->gw.on)
		gateway_send_start(q, status, q->ureason[0] != '\0' &&
		    status == q->ustatus ? q->ureason : http_reason(status));
	else
		evhttp_send_reply_start(q->req, status, q->ureason[0] != '\0' ?
		    q->ureason : http_reason(status));
}

/* The upstream headers are complete: pass them on, or refuse and retry. */
static void
headers_done(preq *q)
{
	bool retryable = (q->ustatus == 429 || q->ustatus == 503) &&
	    q->u_retryable;

	q->uheaders_done = true;
	if (retryable && route_retry_allowed(q)) {
		q->discard = true;
		return;
	}
	if (retryable)
		metrics_exhausted(q, q->retries >= q->p->conf->max_retries ?
		    reason_label(q->retry_reason) : "retry_budget_exhausted");
	start_reply(q);
}

static void
status_line(preq *q, const char *s, size_t n)
{
	const char *sp = memchr(s, ' ', n);
	size_t rest;
	int code = 0, i;

	if (sp == NULL)
		return;
	sp++;
	rest = n - (size_t)(sp - s);
	for (i = 0; i < 3 && (size_t)i < rest && isdigit((unsigned char)sp[i]);
	    i++)
		code = code * 10 + (sp[i] - '0');
	q->ustatus = i == 3 ? code : 502;
	if ((size_t)i < rest)
		copy_trimmed(q->ureason, sizeof(q->ureason), sp + i,
		    rest - (size_t)i);
	else
		q->ureason[0] = '\0';
	/* A new response (after 1xx): forget what the last one said. */
	q->u_retryable = false;
	q->retry_reason[0] = '\0';
	if (q->req != NULL)
		evhttp_clear_headers(evhttp_request_get_output_headers(q->req));
}

static size_t
on_header(char *ptr, size_t size, size_t nitems, void *arg)
{
	preq *q = arg;
	size_t len = size * nitems, n = len, nl, vl;
	const char *colon, *v;
	char *buf = q->p->hbuf;

	q->last_data_ms = mono_ms();
	q->got_bytes = true;
	while (n > 0 && (ptr[n - 1] == '\n' || ptr[n - 1] == '\r'))
		n--;
	if (n >= 5 && strncmp(ptr, "HTTP/", 5) == 0) {
		status_line(q, ptr, n);
		return len;
	}
	if (n == 0) {
		if (q->ustatus >= 100 && q->ustatus < 200)
			return len;	/* interim response: wait for the next */
		if (q->req != NULL)
			headers_done(q);
		return len;
	}
	if ((colon = memchr(ptr, ':', n)) == NULL || q->req == NULL)
		return len;
	nl = (size_t)(colon - ptr);
	v = colon + 1;
	vl = n - nl - 1;
	sg_trim(&v, &vl);
	if (nl == 20 && strncasecmp(ptr, "x-stargate-retryable", 20) == 0)
		q->u_retryable = vl == 4 && strncasecmp(v, "true", 4) == 0;
	else if (nl == 23 && strncasecmp(ptr, "x-stargate-retry-reason",
	    23) == 0)
		copy_trimmed(q->retry_reason, sizeof(q->retry_reason), v, vl);
	if (q->gw.on && nl == 21 && strncasecmp(ptr, "x-stargate-error-code",
	    21) == 0) {
		q->gw.uerrcodes++;
		q->gw.uoverloaded = vl == 16 &&
		    strncmp(v, "overloaded_error", 16) == 0;
	}
	if (nl == 0 || response_forbidden(ptr, nl) ||
	    (q->gw.on && !gateway_response_passes(q, ptr, nl)) ||
	    nl + vl + 2 > q->p->hbufcap)
		return len;
	memcpy(buf, ptr, nl);
	buf[nl] = '\0';
	memcpy(buf + nl + 1, v, vl);
	buf[nl + 1 + vl] = '\0';
	evhttp_add_header(evhttp_request_get_output_headers(q->req), buf,
	    buf + nl + 1);
	return len;
}

void
forward_on_written(struct evhttp_connection *c, void *arg)
{
	preq *q = arg;

	if (q->conn == c && q->paused && q->hx != NULL) {
		q->paused = false;
		q->last_data_ms = mono_ms();
		h1_resume(q->hx);
	} else if (q->conn == c && q->paused && q->x != NULL) {
		q->paused = false;
		q->last_data_ms = mono_ms();
		curl_easy_pause(q->x->easy, CURLPAUSE_CONT);
	}
}

static size_t
on_body(char *ptr, size_t size, size_t nitems, void *arg)
{
	preq *q = arg;
	size_t len = size * nitems;
	struct bufferevent *bev;

	q->last_data_ms = mono_ms();
	if (q->discard)
		return len;
	if (q->phase != PQ_STREAMING || q->req == NULL || q->conn == NULL)
		return 0;		/* abort: nowhere to send it */
	bev = evhttp_connection_get_bufferevent(q->conn);
	if (bev != NULL &&
	    evbuffer_get_length(bufferevent_get_output(bev)) > PROXY_HWM) {
		q->paused = true;
		return CURL_WRITEFUNC_PAUSE;
	}
	evbuffer_add(q->chunk, ptr, len);
	evhttp_send_reply_chunk_with_cb(q->req, q->chunk,
	    forward_on_written, q);
	return len;
}

static bool
transport_retryable(preq *q, CURLcode cc)
{
	if (q->got_bytes)
		return false;
	switch (cc) {
	case CURLE_COULDNT_CONNECT:
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_OPERATION_TIMEDOUT:
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
	case CURLE_GOT_NOTHING:
		return true;
	default:
		return false;
	}
}

static void
log_attempt_error(preq *q, const char *msg, const char *error)
{
	sg_log_rec r;

	sg_log_begin(&r, q->p->log, SG_LOG_WARN, wall_s(), msg);
	sg_log_str(&r, "request_id", q->sr.request_id);
	sg_log_str(&r, "cluster_id", q->cur != NULL ? q->cur->cs->id : "");
	sg_log_str(&r, "error", error);
	sg_log_u64(&r, "attempt", q->attempts);
	sg_log_end(&r);
}

/* Forget the upstream headers gathered for a reply that will not come. */
static void
reset_output_headers(preq *q)
{
	if (q->req != NULL)
		evhttp_clear_headers(evhttp_request_get_output_headers(q->req));
}

/* The attempt is over without a reply: retry or answer 502. */
static void
attempt_failed(preq *q, bool again, const char *error)
{
	reset_output_headers(q);
	log_attempt_error(q, "upstream attempt failed", error);
	metrics_attempt(q, q->cur->cs->id, "proxy_502");
	otlp_span_status(&q->aspan, OTLP_STATUS_ERROR, "transport error");
	otlp_span_end(&q->aspan);
	forward_cancel(q);
	if (again && route_retry_allowed(q)) {
		route_retry(q, "connect_failover");
		return;
	}
	if (again)
		metrics_exhausted(q, q->retries >= q->p->conf->max_retries ?
		    "connect_retries_exhausted" : "retry_budget_exhausted");
	route_fail(q, 502, "upstream_error", "upstream request failed");
}

/*
 * The answer broke off after its head (transport error, malformed framing
 * or idle timeout), counted as attempt result proxy_<status>.  A reply the
 * client has not seen a byte of (the all role holds a unary JSON reply to
 * rewrite it whole) is still answered status/code; else what came goes
 * out and the client connection is closed without the final chunk.
 */
static void
reply_cut(preq *q, int status, const char *code, const char *msg)
{
	int ustatus = q->ustatus;
	char res[16];

	snprintf(res, sizeof(res), "proxy_%d", status);
	metrics_attempt(q, q->cur->cs->id, res);
	if (q->gw.on && q->gw.held) {
		q->gw.held = false;
		forward_cancel(q);
		reset_output_headers(q);
		route_fail(q, status, code, msg);
		return;
	}
	if (q->gw.on && q->req != NULL && q->conn != NULL)
		gateway_emit(q, NULL, 0, true);
	forward_cancel(q);
	forward_abort_client(q);
	metrics_request(q, q->cur->cs->id, ustatus);
	preq_finish(q, ustatus);
}

/* The attempt's transfer ended (ok: a complete response); retryable: a
 * transport error before any response byte. */
static void
attempt_over(preq *q, bool ok, bool retryable, const char *error)
{
	char res[32];
	int status = q->ustatus;

	if (q->discard) {
		/* a retryable refusal, drained */
		snprintf(res, sizeof(res), "upstream_%d", q->ustatus);
		metrics_attempt(q, q->cur->cs->id, res);
		otlp_span_int(&q->aspan, "proxy.upstream_status", q->ustatus);
		otlp_span_end(&q->aspan);
		forward_cancel(q);
		reset_output_headers(q);
		route_retry(q, reason_label(q->retry_reason));
		return;
	}
	if (q->phase != PQ_STREAMING) {
		attempt_failed(q, retryable, ok ? "incomplete response" : error);
		return;
	}
	if (!ok) {
		log_attempt_error(q, "upstream reply cut short", error);
		reply_cut(q, 502, "upstream_error", "upstream request failed");
		return;
	}
	if (q->gw.on && q->req != NULL)
		gateway_emit(q, NULL, 0, true);
	if (q->oom) {
		log_attempt_error(q, "reply not queued", "out of memory");
		reply_cut(q, 502, "upstream_error", "upstream request failed");
		return;
	}
	forward_cancel(q);
	if (q->req != NULL) {
		worker_track_reply(q->req);
		evhttp_send_reply_end(q->req);
	}
	metrics_request(q, q->cur->cs->id, status);
	otlp_span_end(&q->aspan);
	preq_finish(q, status);
}

static void
on_done(xfer *x, CURLcode cc)
{
	preq *q = x->owner;

	attempt_over(q, cc == CURLE_OK, transport_retryable(q, cc),
	    x->errbuf[0] != '\0' ? x->errbuf : curl_easy_strerror(cc));
}

/* --- the native client (h1.c) --------------------------------------------------- */

/* One "name: value\r\n" line onto the request's header block. */
int
forward_hblk_add(preq *q, const char *name, size_t nl, const char *v, size_t vl)
{
	size_t need = q->hblen + nl + vl + 4;

	if (need > q->hbcap) {
		size_t cap = q->hbcap == 0 ? 4096 : q->hbcap;
		char *n;

		while (cap < need)
			cap *= 2;
		if ((n = realloc(q->hblk, cap)) == NULL)
			return -1;
		q->hblk = n;
		q->hbcap = cap;
	}
	memcpy(q->hblk + q->hblen, name, nl);
	q->hblen += nl;
	q->hblk[q->hblen++] = ':';
	q->hblk[q->hblen++] = ' ';
	memcpy(q->hblk + q->hblen, v, vl);
	q->hblen += vl;
	q->hblk[q->hblen++] = '\r';
	q->hblk[q->hblen++] = '\n';
	return 0;
}

/* The engine's header block: what build_headers passes to curl, minus
 * curl's workarounds (h1 adds Host, Content-Length and Connection only). */
static int
native_headers(preq *q)
{
	struct evkeyvalq *in = evhttp_request_get_input_headers(q->req);
	struct evkeyval *kv;
	char tp[OTLP_TRACEPARENT_LEN + 1], num[24];
	int n;

	q->hblen = 0;
	if (q->gw.on) {
		if (gateway_engine_headers(q) != 0)
			return -1;
	} else
		TAILQ_FOREACH(kv, in, next) {
			size_t nl = strlen(kv->key);

			if (header_forbidden(kv->key, nl))
				continue;
			if (forward_hblk_add(q, kv->key, nl, kv->value,
			    strlen(kv->value)) != 0)
				return -1;
		}
	if (q->has_eq) {
		n = snprintf(num, sizeof(num), "%llu",
		    (unsigned long long)q->eq_ms);
		if (forward_hblk_add(q, "x-stargate-expected-queue-ms", 28, num,
		    (size_t)n) != 0)
			return -1;
	}
	otlp_span_traceparent(&q->aspan, tp);
	return forward_hblk_add(q, "traceparent", 11, tp, strlen(tp));
}

/* The cluster's address (resolved by forward_prepare; looked up again
 * only if a reload changed the URL since). */
static h1_upstream *
native_upstream(proxy *p, const pcl *cl)
{
	cstate *cs = cl->cs;

	if (cs->h1up != NULL && h1_upstream_matches(cs->h1up, cl->def->url))
		return cs->h1up;
	cs->h1up = NULL;
	if (h1_upstream_get(p->h1, cl->def->url, &cs->h1up) != 0)
		cs->h1up = NULL;
	return cs->h1up;
}

void
forward_prepare(proxy *p)
{
	size_t i;

	if (p->h1 == NULL || p->gen == NULL)
		return;
	for (i = 0; i < p->gen->n; i++)
		(void)native_upstream(p, &p->gen->cl[i]);
}

static int
n_headers(void *arg, const h1_resp *r)
{
	preq *q = arg;
	struct evkeyvalq *out;
	char *buf = q->p->hbuf;
	size_t i;

	q->last_data_ms = mono_ms();
	q->got_bytes = true;
	q->ustatus = r->status;
	copy_trimmed(q->ureason, sizeof(q->ureason), r->reason, r->reason_len);
	q->u_retryable = false;
	q->retry_reason[0] = '\0';
	if (q->req == NULL)
		return H1_CONTINUE;	/* n_data ends it */
	if (q->gw.on)
		gateway_note_headers(q, r);
	out = evhttp_request_get_output_headers(q->req);
	for (i = 0; i < r->nheaders; i++) {
		const h1_header *h = &r->headers[i];
		size_t nl = h->name_len, vl = h->value_len;

		if (nl == 20 && strncasecmp(h->name, "x-stargate-retryable",
		    20) == 0)
			q->u_retryable = vl == 4 &&
			    strncasecmp(h->value, "true", 4) == 0;
		else if (nl == 23 && strncasecmp(h->name,
		    "x-stargate-retry-reason", 23) == 0)
			copy_trimmed(q->retry_reason, sizeof(q->retry_reason),
			    h->value, vl);
		if (response_forbidden(h->name, nl) ||
		    (q->gw.on && !gateway_response_passes(q, h->name, nl)) ||
		    nl + vl + 2 > q->p->hbufcap)
			continue;
		memcpy(buf, h->name, nl);
		buf[nl] = '\0';
		memcpy(buf + nl + 1, h->value, vl);
		buf[nl + 1 + vl] = '\0';
		if (evhttp_add_header(out, buf, buf + nl + 1) != 0)
			q->oom = true;
	}
	if (!q->oom)
		headers_done(q);
	if (q->oom) {
		/* out of memory: a reply without its headers is not the
		 * engine's; nothing was sent, so the client gets a 502 */
		h1_cancel(q->hx);
		q->hx = NULL;
		attempt_over(q, false, false, "out of memory");
		return H1_ABORT;
	}
	return q->discard ? H1_DISCARD : H1_CONTINUE;
}

static void
n_data(void *arg, const char *ptr, size_t len)
{
	preq *q = arg;

	q->last_data_ms = mono_ms();
	if (q->phase != PQ_STREAMING || q->req == NULL || q->conn == NULL) {
		h1_cancel(q->hx);	/* nowhere to send it */
		q->hx = NULL;
		attempt_over(q, false, false, "client gone");
		return;
	}
	if (q->gw.on)
		gateway_emit(q, ptr, len, false);
	else if (forward_chunk_add(q, ptr, len) == 0)
		forward_send_chunk(q);
	if (q->oom) {
		/* out of memory: a body with a hole must not look whole */
		h1_cancel(q->hx);
		q->hx = NULL;
		attempt_over(q, false, false, "out of memory");
	}
}

int
forward_chunk_add(preq *q, const void *p, size_t n)
{
	if (n > 0 && evbuffer_add(q->chunk, p, n) != 0) {
		q->oom = true;
		return -1;
	}
	return 0;
}

void
forward_send_chunk(preq *q)
{
	struct bufferevent *bev;

	evhttp_send_reply_chunk_with_cb(q->req, q->chunk,
	    forward_on_written, q);
	bev = q->conn != NULL ? evhttp_connection_get_bufferevent(q->conn) :
	    NULL;
	if (bev != NULL && q->hx != NULL &&
	    evbuffer_get_length(bufferevent_get_output(bev)) > PROXY_HWM) {
		q->paused = true;
		h1_pause(q->hx);
	}
}

static void
n_done(void *arg, int err)
{
	preq *q = arg;

	q->hx = NULL;			/* released by h1 */
	attempt_over(q, err == H1_OK, !q->got_bytes &&
	    (err == H1_ECONNREFUSED || err == H1_ECONNTIMEDOUT ||
	    err == H1_ERESET), h1_strerror(err));
}

static const h1_cbs native_cbs = { n_headers, n_data, n_done };

/* Start the attempt on the native client: 0, or -1 (out of memory). */
static int
native_start(preq *q, const pcl *cl, const unsigned char *body,
    size_t blen)
{
	proxy *p = q->p;
	const char *uri = evhttp_request_get_uri(q->req);
	h1_upstream *u;
	h1_req r;

	if (native_headers(q) != 0)
		return -1;
	if ((u = native_upstream(p, cl)) == NULL) {
		/* a name that does not resolve: a connect error */
		attempt_over(q, false, true, "cannot resolve the cluster URL");
		return 0;
	}
	memset(&r, 0, sizeof(r));
	r.method = "POST";
	r.prefix = h1_url_path(cl->def->url, &r.prefix_len);
	r.target = uri;
	r.target_len = strlen(uri);
	r.hdrs = q->hblk;
	r.hdrs_len = q->hblen;
	r.body = body;
	r.body_len = blen;
	if ((q->hx = h1_start(p->h1, u, &r, &native_cbs, q)) == NULL)
		return -1;
	return 0;
}

void
forward_idle_check(preq *q)
{
	double now = mono_ms(), idle = now - q->last_data_ms;
	double limit = (double)q->p->conf->upstream_timeout_ms;
	struct timeval tv;
	sg_log_rec r;

	if (q->paused || idle < limit) {
		ms_to_tv(q->paused ? limit : limit - idle, &tv);
		evtimer_add(q->timer, &tv);
		return;
	}
	sg_log_begin(&r, q->p->log, SG_LOG_WARN, wall_s(),
	    "upstream idle timeout");
	sg_log_str(&r, "request_id", q->sr.request_id);
	sg_log_str(&r, "cluster_id", q->cur->cs->id);
	sg_log_end(&r);
	otlp_span_status(&q->aspan, OTLP_STATUS_ERROR, "idle timeout");
	if (q->phase == PQ_STREAMING) {
		reply_cut(q, 504, "upstream_timeout", "upstream timed out");
		return;
	}
	metrics_attempt(q, q->cur->cs->id, "proxy_504");
	forward_cancel(q);
	reset_output_headers(q);
	route_fail(q, 504, "upstream_timeout", "upstream timed out");
}

void
forward_start(preq *q, const pcl *cl, size_t fidx)
{
	proxy *p = q->p;
	struct evbuffer *body = evhttp_request_get_input_buffer(q->req);
	size_t blen = q->gw.on ? q->gw.blen : evbuffer_get_length(body);
	const char *uri = evhttp_request_get_uri(q->req);
	size_t ulen = strlen(uri), need = cl->url_len + ulen + 1;
	unsigned char *bp = q->gw.on ? (unsigned char *)q->gw.body :
	    blen > 0 ? evbuffer_pullup(body, -1) : NULL;
	double now = mono_ms();
	struct timeval tv;
	CURL *e;

	q->cur = cl;
	q->fidx = fidx;
	q->attempts++;
	q->phase = PQ_UPSTREAM;
	q->ustatus = 0;
	q->ureason[0] = '\0';
	q->uheaders_done = q->discard = q->paused = q->got_bytes = false;
	q->u_retryable = false;
	q->retry_reason[0] = '\0';
	q->attempt_t0 = q->last_data_ms = now;
	q->resv = sg_fleet_reserve(p->fleet, fidx, q->sr.input_tokens,
	    q->sr.priority, now);
	otlp_span_start(p->otlp, &q->aspan, OTLP_SPAN_ATTEMPT,
	    OTLP_KIND_CLIENT, &q->span.ctx);
	otlp_span_str(&q->aspan, "selected_cluster.id", cl->cs->id);
	otlp_span_str(&q->aspan, "routing.algorithm", q->alg);
	otlp_span_bool(&q->span, "proxy.queue.expected_present", q->has_eq);
	if (q->has_eq)
		otlp_span_int(&q->span, "proxy.queue.expected_ms",
		    (int64_t)q->eq_ms);
	otlp_span_int(&q->span, "proxy.replay_body_bytes", (int64_t)blen);
	if (p->h1 != NULL) {
		/* armed first: native_start may end the attempt at once */
		ms_to_tv((double)p->conf->upstream_timeout_ms, &tv);
		evtimer_add(q->timer, &tv);
		metrics_replay(q, blen);
		if (native_start(q, cl, bp, blen) != 0)
			goto fail;
		return;
	}
	if (need > q->urlcap) {
		char *u = realloc(q->url, need);

		if (u == NULL)
			goto fail;
		q->url = u;
		q->urlcap = need;
	}
	memcpy(q->url, cl->def->url, cl->url_len);
	memcpy(q->url + cl->url_len, uri, ulen + 1);
	if (build_headers(q) != 0 || (q->x = xfer_get(p)) == NULL)
		goto fail;
	metrics_replay(q, blen);
	e = q->x->easy;
	q->x->owner = q;
	q->x->done = on_done;
	curl_easy_setopt(e, CURLOPT_URL, q->url);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, q->hdrs);
	curl_easy_setopt(e, CURLOPT_POST, 1L);
	curl_easy_setopt(e, CURLOPT_POSTFIELDS, bp != NULL ? (char *)bp : "");
	curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)blen);
	curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(e, CURLOPT_HEADERDATA, q);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, q);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS,
	    (long)p->conf->connect_timeout_ms);
	if (xfer_start(q->x) != 0)
		goto fail;
	ms_to_tv((double)p->conf->upstream_timeout_ms, &tv);
	evtimer_add(q->timer, &tv);
	return;
fail:
	forward_cancel(q);
	metrics_request(q, cl->cs->id, 500);
	if (q->req != NULL)
		http_send_error(q->req, 500, "internal_error", "out of memory");
	preq_finish(q, 500);
}
