/*
 * fuzz_h1.c — sg-proxy's native HTTP/1.1 upstream client (bin/sg-proxy/h1.c)
 * against an engine that answers with the fuzz input.
 *
 * The engine is a non-blocking server on 127.0.0.1 in this process, on
 * the client's own event loop.  The input is up to four responses,
 * separated by the line "@@NEXT@@\n"; the client sends one request after
 * another on one pool (so keep-alive reuse, replays on a closed pooled
 * connection, draining and the idle list all happen), and the server
 * answers the k-th request it reads with the k-th response, written in
 * pieces of a size the input chooses, one piece per loop turn.
 *
 * Control bytes first:
 *   [0] bits 0-2 piece size (1, 2, 7, 64, 512, 4096, all, all),
 *       bit 3 the server closes after every response (else only after
 *       the last), bits 4-5 the on_headers answer (continue, discard,
 *       abort, continue), bit 6 cancel in the first on_data, bit 7 pause
 *       in on_headers and resume on the next loop turn
 *   [1] bits 0-1 a HEAD request instead of POST
 *
 * Properties: every transfer ends exactly once (on_done, or the abort or
 * cancel the harness chose), within the response timeout; on_headers
 * comes at most once and before any body byte, with a final status
 * (200..999), an HTTP/1.x version and at most max_headers fields; a body
 * never exceeds its Content-Length, and a transfer that ends H1_OK with a
 * Content-Length delivered exactly that many bytes.  The pool frees
 * cleanly (no leak, no use after free).
 */
#include <sys/socket.h>

#include <netinet/in.h>
#include <arpa/inet.h>

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <event2/event.h>

#include "fuzz.h"
#include "sg-proxy/h1.h"

#define MAX_RESP	4
#define SEP		"@@NEXT@@\n"
#define TIMEOUT_MS	20

static int lfd = -1;		/* the engine's listening socket */
static char url[64];

/* --- the engine ----------------------------------------------------------- */

struct sconn {
	int		 fd;
	struct event	*ev_r, *ev_w;
	char		 req[8192];
	size_t		 rlen;
	const char	*out;		/* response being written */
	size_t		 olen, opos;
	bool		 close_after;
	struct sconn	*next;
};

static struct {
	struct event_base	*base;
	struct event		*ev_accept;
	const char		*resp[MAX_RESP];
	size_t			 rlen[MAX_RESP];
	size_t			 nresp, served, piece;
	bool			 close_each;
	struct sconn		*conns;
} eng;

static void
sconn_close(struct sconn *s)
{
	if (s->fd < 0)
		return;
	event_del(s->ev_r);
	event_del(s->ev_w);
	close(s->fd);
	s->fd = -1;
}

/* Write the next piece; the next one goes on the next loop turn. */
static void
on_swrite(evutil_socket_t fd, short what, void *arg)
{
	struct sconn *s = arg;
	size_t n = s->olen - s->opos;
	ssize_t w;

	(void)what;
	if (n > eng.piece)
		n = eng.piece;
	if (n > 0) {
		w = send(fd, s->out + s->opos, n, MSG_NOSIGNAL);
		if (w < 0 && errno != EAGAIN) {
			sconn_close(s);
			return;
		}
		if (w > 0)
			s->opos += (size_t)w;
	}
	if (s->opos < s->olen) {
		event_add(s->ev_w, NULL);
		return;
	}
	s->out = NULL;
	if (s->close_after)
		sconn_close(s);
}

/* A whole request (head, and the 2-byte body of a POST) has arrived. */
static bool
request_complete(const struct sconn *s)
{
	const char *e = memmem(s->req, s->rlen, "\r\n\r\n", 4);

	if (e == NULL)
		return false;
	if (strncmp(s->req, "POST", 4) == 0)
		return (size_t)(e + 4 - s->req) + 2 <= s->rlen;
	return true;
}

static void
on_sread(evutil_socket_t fd, short what, void *arg)
{
	struct sconn *s = arg;
	ssize_t n;
	size_t k;

	(void)what;
	n = recv(fd, s->req + s->rlen, sizeof(s->req) - s->rlen, 0);
	if (n <= 0) {
		if (n == 0 || errno != EAGAIN)
			sconn_close(s);
		return;
	}
	s->rlen += (size_t)n;
	if (s->out != NULL || !request_complete(s)) {
		if (s->rlen == sizeof(s->req))
			sconn_close(s);
		return;
	}
	s->rlen = 0;
	if (eng.served == eng.nresp) {	/* no answer left */
		sconn_close(s);
		return;
	}
	k = eng.served++;
	s->out = eng.resp[k];
	s->olen = eng.rlen[k];
	s->opos = 0;
	s->close_after = eng.close_each || eng.served == eng.nresp;
	event_add(s->ev_w, NULL);
}

static void
on_accept(evutil_socket_t fd, short what, void *arg)
{
	struct sconn *s;
	int c;

	(void)what;
	(void)arg;
	if ((c = accept(fd, NULL, NULL)) < 0)
		return;
	FZ_ASSERT((s = calloc(1, sizeof(*s))) != NULL);
	(void)fcntl(c, F_SETFL, O_NONBLOCK);
	s->fd = c;
	FZ_ASSERT((s->ev_r = event_new(eng.base, c, EV_READ | EV_PERSIST,
	    on_sread, s)) != NULL);
	FZ_ASSERT((s->ev_w = event_new(eng.base, c, EV_WRITE, on_swrite,
	    s)) != NULL);
	event_add(s->ev_r, NULL);
	s->next = eng.conns;
	eng.conns = s;
}

/* --- the client ----------------------------------------------------------- */

struct xfer {
	h1_xfer		*x;
	bool		 started, headers, ended;
	int		 verdict, err;
	int64_t		 cl;
	bool		 chunked, bodyless;
	uint64_t	 got;
};

static struct {
	h1_pool		*pool;
	h1_upstream	*up;
	h1_req		 req;
	h1_cbs		 cbs;
	struct xfer	 t[MAX_RESP];
	size_t		 n, cur;
	int		 verdict;
	bool		 cancel, pause, head;
	struct event	*ev_next, *ev_resume;
	bool		 finished;
} cl;

static void	start_next(void);

static void
end_xfer(struct xfer *t)
{
	FZ_ASSERT(!t->ended);
	t->ended = true;
	/* start the next one from the loop, not from inside a callback */
	event_active(cl.ev_next, EV_TIMEOUT, 1);
}

static int
on_headers(void *arg, const h1_resp *r)
{
	struct xfer *t = arg;
	size_t i;

	FZ_ASSERT(!t->headers && !t->ended && t->got == 0);
	t->headers = true;
	FZ_ASSERT(r->status >= 200 && r->status <= 999);
	FZ_ASSERT(r->minor >= 0 && r->minor <= 9);	/* HTTP/1.DIGIT */
	FZ_ASSERT(r->nheaders <= 100);
	for (i = 0; i < r->nheaders; i++)
		FZ_ASSERT(r->headers[i].name_len > 0);
	FZ_ASSERT(r->content_length >= -1);
	t->cl = r->content_length;
	t->chunked = r->chunked;
	t->bodyless = cl.head || r->status == 204 || r->status == 304;
	t->verdict = cl.verdict;
	if (t->verdict == H1_ABORT) {
		end_xfer(t);
		return H1_ABORT;
	}
	if (cl.pause && t->verdict == H1_CONTINUE) {
		h1_pause(t->x);
		event_active(cl.ev_resume, EV_TIMEOUT, 1);
	}
	return t->verdict;
}

static void
on_data(void *arg, const char *p, size_t n)
{
	struct xfer *t = arg;

	(void)p;
	FZ_ASSERT(t->headers && !t->ended && t->verdict == H1_CONTINUE);
	FZ_ASSERT(n > 0);
	t->got += n;
	if (t->cl >= 0 && !t->chunked)
		FZ_ASSERT(t->got <= (uint64_t)t->cl);
	if (cl.cancel) {
		h1_cancel(t->x);
		end_xfer(t);
	}
}

static void
on_done(void *arg, int err)
{
	struct xfer *t = arg;

	FZ_ASSERT(t->started);
	t->err = err;
	FZ_ASSERT(err >= H1_OK && err <= H1_ECLOSED);
	if (err == H1_OK) {
		FZ_ASSERT(t->headers);
		if (t->verdict == H1_CONTINUE && t->cl >= 0 && !t->chunked &&
		    !t->bodyless)
			FZ_ASSERT(t->got == (uint64_t)t->cl);
	}
	end_xfer(t);
}

static void
on_resume(evutil_socket_t fd, short what, void *arg)
{
	struct xfer *t = &cl.t[cl.cur];

	(void)fd;
	(void)what;
	(void)arg;
	if (t->started && !t->ended)
		h1_resume(t->x);
}

static void
start_next(void)
{
	struct xfer *t;

	if (cl.cur + 1 >= cl.n && cl.t[cl.cur].started) {
		cl.finished = true;
		event_base_loopbreak(eng.base);
		return;
	}
	if (cl.t[cl.cur].started)
		cl.cur++;
	t = &cl.t[cl.cur];
	t->started = true;
	t->cl = -1;
	FZ_ASSERT((t->x = h1_start(cl.pool, cl.up, &cl.req, &cl.cbs, t)) !=
	    NULL);
}

static void
on_next(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	start_next();
}

static void
on_deadline(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	event_base_loopbreak(eng.base);
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	struct sockaddr_in sa;
	socklen_t len = sizeof(sa);

	(void)argc;
	(void)argv;
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	FZ_ASSERT((lfd = socket(AF_INET, SOCK_STREAM, 0)) >= 0);
	FZ_ASSERT(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	FZ_ASSERT(listen(lfd, 64) == 0);
	FZ_ASSERT(getsockname(lfd, (struct sockaddr *)&sa, &len) == 0);
	(void)fcntl(lfd, F_SETFL, O_NONBLOCK);
	snprintf(url, sizeof(url), "http://127.0.0.1:%u/base",
	    (unsigned)ntohs(sa.sin_port));
	return 0;
}

/* Split the responses at SEP. */
static void
split_responses(const char *p, size_t n)
{
	const char *e = p + n, *s;

	eng.nresp = 0;
	while (eng.nresp < MAX_RESP) {
		s = eng.nresp + 1 < MAX_RESP ?
		    memmem(p, (size_t)(e - p), SEP, sizeof(SEP) - 1) : NULL;
		eng.resp[eng.nresp] = p;
		eng.rlen[eng.nresp] = s != NULL ? (size_t)(s - p) :
		    (size_t)(e - p);
		eng.nresp++;
		if (s == NULL)
			break;
		p = s + sizeof(SEP) - 1;
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const size_t pieces[] = { 1, 2, 7, 64, 512, 4096, SIZE_MAX,
	    SIZE_MAX };
	static const int verdicts[] = { H1_CONTINUE, H1_DISCARD, H1_ABORT,
	    H1_CONTINUE };
	struct event *dl;
	struct timeval tv = { 5, 0 };
	struct sconn *s, *next;
	size_t i;

	if (size < 2 || size > 65536)
		return 0;
	memset(&eng, 0, sizeof(eng));
	memset(&cl, 0, sizeof(cl));
	eng.piece = pieces[data[0] & 7];
	eng.close_each = data[0] & 0x08;
	cl.verdict = verdicts[(data[0] >> 4) & 3];
	cl.cancel = data[0] & 0x40;
	cl.pause = data[0] & 0x80;
	cl.head = (data[1] & 3) == 0;
	split_responses((const char *)data + 2, size - 2);
	cl.n = eng.nresp;

	FZ_ASSERT((eng.base = event_base_new()) != NULL);
	FZ_ASSERT((eng.ev_accept = event_new(eng.base, lfd,
	    EV_READ | EV_PERSIST, on_accept, NULL)) != NULL);
	event_add(eng.ev_accept, NULL);
	FZ_ASSERT((cl.ev_next = event_new(eng.base, -1, 0, on_next,
	    NULL)) != NULL);
	FZ_ASSERT((cl.ev_resume = event_new(eng.base, -1, 0, on_resume,
	    NULL)) != NULL);
	FZ_ASSERT((dl = evtimer_new(eng.base, on_deadline, NULL)) != NULL);
	evtimer_add(dl, &tv);
	FZ_ASSERT((cl.pool = h1_pool_new(eng.base, NULL)) != NULL);
	FZ_ASSERT(h1_upstream_get(cl.pool, url, &cl.up) == 0);
	cl.req.method = cl.head ? "HEAD" : "POST";
	cl.req.prefix = h1_url_path(url, &cl.req.prefix_len);
	cl.req.target = "/v1/chat/completions";
	cl.req.target_len = strlen(cl.req.target);
	cl.req.hdrs = "content-type: application/json\r\n";
	cl.req.hdrs_len = strlen(cl.req.hdrs);
	cl.req.body = cl.head ? NULL : "{}";
	cl.req.body_len = cl.head ? 0 : 2;
	cl.req.timeout_ms = TIMEOUT_MS;
	cl.cbs.on_headers = on_headers;
	cl.cbs.on_data = on_data;
	cl.cbs.on_done = on_done;

	start_next();
	event_base_dispatch(eng.base);
	/* every transfer ended, well within the deadline */
	FZ_ASSERT(cl.finished);
	for (i = 0; i < cl.n; i++)
		FZ_ASSERT(cl.t[i].started && cl.t[i].ended);

	h1_pool_free(cl.pool);
	for (s = eng.conns; s != NULL; s = next) {
		next = s->next;
		sconn_close(s);
		event_free(s->ev_r);
		event_free(s->ev_w);
		free(s);
	}
	/* connections the engine has not accepted yet */
	for (;;) {
		int c = accept(lfd, NULL, NULL);

		if (c < 0)
			break;
		close(c);
	}
	event_free(dl);
	event_free(cl.ev_next);
	event_free(cl.ev_resume);
	event_free(eng.ev_accept);
	event_base_free(eng.base);
	return 0;
}
