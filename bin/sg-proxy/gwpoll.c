/*
 * gwpoll.c — the gateway role's view of its router (sg-proxy(8), "GET
 * /readyz" and "GET /v1/models"), kept off the request path.
 *
 * Every worker of --role gateway polls --router-url on its own loop with
 * the native client (h1.c): GET /readyz, and when that answers 200, GET
 * /v1/models; then again POLL_MS later (the first poll at startup).  Each
 * step is bounded by POLL_TIMEOUT_MS without a byte; nothing blocks, and a
 * poll in flight never delays a request.  The router is ready while its
 * last /readyz answered 200 less than READY_STALE_MS ago: a refused or
 * timed-out poll, or any other status, makes the gateway's own /readyz 503
 * at once.  The model list is the last one the router gave (the "id" of
 * every member of "data", sorted, duplicates dropped; at most MODELS_MAX
 * bytes of document): a router that stops answering keeps its last list,
 * one that never answered has none.  Readiness changes are logged once
 * each (info when ready, warn when not).
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

enum { RP_READYZ, RP_MODELS };

struct gwpoll {
	proxy		*p;
	struct event	*timer;
	h1_xfer		*x;		/* the poll in flight, or NULL */
	int		 step;
	int		 status;
	bool		 over;		/* /v1/models larger than MODELS_MAX */
	pbuf		 body;
	bool		 ready;		/* the last /readyz answered 200 */
	bool		 logged;	/* a readiness state was logged */
	bool		 logged_ready;
	double		 ok_ms;		/* when it did */
	char		**models;	/* sorted; NULL: never listed */
	size_t		 nmodels;
};

static void	poll_step(gwpoll *g, int step);

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

/* The "id" of each member of doc's "data" array into the list; a document
 * of another shape leaves the last list as it was. */
static void
take_models(gwpoll *g, const char *text, size_t len)
{
	json_t *doc = json_loadb(text, len, 0, NULL), *data, *v;
	char **m = NULL;
	size_t i, n = 0, k;

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
	free_models(g->models, g->nmodels);
	g->models = m;
	g->nmodels = k;
	m = NULL;
	n = 0;
out:
	free_models(m, n);
	json_decref(doc);
}

static int
on_headers(void *arg, const h1_resp *r)
{
	gwpoll *g = arg;

	g->status = r->status;
	return r->status == 200 && g->step == RP_MODELS ? H1_CONTINUE :
	    H1_DISCARD;
}

static void
on_data(void *arg, const char *ptr, size_t n)
{
	gwpoll *g = arg;

	if (g->over || g->body.len + n > MODELS_MAX) {
		g->over = true;
		return;
	}
	if (pbuf_add(&g->body, ptr, n) != 0)
		g->over = true;
}

static void
on_done(void *arg, int err)
{
	gwpoll *g = arg;
	const char *why = NULL;

	g->x = NULL;
	if (g->step == RP_READYZ) {
		g->ready = err == H1_OK && g->status == 200;
		if (g->ready)
			g->ok_ms = mono_ms();
		else
			why = err != H1_OK ? h1_strerror(err) :
			    "/readyz did not answer 200";
		log_change(g, why);
		if (g->ready) {
			poll_step(g, RP_MODELS);
			return;
		}
	} else if (err == H1_OK && g->status == 200 && !g->over)
		take_models(g, g->body.b, g->body.len);
	schedule(g, POLL_MS);
}

static const h1_cbs poll_cbs = { on_headers, on_data, on_done };

static void
poll_step(gwpoll *g, int step)
{
	proxy *p = g->p;
	const char *target = step == RP_READYZ ? "/readyz" : "/v1/models";
	h1_req r;

	g->step = step;
	g->status = 0;
	g->over = false;
	g->body.len = 0;
	memset(&r, 0, sizeof(r));
	r.method = "GET";
	r.prefix = h1_url_path(p->conf->router_url, &r.prefix_len);
	r.target = target;
	r.target_len = strlen(target);
	r.hdrs = "";
	r.timeout_ms = POLL_TIMEOUT_MS;
	if ((g->x = h1_start(p->h1, p->router_up, &r, &poll_cbs, g)) == NULL) {
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
	poll_step(g, RP_READYZ);
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
	event_free(g->timer);
	pbuf_free(&g->body);
	free_models(g->models, g->nmodels);
	free(g);
}

bool
gwpoll_ready(const proxy *p)
{
	const gwpoll *g = p->rpoll;

	return g != NULL && g->ready && mono_ms() - g->ok_ms < READY_STALE_MS;
}

const char *const *
gwpoll_models(const proxy *p, size_t *n)
{
	const gwpoll *g = p->rpoll;

	*n = g != NULL ? g->nmodels : 0;
	return g != NULL ? (const char *const *)g->models : NULL;
}
