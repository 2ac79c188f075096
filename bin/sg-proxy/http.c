/*
 * http.c — sg-proxy's endpoints (sg-proxy(8), stargate-headers(7)).
 *
 *   POST /v1/chat/completions, /v1/completions, /v1/responses,
 *        /v1/embeddings          routed (route.c, forward.c)
 *   GET  /v1/models              {"object":"list","data":[{"id","object"}]}
 *                                (gateway edge: gateway_models)
 *   GET  /healthz                200 ok
 *   GET  /readyz                 200 once every cluster had fresh stats or
 *                                --ready-timeout-ms passed; 503 draining;
 *                                on the gateway edge also 503 while the
 *                                router is not ready (gwpoll.c) or the
 *                                store did not open
 *   GET  /metrics                Prometheus text 0.0.4
 *   GET  /debug/state            loopback peers only: clusters, stats ages,
 *                                reservations, requests in flight
 *
 * A routed request: its fields into an sg_header list (the worker's
 * scratch array pointing into h1s's read buffer: no allocation, no copy)
 * and sg_request_from_header_list (400 naming the header),
 * x-stargate-max-wait-ms (400), the algorithm resolution (400 with its
 * class), then route_start().
 *
 * The front door is h1s (h1s.h): it refuses every framing it does not
 * accept (400, 408, 413, 414, 417, 431, 505, the limits of sg-proxy(8)
 * LIMITS) before a request reaches this file; its on_error answers with
 * reject() below.  Nothing is checked twice here: a request handed to
 * http_request is well framed, within the limits, and its body (at most
 * --max-body-bytes, the replay limit) is whole.
 *
 * Errors are stargate-headers(7) JSON: {"error":"<message>","code":"<class>"}
 * with x-stargate-error-code; the capacity 503 has the overloaded_error body.
 *
 * On the gateway edge (--role gateway and all) a routed request goes to
 * gateway.c instead, and the router's own errors reach the client without
 * x-stargate-error-code, the capacity 503 as 529 (stargate-headers(7)).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <jansson.h>

#include "proxy.h"

static const char overloaded_body[] =
    "{\"error\":{\"code\":\"overloaded_error\",\"message\":\"Inference "
    "capacity is temporarily unavailable.\",\"param\":\"\",\"type\":"
    "\"overloaded_error\"},\"code\":\"overloaded_error\"}\n";

/* The reason phrases are h1s's (one table). */
const char *
http_reason(int status)
{
	return h1s_reason(status);
}

/* --- buffers ------------------------------------------------------------ */

int
pbuf_add(pbuf *b, const void *p, size_t n)
{
	if (n > b->cap - b->len) {
		size_t cap = b->cap == 0 ? 1024 : b->cap;
		char *nb;

		while (cap - b->len < n)
			cap *= 2;
		if ((nb = realloc(b->b, cap)) == NULL)
			return -1;
		b->b = nb;
		b->cap = cap;
	}
	if (n > 0)
		memcpy(b->b + b->len, p, n);
	b->len += n;
	return 0;
}

/* s as a JSON string literal (quotes, escapes). */
void
pbuf_json_str(pbuf *b, const char *s)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *u = (const unsigned char *)s;
	const unsigned char *run;
	char e[6] = { '\\', 'u', '0', '0', 0, 0 };

	pbuf_add(b, "\"", 1);
	for (run = u; *u != '\0'; u++) {
		if (*u != '"' && *u != '\\' && *u >= 0x20)
			continue;
		pbuf_add(b, run, (size_t)(u - run));
		run = u + 1;
		if (*u == '"' || *u == '\\') {
			e[1] = (char)*u;
			pbuf_add(b, e, 2);
			e[1] = 'u';
		} else {
			e[4] = hex[*u >> 4];
			e[5] = hex[*u & 15];
			pbuf_add(b, e, 6);
		}
	}
	pbuf_add(b, run, (size_t)(u - run));
	pbuf_add(b, "\"", 1);
}

void
pbuf_free(pbuf *b)
{
	free(b->b);
	b->b = NULL;
	b->len = b->cap = 0;
}

const sg_header *
http_header_list(proxy *p, const h1s_req *req, size_t *n)
{
	const h1s_header *h = h1s_headers(req, n);
	size_t i;

	/* h1s holds at most --max-headers fields: the array has room */
	for (i = 0; i < *n; i++) {
		p->hdrs[i].name = h[i].name;
		p->hdrs[i].value = h[i].value;
	}
	return p->hdrs;
}

static void
send_body(h1s_req *req, int status, const char *ctype, const char *body,
    size_t len)
{
	h1s_del_header(req, "Content-Type");
	h1s_add_header(req, "Content-Type", ctype);
	worker_track_reply(req);
	h1s_reply(req, status, http_reason(status), body, len);
}

/* The scratch buffer's JSON error into a reply (x-stargate-error-code on
 * the router edge only: the gateway edge never shows x-stargate-* to
 * clients). */
static void
send_json(h1s_req *req, int status, const char *code)
{
	proxy *p = proxy_self;

	h1s_del_header(req, "x-stargate-error-code");
	if (!p->gw_edge && code != NULL)
		h1s_add_header(req, "x-stargate-error-code", code);
	send_body(req, status, "application/json", p->scratch.b,
	    p->scratch.len);
}

void
http_send_error(h1s_req *req, int status, const char *code,
    const char *message)
{
	pbuf *b = &proxy_self->scratch;

	b->len = 0;
	pbuf_add(b, "{\"error\":", 9);
	pbuf_json_str(b, message);
	pbuf_add(b, ",\"code\":", 8);
	pbuf_json_str(b, code);
	pbuf_add(b, "}\n", 2);
	send_json(req, status, code);
}

void
http_send_overloaded(h1s_req *req)
{
	pbuf *b = &proxy_self->scratch;

	b->len = 0;
	pbuf_add(b, overloaded_body, sizeof(overloaded_body) - 1);
	/* The gateway edge: a Stargate overload is 529 (stargate-headers(7)). */
	send_json(req, proxy_self->gw_edge ? 529 : 503, "overloaded_error");
}

/* --- small endpoints --------------------------------------------------------- */

static void
get_models(proxy *p, h1s_req *req)
{
	json_t *data = json_array(), *doc;
	char *text;
	size_t i;

	for (i = 0; p->gen != NULL && i < p->gen->nmodels; i++)
		json_array_append_new(data, json_pack("{s:s,s:s,s:s}", "id",
		    p->gen->models[i].name, "object", "model", "owned_by",
		    "stargate"));
	doc = json_pack("{s:s,s:o}", "object", "list", "data", data);
	if (doc == NULL || (text = json_dumps(doc, JSON_COMPACT)) == NULL) {
		json_decref(doc);
		http_send_error(req, 500, "internal_error", "out of memory");
		return;
	}
	json_decref(doc);
	send_body(req, 200, "application/json", text, strlen(text));
	free(text);
}

static int
expose_sink(void *ctx, const char *s, size_t n)
{
	return pbuf_add(ctx, s, n);
}

static void
get_metrics(proxy *p, h1s_req *req)
{
	pbuf *b = &p->scratch;

	if (p->gen != NULL)
		stats_update_gauges(p);
	gateway_update_gauges(p);
	b->len = 0;
	/* without its Content-Type it would not be the exposition format */
	if (sg_metrics_expose(p->reg, expose_sink, b) != 0 ||
	    h1s_add_header(req, "Content-Type",
	    "text/plain; version=0.0.4; charset=utf-8") != 0) {
		http_send_error(req, 500, "internal_error", "out of memory");
		return;
	}
	worker_track_reply(req);
	h1s_reply(req, 200, http_reason(200), b->b, b->len);
}

/* Why /readyz is 503 (its body), or NULL: ready. */
static const char *
unready(proxy *p)
{
	if (p->draining)
		return "draining\n";
	if (p->gen != NULL && !stats_ready(p))
		return "not ready\n";
	return p->gw_edge ? gateway_unready(p) : NULL;
}

static json_t *
cluster_state(proxy *p, const pcl *cl, double now)
{
	const sg_cluster *st = sg_fleet_stats(p->fleet, cl->fidx);
	double age = sg_fleet_age_ms(p->fleet, cl->fidx, now);
	json_t *o = json_pack("{s:s,s:s,s:s,s:b,s:I,s:I}", "id", cl->cs->id,
	    "url", cl->def->url, "stats_url", cl->def->stats_url,
	    "fresh", sg_fleet_fresh(p->fleet, cl->fidx, now),
	    "reservations", (json_int_t)sg_fleet_reservations(p->fleet,
	    cl->fidx), "poll_failures", (json_int_t)cl->cs->polls_failed);

	if (o == NULL)
		return NULL;
	json_object_set_new(o, "stats_age_ms", isinf(age) ? json_null() :
	    json_real(age));
	if (cl->cs->have_rtt)
		json_object_set_new(o, "measured_rtt_ms",
		    json_real(cl->cs->rtt_ms));
	if (st != NULL)
		json_object_set_new(o, "stats", sg_cluster_to_json(st));
	return o;
}

static void
get_debug_state(proxy *p, h1s_req *req)
{
	json_t *cl = json_array(), *doc;
	double now = mono_ms();
	char *text;
	size_t i;

	if (!h1s_peer_loopback(req)) {
		http_send_error(req, 403, "forbidden",
		    "/debug/state is served to loopback peers only");
		return;
	}
	for (i = 0; p->gen != NULL && i < p->gen->n; i++)
		json_array_append_new(cl, cluster_state(p, &p->gen->cl[i], now));
	doc = json_pack("{s:s,s:i,s:i,s:b,s:b,s:I,s:I,s:o}", "role",
	    p->conf->role,
	    "worker", p->worker_no, "pid", (int)getpid(), "ready",
	    unready(p) == NULL, "draining", p->draining, "inflight",
	    (json_int_t)p->inflight, "served", (json_int_t)p->served,
	    "clusters", cl);
	if (doc == NULL || (text = json_dumps(doc, JSON_COMPACT)) == NULL) {
		json_decref(doc);
		http_send_error(req, 500, "internal_error", "out of memory");
		return;
	}
	json_decref(doc);
	send_body(req, 200, "application/json", text, strlen(text));
	free(text);
}

/* --- refusals at the front door ------------------------------------------ */

/*
 * A request h1s refused (h1s.h, on_error: status, class and message are
 * its): an OpenAI-style error object with the ref's top-level "code"
 * beside it, and on the router edge x-stargate-error-code.  h1s closes
 * the connection after it (nothing that follows a framing error on it can
 * be trusted).
 */
static void
reject(void *arg, h1s_req *req, int status, const char *code,
    const char *message)
{
	pbuf *b = &proxy_self->scratch;

	(void)arg;
	b->len = 0;
	pbuf_add(b, "{\"error\":{\"message\":", 20);
	pbuf_json_str(b, message);
	pbuf_add(b, ",\"type\":\"invalid_request_error\",\"param\":null,"
	    "\"code\":", 52);
	pbuf_json_str(b, code);
	pbuf_add(b, "},\"code\":", 9);
	pbuf_json_str(b, code);
	pbuf_add(b, "}\n", 2);
	send_json(req, status, code);
}

/* --- routed requests ------------------------------------------------------------ */

/* x-stargate-max-wait-ms: trimmed u64, else 400 (stargate-headers(7)). */
static int
parse_budget(preq *q, h1s_req *req, sg_error *err)
{
	const char *v = h1s_find_header(req, "x-stargate-max-wait-ms");
	size_t len;

	if (v == NULL)
		return 0;
	len = strlen(v);
	sg_trim(&v, &len);
	if (sg_parse_u64(v, len, UINT64_MAX, &q->budget_ms) != 0)
		return sg_seterr_http(err, SG_EREQUEST, 400, "invalid_request",
		    "x-stargate-max-wait-ms: expected an unsigned integer");
	q->has_budget = true;
	return 0;
}

static void
handle_routed(proxy *p, h1s_req *req, const char *endpoint)
{
	const sg_header *hl;
	const sg_algdef *def;
	sg_error err;
	size_t n;
	preq *q;
	int rc;

	hl = http_header_list(p, req, &n);
	if ((q = preq_get(p)) == NULL) {
		http_send_error(req, 500, "internal_error", "out of memory");
		return;
	}
	q->req = req;
	q->endpoint = endpoint;
	memset(&err, 0, sizeof(err));
	if ((rc = sg_request_from_header_list(&q->sr, hl, n, &err)) != 0 ||
	    (rc = parse_budget(q, req, &err)) != 0 ||
	    (rc = sg_lbconf_resolve(p->lb, q->sr.model, q->sr.routing_method,
	    q->sr.routing_method_invalid, &def, &err)) != 0) {
		if (rc == SG_EREQUEST && err.status != 0)
			http_send_error(req, err.status, err.code[0] != '\0' ?
			    err.code : "invalid_request", err.text);
		else
			http_send_error(req, 500, "internal_error",
			    sg_strerror(rc));
		q->req = NULL;
		preq_put(q);
		return;
	}
	q->close_after = p->draining;
	route_start(q);
}

/* The endpoint label of a routed path (stargate-headers(7)), or NULL. */
static const char *
routed_endpoint(const char *path)
{
	if (strncmp(path, "/v1/", 4) != 0)
		return NULL;
	path += 4;
	if (strcmp(path, "chat/completions") == 0)
		return "chat_completions";
	if (strcmp(path, "completions") == 0)
		return "completions";
	if (strcmp(path, "responses") == 0)
		return "responses";
	if (strcmp(path, "embeddings") == 0)
		return "embeddings";
	return NULL;
}

static void
not_allowed(h1s_req *req, const char *allow)
{
	h1s_add_header(req, "Allow", allow);
	http_send_error(req, 405, "method_not_allowed", "method not allowed");
}

static void
http_request(void *arg, h1s_req *req)
{
	proxy *p = arg;
	const char *path = h1s_path(req);
	enum h1s_method m = h1s_method(req);
	const char *endpoint, *why;

	if ((endpoint = routed_endpoint(path)) != NULL) {
		if (m != H1S_POST)
			not_allowed(req, "POST");
		else if (p->gw_edge)
			gateway_accept(p, req, endpoint);
		else
			handle_routed(p, req, endpoint);
		return;
	}
	if (strcmp(path, "/healthz") != 0 && strcmp(path, "/readyz") != 0 &&
	    strcmp(path, "/metrics") != 0 && strcmp(path, "/v1/models") != 0 &&
	    strcmp(path, "/debug/state") != 0) {
		http_send_error(req, 404, "not_found", "no such endpoint");
		return;
	}
	if (m != H1S_GET && m != H1S_HEAD) {
		not_allowed(req, "GET, HEAD");
		return;
	}
	if (strcmp(path, "/healthz") == 0)
		send_body(req, 200, "text/plain; charset=utf-8", "ok\n", 3);
	else if (strcmp(path, "/readyz") == 0) {
		if ((why = unready(p)) != NULL)
			send_body(req, 503, "text/plain; charset=utf-8", why,
			    strlen(why));
		else
			send_body(req, 200, "text/plain; charset=utf-8",
			    "ready\n", 6);
	} else if (strcmp(path, "/metrics") == 0)
		get_metrics(p, req);
	else if (strcmp(path, "/v1/models") == 0 && p->gw_edge)
		gateway_models(p, req);
	else if (strcmp(path, "/v1/models") == 0)
		get_models(p, req);
	else
		get_debug_state(p, req);
}

const h1s_cbs http_cbs = { http_request, reject };
