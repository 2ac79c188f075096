/*
 * oracle.c — the perfect-knowledge scorer (see oracle.h): an estimate of
 * TTFT from exact cluster state, the wait-and-widen capacity rule, and one
 * linear pass that keeps the best candidate under a total order (objective
 * keys, then the lower index), so the choice never depends on anything but
 * the arguments.  A KV-first choice can be read from the clusters that may
 * hold the prompt alone when one of them holding some has capacity.
 */

#include "oracle.h"

/* orc_ttft_ms, inlined into the passes below. */
static inline double
ttft(const orc_cand *c, uint64_t input)
{
	uint64_t cached = c->cached < input ? c->cached : input;
	double work = (double)c->backlog + (double)(input - cached);

	return c->rtt_ms + (c->slot_wait_ms > 0 ? c->slot_wait_ms : 0) +
	    (c->tps > 0 ? work * 1000.0 / c->tps : 0);
}

double
orc_ttft_ms(const orc_cand *c, uint64_t input)
{
	return ttft(c, input);
}

static inline bool
has_capacity(const orc_cand *c, uint64_t max_queued)
{
	uint64_t limit;

	if (c->slots == 0)
		return true;
	limit = c->slots + max_queued;
	if (limit < max_queued)
		return true;			/* saturated: no limit */
	return c->running < limit;
}

bool
orc_has_capacity(const orc_cand *c, uint64_t max_queued)
{
	return has_capacity(c, max_queued);
}

/* Free KV-cache tokens are compared in buckets of this many, so that
 * clusters with about the same room are told apart by their load. */
#define KV_BUCKET	16384

/* The sort keys of one candidate, computed once: the clamped cached
 * prefix, and KV first's next two keys (a free slot, then the free tokens'
 * bucket) packed into one word, the slot in the top bit; the estimate is
 * computed when a comparison first needs it (KV first rarely does), the
 * last keys read from the candidate.  A pass keeps its best candidates by
 * pointer into a few of these, so that a new best costs no copy. */
typedef struct key {
	const orc_cand	*c;
	uint64_t	 cached;
	uint64_t	 room;		/* idle << 63 | kv_free / KV_BUCKET */
	double		 t;
	bool		 have_t;
} key;

static inline double
key_t(key *k, uint64_t input)
{
	if (!k->have_t) {
		k->t = ttft(k->c, input);
		k->have_t = true;
	}
	return k->t;
}

/* Is x better than y under the objective (see oracle.h)?  Buckets that
 * differ order as the free tokens do. */
static inline bool
better(int objective, key *x, key *y, uint64_t input)
{
	double tx, ty;

	if (objective == ORC_KV_FIRST) {
		if (x->cached != y->cached)
			return x->cached > y->cached;
		if (x->room != y->room)
			return x->room > y->room;
	}
	if ((tx = key_t(x, input)) != (ty = key_t(y, input)))
		return tx < ty;
	if (x->cached != y->cached)
		return x->cached > y->cached;
	if (x->c->running != y->c->running)
		return x->c->running < y->c->running;
	return x->c->kv_free > y->c->kv_free;
}

/* The keys of candidate c. */
static inline void
key_of(key *k, const orc_cand *c, uint64_t input)
{
	bool idle = c->slots == 0 || c->running < c->slots;

	k->c = c;
	k->have_t = false;
	k->cached = c->cached < input ? c->cached : input;
	k->room = (uint64_t)idle << 63 | c->kv_free / KV_BUCKET;
}

/* A slot of k[3] that neither a nor b points to. */
static inline key *
spare(key *k, const key *a, const key *b)
{
	if (&k[0] != a && &k[0] != b)
		return &k[0];
	if (&k[1] != a && &k[1] != b)
		return &k[1];
	return &k[2];
}

long
orc_pick(const orc_cand *c, size_t n, uint64_t input, uint64_t max_queued,
    int objective, double *ttft_ms)
{
	key ks[2], *b = NULL, *k = &ks[0];
	long best = -1;
	size_t i;

	for (i = 0; i < n; i++) {
		if (!c[i].eligible || !has_capacity(&c[i], max_queued))
			continue;
		key_of(k, &c[i], input);
		if (b == NULL || better(objective, k, b, input)) {
			best = (long)i;
			b = k;
			k = b == &ks[0] ? &ks[1] : &ks[0];
		}
	}
	if (ttft_ms != NULL)
		*ttft_ms = b != NULL ? key_t(b, input) : 0;
	return best;
}

/* orc_pick_most for one objective (a constant once inlined).  The best
 * with capacity (b) is never better than the best of all (bm), so a
 * candidate that beats bm beats b under KV first (bm's order), and one
 * that does not cannot beat b when b is bm: one comparison then. */
static inline long
pick_most(const orc_cand *c, size_t n, uint64_t input, uint64_t max_queued,
    int objective, long *most)
{
	key ks[3], *b = NULL, *bm = NULL, *k = &ks[0];
	long best = -1;
	size_t i;

	*most = -1;
	for (i = 0; i < n; i++) {
		bool cap, top;

		if (!c[i].eligible)
			continue;
		key_of(k, &c[i], input);
		cap = has_capacity(&c[i], max_queued);
		/* No limit: every eligible cluster has capacity. */
		top = bm == NULL || better(ORC_KV_FIRST, k, bm, input);
		if (cap && (b == NULL || (objective == ORC_KV_FIRST ?
		    top || (b != bm && better(ORC_KV_FIRST, k, b, input)) :
		    better(objective, k, b, input)))) {
			best = (long)i;
			b = k;
		}
		if (top) {
			*most = (long)i;
			bm = k;
		}
		if (b == k || bm == k)
			k = spare(ks, b, bm);
	}
	return best;
}

long
orc_pick_most(const orc_cand *c, size_t n, uint64_t input,
    uint64_t max_queued, int objective, long *most)
{
	if (objective == ORC_KV_FIRST)
		return pick_most(c, n, input, max_queued, ORC_KV_FIRST, most);
	return pick_most(c, n, input, max_queued, objective, most);
}

/* A cluster outside c holds none of the prompt, so it never beats one that
 * holds some under KV first: a best or most holding some stands. */
bool
orc_pick_held(const orc_cand *c, size_t n, uint64_t input,
    uint64_t max_queued, long *best, long *most)
{
	*best = pick_most(c, n, input, max_queued, ORC_KV_FIRST, most);
	return *best >= 0 && c[*best].cached > 0;
}
