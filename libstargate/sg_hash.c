/*
 * sg_hash.c — the byte layout of every affinity hash (stargate(7))
 * and the decision PRNG.
 *
 * All hashes are XXH3-64 (seed 0) over a concatenation of tags:
 * tag(name, value) = name bytes, 0xFF, len(value) as 8-byte little-endian,
 * value bytes.  A prefix (0x01, seed, routing key, model, and for pulsar the
 * cache-affinity key) is built once per decision in an sgi_hashbuf; the
 * per-candidate hash appends the cluster tag to a copy and hashes the lot in
 * one shot.  Typical prefixes are ~100 bytes, so the copy is cheaper than
 * XXH3's streaming state.
 *
 * Many suffixes after one prefix (a pulsar ranking hashes every cluster id
 * after the same prefix, a ring every virtual node): sgi_hb_prepare() mixes
 * the prefix's 16-byte blocks once for XXH3's mid-size paths (17..240
 * bytes), so each suffix costs only the blocks that reach into it and the
 * final avalanche, without copying the prefix.  The result is XXH3_64bits
 * of the concatenation, bit for bit (the paths are XXH3's own, using its
 * block mix and secret; test_hash checks it against libxxhash on random
 * inputs).  Inputs outside 17..240 bytes take the plain call.
 *
 * Input strings are not bounded by the request parser (a cache-affinity key
 * is any header value), so a prefix may outgrow the fixed buffer.  Then the
 * buffer switches to holding a serialised XXH3 streaming state (len ==
 * HB_STREAM): same hash values, slower path, no truncation.
 *
 * The PRNG is xoshiro256** seeded through splitmix64 from XXH3 over
 * tag("router_seed") ‖ tag("seed") ‖ tag("request_id") ‖ tag("attempt"),
 * where attempt is the number of excluded clusters.  Nothing position- or
 * process-dependent enters the seed, so every replica and every replay draws
 * the same stream for the same request attempt.
 */
#include <endian.h>
#include <math.h>
#include <string.h>

/* The XXH3 primitives (block mix, avalanche, default secret) are needed
 * below, so the header's implementation is compiled in (same version as
 * libxxhash: the outputs are XXH3's, checked against it in test_hash). */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "sg_internal.h"

#define HB_STREAM	((size_t)-1)
#define TAG_HDR		9		/* 0xFF + 8-byte length */

_Static_assert(sizeof(XXH3_state_t) <= sizeof(((sgi_hashbuf *)0)->b),
    "an XXH3 state must fit in a hash buffer");

static inline void
put_le64(unsigned char *p, uint64_t v)
{
	v = htole64(v);
	memcpy(p, &v, sizeof v);	/* one store: read back as words */
}

/* Tag header bytes (name, 0xFF, length) into out; returns their count. */
static size_t
tag_header(unsigned char *out, const char *name, size_t namelen, uint64_t len)
{
	memcpy(out, name, namelen);
	out[namelen] = 0xFF;
	put_le64(out + namelen + 1, len);
	return namelen + TAG_HDR;
}

/* Load h's streaming state (converting a byte buffer first). */
static void
hb_state_load(const sgi_hashbuf *h, XXH3_state_t *st)
{
	if (h->len == HB_STREAM) {
		memcpy(st, h->b, sizeof *st);
		return;
	}
	XXH3_64bits_reset(st);
	XXH3_64bits_update(st, h->b, h->len);
}

static void
hb_state_store(sgi_hashbuf *h, const XXH3_state_t *st)
{
	memcpy(h->b, st, sizeof *st);
	h->len = HB_STREAM;
	h->prepared = false;
}

/* Append raw bytes to h, switching to a streaming state if they don't fit. */
static void
hb_append(sgi_hashbuf *h, const void *p, size_t n)
{
	XXH3_state_t st;

	h->prepared = false;
	if (h->len != HB_STREAM && n <= sizeof h->b - h->len) {
		memcpy(h->b + h->len, p, n);
		h->len += n;
		return;
	}
	hb_state_load(h, &st);
	XXH3_64bits_update(&st, p, n);
	hb_state_store(h, &st);
}

void
sgi_hb_reset(sgi_hashbuf *h)
{
	h->len = 0;
	h->prepared = false;
}

void
sgi_hb_byte(sgi_hashbuf *h, unsigned char c)
{
	hb_append(h, &c, 1);
}

void
sgi_hb_tag(sgi_hashbuf *h, const char *name, const void *val, size_t len)
{
	unsigned char hdr[64 + TAG_HDR];
	size_t namelen = strlen(name);

	if (namelen > 64) {	/* names are our own literals */
		hb_append(h, name, namelen);
		tag_header(hdr, "", 0, len);
		hb_append(h, hdr, TAG_HDR);
	} else
		hb_append(h, hdr, tag_header(hdr, name, namelen, len));
	if (len > 0)
		hb_append(h, val, len);
}

uint64_t
sgi_hb_xxh3(const sgi_hashbuf *h)
{
	XXH3_state_t st;

	if (h->len != HB_STREAM)
		return XXH3_64bits(h->b, h->len);
	memcpy(&st, h->b, sizeof st);
	return XXH3_64bits_digest(&st);
}

/* --- XXH3 over prefix ‖ tail --------------------------------------------- */

#define MID_MIN		17	/* XXH3's mid-size paths: 17..240 bytes */
#define MID_SPLIT	128	/* 17..128 one way, 129..240 the other */
#define MID_MAX		240
/* 129..240: secret offsets of the last block and of blocks 8.. */
#define SECRET_LAST	(XXH3_SECRET_SIZE_MIN - 17)
#define SECRET_MID	3

void
sgi_hb_prepare(sgi_hashbuf *h)
{
	const xxh_u8 *s = XXH3_kSecret;
	size_t k;

	h->prepared = false;
	if (h->len == HB_STREAM)
		return;
	h->pre_full = h->len / 16;
	for (k = 0; k < 4 && k < h->pre_full; k++)
		h->pre_front[k] = XXH3_mix16B(h->b + 16 * k, s + 32 * k, 0);
	h->pre_sum8 = 0;
	for (k = 0; k < 8 && k < h->pre_full; k++)
		h->pre_sum8 += XXH3_mix16B(h->b + 16 * k, s + 16 * k, 0);
	for (k = 8; k < 15 && k < h->pre_full; k++)
		h->pre_mid[k - 8] = XXH3_mix16B(h->b + 16 * k,
		    s + 16 * (k - 8) + SECRET_MID, 0);
	h->prepared = true;
}

/*
 * The string hashed is P[0..base) ‖ w[0..wlen), where base = 16 * pre_full
 * (the prefix's whole blocks) and w starts with the rest of the prefix:
 * blocks past base are plain loads from w.  This returns the 16 bytes at
 * offset o (copied only when they straddle base).
 */
static inline const xxh_u8 *
block_at(const sgi_hashbuf *h, const xxh_u8 *w, size_t o, xxh_u8 *tmp)
{
	size_t base = 16 * h->pre_full;

	if (o >= base)
		return w + (o - base);
	if (o + 16 <= base)
		return h->b + o;
	memcpy(tmp, h->b + o, base - o);
	memcpy(tmp + (base - o), w, 16 - (base - o));
	return tmp;
}

/* XXH3_len_17to128_64b over P[0..base) ‖ w, front blocks premixed. */
static uint64_t
mid_short(const sgi_hashbuf *h, const xxh_u8 *w, size_t L)
{
	const xxh_u8 *s = XXH3_kSecret;
	xxh_u64 acc = L * XXH_PRIME64_1;
	size_t pairs, k;
	xxh_u8 tmp[16];

	pairs = L > 96 ? 4 : L > 64 ? 3 : L > 32 ? 2 : 1;
	for (k = 0; k < pairs; k++) {
		acc += k < h->pre_full ? h->pre_front[k] :
		    XXH3_mix16B(block_at(h, w, 16 * k, tmp), s + 32 * k, 0);
		acc += XXH3_mix16B(block_at(h, w, L - 16 * (k + 1), tmp),
		    s + 16 + 32 * k, 0);
	}
	return XXH3_avalanche(acc);
}

/* XXH3_len_129to240_64b over P[0..base) ‖ w, prefix blocks premixed. */
static uint64_t
mid_long(const sgi_hashbuf *h, const xxh_u8 *w, size_t L)
{
	const xxh_u8 *s = XXH3_kSecret;
	xxh_u64 acc = L * XXH_PRIME64_1 + h->pre_sum8;
	size_t rounds = L / 16, k;
	xxh_u8 tmp[16];

	for (k = h->pre_full; k < 8; k++)
		acc += XXH3_mix16B(block_at(h, w, 16 * k, tmp), s + 16 * k, 0);
	acc = XXH3_avalanche(acc);
	for (k = 8; k < rounds; k++)
		acc += k < h->pre_full ? h->pre_mid[k - 8] :
		    XXH3_mix16B(block_at(h, w, 16 * k, tmp),
		    s + 16 * (k - 8) + SECRET_MID, 0);
	acc += XXH3_mix16B(block_at(h, w, L - 16, tmp), s + SECRET_LAST, 0);
	return XXH3_avalanche(acc);
}

/* XXH3_64bits(P[0..base) ‖ w[0..wlen)) for a prepared, mid-size input. */
static inline uint64_t
mid(const sgi_hashbuf *h, const xxh_u8 *w, size_t wlen)
{
	size_t L = 16 * h->pre_full + wlen;

	return L <= MID_SPLIT ? mid_short(h, w, L) : mid_long(h, w, L);
}

/* The prepared premix applies to prefix ‖ n more bytes. */
static inline bool
premixed(const sgi_hashbuf *h, size_t n)
{
	return h->prepared && h->len + n >= MID_MIN && h->len + n <= MID_MAX;
}

uint64_t
sgi_hb_xxh3_tail(const sgi_hashbuf *h, const void *tail, size_t n)
{
	unsigned char buf[sizeof h->b + 512];
	size_t r;
	XXH3_state_t st;

	if (premixed(h, n)) {
		r = h->len - 16 * h->pre_full;	/* the prefix's partial block */
		memcpy(buf, h->b + 16 * h->pre_full, r);
		memcpy(buf + r, tail, n);
		return mid(h, buf, r + n);
	}
	if (h->len != HB_STREAM && h->len + n <= sizeof buf) {
		memcpy(buf, h->b, h->len);
		if (n > 0)
			memcpy(buf + h->len, tail, n);
		return XXH3_64bits(buf, h->len + n);
	}
	hb_state_load(h, &st);
	if (n > 0)
		XXH3_64bits_update(&st, tail, n);
	return XXH3_64bits_digest(&st);
}

/*
 * XXH3(prefix ‖ tag(name, val) ‖ tail): the suffix is assembled on the
 * stack and hashed after the prefix (premixed when prepared), else by
 * streaming.
 */
static uint64_t
hash_suffix(const sgi_hashbuf *prefix, const char *name, const void *val,
    size_t len, const unsigned char *tail, size_t taillen)
{
	unsigned char buf[16 + 64 + TAG_HDR + 256 + 128];
	size_t namelen = strlen(name), n, r = 0;
	XXH3_state_t st;

	if (namelen <= 64 && len <= 256 && taillen <= 128) {
		/* premixed: the window starts with the prefix's tail */
		n = namelen + TAG_HDR + len + taillen;
		if (premixed(prefix, n)) {
			r = prefix->len - 16 * prefix->pre_full;
			memcpy(buf, prefix->b + 16 * prefix->pre_full, r);
		}
		n = r + tag_header(buf + r, name, namelen, len);
		if (len > 0)
			memcpy(buf + n, val, len);
		n += len;
		if (taillen > 0)
			memcpy(buf + n, tail, taillen);
		n += taillen;
		if (premixed(prefix, n - r))
			return mid(prefix, buf, n);
		return sgi_hb_xxh3_tail(prefix, buf, n);
	}
	hb_state_load(prefix, &st);
	if (namelen > 64) {
		XXH3_64bits_update(&st, name, namelen);
		XXH3_64bits_update(&st, buf, tag_header(buf, "", 0, len));
	} else
		XXH3_64bits_update(&st, buf, tag_header(buf, name, namelen,
		    len));
	if (len > 0)
		XXH3_64bits_update(&st, val, len);
	if (taillen > 0)
		XXH3_64bits_update(&st, tail, taillen);
	return XXH3_64bits_digest(&st);
}

static void
tag_str(sgi_hashbuf *h, const char *name, const char *s)
{
	sgi_hb_tag(h, name, s != NULL ? s : "", s != NULL ? strlen(s) : 0);
}

void
sgi_ring_prefix(sgi_hashbuf *h, const sg_algdef *d, const sg_request *r)
{
	sgi_hb_reset(h);
	sgi_hb_byte(h, 0x01);
	sgi_hb_tag(h, "seed", d->seed, d->seed_len);
	tag_str(h, "routing_key", r->routing_key);
	tag_str(h, "model_id", r->model);
}

uint64_t
sgi_ring_entry_hash(const sgi_hashbuf *prefix, const char *id, size_t id_len,
    uint64_t vnode)
{
	unsigned char tail[12 + TAG_HDR + 8];
	size_t n;

	n = tag_header(tail, "virtual_node", 12, 8);
	put_le64(tail + n, vnode);
	return hash_suffix(prefix, "cluster_id", id, id_len, tail, n + 8);
}

uint64_t
sgi_ring_key_hash(const sgi_hashbuf *prefix, const char *key, size_t key_len)
{
	return hash_suffix(prefix, "cache_affinity_key", key, key_len, NULL, 0);
}

/*
 * sgi_ring_entry_hash() of virtual nodes v0..v0+nv of one cluster.  Only
 * the last 8 bytes (the virtual node) differ between them, so for a
 * prepared, mid-size input the blocks that do not reach into those bytes
 * are mixed once: each virtual node then costs the one to three blocks
 * that do (their high words take the node's bytes by a shift) and the
 * avalanches.  Same values as the one-by-one calls (test_hash checks).
 */
struct vplan {
	uint64_t	 c[2];		/* constant sums of the two stages */
	uint64_t	 lo[4], hi[4];	/* variable blocks, secret applied */
	unsigned	 sh[4], st[4];
	int		 nv;
	bool		 two;		/* 129..240 bytes: two stages */
};

static void
plan_block(struct vplan *p, const sgi_hashbuf *h, const xxh_u8 *w, size_t o,
    const xxh_u8 *sec, size_t L, unsigned stage)
{
	xxh_u8 tmp[16];
	const xxh_u8 *b = block_at(h, w, o, tmp);
	uint64_t lo = XXH_readLE64(b) ^ XXH_readLE64(sec);
	uint64_t hi = XXH_readLE64(b + 8) ^ XXH_readLE64(sec + 8);

	if (o + 16 <= L - 8) {
		p->c[stage] += XXH3_mul128_fold64(lo, hi);
		return;
	}
	/* o <= L - 16: the low word is constant, the node starts in hi */
	p->lo[p->nv] = lo;
	p->hi[p->nv] = hi;		/* the node's bytes are 0 in w */
	p->sh[p->nv] = 8 * (unsigned)(L - 16 - o);
	p->st[p->nv] = stage;
	p->nv++;
}

static void
plan_make(struct vplan *p, const sgi_hashbuf *h, const xxh_u8 *w, size_t L)
{
	const xxh_u8 *s = XXH3_kSecret;
	size_t pairs, rounds, k;

	memset(p, 0, sizeof(*p));
	p->c[0] = L * XXH_PRIME64_1;
	if (L <= MID_SPLIT) {
		pairs = L > 96 ? 4 : L > 64 ? 3 : L > 32 ? 2 : 1;
		for (k = 0; k < pairs; k++) {
			if (k < h->pre_full)
				p->c[0] += h->pre_front[k];
			else
				plan_block(p, h, w, 16 * k, s + 32 * k, L, 0);
			plan_block(p, h, w, L - 16 * (k + 1), s + 16 + 32 * k,
			    L, 0);
		}
		return;
	}
	p->two = true;
	p->c[0] += h->pre_sum8;
	for (k = h->pre_full; k < 8; k++)
		plan_block(p, h, w, 16 * k, s + 16 * k, L, 0);
	rounds = L / 16;
	for (k = 8; k < rounds; k++) {
		if (k < h->pre_full)
			p->c[1] += h->pre_mid[k - 8];
		else
			plan_block(p, h, w, 16 * k,
			    s + 16 * (k - 8) + SECRET_MID, L, 1);
	}
	plan_block(p, h, w, L - 16, s + SECRET_LAST, L, 1);
}

static inline uint64_t
plan_eval(const struct vplan *p, uint64_t v)
{
	uint64_t a = p->c[0], b = p->c[1], x;
	int i;

	for (i = 0; i < p->nv; i++) {
		x = XXH3_mul128_fold64(p->lo[i], p->hi[i] ^ (v << p->sh[i]));
		if (p->st[i] == 0)
			a += x;
		else
			b += x;
	}
	if (!p->two)
		return XXH3_avalanche(a);
	return XXH3_avalanche(XXH3_avalanche(a) + b);
}

void
sgi_ring_entry_hashes(const sgi_hashbuf *prefix, const char *id,
    size_t id_len, uint64_t v0, size_t nv, uint64_t *out)
{
	unsigned char w[16 + 10 + TAG_HDR + SG_ID_MAX + 12 + TAG_HDR + 8];
	size_t r, t, i;
	struct vplan p;

	r = prefix->len - 16 * prefix->pre_full;
	t = 10 + TAG_HDR + id_len + 12 + TAG_HDR + 8;	/* the suffix */
	if (!prefix->prepared || id_len > SG_ID_MAX || !premixed(prefix, t)) {
		for (i = 0; i < nv; i++)
			out[i] = sgi_ring_entry_hash(prefix, id, id_len,
			    v0 + i);
		return;
	}
	memcpy(w, prefix->b + 16 * prefix->pre_full, r);
	tag_header(w + r, "cluster_id", 10, id_len);
	memcpy(w + r + 10 + TAG_HDR, id, id_len);
	tag_header(w + r + 10 + TAG_HDR + id_len, "virtual_node", 12, 8);
	memset(w + r + t - 8, 0, 8);
	plan_make(&p, prefix, w, prefix->len + t);
	for (i = 0; i < nv; i++)
		out[i] = plan_eval(&p, v0 + i);
}

void
sgi_pulsar_prefix(sgi_hashbuf *h, const sg_algdef *d, const sg_request *r)
{
	sgi_ring_prefix(h, d, r);
	tag_str(h, "cache_affinity_key", r->cache_affinity_key);
}

uint64_t
sgi_pulsar_hash(const sgi_hashbuf *prefix, const char *id, size_t id_len)
{
	return hash_suffix(prefix, "cluster_id", id, id_len, NULL, 0);
}

/*
 * sgi_pulsar_hash() of every cluster, for a prepared prefix.  Each hash
 * reads its suffix back as 8-byte words right after writing it, and a load
 * that spans several fresh smaller stores waits for them to drain; so the
 * suffixes are written PIPE candidates ahead, into a ring of windows whose
 * constant head (the prefix's partial block, "cluster_id", 0xFF) is
 * written once.
 */
#define PIPE	4

void
sgi_pulsar_hashes(const sgi_hashbuf *prefix, const sg_cluster *c, size_t n,
    double *bits)
{
	uint64_t h;
	unsigned char win[PIPE][16 + TAG_HDR + 10 + SG_ID_MAX];
	size_t r, head, i, k;

	if (!prefix->prepared) {
		for (i = 0; i < n; i++) {
			h = sgi_pulsar_hash(prefix, c[i].id, c[i].id_len);
			memcpy(&bits[i], &h, sizeof h);
		}
		return;
	}
	r = prefix->len - 16 * prefix->pre_full;
	for (k = 0; k < PIPE; k++) {
		memcpy(win[k], prefix->b + 16 * prefix->pre_full, r);
		memcpy(win[k] + r, "cluster_id", 10);
		win[k][r + 10] = 0xFF;
	}
	head = r + 11;
	for (i = 0; i < n && i < PIPE - 1; i++) {
		put_le64(win[i % PIPE] + head, c[i].id_len);
		memcpy(win[i % PIPE] + head + 8, c[i].id, c[i].id_len);
	}
	for (i = 0; i < n; i++) {
		size_t j = i + PIPE - 1, len = head + 8 + c[i].id_len;

		if (j < n) {
			put_le64(win[j % PIPE] + head, c[j].id_len);
			memcpy(win[j % PIPE] + head + 8, c[j].id, c[j].id_len);
		}
		h = premixed(prefix, len - r) ?
		    mid(prefix, win[i % PIPE], len) :
		    sgi_pulsar_hash(prefix, c[i].id, c[i].id_len);
		memcpy(&bits[i], &h, sizeof h);
	}
}

/*
 * (double)h without the branch compilers emit for the top bit (random
 * hashes mispredict it half the time).  Both halves are the usual
 * correctly rounded conversions (the top-bit case halves h keeping a sticky
 * bit, converts and doubles), so the result is (double)h exactly.
 */
static inline double
u64_to_double(uint64_t h)
{
	double lo = (double)(int64_t)(h & INT64_MAX);
	double hi = (double)(int64_t)((h >> 1) | (h & 1)) * 2.0;
	uint64_t a, b, m = (uint64_t)((int64_t)h >> 63);

	memcpy(&a, &lo, sizeof a);
	memcpy(&b, &hi, sizeof b);
	a = (a & ~m) | (b & m);
	memcpy(&lo, &a, sizeof lo);
	return lo;
}

bool
sgi_pulsar_score(uint64_t h, double weight, double *score)
{
	double u, e;

	/*
	 * u = (h + 1) / ((double)UINT64_MAX + 2.0).  The divisor rounds to
	 * exactly 2^64, so multiplying by 2^-64 gives the same bits without
	 * a division on the per-candidate path.
	 */
	u = (u64_to_double(h) + 1.0) * 0x1p-64;
	e = -log(u);
	if (!isfinite(e) || !(e > 0))
		return false;
	*score = weight / e;
	return true;
}


/* --- PRNG ------------------------------------------------------------------ */

static uint64_t
splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static inline uint64_t
rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

/* Write tag(name, val) at p (name is a literal); returns the end. */
static inline unsigned char *
put_tag(unsigned char *p, const char *name, size_t namelen, const void *val,
    size_t len)
{
	p += tag_header(p, name, namelen, len);
	if (len > 0)
		memcpy(p, val, len);
	return p + len;
}

#define SEED_ID_FAST	256	/* request ids up to this take the fast path */

void
sgi_rng_seed(sgi_rng *g, uint64_t router_seed, const sg_algdef *d,
    const sg_request *r)
{
	unsigned char buf[128 + SG_ID_MAX + SEED_ID_FAST], le[8], *p = buf;
	const char *rid = r->request_id != NULL ? r->request_id : "";
	size_t ridlen = strlen(rid);
	uint64_t x;
	int i;

	/*
	 * tag("router_seed") ‖ tag("seed") ‖ tag("request_id") ‖
	 * tag("attempt"): on the stack in one go when it fits (every
	 * decision seeds, so this is on the hot path), else through a
	 * hash buffer that can stream.
	 */
	if (ridlen <= SEED_ID_FAST && d->seed_len <= SG_ID_MAX) {
		put_le64(le, router_seed);
		p = put_tag(p, "router_seed", 11, le, 8);
		p = put_tag(p, "seed", 4, d->seed, d->seed_len);
		p = put_tag(p, "request_id", 10, rid, ridlen);
		put_le64(le, (uint64_t)r->nexcluded);
		p = put_tag(p, "attempt", 7, le, 8);
		x = XXH3_64bits(buf, (size_t)(p - buf));
	} else {
		sgi_hashbuf h;

		sgi_hb_reset(&h);
		put_le64(le, router_seed);
		sgi_hb_tag(&h, "router_seed", le, 8);
		sgi_hb_tag(&h, "seed", d->seed, d->seed_len);
		sgi_hb_tag(&h, "request_id", rid, ridlen);
		put_le64(le, (uint64_t)r->nexcluded);
		sgi_hb_tag(&h, "attempt", le, 8);
		x = sgi_hb_xxh3(&h);
	}
	for (i = 0; i < 4; i++)
		g->s[i] = splitmix64(&x);
}

uint64_t
sgi_rng_next(sgi_rng *g)
{
	uint64_t *s = g->s;
	uint64_t r = rotl(s[1] * 5, 7) * 9;
	uint64_t t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return r;
}

/*
 * Lemire's multiply-shift with rejection: the high word of x·n is uniform in
 * [0, n) once the low word is past (2^64 - n) mod n.
 */
uint64_t
sgi_rng_below(sgi_rng *g, uint64_t n)
{
	__extension__ typedef unsigned __int128 u128;
	u128 m;
	uint64_t lo, t;

	if (n <= 1)
		return 0;
	m = (u128)sgi_rng_next(g) * n;
	lo = (uint64_t)m;
	if (lo < n) {
		t = (0 - n) % n;
		while (lo < t) {
			m = (u128)sgi_rng_next(g) * n;
			lo = (uint64_t)m;
		}
	}
	return (uint64_t)(m >> 64);
}
