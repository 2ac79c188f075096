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

/* A NUL-terminated copy of s[0..len) owned by r; NULL on ENOMEM. */
static const char *
store_str(sg_request *r, const char *s, size_t len)
{
	struct sg_request_store *st;
	struct chunk *c;
	char *p;

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
	p = c->data + c->used;
	memcpy(p, s, len);
	p[len] = '\0';
	c->used += len + 1;
	return p;
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
	if (st->nexcl == st->excl_cap) {
		size_t cap = st->excl_cap != 0 ? 2 * st->excl_cap : 8;
		const char **n = realloc(st->excl, cap * sizeof(*n));

		if (n == NULL)
			return SG_ENOMEM;
		st->excl = n;
		st->excl_cap = cap;
	}
	if ((p = store_str(r, s, len)) == NULL)
		return SG_ENOMEM;
	st->excl[st->nexcl++] = p;
	r->excluded = st->excl;
	r->nexcluded = st->nexcl;
	return 0;
}

/* --- basics --------------------------------------------------------------- */

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
	return rc;
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
