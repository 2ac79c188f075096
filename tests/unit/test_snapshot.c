/*
 * test_snapshot.c — sg_snapshot.c: the cluster container and its id index,
 * pending reservations (sg-proxy(8), numbers worked by hand), and the strict
 * JSON codec of sg-route(1).  Run from the repository root (fixtures are
 * read from tests/fixtures/codec/).
 */
#include "sg_test.h"

#include <math.h>
#include <stdio.h>

#include "sg_snapshot.h"

#define FIXTURES	"tests/fixtures/codec/"

static sg_cluster
mkcluster(const char *id)
{
	sg_cluster c;

	assert_int_equal(sg_cluster_init(&c, id, strlen(id)), 0);
	return c;
}

/* Parse text as a snapshot; return the status, fill err. */
static int
parse(sg_snapshot *s, const char *text, sg_error *err)
{
	json_error_t jerr;
	json_t *j;
	int rc;

	j = json_loads(text, JSON_ALLOW_NUL, &jerr);
	if (j == NULL)
		fail_msg("bad test JSON: %s: %s", jerr.text, text);
	sg_error_clear(err);
	rc = sg_snapshot_from_json(s, j, err);
	json_decref(j);
	return rc;
}

/* Expect text to be rejected with exactly this message. */
static void
expect_reject(const char *text, const char *msg)
{
	sg_snapshot *s = sg_snapshot_new();
	sg_error err;

	assert_non_null(s);
	assert_int_equal(parse(s, text, &err), SG_EINVAL);
	assert_string_equal(err.text, msg);
	assert_int_equal(sg_snapshot_count(s), 0);
	sg_snapshot_free(s);
}

static void
assert_cluster_equal(const sg_cluster *a, const sg_cluster *b)
{
	uint32_t i;

	assert_string_equal(a->id, b->id);
	assert_int_equal(a->id_len, b->id_len);
	assert_true(a->rtt_ms == b->rtt_ms);
	assert_true(a->max_engine_concurrency == b->max_engine_concurrency);
	assert_true(a->running == b->running);
	assert_true(a->queued == b->queued);
	assert_true(a->queued_input_tokens == b->queued_input_tokens);
	assert_true(a->total_input_tokens == b->total_input_tokens);
	assert_true(a->last_mean_input_tps == b->last_mean_input_tps);
	assert_true(a->max_input_tps == b->max_input_tps);
	assert_true(a->kv_capacity_tokens == b->kv_capacity_tokens);
	assert_true(a->kv_used_tokens == b->kv_used_tokens);
	assert_true(a->kv_free_tokens == b->kv_free_tokens);
	assert_int_equal(a->nprio, b->nprio);
	for (i = 0; i < a->nprio; i++) {
		assert_int_equal(a->prio_key[i], b->prio_key[i]);
		assert_true(a->prio_ms[i] == b->prio_ms[i]);
	}
}

static void
assert_prio(const sg_cluster *c, uint32_t n, const uint32_t *keys,
    const double *ms)
{
	uint32_t i;

	assert_int_equal(c->nprio, n);
	for (i = 0; i < n; i++) {
		assert_int_equal(c->prio_key[i], keys[i]);
		assert_near(c->prio_ms[i], ms[i], 0);
	}
}

/* --- clusters and the container ------------------------------------------ */

static void
test_cluster_init_checks_id_length(void **state)
{
	char big[SG_ID_MAX + 2];
	sg_cluster c;

	(void)state;
	memset(big, 'x', sizeof(big));
	assert_int_equal(sg_cluster_init(&c, "", 0), SG_EINVAL);
	assert_int_equal(sg_cluster_init(&c, big, SG_ID_MAX + 1), SG_EINVAL);
	assert_int_equal(sg_cluster_init(&c, big, SG_ID_MAX), 0);
	assert_int_equal(c.id_len, SG_ID_MAX);
	assert_int_equal(strlen(c.id), SG_ID_MAX);
	assert_int_equal(sg_cluster_init(&c, "abc", 2), 0);
	assert_string_equal(c.id, "ab");
	assert_true(c.running == 0 && c.rtt_ms == 0 && c.nprio == 0);
}

static void
test_set_prio_keeps_keys_sorted_and_replaces(void **state)
{
	static const uint32_t k[] = { 0, 3, 9 };
	static const double ms[] = { 1, 33, 7 };
	sg_cluster c = mkcluster("A");
	uint32_t i;

	(void)state;
	assert_int_equal(sg_cluster_set_prio(&c, 9, 9), 0);
	assert_int_equal(sg_cluster_set_prio(&c, 0, 1), 0);
	assert_int_equal(sg_cluster_set_prio(&c, 3, 3), 0);
	assert_int_equal(sg_cluster_set_prio(&c, 3, 33), 0);
	assert_int_equal(sg_cluster_set_prio(&c, 9, 7), 0);
	assert_prio(&c, 3, k, ms);

	c = mkcluster("B");
	for (i = 0; i < SG_PRIO_MAX; i++)
		assert_int_equal(sg_cluster_set_prio(&c, 100 - i, i), 0);
	assert_int_equal(sg_cluster_set_prio(&c, 5, 1), SG_ERANGE);
	assert_int_equal(sg_cluster_set_prio(&c, 100, 1), 0);	/* replace */
	for (i = 1; i < SG_PRIO_MAX; i++)
		assert_true(c.prio_key[i - 1] < c.prio_key[i]);
}

static void
test_add_find_get_keep_candidate_order(void **state)
{
	sg_snapshot *s = sg_snapshot_new();
	sg_cluster c;
	sg_error err;
	char id[16];
	size_t i;

	(void)state;
	assert_non_null(s);
	assert_int_equal(sg_snapshot_count(s), 0);
	assert_int_equal(sg_snapshot_find(s, "A", 1), -1);
	assert_null(sg_snapshot_get(s, 0));
	for (i = 0; i < 1000; i++) {
		snprintf(id, sizeof(id), "c%zu", 999 - i);
		c = mkcluster(id);
		c.running = i;
		assert_int_equal(sg_snapshot_add(s, &c, &err), 0);
	}
	assert_int_equal(sg_snapshot_count(s), 1000);
	for (i = 0; i < 1000; i++) {
		snprintf(id, sizeof(id), "c%zu", 999 - i);
		assert_int_equal(sg_snapshot_find(s, id, strlen(id)), (long)i);
		assert_string_equal(sg_snapshot_get(s, i)->id, id);
		assert_true(sg_snapshot_get(s, i)->running == i);
	}
	assert_int_equal(sg_snapshot_find(s, "c1000", 5), -1);
	assert_int_equal(sg_snapshot_find(s, "c", 1), -1);	/* a prefix */
	sg_snapshot_at(s, 3)->queued = 77;
	assert_true(sg_snapshot_get(s, 3)->queued == 77);
	assert_null(sg_snapshot_at(s, 1000));

	c = mkcluster("c5");
	assert_int_equal(sg_snapshot_add(s, &c, &err), SG_EINVAL);
	assert_string_equal(err.text, "duplicate cluster id \"c5\"");
	assert_int_equal(sg_snapshot_count(s), 1000);

	sg_snapshot_clear(s);
	assert_int_equal(sg_snapshot_count(s), 0);
	assert_int_equal(sg_snapshot_find(s, "c5", 2), -1);
	assert_int_equal(sg_snapshot_add(s, &c, &err), 0);
	assert_int_equal(sg_snapshot_find(s, "c5", 2), 0);
	sg_snapshot_free(s);
	sg_snapshot_free(NULL);
}

static void
test_add_refuses_past_max_candidates(void **state)
{
	sg_snapshot *s = sg_snapshot_new();
	sg_cluster c;
	sg_error err;
	char id[16];
	size_t i;

	(void)state;
	for (i = 0; i < SG_MAX_CANDIDATES; i++) {
		snprintf(id, sizeof(id), "%zu", i);
		c = mkcluster(id);
		assert_int_equal(sg_snapshot_add(s, &c, NULL), 0);
	}
	c = mkcluster("one-too-many");
	assert_int_equal(sg_snapshot_add(s, &c, &err), SG_ERANGE);
	assert_int_equal(sg_snapshot_count(s), SG_MAX_CANDIDATES);
	assert_int_equal(sg_snapshot_find(s, "4095", 4), 4095);
	sg_snapshot_free(s);
}

static void
test_copy_is_deep_and_indexed(void **state)
{
	sg_snapshot *a = sg_snapshot_new(), *b = sg_snapshot_new();
	sg_cluster c;
	size_t i;

	(void)state;
	for (i = 0; i < 40; i++) {
		char id[8];

		snprintf(id, sizeof(id), "x%zu", i);
		c = mkcluster(id);
		c.queued = i;
		assert_int_equal(sg_snapshot_add(a, &c, NULL), 0);
	}
	c = mkcluster("only");
	assert_int_equal(sg_snapshot_add(b, &c, NULL), 0);
	assert_int_equal(sg_snapshot_copy(b, a), 0);
	assert_int_equal(sg_snapshot_count(b), 40);
	assert_int_equal(sg_snapshot_find(b, "only", 4), -1);
	assert_int_equal(sg_snapshot_find(b, "x39", 3), 39);
	sg_snapshot_reserve(b, 39, 10, 0);
	assert_true(sg_snapshot_get(b, 39)->queued == 40);
	assert_true(sg_snapshot_get(a, 39)->queued == 39);
	/* copying a smaller snapshot over a larger one */
	sg_snapshot_clear(a);
	assert_int_equal(sg_snapshot_copy(b, a), 0);
	assert_int_equal(sg_snapshot_count(b), 0);
	assert_int_equal(sg_snapshot_find(b, "x1", 2), -1);
	sg_snapshot_free(a);
	sg_snapshot_free(b);
}

/* --- reservations (sg-proxy(8)) ------------------------------------------- */

static sg_snapshot *
one(sg_cluster *c)
{
	sg_snapshot *s = sg_snapshot_new();

	assert_non_null(s);
	assert_int_equal(sg_snapshot_add(s, c, NULL), 0);
	return s;
}

static void
test_reserve_creates_entry_from_lower_key_and_raises_larger(void **state)
{
	/* tps 1000, {0:100, 5:40}, 500 tokens at priority 3: delta =
	 * ceil(500/1000*1000) = 500; the new entry 3 starts from the estimate
	 * at 3 (key 0: 100) -> 600; key 5 -> 540; key 0 untouched. */
	static const uint32_t k[] = { 0, 3, 5 };
	static const double ms[] = { 100, 600, 540 };
	sg_cluster c = mkcluster("A");
	const sg_cluster *r;
	sg_snapshot *s;

	(void)state;
	c.last_mean_input_tps = 1000;
	c.running = 2;
	c.queued = 1;
	c.queued_input_tokens = 300;
	c.total_input_tokens = 9000;
	sg_cluster_set_prio(&c, 0, 100);
	sg_cluster_set_prio(&c, 5, 40);
	s = one(&c);
	sg_snapshot_reserve(s, 0, 500, 3);
	r = sg_snapshot_get(s, 0);
	assert_true(r->running == 3);
	assert_true(r->queued == 2);
	assert_true(r->queued_input_tokens == 800);
	assert_true(r->total_input_tokens == 9500);
	assert_prio(r, 3, k, ms);
	sg_snapshot_free(s);
}

static void
test_reserve_at_existing_key_rounds_delta_up(void **state)
{
	/* tps 3000, {0:100, 5:40}, 1000 tokens at 5: 1000/3000*1000 =
	 * 333.33 -> delta 334; only key 5 moves (key 0 is more urgent). */
	static const uint32_t k[] = { 0, 5 };
	static const double ms[] = { 100, 374 };
	sg_cluster c = mkcluster("A");
	sg_snapshot *s;

	(void)state;
	c.last_mean_input_tps = 3000;
	sg_cluster_set_prio(&c, 0, 100);
	sg_cluster_set_prio(&c, 5, 40);
	s = one(&c);
	sg_snapshot_reserve(s, 0, 1000, 5);
	assert_prio(sg_snapshot_get(s, 0), 2, k, ms);
	sg_snapshot_free(s);
}

static void
test_reserve_more_urgent_than_every_key_starts_at_zero(void **state)
{
	/* {2:50, 8:10}, tps 4000, 2000 tokens at 0: delta 500; new entry 0
	 * starts at 0 (no key <= 0) -> 500; 2 -> 550; 8 -> 510. */
	static const uint32_t k[] = { 0, 2, 8 };
	static const double ms[] = { 500, 550, 510 };
	sg_cluster c = mkcluster("A");
	sg_snapshot *s;

	(void)state;
	c.last_mean_input_tps = 4000;
	sg_cluster_set_prio(&c, 2, 50);
	sg_cluster_set_prio(&c, 8, 10);
	s = one(&c);
	sg_snapshot_reserve(s, 0, 2000, 0);
	assert_prio(sg_snapshot_get(s, 0), 3, k, ms);
	sg_snapshot_free(s);
}

static void
test_reserve_zero_tokens_still_creates_entry(void **state)
{
	/* delta 0: the entry at 3 is created from key 0's 100 and nothing
	 * else moves; counters still count the request. */
	static const uint32_t k[] = { 0, 3, 5 };
	static const double ms[] = { 100, 100, 40 };
	sg_cluster c = mkcluster("A");
	sg_snapshot *s;

	(void)state;
	c.last_mean_input_tps = 1000;
	sg_cluster_set_prio(&c, 0, 100);
	sg_cluster_set_prio(&c, 5, 40);
	s = one(&c);
	sg_snapshot_reserve(s, 0, 0, 3);
	assert_prio(sg_snapshot_get(s, 0), 3, k, ms);
	assert_true(sg_snapshot_get(s, 0)->queued == 1);
	assert_true(sg_snapshot_get(s, 0)->running == 1);
	assert_true(sg_snapshot_get(s, 0)->queued_input_tokens == 0);
	sg_snapshot_free(s);
}

static void
test_reserve_with_invalid_tps_clears_map(void **state)
{
	static const double bad[] = { 0, -5, INFINITY, NAN };
	size_t i;

	(void)state;
	for (i = 0; i < 4; i++) {
		sg_cluster c = mkcluster("A");
		sg_snapshot *s;

		c.last_mean_input_tps = bad[i];
		sg_cluster_set_prio(&c, 0, 100);
		s = one(&c);
		sg_snapshot_reserve(s, 0, 10, 0);
		assert_int_equal(sg_snapshot_get(s, 0)->nprio, 0);
		assert_true(sg_snapshot_get(s, 0)->queued_input_tokens == 10);
		sg_snapshot_free(s);
	}
}

static void
test_reserve_leaves_empty_map_empty(void **state)
{
	sg_cluster c = mkcluster("A");
	sg_snapshot *s;

	(void)state;
	c.last_mean_input_tps = 1000;
	s = one(&c);
	sg_snapshot_reserve(s, 0, 500, 3);
	assert_int_equal(sg_snapshot_get(s, 0)->nprio, 0);
	assert_true(sg_snapshot_get(s, 0)->queued_input_tokens == 500);
	sg_snapshot_free(s);
}

static void
test_reserve_saturates(void **state)
{
	sg_cluster c = mkcluster("A");
	const sg_cluster *r;
	sg_snapshot *s;

	(void)state;
	c.queued = UINT64_MAX;
	c.running = UINT64_MAX - 1;
	c.queued_input_tokens = UINT64_MAX - 5;
	c.total_input_tokens = 7;
	c.last_mean_input_tps = 1e-300;	/* delta overflows u64 ms */
	sg_cluster_set_prio(&c, 0, 1);
	s = one(&c);
	sg_snapshot_reserve(s, 0, UINT64_MAX, 0);
	sg_snapshot_reserve(s, 0, UINT64_MAX, 0);
	r = sg_snapshot_get(s, 0);
	assert_true(r->queued == UINT64_MAX);
	assert_true(r->running == UINT64_MAX);
	assert_true(r->queued_input_tokens == UINT64_MAX);
	assert_true(r->total_input_tokens == UINT64_MAX);
	assert_true(isfinite(r->prio_ms[0]));
	assert_near(r->prio_ms[0], 18446744073709551615.0, 0);
	/* out-of-range index is a no-op */
	sg_snapshot_reserve(s, 1, 5, 0);
	assert_int_equal(sg_snapshot_count(s), 1);
	sg_snapshot_free(s);
}

static void
test_reserve_on_full_map_raises_answering_entry(void **state)
{
	/* keys 0,2,...,62 (32 entries) with ms = key; tps 1000, 100 tokens
	 * at 3 -> delta 100.  No room for key 3: key 2 (which answers for
	 * priority 3) and every larger key gain 100; key 0 does not. */
	sg_cluster c = mkcluster("A");
	const sg_cluster *r;
	sg_snapshot *s;
	uint32_t i;

	(void)state;
	c.last_mean_input_tps = 1000;
	for (i = 0; i < SG_PRIO_MAX; i++)
		sg_cluster_set_prio(&c, 2 * i, 2 * i);
	s = one(&c);
	sg_snapshot_reserve(s, 0, 100, 3);
	r = sg_snapshot_get(s, 0);
	assert_int_equal(r->nprio, SG_PRIO_MAX);
	assert_near(r->prio_ms[0], 0, 0);
	for (i = 1; i < SG_PRIO_MAX; i++) {
		assert_int_equal(r->prio_key[i], 2 * i);
		assert_near(r->prio_ms[i], 2 * i + 100, 0);
	}
	sg_snapshot_free(s);
}

/* --- JSON codec ----------------------------------------------------------- */

static json_t *
load_fixture(const char *name)
{
	json_error_t jerr;
	char path[256];
	json_t *j;

	snprintf(path, sizeof(path), FIXTURES "%s", name);
	j = json_load_file(path, 0, &jerr);
	if (j == NULL)
		fail_msg("%s: %s (run from the repository root)", path, jerr.text);
	return j;
}

static void
test_json_reads_spec_example(void **state)
{
	sg_snapshot *s = sg_snapshot_new();
	const sg_cluster *a, *b, *c;
	json_t *j = load_fixture("snapshot-spec.json");
	sg_error err;

	(void)state;
	assert_int_equal(sg_snapshot_from_json(s, j, &err), 0);
	assert_int_equal(sg_snapshot_count(s), 3);
	a = sg_snapshot_get(s, 0);
	assert_string_equal(a->id, "A");
	assert_near(a->rtt_ms, 2.0, 0);
	assert_true(a->max_engine_concurrency == 8 && a->running == 8);
	assert_true(a->queued == 1 && a->queued_input_tokens == 4000);
	assert_near(a->last_mean_input_tps, 20000, 0);	/* integer accepted */
	assert_near(a->max_input_tps, 40000, 0);
	assert_true(a->kv_capacity_tokens == 500000);
	assert_true(a->kv_used_tokens == 400000);
	assert_true(a->kv_free_tokens == 100000);
	assert_int_equal(a->nprio, 2);
	assert_int_equal(a->prio_key[0], 0);
	assert_near(a->prio_ms[0], 120, 0);
	assert_int_equal(a->prio_key[1], 5);
	assert_near(a->prio_ms[1], 40, 0);
	b = sg_snapshot_get(s, 1);
	assert_true(b->total_input_tokens == 123456789);
	assert_near(b->last_mean_input_tps, 1234.5678, 0);
	/* keys sorted numerically whatever the JSON order */
	assert_int_equal(b->prio_key[0], 3);
	assert_int_equal(b->prio_key[1], 7);
	assert_near(b->prio_ms[1], 0.5, 0);
	/* missing fields are unknown = 0 */
	c = sg_snapshot_get(s, 2);
	assert_string_equal(c->id, "C");
	assert_true(c->rtt_ms == 0 && c->max_engine_concurrency == 0 &&
	    c->running == 0 && c->queued == 0 && c->queued_input_tokens == 0 &&
	    c->last_mean_input_tps == 0 && c->max_input_tps == 0 &&
	    c->kv_capacity_tokens == 0 && c->nprio == 0);
	assert_int_equal(sg_snapshot_find(s, "B", 1), 1);
	json_decref(j);
	sg_snapshot_free(s);
}

static void
test_json_round_trips(void **state)
{
	sg_snapshot *s = sg_snapshot_new(), *t = sg_snapshot_new();
	json_t *j = load_fixture("snapshot-spec.json"), *out, *again;
	sg_cluster c;
	size_t i;

	(void)state;
	assert_int_equal(sg_snapshot_from_json(s, j, NULL), 0);
	/* add a cluster with awkward values built in C */
	c = mkcluster("weird \"id\" \xc3\xa9");
	c.rtt_ms = 0.1 + 0.2;
	c.last_mean_input_tps = 1.0 / 3.0;
	c.max_engine_concurrency = (uint64_t)INT64_MAX;
	sg_cluster_set_prio(&c, UINT32_MAX, 1e-9);
	sg_cluster_set_prio(&c, 0, 12345678901.5);
	assert_int_equal(sg_snapshot_add(s, &c, NULL), 0);

	out = sg_snapshot_to_json(s);
	assert_non_null(out);
	assert_int_equal(sg_snapshot_from_json(t, out, NULL), 0);
	assert_int_equal(sg_snapshot_count(t), sg_snapshot_count(s));
	for (i = 0; i < sg_snapshot_count(s); i++)
		assert_cluster_equal(sg_snapshot_get(s, i), sg_snapshot_get(t, i));
	/* and through text */
	{
		char *txt = json_dumps(out, JSON_COMPACT);
		json_error_t jerr;

		assert_non_null(txt);
		again = json_loads(txt, 0, &jerr);
		assert_non_null(again);
		sg_snapshot_clear(t);
		assert_int_equal(sg_snapshot_from_json(t, again, NULL), 0);
		for (i = 0; i < sg_snapshot_count(s); i++)
			assert_cluster_equal(sg_snapshot_get(s, i),
			    sg_snapshot_get(t, i));
		free(txt);
		json_decref(again);
	}
	/* every field is written, zeros included */
	{
		json_t *cc = json_array_get(json_object_get(out, "clusters"), 2);

		assert_int_equal(json_object_size(cc), 13);
		assert_true(json_is_object(json_object_get(cc,
		    "queue_time_ms_by_priority")));
		assert_int_equal(json_integer_value(json_object_get(cc,
		    "running")), 0);
	}
	json_decref(out);
	json_decref(j);
	sg_snapshot_free(s);
	sg_snapshot_free(t);
}

static void
test_json_writes_integral_numbers_as_integers(void **state)
{
	sg_cluster c = mkcluster("A");
	json_t *o;
	char *txt;

	(void)state;
	c.rtt_ms = 2;
	c.last_mean_input_tps = 20000;
	c.max_input_tps = 0.5;
	sg_cluster_set_prio(&c, 5, 40);
	o = sg_cluster_to_json(&c);
	txt = json_dumps(o, JSON_COMPACT);
	assert_non_null(strstr(txt, "\"rtt_ms\":2,"));
	assert_non_null(strstr(txt, "\"last_mean_input_tps\":20000,"));
	assert_non_null(strstr(txt, "\"max_input_tps\":0.5,"));
	assert_non_null(strstr(txt, "\"queue_time_ms_by_priority\":{\"5\":40}"));
	free(txt);
	json_decref(o);
}

static void
test_json_writes_invalid_rates_as_zero(void **state)
{
	sg_cluster c = mkcluster("A"), back;
	json_t *o;

	(void)state;
	c.last_mean_input_tps = NAN;
	c.max_input_tps = -3;
	c.rtt_ms = INFINITY;
	o = sg_cluster_to_json(&c);
	assert_non_null(o);
	assert_int_equal(sg_cluster_from_json(&back, o, NULL, NULL), 0);
	assert_true(back.last_mean_input_tps == 0);
	assert_true(back.max_input_tps == 0);
	assert_true(isfinite(back.rtt_ms) && back.rtt_ms > 1e300);
	json_decref(o);
}

static void
test_json_rejects_unknown_field_naming_it(void **state)
{
	(void)state;
	expect_reject("{\"clusters\":[{\"id\":\"A\"},{\"id\":\"B\",\"runing\":1}]}",
	    "clusters[1].runing: unknown field");
	expect_reject("{\"clusters\":[],\"version\":1}", "version: unknown field");
	expect_reject("{\"clusters\":[{\"id\":\"A\",\"cluster_id\":\"A\"}]}",
	    "clusters[0].cluster_id: unknown field");
}

static void
test_json_rejects_wrong_types_naming_field(void **state)
{
	(void)state;
	expect_reject("{\"clusters\":[{\"id\":\"A\",\"running\":\"8\"}]}",
	    "clusters[0].running: expected a non-negative integer");
	expect_reject("{\"clusters\":[{\"id\":\"A\",\"running\":8.0}]}",
	    "clusters[0].running: expected a non-negative integer");
	expect_reject("{\"clusters\":[{\"id\":\"A\",\"queued\":null}]}",
	    "clusters[0].queued: expected a non-negative integer");
	expect_reject("{\"clusters\":[{\"id\":\"A\",\"kv_free_tokens\":true}]}",
	    "clusters[0].kv_free_tokens: expected a non-negative integer");
	expect_reject("{\"clusters\":[{\"id\":\"A\",\"rtt_ms\":\"2\"}]}",
	    "clusters[0].rtt_ms: expected a non-negative number");
	expect_reject("{\"clusters\":[{\"id\":\"A\","
	    "\"queue_time_ms_by_priority\":[1]}]}",
	    "clusters[0].queue_time_ms_by_priority: expected an object");
	expect_reject("{\"clusters\":{}}", "clusters: expected an array");
	expect_reject("{\"clusters\":[7]}", "clusters[0]: expected an object");
	expect_reject("[]", "snapshot: expected an object");
	expect_reject("{}", "clusters: required");
}

static void
test_json_rejects_negative_values(void **state)
{
	(void)state;
	expect_reject("{\"clusters\":[{\"id\":\"A\",\"running\":-1}]}",
	    "clusters[0].running: expected a non-negative integer");
	expect_reject("{\"clusters\":[{\"id\":\"A\","
	    "\"queued_input_tokens\":-5}]}",
	    "clusters[0].queued_input_tokens: expected a non-negative integer");
	expect_reject("{\"clusters\":[{\"id\":\"A\",\"rtt_ms\":-0.5}]}",
	    "clusters[0].rtt_ms: expected a non-negative number");
	expect_reject("{\"clusters\":[{\"id\":\"A\","
	    "\"last_mean_input_tps\":-1}]}",
	    "clusters[0].last_mean_input_tps: expected a non-negative number");
	expect_reject("{\"clusters\":[{\"id\":\"A\","
	    "\"queue_time_ms_by_priority\":{\"0\":-1}}]}",
	    "clusters[0].queue_time_ms_by_priority.0: "
	    "expected a non-negative number");
}

static void
test_json_rejects_bad_ids(void **state)
{
	char text[600];

	(void)state;
	expect_reject("{\"clusters\":[{\"id\":\"A\"},{\"id\":\"A\"}]}",
	    "clusters[1].id: duplicate cluster id \"A\"");
	expect_reject("{\"clusters\":[{\"running\":1}]}",
	    "clusters[0].id: required");
	expect_reject("{\"clusters\":[{\"id\":\"\"}]}",
	    "clusters[0].id: expected a string of 1..256 bytes");
	expect_reject("{\"clusters\":[{\"id\":5}]}",
	    "clusters[0].id: expected a string of 1..256 bytes");
	expect_reject("{\"clusters\":[{\"id\":\"a\\u0000b\"}]}",
	    "clusters[0].id: expected a string of 1..256 bytes");
	snprintf(text, sizeof(text), "{\"clusters\":[{\"id\":\"%0257d\"}]}", 0);
	expect_reject(text, "clusters[0].id: expected a string of 1..256 bytes");
}

static void
test_json_rejects_bad_priority_maps(void **state)
{
	char text[1024];
	size_t len;
	int i;

	(void)state;
	len = (size_t)snprintf(text, sizeof(text),
	    "{\"clusters\":[{\"id\":\"A\",\"queue_time_ms_by_priority\":{");
	for (i = 0; i <= SG_PRIO_MAX; i++)
		len += (size_t)snprintf(text + len, sizeof(text) - len,
		    "%s\"%d\":1", i ? "," : "", i);
	snprintf(text + len, sizeof(text) - len, "}}]}");
	expect_reject(text, "clusters[0].queue_time_ms_by_priority: "
	    "more than 32 priority entries");
	expect_reject("{\"clusters\":[{\"id\":\"A\","
	    "\"queue_time_ms_by_priority\":{\"x\":1}}]}",
	    "clusters[0].queue_time_ms_by_priority: key \"x\" is not a "
	    "priority (decimal 0..4294967295)");
	expect_reject("{\"clusters\":[{\"id\":\"A\","
	    "\"queue_time_ms_by_priority\":{\"4294967296\":1}}]}",
	    "clusters[0].queue_time_ms_by_priority: key \"4294967296\" is not "
	    "a priority (decimal 0..4294967295)");
	expect_reject("{\"clusters\":[{\"id\":\"A\","
	    "\"queue_time_ms_by_priority\":{\"-1\":1}}]}",
	    "clusters[0].queue_time_ms_by_priority: key \"-1\" is not a "
	    "priority (decimal 0..4294967295)");
	expect_reject("{\"clusters\":[{\"id\":\"A\","
	    "\"queue_time_ms_by_priority\":{\"5\":1,\"05\":2}}]}",
	    "clusters[0].queue_time_ms_by_priority: duplicate priority 5");
	expect_reject("{\"clusters\":[{\"id\":\"A\","
	    "\"queue_time_ms_by_priority\":{\"5\":\"1\"}}]}",
	    "clusters[0].queue_time_ms_by_priority.5: "
	    "expected a non-negative number");
}

static void
test_json_accepts_exactly_max_priority_entries(void **state)
{
	sg_snapshot *s = sg_snapshot_new();
	char text[1024];
	sg_error err;
	size_t len;
	int i;

	(void)state;
	len = (size_t)snprintf(text, sizeof(text),
	    "{\"clusters\":[{\"id\":\"A\",\"queue_time_ms_by_priority\":{");
	for (i = SG_PRIO_MAX - 1; i >= 0; i--)
		len += (size_t)snprintf(text + len, sizeof(text) - len,
		    "%s\"%d\":%d", i != SG_PRIO_MAX - 1 ? "," : "", i * 10, i);
	snprintf(text + len, sizeof(text) - len, "}}]}");
	assert_int_equal(parse(s, text, &err), 0);
	assert_int_equal(sg_snapshot_get(s, 0)->nprio, SG_PRIO_MAX);
	assert_int_equal(sg_snapshot_get(s, 0)->prio_key[31], 310);
	assert_near(sg_snapshot_get(s, 0)->prio_ms[31], 31, 0);
	sg_snapshot_free(s);
}

static void
test_json_failure_leaves_snapshot_unchanged(void **state)
{
	sg_snapshot *s = sg_snapshot_new();
	sg_error err;

	(void)state;
	assert_int_equal(parse(s, "{\"clusters\":[{\"id\":\"keep\"}]}", &err), 0);
	assert_int_equal(parse(s, "{\"clusters\":[{\"id\":\"new\"},"
	    "{\"id\":\"x\",\"queued\":-1}]}", &err), SG_EINVAL);
	assert_int_equal(sg_snapshot_count(s), 1);
	assert_string_equal(sg_snapshot_get(s, 0)->id, "keep");
	assert_int_equal(sg_snapshot_find(s, "keep", 4), 0);
	/* success replaces */
	assert_int_equal(parse(s, "{\"clusters\":[]}", &err), 0);
	assert_int_equal(sg_snapshot_count(s), 0);
	sg_snapshot_free(s);
}

static void
test_cluster_from_json_without_prefix(void **state)
{
	json_t *j = json_pack("{s:s, s:s}", "id", "A", "runing", "1");
	sg_cluster c = mkcluster("unchanged");
	sg_error err;

	(void)state;
	assert_int_equal(sg_cluster_from_json(&c, j, NULL, &err), SG_EINVAL);
	assert_string_equal(err.text, "runing: unknown field");
	assert_string_equal(c.id, "unchanged");
	json_decref(j);
}

/* --- ids version ------------------------------------------------------------ */

/* Fill s with clusters named by ids (clearing it first). */
static void
fill(sg_snapshot *s, const char *const *ids, size_t n)
{
	size_t i;

	sg_snapshot_clear(s);
	for (i = 0; i < n; i++) {
		sg_cluster c = mkcluster(ids[i]);

		assert_int_equal(sg_snapshot_add(s, &c, NULL), 0);
	}
}

static void
test_ids_version_changes_with_the_set_and_order_of_ids(void **state)
{
	static const char *const ab[] = { "a", "b" }, *const ba[] = { "b", "a" };
	static const char *const ac[] = { "a", "c" }, *const abc[] = { "a",
	    "b", "c" };
	sg_snapshot *s = sg_snapshot_new();
	uint64_t empty, a, vab;
	sg_cluster c = mkcluster("a");

	(void)state;
	empty = sg_snapshot_ids_version(s);
	assert_int_equal(sg_snapshot_add(s, &c, NULL), 0);
	a = sg_snapshot_ids_version(s);
	assert_true(a != empty);
	c = mkcluster("b");
	assert_int_equal(sg_snapshot_add(s, &c, NULL), 0);
	vab = sg_snapshot_ids_version(s);
	assert_true(vab != a && vab != empty);
	/* a refused add changes nothing */
	assert_int_equal(sg_snapshot_add(s, &c, NULL), SG_EINVAL);
	assert_true(sg_snapshot_ids_version(s) == vab);

	sg_snapshot_clear(s);
	assert_true(sg_snapshot_ids_version(s) == empty);
	fill(s, ba, 2);
	assert_true(sg_snapshot_ids_version(s) != vab);		/* order */
	fill(s, ac, 2);
	assert_true(sg_snapshot_ids_version(s) != vab);		/* set */
	fill(s, abc, 3);
	assert_true(sg_snapshot_ids_version(s) != vab);		/* size */
	fill(s, ab, 2);
	assert_true(sg_snapshot_ids_version(s) == vab);		/* same list */
	sg_snapshot_free(s);
}

static void
test_ids_version_ignores_load_figures(void **state)
{
	static const char *const ab[] = { "a", "b" };
	sg_snapshot *s = sg_snapshot_new();
	uint64_t v;

	(void)state;
	fill(s, ab, 2);
	v = sg_snapshot_ids_version(s);
	sg_snapshot_at(s, 0)->running = 7;
	sg_snapshot_at(s, 1)->last_mean_input_tps = 123;
	sg_snapshot_reserve(s, 1, 100, 0);
	assert_true(sg_snapshot_ids_version(s) == v);
	sg_snapshot_free(s);
}

/* A random nonce per snapshot: the same ids in two snapshots differ. */
static void
test_ids_version_differs_between_snapshots(void **state)
{
	static const char *const ab[] = { "a", "b" };
	sg_snapshot *s = sg_snapshot_new(), *t = sg_snapshot_new();

	(void)state;
	assert_true(sg_snapshot_ids_version(s) != sg_snapshot_ids_version(t));
	fill(s, ab, 2);
	fill(t, ab, 2);
	assert_true(sg_snapshot_ids_version(s) != sg_snapshot_ids_version(t));
	sg_snapshot_free(s);
	sg_snapshot_free(t);
}

static void
test_copy_takes_the_source_ids_version(void **state)
{
	static const char *const ab[] = { "a", "b" }, *const xyz[] = { "x",
	    "y", "z" };
	sg_snapshot *s = sg_snapshot_new(), *t = sg_snapshot_new();
	sg_cluster c = mkcluster("c");
	uint64_t before;

	(void)state;
	fill(s, ab, 2);
	fill(t, xyz, 3);
	before = sg_snapshot_ids_version(t);
	assert_int_equal(sg_snapshot_copy(t, s), 0);
	assert_true(sg_snapshot_ids_version(t) != before);
	assert_true(sg_snapshot_ids_version(t) == sg_snapshot_ids_version(s));
	/* the same change to both keeps them equal, another one does not */
	assert_int_equal(sg_snapshot_add(s, &c, NULL), 0);
	assert_int_equal(sg_snapshot_add(t, &c, NULL), 0);
	assert_true(sg_snapshot_ids_version(t) == sg_snapshot_ids_version(s));
	c = mkcluster("d");
	assert_int_equal(sg_snapshot_add(t, &c, NULL), 0);
	assert_true(sg_snapshot_ids_version(t) != sg_snapshot_ids_version(s));
	sg_snapshot_free(s);
	sg_snapshot_free(t);
}

static void
test_from_json_sets_the_ids_version(void **state)
{
	static const char *const ab[] = { "a", "b" };
	sg_snapshot *s = sg_snapshot_new();
	sg_error err;
	uint64_t vab, v;

	(void)state;
	fill(s, ab, 2);
	vab = sg_snapshot_ids_version(s);
	assert_int_equal(parse(s, "{\"clusters\":[{\"id\":\"b\"},"
	    "{\"id\":\"a\"}]}", &err), 0);
	v = sg_snapshot_ids_version(s);
	assert_true(v != vab);
	/* a failed parse leaves the ids and their version */
	assert_int_equal(parse(s, "{\"clusters\":[{\"id\":\"q\","
	    "\"running\":-1}]}", &err), SG_EINVAL);
	assert_true(sg_snapshot_ids_version(s) == v);
	/* the same ids as before, with other figures: the same version */
	assert_int_equal(parse(s, "{\"clusters\":[{\"id\":\"a\","
	    "\"running\":3},{\"id\":\"b\"}]}", &err), 0);
	assert_true(sg_snapshot_ids_version(s) == vab);
	sg_snapshot_free(s);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cluster_init_checks_id_length),
		cmocka_unit_test(test_set_prio_keeps_keys_sorted_and_replaces),
		cmocka_unit_test(test_add_find_get_keep_candidate_order),
		cmocka_unit_test(test_add_refuses_past_max_candidates),
		cmocka_unit_test(test_copy_is_deep_and_indexed),
		cmocka_unit_test(test_reserve_creates_entry_from_lower_key_and_raises_larger),
		cmocka_unit_test(test_reserve_at_existing_key_rounds_delta_up),
		cmocka_unit_test(test_reserve_more_urgent_than_every_key_starts_at_zero),
		cmocka_unit_test(test_reserve_zero_tokens_still_creates_entry),
		cmocka_unit_test(test_reserve_with_invalid_tps_clears_map),
		cmocka_unit_test(test_reserve_leaves_empty_map_empty),
		cmocka_unit_test(test_reserve_saturates),
		cmocka_unit_test(test_reserve_on_full_map_raises_answering_entry),
		cmocka_unit_test(test_json_reads_spec_example),
		cmocka_unit_test(test_json_round_trips),
		cmocka_unit_test(test_json_writes_integral_numbers_as_integers),
		cmocka_unit_test(test_json_writes_invalid_rates_as_zero),
		cmocka_unit_test(test_json_rejects_unknown_field_naming_it),
		cmocka_unit_test(test_json_rejects_wrong_types_naming_field),
		cmocka_unit_test(test_json_rejects_negative_values),
		cmocka_unit_test(test_json_rejects_bad_ids),
		cmocka_unit_test(test_json_rejects_bad_priority_maps),
		cmocka_unit_test(test_json_accepts_exactly_max_priority_entries),
		cmocka_unit_test(test_json_failure_leaves_snapshot_unchanged),
		cmocka_unit_test(test_cluster_from_json_without_prefix),
		cmocka_unit_test(test_ids_version_changes_with_the_set_and_order_of_ids),
		cmocka_unit_test(test_ids_version_ignores_load_figures),
		cmocka_unit_test(test_ids_version_differs_between_snapshots),
		cmocka_unit_test(test_copy_takes_the_source_ids_version),
		cmocka_unit_test(test_from_json_sets_the_ids_version),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
