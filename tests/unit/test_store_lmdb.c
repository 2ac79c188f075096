/*
 * test_store_lmdb.c — sg_store_lmdb.c, through the public sg_store API on a
 * real LMDB directory: hits and misses, TTL with an injected clock, TTL
 * reset on write, capacity eviction order, group commit, map growth and a
 * full map, iteration, stats, compaction, and several processes (fork) on
 * one directory, including compaction while another process writes.
 */
#include "sg_test.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <fcntl.h>

#include <signal.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "sg_store_fixture.h"

struct fx {
	char		 dir[64];
	_Atomic uint64_t now;
	sg_store_opts	 o;
	sg_store	*s;
	/* on_commit bookkeeping and the "hold the store thread" switch */
	pthread_mutex_t	 mu;
	pthread_cond_t	 cv;
	bool		 hold, held;
	uint64_t	 commits, max_ops, committed;
	int		 last_rc;
};

static uint64_t
fx_clock(void *arg)
{
	struct fx *f = arg;

	return atomic_load(&f->now);
}

static void
fx_commit(const sg_store_commit *c, void *arg)
{
	struct fx *f = arg;

	pthread_mutex_lock(&f->mu);
	f->commits++;
	if (c->ops > f->max_ops)
		f->max_ops = c->ops;
	f->committed = c->committed;
	f->last_rc = c->rc;
	if (f->hold) {
		f->held = true;
		pthread_cond_broadcast(&f->cv);
		while (f->hold)
			pthread_cond_wait(&f->cv, &f->mu);
		f->held = false;
	}
	pthread_mutex_unlock(&f->mu);
}

static int
setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	sgt_tmpdir(f->dir, sizeof(f->dir), "store");
	atomic_store(&f->now, 1700000000000ULL);
	pthread_mutex_init(&f->mu, NULL);
	pthread_cond_init(&f->cv, NULL);
	sgt_opts(&f->o, f->dir, NULL);
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
	sgt_rmtree(f->dir);
	pthread_mutex_destroy(&f->mu);
	pthread_cond_destroy(&f->cv);
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
put_i(sg_store *s, int i, const char *id)
{
	char k[SG_LC_KEY_LEN + 1];
	sg_error e;
	int rc;

	key_of(k, i);
	while ((rc = sg_store_put(s, k, SG_LC_KEY_LEN, id, strlen(id), &e)) ==
	    EAGAIN)
		assert_int_equal(sg_store_flush(s, &e), 0);
	assert_int_equal(rc, 0);
}

static int
get_i(sg_store *s, int i, sg_store_entry *out)
{
	char k[SG_LC_KEY_LEN + 1];

	key_of(k, i);
	return sg_store_lookup(s, k, SG_LC_KEY_LEN, out, NULL);
}

static int
count_fn(const sg_store_entry *e, void *arg)
{
	(void)e;
	++*(int *)arg;
	return 0;
}

/* Entries the time index leads to (expired ones too). */
static int
count_all(sg_store *s)
{
	int n = 0;

	assert_int_equal(sg_store_iterate(s, true, count_fn, &n, NULL), 0);
	return n;
}

static void
flush_ok(sg_store *s)
{
	sg_error e;
	int rc;

	sg_error_clear(&e);
	rc = sg_store_flush(s, &e);
	if (rc != 0)
		fail_msg("flush: %d %s", rc, e.text);
}

static void
hold_thread(struct fx *f)
{
	pthread_mutex_lock(&f->mu);
	f->hold = true;
	pthread_mutex_unlock(&f->mu);
}

static void
wait_held(struct fx *f)
{
	pthread_mutex_lock(&f->mu);
	while (!f->held)
		pthread_cond_wait(&f->cv, &f->mu);
	pthread_mutex_unlock(&f->mu);
}

static void
release_thread(struct fx *f)
{
	pthread_mutex_lock(&f->mu);
	f->hold = false;
	pthread_cond_broadcast(&f->cv);
	pthread_mutex_unlock(&f->mu);
}

/* --- basic --------------------------------------------------------------- */

static void
test_put_then_lookup_hits_with_write_time(void **state)
{
	struct fx *f = *state;
	sg_store_entry e;

	fx_open(f);
	assert_int_equal(get_i(f->s, 1, &e), SG_ENOTFOUND);
	put_i(f->s, 1, "cluster-a");
	flush_ok(f->s);
	atomic_fetch_add(&f->now, 1234);
	assert_int_equal(get_i(f->s, 1, &e), 0);
	assert_string_equal(e.cluster_id, "cluster-a");
	assert_int_equal(e.cluster_id_len, 9);
	assert_true(e.written_ms == 1700000000000ULL);
	assert_int_equal(e.age_ms, 1234);
	assert_int_equal(get_i(f->s, 2, &e), SG_ENOTFOUND);
}

static void
test_overwrite_replaces_cluster_id(void **state)
{
	struct fx *f = *state;
	sg_store_entry e;
	sg_store_stats st;

	fx_open(f);
	put_i(f->s, 1, "a");
	put_i(f->s, 1, "b");
	flush_ok(f->s);
	assert_int_equal(get_i(f->s, 1, &e), 0);
	assert_string_equal(e.cluster_id, "b");
	assert_int_equal(sg_store_stats_get(f->s, &st, NULL), 0);
	assert_int_equal(st.entries, 1);
}

/* In-place overwrites of another length keep the index consistent. */
static void
test_overwrite_with_longer_and_shorter_ids_keeps_one_entry(void **state)
{
	struct fx *f = *state;
	sg_store_entry e;
	sg_store_stats st;

	fx_open(f);
	put_i(f->s, 1, "a");
	flush_ok(f->s);
	atomic_fetch_add(&f->now, 1);
	put_i(f->s, 1, "a-much-longer-cluster-id");
	flush_ok(f->s);
	atomic_fetch_add(&f->now, 1);
	put_i(f->s, 1, "bb");
	put_i(f->s, 2, "other");
	flush_ok(f->s);
	assert_int_equal(get_i(f->s, 1, &e), 0);
	assert_string_equal(e.cluster_id, "bb");
	assert_int_equal(e.age_ms, 0);
	assert_int_equal(sg_store_stats_get(f->s, &st, NULL), 0);
	assert_int_equal(st.entries, 2);
	assert_int_equal(count_all(f->s), 2);
}

/*
 * The time index takes a write time older than the newest (a clock step
 * back, a restored entry) in order: capacity still evicts the least
 * recently written entry.
 */
static void
test_capacity_clock_step_back_evicts_by_write_time(void **state)
{
	struct fx *f = *state;
	sg_store_entry e;

	f->o.max_entries = 2;
	fx_open(f);
	put_i(f->s, 1, "c1");
	flush_ok(f->s);
	atomic_fetch_sub(&f->now, 5000);	/* the clock steps back */
	put_i(f->s, 2, "c2");
	flush_ok(f->s);
	atomic_fetch_add(&f->now, 1);
	put_i(f->s, 3, "c3");			/* evicts 2, the oldest */
	flush_ok(f->s);
	assert_int_equal(get_i(f->s, 2, &e), SG_ENOTFOUND);
	assert_int_equal(get_i(f->s, 1, &e), 0);
	assert_int_equal(get_i(f->s, 3, &e), 0);
	assert_int_equal(count_all(f->s), 2);
}

static void
test_del_removes_entry(void **state)
{
	struct fx *f = *state;
	char k[SG_LC_KEY_LEN + 1];
	sg_store_entry e;

	fx_open(f);
	put_i(f->s, 1, "a");
	put_i(f->s, 2, "b");
	flush_ok(f->s);
	key_of(k, 1);
	assert_int_equal(sg_store_del(f->s, k, SG_LC_KEY_LEN, NULL), 0);
	flush_ok(f->s);
	assert_int_equal(get_i(f->s, 1, &e), SG_ENOTFOUND);
	assert_int_equal(get_i(f->s, 2, &e), 0);
	/* Deleting an absent key is not an error. */
	assert_int_equal(sg_store_del(f->s, k, SG_LC_KEY_LEN, NULL), 0);
	flush_ok(f->s);
}

/* --- TTL ----------------------------------------------------------------- */

static void
test_ttl_expired_entry_is_a_miss_and_deleted(void **state)
{
	struct fx *f = *state;
	sg_store_entry e;
	sg_store_stats st;

	f->o.ttl_ms = 60000;
	fx_open(f);
	put_i(f->s, 1, "a");
	flush_ok(f->s);
	atomic_fetch_add(&f->now, 59999);
	assert_int_equal(get_i(f->s, 1, &e), 0);
	assert_int_equal(sg_store_stats_get(f->s, &st, NULL), 0);
	assert_int_equal(st.entries, 1);
	assert_int_equal(st.expired, 0);
	atomic_fetch_add(&f->now, 1);	/* age == TTL: expired */
	assert_int_equal(sg_store_stats_get(f->s, &st, NULL), 0);
	assert_int_equal(st.expired, 1);
	assert_int_equal(get_i(f->s, 1, &e), SG_ENOTFOUND);
	flush_ok(f->s);		/* the queued deletion */
	assert_int_equal(sg_store_stats_get(f->s, &st, NULL), 0);
	assert_int_equal(st.entries, 0);
	/* Even with the clock back, the entry is gone. */
	atomic_fetch_sub(&f->now, 30000);
	assert_int_equal(get_i(f->s, 1, &e), SG_ENOTFOUND);
}

static void
test_write_resets_ttl(void **state)
{
	struct fx *f = *state;
	sg_store_entry e;

	f->o.ttl_ms = 60000;
	fx_open(f);
	put_i(f->s, 1, "a");
	flush_ok(f->s);
	atomic_fetch_add(&f->now, 40000);
	put_i(f->s, 1, "a");
	flush_ok(f->s);
	atomic_fetch_add(&f->now, 40000);	/* 80 s after the first write */
	assert_int_equal(get_i(f->s, 1, &e), 0);
	assert_int_equal(e.age_ms, 40000);
	atomic_fetch_add(&f->now, 20000);	/* 60 s after the second */
	assert_int_equal(get_i(f->s, 1, &e), SG_ENOTFOUND);
}

static void
test_lookup_does_not_reset_ttl(void **state)
{
	struct fx *f = *state;
	sg_store_entry e;

	f->o.ttl_ms = 1000;
	fx_open(f);
	put_i(f->s, 1, "a");
	flush_ok(f->s);
	atomic_fetch_add(&f->now, 600);
	assert_int_equal(get_i(f->s, 1, &e), 0);
	atomic_fetch_add(&f->now, 400);
	assert_int_equal(get_i(f->s, 1, &e), SG_ENOTFOUND);
}

static void
test_expiry_deletion_spares_a_newer_write(void **state)
{
	struct fx *f = *state;
	sg_store_entry e;

	f->o.ttl_ms = 1000;
	fx_open(f);
	put_i(f->s, 1, "old");
	flush_ok(f->s);
	atomic_fetch_add(&f->now, 5000);
	/* Keep the store thread busy so both operations queue up. */
	hold_thread(f);
	put_i(f->s, 2, "x");
	wait_held(f);
	put_i(f->s, 1, "new");			/* queued first */
	assert_int_equal(get_i(f->s, 1, &e), SG_ENOTFOUND); /* queues expiry */
	release_thread(f);
	flush_ok(f->s);
	assert_int_equal(get_i(f->s, 1, &e), 0);
	assert_string_equal(e.cluster_id, "new");
}

/* --- capacity ------------------------------------------------------------ */

static void
test_capacity_evicts_least_recently_written(void **state)
{
	struct fx *f = *state;
	sg_store_entry e;
	sg_store_stats st;
	int i;

	f->o.max_entries = 5;
	fx_open(f);
	for (i = 0; i < 10; i++) {
		put_i(f->s, i, "c");
		atomic_fetch_add(&f->now, 10);
	}
	flush_ok(f->s);
	for (i = 0; i < 10; i++)
		assert_int_equal(get_i(f->s, i, &e), i < 5 ? SG_ENOTFOUND : 0);
	/* Rewriting 5 makes it the most recent: 6 goes next, not 5. */
	put_i(f->s, 5, "c");
	atomic_fetch_add(&f->now, 10);
	put_i(f->s, 10, "c");
	flush_ok(f->s);
	assert_int_equal(get_i(f->s, 5, &e), 0);
	assert_int_equal(get_i(f->s, 6, &e), SG_ENOTFOUND);
	assert_int_equal(get_i(f->s, 7, &e), 0);
	assert_int_equal(get_i(f->s, 10, &e), 0);
	assert_int_equal(sg_store_stats_get(f->s, &st, NULL), 0);
	assert_int_equal(st.entries, 5);
}

static void
test_capacity_same_millisecond_keeps_commit_order(void **state)
{
	struct fx *f = *state;
	sg_store_entry e;
	int i;

	f->o.max_entries = 100;
	fx_open(f);
	for (i = 0; i < 250; i++)	/* all at the same clock value */
		put_i(f->s, i, "c");
	flush_ok(f->s);
	for (i = 0; i < 250; i++)
		assert_int_equal(get_i(f->s, i, &e), i < 150 ? SG_ENOTFOUND : 0);
}

/* --- group commit, queue ------------------------------------------------- */

static void
test_group_commit_puts_many_writes_in_one_transaction(void **state)
{
	struct fx *f = *state;
	sg_store_entry e;
	uint64_t before;
	int i;

	f->o.batch_max = 1000;
	fx_open(f);
	hold_thread(f);
	put_i(f->s, -1, "first");
	wait_held(f);		/* the thread sits in on_commit */
	for (i = 0; i < 5000; i++)
		put_i(f->s, i, "c");
	pthread_mutex_lock(&f->mu);
	before = f->commits;
	pthread_mutex_unlock(&f->mu);
	release_thread(f);
	flush_ok(f->s);
	/* 5000 queued writes, batch_max 1000: exactly five transactions. */
	assert_int_equal(f->commits - before, 5);
	assert_int_equal(f->max_ops, 1000);
	assert_int_equal(f->committed, 5001);
	for (i = 0; i < 5000; i += 499)
		assert_int_equal(get_i(f->s, i, &e), 0);
}

static void
test_full_queue_refuses_without_blocking(void **state)
{
	struct fx *f = *state;
	char k[SG_LC_KEY_LEN + 1];
	sg_error er;
	int i;

	f->o.queue_max = 300;
	fx_open(f);
	hold_thread(f);
	put_i(f->s, -1, "first");
	wait_held(f);
	key_of(k, 7);
	for (i = 0; i < 300; i++)
		assert_int_equal(sg_store_put(f->s, k, SG_LC_KEY_LEN, "c", 1,
		    NULL), 0);
	assert_int_equal(sg_store_put(f->s, k, SG_LC_KEY_LEN, "c", 1, &er),
	    EAGAIN);
	release_thread(f);
	flush_ok(f->s);
	assert_int_equal(sg_store_put(f->s, k, SG_LC_KEY_LEN, "c", 1, NULL), 0);
	flush_ok(f->s);
}

static void
test_sync_option_commits_durably(void **state)
{
	struct fx *f = *state;
	sg_store_entry e;
	int i;

	f->o.sync = true;
	fx_open(f);
	for (i = 0; i < 100; i++)
		put_i(f->s, i, "s");
	flush_ok(f->s);
	for (i = 0; i < 100; i++)
		assert_int_equal(get_i(f->s, i, &e), 0);
}

/* --- map size ------------------------------------------------------------ */

static void
test_map_full_grows_the_map(void **state)
{
	struct fx *f = *state;
	sg_store_entry e;
	sg_store_stats st;
	int i;

	f->o.map_size = 256 << 10;
	f->o.map_size_max = 256 << 20;
	fx_open(f);
	for (i = 0; i < 20000; i++)
		put_i(f->s, i, "cluster-with-a-longer-name-0123456789");
	flush_ok(f->s);
	assert_int_equal(sg_store_stats_get(f->s, &st, NULL), 0);
	assert_true(st.map_grows >= 1);
	assert_true(st.map_size > (256 << 10));
	assert_int_equal(st.entries, 20000);
	assert_int_equal(st.failed, 0);
	for (i = 0; i < 20000; i++)
		assert_int_equal(get_i(f->s, i, &e), 0);
}

static void
test_map_full_at_maximum_is_an_error_value(void **state)
{
	struct fx *f = *state;
	sg_store_entry e;
	sg_store_stats st;
	sg_error er;
	int i, rc, hits = 0;

	f->o.map_size = 128 << 10;
	f->o.map_size_max = 128 << 10;
	f->o.batch_max = 10;
	fx_open(f);
	for (i = 0; i < 5000; i++)
		put_i(f->s, i, "cluster-with-a-longer-name-0123456789");
	sg_error_clear(&er);
	rc = sg_store_flush(f->s, &er);
	assert_int_equal(rc, SG_EFULL);
	assert_non_null(strstr(er.text, "full"));
	/* The store survives: stats work, committed entries are readable. */
	assert_int_equal(sg_store_stats_get(f->s, &st, NULL), 0);
	assert_true(st.failed > 0);
	assert_true(st.committed > 0);
	assert_int_equal(st.entries, st.committed);
	for (i = 0; i < 5000; i++) {
		rc = get_i(f->s, i, &e);
		assert_true(rc == 0 || rc == SG_ENOTFOUND);
		hits += rc == 0;
	}
	assert_int_equal((uint64_t)hits, st.entries);
	assert_int_equal(sg_store_flush(f->s, NULL), 0);
}

/* --- iteration and stats ------------------------------------------------- */

struct collect {
	int		n;
	uint64_t	last;
	bool		ordered;
};

static int
collect_fn(const sg_store_entry *e, void *arg)
{
	struct collect *c = arg;

	if (c->n > 0 && e->written_ms < c->last)
		c->ordered = false;
	c->last = e->written_ms;
	c->n++;
	return 0;
}

static int
stop_fn(const sg_store_entry *e, void *arg)
{
	(void)e;
	return ++*(int *)arg == 3 ? 42 : 0;
}

static void
test_iterate_oldest_first_skips_expired(void **state)
{
	struct fx *f = *state;
	struct collect c = { 0, 0, true };
	int i, n = 0;

	f->o.ttl_ms = 100000;
	fx_open(f);
	for (i = 0; i < 20; i++) {
		put_i(f->s, 19 - i, "c");
		atomic_fetch_add(&f->now, 10000);
	}
	flush_ok(f->s);
	/* now = t0 + 200 s: the first 11 writes (age >= 100 s) expired. */
	assert_int_equal(sg_store_iterate(f->s, false, collect_fn, &c, NULL), 0);
	assert_int_equal(c.n, 9);
	assert_true(c.ordered);
	memset(&c, 0, sizeof(c));
	c.ordered = true;
	assert_int_equal(sg_store_iterate(f->s, true, collect_fn, &c, NULL), 0);
	assert_int_equal(c.n, 20);
	assert_true(c.ordered);
	assert_int_equal(sg_store_iterate(f->s, true, stop_fn, &n, NULL), 42);
}

static void
test_stats_counts_entries_expired_and_oldest(void **state)
{
	struct fx *f = *state;
	sg_store_stats st;
	int i;

	f->o.ttl_ms = 100000;
	fx_open(f);
	assert_int_equal(sg_store_stats_get(f->s, &st, NULL), 0);
	assert_int_equal(st.entries, 0);
	assert_int_equal(st.oldest_age_ms, 0);
	assert_string_equal(st.backend, "lmdb");
	for (i = 0; i < 10; i++) {
		put_i(f->s, i, "c");
		atomic_fetch_add(&f->now, 20000);
	}
	flush_ok(f->s);
	assert_int_equal(sg_store_stats_get(f->s, &st, NULL), 0);
	assert_int_equal(st.entries, 10);
	assert_int_equal(st.expired, 6);	/* ages 200 .. 100 s (age == TTL expires) */
	assert_int_equal(st.oldest_age_ms, 200000);
	assert_int_equal(st.ttl_ms, 100000);
	assert_true(st.map_used > 0 && st.map_used <= st.map_size);
	assert_true(st.file_size > 0);
	assert_true(st.readers_used >= 1);	/* our cached read slot */
	assert_int_equal(st.max_readers, 126);
	assert_int_equal(st.committed, 10);
}

static void
test_put_at_keeps_the_given_write_time(void **state)
{
	struct fx *f = *state;
	char k[SG_LC_KEY_LEN + 1];
	sg_store_entry e;

	f->o.ttl_ms = 60000;
	fx_open(f);
	key_of(k, 1);
	assert_int_equal(sg_store_put_at(f->s, k, SG_LC_KEY_LEN, "a", 1,
	    atomic_load(&f->now) - 59000, NULL), 0);
	flush_ok(f->s);
	assert_int_equal(get_i(f->s, 1, &e), 0);
	assert_int_equal(e.age_ms, 59000);
	atomic_fetch_add(&f->now, 1000);
	assert_int_equal(get_i(f->s, 1, &e), SG_ENOTFOUND);
}

/* --- opening ------------------------------------------------------------- */

static void
test_second_open_in_one_process_is_ebusy(void **state)
{
	struct fx *f = *state;
	sg_store *t = NULL;

	fx_open(f);
	assert_int_equal(sg_store_open(&t, &f->o, NULL), EBUSY);
	assert_null(t);
}

static void
test_missing_store_without_create_is_enoent(void **state)
{
	struct fx *f = *state;
	char path[128];
	sg_store *t = NULL;
	sg_error er;

	snprintf(path, sizeof(path), "%s/nope", f->dir);
	f->o.path = path;
	f->o.create = false;
	assert_int_equal(sg_store_open(&t, &f->o, &er), ENOENT);
	assert_non_null(strstr(er.text, "nope"));
	/* A directory without a store is missing too, and stays empty. */
	assert_int_equal(mkdir(path, 0700), 0);
	assert_int_equal(sg_store_open(&t, &f->o, NULL), ENOENT);
	assert_int_equal(rmdir(path), 0);
	f->o.path = f->dir;
}

/* --- several processes --------------------------------------------------- */

/* Child side: open the store with the real clock. */
static sg_store *
child_open(const char *dir)
{
	sg_store_opts o;
	sg_store *s = NULL;

	sg_store_opts_init(&o);
	o.path = dir;
	o.create = true;
	if (sg_store_open(&s, &o, NULL) != 0)
		_exit(90);
	return s;
}

static void
wait_child_ok(pid_t pid)
{
	int status;

	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
}

static void
test_write_by_one_process_visible_to_another(void **state)
{
	struct fx *f = *state;
	int up[2], down[2];
	sg_store_entry e;
	char c;
	pid_t pid;

	f->o.clock = NULL;
	assert_int_equal(pipe(up), 0);
	assert_int_equal(pipe(down), 0);
	/* Fork before this process has a store thread: a fork while another
	 * thread holds the allocator's lock leaves the child deadlocked. */
	if ((pid = fork()) == 0) {
		sg_store *s;
		int i;

		if (read(down[0], &c, 1) != 1)	/* the parent has opened */
			_exit(90);
		s = child_open(f->dir);

		for (i = 0; i < 100; i++)
			put_i(s, i, "from-child");
		if (sg_store_flush(s, NULL) != 0)
			_exit(91);
		if (write(up[1], "w", 1) != 1 || read(down[0], &c, 1) != 1)
			_exit(92);
		/* The parent's write, seen here. */
		if (get_i(s, 1000, &e) != 0 ||
		    strcmp(e.cluster_id, "from-parent") != 0)
			_exit(93);
		sg_store_close(s);
		_exit(0);
	}
	assert_true(pid > 0);
	fx_open(f);
	assert_int_equal(write(down[1], "o", 1), 1);
	assert_int_equal(read(up[0], &c, 1), 1);
	assert_int_equal(get_i(f->s, 42, &e), 0);
	assert_string_equal(e.cluster_id, "from-child");
	put_i(f->s, 1000, "from-parent");
	flush_ok(f->s);
	assert_int_equal(write(down[1], "r", 1), 1);
	wait_child_ok(pid);
	close(up[0]);
	close(up[1]);
	close(down[0]);
	close(down[1]);
}

/* The loop's lookup (sg_store_lookup_start) of key i. */
static int
get_nowait_i(sg_store *s, int i, sg_store_lookup_req *req)
{
	char k[SG_LC_KEY_LEN + 1];

	key_of(k, i);
	assert_int_equal(sg_store_lookup_start(s, req, k, SG_LC_KEY_LEN,
	    sg_store_mono_ns() + 10000000000ULL, NULL, NULL), 0);
	return req->rc;
}

/*
 * A lookup keeps its read snapshot between lookups while no commit was
 * announced: a commit by another process (or this one) must still be seen
 * by the very next lookup, before anything else renews the snapshot.  The
 * parent's clock stands still, so only the shared commit counter, not the
 * snapshot's age, can make it renew.
 */
static void
test_lookup_snapshot_is_renewed_by_another_process_commit(void **state)
{
	struct fx *f = *state;
	sg_store_lookup_req req;
	int up[2], down[2];
	char c;
	pid_t pid;

	assert_int_equal(pipe(up), 0);
	assert_int_equal(pipe(down), 0);
	if ((pid = fork()) == 0) {
		sg_store *s;

		if (read(down[0], &c, 1) != 1)
			_exit(90);
		s = child_open(f->dir);
		put_i(s, 5, "first");
		if (sg_store_flush(s, NULL) != 0)
			_exit(91);
		if (write(up[1], "1", 1) != 1 || read(down[0], &c, 1) != 1)
			_exit(92);
		put_i(s, 5, "second");
		if (sg_store_flush(s, NULL) != 0)
			_exit(93);
		if (write(up[1], "2", 1) != 1)
			_exit(94);
		sg_store_close(s);
		_exit(0);
	}
	assert_true(pid > 0);
	fx_open(f);
	/* Misses, twice: the second one reads the kept snapshot. */
	assert_int_equal(get_nowait_i(f->s, 5, &req), SG_ENOTFOUND);
	assert_int_equal(get_nowait_i(f->s, 5, &req), SG_ENOTFOUND);
	assert_int_equal(write(down[1], "o", 1), 1);
	assert_int_equal(read(up[0], &c, 1), 1);
	assert_int_equal(get_nowait_i(f->s, 5, &req), 0);
	assert_string_equal(req.entry.cluster_id, "first");
	assert_int_equal(write(down[1], "n", 1), 1);
	assert_int_equal(read(up[0], &c, 1), 1);
	assert_int_equal(get_nowait_i(f->s, 5, &req), 0);
	assert_string_equal(req.entry.cluster_id, "second");
	wait_child_ok(pid);
	/* This process's own commit, right after its flush. */
	put_i(f->s, 5, "third");
	flush_ok(f->s);
	assert_int_equal(get_nowait_i(f->s, 5, &req), 0);
	assert_string_equal(req.entry.cluster_id, "third");
	close(up[0]);
	close(up[1]);
	close(down[0]);
	close(down[1]);
}

/*
 * The parent grows the map far beyond the size the child mapped; the
 * child (MDB_MAP_RESIZED) adopts it, reads the new entries and writes.
 */
static void
test_map_grown_by_another_process_is_adopted(void **state)
{
	struct fx *f = *state;
	int up[2], down[2], i;
	sg_store_entry e;
	char c;
	pid_t pid;

	f->o.clock = NULL;
	f->o.map_size = 256 << 10;
	fx_open(f);
	put_i(f->s, 0, "small");
	flush_ok(f->s);
	assert_int_equal(pipe(up), 0);
	assert_int_equal(pipe(down), 0);
	if ((pid = fork()) == 0) {
		sg_store_opts o;
		sg_store_stats st;
		sg_store *s = NULL;

		sg_store_opts_init(&o);
		o.path = f->dir;
		o.map_size = 256 << 10;
		if (sg_store_open(&s, &o, NULL) != 0 || get_i(s, 0, &e) != 0)
			_exit(90);
		if (write(up[1], "o", 1) != 1 || read(down[0], &c, 1) != 1)
			_exit(91);
		if (get_i(s, 19999, &e) != 0 ||
		    strcmp(e.cluster_id, "cluster-with-a-longer-name") != 0)
			_exit(92);
		for (i = 30000; i < 31000; i++)
			put_i(s, i, "from-child");
		if (sg_store_flush(s, NULL) != 0)
			_exit(93);
		if (sg_store_stats_get(s, &st, NULL) != 0 ||
		    st.map_size <= (256 << 10))
			_exit(94);
		sg_store_close(s);
		_exit(0);
	}
	assert_true(pid > 0);
	assert_int_equal(read(up[0], &c, 1), 1);
	for (i = 1; i < 20000; i++)
		put_i(f->s, i, "cluster-with-a-longer-name");
	flush_ok(f->s);
	assert_int_equal(write(down[1], "g", 1), 1);
	wait_child_ok(pid);
	assert_int_equal(get_i(f->s, 30999, &e), 0);
	assert_string_equal(e.cluster_id, "from-child");
	close(up[0]);
	close(up[1]);
	close(down[0]);
	close(down[1]);
}

/* --- compaction ---------------------------------------------------------- */

static void
test_compact_drops_expired_and_shrinks_file(void **state)
{
	struct fx *f = *state;
	sg_store_compact_result r;
	sg_store_entry e;
	sg_store_stats st;
	sg_error er;
	int i;

	f->o.ttl_ms = 60000;
	fx_open(f);
	for (i = 0; i < 20000; i++)
		put_i(f->s, i, "cluster-with-a-longer-name-0123456789");
	atomic_fetch_add(&f->now, 60000);
	for (i = 20000; i < 20010; i++)
		put_i(f->s, i, "fresh");
	flush_ok(f->s);
	sg_error_clear(&er);
	if (sg_store_compact(f->s, &r, &er) != 0)
		fail_msg("compact: %s", er.text);
	assert_int_equal(r.expired, 20000);
	assert_int_equal(r.evicted, 0);
	assert_int_equal(r.entries, 10);
	assert_true(r.swapped);
	assert_true(r.generation >= 1);
	assert_true(r.bytes_after < r.bytes_before / 4);
	for (i = 20000; i < 20010; i++)
		assert_int_equal(get_i(f->s, i, &e), 0);
	assert_int_equal(get_i(f->s, 5, &e), SG_ENOTFOUND);
	/* The store works on the new file. */
	put_i(f->s, 1, "after");
	flush_ok(f->s);
	assert_int_equal(get_i(f->s, 1, &e), 0);
	assert_string_equal(e.cluster_id, "after");
	assert_int_equal(sg_store_stats_get(f->s, &st, NULL), 0);
	assert_int_equal(st.entries, 11);
	/* A second compaction in a row works too (txnid parity padding). */
	assert_int_equal(sg_store_compact(f->s, &r, NULL), 0);
	assert_int_equal(r.entries, 11);
	assert_int_equal(get_i(f->s, 1, &e), 0);
}

static void
test_compact_enforces_capacity(void **state)
{
	struct fx *f = *state;
	sg_store_compact_result r;
	sg_store_entry e;
	int i;

	f->o.max_entries = 1000;
	fx_open(f);
	for (i = 0; i < 1000; i++) {
		put_i(f->s, i, "c");
		atomic_fetch_add(&f->now, 1);
	}
	flush_ok(f->s);
	sg_store_close(f->s);
	f->s = NULL;
	f->o.max_entries = 300;		/* a smaller capacity at the next open */
	fx_open(f);
	{
		sg_error ce;
		int crc;

		sg_error_clear(&ce);
		if ((crc = sg_store_compact(f->s, &r, &ce)) != 0)
			fail_msg("compact: %d %s", crc, ce.text);
	}
	assert_int_equal(r.evicted, 700);
	assert_int_equal(r.entries, 300);
	assert_int_equal(get_i(f->s, 699, &e), SG_ENOTFOUND);
	assert_int_equal(get_i(f->s, 700, &e), 0);
}

/*
 * A child writes 20000 entries in flushed chunks and reports each flushed
 * count through a pipe while the parent compacts again and again; every
 * entry the child reported committed must be in the store afterwards.
 */
static void
test_compact_while_another_process_writes_loses_nothing(void **state)
{
	struct fx *f = *state;
	int up[2], compactions = 0, i, n;
	uint64_t reported = 0, v;
	sg_store_entry e;
	pid_t pid;

	f->o.clock = NULL;
	fx_open(f);
	assert_int_equal(pipe(up), 0);
	if ((pid = fork()) == 0) {
		sg_store *s = child_open(f->dir);

		close(up[0]);
		sg_store_stats st;

		for (i = 0; i < 20000; i++) {
			put_i(s, i, "w");
			if (i % 500 == 499) {
				uint64_t done = (uint64_t)i + 1;

				if (sg_store_flush(s, NULL) != 0)
					_exit(91);
				if (write(up[1], &done, 8) != 8)
					_exit(92);
			}
		}
		/* The writer really had to follow at least one swap. */
		if (sg_store_stats_get(s, &st, NULL) != 0 || st.reopens < 1)
			_exit(93);
		sg_store_close(s);
		_exit(0);
	}
	assert_true(pid > 0);
	close(up[1]);
	for (;;) {
		sg_store_compact_result r;
		sg_error er;

		if (sg_store_compact(f->s, &r, &er) != 0)
			fail_msg("compact: %s", er.text);
		compactions++;
		/* Non-blocking-ish: read what is there after each round. */
		n = (int)read(up[0], &v, 8);
		if (n == 0)
			break;
		assert_int_equal(n, 8);
		reported = v;
	}
	while (read(up[0], &v, 8) == 8)
		reported = v;
	wait_child_ok(pid);
	close(up[0]);
	assert_true(compactions >= 2);
	assert_int_equal(reported, 20000);
	for (i = 0; i < 20000; i++)
		if (get_i(f->s, i, &e) != 0)
			fail_msg("entry %d lost (compactions %d)", i, compactions);
}

/* A long-lived reader in another process follows the swap. */
static void
test_reader_process_follows_compaction(void **state)
{
	struct fx *f = *state;
	int up[2], down[2];
	sg_store_entry e;
	sg_store_stats st;
	char c;
	pid_t pid;

	f->o.clock = NULL;
	fx_open(f);
	put_i(f->s, 1, "before");
	flush_ok(f->s);
	assert_int_equal(pipe(up), 0);
	assert_int_equal(pipe(down), 0);
	if ((pid = fork()) == 0) {
		sg_store *s = child_open(f->dir);

		if (get_i(s, 1, &e) != 0)
			_exit(91);
		if (write(up[1], "r", 1) != 1 || read(down[0], &c, 1) != 1)
			_exit(92);
		if (get_i(s, 2, &e) != 0 || strcmp(e.cluster_id, "after") != 0)
			_exit(93);
		if (get_i(s, 1, &e) != 0)
			_exit(94);
		if (sg_store_stats_get(s, &st, NULL) != 0 || st.reopens < 1)
			_exit(95);
		sg_store_close(s);
		_exit(0);
	}
	assert_true(pid > 0);
	assert_int_equal(read(up[0], &c, 1), 1);
	assert_int_equal(sg_store_compact(f->s, NULL, NULL), 0);
	put_i(f->s, 2, "after");
	flush_ok(f->s);
	assert_int_equal(write(down[1], "g", 1), 1);
	wait_child_ok(pid);
	close(up[0]);
	close(up[1]);
	close(down[0]);
	close(down[1]);
}

/* --- damaged files and full disks (issue 12) ----------------------------- */

static void
path_of(char *buf, size_t cap, const struct fx *f, const char *name)
{
	snprintf(buf, cap, "%s/%s", f->dir, name);
}

/* Copy data.mdb (quiescent: flushed) and rename the copy over it. */
static void
replace_data_file(const struct fx *f)
{
	char src[128], dst[128], buf[65536];
	ssize_t n;
	int in, out;

	path_of(src, sizeof(src), f, "data.mdb");
	path_of(dst, sizeof(dst), f, "data.mdb.copy");
	assert_true((in = open(src, O_RDONLY)) >= 0);
	assert_true((out = open(dst, O_WRONLY | O_CREAT | O_TRUNC, 0640)) >= 0);
	while ((n = read(in, buf, sizeof(buf))) > 0)
		assert_int_equal(write(out, buf, (size_t)n), n);
	assert_int_equal(n, 0);
	assert_int_equal(close(in), 0);
	assert_int_equal(close(out), 0);
	assert_int_equal(rename(dst, src), 0);
}

/* After close and open: the write reached the file data.mdb names. */
static void
reopen_sees(struct fx *f, int i, const char *id)
{
	sg_store_entry e;

	sg_store_close(f->s);
	f->s = NULL;
	fx_open(f);
	assert_int_equal(get_i(f->s, i, &e), 0);
	assert_string_equal(e.cluster_id, id);
}

/*
 * A compactor killed between its rename and its generation bump: the
 * generation is unchanged, but the next write transaction finds the
 * mapped inode unlinked and commits into the new file.
 */
static void
test_swap_without_generation_bump_moves_next_write_to_new_file(
    void **state)
{
	struct fx *f = *state;

	fx_open(f);
	put_i(f->s, 1, "before");
	flush_ok(f->s);
	replace_data_file(f);
	put_i(f->s, 2, "after-swap");
	flush_ok(f->s);
	reopen_sees(f, 2, "after-swap");
	reopen_sees(f, 1, "before");
}

/*
 * The same with the old inode kept by another link (so it has links
 * left): the name is looked up within GEN_POLL_MS (100 ms) of writing.
 */
static void
test_swap_of_a_linked_file_is_found_by_name_within_the_poll(void **state)
{
	struct fx *f = *state;
	char data[128], keep[128];

	fx_open(f);
	put_i(f->s, 1, "before");
	flush_ok(f->s);
	path_of(data, sizeof(data), f, "data.mdb");
	path_of(keep, sizeof(keep), f, "data.mdb.keep");
	assert_int_equal(link(data, keep), 0);
	replace_data_file(f);
	usleep(150 * 1000);
	put_i(f->s, 2, "after-swap");
	flush_ok(f->s);
	reopen_sees(f, 2, "after-swap");
	assert_int_equal(unlink(keep), 0);
}

/* A store of n entries, closed. */
static void
fx_fill_close(struct fx *f, int n)
{
	int i;

	fx_open(f);
	for (i = 0; i < n; i++)
		put_i(f->s, i, "c1");
	flush_ok(f->s);
	sg_store_close(f->s);
	f->s = NULL;
}

/* Opening fails with SG_ESTORE and a message naming want and the way out. */
static void
open_refused(struct fx *f, const char *want)
{
	sg_error e;
	int rc;

	sg_error_clear(&e);
	f->o.create = false;
	rc = sg_store_open(&f->s, &f->o, &e);
	assert_int_equal(rc, SG_ESTORE);
	assert_null(f->s);
	if (strstr(e.text, want) == NULL || strstr(e.text, "damaged") == NULL ||
	    strstr(e.text, "hints only") == NULL ||
	    strstr(e.text, "sg-lastcluster load") == NULL)
		fail_msg("message: %s", e.text);
}

static void
overwrite(const struct fx *f, off_t off, size_t n, unsigned char byte)
{
	unsigned char buf[4096];
	char p[128];
	int fd;

	assert_true(n <= sizeof(buf));
	memset(buf, byte, n);
	path_of(p, sizeof(p), f, "data.mdb");
	assert_true((fd = open(p, O_WRONLY)) >= 0);
	assert_int_equal(pwrite(fd, buf, n, off), (ssize_t)n);
	close(fd);
}

static off_t
data_size(const struct fx *f)
{
	struct stat st;
	char p[128];

	path_of(p, sizeof(p), f, "data.mdb");
	assert_int_equal(stat(p, &st), 0);
	return st.st_size;
}

static void
cut_to(const struct fx *f, off_t len)
{
	char p[128];

	path_of(p, sizeof(p), f, "data.mdb");
	assert_int_equal(truncate(p, len), 0);
}

/* Regression: a sparse generation file faulted (SIGBUS) on a full disk. */
static void
test_full_disk_generation_and_lock_files_are_allocated_not_sparse(
    void **state)
{
	struct fx *f = *state;
	struct stat st;
	char p[128];

	fx_open(f);
	path_of(p, sizeof(p), f, "generation");
	assert_int_equal(stat(p, &st), 0);
	assert_int_equal(st.st_size, 4096);
	assert_true((uint64_t)st.st_blocks * 512 >= 4096);
	path_of(p, sizeof(p), f, "lock.mdb");
	assert_int_equal(stat(p, &st), 0);
	assert_true(st.st_size > 0);
	assert_true((uint64_t)st.st_blocks * 512 >= (uint64_t)st.st_size);
}

/* An existing sparse generation file (a store made before the fix). */
static void
test_full_disk_sparse_generation_file_is_filled_at_open(void **state)
{
	struct fx *f = *state;
	struct stat st;
	char p[128];

	fx_fill_close(f, 3);
	path_of(p, sizeof(p), f, "generation");
	assert_int_equal(unlink(p), 0);
	assert_int_equal(close(open(p, O_WRONLY | O_CREAT, 0640)), 0);
	assert_int_equal(truncate(p, 4096), 0);
	assert_int_equal(stat(p, &st), 0);
	assert_int_equal(st.st_blocks, 0);
	fx_open(f);
	assert_int_equal(stat(p, &st), 0);
	assert_true((uint64_t)st.st_blocks * 512 >= 4096);
}

static void
test_damaged_cut_to_half_its_size_is_refused_at_open(void **state)
{
	struct fx *f = *state;

	fx_fill_close(f, 3000);
	cut_to(f, data_size(f) / 2);
	open_refused(f, "shorter than its last page");
}

static void
test_damaged_cut_to_a_few_pages_is_refused_at_open(void **state)
{
	struct fx *f = *state;

	fx_fill_close(f, 3000);
	cut_to(f, 4 * 4096);
	open_refused(f, "shorter than its last page");
}

static void
test_damaged_cut_inside_the_meta_pages_is_refused_at_open(void **state)
{
	struct fx *f = *state;

	fx_fill_close(f, 10);
	cut_to(f, 4096 + 100);
	open_refused(f, "shorter than its meta pages");
}

static void
test_damaged_first_meta_page_is_refused_at_open(void **state)
{
	struct fx *f = *state;

	fx_fill_close(f, 10);
	overwrite(f, 16, 8, 0x5a);	/* magic and version */
	open_refused(f, "bad first meta page");
}

static void
test_damaged_second_meta_page_is_refused_at_open(void **state)
{
	struct fx *f = *state;

	fx_fill_close(f, 10);
	overwrite(f, 4096 + 136, 8, 0xff);	/* last page: out of range */
	open_refused(f, "bad second meta page");
}

/* The main database's root named in the newest meta page, overwritten. */
static void
test_damaged_root_page_is_refused_at_open(void **state)
{
	struct fx *f = *state;
	unsigned char m0[152], m1[152];
	uint64_t t0, t1, root;
	char p[128];
	int fd;

	fx_fill_close(f, 10);
	path_of(p, sizeof(p), f, "data.mdb");
	assert_true((fd = open(p, O_RDONLY)) >= 0);
	assert_int_equal(pread(fd, m0, sizeof(m0), 0), (ssize_t)sizeof(m0));
	assert_int_equal(pread(fd, m1, sizeof(m1), 4096), (ssize_t)sizeof(m1));
	close(fd);
	memcpy(&t0, m0 + 144, 8);
	memcpy(&t1, m1 + 144, 8);
	memcpy(&root, (t1 > t0 ? m1 : m0) + 88 + 40, 8);
	assert_true(root >= 2 && root != UINT64_MAX);
	overwrite(f, (off_t)(root * 4096), 4096, 0xa5);
	open_refused(f, "bad root page");
}

/* An empty data.mdb is LMDB's to initialise, as before. */
static void
test_damaged_check_leaves_an_empty_data_file_to_lmdb(void **state)
{
	struct fx *f = *state;
	char p[128];

	path_of(p, sizeof(p), f, "data.mdb");
	assert_int_equal(close(open(p, O_WRONLY | O_CREAT, 0640)), 0);
	fx_open(f);
	put_i(f->s, 1, "c1");
	flush_ok(f->s);
}

/* --- faults while the store is open (sg-lastcluster(1) FAULTS) ----------- */

/* Wait (bounded, 3 s) until sg_store_connected() is want. */
static bool
wait_connected(sg_store *s, bool want)
{
	int i;

	for (i = 0; i < 300; i++) {
		if (sg_store_connected(s) == want)
			return true;
		usleep(10000);
	}
	return false;
}

static void
test_fault_removed_store_is_disconnected_then_recreated_by_a_write(
    void **state)
{
	struct fx *f = *state;
	sg_store_entry e;
	struct stat st;
	char p[128];
	sg_error err;
	int rc;

	fx_open(f);
	put_i(f->s, 1, "c1");
	flush_ok(f->s);
	assert_true(sg_store_connected(f->s));
	sgt_rmtree(f->dir);
	/* found by the store thread's own check, without any use */
	assert_true(wait_connected(f->s, false));
	path_of(p, sizeof(p), f, "data.mdb");
	assert_int_not_equal(stat(p, &st), 0);	/* idle: not recreated */
	sg_error_clear(&err);
	rc = sg_store_lookup(f->s, "lc:v1:0000000000000000000000000000000000000000000000000000000000000000",
	    SG_LC_KEY_LEN, &e, &err);
	assert_int_not_equal(rc, 0);
	assert_int_not_equal(rc, SG_ENOTFOUND);
	/* the next write makes a new, empty store, as a new process would */
	put_i(f->s, 2, "c2");
	flush_ok(f->s);
	assert_true(sg_store_connected(f->s));
	assert_int_equal(stat(p, &st), 0);
	assert_int_equal(get_i(f->s, 2, &e), 0);
	assert_string_equal(e.cluster_id, "c2");
	assert_int_equal(get_i(f->s, 1, &e), SG_ENOTFOUND);
	/* and what it wrote is in the file by that name: another process
	 * reads it */
	sg_store_close(f->s);
	f->s = NULL;
	fx_open(f);
	assert_int_equal(get_i(f->s, 2, &e), 0);
}

/* A store removed and made again by another hand is followed. */
static void
test_fault_removed_store_made_again_elsewhere_is_reopened(void **state)
{
	struct fx *f = *state;
	sg_store_entry e;
	pid_t pid;
	int status;

	fx_open(f);
	put_i(f->s, 1, "c1");
	flush_ok(f->s);
	sgt_rmtree(f->dir);
	assert_true(wait_connected(f->s, false));
	/* another process makes the store again with one entry */
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		sg_store *c = NULL;
		sg_store_opts o = f->o;
		char k[SG_LC_KEY_LEN + 1];

		o.on_commit = NULL;
		o.clock = NULL;
		key_of(k, 3);
		if (sg_store_open(&c, &o, NULL) != 0 ||
		    sg_store_put(c, k, SG_LC_KEY_LEN, "c3", 2, NULL) != 0 ||
		    sg_store_flush(c, NULL) != 0)
			_exit(1);
		sg_store_close(c);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	assert_true(wait_connected(f->s, true));
	assert_int_equal(get_i(f->s, 3, &e), 0);
	assert_string_equal(e.cluster_id, "c3");
}

/* A lookup on a file cut under the store fails; it does not fault. */
static void
test_fault_cut_under_an_open_store_fails_lookups_not_the_process(
    void **state)
{
	struct fx *f = *state;
	sg_store_entry e;
	sg_error err;
	int i, rc, errors = 0;

	fx_open(f);
	for (i = 0; i < 3000; i++)
		put_i(f->s, i, "c1");
	flush_ok(f->s);
	assert_int_equal(get_i(f->s, 7, &e), 0);
	cut_to(f, 4 * 4096);
	for (i = 0; i < 50; i++) {
		char k[SG_LC_KEY_LEN + 1];

		key_of(k, i);
		sg_error_clear(&err);
		rc = sg_store_lookup(f->s, k, SG_LC_KEY_LEN, &e, &err);
		assert_int_not_equal(rc, 0);
		if (rc != SG_ENOTFOUND)
			errors++;
	}
	assert_true(errors > 0);
	assert_true(wait_connected(f->s, false));
	/* writes fail too, with the way out */
	put_i(f->s, 5000, "c2");
	sg_error_clear(&err);
	assert_int_not_equal(sg_store_flush(f->s, &err), 0);
	if (strstr(err.text, "hints only") == NULL)
		fail_msg("message: %s", err.text);
	/* deleting the damaged file recovers at the next write */
	cut_to(f, 0);
	{
		char p[128];

		path_of(p, sizeof(p), f, "data.mdb");
		assert_int_equal(unlink(p), 0);
	}
	put_i(f->s, 5001, "c3");
	flush_ok(f->s);
	assert_true(sg_store_connected(f->s));
	assert_int_equal(get_i(f->s, 5001, &e), 0);
}

/* Cut while idle: the store thread's check finds it before any lookup. */
static void
test_fault_cut_while_idle_is_found_by_the_store_thread(void **state)
{
	struct fx *f = *state;

	fx_open(f);
	put_i(f->s, 1, "c1");
	flush_ok(f->s);
	assert_true(sg_store_connected(f->s));
	cut_to(f, 4096);
	assert_true(wait_connected(f->s, false));
}

/* Cut to half: every lookup answers (a hit, a miss or an error). */
static void
test_fault_cut_to_half_every_lookup_answers(void **state)
{
	struct fx *f = *state;
	sg_store_entry e;
	int i;

	fx_open(f);
	for (i = 0; i < 3000; i++)
		put_i(f->s, i, "c1");
	flush_ok(f->s);
	cut_to(f, data_size(f) / 2);
	for (i = 0; i < 3000; i++)
		(void)get_i(f->s, i, &e);
	assert_true(wait_connected(f->s, false));
}

/* A SIGBUS outside a store lookup still ends the process. */
static void
test_fault_sigbus_elsewhere_keeps_its_default(void **state)
{
	struct fx *f = *state;
	pid_t pid;
	int status;

	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		sg_store *c = NULL;
		sg_store_opts o = f->o;
		char p[160];
		volatile char *m;
		int fd;

		o.on_commit = NULL;
		o.clock = NULL;
		signal(SIGBUS, SIG_DFL);	/* not cmocka's handler */
		if (sg_store_open(&c, &o, NULL) != 0)
			_exit(2);
		sg_store_close(c);
		snprintf(p, sizeof(p), "%s/other", f->dir);
		if ((fd = open(p, O_RDWR | O_CREAT, 0600)) < 0 ||
		    ftruncate(fd, 8192) != 0)
			_exit(2);
		m = mmap(NULL, 8192, PROT_READ, MAP_SHARED, fd, 0);
		if (m == MAP_FAILED || ftruncate(fd, 0) != 0)
			_exit(2);
		(void)m[4096];
		_exit(0);	/* not reached: the access faults */
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGBUS);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_put_then_lookup_hits_with_write_time),
		T(test_overwrite_replaces_cluster_id),
		T(test_overwrite_with_longer_and_shorter_ids_keeps_one_entry),
		T(test_del_removes_entry),
		T(test_ttl_expired_entry_is_a_miss_and_deleted),
		T(test_write_resets_ttl),
		T(test_lookup_does_not_reset_ttl),
		T(test_expiry_deletion_spares_a_newer_write),
		T(test_capacity_evicts_least_recently_written),
		T(test_capacity_same_millisecond_keeps_commit_order),
		T(test_capacity_clock_step_back_evicts_by_write_time),
		T(test_group_commit_puts_many_writes_in_one_transaction),
		T(test_full_queue_refuses_without_blocking),
		T(test_sync_option_commits_durably),
		T(test_map_full_grows_the_map),
		T(test_map_full_at_maximum_is_an_error_value),
		T(test_iterate_oldest_first_skips_expired),
		T(test_stats_counts_entries_expired_and_oldest),
		T(test_put_at_keeps_the_given_write_time),
		T(test_second_open_in_one_process_is_ebusy),
		T(test_missing_store_without_create_is_enoent),
		T(test_write_by_one_process_visible_to_another),
		T(test_lookup_snapshot_is_renewed_by_another_process_commit),
		T(test_map_grown_by_another_process_is_adopted),
		T(test_compact_drops_expired_and_shrinks_file),
		T(test_compact_enforces_capacity),
		T(test_compact_while_another_process_writes_loses_nothing),
		T(test_reader_process_follows_compaction),
		T(test_swap_without_generation_bump_moves_next_write_to_new_file),
		T(test_swap_of_a_linked_file_is_found_by_name_within_the_poll),
		T(test_full_disk_generation_and_lock_files_are_allocated_not_sparse),
		T(test_full_disk_sparse_generation_file_is_filled_at_open),
		T(test_damaged_cut_to_half_its_size_is_refused_at_open),
		T(test_damaged_cut_to_a_few_pages_is_refused_at_open),
		T(test_damaged_cut_inside_the_meta_pages_is_refused_at_open),
		T(test_damaged_first_meta_page_is_refused_at_open),
		T(test_damaged_second_meta_page_is_refused_at_open),
		T(test_damaged_root_page_is_refused_at_open),
		T(test_damaged_check_leaves_an_empty_data_file_to_lmdb),
		T(test_fault_removed_store_is_disconnected_then_recreated_by_a_write),
		T(test_fault_removed_store_made_again_elsewhere_is_reopened),
		T(test_fault_cut_under_an_open_store_fails_lookups_not_the_process),
		T(test_fault_cut_while_idle_is_found_by_the_store_thread),
		T(test_fault_cut_to_half_every_lookup_answers),
		T(test_fault_sigbus_elsewhere_keeps_its_default),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
