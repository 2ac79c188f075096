/*
 * test_store_redis.c — sg_store_redis.c, the Redis backend for tools
 * (blocking hiredis), against a real redis-server started by the test on
 * a free loopback port: get, put, TTL (Redis's own PX expiry and the
 * age rule), del, list/dump order, stats, compact, load-style writes with
 * an old write time, AUTH and SELECT, the value as redis-cli sees it, and
 * the errors of a server that is absent or refuses the password.
 * Skipped when redis-server is not installed.
 */
#include "sg_test.h"

#include <stdio.h>
#include <stdlib.h>

#include "sg_store.h"
#include "sg_store_redis.h"
#include "test_store_redis.h"

struct fx {
	struct rsrv	 r;
	char		 url[128];
	sg_store_opts	 o;
	sg_store	*s;
	uint64_t	 now;		/* the store's clock, ms */
	uint64_t	 commits, failures;
};

static uint64_t
fx_clock(void *arg)
{
	return ((struct fx *)arg)->now;
}

static void
fx_commit(const sg_store_commit *c, void *arg)
{
	struct fx *f = arg;

	if (c->rc == 0)
		f->commits += c->ops;
	else
		f->failures += c->ops;
}

static int
setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	f->now = 1764590000000ULL;
	sg_store_opts_init(&f->o);
	f->o.clock = fx_clock;
	f->o.clock_arg = f;
	f->o.on_commit = fx_commit;
	f->o.commit_arg = f;
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fx *f = *state;

	sg_store_close(f->s);
	rs_stop(&f->r);
	free(f);
	return 0;
}

/* Start a server (extra arguments NULL-terminated) and open the store. */
static void
fx_open(struct fx *f, const char *userinfo, int db)
{
	sg_error e;

	snprintf(f->url, sizeof(f->url), "redis://%s127.0.0.1:%d/%d",
	    userinfo, f->r.port, db);
	f->o.path = f->url;
	sg_error_clear(&e);
	if (sg_store_open(&f->s, &f->o, &e) != 0)
		fail_msg("open %s: %s", f->url, e.text);
}

static void
key_of(char k[SG_LC_KEY_LEN + 1], const char *aff)
{
	assert_int_equal(sg_lc_key(k, "rk", 2, "model", 5, aff, strlen(aff)),
	    0);
}

static void
test_put_get_del_round_trip(void **state)
{
	struct fx *f = *state;
	char k[SG_LC_KEY_LEN + 1], buf[512];
	sg_store_entry e;

	rs_skip_absent();
	rs_start(&f->r, NULL);
	fx_open(f, "", 0);
	key_of(k, "conv-1");
	assert_int_equal(sg_store_lookup(f->s, k, SG_LC_KEY_LEN, &e, NULL),
	    SG_ENOTFOUND);
	assert_int_equal(sg_store_put(f->s, k, SG_LC_KEY_LEN, "B", 1, NULL), 0);
	assert_int_equal(sg_store_flush(f->s, NULL), 0);
	assert_true(f->commits == 1);
	f->now += 1234;
	assert_int_equal(sg_store_lookup(f->s, k, SG_LC_KEY_LEN, &e, NULL), 0);
	assert_string_equal(e.cluster_id, "B");
	assert_int_equal(e.cluster_id_len, 1);
	assert_string_equal(e.key, k);
	assert_true(e.written_ms == 1764590000000ULL);
	assert_true(e.age_ms == 1234);
	/* The value as any Redis client sees it. */
	assert_string_equal(rs_str(buf, sizeof(buf), f->r.port, "GET %s", k),
	    "1764590000000:B");
	assert_int_equal(sg_store_del(f->s, k, SG_LC_KEY_LEN, NULL), 0);
	assert_int_equal(sg_store_lookup(f->s, k, SG_LC_KEY_LEN, &e, NULL),
	    SG_ENOTFOUND);
	assert_true(sg_store_connected(f->s));
}

static void
test_ttl_is_px_and_the_age_rule(void **state)
{
	struct fx *f = *state;
	char k[SG_LC_KEY_LEN + 1], k2[SG_LC_KEY_LEN + 1], buf[64];
	sg_store_entry e;
	long long pttl;

	rs_skip_absent();
	rs_start(&f->r, NULL);
	f->o.ttl_ms = 60000;
	fx_open(f, "", 0);
	key_of(k, "conv-ttl");
	assert_int_equal(sg_store_put(f->s, k, SG_LC_KEY_LEN, "A", 1, NULL), 0);
	pttl = strtoll(rs_str(buf, sizeof(buf), f->r.port, "PTTL %s", k), NULL,
	    10);
	assert_true(pttl > 59000 && pttl <= 60000);
	/* Past the TTL by the store's clock: a miss, whatever Redis says. */
	f->now += 60000;
	assert_int_equal(sg_store_lookup(f->s, k, SG_LC_KEY_LEN, &e, NULL),
	    SG_ENOTFOUND);
	f->now -= 1;
	assert_int_equal(sg_store_lookup(f->s, k, SG_LC_KEY_LEN, &e, NULL), 0);
	/* A write with an old time gets only the time left ... */
	key_of(k2, "conv-old");
	assert_int_equal(sg_store_put_at(f->s, k2, SG_LC_KEY_LEN, "C", 1,
	    f->now - 59000, NULL), 0);
	pttl = strtoll(rs_str(buf, sizeof(buf), f->r.port, "PTTL %s", k2),
	    NULL, 10);
	assert_true(pttl > 0 && pttl <= 1000);
	/* ... and one already expired is not stored at all. */
	assert_int_equal(sg_store_put_at(f->s, k2, SG_LC_KEY_LEN, "C", 1,
	    f->now - 60000, NULL), 0);
	assert_string_equal(rs_str(buf, sizeof(buf), f->r.port, "EXISTS %s",
	    k2), "0");
	/* Redis expires by itself: a 1 ms TTL is gone shortly after. */
	sg_store_close(f->s);
	f->s = NULL;
	f->o.ttl_ms = 1;
	f->o.clock = NULL;
	fx_open(f, "", 0);
	assert_int_equal(sg_store_put(f->s, k, SG_LC_KEY_LEN, "A", 1, NULL), 0);
	rs_sleep_ms(20);
	assert_string_equal(rs_str(buf, sizeof(buf), f->r.port, "EXISTS %s",
	    k), "0");
}

struct walk {
	char	ids[8][8];
	size_t	n;
};

static int
walk_fn(const sg_store_entry *e, void *arg)
{
	struct walk *w = arg;

	if (w->n < 8 && e->cluster_id_len < sizeof(w->ids[0]))
		memcpy(w->ids[w->n++], e->cluster_id, e->cluster_id_len + 1);
	return 0;
}

static void
test_list_is_oldest_first_and_skips_expired_and_foreign_keys(void **state)
{
	struct fx *f = *state;
	char k[SG_LC_KEY_LEN + 1];
	const char *ids[] = { "c3", "c1", "c2" };
	uint64_t at[] = { 3000, 1000, 2000 };
	struct walk w;
	sg_store_stats st;
	sg_store_compact_result cr;
	size_t i;

	rs_skip_absent();
	rs_start(&f->r, NULL);
	f->o.ttl_ms = 10000;
	fx_open(f, "", 5);
	for (i = 0; i < 3; i++) {
		key_of(k, ids[i]);
		assert_int_equal(sg_store_put_at(f->s, k, SG_LC_KEY_LEN, ids[i],
		    2, f->now - 7000 + at[i], NULL), 0);
	}
	/* Not ours: another key, a malformed value under an lc:v1: key. */
	{
		redisReply *r;
		struct timeval tv = { 1, 0 };
		redisContext *c = redisConnectWithTimeout("127.0.0.1",
		    f->r.port, tv);

		assert_non_null(c);
		r = redisCommand(c, "SELECT 5");
		freeReplyObject(r);
		r = redisCommand(c, "SET other:key x");
		freeReplyObject(r);
		key_of(k, "garbage");
		r = redisCommand(c, "SET %s nonsense", k);
		freeReplyObject(r);
		redisFree(c);
	}
	memset(&w, 0, sizeof(w));
	assert_int_equal(sg_store_iterate(f->s, false, walk_fn, &w, NULL), 0);
	assert_int_equal(w.n, 3);
	assert_string_equal(w.ids[0], "c1");
	assert_string_equal(w.ids[1], "c2");
	assert_string_equal(w.ids[2], "c3");
	/* c1 is 6 s old; at +4.5 s it is past the 10 s TTL. */
	f->now += 4500;
	memset(&w, 0, sizeof(w));
	assert_int_equal(sg_store_iterate(f->s, false, walk_fn, &w, NULL), 0);
	assert_int_equal(w.n, 2);
	memset(&w, 0, sizeof(w));
	assert_int_equal(sg_store_iterate(f->s, true, walk_fn, &w, NULL), 0);
	assert_int_equal(w.n, 3);
	assert_int_equal(sg_store_stats_get(f->s, &st, NULL), 0);
	assert_string_equal(st.backend, "redis");
	assert_true(st.entries == 3);
	assert_true(st.expired == 1);
	assert_true(st.oldest_age_ms == 10500);
	assert_true(st.mem_used > 0);
	assert_string_equal(st.mem_policy, "noeviction");
	assert_int_equal(st.nodes, 1);
	assert_int_equal(sg_store_compact(f->s, &cr, NULL), 0);
	assert_true(cr.entries == 2);
	assert_true(cr.expired == 0 && !cr.swapped);
}

static void
test_auth_and_select(void **state)
{
	struct fx *f = *state;
	char k[SG_LC_KEY_LEN + 1];
	sg_store *t = NULL;
	sg_store_opts o;
	sg_error e;

	rs_skip_absent();
	rs_start(&f->r, "--requirepass", "pa:ss", NULL);
	/* Wrong password: EACCES, and the message never holds it. */
	o = f->o;
	snprintf(f->url, sizeof(f->url), "redis://:wrong@127.0.0.1:%d/0",
	    f->r.port);
	o.path = f->url;
	sg_error_clear(&e);
	assert_int_equal(sg_store_open(&t, &o, &e), EACCES);
	assert_null(strstr(e.text, "wrong"));
	assert_null(t);
	fx_open(f, "default:pa%3Ass@", 3);
	key_of(k, "conv-auth");
	assert_int_equal(sg_store_put(f->s, k, SG_LC_KEY_LEN, "Z", 1, NULL), 0);
	{
		struct timeval tv = { 1, 0 };
		redisContext *c = redisConnectWithTimeout("127.0.0.1",
		    f->r.port, tv);
		redisReply *r;

		r = redisCommand(c, "AUTH pa:ss");
		freeReplyObject(r);
		r = redisCommand(c, "EXISTS %s", k);
		assert_int_equal(r->integer, 0);	/* not in db 0 */
		freeReplyObject(r);
		r = redisCommand(c, "SELECT 3");
		freeReplyObject(r);
		r = redisCommand(c, "EXISTS %s", k);
		assert_int_equal(r->integer, 1);
		freeReplyObject(r);
		redisFree(c);
	}
}

static void
test_unreachable_server_is_a_network_error(void **state)
{
	struct fx *f = *state;
	sg_error e;

	rs_skip_absent();
	snprintf(f->url, sizeof(f->url), "redis://127.0.0.1:%d/0",
	    rs_free_port());
	f->o.path = f->url;
	sg_error_clear(&e);
	assert_int_equal(sg_store_open(&f->s, &f->o, &e), ECONNREFUSED);
	assert_non_null(strstr(e.text, "127.0.0.1"));
	assert_null(f->s);
}

static void
test_a_restarted_server_is_reconnected_to(void **state)
{
	struct fx *f = *state;
	char k[SG_LC_KEY_LEN + 1];
	sg_store_entry e;
	int port;

	rs_skip_absent();
	rs_start(&f->r, NULL);
	fx_open(f, "", 0);
	key_of(k, "conv-restart");
	port = f->r.port;
	rs_kill(&f->r);
	assert_true(sg_store_lookup(f->s, k, SG_LC_KEY_LEN, &e, NULL) > 0);
	f->r.port = port;
	rs_start(&f->r, NULL);
	assert_int_equal(sg_store_put(f->s, k, SG_LC_KEY_LEN, "R", 1, NULL), 0);
	assert_int_equal(sg_store_lookup(f->s, k, SG_LC_KEY_LEN, &e, NULL), 0);
	assert_string_equal(e.cluster_id, "R");
}

/*
 * The digest entry points on a backend that stores the text: the front
 * spells the key, so a write by digest is the same Redis key and value as
 * a write by text, and a lookup by digest finds a write by text.
 */
static void
test_digest_entry_points_write_the_text_key(void **state)
{
	struct fx *f = *state;
	char k[SG_LC_KEY_LEN + 1], buf[512];
	unsigned char d[SG_LC_DIGEST_LEN];
	sg_store_lookup_req req;
	uint64_t seq = 0;

	rs_skip_absent();
	rs_start(&f->r, NULL);
	fx_open(f, "", 0);
	key_of(k, "conv-d");
	assert_int_equal(sg_lc_key_digest(d, "rk", 2, "model", 5, "conv-d", 6),
	    0);
	assert_int_equal(sg_store_put_digest_seq(f->s, d, "C", 1, &seq, NULL),
	    0);
	assert_int_equal(sg_store_flush(f->s, NULL), 0);
	assert_string_equal(rs_str(buf, sizeof(buf), f->r.port, "GET %s", k),
	    "1764590000000:C");
	assert_int_equal(sg_store_put(f->s, k, SG_LC_KEY_LEN, "D", 1, NULL), 0);
	assert_int_equal(sg_store_flush(f->s, NULL), 0);
	assert_int_equal(sg_store_lookup_start_digest(f->s, &req, d,
	    sg_store_mono_ns() + 2000000000ULL, NULL, NULL), 0);
	assert_int_equal(req.rc, 0);
	assert_string_equal(req.entry.cluster_id, "D");
	assert_string_equal(req.entry.key, k);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_put_get_del_round_trip),
		T(test_digest_entry_points_write_the_text_key),
		T(test_ttl_is_px_and_the_age_rule),
		T(test_list_is_oldest_first_and_skips_expired_and_foreign_keys),
		T(test_auth_and_select),
		T(test_unreachable_server_is_a_network_error),
		T(test_a_restarted_server_is_reconnected_to),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
