/*
 * otlp.c — W3C trace context, span recording and OTLP/HTTP JSON export
 * (see otlp.h).
 *
 * Design:
 *  - ids come from xoshiro256** seeded from libsodium's randombytes_buf();
 *    a pthread_atfork() child handler forces a reseed so that workers forked
 *    from one master never share an id stream.
 *  - a span is serialized to its OTLP JSON object when it ends, into the
 *    exporter's queue: one byte buffer of "<span>," items with an array of
 *    end offsets, bounded in spans and in bytes (drop and count beyond).
 *  - a flush moves the first batch_spans items into the POST body between
 *    a fixed prefix (resource, scope) and suffix; one POST at a time, on
 *    one reused easy handle.
 *  - libcurl runs on the daemon's event_base through the multi socket API:
 *    CURLMOPT_SOCKETFUNCTION maps curl's sockets to libevent events and
 *    CURLMOPT_TIMERFUNCTION to one timer; nothing ever blocks the loop.
 *  - shutdown sends the queue in batches until empty, bounded by a
 *    deadline timer, and reports completion through a zero-delay timer so
 *    the callback always runs from the loop.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <event2/event.h>
#include <sodium.h>

#include "otlp.h"

#define DEF_FLUSH_MS	1000
#define DEF_BATCH	512
#define DEF_QUEUE	4096
#define DEF_TIMEOUT_MS	10000
#define SPAN_BYTES_AVG	2048		/* queue byte bound per queued span */
#define SPAN_BYTES_MAX	(64u << 10)	/* one serialized span, at most */
#define URL_MAX		4096

/* --- ids ------------------------------------------------------------------ */

static uint64_t	rng_s[4];
static bool	rng_seeded;
static bool	rng_atfork;

static void
rng_child(void)
{
	rng_seeded = false;
}

static void
rng_seed(void)
{
	if (!rng_atfork) {
		(void)pthread_atfork(NULL, NULL, rng_child);
		rng_atfork = true;
	}
	if (sodium_init() >= 0)
		randombytes_buf(rng_s, sizeof(rng_s));
	else {
		/* no entropy source: time, pid and an address, mixed */
		uint64_t x = otlp_now_ns() ^ ((uint64_t)getpid() << 32) ^
		    (uint64_t)(uintptr_t)&x;
		int i;

		for (i = 0; i < 4; i++) {
			x += 0x9e3779b97f4a7c15ull;
			rng_s[i] = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
			rng_s[i] = (rng_s[i] ^ (rng_s[i] >> 27)) *
			    0x94d049bb133111ebull;
			rng_s[i] ^= rng_s[i] >> 31;
		}
	}
	if ((rng_s[0] | rng_s[1] | rng_s[2] | rng_s[3]) == 0)
		rng_s[0] = 1;
	rng_seeded = true;
}

static inline uint64_t
rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

/* xoshiro256** */
static uint64_t
rng_next(void)
{
	uint64_t r, t;

	if (!rng_seeded)
		rng_seed();
	r = rotl(rng_s[1] * 5, 7) * 9;
	t = rng_s[1] << 17;
	rng_s[2] ^= rng_s[0];
	rng_s[3] ^= rng_s[1];
	rng_s[1] ^= rng_s[2];
	rng_s[0] ^= rng_s[3];
	rng_s[2] ^= t;
	rng_s[3] = rotl(rng_s[3], 45);
	return r;
}

static bool
all_zero(const uint8_t *p, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (p[i] != 0)
			return false;
	return true;
}

static void
random_id(uint8_t *id, size_t n)
{
	uint64_t v;
	size_t i;

	do {
		for (i = 0; i < n; i += 8) {
			v = rng_next();
			memcpy(id + i, &v, n - i < 8 ? n - i : 8);
		}
	} while (all_zero(id, n));
}

void
otlp_random_trace_id(uint8_t id[OTLP_TRACE_ID_LEN])
{
	random_id(id, OTLP_TRACE_ID_LEN);
}

void
otlp_random_span_id(uint8_t id[OTLP_SPAN_ID_LEN])
{
	random_id(id, OTLP_SPAN_ID_LEN);
}

uint64_t
otlp_now_ns(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
		return 0;
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* --- traceparent ---------------------------------------------------------- */

/* Lowercase hex digit value, or -1 (W3C: HEXDIGLC only). */
static int
hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

static bool
unhex(const char *s, uint8_t *out, size_t n)
{
	size_t i;
	int hi, lo;

	for (i = 0; i < n; i++) {
		if ((hi = hexval(s[2 * i])) < 0 || (lo = hexval(s[2 * i + 1])) < 0)
			return false;
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	return true;
}

/*
 * "vv-<32 hex>-<16 hex>-ff": version ff is invalid; version 00 is exactly
 * 55 characters; a higher version may carry more after a '-' at 55.
 */
bool
otlp_traceparent_parse(const char *s, size_t len, otlp_ctx *out)
{
	uint8_t ver, flags;
	otlp_ctx c;

	if (s == NULL)
		return false;
	while (len > 0 && (*s == ' ' || *s == '\t')) {
		s++;
		len--;
	}
	while (len > 0 && (s[len - 1] == ' ' || s[len - 1] == '\t'))
		len--;
	if (len < OTLP_TRACEPARENT_LEN)
		return false;
	if (!unhex(s, &ver, 1) || ver == 0xff)
		return false;
	if (ver == 0 && len != OTLP_TRACEPARENT_LEN)
		return false;
	if (len > OTLP_TRACEPARENT_LEN && s[OTLP_TRACEPARENT_LEN] != '-')
		return false;
	if (s[2] != '-' || s[35] != '-' || s[52] != '-')
		return false;
	if (!unhex(s + 3, c.trace_id, OTLP_TRACE_ID_LEN) ||
	    !unhex(s + 36, c.span_id, OTLP_SPAN_ID_LEN) ||
	    !unhex(s + 53, &flags, 1))
		return false;
	if (all_zero(c.trace_id, OTLP_TRACE_ID_LEN) ||
	    all_zero(c.span_id, OTLP_SPAN_ID_LEN))
		return false;
	c.flags = flags;
	*out = c;
	return true;
}

void
otlp_traceparent_format(const otlp_ctx *c, char out[OTLP_TRACEPARENT_LEN + 1])
{
	static const char hx[] = "0123456789abcdef";

	out[0] = '0';
	out[1] = '0';
	out[2] = '-';
	sg_hex(out + 3, c->trace_id, OTLP_TRACE_ID_LEN);
	out[35] = '-';
	sg_hex(out + 36, c->span_id, OTLP_SPAN_ID_LEN);
	out[52] = '-';
	out[53] = hx[c->flags >> 4];
	out[54] = hx[c->flags & 0xf];
	out[55] = '\0';
}

/* --- exporter state ------------------------------------------------------ */

struct buf {
	char	*p;
	size_t	 len, cap, max;
	bool	 bad;		/* an append failed (bound or memory) */
};

struct sockev {			/* one socket curl asked us to watch */
	struct event	*ev;
	struct sockev	*prev, *next;
};

struct otlp_exporter {
	struct event_base *base;
	CURLM		*multi;
	CURL		*easy;
	struct curl_slist *hdrs;
	struct sockev	*socks;		/* every sockev, freed at the end */
	char		*url;
	char		*prefix;	/* body up to the spans array */
	size_t		 prefix_len;
	unsigned	 batch;
	size_t		 qmax;		/* queue bound, spans */
	unsigned	 timeout_ms;
	struct event	*flush_ev;	/* periodic */
	struct event	*curl_ev;	/* curl's timer */
	struct event	*deadline_ev;	/* shutdown deadline */
	struct event	*done_ev;	/* zero-delay: report shutdown */
	struct buf	 q;		/* "<span>," items */
	size_t		*ends;		/* end offset of each item in q */
	size_t		 qn;
	struct buf	 body;		/* the POST in flight */
	size_t		 bn;		/* spans in it */
	bool		 inflight;
	bool		 shutting;
	bool		 finished;
	bool		 drain_break;
	void		(*done)(void *);
	void		*done_arg;
	otlp_stats	 st;
};

static const char body_suffix[] = "]}]}]}";

/* --- bounded JSON writer -------------------------------------------------- */

static void
buf_put(struct buf *b, const char *s, size_t n)
{
	size_t ncap;
	char *p;

	if (b->bad)
		return;
	if (n > b->max - b->len) {
		b->bad = true;
		return;
	}
	if (b->len + n > b->cap) {
		ncap = b->cap > 0 ? b->cap : 4096;
		while (ncap < b->len + n)
			ncap = ncap > b->max / 2 ? b->max : ncap * 2;
		if ((p = realloc(b->p, ncap)) == NULL) {
			b->bad = true;
			return;
		}
		b->p = p;
		b->cap = ncap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
}

static void
buf_str(struct buf *b, const char *s)
{
	buf_put(b, s, strlen(s));
}

/* Length of the valid UTF-8 sequence at s[0..n), 0 if invalid. */
static size_t
utf8_seq(const unsigned char *s, size_t n)
{
	size_t want;

	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		want = 2;
	else if (s[0] >= 0xe0 && s[0] <= 0xef)
		want = 3;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		want = 4;
	else
		return 0;
	if (want > n || !sg_utf8_valid((const char *)s, want))
		return 0;
	return want;
}

/* A JSON string; invalid UTF-8 becomes U+FFFD, controls are escaped. */
static void
buf_jstr(struct buf *b, const char *str, size_t n)
{
	static const char hx[] = "0123456789abcdef";
	const unsigned char *s = (const unsigned char *)str;
	size_t i = 0, run, k;
	char esc[8];

	buf_put(b, "\"", 1);
	while (i < n) {
		for (run = i; run < n && s[run] >= 0x20 && s[run] < 0x80 &&
		    s[run] != '"' && s[run] != '\\'; run++)
			;
		buf_put(b, str + i, run - i);
		if ((i = run) >= n)
			break;
		if (s[i] >= 0x80) {
			if ((k = utf8_seq(s + i, n - i)) > 0) {
				buf_put(b, str + i, k);
				i += k;
			} else {
				buf_str(b, "\\ufffd");
				i++;
			}
			continue;
		}
		esc[0] = '\\';
		if (s[i] == '"' || s[i] == '\\') {
			esc[1] = (char)s[i];
			buf_put(b, esc, 2);
		} else if (s[i] == '\n') {
			buf_put(b, "\\n", 2);
		} else if (s[i] == '\t') {
			buf_put(b, "\\t", 2);
		} else if (s[i] == '\r') {
			buf_put(b, "\\r", 2);
		} else {
			memcpy(esc + 1, "u00", 3);
			esc[4] = hx[s[i] >> 4];
			esc[5] = hx[s[i] & 0xf];
			buf_put(b, esc, 6);
		}
		i++;
	}
	buf_put(b, "\"", 1);
}

static void
buf_hexid(struct buf *b, const char *key, const uint8_t *id, size_t n)
{
	char hex[2 * OTLP_TRACE_ID_LEN + 1];

	sg_hex(hex, id, n);
	buf_str(b, key);
	buf_put(b, "\"", 1);
	buf_put(b, hex, 2 * n);
	buf_put(b, "\"", 1);
}

static void
buf_u64str(struct buf *b, uint64_t v)
{
	char num[32];
	int n;

	n = snprintf(num, sizeof(num), "\"%llu\"", (unsigned long long)v);
	buf_put(b, num, (size_t)n);
}

static void
buf_attr_value(struct buf *b, const otlp_attr *a)
{
	char num[40];
	int n;

	switch (a->type) {
	case OTLP_ATTR_STR:
		buf_str(b, "{\"stringValue\":");
		buf_jstr(b, a->s, strlen(a->s));
		break;
	case OTLP_ATTR_INT:
		n = snprintf(num, sizeof(num), "{\"intValue\":\"%lld\"",
		    (long long)a->i);
		buf_put(b, num, (size_t)n);
		break;
	case OTLP_ATTR_DOUBLE:
		if (isnan(a->d))
			buf_str(b, "{\"doubleValue\":\"NaN\"");
		else if (isinf(a->d))
			buf_str(b, a->d > 0 ? "{\"doubleValue\":\"Infinity\"" :
			    "{\"doubleValue\":\"-Infinity\"");
		else {
			n = snprintf(num, sizeof(num), "{\"doubleValue\":%.17g",
			    a->d);
			buf_put(b, num, (size_t)n);
		}
		break;
	default:
		buf_str(b, a->b ? "{\"boolValue\":true" :
		    "{\"boolValue\":false");
		break;
	}
	buf_put(b, "}", 1);
}

/* The span's OTLP JSON object. */
static void
span_json(struct buf *b, const otlp_span *s)
{
	char num[64];
	unsigned i;
	int n;

	buf_hexid(b, "{\"traceId\":", s->ctx.trace_id, OTLP_TRACE_ID_LEN);
	buf_hexid(b, ",\"spanId\":", s->ctx.span_id, OTLP_SPAN_ID_LEN);
	if (s->has_parent)
		buf_hexid(b, ",\"parentSpanId\":", s->parent_id,
		    OTLP_SPAN_ID_LEN);
	buf_str(b, ",\"name\":");
	buf_jstr(b, s->name, strlen(s->name));
	n = snprintf(num, sizeof(num), ",\"kind\":%d,\"startTimeUnixNano\":",
	    s->kind);
	buf_put(b, num, (size_t)n);
	buf_u64str(b, s->start_ns);
	buf_str(b, ",\"endTimeUnixNano\":");
	buf_u64str(b, s->end_ns);
	buf_str(b, ",\"attributes\":[");
	for (i = 0; i < s->nattrs; i++) {
		if (i > 0)
			buf_put(b, ",", 1);
		buf_str(b, "{\"key\":");
		buf_jstr(b, s->attrs[i].key, strlen(s->attrs[i].key));
		buf_str(b, ",\"value\":");
		buf_attr_value(b, &s->attrs[i]);
		buf_put(b, "}", 1);
	}
	buf_put(b, "]", 1);
	if (s->dropped_attrs > 0) {
		n = snprintf(num, sizeof(num), ",\"droppedAttributesCount\":%u",
		    s->dropped_attrs);
		buf_put(b, num, (size_t)n);
	}
	n = snprintf(num, sizeof(num), ",\"status\":{\"code\":%d", s->status);
	buf_put(b, num, (size_t)n);
	if (s->status == OTLP_STATUS_ERROR && s->status_msg[0] != '\0') {
		buf_str(b, ",\"message\":");
		buf_jstr(b, s->status_msg, strlen(s->status_msg));
	}
	buf_str(b, "}}");
}

/* --- spans ---------------------------------------------------------------- */

/* Copy at most max bytes of src[0..n) into dst, cut at a UTF-8 boundary. */
static void
copy_trunc(char *dst, size_t max, const char *src, size_t n)
{
	if (n > max) {
		n = max;
		while (n > 0 && ((unsigned char)src[n] & 0xc0) == 0x80)
			n--;
	}
	memcpy(dst, src, n);
	dst[n] = '\0';
}

void
otlp_span_start(struct otlp_exporter *exp, otlp_span *s, const char *name,
    int kind, const otlp_ctx *parent)
{
	s->exp = exp;
	s->recording = exp != NULL && !exp->shutting &&
	    (parent == NULL || (parent->flags & OTLP_FLAG_SAMPLED));
	if (parent != NULL) {
		memcpy(s->ctx.trace_id, parent->trace_id, OTLP_TRACE_ID_LEN);
		memcpy(s->parent_id, parent->span_id, OTLP_SPAN_ID_LEN);
		s->has_parent = true;
		s->ctx.flags = parent->flags & 0x03;
	} else {
		otlp_random_trace_id(s->ctx.trace_id);
		s->has_parent = false;
		s->ctx.flags = 0x02;	/* Level 2 "random trace id" */
	}
	/* an internal span that records nothing is never exported nor
	 * propagated (no traceparent names it): it needs no id */
	if (s->recording || kind != OTLP_KIND_INTERNAL)
		otlp_random_span_id(s->ctx.span_id);
	else
		memset(s->ctx.span_id, 0, OTLP_SPAN_ID_LEN);
	if (s->recording)
		s->ctx.flags |= OTLP_FLAG_SAMPLED;
	else if (exp != NULL)
		s->ctx.flags &= (uint8_t)~OTLP_FLAG_SAMPLED;
	s->nattrs = 0;
	s->dropped_attrs = 0;
	s->status = OTLP_STATUS_UNSET;
	s->status_msg[0] = '\0';
	s->end_ns = 0;
	if (!s->recording) {
		s->name[0] = '\0';
		s->start_ns = 0;
		return;
	}
	copy_trunc(s->name, OTLP_NAME_MAX, name != NULL ? name : "",
	    name != NULL ? strlen(name) : 0);
	s->kind = kind;
	s->start_ns = otlp_now_ns();
}

void
otlp_span_traceparent(const otlp_span *s, char out[OTLP_TRACEPARENT_LEN + 1])
{
	otlp_traceparent_format(&s->ctx, out);
}

/* The slot for key: existing, new, or NULL (dropped and counted). */
static otlp_attr *
attr_slot(otlp_span *s, const char *key)
{
	size_t klen;
	unsigned i;

	if (!s->recording || key == NULL)
		return NULL;
	for (i = 0; i < s->nattrs; i++)
		if (strcmp(s->attrs[i].key, key) == 0)
			return &s->attrs[i];
	klen = strlen(key);
	if (klen == 0 || klen > OTLP_KEY_MAX || s->nattrs >= OTLP_MAX_ATTRS) {
		s->dropped_attrs++;
		return NULL;
	}
	memcpy(s->attrs[s->nattrs].key, key, klen + 1);
	return &s->attrs[s->nattrs++];
}

void
otlp_span_strn(otlp_span *s, const char *key, const char *val, size_t n)
{
	otlp_attr *a;

	if (val == NULL || (a = attr_slot(s, key)) == NULL)
		return;
	a->type = OTLP_ATTR_STR;
	copy_trunc(a->s, OTLP_STR_MAX, val, n);	/* an inner NUL ends it */
}

void
otlp_span_str(otlp_span *s, const char *key, const char *val)
{
	if (val != NULL && s->recording)	/* no strlen for nothing */
		otlp_span_strn(s, key, val, strlen(val));
}

void
otlp_span_int(otlp_span *s, const char *key, int64_t v)
{
	otlp_attr *a;

	if ((a = attr_slot(s, key)) == NULL)
		return;
	a->type = OTLP_ATTR_INT;
	a->i = v;
}

void
otlp_span_double(otlp_span *s, const char *key, double v)
{
	otlp_attr *a;

	if ((a = attr_slot(s, key)) == NULL)
		return;
	a->type = OTLP_ATTR_DOUBLE;
	a->d = v;
}

void
otlp_span_bool(otlp_span *s, const char *key, bool v)
{
	otlp_attr *a;

	if ((a = attr_slot(s, key)) == NULL)
		return;
	a->type = OTLP_ATTR_BOOL;
	a->b = v;
}

void
otlp_span_status(otlp_span *s, int status, const char *msg)
{
	if (!s->recording)
		return;
	s->status = status;
	s->status_msg[0] = '\0';
	if (status == OTLP_STATUS_ERROR && msg != NULL)
		copy_trunc(s->status_msg, OTLP_MSG_MAX, msg, strlen(msg));
}

static void	exp_kick(otlp_exporter *e);

/* Append the span's JSON to the queue; false when dropped. */
static bool
queue_span(otlp_exporter *e, const otlp_span *s)
{
	size_t start = e->q.len;

	if (e->shutting || e->qn >= e->qmax)
		return false;
	span_json(&e->q, s);
	buf_put(&e->q, ",", 1);
	if (e->q.bad || e->q.len - start > SPAN_BYTES_MAX) {
		e->q.len = start;
		e->q.bad = false;
		return false;
	}
	e->ends[e->qn++] = e->q.len;
	return true;
}

void
otlp_span_end(otlp_span *s)
{
	otlp_exporter *e = s->exp;

	if (!s->recording)
		return;
	s->recording = false;
	s->end_ns = otlp_now_ns();
	if (s->end_ns < s->start_ns)
		s->end_ns = s->start_ns;
	if (!queue_span(e, s)) {
		e->st.dropped++;
		return;
	}
	if (e->qn >= e->batch)
		exp_kick(e);
}

/* --- libcurl on libevent -------------------------------------------------- */

static void	exp_check(otlp_exporter *e);

static void
on_sock_event(evutil_socket_t fd, short what, void *arg)
{
	otlp_exporter *e = arg;
	int running, action = 0;

	if (what & EV_READ)
		action |= CURL_CSELECT_IN;
	if (what & EV_WRITE)
		action |= CURL_CSELECT_OUT;
	(void)curl_multi_socket_action(e->multi, fd, action, &running);
	exp_check(e);
}

static void
sock_free(otlp_exporter *e, struct sockev *se)
{
	if (se->prev != NULL)
		se->prev->next = se->next;
	else
		e->socks = se->next;
	if (se->next != NULL)
		se->next->prev = se->prev;
	event_free(se->ev);
	free(se);
}

static int
on_curl_socket(CURL *easy, curl_socket_t s, int what, void *userp,
    void *socketp)
{
	otlp_exporter *e = userp;
	struct sockev *se = socketp;
	short flags = EV_PERSIST;

	(void)easy;
	if (what == CURL_POLL_REMOVE) {
		if (se != NULL)
			sock_free(e, se);
		(void)curl_multi_assign(e->multi, s, NULL);
		return 0;
	}
	if (what == CURL_POLL_IN || what == CURL_POLL_INOUT)
		flags |= EV_READ;
	if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT)
		flags |= EV_WRITE;
	if (se == NULL) {
		if ((se = calloc(1, sizeof(*se))) == NULL)
			return -1;
		se->ev = event_new(e->base, s, flags, on_sock_event, e);
		if (se->ev == NULL) {
			free(se);
			return -1;
		}
		if ((se->next = e->socks) != NULL)
			se->next->prev = se;
		e->socks = se;
		(void)curl_multi_assign(e->multi, s, se);
	} else {
		(void)event_del(se->ev);
		if (event_assign(se->ev, e->base, s, flags, on_sock_event,
		    e) != 0)
			return -1;
	}
	return event_add(se->ev, NULL) == 0 ? 0 : -1;
}

static void
on_curl_timer_event(evutil_socket_t fd, short what, void *arg)
{
	otlp_exporter *e = arg;
	int running;

	(void)fd;
	(void)what;
	(void)curl_multi_socket_action(e->multi, CURL_SOCKET_TIMEOUT, 0,
	    &running);
	exp_check(e);
}

static int
on_curl_timer(CURLM *multi, long timeout_ms, void *userp)
{
	otlp_exporter *e = userp;
	struct timeval tv;

	(void)multi;
	if (timeout_ms < 0)
		return evtimer_del(e->curl_ev) == 0 ? 0 : -1;
	tv.tv_sec = timeout_ms / 1000;
	tv.tv_usec = (timeout_ms % 1000) * 1000;
	return evtimer_add(e->curl_ev, &tv) == 0 ? 0 : -1;
}

static size_t
on_body(char *p, size_t size, size_t n, void *arg)
{
	(void)p;
	(void)arg;
	return size * n;	/* the response is not needed */
}

/* --- batches ------------------------------------------------------------- */

/* Move the first batch of the queue into the body and start the POST. */
static void
exp_post(otlp_exporter *e)
{
	size_t k, cut, i;

	if (e->inflight || e->qn == 0 || e->finished)
		return;
	k = e->qn < e->batch ? e->qn : e->batch;
	cut = e->ends[k - 1];
	e->body.len = 0;
	e->body.bad = false;
	buf_put(&e->body, e->prefix, e->prefix_len);
	buf_put(&e->body, e->q.p, cut - 1);	/* without the last ',' */
	buf_put(&e->body, body_suffix, sizeof(body_suffix) - 1);
	memmove(e->q.p, e->q.p + cut, e->q.len - cut);
	e->q.len -= cut;
	for (i = k; i < e->qn; i++)
		e->ends[i - k] = e->ends[i] - cut;
	e->qn -= k;
	e->bn = k;
	if (e->body.bad ||
	    curl_easy_setopt(e->easy, CURLOPT_POSTFIELDS, e->body.p) != CURLE_OK ||
	    curl_easy_setopt(e->easy, CURLOPT_POSTFIELDSIZE_LARGE,
	    (curl_off_t)e->body.len) != CURLE_OK ||
	    curl_multi_add_handle(e->multi, e->easy) != CURLM_OK) {
		e->st.failed += k;
		e->st.request_failures++;
		e->bn = 0;
		return;
	}
	e->inflight = true;
}

static void
exp_finish(otlp_exporter *e)
{
	struct timeval zero = { 0, 0 };

	if (e->finished)
		return;
	e->finished = true;
	(void)evtimer_del(e->deadline_ev);
	(void)evtimer_del(e->flush_ev);
	(void)evtimer_add(e->done_ev, &zero);
}

/* Collect finished transfers; start the next batch when due. */
static void
exp_check(otlp_exporter *e)
{
	CURLMsg *m;
	long code = 0;
	int left;

	while ((m = curl_multi_info_read(e->multi, &left)) != NULL) {
		if (m->msg != CURLMSG_DONE)
			continue;
		(void)curl_easy_getinfo(m->easy_handle, CURLINFO_RESPONSE_CODE,
		    &code);
		(void)curl_multi_remove_handle(e->multi, m->easy_handle);
		e->inflight = false;
		e->st.requests++;
		if (m->data.result == CURLE_OK && code >= 200 && code < 300)
			e->st.exported += e->bn;
		else {
			e->st.failed += e->bn;
			e->st.request_failures++;
		}
		e->bn = 0;
		break;		/* m is invalid after remove_handle */
	}
	if (e->inflight)
		return;
	if (e->shutting) {
		while (!e->inflight && e->qn > 0 && !e->finished)
			exp_post(e);	/* a failed start drops one batch */
		if (!e->inflight)
			exp_finish(e);
	} else if (e->qn >= e->batch)
		exp_post(e);
}

/* A batch is full: post now if nothing is in flight. */
static void
exp_kick(otlp_exporter *e)
{
	if (!e->inflight)
		exp_post(e);
}

static void
on_flush(evutil_socket_t fd, short what, void *arg)
{
	otlp_exporter *e = arg;

	(void)fd;
	(void)what;
	if (!e->inflight && e->qn > 0)
		exp_post(e);
}

static void
on_done(evutil_socket_t fd, short what, void *arg)
{
	otlp_exporter *e = arg;
	void (*done)(void *) = e->done;

	(void)fd;
	(void)what;
	e->done = NULL;
	if (e->drain_break)
		(void)event_base_loopbreak(e->base);
	if (done != NULL)
		done(e->done_arg);
}

/* Deadline: abandon the POST in flight and whatever is queued. */
static void
on_deadline(evutil_socket_t fd, short what, void *arg)
{
	otlp_exporter *e = arg;

	(void)fd;
	(void)what;
	if (e->inflight) {
		(void)curl_multi_remove_handle(e->multi, e->easy);
		e->inflight = false;
		e->st.failed += e->bn;
		e->st.request_failures++;
		e->bn = 0;
	}
	e->st.dropped += e->qn;
	e->qn = 0;
	e->q.len = 0;
	exp_finish(e);
}

/* --- lifecycle ------------------------------------------------------------ */

/*
 * endpoint -> URL of the traces signal in *out: a path ending in /v1/traces
 * (or /v1/traces/) is used as is, else trailing slashes go and /v1/traces
 * is appended.  0, SG_ECONFIG or SG_ENOMEM (err filled).
 */
static int
traces_url(const char *ep, char **out, sg_error *err)
{
	static const char sfx[] = "/v1/traces";
	size_t n = strlen(ep), sl = sizeof(sfx) - 1, min;
	char *url;

	if (strncasecmp(ep, "http://", 7) == 0)
		min = 8;
	else if (strncasecmp(ep, "https://", 8) == 0)
		min = 9;
	else
		return sg_seterr(err, SG_ECONFIG, "OTEL_EXPORTER_OTLP_ENDPOINT: "
		    "expected an http:// or https:// URL");
	if (n < min || n > URL_MAX)
		return sg_seterr(err, SG_ECONFIG, "OTEL_EXPORTER_OTLP_ENDPOINT: "
		    "expected a URL of at most %d bytes with a host", URL_MAX);
	if ((url = malloc(n + sl + 1)) == NULL)
		return sg_seterr(err, SG_ENOMEM, "out of memory");
	memcpy(url, ep, n + 1);
	if (url[n - 1] == '/' && n - 1 > min)
		n--;
	if (!(n - min >= sl && memcmp(url + n - sl, sfx, sl) == 0)) {
		n = strlen(url);
		while (n > min && url[n - 1] == '/')
			n--;
		memcpy(url + n, sfx, sl + 1);
	}
	*out = url;
	return 0;
}

static int
body_prefix(otlp_exporter *e, const char *service)
{
	struct buf b = { NULL, 0, 0, 4096, false };
	char num[64];
	int n;

	buf_str(&b, "{\"resourceSpans\":[{\"resource\":{\"attributes\":["
	    "{\"key\":\"service.name\",\"value\":{\"stringValue\":");
	buf_jstr(&b, service, strlen(service));
	n = snprintf(num, sizeof(num), "}},{\"key\":\"process.pid\","
	    "\"value\":{\"intValue\":\"%ld\"}}]},", (long)getpid());
	buf_put(&b, num, (size_t)n);
	buf_str(&b, "\"scopeSpans\":[{\"scope\":{\"name\":\"sg-proxy\","
	    "\"version\":\"" SG_VERSION "\"},\"spans\":[");
	if (b.bad) {
		free(b.p);
		return SG_ENOMEM;
	}
	e->prefix = b.p;
	e->prefix_len = b.len;
	return 0;
}

static int
easy_setup(otlp_exporter *e)
{
	CURL *c = e->easy;
	int bad = 0;

	if ((e->hdrs = curl_slist_append(NULL,
	    "Content-Type: application/json")) == NULL)
		return SG_ENOMEM;
	{
		struct curl_slist *t = curl_slist_append(e->hdrs, "Expect:");

		if (t == NULL)
			return SG_ENOMEM;
		e->hdrs = t;
	}
	bad |= curl_easy_setopt(c, CURLOPT_URL, e->url) != CURLE_OK;
	bad |= curl_easy_setopt(c, CURLOPT_HTTPHEADER, e->hdrs) != CURLE_OK;
	bad |= curl_easy_setopt(c, CURLOPT_POST, 1L) != CURLE_OK;
	bad |= curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L) != CURLE_OK;
	bad |= curl_easy_setopt(c, CURLOPT_TIMEOUT_MS,
	    (long)e->timeout_ms) != CURLE_OK;
	bad |= curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS,
	    (long)(e->timeout_ms < 5000 ? e->timeout_ms : 5000)) != CURLE_OK;
	bad |= curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body) != CURLE_OK;
#if LIBCURL_VERSION_NUM >= 0x075500
	bad |= curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https") !=
	    CURLE_OK;
#endif
	return bad ? SG_ECONFIG : 0;
}

static int
events_setup(otlp_exporter *e, unsigned flush_ms)
{
	struct timeval tv;

	e->flush_ev = event_new(e->base, -1, EV_PERSIST, on_flush, e);
	e->curl_ev = evtimer_new(e->base, on_curl_timer_event, e);
	e->deadline_ev = evtimer_new(e->base, on_deadline, e);
	e->done_ev = evtimer_new(e->base, on_done, e);
	if (e->flush_ev == NULL || e->curl_ev == NULL ||
	    e->deadline_ev == NULL || e->done_ev == NULL)
		return SG_ENOMEM;
	tv.tv_sec = flush_ms / 1000;
	tv.tv_usec = (flush_ms % 1000) * 1000;
	return evtimer_add(e->flush_ev, &tv) == 0 ? 0 : SG_ENOMEM;
}

int
otlp_exporter_new(otlp_exporter **out, struct event_base *base,
    const otlp_options *o, sg_error *err)
{
	otlp_exporter *e;
	int rc;

	*out = NULL;
	if (o == NULL || o->endpoint == NULL || o->endpoint[0] == '\0')
		return 0;
	if ((e = calloc(1, sizeof(*e))) == NULL)
		return sg_seterr(err, SG_ENOMEM, "out of memory");
	e->base = base;
	e->batch = o->batch_spans > 0 ? o->batch_spans : DEF_BATCH;
	e->qmax = o->queue_spans > 0 ? o->queue_spans : DEF_QUEUE;
	if (e->qmax < e->batch)
		e->qmax = e->batch;
	e->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : DEF_TIMEOUT_MS;
	e->q.max = e->qmax * SPAN_BYTES_AVG + SPAN_BYTES_MAX;
	e->body.max = e->q.max + 8192;
	if ((rc = traces_url(o->endpoint, &e->url, err)) != 0)
		goto fail;
	rc = SG_ENOMEM;
	if ((e->ends = calloc(e->qmax, sizeof(*e->ends))) == NULL ||
	    body_prefix(e, o->service_name != NULL ? o->service_name :
	    "sg-proxy") != 0 ||
	    (e->multi = curl_multi_init()) == NULL ||
	    (e->easy = curl_easy_init()) == NULL) {
		sg_seterr(err, rc, "out of memory");
		goto fail;
	}
	if ((rc = easy_setup(e)) != 0) {
		sg_seterr(err, rc, "OTLP exporter: cannot set up libcurl");
		goto fail;
	}
	if (curl_multi_setopt(e->multi, CURLMOPT_SOCKETFUNCTION,
	    on_curl_socket) != CURLM_OK ||
	    curl_multi_setopt(e->multi, CURLMOPT_SOCKETDATA, e) != CURLM_OK ||
	    curl_multi_setopt(e->multi, CURLMOPT_TIMERFUNCTION,
	    on_curl_timer) != CURLM_OK ||
	    curl_multi_setopt(e->multi, CURLMOPT_TIMERDATA, e) != CURLM_OK) {
		rc = sg_seterr(err, SG_ECONFIG,
		    "OTLP exporter: cannot set up libcurl");
		goto fail;
	}
	if ((rc = events_setup(e, o->flush_interval_ms > 0 ?
	    o->flush_interval_ms : DEF_FLUSH_MS)) != 0) {
		sg_seterr(err, rc, "out of memory");
		goto fail;
	}
	*out = e;
	return 0;
fail:
	otlp_exporter_free(e);
	return rc;
}

void
otlp_exporter_shutdown(otlp_exporter *e, unsigned timeout_ms,
    void (*done)(void *arg), void *arg)
{
	struct timeval tv;

	if (e == NULL || e->shutting)
		return;
	e->shutting = true;
	e->done = done;
	e->done_arg = arg;
	tv.tv_sec = timeout_ms / 1000;
	tv.tv_usec = (timeout_ms % 1000) * 1000;
	(void)evtimer_add(e->deadline_ev, &tv);
	exp_check(e);
}

void
otlp_exporter_drain(otlp_exporter *e, unsigned timeout_ms)
{
	struct timeval tv;

	if (e == NULL || e->finished)
		return;
	e->drain_break = true;
	if (!e->shutting)
		otlp_exporter_shutdown(e, timeout_ms, NULL, NULL);
	else {
		tv.tv_sec = timeout_ms / 1000;
		tv.tv_usec = (timeout_ms % 1000) * 1000;
		(void)evtimer_add(e->deadline_ev, &tv);
	}
	(void)event_base_loop(e->base, 0);
	/* done_ev may still be pending if the loop ended another way. */
	if (evtimer_pending(e->done_ev, NULL))
		(void)evtimer_del(e->done_ev);
}

void
otlp_exporter_stats(const otlp_exporter *e, otlp_stats *st)
{
	memset(st, 0, sizeof(*st));
	if (e == NULL)
		return;
	*st = e->st;
	st->queued = e->qn;
}

void
otlp_exporter_free(otlp_exporter *e)
{
	if (e == NULL)
		return;
	if (e->multi != NULL && e->easy != NULL && e->inflight)
		(void)curl_multi_remove_handle(e->multi, e->easy);
	if (e->easy != NULL)
		curl_easy_cleanup(e->easy);
	if (e->multi != NULL)
		curl_multi_cleanup(e->multi);
	curl_slist_free_all(e->hdrs);
	while (e->socks != NULL)
		sock_free(e, e->socks);
	if (e->flush_ev != NULL)
		event_free(e->flush_ev);
	if (e->curl_ev != NULL)
		event_free(e->curl_ev);
	if (e->deadline_ev != NULL)
		event_free(e->deadline_ev);
	if (e->done_ev != NULL)
		event_free(e->done_ev);
	free(e->url);
	free(e->prefix);
	free(e->ends);
	free(e->q.p);
	free(e->body.p);
	free(e);
}
