/*
 * metrics.c — the stargate_* families of stargate-metrics(7) that apply to the
 * router role, on the registry main() creates before fork (so every worker's
 * counts aggregate and any worker's /metrics shows the daemon).
 *
 * Label rules: bounded values only.  routing_key is "" when unscoped; a
 * model the cluster file does not serve is recorded as "" (a client header
 * never creates a series of its own); inference_server_id is the cluster
 * id ("" for routing failures); reasons are our own constants or an
 * engine's x-stargate-retry-reason that passed route.c's check.  The
 * registry bounds each family's series on top of that.
 *
 * Besides stargate-metrics(7): <prefix>cluster_stats_age_seconds{cluster_id},
 * <prefix>stats_poll_errors_total{cluster_id} and
 * <prefix>inflight_requests (requests being routed or proxied).
 */
#include <stdio.h>
#include <string.h>

#include "proxy.h"

static const double routing_buckets[] = {
	0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1,
};
static const double proxy_buckets[] = {
	0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
};
static const double replay_buckets[] = {
	0, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216,
	67108864,
};

#define L(...)	((const char *const[]){ __VA_ARGS__, NULL })

struct fam {
	size_t		 off;
	int		 type;
	const char	*name;
	const char	*help;
	const char *const *labels;
	const double	*buckets;
	size_t		 nbuckets;
};

#define MOFF(f)	offsetof(pmetrics, f)
#define NB(a)	(sizeof(a) / sizeof(a[0]))

static const struct fam fams[] = {
	{ MOFF(requests), SG_METRIC_COUNTER, "requests_total",
	    "Requests answered, by final status.",
	    L("routing_key", "model", "inference_server_id", "status"),
	    NULL, 0 },
	{ MOFF(attempts), SG_METRIC_COUNTER, "proxy_attempts_total",
	    "Upstream attempts, by result (upstream_<code> or proxy_<code>).",
	    L("routing_key", "model", "inference_server_id", "result"),
	    NULL, 0 },
	{ MOFF(retries), SG_METRIC_COUNTER, "proxy_retries_total",
	    "Upstream attempts retried on another cluster, by reason.",
	    L("routing_key", "model", "reason"), NULL, 0 },
	{ MOFF(exhausted), SG_METRIC_COUNTER, "proxy_retry_exhausted_total",
	    "Requests whose retry budget ran out, by reason.",
	    L("routing_key", "model", "reason"), NULL, 0 },
	{ MOFF(selections), SG_METRIC_COUNTER, "routing_selections_total",
	    "Cluster selections, primary (rank 1) or fallback.",
	    L("routing_key", "model", "algorithm", "selection"), NULL, 0 },
	{ MOFF(kv_fallback), SG_METRIC_COUNTER,
	    "routing_kv_free_token_fallback_selections_total",
	    "Selections past a cluster skipped for lack of free KV tokens.",
	    L("routing_key", "model", "algorithm"), NULL, 0 },
	{ MOFF(session), SG_METRIC_COUNTER,
	    "routing_session_selections_total",
	    "Selections of classified requests, by session state and "
	    "selection.",
	    L("routing_key", "model", "algorithm", "session_state",
	    "selection"), NULL, 0 },
	{ MOFF(admission), SG_METRIC_COUNTER, "admission_rejections_total",
	    "Requests rejected before or during routing, by reason.",
	    L("routing_key", "model", "reason"), NULL, 0 },
	{ MOFF(routing_dur), SG_METRIC_HISTOGRAM, "routing_duration_seconds",
	    "Time from arrival to the first cluster selection.",
	    L("routing_key", "model"), routing_buckets, NB(routing_buckets) },
	{ MOFF(proxy_dur), SG_METRIC_HISTOGRAM, "proxy_duration_seconds",
	    "Time from arrival to the upstream response headers.",
	    L("routing_key", "model", "inference_server_id"), proxy_buckets,
	    NB(proxy_buckets) },
	{ MOFF(replay), SG_METRIC_HISTOGRAM, "proxy_replay_buffer_bytes",
	    "Request body bytes kept for replay, per attempt.",
	    L("model"), replay_buckets, NB(replay_buckets) },
	{ MOFF(active), SG_METRIC_GAUGE, "active_inference_servers",
	    "Clusters with fresh stats serving the model.",
	    L("routing_key", "model"), NULL, 0 },
	{ MOFF(stats_age), SG_METRIC_GAUGE, "cluster_stats_age_seconds",
	    "Age of the cluster's published stats (+Inf: none yet).",
	    L("cluster_id"), NULL, 0 },
	{ MOFF(stats_errors), SG_METRIC_COUNTER, "stats_poll_errors_total",
	    "Failed stats polls.", L("cluster_id"), NULL, 0 },
	{ MOFF(inflight), SG_METRIC_GAUGE, "inflight_requests",
	    "Requests being routed or proxied.", NULL, NULL, 0 },
};

int
metrics_declare(sg_metrics *reg, const char *prefix, pmetrics *m,
    sg_error *err)
{
	char name[SG_METRICS_NAME_MAX + 1];
	size_t i;
	int rc;

	memset(m, 0, sizeof(*m));
	for (i = 0; i < NB(fams); i++) {
		sg_metric **slot = (sg_metric **)(void *)((char *)m +
		    fams[i].off);

		snprintf(name, sizeof(name), "%s%s", prefix, fams[i].name);
		if ((rc = sg_metrics_family(reg, fams[i].type, name,
		    fams[i].help, fams[i].labels, fams[i].buckets,
		    fams[i].nbuckets, slot, err)) != 0)
			return rc;
	}
	return 0;
}

void
metrics_request(preq *q, const char *server, int status)
{
	char st[16];
	const char *v[4];

	fmt_label(st, sizeof(st), "", status > 0 ? (uint64_t)status : 0);
	v[0] = q->lbl_rk;
	v[1] = q->lbl_model;
	v[2] = server != NULL ? server : "";
	v[3] = st;
	sg_series_inc(sg_metric_series(q->p->m.requests, v));
}

void
metrics_attempt(preq *q, const char *server, const char *result)
{
	const char *v[] = { q->lbl_rk, q->lbl_model, server, result };

	sg_series_inc(sg_metric_series(q->p->m.attempts, v));
}

void
metrics_retry(preq *q, const char *reason)
{
	const char *v[] = { q->lbl_rk, q->lbl_model, reason };

	sg_series_inc(sg_metric_series(q->p->m.retries, v));
}

void
metrics_exhausted(preq *q, const char *reason)
{
	const char *v[] = { q->lbl_rk, q->lbl_model, reason };

	sg_series_inc(sg_metric_series(q->p->m.exhausted, v));
}

void
metrics_admission(preq *q, const char *reason)
{
	const char *v[] = { q->lbl_rk, q->lbl_model, reason };

	sg_series_inc(sg_metric_series(q->p->m.admission, v));
}

/* The six state/selection series of one (routing_key, model, algorithm). */
static void
session_six(sg_metric *f, const char *rk, const char *model, const char *alg)
{
	static const char *const states[] = { "new", "returning", "stale" };
	static const char *const sels[] = { "primary", "fallback" };
	const char *v[5];
	size_t i, j;

	v[0] = rk;
	v[1] = model;
	v[2] = alg;
	for (i = 0; i < 3; i++)
		for (j = 0; j < 2; j++) {
			v[3] = states[i];
			v[4] = sels[j];
			(void)sg_metric_series(f, v);
		}
}

void
metrics_session_zero(proxy *p, const cgen *g)
{
	const sg_algdef *def;
	size_t i;

	for (i = 0; i < g->nmodels; i++)
		if (sg_lbconf_resolve(p->lb, g->models[i].name, NULL, false,
		    &def, NULL) == 0 && def->last_cluster_affinity)
			session_six(p->m.session, "", g->models[i].name,
			    sg_algorithm_name(def->algorithm));
}

static void
session_selection(preq *q, const sg_decision *d, const char *alg)
{
	const char *v[5];

	/* All six pairs exist from the first recording on
	 * (stargate-lb-config(5));
	 * finding existing series is cheap and allocation-free. */
	session_six(q->p->m.session, q->lbl_rk, q->lbl_model, alg);
	v[0] = q->lbl_rk;
	v[1] = q->lbl_model;
	v[2] = alg;
	v[3] = sg_session_state_name(d->session_state);
	v[4] = d->primary ? "primary" : "fallback";
	if (v[3] != NULL)
		sg_series_inc(sg_metric_series(q->p->m.session, v));
}

void
metrics_selection(preq *q, const sg_decision *d, const sg_algdef *def)
{
	const char *alg = d->algorithm != NULL ? d->algorithm : "";
	const char *v[4];

	(void)def;
	v[0] = q->lbl_rk;
	v[1] = q->lbl_model;
	v[2] = alg;
	v[3] = d->rank_depth > 1 ? "fallback" : "primary";
	sg_series_inc(sg_metric_series(q->p->m.selections, v));
	if (d->kv_skip) {
		v[3] = NULL;
		sg_series_inc(sg_metric_series(q->p->m.kv_fallback, v));
	}
	if (d->classified)
		session_selection(q, d, alg);
}

void
metrics_routing_duration(preq *q, double seconds)
{
	const char *v[] = { q->lbl_rk, q->lbl_model };

	sg_series_observe(sg_metric_series(q->p->m.routing_dur, v), seconds);
}

void
metrics_proxy_duration(preq *q, const char *server, double seconds)
{
	const char *v[] = { q->lbl_rk, q->lbl_model, server };

	sg_series_observe(sg_metric_series(q->p->m.proxy_dur, v), seconds);
}

void
metrics_replay(preq *q, size_t bytes)
{
	const char *v[] = { q->lbl_model };

	sg_series_observe(sg_metric_series(q->p->m.replay, v), (double)bytes);
}

/* --- the gateway's families (stargate(7); no --metrics-prefix) ------------ */

static const double lookup_buckets[] = {
	0.001, 0.002, 0.005, 0.01, 0.02, 0.05,
};

static const struct fam gw_fams[] = {
	{ MOFF(lc_lookups), SG_METRIC_COUNTER,
	    "llm_api_gateway_last_cluster_lookups_total",
	    "Last-cluster store lookups, by result.", L("result"), NULL, 0 },
	{ MOFF(lc_writes), SG_METRIC_COUNTER,
	    "llm_api_gateway_last_cluster_writes_total",
	    "Last-cluster store writes, by result (at commit).", L("result"),
	    NULL, 0 },
	{ MOFF(lc_dur), SG_METRIC_HISTOGRAM,
	    "llm_api_gateway_last_cluster_lookup_duration_seconds",
	    "Time from the start of a lookup to its result.", NULL,
	    lookup_buckets, NB(lookup_buckets) },
	{ MOFF(lc_conn), SG_METRIC_GAUGE,
	    "llm_api_gateway_last_cluster_store_connected",
	    "1 while the last-cluster store can answer, else 0.", NULL, NULL,
	    0 },
};

int
metrics_declare_gateway(sg_metrics *reg, pmetrics *m, bool zero,
    sg_error *err)
{
	static const char *const lk[] = {
		"hit", "miss", "error", "timeout", "skipped",
	};
	static const char *const wr[] = { "ok", "error" };
	size_t i;
	int rc;

	for (i = 0; i < NB(gw_fams); i++) {
		sg_metric **slot = (sg_metric **)(void *)((char *)m +
		    gw_fams[i].off);

		if ((rc = sg_metrics_family(reg, gw_fams[i].type,
		    gw_fams[i].name, gw_fams[i].help, gw_fams[i].labels,
		    gw_fams[i].buckets, gw_fams[i].nbuckets, slot, err)) != 0)
			return rc;
	}
	if (!zero)
		return 0;
	for (i = 0; i < NB(lk); i++) {
		const char *v[] = { lk[i] };

		(void)sg_metric_series(m->lc_lookups, v);
	}
	for (i = 0; i < NB(wr); i++) {
		const char *v[] = { wr[i] };

		(void)sg_metric_series(m->lc_writes, v);
	}
	(void)sg_metric_series(m->lc_dur, NULL);
	sg_series_set(sg_metric_series(m->lc_conn, NULL), 1);
	return 0;
}
