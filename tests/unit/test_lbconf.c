/*
 * test_lbconf.c — sg_lbconf.c: lb-config.json parsing, every rule and
 * message of stargate-lb-config(5), every default and alias, normalisations,
 * last_cluster_affinity (stargate-lb-config(5)), x-routing-method resolution
 * (stargate-lb-config(5)), the permissive default, and loading from a file.
 *
 * Messages are asserted as substrings: the parser prefixes them with the
 * source and the location, and the reference's text must survive intact.
 */
#include "sg_test.h"

#include <stdio.h>
#include <stdlib.h>

#include "sg_lbconf.h"

#define FIXTURES	"tests/fixtures/lbconf/"

/* --- helpers ---------------------------------------------------------------- */

static sg_lbconf *
parse_ok(const char *json)
{
	sg_lbconf *c = NULL;
	sg_error err;
	int rc;

	sg_error_clear(&err);
	rc = sg_lbconf_parse(&c, json, strlen(json), "lb.json", &err);
	if (rc != 0)
		fail_msg("parse failed (%d): %s\ninput: %s", rc, err.text, json);
	assert_non_null(c);
	return c;
}

/* Parsing fails with SG_ECONFIG and every given substring in the message. */
static void
parse_fails(const char *json, const char *want, const char *want2)
{
	sg_lbconf *c = NULL;
	sg_error err;
	int rc;

	sg_error_clear(&err);
	rc = sg_lbconf_parse(&c, json, strlen(json), "lb.json", &err);
	if (rc != SG_ECONFIG)
		fail_msg("expected SG_ECONFIG, got %d (%s)\ninput: %s", rc,
		    err.text, json);
	assert_null(c);
	if (strstr(err.text, want) == NULL)
		fail_msg("message \"%s\" lacks \"%s\"", err.text, want);
	if (want2 != NULL && strstr(err.text, want2) == NULL)
		fail_msg("message \"%s\" lacks \"%s\"", err.text, want2);
	assert_int_equal(err.status, 0);
}

static const sg_algdef *
resolve_ok(const sg_lbconf *c, const char *model, const char *method)
{
	const sg_algdef *d = NULL;
	sg_error err;
	int rc;

	sg_error_clear(&err);
	rc = sg_lbconf_resolve(c, model, method, false, &d, &err);
	if (rc != 0)
		fail_msg("resolve(%s, %s) failed: %s", model ? model : "(null)",
		    method ? method : "(null)", err.text);
	assert_non_null(d);
	return d;
}

static void
resolve_fails(const sg_lbconf *c, const char *model, const char *method,
    bool invalid, const char *code, const char *want)
{
	const sg_algdef *d = NULL;
	sg_error err;
	int rc;

	sg_error_clear(&err);
	rc = sg_lbconf_resolve(c, model, method, invalid, &d, &err);
	if (rc != SG_EREQUEST)
		fail_msg("resolve(%s, %s): expected SG_EREQUEST, got %d",
		    model ? model : "(null)", method ? method : "(null)", rc);
	assert_null(d);
	assert_int_equal(err.status, 400);
	assert_string_equal(err.code, code);
	if (want != NULL && strstr(err.text, want) == NULL)
		fail_msg("message \"%s\" lacks \"%s\"", err.text, want);
}

/* One model m1 configured with entry (JSON text). */
static sg_lbconf *
model_conf(const char *entry)
{
	char buf[2048];

	snprintf(buf, sizeof(buf), "{\"models\": {\"m1\": %s}}", entry);
	return parse_ok(buf);
}

static void
model_fails(const char *entry, const char *want, const char *want2)
{
	char buf[2048];

	snprintf(buf, sizeof(buf), "{\"models\": {\"m1\": %s}}", entry);
	parse_fails(buf, want, want2);
}

/* Definitions equal in every field but the id (padding is zeroed). */
static bool
def_same(const sg_algdef *a, const sg_algdef *b)
{
	sg_algdef x, y;

	memcpy(&x, a, sizeof(x));
	memcpy(&y, b, sizeof(y));
	x.id = y.id = 0;
	return memcmp(&x, &y, sizeof(x)) == 0;
}

static const char *const canon[SG_ALG_COUNT] = {
	"power-of-n", "wait-and-widen", "round-robin", "random", "pulsar",
	"pulsar-wait-and-widen",
};

/* --- top level (stargate-lb-config(5)) ------------------------------------ */

static void
test_empty_object_defaults_to_power_of_n(void **state)
{
	sg_lbconf *c;
	const sg_algdef *d;

	(void)state;
	c = parse_ok("{}");
	assert_int_equal(sg_lbconf_ndefs(c), 1);
	d = resolve_ok(c, "any-model", NULL);
	assert_int_equal(d->algorithm, SG_ALG_POWER_OF_N);
	assert_int_equal(d->id, 0);
	assert_ptr_equal(sg_lbconf_def(c, 0), d);
	assert_null(sg_lbconf_def(c, 1));
	sg_lbconf_free(c);
}

static void
test_default_takes_name(void **state)
{
	sg_lbconf *c;

	(void)state;
	c = parse_ok("{\"default\": \"pulsar\"}");
	assert_int_equal(resolve_ok(c, "m", NULL)->algorithm, SG_ALG_PULSAR);
	sg_lbconf_free(c);
}

static void
test_default_object_is_rejected(void **state)
{
	(void)state;
	parse_fails("{\"default\": {\"algorithm\": \"pulsar\"}}",
	    "lb.json: default: must be an algorithm name", NULL);
}

static void
test_default_non_string_is_rejected(void **state)
{
	(void)state;
	parse_fails("{\"default\": 3}", "default: must be an algorithm name",
	    NULL);
	parse_fails("{\"default\": null}", "default: must be an algorithm name",
	    NULL);
}

static void
test_default_unknown_name_is_rejected(void **state)
{
	(void)state;
	parse_fails("{\"default\": \"fastest\"}",
	    "default: unknown algorithm \"fastest\"", NULL);
}

static void
test_unknown_top_level_field_rejected(void **state)
{
	(void)state;
	parse_fails("{\"default\": \"random\", \"modles\": {}}",
	    "unknown field modles", NULL);
}

static void
test_top_level_must_be_object(void **state)
{
	(void)state;
	parse_fails("[\"random\"]", "top level must be a JSON object", NULL);
}

static void
test_models_and_request_algorithms_must_be_objects(void **state)
{
	(void)state;
	parse_fails("{\"models\": []}", "models: expected object", NULL);
	parse_fails("{\"request_algorithms\": \"random\"}",
	    "request_algorithms: expected object", NULL);
}

static void
test_bad_json_names_line_and_column(void **state)
{
	(void)state;
	parse_fails("{\n  \"default\": \"random\",\n  \"models\": {,}\n}\n",
	    "lb.json:3:", "invalid JSON");
}

static void
test_duplicate_keys_rejected(void **state)
{
	(void)state;
	parse_fails("{\"models\": {\"m1\": \"random\", \"m1\": \"pulsar\"}}",
	    "duplicate", NULL);
}

static void
test_entry_of_other_json_type_rejected(void **state)
{
	static const char *const bad[] = { "3", "true", "null", "[\"random\"]",
	    "1.5" };
	char buf[256];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(buf, sizeof(buf), "{\"models\": {\"m1\": %s}}", bad[i]);
		parse_fails(buf, "models.m1: must be an algorithm name or "
		    "detailed config object", NULL);
		snprintf(buf, sizeof(buf),
		    "{\"request_algorithms\": {\"random\": %s}}", bad[i]);
		parse_fails(buf, "request_algorithms.random: must be an "
		    "algorithm name or detailed config object", NULL);
	}
}

static void
test_unknown_algorithm_name_rejected(void **state)
{
	(void)state;
	model_fails("\"least-loaded\"", "models.m1: unknown algorithm "
	    "\"least-loaded\"", NULL);
	model_fails("{\"algorithm\": \"least-loaded\"}",
	    "algorithm: unknown algorithm \"least-loaded\"", NULL);
}

static void
test_detailed_object_requires_algorithm(void **state)
{
	(void)state;
	model_fails("{\"seed\": \"x\"}", "models.m1: missing field algorithm",
	    NULL);
	model_fails("{\"algorithm\": 4}", "algorithm: expected string", NULL);
	model_fails("{\"algorithm\": null}", "invalid type: null", NULL);
}

static void
test_request_algorithms_key_must_match_algorithm(void **state)
{
	(void)state;
	parse_fails("{\"request_algorithms\": {\"pulsar\": \"random\"}}",
	    "request_algorithms key pulsar does not match configured "
	    "algorithm random", NULL);
	parse_fails("{\"request_algorithms\": {\"fast\": "
	    "{\"algorithm\": \"powerOf2\"}}}",
	    "request_algorithms key fast does not match configured "
	    "algorithm power-of-n", NULL);
	parse_fails("{\"models\": {\"m1\": {\"algorithm\": \"random\", "
	    "\"request_algorithms\": {\"random\": \"pulsar\"}}}}",
	    "models.m1: request_algorithms key random does not match "
	    "configured algorithm pulsar", NULL);
}

static void
test_request_algorithms_key_may_be_an_alias(void **state)
{
	sg_lbconf *c;

	(void)state;
	c = parse_ok("{\"default\": \"random\", \"request_algorithms\": {"
	    "\"groq-multiregion\": \"wait-and-widen\", "
	    "\"pulsar-wait-and-widen\": \"pulsar-multiregion\", "
	    "\"powerOfN\": \"power-of-two\"}}");
	assert_int_equal(resolve_ok(c, "m", "wait-and-widen")->algorithm,
	    SG_ALG_WAIT_AND_WIDEN);
	assert_int_equal(resolve_ok(c, "m", "pulsar-wait-and-widen")->algorithm,
	    SG_ALG_PULSAR_WAW);
	assert_int_equal(resolve_ok(c, "m", "power-of-n")->algorithm,
	    SG_ALG_POWER_OF_N);
	sg_lbconf_free(c);
}

static void
test_request_algorithms_two_keys_for_one_algorithm_rejected(void **state)
{
	(void)state;
	parse_fails("{\"request_algorithms\": {\"power-of-n\": \"power-of-n\", "
	    "\"powerOf2\": \"power-of-n\"}}",
	    "more than one entry for power-of-n", NULL);
}

/* --- unsupported fields (stargate-lb-config(5)) --------------------------- */

static void
test_unsupported_fields_sorted_with_canonical_name(void **state)
{
	(void)state;
	model_fails("{\"algorithm\": \"powerOf2\", \"seed\": \"s\", \"n\": 3, "
	    "\"max_queued\": 1}",
	    "models.m1: power-of-n config does not support field(s): "
	    "max_queued, n, seed", NULL);
}

static void
test_unknown_field_is_unsupported(void **state)
{
	(void)state;
	model_fails("{\"algorithm\": \"wait-and-widen\", \"bogus\": 1}",
	    "wait-and-widen config does not support field(s): bogus", NULL);
}

static void
test_unsupported_message_names_location(void **state)
{
	(void)state;
	model_fails("{\"algorithm\": \"pulsar\", \"n\": 2}",
	    "models.m1: pulsar config does not support field(s): n", NULL);
	parse_fails("{\"request_algorithms\": {\"random\": {\"algorithm\": "
	    "\"random\", \"seed\": \"x\"}}}",
	    "request_algorithms.random: random config does not support "
	    "field(s): seed", NULL);
	parse_fails("{\"models\": {\"m1\": {\"algorithm\": \"random\", "
	    "\"request_algorithms\": {\"round-robin\": {\"algorithm\": "
	    "\"round-robin\", \"sample_count\": 2}}}}}",
	    "models.m1.request_algorithms.round-robin: round-robin config "
	    "does not support field(s): sample_count", NULL);
}

static void
test_round_robin_and_random_accept_only_common_fields(void **state)
{
	sg_lbconf *c;
	const sg_algdef *d;

	(void)state;
	c = model_conf("{\"algorithm\": \"round-robin\", "
	    "\"require_cache_affinity_key\": true, \"require_input_tokens\": "
	    "true, \"max_input_work_seconds\": 2.5}");
	d = resolve_ok(c, "m1", NULL);
	assert_true(d->require_cache_affinity_key);
	assert_true(d->require_input_tokens);
	assert_true(d->has_max_input_work);
	assert_near(d->max_input_work_seconds, 2.5, 0);
	sg_lbconf_free(c);
	model_fails("{\"algorithm\": \"random\", \"comparator\": \"ttft\"}",
	    "random config does not support field(s): comparator", NULL);
	model_fails("{\"algorithm\": \"round-robin\", \"n\": 1}",
	    "round-robin config does not support field(s): n", NULL);
}

static void
test_pulsar_rejects_wait_and_widen_fields(void **state)
{
	(void)state;
	model_fails("{\"algorithm\": \"pulsar\", \"cache_affinity_wait_ms\": 3,"
	    " \"comparator\": \"ttft\"}",
	    "pulsar config does not support field(s): cache_affinity_wait_ms, "
	    "comparator", NULL);
}

static void
test_rendezvous_weight_rejected_for_wait_and_widen(void **state)
{
	(void)state;
	model_fails("{\"algorithm\": \"wait-and-widen\", \"rendezvous_weight\":"
	    " \"max-input-tps\"}", "wait-and-widen config does not support "
	    "field(s): rendezvous_weight", NULL);
}

/* --- field rules (stargate-lb-config(5)) ---------------------------------- */

static void
test_sample_count_range_1_to_64(void **state)
{
	sg_lbconf *c;

	(void)state;
	model_fails("{\"algorithm\": \"power-of-n\", \"sample_count\": 0}",
	    "power-of-n sample_count must be between 1 and 64, got 0", NULL);
	model_fails("{\"algorithm\": \"power-of-n\", \"sample_count\": 65}",
	    "power-of-n sample_count must be between 1 and 64, got 65", NULL);
	model_fails("{\"algorithm\": \"power-of-n\", \"sample_count\": "
	    "10000000000}", "power-of-n sample_count must be between 1 and 64, "
	    "got 10000000000", NULL);
	c = model_conf("{\"algorithm\": \"power-of-n\", \"sample_count\": 1}");
	assert_int_equal(resolve_ok(c, "m1", NULL)->sample_count, 1);
	sg_lbconf_free(c);
	c = model_conf("{\"algorithm\": \"power-of-n\", \"sample_count\": 64}");
	assert_int_equal(resolve_ok(c, "m1", NULL)->sample_count, 64);
	sg_lbconf_free(c);
}

static void
test_virtual_nodes_bounded_at_1024(void **state)
{
	sg_lbconf *c;

	(void)state;
	model_fails("{\"algorithm\": \"wait-and-widen\", "
	    "\"cache_affinity_virtual_nodes\": 1025}",
	    "cache_affinity_virtual_nodes must be between 0 and 1024, got 1025",
	    NULL);
	c = model_conf("{\"algorithm\": \"wait-and-widen\", "
	    "\"cache_affinity_virtual_nodes\": 1024}");
	assert_int_equal(resolve_ok(c, "m1", NULL)->virtual_nodes, 1024);
	sg_lbconf_free(c);
}

static void
test_comparator_values(void **state)
{
	static const struct {
		const char	*name;
		int		 cmp;
	} t[] = {
		{ "ttft", SG_CMP_TTFT },
		{ "queue-time", SG_CMP_QUEUE_TIME },
		{ "input-work-seconds", SG_CMP_INPUT_WORK },
		{ "utilization", SG_CMP_UTILIZATION },
		{ "num-requests-queued", SG_CMP_NUM_QUEUED },
	};
	char buf[256];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		sg_lbconf *c;

		snprintf(buf, sizeof(buf), "{\"algorithm\": \"power-of-n\", "
		    "\"comparator\": \"%s\"}", t[i].name);
		c = model_conf(buf);
		assert_int_equal(resolve_ok(c, "m1", NULL)->comparator,
		    t[i].cmp);
		sg_lbconf_free(c);
		snprintf(buf, sizeof(buf), "{\"algorithm\": \"wait-and-widen\", "
		    "\"comparator\": \"%s\"}", t[i].name);
		c = model_conf(buf);
		assert_int_equal(resolve_ok(c, "m1", NULL)->comparator,
		    t[i].cmp);
		sg_lbconf_free(c);
		assert_string_equal(sg_comparator_name(t[i].cmp), t[i].name);
	}
	assert_null(sg_comparator_name(SG_CMP_NONE));
	assert_null(sg_comparator_name(99));
}

static void
test_comparator_null_rejected(void **state)
{
	(void)state;
	model_fails("{\"algorithm\": \"power-of-n\", \"comparator\": null}",
	    "invalid type: null", "comparator");
	model_fails("{\"algorithm\": \"wait-and-widen\", \"comparator\": null}",
	    "invalid type: null", "comparator");
}

static void
test_comparator_unknown_rejected(void **state)
{
	(void)state;
	model_fails("{\"algorithm\": \"power-of-n\", \"comparator\": \"TTFT\"}",
	    "comparator: unknown comparator \"TTFT\"", NULL);
	model_fails("{\"algorithm\": \"power-of-n\", \"comparator\": 1}",
	    "comparator: expected string", NULL);
}

static void
test_comparator_rejected_for_pulsar_wait_and_widen(void **state)
{
	(void)state;
	model_fails("{\"algorithm\": \"pulsar-wait-and-widen\", \"comparator\":"
	    " \"ttft\"}", "comparator is not supported for "
	    "pulsar-wait-and-widen", NULL);
	parse_fails("{\"request_algorithms\": {\"pulsar-multiregion\": "
	    "{\"algorithm\": \"pulsar-multiregion\", \"comparator\": "
	    "\"queue-time\"}}}", "comparator is not supported for "
	    "pulsar-wait-and-widen", NULL);
}

static void
test_consider_kv_free_tokens_pulsar_family_only(void **state)
{
	sg_lbconf *c;

	(void)state;
	c = model_conf("{\"algorithm\": \"pulsar\", \"consider_kv_free_tokens\":"
	    " true}");
	assert_true(resolve_ok(c, "m1", NULL)->consider_kv_free_tokens);
	sg_lbconf_free(c);
	c = model_conf("{\"algorithm\": \"pulsar-wait-and-widen\", "
	    "\"consider_kv_free_tokens\": true}");
	assert_true(resolve_ok(c, "m1", NULL)->consider_kv_free_tokens);
	sg_lbconf_free(c);
	model_fails("{\"algorithm\": \"wait-and-widen\", "
	    "\"consider_kv_free_tokens\": true}",
	    "consider_kv_free_tokens is supported only for pulsar and "
	    "pulsar-wait-and-widen", NULL);
	model_fails("{\"algorithm\": \"power-of-n\", "
	    "\"consider_kv_free_tokens\": false}",
	    "consider_kv_free_tokens is supported only for pulsar and "
	    "pulsar-wait-and-widen", "power-of-n config does not support "
	    "field(s): consider_kv_free_tokens");
	model_fails("{\"algorithm\": \"random\", "
	    "\"consider_kv_free_tokens\": true}",
	    "consider_kv_free_tokens is supported only for pulsar and "
	    "pulsar-wait-and-widen", NULL);
}

static void
test_band_widen_interval_rejected_for_wait_and_widen(void **state)
{
	(void)state;
	model_fails("{\"algorithm\": \"wait-and-widen\", "
	    "\"band_widen_interval_ms\": 100}",
	    "band_widen_interval_ms is supported only for "
	    "pulsar-wait-and-widen", NULL);
	model_fails("{\"algorithm\": \"pulsar\", \"band_widen_interval_ms\": "
	    "100}", "pulsar config does not support field(s): "
	    "band_widen_interval_ms", NULL);
}

static void
test_fallback_max_queued_rejected_for_wait_and_widen(void **state)
{
	(void)state;
	model_fails("{\"algorithm\": \"groq-multiregion\", "
	    "\"fallback_max_queued\": 2}",
	    "fallback_max_queued is supported only for pulsar-wait-and-widen",
	    NULL);
}

static void
test_pulsar_wait_and_widen_band_and_fallback(void **state)
{
	sg_lbconf *c;
	const sg_algdef *d;

	(void)state;
	c = model_conf("{\"algorithm\": \"pulsar-wait-and-widen\", "
	    "\"band_widen_interval_ms\": 200, \"fallback_max_queued\": 3}");
	d = resolve_ok(c, "m1", NULL);
	assert_true(d->has_band_widen);
	assert_int_equal(d->band_widen_interval_ms, 200);
	assert_int_equal(d->fallback_max_queued, 3);
	sg_lbconf_free(c);
	c = model_conf("{\"algorithm\": \"pulsar-wait-and-widen\", "
	    "\"band_widen_interval_ms\": 0}");
	d = resolve_ok(c, "m1", NULL);
	assert_true(d->has_band_widen);		/* S = 0: widen at once */
	assert_int_equal(d->band_widen_interval_ms, 0);
	sg_lbconf_free(c);
}

static void
test_scale_must_be_within_0_and_1(void **state)
{
	sg_lbconf *c;

	(void)state;
	model_fails("{\"algorithm\": \"wait-and-widen\", "
	    "\"cache_affinity_input_tokens_scale\": 1.5}",
	    "cache_affinity_input_tokens_scale must be between 0.0 and 1.0, "
	    "got 1.5", NULL);
	model_fails("{\"algorithm\": \"pulsar-wait-and-widen\", "
	    "\"cache_affinity_input_tokens_scale\": -0.25}",
	    "cache_affinity_input_tokens_scale must be between 0.0 and 1.0, "
	    "got -0.25", NULL);
	model_fails("{\"algorithm\": \"wait-and-widen\", "
	    "\"cache_affinity_input_tokens_scale\": 2}",
	    "cache_affinity_input_tokens_scale must be between 0.0 and 1.0, "
	    "got 2", NULL);
	c = model_conf("{\"algorithm\": \"wait-and-widen\", "
	    "\"cache_affinity_input_tokens_scale\": 0}");
	assert_near(resolve_ok(c, "m1", NULL)->affinity_scale, 0.0, 0);
	sg_lbconf_free(c);
	c = model_conf("{\"algorithm\": \"wait-and-widen\", "
	    "\"cache_affinity_input_tokens_scale\": 1.0}");
	assert_near(resolve_ok(c, "m1", NULL)->affinity_scale, 1.0, 0);
	sg_lbconf_free(c);
	c = model_conf("{\"algorithm\": \"wait-and-widen\", "
	    "\"cache_affinity_input_tokens_scale\": 0.1}");
	assert_near(resolve_ok(c, "m1", NULL)->affinity_scale, 0.1, 0);
	sg_lbconf_free(c);
}

static void
test_scale_overflowing_number_rejected(void **state)
{
	(void)state;
	/* JSON has no NaN or infinity; a number too large for a double is
	 * refused by the JSON reader itself. */
	model_fails("{\"algorithm\": \"wait-and-widen\", "
	    "\"cache_affinity_input_tokens_scale\": 1e400}", "invalid JSON",
	    NULL);
}

static void
test_rendezvous_weight_values(void **state)
{
	sg_lbconf *c;

	(void)state;
	c = model_conf("{\"algorithm\": \"pulsar\", \"rendezvous_weight\": "
	    "\"last-mean-input-tps\"}");
	assert_int_equal(resolve_ok(c, "m1", NULL)->rendezvous_weight,
	    SG_WEIGHT_LAST_MEAN_INPUT_TPS);
	sg_lbconf_free(c);
	c = model_conf("{\"algorithm\": \"pulsar-wait-and-widen\", "
	    "\"rendezvous_weight\": \"max-input-tps\"}");
	assert_int_equal(resolve_ok(c, "m1", NULL)->rendezvous_weight,
	    SG_WEIGHT_MAX_INPUT_TPS);
	sg_lbconf_free(c);
	model_fails("{\"algorithm\": \"pulsar\", \"rendezvous_weight\": "
	    "\"mean\"}", "rendezvous_weight: unknown weight \"mean\"", NULL);
}

static void
test_virtual_nodes_zero_becomes_one(void **state)
{
	sg_lbconf *c;

	(void)state;
	c = model_conf("{\"algorithm\": \"wait-and-widen\", "
	    "\"cache_affinity_virtual_nodes\": 0}");
	assert_int_equal(resolve_ok(c, "m1", NULL)->virtual_nodes, 1);
	sg_lbconf_free(c);
	c = model_conf("{\"algorithm\": \"wait-and-widen\", "
	    "\"cache_affinity_virtual_nodes\": 8}");
	assert_int_equal(resolve_ok(c, "m1", NULL)->virtual_nodes, 8);
	sg_lbconf_free(c);
	/* p-w-a-w accepts the field (and the router ignores it). */
	c = model_conf("{\"algorithm\": \"pulsar-wait-and-widen\", "
	    "\"cache_affinity_virtual_nodes\": 0}");
	assert_int_equal(resolve_ok(c, "m1", NULL)->virtual_nodes, 1);
	sg_lbconf_free(c);
}

static void
test_selection_count_zero_unset_for_waw_one_for_pwaw(void **state)
{
	sg_lbconf *c;

	(void)state;
	c = model_conf("{\"algorithm\": \"wait-and-widen\", "
	    "\"cache_affinity_backend_selection_count\": 0}");
	assert_int_equal(resolve_ok(c, "m1", NULL)->selection_count, 0);
	sg_lbconf_free(c);
	c = model_conf("{\"algorithm\": \"pulsar-wait-and-widen\", "
	    "\"cache_affinity_backend_selection_count\": 0}");
	assert_int_equal(resolve_ok(c, "m1", NULL)->selection_count, 1);
	sg_lbconf_free(c);
	c = model_conf("{\"algorithm\": \"wait-and-widen\", "
	    "\"cache_affinity_backend_selection_count\": 3}");
	assert_int_equal(resolve_ok(c, "m1", NULL)->selection_count, 3);
	sg_lbconf_free(c);
	c = model_conf("{\"algorithm\": \"pulsar-wait-and-widen\", "
	    "\"cache_affinity_backend_selection_count\": 2}");
	assert_int_equal(resolve_ok(c, "m1", NULL)->selection_count, 2);
	sg_lbconf_free(c);
}

static void
test_n_zero_becomes_one(void **state)
{
	sg_lbconf *c;

	(void)state;
	c = model_conf("{\"algorithm\": \"wait-and-widen\", \"n\": 0}");
	assert_int_equal(resolve_ok(c, "m1", NULL)->n, 1);
	sg_lbconf_free(c);
	c = model_conf("{\"algorithm\": \"pulsar-wait-and-widen\", \"n\": 5}");
	assert_int_equal(resolve_ok(c, "m1", NULL)->n, 5);
	sg_lbconf_free(c);
}

/* --- integers above INT64_MAX (issue 12) -------------------------------------- */

/* Regression: 18446744073709551615 was refused by the JSON parser. */
static void
test_u64_fields_take_the_full_range_up_to_18446744073709551615(void **state)
{
	sg_lbconf *c;
	const sg_algdef *d;

	(void)state;
	c = model_conf("{\"algorithm\": \"wait-and-widen\", "
	    "\"max_queued\": 18446744073709551615, "
	    "\"cache_affinity_wait_ms\": 9223372036854775808, "
	    "\"ttft_bucket_size_ms\": 9223372036854775807, "
	    "\"max_queue_time_floor_ms\": 18446744073709551614,\n"
	    "\"max_queue_time_ceil_ms\":10000000000000000000}");
	d = resolve_ok(c, "m1", NULL);
	assert_true(d->max_queued == UINT64_MAX);
	assert_true(d->affinity_wait_ms == UINT64_C(9223372036854775808));
	assert_true(d->ttft_bucket_size_ms == UINT64_C(9223372036854775807));
	assert_true(d->max_queue_time_floor_ms == UINT64_MAX - 1);
	assert_true(d->max_queue_time_ceil_ms ==
	    UINT64_C(10000000000000000000));
	sg_lbconf_free(c);
	c = model_conf("{\"algorithm\": \"pulsar-wait-and-widen\", "
	    "\"fallback_max_queued\": 18446744073709551615, "
	    "\"band_widen_interval_ms\": 12345678901234567890}");
	d = resolve_ok(c, "m1", NULL);
	assert_true(d->fallback_max_queued == UINT64_MAX);
	assert_true(d->band_widen_interval_ms == UINT64_C(12345678901234567890));
	sg_lbconf_free(c);
}

static void
test_u64_field_above_18446744073709551615_is_refused(void **state)
{
	(void)state;
	model_fails("{\"algorithm\": \"wait-and-widen\", "
	    "\"max_queued\": 18446744073709551616}",
	    "max_queued: expected unsigned integer", NULL);
	model_fails("{\"algorithm\": \"wait-and-widen\", "
	    "\"max_queued\": 100000000000000000000000}",
	    "max_queued: expected unsigned integer", NULL);
	model_fails("{\"algorithm\": \"wait-and-widen\", \"max_queued\": -1}",
	    "max_queued: expected unsigned integer", NULL);
}

/* Messages show the exact value of a big literal. */
static void
test_u64_big_literal_in_a_smaller_field_is_out_of_range_exactly(void **state)
{
	(void)state;
	model_fails("{\"algorithm\": \"wait-and-widen\", "
	    "\"n\": 18446744073709551615}",
	    "n: 18446744073709551615 is out of range (at most 4294967295)",
	    NULL);
	model_fails("{\"algorithm\": \"power-of-n\", "
	    "\"sample_count\": 18446744073709551615}",
	    "power-of-n sample_count must be between 1 and 64, got "
	    "18446744073709551615", NULL);
}

/* A number field takes any integer literal; a string keeps its digits. */
static void
test_u64_big_literal_in_a_number_field_and_in_a_string(void **state)
{
	sg_lbconf *c;
	const sg_algdef *d;

	(void)state;
	c = model_conf("{\"algorithm\": \"wait-and-widen\", "
	    "\"seed\": \"18446744073709551615\", "
	    "\"next_bucket_unlock_factor\": 18446744073709551615}");
	d = resolve_ok(c, "m1", NULL);
	assert_int_equal(d->seed_len, 20);
	assert_memory_equal(d->seed, "18446744073709551615", 20);
	assert_near(d->next_bucket_unlock_factor, 18446744073709551615.0, 0);
	sg_lbconf_free(c);
	c = model_conf("{\"algorithm\": \"wait-and-widen\", "
	    "\"next_bucket_unlock_factor\": 100000000000000000000000}");
	d = resolve_ok(c, "m1", NULL);
	assert_near(d->next_bucket_unlock_factor, 1e23, 1e8);
	sg_lbconf_free(c);
}

/* A syntax error after a big literal is reported at the same column. */
static void
test_u64_big_literal_keeps_error_lines_and_columns(void **state)
{
	const char *big = "{\"models\": {\"m1\": {\"algorithm\": "
	    "\"wait-and-widen\",\n\"max_queued\": 18446744073709551615 ,, }}}";
	const char *str = "{\"models\": {\"m1\": {\"algorithm\": "
	    "\"wait-and-widen\",\n\"max_queued\": \"123456789012345678\" ,, }}}";
	sg_lbconf *c = NULL;
	sg_error e1, e2;

	(void)state;
	sg_error_clear(&e1);
	sg_error_clear(&e2);
	assert_int_equal(sg_lbconf_parse(&c, big, strlen(big), "lb.json",
	    &e1), SG_ECONFIG);
	assert_int_equal(sg_lbconf_parse(&c, str, strlen(str), "lb.json",
	    &e2), SG_ECONFIG);
	assert_non_null(strstr(e1.text, "lb.json:2:"));
	assert_string_equal(e1.text, e2.text);
}

/* The stand-ins for big literals never meet a value from the text. */
static void
test_u64_big_literal_with_a_reserved_negative_integer_is_refused(void **state)
{
	sg_lbconf *c;

	(void)state;
	model_fails("{\"algorithm\": \"wait-and-widen\", "
	    "\"next_bucket_unlock_factor\": -999999999999999999, "
	    "\"max_queued\": 18446744073709551615}",
	    "cannot be used together with one above 9223372036854775807",
	    NULL);
	c = model_conf("{\"algorithm\": \"wait-and-widen\", "
	    "\"next_bucket_unlock_factor\": -999999999999999999}");
	assert_near(resolve_ok(c, "m1", NULL)->next_bucket_unlock_factor,
	    -999999999999999999.0, 0);
	sg_lbconf_free(c);
}

static void
test_wait_and_widen_fields_are_read(void **state)
{
	sg_lbconf *c;
	const sg_algdef *d;

	(void)state;
	c = model_conf("{\"algorithm\": \"wait-and-widen\", \"seed\": \"s-1\", "
	    "\"cache_affinity_wait_ms\": 300, \"max_queue_time_floor_ms\": 300,"
	    " \"max_queue_time_ceil_ms\": 100, \"ttft_bucket_size_ms\": 50, "
	    "\"next_bucket_unlock_factor\": 3.5, \"max_queued\": 4, "
	    "\"ignore_queue_time\": true, \"ignore_input_processing_time\": "
	    "true, \"require_cache_affinity_key\": true}");
	d = resolve_ok(c, "m1", NULL);
	assert_string_equal(d->seed, "s-1");
	assert_int_equal(d->seed_len, 3);
	assert_int_equal(d->affinity_wait_ms, 300);
	/* floor above ceil: accepted and not reordered */
	assert_true(d->has_queue_floor && d->has_queue_ceil);
	assert_int_equal(d->max_queue_time_floor_ms, 300);
	assert_int_equal(d->max_queue_time_ceil_ms, 100);
	assert_int_equal(d->ttft_bucket_size_ms, 50);
	assert_near(d->next_bucket_unlock_factor, 3.5, 0);	/* no range */
	assert_int_equal(d->max_queued, 4);
	assert_true(d->ignore_queue_time);
	assert_true(d->ignore_input_processing_time);
	assert_true(d->require_cache_affinity_key);
	sg_lbconf_free(c);
}

static void
test_max_input_work_seconds_not_range_checked(void **state)
{
	sg_lbconf *c;
	const sg_algdef *d;

	(void)state;
	c = model_conf("{\"algorithm\": \"pulsar\", \"max_input_work_seconds\":"
	    " -1}");
	d = resolve_ok(c, "m1", NULL);
	assert_true(d->has_max_input_work);
	assert_near(d->max_input_work_seconds, -1.0, 0);
	sg_lbconf_free(c);
}

static void
test_type_errors_name_the_field(void **state)
{
	(void)state;
	model_fails("{\"algorithm\": \"wait-and-widen\", \"n\": \"2\"}",
	    "models.m1: n: expected unsigned integer", NULL);
	model_fails("{\"algorithm\": \"wait-and-widen\", \"n\": -1}",
	    "n: expected unsigned integer", NULL);
	model_fails("{\"algorithm\": \"wait-and-widen\", \"n\": 2.0}",
	    "n: expected unsigned integer", NULL);
	model_fails("{\"algorithm\": \"wait-and-widen\", "
	    "\"cache_affinity_wait_ms\": true}",
	    "cache_affinity_wait_ms: expected unsigned integer", NULL);
	model_fails("{\"algorithm\": \"wait-and-widen\", "
	    "\"cache_affinity_input_tokens_scale\": \"0.5\"}",
	    "cache_affinity_input_tokens_scale: expected number", NULL);
	model_fails("{\"algorithm\": \"pulsar\", \"seed\": 7}",
	    "seed: expected string", NULL);
	model_fails("{\"algorithm\": \"random\", "
	    "\"require_cache_affinity_key\": \"yes\"}",
	    "require_cache_affinity_key: expected boolean", NULL);
	model_fails("{\"algorithm\": \"random\", \"request_algorithms\": []}",
	    "request_algorithms: expected object", NULL);
}

static void
test_uint_field_beyond_32_bits_rejected(void **state)
{
	(void)state;
	model_fails("{\"algorithm\": \"wait-and-widen\", "
	    "\"cache_affinity_virtual_nodes\": 4294967296}",
	    "cache_affinity_virtual_nodes: 4294967296 is out of range", NULL);
}

static void
test_null_means_unset_for_unset_defaults(void **state)
{
	sg_lbconf *c;
	const sg_algdef *d;

	(void)state;
	c = model_conf("{\"algorithm\": \"pulsar-wait-and-widen\", "
	    "\"cache_affinity_backend_selection_count\": null, "
	    "\"band_widen_interval_ms\": null, \"max_queue_time_floor_ms\": "
	    "null, \"max_queue_time_ceil_ms\": null, \"max_input_work_seconds\":"
	    " null}");
	d = resolve_ok(c, "m1", NULL);
	assert_int_equal(d->selection_count, 1);
	assert_false(d->has_band_widen);
	assert_false(d->has_queue_floor);
	assert_false(d->has_queue_ceil);
	assert_false(d->has_max_input_work);
	sg_lbconf_free(c);
}

static void
test_null_rejected_where_default_is_a_value(void **state)
{
	(void)state;
	model_fails("{\"algorithm\": \"wait-and-widen\", \"n\": null}",
	    "n: invalid type: null", NULL);
	model_fails("{\"algorithm\": \"wait-and-widen\", "
	    "\"last_cluster_affinity\": null}",
	    "last_cluster_affinity: invalid type: null", NULL);
}

static void
test_seed_longer_than_256_bytes_rejected(void **state)
{
	char seed[300], buf[512];
	sg_lbconf *c;

	(void)state;
	memset(seed, 'a', 256);
	seed[256] = '\0';
	snprintf(buf, sizeof(buf), "{\"algorithm\": \"pulsar\", \"seed\": "
	    "\"%s\"}", seed);
	c = model_conf(buf);
	assert_int_equal(resolve_ok(c, "m1", NULL)->seed_len, 256);
	sg_lbconf_free(c);
	seed[256] = 'a';
	seed[257] = '\0';
	snprintf(buf, sizeof(buf), "{\"algorithm\": \"pulsar\", \"seed\": "
	    "\"%s\"}", seed);
	model_fails(buf, "seed: longer than 256 bytes", NULL);
}

/* --- defaults (stargate-lb-config(5)) ------------------------------------- */

static void
check_common_defaults(const sg_algdef *d, int alg)
{
	assert_int_equal(d->algorithm, alg);
	assert_false(d->require_cache_affinity_key);
	assert_false(d->require_input_tokens);
	assert_false(d->has_max_input_work);
	assert_int_equal(d->sample_count, 2);
	assert_int_equal(d->comparator,
	    alg == SG_ALG_PULSAR_WAW ? SG_CMP_NONE : SG_CMP_TTFT);
	assert_int_equal(d->seed_len, 0);
	assert_string_equal(d->seed, "");
	assert_false(d->consider_kv_free_tokens);
	assert_int_equal(d->rendezvous_weight, SG_WEIGHT_MAX_INPUT_TPS);
	assert_int_equal(d->virtual_nodes, 150);
	assert_int_equal(d->selection_count, alg == SG_ALG_PULSAR_WAW ? 1 : 0);
	assert_int_equal(d->affinity_wait_ms, 0);
	assert_near(d->affinity_scale, 1.0, 0);
	assert_false(d->has_band_widen);
	assert_int_equal(d->fallback_max_queued, 0);
	assert_false(d->has_queue_floor);
	assert_false(d->has_queue_ceil);
	assert_int_equal(d->ttft_bucket_size_ms, 20);
	assert_near(d->next_bucket_unlock_factor, 0.25, 0);
	assert_int_equal(d->n, 2);
	assert_int_equal(d->max_queued, 0);
	assert_false(d->ignore_queue_time);
	assert_false(d->ignore_input_processing_time);
	assert_false(d->last_cluster_affinity);
}

static void
test_name_only_entries_use_every_default(void **state)
{
	char buf[256];
	int alg;

	(void)state;
	for (alg = 0; alg < SG_ALG_COUNT; alg++) {
		sg_lbconf *c;

		snprintf(buf, sizeof(buf), "\"%s\"", canon[alg]);
		c = model_conf(buf);
		check_common_defaults(resolve_ok(c, "m1", NULL), alg);
		sg_lbconf_free(c);
	}
}

static void
test_detailed_object_with_only_algorithm_equals_name(void **state)
{
	char buf[256];
	int alg;

	(void)state;
	for (alg = 0; alg < SG_ALG_COUNT; alg++) {
		sg_lbconf *a, *b;

		snprintf(buf, sizeof(buf), "\"%s\"", canon[alg]);
		a = model_conf(buf);
		snprintf(buf, sizeof(buf), "{\"algorithm\": \"%s\"}", canon[alg]);
		b = model_conf(buf);
		assert_true(def_same(resolve_ok(a, "m1", NULL),
		    resolve_ok(b, "m1", NULL)));
		check_common_defaults(resolve_ok(b, "m1", NULL), alg);
		sg_lbconf_free(a);
		sg_lbconf_free(b);
	}
}

/* --- names and aliases (stargate-lb-config(5)) ---------------------------- */

static const struct {
	const char	*name;
	int		 alg;
} aliases[] = {
	{ "power-of-two", SG_ALG_POWER_OF_N },
	{ "powerOf2", SG_ALG_POWER_OF_N },
	{ "powerOfN", SG_ALG_POWER_OF_N },
	{ "powerof2", SG_ALG_POWER_OF_N },
	{ "powerofn", SG_ALG_POWER_OF_N },
	{ "groq-multiregion", SG_ALG_WAIT_AND_WIDEN },
	{ "pulsar-multiregion", SG_ALG_PULSAR_WAW },
};
#define NALIASES	(sizeof(aliases) / sizeof(aliases[0]))

static void
test_algorithm_parse_canonical_names(void **state)
{
	int alg, got = -1;

	(void)state;
	for (alg = 0; alg < SG_ALG_COUNT; alg++) {
		assert_int_equal(sg_algorithm_parse(canon[alg],
		    strlen(canon[alg]), &got), 0);
		assert_int_equal(got, alg);
		assert_string_equal(sg_algorithm_name(alg), canon[alg]);
	}
	assert_null(sg_algorithm_name(SG_ALG_COUNT));
	assert_null(sg_algorithm_name(-1));
}

static void
test_algorithm_parse_aliases(void **state)
{
	size_t i;
	int got;

	(void)state;
	for (i = 0; i < NALIASES; i++) {
		got = -1;
		assert_int_equal(sg_algorithm_parse(aliases[i].name,
		    strlen(aliases[i].name), &got), 0);
		assert_int_equal(got, aliases[i].alg);
	}
}

static void
test_algorithm_parse_is_exact(void **state)
{
	int got = 7;

	(void)state;
	assert_int_equal(sg_algorithm_parse("PowerOfN", 8, &got), SG_EINVAL);
	assert_int_equal(sg_algorithm_parse("wait_and_widen", 14, &got),
	    SG_EINVAL);
	assert_int_equal(sg_algorithm_parse("pulsar ", 7, &got), SG_EINVAL);
	assert_int_equal(sg_algorithm_parse("pulsa", 5, &got), SG_EINVAL);
	assert_int_equal(sg_algorithm_parse("", 0, &got), SG_EINVAL);
	/* length-bounded: "pulsarX" cut at 6 is "pulsar" */
	assert_int_equal(sg_algorithm_parse("pulsarX", 6, &got), 0);
	assert_int_equal(got, SG_ALG_PULSAR);
}

static void
test_aliases_valid_everywhere(void **state)
{
	char buf[512];
	size_t i;

	(void)state;
	for (i = 0; i < NALIASES; i++) {
		const char *a = aliases[i].name;
		const char *cn = canon[aliases[i].alg];
		sg_lbconf *c;

		/* default, models (name and detailed), request_algorithms
		 * key and value, and the header */
		snprintf(buf, sizeof(buf), "{\"default\": \"%s\", "
		    "\"request_algorithms\": {\"%s\": {\"algorithm\": \"%s\"}},"
		    " \"models\": {\"m1\": \"%s\", \"m2\": {\"algorithm\": "
		    "\"%s\"}, \"m3\": \"random\"}}", a, a, a, a, a);
		c = parse_ok(buf);
		assert_int_equal(resolve_ok(c, "other", NULL)->algorithm,
		    aliases[i].alg);
		assert_int_equal(resolve_ok(c, "m1", NULL)->algorithm,
		    aliases[i].alg);
		assert_int_equal(resolve_ok(c, "m2", NULL)->algorithm,
		    aliases[i].alg);
		assert_int_equal(resolve_ok(c, "m3", a)->algorithm,
		    aliases[i].alg);
		assert_int_equal(resolve_ok(c, "m3", cn)->algorithm,
		    aliases[i].alg);
		sg_lbconf_free(c);
	}
}

/* --- last_cluster_affinity (stargate-lb-config(5)) ------------------------ */

static void
test_last_cluster_affinity_accepted_for_wait_and_widen(void **state)
{
	sg_lbconf *c;

	(void)state;
	c = model_conf("{\"algorithm\": \"wait-and-widen\", "
	    "\"cache_affinity_backend_selection_count\": 1, "
	    "\"last_cluster_affinity\": true}");
	assert_true(resolve_ok(c, "m1", NULL)->last_cluster_affinity);
	sg_lbconf_free(c);
	c = model_conf("{\"algorithm\": \"groq-multiregion\", "
	    "\"last_cluster_affinity\": false}");
	assert_false(resolve_ok(c, "m1", NULL)->last_cluster_affinity);
	sg_lbconf_free(c);
}

static void
test_last_cluster_affinity_accepted_for_pulsar_wait_and_widen(void **state)
{
	sg_lbconf *c;

	(void)state;
	c = model_conf("{\"algorithm\": \"pulsar-wait-and-widen\", "
	    "\"last_cluster_affinity\": true}");
	assert_true(resolve_ok(c, "m1", NULL)->last_cluster_affinity);
	sg_lbconf_free(c);
	c = parse_ok("{\"request_algorithms\": {\"pulsar-multiregion\": "
	    "{\"algorithm\": \"pulsar-wait-and-widen\", "
	    "\"last_cluster_affinity\": true}}}");
	assert_true(resolve_ok(c, "m", "pulsar-wait-and-widen")->
	    last_cluster_affinity);
	sg_lbconf_free(c);
}

static void
test_last_cluster_affinity_defaults_to_false(void **state)
{
	sg_lbconf *c;

	(void)state;
	c = model_conf("{\"algorithm\": \"pulsar-wait-and-widen\", "
	    "\"cache_affinity_wait_ms\": 300}");
	assert_false(resolve_ok(c, "m1", NULL)->last_cluster_affinity);
	sg_lbconf_free(c);
}

static void
test_last_cluster_affinity_must_be_boolean(void **state)
{
	(void)state;
	model_fails("{\"algorithm\": \"wait-and-widen\", "
	    "\"last_cluster_affinity\": \"true\"}",
	    "last_cluster_affinity: expected boolean", NULL);
	model_fails("{\"algorithm\": \"pulsar-wait-and-widen\", "
	    "\"last_cluster_affinity\": 1}",
	    "last_cluster_affinity: expected boolean", NULL);
}

/* Rejected for alg in a model entry, a top-level override and a model's
 * own override; the message names the field and the algorithm. */
static void
lca_rejected(const char *alg_in_file, const char *canon_name)
{
	char buf[1024], want[128];

	snprintf(want, sizeof(want), "%s config does not support field(s): "
	    "last_cluster_affinity", canon_name);
	snprintf(buf, sizeof(buf), "{\"algorithm\": \"%s\", "
	    "\"last_cluster_affinity\": true}", alg_in_file);
	model_fails(buf, want, "models.m1: ");
	snprintf(buf, sizeof(buf), "{\"request_algorithms\": {\"%s\": "
	    "{\"algorithm\": \"%s\", \"last_cluster_affinity\": false}}}",
	    alg_in_file, alg_in_file);
	parse_fails(buf, want, "request_algorithms.");
	snprintf(buf, sizeof(buf), "{\"models\": {\"m1\": {\"algorithm\": "
	    "\"wait-and-widen\", \"last_cluster_affinity\": true, "
	    "\"request_algorithms\": {\"%s\": {\"algorithm\": \"%s\", "
	    "\"last_cluster_affinity\": true}}}}}", alg_in_file, alg_in_file);
	parse_fails(buf, want, "models.m1.request_algorithms.");
}

static void
test_last_cluster_affinity_rejected_for_power_of_n(void **state)
{
	(void)state;
	lca_rejected("power-of-n", "power-of-n");
	lca_rejected("powerOf2", "power-of-n");
}

static void
test_last_cluster_affinity_rejected_for_round_robin(void **state)
{
	(void)state;
	lca_rejected("round-robin", "round-robin");
}

static void
test_last_cluster_affinity_rejected_for_random(void **state)
{
	(void)state;
	lca_rejected("random", "random");
}

static void
test_last_cluster_affinity_rejected_for_pulsar(void **state)
{
	(void)state;
	lca_rejected("pulsar", "pulsar");
}

static void
test_last_cluster_affinity_rejected_from_file(void **state)
{
	sg_lbconf *c = NULL;
	sg_error err;

	(void)state;
	sg_error_clear(&err);
	assert_int_equal(sg_lbconf_load(&c, FIXTURES "lca-on-pulsar.json",
	    &err), SG_ECONFIG);
	assert_null(c);
	assert_non_null(strstr(err.text, FIXTURES "lca-on-pulsar.json: "
	    "models.m1: pulsar config does not support field(s): "
	    "last_cluster_affinity"));
}

/* --- model-scoped overrides --------------------------------------------------- */

static void
test_nested_request_algorithms_in_overrides_are_discarded(void **state)
{
	sg_lbconf *c;

	(void)state;
	/* random sits two levels down: parsed, never reachable. */
	c = parse_ok("{\"models\": {\"m1\": {\"algorithm\": \"wait-and-widen\","
	    " \"request_algorithms\": {\"pulsar\": {\"algorithm\": \"pulsar\", "
	    "\"request_algorithms\": {\"anything\": \"random\"}}}}}, "
	    "\"request_algorithms\": {\"round-robin\": {\"algorithm\": "
	    "\"round-robin\", \"request_algorithms\": {\"random\": "
	    "\"random\"}}}}");
	assert_int_equal(resolve_ok(c, "m1", "pulsar")->algorithm,
	    SG_ALG_PULSAR);
	assert_int_equal(resolve_ok(c, "m1", "round-robin")->algorithm,
	    SG_ALG_ROUND_ROBIN);
	resolve_fails(c, "m1", "random", false, "unavailable", NULL);
	resolve_fails(c, "m2", "random", false, "unavailable", NULL);
	assert_int_equal(sg_lbconf_ndefs(c), 4);
	sg_lbconf_free(c);
}

static void
test_nested_request_algorithms_still_type_checked(void **state)
{
	(void)state;
	parse_fails("{\"models\": {\"m1\": {\"algorithm\": \"wait-and-widen\","
	    " \"request_algorithms\": {\"pulsar\": {\"algorithm\": \"pulsar\", "
	    "\"request_algorithms\": {\"random\": 5}}}}}}",
	    "models.m1.request_algorithms.pulsar.request_algorithms.random: "
	    "must be an algorithm name or detailed config object", NULL);
	parse_fails("{\"request_algorithms\": {\"pulsar\": {\"algorithm\": "
	    "\"pulsar\", \"request_algorithms\": {\"random\": {\"algorithm\": "
	    "\"random\", \"n\": 1}}}}}",
	    "random config does not support field(s): n", NULL);
}

static void
test_model_request_algorithms_on_name_only_model_not_possible(void **state)
{
	sg_lbconf *c;

	(void)state;
	/* A name-only model has no overrides of its own, but still sees
	 * the top-level ones (rule 3). */
	c = parse_ok("{\"request_algorithms\": {\"pulsar\": \"pulsar\"}, "
	    "\"models\": {\"m1\": \"random\"}}");
	assert_int_equal(resolve_ok(c, "m1", "pulsar")->algorithm,
	    SG_ALG_PULSAR);
	resolve_fails(c, "m1", "round-robin", false, "unavailable", NULL);
	sg_lbconf_free(c);
}

/* --- resolution (stargate-lb-config(5)) ----------------------------------- */

static const char *resolve_conf =
    "{\"default\": \"random\","
    " \"request_algorithms\": {"
    "   \"pulsar\": {\"algorithm\": \"pulsar\", \"seed\": \"top\"},"
    "   \"round-robin\": \"round-robin\","
    "   \"wait-and-widen\": {\"algorithm\": \"wait-and-widen\", \"n\": 7}},"
    " \"models\": {"
    "   \"m1\": {\"algorithm\": \"wait-and-widen\", \"n\": 3,"
    "     \"request_algorithms\": {"
    "       \"pulsar\": {\"algorithm\": \"pulsar\", \"seed\": \"m1\"},"
    "       \"wait-and-widen\": {\"algorithm\": \"wait-and-widen\","
    "          \"n\": 5}}},"
    "   \"m2\": \"power-of-n\"}}";

static void
test_resolve_without_header_uses_model_algorithm(void **state)
{
	sg_lbconf *c;
	const sg_algdef *d;

	(void)state;
	c = parse_ok(resolve_conf);
	d = resolve_ok(c, "m1", NULL);
	assert_int_equal(d->algorithm, SG_ALG_WAIT_AND_WIDEN);
	assert_int_equal(d->n, 3);
	assert_int_equal(resolve_ok(c, "m2", NULL)->algorithm,
	    SG_ALG_POWER_OF_N);
	sg_lbconf_free(c);
}

static void
test_resolve_without_header_unconfigured_model_uses_default(void **state)
{
	sg_lbconf *c;

	(void)state;
	c = parse_ok(resolve_conf);
	assert_int_equal(resolve_ok(c, "m3", NULL)->algorithm, SG_ALG_RANDOM);
	assert_int_equal(resolve_ok(c, NULL, NULL)->algorithm, SG_ALG_RANDOM);
	/* model ids are exact: no prefix or case folding */
	assert_int_equal(resolve_ok(c, "M1", NULL)->algorithm, SG_ALG_RANDOM);
	assert_int_equal(resolve_ok(c, "m", NULL)->algorithm, SG_ALG_RANDOM);
	sg_lbconf_free(c);
}

static void
test_resolve_rule1_configured_algorithm_wins(void **state)
{
	sg_lbconf *c;
	const sg_algdef *d;

	(void)state;
	c = parse_ok(resolve_conf);
	/* m1 has its own wait-and-widen override (n 5) and the top level
	 * has one (n 7): the configured definition (n 3) wins. */
	d = resolve_ok(c, "m1", "wait-and-widen");
	assert_int_equal(d->n, 3);
	assert_ptr_equal(d, resolve_ok(c, "m1", NULL));
	/* default set: random configured; header random -> default def */
	assert_ptr_equal(resolve_ok(c, "m3", "random"),
	    resolve_ok(c, "m3", NULL));
	sg_lbconf_free(c);
}

static void
test_resolve_rule2_model_override(void **state)
{
	sg_lbconf *c;
	const sg_algdef *d;

	(void)state;
	c = parse_ok(resolve_conf);
	d = resolve_ok(c, "m1", "pulsar");
	assert_int_equal(d->algorithm, SG_ALG_PULSAR);
	assert_string_equal(d->seed, "m1");
	sg_lbconf_free(c);
}

static void
test_resolve_rule3_top_level_override_for_configured_model(void **state)
{
	sg_lbconf *c;

	(void)state;
	c = parse_ok(resolve_conf);
	assert_int_equal(resolve_ok(c, "m1", "round-robin")->algorithm,
	    SG_ALG_ROUND_ROBIN);
	assert_string_equal(resolve_ok(c, "m2", "pulsar")->seed, "top");
	assert_int_equal(resolve_ok(c, "m2", "wait-and-widen")->n, 7);
	sg_lbconf_free(c);
}

static void
test_resolve_default_set_uses_top_level_overrides(void **state)
{
	sg_lbconf *c;

	(void)state;
	c = parse_ok(resolve_conf);
	assert_string_equal(resolve_ok(c, "m3", "pulsar")->seed, "top");
	assert_int_equal(resolve_ok(c, "m3", "wait-and-widen")->n, 7);
	sg_lbconf_free(c);
}

static void
test_resolve_rule4_unavailable(void **state)
{
	sg_lbconf *c;

	(void)state;
	c = parse_ok(resolve_conf);
	resolve_fails(c, "m1", "pulsar-wait-and-widen", false, "unavailable",
	    "pulsar-wait-and-widen");
	/* the default set's algorithm is no override for a configured model */
	resolve_fails(c, "m2", "random", false, "unavailable", "random");
	/* m2's configured power-of-n resolves through rule 1 */
	assert_int_equal(resolve_ok(c, "m2", "power-of-two")->algorithm,
	    SG_ALG_POWER_OF_N);
	resolve_fails(c, "m3", "power-of-n", false, "unavailable", NULL);
	sg_lbconf_free(c);
}

static void
test_resolve_model_overrides_do_not_leak_to_other_models(void **state)
{
	sg_lbconf *c;

	(void)state;
	c = parse_ok("{\"models\": {\"m1\": {\"algorithm\": \"random\", "
	    "\"request_algorithms\": {\"pulsar\": \"pulsar\"}}}}");
	assert_int_equal(resolve_ok(c, "m1", "pulsar")->algorithm,
	    SG_ALG_PULSAR);
	resolve_fails(c, "m2", "pulsar", false, "unavailable", NULL);
	sg_lbconf_free(c);
}

static void
test_resolve_header_is_trimmed_lowercased_and_dashed(void **state)
{
	sg_lbconf *c;

	(void)state;
	c = parse_ok(resolve_conf);
	assert_int_equal(resolve_ok(c, "m3", "Wait_And_Widen ")->algorithm,
	    SG_ALG_WAIT_AND_WIDEN);
	assert_int_equal(resolve_ok(c, "m3", "\t ROUND_ROBIN\r\n")->algorithm,
	    SG_ALG_ROUND_ROBIN);
	assert_int_equal(resolve_ok(c, "m2", "  POWEROF2")->algorithm,
	    SG_ALG_POWER_OF_N);
	assert_int_equal(resolve_ok(c, "m2", "PowerOfN")->algorithm,
	    SG_ALG_POWER_OF_N);
	assert_int_equal(resolve_ok(c, "m2", "Power_Of_Two")->algorithm,
	    SG_ALG_POWER_OF_N);
	sg_lbconf_free(c);
}

static void
test_resolve_blank_header_is_unknown_method(void **state)
{
	sg_lbconf *c;

	(void)state;
	c = parse_ok(resolve_conf);
	resolve_fails(c, "m1", "", false, "unknown_method", NULL);
	resolve_fails(c, "m1", "  \t ", false, "unknown_method", NULL);
	sg_lbconf_free(c);
}

static void
test_resolve_undecodable_header_is_unknown_method(void **state)
{
	sg_lbconf *c;

	(void)state;
	c = parse_ok(resolve_conf);
	resolve_fails(c, "m1", NULL, true, "unknown_method", "<invalid-utf8>");
	resolve_fails(c, "m1", "pulsar", true, "unknown_method",
	    "<invalid-utf8>");
	resolve_fails(c, "m1", "puls\xff" "ar", false, "unknown_method",
	    "<invalid-utf8>");
	sg_lbconf_free(c);
}

static void
test_resolve_parameters_are_malformed_expression(void **state)
{
	sg_lbconf *c;

	(void)state;
	c = parse_ok(resolve_conf);
	resolve_fails(c, "m1", "pulsar;seed=x", false, "malformed_expression",
	    NULL);
	resolve_fails(c, "m1", "wait-and-widen;n=3", false,
	    "malformed_expression", NULL);
	resolve_fails(c, "m1", ";", false, "malformed_expression", NULL);
	sg_lbconf_free(c);
}

static void
test_resolve_unknown_name_is_unknown_method(void **state)
{
	sg_lbconf *c;
	char longname[200];

	(void)state;
	c = parse_ok(resolve_conf);
	resolve_fails(c, "m1", "least-loaded", false, "unknown_method",
	    "least-loaded");
	resolve_fails(c, "m1", "pulsar wait", false, "unknown_method", NULL);
	memset(longname, 'p', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	resolve_fails(c, "m1", longname, false, "unknown_method", NULL);
	sg_lbconf_free(c);
}

static void
test_resolve_failure_leaves_out_untouched(void **state)
{
	sg_lbconf *c;
	const sg_algdef *d = (const sg_algdef *)&d;
	sg_error err;

	(void)state;
	c = parse_ok(resolve_conf);
	assert_int_equal(sg_lbconf_resolve(c, "m1", "nope", false, &d, &err),
	    SG_EREQUEST);
	assert_ptr_equal(d, (const sg_algdef *)&d);
	/* err may be NULL */
	assert_int_equal(sg_lbconf_resolve(c, "m1", "nope", false, &d, NULL),
	    SG_EREQUEST);
	sg_lbconf_free(c);
}

/* --- permissive default (stargate-lb-config(5)) --------------------------- */

static void
test_permissive_default_is_power_of_n(void **state)
{
	sg_lbconf *c = NULL;
	sg_error err;

	(void)state;
	assert_int_equal(sg_lbconf_default(&c, &err), 0);
	check_common_defaults(resolve_ok(c, "any", NULL), SG_ALG_POWER_OF_N);
	assert_int_equal(sg_lbconf_ndefs(c), SG_ALG_COUNT);
	sg_lbconf_free(c);
}

static void
test_permissive_default_allows_every_algorithm(void **state)
{
	sg_lbconf *c = NULL;
	sg_error err;
	size_t i;
	int alg;

	(void)state;
	assert_int_equal(sg_lbconf_default(&c, &err), 0);
	for (alg = 0; alg < SG_ALG_COUNT; alg++) {
		check_common_defaults(resolve_ok(c, "m", canon[alg]), alg);
		check_common_defaults(resolve_ok(c, NULL, canon[alg]), alg);
	}
	for (i = 0; i < NALIASES; i++)
		assert_int_equal(resolve_ok(c, "m", aliases[i].name)->algorithm,
		    aliases[i].alg);
	resolve_fails(c, "m", "fastest", false, "unknown_method", NULL);
	sg_lbconf_free(c);
}

static void
test_file_allows_only_listed_overrides(void **state)
{
	sg_lbconf *c;
	int alg;

	(void)state;
	c = parse_ok("{\"default\": \"power-of-n\"}");
	for (alg = 0; alg < SG_ALG_COUNT; alg++) {
		if (alg == SG_ALG_POWER_OF_N)
			continue;
		resolve_fails(c, "m", canon[alg], false, "unavailable", NULL);
	}
	sg_lbconf_free(c);
}

/* --- ids and determinism ------------------------------------------------------------ */

static void
test_definition_ids_are_dense_and_distinct(void **state)
{
	sg_lbconf *c;
	size_t i, n;

	(void)state;
	c = parse_ok(resolve_conf);
	n = sg_lbconf_ndefs(c);
	/* default, 3 top-level overrides, m1 + 2 overrides, m2 */
	assert_int_equal(n, 8);
	for (i = 0; i < n; i++)
		assert_int_equal(sg_lbconf_def(c, i)->id, i);
	assert_true(resolve_ok(c, "m1", "pulsar") !=
	    resolve_ok(c, "m2", "pulsar"));
	sg_lbconf_free(c);
}

static void
test_identical_entries_are_distinct_definitions(void **state)
{
	sg_lbconf *c;
	const sg_algdef *a, *b;

	(void)state;
	c = parse_ok("{\"models\": {\"a\": \"round-robin\", \"b\": "
	    "\"round-robin\"}}");
	a = resolve_ok(c, "a", NULL);
	b = resolve_ok(c, "b", NULL);
	assert_true(a->id != b->id);
	assert_true(def_same(a, b));
	sg_lbconf_free(c);
}

static void
test_definitions_do_not_depend_on_unrelated_models(void **state)
{
	static const char *const methods[] = { NULL, "pulsar", "round-robin",
	    "wait-and-widen" };
	sg_lbconf *a, *b;
	size_t i;

	(void)state;
	a = parse_ok(resolve_conf);
	b = parse_ok("{\"models\": {\"zz\": {\"algorithm\": \"pulsar\", "
	    "\"seed\": \"other\"}, \"aa\": \"random\", \"m1\": {\"algorithm\":"
	    " \"wait-and-widen\", \"n\": 3, \"request_algorithms\": {"
	    "\"wait-and-widen\": {\"algorithm\": \"wait-and-widen\", \"n\": 5},"
	    " \"pulsar\": {\"algorithm\": \"pulsar\", \"seed\": \"m1\"}}}}, "
	    "\"request_algorithms\": {\"wait-and-widen\": {\"algorithm\": "
	    "\"wait-and-widen\", \"n\": 7}, \"round-robin\": \"round-robin\"}, "
	    "\"default\": \"random\"}");
	for (i = 0; i < sizeof(methods) / sizeof(methods[0]); i++) {
		const sg_algdef *x = resolve_ok(a, "m1", methods[i]);
		const sg_algdef *y = resolve_ok(b, "m1", methods[i]);

		assert_true(def_same(x, y));
	}
	/* the ids differ, the contents do not */
	assert_true(resolve_ok(a, "m1", NULL)->id !=
	    resolve_ok(b, "m1", NULL)->id);
	sg_lbconf_free(a);
	sg_lbconf_free(b);
}

/* --- loading (stargate-lb-config(5)) -------------------------------------- */

static void
test_load_production_fixture(void **state)
{
	sg_lbconf *c = NULL;
	const sg_algdef *d;
	sg_error err;

	(void)state;
	sg_error_clear(&err);
	if (sg_lbconf_load(&c, FIXTURES "production.json", &err) != 0)
		fail_msg("%s", err.text);
	d = resolve_ok(c, "meta/llama-3.1-8b-instruct", NULL);
	assert_int_equal(d->algorithm, SG_ALG_WAIT_AND_WIDEN);
	assert_true(d->last_cluster_affinity);
	assert_int_equal(d->selection_count, 1);
	assert_int_equal(d->affinity_wait_ms, 300);
	assert_near(d->affinity_scale, 0.1, 0);
	d = resolve_ok(c, "meta/llama-3.1-8b-instruct", "power_of_n");
	assert_int_equal(d->sample_count, 3);
	assert_int_equal(d->comparator, SG_CMP_QUEUE_TIME);
	assert_false(d->last_cluster_affinity);
	d = resolve_ok(c, "deepseek-r1", NULL);
	assert_int_equal(d->algorithm, SG_ALG_PULSAR_WAW);
	assert_int_equal(d->selection_count, 2);
	assert_int_equal(d->band_widen_interval_ms, 200);
	assert_true(d->consider_kv_free_tokens);
	assert_true(d->last_cluster_affinity);
	assert_string_equal(resolve_ok(c, "deepseek-r1", "pulsar")->seed,
	    "fleet-1");
	assert_int_equal(resolve_ok(c, "embed-small", NULL)->algorithm,
	    SG_ALG_ROUND_ROBIN);
	assert_int_equal(resolve_ok(c, "unknown", NULL)->algorithm,
	    SG_ALG_POWER_OF_N);
	resolve_fails(c, "embed-small", "wait-and-widen", false, "unavailable",
	    NULL);
	sg_lbconf_free(c);
}

static void
test_load_missing_file_fails(void **state)
{
	sg_lbconf *c = NULL;
	sg_error err;

	(void)state;
	sg_error_clear(&err);
	assert_int_equal(sg_lbconf_load(&c, FIXTURES "no-such-file.json",
	    &err), SG_ECONFIG);
	assert_null(c);
	assert_non_null(strstr(err.text, "no-such-file.json: cannot open"));
}

static void
test_load_bad_json_reports_line(void **state)
{
	sg_lbconf *c = NULL;
	sg_error err;

	(void)state;
	sg_error_clear(&err);
	assert_int_equal(sg_lbconf_load(&c, FIXTURES "bad-syntax.json", &err),
	    SG_ECONFIG);
	assert_null(c);
	if (strstr(err.text, FIXTURES "bad-syntax.json:4:") == NULL)
		fail_msg("no line 4 in \"%s\"", err.text);
}

static void
test_load_empty_file_fails(void **state)
{
	sg_lbconf *c = NULL;
	sg_error err;

	(void)state;
	sg_error_clear(&err);
	assert_int_equal(sg_lbconf_load(&c, FIXTURES "empty.json", &err),
	    SG_ECONFIG);
	assert_non_null(strstr(err.text, "invalid JSON"));
}

static void
test_load_directory_fails(void **state)
{
	sg_lbconf *c = NULL;
	sg_error err;

	(void)state;
	sg_error_clear(&err);
	assert_int_equal(sg_lbconf_load(&c, FIXTURES, &err), SG_ECONFIG);
	assert_null(c);
}

static void
test_free_accepts_null(void **state)
{
	(void)state;
	sg_lbconf_free(NULL);
	assert_int_equal(sg_lbconf_ndefs(NULL), 0);
	assert_null(sg_lbconf_def(NULL, 0));
}

static void
test_message_hides_control_bytes_and_long_keys(void **state)
{
	char buf[1024], key[300];
	sg_lbconf *c = NULL;
	sg_error err;

	(void)state;
	memset(key, 'k', 299);
	key[299] = '\0';
	snprintf(buf, sizeof(buf), "{\"models\": {\"a\\nb%s\": {\"algorithm\":"
	    " \"pulsar\", \"n\": 1}}}", key);
	assert_int_equal(sg_lbconf_parse(&c, buf, strlen(buf), "lb.json",
	    &err), SG_ECONFIG);
	assert_null(strchr(err.text, '\n'));
	assert_non_null(strstr(err.text, "models.a?bkkk"));
	/* the reference's text survives a long location */
	assert_non_null(strstr(err.text, "pulsar config does not support "
	    "field(s): n"));
}

/*
 * Every JSON example in the man page parses: whole files as they are,
 * fragments ("m": {...}) as the only model of a file.
 */
static void
test_man_page_examples_parse(void **state)
{
	FILE *fp;
	char line[512], block[8192], doc[8400];
	size_t len = 0;
	bool in = false;
	int nblocks = 0;

	(void)state;
	fp = fopen("man/stargate-lb-config.5", "r");
	assert_non_null(fp);
	while (fgets(line, sizeof(line), fp) != NULL) {
		if (strncmp(line, ".Bd -literal", 12) == 0) {
			in = true;
			len = 0;
			block[0] = '\0';
			continue;
		}
		if (!in)
			continue;
		if (strncmp(line, ".Ed", 3) != 0) {
			size_t n = strlen(line);

			assert_true(len + n < sizeof(block));
			memcpy(block + len, line, n + 1);
			len += n;
			continue;
		}
		in = false;
		if (block[0] == '{')
			snprintf(doc, sizeof(doc), "%s", block);
		else if (block[0] == '"')
			snprintf(doc, sizeof(doc), "{\"models\": {%s}}", block);
		else
			continue;	/* a shell example */
		sg_lbconf_free(parse_ok(doc));
		nblocks++;
	}
	fclose(fp);
	assert_int_equal(nblocks, 4);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_empty_object_defaults_to_power_of_n),
		cmocka_unit_test(test_default_takes_name),
		cmocka_unit_test(test_default_object_is_rejected),
		cmocka_unit_test(test_default_non_string_is_rejected),
		cmocka_unit_test(test_default_unknown_name_is_rejected),
		cmocka_unit_test(test_unknown_top_level_field_rejected),
		cmocka_unit_test(test_top_level_must_be_object),
		cmocka_unit_test(test_models_and_request_algorithms_must_be_objects),
		cmocka_unit_test(test_bad_json_names_line_and_column),
		cmocka_unit_test(test_duplicate_keys_rejected),
		cmocka_unit_test(test_entry_of_other_json_type_rejected),
		cmocka_unit_test(test_unknown_algorithm_name_rejected),
		cmocka_unit_test(test_detailed_object_requires_algorithm),
		cmocka_unit_test(test_request_algorithms_key_must_match_algorithm),
		cmocka_unit_test(test_request_algorithms_key_may_be_an_alias),
		cmocka_unit_test(test_request_algorithms_two_keys_for_one_algorithm_rejected),
		cmocka_unit_test(test_unsupported_fields_sorted_with_canonical_name),
		cmocka_unit_test(test_unknown_field_is_unsupported),
		cmocka_unit_test(test_unsupported_message_names_location),
		cmocka_unit_test(test_round_robin_and_random_accept_only_common_fields),
		cmocka_unit_test(test_pulsar_rejects_wait_and_widen_fields),
		cmocka_unit_test(test_rendezvous_weight_rejected_for_wait_and_widen),
		cmocka_unit_test(test_sample_count_range_1_to_64),
		cmocka_unit_test(test_virtual_nodes_bounded_at_1024),
		cmocka_unit_test(test_comparator_values),
		cmocka_unit_test(test_comparator_null_rejected),
		cmocka_unit_test(test_comparator_unknown_rejected),
		cmocka_unit_test(test_comparator_rejected_for_pulsar_wait_and_widen),
		cmocka_unit_test(test_consider_kv_free_tokens_pulsar_family_only),
		cmocka_unit_test(test_band_widen_interval_rejected_for_wait_and_widen),
		cmocka_unit_test(test_fallback_max_queued_rejected_for_wait_and_widen),
		cmocka_unit_test(test_pulsar_wait_and_widen_band_and_fallback),
		cmocka_unit_test(test_scale_must_be_within_0_and_1),
		cmocka_unit_test(test_scale_overflowing_number_rejected),
		cmocka_unit_test(test_rendezvous_weight_values),
		cmocka_unit_test(test_virtual_nodes_zero_becomes_one),
		cmocka_unit_test(test_selection_count_zero_unset_for_waw_one_for_pwaw),
		cmocka_unit_test(test_n_zero_becomes_one),
		cmocka_unit_test(test_wait_and_widen_fields_are_read),
		cmocka_unit_test(test_u64_fields_take_the_full_range_up_to_18446744073709551615),
		cmocka_unit_test(test_u64_field_above_18446744073709551615_is_refused),
		cmocka_unit_test(test_u64_big_literal_in_a_smaller_field_is_out_of_range_exactly),
		cmocka_unit_test(test_u64_big_literal_in_a_number_field_and_in_a_string),
		cmocka_unit_test(test_u64_big_literal_keeps_error_lines_and_columns),
		cmocka_unit_test(test_u64_big_literal_with_a_reserved_negative_integer_is_refused),
		cmocka_unit_test(test_max_input_work_seconds_not_range_checked),
		cmocka_unit_test(test_type_errors_name_the_field),
		cmocka_unit_test(test_uint_field_beyond_32_bits_rejected),
		cmocka_unit_test(test_null_means_unset_for_unset_defaults),
		cmocka_unit_test(test_null_rejected_where_default_is_a_value),
		cmocka_unit_test(test_seed_longer_than_256_bytes_rejected),
		cmocka_unit_test(test_name_only_entries_use_every_default),
		cmocka_unit_test(test_detailed_object_with_only_algorithm_equals_name),
		cmocka_unit_test(test_algorithm_parse_canonical_names),
		cmocka_unit_test(test_algorithm_parse_aliases),
		cmocka_unit_test(test_algorithm_parse_is_exact),
		cmocka_unit_test(test_aliases_valid_everywhere),
		cmocka_unit_test(test_last_cluster_affinity_accepted_for_wait_and_widen),
		cmocka_unit_test(test_last_cluster_affinity_accepted_for_pulsar_wait_and_widen),
		cmocka_unit_test(test_last_cluster_affinity_defaults_to_false),
		cmocka_unit_test(test_last_cluster_affinity_must_be_boolean),
		cmocka_unit_test(test_last_cluster_affinity_rejected_for_power_of_n),
		cmocka_unit_test(test_last_cluster_affinity_rejected_for_round_robin),
		cmocka_unit_test(test_last_cluster_affinity_rejected_for_random),
		cmocka_unit_test(test_last_cluster_affinity_rejected_for_pulsar),
		cmocka_unit_test(test_last_cluster_affinity_rejected_from_file),
		cmocka_unit_test(test_nested_request_algorithms_in_overrides_are_discarded),
		cmocka_unit_test(test_nested_request_algorithms_still_type_checked),
		cmocka_unit_test(test_model_request_algorithms_on_name_only_model_not_possible),
		cmocka_unit_test(test_resolve_without_header_uses_model_algorithm),
		cmocka_unit_test(test_resolve_without_header_unconfigured_model_uses_default),
		cmocka_unit_test(test_resolve_rule1_configured_algorithm_wins),
		cmocka_unit_test(test_resolve_rule2_model_override),
		cmocka_unit_test(test_resolve_rule3_top_level_override_for_configured_model),
		cmocka_unit_test(test_resolve_default_set_uses_top_level_overrides),
		cmocka_unit_test(test_resolve_rule4_unavailable),
		cmocka_unit_test(test_resolve_model_overrides_do_not_leak_to_other_models),
		cmocka_unit_test(test_resolve_header_is_trimmed_lowercased_and_dashed),
		cmocka_unit_test(test_resolve_blank_header_is_unknown_method),
		cmocka_unit_test(test_resolve_undecodable_header_is_unknown_method),
		cmocka_unit_test(test_resolve_parameters_are_malformed_expression),
		cmocka_unit_test(test_resolve_unknown_name_is_unknown_method),
		cmocka_unit_test(test_resolve_failure_leaves_out_untouched),
		cmocka_unit_test(test_permissive_default_is_power_of_n),
		cmocka_unit_test(test_permissive_default_allows_every_algorithm),
		cmocka_unit_test(test_file_allows_only_listed_overrides),
		cmocka_unit_test(test_definition_ids_are_dense_and_distinct),
		cmocka_unit_test(test_identical_entries_are_distinct_definitions),
		cmocka_unit_test(test_definitions_do_not_depend_on_unrelated_models),
		cmocka_unit_test(test_load_production_fixture),
		cmocka_unit_test(test_load_missing_file_fails),
		cmocka_unit_test(test_load_bad_json_reports_line),
		cmocka_unit_test(test_load_empty_file_fails),
		cmocka_unit_test(test_load_directory_fails),
		cmocka_unit_test(test_free_accepts_null),
		cmocka_unit_test(test_message_hides_control_bytes_and_long_keys),
		cmocka_unit_test(test_man_page_examples_parse),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
