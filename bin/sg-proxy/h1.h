/*
 * h1.h — a minimal HTTP/1.1 client for sg-proxy's upstream requests, on
 * raw non-blocking sockets driven by the worker's libevent loop.
 *
 * Objects:
 *   h1_pool      one per worker, bound to its event_base: free lists of
 *                connections and transfers, the upstreams;
 *   h1_upstream  one per upstream address (host:port, IPv4 or IPv6), with
 *                a bounded LIFO list of idle keep-alive connections;
 *   h1_xfer      one request/response exchange, from h1_start() until
 *                its on_done callback returns or h1_cancel().
 *
 * Life of a request: h1_start() takes the most recently idled connection
 * of the upstream and writes the request at once (one sendmsg), or opens a
 * new connection (non-blocking connect, TCP_NODELAY, connect timeout) and
 * writes as soon as the socket allows.  The response is parsed in place in
 * the connection's read buffer: on_headers once the header block is
 * complete (1xx responses skipped), on_data for each run of body bytes
 * (chunked framing removed), on_done once at the end.  A connection goes
 * back to its upstream's idle list only after a complete response with
 * keep-alive semantics and nothing unexpected after it.
 *
 * Callbacks run from the event loop only, never from inside h1_start(),
 * h1_cancel(), h1_pause() or h1_resume().  From any callback the caller
 * may call h1_cancel() on the transfer (on_headers / on_data), h1_pause(),
 * and h1_start() for new transfers.  The transfer is released before
 * on_done is called: its handle must not be used after that.
 *
 * Replays: a pooled connection the server closed while idle fails on the
 * first write or read.  When that happens before any response byte, the
 * request is sent again, once, on a fresh connection.  This is the usual
 * HTTP/1.1 client caveat: the server may have received and acted on the
 * first copy before closing (a POST is then executed twice); it is only
 * done when not a single response byte arrived, as browsers and nginx do.
 *
 * Not supported (not needed upstream of sg-proxy): TLS, proxies, request
 * pipelining, Expect: 100-continue, upgrades (a 101 is malformed), trailers
 * (parsed and dropped), obs-fold header lines (malformed).
 */
#ifndef SG_PROXY_H1_H
#define SG_PROXY_H1_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <event2/event.h>

typedef struct h1_pool h1_pool;
typedef struct h1_upstream h1_upstream;
typedef struct h1_xfer h1_xfer;

/* on_done codes. */
enum h1_err {
	H1_OK = 0,
	H1_ECONNREFUSED,	/* connect failed (refused, unreachable, no fd) */
	H1_ECONNTIMEDOUT,	/* connect timeout */
	H1_ERESET,		/* closed/reset before any response byte */
	H1_ETIMEDOUT,		/* no response byte for h1_req.timeout_ms */
	H1_EMALFORMED,		/* bad or oversized response framing */
	H1_ECLOSED,		/* closed/reset after response bytes */
};

/* on_headers answers. */
enum h1_verdict {
	H1_CONTINUE = 0,	/* deliver the body through on_data */
	H1_DISCARD,		/* end now (on_done(H1_OK) follows at once);
				 * the body is drained in the background when
				 * small enough to keep the connection */
	H1_ABORT,		/* close the connection; no further callback */
};

typedef struct h1_limits {
	size_t		 max_idle;		/* idle connections per upstream */
	uint64_t	 idle_timeout_ms;	/* an idle connection is closed */
	uint64_t	 connect_timeout_ms;	/* 0: none */
	size_t		 max_header_bytes;	/* status line + header block */
	size_t		 max_headers;		/* fields per response */
	size_t		 rbuf_size;		/* read buffer per connection */
	size_t		 drain_max;		/* H1_DISCARD: body bytes worth
						 * reading to keep the conn */
} h1_limits;

/* Defaults: 64 idle, 60 s, 5 s, 16 KiB, 100, 16 KiB, 64 KiB. */
void	h1_limits_default(h1_limits *l);

typedef struct h1_header {
	const char	*name;
	size_t		 name_len;
	const char	*value;			/* trimmed */
	size_t		 value_len;
} h1_header;

/* A response head, valid during on_headers only (points into the read
 * buffer; nothing is NUL-terminated). */
typedef struct h1_resp {
	int		 status;
	int		 minor;			/* HTTP/1.minor */
	const char	*reason;
	size_t		 reason_len;
	const h1_header	*headers;
	size_t		 nheaders;
	int64_t		 content_length;	/* -1: none (or chunked) */
	bool		 chunked;
	bool		 keep_alive;		/* connection reusable after it */
} h1_resp;

typedef struct h1_cbs {
	/* H1_CONTINUE, H1_DISCARD or H1_ABORT. */
	int	(*on_headers)(void *arg, const h1_resp *r);
	void	(*on_data)(void *arg, const char *p, size_t n);
	/* Exactly once unless cancelled/aborted; the transfer is gone. */
	void	(*on_done)(void *arg, int err);
} h1_cbs;

/*
 * A request.  Everything it points to must stay valid and unchanged until
 * on_done or h1_cancel() (a replay on a fresh connection sends it again).
 * h1 adds the Host, Content-Length (unless a GET or HEAD without a body)
 * and Connection: keep-alive fields; hdrs holds the caller's other fields
 * as complete "name: value\r\n" lines (none of those three).
 */
typedef struct h1_req {
	const char	*method;		/* "POST" */
	const char	*prefix;		/* path prefix ("" or "/base") */
	size_t		 prefix_len;
	const char	*target;		/* "/v1/x?y" (origin form) */
	size_t		 target_len;
	const char	*hdrs;
	size_t		 hdrs_len;
	const void	*body;
	size_t		 body_len;
	uint64_t	 timeout_ms;		/* response idle limit, 0: none */
} h1_req;

typedef struct h1_stats {
	uint64_t	 connects;		/* connections opened */
	uint64_t	 reuses;		/* requests on a pooled connection */
	uint64_t	 replays;		/* stale pooled connection replays */
	uint64_t	 pooled;		/* connections returned to a pool */
	uint64_t	 closed;		/* connections closed */
	size_t		 idle;			/* idle connections now */
	size_t		 live;			/* open connections now */
} h1_stats;

/* A pool for base (limits copied; NULL: defaults).  NULL: out of memory. */
h1_pool	*h1_pool_new(struct event_base *base, const h1_limits *lim);
/* Close every connection and free everything, transfers in flight
 * included (no callback). */
void	 h1_pool_free(h1_pool *p);
void	 h1_pool_stats(const h1_pool *p, h1_stats *st);

/*
 * The upstream of "http://host[:port][/path]" (the path is ignored: pass
 * it as h1_req.prefix, see h1_url_path) or "host:port"; one per address,
 * owned by the pool until h1_pool_free.  An IP literal ("[::1]" for IPv6)
 * is parsed; a host name is resolved here with getaddrinfo, which blocks:
 * call this when loading clusters, never per request.  0, or an errno
 * value (EINVAL: bad URL; ENOENT: name did not resolve; ENOMEM).
 */
int	 h1_upstream_get(h1_pool *p, const char *url, h1_upstream **out);
/* Is u the upstream of url (same host:port, as written)?  Cheap. */
bool	 h1_upstream_matches(const h1_upstream *u, const char *url);
/* "host:port" as sent in Host. */
const char *h1_upstream_authority(const h1_upstream *u);
/* The path part of an http:// URL ("" when none); *len its length. */
const char *h1_url_path(const char *url, size_t *len);

/*
 * Start a request on u; callbacks get arg.  NULL only when out of memory
 * (no callback then); connection failures arrive through on_done.
 */
h1_xfer	*h1_start(h1_pool *p, h1_upstream *u, const h1_req *r,
	    const h1_cbs *cbs, void *arg);
/* Stop the transfer without any callback; its connection is closed. */
void	 h1_cancel(h1_xfer *x);
/* Stop reading the upstream socket (the kernel keeps the bytes); no
 * on_data until h1_resume.  Idempotent. */
void	 h1_pause(h1_xfer *x);
/* Read again; buffered bytes are delivered from the loop, not from here. */
void	 h1_resume(h1_xfer *x);
/* True after any response byte arrived for this transfer. */
bool	 h1_got_bytes(const h1_xfer *x);
/* A short English text for an on_done code. */
const char *h1_strerror(int err);

#endif /* SG_PROXY_H1_H */
