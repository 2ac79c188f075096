/*
 * sg_identity.h — the gateway's view of an OpenAI-style request (sg-proxy(8)
 * gateway stage, stargate-headers(7)): who it is for (routing key and model
 * from the public model id "<routing_key>/<model>"), which chat session it
 * belongs to (session source, session id, cache affinity key), whether that
 * session may use the last-cluster store, and the input-token estimate.
 *
 * The same code serves sg-proxy's gateway stage and sg-classify, so the
 * operator tool shows exactly what the proxy would do.
 */
#ifndef SG_IDENTITY_H
#define SG_IDENTITY_H

#include <jansson.h>

#include "sg_common.h"

/* The endpoint a body was posted to; it decides which fields matter. */
enum sg_endpoint {
	SG_ENDPOINT_CHAT = 0,		/* /v1/chat/completions */
	SG_ENDPOINT_COMPLETIONS,	/* /v1/completions */
	SG_ENDPOINT_RESPONSES,		/* /v1/responses */
	SG_ENDPOINT_EMBEDDINGS,		/* /v1/embeddings */
};

/* Where the session id came from (stargate-headers(7)). */
enum sg_session_source {
	SG_SOURCE_NONE = 0,		/* no session (completions, embeddings) */
	SG_SOURCE_PROMPT_CACHE_KEY,	/* body "prompt_cache_key" */
	SG_SOURCE_CONVERSATION_ID,	/* Responses body "conversation" */
	SG_SOURCE_HEADER,		/* x-multi-turn-session-id */
	SG_SOURCE_PAYLOAD,		/* hash of the messages / input */
};

/* Longest session id accepted from a header or a body field, in bytes. */
#define SG_SESSION_ID_MAX	256
/* Cache affinity keys: "mt:v1:" + source + ":" + 64 hex digits. */
#define SG_AFFINITY_PREFIX	"mt:v1:"
#define SG_AFFINITY_KEY_MAX	96	/* bytes, with the NUL; ours are <= 79 */

/*
 * The identity of one request.  Plain data; the strings are owned by the
 * struct and freed by sg_identity_release().  Absent strings are NULL.
 */
typedef struct sg_identity {
	int		 endpoint;	/* enum sg_endpoint */
	char		*routing_key;	/* prefix of the model id (UUIDs canonical) */
	char		*model;		/* routed model: suffix of the model id */
	int		 source;	/* enum sg_session_source */
	char		*session_id;	/* raw id, or the payload key; NULL if none */
	char		*cache_affinity_key; /* "mt:v1:..." or NULL if no session */
	bool		 eligible;	/* may use the last-cluster store */
	uint64_t	 input_tokens;	/* stargate-headers(7) estimate */
} sg_identity;

void	sg_identity_init(sg_identity *id);	/* all absent */
void	sg_identity_release(sg_identity *id);	/* free owned strings, then init */

/*
 * Read the identity of an OpenAI request body (a JSON object) posted to
 * endpoint, with its request headers hdrs[0..nhdrs) (names compared without
 * case; the first occurrence wins).  bound_routing_key, when not NULL or
 * empty, is the routing key the caller has already bound to the request
 * (an API key's tenant): the model id must name the same key.
 *
 * Order (each failure is SG_EREQUEST with err->status 400, err->code
 * "invalid_request_error" and the message of stargate-headers(7)):
 *  1. the model id: "model is required", "model must be a string",
 *     "model prefix is required", "routing key is required before model",
 *     "model suffix is required after routing key",
 *     "model targets a different routing key";
 *  2. (chat and Responses) the x-multi-turn-session-id header, trimmed,
 *     always validated: "x-multi-turn-session-id is invalid: <reason>";
 *  3. (chat and Responses) the session source by precedence — Responses:
 *     prompt_cache_key > conversation id > header > payload; chat:
 *     prompt_cache_key > header > payload.  Body values are used raw and
 *     validated like the header: "session id from <source> is invalid:
 *     <reason>"; a prompt_cache_key that is not a string is
 *     "prompt_cache_key must be a string", a conversation that is neither
 *     a string nor an object is "conversation must be a string or an
 *     object with an id", a non-string conversation id is
 *     "conversation.id must be a string".  Completions and embeddings
 *     have no session: their headers and session fields are not read;
 *  4. the input-token estimate (never fails).
 * id is released first and filled only on success.  Returns 0, SG_EREQUEST,
 * SG_EINVAL (NULL arguments, unknown endpoint) or SG_ENOMEM.
 */
int	sg_identity_parse(sg_identity *id, int endpoint, const json_t *body,
	    const sg_header *hdrs, size_t nhdrs, const char *bound_routing_key,
	    sg_error *err);

/*
 * sg_identity_parse() over the body's text body[0..len), without building
 * a JSON tree: one pass that reads only what the identity needs (a 220 KiB
 * prompt costs a scan, not a parse).  It answers for the common case — a
 * chat completion whose messages have string contents, with a
 * prompt_cache_key or an x-multi-turn-session-id session — and returns
 * ENOTSUP (nothing set, no error text) for anything else: other
 * endpoints, values the estimate encodes (tools, tool_calls, content
 * parts, metadata, ...), escaped model ids or session ids, duplicate
 * members it reads, payload sessions, malformed or unusual JSON.  The
 * caller then parses the body and calls sg_identity_parse().  When it
 * answers, the result (identity, or error and message) is exactly
 * sg_identity_parse()'s for the same body.
 */
int	sg_identity_parse_text(sg_identity *id, int endpoint, const char *body,
	    size_t len, const sg_header *hdrs, size_t nhdrs,
	    const char *bound_routing_key, sg_error *err);

/*
 * Split a public model id at its first '/' into a routing key and a model
 * (both new strings the caller frees with free(3)); a 36-character routing
 * key that is a UUID comes back lower-cased.  bound_routing_key as above.
 * Errors: SG_EREQUEST with the 400 messages of step 1 (model_id NULL or ""
 * is "model is required"), SG_ENOMEM.
 */
int	sg_identity_split_model(const char *model_id,
	    const char *bound_routing_key, char **routing_key, char **model,
	    sg_error *err);

/*
 * Check a session id s[0..len): at most SG_SESSION_ID_MAX bytes and no byte
 * below 0x20 or equal to 0x7F.  Returns NULL when valid, else the reason
 * (static text, e.g. "exceeds 256 bytes").
 */
const char *sg_identity_session_check(const char *s, size_t len);

/*
 * Cache affinity key of data[0..len) under source src (stargate-headers(7)):
 * "mt:v1:" + src + ":" + lowercase hex SHA-256(data).  Writes at most outsz
 * bytes including the NUL.  Returns 0, or SG_ERANGE when out is too small
 * (SG_AFFINITY_KEY_MAX is enough for any src up to 16 bytes).
 */
int	sg_identity_affinity_key(char *out, size_t outsz, const char *src,
	    const void *data, size_t len);

/* True if s has the form "mt:v1:<x>:<64 hex digits>" (exactly four
 * colon-separated parts, x not empty, either hex case). */
bool	sg_identity_is_affinity_key(const char *s, size_t len);

/*
 * The stargate-headers(7) input-token estimate of a body for endpoint into
 * *out; model is the routed model (per-model extras) and may be NULL.  Fields
 * of the wrong type count nothing.  Returns 0, SG_EINVAL (unknown endpoint,
 * NULL body) or SG_ENOMEM (a Responses body is converted to the chat form).
 */
int	sg_identity_tokens(int endpoint, const json_t *body, const char *model,
	    uint64_t *out);

/* stargate-headers(7) text_tokens: 0 for "", else 5 + ceil(len / 4). */
uint64_t sg_identity_text_tokens(size_t len);

/*
 * Bytes of the compact JSON encoding of v as the reference gateway's
 * encoder writes it (HTML characters escaped, shortest float form); 4 for
 * null.  value_tokens(v) = 0 for NULL/null, else text_tokens(this).
 */
size_t	sg_identity_json_len(const json_t *v);

/* "chat", "completions", "responses", "embeddings"; NULL if unknown. */
const char *sg_endpoint_name(int endpoint);
/* Parse one of the names above; 0 or SG_EINVAL. */
int	sg_endpoint_parse(const char *name, int *endpoint);
/* "prompt_cache_key", "conversation_id", "header", "payload"; NULL for
 * SG_SOURCE_NONE. */
const char *sg_session_source_name(int source);

#endif /* SG_IDENTITY_H */
