/*
 * sg_hash.c — the byte layout of every affinity hash (ref §0, §4.5.3, §4.6)
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
#include <math.h>
#include <string.h>

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "sg_internal.h"

#define HB_STREAM	((size_t)-1)
#define TAG_HDR		9		/* 0xFF + 8-byte length */

_Static_assert(sizeof(XXH3_state_t) <= sizeof(((sgi_hashbuf *)0)->b),
    "an XXH3 state must fit in a hash buffer");

static void
put_le64(unsigned char *p, uint64_t v)
{
	int i;

	for (i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
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
}

/* Append raw bytes to h, switching to a streaming state if they don't fit. */
static void
hb_append(sgi_hashbuf *h, const void *p, size_t n)
{
	XXH3_state_t st;

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

/*
 * XXH3(prefix ‖ tag(name, val) ‖ tail): one shot over a stack copy when it
 * fits, else streaming.
 */
static uint64_t
hash_suffix(const sgi_hashbuf *prefix, const char *name, const void *val,
    size_t len, const unsigned char *tail, size_t taillen)
{
	unsigned char buf[sizeof prefix->b + 512];
	unsigned char hdr[64 + TAG_HDR];
	size_t namelen = strlen(name), n;
	XXH3_state_t st;

	if (prefix->len != HB_STREAM && namelen <= 64 && len <= 256 &&
	    taillen <= 128) {
		n = prefix->len;
		memcpy(buf, prefix->b, n);
		n += tag_header(buf + n, name, namelen, len);
		if (len > 0)
			memcpy(buf + n, val, len);
		n += len;
		if (taillen > 0)
			memcpy(buf + n, tail, taillen);
		n += taillen;
		return XXH3_64bits(buf, n);
	}
	hb_state_load(prefix, &st);
	if (namelen > 64) {
		XXH3_64bits_update(&st, name, namelen);
		XXH3_64bits_update(&st, hdr, tag_header(hdr, "", 0, len));
	} else
		XXH3_64bits_update(&st, hdr, tag_header(hdr, name, namelen, len));
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

bool
sgi_pulsar_score(uint64_t h, double weight, double *score)
{
	double u, e;

	/*
	 * u = (h + 1) / ((double)UINT64_MAX + 2.0).  The divisor rounds to
	 * exactly 2^64, so multiplying by 2^-64 gives the same bits without
	 * a division on the per-candidate path.
	 */
	u = ((double)h + 1.0) * 0x1p-64;
	e = -log(u);
	if (!isfinite(e) || !(e > 0))
		return false;
	*score = weight / e;
	return true;
}

bool
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
