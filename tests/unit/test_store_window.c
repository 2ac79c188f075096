/*
 * test_store_window.c — the LMDB store's commit window (sg_store_opts
 * commit_delay_us, sg_store.h): writes queued within the window share one
 * transaction and one wake-up of the store thread, a trickle of writes
 * wakes it once per window (without the window, once per write), a full
 * batch, sg_store_flush() and sg_store_close() never wait for the window,
 * a write becomes visible when its window's transaction commits, and a put
 * that a later put of its key in the same transaction replaces is skipped
 * with the store ending as if it had been written (never in a batch that
 * could evict).
 *
 * Waits are bounded (at most WAIT_S seconds of polling); the windows are
 * long (seconds) next to what they must contain (microseconds of puts), so
 * a loaded machine does not turn a pass into a failure.
 */
#include "sg_test.h"

#include <sys/stat.h>

#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "sg_store.h"

#define WAIT_S	20	/* polling bound */

struct fx {
	char		 dir[64];
	sg_store_opts	 o;
	sg_store	*s;
	pthread_mutex_t	 mu;
	uint64_t	 commits, max_ops, committed;
};

static void
fx_commit(const sg_store_commit *c, void *arg)
{
	struct fx *f = arg;

	pthread_mutex_lock(&f->mu);
	f->commits++;
	if (c->ops > f->max_ops)
		f->max_ops = c->ops;
	f->committed = c->committed;
	pthread_mutex_unlock(&f->mu);
}

static int
rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static int
setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	snprintf(f->dir, sizeof(f->dir), "/tmp/sg-test-window-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	pthread_mutex_init(&f->mu, NULL);
	sg_store_opts_init(&f->o);
	f->o.path = f->dir;
	f->o.create = true;
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
	nftw(f->dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
	pthread_mutex_destroy(&f->mu);
	free(f);
	return 0;
}

static void
fx_open(struct fx *f)
{
	sg_error e;

	sg_error_clear(&e);
	if (sg_store_open(&f->s, &f->o, &e) != 0)
		fail_msg("open: %s", e.text);
}

static void
key_of(char k[SG_LC_KEY_LEN + 1], int i)
{
	char aff[32];

	snprintf(aff, sizeof(aff), "session-%d", i);
	assert_int_equal(sg_lc_key(k, "tenant", 6, "model", 5, aff,
	    strlen(aff)), 0);
}

static void
put_i(sg_store *s, int i)
{
	char k[SG_LC_KEY_LEN + 1];
	sg_error e;

	key_of(k, i);
	sg_error_clear(&e);
	assert_int_equal(sg_store_put(s, k, SG_LC_KEY_LEN, "cluster-a", 9,
	    &e), 0);
}

static double
mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t
committed(struct fx *f)
{
	uint64_t n;

	pthread_mutex_lock(&f->mu);
	n = f->committed;
	pthread_mutex_unlock(&f->mu);
	return n;
}

/* Poll (never flush) until n operations are committed; false at WAIT_S. */
static bool
wait_committed(struct fx *f, uint64_t n)
{
	double end = mono_s() + WAIT_S;

	while (committed(f) < n) {
		if (mono_s() > end)
			return false;
		usleep(2000);
	}
	return true;
}

static sg_store_stats
stats(struct fx *f)
{
	sg_store_stats st;
	sg_error e;

	assert_int_equal(sg_store_stats_get(f->s, &st, &e), 0);
	return st;
}

static void
test_window_default_is_zero_and_commits_without_a_flush(void **state)
{
	struct fx *f = *state;

	assert_int_equal(f->o.commit_delay_us, SG_STORE_DEFAULT_COMMIT_DELAY_US);
	assert_int_equal(f->o.commit_delay_us, 0);
	fx_open(f);
	put_i(f->s, 1);
	assert_true(wait_committed(f, 1));
}

static void
test_window_puts_within_the_window_share_one_transaction(void **state)
{
	struct fx *f = *state;
	int i;

	f->o.commit_delay_us = 2000000;		/* 2 s */
	fx_open(f);
	for (i = 0; i < 20; i++)
		put_i(f->s, i);
	assert_true(wait_committed(f, 20));
	assert_int_equal(f->commits, 1);
	assert_int_equal(f->max_ops, 20);
	assert_int_equal(stats(f).commits, 1);
	assert_int_equal(stats(f).wakeups, 1);
}

/* A put every 5 ms: one wake-up per window, against one per put without. */
static uint64_t
trickle_wakeups(struct fx *f, uint32_t delay_us, int n)
{
	int i;

	f->o.commit_delay_us = delay_us;
	fx_open(f);
	for (i = 0; i < n; i++) {
		put_i(f->s, i);
		usleep(5000);
	}
	assert_true(wait_committed(f, (uint64_t)n));
	return stats(f).wakeups;
}

static void
test_window_trickle_wakes_the_store_thread_once_per_window(void **state)
{
	struct fx *f = *state;

	assert_int_equal(trickle_wakeups(f, 2000000, 20), 1);
	assert_int_equal(f->commits, 1);
}

static void
test_window_off_trickle_wakes_the_store_thread_per_write(void **state)
{
	struct fx *f = *state;

	/* The same trickle without a window: a wake-up (and a transaction)
	 * per write, or close to it on a loaded machine. */
	assert_true(trickle_wakeups(f, 0, 20) >= 10);
	assert_true(f->commits >= 10);
}

static void
test_window_never_delays_flush(void **state)
{
	struct fx *f = *state;
	double t0;
	sg_error e;

	f->o.commit_delay_us = 60000000;	/* 60 s */
	fx_open(f);
	put_i(f->s, 1);
	put_i(f->s, 2);
	t0 = mono_s();
	assert_int_equal(sg_store_flush(f->s, &e), 0);
	assert_true(mono_s() - t0 < 30);
	assert_int_equal(committed(f), 2);
	assert_int_equal(f->commits, 1);
	/* And the window is back for the next writes. */
	put_i(f->s, 3);
	usleep(50000);
	assert_int_equal(committed(f), 2);
	assert_int_equal(sg_store_flush(f->s, &e), 0);
	assert_int_equal(committed(f), 3);
}

static void
test_window_full_batch_commits_without_waiting(void **state)
{
	struct fx *f = *state;
	int i;

	f->o.commit_delay_us = 60000000;	/* 60 s */
	f->o.batch_max = 8;
	fx_open(f);
	for (i = 0; i < 8; i++)
		put_i(f->s, i);
	assert_true(wait_committed(f, 8));
	assert_int_equal(f->max_ops, 8);
}

static void
test_window_close_commits_queued_writes_at_once(void **state)
{
	struct fx *f = *state;
	char k[SG_LC_KEY_LEN + 1];
	sg_store_entry en;
	double t0;
	sg_error e;

	f->o.commit_delay_us = 60000000;	/* 60 s */
	fx_open(f);
	put_i(f->s, 7);
	t0 = mono_s();
	sg_store_close(f->s);
	f->s = NULL;
	assert_true(mono_s() - t0 < 30);
	f->o.commit_delay_us = 0;
	fx_open(f);
	key_of(k, 7);
	assert_int_equal(sg_store_lookup(f->s, k, SG_LC_KEY_LEN, &en, &e), 0);
	assert_string_equal(en.cluster_id, "cluster-a");
}

static void
test_window_write_visible_after_its_commit_not_before(void **state)
{
	struct fx *f = *state;
	char k[SG_LC_KEY_LEN + 1];
	sg_store_entry en;
	sg_error e;

	f->o.commit_delay_us = 1500000;		/* 1.5 s */
	fx_open(f);
	key_of(k, 3);
	put_i(f->s, 3);
	/* Inside the window: queued, not yet committed, so not seen. */
	assert_int_equal(sg_store_lookup(f->s, k, SG_LC_KEY_LEN, &en, &e),
	    SG_ENOTFOUND);
	assert_true(wait_committed(f, 1));
	assert_int_equal(sg_store_lookup(f->s, k, SG_LC_KEY_LEN, &en, &e), 0);
	assert_int_equal(f->commits, 1);
}

static void
put_id(sg_store *s, int i, const char *id)
{
	char k[SG_LC_KEY_LEN + 1];
	sg_error e;

	key_of(k, i);
	sg_error_clear(&e);
	assert_int_equal(sg_store_put(s, k, SG_LC_KEY_LEN, id, strlen(id),
	    &e), 0);
}

struct seen {
	char	ids[8][16];
	int	n;
};

static int
seen_fn(const sg_store_entry *en, void *arg)
{
	struct seen *v = arg;

	if (v->n < 8)
		snprintf(v->ids[v->n++], sizeof(v->ids[0]), "%.15s",
		    en->cluster_id);
	return 0;
}

/*
 * Puts of one key in one transaction: the last one wins and the earlier
 * ones are never written (stats superseded), and the store ends exactly
 * as if each had been: the entries, their order by write (iterate: oldest
 * first, by sequence within a millisecond) and the sequence counter (a
 * later transaction still orders after them).
 */
static void
test_window_superseded_puts_in_one_transaction_are_skipped_last_wins(
    void **state)
{
	struct fx *f = *state;
	struct seen v;
	sg_store_entry en;
	sg_error e;
	char k[SG_LC_KEY_LEN + 1];

	f->o.commit_delay_us = 60000000;	/* 60 s: flush ends it */
	fx_open(f);
	put_id(f->s, 1, "a");
	put_id(f->s, 2, "x");
	put_id(f->s, 1, "b");
	put_id(f->s, 3, "y");
	put_id(f->s, 1, "c");
	assert_int_equal(sg_store_flush(f->s, &e), 0);
	assert_int_equal(f->commits, 1);
	assert_int_equal(f->max_ops, 5);
	assert_int_equal(stats(f).superseded, 2);
	assert_int_equal(stats(f).entries, 3);
	key_of(k, 1);
	assert_int_equal(sg_store_lookup(f->s, k, SG_LC_KEY_LEN, &en, &e), 0);
	assert_string_equal(en.cluster_id, "c");
	/* A later transaction's write of key 2 orders after key 1's. */
	put_id(f->s, 2, "z");
	assert_int_equal(sg_store_flush(f->s, &e), 0);
	memset(&v, 0, sizeof(v));
	assert_int_equal(sg_store_iterate(f->s, false, seen_fn, &v, &e), 0);
	assert_int_equal(v.n, 3);
	assert_string_equal(v.ids[0], "y");
	assert_string_equal(v.ids[1], "c");
	assert_string_equal(v.ids[2], "z");
}

/* A batch that could evict is written put by put, as before. */
static void
test_window_no_skipping_in_a_batch_that_can_evict(void **state)
{
	struct fx *f = *state;
	struct seen v;
	sg_error e;

	f->o.commit_delay_us = 60000000;
	f->o.max_entries = 2;
	fx_open(f);
	put_id(f->s, 1, "a");
	put_id(f->s, 2, "b");
	put_id(f->s, 1, "c");
	put_id(f->s, 3, "d");
	assert_int_equal(sg_store_flush(f->s, &e), 0);
	assert_int_equal(stats(f).superseded, 0);
	memset(&v, 0, sizeof(v));
	assert_int_equal(sg_store_iterate(f->s, false, seen_fn, &v, &e), 0);
	assert_int_equal(v.n, 2);
	assert_string_equal(v.ids[0], "c");
	assert_string_equal(v.ids[1], "d");
}

#define T(fn)	cmocka_unit_test_setup_teardown(fn, setup, teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_window_default_is_zero_and_commits_without_a_flush),
		T(test_window_puts_within_the_window_share_one_transaction),
		T(test_window_trickle_wakes_the_store_thread_once_per_window),
		T(test_window_off_trickle_wakes_the_store_thread_per_write),
		T(test_window_never_delays_flush),
		T(test_window_full_batch_commits_without_waiting),
		T(test_window_close_commits_queued_writes_at_once),
		T(test_window_write_visible_after_its_commit_not_before),
		T(test_window_superseded_puts_in_one_transaction_are_skipped_last_wins),
		T(test_window_no_skipping_in_a_batch_that_can_evict),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
