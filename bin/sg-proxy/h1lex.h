/*
 * h1lex.h — the HTTP/1.1 lexical rules sg-proxy's client (h1.c) and
 * server (h1s.c) both apply, written once: token characters (RFC 9110
 * 5.6.2), optional white space, case-insensitive comparison with a
 * literal, comma-separated token lists, hex digits, and the millisecond
 * timeval both event loops arm.  Header-only and inline: each is a few
 * instructions on the parsers' per-byte paths.
 */
#ifndef SG_PROXY_H1LEX_H
#define SG_PROXY_H1LEX_H

#include <sys/time.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

/* RFC 9110 5.6.2 tchar: ALPHA, DIGIT and "!#$%&'*+-.^_`|~" (a table: the
 * parsers test every byte of every field name). */
static const unsigned char h1_tchar_tab[256] = {
	['!'] = 1, ['#'] = 1, ['$'] = 1, ['%'] = 1, ['&'] = 1, ['\''] = 1,
	['*'] = 1, ['+'] = 1, ['-'] = 1, ['.'] = 1, ['^'] = 1, ['_'] = 1,
	['`'] = 1, ['|'] = 1, ['~'] = 1,
	['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, ['5'] = 1,
	['6'] = 1, ['7'] = 1, ['8'] = 1, ['9'] = 1,
	['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1, ['F'] = 1,
	['G'] = 1, ['H'] = 1, ['I'] = 1, ['J'] = 1, ['K'] = 1, ['L'] = 1,
	['M'] = 1, ['N'] = 1, ['O'] = 1, ['P'] = 1, ['Q'] = 1, ['R'] = 1,
	['S'] = 1, ['T'] = 1, ['U'] = 1, ['V'] = 1, ['W'] = 1, ['X'] = 1,
	['Y'] = 1, ['Z'] = 1,
	['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, ['f'] = 1,
	['g'] = 1, ['h'] = 1, ['i'] = 1, ['j'] = 1, ['k'] = 1, ['l'] = 1,
	['m'] = 1, ['n'] = 1, ['o'] = 1, ['p'] = 1, ['q'] = 1, ['r'] = 1,
	['s'] = 1, ['t'] = 1, ['u'] = 1, ['v'] = 1, ['w'] = 1, ['x'] = 1,
	['y'] = 1, ['z'] = 1,
};

static inline bool
h1_tchar(unsigned char ch)
{
	return h1_tchar_tab[ch] != 0;
}

/* Is s[0..n) a token (one or more tchars)? */
static inline bool
h1_is_token(const char *s, size_t n)
{
	size_t i;

	if (n == 0)
		return false;
	for (i = 0; i < n; i++)
		if (!h1_tchar((unsigned char)s[i]))
			return false;
	return true;
}

/* Drop leading and trailing SP/HTAB from s[0..*n). */
static inline void
h1_trim_ows(const char **s, size_t *n)
{
	while (*n > 0 && (**s == ' ' || **s == '\t')) {
		(*s)++;
		(*n)--;
	}
	while (*n > 0 && ((*s)[*n - 1] == ' ' || (*s)[*n - 1] == '\t'))
		(*n)--;
}

/* Is a[0..an) the literal lit[0..ln), ignoring ASCII case? */
static inline bool
h1_ieq(const char *a, size_t an, const char *lit, size_t ln)
{
	return an == ln && strncasecmp(a, lit, ln) == 0;
}

/* h1_ieq against a string literal. */
#define H1_IEQ(a, an, lit)	h1_ieq((a), (an), (lit), sizeof(lit) - 1)

/* Does the comma-separated list v[0..n) hold token t[0..tl)
 * (case-insensitive, elements trimmed)? */
static inline bool
h1_has_token(const char *v, size_t n, const char *t, size_t tl)
{
	while (n > 0) {
		const char *comma = memchr(v, ',', n);
		size_t l = comma != NULL ? (size_t)(comma - v) : n;
		const char *e = v;
		size_t el = l;

		h1_trim_ows(&e, &el);
		if (h1_ieq(e, el, t, tl))
			return true;
		if (comma == NULL)
			break;
		v = comma + 1;
		n -= l + 1;
	}
	return false;
}

/* h1_has_token with a string literal. */
#define H1_HAS_TOKEN(v, n, lit)	h1_has_token((v), (n), (lit), sizeof(lit) - 1)

/* The value of a hex digit, or -1. */
static inline int
h1_hexval(char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

/* ms milliseconds as a timeval (event_add's relative timeout). */
static inline void
h1_ms_tv(uint64_t ms, struct timeval *tv)
{
	tv->tv_sec = (time_t)(ms / 1000);
	tv->tv_usec = (suseconds_t)((ms % 1000) * 1000);
}

#endif /* SG_PROXY_H1LEX_H */
