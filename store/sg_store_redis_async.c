/*
 * sg_store_redis_async.c — the Redis backend on an event loop
 * (opts.event_base set): hiredis's asynchronous API through its libevent
 * adapter, on the caller's loop.  No thread, and no call ever blocks.
 *
 * Connections.  A node is one connection: the primary (redis://, or the
 * one the sentinels name), a sentinel being asked, or a Cluster primary.
 * Its life: DOWN -> CONNECTING (non-blocking connect) -> HANDSHAKE (AUTH,
 * SELECT, then ROLE for a Sentinel primary, PING otherwise, or the
 * SENTINEL query, pipelined) -> UP.  Only an UP node takes commands; one
 * that is not answers ENOTCONN at once, so a Redis that is down or
 * unreachable costs a request nothing (fail-open).  A handshake that has
 * not finished within SGR_CONNECT_TIMEOUT_MS (hiredis 0.14 has no connect
 * timeout of its own), a lost connection, an error in the handshake, or a
 * stall (the oldest command in flight older than SGR_STALL_MS: a stopped or
 * wedged server) drops the node: redisAsyncFree() answers everything in
 * flight with a NULL reply (lookups then fail, writes make failure
 * records), and a timer reconnects after a backoff that doubles from
 * SGR_BACKOFF_MIN_MS to SGR_BACKOFF_MAX_MS and resets once a handshake
 * succeeds.  A dropped context's data pointer is cleared first, so no
 * late callback of hiredis reaches a node through it.
 *
 * Commands.  Each lookup or write is an op from a free list (so steady
 * traffic allocates nothing of ours), sent at once with
 * redisAsyncCommandArgv: many requests on one loop turn into one pipeline,
 * and hiredis writes what has accumulated in one send when the loop next
 * polls.  A lookup also arms the op's timer at its deadline: whichever
 * comes first, reply or timer, completes the request (ETIMEDOUT from the
 * timer); the op itself lives until its reply or the connection's end.
 * Writes complete as commit records (see sg_store.h).
 *
 * Sentinel.  The primary's address comes from the sentinels, asked in
 * turn (SENTINEL get-master-addr-by-name), and the primary must say ROLE
 * master.  Each reconnect of the primary asks again, so a failover is
 * followed: the old primary's connection drops (killed) or it answers
 * READONLY (demoted), the node is dropped, and the next attempt connects
 * to whatever the sentinels name by then.
 *
 * Cluster.  Nodes come from the seeds and from CLUSTER SLOTS (asked of the
 * first node up, and again, at most every SLOTS_REFRESH_MS, after a
 * MOVED); slot[] maps each of the 16384 slots to a node.  MOVED updates
 * the slot and resends on the node named; ASK sends ASKING and the
 * command there without touching the map; both at most
 * SGR_REDIRECTS_MAX times per command.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <hiredis.h>
#include <async.h>
#include <adapters/libevent.h>

#include "sg_store_redis.h"

#define TICK_MS			100
#define SLOTS_REFRESH_MS	100

enum { ST_DOWN, ST_CONNECTING, ST_HANDSHAKE, ST_UP };
enum { ROLE_DATA, ROLE_QUERY };		/* a data node, a sentinel asked */
enum { OP_GET, OP_SET, OP_DEL };

struct astore;
struct aop;

struct anode {
	struct astore		*as;
	struct sgr_addr		 a;
	redisAsyncContext	*ac;
	int			 state, role;
	unsigned		 backoff_ms;
	struct event		*retry;		/* reconnect after backoff */
	struct event		*hs_timer;	/* handshake deadline */
	int			 hs_left;
	bool			 hs_fail;
	struct aop		*head, *tail;	/* in flight, oldest first */
	size_t			 inflight;
};

struct aop {
	struct astore		*as;
	struct anode		*node;		/* where it is in flight */
	struct aop		*prev, *next;
	int			 kind;
	sgi_lckey		 k;
	char			 val[SGR_VALUE_MAX];
	size_t			 vlen;
	char			 px[24];
	sg_store_lookup_req	*req;		/* a lookup not yet answered */
	struct event		*tmo;
	uint64_t		 sent_ns;
	int			 redirects;
};

struct astore {
	sg_store_opts		 o;
	struct sgr_url		 u;
	sg_store		*front;
	struct event_base	*base;
	bool			 closing;
	struct anode		 prim;		/* redis://, Sentinel */
	struct anode		 sq;		/* the sentinel being asked */
	size_t			 sq_next;	/* which sentinel next */
	struct anode		**nodes;	/* Cluster */
	size_t			 nnodes, capnodes;
	int16_t			 slot[SGR_SLOTS];
	bool			 have_map, map_asked;
	uint64_t		 map_after_ns;	/* next refresh not before */
	bool			 map_stale;
	struct event		*tick;
	struct aop		*free;
	uint64_t		 seq, done, committed, failed, writes_inflight;
};

static void node_start(struct anode *n);
static void node_drop(struct anode *n, bool retry);
static void sentinel_ask(struct astore *as);
static void map_request(struct astore *as);

/* --- timers -------------------------------------------------------------- */

static struct timeval
ms_tv(uint64_t ms)
{
	struct timeval tv = { (time_t)(ms / 1000), (suseconds_t)(ms % 1000) *
	    1000 };

	return tv;
}

static void
retry_cb(evutil_socket_t fd, short what, void *arg)
{
	struct anode *n = arg;

	(void)fd;
	(void)what;
	if (n->as->u.kind == SGR_SENTINEL && n == &n->as->prim)
		sentinel_ask(n->as);
	else
		node_start(n);
}

static void
schedule_retry(struct anode *n)
{
	struct timeval tv;

	if (n->as->closing)
		return;
	n->backoff_ms = n->backoff_ms == 0 ? SGR_BACKOFF_MIN_MS :
	    n->backoff_ms * 2 > SGR_BACKOFF_MAX_MS ? SGR_BACKOFF_MAX_MS :
	    n->backoff_ms * 2;
	tv = ms_tv(n->backoff_ms);
	evtimer_add(n->retry, &tv);
}

static void
hs_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
	struct anode *n = arg;

	(void)fd;
	(void)what;
	if (n->state == ST_UP)
		return;
	node_drop(n, true);
	if (n->role == ROLE_QUERY)
		sentinel_ask(n->as);
}

/* --- ops ----------------------------------------------------------------- */

static struct aop *
op_get(struct astore *as)
{
	struct aop *op = as->free;

	if (op != NULL) {
		as->free = op->next;
		op->next = NULL;
		return op;
	}
	if ((op = calloc(1, sizeof(*op))) == NULL)
		return NULL;
	op->as = as;
	return op;
}

static void
op_put(struct aop *op)
{
	if (op->tmo != NULL)
		evtimer_del(op->tmo);
	op->req = NULL;
	op->node = NULL;
	op->prev = NULL;
	op->redirects = 0;
	op->next = op->as->free;
	op->as->free = op;
}

static void
inflight_unlink(struct aop *op)
{
	struct anode *n = op->node;

	if (n == NULL)
		return;
	if (op->prev != NULL)
		op->prev->next = op->next;
	else
		n->head = op->next;
	if (op->next != NULL)
		op->next->prev = op->prev;
	else
		n->tail = op->prev;
	n->inflight--;
	op->node = NULL;
	op->prev = op->next = NULL;
}

static void
write_done(struct astore *as, int rc)
{
	sg_store_commit c;

	as->writes_inflight--;
	as->done++;
	if (rc == 0)
		as->committed++;
	else
		as->failed++;
	if (as->o.on_commit == NULL)
		return;
	c.ops = 1;
	c.ops_done = as->done;
	c.committed = as->committed;
	c.rc = rc;
	as->o.on_commit(&c, as->o.commit_arg);
}

/* The op is answered (rc; rep for a GET that succeeded). */
static void
op_complete(struct aop *op, const redisReply *rep, int rc, sg_error *e)
{
	struct astore *as = op->as;

	if (op->kind != OP_GET)
		write_done(as, rc);
	else if (op->req != NULL) {
		sg_store_lookup_req *req = op->req;

		op->req = NULL;
		if (rc == 0 && rep != NULL)
			rc = sgr_get_entry(rep, &op->k, sgi_store_now(&as->o),
			    as->o.ttl_ms, &req->entry, &req->err);
		else if (e != NULL)
			req->err = *e;
		sgi_store_lookup_finish(as->front, req, rc);
	}
	op_put(op);
}

static void op_cb(redisAsyncContext *ac, void *r, void *privdata);

/* Send op on n (asking: after ASKING).  0, ENOTCONN or EBUSY. */
static int
op_send(struct aop *op, struct anode *n, bool asking)
{
	const char *av[5];
	size_t lens[5];
	int argc = 2;

	if (n->state != ST_UP || n->ac == NULL)
		return ENOTCONN;
	if (n->inflight >= SGR_INFLIGHT_MAX)
		return EBUSY;
	av[0] = op->kind == OP_GET ? "GET" : op->kind == OP_SET ? "SET" :
	    "DEL";
	lens[0] = 3;
	av[1] = op->k.text;
	lens[1] = SG_LC_KEY_LEN;
	if (op->kind == OP_SET) {
		av[2] = op->val;
		lens[2] = op->vlen;
		av[3] = "PX";
		lens[3] = 2;
		av[4] = op->px;
		lens[4] = strlen(op->px);
		argc = 5;
	}
	if (asking && redisAsyncCommand(n->ac, NULL, NULL, "ASKING") !=
	    REDIS_OK)
		return ENOTCONN;
	if (redisAsyncCommandArgv(n->ac, op_cb, op, argc, av, lens) !=
	    REDIS_OK)
		return ENOTCONN;
	op->node = n;
	op->sent_ns = sg_store_mono_ns();
	op->prev = n->tail;
	op->next = NULL;
	if (n->tail != NULL)
		n->tail->next = op;
	else
		n->head = op;
	n->tail = op;
	n->inflight++;
	return 0;
}

/* --- Cluster map --------------------------------------------------------- */

static struct anode *
node_new(struct astore *as, const struct sgr_addr *a, int role)
{
	struct anode *n = calloc(1, sizeof(*n));

	if (n == NULL)
		return NULL;
	n->as = as;
	n->a = *a;
	n->role = role;
	n->retry = evtimer_new(as->base, retry_cb, n);
	n->hs_timer = evtimer_new(as->base, hs_timeout_cb, n);
	if (n->retry == NULL || n->hs_timer == NULL) {
		if (n->retry != NULL)
			event_free(n->retry);
		if (n->hs_timer != NULL)
			event_free(n->hs_timer);
		free(n);
		return NULL;
	}
	return n;
}

/* The Cluster node at a (created and connecting if new), or -1. */
static int
node_index(struct astore *as, const struct sgr_addr *a)
{
	struct anode *n;
	size_t i;

	for (i = 0; i < as->nnodes; i++)
		if (as->nodes[i]->a.port == a->port &&
		    strcmp(as->nodes[i]->a.host, a->host) == 0)
			return (int)i;
	if (as->nnodes == as->capnodes) {
		size_t cap = as->capnodes ? as->capnodes * 2 : 8;
		struct anode **v;

		if (cap > INT16_MAX ||
		    (v = realloc(as->nodes, cap * sizeof(*v))) == NULL)
			return -1;
		as->nodes = v;
		as->capnodes = cap;
	}
	if ((n = node_new(as, a, ROLE_DATA)) == NULL)
		return -1;
	as->nodes[as->nnodes] = n;
	node_start(n);
	return (int)as->nnodes++;
}

static int
map_fn(void *arg, unsigned lo, unsigned hi, const struct sgr_addr *a)
{
	struct astore *as = arg;
	int i = node_index(as, a);
	unsigned s;

	if (i < 0)
		return SG_ENOMEM;
	for (s = lo; s <= hi; s++)
		as->slot[s] = (int16_t)i;
	return 0;
}

static void
map_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	struct anode *n = privdata;
	struct astore *as;
	redisReply *rep = r;
	char asked[SGR_HOST_MAX];

	if (ac->data != n || rep == NULL)
		return;
	as = n->as;
	as->map_asked = false;
	if (as->closing || rep->type != REDIS_REPLY_ARRAY)
		return;
	memcpy(asked, n->a.host, sizeof(asked));
	memset(as->slot, 0xff, sizeof(as->slot));
	as->have_map = sgr_parse_slots(rep, asked, map_fn, as) == 0;
	as->map_stale = false;
	as->map_after_ns = sg_store_mono_ns() + SLOTS_REFRESH_MS * 1000000ULL;
}

/* Ask the first node up for CLUSTER SLOTS, unless asked lately. */
static void
map_request(struct astore *as)
{
	size_t i;

	if (as->u.kind != SGR_CLUSTER || as->map_asked || as->closing ||
	    (as->have_map && !as->map_stale) ||
	    sg_store_mono_ns() < as->map_after_ns)
		return;
	for (i = 0; i < as->nnodes; i++) {
		struct anode *n = as->nodes[i];

		if (n->state == ST_UP && redisAsyncCommand(n->ac, map_cb, n,
		    "CLUSTER SLOTS") == REDIS_OK) {
			as->map_asked = true;
			return;
		}
	}
}

/* --- replies ------------------------------------------------------------- */

static bool
redirect(struct aop *op, const redisReply *rep)
{
	struct astore *as = op->as;
	struct sgr_addr a;
	unsigned slot;
	bool ask;
	int i;

	if (as->u.kind != SGR_CLUSTER ||
	    !sgr_parse_redirect(rep, &ask, &slot, &a) ||
	    op->redirects++ >= SGR_REDIRECTS_MAX ||
	    (i = node_index(as, &a)) < 0)
		return false;
	if (!ask) {
		as->slot[slot] = (int16_t)i;
		as->map_stale = true;
		map_request(as);
	}
	return op_send(op, as->nodes[i], ask) == 0;
}

static void
op_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	struct aop *op = privdata;
	struct astore *as = op->as;
	redisReply *rep = r;
	sg_error e;
	int rc = 0;

	(void)ac;
	inflight_unlink(op);
	if (as->closing) {
		if (op->kind != OP_GET)
			as->writes_inflight--;
		op_put(op);
		return;
	}
	sg_error_clear(&e);
	if (rep == NULL)
		rc = sg_seterr(&e, ECONNRESET, "Redis: connection lost");
	else if (rep->type == REDIS_REPLY_ERROR) {
		if (redirect(op, rep))
			return;		/* in flight again */
		rc = sgr_reply_error(rep, op->kind == OP_GET ? "GET" :
		    op->kind == OP_SET ? "SET" : "DEL", &e);
		if (rc == EROFS && as->u.kind == SGR_SENTINEL)
			node_drop(&as->prim, true);	/* demoted */
	}
	op_complete(op, rep, rc, &e);
}

/* --- connections --------------------------------------------------------- */

static void
node_up(struct anode *n, const redisReply *last)
{
	struct astore *as = n->as;

	if (n->role == ROLE_QUERY) {
		struct sgr_addr m;

		if (sgr_parse_master_addr(last, &m) != 0) {
			node_drop(n, false);
			sentinel_ask(as);
			return;
		}
		as->prim.a = m;
		as->sq_next = 0;
		node_drop(n, false);
		node_start(&as->prim);
		return;
	}
	if (as->u.kind == SGR_SENTINEL && n == &as->prim &&
	    !sgr_role_is_master(last)) {
		node_drop(n, true);	/* not (or no longer) the primary */
		return;
	}
	evtimer_del(n->hs_timer);
	n->state = ST_UP;
	n->backoff_ms = 0;
	map_request(as);
}

static void
hs_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	struct anode *n = privdata;
	redisReply *rep = r;

	if (ac->data != n || rep == NULL || n->state != ST_HANDSHAKE)
		return;
	if (rep->type == REDIS_REPLY_ERROR)
		n->hs_fail = true;
	if (--n->hs_left > 0)
		return;
	if (n->hs_fail) {
		node_drop(n, true);
		if (n->role == ROLE_QUERY)
			sentinel_ask(n->as);
		return;
	}
	node_up(n, rep);
}

static void
handshake(struct anode *n)
{
	struct astore *as = n->as;
	const struct sgr_url *u = &as->u;
	redisAsyncContext *ac = n->ac;

	n->state = ST_HANDSHAKE;
	n->hs_left = 0;
	n->hs_fail = false;
	if (n->role == ROLE_QUERY) {
		n->hs_left++;
		redisAsyncCommand(ac, hs_cb, n,
		    "SENTINEL get-master-addr-by-name %s", u->master);
		return;
	}
	if (u->pass[0] != '\0') {
		n->hs_left++;
		if (u->user[0] != '\0')
			redisAsyncCommand(ac, hs_cb, n, "AUTH %s %s", u->user,
			    u->pass);
		else
			redisAsyncCommand(ac, hs_cb, n, "AUTH %s", u->pass);
	}
	if (u->kind != SGR_CLUSTER && u->db != 0) {
		n->hs_left++;
		redisAsyncCommand(ac, hs_cb, n, "SELECT %d", u->db);
	}
	n->hs_left++;
	if (u->kind == SGR_SENTINEL)
		redisAsyncCommand(ac, hs_cb, n, "ROLE");
	else
		redisAsyncCommand(ac, hs_cb, n, "PING");
}

static void
on_connect(const redisAsyncContext *ac, int status)
{
	struct anode *n = ac->data;

	if (n == NULL)
		return;
	if (status != REDIS_OK) {
		n->ac = NULL;		/* hiredis frees it */
		n->state = ST_DOWN;
		evtimer_del(n->hs_timer);
		if (n->role == ROLE_QUERY)
			sentinel_ask(n->as);
		else
			schedule_retry(n);
		return;
	}
	handshake(n);
}

static void
on_disconnect(const redisAsyncContext *ac, int status)
{
	struct anode *n = ac->data;

	(void)status;
	if (n == NULL)
		return;
	n->ac = NULL;		/* hiredis frees it */
	n->state = ST_DOWN;
	evtimer_del(n->hs_timer);
	if (n->role == ROLE_QUERY)
		sentinel_ask(n->as);
	else
		schedule_retry(n);
}

static void
node_start(struct anode *n)
{
	struct astore *as = n->as;
	struct timeval tv = ms_tv(SGR_CONNECT_TIMEOUT_MS);
	redisAsyncContext *ac;

	if (n->ac != NULL || as->closing)
		return;
	evtimer_del(n->retry);
	ac = redisAsyncConnect(n->a.host, n->a.port);
	if (ac == NULL || ac->err != 0 ||
	    redisLibeventAttach(ac, as->base) != REDIS_OK) {
		if (ac != NULL)
			redisAsyncFree(ac);
		schedule_retry(n);
		return;
	}
	ac->data = n;
	redisAsyncSetConnectCallback(ac, on_connect);
	redisAsyncSetDisconnectCallback(ac, on_disconnect);
	n->ac = ac;
	n->state = ST_CONNECTING;
	evtimer_add(n->hs_timer, &tv);
}

/* Drop n's connection (everything in flight fails); retry: reconnect. */
static void
node_drop(struct anode *n, bool retry)
{
	redisAsyncContext *ac = n->ac;

	n->ac = NULL;
	n->state = ST_DOWN;
	if (n->hs_timer != NULL)
		evtimer_del(n->hs_timer);
	if (ac != NULL) {
		ac->data = NULL;
		redisAsyncFree(ac);	/* in a callback: when it returns */
	}
	if (retry && n->role != ROLE_QUERY)
		schedule_retry(n);
}

/* Ask the next sentinel for the primary; after a round, back off. */
static void
sentinel_ask(struct astore *as)
{
	if (as->closing || as->sq.ac != NULL)
		return;
	if (as->sq_next >= as->u.nhosts) {
		as->sq_next = 0;
		schedule_retry(&as->prim);
		return;
	}
	as->sq.a = as->u.hosts[as->sq_next++];
	node_start(&as->sq);
}

/* Every TICK_MS: drop stalled connections, refresh a stale map. */
static void
tick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct astore *as = arg;
	uint64_t now = sg_store_mono_ns(), stall = SGR_STALL_MS * 1000000ULL;
	size_t i;

	(void)fd;
	(void)what;
	if (as->prim.head != NULL && now - as->prim.head->sent_ns > stall)
		node_drop(&as->prim, true);
	for (i = 0; i < as->nnodes; i++)
		if (as->nodes[i]->head != NULL &&
		    now - as->nodes[i]->head->sent_ns > stall)
			node_drop(as->nodes[i], true);
	if (as->u.kind == SGR_CLUSTER && (!as->have_map || as->map_stale))
		map_request(as);
}

/* --- ops of the backend -------------------------------------------------- */

static void
tmo_cb(evutil_socket_t fd, short what, void *arg)
{
	struct aop *op = arg;
	sg_store_lookup_req *req = op->req;

	(void)fd;
	(void)what;
	if (req == NULL)
		return;
	op->req = NULL;
	sg_seterr(&req->err, ETIMEDOUT, "Redis: lookup deadline passed");
	sgi_store_lookup_finish(op->as->front, req, ETIMEDOUT);
}

static struct anode *
node_of(struct astore *as, const sgi_lckey *k)
{
	int i;

	if (as->u.kind != SGR_CLUSTER)
		return &as->prim;
	if (!as->have_map ||
	    (i = as->slot[sgr_key_slot(k->text, SG_LC_KEY_LEN)]) < 0)
		return NULL;
	return as->nodes[i];
}

static int
ra_lookup_start(void *be, const sgi_lckey *k, sg_store_lookup_req *req)
{
	struct astore *as = be;
	struct anode *n = node_of(as, k);
	struct aop *op;
	struct timeval tv;
	uint64_t now;
	int rc;

	if (n == NULL || n->state != ST_UP) {
		req->rc = sg_seterr(&req->err, ENOTCONN,
		    "Redis: not connected (reconnecting)");
		return req->rc;
	}
	if ((op = op_get(as)) == NULL ||
	    (op->tmo == NULL && (op->tmo = evtimer_new(as->base, tmo_cb,
	    op)) == NULL)) {
		if (op != NULL)
			op_put(op);
		req->rc = sg_seterr(&req->err, SG_ENOMEM, "out of memory");
		return req->rc;
	}
	op->kind = OP_GET;
	op->k = *k;
	if ((rc = op_send(op, n, false)) != 0) {
		op_put(op);
		req->rc = sg_seterr(&req->err, rc, rc == EBUSY ?
		    "Redis: too many commands in flight" :
		    "Redis: not connected (reconnecting)");
		return rc;
	}
	op->req = req;
	req->op = op;
	now = sg_store_mono_ns();
	tv.tv_sec = 0;
	tv.tv_usec = 0;
	if (req->deadline_ns > now) {
		uint64_t us = (req->deadline_ns - now + 999) / 1000;

		tv.tv_sec = (time_t)(us / 1000000);
		tv.tv_usec = (suseconds_t)(us % 1000000);
	}
	evtimer_add(op->tmo, &tv);
	return EINPROGRESS;
}

static void
ra_lookup_cancel(void *be, sg_store_lookup_req *req)
{
	struct aop *op = req->op;

	(void)be;
	if (op == NULL)
		return;
	op->req = NULL;
	evtimer_del(op->tmo);
	req->op = NULL;
}

static int
ra_lookup(void *be, const sgi_lckey *k, sg_store_entry *out, sg_error *err)
{
	(void)be;
	(void)k;
	(void)out;
	return sg_seterr(err, EWOULDBLOCK, "Redis on an event loop: use "
	    "sg_store_lookup_start()");
}

static int
ra_write(struct astore *as, int kind, const sgi_lckey *k, const char *id,
    size_t id_len, uint64_t written_ms, uint64_t *seq, sg_error *err)
{
	struct anode *n = node_of(as, k);
	struct aop *op;
	uint64_t px;
	int rc;

	if (n == NULL || n->state != ST_UP)
		return sg_seterr(err, ENOTCONN,
		    "Redis: not connected (reconnecting)");
	if ((op = op_get(as)) == NULL)
		return sg_seterr(err, SG_ENOMEM, "out of memory");
	op->kind = kind;
	op->k = *k;
	if (kind == OP_SET) {
		px = sgr_px(written_ms, sgi_store_now(&as->o), as->o.ttl_ms);
		if (px == 0)
			op->kind = OP_DEL;	/* already expired */
		op->vlen = sgr_value_encode(op->val, written_ms, id, id_len);
		snprintf(op->px, sizeof(op->px), "%llu",
		    (unsigned long long)px);
	}
	if ((rc = op_send(op, n, false)) != 0) {
		op_put(op);
		return sg_seterr(err, rc, rc == EBUSY ?
		    "Redis: too many commands in flight" :
		    "Redis: not connected (reconnecting)");
	}
	as->writes_inflight++;
	as->seq++;
	if (seq != NULL)
		*seq = as->seq;
	return 0;
}

static int
ra_put(void *be, const sgi_lckey *k, const char *id, size_t id_len,
    uint64_t written_ms, uint64_t *seq, sg_error *err)
{
	return ra_write(be, OP_SET, k, id, id_len, written_ms, seq, err);
}

static int
ra_del(void *be, const sgi_lckey *k, sg_error *err)
{
	return ra_write(be, OP_DEL, k, NULL, 0, 0, NULL, err);
}

static int
ra_flush(void *be, sg_error *err)
{
	struct astore *as = be;

	if (as->writes_inflight == 0)
		return 0;
	return sg_seterr(err, EINPROGRESS, "Redis: %llu writes in flight",
	    (unsigned long long)as->writes_inflight);
}

static int
ra_iterate(void *be, bool all, sg_store_iter_fn *fn, void *arg, sg_error *err)
{
	(void)be;
	(void)all;
	(void)fn;
	(void)arg;
	return sg_seterr(err, EWOULDBLOCK, "Redis on an event loop: "
	    "iterate with sg-lastcluster list");
}

static int
ra_stats(void *be, sg_store_stats *st, sg_error *err)
{
	struct astore *as = be;

	(void)err;
	st->queued = as->writes_inflight;
	st->committed = as->committed;
	st->failed = as->failed;
	st->commits = as->done;
	st->nodes = as->u.kind == SGR_CLUSTER ? (uint32_t)as->nnodes : 1;
	return 0;
}

static int
ra_compact(void *be, sg_store_compact_result *r, sg_error *err)
{
	(void)be;
	(void)r;
	(void)err;
	return 0;	/* Redis expires entries itself */
}

static bool
ra_connected(void *be)
{
	struct astore *as = be;
	size_t i;

	if (as->u.kind != SGR_CLUSTER)
		return as->prim.state == ST_UP;
	if (!as->have_map)
		return false;
	for (i = 0; i < as->nnodes; i++)
		if (as->nodes[i]->state == ST_UP)
			return true;
	return false;
}

static void
node_free(struct anode *n)
{
	node_drop(n, false);
	if (n->retry != NULL)
		event_free(n->retry);
	if (n->hs_timer != NULL)
		event_free(n->hs_timer);
}

static void
ra_close(void *be)
{
	struct astore *as = be;
	struct aop *op;
	size_t i;

	if (as == NULL)
		return;
	as->closing = true;
	node_free(&as->prim);
	node_free(&as->sq);
	for (i = 0; i < as->nnodes; i++) {
		node_free(as->nodes[i]);
		free(as->nodes[i]);
	}
	free(as->nodes);
	if (as->tick != NULL)
		event_free(as->tick);
	while ((op = as->free) != NULL) {
		as->free = op->next;
		if (op->tmo != NULL)
			event_free(op->tmo);
		free(op);
	}
	free(as);
}

static const struct sgi_store_ops redis_async_ops = {
	.name = "redis",
	.lookup = ra_lookup,
	.lookup_nowait = ra_lookup,
	.put = ra_put,
	.del = ra_del,
	.flush = ra_flush,
	.iterate = ra_iterate,
	.stats = ra_stats,
	.compact = ra_compact,
	.close = ra_close,
	.connected = ra_connected,
	.lookup_start = ra_lookup_start,
	.lookup_cancel = ra_lookup_cancel,
};

static int
node_init(struct astore *as, struct anode *n, int role)
{
	n->as = as;
	n->role = role;
	n->retry = evtimer_new(as->base, retry_cb, n);
	n->hs_timer = evtimer_new(as->base, hs_timeout_cb, n);
	return n->retry != NULL && n->hs_timer != NULL ? 0 : -1;
}

int
sgi_store_redis_async_open(void **be, const struct sgi_store_ops **ops,
    const sg_store_opts *o, sg_store *front, sg_error *err)
{
	struct timeval tv = ms_tv(TICK_MS);
	struct astore *as;
	size_t i;
	int rc;

	if ((as = calloc(1, sizeof(*as))) == NULL)
		return sg_seterr(err, SG_ENOMEM, "out of memory");
	as->o = *o;
	as->o.path = NULL;
	as->front = front;
	as->base = o->event_base;
	memset(as->slot, 0xff, sizeof(as->slot));
	if ((rc = sgr_url_parse(&as->u, o->path, err)) != 0)
		goto out;
	rc = sg_seterr(err, SG_ENOMEM, "out of memory");
	if (node_init(as, &as->prim, ROLE_DATA) != 0 ||
	    node_init(as, &as->sq, ROLE_QUERY) != 0 ||
	    (as->tick = event_new(as->base, -1, EV_PERSIST, tick_cb,
	    as)) == NULL || event_add(as->tick, &tv) != 0)
		goto out;
	rc = 0;
	/* Connect in the background: open never waits for the network. */
	if (as->u.kind == SGR_SINGLE) {
		as->prim.a = as->u.hosts[0];
		node_start(&as->prim);
	} else if (as->u.kind == SGR_SENTINEL)
		sentinel_ask(as);
	else
		for (i = 0; i < as->u.nhosts && rc == 0; i++)
			if (node_index(as, &as->u.hosts[i]) < 0)
				rc = sg_seterr(err, SG_ENOMEM,
				    "out of memory");
out:
	if (rc != 0) {
		ra_close(as);
		return rc;
	}
	*be = as;
	*ops = &redis_async_ops;
	return 0;
}
