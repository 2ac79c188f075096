/*
 * test_store_fds.c — the LMDB store's private_fds option (sg_store.h): the
 * store thread keeps its own descriptor table and opens every file of the
 * store itself, so the opener's table (/proc/thread-self/fd, read on the
 * opener's thread) holds no data.mdb, lock.mdb or generation while
 * lookups (both kinds), writes, stats, iteration and compaction work; a
 * descriptor the opener closes is not held open by the store thread's
 * copy (close_range(2), or, where that is refused, the table's listing);
 * two processes on one directory see each other's writes; a compaction
 * swap and a map grown by another process are followed by the store
 * thread while the opener's lookups never touch a descriptor; where
 * unshare(2) is refused (a seccomp filter, in a child) the store still
 * works, in the shared table.  The default (the tools) still opens in the
 * caller's table.
 *
 * Children never use cmocka (a failure would run the rest of the suite in
 * the child): they exit with a step number.  Every fork comes before the
 * forking process has a store thread.  Waits are bounded (WAIT_S).
 */
#include "sg_test.h"

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <dirent.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "sg_store_fixture.h"

#define WAIT_S	20	/* polling bound, seconds */

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
	sgt_tmpdir(f->dir, sizeof(f->dir), "fds");
	sgt_opts(&f->o, f->dir, NULL);
	f->o.private_fds = true;
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fx *f = *state;

	sg_store_close(f->s);
	sgt_rmtree(f->dir);
	free(f);
	return 0;
}

/*
 * How many descriptors of the table at fddir name one of the store's files
 * in dir (data.mdb, lock.mdb, generation).  -1 if it cannot be read.
 */
static int
store_files_in(const char *fddir, const char *dir)
{
	static const char *const names[] = { "data.mdb", "lock.mdb",
	    "generation" };
	char path[PATH_MAX], target[PATH_MAX], want[PATH_MAX];
	DIR *d = opendir(fddir);
	struct dirent *de;
	ssize_t n;
	size_t i;
	int found = 0;

	if (d == NULL)
		return -1;
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", fddir, de->d_name);
		if ((n = readlink(path, target, sizeof(target) - 1)) < 0)
			continue;
		target[n] = '\0';
		for (i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
			snprintf(want, sizeof(want), "%s/%s", dir, names[i]);
			found += strcmp(target, want) == 0;
		}
	}
	closedir(d);
	return found;
}

/* The same for the store thread's table (the task named sg-store). */
static int
store_files_in_store_thread(const char *dir)
{
	char path[PATH_MAX], comm[32];
	DIR *d = opendir("/proc/self/task");
	struct dirent *de;
	FILE *fp;
	int found = -1;

	if (d == NULL)
		return -1;
	while (found < 0 && (de = readdir(d)) != NULL) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/task/%s/comm",
		    de->d_name);
		if ((fp = fopen(path, "r")) == NULL)
			continue;
		if (fgets(comm, sizeof(comm), fp) != NULL &&
		    strncmp(comm, "sg-store", 8) == 0) {
			snprintf(path, sizeof(path), "/proc/self/task/%s/fd",
			    de->d_name);
			found = store_files_in(path, dir);
		}
		fclose(fp);
	}
	closedir(d);
	return found;
}

static void
key_of(char k[SG_LC_KEY_LEN + 1], int i)
{
	char aff[32];

	snprintf(aff, sizeof(aff), "session-%d", i);
	assert_int_equal(sg_lc_key(k, "tenant", 6, "model", 5, aff,
	    strlen(aff)), 0);
}

/* Put (flushing while the queue is full); 0 or the error. */
static int
put_i(sg_store *s, int i, const char *id)
{
	char k[SG_LC_KEY_LEN + 1];
	int rc;

	key_of(k, i);
	while ((rc = sg_store_put(s, k, SG_LC_KEY_LEN, id, strlen(id),
	    NULL)) == EAGAIN)
		if (sg_store_flush(s, NULL) != 0)
			return -1;
	return rc;
}

static int
get_i(sg_store *s, int i, sg_store_entry *out)
{
	char k[SG_LC_KEY_LEN + 1];

	key_of(k, i);
	return sg_store_lookup(s, k, SG_LC_KEY_LEN, out, NULL);
}

/* The loop's lookup (sg_store_lookup_start): req->rc. */
static int
get_nowait_i(sg_store *s, int i, sg_store_lookup_req *req)
{
	char k[SG_LC_KEY_LEN + 1];

	key_of(k, i);
	if (sg_store_lookup_start(s, req, k, SG_LC_KEY_LEN,
	    sg_store_mono_ns() + 10000000000ULL, NULL, NULL) != 0)
		return -1;
	return req->rc;
}

/* The loop's lookup of key i, repeated (bounded) until it finds id. */
static bool
nowait_finds(sg_store *s, int i, const char *id)
{
	double end = sgt_mono_s() + WAIT_S;
	sg_store_lookup_req req;

	do {
		if (get_nowait_i(s, i, &req) == 0 &&
		    strcmp(req.entry.cluster_id, id) == 0)
			return true;
		usleep(1000);
	} while (sgt_mono_s() < end);
	return false;
}

static int
count_fn(const sg_store_entry *e, void *arg)
{
	(void)e;
	++*(int *)arg;
	return 0;
}

/* sg_store_open() of dir with private_fds (or not), for a child. */
static sg_store *
child_open(const char *dir, bool private_fds, uint64_t map_size)
{
	sg_store_opts o;
	sg_store *s = NULL;

	sgt_opts(&o, dir, NULL);
	o.private_fds = private_fds;
	if (map_size > 0)
		o.map_size = map_size;
	if (sg_store_open(&s, &o, NULL) != 0)
		_exit(80);
	return s;
}

static void
wait_child_ok(pid_t pid)
{
	int st = 0;

	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
}

/*
 * With the option, the opener's table holds none of the store's files (the
 * store thread's does: data.mdb and lock.mdb at least), and everything a
 * caller does works: writes, both lookups, stats, iteration, compaction
 * (and lookups after the swap it made).  Fails with the option ignored
 * (three files in the opener's table).
 */
static void
test_private_fds_opener_table_holds_no_store_file(void **state)
{
	struct fx *f = *state;
	sg_store_compact_result r;
	sg_store_lookup_req req;
	sg_store_stats st;
	sg_store_entry e;
	int i, n = 0;

	sgt_open(&f->s, &f->o);
	assert_int_equal(store_files_in("/proc/thread-self/fd", f->dir), 0);
	assert_true(store_files_in_store_thread(f->dir) >= 2);
	for (i = 0; i < 50; i++)
		assert_int_equal(put_i(f->s, i, "c-one"), 0);
	assert_int_equal(sg_store_flush(f->s, NULL), 0);
	assert_int_equal(get_i(f->s, 7, &e), 0);
	assert_string_equal(e.cluster_id, "c-one");
	assert_true(nowait_finds(f->s, 8, "c-one"));
	assert_int_equal(get_nowait_i(f->s, 1000, &req), SG_ENOTFOUND);
	assert_int_equal(sg_store_stats_get(f->s, &st, NULL), 0);
	assert_int_equal(st.entries, 50);
	assert_true(st.file_size > 0);
	assert_int_equal(sg_store_iterate(f->s, true, count_fn, &n, NULL), 0);
	assert_int_equal(n, 50);
	memset(&r, 0, sizeof(r));
	assert_int_equal(sg_store_compact(f->s, &r, NULL), 0);
	assert_true(r.swapped);
	assert_true(nowait_finds(f->s, 9, "c-one"));
	assert_int_equal(store_files_in("/proc/thread-self/fd", f->dir), 0);
}

/* The default (the tools): the store's files are in the caller's table. */
static void
test_default_opens_in_the_callers_table(void **state)
{
	struct fx *f = *state;

	f->o.private_fds = false;
	sgt_open(&f->s, &f->o);
	/* generation, lock.mdb, data.mdb (LMDB opens it twice) */
	assert_true(store_files_in("/proc/thread-self/fd", f->dir) >= 3);
}

/*
 * read_fd reaches end of file within WAIT_S: every write end of its pipe
 * is closed, in every descriptor table.
 */
static bool
pipe_hangs_up(int read_fd)
{
	struct pollfd p = { .fd = read_fd, .events = POLLIN };
	char c;

	return poll(&p, 1, WAIT_S * 1000) == 1 && read(read_fd, &c, 1) == 0;
}

/*
 * A pipe's write end opened before the store and closed by the opener
 * after it: the reader sees end of file, so the store thread's copy of the
 * table does not hold it (as it would hold a client's socket open past
 * the loop's close).  Fails without the close_range() after the unshare.
 */
static void
test_private_fds_descriptor_closed_by_the_opener_is_not_held(void **state)
{
	struct fx *f = *state;
	int p[2];

	assert_int_equal(pipe(p), 0);
	sgt_open(&f->s, &f->o);
	close(p[1]);
	assert_true(pipe_hangs_up(p[0]));
	close(p[0]);
}

/*
 * Two processes, both with the option, on one directory: each sees the
 * other's writes, through both kinds of lookup.
 */
static void
test_private_fds_two_processes_see_each_others_writes(void **state)
{
	struct fx *f = *state;
	int up[2], down[2];
	sg_store_entry e;
	char c;
	pid_t pid;

	assert_int_equal(pipe(up), 0);
	assert_int_equal(pipe(down), 0);
	if ((pid = fork()) == 0) {
		sg_store *s;
		int i;

		if (read(down[0], &c, 1) != 1)
			_exit(90);
		s = child_open(f->dir, true, 0);
		for (i = 0; i < 100; i++)
			if (put_i(s, i, "from-child") != 0)
				_exit(91);
		if (sg_store_flush(s, NULL) != 0 ||
		    write(up[1], "w", 1) != 1 || read(down[0], &c, 1) != 1)
			_exit(92);
		if (!nowait_finds(s, 1000, "from-parent"))
			_exit(93);
		sg_store_close(s);
		_exit(0);
	}
	assert_true(pid > 0);
	sgt_open(&f->s, &f->o);
	assert_int_equal(write(down[1], "o", 1), 1);
	assert_int_equal(read(up[0], &c, 1), 1);
	assert_int_equal(get_i(f->s, 42, &e), 0);
	assert_string_equal(e.cluster_id, "from-child");
	assert_true(nowait_finds(f->s, 43, "from-child"));
	assert_int_equal(put_i(f->s, 1000, "from-parent"), 0);
	assert_int_equal(sg_store_flush(f->s, NULL), 0);
	assert_int_equal(write(down[1], "r", 1), 1);
	wait_child_ok(pid);
	close(up[0]);
	close(up[1]);
	close(down[0]);
	close(down[1]);
}

/*
 * Another process compacts (the swap renames a new data.mdb over the old)
 * and then writes: its write is only in the new file, so the opener's
 * loop lookups find it once the store thread has reopened (asked by the
 * first lookup that saw the generation move; meanwhile they read the old
 * file), and stats show the reopen and the new generation.
 */
static void
test_private_fds_follows_a_compaction_by_another_process(void **state)
{
	struct fx *f = *state;
	sg_store_stats st;
	sg_store_entry e;
	uint64_t gen = 0;
	int up[2], down[2];
	char c;
	pid_t pid;

	assert_int_equal(pipe(up), 0);
	assert_int_equal(pipe(down), 0);
	if ((pid = fork()) == 0) {
		sg_store_compact_result r;
		sg_store *s;

		if (read(down[0], &c, 1) != 1)
			_exit(90);
		s = child_open(f->dir, false, 0);
		memset(&r, 0, sizeof(r));
		if (sg_store_compact(s, &r, NULL) != 0 || !r.swapped)
			_exit(91);
		if (put_i(s, 2, "after-swap") != 0 ||
		    sg_store_flush(s, NULL) != 0)
			_exit(92);
		if (write(up[1], &r.generation, sizeof(r.generation)) !=
		    (ssize_t)sizeof(r.generation))
			_exit(93);
		sg_store_close(s);
		_exit(0);
	}
	assert_true(pid > 0);
	sgt_open(&f->s, &f->o);
	assert_int_equal(put_i(f->s, 1, "before-swap"), 0);
	assert_int_equal(sg_store_flush(f->s, NULL), 0);
	assert_true(nowait_finds(f->s, 1, "before-swap"));
	assert_int_equal(write(down[1], "c", 1), 1);
	assert_int_equal(read(up[0], &gen, sizeof(gen)), (ssize_t)sizeof(gen));
	wait_child_ok(pid);
	/* The tools' lookup too leaves the reopen to the store thread. */
	(void)get_i(f->s, 2, &e);
	assert_true(nowait_finds(f->s, 2, "after-swap"));
	assert_true(nowait_finds(f->s, 1, "before-swap"));
	assert_int_equal(sg_store_stats_get(f->s, &st, NULL), 0);
	assert_true(st.reopens >= 1);
	assert_int_equal(st.generation, gen);
	assert_int_equal(store_files_in("/proc/thread-self/fd", f->dir), 0);
	close(up[0]);
	close(up[1]);
	close(down[0]);
	close(down[1]);
}

/*
 * Another process grows the map far beyond what the opener mapped: the
 * opener's lookups (MDB_MAP_RESIZED on renewing) ask the store thread to
 * adopt the new size, and then find the entries past the old map; the
 * opener then writes into the grown map.
 */
static void
test_private_fds_adopts_a_map_grown_by_another_process(void **state)
{
	struct fx *f = *state;
	sg_store_stats st;
	int up[2], down[2];
	char c;
	pid_t pid;

	assert_int_equal(pipe(up), 0);
	assert_int_equal(pipe(down), 0);
	if ((pid = fork()) == 0) {
		sg_store *s;
		int i;

		if (read(down[0], &c, 1) != 1)
			_exit(90);
		s = child_open(f->dir, false, 256 << 10);
		for (i = 1; i < 20000; i++)
			if (put_i(s, i, "cluster-with-a-longer-name") != 0)
				_exit(91);
		if (sg_store_flush(s, NULL) != 0 ||
		    write(up[1], "g", 1) != 1)
			_exit(92);
		sg_store_close(s);
		_exit(0);
	}
	assert_true(pid > 0);
	f->o.map_size = 256 << 10;
	sgt_open(&f->s, &f->o);
	assert_int_equal(put_i(f->s, 0, "small"), 0);
	assert_int_equal(sg_store_flush(f->s, NULL), 0);
	assert_true(nowait_finds(f->s, 0, "small"));
	assert_int_equal(write(down[1], "o", 1), 1);
	assert_int_equal(read(up[0], &c, 1), 1);
	wait_child_ok(pid);
	assert_true(nowait_finds(f->s, 19999, "cluster-with-a-longer-name"));
	assert_int_equal(sg_store_stats_get(f->s, &st, NULL), 0);
	assert_true(st.map_size > (256 << 10));
	assert_int_equal(put_i(f->s, 30000, "after-grow"), 0);
	assert_int_equal(sg_store_flush(f->s, NULL), 0);
	assert_true(nowait_finds(f->s, 30000, "after-grow"));
	close(up[0]);
	close(up[1]);
	close(down[0]);
	close(down[1]);
}

/*
 * A seccomp filter (cannot be undone: in a child) that makes system call
 * nr fail with errno e.  True if it is in and nr fails so.
 */
static bool
deny_syscall(long nr, int e)
{
	struct sock_filter flt[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
		    offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)nr, 0, 1),
		BPF_STMT(BPF_RET | BPF_K,
		    SECCOMP_RET_ERRNO | ((unsigned)e & SECCOMP_RET_DATA)),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { sizeof(flt) / sizeof(flt[0]), flt };

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
	    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
		return false;
	errno = 0;
	return syscall(nr, 0, 0, 0) == -1 && errno == e;
}

/* The child's part of the next test: a step number on failure. */
static int
no_unshare_child(const char *dir)
{
	sg_store_compact_result r;
	sg_store_entry e;
	sg_store *s;
	int i;

	if (!deny_syscall(SYS_unshare, EPERM))
		return 2;
	s = child_open(dir, true, 0);
	/* The table stays shared: the store thread's files are seen here. */
	if (store_files_in("/proc/thread-self/fd", dir) < 3)
		return 10;
	for (i = 0; i < 20; i++)
		if (put_i(s, i, "shared-table") != 0)
			return 11;
	if (sg_store_flush(s, NULL) != 0 || get_i(s, 5, &e) != 0 ||
	    strcmp(e.cluster_id, "shared-table") != 0)
		return 12;
	if (!nowait_finds(s, 6, "shared-table"))
		return 13;
	memset(&r, 0, sizeof(r));
	if (sg_store_compact(s, &r, NULL) != 0 || !r.swapped ||
	    !nowait_finds(s, 7, "shared-table"))
		return 14;
	sg_store_close(s);
	return 0;
}

/*
 * Where unshare(2) is refused (EPERM from a seccomp filter, as a sandbox
 * would), the option falls back to the shared table silently: the open
 * succeeds, the store's files are in the opener's table, and writes,
 * lookups and a compaction work.  (Fails with the refusal made an open
 * error, or with a close_range() that ran on the shared table: the
 * child's own descriptors would be gone.)
 */
static void
test_private_fds_without_unshare_falls_back_to_the_shared_table(
    void **state)
{
	struct fx *f = *state;
	pid_t pid;
	int st = 0;

	fflush(NULL);
	if ((pid = fork()) == 0)
		_exit(no_unshare_child(f->dir));
	assert_true(pid > 0);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	if (WEXITSTATUS(st) == 2)
		skip();		/* no seccomp here: nothing to show */
	assert_int_equal(WEXITSTATUS(st), 0);
}

static int
no_close_range_child(const char *dir)
{
	sg_store_entry e;
	sg_store *s;
	int p[2];

	if (pipe(p) != 0)
		return 3;
	if (!deny_syscall(SYS_close_range, ENOSYS))
		return 2;
	s = child_open(dir, true, 0);
	close(p[1]);
	if (!pipe_hangs_up(p[0]))
		return 10;
	if (store_files_in("/proc/thread-self/fd", dir) != 0)
		return 11;
	if (put_i(s, 1, "listed") != 0 || sg_store_flush(s, NULL) != 0 ||
	    get_i(s, 1, &e) != 0)
		return 12;
	sg_store_close(s);
	return 0;
}

/*
 * Where close_range(2) is refused (ENOSYS: an older kernel, or a filter),
 * the store thread closes what it does not own by its table's listing: a
 * pipe's write end closed by the opener still reaches end of file, and
 * the store works.  Fails without the listing fallback.
 */
static void
test_private_fds_without_close_range_closes_by_listing(void **state)
{
	struct fx *f = *state;
	pid_t pid;
	int st = 0;

	fflush(NULL);
	if ((pid = fork()) == 0)
		_exit(no_close_range_child(f->dir));
	assert_true(pid > 0);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	if (WEXITSTATUS(st) == 2)
		skip();
	assert_int_equal(WEXITSTATUS(st), 0);
}

/* An open that fails on the store thread reports through sg_error. */
static void
test_private_fds_open_error_is_returned(void **state)
{
	struct fx *f = *state;
	char path[PATH_MAX];
	sg_error e;
	FILE *fp;

	snprintf(path, sizeof(path), "%s/data.mdb", f->dir);
	assert_non_null(fp = fopen(path, "w"));
	assert_int_equal(fputs("not an LMDB file, not at all, not even close "
	    "to one, and long enough to be read as a meta page header",
	    fp) >= 0, 1);
	assert_int_equal(fclose(fp), 0);
	sg_error_clear(&e);
	assert_int_equal(sg_store_open(&f->s, &f->o, &e), SG_ESTORE);
	assert_null(f->s);
	assert_non_null(strstr(e.text, "damaged"));
}

#define T(fn)	cmocka_unit_test_setup_teardown(fn, setup, teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_private_fds_opener_table_holds_no_store_file),
		T(test_default_opens_in_the_callers_table),
		T(test_private_fds_descriptor_closed_by_the_opener_is_not_held),
		T(test_private_fds_two_processes_see_each_others_writes),
		T(test_private_fds_follows_a_compaction_by_another_process),
		T(test_private_fds_adopts_a_map_grown_by_another_process),
		T(test_private_fds_without_unshare_falls_back_to_the_shared_table),
		T(test_private_fds_without_close_range_closes_by_listing),
		T(test_private_fds_open_error_is_returned),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
