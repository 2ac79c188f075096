/*
 * gateway.c — sg-proxy's gateway stage (sg-proxy(8), stargate-headers(7)): the
 * public edge of --role gateway and --role all.
 *
 * One request, in order:
 *   1. the API key (--api-keys: SHA-256 of the bearer key, compared with
 *      every entry in constant time; 401 otherwise), which may bind a
 *      routing key and a priority;
 *   2. the identity (sg_identity_parse_text, a byte scan, for the common
 *      chat body; else sg_identity_parse over the parsed body): routing key
 *      and routed model from the public model id, session source, cache
 *      affinity key, token estimate; 400 with an OpenAI error body;
 *   3. the body's top-level "model" rewritten to the routed model (gwjson.c,
 *      byte for byte otherwise), so an engine sees the name it serves: in
 *      place when the routed literal is no longer and "model" is near the
 *      front (the head moves right, a long prompt is never copied), else
 *      into the request's own buffer;
 *   4. with the last-cluster feature on: for an eligible session (source
 *      prompt_cache_key, conversation_id or header) a store lookup bounded
 *      by the lookup timeout.  LMDB answers at once; a networked backend
 *      answers later on this loop (EINPROGRESS) and the request's timer is
 *      armed at the deadline too, so either side's timer ends the wait.
 *      Hit: the hint; miss, error, timeout: no hint.  A session with an
 *      affinity key that is not eligible counts as skipped;
 *   5. the trusted headers (sg_gateway_build).  Client headers the gateway
 *      owns (sg_gateway_inbound_owned: x-routing-key, x-priority, every
 *      x-stargate-*, ...) never travel on, on any path and whether the
 *      feature is on or off.  --role all turns the headers into the
 *      router's sg_request (sg_gateway_request: what a remote router would
 *      parse) and routes in-process (route.c); --role gateway sends them
 *      with the request to --router-url on the native client (h1.c).
 *
 * Responses: every x-stargate-* and x-inference-server-* header is
 * stripped, a 503 with exactly one x-stargate-error-code: overloaded_error
 * becomes 529, x-request-id and (chat, Responses) x-multi-turn-session-id
 * are set, and the public model id replaces the routed one in a unary
 * JSON reply and in each event of a stream (a unary reply of up to 64 KiB
 * is held until complete and sent with its new Content-Length; a larger
 * one, and a stream, are chunked; a held reply that breaks off or stalls
 * past --upstream-timeout-ms has sent nothing, so it is answered 502 or
 * 504 as if no reply had come).  On a 2xx response head with a valid
 * serving cluster (the router's x-stargate-cluster-id, or the in-process
 * selection), the session's entry is written: batched for at most
 * WB_MS (a store commit costs far more than an entry, and the store
 * thread commits what it finds queued in one transaction; a later write
 * of a key still in the batch takes the batched write's place, fold()),
 * then queued to
 * the store (sg_store_put_seq never blocks), its result counted when the
 * commit record arrives on the store's eventfd.  Until it is committed a
 * write answers this worker's lookups of its key itself (read your
 * writes: a session's next request never misses its own last cluster
 * because the commit was still on its way); a hash of the pending writes
 * by key (p->wh, newest first in each chain) answers that in O(1), not a
 * walk of every write still on its way.  Non-2xx and transport errors
 * write nothing; a store error never changes what the client gets.
 * SIGTERM waits (within the drain bound) for pending writes.
 *
 * GET /v1/models on the edge lists the ids a client may name (the
 * router's list, gwpoll.c, or the cluster file's, under the caller's
 * routing key); /readyz asks gateway_unready (the router, the store).
 *
 * Logs name the request id, the routed model and the routing key, never
 * the session id, affinity key or store key.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sysexits.h>

#include <event2/event.h>
#include <jansson.h>
#include <sodium.h>

#include "../common/cli.h"
#include "proxy.h"
#include "sg_sha256.h"

#define SPAN_LOOKUP	"llm-api-gateway.last_cluster_lookup"
#define SPAN_WRITE	"llm-api-gateway.last_cluster_write"
#define SPAN_UPSTREAM	"llm-api-gateway.upstream.llm-request-router"
#define RW_JSON_MAX	(64u << 10)	/* unary prefix searched for "model" */
#define RW_LINE_MAX	(1u << 20)	/* SSE line kept whole */
#define KEYS_MAX	100000
#define INPLACE_MAX	4096		/* body head moved for the rewrite */
#define TIMEOUT_LOG_MS	1000.0		/* timeout warnings: one a second */
#define WB_MS		10.0		/* writes are handed over in batches
					 * (a commit per 10 ms, not per 2:
					 * a third less store CPU a write) */
#define WB_MAX		512		/* ... of at most this many (a commit
					 * costs the store thread 60-100 us
					 * whatever its size: at 25k writes/s
					 * 512 halves the commits of 128) */
#define GW_COMMIT_DELAY_US 1000		/* the store's commit window */
#define WH_SIZE		1024		/* pending writes' hash buckets */

/* --- errors the gateway answers itself ------------------------------------ */

static void
json_escaped(pbuf *b, const char *s)
{
	size_t n;
	char *lit = gj_quote(s, strlen(s), &n);

	if (lit == NULL)
		pbuf_add(b, "\"\"", 2);
	else
		pbuf_add(b, lit, n);
	free(lit);
}

#define LIT(b, s)	pbuf_add((b), (s), sizeof(s) - 1)

/* s[0..n) escaped as the inside of a JSON string (no quotes).  0 or -1. */
static int
json_part(pbuf *b, const char *s, size_t n)
{
	size_t ln;
	char *lit = gj_quote(s, n, &ln);
	int rc;

	if (lit == NULL)
		return -1;
	rc = pbuf_add(b, lit + 1, ln - 2);
	free(lit);
	return rc;
}

/* An OpenAI-style error: {"error":{"message","type","param","code"}}. */
static void
send_oai_error(h1s_req *req, int status, const char *type,
    const char *code, const char *msg)
{
	pbuf *b = &proxy_self->scratch;

	b->len = 0;
	LIT(b, "{\"error\":{\"message\":");
	json_escaped(b, msg);
	LIT(b, ",\"type\":");
	json_escaped(b, type);
	LIT(b, ",\"param\":null,\"code\":");
	if (code != NULL)
		json_escaped(b, code);
	else
		LIT(b, "null");
	LIT(b, "}}\n");
	h1s_del_header(req, "Content-Type");
	h1s_add_header(req, "Content-Type", "application/json");
	worker_track_reply(req);
	h1s_reply(req, status, http_reason(status), b->b, b->len);
}

/* Refuse a request that was never attached (no span, not in flight). */
static void
refuse(preq *q, int status, const char *type, const char *code,
    const char *msg)
{
	gateway_reply_headers(q);
	send_oai_error(q->req, status, type, code, msg);
	q->req = NULL;
	preq_put(q);
}

/* Fail an attached request. */
static void
gw_fail(preq *q, int status, const char *type, const char *code,
    const char *msg)
{
	if (q->req != NULL) {
		if (q->close_after)
			h1s_set_close(q->req);
		gateway_reply_headers(q);
		send_oai_error(q->req, status, type, code, msg);
		q->req = NULL;		/* the worker's until written */
	}
	otlp_span_status(&q->span, OTLP_STATUS_ERROR, code != NULL ? code :
	    type);
	metrics_request(q, "", status);
	preq_finish(q, status);
}

/* --- logs ----------------------------------------------------------------- */

static void
log_store(proxy *p, const char *msg, const char *rid, const char *model,
    const char *rk, const char *result, const char *error)
{
	sg_log_rec r;

	sg_log_begin(&r, p->log, SG_LOG_WARN, wall_s(), msg);
	sg_log_str(&r, "request_id", rid);
	sg_log_str(&r, "model", model);
	sg_log_str(&r, "routing_key", rk);
	sg_log_str(&r, "result", result);
	sg_log_str(&r, "error", error);
	sg_log_end(&r);
}

/* --- API keys --------------------------------------------------------------- */

static int
hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c = tolower(c);
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* One line "SHA256HEX [ROUTING_KEY [PRIORITY]]" into k; -1: malformed. */
static int
key_line(char *line, apikey *k)
{
	char *f[4], *t = line;
	size_t n = 0, i;
	uint64_t prio;

	while (*t != '\0' && n < 4) {
		while (*t == ' ' || *t == '\t' || *t == '\r' || *t == '\n')
			*t++ = '\0';
		if (*t == '\0')
			break;
		f[n++] = t;
		while (*t != '\0' && *t != ' ' && *t != '\t' && *t != '\r' &&
		    *t != '\n')
			t++;
	}
	if (n == 0 || n > 3 || strlen(f[0]) != 64)
		return -1;
	for (i = 0; i < 32; i++) {
		int hi = hexval((unsigned char)f[0][2 * i]);
		int lo = hexval((unsigned char)f[0][2 * i + 1]);

		if (hi < 0 || lo < 0)
			return -1;
		k->hash[i] = (unsigned char)(hi << 4 | lo);
	}
	if (n >= 2 && (k->routing_key = strdup(f[1])) == NULL)
		return -1;
	if (n == 3) {
		if (sg_parse_u64(f[2], strlen(f[2]), UINT32_MAX, &prio) != 0)
			return -1;
		k->has_priority = true;
		k->priority = (uint32_t)prio;
	}
	return 0;
}

int
gateway_load_keys(proxy *p, const char *path)
{
	FILE *fp;
	char line[1024];
	long lineno = 0;
	int rc = 0;

	if ((fp = fopen(path, "r")) == NULL) {
		cli_complain(NULL, 0, "--api-keys: %s: %s", path,
		    strerror(errno));
		return errno == ENOENT ? EX_NOINPUT : EX_CONFIG;
	}
	while (fgets(line, sizeof(line), fp) != NULL) {
		char *s = line, *hash;
		apikey k, *nk;

		lineno++;
		if ((hash = strchr(s, '#')) != NULL)
			*hash = '\0';
		while (*s == ' ' || *s == '\t')
			s++;
		if (*s == '\0' || *s == '\n' || *s == '\r')
			continue;
		memset(&k, 0, sizeof(k));
		if (key_line(s, &k) != 0) {
			free(k.routing_key);
			cli_complain(path, lineno, "expected SHA256HEX "
			    "[ROUTING_KEY [PRIORITY]]");
			rc = EX_CONFIG;
			goto out;
		}
		if (p->nkeys == KEYS_MAX || (nk = realloc(p->keys,
		    (p->nkeys + 1) * sizeof(*nk))) == NULL) {
			free(k.routing_key);
			cli_complain(path, lineno, "too many keys");
			rc = EX_CONFIG;
			goto out;
		}
		p->keys = nk;
		p->keys[p->nkeys++] = k;
	}
	if (ferror(fp)) {
		cli_complain(NULL, 0, "--api-keys: %s: read error", path);
		rc = EX_IOERR;
	}
out:
	fclose(fp);
	return rc;
}

void
gateway_free_keys(proxy *p)
{
	size_t i;

	for (i = 0; i < p->nkeys; i++)
		free(p->keys[i].routing_key);
	free(p->keys);
	p->keys = NULL;
	p->nkeys = 0;
}

/*
 * The entry of the request's bearer key, or NULL.  The key's SHA-256
 * (sg_sha256) is compared with every entry (sodium_memcmp, constant
 * time), so the time taken says nothing about which entry, or how much of
 * one, matched.
 */
static const apikey *
auth_key(proxy *p, h1s_req *req)
{
	const char *v = h1s_find_header(req, "authorization");
	unsigned char h[SG_SHA256_BYTES];
	const apikey *found = NULL;
	size_t i, len;

	if (v == NULL)
		return NULL;
	len = strlen(v);
	sg_trim(&v, &len);
	if (len < 7 || strncasecmp(v, "bearer ", 7) != 0)
		return NULL;
	v += 7;
	len -= 7;
	sg_trim(&v, &len);
	if (len == 0)
		return NULL;
	sg_sha256(h, v, len);
	for (i = 0; i < p->nkeys; i++)
		if (sodium_memcmp(h, p->keys[i].hash, sizeof(h)) == 0 &&
		    found == NULL)
			found = &p->keys[i];
	sodium_memzero(h, sizeof(h));
	return found;
}

/* --- /v1/models and /readyz on the gateway edge ----------------------------- */

/*
 * The models a client may name: the router's (role gateway: its
 * /v1/models, asked for this request, gwpoll.c) or the cluster file's
 * (role all).  With --api-keys the caller's key must be listed (401
 * otherwise, as for a routed request), and a key that binds a routing key
 * sees the public ids "<routing_key>/<model>"; otherwise the ids are the
 * routed names, to which the client puts its routing key in front.
 */
void
gateway_models(proxy *p, h1s_req *req)
{
	const apikey *key = NULL;
	const char *rk;

	if (p->nkeys > 0 && (key = auth_key(p, req)) == NULL) {
		send_oai_error(req, 401, "invalid_request_error",
		    "invalid_api_key", "Invalid API key provided.");
		return;
	}
	rk = key != NULL ? key->routing_key : NULL;
	if (p->conf->role_id != ROLE_GATEWAY) {
		const char **names = NULL;
		size_t i, n = p->gen != NULL ? p->gen->nmodels : 0;

		if (n > 0 && (names = calloc(n, sizeof(*names))) == NULL) {
			send_oai_error(req, 500, "api_error", NULL,
			    "out of memory");
			return;
		}
		for (i = 0; i < n; i++)
			names[i] = p->gen->models[i].name;
		gateway_models_reply(p, req, rk, names, n);
		free(names);
		return;
	}
	if (gwpoll_models(p, req, rk) != 0)
		send_oai_error(req, 500, "api_error", NULL, "out of memory");
}

void
gateway_models_error(h1s_req *req, const char *why)
{
	sg_log_rec r;

	sg_log_begin(&r, proxy_self->log, SG_LOG_WARN, wall_s(),
	    "router models request failed");
	sg_log_str(&r, "error", why);
	sg_log_end(&r);
	send_oai_error(req, 502, "api_error", "upstream_error",
	    "the router's model list is not available");
}

/* The model list of names (sorted), under routing key rk when not NULL. */
void
gateway_models_reply(proxy *p, h1s_req *req, const char *rk,
    const char *const *names, size_t n)
{
	pbuf *b = &p->scratch;
	size_t i, rkl = rk != NULL ? strlen(rk) : 0;
	int bad = 0;

	b->len = 0;
	bad |= LIT(b, "{\"object\":\"list\",\"data\":[");
	for (i = 0; i < n; i++) {
		bad |= i > 0 ? LIT(b, ",{\"id\":\"") : LIT(b, "{\"id\":\"");
		if (rk != NULL) {
			bad |= json_part(b, rk, rkl);
			bad |= LIT(b, "/");
		}
		bad |= json_part(b, names[i], strlen(names[i]));
		bad |= LIT(b, "\",\"object\":\"model\",\"owned_by\":"
		    "\"stargate\"}");
	}
	bad |= LIT(b, "]}");
	h1s_del_header(req, "Content-Type");
	if (bad != 0 || h1s_add_header(req, "Content-Type",
	    "application/json") != 0) {
		send_oai_error(req, 500, "api_error", NULL, "out of memory");
		return;
	}
	worker_track_reply(req);
	h1s_reply(req, 200, http_reason(200), b->b, b->len);
}

const char *
gateway_unready(proxy *p)
{
	if (p->conf->role_id == ROLE_GATEWAY && !gwpoll_ready(p))
		return "router not ready\n";
	if (p->conf->lc.enabled && p->store == NULL)
		return "store unavailable\n";
	return NULL;
}

/* --- the store: worker setup, writes, commit records ---------------------- */

/* The bucket of a store key: its digest's last 8 bytes (SHA-256). */
static size_t
wh_slot(const unsigned char *key)
{
	uint64_t h;

	memcpy(&h, key + SG_LC_DIGEST_LEN - sizeof(h), sizeof(h));
	return (size_t)((h * 0x9e3779b97f4a7c15ULL) >> 54) & (WH_SIZE - 1);
}

/* Pending: w answers lookups of its key (the newest write of a key is
 * the first of its chain). */
static void
wh_add(proxy *p, gwwrite *w)
{
	gwwrite **b = &p->wh[wh_slot(w->key)];

	if ((w->hnext = *b) != NULL)
		w->hnext->hprev = &w->hnext;
	w->hprev = b;
	*b = w;
}

static void
wh_del(gwwrite *w)
{
	if (w->hprev == NULL)
		return;
	if ((*w->hprev = w->hnext) != NULL)
		w->hnext->hprev = w->hprev;
	w->hnext = NULL;
	w->hprev = NULL;
}

static void
write_result(proxy *p, gwwrite *w, int rc, const char *error)
{
	const char *res = rc == 0 ? "ok" : "error";
	sg_series **s = &p->m.lc_writes_s[rc == 0 ? 0 : 1];

	wh_del(w);
	if (*s == NULL) {
		const char *v[] = { res };

		*s = sg_metric_series(p->m.lc_writes, v);
	}
	/* a folded write shares the result of the one it joined */
	sg_series_add(*s, 1.0 + (double)w->folded);
	otlp_span_str(&w->span, "result", res);
	if (rc != 0) {
		otlp_span_status(&w->span, OTLP_STATUS_ERROR, error);
		log_store(p, "stargate last-cluster write failed", w->rid,
		    w->model, w->rk, res, error);
	}
	otlp_span_end(&w->span);
	w->next = p->wfree;
	p->wfree = w;
}

static void hand_over(proxy *p);

static void
on_store_event(evutil_socket_t fd, short what, void *arg)
{
	proxy *p = arg;
	sg_store_commit recs[32];
	size_t n, i;

	(void)fd;
	(void)what;
	if (p->store == NULL)
		return;
	/*
	 * A short drain emptied the ring: a record added after it makes the
	 * descriptor readable again, so only a full one is drained again
	 * (one read(2) of the eventfd per wake-up, not two).
	 */
	do {
		n = sg_store_drain(p->store, recs, 32);
		for (i = 0; i < n; i++)
			while (p->wq != NULL && p->wq->seq <= recs[i].ops_done) {
				gwwrite *w = p->wq;

				if ((p->wq = w->next) == NULL)
					p->wq_tail = NULL;
				p->wpending--;
				write_result(p, w, recs[i].rc, recs[i].rc == 0 ?
				    NULL : sg_strerror(recs[i].rc));
			}
	} while (n == 32);
	worker_maybe_exit(p);
}

bool
gateway_idle(proxy *p)
{
	if (p->draining && p->wb != NULL)
		hand_over(p);		/* no batching while draining */
	return p->wpending == 0;
}

static void
copy_label(char *dst, size_t cap, const char *s)
{
	size_t n = s != NULL ? strlen(s) : 0;

	if (n >= cap)
		n = cap - 1;
	if (n > 0)
		memcpy(dst, s, n);
	dst[n] = '\0';
}

/* Queue the batch to the store, in order. */
static void
hand_over(proxy *p)
{
	gwwrite *w;
	sg_error err;
	int rc;

	if (p->wb_timer != NULL)
		evtimer_del(p->wb_timer);
	while ((w = p->wb) != NULL) {
		if ((p->wb = w->next) == NULL)
			p->wb_tail = NULL;
		p->nwb--;
		w->next = NULL;
		w->batched = false;
		memset(&err, 0, sizeof(err));
		rc = sg_store_put_digest_seq(p->store, w->key, w->cl,
		    w->cl_len, &w->seq, &err);
		if (rc != 0) {
			p->wpending--;
			write_result(p, w, rc, err.text[0] != '\0' ?
			    err.text : sg_strerror(rc));
			continue;
		}
		if (p->wq_tail != NULL)
			p->wq_tail->next = w;
		else
			p->wq = w;
		p->wq_tail = w;
	}
}

static void
on_wb_timer(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	hand_over(arg);
}

static gwwrite *recent_write(proxy *p, const unsigned char *key);

/*
 * A write of a key whose last write still waits in the batch (not yet
 * handed to the store) takes that write's place: its cluster id, written
 * at the hand-over, is what the store would have kept anyway (last write
 * wins, and the entry's time, hence its TTL, is the hand-over's), so the
 * store is handed one put per key and batch, not one per request.  The
 * write counts on its own in the metrics (folded), and its request id is
 * the one a failed write's log names.  Only without recorded spans: a
 * traced write keeps its own span and put.
 */
static bool
fold(preq *q, const char *cl, size_t cl_len)
{
	proxy *p = q->p;
	gwwrite *w = recent_write(p, q->gw.key);

	if (w == NULL || !w->batched || w->span.recording ||
	    q->span.recording)
		return false;
	memcpy(w->cl, cl, cl_len);
	w->cl[cl_len] = '\0';
	w->cl_len = cl_len;
	copy_label(w->rid, sizeof(w->rid), q->gw.rid);
	w->folded++;
	q->gw.remembered = true;
	return true;
}

/* Queue the session's entry: cluster id cl[0..cl_len) (valid, at most
 * SG_ID_MAX bytes) served it. */
static void
remember(preq *q, const char *cl, size_t cl_len)
{
	proxy *p = q->p;
	gwwrite *w;

	if (fold(q, cl, cl_len))
		return;
	if ((w = p->wfree) != NULL)
		p->wfree = w->next;
	else if ((w = calloc(1, sizeof(*w))) == NULL)
		return;
	w->next = w->hnext = NULL;
	w->hprev = NULL;
	w->seq = 0;
	w->folded = 0;
	w->batched = false;
	copy_label(w->rid, sizeof(w->rid), q->gw.rid);
	copy_label(w->model, sizeof(w->model), q->gw.id.model);
	copy_label(w->rk, sizeof(w->rk), q->gw.id.routing_key);
	otlp_span_start(p->otlp, &w->span, SPAN_WRITE, OTLP_KIND_INTERNAL,
	    &q->span.ctx);
	if (q->gw.id.routing_key != NULL)
		otlp_span_str(&w->span, "nvcf.function.id",
		    q->gw.id.routing_key);
	q->gw.remembered = true;
	memcpy(w->key, q->gw.key, sizeof(w->key));
	memcpy(w->cl, cl, cl_len);
	w->cl[cl_len] = '\0';
	w->cl_len = cl_len;
	if (p->store == NULL) {
		write_result(p, w, SG_ESTORE, "no store");
		return;
	}
	if (p->wb_tail != NULL)
		p->wb_tail->next = w;
	else
		p->wb = w;
	p->wb_tail = w;
	w->batched = true;
	wh_add(p, w);
	p->nwb++;
	p->wpending++;
	if (p->nwb >= WB_MAX)
		hand_over(p);
	else if (p->nwb == 1 && p->wb_timer != NULL) {
		struct timeval tv;

		ms_to_tv(WB_MS, &tv);
		evtimer_add(p->wb_timer, &tv);
	}
}

/* The newest write of key not yet committed, or NULL. */
static gwwrite *
recent_write(proxy *p, const unsigned char *key)
{
	gwwrite *w;

	if (p->wh == NULL)
		return NULL;
	for (w = p->wh[wh_slot(key)]; w != NULL; w = w->hnext)
		if (memcmp(w->key, key, SG_LC_DIGEST_LEN) == 0)
			return w;
	return NULL;
}

int
gateway_worker_init(proxy *p)
{
	const pconf *c = p->conf;
	sg_store_opts o;
	sg_error err;
	sg_log_rec r;
	int rc, fd;

	if (c->role_id == ROLE_GATEWAY) {
		if ((rc = h1_upstream_get(p->h1, c->router_url,
		    &p->router_up)) != 0) {
			fprintf(stderr, "sg-proxy: --router-url: %s: %s\n",
			    c->router_url, strerror(rc));
			return EX_CONFIG;
		}
		if (gwpoll_init(p) != 0)
			return EX_OSERR;
	}
	if (!c->lc.enabled)
		return 0;
	if ((p->wh = calloc(WH_SIZE, sizeof(*p->wh))) == NULL)
		return EX_OSERR;
	sg_store_opts_init(&o);
	sg_lcconf_store_opts(&c->lc, &o);
	o.create = true;
	o.events = true;
	o.event_base = p->base;
	/* One store transaction (and wake-up) per hand-over, not several. */
	o.commit_delay_us = GW_COMMIT_DELAY_US;
	memset(&err, 0, sizeof(err));
	if ((rc = sg_store_open(&p->store, &o, &err)) != 0) {
		/* fail open: every eligible lookup counts as an error */
		p->store = NULL;
		sg_log_begin(&r, p->log, SG_LOG_ERROR, wall_s(),
		    "last-cluster store unavailable");
		sg_log_str(&r, "backend", sg_lc_backend_name(c->lc.backend));
		sg_log_str(&r, "error", err.text[0] != '\0' ? err.text :
		    sg_strerror(rc));
		sg_log_end(&r);
		return 0;
	}
	if ((p->wb_timer = evtimer_new(p->base, on_wb_timer, p)) == NULL)
		return EX_OSERR;
	if ((fd = sg_store_event_fd(p->store)) >= 0) {
		p->store_ev = event_new(p->base, fd, EV_READ | EV_PERSIST,
		    on_store_event, p);
		if (p->store_ev == NULL || event_add(p->store_ev, NULL) != 0)
			return EX_OSERR;
	}
	return 0;
}

void
gateway_worker_fini(proxy *p)
{
	gwwrite *w;

	gwpoll_fini(p);
	if (p->store != NULL) {
		/* flush what is queued, then take the last records */
		hand_over(p);
		(void)sg_store_flush(p->store, NULL);
		on_store_event(-1, 0, p);
	}
	while ((w = p->wq) != NULL) {
		p->wq = w->next;
		write_result(p, w, SG_ESTORE, "not committed at shutdown");
	}
	p->wq_tail = NULL;
	while ((w = p->wb) != NULL) {
		p->wb = w->next;
		write_result(p, w, SG_ESTORE, "no store");
	}
	p->wb_tail = NULL;
	p->nwb = 0;
	p->wpending = 0;
	if (p->wb_timer != NULL)
		event_free(p->wb_timer);
	p->wb_timer = NULL;
	if (p->store_ev != NULL)
		event_free(p->store_ev);
	p->store_ev = NULL;
	sg_store_close(p->store);
	p->store = NULL;
	while ((w = p->wfree) != NULL) {
		p->wfree = w->next;
		free(w);
	}
	free(p->wh);
	p->wh = NULL;
}

void
gateway_update_gauges(proxy *p)
{
	if (p->m.lc_conn != NULL && p->conf->lc.enabled)
		sg_series_set(sg_metric_series(p->m.lc_conn, NULL),
		    p->store != NULL && sg_store_connected(p->store) ? 1 : 0);
}

/* --- reply headers and the response rewrite -------------------------------- */

void
gateway_reply_headers(preq *q)
{
	if (q->req == NULL || !q->gw.on)
		return;
	/* the upstream's own are never copied (gateway_response_passes) */
	if (q->gw.rid[0] != '\0' &&
	    h1s_add_header(q->req, "x-request-id", q->gw.rid) != 0)
		q->oom = true;
	if (q->gw.id.session_id != NULL &&
	    h1s_add_header(q->req, "x-multi-turn-session-id",
	    q->gw.id.session_id) != 0)
		q->oom = true;
}

int
gateway_reply_start(preq *q, int status, const char *cluster_id)
{
	gwreq *g = &q->gw;
	size_t n;

	gateway_reply_headers(q);
	if (status >= 200 && status < 300 && g->has_key && !g->remembered &&
	    cluster_id != NULL && (n = strnlen(cluster_id, SG_ID_MAX + 1)) <=
	    SG_ID_MAX && sg_lc_cluster_id_valid(cluster_id, n))
		remember(q, cluster_id, n);
	if (status == 503 && g->uerrcodes == 1 && g->uoverloaded)
		return 529;
	return status;
}

void
gateway_rw_mode(preq *q, const char *ctype, size_t len)
{
	q->gw.rw = RW_NONE;
	if (q->gw.pub == NULL || q->gw.routed == NULL ||
	    (q->gw.publen == q->gw.routedlen &&
	    memcmp(q->gw.pub, q->gw.routed, q->gw.publen) == 0))
		return;
	if (len >= 17 && strncasecmp(ctype, "text/event-stream", 17) == 0)
		q->gw.rw = RW_SSE;
	else if (len >= 16 && strncasecmp(ctype, "application/json", 16) == 0)
		q->gw.rw = RW_JSON;
}

void
gateway_send_start(preq *q, int status, const char *reason)
{
	gwreq *g = &q->gw;

	if (g->rw == RW_JSON && g->ulen >= 0 && g->ulen <= RW_JSON_MAX) {
		g->held = true;
		g->hstatus = status;
		copy_label(g->hreason, sizeof(g->hreason), reason);
		return;
	}
	/* a rewritten body changes length: chunked */
	h1s_reply_start(q->req, status, reason, g->rw == RW_NONE ? q->ulen :
	    -1);
}

/* The held reply: its body is in q->ob, whole. */
static void
unhold(preq *q)
{
	gwreq *g = &q->gw;

	if (!g->held || q->req == NULL || q->oom)
		return;		/* out of memory: still held, cut as a 502 */
	g->held = false;
	h1s_reply_start(q->req, g->hstatus, g->hreason, (int64_t)q->ob.len);
}

static int
rb_add(gwreq *g, const char *p, size_t n)
{
	if (g->rblen + n > g->rbcap) {
		size_t cap = g->rbcap == 0 ? 4096 : g->rbcap;
		char *nb;

		while (cap < g->rblen + n)
			cap *= 2;
		if ((nb = realloc(g->rb, cap)) == NULL)
			return -1;
		g->rb = nb;
		g->rbcap = cap;
	}
	memcpy(g->rb + g->rblen, p, n);
	g->rblen += n;
	return 0;
}

/* s[0..n) with the value at [voff, voff+vlen) replaced by the public id
 * when it is the routed model's literal. */
static void
emit_swapped(preq *q, const char *s, size_t n, size_t voff, size_t vlen)
{
	gwreq *g = &q->gw;

	if (vlen == g->routedlen && memcmp(s + voff, g->routed, vlen) == 0) {
		(void)forward_chunk_add(q, s, voff);
		(void)forward_chunk_add(q, g->pub, g->publen);
		(void)forward_chunk_add(q, s + voff + vlen, n - voff - vlen);
	} else
		(void)forward_chunk_add(q, s, n);
}

static void
json_step(preq *q, const char *ptr, size_t len, bool flush)
{
	gwreq *g = &q->gw;
	size_t voff, vlen;
	int r;

	if (len > 0 && rb_add(g, ptr, len) != 0) {
		(void)forward_chunk_add(q, g->rb, g->rblen);
		(void)forward_chunk_add(q, ptr, len);
		g->rblen = 0;
		g->rw_done = true;
		unhold(q);
		return;
	}
	/* a held reply is rewritten whole (its length is then known) */
	if (g->held && !flush && (int64_t)g->rblen < g->ulen)
		return;
	r = gj_find_model(g->rb, g->rblen, &voff, &vlen);
	if (r == GJ_MORE && !flush && !g->held && g->rblen < RW_JSON_MAX)
		return;
	if (r == GJ_FOUND)
		emit_swapped(q, g->rb, g->rblen, voff, vlen);
	else
		(void)forward_chunk_add(q, g->rb, g->rblen);
	g->rblen = 0;
	g->rw_done = true;
	unhold(q);
}

/* One complete event-stream line s[0..n) (with its newline). */
static void
sse_line(preq *q, const char *s, size_t n)
{
	size_t j = 5, e = n, voff, vlen;

	if (n < 5 || memcmp(s, "data:", 5) != 0) {
		(void)forward_chunk_add(q, s, n);
		return;
	}
	while (e > j && (s[e - 1] == '\n' || s[e - 1] == '\r'))
		e--;
	if (j < e && s[j] == ' ')
		j++;
	if (gj_find_model(s + j, e - j, &voff, &vlen) == GJ_FOUND)
		emit_swapped(q, s, n, j + voff, vlen);
	else
		(void)forward_chunk_add(q, s, n);
}

static void
sse_step(preq *q, const char *ptr, size_t len, bool flush)
{
	gwreq *g = &q->gw;
	const char *nl;
	size_t start = 0;

	if (g->rw_midline) {
		if ((nl = memchr(ptr, '\n', len)) == NULL) {
			(void)forward_chunk_add(q, ptr, len);
			return;
		}
		(void)forward_chunk_add(q, ptr, (size_t)(nl - ptr) + 1);
		len -= (size_t)(nl - ptr) + 1;
		ptr = nl + 1;
		g->rw_midline = false;
	}
	if (len > 0 && rb_add(g, ptr, len) != 0) {
		(void)forward_chunk_add(q, g->rb, g->rblen);
		(void)forward_chunk_add(q, ptr, len);
		g->rblen = 0;
		g->rw_midline = true;
		return;
	}
	while (start < g->rblen && (nl = memchr(g->rb + start, '\n',
	    g->rblen - start)) != NULL) {
		size_t end = (size_t)(nl - g->rb) + 1;

		sse_line(q, g->rb + start, end - start);
		start = end;
	}
	if (start > 0) {
		memmove(g->rb, g->rb + start, g->rblen - start);
		g->rblen -= start;
	}
	if (flush || g->rblen > RW_LINE_MAX) {
		(void)forward_chunk_add(q, g->rb, g->rblen);
		g->rw_midline = !flush && g->rblen > 0;
		g->rblen = 0;
	}
}

void
gateway_emit(preq *q, const char *ptr, size_t len, bool flush)
{
	gwreq *g = &q->gw;

	if (g->rw == RW_JSON && !g->rw_done)
		json_step(q, ptr, len, flush);
	else if (g->rw == RW_SSE)
		sse_step(q, ptr, len, flush);
	else if (len > 0)
		(void)forward_chunk_add(q, ptr, len);
	if (q->ob.len > 0 && !q->oom) {
		forward_send(q, q->ob.b, q->ob.len);
		q->ob.len = 0;
	}
}

/* --- the gateway role's forward to the router -------------------------- */

static bool
hop_by_hop(const char *name, size_t len)
{
#define HBH(s)	{ s, sizeof(s) - 1 }
	static const struct {
		const char	*s;
		size_t		 n;
	} l[] = {
		HBH("connection"), HBH("proxy-connection"), HBH("keep-alive"),
		HBH("transfer-encoding"), HBH("te"), HBH("trailer"),
		HBH("upgrade"), HBH("host"), HBH("content-length"),
		HBH("expect"), HBH("traceparent"),
	};
#undef HBH
	size_t i;

	/* a length test per entry; most names match no length */
	for (i = 0; i < sizeof(l) / sizeof(l[0]); i++)
		if (l[i].n == len && ((unsigned char)name[0] | 0x20) ==
		    (unsigned char)l[i].s[0] &&
		    strncasecmp(l[i].s, name, len) == 0)
			return true;
	return false;
}

/* Does the client header travel on?  Not hop-by-hop, not the gateway's
 * own (replaced by the trusted headers), not x-request-id (resolved).
 * name is NUL-terminated (h1s.h). */
bool
gateway_client_header_passes(const char *name, size_t len)
{
	return !hop_by_hop(name, len) && !sg_gateway_inbound_owned(name) &&
	    !(len == 12 && strncasecmp(name, "x-request-id", 12) == 0);
}

/* Role all: the client fields an engine gets. */
static bool
engine_passes(const char *name, size_t len)
{
	return !header_forbidden(name, len) &&
	    gateway_client_header_passes(name, len);
}

/* The trusted headers q->gw.gh onto the header block (forbidden: the
 * engine's filter, or NULL for none). */
static int
trusted_headers(preq *q, bool (*forbidden)(const char *, size_t))
{
	size_t i;

	for (i = 0; i < q->gw.gh.n; i++) {
		const sg_header *h = &q->gw.gh.h[i];
		size_t nl = strlen(h->name);

		if (forbidden != NULL && forbidden(h->name, nl))
			continue;
		if (forward_hblk_add(q, h->name, nl, h->value,
		    strlen(h->value)) != 0)
			return -1;
	}
	return 0;
}

/* The trusted headers for an in-process router's engine request (role
 * all): the client's headers that pass, plus those trusted headers a
 * remote router would pass on to the engine (header_forbidden applies). */
int
gateway_engine_headers(preq *q)
{
	if (forward_client_headers(q, engine_passes) != 0)
		return -1;
	return trusted_headers(q, header_forbidden);
}

static int
router_headers(preq *q)
{
	char tp[OTLP_TRACEPARENT_LEN + 1];

	q->hblen = 0;
	if (forward_client_headers(q, gateway_client_header_passes) != 0 ||
	    trusted_headers(q, NULL) != 0)
		return -1;
	otlp_span_traceparent(&q->aspan, tp);
	return forward_hblk_add(q, "traceparent", 11, tp, strlen(tp));
}

static void
g_start_reply(preq *q)
{
	int up = q->ustatus, status = gateway_reply_start(q, up,
	    q->gw.ucluster[0] != '\0' ? q->gw.ucluster : NULL);

	if (q->close_after)
		h1s_set_close(q->req);
	q->phase = PQ_STREAMING;
	otlp_span_int(&q->aspan, "proxy.upstream_status", up);
	q->ustatus = status;
	gateway_send_start(q, status, status != up || q->ureason[0] == '\0' ?
	    http_reason(status) : q->ureason);
}

static void
note_header(preq *q, const h1_header *h, const char **ctype, size_t *ctlen)
{
	gwreq *g = &q->gw;
	size_t nl = h->name_len, vl = h->value_len;

	if (nl == 21 && strncasecmp(h->name, "x-stargate-cluster-id", 21) == 0) {
		if (vl > 0 && vl <= SG_ID_MAX &&
		    sg_lc_cluster_id_valid(h->value, vl)) {
			memcpy(g->ucluster, h->value, vl);
			g->ucluster[vl] = '\0';
		}
	} else if (nl == 21 && strncasecmp(h->name, "x-stargate-error-code",
	    21) == 0) {
		g->uerrcodes++;
		g->uoverloaded = vl == 16 &&
		    memcmp(h->value, "overloaded_error", 16) == 0;
	} else if (nl == 12 && strncasecmp(h->name, "content-type", 12) == 0) {
		*ctype = h->value;
		*ctlen = vl;
	}
}

/* Record what the gateway needs from an upstream response head (role all
 * calls this from forward.c too) and pick the rewrite mode. */
void
gateway_note_headers(preq *q, const h1_resp *r)
{
	const char *ctype = "";
	size_t ctlen = 0, i;

	q->gw.ucluster[0] = '\0';
	q->gw.ulen = r->content_length;
	q->gw.uerrcodes = 0;
	q->gw.uoverloaded = false;
	for (i = 0; i < r->nheaders; i++)
		note_header(q, &r->headers[i], &ctype, &ctlen);
	gateway_rw_mode(q, ctype, ctlen);
}

/* Does an upstream response header reach the client?  Never the
 * x-stargate-* and x-inference-server-* ones (sg_gateway_response_stripped
 * on a NUL-terminated copy), nor those the gateway sets itself. */
bool
gateway_response_passes(preq *q, const char *name, size_t nl)
{
	char buf[64];

	(void)q;
	if (nl >= 11 && strncasecmp(name, "x-stargate-", 11) == 0)
		return false;
	if (nl < sizeof(buf)) {
		memcpy(buf, name, nl);
		buf[nl] = '\0';
		if (sg_gateway_response_stripped(buf))
			return false;
	}
	if ((nl == 12 && strncasecmp(name, "x-request-id", 12) == 0) ||
	    (nl == 23 && strncasecmp(name, "x-multi-turn-session-id", 23) ==
	    0))
		return false;
	/* the framing is h1s's (gateway_send_start) */
	return !hop_by_hop(name, nl) && !(nl == 4 &&
	    strncasecmp(name, "date", 4) == 0);
}

static void g_over(preq *q, bool ok, const char *error);

/*
 * The router's reply broke off (cut, out of memory, or stalled past
 * --upstream-timeout-ms) while the gateway held it whole for the rewrite:
 * the client has seen nothing, so it is answered status/code as if no
 * reply had come (the all role's reply_cut does the same).  false: not
 * held, the caller cuts the connection.
 */
static bool
g_cut_held(preq *q, int status, const char *code, const char *msg,
    const char *error)
{
	sg_log_rec r;

	if (!q->gw.held || q->req == NULL)
		return false;
	q->gw.held = false;
	sg_log_begin(&r, q->p->log, SG_LOG_WARN, wall_s(),
	    "router reply cut short");
	sg_log_str(&r, "request_id", q->gw.rid);
	sg_log_str(&r, "error", error);
	sg_log_end(&r);
	otlp_span_status(&q->aspan, OTLP_STATUS_ERROR, error);
	forward_cancel(q);
	q->ob.len = 0;
	h1s_clear_headers(q->req);
	gw_fail(q, status, "api_error", code, msg);
	return true;
}

static int
g_headers(void *arg, const h1_resp *r)
{
	preq *q = arg;

	if (q->req == NULL)
		return H1_ABORT;
	gateway_note_headers(q, r);
	forward_copy_response(q, r, gateway_response_passes);
	if (q->oom) {
		/* out of memory: nothing sent yet, the client gets a 502 */
		h1_cancel(q->hx);
		q->hx = NULL;
		g_over(q, false, "out of memory");
		return H1_ABORT;
	}
	g_start_reply(q);
	return H1_CONTINUE;
}

static void
g_data(void *arg, const char *ptr, size_t len)
{
	preq *q = arg;

	q->last_data_ms = mono_ms();
	if (q->phase != PQ_STREAMING || q->req == NULL) {
		h1_cancel(q->hx);
		q->hx = NULL;
		g_over(q, false, "client gone");
		return;
	}
	gateway_emit(q, ptr, len, false);
	if (q->oom) {
		/* out of memory: a body with a hole must not look whole */
		h1_cancel(q->hx);
		q->hx = NULL;
		g_over(q, false, "out of memory");
	}
}

static void
g_over(preq *q, bool ok, const char *error)
{
	int status = q->ustatus;
	sg_log_rec r;

	if (q->phase != PQ_STREAMING) {
		sg_log_begin(&r, q->p->log, SG_LOG_WARN, wall_s(),
		    "router request failed");
		sg_log_str(&r, "request_id", q->gw.rid);
		sg_log_str(&r, "error", error);
		sg_log_end(&r);
		otlp_span_status(&q->aspan, OTLP_STATUS_ERROR, error);
		forward_cancel(q);
		if (q->req != NULL)
			h1s_clear_headers(q->req);
		gw_fail(q, 502, "api_error", "upstream_error",
		    "upstream request failed");
		return;
	}
	if (ok && q->req != NULL)
		gateway_emit(q, NULL, 0, true);
	if ((!ok || q->oom) && g_cut_held(q, 502, "upstream_error",
	    "upstream request failed", ok ? "out of memory" : error))
		return;
	forward_cancel(q);
	if (!ok || q->oom)
		forward_abort_client(q);
	else if (q->req != NULL) {
		worker_track_reply(q->req);
		h1s_reply_end(q->req);
		q->req = NULL;
	}
	metrics_request(q, q->gw.ucluster, status);
	preq_finish(q, status);
}

static void
g_done(void *arg, int err)
{
	preq *q = arg;

	q->hx = NULL;
	g_over(q, err == H1_OK, h1_strerror(err));
}

static const h1_cbs router_cbs = { g_headers, g_data, g_done };

static void
to_router(preq *q)
{
	proxy *p = q->p;
	size_t ulen;
	const char *uri = h1s_target(q->req, &ulen);
	struct timeval tv;
	h1_req r;

	q->phase = PQ_UPSTREAM;
	q->attempts++;
	q->ustatus = 0;
	q->ureason[0] = '\0';
	q->got_bytes = q->paused = false;
	q->attempt_t0 = q->last_data_ms = mono_ms();
	otlp_span_start(p->otlp, &q->aspan, SPAN_UPSTREAM, OTLP_KIND_CLIENT,
	    &q->span.ctx);
	if (router_headers(q) != 0) {
		gw_fail(q, 500, "api_error", "internal_error",
		    "out of memory");
		return;
	}
	memset(&r, 0, sizeof(r));
	r.method = "POST";
	r.prefix = h1_url_path(p->conf->router_url, &r.prefix_len);
	r.target = uri;
	r.target_len = ulen;
	r.hdrs = q->hblk;
	r.hdrs_len = q->hblen;
	r.body = q->gw.send;
	r.body_len = q->gw.blen;
	ms_to_tv((double)p->conf->upstream_timeout_ms, &tv);
	evtimer_add(q->timer, &tv);
	if ((q->hx = h1_start(p->h1, p->router_up, &r, &router_cbs, q)) ==
	    NULL)
		gw_fail(q, 500, "api_error", "internal_error",
		    "out of memory");
}

static void
idle_check(preq *q)
{
	double idle = mono_ms() - q->last_data_ms;
	double limit = (double)q->p->conf->upstream_timeout_ms;
	struct timeval tv;

	if (q->paused || idle < limit) {
		ms_to_tv(q->paused ? limit : limit - idle, &tv);
		evtimer_add(q->timer, &tv);
		return;
	}
	otlp_span_status(&q->aspan, OTLP_STATUS_ERROR, "idle timeout");
	if (q->phase == PQ_STREAMING && g_cut_held(q, 504, "upstream_timeout",
	    "upstream timed out", "idle timeout"))
		return;
	if (q->phase == PQ_STREAMING) {
		int status = q->ustatus;

		forward_cancel(q);
		forward_abort_client(q);
		metrics_request(q, q->gw.ucluster, status);
		preq_finish(q, status);
		return;
	}
	forward_cancel(q);
	if (q->req != NULL)
		h1s_clear_headers(q->req);
	gw_fail(q, 504, "api_error", "upstream_timeout", "upstream timed out");
}

/* --- after the lookup: the trusted headers, then route or forward ------- */

/*
 * Role all: the hint straight into the router's request, as the header
 * contract delivers it (sg_gateway_build and the router's parser apply the
 * same optional-string rule, and only to an eligible session), without a
 * header built and parsed back per request.  An engine never gets the
 * header (header_forbidden), so the engine's headers are the same.
 */
static void
hint_direct(preq *q)
{
	gwreq *g = &q->gw;
	const char *t;
	size_t tlen;

	if (g->hint_len == 0 || !sg_gateway_store_eligible(&g->id) ||
	    !sg_optional_string(g->hint, g->hint_len, &t, &tlen))
		return;
	if (t != g->hint)
		memmove(g->hint, t, tlen);
	g->hint[tlen] = '\0';
	g->hint_len = tlen;
	q->sr.last_cluster_id = g->hint;
	q->sr.last_cluster_id_len = tlen;
}

static void
proceed(preq *q)
{
	proxy *p = q->p;
	gwreq *g = &q->gw;
	bool inproc = p->conf->role_id != ROLE_GATEWAY;
	const sg_algdef *def;
	sg_error err;
	int rc;

	q->phase = PQ_ROUTING;
	g->rt.request_id = g->rid;
	g->rt.last_cluster_id = g->hint_len > 0 && !inproc ? g->hint : NULL;
	memset(&err, 0, sizeof(err));
	if ((rc = sg_gateway_build(&g->gh, &g->id, &g->rt, &err)) != 0 ||
	    (rc = sg_gateway_request(&q->sr, &g->gh, &err)) != 0) {
		if (rc == SG_EREQUEST)
			gw_fail(q, err.status != 0 ? err.status : 400,
			    "invalid_request_error", NULL, err.text);
		else
			gw_fail(q, 500, "api_error", "internal_error",
			    err.text[0] != '\0' ? err.text : sg_strerror(rc));
		return;
	}
	if (!inproc) {
		to_router(q);
		return;
	}
	hint_direct(q);
	if ((rc = sg_lbconf_resolve(p->lb, q->sr.model, q->sr.routing_method,
	    q->sr.routing_method_invalid, &def, &err)) != 0) {
		if (rc == SG_EREQUEST && err.status != 0) {
			route_fail(q, err.status, err.code[0] != '\0' ?
			    err.code : "invalid_request", err.text);
		} else
			gw_fail(q, 500, "api_error", "internal_error",
			    sg_strerror(rc));
		return;
	}
	route_start(q);
}

static const char *const lookup_results[] = {
	"hit", "miss", "error", "timeout", "skipped",
};
enum { LK_HIT, LK_MISS, LK_ERROR, LK_TIMEOUT, LK_SKIPPED };

/* The series are found once (sg_metrics.h: series are never removed). */
static void
count_lookup(proxy *p, int res)
{
	sg_series **s = &p->m.lc_lookups_s[res];

	if (*s == NULL) {
		const char *v[] = { lookup_results[res] };

		*s = sg_metric_series(p->m.lc_lookups, v);
	}
	sg_series_inc(*s);
}

/*
 * The lookup's end: rc and, on a hit, the cluster id cl[0..cl_len) (NULL:
 * the store's entry in g->lk).  The clock is read once here: for the
 * duration histogram and, passed down in q->now_ms, for the routing step
 * that follows at once.
 */
static void
lookup_done(preq *q, int rc, const char *error, const char *cl,
    size_t cl_len)
{
	proxy *p = q->p;
	gwreq *g = &q->gw;
	uint64_t now = sg_store_mono_ns();
	double secs = (double)(now - g->lk_t0) / 1e9;
	int res;

	if (rc == 0 && cl == NULL) {
		cl = g->lk.entry.cluster_id;
		cl_len = g->lk.entry.cluster_id_len;
		if (!sg_lc_cluster_id_valid(cl, cl_len))
			cl = NULL;
	}
	q->now_ms = (double)now / 1e6;
	if (rc == 0 && cl != NULL) {
		res = LK_HIT;
		memcpy(g->hint, cl, cl_len);
		g->hint[cl_len] = '\0';
		g->hint_len = cl_len;
	} else if (rc == 0 || rc == SG_ENOTFOUND)
		res = LK_MISS;
	else if (rc == ETIMEDOUT || rc == EBUSY)
		res = LK_TIMEOUT;
	else
		res = LK_ERROR;
	count_lookup(p, res);
	if (p->m.lc_dur_s == NULL)
		p->m.lc_dur_s = sg_metric_series(p->m.lc_dur, NULL);
	sg_series_observe(p->m.lc_dur_s, secs);
	otlp_span_str(&g->lspan, "result", lookup_results[res]);
	if (res == LK_ERROR || res == LK_TIMEOUT) {
		otlp_span_status(&g->lspan, OTLP_STATUS_ERROR,
		    lookup_results[res]);
		if (res == LK_ERROR || q->now_ms - p->last_timeout_log >=
		    TIMEOUT_LOG_MS) {
			if (res == LK_TIMEOUT)
				p->last_timeout_log = q->now_ms;
			log_store(p, "stargate last-cluster lookup failed",
			    g->rid, g->id.model, g->id.routing_key,
			    lookup_results[res], error != NULL ? error :
			    sg_strerror(rc));
		}
	}
	otlp_span_end(&g->lspan);
	proceed(q);
}

static void
on_lookup(sg_store_lookup_req *req, void *arg)
{
	preq *q = arg;

	(void)req;
	if (!q->gw.lk_pending)
		return;
	q->gw.lk_pending = false;
	evtimer_del(q->timer);
	lookup_done(q, q->gw.lk.rc, q->gw.lk.err.text[0] != '\0' ?
	    q->gw.lk.err.text : NULL, NULL, 0);
}

void
gateway_cancel(preq *q)
{
	if (q->gw.lk_pending && q->p->store != NULL)
		sg_store_lookup_cancel(q->p->store, &q->gw.lk);
	q->gw.lk_pending = false;
}

void
gateway_on_timer(preq *q)
{
	if (q->phase == PQ_LOOKUP) {
		if (!q->gw.lk_pending)
			return;
		gateway_cancel(q);
		lookup_done(q, ETIMEDOUT, "lookup deadline passed", NULL, 0);
		return;
	}
	idle_check(q);
}

/* Step 4: the store, for eligible sessions with the feature on. */
static void
lookup(preq *q)
{
	proxy *p = q->p;
	gwreq *g = &q->gw;
	const gwwrite *w;
	uint64_t deadline;
	struct timeval tv;
	int rc;

	if (!p->conf->lc.enabled || g->id.cache_affinity_key == NULL) {
		proceed(q);
		return;
	}
	if (sg_gateway_store_digest(&g->id, g->key) != 0) {
		count_lookup(p, LK_SKIPPED);
		proceed(q);
		return;
	}
	g->has_key = true;
	g->lk_t0 = sg_store_mono_ns();
	deadline = g->lk_t0 + p->conf->lc.lookup_timeout_ns;
	otlp_span_start(p->otlp, &g->lspan, SPAN_LOOKUP, OTLP_KIND_INTERNAL,
	    &q->span.ctx);
	if (g->id.routing_key != NULL)
		otlp_span_str(&g->lspan, "nvcf.function.id", g->id.routing_key);
	if (p->store == NULL || !sg_store_connected(p->store)) {
		lookup_done(q, SG_ESTORE, p->store == NULL ? "no store" :
		    "store not connected", NULL, 0);
		return;
	}
	/* newer than anything committed (valid: remember checked it) */
	if ((w = recent_write(p, g->key)) != NULL) {
		lookup_done(q, 0, NULL, w->cl, w->cl_len);
		return;
	}
	/* g->lk is the store's to initialise (sg_store.h) */
	rc = sg_store_lookup_start_digest(p->store, &g->lk, g->key, deadline,
	    on_lookup, q);
	if (rc == EINPROGRESS) {
		q->phase = PQ_LOOKUP;
		g->lk_pending = true;
		ms_to_tv((double)(deadline - g->lk_t0) / 1e6, &tv);
		evtimer_add(q->timer, &tv);
		return;
	}
	lookup_done(q, rc == 0 ? g->lk.rc : rc, g->lk.err.text[0] != '\0' ?
	    g->lk.err.text : NULL, NULL, 0);
}

/* --- accepting a request --------------------------------------------------- */

/* x-request-id under the optional-string rule, else a new UUID. */
static void
request_id(preq *q, h1s_req *req)
{
	static const char hex[] = "0123456789abcdef";
	const char *v = h1s_find_header(req, "x-request-id"), *t;
	uint8_t b[OTLP_TRACE_ID_LEN];
	size_t tlen, i, o = 0;

	if (v != NULL && sg_optional_string(v, strlen(v), &t, &tlen) &&
	    tlen < sizeof(q->gw.rid)) {
		memcpy(q->gw.rid, t, tlen);
		q->gw.rid[tlen] = '\0';
		return;
	}
	otlp_random_trace_id(b);
	b[6] = (uint8_t)((b[6] & 0x0f) | 0x40);
	b[8] = (uint8_t)((b[8] & 0x3f) | 0x80);
	for (i = 0; i < 16; i++) {
		if (i == 4 || i == 6 || i == 8 || i == 10)
			q->gw.rid[o++] = '-';
		q->gw.rid[o++] = hex[b[i] >> 4];
		q->gw.rid[o++] = hex[b[i] & 15];
	}
	q->gw.rid[o] = '\0';
}

static int
endpoint_id(const char *label)
{
	if (strcmp(label, "chat_completions") == 0)
		return SG_ENDPOINT_CHAT;
	if (strcmp(label, "completions") == 0)
		return SG_ENDPOINT_COMPLETIONS;
	if (strcmp(label, "responses") == 0)
		return SG_ENDPOINT_RESPONSES;
	return SG_ENDPOINT_EMBEDDINGS;
}

/* The model literals: freed unless in the request's own buffers. */
static void
lit_free(gwreq *g)
{
	if (g->pub != g->pubin)
		free(g->pub);
	if (g->routed != g->routedin)
		free(g->routed);
	g->pub = g->routed = NULL;
	g->publen = g->routedlen = 0;
}

/*
 * The rewritten body: the top-level "model" value (the public id, kept
 * as the client wrote it for the response rewrite) replaced by the routed
 * model's literal.  0, or -1 (out of memory).
 */
static int
rewrite_body(gwreq *g, const char *b, size_t n)
{
	size_t voff = 0, vlen = 0, need, ml;

	lit_free(g);
	if (gj_find_model(b, n, &voff, &vlen) != GJ_FOUND || vlen < 2 ||
	    b[voff] != '"') {
		/* cannot happen for a body whose model parsed */
		voff = vlen = 0;
	} else {
		/* the literals live in the request unless too long */
		g->pub = vlen < GW_LIT_IN ? g->pubin : malloc(vlen + 1);
		if (g->pub == NULL)
			return -1;
		memcpy(g->pub, b + voff, vlen);
		g->pub[vlen] = '\0';
		g->publen = vlen;
		ml = strlen(g->id.model);
		g->routed = GJ_QUOTE_MAX(ml) <= GW_LIT_IN ? g->routedin :
		    malloc(GJ_QUOTE_MAX(ml));
		if (g->routed == NULL)
			return -1;
		g->routedlen = gj_quote_to(g->routed, g->id.model, ml);
	}
	if (g->routed != NULL && g->routedlen <= vlen && voff <= INPLACE_MAX) {
		/*
		 * In place: the routed literal is no longer than the public
		 * one, so the head (up to the value: "model" comes first in
		 * most bodies) moves right by the difference and the rest,
		 * the prompt, is not copied.  The body is the request's own
		 * (h1s_body: nothing else reads it on the gateway edge, and it
		 * is not read again before it is sent).
		 */
		size_t d = vlen - g->routedlen;
		char *w = (char *)(uintptr_t)b;

		memmove(w + d, w, voff);
		memcpy(w + d + voff, g->routed, g->routedlen);
		g->send = w + d;
		g->blen = n - d;
		return 0;
	}
	need = n - vlen + g->routedlen + 1;
	if (need > g->bcap) {
		char *nb = realloc(g->body, need);

		if (nb == NULL)
			return -1;
		g->body = nb;
		g->bcap = need;
	}
	memcpy(g->body, b, voff);
	if (g->routed != NULL)
		memcpy(g->body + voff, g->routed, g->routedlen);
	memcpy(g->body + voff + g->routedlen, b + voff + vlen,
	    n - voff - vlen);
	g->blen = n - vlen + g->routedlen;
	g->send = g->body;
	return 0;
}

/* The API key binds a routing key: a model id without one gets it. */
static int
tenant_model(json_t *body, const apikey *k)
{
	json_t *m = json_object_get(body, "model");
	const char *s = json_string_value(m);
	char *full;
	size_t n;
	int rc;

	if (k == NULL || k->routing_key == NULL || s == NULL ||
	    strchr(s, '/') != NULL || s[0] == '\0')
		return 0;
	n = strlen(k->routing_key) + strlen(s) + 2;
	if ((full = malloc(n)) == NULL)
		return -1;
	snprintf(full, n, "%s/%s", k->routing_key, s);
	rc = json_object_set_new(body, "model", json_string(full));
	free(full);
	return rc;
}

/* The body (h1s: at most --max-body-bytes, whole) and fields are h1s's. */
void
gateway_accept(proxy *p, h1s_req *req, const char *endpoint)
{
	size_t blen, n;
	const char *bytes = h1s_body(req, &blen);
	const sg_header *hl = http_header_list(p, req, &n);
	const apikey *key = NULL;
	json_error_t jerr;
	json_t *body;
	sg_error err;
	preq *q;
	int rc;

	if (bytes == NULL)
		bytes = "";
	if ((q = preq_get(p)) == NULL) {
		send_oai_error(req, 500, "api_error", NULL, "out of memory");
		return;
	}
	q->req = req;
	q->endpoint = endpoint;
	q->gw.on = true;
	q->close_after = p->draining;
	request_id(q, req);
	if (p->nkeys > 0 && (key = auth_key(p, req)) == NULL) {
		refuse(q, 401, "invalid_request_error", "invalid_api_key",
		    "Invalid API key provided.");
		return;
	}
	memset(&err, 0, sizeof(err));
	/* the byte scan answers the common case; the full parse the rest
	 * (and a tenant's model id without its routing key) */
	rc = sg_identity_parse_text(&q->gw.id, endpoint_id(endpoint), bytes,
	    blen, hl, n, key != NULL ? key->routing_key : NULL, &err);
	if (rc == ENOTSUP || (rc == SG_EREQUEST && key != NULL &&
	    key->routing_key != NULL)) {
		if ((body = json_loadb(bytes, blen, 0, &jerr)) == NULL) {
			refuse(q, 400, "invalid_request_error", NULL,
			    "request body is not valid JSON");
			return;
		}
		memset(&err, 0, sizeof(err));
		if (tenant_model(body, key) != 0)
			rc = sg_seterr(&err, SG_ENOMEM, "out of memory");
		else
			rc = sg_identity_parse(&q->gw.id, endpoint_id(endpoint),
			    body, hl, n, key != NULL ? key->routing_key :
			    NULL, &err);
		json_decref(body);
	}
	if (rc != 0) {
		if (rc == SG_EREQUEST)
			refuse(q, err.status != 0 ? err.status : 400,
			    "invalid_request_error", NULL, err.text);
		else
			refuse(q, 500, "api_error", NULL, sg_strerror(rc));
		return;
	}
	if (rewrite_body(&q->gw, bytes, blen) != 0) {
		refuse(q, 500, "api_error", NULL, "out of memory");
		return;
	}
	if (key != NULL && key->has_priority) {
		q->gw.rt.has_priority = true;
		q->gw.rt.priority = key->priority;
	}
	route_attach(q);
	otlp_span_str(&q->span, "request.id", q->gw.rid);
	lookup(q);
}

void
gateway_release(preq *q)
{
	gwreq *g = &q->gw;

	gateway_cancel(q);
	otlp_span_end(&g->lspan);
	sg_identity_release(&g->id);
	lit_free(g);
	memset(&g->rt, 0, sizeof(g->rt));
	g->gh.n = 0;
	g->on = g->has_key = g->remembered = false;
	g->rid[0] = g->hint[0] = g->ucluster[0] = '\0';
	g->hint_len = 0;
	g->blen = g->rblen = 0;
	g->send = NULL;
	g->rw = RW_NONE;
	g->rw_done = g->rw_midline = g->held = false;
	g->ulen = -1;
	g->uerrcodes = 0;
	g->uoverloaded = false;
}
