/*
 * sg_rcache.c — the router's pulsar ranking cache (stargate-lb-config(5):
 * rankings are cached per affinity key, transparently).
 *
 * A pulsar ranking depends on exactly three things: the hash prefix (0x01,
 * the definition's seed, routing key, model and cache-affinity key, as
 * bytes), the ordered cluster ids (the snapshot's ids version) and each
 * candidate's weight under the definition's weight mode (its exact bits:
 * validity and value).  Exclusions, KV feasibility and load are applied by
 * the caller when it walks the ranking, so they are not part of the key.
 *
 * Weights.  The cache keeps WSLOTS weight states: (ids version, weight
 * mode, n, the n weights' bits) and a generation unique within the cache.
 * Every lookup compares the snapshot's n weights with a state for the same
 * ids and mode (n loads, no hashing); when none matches, the least recently
 * used state is rebound with a new generation.  An entry is valid only
 * under the generation it was computed for, so a weight change invalidates
 * the rankings of that snapshot in O(n), and two snapshots that alternate
 * (double buffering, or a copy whose weights differ) keep a state each.
 *
 * Entries.  Up to MAX_ENTRIES in WAYS-way sets indexed by XXH3 of the prefix
 * bytes (a set's tags share one cache line).  An entry is keyed by its
 * prefix bytes, compared exactly (a hash collision can cost a miss, never a
 * wrong ranking), and by the weight generation it was computed under, so
 * alternating snapshots keep an entry each; it holds the ranking as uint16
 * candidate indices and its inverse (each candidate's rank + 1, 0 when
 * unranked: sgi_rcache_pos), so that a caller can find one candidate's
 * rank, or copy only the ranks it reads, without a pass over the
 * ranking.  Entries whose generation no longer belongs to a
 * weight state can never hit again and are replaced first, then the least
 * recently used.  The entry count shrinks with the candidate count so that
 * rankings and their inverses never take more than RANK_BYTES; prefixes longer than PFX_MAX
 * bytes (long keys) are never cached.  Memory is allocated when the
 * candidate count first needs it and kept; a larger snapshot reallocates
 * and starts empty.
 *
 * Admission.  A miss stores its ranking only when the key was seen on a
 * recent miss (a probation table of PROBATION key hashes in WAYS-way sets,
 * first in first out) or is cached under other weights (a hot key after a
 * weight change): a stream of one-off keys costs one table write per
 * decision and never evicts a hot key.
 *
 * Nothing here runs per decision except lookup (and store after a miss); no
 * allocation except when the cache grows.
 */
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "sg_internal.h"

#define WAYS		8
#define MAX_ENTRIES	4096
#define PROBATION	4096
#define PFX_MAX		320
#define RANK_BYTES	((size_t)8 << 20)
#define WSLOTS		4
#define MAX_N		65535		/* uint16 indices */

_Static_assert(SG_MAX_CANDIDATES <= MAX_N, "indices must fit uint16_t");

struct wstate {
	bool		 used;
	uint64_t	 ids;		/* snapshot ids version */
	int		 mode;		/* SG_WEIGHT_* */
	size_t		 n;
	uint64_t	 gen;
	uint64_t	 last;		/* LRU stamp */
	uint64_t	*w;		/* n weight bit patterns */
};

struct entry {
	uint64_t	 gen;		/* 0: empty */
	uint64_t	 last;		/* LRU stamp */
	uint32_t	 n;
	uint32_t	 nr;		/* ranked candidates */
	uint32_t	 pfx_len;
};

struct sgi_rcache {
	size_t		 ncap;		/* a ranking's candidates; 0: none */
	size_t		 nent;		/* entries, a multiple of WAYS */
	size_t		 nsets;		/* power of two */
	uint64_t	*tag;		/* per entry: XXH3 of its prefix */
	struct entry	*ent;
	unsigned char	*pfx;		/* nent * PFX_MAX */
	uint16_t	*rank;		/* nent * ncap */
	uint16_t	*pos;		/* nent * ncap: rank + 1 per candidate */
	uint64_t	*prob;		/* PROBATION key hashes */
	unsigned char	*prob_next;	/* per probation set: next way */
	struct wstate	 ws[WSLOTS];
	uint64_t	 gen_next;
	uint64_t	 clock;
	struct sgi_rcache_stats st;
};

sgi_rcache *
sgi_rcache_new(void)
{
	sgi_rcache *rc = calloc(1, sizeof(*rc));

	if (rc != NULL)
		rc->gen_next = 1;
	return rc;
}

static void
release(sgi_rcache *rc)
{
	size_t i;

	free(rc->tag);
	free(rc->ent);
	free(rc->pfx);
	free(rc->rank);
	free(rc->pos);
	free(rc->prob);
	free(rc->prob_next);
	for (i = 0; i < WSLOTS; i++) {
		free(rc->ws[i].w);
		memset(&rc->ws[i], 0, sizeof(rc->ws[i]));
	}
	rc->tag = NULL;
	rc->ent = NULL;
	rc->pfx = NULL;
	rc->rank = NULL;
	rc->pos = NULL;
	rc->prob = NULL;
	rc->prob_next = NULL;
	rc->ncap = rc->nent = rc->nsets = 0;
}

void
sgi_rcache_free(sgi_rcache *rc)
{
	if (rc == NULL)
		return;
	release(rc);
	free(rc);
}

/*
 * Room for rankings of n candidates.  Everything is reallocated and starts
 * empty; on failure the cache holds nothing (and is retried next time).
 */
static int
grow(sgi_rcache *rc, size_t n)
{
	size_t ncap = 64, nent = MAX_ENTRIES, i;

	while (ncap < n)
		ncap *= 2;
	while (nent > WAYS && 2 * nent * ncap * sizeof(uint16_t) > RANK_BYTES)
		nent /= 2;
	release(rc);
	rc->tag = calloc(nent, sizeof(*rc->tag));
	rc->ent = calloc(nent, sizeof(*rc->ent));
	rc->pfx = malloc(nent * PFX_MAX);
	rc->rank = malloc(nent * ncap * sizeof(uint16_t));
	rc->pos = malloc(nent * ncap * sizeof(uint16_t));
	rc->prob = calloc(PROBATION, sizeof(*rc->prob));
	rc->prob_next = calloc(PROBATION / WAYS, 1);
	for (i = 0; i < WSLOTS; i++)
		if ((rc->ws[i].w = malloc(ncap * sizeof(uint64_t))) == NULL)
			break;
	if (rc->tag == NULL || rc->ent == NULL || rc->pfx == NULL ||
	    rc->rank == NULL || rc->pos == NULL || rc->prob == NULL || rc->prob_next == NULL ||
	    i < WSLOTS) {
		release(rc);
		return SG_ENOMEM;
	}
	rc->ncap = ncap;
	rc->nent = nent;
	rc->nsets = nent / WAYS;
	return 0;
}

static uint64_t
weight_bits(const sg_cluster *c, int mode)
{
	uint64_t b;

	if (mode == SG_WEIGHT_LAST_MEAN_INPUT_TPS)
		memcpy(&b, &c->last_mean_input_tps, sizeof(b));
	else
		memcpy(&b, &c->max_input_tps, sizeof(b));
	return b;
}

/* True if the state holds exactly these weights. */
static bool
same_weights(const struct wstate *s, const sg_cluster *c, size_t n, int mode)
{
	size_t i;
	uint64_t diff = 0;

	/* branch-free accumulation: the loads are independent */
	for (i = 0; i < n; i++)
		diff |= s->w[i] ^ weight_bits(&c[i], mode);
	return diff == 0;
}

/* The generation of the snapshot's current weights under mode. */
static uint64_t
weights_gen(sgi_rcache *rc, const sg_snapshot *snap, size_t n, int mode)
{
	const sg_cluster *c = sgi_snapshot_clusters(snap);
	uint64_t ids = sg_snapshot_ids_version(snap);
	struct wstate *match[WSLOTS], *s, *victim = NULL;
	size_t i, j, nm = 0;

	/* the states for these ids, most recently used first */
	for (i = 0; i < WSLOTS; i++) {
		s = &rc->ws[i];
		if (!s->used || s->ids != ids || s->mode != mode || s->n != n)
			continue;
		for (j = nm++; j > 0 && match[j - 1]->last < s->last; j--)
			match[j] = match[j - 1];
		match[j] = s;
	}
	for (i = 0; i < nm; i++)
		if (same_weights(match[i], c, n, mode)) {
			match[i]->last = ++rc->clock;
			return match[i]->gen;
		}
	/* new weights: rebind an unused or the least recently used state */
	for (i = 0; i < WSLOTS; i++) {
		s = &rc->ws[i];
		if (!s->used) {
			victim = s;
			break;
		}
		if (victim == NULL || s->last < victim->last)
			victim = s;
	}
	victim->used = true;
	victim->ids = ids;
	victim->mode = mode;
	victim->n = n;
	for (i = 0; i < n; i++)
		victim->w[i] = weight_bits(&c[i], mode);
	victim->gen = rc->gen_next++;
	victim->last = ++rc->clock;
	rc->st.weight_changes++;
	return victim->gen;
}

/* An entry computed under a weight state that still exists. */
static bool
live(const sgi_rcache *rc, uint64_t gen)
{
	size_t i;

	for (i = 0; i < WSLOTS; i++)
		if (rc->ws[i].used && rc->ws[i].gen == gen)
			return true;
	return false;
}

int
sgi_rcache_lookup(sgi_rcache *rc, const sg_algdef *d, const sg_snapshot *snap,
    const sgi_hashbuf *prefix, sgi_rclookup *lk, const uint16_t **rank,
    size_t *nr)
{
	size_t n = sgi_snapshot_count(snap), set, i, len = prefix->len, slot;
	size_t victim = SIZE_MAX, dead = SIZE_MAX;
	struct entry *e;
	uint64_t h, gen, *p;
	bool known = false;

	lk->state = SGI_RC_BYPASS;
	if (rc == NULL || n == 0 || n > MAX_N || len > PFX_MAX)
		return lk->state;
	if (n > rc->ncap && grow(rc, n) != 0)
		return lk->state;
	gen = weights_gen(rc, snap, n, d->rendezvous_weight);
	h = XXH3_64bits(prefix->b, len);
	set = (size_t)h & (rc->nsets - 1);
	for (i = 0; i < WAYS; i++) {
		slot = set * WAYS + i;
		e = &rc->ent[slot];
		if (e->gen == 0) {
			dead = slot;	/* empty */
			continue;
		}
		if (rc->tag[slot] == h && e->pfx_len == len &&
		    memcmp(rc->pfx + slot * PFX_MAX, prefix->b, len) == 0) {
			if (e->gen == gen && e->n == n) {
				e->last = ++rc->clock;
				*rank = rc->rank + slot * rc->ncap;
				*nr = e->nr;
				rc->st.hits++;
				lk->state = SGI_RC_HIT;
				return lk->state;
			}
			known = true;	/* cached under other weights or ids */
		}
		if (dead == SIZE_MAX && !live(rc, e->gen))
			dead = slot;	/* its weights are gone: never hit */
		else if (victim == SIZE_MAX ||
		    e->last < rc->ent[victim].last)
			victim = slot;
	}
	rc->st.misses++;
	lk->h = h;
	lk->gen = gen;
	lk->n = n;
	lk->prefix = prefix;
	lk->slot = dead != SIZE_MAX ? dead : victim;
	if (known) {
		/* a hot key under new weights or ids: store at once */
		lk->state = SGI_RC_STORE;
		return lk->state;
	}
	/* probation: WAYS-way sets, replaced first in first out */
	set = (size_t)(h >> 32) & (PROBATION / WAYS - 1);
	p = &rc->prob[set * WAYS];
	for (i = 0; i < WAYS && p[i] != h; i++)
		;
	if (i == WAYS) {
		/* first sight: remember the key only */
		p[rc->prob_next[set]] = h;
		rc->prob_next[set] = (unsigned char)((rc->prob_next[set] + 1) %
		    WAYS);
		lk->state = SGI_RC_MISS;
		return lk->state;
	}
	p[i] = 0;
	lk->state = SGI_RC_STORE;
	return lk->state;
}

const uint16_t *
sgi_rcache_store(sgi_rcache *rc, const sgi_rclookup *lk, const size_t *order,
    size_t nr)
{
	struct entry *e = &rc->ent[lk->slot];
	uint16_t *r = rc->rank + lk->slot * rc->ncap;
	uint16_t *pos = rc->pos + lk->slot * rc->ncap;
	size_t i;

	memset(pos, 0, lk->n * sizeof(*pos));
	for (i = 0; i < nr; i++) {
		r[i] = (uint16_t)order[i];
		pos[order[i]] = (uint16_t)(i + 1);
	}
	memcpy(rc->pfx + lk->slot * PFX_MAX, lk->prefix->b, lk->prefix->len);
	rc->tag[lk->slot] = lk->h;
	e->gen = lk->gen;
	e->n = (uint32_t)lk->n;
	e->nr = (uint32_t)nr;
	e->pfx_len = (uint32_t)lk->prefix->len;
	e->last = ++rc->clock;
	rc->st.stores++;
	return r;
}

const uint16_t *
sgi_rcache_pos(const sgi_rcache *rc, const uint16_t *rank)
{
	return rc->pos + (rank - rc->rank);
}

void
sgi_rcache_stats(const sgi_rcache *rc, struct sgi_rcache_stats *st)
{
	size_t i;

	memset(st, 0, sizeof(*st));
	if (rc == NULL)
		return;
	*st = rc->st;
	st->capacity = rc->nent;
	for (i = 0; i < rc->nent; i++)
		if (rc->ent[i].gen != 0)
			st->entries++;
	st->bytes = sizeof(*rc) + rc->nent * (sizeof(uint64_t) +
	    sizeof(struct entry) + PFX_MAX +
	    2 * rc->ncap * sizeof(uint16_t)) + (rc->prob != NULL ?
	    PROBATION * sizeof(uint64_t) + PROBATION / WAYS : 0) +
	    (rc->ncap > 0 ? WSLOTS * rc->ncap * sizeof(uint64_t) : 0);
}
