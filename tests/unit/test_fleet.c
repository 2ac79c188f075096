/*
 * test_fleet.c — sg_fleet.c: the reservation ledger (sg-proxy(8)) and its
 * effect on the view a decision reads (numbers worked by hand), clearing
 * by publication (only the reservations a sample covers), release, and
 * staleness; the view's reuse of the snapshot and its ids version; the
 * cursor (sg_fleet_sync) against a fresh sg_fleet_view after every step of
 * random operations, with stats that go stale and with stats that never
 * do (the all-fresh path: the list changed in place, a cluster's stats
 * made unusable by a NaN sample time).
 */
#include "sg_test.h"

#include <math.h>

#include "sg_fleet.h"

static sg_fleet *
mkfleet(uint64_t stale_ms, size_t n)
{
	static const char *const ids[] = { "A", "B", "C", "D" };
	sg_fleet *f;
	size_t i, idx;

	assert_int_equal(sg_fleet_new(&f, stale_ms, NULL), 0);
	for (i = 0; i < n; i++) {
		assert_int_equal(sg_fleet_add(f, ids[i], 1, &idx, NULL), 0);
		assert_true(idx == i);
	}
	return f;
}

/* tps 1000, running 2 of 8, queued 1 (300 tokens), map {0:100, 5:40}. */
static sg_cluster
stats(void)
{
	sg_cluster c;

	assert_int_equal(sg_cluster_init(&c, "ignored", 7), 0);
	c.rtt_ms = 2;
	c.max_engine_concurrency = 8;
	c.running = 2;
	c.queued = 1;
	c.queued_input_tokens = 300;
	c.total_input_tokens = 9000;
	c.last_mean_input_tps = 1000;
	c.kv_capacity_tokens = 1000;
	sg_cluster_set_prio(&c, 0, 100);
	sg_cluster_set_prio(&c, 5, 40);
	return c;
}

static const sg_cluster *
view1(sg_fleet *f, sg_snapshot *s, size_t i, double now)
{
	size_t vi = 99;

	assert_int_equal(sg_fleet_view(f, &i, 1, now, s, &vi, NULL), 0);
	assert_int_equal(sg_snapshot_count(s), 1);
	assert_true(vi == i);
	return sg_snapshot_get(s, 0);
}

static void
test_add_rejects_bad_and_duplicate_ids(void **state)
{
	sg_fleet *f = mkfleet(1000, 2);
	sg_error e;

	(void)state;
	assert_int_equal(sg_fleet_add(f, "A", 1, NULL, &e), SG_EINVAL);
	assert_string_equal(e.text, "duplicate cluster id \"A\"");
	assert_int_equal(sg_fleet_add(f, "", 0, NULL, &e), SG_EINVAL);
	assert_int_equal(sg_fleet_count(f), 2);
	assert_int_equal(sg_fleet_find(f, "B", 1), 1);
	assert_int_equal(sg_fleet_find(f, "Z", 1), -1);
	assert_string_equal(sg_fleet_id(f, 1), "B");
	assert_null(sg_fleet_id(f, 2));
	sg_fleet_free(f);
}

static void
test_publish_keeps_fleet_id(void **state)
{
	sg_fleet *f = mkfleet(1000, 1);
	sg_snapshot *s = sg_snapshot_new();
	sg_cluster c = stats();
	const sg_cluster *v;

	(void)state;
	assert_null(sg_fleet_stats(f, 0));
	assert_int_equal(sg_fleet_publish(f, 0, &c, 10), 0);
	v = view1(f, s, 0, 10);
	assert_string_equal(v->id, "A");
	assert_true(v->id_len == 1);
	assert_true(v->running == 2);
	assert_string_equal(sg_fleet_stats(f, 0)->id, "A");
	assert_int_equal(sg_fleet_publish(f, 1, &c, 10), SG_EINVAL);
	sg_snapshot_free(s);
	sg_fleet_free(f);
}

static void
test_reservations_apply_to_the_view(void **state)
{
	/* Reserve 500 tokens at priority 3, then 200 at 0 (tps 1000):
	 * first: running 3, queued 2, queued tokens 800, total 9500; delta
	 * 500 ms: new entry 3 = estimate at 3 (key 0: 100) + 500 = 600,
	 * key 5: 540.  second: running 4, queued 3, 1000 tokens, total 9700;
	 * delta 200 ms at 0: key 0 300, 3 800, 5 740. */
	sg_fleet *f = mkfleet(1000, 1);
	sg_snapshot *s = sg_snapshot_new();
	sg_cluster c = stats();
	const sg_cluster *v;

	(void)state;
	sg_fleet_publish(f, 0, &c, 0);
	assert_true(sg_fleet_reserve(f, 0, 500, 3, 1) != 0);
	v = view1(f, s, 0, 2);
	assert_true(v->running == 3 && v->queued == 2);
	assert_true(v->queued_input_tokens == 800);
	assert_true(v->total_input_tokens == 9500);
	assert_int_equal(v->nprio, 3);
	assert_int_equal(v->prio_key[1], 3);
	assert_near(v->prio_ms[0], 100, 0);
	assert_near(v->prio_ms[1], 600, 0);
	assert_near(v->prio_ms[2], 540, 0);
	assert_true(sg_fleet_reserve(f, 0, 200, 0, 2) != 0);
	v = view1(f, s, 0, 3);
	assert_true(v->running == 4 && v->queued == 3);
	assert_true(v->queued_input_tokens == 1000);
	assert_true(v->total_input_tokens == 9700);
	assert_near(v->prio_ms[0], 300, 0);
	assert_near(v->prio_ms[1], 800, 0);
	assert_near(v->prio_ms[2], 740, 0);
	assert_int_equal(sg_fleet_reservations(f, 0), 2);
	/* the published stats themselves are untouched */
	assert_true(sg_fleet_stats(f, 0)->running == 2);
	sg_snapshot_free(s);
	sg_fleet_free(f);
}

static void
test_publication_clears_covered_only(void **state)
{
	/* Reservations at t=10, 20, 30; stats sampled at 20 (request sent
	 * then) cover the first two: the view is the new stats (running 5)
	 * plus the t=30 one (running 6, queued 2, 300+100 tokens). */
	sg_fleet *f = mkfleet(1000, 1);
	sg_snapshot *s = sg_snapshot_new();
	sg_cluster c = stats();
	const sg_cluster *v;
	uint64_t h1, h2, h3;

	(void)state;
	c.nprio = 0;
	sg_fleet_publish(f, 0, &c, 0);
	h1 = sg_fleet_reserve(f, 0, 100, 0, 10);
	h2 = sg_fleet_reserve(f, 0, 100, 0, 20);
	h3 = sg_fleet_reserve(f, 0, 100, 0, 30);
	assert_true(h1 != 0 && h2 > h1 && h3 > h2);
	assert_true(view1(f, s, 0, 30)->running == 5);
	c.running = 5;
	assert_int_equal(sg_fleet_publish(f, 0, &c, 20), 0);
	assert_int_equal(sg_fleet_reservations(f, 0), 1);
	v = view1(f, s, 0, 40);
	assert_true(v->running == 6 && v->queued == 2);
	assert_true(v->queued_input_tokens == 400);
	/* release after clear is a no-op; releasing h3 removes it */
	sg_fleet_release(f, 0, h1);
	sg_fleet_release(f, 0, h2);
	sg_fleet_release(f, 0, 0);
	assert_int_equal(sg_fleet_reservations(f, 0), 1);
	sg_fleet_release(f, 0, h3);
	assert_int_equal(sg_fleet_reservations(f, 0), 0);
	v = view1(f, s, 0, 40);
	assert_true(v->running == 5 && v->queued == 1);
	assert_true(v->queued_input_tokens == 300);
	sg_fleet_release(f, 0, h3);		/* twice: no-op */
	assert_true(view1(f, s, 0, 40)->running == 5);
	sg_snapshot_free(s);
	sg_fleet_free(f);
}

static void
test_release_recomputes_the_map(void **state)
{
	/* Two reservations of 500 at priority 3 (tps 1000): entry 3 = 100 +
	 * 500 + 500 = 1100; releasing the first leaves 600, key 5 540. */
	sg_fleet *f = mkfleet(1000, 1);
	sg_snapshot *s = sg_snapshot_new();
	sg_cluster c = stats();
	const sg_cluster *v;
	uint64_t h1;

	(void)state;
	sg_fleet_publish(f, 0, &c, 0);
	h1 = sg_fleet_reserve(f, 0, 500, 3, 1);
	sg_fleet_reserve(f, 0, 500, 3, 2);
	v = view1(f, s, 0, 3);
	assert_near(v->prio_ms[1], 1100, 0);
	assert_near(v->prio_ms[2], 1040, 0);
	sg_fleet_release(f, 0, h1);
	v = view1(f, s, 0, 3);
	assert_true(v->running == 3);
	assert_near(v->prio_ms[1], 600, 0);
	assert_near(v->prio_ms[2], 540, 0);
	sg_snapshot_free(s);
	sg_fleet_free(f);
}

static void
test_older_sample_is_ignored(void **state)
{
	sg_fleet *f = mkfleet(1000, 1);
	sg_cluster c = stats();

	(void)state;
	sg_fleet_publish(f, 0, &c, 100);
	sg_fleet_reserve(f, 0, 1, 0, 50);
	c.running = 7;
	assert_int_equal(sg_fleet_publish(f, 0, &c, 60), 0);
	assert_true(sg_fleet_stats(f, 0)->running == 2);
	assert_near(sg_fleet_age_ms(f, 0, 150), 50, 0);
	sg_fleet_free(f);
}

static void
test_stale_clusters_are_left_out(void **state)
{
	/* stale_ms 100: A sampled at 0, B at 50, C never, D at 90.  At 120:
	 * A is 120 old (stale), B 70, D 30: the view is B, D. */
	sg_fleet *f = mkfleet(100, 4);
	sg_snapshot *s = sg_snapshot_new();
	sg_cluster c = stats();
	size_t idx[] = { 0, 1, 2, 3 }, vi[4];

	(void)state;
	sg_fleet_publish(f, 0, &c, 0);
	sg_fleet_publish(f, 1, &c, 50);
	sg_fleet_publish(f, 3, &c, 90);
	assert_true(isinf(sg_fleet_age_ms(f, 2, 120)));
	assert_false(sg_fleet_fresh(f, 2, 120));
	assert_true(sg_fleet_fresh(f, 0, 100));		/* exactly stale_ms */
	assert_false(sg_fleet_fresh(f, 0, 120));
	assert_int_equal(sg_fleet_view(f, idx, 4, 120, s, vi, NULL), 0);
	assert_int_equal(sg_snapshot_count(s), 2);
	assert_string_equal(sg_snapshot_get(s, 0)->id, "B");
	assert_string_equal(sg_snapshot_get(s, 1)->id, "D");
	assert_true(vi[0] == 1 && vi[1] == 3);
	/* a longer staleness brings A back */
	sg_fleet_set_stale_ms(f, 1000);
	assert_int_equal(sg_fleet_view(f, idx, 4, 120, s, vi, NULL), 0);
	assert_int_equal(sg_snapshot_count(s), 3);
	assert_true(vi[0] == 0 && vi[1] == 1 && vi[2] == 3);
	/* UINT64_MAX: never stale once published */
	sg_fleet_set_stale_ms(f, UINT64_MAX);
	assert_true(sg_fleet_fresh(f, 0, 1e15));
	assert_false(sg_fleet_fresh(f, 2, 1e15));
	sg_snapshot_free(s);
	sg_fleet_free(f);
}

static void
test_view_reuses_out_and_keeps_ids_version(void **state)
{
	sg_fleet *f = mkfleet(1000, 3);
	sg_snapshot *s = sg_snapshot_new();
	sg_cluster c = stats();
	size_t abc[] = { 0, 1, 2 }, cba[] = { 2, 1, 0 }, bad[] = { 0, 3 };
	size_t twice[] = { 1, 1 };
	uint64_t v1;
	sg_error e;

	(void)state;
	sg_fleet_publish(f, 0, &c, 0);
	sg_fleet_publish(f, 1, &c, 0);
	sg_fleet_publish(f, 2, &c, 0);
	assert_int_equal(sg_fleet_view(f, abc, 3, 1, s, NULL, NULL), 0);
	v1 = sg_snapshot_ids_version(s);
	sg_fleet_reserve(f, 1, 10, 0, 1);
	assert_int_equal(sg_fleet_view(f, abc, 3, 2, s, NULL, NULL), 0);
	assert_true(sg_snapshot_ids_version(s) == v1);
	assert_true(sg_snapshot_get(s, 1)->running == 3);
	assert_int_equal(sg_fleet_view(f, cba, 3, 2, s, NULL, NULL), 0);
	assert_true(sg_snapshot_ids_version(s) != v1);
	assert_string_equal(sg_snapshot_get(s, 0)->id, "C");
	assert_true(sg_snapshot_get(s, 1)->running == 3);
	assert_int_equal(sg_fleet_view(f, abc, 3, 2, s, NULL, NULL), 0);
	assert_true(sg_snapshot_ids_version(s) == v1);
	assert_int_equal(sg_fleet_view(f, bad, 2, 2, s, NULL, &e), SG_EINVAL);
	assert_string_equal(e.text, "fleet view: index 3 out of range");
	assert_int_equal(sg_fleet_view(f, twice, 2, 2, s, NULL, &e),
	    SG_EINVAL);
	assert_string_equal(e.text, "fleet view: cluster B listed twice");
	/* an empty candidate list is an empty view */
	assert_int_equal(sg_fleet_view(f, abc, 0, 2, s, NULL, NULL), 0);
	assert_int_equal(sg_snapshot_count(s), 0);
	sg_snapshot_free(s);
	sg_fleet_free(f);
}

static void
test_reservations_before_first_stats(void **state)
{
	sg_fleet *f = mkfleet(1000, 1);
	sg_snapshot *s = sg_snapshot_new();
	sg_cluster c = stats();

	(void)state;
	assert_true(sg_fleet_reserve(f, 0, 10, 0, 5) != 0);
	assert_true(sg_fleet_reserve(f, 9, 10, 0, 5) == 0);
	sg_fleet_publish(f, 0, &c, 4);
	assert_int_equal(sg_fleet_reservations(f, 0), 1);
	assert_true(view1(f, s, 0, 6)->running == 3);
	sg_snapshot_free(s);
	sg_fleet_free(f);
}

static void
test_many_reservations(void **state)
{
	sg_fleet *f = mkfleet(1000, 2);
	sg_snapshot *s = sg_snapshot_new();
	sg_cluster c = stats();
	uint64_t h[1000];
	size_t i;

	(void)state;
	c.nprio = 0;
	sg_fleet_publish(f, 1, &c, 0);
	for (i = 0; i < 1000; i++)
		assert_true((h[i] = sg_fleet_reserve(f, 1, 1, 0,
		    (double)i)) != 0);
	assert_true(view1(f, s, 1, 1000)->running == 1002);
	for (i = 0; i < 1000; i += 2)
		sg_fleet_release(f, 1, h[i]);
	assert_int_equal(sg_fleet_reservations(f, 1), 500);
	assert_true(view1(f, s, 1, 1000)->queued_input_tokens == 800);
	sg_fleet_publish(f, 1, &c, 499);	/* covers h[1..499] odd: 250 */
	assert_int_equal(sg_fleet_reservations(f, 1), 250);
	assert_int_equal(sg_fleet_reservations(f, 0), 0);
	sg_snapshot_free(s);
	sg_fleet_free(f);
}

/* Same clusters, ids and load figures (the used part of the map). */
static void
assert_same_view(const sg_snapshot *a, const sg_snapshot *b)
{
	size_t i, k;

	assert_int_equal(sg_snapshot_count(a), sg_snapshot_count(b));
	for (i = 0; i < sg_snapshot_count(a); i++) {
		const sg_cluster *x = sg_snapshot_get(a, i);
		const sg_cluster *y = sg_snapshot_get(b, i);

		assert_string_equal(x->id, y->id);
		assert_true(x->running == y->running);
		assert_true(x->queued == y->queued);
		assert_true(x->queued_input_tokens == y->queued_input_tokens);
		assert_true(x->max_engine_concurrency ==
		    y->max_engine_concurrency);
		assert_true(x->kv_free_tokens == y->kv_free_tokens);
		assert_true(x->last_mean_input_tps == y->last_mean_input_tps);
		assert_int_equal(x->nprio, y->nprio);
		for (k = 0; k < x->nprio; k++) {
			assert_int_equal(x->prio_key[k], y->prio_key[k]);
			assert_true(x->prio_ms[k] == y->prio_ms[k]);
		}
	}
}

static void
test_cursor_equals_a_fresh_view(void **state)
{
	sg_fleet *f = mkfleet(50, 4);
	sg_fleet_cursor *cur;
	sg_snapshot *ref = sg_snapshot_new();
	const sg_snapshot *v;
	const size_t *vi;
	size_t lists[3][4] = { { 0, 1, 2, 3 }, { 2, 0, 3, 1 }, { 1, 3 } };
	size_t nlist[3] = { 4, 4, 2 }, refvi[4], i;
	uint64_t h[4][64] = { { 0 } }, g = 7;
	size_t nh[4] = { 0 };
	double now = 0;
	int step;

	(void)state;
	assert_int_equal(sg_fleet_cursor_new(f, &cur, NULL), 0);
	for (step = 0; step < 3000; step++) {
		sg_cluster c = stats();
		size_t l = (step / 200) % 3, k;

		g = g * 6364136223846793005ULL + 1442695040888963407ULL;
		k = (size_t)(g >> 33) % 4;
		now += (double)((g >> 20) % 7);
		switch ((g >> 40) % 4) {
		case 0:
			c.running = (g >> 8) % 9;
			c.nprio = (uint32_t)((g >> 12) % 3);
			sg_fleet_publish(f, k, &c, now - (double)((g >> 16) %
			    30));
			nh[k] = 0;
			break;
		case 1:
		case 2:
			if (nh[k] < 64)
				h[k][nh[k]++] = sg_fleet_reserve(f, k,
				    (g >> 4) % 500, (uint32_t)((g >> 14) % 6),
				    now);
			break;
		default:
			if (nh[k] > 0)
				sg_fleet_release(f, k, h[k][--nh[k]]);
			break;
		}
		assert_int_equal(sg_fleet_sync(f, lists[l], nlist[l], now, cur,
		    &v, &vi, NULL), 0);
		assert_int_equal(sg_fleet_view(f, lists[l], nlist[l], now,
		    ref, refvi, NULL), 0);
		assert_same_view(v, ref);
		for (i = 0; i < sg_snapshot_count(v); i++)
			assert_true(vi[i] == refvi[i]);
	}
	sg_fleet_cursor_free(cur);
	sg_snapshot_free(ref);
	sg_fleet_free(f);
}

/*
 * A fleet whose stats never go stale, every cluster published (sg-sim's):
 * the cursor's all-fresh path.  The candidate list is one array changed in
 * place (as sg-sim rewrites its lists on a drain), and now and then a
 * publication with a NaN sample time makes a cluster not fresh, so the
 * path must step aside; after every step the cursor equals a fresh view.
 */
static void
test_cursor_all_fresh_equals_a_fresh_view(void **state)
{
	sg_fleet *f = mkfleet(UINT64_MAX, 4);
	sg_fleet_cursor *cur;
	sg_snapshot *ref = sg_snapshot_new();
	const sg_snapshot *v;
	const size_t *vi;
	static const size_t lists[3][4] = { { 0, 1, 2, 3 }, { 0, 2, 3 },
	    { 3, 1 } };
	static const size_t nlist[3] = { 4, 3, 2 };
	size_t list[4], n = 4, refvi[4], i, nan_seen = 0;
	uint64_t h[4][64] = { { 0 } }, g = 11;
	size_t nh[4] = { 0 };
	double now = 0;
	int step;

	(void)state;
	assert_int_equal(sg_fleet_cursor_new(f, &cur, NULL), 0);
	for (i = 0; i < 4; i++) {
		sg_cluster c = stats();

		assert_int_equal(sg_fleet_publish(f, i, &c, 0), 0);
		list[i] = i;
	}
	for (step = 0; step < 3000; step++) {
		sg_cluster c = stats();
		size_t k;

		g = g * 6364136223846793005ULL + 1442695040888963407ULL;
		k = (size_t)(g >> 33) % 4;
		now += (double)((g >> 20) % 7);
		if (step % 250 == 0) {		/* the same array, new list */
			size_t l = (size_t)(step / 250) % 3;

			n = nlist[l];
			memcpy(list, lists[l], n * sizeof(*list));
		}
		switch ((g >> 40) % 5) {
		case 0:
			c.running = (g >> 8) % 9;
			c.nprio = (uint32_t)((g >> 12) % 3);
			sg_fleet_publish(f, k, &c, (g >> 50) % 40 == 0 ? NAN :
			    now - (double)((g >> 16) % 30));
			nh[k] = 0;
			break;
		case 1:
		case 2:
			if (nh[k] < 64)
				h[k][nh[k]++] = sg_fleet_reserve(f, k,
				    (g >> 4) % 500, (uint32_t)((g >> 14) % 6),
				    now);
			break;
		default:
			if (nh[k] > 0)
				sg_fleet_release(f, k, h[k][--nh[k]]);
			break;
		}
		assert_int_equal(sg_fleet_sync(f, list, n, now, cur, &v, &vi,
		    NULL), 0);
		assert_int_equal(sg_fleet_view(f, list, n, now, ref, refvi,
		    NULL), 0);
		assert_same_view(v, ref);
		for (i = 0; i < sg_snapshot_count(v); i++)
			assert_true(vi[i] == refvi[i]);
		nan_seen += sg_snapshot_count(v) < n;
	}
	assert_true(nan_seen > 0);	/* the path was left at times */
	sg_fleet_cursor_free(cur);
	sg_snapshot_free(ref);
	sg_fleet_free(f);
}

static void
test_cursor_keeps_ids_version_and_refuses_another_fleet(void **state)
{
	sg_fleet *f = mkfleet(UINT64_MAX, 3), *other = mkfleet(UINT64_MAX, 3);
	sg_fleet_cursor *cur;
	const sg_snapshot *v;
	sg_cluster c = stats();
	size_t abc[3] = { 0, 1, 2 }, twice[2] = { 1, 1 }, bad[1] = { 7 };
	uint64_t ver;
	sg_error e;

	(void)state;
	assert_int_equal(sg_fleet_cursor_new(f, &cur, NULL), 0);
	sg_fleet_publish(f, 0, &c, 0);
	sg_fleet_publish(f, 2, &c, 0);
	assert_int_equal(sg_fleet_sync(f, abc, 3, 1, cur, &v, NULL, NULL), 0);
	assert_int_equal(sg_snapshot_count(v), 2);	/* B never published */
	ver = sg_snapshot_ids_version(v);
	sg_fleet_reserve(f, 2, 10, 0, 1);
	assert_int_equal(sg_fleet_sync(f, abc, 3, 2, cur, &v, NULL, NULL), 0);
	assert_true(sg_snapshot_ids_version(v) == ver);
	assert_true(sg_snapshot_get(v, 1)->running == 3);
	assert_true(sg_snapshot_get(v, 0)->running == 2);
	sg_fleet_publish(f, 1, &c, 2);			/* B joins */
	assert_int_equal(sg_fleet_sync(f, abc, 3, 3, cur, &v, NULL, NULL), 0);
	assert_int_equal(sg_snapshot_count(v), 3);
	assert_true(sg_snapshot_ids_version(v) != ver);
	assert_int_equal(sg_fleet_sync(other, abc, 3, 3, cur, &v, NULL, &e),
	    SG_EINVAL);
	assert_int_equal(sg_fleet_sync(f, bad, 1, 3, cur, &v, NULL, &e),
	    SG_EINVAL);
	assert_int_equal(sg_fleet_sync(f, twice, 2, 3, cur, &v, NULL, &e),
	    SG_EINVAL);
	/* Usable again after an error. */
	assert_int_equal(sg_fleet_sync(f, abc, 3, 3, cur, &v, NULL, NULL), 0);
	assert_int_equal(sg_snapshot_count(v), 3);
	sg_fleet_cursor_free(cur);
	sg_fleet_cursor_free(NULL);
	sg_fleet_free(other);
	sg_fleet_free(f);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_add_rejects_bad_and_duplicate_ids),
		cmocka_unit_test(test_publish_keeps_fleet_id),
		cmocka_unit_test(test_reservations_apply_to_the_view),
		cmocka_unit_test(test_publication_clears_covered_only),
		cmocka_unit_test(test_release_recomputes_the_map),
		cmocka_unit_test(test_older_sample_is_ignored),
		cmocka_unit_test(test_stale_clusters_are_left_out),
		cmocka_unit_test(test_view_reuses_out_and_keeps_ids_version),
		cmocka_unit_test(test_reservations_before_first_stats),
		cmocka_unit_test(test_many_reservations),
		cmocka_unit_test(test_cursor_equals_a_fresh_view),
		cmocka_unit_test(test_cursor_all_fresh_equals_a_fresh_view),
		cmocka_unit_test(
		    test_cursor_keeps_ids_version_and_refuses_another_fleet),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
