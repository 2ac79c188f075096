/*
 * sg_waw_fixture.h — helpers shared by the decision-engine tests
 * (test_waw.c, test_pwaw.c, test_session.c, test_router.c): parse an
 * lb-config, build clusters and requests, decide, and compute affinity
 * orders independently of libstargate's implementation (a full ring sorted
 * with qsort and walked naively; a pulsar ranking sorted with qsort), so
 * that tests can name "rank 1", "rank 2" ... without hard-coding a hash
 * outcome.
 *
 * Include after sg_test.h.  Everything is static inline so that a test that
 * uses only part of it compiles without unused-function warnings.
 */
#ifndef SG_WAW_FIXTURE_H
#define SG_WAW_FIXTURE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sg_internal.h"
#include "sg_lbconf.h"
#include "sg_request.h"
#include "sg_router.h"
#include "sg_snapshot.h"

#define FX_MAXC	64

static inline sg_lbconf *
fx_conf(const char *json)
{
	sg_lbconf *c = NULL;
	sg_error err;
	int rc;

	sg_error_clear(&err);
	rc = sg_lbconf_parse(&c, json, strlen(json), "test", &err);
	if (rc != 0)
		fail_msg("lb-config %s: %s", json, err.text);
	return c;
}

static inline sg_router *
fx_router(const sg_lbconf *c, uint64_t seed)
{
	sg_router *rt = NULL;

	assert_int_equal(sg_router_new(&rt, c, seed, NULL), 0);
	return rt;
}

/* A cluster with a free-form id; everything else unknown (0). */
static inline sg_cluster
fx_cluster(const char *id, double rtt, uint64_t max, uint64_t running,
    double tps)
{
	sg_cluster c;

	assert_int_equal(sg_cluster_init(&c, id, strlen(id)), 0);
	c.rtt_ms = rtt;
	c.max_engine_concurrency = max;
	c.running = running;
	c.last_mean_input_tps = tps;
	c.max_input_tps = tps;
	return c;
}

static inline void
fx_add(sg_snapshot *s, const sg_cluster *c)
{
	assert_int_equal(sg_snapshot_add(s, c, NULL), 0);
}

/* n identical free clusters "c0".."c<n-1>": rtt 5, 4 slots, tps 1000. */
static inline sg_snapshot *
fx_snapshot(size_t n)
{
	sg_snapshot *s = sg_snapshot_new();
	char id[32];
	size_t i;

	assert_non_null(s);
	for (i = 0; i < n; i++) {
		sg_cluster c;

		snprintf(id, sizeof(id), "c%zu", i);
		c = fx_cluster(id, 5, 4, 0, 1000);
		fx_add(s, &c);
	}
	return s;
}

static inline sg_cluster *
fx_at(sg_snapshot *s, size_t i)
{
	return sg_snapshot_at(s, i);
}

static inline void
fx_full(sg_snapshot *s, size_t i)
{
	fx_at(s, i)->running = fx_at(s, i)->max_engine_concurrency;
}

static inline void
fx_free(sg_snapshot *s, size_t i)
{
	fx_at(s, i)->running = 0;
}

static inline void
fx_req(sg_request *r, const char *id, const char *key, uint64_t tokens)
{
	sg_request_init(r);
	r->request_id = id;
	r->model = "m";
	r->cache_affinity_key = key;
	r->input_tokens = tokens;
}

static inline sg_decision
fx_decide(sg_router *rt, const sg_snapshot *s, sg_request *r, double e)
{
	sg_decision d;
	sg_error err;
	int rc;

	memset(&d, 0, sizeof(d));
	sg_error_clear(&err);
	rc = sg_router_decide(rt, s, r, e, &d, &err);
	if (rc != 0)
		fail_msg("sg_router_decide: %d %s", rc, err.text);
	return d;
}

static inline const sg_algdef *
fx_def(const sg_lbconf *c, const sg_request *r)
{
	const sg_algdef *d = NULL;

	assert_int_equal(sg_lbconf_resolve(c, r->model, r->routing_method,
	    false, &d, NULL), 0);
	return d;
}

/* Assertions on a decision. */
#define fx_assert_select(dd, idx) do {					\
	sg_decision d__ = (dd);						\
	if (d__.kind != SG_DECIDE_SELECT)				\
		fail_msg("expected select of %zu, got kind %d "		\
		    "(recheck %g, status %d)", (size_t)(idx), d__.kind,	\
		    d__.recheck_at_ms, d__.status);			\
	assert_int_equal(d__.index, (idx));				\
} while (0)

#define fx_assert_wait(dd, at) do {					\
	sg_decision d__ = (dd);						\
	if (d__.kind != SG_DECIDE_WAIT)					\
		fail_msg("expected wait until %g, got kind %d "		\
		    "(index %zu, status %d)", (double)(at), d__.kind,	\
		    d__.index, d__.status);				\
	assert_near(d__.recheck_at_ms, (at), 1e-9);			\
} while (0)

#define fx_assert_reject(dd, st) do {					\
	sg_decision d__ = (dd);						\
	if (d__.kind != SG_DECIDE_REJECT)				\
		fail_msg("expected reject %d, got kind %d (index %zu, "	\
		    "recheck %g)", (st), d__.kind, d__.index,		\
		    d__.recheck_at_ms);					\
	assert_int_equal(d__.status, (st));				\
} while (0)

/* Same outcome (kind, cluster, rank, recheck time, status). */
static inline bool
fx_same(const sg_decision *a, const sg_decision *b)
{
	if (a->kind != b->kind)
		return false;
	switch (a->kind) {
	case SG_DECIDE_SELECT:
		return a->index == b->index && a->rank_depth == b->rank_depth &&
		    a->kv_skip == b->kv_skip;
	case SG_DECIDE_WAIT:
		return a->recheck_at_ms == b->recheck_at_ms;
	default:
		return a->status == b->status;
	}
}

/* --- independent affinity orders ------------------------------------------ */

struct fx_entry {
	uint64_t	 h;
	const char	*id;
	size_t		 idx;
};

static inline int
fx_entry_cmp(const void *pa, const void *pb)
{
	const struct fx_entry *a = pa, *b = pb;
	size_t la = strlen(a->id), lb = strlen(b->id);
	int c;

	if (a->h != b->h)
		return a->h < b->h ? -1 : 1;
	c = memcmp(a->id, b->id, la < lb ? la : lb);
	if (c != 0)
		return c;
	if (la != lb)
		return la < lb ? -1 : 1;
	return (a->idx > b->idx) - (a->idx < b->idx);
}

/*
 * The whole ring walk for the request's key: every candidate index in the
 * order the walk first meets it (the w-a-w group is its first K).
 */
static inline size_t
fx_ring_order(const sg_algdef *d, const sg_request *r, const sg_snapshot *s,
    size_t *out)
{
	size_t n = sg_snapshot_count(s), V = d->virtual_nodes, ne = n * V;
	struct fx_entry *e = calloc(ne, sizeof(*e));
	bool seen[FX_MAXC] = { false };
	sgi_hashbuf prefix;
	size_t i, v, k = 0, got = 0, start;
	uint64_t kh;

	assert_non_null(e);
	assert_true(n <= FX_MAXC);
	sgi_ring_prefix(&prefix, d, r);
	for (i = 0; i < n; i++) {
		const sg_cluster *c = sg_snapshot_get(s, i);

		for (v = 0; v < V; v++, k++) {
			e[k].h = sgi_ring_entry_hash(&prefix, c->id, c->id_len,
			    v);
			e[k].id = c->id;
			e[k].idx = i;
		}
	}
	qsort(e, ne, sizeof(*e), fx_entry_cmp);
	kh = sgi_ring_key_hash(&prefix, r->cache_affinity_key,
	    strlen(r->cache_affinity_key));
	for (start = 0; start < ne && e[start].h < kh; start++)
		;
	for (i = 0; i < ne && got < n; i++) {
		const struct fx_entry *x = &e[(start + i) % ne];

		if (!seen[x->idx]) {
			seen[x->idx] = true;
			out[got++] = x->idx;
		}
	}
	free(e);
	return got;
}

struct fx_rank {
	double		 score;
	const char	*id;
	size_t		 idx;
};

static inline int
fx_rank_cmp(const void *pa, const void *pb)
{
	const struct fx_rank *a = pa, *b = pb;

	if (a->score != b->score)
		return a->score > b->score ? -1 : 1;
	return strcmp(a->id, b->id);
}

/* The pulsar ranking (ranked clusters only), best first. */
static inline size_t
fx_pulsar_order(const sg_algdef *d, const sg_request *r, const sg_snapshot *s,
    size_t *out)
{
	struct fx_rank rk[FX_MAXC];
	sgi_hashbuf prefix;
	size_t n = sg_snapshot_count(s), i, nr = 0;

	assert_true(n <= FX_MAXC);
	sgi_pulsar_prefix(&prefix, d, r);
	for (i = 0; i < n; i++) {
		const sg_cluster *c = sg_snapshot_get(s, i);
		double w, score;

		if (!sgi_pulsar_weight(d, c, &w))
			continue;
		if (!sgi_pulsar_score(sgi_pulsar_hash(&prefix, c->id,
		    c->id_len), w, &score))
			continue;
		rk[nr].score = score;
		rk[nr].id = c->id;
		rk[nr].idx = i;
		nr++;
	}
	qsort(rk, nr, sizeof(rk[0]), fx_rank_cmp);
	for (i = 0; i < nr; i++)
		out[i] = rk[i].idx;
	return nr;
}

/* The affinity order the algorithm of d uses (ring walk or ranking). */
static inline size_t
fx_order(const sg_algdef *d, const sg_request *r, const sg_snapshot *s,
    size_t *out)
{
	if (d->algorithm == SG_ALG_WAIT_AND_WIDEN)
		return fx_ring_order(d, r, s, out);
	return fx_pulsar_order(d, r, s, out);
}

#endif /* SG_WAW_FIXTURE_H */
