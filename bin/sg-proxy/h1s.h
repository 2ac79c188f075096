/*
 * h1s.h — sg-proxy's HTTP/1.1 server: the client side of the daemon, on
 * raw non-blocking sockets driven by the worker's libevent loop (the
 * server counterpart of h1.h).
 *
 * Why not evhttp: evhttp accepts obsolete line folding, truncates a field
 * at a NUL, reads chunk sizes with strtol (sign, spaces, "0x"), has one
 * idle timeout where a client that trickles a byte per interval is never
 * cut, and allocates a key/value pair per header and an evbuffer per
 * request.  h1s parses the head in place in the connection's read buffer,
 * rejects every ambiguous framing, bounds the head and body with absolute
 * deadlines, and allocates nothing per request in steady state.
 *
 * Objects:
 *   h1s_server  one per worker: the listening event, the connections, the
 *               limits, the callbacks;
 *   h1s_req     the request a connection is serving, from on_request (or
 *               on_error) until its on_complete or on_close callback has
 *               returned; one per connection at a time (a pipelined next
 *               request waits in the read buffer until this one is done).
 *
 * Callbacks run from the event loop only, never from inside an h1s_*
 * call.  A request handed to the application through on_request/on_error
 * stays valid until the server calls its on_close (the client is gone:
 * EOF, reset, send timeout) or its on_complete (the whole response was
 * written to the socket); the request is freed when that callback
 * returns.  Without an on_close callback, a request whose client left is
 * kept until the application ends its response (the h1s_reply* calls are
 * then no-ops that still complete it).
 *
 * Parsing rules (sg-proxy(8) LIMITS; anything else is 400 and the
 * connection closed after the answer):
 *   - request line "METHOD SP origin-form SP HTTP/1.x" (or "*" for
 *     OPTIONS); HTTP/1.0 and 1.1 answered as such, 1.2-1.9 as 1.1, any
 *     other major version 505; target longer than max_target 414;
 *   - lines end in CRLF or a bare LF; a bare CR, a NUL or any control byte
 *     but HTAB in the head, a line starting with SP/HTAB (obs-fold), a
 *     field name that is not a token or has space before the colon: 400;
 *   - more than max_headers fields or more than max_header_bytes of
 *     header block (the fields' lines, request line excluded): 431;
 *   - Content-Length: 1*DIGIT, at most once; Transfer-Encoding: exactly
 *     "chunked" (case-insensitive), at most once, never with
 *     Content-Length, never in HTTP/1.0: else 400;
 *   - chunk sizes 1*HEXDIG (no sign, space or "0x"; at most 16 digits),
 *     extensions after ";" tolerated within the line limit, each chunk's
 *     data followed by exactly CRLF, trailers read within the header
 *     limits and dropped: else 400; a body over max_body: 413;
 *   - "Expect: 100-continue" is answered with an interim 100 before the
 *     body is read (unless the head already fails); another expectation
 *     is 417.
 *
 * Timeouts are absolute deadlines, not idle timers: the head must be
 * complete within header_timeout_ms of its first byte (408, close), the
 * body within body_timeout_ms of the end of the head (408, close), a
 * keep-alive connection with no byte of a next request within
 * keepalive_timeout_ms is closed silently, and a response whose output
 * makes no progress for send_timeout_ms is abandoned (on_close).
 */
#ifndef SG_PROXY_H1S_H
#define SG_PROXY_H1S_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>

typedef struct h1s_server h1s_server;
typedef struct h1s_req h1s_req;

enum h1s_method {
	H1S_OTHER = 0,		/* a valid token the server does not know */
	H1S_GET,
	H1S_HEAD,
	H1S_POST,
	H1S_PUT,
	H1S_DELETE,
	H1S_OPTIONS,
	H1S_PATCH,
};

typedef struct h1s_limits {
	size_t		 max_target;		/* bytes, 414 beyond (8192) */
	size_t		 max_header_bytes;	/* header block, 431 beyond */
	size_t		 max_headers;		/* fields, 431 beyond */
	uint64_t	 max_body;		/* bytes (decoded), 413 beyond */
	uint64_t	 header_timeout_ms;	/* head deadline, 408 */
	uint64_t	 body_timeout_ms;	/* body deadline, 408 */
	uint64_t	 keepalive_timeout_ms;	/* idle between requests */
	uint64_t	 send_timeout_ms;	/* no output progress */
	size_t		 max_conns;		/* accept pauses at this many */
} h1s_limits;

/* Defaults: 8192, 64 KiB, 100, 64 MiB, 10 s, 10 s, 75 s, 60 s, 16384. */
void	h1s_limits_default(h1s_limits *l);

/* A request field, both strings NUL-terminated in place (the name as the
 * client spelled it, the value with surrounding whitespace removed). */
typedef struct h1s_header {
	const char	*name;
	const char	*value;
	size_t		 name_len;
	size_t		 value_len;
} h1s_header;

typedef struct h1s_cbs {
	/* A complete request (head and whole body). */
	void	(*on_request)(void *arg, h1s_req *r);
	/*
	 * The request failed to parse or time out: answer it with h1s_reply
	 * (the server adds Connection: close and closes after writing).  r's
	 * head accessors return what was parsed before the failure (possibly
	 * nothing: method H1S_OTHER, empty target, no headers).  status is
	 * 400, 408, 413, 414, 417, 431 or 505; code a stargate-headers(7)
	 * error class ("invalid_request", "request_timeout",
	 * "request_too_large", "uri_too_long", "expectation_failed",
	 * "request_header_fields_too_large", "http_version_not_supported");
	 * message a short English sentence naming the rule.
	 */
	void	(*on_error)(void *arg, h1s_req *r, int status,
		    const char *code, const char *message);
} h1s_cbs;

typedef struct h1s_stats {
	uint64_t	 accepted;		/* connections accepted */
	uint64_t	 requests;		/* requests handed over */
	uint64_t	 errors;		/* on_error calls */
	uint64_t	 timeouts;		/* 408s and send timeouts */
	size_t		 conns;			/* open connections now */
	size_t		 idle;			/* of which between requests */
} h1s_stats;

/*
 * A server on base accepting on listen_fd (non-blocking, already
 * listening; not owned: h1s never closes it, so several workers may share
 * it).  lim copied (NULL: defaults).  NULL: out of memory or a bad fd.
 */
h1s_server *h1s_server_new(struct event_base *base, int listen_fd,
	    const h1s_limits *lim, const h1s_cbs *cbs, void *arg);
/* Stop accepting; idle connections are closed now, busy ones after their
 * response (which gets Connection: close).  Idempotent. */
void	 h1s_server_drain(h1s_server *s);
/* Close every connection and free everything (no callback). */
void	 h1s_server_free(h1s_server *s);
void	 h1s_server_stats(const h1s_server *s, h1s_stats *st);
/* Serve an already connected socket as if accepted (tests, fuzzing); the
 * server owns fd from now on.  0 or an errno value. */
int	 h1s_server_adopt(h1s_server *s, int fd);

/* --- the request ------------------------------------------------------- */

enum h1s_method	 h1s_method(const h1s_req *r);
/* The method token as sent, NUL-terminated. */
const char	*h1s_method_str(const h1s_req *r);
/* The request target as sent ("/v1/x?y"), NUL-terminated; *len if not
 * NULL its length. */
const char	*h1s_target(const h1s_req *r, size_t *len);
/* The path part of the target (up to '?'), NUL-terminated copy held by
 * the request. */
const char	*h1s_path(const h1s_req *r);
/* 0 or 1 (HTTP/1.minor as answered). */
int		 h1s_minor(const h1s_req *r);
const h1s_header *h1s_headers(const h1s_req *r, size_t *n);
/* The first field named name (case-insensitive), NULL if none.  (Not
 * h1s_header: that name is the field type's.) */
const char	*h1s_find_header(const h1s_req *r, const char *name);
/* The decoded body, contiguous (NULL and 0 when empty); stays valid and
 * unchanged until the request is freed (the retry replay buffer). */
const char	*h1s_body(const h1s_req *r, size_t *len);
/* The peer's numeric address ("127.0.0.1", "::1"). */
const char	*h1s_peer(const h1s_req *r);
bool		 h1s_peer_loopback(const h1s_req *r);
/* Is the client gone (EOF or error seen) while the request is served? */
bool		 h1s_client_gone(const h1s_req *r);

/*
 * Lifecycle callbacks, each set at most once per request (a later call
 * replaces the earlier).  on_close: the client left before the response
 * was complete; on_complete: the response was written whole.  Exactly one
 * of them runs, once, and the request is freed when it returns.  A NULL
 * cb clears the callback.  When the client left and no on_close is set,
 * the request completes when the application ends its response, and
 * on_complete (if set) runs then.
 */
void	h1s_on_close(h1s_req *r, void (*cb)(h1s_req *, void *), void *arg);
void	h1s_on_complete(h1s_req *r, void (*cb)(h1s_req *, void *), void *arg);

/* --- the response ------------------------------------------------------ */

/*
 * Response fields, kept in the request (copied) until the head is sent.
 * The server writes Content-Length, Transfer-Encoding, Connection and Date
 * itself: the application never sets those (they are ignored).  0, or
 * ENOMEM / EINVAL (a name that is not a token, a value with CR or LF).
 */
int	h1s_add_header(h1s_req *r, const char *name, const char *value);
/* As h1s_add_header with lengths (not NUL-terminated). */
int	h1s_add_header_n(h1s_req *r, const char *name, size_t name_len,
	    const char *value, size_t value_len);
/* Remove every field named name (case-insensitive). */
void	h1s_del_header(h1s_req *r, const char *name);
void	h1s_clear_headers(h1s_req *r);
/* Close the connection after this response (Connection: close). */
void	h1s_set_close(h1s_req *r);

/* A whole response: status line (reason NULL: the standard phrase),
 * fields, Content-Length, body (not sent for HEAD).  Copies body. */
void	h1s_reply(h1s_req *r, int status, const char *reason,
	    const void *body, size_t len);

/*
 * A streamed response.  content_length >= 0: that many body bytes follow
 * (identity framing); -1: chunked for HTTP/1.1 clients, delimited by
 * closing the connection for HTTP/1.0 ones.  h1s_reply_chunk copies what
 * it is given and returns the bytes queued and not yet written to the
 * socket; above the application's high-water mark it should stop its
 * source and wait for on_drain.  h1s_reply_end finishes the response.
 */
void	h1s_reply_start(h1s_req *r, int status, const char *reason,
	    int64_t content_length);
size_t	h1s_reply_chunk(h1s_req *r, const void *p, size_t n);
void	h1s_reply_end(h1s_req *r);
/* Bytes queued and not yet written. */
size_t	h1s_unsent(const h1s_req *r);
/*
 * Close the connection now, leaving the response unfinished (a stream cut
 * short must not look whole to the client); what is queued is written
 * first as far as one non-blocking write takes it.  Neither on_close nor
 * on_complete runs; the request is freed from the loop, and r must not be
 * used after the call.
 */
void	h1s_abort(h1s_req *r);
/* cb runs once, from the loop, when every queued byte has been written
 * (unsent drops to 0), or soon when nothing is queued when it is set;
 * set again to wait again, NULL to clear. */
void	h1s_on_drain(h1s_req *r, void (*cb)(h1s_req *, void *), void *arg);

/* The standard reason phrase of status ("OK", "Bad Request", ...). */
const char *h1s_reason(int status);

#endif /* SG_PROXY_H1S_H */
