/*
 * test_vllm.c — sg_vllm.c: vLLM /metrics to cluster stats.  The shared
 * two-engine fixture (tests/fixtures/vllm-metrics.txt, expected figures
 * worked by hand), a capture of sg-mockengine's /metrics checked against
 * its own /stats of the same moment (tests/fixtures/clusters/), the
 * prompt-token rate, fallbacks from the cluster entry, tolerance of the
 * exposition format, and the bounds.  Run from the repository root.
 */
#include "sg_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "sg_vllm.h"

#define FIXTURES	"tests/fixtures/"
#define LLAMA		"meta-llama/Llama-3.1-8B-Instruct"

static char *
slurp(const char *path, size_t *len)
{
	FILE *fp = fopen(path, "rb");
	char *buf;
	long n;

	if (fp == NULL)
		fail_msg("cannot open %s", path);
	fseek(fp, 0, SEEK_END);
	n = ftell(fp);
	rewind(fp);
	assert_non_null(buf = malloc((size_t)n + 1));
	assert_int_equal(fread(buf, 1, (size_t)n, fp), (size_t)n);
	buf[n] = '\0';
	fclose(fp);
	*len = (size_t)n;
	return buf;
}

static void
parse_file(const char *path, const char *model, sg_vllm_sample *s)
{
	sg_error e;
	size_t len;
	char *text = slurp(path, &len);

	sg_error_clear(&e);
	if (sg_vllm_parse(text, len, model, s, &e) != 0)
		fail_msg("%s: %s", path, e.text);
	free(text);
}

static int
parse_str(const char *text, const char *model, sg_vllm_sample *s,
    sg_error *e)
{
	sg_error_clear(e);
	return sg_vllm_parse(text, strlen(text), model, s, e);
}

static sg_clusterdef
mkdef(void)
{
	sg_clusterdef d;

	memset(&d, 0, sizeof(d));
	memcpy(d.id, "gpu-a", 5);
	d.id_len = 5;
	d.stats_format = SG_STATS_VLLM;
	return d;
}

static void
test_shared_fixture(void **state)
{
	/* running 12 + 9 = 21, waiting 3; capacity 2 · 29360 · 16 = 939520;
	 * used 0.8125 · 469760 + 0.4375 · 469760 = 381680 + 205520 =
	 * 587200, free 352320; prompt tokens 1263648 + 1104000. */
	sg_clusterdef d = mkdef();
	sg_vllm_sample s;
	sg_cluster c;

	(void)state;
	parse_file(FIXTURES "vllm-metrics.txt", LLAMA, &s);
	assert_true(s.have_running && s.have_waiting && s.have_kv_usage &&
	    s.have_blocks && s.have_prompt_total);
	assert_near(s.running, 21, 0);
	assert_near(s.waiting, 3, 0);
	assert_true(s.block_size == 16);
	assert_true(s.num_gpu_blocks == 58720);
	assert_true(s.kv_capacity_tokens == 939520);
	assert_near(s.kv_used_tokens, 587200, 1e-6);
	assert_near(s.kv_usage, 0.625, 1e-12);
	assert_near(s.prompt_tokens_total, 2367648, 0);
	assert_int_equal(s.engines, 2);

	d.max_engine_concurrency = 64;
	d.max_input_tps = 40000;
	d.has_rtt = true;
	d.rtt_ms = 1.5;
	assert_int_equal(sg_vllm_to_cluster(&s, NULL, 0, 0, &d, &c, NULL), 0);
	assert_string_equal(c.id, "gpu-a");
	assert_true(c.running == 24);		/* running counts waiting */
	assert_true(c.queued == 3);
	assert_true(c.kv_capacity_tokens == 939520);
	assert_true(c.kv_used_tokens == 587200);
	assert_true(c.kv_free_tokens == 352320);
	assert_true(c.max_engine_concurrency == 64);
	assert_near(c.last_mean_input_tps, 40000, 0);	/* no rate yet */
	assert_near(c.max_input_tps, 40000, 0);
	assert_near(c.rtt_ms, 1.5, 0);
	assert_true(c.queued_input_tokens == 0 && c.nprio == 0);

	/* NULL model: every series (one model here anyway) */
	parse_file(FIXTURES "vllm-metrics.txt", NULL, &s);
	assert_near(s.running, 21, 0);
}

static void
test_model_filter(void **state)
{
	static const char text[] =
	    "vllm:num_requests_running{model_name=\"a\"} 3\n"
	    "vllm:num_requests_running{model_name=\"b\"} 5\n"
	    "vllm:num_requests_waiting{model_name=\"b\"} 1\n";
	sg_vllm_sample s;
	sg_error e;
	size_t len;
	char *t;

	(void)state;
	assert_int_equal(parse_str(text, "b", &s, &e), 0);
	assert_near(s.running, 5, 0);
	assert_near(s.waiting, 1, 0);
	assert_int_equal(parse_str(text, NULL, &s, &e), 0);
	assert_near(s.running, 8, 0);
	assert_int_equal(parse_str(text, "a", &s, &e), 0);
	assert_false(s.have_waiting);
	t = slurp(FIXTURES "vllm-metrics.txt", &len);
	assert_int_equal(sg_vllm_parse(t, len, "other", &s, &e), SG_EINVAL);
	assert_string_equal(e.text, "no vllm:num_requests_running sample for "
	    "the model");
	assert_false(s.have_running);
	free(t);
	assert_int_equal(parse_str("", NULL, &s, &e), SG_EINVAL);
	assert_string_equal(e.text, "no vllm:num_requests_running sample");
}

static void
test_mockengine_capture_matches_its_stats(void **state)
{
	/* Captured from sg-mockengine -m test-model -c 4 --kv-capacity
	 * 100000 with 2 slots held and one request served; its /stats at
	 * the same moment is mockengine-stats.json. */
	sg_clusterdef d = mkdef();
	sg_vllm_sample s;
	sg_cluster c;
	json_error_t je;
	json_t *st;

	(void)state;
	parse_file(FIXTURES "clusters/mockengine-metrics.txt", "test-model",
	    &s);
	d.max_engine_concurrency = 4;
	assert_int_equal(sg_vllm_to_cluster(&s, NULL, 0, 0, &d, &c, NULL), 0);
	assert_non_null(st = json_load_file(FIXTURES
	    "clusters/mockengine-stats.json", 0, &je));
#define SAME(f) assert_true(c.f == (uint64_t)json_integer_value( \
	json_object_get(st, #f)))
	SAME(running);
	SAME(queued);
	SAME(max_engine_concurrency);
	SAME(kv_capacity_tokens);
	SAME(kv_used_tokens);
	SAME(kv_free_tokens);
#undef SAME
	assert_true(c.running == 2 && c.kv_capacity_tokens == 100000);
	assert_near(s.prompt_tokens_total, 6, 0);
	json_decref(st);
	/* the mock also exports the older gpu_ name; the newer one wins */
	assert_true(s.have_kv_usage);
}

static void
test_input_tps_rate(void **state)
{
	sg_clusterdef d = mkdef();
	sg_vllm_sample prev, cur;
	sg_cluster c;
	sg_error e;

	(void)state;
	assert_int_equal(parse_str("vllm:num_requests_running 1\n"
	    "vllm:prompt_tokens_total 1000\n", NULL, &prev, &e), 0);
	assert_int_equal(parse_str("vllm:num_requests_running 1\n"
	    "vllm:prompt_tokens_total 3000\n", NULL, &cur, &e), 0);
	/* 2000 tokens in 0.5 s */
	assert_int_equal(sg_vllm_to_cluster(&cur, &prev, 0.5, 7, &d, &c, &e),
	    0);
	assert_near(c.last_mean_input_tps, 4000, 1e-9);
	/* still counter: the previous rate is kept */
	assert_int_equal(sg_vllm_to_cluster(&cur, &cur, 0.5, 4000, &d, &c,
	    &e), 0);
	assert_near(c.last_mean_input_tps, 4000, 0);
	/* counter reset (engine restart): kept too */
	assert_int_equal(sg_vllm_to_cluster(&prev, &cur, 0.5, 4000, &d, &c,
	    &e), 0);
	assert_near(c.last_mean_input_tps, 4000, 0);
	/* no rate, no fallback: unknown (0) */
	assert_int_equal(sg_vllm_to_cluster(&cur, &cur, 0.5, 0, &d, &c, &e),
	    0);
	assert_near(c.last_mean_input_tps, 0, 0);
	/* zero or bad interval: no rate */
	assert_int_equal(sg_vllm_to_cluster(&cur, &prev, 0, 9, &d, &c, &e), 0);
	assert_near(c.last_mean_input_tps, 9, 0);
	d.max_input_tps = 123;
	assert_int_equal(sg_vllm_to_cluster(&cur, &cur, NAN, NAN, &d, &c, &e),
	    0);
	assert_near(c.last_mean_input_tps, 123, 0);
}

static void
test_kv_fallbacks(void **state)
{
	sg_clusterdef d = mkdef();
	sg_vllm_sample s;
	sg_cluster c;
	sg_error e;

	(void)state;
	/* older name only, no cache_config_info: capacity from the entry */
	assert_int_equal(parse_str("vllm:num_requests_running 0\n"
	    "vllm:gpu_cache_usage_perc 0.25\n", NULL, &s, &e), 0);
	assert_true(s.have_kv_usage && !s.have_blocks);
	d.kv_capacity_tokens = 1000;
	assert_int_equal(sg_vllm_to_cluster(&s, NULL, 0, 0, &d, &c, &e), 0);
	assert_true(c.kv_capacity_tokens == 1000 && c.kv_used_tokens == 250 &&
	    c.kv_free_tokens == 750);
	/* both names: kv_cache_usage_perc wins */
	assert_int_equal(parse_str("vllm:num_requests_running 0\n"
	    "vllm:gpu_cache_usage_perc 0.25\n"
	    "vllm:kv_cache_usage_perc 0.5\n", NULL, &s, &e), 0);
	assert_near(s.kv_usage, 0.5, 0);
	/* no usage at all: capacity known, all free */
	assert_int_equal(parse_str("vllm:num_requests_running 0\n"
	    "vllm:cache_config_info{block_size=\"32\",num_gpu_blocks=\"10\"} 1"
	    "\n", NULL, &s, &e), 0);
	assert_int_equal(sg_vllm_to_cluster(&s, NULL, 0, 0, &d, &c, &e), 0);
	assert_true(c.kv_capacity_tokens == 320 && c.kv_used_tokens == 0 &&
	    c.kv_free_tokens == 320);
	/* nothing known: zeros (unknown) */
	d.kv_capacity_tokens = 0;
	assert_int_equal(parse_str("vllm:num_requests_running 0\n"
	    "vllm:kv_cache_usage_perc 0.5\n", NULL, &s, &e), 0);
	assert_int_equal(sg_vllm_to_cluster(&s, NULL, 0, 0, &d, &c, &e), 0);
	assert_true(c.kv_capacity_tokens == 0 && c.kv_used_tokens == 0 &&
	    c.kv_free_tokens == 0);
	/* usage paired per engine: 1.0 of 100 + 0.0 of 300 = 100 of 400 */
	assert_int_equal(parse_str("vllm:num_requests_running 0\n"
	    "vllm:kv_cache_usage_perc{engine=\"0\"} 1\n"
	    "vllm:kv_cache_usage_perc{engine=\"1\"} 0\n"
	    "vllm:cache_config_info{engine=\"1\",block_size=\"3\","
	    "num_gpu_blocks=\"100\"} 1\n"
	    "vllm:cache_config_info{engine=\"0\",block_size=\"1\","
	    "num_gpu_blocks=\"100\"} 1\n", NULL, &s, &e), 0);
	assert_true(s.kv_capacity_tokens == 400);
	assert_near(s.kv_used_tokens, 100, 0);
	assert_near(s.kv_usage, 0.25, 0);
}

static void
test_tolerates_the_exposition_format(void **state)
{
	static const char text[] =
	    "# HELP vllm:num_requests_running Running.\r\n"
	    "# TYPE vllm:num_requests_running gauge\r\n"
	    "\r\n"
	    "   \n"
	    "# a comment with {braces and \"quotes\n"
	    "weird_family{a=\"unterminated 1\n"
	    "other_family{x=\"1\"} NaN\n"
	    "vllm:num_requests_running{model_name=\"a\\\"b\\\\c\\nd\","
	    "engine=\"0\",} 4 1700000000000\r\n"
	    "vllm:num_requests_running { model_name = \"a\\\"b\\\\c\\nd\" } "
	    " 1.5e0\n"
	    "vllm:num_requests_running{model_name=\"x\"} 100\n"
	    "vllm:num_requests_waiting{model_name=\"a\\\"b\\\\c\\nd\"} NaN\n"
	    "vllm:num_requests_waiting{model_name=\"a\\\"b\\\\c\\nd\"} +Inf\n"
	    "vllm:num_requests_waiting{model_name=\"a\\\"b\\\\c\\nd\"} 2 -5\n"
	    "vllm:num_requests_running_total 50\n"
	    "vllm:prompt_tokens_total{model_name=\"a\\\"b\\\\c\\nd\"} 1e3";
	sg_vllm_sample s;
	sg_error e;

	(void)state;
	if (parse_str(text, "a\"b\\c\nd", &s, &e) != 0)
		fail_msg("%s", e.text);
	assert_near(s.running, 5.5, 0);
	assert_near(s.waiting, 2, 0);
	assert_near(s.prompt_tokens_total, 1000, 0);
	assert_false(s.have_kv_usage);
	assert_false(s.have_blocks);
}

static void
expect_bad(const char *text, const char *msg)
{
	sg_vllm_sample s;
	sg_error e;

	assert_int_equal(parse_str(text, NULL, &s, &e), SG_EINVAL);
	assert_string_equal(e.text, msg);
	assert_false(s.have_running);
}

static void
test_rejects_bad_lines_of_used_families(void **state)
{
	(void)state;
	expect_bad("x 1\nvllm:num_requests_running{a=\"1} 2\n",
	    "line 2: unterminated label value");
	expect_bad("vllm:num_requests_running{a=1} 2\n",
	    "line 1: expected a quoted label value");
	expect_bad("vllm:num_requests_running{a=\"\\t\"} 2\n",
	    "line 1: bad escape in label value");
	expect_bad("vllm:num_requests_running{a:b=\"1\"} 2\n",
	    "line 1: expected '=' after a label name");
	expect_bad("vllm:num_requests_running{=\"1\"} 2\n",
	    "line 1: bad label name");
	expect_bad("vllm:num_requests_running{a=\"1\" b=\"2\"} 2\n",
	    "line 1: expected ',' or '}' in labels");
	expect_bad("vllm:num_requests_running\n",
	    "line 1: expected a space before the value");
	expect_bad("vllm:num_requests_running 2x\n",
	    "line 1: bad sample value");
	expect_bad("vllm:num_requests_running 2 12.5\n",
	    "line 1: bad timestamp");
	expect_bad("vllm:num_requests_running 2 3 4\n",
	    "line 1: bad timestamp");
}

static void
test_bounds(void **state)
{
	sg_vllm_sample s;
	sg_error e;
	size_t n, i;
	char *t;

	(void)state;
	/* one line over SG_VLLM_MAX_LINE */
	n = SG_VLLM_MAX_LINE + 40;
	assert_non_null(t = malloc(n + 1));
	memcpy(t, "vllm:num_requests_running 1\n# ", 30);
	memset(t + 30, 'x', n - 30);
	t[n] = '\0';
	assert_int_equal(sg_vllm_parse(t, n, NULL, &s, &e), SG_EINVAL);
	assert_string_equal(e.text, "line 2: longer than 65536 bytes");
	free(t);
	/* SG_VLLM_MAX_SAMPLES + 1 samples */
	n = 4 * ((size_t)SG_VLLM_MAX_SAMPLES + 1);
	assert_non_null(t = malloc(n));
	for (i = 0; i < n; i += 4)
		memcpy(t + i, "x 1\n", 4);
	assert_int_equal(sg_vllm_parse(t, n, NULL, &s, &e), SG_EINVAL);
	assert_string_equal(e.text, "more than 1000000 samples");
	/* exactly the bound is fine (with the family we need first) */
	memcpy(t, "vllm:num_requests_running 1\n", 28);
	assert_int_equal(sg_vllm_parse(t, n - 4 - 4 * 6, NULL, &s, &e), 0);
	free(t);
	/* more than SG_VLLM_MAX_ENGINES engines */
	n = 80 * 64;
	assert_non_null(t = malloc(n));
	for (i = 0, n = 0; i <= SG_VLLM_MAX_ENGINES; i++)
		n += (size_t)snprintf(t + n, 80,
		    "vllm:kv_cache_usage_perc{engine=\"%zu\"} 0\n", i);
	assert_int_equal(sg_vllm_parse(t, n, NULL, &s, &e), SG_EINVAL);
	assert_string_equal(e.text, "line 65: more than 64 engines");
	free(t);
}

/* Found by tests/fuzz/fuzz_vllm.c: counts past 2^63 (and block products
 * past 2^64) saturate at INT64_MAX, so the cluster round-trips through
 * the snapshot codec. */
static void
test_huge_counts_saturate_at_int64_max(void **state)
{
	static const char text[] =
	    "vllm:num_requests_running 99999999999999999999999\n"
	    "vllm:num_requests_waiting 1e30\n"
	    "vllm:kv_cache_usage_perc{engine=\"0\"} 0.5\n"
	    "vllm:kv_cache_usage_perc{engine=\"1\"} 0.5\n"
	    "vllm:cache_config_info{engine=\"0\","
	    "block_size=\"18446744073709551615\",num_gpu_blocks=\"3\"} 1\n"
	    "vllm:cache_config_info{engine=\"1\","
	    "block_size=\"9223372036854775807\",num_gpu_blocks=\"1\"} 1\n";
	sg_clusterdef d = mkdef();
	sg_vllm_sample s;
	sg_cluster c, back;
	sg_error e;
	json_t *j;

	(void)state;
	assert_int_equal(parse_str(text, NULL, &s, &e), 0);
	assert_true(s.kv_capacity_tokens == (uint64_t)INT64_MAX);
	assert_int_equal(sg_vllm_to_cluster(&s, NULL, 0, 0, &d, &c, &e), 0);
	assert_true(c.running == (uint64_t)INT64_MAX);
	assert_true(c.queued == (uint64_t)INT64_MAX);
	assert_true(c.kv_capacity_tokens == (uint64_t)INT64_MAX);
	assert_true(c.kv_used_tokens + c.kv_free_tokens ==
	    c.kv_capacity_tokens);
	assert_non_null(j = sg_cluster_to_json(&c));
	assert_int_equal(sg_cluster_from_json(&back, j, "stats", &e), 0);
	assert_true(back.running == c.running && back.queued == c.queued &&
	    back.kv_capacity_tokens == c.kv_capacity_tokens &&
	    back.kv_used_tokens == c.kv_used_tokens);
	json_decref(j);
}

static void
test_to_cluster_rejects_missing_input(void **state)
{
	sg_clusterdef d = mkdef();
	sg_vllm_sample s;
	sg_cluster c;
	sg_error e;

	(void)state;
	memset(&s, 0, sizeof(s));
	assert_int_equal(sg_vllm_to_cluster(&s, NULL, 0, 0, &d, &c, &e),
	    SG_EINVAL);
	assert_string_equal(e.text, "vllm stats: no running count");
	assert_int_equal(sg_vllm_to_cluster(NULL, NULL, 0, 0, &d, &c, &e),
	    SG_EINVAL);
	/* negative gauges count as 0 */
	assert_int_equal(parse_str("vllm:num_requests_running -3\n"
	    "vllm:num_requests_waiting -1\n", NULL, &s, &e), 0);
	assert_int_equal(sg_vllm_to_cluster(&s, NULL, 0, 0, &d, &c, &e), 0);
	assert_true(c.running == 0 && c.queued == 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_shared_fixture),
		cmocka_unit_test(test_model_filter),
		cmocka_unit_test(test_mockengine_capture_matches_its_stats),
		cmocka_unit_test(test_input_tps_rate),
		cmocka_unit_test(test_kv_fallbacks),
		cmocka_unit_test(test_tolerates_the_exposition_format),
		cmocka_unit_test(test_rejects_bad_lines_of_used_families),
		cmocka_unit_test(test_bounds),
		cmocka_unit_test(test_huge_counts_saturate_at_int64_max),
		cmocka_unit_test(test_to_cluster_rejects_missing_input),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
