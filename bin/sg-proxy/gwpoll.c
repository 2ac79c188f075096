/*
 * gwpoll.c — the gateway role's view of its router (sg-proxy(8), "GET
 * /readyz" and "GET /v1/models"), kept off the request path.
 *
 * Readiness: every worker of --role gateway polls --router-url's /readyz
 * on its own loop with the native client (h1.c), at startup and then
 * POLL_MS after each answer, each poll bounded by POLL_TIMEOUT_MS without
 * a byte; nothing blocks, and a poll in flight never delays a request.
 * The router is ready while its last /readyz answered 200 less than
 * READY_STALE_MS ago: a refused or timed-out poll, or any other status,
 * makes the gateway's own /readyz 503 at once.  Readiness changes are
 * logged once each (info when ready, warn when not).
 *
 * Models: a client's GET /v1/models asks the router's /v1/models on the
 * loop (bounded by --upstream-timeout-ms; a client that leaves cancels
 * it), takes the "id" of every member of "data" (sorted, duplicates
 * dropped, at most MODELS_MAX bytes of document) and answers them through
 * gateway_models_reply, under the caller's routing key.  A router that
 * cannot be asked, or answers another status or shape, is a 502.
 */
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <jansson.h>

#include "proxy.h"

#define POLL_MS		500.0
#define POLL_TIMEOUT_MS	1000
#define READY_STALE_MS	2500.0
#define MODELS_MAX	(1u << 20)

struct gwpoll {
	proxy		*p;
	struct event	*timer;
	h1_xfer		*x;		/* the poll in flight, or NULL */
	int		 status;
	bool		 ready;		/* the last /readyz answered 200 */
	bool		 logged;	/* a readiness state was logged */
	bool		 logged_ready;
	double		 ok_ms;		/* when it did */
	struct mfetch	*fetches;	/* GET /v1/models in flight */
};

/* One client's GET /v1/models, asked of the router. */
typedef struct mfetch {
	gwpoll		*g;
	h1s_req		*req;
	h1_xfer		*x;
	char		*rk;		/* the caller's routing key, or NULL */
	int		 status;
	bool		 over;		/* larger than MODELS_MAX */
	pbuf		 body;
	struct mfetch	*prev, *next;
} mfetch;

static void	poll_readyz(gwpoll *g);

static void
schedule(gwpoll *g, double ms)
{
	struct timeval tv;

	ms_to_tv(ms, &tv);
	evtimer_add(g->timer, &tv);
}

static void
log_change(gwpoll *g, const char *why)
{
	sg_log_rec r;

	if (g->logged && g->logged_ready == g->ready)
		return;
	g->logged = true;
	g->logged_ready = g->ready;
	sg_log_begin(&r, g->p->log, g->ready ? SG_LOG_INFO : SG_LOG_WARN,
	    wall_s(), g->ready ? "router ready" : "router not ready");
	sg_log_str(&r, "router_url", g->p->conf->router_url);
	if (why != NULL)
		sg_log_str(&r, "error", why);
	sg_log_end(&r);
}

static int
cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void
free_models(char **m, size_t n)
{
	size_t i;

	for (i = 0; m != NULL && i < n; i++)
		free(m[i]);
	free(m);
}

/* The "id" of each member of doc's "data" array, sorted, duplicates
 * dropped, into *out (n of them).  0, or -1: not a model list (or out of
 * memory). */
static int
parse_models(const char *text, size_t len, char ***out, size_t *nout)
{
	json_t *doc = json_loadb(text, len, 0, NULL), *data, *v;
	char **m = NULL;
	size_t i, n = 0, k;
	int rc = -1;

	data = json_object_get(doc, "data");
	if (!json_is_array(data))
		goto out;
	if ((m = calloc(json_array_size(data) + 1, sizeof(*m))) == NULL)
		goto out;
	json_array_foreach(data, i, v) {
		const char *id = json_string_value(json_object_get(v, "id"));

		if (id == NULL || id[0] == '\0')
			continue;
		if ((m[n] = strdup(id)) == NULL)
			goto out;
		n++;
	}
	qsort(m, n, sizeof(*m), cmp_str);
	for (i = k = 0; i < n; i++) {
		if (k > 0 && strcmp(m[k - 1], m[i]) == 0) {
			free(m[i]);
			continue;
		}
		m[k++] = m[i];
	}
	*out = m;
	*nout = k;
	m = NULL;
	n = 0;
	rc = 0;
out:
	free_models(m, n);
	json_decref(doc);
	return rc;
}

static int
rz_headers(void *arg, const h1_resp *r)
{
	gwpoll *g = arg;

	g->status = r->status;
	return H1_DISCARD;
}

static void
rz_data(void *arg, const char *ptr, size_t n)
{
	(void)arg;
	(void)ptr;
	(void)n;
}

static void
rz_done(void *arg, int err)
{
	gwpoll *g = arg;

	g->x = NULL;
	g->ready = err == H1_OK && g->status == 200;
	if (g->ready)
		g->ok_ms = mono_ms();
	log_change(g, g->ready ? NULL : err != H1_OK ? h1_strerror(err) :
	    "/readyz did not answer 200");
	schedule(g, POLL_MS);
}

static const h1_cbs readyz_cbs = { rz_headers, rz_data, rz_done };

static void
get_req(h1_req *r, const proxy *p, const char *target, uint64_t timeout_ms)
{
	memset(r, 0, sizeof(*r));
	r->method = "GET";
	r->prefix = h1_url_path(p->conf->router_url, &r->prefix_len);
	r->target = target;
	r->target_len = strlen(target);
	r->hdrs = "";
	r->timeout_ms = timeout_ms;
}

static void
poll_readyz(gwpoll *g)
{
	h1_req r;

	g->status = 0;
	get_req(&r, g->p, "/readyz", POLL_TIMEOUT_MS);
	if ((g->x = h1_start(g->p->h1, g->p->router_up, &r, &readyz_cbs,
	    g)) == NULL) {
		g->ready = false;	/* out of memory: try again later */
		log_change(g, "out of memory");
		schedule(g, POLL_MS);
	}
}

static void
on_timer(evutil_socket_t fd, short what, void *arg)
{
	gwpoll *g = arg;

	(void)fd;
	(void)what;
	if (g->x != NULL || g->p->draining)
		return;
	poll_readyz(g);
}

/* --- GET /v1/models, asked of the router -------------------------------- */

static void
fetch_free(mfetch *f, bool cancel)
{
	gwpoll *g = f->g;

	if (f->x != NULL && cancel)
		h1_cancel(f->x);
	if (f->req != NULL)
		h1s_on_close(f->req, NULL, NULL);
	if (f->prev != NULL)
		f->prev->next = f->next;
	else
		g->fetches = f->next;
	if (f->next != NULL)
		f->next->prev = f->prev;
	pbuf_free(&f->body);
	free(f->rk);
	free(f);
}

static void
mf_gone(h1s_req *req, void *arg)
{
	mfetch *f = arg;

	(void)req;
	f->req = NULL;		/* h1s frees it when this returns */
	fetch_free(f, true);
}

static int
mf_headers(void *arg, const h1_resp *r)
{
	mfetch *f = arg;

	f->status = r->status;
	return r->status == 200 ? H1_CONTINUE : H1_DISCARD;
}

static void
mf_data(void *arg, const char *ptr, size_t n)
{
	mfetch *f = arg;

	if (f->over || f->body.len + n > MODELS_MAX ||
	    pbuf_add(&f->body, ptr, n) != 0)
		f->over = true;
}

static void
mf_done(void *arg, int err)
{
	mfetch *f = arg;
	h1s_req *req = f->req;
	char **m = NULL;
	size_t n = 0;

	f->x = NULL;
	h1s_on_close(req, NULL, NULL);
	f->req = NULL;
	if (err != H1_OK || f->status != 200 || f->over ||
	    parse_models(f->body.b, f->body.len, &m, &n) != 0)
		gateway_models_error(req, err != H1_OK ? h1_strerror(err) :
		    "the router did not list its models");
	else
		gateway_models_reply(f->g->p, req, f->rk,
		    (const char *const *)m, n);
	free_models(m, n);
	fetch_free(f, false);
}

static const h1_cbs models_cbs = { mf_headers, mf_data, mf_done };

int
gwpoll_models(proxy *p, h1s_req *req, const char *rk)
{
	gwpoll *g = p->rpoll;
	mfetch *f;
	h1_req r;

	if (g == NULL || (f = calloc(1, sizeof(*f))) == NULL)
		return -1;
	if (rk != NULL && (f->rk = strdup(rk)) == NULL) {
		free(f);
		return -1;
	}
	f->g = g;
	f->req = req;
	get_req(&r, p, "/v1/models", p->conf->upstream_timeout_ms);
	if ((f->next = g->fetches) != NULL)
		f->next->prev = f;
	g->fetches = f;
	if ((f->x = h1_start(p->h1, p->router_up, &r, &models_cbs, f)) ==
	    NULL) {
		f->req = NULL;
		fetch_free(f, false);
		return -1;
	}
	h1s_on_close(req, mf_gone, f);
	return 0;
}

int
gwpoll_init(proxy *p)
{
	gwpoll *g;

	if (p->conf->role_id != ROLE_GATEWAY || p->h1 == NULL ||
	    p->router_up == NULL)
		return 0;
	if ((g = calloc(1, sizeof(*g))) == NULL)
		return -1;
	g->p = p;
	if ((g->timer = evtimer_new(p->base, on_timer, g)) == NULL) {
		free(g);
		return -1;
	}
	p->rpoll = g;
	schedule(g, 0);
	return 0;
}

/* After h1_pool_free (which took the transfer in flight, if any). */
void
gwpoll_fini(proxy *p)
{
	gwpoll *g = p->rpoll;

	if (g == NULL)
		return;
	p->rpoll = NULL;
	if (g->x != NULL && p->h1 != NULL)
		h1_cancel(g->x);
	while (g->fetches != NULL) {
		g->fetches->req = NULL;	/* h1s_server_free took it */
		fetch_free(g->fetches, p->h1 != NULL);
	}
	event_free(g->timer);
	free(g);
}

bool
gwpoll_ready(const proxy *p)
{
	const gwpoll *g = p->rpoll;

	return g != NULL && g->ready && mono_ms() - g->ok_ms < READY_STALE_MS;
}
