/*
 * test_engine.c — tools/common/engine.c, the engine model shared by
 * sg-mockengine and sg-sim: queueing, slots, prefill/decode arithmetic, the
 * prefix KV cache (hits, misses, LRU eviction, pinning, prompt blocks), the
 * step model, holds, and the snapshot cluster object.  Every expected time
 * is worked out by hand in the comment above the assertion.
 */
#include "sg_test.h"

#include <math.h>
#include <stdlib.h>

#include "common/engine.h"

#define MAXEV 64

typedef struct event {
	uint32_t	handle;
	int		kind;
	eng_info	info;
} event;

typedef struct evlog {
	event	ev[MAXEV];
	int	n;
} evlog;

static void
record(void *ctx, uint32_t h, int kind, const eng_info *info)
{
	evlog *l = ctx;

	if (l->n < MAXEV) {
		l->ev[l->n].handle = h;
		l->ev[l->n].kind = kind;
		l->ev[l->n].info = *info;
		l->n++;
	}
}

/* The n-th event of kind for the request whose udata is tag. */
static const eng_info *
find(const evlog *l, int kind, int tag)
{
	int i;

	for (i = 0; i < l->n; i++)
		if (l->ev[i].kind == kind &&
		    l->ev[i].info.udata == (void *)(intptr_t)tag)
			return &l->ev[i].info;
	return NULL;
}

static eng *
mk(const eng_config *cfg, evlog *l)
{
	eng *e = NULL;

	assert_int_equal(eng_new(&e, cfg, record, l, NULL), 0);
	return e;
}

/* Simple model, 1000 prefill tps, 10 decode tps: easy arithmetic. */
static void
cfg_simple(eng_config *c, uint32_t slots, uint64_t kv)
{
	eng_config_default(c);
	c->slots = slots;
	c->prefill_tps = 1000;
	c->decode_tps = 10;
	c->kv_capacity_tokens = kv;
}

static uint32_t
submit(eng *e, double now, uint64_t key, uint64_t in, uint64_t out, int tag)
{
	eng_req r = { .key = key, .input_tokens = in, .output_tokens = out,
	    .udata = (void *)(intptr_t)tag };
	uint32_t h = ENG_NONE;

	assert_int_equal(eng_submit(e, now, &r, &h), 0);
	return h;
}

static void
run_all(eng *e)
{
	eng_advance(e, INFINITY);
}

static void
test_ttft_is_uncached_prefill_and_done_adds_decode(void **state)
{
	eng_config c;
	evlog l = { .n = 0 };
	eng *e;
	const eng_info *i;

	(void)state;
	cfg_simple(&c, 1, 0);
	e = mk(&c, &l);
	/* 500 tokens at 1000 tps = 500 ms to the first token; 4 more tokens
	 * at 10 tps = 400 ms: done at 900. */
	submit(e, 0, 0, 500, 5, 1);
	assert_near(eng_next_event(e), 500, 1e-9);
	run_all(e);
	assert_int_equal(l.n, 2);
	assert_int_equal(l.ev[0].kind, ENG_FIRST_TOKEN);
	assert_int_equal(l.ev[1].kind, ENG_DONE);
	i = find(&l, ENG_DONE, 1);
	assert_near(i->first_token_ms, 500, 1e-9);
	assert_near(i->done_ms, 900, 1e-9);
	assert_int_equal(i->generated, 5);
	assert_true(isinf(eng_next_event(e)));
	eng_free(e);
}

static void
test_fifo_queue_waits_for_a_free_slot(void **state)
{
	eng_config c;
	evlog l = { .n = 0 };
	eng *e;
	sg_cluster cl;

	(void)state;
	cfg_simple(&c, 1, 0);
	e = mk(&c, &l);
	submit(e, 0, 0, 500, 5, 1);
	submit(e, 0, 0, 300, 2, 2);
	/* At 100 ms: one running (prefilling, 400 tokens left), one waiting
	 * (300 tokens): running counts both (the engine holds 2 on 1 slot),
	 * queued = 2, queued input = 700. */
	eng_advance(e, 100);
	eng_cluster(e, 100, &cl);
	assert_int_equal(cl.running, 2);
	assert_int_equal(eng_running(e), 1);
	assert_int_equal(cl.queued, 2);
	assert_int_equal(cl.queued_input_tokens, 700);
	assert_int_equal(cl.max_engine_concurrency, 1);
	assert_int_equal(eng_waiting(e), 1);
	run_all(e);
	/* The second gets the slot at 900, prefills 300 ms: first token at
	 * 1200, one more token at 10 tps: done at 1300. */
	assert_near(find(&l, ENG_DONE, 2)->admit_ms, 900, 1e-9);
	assert_near(find(&l, ENG_FIRST_TOKEN, 2)->first_token_ms, 1200, 1e-9);
	assert_near(find(&l, ENG_DONE, 2)->done_ms, 1300, 1e-9);
	eng_free(e);
}

static void
test_prefill_is_one_engine_wide_fifo(void **state)
{
	eng_config c;
	evlog l = { .n = 0 };
	eng *e;

	(void)state;
	cfg_simple(&c, 2, 0);
	e = mk(&c, &l);
	/* Both admitted at 0; the second prefills after the first: 500 and
	 * 500+200 = 700. */
	submit(e, 0, 0, 500, 1, 1);
	submit(e, 0, 0, 200, 1, 2);
	run_all(e);
	assert_near(find(&l, ENG_FIRST_TOKEN, 1)->first_token_ms, 500, 1e-9);
	assert_near(find(&l, ENG_FIRST_TOKEN, 2)->admit_ms, 0, 1e-9);
	assert_near(find(&l, ENG_FIRST_TOKEN, 2)->first_token_ms, 700, 1e-9);
	/* One output token: done with the first token. */
	assert_near(find(&l, ENG_DONE, 2)->done_ms, 700, 1e-9);
	eng_free(e);
}

static void
test_cache_hit_skips_prefill_of_the_cached_prefix(void **state)
{
	eng_config c;
	evlog l = { .n = 0 };
	eng *e;
	const eng_info *i;

	(void)state;
	cfg_simple(&c, 4, 100000);
	e = mk(&c, &l);
	/* Turn 1: 1000 in, 10 out -> the entry covers 1010 tokens. */
	submit(e, 0, 42, 1000, 10, 1);
	run_all(e);
	i = find(&l, ENG_DONE, 1);
	assert_false(i->hit);
	assert_int_equal(i->reused_tokens, 0);
	assert_int_equal(i->uncached_tokens, 1000);
	assert_int_equal(eng_kv_used(e), 1010);
	/* Turn 2 at 5000: 1200 in; 1010 reused, 190 prefilled: TTFT 190 ms. */
	submit(e, 5000, 42, 1200, 1, 2);
	run_all(e);
	i = find(&l, ENG_FIRST_TOKEN, 2);
	assert_true(i->hit);
	assert_int_equal(i->cached_tokens, 1010);
	assert_int_equal(i->reused_tokens, 1010);
	assert_int_equal(i->uncached_tokens, 190);
	assert_near(i->first_token_ms - i->arrive_ms, 190, 1e-9);
	/* Entry grows to 1200 + 1. */
	assert_int_equal(eng_kv_used(e), 1201);
	assert_int_equal(eng_counters_get(e)->cache_hits, 1010);
	assert_int_equal(eng_counters_get(e)->cache_queries, 2200);
	eng_free(e);
}

static void
test_cache_miss_for_another_key_and_reuse_capped_at_input(void **state)
{
	eng_config c;
	evlog l = { .n = 0 };
	eng *e;
	const eng_info *i;

	(void)state;
	cfg_simple(&c, 4, 100000);
	e = mk(&c, &l);
	submit(e, 0, 1, 800, 200, 1);
	run_all(e);
	submit(e, 100000, 2, 800, 1, 2);
	submit(e, 100000, 1, 300, 1, 3);
	run_all(e);
	i = find(&l, ENG_DONE, 2);
	assert_false(i->hit);
	assert_int_equal(i->uncached_tokens, 800);
	/* Key 1 holds 1000 tokens; a 300-token prompt reuses 300. */
	i = find(&l, ENG_DONE, 3);
	assert_true(i->hit);
	assert_int_equal(i->cached_tokens, 1000);
	assert_int_equal(i->reused_tokens, 300);
	assert_int_equal(i->uncached_tokens, 0);
	eng_free(e);
}

static void
test_lru_eviction_removes_least_recent_entry(void **state)
{
	eng_config c;
	evlog l = { .n = 0 };
	eng *e;
	const eng_info *i;

	(void)state;
	cfg_simple(&c, 1, 3000);
	e = mk(&c, &l);
	/* A, B, C: 999 + 1 = 1000 tokens each; the cache is full. */
	submit(e, 0, 0xA, 999, 1, 1);
	submit(e, 0, 0xB, 999, 1, 2);
	submit(e, 0, 0xC, 999, 1, 3);
	run_all(e);
	assert_int_equal(eng_kv_used(e), 3000);
	/* A again (hit): now B is the least recently used. */
	submit(e, 10000, 0xA, 999, 1, 4);
	run_all(e);
	assert_true(find(&l, ENG_DONE, 4)->hit);
	/* D needs 1000: evicts B (one entry, 1000 tokens). */
	submit(e, 20000, 0xD, 999, 1, 5);
	run_all(e);
	i = find(&l, ENG_DONE, 5);
	assert_int_equal(i->evicted_entries, 1);
	assert_int_equal(i->evicted_tokens, 1000);
	assert_int_equal(eng_kv_used(e), 3000);
	submit(e, 30000, 0xB, 999, 1, 6);
	submit(e, 30000, 0xA, 999, 1, 7);
	run_all(e);
	assert_false(find(&l, ENG_DONE, 6)->hit);
	/* B's return evicted C (A was touched after C), so A still hits. */
	assert_true(find(&l, ENG_DONE, 7)->hit);
	assert_int_equal(eng_counters_get(e)->evicted_entries, 2);
	eng_free(e);
}

static void
test_active_request_pins_its_entry(void **state)
{
	eng_config c;
	evlog l = { .n = 0 };
	eng *e;
	const eng_info *i;

	(void)state;
	cfg_simple(&c, 2, 2000);
	e = mk(&c, &l);
	/* A prefills 1000 tokens (entry 1000) and then decodes for a long
	 * time; B needs 1500: it can only evict nothing (A is pinned), so B
	 * caches what fits: 1000. */
	submit(e, 0, 0xA, 1000, 1000, 1);
	submit(e, 0, 0xB, 1500, 1, 2);
	eng_advance(e, 3000);
	i = find(&l, ENG_DONE, 2);
	assert_non_null(i);
	assert_int_equal(i->evicted_entries, 0);
	assert_int_equal(eng_kv_used(e), 2000);
	run_all(e);
	eng_free(e);
}

static void
test_prompt_blocks_cache_a_shared_prefix(void **state)
{
	eng_config c;
	evlog l = { .n = 0 };
	uint64_t b1[4] = { 11, 12, 13, 14 }, b2[4] = { 11, 12, 23, 24 };
	eng_req r = { .input_tokens = 64, .output_tokens = 1 };
	uint32_t h;
	eng *e;
	const eng_info *i;

	(void)state;
	cfg_simple(&c, 1, 100000);
	c.block_tokens = 16;
	e = mk(&c, &l);
	r.blocks = b1;
	r.nblocks = 4;
	r.udata = (void *)1;
	assert_int_equal(eng_submit(e, 0, &r, &h), 0);
	run_all(e);
	assert_int_equal(eng_kv_used(e), 64);
	/* Same first two blocks: 32 tokens cached, 32 prefilled (32 ms). */
	r.blocks = b2;
	r.udata = (void *)2;
	assert_int_equal(eng_submit(e, 1000, &r, &h), 0);
	run_all(e);
	i = find(&l, ENG_FIRST_TOKEN, 2);
	assert_int_equal(i->cached_tokens, 32);
	assert_int_equal(i->uncached_tokens, 32);
	assert_near(i->first_token_ms - 1000, 32, 1e-9);
	assert_int_equal(eng_kv_used(e), 96);
	eng_free(e);
}

static void
test_hold_fills_slots_and_release_drains(void **state)
{
	eng_config c;
	evlog l = { .n = 0 };
	eng *e;
	sg_cluster cl;

	(void)state;
	cfg_simple(&c, 2, 0);
	e = mk(&c, &l);
	eng_hold(e, 0, 2);
	submit(e, 0, 0, 100, 1, 1);
	eng_advance(e, 1000);
	eng_cluster(e, 1000, &cl);
	assert_int_equal(cl.running, 3);	/* 2 held + 1 waiting */
	assert_int_equal(cl.queued, 1);
	assert_int_equal(l.n, 0);
	/* Released at 1000: prefill 100 ms, first token at 1100. */
	eng_release(e, 1000);
	run_all(e);
	assert_near(find(&l, ENG_FIRST_TOKEN, 1)->first_token_ms, 1100, 1e-9);
	eng_cluster(e, 2000, &cl);
	assert_int_equal(cl.running, 0);
	assert_int_equal(cl.queued, 0);
	eng_free(e);
}

static void
test_max_queue_rejects_beyond_the_limit(void **state)
{
	eng_config c;
	evlog l = { .n = 0 };
	eng_req r = { .input_tokens = 10, .output_tokens = 1 };
	uint32_t h;
	eng *e;

	(void)state;
	cfg_simple(&c, 1, 0);
	c.max_queue = 1;
	e = mk(&c, &l);
	assert_int_equal(eng_submit(e, 0, &r, &h), 0);	/* runs */
	assert_int_equal(eng_submit(e, 0, &r, &h), 0);	/* waits */
	assert_int_equal(eng_submit(e, 0, &r, &h), ENG_EFULL);
	assert_int_equal(eng_counters_get(e)->requests_rejected, 1);
	run_all(e);
	eng_free(e);
}

static void
test_cancelled_waiting_request_leaves_queue_silently(void **state)
{
	eng_config c;
	evlog l = { .n = 0 };
	eng *e;
	uint32_t h;

	(void)state;
	cfg_simple(&c, 1, 0);
	e = mk(&c, &l);
	submit(e, 0, 0, 100, 1, 1);
	h = submit(e, 0, 0, 100, 1, 2);
	submit(e, 0, 0, 100, 1, 3);
	eng_cancel(e, h);
	assert_int_equal(eng_waiting(e), 1);
	run_all(e);
	assert_null(find(&l, ENG_DONE, 2));
	/* 3 goes right after 1: first token at 200. */
	assert_near(find(&l, ENG_FIRST_TOKEN, 3)->first_token_ms, 200, 1e-9);
	eng_free(e);
}

static void
test_cancelled_decoding_request_frees_its_slot_at_once(void **state)
{
	eng_config c;
	evlog l = { .n = 0 };
	eng *e;
	uint32_t h;

	(void)state;
	cfg_simple(&c, 1, 1000);
	e = mk(&c, &l);
	/* 1 decodes from 100 (100 tokens) until 100 + 99 * 100 = 10000. */
	h = submit(e, 0, 7, 100, 100, 1);
	submit(e, 0, 0, 100, 1, 2);
	eng_advance(e, 300);
	assert_non_null(find(&l, ENG_FIRST_TOKEN, 1));
	assert_int_equal(eng_running(e), 1);
	assert_int_equal(eng_waiting(e), 1);
	/* cancelled at 300: 2 gets the slot at 300, first token at 400 */
	eng_cancel(e, h);
	assert_null(eng_peek(e, h));
	assert_int_equal(eng_running(e), 1);
	assert_int_equal(eng_waiting(e), 0);
	assert_int_equal(eng_counters_get(e)->requests_cancelled, 1);
	assert_near(eng_next_event(e), 400, 1e-9);
	run_all(e);
	assert_null(find(&l, ENG_DONE, 1));
	assert_near(find(&l, ENG_DONE, 2)->done_ms, 400, 1e-9);
	assert_int_equal(eng_running(e), 0);
	/* 1's prompt stays cached, unpinned: evictable by later requests */
	assert_true(eng_kv_used(e) == 100);
	assert_true(isinf(eng_next_event(e)));
	eng_cancel(e, h);	/* a dead handle: no-op */
	assert_int_equal(eng_counters_get(e)->requests_cancelled, 1);
	eng_free(e);
}

static void
test_cancelled_prefill_stops_and_the_next_prefill_starts(void **state)
{
	eng_config c;
	evlog l = { .n = 0 };
	eng *e;
	uint32_t h1, h2;
	sg_cluster cl;

	(void)state;
	cfg_simple(&c, 3, 0);
	e = mk(&c, &l);
	/* Prefill FIFO: 1 in 0..1000, 2 queued behind it, 3 behind 2. */
	h1 = submit(e, 0, 0, 1000, 1, 1);
	h2 = submit(e, 0, 0, 500, 1, 2);
	submit(e, 0, 0, 200, 1, 3);
	eng_advance(e, 100);
	/* cancel 2 (queued in the prefill FIFO), then 1 (in prefill) at
	 * 100: 3's prefill runs 100..300 */
	eng_cancel(e, h2);
	eng_cancel(e, h1);
	assert_int_equal(eng_running(e), 1);
	eng_cluster(e, 100, &cl);
	assert_true(cl.queued_input_tokens == 200);
	assert_true(cl.total_input_tokens == 200);
	assert_near(eng_next_event(e), 300, 1e-9);
	run_all(e);
	assert_int_equal(l.n, 2);
	assert_near(find(&l, ENG_DONE, 3)->done_ms, 300, 1e-9);
	assert_int_equal(eng_running(e), 0);
	eng_free(e);
}

static void
test_cancelled_step_sequence_leaves_at_the_next_step(void **state)
{
	eng_config c;
	evlog l = { .n = 0 };
	eng *e;
	uint32_t h;
	sg_cluster cl;

	(void)state;
	cfg_simple(&c, 1, 0);
	c.step_model = true;
	c.max_batched_tokens = 100;
	c.step_fixed_ms = 1;
	c.step_decode_ms_per_seq = 0;
	c.step_prefill_ms_per_token = 0.01;
	e = mk(&c, &l);
	/* 1 decodes 1000 tokens, one per 1 ms step after its prefill
	 * step (1 + 10 * 0.01 = 1.1... ms); 2 waits for the slot. */
	h = submit(e, 0, 0, 10, 1000, 1);
	submit(e, 0, 0, 10, 1, 2);
	eng_advance(e, 5.5);
	assert_int_equal(eng_waiting(e), 1);
	eng_cancel(e, h);
	eng_cluster(e, 5.5, &cl);
	assert_true(cl.running == 1);		/* 2, waiting */
	assert_true(cl.queued_input_tokens == 10);
	/* the step in flight ends at 6.1; 2 prefills in the next one */
	run_all(e);
	assert_null(find(&l, ENG_DONE, 1));
	assert_non_null(find(&l, ENG_DONE, 2));
	assert_true(find(&l, ENG_DONE, 2)->admit_ms < 7);
	assert_int_equal(eng_running(e), 0);
	eng_free(e);
}

static void
test_step_model_chunks_prefill_and_decodes_per_step(void **state)
{
	eng_config c;
	evlog l = { .n = 0 };
	eng *e;
	const eng_info *i;

	(void)state;
	cfg_simple(&c, 4, 0);
	c.step_model = true;
	c.max_batched_tokens = 100;
	c.step_fixed_ms = 1;
	c.step_decode_ms_per_seq = 0.5;
	c.step_prefill_ms_per_token = 0.01;
	e = mk(&c, &l);
	/* 250 tokens: steps of 100 (2 ms), 100 (2 ms), 50 (1.5 ms): first
	 * token at 5.5; then two decode steps of 1 + 0.5 = 1.5 ms: 7, 8.5. */
	submit(e, 0, 0, 250, 3, 1);
	run_all(e);
	i = find(&l, ENG_DONE, 1);
	assert_near(i->first_token_ms, 5.5, 1e-9);
	assert_near(i->done_ms, 8.5, 1e-9);
	assert_int_equal(i->generated, 3);
	eng_free(e);
}

static void
test_step_model_shares_a_step_between_decode_and_prefill(void **state)
{
	eng_config c;
	evlog l = { .n = 0 };
	eng *e;

	(void)state;
	cfg_simple(&c, 4, 0);
	c.step_model = true;
	c.max_batched_tokens = 100;
	c.step_fixed_ms = 1;
	c.step_decode_ms_per_seq = 0.5;
	c.step_prefill_ms_per_token = 0.01;
	e = mk(&c, &l);
	/* A: 100 tokens, first token at 2 (1 + 1 ms).  B arrives at 1: joins
	 * the step starting at 2, with A decoding: budget 99, B prefill 99:
	 * 1 + 0.5 + 0.99 = 2.49 -> 4.49; then B's last token: one step with
	 * A decoding too and B prefill 1 token: 1 + 0.5 + 0.01 -> 6.0. */
	submit(e, 0, 0, 100, 10, 1);
	eng_advance(e, 1);
	submit(e, 1, 0, 100, 1, 2);
	run_all(e);
	assert_near(find(&l, ENG_FIRST_TOKEN, 1)->first_token_ms, 2, 1e-9);
	assert_near(find(&l, ENG_FIRST_TOKEN, 2)->first_token_ms, 6.0, 1e-9);
	eng_free(e);
}

static void
test_mean_input_tps_is_measured_prefill_rate(void **state)
{
	eng_config c;
	evlog l = { .n = 0 };
	eng *e;
	sg_cluster cl;

	(void)state;
	cfg_simple(&c, 1, 0);
	c.prio_map = true;
	e = mk(&c, &l);
	eng_cluster(e, 0, &cl);
	/* Before any sample: the peak rate. */
	assert_near(cl.last_mean_input_tps, 1000, 1e-9);
	assert_near(cl.max_input_tps, 1000, 1e-9);
	submit(e, 0, 0, 400, 1, 1);
	submit(e, 0, 0, 400, 1, 2);
	run_all(e);
	eng_cluster(e, 1000, &cl);
	assert_near(cl.last_mean_input_tps, 1000, 1e-9);
	assert_int_equal(cl.nprio, 1);
	assert_near(cl.prio_ms[0], 0, 1e-9);
	eng_free(e);
}

static void
test_generated_tokens_progress_with_decode_rate(void **state)
{
	eng_config c;
	evlog l = { .n = 0 };
	eng *e;
	uint32_t h;

	(void)state;
	cfg_simple(&c, 1, 0);
	e = mk(&c, &l);
	h = submit(e, 0, 0, 100, 10, 1);
	eng_advance(e, 50);
	assert_int_equal(eng_generated(e, h, 50), 0);
	eng_advance(e, 100);
	assert_int_equal(eng_generated(e, h, 100), 1);
	/* 10 tps: one token per 100 ms after the first. */
	eng_advance(e, 350);
	assert_int_equal(eng_generated(e, h, 350), 3);
	run_all(e);
	assert_near(find(&l, ENG_DONE, 1)->done_ms, 1000, 1e-9);
	eng_free(e);
}

static void
test_bad_config_names_the_field(void **state)
{
	eng_config c;
	const char *why = NULL;
	eng *e = NULL;

	(void)state;
	eng_config_default(&c);
	c.slots = 0;
	assert_int_equal(eng_new(&e, &c, NULL, NULL, &why), EINVAL);
	assert_string_equal(why, "slots");
	eng_config_default(&c);
	c.prefill_tps = 0;
	assert_int_equal(eng_new(&e, &c, NULL, NULL, &why), EINVAL);
	assert_string_equal(why, "prefill_tps");
	assert_null(e);
}

/* The cache index under churn: thousands of keys inserted and evicted
 * (table growth, deletes that shift probe runs back) and every lookup still
 * finds exactly the entries LRU keeps. */
static void
test_cache_index_survives_insert_evict_churn(void **state)
{
	eng_config c;
	eng_req r;
	eng *e;
	uint32_t h;
	uint64_t k, j;

	(void)state;
	cfg_simple(&c, 1, 110);		/* ten entries of 10 + 1 tokens */
	assert_int_equal(eng_new(&e, &c, NULL, NULL, NULL), 0);
	memset(&r, 0, sizeof(r));
	r.input_tokens = 10;
	r.output_tokens = 1;
	for (k = 1; k <= 3000; k++) {
		r.key = k << 20 | 1;		/* keys sharing low bits */
		assert_int_equal(eng_submit(e, (double)k * 1000, &r, &h), 0);
		eng_advance(e, INFINITY);
		assert_int_equal(eng_kv_used(e), k < 10 ? 11 * k : 110);
		for (j = k > 12 ? k - 12 : 1; j <= k; j++) {
			r.key = j << 20 | 1;
			assert_int_equal(eng_cached_prefix(e, &r),
			    j + 10 > k ? 10 : 0);
		}
	}
	assert_int_equal(eng_counters_get(e)->evicted_entries, 2990);
	eng_free(e);
}

/* A remembered entry (eng_info.entry as eng_req.hint) is only a shortcut:
 * a stale one, whose entry was evicted and sits free, is ignored. */
static void
test_stale_cache_hint_is_ignored(void **state)
{
	eng_config c;
	eng_req r;
	eng *e;
	uint32_t h, ea;

	(void)state;
	cfg_simple(&c, 1, 22);		/* two entries of 10 + 1 tokens */
	assert_int_equal(eng_new(&e, &c, NULL, NULL, NULL), 0);
	memset(&r, 0, sizeof(r));
	r.input_tokens = 10;
	r.output_tokens = 1;
	r.key = 0xA1;
	assert_int_equal(eng_submit(e, 0, &r, &h), 0);
	ea = eng_peek(e, h)->entry;
	assert_true(ea != 0);
	eng_advance(e, INFINITY);
	r.hint = ea;			/* a live hint: the same answer */
	assert_int_equal(eng_cached_prefix(e, &r), 10);
	r.hint = 0;
	r.key = 0xB1;
	assert_int_equal(eng_submit(e, 1000, &r, &h), 0);
	r.key = 0xC1;			/* evicts A: its entry is free */
	assert_int_equal(eng_submit(e, 2000, &r, &h), 0);
	eng_advance(e, INFINITY);
	r.key = 0xA1;
	r.hint = ea;
	assert_int_equal(eng_cached_prefix(e, &r), 0);
	assert_int_equal(eng_submit(e, 3000, &r, &h), 0);	/* a miss */
	eng_advance(e, INFINITY);
	r.hint = 0;
	assert_int_equal(eng_cached_prefix(e, &r), 10);
	assert_int_equal(eng_kv_used(e), 22);
	r.key = 0xC1;
	assert_int_equal(eng_cached_prefix(e, &r), 10);
	eng_free(e);
}

/* The LRU order is the order of last use: admission touches an entry, so
 * entries used again outlive older ones, and evictions go oldest first. */
static void
test_lru_evicts_in_order_of_last_use(void **state)
{
	static const uint64_t keys[] = { 0xA1, 0xB1, 0xC1, 0xD1, 0xE1 };
	eng_config c;
	eng_req r;
	eng *e;
	uint32_t h;
	size_t i;

	(void)state;
	cfg_simple(&c, 1, 55);		/* five entries of 10 + 1 tokens */
	assert_int_equal(eng_new(&e, &c, NULL, NULL, NULL), 0);
	memset(&r, 0, sizeof(r));
	r.input_tokens = 10;
	r.output_tokens = 1;
	for (i = 0; i < 5; i++) {
		r.key = keys[i];
		assert_int_equal(eng_submit(e, (double)i * 100, &r, &h), 0);
		eng_advance(e, INFINITY);
	}
	/* Use B and D again: the order, oldest first, is A C E B D. */
	r.key = 0xB1;
	assert_int_equal(eng_submit(e, 1000, &r, &h), 0);
	r.key = 0xD1;
	assert_int_equal(eng_submit(e, 1000, &r, &h), 0);
	eng_advance(e, INFINITY);
	/* Each new key evicts the oldest: A, then C, then E. */
	r.key = 0xF1;
	assert_int_equal(eng_submit(e, 2000, &r, &h), 0);
	eng_advance(e, INFINITY);
	r.key = 0xA1;
	assert_int_equal(eng_cached_prefix(e, &r), 0);
	r.key = 0xC1;
	assert_int_equal(eng_cached_prefix(e, &r), 10);
	r.key = 0xF2;
	assert_int_equal(eng_submit(e, 3000, &r, &h), 0);
	eng_advance(e, INFINITY);
	r.key = 0xC1;
	assert_int_equal(eng_cached_prefix(e, &r), 0);
	r.key = 0xE1;
	assert_int_equal(eng_cached_prefix(e, &r), 10);
	r.key = 0xF3;
	assert_int_equal(eng_submit(e, 4000, &r, &h), 0);
	eng_advance(e, INFINITY);
	r.key = 0xE1;
	assert_int_equal(eng_cached_prefix(e, &r), 0);
	/* B, D and the three new keys remain. */
	r.key = 0xB1;
	assert_int_equal(eng_cached_prefix(e, &r), 10);
	r.key = 0xD1;
	assert_int_equal(eng_cached_prefix(e, &r), 10);
	assert_int_equal(eng_counters_get(e)->evicted_entries, 3);
	assert_int_equal(eng_kv_used(e), 55);
	eng_free(e);
}

/* An evicted entry's record is reused by the next new key: the new key is
 * found (by its hint, the reused entry, or by the index), the old key is
 * not, even through its old hint. */
static void
test_kv_entry_reused_after_eviction(void **state)
{
	eng_config c;
	eng_req r;
	eng *e;
	uint32_t h, ea, ec;

	(void)state;
	cfg_simple(&c, 1, 22);		/* two entries of 10 + 1 tokens */
	assert_int_equal(eng_new(&e, &c, NULL, NULL, NULL), 0);
	memset(&r, 0, sizeof(r));
	r.input_tokens = 10;
	r.output_tokens = 1;
	r.key = 0xA1;
	assert_int_equal(eng_submit(e, 0, &r, &h), 0);
	ea = eng_peek(e, h)->entry;
	eng_advance(e, INFINITY);
	r.key = 0xB1;
	assert_int_equal(eng_submit(e, 100, &r, &h), 0);
	eng_advance(e, INFINITY);
	/* C's admission finds no room only at its prefill's end: A, the
	 * least recent, is evicted then, after C took a new entry. */
	r.key = 0xC1;
	assert_int_equal(eng_submit(e, 200, &r, &h), 0);
	ec = eng_peek(e, h)->entry;
	assert_true(ec != ea);
	eng_advance(e, INFINITY);
	/* D takes A's freed entry. */
	r.key = 0xD1;
	assert_int_equal(eng_submit(e, 300, &r, &h), 0);
	assert_int_equal(eng_peek(e, h)->entry, ea);
	eng_advance(e, INFINITY);
	r.hint = ea;
	assert_int_equal(eng_cached_prefix(e, &r), 10);	/* D by hint */
	r.hint = 0;
	assert_int_equal(eng_cached_prefix(e, &r), 10);	/* D by index */
	r.key = 0xA1;
	r.hint = ea;
	assert_int_equal(eng_cached_prefix(e, &r), 0);
	r.hint = 0;
	assert_int_equal(eng_cached_prefix(e, &r), 0);
	r.key = 0xC1;
	r.hint = ec;
	assert_int_equal(eng_cached_prefix(e, &r), 10);
	assert_int_equal(eng_counters_get(e)->evicted_entries, 2);
	eng_free(e);
}

/* The index finds every key after it has grown many times (it rehashes
 * from the hashes it keeps, not from the entries), and no absent key. */
static void
test_cache_index_grows_and_finds_every_key(void **state)
{
	eng_config c;
	eng_req r;
	eng *e;
	uint32_t h;
	uint64_t k;

	(void)state;
	cfg_simple(&c, 4, 1u << 30);
	assert_int_equal(eng_new(&e, &c, NULL, NULL, NULL), 0);
	memset(&r, 0, sizeof(r));
	r.input_tokens = 3;
	r.output_tokens = 1;
	for (k = 1; k <= 5000; k++) {
		r.key = k * 0x9e3779b97f4a7c15ULL;
		assert_int_equal(eng_submit(e, (double)k, &r, &h), 0);
		if (k % 4 == 0)
			eng_advance(e, INFINITY);
	}
	eng_advance(e, INFINITY);
	for (k = 1; k <= 5000; k++) {
		r.key = k * 0x9e3779b97f4a7c15ULL;
		assert_int_equal(eng_cached_prefix(e, &r), 3);
		r.key = (k + 5000) * 0x9e3779b97f4a7c15ULL;
		assert_int_equal(eng_cached_prefix(e, &r), 0);
	}
	assert_int_equal(eng_kv_used(e), 5000 * 4);
	eng_free(e);
}

/* Callbacks that add requests while being called. */
typedef struct grow_ctx {
	eng		*e;
	int		 first, done;
	const eng_info	*seen;		/* what the first callback was given */
	double		 next_in_cb;
	bool		 same;
} grow_ctx;

static void
grow_cb(void *ctx, uint32_t h, int kind, const eng_info *info)
{
	grow_ctx *g = ctx;
	eng_req r = { .input_tokens = 10, .output_tokens = 1 };
	uint32_t h2;
	int i;

	(void)h;
	if (kind == ENG_DONE) {
		g->done++;
		return;
	}
	if (g->first++ > 0)
		return;
	g->seen = info;
	g->next_in_cb = eng_next_event(g->e);
	/* 300 more records: the pool grows by several chunks. */
	for (i = 0; i < 300; i++) {
		r.udata = (void *)(intptr_t)(100 + i);
		assert_int_equal(eng_submit(g->e, info->first_token_ms, &r,
		    &h2), 0);
	}
	g->same = info->udata == (void *)(intptr_t)1 &&
	    info->input_tokens == 500 && info->first_token_ms == 500 &&
	    eng_peek(g->e, h) == info;
}

/* A callback is handed the request's own numbers; records never move, so
 * they stay valid while the callback submits enough requests to grow the
 * record pool; the next event's time is current inside the callback. */
static void
test_record_pool_grows_without_moving_records(void **state)
{
	eng_config c;
	grow_ctx g;
	eng *e;

	(void)state;
	memset(&g, 0, sizeof(g));
	cfg_simple(&c, 1, 0);
	assert_int_equal(eng_new(&e, &c, grow_cb, &g, NULL), 0);
	g.e = e;
	/* 500 tokens: first token at 500; 2 more at 10 tps: done at 700. */
	submit(e, 0, 0, 500, 3, 1);
	run_all(e);
	assert_true(g.same);
	assert_non_null(g.seen);
	assert_near(g.next_in_cb, 700, 1e-9);
	assert_int_equal(g.first, 301);
	assert_int_equal(g.done, 301);
	assert_int_equal(eng_counters_get(e)->requests_done, 301);
	assert_true(isinf(eng_next_event(e)));
	eng_free(e);
}

/* Decode ends come out in time order, ties in push order (the order of
 * the first tokens), through a heap deep enough to have full and partial
 * sets of children. */
static void
test_decode_ends_in_time_then_push_order(void **state)
{
	eng_config c;
	evlog l = { .n = 0 };
	eng *e;
	int k, j, ndone = 0, prev = -1;
	double prevt = -1;

	(void)state;
	cfg_simple(&c, 40, 0);
	e = mk(&c, &l);
	/* Request k: 100 tokens, so its first token is at 100 (k + 1);
	 * then 45 - k + (7k mod 3) more tokens at 10 tps, 100 ms each: done
	 * at 100 (46 + 7k mod 3), three times shared by about 13 each. */
	for (k = 0; k < 40; k++)
		submit(e, 0, 0, 100, (uint64_t)(46 - k + (7 * k) % 3), k);
	eng_advance(e, 4000);		/* every first token, no done yet */
	assert_int_equal(l.n, 40);
	l.n = 0;
	run_all(e);
	assert_int_equal(l.n, 40);
	for (j = 0; j < l.n; j++) {
		double t = l.ev[j].info.done_ms;

		k = (int)(intptr_t)l.ev[j].info.udata;
		assert_int_equal(l.ev[j].kind, ENG_DONE);
		assert_near(t, 100.0 * (46 + (7 * k) % 3), 1e-9);
		assert_true(t > prevt || (t == prevt && k > prev));
		prevt = t;
		prev = k;
		ndone++;
	}
	assert_int_equal(ndone, 40);
	eng_free(e);
}

/* A decode end and a prefill end at the same instant: the decode end
 * first (it frees a slot). */
static void
test_decode_end_precedes_a_prefill_end_at_the_same_time(void **state)
{
	eng_config c;
	evlog l = { .n = 0 };
	eng *e;

	(void)state;
	cfg_simple(&c, 2, 0);
	e = mk(&c, &l);
	/* 1: prefill 0-100, one more token: done at 200.  2: prefill
	 * 100-200: its first token at 200 too. */
	submit(e, 0, 0, 100, 2, 1);
	submit(e, 0, 0, 100, 2, 2);
	eng_advance(e, 150);
	assert_int_equal(l.n, 1);
	assert_near(eng_next_event(e), 200, 1e-9);
	eng_advance(e, 200);
	assert_int_equal(l.n, 3);
	assert_int_equal(l.ev[1].kind, ENG_DONE);
	assert_ptr_equal(l.ev[1].info.udata, (void *)(intptr_t)1);
	assert_int_equal(l.ev[2].kind, ENG_FIRST_TOKEN);
	assert_ptr_equal(l.ev[2].info.udata, (void *)(intptr_t)2);
	assert_near(eng_next_event(e), 300, 1e-9);
	eng_free(e);
}

typedef struct cancel_ctx {
	eng		*e;
	uint32_t	 victim;
	int		 first, done;
	double		 next_after;
} cancel_ctx;

/* On request 2's first token, cancel request 1 (decoding, the next
 * event). */
static void
cancel_cb(void *ctx, uint32_t h, int kind, const eng_info *info)
{
	cancel_ctx *x = ctx;

	(void)h;
	if (kind == ENG_DONE) {
		x->done++;
		return;
	}
	x->first++;
	if (info->udata == (void *)(intptr_t)2) {
		eng_cancel(x->e, x->victim);
		x->next_after = eng_next_event(x->e);
	}
}

/* The next event stays current after an event whose callback changed the
 * engine (a cancel) and after one whose callback did nothing. */
static void
test_next_event_is_current_after_a_callback_cancels(void **state)
{
	eng_config c;
	cancel_ctx x;
	eng_req r = { .input_tokens = 100, .output_tokens = 3,
	    .udata = (void *)(intptr_t)1 };

	(void)state;
	memset(&x, 0, sizeof(x));
	cfg_simple(&c, 2, 0);
	assert_int_equal(eng_new(&x.e, &c, cancel_cb, &x, NULL), 0);
	/* 1: prefill 0-100, 2 more tokens: done at 300.  2: prefill
	 * 100-200, 10 more tokens: done at 1200. */
	assert_int_equal(eng_submit(x.e, 0, &r, &x.victim), 0);
	submit(x.e, 0, 0, 100, 11, 2);
	eng_advance(x.e, 150);		/* 1's first token: nothing changes */
	assert_int_equal(x.first, 1);
	assert_near(eng_next_event(x.e), 200, 1e-9);
	eng_advance(x.e, 250);		/* 2's first token cancels 1 */
	assert_int_equal(x.first, 2);
	assert_near(x.next_after, 1200, 1e-9);
	assert_near(eng_next_event(x.e), 1200, 1e-9);
	run_all(x.e);
	assert_int_equal(x.done, 1);	/* 2 only */
	assert_true(isinf(eng_next_event(x.e)));
	eng_free(x.e);
}

/* eng_prefetch is a hint only: with a live hint, a stale or out-of-range
 * one, no hint, no key, or no cache, no counter, cached prefix or LRU
 * position changes (the next growth evicts the least recently used key,
 * 1, although 1 was the key prefetched). */
static void
test_prefetch_changes_no_result(void **state)
{
	eng_config cfg;
	eng_counters before;
	eng_req r;
	eng *e;
	uint32_t h;
	uint64_t k;

	(void)state;
	eng_config_default(&cfg);
	cfg.kv_capacity_tokens = 303;	/* three keys of 100 + 1 tokens */
	assert_int_equal(eng_new(&e, &cfg, NULL, NULL, NULL), 0);
	memset(&r, 0, sizeof(r));
	r.input_tokens = 100;
	r.output_tokens = 1;		/* done at its prefill's end */
	for (k = 1; k <= 3; k++) {
		r.key = k;
		assert_int_equal(eng_submit(e, (double)k * 100, &r, &h), 0);
		eng_advance(e, (double)k * 100 + 50);
	}
	before = *eng_counters_get(e);
	r.key = 1;
	r.hint = 1;			/* key 1's entry + 1 */
	eng_prefetch(e, &r);
	r.hint = 1000;			/* past the entries */
	eng_prefetch(e, &r);
	r.hint = 3;			/* another key's entry */
	eng_prefetch(e, &r);
	r.hint = 0;
	eng_prefetch(e, &r);
	r.key = 0;
	eng_prefetch(e, &r);
	assert_memory_equal(&before, eng_counters_get(e), sizeof(before));
	assert_int_equal(eng_kv_used(e), 303);
	r.key = 4;
	assert_int_equal(eng_submit(e, 400, &r, &h), 0);
	eng_advance(e, 450);
	assert_int_equal(eng_counters_get(e)->evicted_entries, 1);
	r.hint = 0;
	r.key = 1;
	assert_int_equal(eng_cached_prefix(e, &r), 0);
	for (k = 2; k <= 4; k++) {
		r.key = k;
		assert_int_equal(eng_cached_prefix(e, &r), 100);
	}
	eng_free(e);
	cfg.kv_capacity_tokens = 0;
	assert_int_equal(eng_new(&e, &cfg, NULL, NULL, NULL), 0);
	r.key = 1;
	r.hint = 1;
	eng_prefetch(e, &r);
	assert_int_equal(eng_cached_prefix(e, &r), 0);
	eng_free(e);
}

/* The LRU order survives the queue's compactions: 5000 uses of 12 keys in
 * a cache of 8 (a touch a use, a compaction every few dozen), each
 * checked against a plain list of the keys, most recent last. */
static void
test_lru_queue_keeps_the_order_through_compactions(void **state)
{
	eng_config c;
	eng_req r;
	eng *e;
	uint32_t h;
	uint64_t model[8], x = 5;
	size_t nm = 0, i, j, step;

	(void)state;
	cfg_simple(&c, 1, 88);		/* eight entries of 10 + 1 tokens */
	assert_int_equal(eng_new(&e, &c, NULL, NULL, NULL), 0);
	memset(&r, 0, sizeof(r));
	r.input_tokens = 10;
	r.output_tokens = 1;
	for (step = 0; step < 5000; step++) {
		x = x * 6364136223846793005ULL + 1442695040888963407ULL;
		r.key = 0x100 + (x >> 33) % 12;
		assert_int_equal(eng_submit(e, (double)step * 100, &r, &h),
		    0);
		eng_advance(e, INFINITY);
		for (i = 0; i < nm && model[i] != r.key; i++)
			;
		if (i == nm && nm == 8) {
			i = 0;			/* the oldest is evicted */
			model[0] = r.key;
		} else if (i == nm)
			model[nm++] = r.key;
		for (j = i; j + 1 < nm; j++)
			model[j] = model[j + 1];
		model[nm - 1] = r.key;
		for (j = 0; j < 12; j++) {
			bool in = false;

			for (i = 0; i < nm; i++)
				in = in || model[i] == 0x100 + j;
			r.key = 0x100 + j;
			assert_int_equal(eng_cached_prefix(e, &r), in ? 10 : 0);
		}
	}
	eng_free(e);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ttft_is_uncached_prefill_and_done_adds_decode),
		cmocka_unit_test(test_fifo_queue_waits_for_a_free_slot),
		cmocka_unit_test(test_prefill_is_one_engine_wide_fifo),
		cmocka_unit_test(test_cache_hit_skips_prefill_of_the_cached_prefix),
		cmocka_unit_test(test_cache_miss_for_another_key_and_reuse_capped_at_input),
		cmocka_unit_test(test_lru_eviction_removes_least_recent_entry),
		cmocka_unit_test(test_active_request_pins_its_entry),
		cmocka_unit_test(test_prompt_blocks_cache_a_shared_prefix),
		cmocka_unit_test(test_hold_fills_slots_and_release_drains),
		cmocka_unit_test(test_max_queue_rejects_beyond_the_limit),
		cmocka_unit_test(test_cancelled_waiting_request_leaves_queue_silently),
		cmocka_unit_test(test_cancelled_decoding_request_frees_its_slot_at_once),
		cmocka_unit_test(test_cancelled_prefill_stops_and_the_next_prefill_starts),
		cmocka_unit_test(test_cancelled_step_sequence_leaves_at_the_next_step),
		cmocka_unit_test(test_step_model_chunks_prefill_and_decodes_per_step),
		cmocka_unit_test(test_step_model_shares_a_step_between_decode_and_prefill),
		cmocka_unit_test(test_mean_input_tps_is_measured_prefill_rate),
		cmocka_unit_test(test_generated_tokens_progress_with_decode_rate),
		cmocka_unit_test(test_bad_config_names_the_field),
		cmocka_unit_test(test_cache_index_survives_insert_evict_churn),
		cmocka_unit_test(test_stale_cache_hint_is_ignored),
		cmocka_unit_test(test_lru_evicts_in_order_of_last_use),
		cmocka_unit_test(test_kv_entry_reused_after_eviction),
		cmocka_unit_test(test_cache_index_grows_and_finds_every_key),
		cmocka_unit_test(test_record_pool_grows_without_moving_records),
		cmocka_unit_test(test_decode_ends_in_time_then_push_order),
		cmocka_unit_test(test_decode_end_precedes_a_prefill_end_at_the_same_time),
		cmocka_unit_test(test_next_event_is_current_after_a_callback_cancels),
		cmocka_unit_test(test_prefetch_changes_no_result),
		cmocka_unit_test(
		    test_lru_queue_keeps_the_order_through_compactions),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
