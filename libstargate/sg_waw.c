/*
 * sg_waw.c — wait-and-widen (ref §4.5), pulsar-wait-and-widen (ref §4.7.1,
 * the NEW algorithm, without the eligible-primary shortcut) and the
 * session plan of last_cluster_affinity (ref §5).
 *
 * Both algorithms share one model: an affinity phase over a small ordered
 * group (the hash ring's walk for wait-and-widen, the first k ranks of the
 * pulsar ranking for pulsar-wait-and-widen), a hold of X ms, then a widening
 * phase.  Every phase is the same "core selection" (ref §4.5.2) over a
 * subset of the candidates: drop clusters over the queue SLO, unlock TTFT
 * buckets as time passes (each bucket costs gap * f ms of waiting, where the
 * gap is measured from the start of the current bucket), keep the unlocked
 * clusters with queue capacity, sample n of them and take the best under the
 * comparator.  A phase answers Selected, Wait(d) or Unavailable, and the
 * algorithms combine the answers exactly as ref §4.5.4 and §4.7.1 say.
 *
 * The session plan runs between building the affinity order and the first
 * phase: it classifies the request once (new / stale / returning, kept in
 * req->session_state across waits and retries), and for a returning
 * session moves the last cluster to the front of a per-request copy of the
 * order.  new and stale sessions run with X' = 0 and s' = 1.0.
 *
 * The consistent-hash ring (V virtual nodes per candidate, sorted by
 * (hash, cluster_id, index)) is cached in the router's scratch together
 * with the identity of the ring it holds: the snapshot's ids version (which
 * stands for the ordered candidate ids, sg_snapshot.h), an XXH3 fingerprint
 * of the hash prefix (seed, routing key, model), V and its sizes.  Checking
 * it is O(1); a hit then costs the key hash, a binary search and a walk to
 * K distinct members (marked with generation stamps, so nothing is reset
 * per decision); a miss hashes n * V entries and sorts them.  A ring too
 * large for the cache (huge V) is never materialised: the group is then computed in one
 * pass by the rotated-distance rule (an entry's position in the walk from
 * the key is (hash - key_hash) mod 2^64), which gives the same group.
 *
 * Nothing here allocates except --explain's JSON and sgi_scratch_reserve.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sg_internal.h"

#define RING_MAX	((size_t)1 << 20) /* entries worth caching (12 MiB) */

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

/* The session plan of one decision (ref §5). */
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
 * Grow the per-candidate arrays to n and the ring arrays to ring_entries
 * (a grown ring cache is invalid until rebuilt); rings larger than
 * RING_MAX are never cached, so they reserve nothing.  Capacities change only when every
 * array of the group has grown, so a failure leaves a usable scratch.
 */
int
sgi_scratch_reserve(sgi_scratch *s, size_t n, size_t ring_entries)
{
	size_t cap;

	if (n > s->cap) {
		cap = s->cap != 0 ? s->cap : 8;
		while (cap < n)
			cap *= 2;
		if (grow((void **)&s->excluded, cap, 1) != 0 ||
		    grow((void **)&s->idx, cap, sizeof(size_t)) != 0 ||
		    grow((void **)&s->idx2, cap, sizeof(size_t)) != 0 ||
		    grow((void **)&s->order, cap, sizeof(size_t)) != 0 ||
		    grow((void **)&s->d1, cap, sizeof(double)) != 0 ||
		    grow((void **)&s->d2, cap, sizeof(double)) != 0 ||
		    grow((void **)&s->d3, cap, sizeof(double)) != 0 ||
		    grow((void **)&s->mark, cap, sizeof(uint32_t)) != 0 ||
		    grow((void **)&s->flag, cap, 1) != 0)
			return SG_ENOMEM;
		/* new stamps start unmarked, nothing is excluded */
		memset(s->mark, 0, cap * sizeof(uint32_t));
		memset(s->excluded, 0, cap);
		s->excl_hi = 0;
		s->mark_gen = 0;
		s->cap = cap;
	}
	if (ring_entries > RING_MAX)
		ring_entries = 0;	/* computed without the cache */
	if (ring_entries > s->ring_cap) {
		cap = s->ring_cap != 0 ? s->ring_cap : 64;
		while (cap < ring_entries)
			cap *= 2;
		if (grow((void **)&s->ring_hash, cap, sizeof(uint64_t)) != 0 ||
		    grow((void **)&s->ring_idx, cap, sizeof(uint32_t)) != 0)
			return SG_ENOMEM;
		s->ring_cap = cap;
		s->ring_valid = false;
	}
	return 0;
}

void
sgi_scratch_free(sgi_scratch *s)
{
	if (s == NULL)
		return;
	free(s->excluded);
	free(s->idx);
	free(s->idx2);
	free(s->order);
	free(s->d1);
	free(s->d2);
	free(s->d3);
	free(s->mark);
	free(s->flag);
	free(s->ring_hash);
	free(s->ring_idx);
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
	const size_t mask = ((size_t)1 << SGI_KEY_IDX_BITS) - 1;
	const double *t = w->s->d1;
	size_t i, j, k, base;

	for (i = 0; i < n; i++)
		a[i] = (((size_t)sgi_total_key(t[a[i]]) ^ ((size_t)1 << 63)) &
		    ~mask) | a[i];
	sgi_sort_keys(a, tmp, n);
	for (i = 0; i < n; i = j) {
		base = a[i] & ~mask;
		for (j = i + 1; j < n && (a[j] & ~mask) == base; j++)
			;
		for (k = i; k < j; k++)
			a[k] &= mask;
		if (j - i > 1)
			isort(w, a + i, j - i, tmp, cmp_ttft);
	}
#else
	isort(w, a, n, tmp, cmp_ttft);
#endif
}

/* --- core selection (ref §4.5.2) ------------------------------------------ */

/* The sample comparator's value for candidate i (lower is better). */
static double
sample_value(const struct waw *w, size_t i, double scale)
{
	const sg_cluster *c = cl(w, i);

	switch (w->cmp) {
	case SG_CMP_TTFT:
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
 * the same order, as filtering the fully sorted walk.  Returns false (and
 * leaves the work to the full sort) after FAST_BUCKETS bucket starts.
 */
#define FAST_BUCKETS	4

static bool
fast_unlock(struct waw *w, size_t *idx, size_t cnt, double lo, double e,
    size_t *smp, size_t *m, bool *have_wait, double *wait)
{
	const double *t = w->s->d1;
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
				late |= w->s->flag[c];
				continue;
			}
			if (w->s->flag[c])
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

		if (!isfinite(v) || !w->s->flag[c])
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
	sort_ttft(w, smp, k, idx);	/* idx is free now */
	*m = k;
	return true;
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
	size_t cnt = 0, unlocked, m, ns, i, j, best;
	double lo = INFINITY, hi = -INFINITY, bv, v;
	int64_t kt, klo = 0, khi = 0;
	double B = (double)d->ttft_bucket_size_ms;
	bool allfinite = true, have_wait = false;
	double wait = 0;

	/* 1. estimates, exclusions, feasibility, queue SLO */
	for (i = 0; i < nset; i++) {
		size_t c = set[i];
		const sg_cluster *k = cl(w, c);
		double q, t;

		if (s->excluded[c])
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
		s->d1[c] = t;
		s->d3[c] = q;
		s->flag[c] = sgi_has_capacity(k, max_queued);
		if (!isfinite(t))
			allfinite = false;
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
	    fast_unlock(w, idx, cnt, lo, e, smp, &m, &have_wait, &wait)) {
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
	for (i = 0; i < ns; i++) {
		size_t t;

		j = i + (size_t)sgi_rng_below(&w->rng, m - i);
		t = smp[i];
		smp[i] = smp[j];
		smp[j] = t;
	}
	best = smp[0];
	bv = sample_value(w, best, scale);
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

/* --- the consistent-hash affinity group (ref §4.5.3) ---------------------- */

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

/*
 * The group by the rotated-distance rule, without materialising the ring:
 * each candidate's first position in the walk from the key is its minimum
 * (hash - key_hash) mod 2^64; the group is the m candidates with the
 * smallest (distance, id, index).  d2 holds the distances as raw bits.
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

static size_t
group_uncached(struct waw *w, const sgi_hashbuf *prefix, uint64_t kh,
    uint64_t V, size_t m, size_t *group)
{
	size_t i, n = w->x->n;
	uint64_t v;

	for (i = 0; i < n; i++) {
		const sg_cluster *c = cl(w, i);
		uint64_t best = UINT64_MAX;

		for (v = 0; v < V; v++) {
			uint64_t dist = sgi_ring_entry_hash(prefix, c->id,
			    c->id_len, v) - kh;

			if (dist < best)
				best = dist;
		}
		memcpy(&w->s->d2[i], &best, sizeof best);
		w->s->idx[i] = i;
	}
	isort(w, w->s->idx, n, w->s->idx2, cmp_dist);
	memcpy(group, w->s->idx, m * sizeof(*group));
	return m;
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
	size_t n = x->n, m = w->d->selection_count, entries, lo, hi, i, pos;
	size_t got;
	sgi_hashbuf prefix;
	uint64_t kh, ids, pfx;
	uint32_t gen;

	if (m > n)
		m = n;
	if (m == 0)
		return 0;
	sgi_ring_prefix(&prefix, w->d, x->req);
	kh = sgi_ring_key_hash(&prefix, key, strlen(key));
	if (n > UINT32_MAX || V > RING_MAX / n || n * V > s->ring_cap ||
	    s->ring_hash == NULL || s->reference) {
		if (!s->reference)
			sgi_hb_prepare(&prefix);	/* n * V hashes */
		return group_uncached(w, &prefix, kh, V, m, group);
	}

	entries = (size_t)(n * V);
	ids = sg_snapshot_ids_version(x->snap);
	pfx = sgi_hb_xxh3(&prefix);
	if (!(s->ring_valid && s->ring_ids == ids && s->ring_pfx == pfx &&
	    s->ring_V == V && s->ring_len == entries && s->ring_n == n)) {
		size_t k = 0;
		uint64_t v;

		s->ring_valid = false;
		sgi_hb_prepare(&prefix);	/* n * V hashes */
		for (i = 0; i < n; i++) {
			const sg_cluster *c = cl(w, i);

			for (v = 0; v < V; v++, k++) {
				s->ring_hash[k] = sgi_ring_entry_hash(&prefix,
				    c->id, c->id_len, v);
				s->ring_idx[k] = (uint32_t)i;
			}
		}
		ring_sort(w, s->ring_hash, s->ring_idx, entries);
		s->ring_valid = true;
		s->ring_ids = ids;
		s->ring_pfx = pfx;
		s->ring_V = V;
		s->ring_len = entries;
		s->ring_n = n;
	}

	/* first entry with hash >= kh, wrapping to 0 (branch-free search) */
	{
		const uint64_t *base = s->ring_hash;

		for (hi = entries; hi > 1; hi -= hi / 2)
			base = base[hi / 2 - 1] < kh ? base + hi / 2 : base;
		lo = (size_t)(base - s->ring_hash) + (*base < kh);
	}
	if (lo == entries)
		lo = 0;
	/* a fresh stamp marks this walk's members; reset only on wrap */
	if (++s->mark_gen == 0) {
		memset(s->mark, 0, s->cap * sizeof(*s->mark));
		s->mark_gen = 1;
	}
	gen = s->mark_gen;
	for (got = 0, pos = lo, i = 0; got < m && i < entries; i++) {
		size_t c = s->ring_idx[pos];

		if (++pos == entries)
			pos = 0;
		if (s->mark[c] == gen)
			continue;
		s->mark[c] = gen;
		group[got++] = c;
	}
	return got;
}

/* --- the session plan (ref §5) -------------------------------------------- */

/*
 * Classify (once per request) and fill p.  applies is false when the rules
 * do not apply; then X and s are the configured ones.
 */
static void
plan_classify(struct waw *w, bool applies, struct plan *p)
{
	sg_request *r = w->x->req;
	const char *hint = r->last_cluster_id;
	long li = -1;

	memset(p, 0, sizeof(*p));
	p->last = -1;
	p->x_ms = (double)w->d->affinity_wait_ms;
	p->scale = w->d->affinity_scale;
	if (!applies)
		return;
	p->applies = true;
	if (hint != NULL && hint[0] != '\0')
		li = sg_snapshot_find(w->x->snap, hint, strlen(hint));
	if (r->session_state == SG_SESSION_UNCLASSIFIED) {
		if (hint == NULL || hint[0] == '\0')
			r->session_state = SG_SESSION_NEW;
		else if (li < 0)
			r->session_state = SG_SESSION_STALE;
		else
			r->session_state = SG_SESSION_RETURNING;
	}
	p->state = r->session_state;
	if (p->state != SG_SESSION_RETURNING) {
		p->x_ms = 0;
		p->scale = 1.0;
		return;
	}
	p->last = li;		/* -1 when the last cluster is gone */
}

/*
 * Promote the last cluster in order[0..len): rotate positions 0..p right by
 * one when it is at p > 0; when absent, insert-and-truncate (w-a-w) puts it
 * at the front and drops the last member, keep mode leaves the order alone.
 */
static void
plan_promote(struct waw *w, struct plan *p, size_t *order, size_t len,
    bool insert)
{
	size_t pos;

	if (p->applies && p->state == SG_SESSION_RETURNING && p->last >= 0 &&
	    len > 0) {
		for (pos = 0; pos < len && order[pos] != (size_t)p->last; pos++)
			;
		if (pos < len) {
			if (pos > 0) {
				memmove(&order[1], &order[0],
				    pos * sizeof(*order));
				order[0] = (size_t)p->last;
				p->promoted = true;
			}
		} else if (insert) {
			memmove(&order[1], &order[0],
			    (len - 1) * sizeof(*order));
			order[0] = (size_t)p->last;
			p->promoted = true;
		}
	}
	if (p->applies)
		w->x->req->session_promoted = p->promoted;
}

/* The plan's decision fields (ref §5.4). */
static void
plan_finish(const struct waw *w, const struct plan *p, sg_decision *out)
{
	const char *hint = w->x->req->last_cluster_id;
	unsigned gs = w->d->selection_count > 0 ? w->d->selection_count : 1;

	out->classified = p->applies;
	if (!p->applies)
		return;
	out->session_state = p->state;
	out->promoted = p->promoted;
	if (out->kind != SG_DECIDE_SELECT)
		out->primary = false;
	else if (p->state == SG_SESSION_RETURNING)
		out->primary = hint != NULL &&
		    strcmp(out->cluster_id, hint) == 0;
	else
		out->primary = out->rank_depth <= gs;
}

/* --- outcomes ------------------------------------------------------------- */

static void
out_base(const struct waw *w, sg_decision *out)
{
	memset(out, 0, sizeof(*out));
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
explain_plan(struct waw *w, const struct plan *p, const size_t *orig,
    const size_t *eff, size_t len, size_t group)
{
	json_t *e = w->x->explain, *o;
	const char *hint = w->x->req->last_cluster_id;
	size_t i;

	if (e == NULL)
		return;
	json_object_set_new(e, "x_ms", json_real(p->x_ms));
	json_object_set_new(e, "scale", json_real(p->scale));
	if (p->applies && (o = json_object()) != NULL) {
		json_object_set_new(o, "state",
		    json_string(sg_session_state_name(p->state)));
		json_object_set_new(o, "promoted", json_boolean(p->promoted));
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

/* A cache-affinity key is present (blank is absent, ref §1.2). */
static bool
has_key(const sg_request *r)
{
	return r->cache_affinity_key != NULL &&
	    r->cache_affinity_key[0] != '\0';
}

static void
waw_init(struct waw *w, sgi_ctx *x, bool pulsar)
{
	memset(w, 0, sizeof(*w));
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

/* --- wait-and-widen (ref §4.5.4) ------------------------------------------ */

int
sgi_wait_and_widen(sgi_ctx *x, sg_decision *out)
{
	struct waw w;
	struct plan p;
	struct core r;
	size_t *all = x->scratch->idx2, *group = x->scratch->order, *orig;
	size_t i, m = 0;
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
		for (i = 0; i < x->n; i++)
			group[i] = i;
		core_select(&w, group, x->n, 1.0, elapsed, w.d->max_queued,
		    false, &r);
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
		explain_plan(&w, &p, orig, group, m, m);
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
	for (i = 0; i < x->n; i++)
		group[i] = i;	/* the group is no longer needed */
	core_select(&w, group, x->n, 1.0, elapsed - p.x_ms, w.d->max_queued,
	    false, &r);
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

/* --- pulsar-wait-and-widen (ref §4.7.1) ----------------------------------- */

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
	size_t *order = x->scratch->order, nr, k, kk, open_end, width, b;
	double elapsed = x->elapsed_ms, wt = 0, S, ww, bands;
	bool have_wait = false, kv, full, last_ranked = false;
	sgi_hashbuf prefix;
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
	nr = sgi_pulsar_rank_start(x, &prefix, order, &full);
	k = w.d->selection_count > 0 ? w.d->selection_count : 1;
	state0 = x->req->session_state;	/* unranked: not classified */
	plan_classify(&w, w.d->last_cluster_affinity && has_key(x->req), &p);
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
	else if (x->explain != NULL) {
		/* idx2 holds the original order until the first phase */
		memcpy(x->scratch->idx2, order, nr * sizeof(*order));
		plan_promote(&w, &p, order, nr, false);
		explain_plan(&w, &p, x->scratch->idx2, order, nr, kk);
	} else
		plan_promote(&w, &p, order, nr, false);
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
