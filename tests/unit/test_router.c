/*
 * test_router.c — sg_router_decide and sg_router_explain (sg_router.h):
 * resolution and request errors, refusals before the algorithm, input-work
 * admission (stargate-lb-config(5)), the routing deadlines and polling
 * (sg-proxy(8)), determinism, and the --explain table.
 */
#include <math.h>

#include "sg_test.h"

#include "sg_waw_fixture.h"

static int
decide_rc(sg_router *rt, const sg_snapshot *s, sg_request *r, double e,
    sg_decision *d, sg_error *err)
{
	memset(d, 0, sizeof(*d));
	sg_error_clear(err);
	return sg_router_decide(rt, s, r, e, d, err);
}

/* --- resolution and request errors ---------------------------------------- */

static void
test_resolution_errors_are_400_with_their_class(void **state)
{
	sg_lbconf *conf = fx_conf("{\"default\":\"power-of-n\","
	    "\"request_algorithms\":{\"random\":\"random\"}}");
	sg_router *rt = fx_router(conf, 1);
	sg_snapshot *s = fx_snapshot(2);
	struct {
		const char	*method;
		bool		 invalid;
		const char	*code;
	} cases[] = {
		{ "bogus", false, "unknown_method" },
		{ "   ", false, "unknown_method" },
		{ NULL, true, "unknown_method" },
		{ "pulsar", false, "unavailable" },
		{ "random;k=1", false, "malformed_expression" },
	};
	sg_decision d;
	sg_error err;
	sg_request r;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		fx_req(&r, "r", NULL, 10);
		r.routing_method = cases[i].method;
		r.routing_method_invalid = cases[i].invalid;
		assert_int_equal(decide_rc(rt, s, &r, 0, &d, &err),
		    SG_EREQUEST);
		assert_int_equal(err.status, 400);
		assert_string_equal(err.code, cases[i].code);
		assert_int_equal(d.kind, 0);	/* nothing decided */
	}
	/* an allowed override and a normalised spelling resolve */
	fx_req(&r, "r", NULL, 10);
	r.routing_method = " Random ";
	assert_int_equal(decide_rc(rt, s, &r, 0, &d, &err), 0);
	assert_string_equal(d.algorithm, "random");
	sg_snapshot_free(s);
	sg_router_free(rt);
	sg_lbconf_free(conf);
}

static void
test_required_cache_affinity_key_is_400(void **state)
{
	sg_lbconf *conf = fx_conf("{\"models\":{\"m\":{\"algorithm\":"
	    "\"pulsar\",\"require_cache_affinity_key\":true}}}");
	sg_router *rt = fx_router(conf, 1);
	sg_snapshot *s = fx_snapshot(2);
	sg_decision d;
	sg_error err;
	sg_request r;

	(void)state;
	fx_req(&r, "r", NULL, 10);
	assert_int_equal(decide_rc(rt, s, &r, 0, &d, &err), SG_EREQUEST);
	assert_int_equal(err.status, 400);
	assert_non_null(strstr(err.text, "x-cache-affinity-key is required"));
	fx_req(&r, "r", "", 10);
	assert_int_equal(decide_rc(rt, s, &r, 0, &d, &err), SG_EREQUEST);
	fx_req(&r, "r", "k", 10);
	assert_int_equal(decide_rc(rt, s, &r, 0, &d, &err), 0);
	assert_int_equal(d.kind, SG_DECIDE_SELECT);
	sg_snapshot_free(s);
	sg_router_free(rt);
	sg_lbconf_free(conf);
}

static void
test_bad_elapsed_is_invalid(void **state)
{
	sg_lbconf *conf = fx_conf("{\"default\":\"random\"}");
	sg_router *rt = fx_router(conf, 1);
	sg_snapshot *s = fx_snapshot(2);
	sg_decision d;
	sg_error err;
	sg_request r;

	(void)state;
	fx_req(&r, "r", NULL, 10);
	assert_int_equal(decide_rc(rt, s, &r, -1, &d, &err), SG_EINVAL);
	assert_int_equal(decide_rc(rt, s, &r, NAN, &d, &err), SG_EINVAL);
	assert_int_equal(decide_rc(rt, s, &r, INFINITY, &d, &err), SG_EINVAL);
	sg_snapshot_free(s);
	sg_router_free(rt);
	sg_lbconf_free(conf);
}

/* --- refusals before the algorithm ---------------------------------------- */

static void
test_empty_snapshot_is_404_no_eligible_candidates(void **state)
{
	sg_lbconf *conf = fx_conf("{\"default\":\"wait-and-widen\"}");
	sg_router *rt = fx_router(conf, 1);
	sg_snapshot *s = sg_snapshot_new();
	sg_request r;
	sg_decision d;

	(void)state;
	fx_req(&r, "r", NULL, 10);
	r.has_max_wait = true;
	r.max_wait_ms = 1000;		/* no polling for an empty target */
	d = fx_decide(rt, s, &r, 0);
	fx_assert_reject(d, 404);
	assert_string_equal(d.code, "no_eligible_candidates");
	assert_string_equal(d.algorithm, "wait-and-widen");
	sg_snapshot_free(s);
	sg_router_free(rt);
	sg_lbconf_free(conf);
}

static void
test_all_excluded_is_503_overloaded(void **state)
{
	sg_lbconf *conf = fx_conf("{\"default\":\"round-robin\"}");
	sg_router *rt = fx_router(conf, 1);
	sg_snapshot *s = fx_snapshot(2);
	const char *ex[] = { "c0", "nope", "c1" };
	sg_request r;
	sg_decision d;

	(void)state;
	fx_req(&r, "r", NULL, 10);
	r.excluded = ex;
	r.nexcluded = 3;
	d = fx_decide(rt, s, &r, 0);
	fx_assert_reject(d, 503);
	assert_string_equal(d.code, "overloaded_error");
	/* one left: chosen */
	r.nexcluded = 2;
	fx_assert_select(fx_decide(rt, s, &r, 0), 1);
	sg_snapshot_free(s);
	sg_router_free(rt);
	sg_lbconf_free(conf);
}

/* --- input-work admission (stargate-lb-config(5)) ------------------------- */

/* (100 tps, 300 queued) and (50 tps, 120 queued), 30 tokens: 3.0 s. */
static sg_snapshot *
admission_snapshot(void)
{
	sg_snapshot *s = sg_snapshot_new();
	sg_cluster a = fx_cluster("a", 1, 4, 0, 100);
	sg_cluster b = fx_cluster("b", 1, 4, 0, 50);

	a.queued_input_tokens = 300;
	b.queued_input_tokens = 120;
	fx_add(s, &a);
	fx_add(s, &b);
	return s;
}

static sg_decision
admit(const char *alg, double limit, sg_snapshot *s, const char *const *ex,
    size_t nex)
{
	char text[256];
	sg_lbconf *conf;
	sg_router *rt;
	sg_request r;
	sg_decision d;

	snprintf(text, sizeof(text), "{\"models\":{\"m\":{\"algorithm\":\"%s\","
	    "\"max_input_work_seconds\":%.17g}}}", alg, limit);
	conf = fx_conf(text);
	rt = fx_router(conf, 1);
	fx_req(&r, "r-adm", "k", 30);
	r.excluded = ex;
	r.nexcluded = nex;
	d = fx_decide(rt, s, &r, 0);
	sg_router_free(rt);
	sg_lbconf_free(conf);
	return d;
}

static void
test_admission_worked_check_3_seconds(void **state)
{
	sg_snapshot *s = admission_snapshot();
	sg_decision d;

	(void)state;
	d = admit("power-of-n", 2.9, s, NULL, 0);
	fx_assert_reject(d, 503);
	assert_string_equal(d.code, "overloaded_error");
	assert_string_equal(d.reason, "input_work_limit_exceeded");
	d = admit("power-of-n", 3.0, s, NULL, 0);
	assert_int_equal(d.kind, SG_DECIDE_SELECT);
	d = admit("pulsar-wait-and-widen", 3.0, s, NULL, 0);
	assert_int_equal(d.kind, SG_DECIDE_SELECT);
	sg_snapshot_free(s);
}

static void
test_admission_set_per_algorithm_family(void **state)
{
	sg_snapshot *s = admission_snapshot();
	const char *ex[] = { "b" };
	sg_decision d;

	(void)state;
	/* excluded clusters leave the set: (30 + 300) / 100 = 3.3 s */
	d = admit("wait-and-widen", 3.0, s, ex, 1);
	fx_assert_reject(d, 503);
	assert_string_equal(d.reason, "input_work_limit_exceeded");
	assert_int_equal(admit("wait-and-widen", 3.3, s, ex, 1).kind,
	    SG_DECIDE_SELECT);
	/* pulsar variants: only clusters with a valid weight count */
	fx_at(s, 1)->max_input_tps = 0;
	d = admit("pulsar", 3.0, s, NULL, 0);
	fx_assert_reject(d, 503);
	assert_string_equal(d.reason, "input_work_limit_exceeded");
	/* ... but the mean tps, not the weight, is the rate */
	fx_at(s, 1)->max_input_tps = 1e9;
	assert_int_equal(admit("pulsar", 3.0, s, NULL, 0).kind,
	    SG_DECIDE_SELECT);
	/* the non-pulsar set ignores weights */
	fx_at(s, 1)->max_input_tps = 0;
	assert_int_equal(admit("random", 3.0, s, NULL, 0).kind,
	    SG_DECIDE_SELECT);
	sg_snapshot_free(s);
}

static void
test_admission_without_rate_is_capacity_unavailable(void **state)
{
	sg_snapshot *s = admission_snapshot();
	sg_decision d;

	(void)state;
	fx_at(s, 0)->last_mean_input_tps = 0;
	fx_at(s, 1)->last_mean_input_tps = -5;
	d = admit("power-of-n", 1000, s, NULL, 0);
	fx_assert_reject(d, 503);
	assert_string_equal(d.reason, "input_work_capacity_unavailable");
	/* pulsar with no weighted cluster: empty set, no rate */
	fx_at(s, 0)->last_mean_input_tps = 100;
	fx_at(s, 0)->max_input_tps = 0;
	fx_at(s, 1)->max_input_tps = 0;
	d = admit("pulsar-wait-and-widen", 1000, s, NULL, 0);
	assert_string_equal(d.reason, "input_work_capacity_unavailable");
	sg_snapshot_free(s);
}

/* --- deadlines and polling (sg-proxy(8)) -------------------------------- */

/* stargate-lb-config(5)'s snapshot: a wait of 150 ms at elapsed 0. */
static sg_snapshot *
waiting_snapshot(bool slow_full)
{
	sg_snapshot *s = sg_snapshot_new();
	sg_cluster c;

	c = fx_cluster("fast", 5, 1, 1, 1000);
	fx_add(s, &c);
	c = fx_cluster("slow", 5, 1, slow_full ? 1 : 0, 250);
	fx_add(s, &c);
	return s;
}

static void
test_wait_is_clamped_to_max_wait(void **state)
{
	sg_lbconf *conf = fx_conf("{\"default\":\"wait-and-widen\"}");
	sg_router *rt = fx_router(conf, 1);
	sg_snapshot *s = waiting_snapshot(false);
	sg_request r;
	sg_decision d;

	(void)state;
	fx_req(&r, "r", NULL, 200);
	fx_assert_wait(fx_decide(rt, s, &r, 0), 150);	/* unclamped */
	r.has_max_wait = true;
	r.max_wait_ms = 100;
	fx_assert_wait(fx_decide(rt, s, &r, 0), 100);
	fx_assert_wait(fx_decide(rt, s, &r, 60), 100);
	d = fx_decide(rt, s, &r, 100);
	fx_assert_reject(d, 503);
	assert_string_equal(d.code, "overloaded_error");
	assert_string_equal(d.reason, "routing_capacity_unavailable");
	sg_snapshot_free(s);
	sg_router_free(rt);
	sg_lbconf_free(conf);
}

static void
test_wait_deadline_is_capped_at_60_seconds(void **state)
{
	sg_lbconf *conf = fx_conf("{\"models\":{\"m\":{\"algorithm\":"
	    "\"wait-and-widen\",\"cache_affinity_backend_selection_count\":1,"
	    "\"cache_affinity_wait_ms\":100000}}}");
	sg_router *rt = fx_router(conf, 1);
	sg_snapshot *s = fx_snapshot(2);
	sg_request r;

	(void)state;
	fx_full(s, 0);
	fx_full(s, 1);
	fx_req(&r, "r", "k", 10);
	fx_assert_wait(fx_decide(rt, s, &r, 0), 60000);
	fx_assert_reject(fx_decide(rt, s, &r, 60000), 503);
	r.has_max_wait = true;
	r.max_wait_ms = 90000;			/* capped */
	fx_assert_wait(fx_decide(rt, s, &r, 59000), 60000);
	fx_assert_reject(fx_decide(rt, s, &r, 60000), 503);
	sg_snapshot_free(s);
	sg_router_free(rt);
	sg_lbconf_free(conf);
}

static void
test_unavailable_polls_until_max_wait(void **state)
{
	sg_lbconf *conf = fx_conf("{\"default\":\"wait-and-widen\"}");
	sg_router *rt = fx_router(conf, 1);
	sg_snapshot *s = waiting_snapshot(true);
	sg_request r;
	sg_decision d;
	double e, delay;
	int distinct = 0;
	double first = -1;

	(void)state;
	fx_req(&r, "r", NULL, 200);
	/* without x-max-wait-ms: no polling */
	d = fx_decide(rt, s, &r, 0);
	fx_assert_reject(d, 503);
	assert_string_equal(d.reason, "routing_capacity_unavailable");
	r.has_max_wait = true;
	r.max_wait_ms = 500;
	for (e = 0; e < 490; e += 13) {
		d = fx_decide(rt, s, &r, e);
		assert_int_equal(d.kind, SG_DECIDE_WAIT);
		assert_int_equal(d.phase, SG_PHASE_POLL);
		delay = d.recheck_at_ms - e;
		assert_true(delay >= 1 && delay <= 9);
		assert_near(delay, floor(delay), 1e-9);
		if (first < 0)
			first = delay;
		else if (delay != first)
			distinct = 1;
		/* deterministic */
		assert_near(fx_decide(rt, s, &r, e).recheck_at_ms,
		    d.recheck_at_ms, 0);
	}
	assert_true(distinct);
	d = fx_decide(rt, s, &r, 498);
	assert_int_equal(d.kind, SG_DECIDE_WAIT);
	assert_true(d.recheck_at_ms > 498 && d.recheck_at_ms <= 500);
	fx_assert_reject(fx_decide(rt, s, &r, 500), 503);
	sg_snapshot_free(s);
	sg_router_free(rt);
	sg_lbconf_free(conf);
}

/* --- determinism ---------------------------------------------------------- */

static void
test_same_inputs_same_decision(void **state)
{
	sg_lbconf *conf = fx_conf("{\"default\":\"random\"}");
	sg_router *a = fx_router(conf, 77), *b = fx_router(conf, 77);
	sg_router *c = fx_router(conf, 78);
	sg_snapshot *s = fx_snapshot(16);
	char id[32];
	int i, differs = 0;

	(void)state;
	for (i = 0; i < 40; i++) {
		sg_request r;
		sg_decision d1, d2, d3;

		snprintf(id, sizeof(id), "det-%d", i);
		fx_req(&r, id, NULL, 10);
		d1 = fx_decide(a, s, &r, 0);
		d2 = fx_decide(a, s, &r, 0);	/* twice on one router */
		d3 = fx_decide(b, s, &r, 0);	/* another router */
		assert_true(fx_same(&d1, &d2));
		assert_true(fx_same(&d1, &d3));
		if (fx_decide(c, s, &r, 0).index != d1.index)
			differs = 1;
	}
	assert_true(differs);			/* the seed matters */
	sg_snapshot_free(s);
	sg_router_free(a);
	sg_router_free(b);
	sg_router_free(c);
	sg_lbconf_free(conf);
}

static void
test_unrelated_models_do_not_change_decisions(void **state)
{
	sg_lbconf *c1 = fx_conf("{\"models\":{\"m\":{\"algorithm\":"
	    "\"wait-and-widen\",\"cache_affinity_backend_selection_count\":3,"
	    "\"n\":3}}}");
	sg_lbconf *c2 = fx_conf("{\"default\":\"random\",\"models\":{"
	    "\"a-first\":{\"algorithm\":\"wait-and-widen\",\"n\":1},"
	    "\"m\":{\"algorithm\":\"wait-and-widen\","
	    "\"cache_affinity_backend_selection_count\":3,\"n\":3},"
	    "\"z-last\":\"pulsar\"}}");
	sg_router *r1 = fx_router(c1, 5), *r2 = fx_router(c2, 5);
	sg_snapshot *s = fx_snapshot(8);
	char id[32];
	int i;

	(void)state;
	for (i = 0; i < 40; i++) {
		sg_request r;
		sg_decision d1, d2;

		snprintf(id, sizeof(id), "unrel-%d", i);
		fx_req(&r, id, "key", 10);
		d1 = fx_decide(r1, s, &r, 0);
		d2 = fx_decide(r2, s, &r, 0);
		assert_true(fx_same(&d1, &d2));
	}
	sg_snapshot_free(s);
	sg_router_free(r1);
	sg_router_free(r2);
	sg_lbconf_free(c1);
	sg_lbconf_free(c2);
}

/* --- explain -------------------------------------------------------------- */

static void
assert_keys(json_t *o, const char *const *keys)
{
	for (; *keys != NULL; keys++)
		if (json_object_get(o, *keys) == NULL)
			fail_msg("explain: missing \"%s\"", *keys);
}

static void
test_explain_table_shape(void **state)
{
	static const char *const top[] = { "algorithm", "x_ms", "scale",
	    "session", "original_order", "effective_order", "affinity_group",
	    "candidates", NULL };
	static const char *const cand[] = { "cluster_id", "excluded",
	    "queue_ms", "prefill_ms", "ttft_ms", "comparator_ms", "bucket",
	    "has_capacity", "affinity_rank", "kv_feasible", NULL };
	static const char *const sess[] = { "state", "promoted",
	    "last_cluster_id", NULL };
	const char *algs[] = { "wait-and-widen", "pulsar-wait-and-widen" };
	char text[512];
	size_t a, i;

	(void)state;
	for (a = 0; a < 2; a++) {
		sg_lbconf *conf;
		sg_router *rt;
		sg_snapshot *s = fx_snapshot(4);
		json_t *ex = NULL, *cands;
		sg_request r;

		snprintf(text, sizeof(text), "{\"models\":{\"m\":{"
		    "\"algorithm\":\"%s\","
		    "\"cache_affinity_backend_selection_count\":2,"
		    "\"cache_affinity_wait_ms\":100,"
		    "\"last_cluster_affinity\":true}}}", algs[a]);
		conf = fx_conf(text);
		rt = fx_router(conf, 1);
		for (i = 0; i < 4; i++)
			fx_full(s, i);
		fx_at(s, 3)->last_mean_input_tps = 0;	/* infinite prefill */
		fx_req(&r, "r-ex", "key", 10);
		r.last_cluster_id = "c2";
		assert_int_equal(sg_router_explain(rt, s, &r, 150, &ex, NULL),
		    0);
		assert_keys(ex, top);
		assert_string_equal(json_string_value(json_object_get(ex,
		    "algorithm")), algs[a]);
		assert_keys(json_object_get(ex, "session"), sess);
		assert_string_equal(json_string_value(json_object_get(
		    json_object_get(ex, "session"), "state")), "returning");
		if (a == 1)
			assert_non_null(json_object_get(ex, "open_set"));
		cands = json_object_get(ex, "candidates");
		assert_int_equal(json_array_size(cands), 4);
		for (i = 0; i < 4; i++)
			assert_keys(json_array_get(cands, i), cand);
		assert_true(json_is_null(json_object_get(json_array_get(cands,
		    3), "prefill_ms")));
		assert_string_equal(json_string_value(json_array_get(
		    json_object_get(ex, "effective_order"), 0)), "c2");
		/* explain does not classify the request */
		assert_int_equal(r.session_state, SG_SESSION_UNCLASSIFIED);
		json_decref(ex);
		/* a classified request: explain uses the recorded state */
		fx_decide(rt, s, &r, 0);
		assert_int_equal(r.session_state, SG_SESSION_RETURNING);
		r.last_cluster_id = NULL;	/* "new" if reclassified */
		assert_int_equal(sg_router_explain(rt, s, &r, 0, &ex, NULL), 0);
		assert_string_equal(json_string_value(json_object_get(
		    json_object_get(ex, "session"), "state")), "returning");
		json_decref(ex);
		sg_snapshot_free(s);
		sg_router_free(rt);
		sg_lbconf_free(conf);
	}
}

static void
test_explain_empty_snapshot_and_errors(void **state)
{
	sg_lbconf *conf = fx_conf("{\"default\":\"power-of-n\"}");
	sg_router *rt = fx_router(conf, 1);
	sg_snapshot *s = sg_snapshot_new();
	json_t *ex = NULL;
	sg_error err;
	sg_request r;

	(void)state;
	fx_req(&r, "r", NULL, 10);
	assert_int_equal(sg_router_explain(rt, s, &r, 0, &ex, NULL), 0);
	assert_int_equal(json_array_size(json_object_get(ex, "candidates")), 0);
	json_decref(ex);
	r.routing_method = "nope";
	sg_error_clear(&err);
	assert_int_equal(sg_router_explain(rt, s, &r, 0, &ex, &err),
	    SG_EREQUEST);
	assert_int_equal(err.status, 400);
	sg_snapshot_free(s);
	sg_router_free(rt);
	sg_lbconf_free(conf);
}

static void
test_explain_does_not_advance_round_robin(void **state)
{
	sg_lbconf *conf = fx_conf("{\"default\":\"round-robin\"}");
	sg_router *a = fx_router(conf, 1), *b = fx_router(conf, 1);
	sg_snapshot *s = fx_snapshot(5);
	size_t i, seen = 0;
	sg_request r;

	(void)state;
	fx_req(&r, "r", NULL, 10);
	for (i = 0; i < 12; i++) {
		json_t *ex = NULL;
		sg_decision da, db;

		assert_int_equal(sg_router_explain(a, s, &r, 0, &ex, NULL), 0);
		json_decref(ex);
		da = fx_decide(a, s, &r, 0);
		db = fx_decide(b, s, &r, 0);
		assert_int_equal(da.index, db.index);
		assert_int_equal(da.index, i % 5);	/* it does advance */
		seen |= (size_t)1 << da.index;
	}
	assert_int_equal(seen, 0x1f);
	sg_snapshot_free(s);
	sg_router_free(a);
	sg_router_free(b);
	sg_lbconf_free(conf);
}

/* Round-robin counters are per definition: an override shares the
 * definition's counter only when it resolves to the same definition. */
static void
test_round_robin_counter_per_definition(void **state)
{
	sg_lbconf *conf = fx_conf("{\"default\":\"round-robin\","
	    "\"models\":{\"other\":\"round-robin\"}}");
	sg_router *rt = fx_router(conf, 1);
	sg_snapshot *s = fx_snapshot(3);
	sg_request r;

	(void)state;
	fx_req(&r, "r", NULL, 10);
	fx_assert_select(fx_decide(rt, s, &r, 0), 0);
	r.routing_method = "round-robin";	/* same definition */
	fx_assert_select(fx_decide(rt, s, &r, 0), 1);
	r.model = "other";			/* another definition */
	r.routing_method = NULL;
	fx_assert_select(fx_decide(rt, s, &r, 0), 0);
	r.model = "m";
	fx_assert_select(fx_decide(rt, s, &r, 0), 2);
	sg_snapshot_free(s);
	sg_router_free(rt);
	sg_lbconf_free(conf);
}

static void
test_router_new_rejects_missing_config(void **state)
{
	sg_router *rt = NULL;

	(void)state;
	assert_int_equal(sg_router_new(&rt, NULL, 1, NULL), SG_EINVAL);
	assert_null(rt);
	sg_router_free(NULL);
}

/* --- fast paths agree with the reference paths ------------------------------ */

/*
 * One lb-config with a definition per shape the fast paths care about:
 * rings of several sizes, bucket walks with and without unlock budget
 * (f = 0 unlocks everything, B = 0 makes every gap a bucket), the queue SLO,
 * session rules, pulsar and p-w-a-w under both weight modes, KV feasibility,
 * and input-work admission.
 */
#define PROP_CONF "{\"default\":\"random\",\"models\":{"			\
	"\"w1\":{\"algorithm\":\"wait-and-widen\","				\
	"\"cache_affinity_backend_selection_count\":2,"				\
	"\"cache_affinity_virtual_nodes\":20,\"ttft_bucket_size_ms\":10,"	\
	"\"next_bucket_unlock_factor\":0.5,\"cache_affinity_wait_ms\":30},"	\
	"\"w2\":{\"algorithm\":\"wait-and-widen\","				\
	"\"cache_affinity_backend_selection_count\":3,"				\
	"\"cache_affinity_virtual_nodes\":7,\"ttft_bucket_size_ms\":0,"		\
	"\"next_bucket_unlock_factor\":0.1,\"max_queued\":2,"			\
	"\"comparator\":\"queue-time\",\"last_cluster_affinity\":true,"		\
	"\"cache_affinity_wait_ms\":20,"					\
	"\"cache_affinity_input_tokens_scale\":0.2},"				\
	"\"w3\":{\"algorithm\":\"wait-and-widen\",\"ttft_bucket_size_ms\":5,"	\
	"\"next_bucket_unlock_factor\":0,\"n\":3,"				\
	"\"max_queue_time_floor_ms\":50,\"max_queue_time_ceil_ms\":200},"	\
	"\"w4\":{\"algorithm\":\"wait-and-widen\","				\
	"\"cache_affinity_backend_selection_count\":1,"				\
	"\"ttft_bucket_size_ms\":1,\"next_bucket_unlock_factor\":2,"		\
	"\"ignore_queue_time\":true,\"comparator\":\"utilization\"},"		\
	"\"w5\":{\"algorithm\":\"wait-and-widen\","				\
	"\"cache_affinity_backend_selection_count\":40,"			\
	"\"cache_affinity_virtual_nodes\":3,\"ttft_bucket_size_ms\":3,"		\
	"\"next_bucket_unlock_factor\":0.05,\"n\":2},"				\
	"\"p1\":{\"algorithm\":\"pulsar\"},"					\
	"\"p2\":{\"algorithm\":\"pulsar\",\"seed\":\"s\","			\
	"\"rendezvous_weight\":\"last-mean-input-tps\","			\
	"\"consider_kv_free_tokens\":true},"					\
	"\"q1\":{\"algorithm\":\"pulsar-wait-and-widen\","			\
	"\"cache_affinity_backend_selection_count\":2,"				\
	"\"cache_affinity_wait_ms\":10,\"band_widen_interval_ms\":5},"		\
	"\"q2\":{\"algorithm\":\"pulsar-wait-and-widen\","			\
	"\"cache_affinity_backend_selection_count\":3,"				\
	"\"last_cluster_affinity\":true,\"consider_kv_free_tokens\":true,"	\
	"\"rendezvous_weight\":\"last-mean-input-tps\","			\
	"\"max_input_work_seconds\":5},"					\
	"\"r\":\"round-robin\","						\
	"\"n\":{\"algorithm\":\"power-of-n\",\"sample_count\":2}}}"

static const char *const prop_models[] = {
	"w1", "w2", "w3", "w4", "w5", "p1", "p2", "q1", "q2", "r", "n", "other",
};

static uint64_t
prop_next(uint64_t *g)
{
	*g ^= *g << 13;
	*g ^= *g >> 7;
	*g ^= *g << 17;
	return *g;
}

static uint64_t
prop_below(uint64_t *g, uint64_t n)
{
	return prop_next(g) % n;
}

/* Coarse values, so that TTFTs, scores and weights tie often. */
static double
prop_rate(uint64_t *g)
{
	static const double v[] = { 0, 500, 1000, 1000, 1500, 2000, NAN,
	    INFINITY, -5 };

	return v[prop_below(g, sizeof(v) / sizeof(v[0]))];
}

static void
prop_figures(uint64_t *g, sg_cluster *c)
{
	c->rtt_ms = (double)prop_below(g, 6) * 2.5;
	c->max_engine_concurrency = prop_below(g, 5);
	c->running = prop_below(g, 7);
	c->queued = prop_below(g, 4);
	c->queued_input_tokens = prop_below(g, 4) * 700;
	c->last_mean_input_tps = prop_rate(g);
	c->max_input_tps = prop_rate(g);
	c->kv_capacity_tokens = prop_below(g, 3) * 1000;
	c->kv_free_tokens = prop_below(g, 4) * 1000;
	c->kv_used_tokens = prop_below(g, 2) * 100;
	c->nprio = 0;
	if (prop_below(g, 8) == 0)
		(void)sg_cluster_set_prio(c, (uint32_t)prop_below(g, 3),
		    (double)prop_below(g, 50));
}

/* Rebuild s in place with a random ordered subset of the id pool. */
static void
prop_rebuild(uint64_t *g, sg_snapshot *s)
{
	size_t n = 1 + (size_t)prop_below(g, 40), i, k;
	bool used[64] = { false };
	char id[16];

	sg_snapshot_clear(s);
	for (i = 0; i < n; i++) {
		sg_cluster c;

		do
			k = (size_t)prop_below(g, 64);
		while (used[k]);
		used[k] = true;
		snprintf(id, sizeof(id), "c%zu", k);
		assert_int_equal(sg_cluster_init(&c, id, strlen(id)), 0);
		prop_figures(g, &c);
		assert_int_equal(sg_snapshot_add(s, &c, NULL), 0);
	}
}

/* Rebuild s in place with other ids but each position's figures kept. */
static void
prop_rename(uint64_t *g, sg_snapshot *s)
{
	static sg_cluster keep[64];
	size_t n = sg_snapshot_count(s), i, k;
	bool used[64] = { false };
	char id[16];

	for (i = 0; i < n; i++)
		keep[i] = *sg_snapshot_get(s, i);
	sg_snapshot_clear(s);
	for (i = 0; i < n; i++) {
		sg_cluster c = keep[i];

		do
			k = (size_t)prop_below(g, 64);
		while (used[k]);
		used[k] = true;
		snprintf(id, sizeof(id), "c%zu", k);
		memcpy(c.id, id, strlen(id) + 1);
		c.id_len = strlen(id);
		assert_int_equal(sg_snapshot_add(s, &c, NULL), 0);
	}
}

static void
prop_assert_same(const sg_decision *a, const sg_decision *b, size_t trial)
{
	if (a->kind != b->kind || a->index != b->index ||
	    a->rank_depth != b->rank_depth || a->kv_skip != b->kv_skip ||
	    a->phase != b->phase || a->status != b->status ||
	    a->classified != b->classified ||
	    a->session_state != b->session_state ||
	    a->promoted != b->promoted || a->primary != b->primary ||
	    !(a->recheck_at_ms == b->recheck_at_ms) ||
	    (a->cluster_id == NULL) != (b->cluster_id == NULL) ||
	    (a->cluster_id != NULL && strcmp(a->cluster_id, b->cluster_id)) ||
	    (a->code == NULL) != (b->code == NULL) ||
	    (a->code != NULL && strcmp(a->code, b->code) != 0) ||
	    (a->reason == NULL) != (b->reason == NULL) ||
	    (a->reason != NULL && strcmp(a->reason, b->reason) != 0) ||
	    strcmp(a->algorithm, b->algorithm) != 0)
		fail_msg("trial %zu: fast %s kind %d index %zu depth %u "
		    "kv_skip %d phase %d recheck %.17g; reference kind %d "
		    "index %zu depth %u kv_skip %d phase %d recheck %.17g",
		    trial, a->algorithm, a->kind, a->index, a->rank_depth,
		    a->kv_skip, a->phase, a->recheck_at_ms, b->kind, b->index,
		    b->rank_depth, b->kv_skip, b->phase, b->recheck_at_ms);
}

/*
 * Property: the fast paths (ring cache keyed on the ids version and the
 * hash prefix, the one-pass group without a ring, truncated ring hashes
 * with their tie fallback, bucket
 * walks without a full sort, the ranking cache, pulsar's logarithm-sparing
 * argmax, the resolution memo, the exclusion bookkeeping) decide exactly
 * like the reference paths, over random snapshots, definitions and
 * requests, with the ranking cache on and off.  Between rounds of decisions
 * the snapshot is rebuilt in place (new ids or order), replaced, copied
 * over, or only has its load figures and weights changed.
 */
static void
test_fast_paths_decide_like_the_reference_paths(void **state)
{
	sg_lbconf *conf = fx_conf(PROP_CONF);
	sg_router *fast = fx_router(conf, 7), *ref = fx_router(conf, 7);
	sg_router *nocache = fx_router(conf, 7);
	sg_router *noring = fx_router(conf, 7), *coarse = fx_router(conf, 7);
	sg_snapshot *s = sg_snapshot_new(), *t = sg_snapshot_new();
	static const char *const keys[] = { "k0", "k1", "k2", "k3", "k4",
	    "k5", "a-longer-cache-affinity-key-0123456789", "", NULL };
	uint64_t g = 0x9e3779b97f4a7c15ULL;
	size_t round, j, i, trial = 0;
	char rid[32], hint[16];
	struct sgi_rcache_stats st;
	struct sgi_ring_stats rs;

	(void)state;
	sgi_router_scratch(ref)->reference = true;
	assert_int_equal(sg_router_set_cache(nocache, false), 0);
	assert_null(sgi_router_scratch(nocache)->rcache);
	/* rings: none cached (one pass), and cached with 6-bit hashes */
	assert_int_equal(sg_router_set_ring_cache_bytes(noring, 0), 0);
	sgi_router_scratch(coarse)->ring_coarse = 6;
	prop_rebuild(&g, s);
	for (round = 0; round < 1500; round++) {
		size_t n;

		switch (prop_below(&g, 7)) {
		case 0:
			prop_rebuild(&g, s);
			break;
		case 6:		/* other ids, the same figures (and weights) */
			prop_rename(&g, s);
			break;
		case 1:		/* another object with other ids */
			prop_rebuild(&g, t);
			sg_snapshot_free(s);
			s = t;
			t = sg_snapshot_new();
			assert_non_null(t);
			break;
		case 2:
			prop_rebuild(&g, t);
			assert_int_equal(sg_snapshot_copy(s, t), 0);
			break;
		default:	/* load figures and weights only */
			n = sg_snapshot_count(s);
			for (i = 0; i < n; i++)
				if (prop_below(&g, 3) == 0)
					prop_figures(&g, sg_snapshot_at(s, i));
			break;
		}
		n = sg_snapshot_count(s);
		for (j = 0; j < 12; j++, trial++) {
			const char *excl[8];
			sg_request ra, rb, rc, rd, re;
			sg_decision da, db, dc, dd, de;
			sg_error err;
			double e;

			fx_req(&ra, rid, keys[prop_below(&g, 9)],
			    prop_below(&g, 4) * 900);
			snprintf(rid, sizeof(rid), "req-%zu",
			    (size_t)prop_below(&g, 50));
			ra.model = prop_models[prop_below(&g,
			    sizeof(prop_models) / sizeof(prop_models[0]))];
			ra.routing_key = prop_below(&g, 2) ? "tenant" : NULL;
			ra.priority = (uint32_t)prop_below(&g, 3);
			if (prop_below(&g, 3) == 0) {
				ra.has_max_wait = true;
				ra.max_wait_ms = prop_below(&g, 100);
			}
			if (prop_below(&g, 4) == 0) {
				ra.has_slo = true;
				ra.request_slo_ms = prop_below(&g, 400);
			}
			ra.nexcluded = (size_t)prop_below(&g, 4);
			for (i = 0; i < ra.nexcluded; i++) {
				size_t k = (size_t)prop_below(&g, n + 2);

				excl[i] = k < n ? sg_snapshot_get(s, k)->id :
				    "gone";
			}
			ra.excluded = excl;
			if (prop_below(&g, 2)) {
				snprintf(hint, sizeof(hint), "c%zu",
				    (size_t)prop_below(&g, 70));
				ra.last_cluster_id = hint;
			}
			e = (double)prop_below(&g, 5) * 7.5;
			rb = ra;
			rc = ra;
			rd = ra;
			re = ra;
			assert_int_equal(sg_router_decide(fast, s, &ra, e, &da,
			    &err), 0);
			assert_int_equal(sg_router_decide(ref, s, &rb, e, &db,
			    &err), 0);
			assert_int_equal(sg_router_decide(nocache, s, &rc, e,
			    &dc, &err), 0);
			assert_int_equal(sg_router_decide(noring, s, &rd, e,
			    &dd, &err), 0);
			assert_int_equal(sg_router_decide(coarse, s, &re, e,
			    &de, &err), 0);
			prop_assert_same(&da, &db, trial);
			prop_assert_same(&dc, &db, trial);
			prop_assert_same(&dd, &db, trial);
			prop_assert_same(&de, &db, trial);
			/* a later decision of the same request, classified */
			e += 12.5;
			assert_int_equal(sg_router_decide(fast, s, &ra, e, &da,
			    &err), 0);
			assert_int_equal(sg_router_decide(ref, s, &rb, e, &db,
			    &err), 0);
			assert_int_equal(sg_router_decide(nocache, s, &rc, e,
			    &dc, &err), 0);
			assert_int_equal(sg_router_decide(noring, s, &rd, e,
			    &dd, &err), 0);
			assert_int_equal(sg_router_decide(coarse, s, &re, e,
			    &de, &err), 0);
			prop_assert_same(&da, &db, trial);
			prop_assert_same(&dc, &db, trial);
			prop_assert_same(&dd, &db, trial);
			prop_assert_same(&de, &db, trial);
		}
	}
	/* the cached side did use its cache, through every kind of change */
	sgi_rcache_stats(sgi_router_scratch(fast)->rcache, &st);
	assert_true(st.hits > 1000);
	assert_true(st.stores > 100);
	assert_true(st.weight_changes > 100);
	sgi_rcache_stats(sgi_router_scratch(ref)->rcache, &st);
	assert_true(st.hits + st.misses == 0);
	/* the ring paths were all taken */
	sgi_rings_stats(sgi_router_scratch(fast), &rs);
	assert_true(rs.hits > 1000 && rs.builds > 50);
	sgi_rings_stats(sgi_router_scratch(noring), &rs);
	assert_true(rs.hits + rs.builds == 0 && rs.onepass > 1000);
	sgi_rings_stats(sgi_router_scratch(coarse), &rs);
	assert_true(rs.ambiguous > 100);
	sg_router_free(noring);
	sg_router_free(coarse);
	sg_snapshot_free(s);
	sg_snapshot_free(t);
	sg_router_free(fast);
	sg_router_free(ref);
	sg_router_free(nocache);
	sg_lbconf_free(conf);
}

/*
 * Near ties in pulsar: weights set from each candidate's own hash so that
 * the scores w / -ln(u) of many candidates are equal or a few ulps apart
 * (the logarithm-sparing argmax must still find exactly the reference's
 * winner and depth), with exclusions and KV feasibility in play.
 */
static void
test_pulsar_near_ties_decide_like_the_reference(void **state)
{
	sg_lbconf *conf = fx_conf("{\"models\":{\"p\":{\"algorithm\":"
	    "\"pulsar\",\"consider_kv_free_tokens\":true}}}");
	sg_router *nocache = fx_router(conf, 3), *ref = fx_router(conf, 3);
	sg_snapshot *s = sg_snapshot_new();
	static const double eps[] = { 0, 0, 0, 1e-16, -1e-16, 2e-16, 1e-13,
	    -1e-13, 1e-9, 1e-6, 1e-3, 0.5 };
	uint64_t g = 12345;
	size_t trial, i, n;
	char id[16], key[32];

	(void)state;
	sgi_router_scratch(ref)->reference = true;
	assert_int_equal(sg_router_set_cache(nocache, false), 0);
	for (trial = 0; trial < 3000; trial++) {
		const sg_algdef *d;
		const char *excl[4];
		sgi_hashbuf prefix;
		sg_request ra, rb;
		sg_decision da, db;
		sg_error err;

		n = 2 + (size_t)prop_below(&g, 200);
		sg_snapshot_clear(s);
		for (i = 0; i < n; i++) {
			sg_cluster c;

			snprintf(id, sizeof(id), "c%zu", i);
			assert_int_equal(sg_cluster_init(&c, id, strlen(id)),
			    0);
			c.kv_free_tokens = prop_below(&g, 6) == 0 ? 0 : 5000;
			c.kv_capacity_tokens = 10000;
			assert_int_equal(sg_snapshot_add(s, &c, NULL), 0);
		}
		snprintf(key, sizeof(key), "key-%zu", trial);
		fx_req(&ra, "r", key, 100);
		ra.model = "p";
		d = fx_def(conf, &ra);
		sgi_pulsar_prefix(&prefix, d, &ra);
		for (i = 0; i < n; i++) {
			sg_cluster *c = sg_snapshot_at(s, i);
			uint64_t h = sgi_pulsar_hash(&prefix, c->id, c->id_len);
			double u = ((double)h + 1.0) * 0x1p-64;

			/* score = w / -ln(u) = 1000 * (1 + eps) */
			c->max_input_tps = 1000.0 * -log(u) *
			    (1 + eps[prop_below(&g, sizeof(eps) /
			    sizeof(eps[0]))]);
			if (prop_below(&g, 50) == 0)
				c->max_input_tps = 0;	/* unranked */
		}
		ra.nexcluded = (size_t)prop_below(&g, 4);
		for (i = 0; i < ra.nexcluded; i++)
			excl[i] = sg_snapshot_get(s,
			    (size_t)prop_below(&g, n))->id;
		ra.excluded = excl;
		rb = ra;
		assert_int_equal(sg_router_decide(nocache, s, &ra, 0, &da, &err),
		    0);
		assert_int_equal(sg_router_decide(ref, s, &rb, 0, &db, &err), 0);
		prop_assert_same(&da, &db, trial);
	}
	sg_snapshot_free(s);
	sg_router_free(nocache);
	sg_router_free(ref);
	sg_lbconf_free(conf);
}

/*
 * pulsar-wait-and-widen without a cached ranking ranks only the first k
 * (the affinity phase's prefix, with the last cluster rotated in from
 * wherever it ranks) and the rest only when the open-set phase needs it:
 * it must decide exactly like the full ranking (the reference), over
 * random snapshots of up to 300 candidates, near-tied scores, selection
 * counts 1 to 8, band widths, elapsed times, returning/stale/new sessions
 * (last clusters ranked deep, unranked, excluded or gone), exclusions and
 * KV feasibility.
 */
#define LAZY_CONF "{\"models\":{"					\
	"\"a\":{\"algorithm\":\"pulsar-wait-and-widen\","		\
	"\"cache_affinity_backend_selection_count\":1,"			\
	"\"last_cluster_affinity\":true,\"cache_affinity_wait_ms\":10,"	\
	"\"band_widen_interval_ms\":5,"					\
	"\"rendezvous_weight\":\"max-input-tps\"},"			\
	"\"b\":{\"algorithm\":\"pulsar-wait-and-widen\","		\
	"\"cache_affinity_backend_selection_count\":2,"			\
	"\"last_cluster_affinity\":true,\"consider_kv_free_tokens\":true,"\
	"\"rendezvous_weight\":\"max-input-tps\"},"			\
	"\"c\":{\"algorithm\":\"pulsar-wait-and-widen\","		\
	"\"cache_affinity_backend_selection_count\":4,"			\
	"\"last_cluster_affinity\":true,\"cache_affinity_wait_ms\":20,"	\
	"\"rendezvous_weight\":\"max-input-tps\",\"max_queued\":1},"	\
	"\"d\":{\"algorithm\":\"pulsar-wait-and-widen\","		\
	"\"cache_affinity_backend_selection_count\":8,"			\
	"\"band_widen_interval_ms\":3,\"consider_kv_free_tokens\":true,"\
	"\"rendezvous_weight\":\"max-input-tps\"}}}"

static void
test_pwaw_lazy_ranking_decides_like_the_full_ranking(void **state)
{
	sg_lbconf *conf = fx_conf(LAZY_CONF);
	sg_router *nocache = fx_router(conf, 5), *ref = fx_router(conf, 5);
	sg_snapshot *s = sg_snapshot_new();
	static const double eps[] = { 0, 0, 1e-16, -1e-16, 1e-13, 1e-9,
	    1e-3, 0.5, 3, 0.01 };
	static const char *const models[] = { "a", "b", "c", "d" };
	uint64_t g = 777;
	size_t trial, i, n, step;
	char id[16], key[32], hint[16];

	(void)state;
	sgi_router_scratch(ref)->reference = true;
	assert_int_equal(sg_router_set_cache(nocache, false), 0);
	for (trial = 0; trial < 4000; trial++) {
		const sg_algdef *d;
		const char *excl[6];
		sgi_hashbuf prefix;
		sg_request ra, rb;
		sg_decision da, db;
		sg_error err;
		double e;

		n = 1 + (size_t)prop_below(&g, trial % 10 == 0 ? 300 : 48);
		sg_snapshot_clear(s);
		for (i = 0; i < n; i++) {
			sg_cluster c;

			snprintf(id, sizeof(id), "c%zu", i);
			assert_int_equal(sg_cluster_init(&c, id, strlen(id)),
			    0);
			prop_figures(&g, &c);
			c.kv_free_tokens = prop_below(&g, 6) == 0 ? 0 : 5000;
			c.kv_capacity_tokens = 10000;
			assert_int_equal(sg_snapshot_add(s, &c, NULL), 0);
		}
		snprintf(key, sizeof(key), "key-%zu", (size_t)prop_below(&g,
		    50));
		fx_req(&ra, "r", key, prop_below(&g, 3) * 2000);
		ra.model = models[prop_below(&g, 4)];
		ra.priority = (uint32_t)prop_below(&g, 2);
		d = fx_def(conf, &ra);
		sgi_pulsar_prefix(&prefix, d, &ra);
		for (i = 0; i < n; i++) {
			sg_cluster *c = sg_snapshot_at(s, i);
			uint64_t h = sgi_pulsar_hash(&prefix, c->id, c->id_len);
			double u = ((double)h + 1.0) * 0x1p-64;

			if (prop_below(&g, 2))
				continue;	/* random weight */
			/* near-tied scores: w / -ln(u) = 1000 * (1 + eps) */
			c->max_input_tps = 1000.0 * -log(u) *
			    (1 + eps[prop_below(&g, sizeof(eps) /
			    sizeof(eps[0]))]);
			if (prop_below(&g, 40) == 0)
				c->max_input_tps = 0;	/* unranked */
		}
		ra.nexcluded = (size_t)prop_below(&g, 4);
		for (i = 0; i < ra.nexcluded; i++)
			excl[i] = sg_snapshot_get(s,
			    (size_t)prop_below(&g, n))->id;
		ra.excluded = excl;
		if (prop_below(&g, 4) != 0) {
			/* often a deep or unranked last cluster */
			snprintf(hint, sizeof(hint), "c%zu",
			    (size_t)prop_below(&g, n + 3));
			ra.last_cluster_id = hint;
		}
		rb = ra;
		e = 0;
		for (step = 0; step < 3; step++) {
			assert_int_equal(sg_router_decide(nocache, s, &ra, e,
			    &da, &err), 0);
			assert_int_equal(sg_router_decide(ref, s, &rb, e, &db,
			    &err), 0);
			prop_assert_same(&da, &db, trial);
			assert_int_equal(ra.session_state, rb.session_state);
			assert_int_equal(ra.session_promoted,
			    rb.session_promoted);
			e += (double)prop_below(&g, 30) + 0.5;
		}
	}
	sg_snapshot_free(s);
	sg_router_free(nocache);
	sg_router_free(ref);
	sg_lbconf_free(conf);
}

/* The memoised resolution follows the model (and header) of each request. */
static void
test_resolution_follows_each_request(void **state)
{
	sg_lbconf *conf = fx_conf("{\"default\":\"random\","
	    "\"request_algorithms\":{\"round-robin\":\"round-robin\"},"
	    "\"models\":{\"m\":\"pulsar\",\"n\":\"power-of-n\"}}");
	sg_router *rt = fx_router(conf, 1);
	sg_snapshot *s = fx_snapshot(3);
	static const struct {
		const char	*model;
		const char	*method;
		const char	*want;
	} seq[] = {
		{ "m", NULL, "pulsar" }, { "m", NULL, "pulsar" },
		{ "n", NULL, "power-of-n" }, { NULL, NULL, "random" },
		{ "m", "round-robin", "round-robin" }, { "m", NULL, "pulsar" },
		{ "mm", NULL, "random" }, { "", NULL, "random" },
		{ NULL, NULL, "random" }, { "n", NULL, "power-of-n" },
	};
	char model[8];
	sg_decision d;
	sg_error err;
	sg_request r;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(seq) / sizeof(seq[0]); i++) {
		fx_req(&r, "r", "k", 10);
		/* the same buffer with new contents must not fool the memo */
		if (seq[i].model != NULL) {
			snprintf(model, sizeof(model), "%s", seq[i].model);
			r.model = model;
		} else
			r.model = NULL;
		r.routing_method = seq[i].method;
		assert_int_equal(decide_rc(rt, s, &r, 0, &d, &err), 0);
		assert_string_equal(d.algorithm, seq[i].want);
	}
	sg_snapshot_free(s);
	sg_router_free(rt);
	sg_lbconf_free(conf);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(
		    test_resolution_errors_are_400_with_their_class),
		cmocka_unit_test(test_required_cache_affinity_key_is_400),
		cmocka_unit_test(test_bad_elapsed_is_invalid),
		cmocka_unit_test(
		    test_empty_snapshot_is_404_no_eligible_candidates),
		cmocka_unit_test(test_all_excluded_is_503_overloaded),
		cmocka_unit_test(test_admission_worked_check_3_seconds),
		cmocka_unit_test(test_admission_set_per_algorithm_family),
		cmocka_unit_test(
		    test_admission_without_rate_is_capacity_unavailable),
		cmocka_unit_test(test_wait_is_clamped_to_max_wait),
		cmocka_unit_test(test_wait_deadline_is_capped_at_60_seconds),
		cmocka_unit_test(test_unavailable_polls_until_max_wait),
		cmocka_unit_test(test_same_inputs_same_decision),
		cmocka_unit_test(test_unrelated_models_do_not_change_decisions),
		cmocka_unit_test(test_explain_table_shape),
		cmocka_unit_test(test_explain_empty_snapshot_and_errors),
		cmocka_unit_test(test_explain_does_not_advance_round_robin),
		cmocka_unit_test(test_round_robin_counter_per_definition),
		cmocka_unit_test(test_router_new_rejects_missing_config),
		cmocka_unit_test(test_fast_paths_decide_like_the_reference_paths),
		cmocka_unit_test(test_resolution_follows_each_request),
		cmocka_unit_test(
		    test_pulsar_near_ties_decide_like_the_reference),
		cmocka_unit_test(
		    test_pwaw_lazy_ranking_decides_like_the_full_ranking),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
