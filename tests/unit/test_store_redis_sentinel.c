/*
 * test_store_redis_sentinel.c — the Redis store through Sentinel
 * (redis+sentinel://), against real processes: a primary, a replica and
 * three sentinels (quorum 2) on free loopback ports.  The store finds the
 * primary through the sentinels; the primary is killed; after the
 * failover the store, blocking (tools) and on a libevent loop (sg-proxy),
 * writes to and reads from the new primary, and on the loop no call ever
 * blocked meanwhile: lookups failed fast or timed out.  Skipped without
 * redis-server.
 */
#include "sg_test.h"

#include <stdio.h>
#include <stdlib.h>

#include <event2/event.h>

#include "sg_store.h"
#include "test_store_redis.h"

#define NSENT	3
#define MASTER	"sgmaster"

struct fx {
	struct rsrv		 prim, repl, sent[NSENT];
	char			 url[256];
	struct event_base	*base;
	sg_store_opts		 o;
	sg_store		*s;
	size_t			 calls;
	sg_store_lookup_req	 req;
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
	for (i = 0; i < NSENT; i++)
		rs_stop(&f->sent[i]);
	rs_stop(&f->prim);
	rs_stop(&f->repl);
	free(f);
	return 0;
}

static bool
info_has(int port, const char *section, const char *needle)
{
	redisReply *r = rs_cmd(port, "INFO %s", section);
	bool ok = r != NULL && r->type == REDIS_REPLY_STRING &&
	    strstr(r->str, needle) != NULL;

	if (r != NULL)
		freeReplyObject(r);
	return ok;
}

/* The port the sentinel names as primary, or 0. */
static int
named_primary(int sport)
{
	redisReply *r = rs_cmd(sport, "SENTINEL get-master-addr-by-name %s",
	    MASTER);
	int port = 0;

	if (r != NULL && r->type == REDIS_REPLY_ARRAY && r->elements == 2)
		port = (int)strtol(r->element[1]->str, NULL, 10);
	if (r != NULL)
		freeReplyObject(r);
	return port;
}

/* Primary, replica in sync, three sentinels that know both. */
static void
start_all(struct fx *f)
{
	char conf[512], rof[32];
	const char *sent_args[] = { "--sentinel", NULL };
	int i, tries;
	size_t n;

	rs_start(&f->prim, NULL);
	snprintf(rof, sizeof(rof), "%d", f->prim.port);
	rs_start(&f->repl, "--replicaof", "127.0.0.1", rof, NULL);
	for (tries = 0; tries < 500 && !info_has(f->prim.port, "replication",
	    "connected_slaves:1"); tries++)
		rs_sleep_ms(10);
	assert_true(info_has(f->prim.port, "replication",
	    "connected_slaves:1"));
	snprintf(conf, sizeof(conf),
	    "sentinel monitor %s 127.0.0.1 %d 2\n"
	    "sentinel down-after-milliseconds %s 400\n"
	    "sentinel failover-timeout %s 3000\n",
	    MASTER, f->prim.port, MASTER, MASTER);
	for (i = 0; i < NSENT; i++)
		rs_startv(&f->sent[i], conf, sent_args);
	/* Every sentinel knows the replica and the other sentinels. */
	for (i = 0; i < NSENT; i++) {
		for (tries = 0; tries < 1000; tries++) {
			redisReply *r = rs_cmd(f->sent[i].port,
			    "SENTINEL master %s", MASTER);
			bool ok = false;

			for (n = 0; r != NULL && r->type == REDIS_REPLY_ARRAY &&
			    n + 1 < r->elements; n += 2)
				if (strcmp(r->element[n]->str,
				    "num-other-sentinels") == 0)
					ok = strtol(r->element[n + 1]->str,
					    NULL, 10) == NSENT - 1;
			if (r != NULL)
				freeReplyObject(r);
			if (ok && info_has(f->sent[i].port, "sentinel",
			    "slaves=1"))
				break;
			rs_sleep_ms(20);
		}
		assert_true(tries < 1000);
	}
	n = (size_t)snprintf(f->url, sizeof(f->url), "redis+sentinel://");
	for (i = 0; i < NSENT; i++)
		n += (size_t)snprintf(f->url + n, sizeof(f->url) - n,
		    "%s127.0.0.1:%d", i ? "," : "", f->sent[i].port);
	snprintf(f->url + n, sizeof(f->url) - n, "/%s/0", MASTER);
	f->o.path = f->url;
}

/* Kill the primary; wait (bounded) until the sentinels name the replica. */
static void
fail_over(struct fx *f)
{
	redisReply *r;
	int tries;

	char a[32], b[32];

	/* The replica has everything (WAIT, then the key counts agree). */
	if ((r = rs_cmd(f->prim.port, "WAIT 1 800")) != NULL)
		freeReplyObject(r);
	for (tries = 0; tries < 300 && strcmp(rs_str(a, sizeof(a),
	    f->prim.port, "DBSIZE"), rs_str(b, sizeof(b), f->repl.port,
	    "DBSIZE")) != 0; tries++)
		rs_sleep_ms(10);
	assert_string_equal(a, b);
	rs_kill(&f->prim);
	for (tries = 0; tries < 300 &&
	    named_primary(f->sent[0].port) != f->repl.port; tries++)
		rs_sleep_ms(100);
	assert_int_equal(named_primary(f->sent[0].port), f->repl.port);
	for (tries = 0; tries < 300 && !info_has(f->repl.port, "replication",
	    "role:master"); tries++)
		rs_sleep_ms(20);
}

static void
key_of(char k[SG_LC_KEY_LEN + 1], const char *aff)
{
	assert_int_equal(sg_lc_key(k, "rk", 2, "model", 5, aff, strlen(aff)),
	    0);
}

static void
test_sentinel_blocking_follows_a_failover(void **state)
{
	struct fx *f = *state;
	char k[SG_LC_KEY_LEN + 1], k2[SG_LC_KEY_LEN + 1], buf[300];
	sg_store_entry e;
	sg_error er;
	int rc, tries;

	rs_skip_absent();
	start_all(f);
	sg_error_clear(&er);
	if (sg_store_open(&f->s, &f->o, &er) != 0)
		fail_msg("open: %s", er.text);
	key_of(k, "conv-before");
	assert_int_equal(sg_store_put(f->s, k, SG_LC_KEY_LEN, "A", 1, NULL), 0);
	assert_non_null(strstr(rs_str(buf, sizeof(buf), f->prim.port,
	    "GET %s", k), ":A"));
	fail_over(f);
	/* The first command after the kill reconnects through the sentinels. */
	for (tries = 0; tries < 50 && (rc = sg_store_lookup(f->s, k,
	    SG_LC_KEY_LEN, &e, NULL)) != 0; tries++)
		rs_sleep_ms(100);
	assert_int_equal(rc, 0);
	assert_string_equal(e.cluster_id, "A");
	key_of(k2, "conv-after");
	assert_int_equal(sg_store_put(f->s, k2, SG_LC_KEY_LEN, "B", 1, NULL),
	    0);
	assert_non_null(strstr(rs_str(buf, sizeof(buf), f->repl.port,
	    "GET %s", k2), ":B"));
}

static void
count_cb(sg_store_lookup_req *req, void *arg)
{
	struct fx *f = arg;

	(void)req;
	f->calls++;
}

/* One lookup on the loop, bounded: its rc. */
static int
loop_lookup(struct fx *f, const char *k)
{
	uint64_t t0 = sg_store_mono_ns();
	int rc;

	f->calls = 0;
	rc = sg_store_lookup_start(f->s, &f->req, k, SG_LC_KEY_LEN,
	    sg_store_mono_ns() + 50000000ULL, count_cb, f);
	if (rc == 0)
		return f->req.rc;
	while (f->calls == 0 && sg_store_mono_ns() - t0 < 5000000000ULL)
		event_base_loop(f->base, EVLOOP_ONCE);
	assert_int_equal(f->calls, 1);
	return f->req.rc;
}

static void
run_ms(struct fx *f, uint64_t ms)
{
	uint64_t t0 = sg_store_mono_ns();

	while (sg_store_mono_ns() - t0 < ms * 1000000ULL)
		event_base_loop(f->base, EVLOOP_ONCE);
}

static void
test_sentinel_on_a_loop_follows_a_failover(void **state)
{
	struct fx *f = *state;
	char k[SG_LC_KEY_LEN + 1], k2[SG_LC_KEY_LEN + 1], buf[300];
	sg_store_commit rec[16];
	int tries, rc;
	size_t fails = 0;

	rs_skip_absent();
	start_all(f);
	assert_non_null(f->base = event_base_new());
	f->o.event_base = f->base;
	f->o.events = true;
	assert_int_equal(sg_store_open(&f->s, &f->o, NULL), 0);
	for (tries = 0; tries < 100 && !sg_store_connected(f->s); tries++)
		run_ms(f, 50);
	assert_true(sg_store_connected(f->s));
	key_of(k, "conv-loop-before");
	assert_int_equal(sg_store_put(f->s, k, SG_LC_KEY_LEN, "A", 1, NULL), 0);
	assert_int_equal(loop_lookup(f, k), 0);
	fail_over(f);
	/* Lookups during and after: never block, end in a hit. */
	for (tries = 0; tries < 200 && (rc = loop_lookup(f, k)) != 0;
	    tries++) {
		assert_true(rc == ENOTCONN || rc == ETIMEDOUT ||
		    rc == ECONNRESET || rc == EROFS);
		fails++;
		run_ms(f, 50);
	}
	assert_int_equal(rc, 0);
	assert_string_equal(f->req.entry.cluster_id, "A");
	key_of(k2, "conv-loop-after");
	assert_int_equal(sg_store_put(f->s, k2, SG_LC_KEY_LEN, "B", 1, NULL),
	    0);
	run_ms(f, 100);
	assert_true(sg_store_drain(f->s, rec, 16) >= 1);
	assert_non_null(strstr(rs_str(buf, sizeof(buf), f->repl.port,
	    "GET %s", k2), ":B"));
	assert_int_equal(loop_lookup(f, k2), 0);
	(void)fails;
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_sentinel_blocking_follows_a_failover),
		T(test_sentinel_on_a_loop_follows_a_failover),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
