/*
 * sg_request.h — a routing request (sg-route(1), stargate-headers(7)).
 *
 * The struct holds borrowed pointers so that hot callers (the simulator, the
 * proxy) can fill it without allocating.  The parsers (JSON and header form)
 * copy what they read into storage owned by the request; sg_request_release()
 * frees that storage.  Absent strings are NULL (blank means absent).
 */
#ifndef SG_REQUEST_H
#define SG_REQUEST_H

#include <jansson.h>

#include "sg_common.h"

/* Session classification (stargate-lb-config(5)).  UNCLASSIFIED until the first
 * decision
 * that applies the last-cluster rules; then kept for the request's life. */
enum sg_session_state {
	SG_SESSION_UNCLASSIFIED = 0,
	SG_SESSION_NEW,
	SG_SESSION_RETURNING,
	SG_SESSION_STALE,
};

struct sg_request_store;

typedef struct sg_request {
	const char	*request_id;		/* seeds the PRNG with the lb seed */
	const char	*routing_key;		/* NULL = unscoped */
	const char	*model;
	const char	*cache_affinity_key;
	const char	*routing_method;	/* x-routing-method as received */
	bool		 routing_method_invalid; /* header not decodable (stargate-lb-config(5)) */
	const char	*last_cluster_id;	/* the hint (x-stargate-last-cluster-id) */
	/*
	 * strlen(last_cluster_id) when known, else 0: the parsers set it, so
	 * the router need not measure the hint per decision; a caller that
	 * points last_cluster_id elsewhere sets it too or leaves it 0 (the
	 * router then measures the string).
	 */
	size_t		 last_cluster_id_len;
	const char *const *excluded;		/* cluster ids excluded by earlier attempts */
	size_t		 nexcluded;
	uint64_t	 input_tokens;
	uint32_t	 priority;		/* lower = more urgent */
	bool		 has_slo;
	uint64_t	 request_slo_ms;
	bool		 has_max_wait;
	uint64_t	 max_wait_ms;		/* x-max-wait-ms (capped at 60000 when used) */
	double		 elapsed_ms;		/* "elapsed_ms" of the JSON form; 0 by default */
	/* Written by the router: */
	int		 session_state;		/* enum sg_session_state */
	bool		 session_promoted;
	/* Owned storage of parsed requests (NULL when the caller owns the strings). */
	struct sg_request_store *store;
} sg_request;

void	sg_request_init(sg_request *r);		/* all absent, state unclassified */
void	sg_request_release(sg_request *r);	/* free owned storage, then init */

/*
 * Parse the JSON form (sg-route(1)).  Strict: unknown fields and wrong types
 * are SG_EINVAL naming the field.  Blank strings are absent.  Required:
 * request_id, model, input_tokens.  r is released first.
 */
int	sg_request_from_json(sg_request *r, const json_t *obj, sg_error *err);

/*
 * sg_request_from_json() over the JSON text of the request object, without
 * building a tree: text[0..len) starts with the object (white space may
 * lead) and *used (when not NULL) gets the offset just past its closing
 * brace; what follows is the caller's.  One pass, for the common form:
 * member names without escapes, each known field once; strings (escapes
 * and UTF-8 as JSON has them); integers of at most 18 digits without sign
 * or leading zero; an elapsed_ms without exponent; an
 * excluded_cluster_ids array of strings.  For anything else it returns
 * ENOTSUP with r all absent and no error text: every object that
 * json_loadb(JSON_REJECT_DUPLICATES) or sg_request_from_json() refuses,
 * and some they accept (a repeated or escaped member name, a minus sign,
 * an exponent, a longer number...).  The caller then parses the text and
 * calls sg_request_from_json(), which decides and words the error.  When
 * it returns 0, r holds exactly what that parse gives.  SG_ENOMEM on an
 * allocation failure (err set).
 *
 * Unlike the other parsers it keeps r's storage for the next call (r is
 * emptied, not released, first), so a loop over requests allocates only
 * on its first call or a longer request; sg_request_release() frees it.
 */
int	sg_request_scan_json(sg_request *r, const char *text, size_t len,
	    size_t *used, sg_error *err);

/*
 * Parse a header list h[0..n) (sg_header of sg_common.h: NUL-terminated
 * name and raw value) by the rules of stargate-headers(7).  Names are matched
 * case-insensitively; a name that appears twice keeps
 * its first value, as an HTTP server's "get" does, except
 * x-stargate-excluded-cluster-ids, whose values accumulate.  Values lose the
 * optional white space (SP, HTAB) around them; then optional strings are
 * trimmed and blank or undecodable values (invalid UTF-8, a control byte
 * other than HTAB) are absent; numeric headers that are
 * present but not a base-10 unsigned integer of the target width are a
 * 400.  The order of validation is stargate-headers(7)'s, whatever the list
 * order. x-stargate-last-cluster-id uses the optional-string rule and is never
 * an error.  Unknown headers are ignored (they belong to the body's upstream).
 * On a request error returns SG_EREQUEST with err->status = 400 and a
 * message naming the header; SG_EINVAL for a NULL array with n > 0 or an
 * entry with a NULL name (a NULL value is an empty one).  Strings are
 * copied (h may be freed afterwards).  r is released first and left
 * released on failure.
 */
int	sg_request_from_header_list(sg_request *r, const sg_header *h,
	    size_t n, sg_error *err);

/*
 * Parse HTTP header lines ("name: value", CRLF or LF) by the rules of
 * sg_request_from_header_list.  Leading blank lines and a first
 * "METHOD target HTTP/x.y" line are skipped; the block ends at the first
 * blank line after it (a body is not read); any other line that is not
 * "name: value" is a 400 naming its line number.  A value holding a NUL
 * byte is undecodable (it cannot be valid text).
 */
int	sg_request_from_headers(sg_request *r, const char *text, size_t len,
	    sg_error *err);

/* The JSON form of r (new reference); absent fields are omitted. */
json_t	*sg_request_to_json(const sg_request *r);

/* True if id is in r->excluded. */
bool	sg_request_excludes(const sg_request *r, const char *id, size_t len);

const char *sg_session_state_name(int state);	/* "new", ...; NULL if unclassified */

#endif /* SG_REQUEST_H */
