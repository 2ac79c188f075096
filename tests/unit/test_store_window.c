/*
 * test_store_window.c — the LMDB store's commit window (sg_store_opts
 * commit_delay_us, sg_store.h): writes queued within the window share one
 * transaction and one wake-up of the store thread, a trickle of writes
 * wakes it once per window (without the window, once per write), a full
 * batch, sg_store_flush() and sg_store_close() never wait for the window,
 * a write becomes visible when its window's transaction commits, and a put
 * that a later put of its key in the same transaction replaces is skipped
 * with the store ending as if it had been written (never in a batch that
 * could evict).  The first write to an idle store wakes its thread once,
 * at the window's end, not at once and again at the end.
 *
 * Waits are bounded (at most WAIT_S seconds of polling).  A window that
 * must contain puts is hundreds of times longer than they take (300 ms for
 * microseconds of puts, 400 ms for a 20 ms trickle), so a loaded machine
 * does not turn a pass into a failure; windows that a flush or close must
 * cut short are a minute long.  (The file took 6 s with 1.5-2 s windows.)
 */
#include "sg_test.h"

#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <linux/filter.h>
#include <linux/seccomp.h>

#include "sg_store_fixture.h"

#define WAIT_S	20	/* polling bound */

struct fx {
	char		 dir[64];
	sg_store_opts	 o;
	sg_store	*s;
	struct sgt_commits k;
};

static int
setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	sgt_tmpdir(f->dir, sizeof(f->dir), "window");
	sgt_commits_init(&f->k);
	sgt_opts(&f->o, f->dir, &f->k);
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fx *f = *state;

	sg_store_close(f->s);
	sgt_rmtree(f->dir);
	sgt_commits_fini(&f->k);
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

#define mono_s()		sgt_mono_s()
#define committed(f)		sgt_committed(&(f)->k)
#define wait_committed(f, n)	sgt_wait_committed(&(f)->k, (n), WAIT_S)

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

	f->o.commit_delay_us = 300000;		/* 300 ms */
	fx_open(f);
	for (i = 0; i < 20; i++)
		put_i(f->s, i);
	assert_true(wait_committed(f, 20));
	assert_int_equal(f->k.commits, 1);
	assert_int_equal(f->k.max_ops, 20);
	assert_int_equal(stats(f).commits, 1);
	assert_int_equal(stats(f).wakeups, 1);
}

/* A put every gap_us: one wake-up per window, against one per put
 * without. */
static uint64_t
trickle_wakeups(struct fx *f, uint32_t delay_us, int n, useconds_t gap_us)
{
	int i;

	f->o.commit_delay_us = delay_us;
	fx_open(f);
	for (i = 0; i < n; i++) {
		put_i(f->s, i);
		usleep(gap_us);
	}
	assert_true(wait_committed(f, (uint64_t)n));
	return stats(f).wakeups;
}

static void
test_window_trickle_wakes_the_store_thread_once_per_window(void **state)
{
	struct fx *f = *state;

	/* 20 puts 1 ms apart in a 400 ms window */
	assert_int_equal(trickle_wakeups(f, 400000, 20, 1000), 1);
	assert_int_equal(f->k.commits, 1);
}

static void
test_window_off_trickle_wakes_the_store_thread_per_write(void **state)
{
	struct fx *f = *state;

	/* The same trickle without a window: a wake-up (and a transaction)
	 * per write, or close to it on a loaded machine. */
	assert_true(trickle_wakeups(f, 0, 20, 5000) >= 10);
	assert_true(f->k.commits >= 10);
}

/*
 * The first write to an idle store arms the store thread's timer for the
 * end of its window, so the thread wakes once, to commit, and never
 * sleeps in the window (stats window_waits); before, the write woke it at
 * once and it slept again until the window's end.  An idle thread also
 * wakes by itself every 100 ms (swaps, health) and may then find the
 * write and wait out the window: a trial that happens to fall there is
 * repeated, and one trial without a wait in the window passes.
 */
static void
test_window_first_write_wakes_the_idle_store_thread_once(void **state)
{
	struct fx *f = *state;
	uint64_t before;
	bool once = false;
	int i;

	f->o.commit_delay_us = 30000;		/* 30 ms */
	fx_open(f);
	for (i = 0; i < 6 && !once; i++) {
		usleep(5000);			/* let it fall asleep */
		before = stats(f).window_waits;
		put_i(f->s, i);
		assert_true(wait_committed(f, (uint64_t)i + 1));
		once = stats(f).window_waits == before;
	}
	assert_true(once);
	assert_int_equal(f->k.commits, (uint64_t)i);
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
	assert_int_equal(f->k.commits, 1);
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
	assert_int_equal(f->k.max_ops, 8);
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

	f->o.commit_delay_us = 300000;		/* 300 ms */
	fx_open(f);
	key_of(k, 3);
	put_i(f->s, 3);
	/* Inside the window: queued, not yet committed, so not seen. */
	assert_int_equal(sg_store_lookup(f->s, k, SG_LC_KEY_LEN, &en, &e),
	    SG_ENOTFOUND);
	assert_true(wait_committed(f, 1));
	assert_int_equal(sg_store_lookup(f->s, k, SG_LC_KEY_LEN, &en, &e), 0);
	assert_int_equal(f->k.commits, 1);
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
	assert_int_equal(f->k.commits, 1);
	assert_int_equal(f->k.max_ops, 5);
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

/*
 * From now on timerfd_create(2) fails with ENOSYS in this process (a
 * seccomp filter, which cannot be undone: call it in a child).  True if
 * the filter is in and works.
 */
static bool
deny_timerfd(void)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
		    offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_timerfd_create, 0, 1),
		BPF_STMT(BPF_RET | BPF_K,
		    SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { sizeof(f) / sizeof(f[0]), f };
	long fd;

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
	    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
		return false;
	errno = 0;
	fd = syscall(SYS_timerfd_create, CLOCK_MONOTONIC, 0);
	return fd == -1 && errno == ENOSYS;
}

/* Poll the handle's stats (bounded) until n operations are committed. */
static bool
stats_committed(sg_store *s, uint64_t n, sg_store_stats *st)
{
	double end = mono_s() + WAIT_S;
	sg_error e;

	do {
		if (sg_store_stats_get(s, st, &e) != 0)
			return false;
		if (st->committed >= n)
			return true;
		usleep(1000);
	} while (mono_s() < end);
	return false;
}

/*
 * The child's part of the next test: without cmocka (whose failures
 * would run the rest of the suite in the child), a step number on
 * failure.  f is the fixture copied by fork().
 */
static int
no_timer_child(struct fx *f)
{
	char k[SG_LC_KEY_LEN + 1];
	sg_store_stats st;
	sg_store_entry en;
	sg_error e;
	double t0;
	int i;

	if (!deny_timerfd())
		return 2;
	/* a trickle of 20 writes 1 ms apart in a 400 ms window: one
	 * transaction, one wake-up */
	f->o.commit_delay_us = 400000;
	if (sg_store_open(&f->s, &f->o, &e) != 0)
		return 3;
	for (i = 0; i < 20; i++) {
		key_of(k, i);
		if (sg_store_put(f->s, k, SG_LC_KEY_LEN, "cluster-a", 9,
		    &e) != 0)
			return 4;
		usleep(1000);
	}
	if (!wait_committed(f, 20))
		return 5;
	if (sg_store_stats_get(f->s, &st, &e) != 0)
		return 6;
	if (f->k.commits != 1 || st.commits != 1 || st.wakeups != 1)
		return 7;
	sg_store_close(f->s);
	/*
	 * No timer to arm for a window's end: the first write to an idle
	 * store wakes its thread at once, and the thread waits in the
	 * window, every time (with the timer it wakes at the end and waits
	 * in it only when its own 100 ms wake falls inside the 30 ms)
	 */
	f->o.commit_delay_us = 30000;
	if (sg_store_open(&f->s, &f->o, &e) != 0)
		return 15;
	for (i = 0; i < 6; i++) {
		uint64_t before;

		usleep(5000);			/* let it fall asleep */
		if (sg_store_stats_get(f->s, &st, &e) != 0)
			return 6;
		before = st.window_waits;
		key_of(k, 40 + i);
		if (sg_store_put(f->s, k, SG_LC_KEY_LEN, "cluster-a", 9,
		    &e) != 0)
			return 4;
		if (!stats_committed(f->s, 1 + (uint64_t)i, &st))
			return 5;
		if (st.window_waits == before)
			return 8;
	}
	/* a flush and a close never wait for a 60 s window */
	sg_store_close(f->s);
	f->o.commit_delay_us = 60000000;
	if (sg_store_open(&f->s, &f->o, &e) != 0)
		return 9;
	key_of(k, 30);
	t0 = mono_s();
	if (sg_store_put(f->s, k, SG_LC_KEY_LEN, "cluster-b", 9, &e) != 0 ||
	    sg_store_flush(f->s, &e) != 0 || mono_s() - t0 >= 30)
		return 10;
	if (sg_store_lookup(f->s, k, SG_LC_KEY_LEN, &en, &e) != 0 ||
	    strcmp(en.cluster_id, "cluster-b") != 0)
		return 11;
	key_of(k, 31);
	if (sg_store_put(f->s, k, SG_LC_KEY_LEN, "cluster-c", 9, &e) != 0)
		return 12;
	t0 = mono_s();
	sg_store_close(f->s);
	f->s = NULL;
	if (mono_s() - t0 >= 30)
		return 13;
	f->o.commit_delay_us = 0;
	if (sg_store_open(&f->s, &f->o, &e) != 0 ||
	    sg_store_lookup(f->s, k, SG_LC_KEY_LEN, &en, &e) != 0 ||
	    strcmp(en.cluster_id, "cluster-c") != 0)
		return 14;
	sg_store_close(f->s);
	f->s = NULL;
	return 0;
}

/*
 * Where timerfd_create(2) is refused (a seccomp filter in a child, as a
 * sandbox would), the store thread falls back to its condition variable:
 * the first write of a window wakes it at once and it waits in the
 * window (stats window_waits, every time: the timer path does not), a
 * trickle of writes still shares one transaction and one wake-up, and
 * flush and close still cut a long window short.  (Without the filter the
 * timer path runs and the window_waits step fails; with the fallback's
 * wait in the window broken, the trickle takes several transactions.)
 */
static void
test_window_without_a_timer_descriptor_falls_back_to_the_condvar(
    void **state)
{
	struct fx *f = *state;
	pid_t pid;
	int st = 0;

	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(no_timer_child(f));
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	if (WEXITSTATUS(st) == 2)
		skip();		/* no seccomp here: nothing to show */
	assert_int_equal(WEXITSTATUS(st), 0);
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
		T(test_window_first_write_wakes_the_idle_store_thread_once),
		T(test_window_never_delays_flush),
		T(test_window_full_batch_commits_without_waiting),
		T(test_window_close_commits_queued_writes_at_once),
		T(test_window_write_visible_after_its_commit_not_before),
		T(test_window_superseded_puts_in_one_transaction_are_skipped_last_wins),
		T(test_window_no_skipping_in_a_batch_that_can_evict),
		T(test_window_without_a_timer_descriptor_falls_back_to_the_condvar),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
