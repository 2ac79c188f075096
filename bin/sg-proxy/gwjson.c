/*
 * gwjson.c — the byte-level JSON scan of the gateway stage.
 *
 * The gateway rewrites one member of a body it otherwise passes on byte
 * for byte: the request's top-level "model" (public id -> routed model)
 * and the same member of the engine's reply (routed model -> public id),
 * in a unary JSON reply and in each "data:" line of an event stream.
 * Re-encoding the whole document would cost a parse and a dump of every
 * prompt and completion and change bytes nobody asked to change, so this
 * scan walks the top-level object only: member names are compared raw,
 * values are skipped by their framing (strings with escapes, nested
 * containers by depth), and it stops at the first "model" member.  The
 * text is not validated beyond what finding the member needs; the caller
 * has parsed it already (requests) or only rewrites a value that equals
 * the routed model's literal exactly (replies).
 */
#include <stdlib.h>
#include <string.h>

#include "proxy.h"

static size_t
ws(const char *s, size_t i, size_t n)
{
	while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' ||
	    s[i] == '\r'))
		i++;
	return i;
}

/* s[i] is '"': the index after the closing quote, or SIZE_MAX when the
 * text ends first. */
static size_t
skip_string(const char *s, size_t i, size_t n)
{
	const char *q;

	for (i++; i < n; i++) {
		if ((q = memchr(s + i, '"', n - i)) == NULL)
			return SIZE_MAX;
		i = (size_t)(q - s);
		{
			size_t b = 0;

			while (b < i && s[i - 1 - b] == '\\')
				b++;
			if ((b & 1) == 0)
				return i + 1;
		}
	}
	return SIZE_MAX;
}

/* A value at s[i]: the index after it; n when the text ends first
 * (*more), or SIZE_MAX when malformed. */
static size_t
skip_value(const char *s, size_t i, size_t n, bool *more)
{
	size_t depth = 0;

	*more = false;
	if (i >= n) {
		*more = true;
		return n;
	}
	if (s[i] == '"') {
		size_t e = skip_string(s, i, n);

		if (e == SIZE_MAX) {
			*more = true;
			return n;
		}
		return e;
	}
	if (s[i] != '{' && s[i] != '[') {
		while (i < n && s[i] != ',' && s[i] != '}' && s[i] != ']' &&
		    s[i] != ' ' && s[i] != '\t' && s[i] != '\n' && s[i] != '\r')
			i++;
		if (i == n)
			*more = true;
		return i;
	}
	while (i < n) {
		char c = s[i];

		if (c == '"') {
			size_t e = skip_string(s, i, n);

			if (e == SIZE_MAX) {
				*more = true;
				return n;
			}
			i = e;
			continue;
		}
		if (c == '{' || c == '[')
			depth++;
		else if (c == '}' || c == ']') {
			if (depth == 0)
				return SIZE_MAX;
			if (--depth == 0)
				return i + 1;
		}
		i++;
	}
	*more = true;
	return n;
}

int
gj_find_model(const char *s, size_t n, size_t *voff, size_t *vlen)
{
	size_t i = ws(s, 0, n), ks, ke, vs, ve;
	bool more;

	if (i == n)
		return GJ_MORE;
	if (s[i] != '{')
		return GJ_ABSENT;
	i = ws(s, i + 1, n);
	for (;;) {
		if (i == n)
			return GJ_MORE;
		if (s[i] == '}' || s[i] != '"')
			return GJ_ABSENT;
		ks = i + 1;
		if ((i = skip_string(s, i, n)) == SIZE_MAX)
			return GJ_MORE;
		ke = i - 1;
		i = ws(s, i, n);
		if (i == n)
			return GJ_MORE;
		if (s[i] != ':')
			return GJ_ABSENT;
		vs = i = ws(s, i + 1, n);
		ve = skip_value(s, i, n, &more);
		if (more)
			return GJ_MORE;
		if (ve == SIZE_MAX || ve == vs)
			return GJ_ABSENT;
		if (ke - ks == 5 && memcmp(s + ks, "model", 5) == 0) {
			*voff = vs;
			*vlen = ve - vs;
			return GJ_FOUND;
		}
		i = ws(s, ve, n);
		if (i == n)
			return GJ_MORE;
		if (s[i] != ',')
			return GJ_ABSENT;
		i = ws(s, i + 1, n);
	}
}

/* s[0..n) as a JSON string literal into o (room for GJ_QUOTE_MAX(n)
 * bytes, NUL included); its length. */
size_t
gj_quote_to(char *o, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	char *w = o;
	size_t i;

	*w++ = '"';
	for (i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c == '"' || c == '\\') {
			*w++ = '\\';
			*w++ = (char)c;
		} else if (c < 0x20) {
			memcpy(w, "\\u00", 4);
			w[4] = hex[c >> 4];
			w[5] = hex[c & 15];
			w += 6;
		} else
			*w++ = (char)c;
	}
	*w++ = '"';
	*w = '\0';
	return (size_t)(w - o);
}

char *
gj_quote(const char *s, size_t n, size_t *outlen)
{
	char *o = malloc(GJ_QUOTE_MAX(n));

	if (o == NULL)
		return NULL;
	*outlen = gj_quote_to(o, s, n);
	return o;
}
