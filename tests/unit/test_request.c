/*
 * test_request.c — sg_request.c: the JSON form (sg-route(1)), the header
 * form (stargate-headers(7): optional-string and numeric rules, validation
 * order), owned storage and exclusions; the scanned JSON text form
 * (sg_request_scan_json) against jansson and the full parse.  Run from the
 * repository root (fixtures are read from tests/fixtures/).
 */
#include "sg_test.h"

#include <stdio.h>
#include <stdlib.h>

#include "sg_request.h"

#define FIXTURES	"tests/fixtures/codec/"

static int
from_text(sg_request *r, const char *text, sg_error *err)
{
	json_error_t jerr;
	json_t *j;
	int rc;

	if ((j = json_loads(text, JSON_ALLOW_NUL, &jerr)) == NULL)
		fail_msg("bad test JSON: %s: %s", jerr.text, text);
	sg_error_clear(err);
	rc = sg_request_from_json(r, j, err);
	json_decref(j);
	return rc;
}

static void
expect_json_reject(const char *text, const char *msg)
{
	sg_request r;
	sg_error err;

	sg_request_init(&r);
	assert_int_equal(from_text(&r, text, &err), SG_EINVAL);
	assert_string_equal(err.text, msg);
	assert_null(r.request_id);
	assert_null(r.store);
	sg_request_release(&r);
}

static int
hdrs(sg_request *r, const char *text, sg_error *err)
{
	sg_error_clear(err);
	return sg_request_from_headers(r, text, strlen(text), err);
}

/* Expect a 400 naming the header. */
static void
expect_400(const char *text, const char *msg)
{
	sg_request r;
	sg_error err;

	sg_request_init(&r);
	assert_int_equal(hdrs(&r, text, &err), SG_EREQUEST);
	assert_int_equal(err.status, 400);
	assert_string_equal(err.text, msg);
	assert_null(r.request_id);
	assert_null(r.store);
	sg_request_release(&r);
}

static char *
slurp(const char *name)
{
	char path[256], *buf;
	FILE *f;
	long n;

	snprintf(path, sizeof(path), FIXTURES "%s", name);
	if ((f = fopen(path, "rb")) == NULL)
		fail_msg("%s: cannot open (run from the repository root)", path);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	rewind(f);
	buf = malloc((size_t)n + 1);
	assert_non_null(buf);
	assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

static void
assert_str_or_null(const char *a, const char *b)
{
	if (a == NULL || b == NULL)
		assert_true(a == b);
	else
		assert_string_equal(a, b);
}

static void
assert_request_equal(const sg_request *a, const sg_request *b)
{
	size_t i;

	assert_str_or_null(a->request_id, b->request_id);
	assert_str_or_null(a->routing_key, b->routing_key);
	assert_str_or_null(a->model, b->model);
	assert_str_or_null(a->cache_affinity_key, b->cache_affinity_key);
	assert_str_or_null(a->routing_method, b->routing_method);
	assert_str_or_null(a->last_cluster_id, b->last_cluster_id);
	/* every parser measures the hint once (issue 13) */
	assert_int_equal(a->last_cluster_id_len, a->last_cluster_id != NULL ?
	    strlen(a->last_cluster_id) : 0);
	assert_int_equal(b->last_cluster_id_len, b->last_cluster_id != NULL ?
	    strlen(b->last_cluster_id) : 0);
	assert_true(a->input_tokens == b->input_tokens);
	assert_int_equal(a->priority, b->priority);
	assert_int_equal(a->has_slo, b->has_slo);
	assert_true(a->request_slo_ms == b->request_slo_ms);
	assert_int_equal(a->has_max_wait, b->has_max_wait);
	assert_true(a->max_wait_ms == b->max_wait_ms);
	assert_true(a->elapsed_ms == b->elapsed_ms);
	assert_int_equal(a->nexcluded, b->nexcluded);
	for (i = 0; i < a->nexcluded; i++)
		assert_string_equal(a->excluded[i], b->excluded[i]);
}

/* The sg-route(1) example, however it was read. */
static void
assert_spec_request(const sg_request *r)
{
	assert_string_equal(r->request_id, "r-1");
	assert_string_equal(r->routing_key, "rk");
	assert_string_equal(r->model, "m");
	assert_string_equal(r->cache_affinity_key, "k");
	assert_true(r->input_tokens == 1000);
	assert_int_equal(r->priority, 0);
	assert_true(r->has_slo && r->request_slo_ms == 2000);
	assert_true(r->has_max_wait && r->max_wait_ms == 5000);
	assert_string_equal(r->routing_method, "pulsar");
	assert_false(r->routing_method_invalid);
	assert_string_equal(r->last_cluster_id, "B");
	assert_int_equal(r->last_cluster_id_len, 1);
	assert_int_equal(r->nexcluded, 1);
	assert_string_equal(r->excluded[0], "C");
	assert_true(r->elapsed_ms == 0);
	assert_int_equal(r->session_state, SG_SESSION_UNCLASSIFIED);
}

/* --- basics --------------------------------------------------------------- */

static void
test_init_is_all_absent(void **state)
{
	sg_request r;

	(void)state;
	memset(&r, 0x5a, sizeof(r));
	sg_request_init(&r);
	assert_null(r.request_id);
	assert_null(r.model);
	assert_null(r.routing_method);
	assert_null(r.excluded);
	assert_int_equal(r.nexcluded, 0);
	assert_false(r.has_slo);
	assert_false(r.has_max_wait);
	assert_int_equal(r.priority, 0);
	assert_int_equal(r.session_state, SG_SESSION_UNCLASSIFIED);
	assert_false(r.session_promoted);
	assert_null(r.store);
	sg_request_release(&r);
	sg_request_release(NULL);
}

static void
test_session_state_names(void **state)
{
	(void)state;
	assert_null(sg_session_state_name(SG_SESSION_UNCLASSIFIED));
	assert_string_equal(sg_session_state_name(SG_SESSION_NEW), "new");
	assert_string_equal(sg_session_state_name(SG_SESSION_RETURNING),
	    "returning");
	assert_string_equal(sg_session_state_name(SG_SESSION_STALE), "stale");
	assert_null(sg_session_state_name(99));
}

static void
test_excludes_matches_whole_ids(void **state)
{
	static const char *const ex[] = { "A", "cluster-b" };
	sg_request r;

	(void)state;
	sg_request_init(&r);
	assert_false(sg_request_excludes(&r, "A", 1));
	r.excluded = ex;
	r.nexcluded = 2;
	assert_true(sg_request_excludes(&r, "A", 1));
	assert_true(sg_request_excludes(&r, "cluster-b", 9));
	assert_false(sg_request_excludes(&r, "cluster", 7));
	assert_false(sg_request_excludes(&r, "cluster-b", 8));
	assert_false(sg_request_excludes(&r, "B", 1));
	assert_true(sg_request_excludes(&r, "Axyz", 1));	/* length given */
}

/* --- JSON form ------------------------------------------------------------ */

static void
test_json_reads_spec_example(void **state)
{
	char *text = slurp("request-spec.json");
	sg_request r;
	sg_error err;

	(void)state;
	sg_request_init(&r);
	assert_int_equal(from_text(&r, text, &err), 0);
	assert_spec_request(&r);
	assert_non_null(r.store);
	sg_request_release(&r);
	assert_null(r.store);
	free(text);
}

static void
test_json_round_trips(void **state)
{
	sg_request a, b;
	json_t *j;

	(void)state;
	sg_request_init(&a);
	sg_request_init(&b);
	assert_int_equal(from_text(&a, "{\"request_id\":\"r\\u00e9\","
	    "\"model\":\"m\",\"input_tokens\":9223372036854775807,"
	    "\"priority\":4294967295,\"request_slo_ms\":0,"
	    "\"excluded_cluster_ids\":[\"A\",\"B\",\"C\"],"
	    "\"elapsed_ms\":12.25}", NULL), 0);
	j = sg_request_to_json(&a);
	assert_non_null(j);
	assert_int_equal(sg_request_from_json(&b, j, NULL), 0);
	assert_request_equal(&a, &b);
	assert_true(b.has_slo && b.request_slo_ms == 0);
	assert_false(b.has_max_wait);
	json_decref(j);

	/* the spec example too, and absent fields stay absent */
	sg_request_release(&a);
	assert_int_equal(from_text(&a, "{\"request_id\":\"x\",\"model\":\"m\","
	    "\"input_tokens\":0}", NULL), 0);
	j = sg_request_to_json(&a);
	{
		char *s = json_dumps(j, JSON_COMPACT);

		assert_string_equal(s, "{\"request_id\":\"x\",\"model\":\"m\","
		    "\"input_tokens\":0,\"priority\":0,\"elapsed_ms\":0}");
		free(s);
	}
	assert_int_equal(sg_request_from_json(&b, j, NULL), 0);
	assert_request_equal(&a, &b);
	json_decref(j);
	sg_request_release(&a);
	sg_request_release(&b);
}

static void
test_json_blank_strings_are_absent_and_values_trimmed(void **state)
{
	sg_request r;

	(void)state;
	sg_request_init(&r);
	assert_int_equal(from_text(&r, "{\"request_id\":\" r-1 \","
	    "\"model\":\"m\",\"input_tokens\":1,\"routing_key\":\"  \","
	    "\"cache_affinity_key\":\"\",\"last_cluster_id\":\"\\t\","
	    "\"routing_method\":\" \",\"excluded_cluster_ids\":[\" \",\" A \"]}",
	    NULL), 0);
	assert_string_equal(r.request_id, "r-1");
	assert_null(r.routing_key);
	assert_null(r.cache_affinity_key);
	assert_null(r.last_cluster_id);
	assert_null(r.routing_method);
	assert_int_equal(r.nexcluded, 1);
	assert_string_equal(r.excluded[0], "A");
	sg_request_release(&r);
}

static void
test_json_requires_request_id_model_and_tokens(void **state)
{
	(void)state;
	expect_json_reject("{\"model\":\"m\",\"input_tokens\":1}",
	    "request_id: required");
	expect_json_reject("{\"request_id\":\"  \",\"model\":\"m\","
	    "\"input_tokens\":1}", "request_id: required");
	expect_json_reject("{\"request_id\":\"r\",\"model\":\"m\"}",
	    "input_tokens: required");
	expect_json_reject("{\"request_id\":\"r\",\"input_tokens\":1}",
	    "model: required");
	expect_json_reject("{\"request_id\":\"r\",\"model\":\"\","
	    "\"input_tokens\":1}", "model: required");
	/* order of required checks: request id, input tokens, model */
	expect_json_reject("{}", "request_id: required");
	expect_json_reject("{\"request_id\":\"r\"}", "input_tokens: required");
}

static void
test_json_rejects_unknown_fields_naming_them(void **state)
{
	(void)state;
	expect_json_reject("{\"request_id\":\"r\",\"model\":\"m\","
	    "\"input_tokens\":1,\"max_wait\":5}", "max_wait: unknown field");
	expect_json_reject("{\"requestid\":\"r\"}", "requestid: unknown field");
}

static void
test_json_rejects_wrong_types_naming_field(void **state)
{
	(void)state;
	expect_json_reject("{\"request_id\":5}",
	    "request_id: expected a string");
	expect_json_reject("{\"model\":null}", "model: expected a string");
	expect_json_reject("{\"input_tokens\":\"1000\"}",
	    "input_tokens: expected a non-negative integer");
	expect_json_reject("{\"input_tokens\":-1}",
	    "input_tokens: expected a non-negative integer");
	expect_json_reject("{\"input_tokens\":1.0}",
	    "input_tokens: expected a non-negative integer");
	expect_json_reject("{\"priority\":4294967296}",
	    "priority: must be at most 4294967295");
	expect_json_reject("{\"priority\":-1}",
	    "priority: expected a non-negative integer");
	expect_json_reject("{\"request_slo_ms\":true}",
	    "request_slo_ms: expected a non-negative integer");
	expect_json_reject("{\"max_wait_ms\":\"5\"}",
	    "max_wait_ms: expected a non-negative integer");
	expect_json_reject("{\"excluded_cluster_ids\":\"C\"}",
	    "excluded_cluster_ids: expected an array of strings");
	expect_json_reject("{\"excluded_cluster_ids\":[\"C\",7]}",
	    "excluded_cluster_ids[1]: expected a string");
	expect_json_reject("{\"elapsed_ms\":-1}",
	    "elapsed_ms: expected a non-negative number");
	expect_json_reject("{\"elapsed_ms\":\"0\"}",
	    "elapsed_ms: expected a non-negative number");
	expect_json_reject("{\"last_cluster_id\":\"a\\u0000b\"}",
	    "last_cluster_id: contains a NUL byte");
	expect_json_reject("[]", "request: expected an object");
}

static void
test_json_parse_releases_previous_content(void **state)
{
	sg_request r;
	sg_error err;

	(void)state;
	sg_request_init(&r);
	assert_int_equal(from_text(&r, "{\"request_id\":\"one\",\"model\":\"m\","
	    "\"input_tokens\":1,\"priority\":7,\"excluded_cluster_ids\":[\"A\"]}",
	    &err), 0);
	assert_int_equal(from_text(&r, "{\"request_id\":\"two\",\"model\":\"m\","
	    "\"input_tokens\":2}", &err), 0);
	assert_string_equal(r.request_id, "two");
	assert_int_equal(r.priority, 0);
	assert_int_equal(r.nexcluded, 0);
	/* a failure leaves r empty */
	assert_int_equal(from_text(&r, "{\"request_id\":\"three\",\"bogus\":1}",
	    &err), SG_EINVAL);
	assert_null(r.request_id);
	assert_null(r.store);
	sg_request_release(&r);
}

static void
test_json_many_excluded_and_long_strings(void **state)
{
	json_t *j = json_pack("{s:s, s:s, s:i}", "request_id", "r", "model",
	    "m", "input_tokens", 5), *a = json_array();
	char big[5000], id[16];
	sg_request r;
	size_t i;

	(void)state;
	memset(big, 'k', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	json_object_set_new(j, "cache_affinity_key", json_string(big));
	for (i = 0; i < SG_MAX_EXCLUDED; i++) {
		snprintf(id, sizeof(id), "c%zu", i);
		json_array_append_new(a, json_string(id));
	}
	json_object_set(j, "excluded_cluster_ids", a);
	sg_request_init(&r);
	assert_int_equal(sg_request_from_json(&r, j, NULL), 0);
	assert_int_equal(strlen(r.cache_affinity_key), sizeof(big) - 1);
	assert_int_equal(r.nexcluded, SG_MAX_EXCLUDED);
	assert_string_equal(r.excluded[4095], "c4095");
	assert_true(sg_request_excludes(&r, "c17", 3));
	json_array_append_new(a, json_string("one-more"));
	{
		sg_error err;

		assert_int_equal(sg_request_from_json(&r, j, &err), SG_EINVAL);
		assert_string_equal(err.text,
		    "excluded_cluster_ids: more than 4096 ids");
	}
	sg_request_release(&r);
	json_decref(a);
	json_decref(j);
}

/* --- header form ---------------------------------------------------------- */

static void
test_headers_read_captured_request(void **state)
{
	char *text = slurp("request-headers.txt");
	sg_request r;
	sg_error err;

	(void)state;
	sg_request_init(&r);
	assert_int_equal(hdrs(&r, text, &err), 0);
	assert_spec_request(&r);
	sg_request_release(&r);
	free(text);
}

static void
test_headers_names_are_case_insensitive_and_crlf_ok(void **state)
{
	sg_request r;
	sg_error err;

	(void)state;
	sg_request_init(&r);
	assert_int_equal(hdrs(&r, "X-REQUEST-ID: a\r\nX-Model:M1\r\n"
	    "x-INPUT-tokens: 42\r\nX-Priority: 3\r\n"
	    "X-Stargate-Last-Cluster-Id: C\r\n\r\n", &err), 0);
	assert_string_equal(r.request_id, "a");
	assert_string_equal(r.model, "M1");
	assert_true(r.input_tokens == 42);
	assert_int_equal(r.priority, 3);
	assert_string_equal(r.last_cluster_id, "C");
	assert_false(r.has_slo);
	assert_false(r.has_max_wait);
	assert_null(r.routing_method);
	sg_request_release(&r);
}

static void
test_headers_blank_optional_strings_are_absent(void **state)
{
	sg_request r;
	sg_error err;

	(void)state;
	sg_request_init(&r);
	assert_int_equal(hdrs(&r, "x-request-id: r\nx-model: m\n"
	    "x-input-tokens: 1\nx-routing-key:   \nx-cache-affinity-key:\n"
	    "x-stargate-last-cluster-id: \t \n", &err), 0);
	assert_null(r.routing_key);
	assert_null(r.cache_affinity_key);
	assert_null(r.last_cluster_id);
	sg_request_release(&r);
}

static void
test_headers_invalid_utf8_hint_is_absent_not_an_error(void **state)
{
	sg_request r;
	sg_error err;

	(void)state;
	sg_request_init(&r);
	assert_int_equal(hdrs(&r, "x-request-id: r\nx-model: m\n"
	    "x-input-tokens: 1\nx-stargate-last-cluster-id: B\xff\xfe\n"
	    "x-routing-key: \xc0\xaf\nx-cache-affinity-key: k\x01k\n", &err), 0);
	assert_null(r.last_cluster_id);
	assert_null(r.routing_key);		/* overlong encoding */
	assert_null(r.cache_affinity_key);	/* control character */
	assert_string_equal(r.model, "m");
	sg_request_release(&r);

	/* valid UTF-8 passes through, trimmed */
	assert_int_equal(hdrs(&r, "x-request-id: r\nx-model: m\n"
	    "x-input-tokens: 1\nx-stargate-last-cluster-id:  gr\xc3\xbcn \n",
	    &err), 0);
	assert_string_equal(r.last_cluster_id, "gr\xc3\xbcn");
	sg_request_release(&r);
}

static void
test_headers_required_fields_are_400(void **state)
{
	(void)state;
	expect_400("x-model: m\nx-input-tokens: 1\n", "x-request-id: required");
	expect_400("x-request-id:   \nx-model: m\nx-input-tokens: 1\n",
	    "x-request-id: required");
	/* undecodable request id is absent, hence missing */
	expect_400("x-request-id: \xff\nx-model: m\nx-input-tokens: 1\n",
	    "x-request-id: required");
	expect_400("x-request-id: r\nx-model: m\n", "x-input-tokens: required");
	expect_400("x-request-id: r\nx-input-tokens: 1\n", "x-model: required");
	expect_400("x-request-id: r\nx-input-tokens: 1\nx-model: \n",
	    "x-model: required");
}

static void
test_headers_bad_numerics_are_400(void **state)
{
	(void)state;
	expect_400("x-request-id: r\nx-model: m\nx-input-tokens: abc\n",
	    "x-input-tokens: must be a base-10 unsigned integer");
	expect_400("x-request-id: r\nx-model: m\nx-input-tokens:  \n",
	    "x-input-tokens: blank value");
	expect_400("x-request-id: r\nx-model: m\nx-input-tokens: -1\n",
	    "x-input-tokens: must be a base-10 unsigned integer");
	expect_400("x-request-id: r\nx-model: m\nx-input-tokens: +1\n",
	    "x-input-tokens: must be a base-10 unsigned integer");
	expect_400("x-request-id: r\nx-model: m\nx-input-tokens: 1.5\n",
	    "x-input-tokens: must be a base-10 unsigned integer");
	expect_400("x-request-id: r\nx-model: m\nx-input-tokens: 0x10\n",
	    "x-input-tokens: must be a base-10 unsigned integer");
	expect_400("x-request-id: r\nx-model: m\n"
	    "x-input-tokens: 18446744073709551616\n",
	    "x-input-tokens: must be a base-10 unsigned integer "
	    "<= 18446744073709551615");
	expect_400("x-request-id: r\nx-model: m\nx-input-tokens: 1\n"
	    "x-priority: 4294967296\n",
	    "x-priority: must be a base-10 unsigned integer <= 4294967295");
	expect_400("x-request-id: r\nx-model: m\nx-input-tokens: 1\n"
	    "x-priority: \n", "x-priority: blank value");
	expect_400("x-request-id: r\nx-model: m\nx-input-tokens: 1\n"
	    "x-max-wait-ms: 5s\n",
	    "x-max-wait-ms: must be a base-10 unsigned integer");
	expect_400("x-request-id: r\nx-model: m\nx-input-tokens: 1\n"
	    "x-request-slo-ms: 1\xff\n",
	    "x-request-slo-ms: not a valid header value");
	expect_400("x-request-id: r\nx-model: m\nx-input-tokens: 1\n"
	    "x-elapsed-ms: -1\n",
	    "x-elapsed-ms: must be a non-negative decimal number");
}

static void
test_headers_numerics_accept_full_width(void **state)
{
	sg_request r;
	sg_error err;

	(void)state;
	sg_request_init(&r);
	assert_int_equal(hdrs(&r, "x-request-id: r\nx-model: m\n"
	    "x-input-tokens:  18446744073709551615 \nx-priority: 4294967295\n"
	    "x-max-wait-ms: 0\nx-request-slo-ms: 007\nx-elapsed-ms: 250.5\n",
	    &err), 0);
	assert_true(r.input_tokens == UINT64_MAX);
	assert_true(r.priority == UINT32_MAX);
	assert_true(r.has_max_wait && r.max_wait_ms == 0);
	assert_true(r.has_slo && r.request_slo_ms == 7);
	assert_near(r.elapsed_ms, 250.5, 0);
	sg_request_release(&r);
}

static void
test_headers_validation_order(void **state)
{
	(void)state;
	/* missing request id before a bad x-input-tokens */
	expect_400("x-input-tokens: nope\n", "x-request-id: required");
	/* bad tokens before a missing model */
	expect_400("x-request-id: r\nx-input-tokens: nope\n",
	    "x-input-tokens: must be a base-10 unsigned integer");
	/* missing model before bad priority / max-wait / slo */
	expect_400("x-request-id: r\nx-input-tokens: 1\nx-priority: x\n"
	    "x-max-wait-ms: x\nx-request-slo-ms: x\n", "x-model: required");
	/* then priority, max-wait, slo (whatever the line order) */
	expect_400("x-request-slo-ms: x\nx-max-wait-ms: x\nx-priority: x\n"
	    "x-request-id: r\nx-input-tokens: 1\nx-model: m\n",
	    "x-priority: must be a base-10 unsigned integer");
	expect_400("x-request-slo-ms: x\nx-max-wait-ms: x\n"
	    "x-request-id: r\nx-input-tokens: 1\nx-model: m\n",
	    "x-max-wait-ms: must be a base-10 unsigned integer");
	/* an undecodable routing method is never the error */
	expect_400("x-request-id: r\nx-input-tokens: 1\nx-model: m\n"
	    "x-routing-method: \xff\nx-request-slo-ms: x\n",
	    "x-request-slo-ms: must be a base-10 unsigned integer");
}

static void
test_headers_routing_method_kept_raw(void **state)
{
	sg_request r;
	sg_error err;

	(void)state;
	sg_request_init(&r);
	assert_int_equal(hdrs(&r, "x-request-id: r\nx-model: m\n"
	    "x-input-tokens: 1\nx-routing-method: \t Pulsar_Wait \r\n", &err), 0);
	assert_string_equal(r.routing_method, "Pulsar_Wait");
	assert_false(r.routing_method_invalid);
	sg_request_release(&r);

	assert_int_equal(hdrs(&r, "x-request-id: r\nx-model: m\n"
	    "x-input-tokens: 1\nx-routing-method: \xe2\x28\xa1\n", &err), 0);
	assert_string_equal(r.routing_method, "<invalid-utf8>");
	assert_true(r.routing_method_invalid);
	sg_request_release(&r);

	/* present but blank is kept (resolution answers 400 unknown) */
	assert_int_equal(hdrs(&r, "x-request-id: r\nx-model: m\n"
	    "x-input-tokens: 1\nx-routing-method:\n", &err), 0);
	assert_non_null(r.routing_method);
	assert_string_equal(r.routing_method, "");
	sg_request_release(&r);
}

static void
test_headers_excluded_ids_and_first_value_wins(void **state)
{
	sg_request r;
	sg_error err;

	(void)state;
	sg_request_init(&r);
	assert_int_equal(hdrs(&r, "x-request-id: first\nx-request-id: second\n"
	    "x-model: m\nx-input-tokens: 1\n"
	    "x-stargate-excluded-cluster-ids: A, B,, C \n"
	    "X-Stargate-Excluded-Cluster-Ids: D\n", &err), 0);
	assert_string_equal(r.request_id, "first");
	assert_int_equal(r.nexcluded, 4);
	assert_string_equal(r.excluded[0], "A");
	assert_string_equal(r.excluded[1], "B");
	assert_string_equal(r.excluded[2], "C");
	assert_string_equal(r.excluded[3], "D");
	assert_true(sg_request_excludes(&r, "C", 1));
	assert_false(sg_request_excludes(&r, "", 0));
	sg_request_release(&r);
}

static void
test_headers_ignore_unknown_request_line_and_body(void **state)
{
	sg_request r;
	sg_error err;

	(void)state;
	sg_request_init(&r);
	assert_int_equal(hdrs(&r, "\r\n\r\nPOST /v1/chat/completions HTTP/1.1\r\n"
	    "Host: h:8080\r\nAuthorization: Bearer secret\r\n"
	    "x-request-id: r\r\nx-model: m\r\nx-input-tokens: 5\r\n\r\n"
	    "{\"model\": \"other\"}\nx-priority: 9\n", &err), 0);
	assert_string_equal(r.model, "m");
	assert_int_equal(r.priority, 0);	/* after the blank line: body */
	sg_request_release(&r);

	/* no trailing newline */
	assert_int_equal(hdrs(&r, "x-request-id: r\nx-model: m\n"
	    "x-input-tokens: 5", &err), 0);
	assert_true(r.input_tokens == 5);
	sg_request_release(&r);
}

static void
test_headers_malformed_line_is_400(void **state)
{
	(void)state;
	expect_400("x-request-id: r\nnot a header\nx-model: m\n",
	    "header line 2: expected \"name: value\"");
	expect_400("x-request-id : r\n",
	    "header line 1: expected \"name: value\"");
	expect_400(": r\n", "header line 1: expected \"name: value\"");
	/* a request line is only accepted first */
	expect_400("x-request-id: r\nGET / HTTP/1.1\n",
	    "header line 2: expected \"name: value\"");
}

static void
test_headers_round_trip_through_json(void **state)
{
	char *text = slurp("request-headers.txt");
	sg_request a, b;
	json_t *j;

	(void)state;
	sg_request_init(&a);
	sg_request_init(&b);
	assert_int_equal(sg_request_from_headers(&a, text, strlen(text), NULL), 0);
	j = sg_request_to_json(&a);
	assert_non_null(j);
	assert_int_equal(sg_request_from_json(&b, j, NULL), 0);
	assert_request_equal(&a, &b);
	json_decref(j);
	sg_request_release(&a);
	sg_request_release(&b);
	free(text);
}

static void
test_headers_embedded_nul_makes_value_undecodable(void **state)
{
	static const char text[] = "x-request-id: r\nx-model: m\n"
	    "x-input-tokens: 1\nx-routing-key: a\0b\n";
	sg_request r;
	sg_error err;

	(void)state;
	sg_request_init(&r);
	assert_int_equal(sg_request_from_headers(&r, text, sizeof(text) - 1,
	    &err), 0);
	assert_null(r.routing_key);
	sg_request_release(&r);
}

/* --- header-list form ----------------------------------------------------- */

#define NH(a)	(sizeof(a) / sizeof((a)[0]))

static int
hlist(sg_request *r, const sg_header *h, size_t n, sg_error *err)
{
	sg_error_clear(err);
	return sg_request_from_header_list(r, h, n, err);
}

static void
expect_list_400(const sg_header *h, size_t n, const char *msg)
{
	sg_request r;
	sg_error err;

	sg_request_init(&r);
	assert_int_equal(hlist(&r, h, n, &err), SG_EREQUEST);
	assert_int_equal(err.status, 400);
	assert_string_equal(err.text, msg);
	assert_null(r.request_id);
	assert_null(r.store);
	sg_request_release(&r);
}

static void
test_list_reads_every_header_case_insensitively(void **state)
{
	static const sg_header h[] = {
		{ "Host", "h:8080" },
		{ "X-Request-Id", " r-1 " },
		{ "X-MODEL", "m" },
		{ "x-Input-Tokens", "\t1000 " },
		{ "x-routing-key", "rk" },
		{ "X-Cache-Affinity-Key", "k" },
		{ "x-routing-method", " pulsar " },
		{ "X-Priority", "3" },
		{ "x-max-wait-ms", "5000" },
		{ "X-Request-SLO-Ms", "2000" },
		{ "X-Stargate-Last-Cluster-Id", "B" },
		{ "x-stargate-excluded-cluster-ids", "C" },
		{ "content-type", "application/json" },
	};
	sg_request r;
	sg_error err;

	(void)state;
	sg_request_init(&r);
	assert_int_equal(hlist(&r, h, NH(h), &err), 0);
	assert_string_equal(r.request_id, "r-1");
	assert_string_equal(r.model, "m");
	assert_true(r.input_tokens == 1000);
	assert_string_equal(r.routing_key, "rk");
	assert_string_equal(r.cache_affinity_key, "k");
	assert_string_equal(r.routing_method, "pulsar");
	assert_int_equal(r.priority, 3);
	assert_true(r.has_max_wait && r.max_wait_ms == 5000);
	assert_true(r.has_slo && r.request_slo_ms == 2000);
	assert_string_equal(r.last_cluster_id, "B");
	assert_int_equal(r.nexcluded, 1);
	assert_string_equal(r.excluded[0], "C");
	sg_request_release(&r);
}

static void
test_list_duplicates_first_wins_excluded_accumulate(void **state)
{
	static const sg_header h[] = {
		{ "x-request-id", "first" },
		{ "X-REQUEST-ID", "second" },
		{ "x-model", "m" },
		{ "x-input-tokens", "1" },
		{ "x-input-tokens", "not a number" },	/* never read */
		{ "x-stargate-last-cluster-id", "   " },	/* blank: absent */
		{ "x-stargate-last-cluster-id", "A" },	/* still the second */
		{ "x-stargate-excluded-cluster-ids", "A, B" },
		{ "X-Stargate-Excluded-Cluster-Ids", "C" },
	};
	sg_request r;
	sg_error err;

	(void)state;
	sg_request_init(&r);
	assert_int_equal(hlist(&r, h, NH(h), &err), 0);
	assert_string_equal(r.request_id, "first");
	assert_true(r.input_tokens == 1);
	assert_null(r.last_cluster_id);
	assert_int_equal(r.nexcluded, 3);
	assert_string_equal(r.excluded[2], "C");
	sg_request_release(&r);
}

static void
test_list_control_bytes_and_bad_utf8_follow_the_rules(void **state)
{
	static const sg_header h[] = {
		{ "x-request-id", "r" },
		{ "x-model", "m" },
		{ "x-input-tokens", "1" },
		{ "x-routing-key", "a\x01" "b" },		/* control byte */
		{ "x-cache-affinity-key", "k\x7f" },		/* DEL */
		{ "x-stargate-last-cluster-id", "B\xff" },	/* not UTF-8 */
		{ "x-routing-method", "\xe2\x28\xa1" },
	};
	static const sg_header bad_num[] = {
		{ "x-request-id", "r" },
		{ "x-model", "m" },
		{ "x-input-tokens", "1" },
		{ "x-priority", "1\r" },
	};
	sg_request r;
	sg_error err;

	(void)state;
	sg_request_init(&r);
	assert_int_equal(hlist(&r, h, NH(h), &err), 0);
	assert_null(r.routing_key);
	assert_null(r.cache_affinity_key);
	assert_null(r.last_cluster_id);
	assert_true(r.routing_method_invalid);
	assert_string_equal(r.routing_method, "<invalid-utf8>");
	sg_request_release(&r);
	expect_list_400(bad_num, NH(bad_num),
	    "x-priority: not a valid header value");
}

static void
test_list_validation_order_ignores_list_order(void **state)
{
	static const sg_header a[] = {
		{ "x-request-slo-ms", "x" },
		{ "x-priority", "x" },
		{ "x-model", "m" },
		{ "x-input-tokens", "nope" },
	};
	static const sg_header b[] = {
		{ "x-request-slo-ms", "x" },
		{ "x-max-wait-ms", "x" },
		{ "x-priority", "x" },
		{ "x-input-tokens", "nope" },
		{ "x-request-id", "r" },
	};
	static const sg_header c[] = {
		{ "x-request-slo-ms", "x" },
		{ "x-max-wait-ms", "x" },
		{ "x-priority", "x" },
		{ "x-input-tokens", "2" },
		{ "x-request-id", "r" },
	};
	static const sg_header d[] = {
		{ "x-request-slo-ms", "x" },
		{ "x-max-wait-ms", "x" },
		{ "x-model", "m" },
		{ "x-input-tokens", "2" },
		{ "x-request-id", "r" },
		{ "x-priority", "x" },
	};
	static const sg_header e[] = {
		{ "x-request-slo-ms", "x" },
		{ "x-max-wait-ms", "x" },
		{ "x-model", "m" },
		{ "x-input-tokens", "2" },
		{ "x-request-id", "r" },
	};

	(void)state;
	expect_list_400(a, NH(a), "x-request-id: required");
	expect_list_400(b, NH(b),
	    "x-input-tokens: must be a base-10 unsigned integer");
	expect_list_400(c, NH(c), "x-model: required");
	expect_list_400(d, NH(d),
	    "x-priority: must be a base-10 unsigned integer");
	expect_list_400(e, NH(e),
	    "x-max-wait-ms: must be a base-10 unsigned integer");
}

static void
test_list_bounds_and_bad_arguments(void **state)
{
	static const sg_header nul_name[] = { { NULL, "v" } };
	static const sg_header nul_value[] = {
		{ "x-request-id", "r" },
		{ "x-model", "m" },
		{ "x-input-tokens", "1" },
		{ "x-routing-key", NULL },
		{ "x-routing-method", NULL },
	};
	sg_header *many;
	char (*ids)[16], msg[80];
	sg_request r;
	sg_error err;
	size_t i;

	(void)state;
	many = calloc(SG_MAX_EXCLUDED + 4, sizeof(*many));
	ids = calloc(SG_MAX_EXCLUDED + 1, sizeof(*ids));
	assert_true(many != NULL && ids != NULL);
	sg_request_init(&r);
	/* no headers at all: the first required one is missing */
	expect_list_400(NULL, 0, "x-request-id: required");
	assert_int_equal(hlist(&r, NULL, 1, &err), SG_EINVAL);
	assert_int_equal(hlist(&r, nul_name, 1, &err), SG_EINVAL);
	assert_null(r.store);
	/* a NULL value is an empty one */
	assert_int_equal(hlist(&r, nul_value, NH(nul_value), &err), 0);
	assert_null(r.routing_key);
	assert_string_equal(r.routing_method, "");
	sg_request_release(&r);

	/* one excluded id per entry: SG_MAX_EXCLUDED fit, one more is 400 */
	many[0] = (sg_header){ "x-request-id", "r" };
	many[1] = (sg_header){ "x-model", "m" };
	many[2] = (sg_header){ "x-input-tokens", "1" };
	for (i = 0; i <= SG_MAX_EXCLUDED; i++) {
		snprintf(ids[i], sizeof(ids[i]), "c%zu", i);
		many[3 + i] = (sg_header){ "x-stargate-excluded-cluster-ids",
		    ids[i] };
	}
	assert_int_equal(hlist(&r, many, 3 + SG_MAX_EXCLUDED, &err), 0);
	assert_int_equal(r.nexcluded, SG_MAX_EXCLUDED);
	sg_request_release(&r);
	snprintf(msg, sizeof(msg), "x-stargate-excluded-cluster-ids: "
	    "more than %d ids", SG_MAX_EXCLUDED);
	expect_list_400(many, 4 + SG_MAX_EXCLUDED, msg);
	free(many);
	free(ids);
}

static void
test_list_copies_strings_and_replaces_previous_content(void **state)
{
	char id[8] = "req-1", model[8] = "m";
	sg_header h[] = {
		{ "x-request-id", id },
		{ "x-model", model },
		{ "x-input-tokens", "1" },
	};
	sg_request r;
	sg_error err;

	(void)state;
	sg_request_init(&r);
	assert_int_equal(hdrs(&r, "x-request-id: old\nx-model: o\n"
	    "x-input-tokens: 9\nx-priority: 4\n", &err), 0);
	assert_int_equal(hlist(&r, h, NH(h), &err), 0);
	memset(id, 'x', sizeof(id) - 1);
	memset(model, 'x', sizeof(model) - 1);
	assert_string_equal(r.request_id, "req-1");
	assert_string_equal(r.model, "m");
	assert_int_equal(r.priority, 0);
	sg_request_release(&r);
}

/* The text form is the list form over split lines: same answers. */
static void
test_text_and_list_forms_agree(void **state)
{
	static const sg_header h[] = {
		{ "x-request-id", " r " },
		{ "x-model", "m" },
		{ "x-input-tokens", "7" },
		{ "x-routing-key", "\t rk" },
		{ "x-elapsed-ms", "12.5" },
		{ "x-stargate-excluded-cluster-ids", "A,B" },
	};
	sg_request a, b;
	sg_error err;

	(void)state;
	sg_request_init(&a);
	sg_request_init(&b);
	assert_int_equal(hdrs(&a, "x-request-id:  r \nx-model:m\n"
	    "x-input-tokens: 7\nx-routing-key: \t rk\nx-elapsed-ms: 12.5\n"
	    "x-stargate-excluded-cluster-ids: A,B\n", &err), 0);
	assert_int_equal(hlist(&b, h, NH(h), &err), 0);
	assert_request_equal(&a, &b);
	sg_request_release(&a);
	sg_request_release(&b);
}

/* More lines than one batch of the text form: first still wins. */
static void
test_headers_many_lines_keep_first_value(void **state)
{
	char *text, *p, msg[80];
	size_t cap = 100 * 40 + 200, i;
	sg_request r;
	sg_error err;

	(void)state;
	text = malloc(cap);
	assert_non_null(text);
	p = text;
	for (i = 0; i < 100; i++)
		p += snprintf(p, cap - (size_t)(p - text),
		    "x-unknown-%zu: v\n", i);
	p += snprintf(p, cap - (size_t)(p - text),
	    "x-request-id: r\nx-model: m\nx-input-tokens: 3\n");
	for (i = 0; i < 40; i++)
		p += snprintf(p, cap - (size_t)(p - text), "x-model: late\n");
	sg_request_init(&r);
	assert_int_equal(hdrs(&r, text, &err), 0);
	assert_string_equal(r.model, "m");
	assert_true(r.input_tokens == 3);
	sg_request_release(&r);
	/* an error on an early line comes before a later malformed line */
	free(text);
	cap = 2 * (SG_MAX_EXCLUDED + 1) + 200;
	text = malloc(cap);
	assert_non_null(text);
	p = text + snprintf(text, cap, "x-request-id: r\n"
	    "x-stargate-excluded-cluster-ids: ");
	for (i = 0; i <= SG_MAX_EXCLUDED; i++) {
		*p++ = 'a';
		*p++ = ',';
	}
	snprintf(p, cap - (size_t)(p - text), "\nbad line\n");
	assert_int_equal(hdrs(&r, text, &err), SG_EREQUEST);
	snprintf(msg, sizeof(msg), "x-stargate-excluded-cluster-ids: "
	    "more than %d ids", SG_MAX_EXCLUDED);
	assert_string_equal(err.text, msg);
	free(text);
}

/* --- JSON text form, scanned (sg_request_scan_json) ----------------------- */

/*
 * What the scan of text[0..len) says and what jansson + the full parse say
 * about the same object must agree: when the scan takes the text (0), the
 * object it read (text[0..used)) parses with JSON_REJECT_DUPLICATES and
 * sg_request_from_json() gives the same request; when it does not, it
 * answers ENOTSUP and leaves the request all absent.  Returns the scan's
 * code; *full gets the full parse's on the whole text.
 */
static int
scan_agrees(sg_request *s, const char *text, size_t len, int *full)
{
	json_error_t jerr;
	json_t *j;
	sg_request f;
	sg_error err;
	size_t used = 0, k;
	int rc, frc;

	sg_error_clear(&err);
	rc = sg_request_scan_json(s, text, len, &used, &err);
	sg_request_init(&f);
	j = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	frc = j == NULL ? -1 : sg_request_from_json(&f, j, &err);
	json_decref(j);
	sg_request_release(&f);
	if (full != NULL)
		*full = frc;
	if (rc != 0) {
		if (rc != ENOTSUP)
			fail_msg("scan: %d for %.*s", rc, (int)len, text);
		assert_null(s->request_id);
		assert_null(s->model);
		assert_int_equal(s->nexcluded, 0);
		return rc;
	}
	assert_true(used <= len);
	j = json_loadb(text, used, JSON_REJECT_DUPLICATES, &jerr);
	if (j == NULL)
		fail_msg("scan took what jansson refuses (%s): %.*s",
		    jerr.text, (int)used, text);
	sg_request_init(&f);
	if (sg_request_from_json(&f, j, &err) != 0)
		fail_msg("scan took what the full parse refuses (%s): %.*s",
		    err.text, (int)used, text);
	assert_request_equal(s, &f);
	json_decref(j);
	sg_request_release(&f);
	/* text after the object is white space: the whole text agrees */
	for (k = used; k < len && strchr(" \t\r\n", text[k]) != NULL &&
	    text[k] != '\0'; k++)
		;
	if (k == len)
		assert_int_equal(frc, 0);
	return rc;
}

static int
scan_str(sg_request *s, const char *text)
{
	return scan_agrees(s, text, strlen(text), NULL);
}

static void
test_scan_json_takes_the_common_forms_as_the_full_parse_reads_them(
    void **state)
{
	static const char *const texts[] = {
		"{\"request_id\": \"req-000001\", \"model\": \"m\", "
		"\"routing_key\": \"tenant-1\", \"cache_affinity_key\": "
		"\"session-0001\", \"input_tokens\": 100}",
		"{\"request_id\":\"r\",\"model\":\"m\",\"input_tokens\":0,"
		"\"priority\":4294967295,\"request_slo_ms\":2000,"
		"\"max_wait_ms\":999999999999999999,\"routing_method\":"
		"\"pulsar\",\"last_cluster_id\":\"B\",\"excluded_cluster_ids\":"
		"[\"C\", \"  \", \" D \"],\"elapsed_ms\":12.25}",
		/* odd white space everywhere JSON allows it */
		" \t\r\n{ \t\"model\"\r\n:\t\"m\" ,\n\"input_tokens\" : 7 ,"
		"\"request_id\":\"a\" , \"excluded_cluster_ids\" : [ ] , "
		"\"elapsed_ms\" : 0 \r\n} \t",
		/* escapes: every short one, \u in the BMP, a surrogate pair */
		"{\"request_id\": \"q\\\"uote\\\\back\\/sl\\nnl\\b\\f\\r\\t\","
		" \"model\": \"caf\\u00e9-\\u65E5-\\ud83d\\ude00\", "
		"\"input_tokens\": 1}",
		/* raw UTF-8, and 0x7f */
		"{\"request_id\": \"caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80"
		"\x7f\", \"model\": \"m\", \"input_tokens\": 1}",
		/* trimmed; escaped white space trims as well */
		"{\"request_id\": \"  r  \", \"model\": \"\\u0020m\\t\", "
		"\"routing_key\": \"   \", \"cache_affinity_key\": \"\\n\", "
		"\"input_tokens\": 1}",
		/* elapsed_ms as an integer and as long reals */
		"{\"request_id\":\"r\",\"model\":\"m\",\"input_tokens\":1,"
		"\"elapsed_ms\":123456789012345678}",
		"{\"request_id\":\"r\",\"model\":\"m\",\"input_tokens\":1,"
		"\"elapsed_ms\":0.1000000000000000055511}",
		"{\"request_id\":\"r\",\"model\":\"m\",\"input_tokens\":1,"
		"\"elapsed_ms\":0.0}",
	};
	sg_request r;
	size_t i;

	(void)state;
	sg_request_init(&r);
	for (i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
		if (scan_str(&r, texts[i]) != 0)
			fail_msg("not taken: %s", texts[i]);
	sg_request_release(&r);
}

static void
test_scan_json_gives_up_on_duplicates_errors_and_unusual_forms(
    void **state)
{
	static const char *const texts[] = {
		/* duplicate members: jansson refuses the record */
		"{\"request_id\":\"a\",\"request_id\":\"b\",\"model\":\"m\","
		"\"input_tokens\":1}",
		"{\"request_id\":\"a\",\"model\":\"m\",\"input_tokens\":1,"
		"\"input_tokens\":2}",
		"{\"request_id\":\"a\",\"model\":\"m\",\"input_tokens\":1,"
		"\"excluded_cluster_ids\":[],\"excluded_cluster_ids\":[\"x\"]}",
		/* an escaped name may be a duplicate of a plain one */
		"{\"request_id\":\"a\",\"request\\u005fid\":\"b\",\"model\":"
		"\"m\",\"input_tokens\":1}",
		/* errors the full parse words */
		"{\"request_id\":\"a\",\"model\":\"m\"}",
		"{\"request_id\":\"  \",\"model\":\"m\",\"input_tokens\":1}",
		"{\"model\":\"m\",\"input_tokens\":1}",
		"{\"request_id\":\"a\",\"input_tokens\":1}",
		"{\"request_id\":\"a\",\"model\":\"m\",\"input_tokens\":1,"
		"\"colour\":1}",
		"{\"request_id\":5,\"model\":\"m\",\"input_tokens\":1}",
		"{\"request_id\":null,\"model\":\"m\",\"input_tokens\":1}",
		"{\"request_id\":\"a\",\"model\":\"m\",\"input_tokens\":-1}",
		"{\"request_id\":\"a\",\"model\":\"m\",\"input_tokens\":1.0}",
		"{\"request_id\":\"a\",\"model\":\"m\",\"input_tokens\":\"1\"}",
		"{\"request_id\":\"a\",\"model\":\"m\",\"input_tokens\":1,"
		"\"priority\":4294967296}",
		"{\"request_id\":\"a\",\"model\":\"m\",\"input_tokens\":1,"
		"\"elapsed_ms\":-1}",
		"{\"request_id\":\"a\",\"model\":\"m\",\"input_tokens\":1,"
		"\"excluded_cluster_ids\":[\"a\",1]}",
		"{\"request_id\":\"a\",\"model\":\"m\",\"input_tokens\":1,"
		"\"excluded_cluster_ids\":\"a\"}",
		/* malformed JSON */
		"{\"request_id\":\"a\",\"model\":\"m\",\"input_tokens\":01}",
		"{\"request_id\":\"a\",\"model\":\"m\",\"input_tokens\":1,}",
		"{\"request_id\":\"a\" \"model\":\"m\",\"input_tokens\":1}",
		"{\"request_id\":\"a\\u0000\",\"model\":\"m\","
		"\"input_tokens\":1}",
		"{\"request_id\":\"a\\ud800\",\"model\":\"m\","
		"\"input_tokens\":1}",
		"{\"request_id\":\"a\\udc00\",\"model\":\"m\","
		"\"input_tokens\":1}",
		"{\"request_id\":\"a\\ud800\\u0041\",\"model\":\"m\","
		"\"input_tokens\":1}",
		"{\"request_id\":\"a\\x\",\"model\":\"m\",\"input_tokens\":1}",
		"{\"request_id\":\"a\\u12\",\"model\":\"m\","
		"\"input_tokens\":1}",
		"{\"request_id\":\"a\xc0\x80\",\"model\":\"m\","
		"\"input_tokens\":1}",
		"{\"request_id\":\"a\xed\xa0\x80\",\"model\":\"m\","
		"\"input_tokens\":1}",
		"{\"request_id\":\"a\xe6\x97\",\"model\":\"m\","
		"\"input_tokens\":1}",
		"{\"request_id\":\"a\x01\",\"model\":\"m\",\"input_tokens\":1}",
		"{\"request_id\":\"a\",\"model\":\"m\",\"input_tokens\":1\x0b}",
		"{\"request_id\":\"a\",\"model\":\"m\",\"input_tokens\":1",
		"{}",
		"[]",
		"",
		/* accepted by jansson, left to it */
		"{\"request_id\":\"a\",\"model\":\"m\",\"input_tokens\":1e2}",
		"{\"request_id\":\"a\",\"model\":\"m\",\"input_tokens\":-0}",
		"{\"request_id\":\"a\",\"model\":\"m\",\"input_tokens\":"
		"1234567890123456789}",
		"{\"request_id\":\"a\",\"model\":\"m\",\"input_tokens\":1,"
		"\"elapsed_ms\":1e2}",
	};
	sg_request r;
	size_t i;

	(void)state;
	sg_request_init(&r);
	for (i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
		if (scan_str(&r, texts[i]) != ENOTSUP)
			fail_msg("taken: %s", texts[i]);
	/* the bad last request does not keep the good one before it */
	assert_int_equal(scan_str(&r, "{\"request_id\":\"a\",\"model\":\"m\","
	    "\"input_tokens\":1}"), 0);
	assert_int_equal(scan_str(&r, texts[0]), ENOTSUP);
	assert_null(r.request_id);
	sg_request_release(&r);
	assert_int_equal(sg_request_scan_json(&r, NULL, 0, NULL, NULL),
	    ENOTSUP);
	sg_request_release(&r);
}

static void
test_scan_json_agrees_on_the_fixtures(void **state)
{
	static const char *const files[] = {
		"request-spec.json",
		"../sg-route/req-new.json",
		"../sg-route/req-nokey-b.json",
		"../sg-route/req-plain.json",
		"../sg-route/req-pulsar.json",
		"../sg-route/req-random.json",
		"../sg-route/req-returning-b.json",
		"../sg-route/req-slow.json",
		"../sg-route/req-stale.json",
		"../sg-route/req-bad-method.json",
		/* refused by the full parse: the scan leaves them to it */
		"../sg-route/req-bad-json.json",
		"../sg-route/req-unknown-field.json",
	};
	sg_request r;
	char *text;
	size_t i;
	int rc, full;

	(void)state;
	sg_request_init(&r);
	for (i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		text = slurp(files[i]);
		rc = scan_agrees(&r, text, strlen(text), &full);
		/* every fixture the full parse takes, the scan takes too */
		if (full == 0 && rc != 0)
			fail_msg("%s: not taken", files[i]);
		if (full != 0 && rc == 0)
			fail_msg("%s: taken", files[i]);
		if (i == 0)
			assert_spec_request(&r);
		free(text);
	}
	sg_request_release(&r);
}

/* --- generated objects ---------------------------------------------------- */

struct gen {
	uint64_t	 x;		/* xorshift state */
	char		*p, *end;
};

static unsigned
gen_rand(struct gen *g, unsigned n)
{
	g->x ^= g->x << 13;
	g->x ^= g->x >> 7;
	g->x ^= g->x << 17;
	return (unsigned)(g->x % n);
}

static void
gen_put(struct gen *g, const char *s)
{
	size_t n = strlen(s);

	if ((size_t)(g->end - g->p) > n) {
		memcpy(g->p, s, n);
		g->p += n;
	}
}

/* White space JSON allows (sometimes none), rarely a byte it does not. */
static void
gen_ws(struct gen *g)
{
	static const char *const ws[] = {
		"", "", "", " ", " ", "\t", "\r\n", " \t ", "\n",
	};

	gen_put(g, gen_rand(g, 2000) == 0 ? "\f" : ws[gen_rand(g, 9)]);
}

/* A string's contents: plain text, escapes, UTF-8, and bad forms now
 * and then. */
static void
gen_chars(struct gen *g)
{
	static const char *const good[] = {
		"a", "req-", "Zz9", " ", "  ", "-_.:/", "\\\"", "\\\\", "\\/",
		"\\b", "\\f", "\\n", "\\r", "\\t", "\\u0041", "\\u00e9",
		"\\u65E5", "\\u0020", "\\ud83d\\ude00", "\\uDBFF\\uDFFF",
		"\xc3\xa9", "\xe6\x97\xa5", "\xf0\x9f\x98\x80", "\x7f",
		"\xf4\x8f\xbf\xbf", "\xef\xbf\xbf",
	};
	static const char *const bad[] = {
		"\\u0000", "\\ud800", "\\udc00", "\\ud800\\u0041", "\\x",
		"\\u12", "\\uZZZZ", "\xc0\x80", "\xed\xa0\x80", "\xff", "\x80",
		"\xe6\x97", "\x01", "\x1f", "\xf4\x90\x80\x80", "\\'",
	};
	unsigned i, n = gen_rand(g, 10) == 0 ? 0 : 1 + gen_rand(g, 4);

	for (i = 0; i < n; i++)
		gen_put(g, gen_rand(g, 150) == 0 ?
		    bad[gen_rand(g, sizeof(bad) / sizeof(bad[0]))] :
		    good[gen_rand(g, sizeof(good) / sizeof(good[0]))]);
}

static void
gen_string(struct gen *g)
{
	gen_put(g, "\"");
	gen_chars(g);
	gen_put(g, "\"");
}

/* A value of the wrong kind for most fields. */
static void
gen_other(struct gen *g)
{
	static const char *const v[] = {
		"null", "true", "false", "[]", "{}", "{\"a\":1}", "[1,\"x\"]",
		"\"5\"", "5",
	};

	gen_put(g, v[gen_rand(g, sizeof(v) / sizeof(v[0]))]);
}

static void
gen_number(struct gen *g)
{
	static const char *const v[] = {
		"0", "1", "7", "100", "4095", "4294967295", "4294967296",
		"999999999999999999", "1000000000000000000",
		"9223372036854775807", "9223372036854775808",
		"18446744073709551615", "01", "00", "-0", "-1", "1.0", "1.5",
		"0.25", "1e3", "1E-2", "2.5e1", "12.", ".5", "-", "1x",
		"0.1000000000000000055511151231257827",
	};
	char buf[24];

	if (gen_rand(g, 5) != 0) {
		snprintf(buf, sizeof(buf), "%u", gen_rand(g, 100000));
		gen_put(g, buf);
	} else
		gen_put(g, v[gen_rand(g, sizeof(v) / sizeof(v[0]))]);
}

static void
gen_excluded(struct gen *g)
{
	unsigned i, n = gen_rand(g, 5);

	gen_put(g, "[");
	for (i = 0; i < n; i++) {
		gen_ws(g);
		if (gen_rand(g, 30) == 0)
			gen_other(g);
		else
			gen_string(g);
		gen_ws(g);
		if (i + 1 < n)
			gen_put(g, ",");
	}
	if (gen_rand(g, 80) == 0)
		gen_put(g, ",");
	gen_put(g, "]");
}

/*
 * A request object: the required fields most of the time, others now and
 * then, a repeated or unknown or escaped name rarely, values mostly of
 * the right kind, and rarely a byte flipped, dropped or cut off.
 */
static size_t
gen_object(struct gen *g, char *buf, size_t cap)
{
	static const char *const names[] = {
		"request_id", "model", "input_tokens", "routing_key",
		"cache_affinity_key", "routing_method", "last_cluster_id",
		"priority", "request_slo_ms", "max_wait_ms",
		"excluded_cluster_ids", "elapsed_ms",
	};
	const char *name;
	unsigned order[16], nf = 0, i, f;
	size_t len;

	g->p = buf;
	g->end = buf + cap;
	for (f = 0; f < 3; f++)
		if (gen_rand(g, 12) != 0)
			order[nf++] = f;
	for (f = 3; f < 12; f++)
		if (gen_rand(g, 3) == 0)
			order[nf++] = f;
	if (gen_rand(g, 25) == 0 && nf > 0) {
		f = order[gen_rand(g, nf)];
		order[nf++] = f;			/* a duplicate */
	}
	for (i = 0; i < nf; i++) {		/* shuffle */
		unsigned j = gen_rand(g, nf), t = order[i];

		order[i] = order[j];
		order[j] = t;
	}
	gen_ws(g);
	gen_put(g, "{");
	for (i = 0; i < nf; i++) {
		f = order[i];
		name = names[f];
		gen_ws(g);
		if (gen_rand(g, 100) == 0)
			name = gen_rand(g, 2) ? "colour" : "request\\u005fid";
		gen_put(g, "\"");
		gen_put(g, name);
		gen_put(g, "\"");
		gen_ws(g);
		gen_put(g, ":");
		gen_ws(g);
		if (gen_rand(g, 40) == 0)
			gen_other(g);
		else if (f == 2 || (f >= 7 && f <= 9) || f == 11)
			gen_number(g);
		else if (f == 10)
			gen_excluded(g);
		else
			gen_string(g);
		gen_ws(g);
		if (i + 1 < nf || gen_rand(g, 100) == 0)
			gen_put(g, ",");
	}
	gen_put(g, "}");
	gen_ws(g);
	len = (size_t)(g->p - buf);
	if (len > 2 && gen_rand(g, 20) == 0) {
		size_t at = gen_rand(g, (unsigned)len);

		switch (gen_rand(g, 3)) {
		case 0:
			buf[at] = (char)gen_rand(g, 256);
			break;
		case 1:
			memmove(buf + at, buf + at + 1, len - at - 1);
			len--;
			break;
		default:
			len = at;
			break;
		}
	}
	return len;
}

static bool
has_high(const char *s, size_t len)
{
	size_t i;

	for (i = 0; i < len; i++)
		if ((unsigned char)s[i] >= 0x80)
			return true;
	return false;
}

static void
test_scan_json_agrees_with_the_full_parse_on_generated_objects(void **state)
{
	struct gen g = { 0x9e3779b97f4a7c15ULL, NULL, NULL };
	char buf[4096];
	sg_request r;
	size_t len, i, taken = 0, refused = 0, esc = 0, utf8 = 0, left = 0;
	int rc, full;

	(void)state;
	sg_request_init(&r);
	for (i = 0; i < 50000; i++) {
		len = gen_object(&g, buf, sizeof(buf));
		rc = scan_agrees(&r, buf, len, &full);
		if (rc == 0) {
			taken++;
			if (memchr(buf, '\\', len) != NULL)
				esc++;
			if (has_high(buf, len))
				utf8++;
		} else if (full != 0)
			refused++;
		else
			left++;		/* taken by the full parse only */
	}
	sg_request_release(&r);
	/* the generator reaches every outcome, often */
	print_message("taken %zu (escapes %zu, UTF-8 %zu), refused %zu, "
	    "left to the full parse %zu\n", taken, esc, utf8, refused, left);
	assert_true(taken > 10000);
	assert_true(esc > 2000);
	assert_true(utf8 > 2000);
	assert_true(refused > 5000);
	assert_true(left > 500);
}

/* Requests in a loop reuse the storage: one store, one chunk. */
static void
test_scan_json_reuses_storage_and_release_frees_it(void **state)
{
	const char *text = "{\"request_id\":\"req-000001\",\"model\":\"m\","
	    "\"input_tokens\":1,\"excluded_cluster_ids\":[\"A\",\"B\"]} tail";
	struct sg_request_store *st;
	const char *id;
	sg_request r;
	size_t used;
	int i;

	(void)state;
	sg_request_init(&r);
	assert_int_equal(sg_request_scan_json(&r, text, strlen(text), &used,
	    NULL), 0);
	assert_string_equal(text + used, " tail");
	st = r.store;
	id = r.request_id;
	assert_non_null(st);
	for (i = 0; i < 1000; i++) {
		r.session_state = SG_SESSION_RETURNING;	/* the router's */
		assert_int_equal(sg_request_scan_json(&r, text, strlen(text),
		    &used, NULL), 0);
		assert_ptr_equal(r.store, st);
		assert_ptr_equal(r.request_id, id);
		assert_int_equal(r.session_state, SG_SESSION_UNCLASSIFIED);
		assert_int_equal(r.nexcluded, 2);
		assert_string_equal(r.excluded[1], "B");
	}
	sg_request_release(&r);
	assert_null(r.store);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_init_is_all_absent),
		cmocka_unit_test(test_session_state_names),
		cmocka_unit_test(test_excludes_matches_whole_ids),
		cmocka_unit_test(test_json_reads_spec_example),
		cmocka_unit_test(test_json_round_trips),
		cmocka_unit_test(test_json_blank_strings_are_absent_and_values_trimmed),
		cmocka_unit_test(test_json_requires_request_id_model_and_tokens),
		cmocka_unit_test(test_json_rejects_unknown_fields_naming_them),
		cmocka_unit_test(test_json_rejects_wrong_types_naming_field),
		cmocka_unit_test(test_json_parse_releases_previous_content),
		cmocka_unit_test(test_json_many_excluded_and_long_strings),
		cmocka_unit_test(test_headers_read_captured_request),
		cmocka_unit_test(test_headers_names_are_case_insensitive_and_crlf_ok),
		cmocka_unit_test(test_headers_blank_optional_strings_are_absent),
		cmocka_unit_test(test_headers_invalid_utf8_hint_is_absent_not_an_error),
		cmocka_unit_test(test_headers_required_fields_are_400),
		cmocka_unit_test(test_headers_bad_numerics_are_400),
		cmocka_unit_test(test_headers_numerics_accept_full_width),
		cmocka_unit_test(test_headers_validation_order),
		cmocka_unit_test(test_headers_routing_method_kept_raw),
		cmocka_unit_test(test_headers_excluded_ids_and_first_value_wins),
		cmocka_unit_test(test_headers_ignore_unknown_request_line_and_body),
		cmocka_unit_test(test_headers_malformed_line_is_400),
		cmocka_unit_test(test_headers_round_trip_through_json),
		cmocka_unit_test(test_headers_embedded_nul_makes_value_undecodable),
		cmocka_unit_test(test_list_reads_every_header_case_insensitively),
		cmocka_unit_test(test_list_duplicates_first_wins_excluded_accumulate),
		cmocka_unit_test(test_list_control_bytes_and_bad_utf8_follow_the_rules),
		cmocka_unit_test(test_list_validation_order_ignores_list_order),
		cmocka_unit_test(test_list_bounds_and_bad_arguments),
		cmocka_unit_test(test_list_copies_strings_and_replaces_previous_content),
		cmocka_unit_test(test_text_and_list_forms_agree),
		cmocka_unit_test(test_headers_many_lines_keep_first_value),
		cmocka_unit_test(test_scan_json_takes_the_common_forms_as_the_full_parse_reads_them),
		cmocka_unit_test(test_scan_json_gives_up_on_duplicates_errors_and_unusual_forms),
		cmocka_unit_test(test_scan_json_agrees_on_the_fixtures),
		cmocka_unit_test(test_scan_json_agrees_with_the_full_parse_on_generated_objects),
		cmocka_unit_test(test_scan_json_reuses_storage_and_release_frees_it),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
