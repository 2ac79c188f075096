/*
 * test_store_loop.c — the store's event-loop interface (sg_store.h, "from
 * an event loop"): lookups with a deadline that never wait — shown by
 * holding the environment lock on the store thread across a real map grow
 * and a real reopen after compaction (the sgi_store_set_hook test hook) —
 * and commit records on an eventfd, matched to writes by their
 * operation numbers.
 */
#include "sg_test.h"

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "sg_store_fixture.h"
#include "sg_store_internal.h"

#define MS	1000000ULL	/* ns */

/* The hook: hold the lock while `hold` names the phase, until released. */
static pthread_mutex_t hk_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hk_cv = PTHREAD_COND_INITIALIZER;
static const char *hk_phase;		/* phase to hold in, NULL: none */
static bool hk_held, hk_release;

static void
hook(void *arg, const char *what)
{
	(void)arg;
	pthread_mutex_lock(&hk_mu);
	if (hk_phase != NULL && strcmp(what, hk_phase) == 0 && !hk_release) {
		hk_held = true;
		pthread_cond_broadcast(&hk_cv);
		while (!hk_release)
			pthread_cond_wait(&hk_cv, &hk_mu);
		hk_held = false;
	}
	pthread_mutex_unlock(&hk_mu);
}

static const struct sgi_store_hook the_hook = { hook, NULL };

static void
hook_arm(sg_store *s, const char *phase)
{
	pthread_mutex_lock(&hk_mu);
	hk_phase = phase;
	hk_held = false;
	hk_release = false;
	pthread_mutex_unlock(&hk_mu);
	sgi_store_set_hook(s, &the_hook);
}

/* Wait (bounded: 10 s) until the store thread sits in the hook. */
static void
hook_wait_held(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 10;
	pthread_mutex_lock(&hk_mu);
	while (!hk_held)
		if (pthread_cond_timedwait(&hk_cv, &hk_mu, &ts) != 0)
			break;
	assert_true(hk_held);
	pthread_mutex_unlock(&hk_mu);
}

static void
hook_release(void)
{
	pthread_mutex_lock(&hk_mu);
	hk_release = true;
	pthread_cond_broadcast(&hk_cv);
	pthread_mutex_unlock(&hk_mu);
}

struct fx {
	char		 dir[64];
	sg_store_opts	 o;
	sg_store	*s;
};

static int
setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	sgt_tmpdir(f->dir, sizeof(f->dir), "loop");
	sgt_opts(&f->o, f->dir, NULL);
	f->o.events = true;
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fx *f = *state;

	hook_release();
	sg_store_close(f->s);
	sgt_rmtree(f->dir);
	free(f);
	return 0;
}

static void
fx_open(struct fx *f)
{
	sgt_open(&f->s, &f->o);
}

static void
key_of(char k[SG_LC_KEY_LEN + 1], int i)
{
	char aff[32];

	snprintf(aff, sizeof(aff), "session-%d", i);
	assert_int_equal(sg_lc_key(k, "tenant", 6, "model", 5, aff,
	    strlen(aff)), 0);
}

static int
put_i(sg_store *s, int i, const char *id, uint64_t *seq)
{
	char k[SG_LC_KEY_LEN + 1];

	key_of(k, i);
	return sg_store_put_seq(s, k, SG_LC_KEY_LEN, id, strlen(id), seq,
	    NULL);
}

/* Start a lookup of session i with a timeout; the call's duration too. */
static int
lookup_i(sg_store *s, int i, uint64_t timeout_ns, sg_store_lookup_req *req,
    uint64_t *took_ns)
{
	char k[SG_LC_KEY_LEN + 1];
	uint64_t t0 = sg_store_mono_ns();
	int rc;

	key_of(k, i);
	rc = sg_store_lookup_start(s, req, k, SG_LC_KEY_LEN, t0 + timeout_ns,
	    NULL, NULL);
	if (took_ns != NULL)
		*took_ns = sg_store_mono_ns() - t0;
	return rc;
}

static void
test_lookup_completes_at_once(void **state)
{
	struct fx *f = *state;
	sg_store_lookup_req req;

	(void)state;
	fx_open(f);
	assert_int_equal(put_i(f->s, 1, "B", NULL), 0);
	assert_int_equal(sg_store_flush(f->s, NULL), 0);
	assert_int_equal(lookup_i(f->s, 1, 20 * MS, &req, NULL), 0);
	assert_int_equal(req.rc, 0);
	assert_string_equal(req.entry.cluster_id, "B");
	assert_false(req.pending);
	assert_int_equal(lookup_i(f->s, 2, 20 * MS, &req, NULL), 0);
	assert_int_equal(req.rc, SG_ENOTFOUND);
	/* Nothing is ever left pending by the LMDB backend. */
	{
		uint64_t d;

		assert_false(sg_store_next_deadline(f->s, &d));
		assert_int_equal(sg_store_dispatch(f->s, sg_store_mono_ns()),
		    0);
	}
}

static void
test_past_deadline_and_bad_key(void **state)
{
	struct fx *f = *state;
	sg_store_lookup_req req;
	char k[SG_LC_KEY_LEN + 1];

	fx_open(f);
	key_of(k, 1);
	assert_int_equal(sg_store_lookup_start(f->s, &req, k, SG_LC_KEY_LEN,
	    sg_store_mono_ns() - 1, NULL, NULL), 0);
	assert_int_equal(req.rc, ETIMEDOUT);
	assert_int_equal(sg_store_lookup_start(f->s, &req, "lc:v1:zz", 8,
	    sg_store_mono_ns() + 20 * MS, NULL, NULL), SG_EINVAL);
	assert_int_equal(req.rc, SG_EINVAL);
	/* Cancelling a lookup that is not pending is harmless. */
	sg_store_lookup_cancel(f->s, &req);
	assert_int_equal(req.rc, SG_EINVAL);
}

/* Session i's key as text and as the digest its hex spells. */
static void
digest_of(unsigned char d[SG_LC_DIGEST_LEN], char k[SG_LC_KEY_LEN + 1], int i)
{
	char aff[32];

	snprintf(aff, sizeof(aff), "session-%d", i);
	assert_int_equal(sg_lc_key_digest(d, "tenant", 6, "model", 5, aff,
	    strlen(aff)), 0);
	key_of(k, i);
}

/*
 * The digest entry points are the text ones without the text: a write by
 * digest is found by the text key and the other way round, the entries
 * are the same (a hit's entry.key is the text, the store iterates the
 * same keys), a write's sequence numbers run on across both kinds, and a
 * NULL digest is SG_EINVAL.
 */
static void
test_digest_entry_points_are_the_text_ones(void **state)
{
	struct fx *f = *state;
	sg_store_lookup_req req;
	unsigned char d1[SG_LC_DIGEST_LEN], d2[SG_LC_DIGEST_LEN];
	char k1[SG_LC_KEY_LEN + 1], k2[SG_LC_KEY_LEN + 1];
	uint64_t seq1 = 0, seq2 = 0;
	sg_store_entry e;

	fx_open(f);
	digest_of(d1, k1, 1);
	digest_of(d2, k2, 2);
	assert_int_equal(sg_store_put_digest_seq(f->s, d1, "A", 1, &seq1,
	    NULL), 0);
	assert_int_equal(put_i(f->s, 2, "B", &seq2), 0);
	assert_int_equal(seq1, 1);
	assert_int_equal(seq2, 2);
	assert_int_equal(sg_store_flush(f->s, NULL), 0);
	/* by digest, written by text; and by text, written by digest */
	assert_int_equal(sg_store_lookup_start_digest(f->s, &req, d2,
	    sg_store_mono_ns() + 20 * MS, NULL, NULL), 0);
	assert_int_equal(req.rc, 0);
	assert_string_equal(req.entry.cluster_id, "B");
	assert_string_equal(req.entry.key, k2);
	assert_int_equal(sg_store_lookup(f->s, k1, SG_LC_KEY_LEN, &e, NULL),
	    0);
	assert_string_equal(e.cluster_id, "A");
	assert_string_equal(e.key, k1);
	assert_int_equal(sg_store_lookup_start_digest(f->s, &req, d1,
	    sg_store_mono_ns() + 20 * MS, NULL, NULL), 0);
	assert_int_equal(req.rc, 0);
	assert_string_equal(req.entry.key, k1);
	/* last write wins across both kinds */
	assert_int_equal(sg_store_put_digest_seq(f->s, d2, "C", 1, &seq2,
	    NULL), 0);
	assert_int_equal(seq2, 3);
	assert_int_equal(sg_store_flush(f->s, NULL), 0);
	assert_int_equal(sg_store_lookup(f->s, k2, SG_LC_KEY_LEN, &e, NULL),
	    0);
	assert_string_equal(e.cluster_id, "C");
	/* a miss, a past deadline, bad arguments */
	d1[0] ^= 1;
	assert_int_equal(sg_store_lookup_start_digest(f->s, &req, d1,
	    sg_store_mono_ns() + 20 * MS, NULL, NULL), 0);
	assert_int_equal(req.rc, SG_ENOTFOUND);
	assert_int_equal(sg_store_lookup_start_digest(f->s, &req, d2,
	    sg_store_mono_ns() - 1, NULL, NULL), 0);
	assert_int_equal(req.rc, ETIMEDOUT);
	assert_int_equal(sg_store_lookup_start_digest(f->s, &req, NULL,
	    sg_store_mono_ns() + 20 * MS, NULL, NULL), SG_EINVAL);
	assert_int_equal(req.rc, SG_EINVAL);
	assert_int_equal(sg_store_put_digest_seq(f->s, NULL, "A", 1, NULL,
	    NULL), SG_EINVAL);
	assert_int_equal(sg_store_put_digest_seq(f->s, d2, "", 0, NULL, NULL),
	    SG_EINVAL);
	assert_int_equal(sg_store_put_digest_seq(f->s, d2, "A\x01", 2, NULL,
	    NULL), SG_EINVAL);
}

/*
 * The store thread grows the map (MDB_MAP_FULL) with the environment
 * write-locked, and the hook keeps it there.  A lookup started meanwhile
 * answers EBUSY well within its 20 ms deadline, instead of waiting for the
 * grow; once released, the same lookup hits.
 */
static void
test_lookup_during_map_grow_does_not_block(void **state)
{
	struct fx *f = *state;
	sg_store_lookup_req req;
	sg_store_stats st;
	uint64_t took;
	int i;

	f->o.map_size = 256 << 10;
	f->o.map_size_max = 256 << 20;
	fx_open(f);
	assert_int_equal(put_i(f->s, 0, "A", NULL), 0);
	assert_int_equal(sg_store_flush(f->s, NULL), 0);
	hook_arm(f->s, "grow");
	for (i = 1; i < 20000; i++)
		assert_int_equal(put_i(f->s, i,
		    "cluster-with-a-longer-name-0123456789", NULL), 0);
	hook_wait_held();
	assert_int_equal(lookup_i(f->s, 0, 20 * MS, &req, &took), 0);
	assert_int_equal(req.rc, EBUSY);
	assert_true(took < 20 * MS);
	assert_non_null(strstr(req.err.text, "resized or reopened"));
	hook_release();
	assert_int_equal(sg_store_flush(f->s, NULL), 0);
	assert_int_equal(sg_store_stats_get(f->s, &st, NULL), 0);
	assert_true(st.map_grows >= 1);
	assert_int_equal(lookup_i(f->s, 0, 20 * MS, &req, NULL), 0);
	assert_int_equal(req.rc, 0);
	assert_string_equal(req.entry.cluster_id, "A");
}

struct sync_lookup {
	struct fx	*f;
	_Atomic bool	 done;
	int		 rc;
};

static void *
sync_lookup_thread(void *arg)
{
	struct sync_lookup *sl = arg;
	char k[SG_LC_KEY_LEN + 1];
	sg_store_entry e;

	key_of(k, 0);
	sl->rc = sg_store_lookup(sl->f->s, k, SG_LC_KEY_LEN, &e, NULL);
	atomic_store(&sl->done, true);
	return NULL;
}

/*
 * The control: the tools' synchronous lookup does wait for that grow (so
 * the hook really holds the lock the loop's lookup refuses to wait for).
 */
static void
test_sync_lookup_waits_for_the_grow(void **state)
{
	struct fx *f = *state;
	struct sync_lookup sl = { f, false, -1 };
	pthread_t thr;
	int i;

	f->o.map_size = 256 << 10;
	f->o.map_size_max = 256 << 20;
	fx_open(f);
	assert_int_equal(put_i(f->s, 0, "A", NULL), 0);
	assert_int_equal(sg_store_flush(f->s, NULL), 0);
	hook_arm(f->s, "grow");
	for (i = 1; i < 20000; i++)
		assert_int_equal(put_i(f->s, i,
		    "cluster-with-a-longer-name-0123456789", NULL), 0);
	hook_wait_held();
	assert_int_equal(pthread_create(&thr, NULL, sync_lookup_thread, &sl),
	    0);
	usleep(50000);
	assert_false(atomic_load(&sl.done));
	hook_release();
	assert_int_equal(pthread_join(thr, NULL), 0);
	assert_true(atomic_load(&sl.done));
	assert_int_equal(sl.rc, 0);
	assert_int_equal(sg_store_flush(f->s, NULL), 0);
}

static void *
compact_thread(void *arg)
{
	struct fx *f = arg;
	sg_store_compact_result r;

	return (void *)(intptr_t)sg_store_compact(f->s, &r, NULL);
}

/* The same across the reopen that follows a compaction's swap. */
static void
test_lookup_during_reopen_does_not_block(void **state)
{
	struct fx *f = *state;
	sg_store_lookup_req req;
	pthread_t thr;
	uint64_t took;
	void *ret;

	fx_open(f);
	assert_int_equal(put_i(f->s, 0, "A", NULL), 0);
	assert_int_equal(sg_store_flush(f->s, NULL), 0);
	hook_arm(f->s, "reopen");
	assert_int_equal(pthread_create(&thr, NULL, compact_thread, f), 0);
	hook_wait_held();
	assert_int_equal(lookup_i(f->s, 0, 20 * MS, &req, &took), 0);
	assert_int_equal(req.rc, EBUSY);
	assert_true(took < 20 * MS);
	hook_release();
	assert_int_equal(pthread_join(thr, &ret), 0);
	assert_int_equal((int)(intptr_t)ret, 0);
	assert_int_equal(lookup_i(f->s, 0, 20 * MS, &req, NULL), 0);
	assert_int_equal(req.rc, 0);
	assert_string_equal(req.entry.cluster_id, "A");
}

/* Wait (bounded) for the event fd to become readable. */
static bool
readable(int fd, int ms)
{
	struct pollfd p = { fd, POLLIN, 0 };

	return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}

static void
test_commits_reach_the_loop(void **state)
{
	struct fx *f = *state;
	sg_store_commit c[SG_STORE_EVENT_RING];
	uint64_t seq1, seq2, last = 0, ok = 0;
	size_t n, i;
	int fd;

	fx_open(f);
	fd = sg_store_event_fd(f->s);
	assert_true(fd >= 0);
	assert_false(readable(fd, 0));
	assert_int_equal(put_i(f->s, 1, "A", &seq1), 0);
	assert_int_equal(put_i(f->s, 2, "B", &seq2), 0);
	assert_int_equal(seq1, 1);
	assert_int_equal(seq2, 2);
	assert_int_equal(sg_store_flush(f->s, NULL), 0);
	assert_true(readable(fd, 5000));
	n = sg_store_drain(f->s, c, SG_STORE_EVENT_RING);
	assert_true(n >= 1);
	for (i = 0; i < n; i++) {
		assert_int_equal(c[i].rc, 0);
		assert_int_equal(c[i].ops_done - c[i].ops, last);
		last = c[i].ops_done;
		ok += c[i].ops;
	}
	assert_int_equal(last, seq2);	/* both writes are covered */
	assert_int_equal(ok, 2);
	assert_false(readable(fd, 0));
	assert_int_equal(sg_store_drain(f->s, c, 1), 0);
}

static void
test_drain_in_small_steps_keeps_the_fd_readable(void **state)
{
	struct fx *f = *state;
	sg_store_commit c;
	uint64_t total = 0;
	int i, fd, rounds = 0;

	f->o.batch_max = 1;		/* one record per write */
	fx_open(f);
	fd = sg_store_event_fd(f->s);
	for (i = 0; i < 5; i++)
		assert_int_equal(put_i(f->s, i, "A", NULL), 0);
	assert_int_equal(sg_store_flush(f->s, NULL), 0);
	while (readable(fd, 0) && rounds++ < 100)
		while (sg_store_drain(f->s, &c, 1) == 1)
			total += c.ops;
	assert_int_equal(total, 5);
}

static void
test_ring_overflow_merges_records(void **state)
{
	struct fx *f = *state;
	sg_store_commit c[SG_STORE_EVENT_RING];
	uint64_t total = 0, last = 0;
	size_t n, i;
	int k;

	f->o.batch_max = 1;
	fx_open(f);
	for (k = 0; k < SG_STORE_EVENT_RING + 50; k++)
		assert_int_equal(put_i(f->s, k, "A", NULL), 0);
	assert_int_equal(sg_store_flush(f->s, NULL), 0);
	n = sg_store_drain(f->s, c, SG_STORE_EVENT_RING);
	assert_int_equal(n, SG_STORE_EVENT_RING);
	for (i = 0; i < n; i++) {
		assert_int_equal(c[i].ops_done - c[i].ops, last);
		last = c[i].ops_done;
		total += c[i].ops;
	}
	assert_int_equal(total, SG_STORE_EVENT_RING + 50);
}

static void
test_without_events_there_is_no_fd(void **state)
{
	struct fx *f = *state;
	sg_store_commit c;

	f->o.events = false;
	fx_open(f);
	assert_int_equal(sg_store_event_fd(f->s), -1);
	assert_int_equal(put_i(f->s, 1, "A", NULL), 0);
	assert_int_equal(sg_store_flush(f->s, NULL), 0);
	assert_int_equal(sg_store_drain(f->s, &c, 1), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_lookup_completes_at_once,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(
		    test_digest_entry_points_are_the_text_ones, setup, teardown),
		cmocka_unit_test_setup_teardown(test_past_deadline_and_bad_key,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(
		    test_lookup_during_map_grow_does_not_block, setup, teardown),
		cmocka_unit_test_setup_teardown(
		    test_sync_lookup_waits_for_the_grow, setup, teardown),
		cmocka_unit_test_setup_teardown(
		    test_lookup_during_reopen_does_not_block, setup, teardown),
		cmocka_unit_test_setup_teardown(test_commits_reach_the_loop,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(
		    test_drain_in_small_steps_keeps_the_fd_readable, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_ring_overflow_merges_records,
		    setup, teardown),
		cmocka_unit_test_setup_teardown(
		    test_without_events_there_is_no_fd, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
