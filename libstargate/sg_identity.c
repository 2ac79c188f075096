/*
 * sg_identity.c — session identity and input-token estimate of an
 * OpenAI-style request (stargate-headers(7); sg-proxy(8) gateway stage).
 *
 * Three independent readings of one body:
 *
 *  - the model id "<routing_key>/<model>", split at the first '/'; a
 *    36-character UUID routing key is canonicalised to lower case so that
 *    "ABC…" and "abc…" are one tenant (and one store key);
 *  - the session: the first non-empty source by precedence gives the raw
 *    session id and the cache affinity key "mt:v1:<src>:<sha256 hex>".
 *    Ids that come from the client are opaque bytes; we only bound them
 *    (256 bytes, no control bytes) so that they are safe in a header.  The
 *    payload source hashes the compact JSON of "messages" (chat) or "input"
 *    (Responses); its byte layout is jansson's (keys in input order), not the
 *    reference gateway's, which is harmless because payload keys change
 *    every turn and are never used for the last-cluster store;
 *  - the token estimate of stargate-headers(7).  A Responses body is first
 *  converted to
 *    the chat form (instructions -> system message, input items -> messages,
 *    flat function tools -> chat tools) and counted by the chat formula, so
 *    the two endpoints cannot drift apart.  value_tokens() needs the length
 *    of the reference encoder's JSON (Go encoding/json: HTML characters
 *    escaped, numbers as float64 in shortest form); json_len() computes that
 *    length without building the string.
 *
 * Image parts use the fallback estimator: 85 + ceil(w * h / 784) tokens,
 * capped at 16384; the dimensions are read from the header of a base64
 * data: URL (PNG, GIF, JPEG, WebP) by a streaming decoder that never
 * allocates; an image whose size we cannot read costs the cap (the worst
 * case), one with a zero dimension costs 256.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "sg_sha256.h"
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define SCAN_AVX2	1	/* chosen at run time (cpuid) */
#endif

#include "sg_identity.h"

#define IMG_BASE_TOKENS		85
#define IMG_PX_PER_TOKEN	784
#define IMG_MAX_TOKENS		16384
#define IMG_ZERO_TOKENS		256
#define JSON_DEPTH_MAX		512	/* json_len recursion bound */

/* A 400 invalid_request_error with the reference gateway's message. */
#define REQERR(err, ...) \
	sg_seterr_http((err), SG_EREQUEST, 400, "invalid_request_error", \
	    __VA_ARGS__)

void
sg_identity_init(sg_identity *id)
{
	if (id == NULL)
		return;
	memset(id, 0, sizeof(*id));
	id->source = SG_SOURCE_NONE;
}

void
sg_identity_release(sg_identity *id)
{
	if (id == NULL)
		return;
	free(id->routing_key);
	free(id->model);
	free(id->session_id);
	free(id->cache_affinity_key);
	sg_identity_init(id);
}

/* --- names ------------------------------------------------------------- */

static const char *const endpoint_names[] = {
	[SG_ENDPOINT_CHAT] = "chat",
	[SG_ENDPOINT_COMPLETIONS] = "completions",
	[SG_ENDPOINT_RESPONSES] = "responses",
	[SG_ENDPOINT_EMBEDDINGS] = "embeddings",
};

const char *
sg_endpoint_name(int endpoint)
{
	if (endpoint < 0 || endpoint > SG_ENDPOINT_EMBEDDINGS)
		return NULL;
	return endpoint_names[endpoint];
}

int
sg_endpoint_parse(const char *name, int *endpoint)
{
	int i;

	if (name == NULL)
		return SG_EINVAL;
	for (i = 0; i <= SG_ENDPOINT_EMBEDDINGS; i++) {
		if (strcmp(name, endpoint_names[i]) == 0) {
			*endpoint = i;
			return 0;
		}
	}
	return SG_EINVAL;
}

const char *
sg_session_source_name(int source)
{
	switch (source) {
	case SG_SOURCE_PROMPT_CACHE_KEY:	return "prompt_cache_key";
	case SG_SOURCE_CONVERSATION_ID:		return "conversation_id";
	case SG_SOURCE_HEADER:			return "header";
	case SG_SOURCE_PAYLOAD:			return "payload";
	default:				return NULL;
	}
}

/* --- model id (stargate-headers(7)) --------------------------------------- */

static bool
ishex(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') ||
	    (c >= 'A' && c <= 'F');
}

/* 8-4-4-4-12 hex digits with hyphens: the only form we canonicalise. */
static bool
is_uuid36(const char *s, size_t len)
{
	size_t i;

	if (len != 36)
		return false;
	for (i = 0; i < 36; i++) {
		if (i == 8 || i == 13 || i == 18 || i == 23) {
			if (s[i] != '-')
				return false;
		} else if (!ishex(s[i]))
			return false;
	}
	return true;
}

/* New string: s[0..len), lower-cased when it is a 36-character UUID. */
static char *
canonical_key(const char *s, size_t len)
{
	char *k;
	size_t i;

	if ((k = malloc(len + 1)) == NULL)
		return NULL;
	memcpy(k, s, len);
	k[len] = '\0';
	if (is_uuid36(s, len))
		for (i = 0; i < len; i++)
			k[i] = (char)tolower((unsigned char)k[i]);
	return k;
}

/* True if s[0..len) is empty or white space only (sg_trim's set). */
static bool
blank(const char *s, size_t len)
{
	sg_trim(&s, &len);
	return len == 0;
}

int
sg_identity_split_model(const char *model_id, const char *bound_routing_key,
    char **routing_key, char **model, sg_error *err)
{
	const char *slash;
	char *rk = NULL, *m = NULL, *bound = NULL;
	size_t rklen, mlen;
	int rc;

	if (model_id == NULL || *model_id == '\0')
		return REQERR(err, "model is required");
	if ((slash = strchr(model_id, '/')) == NULL)
		return REQERR(err, "model prefix is required");
	rklen = (size_t)(slash - model_id);
	mlen = strlen(slash + 1);
	/* Blank (white space only) is empty: the router would read the
	 * header as absent and refuse a header the client never sent. */
	if (blank(model_id, rklen))
		return REQERR(err, "routing key is required before model");
	if (blank(slash + 1, mlen))
		return REQERR(err,
		    "model suffix is required after routing key");
	if ((rk = canonical_key(model_id, rklen)) == NULL ||
	    (m = strdup(slash + 1)) == NULL) {
		rc = sg_seterr(err, SG_ENOMEM, "out of memory");
		goto out;
	}
	if (bound_routing_key != NULL && *bound_routing_key != '\0') {
		if ((bound = canonical_key(bound_routing_key,
		    strlen(bound_routing_key))) == NULL) {
			rc = sg_seterr(err, SG_ENOMEM, "out of memory");
			goto out;
		}
		if (strcmp(bound, rk) != 0) {
			rc = REQERR(err,
			    "model targets a different routing key");
			goto out;
		}
	}
	*routing_key = rk;
	*model = m;
	rk = m = NULL;
	rc = 0;
out:
	free(rk);
	free(m);
	free(bound);
	return rc;
}

/* --- session ids and keys (stargate-headers(7)) --------------------------- */

const char *
sg_identity_session_check(const char *s, size_t len)
{
	size_t i;

	if (len > SG_SESSION_ID_MAX)
		return "exceeds 256 bytes";
	for (i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c < 0x20 || c == 0x7f)
			return "contains a control character";
	}
	return NULL;
}

int
sg_identity_affinity_key(char *out, size_t outsz, const char *src,
    const void *data, size_t len)
{
	size_t plen = sizeof(SG_AFFINITY_PREFIX) - 1, slen;

	if (out == NULL || src == NULL || (data == NULL && len > 0))
		return SG_EINVAL;
	slen = strlen(src);
	if (outsz < plen + slen + 1 + SG_SHA256_HEX_LEN + 1)
		return SG_ERANGE;
	memcpy(out, SG_AFFINITY_PREFIX, plen);
	memcpy(out + plen, src, slen);
	out[plen + slen] = ':';
	sg_sha256_hex(out + plen + slen + 1, data, len);
	return 0;
}

bool
sg_identity_is_affinity_key(const char *s, size_t len)
{
	size_t plen = sizeof(SG_AFFINITY_PREFIX) - 1, i, xend;

	if (s == NULL || len < plen + 1 + 1 + 64 ||
	    memcmp(s, SG_AFFINITY_PREFIX, plen) != 0)
		return false;
	/* "<x>:<64 hex>": the hex part is the last 64 bytes, x has no ':'. */
	xend = len - 64 - 1;
	if (s[xend] != ':' || xend == plen)
		return false;
	for (i = plen; i < xend; i++)
		if (s[i] == ':')
			return false;
	for (i = xend + 1; i < len; i++)
		if (!ishex(s[i]))
			return false;
	return true;
}

/* name: lower case, starting with a letter (its first byte, folded,
 * rules out most fields before strcasecmp). */
static const char *
header_get(const sg_header *hdrs, size_t nhdrs, const char *name)
{
	size_t i;

	for (i = 0; i < nhdrs; i++)
		if (hdrs[i].name != NULL && hdrs[i].value != NULL &&
		    ((unsigned char)hdrs[i].name[0] | 0x20) ==
		    (unsigned char)name[0] &&
		    strcasecmp(hdrs[i].name, name) == 0)
			return hdrs[i].value;
	return NULL;
}

/*
 * A body field that may carry a session id.  Absent, null and "" are
 * absent; a non-string is a request error.  For "conversation" an object's
 * "id" is the id.
 */
static int
body_session(const json_t *body, const char *field, bool object_id,
    const char **s, size_t *len, sg_error *err)
{
	const json_t *v = json_object_get(body, field);

	*s = NULL;
	*len = 0;
	if (v == NULL || json_is_null(v))
		return 0;
	if (object_id && json_is_object(v)) {
		v = json_object_get(v, "id");
		if (v == NULL || json_is_null(v))
			return 0;
		if (!json_is_string(v))
			return REQERR(err, "%s.id must be a string", field);
	} else if (!json_is_string(v)) {
		if (object_id)
			return REQERR(err,
			    "%s must be a string or an object with an id",
			    field);
		return REQERR(err, "%s must be a string", field);
	}
	*s = json_string_value(v);
	*len = json_string_length(v);
	return 0;
}

/* The x-multi-turn-session-id header, trimmed, validated first whatever
 * source wins: *hv, *hlen (0 when absent or blank). */
static int
header_session(const sg_header *hdrs, size_t nhdrs, const char **hv,
    size_t *hlen, sg_error *err)
{
	const char *why;

	*hlen = 0;
	if ((*hv = header_get(hdrs, nhdrs, "x-multi-turn-session-id")) !=
	    NULL) {
		*hlen = strlen(*hv);
		sg_trim(hv, hlen);
		if (*hlen > 0 && (why = sg_identity_session_check(*hv,
		    *hlen)) != NULL)
			return REQERR(err,
			    "x-multi-turn-session-id is invalid: %s", why);
	}
	return 0;
}

/*
 * A session from a body field (src, bs[0..blen), blen > 0) or, with src
 * SG_SOURCE_NONE, from the header (hv[0..hlen), hlen > 0): validate the
 * body value, derive the key (a header already in key form is verbatim),
 * fill id.
 */
static int
set_session(sg_identity *id, int src, const char *bs, size_t blen,
    const char *hv, size_t hlen, sg_error *err)
{
	char key[SG_AFFINITY_KEY_MAX] = "";
	const char *why, *sid, *akey = key;
	size_t sidlen, aklen;
	int rc;

	if (src != SG_SOURCE_NONE) {
		if ((why = sg_identity_session_check(bs, blen)) != NULL)
			return REQERR(err, "session id from %s is invalid: %s",
			    sg_session_source_name(src), why);
		sid = bs;
		sidlen = blen;
	} else {
		src = SG_SOURCE_HEADER;
		sid = hv;
		sidlen = hlen;
	}
	if (src == SG_SOURCE_HEADER && sg_identity_is_affinity_key(hv, hlen)) {
		akey = hv;
		aklen = hlen;
	} else {
		if ((rc = sg_identity_affinity_key(key, sizeof(key), "session",
		    sid, sidlen)) != 0)
			return sg_seterr(err, rc, "affinity key: %s",
			    sg_strerror(rc));
		aklen = strlen(key);
	}
	if ((id->cache_affinity_key = strndup(akey, aklen)) == NULL ||
	    (id->session_id = strndup(sid, sidlen)) == NULL)
		return sg_seterr(err, SG_ENOMEM, "out of memory");
	id->source = src;
	id->eligible = true;
	return 0;
}

static int
resolve_session(sg_identity *id, const json_t *body, const sg_header *hdrs,
    size_t nhdrs, sg_error *err)
{
	char key[SG_AFFINITY_KEY_MAX] = "";
	const char *hv = NULL, *bs = NULL;
	size_t hlen = 0, blen = 0;
	char *payload = NULL;
	const json_t *pv;
	int rc, src = SG_SOURCE_NONE;

	if ((rc = header_session(hdrs, nhdrs, &hv, &hlen, err)) != 0)
		return rc;
	if ((rc = body_session(body, "prompt_cache_key", false, &bs, &blen,
	    err)) != 0)
		return rc;
	if (blen > 0)
		src = SG_SOURCE_PROMPT_CACHE_KEY;
	else if (id->endpoint == SG_ENDPOINT_RESPONSES) {
		if ((rc = body_session(body, "conversation", true, &bs, &blen,
		    err)) != 0)
			return rc;
		if (blen > 0)
			src = SG_SOURCE_CONVERSATION_ID;
	}
	if (src != SG_SOURCE_NONE || hlen > 0)
		return set_session(id, src, bs, blen, hv, hlen, err);

	pv = json_object_get(body,
	    id->endpoint == SG_ENDPOINT_RESPONSES ? "input" : "messages");
	if (pv == NULL || json_is_null(pv))
		return 0;	/* nothing to hash: no session */
	payload = json_dumps(pv, JSON_COMPACT | JSON_ENCODE_ANY);
	if (payload == NULL)
		return sg_seterr(err, SG_ENOMEM, "out of memory");
	rc = sg_identity_affinity_key(key, sizeof(key), "payload", payload,
	    strlen(payload));
	free(payload);
	if (rc != 0)
		return sg_seterr(err, rc, "affinity key: %s", sg_strerror(rc));
	/* a payload session's id is its key */
	if ((id->cache_affinity_key = strdup(key)) == NULL ||
	    (id->session_id = strdup(key)) == NULL)
		return sg_seterr(err, SG_ENOMEM, "out of memory");
	id->source = SG_SOURCE_PAYLOAD;
	id->eligible = false;
	return 0;
}

/* --- JSON length as the reference encoder writes it ---------------------- */

static size_t
str_json_len(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t len = 2, i;

	for (i = 0; i < n; i++) {
		unsigned char c = p[i];

		if (c == '"' || c == '\\' || c == '\n' || c == '\r' ||
		    c == '\t' || c == '\b' || c == '\f')
			len += 2;
		else if (c < 0x20 || c == '<' || c == '>' || c == '&')
			len += 6;	/* \u00XX */
		else if (c == 0xe2 && i + 2 < n && p[i + 1] == 0x80 &&
		    (p[i + 2] == 0xa8 || p[i + 2] == 0xa9)) {
			len += 6;	/* U+2028, U+2029 as \u202X */
			i += 2;
		} else
			len += 1;
	}
	return len;
}

/* Go's float64 encoding: shortest round-trip digits, %f style for
 * 1e-6 <= |f| < 1e21, else %e style with "e-07" cleaned to "e-7". */
static size_t
real_json_len(double f)
{
	char buf[40];
	int p, e = 0, n;
	size_t len = 0;

	if (!isfinite(f))
		return 4;	/* not representable; jansson never has it */
	if (signbit(f)) {
		len++;
		f = -f;
	}
	if (f == 0)
		return len + 1;
	for (p = 1; p <= 17; p++) {
		snprintf(buf, sizeof(buf), "%.*e", p - 1, f);
		if (strtod(buf, NULL) == f)
			break;
	}
	if (p > 17)
		p = 17;
	e = (int)strtol(strchr(buf, 'e') + 1, NULL, 10);
	if (f < 1e-6 || f >= 1e21) {
		/* d[.ddd]e±XX */
		len += (size_t)(p > 1 ? p + 1 : 1) + 2;
		n = abs(e);
		if (e < 0 && n < 10)
			len += 1;
		else
			len += n < 100 ? 2 : 3;
		return len;
	}
	if (e >= 0)
		return len + (size_t)(p <= e + 1 ? e + 1 : p + 1);
	return len + 2 + (size_t)(-e - 1) + (size_t)p;
}

static size_t
json_len_depth(const json_t *v, int depth)
{
	size_t len, n, i;
	const char *k;
	json_t *m;

	if (v == NULL || depth > JSON_DEPTH_MAX)
		return 4;
	switch (json_typeof(v)) {
	case JSON_OBJECT:
		len = 2;
		n = 0;
		json_object_foreach((json_t *)v, k, m) {
			len += str_json_len(k, strlen(k)) + 1 +
			    json_len_depth(m, depth + 1);
			n++;
		}
		return len + (n > 0 ? n - 1 : 0);
	case JSON_ARRAY:
		len = 2;
		n = json_array_size(v);
		for (i = 0; i < n; i++)
			len += json_len_depth(json_array_get(v, i), depth + 1);
		return len + (n > 0 ? n - 1 : 0);
	case JSON_STRING:
		return str_json_len(json_string_value(v),
		    json_string_length(v));
	case JSON_INTEGER:
		return real_json_len((double)json_integer_value(v));
	case JSON_REAL:
		return real_json_len(json_real_value(v));
	case JSON_TRUE:
		return 4;
	case JSON_FALSE:
		return 5;
	case JSON_NULL:
	default:
		return 4;
	}
}

size_t
sg_identity_json_len(const json_t *v)
{
	return json_len_depth(v, 0);
}

/* --- token estimate (stargate-headers(7)) --------------------------------- */

uint64_t
sg_identity_text_tokens(size_t len)
{
	return len == 0 ? 0 : 5 + ((uint64_t)len + 3) / 4;
}

/* text_tokens of a string value; 0 for anything else. */
static uint64_t
text_of(const json_t *v)
{
	if (!json_is_string(v))
		return 0;
	return sg_identity_text_tokens(json_string_length(v));
}

static uint64_t
value_of(const json_t *v)
{
	if (v == NULL || json_is_null(v))
		return 0;
	return sg_identity_text_tokens(sg_identity_json_len(v));
}

/* string -> text, anything else -> value (tool_choice, function_call). */
static uint64_t
text_or_value(const json_t *v)
{
	return json_is_string(v) ? text_of(v) : value_of(v);
}

/*
 * A streaming base64 reader over a data: URL, enough to read an image
 * header without decoding (or allocating) the whole image.
 */
struct b64 {
	const char	*s;
	size_t		 len, pos;	/* in characters */
	unsigned char	 out[3];
	int		 nout, iout;
};

static int
b64val(char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+' || c == '-')
		return 62;
	if (c == '/' || c == '_')
		return 63;
	return -1;
}

/* Next byte, or -1 at the end or on a malformed quantum. */
static int
b64_byte(struct b64 *b)
{
	int v[4], k = 0;

	if (b->iout < b->nout)
		return b->out[b->iout++];
	while (k < 4 && b->pos < b->len) {
		char c = b->s[b->pos++];

		if (c == '=')
			break;
		if ((v[k] = b64val(c)) < 0)
			return -1;
		k++;
	}
	if (k < 2)
		return -1;
	b->out[0] = (unsigned char)(v[0] << 2 | v[1] >> 4);
	b->nout = 1;
	if (k > 2) {
		b->out[1] = (unsigned char)((v[1] & 0xf) << 4 | v[2] >> 2);
		b->nout = 2;
	}
	if (k > 3) {
		b->out[2] = (unsigned char)((v[2] & 0x3) << 6 | v[3]);
		b->nout = 3;
	}
	if (k < 4)
		b->pos = b->len;	/* padding ends the data */
	b->iout = 1;
	return b->out[0];
}

/* Read n bytes into buf (n <= 32); false at the end. */
static bool
b64_read(struct b64 *b, unsigned char *buf, size_t n)
{
	size_t i;
	int c;

	for (i = 0; i < n; i++) {
		if ((c = b64_byte(b)) < 0)
			return false;
		if (buf != NULL)
			buf[i] = (unsigned char)c;
	}
	return true;
}

static bool
b64_skip(struct b64 *b, size_t n)
{
	while (n-- > 0)
		if (b64_byte(b) < 0)
			return false;
	return true;
}

static uint32_t
be16(const unsigned char *p)
{
	return (uint32_t)p[0] << 8 | p[1];
}

static uint32_t
be32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	    (uint32_t)p[2] << 8 | p[3];
}

static uint32_t
le16(const unsigned char *p)
{
	return (uint32_t)p[1] << 8 | p[0];
}

/* JPEG: walk the segments to the first start-of-frame marker. */
static bool
jpeg_dims(struct b64 *b, uint32_t *w, uint32_t *h)
{
	unsigned char m[2], seg[7];
	int guard;

	for (guard = 0; guard < 4096; guard++) {
		if (!b64_read(b, m, 2) || m[0] != 0xff)
			return false;
		while (m[1] == 0xff)	/* fill bytes */
			if (!b64_read(b, m + 1, 1))
				return false;
		if (m[1] == 0xd8 || m[1] == 0x01 ||
		    (m[1] >= 0xd0 && m[1] <= 0xd7))
			continue;	/* markers without a length */
		if (!b64_read(b, seg, 2) || be16(seg) < 2)
			return false;
		if (m[1] >= 0xc0 && m[1] <= 0xcf && m[1] != 0xc4 &&
		    m[1] != 0xc8 && m[1] != 0xcc) {
			if (!b64_read(b, seg, 5))
				return false;
			*h = be16(seg + 1);
			*w = be16(seg + 3);
			return true;
		}
		if (!b64_skip(b, be16(seg) - 2))
			return false;
	}
	return false;
}

/* Dimensions of a base64 data: URL image; false when unknown. */
static bool
image_dims(const char *url, size_t len, uint32_t *w, uint32_t *h)
{
	static const unsigned char png[8] = { 0x89, 'P', 'N', 'G', 0x0d,
	    0x0a, 0x1a, 0x0a };
	const char *comma, *semi;
	unsigned char hd[30];
	struct b64 b;

	if (len < 5 || strncasecmp(url, "data:", 5) != 0 ||
	    (comma = memchr(url, ',', len)) == NULL)
		return false;
	semi = comma - 7;
	if (semi < url + 5 || strncasecmp(semi, ";base64", 7) != 0)
		return false;
	memset(&b, 0, sizeof(b));
	b.s = comma + 1;
	b.len = len - (size_t)(comma + 1 - url);
	if (!b64_read(&b, hd, 2))
		return false;
	if (hd[0] == 0xff && hd[1] == 0xd8)
		return jpeg_dims(&b, w, h);
	if (!b64_read(&b, hd + 2, 28))
		return false;
	if (memcmp(hd, png, 8) == 0 && memcmp(hd + 12, "IHDR", 4) == 0) {
		*w = be32(hd + 16);
		*h = be32(hd + 20);
		return true;
	}
	if (memcmp(hd, "GIF87a", 6) == 0 || memcmp(hd, "GIF89a", 6) == 0) {
		*w = le16(hd + 6);
		*h = le16(hd + 8);
		return true;
	}
	if (memcmp(hd, "RIFF", 4) == 0 && memcmp(hd + 8, "WEBP", 4) == 0) {
		if (memcmp(hd + 12, "VP8X", 4) == 0) {
			*w = 1 + ((uint32_t)hd[24] | (uint32_t)hd[25] << 8 |
			    (uint32_t)hd[26] << 16);
			*h = 1 + ((uint32_t)hd[27] | (uint32_t)hd[28] << 8 |
			    (uint32_t)hd[29] << 16);
			return true;
		}
		if (memcmp(hd + 12, "VP8 ", 4) == 0) {
			*w = le16(hd + 26) & 0x3fff;
			if (!b64_read(&b, hd, 2))
				return false;
			*h = le16(hd) & 0x3fff;
			return true;
		}
		if (memcmp(hd + 12, "VP8L", 4) == 0 && hd[20] == 0x2f) {
			uint32_t bits = (uint32_t)hd[21] |
			    (uint32_t)hd[22] << 8 | (uint32_t)hd[23] << 16 |
			    (uint32_t)hd[24] << 24;

			*w = (bits & 0x3fff) + 1;
			*h = ((bits >> 14) & 0x3fff) + 1;
			return true;
		}
	}
	return false;
}

static uint64_t
image_tokens(const json_t *part)
{
	const json_t *u = json_object_get(part, "image_url");
	uint32_t w = 0, h = 0;
	uint64_t t;

	if (json_is_object(u))
		u = json_object_get(u, "url");
	if (!json_is_string(u) || !image_dims(json_string_value(u),
	    json_string_length(u), &w, &h))
		return IMG_MAX_TOKENS;
	if (w == 0 || h == 0)
		return IMG_ZERO_TOKENS;
	t = IMG_BASE_TOKENS + ((uint64_t)w * h + IMG_PX_PER_TOKEN - 1) /
	    IMG_PX_PER_TOKEN;
	return t > IMG_MAX_TOKENS ? IMG_MAX_TOKENS : t;
}

static uint64_t
content_tokens(const json_t *c)
{
	const json_t *part, *type;
	uint64_t t = 0;
	size_t i;

	if (c == NULL || json_is_null(c))
		return 0;
	if (json_is_string(c))
		return text_of(c);
	if (!json_is_array(c))
		return value_of(c);
	json_array_foreach(c, i, part) {
		type = json_object_get(part, "type");
		if (json_is_string(type) &&
		    strcmp(json_string_value(type), "text") == 0 &&
		    json_is_string(json_object_get(part, "text")))
			t += json_string_length(json_object_get(part,
			    "text")) / 4;
		else if (json_is_string(type) &&
		    strcmp(json_string_value(type), "image_url") == 0)
			t += image_tokens(part);
		else
			t += value_of(part);
	}
	return t;
}

static uint64_t
message_tokens(const json_t *m)
{
	const json_t *name = json_object_get(m, "name");
	uint64_t t = 3 + 2;

	if (!json_is_object(m))
		return 0;
	t += content_tokens(json_object_get(m, "content"));
	if (json_is_string(name) && json_string_length(name) > 0)
		t += text_of(name) + 1;
	t += text_of(json_object_get(m, "tool_call_id"));
	t += text_of(json_object_get(m, "reasoning"));
	t += text_of(json_object_get(m, "channel"));
	t += value_of(json_object_get(m, "tool_calls"));
	t += value_of(json_object_get(m, "function_call"));
	return t;
}

static const struct {
	const char	*model;
	uint64_t	 extra;
} model_extras[] = {
	{ "llama2-70b-4096", 15 },
	{ "mixtral-8x7b-32768", 1 },
	{ "gemma-7b-it", 2 },
};

static uint64_t
chat_tokens(const json_t *body, const char *model)
{
	const json_t *msgs = json_object_get(body, "messages");
	const json_t *stop = json_object_get(body, "stop"), *v;
	uint64_t t = 0;
	size_t i;

	for (i = 0; model != NULL &&
	    i < sizeof(model_extras) / sizeof(model_extras[0]); i++)
		if (strcmp(model, model_extras[i].model) == 0)
			t += model_extras[i].extra;
	if (json_is_array(msgs))
		json_array_foreach(msgs, i, v)
			t += message_tokens(v);
	t += value_of(json_object_get(body, "tools"));
	t += value_of(json_object_get(body, "functions"));
	t += text_or_value(json_object_get(body, "tool_choice"));
	t += text_or_value(json_object_get(body, "function_call"));
	t += value_of(json_object_get(body, "response_format"));
	if (json_is_string(stop))
		t += text_of(stop);
	else if (json_is_array(stop))
		json_array_foreach(stop, i, v)
			t += text_of(v);
	t += text_of(json_object_get(body, "user"));
	t += text_of(json_object_get(body, "reasoning_format"));
	t += text_of(json_object_get(body, "reasoning_effort"));
	t += value_of(json_object_get(body, "metadata"));
	return t;
}

/*
 * Σ text(item) over a string or an array of strings; token-id arrays
 * (integers, or arrays of integers) count one token per id.
 */
static uint64_t
input_items_tokens(const json_t *in)
{
	const json_t *v;
	uint64_t t = 0;
	size_t i;

	if (json_is_string(in))
		return text_of(in);
	if (!json_is_array(in))
		return 0;
	json_array_foreach(in, i, v) {
		if (json_is_string(v))
			t += text_of(v);
		else if (json_is_integer(v))
			t += 1;
		else if (json_is_array(v))
			t += json_array_size(v);
	}
	return t;
}

/* --- Responses -> chat --------------------------------------------------- */

static int
set_copy(json_t *dst, const char *key, const json_t *v)
{
	if (v == NULL)
		return 0;
	return json_object_set_new(dst, key, json_deep_copy(v));
}

/* Responses content parts -> chat content parts. */
static json_t *
convert_content(const json_t *c)
{
	const json_t *part, *type, *u;
	const char *ty;
	json_t *out, *np;
	size_t i;

	if (c == NULL)
		return json_null();
	if (!json_is_array(c))
		return json_deep_copy(c);
	if ((out = json_array()) == NULL)
		return NULL;
	json_array_foreach(c, i, part) {
		type = json_object_get(part, "type");
		ty = json_is_string(type) ? json_string_value(type) : "";
		if (strcmp(ty, "input_text") == 0 ||
		    strcmp(ty, "output_text") == 0 || strcmp(ty, "text") == 0) {
			np = json_pack("{s:s, s:O}", "type", "text", "text",
			    json_object_get(part, "text") != NULL ?
			    json_object_get(part, "text") : json_null());
		} else if (strcmp(ty, "refusal") == 0) {
			np = json_pack("{s:s, s:O}", "type", "text", "text",
			    json_object_get(part, "refusal") != NULL ?
			    json_object_get(part, "refusal") : json_null());
		} else if (strcmp(ty, "input_image") == 0) {
			u = json_object_get(part, "image_url");
			np = json_pack("{s:s, s:{s:O}}", "type", "image_url",
			    "image_url", "url", u != NULL ? u : json_null());
		} else
			np = json_deep_copy(part);
		if (np == NULL || json_array_append_new(out, np) != 0) {
			json_decref(out);
			return NULL;
		}
	}
	return out;
}

/* The texts of a reasoning item's summary parts, joined by newlines. */
static json_t *
join_summary(const json_t *summary)
{
	const json_t *v, *t;
	json_t *out;
	size_t n = 0, off = 0, i, tl;
	char *text;

	json_array_foreach(summary, i, v)
		if (json_is_string(t = json_object_get(v, "text")))
			n += json_string_length(t) + 1;
	if ((text = malloc(n + 1)) == NULL)
		return NULL;
	json_array_foreach(summary, i, v) {
		if (!json_is_string(t = json_object_get(v, "text")))
			continue;
		if (off > 0)
			text[off++] = '\n';
		tl = json_string_length(t);
		memcpy(text + off, json_string_value(t), tl);
		off += tl;
	}
	out = json_stringn(text, off);
	free(text);
	return out;
}

static json_t *
convert_item(const json_t *item, json_t **pending_calls)
{
	const json_t *type = json_object_get(item, "type");
	const char *ty = json_is_string(type) ? json_string_value(type) : "";
	json_t *m = NULL, *call, *sum;

	if (strcmp(ty, "function_call") == 0) {
		call = json_pack("{s:O, s:s, s:{s:O, s:O}}",
		    "id", json_object_get(item, "call_id") != NULL ?
		    json_object_get(item, "call_id") : json_null(),
		    "type", "function", "function",
		    "name", json_object_get(item, "name") != NULL ?
		    json_object_get(item, "name") : json_null(),
		    "arguments", json_object_get(item, "arguments") != NULL ?
		    json_object_get(item, "arguments") : json_null());
		if (call == NULL)
			return NULL;
		if (*pending_calls == NULL) {
			/* consecutive calls become one assistant message */
			if ((m = json_pack("{s:s, s:[]}", "role", "assistant",
			    "tool_calls")) == NULL) {
				json_decref(call);
				return NULL;
			}
			*pending_calls = json_object_get(m, "tool_calls");
		}
		if (json_array_append_new(*pending_calls, call) != 0) {
			json_decref(m);
			return NULL;
		}
		return m != NULL ? m : json_null();
	}
	*pending_calls = NULL;
	if ((m = json_object()) == NULL)
		return NULL;
	if (strcmp(ty, "function_call_output") == 0) {
		if (json_object_set_new(m, "role", json_string("tool")) != 0 ||
		    set_copy(m, "tool_call_id", json_object_get(item,
		    "call_id")) != 0 ||
		    set_copy(m, "content", json_object_get(item,
		    "output")) != 0)
			goto fail;
	} else if (strcmp(ty, "reasoning") == 0) {
		if ((sum = join_summary(json_object_get(item, "summary"))) ==
		    NULL || json_object_set_new(m, "role",
		    json_string("assistant")) != 0 ||
		    json_object_set_new(m, "reasoning", sum) != 0)
			goto fail;
	} else if (json_object_get(item, "role") != NULL &&
	    (*ty == '\0' || strcmp(ty, "message") == 0)) {
		if (set_copy(m, "role", json_object_get(item, "role")) != 0 ||
		    json_object_set_new(m, "content",
		    convert_content(json_object_get(item, "content"))) != 0 ||
		    set_copy(m, "name", json_object_get(item, "name")) != 0)
			goto fail;
	} else {
		/* Anything else (item references, tool results of built-in
		 * tools) counts as its JSON. */
		if (json_object_set_new(m, "role", json_string("user")) != 0 ||
		    set_copy(m, "content", item) != 0)
			goto fail;
	}
	return m;
fail:
	json_decref(m);
	return NULL;
}

/* A flat Responses function tool {"type":"function","name":...} in the
 * chat form {"type":"function","function":{"name":...}}. */
static json_t *
chat_function_tool(const json_t *t)
{
	const char *k;
	json_t *nt, *fn, *v;

	if ((nt = json_pack("{s:s, s:{}}", "type", "function", "function")) ==
	    NULL)
		return NULL;
	fn = json_object_get(nt, "function");
	json_object_foreach((json_t *)t, k, v) {
		if (strcmp(k, "type") != 0 && set_copy(fn, k, v) != 0) {
			json_decref(nt);
			return NULL;
		}
	}
	return nt;
}

static json_t *
convert_tools(const json_t *tools)
{
	const json_t *t, *ty;
	json_t *out, *nt;
	size_t i;

	if (!json_is_array(tools))
		return json_deep_copy(tools);
	if ((out = json_array()) == NULL)
		return NULL;
	json_array_foreach(tools, i, t) {
		ty = json_object_get(t, "type");
		if (json_is_string(ty) && strcmp(json_string_value(ty),
		    "function") == 0 && json_object_get(t, "function") == NULL)
			nt = chat_function_tool(t);
		else
			nt = json_deep_copy(t);
		if (nt == NULL || json_array_append_new(out, nt) != 0) {
			json_decref(out);
			return NULL;
		}
	}
	return out;
}

/* The chat form of a Responses body, for counting only (new reference). */
static json_t *
responses_to_chat(const json_t *body)
{
	const json_t *in = json_object_get(body, "input");
	const json_t *ins = json_object_get(body, "instructions");
	const json_t *tc = json_object_get(body, "tool_choice");
	const json_t *text = json_object_get(body, "text");
	const json_t *reasoning = json_object_get(body, "reasoning");
	const json_t *item;
	json_t *chat, *msgs, *m, *pending = NULL;
	size_t i;

	if ((chat = json_object()) == NULL || (msgs = json_array()) == NULL ||
	    json_object_set_new(chat, "messages", msgs) != 0)
		goto fail;
	if (json_is_string(ins) && json_string_length(ins) > 0 &&
	    json_array_append_new(msgs, json_pack("{s:s, s:O}", "role",
	    "system", "content", ins)) != 0)
		goto fail;
	if (json_is_string(in)) {
		if (json_array_append_new(msgs, json_pack("{s:s, s:O}", "role",
		    "user", "content", in)) != 0)
			goto fail;
	} else if (json_is_array(in)) {
		json_array_foreach(in, i, item) {
			if ((m = convert_item(item, &pending)) == NULL)
				goto fail;
			if (json_is_null(m))
				continue;	/* appended to pending calls */
			if (json_array_append_new(msgs, m) != 0)
				goto fail;
		}
	}
	if (json_object_get(body, "tools") != NULL &&
	    json_object_set_new(chat, "tools",
	    convert_tools(json_object_get(body, "tools"))) != 0)
		goto fail;
	if (json_is_object(tc) && json_is_string(json_object_get(tc, "name")) &&
	    json_object_get(tc, "function") == NULL) {
		if (json_object_set_new(chat, "tool_choice", json_pack(
		    "{s:s, s:{s:O}}", "type", "function", "function", "name",
		    json_object_get(tc, "name"))) != 0)
			goto fail;
	} else if (set_copy(chat, "tool_choice", tc) != 0)
		goto fail;
	if (json_is_object(text) && set_copy(chat, "response_format",
	    json_object_get(text, "format")) != 0)
		goto fail;
	if (json_is_object(reasoning) && set_copy(chat, "reasoning_effort",
	    json_object_get(reasoning, "effort")) != 0)
		goto fail;
	if (set_copy(chat, "user", json_object_get(body, "user")) != 0 ||
	    set_copy(chat, "metadata", json_object_get(body, "metadata")) != 0)
		goto fail;
	return chat;
fail:
	json_decref(chat);
	return NULL;
}

int
sg_identity_tokens(int endpoint, const json_t *body, const char *model,
    uint64_t *out)
{
	json_t *chat;

	if (body == NULL || out == NULL)
		return SG_EINVAL;
	switch (endpoint) {
	case SG_ENDPOINT_CHAT:
		*out = chat_tokens(body, model);
		return 0;
	case SG_ENDPOINT_RESPONSES:
		if ((chat = responses_to_chat(body)) == NULL)
			return SG_ENOMEM;
		*out = chat_tokens(chat, model);
		json_decref(chat);
		return 0;
	case SG_ENDPOINT_COMPLETIONS:
		*out = input_items_tokens(json_object_get(body, "prompt"));
		return 0;
	case SG_ENDPOINT_EMBEDDINGS:
		*out = input_items_tokens(json_object_get(body, "input"));
		return 0;
	default:
		return SG_EINVAL;
	}
}

/* --- the whole identity --------------------------------------------------- */

int
sg_identity_parse(sg_identity *id, int endpoint, const json_t *body,
    const sg_header *hdrs, size_t nhdrs, const char *bound_routing_key,
    sg_error *err)
{
	sg_identity tmp;
	const json_t *mv;
	int rc;

	if (id == NULL || body == NULL || (hdrs == NULL && nhdrs > 0) ||
	    sg_endpoint_name(endpoint) == NULL)
		return sg_seterr(err, SG_EINVAL,
		    "sg_identity_parse: bad arguments");
	sg_identity_release(id);
	sg_identity_init(&tmp);
	tmp.endpoint = endpoint;
	if (!json_is_object(body)) {
		rc = REQERR(err, "request body must be a JSON object");
		goto out;
	}
	mv = json_object_get(body, "model");
	if (mv != NULL && !json_is_null(mv) && !json_is_string(mv)) {
		rc = REQERR(err, "model must be a string");
		goto out;
	}
	if ((rc = sg_identity_split_model(json_string_value(mv),
	    bound_routing_key, &tmp.routing_key, &tmp.model, err)) != 0)
		goto out;
	if (endpoint == SG_ENDPOINT_CHAT || endpoint == SG_ENDPOINT_RESPONSES)
		if ((rc = resolve_session(&tmp, body, hdrs, nhdrs, err)) != 0)
			goto out;
	if ((rc = sg_identity_tokens(endpoint, body, tmp.model,
	    &tmp.input_tokens)) != 0) {
		rc = sg_seterr(err, rc, "token estimate: %s", sg_strerror(rc));
		goto out;
	}
	*id = tmp;
	return 0;
out:
	sg_identity_release(&tmp);
	return rc;
}

/* --- the byte scan (sg_identity_parse_text) ----------------------------- */

/*
 * One pass over the body text, no tree: every value is checked by JSON's
 * grammar (as strictly as jansson reads it, or the scan gives up), member
 * names are compared raw, and only what the identity and the chat
 * estimate read is kept: the model, prompt_cache_key, and per message the
 * decoded lengths of its strings.  Strings are skipped 128 bytes at a
 * time with AVX2 where the processor has it, 64 with SSE2 (every x86-64),
 * else eight bytes at a time, until a quote, a backslash or a control
 * byte (a non-ASCII byte stops only the eight-byte skip; either way the
 * string is then validated as UTF-8 once).  Whatever the scan does not
 * handle — a value the estimate encodes (tools, tool_calls, content
 * parts...), an escaped model or session id, duplicate members it reads, numbers jansson
 * might refuse, deep nesting, a payload session, anything malformed —
 * makes it answer ENOTSUP: the full parse then decides, so a body the
 * scan accepts gets exactly what sg_identity_parse() gives it.
 */
#define SCAN_DEPTH_MAX	64
#define SCAN_NUM_MAX	15	/* longer numbers (or exponents): jansson
				 * may refuse them as out of range */

struct scan {
	const char	*s;
	size_t		 n, i;
	int		 depth;
};

struct sstr {
	const char	*p;		/* raw bytes between the quotes */
	size_t		 raw;
	size_t		 dec;		/* decoded length */
	bool		 esc;
};

#define SCAN_NO	ENOTSUP

static void
scan_ws(struct scan *c)
{
	while (c->i < c->n && (c->s[c->i] == ' ' || c->s[c->i] == '\n' ||
	    c->s[c->i] == '\r' || c->s[c->i] == '\t'))
		c->i++;
}

/* Non-zero if a byte of w may be a quote, a backslash, below 0x20 or
 * above 0x7f (never zero when one is). */
static uint64_t
word_bits(uint64_t w)
{
	const uint64_t lo = 0x0101010101010101ULL;
	const uint64_t hi = 0x8080808080808080ULL;
	uint64_t q = w ^ (lo * '"'), b = w ^ (lo * '\\');

	return (((q - lo) & ~q) | ((b - lo) & ~b) | (w - lo * 0x20) | w) & hi;
}

static int
hex4(const char *p, unsigned *cp)
{
	unsigned v = 0;
	int i, d;

	for (i = 0; i < 4; i++) {
		char ch = p[i];

		if (ch >= '0' && ch <= '9')
			d = ch - '0';
		else if (ch >= 'a' && ch <= 'f')
			d = ch - 'a' + 10;
		else if (ch >= 'A' && ch <= 'F')
			d = ch - 'A' + 10;
		else
			return -1;
		v = v << 4 | (unsigned)d;
	}
	*cp = v;
	return 0;
}

/* An escape at s[i] == '\\': its raw length, and its decoded one in *dec;
 * 0 when jansson would refuse it (or the text ends). */
static size_t
scan_escape(const struct scan *c, size_t i, size_t *dec)
{
	unsigned cp, lo;

	if (i + 1 >= c->n)
		return 0;
	switch (c->s[i + 1]) {
	case '"': case '\\': case '/': case 'b': case 'f': case 'n':
	case 'r': case 't':
		*dec = 1;
		return 2;
	case 'u':
		break;
	default:
		return 0;
	}
	if (i + 6 > c->n || hex4(c->s + i + 2, &cp) != 0 || cp == 0)
		return 0;
	if (cp >= 0xdc00 && cp <= 0xdfff)
		return 0;
	if (cp >= 0xd800 && cp <= 0xdbff) {
		if (i + 12 > c->n || c->s[i + 6] != '\\' ||
		    c->s[i + 7] != 'u' || hex4(c->s + i + 8, &lo) != 0 ||
		    lo < 0xdc00 || lo > 0xdfff)
			return 0;
		*dec = 4;
		return 12;
	}
	*dec = cp < 0x80 ? 1 : cp < 0x800 ? 2 : 3;
	return 6;
}

#ifdef __SSE2__
/* The quotes, backslashes and control bytes of x, one bit a byte. */
static inline __m128i
sse_stops(__m128i x)
{
	const __m128i q = _mm_set1_epi8('"'), b = _mm_set1_epi8('\\');
	const __m128i ctl = _mm_set1_epi8(0x1f);

	return _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(x, q),
	    _mm_cmpeq_epi8(x, b)), _mm_cmpeq_epi8(_mm_min_epu8(x, ctl), x));
}

#ifdef SCAN_AVX2
/*
 * AVX2 where the processor has it: 256 bytes a step while they are plain,
 * then 128, up to the 128 that hold a stop (sse_skip then finds it).  The
 * common step (plain ASCII text) is one test per byte: x ^ 2 below 0x21
 * as a signed byte (the sign of the saturated x ^ 2 - 0x21) is a control
 * byte (x < 0x20), the quote (0x22 ^ 2 == 0x20) or a non-ASCII byte
 * (negative); only a step that has one of those, or a backslash, tells
 * stops from non-ASCII bytes.
 */
__attribute__((target("avx2"))) static size_t
avx2_skip(const char *s, size_t i, size_t n, unsigned *hi)
{
	const __m256i q = _mm256_set1_epi8('"'), b = _mm256_set1_epi8('\\');
	const __m256i ctl = _mm256_set1_epi8(0x1f);
	const __m256i two = _mm256_set1_epi8(2), lim = _mm256_set1_epi8(0x21);
	const __m256i sign = _mm256_set1_epi8((char)0x80);
	__m256i h = _mm256_setzero_si256();

#define AVX2_ODD(x)	_mm256_or_si256(_mm256_subs_epi8( \
	_mm256_xor_si256((x), two), lim), _mm256_cmpeq_epi8((x), b))
#define AVX2_STOPS(x)	_mm256_or_si256(_mm256_or_si256( \
	_mm256_cmpeq_epi8((x), q), _mm256_cmpeq_epi8((x), b)), \
	_mm256_cmpeq_epi8(_mm256_min_epu8((x), ctl), (x)))
	/* plain text: 256 bytes a step */
	while (i + 256 <= n) {
		const __m256i *v = (const __m256i *)(const void *)(s + i);
		__m256i o = _mm256_or_si256(_mm256_or_si256(
		    _mm256_or_si256(AVX2_ODD(_mm256_loadu_si256(v)),
		    AVX2_ODD(_mm256_loadu_si256(v + 1))),
		    _mm256_or_si256(AVX2_ODD(_mm256_loadu_si256(v + 2)),
		    AVX2_ODD(_mm256_loadu_si256(v + 3)))),
		    _mm256_or_si256(
		    _mm256_or_si256(AVX2_ODD(_mm256_loadu_si256(v + 4)),
		    AVX2_ODD(_mm256_loadu_si256(v + 5))),
		    _mm256_or_si256(AVX2_ODD(_mm256_loadu_si256(v + 6)),
		    AVX2_ODD(_mm256_loadu_si256(v + 7)))));

		if (!_mm256_testz_si256(o, sign))
			break;
		i += 256;
	}
	while (i + 128 <= n) {
		const __m256i *v = (const __m256i *)(const void *)(s + i);
		__m256i x0 = _mm256_loadu_si256(v);
		__m256i x1 = _mm256_loadu_si256(v + 1);
		__m256i x2 = _mm256_loadu_si256(v + 2);
		__m256i x3 = _mm256_loadu_si256(v + 3);
		__m256i st = _mm256_or_si256(_mm256_or_si256(AVX2_ODD(x0),
		    AVX2_ODD(x1)), _mm256_or_si256(AVX2_ODD(x2),
		    AVX2_ODD(x3)));

		if (!_mm256_testz_si256(st, sign)) {
			st = _mm256_or_si256(_mm256_or_si256(AVX2_STOPS(x0),
			    AVX2_STOPS(x1)), _mm256_or_si256(AVX2_STOPS(x2),
			    AVX2_STOPS(x3)));
			if (!_mm256_testz_si256(st, st))
				break;
			h = _mm256_or_si256(h, _mm256_or_si256(
			    _mm256_or_si256(x0, x1), _mm256_or_si256(x2, x3)));
		}
		i += 128;
	}
#undef AVX2_ODD
#undef AVX2_STOPS
	*hi |= (unsigned)_mm256_movemask_epi8(h);
	return i;
}
#endif

/*
 * SSE2 (every x86-64): skip s[i..n) up to its first quote, backslash or
 * control byte, 64 bytes a step, then 16 (AVX2 first, 128 a step, where
 * the processor has it); *hi collects the high bits of the bytes skipped
 * (non-ASCII: the string is validated as UTF-8).  Returns the new i (the
 * scalar loops do the last bytes).
 */
static size_t
sse_skip(const char *s, size_t i, size_t n, unsigned *hi)
{
#ifdef SCAN_AVX2
	if (i + 128 <= n && __builtin_cpu_supports("avx2"))
		i = avx2_skip(s, i, n, hi);
#endif
	while (i + 64 <= n) {
		__m128i x0 = _mm_loadu_si128((const __m128i *)(const void *)
		    (s + i));
		__m128i x1 = _mm_loadu_si128((const __m128i *)(const void *)
		    (s + i + 16));
		__m128i x2 = _mm_loadu_si128((const __m128i *)(const void *)
		    (s + i + 32));
		__m128i x3 = _mm_loadu_si128((const __m128i *)(const void *)
		    (s + i + 48));
		__m128i st = _mm_or_si128(_mm_or_si128(sse_stops(x0),
		    sse_stops(x1)), _mm_or_si128(sse_stops(x2), sse_stops(x3)));

		if (_mm_movemask_epi8(st) != 0)
			break;
		*hi |= (unsigned)_mm_movemask_epi8(_mm_or_si128(
		    _mm_or_si128(x0, x1), _mm_or_si128(x2, x3)));
		i += 64;
	}
	while (i + 16 <= n) {
		__m128i x = _mm_loadu_si128((const __m128i *)(const void *)
		    (s + i));
		unsigned m = (unsigned)_mm_movemask_epi8(sse_stops(x));
		unsigned h = (unsigned)_mm_movemask_epi8(x);

		if (m != 0) {
			unsigned k = (unsigned)__builtin_ctz(m);

			*hi |= h & ((1u << k) - 1);
			return i + k;
		}
		*hi |= h;
		i += 16;
	}
	return i;
}
#endif

/* A string at s[i] == '"'. */
static int
scan_string(struct scan *c, struct sstr *out)
{
	size_t i = c->i + 1, start = i, dec = 0, n = c->n;
	bool high = false;

	out->esc = false;
#ifdef __SSE2__
	/* Most strings (keys, roles, ids) end within 16 bytes, plain. */
	if (i + 16 <= n) {
		__m128i x = _mm_loadu_si128((const __m128i *)(const void *)
		    (c->s + i));
		unsigned m = (unsigned)_mm_movemask_epi8(sse_stops(x)) |
		    (unsigned)_mm_movemask_epi8(x);

		if (m != 0 && c->s[i + (unsigned)__builtin_ctz(m)] == '"') {
			size_t k = (unsigned)__builtin_ctz(m);

			out->p = c->s + start;
			out->raw = out->dec = k;
			c->i = i + k + 1;
			return 0;
		}
	}
#endif
	for (;;) {
		uint64_t w;

#ifdef __SSE2__
		{
			unsigned hi = 0;
			size_t j = sse_skip(c->s, i, n, &hi);

			dec += j - i;
			i = j;
			if (hi != 0)
				high = true;
		}
#endif
		while (i + 32 <= n) {	/* 32 bytes a step, one branch */
			uint64_t w4[4];

			memcpy(w4, c->s + i, 32);
			if ((word_bits(w4[0]) | word_bits(w4[1]) |
			    word_bits(w4[2]) | word_bits(w4[3])) != 0)
				break;
			i += 32;
			dec += 32;
		}
		while (i + 8 <= n) {
			memcpy(&w, c->s + i, 8);
			if (word_bits(w) != 0)
				break;
			i += 8;
			dec += 8;
		}
		if (i >= n)
			return SCAN_NO;
		{
			unsigned char ch = (unsigned char)c->s[i];

			if (ch == '"')
				break;
			if (ch == '\\') {
				size_t d, r = scan_escape(c, i, &d);

				if (r == 0)
					return SCAN_NO;
				i += r;
				dec += d;
				out->esc = true;
				continue;
			}
			if (ch < 0x20)
				return SCAN_NO;
			if (ch >= 0x80)
				high = true;
			i++;
			dec++;
		}
	}
	if (high && !sg_utf8_valid(c->s + start, i - start))
		return SCAN_NO;
	out->p = c->s + start;
	out->raw = i - start;
	out->dec = dec;
	c->i = i + 1;
	return 0;
}

static int
scan_number(struct scan *c)
{
	size_t i = c->i, start = i;
	const char *s = c->s;

	if (i < c->n && s[i] == '-')
		i++;
	if (i >= c->n || !isdigit((unsigned char)s[i]))
		return SCAN_NO;
	if (s[i] == '0')
		i++;
	else
		while (i < c->n && isdigit((unsigned char)s[i]))
			i++;
	if (i < c->n && s[i] == '.') {
		if (++i >= c->n || !isdigit((unsigned char)s[i]))
			return SCAN_NO;
		while (i < c->n && isdigit((unsigned char)s[i]))
			i++;
	}
	/* an exponent may overflow a double: jansson refuses that */
	if (i < c->n && (s[i] == 'e' || s[i] == 'E'))
		return SCAN_NO;
	if (i - start > SCAN_NUM_MAX)
		return SCAN_NO;
	c->i = i;
	return 0;
}

static int scan_value(struct scan *c);

/*
 * After a container's element: whitespace, then either its closing byte
 * (consumed; 1: the container ended) or a comma and whitespace (0: an
 * element follows); anything else is SCAN_NO.
 */
static int
scan_next(struct scan *c, char close)
{
	scan_ws(c);
	if (c->i >= c->n)
		return SCAN_NO;
	if (c->s[c->i] == close) {
		c->i++;
		return 1;
	}
	if (c->s[c->i] != ',')
		return SCAN_NO;
	c->i++;
	scan_ws(c);
	return 0;
}

/* Members of an object (s[i] == '{') or elements of an array ('['),
 * skipped. */
static int
scan_container(struct scan *c)
{
	bool obj = c->s[c->i] == '{';
	char close = obj ? '}' : ']';
	struct sstr k;
	int rc;

	if (++c->depth > SCAN_DEPTH_MAX)
		return SCAN_NO;
	c->i++;
	scan_ws(c);
	if (c->i < c->n && c->s[c->i] == close) {
		c->i++;
		c->depth--;
		return 0;
	}
	for (;;) {
		if (obj) {
			if (c->i >= c->n || c->s[c->i] != '"' ||
			    (rc = scan_string(c, &k)) != 0)
				return SCAN_NO;
			scan_ws(c);
			if (c->i >= c->n || c->s[c->i] != ':')
				return SCAN_NO;
			c->i++;
		}
		if ((rc = scan_value(c)) != 0)
			return rc;
		if ((rc = scan_next(c, close)) == 1)
			break;
		if (rc != 0)
			return rc;
	}
	c->depth--;
	return 0;
}

static int
scan_lit(struct scan *c, const char *lit, size_t len)
{
	if (c->n - c->i < len || memcmp(c->s + c->i, lit, len) != 0)
		return SCAN_NO;
	c->i += len;
	return 0;
}

/* Any value, skipped (leading white space too). */
static int
scan_value(struct scan *c)
{
	struct sstr t;

	scan_ws(c);
	if (c->i >= c->n)
		return SCAN_NO;
	switch (c->s[c->i]) {
	case '"':
		return scan_string(c, &t);
	case '{':
	case '[':
		return scan_container(c);
	case 't':
		return scan_lit(c, "true", 4);
	case 'f':
		return scan_lit(c, "false", 5);
	case 'n':
		return scan_lit(c, "null", 4);
	default:
		return scan_number(c);
	}
}

/* What a member's value is, when the estimate reads it. */
enum vkind { V_STRING, V_NULL, V_OTHER };

/* A value that is a string (kept in *t), null, or anything else (skipped). */
static int
scan_member(struct scan *c, struct sstr *t, int *kind)
{
	int rc;

	scan_ws(c);
	if (c->i >= c->n)
		return SCAN_NO;
	if (c->s[c->i] == '"') {
		*kind = V_STRING;
		return scan_string(c, t);
	}
	if (c->s[c->i] == 'n' && c->n - c->i >= 4 &&
	    memcmp(c->s + c->i, "null", 4) == 0) {
		*kind = V_NULL;
		c->i += 4;
		return 0;
	}
	*kind = V_OTHER;
	rc = scan_value(c);
	return rc;
}

static bool
key_is(const struct sstr *k, const char *name)
{
	size_t n = strlen(name);

	return !k->esc && k->raw == n && memcmp(k->p, name, n) == 0;
}

/* Iterate an object's members: fn(c, key, arg) consumes each value. */
typedef int scan_member_fn(struct scan *c, const struct sstr *k, void *arg);

static int
scan_object(struct scan *c, scan_member_fn *fn, void *arg)
{
	struct sstr k;
	int rc;

	if (c->i >= c->n || c->s[c->i] != '{' || ++c->depth > SCAN_DEPTH_MAX)
		return SCAN_NO;
	c->i++;
	scan_ws(c);
	if (c->i < c->n && c->s[c->i] == '}') {
		c->i++;
		c->depth--;
		return 0;
	}
	for (;;) {
		if (c->i >= c->n || c->s[c->i] != '"' ||
		    scan_string(c, &k) != 0)
			return SCAN_NO;
		scan_ws(c);
		if (c->i >= c->n || c->s[c->i] != ':')
			return SCAN_NO;
		c->i++;
		if ((rc = fn(c, &k, arg)) != 0)
			return rc;
		if ((rc = scan_next(c, '}')) == 1)
			break;
		if (rc != 0)
			return rc;
	}
	c->depth--;
	return 0;
}

/* A message's contribution (message_tokens), members read once each. */
struct smsg {
	uint64_t	t;
	unsigned	seen;
};

static int
msg_member(struct scan *c, const struct sstr *k, void *arg)
{
	static const char *const names[] = {
		"content", "name", "tool_call_id", "reasoning", "channel",
		"tool_calls", "function_call",
	};
	struct smsg *m = arg;
	struct sstr v;
	size_t f;
	int kind, rc;

	for (f = 0; f < sizeof(names) / sizeof(names[0]); f++)
		if (key_is(k, names[f]))
			break;
	if (f == sizeof(names) / sizeof(names[0]))
		return scan_value(c);
	if (m->seen & (1u << f))
		return SCAN_NO;		/* jansson keeps the last one */
	m->seen |= 1u << f;
	if ((rc = scan_member(c, &v, &kind)) != 0)
		return rc;
	if (kind == V_NULL)
		return 0;
	switch (f) {
	case 0:				/* content: a string, or the full parse */
		if (kind != V_STRING)
			return SCAN_NO;
		m->t += sg_identity_text_tokens(v.dec);
		return 0;
	case 1:				/* name */
		if (kind == V_STRING && v.dec > 0)
			m->t += sg_identity_text_tokens(v.dec) + 1;
		return 0;
	case 5:				/* tool_calls, function_call: values */
	case 6:
		return SCAN_NO;
	default:
		if (kind == V_STRING)
			m->t += sg_identity_text_tokens(v.dec);
		return 0;
	}
}

static int
scan_messages(struct scan *c, uint64_t *t)
{
	struct smsg m;
	int rc;

	scan_ws(c);
	if (c->i >= c->n || c->s[c->i] != '[')
		return SCAN_NO;
	c->i++;
	scan_ws(c);
	if (c->i < c->n && c->s[c->i] == ']') {
		c->i++;
		return 0;
	}
	for (;;) {
		scan_ws(c);
		if (c->i < c->n && c->s[c->i] == '{') {
			m.t = 3 + 2;
			m.seen = 0;
			if ((rc = scan_object(c, msg_member, &m)) != 0)
				return rc;
			*t += m.t;
		} else if ((rc = scan_value(c)) != 0)
			return rc;	/* not an object: counts nothing */
		if ((rc = scan_next(c, ']')) != 0)
			return rc == 1 ? 0 : rc;
	}
}

/* stop: a string, or an array whose strings count. */
static int
scan_stop(struct scan *c, uint64_t *t)
{
	struct sstr v;
	int kind, rc;

	scan_ws(c);
	if (c->i >= c->n || c->s[c->i] != '[') {
		if ((rc = scan_member(c, &v, &kind)) != 0)
			return rc;
		if (kind == V_STRING)
			*t += sg_identity_text_tokens(v.dec);
		return 0;
	}
	if (++c->depth > SCAN_DEPTH_MAX)
		return SCAN_NO;
	c->i++;
	scan_ws(c);
	if (c->i < c->n && c->s[c->i] == ']') {
		c->i++;
		c->depth--;
		return 0;
	}
	for (;;) {
		if ((rc = scan_member(c, &v, &kind)) != 0)
			return rc;
		if (kind == V_STRING)
			*t += sg_identity_text_tokens(v.dec);
		if ((rc = scan_next(c, ']')) == 1)
			break;
		if (rc != 0)
			return rc;
	}
	c->depth--;
	return 0;
}

/* The top level of a chat completion body. */
struct sbody {
	uint64_t	 t;
	unsigned	 seen;
	struct sstr	 model, pck;
	bool		 has_model, has_pck, has_msgs;
};

enum {
	B_MODEL, B_PCK, B_MESSAGES, B_STOP, B_TOOLS, B_FUNCTIONS,
	B_RESPONSE_FORMAT, B_METADATA, B_TOOL_CHOICE, B_FUNCTION_CALL,
	B_USER, B_REASONING_FORMAT, B_REASONING_EFFORT, B_NFIELDS,
};

static int
body_member(struct scan *c, const struct sstr *k, void *arg)
{
	static const char *const names[B_NFIELDS] = {
		"model", "prompt_cache_key", "messages", "stop", "tools",
		"functions", "response_format", "metadata", "tool_choice",
		"function_call", "user", "reasoning_format",
		"reasoning_effort",
	};
	struct sbody *b = arg;
	struct sstr v;
	size_t f;
	int kind, rc;

	for (f = 0; f < B_NFIELDS; f++)
		if (key_is(k, names[f]))
			break;
	if (f == B_NFIELDS)
		return scan_value(c);
	if (b->seen & (1u << f))
		return SCAN_NO;
	b->seen |= 1u << f;
	if (f == B_MESSAGES) {
		b->has_msgs = true;
		return scan_messages(c, &b->t);
	}
	if (f == B_STOP)
		return scan_stop(c, &b->t);
	if ((rc = scan_member(c, &v, &kind)) != 0)
		return rc;
	switch (f) {
	case B_MODEL:
	case B_PCK:
		/* raw bytes are the value only without escapes */
		if (kind == V_NULL)
			return f == B_MODEL ? SCAN_NO : 0;
		if (kind != V_STRING || v.esc)
			return SCAN_NO;
		if (f == B_MODEL) {
			b->model = v;
			b->has_model = true;
		} else {
			b->pck = v;
			b->has_pck = true;
		}
		return 0;
	case B_TOOLS:
	case B_FUNCTIONS:
	case B_RESPONSE_FORMAT:
	case B_METADATA:
		return kind == V_NULL ? 0 : SCAN_NO;
	case B_TOOL_CHOICE:
	case B_FUNCTION_CALL:
		if (kind == V_OTHER)
			return SCAN_NO;
		/* FALLTHROUGH */
	default:
		if (kind == V_STRING)
			b->t += sg_identity_text_tokens(v.dec);
		return 0;
	}
}

int
sg_identity_parse_text(sg_identity *id, int endpoint, const char *body,
    size_t len, const sg_header *hdrs, size_t nhdrs,
    const char *bound_routing_key, sg_error *err)
{
	struct scan c = { body, len, 0, 0 };
	struct sbody b;
	sg_identity tmp;
	const char *hv = NULL;
	char *mid = NULL;
	size_t hlen = 0, i;
	int rc;

	if (id == NULL || body == NULL || (hdrs == NULL && nhdrs > 0) ||
	    sg_endpoint_name(endpoint) == NULL)
		return sg_seterr(err, SG_EINVAL,
		    "sg_identity_parse_text: bad arguments");
	if (endpoint != SG_ENDPOINT_CHAT)
		return SCAN_NO;
	memset(&b, 0, sizeof(b));
	scan_ws(&c);
	if (scan_object(&c, body_member, &b) != 0)
		return SCAN_NO;
	scan_ws(&c);
	if (c.i != c.n || !b.has_model || !b.has_msgs)
		return SCAN_NO;
	/* a payload session hashes jansson's encoding of the messages */
	if ((!b.has_pck || b.pck.raw == 0) &&
	    header_get(hdrs, nhdrs, "x-multi-turn-session-id") == NULL)
		return SCAN_NO;
	sg_identity_release(id);
	sg_identity_init(&tmp);
	tmp.endpoint = endpoint;
	if ((mid = strndup(b.model.p, b.model.raw)) == NULL) {
		rc = sg_seterr(err, SG_ENOMEM, "out of memory");
		goto out;
	}
	if ((rc = sg_identity_split_model(mid, bound_routing_key,
	    &tmp.routing_key, &tmp.model, err)) != 0)
		goto out;
	if ((rc = header_session(hdrs, nhdrs, &hv, &hlen, err)) != 0)
		goto out;
	if (b.has_pck && b.pck.raw > 0)
		rc = set_session(&tmp, SG_SOURCE_PROMPT_CACHE_KEY, b.pck.p,
		    b.pck.raw, hv, hlen, err);
	else if (hlen > 0)
		rc = set_session(&tmp, SG_SOURCE_NONE, NULL, 0, hv, hlen, err);
	else {
		rc = SCAN_NO;		/* a blank header: payload */
		goto out;
	}
	if (rc != 0)
		goto out;
	tmp.input_tokens = b.t;
	for (i = 0; i < sizeof(model_extras) / sizeof(model_extras[0]); i++)
		if (strcmp(tmp.model, model_extras[i].model) == 0)
			tmp.input_tokens += model_extras[i].extra;
	*id = tmp;
	free(mid);
	return 0;
out:
	free(mid);
	sg_identity_release(&tmp);
	return rc;
}
