/*
 * test_estimate.c — sg_estimate.c: the worked checks of stargate-lb-config(5),
 * the priority-map clamp, capacity, the queue-SLO bound of
 * stargate-lb-config(5), every power-of-n comparator and invalid throughputs.
 */
#include "sg_test.h"

#include <math.h>

#include "sg_internal.h"

static sg_cluster
mk(const char *id)
{
	sg_cluster c;

	assert_int_equal(sg_cluster_init(&c, id, strlen(id)), 0);
	return c;
}

/* Upstream: tps 8000, queued 80000, running 24/25, rtt 5, 8000 tokens. */
static sg_cluster
upstream_cluster(uint64_t running, uint64_t max)
{
	sg_cluster c = mk("c");

	c.last_mean_input_tps = 8000;
	c.queued_input_tokens = 80000;
	c.queued = 10;
	c.running = running;
	c.max_engine_concurrency = max;
	c.rtt_ms = 5;
	return c;
}

static void
test_free_slot_means_no_queue_ttft_1005(void **state)
{
	sg_cluster c = upstream_cluster(24, 25);

	(void)state;
	assert_true(sgi_free_slot(&c));
	assert_near(sgi_queue_ms(&c, 0), 0, 0);
	assert_near(sgi_ttft_ms(&c, 8000, 0, 1.0, false, false), 1005, 1e-9);
	assert_near(sgi_comparator_ms(&c, 8000, 0, 1.0), 1005, 1e-9);
}

static void
test_full_or_unknown_concurrency_queues_10000(void **state)
{
	sg_cluster c;

	(void)state;
	c = upstream_cluster(25, 25);
	assert_false(sgi_free_slot(&c));
	assert_near(sgi_queue_ms(&c, 0), 10000, 1e-9);
	assert_near(sgi_ttft_ms(&c, 8000, 0, 1.0, false, false), 11005, 1e-9);
	c = upstream_cluster(26, 25);
	assert_near(sgi_queue_ms(&c, 0), 10000, 1e-9);
	c = upstream_cluster(0, 0);		/* max 0 = unknown: no free slot */
	assert_false(sgi_free_slot(&c));
	assert_near(sgi_queue_ms(&c, 0), 10000, 1e-9);
	/* the priority map is used instead of the TPS rule when present */
	c = upstream_cluster(25, 25);
	assert_int_equal(sg_cluster_set_prio(&c, 0, 10000), 0);
	assert_near(sgi_queue_ms(&c, 0), 10000, 0);
}

/* rtt 7, map {4:25}, tps 100, 200 tokens, priority 4. */
static void
test_priority_map_scale_and_ignore_flags(void **state)
{
	sg_cluster c = mk("c");

	(void)state;
	c.rtt_ms = 7;
	c.last_mean_input_tps = 100;
	c.queued_input_tokens = 5000;	/* would be 50000 ms by TPS: unused */
	assert_int_equal(sg_cluster_set_prio(&c, 4, 25), 0);
	assert_near(sgi_queue_ms(&c, 4), 25, 0);
	assert_near(sgi_prefill_ms(&c, 200, 1.0), 2000, 1e-9);
	assert_near(sgi_ttft_ms(&c, 200, 4, 1.0, false, false), 2032, 1e-9);
	assert_near(sgi_ttft_ms(&c, 200, 4, 0.1, false, false), 232, 1e-9);
	assert_near(sgi_ttft_ms(&c, 200, 4, 1.0, true, false), 2007, 1e-9);
	assert_near(sgi_ttft_ms(&c, 200, 4, 1.0, false, true), 32, 1e-9);
	assert_near(sgi_ttft_ms(&c, 200, 4, 1.0, true, true), 7, 1e-9);
	/* comparator TTFT never applies the ignore flags, only the scale */
	assert_near(sgi_comparator_ms(&c, 200, 4, 1.0), 2032, 1e-9);
	assert_near(sgi_comparator_ms(&c, 200, 4, 0.1), 232, 1e-9);
}

static void
test_priority_clamp_uses_largest_key_at_or_below(void **state)
{
	sg_cluster c = mk("c");
	uint64_t ms = 99;

	(void)state;
	c.last_mean_input_tps = 100;
	c.queued_input_tokens = 100;
	assert_int_equal(sg_cluster_set_prio(&c, 8, 300), 0);
	assert_int_equal(sg_cluster_set_prio(&c, 2, 100), 0);
	assert_int_equal(sg_cluster_set_prio(&c, 5, 200), 0);
	assert_near(sgi_queue_ms(&c, 0), 0, 0);	/* more urgent than every key */
	assert_near(sgi_queue_ms(&c, 1), 0, 0);
	assert_near(sgi_queue_ms(&c, 2), 100, 0);
	assert_near(sgi_queue_ms(&c, 4), 100, 0);
	assert_near(sgi_queue_ms(&c, 5), 200, 0);
	assert_near(sgi_queue_ms(&c, 7), 200, 0);
	assert_near(sgi_queue_ms(&c, 8), 300, 0);
	assert_near(sgi_queue_ms(&c, UINT32_MAX), 300, 0);	/* clamp */
	assert_true(sgi_expected_queue_ms(&c, 6, &ms));
	assert_true(ms == 200);
	assert_true(sgi_expected_queue_ms(&c, 1, &ms));
	assert_true(ms == 0);
	/* a free slot wins over the map */
	c.max_engine_concurrency = 2;
	c.running = 1;
	assert_near(sgi_queue_ms(&c, 8), 0, 0);
}

static void
test_queue_by_tps_rule(void **state)
{
	sg_cluster c = mk("c");
	uint64_t ms = 99;

	(void)state;
	c.last_mean_input_tps = 300;
	c.queued_input_tokens = 100;
	assert_near(sgi_queue_ms(&c, 0), 100.0 / 300 * 1000, 1e-9);
	assert_true(sgi_expected_queue_ms(&c, 0, &ms));
	assert_true(ms == 334);				/* ceil(333.33) */
	c.queued_input_tokens = 0;			/* nothing queued */
	assert_near(sgi_queue_ms(&c, 0), 0, 0);
	c.last_mean_input_tps = 0;
	assert_near(sgi_queue_ms(&c, 0), 0, 0);		/* 0 even without tps */
	assert_true(sgi_expected_queue_ms(&c, 0, &ms));
	assert_true(ms == 0);
	c.queued_input_tokens = 1;			/* queued, tps invalid */
	assert_true(isinf(sgi_queue_ms(&c, 0)));
	assert_false(sgi_expected_queue_ms(&c, 0, &ms));
	/* with a free slot the header is 0 */
	c.max_engine_concurrency = 1;
	assert_true(sgi_expected_queue_ms(&c, 0, &ms));
	assert_true(ms == 0);
}

static void
test_invalid_tps_values(void **state)
{
	const double bad[] = { 0, -5, NAN, INFINITY, -INFINITY };
	size_t i;

	(void)state;
	for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		sg_cluster c = mk("c");

		c.last_mean_input_tps = bad[i];
		c.queued_input_tokens = 10;
		assert_near(sgi_tps(&c), 0, 0);
		assert_true(isinf(sgi_queue_ms(&c, 0)));
		assert_near(sgi_prefill_ms(&c, 0, 1.0), 0, 0);
		assert_true(isinf(sgi_prefill_ms(&c, 1, 1.0)));
		assert_true(isinf(sgi_prefill_ms(&c, 1, 0.0)));	/* scale 0 */
		assert_true(isinf(sgi_ttft_ms(&c, 1, 0, 1.0, true, false)));
		assert_true(isinf(sgi_score(SG_CMP_INPUT_WORK, &c, 0, 0)));
		c.queued_input_tokens = 0;
		assert_near(sgi_score(SG_CMP_INPUT_WORK, &c, 0, 0), 0, 0);
		assert_true(isinf(sgi_score(SG_CMP_INPUT_WORK, &c, 3, 0)));
		assert_near(sgi_ttft_ms(&c, 5, 0, 1.0, false, true), 0, 0);
	}
}

static void
test_proc(void **state)
{
	(void)state;
	assert_near(sgi_proc(0, 0), 0, 0);
	assert_near(sgi_proc(0, -1), 0, 0);
	assert_true(isinf(sgi_proc(1, 0)));
	assert_true(isinf(sgi_proc(1, -1)));
	assert_near(sgi_proc(300, 100), 3, 0);
}

static void
test_prefill_scales_with_tokens(void **state)
{
	sg_cluster c = mk("c");

	(void)state;
	c.last_mean_input_tps = 4000;
	assert_near(sgi_prefill_ms(&c, 0, 1.0), 0, 0);
	assert_near(sgi_prefill_ms(&c, 1000, 1.0), 250, 1e-9);
	assert_near(sgi_prefill_ms(&c, 1000, 0.5), 125, 1e-9);
	assert_near(sgi_prefill_ms(&c, 1000, 0.0), 0, 0);
}

static void
test_capacity_with_max_queued(void **state)
{
	sg_cluster c = mk("c");

	(void)state;
	c.running = 1000;
	assert_true(sgi_has_capacity(&c, 0));		/* max 0: always */
	c.max_engine_concurrency = 4;
	c.running = 3;
	assert_true(sgi_has_capacity(&c, 0));
	c.running = 4;
	assert_false(sgi_has_capacity(&c, 0));
	assert_true(sgi_has_capacity(&c, 1));
	c.running = 5;
	assert_false(sgi_has_capacity(&c, 1));
	assert_true(sgi_has_capacity(&c, 4));
	c.running = 8;
	assert_false(sgi_has_capacity(&c, 4));
	/* saturating add: UINT64_MAX admits everything below it */
	c.running = UINT64_MAX - 1;
	assert_true(sgi_has_capacity(&c, UINT64_MAX));
	c.max_engine_concurrency = UINT64_MAX;
	c.running = UINT64_MAX - 1;
	assert_true(sgi_has_capacity(&c, 0));
	assert_true(sgi_has_capacity(&c, 5));
	c.running = UINT64_MAX;
	assert_false(sgi_has_capacity(&c, 5));
}

static void
test_queue_slo_interpolates_floor_to_ceil(void **state)
{
	sg_algdef d;
	sg_request r;
	double m = -1;

	(void)state;
	memset(&d, 0, sizeof d);
	memset(&r, 0, sizeof r);
	d.max_queue_time_floor_ms = 100;
	d.max_queue_time_ceil_ms = 300;
	/* inactive unless both bounds are set */
	assert_false(sgi_queue_slo(&d, &r, 500, &m));
	d.has_queue_floor = true;
	assert_false(sgi_queue_slo(&d, &r, 500, &m));
	d.has_queue_ceil = true;
	d.has_queue_floor = false;
	assert_false(sgi_queue_slo(&d, &r, 500, &m));
	assert_near(m, -1, 0);
	d.has_queue_floor = true;

	r.has_slo = true;
	r.request_slo_ms = 1000;
	assert_true(sgi_queue_slo(&d, &r, 500, &m));
	assert_near(m, 200, 1e-9);
	assert_true(sgi_queue_slo(&d, &r, 0, &m));
	assert_near(m, 100, 1e-9);
	assert_true(sgi_queue_slo(&d, &r, 2500, &m));	/* clamp to 1 */
	assert_near(m, 300, 1e-9);
	assert_true(sgi_queue_slo(&d, &r, -10, &m));	/* clamp to 0 */
	assert_near(m, 100, 1e-9);
	r.request_slo_ms = 0;				/* SLO 0 -> ceil */
	assert_true(sgi_queue_slo(&d, &r, 500, &m));
	assert_near(m, 300, 0);
	r.has_slo = false;				/* no SLO -> ceil */
	r.request_slo_ms = 1000;
	assert_true(sgi_queue_slo(&d, &r, 500, &m));
	assert_near(m, 300, 0);
}

static void
test_comparators(void **state)
{
	sg_cluster c = mk("c");

	(void)state;
	c.rtt_ms = 3;
	c.last_mean_input_tps = 1000;
	c.queued_input_tokens = 2000;
	c.queued = 6;
	c.running = 12;
	c.max_engine_concurrency = 8;
	/* ttft: rtt + queue + full prefill */
	assert_near(sgi_score(SG_CMP_TTFT, &c, 500, 0), 3 + 2000 + 500, 1e-9);
	assert_near(sgi_score(SG_CMP_QUEUE_TIME, &c, 500, 0), 2000, 1e-9);
	assert_near(sgi_score(SG_CMP_INPUT_WORK, &c, 500, 0), 2.5, 1e-12);
	assert_near(sgi_score(SG_CMP_UTILIZATION, &c, 500, 0), 1.5, 0);
	assert_near(sgi_score(SG_CMP_NUM_QUEUED, &c, 500, 0), 6, 0);
	/* the free-slot rule applies to ttft and queue-time */
	c.running = 2;
	assert_near(sgi_score(SG_CMP_QUEUE_TIME, &c, 500, 0), 0, 0);
	assert_near(sgi_score(SG_CMP_TTFT, &c, 500, 0), 503, 1e-9);
	assert_near(sgi_score(SG_CMP_INPUT_WORK, &c, 500, 0), 2.5, 1e-12);
	/* utilization with unknown concurrency divides by 1 */
	c.max_engine_concurrency = 0;
	c.running = 7;
	assert_near(sgi_score(SG_CMP_UTILIZATION, &c, 500, 0), 7, 0);
	/* the priority map feeds the comparators */
	assert_int_equal(sg_cluster_set_prio(&c, 0, 40), 0);
	assert_near(sgi_score(SG_CMP_QUEUE_TIME, &c, 500, 0), 40, 0);
	assert_near(sgi_score(SG_CMP_TTFT, &c, 500, 0), 543, 1e-9);
	/* input work saturates instead of wrapping */
	c.queued_input_tokens = UINT64_MAX;
	assert_near(sgi_score(SG_CMP_INPUT_WORK, &c, 5, 0),
	    (double)UINT64_MAX / 1000, 1e3);
}

static void
test_total_cmp_is_ieee_total_order(void **state)
{
	const double v[] = { -NAN, -INFINITY, -1e300, -1, -0.0, 0.0, 1e-300,
	    1, 1e300, INFINITY, NAN };
	size_t i, j, n = sizeof v / sizeof v[0];

	(void)state;
	for (i = 0; i < n; i++)
		for (j = 0; j < n; j++) {
			int want = (i > j) - (i < j);

			if (sgi_total_cmp(v[i], v[j]) != want)
				fail_msg("cmp(%g, %g) = %d, want %d", v[i],
				    v[j], sgi_total_cmp(v[i], v[j]), want);
		}
	assert_int_equal(sgi_total_cmp(2.5, 2.5), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_free_slot_means_no_queue_ttft_1005),
		cmocka_unit_test(test_full_or_unknown_concurrency_queues_10000),
		cmocka_unit_test(test_priority_map_scale_and_ignore_flags),
		cmocka_unit_test(test_priority_clamp_uses_largest_key_at_or_below),
		cmocka_unit_test(test_queue_by_tps_rule),
		cmocka_unit_test(test_invalid_tps_values),
		cmocka_unit_test(test_proc),
		cmocka_unit_test(test_prefill_scales_with_tokens),
		cmocka_unit_test(test_capacity_with_max_queued),
		cmocka_unit_test(test_queue_slo_interpolates_floor_to_ceil),
		cmocka_unit_test(test_comparators),
		cmocka_unit_test(test_total_cmp_is_ieee_total_order),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
