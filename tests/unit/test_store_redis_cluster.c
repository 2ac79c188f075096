/*
 * test_store_redis_cluster.c — the Redis store on Redis Cluster
 * (redis+cluster://), against three real cluster-enabled redis-server
 * primaries joined with `redis-cli --cluster create`: keys spread over all
 * three by their slots, list and stats over every primary, and a slot
 * migrated while the store holds the old map: ASK while the slot is
 * migrating, MOVED once it has moved, both followed without an error,
 * blocking (tools) and on a libevent loop (sg-proxy).  Skipped without
 * redis-server.
 */
#include "sg_test.h"

#include <stdio.h>
#include <stdlib.h>

#include <event2/event.h>

#include "sg_store.h"
#include "sg_store_redis.h"
#include "test_store_redis.h"

#define NNODES	3
#define NKEYS	300

struct fx {
	struct rsrv		 n[NNODES];
	char			 url[256];
	struct event_base	*base;
	sg_store_opts		 o;
	sg_store		*s;
	size_t			 calls;
	sg_store_lookup_req	 req;
	char			 keys[NKEYS][SG_LC_KEY_LEN + 1];
};

static int
setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	sg_store_opts_init(&f->o);
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fx *f = *state;
	int i;

	sg_store_close(f->s);
	if (f->base != NULL)
		event_base_free(f->base);
	for (i = 0; i < NNODES; i++)
		rs_stop(&f->n[i]);
	free(f);
	return 0;
}

static bool
cluster_ok(int port)
{
	redisReply *r = rs_cmd(port, "CLUSTER INFO");
	bool ok = r != NULL && r->type == REDIS_REPLY_STRING &&
	    strstr(r->str, "cluster_state:ok") != NULL;

	if (r != NULL)
		freeReplyObject(r);
	return ok;
}

static void
start_cluster(struct fx *f)
{
	char cmd[512];
	size_t n;
	int i, tries;

	srandom((unsigned)getpid());
	for (i = 0; i < NNODES; i++) {
		f->n[i].port = rs_cluster_port();
		rs_start(&f->n[i], "--cluster-enabled", "yes",
		    "--cluster-config-file", "nodes.conf",
		    "--cluster-node-timeout", "2000", NULL);
	}
	n = (size_t)snprintf(cmd, sizeof(cmd), "redis-cli --cluster create");
	for (i = 0; i < NNODES; i++)
		n += (size_t)snprintf(cmd + n, sizeof(cmd) - n,
		    " 127.0.0.1:%d", f->n[i].port);
	snprintf(cmd + n, sizeof(cmd) - n,
	    " --cluster-yes >/dev/null 2>&1 </dev/null");
	assert_int_equal(system(cmd), 0);
	for (i = 0; i < NNODES; i++) {
		for (tries = 0; tries < 500 && !cluster_ok(f->n[i].port);
		    tries++)
			rs_sleep_ms(20);
		assert_true(cluster_ok(f->n[i].port));
	}
	n = (size_t)snprintf(f->url, sizeof(f->url), "redis+cluster://");
	for (i = 0; i < 2; i++)		/* two seeds are enough */
		n += (size_t)snprintf(f->url + n, sizeof(f->url) - n,
		    "%s127.0.0.1:%d", i ? "," : "", f->n[i].port);
	f->o.path = f->url;
	for (i = 0; i < NKEYS; i++) {
		char aff[32];

		snprintf(aff, sizeof(aff), "conv-%d", i);
		assert_int_equal(sg_lc_key(f->keys[i], "rk", 2, "m", 1, aff,
		    strlen(aff)), 0);
	}
}

static long long
dbsize(int port)
{
	redisReply *r = rs_cmd(port, "DBSIZE");
	long long n = r != NULL && r->type == REDIS_REPLY_INTEGER ?
	    r->integer : -1;

	if (r != NULL)
		freeReplyObject(r);
	return n;
}

/* Which node serves key now (index): the one that does not redirect. */
static int
owner(struct fx *f, const char *key)
{
	int i;

	for (i = 0; i < NNODES; i++) {
		redisReply *g = rs_cmd(f->n[i].port, "GET %s", key);
		bool mine = g != NULL && g->type != REDIS_REPLY_ERROR;

		if (g != NULL)
			freeReplyObject(g);
		if (mine)
			return i;
	}
	return -1;
}

static void
node_id(struct fx *f, int i, char *out, size_t cap)
{
	rs_str(out, cap, f->n[i].port, "CLUSTER MYID");
	assert_true(strlen(out) == 40);
}

/*
 * Move key's slot from node a to node b in two steps: step 1 leaves it
 * migrating (the key already on b: ASK), step 2 assigns it to b (MOVED).
 */
static void
migrate(struct fx *f, const char *key, int a, int b, int step)
{
	unsigned slot = sgr_key_slot(key, SG_LC_KEY_LEN);
	char ida[64], idb[64], buf[128];
	redisReply *r;
	int i;

	node_id(f, a, ida, sizeof(ida));
	node_id(f, b, idb, sizeof(idb));
	if (step == 1) {
		assert_string_equal(rs_str(buf, sizeof(buf), f->n[b].port,
		    "CLUSTER SETSLOT %u IMPORTING %s", slot, ida), "OK");
		assert_string_equal(rs_str(buf, sizeof(buf), f->n[a].port,
		    "CLUSTER SETSLOT %u MIGRATING %s", slot, idb), "OK");
		r = rs_cmd(f->n[a].port, "MIGRATE 127.0.0.1 %d %s 0 5000",
		    f->n[b].port, key);
		assert_non_null(r);
		assert_int_equal(r->type, REDIS_REPLY_STATUS);
		freeReplyObject(r);
		return;
	}
	for (i = 0; i < NNODES; i++)
		rs_str(buf, sizeof(buf), f->n[i].port,
		    "CLUSTER SETSLOT %u NODE %s", slot, idb);
}

static void
test_cluster_keys_spread_over_every_primary(void **state)
{
	struct fx *f = *state;
	sg_store_entry e;
	sg_store_stats st;
	sg_error er;
	int i;

	rs_skip_absent();
	start_cluster(f);
	sg_error_clear(&er);
	if (sg_store_open(&f->s, &f->o, &er) != 0)
		fail_msg("open: %s", er.text);
	for (i = 0; i < NKEYS; i++)
		assert_int_equal(sg_store_put(f->s, f->keys[i], SG_LC_KEY_LEN,
		    "C", 1, NULL), 0);
	for (i = 0; i < NNODES; i++)
		assert_true(dbsize(f->n[i].port) > NKEYS / 10);
	assert_true(dbsize(f->n[0].port) + dbsize(f->n[1].port) +
	    dbsize(f->n[2].port) == NKEYS);
	for (i = 0; i < NKEYS; i++)
		assert_int_equal(sg_store_lookup(f->s, f->keys[i],
		    SG_LC_KEY_LEN, &e, NULL), 0);
	assert_int_equal(sg_store_stats_get(f->s, &st, NULL), 0);
	assert_true(st.entries == NKEYS);
	assert_int_equal(st.nodes, NNODES);
	assert_int_equal(sg_store_del(f->s, f->keys[0], SG_LC_KEY_LEN, NULL),
	    0);
	assert_int_equal(sg_store_lookup(f->s, f->keys[0], SG_LC_KEY_LEN, &e,
	    NULL), SG_ENOTFOUND);
}

static void
test_cluster_blocking_follows_ask_and_moved(void **state)
{
	struct fx *f = *state;
	const char *k;
	sg_store_entry e;
	int a, b;

	rs_skip_absent();
	start_cluster(f);
	assert_int_equal(sg_store_open(&f->s, &f->o, NULL), 0);
	k = f->keys[7];
	assert_int_equal(sg_store_put(f->s, k, SG_LC_KEY_LEN, "M", 1, NULL), 0);
	assert_int_equal(sg_store_lookup(f->s, k, SG_LC_KEY_LEN, &e, NULL), 0);
	a = owner(f, k);
	assert_true(a >= 0);
	b = (a + 1) % NNODES;
	migrate(f, k, a, b, 1);		/* the old owner answers ASK */
	assert_int_equal(sg_store_lookup(f->s, k, SG_LC_KEY_LEN, &e, NULL), 0);
	assert_string_equal(e.cluster_id, "M");
	assert_int_equal(sg_store_put(f->s, k, SG_LC_KEY_LEN, "N", 1, NULL), 0);
	migrate(f, k, a, b, 2);		/* now MOVED */
	assert_int_equal(sg_store_lookup(f->s, k, SG_LC_KEY_LEN, &e, NULL), 0);
	assert_string_equal(e.cluster_id, "N");
	assert_int_equal(owner(f, k), b);
}

static void
count_cb(sg_store_lookup_req *req, void *arg)
{
	struct fx *f = arg;

	(void)req;
	f->calls++;
}

static void
run_ms(struct fx *f, uint64_t ms)
{
	uint64_t t0 = sg_store_mono_ns();

	while (sg_store_mono_ns() - t0 < ms * 1000000ULL)
		event_base_loop(f->base, EVLOOP_ONCE | EVLOOP_NONBLOCK);
}

static int
loop_lookup(struct fx *f, const char *k)
{
	uint64_t t0 = sg_store_mono_ns();
	int rc;

	f->calls = 0;
	rc = sg_store_lookup_start(f->s, &f->req, k, SG_LC_KEY_LEN,
	    sg_store_mono_ns() + 1000000000ULL, count_cb, f);
	if (rc == 0)
		return f->req.rc;
	while (f->calls == 0 && sg_store_mono_ns() - t0 < 5000000000ULL)
		event_base_loop(f->base, EVLOOP_ONCE);
	assert_int_equal(f->calls, 1);
	return f->req.rc;
}

static void
test_cluster_on_a_loop_follows_a_slot_migration(void **state)
{
	struct fx *f = *state;
	sg_store_commit rec[SG_STORE_EVENT_RING];
	uint64_t committed = 0;
	const char *k;
	int i, a, b, tries;
	size_t n, j;

	rs_skip_absent();
	start_cluster(f);
	assert_non_null(f->base = event_base_new());
	f->o.event_base = f->base;
	f->o.events = true;
	assert_int_equal(sg_store_open(&f->s, &f->o, NULL), 0);
	for (tries = 0; tries < 100 && !sg_store_connected(f->s); tries++)
		run_ms(f, 50);
	assert_true(sg_store_connected(f->s));
	/* Every node connected: a put to each slot's node succeeds. */
	for (i = 0; i < NKEYS; i++) {
		int rc;

		for (tries = 0; tries < 100 && (rc = sg_store_put(f->s,
		    f->keys[i], SG_LC_KEY_LEN, "L", 1, NULL)) == ENOTCONN;
		    tries++)
			run_ms(f, 20);
		assert_int_equal(rc, 0);
	}
	for (tries = 0; tries < 500 && committed < NKEYS; tries++) {
		run_ms(f, 10);
		n = sg_store_drain(f->s, rec, SG_STORE_EVENT_RING);
		for (j = 0; j < n; j++) {
			assert_int_equal(rec[j].rc, 0);
			committed = rec[j].committed;
		}
	}
	assert_true(committed == NKEYS);
	for (i = 0; i < NNODES; i++)
		assert_true(dbsize(f->n[i].port) > NKEYS / 10);
	for (i = 0; i < NKEYS; i += 10)
		assert_int_equal(loop_lookup(f, f->keys[i]), 0);
	/* Migrate one key's slot between lookups. */
	k = f->keys[11];
	a = owner(f, k);
	b = (a + 2) % NNODES;
	migrate(f, k, a, b, 1);
	assert_int_equal(loop_lookup(f, k), 0);		/* ASK */
	assert_string_equal(f->req.entry.cluster_id, "L");
	migrate(f, k, a, b, 2);
	assert_int_equal(loop_lookup(f, k), 0);		/* MOVED */
	assert_int_equal(loop_lookup(f, k), 0);		/* the new map */
	assert_int_equal(sg_store_put(f->s, k, SG_LC_KEY_LEN, "Q", 1, NULL), 0);
	run_ms(f, 100);
	assert_int_equal(loop_lookup(f, k), 0);
	assert_string_equal(f->req.entry.cluster_id, "Q");
	assert_int_equal(owner(f, k), b);
	for (i = 0; i < NKEYS; i += 7)
		assert_int_equal(loop_lookup(f, f->keys[i]), 0);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_cluster_keys_spread_over_every_primary),
		T(test_cluster_blocking_follows_ask_and_moved),
		T(test_cluster_on_a_loop_follows_a_slot_migration),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
