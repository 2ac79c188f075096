/*
 * sg_request.c — a routing request: its JSON form (sg-route(1)) and its
 * HTTP header form (stargate-headers(7)).
 *
 * sg_request holds borrowed pointers.  The parsers copy every string they
 * keep into a small arena owned by the request (struct sg_request_store):
 * chunks that never move, so pointers handed out stay valid until
 * sg_request_release().  The excluded-id array lives in the store too.
 *
 * Both parsers build the request in place and release it again on failure,
 * so a failed parse leaves r in its initial (all absent) state.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "sg_request.h"
#include "sg_gateway.h"

/* --- owned storage -------------------------------------------------------- */

struct chunk {
	struct chunk	*next;
	size_t		 used;
	size_t		 cap;
	char		 data[];
};

struct sg_request_store {
	struct chunk	*chunks;	/* newest first */
	const char	**excl;		/* excluded ids (point into chunks) */
	size_t		 nexcl;
	size_t		 excl_cap;
};

/*
 * First chunk of a request's strings.  Kept under glibc's large-bin
 * threshold (1 KiB chunks): a larger malloc consolidates the fast bins
 * first, which cost the proxy some 4000 instructions per request.
 */
#define CHUNK_MIN	960

static void
store_free(struct sg_request_store *st)
{
	struct chunk *c, *next;

	if (st == NULL)
		return;
	for (c = st->chunks; c != NULL; c = next) {
		next = c->next;
		free(c);
	}
	free(st->excl);
	free(st);
}

/* The request's store, created on first use; NULL on ENOMEM. */
static struct sg_request_store *
store_of(sg_request *r)
{
	if (r->store == NULL)
		r->store = calloc(1, sizeof(*r->store));
	return r->store;
}

/*
 * Room for len + 1 bytes at the end of r's newest chunk (a new chunk when
 * it has none), not yet used: store_commit() keeps what was written there.
 * NULL on ENOMEM.
 */
static char *
store_reserve(sg_request *r, size_t len)
{
	struct sg_request_store *st;
	struct chunk *c;

	if ((st = store_of(r)) == NULL)
		return NULL;
	c = st->chunks;
	if (c == NULL || c->cap - c->used < len + 1) {
		size_t cap = len + 1 > CHUNK_MIN ? len + 1 : CHUNK_MIN;

		if ((c = malloc(sizeof(*c) + cap)) == NULL)
			return NULL;
		c->next = st->chunks;
		c->used = 0;
		c->cap = cap;
		st->chunks = c;
	}
	return c->data + c->used;
}

/* Keep the len bytes written at store_reserve()'s pointer, NUL-terminated. */
static const char *
store_commit(sg_request *r, size_t len)
{
	struct chunk *c = r->store->chunks;
	char *p = c->data + c->used;

	p[len] = '\0';
	c->used += len + 1;
	return p;
}

/* A NUL-terminated copy of s[0..len) owned by r; NULL on ENOMEM. */
static const char *
store_str(sg_request *r, const char *s, size_t len)
{
	char *p;

	if ((p = store_reserve(r, len)) == NULL)
		return NULL;
	memcpy(p, s, len);
	return store_commit(r, len);
}

/* Append p (owned by r already) to the excluded ids; SG_ENOMEM or
 * SG_ERANGE. */
static int
store_excluded_ptr(sg_request *r, const char *p)
{
	struct sg_request_store *st;

	if ((st = store_of(r)) == NULL)
		return SG_ENOMEM;
	if (st->nexcl >= SG_MAX_EXCLUDED)
		return SG_ERANGE;
	if (st->nexcl == st->excl_cap) {
		size_t cap = st->excl_cap != 0 ? 2 * st->excl_cap : 8;
		const char **n = realloc(st->excl, cap * sizeof(*n));

		if (n == NULL)
			return SG_ENOMEM;
		st->excl = n;
		st->excl_cap = cap;
	}
	st->excl[st->nexcl++] = p;
	r->excluded = st->excl;
	r->nexcluded = st->nexcl;
	return 0;
}

/* Append an excluded id (copied); SG_ENOMEM or SG_ERANGE. */
static int
store_excluded(sg_request *r, const char *s, size_t len)
{
	struct sg_request_store *st;
	const char *p;

	if ((st = store_of(r)) == NULL)
		return SG_ENOMEM;
	if (st->nexcl >= SG_MAX_EXCLUDED)
		return SG_ERANGE;
	if ((p = store_str(r, s, len)) == NULL)
		return SG_ENOMEM;
	return store_excluded_ptr(r, p);
}

/*
 * Empty r's storage for reuse: every chunk but the newest is freed, that
 * one and the excluded-id array are kept; then r is all absent again.
 */
static void
store_reuse(sg_request *r)
{
	struct sg_request_store *st = r->store;
	struct chunk *c, *next;

	if (st != NULL) {
		if ((c = st->chunks) != NULL) {
			for (next = c->next; next != NULL; next = c->next) {
				c->next = next->next;
				free(next);
			}
			c->used = 0;
		}
		st->nexcl = 0;
	}
	sg_request_init(r);
	r->store = st;
}

/* --- basics --------------------------------------------------------------- */

/* The hint's length, measured once when a request is parsed. */
static void
set_hint_len(sg_request *r)
{
	r->last_cluster_id_len = r->last_cluster_id != NULL ?
	    strlen(r->last_cluster_id) : 0;
}

void
sg_request_init(sg_request *r)
{
	memset(r, 0, sizeof(*r));
	r->session_state = SG_SESSION_UNCLASSIFIED;
	r->elapsed_ms = 0;
}

void
sg_request_release(sg_request *r)
{
	if (r == NULL)
		return;
	store_free(r->store);
	sg_request_init(r);
}

bool
sg_request_excludes(const sg_request *r, const char *id, size_t len)
{
	size_t i;

	for (i = 0; i < r->nexcluded; i++) {
		const char *e = r->excluded[i];

		if (e != NULL && strlen(e) == len && memcmp(e, id, len) == 0)
			return true;
	}
	return false;
}

const char *
sg_session_state_name(int state)
{
	switch (state) {
	case SG_SESSION_NEW:		return "new";
	case SG_SESSION_RETURNING:	return "returning";
	case SG_SESSION_STALE:		return "stale";
	default:			return NULL;
	}
}

/* --- JSON form (sg-route(1)) --------------------------------------------- */

/* Where a string field of the JSON form lands. */
enum strfield {
	F_REQUEST_ID, F_ROUTING_KEY, F_MODEL, F_CACHE_KEY, F_METHOD, F_LAST,
};

static const char *const str_names[] = {
	"request_id", "routing_key", "model", "cache_affinity_key",
	"routing_method", "last_cluster_id",
};

static const char **
str_slot(sg_request *r, int f)
{
	switch (f) {
	case F_REQUEST_ID:	return &r->request_id;
	case F_ROUTING_KEY:	return &r->routing_key;
	case F_MODEL:		return &r->model;
	case F_CACHE_KEY:	return &r->cache_affinity_key;
	case F_METHOD:		return &r->routing_method;
	default:		return &r->last_cluster_id;
	}
}

/* Non-negative JSON integer <= max (a real such as 5.0 is a wrong type). */
static int
json_uint(const json_t *v, uint64_t max, const char *field, uint64_t *out,
    sg_error *err)
{
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return sg_seterr(err, SG_EINVAL,
		    "%s: expected a non-negative integer", field);
	if ((uint64_t)json_integer_value(v) > max)
		return sg_seterr(err, SG_EINVAL, "%s: must be at most %llu",
		    field, (unsigned long long)max);
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

/* Trimmed copy of a JSON string; *out stays NULL when blank (absent). */
static int
json_str(sg_request *r, const json_t *v, const char *field, const char **out,
    sg_error *err)
{
	const char *s;
	size_t len;

	if (!json_is_string(v))
		return sg_seterr(err, SG_EINVAL, "%s: expected a string", field);
	s = json_string_value(v);
	len = json_string_length(v);
	if (memchr(s, '\0', len) != NULL)
		return sg_seterr(err, SG_EINVAL, "%s: contains a NUL byte", field);
	sg_trim(&s, &len);
	*out = NULL;
	if (len == 0)
		return 0;
	if ((*out = store_str(r, s, len)) == NULL)
		return sg_seterr(err, SG_ENOMEM, "out of memory");
	return 0;
}

static int
json_excluded(sg_request *r, const json_t *v, sg_error *err)
{
	size_t i, n;
	int rc;

	if (!json_is_array(v))
		return sg_seterr(err, SG_EINVAL,
		    "excluded_cluster_ids: expected an array of strings");
	n = json_array_size(v);
	if (n > SG_MAX_EXCLUDED)
		return sg_seterr(err, SG_EINVAL,
		    "excluded_cluster_ids: more than %d ids", SG_MAX_EXCLUDED);
	for (i = 0; i < n; i++) {
		const json_t *e = json_array_get(v, i);
		const char *s;
		size_t len;

		if (!json_is_string(e))
			return sg_seterr(err, SG_EINVAL,
			    "excluded_cluster_ids[%zu]: expected a string", i);
		s = json_string_value(e);
		len = json_string_length(e);
		if (memchr(s, '\0', len) != NULL)
			return sg_seterr(err, SG_EINVAL,
			    "excluded_cluster_ids[%zu]: contains a NUL byte", i);
		sg_trim(&s, &len);
		if (len == 0)
			continue;	/* blank = absent */
		if ((rc = store_excluded(r, s, len)) != 0)
			return sg_seterr(err, rc, "out of memory");
	}
	return 0;
}

/* One field of the JSON form. */
static int
json_field(sg_request *r, const char *key, const json_t *v, bool *has_tokens,
    sg_error *err)
{
	uint64_t u;
	size_t i;
	int rc;

	for (i = 0; i < sizeof(str_names) / sizeof(str_names[0]); i++)
		if (strcmp(key, str_names[i]) == 0)
			return json_str(r, v, key, str_slot(r, (int)i), err);
	if (strcmp(key, "input_tokens") == 0) {
		if ((rc = json_uint(v, UINT64_MAX, key, &r->input_tokens,
		    err)) == 0)
			*has_tokens = true;
		return rc;
	}
	if (strcmp(key, "priority") == 0) {
		if ((rc = json_uint(v, UINT32_MAX, key, &u, err)) == 0)
			r->priority = (uint32_t)u;
		return rc;
	}
	if (strcmp(key, "request_slo_ms") == 0) {
		if ((rc = json_uint(v, UINT64_MAX, key, &r->request_slo_ms,
		    err)) == 0)
			r->has_slo = true;
		return rc;
	}
	if (strcmp(key, "max_wait_ms") == 0) {
		if ((rc = json_uint(v, UINT64_MAX, key, &r->max_wait_ms,
		    err)) == 0)
			r->has_max_wait = true;
		return rc;
	}
	if (strcmp(key, "excluded_cluster_ids") == 0)
		return json_excluded(r, v, err);
	if (strcmp(key, "elapsed_ms") == 0) {
		if (!json_is_number(v) || !isfinite(json_number_value(v)) ||
		    json_number_value(v) < 0)
			return sg_seterr(err, SG_EINVAL,
			    "elapsed_ms: expected a non-negative number");
		r->elapsed_ms = json_number_value(v);
		return 0;
	}
	return sg_seterr(err, SG_EINVAL, "%s: unknown field", key);
}

int
sg_request_from_json(sg_request *r, const json_t *obj, sg_error *err)
{
	bool has_tokens = false;
	const char *key;
	json_t *v;
	int rc = 0;

	sg_request_release(r);
	if (!json_is_object(obj))
		return sg_seterr(err, SG_EINVAL, "request: expected an object");
	json_object_foreach((json_t *)(uintptr_t)obj, key, v) {
		if ((rc = json_field(r, key, v, &has_tokens, err)) != 0)
			goto out;
	}
	/* required fields, in the header form's validation order */
	if (r->request_id == NULL)
		rc = sg_seterr(err, SG_EINVAL, "request_id: required");
	else if (!has_tokens)
		rc = sg_seterr(err, SG_EINVAL, "input_tokens: required");
	else if (r->model == NULL)
		rc = sg_seterr(err, SG_EINVAL, "model: required");
out:
	if (rc != 0)
		sg_request_release(r);
	else
		set_hint_len(r);
	return rc;
}

/* --- JSON text form, scanned (sg_request_scan_json) ----------------------- */

/*
 * One pass over the object's text, no tree, no allocation once the
 * request's storage exists.  The scan takes only the forms it can read
 * exactly as json_loadb(JSON_REJECT_DUPLICATES) + sg_request_from_json()
 * do, and gives up (RS_NO) on anything else, so that the full parse
 * decides and words every error:
 *   - member names without escapes, each known field at most once (a
 *     repeated name is a duplicate to jansson, an escaped one might be);
 *   - strings: raw bytes validated as UTF-8 (sg_utf8_valid(), as strict as
 *     jansson), escapes decoded as jansson decodes them (\u0000, lone or
 *     unpaired surrogates and unknown escapes give up); then trimmed and
 *     stored like json_str() does;
 *   - integers: digits only (no sign, no leading zero), at most 18 of them
 *     so that jansson's signed 64-bit integer holds them;
 *   - elapsed_ms: an integer as above, or digits '.' digits without an
 *     exponent, at most RS_REAL_MAX bytes (strtod() reads it as jansson's
 *     strtod() does);
 *   - excluded_cluster_ids: an array of strings as above.
 * Strings are scanned eight bytes at a time until a quote, a backslash, a
 * control byte or a non-ASCII byte.
 */
#define RS_NO		ENOTSUP
#define RS_INT_MAX	18
#define RS_REAL_MAX	24

struct rscan {
	const char	*s;
	size_t		 n, i;
};

/* A scanned string: the raw bytes between the quotes. */
struct rstr {
	const char	*p;
	size_t		 len;
	bool		 esc;		/* holds a backslash escape */
};

enum {
	RF_REQUEST_ID = F_REQUEST_ID, RF_ROUTING_KEY = F_ROUTING_KEY,
	RF_MODEL = F_MODEL, RF_CACHE_KEY = F_CACHE_KEY, RF_METHOD = F_METHOD,
	RF_LAST = F_LAST, RF_INPUT_TOKENS, RF_PRIORITY, RF_SLO, RF_MAX_WAIT,
	RF_EXCLUDED, RF_ELAPSED, RF_NFIELDS,
};

/* Field names with their lengths, in RF_ order. */
#define RF_NAME(s)	{ s, sizeof(s) - 1 }
static const struct {
	const char	*name;
	size_t		 len;
} rf_names[RF_NFIELDS] = {
	RF_NAME("request_id"), RF_NAME("routing_key"), RF_NAME("model"),
	RF_NAME("cache_affinity_key"), RF_NAME("routing_method"),
	RF_NAME("last_cluster_id"), RF_NAME("input_tokens"),
	RF_NAME("priority"), RF_NAME("request_slo_ms"),
	RF_NAME("max_wait_ms"), RF_NAME("excluded_cluster_ids"),
	RF_NAME("elapsed_ms"),
};
#undef RF_NAME

static void
rs_ws(struct rscan *c)
{
	while (c->i < c->n && (c->s[c->i] == ' ' || c->s[c->i] == '\t' ||
	    c->s[c->i] == '\n' || c->s[c->i] == '\r'))
		c->i++;
}

/* Non-zero when a byte of w may be '"', '\\', below 0x20 or at or above
 * 0x80 (never zero when one is; 0x7f is plain ASCII to JSON). */
static uint64_t
rs_special(uint64_t w)
{
	const uint64_t ones = 0x0101010101010101ULL;
	const uint64_t high = 0x8080808080808080ULL;
	uint64_t q = w ^ (ones * '"'), b = w ^ (ones * '\\');

	return (((q - ones) & ~q) | ((b - ones) & ~b) | (w - ones * 0x20) |
	    w) & high;
}

/*
 * The index in w's bytes (as memcpy() read them) of the first byte
 * rs_special() flags; exact on a little-endian machine, where a borrow
 * only ever flags bytes after a true one.  Elsewhere 0: the caller then
 * steps byte by byte.
 */
static size_t
rs_first(uint64_t m)
{
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && \
    __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	return (size_t)__builtin_ctzll(m) >> 3;
#else
	(void)m;
	return 0;
#endif
}

/* The string at s[i] == '"' (raw; escapes checked only for their
 * backslash-quote framing here, decoded by rs_decode()). */
static int
rs_string(struct rscan *c, struct rstr *out)
{
	size_t i = c->i + 1, start = i, n = c->n;
	bool high = false;
	uint64_t w, m;

	out->esc = false;
	for (;;) {
		for (;;) {
			if (i + 8 > n) {
				if (i >= n)
					return RS_NO;
				break;	/* the last bytes, one at a time */
			}
			memcpy(&w, c->s + i, 8);
			if ((m = rs_special(w)) != 0) {
				i += rs_first(m);
				break;
			}
			i += 8;
		}
		{
			unsigned char ch = (unsigned char)c->s[i];

			if (ch == '"')
				break;
			if (ch == '\\') {
				if (i + 1 >= n)
					return RS_NO;
				out->esc = true;
				i += 2;		/* rs_decode() judges it */
				continue;
			}
			if (ch < 0x20)
				return RS_NO;
			if (ch >= 0x80)
				high = true;
			i++;
		}
	}
	if (high && !sg_utf8_valid(c->s + start, i - start))
		return RS_NO;
	out->p = c->s + start;
	out->len = i - start;
	c->i = i + 1;
	return 0;
}

static int
rs_hex4(const char *p, unsigned *cp)
{
	unsigned v = 0, d;
	int k;

	for (k = 0; k < 4; k++) {
		char ch = p[k];

		if (ch >= '0' && ch <= '9')
			d = (unsigned)(ch - '0');
		else if (ch >= 'a' && ch <= 'f')
			d = (unsigned)(ch - 'a' + 10);
		else if (ch >= 'A' && ch <= 'F')
			d = (unsigned)(ch - 'A' + 10);
		else
			return -1;
		v = v << 4 | d;
	}
	*cp = v;
	return 0;
}

/* Code point cp as UTF-8 at q; its length. */
static size_t
rs_utf8(char *q, unsigned long cp)
{
	if (cp < 0x80) {
		q[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		q[0] = (char)(0xc0 | cp >> 6);
		q[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		q[0] = (char)(0xe0 | cp >> 12);
		q[1] = (char)(0x80 | (cp >> 6 & 0x3f));
		q[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	q[0] = (char)(0xf0 | cp >> 18);
	q[1] = (char)(0x80 | (cp >> 12 & 0x3f));
	q[2] = (char)(0x80 | (cp >> 6 & 0x3f));
	q[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

/* One \u escape (one or a surrogate pair) at p[0..end), p[0] == 'u'
 * after the backslash: the code point and the raw bytes it took, or 0. */
static size_t
rs_uescape(const char *p, const char *end, unsigned long *out)
{
	unsigned hi, lo;

	if (end - p < 5 || rs_hex4(p + 1, &hi) != 0 || hi == 0 ||
	    (hi >= 0xdc00 && hi <= 0xdfff))
		return 0;
	if (hi < 0xd800 || hi > 0xdbff) {
		*out = hi;
		return 5;
	}
	if (end - p < 11 || p[5] != '\\' || p[6] != 'u' ||
	    rs_hex4(p + 7, &lo) != 0 || lo < 0xdc00 || lo > 0xdfff)
		return 0;
	*out = 0x10000 + (((unsigned long)hi - 0xd800) << 10) + (lo - 0xdc00);
	return 11;
}

/* Decode the escapes of s (s->len raw bytes) into q (room for s->len);
 * the decoded length, or (size_t)-1 for an escape jansson refuses. */
static size_t
rs_decode(const struct rstr *s, char *q)
{
	const char *p = s->p, *end = s->p + s->len;
	char *q0 = q;
	unsigned long cp;
	size_t k;

	while (p < end) {
		const char *bs = memchr(p, '\\', (size_t)(end - p));

		if (bs == NULL)
			bs = end;
		memmove(q, p, (size_t)(bs - p));
		q += bs - p;
		if (bs == end)
			break;
		p = bs + 1;		/* the framing scan saw a byte here */
		switch (*p) {
		case '"': case '\\': case '/':
			*q++ = *p++;
			continue;
		case 'b': *q++ = '\b'; p++; continue;
		case 'f': *q++ = '\f'; p++; continue;
		case 'n': *q++ = '\n'; p++; continue;
		case 'r': *q++ = '\r'; p++; continue;
		case 't': *q++ = '\t'; p++; continue;
		case 'u':
			if ((k = rs_uescape(p, end, &cp)) == 0)
				return (size_t)-1;
			q += rs_utf8(q, cp);
			p += k;
			continue;
		default:
			return (size_t)-1;
		}
	}
	return (size_t)(q - q0);
}

/*
 * The string value at the cursor, trimmed and stored in r (*out NULL when
 * blank), as json_str() and json_excluded() keep it.
 */
static int
rs_value_str(sg_request *r, struct rscan *c, const char **out)
{
	struct rstr v;
	const char *s;
	char *q;
	size_t len;
	int rc;

	*out = NULL;
	if (c->i >= c->n || c->s[c->i] != '"')
		return RS_NO;
	if ((rc = rs_string(c, &v)) != 0)
		return rc;
	if (!v.esc) {
		s = v.p;
		len = v.len;
		/* sg_trim()'s white space is all at or below ' ' */
		if (len == 0 || (unsigned char)s[0] <= ' ' ||
		    (unsigned char)s[len - 1] <= ' ')
			sg_trim(&s, &len);
		if (len == 0)
			return 0;
		if ((q = store_reserve(r, len)) == NULL)
			return SG_ENOMEM;
		memcpy(q, s, len);
		*out = store_commit(r, len);
		return 0;
	}
	if ((q = store_reserve(r, v.len)) == NULL)
		return SG_ENOMEM;
	if ((len = rs_decode(&v, q)) == (size_t)-1)
		return RS_NO;
	s = q;
	sg_trim(&s, &len);
	if (len == 0)
		return 0;
	memmove(q, s, len);
	*out = store_commit(r, len);
	return 0;
}

/* Digits at the cursor that jansson reads as a non-negative integer. */
static int
rs_digits(struct rscan *c, uint64_t *out, size_t *ndig)
{
	size_t i = c->i, start = i;
	uint64_t v = 0;

	while (i < c->n && c->s[i] >= '0' && c->s[i] <= '9') {
		v = v * 10 + (uint64_t)(c->s[i] - '0');
		if (++i - start > RS_INT_MAX)
			return RS_NO;
	}
	if (i == start || (c->s[start] == '0' && i - start > 1))
		return RS_NO;
	*out = v;
	*ndig = i - start;
	c->i = i;
	return 0;
}

/* A JSON integer field: not a real (no fraction or exponent), <= max. */
static int
rs_uint(struct rscan *c, uint64_t max, uint64_t *out)
{
	size_t nd;
	int rc;

	if ((rc = rs_digits(c, out, &nd)) != 0)
		return rc;
	if (c->i < c->n && (c->s[c->i] == '.' || c->s[c->i] == 'e' ||
	    c->s[c->i] == 'E'))
		return RS_NO;
	return *out <= max ? 0 : RS_NO;
}

/* elapsed_ms: an integer, or a real without exponent. */
static int
rs_elapsed(struct rscan *c, double *out)
{
	size_t start = c->i, nd;
	uint64_t v;
	char buf[RS_REAL_MAX + 1];
	int rc;

	if ((rc = rs_digits(c, &v, &nd)) != 0)
		return rc;
	if (c->i < c->n && (c->s[c->i] == 'e' || c->s[c->i] == 'E'))
		return RS_NO;
	if (c->i >= c->n || c->s[c->i] != '.') {
		*out = (double)v;
		return 0;
	}
	c->i++;
	nd = c->i;
	while (c->i < c->n && c->s[c->i] >= '0' && c->s[c->i] <= '9')
		c->i++;
	if (c->i == nd || c->i - start > RS_REAL_MAX ||
	    (c->i < c->n && (c->s[c->i] == 'e' || c->s[c->i] == 'E')))
		return RS_NO;
	memcpy(buf, c->s + start, c->i - start);
	buf[c->i - start] = '\0';
	*out = strtod(buf, NULL);
	return 0;
}

/*
 * After a member or element: white space, then the closing byte (1) or a
 * comma and white space (0); anything else gives up.
 */
static int
rs_next(struct rscan *c, char close)
{
	rs_ws(c);
	if (c->i >= c->n)
		return RS_NO;
	if (c->s[c->i] == close) {
		c->i++;
		return 1;
	}
	if (c->s[c->i] != ',')
		return RS_NO;
	c->i++;
	rs_ws(c);
	return 0;
}

static int
rs_excluded(sg_request *r, struct rscan *c)
{
	const char *id;
	size_t n = 0;
	int rc;

	if (c->i >= c->n || c->s[c->i] != '[')
		return RS_NO;
	c->i++;
	rs_ws(c);
	if (c->i < c->n && c->s[c->i] == ']') {
		c->i++;
		return 0;
	}
	for (;;) {
		if (++n > SG_MAX_EXCLUDED)
			return RS_NO;
		if ((rc = rs_value_str(r, c, &id)) != 0)
			return rc;
		if (id != NULL && (rc = store_excluded_ptr(r, id)) != 0)
			return rc;
		if ((rc = rs_next(c, ']')) != 0)
			return rc == 1 ? 0 : rc;
	}
}

/* The field a raw member name names, or -1. */
static int
rs_field(const struct rstr *k)
{
	int f;

	if (k->esc)
		return -1;
	/* the one candidate of each length (the third byte tells two
	 * apart), then one compare */
	switch (k->len) {
	case 5:		f = RF_MODEL;					break;
	case 8:		f = RF_PRIORITY;				break;
	case 10:	f = k->p[2] == 'q' ? RF_REQUEST_ID : RF_ELAPSED;
		break;
	case 11:	f = k->p[2] == 'u' ? RF_ROUTING_KEY : RF_MAX_WAIT;
		break;
	case 12:	f = RF_INPUT_TOKENS;				break;
	case 14:	f = k->p[2] == 'u' ? RF_METHOD : RF_SLO;	break;
	case 15:	f = RF_LAST;					break;
	case 18:	f = RF_CACHE_KEY;				break;
	case 20:	f = RF_EXCLUDED;				break;
	default:	return -1;
	}
	return rf_names[f].len == k->len &&
	    memcmp(rf_names[f].name, k->p, k->len) == 0 ? f : -1;
}

/* One member's value at the cursor, for field f. */
static int
rs_member(sg_request *r, struct rscan *c, int f)
{
	uint64_t u;
	int rc;

	switch (f) {
	case RF_INPUT_TOKENS:
		return rs_uint(c, UINT64_MAX, &r->input_tokens);
	case RF_PRIORITY:
		if ((rc = rs_uint(c, UINT32_MAX, &u)) == 0)
			r->priority = (uint32_t)u;
		return rc;
	case RF_SLO:
		r->has_slo = true;
		return rs_uint(c, UINT64_MAX, &r->request_slo_ms);
	case RF_MAX_WAIT:
		r->has_max_wait = true;
		return rs_uint(c, UINT64_MAX, &r->max_wait_ms);
	case RF_EXCLUDED:
		return rs_excluded(r, c);
	case RF_ELAPSED:
		return rs_elapsed(c, &r->elapsed_ms);
	default:
		return rs_value_str(r, c, str_slot(r, f));
	}
}

/* The object at the cursor, its members read into r. */
static int
rs_object(sg_request *r, struct rscan *c, unsigned *seen)
{
	struct rstr k;
	int f, rc;

	if (c->i >= c->n || c->s[c->i] != '{')
		return RS_NO;
	c->i++;
	rs_ws(c);
	if (c->i < c->n && c->s[c->i] == '}')
		return RS_NO;		/* nothing required is there */
	for (;;) {
		if (c->i >= c->n || c->s[c->i] != '"' ||
		    rs_string(c, &k) != 0 || (f = rs_field(&k)) < 0 ||
		    (*seen & (1u << f)) != 0)
			return RS_NO;
		*seen |= 1u << f;
		rs_ws(c);
		if (c->i >= c->n || c->s[c->i] != ':')
			return RS_NO;
		c->i++;
		rs_ws(c);
		if ((rc = rs_member(r, c, f)) != 0)
			return rc;
		if ((rc = rs_next(c, '}')) != 0)
			return rc == 1 ? 0 : rc;
	}
}

int
sg_request_scan_json(sg_request *r, const char *text, size_t len,
    size_t *used, sg_error *err)
{
	struct rscan c = { text, len, 0 };
	unsigned seen = 0;
	int rc;

	store_reuse(r);
	if (text == NULL)
		return RS_NO;
	rs_ws(&c);
	if ((rc = rs_object(r, &c, &seen)) == 0 &&
	    (r->request_id == NULL || (seen & 1u << RF_INPUT_TOKENS) == 0 ||
	    r->model == NULL))
		rc = RS_NO;	/* required: sg_request_from_json() says so */
	if (rc == SG_ENOMEM)
		sg_seterr(err, rc, "out of memory");
	if (rc != 0) {
		store_reuse(r);
		return rc;
	}
	set_hint_len(r);
	if (used != NULL)
		*used = c.i;
	return 0;
}

/* u64 as a JSON integer (jansson's are signed: clamp at INT64_MAX). */
static json_t *
u64_json(uint64_t v)
{
	return json_integer(v > (uint64_t)INT64_MAX ? INT64_MAX :
	    (json_int_t)v);
}

/* A time in ms: integral values as integers; NaN or negative as 0. */
static json_t *
ms_json(double v)
{
	if (isnan(v) || v <= 0)
		return json_integer(0);
	if (v == floor(v) && v < 9007199254740992.0)
		return json_integer((json_int_t)v);
	return json_real(isinf(v) ? 1.7976931348623157e308 : v);
}

/*
 * Fields in the order of sg-route(1); absent strings and limits are
 * omitted, input_tokens, priority and elapsed_ms are always written.
 * Strings must be UTF-8 (the parsers guarantee it); NULL on failure.
 */
json_t *
sg_request_to_json(const sg_request *r)
{
	json_t *o, *a;
	size_t i;
	int bad = 0;

	if ((o = json_object()) == NULL)
		return NULL;
#define STR(name, val)	do {						\
	if ((val) != NULL)						\
		bad |= json_object_set_new(o, name, json_string(val));	\
} while (0)
	STR("request_id", r->request_id);
	STR("routing_key", r->routing_key);
	STR("model", r->model);
	STR("cache_affinity_key", r->cache_affinity_key);
	bad |= json_object_set_new(o, "input_tokens", u64_json(r->input_tokens));
	bad |= json_object_set_new(o, "priority",
	    json_integer((json_int_t)r->priority));
	if (r->has_slo)
		bad |= json_object_set_new(o, "request_slo_ms",
		    u64_json(r->request_slo_ms));
	if (r->has_max_wait)
		bad |= json_object_set_new(o, "max_wait_ms",
		    u64_json(r->max_wait_ms));
	STR("routing_method", r->routing_method);
	STR("last_cluster_id", r->last_cluster_id);
#undef STR
	if (r->nexcluded > 0) {
		if ((a = json_array()) == NULL ||
		    json_object_set_new(o, "excluded_cluster_ids", a) != 0)
			bad = 1;
		else
			for (i = 0; i < r->nexcluded; i++)
				bad |= json_array_append_new(a,
				    json_string(r->excluded[i]));
	}
	bad |= json_object_set_new(o, "elapsed_ms", ms_json(r->elapsed_ms));
	if (bad) {
		json_decref(o);
		return NULL;
	}
	return o;
}

/* --- header form (stargate-headers(7)) ------------------------------------ */

/*
 * The header names the parser reads.  Besides stargate-headers(7)'s headers it
 * accepts two conveniences for sg-route, which a proxy never receives:
 *   x-stargate-excluded-cluster-ids: A, B   cluster ids excluded by earlier
 *       attempts (comma-separated, each trimmed, blanks skipped; repeated
 *       lines accumulate; undecodable = absent; more than SG_MAX_EXCLUDED
 *       ids = 400)
 *   x-elapsed-ms: 250                       the JSON form's elapsed_ms
 *       (a non-negative decimal number; otherwise 400)
 */
enum hdr {
	H_REQUEST_ID, H_INPUT_TOKENS, H_MODEL, H_METHOD, H_PRIORITY,
	H_MAX_WAIT, H_SLO, H_ROUTING_KEY, H_CACHE_KEY, H_LAST, H_ELAPSED,
	H_NHDR,
	H_EXCLUDED = H_NHDR,	/* multi-valued: handled as lines arrive */
	H_UNKNOWN,
};

static const char *const hdr_names[] = {
	"x-request-id", "x-input-tokens", "x-model", "x-routing-method",
	"x-priority", "x-max-wait-ms", "x-request-slo-ms", "x-routing-key",
	"x-cache-affinity-key", "x-stargate-last-cluster-id", "x-elapsed-ms",
	"x-stargate-excluded-cluster-ids",
};

static int
hdr_lookup(const char *name, size_t len)
{
	size_t i;

	for (i = 0; i < sizeof(hdr_names) / sizeof(hdr_names[0]); i++)
		if (strlen(hdr_names[i]) == len &&
		    strncasecmp(hdr_names[i], name, len) == 0)
			return (int)i;
	return H_UNKNOWN;
}

/* RFC 9110 token characters (header names). */
static bool
is_tchar(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	    (c >= '0' && c <= '9') || (c != '\0' && strchr("!#$%&'*+-.^_`|~",
	    c) != NULL);
}

/*
 * A header value "decodes" when it is well-formed UTF-8 without control
 * characters other than HTAB: sg_header_value_decodable(), the one rule
 * that the gateway, sg-classify and this parser share.
 */

struct hval {
	bool		 present;
	const char	*s;
	size_t		 len;
};

/* Optional-string rule: trimmed; blank or undecodable = absent (NULL). */
static int
opt_string(sg_request *r, const struct hval *h, const char **out,
    sg_error *err)
{
	const char *s = h->s;
	size_t len = h->len;

	*out = NULL;
	if (!h->present || !sg_header_value_decodable(s, len))
		return 0;
	sg_trim(&s, &len);
	if (len == 0)
		return 0;
	if ((*out = store_str(r, s, len)) == NULL)
		return sg_seterr(err, SG_ENOMEM, "out of memory");
	return 0;
}

/* Numeric rule: absent = none; otherwise a base-10 unsigned <= max or 400. */
static int
numeric(const struct hval *h, int which, uint64_t max, bool *has,
    uint64_t *out, sg_error *err)
{
	const char *s = h->s;
	size_t len = h->len;
	int rc;

	*has = false;
	if (!h->present)
		return 0;
	if (!sg_header_value_decodable(s, len))
		return sg_seterr_http(err, SG_EREQUEST, 400, NULL,
		    "%s: not a valid header value", hdr_names[which]);
	sg_trim(&s, &len);
	if (len == 0)
		return sg_seterr_http(err, SG_EREQUEST, 400, NULL,
		    "%s: blank value", hdr_names[which]);
	rc = sg_parse_u64(s, len, max, out);
	if (rc == SG_ERANGE)
		return sg_seterr_http(err, SG_EREQUEST, 400, NULL,
		    "%s: must be a base-10 unsigned integer <= %llu",
		    hdr_names[which], (unsigned long long)max);
	if (rc != 0)
		return sg_seterr_http(err, SG_EREQUEST, 400, NULL,
		    "%s: must be a base-10 unsigned integer", hdr_names[which]);
	*has = true;
	return 0;
}

/* x-elapsed-ms: a plain non-negative decimal ("250", "12.5"). */
static int
elapsed(const struct hval *h, double *out, sg_error *err)
{
	const char *s = h->s;
	size_t len = h->len, i, dots = 0, digits = 0;
	char buf[64];
	double v;

	if (!h->present)
		return 0;
	if (sg_header_value_decodable(s, len))
		sg_trim(&s, &len);
	for (i = 0; i < len; i++) {
		if (s[i] == '.')
			dots++;
		else if (s[i] >= '0' && s[i] <= '9')
			digits++;
		else
			break;
	}
	if (i != len || dots > 1 || digits == 0 || len >= sizeof(buf))
		return sg_seterr_http(err, SG_EREQUEST, 400, NULL,
		    "x-elapsed-ms: must be a non-negative decimal number");
	memcpy(buf, s, len);
	buf[len] = '\0';
	v = strtod(buf, NULL);
	if (!isfinite(v))
		return sg_seterr_http(err, SG_EREQUEST, 400, NULL,
		    "x-elapsed-ms: must be a non-negative decimal number");
	*out = v;
	return 0;
}

/* x-stargate-excluded-cluster-ids: comma-separated, trimmed, blanks skipped. */
static int
excluded_header(sg_request *r, const char *s, size_t len, sg_error *err)
{
	size_t i = 0;
	int rc;

	if (!sg_header_value_decodable(s, len))
		return 0;	/* optional-string rule: absent */
	while (i <= len) {
		size_t j = i;
		const char *item;
		size_t ilen;

		while (j < len && s[j] != ',')
			j++;
		item = s + i;
		ilen = j - i;
		sg_trim(&item, &ilen);
		if (ilen > 0) {
			if ((rc = store_excluded(r, item, ilen)) == SG_ERANGE)
				return sg_seterr_http(err, SG_EREQUEST, 400,
				    NULL, "x-stargate-excluded-cluster-ids: "
				    "more than %d ids", SG_MAX_EXCLUDED);
			if (rc != 0)
				return sg_seterr(err, rc, "out of memory");
		}
		i = j + 1;
	}
	return 0;
}

/* "METHOD target HTTP/x.y": three space-separated words, the last HTTP/. */
static bool
request_line(const char *s, const char *end)
{
	const char *sp1, *sp2;

	if ((sp1 = memchr(s, ' ', (size_t)(end - s))) == NULL || sp1 == s)
		return false;
	if ((sp2 = memchr(sp1 + 1, ' ', (size_t)(end - sp1 - 1))) == NULL ||
	    sp2 == sp1 + 1)
		return false;
	return end - (sp2 + 1) > 5 && strncmp(sp2 + 1, "HTTP/", 5) == 0 &&
	    memchr(sp2 + 1, ' ', (size_t)(end - sp2 - 1)) == NULL;
}

/*
 * Take the headers of h[0..n) that the request reads into v (the first
 * occurrence of a name wins; x-stargate-excluded-cluster-ids accumulates).
 * Values lose the optional white space (SP, HTAB) that HTTP framing puts
 * around them; nothing else is judged here.
 */
static int
collect(sg_request *r, struct hval *v, const sg_header *h, size_t n,
    sg_error *err)
{
	size_t i;
	int which, rc;

	for (i = 0; i < n; i++) {
		const char *s = h[i].value != NULL ? h[i].value : "", *se;
		size_t len = strlen(s);

		if (h[i].name == NULL)
			return sg_seterr(err, SG_EINVAL,
			    "header %zu: NULL name", i);
		se = s + len;
		which = hdr_lookup(h[i].name, strlen(h[i].name));
		if (which == H_EXCLUDED) {
			if ((rc = excluded_header(r, s, len, err)) != 0)
				return rc;
			continue;
		}
		if (which == H_UNKNOWN || v[which].present)
			continue;
		while (s < se && (*s == ' ' || *s == '\t'))
			s++;
		while (se > s && (se[-1] == ' ' || se[-1] == '\t'))
			se--;
		v[which].present = true;
		v[which].s = s;
		v[which].len = (size_t)(se - s);
	}
	return 0;
}

/* x-routing-method: the field value as received, for resolution
 * (stargate-lb-config(5)),
 * which normalizes and rejects blank or unknown names. */
static int
routing_method(sg_request *r, const struct hval *h, sg_error *err)
{
	if (!h->present)
		return 0;
	if (sg_header_value_decodable(h->s, h->len))
		r->routing_method = store_str(r, h->s, h->len);
	else {
		r->routing_method_invalid = true;
		r->routing_method = store_str(r, "<invalid-utf8>", 14);
	}
	if (r->routing_method == NULL)
		return sg_seterr(err, SG_ENOMEM, "out of memory");
	return 0;
}

static int
required(const void *p, bool has, const char *name, sg_error *err)
{
	if (p != NULL || has)
		return 0;
	return sg_seterr_http(err, SG_EREQUEST, 400, NULL, "%s: required",
	    name);
}

/* stargate-headers(7) order: request id, input tokens, model, method, numerics. */
static int
validate(sg_request *r, const struct hval *v, sg_error *err)
{
	bool has;
	uint64_t u;
	int rc;

	if ((rc = opt_string(r, &v[H_REQUEST_ID], &r->request_id, err)) != 0 ||
	    (rc = required(r->request_id, false, "x-request-id", err)) != 0)
		return rc;
	if ((rc = numeric(&v[H_INPUT_TOKENS], H_INPUT_TOKENS, UINT64_MAX,
	    &has, &r->input_tokens, err)) != 0 ||
	    (rc = required(NULL, has, "x-input-tokens", err)) != 0)
		return rc;
	if ((rc = opt_string(r, &v[H_MODEL], &r->model, err)) != 0 ||
	    (rc = required(r->model, false, "x-model", err)) != 0)
		return rc;
	if ((rc = routing_method(r, &v[H_METHOD], err)) != 0)
		return rc;
	if ((rc = numeric(&v[H_PRIORITY], H_PRIORITY, UINT32_MAX, &has, &u,
	    err)) != 0)
		return rc;
	if (has)
		r->priority = (uint32_t)u;
	if ((rc = numeric(&v[H_MAX_WAIT], H_MAX_WAIT, UINT64_MAX,
	    &r->has_max_wait, &r->max_wait_ms, err)) != 0 ||
	    (rc = numeric(&v[H_SLO], H_SLO, UINT64_MAX, &r->has_slo,
	    &r->request_slo_ms, err)) != 0)
		return rc;
	if ((rc = opt_string(r, &v[H_ROUTING_KEY], &r->routing_key,
	    err)) != 0 ||
	    (rc = opt_string(r, &v[H_CACHE_KEY], &r->cache_affinity_key,
	    err)) != 0 ||
	    (rc = opt_string(r, &v[H_LAST], &r->last_cluster_id, err)) != 0)
		return rc;
	set_hint_len(r);
	return elapsed(&v[H_ELAPSED], &r->elapsed_ms, err);
}

int
sg_request_from_header_list(sg_request *r, const sg_header *h, size_t n,
    sg_error *err)
{
	struct hval v[H_NHDR];
	int rc;

	sg_request_release(r);
	memset(v, 0, sizeof(v));
	if (h == NULL && n > 0)
		rc = sg_seterr(err, SG_EINVAL, "header list: NULL array");
	else if ((rc = collect(r, v, h, n, err)) == 0)
		rc = validate(r, v, err);
	if (rc != 0)
		sg_request_release(r);
	return rc;
}

/* --- text form ------------------------------------------------------------ */

#define LINE_BATCH	32	/* lines split before they are collected */

/* Stands in for a value holding a NUL byte: undecodable, as that value is. */
static const char nul_value[] = "\x01";

/*
 * Split the line [line, le) of the work copy in place: the colon and the
 * line end become NULs.  Returns false for a line that is not "name: value"
 * (a token name, a colon).
 */
static bool
split_line(char *line, char *le, sg_header *out)
{
	char *colon = memchr(line, ':', (size_t)(le - line));
	size_t i, nlen = colon != NULL ? (size_t)(colon - line) : 0;

	for (i = 0; i < nlen && is_tchar((unsigned char)line[i]); i++)
		;
	if (colon == NULL || nlen == 0 || i != nlen)
		return false;
	out->name = line;
	out->value = colon + 1;
	if (memchr(colon + 1, '\0', (size_t)(le - colon - 1)) != NULL)
		out->value = nul_value;
	*colon = '\0';
	*le = '\0';
	return true;
}

/*
 * Lines are split on LF (a CR before it is dropped).  Leading blank lines are
 * skipped; a first line of the form "METHOD target HTTP/x.y" is the HTTP
 * request line and is skipped; any other line that is not "name: value"
 * (a token name, a colon) is a 400; the header block ends at the
 * first blank line after it (what follows is a body and is not read).  The
 * lines are split in a work copy of the text and go to the header-list
 * rules in batches of LINE_BATCH (the collected values persist across
 * batches, so the first occurrence still wins, and an earlier line's error
 * still comes before a later malformed line's).
 */
int
sg_request_from_headers(sg_request *r, const char *text, size_t len,
    sg_error *err)
{
	sg_header batch[LINE_BATCH];
	struct hval v[H_NHDR];
	char *buf = NULL, *p, *end;
	bool started = false;
	unsigned lineno = 0;
	size_t nb = 0;
	int rc = 0;

	sg_request_release(r);
	memset(v, 0, sizeof(v));
	if ((buf = malloc(len + 1)) == NULL) {
		rc = sg_seterr(err, SG_ENOMEM, "out of memory");
		goto out;
	}
	if (len > 0)
		memcpy(buf, text, len);
	p = buf;
	end = buf + len;
	while (p < end) {
		char *nl = memchr(p, '\n', (size_t)(end - p));
		char *line = p, *le = nl != NULL ? nl : end;

		p = nl != NULL ? nl + 1 : end;
		lineno++;
		if (le > line && le[-1] == '\r')
			le--;
		if (le == line) {
			if (started)
				break;		/* end of the header block */
			continue;
		}
		if (!split_line(line, le, &batch[nb])) {
			if (!started && request_line(line, le)) {
				started = true;	/* "POST /v1/... HTTP/1.1" */
				continue;
			}
			if ((rc = collect(r, v, batch, nb, err)) == 0)
				rc = sg_seterr_http(err, SG_EREQUEST, 400, NULL,
				    "header line %u: expected \"name: value\"",
				    lineno);
			goto out;
		}
		started = true;
		if (++nb == LINE_BATCH) {
			if ((rc = collect(r, v, batch, nb, err)) != 0)
				goto out;
			nb = 0;
		}
	}
	if ((rc = collect(r, v, batch, nb, err)) == 0)
		rc = validate(r, v, err);
out:
	free(buf);
	if (rc != 0)
		sg_request_release(r);
	return rc;
}
