/*
 * test_pwaw.c — pulsar-wait-and-widen (stargate-lb-config(5), the NEW
 * algorithm): the worked checks of the band schedule, the removal of the
 * eligible-primary shortcut (stargate(7) "Shortcut removal"), KV checks,
 * exclusions, the open set's admission and comparator.  Ranks are computed by
 * the test's own pulsar ranking (sg_waw_fixture.h), never assumed.
 */
#include "sg_test.h"

#include "sg_waw_fixture.h"

struct pcase {
	sg_lbconf	*conf;
	sg_router	*rt;
	sg_snapshot	*s;
	sg_request	 r;
	size_t		 rank[FX_MAXC];	/* candidate index of rank i+1 */
	size_t		 nr;
};

/* n clusters ranked by pulsar for key "sess"; fields given as JSON text. */
static void
psetup(struct pcase *t, size_t n, const char *fields)
{
	char text[512];

	snprintf(text, sizeof(text), "{\"models\":{\"m\":{\"algorithm\":"
	    "\"pulsar-wait-and-widen\"%s%s}}}", *fields ? "," : "", fields);
	t->conf = fx_conf(text);
	t->rt = fx_router(t->conf, 42);
	t->s = fx_snapshot(n);
	fx_req(&t->r, "r-p", "sess", 100);
	t->nr = fx_pulsar_order(fx_def(t->conf, &t->r), &t->r, t->s, t->rank);
	assert_int_equal(t->nr, n);
}

static void
pteardown(struct pcase *t)
{
	sg_snapshot_free(t->s);
	sg_router_free(t->rt);
	sg_lbconf_free(t->conf);
}

/* Only rank `free_rank` (1-based) has a free slot. */
static void
only_free(struct pcase *t, size_t free_rank)
{
	size_t i;

	for (i = 0; i < t->nr; i++)
		fx_full(t->s, t->rank[i]);
	fx_free(t->s, t->rank[free_rank - 1]);
}

static sg_decision
pdecide(struct pcase *t, double e)
{
	return fx_decide(t->rt, t->s, &t->r, e);
}

static void
assert_rank(struct pcase *t, sg_decision d, unsigned rank, int phase)
{
	fx_assert_select(d, t->rank[rank - 1]);
	assert_int_equal(d.rank_depth, rank);
	assert_int_equal(d.phase, phase);
}

/* k=1, X=300, S = X: only rank 4 free -> Wait at 300 rechecks at 600. */
static void
test_worked_check_x300_rank4_at_600(void **state)
{
	struct pcase t;
	sg_decision d;

	(void)state;
	psetup(&t, 6, "\"cache_affinity_wait_ms\":300");
	only_free(&t, 4);
	d = pdecide(&t, 0);
	fx_assert_wait(d, 300);
	assert_int_equal(d.phase, SG_PHASE_AFFINITY);
	fx_assert_wait(pdecide(&t, 299), 300);
	d = pdecide(&t, 300);
	fx_assert_wait(d, 600);
	assert_int_equal(d.phase, SG_PHASE_OPEN);
	fx_assert_wait(pdecide(&t, 599), 600);
	assert_rank(&t, pdecide(&t, 600), 4, SG_PHASE_OPEN);
	pteardown(&t);
}

/* X=100, S=200, only rank 8 of 8 free: waits to 300, 500; rank 8 at 500. */
static void
test_worked_check_x100_s200_rank8_at_500(void **state)
{
	struct pcase t;

	(void)state;
	psetup(&t, 8, "\"cache_affinity_wait_ms\":100,"
	    "\"band_widen_interval_ms\":200");
	only_free(&t, 8);
	fx_assert_wait(pdecide(&t, 0), 100);
	fx_assert_wait(pdecide(&t, 100), 300);
	fx_assert_wait(pdecide(&t, 300), 500);
	fx_assert_wait(pdecide(&t, 350), 500);
	fx_assert_wait(pdecide(&t, 499), 500);
	assert_rank(&t, pdecide(&t, 500), 8, SG_PHASE_OPEN);
	pteardown(&t);
}

/* S = 0 opens every rank at once after X. */
static void
test_band_interval_zero_opens_everything_after_x(void **state)
{
	struct pcase t;

	(void)state;
	psetup(&t, 8, "\"cache_affinity_wait_ms\":100,"
	    "\"band_widen_interval_ms\":0");
	only_free(&t, 8);
	fx_assert_wait(pdecide(&t, 0), 100);
	assert_rank(&t, pdecide(&t, 100), 8, SG_PHASE_OPEN);
	pteardown(&t);
}

/* Bands grow k+2, k+6, k+14: with k=2 rank 5 opens with the second band. */
static void
test_band_widths_double(void **state)
{
	struct pcase t;

	(void)state;
	psetup(&t, 20, "\"cache_affinity_backend_selection_count\":2,"
	    "\"band_widen_interval_ms\":50");
	only_free(&t, 5);
	fx_assert_wait(pdecide(&t, 0), 50);	/* open 1..4 */
	assert_rank(&t, pdecide(&t, 50), 5, SG_PHASE_OPEN);
	only_free(&t, 16);			/* third band: 2+2+4+8 */
	fx_assert_wait(pdecide(&t, 50), 100);
	assert_rank(&t, pdecide(&t, 100), 16, SG_PHASE_OPEN);
	only_free(&t, 17);			/* fourth: 32, capped at 20 */
	fx_assert_wait(pdecide(&t, 100), 150);
	assert_rank(&t, pdecide(&t, 150), 17, SG_PHASE_OPEN);
	pteardown(&t);
}

/*
 * Shortcut removal (stargate(7)): no SLO fields, max_queued 0, rank 1 at
 * its concurrency limit, rank 2 free: the request is not sent to rank 1.
 */
static void
test_full_primary_without_slo_overflows_to_rank_2(void **state)
{
	struct pcase t;
	sg_decision d;

	(void)state;
	psetup(&t, 4, "");
	only_free(&t, 2);
	d = pdecide(&t, 0);
	assert_rank(&t, d, 2, SG_PHASE_OPEN);
	assert_int_not_equal(d.index, t.rank[0]);
	pteardown(&t);
}

/* Same setup, max_queued 4 and one request queued on rank 1: rank 1. */
static void
test_primary_with_queue_room_keeps_the_request(void **state)
{
	struct pcase t;

	(void)state;
	psetup(&t, 4, "\"max_queued\":4");
	only_free(&t, 2);
	fx_at(t.s, t.rank[0])->queued = 1;
	fx_at(t.s, t.rank[0])->queued_input_tokens = 100;
	assert_rank(&t, pdecide(&t, 0), 1, SG_PHASE_AFFINITY);
	/* past max_queued it overflows again */
	fx_at(t.s, t.rank[0])->running += 4;
	assert_rank(&t, pdecide(&t, 0), 2, SG_PHASE_OPEN);
	pteardown(&t);
}

/* Same setup, X = 300 and max_queued 0: a timed wait to 300, then widen. */
static void
test_full_primary_with_affinity_wait_waits_then_widens(void **state)
{
	struct pcase t;
	sg_decision d;

	(void)state;
	psetup(&t, 4, "\"cache_affinity_wait_ms\":300");
	only_free(&t, 2);
	d = pdecide(&t, 0);
	fx_assert_wait(d, 300);
	fx_assert_wait(pdecide(&t, 150), 300);
	assert_rank(&t, pdecide(&t, 300), 2, SG_PHASE_OPEN);
	pteardown(&t);
}

/* k = 2: rank 2 is an affinity member, selected in the affinity phase. */
static void
test_affinity_phase_covers_k_ranks(void **state)
{
	struct pcase t;

	(void)state;
	psetup(&t, 4, "\"cache_affinity_backend_selection_count\":2,"
	    "\"cache_affinity_wait_ms\":300");
	only_free(&t, 2);
	assert_rank(&t, pdecide(&t, 0), 2, SG_PHASE_AFFINITY);
	pteardown(&t);
}

/* KV checks: a KV-infeasible rank 1 is skipped and the selection says so. */
static void
test_kv_infeasible_primary_is_skipped_and_flagged(void **state)
{
	struct pcase t;
	sg_decision d;
	size_t i;

	(void)state;
	psetup(&t, 4, "\"consider_kv_free_tokens\":true");
	for (i = 0; i < 4; i++) {
		fx_at(t.s, i)->kv_capacity_tokens = 10000;
		fx_at(t.s, i)->kv_free_tokens = 5000;
	}
	assert_rank(&t, pdecide(&t, 0), 1, SG_PHASE_AFFINITY);
	assert_false(pdecide(&t, 0).kv_skip);
	/* fewer free tokens than the request */
	fx_at(t.s, t.rank[0])->kv_free_tokens = 99;
	d = pdecide(&t, 0);
	assert_rank(&t, d, 2, SG_PHASE_OPEN);
	assert_true(d.kv_skip);
	/* no KV stats at all is a KV skip too */
	fx_at(t.s, t.rank[0])->kv_capacity_tokens = 0;
	fx_at(t.s, t.rank[0])->kv_free_tokens = 0;
	d = pdecide(&t, 0);
	assert_rank(&t, d, 2, SG_PHASE_OPEN);
	assert_true(d.kv_skip);
	/* a request without input tokens passes no KV check */
	t.r.input_tokens = 0;
	fx_assert_reject(pdecide(&t, 0), 503);
	pteardown(&t);
}

/* A KV-infeasible primary acts as ineligible: wait X, then widen. */
static void
test_kv_infeasible_primary_waits_for_x(void **state)
{
	struct pcase t;
	sg_decision d;
	size_t i;

	(void)state;
	psetup(&t, 4, "\"consider_kv_free_tokens\":true,"
	    "\"cache_affinity_wait_ms\":300");
	for (i = 0; i < 4; i++) {
		fx_at(t.s, i)->kv_capacity_tokens = 10000;
		fx_at(t.s, i)->kv_free_tokens = 5000;
	}
	fx_at(t.s, t.rank[0])->kv_free_tokens = 10;
	fx_assert_wait(pdecide(&t, 0), 300);
	d = pdecide(&t, 300);
	assert_rank(&t, d, 2, SG_PHASE_OPEN);
	assert_true(d.kv_skip);
	pteardown(&t);
}

/* An excluded rank 1 is ineligible: no KV flag, X applies. */
static void
test_excluded_primary_is_ineligible(void **state)
{
	struct pcase t;
	const char *ex[1];
	sg_decision d;

	(void)state;
	psetup(&t, 4, "\"cache_affinity_wait_ms\":300");
	only_free(&t, 2);
	fx_free(t.s, t.rank[0]);	/* free, but excluded */
	ex[0] = sg_snapshot_get(t.s, t.rank[0])->id;
	t.r.excluded = ex;
	t.r.nexcluded = 1;
	fx_assert_wait(pdecide(&t, 0), 300);
	d = pdecide(&t, 300);
	assert_rank(&t, d, 2, SG_PHASE_OPEN);
	assert_false(d.kv_skip);
	pteardown(&t);
}

/* Clusters without a valid weight are not ranked and never selected. */
static void
test_unranked_clusters_are_never_selected(void **state)
{
	struct pcase t;
	size_t i;

	(void)state;
	psetup(&t, 3, "");
	for (i = 0; i < 3; i++)
		fx_at(t.s, i)->max_input_tps = 0;
	fx_assert_reject(pdecide(&t, 0), 503);
	fx_at(t.s, 1)->max_input_tps = 500;
	fx_assert_select(pdecide(&t, 0), 1);
	assert_int_equal(pdecide(&t, 0).rank_depth, 1);
	pteardown(&t);
}

/* The open set admits up to fallback_max_queued above the concurrency. */
static void
test_open_set_uses_fallback_max_queued(void **state)
{
	struct pcase t, u;

	(void)state;
	psetup(&t, 2, "");
	psetup(&u, 2, "\"fallback_max_queued\":1");
	fx_at(t.s, t.rank[0])->running = 5;	/* past both limits */
	fx_at(t.s, t.rank[1])->running = 4;	/* at its concurrency */
	fx_at(u.s, u.rank[0])->running = 5;
	fx_at(u.s, u.rank[1])->running = 4;
	fx_assert_reject(pdecide(&t, 0), 503);
	assert_rank(&u, pdecide(&u, 0), 2, SG_PHASE_OPEN);
	pteardown(&t);
	pteardown(&u);
}

/* No comparator: equal queue estimates are broken by utilisation. */
static void
test_queue_ties_break_on_utilisation(void **state)
{
	struct pcase t;
	char id[32];
	int i;

	(void)state;
	psetup(&t, 3, "");
	fx_full(t.s, t.rank[0]);
	fx_at(t.s, t.rank[1])->running = 3;
	fx_at(t.s, t.rank[2])->running = 1;
	for (i = 0; i < 16; i++) {
		snprintf(id, sizeof(id), "util-%d", i);
		t.r.request_id = id;
		assert_rank(&t, pdecide(&t, 0), 3, SG_PHASE_OPEN);
	}
	pteardown(&t);
}

/*
 * A returning session whose last cluster has the lowest rank, on a router
 * whose scratch holds exactly n candidates: the cached ranking is copied
 * with the promotion applied in place and never written past n entries
 * (the sanitizer build checks), and the decision equals the reference
 * path's, whichever cluster the hint names.
 */
static void
test_rotated_cached_ranking_stays_in_bounds(void **state)
{
	const char *text = "{\"models\":{\"m\":{\"algorithm\":"
	    "\"pulsar-wait-and-widen\",\"cache_affinity_backend_selection_count\":2,"
	    "\"last_cluster_affinity\":true}}}";
	sg_lbconf *conf = fx_conf(text);
	sg_snapshot *s = fx_snapshot(8);
	size_t h, k;

	(void)state;
	for (h = 0; h < 8; h++) {
		sg_router *rt = fx_router(conf, 42), *ref = fx_router(conf, 42);

		sgi_router_scratch(ref)->reference = true;
		for (k = 0; k < 4; k++) {	/* miss, store, then hits */
			sg_request a, b;
			sg_decision da, db;

			fx_req(&a, "r", "key", 10);
			a.last_cluster_id = sg_snapshot_get(s, h)->id;
			b = a;
			da = fx_decide(rt, s, &a, 0);
			db = fx_decide(ref, s, &b, 0);
			assert_int_equal(da.kind, db.kind);
			assert_int_equal(da.index, db.index);
			assert_int_equal(da.rank_depth, db.rank_depth);
			assert_int_equal(da.promoted, db.promoted);
			assert_int_equal(da.primary, db.primary);
		}
		sg_router_free(rt);
		sg_router_free(ref);
	}
	sg_snapshot_free(s);
	sg_lbconf_free(conf);
}

/*
 * Session rules cost at most 5% (issue 13): a cached ranking is copied
 * only as far as a phase reads it, rotated for a returning session
 * without searching for the last cluster first.  Property: with most
 * clusters full (so the open-set phase reads past the first k ranks) and
 * a hint naming each cluster in turn, on hits of the cache, the decision
 * (kind, cluster, depth, phase), promotion and selection equal the
 * reference path's.
 */
static void
test_lazy_rotated_ranking_open_set_like_reference(void **state)
{
	const char *text = "{\"models\":{\"m\":{\"algorithm\":"
	    "\"pulsar-wait-and-widen\",\"cache_affinity_backend_selection_count\":2,"
	    "\"last_cluster_affinity\":true}}}";
	static const size_t ns[] = { 2, 3, 8, 41 };
	sg_lbconf *conf = fx_conf(text);
	size_t in, h, k, i;

	(void)state;
	for (in = 0; in < sizeof(ns) / sizeof(ns[0]); in++) {
		size_t n = ns[in];
		sg_snapshot *s = fx_snapshot(n);

		for (i = 0; i < n; i++)
			if (i % 4 != 3)
				fx_full(s, i);
		for (h = 0; h < n; h++) {
			sg_router *rt = fx_router(conf, 42);
			sg_router *ref = fx_router(conf, 42);

			sgi_router_scratch(ref)->reference = true;
			for (k = 0; k < 5; k++) {	/* miss, store, hits */
				sg_request a, b;
				sg_decision da, db;

				fx_req(&a, "r", "key", 10);
				a.last_cluster_id = sg_snapshot_get(s, h)->id;
				a.last_cluster_id_len = strlen(a.last_cluster_id);
				b = a;
				da = fx_decide(rt, s, &a, 0);
				db = fx_decide(ref, s, &b, 0);
				assert_int_equal(da.kind, db.kind);
				assert_int_equal(da.index, db.index);
				assert_int_equal(da.rank_depth, db.rank_depth);
				assert_int_equal(da.phase, db.phase);
				assert_int_equal(da.promoted, db.promoted);
				assert_int_equal(da.primary, db.primary);
			}
			sg_router_free(rt);
			sg_router_free(ref);
		}
		sg_snapshot_free(s);
	}
	sg_lbconf_free(conf);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_worked_check_x300_rank4_at_600),
		cmocka_unit_test(test_worked_check_x100_s200_rank8_at_500),
		cmocka_unit_test(
		    test_band_interval_zero_opens_everything_after_x),
		cmocka_unit_test(test_band_widths_double),
		cmocka_unit_test(
		    test_full_primary_without_slo_overflows_to_rank_2),
		cmocka_unit_test(
		    test_primary_with_queue_room_keeps_the_request),
		cmocka_unit_test(
		    test_full_primary_with_affinity_wait_waits_then_widens),
		cmocka_unit_test(test_affinity_phase_covers_k_ranks),
		cmocka_unit_test(
		    test_kv_infeasible_primary_is_skipped_and_flagged),
		cmocka_unit_test(test_kv_infeasible_primary_waits_for_x),
		cmocka_unit_test(test_excluded_primary_is_ineligible),
		cmocka_unit_test(test_unranked_clusters_are_never_selected),
		cmocka_unit_test(test_open_set_uses_fallback_max_queued),
		cmocka_unit_test(test_queue_ties_break_on_utilisation),
		cmocka_unit_test(test_rotated_cached_ranking_stays_in_bounds),
		cmocka_unit_test(
		    test_lazy_rotated_ranking_open_set_like_reference),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
