/*
 * test_clusterfile.c — sg_clusterfile.c: the cluster file of
 * stargate-clusters(5): the stargate-clusters(5) example, defaults, the to_json
 * round trip, and rejection of every kind of bad input with a message
 * naming the field.  Run from the repository root (fixtures are read from
 * tests/fixtures/clusters/).
 */
#include "sg_test.h"

#include <stdio.h>

#include "sg_clusterfile.h"

#define FIXTURES	"tests/fixtures/clusters/"

static sg_clusterfile *
parse_ok(const char *text)
{
	sg_clusterfile *cf = NULL;
	sg_error e;

	sg_error_clear(&e);
	if (sg_clusterfile_parse(&cf, text, strlen(text), &e) != 0)
		fail_msg("rejected: %s: %s", e.text, text);
	return cf;
}

/* Expect text to be rejected with exactly this message. */
static void
expect_reject(const char *text, const char *msg)
{
	sg_clusterfile *cf = (sg_clusterfile *)1;
	sg_error e;
	int rc;

	sg_error_clear(&e);
	rc = sg_clusterfile_parse(&cf, text, strlen(text), &e);
	if (rc != SG_ECONFIG)
		fail_msg("accepted (%d): %s", rc, text);
	assert_null(cf);
	assert_string_equal(e.text, msg);
}

/* One cluster entry with the given fields after the required ones. */
#define ONE(extra)	"{\"clusters\":[{\"id\":\"A\",\"url\":\"http://h:1\"," \
	"\"models\":[\"m\"]" extra "}]}"
/* The clusters member of ONE(""), to follow top-level fields. */
#define CLS	"\"clusters\":[{\"id\":\"A\",\"url\":\"http://h:1\"," \
	"\"models\":[\"m\"]}]}"

static void
test_spec_example(void **state)
{
	sg_clusterfile *cf;
	sg_error e;
	const sg_clusterdef *d;

	(void)state;
	assert_int_equal(sg_clusterfile_load(&cf, FIXTURES "spec-example.json",
	    &e), 0);
	assert_true(cf->stats_interval_ms == 250);
	assert_true(cf->stats_stale_ms == 3000);
	assert_true(cf->stats_timeout_ms == 1000);
	assert_int_equal(cf->n, 1);
	d = &cf->c[0];
	assert_string_equal(d->id, "A");
	assert_int_equal(d->id_len, 1);
	assert_string_equal(d->url, "http://10.0.0.1:8000");
	assert_int_equal(d->nmodels, 1);
	assert_string_equal(d->models[0], "m");
	assert_int_equal(d->stats_format, SG_STATS_STARGATE);
	assert_string_equal(d->stats_url, "http://10.0.0.1:8000/stats");
	assert_true(d->max_engine_concurrency == 64);
	assert_true(d->has_rtt);
	assert_near(d->rtt_ms, 1.5, 0);
	assert_true(d->max_input_tps == 0 && d->kv_capacity_tokens == 0);
	assert_true(sg_clusterdef_serves(d, "m"));
	assert_false(sg_clusterdef_serves(d, "M"));
	assert_false(sg_clusterdef_serves(d, NULL));
	sg_clusterfile_free(cf);
}

static void
test_defaults_and_formats(void **state)
{
	sg_clusterfile *cf;
	sg_error e;
	const sg_clusterdef *d;

	(void)state;
	assert_int_equal(sg_clusterfile_load(&cf, FIXTURES "mixed.json", &e),
	    0);
	assert_true(cf->stats_interval_ms == 100);
	assert_true(cf->stats_stale_ms == 500);
	assert_true(cf->stats_timeout_ms == 500);	/* min(1000, stale) */
	assert_int_equal(cf->n, 3);
	d = &cf->c[0];
	assert_string_equal(d->url, "http://127.0.0.1:8001");	/* no '/' */
	assert_string_equal(d->stats_url, "http://127.0.0.1:8001/stats");
	assert_false(d->has_rtt);
	assert_true(d->max_engine_concurrency == 0);
	assert_true(sg_clusterdef_serves(d, "m-large"));
	d = &cf->c[1];
	assert_int_equal(d->stats_format, SG_STATS_VLLM);
	assert_string_equal(d->stats_url, "http://gpu-b.internal:8000/metrics");
	assert_near(d->max_input_tps, 40000, 0);
	assert_true(d->kv_capacity_tokens == 900000);
	d = &cf->c[2];
	assert_string_equal(d->url, "http://[::1]:9000");
	assert_string_equal(d->stats_url,
	    "http://[::1]:9001/agent/stats?model=m");
	assert_int_equal(sg_clusterfile_find(cf, "v6", 2), 2);
	assert_int_equal(sg_clusterfile_find(cf, "v", 1), -1);
	sg_clusterfile_free(cf);

	cf = parse_ok(ONE(""));
	assert_true(cf->stats_interval_ms == 250 && cf->stats_stale_ms == 3000);
	assert_true(cf->stats_timeout_ms == 1000);
	assert_string_equal(cf->c[0].stats_url, "http://h:1/stats");
	sg_clusterfile_free(cf);
	cf = parse_ok("{\"stats_timeout_ms\":3000," CLS);
	assert_true(cf->stats_timeout_ms == 3000);
	sg_clusterfile_free(cf);
}

static void
test_round_trip(void **state)
{
	sg_clusterfile *a, *b;
	json_t *ja, *jb;
	char *text;
	sg_error e;

	(void)state;
	assert_int_equal(sg_clusterfile_load(&a, FIXTURES "mixed.json", &e),
	    0);
	assert_non_null(ja = sg_clusterfile_to_json(a));
	assert_non_null(text = json_dumps(ja, JSON_COMPACT));
	assert_int_equal(sg_clusterfile_parse(&b, text, strlen(text), &e), 0);
	assert_non_null(jb = sg_clusterfile_to_json(b));
	assert_true(json_equal(ja, jb));
	assert_string_equal(json_string_value(json_object_get(json_object_get(
	    json_array_get(json_object_get(ja, "clusters"), 1), "stats"),
	    "format")), "vllm");
	free(text);
	json_decref(ja);
	json_decref(jb);
	sg_clusterfile_free(a);
	sg_clusterfile_free(b);
}

static void
test_rejects_unknown_fields(void **state)
{
	(void)state;
	expect_reject("{\"stats_intervall_ms\":1," CLS,
	    "stats_intervall_ms: unknown field");
	expect_reject(ONE(",\"rtt\":1"), "clusters[0].rtt: unknown field");
	expect_reject(ONE(",\"stats\":{\"fromat\":\"vllm\"}"),
	    "clusters[0].stats.fromat: unknown field");
}

static void
test_rejects_bad_structure(void **state)
{
	(void)state;
	expect_reject("", "1:0: invalid JSON: '[' or '{' expected near end "
	    "of file");
	expect_reject("[]", "top level must be a JSON object");
	expect_reject("{}", "clusters: required");
	expect_reject("{\"clusters\":[]}", "clusters: expected a non-empty "
	    "array");
	expect_reject("{\"clusters\":{}}", "clusters: expected a non-empty "
	    "array");
	expect_reject("{\"clusters\":[1]}", "clusters[0]: expected an object");
	expect_reject("{\"clusters\":[{\"url\":\"http://h\",\"models\":"
	    "[\"m\"]}]}", "clusters[0].id: required");
	expect_reject("{\"clusters\":[{\"id\":\"A\",\"models\":[\"m\"]}]}",
	    "clusters[0].url: required");
	expect_reject("{\"clusters\":[{\"id\":\"A\",\"url\":\"http://h\"}]}",
	    "clusters[0].models: required");
	expect_reject("{\"clusters\":[{\"id\":\"A\",\"id\":\"B\"}]}",
	    "1:27: invalid JSON: duplicate object key near '\"id\"'");
}

static void
test_rejects_bad_values(void **state)
{
	(void)state;
	expect_reject("{\"clusters\":[{\"id\":\"\",\"url\":\"http://h\","
	    "\"models\":[\"m\"]}]}", "clusters[0].id: expected a string of "
	    "1..256 bytes without control characters");
	expect_reject("{\"clusters\":[{\"id\":\"a\\nb\",\"url\":\"http://h\","
	    "\"models\":[\"m\"]}]}", "clusters[0].id: expected a string of "
	    "1..256 bytes without control characters");
	expect_reject("{\"clusters\":[{\"id\":\"A\",\"url\":\"http://h\","
	    "\"models\":[]}]}", "clusters[0].models: expected a non-empty "
	    "array of model names");
	expect_reject("{\"clusters\":[{\"id\":\"A\",\"url\":\"http://h\","
	    "\"models\":[\"m\",\"\"]}]}", "clusters[0].models[1]: expected a "
	    "model name of 1..1024 bytes without control characters");
	expect_reject("{\"clusters\":[{\"id\":\"A\",\"url\":\"http://h\","
	    "\"models\":[\"m\",\"m\"]}]}", "clusters[0].models[1]: duplicate "
	    "model \"m\"");
	expect_reject(ONE(",\"stats\":{\"format\":\"prometheus\"}"),
	    "clusters[0].stats.format: expected \"stargate\" or \"vllm\"");
	expect_reject(ONE(",\"stats\":{\"format\":1}"),
	    "clusters[0].stats.format: expected \"stargate\" or \"vllm\"");
	expect_reject(ONE(",\"stats\":[]"),
	    "clusters[0].stats: expected an object");
	expect_reject(ONE(",\"max_engine_concurrency\":-1"),
	    "clusters[0].max_engine_concurrency: expected an integer "
	    "0..1000000000");
	expect_reject(ONE(",\"max_engine_concurrency\":8.0"),
	    "clusters[0].max_engine_concurrency: expected an integer "
	    "0..1000000000");
	expect_reject(ONE(",\"rtt_ms\":-0.5"),
	    "clusters[0].rtt_ms: expected a number 0..60000");
	expect_reject(ONE(",\"rtt_ms\":\"1\""),
	    "clusters[0].rtt_ms: expected a number 0..60000");
	expect_reject(ONE(",\"max_input_tps\":-1"),
	    "clusters[0].max_input_tps: expected a non-negative number");
	expect_reject(ONE(",\"kv_capacity_tokens\":1.5"),
	    "clusters[0].kv_capacity_tokens: expected a non-negative integer");
}

static void
test_rejects_bad_timing(void **state)
{
	(void)state;
	expect_reject("{\"stats_interval_ms\":5," CLS,
	    "stats_interval_ms: expected an integer 10..60000");
	expect_reject("{\"stats_interval_ms\":\"250\"," CLS,
	    "stats_interval_ms: expected an integer 10..60000");
	expect_reject("{\"stats_stale_ms\":250," CLS,
	    "stats_stale_ms: stats_stale_ms (250) must be greater than "
	    "stats_interval_ms (250)");
	expect_reject("{\"stats_interval_ms\":5000," CLS,
	    "stats_interval_ms: stats_stale_ms (3000) must be greater than "
	    "stats_interval_ms (5000)");
	expect_reject("{\"stats_timeout_ms\":3001," CLS,
	    "stats_timeout_ms: expected an integer 1..3000");
	expect_reject("{\"stats_timeout_ms\":0," CLS,
	    "stats_timeout_ms: expected an integer 1..3000");
}

static void
test_rejects_duplicate_ids(void **state)
{
	(void)state;
	expect_reject("{\"clusters\":[{\"id\":\"A\",\"url\":\"http://h\","
	    "\"models\":[\"m\"]},{\"id\":\"B\",\"url\":\"http://h\","
	    "\"models\":[\"m\"]},{\"id\":\"A\",\"url\":\"http://g\","
	    "\"models\":[\"n\"]}]}",
	    "clusters[2].id: duplicate id \"A\" (also clusters[0])");
}

/* url as the cluster's base URL must be rejected with why. */
static void
bad_url(const char *url, const char *why)
{
	char text[512], msg[512];

	snprintf(text, sizeof(text), "{\"clusters\":[{\"id\":\"A\","
	    "\"url\":\"%s\",\"models\":[\"m\"]}]}", url);
	snprintf(msg, sizeof(msg), "clusters[0].url: %s: \"%s\"", why, url);
	expect_reject(text, msg);
}

static void
test_rejects_bad_urls(void **state)
{
	sg_clusterfile *cf;

	(void)state;
	bad_url("10.0.0.1:8000",
	    "expected an http:// URL (http://host[:port][/path])");
	bad_url("https://h", "https:// is not supported (expected "
	    "http://host[:port])");
	bad_url("http://", "missing host");
	bad_url("http://:80", "missing host");
	bad_url("http://h:", "bad port (expected 1..65535)");
	bad_url("http://h:0", "bad port (expected 1..65535)");
	bad_url("http://h:65536", "bad port (expected 1..65535)");
	bad_url("http://h:80x",
	    "bad host (expected http://host[:port][/path])");
	bad_url("http://u@h", "user information is not allowed in the URL");
	bad_url("http://h x", "URL contains a space or a control character");
	bad_url("http://[::1", "bad IPv6 address literal in host");
	bad_url("http://h/?q=1", "a query is not allowed in the base URL");
	bad_url("http://h/#f", "a URL fragment is not allowed");
	expect_reject(ONE(",\"stats\":{\"url\":\"http://h:1/s#x\"}"),
	    "clusters[0].stats.url: a URL fragment is not allowed: "
	    "\"http://h:1/s#x\"");
	expect_reject(ONE(",\"stats\":{\"url\":7}"),
	    "clusters[0].stats.url: expected a string");
	/* fine: a port of 65535, a path, no port */
	cf = parse_ok("{\"clusters\":[{\"id\":\"A\",\"url\":"
	    "\"http://h.example-1:65535/base//\",\"models\":[\"m\"]}]}");
	assert_string_equal(cf->c[0].url, "http://h.example-1:65535/base");
	assert_string_equal(cf->c[0].stats_url,
	    "http://h.example-1:65535/base/stats");
	sg_clusterfile_free(cf);
}

static void
test_load_errors_name_the_file(void **state)
{
	sg_clusterfile *cf;
	sg_error e;
	FILE *fp;
	char path[] = "/tmp/test_clusterfile.XXXXXX";
	int fd;

	(void)state;
	assert_int_equal(sg_clusterfile_load(&cf, FIXTURES "nope.json", &e),
	    SG_ECONFIG);
	assert_null(cf);
	assert_string_equal(e.text, FIXTURES "nope.json: cannot open: No such "
	    "file or directory");
	assert_true((fd = mkstemp(path)) >= 0);
	assert_non_null(fp = fdopen(fd, "w"));
	fputs(ONE(",\"rtt_ms\":true"), fp);
	fclose(fp);
	assert_int_equal(sg_clusterfile_load(&cf, path, &e), SG_ECONFIG);
	assert_true(strncmp(e.text, path, strlen(path)) == 0);
	assert_string_equal(e.text + strlen(path),
	    ": clusters[0].rtt_ms: expected a number 0..60000");
	remove(path);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_spec_example),
		cmocka_unit_test(test_defaults_and_formats),
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_rejects_unknown_fields),
		cmocka_unit_test(test_rejects_bad_structure),
		cmocka_unit_test(test_rejects_bad_values),
		cmocka_unit_test(test_rejects_bad_timing),
		cmocka_unit_test(test_rejects_duplicate_ids),
		cmocka_unit_test(test_rejects_bad_urls),
		cmocka_unit_test(test_load_errors_name_the_file),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
