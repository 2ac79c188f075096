/*
 * test_simple.c — sg_simple.c: random, round-robin, power-of-n and pulsar
 * called directly with a hand-built sgi_ctx (no lb-config, no router).
 *
 * Expected pulsar rankings are computed here from hand-built hash inputs,
 * independently of sg_hash.c and sg_simple.c.
 */
#include "sg_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <xxhash.h>

#include "sg_internal.h"

/* A test fixture: snapshot, definition, request, scratch and context. */
typedef struct fx {
	sg_snapshot	*snap;
	sg_algdef	 def;
	sg_request	 req;
	sgi_scratch	 sc;
	sgi_ctx		 x;
	uint64_t	 rr;
	const char	*excl[SG_MAX_CANDIDATES];
	char		 rid[32];
} fx;

static void
fx_scratch(fx *f, size_t n)
{
	memset(&f->sc, 0, sizeof f->sc);
	f->sc.cap = n;
	f->sc.excluded = calloc(n + 1, 1);
	f->sc.idx = calloc(n + 1, sizeof(size_t));
	f->sc.idx2 = calloc(n + 1, sizeof(size_t));
	f->sc.order = calloc(n + 1, sizeof(size_t));
	f->sc.d1 = calloc(n + 1, sizeof(double));
	f->sc.d2 = calloc(n + 1, sizeof(double));
	f->sc.d3 = calloc(n + 1, sizeof(double));
	assert_non_null(f->sc.excluded);
	assert_non_null(f->sc.idx);
	assert_non_null(f->sc.idx2);
	assert_non_null(f->sc.order);
	assert_non_null(f->sc.d1);
	assert_non_null(f->sc.d2);
	assert_non_null(f->sc.d3);
}

static void
fx_scratch_free(fx *f)
{
	free(f->sc.excluded);
	free(f->sc.idx);
	free(f->sc.idx2);
	free(f->sc.order);
	free(f->sc.d1);
	free(f->sc.d2);
	free(f->sc.d3);
}

static fx *
fx_new(int alg)
{
	fx *f = calloc(1, sizeof *f);

	assert_non_null(f);
	f->snap = sg_snapshot_new();
	assert_non_null(f->snap);
	f->def.algorithm = alg;
	f->def.sample_count = 2;
	f->def.comparator = SG_CMP_TTFT;
	f->def.virtual_nodes = 150;
	f->req.request_id = "req-0";
	f->req.model = "model-a";
	f->req.input_tokens = 100;
	return f;
}

static void
fx_free(fx *f)
{
	fx_scratch_free(f);
	sg_snapshot_free(f->snap);
	free(f);
}

static sg_cluster *
fx_add(fx *f, const char *id)
{
	sg_cluster c;
	size_t n;

	assert_int_equal(sg_cluster_init(&c, id, strlen(id)), 0);
	c.last_mean_input_tps = 1000;
	c.max_input_tps = 1000;
	assert_int_equal(sg_snapshot_add(f->snap, &c, NULL), 0);
	n = sg_snapshot_count(f->snap);
	return sg_snapshot_at(f->snap, n - 1);
}

static void
fx_add_n(fx *f, size_t n)
{
	char id[32];
	size_t i;

	for (i = 0; i < n; i++) {
		snprintf(id, sizeof id, "c%02zu", i);
		fx_add(f, id);
	}
}

/* Fill the context after the snapshot is complete; no exclusions yet. */
static void
fx_ready(fx *f)
{
	size_t n = sg_snapshot_count(f->snap);

	fx_scratch(f, n);
	f->x.def = &f->def;
	f->x.snap = f->snap;
	f->x.req = &f->req;
	f->x.router_seed = 1;
	f->x.scratch = &f->sc;
	f->x.n = n;
	f->x.neligible = n;
	f->x.rr_counter = &f->rr;
}

/* Exclude candidate i, as the router would (excluded[] and the request). */
static void
fx_exclude(fx *f, size_t i)
{
	if (f->sc.excluded[i])
		return;
	f->sc.excluded[i] = 1;
	f->excl[f->req.nexcluded++] = sg_snapshot_get(f->snap, i)->id;
	f->req.excluded = f->excl;
	f->x.neligible--;
}

static void
fx_clear_exclusions(fx *f)
{
	memset(f->sc.excluded, 0, f->x.n);
	f->req.nexcluded = 0;
	f->x.neligible = f->x.n;
}

static void
fx_request(fx *f, unsigned k)
{
	snprintf(f->rid, sizeof f->rid, "req-%u", k);
	f->req.request_id = f->rid;
}

static void
assert_unavailable(const sg_decision *d, const char *alg)
{
	assert_int_equal(d->kind, SG_DECIDE_REJECT);
	assert_int_equal(d->status, 503);
	assert_string_equal(d->code, "overloaded_error");
	assert_string_equal(d->algorithm, alg);
}

static void
assert_selected(const fx *f, const sg_decision *d, size_t i, unsigned depth)
{
	assert_int_equal(d->kind, SG_DECIDE_SELECT);
	assert_int_equal(d->index, i);
	assert_ptr_equal(d->cluster_id, sg_snapshot_get(f->snap, i)->id);
	assert_int_equal(d->rank_depth, depth);
	assert_int_equal(d->phase, SG_PHASE_NONE);
}

typedef int (*algfn)(sgi_ctx *, sg_decision *);

/*
 * Property: over random snapshot sizes, exclusion sets and requests, an
 * algorithm never selects an excluded cluster, and selects something
 * whenever one is eligible.
 */
static void
check_never_selects_excluded(int alg, algfn fn)
{
	unsigned trial, k;
	sgi_rng g;
	sg_algdef sd;
	sg_request sr;

	memset(&sd, 0, sizeof sd);
	memset(&sr, 0, sizeof sr);
	sr.request_id = "property";
	sgi_rng_seed(&g, 99, &sd, &sr);
	for (trial = 0; trial < 60; trial++) {
		size_t n = 1 + (size_t)sgi_rng_below(&g, 80), i, nex;
		fx *f = fx_new(alg);

		fx_add_n(f, n);
		for (i = 0; i < n; i++) {
			sg_cluster *c = sg_snapshot_at(f->snap, i);

			c->running = sgi_rng_below(&g, 10);
			c->max_engine_concurrency = sgi_rng_below(&g, 10);
			c->queued_input_tokens = sgi_rng_below(&g, 5000);
			c->max_input_tps = (double)sgi_rng_below(&g, 3) * 500;
			c->kv_free_tokens = sgi_rng_below(&g, 400);
			c->kv_capacity_tokens = 1000;
		}
		f->def.sample_count = 1 + (unsigned)sgi_rng_below(&g, 8);
		f->def.consider_kv_free_tokens = sgi_rng_below(&g, 2);
		fx_ready(f);
		nex = (size_t)sgi_rng_below(&g, n + 1);
		for (i = 0; i < nex; i++)
			fx_exclude(f, (size_t)sgi_rng_below(&g, n));
		for (k = 0; k < 40; k++) {
			sg_decision d;

			memset(&d, 0, sizeof d);
			fx_request(f, k);
			f->req.input_tokens = sgi_rng_below(&g, 300);
			assert_int_equal(fn(&f->x, &d), 0);
			if (d.kind == SG_DECIDE_SELECT) {
				assert_true(d.index < n);
				assert_false(f->sc.excluded[d.index]);
			} else {
				assert_unavailable(&d, sg_algorithm_name(alg));
				if (alg != SG_ALG_PULSAR)
					assert_int_equal(f->x.neligible, 0);
			}
			if (f->x.neligible > 0 && alg != SG_ALG_PULSAR)
				assert_int_equal(d.kind, SG_DECIDE_SELECT);
		}
		fx_free(f);
	}
}

/* --- random ----------------------------------------------------------------- */

static void
test_random_never_selects_excluded(void **state)
{
	(void)state;
	check_never_selects_excluded(SG_ALG_RANDOM, sgi_random);
}

static void
test_random_is_uniform_over_eligible_and_replays(void **state)
{
	fx *f = fx_new(SG_ALG_RANDOM);
	unsigned seen[6] = { 0 }, k;
	sg_decision d, d2;

	(void)state;
	fx_add_n(f, 6);
	fx_ready(f);
	fx_exclude(f, 2);
	for (k = 0; k < 5000; k++) {
		fx_request(f, k);
		assert_int_equal(sgi_random(&f->x, &d), 0);
		assert_selected(f, &d, d.index, 1);
		assert_string_equal(d.algorithm, "random");
		seen[d.index]++;
		/* same request, same attempt: same choice */
		assert_int_equal(sgi_random(&f->x, &d2), 0);
		assert_int_equal(d2.index, d.index);
	}
	assert_int_equal(seen[2], 0);
	for (k = 0; k < 6; k++)
		if (k != 2) {
			assert_true(seen[k] > 850);	/* expect 1000 */
			assert_true(seen[k] < 1150);
		}
	fx_free(f);
}

static void
test_random_all_excluded_is_unavailable(void **state)
{
	fx *f = fx_new(SG_ALG_RANDOM);
	sg_decision d;

	(void)state;
	fx_add_n(f, 3);
	fx_ready(f);
	fx_exclude(f, 0);
	fx_exclude(f, 1);
	fx_exclude(f, 2);
	assert_int_equal(sgi_random(&f->x, &d), 0);
	assert_unavailable(&d, "random");
	fx_free(f);
}

/* --- round-robin ------------------------------------------------------------ */

static void
test_round_robin_cycles_in_list_order(void **state)
{
	fx *f = fx_new(SG_ALG_ROUND_ROBIN);
	sg_decision d;
	unsigned k;

	(void)state;
	fx_add_n(f, 3);
	fx_ready(f);
	for (k = 0; k < 7; k++) {
		assert_int_equal(sgi_round_robin(&f->x, &d), 0);
		assert_selected(f, &d, k % 3, 1);
		assert_string_equal(d.algorithm, "round-robin");
	}
	assert_true(f->rr == 7);
	fx_free(f);
}

static void
test_round_robin_with_exclusions_takes_kth_eligible(void **state)
{
	/* eligible = {0, 2, 3}; counter 7 -> 7 mod 3 = 1 -> index 2 */
	static const size_t want[] = { 2, 3, 0, 2, 3, 0 };
	fx *f = fx_new(SG_ALG_ROUND_ROBIN);
	sg_decision d;
	unsigned k;

	(void)state;
	fx_add_n(f, 5);
	fx_ready(f);
	fx_exclude(f, 1);
	fx_exclude(f, 4);
	f->rr = 7;
	for (k = 0; k < 6; k++) {
		assert_int_equal(sgi_round_robin(&f->x, &d), 0);
		assert_selected(f, &d, want[k], 1);
	}
	assert_true(f->rr == 13);
	/* the counter keeps going without exclusions: 13 mod 5 = 3 */
	fx_clear_exclusions(f);
	assert_int_equal(sgi_round_robin(&f->x, &d), 0);
	assert_selected(f, &d, 3, 1);
	fx_free(f);
}

static void
test_round_robin_never_selects_excluded(void **state)
{
	(void)state;
	check_never_selects_excluded(SG_ALG_ROUND_ROBIN, sgi_round_robin);
}

static void
test_round_robin_all_excluded_is_unavailable(void **state)
{
	fx *f = fx_new(SG_ALG_ROUND_ROBIN);
	sg_decision d;

	(void)state;
	fx_add_n(f, 2);
	fx_ready(f);
	fx_exclude(f, 0);
	fx_exclude(f, 1);
	assert_int_equal(sgi_round_robin(&f->x, &d), 0);
	assert_unavailable(&d, "round-robin");
	fx_free(f);
}

/* --- power-of-n ------------------------------------------------------------- */

static void
test_power_of_n_never_selects_excluded(void **state)
{
	(void)state;
	check_never_selects_excluded(SG_ALG_POWER_OF_N, sgi_power_of_n);
}

/* Cluster i gets queued = rank[i], so the comparator orders them. */
static void
set_queued(fx *f, const uint64_t *q, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		sg_snapshot_at(f->snap, i)->queued = q[i];
}

static void
test_power_of_n_sample_of_all_picks_global_min(void **state)
{
	static const uint64_t q[] = { 9, 4, 7, 1, 8, 3, 6, 5 };
	fx *f = fx_new(SG_ALG_POWER_OF_N);
	sg_decision d;
	unsigned k;

	(void)state;
	fx_add_n(f, 8);
	set_queued(f, q, 8);
	f->def.comparator = SG_CMP_NUM_QUEUED;
	f->def.sample_count = 8;
	fx_ready(f);
	for (k = 0; k < 50; k++) {
		fx_request(f, k);
		assert_int_equal(sgi_power_of_n(&f->x, &d), 0);
		assert_selected(f, &d, 3, 1);
		assert_string_equal(d.algorithm, "power-of-n");
	}
	/* sample_count above the eligible count: the eligible minimum */
	f->def.sample_count = 64;
	fx_exclude(f, 3);
	assert_int_equal(sgi_power_of_n(&f->x, &d), 0);
	assert_selected(f, &d, 5, 1);
	fx_free(f);
}

/*
 * With a sample of m from n distinct scores, the pick is the best of its
 * sample: never one of the m-1 worst, and every other rank does occur.
 */
static void
check_min_of_sample(size_t n, unsigned m, size_t nex)
{
	fx *f = fx_new(SG_ALG_POWER_OF_N);
	unsigned *seen = calloc(n, sizeof *seen), k;
	size_t i, ne;
	uint64_t *q = calloc(n, sizeof *q);
	size_t *byrank = calloc(n, sizeof *byrank);
	sg_decision d;

	assert_non_null(seen);
	assert_non_null(q);
	assert_non_null(byrank);
	fx_add_n(f, n);
	for (i = 0; i < n; i++)		/* a permutation of scores */
		q[i] = (i * 7 + 3) % n;
	set_queued(f, q, n);
	f->def.comparator = SG_CMP_NUM_QUEUED;
	f->def.sample_count = m;
	fx_ready(f);
	for (i = 0; i < nex; i++)
		fx_exclude(f, (i * 7 + 1) % n);	/* distinct: gcd(7, n) = 1 */
	/* eligible clusters ordered by score */
	ne = 0;
	for (k = 0; k < n; k++)
		for (i = 0; i < n; i++)
			if (q[i] == k && !f->sc.excluded[i])
				byrank[ne++] = i;
	assert_int_equal(ne, f->x.neligible);
	for (k = 0; k < 4000; k++) {
		fx_request(f, k);
		assert_int_equal(sgi_power_of_n(&f->x, &d), 0);
		assert_int_equal(d.kind, SG_DECIDE_SELECT);
		seen[d.index]++;
	}
	for (i = 0; i < ne; i++) {
		/* P(rank i wins) = C(ne-1-i, m-1) / C(ne, m) */
		double p = 1;

		for (k = 0; k < m - 1; k++)
			p *= (double)(ne - 1 - i - k) / (double)(ne - k);
		p *= (double)m / (double)(ne - m + 1);
		if (i + m > ne)		/* one of the m-1 worst */
			assert_int_equal(seen[byrank[i]], 0);
		else if (p * 4000 >= 20)
			assert_true(seen[byrank[i]] > 0);
	}
	for (i = 0; i < n; i++)
		if (f->sc.excluded[i])
			assert_int_equal(seen[i], 0);
	free(seen);
	free(q);
	free(byrank);
	fx_free(f);
}

static void
test_power_of_n_picks_min_of_its_sample(void **state)
{
	(void)state;
	check_min_of_sample(8, 2, 0);	/* dense: rejection sampling */
	check_min_of_sample(64, 2, 3);
	check_min_of_sample(12, 4, 7);	/* m * 4 > eligible: Fisher-Yates */
	check_min_of_sample(20, 2, 12);	/* sparse: Fisher-Yates */
	check_min_of_sample(10, 6, 2);
	check_min_of_sample(3, 2, 0);
}

static void
test_power_of_n_ties_are_uniform(void **state)
{
	fx *f = fx_new(SG_ALG_POWER_OF_N);
	unsigned seen[4] = { 0 }, k;
	sg_decision d;

	(void)state;
	fx_add_n(f, 4);	/* identical clusters: every score ties */
	f->def.sample_count = 4;
	fx_ready(f);
	for (k = 0; k < 4000; k++) {
		fx_request(f, k);
		assert_int_equal(sgi_power_of_n(&f->x, &d), 0);
		seen[d.index]++;
	}
	for (k = 0; k < 4; k++) {
		assert_true(seen[k] > 850);	/* expect 1000 */
		assert_true(seen[k] < 1150);
	}
	fx_free(f);
}

static void
test_power_of_n_uses_the_configured_comparator(void **state)
{
	fx *f = fx_new(SG_ALG_POWER_OF_N);
	sg_cluster *a, *b;
	sg_decision d;

	(void)state;
	a = fx_add(f, "a");	/* more queued, lower utilisation */
	b = fx_add(f, "b");
	a->queued = 10;
	a->running = 1;
	a->max_engine_concurrency = 10;
	b->queued = 1;
	b->running = 9;
	b->max_engine_concurrency = 10;
	/* ttft: a has a free slot (queue 0), b too; rtt decides */
	a->rtt_ms = 50;
	b->rtt_ms = 5;
	fx_ready(f);
	f->def.comparator = SG_CMP_NUM_QUEUED;
	assert_int_equal(sgi_power_of_n(&f->x, &d), 0);
	assert_selected(f, &d, 1, 1);
	f->def.comparator = SG_CMP_UTILIZATION;
	assert_int_equal(sgi_power_of_n(&f->x, &d), 0);
	assert_selected(f, &d, 0, 1);
	f->def.comparator = SG_CMP_TTFT;
	assert_int_equal(sgi_power_of_n(&f->x, &d), 0);
	assert_selected(f, &d, 1, 1);
	/* +inf (queued work, no tps) loses to any finite score */
	b->last_mean_input_tps = 0;
	f->def.comparator = SG_CMP_INPUT_WORK;
	assert_int_equal(sgi_power_of_n(&f->x, &d), 0);
	assert_selected(f, &d, 0, 1);
	fx_free(f);
}

static void
test_power_of_n_all_excluded_is_unavailable(void **state)
{
	fx *f = fx_new(SG_ALG_POWER_OF_N);
	sg_decision d;

	(void)state;
	fx_add_n(f, 1);
	fx_ready(f);
	fx_exclude(f, 0);
	assert_int_equal(sgi_power_of_n(&f->x, &d), 0);
	assert_unavailable(&d, "power-of-n");
	fx_free(f);
}

/* --- pulsar ----------------------------------------------------------------- */

static size_t
put_tag(unsigned char *buf, size_t n, const char *name, const char *val)
{
	size_t i, len = strlen(val);

	memcpy(buf + n, name, strlen(name));
	n += strlen(name);
	buf[n++] = 0xFF;
	for (i = 0; i < 8; i++)
		buf[n++] = (unsigned char)((uint64_t)len >> (8 * i));
	memcpy(buf + n, val, len);
	return n + len;
}

/* Expected pulsar score from first principles (stargate-lb-config(5)). */
static double
hand_score(const fx *f, const char *id, double w)
{
	unsigned char buf[2048];
	size_t n = 0;
	uint64_t h;

	buf[n++] = 0x01;
	n = put_tag(buf, n, "seed", f->def.seed);
	n = put_tag(buf, n, "routing_key",
	    f->req.routing_key ? f->req.routing_key : "");
	n = put_tag(buf, n, "model_id", f->req.model);
	n = put_tag(buf, n, "cache_affinity_key",
	    f->req.cache_affinity_key ? f->req.cache_affinity_key : "");
	n = put_tag(buf, n, "cluster_id", id);
	h = XXH3_64bits(buf, n);
	return w / -log(((double)h + 1.0) / ((double)UINT64_MAX + 2.0));
}

/* Expected ranking: indices of clusters with a valid weight, by score. */
static size_t
hand_rank(const fx *f, size_t *order)
{
	double sc[512];
	size_t n = sg_snapshot_count(f->snap), i, j, nr = 0, t;

	assert_true(n <= 512);
	for (i = 0; i < n; i++) {
		const sg_cluster *c = sg_snapshot_get(f->snap, i);
		double w = f->def.rendezvous_weight ==
		    SG_WEIGHT_LAST_MEAN_INPUT_TPS ? c->last_mean_input_tps :
		    c->max_input_tps;

		if (!(w > 0) || !isfinite(w))
			continue;
		sc[i] = hand_score(f, c->id, w);
		order[nr++] = i;
	}
	for (i = 1; i < nr; i++)	/* simple, obviously right */
		for (j = i; j > 0; j--) {
			const sg_cluster *a = sg_snapshot_get(f->snap, order[j]);
			const sg_cluster *b = sg_snapshot_get(f->snap,
			    order[j - 1]);

			if (sc[order[j]] > sc[order[j - 1]] ||
			    (sc[order[j]] == sc[order[j - 1]] &&
			    strcmp(a->id, b->id) < 0)) {
				t = order[j];
				order[j] = order[j - 1];
				order[j - 1] = t;
			} else
				break;
		}
	return nr;
}

static fx *
pulsar_fx(size_t n, const char *key)
{
	fx *f = fx_new(SG_ALG_PULSAR);
	size_t i;

	strcpy(f->def.seed, "seed-1");
	f->def.seed_len = 6;
	f->req.routing_key = "rk-1";
	f->req.cache_affinity_key = key;
	fx_add_n(f, n);
	for (i = 0; i < n; i++)
		sg_snapshot_at(f->snap, i)->max_input_tps = 100.0 * (double)(i % 4 + 1);
	return f;
}

static void
test_pulsar_rank_orders_by_descending_score(void **state)
{
	static const size_t sizes[] = { 7, 64, 127, 128, 200, 300 };
	size_t want[512], got[512], nr, k;
	unsigned key;
	char kb[32];

	(void)state;
	/* short (insertion sort) and long (radix sort) rankings */
	for (k = 0; k < sizeof sizes / sizeof sizes[0]; k++)
		for (key = 0; key < 20; key++) {
			fx *f = pulsar_fx(sizes[k], kb);

			snprintf(kb, sizeof kb, "prefix-%u", key);
			fx_ready(f);
			nr = hand_rank(f, want);
			assert_int_equal(sgi_pulsar_rank(&f->x, got), nr);
			assert_memory_equal(got, want, nr * sizeof want[0]);
			fx_free(f);
		}
}

/* Two clusters with exactly equal scores rank by id, bytes ascending. */
static void
test_pulsar_rank_ties_by_cluster_id(void **state)
{
	fx *f = pulsar_fx(0, "k");
	sg_cluster *a, *b, *c;
	double sa, sb, w;
	size_t got[3];
	int tries;

	(void)state;
	c = fx_add(f, "zz");
	b = fx_add(f, "b");
	a = fx_add(f, "a");
	c->max_input_tps = 1e-300;	/* ranked last */
	a->max_input_tps = 1000;
	sa = hand_score(f, "a", 1000);
	/* find a weight for b that gives exactly a's score */
	w = 1000 * hand_score(f, "b", 1000) / sa;
	w = 1000 * 1000 / w;
	for (tries = 0; tries < 1000; tries++) {
		sb = hand_score(f, "b", w);
		if (sb == sa)
			break;
		w = sb < sa ? nextafter(w, INFINITY) : nextafter(w, 0);
	}
	assert_true(sb == sa);
	b->max_input_tps = w;
	fx_ready(f);
	assert_int_equal(sgi_pulsar_rank(&f->x, got), 3);
	assert_int_equal(got[0], 2);	/* "a" */
	assert_int_equal(got[1], 1);	/* "b" */
	assert_int_equal(got[2], 0);	/* "zz" */
	fx_free(f);
}

/* A weight for cluster id that gives exactly the score target. */
static double
weight_for(const fx *f, const char *id, double target)
{
	double w = target / hand_score(f, id, 1.0), sb;
	int tries;

	for (tries = 0; tries < 1000; tries++) {
		sb = hand_score(f, id, w);
		if (sb == target)
			return w;
		w = sb < target ? nextafter(w, INFINITY) : nextafter(w, 0);
	}
	fail_msg("no weight gives score %.17g for %s", target, id);
	return 0;
}

/*
 * In a long ranking (radix path): an exact tie ranks by id; scores one ulp
 * apart rank by score even when id and index order say otherwise.
 */
static void
test_pulsar_rank_exact_order_in_long_lists(void **state)
{
	fx *f = pulsar_fx(150, "k-long");
	size_t want[512], got[512], nr, pa, pb, pc, pd, i;
	double sa;

	(void)state;
	/* index 10 "c10" and index 90 "c90": tie -> "c10" first */
	sa = hand_score(f, "c10", sg_snapshot_get(f->snap, 10)->max_input_tps);
	sg_snapshot_at(f->snap, 90)->max_input_tps = weight_for(f, "c90", sa);
	/* index 20 "c20" and index 80 "c80": c80 higher by one ulp */
	sa = hand_score(f, "c20", sg_snapshot_get(f->snap, 20)->max_input_tps);
	sg_snapshot_at(f->snap, 80)->max_input_tps = weight_for(f, "c80",
	    nextafter(sa, INFINITY));
	fx_ready(f);
	nr = hand_rank(f, want);
	assert_int_equal(sgi_pulsar_rank(&f->x, got), nr);
	assert_memory_equal(got, want, nr * sizeof want[0]);
	pa = pb = pc = pd = nr;
	for (i = 0; i < nr; i++) {
		pa = got[i] == 10 ? i : pa;
		pb = got[i] == 90 ? i : pb;
		pc = got[i] == 20 ? i : pc;
		pd = got[i] == 80 ? i : pd;
	}
	assert_int_equal(pb, pa + 1);
	assert_int_equal(pc, pd + 1);
	fx_free(f);
}

static void
test_pulsar_selects_top_ranked(void **state)
{
	size_t want[64];
	sg_decision d;
	unsigned key;
	char kb[32];

	(void)state;
	for (key = 0; key < 30; key++) {
		fx *f = pulsar_fx(9, kb);

		snprintf(kb, sizeof kb, "session-%u", key);
		fx_ready(f);
		hand_rank(f, want);
		assert_int_equal(sgi_pulsar(&f->x, &d), 0);
		assert_selected(f, &d, want[0], 1);
		assert_false(d.kv_skip);
		assert_string_equal(d.algorithm, "pulsar");
		/* load never changes the ranking */
		sg_snapshot_at(f->snap, want[0])->queued = 1000;
		sg_snapshot_at(f->snap, want[0])->running = 1000;
		sg_snapshot_at(f->snap, want[0])->max_engine_concurrency = 1;
		assert_int_equal(sgi_pulsar(&f->x, &d), 0);
		assert_selected(f, &d, want[0], 1);
		fx_free(f);
	}
}

static void
test_pulsar_excluded_falls_back_with_rank_depth(void **state)
{
	size_t want[64];
	sg_decision d;
	fx *f = pulsar_fx(6, "prefix-123");

	(void)state;
	fx_ready(f);
	hand_rank(f, want);
	fx_exclude(f, want[0]);
	fx_exclude(f, want[1]);
	assert_int_equal(sgi_pulsar(&f->x, &d), 0);
	assert_selected(f, &d, want[2], 3);
	assert_false(d.kv_skip);	/* retry exclusions are not KV skips */
	assert_int_equal(sgi_pulsar_feasible(&f->x, want[0]), 1);
	assert_int_equal(sgi_pulsar_feasible(&f->x, want[2]), 0);
	fx_free(f);
}

static void
test_pulsar_kv_checks_and_kv_skip_flag(void **state)
{
	size_t want[64];
	sg_decision d;
	fx *f = pulsar_fx(5, "prefix-9");
	size_t i;

	(void)state;
	for (i = 0; i < 5; i++) {
		sg_cluster *c = sg_snapshot_at(f->snap, i);

		c->kv_capacity_tokens = 10000;
		c->kv_used_tokens = 5000;
		c->kv_free_tokens = 5000;
	}
	f->def.consider_kv_free_tokens = true;
	f->req.input_tokens = 1000;
	fx_ready(f);
	hand_rank(f, want);

	/* rank 1 has no KV stats at all: KV skip */
	{
		sg_cluster *c = sg_snapshot_at(f->snap, want[0]);

		c->kv_capacity_tokens = c->kv_used_tokens = 0;
		c->kv_free_tokens = 0;
	}
	/* rank 2 is retry-excluded */
	fx_exclude(f, want[1]);
	/* rank 3 has too little free KV */
	sg_snapshot_at(f->snap, want[2])->kv_free_tokens = 999;
	assert_int_equal(sgi_pulsar_feasible(&f->x, want[0]), 2);
	assert_int_equal(sgi_pulsar_feasible(&f->x, want[1]), 1);
	assert_int_equal(sgi_pulsar_feasible(&f->x, want[2]), 2);
	assert_int_equal(sgi_pulsar_feasible(&f->x, want[3]), 0);
	assert_int_equal(sgi_pulsar(&f->x, &d), 0);
	assert_selected(f, &d, want[3], 4);
	assert_true(d.kv_skip);

	/* exactly enough free KV is enough */
	sg_snapshot_at(f->snap, want[2])->kv_free_tokens = 1000;
	assert_int_equal(sgi_pulsar(&f->x, &d), 0);
	assert_selected(f, &d, want[2], 3);
	assert_true(d.kv_skip);

	/* only an exclusion ahead: no KV skip */
	sg_snapshot_at(f->snap, want[0])->kv_free_tokens = 1000;
	assert_int_equal(sgi_pulsar(&f->x, &d), 0);
	assert_selected(f, &d, want[0], 1);
	assert_false(d.kv_skip);

	/* without the option KV stats are ignored */
	f->def.consider_kv_free_tokens = false;
	sg_snapshot_at(f->snap, want[0])->kv_free_tokens = 0;
	assert_int_equal(sgi_pulsar_feasible(&f->x, want[0]), 0);
	assert_int_equal(sgi_pulsar(&f->x, &d), 0);
	assert_selected(f, &d, want[0], 1);

	/* with it, a request without input tokens cannot be placed */
	f->def.consider_kv_free_tokens = true;
	f->req.input_tokens = 0;
	assert_int_equal(sgi_pulsar_feasible(&f->x, want[3]), 2);
	assert_int_equal(sgi_pulsar(&f->x, &d), 0);
	assert_unavailable(&d, "pulsar");
	fx_free(f);
}

static void
test_pulsar_unranked_clusters_are_never_chosen(void **state)
{
	size_t want[64], got[64], nr;
	sg_decision d;
	fx *f = pulsar_fx(6, "k-1");

	(void)state;
	/* max-input-tps mode: no fallback to the mean */
	sg_snapshot_at(f->snap, 1)->max_input_tps = 0;
	sg_snapshot_at(f->snap, 3)->max_input_tps = NAN;
	sg_snapshot_at(f->snap, 4)->max_input_tps = INFINITY;
	fx_ready(f);
	nr = hand_rank(f, want);
	assert_int_equal(nr, 3);
	assert_int_equal(sgi_pulsar_rank(&f->x, got), 3);
	assert_memory_equal(got, want, nr * sizeof want[0]);
	/* exclude every ranked one: unavailable, unranked ones stay unused */
	fx_exclude(f, want[0]);
	fx_exclude(f, want[1]);
	assert_int_equal(sgi_pulsar(&f->x, &d), 0);
	assert_selected(f, &d, want[2], 3);	/* depth counts ranked only */
	fx_exclude(f, want[2]);
	assert_int_equal(sgi_pulsar(&f->x, &d), 0);
	assert_unavailable(&d, "pulsar");
	fx_free(f);
}

static void
test_pulsar_last_mean_input_tps_mode(void **state)
{
	size_t want[64], got[64], nr, i;
	sg_decision d;
	fx *f = pulsar_fx(8, "k-7");

	(void)state;
	f->def.rendezvous_weight = SG_WEIGHT_LAST_MEAN_INPUT_TPS;
	for (i = 0; i < 8; i++) {
		sg_cluster *c = sg_snapshot_at(f->snap, i);

		c->max_input_tps = 0;		/* ignored in this mode */
		c->last_mean_input_tps = 50.0 * (double)(i + 1);
	}
	sg_snapshot_at(f->snap, 5)->last_mean_input_tps = 0;
	fx_ready(f);
	nr = hand_rank(f, want);
	assert_int_equal(nr, 7);
	assert_int_equal(sgi_pulsar_rank(&f->x, got), nr);
	assert_memory_equal(got, want, nr * sizeof want[0]);
	assert_int_equal(sgi_pulsar(&f->x, &d), 0);
	assert_selected(f, &d, want[0], 1);
	fx_free(f);
}

static void
test_pulsar_weights_shift_shares(void **state)
{
	unsigned wins[2] = { 0, 0 }, k;
	fx *f = pulsar_fx(2, NULL);
	char kb[32];
	sg_decision d;

	(void)state;
	sg_snapshot_at(f->snap, 0)->max_input_tps = 100;
	sg_snapshot_at(f->snap, 1)->max_input_tps = 300;
	f->req.cache_affinity_key = kb;
	fx_ready(f);
	for (k = 0; k < 4000; k++) {
		snprintf(kb, sizeof kb, "key-%u", k);
		assert_int_equal(sgi_pulsar(&f->x, &d), 0);
		wins[d.index]++;
	}
	/* weighted rendezvous: shares 1/4 and 3/4 */
	assert_true(wins[0] > 850 && wins[0] < 1150);
	fx_free(f);
}

static void
test_pulsar_never_selects_excluded(void **state)
{
	(void)state;
	check_never_selects_excluded(SG_ALG_PULSAR, sgi_pulsar);
}

static void
test_pulsar_all_excluded_is_unavailable(void **state)
{
	fx *f = pulsar_fx(3, "k");
	sg_decision d;

	(void)state;
	fx_ready(f);
	fx_exclude(f, 0);
	fx_exclude(f, 1);
	fx_exclude(f, 2);
	assert_int_equal(sgi_pulsar(&f->x, &d), 0);
	assert_unavailable(&d, "pulsar");
	fx_free(f);
}

static void
test_explain_fills_candidate_table(void **state)
{
	fx *f = pulsar_fx(4, "k");
	json_t *ex = json_object(), *c;
	size_t want[64];
	sg_decision d;

	(void)state;
	fx_ready(f);
	hand_rank(f, want);
	fx_exclude(f, want[0]);
	f->x.explain = ex;
	assert_int_equal(sgi_pulsar(&f->x, &d), 0);
	assert_selected(f, &d, want[1], 2);
	assert_int_equal(json_array_size(json_object_get(ex, "effective_order")), 4);
	assert_string_equal(json_string_value(json_array_get(
	    json_object_get(ex, "effective_order"), 0)),
	    sg_snapshot_get(f->snap, want[0])->id);
	c = json_array_get(json_object_get(ex, "candidates"), want[0]);
	assert_true(json_is_true(json_object_get(c, "excluded")));
	assert_int_equal(json_integer_value(json_object_get(c,
	    "affinity_rank")), 1);
	json_decref(ex);

	ex = json_object();
	f->x.explain = ex;
	f->def.algorithm = SG_ALG_POWER_OF_N;
	assert_int_equal(sgi_power_of_n(&f->x, &d), 0);
	assert_int_equal(json_array_size(json_object_get(ex, "candidates")), 4);
	c = json_array_get(json_object_get(ex, "candidates"), 0);
	assert_non_null(json_object_get(c, "queue_ms"));
	json_decref(ex);
	fx_free(f);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_random_never_selects_excluded),
		cmocka_unit_test(test_random_is_uniform_over_eligible_and_replays),
		cmocka_unit_test(test_random_all_excluded_is_unavailable),
		cmocka_unit_test(test_round_robin_cycles_in_list_order),
		cmocka_unit_test(test_round_robin_with_exclusions_takes_kth_eligible),
		cmocka_unit_test(test_round_robin_never_selects_excluded),
		cmocka_unit_test(test_round_robin_all_excluded_is_unavailable),
		cmocka_unit_test(test_power_of_n_never_selects_excluded),
		cmocka_unit_test(test_power_of_n_sample_of_all_picks_global_min),
		cmocka_unit_test(test_power_of_n_picks_min_of_its_sample),
		cmocka_unit_test(test_power_of_n_ties_are_uniform),
		cmocka_unit_test(test_power_of_n_uses_the_configured_comparator),
		cmocka_unit_test(test_power_of_n_all_excluded_is_unavailable),
		cmocka_unit_test(test_pulsar_rank_orders_by_descending_score),
		cmocka_unit_test(test_pulsar_rank_ties_by_cluster_id),
		cmocka_unit_test(test_pulsar_rank_exact_order_in_long_lists),
		cmocka_unit_test(test_pulsar_selects_top_ranked),
		cmocka_unit_test(test_pulsar_excluded_falls_back_with_rank_depth),
		cmocka_unit_test(test_pulsar_kv_checks_and_kv_skip_flag),
		cmocka_unit_test(test_pulsar_unranked_clusters_are_never_chosen),
		cmocka_unit_test(test_pulsar_last_mean_input_tps_mode),
		cmocka_unit_test(test_pulsar_weights_shift_shares),
		cmocka_unit_test(test_pulsar_never_selects_excluded),
		cmocka_unit_test(test_pulsar_all_excluded_is_unavailable),
		cmocka_unit_test(test_explain_fills_candidate_table),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
