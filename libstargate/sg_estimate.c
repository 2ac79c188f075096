/*
 * sg_estimate.c — the derived quantities every load-aware algorithm reads
 * (ref §2.4, NEW semantics): free engine slot, queue delay, prefill, the two
 * TTFT flavours, queue admission capacity, the queue-SLO bound (ref §4.5.1)
 * and the power-of-n comparator scores (ref §4.4).
 *
 * Everything here is a pure function of one cluster and the request: no
 * state, no allocation, no failure.  Infinities are values, not errors:
 * "work queued on a cluster whose throughput is unknown" is +inf, and the
 * callers compare with sgi_total_cmp() so that +inf and NaN sort
 * deterministically.
 */
#include <math.h>
#include <string.h>

#include "sg_internal.h"

double
sgi_tps(const sg_cluster *c)
{
	double t = c->last_mean_input_tps;

	return (t > 0 && isfinite(t)) ? t : 0;
}

double
sgi_proc(double work, double rate)
{
	if (work == 0)
		return 0;
	if (!(rate > 0))
		return INFINITY;
	return work / rate;
}

bool
sgi_free_slot(const sg_cluster *c)
{
	return c->max_engine_concurrency > 0 &&
	    c->running < c->max_engine_concurrency;
}

/*
 * Rule 2: the entry at the largest key <= priority.  Keys are strictly
 * ascending (sg_cluster_set_prio keeps them so); found is false when no key
 * is <= priority (the request is more urgent than every published key).
 */
static double
prio_lookup(const sg_cluster *c, uint32_t priority)
{
	double v = 0;
	uint32_t i;

	for (i = 0; i < c->nprio && i < SG_PRIO_MAX; i++) {
		if (c->prio_key[i] > priority)
			break;
		v = c->prio_ms[i];
	}
	return v;
}

double
sgi_queue_ms(const sg_cluster *c, uint32_t priority)
{
	if (sgi_free_slot(c))
		return 0;
	if (c->nprio > 0)
		return prio_lookup(c, priority);
	return sgi_proc((double)c->queued_input_tokens, sgi_tps(c)) * 1000.0;
}

double
sgi_prefill_ms(const sg_cluster *c, uint64_t tokens, double scale)
{
	double tps;

	if (tokens == 0)
		return 0;
	tps = sgi_tps(c);
	if (tps == 0)
		return INFINITY;	/* even when scale == 0 */
	return scale * (double)tokens / tps * 1000.0;
}

double
sgi_ttft_ms(const sg_cluster *c, uint64_t tokens, uint32_t priority,
    double scale, bool ignore_queue, bool ignore_prefill)
{
	double t = c->rtt_ms;

	if (!ignore_queue)
		t += sgi_queue_ms(c, priority);
	if (!ignore_prefill)
		t += sgi_prefill_ms(c, tokens, scale);
	return t;
}

double
sgi_comparator_ms(const sg_cluster *c, uint64_t tokens, uint32_t priority,
    double scale)
{
	return c->rtt_ms + sgi_queue_ms(c, priority) +
	    sgi_prefill_ms(c, tokens, scale);
}

bool
sgi_has_capacity(const sg_cluster *c, uint64_t max_queued)
{
	uint64_t limit;

	if (c->max_engine_concurrency == 0)
		return true;
	limit = c->max_engine_concurrency + max_queued;
	if (limit < max_queued)		/* saturate */
		limit = UINT64_MAX;
	return c->running < limit;
}

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
		*ms = ceil_ms(prio_lookup(c, priority));
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

int
sgi_total_cmp(double a, double b)
{
	int64_t x, y;

	memcpy(&x, &a, sizeof x);
	memcpy(&y, &b, sizeof y);
	/* Negative values: flip the magnitude bits so that the signed integer
	 * order is the IEEE 754 totalOrder (-NaN < -inf < ... < -0 < +0 < ...
	 * < +inf < +NaN). */
	x ^= (int64_t)((uint64_t)(x >> 63) >> 1);
	y ^= (int64_t)((uint64_t)(y >> 63) >> 1);
	return (x > y) - (x < y);
}
