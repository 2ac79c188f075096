/*
 * sg_router.c — one routing decision: resolve the algorithm definition,
 * check the request against it, refuse what cannot be routed, apply
 * input-work admission, run the algorithm, and turn its answer into a
 * decision under the routing deadlines (stargate-lb-config(5)).
 *
 * The router is the only owner of mutable routing state: one round-robin
 * counter per algorithm definition (a header override that resolves to the
 * same definition shares it, stargate-lb-config(5)) and the scratch memory the
 * algorithms work in (grown to the largest snapshot seen, never shrunk, so
 * a decision allocates nothing in steady state).  Everything else is a pure
 * function of (router seed, definition, snapshot, request, elapsed).
 *
 * Caches never change a decision, only its cost: the consistent-hash rings
 * (one per (routing key, model, snapshot ids version, virtual nodes),
 * within a byte budget, sg_waw.c, sg_router_set_ring_cache_bytes, with a
 * memo of recent affinity groups in front), the
 * pulsar ranking cache (sg_rcache.c, on by default, sg_router_set_cache)
 * and the last 8 resolutions of (model, no x-routing-method) to a
 * definition (the configuration is immutable, so the memo holds for the
 * router's lifetime).  Exclusions are
 * marked in a per-candidate array that is cleared only where the previous
 * decision marked it.
 *
 * Deadlines.  The wait deadline is min(x-max-wait-ms, 60000) from arrival,
 * or 60000 without the header.  An algorithm's timed wait is clamped to it;
 * a wait decided at or after it is a 503.  An Unavailable answer polls
 * (a 1..9 ms wait drawn from the decision PRNG, phase "poll") only while
 * x-max-wait-ms is present and not reached; otherwise it is a 503
 * overloaded_error with reason routing_capacity_unavailable.
 *
 * sg_router_explain() runs the same algorithm on copies of the request and
 * of the round-robin counter, with an --explain table attached, so it
 * changes neither the router nor the request.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sg_internal.h"
#include "sg_router.h"

#define POLL_MIN_MS	1
#define POLL_MAX_MS	9

#define MEMO_MODEL_MAX	128	/* longer model names are not memoised */
#define MEMO_N		8	/* resolutions memoised */

/*
 * The empty decision.  Copying it compiles to a few vector stores, where a
 * memset of the struct becomes `rep stos`, whose start-up alone costs
 * about as much as a round-robin decision.
 */
static const sg_decision zero_decision;

struct sg_router {
	const sg_lbconf	*conf;		/* borrowed */
	uint64_t	 seed;
	uint64_t	*rr;		/* one counter per definition */
	size_t		 ndefs;
	sgi_scratch	 scratch;
	/*
	 * The last MEMO_N resolutions without an x-routing-method header:
	 * model name (or none) -> definition, replaced in turn.  Resolution
	 * is a pure function of the borrowed, immutable configuration and
	 * these inputs.
	 */
	struct memo {
		const sg_algdef	*def;		/* NULL: empty */
		bool		 null;		/* memoised for model == NULL */
		char		 model[MEMO_MODEL_MAX + 1];
	}		 memo[MEMO_N];
	size_t		 memo_next;	/* the entry replaced next */
	size_t		 memo_last;	/* the entry hit last (looked at first) */
};

int
sg_router_new(sg_router **out, const sg_lbconf *conf, uint64_t seed,
    sg_error *err)
{
	sg_router *rt;
	size_t n;

	if (conf == NULL || (n = sg_lbconf_ndefs(conf)) == 0)
		return sg_seterr(err, SG_EINVAL, "router: no configuration");
	if ((rt = calloc(1, sizeof(*rt))) == NULL)
		return sg_seterr(err, SG_ENOMEM, "router: out of memory");
	if ((rt->rr = calloc(n, sizeof(*rt->rr))) == NULL) {
		free(rt);
		return sg_seterr(err, SG_ENOMEM, "router: out of memory");
	}
	/* the ranking cache allocates its tables on first use */
	if ((rt->scratch.rcache = sgi_rcache_new()) == NULL) {
		free(rt->rr);
		free(rt);
		return sg_seterr(err, SG_ENOMEM, "router: out of memory");
	}
	rt->scratch.ring_budget = SG_ROUTER_RING_CACHE_DEFAULT;
	rt->conf = conf;
	rt->seed = seed;
	rt->ndefs = n;
	*out = rt;
	return 0;
}

int
sg_router_set_cache(sg_router *rt, bool enabled)
{
	if (rt == NULL)
		return SG_EINVAL;
	if (!enabled) {
		sgi_rcache_free(rt->scratch.rcache);
		rt->scratch.rcache = NULL;
	} else if (rt->scratch.rcache == NULL &&
	    (rt->scratch.rcache = sgi_rcache_new()) == NULL)
		return SG_ENOMEM;
	return 0;
}

int
sg_router_set_ring_cache_bytes(sg_router *rt, size_t bytes)
{
	if (rt == NULL)
		return SG_EINVAL;
	rt->scratch.ring_budget = bytes;
	sgi_rings_trim(&rt->scratch);
	return 0;
}

void
sg_router_free(sg_router *rt)
{
	if (rt == NULL)
		return;
	sgi_scratch_free(&rt->scratch);
	free(rt->rr);
	free(rt);
}

sgi_scratch *
sgi_router_scratch(sg_router *rt)
{
	return &rt->scratch;
}

/* --- steps ---------------------------------------------------------------- */

/* The memoised definition for this request, or NULL. */
static inline __attribute__((always_inline)) const sg_algdef *
memo_get(sg_router *rt, const sg_request *req)
{
	size_t i;

	if (req->routing_method != NULL || req->routing_method_invalid)
		return NULL;
	for (i = 0; i < MEMO_N; i++) {
		const struct memo *m = &rt->memo[(rt->memo_last + i) % MEMO_N];

		if (m->def == NULL)
			continue;
		if (req->model == NULL ? m->null : !m->null &&
		    strcmp(m->model, req->model) == 0) {
			rt->memo_last = (rt->memo_last + i) % MEMO_N;
			return m->def;
		}
	}
	return NULL;
}

static void
memo_put(sg_router *rt, const sg_request *req, const sg_algdef *d)
{
	struct memo *m;
	size_t len = 0;

	if (req->routing_method != NULL || req->routing_method_invalid)
		return;
	if (req->model != NULL &&
	    (len = strlen(req->model)) > MEMO_MODEL_MAX)
		return;
	m = &rt->memo[rt->memo_next];
	rt->memo_next = (rt->memo_next + 1) % MEMO_N;
	m->null = req->model == NULL;
	if (req->model != NULL)
		memcpy(m->model, req->model, len + 1);
	m->def = d;
}

/* Resolve the definition and check require_cache_affinity_key. */
static inline __attribute__((always_inline)) int
resolve(sg_router *rt, const sg_request *req, const sg_algdef **out,
    sg_error *err)
{
	const sg_algdef *d = NULL;
	int rc;

	if ((d = memo_get(rt, req)) == NULL) {
		if ((rc = sg_lbconf_resolve(rt->conf, req->model,
		    req->routing_method, req->routing_method_invalid, &d,
		    err)) != 0)
			return rc;
		if (d->id >= rt->ndefs)
			return sg_seterr(err, SG_EINVAL, "router: definition "
			    "%u is not from this configuration", d->id);
		memo_put(rt, req, d);	/* the memo holds only ids < ndefs */
	}
	if (d->require_cache_affinity_key && (req->cache_affinity_key == NULL ||
	    req->cache_affinity_key[0] == '\0'))
		return sg_seterr_http(err, SG_EREQUEST, 400,
		    "missing_cache_affinity_key",
		    "x-cache-affinity-key is required by the %s configuration "
		    "of this model", sg_algorithm_name(d->algorithm));
	*out = d;
	return 0;
}

/*
 * Size the scratch for this snapshot and definition, mark the excluded
 * candidates and fill the context.
 */
static inline __attribute__((always_inline)) int
prepare(sg_router *rt, const sg_algdef *d, const sg_snapshot *snap,
    sg_request *req, double elapsed, uint64_t *rr, sgi_ctx *x, sg_error *err)
{
	sgi_scratch *s = &rt->scratch;
	size_t n = sgi_snapshot_count(snap), i, ne;

	if (n > s->cap && sgi_scratch_reserve(s, n) != 0)
		return sg_seterr(err, SG_ENOMEM, "router: out of memory");
	/* excluded[] is zero from excl_hi on: clear only what was marked */
	if (s->excl_hi > 0) {
		memset(s->excluded, 0, s->excl_hi);
		s->excl_hi = 0;
	}
	ne = n;
	for (i = 0; i < req->nexcluded; i++) {
		const char *id = req->excluded[i];
		long k;

		if (id == NULL)
			continue;
		k = sg_snapshot_find(snap, id, strlen(id));
		if (k >= 0 && !s->excluded[k]) {
			s->excluded[k] = 1;
			if ((size_t)k >= s->excl_hi)
				s->excl_hi = (size_t)k + 1;
			ne--;
		}
	}
	*x = (sgi_ctx){ .def = d, .snap = snap, .req = req,
	    .elapsed_ms = elapsed, .router_seed = rt->seed, .scratch = s,
	    .n = n, .neligible = ne, .rr_counter = rr };
	return 0;
}

static inline __attribute__((always_inline)) int
dispatch(sgi_ctx *x, sg_decision *out)
{
	switch (x->def->algorithm) {
	case SG_ALG_RANDOM:
		return sgi_random(x, out);
	case SG_ALG_ROUND_ROBIN:
		return sgi_round_robin(x, out);
	case SG_ALG_POWER_OF_N:
		return sgi_power_of_n(x, out);
	case SG_ALG_PULSAR:
		return sgi_pulsar(x, out);
	case SG_ALG_WAIT_AND_WIDEN:
		return sgi_wait_and_widen(x, out);
	case SG_ALG_PULSAR_WAW:
		return sgi_pulsar_waw(x, out);
	default:
		return SG_EINVAL;
	}
}

static void
reject(sg_decision *out, int status, const char *code, const char *reason)
{
	out->kind = SG_DECIDE_REJECT;
	out->index = 0;
	out->cluster_id = NULL;
	out->rank_depth = 0;
	out->kv_skip = false;
	out->recheck_at_ms = 0;
	out->status = status;
	out->code = code;
	out->reason = reason;
	out->primary = false;
}

/*
 * Input-work admission (stargate-lb-config(5)).  Returns the rejection reason,
 * or NULL when admitted.
 */
static const char *
admission(sgi_ctx *x)
{
	const sg_algdef *d = x->def;
	bool pulsar = d->algorithm == SG_ALG_PULSAR ||
	    d->algorithm == SG_ALG_PULSAR_WAW;
	double work = (double)x->req->input_tokens, rate = 0, sec, w;
	size_t i;

	for (i = 0; i < x->n; i++) {
		const sg_cluster *c = &sgi_snapshot_clusters(x->snap)[i];

		if (pulsar) {
			if (!sgi_pulsar_weight(d, c, &w) ||
			    sgi_pulsar_feasible(x, i) != 0)
				continue;
		} else if (x->scratch->excluded[i])
			continue;
		work += (double)c->queued_input_tokens;
		rate += sgi_tps(c);
	}
	if (!(rate > 0) || !isfinite(rate))
		return "input_work_capacity_unavailable";
	sec = work / rate;
	if (!isfinite(sec))
		return "input_work_capacity_unavailable";
	if (sec > d->max_input_work_seconds)
		return "input_work_limit_exceeded";
	return NULL;
}

/* A poll delay of POLL_MIN_MS..POLL_MAX_MS ms, uniform, from the PRNG. */
static double
poll_delay(const sgi_ctx *x)
{
	sgi_rng g;
	uint64_t e;

	sgi_rng_seed(&g, x->router_seed, x->def, x->req);
	/* successive polls of one attempt draw different delays */
	memcpy(&e, &x->elapsed_ms, sizeof(e));
	e = (e ^ (e >> 31)) * 0x9e3779b97f4a7c15ULL;
	g.s[0] ^= e;
	g.s[1] ^= e ^ (e >> 29);	/* the first output reads s[1] */
	if ((g.s[0] | g.s[1] | g.s[2] | g.s[3]) == 0)
		g.s[0] = 1;
	return (double)(POLL_MIN_MS +
	    sgi_rng_below(&g, POLL_MAX_MS - POLL_MIN_MS + 1));
}

/* Apply the wait deadline and the poll rule (sg-proxy(8)) to out. */
static void
deadlines(const sgi_ctx *x, sg_decision *out)
{
	const sg_request *r = x->req;
	double e = x->elapsed_ms, deadline = SG_MAX_WAIT_CAP_MS;

	if (r->has_max_wait && (double)r->max_wait_ms < deadline)
		deadline = (double)r->max_wait_ms;
	if (out->kind == SG_DECIDE_WAIT) {
		if (!(e < deadline)) {
			reject(out, 503, "overloaded_error",
			    "routing_capacity_unavailable");
			return;
		}
		if (out->recheck_at_ms > deadline)
			out->recheck_at_ms = deadline;
		/* a wait always moves time forward */
		if (!(out->recheck_at_ms > e))
			out->recheck_at_ms = nextafter(e, INFINITY);
		return;
	}
	if (out->kind != SG_DECIDE_REJECT)
		return;
	if (r->has_max_wait && e < deadline) {
		out->kind = SG_DECIDE_WAIT;
		out->recheck_at_ms = e + poll_delay(x);
		if (out->recheck_at_ms > deadline)
			out->recheck_at_ms = deadline;
		out->phase = SG_PHASE_POLL;
		out->status = 0;
		out->code = NULL;
		out->reason = NULL;
		out->primary = false;
		return;
	}
	reject(out, 503, "overloaded_error", "routing_capacity_unavailable");
}

/* --- public --------------------------------------------------------------- */

int
sg_router_decide(sg_router *rt, const sg_snapshot *snap, sg_request *req,
    double elapsed_ms, sg_decision *out, sg_error *err)
{
	const sg_algdef *d = NULL;
	const char *why;
	sgi_ctx x;
	int rc;

	if (rt == NULL || snap == NULL || req == NULL || out == NULL)
		return sg_seterr(err, SG_EINVAL, "router: missing argument");
	if (!(elapsed_ms >= 0) || !isfinite(elapsed_ms))
		return sg_seterr(err, SG_EINVAL,
		    "router: elapsed time must be a finite number >= 0");
	if ((rc = resolve(rt, req, &d, err)) != 0)
		return rc;
	if (d->algorithm < 0 || d->algorithm >= SG_ALG_COUNT)
		return sg_seterr(err, SG_EINVAL, "router: bad algorithm %d",
		    d->algorithm);
	if (sgi_snapshot_count(snap) == 0) {
		*out = zero_decision;
		out->algorithm = sg_algorithm_name(d->algorithm);
		reject(out, 404, "no_eligible_candidates", NULL);
		return 0;
	}
	if ((rc = prepare(rt, d, snap, req, elapsed_ms, &rt->rr[d->id], &x,
	    err)) != 0)
		return rc;
	/*
	 * From here on nothing fails (the algorithms do not allocate), so
	 * the decision is written in place: out is still set only on success.
	 * Every algorithm names itself in its outcome (the name is filled in
	 * below otherwise).
	 */
	*out = zero_decision;
	if (x.neligible == 0) {
		out->algorithm = sg_algorithm_name(d->algorithm);
		reject(out, 503, "overloaded_error", NULL);
		return 0;
	}
	if (d->has_max_input_work && (why = admission(&x)) != NULL) {
		out->algorithm = sg_algorithm_name(d->algorithm);
		reject(out, 503, "overloaded_error", why);
		return 0;
	}
	(void)dispatch(&x, out);
	if (out->algorithm == NULL)
		out->algorithm = sg_algorithm_name(d->algorithm);
	deadlines(&x, out);
	return 0;
}

int
sg_router_explain(sg_router *rt, const sg_snapshot *snap,
    const sg_request *req, double elapsed_ms, json_t **out, sg_error *err)
{
	const sg_algdef *d = NULL;
	sg_request copy;
	sg_decision dec;
	json_t *obj;
	uint64_t rr;
	sgi_ctx x;
	int rc;

	if (rt == NULL || snap == NULL || req == NULL || out == NULL)
		return sg_seterr(err, SG_EINVAL, "router: missing argument");
	if (!(elapsed_ms >= 0) || !isfinite(elapsed_ms))
		return sg_seterr(err, SG_EINVAL,
		    "router: elapsed time must be a finite number >= 0");
	if ((rc = resolve(rt, req, &d, err)) != 0)
		return rc;
	if ((obj = json_object()) == NULL)
		return sg_seterr(err, SG_ENOMEM, "router: out of memory");
	json_object_set_new(obj, "algorithm",
	    json_string(sg_algorithm_name(d->algorithm)));
	copy = *req;		/* the algorithm may classify the copy */
	rr = rt->rr[d->id];	/* round-robin must not advance */
	if (sgi_snapshot_count(snap) > 0) {
		if ((rc = prepare(rt, d, snap, &copy, elapsed_ms, &rr, &x,
		    err)) != 0)
			goto fail;
		x.explain = obj;
		memset(&dec, 0, sizeof(dec));
		if ((rc = dispatch(&x, &dec)) != 0) {
			sg_seterr(err, rc, "router: %s", sg_strerror(rc));
			goto fail;
		}
	}
	if (json_object_get(obj, "candidates") == NULL)
		json_object_set_new(obj, "candidates", json_array());
	*out = obj;
	return 0;
fail:
	json_decref(obj);
	return rc;
}
