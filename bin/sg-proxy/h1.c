/*
 * h1.c — sg-proxy's native HTTP/1.1 upstream client (see h1.h).
 *
 * Cost model (what makes it cheaper than libcurl multi): per request in
 * the steady state one sendmsg (request line, fixed fields, the caller's
 * block and the body gathered), one recv per readable event into the
 * connection's own buffer, no epoll_ctl (each connection's read event is
 * added once, when the connection opens, and stays registered while idle
 * and in use; idle timeouts are the same event's timer), no allocation
 * (connections, their buffers and transfers come from free lists), and no
 * extra loop iteration (a pooled connection is written to inside
 * h1_start).
 *
 * A connection is in one state:
 *   C_ACTIVE   serving a transfer (connecting, sending, reading);
 *   C_DRAIN    reading the rest of a discarded response, no transfer;
 *   C_IDLE     on its upstream's idle list (read event watches for the
 *              server closing it, the event's timeout for the idle limit);
 *   C_DEAD     closed, waiting for the callback that runs on it to return
 *              before going to the free list.
 * Every change of owner bumps c->seq; code that called out to the caller
 * compares it to know whether the connection is still its own.
 *
 * Parsing: the header block is looked for as a whole (bounded by
 * max_header_bytes and the buffer), then split into lines in place; body
 * bytes are handed to on_data straight from the buffer and consumed, so
 * only a partial header block or chunk-size line ever stays behind (moved
 * to the front before the next recv).
 */
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <event2/event.h>

#include "h1.h"
#include "h1lex.h"

#define H1_LINE_MAX	4096		/* chunk-size line */
#define H1_AUTH_MAX	300		/* host:port */
#define H1_HEAD_MAX	(H1_AUTH_MAX + 96)
#define H1_NIOV		8

enum cstate { C_FREE = 0, C_ACTIVE, C_DRAIN, C_IDLE, C_DEAD };

/* Parser position within a response. */
enum pstate {
	P_HEAD = 0,		/* status line + fields */
	P_BODY_CL,		/* remain bytes */
	P_BODY_EOF,		/* until close */
	P_CH_SIZE,		/* chunk-size line */
	P_CH_DATA,		/* remain bytes of a chunk */
	P_CH_CRLF,		/* the CRLF after a chunk */
	P_CH_TRAILER,		/* trailer fields until an empty line */
	P_DONE,
};

typedef struct h1_conn h1_conn;

struct h1_upstream {
	h1_pool			*pool;
	struct sockaddr_storage	 sa;
	socklen_t		 salen;
	char			 auth[H1_AUTH_MAX];
	size_t			 auth_len;
	h1_conn			*idle;		/* LIFO, most recent first */
	size_t			 nidle;
	h1_upstream		*next;
};

struct h1_xfer {
	h1_pool		*pool;
	h1_upstream	*up;
	h1_conn		*c;
	const h1_cbs	*cbs;
	void		*arg;
	struct iovec	 iov[H1_NIOV];
	int		 niov;
	size_t		 total;			/* request bytes */
	size_t		 sent;
	uint64_t	 timeout_ms;
	bool		 is_head;
	bool		 replayed;
	bool		 got_bytes;
	bool		 paused;
	char		 head[H1_HEAD_MAX];	/* " HTTP/1.1\r\nHost: ..." */
	h1_xfer		*next;			/* free or live list */
	h1_xfer		*prev;
};

struct h1_conn {
	h1_pool		*pool;
	h1_upstream	*up;
	h1_xfer		*x;
	int		 fd;
	int		 state;
	uint64_t	 seq;
	unsigned	 busy;			/* callbacks running on it */
	bool		 connected;		/* a write went through */
	bool		 reused;		/* taken from the idle list */
	bool		 ev_w_added;
	bool		 reading;		/* ev_r registered */
	/* parser */
	int		 ps;
	size_t		 hscan;			/* header search resumes here */
	uint64_t	 remain;
	uint64_t	 drained;		/* C_DRAIN: bytes so far */
	size_t		 tbytes;		/* trailer bytes so far */
	bool		 keep_alive;
	bool		 resp_chunked;
	/* buffer: unparsed bytes are rbuf[rpos..rlen) */
	char		*rbuf;
	size_t		 rpos, rlen;
	struct event	*ev_r;			/* persistent EV_READ */
	struct event	*ev_w;			/* connect, write, deferred */
	int		 fail;			/* deferred on_done code */
	h1_conn		*inext, *iprev;		/* idle list */
	h1_conn		*next, *prev;		/* live list or free list */
};

struct h1_pool {
	struct event_base	*base;
	h1_limits		 lim;
	size_t			 hmax;		/* header block limit */
	h1_upstream		*ups;
	h1_conn			*live;
	h1_conn			*free_conns;
	h1_xfer			*xlive;
	h1_xfer			*free_xfers;
	h1_header		*hdrs;		/* max_headers, scratch */
	h1_stats		 st;
};

static void conn_on_read(evutil_socket_t fd, short what, void *arg);
static void conn_on_write(evutil_socket_t fd, short what, void *arg);
static void conn_input(h1_conn *c);
static void xfer_fail(h1_xfer *x, int err);

void
h1_limits_default(h1_limits *l)
{
	l->max_idle = 64;
	l->idle_timeout_ms = 60000;
	l->connect_timeout_ms = 5000;
	l->max_header_bytes = 16384;
	l->max_headers = 100;
	l->rbuf_size = 16384;
	l->drain_max = 65536;
}

const char *
h1_strerror(int err)
{
	switch (err) {
	case H1_OK:		return "ok";
	case H1_ECONNREFUSED:	return "connect failed";
	case H1_ECONNTIMEDOUT:	return "connect timed out";
	case H1_ERESET:		return "connection closed before a response";
	case H1_ETIMEDOUT:	return "response timed out";
	case H1_EMALFORMED:	return "malformed response";
	case H1_ECLOSED:	return "connection closed mid-response";
	default:		return "unknown error";
	}
}

/* --- pool ------------------------------------------------------------------ */

h1_pool *
h1_pool_new(struct event_base *base, const h1_limits *lim)
{
	h1_pool *p;

	if ((p = calloc(1, sizeof(*p))) == NULL)
		return NULL;
	p->base = base;
	if (lim != NULL)
		p->lim = *lim;
	else
		h1_limits_default(&p->lim);
	if (p->lim.rbuf_size < 2 * H1_LINE_MAX)
		p->lim.rbuf_size = 2 * H1_LINE_MAX;
	if (p->lim.max_headers == 0)
		p->lim.max_headers = 1;
	p->hmax = p->lim.max_header_bytes;
	if (p->hmax == 0 || p->hmax > p->lim.rbuf_size)
		p->hmax = p->lim.rbuf_size;
	if ((p->hdrs = calloc(p->lim.max_headers, sizeof(*p->hdrs))) ==
	    NULL) {
		free(p);
		return NULL;
	}
	return p;
}

static void
conn_destroy(h1_conn *c)
{
	if (c->ev_r != NULL)
		event_free(c->ev_r);
	if (c->ev_w != NULL)
		event_free(c->ev_w);
	if (c->fd >= 0)
		close(c->fd);
	free(c->rbuf);
	free(c);
}

void
h1_pool_free(h1_pool *p)
{
	h1_upstream *u;
	h1_conn *c;
	h1_xfer *x;

	if (p == NULL)
		return;
	while ((c = p->live) != NULL) {
		p->live = c->next;
		event_del(c->ev_r);
		event_del(c->ev_w);
		conn_destroy(c);
	}
	while ((c = p->free_conns) != NULL) {
		p->free_conns = c->next;
		conn_destroy(c);
	}
	while ((x = p->xlive) != NULL) {
		p->xlive = x->next;
		free(x);
	}
	while ((x = p->free_xfers) != NULL) {
		p->free_xfers = x->next;
		free(x);
	}
	while ((u = p->ups) != NULL) {
		p->ups = u->next;
		free(u);
	}
	free(p->hdrs);
	free(p);
}

void
h1_pool_stats(const h1_pool *p, h1_stats *st)
{
	*st = p->st;
}

/* --- upstreams ------------------------------------------------------------- */

const char *
h1_url_path(const char *url, size_t *len)
{
	const char *s = url, *sl;

	if (strncasecmp(s, "http://", 7) == 0)
		s += 7;
	else {
		*len = 0;
		return "";
	}
	if ((sl = strpbrk(s, "/?")) == NULL || *sl == '?') {
		*len = 0;
		return "";
	}
	*len = strcspn(sl, "?#");
	return sl;
}

/* Split "host[:port]" (host may be "[v6]") into host and port. */
static int
split_hostport(const char *s, size_t n, char *host, size_t hcap,
    unsigned *port)
{
	const char *h = s, *pe = NULL;
	size_t hl;
	unsigned v = 80;

	if (n > 0 && s[0] == '[') {
		const char *rb = memchr(s, ']', n);

		if (rb == NULL)
			return EINVAL;
		h = s + 1;
		hl = (size_t)(rb - h);
		if ((size_t)(rb + 1 - s) < n) {
			if (rb[1] != ':')
				return EINVAL;
			pe = rb + 2;
		}
	} else {
		const char *col = memchr(s, ':', n);

		hl = col != NULL ? (size_t)(col - s) : n;
		if (col != NULL)
			pe = col + 1;
	}
	if (pe != NULL) {
		size_t i, pl = n - (size_t)(pe - s);

		if (pl == 0 || pl > 5)
			return EINVAL;
		for (v = 0, i = 0; i < pl; i++) {
			if (pe[i] < '0' || pe[i] > '9')
				return EINVAL;
			v = v * 10 + (unsigned)(pe[i] - '0');
		}
		if (v == 0 || v > 65535)
			return EINVAL;
	}
	if (hl == 0 || hl >= hcap)
		return EINVAL;
	memcpy(host, h, hl);
	host[hl] = '\0';
	*port = v;
	return 0;
}

static int
resolve(const char *host, unsigned port, struct sockaddr_storage *ss,
    socklen_t *len)
{
	struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
	struct addrinfo hints, *res = NULL;
	char ps[8];

	memset(ss, 0, sizeof(*ss));
	if (inet_pton(AF_INET, host, &s4->sin_addr) == 1) {
		s4->sin_family = AF_INET;
		s4->sin_port = htons((uint16_t)port);
		*len = sizeof(*s4);
		return 0;
	}
	if (inet_pton(AF_INET6, host, &s6->sin6_addr) == 1) {
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)port);
		*len = sizeof(*s6);
		return 0;
	}
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_NUMERICSERV;
	snprintf(ps, sizeof(ps), "%u", port);
	if (getaddrinfo(host, ps, &hints, &res) != 0 || res == NULL)
		return ENOENT;
	if (res->ai_addrlen > sizeof(*ss)) {
		freeaddrinfo(res);
		return ENOENT;
	}
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	*len = (socklen_t)res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

int
h1_upstream_get(h1_pool *p, const char *url, h1_upstream **out)
{
	const char *s = url;
	char host[256];
	size_t n;
	unsigned port;
	h1_upstream *u;
	int rc;

	if (strncasecmp(s, "http://", 7) == 0)
		s += 7;
	n = strcspn(s, "/?#");
	if (n == 0 || n >= H1_AUTH_MAX)
		return EINVAL;
	for (u = p->ups; u != NULL; u = u->next)
		if (u->auth_len == n && strncasecmp(u->auth, s, n) == 0) {
			*out = u;
			return 0;
		}
	if ((rc = split_hostport(s, n, host, sizeof(host), &port)) != 0)
		return rc;
	if ((u = calloc(1, sizeof(*u))) == NULL)
		return ENOMEM;
	if ((rc = resolve(host, port, &u->sa, &u->salen)) != 0) {
		free(u);
		return rc;
	}
	memcpy(u->auth, s, n);
	u->auth[n] = '\0';
	u->auth_len = n;
	u->pool = p;
	u->next = p->ups;
	p->ups = u;
	*out = u;
	return 0;
}

bool
h1_upstream_matches(const h1_upstream *u, const char *url)
{
	const char *s = url;

	if (strncasecmp(s, "http://", 7) == 0)
		s += 7;
	return strncasecmp(s, u->auth, u->auth_len) == 0 &&
	    strchr("/?#", s[u->auth_len]) != NULL;
}

const char *
h1_upstream_authority(const h1_upstream *u)
{
	return u->auth;
}

/* --- connections ------------------------------------------------------------ */

static void
idle_unlink(h1_conn *c)
{
	h1_upstream *u = c->up;

	if (c->iprev != NULL)
		c->iprev->inext = c->inext;
	else
		u->idle = c->inext;
	if (c->inext != NULL)
		c->inext->iprev = c->iprev;
	c->inext = c->iprev = NULL;
	u->nidle--;
	c->pool->st.idle--;
}

static void
live_unlink(h1_conn *c)
{
	h1_pool *p = c->pool;

	if (c->prev != NULL)
		c->prev->next = c->next;
	else
		p->live = c->next;
	if (c->next != NULL)
		c->next->prev = c->prev;
	c->next = c->prev = NULL;
}

/* To the free list once nothing runs on it any more. */
static void
conn_recycle(h1_conn *c)
{
	h1_pool *p = c->pool;

	c->state = C_FREE;
	c->next = p->free_conns;
	p->free_conns = c;
}

static void
conn_close(h1_conn *c)
{
	h1_pool *p = c->pool;

	if (c->state == C_DEAD || c->state == C_FREE)
		return;
	if (c->state == C_IDLE)
		idle_unlink(c);
	event_del(c->ev_r);
	event_del(c->ev_w);
	c->reading = c->ev_w_added = false;
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	c->x = NULL;
	c->seq++;
	p->st.closed++;
	p->st.live--;
	live_unlink(c);
	c->state = C_DEAD;
	if (c->busy == 0)
		conn_recycle(c);
}

static void
parser_reset(h1_conn *c)
{
	c->ps = P_HEAD;
	c->hscan = 0;
	c->remain = 0;
	c->drained = 0;
	c->tbytes = 0;
	c->keep_alive = false;
	c->resp_chunked = false;
}

/* A fresh connection (socket + connect started), or NULL: out of memory.
 * Socket errors leave c->fail set for a deferred on_done. */
static h1_conn *
conn_open(h1_pool *p, h1_upstream *u)
{
	h1_conn *c = p->free_conns;
	int one = 1, fd;

	if (c != NULL)
		p->free_conns = c->next;
	else {
		if ((c = calloc(1, sizeof(*c))) == NULL)
			return NULL;
		c->pool = p;
		c->fd = -1;
		if ((c->rbuf = malloc(p->lim.rbuf_size)) == NULL ||
		    (c->ev_r = event_new(p->base, -1, 0, conn_on_read, c)) ==
		    NULL ||
		    (c->ev_w = event_new(p->base, -1, 0, conn_on_write, c)) ==
		    NULL) {
			conn_destroy(c);
			return NULL;
		}
	}
	c->up = u;
	c->x = NULL;
	c->busy = 0;
	c->seq++;
	c->connected = c->reused = c->ev_w_added = c->reading = false;
	c->rpos = c->rlen = 0;
	c->fail = H1_OK;
	c->inext = c->iprev = NULL;
	parser_reset(c);
	c->state = C_ACTIVE;
	c->prev = NULL;
	c->next = p->live;
	if (p->live != NULL)
		p->live->prev = c;
	p->live = c;
	p->st.live++;
	p->st.connects++;
	fd = socket(u->sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
	    0);
	c->fd = fd;
	event_assign(c->ev_r, p->base, fd, EV_READ | EV_PERSIST, conn_on_read,
	    c);
	event_assign(c->ev_w, p->base, fd, EV_WRITE, conn_on_write, c);
	if (fd < 0) {
		c->fail = H1_ECONNREFUSED;
		return c;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(fd, (struct sockaddr *)&u->sa, u->salen) != 0 &&
	    errno != EINPROGRESS) {
		c->fail = H1_ECONNREFUSED;
		return c;
	}
	if (event_add(c->ev_r, NULL) != 0) {
		c->fail = H1_ECONNREFUSED;
		return c;
	}
	c->reading = true;
	return c;
}

/* Run the deferred failure from the loop. */
static void
conn_defer_fail(h1_conn *c, int err)
{
	c->fail = err;
	event_active(c->ev_w, EV_WRITE, 1);
}

/* Back to the upstream's idle list, or closed when it cannot be kept. */
static void
conn_release(h1_conn *c)
{
	h1_pool *p = c->pool;
	h1_upstream *u = c->up;
	struct timeval tv;

	c->x = NULL;
	c->seq++;
	if (!c->keep_alive || c->rpos != c->rlen || c->ev_w_added ||
	    u->nidle >= p->lim.max_idle || c->fd < 0) {
		conn_close(c);
		return;
	}
	if (!c->reading) {		/* paused on its last bytes */
		if (event_add(c->ev_r, NULL) != 0) {
			conn_close(c);
			return;
		}
		c->reading = true;
	}
	c->rpos = c->rlen = 0;
	parser_reset(c);
	c->state = C_IDLE;
	c->iprev = NULL;
	c->inext = u->idle;
	if (u->idle != NULL)
		u->idle->iprev = c;
	u->idle = c;
	u->nidle++;
	p->st.idle++;
	p->st.pooled++;
	h1_ms_tv(p->lim.idle_timeout_ms, &tv);
	event_add(c->ev_r, &tv);	/* timer only: already registered */
}

/* --- transfers -------------------------------------------------------------- */

static h1_xfer *
xfer_new(h1_pool *p)
{
	h1_xfer *x = p->free_xfers;

	if (x != NULL)
		p->free_xfers = x->next;
	else if ((x = malloc(sizeof(*x))) == NULL)
		return NULL;
	x->pool = p;
	x->prev = NULL;
	x->next = p->xlive;
	if (p->xlive != NULL)
		p->xlive->prev = x;
	p->xlive = x;
	return x;
}

static void
xfer_free(h1_xfer *x)
{
	h1_pool *p = x->pool;

	if (x->prev != NULL)
		x->prev->next = x->next;
	else
		p->xlive = x->next;
	if (x->next != NULL)
		x->next->prev = x->prev;
	x->c = NULL;
	x->cbs = NULL;
	x->prev = NULL;
	x->next = p->free_xfers;
	p->free_xfers = x;
}

/* The transfer is over: release it, then tell the caller. */
static void
xfer_finish(h1_xfer *x, int err)
{
	void (*done)(void *, int) = x->cbs->on_done;
	void *arg = x->arg;

	xfer_free(x);
	done(arg, err);
}

static void
append(char *buf, size_t cap, size_t *len, const char *s, size_t n)
{
	if (*len + n < cap) {
		memcpy(buf + *len, s, n);
		*len += n;
	}
}

static void
build_iov(h1_xfer *x, const h1_req *r)
{
	size_t hl = 0, ml = strlen(r->method);
	char num[24];
	int nl;

	x->is_head = ml == 4 && memcmp(r->method, "HEAD", 4) == 0;
	append(x->head, sizeof(x->head), &hl, " HTTP/1.1\r\nHost: ", 17);
	append(x->head, sizeof(x->head), &hl, x->up->auth, x->up->auth_len);
	append(x->head, sizeof(x->head), &hl, "\r\n", 2);
	if (r->body_len > 0 || !(x->is_head || (ml == 3 &&
	    memcmp(r->method, "GET", 3) == 0))) {
		nl = snprintf(num, sizeof(num), "%zu", r->body_len);
		append(x->head, sizeof(x->head), &hl, "Content-Length: ", 16);
		append(x->head, sizeof(x->head), &hl, num, (size_t)nl);
		append(x->head, sizeof(x->head), &hl, "\r\n", 2);
	}
	append(x->head, sizeof(x->head), &hl, "Connection: keep-alive\r\n",
	    24);
	x->niov = 0;
#define IOV(p, n) do {							\
	if ((n) > 0) {							\
		x->iov[x->niov].iov_base = (void *)(uintptr_t)(p);	\
		x->iov[x->niov].iov_len = (n);				\
		x->total += (n);					\
		x->niov++;						\
	}								\
} while (0)
	x->total = 0;
	IOV(r->method, ml);
	IOV(" ", (size_t)1);
	IOV(r->prefix, r->prefix_len);
	IOV(r->target, r->target_len);
	IOV(x->head, hl);
	IOV(r->hdrs, r->hdrs_len);
	IOV("\r\n", (size_t)2);
	IOV(r->body, r->body_len);
#undef IOV
}

/*
 * Write what is left of the request.  0: all written; EAGAIN: wait for
 * EV_WRITE; another errno: the connection failed.
 */
static int
xfer_send(h1_xfer *x)
{
	h1_conn *c = x->c;
	struct iovec v[H1_NIOV];
	struct msghdr m;
	size_t skip = x->sent;
	ssize_t n;
	int i, nv = 0;

	for (i = 0; i < x->niov; i++) {
		if (skip >= x->iov[i].iov_len) {
			skip -= x->iov[i].iov_len;
			continue;
		}
		v[nv].iov_base = (char *)x->iov[i].iov_base + skip;
		v[nv].iov_len = x->iov[i].iov_len - skip;
		skip = 0;
		nv++;
	}
	memset(&m, 0, sizeof(m));
	m.msg_iov = v;
	m.msg_iovlen = (size_t)nv;
	for (;;) {
		n = sendmsg(c->fd, &m, MSG_NOSIGNAL);
		if (n >= 0)
			break;
		if (errno == EINTR)
			continue;
		return errno == EWOULDBLOCK ? EAGAIN : errno;
	}
	c->connected = true;
	x->sent += (size_t)n;
	return x->sent == x->total ? 0 : EAGAIN;
}

/* Wait for the socket to accept more of the request. */
static void
wait_writable(h1_xfer *x)
{
	h1_conn *c = x->c;
	struct timeval tv;
	const h1_limits *l = &x->pool->lim;

	if (!c->connected && l->connect_timeout_ms > 0) {
		h1_ms_tv(l->connect_timeout_ms, &tv);
		event_add(c->ev_w, &tv);
	} else
		event_add(c->ev_w, NULL);
	c->ev_w_added = true;
}

static bool
connect_errno(int e)
{
	return e == ECONNREFUSED || e == ENETUNREACH || e == EHOSTUNREACH ||
	    e == EADDRNOTAVAIL || e == ETIMEDOUT || e == ENETDOWN ||
	    e == EAFNOSUPPORT || e == EACCES || e == EPERM;
}

/* Arm the response idle limit (a timer on the registered read event). */
static void
arm_timeout(h1_xfer *x)
{
	struct timeval tv;

	if (x->timeout_ms > 0 && x->c->reading) {
		h1_ms_tv(x->timeout_ms, &tv);
		event_add(x->c->ev_r, &tv);
	}
}

/* Attach x to c and send; failures are deferred (never a callback here). */
static void
xfer_attach(h1_xfer *x, h1_conn *c)
{
	int rc;

	x->c = c;
	c->x = x;
	c->seq++;
	x->sent = 0;
	x->got_bytes = false;
	if (c->fail != H1_OK) {
		conn_defer_fail(c, c->fail);
		return;
	}
	arm_timeout(x);
	rc = xfer_send(x);
	if (rc == 0)
		return;
	if (rc == EAGAIN) {
		wait_writable(x);
		return;
	}
	if (!c->connected && connect_errno(rc))
		conn_defer_fail(c, H1_ECONNREFUSED);
	else
		conn_defer_fail(c, H1_ERESET);
}

/* A pooled connection failed before any response byte: once, a fresh one
 * (from a callback of the loop; false when not allowed). */
static bool
xfer_replay(h1_xfer *x)
{
	h1_conn *c = x->c, *n;

	if (!c->reused || x->replayed || x->got_bytes)
		return false;
	if ((n = conn_open(x->pool, x->up)) == NULL)
		return false;
	x->replayed = true;
	x->pool->st.replays++;
	conn_close(c);
	xfer_attach(x, n);
	return true;
}

h1_xfer *
h1_start(h1_pool *p, h1_upstream *u, const h1_req *r, const h1_cbs *cbs,
    void *arg)
{
	h1_xfer *x;
	h1_conn *c;

	if ((x = xfer_new(p)) == NULL)
		return NULL;
	x->up = u;
	x->cbs = cbs;
	x->arg = arg;
	x->timeout_ms = r->timeout_ms;
	x->replayed = x->paused = x->got_bytes = false;
	build_iov(x, r);
	if ((c = u->idle) != NULL) {
		idle_unlink(c);
		c->state = C_ACTIVE;
		c->reused = true;
		p->st.reuses++;
		if (x->timeout_ms == 0)
			event_remove_timer(c->ev_r);
		xfer_attach(x, c);
		return x;
	}
	if ((c = conn_open(p, u)) == NULL) {
		xfer_free(x);
		return NULL;
	}
	xfer_attach(x, c);
	return x;
}

/* The transfer failed with err: replay or report; the connection closes. */
static void
xfer_fail(h1_xfer *x, int err)
{
	h1_conn *c = x->c;

	if (err == H1_ERESET && xfer_replay(x))
		return;
	if (err == H1_ERESET && x->got_bytes)
		err = H1_ECLOSED;
	conn_close(c);
	xfer_finish(x, err);
}

void
h1_cancel(h1_xfer *x)
{
	if (x == NULL)
		return;
	if (x->c != NULL)
		conn_close(x->c);
	xfer_free(x);
}

void
h1_pause(h1_xfer *x)
{
	h1_conn *c = x->c;

	if (x->paused)
		return;
	x->paused = true;
	if (c != NULL && c->reading) {
		event_del(c->ev_r);
		c->reading = false;
	}
}

void
h1_resume(h1_xfer *x)
{
	h1_conn *c = x->c;
	struct timeval tv;

	if (!x->paused)
		return;
	x->paused = false;
	if (c == NULL || c->state != C_ACTIVE || c->fd < 0)
		return;
	if (!c->reading) {
		if (x->timeout_ms > 0) {
			h1_ms_tv(x->timeout_ms, &tv);
			event_add(c->ev_r, &tv);
		} else
			event_add(c->ev_r, NULL);
		c->reading = true;
	}
	if (c->rpos < c->rlen)
		event_active(c->ev_r, EV_READ, 1);
}

bool
h1_got_bytes(const h1_xfer *x)
{
	return x->got_bytes;
}

/* --- response parsing ---------------------------------------------------------- */

/* Is the last coding of a Transfer-Encoding value "chunked"? */
static bool
last_chunked(const char *v, size_t n)
{
	const char *c = v + n;
	size_t l;

	while (c > v && c[-1] != ',')
		c--;
	l = n - (size_t)(c - v);
	h1_trim_ows(&c, &l);
	return H1_IEQ(c, l, "chunked");
}

/* Length of the next line at s (up to and including '\n'), 0: none. */
static size_t
line_len(const char *s, size_t n)
{
	const char *nl = memchr(s, '\n', n);

	return nl != NULL ? (size_t)(nl - s) + 1 : 0;
}

/* Strip the line ending; -1 when a CR or NUL is inside the line. */
static int
line_body(const char *s, size_t *n)
{
	size_t l = *n - 1;

	if (l > 0 && s[l - 1] == '\r')
		l--;
	if (memchr(s, '\r', l) != NULL || memchr(s, '\0', l) != NULL)
		return -1;
	*n = l;
	return 0;
}

static int
parse_status(const char *s, size_t n, h1_resp *r)
{
	size_t i;

	/* HTTP/1.x SP 3DIGIT [SP reason] */
	if (n < 12 || memcmp(s, "HTTP/1.", 7) != 0 || s[7] < '0' ||
	    s[7] > '9' || s[8] != ' ')
		return -1;
	r->minor = s[7] - '0';
	r->status = 0;
	for (i = 9; i < 12; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		r->status = r->status * 10 + (s[i] - '0');
	}
	if (r->status < 100)
		return -1;
	if (n > 12 && s[12] != ' ')
		return -1;
	r->reason = n > 13 ? s + 13 : s + n;
	r->reason_len = n > 13 ? n - 13 : 0;
	return 0;
}

static int
parse_clen(const char *v, size_t n, int64_t *out)
{
	uint64_t x = 0;
	size_t i;

	if (n == 0 || n > 18)
		return -1;
	for (i = 0; i < n; i++) {
		if (v[i] < '0' || v[i] > '9')
			return -1;
		x = x * 10 + (uint64_t)(v[i] - '0');
	}
	if (*out >= 0 && (uint64_t)*out != x)
		return -1;		/* conflicting lengths */
	*out = (int64_t)x;
	return 0;
}

/* One field line into r (hdrs array); -1: malformed. */
static int
parse_field(h1_pool *p, const char *s, size_t n, h1_resp *r, bool *te,
    bool *conn_close, bool *conn_ka)
{
	const char *colon = memchr(s, ':', n), *v;
	size_t nl, vl, i;
	h1_header *h;

	if (colon == NULL || colon == s || r->nheaders >= p->lim.max_headers)
		return -1;
	nl = (size_t)(colon - s);
	for (i = 0; i < nl; i++)
		if (!h1_tchar((unsigned char)s[i]))
			return -1;
	v = colon + 1;
	vl = n - nl - 1;
	h1_trim_ows(&v, &vl);
	h = &p->hdrs[r->nheaders++];
	h->name = s;
	h->name_len = nl;
	h->value = v;
	h->value_len = vl;
	if (H1_IEQ(s, nl, "content-length")) {
		if (parse_clen(v, vl, &r->content_length) != 0)
			return -1;
	} else if (H1_IEQ(s, nl, "transfer-encoding")) {
		*te = true;
		r->chunked = last_chunked(v, vl);
	} else if (H1_IEQ(s, nl, "connection")) {
		if (H1_HAS_TOKEN(v, vl, "close"))
			*conn_close = true;
		if (H1_HAS_TOKEN(v, vl, "keep-alive"))
			*conn_ka = true;
	}
	return 0;
}

/*
 * The header block rbuf[rpos..rpos+len) (complete, ends with an empty
 * line) into r; -1: malformed.
 */
static int
parse_head(h1_conn *c, size_t len, h1_resp *r)
{
	h1_pool *p = c->pool;
	const char *s = c->rbuf + c->rpos, *end = s + len;
	size_t l = line_len(s, len);
	bool te = false, cclose = false, cka = false;

	memset(r, 0, sizeof(*r));
	r->content_length = -1;
	r->headers = p->hdrs;
	if (line_body(s, &l) != 0 || parse_status(s, l, r) != 0)
		return -1;
	s += line_len(s, len);
	for (;;) {
		size_t ll = line_len(s, (size_t)(end - s));

		l = ll;
		if (ll == 0 || line_body(s, &l) != 0)
			return -1;
		if (l == 0)
			break;
		if (s[0] == ' ' || s[0] == '\t')
			return -1;	/* obs-fold */
		if (parse_field(p, s, l, r, &te, &cclose, &cka) != 0)
			return -1;
		s += ll;
	}
	if (te) {
		if (!r->chunked)
			cclose = true;	/* read until close */
		if (r->content_length >= 0)
			cclose = true;	/* both: TE wins, do not reuse */
		r->content_length = -1;
	}
	r->keep_alive = !cclose && (r->minor >= 1 || cka);
	return 0;
}

/* Length of the complete header block at rpos, 0: not yet, -1: too big. */
static long
head_end(h1_conn *c)
{
	const char *s = c->rbuf + c->rpos;
	size_t n = c->rlen - c->rpos, i = c->hscan;

	for (; i < n; i++) {
		if (s[i] != '\n')
			continue;
		if ((i >= 1 && s[i - 1] == '\n') ||
		    (i >= 2 && s[i - 1] == '\r' && s[i - 2] == '\n'))
			return (long)(i + 1);
	}
	c->hscan = n;
	if (n >= c->pool->hmax)
		return -1;
	return 0;
}

/* Status codes and methods that carry no body. */
static bool
no_body(const h1_xfer *x, int status)
{
	return (x != NULL && x->is_head) || status == 204 || status == 304 ||
	    (status >= 100 && status < 200);
}

/* The response is complete: conn to the pool, transfer reported. */
static void
resp_done(h1_conn *c)
{
	h1_xfer *x = c->x;

	c->ps = P_DONE;
	if (x != NULL && x->sent != x->total)
		c->keep_alive = false;
	conn_release(c);
	if (x != NULL)
		xfer_finish(x, H1_OK);
}

/* Is draining the rest of this body cheap enough to keep the conn? */
static bool
drain_ok(h1_conn *c)
{
	if (!c->keep_alive)
		return false;
	if (c->ps == P_BODY_CL)
		return c->remain <= c->pool->lim.drain_max;
	return c->ps == P_CH_SIZE;
}

/*
 * The header block of length len is complete.  Returns 1 to go on
 * parsing this connection, 0 to stop (the connection changed hands).
 */
static int
on_head(h1_conn *c, size_t len)
{
	h1_xfer *x = c->x;
	h1_resp r;
	uint64_t seq = c->seq;
	struct timeval tv;
	int v;

	if (parse_head(c, len, &r) != 0) {
		xfer_fail(x, H1_EMALFORMED);
		return 0;
	}
	if (r.status == 101) {
		xfer_fail(x, H1_EMALFORMED);
		return 0;
	}
	if (r.status >= 100 && r.status < 200) {
		c->rpos += len;
		c->hscan = 0;
		return 1;			/* interim: the next head */
	}
	c->keep_alive = r.keep_alive;
	if (no_body(x, r.status))
		c->ps = P_DONE;
	else if (r.chunked)
		c->ps = P_CH_SIZE;
	else if (r.content_length >= 0) {
		c->ps = P_BODY_CL;
		c->remain = (uint64_t)r.content_length;
	} else {
		c->ps = P_BODY_EOF;
		c->keep_alive = false;
	}
	v = x->cbs->on_headers(x->arg, &r);
	if (c->seq != seq)
		return 0;			/* cancelled from the callback */
	c->rpos += len;
	c->hscan = 0;
	if (v == H1_ABORT) {
		h1_cancel(x);
		return 0;
	}
	if (v == H1_DISCARD) {
		if (c->ps == P_DONE || (c->ps == P_BODY_CL && c->remain == 0)) {
			resp_done(c);
			return 0;
		}
		if (!drain_ok(c) || x->sent != x->total || !c->reading) {
			conn_close(c);
			xfer_finish(x, H1_OK);
			return 0;
		}
		c->x = NULL;
		c->seq++;
		c->state = C_DRAIN;
		x->c = NULL;
		h1_ms_tv(c->pool->lim.idle_timeout_ms, &tv);
		event_add(c->ev_r, &tv);
		xfer_finish(x, H1_OK);
		/* drain what is buffered now, the rest as it comes */
		return c->state == C_DRAIN && c->seq == seq + 1;
	}
	if (c->ps == P_DONE || (c->ps == P_BODY_CL && c->remain == 0)) {
		resp_done(c);
		return 0;
	}
	return 1;
}

/* Body bytes: to the caller, or counted when draining.  1: go on. */
static int
deliver(h1_conn *c, size_t n)
{
	h1_xfer *x = c->x;
	const char *s = c->rbuf + c->rpos;
	uint64_t seq = c->seq;

	c->rpos += n;
	if (x == NULL) {
		c->drained += n;
		if (c->drained > c->pool->lim.drain_max) {
			conn_close(c);
			return 0;
		}
		return 1;
	}
	if (n > 0)
		x->cbs->on_data(x->arg, s, n);
	return c->seq == seq;
}

/* Parse a chunk-size line; 1: parsed, 0: need more, -1: malformed. */
static int
chunk_size(h1_conn *c)
{
	const char *s = c->rbuf + c->rpos;
	size_t n = c->rlen - c->rpos, l = line_len(s, n), i;
	uint64_t v = 0;

	if (l == 0)
		return n >= H1_LINE_MAX ? -1 : 0;
	for (i = 0; i < l; i++) {
		int d = h1_hexval(s[i]);

		if (d < 0)
			break;
		if (i >= 15)
			return -1;
		v = v * 16 + (uint64_t)d;
	}
	if (i == 0 || (s[i] != '\r' && s[i] != '\n' && s[i] != ';' &&
	    s[i] != ' ' && s[i] != '\t'))
		return -1;
	c->rpos += l;
	c->remain = v;
	c->ps = v == 0 ? P_CH_TRAILER : P_CH_DATA;
	return 1;
}

/* Run the parser over the buffered bytes.  1: wants more input, 0: stop. */
static int
parse(h1_conn *c)
{
	for (;;) {
		size_t avail = c->rlen - c->rpos, n;
		long hl;
		int rc;

		if (c->x != NULL && c->x->paused)
			return 0;
		switch (c->ps) {
		case P_HEAD:
			if (avail == 0)
				return 1;
			if ((hl = head_end(c)) < 0) {
				xfer_fail(c->x, H1_EMALFORMED);
				return 0;
			}
			if (hl == 0)
				return 1;
			if (on_head(c, (size_t)hl) == 0)
				return 0;
			break;
		case P_BODY_CL:
		case P_CH_DATA:
			if (avail == 0)
				return 1;
			n = avail < c->remain ? avail : (size_t)c->remain;
			c->remain -= n;
			if (c->remain == 0)
				c->ps = c->ps == P_CH_DATA ? P_CH_CRLF : P_DONE;
			if (deliver(c, n) == 0)
				return 0;
			if (c->ps == P_DONE) {
				resp_done(c);
				return 0;
			}
			break;
		case P_BODY_EOF:
			if (avail == 0)
				return 1;
			if (deliver(c, avail) == 0)
				return 0;
			break;
		case P_CH_SIZE:
			if ((rc = chunk_size(c)) < 0)
				goto bad;
			if (rc == 0)
				return 1;
			break;
		case P_CH_CRLF:
			if (avail < 1 || (c->rbuf[c->rpos] == '\r' &&
			    avail < 2))
				return 1;
			if (c->rbuf[c->rpos] == '\r')
				c->rpos++;
			if (c->rbuf[c->rpos] != '\n')
				goto bad;
			c->rpos++;
			c->ps = P_CH_SIZE;
			break;
		case P_CH_TRAILER:
			if ((n = line_len(c->rbuf + c->rpos, avail)) == 0) {
				if (avail >= H1_LINE_MAX)
					goto bad;
				return 1;
			}
			c->rpos += n;
			c->tbytes += n;
			if (c->tbytes > c->pool->hmax)
				goto bad;
			if (n == 1 || (n == 2 && c->rbuf[c->rpos - 2] == '\r')) {
				resp_done(c);
				return 0;
			}
			break;
		default:
			return 0;
		}
	}
bad:
	if (c->x != NULL)
		xfer_fail(c->x, H1_EMALFORMED);
	else
		conn_close(c);
	return 0;
}

/* --- socket events ---------------------------------------------------------------- */

/* EOF from the server. */
static void
conn_eof(h1_conn *c)
{
	h1_xfer *x = c->x;

	if (x == NULL) {
		conn_close(c);
		return;
	}
	if (c->ps == P_BODY_EOF) {
		c->ps = P_DONE;
		conn_close(c);
		xfer_finish(x, H1_OK);
		return;
	}
	xfer_fail(x, x->got_bytes ? H1_ECLOSED : H1_ERESET);
}

static void
conn_error(h1_conn *c, int e)
{
	h1_xfer *x = c->x;

	if (x == NULL) {
		conn_close(c);
		return;
	}
	if (!c->connected && !x->got_bytes && connect_errno(e))
		xfer_fail(x, H1_ECONNREFUSED);
	else
		xfer_fail(x, x->got_bytes ? H1_ECLOSED : H1_ERESET);
}

/* An idle connection became readable: the server closed it (or sent
 * bytes nobody asked for); either way it is done. */
static void
idle_readable(h1_conn *c)
{
	char b[64];
	ssize_t n = recv(c->fd, b, sizeof(b), 0);

	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK ||
	    errno == EINTR))
		return;
	conn_close(c);
}

static void
conn_input(h1_conn *c)
{
	uint64_t seq = c->seq;
	h1_xfer *x = c->x;
	ssize_t n;
	size_t space;

	if (c->rpos < c->rlen && (parse(c) == 0 || c->seq != seq))
		return;
	for (;;) {
		if (c->rpos == c->rlen)
			c->rpos = c->rlen = 0;
		else if (c->rpos > 0) {
			memmove(c->rbuf, c->rbuf + c->rpos, c->rlen - c->rpos);
			c->rlen -= c->rpos;
			if (c->hscan > 0 && c->ps != P_HEAD)
				c->hscan = 0;
			c->rpos = 0;
		}
		space = c->pool->lim.rbuf_size - c->rlen;
		if (space == 0) {		/* cannot happen: bounded */
			if (x != NULL)
				xfer_fail(x, H1_EMALFORMED);
			else
				conn_close(c);
			return;
		}
		n = recv(c->fd, c->rbuf + c->rlen, space, 0);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				conn_error(c, errno);
			return;
		}
		if (n == 0) {
			conn_eof(c);
			return;
		}
		c->rlen += (size_t)n;
		if (x != NULL) {
			x->got_bytes = true;
			c->connected = true;
		}
		if (parse(c) == 0 || c->seq != seq)
			return;
		if ((size_t)n < space)
			break;
	}
	if (x != NULL)
		arm_timeout(x);
}

static void
read_event(h1_conn *c, short what)
{
	if (c->state == C_IDLE) {
		if (what & EV_TIMEOUT)
			conn_close(c);
		else
			idle_readable(c);
		return;
	}
	if (c->state != C_ACTIVE && c->state != C_DRAIN)
		return;
	if (what & EV_TIMEOUT) {
		if (c->x != NULL)
			xfer_fail(c->x, H1_ETIMEDOUT);
		else
			conn_close(c);
		return;
	}
	if (c->x != NULL && c->x->paused)
		return;
	conn_input(c);
}

/* Callbacks may close c: it is recycled only once they have returned. */
static void
conn_on_read(evutil_socket_t fd, short what, void *arg)
{
	h1_conn *c = arg;

	(void)fd;
	c->busy++;
	read_event(c, what);
	if (--c->busy == 0 && c->state == C_DEAD)
		conn_recycle(c);
}

static void
write_event(h1_conn *c, short what)
{
	h1_xfer *x = c->x;
	int rc;

	c->ev_w_added = false;
	if (x == NULL || c->state != C_ACTIVE)
		return;
	if (c->fail != H1_OK) {
		int err = c->fail;

		c->fail = H1_OK;
		xfer_fail(x, err);
		return;
	}
	if (what & EV_TIMEOUT) {
		xfer_fail(x, c->connected ? H1_ERESET : H1_ECONNTIMEDOUT);
		return;
	}
	rc = xfer_send(x);
	if (rc == 0)
		return;
	if (rc == EAGAIN) {
		wait_writable(x);
		return;
	}
	if (!c->connected && connect_errno(rc))
		xfer_fail(x, H1_ECONNREFUSED);
	else
		xfer_fail(x, H1_ERESET);
}

static void
conn_on_write(evutil_socket_t fd, short what, void *arg)
{
	h1_conn *c = arg;

	(void)fd;
	c->busy++;
	write_event(c, what);
	if (--c->busy == 0 && c->state == C_DEAD)
		conn_recycle(c);
}
