/*
 * test_oracle.c — tools/common/oracle.c, the perfect-knowledge scorer of
 * sg-sim, on hand-computed cases: the TTFT estimate, the capacity rule, the
 * choice and its tie-breaks under both objectives; and the engine's
 * read-only cache probe (eng_cached_prefix) that feeds it.
 */
#include "sg_test.h"

#include <math.h>

#include "common/engine.h"
#include "common/oracle.h"

static orc_cand
cand(uint64_t cached, uint64_t backlog, double tps, double rtt,
    uint64_t running, uint64_t slots)
{
	orc_cand c;

	memset(&c, 0, sizeof(c));
	c.eligible = true;
	c.cached = cached;
	c.backlog = backlog;
	c.tps = tps;
	c.rtt_ms = rtt;
	c.running = running;
	c.slots = slots;
	return c;
}

static void
test_estimate_is_rtt_wait_and_uncached_prefill(void **state)
{
	orc_cand c = cand(3000, 1000, 20000, 2, 1, 8);

	(void)state;
	/* (1000 backlog + 5000 - 3000 uncached) / 20000 tok/s = 150 ms. */
	assert_near(orc_ttft_ms(&c, 5000), 152, 1e-9);
	c.slot_wait_ms = 40;
	assert_near(orc_ttft_ms(&c, 5000), 192, 1e-9);
	/* The cached prefix counts up to the prompt only. */
	c = cand(9000, 0, 10000, 0, 0, 8);
	assert_near(orc_ttft_ms(&c, 5000), 0, 1e-9);
	c.slot_wait_ms = -5;			/* never negative */
	assert_near(orc_ttft_ms(&c, 5000), 0, 1e-9);
}

static void
test_capacity_is_slots_plus_max_queued(void **state)
{
	orc_cand c = cand(0, 0, 1, 0, 9, 8);

	(void)state;
	assert_false(orc_has_capacity(&c, 0));
	assert_false(orc_has_capacity(&c, 1));
	assert_true(orc_has_capacity(&c, 2));
	c.running = 7;
	assert_true(orc_has_capacity(&c, 0));
	c.slots = 0;				/* unknown: no limit */
	c.running = 1000;
	assert_true(orc_has_capacity(&c, 0));
	c.slots = UINT64_MAX;			/* saturating sum */
	assert_true(orc_has_capacity(&c, 5));
}

static void
test_pick_lowest_estimate(void **state)
{
	orc_cand c[3];
	double t;

	(void)state;
	/* A: 4000 cached of 5000, 8000 backlog: (8000 + 1000) / 20000 =
	 * 450 ms.  B: nothing cached, idle: 5000 / 20000 = 250 ms.
	 * C: 2000 cached, 2000 backlog: 5000 / 20000 = 250 ms, rtt 1. */
	c[0] = cand(4000, 8000, 20000, 0, 4, 8);
	c[1] = cand(0, 0, 20000, 0, 0, 8);
	c[2] = cand(2000, 2000, 20000, 1, 2, 8);
	assert_int_equal(orc_pick(c, 3, 5000, 0, ORC_TTFT_FIRST, &t), 1);
	assert_near(t, 250, 1e-9);
	/* KV first: A holds the most. */
	assert_int_equal(orc_pick(c, 3, 5000, 0, ORC_KV_FIRST, &t), 0);
	assert_near(t, 450, 1e-9);
	/* Without rtt, B and C tie at 250 ms: the larger cache wins. */
	c[2].rtt_ms = 0;
	assert_int_equal(orc_pick(c, 3, 5000, 0, ORC_TTFT_FIRST, &t), 2);
	/* Full tie: the lower index. */
	c[2].cached = 0;
	c[2].backlog = 0;
	assert_int_equal(orc_pick(c, 3, 5000, 0, ORC_TTFT_FIRST, NULL), 1);
	/* KV first with equal caches: the estimate decides. */
	c[0].cached = 0;
	assert_int_equal(orc_pick(c, 3, 5000, 0, ORC_KV_FIRST, NULL), 1);
}

static void
test_pick_honours_capacity_and_eligibility(void **state)
{
	orc_cand c[2];
	double t = -1;

	(void)state;
	c[0] = cand(5000, 0, 20000, 0, 8, 8);	/* all slots busy */
	c[1] = cand(0, 0, 20000, 0, 0, 8);
	assert_int_equal(orc_pick(c, 2, 5000, 0, ORC_KV_FIRST, NULL), 1);
	/* max_queued 1 lets the cached cluster take one more. */
	assert_int_equal(orc_pick(c, 2, 5000, 1, ORC_KV_FIRST, NULL), 0);
	c[0].slot_wait_ms = 300;		/* 300 > 250: TTFT goes to B */
	assert_int_equal(orc_pick(c, 2, 5000, 1, ORC_TTFT_FIRST, NULL), 1);
	c[1].eligible = false;
	assert_int_equal(orc_pick(c, 2, 5000, 0, ORC_TTFT_FIRST, &t), -1);
	assert_near(t, 0, 0);
	assert_int_equal(orc_pick(c, 0, 5000, 0, ORC_TTFT_FIRST, NULL), -1);
}

static void
test_kv_first_ties_prefer_a_free_slot_then_room(void **state)
{
	orc_cand c[3];

	(void)state;
	/* Nothing cached anywhere (a new session).  A: idle, 10000 free;
	 * B: idle, 200000 free but a longer queue; C: all slots busy,
	 * 400000 free. */
	c[0] = cand(0, 0, 20000, 0, 0, 8);
	c[0].kv_free = 10000;
	c[1] = cand(0, 6000, 20000, 0, 3, 8);
	c[1].kv_free = 200000;
	c[2] = cand(0, 0, 20000, 0, 8, 8);
	c[2].kv_free = 400000;
	/* C has no free slot (capacity under max_queued 2 is fine): B. */
	assert_int_equal(orc_pick(c, 3, 1000, 2, ORC_KV_FIRST, NULL), 1);
	/* TTFT first: A, the shortest queue. */
	assert_int_equal(orc_pick(c, 3, 1000, 2, ORC_TTFT_FIRST, NULL), 0);
	/* Free space within one 16384-token bucket is a tie: the
	 * estimate decides (A). */
	c[1].kv_free = 12000;
	assert_int_equal(orc_pick(c, 3, 1000, 2, ORC_KV_FIRST, NULL), 0);
	/* Any cached prefix beats room. */
	c[2].cached = 1;
	assert_int_equal(orc_pick(c, 3, 1000, 2, ORC_KV_FIRST, NULL), 2);
}

/* A free slot outranks any amount of room, the largest free-token counts
 * included (the two keys share one word: the slot above every bucket),
 * and room still orders clusters alike in slots, in orc_pick and in
 * orc_pick_most's two answers. */
static void
test_kv_first_a_free_slot_beats_any_room(void **state)
{
	orc_cand c[3];
	long most;

	(void)state;
	c[0] = cand(0, 0, 20000, 0, 8, 8);	/* full, all the room there is */
	c[0].kv_free = UINT64_MAX;
	c[1] = cand(0, 0, 20000, 5, 7, 8);	/* a slot, no room, slower */
	c[1].kv_free = 0;
	c[2] = cand(0, 0, 20000, 9, 7, 8);	/* a slot, one bucket */
	c[2].kv_free = 16384;
	assert_int_equal(orc_pick(c, 3, 1000, 2, ORC_KV_FIRST, NULL), 2);
	assert_int_equal(orc_pick_most(c, 3, 1000, 2, ORC_KV_FIRST, &most),
	    2);
	assert_int_equal(most, 2);
	c[2].kv_free = 16383;			/* bucket 0: the estimate */
	assert_int_equal(orc_pick(c, 3, 1000, 2, ORC_KV_FIRST, NULL), 1);
	c[1].running = c[2].running = 8;	/* no slot anywhere: room */
	assert_int_equal(orc_pick(c, 3, 1000, 2, ORC_KV_FIRST, NULL), 0);
	/* A over capacity: the best is B (B and C alike in slots and
	 * room, B the faster), the most A, whatever its load. */
	c[0].running = 10;
	assert_int_equal(orc_pick_most(c, 3, 1000, 1, ORC_KV_FIRST, &most),
	    1);
	assert_int_equal(most, 0);
}

/* A small deterministic generator for the randomised cases. */
static uint64_t
lcg(uint64_t *x)
{
	*x = *x * 6364136223846793005ULL + 1442695040888963407ULL;
	return *x >> 33;
}

/* sg-sim's perfect row picks both clusters in one pass: the same answers
 * as the two orc_pick calls it replaces, ties included (small value
 * ranges make ties on every key common). */
static void
test_pick_most_equals_two_picks(void **state)
{
	orc_cand c[12];
	uint64_t x = 7;
	int round, obj;

	(void)state;
	for (round = 0; round < 20000; round++) {
		size_t n = 1 + lcg(&x) % 12, i;
		uint64_t input = 1 + lcg(&x) % 4, mq = lcg(&x) % 3;
		long best, most;

		for (i = 0; i < n; i++) {
			c[i] = cand(lcg(&x) % 4, lcg(&x) % 3, 1000, (double)(
			    lcg(&x) % 2), lcg(&x) % 6, lcg(&x) % 5);
			c[i].kv_free = (lcg(&x) % 3) * 16384;
			c[i].eligible = lcg(&x) % 8 != 0;
			c[i].slot_wait_ms = (double)(lcg(&x) % 2);
		}
		for (obj = ORC_TTFT_FIRST; obj <= ORC_KV_FIRST; obj++) {
			best = orc_pick_most(c, n, input, mq, obj, &most);
			assert_int_equal(best, orc_pick(c, n, input, mq, obj,
			    NULL));
			assert_int_equal(most, orc_pick(c, n, input,
			    UINT64_MAX, ORC_KV_FIRST, NULL));
		}
	}
	/* Hand case: A holds the most but is full; B has room. */
	c[0] = cand(5000, 0, 20000, 0, 8, 8);
	c[1] = cand(0, 0, 20000, 0, 0, 8);
	{
		long most;

		assert_int_equal(orc_pick_most(c, 2, 5000, 0, ORC_KV_FIRST,
		    &most), 1);
		assert_int_equal(most, 0);
		c[0].eligible = c[1].eligible = false;
		assert_int_equal(orc_pick_most(c, 2, 5000, 0, ORC_KV_FIRST,
		    &most), -1);
		assert_int_equal(most, -1);
	}
}

/* KV first from the clusters that may hold the prompt (orc_pick_held):
 * whenever it says the subset settles the choice, the choice and the most
 * are the full set's; otherwise the full set's best holds none, and a most
 * holding some is the full set's.  Both outcomes occur. */
static void
test_kv_first_held_subset_settles_the_full_choice(void **state)
{
	orc_cand c[12], h[12];
	uint64_t x = 11;
	size_t settled = 0, open = 0;
	int round;

	(void)state;
	for (round = 0; round < 20000; round++) {
		size_t n = 1 + lcg(&x) % 12, nh = 0, i, map[12];
		uint64_t input = 1 + lcg(&x) % 4, mq = lcg(&x) % 3;
		long best, most, fbest, fmost;

		for (i = 0; i < n; i++) {
			bool holder = lcg(&x) % 3 == 0;

			c[i] = cand(holder ? lcg(&x) % 4 : 0, lcg(&x) % 3,
			    1000, (double)(lcg(&x) % 2), lcg(&x) % 6,
			    lcg(&x) % 5);
			c[i].kv_free = (lcg(&x) % 3) * 16384;
			c[i].eligible = lcg(&x) % 8 != 0;
			c[i].slot_wait_ms = (double)(lcg(&x) % 2);
			/* Every holder is in the subset, some others too. */
			if (c[i].cached > 0 || lcg(&x) % 4 == 0) {
				h[nh] = c[i];
				map[nh++] = i;
			}
		}
		fbest = orc_pick_most(c, n, input, mq, ORC_KV_FIRST, &fmost);
		if (orc_pick_held(h, nh, input, mq, &best, &most)) {
			settled++;
			assert_true(best >= 0 && most >= 0);
			assert_int_equal((long)map[best], fbest);
			assert_int_equal((long)map[most], fmost);
			continue;
		}
		open++;
		assert_true(fbest < 0 || c[fbest].cached == 0);
		if (most >= 0 && h[most].cached > 0)
			assert_int_equal((long)map[most], fmost);
	}
	assert_true(settled > 1000 && open > 1000);
}

/* The order of oracle.h written out plainly: does x beat y? */
static bool
ref_better(int obj, const orc_cand *x, const orc_cand *y, uint64_t input)
{
	uint64_t cx = x->cached < input ? x->cached : input;
	uint64_t cy = y->cached < input ? y->cached : input;
	bool ix = x->slots == 0 || x->running < x->slots;
	bool iy = y->slots == 0 || y->running < y->slots;
	double tx = orc_ttft_ms(x, input), ty = orc_ttft_ms(y, input);

	if (obj == ORC_KV_FIRST) {
		if (cx != cy)
			return cx > cy;
		if (ix != iy)
			return ix;
		if (x->kv_free / 16384 != y->kv_free / 16384)
			return x->kv_free / 16384 > y->kv_free / 16384;
	}
	if (tx != ty)
		return tx < ty;
	if (cx != cy)
		return cx > cy;
	if (x->running != y->running)
		return x->running < y->running;
	return x->kv_free > y->kv_free;
}

/* The one-pass choice (keys computed once, the best kept by pointer) is the
 * first candidate no later one beats, under both objectives, with free
 * tokens inside and across buckets. */
static void
test_pick_matches_the_documented_order(void **state)
{
	orc_cand c[16];
	uint64_t x = 11;
	int round, obj;

	(void)state;
	for (round = 0; round < 20000; round++) {
		size_t n = 1 + lcg(&x) % 16, i;
		uint64_t input = 1 + lcg(&x) % 4, mq = lcg(&x) % 3;
		long want, most;

		for (i = 0; i < n; i++) {
			c[i] = cand(lcg(&x) % 4, lcg(&x) % 3, 1000, (double)(
			    lcg(&x) % 2), lcg(&x) % 6, lcg(&x) % 5);
			c[i].kv_free = (lcg(&x) % 3) * 16384 + lcg(&x) % 3 *
			    8000;
			c[i].eligible = lcg(&x) % 8 != 0;
		}
		for (obj = ORC_TTFT_FIRST; obj <= ORC_KV_FIRST; obj++) {
			want = -1;
			for (i = 0; i < n; i++)
				if (c[i].eligible &&
				    orc_has_capacity(&c[i], mq) && (want < 0 ||
				    ref_better(obj, &c[i], &c[want], input)))
					want = (long)i;
			assert_int_equal(orc_pick(c, n, input, mq, obj, NULL),
			    want);
			assert_int_equal(orc_pick_most(c, n, input, mq, obj,
			    &most), want);
		}
	}
}

/* The oracle's load read (eng_load_get) gives eng_cluster's numbers, in
 * the middle of a prefill too (both models). */
static void
test_engine_load_equals_cluster_fields(void **state)
{
	eng_config cfg;
	eng_req r;
	eng_load l;
	sg_cluster c;
	eng *e;
	uint32_t h;
	int model, k;

	(void)state;
	for (model = 0; model < 2; model++) {
		eng_config_default(&cfg);
		cfg.slots = 2;
		cfg.prefill_tps = 1000;
		cfg.decode_tps = 100;
		cfg.step_model = model == 1;
		cfg.kv_capacity_tokens = 5000;
		assert_int_equal(eng_new(&e, &cfg, NULL, NULL, NULL), 0);
		memset(&r, 0, sizeof(r));
		for (k = 0; k < 4; k++) {
			r.key = 100 + (uint64_t)k;
			r.input_tokens = 300 + 100 * (uint64_t)k;
			r.output_tokens = 20;
			assert_int_equal(eng_submit(e, 0, &r, &h), 0);
		}
		for (k = 0; k < 8; k++) {
			double t = 37.5 * k;

			eng_advance(e, t);
			memset(&c, 0, sizeof(c));
			eng_cluster(e, t, &c);
			eng_load_get(e, t, &l);
			assert_int_equal(l.backlog, c.queued_input_tokens);
			assert_near(l.tps, c.max_input_tps, 0);
			assert_int_equal(l.running, c.running);
			assert_int_equal(l.slots, c.max_engine_concurrency);
			assert_int_equal(l.kv_free, c.kv_free_tokens);
		}
		eng_free(e);
	}
}

/* The probe: what the engine would reuse now, and nothing changes. */
static void
test_engine_probe_reads_the_cache_without_changing_it(void **state)
{
	eng_config cfg;
	eng_req r;
	eng *e;
	uint32_t h;
	eng_counters before;

	(void)state;
	eng_config_default(&cfg);
	cfg.prefill_tps = 1000;
	cfg.decode_tps = 1000;
	assert_int_equal(eng_new(&e, &cfg, NULL, NULL, NULL), 0);
	memset(&r, 0, sizeof(r));
	r.key = 42;
	r.input_tokens = 100;
	r.output_tokens = 10;
	assert_int_equal(eng_cached_prefix(e, &r), 0);
	assert_int_equal(eng_submit(e, 0, &r, &h), 0);
	eng_advance(e, 1000);			/* 100 ms prefill, 9 ms decode */
	before = *eng_counters_get(e);
	/* Prompt and answer are cached: 110 tokens, clamped to the prompt. */
	r.input_tokens = 500;
	assert_int_equal(eng_cached_prefix(e, &r), 110);
	r.input_tokens = 50;
	assert_int_equal(eng_cached_prefix(e, &r), 50);
	r.key = 43;
	assert_int_equal(eng_cached_prefix(e, &r), 0);
	assert_memory_equal(&before, eng_counters_get(e), sizeof(before));
	eng_free(e);
	/* No cache: nothing. */
	cfg.kv_capacity_tokens = 0;
	assert_int_equal(eng_new(&e, &cfg, NULL, NULL, NULL), 0);
	r.key = 42;
	assert_int_equal(eng_cached_prefix(e, &r), 0);
	eng_free(e);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_estimate_is_rtt_wait_and_uncached_prefill),
		cmocka_unit_test(test_capacity_is_slots_plus_max_queued),
		cmocka_unit_test(test_pick_lowest_estimate),
		cmocka_unit_test(test_pick_honours_capacity_and_eligibility),
		cmocka_unit_test(test_kv_first_ties_prefer_a_free_slot_then_room),
		cmocka_unit_test(
		    test_engine_probe_reads_the_cache_without_changing_it),
		cmocka_unit_test(test_kv_first_a_free_slot_beats_any_room),
		cmocka_unit_test(test_pick_most_equals_two_picks),
		cmocka_unit_test(
		    test_kv_first_held_subset_settles_the_full_choice),
		cmocka_unit_test(test_pick_matches_the_documented_order),
		cmocka_unit_test(test_engine_load_equals_cluster_fields),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
