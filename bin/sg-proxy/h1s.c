/*
 * h1s.c — sg-proxy's native HTTP/1.1 server (see h1s.h).
 *
 * Cost model (the server counterpart of h1.c): per keep-alive request in
 * the steady state one recv for the request (more only when it does not
 * fit the socket's first read), one sendmsg for a whole unary response
 * (status line, fields and body gathered; the body is written from the
 * caller's memory and copied only when the socket does not take it all),
 * no epoll_ctl (a connection's read event is added once, when it is
 * accepted, and stays registered; its write event is added only when a
 * write would block), no allocation (connections and their buffers come
 * from a free list and keep their buffers across requests), and no
 * callback from inside an h1s_* call (on_complete, on_close and on_drain
 * are deferred by activating an event of the connection's that is never
 * added, which runs in the same loop iteration).  libevent keeps one epoll
 * registration per descriptor for the read and write events.  A streamed
 * head waits for the first data (one sendmsg for both), or goes out from
 * that deferred event when none comes first.
 *
 * A connection is in one state:
 *   S_IDLE    no byte of a request yet (fresh: the header timeout bounds
 *             it; between requests: the keep-alive timeout), closed
 *             silently when its timer fires;
 *   S_HEAD    reading the head: parsed a line at a time as bytes arrive,
 *             in place (NUL-terminated in the read buffer), never
 *             rescanning what was parsed; absolute header deadline;
 *   S_BODY    reading the body; absolute body deadline;
 *   S_SERVE   the request is the application's (on_request or on_error)
 *             until on_complete or on_close has returned; the read event
 *             stays armed to notice the client leaving, and what arrives
 *             meanwhile (a pipelined request) waits in the free part of
 *             the buffer, which is never moved while the application
 *             holds pointers into it: a full buffer stops reading;
 *   S_LINGER  after an error answer: our side shut down, the client's
 *             input discarded for a while so that closing does not reset
 *             the answer away;
 *   S_DEAD    closed, waiting for the application to let go of the
 *             request (without an on_close callback the request lives
 *             until the application ends its response) and for the
 *             callbacks running on it to return.
 *
 * Buffers: the read buffer starts at RBUF_INIT and grows (by copying and
 * moving the parsed pointers) up to the head limit, max_target +
 * max_header_bytes + slack, while a head is read.  A Content-Length body
 * that fits the rest of the buffer is left there (no copy); a larger one
 * goes to the body buffer, received straight into it, which grows with
 * what has arrived (never to the announced length up front) and at most
 * to max_body.  Chunked bodies are decoded into the body buffer.  Output
 * not taken by the socket waits in the output buffer.  Buffers larger
 * than KEEP_MAX are freed when their request ends.
 *
 * Timers: one per connection, re-armed (never pushed back by input) at
 * each phase: the header deadline at a request's first byte, the body
 * deadline at the end of its head, the send timeout whenever output
 * blocks or makes progress, the keep-alive idle limit at the end of a
 * response.  The header and body deadlines are armed when the parse that
 * set them returns (tm_later, tm_flush), in the same callback: a request
 * that arrives whole in one read never arms them (two timer updates less
 * per request; the keep-alive timer is simply disarmed when it is served).
 */
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "h1lex.h"
#include "h1s.h"

#define RBUF_INIT	4096		/* a connection's first read buffer */
#define RLINE_SLACK	128		/* request line past its target */
#define HEAD_SLACK	4096		/* head buffer past the two limits */
#define CH_LINE_MAX	4096		/* chunk-size and trailer lines */
#define MAX_EMPTY	8		/* empty lines before a request line */
#define SERVE_ROOM	512		/* free buffer to notice EOF with */
#define BBUF_MIN	16384
#define OBUF_MIN	4096
#define KEEP_MAX	(256 * 1024)	/* larger buffers freed per request */
#define FREE_KEEP	256		/* closed connections kept for reuse */
#define NHDR_INIT	32
#define LINGER_MS	2000
#define ACCEPT_BATCH	32
#define EMFILE_MS	100		/* accept paused after EMFILE */
#define OUT_NIOV	4

enum cstate { S_FREE = 0, S_IDLE, S_HEAD, S_BODY, S_SERVE, S_LINGER,
	S_DEAD };

/* Body framing being read. */
enum bstate { B_NONE = 0, B_CL_R, B_CL_B, B_CH_SIZE, B_CH_DATA, B_CH_CRLF,
	B_TRAILER };

/* The response, as far as the application got with it. */
enum rphase { R_NONE = 0, R_STREAM, R_ENDED, R_DONE };

/* Deferred work for the write event's callback. */
#define PEND_COMPLETE	0x01
#define PEND_CLOSE	0x02
#define PEND_DRAIN	0x04
#define PEND_FLUSH	0x08		/* a streamed head waits for data */

typedef struct h1s_conn h1s_conn;
typedef void (*req_cb)(h1s_req *, void *);

struct h1s_req {
	h1s_conn	*c;
	enum h1s_method	 method;
	const char	*mstr;
	const char	*target;
	size_t		 target_len;
	const char	*path;
	int		 minor;
	const h1s_header *hdrs;
	size_t		 nhdrs;
	const char	*body;
	size_t		 body_len;
	req_cb		 close_cb, complete_cb, drain_cb;
	void		*close_arg, *complete_arg, *drain_arg;
};

struct h1s_conn {
	h1s_req		 req;
	h1s_server	*s;
	int		 fd;
	int		 state;
	unsigned	 busy;			/* our callbacks on it */
	unsigned	 pend;			/* PEND_* */
	bool		 held;			/* request handed over */
	bool		 rd_on;			/* ev_rd added */
	bool		 wwait;			/* ev_wr added: socket full */
	bool		 tm_on;			/* ev_tm added */
	bool		 tm_lazy;		/* tm_next to arm (tm_flush) */
	uint64_t	 tm_next;
	struct event	*ev_rd;			/* persistent EV_READ */
	struct event	*ev_wr;			/* EV_WRITE when blocked */
	struct event	*ev_df;			/* deferred work (activated) */
	struct event	*ev_tm;			/* the connection's timer */
	/* input: rbuf[0..rlen); parsed up to ppos, line search from scan */
	char		*rbuf;
	size_t		 rcap, rlen, ppos, scan;
	size_t		 hend;			/* end of the head */
	size_t		 rpos;			/* end of the request */
	int		 bs;			/* enum bstate */
	uint64_t	 clen, remain;
	size_t		 hbytes, tbytes, tfields;
	unsigned	 empties;
	bool		 have_rline, has_cl, has_te, expect100, expect_bad;
	bool		 tok_close, tok_ka, keep_alive;
	bool		 is_error, gone, peer_eof, close_after;
	char		*bbuf;
	size_t		 bcap, blen;
	h1s_header	*hdrs;
	size_t		 nhdr, hdrcap;
	char		*pathbuf;
	size_t		 pathcap;
	/* output: obuf[opos..olen) unsent */
	char		*obuf;
	size_t		 ocap, olen, opos;
	char		*rh;			/* application fields */
	size_t		 rhcap, rhlen;
	int		 phase;			/* enum rphase */
	int64_t		 oclen;			/* identity length, -1 */
	uint64_t	 obody;
	bool		 ochunked, nobody;
	/* peer */
	struct sockaddr_storage peer;
	socklen_t	 peerlen;
	char		 peerstr[INET6_ADDRSTRLEN + 8];
	h1s_conn	*next, *prev;		/* live, zombie or free list */
};

struct h1s_server {
	struct event_base	*base;
	int			 lfd;
	struct event		*ev_accept;
	struct event		*ev_retry;
	bool			 accepting, emfile, draining;
	h1s_limits		 lim;
	h1s_cbs			 cbs;
	void			*arg;
	size_t			 hcap;		/* head buffer limit */
	h1s_conn		*live;		/* open connections */
	h1s_conn		*zombies;	/* closed, request held */
	h1s_conn		*free_conns;
	size_t			 nfree;		/* on free_conns */
	h1s_stats		 st;
	time_t			 date_sec;
	char			 date[64];	/* "Date: ...\r\n" */
	size_t			 date_len;
};

static void	conn_on_read(evutil_socket_t, short, void *);
static void	conn_on_write(evutil_socket_t, short, void *);
static void	conn_on_timer(evutil_socket_t, short, void *);
static void	conn_on_defer(evutil_socket_t, short, void *);
static void	conn_close(h1s_conn *c);
static void	conn_gone(h1s_conn *c);
static bool	conn_parse(h1s_conn *c);
static void	next_request(h1s_conn *c);

void
h1s_limits_default(h1s_limits *l)
{
	l->max_target = 8192;
	l->max_header_bytes = 65536;
	l->max_headers = 100;
	l->max_body = 64u << 20;
	l->header_timeout_ms = 10000;
	l->body_timeout_ms = 10000;
	l->keepalive_timeout_ms = 75000;
	l->send_timeout_ms = 60000;
	l->max_conns = 16384;
}

const char *
h1s_reason(int status)
{
	switch (status) {
	case 100: return "Continue";
	case 101: return "Switching Protocols";
	case 200: return "OK";
	case 201: return "Created";
	case 202: return "Accepted";
	case 204: return "No Content";
	case 206: return "Partial Content";
	case 301: return "Moved Permanently";
	case 302: return "Found";
	case 304: return "Not Modified";
	case 307: return "Temporary Redirect";
	case 308: return "Permanent Redirect";
	case 400: return "Bad Request";
	case 401: return "Unauthorized";
	case 403: return "Forbidden";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 406: return "Not Acceptable";
	case 408: return "Request Timeout";
	case 409: return "Conflict";
	case 410: return "Gone";
	case 411: return "Length Required";
	case 413: return "Payload Too Large";
	case 414: return "URI Too Long";
	case 415: return "Unsupported Media Type";
	case 417: return "Expectation Failed";
	case 422: return "Unprocessable Content";
	case 429: return "Too Many Requests";
	case 431: return "Request Header Fields Too Large";
	case 499: return "Client Closed Request";
	case 500: return "Internal Server Error";
	case 501: return "Not Implemented";
	case 502: return "Bad Gateway";
	case 503: return "Service Unavailable";
	case 504: return "Gateway Timeout";
	case 505: return "HTTP Version Not Supported";
	case 529: return "Site Overloaded";
	default:
		if (status < 200)
			return "Informational";
		if (status < 300)
			return "OK";
		if (status < 400)
			return "Redirection";
		if (status < 500)
			return "Client Error";
		return "Server Error";
	}
}

/* Disarm the connection's timer (free when it is not armed: a streamed
 * reply disarms it after every write). */
static void
tm_off(h1s_conn *c)
{
	c->tm_lazy = false;
	if (c->tm_on) {
		c->tm_on = false;
		event_del(c->ev_tm);
	}
}

/* Arm the connection's timer ms from now (0: no limit, disarmed). */
static void
tm_arm(h1s_conn *c, uint64_t ms)
{
	struct timeval tv;

	if (ms == 0) {
		tm_off(c);
		return;
	}
	c->tm_lazy = false;
	h1_ms_tv(ms, &tv);
	c->tm_on = event_add(c->ev_tm, &tv) == 0;
}

/* tm_arm(c, ms) once the parse running now returns (tm_flush), unless
 * something arms or disarms the timer first (serving the request does). */
static void
tm_later(h1s_conn *c, uint64_t ms)
{
	c->tm_lazy = true;
	c->tm_next = ms;
}

static void
tm_flush(h1s_conn *c)
{
	if (c->tm_lazy && c->fd >= 0)
		tm_arm(c, c->tm_next);
	c->tm_lazy = false;
}

/* --- characters --------------------------------------------------------- */

/* A control byte other than HTAB (NUL, a bare CR, DEL...) in s[0..n)? */
static bool
has_ctl(const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i;

	for (i = 0; i < n; i++)
		if ((u[i] < 0x20 && u[i] != '\t') || u[i] == 0x7f)
			return true;
	return false;
}

static size_t
put_u64(char *b, uint64_t v)
{
	char t[24];
	size_t n = 0, i;

	do {
		t[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v > 0);
	for (i = 0; i < n; i++)
		b[i] = t[n - 1 - i];
	return n;
}

/* A chunk-size line, "<hex>\r\n", into b (at least 19 bytes). */
static size_t
put_chunk_size(char *b, uint64_t v)
{
	static const char hx[] = "0123456789abcdef";
	size_t n = 0, i;
	int sh = 60;

	while (sh > 0 && (v >> sh) == 0)
		sh -= 4;
	for (; sh >= 0; sh -= 4)
		b[n++] = hx[(v >> sh) & 0xf];
	for (i = 0; i < 2; i++)
		b[n++] = "\r\n"[i];
	return n;
}

/* --- lists and states --------------------------------------------------- */

static void
list_push(h1s_conn **head, h1s_conn *c)
{
	c->prev = NULL;
	c->next = *head;
	if (*head != NULL)
		(*head)->prev = c;
	*head = c;
}

static void
list_unlink(h1s_conn **head, h1s_conn *c)
{
	if (c->prev != NULL)
		c->prev->next = c->next;
	else
		*head = c->next;
	if (c->next != NULL)
		c->next->prev = c->prev;
	c->next = c->prev = NULL;
}

static void
set_state(h1s_conn *c, int st)
{
	if (c->state == S_IDLE)
		c->s->st.idle--;
	if (st == S_IDLE)
		c->s->st.idle++;
	c->state = st;
}

static void
accept_update(h1s_server *s)
{
	bool want = s->ev_accept != NULL && !s->draining && !s->emfile &&
	    (s->lim.max_conns == 0 || s->st.conns < s->lim.max_conns);

	if (want == s->accepting)
		return;
	if (want)
		event_add(s->ev_accept, NULL);
	else
		event_del(s->ev_accept);
	s->accepting = want;
}

/*
 * Run the deferred work f from the loop.  Its own event, never added:
 * event_add on an event that is active does not register it, so the
 * write event is not used for this.
 */
static void
defer(h1s_conn *c, unsigned f)
{
	c->pend |= f;
	event_active(c->ev_df, EV_TIMEOUT, 1);
}

static void
rd_start(h1s_conn *c)
{
	if (c->rd_on || c->fd < 0)
		return;
	if (event_add(c->ev_rd, NULL) == 0)
		c->rd_on = true;
}

static void
rd_stop(h1s_conn *c)
{
	if (!c->rd_on)
		return;
	event_del(c->ev_rd);
	c->rd_on = false;
}

/* --- buffers ------------------------------------------------------------ */

/*
 * Move the read buffer to one of cap bytes, with the parsed pointers
 * (method, target, path, fields, body) moved along.  False: no memory.
 */
static bool
rbuf_resize(h1s_conn *c, size_t cap)
{
	h1s_req *r = &c->req;
	char *n;
	uintptr_t lo = (uintptr_t)c->rbuf, hi = lo + c->rlen;
	size_t i;

	if (cap <= c->rcap)
		return true;
	if ((n = malloc(cap)) == NULL)
		return false;
	if (c->rlen > 0)
		memcpy(n, c->rbuf, c->rlen);
#define MOVE(p) do {							\
	if ((uintptr_t)(p) >= lo && (uintptr_t)(p) <= hi)		\
		(p) = n + ((uintptr_t)(p) - lo);			\
} while (0)
	MOVE(r->mstr);
	MOVE(r->target);
	MOVE(r->path);
	MOVE(r->body);
	for (i = 0; i < c->nhdr; i++) {
		MOVE(c->hdrs[i].name);
		MOVE(c->hdrs[i].value);
	}
#undef MOVE
	free(c->rbuf);
	c->rbuf = n;
	c->rcap = cap;
	return true;
}

/* Room for need bytes in the body buffer, growing geometrically up to
 * limit.  False: no memory. */
static bool
bbuf_reserve(h1s_conn *c, size_t need, uint64_t limit)
{
	size_t cap;
	char *n;

	if (need <= c->bcap)
		return true;
	cap = c->bcap * 2;
	if (cap < BBUF_MIN)
		cap = BBUF_MIN;
	if (cap < need)
		cap = need;
	if ((uint64_t)cap > limit && (uint64_t)need <= limit)
		cap = (size_t)limit;
	if ((n = realloc(c->bbuf, cap)) == NULL)
		return false;
	c->bbuf = n;
	c->bcap = cap;
	return true;
}

/* Room for n more bytes in the output buffer.  False: no memory. */
static bool
obuf_reserve(h1s_conn *c, size_t n)
{
	size_t cap;
	char *b;

	if (c->opos > 0 && c->ocap - c->olen < n) {
		memmove(c->obuf, c->obuf + c->opos, c->olen - c->opos);
		c->olen -= c->opos;
		c->opos = 0;
	}
	if (c->ocap - c->olen < n) {
		cap = c->ocap * 2;
		if (cap < OBUF_MIN)
			cap = OBUF_MIN;
		if (cap < c->olen + n)
			cap = c->olen + n;
		if ((b = realloc(c->obuf, cap)) == NULL)
			return false;
		c->obuf = b;
		c->ocap = cap;
	}
	return true;
}

/* Append to the output buffer.  False: no memory. */
static bool
out_append(h1s_conn *c, const void *p, size_t n)
{
	if (!obuf_reserve(c, n))
		return false;
	memcpy(c->obuf + c->olen, p, n);
	c->olen += n;
	return true;
}

/* --- connections -------------------------------------------------------- */

static void
conn_destroy(h1s_conn *c)
{
	if (c->ev_rd != NULL)
		event_free(c->ev_rd);
	if (c->ev_wr != NULL)
		event_free(c->ev_wr);
	if (c->ev_tm != NULL)
		event_free(c->ev_tm);
	if (c->ev_df != NULL)
		event_free(c->ev_df);
	if (c->fd >= 0)
		close(c->fd);
	free(c->rbuf);
	free(c->bbuf);
	free(c->hdrs);
	free(c->pathbuf);
	free(c->obuf);
	free(c->rh);
	free(c);
}

/* The request's state back to "nothing parsed, nothing answered". */
static void
req_reset(h1s_conn *c)
{
	h1s_req *r = &c->req;

	memset(r, 0, sizeof(*r));
	r->c = c;
	r->mstr = r->target = r->path = "";
	r->minor = 1;
	r->hdrs = c->hdrs;
	c->held = false;
	c->ppos = c->scan = c->hend = c->rpos = 0;
	c->bs = B_NONE;
	c->clen = c->remain = 0;
	c->hbytes = c->tbytes = c->tfields = 0;
	c->empties = 0;
	c->have_rline = c->has_cl = c->has_te = c->expect100 = false;
	c->expect_bad = c->tok_close = c->tok_ka = c->keep_alive = false;
	c->is_error = c->close_after = false;
	c->nhdr = 0;
	c->blen = 0;
	if (c->bcap > KEEP_MAX) {
		free(c->bbuf);
		c->bbuf = NULL;
		c->bcap = 0;
	}
	c->rhlen = 0;
	c->phase = R_NONE;
	c->oclen = -1;
	c->obody = 0;
	c->ochunked = c->nobody = false;
	if (c->opos == c->olen) {
		c->opos = c->olen = 0;
		if (c->ocap > KEEP_MAX) {
			free(c->obuf);
			c->obuf = NULL;
			c->ocap = 0;
		}
	}
}

/* To the free list, once closed, let go of and out of our callbacks. */
static void
conn_try_recycle(h1s_conn *c)
{
	h1s_server *s = c->s;

	if (c->state != S_DEAD || c->busy > 0 || c->held)
		return;
	list_unlink(&s->zombies, c);
	event_del(c->ev_df);		/* a queued activation, if any */
	c->pend = 0;
	if (c->rcap > RBUF_INIT) {
		free(c->rbuf);
		c->rbuf = NULL;
		c->rcap = 0;
	}
	/* A closed connection keeps no body or output buffer: FREE_KEEP
	 * spares with up to KEEP_MAX each would hold tens of MiB after a
	 * burst of large bodies (a live keep-alive connection does keep
	 * them, up to KEEP_MAX, between its requests). */
	free(c->bbuf);
	c->bbuf = NULL;
	c->bcap = c->blen = 0;
	free(c->obuf);
	c->obuf = NULL;
	c->ocap = c->opos = c->olen = 0;
	c->rlen = 0;
	/* A burst of connections (500 slow clients) is not kept for ever:
	 * past FREE_KEEP spare objects, a closed one is freed. */
	if (s->nfree >= FREE_KEEP) {
		conn_destroy(c);
		return;
	}
	c->state = S_FREE;
	list_push(&s->free_conns, c);
	s->nfree++;
}

static void
conn_unbusy(h1s_conn *c)
{
	if (--c->busy == 0)
		conn_try_recycle(c);
}

/* Close the socket; the object lives on while the request is held. */
static void
conn_close(h1s_conn *c)
{
	h1s_server *s = c->s;

	if (c->fd < 0)
		return;
	event_del(c->ev_rd);
	event_del(c->ev_wr);
	tm_off(c);
	close(c->fd);
	c->fd = -1;
	c->rd_on = c->wwait = false;
	set_state(c, S_DEAD);
	s->st.conns--;
	list_unlink(&s->live, c);
	list_push(&s->zombies, c);
	accept_update(s);
	conn_try_recycle(c);
}

/* A connection for fd (already non-blocking), or NULL: no memory. */
static h1s_conn *
conn_start(h1s_server *s, int fd, const struct sockaddr *sa, socklen_t len)
{
	h1s_conn *c = s->free_conns;

	if (c != NULL) {
		list_unlink(&s->free_conns, c);
		s->nfree--;
	} else {
		if ((c = calloc(1, sizeof(*c))) == NULL)
			return NULL;
		c->s = s;
		c->fd = -1;
		if ((c->ev_rd = event_new(s->base, -1, 0, conn_on_read, c)) ==
		    NULL ||
		    (c->ev_wr = event_new(s->base, -1, 0, conn_on_write, c)) ==
		    NULL ||
		    (c->ev_tm = evtimer_new(s->base, conn_on_timer, c)) ==
		    NULL ||
		    (c->ev_df = event_new(s->base, -1, 0, conn_on_defer, c)) ==
		    NULL) {
			conn_destroy(c);
			return NULL;
		}
	}
	if (c->rbuf == NULL) {
		if ((c->rbuf = malloc(RBUF_INIT)) == NULL) {
			list_push(&s->free_conns, c);
			s->nfree++;
			c->state = S_FREE;
			return NULL;
		}
		c->rcap = RBUF_INIT;
	}
	event_assign(c->ev_rd, s->base, fd, EV_READ | EV_PERSIST, conn_on_read,
	    c);
	event_assign(c->ev_wr, s->base, fd, EV_WRITE | EV_PERSIST,
	    conn_on_write, c);
	c->fd = fd;
	c->busy = 0;
	c->pend = 0;
	c->rlen = 0;
	c->opos = c->olen = 0;
	c->gone = c->peer_eof = false;
	c->rd_on = c->wwait = false;
	req_reset(c);
	memset(&c->peer, 0, sizeof(c->peer));
	c->peerlen = 0;
	if (sa != NULL && len > 0 && (size_t)len <= sizeof(c->peer)) {
		memcpy(&c->peer, sa, (size_t)len);
		c->peerlen = len;
	}
	c->peerstr[0] = '\0';
	c->state = S_FREE;
	set_state(c, S_IDLE);
	list_push(&s->live, c);
	s->st.conns++;
	s->st.accepted++;
	rd_start(c);
	tm_arm(c, s->lim.header_timeout_ms);
	accept_update(s);
	return c;
}

/* --- accepting ---------------------------------------------------------- */

static void
on_retry(evutil_socket_t fd, short what, void *arg)
{
	h1s_server *s = arg;

	(void)fd;
	(void)what;
	s->emfile = false;
	accept_update(s);
}

static void
on_accept(evutil_socket_t lfd, short what, void *arg)
{
	h1s_server *s = arg;
	struct sockaddr_storage ss;
	struct timeval tv;
	socklen_t len;
	int i, fd, one = 1;

	(void)what;
	for (i = 0; i < ACCEPT_BATCH && s->accepting; i++) {
		len = sizeof(ss);
		fd = accept4(lfd, (struct sockaddr *)&ss, &len,
		    SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED ||
			    errno == EPROTO || errno == EPERM)
				continue;
			if (errno == EMFILE || errno == ENFILE ||
			    errno == ENOBUFS || errno == ENOMEM) {
				/* not again until a descriptor may be free */
				s->emfile = true;
				accept_update(s);
				h1_ms_tv(EMFILE_MS, &tv);
				evtimer_add(s->ev_retry, &tv);
			}
			return;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (conn_start(s, fd, (struct sockaddr *)&ss, len) == NULL)
			close(fd);
	}
}

h1s_server *
h1s_server_new(struct event_base *base, int listen_fd, const h1s_limits *lim,
    const h1s_cbs *cbs, void *arg)
{
	h1s_server *s;

	if (base == NULL || listen_fd < 0 || fcntl(listen_fd, F_GETFL) < 0)
		return NULL;
	if ((s = calloc(1, sizeof(*s))) == NULL)
		return NULL;
	s->base = base;
	s->lfd = listen_fd;
	if (lim != NULL)
		s->lim = *lim;
	else
		h1s_limits_default(&s->lim);
	if (cbs != NULL)
		s->cbs = *cbs;
	s->arg = arg;
	if (s->lim.max_headers == 0)
		s->lim.max_headers = 1;
	s->hcap = s->lim.max_target + RLINE_SLACK + s->lim.max_header_bytes +
	    HEAD_SLACK;
	s->date_sec = (time_t)-1;
	if ((s->ev_accept = event_new(base, listen_fd, EV_READ | EV_PERSIST,
	    on_accept, s)) == NULL ||
	    (s->ev_retry = evtimer_new(base, on_retry, s)) == NULL) {
		h1s_server_free(s);
		return NULL;
	}
	accept_update(s);
	if (!s->accepting) {
		h1s_server_free(s);
		return NULL;
	}
	return s;
}

int
h1s_server_adopt(h1s_server *s, int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int fl, one = 1;

	if (fd < 0 || (fl = fcntl(fd, F_GETFL)) < 0)
		return EBADF;
	if (!(fl & O_NONBLOCK) && fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return errno;
	(void)fcntl(fd, F_SETFD, FD_CLOEXEC);
	if (getpeername(fd, (struct sockaddr *)&ss, &len) != 0)
		len = 0;
	if (len > 0 && (ss.ss_family == AF_INET || ss.ss_family == AF_INET6))
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (conn_start(s, fd, len > 0 ? (struct sockaddr *)&ss : NULL, len) ==
	    NULL)
		return ENOMEM;
	return 0;
}

void
h1s_server_drain(h1s_server *s)
{
	h1s_conn *c, *next;

	if (s->draining)
		return;
	s->draining = true;
	accept_update(s);
	event_del(s->ev_retry);
	for (c = s->live; c != NULL; c = next) {
		next = c->next;
		if (c->state == S_IDLE)
			conn_close(c);
		else
			c->close_after = true;
	}
}

void
h1s_server_free(h1s_server *s)
{
	h1s_conn *c;

	if (s == NULL)
		return;
	if (s->ev_accept != NULL)
		event_free(s->ev_accept);
	if (s->ev_retry != NULL)
		event_free(s->ev_retry);
	while ((c = s->live) != NULL) {
		list_unlink(&s->live, c);
		conn_destroy(c);
	}
	while ((c = s->zombies) != NULL) {
		list_unlink(&s->zombies, c);
		conn_destroy(c);
	}
	while ((c = s->free_conns) != NULL) {
		list_unlink(&s->free_conns, c);
		conn_destroy(c);
	}
	free(s);
}

void
h1s_server_stats(const h1s_server *s, h1s_stats *st)
{
	*st = s->st;
}

/* --- errors ------------------------------------------------------------- */

/* The server's own answer when the application has no on_error. */
static void
default_error(h1s_req *r, int status, const char *message)
{
	char b[256];
	int n = snprintf(b, sizeof(b), "%s\n", message);

	h1s_add_header(r, "Content-Type", "text/plain; charset=utf-8");
	h1s_reply(r, status, NULL, b, n > 0 && (size_t)n < sizeof(b) ?
	    (size_t)n : 0);
}

/*
 * The request failed: hand it to on_error with what was parsed; the
 * connection closes after the answer.  Returns -1 (for the parser).
 */
static int
fail(h1s_conn *c, int status, const char *code, const char *message)
{
	h1s_server *s = c->s;
	h1s_req *r = &c->req;

	c->is_error = true;
	c->close_after = true;
	c->held = true;
	r->hdrs = c->hdrs;
	r->nhdrs = c->nhdr;
	r->body = NULL;
	r->body_len = 0;
	set_state(c, S_SERVE);
	rd_stop(c);
	tm_arm(c, s->lim.send_timeout_ms);	/* bounds a missing answer */
	s->st.errors++;
	if (s->cbs.on_error != NULL)
		s->cbs.on_error(s->arg, r, status, code, message);
	else
		default_error(r, status, message);
	return -1;
}

static int
bad(h1s_conn *c, const char *message)
{
	return fail(c, 400, "invalid_request", message);
}

static int
too_large_head(h1s_conn *c, const char *message)
{
	return fail(c, 431, "request_header_fields_too_large", message);
}

/* --- the head ----------------------------------------------------------- */

static enum h1s_method
method_of(const char *m, size_t n)
{
	switch (n) {
	case 3:
		if (memcmp(m, "GET", 3) == 0)
			return H1S_GET;
		if (memcmp(m, "PUT", 3) == 0)
			return H1S_PUT;
		break;
	case 4:
		if (memcmp(m, "POST", 4) == 0)
			return H1S_POST;
		if (memcmp(m, "HEAD", 4) == 0)
			return H1S_HEAD;
		break;
	case 5:
		if (memcmp(m, "PATCH", 5) == 0)
			return H1S_PATCH;
		break;
	case 6:
		if (memcmp(m, "DELETE", 6) == 0)
			return H1S_DELETE;
		break;
	case 7:
		if (memcmp(m, "OPTIONS", 7) == 0)
			return H1S_OPTIONS;
		break;
	}
	return H1S_OTHER;
}

/* The path part of the target: the target itself, or a copy up to '?'. */
static int
set_path(h1s_conn *c, const char *t, size_t tl)
{
	const char *q = memchr(t, '?', tl);
	size_t n;
	char *b;

	if (q == NULL) {
		c->req.path = t;
		return 0;
	}
	n = (size_t)(q - t);
	if (n + 1 > c->pathcap) {
		if ((b = realloc(c->pathbuf, n + 1)) == NULL)
			return ENOMEM;
		c->pathbuf = b;
		c->pathcap = n + 1;
	}
	memcpy(c->pathbuf, t, n);
	c->pathbuf[n] = '\0';
	c->req.path = c->pathbuf;
	return 0;
}

/* "METHOD SP target SP HTTP/1.x" at s[0..n) (no line end). */
static int
request_line(h1s_conn *c, char *s, size_t n)
{
	h1s_req *r = &c->req;
	char *sp1 = memchr(s, ' ', n), *t, *sp2, *v;
	size_t ml, tl, vl;

	if (sp1 == NULL || sp1 == s || !h1_is_token(s, (size_t)(sp1 - s)))
		return bad(c, "malformed request line");
	ml = (size_t)(sp1 - s);
	t = sp1 + 1;
	if ((sp2 = memchr(t, ' ', (size_t)(s + n - t))) == NULL)
		return bad(c, "malformed request line");
	tl = (size_t)(sp2 - t);
	*sp1 = '\0';
	r->mstr = s;
	r->method = method_of(s, ml);
	if (tl > c->s->lim.max_target)
		return fail(c, 414, "uri_too_long",
		    "the request target is longer than the limit");
	v = sp2 + 1;
	vl = (size_t)(s + n - v);
	if (vl != 8 || memcmp(v, "HTTP/", 5) != 0 || v[5] < '0' ||
	    v[5] > '9' || v[6] != '.' || v[7] < '0' || v[7] > '9')
		return bad(c, "malformed request line");
	if (v[5] != '1')
		return fail(c, 505, "http_version_not_supported",
		    "only HTTP/1.0 and HTTP/1.1 are served");
	r->minor = v[7] == '0' ? 0 : 1;
	if (tl == 0 || memchr(t, '\t', tl) != NULL)
		return bad(c, "malformed request target");
	if (t[0] != '/' && !(tl == 1 && t[0] == '*' &&
	    r->method == H1S_OPTIONS))
		return bad(c, "the request target is not in origin form");
	*sp2 = '\0';
	r->target = t;
	r->target_len = tl;
	if (set_path(c, t, tl) != 0)
		return fail(c, 431, "request_header_fields_too_large",
		    "out of memory for the request target");
	c->have_rline = true;
	return 0;
}

/* A field that frames the request or the connection. */
static int
known_field(h1s_conn *c, const char *name, size_t nl, const char *v,
    size_t vl)
{
	uint64_t x = 0;
	size_t i;

	switch (nl) {
	case 14:
		if (strncasecmp(name, "content-length", 14) != 0)
			return 0;
		if (c->has_cl)
			return bad(c, "more than one Content-Length");
		if (c->has_te)
			return bad(c,
			    "Content-Length beside Transfer-Encoding");
		if (vl == 0)
			return bad(c, "malformed Content-Length");
		for (i = 0; i < vl; i++) {
			if (v[i] < '0' || v[i] > '9')
				return bad(c, "malformed Content-Length");
			if (x > (UINT64_MAX - 9) / 10)
				x = UINT64_MAX;		/* over any limit */
			else
				x = x * 10 + (uint64_t)(v[i] - '0');
		}
		c->has_cl = true;
		c->clen = x;
		return 0;
	case 17:
		if (strncasecmp(name, "transfer-encoding", 17) != 0)
			return 0;
		if (c->req.minor == 0)
			return bad(c,
			    "Transfer-Encoding in an HTTP/1.0 request");
		if (c->has_te)
			return bad(c, "more than one Transfer-Encoding");
		if (c->has_cl)
			return bad(c,
			    "Transfer-Encoding beside Content-Length");
		if (!h1_ieq(v, vl, "chunked", 7))
			return bad(c, "Transfer-Encoding other than chunked");
		c->has_te = true;
		return 0;
	case 10:
		if (strncasecmp(name, "connection", 10) != 0)
			return 0;
		if (h1_has_token(v, vl, "close", 5))
			c->tok_close = true;
		if (h1_has_token(v, vl, "keep-alive", 10))
			c->tok_ka = true;
		return 0;
	case 6:
		if (strncasecmp(name, "expect", 6) != 0)
			return 0;
		if (h1_ieq(v, vl, "100-continue", 12))
			c->expect100 = true;
		else
			c->expect_bad = true;
		return 0;
	default:
		return 0;
	}
}

/* Check a field line s[0..n) (no line end); *nl its name's length, v/vl
 * its trimmed value.  0, or an error message. */
static const char *
split_field(char *s, size_t n, size_t *nl, char **v, size_t *vl)
{
	char *colon;
	const char *vs;
	size_t l;

	if (s[0] == ' ' || s[0] == '\t')
		return "obsolete line folding";
	if ((colon = memchr(s, ':', n)) == NULL)
		return "a header line without a colon";
	*nl = (size_t)(colon - s);
	if (!h1_is_token(s, *nl))
		return "malformed header field name";
	vs = colon + 1;
	l = n - *nl - 1;
	h1_trim_ows(&vs, &l);
	*v = (char *)(uintptr_t)vs;
	*vl = l;
	return NULL;
}

static int
field_line(h1s_conn *c, char *s, size_t n)
{
	const h1s_limits *l = &c->s->lim;
	const char *msg;
	h1s_header *h;
	size_t nl, vl;
	char *v;

	if ((msg = split_field(s, n, &nl, &v, &vl)) != NULL)
		return bad(c, msg);
	c->hbytes += nl + vl + 4;
	if (c->hbytes > l->max_header_bytes)
		return too_large_head(c,
		    "the request header block exceeds the limit");
	if (c->nhdr >= l->max_headers)
		return too_large_head(c, "too many request headers");
	if (c->nhdr == c->hdrcap) {
		size_t cap = c->hdrcap == 0 ? NHDR_INIT : c->hdrcap * 2;

		if (cap > l->max_headers)
			cap = l->max_headers;
		if ((h = realloc(c->hdrs, cap * sizeof(*h))) == NULL)
			return too_large_head(c,
			    "out of memory for the request headers");
		c->hdrs = h;
		c->hdrcap = cap;
		c->req.hdrs = h;
	}
	s[nl] = '\0';
	v[vl] = '\0';
	h = &c->hdrs[c->nhdr++];
	h->name = s;
	h->name_len = nl;
	h->value = v;
	h->value_len = vl;
	return known_field(c, s, nl, v, vl);
}

/* The line at ppos is not complete yet: is it already past a limit? */
static int
head_partial(h1s_conn *c)
{
	const h1s_limits *l = &c->s->lim;
	const char *s = c->rbuf + c->ppos, *sp, *sp2;
	size_t n = c->rlen - c->ppos;

	if (!c->have_rline) {
		if (n <= l->max_target + RLINE_SLACK)
			return 0;
		if ((sp = memchr(s, ' ', n)) == NULL)
			return bad(c, "malformed request line");
		sp++;
		sp2 = memchr(sp, ' ', (size_t)(s + n - sp));
		if ((size_t)((sp2 != NULL ? sp2 : s + n) - sp) > l->max_target)
			return fail(c, 414, "uri_too_long",
			    "the request target is longer than the limit");
		return bad(c, "malformed request line");
	}
	if (c->hbytes + n > l->max_header_bytes + RLINE_SLACK ||
	    c->rlen >= c->s->hcap)
		return too_large_head(c,
		    "the request header block exceeds the limit");
	return 0;
}

/* Parse the head's complete lines.  1: head complete (hend set), 0: need
 * more, -1: failed (answered). */
static int
head_parse(h1s_conn *c)
{
	for (;;) {
		char *s = c->rbuf + c->ppos, *nl;
		size_t n;

		nl = memchr(c->rbuf + c->scan, '\n', c->rlen - c->scan);
		if (nl == NULL) {
			c->scan = c->rlen;
			return head_partial(c);
		}
		n = (size_t)(nl - s);
		c->ppos = c->scan = (size_t)(nl + 1 - c->rbuf);
		if (n > 0 && s[n - 1] == '\r')
			n--;
		if (has_ctl(s, n))
			return bad(c, "a control character (NUL, bare CR) in "
			    "the request head");
		if (!c->have_rline) {
			if (n == 0) {
				if (++c->empties > MAX_EMPTY)
					return bad(c, "malformed request line");
				continue;
			}
			if (request_line(c, s, n) != 0)
				return -1;
			continue;
		}
		if (n == 0) {
			c->hend = c->ppos;
			return 1;
		}
		if (field_line(c, s, n) != 0)
			return -1;
	}
}

/* --- the body ----------------------------------------------------------- */

static bool	out_write(h1s_conn *c, const struct iovec *x, int nx);
static void	serve(h1s_conn *c);

/* The head is complete: check it, choose the body's framing. */
static bool
head_done(h1s_conn *c)
{
	h1s_server *s = c->s;
	h1s_req *r = &c->req;
	size_t avail;

	r->hdrs = c->hdrs;
	r->nhdrs = c->nhdr;
	if (c->expect_bad) {
		fail(c, 417, "expectation_failed",
		    "the only expectation served is 100-continue");
		return false;
	}
	c->keep_alive = r->minor == 1 ? !c->tok_close :
	    (c->tok_ka && !c->tok_close);
	if (c->has_cl && c->clen > s->lim.max_body) {
		fail(c, 413, "request_too_large",
		    "the request body exceeds the limit");
		return false;
	}
	avail = c->rlen - c->hend;
	if (c->has_te) {
		if (c->rcap - c->hend < 2 * CH_LINE_MAX &&
		    !rbuf_resize(c, c->hend + 2 * CH_LINE_MAX)) {
			fail(c, 413, "request_too_large",
			    "out of memory for the request body");
			return false;
		}
		c->bs = B_CH_SIZE;
		c->ppos = c->scan = c->hend;
	} else if (c->has_cl && c->clen > 0) {
		if (c->hend + c->clen <= c->rcap)
			c->bs = B_CL_R;
		else {
			size_t want = avail * 2 > BBUF_MIN ? avail * 2 :
			    BBUF_MIN;

			if (!bbuf_reserve(c, want, c->clen)) {
				fail(c, 413, "request_too_large",
				    "out of memory for the request body");
				return false;
			}
			memcpy(c->bbuf, c->rbuf + c->hend, avail);
			c->blen = avail;
			c->rlen = c->hend;
			c->bs = B_CL_B;
		}
	} else {
		c->rpos = c->hend;
		serve(c);
		return false;
	}
	set_state(c, S_BODY);
	tm_later(c, s->lim.body_timeout_ms);
	if (c->expect100 && r->minor == 1 &&
	    !(c->bs == B_CL_R && avail >= c->clen) &&
	    !(c->bs == B_CL_B && c->blen >= c->clen)) {
		static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
		struct iovec v = { (void *)(uintptr_t)cont, sizeof(cont) - 1 };

		if (!out_write(c, &v, 1))
			return false;
	}
	return true;
}

/* A chunk-size line s[0..n) (no line end): 1*16HEXDIG [BWS ";" ext]. */
static int
chunk_size(h1s_conn *c, const char *s, size_t n)
{
	uint64_t v = 0;
	size_t i, j;
	int d;

	if (has_ctl(s, n))
		return bad(c, "a control character in a chunk-size line");
	for (i = 0; i < n && (d = h1_hexval(s[i])) >= 0; i++) {
		if (i >= 16)
			return bad(c, "malformed chunk size");
		v = v * 16 + (uint64_t)d;
	}
	if (i == 0)
		return bad(c, "malformed chunk size");
	for (j = i; j < n && (s[j] == ' ' || s[j] == '\t'); j++)
		;
	if (j < n ? s[j] != ';' : j != i)
		return bad(c, "malformed chunk size");
	if (v == 0) {
		c->bs = B_TRAILER;
		return 0;
	}
	if (v > c->s->lim.max_body || c->blen + v > c->s->lim.max_body)
		return fail(c, 413, "request_too_large",
		    "the request body exceeds the limit");
	c->remain = v;
	c->bs = B_CH_DATA;
	return 0;
}

/* A trailer line (checked as a field, counted, dropped). */
static int
trailer_line(h1s_conn *c, char *s, size_t n)
{
	const h1s_limits *l = &c->s->lim;
	const char *msg;
	size_t nl, vl;
	char *v;

	if (has_ctl(s, n))
		return bad(c, "a control character in a trailer field");
	if ((msg = split_field(s, n, &nl, &v, &vl)) != NULL)
		return bad(c, msg);
	c->tbytes += nl + vl + 4;
	if (++c->tfields > l->max_headers || c->tbytes > l->max_header_bytes)
		return too_large_head(c, "the trailer fields exceed the limit");
	return 0;
}

/* Decode the chunked body buffered at ppos.  1: need more, 0: complete
 * or failed. */
static int
chunked_parse(h1s_conn *c)
{
	for (;;) {
		char *s = c->rbuf + c->ppos, *nl;
		size_t avail = c->rlen - c->ppos, n;

		switch (c->bs) {
		case B_CH_SIZE:
		case B_TRAILER:
			nl = memchr(c->rbuf + c->scan, '\n',
			    c->rlen - c->scan);
			if (nl == NULL) {
				c->scan = c->rlen;
				if (avail > CH_LINE_MAX) {
					bad(c, "a chunk-size or trailer line "
					    "is too long");
					return 0;
				}
				return 1;
			}
			n = (size_t)(nl - s);
			c->ppos = c->scan = (size_t)(nl + 1 - c->rbuf);
			if (n > 0 && s[n - 1] == '\r')
				n--;
			if (c->bs == B_CH_SIZE) {
				if (chunk_size(c, s, n) != 0)
					return 0;
			} else if (n == 0) {
				c->rpos = c->ppos;
				c->req.body = c->bbuf;
				c->req.body_len = c->blen;
				serve(c);
				return 0;
			} else if (trailer_line(c, s, n) != 0)
				return 0;
			break;
		case B_CH_DATA:
			if (avail == 0)
				return 1;
			n = avail < c->remain ? avail : (size_t)c->remain;
			if (!bbuf_reserve(c, c->blen + n, c->s->lim.max_body)) {
				fail(c, 413, "request_too_large",
				    "out of memory for the request body");
				return 0;
			}
			memcpy(c->bbuf + c->blen, s, n);
			c->blen += n;
			c->ppos += n;
			c->scan = c->ppos;
			c->remain -= n;
			if (c->remain == 0)
				c->bs = B_CH_CRLF;
			break;
		case B_CH_CRLF:
			if (avail < 2) {
				if (avail == 1 && s[0] != '\r') {
					bad(c, "chunk data not followed by "
					    "CRLF");
					return 0;
				}
				return 1;
			}
			if (s[0] != '\r' || s[1] != '\n') {
				bad(c, "chunk data not followed by CRLF");
				return 0;
			}
			c->ppos += 2;
			c->scan = c->ppos;
			c->bs = B_CH_SIZE;
			break;
		default:
			return 0;
		}
	}
}

/* Parse the body.  True: need more input. */
static bool
body_parse(h1s_conn *c)
{
	h1s_req *r = &c->req;

	switch (c->bs) {
	case B_CL_R:
		if (c->rlen - c->hend < c->clen)
			return true;
		r->body = c->rbuf + c->hend;
		r->body_len = (size_t)c->clen;
		c->rpos = c->hend + (size_t)c->clen;
		serve(c);
		return false;
	case B_CL_B:
		if (c->blen < c->clen)
			return true;
		r->body = c->bbuf;
		r->body_len = c->blen;
		c->rpos = c->rlen;
		serve(c);
		return false;
	default:
		if (chunked_parse(c) == 0)
			return false;
		if (c->ppos == c->rlen)		/* nothing half-parsed */
			c->ppos = c->scan = c->rlen = c->hend;
		return true;
	}
}

/* The request is complete: hand it to the application. */
static void
serve(h1s_conn *c)
{
	h1s_server *s = c->s;
	h1s_req *r = &c->req;

	c->held = true;
	r->hdrs = c->hdrs;
	r->nhdrs = c->nhdr;
	if (s->draining)
		c->close_after = true;
	set_state(c, S_SERVE);
	tm_off(c);
	/* room to notice the client leaving while it is served */
	if (c->rcap - c->rlen < SERVE_ROOM && c->rcap < s->hcap)
		(void)rbuf_resize(c, c->rcap + SERVE_ROOM * 2);
	s->st.requests++;
	if (s->cbs.on_request != NULL)
		s->cbs.on_request(s->arg, r);
	else
		h1s_reply(r, 404, NULL, NULL, 0);
}

/* Where the next recv goes: *dst, *space; *direct when into the body
 * buffer.  False: nothing to read into now (reading stopped, or the
 * connection failed). */
static bool
in_space(h1s_conn *c, char **dst, size_t *space, bool *direct)
{
	h1s_server *s = c->s;

	*direct = false;
	switch (c->state) {
	case S_IDLE:
	case S_HEAD:
		if (c->rlen == c->rcap) {
			size_t cap = c->rcap * 2;

			if (cap > s->hcap)
				cap = s->hcap;
			if (cap <= c->rcap || !rbuf_resize(c, cap)) {
				too_large_head(c, "the request header block "
				    "exceeds the limit");
				return false;
			}
		}
		break;
	case S_BODY:
		if (c->bs == B_CL_B || (c->bs == B_CH_DATA &&
		    c->ppos == c->rlen && c->remain >= 1024)) {
			uint64_t left = c->bs == B_CL_B ? c->clen - c->blen :
			    c->remain;
			uint64_t lim = c->bs == B_CL_B ? c->clen :
			    s->lim.max_body;

			if (c->blen == c->bcap &&
			    !bbuf_reserve(c, c->bcap + 1, lim)) {
				fail(c, 413, "request_too_large",
				    "out of memory for the request body");
				return false;
			}
			*dst = c->bbuf + c->blen;
			*space = c->bcap - c->blen;
			if ((uint64_t)*space > left)
				*space = (size_t)left;
			*direct = true;
			return true;
		}
		if (c->rlen == c->rcap && c->bs != B_CL_R) {
			size_t keep = c->rlen - c->ppos;

			memmove(c->rbuf + c->hend, c->rbuf + c->ppos, keep);
			c->scan -= c->ppos - c->hend;
			c->ppos = c->hend;
			c->rlen = c->hend + keep;
		}
		break;
	case S_SERVE:
		if (c->rlen == c->rcap) {	/* a pipelined request waits */
			rd_stop(c);
			return false;
		}
		break;
	case S_LINGER:
		c->rlen = 0;
		break;
	default:
		return false;
	}
	*dst = c->rbuf + c->rlen;
	*space = c->rcap - c->rlen;
	if (*space == 0) {		/* the parser bounds it: never */
		rd_stop(c);
		return false;
	}
	return true;
}

/* The client sent EOF (reset false) or the socket failed. */
static void
conn_rfail(h1s_conn *c, bool reset)
{
	if (c->state != S_SERVE) {
		conn_close(c);
		return;
	}
	if (!reset && c->phase >= R_ENDED) {
		/* a half close: the answer is written out, then closed */
		c->peer_eof = true;
		rd_stop(c);
		return;
	}
	conn_gone(c);
}

static void
conn_input(h1s_conn *c)
{
	for (;;) {
		char *dst;
		size_t space;
		bool direct;
		ssize_t n;

		if (c->fd < 0 || !c->rd_on)
			return;
		if (!in_space(c, &dst, &space, &direct))
			return;
		n = recv(c->fd, dst, space, 0);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				conn_rfail(c, true);
			return;
		}
		if (n == 0) {
			conn_rfail(c, false);
			return;
		}
		if (!direct)
			c->rlen += (size_t)n;
		else {
			c->blen += (size_t)n;
			if (c->bs == B_CH_DATA) {
				c->remain -= (uint64_t)n;
				if (c->remain == 0)
					c->bs = B_CH_CRLF;
			}
		}
		if (c->state == S_LINGER) {
			if ((size_t)n < space)
				return;
			continue;
		}
		if (!conn_parse(c))
			return;
		if ((size_t)n < space)
			return;
	}
}

/* Parse what is buffered.  True: go on reading. */
static bool
conn_parse(h1s_conn *c)
{
	int rc;

	switch (c->state) {
	case S_IDLE:
		set_state(c, S_HEAD);
		tm_later(c, c->s->lim.header_timeout_ms);
		/* FALLTHROUGH */
	case S_HEAD:
		if ((rc = head_parse(c)) <= 0)
			return rc == 0;
		if (!head_done(c))
			return false;
		return body_parse(c);
	case S_BODY:
		return body_parse(c);
	case S_SERVE:
		return true;		/* pipelined: waits its turn */
	default:
		return false;
	}
}

static void
conn_on_read(evutil_socket_t fd, short what, void *arg)
{
	h1s_conn *c = arg;

	(void)fd;
	(void)what;
	c->busy++;
	conn_input(c);
	tm_flush(c);
	conn_unbusy(c);
}

static void
conn_on_timer(evutil_socket_t fd, short what, void *arg)
{
	h1s_conn *c = arg;
	h1s_server *s = c->s;

	(void)fd;
	(void)what;
	c->tm_on = false;		/* a timer event is not persistent */
	c->busy++;
	switch (c->state) {
	case S_IDLE:
	case S_LINGER:
		conn_close(c);
		break;
	case S_HEAD:
		if (!c->have_rline && c->ppos == c->rlen) {
			conn_close(c);		/* nothing but empty lines */
			break;
		}
		s->st.timeouts++;
		fail(c, 408, "request_timeout",
		    "the request head was not received within the header "
		    "timeout");
		break;
	case S_BODY:
		s->st.timeouts++;
		fail(c, 408, "request_timeout",
		    "the request body was not received within the body "
		    "timeout");
		break;
	case S_SERVE:
		if (c->wwait || c->is_error) {
			s->st.timeouts++;
			conn_gone(c);
		}
		break;
	default:
		break;
	}
	conn_unbusy(c);
}

/* --- output ------------------------------------------------------------- */

static void
wr_wait(h1s_conn *c)
{
	if (c->wwait || c->fd < 0)
		return;
	c->wwait = true;
	event_add(c->ev_wr, NULL);
	if (c->state == S_SERVE)
		tm_arm(c, c->s->lim.send_timeout_ms);
}

/*
 * Write what is queued and then x[0..nx): straight to the socket (one
 * sendmsg) unless it is known to be full; what it does not take is copied
 * to the output buffer and EV_WRITE armed.  False: the client is gone.
 */
static bool
out_write(h1s_conn *c, const struct iovec *x, int nx)
{
	struct iovec v[OUT_NIOV + 1];
	struct msghdr m;
	size_t want = 0, done, queued = c->olen - c->opos, k;
	ssize_t w = 0;
	int i, nv = 0, first;

	if (c->fd < 0)
		return false;
	if (queued > 0) {
		v[nv].iov_base = c->obuf + c->opos;
		v[nv++].iov_len = queued;
		want += queued;
	}
	first = nv;
	for (i = 0; i < nx && nv <= OUT_NIOV; i++)
		if (x[i].iov_len > 0) {
			v[nv++] = x[i];
			want += x[i].iov_len;
		}
	if (want == 0)
		return true;
	if (!c->wwait) {
		memset(&m, 0, sizeof(m));
		m.msg_iov = v;
		m.msg_iovlen = (size_t)nv;
		do
			w = sendmsg(c->fd, &m, MSG_NOSIGNAL);
		while (w < 0 && errno == EINTR);
		if (w < 0) {
			if (errno != EAGAIN && errno != EWOULDBLOCK) {
				conn_gone(c);
				return false;
			}
			w = 0;
		}
	}
	done = (size_t)w;
	k = done < queued ? done : queued;
	c->opos += k;
	done -= k;
	if (c->opos == c->olen)
		c->opos = c->olen = 0;
	for (i = first; i < nv; i++) {
		size_t l = v[i].iov_len;

		if (done >= l) {
			done -= l;
			continue;
		}
		if (!out_append(c, (char *)v[i].iov_base + done, l - done)) {
			conn_gone(c);
			return false;
		}
		done = 0;
	}
	if (c->opos < c->olen)
		wr_wait(c);
	else if (w > 0 && c->state == S_SERVE && !c->is_error)
		tm_off(c);
	return true;
}

/* EV_WRITE: write the queue out. */
static void
out_flush(h1s_conn *c)
{
	bool progress = false;
	ssize_t w;

	while (c->opos < c->olen) {
		w = send(c->fd, c->obuf + c->opos, c->olen - c->opos,
		    MSG_NOSIGNAL);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				break;
			conn_gone(c);
			return;
		}
		c->opos += (size_t)w;
		progress = true;
	}
	if (c->opos < c->olen) {
		if (progress && c->state == S_SERVE)
			tm_arm(c, c->s->lim.send_timeout_ms);
		return;
	}
	c->opos = c->olen = 0;
	c->wwait = false;
	event_del(c->ev_wr);
	if (c->state == S_SERVE) {
		tm_off(c);
		if (c->phase == R_ENDED)
			c->pend |= PEND_COMPLETE;
		else if (c->req.drain_cb != NULL)
			c->pend |= PEND_DRAIN;
	}
}

static void
date_update(h1s_server *s)
{
	static const char days[7][4] = { "Sun", "Mon", "Tue", "Wed", "Thu",
	    "Fri", "Sat" };
	static const char mons[12][4] = { "Jan", "Feb", "Mar", "Apr", "May",
	    "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec" };
	struct timeval tv;
	struct tm tm;
	int n;

	event_base_gettimeofday_cached(s->base, &tv);
	if (tv.tv_sec == s->date_sec)
		return;
	s->date_sec = tv.tv_sec;
	gmtime_r(&s->date_sec, &tm);
	n = snprintf(s->date, sizeof(s->date),
	    "Date: %s, %02d %s %04d %02d:%02d:%02d GMT\r\n",
	    days[tm.tm_wday % 7], tm.tm_mday, mons[tm.tm_mon % 12],
	    tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
	s->date_len = n > 0 && (size_t)n < sizeof(s->date) ? (size_t)n : 0;
}

static bool
status_nobody(int status)
{
	return status < 200 || status == 204 || status == 304;
}

/*
 * The status line and fields into the output queue.  clen >= 0: that
 * Content-Length; -1: chunked (HTTP/1.1) or until close (HTTP/1.0).
 */
static bool
head_build(h1s_conn *c, int status, const char *reason, int64_t clen)
{
	h1s_server *s = c->s;
	h1s_req *r = &c->req;
	size_t rl, need, n = 0;
	char *b;

	if (status < 100 || status > 999)
		status = 500;
	if (reason == NULL)
		reason = h1s_reason(status);
	rl = strlen(reason);
	date_update(s);
	c->nobody = status_nobody(status) || r->method == H1S_HEAD;
	c->oclen = clen;
	c->obody = 0;
	c->ochunked = false;
	if (!status_nobody(status) && clen < 0) {
		if (r->minor == 1)
			c->ochunked = true;
		else
			c->close_after = true;	/* delimited by the close */
	}
	if (c->is_error || !c->keep_alive || s->draining)
		c->close_after = true;
	need = 16 + rl + 2 + s->date_len + c->rhlen + 40 + 30 + 2;
	if (!obuf_reserve(c, need))
		return false;
	b = c->obuf + c->olen;
	memcpy(b, r->minor == 0 ? "HTTP/1.0 " : "HTTP/1.1 ", 9);
	n = 9;
	n += put_u64(b + n, (uint64_t)status);
	b[n++] = ' ';
	memcpy(b + n, reason, rl);
	n += rl;
	memcpy(b + n, "\r\n", 2);
	n += 2;
	memcpy(b + n, s->date, s->date_len);
	n += s->date_len;
	if (c->rhlen > 0) {
		memcpy(b + n, c->rh, c->rhlen);
		n += c->rhlen;
	}
	if (status_nobody(status))
		;
	else if (clen >= 0) {
		memcpy(b + n, "Content-Length: ", 16);
		n += 16;
		n += put_u64(b + n, (uint64_t)clen);
		memcpy(b + n, "\r\n", 2);
		n += 2;
	} else if (c->ochunked) {
		memcpy(b + n, "Transfer-Encoding: chunked\r\n", 28);
		n += 28;
	}
	if (c->close_after) {
		memcpy(b + n, "Connection: close\r\n", 19);
		n += 19;
	} else if (r->minor == 0) {
		memcpy(b + n, "Connection: keep-alive\r\n", 24);
		n += 24;
	}
	memcpy(b + n, "\r\n", 2);
	n += 2;
	c->olen += n;
	return true;
}

/* Ended and written out: complete it from the loop. */
static void
resp_check(h1s_conn *c)
{
	if (c->phase == R_ENDED && c->opos == c->olen && c->fd >= 0)
		defer(c, PEND_COMPLETE);
}

/* The application ended the response of a request whose client left. */
static void
gone_end(h1s_conn *c)
{
	if (c->phase == R_DONE || (c->pend & PEND_CLOSE))
		return;
	c->phase = R_ENDED;
	defer(c, PEND_COMPLETE);
}

/* The client left (EOF, reset, send timeout): the socket closes now, the
 * request when the application lets go of it. */
static void
conn_gone(h1s_conn *c)
{
	if (c->gone)
		return;
	c->gone = true;
	conn_close(c);
	if (!c->held)
		return;
	c->opos = c->olen = 0;
	if (c->req.close_cb != NULL)
		defer(c, PEND_CLOSE);
	else if (c->phase == R_ENDED)
		defer(c, PEND_COMPLETE);
}

/* The request is over: its callback, then the next one or the close. */
static void
req_finish(h1s_conn *c, bool closed)
{
	h1s_req *r = &c->req;
	req_cb cb = closed ? r->close_cb : r->complete_cb;
	void *arg = closed ? r->close_arg : r->complete_arg;

	c->phase = R_DONE;
	r->close_cb = r->complete_cb = r->drain_cb = NULL;
	c->pend = 0;
	if (cb != NULL)
		cb(r, arg);
	if (c->fd < 0) {
		req_reset(c);
		conn_try_recycle(c);
		return;
	}
	if (c->close_after || c->peer_eof) {
		if (c->is_error && !c->peer_eof) {
			/* linger: the client sees our answer, then EOF */
			req_reset(c);
			shutdown(c->fd, SHUT_WR);
			set_state(c, S_LINGER);
			c->rlen = 0;
			rd_start(c);
			tm_arm(c, LINGER_MS);
			return;
		}
		req_reset(c);
		conn_close(c);
		return;
	}
	next_request(c);
}

/* After a response on a kept connection: a pipelined request, or idle. */
static void
next_request(h1s_conn *c)
{
	h1s_server *s = c->s;
	size_t rest = c->rlen - c->rpos;

	if (rest > 0 && c->rpos > 0)
		memmove(c->rbuf, c->rbuf + c->rpos, rest);
	c->rlen = rest;
	req_reset(c);
	rd_start(c);
	if (rest == 0) {
		if (s->draining) {
			conn_close(c);
			return;
		}
		set_state(c, S_IDLE);
		tm_arm(c, s->lim.keepalive_timeout_ms);
		return;
	}
	set_state(c, S_HEAD);
	tm_later(c, s->lim.header_timeout_ms);
	(void)conn_parse(c);
	tm_flush(c);
}

static void
run_pending(h1s_conn *c)
{
	h1s_req *r = &c->req;
	req_cb cb;

	while (c->pend != 0) {
		if (c->pend & PEND_CLOSE) {
			if (c->held && c->phase != R_DONE) {
				req_finish(c, true);
				return;
			}
			c->pend &= ~PEND_CLOSE;
		} else if (c->pend & PEND_COMPLETE) {
			c->pend &= ~PEND_COMPLETE;
			if (c->held && c->phase == R_ENDED &&
			    (c->gone || c->opos == c->olen)) {
				req_finish(c, c->gone && r->close_cb != NULL);
				return;
			}
		} else if (c->pend & PEND_DRAIN) {
			c->pend &= ~PEND_DRAIN;
			if (r->drain_cb != NULL && !c->gone &&
			    c->phase != R_DONE && c->opos == c->olen) {
				cb = r->drain_cb;
				r->drain_cb = NULL;
				cb(r, r->drain_arg);
			}
		} else
			break;		/* PEND_FLUSH: its own activation */
	}
}

static void
conn_on_write(evutil_socket_t fd, short what, void *arg)
{
	h1s_conn *c = arg;

	(void)fd;
	(void)what;
	c->busy++;
	if (c->wwait && c->fd >= 0)
		out_flush(c);
	run_pending(c);
	conn_unbusy(c);
}

static void
conn_on_defer(evutil_socket_t fd, short what, void *arg)
{
	h1s_conn *c = arg;

	(void)fd;
	(void)what;
	c->busy++;
	if (c->pend & PEND_FLUSH) {
		c->pend &= ~PEND_FLUSH;
		if (c->fd >= 0 && !c->wwait && out_write(c, NULL, 0))
			resp_check(c);
	}
	run_pending(c);
	conn_unbusy(c);
}

/* --- the request (accessors) -------------------------------------------- */

enum h1s_method
h1s_method(const h1s_req *r)
{
	return r->method;
}

const char *
h1s_method_str(const h1s_req *r)
{
	return r->mstr;
}

const char *
h1s_target(const h1s_req *r, size_t *len)
{
	if (len != NULL)
		*len = r->target_len;
	return r->target;
}

const char *
h1s_path(const h1s_req *r)
{
	return r->path;
}

int
h1s_minor(const h1s_req *r)
{
	return r->minor;
}

const h1s_header *
h1s_headers(const h1s_req *r, size_t *n)
{
	if (n != NULL)
		*n = r->nhdrs;
	return r->hdrs;
}

const char *
h1s_find_header(const h1s_req *r, const char *name)
{
	size_t i, nl = strlen(name);

	for (i = 0; i < r->nhdrs; i++)
		if (r->hdrs[i].name_len == nl &&
		    strncasecmp(r->hdrs[i].name, name, nl) == 0)
			return r->hdrs[i].value;
	return NULL;
}

const char *
h1s_body(const h1s_req *r, size_t *len)
{
	if (len != NULL)
		*len = r->body_len;
	return r->body_len > 0 ? r->body : NULL;
}

const char *
h1s_peer(const h1s_req *r)
{
	h1s_conn *c = r->c;
	const struct sockaddr_in *s4 = (const struct sockaddr_in *)&c->peer;
	const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)&c->peer;

	if (c->peerstr[0] != '\0')
		return c->peerstr;
	if (c->peerlen > 0 && c->peer.ss_family == AF_INET)
		inet_ntop(AF_INET, &s4->sin_addr, c->peerstr,
		    sizeof(c->peerstr));
	else if (c->peerlen > 0 && c->peer.ss_family == AF_INET6)
		inet_ntop(AF_INET6, &s6->sin6_addr, c->peerstr,
		    sizeof(c->peerstr));
	else
		snprintf(c->peerstr, sizeof(c->peerstr), "local");
	return c->peerstr;
}

bool
h1s_peer_loopback(const h1s_req *r)
{
	const h1s_conn *c = r->c;
	const struct sockaddr_in *s4 = (const struct sockaddr_in *)&c->peer;
	const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)&c->peer;
	const uint8_t *a;

	if (c->peerlen == 0 || c->peer.ss_family == AF_UNIX)
		return true;		/* socketpairs, unix sockets */
	if (c->peer.ss_family == AF_INET)
		return (ntohl(s4->sin_addr.s_addr) >> 24) == 127;
	if (c->peer.ss_family != AF_INET6)
		return false;
	if (IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr))
		return true;
	a = s6->sin6_addr.s6_addr;
	return IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr) && a[12] == 127;
}

bool
h1s_client_gone(const h1s_req *r)
{
	return r->c->gone;
}

void
h1s_on_close(h1s_req *r, void (*cb)(h1s_req *, void *), void *arg)
{
	h1s_conn *c = r->c;

	r->close_cb = cb;
	r->close_arg = arg;
	if (cb != NULL && c->gone && c->held && c->phase != R_DONE)
		defer(c, PEND_CLOSE);
}

void
h1s_on_complete(h1s_req *r, void (*cb)(h1s_req *, void *), void *arg)
{
	r->complete_cb = cb;
	r->complete_arg = arg;
}

void
h1s_on_drain(h1s_req *r, void (*cb)(h1s_req *, void *), void *arg)
{
	h1s_conn *c = r->c;

	r->drain_cb = cb;
	r->drain_arg = arg;
	if (cb != NULL && c->opos == c->olen && !c->gone)
		defer(c, PEND_DRAIN);
}

/* --- the response ------------------------------------------------------- */

/* Fields the server writes itself. */
static bool
server_field(const char *n, size_t l)
{
	return h1_ieq(n, l, "content-length", 14) ||
	    h1_ieq(n, l, "transfer-encoding", 17) ||
	    h1_ieq(n, l, "connection", 10) || h1_ieq(n, l, "date", 4);
}

int
h1s_add_header_n(h1s_req *r, const char *name, size_t name_len,
    const char *value, size_t value_len)
{
	h1s_conn *c = r->c;
	size_t need = name_len + value_len + 4, i;
	char *b;

	if (!h1_is_token(name, name_len))
		return EINVAL;
	for (i = 0; i < value_len; i++)
		if (value[i] == '\r' || value[i] == '\n' || value[i] == '\0')
			return EINVAL;
	if (server_field(name, name_len) || c->phase != R_NONE)
		return 0;
	if (c->rhcap - c->rhlen < need) {
		size_t cap = c->rhcap * 2 > 256 ? c->rhcap * 2 : 256;

		if (cap < c->rhlen + need)
			cap = c->rhlen + need;
		if ((b = realloc(c->rh, cap)) == NULL)
			return ENOMEM;
		c->rh = b;
		c->rhcap = cap;
	}
	b = c->rh + c->rhlen;
	memcpy(b, name, name_len);
	b[name_len] = ':';
	b[name_len + 1] = ' ';
	memcpy(b + name_len + 2, value, value_len);
	b[need - 2] = '\r';
	b[need - 1] = '\n';
	c->rhlen += need;
	return 0;
}

int
h1s_add_header(h1s_req *r, const char *name, const char *value)
{
	if (name == NULL || value == NULL)
		return EINVAL;
	return h1s_add_header_n(r, name, strlen(name), value, strlen(value));
}

void
h1s_del_header(h1s_req *r, const char *name)
{
	h1s_conn *c = r->c;
	size_t nl = strlen(name), i = 0, l;
	const char *e;

	while (i < c->rhlen) {
		e = memchr(c->rh + i, '\n', c->rhlen - i);
		l = (size_t)(e + 1 - (c->rh + i));
		if (l > nl && c->rh[i + nl] == ':' &&
		    strncasecmp(c->rh + i, name, nl) == 0) {
			memmove(c->rh + i, c->rh + i + l, c->rhlen - i - l);
			c->rhlen -= l;
		} else
			i += l;
	}
}

void
h1s_clear_headers(h1s_req *r)
{
	r->c->rhlen = 0;
}

void
h1s_set_close(h1s_req *r)
{
	r->c->close_after = true;
}

void
h1s_reply(h1s_req *r, int status, const char *reason, const void *body,
    size_t len)
{
	h1s_conn *c = r->c;
	struct iovec v;

	if (c->phase != R_NONE || !c->held)
		return;
	if (c->gone) {
		gone_end(c);
		return;
	}
	if (body == NULL)
		len = 0;
	if (!head_build(c, status, reason, (int64_t)len)) {
		c->phase = R_ENDED;
		conn_gone(c);
		return;
	}
	c->phase = R_ENDED;
	v.iov_base = (void *)(uintptr_t)body;
	v.iov_len = c->nobody ? 0 : len;
	if (out_write(c, &v, 1))
		resp_check(c);
}

void
h1s_reply_start(h1s_req *r, int status, const char *reason,
    int64_t content_length)
{
	h1s_conn *c = r->c;

	if (c->phase != R_NONE || !c->held)
		return;
	c->phase = R_STREAM;
	if (c->gone)
		return;
	if (content_length < -1)
		content_length = -1;
	if (!head_build(c, status, reason, content_length)) {
		conn_gone(c);
		return;
	}
	/* the head goes out with the first data, or from the loop when none
	 * comes first: one sendmsg for head and body */
	defer(c, PEND_FLUSH);
}

size_t
h1s_reply_chunk(h1s_req *r, const void *p, size_t n)
{
	h1s_conn *c = r->c;
	struct iovec v[3];
	char hex[20];
	int nv = 0;

	if (c->phase != R_STREAM || c->gone)
		return 0;
	if (c->nobody || n == 0)
		return c->olen - c->opos;
	if (c->ochunked) {
		v[nv].iov_base = hex;
		v[nv++].iov_len = put_chunk_size(hex, n);
	} else if (c->oclen >= 0) {
		uint64_t left = (uint64_t)c->oclen - c->obody;

		if ((uint64_t)n > left)
			n = (size_t)left;	/* past the length: dropped */
	}
	c->obody += n;
	v[nv].iov_base = (void *)(uintptr_t)p;
	v[nv++].iov_len = n;
	if (c->ochunked) {
		v[nv].iov_base = (void *)(uintptr_t)"\r\n";
		v[nv++].iov_len = 2;
	}
	if (!out_write(c, v, nv))
		return 0;
	return c->olen - c->opos;
}

void
h1s_reply_end(h1s_req *r)
{
	h1s_conn *c = r->c;
	struct iovec v = { (void *)(uintptr_t)"0\r\n\r\n", 5 };

	if (!c->held || c->phase == R_ENDED || c->phase == R_DONE)
		return;
	if (c->phase == R_NONE) {		/* never started */
		h1s_reply(r, 500, NULL, NULL, 0);
		return;
	}
	if (c->gone) {
		gone_end(c);
		return;
	}
	if (c->oclen >= 0 && c->obody < (uint64_t)c->oclen && !c->nobody)
		c->close_after = true;		/* short: the close tells */
	c->phase = R_ENDED;
	/* the last chunk, with a head still queued: one write */
	if (!out_write(c, &v, c->ochunked && !c->nobody ? 1 : 0))
		return;
	resp_check(c);
}

size_t
h1s_unsent(const h1s_req *r)
{
	const h1s_conn *c = r->c;

	return c->olen - c->opos;
}

void
h1s_abort(h1s_req *r)
{
	h1s_conn *c = r->c;

	if (!c->held || c->phase == R_DONE)
		return;
	r->close_cb = r->complete_cb = r->drain_cb = NULL;
	c->close_after = true;
	if (!c->gone) {
		/* what is queued goes out first, as far as one write takes it */
		if (c->opos < c->olen)
			(void)send(c->fd, c->obuf + c->opos, c->olen - c->opos,
			    MSG_NOSIGNAL | MSG_DONTWAIT);
		c->gone = true;
		conn_close(c);
	}
	c->opos = c->olen = 0;
	c->phase = R_ENDED;
	defer(c, PEND_COMPLETE);
}
