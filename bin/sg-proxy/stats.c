/*
 * stats.c — polling every cluster's stats URL into the fleet
 * (stargate-clusters(5), sg-proxy(8)).
 *
 * Every stats_interval_ms each cluster of the current generation that has
 * no poll in flight gets one GET through the worker's curl multi, bounded
 * by stats_timeout_ms.  The sample time handed to sg_fleet_publish is the
 * time the request was SENT, so reservations made after it stay applied.
 *
 * Formats: "stargate" is the snapshot cluster object (sg_cluster_from_json);
 * "vllm" is Prometheus text (sg_vllm_parse, then sg_vllm_to_cluster with
 * the previous sample for the prompt-token rate).  Values the stats leave
 * unknown (0) come from the cluster entry (max_engine_concurrency,
 * max_input_tps, kv_capacity_tokens).  rtt_ms is the entry's when given,
 * else measured: an EWMA of the stats request's time to first byte after
 * the request was sent (connection set-up excluded).
 *
 * A failed poll publishes nothing: the cluster's stats age, and after
 * stats_stale_ms it is no longer a candidate.  The first failure after a
 * success is logged (warn), and every failure is counted.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "proxy.h"

#define RTT_ALPHA	0.3

static void on_tick(evutil_socket_t fd, short what, void *arg);

static size_t
on_data(char *ptr, size_t size, size_t n, void *arg)
{
	cstate *cs = arg;
	size_t len = size * n;

	if (cs->blen + len > cs->blimit)
		return 0;		/* too large: abort the poll */
	if (cs->blen + len + 1 > cs->bcap) {
		size_t cap = cs->bcap == 0 ? 4096 : cs->bcap;
		char *b;

		while (cap < cs->blen + len + 1)
			cap *= 2;
		if ((b = realloc(cs->buf, cap)) == NULL)
			return 0;
		cs->buf = b;
		cs->bcap = cap;
	}
	memcpy(cs->buf + cs->blen, ptr, len);
	cs->blen += len;
	cs->buf[cs->blen] = '\0';
	return len;
}

static int
parse_stargate(cstate *cs, sg_cluster *c, sg_error *err)
{
	json_error_t jerr;
	json_t *doc = json_loadb(cs->buf, cs->blen, JSON_REJECT_DUPLICATES,
	    &jerr);
	int rc;

	if (doc == NULL)
		return sg_seterr(err, SG_EINVAL, "stats: %s", jerr.text);
	rc = sg_cluster_from_json(c, doc, "stats", err);
	json_decref(doc);
	return rc;
}

static int
parse_vllm(cstate *cs, const sg_clusterdef *d, double sent, sg_cluster *c,
    sg_error *err)
{
	sg_vllm_sample s;
	double dt;
	int rc;

	if ((rc = sg_vllm_parse(cs->buf, cs->blen, NULL, &s, err)) != 0)
		return rc;
	dt = cs->have_prev ? (sent - cs->prev_ms) / 1000.0 : 0.0;
	if ((rc = sg_vllm_to_cluster(&s, cs->have_prev ? &cs->prev : NULL, dt,
	    cs->prev_tps, d, c, err)) != 0)
		return rc;
	cs->prev = s;
	cs->prev_ms = sent;
	cs->prev_tps = c->last_mean_input_tps;
	cs->have_prev = true;
	return 0;
}

static void
measure_rtt(cstate *cs, CURL *e)
{
	curl_off_t pre = 0, ttfb = 0;
	double ms;

	if (curl_easy_getinfo(e, CURLINFO_PRETRANSFER_TIME_T, &pre) !=
	    CURLE_OK || curl_easy_getinfo(e, CURLINFO_STARTTRANSFER_TIME_T,
	    &ttfb) != CURLE_OK || ttfb < pre)
		return;
	ms = (double)(ttfb - pre) / 1000.0;
	cs->rtt_ms = cs->have_rtt ? cs->rtt_ms * (1 - RTT_ALPHA) +
	    ms * RTT_ALPHA : ms;
	cs->have_rtt = true;
}

static void
poll_failed(proxy *p, cstate *cs, const char *why)
{
	sg_log_rec r;

	cs->polls_failed++;
	sg_series_inc(cs->errors);
	if (cs->failing)
		return;
	cs->failing = true;
	sg_log_begin(&r, p->log, SG_LOG_WARN, wall_s(), "stats poll failed");
	sg_log_strn(&r, "cluster_id", cs->id, cs->id_len);
	sg_log_str(&r, "error", why);
	sg_log_end(&r);
}

static void
poll_done(xfer *x, CURLcode cc)
{
	cstate *cs = x->owner;
	proxy *p = x->p;
	const pcl *cl = cs->cur;
	sg_cluster c;
	sg_error err;
	long status = 0;
	int rc;

	cs->poll = NULL;
	memset(&err, 0, sizeof(err));
	curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);
	if (cl == NULL) {
		/* dropped by a reload while in flight */
		xfer_put(x);
		return;
	}
	if (cc != CURLE_OK) {
		poll_failed(p, cs, x->errbuf[0] != '\0' ? x->errbuf :
		    curl_easy_strerror(cc));
		xfer_put(x);
		return;
	}
	if (status != 200) {
		snprintf(err.text, sizeof(err.text), "HTTP status %ld", status);
		poll_failed(p, cs, err.text);
		xfer_put(x);
		return;
	}
	if (!cl->def->has_rtt)
		measure_rtt(cs, x->easy);
	xfer_put(x);
	sg_cluster_init(&c, cs->id, cs->id_len);
	rc = cl->def->stats_format == SG_STATS_VLLM ?
	    parse_vllm(cs, cl->def, cs->poll_sent_ms, &c, &err) :
	    parse_stargate(cs, &c, &err);
	if (rc != 0) {
		poll_failed(p, cs, err.text[0] != '\0' ? err.text :
		    sg_strerror(rc));
		return;
	}
	if (c.max_engine_concurrency == 0)
		c.max_engine_concurrency = cl->def->max_engine_concurrency;
	if (!(c.max_input_tps > 0))
		c.max_input_tps = cl->def->max_input_tps;
	if (c.kv_capacity_tokens == 0)
		c.kv_capacity_tokens = cl->def->kv_capacity_tokens;
	if (cl->def->has_rtt)
		c.rtt_ms = cl->def->rtt_ms;
	else if (cs->have_rtt)
		c.rtt_ms = cs->rtt_ms;
	if (sg_fleet_publish(p->fleet, cs->fidx, &c, cs->poll_sent_ms) != 0) {
		poll_failed(p, cs, "stats rejected by the fleet");
		return;
	}
	if (cs->failing) {
		sg_log_rec r;

		sg_log_begin(&r, p->log, SG_LOG_INFO, wall_s(),
		    "stats poll recovered");
		sg_log_strn(&r, "cluster_id", cs->id, cs->id_len);
		sg_log_end(&r);
	}
	cs->failing = false;
}

static void
poll_one(proxy *p, const pcl *cl)
{
	cstate *cs = cl->cs;
	const sg_clusterfile *cf = p->gen->cf;
	uint64_t to = cf->stats_timeout_ms, cto = p->conf->connect_timeout_ms;
	xfer *x;

	if (cs->poll != NULL)
		return;
	if ((x = xfer_get(p)) == NULL) {
		poll_failed(p, cs, "out of memory");
		return;
	}
	cs->blen = 0;
	cs->blimit = cl->def->stats_format == SG_STATS_VLLM ?
	    SG_VLLM_MAX_TEXT : SG_MAX_RECORD;
	x->owner = cs;
	x->done = poll_done;
	curl_easy_setopt(x->easy, CURLOPT_URL, cl->def->stats_url);
	curl_easy_setopt(x->easy, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(x->easy, CURLOPT_WRITEDATA, cs);
	curl_easy_setopt(x->easy, CURLOPT_TIMEOUT_MS, (long)to);
	curl_easy_setopt(x->easy, CURLOPT_CONNECTTIMEOUT_MS,
	    (long)(cto < to ? cto : to));
	cs->poll_sent_ms = mono_ms();
	if (xfer_start(x) != 0) {
		xfer_put(x);
		poll_failed(p, cs, "cannot start the request");
		return;
	}
	cs->poll = x;
}

void
stats_poll_all(proxy *p)
{
	size_t i;

	for (i = 0; i < p->gen->n; i++)
		poll_one(p, &p->gen->cl[i]);
}

static void
arm(proxy *p)
{
	struct timeval tv;

	ms_to_tv((double)p->gen->cf->stats_interval_ms, &tv);
	evtimer_add(p->stats_timer, &tv);
}

static void
on_tick(evutil_socket_t fd, short what, void *arg)
{
	proxy *p = arg;

	(void)fd;
	(void)what;
	stats_poll_all(p);
	stats_update_gauges(p);
	arm(p);
}

int
stats_init(proxy *p)
{
	if ((p->stats_timer = evtimer_new(p->base, on_tick, p)) == NULL)
		return 71;
	arm(p);
	return 0;
}

void
stats_fini(proxy *p)
{
	size_t i;

	for (i = 0; i < p->ncs; i++)
		if (p->cs[i] != NULL && p->cs[i]->poll != NULL) {
			xfer_put(p->cs[i]->poll);
			p->cs[i]->poll = NULL;
		}
	if (p->stats_timer != NULL)
		event_free(p->stats_timer);
	p->stats_timer = NULL;
}

bool
stats_ready(proxy *p)
{
	double now = mono_ms();
	size_t i;

	if (p->ready)
		return true;
	if (now - p->t_start >= (double)p->conf->ready_timeout_ms) {
		p->ready = true;
		return true;
	}
	for (i = 0; i < p->gen->n; i++)
		if (!sg_fleet_fresh(p->fleet, p->gen->cl[i].fidx, now))
			return false;
	p->ready = true;
	return true;
}

void
stats_update_gauges(proxy *p)
{
	double now = mono_ms();
	const cgen *g = p->gen;
	size_t i, k, fresh;

	for (i = 0; i < g->n; i++) {
		double age = sg_fleet_age_ms(p->fleet, g->cl[i].fidx, now);

		sg_series_set(g->cl[i].cs->age, isinf(age) ? age : age / 1000.0);
	}
	for (i = 0; i < g->nmodels; i++) {
		const char *v[] = { "", g->models[i].name };

		for (k = 0, fresh = 0; k < g->models[i].n; k++)
			fresh += sg_fleet_fresh(p->fleet, g->models[i].fidx[k],
			    now);
		sg_series_set(sg_metric_series(p->m.active, v), (double)fresh);
	}
}
