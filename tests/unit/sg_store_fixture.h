/*
 * sg_store_fixture.h — what the store's unit tests share (test_store.c,
 * test_store_lmdb.c, test_store_loop.c, test_store_window.c): a temporary
 * store directory made and removed, options pointing at it, and a commit
 * hook that keeps count of the store thread's commit reports, with a
 * bounded wait for them.  Header only (static functions), included after
 * sg_test.h; a test that uses only part of it is fine (the functions are
 * marked unused).
 */
#ifndef SG_STORE_FIXTURE_H
#define SG_STORE_FIXTURE_H

#include <sys/stat.h>

#include <ftw.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "sg_store.h"

#define SGT_UNUSED	__attribute__((unused))

/* What the commit hook saw, guarded by mu. */
struct sgt_commits {
	pthread_mutex_t	mu;
	uint64_t	commits;	/* reports */
	uint64_t	max_ops;	/* the largest transaction */
	uint64_t	committed;	/* cumulative, committed */
	uint64_t	ops_done;	/* cumulative, committed or failed */
	int		last_rc;
};

static SGT_UNUSED double
sgt_mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static SGT_UNUSED int
sgt_rm_one(const char *path, const struct stat *st, int flag,
    struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

/* A new directory /tmp/sg-test-<tag>-XXXXXX into dir[0..cap). */
static SGT_UNUSED void
sgt_tmpdir(char *dir, size_t cap, const char *tag)
{
	snprintf(dir, cap, "/tmp/sg-test-%s-XXXXXX", tag);
	assert_non_null(mkdtemp(dir));
}

/* Remove dir and everything below it. */
static SGT_UNUSED void
sgt_rmtree(const char *dir)
{
	(void)nftw(dir, sgt_rm_one, 8, FTW_DEPTH | FTW_PHYS);
}

static SGT_UNUSED void
sgt_commit_hook(const sg_store_commit *c, void *arg)
{
	struct sgt_commits *k = arg;

	pthread_mutex_lock(&k->mu);
	k->commits++;
	if (c->ops > k->max_ops)
		k->max_ops = c->ops;
	k->committed = c->committed;
	k->ops_done = c->ops_done;
	k->last_rc = c->rc;
	pthread_mutex_unlock(&k->mu);
}

static SGT_UNUSED void
sgt_commits_init(struct sgt_commits *k)
{
	memset(k, 0, sizeof(*k));
	pthread_mutex_init(&k->mu, NULL);
}

static SGT_UNUSED void
sgt_commits_fini(struct sgt_commits *k)
{
	pthread_mutex_destroy(&k->mu);
}

static SGT_UNUSED uint64_t
sgt_committed(struct sgt_commits *k)
{
	uint64_t n;

	pthread_mutex_lock(&k->mu);
	n = k->committed;
	pthread_mutex_unlock(&k->mu);
	return n;
}

/* Poll (never flush) until n operations are committed; false after
 * secs seconds. */
static SGT_UNUSED bool
sgt_wait_committed(struct sgt_commits *k, uint64_t n, double secs)
{
	double end = sgt_mono_s() + secs;

	while (sgt_committed(k) < n) {
		if (sgt_mono_s() > end)
			return false;
		usleep(1000);
	}
	return true;
}

/* Defaults, a store at dir that is created, and (k not NULL) the hook. */
static SGT_UNUSED void
sgt_opts(sg_store_opts *o, const char *dir, struct sgt_commits *k)
{
	sg_store_opts_init(o);
	o->path = dir;
	o->create = true;
	if (k != NULL) {
		o->on_commit = sgt_commit_hook;
		o->commit_arg = k;
	}
}

/* Open o into *s or fail the test with the store's message. */
static SGT_UNUSED void
sgt_open(sg_store **s, const sg_store_opts *o)
{
	sg_error e;

	sg_error_clear(&e);
	if (sg_store_open(s, o, &e) != 0)
		fail_msg("open %s: %s", o->path, e.text);
}

#endif /* SG_STORE_FIXTURE_H */
