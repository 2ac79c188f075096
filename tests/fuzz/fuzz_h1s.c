/*
 * fuzz_h1s.c — sg-proxy's HTTP/1.1 server (bin/sg-proxy/h1s.c) against a
 * client that sends the fuzz input.
 *
 * The server adopts one end of a socketpair on a fresh event loop; the
 * harness writes the input to the other end in pieces of a size the
 * input chooses, one piece per loop turn, then shuts its side down (so
 * every connection ends without waiting for a timer) and reads
 * everything the server answers.
 *
 * Control bytes first:
 *   [0] bits 0-2 piece size (1, 2, 7, 64, 512, 4096, all, all);
 *       bits 3-5 the application: answer at once (whole reply), stream
 *       it (chunked or close-delimited), stream with a Content-Length,
 *       hold and answer on the next turn, abort on the next turn, answer
 *       with Connection: close, stream with a short Content-Length,
 *       answer 204 streamed; bit 6 small limits (target 64, fields 256
 *       bytes / 8, body 256);
 *   [1] bit 0 the client keeps its side open until the server is quiet.
 *
 * Properties: every request handed over (on_request or on_error) ends
 * exactly once (on_complete or on_close), or was aborted; nothing is
 * handed over after an on_error on the connection; a request's method,
 * target and fields are NUL-terminated where they say, field names are
 * tokens and values hold no CR, LF or NUL; a body never exceeds max_body;
 * what the server wrote is a sequence of well-formed responses (status
 * line, fields, then a body framed by Content-Length, chunked coding or
 * the close), one per request whose on_complete ran, in order (an
 * interim 100 Continue allowed before one); and the server frees cleanly.
 */
#include <sys/socket.h>

#include <netinet/in.h>
#include <arpa/inet.h>

#include <errno.h>
#include <fcntl.h>
#include <strings.h>
#include <unistd.h>

#include <event2/event.h>

#include "fuzz.h"
#include "sg-proxy/h1s.h"

#define MAX_REQ		64
#define TURNS		400

static int lfd = -1;

enum app { A_REPLY, A_STREAM, A_STREAM_CL, A_HOLD, A_ABORT, A_CLOSE,
	A_SHORT, A_204 };

static struct {
	struct event_base	*base;
	h1s_server		*s;
	h1s_limits		 lim;
	int			 app;
	int			 cfd;
	h1s_req			*held;
	bool			 held_error;
	int			 handed, ended, completes, aborted;
	bool			 errored;
	bool			 head[MAX_REQ];	/* per request handed */
	bool			 done[MAX_REQ];	/* completed */
	int			 idx_of_held;
	char			 out[1 << 17];
	size_t			 outlen;
} f;

struct rctx {
	int	idx;
	bool	ended;
};

static struct rctx ctxs[MAX_REQ];

static void
on_end(h1s_req *r, void *arg, bool complete)
{
	struct rctx *x = arg;

	(void)r;
	FZ_ASSERT(!x->ended);
	x->ended = true;
	f.ended++;
	if (complete) {
		f.completes++;
		f.done[x->idx] = true;
	}
	if (f.held == r)
		f.held = NULL;
}

static void
on_complete(h1s_req *r, void *arg)
{
	on_end(r, arg, true);
}

static void
on_close(h1s_req *r, void *arg)
{
	on_end(r, arg, false);
}

/* The head accessors keep their promises. */
static void
check_head(const h1s_req *r)
{
	const h1s_header *h;
	size_t n, i, tl;
	const char *tgt = h1s_target(r, &tl);

	FZ_ASSERT(strlen(tgt) == tl);
	FZ_ASSERT(h1s_minor(r) == 0 || h1s_minor(r) == 1);
	FZ_ASSERT(strlen(h1s_path(r)) <= tl);
	(void)strlen(h1s_method_str(r));
	h = h1s_headers(r, &n);
	FZ_ASSERT(n <= f.lim.max_headers);
	for (i = 0; i < n; i++) {
		FZ_ASSERT(h[i].name_len > 0);
		FZ_ASSERT(strlen(h[i].name) == h[i].name_len);
		FZ_ASSERT(strlen(h[i].value) == h[i].value_len);
		FZ_ASSERT(strpbrk(h[i].value, "\r\n") == NULL);
		FZ_ASSERT(strpbrk(h[i].name, " \t:\r\n") == NULL);
		FZ_ASSERT(h1s_find_header(r, h[i].name) != NULL);
	}
}

static struct rctx *
hand(h1s_req *r)
{
	struct rctx *x;

	FZ_ASSERT(!f.errored);
	FZ_ASSERT(f.handed < MAX_REQ);
	x = &ctxs[f.handed];
	x->idx = f.handed;
	x->ended = false;
	f.head[f.handed] = h1s_method(r) == H1S_HEAD;
	f.handed++;
	h1s_on_complete(r, on_complete, x);
	h1s_on_close(r, on_close, x);
	check_head(r);
	return x;
}

static void
answer(h1s_req *r)
{
	size_t bl;
	const char *b = h1s_body(r, &bl);

	switch (f.app) {
	case A_STREAM:
		h1s_reply_start(r, 200, NULL, -1);
		h1s_reply_chunk(r, "data: 1\n\n", 9);
		h1s_reply_chunk(r, b, bl);
		h1s_reply_end(r);
		break;
	case A_STREAM_CL:
		h1s_reply_start(r, 200, NULL, (int64_t)bl + 3);
		h1s_reply_chunk(r, "abc", 3);
		h1s_reply_chunk(r, b, bl);
		h1s_reply_end(r);
		break;
	case A_SHORT:
		h1s_reply_start(r, 200, NULL, (int64_t)bl + 10);
		h1s_reply_chunk(r, b, bl);
		h1s_reply_end(r);
		break;
	case A_204:
		h1s_reply_start(r, 204, NULL, -1);
		h1s_reply_chunk(r, "x", 1);
		h1s_reply_end(r);
		break;
	case A_CLOSE:
		h1s_set_close(r);
		/* FALLTHROUGH */
	default:
		h1s_add_header(r, "Content-Type", "text/plain");
		h1s_reply(r, 200, NULL, b, bl);
		break;
	}
}

static void
on_request(void *arg, h1s_req *r)
{
	size_t bl;

	(void)arg;
	hand(r);
	(void)h1s_body(r, &bl);
	FZ_ASSERT(bl <= f.lim.max_body);
	if (f.app == A_HOLD || f.app == A_ABORT) {
		FZ_ASSERT(f.held == NULL);
		f.held = r;
		f.held_error = false;
		f.idx_of_held = f.handed - 1;
		return;
	}
	answer(r);
}

static void
on_error(void *arg, h1s_req *r, int status, const char *code,
    const char *message)
{
	(void)arg;
	FZ_ASSERT(status == 400 || status == 408 || status == 413 ||
	    status == 414 || status == 417 || status == 431 || status == 505);
	FZ_ASSERT(code != NULL && message != NULL);
	hand(r);
	f.errored = true;
	h1s_reply(r, status, NULL, message, strlen(message));
}

/* A later turn: the held request is answered (or aborted). */
static void
serve_held(void)
{
	h1s_req *r = f.held;

	if (r == NULL)
		return;
	f.held = NULL;
	if (f.app == A_ABORT) {
		f.aborted++;
		ctxs[f.idx_of_held].ended = true;
		f.ended++;
		h1s_abort(r);
		return;
	}
	if (h1s_client_gone(r)) {
		h1s_reply(r, 200, NULL, NULL, 0);	/* a no-op */
		return;
	}
	h1s_reply(r, 200, NULL, "held", 4);
}

static void
turn(void)
{
	struct timeval tv = { 0, 0 };
	ssize_t n;

	event_base_loopexit(f.base, &tv);
	event_base_loop(f.base, EVLOOP_NONBLOCK);
	for (;;) {
		if (f.outlen == sizeof(f.out)) {
			char sink[4096];

			n = recv(f.cfd, sink, sizeof(sink), 0);
			if (n <= 0)
				break;
			continue;
		}
		n = recv(f.cfd, f.out + f.outlen, sizeof(f.out) - f.outlen, 0);
		if (n <= 0)
			break;
		f.outlen += (size_t)n;
	}
}

/* --- checking what the server wrote ------------------------------------- */

static const char *
line_end(const char *p, const char *e)
{
	const char *q = memmem(p, (size_t)(e - p), "\r\n", 2);

	return q;
}

/* One response at *pp; false when the output is cut short (allowed only
 * for the last, unfinished one). */
static bool
check_response(const char **pp, const char *e, bool head, bool *interim)
{
	const char *p = *pp, *le;
	long long clen = -1;
	bool chunked = false;
	int status, i;

	le = line_end(p, e);
	if (le == NULL)
		return false;
	FZ_ASSERT(le - p >= 13);
	FZ_ASSERT(memcmp(p, "HTTP/1.1 ", 9) == 0 ||
	    memcmp(p, "HTTP/1.0 ", 9) == 0);
	for (status = 0, i = 9; i < 12; i++) {
		FZ_ASSERT(p[i] >= '0' && p[i] <= '9');
		status = status * 10 + (p[i] - '0');
	}
	FZ_ASSERT(p[12] == ' ');
	p = le + 2;
	for (;;) {
		const char *colon;

		if ((le = line_end(p, e)) == NULL)
			return false;
		if (le == p)
			break;
		colon = memchr(p, ':', (size_t)(le - p));
		FZ_ASSERT(colon != NULL && colon > p && colon[1] == ' ');
		if ((size_t)(colon - p) == 14 &&
		    strncasecmp(p, "content-length", 14) == 0) {
			FZ_ASSERT(clen < 0 && !chunked);
			clen = strtoll(colon + 2, NULL, 10);
		} else if ((size_t)(colon - p) == 17 &&
		    strncasecmp(p, "transfer-encoding", 17) == 0) {
			FZ_ASSERT(clen < 0 && !chunked);
			chunked = true;
		}
		p = le + 2;
	}
	p += 2;
	*interim = status == 100;
	if (status < 200 || status == 204 || status == 304) {
		FZ_ASSERT(clen < 0 && !chunked);
		*pp = p;
		return true;
	}
	if (head) {
		*pp = p;
		return true;
	}
	if (clen >= 0) {
		if (e - p < clen)
			return false;
		*pp = p + clen;
		return true;
	}
	if (!chunked) {
		*pp = e;		/* until the close */
		return true;
	}
	for (;;) {
		char *end;
		unsigned long long sz;

		if ((le = line_end(p, e)) == NULL)
			return false;
		sz = strtoull(p, &end, 16);
		FZ_ASSERT(end == le && end > p);
		p = le + 2;
		if (sz == 0) {
			if (e - p < 2)
				return false;
			FZ_ASSERT(p[0] == '\r' && p[1] == '\n');
			*pp = p + 2;
			return true;
		}
		if ((unsigned long long)(e - p) < sz + 2)
			return false;
		FZ_ASSERT(p[sz] == '\r' && p[sz + 1] == '\n');
		p += sz + 2;
	}
}

static void
check_output(void)
{
	const char *p = f.out, *e = f.out + f.outlen;
	int k = 0;
	bool interim;

	if (f.outlen == sizeof(f.out))
		return;			/* more than we keep: not checked */
	while (p < e) {
		/* skip requests that got no answer (client gone, aborted) */
		while (k < f.handed && !f.done[k])
			k++;
		if (!check_response(&p, e, k < f.handed && f.head[k],
		    &interim)) {
			FZ_ASSERT(k >= f.handed || !f.done[k] ||
			    f.app == A_SHORT);
			return;
		}
		if (interim)
			continue;
		FZ_ASSERT(k < f.handed);
		k++;
	}
}

/* --- the target -------------------------------------------------------- */

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	struct sockaddr_in sa;

	(void)argc;
	(void)argv;
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	FZ_ASSERT((lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0)) >= 0);
	FZ_ASSERT(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
	FZ_ASSERT(listen(lfd, 4) == 0);
	return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const size_t pieces[] = { 1, 2, 7, 64, 512, 4096, SIZE_MAX,
	    SIZE_MAX };
	static const h1s_cbs cbs = { on_request, on_error };
	const char *in;
	size_t n, pos = 0, piece;
	bool keep_open, shut = false;
	int sv[2], i, quiet = 0;
	h1s_stats st;

	if (size < 2 || size > 65536)
		return 0;
	if (lfd < 0)
		LLVMFuzzerInitialize(NULL, NULL);
	memset(&f, 0, sizeof(f));
	piece = pieces[data[0] & 7];
	f.app = (data[0] >> 3) & 7;
	keep_open = data[1] & 1;
	h1s_limits_default(&f.lim);
	if (data[0] & 0x40) {
		f.lim.max_target = 64;
		f.lim.max_header_bytes = 256;
		f.lim.max_headers = 8;
		f.lim.max_body = 256;
	}
	in = (const char *)data + 2;
	n = size - 2;

	FZ_ASSERT((f.base = event_base_new()) != NULL);
	FZ_ASSERT((f.s = h1s_server_new(f.base, lfd, &f.lim, &cbs, NULL)) !=
	    NULL);
	FZ_ASSERT(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
	FZ_ASSERT(h1s_server_adopt(f.s, sv[0]) == 0);
	f.cfd = sv[1];
	(void)fcntl(f.cfd, F_SETFL, O_NONBLOCK);

	for (i = 0; i < TURNS + 100; i++) {
		if (pos < n && i < TURNS) {
			size_t k = n - pos < piece ? n - pos : piece;
			ssize_t w = send(f.cfd, in + pos, k, MSG_NOSIGNAL);

			if (w > 0)
				pos += (size_t)w;
			else if (w < 0 && errno != EAGAIN)
				pos = n;	/* the server closed */
		} else if (!shut && (!keep_open || ++quiet > 20)) {
			shutdown(f.cfd, SHUT_WR);
			shut = true;
		}
		turn();
		serve_held();
		h1s_server_stats(f.s, &st);
		if (shut && st.conns == 0)
			break;
	}
	turn();
	serve_held();
	turn();
	h1s_server_stats(f.s, &st);
	/* every connection ended without a timer: the client shut down */
	FZ_ASSERT(st.conns == 0);
	FZ_ASSERT(f.held == NULL);
	for (i = 0; i < f.handed; i++)
		FZ_ASSERT(ctxs[i].ended);
	FZ_ASSERT(f.ended == f.handed);
	FZ_ASSERT(st.requests + st.errors == (uint64_t)f.handed);
	check_output();

	h1s_server_free(f.s);
	close(f.cfd);
	event_base_free(f.base);
	return 0;
}
