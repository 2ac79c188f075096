/*
 * serve.c — sg-mockengine's HTTP side: libevent's evhttp in front of the
 * engine model (tools/common/engine.c) running in real time.
 *
 * Time: the engine's clock is milliseconds of CLOCK_MONOTONIC since start.
 * The event base uses precise timers (not libevent's coarse clock, whose
 * ticks every engine event would otherwise wait for), and an event already
 * due runs in the same loop iteration.
 * One libevent timer is kept armed at the engine's next internal event; it
 * advances the engine, which calls back on a request's first token and on
 * its last.  A streamed response sends one SSE chunk per token: a per-request
 * ticker (every 1000/decode_tps ms) sends what the engine has generated so
 * far, and the done event sends the rest, the finish chunk, the optional
 * usage chunk and "data: [DONE]".  A unary response is sent whole at done.
 *
 * A request's life: parse and validate (400/404 on error), optional seeded
 * jitter delay, eng_submit (503 retryable when the queue is full), first
 * token, done, free.  While a request is served its client socket is
 * watched (libevent does not read it then): EOF or a reset closes the
 * connection.  If the client goes away first, the connection's close
 * callback cancels the engine request (its slot or queue place is freed at
 * once) and frees the context; the evhttp request is never touched again.
 *
 * Client input is bounded: every token count (headers and JSON fields) is
 * at most MAX_TOKENS, anything else is a 400; a request must arrive within
 * the header and body timeouts (the mconn deadlines below), else 408.
 * Every answer carries the --cluster-id as system_fingerprint.
 *
 * Nothing here logs prompt text, cache keys or request bodies.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>
#include <sodium.h>

#include "sg_metrics.h"
#include "sg_snapshot.h"
#include "sg-mockengine/mock.h"

#define MAX_BODY	(16u << 20)
/*
 * Every token count a request gives (x-input-tokens, x-output-tokens,
 * max_tokens and the like) is at most this; the default output length
 * (--tokens) is bounded the same.  So the engine's sums stay far from
 * overflow: MAX_BODY bytes estimate at most 4 Mi input tokens, and the
 * queue holds at most 10^7 requests.
 */
#define MAX_TOKENS	1000000
#define SWEEP_MS	50	/* connection deadlines checked this often */

typedef struct mreq mreq;
typedef struct mconn mconn;

#define MX_N	9	/* /metrics families fed from the engine */

typedef struct mock {
	const mock_opts		*o;
	struct event_base	*base;
	struct evhttp		*http;
	eng			*e;
	struct event		*etimer;
	struct timespec		 t0;
	mreq			*live;		/* every context, for shutdown */
	uint64_t		 counter;
	long			 started;	/* wall clock, for "created" */
	double			 tick_ms;
	bool			 stopping;	/* shutdown: engine frozen */
	json_t			*seen;		/* header name -> count */
	sg_metrics		*reg;		/* /metrics */
	sg_series		*mx[MX_N];
	uint64_t		 seen_requests;	/* API requests counted */
	mconn			*conns;		/* every client connection */
	struct event		*sweep;		/* connection deadlines */
} mock;

/*
 * A client connection (evhttp_set_bevcb gives us its bufferevent, which we
 * hold a reference to; a callback on its input buffer sees every byte that
 * arrives).  The request line and headers must arrive within
 * --header-timeout-ms of the connection's start or of the first byte after
 * the previous answer, the body within --body-timeout-ms of the end of the
 * headers; a sweep every SWEEP_MS answers a late request 408 and closes the
 * connection.  No deadline runs while a request is served or while a kept-
 * alive connection is idle (evhttp's own idle timeout applies then).
 */
enum { CP_IDLE, CP_HEAD, CP_BODY, CP_SERVE };

struct mconn {
	mock			*m;
	struct bufferevent	*bev;
	struct evbuffer_cb_entry *cbe;		/* on its input buffer */
	double			 deadline;	/* engine ms, HEAD and BODY */
	int			 phase;		/* CP_* */
	size_t			 linelen;	/* bytes of the current line */
	bool			 any;		/* a non-empty line seen */
	bool			 closed;	/* shut down, not yet freed */
	mconn			*prev, *next;
};

/* What a request asks for. */
enum kind { K_TEXT, K_CHAT, K_RESP, K_EMBED };

struct mreq {
	mock			*m;
	struct evhttp_request	*req;		/* NULL once the client is gone */
	struct evhttp_connection *conn;
	uint32_t		 handle;	/* ENG_NONE until submitted */
	int			 kind;		/* enum kind */
	bool			 stream;
	bool			 usage;		/* stream_options.include_usage */
	bool			 limited;	/* max_tokens cut the answer */
	bool			 started;	/* stream headers sent */
	bool			 busy;		/* inside on_tick: defer the free */
	bool			 finished;	/* done while busy */
	uint64_t		 input;
	uint64_t		 output;
	uint64_t		 sent;		/* tokens streamed so far */
	uint64_t		 key;
	uint64_t		*blocks;
	uint32_t		 nblocks;
	uint64_t		*emb;		/* embeddings: a hash per input */
	uint32_t		 nemb;
	uint32_t		 dims;
	bool			 b64;		/* encoding_format "base64" */
	uint64_t		 seq;		/* responses stream: next event */
	eng_info		 info;		/* copy at first token / done */
	struct event		*tick;
	struct event		*delay;
	struct event		*watch;		/* client socket: EOF = gone */
	char			 id[48];
	mreq			*prev, *next;
};

static const char *const words[] = {
	"Hello", " from", " the", " Stargate", " mock", " engine", ",",
	" a", " model", " of", " slots", ",", " queues", " and", " caches", ".",
};
#define NWORDS	(sizeof(words) / sizeof(words[0]))

/* --- small helpers --------------------------------------------------------- */

static double
now_ms(const mock *m)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)(t.tv_sec - m->t0.tv_sec) * 1000.0 +
	    (double)(t.tv_nsec - m->t0.tv_nsec) / 1e6;
}

static uint64_t
splitmix(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

static void
set_header(struct evhttp_request *req, const char *name, const char *value)
{
	struct evkeyvalq *h = evhttp_request_get_output_headers(req);

	evhttp_remove_header(h, name);
	evhttp_add_header(h, name, value);
}

static void
set_header_u64(struct evhttp_request *req, const char *name, uint64_t v)
{
	char buf[32];

	snprintf(buf, sizeof(buf), "%" PRIu64, v);
	set_header(req, name, buf);
}

/* Send a JSON document (stolen) with status. */
static void
send_json(struct evhttp_request *req, int status, const char *reason,
    json_t *doc)
{
	struct evbuffer *b = evbuffer_new();
	char *text = doc != NULL ? json_dumps(doc, JSON_COMPACT) : NULL;

	json_decref(doc);
	set_header(req, "Content-Type", "application/json");
	if (b != NULL && text != NULL) {
		evbuffer_add(b, text, strlen(text));
		evbuffer_add(b, "\n", 1);
		evhttp_send_reply(req, status, reason, b);
	} else
		evhttp_send_error(req, 500, "Internal Server Error");
	free(text);
	if (b != NULL)
		evbuffer_free(b);
}

/* OpenAI-style error object. */
static void
send_error(struct evhttp_request *req, int status, const char *reason,
    const char *type, const char *code, const char *msg)
{
	json_t *err = json_pack("{s:{s:s,s:s,s:n,s:s?}}", "error", "message",
	    msg, "type", type, "param", "code", code);

	send_json(req, status, reason, err);
}

static const char *
reason_phrase(int status)
{
	switch (status) {
	case 200: return "OK";
	case 400: return "Bad Request";
	case 404: return "Not Found";
	case 405: return "Method Not Allowed";
	case 413: return "Payload Too Large";
	case 503: return "Service Unavailable";
	default: return "Error";
	}
}

/* --- engine timer ---------------------------------------------------------- */

static void
arm(mock *m)
{
	double t = eng_next_event(m->e), d;
	struct timeval tv;

	if (isinf(t)) {
		evtimer_del(m->etimer);
		return;
	}
	d = t - now_ms(m);
	if (!(d > 0)) {
		/* Due already: run in this loop iteration, not at a timer
		 * tick. */
		evtimer_del(m->etimer);
		event_active(m->etimer, EV_TIMEOUT, 1);
		return;
	}
	tv.tv_sec = (time_t)(d / 1000.0);
	tv.tv_usec = (suseconds_t)((d - (double)tv.tv_sec * 1000.0) * 1000.0);
	if (tv.tv_usec >= 1000000) {
		tv.tv_sec++;
		tv.tv_usec -= 1000000;
	}
	/* Round up to the next microsecond so the event is due when we wake. */
	tv.tv_usec += 1;
	if (tv.tv_usec >= 1000000) {
		tv.tv_sec++;
		tv.tv_usec -= 1000000;
	}
	evtimer_add(m->etimer, &tv);
}

static void
on_etimer(evutil_socket_t fd, short what, void *arg)
{
	mock *m = arg;

	(void)fd;
	(void)what;
	eng_advance(m->e, now_ms(m));
	arm(m);
}

/* --- request contexts ------------------------------------------------------ */

static void on_close(struct evhttp_connection *conn, void *arg);

static void
mreq_free(mreq *r)
{
	mock *m = r->m;

	if (r->conn != NULL)
		evhttp_connection_set_closecb(r->conn, NULL, NULL);
	if (r->handle != ENG_NONE)
		eng_cancel(m->e, r->handle);
	if (r->tick != NULL)
		event_free(r->tick);
	if (r->delay != NULL)
		event_free(r->delay);
	if (r->watch != NULL)
		event_free(r->watch);
	free(r->blocks);
	free(r->emb);
	if (r->prev != NULL)
		r->prev->next = r->next;
	else
		m->live = r->next;
	if (r->next != NULL)
		r->next->prev = r->prev;
	free(r);
}

static void
on_close(struct evhttp_connection *conn, void *arg)
{
	mreq *r = arg;
	mock *m = r->m;

	(void)conn;
	/*
	 * A client that went away while we still owed it an answer leaves
	 * the request detached from its connection (libevent hands it to
	 * us so that a reply in progress is not freed under our feet): it
	 * is ours to free.  When we close the connection ourselves (on_peer)
	 * or at shutdown the request is still attached and libevent frees it
	 * after this callback.
	 */
	if (r->req != NULL && evhttp_request_get_connection(r->req) == NULL)
		evhttp_request_free(r->req);
	r->req = NULL;
	r->conn = NULL;		/* the connection is going away */
	/*
	 * The engine forgets the request now: first catch up to now (what
	 * finished before the client left did finish; on_engine ignores
	 * this request, which has no client), then free its slot or take
	 * it out of the queue.
	 */
	if (r->handle != ENG_NONE && !m->stopping) {
		eng_advance(m->e, now_ms(m));
		if (r->handle != ENG_NONE)
			eng_cancel(m->e, r->handle);
		r->handle = ENG_NONE;
		mreq_free(r);
		arm(m);
		return;
	}
	mreq_free(r);
}

/*
 * The client's socket became readable while its request is served: libevent
 * does not read then, so this is how a client that went away (EOF or reset)
 * is noticed before a reply is written.  Bytes of a pipelined request stop
 * the watch (libevent reads them after the reply).
 */
static void
on_peer(evutil_socket_t fd, short what, void *arg)
{
	mreq *r = arg;
	ssize_t n;
	char c;

	(void)what;
	n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
	if (n > 0) {
		event_del(r->watch);
		return;
	}
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK ||
	    errno == EINTR))
		return;
	if (r->conn != NULL)
		evhttp_connection_free(r->conn);	/* on_close frees r */
}

/* Watch the client socket of r (best effort: without it, a client that
 * leaves is noticed when a write fails). */
static void
watch_peer(mreq *r)
{
	struct bufferevent *bev;
	evutil_socket_t fd;

	if (r->conn == NULL ||
	    (bev = evhttp_connection_get_bufferevent(r->conn)) == NULL ||
	    (fd = bufferevent_getfd(bev)) < 0)
		return;
	r->watch = event_new(r->m->base, fd, EV_READ | EV_PERSIST, on_peer, r);
	if (r->watch != NULL && event_add(r->watch, NULL) != 0) {
		event_free(r->watch);
		r->watch = NULL;
	}
}

static json_t *
usage_json(const mreq *r)
{
	return json_pack("{s:I,s:I,s:I,s:{s:I}}",
	    "prompt_tokens", (json_int_t)r->input,
	    "completion_tokens", (json_int_t)r->output,
	    "total_tokens", (json_int_t)(r->input + r->output),
	    "prompt_tokens_details", "cached_tokens",
	    (json_int_t)r->info.reused_tokens);
}

static void
kv_headers(mreq *r)
{
	set_header(r->req, "x-kv-cache-hit", r->info.hit ? "true" : "false");
	set_header_u64(r->req, "x-kv-cache-reused-input-tokens",
	    r->info.reused_tokens);
	set_header_u64(r->req, "x-kv-cache-uncached-input-tokens",
	    r->info.uncached_tokens);
	set_header_u64(r->req, "x-kv-cache-evicted-entries",
	    r->info.evicted_entries);
	set_header_u64(r->req, "x-kv-cache-evicted-tokens",
	    r->info.evicted_tokens);
}

/* The id of a response's message item: "msg_" and the response id's hex. */
static const char *
msg_id(const mreq *r)
{
	static char buf[64];

	snprintf(buf, sizeof(buf), "msg_%s", r->id + 5);
	return buf;
}

static json_t *resp_json(const mreq *r, bool done);

/*
 * o (a response or chunk object, may be NULL) with system_fingerprint set
 * to the --cluster-id, so that a client behind a router sees which cluster
 * served it.
 */
static json_t *
fingerprint(const mock *m, json_t *o)
{
	if (o != NULL)
		json_object_set_new(o, "system_fingerprint",
		    json_string(m->o->cluster_id));
	return o;
}

/* One chunk object; delta text, or the finish chunk when finish != NULL. */
static json_t *
chunk_json(const mreq *r, const char *text, bool role, const char *finish)
{
	const mock *m = r->m;
	json_t *choice, *o;

	if (r->kind == K_RESP)
		return json_pack("{s:s,s:I,s:s,s:i,s:i,s:s}", "type",
		    "response.output_text.delta", "sequence_number",
		    (json_int_t)0, "item_id", msg_id(r), "output_index", 0,
		    "content_index", 0, "delta", text != NULL ? text : "");
	if (r->kind == K_CHAT) {
		json_t *delta = json_object();

		if (role)
			json_object_set_new(delta, "role",
			    json_string("assistant"));
		if (text != NULL)
			json_object_set_new(delta, "content", json_string(text));
		choice = json_pack("{s:i,s:o,s:n,s:s?}", "index", 0, "delta",
		    delta, "logprobs", "finish_reason", finish);
	} else
		choice = json_pack("{s:s,s:i,s:n,s:s?}", "text",
		    text != NULL ? text : "", "index", 0, "logprobs",
		    "finish_reason", finish);
	if (choice != NULL && finish == NULL)
		json_object_set_new(choice, "finish_reason", json_null());
	o = json_pack("{s:s,s:s,s:I,s:s,s:[o]}", "id", r->id, "object",
	    r->kind == K_CHAT ? "chat.completion.chunk" : "text_completion",
	    "created",
	    (json_int_t)m->started, "model", m->o->model, "choices", choice);
	return fingerprint(m, o);
}

/*
 * One server-sent event: "data: <doc>".  A Responses API stream names its
 * events ("event: <type>") and numbers them.
 */
static void
sse(mreq *r, json_t *doc)
{
	struct evbuffer *b;
	const char *type;
	char *text;

	if (doc == NULL)
		return;
	if (r->kind == K_RESP)
		json_object_set_new(doc, "sequence_number",
		    json_integer((json_int_t)r->seq++));
	type = json_string_value(json_object_get(doc, "type"));
	text = json_dumps(doc, JSON_COMPACT);
	if (text != NULL && (b = evbuffer_new()) != NULL) {
		if (r->kind == K_RESP && type != NULL)
			evbuffer_add_printf(b, "event: %s\n", type);
		evbuffer_add_printf(b, "data: %s\n\n", text);
		evhttp_send_reply_chunk(r->req, b);
		evbuffer_free(b);
	}
	free(text);
	json_decref(doc);
}

/* Stream tokens sent..upto-1. */
static void
stream_tokens(mreq *r, uint64_t upto)
{
	for (; r->sent < upto; r->sent++)
		sse(r, chunk_json(r, words[r->sent % NWORDS], false, NULL));
}

static void
on_tick(evutil_socket_t fd, short what, void *arg)
{
	mreq *r = arg;
	mock *m = r->m;
	uint64_t g;

	(void)fd;
	(void)what;
	/* Advancing may finish this very request: on_engine then leaves
	 * the free to us. */
	r->busy = true;
	eng_advance(m->e, now_ms(m));
	arm(m);
	r->busy = false;
	if (r->finished) {
		mreq_free(r);
		return;
	}
	g = eng_generated(m->e, r->handle, now_ms(m));
	if (g >= r->output)
		g = r->output - 1;	/* the last token goes with "done" */
	stream_tokens(r, g);
}

static void
stream_start(mreq *r)
{
	struct timeval tv;

	kv_headers(r);
	set_header(r->req, "Content-Type", "text/event-stream");
	set_header(r->req, "Cache-Control", "no-cache");
	evhttp_send_reply_start(r->req, 200, "OK");
	r->started = true;
	/* Role (or the response in progress) first, then the first token. */
	if (r->kind == K_CHAT)
		sse(r, chunk_json(r, "", true, NULL));
	else if (r->kind == K_RESP)
		sse(r, json_pack("{s:s,s:o}", "type", "response.created",
		    "response", resp_json(r, false)));
	if (r->output > 1)
		stream_tokens(r, 1);
	r->tick = event_new(r->m->base, -1, EV_PERSIST, on_tick, r);
	if (r->tick != NULL) {
		tv.tv_sec = (time_t)(r->m->tick_ms / 1000.0);
		tv.tv_usec = (suseconds_t)((r->m->tick_ms -
		    (double)tv.tv_sec * 1000.0) * 1000.0);
		event_add(r->tick, &tv);
	}
}

/* The answer text: r->output words (malloc'd; NULL on ENOMEM). */
static char *
answer_text(const mreq *r)
{
	size_t len = 0, i;
	char *text;

	for (i = 0; i < r->output; i++)
		len += strlen(words[i % NWORDS]);
	if ((text = malloc(len + 1)) == NULL)
		return NULL;
	text[0] = '\0';
	for (i = 0, len = 0; i < r->output; i++) {
		size_t n = strlen(words[i % NWORDS]);

		memcpy(text + len, words[i % NWORDS], n + 1);
		len += n;
	}
	return text;
}

/* A Responses API response object: in progress (no output yet) or done. */
static json_t *
resp_json(const mreq *r, bool done)
{
	const mock *m = r->m;
	json_t *o, *out;
	char *text;

	if (!done)
		out = json_array();
	else if ((text = answer_text(r)) == NULL)
		return NULL;
	else {
		out = json_pack("[{s:s,s:s,s:s,s:s,s:[{s:s,s:s,s:[]}]}]",
		    "type", "message", "id", msg_id(r), "status", "completed",
		    "role", "assistant", "content", "type", "output_text",
		    "text", text, "annotations");
		free(text);
	}
	o = fingerprint(m, json_pack("{s:s,s:s,s:I,s:s,s:s,s:o}", "id", r->id,
	    "object", "response", "created_at", (json_int_t)m->started,
	    "status", !done ? "in_progress" : r->limited ? "incomplete" :
	    "completed", "model", m->o->model, "output", out));
	if (o == NULL)
		return NULL;
	json_object_set_new(o, "incomplete_details", done && r->limited ?
	    json_pack("{s:s}", "reason", "max_output_tokens") : json_null());
	json_object_set_new(o, "usage", !done ? json_null() :
	    json_pack("{s:I,s:{s:I},s:I,s:{s:i},s:I}",
	    "input_tokens", (json_int_t)r->input,
	    "input_tokens_details", "cached_tokens",
	    (json_int_t)r->info.reused_tokens,
	    "output_tokens", (json_int_t)r->output,
	    "output_tokens_details", "reasoning_tokens", 0,
	    "total_tokens", (json_int_t)(r->input + r->output)));
	return o;
}

/* One embedding: a unit vector drawn from the input's hash, as floats or
 * as base64 of little-endian float32s. */
static json_t *
embedding_json(const mreq *r, uint32_t k)
{
	float *f;
	unsigned char *bytes;
	double sum = 0;
	json_t *v = NULL;
	char *b64;
	uint32_t j;

	if ((f = calloc(r->dims, sizeof(*f))) == NULL)
		return NULL;
	for (j = 0; j < r->dims; j++) {
		uint64_t x = splitmix(r->emb[k] + j);

		f[j] = (float)((double)(x >> 11) * 0x1p-52 - 1.0);
		sum += (double)f[j] * (double)f[j];
	}
	for (j = 0; j < r->dims && sum > 0; j++)
		f[j] = (float)(f[j] / sqrt(sum));
	if (!r->b64) {
		if ((v = json_array()) != NULL)
			for (j = 0; j < r->dims; j++)
				json_array_append_new(v, json_real(f[j]));
	} else if ((bytes = malloc((size_t)r->dims * 4)) != NULL) {
		size_t cap = sodium_base64_ENCODED_LEN((size_t)r->dims * 4,
		    sodium_base64_VARIANT_ORIGINAL);

		for (j = 0; j < r->dims; j++) {
			uint32_t u;

			memcpy(&u, &f[j], 4);
			bytes[4 * j] = (unsigned char)u;
			bytes[4 * j + 1] = (unsigned char)(u >> 8);
			bytes[4 * j + 2] = (unsigned char)(u >> 16);
			bytes[4 * j + 3] = (unsigned char)(u >> 24);
		}
		if ((b64 = malloc(cap)) != NULL) {
			sodium_bin2base64(b64, cap, bytes, (size_t)r->dims * 4,
			    sodium_base64_VARIANT_ORIGINAL);
			v = json_string(b64);
			free(b64);
		}
		free(bytes);
	}
	free(f);
	return v == NULL ? NULL : json_pack("{s:s,s:I,s:o}", "object",
	    "embedding", "index", (json_int_t)k, "embedding", v);
}

static json_t *
embeddings_json(const mreq *r)
{
	json_t *data = json_array();
	uint32_t k;

	for (k = 0; k < r->nemb && data != NULL; k++) {
		json_t *e = embedding_json(r, k);

		if (e == NULL || json_array_append_new(data, e) != 0) {
			json_decref(data);
			return NULL;
		}
	}
	return json_pack("{s:s,s:o,s:s,s:{s:I,s:I}}", "object", "list",
	    "data", data, "model", r->m->o->model, "usage", "prompt_tokens",
	    (json_int_t)r->input, "total_tokens", (json_int_t)r->input);
}

static json_t *
completion_json(const mreq *r)
{
	const mock *m = r->m;
	const char *finish = r->limited ? "length" : "stop";
	json_t *choice;
	char *text;

	if ((text = answer_text(r)) == NULL)
		return NULL;
	if (r->kind == K_CHAT)
		choice = json_pack("{s:i,s:{s:s,s:s,s:n},s:n,s:s}", "index", 0,
		    "message", "role", "assistant", "content", text,
		    "refusal", "logprobs", "finish_reason", finish);
	else
		choice = json_pack("{s:s,s:i,s:n,s:s}", "text", text, "index",
		    0, "logprobs", "finish_reason", finish);
	free(text);
	return fingerprint(m, json_pack("{s:s,s:s,s:I,s:s,s:[o],s:o}", "id",
	    r->id, "object", r->kind == K_CHAT ? "chat.completion" :
	    "text_completion", "created", (json_int_t)m->started, "model",
	    m->o->model, "choices", choice, "usage", usage_json(r)));
}

static void
answer_unary(mreq *r)
{
	json_t *doc;

	if (r->kind == K_RESP)
		doc = resp_json(r, true);
	else if (r->kind == K_EMBED)
		doc = embeddings_json(r);
	else
		doc = completion_json(r);
	if (doc == NULL) {
		evhttp_send_error(r->req, 500, "Internal Server Error");
		return;
	}
	kv_headers(r);
	send_json(r->req, 200, "OK", doc);
}

static void
on_engine(void *ctx, uint32_t handle, int event, const eng_info *info)
{
	mreq *r = info->udata;

	(void)ctx;
	(void)handle;
	if (r == NULL)
		return;
	if (event == ENG_DONE && r->req == NULL) {
		r->handle = ENG_NONE;	/* the client left: on_close frees r */
		return;
	}
	if (r->req == NULL)
		return;
	r->info = *info;
	if (event == ENG_FIRST_TOKEN) {
		if (r->stream)
			stream_start(r);
		return;
	}
	/* ENG_DONE: the handle dies when we return. */
	r->handle = ENG_NONE;
	if (r->stream) {
		if (!r->started)
			stream_start(r);
		stream_tokens(r, r->output);
		if (r->kind == K_RESP) {
			sse(r, json_pack("{s:s,s:o}", "type", r->limited ?
			    "response.incomplete" : "response.completed",
			    "response", resp_json(r, true)));
			evhttp_send_reply_end(r->req);
			goto done;
		}
		sse(r, chunk_json(r, NULL, false, r->limited ? "length" :
		    "stop"));
		if (r->usage) {
			json_t *u = json_pack("{s:s,s:s,s:I,s:s,s:[],s:o}",
			    "id", r->id, "object", r->kind == K_CHAT ?
			    "chat.completion.chunk" : "text_completion",
			    "created", (json_int_t)r->m->started, "model",
			    r->m->o->model, "choices", "usage", usage_json(r));

			sse(r, fingerprint(r->m, u));
		}
		{
			struct evbuffer *b = evbuffer_new();

			if (b != NULL) {
				evbuffer_add_printf(b, "data: [DONE]\n\n");
				evhttp_send_reply_chunk(r->req, b);
				evbuffer_free(b);
			}
		}
		evhttp_send_reply_end(r->req);
	} else
		answer_unary(r);
done:
	if (r->busy)
		r->finished = true;
	else
		mreq_free(r);
}

static void
submit(mreq *r)
{
	mock *m = r->m;
	eng_req q = {
		.key = r->key, .blocks = r->blocks, .nblocks = r->nblocks,
		.input_tokens = r->input, .output_tokens = r->output,
		.udata = r,
	};
	uint32_t h;
	int rc;

	rc = eng_submit(m->e, now_ms(m), &q, &h);
	if (rc == 0) {
		r->handle = h;
		arm(m);
		return;
	}
	set_header(r->req, "x-stargate-retryable", "true");
	set_header(r->req, "x-stargate-upstream-retryable", "true");
	set_header(r->req, "x-stargate-retry-reason", "engine_queue_full");
	if (rc == ENG_EFULL)
		send_error(r->req, 503, "Service Unavailable",
		    "overloaded_error", "overloaded_error",
		    "the engine queue is full");
	else
		send_error(r->req, 503, "Service Unavailable", "server_error",
		    NULL, "out of memory");
	mreq_free(r);
}

static void
on_delay(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	submit(arg);
}

/* --- request parsing ------------------------------------------------------- */

/* Bytes of the text in a content value (string or array of text parts). */
static size_t
content_bytes(const json_t *c)
{
	size_t n = 0, i;

	if (json_is_string(c))
		return json_string_length(c);
	if (json_is_array(c))
		for (i = 0; i < json_array_size(c); i++) {
			json_t *t = json_object_get(json_array_get(c, i),
			    "text");

			if (json_is_string(t))
				n += json_string_length(t);
		}
	return n;
}

/*
 * Hash the prompt into chain hashes of full blocks (block_tokens * 4 bytes
 * each, 4 bytes standing for one token).  The prompt is the concatenation
 * of role, NUL, content, NUL per message (chat) or the prompt string.
 */
typedef struct chain {
	uint64_t	 h;
	size_t		 fill;
	size_t		 bsize;
	uint64_t	*blocks;
	uint32_t	 n, cap;
	bool		 oom;
} chain;

static void
chain_add(chain *c, const char *p, size_t len)
{
	while (len > 0) {
		size_t take = c->bsize - c->fill;

		if (take > len)
			take = len;
		c->h = eng_fnv1a(c->h, p, take);
		c->fill += take;
		p += take;
		len -= take;
		if (c->fill == c->bsize) {
			if (c->n == c->cap) {
				uint32_t ncap = c->cap ? c->cap * 2 : 16;
				uint64_t *nb = realloc(c->blocks,
				    ncap * sizeof(*nb));

				if (nb == NULL || ncap > (1u << 24)) {
					free(nb);
					c->blocks = NULL;
					c->oom = true;
					c->n = c->cap = 0;
					return;
				}
				c->blocks = nb;
				c->cap = ncap;
			}
			if (!c->oom)
				c->blocks[c->n++] = c->h;
			c->fill = 0;
		}
	}
}

static void
chain_content(chain *c, const json_t *v)
{
	size_t i;

	if (json_is_string(v))
		chain_add(c, json_string_value(v), json_string_length(v));
	else if (json_is_array(v))
		for (i = 0; i < json_array_size(v); i++) {
			json_t *t = json_array_get(v, i);

			if (json_is_string(t))
				chain_add(c, json_string_value(t),
				    json_string_length(t));
			else if (json_is_string(json_object_get(t, "text")))
				chain_add(c, json_string_value(
				    json_object_get(t, "text")),
				    json_string_length(json_object_get(t,
				    "text")));
		}
	chain_add(c, "", 1);
}

/*
 * Header value as an unsigned integer in 0..max; -1 absent, -2 malformed
 * (an empty value too) or above max.
 */
static int
header_u64(struct evhttp_request *req, const char *name, uint64_t max,
    uint64_t *out)
{
	const char *v = evhttp_find_header(
	    evhttp_request_get_input_headers(req), name);
	size_t len;

	if (v == NULL)
		return -1;
	while (*v == ' ' || *v == '\t')
		v++;
	len = strlen(v);
	while (len > 0 && (v[len - 1] == ' ' || v[len - 1] == '\t'))
		len--;
	if (len == 0 || sg_parse_u64(v, len, max, out) != 0)
		return -2;
	return 0;
}

#define EMBED_INPUTS	2048		/* inputs per embeddings request */
#define EMBED_VALUES	(1u << 20)	/* inputs x dimensions */

/* Text bytes of a Responses API input item (a message or any item with
 * content); false if it is not an object. */
static bool
item_bytes(const json_t *it, size_t *bytes)
{
	if (!json_is_object(it))
		return false;
	*bytes += content_bytes(json_object_get(it, "content"));
	return true;
}

/*
 * Check the request's input and measure it: *bytes of text, *parts (chat
 * messages, response items, embedding inputs) and *ids (token ids given as
 * numbers).  Returns NULL, or the 400 message in msg.
 */
static const char *
measure_input(const json_t *root, int kind, size_t *bytes, size_t *parts,
    size_t *ids, char *msg, size_t cap)
{
	const char *name = kind == K_CHAT ? "messages" : kind == K_TEXT ?
	    "prompt" : "input";
	json_t *in = json_object_get(root, name), *v;
	size_t i, j;

	*bytes = *parts = *ids = 0;
	if (kind == K_CHAT && (!json_is_array(in) || json_array_size(in) == 0))
		return "messages: expected a non-empty array";
	if (json_is_string(in)) {
		*bytes = json_string_length(in);
		*parts = 1;
		if (kind == K_CHAT)
			return "messages: expected a non-empty array";
	} else if (!json_is_array(in) || (kind == K_EMBED &&
	    (json_array_size(in) == 0 || json_array_size(in) > EMBED_INPUTS)))
		return kind == K_TEXT ?
		    "prompt: expected a string or an array" :
		    kind == K_RESP ? "input: expected a string or an array" :
		    "input: expected a string or a non-empty array of at most "
		    "2048 strings or token arrays";
	json_array_foreach(in, i, v) {
		(*parts)++;
		if (kind == K_CHAT) {
			if (!json_is_object(v) ||
			    !json_is_string(json_object_get(v, "role"))) {
				snprintf(msg, cap, "messages[%zu]: expected an "
				    "object with a role", i);
				return msg;
			}
			*bytes += content_bytes(json_object_get(v, "content"));
		} else if (kind == K_RESP) {
			if (!item_bytes(v, bytes)) {
				snprintf(msg, cap, "input[%zu]: expected an "
				    "object", i);
				return msg;
			}
		} else if (json_is_string(v))
			*bytes += json_string_length(v);
		else if (json_is_integer(v))
			(*ids)++;
		else if (kind == K_EMBED && json_is_array(v)) {
			json_t *t;

			json_array_foreach(v, j, t)
				if (json_is_integer(t))
					(*ids)++;
		} else if (kind == K_EMBED) {
			snprintf(msg, cap, "input[%zu]: expected a string or "
			    "an array of token ids", i);
			return msg;
		}
	}
	if (kind == K_EMBED && json_is_integer(json_array_get(in, 0)))
		*parts = 1;	/* one input given as token ids */
	v = json_object_get(root, "instructions");
	if (kind == K_RESP && json_is_string(v))
		*bytes += json_string_length(v);
	return NULL;
}

/* The prompt's chain hashes of full blocks (cache lookup without a key). */
static void
hash_prompt(mreq *r, const json_t *root)
{
	json_t *in = json_object_get(root, r->kind == K_CHAT ? "messages" :
	    r->kind == K_TEXT ? "prompt" : "input"), *v;
	size_t i;
	chain ch;

	memset(&ch, 0, sizeof(ch));
	ch.h = ENG_FNV_OFFSET;
	ch.bsize = (size_t)r->m->o->eng.block_tokens * 4;
	if (r->kind == K_RESP)
		chain_content(&ch, json_object_get(root, "instructions"));
	if ((r->kind == K_CHAT || r->kind == K_RESP) && json_is_array(in))
		json_array_foreach(in, i, v) {
			chain_content(&ch, json_object_get(v, "role"));
			chain_content(&ch, json_object_get(v, "content"));
		}
	else
		chain_content(&ch, in);
	r->blocks = ch.blocks;
	r->nblocks = ch.n;
}

/* Embeddings: options and one hash per input.  NULL, or a 400 message. */
static const char *
embed_setup(mreq *r, const json_t *root, size_t parts)
{
	json_t *in = json_object_get(root, "input");
	json_t *v = json_object_get(root, "dimensions");
	json_t *fmt = json_object_get(root, "encoding_format");
	uint32_t k;

	r->dims = 16;
	if (v != NULL && !json_is_null(v)) {
		if (!json_is_integer(v) || json_integer_value(v) < 1 ||
		    json_integer_value(v) > 4096)
			return "dimensions: expected an integer in 1..4096";
		r->dims = (uint32_t)json_integer_value(v);
	}
	if (fmt != NULL && !json_is_null(fmt)) {
		if (!json_is_string(fmt) || (strcmp(json_string_value(fmt),
		    "float") != 0 && strcmp(json_string_value(fmt),
		    "base64") != 0))
			return "encoding_format: expected \"float\" or "
			    "\"base64\"";
		r->b64 = strcmp(json_string_value(fmt), "base64") == 0;
	}
	if ((uint64_t)parts * r->dims > EMBED_VALUES)
		return "input: too many inputs for these dimensions";
	r->nemb = (uint32_t)parts;
	if ((r->emb = calloc(parts, sizeof(*r->emb))) == NULL)
		return "out of memory";
	for (k = 0; k < r->nemb; k++) {
		const json_t *e = json_is_array(in) && r->nemb > 1 ?
		    json_array_get(in, k) : in;
		char *t = json_dumps(e, JSON_COMPACT | JSON_ENCODE_ANY);

		r->emb[k] = t != NULL ? eng_fnv1a(ENG_FNV_OFFSET, t,
		    strlen(t)) : k;
		free(t);
	}
	return NULL;
}

/*
 * The request's output limit (max_completion_tokens, then max_tokens, for
 * chat; max_output_tokens for Responses; max_tokens for completions) in
 * *n, 0 when absent or null.  NULL, or the 400 message: a present limit
 * must be an integer in 1..MAX_TOKENS.
 */
static const char *
max_field(const json_t *root, int kind, uint64_t *n)
{
	static const char *const chat[] = { "max_completion_tokens",
	    "max_tokens", NULL };
	static const char *const resp[] = { "max_output_tokens", NULL };
	static const char *const text[] = { "max_tokens", NULL };
	static char msg[96];
	const char *const *name = kind == K_CHAT ? chat : kind == K_RESP ?
	    resp : text;
	json_t *v;

	*n = 0;
	for (; *name != NULL; name++) {
		v = json_object_get(root, *name);
		if (v == NULL || json_is_null(v))
			continue;
		if (!json_is_integer(v) || json_integer_value(v) < 1 ||
		    json_integer_value(v) > MAX_TOKENS) {
			snprintf(msg, sizeof(msg), "%s: expected an integer "
			    "in 1..%d", *name, MAX_TOKENS);
			return msg;
		}
		if (*n == 0)
			*n = (uint64_t)json_integer_value(v);
	}
	return NULL;
}

/* Output length: x-output-tokens, else min(max tokens, --tokens); an
 * embedding is one step.  -1 after answering 400. */
static int
output_length(mreq *r, struct evhttp_request *req, const json_t *root)
{
	const char *bad;
	uint64_t hv;

	r->output = r->m->o->tokens;
	if (r->kind == K_EMBED) {
		r->output = 1;
		return 0;
	}
	if ((bad = max_field(root, r->kind, &hv)) != NULL) {
		send_error(req, 400, "Bad Request", "invalid_request_error",
		    NULL, bad);
		return -1;
	}
	if (hv != 0 && hv < r->output) {
		r->output = hv;
		r->limited = true;
	}
	switch (header_u64(req, "x-output-tokens", MAX_TOKENS, &hv)) {
	case 0:
		if (hv >= 1) {
			r->output = hv;
			r->limited = false;
		}
		return 0;
	case -2:
		send_error(req, 400, "Bad Request", "invalid_request_error",
		    NULL, "x-output-tokens: expected an integer in 0..1000000");
		return -1;
	}
	return 0;
}

static void
bad_request(struct evhttp_request *req, const char *msg)
{
	send_error(req, 400, "Bad Request", "invalid_request_error", NULL, msg);
}

static void
handle_completion(mock *m, struct evhttp_request *req, int kind)
{
	static const char *const prefix[] = {
		[K_TEXT] = "cmpl-", [K_CHAT] = "chatcmpl-", [K_RESP] = "resp_",
		[K_EMBED] = "embd-",
	};
	struct evbuffer *in = evhttp_request_get_input_buffer(req);
	size_t len = evbuffer_get_length(in), bytes, parts, ids;
	json_t *root = NULL, *v;
	json_error_t je;
	mreq *r = NULL;
	uint64_t hv = 0;
	const char *key, *bad;
	char msg[320];

	if (evhttp_request_get_command(req) != EVHTTP_REQ_POST) {
		send_error(req, 405, "Method Not Allowed",
		    "invalid_request_error", NULL, "use POST");
		return;
	}
	root = json_loadb((const char *)evbuffer_pullup(in, -1), len,
	    JSON_REJECT_DUPLICATES, &je);
	if (root == NULL || !json_is_object(root)) {
		snprintf(msg, sizeof(msg), "request body is not a JSON object%s%s",
		    root == NULL ? ": " : "", root == NULL ? je.text : "");
		bad_request(req, msg);
		goto out;
	}
	v = json_object_get(root, "model");
	if (!json_is_string(v)) {
		bad_request(req, "model: expected a string");
		goto out;
	}
	if (strcmp(json_string_value(v), m->o->model) != 0) {
		snprintf(msg, sizeof(msg), "The model `%.200s` does not exist.",
		    json_string_value(v));
		send_error(req, 404, "Not Found", "invalid_request_error",
		    "model_not_found", msg);
		goto out;
	}
	if ((bad = measure_input(root, kind, &bytes, &parts, &ids, msg,
	    sizeof(msg))) != NULL) {
		bad_request(req, bad);
		goto out;
	}
	v = json_object_get(root, "stream");
	if (v != NULL && !json_is_boolean(v) && !json_is_null(v)) {
		bad_request(req, "stream: expected a boolean");
		goto out;
	}
	if ((r = calloc(1, sizeof(*r))) == NULL) {
		evhttp_send_error(req, 500, "Internal Server Error");
		goto out;
	}
	r->m = m;
	r->req = req;
	r->handle = ENG_NONE;
	r->kind = kind;
	r->stream = kind != K_EMBED && json_is_true(v);
	r->usage = r->stream && json_is_true(json_object_get(
	    json_object_get(root, "stream_options"), "include_usage"));
	if (output_length(r, req, root) != 0)
		goto fail;
	if (kind == K_EMBED && (bad = embed_setup(r, root, parts)) != NULL) {
		bad_request(req, bad);
		goto fail;
	}
	/* Input length: x-input-tokens, else ~4 bytes per token. */
	switch (header_u64(req, "x-input-tokens", MAX_TOKENS, &hv)) {
	case 0:
		r->input = hv;
		break;
	case -2:
		bad_request(req,
		    "x-input-tokens: expected an integer in 0..1000000");
		goto fail;
	default:
		r->input = (bytes + 3) / 4 + ids;
		if (kind == K_CHAT && r->input < parts)
			r->input = parts;
	}
	if (r->input == 0)
		r->input = 1;
	/* Cache key: x-cache-affinity-key, else the prompt's blocks. */
	key = evhttp_find_header(evhttp_request_get_input_headers(req),
	    "x-cache-affinity-key");
	if (key != NULL && *key != '\0') {
		r->key = eng_fnv1a(ENG_FNV_OFFSET, key, strlen(key));
		if (r->key == 0)
			r->key = 1;
	} else
		hash_prompt(r, root);
	m->counter++;
	snprintf(r->id, sizeof(r->id), "%s%016" PRIx64 "%08" PRIx64,
	    prefix[kind], splitmix(m->o->seed ^ m->counter), m->counter);
	r->conn = evhttp_request_get_connection(req);
	if (r->conn != NULL)
		evhttp_connection_set_closecb(r->conn, on_close, r);
	watch_peer(r);
	r->next = m->live;
	if (m->live != NULL)
		m->live->prev = r;
	m->live = r;
	if (m->o->jitter_ms > 0) {
		uint64_t span = (uint64_t)(m->o->jitter_ms * 1000.0) + 1;
		uint64_t us = splitmix(m->o->seed * 0x9e3779b97f4a7c15ULL +
		    m->counter) % span;
		struct timeval tv = { (time_t)(us / 1000000),
		    (suseconds_t)(us % 1000000) };

		r->delay = evtimer_new(m->base, on_delay, r);
		if (r->delay != NULL && evtimer_add(r->delay, &tv) == 0)
			goto out;
	}
	submit(r);
	goto out;
fail:
	free(r->emb);
	free(r);
out:
	json_decref(root);
}

/* --- other endpoints --------------------------------------------------------- */

static void
handle_models(mock *m, struct evhttp_request *req)
{
	json_t *doc = json_pack("{s:s,s:[{s:s,s:s,s:I,s:s}]}", "object", "list",
	    "data", "id", m->o->model, "object", "model", "created",
	    (json_int_t)m->started, "owned_by", "stargate");

	send_json(req, 200, "OK", doc);
}

static void
fill_cluster(mock *m, sg_cluster *c)
{
	double t = now_ms(m);

	eng_advance(m->e, t);
	arm(m);
	sg_cluster_init(c, m->o->cluster_id, strlen(m->o->cluster_id));
	eng_cluster(m->e, t, c);
}

static void
handle_stats(mock *m, struct evhttp_request *req)
{
	sg_cluster c;

	fill_cluster(m, &c);
	send_json(req, 200, "OK", sg_cluster_to_json(&c));
}

/*
 * /metrics: an sg_metrics registry with vLLM's names, labelled engine="0"
 * and model_name.  At each scrape the gauges are set from the engine and
 * the counters brought up to the engine's totals.
 */
enum {
	MX_RUNNING, MX_WAITING, MX_KV_USAGE, MX_GPU_USAGE, MX_CACHE_QUERIES,
	MX_CACHE_HITS, MX_PROMPT, MX_GENERATION, MX_SUCCESS,
};

static const struct mx_def {
	int		 type;
	const char	*name;
	const char	*help;
} mx_defs[MX_N] = {
	{ SG_METRIC_GAUGE, "vllm:num_requests_running",
	    "Number of requests in model execution batches." },
	{ SG_METRIC_GAUGE, "vllm:num_requests_waiting",
	    "Number of requests waiting to be processed." },
	{ SG_METRIC_GAUGE, "vllm:kv_cache_usage_perc",
	    "KV-cache usage. 1 means 100 percent usage." },
	{ SG_METRIC_GAUGE, "vllm:gpu_cache_usage_perc",
	    "GPU KV-cache usage. 1 means 100 percent usage." },
	{ SG_METRIC_COUNTER, "vllm:prefix_cache_queries_total",
	    "Prefix cache queries, in terms of number of queried tokens." },
	{ SG_METRIC_COUNTER, "vllm:prefix_cache_hits_total",
	    "Prefix cache hits, in terms of number of cached tokens." },
	{ SG_METRIC_COUNTER, "vllm:prompt_tokens_total",
	    "Number of prefill tokens processed." },
	{ SG_METRIC_COUNTER, "vllm:generation_tokens_total",
	    "Number of generation tokens processed." },
	{ SG_METRIC_COUNTER, "vllm:request_success_total",
	    "Count of successfully processed requests." },
};

/* The cache configuration, a constant info gauge at 1. */
static int
metrics_info(mock *m, sg_error *err)
{
	static const char *const labels[] = {
		"block_size", "cache_dtype", "enable_prefix_caching", "engine",
		"gpu_memory_utilization", "num_cpu_blocks", "num_gpu_blocks",
		NULL,
	};
	uint64_t cap = eng_kv_capacity(m->e);
	char bs[24], blocks[24];
	const char *values[7];
	sg_metric *f;
	int rc;

	snprintf(bs, sizeof(bs), "%u", (unsigned)m->o->eng.block_tokens);
	snprintf(blocks, sizeof(blocks), "%" PRIu64,
	    cap / m->o->eng.block_tokens);
	values[0] = bs;
	values[1] = "auto";
	values[2] = cap > 0 ? "True" : "False";
	values[3] = "0";
	values[4] = "0.9";
	values[5] = "0";
	values[6] = blocks;
	if ((rc = sg_metrics_family(m->reg, SG_METRIC_GAUGE,
	    "vllm:cache_config_info", "Information of the LLMEngine "
	    "CacheConfig", labels, NULL, 0, &f, err)) != 0)
		return rc;
	sg_series_set(sg_metric_series(f, values), 1);
	return 0;
}

static int
metrics_init(mock *m, sg_error *err)
{
	static const char *const labels[] = { "engine", "model_name", NULL };
	const char *const values[] = { "0", m->o->model };
	sg_metric *f;
	size_t i;
	int rc;

	if ((rc = sg_metrics_new(&m->reg, SG_METRICS_ARENA_MIN, false,
	    err)) != 0)
		return rc;
	for (i = 0; i < MX_N; i++) {
		if ((rc = sg_metrics_family(m->reg, mx_defs[i].type,
		    mx_defs[i].name, mx_defs[i].help, labels, NULL, 0, &f,
		    err)) != 0)
			return rc;
		/* NULL (a model name that is not a valid label value):
		 * the family is exposed without series */
		m->mx[i] = sg_metric_series(f, values);
	}
	return metrics_info(m, err);
}

/* A counter brought up to the engine's total (totals never go down). */
static void
counter_to(sg_series *s, uint64_t total)
{
	double d = (double)total - sg_series_value(s);

	if (d > 0)
		sg_series_add(s, d);
}

static int
evbuffer_sink(void *ctx, const char *p, size_t n)
{
	return evbuffer_add(ctx, p, n) == 0 ? 0 : -1;
}

static void
handle_metrics(mock *m, struct evhttp_request *req)
{
	const eng_counters *k;
	struct evbuffer *b;
	sg_cluster c;
	double usage;

	fill_cluster(m, &c);
	k = eng_counters_get(m->e);
	usage = c.kv_capacity_tokens > 0 ? (double)c.kv_used_tokens /
	    (double)c.kv_capacity_tokens : 0;
	sg_series_set(m->mx[MX_RUNNING], (double)c.running);
	sg_series_set(m->mx[MX_WAITING], (double)eng_waiting(m->e));
	sg_series_set(m->mx[MX_KV_USAGE], usage);
	sg_series_set(m->mx[MX_GPU_USAGE], usage);
	counter_to(m->mx[MX_CACHE_QUERIES], k->cache_queries);
	counter_to(m->mx[MX_CACHE_HITS], k->cache_hits);
	counter_to(m->mx[MX_PROMPT], k->prompt_tokens);
	counter_to(m->mx[MX_GENERATION], k->generation_tokens);
	counter_to(m->mx[MX_SUCCESS], k->requests_done);
	if ((b = evbuffer_new()) == NULL ||
	    sg_metrics_expose(m->reg, evbuffer_sink, b) != 0) {
		if (b != NULL)
			evbuffer_free(b);
		evhttp_send_error(req, 500, "Internal Server Error");
		return;
	}
	set_header(req, "Content-Type", "text/plain; version=0.0.4; "
	    "charset=utf-8");
	evhttp_send_reply(req, 200, "OK", b);
	evbuffer_free(b);
}

static void
handle_hold(mock *m, struct evhttp_request *req)
{
	struct evbuffer *in = evhttp_request_get_input_buffer(req);
	json_t *root, *v;
	json_error_t je;

	if (evhttp_request_get_command(req) != EVHTTP_REQ_POST) {
		send_error(req, 405, "Method Not Allowed",
		    "invalid_request_error", NULL, "use POST");
		return;
	}
	root = json_loadb((const char *)evbuffer_pullup(in, -1),
	    evbuffer_get_length(in), 0, &je);
	v = json_object_get(root, "slots");
	if (!json_is_object(root) || json_object_size(root) != 1 ||
	    !json_is_integer(v) || json_integer_value(v) < 0) {
		json_decref(root);
		send_error(req, 400, "Bad Request", "invalid_request_error",
		    NULL, "expected {\"slots\": N} with N >= 0");
		return;
	}
	eng_hold(m->e, now_ms(m), json_integer_value(v) > UINT32_MAX ?
	    UINT32_MAX : (uint32_t)json_integer_value(v));
	json_decref(root);
	arm(m);
	send_json(req, 200, "OK", json_pack("{s:i}", "held",
	    (int)eng_held(m->e)));
}

static void
handle_release(mock *m, struct evhttp_request *req)
{
	if (evhttp_request_get_command(req) != EVHTTP_REQ_POST) {
		send_error(req, 405, "Method Not Allowed",
		    "invalid_request_error", NULL, "use POST");
		return;
	}
	eng_release(m->e, now_ms(m));
	arm(m);
	send_json(req, 200, "OK", json_pack("{s:i}", "held", 0));
}

/*
 * Header names seen on API requests, for tests that prove a header never
 * reaches the engine.  Names are lower-cased; at most SEEN_NAMES distinct
 * names of up to SEEN_NAME_MAX bytes are kept (others are not listed).
 */
#define SEEN_NAMES	1024
#define SEEN_NAME_MAX	256

static void
seen_count(mock *m, struct evhttp_request *req)
{
	struct evkeyvalq *h = evhttp_request_get_input_headers(req);
	struct evkeyval *kv;
	char name[SEEN_NAME_MAX + 1];

	m->seen_requests++;
	for (kv = h->tqh_first; kv != NULL; kv = kv->next.tqe_next) {
		size_t i, n = strlen(kv->key);
		json_t *c;

		if (n == 0 || n > SEEN_NAME_MAX)
			continue;
		for (i = 0; i < n; i++)
			name[i] = (char)tolower((unsigned char)kv->key[i]);
		name[n] = '\0';
		if ((c = json_object_get(m->seen, name)) != NULL)
			json_integer_set(c, json_integer_value(c) + 1);
		else if (json_object_size(m->seen) < SEEN_NAMES)
			json_object_set_new(m->seen, name, json_integer(1));
	}
}

static json_t *
seen_json(const mock *m)
{
	return json_pack("{s:I,s:O}", "requests", (json_int_t)m->seen_requests,
	    "headers", m->seen);
}

static void
handle_seen(mock *m, struct evhttp_request *req, bool reset)
{
	enum evhttp_cmd_type cmd = evhttp_request_get_command(req);

	if (reset ? cmd != EVHTTP_REQ_POST : cmd == EVHTTP_REQ_POST) {
		send_error(req, 405, "Method Not Allowed",
		    "invalid_request_error", NULL, reset ? "use POST" :
		    "use GET");
		return;
	}
	if (reset) {
		json_object_clear(m->seen);
		m->seen_requests = 0;
	}
	send_json(req, 200, "OK", seen_json(m));
}

/* --- connection deadlines ------------------------------------------------------ */

static void
conn_phase(mconn *c, int phase)
{
	c->phase = phase;
	c->linelen = 0;
	c->any = false;
	c->deadline = now_ms(c->m) + (double)(phase == CP_HEAD ?
	    c->m->o->header_timeout_ms : c->m->o->body_timeout_ms);
}

/* Forget c: drop our reference to its bufferevent (evhttp freed it). */
static void
conn_drop(mconn *c)
{
	mock *m = c->m;

	if (c->prev != NULL)
		c->prev->next = c->next;
	else
		m->conns = c->next;
	if (c->next != NULL)
		c->next->prev = c->prev;
	evbuffer_remove_cb_entry(bufferevent_get_input(c->bev), c->cbe);
	bufferevent_decref(c->bev);
	free(c);
}

/* Track the end of the headers in bytes just received. */
static void
conn_scan(mconn *c, const char *p, size_t n)
{
	size_t i;

	for (i = 0; i < n && c->phase == CP_HEAD; i++) {
		if (p[i] == '\n') {
			if (c->linelen == 0 && c->any)
				conn_phase(c, CP_BODY);
			else
				c->linelen = 0;
		} else if (p[i] != '\r') {
			c->linelen++;
			c->any = true;
		}
	}
}

static void
conn_input(struct evbuffer *b, const struct evbuffer_cb_info *info,
    void *arg)
{
	mconn *c = arg;
	struct evbuffer_iovec v[8];
	struct evbuffer_ptr at;
	size_t len = evbuffer_get_length(b), left = info->n_added;
	int i, n;

	if (info->n_added == 0 || left > len)
		return;
	if (c->phase == CP_IDLE)
		conn_phase(c, CP_HEAD);
	if (c->phase != CP_HEAD ||
	    evbuffer_ptr_set(b, &at, len - left, EVBUFFER_PTR_SET) != 0)
		return;
	n = evbuffer_peek(b, (ev_ssize_t)left, &at, v, 8);
	for (i = 0; i < n && i < 8 && left > 0; i++) {
		size_t k = v[i].iov_len < left ? v[i].iov_len : left;

		conn_scan(c, v[i].iov_base, k);
		left -= k;
	}
}

/*
 * Every SWEEP_MS: forget connections evhttp has freed (their callbacks are
 * cleared), and answer 408 and close those whose request is late.
 */
static void
on_sweep(evutil_socket_t fd, short what, void *arg)
{
	static const char resp[] = "HTTP/1.1 408 Request Timeout\r\n"
	    "Connection: close\r\nContent-Length: 0\r\n\r\n";
	mock *m = arg;
	double now = now_ms(m);
	mconn *c, *next;
	bufferevent_event_cb ecb;
	evutil_socket_t s;

	(void)fd;
	(void)what;
	for (c = m->conns; c != NULL; c = next) {
		next = c->next;
		ecb = NULL;
		bufferevent_getcb(c->bev, NULL, NULL, &ecb, NULL);
		if (ecb == NULL) {
			conn_drop(c);
			continue;
		}
		if ((c->phase != CP_HEAD && c->phase != CP_BODY) ||
		    c->closed || now < c->deadline ||
		    (s = bufferevent_getfd(c->bev)) < 0)
			continue;
		/* nothing of an answer was written: the 408 goes alone;
		 * evhttp then reads the end of the stream and frees it */
		(void)send(s, resp, sizeof(resp) - 1,
		    MSG_NOSIGNAL | MSG_DONTWAIT);
		shutdown(s, SHUT_RDWR);
		c->closed = true;
	}
}

/* evhttp's bufferevent for a new connection, tracked (one reference). */
static struct bufferevent *
conn_bev(struct event_base *base, void *arg)
{
	mock *m = arg;
	mconn *c;

	if ((c = calloc(1, sizeof(*c))) == NULL)
		return NULL;
	if ((c->bev = bufferevent_socket_new(base, -1,
	    BEV_OPT_CLOSE_ON_FREE)) == NULL ||
	    (c->cbe = evbuffer_add_cb(bufferevent_get_input(c->bev),
	    conn_input, c)) == NULL) {
		if (c->bev != NULL)
			bufferevent_free(c->bev);
		free(c);
		return NULL;
	}
	bufferevent_incref(c->bev);
	c->m = m;
	conn_phase(c, CP_HEAD);
	c->next = m->conns;
	if (m->conns != NULL)
		m->conns->prev = c;
	m->conns = c;
	return c->bev;
}

static void
on_reply_done(struct evhttp_request *req, void *arg)
{
	mconn *c = arg;

	(void)req;
	c->phase = CP_IDLE;	/* the next byte starts the next deadline */
}

/* A whole request arrived: no deadline while it is served. */
static void
conn_request(mock *m, struct evhttp_request *req)
{
	struct evhttp_connection *conn = evhttp_request_get_connection(req);
	struct bufferevent *bev = conn != NULL ?
	    evhttp_connection_get_bufferevent(conn) : NULL;
	mconn *c;

	for (c = m->conns; c != NULL && bev != NULL; c = c->next)
		if (c->bev == bev) {
			c->phase = CP_SERVE;
			evhttp_request_set_on_complete_cb(req, on_reply_done,
			    c);
			return;
		}
}

static void
route(struct evhttp_request *req, void *arg)
{
	mock *m = arg;
	const char *uri = evhttp_request_get_uri(req);
	char path[256];
	size_t n = strcspn(uri, "?#");
	enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
	bool get = cmd == EVHTTP_REQ_GET || cmd == EVHTTP_REQ_HEAD;

	conn_request(m, req);
	if (n >= sizeof(path)) {
		send_error(req, 404, "Not Found", "invalid_request_error",
		    NULL, "no such endpoint");
		return;
	}
	memcpy(path, uri, n);
	path[n] = '\0';
	if (strncmp(path, "/v1/", 4) == 0)
		seen_count(m, req);
	if (strcmp(path, "/v1/chat/completions") == 0)
		handle_completion(m, req, K_CHAT);
	else if (strcmp(path, "/v1/completions") == 0)
		handle_completion(m, req, K_TEXT);
	else if (strcmp(path, "/v1/responses") == 0)
		handle_completion(m, req, K_RESP);
	else if (strcmp(path, "/v1/embeddings") == 0)
		handle_completion(m, req, K_EMBED);
	else if (strcmp(path, "/control/hold") == 0)
		handle_hold(m, req);
	else if (strcmp(path, "/control/release") == 0)
		handle_release(m, req);
	else if (strcmp(path, "/control/seen-headers") == 0)
		handle_seen(m, req, false);
	else if (strcmp(path, "/control/reset-seen") == 0)
		handle_seen(m, req, true);
	else if (!get && (strcmp(path, "/v1/models") == 0 ||
	    strcmp(path, "/healthz") == 0 || strcmp(path, "/stats") == 0 ||
	    strcmp(path, "/metrics") == 0))
		send_error(req, 405, "Method Not Allowed",
		    "invalid_request_error", NULL, "use GET");
	else if (strcmp(path, "/v1/models") == 0)
		handle_models(m, req);
	else if (strcmp(path, "/healthz") == 0) {
		struct evbuffer *b = evbuffer_new();

		set_header(req, "Content-Type", "text/plain");
		if (b != NULL)
			evbuffer_add_printf(b, "ok\n");
		evhttp_send_reply(req, 200, "OK", b);
		if (b != NULL)
			evbuffer_free(b);
	} else if (strcmp(path, "/stats") == 0)
		handle_stats(m, req);
	else if (strcmp(path, "/metrics") == 0)
		handle_metrics(m, req);
	else
		send_error(req, 404, reason_phrase(404),
		    "invalid_request_error", NULL, "no such endpoint");
}

/* --- start-up and shutdown --------------------------------------------------- */

static void
on_signal(evutil_socket_t sig, short what, void *arg)
{
	mock *m = arg;

	(void)sig;
	(void)what;
	event_base_loopexit(m->base, NULL);
}

static int
write_port_file(const char *path, unsigned port)
{
	char tmp[4096];
	FILE *fp;
	int ok;

	if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
		return ENAMETOOLONG;
	if ((fp = fopen(tmp, "w")) == NULL)
		return errno;
	fprintf(fp, "%u\n", port);
	ok = fflush(fp) == 0 && !ferror(fp);
	if (fclose(fp) != 0 || !ok) {
		unlink(tmp);
		return EIO;
	}
	if (rename(tmp, path) != 0) {
		int e = errno;

		unlink(tmp);
		return e;
	}
	return 0;
}

int
mock_serve(const mock_opts *o)
{
	mock m;
	struct evhttp_bound_socket *bound;
	struct event *sterm = NULL, *sint = NULL;
	struct event_config *cfg = NULL;
	struct sockaddr_storage ss;
	sg_error err;
	socklen_t sl = sizeof(ss);
	const char *why = NULL;
	char host[INET6_ADDRSTRLEN];
	unsigned port = 0;
	int rc = EX_SOFTWARE, e;

	memset(&m, 0, sizeof(m));
	m.o = o;
	clock_gettime(CLOCK_MONOTONIC, &m.t0);
	m.started = (long)time(NULL);
	m.tick_ms = o->eng.step_model ? o->eng.step_fixed_ms :
	    1000.0 / o->eng.decode_tps;
	if (m.tick_ms < 1)
		m.tick_ms = 1;
	if (m.tick_ms > 1000)
		m.tick_ms = 1000;
	signal(SIGPIPE, SIG_IGN);
	if ((e = eng_new(&m.e, &o->eng, on_engine, &m, &why)) != 0) {
		fprintf(stderr, "sg-mockengine: engine: %s%s%s\n",
		    e == EINVAL ? "bad value: " : strerror(e),
		    e == EINVAL ? why : "", "");
		return e == EINVAL ? EX_USAGE : EX_OSERR;
	}
	if (metrics_init(&m, &err) != 0) {
		fprintf(stderr, "sg-mockengine: metrics: %s\n", err.text);
		sg_metrics_free(m.reg);
		eng_free(m.e);
		return EX_OSERR;
	}
	/* Precise timers: libevent's default coarse monotonic clock ticks in
	 * jiffies (4 ms here), which every engine event would wait for. */
	if ((m.seen = json_object()) == NULL ||
	    (cfg = event_config_new()) == NULL ||
	    event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER) != 0 ||
	    (m.base = event_base_new_with_config(cfg)) == NULL ||
	    (m.http = evhttp_new(m.base)) == NULL ||
	    (m.etimer = evtimer_new(m.base, on_etimer, &m)) == NULL ||
	    (sterm = evsignal_new(m.base, SIGTERM, on_signal, &m)) == NULL ||
	    (sint = evsignal_new(m.base, SIGINT, on_signal, &m)) == NULL ||
	    (m.sweep = event_new(m.base, -1, EV_PERSIST, on_sweep,
	    &m)) == NULL) {
		fprintf(stderr, "sg-mockengine: cannot set up the event loop\n");
		rc = EX_OSERR;
		goto out;
	}
	evsignal_add(sterm, NULL);
	evsignal_add(sint, NULL);
	evhttp_set_max_body_size(m.http, MAX_BODY);
	evhttp_set_allowed_methods(m.http, EVHTTP_REQ_GET | EVHTTP_REQ_POST |
	    EVHTTP_REQ_HEAD);
	evhttp_set_gencb(m.http, route, &m);
	evhttp_set_bevcb(m.http, conn_bev, &m);
	{
		struct timeval sw = { 0, SWEEP_MS * 1000 };

		event_add(m.sweep, &sw);
	}
	bound = evhttp_bind_socket_with_handle(m.http, o->listen, o->port);
	if (bound == NULL) {
		fprintf(stderr, "sg-mockengine: cannot listen on '%s' port %u\n",
		    o->listen, (unsigned)o->port);
		rc = EX_UNAVAILABLE;
		goto out;
	}
	if (getsockname(evhttp_bound_socket_get_fd(bound),
	    (struct sockaddr *)&ss, &sl) == 0) {
		if (ss.ss_family == AF_INET6) {
			struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;

			inet_ntop(AF_INET6, &s6->sin6_addr, host, sizeof(host));
			port = ntohs(s6->sin6_port);
		} else {
			struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;

			inet_ntop(AF_INET, &s4->sin_addr, host, sizeof(host));
			port = ntohs(s4->sin_port);
		}
	} else
		snprintf(host, sizeof(host), "%s", o->listen);
	if (o->port_file != NULL && (e = write_port_file(o->port_file,
	    port)) != 0) {
		fprintf(stderr, "sg-mockengine: cannot write port file '%s': "
		    "%s\n", o->port_file, strerror(e));
		rc = EX_CANTCREAT;
		goto out;
	}
	printf(ss.ss_family == AF_INET6 ? "listening on [%s]:%u\n" :
	    "listening on %s:%u\n", host, port);
	if (fflush(stdout) != 0) {
		rc = EX_IOERR;
		goto out;
	}
	event_base_dispatch(m.base);
	rc = EX_OK;
out:
	/* Connections first: their close callbacks free live contexts. */
	m.stopping = true;
	if (m.http != NULL)
		evhttp_free(m.http);
	while (m.live != NULL) {
		m.live->conn = NULL;
		mreq_free(m.live);
	}
	while (m.conns != NULL)
		conn_drop(m.conns);
	if (m.sweep != NULL)
		event_free(m.sweep);
	if (sterm != NULL)
		event_free(sterm);
	if (sint != NULL)
		event_free(sint);
	if (m.etimer != NULL)
		event_free(m.etimer);
	if (m.base != NULL)
		event_base_free(m.base);
	if (cfg != NULL)
		event_config_free(cfg);
	json_decref(m.seen);
	sg_metrics_free(m.reg);
	eng_free(m.e);
	return rc;
}
