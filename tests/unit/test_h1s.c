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
	assert_true(before > 0);		/* the socket did not take 1 MiB */
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

int
main(void)
{
	const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
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
		cmocka_unit_test_setup_teardown(test_target_at_limit_is_served, setup_small,
		    teardown),
		cmocka_unit_test_setup_teardown(test_target_over_limit_is_414, setup_small,
		    teardown),
		cmocka_unit_test_setup_teardown(test_target_far_over_limit_is_414_before_line_end, setup_small,
		    teardown),
		cmocka_unit_test_setup_teardown(test_header_bytes_at_limit_are_served, setup_small,
		    teardown),
		cmocka_unit_test_setup_teardown(test_header_bytes_over_limit_is_431, setup_small,
		    teardown),
		cmocka_unit_test_setup_teardown(test_header_count_at_limit_is_served, setup_small,
		    teardown),
		cmocka_unit_test_setup_teardown(test_header_count_over_limit_is_431, setup_small,
		    teardown),
		cmocka_unit_test_setup_teardown(test_body_at_limit_is_served, setup_small,
		    teardown),
		cmocka_unit_test_setup_teardown(test_chunked_body_over_limit_is_413, setup_small,
		    teardown),
		T(test_expect_100_continue_gets_interim_100),
		cmocka_unit_test_setup_teardown(test_expect_100_continue_over_limit_is_413_without_100, setup_small,
		    teardown),
#undef T
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
