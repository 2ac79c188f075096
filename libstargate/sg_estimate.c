/*
 * sg_estimate.c — the derived quantities every load-aware algorithm reads
 * (stargate-lb-config(5), NEW semantics): free engine slot, queue delay,
 * prefill, the two TTFT flavours, queue admission capacity, the queue-SLO bound
 * (stargate-lb-config(5)) and the power-of-n comparator scores
 * (stargate-lb-config(5)).
 *
 * Everything here is a pure function of one cluster and the request: no
 * state, no allocation, no failure.  Infinities are values, not errors:
 * "work queued on a cluster whose throughput is unknown" is +inf, and the
 * callers compare with sgi_total_cmp() so that +inf and NaN sort
 * deterministically.
 *
 * The per-candidate estimates (tps, proc, free slot, queue delay, prefill,
 * TTFT, comparator TTFT, capacity, total-order compare) are static inline
 * in sg_internal.h: the decision loops call them per candidate, and across
 * translation units they would not be inlined.  This file keeps the rest.
 */
#include <math.h>
#include <string.h>

#include "sg_internal.h"

bool
sgi_queue_slo(const sg_algdef *d, const sg_request *r, double elapsed_ms,
    double *max_queue_ms)
{
	double lo, hi, frac = 1;

	if (!d->has_queue_floor || !d->has_queue_ceil)
		return false;
	if (r->has_slo && r->request_slo_ms != 0) {
		frac = elapsed_ms / (double)r->request_slo_ms;
		if (!(frac > 0))	/* also NaN */
			frac = 0;
		else if (frac > 1)
			frac = 1;
	}
	lo = (double)d->max_queue_time_floor_ms;
	hi = (double)d->max_queue_time_ceil_ms;
	*max_queue_ms = lo + (hi - lo) * frac;
	return true;
}

/* ms (>= 0, maybe fractional or infinite) to an integer, rounding up. */
static uint64_t
ceil_ms(double v)
{
	if (!(v > 0))
		return 0;
	v = ceil(v);
	if (v >= 18446744073709551616.0)	/* 2^64 */
		return UINT64_MAX;
	return (uint64_t)v;
}

bool
sgi_expected_queue_ms(const sg_cluster *c, uint32_t priority, uint64_t *ms)
{
	double tps;

	if (sgi_free_slot(c)) {
		*ms = 0;
		return true;
	}
	if (c->nprio > 0) {
		*ms = ceil_ms(sgi_queue_ms(c, priority));	/* rule 2 */
		return true;
	}
	if (c->queued_input_tokens == 0) {
		*ms = 0;
		return true;
	}
	tps = sgi_tps(c);
	if (tps == 0)
		return false;
	*ms = ceil_ms((double)c->queued_input_tokens / tps * 1000.0);
	return true;
}

double
sgi_score(int comparator, const sg_cluster *c, uint64_t tokens,
    uint32_t priority)
{
	uint64_t work, max;

	switch (comparator) {
	case SG_CMP_TTFT:
		return sgi_comparator_ms(c, tokens, priority, 1.0);
	case SG_CMP_INPUT_WORK:
		work = c->queued_input_tokens + tokens;
		if (work < tokens)	/* saturate */
			work = UINT64_MAX;
		return sgi_proc((double)work, sgi_tps(c));
	case SG_CMP_UTILIZATION:
		max = c->max_engine_concurrency > 0 ?
		    c->max_engine_concurrency : 1;
		return (double)c->running / (double)max;
	case SG_CMP_NUM_QUEUED:
		return (double)c->queued;
	case SG_CMP_QUEUE_TIME:
	default:	/* SG_CMP_NONE: p-w-a-w compares queue_ms first */
		return sgi_queue_ms(c, priority);
	}
}
