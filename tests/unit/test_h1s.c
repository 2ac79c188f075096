/*
 * test_h1s.c — sg-proxy's HTTP/1.1 server (bin/sg-proxy/h1s.c) on a real
 * event loop.
 *
 * Each test adopts one end of a socketpair into a server (one test uses
 * a real loopback listener), writes request bytes on the other end, runs
 * the loop in short turns and reads what the server answered.  The
 * application side is a small handler whose behaviour each test picks
 * (echo, stream, hold the request, ...).  Test names say which rule of
 * h1s.h or sg-proxy(8) LIMITS they prove.
 */
#include "sg_test.h"

#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <netinet/in.h>
#include <arpa/inet.h>

#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "sg-proxy/h1s.h"

enum mode {
	M_ECHO = 0,	/* 200, body "METHOD path minor body" */
	M_HOLD,		/* keep the request, answer later (t->held) */
	M_STREAM,	/* reply_start(-1), chunks "ab", "cde", end */
	M_STREAM_CL,	/* reply_start(5), "ab", "cde", end */
	M_BIG,		/* reply_start(-1) and one big chunk, hold */
	M_HOLD_NOCLOSE,	/* as M_HOLD, without an on_close callback */
};

typedef struct t {
	struct event_base	*base;
	h1s_server		*s;
	h1s_limits		 lim;
	int			 lfd;
	int			 cfd;		/* the client's end */
	enum mode		 mode;
	int			 requests, errors, completes, closes, drains;
	int			 last_status;
	char			 last_code[64];
	char			 last_body[4096];
	size_t			 last_body_len;
	char			 last_path[256];
	h1s_req			*held;
	char			 in[1 << 16];	/* what the client read */
	size_t			 inlen;
	bool			 eof;
} t_ctx;

static void
on_complete(h1s_req *r, void *arg)
{
	t_ctx *t = arg;

	(void)r;
	t->completes++;
	if (t->held == r)
		t->held = NULL;
}

static void
on_close(h1s_req *r, void *arg)
{
	t_ctx *t = arg;

	t->closes++;
	if (t->held == r)
		t->held = NULL;
}

static void
on_drain(h1s_req *r, void *arg)
{
	t_ctx *t = arg;

	(void)r;
	t->drains++;
}

static void
on_request(void *arg, h1s_req *r)
{
	t_ctx *t = arg;
	char out[8192];
	const char *b;
	size_t bl;
	int n;
	static char big[1 << 20];

	t->requests++;
	h1s_on_complete(r, on_complete, t);
	h1s_on_close(r, on_close, t);
	b = h1s_body(r, &bl);
	if (bl < sizeof(t->last_body)) {
		memcpy(t->last_body, b != NULL ? b : "", bl);
		t->last_body_len = bl;
	}
	snprintf(t->last_path, sizeof(t->last_path), "%s", h1s_path(r));
	switch (t->mode) {
	case M_ECHO:
		n = snprintf(out, sizeof(out), "%s %s %d %.*s",
		    h1s_method_str(r), h1s_path(r), h1s_minor(r),
		    (int)(bl < 4096 ? bl : 4096), b != NULL ? b : "");
		h1s_add_header(r, "Content-Type", "text/plain");
		h1s_reply(r, 200, NULL, out, (size_t)n);
		break;
	case M_HOLD:
		t->held = r;
		break;
	case M_HOLD_NOCLOSE:
		h1s_on_close(r, NULL, NULL);
		t->held = r;
		break;
	case M_STREAM:
	case M_STREAM_CL:
		h1s_reply_start(r, 200, NULL, t->mode == M_STREAM ? -1 : 5);
		h1s_reply_chunk(r, "ab", 2);
		h1s_reply_chunk(r, "cde", 3);
		h1s_reply_end(r);
		break;
	case M_BIG:
		memset(big, 'x', sizeof(big));
		h1s_reply_start(r, 200, NULL, -1);
		h1s_reply_chunk(r, big, sizeof(big));
		t->held = r;
		break;
	}
}

static void
on_error(void *arg, h1s_req *r, int status, const char *code,
    const char *message)
{
	t_ctx *t = arg;

	t->errors++;
	t->last_status = status;
	snprintf(t->last_code, sizeof(t->last_code), "%s", code);
	h1s_on_complete(r, on_complete, t);
	h1s_on_close(r, on_close, t);
	h1s_reply(r, status, NULL, message, strlen(message));
}

static const h1s_cbs cbs = { on_request, on_error };

/* A server on a fresh loop with lim (NULL: defaults), one socketpair
 * adopted. */
static t_ctx *
setup_lim(const h1s_limits *lim)
{
	t_ctx *t = calloc(1, sizeof(*t));
	struct sockaddr_in sa;
	int sv[2];

	assert_non_null(t);
	assert_non_null(t->base = event_base_new());
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_true((t->lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK,
	    0)) >= 0);
	assert_int_equal(bind(t->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(t->lfd, 16), 0);
	if (lim != NULL)
		t->lim = *lim;
	else
		h1s_limits_default(&t->lim);
	assert_non_null(t->s = h1s_server_new(t->base, t->lfd, &t->lim, &cbs,
	    t));
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	assert_int_equal(h1s_server_adopt(t->s, sv[0]), 0);
	t->cfd = sv[1];
	fcntl(t->cfd, F_SETFL, O_NONBLOCK);
	return t;
}

static int
setup(void **state)
{
	*state = setup_lim(NULL);
	return 0;
}

static int
teardown(void **state)
{
	t_ctx *t = *state;

	h1s_server_free(t->s);
	if (t->cfd >= 0)
		close(t->cfd);
	close(t->lfd);
	event_base_free(t->base);
	free(t);
	return 0;
}

static double
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* One short turn of the loop, then read what the client can. */
static void
turn(t_ctx *t)
{
	struct timeval tv = { 0, 2000 };
	ssize_t n;

	event_base_loopexit(t->base, &tv);
	event_base_dispatch(t->base);
	while (t->cfd >= 0 && t->inlen < sizeof(t->in) - 1) {
		n = recv(t->cfd, t->in + t->inlen, sizeof(t->in) - 1 -
		    t->inlen, 0);
		if (n > 0) {
			t->inlen += (size_t)n;
			t->in[t->inlen] = '\0';
			continue;
		}
		if (n == 0)
			t->eof = true;
		break;
	}
}

/* Run the loop until cond holds or ms pass; the value of cond. */
#define RUN_UNTIL(t, cond, ms) __extension__ ({				\
	double end_ = now_ms() + (ms);					\
	while (!(cond) && now_ms() < end_)				\
		turn(t);						\
	(cond);								\
})

static void
csend_n(t_ctx *t, const char *s, size_t n)
{
	size_t off = 0;
	ssize_t w;

	while (off < n) {
		w = send(t->cfd, s + off, n - off, MSG_NOSIGNAL);
		if (w < 0) {
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				return;		/* the server closed */
			turn(t);
			continue;
		}
		off += (size_t)w;
	}
}

static void
csend(t_ctx *t, const char *s)
{
	csend_n(t, s, strlen(s));
}

/* Count of complete responses read (status lines). */
static int
count_status(const t_ctx *t, const char *line)
{
	const char *p = t->in;
	int n = 0;

	while ((p = strstr(p, line)) != NULL) {
		n++;
		p += strlen(line);
	}
	return n;
}

static void
reset_in(t_ctx *t)
{
	t->inlen = 0;
	t->in[0] = '\0';
}

/* --- basics ------------------------------------------------------------- */

static void
test_get_answered_with_content_length(void **state)
{
	t_ctx *t = *state;

	csend(t, "GET /v1/models?x=1 HTTP/1.1\r\nHost: a\r\n\r\n");
	assert_true(RUN_UNTIL(t, strstr(t->in, "GET /v1/models 1") != NULL,
	    2000));
	assert_non_null(strstr(t->in, "HTTP/1.1 200 OK\r\n"));
	assert_non_null(strstr(t->in, "Content-Length: 17\r\n"));
	assert_non_null(strstr(t->in, "Content-Type: text/plain\r\n"));
	assert_non_null(strstr(t->in, "\r\nDate: "));
	assert_null(strstr(t->in, "Connection:"));
	assert_string_equal(t->last_path, "/v1/models");
	assert_true(RUN_UNTIL(t, t->completes == 1, 2000));
	assert_false(t->eof);
}

static void
test_post_content_length_body(void **state)
{
	t_ctx *t = *state;

	csend(t, "POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\n"
	    "Content-Length: 11\r\n\r\nhello world");
	assert_true(RUN_UNTIL(t, strstr(t->in, "hello world") != NULL, 2000));
	assert_int_equal(t->last_body_len, 11);
	assert_memory_equal(t->last_body, "hello world", 11);
}

static void
test_keepalive_reuses_connection(void **state)
{
	t_ctx *t = *state;
	h1s_stats st;

	csend(t, "GET /a HTTP/1.1\r\n\r\n");
	assert_true(RUN_UNTIL(t, t->completes == 1, 2000));
	csend(t, "GET /b HTTP/1.1\r\n\r\n");
	assert_true(RUN_UNTIL(t, t->completes == 2, 2000));
	assert_non_null(strstr(t->in, "GET /b 1"));
	h1s_server_stats(t->s, &st);
	assert_int_equal(st.accepted, 1);
	assert_int_equal(st.requests, 2);
	assert_int_equal(st.conns, 1);
	assert_int_equal(st.idle, 1);
	assert_false(t->eof);
}

static void
test_pipelined_requests_answered_in_order(void **state)
{
	t_ctx *t = *state;
	const char *a, *b, *c;

	csend(t, "GET /1 HTTP/1.1\r\n\r\nPOST /2 HTTP/1.1\r\n"
	    "Content-Length: 3\r\n\r\nxyzGET /3 HTTP/1.1\r\n\r\n");
	assert_true(RUN_UNTIL(t, t->completes == 3, 2000));
	a = strstr(t->in, "GET /1 1");
	b = strstr(t->in, "POST /2 1 xyz");
	c = strstr(t->in, "GET /3 1");
	assert_non_null(a);
	assert_non_null(b);
	assert_non_null(c);
	assert_true(a < b && b < c);
}

static void
test_pipelined_request_waits_for_held_response(void **state)
{
	t_ctx *t = *state;

	t->mode = M_HOLD;
	csend(t, "GET /1 HTTP/1.1\r\n\r\nGET /2 HTTP/1.1\r\n\r\n");
	assert_true(RUN_UNTIL(t, t->held != NULL, 2000));
	RUN_UNTIL(t, false, 30);
	assert_int_equal(t->requests, 1);	/* /2 waits its turn */
	h1s_reply(t->held, 200, NULL, "one", 3);
	assert_true(RUN_UNTIL(t, t->requests == 2, 2000));
	assert_string_equal(t->last_path, "/2");
	h1s_reply(t->held, 200, NULL, "two", 3);
	assert_true(RUN_UNTIL(t, t->completes == 2, 2000));
	assert_true(strstr(t->in, "one") < strstr(t->in, "two"));
}

static void
test_chunked_request_body_decoded(void **state)
{
	t_ctx *t = *state;

	csend(t, "POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
	    "5\r\nhello\r\n1;ext=1\r\n \r\n5\r\nworld\r\n0\r\n"
	    "X-Trailer: 1\r\n\r\n");
	assert_true(RUN_UNTIL(t, t->completes == 1, 2000));
	assert_int_equal(t->last_body_len, 11);
	assert_memory_equal(t->last_body, "hello world", 11);
}

static void
test_chunked_body_byte_at_a_time(void **state)
{
	t_ctx *t = *state;
	const char *req = "POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
	    "\r\n3\r\nabc\r\nA\r\n0123456789\r\n0\r\n\r\n";
	char one[2] = { 0, 0 };
	size_t i;

	for (i = 0; req[i] != '\0'; i++) {
		one[0] = req[i];
		csend(t, one);
		turn(t);
	}
	assert_true(RUN_UNTIL(t, t->completes == 1, 2000));
	assert_int_equal(t->last_body_len, 13);
	assert_memory_equal(t->last_body, "abc0123456789", 13);
}

static void
test_large_body_received_whole(void **state)
{
	t_ctx *t = *state;
	static char req[300000];
	size_t hl, i;

	hl = (size_t)snprintf(req, sizeof(req), "POST /big HTTP/1.1\r\n"
	    "Content-Length: 200000\r\n\r\n");
	for (i = 0; i < 200000; i++)
		req[hl + i] = (char)('a' + i % 26);
	req[hl + 200000] = '\0';
	csend(t, req);
	assert_true(RUN_UNTIL(t, t->completes == 1, 5000));
	assert_non_null(strstr(t->in, "POST /big 1 abcdefghij"));
}

static void
test_backpressure_unsent_grows_and_on_drain_fires(void **state)
{
	t_ctx *t = *state;
	size_t before, got;
	char b[65536];
	ssize_t n;

	t->mode = M_BIG;
	csend(t, "GET /big HTTP/1.1\r\n\r\n");
	assert_true(RUN_UNTIL(t, t->held != NULL, 2000));
	before = h1s_unsent(t->held);
	assert_true(before > 0);	/* the socket did not take 1 MiB */
	h1s_on_drain(t->held, on_drain, t);
	RUN_UNTIL(t, false, 20);
	assert_int_equal(t->drains, 0);
	/* the client reads everything: the queue drains */
	got = t->inlen;
	reset_in(t);
	while (got < (1u << 20) && t->drains == 0) {
		turn(t);
		got += t->inlen;
		reset_in(t);
		while ((n = recv(t->cfd, b, sizeof(b), 0)) > 0)
			got += (size_t)n;
	}
	assert_int_equal(t->drains, 1);
	assert_int_equal(h1s_unsent(t->held), 0);
	h1s_reply_end(t->held);
	assert_true(RUN_UNTIL(t, t->completes == 1, 2000));
	assert_int_equal(count_status(t, "HTTP/1.1"), 0);
}


/* --- rejections ---------------------------------------------------------- */

/* req is answered with status (code), Connection: close, then EOF, and
 * nothing reaches on_request. */
static void
expect_reject_n(t_ctx *t, const char *req, size_t len, int status,
    const char *code)
{
	char line[32];

	snprintf(line, sizeof(line), " %d ", status);
	csend_n(t, req, len);
	assert_true(RUN_UNTIL(t, t->eof, 3000));
	assert_int_equal(t->requests, 0);
	assert_int_equal(t->errors, 1);
	assert_int_equal(t->last_status, status);
	assert_string_equal(t->last_code, code);
	assert_true(strncmp(t->in, "HTTP/1.", 7) == 0);
	assert_memory_equal(t->in + 8, line, strlen(line));
	assert_non_null(strstr(t->in, "\r\nConnection: close\r\n"));
	assert_int_equal(t->completes, 1);
}

static void
expect_reject(t_ctx *t, const char *req, int status, const char *code)
{
	expect_reject_n(t, req, strlen(req), status, code);
}

#define REJECT(name, req, status, code)					\
static void								\
name(void **state)							\
{									\
	expect_reject_n(*state, req, sizeof(req) - 1, status, code);	\
}

REJECT(test_obs_fold_is_400,
    "GET / HTTP/1.1\r\nX-A: 1\r\n continued\r\n\r\n", 400, "invalid_request")
REJECT(test_obs_fold_tab_is_400,
    "GET / HTTP/1.1\r\nX-A: 1\r\n\tcontinued\r\n\r\n", 400,
    "invalid_request")
REJECT(test_nul_in_header_value_is_400,
    "GET / HTTP/1.1\r\nX-A: a\0b\r\n\r\n", 400, "invalid_request")
REJECT(test_bare_cr_in_header_is_400,
    "GET / HTTP/1.1\r\nX-A: a\rb\r\n\r\n", 400, "invalid_request")
REJECT(test_bare_cr_line_end_is_400,
    "GET / HTTP/1.1\rX-A: a\r\n\r\n", 400, "invalid_request")
REJECT(test_control_byte_in_header_is_400,
    "GET / HTTP/1.1\r\nX-A: a\033b\r\n\r\n", 400, "invalid_request")
REJECT(test_bad_field_name_is_400,
    "GET / HTTP/1.1\r\nX(A): 1\r\n\r\n", 400, "invalid_request")
REJECT(test_empty_field_name_is_400,
    "GET / HTTP/1.1\r\n: 1\r\n\r\n", 400, "invalid_request")
REJECT(test_space_before_colon_is_400,
    "GET / HTTP/1.1\r\nContent-Length : 5\r\n\r\nhello", 400,
    "invalid_request")
REJECT(test_line_without_colon_is_400,
    "GET / HTTP/1.1\r\nNoColon\r\n\r\n", 400, "invalid_request")
REJECT(test_duplicate_content_length_is_400,
    "POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
    400, "invalid_request")
REJECT(test_content_length_list_is_400,
    "POST / HTTP/1.1\r\nContent-Length: 3, 3\r\n\r\nabc", 400,
    "invalid_request")
REJECT(test_content_length_sign_is_400,
    "POST / HTTP/1.1\r\nContent-Length: +3\r\n\r\nabc", 400,
    "invalid_request")
REJECT(test_content_length_with_transfer_encoding_is_400,
    "POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n"
    "\r\n3\r\nabc\r\n0\r\n\r\n", 400, "invalid_request")
REJECT(test_transfer_encoding_with_content_length_is_400,
    "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n"
    "\r\n3\r\nabc\r\n0\r\n\r\n", 400, "invalid_request")
REJECT(test_transfer_encoding_not_chunked_is_400,
    "POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 400,
    "invalid_request")
REJECT(test_transfer_encoding_twice_is_400,
    "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
    "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, "invalid_request")
REJECT(test_transfer_encoding_in_http10_is_400,
    "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400,
    "invalid_request")
REJECT(test_chunk_size_sign_is_400,
    "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n+3\r\nabc\r\n"
    "0\r\n\r\n", 400, "invalid_request")
REJECT(test_chunk_size_negative_is_400,
    "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n-3\r\nabc\r\n"
    "0\r\n\r\n", 400, "invalid_request")
REJECT(test_chunk_size_leading_space_is_400,
    "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n 3\r\nabc\r\n"
    "0\r\n\r\n", 400, "invalid_request")
REJECT(test_chunk_size_trailing_space_is_400,
    "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3 \r\nabc\r\n"
    "0\r\n\r\n", 400, "invalid_request")
REJECT(test_chunk_size_0x_prefix_is_400,
    "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0x3\r\nabc\r\n"
    "0\r\n\r\n", 400, "invalid_request")
REJECT(test_chunk_size_overflow_is_400,
    "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
    "10000000000000003\r\nabc\r\n0\r\n\r\n", 400, "invalid_request")
REJECT(test_chunk_size_empty_is_400,
    "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n\r\nabc\r\n"
    "0\r\n\r\n", 400, "invalid_request")
REJECT(test_chunk_data_without_crlf_is_400,
    "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcd\r\n"
    "0\r\n\r\n", 400, "invalid_request")
REJECT(test_chunk_data_bare_lf_is_400,
    "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\n"
    "0\r\n\r\n", 400, "invalid_request")
REJECT(test_malformed_request_line_is_400,
    "GET  / HTTP/1.1\r\n\r\n", 400, "invalid_request")
REJECT(test_absolute_form_target_is_400,
    "GET http://a/ HTTP/1.1\r\n\r\n", 400, "invalid_request")
REJECT(test_http09_request_line_is_400,
    "GET /\r\n\r\n", 400, "invalid_request")
REJECT(test_http2_version_is_505,
    "GET / HTTP/2.0\r\n\r\n", 505, "http_version_not_supported")
REJECT(test_http0_version_is_505,
    "GET / HTTP/0.9\r\n\r\n", 505, "http_version_not_supported")
REJECT(test_unknown_expectation_is_417,
    "POST / HTTP/1.1\r\nExpect: 200-ok\r\nContent-Length: 3\r\n\r\n", 417,
    "expectation_failed")
REJECT(test_body_over_max_body_is_413,
    "POST / HTTP/1.1\r\nContent-Length: 67108865\r\n\r\n", 413,
    "request_too_large")
REJECT(test_content_length_overflow_is_413,
    "POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n",
    413, "request_too_large")

static void
test_http11_minor_above_1_answered_as_11(void **state)
{
	t_ctx *t = *state;

	csend(t, "GET /x HTTP/1.7\r\n\r\n");
	assert_true(RUN_UNTIL(t, t->completes == 1, 2000));
	assert_true(strncmp(t->in, "HTTP/1.1 200 OK\r\n", 17) == 0);
	assert_non_null(strstr(t->in, "GET /x 1"));
}

/* A small-limits server for the limit tests. */
static int
setup_small(void **state)
{
	h1s_limits l;

	h1s_limits_default(&l);
	l.max_target = 64;
	l.max_header_bytes = 200;
	l.max_headers = 4;
	l.max_body = 100;
	l.header_timeout_ms = 300;
	l.body_timeout_ms = 300;
	l.keepalive_timeout_ms = 200;
	l.send_timeout_ms = 200;
	*state = setup_lim(&l);
	return 0;
}

static void
test_target_at_limit_is_served(void **state)
{
	t_ctx *t = *state;
	char req[256];

	snprintf(req, sizeof(req), "GET /%063d HTTP/1.1\r\n\r\n", 0);
	csend(t, req);
	assert_true(RUN_UNTIL(t, t->completes == 1, 2000));
	assert_int_equal(t->errors, 0);
}

static void
test_target_over_limit_is_414(void **state)
{
	char req[256];

	snprintf(req, sizeof(req), "GET /%064d HTTP/1.1\r\n\r\n", 0);
	expect_reject(*state, req, 414, "uri_too_long");
}

static void
test_target_far_over_limit_is_414_before_line_end(void **state)
{
	t_ctx *t = *state;
	char req[1024];

	memset(req, 'a', sizeof(req));
	memcpy(req, "GET /", 5);
	req[sizeof(req) - 1] = '\0';
	csend(t, req);			/* no line end yet */
	assert_true(RUN_UNTIL(t, t->eof, 3000));
	assert_int_equal(t->last_status, 414);
}

/* n fields "X-<i>: v...", counted as name: value CRLF, total bytes. */
static void
fields_req(char *b, size_t cap, int nfields, size_t total)
{
	size_t off = (size_t)snprintf(b, cap, "GET / HTTP/1.1\r\n"), per;
	int i;

	per = total / (size_t)nfields;
	for (i = 0; i < nfields; i++) {
		size_t want = i == nfields - 1 ? total - per * (size_t)i : per;
		size_t vl = want - 4 - 3;	/* "X-i" + ": " + CRLF */

		off += (size_t)snprintf(b + off, cap - off, "X-%d: ", i);
		memset(b + off, 'v', vl);
		off += vl;
		off += (size_t)snprintf(b + off, cap - off, "\r\n");
	}
	snprintf(b + off, cap - off, "\r\n");
}

static void
test_header_bytes_at_limit_are_served(void **state)
{
	t_ctx *t = *state;
	char req[1024];

	fields_req(req, sizeof(req), 2, 200);
	csend(t, req);
	assert_true(RUN_UNTIL(t, t->completes == 1, 2000));
	assert_int_equal(t->errors, 0);
}

static void
test_header_bytes_over_limit_is_431(void **state)
{
	char req[1024];

	fields_req(req, sizeof(req), 2, 201);
	expect_reject(*state, req, 431, "request_header_fields_too_large");
}

static void
test_header_count_at_limit_is_served(void **state)
{
	t_ctx *t = *state;

	csend(t, "GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n\r\n");
	assert_true(RUN_UNTIL(t, t->completes == 1, 2000));
	assert_int_equal(t->errors, 0);
}

static void
test_header_count_over_limit_is_431(void **state)
{
	expect_reject(*state, "GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\n"
	    "D: 4\r\nE: 5\r\n\r\n", 431, "request_header_fields_too_large");
}

static void
test_body_at_limit_is_served(void **state)
{
	t_ctx *t = *state;
	char req[512];

	snprintf(req, sizeof(req), "POST / HTTP/1.1\r\nContent-Length: 100"
	    "\r\n\r\n%0100d", 0);
	csend(t, req);
	assert_true(RUN_UNTIL(t, t->completes == 1, 2000));
	assert_int_equal(t->last_body_len, 100);
}

static void
test_chunked_body_over_limit_is_413(void **state)
{
	char req[512];

	snprintf(req, sizeof(req), "POST / HTTP/1.1\r\nTransfer-Encoding: "
	    "chunked\r\n\r\n32\r\n%050d\r\n33\r\n%051d\r\n0\r\n\r\n", 0, 0);
	expect_reject(*state, req, 413, "request_too_large");
}

static void
test_expect_100_continue_gets_interim_100(void **state)
{
	t_ctx *t = *state;

	csend(t, "POST /e HTTP/1.1\r\nExpect: 100-continue\r\n"
	    "Content-Length: 3\r\n\r\n");
	assert_true(RUN_UNTIL(t, strstr(t->in, "\r\n\r\n") != NULL, 2000));
	assert_string_equal(t->in, "HTTP/1.1 100 Continue\r\n\r\n");
	assert_int_equal(t->requests, 0);
	csend(t, "abc");
	assert_true(RUN_UNTIL(t, t->completes == 1, 2000));
	assert_non_null(strstr(t->in, "HTTP/1.1 200 OK\r\n"));
	assert_non_null(strstr(t->in, "POST /e 1 abc"));
}

static void
test_expect_100_continue_over_limit_is_413_without_100(void **state)
{
	t_ctx *t = *state;

	expect_reject(t, "POST /e HTTP/1.1\r\nExpect: 100-continue\r\n"
	    "Content-Length: 1000\r\n\r\n", 413, "request_too_large");
	assert_null(strstr(t->in, "100 Continue"));
}


/* --- timeouts ------------------------------------------------------------ */

static void
test_head_trickled_past_deadline_gets_408_and_close(void **state)
{
	t_ctx *t = *state;
	double start = now_ms();
	int sent = 0;

	csend(t, "GET / HTTP/1.1\r\nX-Slow: ");
	/* a byte every 20 ms for up to 2 s: an idle timer would never fire */
	while (!t->eof && now_ms() - start < 2000) {
		csend(t, "a");
		sent++;
		RUN_UNTIL(t, t->eof, 20);
	}
	assert_true(t->eof);
	assert_true(sent > 10);		/* bytes kept arriving past 300 ms */
	assert_true(strncmp(t->in, "HTTP/1.1 408 ", 13) == 0);
	assert_non_null(strstr(t->in, "Connection: close\r\n"));
	assert_int_equal(t->last_status, 408);
	assert_string_equal(t->last_code, "request_timeout");
	assert_int_equal(t->requests, 0);
}

static void
test_body_past_deadline_gets_408(void **state)
{
	t_ctx *t = *state;
	double start = now_ms();

	csend(t, "POST / HTTP/1.1\r\nContent-Length: 90\r\n\r\nabc");
	while (!t->eof && now_ms() - start < 2000) {
		csend(t, "b");
		RUN_UNTIL(t, t->eof, 20);
	}
	assert_true(t->eof);
	assert_true(strncmp(t->in, "HTTP/1.1 408 ", 13) == 0);
	assert_int_equal(t->requests, 0);
}

static void
test_keepalive_idle_connection_closed_silently(void **state)
{
	t_ctx *t = *state;
	h1s_stats st;
	size_t len;

	csend(t, "GET / HTTP/1.1\r\n\r\n");
	assert_true(RUN_UNTIL(t, t->completes == 1, 2000));
	len = t->inlen;
	assert_true(RUN_UNTIL(t, t->eof, 2000));
	assert_int_equal(t->inlen, len);	/* nothing more was written */
	h1s_server_stats(t->s, &st);
	assert_int_equal(st.conns, 0);
	assert_int_equal(st.errors, 0);
}

static void
test_silent_fresh_connection_closed_after_header_timeout(void **state)
{
	t_ctx *t = *state;

	assert_true(RUN_UNTIL(t, t->eof, 2000));
	assert_int_equal(t->inlen, 0);
	assert_int_equal(t->errors, 0);
}

static void
test_send_timeout_abandons_reader_that_never_reads(void **state)
{
	t_ctx *t = *state;
	h1s_stats st;

	t->mode = M_BIG;
	csend(t, "GET / HTTP/1.1\r\n\r\n");
	assert_true(RUN_UNTIL(t, t->held != NULL, 2000));
	/* the client never reads: turn() is not used from here on */
	{
		double end = now_ms() + 3000;
		struct timeval tv = { 0, 5000 };

		while (t->closes == 0 && now_ms() < end) {
			event_base_loopexit(t->base, &tv);
			event_base_dispatch(t->base);
		}
	}
	assert_int_equal(t->closes, 1);
	assert_int_equal(t->completes, 0);
	h1s_server_stats(t->s, &st);
	assert_int_equal(st.timeouts, 1);
	assert_int_equal(st.conns, 0);
}

/*
 * While a request is served the connection's timer is not pending (the
 * header and body deadlines are over, the send timeout starts only when
 * output blocks); once it is answered the keep-alive timer is the one
 * event added.  Fails when disarming the timer leaves it pending.
 */
static void
test_served_request_holds_no_timer_keepalive_one(void **state)
{
	t_ctx *t = *state;
	int held, idle;

	t->mode = M_HOLD;
	csend(t, "POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc");
	assert_true(RUN_UNTIL(t, t->held != NULL, 2000));
	held = event_base_get_num_events(t->base, EVENT_BASE_COUNT_ADDED);
	h1s_reply(t->held, 200, NULL, "ok", 2);
	assert_true(RUN_UNTIL(t, t->completes == 1, 2000));
	idle = event_base_get_num_events(t->base, EVENT_BASE_COUNT_ADDED);
	assert_int_equal(idle, held + 1);
	/* a head trickled in two reads still gets its deadline */
	reset_in(t);
	csend(t, "GET /2 HTTP/1.1\r\n");
	RUN_UNTIL(t, false, 20);
	assert_int_equal(event_base_get_num_events(t->base,
	    EVENT_BASE_COUNT_ADDED), idle);
	assert_true(RUN_UNTIL(t, t->eof, 2000));
	assert_true(strncmp(t->in, "HTTP/1.1 408 ", 13) == 0);
}

/* --- the client leaving ------------------------------------------------ */

static void
test_client_eof_during_service_runs_on_close(void **state)
{
	t_ctx *t = *state;
	h1s_req *r;

	t->mode = M_HOLD;
	csend(t, "GET / HTTP/1.1\r\n\r\n");
	assert_true(RUN_UNTIL(t, t->held != NULL, 2000));
	r = t->held;
	assert_false(h1s_client_gone(r));
	close(t->cfd);
	t->cfd = -1;
	assert_true(RUN_UNTIL(t, t->closes == 1, 2000));
	assert_int_equal(t->completes, 0);
	assert_null(t->held);
}

static void
test_client_gone_without_on_close_completes_at_reply(void **state)
{
	t_ctx *t = *state;
	h1s_stats st;

	t->mode = M_HOLD_NOCLOSE;
	csend(t, "GET / HTTP/1.1\r\n\r\n");
	assert_true(RUN_UNTIL(t, t->held != NULL, 2000));
	close(t->cfd);
	t->cfd = -1;
	assert_true(RUN_UNTIL(t, h1s_client_gone(t->held), 2000));
	h1s_server_stats(t->s, &st);
	assert_int_equal(st.conns, 0);		/* the socket is closed */
	h1s_reply(t->held, 200, NULL, "late", 4);
	assert_true(RUN_UNTIL(t, t->completes == 1, 2000));
	assert_int_equal(t->closes, 0);
}

static void
test_half_closed_client_still_answered(void **state)
{
	t_ctx *t = *state;

	csend(t, "GET /h HTTP/1.1\r\n\r\n");
	shutdown(t->cfd, SHUT_WR);
	assert_true(RUN_UNTIL(t, t->eof, 2000));
	assert_non_null(strstr(t->in, "GET /h 1"));
	assert_int_equal(t->completes, 1);
}

static void
test_abort_cuts_stream_without_last_chunk(void **state)
{
	t_ctx *t = *state;

	t->mode = M_HOLD;
	csend(t, "GET / HTTP/1.1\r\n\r\n");
	assert_true(RUN_UNTIL(t, t->held != NULL, 2000));
	h1s_reply_start(t->held, 200, NULL, -1);
	h1s_reply_chunk(t->held, "abc", 3);
	h1s_abort(t->held);
	t->held = NULL;
	assert_true(RUN_UNTIL(t, t->eof, 2000));
	assert_non_null(strstr(t->in, "\r\n3\r\nabc\r\n"));
	assert_null(strstr(t->in, "0\r\n\r\n"));
	RUN_UNTIL(t, false, 20);
	assert_int_equal(t->completes, 0);
	assert_int_equal(t->closes, 0);
}

static void
test_abort_writes_queued_bytes_before_closing(void **state)
{
	t_ctx *t = *state;
	size_t unsent, total = 0, queued_at_abort, whole;
	const char *e;
	char b[65536];
	ssize_t n;

	t->mode = M_BIG;
	csend(t, "GET / HTTP/1.1\r\n\r\n");
	assert_true(RUN_UNTIL(t, t->held != NULL, 2000));
	assert_true((unsent = h1s_unsent(t->held)) > 0);
	/* the client takes some, then the application aborts at once */
	total = t->inlen;
	if ((n = recv(t->cfd, b, sizeof(b), 0)) > 0)
		total += (size_t)n;
	queued_at_abort = h1s_unsent(t->held);
	h1s_abort(t->held);
	t->held = NULL;
	while ((n = recv(t->cfd, b, sizeof(b), 0)) > 0)
		total += (size_t)n;
	assert_true(n == 0);		/* closed */
	/* more arrived than had been written before the abort: the whole
	 * answer is head, "100000\r\n", 1 MiB and "\r\n" */
	assert_non_null(e = strstr(t->in, "\r\n\r\n"));
	whole = (size_t)(e + 4 - t->in) + 8 + (1u << 20) + 2;
	assert_true(total > whole - queued_at_abort);
	assert_true(total < whole);		/* and not the end */
	RUN_UNTIL(t, false, 20);
	assert_int_equal(t->completes + t->closes, 0);
}

static void
test_body_unchanged_while_pipelined_bytes_arrive(void **state)
{
	t_ctx *t = *state;
	const char *b;
	size_t bl;

	t->mode = M_HOLD;
	csend(t, "POST /p HTTP/1.1\r\nX-A: keep\r\nContent-Length: 5\r\n\r\n"
	    "12345");
	assert_true(RUN_UNTIL(t, t->held != NULL, 2000));
	csend(t, "POST /q HTTP/1.1\r\nX-A: next\r\nContent-Length: 5\r\n\r\n"
	    "67890");
	RUN_UNTIL(t, false, 30);
	b = h1s_body(t->held, &bl);
	assert_int_equal(bl, 5);
	assert_memory_equal(b, "12345", 5);
	assert_string_equal(h1s_find_header(t->held, "x-a"), "keep");
	assert_string_equal(h1s_path(t->held), "/p");
	h1s_reply(t->held, 204, NULL, NULL, 0);
	assert_true(RUN_UNTIL(t, t->requests == 2, 2000));
	b = h1s_body(t->held, &bl);
	assert_memory_equal(b, "67890", 5);
	assert_string_equal(h1s_find_header(t->held, "X-A"), "next");
	h1s_reply(t->held, 204, NULL, NULL, 0);
	assert_true(RUN_UNTIL(t, t->completes == 2, 2000));
}

/* --- streaming and framing --------------------------------------------- */

static void
test_stream_chunked_framing_byte_exact(void **state)
{
	t_ctx *t = *state;
	const char *body;

	t->mode = M_STREAM;
	csend(t, "GET /s HTTP/1.1\r\n\r\n");
	assert_true(RUN_UNTIL(t, t->completes == 1, 2000));
	assert_non_null(strstr(t->in, "Transfer-Encoding: chunked\r\n"));
	assert_null(strstr(t->in, "Content-Length"));
	body = strstr(t->in, "\r\n\r\n");
	assert_non_null(body);
	assert_string_equal(body + 4, "2\r\nab\r\n3\r\ncde\r\n0\r\n\r\n");
	assert_false(t->eof);
}

/* The loop alone, the client reading nothing. */
static void
spin(t_ctx *t, int ms)
{
	double end = now_ms() + ms;
	struct timeval tv = { 0, 2000 };

	while (now_ms() < end) {
		event_base_loopexit(t->base, &tv);
		event_base_dispatch(t->base);
	}
}

static void
test_stream_head_and_first_chunk_in_one_write(void **state)
{
	t_ctx *t = *state;
	char rec[4096];
	ssize_t n;
	int sv[2];

	/* a SEQPACKET pair keeps each sendmsg a record of its own */
	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
	assert_int_equal(h1s_server_adopt(t->s, sv[0]), 0);
	close(t->cfd);
	t->cfd = sv[1];
	t->mode = M_STREAM;
	assert_int_equal(send(t->cfd, "GET / HTTP/1.1\r\n\r\n", 18, 0), 18);
	spin(t, 30);
	assert_int_equal(t->completes, 1);
	n = recv(t->cfd, rec, sizeof(rec) - 1, MSG_DONTWAIT);
	assert_true(n > 0);
	rec[n] = '\0';
	assert_true(strncmp(rec, "HTTP/1.1 200 OK\r\n", 17) == 0);
	assert_non_null(strstr(rec, "\r\n\r\n2\r\nab\r\n"));
}

static void
test_stream_head_alone_goes_out_from_the_loop(void **state)
{
	t_ctx *t = *state;

	t->mode = M_HOLD;
	csend(t, "GET / HTTP/1.1\r\n\r\n");
	assert_true(RUN_UNTIL(t, t->held != NULL, 2000));
	h1s_reply_start(t->held, 200, NULL, -1);
	assert_true(RUN_UNTIL(t, strstr(t->in, "\r\n\r\n") != NULL, 2000));
	assert_non_null(strstr(t->in, "Transfer-Encoding: chunked\r\n"));
	h1s_reply_end(t->held);
	assert_true(RUN_UNTIL(t, t->completes == 1, 2000));
	assert_non_null(strstr(t->in, "\r\n\r\n0\r\n\r\n"));
}

static void
test_empty_stream_ends_in_one_write(void **state)
{
	t_ctx *t = *state;

	t->mode = M_HOLD;
	csend(t, "HEAD / HTTP/1.1\r\n\r\n");
	assert_true(RUN_UNTIL(t, t->held != NULL, 2000));
	h1s_reply_start(t->held, 200, NULL, -1);
	h1s_reply_chunk(t->held, "not sent", 8);
	h1s_reply_end(t->held);
	assert_true(RUN_UNTIL(t, t->completes == 1, 2000));
	assert_non_null(strstr(t->in, "Transfer-Encoding: chunked\r\n"));
	assert_null(strstr(t->in, "not sent"));
	assert_null(strstr(t->in, "0\r\n\r\n"));	/* HEAD: no body */
	assert_false(t->eof);
}

static void
test_stream_http10_close_delimited(void **state)
{
	t_ctx *t = *state;
	const char *body;

	t->mode = M_STREAM;
	csend(t, "GET /s HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
	assert_true(RUN_UNTIL(t, t->eof, 2000));
	assert_true(strncmp(t->in, "HTTP/1.0 200 OK\r\n", 17) == 0);
	assert_null(strstr(t->in, "Transfer-Encoding"));
	assert_null(strstr(t->in, "Content-Length"));
	assert_non_null(strstr(t->in, "Connection: close\r\n"));
	body = strstr(t->in, "\r\n\r\n");
	assert_string_equal(body + 4, "abcde");
	assert_int_equal(t->completes, 1);
}

static void
test_stream_content_length_identity(void **state)
{
	t_ctx *t = *state;
	const char *body;

	t->mode = M_STREAM_CL;
	csend(t, "GET /s HTTP/1.1\r\n\r\n");
	assert_true(RUN_UNTIL(t, t->completes == 1, 2000));
	assert_non_null(strstr(t->in, "Content-Length: 5\r\n"));
	assert_null(strstr(t->in, "Transfer-Encoding"));
	body = strstr(t->in, "\r\n\r\n");
	assert_string_equal(body + 4, "abcde");
	assert_false(t->eof);
}

static void
test_stream_short_content_length_closes(void **state)
{
	t_ctx *t = *state;

	t->mode = M_HOLD;
	csend(t, "GET / HTTP/1.1\r\n\r\n");
	assert_true(RUN_UNTIL(t, t->held != NULL, 2000));
	h1s_reply_start(t->held, 200, NULL, 10);
	h1s_reply_chunk(t->held, "abc", 3);
	h1s_reply_end(t->held);
	assert_true(RUN_UNTIL(t, t->eof, 2000));
	assert_int_equal(t->completes, 1);
}

static void
test_head_answered_without_body(void **state)
{
	t_ctx *t = *state;
	const char *e;

	csend(t, "HEAD /x HTTP/1.1\r\n\r\n");
	assert_true(RUN_UNTIL(t, t->completes == 1, 2000));
	assert_non_null(strstr(t->in, "Content-Length: 10\r\n"));
	e = strstr(t->in, "\r\n\r\n");
	assert_non_null(e);
	assert_int_equal(e[4], '\0');		/* nothing after the head */
	/* the framing holds: the next answer starts right after */
	csend(t, "GET /y HTTP/1.1\r\n\r\n");
	assert_true(RUN_UNTIL(t, t->completes == 2, 2000));
	assert_true(strncmp(e + 4, "HTTP/1.1 200 OK\r\n", 17) == 0);
}

static void
test_no_body_statuses_have_no_framing(void **state)
{
	t_ctx *t = *state;

	t->mode = M_HOLD;
	csend(t, "GET / HTTP/1.1\r\n\r\n");
	assert_true(RUN_UNTIL(t, t->held != NULL, 2000));
	h1s_reply_start(t->held, 204, NULL, -1);
	h1s_reply_chunk(t->held, "ignored", 7);
	h1s_reply_end(t->held);
	assert_true(RUN_UNTIL(t, t->completes == 1, 2000));
	assert_null(strstr(t->in, "Transfer-Encoding"));
	assert_null(strstr(t->in, "Content-Length"));
	assert_null(strstr(t->in, "ignored"));
	assert_false(t->eof);
}

static void
test_http10_closed_without_keepalive(void **state)
{
	t_ctx *t = *state;

	csend(t, "GET / HTTP/1.0\r\n\r\n");
	assert_true(RUN_UNTIL(t, t->eof, 2000));
	assert_true(strncmp(t->in, "HTTP/1.0 200 OK\r\n", 17) == 0);
	assert_non_null(strstr(t->in, "Connection: close\r\n"));
}

static void
test_http10_keepalive_when_asked(void **state)
{
	t_ctx *t = *state;

	csend(t, "GET /a HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n");
	assert_true(RUN_UNTIL(t, t->completes == 1, 2000));
	assert_non_null(strstr(t->in, "Connection: keep-alive\r\n"));
	csend(t, "GET /b HTTP/1.0\r\n\r\n");
	assert_true(RUN_UNTIL(t, t->eof, 2000));
	assert_non_null(strstr(t->in, "GET /b 0"));
}

static void
test_connection_close_honoured(void **state)
{
	t_ctx *t = *state;

	csend(t, "GET / HTTP/1.1\r\nConnection: close\r\n\r\nGET /no HTTP/1.1"
	    "\r\n\r\n");
	assert_true(RUN_UNTIL(t, t->eof, 2000));
	assert_non_null(strstr(t->in, "Connection: close\r\n"));
	assert_int_equal(t->requests, 1);
}

static void
test_response_fields_added_deleted_and_reserved_ignored(void **state)
{
	t_ctx *t = *state;

	t->mode = M_HOLD;
	csend(t, "GET / HTTP/1.1\r\n\r\n");
	assert_true(RUN_UNTIL(t, t->held != NULL, 2000));
	assert_int_equal(h1s_add_header(t->held, "X-One", "1"), 0);
	assert_int_equal(h1s_add_header(t->held, "X-Two", "2"), 0);
	assert_int_equal(h1s_add_header(t->held, "x-one", "again"), 0);
	assert_int_equal(h1s_add_header(t->held, "Content-Length", "99"), 0);
	assert_int_equal(h1s_add_header(t->held, "Bad Name", "v"), EINVAL);
	assert_int_equal(h1s_add_header(t->held, "X-Bad", "a\r\nb"), EINVAL);
	h1s_del_header(t->held, "X-ONE");
	h1s_reply(t->held, 200, "Fine", "ok", 2);
	assert_true(RUN_UNTIL(t, t->completes == 1, 2000));
	assert_true(strncmp(t->in, "HTTP/1.1 200 Fine\r\n", 19) == 0);
	assert_null(strstr(t->in, "X-One"));
	assert_null(strstr(t->in, "x-one"));
	assert_non_null(strstr(t->in, "X-Two: 2\r\n"));
	assert_non_null(strstr(t->in, "Content-Length: 2\r\n"));
	assert_null(strstr(t->in, "99"));
}

/* --- the server -------------------------------------------------------- */

static void
test_drain_closes_idle_and_busy_after_response(void **state)
{
	t_ctx *t = *state;
	int sv[2];
	char b[64];
	h1s_stats st;

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	assert_int_equal(h1s_server_adopt(t->s, sv[0]), 0);	/* idle */
	t->mode = M_HOLD;
	csend(t, "GET / HTTP/1.1\r\n\r\n");
	assert_true(RUN_UNTIL(t, t->held != NULL, 2000));
	h1s_server_drain(t->s);
	h1s_server_drain(t->s);			/* idempotent */
	assert_int_equal(recv(sv[1], b, sizeof(b), 0), 0);	/* closed */
	close(sv[1]);
	h1s_server_stats(t->s, &st);
	assert_int_equal(st.conns, 1);
	h1s_reply(t->held, 200, NULL, "bye", 3);
	assert_true(RUN_UNTIL(t, t->eof, 2000));
	assert_non_null(strstr(t->in, "Connection: close\r\n"));
	assert_non_null(strstr(t->in, "bye"));
	h1s_server_stats(t->s, &st);
	assert_int_equal(st.conns, 0);
}

static int
tcp_connect(int lfd)
{
	struct sockaddr_in sa;
	socklen_t len = sizeof(sa);
	int fd;

	assert_int_equal(getsockname(lfd, (struct sockaddr *)&sa, &len), 0);
	assert_true((fd = socket(AF_INET, SOCK_STREAM, 0)) >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, len), 0);
	fcntl(fd, F_SETFL, O_NONBLOCK);
	return fd;
}

static void
on_request_peer(void *arg, h1s_req *r)
{
	t_ctx *t = arg;

	snprintf(t->last_path, sizeof(t->last_path), "%s %d", h1s_peer(r),
	    h1s_peer_loopback(r));
	t->requests++;
	h1s_reply(r, 200, NULL, "tcp", 3);
}

static void
test_loopback_listener_accepts_and_serves(void **state)
{
	t_ctx *t = *state;
	static const h1s_cbs pcbs = { on_request_peer, on_error };
	h1s_server *s2;
	h1s_stats st;
	int lfd2, fd;
	struct sockaddr_in sa;

	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_true((lfd2 = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK,
	    0)) >= 0);
	assert_int_equal(bind(lfd2, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(lfd2, 16), 0);
	assert_non_null(s2 = h1s_server_new(t->base, lfd2, NULL, &pcbs, t));
	fd = tcp_connect(lfd2);
	close(t->cfd);
	t->cfd = fd;
	csend(t, "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
	assert_true(RUN_UNTIL(t, strstr(t->in, "tcp") != NULL, 2000));
	assert_string_equal(t->last_path, "127.0.0.1 1");
	h1s_server_stats(s2, &st);
	assert_int_equal(st.accepted, 1);
	assert_int_equal(st.requests, 1);
	h1s_server_free(s2);
	close(lfd2);
}

static void
test_max_conns_pauses_accept_until_a_close(void **state)
{
	t_ctx *t = *state;
	h1s_stats st;
	int fd;

	/* the adopted socketpair is the one connection allowed */
	fd = tcp_connect(t->lfd);
	RUN_UNTIL(t, false, 50);
	h1s_server_stats(t->s, &st);
	assert_int_equal(st.accepted, 1);
	close(t->cfd);			/* the first one leaves */
	t->cfd = fd;
	assert_true(RUN_UNTIL(t, (h1s_server_stats(t->s, &st),
	    st.accepted == 2), 2000));
	csend(t, "GET /second HTTP/1.1\r\n\r\n");
	assert_true(RUN_UNTIL(t, strstr(t->in, "GET /second 1") != NULL,
	    2000));
}

static int
setup_one_conn(void **state)
{
	h1s_limits l;

	h1s_limits_default(&l);
	l.max_conns = 1;
	*state = setup_lim(&l);
	return 0;
}


/* The fdinfo of the loop's epoll descriptor, opened now (it is re-read
 * while no descriptor can be opened). */
static int
epoll_info_open(void)
{
	char path[64], link[64];
	ssize_t n;
	int fd;

	for (fd = 0; fd < 1024; fd++) {
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		if ((n = readlink(path, link, sizeof(link) - 1)) <= 0)
			continue;
		link[n] = '\0';
		if (strcmp(link, "anon_inode:[eventpoll]") == 0) {
			snprintf(path, sizeof(path), "/proc/self/fdinfo/%d",
			    fd);
			return open(path, O_RDONLY);
		}
	}
	return -1;
}

/* Is fd registered with the epoll descriptor whose fdinfo is info? */
static bool
polled(int info, int fd)
{
	char b[16384], *p;
	ssize_t n;
	int v;

	assert_int_equal(lseek(info, 0, SEEK_SET), 0);
	assert_true((n = read(info, b, sizeof(b) - 1)) > 0);
	b[n] = '\0';
	for (p = b; (p = strstr(p, "tfd:")) != NULL; p += 4)
		if (sscanf(p + 4, "%d", &v) == 1 && v == fd)
			return true;
	return false;
}

static void
test_emfile_pauses_accept_without_spinning(void **state)
{
	t_ctx *t = *state;
	struct rlimit old, low;
	h1s_stats st;
	bool paused;
	int fd, probe, info;

	fd = tcp_connect(t->lfd);	/* queued in the backlog */
	assert_true((info = epoll_info_open()) >= 0);
	assert_true(polled(info, t->lfd));
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
	assert_true((probe = dup(0)) >= 0);
	close(probe);
	low = old;
	low.rlim_cur = (rlim_t)probe;	/* no descriptor left for accept */
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
	RUN_UNTIL(t, false, 20);
	/* accept failed with EMFILE: the listener is not polled (a level-
	 * triggered listener with a pending connection would spin) */
	paused = !polled(info, t->lfd);
	h1s_server_stats(t->s, &st);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
	assert_true(paused);
	assert_int_equal(st.accepted, 1);
	assert_true(RUN_UNTIL(t, (h1s_server_stats(t->s, &st),
	    st.accepted == 2), 2000));
	assert_true(polled(info, t->lfd));	/* accepting again */
	close(info);
	close(t->cfd);
	t->cfd = fd;
	csend(t, "GET /after HTTP/1.1\r\n\r\n");
	assert_true(RUN_UNTIL(t, strstr(t->in, "GET /after 1") != NULL,
	    2000));
}

static void
test_bare_lf_lines_and_leading_empty_lines_accepted(void **state)
{
	t_ctx *t = *state;

	csend(t, "\r\n\nGET /lf HTTP/1.1\nHost: a\nX-B:  padded\t \n\n");
	assert_true(RUN_UNTIL(t, t->completes == 1, 2000));
	assert_non_null(strstr(t->in, "GET /lf 1"));
	assert_int_equal(t->errors, 0);
}

static void
on_request_method(void *arg, h1s_req *r)
{
	t_ctx *t = arg;
	size_t n;
	const h1s_header *h = h1s_headers(r, &n);

	snprintf(t->last_path, sizeof(t->last_path), "%d %s %s %zu %s=%s",
	    (int)h1s_method(r), h1s_method_str(r), h1s_target(r, NULL), n,
	    n > 0 ? h[0].name : "", n > 0 ? h[0].value : "");
	t->requests++;
	h1s_reply(r, 200, NULL, NULL, 0);
}

static void
test_options_star_and_unknown_method_token(void **state)
{
	t_ctx *t = *state;
	static const h1s_cbs mcbs = { on_request_method, on_error };
	h1s_server *s2;
	int sv[2];

	assert_non_null(s2 = h1s_server_new(t->base, t->lfd, NULL, &mcbs, t));
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	assert_int_equal(h1s_server_adopt(s2, sv[0]), 0);
	close(t->cfd);
	t->cfd = sv[1];
	fcntl(t->cfd, F_SETFL, O_NONBLOCK);
	csend(t, "OPTIONS * HTTP/1.1\r\nX-K:  v v \r\n\r\n");
	assert_true(RUN_UNTIL(t, t->requests == 1, 2000));
	assert_string_equal(t->last_path, "6 OPTIONS * 1 X-K=v v");
	csend(t, "BREW /pot HTTP/1.1\r\n\r\n");
	assert_true(RUN_UNTIL(t, t->requests == 2, 2000));
	assert_string_equal(t->last_path, "0 BREW /pot 0 =");
	h1s_server_free(s2);
}

static void
test_star_target_only_for_options(void **state)
{
	expect_reject(*state, "GET * HTTP/1.1\r\n\r\n", 400,
	    "invalid_request");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
#define TS(f) cmocka_unit_test_setup_teardown(f, setup_small, teardown)
#define T1(f) cmocka_unit_test_setup_teardown(f, setup_one_conn, teardown)
		T(test_get_answered_with_content_length),
		T(test_post_content_length_body),
		T(test_keepalive_reuses_connection),
		T(test_pipelined_requests_answered_in_order),
		T(test_pipelined_request_waits_for_held_response),
		T(test_chunked_request_body_decoded),
		T(test_chunked_body_byte_at_a_time),
		T(test_large_body_received_whole),
		T(test_backpressure_unsent_grows_and_on_drain_fires),
		T(test_obs_fold_is_400),
		T(test_obs_fold_tab_is_400),
		T(test_nul_in_header_value_is_400),
		T(test_bare_cr_in_header_is_400),
		T(test_bare_cr_line_end_is_400),
		T(test_control_byte_in_header_is_400),
		T(test_bad_field_name_is_400),
		T(test_empty_field_name_is_400),
		T(test_space_before_colon_is_400),
		T(test_line_without_colon_is_400),
		T(test_duplicate_content_length_is_400),
		T(test_content_length_list_is_400),
		T(test_content_length_sign_is_400),
		T(test_content_length_with_transfer_encoding_is_400),
		T(test_transfer_encoding_with_content_length_is_400),
		T(test_transfer_encoding_not_chunked_is_400),
		T(test_transfer_encoding_twice_is_400),
		T(test_transfer_encoding_in_http10_is_400),
		T(test_chunk_size_sign_is_400),
		T(test_chunk_size_negative_is_400),
		T(test_chunk_size_leading_space_is_400),
		T(test_chunk_size_trailing_space_is_400),
		T(test_chunk_size_0x_prefix_is_400),
		T(test_chunk_size_overflow_is_400),
		T(test_chunk_size_empty_is_400),
		T(test_chunk_data_without_crlf_is_400),
		T(test_chunk_data_bare_lf_is_400),
		T(test_malformed_request_line_is_400),
		T(test_absolute_form_target_is_400),
		T(test_http09_request_line_is_400),
		T(test_http2_version_is_505),
		T(test_http0_version_is_505),
		T(test_unknown_expectation_is_417),
		T(test_body_over_max_body_is_413),
		T(test_content_length_overflow_is_413),
		T(test_http11_minor_above_1_answered_as_11),
		TS(test_target_at_limit_is_served),
		TS(test_target_over_limit_is_414),
		TS(test_target_far_over_limit_is_414_before_line_end),
		TS(test_header_bytes_at_limit_are_served),
		TS(test_header_bytes_over_limit_is_431),
		TS(test_header_count_at_limit_is_served),
		TS(test_header_count_over_limit_is_431),
		TS(test_body_at_limit_is_served),
		TS(test_chunked_body_over_limit_is_413),
		T(test_expect_100_continue_gets_interim_100),
		TS(test_expect_100_continue_over_limit_is_413_without_100),
		TS(test_head_trickled_past_deadline_gets_408_and_close),
		TS(test_body_past_deadline_gets_408),
		TS(test_keepalive_idle_connection_closed_silently),
		TS(test_silent_fresh_connection_closed_after_header_timeout),
		TS(test_send_timeout_abandons_reader_that_never_reads),
		TS(test_served_request_holds_no_timer_keepalive_one),
		T(test_client_eof_during_service_runs_on_close),
		T(test_client_gone_without_on_close_completes_at_reply),
		T(test_half_closed_client_still_answered),
		T(test_abort_cuts_stream_without_last_chunk),
		T(test_abort_writes_queued_bytes_before_closing),
		T(test_body_unchanged_while_pipelined_bytes_arrive),
		T(test_stream_chunked_framing_byte_exact),
		T(test_stream_head_and_first_chunk_in_one_write),
		T(test_stream_head_alone_goes_out_from_the_loop),
		T(test_empty_stream_ends_in_one_write),
		T(test_stream_http10_close_delimited),
		T(test_stream_content_length_identity),
		T(test_stream_short_content_length_closes),
		T(test_head_answered_without_body),
		T(test_no_body_statuses_have_no_framing),
		T(test_http10_closed_without_keepalive),
		T(test_http10_keepalive_when_asked),
		T(test_connection_close_honoured),
		T(test_response_fields_added_deleted_and_reserved_ignored),
		T(test_drain_closes_idle_and_busy_after_response),
		T(test_loopback_listener_accepts_and_serves),
		T1(test_max_conns_pauses_accept_until_a_close),
		T(test_emfile_pauses_accept_without_spinning),
		T(test_bare_lf_lines_and_leading_empty_lines_accepted),
		T(test_options_star_and_unknown_method_token),
		T(test_star_target_only_for_options),
#undef T
#undef TS
#undef T1
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
