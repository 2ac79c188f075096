/*
 * route.c — the routing loop of one request (sg-proxy(8) as adapted by
 * sg-proxy(8)).
 *
 * Each step reads the fleet's view of the clusters serving the request's
 * model (fresh ones only, reservations applied), asks the router for a
 * decision at the elapsed time since arrival, and logs it (dlog):
 *   select  -> forward.c starts an attempt on that cluster;
 *   wait    -> the request's timer is armed for exactly recheck_at_ms (the
 *              router never asks past the wait deadline: min(x-max-wait-ms,
 *              60000), 60000 without the header); no polling in between;
 *   reject  -> 503 overloaded_error (capacity), 503 with the admission
 *              code, or 404 no_eligible_candidates.
 * A model that no cluster of the file serves is 404 no_eligible_candidates
 * at once.  A served model whose clusters all have stale stats is 503
 * overloaded_error, unless x-max-wait-ms allows waiting: then the request
 * re-checks once per stats interval until fresh stats arrive or the wait
 * deadline passes.
 *
 * Retries (forward.c decides when): the failed cluster joins the request's
 * exclusion list (fleet ids: stable storage) and the loop runs again, so
 * every algorithm sees excluded_cluster_ids; at most --max-retries times
 * and, with x-stargate-max-wait-ms, only before arrival + that budget.
 * The sg_request lives across waits and retries, so the session state of
 * its first classification is kept.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "proxy.h"

static void route_step(preq *q);

/* Integer expected queue of stargate-lb-config(5) (rules 1-3, ceil); false: omitted. */
static bool
expected_queue_ms(const sg_cluster *c, uint32_t prio, uint64_t *ms)
{
	double tps = c->last_mean_input_tps, v;
	uint32_t i;
	bool found = false;

	if (c->max_engine_concurrency > 0 &&
	    c->running < c->max_engine_concurrency) {
		*ms = 0;
		return true;
	}
	if (c->nprio > 0) {
		v = 0;
		for (i = 0; i < c->nprio && c->prio_key[i] <= prio; i++) {
			v = c->prio_ms[i];
			found = true;
		}
		(void)found;
	} else {
		if (c->queued_input_tokens == 0) {
			*ms = 0;
			return true;
		}
		if (!(tps > 0) || !isfinite(tps))
			return false;
		v = (double)c->queued_input_tokens / tps * 1000.0;
	}
	if (!(v >= 0) || !isfinite(v))
		return false;
	v = ceil(v);
	*ms = v >= 1.8e19 ? UINT64_MAX : (uint64_t)v;
	return true;
}

static void
arm(preq *q, double delay_ms)
{
	struct timeval tv;

	ms_to_tv(delay_ms, &tv);
	evtimer_add(q->timer, &tv);
}

static void
log_session(preq *q, const sg_decision *d)
{
	sg_log_rec r;

	if (!sg_log_enabled(q->p->log, SG_LOG_DEBUG))
		return;
	sg_log_begin(&r, q->p->log, SG_LOG_DEBUG, wall_s(),
	    "routing session classified");
	sg_log_str(&r, "request_id", q->sr.request_id);
	sg_log_str(&r, "model_id", q->sr.model);
	sg_log_str(&r, "routing_key", q->lbl_rk);
	sg_log_str(&r, "algorithm", d->algorithm);
	sg_log_str(&r, "session_state", sg_session_state_name(d->session_state));
	sg_log_bool(&r, "last_cluster_promoted", d->promoted);
	sg_log_str(&r, "selected_cluster_id", d->cluster_id);
	sg_log_str(&r, "selection", d->primary ? "primary" : "fallback");
	sg_log_end(&r);
}

static void
log_warn(preq *q, const char *msg, int status)
{
	sg_log_rec r;

	sg_log_begin(&r, q->p->log, SG_LOG_WARN, wall_s(), msg);
	sg_log_str(&r, "request_id", q->sr.request_id);
	sg_log_str(&r, "model_id", q->sr.model);
	sg_log_str(&r, "routing_key", q->lbl_rk);
	sg_log_i64(&r, "status", status);
	sg_log_u64(&r, "excluded", q->nexcl);
	sg_log_end(&r);
}

void
route_fail(preq *q, int status, const char *code, const char *msg)
{
	if (q->req != NULL) {
		if (q->close_after)
			h1s_set_close(q->req);
		gateway_reply_headers(q);
		if (status == 503 && strcmp(code, "overloaded_error") == 0)
			http_send_overloaded(q->req);
		else
			http_send_error(q->req, status, code, msg);
		q->req = NULL;		/* the worker's until written */
	}
	otlp_span_status(&q->span, OTLP_STATUS_ERROR, code);
	metrics_request(q, "", status);
	preq_finish(q, status);
}

/* No cluster could take the request (sg-proxy(8) step 4). */
static void
finalize(preq *q, int status, const char *code, const char *reason)
{
	if (q->failed_any)
		metrics_exhausted(q, "no_eligible_backend");
	if (status == 404) {
		log_warn(q, "no inference server candidates for routing target",
		    404);
		route_fail(q, 404, "no_eligible_candidates",
		    "no eligible candidates");
		return;
	}
	metrics_admission(q, reason != NULL ? reason :
	    "routing_capacity_unavailable");
	otlp_span_str(&q->span, "routing.admission_rejection_reason",
	    reason != NULL ? reason : "routing_capacity_unavailable");
	log_warn(q, strcmp(code, "overloaded_error") == 0 ?
	    "no inference server candidates for routing target" :
	    "rejecting request before routing due to input-work admission",
	    status);
	route_fail(q, status, code, strcmp(code, "input_work_limit_exceeded")
	    == 0 ? "input work admission limit exceeded" :
	    "inference capacity is temporarily unavailable");
}

static void
selected(preq *q, const sg_decision *d, double elapsed)
{
	proxy *p = q->p;
	bool inview = d->index < sg_snapshot_count(p->view);
	size_t fidx = inview ? p->view_idx[d->index] : SIZE_MAX;
	const sg_cluster *vc = inview ? sg_snapshot_get(p->view, d->index) :
	    NULL;
	const pcl *cl = fidx < q->gen->nbyf ? q->gen->byf[fidx] : NULL;

	/* The decision names a view cluster by index and by id: both agree,
	 * or the request is refused rather than sent to another cluster. */
	if (cl == NULL || vc == NULL || d->cluster_id == NULL ||
	    strcmp(vc->id, d->cluster_id) != 0) {
		route_fail(q, 500, "internal_error", "selected cluster unknown");
		return;
	}
	if (!q->routed) {
		q->routed = true;
		metrics_routing_duration(q, elapsed / 1000.0);
	}
	metrics_selection(q, d, NULL);
	if (d->classified) {
		log_session(q, d);
		otlp_span_str(&q->span, "routing.session_state",
		    sg_session_state_name(d->session_state));
	}
	q->has_eq = vc != NULL && expected_queue_ms(vc, q->sr.priority,
	    &q->eq_ms);
	forward_start(q, cl, fidx);
}

static void
route_step(preq *q)
{
	proxy *p = q->p;
	/* the lookup that ran just before read the clock already */
	double now = q->now_ms > 0 ? q->now_ms : mono_ms(), elapsed = now -
	    q->t0;
	sg_decision d;
	sg_error err;
	int rc;

	q->now_ms = 0;
	q->phase = PQ_ROUTING;
	if (q->model == NULL) {
		finalize(q, 404, "no_eligible_candidates", NULL);
		return;
	}
	memset(&err, 0, sizeof(err));
	if ((rc = sg_fleet_view(p->fleet, q->model->fidx, q->model->n, now,
	    p->view, p->view_idx, &err)) != 0) {
		route_fail(q, 500, "internal_error", err.text);
		return;
	}
	if (sg_snapshot_count(p->view) == 0) {
		double cap = q->sr.has_max_wait ? (double)(q->sr.max_wait_ms <
		    SG_MAX_WAIT_CAP_MS ? q->sr.max_wait_ms :
		    SG_MAX_WAIT_CAP_MS) : 0;
		double step = (double)q->gen->cf->stats_interval_ms;

		if (elapsed < cap) {
			arm(q, cap - elapsed < step ? cap - elapsed : step);
			return;
		}
		finalize(q, 503, "overloaded_error", NULL);
		return;
	}
	q->sr.excluded = q->excl;
	q->sr.nexcluded = q->nexcl;
	if ((rc = sg_router_decide(p->rt, p->view, &q->sr, elapsed, &d,
	    &err)) != 0) {
		if (rc == SG_EREQUEST && err.status != 0)
			route_fail(q, err.status, err.code[0] != '\0' ?
			    err.code : "invalid_request", err.text);
		else
			route_fail(q, 500, "internal_error", err.text);
		return;
	}
	(void)dlog_record(p->dlog, p->view, &q->sr, elapsed, &d,
	    q->attempts + 1);
	if (d.algorithm != NULL) {
		size_t n = strlen(d.algorithm);

		if (n >= sizeof(q->alg))
			n = sizeof(q->alg) - 1;
		memcpy(q->alg, d.algorithm, n);
		q->alg[n] = '\0';
	}
	switch (d.kind) {
	case SG_DECIDE_SELECT:
		selected(q, &d, elapsed);
		return;
	case SG_DECIDE_WAIT:
		if (sg_log_enabled(p->log, SG_LOG_DEBUG)) {
			sg_log_rec r;

			sg_log_begin(&r, p->log, SG_LOG_DEBUG, wall_s(),
			    "waiting for routing bucket eligibility");
			sg_log_str(&r, "request_id", q->sr.request_id);
			sg_log_f64(&r, "remaining_ms", d.recheck_at_ms - elapsed);
			sg_log_end(&r);
		}
		q->waits++;
		arm(q, d.recheck_at_ms - elapsed);
		return;
	default:
		finalize(q, d.status != 0 ? d.status : 503, d.code != NULL ?
		    d.code : "overloaded_error", d.reason);
		return;
	}
}

void
route_on_timer(evutil_socket_t fd, short what, void *arg)
{
	preq *q = arg;

	(void)fd;
	(void)what;
	if (q->phase == PQ_LOOKUP || (q->gw.on &&
	    q->p->conf->role_id == ROLE_GATEWAY))
		gateway_on_timer(q);
	else if (q->phase == PQ_ROUTING)
		route_step(q);
	else
		forward_idle_check(q);
}

void
route_attach(preq *q)
{
	proxy *p = q->p;
	const char *tp;

	if (q->attached)
		return;
	q->attached = true;
	/* h1s watches the socket while the request is served: a client that
	 * leaves during a routing wait or an attempt ends it (on_close). */
	h1s_on_close(q->req, forward_close_client, q);
	tp = h1s_find_header(q->req, "traceparent");
	q->has_parent = tp != NULL && otlp_traceparent_parse(tp, strlen(tp),
	    &q->parent);
	otlp_span_start(p->otlp, &q->span, OTLP_SPAN_REQUEST, OTLP_KIND_SERVER,
	    q->has_parent ? &q->parent : NULL);
	otlp_span_str(&q->span, "request.endpoint", q->endpoint);
	p->inflight++;
	sg_series_add(p->inflight_s, 1);
}

void
route_start(preq *q)
{
	proxy *p = q->p;
	size_t i;

	q->gen = p->gen;
	gen_ref(q->gen);
	q->model = gen_model(q->gen, q->sr.model);
	q->lbl_rk = q->sr.routing_key != NULL ? q->sr.routing_key : "";
	q->lbl_model = q->model != NULL ? q->model->name : "";
	/* The router stage routes on the hashed affinity key (dlog.h). */
	if (q->sr.cache_affinity_key != NULL) {
		dlog_affinity_key(q->sr.cache_affinity_key,
		    strlen(q->sr.cache_affinity_key), q->akey);
		q->sr.cache_affinity_key = q->akey;
	}
	/* Exclusions named by the caller come first. */
	for (i = 0; i < q->sr.nexcluded; i++)
		if (preq_exclude(q, q->sr.excluded[i]) != 0)
			break;
	route_attach(q);
	otlp_span_str(&q->span, "request.id", q->sr.request_id);
	if (q->sr.routing_method != NULL)
		otlp_span_str(&q->span, "routing.requested_algorithm",
		    q->sr.routing_method);
	route_step(q);
}

bool
route_retry_allowed(preq *q)
{
	if (q->retries >= q->p->conf->max_retries)
		return false;
	if (q->has_budget && mono_ms() - q->t0 >= (double)q->budget_ms)
		return false;
	return true;
}

void
route_retry(preq *q, const char *reason)
{
	q->retries++;
	q->failed_any = true;
	metrics_retry(q, reason);
	otlp_span_str(&q->span, "proxy.retry_reason", reason);
	if (q->cur != NULL)
		(void)preq_exclude(q, q->cur->cs->id);
	q->cur = NULL;
	route_step(q);
}
