/*
 * store.c — `sg-bench store`: the last-cluster store (sg_store.h, LMDB
 * backend) next to the raw LMDB loops it is built on, and next to Redis as
 * the multi-host alternative (sg-bench(1)).
 *
 * Measurements, each repeated --runs times (median of the runs reported,
 * with the coefficient of variation across runs):
 *   lookup   per-call latency of sg_store_lookup() on a store of --entries
 *            entries, random existing keys, against a raw loop
 *            mdb_txn_renew + mdb_get + mdb_txn_reset on the same file (the
 *            store is closed while the raw loop runs: one environment per
 *            process); the order alternates between runs.  Goal C1:
 *            p50 <= 1.3x raw, p99 < 10 us.
 *   write    throughput of sg_store_put() (group commit, default MDB_NOSYNC
 *            mode) of new keys into the full store (each write also evicts
 *            one entry), from the first enqueue to the end of the flush.
 *            Goal > 100000 writes/s.  The caller-side enqueue time is
 *            reported too.
 *   sync     the same with the sync option (every group commit durable)
 *            and batch_max B against a raw loop of B mdb_put per durable
 *            transaction on an environment of the same size: equal
 *            batches (B = --batch, or 1000).  Goal: >= 0.9x raw.
 *   redis    GET and SET with one synchronous hiredis client against a
 *            redis-server started here on a free loopback port (or
 *            --redis HOST:PORT), same keys and values; skipped with a
 *            message when redis-server is not installed.
 * Timing: clock_gettime(CLOCK_MONOTONIC) around every call (the ~20 ns of
 * the two reads is in both sides of every ratio).
 */
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>

#include <netinet/in.h>
#include <arpa/inet.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>
#include <lmdb.h>

#include "sg_store.h"
#include "sg_store_internal.h"
#include "sg-bench/bench.h"

#define RAW_DB		"lc1"		/* sg_store_lmdb.c's main database */
#define CLUSTER_ID	"cluster-us-east-2a"
#define MAXRUNS		25

struct opts {
	uint64_t	 entries;
	uint64_t	 lookups;
	uint64_t	 writes;
	uint64_t	 sync_writes;
	int		 runs;
	const char	*dir;
	const char	*redis;		/* "host:port", or NULL: start one */
	bool		 no_redis;
	bool		 json;
};

struct pct {
	double	p50, p99, mean;	/* ns */
};

static uint64_t
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static int
cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

static int
cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static struct pct
percentiles(uint32_t *s, size_t n)
{
	struct pct p = { 0, 0, 0 };
	double sum = 0;
	size_t i;

	if (n == 0)
		return p;
	qsort(s, n, sizeof(*s), cmp_u32);
	for (i = 0; i < n; i++)
		sum += s[i];
	p.p50 = s[n / 2];
	p.p99 = s[(size_t)((double)n * 0.99)];
	p.mean = sum / (double)n;
	return p;
}

/* Median and coefficient of variation of v[0..n) (sorts a copy). */
static double
median(const double *v, int n, double *cv)
{
	double tmp[MAXRUNS], mean = 0, var = 0;
	int i;

	memcpy(tmp, v, (size_t)n * sizeof(*v));
	qsort(tmp, (size_t)n, sizeof(*tmp), cmp_dbl);
	for (i = 0; i < n; i++)
		mean += v[i];
	mean /= n;
	for (i = 0; i < n; i++)
		var += (v[i] - mean) * (v[i] - mean);
	if (cv != NULL)
		*cv = n > 1 && mean != 0 ? sqrt(var / (n - 1)) / mean : 0;
	return n % 2 ? tmp[n / 2] : (tmp[n / 2 - 1] + tmp[n / 2]) / 2;
}

/* The smallest and largest of v[0..n). */
static void
minmax(const double *v, int n, double *lo, double *hi)
{
	int i;

	*lo = *hi = n > 0 ? v[0] : 0;
	for (i = 1; i < n; i++) {
		if (v[i] < *lo)
			*lo = v[i];
		if (v[i] > *hi)
			*hi = v[i];
	}
}

/* splitmix64: deterministic keys and orders. */
static uint64_t
mix(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static void
key_of(char k[SG_LC_KEY_LEN + 1], uint64_t i)
{
	char aff[32];
	int n = snprintf(aff, sizeof(aff), "bench-session-%llu",
	    (unsigned long long)i);

	sg_lc_key(k, "bench-tenant", 12, "bench-model", 11, aff, (size_t)n);
}

static int
rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static void
rm_rf(const char *dir)
{
	nftw(dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
}

static unsigned batch_opt;	/* --batch: the store's batch_max, 0 = default */
static uint64_t sync_commits;	/* the store's durable commits, every round */

static int
store_open(sg_store **s, const char *dir, bool sync, uint64_t max_entries)
{
	sg_store_opts o;
	sg_error e;
	int rc;

	sg_store_opts_init(&o);
	o.path = dir;
	o.create = true;
	o.sync = sync;
	o.max_entries = max_entries;
	o.map_size = 256ULL << 20;
	o.queue_max = 1 << 20;
	if (batch_opt > 0)
		o.batch_max = batch_opt;
	sg_error_clear(&e);
	if ((rc = sg_store_open(s, &o, &e)) != 0)
		fprintf(stderr, "sg-bench: store: %s\n", e.text);
	return rc;
}

static int
put_all(sg_store *s, char (*keys)[SG_LC_KEY_LEN + 1], uint64_t from,
    uint64_t to, uint32_t *enq_ns)
{
	sg_error e;
	uint64_t i;
	int rc;

	for (i = from; i < to; i++) {
		uint64_t t0 = now_ns();

		rc = sg_store_put(s, keys[i], SG_LC_KEY_LEN, CLUSTER_ID,
		    sizeof(CLUSTER_ID) - 1, &e);
		if (enq_ns != NULL)
			enq_ns[i - from] = (uint32_t)(now_ns() - t0);
		if (rc == EAGAIN) {
			if ((rc = sg_store_flush(s, &e)) != 0)
				break;
			i--;
			continue;
		}
		if (rc != 0)
			break;
	}
	if (rc == 0)
		rc = sg_store_flush(s, &e);
	if (rc != 0)
		fprintf(stderr, "sg-bench: put: %s\n", e.text);
	return rc;
}

/* A page-for-page copy of the environment in dir (no compaction). */
static int
copy_env(const char *dir, const char *to)
{
	MDB_env *env = NULL;
	int rc;

	rm_rf(to);
	if (mkdir(to, 0700) != 0) {
		fprintf(stderr, "sg-bench: mkdir %s: %s\n", to, strerror(errno));
		return errno;
	}
	if ((rc = mdb_env_create(&env)) != 0 ||
	    (rc = mdb_env_set_maxdbs(env, 4)) != 0 ||
	    (rc = mdb_env_set_mapsize(env, 256ULL << 20)) != 0 ||
	    (rc = mdb_env_open(env, dir, MDB_RDONLY, 0640)) != 0 ||
	    (rc = mdb_env_copy2(env, to, 0)) != 0)
		fprintf(stderr, "sg-bench: copy: %s\n", mdb_strerror(rc));
	mdb_env_close(env);
	return rc;
}

/* --- lookups ------------------------------------------------------------- */

#define CHUNK	500	/* lookups per turn when interleaving */

struct raw_reader {
	MDB_env		*env;
	MDB_txn		*txn;
	MDB_dbi		 dbi;
};

static int
raw_open(struct raw_reader *r, const char *dir)
{
	int rc;

	memset(r, 0, sizeof(*r));
	if ((rc = mdb_env_create(&r->env)) != 0 ||
	    (rc = mdb_env_set_maxdbs(r->env, 4)) != 0 ||
	    (rc = mdb_env_set_mapsize(r->env, 256ULL << 20)) != 0 ||
	    (rc = mdb_env_open(r->env, dir, MDB_NOTLS | MDB_NOSYNC, 0640)) != 0 ||
	    (rc = mdb_txn_begin(r->env, NULL, MDB_RDONLY, &r->txn)) != 0 ||
	    (rc = mdb_dbi_open(r->txn, RAW_DB, 0, &r->dbi)) != 0)
		goto fail;
	/* Commit keeps the handle (a reset would drop it). */
	rc = mdb_txn_commit(r->txn);
	r->txn = NULL;
	if (rc != 0 || (rc = mdb_txn_begin(r->env, NULL, MDB_RDONLY,
	    &r->txn)) != 0)
		goto fail;
	mdb_txn_reset(r->txn);
	return 0;
fail:
	fprintf(stderr, "sg-bench: raw reader: %s\n", mdb_strerror(rc));
	if (r->txn != NULL)
		mdb_txn_abort(r->txn);
	mdb_env_close(r->env);
	return rc;
}

static void
raw_close(struct raw_reader *r)
{
	mdb_txn_abort(r->txn);
	mdb_env_close(r->env);
}

/* CHUNK lookups through the store, each timed. */
static int
turn_ours(sg_store *s, char (*keys)[SG_LC_KEY_LEN + 1], const uint32_t *order,
    uint64_t from, uint64_t n, uint32_t *ns)
{
	sg_store_entry ent;
	uint64_t i;
	int rc;

	for (i = from; i < from + n; i++) {
		char key[SG_LC_KEY_LEN + 1];
		uint64_t t0;

		/* The caller has its key at hand (it just derived it). */
		memcpy(key, keys[order[i]], sizeof(key));
		t0 = now_ns();
		rc = sg_store_lookup(s, key, SG_LC_KEY_LEN, &ent, NULL);
		ns[i] = (uint32_t)(now_ns() - t0);
		if (rc != 0) {
			fprintf(stderr, "sg-bench: lookup: %s\n",
			    sg_strerror(rc));
			return rc;
		}
	}
	return 0;
}

/* The same CHUNK lookups as renew + get + reset on the raw environment. */
static int
turn_raw(struct raw_reader *r, unsigned char (*digests)[SGI_DIGEST_LEN],
    const uint32_t *order, uint64_t from, uint64_t n, uint32_t *ns)
{
	MDB_val k, v;
	uint64_t i;
	int rc;

	k.mv_size = SGI_DIGEST_LEN;
	for (i = from; i < from + n; i++) {
		unsigned char dig[SGI_DIGEST_LEN];
		uint64_t t0;

		memcpy(dig, digests[order[i]], sizeof(dig));
		t0 = now_ns();
		if ((rc = mdb_txn_renew(r->txn)) != 0)
			break;
		k.mv_data = dig;
		rc = mdb_get(r->txn, r->dbi, &k, &v);
		mdb_txn_reset(r->txn);
		ns[i] = (uint32_t)(now_ns() - t0);
		if (rc != 0)
			break;
	}
	if (rc != 0)
		fprintf(stderr, "sg-bench: raw lookup: %s\n", mdb_strerror(rc));
	return rc;
}

/*
 * One lookup run: the store on dir, the raw loop on rawdir (a page-for-page
 * copy of it: one process may not open the same environment twice), taking
 * turns of CHUNK lookups of the same keys, the order of the pair
 * alternating, so that noise on this machine hits both alike.
 */
static int
lookup_run(const char *dir, const char *rawdir,
    char (*keys)[SG_LC_KEY_LEN + 1], unsigned char (*digests)[SGI_DIGEST_LEN],
    const uint32_t *order, uint64_t n, uint32_t *ns_ours, uint32_t *ns_raw,
    struct pct *po, struct pct *pr)
{
	struct raw_reader r;
	sg_store *s = NULL;
	uint64_t from, c;
	int rc;

	if ((rc = store_open(&s, dir, false, UINT64_MAX)) != 0)
		return rc;
	if ((rc = raw_open(&r, rawdir)) != 0) {
		sg_store_close(s);
		return rc;
	}
	/* Warm both: a quarter of the keys, not timed for the report. */
	if ((rc = turn_ours(s, keys, order, 0, n / 4, ns_ours)) != 0 ||
	    (rc = turn_raw(&r, digests, order, 0, n / 4, ns_raw)) != 0)
		goto out;
	for (from = 0, c = 0; from < n && rc == 0; from += CHUNK, c++) {
		uint64_t len = n - from < CHUNK ? n - from : CHUNK;

		if (c % 2 == 0) {
			rc = turn_ours(s, keys, order, from, len, ns_ours);
			if (rc == 0)
				rc = turn_raw(&r, digests, order, from, len,
				    ns_raw);
		} else {
			rc = turn_raw(&r, digests, order, from, len, ns_raw);
			if (rc == 0)
				rc = turn_ours(s, keys, order, from, len,
				    ns_ours);
		}
	}
	*po = percentiles(ns_ours, n);
	*pr = percentiles(ns_raw, n);
out:
	raw_close(&r);
	sg_store_close(s);
	return rc;
}

/* --- raw durable writes -------------------------------------------------- */

/*
 * The raw side of the durable comparison, two forms, batch puts per
 * durable transaction (the store's batch_max), on a database prefilled
 * with prefill entries in large non-durable transactions:
 *   - layout: what LMDB itself must do to hold the store's records, the
 *     least work for the same job: the three named databases of
 *     sg_store_lmdb.c, per put the record (MDB_NOOVERWRITE: one descent;
 *     an existing key has its old time-index key deleted and is
 *     overwritten), its time-index key appended, and at capacity the
 *     oldest entry evicted from both; the sequence number read and
 *     written once per transaction.  This is the floor of the ratio.
 *   - plain: one mdb_put of a random 32-byte key per write into one
 *     database that only grows (no index, no eviction), for reference.
 */
struct rawdb {
	MDB_env		*env;
	MDB_dbi		 main, time, meta;
	uint64_t	 seq, count, max, now;
	bool		 layout;
};

static int
raw_one(struct rawdb *r, MDB_txn *txn, MDB_cursor *ct, uint64_t *seed)
{
	unsigned char key[32], val[16 + sizeof(CLUSTER_ID) - 1], ik[16];
	MDB_val k = { sizeof(key), key }, v = { sizeof(val), val };
	MDB_val x = { sizeof(ik), ik }, d;
	uint64_t rnd[4], seq = ++r->seq;
	int rc, i;

	for (i = 0; i < 4; i++)
		rnd[i] = mix(seed);
	memcpy(key, rnd, sizeof(key));
	memcpy(val, &r->now, 8);
	memcpy(val + 8, &seq, 8);
	memcpy(val + 16, CLUSTER_ID, sizeof(CLUSTER_ID) - 1);
	if (!r->layout)
		return mdb_put(txn, r->main, &k, &v, 0);
	rc = mdb_put(txn, r->main, &k, &v, MDB_NOOVERWRITE);
	if (rc == MDB_KEYEXIST) {	/* not with random keys, but priced */
		uint64_t ot, os;

		memcpy(&ot, v.mv_data, 8);
		memcpy(&os, (const char *)v.mv_data + 8, 8);
		for (i = 0; i < 8; i++) {
			ik[i] = (unsigned char)(ot >> (56 - 8 * i));
			ik[8 + i] = (unsigned char)(os >> (56 - 8 * i));
		}
		if ((rc = mdb_del(txn, r->time, &x, NULL)) != 0 &&
		    rc != MDB_NOTFOUND)
			return rc;
		v.mv_size = sizeof(val);
		v.mv_data = val;
		rc = mdb_put(txn, r->main, &k, &v, 0);
	} else if (rc == 0)
		r->count++;
	if (rc != 0)
		return rc;
	for (i = 0; i < 8; i++) {
		ik[i] = (unsigned char)(r->now >> (56 - 8 * i));
		ik[8 + i] = (unsigned char)(seq >> (56 - 8 * i));
	}
	if ((rc = mdb_cursor_put(ct, &x, &k, MDB_APPEND)) != 0)
		return rc;
	while (r->count > r->max) {
		if ((rc = mdb_cursor_get(ct, &x, &d, MDB_FIRST)) != 0)
			return rc;
		if ((rc = mdb_del(txn, r->main, &d, NULL)) != 0 ||
		    (rc = mdb_cursor_del(ct, 0)) != 0)
			return rc;
		r->count--;
	}
	return 0;
}

/* One transaction of n raw writes. */
static int
raw_txn(struct rawdb *r, uint64_t n, uint64_t *seed)
{
	MDB_txn *txn = NULL;
	MDB_cursor *ct = NULL;
	MDB_val mk = { 3, (void *)(uintptr_t)"seq" }, mv;
	uint64_t i;
	int rc;

	if ((rc = mdb_txn_begin(r->env, NULL, 0, &txn)) != 0)
		return rc;
	if (r->layout) {
		if ((rc = mdb_get(txn, r->meta, &mk, &mv)) == 0 &&
		    mv.mv_size == 8)
			memcpy(&r->seq, mv.mv_data, 8);
		else if (rc != MDB_NOTFOUND)
			goto out;
		if ((rc = mdb_cursor_open(txn, r->time, &ct)) != 0)
			goto out;
	}
	r->now++;
	for (i = 0; i < n; i++)
		if ((rc = raw_one(r, txn, ct, seed)) != 0)
			goto out;
	if (r->layout) {
		mv.mv_size = 8;
		mv.mv_data = &r->seq;
		if ((rc = mdb_put(txn, r->meta, &mk, &mv, 0)) != 0)
			goto out;
	}
	if (ct != NULL)
		mdb_cursor_close(ct);
	return mdb_txn_commit(txn);
out:
	if (ct != NULL)
		mdb_cursor_close(ct);
	mdb_txn_abort(txn);
	return rc;
}

static int
raw_dbs(struct rawdb *r)
{
	MDB_txn *txn;
	unsigned f = MDB_CREATE;
	int rc;

	if ((rc = mdb_txn_begin(r->env, NULL, 0, &txn)) != 0)
		return rc;
	if (!r->layout)
		rc = mdb_dbi_open(txn, NULL, 0, &r->main);
	else if ((rc = mdb_dbi_open(txn, RAW_DB, f, &r->main)) == 0 &&
	    (rc = mdb_dbi_open(txn, RAW_DB ".time", f, &r->time)) == 0)
		rc = mdb_dbi_open(txn, "meta", f, &r->meta);
	if (rc != 0) {
		mdb_txn_abort(txn);
		return rc;
	}
	return mdb_txn_commit(txn);
}

static int
raw_sync_puts(const char *dir, bool layout, uint64_t prefill, uint64_t n,
    uint64_t batch, double *rate)
{
	struct rawdb r;
	uint64_t seed = 42, i, t0, chunk;
	int rc;

	memset(&r, 0, sizeof(r));
	r.layout = layout;
	r.max = prefill;
	r.now = 1700000000000ULL;
	if ((rc = mdb_env_create(&r.env)) != 0 ||
	    (rc = mdb_env_set_maxdbs(r.env, 4)) != 0 ||
	    (rc = mdb_env_set_mapsize(r.env, 256ULL << 20)) != 0 ||
	    (rc = mdb_env_open(r.env, dir, MDB_NOTLS | MDB_NOSYNC, 0640)) != 0 ||
	    (rc = raw_dbs(&r)) != 0)
		goto out;
	r.max = UINT64_MAX;
	for (i = 0; i < prefill && rc == 0; i += chunk) {
		chunk = prefill - i < 4096 ? prefill - i : 4096;
		rc = raw_txn(&r, chunk, &seed);
	}
	/* From here every commit is durable, as the store's with --sync. */
	if (rc != 0 || (rc = mdb_env_sync(r.env, 1)) != 0 ||
	    (rc = mdb_env_set_flags(r.env, MDB_NOSYNC, 0)) != 0)
		goto out;
	r.max = prefill;
	t0 = now_ns();
	for (i = 0; i < n && rc == 0; i += chunk) {
		chunk = n - i < batch ? n - i : batch;
		rc = raw_txn(&r, chunk, &seed);
	}
	*rate = (double)n / ((double)(now_ns() - t0) / 1e9);
out:
	if (rc != 0)
		fprintf(stderr, "sg-bench: raw sync: %s\n", mdb_strerror(rc));
	mdb_env_close(r.env);
	return rc;
}

/*
 * One side of one durable round (which: 0 the store, 1 raw in the store's
 * layout, 2 raw plain), its writes per second in *rate.
 */
static int
sync_round(const struct opts *o, char (*keys)[SG_LC_KEY_LEN + 1], int run,
    int which, unsigned batch, double *rate)
{
	static const char *const name[] = { "sync", "raw", "plain" };
	char path[512];
	uint64_t from, t0;
	sg_store *s = NULL;
	int rc;

	snprintf(path, sizeof(path), "%s/%s%d", o->dir, name[which], run);
	rm_rf(path);
	if (which > 0) {
		mkdir(path, 0700);
		rc = raw_sync_puts(path, which == 1, o->entries, o->sync_writes,
		    batch, rate);
		rm_rf(path);
		return rc;
	}
	from = o->entries + (uint64_t)o->runs * o->writes +
	    (uint64_t)run * o->sync_writes;
	/*
	 * Prefill in the default mode in batches of 4096, as the raw sides
	 * are prefilled (a file filled in small commits carries a longer
	 * free list into every timed commit), then reopen with every commit
	 * durable and batch_max B.
	 */
	batch_opt = 4096;
	rc = store_open(&s, path, false, o->entries);
	batch_opt = batch;
	if (rc != 0 || (rc = put_all(s, keys, 0, o->entries, NULL)) != 0)
		goto out;
	sg_store_close(s);
	if ((rc = store_open(&s, path, true, o->entries)) != 0) {
		s = NULL;
		goto out;
	}
	t0 = now_ns();
	if ((rc = put_all(s, keys, from, from + o->sync_writes, NULL)) != 0)
		goto out;
	*rate = (double)o->sync_writes / ((double)(now_ns() - t0) / 1e9);
	{
		sg_store_stats st;

		memset(&st, 0, sizeof(st));
		if (sg_store_stats_get(s, &st, NULL) == 0)
			sync_commits += st.commits;
	}
out:
	sg_store_close(s);
	rm_rf(path);
	return rc;
}

/* --- redis --------------------------------------------------------------- */

static int
free_port(void)
{
	struct sockaddr_in a;
	socklen_t len = sizeof(a);
	int fd, port = -1;

	if ((fd = socket(AF_INET, SOCK_STREAM, 0)) < 0)
		return -1;
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &len) == 0)
		port = ntohs(a.sin_port);
	close(fd);
	return port;
}

static pid_t
redis_start(int port)
{
	char ps[16];
	pid_t pid;

	snprintf(ps, sizeof(ps), "%d", port);
	if ((pid = fork()) == 0) {
		int fd = open("/dev/null", O_RDWR);

		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
		execlp("redis-server", "redis-server", "--bind", "127.0.0.1",
		    "--port", ps, "--save", "", "--appendonly", "no",
		    "--protected-mode", "yes", (char *)NULL);
		_exit(127);
	}
	return pid;
}

static redisContext *
redis_connect(const char *host, int port)
{
	struct timeval tv = { 1, 0 };
	redisContext *c;
	int i;

	for (i = 0; i < 100; i++) {	/* up to ~5 s for the server to start */
		c = redisConnectWithTimeout(host, port, tv);
		if (c != NULL && c->err == 0) {
			redisReply *r = redisCommand(c, "PING");

			if (r != NULL) {
				freeReplyObject(r);
				return c;
			}
		}
		if (c != NULL)
			redisFree(c);
		usleep(50000);
	}
	return NULL;
}

struct redis_res {
	struct pct	get, set;
	double		get_rate, set_rate;
};

static int
redis_bench(redisContext *c, char (*keys)[SG_LC_KEY_LEN + 1], uint64_t n,
    const uint32_t *order, uint64_t lookups, uint32_t *ns,
    struct redis_res *res)
{
	uint64_t i, t0;
	redisReply *r;

	r = redisCommand(c, "FLUSHDB");
	freeReplyObject(r);
	t0 = now_ns();
	for (i = 0; i < n; i++) {
		uint64_t t = now_ns();

		r = redisCommand(c, "SET %b %b PX %d", keys[i],
		    (size_t)SG_LC_KEY_LEN, CLUSTER_ID, sizeof(CLUSTER_ID) - 1,
		    600000);
		ns[i] = (uint32_t)(now_ns() - t);
		if (r == NULL)
			return EIO;
		freeReplyObject(r);
	}
	res->set_rate = (double)n / ((double)(now_ns() - t0) / 1e9);
	res->set = percentiles(ns, n);
	t0 = now_ns();
	for (i = 0; i < lookups; i++) {
		uint64_t t = now_ns();

		r = redisCommand(c, "GET %b", keys[order[i]],
		    (size_t)SG_LC_KEY_LEN);
		ns[i] = (uint32_t)(now_ns() - t);
		if (r == NULL || r->type != REDIS_REPLY_STRING) {
			freeReplyObject(r);
			return EIO;
		}
		freeReplyObject(r);
	}
	res->get_rate = (double)lookups / ((double)(now_ns() - t0) / 1e9);
	res->get = percentiles(ns, lookups);
	return 0;
}

/*
 * The same GETs through the store's Redis backend (sg_store_lookup on a
 * redis:// handle: one blocking hiredis client, the value decoded and
 * aged), keys written through sg_store_put: the backend's cost over the
 * raw client above, same keys, same server, same run.
 */
static int
redis_backend_bench(const char *host, int port,
    char (*keys)[SG_LC_KEY_LEN + 1], uint64_t n, const uint32_t *order,
    uint64_t lookups, uint32_t *ns, struct pct *out)
{
	sg_store *st = NULL;
	sg_store_opts so;
	sg_store_entry e;
	sg_error err;
	char url[300];
	uint64_t i;
	int rc;

	snprintf(url, sizeof(url), "redis://%s:%d/0", host, port);
	sg_store_opts_init(&so);
	so.path = url;
	so.ttl_ms = 600000;
	so.max_entries = n + 1;
	if ((rc = sg_store_open(&st, &so, &err)) != 0) {
		fprintf(stderr, "sg-bench store: %s: %s\n", url, err.text);
		return rc;
	}
	for (i = 0; i < n && rc == 0; i++)
		rc = sg_store_put(st, keys[i], SG_LC_KEY_LEN, CLUSTER_ID,
		    sizeof(CLUSTER_ID) - 1, &err);
	if (rc == 0)
		rc = sg_store_flush(st, &err);
	for (i = 0; i < lookups && rc == 0; i++) {
		uint64_t t = now_ns();

		rc = sg_store_lookup(st, keys[order[i]], SG_LC_KEY_LEN, &e,
		    &err);
		ns[i] = (uint32_t)(now_ns() - t);
	}
	if (rc != 0)
		fprintf(stderr, "sg-bench store: redis backend: %s\n",
		    err.text);
	else
		*out = percentiles(ns, lookups);
	sg_store_close(st);
	return rc;
}

/* --- report -------------------------------------------------------------- */

static void
machine(void)
{
	struct utsname u;
	char line[256], model[128] = "unknown";
	FILE *fp;

	if ((fp = fopen("/proc/cpuinfo", "r")) != NULL) {
		while (fgets(line, sizeof(line), fp) != NULL)
			if (strncmp(line, "model name", 10) == 0) {
				char *p = strchr(line, ':');

				if (p != NULL)
					snprintf(model, sizeof(model), "%s",
					    p + 2);
				model[strcspn(model, "\n")] = '\0';
				break;
			}
		fclose(fp);
	}
	uname(&u);
	printf("# machine: %s, %ld cpus, %s %s, lmdb %s\n", model,
	    sysconf(_SC_NPROCESSORS_ONLN), u.sysname, u.release,
	    MDB_VERSION_STRING);
}

static void
usage(FILE *fp)
{
	fprintf(fp,
	    "usage: sg-bench store [--entries n] [--lookups n] [--writes n]\n"
	    "                      [--sync-writes n] [--runs n] [--dir dir]\n"
	    "                      [--redis host:port | --no-redis] [--batch n]\n"
	    "                      [--json]\n");
}

/* Every run's figures, and the medians the report prints. */
struct runs {
	double		 l_ours50[MAXRUNS], l_ours99[MAXRUNS];
	double		 l_raw50[MAXRUNS], l_raw99[MAXRUNS], l_ratio[MAXRUNS];
	double		 w_rate[MAXRUNS], w_enq[MAXRUNS];
	double		 s_rate[MAXRUNS], s_raw[MAXRUNS], s_plain[MAXRUNS];
	double		 s_ratio[MAXRUNS], s_pratio[MAXRUNS];
	unsigned	 sync_batch;
	struct redis_res rr;
	struct pct	 rb;
	bool		 have_redis, have_backend;
};

struct summary {
	double	o50, o99, r50, r99, lr, wr, we, sr, sraw, splain, sratio,
		spratio, smin, smax, pmin, pmax, cv[12];
};

/* The keys every phase draws from, and the per-operation timing buffers. */
struct keyset {
	char		(*keys)[SG_LC_KEY_LEN + 1];
	unsigned char	(*digests)[SGI_DIGEST_LEN];
	uint32_t	*order, *ns, *ns2;
};

/* Parses argv into o; returns -1 to go on, else the exit status. */
static int
parse_opts(int argc, char *argv[], struct opts *o)
{
	enum { O_ENTRIES = 256, O_LOOKUPS, O_WRITES, O_SYNCW, O_RUNS, O_DIR,
	    O_REDIS, O_NOREDIS, O_JSON, O_HELP, O_BATCH };
	static const struct option lo[] = {
		{ "entries",	required_argument,	NULL,	O_ENTRIES },
		{ "lookups",	required_argument,	NULL,	O_LOOKUPS },
		{ "writes",	required_argument,	NULL,	O_WRITES },
		{ "sync-writes", required_argument,	NULL,	O_SYNCW },
		{ "runs",	required_argument,	NULL,	O_RUNS },
		{ "dir",	required_argument,	NULL,	O_DIR },
		{ "redis",	required_argument,	NULL,	O_REDIS },
		{ "no-redis",	no_argument,		NULL,	O_NOREDIS },
		{ "json",	no_argument,		NULL,	O_JSON },
		{ "batch",	required_argument,	NULL,	O_BATCH },
		{ "help",	no_argument,		NULL,	O_HELP },
		{ NULL,		0,			NULL,	0 }
	};
	int ch;

	optind = 1;
	while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		uint64_t v = 0;

		if (optarg != NULL && ch != O_DIR && ch != O_REDIS &&
		    (sg_parse_u64(optarg, strlen(optarg), 1ULL << 32, &v) != 0 ||
		    v == 0)) {
			fprintf(stderr, "sg-bench store: bad number '%s'\n",
			    optarg);
			return EX_USAGE;
		}
		switch (ch) {
		case O_ENTRIES:	o->entries = v; break;
		case O_LOOKUPS:	o->lookups = v; break;
		case O_WRITES:	o->writes = v; break;
		case O_SYNCW:	o->sync_writes = v; break;
		case O_RUNS:
			if (v > MAXRUNS) {
				fprintf(stderr, "sg-bench store: at most %d "
				    "runs\n", MAXRUNS);
				return EX_USAGE;
			}
			o->runs = (int)v;
			break;
		case O_DIR:	o->dir = optarg; break;
		case O_REDIS:	o->redis = optarg; break;
		case O_NOREDIS:	o->no_redis = true; break;
		case O_JSON:	o->json = true; break;
		case O_BATCH:	batch_opt = (unsigned)v; break;
		case 'h':
		case O_HELP:
			usage(stdout);
			return EX_OK;
		default:
			usage(stderr);
			return EX_USAGE;
		}
	}
	if (optind != argc) {
		usage(stderr);
		return EX_USAGE;
	}
	return -1;
}

static void
keyset_free(struct keyset *k)
{
	free(k->keys);
	free(k->digests);
	free(k->order);
	free(k->ns);
	free(k->ns2);
}

/*
 * Keys: the populated ones, then fresh ones for every write run; the
 * digests of the populated ones, and the lookup order over them.
 */
static int
keyset_make(const struct opts *o, struct keyset *k)
{
	uint64_t total, i, seed = 7;

	total = o->entries + (uint64_t)o->runs * (o->writes + o->sync_writes);
	k->keys = malloc(total * sizeof(*k->keys));
	k->digests = malloc(o->entries * sizeof(*k->digests));
	k->order = malloc(o->lookups * sizeof(*k->order));
	k->ns = malloc((o->lookups > total ? o->lookups : total) *
	    sizeof(*k->ns));
	k->ns2 = malloc(o->lookups * sizeof(*k->ns2));
	if (k->keys == NULL || k->digests == NULL || k->order == NULL ||
	    k->ns == NULL || k->ns2 == NULL) {
		fprintf(stderr, "sg-bench store: out of memory\n");
		return -1;
	}
	for (i = 0; i < total; i++)
		key_of(k->keys[i], i);
	for (i = 0; i < o->entries; i++) {
		sgi_lckey lk;

		sgi_lckey_parse(&lk, k->keys[i], SG_LC_KEY_LEN);
		memcpy(k->digests[i], lk.digest, SGI_DIGEST_LEN);
	}
	for (i = 0; i < o->lookups; i++)
		k->order[i] = (uint32_t)(mix(&seed) % o->entries);
	return 0;
}

/* Lookups: one store of o->entries entries and a copy for the raw loop. */
static int
lookup_phase(const struct opts *o, const struct keyset *k, struct runs *r)
{
	char path[512], rawpath[512];
	sg_store *s = NULL;
	int run;

	snprintf(path, sizeof(path), "%s/lookup", o->dir);
	snprintf(rawpath, sizeof(rawpath), "%s/lookup-raw", o->dir);
	if (store_open(&s, path, false, UINT64_MAX) != 0 ||
	    put_all(s, k->keys, 0, o->entries, NULL) != 0) {
		sg_store_close(s);
		return -1;
	}
	sg_store_close(s);
	if (copy_env(path, rawpath) != 0)
		return -1;
	for (run = 0; run < o->runs; run++) {
		struct pct po, pr;

		if (lookup_run(path, rawpath, k->keys, k->digests, k->order,
		    o->lookups, k->ns, k->ns2, &po, &pr) != 0)
			return -1;
		r->l_ours50[run] = po.p50;
		r->l_ours99[run] = po.p99;
		r->l_raw50[run] = pr.p50;
		r->l_raw99[run] = pr.p99;
		r->l_ratio[run] = po.p50 / pr.p50;
	}
	return 0;
}

/* Writes: new keys into a full store (each write evicts one). */
static int
write_phase(const struct opts *o, const struct keyset *k, struct runs *r)
{
	char path[512];
	sg_store *s = NULL;
	int run, rc = -1;

	for (run = 0; run < o->runs; run++) {
		uint64_t from = o->entries + (uint64_t)run * o->writes, t0;

		snprintf(path, sizeof(path), "%s/write%d", o->dir, run);
		if (store_open(&s, path, false, o->entries) != 0 ||
		    put_all(s, k->keys, 0, o->entries, NULL) != 0)
			goto out;
		t0 = now_ns();
		if (put_all(s, k->keys, from, from + o->writes, k->ns) != 0)
			goto out;
		r->w_rate[run] = (double)o->writes /
		    ((double)(now_ns() - t0) / 1e9);
		r->w_enq[run] = percentiles(k->ns, o->writes).p50;
		sg_store_close(s);
		s = NULL;
		rm_rf(path);
	}
	rc = 0;
out:
	sg_store_close(s);
	return rc;
}

/*
 * Durable writes at equal batches B (--batch, or 1000): the store with
 * --sync and batch_max B, raw LMDB with B writes per durable transaction in
 * the store's layout and in one plain database.  Each side prefilled to
 * o->entries in the default mode first (untimed), each on its own
 * environment; the order of the three rotates from round to round.
 */
static int
sync_phase(const struct opts *o, const struct keyset *k, struct runs *r)
{
	unsigned saved_batch = batch_opt;
	int run, side, rc = 0;

	r->sync_batch = batch_opt > 0 ? batch_opt : 1000;
	batch_opt = r->sync_batch;
	for (run = 0; rc == 0 && run < o->runs; run++) {
		for (side = 0; rc == 0 && side < 3; side++) {
			int which = (side + run) % 3;

			rc = sync_round(o, k->keys, run, which, r->sync_batch,
			    which == 0 ? &r->s_rate[run] : which == 1 ?
			    &r->s_raw[run] : &r->s_plain[run]);
		}
		r->s_ratio[run] = r->s_rate[run] / r->s_raw[run];
		r->s_pratio[run] = r->s_rate[run] / r->s_plain[run];
	}
	batch_opt = saved_batch;
	return rc;
}

/* host:port from --redis into host and *port (left -1 when unusable). */
static void
redis_addr(const char *arg, char *host, size_t hostsz, int *port)
{
	const char *colon = strrchr(arg, ':');
	uint64_t v;

	if (colon == NULL || (size_t)(colon - arg) >= hostsz)
		return;
	memcpy(host, arg, (size_t)(colon - arg));
	host[colon - arg] = '\0';
	if (sg_parse_u64(colon + 1, strlen(colon + 1), 65535, &v) == 0 &&
	    v > 0)
		*port = (int)v;
}

/*
 * Redis, one synchronous client: the server named by --redis, or one
 * started here on a free loopback port (its pid in *rpid, stopped by the
 * caller).  No server is not an error: the baseline is left out.
 */
static void
redis_phase(const struct opts *o, const struct keyset *k, struct runs *r,
    pid_t *rpid)
{
	redisContext *c = NULL;
	char host[256] = "127.0.0.1";
	int port = -1;

	if (o->redis != NULL)
		redis_addr(o->redis, host, sizeof(host), &port);
	else if ((port = free_port()) > 0)
		*rpid = redis_start(port);
	if (port > 0)
		c = redis_connect(host, port);
	if (c == NULL) {
		fprintf(stderr, "sg-bench store: no redis-server (%s); "
		    "skipping the Redis baseline\n", o->redis != NULL ?
		    o->redis : "is it installed?");
		return;
	}
	r->have_redis = redis_bench(c, k->keys, o->entries, k->order,
	    o->lookups, k->ns, &r->rr) == 0;
	redisFree(c);
	if (r->have_redis)
		r->have_backend = redis_backend_bench(host, port, k->keys,
		    o->entries, k->order, o->lookups, k->ns, &r->rb) == 0;
}

static void
summarise(const struct opts *o, const struct runs *r, struct summary *m)
{
	int n = o->runs;

	m->o50 = median(r->l_ours50, n, &m->cv[0]);
	m->o99 = median(r->l_ours99, n, &m->cv[1]);
	m->r50 = median(r->l_raw50, n, &m->cv[2]);
	m->r99 = median(r->l_raw99, n, &m->cv[3]);
	m->lr = median(r->l_ratio, n, &m->cv[7]);
	m->wr = median(r->w_rate, n, &m->cv[4]);
	m->we = median(r->w_enq, n, NULL);
	m->sr = median(r->s_rate, n, &m->cv[5]);
	m->sraw = median(r->s_raw, n, &m->cv[6]);
	m->splain = median(r->s_plain, n, &m->cv[8]);
	m->sratio = median(r->s_ratio, n, &m->cv[9]);
	m->spratio = median(r->s_pratio, n, &m->cv[10]);
	minmax(r->s_ratio, n, &m->smin, &m->smax);
	minmax(r->s_pratio, n, &m->pmin, &m->pmax);
}

static void
report_json(const struct opts *o, const struct runs *r,
    const struct summary *m)
{
	printf("{\"entries\":%llu,\"runs\":%d,"
	    "\"lookup\":{\"p50_ns\":%.0f,\"p99_ns\":%.0f,"
	    "\"raw_p50_ns\":%.0f,\"raw_p99_ns\":%.0f,"
	    "\"p50_ratio\":%.3f},"
	    "\"write\":{\"per_s\":%.0f,\"enqueue_p50_ns\":%.0f},"
	    "\"sync\":{\"per_s\":%.0f,\"raw_per_s\":%.0f,"
	    "\"ratio\":%.3f,\"ratio_min\":%.3f,"
	    "\"ratio_max\":%.3f,\"raw_plain_per_s\":%.0f,"
	    "\"plain_ratio\":%.3f,\"plain_ratio_min\":%.3f,"
	    "\"plain_ratio_max\":%.3f,\"batch\":%u}",
	    (unsigned long long)o->entries, o->runs, m->o50, m->o99, m->r50,
	    m->r99, m->lr, m->wr, m->we, m->sr, m->sraw, m->sratio, m->smin,
	    m->smax, m->splain, m->spratio, m->pmin, m->pmax, r->sync_batch);
	if (r->have_redis)
		printf(",\"redis\":{\"get_p50_ns\":%.0f,"
		    "\"get_p99_ns\":%.0f,\"set_p50_ns\":%.0f,"
		    "\"set_p99_ns\":%.0f,\"get_per_s\":%.0f,"
		    "\"set_per_s\":%.0f}", r->rr.get.p50,
		    r->rr.get.p99, r->rr.set.p50, r->rr.set.p99,
		    r->rr.get_rate, r->rr.set_rate);
	if (r->have_backend)
		printf(",\"redis_backend\":{\"get_p50_ns\":%.0f,"
		    "\"get_p99_ns\":%.0f,\"p50_ratio\":%.3f}",
		    r->rb.p50, r->rb.p99, r->rb.p50 / r->rr.get.p50);
	printf("}\n");
}

static void
report_redis(const struct runs *r, const struct summary *m)
{
	printf("redis    GET  p50 %7.0f ns  p99 %7.0f ns  %8.0f/s (one "
	    "client)\n", r->rr.get.p50, r->rr.get.p99, r->rr.get_rate);
	printf("redis    SET  p50 %7.0f ns  p99 %7.0f ns  %8.0f/s (one "
	    "client)\n", r->rr.set.p50, r->rr.set.p99, r->rr.set_rate);
	printf("redis    GET p50 / store lookup p50: %.1fx\n",
	    r->rr.get.p50 / m->o50);
	if (r->have_backend)
		printf("redis    backend lookup p50 %7.0f ns  p99 %7.0f ns  "
		    "ratio p50 %.2fx to the raw GET (goal <= 1.20)\n",
		    r->rb.p50, r->rb.p99, r->rb.p50 / r->rr.get.p50);
}

static void
report_text(const struct opts *o, const struct runs *r,
    const struct summary *m)
{
	printf("# %llu entries, %llu lookups and %llu writes (%llu durable) "
	    "per run, median of %d runs (cv in brackets)\n",
	    (unsigned long long)o->entries, (unsigned long long)o->lookups,
	    (unsigned long long)o->writes,
	    (unsigned long long)o->sync_writes, o->runs);
	printf("lookup   sg_store_lookup   p50 %7.0f ns [%.2f]  "
	    "p99 %7.0f ns [%.2f]\n", m->o50, m->cv[0], m->o99, m->cv[1]);
	printf("lookup   raw renew/get/reset p50 %5.0f ns [%.2f]  "
	    "p99 %7.0f ns [%.2f]\n", m->r50, m->cv[2], m->r99, m->cv[3]);
	printf("lookup   ratio p50 %.2fx [%.2f] (goal <= 1.30, "
	    "median of per-run ratios), p99 %.2f us (goal < 10)\n",
	    m->lr, m->cv[7], m->o99 / 1000);
	printf("write    group commit      %9.0f writes/s [%.2f] "
	    "(goal > 100000), enqueue p50 %.0f ns\n", m->wr, m->cv[4], m->we);
	printf("sync     group commit      %9.0f writes/s [%.2f]\n",
	    m->sr, m->cv[5]);
	printf("sync     raw, store layout %9.0f writes/s [%.2f] "
	    "(%u per durable txn)\n", m->sraw, m->cv[6], r->sync_batch);
	printf("sync     raw, one put      %9.0f writes/s [%.2f] "
	    "(%u per durable txn)\n", m->splain, m->cv[8], r->sync_batch);
	printf("sync     ratio to raw layout %.2fx (%.2f..%.2f) at "
	    "equal batches of %u (goal >= 0.90)\n", m->sratio, m->smin,
	    m->smax, r->sync_batch);
	printf("sync     ratio to raw one put %.2fx (%.2f..%.2f)\n",
	    m->spratio, m->pmin, m->pmax);
	printf("sync     the store's commits: %.1f writes each on average "
	    "(at most %u)\n", sync_commits > 0 ? (double)o->sync_writes *
	    o->runs / (double)sync_commits : 0.0, r->sync_batch);
	if (r->have_redis)
		report_redis(r, m);
}

int
bench_store_main(int argc, char *argv[])
{
	struct opts o = { 100000, 200000, 200000, 50000, 5, NULL, NULL,
	    false, false };
	char base[] = "/tmp/sg-bench-store-XXXXXX";
	struct keyset k = { NULL, NULL, NULL, NULL, NULL };
	struct runs r;
	struct summary m;
	int status = EX_SOFTWARE;
	pid_t rpid = -1;

	if ((status = parse_opts(argc, argv, &o)) != -1)
		return status;
	status = EX_SOFTWARE;
	signal(SIGPIPE, SIG_IGN);
	if (o.dir == NULL) {
		if (mkdtemp(base) == NULL) {
			perror("sg-bench store: mkdtemp");
			return EX_CANTCREAT;
		}
		o.dir = base;
	}
	memset(&r, 0, sizeof(r));
	if (keyset_make(&o, &k) != 0)
		goto out;
	if (!o.json)
		machine();
	if (lookup_phase(&o, &k, &r) != 0 || write_phase(&o, &k, &r) != 0 ||
	    sync_phase(&o, &k, &r) != 0)
		goto out;
	if (!o.no_redis)
		redis_phase(&o, &k, &r, &rpid);
	summarise(&o, &r, &m);
	if (o.json)
		report_json(&o, &r, &m);
	else
		report_text(&o, &r, &m);
	status = fflush(stdout) == 0 ? EX_OK : EX_IOERR;
out:
	if (rpid > 0) {
		kill(rpid, SIGTERM);
		waitpid(rpid, NULL, 0);
	}
	if (o.dir == base)
		rm_rf(base);
	keyset_free(&k);
	return status;
}
