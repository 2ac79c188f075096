/*
 * oracle.c — the perfect-knowledge scorer (see oracle.h): an estimate of
 * TTFT from exact cluster state, the wait-and-widen capacity rule, and one
 * linear pass that keeps the best candidate under a total order (objective
 * keys, then the lower index), so the choice never depends on anything but
 * the arguments.
 */
#include <string.h>

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

/* The sort keys of one candidate; the estimate is computed when a
 * comparison first needs it (KV first rarely does). */
typedef struct key {
	const orc_cand	*c;
	double		 t;
	bool		 have_t;
	uint64_t	 cached, running, kv_free;
	bool		 idle;		/* a slot is free */
} key;

static double
key_t(key *k, uint64_t input)
{
	if (!k->have_t) {
		k->t = orc_ttft_ms(k->c, input);
		k->have_t = true;
	}
	return k->t;
}

/* Is x better than y under the objective (see oracle.h)? */
static bool
better(int objective, key *x, key *y, uint64_t input)
{
	double tx, ty;

	if (objective == ORC_KV_FIRST && x->cached != y->cached)
		return x->cached > y->cached;
	if (objective == ORC_KV_FIRST && x->idle != y->idle)
		return x->idle;
	if (objective == ORC_KV_FIRST && x->kv_free / KV_BUCKET !=
	    y->kv_free / KV_BUCKET)
		return x->kv_free > y->kv_free;
	if ((tx = key_t(x, input)) != (ty = key_t(y, input)))
		return tx < ty;
	if (x->cached != y->cached)
		return x->cached > y->cached;
	if (x->running != y->running)
		return x->running < y->running;
	return x->kv_free > y->kv_free;
}

/* The keys of candidate c. */
static void
key_of(key *k, const orc_cand *c, uint64_t input)
{
	k->c = c;
	k->have_t = false;
	k->cached = c->cached < input ? c->cached : input;
	k->running = c->running;
	k->kv_free = c->kv_free;
	k->idle = c->slots == 0 || c->running < c->slots;
}

long
orc_pick(const orc_cand *c, size_t n, uint64_t input, uint64_t max_queued,
    int objective, double *ttft_ms)
{
	key b, k;
	long best = -1;
	size_t i;

	memset(&b, 0, sizeof(b));
	for (i = 0; i < n; i++) {
		if (!c[i].eligible || !orc_has_capacity(&c[i], max_queued))
			continue;
		key_of(&k, &c[i], input);
		if (best < 0 || better(objective, &k, &b, input)) {
			best = (long)i;
			b = k;
		}
	}
	if (ttft_ms != NULL)
		*ttft_ms = best >= 0 ? key_t(&b, input) : 0;
	return best;
}

long
orc_pick_most(const orc_cand *c, size_t n, uint64_t input,
    uint64_t max_queued, int objective, long *most)
{
	key b, bm, k;
	long best = -1;
	size_t i;

	memset(&b, 0, sizeof(b));
	memset(&bm, 0, sizeof(bm));
	*most = -1;
	for (i = 0; i < n; i++) {
		if (!c[i].eligible)
			continue;
		key_of(&k, &c[i], input);
		/* No limit: every eligible cluster has capacity. */
		if (*most < 0 || better(ORC_KV_FIRST, &k, &bm, input)) {
			*most = (long)i;
			bm = k;
		}
		if (!orc_has_capacity(&c[i], max_queued))
			continue;
		if (best < 0 || better(objective, &k, &b, input)) {
			best = (long)i;
			b = k;
		}
	}
	return best;
}
