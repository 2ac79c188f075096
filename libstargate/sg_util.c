/*
 * sg_util.c — defensive parsers (numbers, durations, booleans, UTF-8) and
 * small string helpers.  No locale, no errno games: every parser says exactly
 * what it accepts.
 */
#include <string.h>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "sg_common.h"

int
sg_parse_u64(const char *s, size_t len, uint64_t max, uint64_t *out)
{
	uint64_t v = 0;
	size_t i;

	if (s == NULL || len == 0)
		return SG_EINVAL;
	for (i = 0; i < len; i++) {
		unsigned d;

		if (s[i] < '0' || s[i] > '9')
			return SG_EINVAL;
		d = (unsigned)(s[i] - '0');
		if (v > (UINT64_MAX - d) / 10)
			return SG_ERANGE;
		v = v * 10 + d;
	}
	if (v > max)
		return SG_ERANGE;
	*out = v;
	return 0;
}

/* Nanoseconds per unit; longest names first so "ms" wins over "m". */
static const struct {
	const char	*name;
	uint64_t	 ns;
} units[] = {
	{ "ns", 1 },
	{ "us", 1000 },
	{ "\xc2\xb5s", 1000 },	/* µs (micro sign) */
	{ "\xce\xbcs", 1000 },	/* μs (Greek mu) */
	{ "ms", 1000000 },
	{ "s", 1000000000ULL },
	{ "m", 60ULL * 1000000000ULL },
	{ "h", 3600ULL * 1000000000ULL },
};

int
sg_parse_duration(const char *s, uint64_t *ns)
{
	uint64_t total = 0;

	if (s == NULL || *s == '\0')
		return SG_EINVAL;
	if (strcmp(s, "0") == 0) {
		*ns = 0;
		return 0;
	}
	while (*s != '\0') {
		uint64_t whole = 0, frac = 0, scale = 1, unit = 0, part;
		size_t ulen = 0, i;
		int digits = 0;

		while (*s >= '0' && *s <= '9') {
			if (whole > (UINT64_MAX - 9) / 10)
				return SG_ERANGE;
			whole = whole * 10 + (uint64_t)(*s++ - '0');
			digits++;
		}
		if (*s == '.') {
			s++;
			while (*s >= '0' && *s <= '9') {
				if (scale < 1000000000000000000ULL) {
					frac = frac * 10 + (uint64_t)(*s - '0');
					scale *= 10;
				}
				s++;
				digits++;
			}
		}
		if (digits == 0)
			return SG_EINVAL;
		for (i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
			size_t n = strlen(units[i].name);

			if (strncmp(s, units[i].name, n) == 0 && n > ulen) {
				/* "m" must not swallow the "m" of "ms" */
				ulen = n;
				unit = units[i].ns;
			}
		}
		if (ulen == 0)
			return SG_EINVAL;
		s += ulen;
		if (whole > UINT64_MAX / unit)
			return SG_ERANGE;
		part = whole * unit;
		/* fraction: frac/scale units, rounded down to whole ns */
		part += (uint64_t)((double)frac * ((double)unit / (double)scale));
		if (total > UINT64_MAX - part)
			return SG_ERANGE;
		total += part;
	}
	*ns = total;
	return 0;
}

int
sg_parse_bool(const char *s, bool *out)
{
	static const char *const t[] = { "1", "t", "T", "TRUE", "true", "True" };
	static const char *const f[] = { "0", "f", "F", "FALSE", "false", "False" };
	size_t i;

	if (s == NULL)
		return SG_EINVAL;
	for (i = 0; i < 6; i++) {
		if (strcmp(s, t[i]) == 0) {
			*out = true;
			return 0;
		}
		if (strcmp(s, f[i]) == 0) {
			*out = false;
			return 0;
		}
	}
	return SG_EINVAL;
}

bool
sg_utf8_valid(const char *str, size_t len)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t i = 0;

	while (i < len) {
		unsigned char c = s[i];
		size_t n;
		uint32_t cp;

		if (c < 0x80) {
			i++;
			continue;
		} else if (c >= 0xc2 && c <= 0xdf) {
			n = 1;
			cp = c & 0x1f;
		} else if (c >= 0xe0 && c <= 0xef) {
			n = 2;
			cp = c & 0x0f;
		} else if (c >= 0xf0 && c <= 0xf4) {
			n = 3;
			cp = c & 0x07;
		} else
			return false;
		if (len - i <= n)
			return false;
		for (size_t k = 1; k <= n; k++) {
			if ((s[i + k] & 0xc0) != 0x80)
				return false;
			cp = (cp << 6) | (s[i + k] & 0x3f);
		}
		if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
		    cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return false;
		i += n + 1;
	}
	return true;
}

static bool
isws(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' ||
	    c == '\f';
}

void
sg_trim(const char **s, size_t *len)
{
	while (*len > 0 && isws((*s)[0])) {
		(*s)++;
		(*len)--;
	}
	while (*len > 0 && isws((*s)[*len - 1]))
		(*len)--;
}

#ifdef __SSE2__
/* 16 nibbles (one a byte) as hex digits. */
static inline __m128i
hex_digits(__m128i n)
{
	__m128i gt = _mm_cmpgt_epi8(n, _mm_set1_epi8(9));

	return _mm_add_epi8(_mm_add_epi8(n, _mm_set1_epi8('0')),
	    _mm_and_si128(gt, _mm_set1_epi8('a' - '0' - 10)));
}

/* 16 bytes as 32 hex digits: nibbles split, interleaved high first. */
static inline void
hex16(char *out, const unsigned char *in)
{
	const __m128i lo4 = _mm_set1_epi8(0x0f);
	__m128i x = _mm_loadu_si128((const __m128i *)(const void *)in);
	__m128i lo = _mm_and_si128(x, lo4);
	__m128i hi = _mm_and_si128(_mm_srli_epi16(x, 4), lo4);

	_mm_storeu_si128((__m128i *)(void *)out,
	    hex_digits(_mm_unpacklo_epi8(hi, lo)));
	_mm_storeu_si128((__m128i *)(void *)(out + 16),
	    hex_digits(_mm_unpackhi_epi8(hi, lo)));
}
#endif

/* Store keys, trace ids and digests: 16 bytes a step where SSE2 is. */
void
sg_hex(char *out, const unsigned char *in, size_t n)
{
	static const char digits[] = "0123456789abcdef";
	size_t i = 0;

#ifdef __SSE2__
	for (; i + 16 <= n; i += 16)
		hex16(out + 2 * i, in + i);
#endif
	for (; i < n; i++) {
		out[2 * i] = digits[in[i] >> 4];
		out[2 * i + 1] = digits[in[i] & 0x0f];
	}
	out[2 * n] = '\0';
}
