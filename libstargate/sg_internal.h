/*
 * sg_internal.h — contracts between the library's decision modules.  Never
 * installed; programs must not include it (unit tests and sg-bench may).
 *
 *   sg_estimate.c   stargate-lb-config(5): free slot, queue delay, prefill,
 *   TTFT, capacity,
 *                   queue-SLO bound, comparator scores
 *   sg_hash.c       XXH3 tag layout, ring entry/key hashes, pulsar hash and
 *                   score, the decision PRNG
 *   sg_simple.c     random, round-robin, power-of-n, pulsar ranking/pulsar
 *   sg_waw.c        core selection (stargate-lb-config(5)), wait-and-widen, the
 *   session
 *                   plan (stargate-lb-config(5)), pulsar-wait-and-widen
 *   sg_router.c     resolution, admission, deadlines, dispatch, explain
 */
#ifndef SG_INTERNAL_H
#define SG_INTERNAL_H

#include <math.h>
#include <string.h>

#include "sg_decision.h"
#include "sg_lbconf.h"
#include "sg_request.h"
#include "sg_snapshot.h"

/* --- snapshots ------------------------------------------------------------ */

/* The snapshot's representation (sg_snapshot.c owns it; read-only here). */
struct sg_snapshot {
	sg_cluster	*c;		/* candidates, in order */
	size_t		 n;
	size_t		 cap;
	uint32_t	*slot;		/* id index: position + 1, 0 = empty */
	size_t		 nslot;		/* power of two, >= 2 * cap, or 0 */
	uint64_t	 nonce;		/* version of the empty id list */
	uint64_t	 ids_ver;	/* version of c[0..n)'s ids */
};

/* The clusters as one array of sg_snapshot_count() entries (hot loops). */
static inline const sg_cluster *
sgi_snapshot_clusters(const sg_snapshot *s)
{
	return s->c;
}

static inline size_t
sgi_snapshot_count(const sg_snapshot *s)
{
	return s->n;
}

/* --- estimates (stargate-lb-config(5)) ------------------------------------ */

/*
 * The per-candidate estimates are static inline: every decision loop calls
 * them per candidate.
 */

/*
 * tps if valid (> 0, finite) else 0.  Two compares (NaN fails both) cost
 * less than isfinite()'s mask, and per-candidate loops call this.
 */
static inline double
sgi_tps(const sg_cluster *c)
{
	double t = c->last_mean_input_tps;

	return (t > 0 && t < INFINITY) ? t : 0;
}

/* proc(work, rate) in seconds: 0 if work == 0, +inf if rate <= 0. */
static inline double
sgi_proc(double work, double rate)
{
	if (work == 0)
		return 0;
	if (!(rate > 0))
		return INFINITY;
	return work / rate;
}

static inline bool
sgi_free_slot(const sg_cluster *c)
{
	return c->max_engine_concurrency > 0 &&
	    c->running < c->max_engine_concurrency;
}

/*
 * Queue delay in ms, rules 1-3 of stargate-lb-config(5) (may be +inf).  Rule 2
 * reads the entry at the largest key <= priority (keys are strictly ascending);
 * 0 when the request is more urgent than every published key.
 */
static inline double
sgi_queue_ms_tps(const sg_cluster *c, uint32_t priority, double tps)
{
	double v = 0;
	uint32_t i;

	if (sgi_free_slot(c))
		return 0;
	if (c->nprio > 0) {
		for (i = 0; i < c->nprio && i < SG_PRIO_MAX; i++) {
			if (c->prio_key[i] > priority)
				break;
			v = c->prio_ms[i];
		}
		return v;
	}
	return sgi_proc((double)c->queued_input_tokens, tps) * 1000.0;
}

/* The same from the cluster alone (tps is read only by rule 3). */
static inline double
sgi_queue_ms(const sg_cluster *c, uint32_t priority)
{
	return sgi_queue_ms_tps(c, priority, sgi_tps(c));
}

/*
 * The prefill rule, for a loop that has tps = sgi_tps(c) in hand and the
 * invariant st = scale * (double)tokens hoisted (sgi_prefill_ms() is it
 * from the cluster): 0 if tokens == 0, +inf if tps is 0 (even when scale
 * is 0), else st / tps * 1000, evaluated as the rule reads.
 */
static inline double
sgi_prefill_ms_tps(double tps, uint64_t tokens, double st)
{
	if (tokens == 0)
		return 0;
	if (tps == 0)
		return INFINITY;	/* even when scale == 0 */
	return st / tps * 1000.0;
}

/* Prefill in ms at scale: 0 if tokens == 0, +inf if tps invalid. */
static inline double
sgi_prefill_ms(const sg_cluster *c, uint64_t tokens, double scale)
{
	if (tokens == 0)
		return 0;
	return sgi_prefill_ms_tps(sgi_tps(c), tokens, scale * (double)tokens);
}

/* Bucketing TTFT (ignore flags apply) and comparator TTFT (they don't). */
static inline double
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

static inline double
sgi_comparator_ms(const sg_cluster *c, uint64_t tokens, uint32_t priority,
    double scale)
{
	return c->rtt_ms + sgi_queue_ms(c, priority) +
	    sgi_prefill_ms(c, tokens, scale);
}

/* has_capacity(max_queued), saturating. */
static inline bool
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

/*
 * IEEE 754 totalOrder as a signed integer key: negative values get their
 * magnitude bits flipped, so -NaN < -inf < ... < -0 < +0 < ... < +inf < +NaN.
 */
static inline int64_t
sgi_total_key(double a)
{
	int64_t x;

	memcpy(&x, &a, sizeof x);
	return x ^ (int64_t)((uint64_t)(x >> 63) >> 1);
}

/*
 * The double whose sgi_total_key() is k, bit for bit (NaN payloads and -0
 * included): the key keeps the sign bit, which alone decides whether the
 * other 63 are flipped, so the same map undoes itself.
 */
static inline double
sgi_total_unkey(int64_t k)
{
	double a;

	k ^= (int64_t)((uint64_t)(k >> 63) >> 1);
	memcpy(&a, &k, sizeof a);
	return a;
}

/* IEEE total-order compare of doubles (-1, 0, 1). */
static inline int
sgi_total_cmp(double a, double b)
{
	int64_t x = sgi_total_key(a), y = sgi_total_key(b);

	return (x > y) - (x < y);
}

/*
 * Queue-SLO bound (stargate-lb-config(5)): returns false when inactive (floor
 * or ceil unset), else sets *max_queue_ms from wall elapsed and the request
 * SLO.
 */
bool	sgi_queue_slo(const sg_algdef *d, const sg_request *r,
	    double elapsed_ms, double *max_queue_ms);
/* Integer ms expected-queue header value; false when omitted. */
bool	sgi_expected_queue_ms(const sg_cluster *c, uint32_t priority,
	    uint64_t *ms);
/* Score under a comparator (request tokens unscaled, lower is better).
 * SG_CMP_NUM_QUEUED returns (double)queued. */
double	sgi_score(int comparator, const sg_cluster *c, uint64_t tokens,
	    uint32_t priority);

/* --- hashing and randomness --------------------------------------------- */

/*
 * Hash state for the tag layout of stargate(7): tag(name, value) = name bytes,
 * 0xFF, len(value) as 8-byte little-endian, value bytes.  Buffers are fixed
 * size; values longer than SG_ID_MAX are truncated by callers' validation
 * (ids, seeds and keys are bounded before they get here).
 */
typedef struct sgi_hashbuf {
	unsigned char	b[4 * SG_ID_MAX + 1024];
	size_t		len;
	/*
	 * sgi_hb_prepare(): XXH3's 16-byte block mixes over the bytes so far,
	 * for the mid-size paths (17..240 bytes in all), so that hashing
	 * prefix ‖ tail mixes only the blocks that reach into the tail.
	 * Appending clears it.
	 */
	bool		prepared;
	size_t		pre_full;	/* 16-byte blocks wholly in b[0..len) */
	uint64_t	pre_front[4];	/* 17..128: block k with secret 32k */
	uint64_t	pre_sum8;	/* 129..240: first-stage block sum */
	uint64_t	pre_mid[15];	/* 129..240: block k >= 8 */
} sgi_hashbuf;

void	 sgi_hb_reset(sgi_hashbuf *h);		/* empty */
void	 sgi_hb_byte(sgi_hashbuf *h, unsigned char c);
void	 sgi_hb_tag(sgi_hashbuf *h, const char *name, const void *val, size_t len);
uint64_t sgi_hb_xxh3(const sgi_hashbuf *h);	/* XXH3_64bits, seed 0 */
/* Precompute for many sgi_hb_xxh3_tail() calls (a no-op when streaming). */
void	 sgi_hb_prepare(sgi_hashbuf *h);
/* XXH3_64bits(h's bytes ‖ tail[0..n)), seed 0; faster once prepared. */
uint64_t sgi_hb_xxh3_tail(const sgi_hashbuf *h, const void *tail, size_t n);

/* prefix = 0x01 ‖ tag("seed") ‖ tag("routing_key") ‖ tag("model_id") */
void	 sgi_ring_prefix(sgi_hashbuf *h, const sg_algdef *d, const sg_request *r);
uint64_t sgi_ring_entry_hash(const sgi_hashbuf *prefix, const char *id,
	    size_t id_len, uint64_t vnode);
uint64_t sgi_ring_key_hash(const sgi_hashbuf *prefix, const char *key,
	    size_t key_len);
/* sgi_ring_entry_hash() of virtual nodes v0..v0+nv-1 of one cluster into
 * out[]; fastest after sgi_hb_prepare() (the shared blocks are mixed once). */
void	 sgi_ring_entry_hashes(const sgi_hashbuf *prefix, const char *id,
	    size_t id_len, uint64_t v0, size_t nv, uint64_t *out);
/* prefix ‖ tag("cache_affinity_key", key or "") for pulsar */
void	 sgi_pulsar_prefix(sgi_hashbuf *h, const sg_algdef *d, const sg_request *r);
uint64_t sgi_pulsar_hash(const sgi_hashbuf *prefix, const char *id,
	    size_t id_len);
/* sgi_pulsar_hash() of clusters c[0..n), bit patterns stored in bits[]
 * (memcpy); fastest after sgi_hb_prepare(). */
void	 sgi_pulsar_hashes(const sgi_hashbuf *prefix, const sg_cluster *c,
	    size_t n, double *bits);
/* score = weight / -ln(u); false when unranked. */
bool	 sgi_pulsar_score(uint64_t h, double weight, double *score);
/* The cluster's pulsar weight under the definition's mode; false if invalid. */
static inline bool
sgi_pulsar_weight(const sg_algdef *d, const sg_cluster *c, double *w)
{
	double v;

	v = d->rendezvous_weight == SG_WEIGHT_LAST_MEAN_INPUT_TPS ?
	    c->last_mean_input_tps : c->max_input_tps;
	if (!(v > 0) || !isfinite(v))
		return false;
	*w = v;
	return true;
}

/* Decision PRNG (xoshiro256** seeded through splitmix64). */
typedef struct sgi_rng {
	uint64_t	s[4];
} sgi_rng;

void	 sgi_rng_seed(sgi_rng *g, uint64_t router_seed, const sg_algdef *d,
	    const sg_request *r);
uint64_t sgi_rng_next(sgi_rng *g);
/* Uniform in [0, n), n > 0, unbiased. */
uint64_t sgi_rng_below(sgi_rng *g, uint64_t n);

/* --- the pulsar ranking cache (sg_rcache.c) ------------------------------- */

typedef struct sgi_rcache sgi_rcache;

enum {
	SGI_RC_BYPASS,		/* not cacheable (long prefix, no memory) */
	SGI_RC_HIT,		/* *rank, *nr hold the ranking */
	SGI_RC_MISS,		/* compute it; do not store */
	SGI_RC_STORE,		/* compute the full ranking and store it */
};

/* A lookup's state, for the store that may follow it. */
typedef struct sgi_rclookup {
	int			 state;
	bool			 eager;		/* a first sight stored */
	uint64_t		 h, gen;
	size_t			 n, slot;
	const sgi_hashbuf	*prefix;
} sgi_rclookup;

/*
 * Pulsar-wait-and-widen ranks every candidate on a cache miss when it has
 * fewer than these (sgi_pulsar_top() declines), so the ranking cache
 * stores such a ranking at its first sight (sg_rcache.c).
 */
#define SGI_PULSAR_TOP_MIN_N	24

struct sgi_rcache_stats {
	uint64_t	hits, misses, stores, weight_changes;
	uint64_t	evictions;	/* live entries replaced by a store */
	uint64_t	grows;		/* doublings under eviction pressure */
	size_t		entries, capacity, bytes, budget;
	/* the class memo (sgi_rcache_prefix): lookups that found the
	 * class, lookups that built it, lookups that hashed the class's
	 * strings (neither the class met last nor the pointers' hint had
	 * it), its bytes (outside the budget) */
	uint64_t	prefix_hits, prefix_misses, prefix_hashed;
	size_t		memo_bytes;
};

/* The ranking cache's default memory budget (bytes), sgi_rcache_set_budget. */
#define SGI_RCACHE_BUDGET_DEFAULT	((size_t)64 << 20)

sgi_rcache	*sgi_rcache_new(void);		/* NULL on ENOMEM */
void		 sgi_rcache_free(sgi_rcache *rc);	/* NULL is a no-op */
/*
 * The most bytes the cache may take (tables and weight states; it grows
 * towards it only while admitted keys keep evicting live entries).  A
 * cache over a smaller budget is rebuilt smaller at once, keeping what
 * fits; it never holds fewer than 8 entries.  SG_EINVAL (rc NULL),
 * SG_ENOMEM (the cache is then empty).
 */
int		 sgi_rcache_set_budget(sgi_rcache *rc, size_t bytes);
/*
 * Look up the ranking of definition d over snap for this pulsar hash prefix
 * (sgi_pulsar_prefix).  On SGI_RC_HIT, rank[0..nr) is the ranking, valid
 * until the next call.  rc may be NULL (SGI_RC_BYPASS).
 */
int		 sgi_rcache_lookup(sgi_rcache *rc, const sg_algdef *d,
		    const sg_snapshot *snap, const sgi_hashbuf *prefix,
		    sgi_rclookup *lk, const uint16_t **rank, size_t *nr);
/* After SGI_RC_STORE: keep order[0..nr); returns the stored copy. */
const uint16_t	*sgi_rcache_store(sgi_rcache *rc, const sgi_rclookup *lk,
		    const size_t *order, size_t nr);
void		 sgi_rcache_stats(const sgi_rcache *rc,
		    struct sgi_rcache_stats *st);
/* The inverse of a ranking lookup or store returned: pos[c] = c's rank + 1
 * (0: unranked), for the candidates c of its snapshot. */
const uint16_t	*sgi_rcache_pos(const sgi_rcache *rc, const uint16_t *rank);
/*
 * sgi_pulsar_prefix(h, d, r), the same bytes, with the part before the
 * cache-affinity key (seed, routing key, model: the request's class)
 * copied from the cache's memo of recent classes when it holds this one.
 * rc may be NULL (then it is sgi_pulsar_prefix).
 */
void		 sgi_rcache_prefix(sgi_rcache *rc, sgi_hashbuf *h,
		    const sg_algdef *d, const sg_request *r);
/* sgi_ring_prefix(h, d, r) (the class part alone) from the same memo;
 * rc may be NULL. */
void		 sgi_rcache_ring_prefix(sgi_rcache *rc, sgi_hashbuf *h,
		    const sg_algdef *d, const sg_request *r);

/* --- algorithms ------------------------------------------------------------ */

/*
 * Per-decision scratch, owned by the router and grown (never shrunk) to the
 * largest snapshot: no allocation in steady state.
 */
/* --- the wait-and-widen ring cache (sg_waw.c) ----------------------------- */

typedef struct sgi_rings sgi_rings;

struct sgi_ring_stats {
	uint64_t	hits;		/* group read from a cached ring */
	uint64_t	misses;		/* no cached ring for the request */
	uint64_t	builds;		/* rings built and cached */
	uint64_t	evictions;	/* rings dropped to stay in budget */
	uint64_t	onepass;	/* groups found in one pass (no ring) */
	uint64_t	ambiguous;	/* cached walks that fell back to it */
	size_t		rings, bytes;	/* held now */
};

/*
 * Per-decision scratch, owned by the router and grown (never shrunk) to the
 * largest snapshot: no allocation in steady state.
 */
typedef struct sgi_scratch {
	size_t		 cap;		/* candidates the arrays hold */
	unsigned char	*excluded;	/* per candidate */
	size_t		 excl_hi;	/* excluded[excl_hi..cap) are all 0 */
	/*
	 * Test hook: take the reference paths (full sorts, the ring built,
	 * sorted and walked per decision, no ranking cache) that the fast
	 * paths must agree with exactly.
	 */
	bool		 reference;
	sgi_rcache	*rcache;	/* pulsar rankings; NULL: none (owned) */
	size_t		*idx;		/* index lists */
	size_t		*idx2;
	size_t		*order;		/* affinity order / ranking */
	size_t		*iota;		/* 0, 1, ..., cap - 1 (read only) */
	double		*d1, *d2, *d3;	/* per-candidate estimates */
	unsigned char	*flag;		/* per candidate: queue capacity */
	uint32_t	*mark;		/* generation stamps per candidate */
	uint32_t	 mark_gen;	/* current stamp (never 0 in use) */
	/*
	 * Cached w-a-w rings (sg_waw.c), allocated on first use, within
	 * ring_budget bytes (0: none are kept; every group takes one pass).
	 */
	sgi_rings	*rings;
	size_t		 ring_budget;
	/*
	 * Test hook: cached rings keep only the top ring_coarse bits of each
	 * entry hash (1..32; 0 means 32), so that truncation ties, which the
	 * walk must detect and resolve exactly, become frequent.
	 */
	unsigned	 ring_coarse;
	uint64_t	 st_onepass;	/* groups found in one pass */
	uint64_t	 st_ambiguous;	/* cached walks that fell back */
	/* round-robin counters live in the router */
} sgi_scratch;

/* The router's scratch (for tests: set reference, inspect caches). */
struct sg_router;
sgi_scratch	*sgi_router_scratch(struct sg_router *rt);

/* Grow scratch for n candidates; SG_ENOMEM. */
int	sgi_scratch_reserve(sgi_scratch *s, size_t n);
void	sgi_scratch_free(sgi_scratch *s);
/* Drop cached rings until they fit in s->ring_budget. */
void	sgi_rings_trim(sgi_scratch *s);
void	sgi_rings_stats(const sgi_scratch *s, struct sgi_ring_stats *st);
/* Bytes the cache charges for one ring of n candidates and V virtual nodes
 * (SIZE_MAX when it is too large to cache). */
size_t	sgi_ring_bytes(size_t n, uint64_t V);

/* Common inputs of one algorithm call. */
typedef struct sgi_ctx {
	const sg_algdef		*def;
	const sg_snapshot	*snap;
	sg_request		*req;
	double			 elapsed_ms;
	uint64_t		 router_seed;
	sgi_scratch		*scratch;	/* excluded[] already filled */
	size_t			 n;		/* candidates */
	size_t			 neligible;	/* non-excluded candidates */
	uint64_t		*rr_counter;	/* this definition's counter */
	json_t			*explain;	/* non-NULL: fill the candidate table */
} sgi_ctx;

/*
 * Each algorithm fills *out (kind SELECT, WAIT with recheck_at_ms, or
 * REJECT with status 503 "overloaded_error" for Unavailable).  Deadlines are
 * applied afterwards by the router.  They return 0 and must not fail (no
 * allocation outside --explain, whose JSON failures are ignored): the router
 * decides into the caller's sg_decision in place.
 */
int	sgi_random(sgi_ctx *x, sg_decision *out);
int	sgi_round_robin(sgi_ctx *x, sg_decision *out);
int	sgi_power_of_n(sgi_ctx *x, sg_decision *out);
int	sgi_pulsar(sgi_ctx *x, sg_decision *out);
int	sgi_wait_and_widen(sgi_ctx *x, sg_decision *out);
int	sgi_pulsar_waw(sgi_ctx *x, sg_decision *out);

/*
 * Pulsar ranking: fill order[] with the indices of ranked clusters,
 * descending score, ties by cluster_id ascending; return the count.  Used by
 * pulsar, pulsar-wait-and-widen and input-work admission.
 */
size_t	sgi_pulsar_rank(sgi_ctx *x, size_t *order);
/*
 * sgi_pulsar_rank_start() that, on a cache hit and with last >= 0, writes
 * the ranking with candidate last moved to the front (the session plan's
 * "keep" rotation) in the same pass: *pos is last's rank before the move,
 * or SIZE_MAX when nothing was rotated (no hit, last < 0 or unranked).
 */
size_t	sgi_pulsar_rank_start_rot(sgi_ctx *x, sgi_hashbuf *prefix,
	    size_t *order, bool *full, long last, size_t *pos);
/*
 * A cached ranking copied on demand.  sgi_pulsar_rank_start_lazy() is
 * sgi_pulsar_rank_start_rot() that, on a cache hit, writes only
 * order[0..min(want, nr)) and leaves in *lz what sgi_rlazy_fill() needs
 * to write order[0..upto) of the same (rotated) ranking later in the
 * call; when it did not hit, order[] is whole and sgi_rlazy_fill() does
 * nothing.  *pos is last's former rank, or SIZE_MAX - 1 when last is
 * ranked past what was copied (known without a search: a ranking of
 * every candidate ranks it, a shorter one says so in the cache's inverse).
 */
typedef struct sgi_rlazy {
	const uint16_t	*rank;		/* the cached ranking; NULL: none */
	size_t		 nr;		/* its length */
	size_t		 done;		/* order[0..done) written */
	size_t		 lpos;		/* last's former rank; SIZE_MAX: no
					   rotation; SIZE_MAX - 1: not met yet */
	size_t		 last;
} sgi_rlazy;
size_t	sgi_pulsar_rank_start_lazy(sgi_ctx *x, sgi_hashbuf *prefix,
	    size_t *order, bool *full, long last, size_t *pos, size_t want,
	    sgi_rlazy *lz);
void	sgi_rlazy_fill(sgi_rlazy *lz, size_t *order, size_t upto);
/*
 * The same in steps, for pulsar-wait-and-widen: fill *prefix and, when the
 * ranking cache has the ranking or wants it stored (or in reference or
 * --explain mode), the full ranking into order[] (*full = true, returns
 * its length).  Otherwise *full = false and nothing is ranked yet: then
 * sgi_pulsar_top() gives the first m ranks (SIZE_MAX: rank everything)
 * and sgi_pulsar_rank_full() the whole ranking, both from *prefix.
 */
size_t	sgi_pulsar_rank_start(sgi_ctx *x, sgi_hashbuf *prefix, size_t *order,
	    bool *full);
size_t	sgi_pulsar_rank_full(sgi_ctx *x, const sgi_hashbuf *prefix,
	    size_t *order);
#define SGI_TOP_MAX	16	/* longest prefix sgi_pulsar_top() builds */
size_t	sgi_pulsar_top(sgi_ctx *x, const sgi_hashbuf *prefix, size_t m,
	    long last, size_t *order, bool *last_ranked);
/*
 * After sgi_pulsar_top(): the whole ranking, from its hashes, bounds and
 * scores (d1, d2, d3), where later work clobbered d1 and d3 only for the
 * candidates keep[0..nkeep), whose exact scores are ksc[].
 */
size_t	sgi_pulsar_top_rest(sgi_ctx *x, const size_t *keep, const double *ksc,
	    size_t nkeep, size_t *order);
#if SIZE_MAX >= UINT64_MAX
/*
 * Sort 64-bit keys ascending (insertion sort when short, LSD radix with
 * tmp[0..n) when long).  Callers pack a truncated sort key above a
 * candidate index in the low 12 bits (SG_MAX_CANDIDATES = 4096) and
 * re-sort runs of equal truncated keys exactly.
 */
#define SGI_KEY_IDX_BITS	12
void	sgi_sort_keys(size_t *a, size_t *tmp, size_t n);
#endif

/* The KV part of pulsar feasibility: 0 room, 2 KV skip. */
int	sgi_pulsar_kv_room(const sgi_ctx *x, size_t i);

/* Pulsar feasibility: 0 eligible, 1 retry-excluded, 2 KV skip. */
static inline int
sgi_pulsar_feasible(const sgi_ctx *x, size_t i)
{
	if (x->scratch->excluded[i])
		return 1;
	if (!x->def->consider_kv_free_tokens)
		return 0;
	return sgi_pulsar_kv_room(x, i);
}

#endif /* SG_INTERNAL_H */
