/*
 * sg_gateway.h — the gateway's rules (sg-proxy(8) gateway stage,
 * stargate-headers(7)): from an OpenAI request's identity (sg_identity.h) to
 * the routing request the gateway sends the router as trusted headers, which
 * sessions may use the last-cluster store and under which key, which headers
 * are the gateway's own, and the optional-string rule every header value read
 * by Stargate follows.
 *
 * sg-proxy's gateway stage and sg-classify both call these functions, so
 * the operator tool shows exactly what the daemon sends.  Everything here
 * is built for an event loop: no function allocates, blocks or keeps state,
 * and every output has a fixed bound (sg_gateway_headers holds at most
 * SG_GATEWAY_MAX_HEADERS headers, pointing into the caller's strings and
 * its own small buffers).  sg_gateway_request() alone allocates, through
 * sg_request_from_header_list(), for callers that route in-process.
 */
#ifndef SG_GATEWAY_H
#define SG_GATEWAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sg_common.h"
#include "sg_identity.h"
#include "sg_request.h"
#include "sg_store.h"

/*
 * The optional-string rule of stargate-headers(7), the one rule for every
 * optional header value (x-request-id, x-model, x-routing-key,
 * x-cache-affinity-key, x-stargate-last-cluster-id): a value that does not
 * decode — not well-formed UTF-8, or holding a control character (a byte below
 * 0x20 other than HTAB, or 0x7f) — is absent; otherwise it is trimmed of white
 * space and a blank result is absent.  Never an error.  s may be NULL
 * (absent).  Returns true and sets *out, *out_len to the trimmed value
 * (inside s) when present; false otherwise (*out NULL, *out_len 0).
 */
bool	sg_optional_string(const char *s, size_t len, const char **out,
	    size_t *out_len);

/* True if s[0..len) decodes as a header value by the rule above (UTF-8,
 * no control character other than HTAB). */
bool	sg_header_value_decodable(const char *s, size_t len);

/*
 * True if the session of id may use the last-cluster store (stargate(7),
 * sg-lastcluster(1)): its source is prompt_cache_key, conversation_id or the
 * x-multi-turn-session-id header — never payload, whose key changes every
 * turn — and it has a model and a cache affinity key.
 */
bool	sg_gateway_store_eligible(const sg_identity *id);

/*
 * The store key of id's session (sg_lc_key over routing key, routed model
 * and cache affinity key; an absent routing key is "").  Returns 0, or
 * SG_ENOTFOUND when the session is not eligible (no key: no lookup and no
 * write).  No allocation.
 */
int	sg_gateway_store_key(const sg_identity *id,
	    char out[SG_LC_KEY_LEN + 1]);

/*
 * sg_gateway_store_key() as the key's digest (sg_lc_key_digest(): the 32
 * bytes the key's hex spells), for sg_store's _digest entry points.  Same
 * returns; no allocation.
 */
int	sg_gateway_store_digest(const sg_identity *id,
	    unsigned char out[SG_LC_DIGEST_LEN]);

/* What the gateway adds to an identity to route one request. */
typedef struct sg_gateway_route {
	const char	*request_id;	/* required: inbound X-Request-Id or new */
	const char	*routing_method; /* the model spec's; NULL: none */
	bool		 has_priority;	/* the API key's priority, if any */
	uint32_t	 priority;
	const char	*last_cluster_id; /* the store's hit; NULL: none */
} sg_gateway_route;

#define SG_GATEWAY_MAX_HEADERS	8

/*
 * The trusted headers of one routing request, in this order, each only
 * when it has a value: x-request-id, x-model, x-input-tokens,
 * x-routing-key, x-cache-affinity-key, x-routing-method, x-priority,
 * x-stargate-last-cluster-id.  Names are static strings; values point into
 * the identity, the route or the struct's own buffers, so the identity and
 * route must outlive the headers, and the struct must not be copied
 * while in use (h[] may point into it).
 */
typedef struct sg_gateway_headers {
	sg_header	 h[SG_GATEWAY_MAX_HEADERS];
	size_t		 n;
	char		 tokens[24];	/* x-input-tokens, decimal */
	char		 priority[12];	/* x-priority, decimal */
	char		 method[512];	/* x-routing-method, when trimmed */
	char		 hint[SG_ID_MAX + 1]; /* the hint, when trimmed */
} sg_gateway_headers;

/*
 * Build the trusted headers for id routed with rt.  Optional values
 * (routing method, last-cluster id) follow the optional-string rule and
 * are sent trimmed or not at all (nor when longer than their buffer: 511
 * bytes of method, SG_ID_MAX of cluster id); the last-cluster id is sent
 * only for a session eligible for the store (a hint is never sent for a
 * payload session or a request without one).  x-input-tokens is always
 * sent (the router requires it).  Errors: SG_EINVAL (NULL id or rt; a
 * request id that is blank, padded with white space or undecodable);
 * SG_EREQUEST with status 400 and class invalid_request_error when the
 * model is missing ("model is required") or the model or routing key
 * (both from the client's model id) is not a valid header value ("model
 * contains a control character or is not UTF-8").  out is emptied first.
 * No allocation.
 */
int	sg_gateway_build(sg_gateway_headers *out, const sg_identity *id,
	    const sg_gateway_route *rt, sg_error *err);

/*
 * The routing request the router reads from these headers: exactly
 * sg_request_from_header_list(r, h->h, h->n, err), so an in-process router
 * sees what a remote one would.  r is released first; strings are copied.
 */
int	sg_gateway_request(sg_request *r, const sg_gateway_headers *h,
	    sg_error *err);

/*
 * True if an inbound client header of this name is one the gateway owns
 * and deletes before forwarding (case-insensitive): x-model,
 * x-routing-key, x-routing-method, x-priority, x-input-tokens,
 * x-token-estimate, x-cache-affinity-key, x-elapsed-ms, and every
 * x-stargate-* header (x-stargate-last-cluster-id among them), whether
 * the last-cluster feature is on or off.  x-request-id and
 * x-multi-turn-session-id are the client's and pass.
 */
bool	sg_gateway_inbound_owned(const char *name);

/*
 * True if a response header of this name never reaches the client
 * (stargate-headers(7)): every x-stargate-* and x-inference-server-* header.
 */
bool	sg_gateway_response_stripped(const char *name);

#endif /* SG_GATEWAY_H */
