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
 * One helper (forward_client_headers) copies the client's fields with a
 * pass predicate for every header block (engine, role all, gateway to
 * router).  The body is h1s_body: contiguous and stable until the request
 * is freed, so a retry replays it as is (no copy).
 *
 * Response: the upstream status line and its headers, filtered by the same
 * list (forward_copy_response, with the gateway's predicate on the gateway
 * edge), plus x-stargate-cluster-id; the upstream's Content-Length becomes
 * the reply's framing (h1s writes the framing fields itself), so a unary
 * reply is not re-chunked.  The reply starts when the upstream headers are
 * complete; body bytes are passed on as they arrive (SSE included).
 * A 429/503 with x-stargate-retryable: true while the retry budget lasts
 * is not passed on: its body is drained (so the connection is reused), the
 * reservation released, the cluster excluded, and route.c decides again.
 * A transport error before any response byte is retried the same way
 * (reason connect_failover); with no budget left it is a 502.
 *
 * Backpressure: when h1s holds more than PROXY_HWM unsent bytes for the
 * client, the transfer is paused (native: h1_pause once the chunk is
 * queued, the kernel keeps the rest; curl: CURL_WRITEFUNC_PAUSE, curl
 * keeps the bytes); h1s_on_drain resumes it once the client has read
 * everything queued.
 *
 * Timeouts: connect (--connect-timeout-ms) by the client; idle (no upstream byte
 * for --upstream-timeout-ms, not counting time paused for a slow client)
 * by the request's timer: 504 before the reply started, else the client
 * connection is closed (a truncated reply must not look complete).
 *
 * A client that goes away (h1s on_close, which h1s watches for during
 * routing waits too) cancels the transfer and releases the reservation;
 * the request context never touches the h1s request again.
 *
 * Role all (q->gw.on): the engine's headers are the client's that pass the
 * gateway (its own headers and x-request-id replaced by the trusted ones)
 * plus the trusted headers a remote router would pass on; the body is the
 * gateway's rewritten copy; the response head and body go through the
 * gateway's hygiene and rewrite (gateway.c), and x-stargate-cluster-id
 * is not added (the selection is written to the store instead).
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <event2/event.h>

#include "proxy.h"

/* --- header filtering --------------------------------------------------------- */

/*
 * The dropped names with their lengths: a field is compared only with the
 * names of its own length (most fields match none), so filtering a header
 * list costs a length test per entry, not a string compare.
 */
struct hname {
	const char	*s;
	size_t		 n;
};
#define HN(lit)	{ lit, sizeof(lit) - 1 }

static const struct hname common_drop[] = {
	HN("connection"), HN("proxy-connection"), HN("keep-alive"),
	HN("transfer-encoding"), HN("te"), HN("trailer"), HN("upgrade"),
	HN("host"), HN("x-routing-method"), HN("x-stargate-retryable"),
	HN("x-stargate-retry-reason"), HN("x-stargate-retry-after-ms"),
	HN("x-stargate-expected-queue-ms"), HN("x-stargate-error-code"),
	{ NULL, 0 },
};
static const struct hname request_drop[] = {
	HN("content-length"), HN("expect"), HN("x-stargate-last-cluster-id"),
	HN("traceparent"), { NULL, 0 },
};
static const struct hname response_drop[] = {
	HN("x-stargate-cluster-id"), HN("content-length"), HN("date"),
	{ NULL, 0 },
};

static bool
in_list(const struct hname *l, const char *name, size_t len)
{
	/* the listed names are lower case and start with a letter: the
	 * first byte, folded, tells most same-length names apart */
	for (; l->s != NULL; l++)
		if (l->n == len && ((unsigned char)name[0] | 0x20) ==
		    (unsigned char)l->s[0] && strncasecmp(l->s, name, len) == 0)
			return true;
	return false;
}

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

preq *
preq_get(proxy *p)
{
	preq *q = p->free_reqs;

	if (q != NULL)
		p->free_reqs = q->next;
	else {
		if ((q = calloc(1, sizeof(*q))) == NULL)
			return NULL;
		if ((q->timer = evtimer_new(p->base, route_on_timer, q)) ==
		    NULL) {
			free(q);
			return NULL;
		}
	}
	q->p = p;
	q->req = NULL;
	q->gen = NULL;
	q->model = NULL;
	q->t0 = mono_ms();
	q->now_ms = 0;
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
	q->ulen = -1;
	q->ob.len = 0;
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
	/* still holding the client request: its answer was never ended */
	forward_abort_client(q);
	sg_request_release(&q->sr);
	if (q->gen != NULL)
		gen_unref(q->gen);
	q->gen = NULL;
	q->ob.len = 0;
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
	sg_series_add(p->inflight_s, -1);
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

/* Close the client connection (a reply cut short must not look whole);
 * the request context lets go of the h1s request. */
void
forward_abort_client(preq *q)
{
	h1s_req *r = q->req;

	if (r == NULL)
		return;
	q->req = NULL;
	h1s_on_drain(r, NULL, NULL);
	h1s_on_complete(r, NULL, NULL);
	h1s_on_close(r, NULL, NULL);
	h1s_abort(r);
}

/* The final reply was ended: h1s writes it, the worker counts it. */
static void
reply_done(preq *q)
{
	worker_track_reply(q->req);
	h1s_reply_end(q->req);
	q->req = NULL;
}

void
forward_close_client(h1s_req *hr, void *arg)
{
	preq *q = arg;
	sg_log_rec r;

	(void)hr;
	sg_log_begin(&r, q->p->log, SG_LOG_INFO, wall_s(),
	    "client went away");
	sg_log_str(&r, "request_id", q->sr.request_id);
	sg_log_u64(&r, "attempts", q->attempts);
	sg_log_end(&r);
	forward_cancel(q);
	q->req = NULL;			/* h1s frees it when we return */
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
	const h1s_header *in;
	bool ctype = false, accept = false;
	char *buf = q->p->hbuf;
	size_t i, nin;
	size_t cap = q->p->hbufcap;
	char tp[OTLP_TRACEPARENT_LEN + 1];

	in = h1s_headers(q->req, &nin);
	for (i = 0; i < nin; i++) {
		const h1s_header *h = &in[i];

		if (header_forbidden(h->name, h->name_len) || (q->gw.on &&
		    !gateway_client_header_passes(h->name, h->name_len)))
			continue;
		if (strcasecmp(h->name, "content-type") == 0)
			ctype = true;
		else if (strcasecmp(h->name, "accept") == 0)
			accept = true;
		if ((size_t)snprintf(buf, cap, "%s: %s", h->name, h->value) >=
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
	double now = mono_ms();
	char res[32];
	int status = q->ustatus;

	if (q->gw.on)
		status = gateway_reply_start(q, q->ustatus, q->cur->cs->id);
	else if (h1s_add_header(q->req, "x-stargate-cluster-id",
	    q->cur->cs->id) != 0)
		q->oom = true;
	if (q->oom)
		return;		/* not started: the caller answers 502 */
	if (q->close_after)
		h1s_set_close(q->req);
	q->phase = PQ_STREAMING;
	fmt_label(res, sizeof(res), "upstream_", (uint64_t)q->ustatus);
	metrics_attempt(q, q->cur->cs->id, res);
	metrics_proxy_duration(q, q->cur->cs->id, (now - q->t0) / 1000.0);
	otlp_span_int(&q->aspan, "proxy.upstream_status", q->ustatus);
	otlp_span_double(&q->aspan, "proxy.time_to_first_byte_ms",
	    now - q->attempt_t0);
	if (q->gw.on)
		gateway_send_start(q, status, q->ureason[0] != '\0' &&
		    status == q->ustatus ? q->ureason : http_reason(status));
	else
		h1s_reply_start(q->req, status, q->ureason[0] != '\0' ?
		    q->ureason : http_reason(status), q->ulen);
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
	q->ulen = -1;
	if (q->req != NULL)
		h1s_clear_headers(q->req);
}

static size_t
on_header(char *ptr, size_t size, size_t nitems, void *arg)
{
	preq *q = arg;
	size_t len = size * nitems, n = len, nl, vl;
	const char *colon, *v;
	uint64_t cl;

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
	else if (nl == 14 && strncasecmp(ptr, "content-length", 14) == 0 &&
	    sg_parse_u64(v, vl, INT64_MAX, &cl) == 0)
		q->ulen = (int64_t)cl;
	if (q->gw.on && nl == 21 && strncasecmp(ptr, "x-stargate-error-code",
	    21) == 0) {
		q->gw.uerrcodes++;
		q->gw.uoverloaded = vl == 16 &&
		    strncmp(v, "overloaded_error", 16) == 0;
	}
	if (nl == 0 || response_forbidden(ptr, nl) ||
	    (q->gw.on && !gateway_response_passes(q, ptr, nl)))
		return len;
	(void)h1s_add_header_n(q->req, ptr, nl, v, vl);
	return len;
}

/* h1s wrote everything queued for the client: resume the transfer. */
static void
on_client_drained(h1s_req *r, void *arg)
{
	preq *q = arg;

	(void)r;
	if (!q->paused)
		return;
	q->paused = false;
	q->last_data_ms = mono_ms();
	if (q->hx != NULL)
		h1_resume(q->hx);
	else if (q->x != NULL)
		curl_easy_pause(q->x->easy, CURLPAUSE_CONT);
}

static void
pause_for_client(preq *q)
{
	if (q->paused)
		return;
	q->paused = true;
	h1s_on_drain(q->req, on_client_drained, q);
}

static size_t
on_body(char *ptr, size_t size, size_t nitems, void *arg)
{
	preq *q = arg;
	size_t len = size * nitems;

	q->last_data_ms = mono_ms();
	if (q->discard)
		return len;
	if (q->phase != PQ_STREAMING || q->req == NULL)
		return 0;		/* abort: nowhere to send it */
	if (h1s_unsent(q->req) > PROXY_HWM) {
		pause_for_client(q);
		return CURL_WRITEFUNC_PAUSE;
	}
	(void)h1s_reply_chunk(q->req, ptr, len);
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
		h1s_clear_headers(q->req);
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
 * out (h1s_abort writes what is queued) and the client connection is
 * closed without the end of the body.
 */
static void
reply_cut(preq *q, int status, const char *code, const char *msg)
{
	int ustatus = q->ustatus;
	char res[16];

	fmt_label(res, sizeof(res), "proxy_", (uint64_t)status);
	metrics_attempt(q, q->cur->cs->id, res);
	if (q->gw.on && q->gw.held) {
		q->gw.held = false;
		forward_cancel(q);
		reset_output_headers(q);
		route_fail(q, status, code, msg);
		return;
	}
	if (q->gw.on && q->req != NULL)
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
		fmt_label(res, sizeof(res), "upstream_", (uint64_t)q->ustatus);
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
	if (q->req != NULL)
		reply_done(q);
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

int
forward_client_headers(preq *q, hdr_pass_fn pass)
{
	const h1s_header *h;
	size_t i, n;

	h = h1s_headers(q->req, &n);
	for (i = 0; i < n; i++)
		if (pass(h[i].name, h[i].name_len) &&
		    forward_hblk_add(q, h[i].name, h[i].name_len, h[i].value,
		    h[i].value_len) != 0)
			return -1;
	return 0;
}

static bool
engine_passes(const char *name, size_t len)
{
	return !header_forbidden(name, len);
}

/* The engine's header block: what build_headers passes to curl, minus
 * curl's workarounds (h1 adds Host, Content-Length and Connection only). */
static int
native_headers(preq *q)
{
	char tp[OTLP_TRACEPARENT_LEN + 1], num[24];
	size_t n;

	q->hblen = 0;
	if ((q->gw.on ? gateway_engine_headers(q) :
	    forward_client_headers(q, engine_passes)) != 0)
		return -1;
	if (q->has_eq) {
		n = fmt_label(num, sizeof(num), "", q->eq_ms);
		if (forward_hblk_add(q, "x-stargate-expected-queue-ms", 28, num,
		    n) != 0)
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

/*
 * The upstream head's status, reason, Content-Length and retry fields into
 * q; its fields that pass (pass(q, name, len)) onto the client reply.
 */
void
forward_copy_response(preq *q, const h1_resp *r,
    bool (*pass)(preq *q, const char *name, size_t nl))
{
	size_t i;

	q->last_data_ms = mono_ms();
	q->got_bytes = true;
	q->ustatus = r->status;
	q->ulen = r->content_length;
	copy_trimmed(q->ureason, sizeof(q->ureason), r->reason, r->reason_len);
	q->u_retryable = false;
	q->retry_reason[0] = '\0';
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
		if (q->req != NULL && pass(q, h->name, nl) &&
		    h1s_add_header_n(q->req, h->name, nl, h->value, vl) != 0)
			q->oom = true;
	}
}

/* Which engine response fields reach the client on the router path. */
static bool
response_passes(preq *q, const char *name, size_t nl)
{
	return !response_forbidden(name, nl) &&
	    (!q->gw.on || gateway_response_passes(q, name, nl));
}

static int
n_headers(void *arg, const h1_resp *r)
{
	preq *q = arg;

	if (q->req != NULL && q->gw.on)
		gateway_note_headers(q, r);
	forward_copy_response(q, r, response_passes);
	if (q->req == NULL)
		return H1_CONTINUE;	/* n_data ends it */
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
	if (q->phase != PQ_STREAMING || q->req == NULL) {
		h1_cancel(q->hx);	/* nowhere to send it */
		q->hx = NULL;
		attempt_over(q, false, false, "client gone");
		return;
	}
	if (q->gw.on)
		gateway_emit(q, ptr, len, false);
	else
		forward_send(q, ptr, len);
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
	if (n > 0 && pbuf_add(&q->ob, p, n) != 0) {
		q->oom = true;
		return -1;
	}
	return 0;
}

void
forward_send(preq *q, const char *ptr, size_t len)
{
	if (q->req == NULL)
		return;
	if (h1s_reply_chunk(q->req, ptr, len) > PROXY_HWM && q->hx != NULL) {
		pause_for_client(q);
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
	size_t ulen;
	const char *uri = h1s_target(q->req, &ulen);
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
	r.target_len = ulen;
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
	size_t blen, ulen;
	const char *cbody = h1s_body(q->req, &blen);
	const char *uri = h1s_target(q->req, &ulen);
	size_t need = cl->url_len + ulen + 1;
	const unsigned char *bp;
	double now = mono_ms();
	struct timeval tv;
	CURL *e;

	if (q->gw.on) {
		cbody = q->gw.send;
		blen = q->gw.blen;
	}
	bp = (const unsigned char *)cbody;
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
	curl_easy_setopt(e, CURLOPT_POSTFIELDS, bp != NULL ? (const char *)bp :
	    "");
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
	if (q->req != NULL) {
		http_send_error(q->req, 500, "internal_error", "out of memory");
		q->req = NULL;
	}
	preq_finish(q, 500);
}
