/*
 * sg_simple.c — the algorithms without phases (stargate-lb-config(5)):
 * random, round-robin, power-of-n and pulsar (weighted rendezvous), plus the
 * pulsar ranking and feasibility shared with pulsar-wait-and-widen and
 * input-work admission.
 *
 * Hot-path rules: no allocation (index lists live in the router's scratch),
 * no O(n) work that the algorithm does not need.  Power-of-n samples by
 * rejection when the eligible set is dense and the sample small, so a
 * two-choice decision touches two clusters whatever n is.  Pulsar needs only
 * the first eligible cluster of the ranking, its position and whether a KV
 * skip preceded it: one pass of hashes finds the best eligible score, a
 * second pass counts the ranked clusters ahead of it.  The full sort
 * (sgi_pulsar_rank) is for pulsar-wait-and-widen, admission and --explain.
 *
 * Randomness comes from sgi_rng seeded per call by (router seed, definition
 * seed, request_id, attempt) so a decision replays exactly.
 */
#include <math.h>
#include <string.h>

#include "sg_internal.h"

#define DENSE_MAX_SAMPLE	64	/* rejection sampling keeps <= this */

static void	score_explain(sgi_ctx *);

/* Candidate i of the call's snapshot. */
static inline const sg_cluster *
cand(const sgi_ctx *x, size_t i)
{
	return &sgi_snapshot_clusters(x->snap)[i];
}

static void
unavailable(const sgi_ctx *x, sg_decision *out)
{
	out->kind = SG_DECIDE_REJECT;
	out->algorithm = sg_algorithm_name(x->def->algorithm);
	out->index = 0;
	out->cluster_id = NULL;
	out->rank_depth = 0;
	out->kv_skip = false;
	out->phase = SG_PHASE_NONE;
	out->recheck_at_ms = 0;
	out->status = 503;
	out->code = "overloaded_error";
	out->reason = NULL;
}

static void
selected(const sgi_ctx *x, sg_decision *out, size_t i, unsigned depth,
    bool kv_skip)
{
	out->kind = SG_DECIDE_SELECT;
	out->algorithm = sg_algorithm_name(x->def->algorithm);
	out->index = i;
	out->cluster_id = cand(x, i)->id;
	out->rank_depth = depth;
	out->kv_skip = kv_skip;
	out->phase = SG_PHASE_NONE;
	out->recheck_at_ms = 0;
	out->status = 0;
	out->code = NULL;
	out->reason = NULL;
}

/* The k-th (0-based) non-excluded candidate in list order. */
static size_t
kth_eligible(const sgi_ctx *x, size_t k)
{
	const unsigned char *ex = x->scratch->excluded;
	size_t i;

	if (x->neligible == x->n)
		return k;
	for (i = 0; i < x->n; i++)
		if (!ex[i] && k-- == 0)
			return i;
	return 0;	/* not reached: k < neligible */
}

int
sgi_random(sgi_ctx *x, sg_decision *out)
{
	const unsigned char *ex = x->scratch->excluded;
	sgi_rng g;
	size_t i;
	int tries;

	if (x->explain != NULL)
		score_explain(x);
	if (x->neligible == 0) {
		unavailable(x, out);
		return 0;
	}
	sgi_rng_seed(&g, x->router_seed, x->def, x->req);
	/* Few exclusions: probe a handful of uniform indices first. */
	if (x->neligible * 4 >= x->n * 3)
		for (tries = 0; tries < 8; tries++) {
			i = (size_t)sgi_rng_below(&g, x->n);
			if (!ex[i]) {
				selected(x, out, i, 1, false);
				return 0;
			}
		}
	i = kth_eligible(x, (size_t)sgi_rng_below(&g, x->neligible));
	selected(x, out, i, 1, false);
	return 0;
}

int
sgi_round_robin(sgi_ctx *x, sg_decision *out)
{
	uint64_t c;

	if (x->explain != NULL)
		score_explain(x);
	if (x->neligible == 0) {
		unavailable(x, out);
		return 0;
	}
	c = (*x->rr_counter)++;
	if (x->neligible == x->n)
		selected(x, out, (size_t)(c % x->n), 1, false);
	else
		selected(x, out, kth_eligible(x, (size_t)(c % x->neligible)),
		    1, false);
	return 0;
}

/*
 * Candidate i against the incumbent under total order; ties replace the
 * incumbent with probability 1/ties (reservoir), so the winner among equal
 * scores is uniform.
 */
static void
consider(sgi_rng *g, size_t i, double s, size_t *best, double *bs,
    uint64_t *ties)
{
	int c;

	if (*ties == 0) {
		*best = i;
		*bs = s;
		*ties = 1;
		return;
	}
	c = sgi_total_cmp(s, *bs);
	if (c < 0) {
		*best = i;
		*bs = s;
		*ties = 1;
	} else if (c == 0 && sgi_rng_below(g, ++*ties) == 0)
		*best = i;
}

int
sgi_power_of_n(sgi_ctx *x, sg_decision *out)
{
	const unsigned char *ex = x->scratch->excluded;
	const sg_request *r = x->req;
	int cmp = x->def->comparator;
	size_t m, i, j, best = 0, *idx;
	uint64_t ties = 0;
	double bs = 0;
	sgi_rng g;

	if (x->explain != NULL)
		score_explain(x);
	if (x->neligible == 0) {
		unavailable(x, out);
		return 0;
	}
	m = x->def->sample_count > 0 ? x->def->sample_count : 1;
	if (m > x->neligible)
		m = x->neligible;
	sgi_rng_seed(&g, x->router_seed, x->def, r);

	if (m == x->neligible) {
		/* The whole eligible set: scan it in list order. */
		for (i = 0; i < x->n; i++)
			if (!ex[i])
				consider(&g, i, sgi_score(cmp,
				    cand(x, i),
				    r->input_tokens, r->priority),
				    &best, &bs, &ties);
	} else if (m <= DENSE_MAX_SAMPLE && x->neligible * 2 >= x->n &&
	    m * 4 <= x->neligible) {
		/*
		 * Dense eligible set, small sample: draw uniform indices and
		 * reject excluded or repeated ones.  Each accepted draw is
		 * uniform over the eligible indices not yet taken, which is
		 * exactly a sample without replacement; each draw succeeds
		 * with probability >= 3/8.
		 */
		size_t got[DENSE_MAX_SAMPLE], k = 0;

		while (k < m) {
			i = (size_t)sgi_rng_below(&g, x->n);
			if (ex[i])
				continue;
			for (j = 0; j < k && got[j] != i; j++)
				;
			if (j < k)
				continue;
			got[k++] = i;
			consider(&g, i, sgi_score(cmp,
			    cand(x, i), r->input_tokens,
			    r->priority), &best, &bs, &ties);
		}
	} else {
		/* Partial Fisher-Yates over the eligible indices. */
		size_t ne = 0;

		idx = x->scratch->idx;
		for (i = 0; i < x->n; i++)
			if (!ex[i])
				idx[ne++] = i;
		for (i = 0; i < m; i++) {
			size_t t;

			j = i + (size_t)sgi_rng_below(&g, ne - i);
			t = idx[i];
			idx[i] = idx[j];
			idx[j] = t;
			consider(&g, idx[i], sgi_score(cmp,
			    cand(x, idx[i]), r->input_tokens,
			    r->priority), &best, &bs, &ties);
		}
	}
	selected(x, out, best, 1, false);
	return 0;
}

/* --- pulsar ----------------------------------------------------------------- */

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

/* True if candidate a ranks before b: higher score, then lower id. */
static bool
ranks_before(const sg_snapshot *s, const double *score, size_t a, size_t b)
{
	int c = sgi_total_cmp(score[a], score[b]);

	if (c != 0)
		return c > 0;
	return id_cmp(&s->c[a], &s->c[b]) < 0;
}

/*
 * Scores of every candidate into score[]: weight / -ln(u) (> 0) when ranked,
 * -1 when the cluster has no valid weight or an unusable hash.  Returns the
 * number ranked.  Two passes: the hashes first (stored as raw bits in
 * score[]), then the logarithms, so that neither pass is one long
 * dependency chain per candidate.
 */
static size_t
pulsar_scores(const sgi_ctx *x, const sgi_hashbuf *prefix, double *score)
{
	const sg_cluster *c = sgi_snapshot_clusters(x->snap);
	size_t i, nr = 0;
	uint64_t h;
	double w;

	sgi_pulsar_hashes(prefix, c, x->n, score);
	for (i = 0; i < x->n; i++) {
		memcpy(&h, &score[i], sizeof h);
		if (sgi_pulsar_weight(x->def, &c[i], &w) &&
		    sgi_pulsar_score(h, w, &score[i]))
			nr++;
		else
			score[i] = -1;
	}
	return nr;
}

/* Insertion sort of candidate indices by the exact ranking rule. */
static void
rank_insertion(const sg_snapshot *s, const double *score, size_t *a, size_t n)
{
	size_t i, j, t;

	for (i = 1; i < n; i++) {
		t = a[i];
		for (j = i; j > 0 && ranks_before(s, score, t, a[j - 1]); j--)
			a[j] = a[j - 1];
		a[j] = t;
	}
}

#if SIZE_MAX >= UINT64_MAX
/*
 * Ranking sort.  Scores are positive doubles (or +inf), whose IEEE bit
 * patterns order like the values, so ~bits orders them descending.  Each
 * entry is packed into one word: the top 52 bits of ~bits, then the
 * candidate index in the low KEY_IDX_BITS bits (indices < SG_MAX_CANDIDATES).
 * Sorting the words is plain integer sorting (sgi_sort_keys: a
 * branch-free merge sort for short lists, an LSD radix sort over bytes,
 * skipping bytes every key shares, for long ones).  Dropping the low 12
 * score bits can merge distinct scores into equal keys but never reorders
 * them, so a final pass re-sorts each run of equal keys by the exact rule
 * (score descending, then cluster id).  The keys live in order[] itself;
 * the sort borrows idx or idx2.
 */
#define KEY_IDX_BITS	12
#define KEY_IDX_MASK	(((size_t)1 << KEY_IDX_BITS) - 1)
#define MERGE_MAX	512	/* merge sort below, radix from here */

_Static_assert(SG_MAX_CANDIDATES <= (1 << KEY_IDX_BITS),
    "candidate indices must fit in the key's low bits");

static size_t
rank_key(double score, size_t i)
{
	uint64_t b;

	memcpy(&b, &score, sizeof b);
	return ((size_t)~b & ~KEY_IDX_MASK) | i;
}

static void
insertion_keys(size_t *a, size_t n)
{
	size_t i, j, t;

	for (i = 1; i < n; i++) {
		t = a[i];
		for (j = i; j > 0 && a[j - 1] > t; j--)
			a[j] = a[j - 1];
		a[j] = t;
	}
}

/* Order two keys without a branch. */
static inline void
cswap(size_t *x, size_t *y)
{
	size_t a = *x, b = *y;

	*x = a < b ? a : b;
	*y = a < b ? b : a;
}

/*
 * Bottom-up merge sort of a[0..n) using tmp[0..n): runs of 4 sorted by a
 * network, then merges whose element choice is a conditional move, not a
 * branch (random keys would mispredict it half the time).
 */
static void
merge_keys(size_t *a, size_t *tmp, size_t n)
{
	size_t *src = a, *dst = tmp, *t, run, lo, mid, hi, i, j, k;

	for (lo = 0; lo + 4 <= n; lo += 4) {
		/* a sorting network of 5 compare-exchanges per 4 */
		cswap(&a[lo], &a[lo + 1]);
		cswap(&a[lo + 2], &a[lo + 3]);
		cswap(&a[lo], &a[lo + 2]);
		cswap(&a[lo + 1], &a[lo + 3]);
		cswap(&a[lo + 1], &a[lo + 2]);
	}
	insertion_keys(a + lo, n - lo);
	for (run = 4; run < n; run *= 2) {
		for (lo = 0; lo < n; lo += 2 * run) {
			mid = lo + run < n ? lo + run : n;
			hi = lo + 2 * run < n ? lo + 2 * run : n;
			i = lo;
			j = mid;
			k = lo;
			while (i < mid && j < hi) {
				size_t x = src[i], y = src[j];
				bool take = y < x;

				dst[k++] = take ? y : x;
				j += take;
				i += !take;
			}
			while (i < mid)
				dst[k++] = src[i++];
			while (j < hi)
				dst[k++] = src[j++];
		}
		t = src;
		src = dst;
		dst = t;
	}
	if (src != a)
		memcpy(a, src, n * sizeof *a);
}

/* LSD radix sort of a[0..n) using tmp[0..n); result in a. */
static void
radix_keys(size_t *a, size_t *tmp, size_t n)
{
	uint32_t hist[8][256];
	size_t *src = a, *dst = tmp, *t, i;
	int b, d;

	memset(hist, 0, sizeof hist);
	for (i = 0; i < n; i++)
		for (b = 0; b < 8; b++)
			hist[b][(a[i] >> (8 * b)) & 0xff]++;
	for (b = 0; b < 8; b++) {
		uint32_t *h = hist[b], sum = 0, c;

		if (h[(src[0] >> (8 * b)) & 0xff] == n)
			continue;	/* every key has this byte */
		for (d = 0; d < 256; d++) {
			c = h[d];
			h[d] = sum;
			sum += c;
		}
		for (i = 0; i < n; i++)
			dst[h[(src[i] >> (8 * b)) & 0xff]++] = src[i];
		t = src;
		src = dst;
		dst = t;
	}
	if (src != a)
		memcpy(a, src, n * sizeof *a);
}

void
sgi_sort_keys(size_t *a, size_t *tmp, size_t n)
{
	if (n <= 8)
		insertion_keys(a, n);
	else if (n < MERGE_MAX)
		merge_keys(a, tmp, n);
	else
		radix_keys(a, tmp, n);
}

/*
 * Sort the packed keys order[0..nr) (tmp: nr words of workspace), unpack
 * them to candidate indices, and re-sort each run of equal truncated keys
 * by the exact rule.
 */
static void
sort_ranked(sgi_ctx *x, const double *score, size_t *order, size_t nr,
    size_t *tmp)
{
	size_t i, j, k, base;

	sgi_sort_keys(order, tmp, nr);
	for (i = 0; i < nr; i = j) {
		base = order[i] & ~KEY_IDX_MASK;
		for (j = i + 1; j < nr && (order[j] & ~KEY_IDX_MASK) == base;
		    j++)
			;
		for (k = i; k < j; k++)
			order[k] &= KEY_IDX_MASK;
		if (j - i > 1)
			rank_insertion(x->snap, score, order + i, j - i);
	}
}

static size_t
rank_sorted(sgi_ctx *x, const sgi_hashbuf *prefix, size_t *order)
{
	double *score = x->scratch->d1;
	size_t i, nr = 0;

	pulsar_scores(x, prefix, score);
	for (i = 0; i < x->n; i++)
		if (score[i] > 0)
			order[nr++] = rank_key(score[i], i);
	sort_ranked(x, score, order, nr, order == x->scratch->idx2 ?
	    x->scratch->idx : x->scratch->idx2);
	return nr;
}
#else
static size_t
rank_sorted(sgi_ctx *x, const sgi_hashbuf *prefix, size_t *order)
{
	double *score = x->scratch->d1;
	size_t i, nr = 0;

	pulsar_scores(x, prefix, score);
	for (i = 0; i < x->n; i++)
		if (score[i] > 0)
			order[nr++] = i;
	rank_insertion(x->snap, score, order, nr);
	return nr;
}
#endif

/* The router's ranking cache for this call, or NULL. */
static sgi_rcache *
rcache(const sgi_ctx *x)
{
	return x->scratch->reference ? NULL : x->scratch->rcache;
}


#define LPOS_UNKNOWN	(SIZE_MAX - 1)	/* ranked, not met yet */

void
sgi_rlazy_fill(sgi_rlazy *lz, size_t *order, size_t upto)
{
	const uint16_t *r = lz->rank;
	size_t i = lz->done, last = lz->last;

	if (r == NULL || upto <= i)
		return;
	if (upto > lz->nr)
		upto = lz->nr;
	if (lz->lpos == SIZE_MAX) {
		for (; i < upto; i++)
			order[i] = r[i];
		lz->done = upto;
		return;
	}
	/* the rotated ranking: last, r[0..p), r[p + 1..nr) */
	if (i == 0)
		order[i++] = last;
	for (; i < upto && lz->lpos == LPOS_UNKNOWN; i++) {
		if (r[i - 1] == last) {
			lz->lpos = i - 1;
			break;
		}
		order[i] = r[i - 1];
	}
	if (lz->lpos == LPOS_UNKNOWN && i == lz->nr)
		lz->lpos = i - 1;	/* the one left */
	for (; i < upto && i <= lz->lpos; i++)
		order[i] = r[i - 1];
	for (; i < upto; i++)
		order[i] = r[i];
	lz->done = upto;
}

/*
 * Whether last is ranked: every candidate is when the ranking is n long,
 * so only a shorter ranking reads the cache's inverse (another cache line
 * of a large table); last's rank is then found while copying.
 */
size_t
sgi_pulsar_rank_start_lazy(sgi_ctx *x, sgi_hashbuf *prefix, size_t *order,
    bool *full, long last, size_t *pos, size_t want, sgi_rlazy *lz)
{
	sgi_rclookup lk;
	const uint16_t *r;
	size_t nr, p;

	*pos = SIZE_MAX;
	lz->rank = NULL;
	sgi_rcache_prefix(rcache(x), prefix, x->def, x->req);
	if (sgi_rcache_lookup(rcache(x), x->def, x->snap, prefix, &lk, &r,
	    &nr) == SGI_RC_HIT) {
		lz->rank = r;
		lz->nr = nr;
		lz->done = 0;
		lz->lpos = SIZE_MAX;
		lz->last = (size_t)last;
		if (last >= 0 && nr > 0 && (size_t)last < x->n) {
			if (nr == x->n)
				lz->lpos = r[0] == (size_t)last ? 0 :
				    LPOS_UNKNOWN;
			else if ((p = sgi_rcache_pos(x->scratch->rcache,
			    r)[last]) != 0)
				lz->lpos = p - 1;
		}
		sgi_rlazy_fill(lz, order, want);
		*pos = lz->lpos;	/* LPOS_UNKNOWN: past what was copied */
		*full = true;
		return nr;
	}
	if (!x->scratch->reference)
		sgi_hb_prepare(prefix);	/* n hashes after it */
	if (lk.state != SGI_RC_STORE && !x->scratch->reference &&
	    x->explain == NULL) {
		*full = false;
		return 0;
	}
	nr = rank_sorted(x, prefix, order);
	if (lk.state == SGI_RC_STORE)
		(void)sgi_rcache_store(x->scratch->rcache, &lk, order, nr);
	*full = true;
	return nr;
}

size_t
sgi_pulsar_rank_start_rot(sgi_ctx *x, sgi_hashbuf *prefix, size_t *order,
    bool *full, long last, size_t *pos)
{
	sgi_rlazy lz;

	return sgi_pulsar_rank_start_lazy(x, prefix, order, full, last, pos,
	    SIZE_MAX, &lz);
}

size_t
sgi_pulsar_rank_start(sgi_ctx *x, sgi_hashbuf *prefix, size_t *order,
    bool *full)
{
	size_t pos;

	return sgi_pulsar_rank_start_rot(x, prefix, order, full, -1, &pos);
}

size_t
sgi_pulsar_rank_full(sgi_ctx *x, const sgi_hashbuf *prefix, size_t *order)
{
	return rank_sorted(x, prefix, order);
}

size_t
sgi_pulsar_rank(sgi_ctx *x, size_t *order)
{
	sgi_hashbuf prefix;
	bool full;
	size_t nr;

	nr = sgi_pulsar_rank_start(x, &prefix, order, &full);
	if (!full)
		nr = rank_sorted(x, &prefix, order);
	return nr;
}

int
sgi_pulsar_kv_room(const sgi_ctx *x, size_t i)
{
	const sg_cluster *c;
	uint64_t tokens = x->req->input_tokens;

	if (tokens == 0)
		return 2;
	c = cand(x, i);
	if (c->kv_capacity_tokens == 0 && c->kv_used_tokens == 0 &&
	    c->kv_free_tokens == 0)
		return 2;
	if (c->kv_free_tokens < tokens)
		return 2;
	return 0;
}

static json_t *
jnum(double v)
{
	return isfinite(v) ? json_real(v) : json_null();
}

/* --explain: the ranking, with each candidate's rank and feasibility. */
static void
pulsar_explain(sgi_ctx *x)
{
	json_t *eff, *cands;
	size_t *order = x->scratch->order, nr, i;

	nr = sgi_pulsar_rank(x, order);
	eff = json_array();
	cands = json_array();
	for (i = 0; i < nr; i++)
		json_array_append_new(eff,
		    json_string(cand(x, order[i])->id));
	for (i = 0; i < x->n; i++) {
		const sg_cluster *c = cand(x, i);
		json_t *o = json_object();
		size_t k;

		json_object_set_new(o, "cluster_id", json_string(c->id));
		json_object_set_new(o, "excluded",
		    json_boolean(x->scratch->excluded[i]));
		for (k = 0; k < nr && order[k] != i; k++)
			;
		json_object_set_new(o, "affinity_rank",
		    k < nr ? json_integer((json_int_t)k + 1) : json_null());
		json_object_set_new(o, "kv_feasible",
		    json_boolean(sgi_pulsar_feasible(x, i) != 2));
		json_array_append_new(cands, o);
	}
	json_object_set_new(x->explain, "effective_order", eff);
	json_object_set_new(x->explain, "candidates", cands);
}

/* --explain for the load-aware simple algorithms: comparator scores. */
static void
score_explain(sgi_ctx *x)
{
	const sg_request *r = x->req;
	json_t *cands = json_array();
	size_t i;

	for (i = 0; i < x->n; i++) {
		const sg_cluster *c = cand(x, i);
		json_t *o = json_object();

		json_object_set_new(o, "cluster_id", json_string(c->id));
		json_object_set_new(o, "excluded",
		    json_boolean(x->scratch->excluded[i]));
		json_object_set_new(o, "queue_ms",
		    jnum(sgi_queue_ms(c, r->priority)));
		json_object_set_new(o, "prefill_ms",
		    jnum(sgi_prefill_ms(c, r->input_tokens, 1.0)));
		json_object_set_new(o, "comparator_ms",
		    jnum(sgi_comparator_ms(c, r->input_tokens, r->priority,
		    1.0)));
		json_object_set_new(o, "ttft_ms",
		    jnum(sgi_comparator_ms(c, r->input_tokens, r->priority,
		    1.0)));
		json_array_append_new(cands, o);
	}
	json_object_set_new(x->explain, "candidates", cands);
}

/* ranks_before() without the call: scores are > 0 or +inf, never NaN. */
static inline bool
ahead(const sg_snapshot *s, const double *score, size_t a, size_t b)
{
	if (score[a] != score[b])
		return score[a] > score[b];
	return id_cmp(&s->c[a], &s->c[b]) < 0;
}

/* The reference: every exact score, the best eligible one, its depth. */
static void
pulsar_reference(sgi_ctx *x, sg_decision *out, const sgi_hashbuf *prefix)
{
	const unsigned char *ex = x->scratch->excluded;
	bool kv = x->def->consider_kv_free_tokens, found = false;
	double *score = x->scratch->d1;
	size_t i, best = 0;
	unsigned depth = 1;
	bool kv_skip = false;

	pulsar_scores(x, prefix, score);
	for (i = 0; i < x->n; i++) {
		if (!(score[i] > 0) || ex[i] ||
		    (kv && sgi_pulsar_feasible(x, i) != 0))
			continue;
		if (!found || ahead(x->snap, score, i, best)) {
			best = i;
			found = true;
		}
	}
	if (!found) {
		unavailable(x, out);
		return;
	}
	for (i = 0; i < x->n; i++)
		if (score[i] >= score[best] && i != best &&
		    ahead(x->snap, score, i, best)) {
			depth++;
			if (kv && sgi_pulsar_feasible(x, i) == 2)
				kv_skip = true;
		}
	selected(x, out, best, depth, kv_skip);
}

/*
 * Pulsar over a known ranking: the first eligible rank wins, its depth is
 * its position, and a KV skip is any ranked cluster before it that failed
 * only on KV room.
 */
static void
pulsar_walk(sgi_ctx *x, sg_decision *out, const uint16_t *rank, size_t nr)
{
	bool kv = x->def->consider_kv_free_tokens, kv_skip = false;
	size_t i;
	int f;

	for (i = 0; i < nr; i++) {
		f = sgi_pulsar_feasible(x, rank[i]);
		if (f == 0) {
			selected(x, out, rank[i], (unsigned)i + 1, kv_skip);
			return;
		}
		if (kv && f == 2)
			kv_skip = true;
	}
	unavailable(x, out);
}

/*
 * The exact score of candidate i (as pulsar_scores() computes it), from its
 * hash bits in hb[i]; memoised in sc[i] (NaN: not computed yet).
 */
static double
exact_score(const sgi_ctx *x, const double *hb, double *sc, size_t i)
{
	const sg_cluster *c = cand(x, i);
	uint64_t h;
	double w, v;

	if (!isnan(sc[i]))
		return sc[i];
	memcpy(&h, &hb[i], sizeof h);
	if (!sgi_pulsar_weight(x->def, c, &w) || !sgi_pulsar_score(h, w, &v))
		v = -1;
	sc[i] = v;
	return v;
}

/*
 * Pulsar without a cached ranking: the first eligible cluster of the
 * ranking is the eligible one with the best score, and its depth counts
 * the ranked clusters ahead of it.  A score is w / -ln(u); since
 * -ln(u) >= 1 - u, w / (1 - u) bounds it from above (widened by 2^-30
 * against rounding), costs a division instead of a logarithm, and is
 * tight for the high scores that matter.  So the logarithm is taken only
 * for candidates whose bound reaches the best exact score found: a
 * candidate below it can neither beat nor tie the winner, nor rank ahead
 * of it.  The result is exactly that of comparing every exact score.
 */
static void
pulsar_uncached(sgi_ctx *x, sg_decision *out, const sgi_hashbuf *prefix)
{
	const sg_cluster *c = sgi_snapshot_clusters(x->snap);
	double *hb = x->scratch->d1, *bound = x->scratch->d2;
	double *sc = x->scratch->d3, w, sb = 0, v, top = -1;
	bool kv = x->def->consider_kv_free_tokens, kv_skip = false;
	size_t i, best = SIZE_MAX, first = SIZE_MAX;
	unsigned depth = 1;
	uint64_t h, nh;

	sgi_pulsar_hashes(prefix, c, x->n, hb);
	for (i = 0; i < x->n; i++) {
		sc[i] = NAN;
		if (!sgi_pulsar_weight(x->def, &c[i], &w)) {
			bound[i] = -1;		/* unranked */
			continue;
		}
		/*
		 * 1 - u is (2^64 - 1 - h) / 2^64 up to the rounding of u
		 * (2^-53 absolute): below 2^-20 the bound is left infinite
		 * (the score is computed), above it the rounding, the halved
		 * integer (a signed conversion is one instruction) and the
		 * division are all inside the 2^-30 widening.
		 */
		memcpy(&h, &hb[i], sizeof h);
		nh = ~h;
		bound[i] = nh < ((uint64_t)1 << 44) ? INFINITY :
		    w / ((double)(int64_t)(nh >> 1) * 0x1p-63) *
		    (1.0 + 0x1p-30);
		if (bound[i] > top && sgi_pulsar_feasible(x, i) == 0) {
			top = bound[i];
			first = i;
		}
	}
	/* the eligible candidate with the best bound sets the bar */
	if (first != SIZE_MAX && (v = exact_score(x, hb, sc, first)) > 0) {
		best = first;
		sb = v;
	}
	for (i = 0; i < x->n; i++) {
		if (i == best || !(bound[i] > 0) ||
		    (best != SIZE_MAX && bound[i] < sb) ||
		    sgi_pulsar_feasible(x, i) != 0)
			continue;
		if ((v = exact_score(x, hb, sc, i)) > 0 &&
		    (best == SIZE_MAX || ahead(x->snap, sc, i, best))) {
			best = i;
			sb = v;
		}
	}
	if (best == SIZE_MAX) {
		unavailable(x, out);
		return;
	}
	/* ranked clusters ahead of it (all ineligible): count, note KV skips */
	for (i = 0; i < x->n; i++) {
		if (i == best || !(bound[i] >= sb))
			continue;
		if (exact_score(x, hb, sc, i) > 0 &&
		    ahead(x->snap, sc, i, best)) {
			depth++;
			if (kv && sgi_pulsar_feasible(x, i) == 2)
				kv_skip = true;
		}
	}
	selected(x, out, best, depth, kv_skip);
}

int
sgi_pulsar(sgi_ctx *x, sg_decision *out)
{
	sgi_hashbuf prefix;
	sgi_rclookup lk;
	const uint16_t *r;
	size_t nr;

	if (x->explain != NULL)
		pulsar_explain(x);
	sgi_rcache_prefix(rcache(x), &prefix, x->def, x->req);
	switch (sgi_rcache_lookup(rcache(x), x->def, x->snap, &prefix, &lk,
	    &r, &nr)) {
	case SGI_RC_HIT:
		pulsar_walk(x, out, r, nr);
		return 0;
	case SGI_RC_STORE:
		sgi_hb_prepare(&prefix);	/* n hashes after it */
		nr = rank_sorted(x, &prefix, x->scratch->order);
		r = sgi_rcache_store(x->scratch->rcache, &lk,
		    x->scratch->order, nr);
		pulsar_walk(x, out, r, nr);
		return 0;
	default:
		break;
	}
	if (x->scratch->reference)
		pulsar_reference(x, out, &prefix);
	else {
		sgi_hb_prepare(&prefix);
		pulsar_uncached(x, out, &prefix);
	}
	return 0;
}

/*
 * The first m ranks of the pulsar ranking into order[0..m), for
 * pulsar-wait-and-widen's affinity phase, without ranking everything.
 * Each ranked candidate's score is at most its bound (pulsar_uncached()):
 * the exact scores of the m candidates with the best bounds give T, a
 * score that at least m candidates reach; every candidate whose exact
 * score reaches T has a bound >= T, so the exact scores of those alone,
 * sorted by the ranking rule, start with the true first m ranks.  The
 * scratch arrays d1 (hashes), d2 (bounds), d3 (scores), idx and idx2 are
 * clobbered.  *last_ranked says whether candidate last (if >= 0) is
 * ranked.  Returns m, or SIZE_MAX when fewer than m candidates are ranked
 * or m is too large to gain anything (the caller then ranks everything).
 */
size_t
sgi_pulsar_top(sgi_ctx *x, const sgi_hashbuf *prefix, size_t m, long last,
    size_t *order, bool *last_ranked)
{
#if SIZE_MAX >= UINT64_MAX
	const sg_cluster *c = sgi_snapshot_clusters(x->snap);
	double *hb = x->scratch->d1, *bound = x->scratch->d2;
	double *sc = x->scratch->d3, w, v, T = INFINITY;
	size_t *top = x->scratch->idx2, *key = x->scratch->idx;
	size_t i, j, k, kb, nt = 0, ns = 0;
	uint64_t h, nh;

	/* short lists: the full sort costs less than a second pass */
	if (m == 0 || m > SGI_TOP_MAX || x->n < SGI_PULSAR_TOP_MIN_N ||
	    8 * m > x->n)
		return SIZE_MAX;
	sgi_pulsar_hashes(prefix, c, x->n, hb);
	for (i = 0; i < x->n; i++) {
		sc[i] = NAN;
		if (!sgi_pulsar_weight(x->def, &c[i], &w)) {
			bound[i] = -1;		/* unranked */
			continue;
		}
		memcpy(&h, &hb[i], sizeof h);	/* as pulsar_uncached() */
		nh = ~h;
		bound[i] = nh < ((uint64_t)1 << 44) ? INFINITY :
		    w / ((double)(int64_t)(nh >> 1) * 0x1p-63) *
		    (1.0 + 0x1p-30);
		if (!(bound[i] > 0))
			continue;
		/* top[0..nt): the best bounds so far, descending */
		if (nt == m && !(bound[i] > bound[top[m - 1]]))
			continue;
		j = nt < m ? nt++ : m - 1;
		for (; j > 0 && bound[top[j - 1]] < bound[i]; j--)
			top[j] = top[j - 1];
		top[j] = i;
	}
	if (nt < m)
		return SIZE_MAX;
	for (j = 0; j < m; j++) {
		v = exact_score(x, hb, sc, top[j]);
		if (!(v > 0))
			return SIZE_MAX;	/* unusable hash: rare */
		if (v < T)
			T = v;
	}
	for (i = 0; i < x->n; i++)
		if (bound[i] >= T && exact_score(x, hb, sc, i) >= T)
			key[ns++] = rank_key(sc[i], i);
	sgi_sort_keys(key, top, ns);
	/* unpack the runs of equal truncated keys that reach rank m */
	for (i = 0; i < m; i = j) {
		kb = key[i] & ~KEY_IDX_MASK;
		for (j = i + 1; j < ns && (key[j] & ~KEY_IDX_MASK) == kb; j++)
			;
		for (k = i; k < j; k++)
			key[k] &= KEY_IDX_MASK;
		if (j - i > 1)
			rank_insertion(x->snap, sc, key + i, j - i);
	}
	for (i = 0; i < m; i++)
		order[i] = key[i];
	*last_ranked = last >= 0 && exact_score(x, hb, sc, (size_t)last) > 0;
	return m;
#else
	(void)x; (void)prefix; (void)m; (void)last; (void)order;
	(void)last_ranked;
	return SIZE_MAX;
#endif
}

/*
 * The whole ranking after sgi_pulsar_top(), reusing its hashes, bounds and
 * scores: phases since then may have clobbered d1 and d3 only for the
 * candidates keep[0..nkeep), whose exact scores are ksc[].
 */
size_t
sgi_pulsar_top_rest(sgi_ctx *x, const size_t *keep, const double *ksc,
    size_t nkeep, size_t *order)
{
#if SIZE_MAX >= UINT64_MAX
	const double *hb = x->scratch->d1, *bound = x->scratch->d2;
	double *sc = x->scratch->d3;
	size_t i, j, nr = 0;

	for (j = 0; j < nkeep; j++)
		sc[keep[j]] = ksc[j];
	for (i = 0; i < x->n; i++)
		if (bound[i] > 0 && exact_score(x, hb, sc, i) > 0)
			order[nr++] = rank_key(sc[i], i);
	sort_ranked(x, sc, order, nr, order == x->scratch->idx ?
	    x->scratch->idx2 : x->scratch->idx);
	return nr;
#else
	(void)keep; (void)ksc; (void)nkeep;
	return 0;	/* never called: sgi_pulsar_top() declines */
#endif
}
