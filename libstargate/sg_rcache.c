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
 * Entries.  WAYS-way sets indexed by XXH3 of the prefix bytes (a set's
 * tags share one cache line, its LRU stamps and generations two more).  An
 * entry is keyed by its prefix bytes, compared exactly (a hash collision
 * can cost a miss, never a wrong ranking), and by the weight generation it
 * was computed under, so alternating snapshots keep an entry each.  Its
 * record is one block: the ranking as uint16 candidate indices, its inverse
 * (each candidate's rank + 1, 0 when unranked: sgi_rcache_pos), so that a
 * caller can find one candidate's rank, or copy only the ranks it reads,
 * without a pass over the ranking, and the prefix bytes.  Records are
 * sized for the candidate count (rounded up to 8) and the longest prefix
 * met (rounded up to 32, up to PFX_MAX; longer prefixes, long keys, are
 * never cached).  Entries whose generation no longer belongs to a weight
 * state can never hit again and are replaced first, then the least
 * recently used.
 *
 * Size.  The cache starts with MIN_ENTRIES entries and doubles under
 * pressure (more than a sixteenth of its entries since it last grew: a
 * working set larger than the cache), as long as the whole cache stays
 * within its byte budget (SGI_RCACHE_BUDGET_DEFAULT, 64 MiB, or
 * sgi_rcache_set_budget): with a fleet's dozen candidates per model an
 * entry takes about 240 bytes with its share of the probation table, so
 * the default holds the rankings of 262 144 sessions (sg-sim's fleet
 * scenario, about 30 000 sessions alive at once but think times of up to
 * ten minutes, reaches it).  Pressure is a key admitted by the probation rule that
 * evicts a live entry, or a key stored at first sight (below) that comes
 * back after its entry was evicted unused.  A working set that fits stops
 * the growth; a stream of one-off keys never starts it.  Growing keeps
 * every live entry, and so does a record that has to widen (more
 * candidates, a longer prefix) while the budget holds them; otherwise the
 * cache is rebuilt smaller and keeps what fits.  Memory is allocated when
 * the first lookup needs it.
 *
 * Admission.  A miss stores its ranking only when the key was seen on a
 * recent miss (a probation table of key hashes, two per entry and at least
 * PROB_MIN, in WAYS-way sets, first in first out) or is cached under other
 * weights (a hot key after a weight change): a stream of one-off keys costs
 * one table write per decision and never evicts a hot key.  The table grows
 * with the cache, so a key returns within about twice the cache's entries
 * of misses to be admitted (a session's next turn after its think time).
 * One exception: where a miss ranks every candidate anyway
 * (pulsar-wait-and-widen over fewer than SGI_PULSAR_TOP_MIN_N candidates),
 * storing costs a copy, so a first sight is stored at once, into a free or
 * dead way or over the least recently used entry never hit since it was
 * stored; an entry that has been hit is never replaced by a first sight,
 * so one-off keys still evict only each other.  The entry it replaces goes
 * to the probation table, so that its return counts as pressure.
 *
 * Class prefixes.  Every decision builds its hash prefix, and all but the
 * cache-affinity key is the request's class (seed, routing key, model):
 * sgi_rcache_prefix() keeps up to PM_N class parts (a hashed memo of
 * fixed size, about 270 KiB, apart from the budget), each followed by the
 * key's tag header, looked for first as the class met last (by its
 * pointers, then by a hint table of pointers, then by its bytes alone: a
 * tenant's requests parsed into their own buffers find it without
 * hashing) and then by a hash of the class, and always checked byte for
 * byte;
 * so a decision copies them and writes the key's length and bytes instead
 * of tagging four strings (the bytes are sgi_pulsar_prefix()'s: the
 * header's form is checked against sgi_hb_tag once, when the memo is
 * made; test_rcache checks the bytes).  sgi_rcache_ring_prefix() is the
 * class part alone, wait-and-widen's ring prefix.  A miss builds the
 * class with sgi_ring_prefix() and copies it in: no allocation.
 *
 * Nothing here runs per decision except the prefix, lookup (and store
 * after a miss); no allocation except when the cache grows (and the
 * memo's one block, at the first prefix).
 */
#include <endian.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "sg_internal.h"

#define WAYS		8
#define MIN_ENTRIES	4096
#define PROB_PER_ENTRY	2		/* probation fingerprints per entry */
#define PROB_MIN	32768		/* and at least these */
#define PFX_MAX		320
#define PFX_ROUND	32
#define N_ROUND		8
#define WSLOTS		4
#define MAX_N		65535		/* uint16 indices */

_Static_assert(SG_MAX_CANDIDATES <= MAX_N, "indices must fit uint16_t");
_Static_assert(PFX_MAX <= UINT16_MAX, "prefix lengths fit uint16_t");

struct wstate {
	bool		 used;
	uint64_t	 ids;		/* snapshot ids version */
	int		 mode;		/* SG_WEIGHT_* */
	size_t		 n;
	uint64_t	 gen;
	uint64_t	 last;		/* LRU stamp */
	uint64_t	*w;		/* n weight bit patterns */
};

/* Per entry, apart from its record: what a victim search reads. */
struct meta {
	uint64_t	 gen;		/* 0: empty */
	uint64_t	 last;		/* LRU stamp | HIT: hit since stored */
};

#define HIT		((uint64_t)1 << 63)

/* An entry's LRU stamp without its HIT flag. */
static uint64_t
stamp(const struct meta *m)
{
	return m->last & ~HIT;
}

/*
 * An entry's record: this header, then rank[ncap], pos[ncap] (uint16) and
 * the prefix bytes (pfxcap).
 */
struct rec {
	uint16_t	 n;
	uint16_t	 nr;		/* ranked candidates */
	uint16_t	 pfx_len;
	uint16_t	 pad;
};

/* The storage of a table (the weight states are counted apart). */
struct geom {
	size_t		 ncap;		/* a record's candidates; 0: none */
	size_t		 pfxcap;	/* a record's prefix bytes */
	size_t		 recsz;		/* bytes per record */
	size_t		 nent;		/* entries, a multiple of WAYS */
	size_t		 nsets;		/* power of two */
	size_t		 psets;		/* probation sets, power of two */
	uint64_t	*tag;		/* per entry: XXH3 of its prefix */
	struct meta	*meta;
	unsigned char	*rec;		/* nent * recsz */
	uint64_t	*prob;		/* psets * WAYS key hashes */
	unsigned char	*prob_next;	/* per probation set: next way */
};

/*
 * The class part of a pulsar prefix (sgi_rcache_prefix): what
 * sgi_ring_prefix() built for one seed, routing key and model, followed by
 * the cache-affinity key's tag header (the template a decision completes
 * with its key's length and bytes).  The class's strings are read back
 * from those bytes (at seed_off, rk_off, model_off, found and checked when
 * the entry is made), so an entry is keyed by its bytes, not by pointers:
 * a caller may reuse its buffers.
 *
 * The memo is PM_SETS sets of PM_WAYS entries, a set chosen by a hash of
 * the class's three strings (their tags in one line per set), replaced
 * first in first out; the cache keeps the entry met last (pm_last), and a
 * direct-mapped table of PM_HINTS entry numbers, indexed by the three
 * pointers a class was last met with, finds an entry without hashing the
 * strings (the bytes are still compared).  One block
 * of sizeof(struct pmtab), about 270 KiB, allocated at the first prefix
 * and kept until sgi_rcache_free (apart from the ranking budget: it never
 * grows).  Classes longer than an entry holds are built every time.
 */
#define PM_WAYS		8
#define PM_SETS		128	/* sets: PM_N classes remembered */
#define PM_N		(PM_WAYS * PM_SETS)
#define PM_HINTS	2048	/* pointer hints, a power of two */
#define PM_ENTRY	256	/* bytes per entry */
#define PM_HDR		40	/* its fields before b[] */
/* an entry's class bytes and key header */
#define PM_OUT		(PM_ENTRY - PM_HDR)
#define KEY_TAG		"cache_affinity_key"
#define KEY_HDR_MAX	64

struct pmemo {
	/* the pointers it was last met with: a hint where to look first */
	const sg_algdef	*dp;
	const char	*rkp, *mp;
	uint16_t	 len;		/* class bytes in b; 0: empty */
	/* ... then the key's tag header for a key of length 0 (its
	 * last 8 bytes): their end, 0: none */
	uint16_t	 tlen;
	uint16_t	 seed_len, rk_len, model_len;
	uint16_t	 seed_off, rk_off, model_off; /* their bytes in b */
	unsigned char	 b[PM_OUT];
};

_Static_assert(sizeof(struct pmemo) == PM_ENTRY, "a memo entry's size");
_Static_assert(PM_N < UINT16_MAX, "entry numbers fit uint16_t");

struct pmtab {
	uint64_t	 tag[PM_N];	/* per entry: its class's hash */
	struct pmemo	 e[PM_N];
	uint16_t	 hint[PM_HINTS];	/* entry + 1; 0: none */
	unsigned char	 next[PM_SETS];	/* way replaced next */
	size_t		 khdr_len;	/* key's tag header; 0: none */
	unsigned char	 khdr[KEY_HDR_MAX];
};

struct sgi_rcache {
	struct geom	 g;		/* the table (replaced whole) */
	struct pmtab	*pm;		/* class memo; NULL: not yet */
	struct pmemo	*pm_last;	/* its entry found or made last */
	bool		 pm_off;	/* its allocation failed: none */
	size_t		 budget;	/* bytes */
	size_t		 pressure;	/* live entries evicted since growth */
	bool		 grow;		/* double at the next lookup */
	struct wstate	 ws[WSLOTS];
	uint64_t	 gen_next;
	uint64_t	 clock;
	struct sgi_rcache_stats st;
};

sgi_rcache *
sgi_rcache_new(void)
{
	sgi_rcache *rc = calloc(1, sizeof(*rc));

	if (rc != NULL) {
		rc->gen_next = 1;
		rc->budget = SGI_RCACHE_BUDGET_DEFAULT;
	}
	return rc;
}

static size_t
round_up(size_t v, size_t to)
{
	return (v + to - 1) / to * to;
}

static size_t
rec_bytes(size_t ncap, size_t pfxcap)
{
	return round_up(sizeof(struct rec) + 4 * ncap + pfxcap, 8);
}

/* Probation sets for a cache of nent entries (a power of two). */
static size_t
prob_sets(size_t nent)
{
	size_t n = nent * PROB_PER_ENTRY;

	return (n > PROB_MIN ? n : PROB_MIN) / WAYS;
}

/* Bytes of a cache of nent entries of recsz, with ncap weight slots. */
static size_t
table_bytes(size_t nent, size_t recsz, size_t ncap)
{
	return sizeof(struct sgi_rcache) + nent * (sizeof(uint64_t) +
	    sizeof(struct meta) + recsz) + prob_sets(nent) * (WAYS *
	    sizeof(uint64_t) + 1) + WSLOTS * ncap * sizeof(uint64_t);
}

static void
geom_free(struct geom *g)
{
	free(g->tag);
	free(g->meta);
	free(g->rec);
	free(g->prob);
	free(g->prob_next);
	memset(g, 0, sizeof(*g));
}

static struct rec *
rec_at(const unsigned char *base, size_t recsz, size_t slot)
{
	return (struct rec *)(void *)(base + slot * recsz);
}

static uint16_t *
rec_rank(struct rec *r)
{
	return (uint16_t *)(void *)(r + 1);
}

static unsigned char *
rec_pfx(struct rec *r, size_t ncap)
{
	return (unsigned char *)(rec_rank(r) + 2 * ncap);
}

/* Allocate an empty table: SG_ENOMEM (nothing held) or 0. */
static int
geom_alloc(struct geom *g, size_t nent, size_t ncap, size_t pfxcap)
{
	memset(g, 0, sizeof(*g));
	g->ncap = ncap;
	g->pfxcap = pfxcap;
	g->recsz = rec_bytes(ncap, pfxcap);
	g->nent = nent;
	g->nsets = nent / WAYS;
	g->psets = prob_sets(nent);
	g->tag = calloc(nent, sizeof(*g->tag));
	g->meta = calloc(nent, sizeof(*g->meta));
	g->rec = malloc(nent * g->recsz);
	g->prob = calloc(g->psets * WAYS, sizeof(*g->prob));
	g->prob_next = calloc(g->psets, 1);
	if (g->tag == NULL || g->meta == NULL || g->rec == NULL ||
	    g->prob == NULL || g->prob_next == NULL) {
		geom_free(g);
		return SG_ENOMEM;
	}
	return 0;
}

static void
release(sgi_rcache *rc)
{
	size_t i;

	geom_free(&rc->g);
	for (i = 0; i < WSLOTS; i++) {
		free(rc->ws[i].w);
		memset(&rc->ws[i], 0, sizeof(rc->ws[i]));
	}
	rc->pressure = 0;
	rc->grow = false;
}

void
sgi_rcache_free(sgi_rcache *rc)
{
	if (rc == NULL)
		return;
	release(rc);
	free(rc->pm);
	free(rc);
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

/* Remember key hash h in probation table g, first in first out. */
static void
prob_put(struct geom *g, uint64_t h)
{
	size_t set = (size_t)(h >> 32) & (g->psets - 1);

	g->prob[set * WAYS + g->prob_next[set]] = h;
	g->prob_next[set] = (unsigned char)((g->prob_next[set] + 1) % WAYS);
}

/*
 * Copy the live entries of the current table (and its probation
 * fingerprints) into the empty table g: an entry goes to a free way of its
 * set, or over a less recently used one.  Entries that do not fit the new
 * records (more candidates, a longer prefix) are dropped.
 */
static void
move_entries(const sgi_rcache *rc, struct geom *g)
{
	size_t i, k, set, slot, v;
	struct rec *from, *to;

	for (i = 0; i < rc->g.nent; i++) {
		if (rc->g.meta[i].gen == 0 || !live(rc, rc->g.meta[i].gen))
			continue;
		from = rec_at(rc->g.rec, rc->g.recsz, i);
		if (from->n > g->ncap || from->pfx_len > g->pfxcap)
			continue;
		set = (size_t)rc->g.tag[i] & (g->nsets - 1);
		for (v = SIZE_MAX, k = 0; k < WAYS; k++) {
			slot = set * WAYS + k;
			if (g->meta[slot].gen == 0) {
				v = slot;
				break;
			}
			if (v == SIZE_MAX || stamp(&g->meta[slot]) <
			    stamp(&g->meta[v]))
				v = slot;
		}
		if (g->meta[v].gen != 0 && stamp(&g->meta[v]) >
		    stamp(&rc->g.meta[i]))
			continue;
		to = rec_at(g->rec, g->recsz, v);
		*to = *from;
		memcpy(rec_rank(to), rec_rank(from), from->nr *
		    sizeof(uint16_t));
		memcpy(rec_rank(to) + g->ncap, rec_rank(from) + rc->g.ncap,
		    from->n * sizeof(uint16_t));
		memcpy(rec_pfx(to, g->ncap), rec_pfx(from, rc->g.ncap),
		    from->pfx_len);
		g->tag[v] = rc->g.tag[i];
		g->meta[v] = rc->g.meta[i];
	}
	for (i = 0; i < rc->g.psets * WAYS; i++)
		if (rc->g.prob[i] != 0)
			prob_put(g, rc->g.prob[i]);
}

/*
 * Rebuild the table for records of ncap candidates and pfxcap prefix
 * bytes, with nent entries, or fewer to stay within the budget (never
 * fewer than WAYS), keeping the live entries that fit.  Weight states
 * widen to ncap.  On failure the cache holds nothing (and is retried next
 * time).
 */
static int
rebuild(sgi_rcache *rc, size_t nent, size_t ncap, size_t pfxcap)
{
	struct geom g;
	uint64_t *w;
	size_t i, recsz = rec_bytes(ncap, pfxcap);

	while (nent > WAYS && table_bytes(nent, recsz, ncap) > rc->budget)
		nent /= 2;
	if (geom_alloc(&g, nent, ncap, pfxcap) != 0)
		goto fail;
	for (i = 0; i < WSLOTS; i++) {
		if (ncap <= rc->g.ncap && rc->ws[i].w != NULL)
			continue;
		if ((w = malloc(ncap * sizeof(*w))) == NULL) {
			geom_free(&g);
			goto fail;
		}
		if (rc->ws[i].w != NULL)
			memcpy(w, rc->ws[i].w, rc->ws[i].n * sizeof(*w));
		free(rc->ws[i].w);
		rc->ws[i].w = w;
	}
	if (rc->g.nent > 0)
		move_entries(rc, &g);
	geom_free(&rc->g);
	rc->g = g;
	rc->pressure = 0;
	rc->grow = false;
	return 0;
fail:
	release(rc);
	return SG_ENOMEM;
}

/* Room for rankings of n candidates and a prefix of len bytes. */
static int
fit(sgi_rcache *rc, size_t n, size_t len)
{
	size_t ncap = rc->g.ncap, pfxcap = rc->g.pfxcap;

	if (n > ncap)
		ncap = round_up(n, N_ROUND);
	if (len > pfxcap)
		pfxcap = round_up(len, PFX_ROUND);
	if (pfxcap > PFX_MAX)
		pfxcap = PFX_MAX;
	return rebuild(rc, rc->g.nent > 0 ? rc->g.nent : MIN_ENTRIES, ncap,
	    pfxcap);
}

int
sgi_rcache_set_budget(sgi_rcache *rc, size_t bytes)
{
	if (rc == NULL)
		return SG_EINVAL;
	rc->budget = bytes;
	if (rc->g.nent > 0 && table_bytes(rc->g.nent, rc->g.recsz, rc->g.ncap) >
	    bytes)
		return rebuild(rc, rc->g.nent, rc->g.ncap, rc->g.pfxcap);
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

/* Take key hash h out of the probation table: whether it was there. */
static bool
prob_take(sgi_rcache *rc, uint64_t h)
{
	size_t set = (size_t)(h >> 32) & (rc->g.psets - 1), i;
	uint64_t *p = &rc->g.prob[set * WAYS];

	for (i = 0; i < WAYS; i++)
		if (p[i] == h) {
			p[i] = 0;	/* (a hash of 0 is admitted at once) */
			return true;
		}
	return false;
}

/*
 * The probation rule for a key not cached under any weights: true on its
 * second sight (the fingerprint is taken out), false on the first (it is
 * remembered).
 */
static bool
probation(sgi_rcache *rc, uint64_t h)
{
	if (prob_take(rc, h))
		return true;
	prob_put(&rc->g, h);
	return false;
}

/*
 * Whether a miss ranks every candidate anyway: pulsar-wait-and-widen over
 * fewer than SGI_PULSAR_TOP_MIN_N candidates (sgi_pulsar_top() declines).
 */
static bool
eager(const sg_algdef *d, size_t n)
{
	return d->algorithm == SG_ALG_PULSAR_WAW && n < SGI_PULSAR_TOP_MIN_N;
}

/* The cache can double within its budget. */
static bool
can_grow(const sgi_rcache *rc)
{
	return table_bytes(2 * rc->g.nent, rc->g.recsz, rc->g.ncap) <= rc->budget;
}

/*
 * The way of set to replace: empty, else dead, else least recently used;
 * *cold: empty, else dead, else the least recently used of the entries
 * never hit since stored, else SIZE_MAX.
 */
static size_t
victim_of(const sgi_rcache *rc, size_t set, size_t *cold)
{
	size_t i, slot, victim = SIZE_MAX, dead = SIZE_MAX;
	const struct meta *m;

	*cold = SIZE_MAX;
	for (i = 0; i < WAYS; i++) {
		slot = set * WAYS + i;
		m = &rc->g.meta[slot];
		if (m->gen == 0)
			return *cold = slot;
		if (dead == SIZE_MAX && !live(rc, m->gen)) {
			dead = slot;	/* its weights are gone: never hit */
			continue;
		}
		if (victim == SIZE_MAX || stamp(m) < stamp(&rc->g.meta[victim]))
			victim = slot;
		if (!(m->last & HIT) && (*cold == SIZE_MAX ||
		    stamp(m) < stamp(&rc->g.meta[*cold])))
			*cold = slot;
	}
	if (dead != SIZE_MAX)
		return *cold = dead;
	return victim;
}

int
sgi_rcache_lookup(sgi_rcache *rc, const sg_algdef *d, const sg_snapshot *snap,
    const sgi_hashbuf *prefix, sgi_rclookup *lk, const uint16_t **rank,
    size_t *nr)
{
	size_t n = sgi_snapshot_count(snap), set, i, len = prefix->len, slot;
	size_t cold;
	struct meta *m;
	struct rec *e;
	uint64_t h, gen;
	bool known = false;

	lk->state = SGI_RC_BYPASS;
	if (rc == NULL || n == 0 || n > MAX_N || len > PFX_MAX)
		return lk->state;
	if ((n > rc->g.ncap || len > rc->g.pfxcap) && fit(rc, n, len) != 0)
		return lk->state;
	if (rc->grow) {
		if (rebuild(rc, 2 * rc->g.nent, rc->g.ncap, rc->g.pfxcap) != 0)
			return lk->state;
		rc->st.grows++;
	}
	gen = weights_gen(rc, snap, n, d->rendezvous_weight);
	h = XXH3_64bits(prefix->b, len);
	set = (size_t)h & (rc->g.nsets - 1);
	/* the set's tags first (one line), a record only where one matches */
	for (i = 0; i < WAYS; i++) {
		slot = set * WAYS + i;
		if (rc->g.tag[slot] != h || (m = &rc->g.meta[slot])->gen == 0)
			continue;
		e = rec_at(rc->g.rec, rc->g.recsz, slot);
		if (e->pfx_len != len ||
		    memcmp(rec_pfx(e, rc->g.ncap), prefix->b, len) != 0)
			continue;
		if (m->gen == gen && e->n == n) {
			m->last = ++rc->clock | HIT;
			*rank = rec_rank(e);
			*nr = e->nr;
			rc->st.hits++;
			lk->state = SGI_RC_HIT;
			return lk->state;
		}
		known = true;	/* cached under other weights or ids */
	}
	rc->st.misses++;
	lk->h = h;
	lk->gen = gen;
	lk->n = n;
	lk->prefix = prefix;
	lk->slot = victim_of(rc, set, &cold);
	lk->eager = false;
	if (!known && cold != SIZE_MAX && eager(d, n)) {
		/*
		 * Stored at once over no proven entry; a key back from the
		 * probation table (evicted before it was hit) is pressure.
		 */
		lk->slot = cold;
		lk->eager = !prob_take(rc, h);
		lk->state = SGI_RC_STORE;
		return lk->state;
	}
	/* a hot key under new weights or ids stores at once */
	lk->state = known || probation(rc, h) ? SGI_RC_STORE : SGI_RC_MISS;
	return lk->state;
}

const uint16_t *
sgi_rcache_store(sgi_rcache *rc, const sgi_rclookup *lk, const size_t *order,
    size_t nr)
{
	struct meta *m = &rc->g.meta[lk->slot];
	struct rec *e = rec_at(rc->g.rec, rc->g.recsz, lk->slot);
	uint16_t *r = rec_rank(e), *pos = r + rc->g.ncap;
	size_t i;

	if (m->gen != 0 && live(rc, m->gen)) {
		rc->st.evictions++;
		if (lk->eager) {
			/* remembered: back before long, it is pressure */
			prob_put(&rc->g, rc->g.tag[lk->slot]);
		} else if (++rc->pressure > rc->g.nent / 16 && can_grow(rc))
			/* the working set outgrows the cache */
			rc->grow = true;	/* not now: r is returned */
	}
	memset(pos, 0, lk->n * sizeof(*pos));
	for (i = 0; i < nr; i++) {
		r[i] = (uint16_t)order[i];
		pos[order[i]] = (uint16_t)(i + 1);
	}
	memcpy(rec_pfx(e, rc->g.ncap), lk->prefix->b, lk->prefix->len);
	rc->g.tag[lk->slot] = lk->h;
	m->gen = lk->gen;
	m->last = ++rc->clock;
	e->n = (uint16_t)lk->n;
	e->nr = (uint16_t)nr;
	e->pfx_len = (uint16_t)lk->prefix->len;
	rc->st.stores++;
	return r;
}

/* Whether the C string p (NULL: empty) is exactly the n bytes at s. */
static bool
str_is(const char *p, const unsigned char *s, size_t n)
{
	if (p == NULL)
		return n == 0;
	return strncmp(p, (const char *)s, n) == 0 && p[n] == '\0';
}

/* Whether entry m is the class of (d, r), by its bytes. */
static bool
pm_match(const struct pmemo *m, const sg_algdef *d, const sg_request *r)
{
	if (m->len == 0 || m->seed_len != d->seed_len || (d->seed_len > 0 &&
	    memcmp(m->b + m->seed_off, d->seed, d->seed_len) != 0))
		return false;
	return str_is(r->routing_key, m->b + m->rk_off, m->rk_len) &&
	    str_is(r->model, m->b + m->model_off, m->model_len);
}

/* What a lookup learnt, for the entry a miss makes. */
struct pmkey {
	size_t		 hint;		/* the hint slot */
	size_t		 rk_len, model_len;
	uint64_t	 hash;		/* the class's */
};

/* The hint slot of the pointers (d, routing key, model). */
static size_t
pm_hint(const sg_algdef *d, const sg_request *r)
{
	uint64_t v;

	v = (uint64_t)(uintptr_t)d * UINT64_C(0x9E3779B97F4A7C15) ^
	    (uint64_t)(uintptr_t)r->routing_key *
	    UINT64_C(0xC2B2AE3D27D4EB4F) ^
	    (uint64_t)(uintptr_t)r->model * UINT64_C(0x165667B19E3779F9);
	return (size_t)(v >> 40) & (PM_HINTS - 1);
}

/* The class's hash: its seed, routing key and model bytes. */
static uint64_t
pm_hash(const sg_algdef *d, const sg_request *r, const struct pmkey *k)
{
	uint64_t h;

	h = XXH3_64bits(d->seed, d->seed_len);
	h = XXH3_64bits_withSeed(r->routing_key != NULL ? r->routing_key : "",
	    k->rk_len, h);
	return XXH3_64bits_withSeed(r->model != NULL ? r->model : "",
	    k->model_len, h);
}

/* Whether entry m was last met with these pointers (a hint, no more). */
static bool
pm_same_ptrs(const struct pmemo *m, const sg_algdef *d, const sg_request *r)
{
	return m->dp == d && m->rkp == r->routing_key && m->mp == r->model;
}

/*
 * The entry of this class, or NULL (then *k holds its lengths and hash),
 * every candidate checked by its bytes: the one met last if it was met with
 * these pointers (a caller that keeps its strings), the one the pointers'
 * hint names if it was (many tenants), the one met last (a stream of
 * requests parsed into their own buffers), else any in the class's set
 * whose hash matches.
 */
static struct pmemo *
pm_find(struct pmtab *t, struct pmemo *last, const sg_algdef *d,
    const sg_request *r, struct pmkey *k, uint64_t *hashed)
{
	struct pmemo *m;
	size_t e, i, set;

	if (last != NULL && pm_same_ptrs(last, d, r) && pm_match(last, d, r))
		return last;
	k->hint = pm_hint(d, r);
	if ((e = t->hint[k->hint]) != 0 && pm_same_ptrs(m = &t->e[e - 1],
	    d, r) && pm_match(m, d, r))
		return m;
	if (last != NULL && pm_match(last, d, r))
		return last;
	k->rk_len = r->routing_key != NULL ? strlen(r->routing_key) : 0;
	k->model_len = r->model != NULL ? strlen(r->model) : 0;
	k->hash = pm_hash(d, r, k);
	(*hashed)++;
	set = (size_t)k->hash & (PM_SETS - 1);
	for (i = 0; i < PM_WAYS; i++) {
		e = set * PM_WAYS + i;
		m = &t->e[e];
		if (t->tag[e] == k->hash && pm_match(m, d, r)) {
			m->dp = d;
			m->rkp = r->routing_key;
			m->mp = r->model;
			t->hint[k->hint] = (uint16_t)(e + 1);
			return m;
		}
	}
	return NULL;
}

static void
put_le64(unsigned char *p, uint64_t v)
{
	v = htole64(v);
	memcpy(p, &v, sizeof(v));
}

/*
 * The key's tag header for a key of length 0, into t->khdr, when a key's
 * tag is that header with its last 8 bytes the key's length
 * (little-endian) and then the key (checked here with a key of one byte
 * against sgi_hb_tag): t->khdr_len, else 0.  A tag appended to a buffer
 * with room is these bytes after the buffer's (sgi_hb_tag), so one check
 * serves every class; sgi_rcache_prefix keeps to buffers with room.
 */
static void
pm_key_header(struct pmtab *t)
{
	sgi_hashbuf hb;
	unsigned char one[8];
	size_t n;

	t->khdr_len = 0;
	sgi_hb_reset(&hb);
	sgi_hb_tag(&hb, KEY_TAG, "", 0);
	if (hb.len < 8 || hb.len > KEY_HDR_MAX)
		return;
	n = hb.len;
	memcpy(t->khdr, hb.b, n);
	sgi_hb_reset(&hb);
	sgi_hb_tag(&hb, KEY_TAG, "x", 1);
	put_le64(one, 1);
	if (hb.len == n + 1 && memcmp(hb.b, t->khdr, n - 8) == 0 &&
	    memcmp(hb.b + n - 8, one, 8) == 0 && hb.b[n] == 'x')
		t->khdr_len = n;
}

/* The memo, made at its first use; NULL when it could not be. */
static struct pmtab *
pm_table(sgi_rcache *rc)
{
	if (rc->pm == NULL && !rc->pm_off) {
		if ((rc->pm = calloc(1, sizeof(*rc->pm))) == NULL)
			rc->pm_off = true;
		else
			pm_key_header(rc->pm);
	}
	return rc->pm;
}

/* The bytes of tag(name, ...)'s header, a literal name (stargate(7)). */
#define TAG_BYTES(name)	(sizeof(name) - 1 + 1 + 8)

/*
 * Remember the class part just built in h (sgi_ring_prefix: 0x01, then
 * the tags of the seed, routing key and model), when it fits and its
 * strings are where that layout puts them; the entry, or NULL.
 */
static struct pmemo *
pm_put(struct pmtab *t, const sgi_hashbuf *h, const sg_algdef *d,
    const sg_request *r, const struct pmkey *k)
{
	size_t so, ro, mo, set, e;
	struct pmemo *m;

	if (h->len > PM_OUT || k->rk_len > PM_OUT || k->model_len > PM_OUT)
		return NULL;	/* (a streaming buffer's len is SIZE_MAX) */
	so = 1 + TAG_BYTES("seed");
	ro = so + d->seed_len + TAG_BYTES("routing_key");
	mo = ro + k->rk_len + TAG_BYTES("model_id");
	if (mo + k->model_len != h->len || (d->seed_len > 0 &&
	    memcmp(h->b + so, d->seed, d->seed_len) != 0) ||
	    (k->rk_len > 0 && memcmp(h->b + ro, r->routing_key,
	    k->rk_len) != 0) || (k->model_len > 0 && memcmp(h->b + mo,
	    r->model, k->model_len) != 0))
		return NULL;
	set = (size_t)k->hash & (PM_SETS - 1);
	e = set * PM_WAYS + t->next[set];
	t->next[set] = (unsigned char)((t->next[set] + 1) % PM_WAYS);
	m = &t->e[e];
	memcpy(m->b, h->b, h->len);
	m->len = (uint16_t)h->len;
	m->tlen = 0;
	if (t->khdr_len > 0 && t->khdr_len <= PM_OUT - h->len) {
		memcpy(m->b + h->len, t->khdr, t->khdr_len);
		m->tlen = (uint16_t)(h->len + t->khdr_len);
	}
	m->seed_len = (uint16_t)d->seed_len;
	m->rk_len = (uint16_t)k->rk_len;
	m->model_len = (uint16_t)k->model_len;
	m->seed_off = (uint16_t)so;
	m->rk_off = (uint16_t)ro;
	m->model_off = (uint16_t)mo;
	m->dp = d;
	m->rkp = r->routing_key;
	m->mp = r->model;
	t->tag[e] = k->hash;
	t->hint[k->hint] = (uint16_t)(e + 1);
	return m;
}

/*
 * The memo's entry of the class of (d, r); else NULL, with the class part
 * built into h (sgi_ring_prefix) and remembered when it fits.
 */
static const struct pmemo *
pm_get(sgi_rcache *rc, sgi_hashbuf *h, const sg_algdef *d,
    const sg_request *r)
{
	struct pmtab *t;
	struct pmemo *m;
	struct pmkey k;

	if ((t = pm_table(rc)) == NULL) {
		sgi_ring_prefix(h, d, r);
		return NULL;
	}
	if ((m = pm_find(t, rc->pm_last, d, r, &k,
	    &rc->st.prefix_hashed)) != NULL) {
		rc->st.prefix_hits++;
		rc->pm_last = m;
		return m;
	}
	rc->st.prefix_misses++;
	sgi_ring_prefix(h, d, r);
	rc->pm_last = pm_put(t, h, d, r, &k);
	return NULL;
}

void
sgi_rcache_ring_prefix(sgi_rcache *rc, sgi_hashbuf *h, const sg_algdef *d,
    const sg_request *r)
{
	const struct pmemo *m;

	if (rc == NULL) {
		sgi_ring_prefix(h, d, r);
		return;
	}
	if ((m = pm_get(rc, h, d, r)) != NULL) {
		sgi_hb_reset(h);
		memcpy(h->b, m->b, m->len);
		h->len = m->len;
	}
}

void
sgi_rcache_prefix(sgi_rcache *rc, sgi_hashbuf *h, const sg_algdef *d,
    const sg_request *r)
{
	const char *key = r->cache_affinity_key != NULL ?
	    r->cache_affinity_key : "";
	size_t klen = strlen(key);
	const struct pmemo *m;

	if (rc == NULL) {
		sgi_pulsar_prefix(h, d, r);
		return;
	}
	if ((m = pm_get(rc, h, d, r)) != NULL) {
		if (m->tlen > 0 && klen <= sizeof(h->b) - m->tlen) {
			/* the class and the key's tag header, then the key */
			sgi_hb_reset(h);
			memcpy(h->b, m->b, m->tlen);
			put_le64(h->b + m->tlen - 8, klen);
			memcpy(h->b + m->tlen, key, klen);
			h->len = m->tlen + klen;
			return;
		}
		sgi_hb_reset(h);
		memcpy(h->b, m->b, m->len);
		h->len = m->len;
	}
	/* the rest of sgi_pulsar_prefix() */
	sgi_hb_tag(h, KEY_TAG, key, klen);
}

const uint16_t *
sgi_rcache_pos(const sgi_rcache *rc, const uint16_t *rank)
{
	return rank + rc->g.ncap;
}

void
sgi_rcache_stats(const sgi_rcache *rc, struct sgi_rcache_stats *st)
{
	size_t i;

	memset(st, 0, sizeof(*st));
	if (rc == NULL)
		return;
	*st = rc->st;
	st->capacity = rc->g.nent;
	st->budget = rc->budget;
	st->memo_bytes = rc->pm != NULL ? sizeof(*rc->pm) : 0;
	for (i = 0; i < rc->g.nent; i++)
		if (rc->g.meta[i].gen != 0)
			st->entries++;
	st->bytes = rc->g.nent > 0 ? table_bytes(rc->g.nent, rc->g.recsz,
	    rc->g.ncap) : sizeof(*rc);
}
