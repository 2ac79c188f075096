/*
 * sg_gateway.c — the gateway's rules (sg_gateway.h).
 *
 * The routing request leaves the gateway as header values, so everything
 * that goes into one is judged by the rule the router reads it with: the
 * optional-string rule decides what is sent (a hint or method that would
 * not decode is not sent at all, rather than sent and dropped on the other
 * side), and values the client controls (the routing key and model of the
 * public model id) are refused when they could not travel in a header.
 * The in-process path, sg_gateway_request(), parses the very headers a
 * remote router would receive, so the two paths cannot disagree.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "sg_gateway.h"

/* Bytes of one 8-byte word, one bit each where the byte may be a control
 * byte, DEL or non-ASCII (no false negatives; a hit is looked at again
 * byte by byte). */
#define ONES	0x0101010101010101ull
#define HIGHS	0x8080808080808080ull
static inline uint64_t
word_suspect(uint64_t w)
{
	uint64_t d = w ^ (0x7f * ONES);

	return (w | ((w - 0x20 * ONES) & ~w) | ((d - ONES) & ~d)) & HIGHS;
}

bool
sg_header_value_decodable(const char *s, size_t len)
{
	size_t i = 0;
	bool high = false;

	/* Plain ASCII words first: most values are tokens and ids. */
	for (; i + 8 <= len; i += 8) {
		uint64_t w;

		memcpy(&w, s + i, 8);
		if (word_suspect(w) != 0)
			break;
	}
	for (; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if ((c < 0x20 && c != '\t') || c == 0x7f)
			return false;
		if (c >= 0x80)
			high = true;
	}
	return !high || sg_utf8_valid(s, len);
}

bool
sg_optional_string(const char *s, size_t len, const char **out,
    size_t *out_len)
{
	*out = NULL;
	*out_len = 0;
	if (s == NULL || !sg_header_value_decodable(s, len))
		return false;
	sg_trim(&s, &len);
	if (len == 0)
		return false;
	*out = s;
	*out_len = len;
	return true;
}

bool
sg_gateway_store_eligible(const sg_identity *id)
{
	if (id == NULL || id->model == NULL || id->model[0] == '\0' ||
	    id->cache_affinity_key == NULL || id->cache_affinity_key[0] == '\0')
		return false;
	return id->source == SG_SOURCE_PROMPT_CACHE_KEY ||
	    id->source == SG_SOURCE_CONVERSATION_ID ||
	    id->source == SG_SOURCE_HEADER;
}

int
sg_gateway_store_key(const sg_identity *id, char out[SG_LC_KEY_LEN + 1])
{
	const char *rk;

	if (!sg_gateway_store_eligible(id))
		return SG_ENOTFOUND;
	rk = id->routing_key != NULL ? id->routing_key : "";
	return sg_lc_key(out, rk, strlen(rk), id->model, strlen(id->model),
	    id->cache_affinity_key, strlen(id->cache_affinity_key));
}

int
sg_gateway_store_digest(const sg_identity *id,
    unsigned char out[SG_LC_DIGEST_LEN])
{
	const char *rk;

	if (!sg_gateway_store_eligible(id))
		return SG_ENOTFOUND;
	rk = id->routing_key != NULL ? id->routing_key : "";
	return sg_lc_key_digest(out, rk, strlen(rk), id->model,
	    strlen(id->model), id->cache_affinity_key,
	    strlen(id->cache_affinity_key));
}

static void
add(sg_gateway_headers *out, const char *name, const char *value)
{
	out->h[out->n].name = name;
	out->h[out->n].value = value;
	out->n++;
}

/*
 * An optional value under the optional-string rule: sent trimmed, or not
 * at all.  A value with white space around it is not sent as it stands
 * (the header value must be the trimmed one), so it gets the spare
 * buffer of the struct; a value too long for it is not sent (no routing
 * method or cluster id is that long).
 */
static void
add_optional(sg_gateway_headers *out, const char *name, const char *v,
    char *spare, size_t sparesz)
{
	const char *t;
	size_t tlen;

	if (v == NULL || !sg_optional_string(v, strlen(v), &t, &tlen))
		return;
	if (t != v || tlen != strlen(v)) {
		if (tlen >= sparesz)
			return;		/* longer than any valid value */
		memcpy(spare, t, tlen);
		spare[tlen] = '\0';
		t = spare;
	}
	add(out, name, t);
}

/* A value from the client's model id must be a clean header value. */
static int
client_value(const char *what, const char *v, sg_error *err)
{
	size_t len = strlen(v);

	if (!sg_header_value_decodable(v, len))
		return sg_seterr_http(err, SG_EREQUEST, 400,
		    "invalid_request_error", "%s contains a control character "
		    "or is not UTF-8", what);
	return 0;
}

/* v in decimal into buf (NUL-terminated; cap holds any uint64_t): the
 * request path's numbers without printf. */
static void
u64_dec(char *buf, size_t cap, uint64_t v)
{
	char t[21];
	size_t n = 0, i;

	do
		t[n++] = (char)('0' + v % 10);
	while ((v /= 10) != 0);
	if (n >= cap)
		n = cap - 1;
	for (i = 0; i < n; i++)
		buf[i] = t[n - 1 - i];
	buf[n] = '\0';
}

int
sg_gateway_build(sg_gateway_headers *out, const sg_identity *id,
    const sg_gateway_route *rt, sg_error *err)
{
	const char *t;
	size_t tlen;
	int rc;

	if (out == NULL || id == NULL || rt == NULL)
		return sg_seterr(err, SG_EINVAL,
		    "no headers, identity or route");
	memset(out, 0, sizeof(*out));
	if (rt->request_id == NULL ||
	    !sg_optional_string(rt->request_id, strlen(rt->request_id), &t,
	    &tlen) || tlen != strlen(rt->request_id))
		return sg_seterr(err, SG_EINVAL, "request id is blank, padded "
		    "or not a valid header value");
	if (id->model == NULL || id->model[0] == '\0')
		return sg_seterr_http(err, SG_EREQUEST, 400,
		    "invalid_request_error", "model is required");
	if ((rc = client_value("model", id->model, err)) != 0 ||
	    (id->routing_key != NULL &&
	    (rc = client_value("routing key", id->routing_key, err)) != 0))
		return rc;
	u64_dec(out->tokens, sizeof(out->tokens), id->input_tokens);
	add(out, "x-request-id", rt->request_id);
	add(out, "x-model", id->model);
	add(out, "x-input-tokens", out->tokens);
	if (id->routing_key != NULL && id->routing_key[0] != '\0')
		add(out, "x-routing-key", id->routing_key);
	if (id->cache_affinity_key != NULL && id->cache_affinity_key[0] != '\0')
		add(out, "x-cache-affinity-key", id->cache_affinity_key);
	add_optional(out, "x-routing-method", rt->routing_method,
	    out->method, sizeof(out->method));
	if (rt->has_priority) {
		u64_dec(out->priority, sizeof(out->priority), rt->priority);
		add(out, "x-priority", out->priority);
	}
	if (sg_gateway_store_eligible(id))
		add_optional(out, "x-stargate-last-cluster-id",
		    rt->last_cluster_id, out->hint, sizeof(out->hint));
	return 0;
}

int
sg_gateway_request(sg_request *r, const sg_gateway_headers *h, sg_error *err)
{
	if (r == NULL || h == NULL)
		return sg_seterr(err, SG_EINVAL, "no request or headers");
	return sg_request_from_header_list(r, h->h, h->n, err);
}

#define LIT(s)	s, sizeof(s) - 1
static bool
has_prefix(const char *s, const char *p, size_t plen)
{
	return strncasecmp(s, p, plen) == 0;
}

/* Every name below starts "x-": anything else is decided by two bytes. */
static bool
x_dash(const char *name)
{
	return (name[0] == 'x' || name[0] == 'X') && name[1] == '-';
}

bool
sg_gateway_inbound_owned(const char *name)
{
	static const struct {
		const char	*s;
		size_t		 n;
	} owned[] = {
		{ LIT("x-model") }, { LIT("x-routing-key") },
		{ LIT("x-routing-method") }, { LIT("x-priority") },
		{ LIT("x-input-tokens") }, { LIT("x-token-estimate") },
		{ LIT("x-cache-affinity-key") }, { LIT("x-elapsed-ms") },
	};
	size_t i, len;

	if (name == NULL || !x_dash(name))
		return false;
	if (has_prefix(name, LIT("x-stargate-")))
		return true;
	len = strlen(name);
	for (i = 0; i < sizeof(owned) / sizeof(owned[0]); i++)
		if (owned[i].n == len && strncasecmp(name + 2, owned[i].s + 2,
		    len - 2) == 0)
			return true;
	return false;
}

bool
sg_gateway_response_stripped(const char *name)
{
	return name != NULL && x_dash(name) &&
	    (has_prefix(name, LIT("x-stargate-")) ||
	    has_prefix(name, LIT("x-inference-server-")));
}
