/*
 * sg_waw.c — wait-and-widen (stargate-lb-config(5)), pulsar-wait-and-widen
 * (stargate-lb-config(5), the NEW algorithm, without the eligible-primary
 * shortcut) and the session plan of last_cluster_affinity
 * (stargate-lb-config(5)).
 *
 * Both algorithms share one model: an affinity phase over a small ordered
 * group (the hash ring's walk for wait-and-widen, the first k ranks of the
 * pulsar ranking for pulsar-wait-and-widen), a hold of X ms, then a widening
 * phase.  Every phase is the same "core selection" (stargate-lb-config(5)) over
 * a subset of the candidates: drop clusters over the queue SLO, unlock TTFT
 * buckets as time passes (each bucket costs gap * f ms of waiting, where the
 * gap is measured from the start of the current bucket), keep the unlocked
 * clusters with queue capacity, sample n of them and take the best under the
 * comparator.  A phase answers Selected, Wait(d) or Unavailable, and the
 * algorithms combine the answers exactly as stargate-lb-config(5) say.
 *
 * The session plan runs between building the affinity order and the first
 * phase: it classifies the request once (new / stale / returning, kept in
 * req->session_state across waits and retries), and for a returning
 * session moves the last cluster to the front of a per-request copy of the
 * order.  new and stale sessions run with X' = 0 and s' = 1.0.
 *
 * The consistent-hash ring (V virtual nodes per candidate, sorted by
 * (hash, cluster_id, index)) depends on (seed, routing key, model, the
 * candidate ids, V), so a router serving many tenants needs many of them.
 * Rings are cached per identity (the snapshot's ids version, which stands
 * for the ordered candidate ids, sg_snapshot.h; an XXH3 fingerprint of the
 * hash prefix (seed, routing key, model); V; n) within the scratch's byte
 * budget (sg_router_set_ring_cache_bytes), compactly (32 hash bits and a
 * 16-bit index per entry, a directory by top bits) and evicted by CLOCK.
 * A hit costs the prefix fingerprint, the key hash, a short search and a
 * walk to K distinct members (marked with generation stamps, so nothing is
 * reset per decision).  A ring the cache does not hold is never built for
 * one decision: the group is found in one pass over the n * V entry hashes
 * by the rotated-distance rule (an entry's position in the walk from the
 * key is (hash - key_hash) mod 2^64), which gives the same group; see
 * group_onepass() and ring_walk() for why each is exact.  In front of
 * both, a group memo (struct gmemo, 256 KiB, allocated with the ring
 * cache and only while its budget is not 0) answers a returning (ring
 * identity, key hash) pair in one probe, so tenants whose rings together
 * exceed the CPU caches cost what one tenant does.
 *
 * Nothing here allocates except --explain's JSON, sgi_scratch_reserve and
 * a ring the cache builds (the second miss of its identity).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sg_internal.h"

enum { CORE_SELECT, CORE_WAIT, CORE_UNAVAILABLE };

/* One algorithm call. */
struct waw {
	sgi_ctx		*x;
	const sg_cluster *cls;		/* the snapshot's clusters */
	const sg_algdef	*d;
	sgi_scratch	*s;
	sgi_rng		 rng;
	uint64_t	 tokens;
	uint32_t	 prio;
	bool		 slo;		/* queue SLO active */
	double		 max_q;
	int		 cmp;		/* sample comparator */
	bool		 pulsar;	/* filter by pulsar feasibility */
	json_t		*cands;		/* --explain candidate table, or NULL */
};

/* The session plan of one decision (stargate-lb-config(5)). */
struct plan {
	bool		 applies;	/* the request is classified */
	int		 state;
	bool		 promoted;
	double		 x_ms;		/* X' */
	double		 scale;		/* s' */
	long		 last;		/* candidate index of the hint, or -1 */
};

/* Result of one core selection. */
struct core {
	int		 kind;
	size_t		 sel;
	double		 wait;
};

static inline const sg_cluster *
cl(const struct waw *w, size_t i)
{
	return &w->cls[i];
}

/* Byte order of cluster ids (shorter first on a common prefix). */
static int
id_cmp(const sg_cluster *a, const sg_cluster *b)
{
	size_t n = a->id_len < b->id_len ? a->id_len : b->id_len;
	int c = memcmp(a->id, b->id, n);

	if (c != 0)
		return c;
	return (a->id_len > b->id_len) - (a->id_len < b->id_len);
}

static json_t *
jnum(double v)
{
	return isfinite(v) ? json_real(v) : json_null();
}

static void
ex_set(const struct waw *w, size_t i, const char *key, json_t *v)
{
	json_t *o;

	if (w->cands == NULL || (o = json_array_get(w->cands, i)) == NULL) {
		json_decref(v);
		return;
	}
	json_object_set_new(o, key, v);
}

/* --- scratch -------------------------------------------------------------- */

static int
grow(void **p, size_t n, size_t size)
{
	void *q;

	if (n > SIZE_MAX / size)
		return SG_ENOMEM;
	if ((q = realloc(*p, n * size)) == NULL)
		return SG_ENOMEM;
	*p = q;
	return 0;
}

/*
 * Grow the per-candidate arrays to n.  Capacities change only when every
 * array of the group has grown, so a failure leaves a usable scratch.
 */
int
sgi_scratch_reserve(sgi_scratch *s, size_t n)
{
	size_t cap, i;

	if (n > s->cap) {
		cap = s->cap != 0 ? s->cap : 8;
		while (cap < n)
			cap *= 2;
		if (grow((void **)&s->excluded, cap, 1) != 0 ||
		    grow((void **)&s->idx, cap, sizeof(size_t)) != 0 ||
		    grow((void **)&s->idx2, cap, sizeof(size_t)) != 0 ||
		    grow((void **)&s->order, cap, sizeof(size_t)) != 0 ||
		    grow((void **)&s->iota, cap, sizeof(size_t)) != 0 ||
		    grow((void **)&s->d1, cap, sizeof(double)) != 0 ||
		    grow((void **)&s->d2, cap, sizeof(double)) != 0 ||
		    grow((void **)&s->d3, cap, sizeof(double)) != 0 ||
		    grow((void **)&s->mark, cap, sizeof(uint32_t)) != 0 ||
		    grow((void **)&s->flag, cap, 1) != 0)
			return SG_ENOMEM;
		/* new stamps start unmarked, nothing is excluded */
		memset(s->mark, 0, cap * sizeof(uint32_t));
		for (i = s->cap; i < cap; i++)
			s->iota[i] = i;		/* the set of every candidate */
		memset(s->excluded, 0, cap);
		s->excl_hi = 0;
		s->mark_gen = 0;
		s->cap = cap;
	}
	return 0;
}

static void	rings_free(sgi_rings *);

void
sgi_scratch_free(sgi_scratch *s)
{
	if (s == NULL)
		return;
	free(s->excluded);
	free(s->idx);
	free(s->idx2);
	free(s->order);
	free(s->iota);
	free(s->d1);
	free(s->d2);
	free(s->d3);
	free(s->mark);
	free(s->flag);
	rings_free(s->rings);
	sgi_rcache_free(s->rcache);
	memset(s, 0, sizeof(*s));
}

/* --- sorting without allocation ------------------------------------------- */

typedef int (*icmp_fn)(const struct waw *, size_t, size_t);

/* Stable merge sort of a[0..n) with tmp[0..n) as buffer. */
static void
isort(const struct waw *w, size_t *a, size_t n, size_t *tmp, icmp_fn cmp)
{
	size_t i, j, run, lo, mid, hi, k, t;
	size_t *src = a, *dst = tmp, *sw;

	/* insertion-sort runs of 8 */
	for (lo = 0; lo < n; lo += 8) {
		hi = lo + 8 < n ? lo + 8 : n;
		for (i = lo + 1; i < hi; i++) {
			t = a[i];
			for (j = i; j > lo && cmp(w, t, a[j - 1]) < 0; j--)
				a[j] = a[j - 1];
			a[j] = t;
		}
	}
	for (run = 8; run < n; run *= 2) {
		for (lo = 0; lo < n; lo += 2 * run) {
			mid = lo + run < n ? lo + run : n;
			hi = lo + 2 * run < n ? lo + 2 * run : n;
			i = lo;
			j = mid;
			k = lo;
			while (i < mid && j < hi)
				dst[k++] = cmp(w, src[j], src[i]) < 0 ?
				    src[j++] : src[i++];
			while (i < mid)
				dst[k++] = src[i++];
			while (j < hi)
				dst[k++] = src[j++];
		}
		sw = src;
		src = dst;
		dst = sw;
	}
	if (src != a)
		memcpy(a, src, n * sizeof(*a));
}

/* ttft ascending (total order), then cluster_id bytes. */
static int
cmp_ttft(const struct waw *w, size_t a, size_t b)
{
	int c = sgi_total_cmp(w->s->d1[a], w->s->d1[b]);

	return c != 0 ? c : id_cmp(cl(w, a), cl(w, b));
}

/* isort(cmp_ttft) of a[0..2): its one insertion step, without its calls. */
static inline void
order_pair(const struct waw *w, size_t *a)
{
	size_t x;

	if (cmp_ttft(w, a[1], a[0]) < 0) {
		x = a[0];
		a[0] = a[1];
		a[1] = x;
	}
}

/*
 * order_pair() for the ties of sort_ttft()'s packed keys.  Not inlined:
 * sort_ttft()'s registers stay those of its short lists.
 */
static __attribute__((noinline)) void
sort_pair(const struct waw *w, size_t *a)
{
	order_pair(w, a);
}

#if SIZE_MAX >= UINT64_MAX
#define TTFT_KEY_MASK	(((size_t)1 << SGI_KEY_IDX_BITS) - 1)

/* Candidate c's packed key: its TTFT's total-order bits above c. */
static inline size_t
ttft_key(const double *t, size_t c)
{
	return (((size_t)sgi_total_key(t[c]) ^ ((size_t)1 << 63)) &
	    ~TTFT_KEY_MASK) | c;
}
#endif

/*
 * a[0..n) in (TTFT, cluster id) order, TTFTs from d1, tmp[0..n) as buffer.
 * The total-order bits of each TTFT, less their low SGI_KEY_IDX_BITS, are
 * packed above the candidate index and sorted as integers; the rare runs of
 * equal packed keys (equal or nearly equal TTFTs) are then re-sorted by the
 * exact rule.  Same order as isort(cmp_ttft), without a call per compare.
 */
static void
sort_ttft(const struct waw *w, size_t *a, size_t n, size_t *tmp)
{
#if SIZE_MAX >= UINT64_MAX
	const size_t mask = TTFT_KEY_MASK;
	const double *t = w->s->d1;
	size_t i, j, k, base;
#endif

	/*
	 * the usual lists of one or two (the unlocked members with capacity):
	 * what the insertion sort of isort() does with them, without packing
	 */
	if (n < 2)
		return;
	if (n == 2) {
		order_pair(w, a);
		return;
	}
#if SIZE_MAX >= UINT64_MAX
	for (i = 0; i < n; i++)
		a[i] = ttft_key(t, a[i]);
	sgi_sort_keys(a, tmp, n);
	for (i = 0; i < n; i = j) {
		base = a[i] & ~mask;
		for (j = i + 1; j < n && (a[j] & ~mask) == base; j++)
			;
		for (k = i; k < j; k++)
			a[k] &= mask;
		if (j - i == 2)		/* ties: pairs, mostly */
			sort_pair(w, a + i);
		else if (j - i > 2)
			isort(w, a + i, j - i, tmp, cmp_ttft);
	}
#else
	isort(w, a, n, tmp, cmp_ttft);
#endif
}

/*
 * Drawing from the sorted list without sorting it.  Step 7 draws n
 * positions of the unlocked list by a partial Fisher-Yates shuffle, and
 * the list is in (TTFT, id) order when several buckets were walked; for a
 * long list and few draws only the members at the drawn ranks matter, and
 * finding a member by its rank (quickselect) is linear where the sort is
 * not.  The keys are sort_ttft()'s packed words, compared as it orders
 * them: by their TTFT bits, then, where those are equal, by the exact rule
 * (cmp_ttft), so a rank names the member the sort puts there.
 */
#define RANK_MIN	32	/* lists from this long are not sorted */
#define RANK_DRAWS	4	/* when at most this many are drawn */

#if SIZE_MAX >= UINT64_MAX
static inline bool
rank_less(const struct waw *w, size_t x, size_t y)
{
	if ((x ^ y) & ~TTFT_KEY_MASK)
		return x < y;
	return cmp_ttft(w, x & TTFT_KEY_MASK, y & TTFT_KEY_MASK) < 0;
}

static size_t
rank_median3(const struct waw *w, size_t x, size_t y, size_t z)
{
	if (rank_less(w, y, x)) {
		size_t t = x;

		x = y;
		y = t;
	}
	if (rank_less(w, z, y))
		y = rank_less(w, z, x) ? x : z;
	return y;
}

/* The key of rank r of the distinct keys a[0..n), r < n (a is permuted). */
static size_t
rank_select(const struct waw *w, size_t *a, size_t n, size_t r)
{
	size_t lo = 0, hi = n - 1, i, j, p, t;

	while (hi - lo >= 8) {
		/* Hoare's partition around a median of three: a[lo..j] are
		 * below or at p, a[j + 1..hi] at or above, lo <= j < hi */
		p = rank_median3(w, a[lo], a[lo + (hi - lo) / 2], a[hi]);
		i = lo;
		j = hi;
		for (;;) {
			while (rank_less(w, a[i], p))
				i++;
			while (rank_less(w, p, a[j]))
				j--;
			if (i >= j)
				break;
			t = a[i];
			a[i++] = a[j];
			a[j--] = t;
		}
		if (r <= j)
			hi = j;
		else
			lo = j + 1;
	}
	for (i = lo + 1; i <= hi; i++) {	/* the rest by insertion */
		t = a[i];
		for (j = i; j > lo && rank_less(w, t, a[j - 1]); j--)
			a[j] = a[j - 1];
		a[j] = t;
	}
	return a[r];
}
#endif

/* Whether step 7 draws from smp[0..m) by rank instead of sorting it. */
static bool
draw_by_rank(const struct waw *w, size_t m)
{
#if SIZE_MAX >= UINT64_MAX
	size_t ns = w->d->n > 0 ? w->d->n : 1;

	return m >= RANK_MIN && ns <= RANK_DRAWS;
#else
	(void)w;
	(void)m;
	return false;
#endif
}

#if SIZE_MAX >= UINT64_MAX
/* The rank at position p of the shuffled list: the entry set there last. */
static size_t
rank_at(const size_t *pos, const size_t *rank, size_t np, size_t p)
{
	size_t i;

	for (i = np; i-- > 0;)
		if (pos[i] == p)
			return rank[i];
	return p;	/* untouched: still its own rank */
}

/*
 * smp[0..ns) as the partial Fisher-Yates shuffle of step 7 leaves them when
 * smp[0..m) is in (TTFT, id) order, from the unsorted smp[0..m): the same
 * draws from the PRNG, tracked as ranks, then the members of those ranks
 * (ns <= RANK_DRAWS; tmp: m words).
 */
static void
draw_ranked(struct waw *w, size_t *smp, size_t m, size_t ns, size_t *tmp)
{
	const double *t = w->s->d1;
	size_t pos[2 * RANK_DRAWS], rank[2 * RANK_DRAWS], want[RANK_DRAWS];
	size_t np = 0, i, j, ri, rj;

	for (i = 0; i < ns; i++) {
		j = i + (size_t)sgi_rng_below(&w->rng, m - i);
		ri = rank_at(pos, rank, np, i);
		rj = rank_at(pos, rank, np, j);
		pos[np] = i;
		rank[np++] = rj;
		pos[np] = j;
		rank[np++] = ri;
	}
	for (i = 0; i < ns; i++)
		want[i] = rank_at(pos, rank, np, i);
	for (i = 0; i < m; i++)
		tmp[i] = ttft_key(t, smp[i]);
	for (i = 0; i < ns; i++)
		smp[i] = rank_select(w, tmp, m, want[i]) & TTFT_KEY_MASK;
}
#else
static void
draw_ranked(struct waw *w, size_t *smp, size_t m, size_t ns, size_t *tmp)
{
	(void)w, (void)smp, (void)m, (void)ns, (void)tmp;
}
#endif

/* --- core selection (stargate-lb-config(5)) ------------------------------- */

/*
 * The sample comparator's value for candidate i, a survivor of step 1 of
 * the current core selection (lower is better).
 */
static double
sample_value(const struct waw *w, size_t i, double scale)
{
	const sg_cluster *c = cl(w, i);

	switch (w->cmp) {
	case SG_CMP_TTFT:
		/*
		 * i passed step 1 of this core selection: with neither ignore
		 * flag, d1 holds the same sum, in the same order, at scale
		 */
		if (!w->d->ignore_queue_time &&
		    !w->d->ignore_input_processing_time)
			return w->s->d1[i];
		return sgi_comparator_ms(c, w->tokens, w->prio, scale);
	case SG_CMP_QUEUE_TIME:
	case SG_CMP_NONE:
		return w->s->d3[i];
	default:
		return sgi_score(w->cmp, c, w->tokens, w->prio);
	}
}

/* SG_CMP_NONE tie break: running / max, or raw running when a max is 0. */
static int
util_cmp(const sg_cluster *a, const sg_cluster *b)
{
	double ra, rb;

	if (a->max_engine_concurrency == 0 || b->max_engine_concurrency == 0)
		return (a->running > b->running) - (a->running < b->running);
	ra = (double)a->running / (double)a->max_engine_concurrency;
	rb = (double)b->running / (double)b->max_engine_concurrency;
	return sgi_total_cmp(ra, rb);
}

/* Some candidate of idx[from..cnt) has a finite TTFT and capacity. */
static bool
later_capacity(const struct waw *w, const size_t *idx, size_t from,
    size_t cnt)
{
	size_t j;

	for (j = from; j < cnt; j++)
		if (isfinite(w->s->d1[idx[j]]) && w->s->flag[idx[j]])
			return true;
	return false;
}

/*
 * Steps 3-6 of core selection without sorting every member: the unlock walk
 * only needs each next bucket start, the smallest finite TTFT more than B
 * past the current start (one pass per bucket).  The walk stops at such a
 * start it cannot afford, so the unlocked members are exactly those with a
 * finite TTFT below it (ties unlock together: they have the same gap), and
 * the later ones are everything else.  Only the unlocked members with
 * capacity are then sorted by (TTFT, id) into smp[0..*m): the same list, in
 * the same order, as filtering the fully sorted walk; or, when step 7 can
 * draw from them by rank (draw_by_rank), left in set order and *sorted set
 * false.  Returns false (and leaves the work to the full sort) after
 * FAST_BUCKETS bucket starts.
 */
#define FAST_BUCKETS	4

static bool
fast_unlock(struct waw *w, size_t *idx, size_t cnt, double lo, double e,
    size_t *smp, size_t *m, bool *sorted, bool *have_wait, double *wait)
{
	const double *t = w->s->d1;
	const unsigned char *flag = w->s->flag;	/* loaded once: char stores
						   below may alias anything */
	double B = (double)w->d->ttft_bucket_size_ms;
	double f = w->d->next_bucket_unlock_factor;
	double start = lo, budget = e, next = INFINITY, need = 0;
	size_t i, k, nb;
	bool stop = false, late = false;

	if (!(e > 0) && f > 0) {
		/*
		 * No budget (elapsed 0): the first bucket start past lo stops
		 * the walk, so the unlocked members are those within B of lo
		 * (v < next exactly when v - lo <= B), and one pass finds
		 * them and next together.
		 */
		next = INFINITY;
		for (i = 0, k = 0; i < cnt; i++) {
			size_t c = idx[i];
			double v = t[c];

			if (!(v < INFINITY))
				continue;	/* +inf, NaN: never unlocked */
			if (v - lo > B) {
				if (v < next)
					next = v;
				late |= flag[c];
				continue;
			}
			if (flag[c])
				smp[k++] = c;
		}
		if (!(next < INFINITY))
			goto sort;	/* one bucket: every finite member */
		need = (next - lo) * f;
		if (!(budget < need))
			return false;	/* need underflowed: the general walk */
		if (late && !*have_wait) {
			*have_wait = true;
			*wait = need - budget;
		}
		goto sort;
	}
	for (nb = 0; ; nb++) {
		bool found = false;

		if (nb == FAST_BUCKETS)
			return false;
		/* next: the smallest finite TTFT more than B past start */
		next = INFINITY;
		for (i = 0; i < cnt; i++) {
			double v = t[idx[i]];

			if (v - start > B && v < INFINITY && v < next)
				next = v;
		}
		found = next < INFINITY;	/* candidates are finite */
		if (!found)
			break;		/* every finite member unlocks */
		need = (next - start) * f;
		if (budget < need) {
			stop = true;
			break;
		}
		budget -= need;
		start = next;
	}
	/*
	 * Unlocked members with capacity, in set order, and whether a later
	 * member has capacity (later_capacity(): then the walk would wait).
	 */
	for (i = 0, k = 0; i < cnt; i++) {
		size_t c = idx[i];
		double v = t[c];

		if (!isfinite(v) || !flag[c])
			continue;
		if (stop && !(v < next)) {
			late = true;
			continue;
		}
		smp[k++] = c;
	}
	if (late && !*have_wait) {
		*have_wait = true;
		*wait = need - budget;
	}
sort:
	*m = k;
	*sorted = !draw_by_rank(w, k);	/* else step 7 draws by rank */
	if (*sorted)
		sort_ttft(w, smp, k, idx);	/* idx is free now */
	return true;
}

/*
 * Step 1 of core selection, as --explain and the reference mode run it:
 * estimates, exclusions, feasibility, queue SLO for set[0..nset), the
 * survivors into s->idx.  Sets *lo, *hi (by total order) and *allfinite;
 * returns the survivors' count.
 */
static size_t
est_explain(struct waw *w, const size_t *set, size_t nset, double scale,
    uint64_t max_queued, bool affinity, double *lop, double *hip,
    bool *allfinite)
{
	sgi_scratch *s = w->s;
	const sg_algdef *d = w->d;
	size_t *idx = s->idx;
	size_t cnt = 0, i;
	double lo = INFINITY, hi = -INFINITY;
	int64_t kt, klo = 0, khi = 0;
	double *d1 = s->d1, *d3 = s->d3;
	unsigned char *flag = s->flag;
	const unsigned char *excl = s->excluded;
	const sg_cluster *cls = w->cls;

	/*
	 * the arrays in locals: a store through the capacity flags, a char
	 * type, may alias anything, so fields read through s or d would be
	 * reloaded per candidate
	 */
	*allfinite = true;
	for (i = 0; i < nset; i++) {
		size_t c = set[i];
		const sg_cluster *k = &cls[c];
		double q, t;

		if (excl[c])
			continue;
		if (w->pulsar && sgi_pulsar_feasible(w->x, c) != 0)
			continue;
		q = sgi_queue_ms(k, w->prio);
		if (w->cands != NULL) {
			ex_set(w, c, "bucket", json_null());
			ex_set(w, c, "has_capacity",
			    json_boolean(sgi_has_capacity(k, max_queued)));
			if (affinity) {
				ex_set(w, c, "prefill_ms",
				    jnum(sgi_prefill_ms(k, w->tokens, scale)));
				ex_set(w, c, "ttft_ms", jnum(sgi_ttft_ms(k,
				    w->tokens, w->prio, scale,
				    d->ignore_queue_time,
				    d->ignore_input_processing_time)));
				ex_set(w, c, "comparator_ms",
				    jnum(sgi_comparator_ms(k, w->tokens,
				    w->prio, scale)));
			}
		}
		if (w->slo && q > w->max_q)
			continue;
		/* sgi_ttft_ms() with the queue delay already in hand */
		t = k->rtt_ms;
		if (!d->ignore_queue_time)
			t += q;
		if (!d->ignore_input_processing_time)
			t += sgi_prefill_ms(k, w->tokens, scale);
		d1[c] = t;
		d3[c] = q;
		flag[c] = sgi_has_capacity(k, max_queued);
		if (!isfinite(t))
			*allfinite = false;
		kt = sgi_total_key(t);	/* total order as integers */
		if (cnt == 0 || kt < klo) {
			klo = kt;
			lo = t;
		}
		if (cnt == 0 || kt > khi) {
			khi = kt;
			hi = t;
		}
		idx[cnt++] = c;
	}
	*lop = lo;
	*hip = hi;
	return cnt;
}

/* The inputs of est_fast() and its total-order keys of lo and hi. */
struct est {
	const size_t	*set;
	size_t		 nset;
	double		 st;		/* scale * (double)tokens */
	uint64_t	 max_queued;
	int64_t		 klo, khi;
};

/*
 * est_explain() without --explain, the decision flags constants (each
 * instantiation is a loop with no test of them) and only the integer keys
 * of lo and hi tracked (branch-free minimum and maximum).  The pulsar
 * feasibility test is sgi_pulsar_feasible() less its exclusion test,
 * which excl[] has made; kv stands for w->pulsar and the KV test on.
 * The same survivors, in the same order, with the same d1, d3 and flag.
 */
static inline __attribute__((always_inline)) size_t
est_loop(const struct waw *w, struct est *a, bool iq, bool ip, bool kv,
    bool slo)
{
	const sgi_ctx *x = w->x;
	const sg_cluster *cls = w->cls;
	const unsigned char *excl = w->s->excluded;
	unsigned char *flag = w->s->flag;
	double *d1 = w->s->d1, *d3 = w->s->d3;
	size_t *idx = w->s->idx;
	const size_t *set = a->set;
	size_t i, n = a->nset, cnt = 0;
	uint64_t tokens = w->tokens, mq = a->max_queued;
	uint32_t prio = w->prio;
	double st = a->st, max_q = w->max_q;
	int64_t kt, klo = INT64_MAX, khi = INT64_MIN;

	for (i = 0; i < n; i++) {
		size_t c = set[i];
		const sg_cluster *k = &cls[c];
		double tps, q, t;
		bool cap;

		if (excl[c])
			continue;
		if (kv && sgi_pulsar_kv_room(x, c) != 0)
			continue;
		tps = sgi_tps(k);	/* once for the queue and the prefill */
		q = sgi_queue_ms_tps(k, prio, tps);
		if (slo && q > max_q)
			continue;
		t = k->rtt_ms;
		if (!iq)
			t += q;
		if (!ip)
			t += sgi_prefill_ms_tps(tps, tokens, st);
		cap = sgi_has_capacity(k, mq);	/* before the stores: no
						   reloads after them */
		d1[c] = t;
		d3[c] = q;
		flag[c] = cap;
		kt = sgi_total_key(t);
		klo = kt < klo ? kt : klo;
		khi = kt > khi ? kt : khi;
		idx[cnt++] = c;
	}
	a->klo = klo;
	a->khi = khi;
	return cnt;
}

/* est_loop() instantiated for each value of the four flags. */
static inline __attribute__((always_inline)) size_t
est_slo(const struct waw *w, struct est *a, bool iq, bool ip, bool kv)
{
	return w->slo ? est_loop(w, a, iq, ip, kv, true) :
	    est_loop(w, a, iq, ip, kv, false);
}

static inline __attribute__((always_inline)) size_t
est_kv(const struct waw *w, struct est *a, bool iq, bool ip)
{
	return w->pulsar && w->d->consider_kv_free_tokens ?
	    est_slo(w, a, iq, ip, true) : est_slo(w, a, iq, ip, false);
}

static inline __attribute__((always_inline)) size_t
est_ip(const struct waw *w, struct est *a, bool iq)
{
	return w->d->ignore_input_processing_time ? est_kv(w, a, iq, true) :
	    est_kv(w, a, iq, false);
}

static size_t
est_fast(const struct waw *w, struct est *a)
{
	return w->d->ignore_queue_time ? est_ip(w, a, true) :
	    est_ip(w, a, false);
}

/*
 * Core selection over set[0..nset) (candidate indices) with prefill scale
 * `scale`, unlock budget e ms and queue admission max_queued.  affinity
 * marks the affinity phase (its estimates are the ones --explain shows).
 */
static void
core_select(struct waw *w, const size_t *set, size_t nset, double scale,
    double e, uint64_t max_queued, bool affinity, struct core *res)
{
	sgi_scratch *s = w->s;
	const sg_algdef *d = w->d;
	size_t *idx = s->idx, *smp = s->idx2;
	size_t cnt, unlocked, m, ns, i, j, best;
	double lo, hi, bv, v;
	double B = (double)d->ttft_bucket_size_ms;
	bool allfinite, have_wait = false, sorted = true;
	double wait = 0;

	/* 1. estimates, exclusions, feasibility, queue SLO */
	if (w->cands != NULL || s->reference)
		cnt = est_explain(w, set, nset, scale, max_queued, affinity,
		    &lo, &hi, &allfinite);
	else {
		struct est a = { set, nset, scale * (double)w->tokens,
		    max_queued, 0, 0 };

		cnt = est_fast(w, &a);
		lo = sgi_total_unkey(a.klo);
		hi = sgi_total_unkey(a.khi);
		/*
		 * every ttft lies between lo and hi in total order, and the
		 * finite ones are the keys strictly between -inf's and +inf's
		 */
		allfinite = isfinite(lo) && isfinite(hi);
	}

	/* 2. nothing, or no finite ttft */
	if (cnt == 0 || !isfinite(lo)) {
		res->kind = CORE_UNAVAILABLE;
		return;
	}

	/* 3-5. bucket unlocking */
	if (allfinite && hi - lo <= B) {
		unlocked = cnt;
		for (i = 0; w->cands != NULL && i < cnt; i++)
			ex_set(w, idx[i], "bucket", json_integer(0));
	} else if (w->cands == NULL && !s->reference &&
	    fast_unlock(w, idx, cnt, lo, e, smp, &m, &sorted, &have_wait,
	    &wait)) {
		goto sample;	/* smp[0..m) is step 6's list */
	} else {
		double budget = e, start, f = d->next_bucket_unlock_factor;
		json_int_t bucket = 0;

		if (s->reference)
			isort(w, idx, cnt, smp, cmp_ttft);
		else
			sort_ttft(w, idx, cnt, smp);
		start = s->d1[idx[0]];
		for (unlocked = 0; unlocked < cnt; unlocked++) {
			double t = s->d1[idx[unlocked]], gap, need;

			if (!isfinite(t))
				break;
			gap = t - start;
			if (gap > B) {
				need = gap * f;
				if (budget < need) {
					if (later_capacity(w, idx, unlocked,
					    cnt)) {
						have_wait = true;
						wait = need - budget;
					}
					break;
				}
				budget -= need;
				start = t;
				bucket++;
			}
			if (w->cands != NULL)
				ex_set(w, idx[unlocked], "bucket",
				    json_integer(bucket));
		}
	}

	/* 6. unlocked clusters with capacity */
	for (i = 0, m = 0; i < unlocked; i++)
		if (s->flag[idx[i]])
			smp[m++] = idx[i];
sample:
	if (m == 0) {
		if (have_wait) {
			res->kind = CORE_WAIT;
			res->wait = wait;
		} else
			res->kind = CORE_UNAVAILABLE;
		return;
	}

	/* 7. sample min(n, m) by partial Fisher-Yates, keep the first best */
	ns = d->n > 0 ? d->n : 1;
	if (ns > m)
		ns = m;
	if (!sorted)
		draw_ranked(w, smp, m, ns, idx);	/* idx is free now */
	for (i = 0; sorted && i < ns; i++) {
		size_t t;

		j = i + (size_t)sgi_rng_below(&w->rng, m - i);
		t = smp[i];
		smp[i] = smp[j];
		smp[j] = t;
	}
	best = smp[0];
	bv = ns > 1 ? sample_value(w, best, scale) : 0;	/* one: no compare */
	for (i = 1; i < ns; i++) {
		int c;

		v = sample_value(w, smp[i], scale);
		c = sgi_total_cmp(v, bv);
		if (c == 0 && w->cmp == SG_CMP_NONE)
			c = util_cmp(cl(w, smp[i]), cl(w, best));
		if (c < 0) {
			best = smp[i];
			bv = v;
		}
	}
	res->kind = CORE_SELECT;
	res->sel = best;
}

/* --- the consistent-hash affinity group (stargate-lb-config(5)) ----------- */

/* Ring entries a before b: hash, then cluster id, then candidate index. */
static int
ring_cmp(const struct waw *w, uint64_t ha, uint32_t ia, uint64_t hb,
    uint32_t ib)
{
	int c;

	if (ha != hb)
		return ha < hb ? -1 : 1;
	if ((c = id_cmp(cl(w, ia), cl(w, ib))) != 0)
		return c;
	return (ia > ib) - (ia < ib);
}

static void
ring_swap(uint64_t *h, uint32_t *ix, size_t a, size_t b)
{
	uint64_t th = h[a];
	uint32_t ti = ix[a];

	h[a] = h[b];
	ix[a] = ix[b];
	h[b] = th;
	ix[b] = ti;
}

/* Quicksort of the ring's parallel arrays (hashes are uniform). */
static void
ring_sort(const struct waw *w, uint64_t *h, uint32_t *ix, size_t n)
{
	while (n > 16) {
		size_t mid = n / 2, i, j;
		uint64_t ph;
		uint32_t pi;

		/* median of three to position 0 */
		if (ring_cmp(w, h[mid], ix[mid], h[0], ix[0]) < 0)
			ring_swap(h, ix, mid, 0);
		if (ring_cmp(w, h[n - 1], ix[n - 1], h[0], ix[0]) < 0)
			ring_swap(h, ix, n - 1, 0);
		if (ring_cmp(w, h[n - 1], ix[n - 1], h[mid], ix[mid]) < 0)
			ring_swap(h, ix, n - 1, mid);
		ring_swap(h, ix, 0, mid);
		ph = h[0];
		pi = ix[0];
		i = 0;
		j = n;
		for (;;) {
			do
				i++;
			while (i < n && ring_cmp(w, h[i], ix[i], ph, pi) < 0);
			do
				j--;
			while (ring_cmp(w, h[j], ix[j], ph, pi) > 0);
			if (i >= j)
				break;
			ring_swap(h, ix, i, j);
		}
		ring_swap(h, ix, 0, j);
		/* recurse into the smaller side, loop on the larger */
		if (j < n - j - 1) {
			ring_sort(w, h, ix, j);
			h += j + 1;
			ix += j + 1;
			n -= j + 1;
		} else {
			ring_sort(w, h + j + 1, ix + j + 1, n - j - 1);
			n = j;
		}
	}
	for (size_t i = 1; i < n; i++) {
		uint64_t th = h[i];
		uint32_t ti = ix[i];
		size_t j;

		for (j = i; j > 0 &&
		    ring_cmp(w, th, ti, h[j - 1], ix[j - 1]) < 0; j--) {
			h[j] = h[j - 1];
			ix[j] = ix[j - 1];
		}
		h[j] = th;
		ix[j] = ti;
	}
}

/* A fresh generation stamp for marking walk members (reset on wrap). */
static uint32_t
fresh_mark(sgi_scratch *s)
{
	if (++s->mark_gen == 0) {
		memset(s->mark, 0, s->cap * sizeof(*s->mark));
		s->mark_gen = 1;
	}
	return s->mark_gen;
}

/*
 * The reference: the ring of stargate-lb-config(5) built, sorted by (hash,
 * cluster id, index) and walked from the first entry with hash >= kh, wrapping,
 * collecting m distinct candidates.  Allocates (test hook only); returns 0
 * when it cannot.
 */
static size_t
group_reference(struct waw *w, const sgi_hashbuf *prefix, uint64_t kh,
    uint64_t V, size_t m, size_t *group)
{
	size_t n = w->x->n, len, lo, i, pos, got = 0, k = 0;
	uint64_t *h, v;
	uint32_t *ix, gen;

	if (n > UINT32_MAX || V > SIZE_MAX / sizeof(*h) / n)
		return 0;
	len = (size_t)(n * V);
	h = malloc(len * sizeof(*h));
	ix = malloc(len * sizeof(*ix));
	if (h == NULL || ix == NULL)
		goto out;
	for (i = 0; i < n; i++)
		for (v = 0; v < V; v++, k++) {
			h[k] = sgi_ring_entry_hash(prefix, cl(w, i)->id,
			    cl(w, i)->id_len, v);
			ix[k] = (uint32_t)i;
		}
	ring_sort(w, h, ix, len);
	for (lo = 0; lo < len && h[lo] < kh; lo++)
		;
	if (lo == len)
		lo = 0;
	gen = fresh_mark(w->s);
	for (pos = lo, i = 0; got < m && i < len; i++) {
		size_t c = ix[pos];

		if (++pos == len)
			pos = 0;
		if (w->s->mark[c] == gen)
			continue;
		w->s->mark[c] = gen;
		group[got++] = c;
	}
out:
	free(h);
	free(ix);
	return got;
}

/*
 * The group in one pass, without a ring.  The walk from the key meets the
 * entries in ascending order of (hash - kh) mod 2^64 (the entries at or
 * past kh first, in hash order, then, wrapped, those below it: subtracting
 * kh modulo 2^64 is that rotation), with equal hashes in (cluster id,
 * index) order as in the ring.  So a candidate is first met at its
 * smallest rotated distance, and the group is the m candidates with the
 * smallest (distance, cluster id, index): one pass over the n * V hashes
 * keeping each candidate's minimum, then a selection of the m smallest
 * (insertion into a sorted prefix when m is small, a full sort otherwise).
 * d2 holds the distances as raw bits.
 */
static int
cmp_dist(const struct waw *w, size_t a, size_t b)
{
	uint64_t da, db;

	memcpy(&da, &w->s->d2[a], sizeof da);
	memcpy(&db, &w->s->d2[b], sizeof db);
	if (da != db)
		return da < db ? -1 : 1;
	return ring_cmp(w, 0, (uint32_t)a, 0, (uint32_t)b);
}

#define ONEPASS_INSERT	16	/* larger groups are selected by sorting */
#define VN_BATCH	64	/* virtual-node hashes per sgi_ring_entry_hashes */

static size_t
group_onepass(struct waw *w, const sgi_hashbuf *prefix, uint64_t kh,
    uint64_t V, size_t m, size_t *group)
{
	size_t i, j, got = 0, n = w->x->n;
	uint64_t v, hv[VN_BATCH];

	w->s->st_onepass++;
	for (i = 0; i < n; i++) {
		const sg_cluster *c = cl(w, i);
		uint64_t best = UINT64_MAX;

		for (v = 0; v < V; v += VN_BATCH) {
			size_t nb = V - v < VN_BATCH ? (size_t)(V - v) :
			    VN_BATCH;

			sgi_ring_entry_hashes(prefix, c->id, c->id_len, v, nb,
			    hv);
			for (j = 0; j < nb; j++) {
				uint64_t d = hv[j] - kh;

				best = d < best ? d : best;
			}
		}
		memcpy(&w->s->d2[i], &best, sizeof best);
		if (m > ONEPASS_INSERT) {
			w->s->idx[i] = i;
			continue;
		}
		/* keep group[0..got) the smallest so far, in order */
		if (got == m && cmp_dist(w, i, group[got - 1]) > 0)
			continue;
		j = got < m ? got++ : got - 1;
		for (; j > 0 && cmp_dist(w, i, group[j - 1]) < 0; j--)
			group[j] = group[j - 1];
		group[j] = i;
	}
	if (m > ONEPASS_INSERT) {
		isort(w, w->s->idx, n, w->s->idx2, cmp_dist);
		memcpy(group, w->s->idx, m * sizeof(*group));
	}
	return m;
}

/*
 * The ring cache.  A cached ring holds its entries sorted, as the top 32
 * bits of each hash (hi[]) and the candidate index (ix[]), and a directory
 * of 2^dbits ranges of hi[] by top bits (about 8 entries each), so a walk
 * costs three cache misses however large the ring (directory, then hi[]
 * and ix[] together).  Rings are found by a
 * chained hash table on their identity (snapshot ids version, XXH3 of the
 * hash prefix, V, n) and evicted by CLOCK.  A missing ring is built (n * V
 * hashes, one counting pass, short insertion sorts) at once while the
 * budget has room; once it is
 * full, only the second time it is missed within a direct-mapped "ghost"
 * table of recent misses, so under pressure an identity seen once costs
 * only the one pass and evicts nothing.
 *
 * Truncation to 32 bits is exact or detected.  Let kt be the top 32 bits
 * of kh.  Entries with top bits above kt hash above kh, those below it
 * below kh, so when no entry's top bits equal kt, the walk's start is the
 * first entry with hi > kt and the rotated order of hi agrees with the
 * ring's on entries whose hi differ.  Hence if the first j+1 entries met
 * have strictly increasing hi (rotated), the first j are exactly the
 * ring's first j, in order: every other entry's hash is larger.  The walk
 * checks exactly that (no entry equal to kt, no two consecutive entries
 * met with equal hi, including the one after the last member) and
 * otherwise falls back to the one pass.  With 32 bits, that happens about
 * once in 2^32 / (n * V) walks.
 */
#define RING_GHOST	4096	/* recent misses remembered (power of 2) */
#define RING_DIR_SHIFT	3	/* about 2^3 entries per directory range */
#define RING_DIR_MAX	20
#define GMEMO_SETS	2048	/* group memo: 2-way sets (power of 2) */
#define GMEMO_MAX	16	/* longest group memoised */

/*
 * The group memo: the affinity group of a (ring identity, key hash) pair,
 * 64 bytes an entry, 2 ways a set, the most recent in way 0.  A group is a
 * pure function of the ring identity (ids version, prefix fingerprint, V,
 * n) and the key hash, so an entry that matches all of them is the group
 * the ring walk or the one pass would find: a returning key costs one
 * probe into 256 KiB instead of the ring's memory, which is what keeps
 * many tenants (each with its own ring, together larger than the caches)
 * as cheap as one.
 */
struct gmemo {
	uint64_t	 kh;
	uint64_t	 ids;
	uint64_t	 pfx;
	uint32_t	 V;
	uint16_t	 n;
	uint16_t	 m;		/* 0: empty */
	uint16_t	 g[GMEMO_MAX];
};
_Static_assert(sizeof(struct gmemo) == 64, "one cache line per entry");

struct ring {
	uint64_t	 ids, pfx, V, fp;
	size_t		 n, len, bytes;
	unsigned	 dbits;
	uint32_t	*hi;		/* len sorted top halves (the allocation) */
	uint32_t	*dir;		/* 2^dbits + 1 range starts */
	uint16_t	*ix;		/* len candidate indices */
	uint32_t	 next;		/* chain, or free list; RNIL: end */
	bool		 used, ref;
};

#define RNIL	UINT32_MAX

/*
 * The hint index: the snapshot's candidate ids by a hash of their bytes,
 * for the session plan's lookup of the last cluster named by the request.
 * sg_snapshot_find() compares ids in the candidate records (752 bytes
 * each, the length and the bytes on two cache lines), so each probe reads
 * another record's lines, serially, before the decision starts: at 64
 * candidates that lookup was most of the session rules' cost.  Here a
 * probe reads one 8-byte entry (22 tag bits, the id's length, the index
 * and the offset of its bytes), tag and length are one compare, and the
 * entry that matches is compared byte for byte with a packed copy of the
 * ids (about 20 bytes each, read together), so the answer is exactly
 * sg_snapshot_find()'s.  The hash reads only the id's first and last 8
 * bytes and its length (two loads, two multiplies: ids of up to 16 bytes
 * are read whole); an index whose ids that hash cannot tell apart (longer
 * ids differing only in the middle) is built again with a hash of every
 * word instead, so no id list makes the probes long.  An index holds
 * for one ids version (the ordered ids, sg_snapshot.h: the version
 * changes whenever they do, the same contract the cached rings rely on)
 * and is built, O(n), the second time a version is looked up among the
 * last HINT_WAYS unindexed ones.  The probe reads the current index; up
 * to HINT_WAYS - 1 more are held aside, so that a router deciding over a
 * few snapshots in turn (one per model, as sg-sim's fleet and a proxy
 * serving several models do) swaps the right one in, a copy of the
 * struct, instead of falling back to sg_snapshot_find() or rebuilding it
 * per decision.  A version seen once and never again (a snapshot rebuilt
 * per call) still builds nothing.
 */
struct hintix {
	/* read by every probe, together */
	uint64_t	 ids;		/* the ids version indexed */
	size_t		 n;		/* candidates indexed; 0: no index */
	size_t		 nfast;		/* n if hashed by the ends, else SIZE_MAX */
	bool		 whole;		/* hashed by every word (hint_hash_all) */
	unsigned char	 shift;		/* 64 - log2(entries): slot = h >> shift */
	uint32_t	 mask;		/* entries - 1 */
	uint64_t	*e;		/* entries (HINT_*); 0: empty */
	char		*text;		/* the ids, packed */
	/* the build's */
	size_t		 cap;		/* entries allocated */
	size_t		 tcap;		/* text allocated */
};

/*
 * An entry: the hash's top 22 bits (the tag) and the id's length above
 * HINT_KEY, so that one shift compares both; the candidate index + 1
 * (never 0 in a used entry) and the id's offset in text below, so that
 * the bytes are one load away from the entry.
 */
#define HINT_KEY	33		/* tag | len << HINT_KEY */
#define HINT_IX		20		/* (index + 1) << HINT_IX */
#define HINT_TAG	(~0ULL << 42)
#define HINT_OFF	((1ULL << HINT_IX) - 1)

_Static_assert(SG_ID_MAX < 1 << 9 && SG_MAX_CANDIDATES < 1 << 13 &&
    (uint64_t)SG_MAX_CANDIDATES * SG_ID_MAX <= HINT_OFF + 1,
    "a hint index entry holds a length, an index and an offset");

#define HINT_WAYS	4	/* hint indexes kept (ids versions) */

struct sgi_rings {
	struct ring	*slot;
	uint32_t	 nslot, capslot, freelist, hand;
	uint32_t	*bucket;	/* chain heads; nbucket a power of 2 */
	uint32_t	 nbucket;
	size_t		 bytes;
	uint64_t	 ghost[RING_GHOST];
	struct sgi_ring_stats st;
	struct gmemo	*memo;		/* GMEMO_SETS * 2, or NULL */
	struct hintix	 hint;		/* the session plan's id lookups */
	struct hintix	 hold[HINT_WAYS - 1];	/* indexes held aside */
	uint64_t	 hseen[HINT_WAYS];	/* versions last looked up
						   unindexed */
	unsigned	 hseen_at, hold_at;	/* the next to replace */
};

static void
hint_free(struct hintix *T)
{
	free(T->e);
	free(T->text);
	memset(T, 0, sizeof(*T));
	T->nfast = SIZE_MAX;	/* no index */
}

static void
hints_free(sgi_rings *R)
{
	size_t i;

	hint_free(&R->hint);
	for (i = 0; i < HINT_WAYS - 1; i++)
		hint_free(&R->hold[i]);
}

static unsigned
ring_dbits(size_t len)
{
	unsigned b = 0;

	while (b < RING_DIR_MAX && ((size_t)1 << (b + 1 + RING_DIR_SHIFT)) <=
	    len)
		b++;
	return b;
}

size_t
sgi_ring_bytes(size_t n, uint64_t V)
{
	size_t len;

	if (n == 0 || n > SG_MAX_CANDIDATES || V > SIZE_MAX / 8 / n)
		return SIZE_MAX;
	len = (size_t)(n * V);
	return sizeof(struct ring) + len * (sizeof(uint32_t) +
	    sizeof(uint16_t)) + (((size_t)1 << ring_dbits(len)) + 1) *
	    sizeof(uint32_t);
}

static uint64_t
ring_fp(uint64_t ids, uint64_t pfx, uint64_t V, size_t n)
{
	uint64_t x = ids ^ (pfx * 0x9e3779b97f4a7c15ULL) ^
	    (V * 0xc2b2ae3d27d4eb4fULL) ^ ((uint64_t)n << 40);

	x = (x ^ (x >> 31)) * 0xbf58476d1ce4e5b9ULL;
	return x ^ (x >> 29);
}

static struct ring *
rings_find(sgi_rings *R, uint64_t fp, uint64_t ids, uint64_t pfx, uint64_t V,
    size_t n)
{
	uint32_t i;

	if (R == NULL || R->nbucket == 0)
		return NULL;
	for (i = R->bucket[fp & (R->nbucket - 1)]; i != RNIL;
	    i = R->slot[i].next) {
		struct ring *r = &R->slot[i];

		if (r->fp == fp && r->ids == ids && r->pfx == pfx &&
		    r->V == V && r->n == n)
			return r;
	}
	return NULL;
}

static void
rings_unlink(sgi_rings *R, uint32_t i)
{
	struct ring *r = &R->slot[i];
	uint32_t *p = &R->bucket[r->fp & (R->nbucket - 1)];

	while (*p != i)
		p = &R->slot[*p].next;
	*p = r->next;
	R->bytes -= r->bytes;
	R->st.rings--;
	free(r->hi);
	memset(r, 0, sizeof(*r));
	r->next = R->freelist;
	R->freelist = i;
	R->st.evictions++;
}

/* CLOCK: drop rings until need more bytes fit in budget. */
static void
rings_evict(sgi_rings *R, size_t budget, size_t need)
{
	while (R->bytes > 0 && R->bytes > budget - need) {
		struct ring *r;

		if (R->hand >= R->nslot)
			R->hand = 0;
		r = &R->slot[R->hand];
		if (r->used && r->ref)
			r->ref = false;
		else if (r->used)
			rings_unlink(R, R->hand);
		R->hand++;
	}
}

void
sgi_rings_trim(sgi_scratch *s)
{
	sgi_rings *R = s->rings;

	if (R == NULL)
		return;
	rings_evict(R, s->ring_budget, 0);
	if (s->ring_budget == 0) {
		free(R->slot);
		free(R->bucket);
		free(R->memo);
		hints_free(R);
		free(R);
		s->rings = NULL;
	}
}

void
sgi_rings_stats(const sgi_scratch *s, struct sgi_ring_stats *st)
{
	memset(st, 0, sizeof(*st));
	if (s->rings != NULL) {
		*st = s->rings->st;
		st->bytes = s->rings->bytes;
	}
	st->onepass = s->st_onepass;
	st->ambiguous = s->st_ambiguous;
}

static void
rings_free(sgi_rings *R)
{
	uint32_t i;

	if (R == NULL)
		return;
	for (i = 0; i < R->nslot; i++)
		free(R->slot[i].hi);
	free(R->slot);
	free(R->bucket);
	free(R->memo);
	hints_free(R);
	free(R);
}

/* A free slot, the table grown to keep chains short; RNIL on ENOMEM. */
static uint32_t
rings_slot(sgi_rings *R)
{
	uint32_t i, nb, *b;
	struct ring *p;

	if (R->freelist != RNIL) {
		i = R->freelist;
		R->freelist = R->slot[i].next;
		return i;
	}
	if (R->nslot == R->capslot) {
		uint32_t cap = R->capslot != 0 ? R->capslot * 2 : 16;

		if (cap > RNIL / 2 ||
		    (p = realloc(R->slot, cap * sizeof(*p))) == NULL)
			return RNIL;
		R->slot = p;
		R->capslot = cap;
	}
	if (R->nslot >= R->nbucket) {
		nb = R->nbucket != 0 ? R->nbucket * 2 : 32;
		if ((b = malloc(nb * sizeof(*b))) == NULL)
			return RNIL;
		memset(b, 0xff, nb * sizeof(*b));	/* RNIL */
		for (i = 0; i < R->nslot; i++)
			if (R->slot[i].used) {
				uint32_t h = (uint32_t)(R->slot[i].fp &
				    (nb - 1));

				R->slot[i].next = b[h];
				b[h] = i;
			}
		free(R->bucket);
		R->bucket = b;
		R->nbucket = nb;
	}
	i = R->nslot++;
	memset(&R->slot[i], 0, sizeof(R->slot[i]));
	return i;
}

/*
 * Sort the entries (hi << 16 | index, in e[0..len)) into r: a counting
 * pass by the directory's top bits places them in their ranges (this is
 * the directory), then each range, about 2^RING_DIR_SHIFT entries, is
 * insertion-sorted by hi.  The order of equal hi values is left as it
 * falls: the walk never relies on it.
 */
static void
ring_place(struct ring *r, const uint64_t *e, uint32_t *cur)
{
	size_t nd = (size_t)1 << r->dbits, k, b, i, j;
	unsigned sh = 48 - r->dbits;	/* entry -> directory range */

	memset(r->dir, 0, (nd + 1) * sizeof(*r->dir));
	for (k = 0; k < r->len; k++)
		r->dir[(size_t)(e[k] >> sh) + 1]++;
	for (b = 0; b < nd; b++) {
		r->dir[b + 1] += r->dir[b];
		cur[b] = r->dir[b];
	}
	for (k = 0; k < r->len; k++) {
		size_t at = cur[(size_t)(e[k] >> sh)]++;

		r->hi[at] = (uint32_t)(e[k] >> 16);
		r->ix[at] = (uint16_t)(e[k] & 0xffff);
	}
	for (b = 0; b < nd; b++)
		for (i = r->dir[b] + 1; i < r->dir[b + 1]; i++) {
			uint32_t th = r->hi[i];
			uint16_t ti = r->ix[i];

			for (j = i; j > r->dir[b] && r->hi[j - 1] > th; j--) {
				r->hi[j] = r->hi[j - 1];
				r->ix[j] = r->ix[j - 1];
			}
			r->hi[j] = th;
			r->ix[j] = ti;
		}
}

/*
 * Build and cache the ring for the prefix (prepared); NULL when it does not
 * fit or memory runs out.
 */
static struct ring *
ring_build(struct waw *w, const sgi_hashbuf *prefix, uint64_t fp,
    uint64_t ids, uint64_t pfx, uint64_t V)
{
	sgi_scratch *s = w->s;
	sgi_rings *R = s->rings;
	size_t n = w->x->n, len = (size_t)(n * V), need, k = 0, i, j, nd;
	unsigned coarse = s->ring_coarse >= 1 && s->ring_coarse < 32 ?
	    s->ring_coarse : 32, dbits = ring_dbits(len);
	uint32_t slot, mask, *cur = NULL;
	uint64_t v, hv[VN_BATCH], *e = NULL;
	struct ring *r = NULL;
	void *mem;

	if ((need = sgi_ring_bytes(n, V)) > s->ring_budget)
		return NULL;
	nd = (size_t)1 << dbits;
	e = malloc(len * sizeof(*e));
	cur = malloc(nd * sizeof(*cur));
	if (e == NULL || cur == NULL)
		goto out;
	rings_evict(R, s->ring_budget, need);
	if ((slot = rings_slot(R)) == RNIL)
		goto out;
	if ((mem = malloc(need - sizeof(struct ring))) == NULL) {
		R->slot[slot].next = R->freelist;
		R->freelist = slot;
		goto out;
	}
	mask = coarse == 32 ? UINT32_MAX : ~(UINT32_MAX >> coarse);
	for (i = 0; i < n; i++) {
		const sg_cluster *c = cl(w, i);

		for (v = 0; v < V; v += VN_BATCH) {
			size_t nb = V - v < VN_BATCH ? (size_t)(V - v) :
			    VN_BATCH;

			sgi_ring_entry_hashes(prefix, c->id, c->id_len, v, nb,
			    hv);
			for (j = 0; j < nb; j++)
				e[k++] = (uint64_t)((uint32_t)(hv[j] >> 32) &
				    mask) << 16 | i;
		}
	}
	r = &R->slot[slot];
	r->ids = ids;
	r->pfx = pfx;
	r->V = V;
	r->fp = fp;
	r->n = n;
	r->len = len;
	r->bytes = need;
	r->dbits = dbits;
	r->hi = mem;
	r->dir = r->hi + len;
	r->ix = (uint16_t *)(r->dir + nd + 1);
	ring_place(r, e, cur);
	r->used = true;
	r->ref = false;
	r->next = R->bucket[fp & (R->nbucket - 1)];
	R->bucket[fp & (R->nbucket - 1)] = slot;
	R->bytes += need;
	R->st.builds++;
	R->st.rings++;
out:
	free(e);
	free(cur);
	return r;
}

/*
 * Walk a cached ring from kh to m distinct candidates; 0 when truncated
 * hashes tie where the order matters (then the caller takes one pass).
 */
static size_t
ring_walk(sgi_scratch *s, const struct ring *r, uint64_t kh, size_t m,
    size_t *group, unsigned coarse)
{
	const uint32_t *hi = r->hi;
	uint32_t kt = (uint32_t)(kh >> 32), gen, prev = 0;
	size_t b, lo, n, pos, got, i, len = r->len;

	if (coarse >= 1 && coarse < 32)
		kt &= ~(UINT32_MAX >> coarse);
	b = (size_t)((uint64_t)kt >> (32 - r->dbits));
	/* the first entry with hi >= kt is in [dir[b], dir[b + 1]] */
	lo = r->dir[b];
	n = r->dir[b + 1];
	__builtin_prefetch(&hi[lo]);	/* two lines fetched together */
	__builtin_prefetch(&r->ix[lo]);
	while (lo < n) {
		size_t mid = lo + (n - lo) / 2;

		if (hi[mid] < kt)
			lo = mid + 1;
		else
			n = mid;
	}
	if (lo < len && hi[lo] == kt)
		return 0;
	if (lo == len)
		lo = 0;
	gen = fresh_mark(s);
	for (got = 0, pos = lo, i = 0; got < m && i < len; i++) {
		size_t c = r->ix[pos];

		if (i > 0 && hi[pos] == prev)
			return 0;
		prev = hi[pos];
		if (++pos == len)
			pos = 0;
		if (s->mark[c] == gen)
			continue;
		s->mark[c] = gen;
		group[got++] = c;
	}
	if (i < len && hi[pos] == prev)
		return 0;	/* the next entry might come first */
	return got;
}

static struct gmemo *
gmemo_set(sgi_rings *R, uint64_t fp, uint64_t kh)
{
	uint64_t x = (kh ^ (fp * 0x9e3779b97f4a7c15ULL)) * 0xff51afd7ed558ccdULL;

	return &R->memo[2 * (size_t)((x >> 40) & (GMEMO_SETS - 1))];
}

static bool
gmemo_match(const struct gmemo *e, uint64_t kh, uint64_t ids, uint64_t pfx,
    uint64_t V, size_t n, size_t m)
{
	return e->m == m && e->kh == kh && e->ids == ids && e->pfx == pfx &&
	    e->V == V && e->n == n;
}

/* The memoised group into group[0..m), or false. */
static bool
gmemo_get(sgi_rings *R, uint64_t fp, uint64_t kh, uint64_t ids, uint64_t pfx,
    uint64_t V, size_t n, size_t m, size_t *group)
{
	const struct gmemo *e;
	size_t i, w;

	if (R->memo == NULL)
		return false;
	e = gmemo_set(R, fp, kh);
	for (w = 0; w < 2; w++, e++)
		if (gmemo_match(e, kh, ids, pfx, V, n, m)) {
			for (i = 0; i < m; i++)
				group[i] = e->g[i];
			return true;
		}
	return false;
}

/* Remember group[0..m) (way 0; the previous way 0 moves to way 1). */
static void
gmemo_put(sgi_rings *R, uint64_t fp, uint64_t kh, uint64_t ids, uint64_t pfx,
    uint64_t V, size_t n, size_t m, const size_t *group)
{
	struct gmemo *e;
	size_t i;

	if (m == 0 || m > GMEMO_MAX || n > UINT16_MAX || V > UINT32_MAX)
		return;
	if (R->memo == NULL && (R->memo = calloc(2 * GMEMO_SETS,
	    sizeof(*R->memo))) == NULL)
		return;
	e = gmemo_set(R, fp, kh);
	e[1] = e[0];
	e->kh = kh;
	e->ids = ids;
	e->pfx = pfx;
	e->V = (uint32_t)V;
	e->n = (uint16_t)n;
	e->m = (uint16_t)m;
	for (i = 0; i < m; i++)
		e->g[i] = (uint16_t)group[i];
}

/* The snapshot's ids version (sg_snapshot.h). */
static inline uint64_t
waw_ids(const struct waw *w)
{
	return w->x->snap->ids_ver;
}

/* The scratch's ring caches, allocated on first use; NULL on ENOMEM. */
static sgi_rings *
rings_get(sgi_scratch *s)
{
	sgi_rings *R;
	size_t i;

	if ((R = s->rings) == NULL) {
		if ((R = calloc(1, sizeof(*R))) == NULL)
			return NULL;
		R->freelist = RNIL;
		R->hint.nfast = SIZE_MAX;	/* no index */
		for (i = 0; i < HINT_WAYS - 1; i++)
			R->hold[i].nfast = SIZE_MAX;
		s->rings = R;
	}
	return R;
}

/*
 * The hint index's hashes.  A slot is the hash's top bits and the tag its
 * top 22 bits (an entry keeps them above the id's length, HINT_KEY).  A
 * product's high bits depend on every input bit but mix the input's high
 * bits little (a change at bit 56 moves only the product's top 8 bits by
 * one of a few values), and ids that differ only in their last characters
 * differ only in the high bytes of their last word: with the ends each
 * multiplied on their own, 84 of 256 ids "region-NN-cluster-NNN" left
 * their home slot.  The ends hash therefore folds one 128-bit product
 * (its high and low halves XORed), whose high half mixes every input bit
 * into every output bit: one multiplication, and the displaced ids are
 * those of a random hash (about 15% of them in a table a quarter full).
 */
#define HINT_K1		0x9e3779b97f4a7c15ULL
#define HINT_K2		0xc2b2ae3d27d4eb4fULL

/*
 * The hash of every 8-byte word of p[0..len) (len > 0; the last one
 * overlapping), each multiplied on its own and folded in by a rotation:
 * for indexes whose ids the ends hash cannot tell apart.
 */
static inline uint64_t
hint_hash_all(const char *p, size_t len)
{
	uint64_t h = (uint64_t)len * HINT_K1, w = 0;
	size_t i;

	if (len < 8) {
		for (i = 0; i < len; i++)
			w = w << 8 | (unsigned char)p[i];
		h ^= w * 0xff51afd7ed558ccdULL;
	} else {
		for (i = 0; i + 8 < len; i += 8) {
			memcpy(&w, p + i, sizeof(w));
			h ^= (w + i) * 0xff51afd7ed558ccdULL;
			h = h << 23 | h >> 41;
		}
		memcpy(&w, p + len - 8, sizeof(w));	/* the last 8 bytes */
		h ^= w * HINT_K2;
	}
	h ^= h >> 29;		/* the rotations left low bits high */
	return h * HINT_K1;
}

/*
 * The first and the last word of p[0..len) (len > 0): 8 bytes each (they
 * overlap below 16), 4 below 8, single bytes below 4.
 */
static inline void
hint_ends(const char *p, size_t len, uint64_t *a, uint64_t *b)
{
	uint32_t x, y;

	if (len >= 8) {
		memcpy(a, p, sizeof(*a));
		memcpy(b, p + len - 8, sizeof(*b));
	} else if (len >= 4) {
		memcpy(&x, p, sizeof(x));
		memcpy(&y, p + len - 4, sizeof(y));
		*a = x;
		*b = y;
	} else {
		*a = (unsigned char)p[0] | (uint64_t)(unsigned char)p[len / 2] <<
		    8 | (uint64_t)(unsigned char)p[len - 1] << 16;
		*b = 0;
	}
}

/* The cheap hash: the ends and the length (ids of up to 16 bytes whole). */
static inline uint64_t
hint_hash_ends(uint64_t a, uint64_t b, size_t len)
{
	__extension__ typedef unsigned __int128 u128;
	u128 m = (u128)(a ^ HINT_K1) * ((b + len) ^ HINT_K2);

	return (uint64_t)(m >> 64) ^ (uint64_t)m;
}

static inline uint64_t
hint_hash(const struct hintix *T, const char *p, size_t len)
{
	uint64_t a, b;

	if (T->whole)
		return hint_hash_all(p, len);
	hint_ends(p, len, &a, &b);
	return hint_hash_ends(a, b, len);
}

/* Grow *p to hold n elements of size bytes (*cap counts them). */
static int
hint_grow(void **p, size_t *cap, size_t n, size_t size)
{
	void *q;

	if (n <= *cap)
		return 0;
	if ((q = malloc(n * size)) == NULL)
		return SG_ENOMEM;
	free(*p);
	*p = q;
	*cap = n;
	return 0;
}

/*
 * Place the n ids under T's hash; false when two distinct ids share a
 * tag and length (only the ends hash can make that likely).
 */
static bool
hint_place(struct hintix *T, const sg_cluster *cls, size_t n)
{
	size_t i, j, mask = T->mask;
	uint64_t h, key, e, off = 0;

	memset(T->e, 0, (mask + 1) * sizeof(*T->e));
	for (i = 0; i < n; i++) {
		h = hint_hash(T, cls[i].id, cls[i].id_len);
		key = (h & HINT_TAG) | (uint64_t)cls[i].id_len << HINT_KEY;
		for (j = (size_t)(h >> T->shift); (e = T->e[j]) != 0;
		    j = (j + 1) & mask)
			if ((e ^ key) >> HINT_KEY == 0 && !T->whole)
				return false;	/* ids are unique: distinct */
		T->e[j] = key | (uint64_t)(i + 1) << HINT_IX | off;
		off += cls[i].id_len;
	}
	return true;
}

/* Index the n candidates cls[] under ids version ids; SG_ENOMEM. */
static int
hint_build(struct hintix *T, const sg_cluster *cls, size_t n, uint64_t ids)
{
	size_t ne = 16, i, tl = 0;
	unsigned bits = 4;

	T->n = 0;		/* no index until it is whole */
	T->nfast = SIZE_MAX;
	for (i = 0; i < n; i++)
		tl += cls[i].id_len;
	while (ne < 4 * n) {	/* at most a quarter full: short probes */
		ne *= 2;
		bits++;
	}
	if (hint_grow((void **)&T->e, &T->cap, ne, sizeof(*T->e)) != 0 ||
	    hint_grow((void **)&T->text, &T->tcap, tl, 1) != 0)
		return SG_ENOMEM;
	T->shift = (unsigned char)(64 - bits);
	T->mask = (uint32_t)(ne - 1);
	for (i = 0, tl = 0; i < n; i++) {	/* the offsets hint_place() gives */
		memcpy(T->text + tl, cls[i].id, cls[i].id_len);
		tl += cls[i].id_len;
	}
	T->whole = false;
	if (!hint_place(T, cls, n)) {
		T->whole = true;
		(void)hint_place(T, cls, n);
	}
	T->ids = ids;
	T->n = n;
	T->nfast = T->whole || n == 0 ? SIZE_MAX : n;
	return 0;
}

/*
 * t[0..len) == p[0..len), len > 0, where a and b are p's ends
 * (hint_ends()): the ends, then the words between (ids are short: up to
 * 24 bytes that is one more word).
 */
static inline bool
hint_eq(const char *t, const char *p, size_t len, uint64_t a, uint64_t b)
{
	uint64_t x, y, u, d;
	size_t i;

	if (len < 8) {
		for (i = 0, d = 0; i < len; i++)
			d |= (uint64_t)(t[i] ^ p[i]);
		return d == 0;
	}
	memcpy(&x, t, 8);
	memcpy(&u, t + len - 8, 8);
	d = (x ^ a) | (u ^ b);
	if (len > 16) {
		memcpy(&x, t + 8, 8);
		memcpy(&y, p + 8, 8);
		d |= x ^ y;
		for (i = 16; i + 8 < len; i += 8) {
			memcpy(&x, t + i, 8);
			memcpy(&y, p + i, 8);
			d |= x ^ y;
		}
	}
	return d == 0;
}

static void
hint_swap(struct hintix *a, struct hintix *b)
{
	struct hintix t = *a;

	*a = *b;
	*b = t;
}

/* Whether ids is among the versions last looked up unindexed; else noted. */
static bool
hint_seen(sgi_rings *R, uint64_t ids)
{
	size_t i;

	for (i = 0; i < HINT_WAYS; i++)
		if (R->hseen[i] == ids)
			return true;
	R->hseen[R->hseen_at] = ids;
	R->hseen_at = (R->hseen_at + 1) % HINT_WAYS;
	return false;
}

/*
 * hint_find() when the current index does not hold the call's snapshot:
 * swap in a held index that does, or index it (the second time its ids
 * version is looked up, into the buffers of the held index replaced
 * longest ago, the current one held in its place), or answer with
 * sg_snapshot_find().
 */
static __attribute__((noinline)) long
hint_find_slow(struct waw *w, const char *hint, size_t len)
{
	const sg_snapshot *snap = w->x->snap;
	uint64_t ids = waw_ids(w);
	size_t n = w->x->n, i;
	struct hintix *T;
	sgi_rings *R;

	if (w->s->reference || (R = rings_get(w->s)) == NULL)
		return sg_snapshot_find(snap, hint, len);
	T = &R->hint;
	if (T->n == n && T->ids == ids)
		return -2;	/* indexed: the caller probes */
	for (i = 0; i < HINT_WAYS - 1; i++)
		if (R->hold[i].n == n && R->hold[i].ids == ids) {
			hint_swap(T, &R->hold[i]);
			return -2;
		}
	if (!hint_seen(R, ids))
		return sg_snapshot_find(snap, hint, len);	/* once */
	hint_swap(T, &R->hold[R->hold_at]);
	R->hold_at = (R->hold_at + 1) % (HINT_WAYS - 1);
	if (hint_build(T, w->cls, n, ids) != 0)
		return sg_snapshot_find(snap, hint, len);
	return -2;
}

/*
 * The chain of index T from slot h >> T->shift for the id p[0..len), whose
 * first and last words (hint_ends) are a and b: its candidate index or -1.
 */
static inline __attribute__((always_inline)) long
hint_chain(const struct hintix *T, uint64_t h, const char *p, size_t len,
    uint64_t a, uint64_t b)
{
	uint64_t key = (h & HINT_TAG) | (uint64_t)len << HINT_KEY, e;
	size_t i;
	long k;

	for (i = (size_t)(h >> T->shift); (e = T->e[i]) != 0;
	    i = (i + 1) & T->mask) {
		if ((e ^ key) >> HINT_KEY != 0)
			continue;
		k = (long)(e >> HINT_IX & 0x1fff) - 1;
		if (hint_eq(T->text + (e & HINT_OFF), p, len, a, b))
			return k;
	}
	return -1;
}

/*
 * The general probe of index T for the id p[0..len), 0 < len <=
 * SG_ID_MAX: its candidate index or -1.
 */
static __attribute__((noinline)) long
hint_probe(const struct hintix *T, const char *p, size_t len)
{
	uint64_t h, a, b;

	hint_ends(p, len, &a, &b);
	h = T->whole ? hint_hash_all(p, len) : hint_hash_ends(a, b, len);
	return hint_chain(T, h, p, len, a, b);
}

/*
 * The usual probe, inline: an index hashed by the ends (T->nfast holds
 * its candidate count) and an id of 8..24 bytes, which three words
 * compare whole (the first, the last, and the one at 8, or again the last
 * below 17 bytes).  The chain's first two entries are read together and
 * the first of them with the id's tag and length is taken without a
 * branch (which of the two it is depends on the id, so a branch there
 * would be mispredicted for the displaced ids); when neither has it (an
 * id displaced further, or absent) or its bytes differ (another id with
 * that tag, rare), the general walk answers from the start, so the answer
 * is the same as walking the chain.
 */
static inline __attribute__((always_inline)) long
hint_probe_fast(const struct hintix *T, const char *p, size_t len)
{
	uint64_t a, b, h, e0, e1, e, x, y, key, miss;
	size_t mid = len > 16 ? 8 : len - 8, i;
	const char *t;

	memcpy(&a, p, sizeof(a));
	memcpy(&b, p + len - 8, sizeof(b));
	h = hint_hash_ends(a, b, len);
	key = (h & HINT_TAG) | (uint64_t)len << HINT_KEY;
	i = (size_t)(h >> T->shift);
	e0 = T->e[i];
	e1 = T->e[(i + 1) & T->mask];
	if (e0 == 0)
		return -1;	/* an empty chain */
	/*
	 * e0 unless its tag or length differs, by a mask (a conditional
	 * here is compiled as a branch, the test below being implied);
	 * a used entry is never 0 and 0 never has a length: no match
	 */
	miss = 0 - (uint64_t)((e0 ^ key) >> HINT_KEY != 0);
	e = e0 ^ ((e0 ^ e1) & miss);
	if (__builtin_expect((e ^ key) >> HINT_KEY != 0, 0))
		return hint_probe(T, p, len);
	t = T->text + (e & HINT_OFF);
	memcpy(&x, t, sizeof(x));
	memcpy(&y, t + len - 8, sizeof(y));
	a ^= x;
	b ^= y;
	memcpy(&x, t + mid, sizeof(x));
	memcpy(&y, p + mid, sizeof(y));
	if (__builtin_expect((a | b | (x ^ y)) == 0, 1))
		return (long)(e >> HINT_IX & 0x1fff) - 1;
	return hint_probe(T, p, len);
}

/*
 * Candidate index of the id hint[0..len) (len > 0) in the call's snapshot,
 * or -1: sg_snapshot_find()'s answer, through the hint index.  The index
 * holds when it was built for this ids version and candidate count (n is
 * 0 without one, nfast SIZE_MAX); it is never built in reference mode (set
 * before a router's first decision, sgi_scratch), which the slow path
 * checks.  One test of the count covers the ends hash (nfast), the id's
 * length the inline probe's three words.
 */
static inline __attribute__((always_inline)) long
hint_find(struct waw *w, const char *hint, size_t len)
{
	sgi_rings *R = w->s->rings;
	long k;

	if (__builtin_expect(R != NULL && R->hint.nfast == w->x->n &&
	    R->hint.ids == waw_ids(w) && len - 8 <= 24 - 8, 1))
		return hint_probe_fast(&R->hint, hint, len);
	if ((k = hint_find_slow(w, hint, len)) != -2)
		return k;
	if (len > SG_ID_MAX)
		return -1;	/* no candidate id is that long */
	return hint_probe(&w->s->rings->hint, hint, len);
}

/*
 * Fill group[] with the affinity group for the request's key: min(K, n)
 * distinct candidates in ring-walk order.  Exclusions are not applied.
 */
static size_t
affinity_group(struct waw *w, size_t *group)
{
	sgi_ctx *x = w->x;
	sgi_scratch *s = w->s;
	const char *key = x->req->cache_affinity_key;
	uint64_t V = w->d->virtual_nodes > 0 ? w->d->virtual_nodes : 1;
	size_t n = x->n, m = w->d->selection_count, got;
	sgi_hashbuf prefix;
	uint64_t kh, ids, pfx, fp, g;
	struct ring *r;
	sgi_rings *R;

	if (m > n)
		m = n;
	if (m == 0)
		return 0;
	sgi_ring_prefix(&prefix, w->d, x->req);
	kh = sgi_ring_key_hash(&prefix, key, strlen(key));
	if (s->reference && (got = group_reference(w, &prefix, kh, V, m,
	    group)) == m)
		return got;
	if (s->reference || s->ring_budget == 0)
		goto onepass;
	if ((R = rings_get(s)) == NULL)
		goto onepass;
	ids = waw_ids(w);
	pfx = sgi_hb_xxh3(&prefix);
	fp = ring_fp(ids, pfx, V, n);
	if (gmemo_get(R, fp, kh, ids, pfx, V, n, m, group)) {
		R->st.hits++;		/* counted as the ring's hit */
		return m;
	}
	if (sgi_ring_bytes(n, V) > s->ring_budget) {
		sgi_hb_prepare(&prefix);	/* n * V hashes */
		got = group_onepass(w, &prefix, kh, V, m, group);
		gmemo_put(R, fp, kh, ids, pfx, V, n, got, group);
		return got;
	}
	if ((r = rings_find(R, fp, ids, pfx, V, n)) != NULL) {
		R->st.hits++;
		r->ref = true;
	} else {
		R->st.misses++;
		g = R->ghost[fp & (RING_GHOST - 1)];
		R->ghost[fp & (RING_GHOST - 1)] = fp;
		if (g != fp && R->bytes + sgi_ring_bytes(n, V) >
		    s->ring_budget)
			goto remember;	/* full, first miss: no ring yet */
		sgi_hb_prepare(&prefix);
		r = ring_build(w, &prefix, fp, ids, pfx, V);
		if (r == NULL)
			goto remember;
	}
	if ((got = ring_walk(s, r, kh, m, group, s->ring_coarse)) == m) {
		gmemo_put(R, fp, kh, ids, pfx, V, n, got, group);
		return got;
	}
	s->st_ambiguous++;
remember:
	sgi_hb_prepare(&prefix);	/* n * V hashes (idempotent) */
	got = group_onepass(w, &prefix, kh, V, m, group);
	gmemo_put(R, fp, kh, ids, pfx, V, n, got, group);
	return got;
onepass:
	sgi_hb_prepare(&prefix);	/* n * V hashes */
	return group_onepass(w, &prefix, kh, V, m, group);
}

/* --- the session plan (stargate-lb-config(5)) ----------------------------- */

/*
 * Fill p: applies is false when the rules do not apply; then X and s are
 * the configured ones.  When they apply, classify the request (once: the
 * state is kept in it across waits and retries); p->last is the last
 * cluster's index when the session is returning and the cluster is a
 * candidate, else -1 (it is looked up on every call: the snapshot may
 * have changed).  new and stale sessions run with X' = 0 and s' = 1.0.
 */
static inline __attribute__((always_inline)) void
plan_classify(struct waw *w, bool applies, struct plan *p)
{
	sg_request *r = w->x->req;
	const char *hint;
	long li = -1;
	int st;

	p->applies = applies;
	p->state = 0;
	p->promoted = false;
	p->last = -1;
	p->x_ms = (double)w->d->affinity_wait_ms;
	p->scale = w->d->affinity_scale;
	if (!applies)
		return;
	st = r->session_state;
	hint = r->last_cluster_id;
	if (hint != NULL && hint[0] != '\0') {
		li = hint_find(w, hint, r->last_cluster_id_len != 0 ?
		    r->last_cluster_id_len : strlen(hint));
		if (st == SG_SESSION_UNCLASSIFIED)
			st = li < 0 ? SG_SESSION_STALE : SG_SESSION_RETURNING;
	} else if (st == SG_SESSION_UNCLASSIFIED)
		st = SG_SESSION_NEW;
	r->session_state = st;
	p->state = st;
	if (st == SG_SESSION_RETURNING)
		p->last = li;
	else {
		p->x_ms = 0;
		p->scale = 1.0;
	}
}

/*
 * Promote the last cluster in order[0..len): rotate positions 0..p right by
 * one when it is at p > 0; when absent, insert-and-truncate (w-a-w) puts it
 * at the front and drops the last member, keep mode leaves the order alone.
 */
static inline __attribute__((always_inline)) void
plan_promote(struct waw *w, struct plan *p, size_t *order, size_t len,
    bool insert)
{
	size_t pos, l = (size_t)p->last;
	bool moved = false;

	if (p->last >= 0 && len == 2 && insert) {
		/*
		 * K = 2: at 1 or absent, the same rotation; at 0, none.  By
		 * selection, not a branch: whether the ring put the hint
		 * first depends on the key.
		 */
		size_t o0 = order[0], o1 = order[1];

		moved = o0 != l;
		order[1] = o1 ^ ((o1 ^ o0) & (0 - (size_t)moved));
		order[0] = l;
	} else if (p->last >= 0 && len > 0 && order[0] != l) {
		for (pos = 1; pos < len && order[pos] != l; pos++)
			;
		if (pos == len)		/* absent */
			pos = insert ? len - 1 : 0;	/* truncate */
		if (pos > 0)
			memmove(&order[1], &order[0], pos * sizeof(*order));
		if (pos > 0 || insert) {
			order[0] = l;
			moved = true;
		}
	}
	p->promoted = moved;
	if (p->applies)
		w->x->req->session_promoted = moved;
}

/* The plan's decision fields (stargate-lb-config(5)). */
static inline __attribute__((always_inline)) void
plan_finish(const struct waw *w, const struct plan *p, sg_decision *out)
{
	unsigned gs = w->d->selection_count > 0 ? w->d->selection_count : 1;
	bool sel, ret, at_last, in_group;

	if (!p->applies) {
		out->classified = false;
		return;
	}
	/*
	 * Selected, and for a returning session the hint's cluster, else
	 * within the first group: ids are unique, so the hint names exactly
	 * candidate last, and no candidate when last < 0 (an index is never
	 * SIZE_MAX).  Computed whole and combined without branches: the kind
	 * (select or wait) depends on the request.
	 */
	/* read before the stores below (bools, which may alias them) */
	sel = out->kind == SG_DECIDE_SELECT;
	ret = p->state == SG_SESSION_RETURNING;
	at_last = out->index == (size_t)p->last;
	in_group = out->rank_depth <= gs;
	out->classified = true;
	out->session_state = p->state;
	out->promoted = p->promoted;
	out->primary = sel & ((ret & at_last) | (!ret & in_group));
}

/* --- outcomes ------------------------------------------------------------- */

/* The empty decision: copying it is a few vector stores, not `rep stos`. */
static const sg_decision zero_decision;

static void
out_base(const struct waw *w, sg_decision *out)
{
	*out = zero_decision;
	out->algorithm = sg_algorithm_name(w->d->algorithm);
}

static void
out_select(const struct waw *w, sg_decision *out, size_t i, unsigned depth,
    bool kv_skip, int phase)
{
	out_base(w, out);
	out->kind = SG_DECIDE_SELECT;
	out->index = i;
	out->cluster_id = cl(w, i)->id;
	out->rank_depth = depth;
	out->kv_skip = kv_skip;
	out->phase = phase;
}

static void
out_wait(const struct waw *w, sg_decision *out, double d, int phase)
{
	out_base(w, out);
	out->kind = SG_DECIDE_WAIT;
	out->recheck_at_ms = w->x->elapsed_ms + d;
	out->phase = phase;
}

static void
out_unavailable(const struct waw *w, sg_decision *out, int phase)
{
	out_base(w, out);
	out->kind = SG_DECIDE_REJECT;
	out->status = 503;
	out->code = "overloaded_error";
	out->phase = phase;
}

/* --- --explain ------------------------------------------------------------ */

/* Base candidate table at scale 1.0 (phases refine it). */
static void
explain_table(struct waw *w)
{
	const sg_algdef *d = w->d;
	json_t *cands;
	size_t i;

	if (w->x->explain == NULL)
		return;
	if ((cands = json_array()) == NULL)
		return;
	for (i = 0; i < w->x->n; i++) {
		const sg_cluster *c = cl(w, i);
		json_t *o = json_object();

		if (o == NULL)
			break;
		json_object_set_new(o, "cluster_id", json_string(c->id));
		json_object_set_new(o, "excluded",
		    json_boolean(w->s->excluded[i]));
		json_object_set_new(o, "queue_ms",
		    jnum(sgi_queue_ms(c, w->prio)));
		json_object_set_new(o, "prefill_ms",
		    jnum(sgi_prefill_ms(c, w->tokens, 1.0)));
		json_object_set_new(o, "ttft_ms", jnum(sgi_ttft_ms(c, w->tokens,
		    w->prio, 1.0, d->ignore_queue_time,
		    d->ignore_input_processing_time)));
		json_object_set_new(o, "comparator_ms",
		    jnum(sgi_comparator_ms(c, w->tokens, w->prio, 1.0)));
		json_object_set_new(o, "bucket", json_null());
		json_object_set_new(o, "has_capacity",
		    json_boolean(sgi_has_capacity(c, d->max_queued)));
		json_object_set_new(o, "affinity_rank", json_null());
		json_object_set_new(o, "kv_feasible", json_boolean(!w->pulsar ||
		    sgi_pulsar_feasible(w->x, i) != 2));
		json_array_append_new(cands, o);
	}
	json_object_set_new(w->x->explain, "candidates", cands);
	w->cands = cands;
}

static json_t *
id_list(const struct waw *w, const size_t *a, size_t n)
{
	json_t *l = json_array();
	size_t i;

	for (i = 0; l != NULL && i < n; i++)
		json_array_append_new(l, json_string(cl(w, a[i])->id));
	return l;
}

static void
explain_plan(struct waw *w, struct plan p, const size_t *orig,
    const size_t *eff, size_t len, size_t group)
{
	json_t *e = w->x->explain, *o;
	const char *hint = w->x->req->last_cluster_id;
	size_t i;

	if (e == NULL)
		return;
	json_object_set_new(e, "x_ms", json_real(p.x_ms));
	json_object_set_new(e, "scale", json_real(p.scale));
	if (p.applies && (o = json_object()) != NULL) {
		json_object_set_new(o, "state",
		    json_string(sg_session_state_name(p.state)));
		json_object_set_new(o, "promoted", json_boolean(p.promoted));
		json_object_set_new(o, "last_cluster_id",
		    hint != NULL ? json_string(hint) : json_null());
		json_object_set_new(e, "session", o);
	}
	json_object_set_new(e, "original_order", id_list(w, orig, len));
	json_object_set_new(e, "effective_order", id_list(w, eff, len));
	json_object_set_new(e, "affinity_group", id_list(w, eff, group));
	for (i = 0; i < len; i++)
		ex_set(w, eff[i], "affinity_rank",
		    json_integer((json_int_t)i + 1));
}

/* --- setup ---------------------------------------------------------------- */

/* A cache-affinity key is present (blank is absent, stargate-headers(7)). */
static bool
has_key(const sg_request *r)
{
	return r->cache_affinity_key != NULL &&
	    r->cache_affinity_key[0] != '\0';
}

static void
waw_init(struct waw *w, sgi_ctx *x, bool pulsar)
{
	static const struct waw zero;

	*w = zero;	/* vector stores, not `rep stos` */
	w->x = x;
	w->cls = sgi_snapshot_clusters(x->snap);
	w->d = x->def;
	w->s = x->scratch;
	w->tokens = x->req->input_tokens;
	w->prio = x->req->priority;
	w->slo = sgi_queue_slo(x->def, x->req, x->elapsed_ms, &w->max_q);
	w->pulsar = pulsar;
	w->cmp = pulsar ? SG_CMP_NONE : x->def->comparator;
	sgi_rng_seed(&w->rng, x->router_seed, x->def, x->req);
	explain_table(w);
}

/* The smaller of two optional waits. */
static void
min_wait(bool *have, double *acc, double v)
{
	if (!*have || v < *acc)
		*acc = v;
	*have = true;
}

/* --- wait-and-widen (stargate-lb-config(5)) ------------------------------- */

int
sgi_wait_and_widen(sgi_ctx *x, sg_decision *out)
{
	struct waw w;
	struct plan p;
	struct core r;
	size_t *all = x->scratch->idx2, *group = x->scratch->order, *orig;
	size_t m = 0;
	double elapsed = x->elapsed_ms, aw = 0;
	bool have_aw = false;

	waw_init(&w, x, false);
	if (has_key(x->req) && w.d->selection_count > 0 && x->n > 0)
		m = affinity_group(&w, group);
	if (m == 0) {
		/* No group: core selection over everything, rank 1. */
		plan_classify(&w, false, &p);
		if (x->explain != NULL) {
			json_object_set_new(x->explain, "x_ms", json_real(0));
			json_object_set_new(x->explain, "scale",
			    json_real(1.0));
		}
		core_select(&w, x->scratch->iota, x->n, 1.0, elapsed,
		    w.d->max_queued, false, &r);
		if (r.kind == CORE_SELECT)
			out_select(&w, out, r.sel, 1, false, SG_PHASE_GLOBAL);
		else if (r.kind == CORE_WAIT)
			out_wait(&w, out, r.wait, SG_PHASE_GLOBAL);
		else
			out_unavailable(&w, out, SG_PHASE_GLOBAL);
		return 0;
	}

	/* 1. the session plan may reorder the group */
	plan_classify(&w, w.d->last_cluster_affinity, &p);
	orig = x->explain != NULL ? all : NULL;
	if (orig != NULL)
		memcpy(orig, group, m * sizeof(*group));
	plan_promote(&w, &p, group, m, true);
	if (orig != NULL) {
		/* idx2 is core scratch: render the orders before any phase */
		explain_plan(&w, p, orig, group, m, m);
	}

	/* 2. affinity phase */
	core_select(&w, group, m, p.scale, elapsed, w.d->max_queued, true, &r);
	if (r.kind == CORE_SELECT) {
		out_select(&w, out, r.sel, 1, false, SG_PHASE_AFFINITY);
		goto done;
	}
	if (r.kind == CORE_WAIT) {
		aw = r.wait;
		have_aw = true;
	}

	/* 3. hold for the affinity wait */
	if (elapsed < p.x_ms) {
		double d = p.x_ms - elapsed;

		if (have_aw && aw < d)
			d = aw;
		out_wait(&w, out, d, SG_PHASE_AFFINITY);
		goto done;
	}

	/* 4. global phase over every candidate (the group included) */
	core_select(&w, x->scratch->iota, x->n, 1.0, elapsed - p.x_ms,
	    w.d->max_queued, false, &r);
	if (r.kind == CORE_SELECT)
		out_select(&w, out, r.sel, (unsigned)m + 1, false,
		    SG_PHASE_GLOBAL);
	else if (r.kind == CORE_WAIT) {
		min_wait(&have_aw, &aw, r.wait);
		out_wait(&w, out, aw, SG_PHASE_GLOBAL);
	} else if (have_aw)
		out_wait(&w, out, aw, SG_PHASE_GLOBAL);
	else
		out_unavailable(&w, out, SG_PHASE_GLOBAL);
done:
	plan_finish(&w, &p, out);
	return 0;
}

/* --- pulsar-wait-and-widen (stargate-lb-config(5)) ------------------------ */

/* 1-based position of candidate c in order[0..n), and whether an earlier
 * rank was a KV skip. */
static unsigned
rank_of(struct waw *w, const size_t *order, size_t n, size_t c, bool *kv_skip)
{
	size_t i;

	*kv_skip = false;
	for (i = 0; i < n && order[i] != c; i++)
		if (sgi_pulsar_feasible(w->x, order[i]) == 2)
			*kv_skip = true;
	return (unsigned)i + 1;
}

int
sgi_pulsar_waw(sgi_ctx *x, sg_decision *out)
{
	struct waw w;
	struct plan p;
	struct core r;
	size_t *order = x->scratch->order, nr, k, kk, open_end, width, b, rot;
	double elapsed = x->elapsed_ms, wt = 0, S, ww, bands;
	bool have_wait = false, kv, full, last_ranked = false;
	sgi_hashbuf prefix;
	sgi_rlazy lz;
	int state0;
	size_t keep[SGI_TOP_MAX];
	double ksc[SGI_TOP_MAX];
	unsigned depth;

	waw_init(&w, x, true);
	/*
	 * 1. the ranking (clobbers d1: rank before any phase).  Without a
	 * cached one, only its first k ranks, as long as no later phase
	 * needs more (lazy; the rest is ranked at step 5).
	 */
	k = w.d->selection_count > 0 ? w.d->selection_count : 1;
	state0 = x->req->session_state;	/* unranked: not classified */
	plan_classify(&w, w.d->last_cluster_affinity && has_key(x->req), &p);
	/*
	 * A cached ranking is copied with the plan's rotation applied (then
	 * rot is last's former rank, from the cache's inverse), and only as
	 * far as a phase reads it: the first k ranks now, the open set at
	 * step 5.  --explain renders the unrotated order whole, so it
	 * rotates below.
	 */
	nr = sgi_pulsar_rank_start_lazy(x, &prefix, order, &full,
	    p.applies && p.state == SG_SESSION_RETURNING &&
	    x->explain == NULL ? p.last : -1, &rot,
	    x->explain == NULL ? k : SIZE_MAX, &lz);
	if (!full) {
		kk = sgi_pulsar_top(x, &prefix, k, p.last, order, &last_ranked);
		if (kk == SIZE_MAX) {
			nr = sgi_pulsar_rank_full(x, &prefix, order);
			full = true;
		} else {
			/*
			 * R[0..k) of the rotated ranking: a ranked last
			 * cluster goes first (from wherever it ranks), the
			 * others keep their order.
			 */
			nr = kk;	/* known ranks so far */
			plan_promote(&w, &p, order, kk, last_ranked);
		}
	}
	if (nr == 0) {
		x->req->session_state = state0;
		plan_classify(&w, false, &p);
		out_unavailable(&w, out, SG_PHASE_AFFINITY);
		return 0;
	}
	kk = k < nr ? k : nr;

	/* 2. the session plan ("keep" mode) may rotate the ranking */
	if (!full)
		;	/* rotated above */
	else if (rot != SIZE_MAX) {
		/* rotated while copied: what plan_promote() would record */
		p.promoted = rot > 0;
		x->req->session_promoted = p.promoted;
	} else if (x->explain != NULL) {
		/* idx2 holds the original order until the first phase */
		memcpy(x->scratch->idx2, order, nr * sizeof(*order));
		plan_promote(&w, &p, order, nr, false);
		explain_plan(&w, p, x->scratch->idx2, order, nr, kk);
	} else
		/* last is unranked (rot would say where): nothing moves */
		plan_promote(&w, &p, order, lz.rank != NULL ? lz.done : nr,
		    false);
	S = w.d->has_band_widen ? (double)w.d->band_widen_interval_ms : p.x_ms;

	/* 3. affinity phase over the first k ranks */
	for (b = 0; !full && b < kk; b++) {
		/* the scores core_select() may clobber (d3) */
		keep[b] = order[b];
		ksc[b] = x->scratch->d3[order[b]];
	}
	core_select(&w, order, kk, p.scale, elapsed, w.d->max_queued, true, &r);
	if (r.kind == CORE_SELECT) {
		depth = rank_of(&w, order, nr, r.sel, &kv);
		out_select(&w, out, r.sel, depth, kv, SG_PHASE_AFFINITY);
		goto done;
	}
	if (r.kind == CORE_WAIT)
		min_wait(&have_wait, &wt, r.wait);

	/* 4. hold for the affinity wait */
	if (elapsed < p.x_ms) {
		min_wait(&have_wait, &wt, p.x_ms - elapsed);
		out_wait(&w, out, wt, SG_PHASE_AFFINITY);
		goto done;
	}

	/* 5. open bands: k, then +2, +4, +8, ... per elapsed band */
	if (!full) {
		/* the rest of the ranking, rotated as before */
		nr = sgi_pulsar_top_rest(x, keep, ksc, kk, order);
		p.promoted = false;
		plan_promote(&w, &p, order, nr, false);
	}
	ww = elapsed - p.x_ms;
	bands = S == 0 ? INFINITY : floor(ww / S) + 1;
	open_end = kk;
	for (b = 0, width = 2; (double)b < bands && open_end < nr; b++) {
		open_end = width < nr - open_end ? open_end + width : nr;
		width *= 2;
	}
	sgi_rlazy_fill(&lz, order, open_end);	/* a cached ranking */
	if (x->explain != NULL)
		json_object_set_new(x->explain, "open_set",
		    id_list(&w, order, open_end));

	/* 6. open-set phase at full prefill */
	core_select(&w, order, open_end, 1.0, ww, w.d->fallback_max_queued,
	    false, &r);
	if (r.kind == CORE_SELECT) {
		depth = rank_of(&w, order, nr, r.sel, &kv);
		out_select(&w, out, r.sel, depth, kv, SG_PHASE_OPEN);
		goto done;
	}

	/* 7. the nearest of: affinity wait, open-set wait, next band */
	if (r.kind == CORE_WAIT)
		min_wait(&have_wait, &wt, r.wait);
	if (open_end < nr)
		min_wait(&have_wait, &wt, S * bands - ww);
	if (have_wait)
		out_wait(&w, out, wt, SG_PHASE_OPEN);
	else
		out_unavailable(&w, out, SG_PHASE_OPEN);
done:
	plan_finish(&w, &p, out);
	return 0;
}
