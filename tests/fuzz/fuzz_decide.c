/*
 * fuzz_decide.c — the routing decision as a property (sg_router_decide).
 *
 * The input is read as a program (fz_in): an lb-config (one generated
 * model definition beside a few fixed ones), a snapshot of up to 24
 * clusters with coarse and extreme load figures, and up to four requests,
 * each decided again at every wait's recheck time (as sg-route
 * --until-decided and the proxy's wait loop do), with the selected
 * cluster's reservation applied between requests.  Four routers decide
 * every step side by side: the default one, one on the reference paths
 * (sgi_scratch.reference), one without the ranking cache and one without
 * cached rings.
 *
 * Properties of every decision:
 *   - a wait rechecks strictly later than now, at a finite time, never
 *     past the wait deadline (min(max_wait_ms, 60000));
 *   - a selection names a candidate: an index inside the snapshot whose
 *     id is the decision's, not excluded by the request;
 *   - a rejection carries 404 or 503 and an error code;
 *   - the four routers make exactly the same decision;
 *   - explain and the JSON rendering succeed.
 */
#include <math.h>
#include <stdarg.h>

#include <jansson.h>

#include "fuzz.h"
#include "sg_internal.h"
#include "sg_router.h"

#define NROUTERS	4
#define MAX_CLUSTERS	24
#define MAX_STEPS	256
#define CONF_MAX	4096

#define NELEM(a)	(sizeof(a) / sizeof((a)[0]))

/* Fixed definitions (the generated one is model "g"). */
static const char fixed_models[] =
	"\"w\":{\"algorithm\":\"wait-and-widen\","
	"\"cache_affinity_backend_selection_count\":2,"
	"\"cache_affinity_virtual_nodes\":8,\"ttft_bucket_size_ms\":10,"
	"\"next_bucket_unlock_factor\":0.5,\"cache_affinity_wait_ms\":30,"
	"\"last_cluster_affinity\":true,\"max_queued\":1},"
	"\"q\":{\"algorithm\":\"pulsar-wait-and-widen\","
	"\"cache_affinity_backend_selection_count\":2,"
	"\"cache_affinity_wait_ms\":10,\"band_widen_interval_ms\":5,"
	"\"last_cluster_affinity\":true,\"consider_kv_free_tokens\":true},"
	"\"p\":{\"algorithm\":\"pulsar\",\"seed\":\"s\","
	"\"rendezvous_weight\":\"last-mean-input-tps\"},"
	"\"n\":{\"algorithm\":\"power-of-n\",\"sample_count\":3,"
	"\"comparator\":\"queue-time\"},"
	"\"r\":\"round-robin\"";

static const char *const algs[] = { "power-of-n", "wait-and-widen",
    "round-robin", "random", "pulsar", "pulsar-wait-and-widen" };
static const char *const cmps[] = { "ttft", "queue-time",
    "input-work-seconds", "utilization", "num-requests-queued" };
static const char *const weights[] = { "max-input-tps",
    "last-mean-input-tps" };
static const unsigned long long ms_v[] = { 0, 1, 5, 10, 30, 100, 300,
    1000, 60000, 18446744073709551615ULL };
static const char *const real_v[] = { "0", "0.05", "0.1", "0.25", "0.5",
    "1", "2", "100" };

/* Append printf output to the config buffer (bounded: truncation is
 * caught by the parser as bad JSON, never an overflow). */
static void
cat(char *buf, size_t *off, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
cat(char *buf, size_t *off, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (*off >= CONF_MAX)
		return;
	va_start(ap, fmt);
	n = vsnprintf(buf + *off, CONF_MAX - *off, fmt, ap);
	va_end(ap);
	if (n > 0)
		*off += (size_t)n < CONF_MAX - *off ? (size_t)n :
		    CONF_MAX - *off;
}

/* The generated definition: fields valid for its algorithm, values from
 * the input. */
static void
gen_def(fz_in *in, char *buf, size_t *off)
{
	int alg = (int)fz_below(in, NELEM(algs));
	bool waws = alg == 1 || alg == 5;

	cat(buf, off, "{\"algorithm\":\"%s\"", algs[alg]);
	if (fz_bool(in))
		cat(buf, off, ",\"seed\":\"s%u\"", fz_u8(in) % 4);
	if (alg == 0) {
		cat(buf, off, ",\"sample_count\":%u", 1 + fz_u8(in) % 64);
		cat(buf, off, ",\"comparator\":\"%s\"",
		    cmps[fz_below(in, NELEM(cmps))]);
	}
	if (alg == 1 && fz_bool(in))
		cat(buf, off, ",\"comparator\":\"%s\"",
		    cmps[fz_below(in, NELEM(cmps))]);
	if (alg == 4 || alg == 5) {
		cat(buf, off, ",\"rendezvous_weight\":\"%s\"",
		    weights[fz_below(in, NELEM(weights))]);
		cat(buf, off, ",\"consider_kv_free_tokens\":%s",
		    fz_bool(in) ? "true" : "false");
	}
	if (waws) {
		cat(buf, off, ",\"cache_affinity_backend_selection_count\":%u",
		    fz_u8(in) % 6);
		cat(buf, off, ",\"cache_affinity_virtual_nodes\":%u",
		    fz_u8(in) % 33);
		cat(buf, off, ",\"cache_affinity_wait_ms\":%llu",
		    ms_v[fz_below(in, NELEM(ms_v))]);
		cat(buf, off, ",\"cache_affinity_input_tokens_scale\":%s",
		    real_v[fz_below(in, 6)]);
		cat(buf, off, ",\"ttft_bucket_size_ms\":%llu",
		    ms_v[fz_below(in, NELEM(ms_v))]);
		cat(buf, off, ",\"next_bucket_unlock_factor\":%s",
		    real_v[fz_below(in, NELEM(real_v))]);
		cat(buf, off, ",\"n\":%u,\"max_queued\":%u", fz_u8(in) % 5,
		    fz_u8(in) % 5);
		if (fz_bool(in))
			cat(buf, off, ",\"max_queue_time_floor_ms\":%llu",
			    ms_v[fz_below(in, NELEM(ms_v))]);
		if (fz_bool(in))
			cat(buf, off, ",\"max_queue_time_ceil_ms\":%llu",
			    ms_v[fz_below(in, NELEM(ms_v))]);
		cat(buf, off, ",\"ignore_queue_time\":%s,"
		    "\"ignore_input_processing_time\":%s,"
		    "\"last_cluster_affinity\":%s",
		    fz_bool(in) ? "true" : "false",
		    fz_bool(in) ? "true" : "false",
		    fz_bool(in) ? "true" : "false");
	}
	if (alg == 5) {
		if (fz_bool(in))
			cat(buf, off, ",\"band_widen_interval_ms\":%llu",
			    ms_v[fz_below(in, NELEM(ms_v))]);
		cat(buf, off, ",\"fallback_max_queued\":%u", fz_u8(in) % 4);
	}
	if (fz_u8(in) % 4 == 0)
		cat(buf, off, ",\"max_input_work_seconds\":%s",
		    real_v[fz_below(in, NELEM(real_v))]);
	if (fz_u8(in) % 8 == 0)
		cat(buf, off, ",\"require_cache_affinity_key\":true");
	cat(buf, off, "}");
}

static sg_lbconf *
gen_conf(fz_in *in)
{
	char buf[CONF_MAX + 1];
	size_t off = 0;
	sg_lbconf *c = NULL;

	cat(buf, &off, "{\"default\":\"%s\",\"models\":{\"g\":",
	    algs[fz_below(in, NELEM(algs))]);
	gen_def(in, buf, &off);
	cat(buf, &off, ",%s}}", fixed_models);
	if (sg_lbconf_parse(&c, buf, off, "gen", NULL) != 0)
		FZ_ASSERT(sg_lbconf_default(&c, NULL) == 0);
	return c;
}

static uint64_t
count_v(fz_in *in)
{
	static const uint64_t v[] = { 0, 0, 1, 1, 2, 3, 4, 7, 100,
	    UINT64_MAX / 2, UINT64_MAX };

	return v[fz_below(in, NELEM(v))];
}

static double
rate_v(fz_in *in)
{
	static const double v[] = { 0, 500, 1000, 1000, 2000, 1e-300, 1e300,
	    NAN, INFINITY, -5 };

	return v[fz_below(in, NELEM(v))];
}

static void
gen_snapshot(fz_in *in, sg_snapshot *s)
{
	size_t n = 1 + fz_below(in, MAX_CLUSTERS), i, k;
	bool used[64] = { false };
	char id[16];

	for (i = 0; i < n; i++) {
		sg_cluster c;

		k = fz_below(in, 64);
		while (used[k])
			k = (k + 1) % 64;
		used[k] = true;
		snprintf(id, sizeof(id), "c%zu", k);
		FZ_ASSERT(sg_cluster_init(&c, id, strlen(id)) == 0);
		c.rtt_ms = (double)fz_below(in, 4) * 2.5;
		c.max_engine_concurrency = count_v(in);
		c.running = count_v(in);
		c.queued = count_v(in);
		c.queued_input_tokens = count_v(in) * 700;
		c.total_input_tokens = count_v(in);
		c.last_mean_input_tps = rate_v(in);
		c.max_input_tps = rate_v(in);
		c.kv_capacity_tokens = count_v(in) * 1000;
		c.kv_free_tokens = count_v(in) * 1000;
		c.kv_used_tokens = count_v(in) * 100;
		if (fz_u8(in) % 4 == 0)
			(void)sg_cluster_set_prio(&c, fz_u8(in) % 3,
			    (double)(fz_u8(in) % 64));
		FZ_ASSERT(sg_snapshot_add(s, &c, NULL) == 0);
	}
}

/* One request, its strings in static storage or in the snapshot. */
static void
gen_request(fz_in *in, const sg_snapshot *s, sg_request *r, char *rid,
    const char **excl)
{
	static const char *const models[] = { "g", "g", "w", "q", "p", "n",
	    "r", "other" };
	static const char *const keys[] = { NULL, "k0", "k1", "" };
	static const char *const caks[] = { NULL, "mt:v1:payload:aa",
	    "mt:v1:header:bb", "x" };
	static const char *const methods[] = { NULL, NULL, NULL,
	    "power-of-n", "wait-and-widen", "round-robin", "random",
	    "pulsar", "pulsar-wait-and-widen", "bogus", "random;x=1",
	    "PULSAR", " pulsar " };
	static const uint64_t tokens[] = { 0, 1, 100, 5000, 1000000,
	    UINT64_MAX };
	static const uint32_t prios[] = { 0, 1, 2, UINT32_MAX };
	static const uint64_t waits[] = { 0, 1, 5, 30, 100, 60000, 70000,
	    UINT64_MAX };
	size_t n = sg_snapshot_count(s), i, ne = 0;
	uint8_t last;

	sg_request_init(r);
	snprintf(rid, 16, "r%u", fz_u8(in));
	r->request_id = rid;
	r->model = models[fz_below(in, NELEM(models))];
	r->routing_key = keys[fz_below(in, NELEM(keys))];
	r->cache_affinity_key = caks[fz_below(in, NELEM(caks))];
	r->routing_method = methods[fz_below(in, NELEM(methods))];
	r->routing_method_invalid = fz_u8(in) % 16 == 0;
	last = fz_u8(in);
	if (last % 3 == 1)
		r->last_cluster_id = sg_snapshot_get(s, last % n)->id;
	else if (last % 3 == 2)
		r->last_cluster_id = "zz";
	for (i = 0; i < 4; i++)
		if (fz_u8(in) % 4 == 0)
			excl[ne++] = sg_snapshot_get(s, fz_below(in, n))->id;
	r->excluded = excl;
	r->nexcluded = ne;
	r->input_tokens = tokens[fz_below(in, NELEM(tokens))];
	r->priority = prios[fz_below(in, NELEM(prios))];
	if ((r->has_slo = fz_u8(in) % 4 == 0))
		r->request_slo_ms = waits[fz_below(in, NELEM(waits))];
	if ((r->has_max_wait = fz_u8(in) % 2 == 0))
		r->max_wait_ms = waits[fz_below(in, NELEM(waits))];
}

static double
elapsed_v(fz_in *in)
{
	static const double v[] = { 0, 0, 0.5, 10, 29.9, 30, 1000, 59999,
	    60000, 1e9 };

	return v[fz_below(in, NELEM(v))];
}

static void
check_one(const sg_decision *d, const sg_snapshot *s, const sg_request *r,
    double e)
{
	double deadline = SG_MAX_WAIT_CAP_MS;

	if (r->has_max_wait && (double)r->max_wait_ms < deadline)
		deadline = (double)r->max_wait_ms;
	FZ_ASSERT(d->algorithm != NULL);
	switch (d->kind) {
	case SG_DECIDE_WAIT:
		FZ_ASSERT(isfinite(d->recheck_at_ms));
		FZ_ASSERT(d->recheck_at_ms > e);
		FZ_ASSERT(d->recheck_at_ms <= deadline);
		break;
	case SG_DECIDE_SELECT:
		FZ_ASSERT(d->index < sg_snapshot_count(s));
		FZ_ASSERT(d->cluster_id != NULL);
		FZ_ASSERT(strcmp(d->cluster_id,
		    sg_snapshot_get(s, d->index)->id) == 0);
		FZ_ASSERT(!sg_request_excludes(r, d->cluster_id,
		    strlen(d->cluster_id)));
		FZ_ASSERT(d->rank_depth >= 1);
		break;
	case SG_DECIDE_REJECT:
		FZ_ASSERT(d->status == 404 || d->status == 503);
		FZ_ASSERT(d->code != NULL);
		break;
	default:
		FZ_ASSERT(!"unknown decision kind");
	}
}

static bool
same(const sg_decision *a, const sg_decision *b)
{
	return a->kind == b->kind && a->index == b->index &&
	    a->rank_depth == b->rank_depth && a->kv_skip == b->kv_skip &&
	    a->phase == b->phase && a->status == b->status &&
	    a->classified == b->classified &&
	    a->session_state == b->session_state &&
	    a->promoted == b->promoted && a->primary == b->primary &&
	    (a->kind != SG_DECIDE_WAIT ||
	    a->recheck_at_ms == b->recheck_at_ms) &&
	    (a->code == NULL) == (b->code == NULL) &&
	    (a->code == NULL || strcmp(a->code, b->code) == 0) &&
	    (a->reason == NULL) == (b->reason == NULL) &&
	    (a->reason == NULL || strcmp(a->reason, b->reason) == 0);
}

/* Decide r on every router until it is not a wait; returns the last
 * decision of the first router. */
static void
run_request(sg_router **rt, sg_snapshot *s, const sg_request *proto,
    double e, sg_decision *last)
{
	sg_request r[NROUTERS];
	sg_decision d[NROUTERS];
	sg_error err;
	json_t *j;
	int rc[NROUTERS], step, i;

	for (i = 0; i < NROUTERS; i++)
		r[i] = *proto;
	memset(last, 0, sizeof(*last));
	for (step = 0; step < MAX_STEPS; step++) {
		for (i = 0; i < NROUTERS; i++) {
			memset(&d[i], 0, sizeof(d[i]));
			rc[i] = sg_router_decide(rt[i], s, &r[i], e, &d[i],
			    &err);
			if (i > 0) {
				FZ_ASSERT(rc[i] == rc[0]);
				FZ_ASSERT(rc[0] != 0 || same(&d[0], &d[i]));
			}
		}
		if (rc[0] != 0) {
			FZ_ASSERT(rc[0] == SG_EREQUEST && err.status == 400);
			return;
		}
		check_one(&d[0], s, &r[0], e);
		FZ_ASSERT((j = sg_decision_to_json(&d[0], &r[0])) != NULL);
		json_decref(j);
		if (step == 0) {
			FZ_ASSERT(sg_router_explain(rt[0], s, &r[0], e, &j,
			    &err) == 0);
			FZ_ASSERT(json_object_get(j, "candidates") != NULL);
			json_decref(j);
		}
		*last = d[0];
		if (d[0].kind != SG_DECIDE_WAIT)
			return;
		e = d[0].recheck_at_ms;
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	fz_in in = { data, size };
	sg_lbconf *conf;
	sg_snapshot *s;
	sg_router *rt[NROUTERS];
	sg_request req;
	sg_decision d;
	const char *excl[4];
	char rid[16];
	size_t nreq, k;
	int i;

	if (size > 4096)
		return 0;
	conf = gen_conf(&in);
	FZ_ASSERT((s = sg_snapshot_new()) != NULL);
	gen_snapshot(&in, s);
	for (i = 0; i < NROUTERS; i++)
		FZ_ASSERT(sg_router_new(&rt[i], conf, 7, NULL) == 0);
	sgi_router_scratch(rt[1])->reference = true;
	FZ_ASSERT(sg_router_set_cache(rt[2], false) == 0);
	FZ_ASSERT(sg_router_set_ring_cache_bytes(rt[3], 0) == 0);
	nreq = 1 + fz_below(&in, 4);
	for (k = 0; k < nreq; k++) {
		gen_request(&in, s, &req, rid, excl);
		run_request(rt, s, &req, elapsed_v(&in), &d);
		/* the proxy reserves the chosen cluster's capacity */
		if (d.kind == SG_DECIDE_SELECT && fz_bool(&in))
			sg_snapshot_reserve(s, d.index, req.input_tokens,
			    req.priority);
	}
	for (i = 0; i < NROUTERS; i++)
		sg_router_free(rt[i]);
	sg_snapshot_free(s);
	sg_lbconf_free(conf);
	return 0;
}
