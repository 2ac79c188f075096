/*
 * sg_store_redis.c — the Redis backend for tools: blocking hiredis with
 * connect and command timeouts (opts.event_base NULL), and the reply
 * parsing both modes share.  sg_store_redis_async.c is the event-loop
 * mode; sg_store_redis.h has the value encoding.
 *
 * One blocking connection to the primary (redis://; with Sentinel, the
 * primary the first answering sentinel names, checked with ROLE), or one
 * per Cluster primary, found through the slot map of CLUSTER SLOTS.  A
 * command that fails on I/O reconnects (re-asking the sentinels) and is
 * sent once more; a MOVED reply updates the slot and re-reads the map, an
 * ASK reply sends ASKING and the command to the node named, at most
 * SGR_REDIRECTS_MAX times.  Writes are synchronous SETs (a tool writes a
 * few entries, or a backup through `load`, where a round trip per entry on
 * a local network is fine) and each one is reported to on_commit as a
 * commit of one operation.  list/dump SCAN the lc:v1: keys (never KEYS:
 * SCAN does not block the server) on every primary, GET them in
 * pipelined batches and sort by write time, so the output matches LMDB's
 * order.  Redis expires entries and bounds memory itself: compact counts
 * and deletes nothing.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <hiredis.h>

#include "sg_store_redis.h"

#define SCAN_COUNT	"1000"
#define GET_BATCH	512

struct bnode {
	struct sgr_addr	 a;
	redisContext	*c;
};

struct rstore {
	sg_store_opts	 o;
	struct sgr_url	 u;
	struct bnode	 prim;		/* redis://, Sentinel */
	struct bnode	*nodes;		/* Cluster */
	size_t		 nnodes, capnodes;
	int16_t		 slot[SGR_SLOTS];	/* node index, -1 unknown */
	uint64_t	 seq, committed, failed;
};

/* --- replies (both modes) ------------------------------------------------ */

static bool
reply_is(const redisReply *r, const char *word)
{
	size_t n = strlen(word);

	return r->len >= n && strncmp(r->str, word, n) == 0 &&
	    (r->len == n || r->str[n] == ' ');
}

bool
sgr_parse_redirect(const struct redisReply *rep, bool *ask, unsigned *slot,
    struct sgr_addr *a)
{
	char buf[SGR_HOST_MAX + 64];
	const char *sp, *hp;
	uint64_t v;
	size_t l;

	if (rep->type != REDIS_REPLY_ERROR || rep->len >= sizeof(buf))
		return false;
	if (reply_is(rep, "MOVED"))
		*ask = false;
	else if (reply_is(rep, "ASK"))
		*ask = true;
	else
		return false;
	memcpy(buf, rep->str, rep->len);
	buf[rep->len] = '\0';
	sp = strchr(buf, ' ') + 1;
	if ((hp = strchr(sp, ' ')) == NULL ||
	    sg_parse_u64(sp, (size_t)(hp - sp), SGR_SLOTS - 1, &v) != 0)
		return false;
	*slot = (unsigned)v;
	hp++;
	if ((sp = strrchr(hp, ':')) == NULL ||
	    (l = (size_t)(sp - hp)) >= sizeof(a->host) ||
	    sg_parse_u64(sp + 1, strlen(sp + 1), 65535, &v) != 0 || v == 0)
		return false;
	memcpy(a->host, hp, l);
	a->host[l] = '\0';
	a->port = (int)v;
	return true;
}

int
sgr_parse_slots(const struct redisReply *rep, const char *asked,
    sgr_slots_fn *fn, void *arg)
{
	size_t i;
	int rc;

	if (rep->type != REDIS_REPLY_ARRAY)
		return SG_ESTORE;
	for (i = 0; i < rep->elements; i++) {
		const redisReply *e = rep->element[i], *n;
		struct sgr_addr a;

		if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
		    e->element[0]->type != REDIS_REPLY_INTEGER ||
		    e->element[1]->type != REDIS_REPLY_INTEGER ||
		    (n = e->element[2])->type != REDIS_REPLY_ARRAY ||
		    n->elements < 2 || n->element[0]->type !=
		    REDIS_REPLY_STRING || n->element[1]->type !=
		    REDIS_REPLY_INTEGER)
			return SG_ESTORE;
		if (e->element[0]->integer < 0 || e->element[1]->integer >=
		    SGR_SLOTS || e->element[0]->integer >
		    e->element[1]->integer || n->element[0]->len >=
		    sizeof(a.host) || n->element[1]->integer <= 0 ||
		    n->element[1]->integer > 65535)
			return SG_ESTORE;
		if (n->element[0]->len == 0)
			snprintf(a.host, sizeof(a.host), "%s", asked);
		else {
			memcpy(a.host, n->element[0]->str, n->element[0]->len);
			a.host[n->element[0]->len] = '\0';
		}
		a.port = (int)n->element[1]->integer;
		if ((rc = fn(arg, (unsigned)e->element[0]->integer,
		    (unsigned)e->element[1]->integer, &a)) != 0)
			return rc;
	}
	return 0;
}

int
sgr_parse_master_addr(const struct redisReply *rep, struct sgr_addr *a)
{
	uint64_t v;

	if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
	    rep->element[0]->type != REDIS_REPLY_STRING ||
	    rep->element[1]->type != REDIS_REPLY_STRING ||
	    rep->element[0]->len == 0 ||
	    rep->element[0]->len >= sizeof(a->host) ||
	    sg_parse_u64(rep->element[1]->str, rep->element[1]->len, 65535,
	    &v) != 0 || v == 0)
		return SG_ENOTFOUND;
	memcpy(a->host, rep->element[0]->str, rep->element[0]->len);
	a->host[rep->element[0]->len] = '\0';
	a->port = (int)v;
	return 0;
}

bool
sgr_role_is_master(const struct redisReply *rep)
{
	return rep->type == REDIS_REPLY_ARRAY && rep->elements > 0 &&
	    rep->element[0]->type == REDIS_REPLY_STRING &&
	    rep->element[0]->len == 6 &&
	    memcmp(rep->element[0]->str, "master", 6) == 0;
}

int
sgr_reply_error(const struct redisReply *rep, const char *what,
    sg_error *err)
{
	int rc = SG_ESTORE;

	if (reply_is(rep, "NOAUTH") || reply_is(rep, "WRONGPASS") ||
	    reply_is(rep, "NOPERM"))
		rc = EACCES;
	else if (reply_is(rep, "READONLY"))
		rc = EROFS;
	else if (reply_is(rep, "LOADING") || reply_is(rep, "TRYAGAIN") ||
	    reply_is(rep, "CLUSTERDOWN") || reply_is(rep, "MASTERDOWN"))
		rc = EAGAIN;
	return sg_seterr(err, rc, "%s: Redis: %.*s", what,
	    (int)(rep->len > 200 ? 200 : rep->len), rep->str);
}

int
sgr_get_entry(const struct redisReply *rep, const sgi_lckey *k,
    uint64_t now_ms, uint64_t ttl_ms, sg_store_entry *e, sg_error *err)
{
	const char *id;
	size_t idlen;
	uint64_t w;

	if (rep->type == REDIS_REPLY_NIL)
		return SG_ENOTFOUND;
	if (rep->type == REDIS_REPLY_ERROR)
		return sgr_reply_error(rep, "GET", err);
	if (rep->type != REDIS_REPLY_STRING ||
	    sgr_value_decode(rep->str, rep->len, &w, &id, &idlen) != 0)
		return SG_ENOTFOUND;
	if (sgr_px(w, now_ms, ttl_ms) == 0)
		return SG_ENOTFOUND;
	memcpy(e->key, k->text, sizeof(e->key));
	memcpy(e->cluster_id, id, idlen);
	e->cluster_id[idlen] = '\0';
	e->cluster_id_len = idlen;
	e->written_ms = w;
	e->age_ms = now_ms > w ? now_ms - w : 0;
	return 0;
}

/* --- connections --------------------------------------------------------- */

static struct timeval
ms_tv(unsigned ms)
{
	struct timeval tv = { (time_t)(ms / 1000), (suseconds_t)(ms % 1000) *
	    1000 };

	return tv;
}

/* A hiredis context's failure as an errno and a message. */
static int
ctx_error(const redisContext *c, const struct sgr_addr *a, sg_error *err)
{
	int rc;

	switch (c->err) {
	case REDIS_ERR_EOF:
		rc = ECONNRESET;
		break;
	case REDIS_ERR_OOM:
		rc = SG_ENOMEM;
		break;
	case REDIS_ERR_IO:
		rc = errno == EAGAIN || errno == EINPROGRESS ? ETIMEDOUT :
		    errno != 0 ? errno : SG_EIO;
		break;
	default:
		rc = SG_ESTORE;
	}
	if (rc == ETIMEDOUT)
		return sg_seterr(err, rc, "Redis %s:%d: timed out", a->host,
		    a->port);
	return sg_seterr(err, rc, "Redis %s:%d: %s", a->host, a->port,
	    c->errstr[0] != '\0' ? c->errstr : "connection failed");
}

static void
node_close(struct bnode *n)
{
	if (n->c != NULL)
		redisFree(n->c);
	n->c = NULL;
}

/* Send one command expecting a status or array reply; 0 or an error. */
static int
simple(redisContext *c, const struct sgr_addr *a, redisReply **out,
    const char *what, sg_error *err, int argc, const char **argv)
{
	redisReply *rep;
	int rc = 0;

	errno = 0;
	rep = redisCommandArgv(c, argc, argv, NULL);
	if (rep == NULL)
		return ctx_error(c, a, err);
	if (rep->type == REDIS_REPLY_ERROR)
		rc = sgr_reply_error(rep, what, err);
	if (rc != 0 || out == NULL)
		freeReplyObject(rep);
	else
		*out = rep;
	return rc;
}

/* Connect to a, AUTH and SELECT as the URL says (select: not Cluster or a
 * sentinel). */
static int
connect_to(redisContext **out, const struct sgr_addr *a,
    const struct sgr_url *u, bool auth, bool select, sg_error *err)
{
	redisContext *c;
	char db[16];
	int rc = 0;

	errno = 0;
	c = redisConnectWithTimeout(a->host, a->port,
	    ms_tv(SGR_CONNECT_TIMEOUT_MS));
	if (c == NULL)
		return sg_seterr(err, SG_ENOMEM, "out of memory");
	if (c->err != 0) {
		rc = ctx_error(c, a, err);
		goto out;
	}
	redisSetTimeout(c, ms_tv(SGR_COMMAND_TIMEOUT_MS));
	if (auth && u->pass[0] != '\0') {
		const char *av[3] = { "AUTH", u->user, u->pass };

		if (u->user[0] != '\0')
			rc = simple(c, a, NULL, "AUTH", err, 3, av);
		else {
			av[1] = u->pass;
			rc = simple(c, a, NULL, "AUTH", err, 2, av);
		}
		if (rc != 0)
			goto out;
	}
	if (select && u->db != 0) {
		const char *av[2] = { "SELECT", db };

		snprintf(db, sizeof(db), "%d", u->db);
		if ((rc = simple(c, a, NULL, "SELECT", err, 2, av)) != 0)
			goto out;
	}
out:
	if (rc != 0)
		redisFree(c);
	else
		*out = c;
	return rc;
}

/* Ask the sentinels, in order, for the primary; connect and check ROLE. */
static int
sentinel_connect(struct rstore *r, sg_error *err)
{
	const char *av[3] = { "SENTINEL", "get-master-addr-by-name",
	    r->u.master };
	const char *role[1] = { "ROLE" };
	int rc = SG_ESTORE;
	size_t i;

	sg_seterr(err, ENOTCONN, "Redis Sentinel: no sentinel answered");
	rc = ENOTCONN;
	for (i = 0; i < r->u.nhosts; i++) {
		redisContext *sc = NULL;
		redisReply *rep = NULL;
		struct sgr_addr m;

		if (connect_to(&sc, &r->u.hosts[i], &r->u, false, false,
		    err) != 0)
			continue;
		rc = simple(sc, &r->u.hosts[i], &rep, "SENTINEL", err, 3, av);
		redisFree(sc);
		if (rc != 0)
			continue;
		rc = sgr_parse_master_addr(rep, &m);
		freeReplyObject(rep);
		if (rc != 0) {
			sg_seterr(err, rc = ENOENT, "Redis Sentinel %s:%d: "
			    "no master named '%s'", r->u.hosts[i].host,
			    r->u.hosts[i].port, r->u.master);
			continue;
		}
		r->prim.a = m;
		if ((rc = connect_to(&r->prim.c, &m, &r->u, true, true,
		    err)) != 0)
			continue;
		rep = NULL;
		if ((rc = simple(r->prim.c, &m, &rep, "ROLE", err, 1,
		    role)) == 0 && !sgr_role_is_master(rep))
			rc = sg_seterr(err, EROFS, "Redis %s:%d: not a "
			    "primary (yet)", m.host, m.port);
		if (rep != NULL)
			freeReplyObject(rep);
		if (rc == 0)
			return 0;
		node_close(&r->prim);
	}
	return rc;
}

static int
prim_connect(struct rstore *r, sg_error *err)
{
	if (r->prim.c != NULL)
		return 0;
	if (r->u.kind == SGR_SENTINEL)
		return sentinel_connect(r, err);
	r->prim.a = r->u.hosts[0];
	return connect_to(&r->prim.c, &r->prim.a, &r->u, true, true, err);
}

/* --- Cluster ------------------------------------------------------------- */

static int
node_find(struct rstore *r, const struct sgr_addr *a)
{
	size_t i;

	for (i = 0; i < r->nnodes; i++)
		if (r->nodes[i].a.port == a->port &&
		    strcmp(r->nodes[i].a.host, a->host) == 0)
			return (int)i;
	if (r->nnodes == r->capnodes) {
		size_t cap = r->capnodes ? r->capnodes * 2 : 8;
		struct bnode *n;

		if (cap > INT16_MAX ||
		    (n = realloc(r->nodes, cap * sizeof(*n))) == NULL)
			return -1;
		r->nodes = n;
		r->capnodes = cap;
	}
	memset(&r->nodes[r->nnodes], 0, sizeof(r->nodes[0]));
	r->nodes[r->nnodes].a = *a;
	return (int)r->nnodes++;
}

static int
slots_fn(void *arg, unsigned lo, unsigned hi, const struct sgr_addr *a)
{
	struct rstore *r = arg;
	int i = node_find(r, a);
	unsigned s;

	if (i < 0)
		return SG_ENOMEM;
	for (s = lo; s <= hi; s++)
		r->slot[s] = (int16_t)i;
	return 0;
}

static int
node_connect(struct rstore *r, struct bnode *n, sg_error *err)
{
	if (n->c != NULL)
		return 0;
	return connect_to(&n->c, &n->a, &r->u, true, false, err);
}

/* Read the slot map from the first node (known, then seeds) that answers. */
static int
cluster_refresh(struct rstore *r, sg_error *err)
{
	const char *av[2] = { "CLUSTER", "SLOTS" };
	size_t i, n;
	int rc = ENOTCONN;

	sg_seterr(err, rc, "Redis Cluster: no node answered");
	for (i = 0; i < r->u.nhosts; i++)
		if (node_find(r, &r->u.hosts[i]) < 0)
			return sg_seterr(err, SG_ENOMEM, "out of memory");
	for (i = 0, n = r->nnodes; i < n; i++) {
		struct bnode *nd = &r->nodes[i];
		redisReply *rep = NULL;
		char asked[SGR_HOST_MAX];

		if (node_connect(r, nd, err) != 0)
			continue;
		if ((rc = simple(nd->c, &nd->a, &rep, "CLUSTER SLOTS", err, 2,
		    av)) != 0) {
			node_close(nd);
			continue;
		}
		memcpy(asked, nd->a.host, sizeof(asked)); /* nodes moves */
		memset(r->slot, 0xff, sizeof(r->slot));
		rc = sgr_parse_slots(rep, asked, slots_fn, r);
		freeReplyObject(rep);
		if (rc == 0)
			return 0;
		sg_seterr(err, rc, "Redis Cluster: bad CLUSTER SLOTS reply");
	}
	return rc;
}

/* --- commands ------------------------------------------------------------ */

/* The node for key (NULL: the primary), connected. */
static int
node_for(struct rstore *r, const char *key, struct bnode **out, sg_error *err)
{
	int rc;

	if (r->u.kind != SGR_CLUSTER) {
		if ((rc = prim_connect(r, err)) != 0)
			return rc;
		*out = &r->prim;
		return 0;
	}
	if (r->slot[sgr_key_slot(key, SG_LC_KEY_LEN)] < 0 &&
	    (rc = cluster_refresh(r, err)) != 0)
		return rc;
	if (r->slot[sgr_key_slot(key, SG_LC_KEY_LEN)] < 0)
		return sg_seterr(err, EAGAIN, "Redis Cluster: slot %u has no "
		    "node", sgr_key_slot(key, SG_LC_KEY_LEN));
	*out = &r->nodes[r->slot[sgr_key_slot(key, SG_LC_KEY_LEN)]];
	return node_connect(r, *out, err);
}

/*
 * Run a command on key's node: reconnect once after an I/O error,
 * follow MOVED and ASK.  *out is the reply (never an error reply).
 * Returns 0 or an error.
 */
static int
run(struct rstore *r, const char *key, int argc, const char **argv,
    const size_t *lens, redisReply **out, sg_error *err)
{
	struct bnode *n = NULL;
	redisReply *rep;
	int tries, rc, io = 0;
	bool ask = false;

	for (tries = 0; tries <= SGR_REDIRECTS_MAX; tries++) {
		unsigned slot;
		struct sgr_addr a;

		if (!ask && (rc = node_for(r, key, &n, err)) != 0)
			return rc;
		errno = 0;
		if (ask) {
			redisReply *ar = redisCommand(n->c, "ASKING");

			if (ar != NULL)
				freeReplyObject(ar);
		}
		rep = redisCommandArgv(n->c, argc, argv, lens);
		ask = false;
		if (rep == NULL) {
			rc = ctx_error(n->c, &n->a, err);
			node_close(n);
			if (io++ > 0)
				return rc;
			continue;
		}
		if (r->u.kind == SGR_CLUSTER &&
		    sgr_parse_redirect(rep, &ask, &slot, &a)) {
			int i = node_find(r, &a);

			freeReplyObject(rep);
			if (i < 0)
				return sg_seterr(err, SG_ENOMEM,
				    "out of memory");
			if (!ask) {
				r->slot[slot] = (int16_t)i;
				(void)cluster_refresh(r, err);
				continue;
			}
			n = &r->nodes[i];
			if ((rc = node_connect(r, n, err)) != 0)
				return rc;
			continue;
		}
		if (rep->type == REDIS_REPLY_ERROR) {
			rc = sgr_reply_error(rep, argv[0], err);
			freeReplyObject(rep);
			if (rc == EROFS && r->u.kind == SGR_SENTINEL &&
			    io++ == 0) {
				node_close(&r->prim);	/* failed over */
				continue;
			}
			return rc;
		}
		*out = rep;
		return 0;
	}
	return sg_seterr(err, SG_ESTORE, "Redis Cluster: too many redirects");
}

static int
rd_lookup(void *be, const sgi_lckey *k, sg_store_entry *out, sg_error *err)
{
	struct rstore *r = be;
	const char *av[2] = { "GET", k->text };
	redisReply *rep = NULL;
	int rc;

	if ((rc = run(r, k->text, 2, av, NULL, &rep, err)) != 0)
		return rc;
	rc = sgr_get_entry(rep, k, sgi_store_now(&r->o), r->o.ttl_ms, out,
	    err);
	freeReplyObject(rep);
	return rc;
}

static void
report(struct rstore *r, int rc)
{
	sg_store_commit c;

	r->seq++;
	if (rc == 0)
		r->committed++;
	else
		r->failed++;
	if (r->o.on_commit == NULL)
		return;
	c.ops = 1;
	c.ops_done = r->seq;
	c.committed = r->committed;
	c.rc = rc;
	r->o.on_commit(&c, r->o.commit_arg);
}

static int
rd_put(void *be, const sgi_lckey *k, const char *id, size_t id_len,
    uint64_t written_ms, uint64_t *seq, sg_error *err)
{
	struct rstore *r = be;
	char val[SGR_VALUE_MAX], px[24];
	const char *av[5] = { "SET", k->text, val, "PX", px };
	size_t lens[5];
	uint64_t ms = sgr_px(written_ms, sgi_store_now(&r->o), r->o.ttl_ms);
	redisReply *rep = NULL;
	int rc, i;

	lens[2] = sgr_value_encode(val, written_ms, id, id_len);
	snprintf(px, sizeof(px), "%llu", (unsigned long long)ms);
	for (i = 0; i < 5; i++)
		if (i != 2)
			lens[i] = strlen(av[i]);
	if (ms == 0) {
		/* Already expired (an old backup): what LMDB would miss. */
		av[0] = "DEL";
		rc = run(r, k->text, 2, av, lens, &rep, err);
	} else
		rc = run(r, k->text, 5, av, lens, &rep, err);
	if (rep != NULL)
		freeReplyObject(rep);
	report(r, rc);
	if (seq != NULL)
		*seq = r->seq;
	return rc;
}

static int
rd_del(void *be, const sgi_lckey *k, sg_error *err)
{
	struct rstore *r = be;
	const char *av[2] = { "DEL", k->text };
	redisReply *rep = NULL;
	int rc;

	rc = run(r, k->text, 2, av, NULL, &rep, err);
	if (rep != NULL)
		freeReplyObject(rep);
	report(r, rc);
	return rc;
}

static int
rd_flush(void *be, sg_error *err)
{
	(void)be;
	(void)err;
	return 0;	/* every write has been answered */
}

/* --- list, stats --------------------------------------------------------- */

struct ents {
	sg_store_entry	*v;
	size_t		 n, cap;
};

static int
ents_add(struct ents *es, const sg_store_entry *e)
{
	if (es->n == es->cap) {
		size_t cap = es->cap ? es->cap * 2 : 256;
		sg_store_entry *v = realloc(es->v, cap * sizeof(*v));

		if (v == NULL)
			return SG_ENOMEM;
		es->v = v;
		es->cap = cap;
	}
	es->v[es->n++] = *e;
	return 0;
}

/* GET keys[0..n) on c in one pipeline; add what decodes (any age). */
static int
get_batch(struct rstore *r, struct bnode *nd, char (*keys)[SG_LC_KEY_LEN + 1],
    size_t n, struct ents *es, sg_error *err)
{
	size_t i;
	int rc = 0;

	for (i = 0; i < n; i++)
		redisAppendCommand(nd->c, "GET %b", keys[i],
		    (size_t)SG_LC_KEY_LEN);
	for (i = 0; i < n; i++) {
		redisReply *rep = NULL;
		sg_store_entry e;
		sgi_lckey k;

		if (redisGetReply(nd->c, (void **)&rep) != REDIS_OK)
			return ctx_error(nd->c, &nd->a, err);
		if (rc == 0 && sgi_lckey_parse(&k, keys[i],
		    SG_LC_KEY_LEN) == 0 && sgr_get_entry(rep, &k, 0,
		    UINT64_MAX, &e, NULL) == 0) {
			uint64_t now = sgi_store_now(&r->o);

			e.age_ms = now > e.written_ms ? now - e.written_ms : 0;
			rc = ents_add(es, &e);
		}
		freeReplyObject(rep);
	}
	if (rc != 0)
		sg_seterr(err, rc, "out of memory");
	return rc;
}

/* SCAN one node for lc:v1: keys and read them. */
static int
scan_node(struct rstore *r, struct bnode *nd, struct ents *es, sg_error *err)
{
	char cursor[32] = "0";
	char (*keys)[SG_LC_KEY_LEN + 1];
	size_t nk = 0;
	int rc = 0;

	if ((keys = malloc(GET_BATCH * sizeof(*keys))) == NULL)
		return sg_seterr(err, SG_ENOMEM, "out of memory");
	do {
		const char *av[6] = { "SCAN", cursor, "MATCH",
		    SG_LC_KEY_PREFIX "*", "COUNT", SCAN_COUNT };
		redisReply *rep = NULL, *ks;
		size_t i;

		if ((rc = simple(nd->c, &nd->a, &rep, "SCAN", err, 6,
		    av)) != 0)
			break;
		if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
		    rep->element[0]->type != REDIS_REPLY_STRING ||
		    rep->element[0]->len >= sizeof(cursor) ||
		    (ks = rep->element[1])->type != REDIS_REPLY_ARRAY) {
			freeReplyObject(rep);
			rc = sg_seterr(err, SG_ESTORE, "SCAN: bad reply");
			break;
		}
		memcpy(cursor, rep->element[0]->str, rep->element[0]->len);
		cursor[rep->element[0]->len] = '\0';
		for (i = 0; i < ks->elements && rc == 0; i++) {
			if (ks->element[i]->type != REDIS_REPLY_STRING ||
			    !sg_lc_key_valid(ks->element[i]->str,
			    ks->element[i]->len))
				continue;
			memcpy(keys[nk], ks->element[i]->str, SG_LC_KEY_LEN);
			keys[nk++][SG_LC_KEY_LEN] = '\0';
			if (nk == GET_BATCH) {
				rc = get_batch(r, nd, keys, nk, es, err);
				nk = 0;
			}
		}
		freeReplyObject(rep);
	} while (rc == 0 && strcmp(cursor, "0") != 0);
	if (rc == 0 && nk > 0)
		rc = get_batch(r, nd, keys, nk, es, err);
	free(keys);
	return rc;
}

static int
by_time(const void *a, const void *b)
{
	const sg_store_entry *x = a, *y = b;

	if (x->written_ms != y->written_ms)
		return x->written_ms < y->written_ms ? -1 : 1;
	return strcmp(x->key, y->key);
}

/* Every primary, connected, one at a time through fn. */
static int
each_primary(struct rstore *r, int (*fn)(struct rstore *, struct bnode *,
    void *, sg_error *), void *arg, sg_error *err)
{
	bool *seen;
	size_t s;
	int rc;

	if (r->u.kind != SGR_CLUSTER) {
		if ((rc = prim_connect(r, err)) != 0)
			return rc;
		return fn(r, &r->prim, arg, err);
	}
	if ((rc = cluster_refresh(r, err)) != 0)
		return rc;
	if ((seen = calloc(r->nnodes, sizeof(*seen))) == NULL)
		return sg_seterr(err, SG_ENOMEM, "out of memory");
	for (s = 0; s < SGR_SLOTS && rc == 0; s++) {
		struct bnode *nd;

		if (r->slot[s] < 0 || seen[r->slot[s]])
			continue;
		seen[r->slot[s]] = true;
		nd = &r->nodes[r->slot[s]];
		if ((rc = node_connect(r, nd, err)) == 0)
			rc = fn(r, nd, arg, err);
	}
	free(seen);
	return rc;
}

static int
scan_fn(struct rstore *r, struct bnode *nd, void *arg, sg_error *err)
{
	return scan_node(r, nd, arg, err);
}

static int
collect(struct rstore *r, struct ents *es, sg_error *err)
{
	int rc;

	memset(es, 0, sizeof(*es));
	if ((rc = each_primary(r, scan_fn, es, err)) != 0) {
		free(es->v);
		es->v = NULL;
		return rc;
	}
	if (es->n > 1)
		qsort(es->v, es->n, sizeof(es->v[0]), by_time);
	return 0;
}

static int
rd_iterate(void *be, bool all, sg_store_iter_fn *fn, void *arg, sg_error *err)
{
	struct rstore *r = be;
	struct ents es;
	size_t i;
	int rc;

	if ((rc = collect(r, &es, err)) != 0)
		return rc;
	for (i = 0; i < es.n && rc == 0; i++)
		if (all || es.v[i].age_ms < r->o.ttl_ms)
			rc = fn(&es.v[i], arg);
	free(es.v);
	return rc;
}

/* "name:value\r\n" in an INFO reply. */
static bool
info_field(const redisReply *rep, const char *name, char *out, size_t cap)
{
	size_t nl = strlen(name);
	const char *p = rep->str, *end = rep->str + rep->len;

	while (p < end) {
		const char *eol = memchr(p, '\n', (size_t)(end - p));
		size_t l = eol != NULL ? (size_t)(eol - p) : (size_t)(end - p);

		if (l > nl && memcmp(p, name, nl) == 0 && p[nl] == ':') {
			size_t vl = l - nl - 1;

			if (vl > 0 && p[nl + vl] == '\r')
				vl--;
			if (vl >= cap)
				return false;
			memcpy(out, p + nl + 1, vl);
			out[vl] = '\0';
			return true;
		}
		p += l + 1;
	}
	return false;
}

static int
info_fn(struct rstore *r, struct bnode *nd, void *arg, sg_error *err)
{
	const char *av[2] = { "INFO", "memory" };
	sg_store_stats *st = arg;
	redisReply *rep = NULL;
	char v[64];
	uint64_t n;
	int rc;

	(void)r;
	if ((rc = simple(nd->c, &nd->a, &rep, "INFO", err, 2, av)) != 0)
		return rc;
	if (rep->type == REDIS_REPLY_STRING) {
		if (info_field(rep, "used_memory", v, sizeof(v)) &&
		    sg_parse_u64(v, strlen(v), UINT64_MAX, &n) == 0)
			st->mem_used += n;
		if (info_field(rep, "maxmemory", v, sizeof(v)) &&
		    sg_parse_u64(v, strlen(v), UINT64_MAX, &n) == 0)
			st->mem_max += n;
		if (info_field(rep, "maxmemory_policy", v, sizeof(v)))
			snprintf(st->mem_policy, sizeof(st->mem_policy), "%s",
			    v);
	}
	st->nodes++;
	freeReplyObject(rep);
	return 0;
}

static int
rd_stats(void *be, sg_store_stats *st, sg_error *err)
{
	struct rstore *r = be;
	struct ents es;
	size_t i;
	int rc;

	if ((rc = collect(r, &es, err)) != 0)
		return rc;
	st->entries = es.n;
	for (i = 0; i < es.n; i++) {
		if (es.v[i].age_ms >= r->o.ttl_ms)
			st->expired++;
		if (es.v[i].age_ms > st->oldest_age_ms)
			st->oldest_age_ms = es.v[i].age_ms;
	}
	free(es.v);
	st->committed = r->committed;
	st->failed = r->failed;
	st->commits = r->committed + r->failed;
	return each_primary(r, info_fn, st, err);
}

static int
rd_compact(void *be, sg_store_compact_result *res, sg_error *err)
{
	struct rstore *r = be;
	struct ents es;
	size_t i;
	int rc;

	if ((rc = collect(r, &es, err)) != 0)
		return rc;
	for (i = 0; i < es.n; i++)
		if (es.v[i].age_ms < r->o.ttl_ms)
			res->entries++;
	free(es.v);
	return 0;
}

static bool
rd_connected(void *be)
{
	struct rstore *r = be;
	size_t i;

	if (r->u.kind != SGR_CLUSTER)
		return r->prim.c != NULL;
	for (i = 0; i < r->nnodes; i++)
		if (r->nodes[i].c != NULL)
			return true;
	return false;
}

static void
rd_close(void *be)
{
	struct rstore *r = be;
	size_t i;

	if (r == NULL)
		return;
	node_close(&r->prim);
	for (i = 0; i < r->nnodes; i++)
		node_close(&r->nodes[i]);
	free(r->nodes);
	free(r);
}

static const struct sgi_store_ops redis_ops = {
	.name = "redis",
	.lookup = rd_lookup,
	.lookup_nowait = rd_lookup,
	.put = rd_put,
	.del = rd_del,
	.flush = rd_flush,
	.iterate = rd_iterate,
	.stats = rd_stats,
	.compact = rd_compact,
	.close = rd_close,
	.connected = rd_connected,
};

int
sgi_store_redis_open(void **be, const struct sgi_store_ops **ops,
    const sg_store_opts *o, sg_error *err)
{
	struct rstore *r;
	int rc;

	if ((r = calloc(1, sizeof(*r))) == NULL)
		return sg_seterr(err, SG_ENOMEM, "out of memory");
	r->o = *o;
	r->o.path = NULL;
	memset(r->slot, 0xff, sizeof(r->slot));
	if ((rc = sgr_url_parse(&r->u, o->path, err)) != 0)
		goto out;
	/* Reach the store now, so that a tool says at once it cannot. */
	if (r->u.kind == SGR_CLUSTER)
		rc = cluster_refresh(r, err);
	else
		rc = prim_connect(r, err);
out:
	if (rc != 0) {
		rd_close(r);
		return rc;
	}
	*be = r;
	*ops = &redis_ops;
	return 0;
}
