/*
 * http.c — sg-proxy's endpoints (sg-proxy(8), stargate-headers(7)).
 *
 *   POST /v1/chat/completions, /v1/completions, /v1/responses,
 *        /v1/embeddings          routed (route.c, forward.c)
 *   GET  /v1/models              {"object":"list","data":[{"id","object"}]}
 *   GET  /healthz                200 ok
 *   GET  /readyz                 200 once every cluster had fresh stats or
 *                                --ready-timeout-ms passed; 503 draining
 *   GET  /metrics                Prometheus text 0.0.4
 *   GET  /debug/state            loopback peers only: clusters, stats ages,
 *                                reservations, requests in flight
 *
 * A routed request: header count bound (431), headers into an sg_header
 * list (scratch array, no allocation) and sg_request_from_header_list (400
 * naming the header), x-stargate-max-wait-ms (400), the algorithm
 * resolution (400 with its class), then route_start().  Before any of it,
 * hostile() answers what evhttp lets through: an HTTP version other than
 * 1.x (505), the target length (414), the header block and count (431),
 * ambiguous framing and malformed fields (400); evhttp's own limits sit
 * past --max-header-bytes and --max-body-bytes (413) as a last guard.
 *
 * Errors are stargate-headers(7) JSON: {"error":"<message>","code":"<class>"}
 * with x-stargate-error-code; the capacity 503 has the overloaded_error body.
 *
 * On the gateway edge (--role gateway and all) a routed request goes to
 * gateway.c instead, and the router's own errors reach the client without
 * x-stargate-error-code, the capacity 503 as 529 (stargate-headers(7)).
 */
#include <sys/queue.h>
#include <sys/socket.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/http_struct.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>

#include "proxy.h"

static const char overloaded_body[] =
    "{\"error\":{\"code\":\"overloaded_error\",\"message\":\"Inference "
    "capacity is temporarily unavailable.\",\"param\":\"\",\"type\":"
    "\"overloaded_error\"},\"code\":\"overloaded_error\"}\n";

const char *
http_reason(int status)
{
	switch (status) {
	case 200: return "OK";
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 403: return "Forbidden";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 408: return "Request Timeout";
	case 413: return "Payload Too Large";
	case 414: return "URI Too Long";
	case 429: return "Too Many Requests";
	case 431: return "Request Header Fields Too Large";
	case 500: return "Internal Server Error";
	case 502: return "Bad Gateway";
	case 503: return "Service Unavailable";
	case 504: return "Gateway Timeout";
	case 505: return "HTTP Version Not Supported";
	case 529: return "Site Overloaded";
	default: return status < 300 ? "OK" : "Error";
	}
}

static void
send_body(struct evhttp_request *req, int status, const char *ctype,
    const char *body, size_t len)
{
	struct evkeyvalq *h = evhttp_request_get_output_headers(req);
	struct evbuffer *b = evhttp_request_get_output_buffer(req);

	evhttp_remove_header(h, "Content-Type");
	evhttp_add_header(h, "Content-Type", ctype);
	evbuffer_add(b, body, len);
	worker_track_reply(req);
	evhttp_send_reply(req, status, http_reason(status), NULL);
}

/* Append s to b as a JSON string body (escaped). */
static void
json_str(struct evbuffer *b, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;

	evbuffer_add(b, "\"", 1);
	for (; *p != '\0'; p++) {
		if (*p == '"' || *p == '\\')
			evbuffer_add_printf(b, "\\%c", *p);
		else if (*p < 0x20)
			evbuffer_add_printf(b, "\\u%04x", *p);
		else
			evbuffer_add(b, p, 1);
	}
	evbuffer_add(b, "\"", 1);
}

void
http_send_error(struct evhttp_request *req, int status, const char *code,
    const char *message)
{
	struct evkeyvalq *h = evhttp_request_get_output_headers(req);
	struct evbuffer *b = evhttp_request_get_output_buffer(req);

	evhttp_remove_header(h, "Content-Type");
	evhttp_add_header(h, "Content-Type", "application/json");
	evhttp_remove_header(h, "x-stargate-error-code");
	/* The gateway edge never shows x-stargate-* to clients. */
	if (proxy_self == NULL || !proxy_self->gw_edge)
		evhttp_add_header(h, "x-stargate-error-code", code);
	evbuffer_add(b, "{\"error\":", 9);
	json_str(b, message);
	evbuffer_add(b, ",\"code\":", 8);
	json_str(b, code);
	evbuffer_add(b, "}\n", 2);
	worker_track_reply(req);
	evhttp_send_reply(req, status, http_reason(status), NULL);
}

void
http_send_overloaded(struct evhttp_request *req)
{
	struct evkeyvalq *h = evhttp_request_get_output_headers(req);

	evhttp_remove_header(h, "x-stargate-error-code");
	/* The gateway edge: a Stargate overload is 529 (stargate-headers(7)). */
	if (proxy_self != NULL && proxy_self->gw_edge) {
		send_body(req, 529, "application/json", overloaded_body,
		    sizeof(overloaded_body) - 1);
		return;
	}
	evhttp_add_header(h, "x-stargate-error-code", "overloaded_error");
	send_body(req, 503, "application/json", overloaded_body,
	    sizeof(overloaded_body) - 1);
}

/* --- small endpoints --------------------------------------------------------- */

static void
get_models(proxy *p, struct evhttp_request *req)
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
	return evbuffer_add(ctx, s, n);
}

static void
get_metrics(proxy *p, struct evhttp_request *req)
{
	struct evbuffer *b = evhttp_request_get_output_buffer(req);

	if (p->gen != NULL)
		stats_update_gauges(p);
	gateway_update_gauges(p);
	if (sg_metrics_expose(p->reg, expose_sink, b) != 0) {
		evbuffer_drain(b, evbuffer_get_length(b));
		http_send_error(req, 500, "internal_error", "out of memory");
		return;
	}
	if (evhttp_add_header(evhttp_request_get_output_headers(req),
	    "Content-Type", "text/plain; version=0.0.4; charset=utf-8") != 0) {
		evbuffer_drain(b, evbuffer_get_length(b));
		http_send_error(req, 500, "internal_error", "out of memory");
		return;
	}
	worker_track_reply(req);
	evhttp_send_reply(req, 200, "OK", NULL);
}

static bool
peer_is_loopback(struct evhttp_request *req)
{
	struct evhttp_connection *c = evhttp_request_get_connection(req);
	char *addr = NULL;
	ev_uint16_t port = 0;

	if (c == NULL)
		return false;
	evhttp_connection_get_peer(c, &addr, &port);
	if (addr == NULL)
		return false;
	return strncmp(addr, "127.", 4) == 0 || strcmp(addr, "::1") == 0 ||
	    strcmp(addr, "::ffff:127.0.0.1") == 0;
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
get_debug_state(proxy *p, struct evhttp_request *req)
{
	json_t *cl = json_array(), *doc;
	double now = mono_ms();
	char *text;
	size_t i;

	if (!peer_is_loopback(req)) {
		http_send_error(req, 403, "forbidden",
		    "/debug/state is served to loopback peers only");
		return;
	}
	for (i = 0; p->gen != NULL && i < p->gen->n; i++)
		json_array_append_new(cl, cluster_state(p, &p->gen->cl[i], now));
	doc = json_pack("{s:s,s:i,s:i,s:b,s:b,s:I,s:I,s:o}", "role",
	    p->conf->role,
	    "worker", p->worker_no, "pid", (int)getpid(), "ready",
	    stats_ready(p), "draining", p->draining, "inflight",
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

/* --- hostile requests ------------------------------------------------------ */

/*
 * A request refused at the front door: an OpenAI-style error object (with
 * the ref's top-level "code" beside it), Connection: close, and on the
 * router edge x-stargate-error-code.  The connection is closed because
 * after a framing error nothing that follows on it can be trusted.
 */
static void
reject(struct evhttp_request *req, int status, const char *code,
    const char *message)
{
	struct evkeyvalq *h = evhttp_request_get_output_headers(req);
	struct evbuffer *b = evhttp_request_get_output_buffer(req);

	evhttp_remove_header(h, "Content-Type");
	evhttp_add_header(h, "Content-Type", "application/json");
	evhttp_remove_header(h, "Connection");
	evhttp_add_header(h, "Connection", "close");
	if (proxy_self == NULL || !proxy_self->gw_edge)
		evhttp_add_header(h, "x-stargate-error-code", code);
	evbuffer_add_printf(b, "{\"error\":{\"message\":");
	json_str(b, message);
	evbuffer_add_printf(b, ",\"type\":\"invalid_request_error\","
	    "\"param\":null,\"code\":");
	json_str(b, code);
	evbuffer_add(b, "},\"code\":", 9);
	json_str(b, code);
	evbuffer_add(b, "}\n", 2);
	worker_track_reply(req);
	evhttp_send_reply(req, status, http_reason(status), NULL);
}

/* A field name is a token (RFC 9110 5.1). */
static bool
bad_name(const char *s)
{
	static const char tchar[] = "!#$%&'*+-.^_`|~";

	if (*s == '\0')
		return true;
	for (; *s != '\0'; s++)
		if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'z') ||
		    (*s >= 'A' && *s <= 'Z') || strchr(tchar, *s) != NULL))
			return true;
	return false;
}

/* A field value holds no control byte but HTAB (bare CR, LF, DEL...). */
static bool
bad_value(const char *s)
{
	const unsigned char *u = (const unsigned char *)s;

	for (; *u != '\0'; u++)
		if ((*u < 0x20 && *u != '\t') || *u == 0x7f)
			return true;
	return false;
}

/*
 * The limits and the framing rules evhttp does not enforce itself (see
 * sg-proxy.8, LIMITS): the request target length (414), the header block
 * size counted as "name: value\r\n" per field and the field count (431),
 * a field name that is not a token or a value with a control byte, more
 * than one Content-Length, Transfer-Encoding beside Content-Length, and a
 * Transfer-Encoding other than a single "chunked" (400).  evhttp has read
 * the body by now, but nothing is forwarded and the connection is closed.
 * Returns true when the request was answered.
 */
static bool
hostile(proxy *p, struct evhttp_request *req)
{
	struct evkeyvalq *in = evhttp_request_get_input_headers(req);
	const char *uri = evhttp_request_get_uri(req);
	const char *te = NULL;
	struct evkeyval *kv;
	size_t n = 0, bytes = 0, ncl = 0, nte = 0;

	/* evhttp answers in the request's version: HTTP/1.x is answered as
	 * 1.0 or 1.1, any other major version with 505 in HTTP/1.1. */
	if (req->major != 1) {
		req->major = 1;
		req->minor = 1;
		reject(req, 505, "http_version_not_supported",
		    "only HTTP/1.0 and HTTP/1.1 are served");
		return true;
	}
	if (req->minor > 1)
		req->minor = 1;
	if (uri != NULL && strlen(uri) > PROXY_MAX_TARGET) {
		reject(req, 414, "uri_too_long",
		    "the request target is longer than 8192 bytes");
		return true;
	}
	TAILQ_FOREACH(kv, in, next) {
		n++;
		bytes += strlen(kv->key) + strlen(kv->value) + 4;
		if (bad_name(kv->key) || bad_value(kv->value)) {
			reject(req, 400, "invalid_request",
			    "malformed request header field");
			return true;
		}
		if (strcasecmp(kv->key, "Content-Length") == 0)
			ncl++;
		else if (strcasecmp(kv->key, "Transfer-Encoding") == 0) {
			nte++;
			te = kv->value;
		}
	}
	if (bytes > p->conf->max_header_bytes || n > p->conf->max_headers) {
		reject(req, 431, "request_header_fields_too_large",
		    bytes > p->conf->max_header_bytes ?
		    "the request header block exceeds --max-header-bytes" :
		    "too many request headers");
		return true;
	}
	if (ncl > 1 || (nte > 0 && ncl > 0) || nte > 1 ||
	    (te != NULL && strcasecmp(te, "chunked") != 0)) {
		reject(req, 400, "invalid_request",
		    "ambiguous request framing (Content-Length, "
		    "Transfer-Encoding)");
		return true;
	}
	return false;
}

/* --- routed requests ------------------------------------------------------------ */

/* x-stargate-max-wait-ms: trimmed u64, else 400 (stargate-headers(7)). */
static int
parse_budget(preq *q, struct evkeyvalq *in, sg_error *err)
{
	const char *v = evhttp_find_header(in, "x-stargate-max-wait-ms");
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
handle_routed(proxy *p, struct evhttp_request *req, const char *endpoint)
{
	struct evkeyvalq *in = evhttp_request_get_input_headers(req);
	struct evkeyval *kv;
	const sg_algdef *def;
	sg_error err;
	size_t n = 0;
	preq *q;
	int rc;

	if (evbuffer_get_length(evhttp_request_get_input_buffer(req)) >
	    p->conf->max_body) {
		reject(req, 413, "request_too_large",
		    "request body exceeds the replay limit");
		return;
	}
	TAILQ_FOREACH(kv, in, next) {
		if (n == p->conf->max_headers) {
			http_send_error(req, 431, "request_header_fields_too_large",
			    "too many request headers");
			return;
		}
		p->hdrs[n].name = kv->key;
		p->hdrs[n].value = kv->value;
		n++;
	}
	if ((q = preq_get(p)) == NULL) {
		http_send_error(req, 500, "internal_error", "out of memory");
		return;
	}
	q->req = req;
	q->endpoint = endpoint;
	memset(&err, 0, sizeof(err));
	if ((rc = sg_request_from_header_list(&q->sr, p->hdrs, n, &err)) != 0 ||
	    (rc = parse_budget(q, in, &err)) != 0 ||
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

void
http_dispatch(struct evhttp_request *req, void *arg)
{
	proxy *p = arg;
	const struct evhttp_uri *u = evhttp_request_get_evhttp_uri(req);
	const char *path = u != NULL ? evhttp_uri_get_path(u) : NULL;
	enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
	bool get = cmd == EVHTTP_REQ_GET || cmd == EVHTTP_REQ_HEAD;
	const char *endpoint;

	if (hostile(p, req))
		return;
	if (path == NULL) {
		http_send_error(req, 400, "invalid_request", "bad request target");
		return;
	}
	if ((endpoint = routed_endpoint(path)) != NULL) {
		if (cmd != EVHTTP_REQ_POST) {
			evhttp_add_header(evhttp_request_get_output_headers(req),
			    "Allow", "POST");
			http_send_error(req, 405, "method_not_allowed",
			    "method not allowed");
			return;
		}
		if (p->gw_edge)
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
	if (!get) {
		evhttp_add_header(evhttp_request_get_output_headers(req),
		    "Allow", "GET, HEAD");
		http_send_error(req, 405, "method_not_allowed",
		    "method not allowed");
		return;
	}
	if (strcmp(path, "/healthz") == 0)
		send_body(req, 200, "text/plain; charset=utf-8", "ok\n", 3);
	else if (strcmp(path, "/readyz") == 0) {
		if (p->draining)
			send_body(req, 503, "text/plain; charset=utf-8",
			    "draining\n", 9);
		else if (p->gen != NULL && !stats_ready(p))
			send_body(req, 503, "text/plain; charset=utf-8",
			    "not ready\n", 10);
		else
			send_body(req, 200, "text/plain; charset=utf-8",
			    "ready\n", 6);
	} else if (strcmp(path, "/metrics") == 0)
		get_metrics(p, req);
	else if (strcmp(path, "/v1/models") == 0)
		get_models(p, req);
	else
		get_debug_state(p, req);
}
