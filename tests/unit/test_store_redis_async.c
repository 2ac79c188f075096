/*
 * test_store_redis_async.c — sg_store_redis_async.c, the Redis backend on
 * a libevent loop, against real redis-server processes: open never waits,
 * lookups answer through their callback (hit, miss), writes come back as
 * commit records through the eventfd, a thousand lookups pipelined on one
 * connection, the deadline timer under `kill -STOP` (ETIMEDOUT without any
 * sg_store_dispatch() call), the stalled connection dropped and lookups
 * failing at once meanwhile, reconnection after SIGCONT and after a
 * restart, cancellation, and closing with lookups in flight (no callback,
 * no leak under the sanitizer build).  Skipped without redis-server.
 */
#include "sg_test.h"

#include <stdio.h>
#include <stdlib.h>

#include <event2/event.h>

#include "sg_store.h"
#include "test_store_redis.h"

#define LOOKUPS	1000

struct fx {
	struct rsrv		 r;
	char			 url[128];
	struct event_base	*base;
	sg_store_opts		 o;
	sg_store		*s;
	size_t			 calls;
	sg_store_lookup_req	 reqs[LOOKUPS];
};

static int
setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	assert_non_null(f->base = event_base_new());
	sg_store_opts_init(&f->o);
	f->o.event_base = f->base;
	f->o.events = true;
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fx *f = *state;

	sg_store_close(f->s);
	event_base_free(f->base);
	rs_stop(&f->r);
	free(f);
	return 0;
}

static uint64_t
ms_since(uint64_t t0)
{
	return (sg_store_mono_ns() - t0) / 1000000;
}

/* Run the loop until pred(f) (pred NULL: for max_ms), at most max_ms. */
static bool
run_until(struct fx *f, bool (*pred)(struct fx *), uint64_t max_ms)
{
	uint64_t t0 = sg_store_mono_ns();

	while (ms_since(t0) < max_ms) {
		if (pred != NULL && pred(f))
			return true;
		event_base_loop(f->base, EVLOOP_ONCE);
	}
	return pred != NULL && pred(f);
}

static bool
is_connected(struct fx *f)
{
	return sg_store_connected(f->s);
}

static bool
is_down(struct fx *f)
{
	return !sg_store_connected(f->s);
}

static bool
all_called(struct fx *f)
{
	return f->calls == LOOKUPS;
}

static bool
one_called(struct fx *f)
{
	return f->calls >= 1;
}

static void
fx_open(struct fx *f)
{
	sg_error e;

	snprintf(f->url, sizeof(f->url), "redis://127.0.0.1:%d/1", f->r.port);
	f->o.path = f->url;
	sg_error_clear(&e);
	if (sg_store_open(&f->s, &f->o, &e) != 0)
		fail_msg("open: %s", e.text);
	assert_true(run_until(f, is_connected, 5000));
}

static void
key_of(char k[SG_LC_KEY_LEN + 1], const char *aff)
{
	assert_int_equal(sg_lc_key(k, "rk", 2, "model", 5, aff, strlen(aff)),
	    0);
}

static void
count_cb(sg_store_lookup_req *req, void *arg)
{
	struct fx *f = arg;

	(void)req;
	f->calls++;
}

/* One lookup through the loop; returns its rc. */
static int
lookup(struct fx *f, const char *k, uint64_t timeout_ms,
    sg_store_lookup_req *req)
{
	int rc;

	f->calls = 0;
	rc = sg_store_lookup_start(f->s, req, k, SG_LC_KEY_LEN,
	    sg_store_mono_ns() + timeout_ms * 1000000ULL, count_cb, f);
	if (rc == 0)
		return req->rc;
	assert_int_equal(rc, EINPROGRESS);
	assert_int_equal(f->calls, 0);	/* never from inside the call */
	assert_true(run_until(f, one_called, 5000));
	assert_int_equal(f->calls, 1);
	return req->rc;
}

static bool
has_record(struct fx *f)
{
	uint64_t v;
	ssize_t n;

	/* Readable eventfd: peek by reading and writing back. */
	n = read(sg_store_event_fd(f->s), &v, sizeof(v));
	if (n == sizeof(v)) {
		n = write(sg_store_event_fd(f->s), &v, sizeof(v));
		return true;
	}
	return false;
}

static void
test_async_open_never_waits_then_connects_on_the_loop(void **state)
{
	struct fx *f = *state;

	rs_skip_absent();
	rs_start(&f->r, NULL);
	snprintf(f->url, sizeof(f->url), "redis://127.0.0.1:%d/1", f->r.port);
	f->o.path = f->url;
	assert_int_equal(sg_store_open(&f->s, &f->o, NULL), 0);
	assert_false(sg_store_connected(f->s));	/* nothing ran yet */
	assert_true(run_until(f, is_connected, 5000));
}

static void
test_async_lookup_hit_miss_and_write_commit_records(void **state)
{
	struct fx *f = *state;
	char k[SG_LC_KEY_LEN + 1], k2[SG_LC_KEY_LEN + 1];
	sg_store_commit rec[4];
	uint64_t seq = 0;

	rs_skip_absent();
	rs_start(&f->r, NULL);
	fx_open(f);
	key_of(k, "conv-a");
	key_of(k2, "conv-absent");
	assert_int_equal(sg_store_put_seq(f->s, k, SG_LC_KEY_LEN, "B", 1, &seq,
	    NULL), 0);
	assert_true(seq == 1);
	assert_int_equal(sg_store_flush(f->s, NULL), EINPROGRESS);
	assert_true(run_until(f, has_record, 5000));
	assert_int_equal(sg_store_drain(f->s, rec, 4), 1);
	assert_true(rec[0].ops == 1 && rec[0].ops_done == 1 &&
	    rec[0].committed == 1);
	assert_int_equal(rec[0].rc, 0);
	assert_int_equal(sg_store_flush(f->s, NULL), 0);
	assert_int_equal(lookup(f, k, 1000, &f->reqs[0]), 0);
	assert_string_equal(f->reqs[0].entry.cluster_id, "B");
	assert_string_equal(f->reqs[0].entry.key, k);
	assert_int_equal(lookup(f, k2, 1000, &f->reqs[0]), SG_ENOTFOUND);
	/* Deletion: a record too, then a miss. */
	assert_int_equal(sg_store_del(f->s, k, SG_LC_KEY_LEN, NULL), 0);
	assert_true(run_until(f, has_record, 5000));
	assert_int_equal(sg_store_drain(f->s, rec, 4), 1);
	assert_true(rec[0].ops_done == 2 && rec[0].rc == 0);
	assert_int_equal(lookup(f, k, 1000, &f->reqs[0]), SG_ENOTFOUND);
}

static void
test_async_thousand_lookups_pipelined(void **state)
{
	struct fx *f = *state;
	char k[SG_LC_KEY_LEN + 1], aff[32], want[16];
	sg_store_commit rec[SG_STORE_EVENT_RING];
	uint64_t committed = 0;
	size_t i, n;

	rs_skip_absent();
	rs_start(&f->r, NULL);
	fx_open(f);
	for (i = 0; i < LOOKUPS; i += 2) {
		snprintf(aff, sizeof(aff), "conv-%zu", i);
		snprintf(want, sizeof(want), "c%zu", i);
		key_of(k, aff);
		assert_int_equal(sg_store_put(f->s, k, SG_LC_KEY_LEN, want,
		    strlen(want), NULL), 0);
	}
	while (committed < LOOKUPS / 2) {
		assert_true(run_until(f, has_record, 5000));
		n = sg_store_drain(f->s, rec, SG_STORE_EVENT_RING);
		for (i = 0; i < n; i++) {
			assert_int_equal(rec[i].rc, 0);
			committed = rec[i].committed;
		}
	}
	f->calls = 0;
	for (i = 0; i < LOOKUPS; i++) {
		snprintf(aff, sizeof(aff), "conv-%zu", i);
		key_of(k, aff);
		assert_int_equal(sg_store_lookup_start(f->s, &f->reqs[i], k,
		    SG_LC_KEY_LEN, sg_store_mono_ns() + 5000000000ULL,
		    count_cb, f), EINPROGRESS);
	}
	assert_true(run_until(f, all_called, 10000));
	for (i = 0; i < LOOKUPS; i++) {
		if (i % 2 == 1) {
			assert_int_equal(f->reqs[i].rc, SG_ENOTFOUND);
			continue;
		}
		snprintf(want, sizeof(want), "c%zu", i);
		assert_int_equal(f->reqs[i].rc, 0);
		assert_string_equal(f->reqs[i].entry.cluster_id, want);
	}
}

static void
test_async_lookup_times_out_under_kill_stop_then_hits_again(void **state)
{
	struct fx *f = *state;
	char k[SG_LC_KEY_LEN + 1];
	uint64_t t0;

	rs_skip_absent();
	rs_start(&f->r, NULL);
	fx_open(f);
	key_of(k, "conv-stop");
	assert_int_equal(sg_store_put(f->s, k, SG_LC_KEY_LEN, "B", 1, NULL), 0);
	assert_true(run_until(f, has_record, 5000));
	assert_int_equal(kill(f->r.pid, SIGSTOP), 0);
	/* The backend's own timer answers: no sg_store_dispatch() here. */
	t0 = sg_store_mono_ns();
	assert_int_equal(lookup(f, k, 20, &f->reqs[0]), ETIMEDOUT);
	assert_true(ms_since(t0) >= 20);
	assert_false(f->reqs[0].pending);
	/* A stalled connection is dropped; lookups then fail at once. */
	assert_true(run_until(f, is_down, 5000));
	assert_int_equal(sg_store_lookup_start(f->s, &f->reqs[0], k,
	    SG_LC_KEY_LEN, sg_store_mono_ns() + 20000000ULL, count_cb, f), 0);
	assert_int_equal(f->reqs[0].rc, ENOTCONN);
	assert_int_equal(sg_store_put(f->s, k, SG_LC_KEY_LEN, "B", 1, NULL),
	    ENOTCONN);
	assert_int_equal(kill(f->r.pid, SIGCONT), 0);
	assert_true(run_until(f, is_connected, 10000));
	assert_int_equal(lookup(f, k, 1000, &f->reqs[0]), 0);
	assert_string_equal(f->reqs[0].entry.cluster_id, "B");
}

static void
test_async_reconnects_after_restart(void **state)
{
	struct fx *f = *state;
	char k[SG_LC_KEY_LEN + 1];
	sg_store_commit rec[8];
	int port, i;

	rs_skip_absent();
	rs_start(&f->r, NULL);
	fx_open(f);
	key_of(k, "conv-restart");
	port = f->r.port;
	rs_kill(&f->r);
	assert_true(run_until(f, is_down, 5000));
	assert_int_equal(lookup(f, k, 20, &f->reqs[0]), ENOTCONN);
	/* Several backoff rounds against a closed port: no crash, no leak. */
	run_until(f, NULL, 600);
	assert_false(sg_store_connected(f->s));
	f->r.port = port;
	rs_start(&f->r, NULL);
	assert_true(run_until(f, is_connected, 10000));
	assert_int_equal(sg_store_put(f->s, k, SG_LC_KEY_LEN, "R", 1, NULL), 0);
	assert_true(run_until(f, has_record, 5000));
	for (i = 0; i < 8 && sg_store_drain(f->s, rec, 8) > 0; i++)
		;
	assert_int_equal(lookup(f, k, 1000, &f->reqs[0]), 0);
	assert_string_equal(f->reqs[0].entry.cluster_id, "R");
}

static void
test_async_cancelled_lookup_never_calls_back(void **state)
{
	struct fx *f = *state;
	char k[SG_LC_KEY_LEN + 1];

	rs_skip_absent();
	rs_start(&f->r, NULL);
	fx_open(f);
	key_of(k, "conv-cancel");
	f->calls = 0;
	assert_int_equal(sg_store_lookup_start(f->s, &f->reqs[0], k,
	    SG_LC_KEY_LEN, sg_store_mono_ns() + 50000000ULL, count_cb, f),
	    EINPROGRESS);
	sg_store_lookup_cancel(f->s, &f->reqs[0]);
	assert_false(f->reqs[0].pending);
	/* Also on a stopped server, past the deadline. */
	assert_int_equal(kill(f->r.pid, SIGSTOP), 0);
	assert_int_equal(sg_store_lookup_start(f->s, &f->reqs[1], k,
	    SG_LC_KEY_LEN, sg_store_mono_ns() + 20000000ULL, count_cb, f),
	    EINPROGRESS);
	sg_store_lookup_cancel(f->s, &f->reqs[1]);
	run_until(f, NULL, 200);
	assert_int_equal(f->calls, 0);
	assert_int_equal(kill(f->r.pid, SIGCONT), 0);
}

static void
test_async_dispatch_times_out_too(void **state)
{
	struct fx *f = *state;
	char k[SG_LC_KEY_LEN + 1];
	uint64_t dl, next = 0;

	rs_skip_absent();
	rs_start(&f->r, NULL);
	fx_open(f);
	key_of(k, "conv-dispatch");
	assert_int_equal(kill(f->r.pid, SIGSTOP), 0);
	f->calls = 0;
	dl = sg_store_mono_ns() + 20000000ULL;
	assert_int_equal(sg_store_lookup_start(f->s, &f->reqs[0], k,
	    SG_LC_KEY_LEN, dl, count_cb, f), EINPROGRESS);
	assert_true(sg_store_next_deadline(f->s, &next));
	assert_true(next == dl);
	assert_int_equal(sg_store_dispatch(f->s, dl - 1), 0);
	assert_int_equal(sg_store_dispatch(f->s, dl), 1);
	assert_int_equal(f->calls, 1);
	assert_int_equal(f->reqs[0].rc, ETIMEDOUT);
	/* The backend's timer, later, does not call again. */
	run_until(f, NULL, 100);
	assert_int_equal(f->calls, 1);
	assert_false(sg_store_next_deadline(f->s, &next));
	assert_int_equal(kill(f->r.pid, SIGCONT), 0);
}

static void
test_async_close_with_lookups_in_flight(void **state)
{
	struct fx *f = *state;
	char k[SG_LC_KEY_LEN + 1];
	size_t i;

	rs_skip_absent();
	rs_start(&f->r, NULL);
	fx_open(f);
	key_of(k, "conv-close");
	assert_int_equal(kill(f->r.pid, SIGSTOP), 0);
	f->calls = 0;
	for (i = 0; i < 16; i++)
		assert_int_equal(sg_store_lookup_start(f->s, &f->reqs[i], k,
		    SG_LC_KEY_LEN, sg_store_mono_ns() + 1000000000ULL,
		    count_cb, f), EINPROGRESS);
	assert_int_equal(sg_store_put(f->s, k, SG_LC_KEY_LEN, "B", 1, NULL), 0);
	sg_store_close(f->s);
	f->s = NULL;
	assert_int_equal(f->calls, 0);
	assert_int_equal(kill(f->r.pid, SIGCONT), 0);
}

static void
test_async_unreachable_server_fails_fast_and_open(void **state)
{
	struct fx *f = *state;
	char k[SG_LC_KEY_LEN + 1];

	rs_skip_absent();
	snprintf(f->url, sizeof(f->url), "redis://127.0.0.1:%d/0",
	    rs_free_port());
	f->o.path = f->url;
	assert_int_equal(sg_store_open(&f->s, &f->o, NULL), 0);
	key_of(k, "conv-none");
	run_until(f, NULL, 300);
	assert_false(sg_store_connected(f->s));
	assert_int_equal(sg_store_lookup_start(f->s, &f->reqs[0], k,
	    SG_LC_KEY_LEN, sg_store_mono_ns() + 20000000ULL, count_cb, f), 0);
	assert_int_equal(f->reqs[0].rc, ENOTCONN);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_async_open_never_waits_then_connects_on_the_loop),
		T(test_async_lookup_hit_miss_and_write_commit_records),
		T(test_async_thousand_lookups_pipelined),
		T(test_async_lookup_times_out_under_kill_stop_then_hits_again),
		T(test_async_reconnects_after_restart),
		T(test_async_cancelled_lookup_never_calls_back),
		T(test_async_dispatch_times_out_too),
		T(test_async_close_with_lookups_in_flight),
		T(test_async_unreachable_server_fails_fast_and_open),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
