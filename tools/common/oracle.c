/*
 * oracle.c — the perfect-knowledge scorer (see oracle.h): an estimate of
 * TTFT from exact cluster state, the wait-and-widen capacity rule, and one
 * linear pass that keeps the best candidate under a total order (objective
 * keys, then the lower index), so the choice never depends on anything but
 * the arguments.
 */
#include "oracle.h"

double
orc_ttft_ms(const orc_cand *c, uint64_t input)
{
	uint64_t cached = c->cached < input ? c->cached : input;
	double work = (double)c->backlog + (double)(input - cached);

	return c->rtt_ms + (c->slot_wait_ms > 0 ? c->slot_wait_ms : 0) +
	    (c->tps > 0 ? work * 1000.0 / c->tps : 0);
}

bool
orc_has_capacity(const orc_cand *c, uint64_t max_queued)
{
	uint64_t limit;

	if (c->slots == 0)
		return true;
	limit = c->slots + max_queued;
	if (limit < max_queued)
		return true;			/* saturated: no limit */
	return c->running < limit;
}

/* Free KV-cache tokens are compared in buckets of this many, so that
 * clusters with about the same room are told apart by their load. */
#define KV_BUCKET	16384

/* The sort keys of one candidate. */
typedef struct key {
	double		t;
	uint64_t	cached, running, kv_free;
	bool		idle;		/* a slot is free */
} key;

/* Is x better than y under the objective (see oracle.h)? */
static bool
better(int objective, const key *x, const key *y)
{
	if (objective == ORC_KV_FIRST && x->cached != y->cached)
		return x->cached > y->cached;
	if (objective == ORC_KV_FIRST && x->idle != y->idle)
		return x->idle;
	if (objective == ORC_KV_FIRST && x->kv_free / KV_BUCKET !=
	    y->kv_free / KV_BUCKET)
		return x->kv_free > y->kv_free;
	if (x->t != y->t)
		return x->t < y->t;
	if (x->cached != y->cached)
		return x->cached > y->cached;
	if (x->running != y->running)
		return x->running < y->running;
	return x->kv_free > y->kv_free;
}

long
orc_pick(const orc_cand *c, size_t n, uint64_t input, uint64_t max_queued,
    int objective, double *ttft_ms)
{
	key b = { 0, 0, 0, 0, false }, k;
	long best = -1;
	size_t i;

	for (i = 0; i < n; i++) {
		if (!c[i].eligible || !orc_has_capacity(&c[i], max_queued))
			continue;
		k.t = orc_ttft_ms(&c[i], input);
		k.cached = c[i].cached < input ? c[i].cached : input;
		k.running = c[i].running;
		k.kv_free = c[i].kv_free;
		k.idle = c[i].slots == 0 || c[i].running < c[i].slots;
		if (best < 0 || better(objective, &k, &b)) {
			best = (long)i;
			b = k;
		}
	}
	if (ttft_ms != NULL)
		*ttft_ms = best >= 0 ? b.t : 0;
	return best;
}
