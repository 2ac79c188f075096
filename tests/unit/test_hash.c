/*
 * test_hash.c — sg_hash.c: the tag byte layout, the upstream test vectors of
 * stargate-lb-config(5), pulsar scores and weights, and the decision PRNG.
 *
 * Expected hashes are computed here from byte strings built by hand, never
 * through sg_hash.c's own helpers.
 */
#include "sg_test.h"

#include <math.h>
#include <stdlib.h>
#include <xxhash.h>

#include "sg_internal.h"

/* Append tag(name, val) to buf by hand: name, 0xFF, 8-byte LE length, val. */
static size_t
put_tag(unsigned char *buf, size_t n, const char *name, const void *val,
    size_t len)
{
	size_t i;

	memcpy(buf + n, name, strlen(name));
	n += strlen(name);
	buf[n++] = 0xFF;
	for (i = 0; i < 8; i++)
		buf[n++] = (unsigned char)((uint64_t)len >> (8 * i));
	memcpy(buf + n, val, len);
	return n + len;
}

static void
setdef(sg_algdef *d, const char *seed)
{
	memset(d, 0, sizeof *d);
	d->algorithm = SG_ALG_PULSAR;
	strcpy(d->seed, seed);
	d->seed_len = strlen(seed);
	d->virtual_nodes = 150;
}

static void
test_tag_layout_is_name_ff_le64_len_value(void **state)
{
	sgi_hashbuf h;
	static const unsigned char want[] = {
		'a', 'b', 0xFF, 3, 0, 0, 0, 0, 0, 0, 0, 'x', 'y', 'z',
		'q', 0xFF, 0, 0, 0, 0, 0, 0, 0, 0,
	};

	(void)state;
	sgi_hb_reset(&h);
	assert_int_equal(h.len, 0);
	sgi_hb_tag(&h, "ab", "xyz", 3);
	sgi_hb_tag(&h, "q", "", 0);
	assert_int_equal(h.len, sizeof want);
	assert_memory_equal(h.b, want, sizeof want);
	assert_true(sgi_hb_xxh3(&h) == XXH3_64bits(want, sizeof want));
}

static void
test_ring_entry_vector_matches_hand_built_bytes(void **state)
{
	unsigned char buf[512], v7[8] = { 7, 0, 0, 0, 0, 0, 0, 0 };
	sgi_hashbuf prefix;
	sg_algdef d;
	sg_request r;
	size_t n = 0;

	(void)state;
	buf[n++] = 0x01;
	n = put_tag(buf, n, "seed", "seed-1", 6);
	n = put_tag(buf, n, "routing_key", "rk-1", 4);
	n = put_tag(buf, n, "model_id", "model-a", 7);
	n = put_tag(buf, n, "cluster_id", "inst-a", 6);
	n = put_tag(buf, n, "virtual_node", v7, 8);

	setdef(&d, "seed-1");
	memset(&r, 0, sizeof r);
	r.routing_key = "rk-1";
	r.model = "model-a";
	sgi_ring_prefix(&prefix, &d, &r);
	assert_true(sgi_ring_entry_hash(&prefix, "inst-a", 6, 7) ==
	    XXH3_64bits(buf, n));
	/* a different virtual node gives a different entry */
	assert_true(sgi_ring_entry_hash(&prefix, "inst-a", 6, 8) !=
	    XXH3_64bits(buf, n));
}

/* A small deterministic generator for the random tests below. */
static uint64_t
t_next(uint64_t *g)
{
	uint64_t z = (*g += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/*
 * sgi_ring_entry_hashes() (the shared blocks mixed once) gives the same
 * values as hashing every entry's bytes, over prefix and id lengths that
 * cover both mid-size paths, the block boundaries and the plain call,
 * prepared or not.
 */
static void
test_ring_entry_hashes_match_one_by_one(void **state)
{
	unsigned char buf[1024], le[8];
	char seed[200], rk[300], model[100], id[SG_ID_MAX];
	uint64_t g = 99, out[70], v0;
	sgi_hashbuf prefix;
	sg_algdef d;
	sg_request r;
	size_t trial, i, j, k, n, ls, lr, lm, li, nv;

	(void)state;
	for (trial = 0; trial < 3000; trial++) {
		ls = (size_t)(t_next(&g) % 40);
		lr = (size_t)(t_next(&g) % (trial % 10 == 0 ? 280 : 60));
		lm = (size_t)(t_next(&g) % 40);
		li = 1 + (size_t)(t_next(&g) % (trial % 7 == 0 ? 256 : 40));
		for (i = 0; i < ls; i++)
			seed[i] = (char)('a' + t_next(&g) % 26);
		seed[ls] = '\0';
		for (i = 0; i < lr; i++)
			rk[i] = (char)('a' + t_next(&g) % 26);
		rk[lr] = '\0';
		for (i = 0; i < lm; i++)
			model[i] = (char)('A' + t_next(&g) % 26);
		model[lm] = '\0';
		for (i = 0; i < li; i++)
			id[i] = (char)(1 + t_next(&g) % 255);
		setdef(&d, seed);
		memset(&r, 0, sizeof r);
		r.routing_key = lr > 0 ? rk : NULL;
		r.model = model;
		sgi_ring_prefix(&prefix, &d, &r);
		if (trial % 5 != 0)
			sgi_hb_prepare(&prefix);
		v0 = trial % 3 == 0 ? t_next(&g) : t_next(&g) % 200;
		nv = 1 + (size_t)(t_next(&g) % 70);
		sgi_ring_entry_hashes(&prefix, id, li, v0, nv, out);
		for (k = 0; k < nv; k++) {
			n = 0;
			buf[n++] = 0x01;
			n = put_tag(buf, n, "seed", seed, ls);
			n = put_tag(buf, n, "routing_key", rk, lr);
			n = put_tag(buf, n, "model_id", model, lm);
			n = put_tag(buf, n, "cluster_id", id, li);
			for (j = 0; j < 8; j++)
				le[j] = (unsigned char)((v0 + k) >> (8 * j));
			n = put_tag(buf, n, "virtual_node", le, 8);
			if (out[k] != XXH3_64bits(buf, n))
				fail_msg("trial %zu: entry %zu of %zu (prefix "
				    "%zu bytes, id %zu)", trial, k, nv,
				    prefix.len, li);
			assert_true(out[k] == sgi_ring_entry_hash(&prefix, id,
			    li, v0 + k));
		}
	}
}

static void
test_ring_key_hash_layout(void **state)
{
	unsigned char buf[512];
	sgi_hashbuf prefix;
	sg_algdef d;
	sg_request r;
	size_t n = 0;

	(void)state;
	buf[n++] = 0x01;
	n = put_tag(buf, n, "seed", "", 0);
	n = put_tag(buf, n, "routing_key", "", 0);	/* absent -> "" */
	n = put_tag(buf, n, "model_id", "m", 1);
	n = put_tag(buf, n, "cache_affinity_key", "k1", 2);
	setdef(&d, "");
	memset(&r, 0, sizeof r);
	r.model = "m";
	sgi_ring_prefix(&prefix, &d, &r);
	assert_true(sgi_ring_key_hash(&prefix, "k1", 2) == XXH3_64bits(buf, n));
}

static void
test_pulsar_vector_0x19443c44ec9f8abf(void **state)
{
	sgi_hashbuf prefix;
	sg_algdef d;
	sg_request r;

	(void)state;
	setdef(&d, "seed-1");
	memset(&r, 0, sizeof r);
	r.routing_key = "rk-1";
	r.model = "model-a";
	r.cache_affinity_key = "prefix-123";
	sgi_pulsar_prefix(&prefix, &d, &r);
	assert_true(sgi_pulsar_hash(&prefix, "inst-a", 6) ==
	    0x19443c44ec9f8abfULL);
}

/* A prefix longer than the fixed buffer hashes exactly like the bytes. */
static void
test_long_affinity_key_hashes_all_bytes(void **state)
{
	size_t keylen = 3 * sizeof(((sgi_hashbuf *)0)->b), n = 0;
	unsigned char *buf = malloc(keylen + 512);
	char *key = malloc(keylen + 1);
	sgi_hashbuf prefix;
	sg_algdef d;
	sg_request r;
	size_t i;

	(void)state;
	assert_non_null(buf);
	assert_non_null(key);
	for (i = 0; i < keylen; i++)
		key[i] = (char)('a' + i % 26);
	key[keylen] = '\0';
	buf[n++] = 0x01;
	n = put_tag(buf, n, "seed", "s", 1);
	n = put_tag(buf, n, "routing_key", "rk", 2);
	n = put_tag(buf, n, "model_id", "m", 1);
	n = put_tag(buf, n, "cache_affinity_key", key, keylen);
	n = put_tag(buf, n, "cluster_id", "c-1", 3);
	setdef(&d, "s");
	memset(&r, 0, sizeof r);
	r.routing_key = "rk";
	r.model = "m";
	r.cache_affinity_key = key;
	sgi_pulsar_prefix(&prefix, &d, &r);
	assert_true(sgi_pulsar_hash(&prefix, "c-1", 3) == XXH3_64bits(buf, n));
	/* the ring key hash with a long key, too */
	sgi_ring_prefix(&prefix, &d, &r);
	n = 0;
	buf[n++] = 0x01;
	n = put_tag(buf, n, "seed", "s", 1);
	n = put_tag(buf, n, "routing_key", "rk", 2);
	n = put_tag(buf, n, "model_id", "m", 1);
	n = put_tag(buf, n, "cache_affinity_key", key, keylen);
	assert_true(sgi_ring_key_hash(&prefix, key, keylen) ==
	    XXH3_64bits(buf, n));
	free(buf);
	free(key);
}

static void
test_pulsar_score_is_weight_over_minus_ln_u(void **state)
{
	double s = 0, u;

	(void)state;
	static const uint64_t hs[] = { 1234567, 1ULL << 53, (1ULL << 53) + 1,
	    0x19443c44ec9f8abfULL, UINT64_MAX - 4096, UINT64_MAX - 1 };
	size_t i;

	/* bit-exact against the formula of stargate-lb-config(5) */
	for (i = 0; i < sizeof hs / sizeof hs[0]; i++) {
		u = ((double)hs[i] + 1.0) / ((double)UINT64_MAX + 2.0);
		if (!(-log(u) > 0))
			continue;
		assert_true(sgi_pulsar_score(hs[i], 100, &s));
		assert_true(s == 100 / -log(u));
	}
	/* and for random hashes, half of them with the top bit set */
	{
		uint64_t g = 7, h;

		for (i = 0; i < 200000; i++) {
			g ^= g << 13;
			g ^= g >> 7;
			g ^= g << 17;
			h = i % 2 ? g | (1ULL << 63) : g >> (i % 64);
			u = ((double)h + 1.0) / ((double)UINT64_MAX + 2.0);
			if (!(-log(u) > 0))
				continue;
			assert_true(sgi_pulsar_score(h, 3, &s));
			assert_true(s == 3 / -log(u));
		}
	}
	assert_true(sgi_pulsar_score(0, 1, &s));
	assert_near(s, 1 / -log(1.0 / ((double)UINT64_MAX + 2.0)), 1e-12);
	/* h = UINT64_MAX gives u = 1, e = 0: unranked */
	assert_false(sgi_pulsar_score(UINT64_MAX, 1, &s));
	/* larger h -> larger u -> smaller e -> larger score */
	{
		double lo = 0, hi = 0;

		assert_true(sgi_pulsar_score(1ULL << 40, 10, &lo));
		assert_true(sgi_pulsar_score(1ULL << 62, 10, &hi));
		assert_true(hi > lo);
	}
}

static void
test_pulsar_weight_modes(void **state)
{
	sg_algdef d;
	sg_cluster c;
	double w = 0;

	(void)state;
	setdef(&d, "");
	assert_int_equal(sg_cluster_init(&c, "a", 1), 0);
	c.last_mean_input_tps = 500;
	/* default max-input-tps mode: absent max -> unranked, no fallback */
	assert_false(sgi_pulsar_weight(&d, &c, &w));
	c.max_input_tps = 900;
	assert_true(sgi_pulsar_weight(&d, &c, &w));
	assert_near(w, 900, 0);
	c.max_input_tps = INFINITY;
	assert_false(sgi_pulsar_weight(&d, &c, &w));
	c.max_input_tps = NAN;
	assert_false(sgi_pulsar_weight(&d, &c, &w));
	c.max_input_tps = -1;
	assert_false(sgi_pulsar_weight(&d, &c, &w));
	d.rendezvous_weight = SG_WEIGHT_LAST_MEAN_INPUT_TPS;
	assert_true(sgi_pulsar_weight(&d, &c, &w));
	assert_near(w, 500, 0);
	c.last_mean_input_tps = 0;
	assert_false(sgi_pulsar_weight(&d, &c, &w));
}

static void
draw(uint64_t *out, size_t n, uint64_t rs, const sg_algdef *d,
    const sg_request *r)
{
	sgi_rng g;
	size_t i;

	sgi_rng_seed(&g, rs, d, r);
	for (i = 0; i < n; i++)
		out[i] = sgi_rng_next(&g);
}

static void
test_prng_same_inputs_same_stream(void **state)
{
	uint64_t a[16], b[16];
	sg_algdef d, d2;
	sg_request r;

	(void)state;
	setdef(&d, "s");
	memset(&r, 0, sizeof r);
	r.request_id = "req-1";
	draw(a, 16, 42, &d, &r);
	draw(b, 16, 42, &d, &r);
	assert_memory_equal(a, b, sizeof a);
	/* the definition's id and algorithm do not enter the seed */
	d2 = d;
	d2.id = 7;
	d2.algorithm = SG_ALG_RANDOM;
	draw(b, 16, 42, &d2, &r);
	assert_memory_equal(a, b, sizeof a);
	/* the stream is not constant */
	assert_true(a[0] != a[1]);
}

static void
test_prng_differs_by_request_attempt_and_seeds(void **state)
{
	const char *ex[] = { "c1" };
	uint64_t a[4], b[4];
	sg_algdef d;
	sg_request r;

	(void)state;
	setdef(&d, "s");
	memset(&r, 0, sizeof r);
	r.request_id = "req-1";
	draw(a, 4, 42, &d, &r);

	r.request_id = "req-2";
	draw(b, 4, 42, &d, &r);
	assert_true(memcmp(a, b, sizeof a) != 0);

	r.request_id = "req-1";
	r.excluded = ex;
	r.nexcluded = 1;	/* attempt 1 */
	draw(b, 4, 42, &d, &r);
	assert_true(memcmp(a, b, sizeof a) != 0);
	r.nexcluded = 0;

	draw(b, 4, 43, &d, &r);	/* router seed */
	assert_true(memcmp(a, b, sizeof a) != 0);

	setdef(&d, "t");	/* definition seed */
	draw(b, 4, 42, &d, &r);
	assert_true(memcmp(a, b, sizeof a) != 0);

	r.request_id = NULL;	/* absent id hashes as "" and still works */
	draw(b, 4, 42, &d, &r);
	draw(a, 4, 42, &d, &r);
	assert_memory_equal(a, b, sizeof a);
}

/* The seed is XXH3 over the four tags, expanded by splitmix64 (by hand). */
static void
check_seed_layout(const char *rid, uint64_t rs, const char *seed,
    size_t nexcluded)
{
	unsigned char *buf = malloc(1024 + strlen(rid));
	unsigned char le[8];
	const char *ex[4] = { "a", "b", "c", "d" };
	uint64_t x, z;
	sg_algdef d;
	sg_request r;
	sgi_rng g;
	size_t n = 0, i;

	assert_non_null(buf);
	for (i = 0; i < 8; i++)
		le[i] = (unsigned char)(rs >> (8 * i));
	n = put_tag(buf, n, "router_seed", le, 8);
	n = put_tag(buf, n, "seed", seed, strlen(seed));
	n = put_tag(buf, n, "request_id", rid, strlen(rid));
	for (i = 0; i < 8; i++)
		le[i] = (unsigned char)((uint64_t)nexcluded >> (8 * i));
	n = put_tag(buf, n, "attempt", le, 8);
	x = XXH3_64bits(buf, n);

	setdef(&d, seed);
	memset(&r, 0, sizeof r);
	r.request_id = rid;
	r.excluded = ex;
	r.nexcluded = nexcluded;
	sgi_rng_seed(&g, rs, &d, &r);
	for (i = 0; i < 4; i++) {
		x += 0x9e3779b97f4a7c15ULL;
		z = x;
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
		z ^= z >> 31;
		assert_true(g.s[i] == z);
	}
	free(buf);
}

static void
test_prng_seed_layout(void **state)
{
	char longid[700];

	(void)state;
	check_seed_layout("req-1", 42, "s", 0);
	check_seed_layout("", 0, "", 3);
	memset(longid, 'q', sizeof longid - 1);	/* past the fast path */
	longid[sizeof longid - 1] = '\0';
	check_seed_layout(longid, UINT64_MAX, "seed-x", 2);
}

static void
test_rng_below_in_bounds_and_covers_range(void **state)
{
	static const uint64_t ns[] = { 1, 2, 3, 7, 10, 1000,
	    (1ULL << 63) + 1, UINT64_MAX };
	unsigned seen[7] = { 0 };
	sg_algdef d;
	sg_request r;
	sgi_rng g;
	size_t i, k;

	(void)state;
	setdef(&d, "");
	memset(&r, 0, sizeof r);
	r.request_id = "bounds";
	sgi_rng_seed(&g, 1, &d, &r);
	for (k = 0; k < sizeof ns / sizeof ns[0]; k++)
		for (i = 0; i < 2000; i++)
			assert_true(sgi_rng_below(&g, ns[k]) < ns[k]);
	for (i = 0; i < 7000; i++)
		seen[sgi_rng_below(&g, 7)]++;
	/* every value appears, none wildly over-represented (expect 1000) */
	for (k = 0; k < 7; k++) {
		assert_true(seen[k] > 800);
		assert_true(seen[k] < 1200);
	}
}

/*
 * XXH3 of prefix ‖ tail with the prefix's blocks premixed is XXH3_64bits of
 * the concatenation (libxxhash's), for every prefix length 0..260 with every
 * total length up to 280 (all of XXH3's short, 17..128, 129..240 and long
 * paths, every block alignment), random bytes, prepared or not; and for a
 * streamed (very long) prefix.
 */
static void
test_prepared_tail_hash_is_xxh3_of_the_concatenation(void **state)
{
	static unsigned char cat[4096];
	uint64_t g = 0x243f6a8885a308d3ULL;
	sgi_hashbuf h;
	size_t p, t, i, rep, cases = 0;

	(void)state;
	for (p = 0; p <= 260; p++)
		for (t = 0; p + t <= 280; t++)
			for (rep = 0; rep < 2; rep++, cases++) {
				for (i = 0; i < p + t; i++) {
					g ^= g << 13;
					g ^= g >> 7;
					g ^= g << 17;
					cat[i] = (unsigned char)g;
				}
				sgi_hb_reset(&h);
				memcpy(h.b, cat, p);
				h.len = p;
				assert_true(sgi_hb_xxh3_tail(&h, cat + p, t) ==
				    XXH3_64bits(cat, p + t));
				sgi_hb_prepare(&h);
				assert_true(h.prepared);
				if (sgi_hb_xxh3_tail(&h, cat + p, t) !=
				    XXH3_64bits(cat, p + t))
					fail_msg("prefix %zu tail %zu", p, t);
			}
	assert_true(cases > 60000);
	/* appending after prepare drops the premixed blocks */
	sgi_hb_reset(&h);
	memcpy(h.b, cat, 100);
	h.len = 100;
	sgi_hb_prepare(&h);
	sgi_hb_byte(&h, cat[100]);
	assert_false(h.prepared);
	assert_true(sgi_hb_xxh3_tail(&h, cat + 101, 50) ==
	    XXH3_64bits(cat, 151));
	/* a streamed prefix: prepare is a no-op, the hash is still right */
	memset(cat, 'k', sizeof(cat));
	sgi_hb_reset(&h);
	sgi_hb_tag(&h, "k", cat, 3000);
	sgi_hb_prepare(&h);
	assert_false(h.prepared);
	{
		static unsigned char all[4096];
		size_t n = put_tag(all, 0, "k", cat, 3000);

		memcpy(all + n, "tail", 4);
		assert_true(sgi_hb_xxh3_tail(&h, "tail", 4) ==
		    XXH3_64bits(all, n + 4));
	}
}

/*
 * The batch of pulsar hashes equals one sgi_pulsar_hash() per cluster (and
 * XXH3 of the hand-built bytes), prepared or not, for ids of every length
 * and prefixes that put the batch on each of XXH3's paths.
 */
static void
test_pulsar_hashes_batch_equals_one_by_one(void **state)
{
	static sg_cluster c[300];
	static double bits[300];
	static const size_t keylens[] = { 0, 1, 40, 100, 200, 300 };
	unsigned char buf[2048];
	uint64_t g = 99, h, want;
	sgi_hashbuf prefix;
	sg_request r;
	sg_algdef d;
	char id[SG_ID_MAX + 1], key[400];
	size_t i, k, n, len, m;

	(void)state;
	setdef(&d, "seed");
	for (i = 0; i < 300; i++) {
		g ^= g << 13;
		g ^= g >> 7;
		g ^= g << 17;
		len = 1 + (size_t)(g % SG_ID_MAX);
		if (i < SG_ID_MAX)
			len = i + 1;	/* every length once */
		for (k = 0; k < len; k++)
			id[k] = (char)('a' + (g >> (k % 50)) % 26);
		assert_int_equal(sg_cluster_init(&c[i], id, len), 0);
	}
	for (k = 0; k < sizeof(keylens) / sizeof(keylens[0]); k++) {
		memset(key, 'q', keylens[k]);
		key[keylens[k]] = '\0';
		sg_request_init(&r);
		r.model = "m";
		r.cache_affinity_key = key;
		sgi_pulsar_prefix(&prefix, &d, &r);
		for (m = 0; m < 2; m++) {
			if (m == 1)
				sgi_hb_prepare(&prefix);
			for (n = 0; n <= 300; n += 299) {
				sgi_pulsar_hashes(&prefix, c, n, bits);
				for (i = 0; i < n; i++) {
					memcpy(&h, &bits[i], sizeof h);
					assert_true(h == sgi_pulsar_hash(&prefix,
					    c[i].id, c[i].id_len));
				}
			}
			sgi_pulsar_hashes(&prefix, c + 7, 3, bits);
			/* by hand: prefix bytes ‖ tag("cluster_id", id) */
			memcpy(buf, prefix.b, prefix.len);
			len = put_tag(buf, prefix.len, "cluster_id", c[9].id,
			    c[9].id_len);
			want = XXH3_64bits(buf, len);
			memcpy(&h, &bits[2], sizeof h);
			assert_true(h == want);
		}
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tag_layout_is_name_ff_le64_len_value),
		cmocka_unit_test(
		    test_prepared_tail_hash_is_xxh3_of_the_concatenation),
		cmocka_unit_test(test_pulsar_hashes_batch_equals_one_by_one),
		cmocka_unit_test(test_ring_entry_vector_matches_hand_built_bytes),
		cmocka_unit_test(test_ring_key_hash_layout),
		cmocka_unit_test(test_ring_entry_hashes_match_one_by_one),
		cmocka_unit_test(test_pulsar_vector_0x19443c44ec9f8abf),
		cmocka_unit_test(test_long_affinity_key_hashes_all_bytes),
		cmocka_unit_test(test_pulsar_score_is_weight_over_minus_ln_u),
		cmocka_unit_test(test_pulsar_weight_modes),
		cmocka_unit_test(test_prng_same_inputs_same_stream),
		cmocka_unit_test(test_prng_differs_by_request_attempt_and_seeds),
		cmocka_unit_test(test_prng_seed_layout),
		cmocka_unit_test(test_rng_below_in_bounds_and_covers_range),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
