/*
 * sg_sha256.c — SHA-256 (FIPS 180-4), fast where it counts.
 *
 * Every proxied request hashes a session id, a cache affinity key and a
 * store key: short messages of one or two blocks, where a portable
 * SHA-256 spends a few thousand instructions a block and the x86 SHA
 * extensions (sha256rnds2, sha256msg1/2) about a hundred.  The block
 * function is chosen once, at load time (see resolve_blocks below).
 * Elsewhere, and for a hash begun with sg_sha256_init_portable(), the
 * portable C below runs.
 * Both produce the digests of any SHA-256 (tests/unit/test_sha256.c).
 *
 * Padding and lengths are the message framing of FIPS 180-4 section 5.1:
 * a 1 bit, zeros, and the bit length as a 64-bit big-endian integer.
 */
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__) && defined(__ELF__) && defined(__GLIBC__)
#define SHA_X86 1
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "sg_common.h"
#include "sg_sha256.h"

static const uint32_t K[64] = {
	0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b,
	0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01,
	0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7,
	0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc,
	0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152,
	0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
	0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
	0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
	0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
	0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08,
	0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f,
	0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
	0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

static const uint32_t H0[8] = {
	0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
	0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
};

typedef void blocks_fn(uint32_t h[8], const unsigned char *p, size_t n);

/* --- portable ------------------------------------------------------------- */

#define ROR(x, n)	(((x) >> (n)) | ((x) << (32 - (n))))
#define BSIG0(x)	(ROR(x, 2) ^ ROR(x, 13) ^ ROR(x, 22))
#define BSIG1(x)	(ROR(x, 6) ^ ROR(x, 11) ^ ROR(x, 25))
#define SSIG0(x)	(ROR(x, 7) ^ ROR(x, 18) ^ ((x) >> 3))
#define SSIG1(x)	(ROR(x, 17) ^ ROR(x, 19) ^ ((x) >> 10))
#define CH(x, y, z)	(((x) & (y)) ^ (~(x) & (z)))
#define MAJ(x, y, z)	(((x) & (y)) ^ ((x) & (z)) ^ ((y) & (z)))

static uint32_t
be32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	    (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static void
blocks_c(uint32_t h[8], const unsigned char *p, size_t n)
{
	uint32_t w[64], a, b, c, d, e, f, g, k, t1, t2;
	int i;

	for (; n > 0; n--, p += 64) {
		for (i = 0; i < 16; i++)
			w[i] = be32(p + 4 * i);
		for (i = 16; i < 64; i++)
			w[i] = SSIG1(w[i - 2]) + w[i - 7] + SSIG0(w[i - 15]) +
			    w[i - 16];
		a = h[0], b = h[1], c = h[2], d = h[3];
		e = h[4], f = h[5], g = h[6], k = h[7];
		for (i = 0; i < 64; i++) {
			t1 = k + BSIG1(e) + CH(e, f, g) + K[i] + w[i];
			t2 = BSIG0(a) + MAJ(a, b, c);
			k = g, g = f, f = e, e = d + t1;
			d = c, c = b, b = a, a = t1 + t2;
		}
		h[0] += a, h[1] += b, h[2] += c, h[3] += d;
		h[4] += e, h[5] += f, h[6] += g, h[7] += k;
	}
}

/* --- x86 SHA extensions --------------------------------------------------- */

#ifdef SHA_X86
/*
 * The state lives in two registers as the instructions want it: ABEF and
 * CDGH (A in the top lane).  Each sha256rnds2 does two rounds with the
 * two low lanes of W+K; the message schedule W[t] = s1(W[t-2]) + W[t-7] +
 * s0(W[t-15]) + W[t-16] is sha256msg1 (the s0 part with W[t-16]), an add
 * of W[t-7..t-4] (alignr of the last two groups) and sha256msg2 (s1).
 */
#define SHA_TARGET	__attribute__((target("sha,sse4.1,ssse3")))

#define QROUND(m, g) do {						\
	__m128i wk_ = _mm_add_epi32((m),				\
	    _mm_loadu_si128((const __m128i *)(const void *)(K + 4 * (g)))); \
	s1 = _mm_sha256rnds2_epu32(s1, s0, wk_);			\
	s0 = _mm_sha256rnds2_epu32(s0, s1, _mm_shuffle_epi32(wk_, 0x0e)); \
} while (0)
/* a (W[t-16..t-13]) becomes W[t..t+3]; b, c, d: the groups after a. */
#define SCHED(a, b, c, d)	((a) = _mm_sha256msg2_epu32(_mm_add_epi32( \
	_mm_sha256msg1_epu32((a), (b)), _mm_alignr_epi8((d), (c), 4)), (d)))

SHA_TARGET static void
blocks_ni(uint32_t h[8], const unsigned char *p, size_t n)
{
	const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL,
	    0x0405060700010203LL);
	__m128i s0, s1, t, m0, m1, m2, m3, save0, save1;
	int g;

	t = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)(void *)h),
	    0xb1);					/* B A D C */
	s1 = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i *)(void *)
	    (h + 4)), 0x1b);				/* H G F E */
	s0 = _mm_alignr_epi8(t, s1, 8);			/* ABEF */
	s1 = _mm_blend_epi16(s1, t, 0xf0);		/* CDGH */
	for (; n > 0; n--, p += 64) {
		save0 = s0;
		save1 = s1;
		m0 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)
		    (const void *)p), bswap);
		m1 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)
		    (const void *)(p + 16)), bswap);
		m2 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)
		    (const void *)(p + 32)), bswap);
		m3 = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)
		    (const void *)(p + 48)), bswap);
		QROUND(m0, 0);
		QROUND(m1, 1);
		QROUND(m2, 2);
		QROUND(m3, 3);
		for (g = 4; g < 16; g += 4) {
			SCHED(m0, m1, m2, m3);
			QROUND(m0, g);
			SCHED(m1, m2, m3, m0);
			QROUND(m1, g + 1);
			SCHED(m2, m3, m0, m1);
			QROUND(m2, g + 2);
			SCHED(m3, m0, m1, m2);
			QROUND(m3, g + 3);
		}
		s0 = _mm_add_epi32(s0, save0);
		s1 = _mm_add_epi32(s1, save1);
	}
	t = _mm_shuffle_epi32(s0, 0x1b);		/* A B E F */
	s1 = _mm_shuffle_epi32(s1, 0xb1);		/* G H C D */
	_mm_storeu_si128((__m128i *)(void *)h, _mm_blend_epi16(t, s1, 0xf0));
	_mm_storeu_si128((__m128i *)(void *)(h + 4), _mm_alignr_epi8(s1, t, 8));
}
#undef QROUND
#undef SCHED

#endif

/*
 * The choice is the dynamic loader's: blocks_auto is an ifunc, resolved
 * once when the library is loaded, from cpuid (SHA in leaf 7, SSSE3 and
 * SSE4.1 in leaf 1).  A cpuid here costs microseconds (a VM exit), so it
 * is never asked per hash, and the answer lives in the GOT, not in a
 * variable of ours.  The resolver runs while the loader is still
 * relocating, before the sanitizers are set up: it touches registers only
 * and carries no instrumentation (a coverage counter is a global).
 */
#ifdef SHA_X86
#if defined(__clang__)
#define NO_INSTRUMENT __attribute__((no_sanitize("address", "undefined", "coverage")))
#else
#define NO_INSTRUMENT __attribute__((no_sanitize("address", "undefined")))
#endif
NO_INSTRUMENT
static blocks_fn *
resolve_blocks(void)
{
	unsigned int max, a, b, c, d;
	bool ssse3, sse41;

	/* cpuid.h's macros, not its functions: no call out of this one. */
	__cpuid(0, max, b, c, d);
	if (max < 7)
		return blocks_c;
	__cpuid(1, a, b, c, d);
	ssse3 = (c & bit_SSSE3) != 0;
	sse41 = (c & bit_SSE4_1) != 0;
	__cpuid_count(7, 0, a, b, c, d);
	return (b & bit_SHA) != 0 && ssse3 && sse41 ? blocks_ni : blocks_c;
}

static void blocks_auto(uint32_t *, const unsigned char *, size_t)
    __attribute__((ifunc("resolve_blocks")));
#define BEST_BLOCKS blocks_auto
#else
#define BEST_BLOCKS blocks_c
#endif

static blocks_fn *
blocks(const sg_sha256_ctx *c)
{
	return c->portable ? blocks_c : BEST_BLOCKS;
}

bool
sg_sha256_accelerated(void)
{
#ifdef SHA_X86
	return resolve_blocks() != blocks_c;
#else
	return false;
#endif
}

/* --- framing -------------------------------------------------------------- */

void
sg_sha256_init(sg_sha256_ctx *c)
{
	memcpy(c->h, H0, sizeof(H0));
	c->total = 0;
	c->nbuf = 0;
	c->portable = false;
}

void
sg_sha256_init_portable(sg_sha256_ctx *c)
{
	sg_sha256_init(c);
	c->portable = true;
}

void
sg_sha256_update(sg_sha256_ctx *c, const void *data, size_t len)
{
	const unsigned char *p = data;
	blocks_fn *fn;
	size_t k;

	if (len == 0)
		return;
	fn = blocks(c);
	c->total += len;
	if (c->nbuf > 0) {
		k = 64 - c->nbuf < len ? 64 - c->nbuf : len;
		memcpy(c->buf + c->nbuf, p, k);
		c->nbuf += k;
		p += k;
		len -= k;
		if (c->nbuf < 64)
			return;
		fn(c->h, c->buf, 1);
		c->nbuf = 0;
	}
	if (len >= 64) {
		fn(c->h, p, len / 64);
		p += len & ~(size_t)63;
		len &= 63;
	}
	memcpy(c->buf, p, len);
	c->nbuf = len;
}

void
sg_sha256_final(sg_sha256_ctx *c, unsigned char out[SG_SHA256_BYTES])
{
	uint64_t bits = c->total * 8;
	size_t n = c->nbuf, nb = n < 56 ? 1 : 2, i;
	unsigned char tail[128];

	memcpy(tail, c->buf, n);
	tail[n] = 0x80;
	memset(tail + n + 1, 0, nb * 64 - 8 - n - 1);
	for (i = 0; i < 8; i++)
		tail[nb * 64 - 1 - i] = (unsigned char)(bits >> (8 * i));
	blocks(c)(c->h, tail, nb);
	for (i = 0; i < 8; i++) {
		out[4 * i] = (unsigned char)(c->h[i] >> 24);
		out[4 * i + 1] = (unsigned char)(c->h[i] >> 16);
		out[4 * i + 2] = (unsigned char)(c->h[i] >> 8);
		out[4 * i + 3] = (unsigned char)c->h[i];
	}
}

void
sg_sha256(unsigned char out[SG_SHA256_BYTES], const void *data, size_t len)
{
	sg_sha256_ctx c;

	sg_sha256_init(&c);
	sg_sha256_update(&c, data, len);
	sg_sha256_final(&c, out);
}

/* --- hex ------------------------------------------------------------------ */

void
sg_sha256_hex(char out[SG_SHA256_HEX_LEN + 1], const void *data, size_t len)
{
	unsigned char d[SG_SHA256_BYTES];

	sg_sha256(d, data, len);
	sg_hex(out, d, sizeof(d));
}
