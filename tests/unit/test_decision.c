/*
 * test_decision.c — sg_decision.c: the JSON shape of select, wait and reject
 * decisions (sg-route(1)), with and without the session fields of
 * stargate-lb-config(5), and the enum names.
 */
#include "sg_test.h"

#include <math.h>
#include <stdlib.h>

#include "sg_decision.h"

/* The decision as compact JSON text (field order included). */
static void
assert_json(const sg_decision *d, const sg_request *r, const char *want)
{
	json_t *j = sg_decision_to_json(d, r);
	char *s;

	assert_non_null(j);
	s = json_dumps(j, JSON_COMPACT);
	assert_non_null(s);
	assert_string_equal(s, want);
	free(s);
	json_decref(j);
}

static sg_request
req(const char *id)
{
	sg_request r;

	sg_request_init(&r);
	r.request_id = id;
	r.model = "m";
	return r;
}

static void
test_names(void **state)
{
	(void)state;
	assert_string_equal(sg_decision_kind_name(SG_DECIDE_SELECT), "select");
	assert_string_equal(sg_decision_kind_name(SG_DECIDE_WAIT), "wait");
	assert_string_equal(sg_decision_kind_name(SG_DECIDE_REJECT), "reject");
	assert_null(sg_decision_kind_name(0));
	assert_null(sg_phase_name(SG_PHASE_NONE));
	assert_string_equal(sg_phase_name(SG_PHASE_AFFINITY), "affinity");
	assert_string_equal(sg_phase_name(SG_PHASE_GLOBAL), "global");
	assert_string_equal(sg_phase_name(SG_PHASE_OPEN), "open");
	assert_string_equal(sg_phase_name(SG_PHASE_POLL), "poll");
	assert_null(sg_phase_name(42));
}

static void
test_select_without_session_fields(void **state)
{
	sg_request r = req("r-1");
	sg_decision d = { 0 };

	(void)state;
	d.kind = SG_DECIDE_SELECT;
	d.algorithm = "wait-and-widen";
	d.index = 1;
	d.cluster_id = "B";
	d.rank_depth = 1;
	d.phase = SG_PHASE_AFFINITY;
	d.primary = true;		/* ignored: not classified */
	d.session_state = SG_SESSION_RETURNING;
	d.recheck_at_ms = 300;		/* ignored: not a wait */
	d.status = 503;			/* ignored: not a reject */
	assert_json(&d, &r, "{\"request_id\":\"r-1\",\"decision\":\"select\","
	    "\"cluster_id\":\"B\",\"rank_depth\":1,\"phase\":\"affinity\","
	    "\"algorithm\":\"wait-and-widen\"}");

	/* no phase for phaseless algorithms; kv_skip only when true */
	d.phase = SG_PHASE_NONE;
	d.algorithm = "pulsar";
	d.rank_depth = 3;
	d.kv_skip = true;
	assert_json(&d, &r, "{\"request_id\":\"r-1\",\"decision\":\"select\","
	    "\"cluster_id\":\"B\",\"rank_depth\":3,\"algorithm\":\"pulsar\","
	    "\"kv_skip\":true}");
}

static void
test_select_with_session_fields(void **state)
{
	sg_request r = req("r-1");
	sg_decision d = { 0 };

	(void)state;
	d.kind = SG_DECIDE_SELECT;
	d.algorithm = "pulsar-wait-and-widen";
	d.cluster_id = "B";
	d.rank_depth = 1;
	d.phase = SG_PHASE_AFFINITY;
	d.classified = true;
	d.session_state = SG_SESSION_RETURNING;
	d.promoted = true;
	d.primary = true;
	/* the sg-route(1) example */
	assert_json(&d, &r, "{\"request_id\":\"r-1\",\"decision\":\"select\","
	    "\"cluster_id\":\"B\",\"rank_depth\":1,\"phase\":\"affinity\","
	    "\"algorithm\":\"pulsar-wait-and-widen\","
	    "\"session_state\":\"returning\",\"promoted\":true,"
	    "\"selection\":\"primary\"}");

	d.session_state = SG_SESSION_NEW;
	d.promoted = false;
	d.primary = false;
	d.rank_depth = 2;
	d.phase = SG_PHASE_GLOBAL;
	d.cluster_id = "A";
	assert_json(&d, &r, "{\"request_id\":\"r-1\",\"decision\":\"select\","
	    "\"cluster_id\":\"A\",\"rank_depth\":2,\"phase\":\"global\","
	    "\"algorithm\":\"pulsar-wait-and-widen\","
	    "\"session_state\":\"new\",\"promoted\":false,"
	    "\"selection\":\"fallback\"}");

	d.session_state = SG_SESSION_STALE;
	assert_json(&d, &r, "{\"request_id\":\"r-1\",\"decision\":\"select\","
	    "\"cluster_id\":\"A\",\"rank_depth\":2,\"phase\":\"global\","
	    "\"algorithm\":\"pulsar-wait-and-widen\","
	    "\"session_state\":\"stale\",\"promoted\":false,"
	    "\"selection\":\"fallback\"}");
}

static void
test_wait_shape(void **state)
{
	sg_request r = req("r-2");
	sg_decision d = { 0 };

	(void)state;
	d.kind = SG_DECIDE_WAIT;
	d.algorithm = "wait-and-widen";
	d.phase = SG_PHASE_AFFINITY;
	d.recheck_at_ms = 300;
	d.cluster_id = "A";		/* ignored: not a select */
	d.rank_depth = 1;
	d.kv_skip = true;
	assert_json(&d, &r, "{\"request_id\":\"r-2\",\"decision\":\"wait\","
	    "\"phase\":\"affinity\",\"algorithm\":\"wait-and-widen\","
	    "\"recheck_at_ms\":300}");

	/* fractional recheck times stay exact; session fields without a
	 * selection */
	d.recheck_at_ms = 12.5;
	d.phase = SG_PHASE_POLL;
	d.classified = true;
	d.session_state = SG_SESSION_RETURNING;
	d.promoted = true;
	d.primary = true;
	assert_json(&d, &r, "{\"request_id\":\"r-2\",\"decision\":\"wait\","
	    "\"phase\":\"poll\",\"algorithm\":\"wait-and-widen\","
	    "\"recheck_at_ms\":12.5,\"session_state\":\"returning\","
	    "\"promoted\":true}");
}

static void
test_reject_shape(void **state)
{
	sg_request r = req("r-3");
	sg_decision d = { 0 };

	(void)state;
	d.kind = SG_DECIDE_REJECT;
	d.algorithm = "wait-and-widen";
	d.status = 503;
	d.code = "overloaded_error";
	d.reason = "routing_capacity_unavailable";
	assert_json(&d, &r, "{\"request_id\":\"r-3\",\"decision\":\"reject\","
	    "\"algorithm\":\"wait-and-widen\",\"status\":503,"
	    "\"code\":\"overloaded_error\","
	    "\"reason\":\"routing_capacity_unavailable\"}");

	d.status = 404;
	d.code = "no_eligible_candidates";
	d.reason = NULL;
	d.algorithm = NULL;
	assert_json(&d, &r, "{\"request_id\":\"r-3\",\"decision\":\"reject\","
	    "\"status\":404,\"code\":\"no_eligible_candidates\"}");

	d.status = 503;
	d.code = "overloaded_error";
	d.classified = true;
	d.session_state = SG_SESSION_NEW;
	assert_json(&d, &r, "{\"request_id\":\"r-3\",\"decision\":\"reject\","
	    "\"status\":503,\"code\":\"overloaded_error\","
	    "\"session_state\":\"new\",\"promoted\":false}");
}

static void
test_without_request_or_kind(void **state)
{
	sg_request r = req(NULL);
	sg_decision d = { 0 };

	(void)state;
	d.kind = SG_DECIDE_WAIT;
	d.recheck_at_ms = 0;
	assert_json(&d, NULL, "{\"decision\":\"wait\",\"recheck_at_ms\":0}");
	assert_json(&d, &r, "{\"decision\":\"wait\",\"recheck_at_ms\":0}");
	d.kind = 0;
	assert_null(sg_decision_to_json(&d, &r));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_select_without_session_fields),
		cmocka_unit_test(test_select_with_session_fields),
		cmocka_unit_test(test_wait_shape),
		cmocka_unit_test(test_reject_shape),
		cmocka_unit_test(test_without_request_or_kind),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
