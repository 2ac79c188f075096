/*
 * sg_store_lmdb.c — the LMDB backend of the last-cluster store.
 *
 * Layout.  One environment (a directory: data.mdb, lock.mdb) holds three
 * named databases:
 *   "lc1"       digest[32] -> u64 written_ms | u64 seq | cluster id bytes
 *   "lc1.time"  u64be written_ms | u64be seq -> digest[32]
 *   "meta"      "seq" -> u64 (last sequence number given out), "pad"
 * The time index orders entries by write time (ties by a store-wide
 * sequence number, so order within a millisecond is commit order); the
 * least recently written entry is its first key, so capacity eviction and
 * expiry sweeps cost O(log n) per entry and never scan.  Only digests reach
 * the file, never a routing key, model or affinity key.
 *
 * Writes.  sg_store_put() copies the operation into a queue under a mutex
 * and returns; one store thread per handle takes everything queued and
 * applies it in write transactions of at most batch_max operations (group
 * commit: the more writes wait, the fewer pages and fsyncs per write).  A
 * batch that would commit short of batch_max is first topped up with what
 * was queued meanwhile, so it is cut short only when nothing waits.  By
 * default a batch is never made to wait; with commit_delay_us (the commit
 * window) the store thread commits a write once it has waited the window
 * (or a batch is full, or a flush, compaction, maintenance or close calls),
 * with everything queued meanwhile, in one transaction.  An idle store
 * thread sleeps in poll(2) on a timer descriptor, and the write to an
 * empty queue arms that timer for the end of its window (one
 * timerfd_settime(2), no wake-up), so the thread wakes once per commit, by
 * the timer; later puts cost no system call.  (Waking it at once, for it
 * to sleep again until the window's end, was a second wake-up and a
 * cross-CPU futex wake per commit, about a fifth of the store thread's CPU
 * under sg-proxy's writes.)  Urgent work fires the timer at once; a
 * thread already awake (busy, or in the window after its own periodic
 * wake) waits on a condition variable as before.  A put is one
 * descent: MDB_NOOVERWRITE inserts a new
 * key or leaves the cursor on the old entry, overwritten in place.
 * The environment is opened MDB_NOSYNC (never MDB_WRITEMAP): a committed
 * transaction is in the page cache, so a killed process loses nothing it
 * committed and the file is never corrupt; the store thread fsyncs every
 * sync_interval_ms, so an operating-system crash loses at most that
 * interval.  With the sync option every commit is durable instead.
 *
 * Reads.  A lookup is one read transaction: a cached MDB_txn (MDB_NOTLS, so
 * any thread may use it) is read and put back still holding its snapshot,
 * and renewed first only when that snapshot may be old: when a commit was
 * announced since (a counter next to the generation counter in the shared
 * "generation" file, bumped by every process after each commit, before a
 * flush returns: one load) or when it is more than SNAP_MAX_MS old (a
 * process of an older version bumps nothing).  Renewing costs more than
 * the read itself (LMDB looks the named databases up again).  The store
 * thread resets a cached snapshot that a commit made old after each round
 * of work and every GEN_POLL_MS when idle, so an idle lookup side never
 * pins pages that later commits free.  A second concurrent lookup in the
 * same process begins its own transaction.  Readers never wait for
 * LMDB's writer lock.  What a reader can wait for is s->rw (below): the
 * store thread holds it exclusively while it grows the map, adopts a size
 * another process chose, or reopens the environment after a swap, and,
 * the lock preferring writers, a reader also queues behind a store thread
 * that is waiting to take it.  There are two kinds of lookup:
 *   - the tools' lookup (sg_store_lookup) takes s->rw for reading and may
 *     wait for those windows (microseconds for a grow, about a millisecond
 *     for a reopen); when the environment must be reopened or its map
 *     adopted and s->rw is busy, it asks the store thread (MAINT_*) and
 *     reads the old file or returns EAGAIN;
 *   - the event loop's lookup (sg_store_lookup_start) only ever *tries*
 *     s->rw: busy is EBUSY at once, the caller routes without a hint and
 *     nothing on its loop stalls.  It never reopens the environment itself
 *     (opening one reads files and takes LMDB's file locks): after a swap
 *     it asks the store thread and reads the old file meanwhile; a grown
 *     map is adopted inline only when s->rw is free, again by trying.  Even
 *     the deletion of an expired entry is queued only if the queue's mutex
 *     is free.  A test hook (sgi_store_set_hook) runs with s->rw
 *     held, so the unit tests can hold it across a grow or a reopen and
 *     show the lookup answering within its deadline.
 * Lookups never write: an expired entry found by a lookup is reported as a
 * miss and a deletion is queued for the store thread, which deletes it only
 * if it is still the same, still expired, entry.
 *
 * Map size.  MDB_MAP_FULL aborts the transaction; the store thread doubles
 * the map (up to map_size_max) and replays the batch; at the maximum the
 * batch fails with SG_EFULL.  Another process that sees MDB_MAP_RESIZED
 * adopts the new size.  mdb_env_set_mapsize() needs no transaction active
 * in the process, so every use of the environment holds a read lock on
 * s->rw and resizing or reopening takes it exclusively.
 *
 * Compaction and the swap protocol.  LMDB never shrinks its file, so
 * compaction writes a compacted copy (mdb_env_copyfd2, MDB_CP_COMPACT) to
 * data.mdb.compact in the same directory and renames it over data.mdb,
 * while other processes keep reading and writing:
 *   1. The compactor begins a write transaction W and keeps it open: it
 *      holds LMDB's writer lock (shared by every process through
 *      lock.mdb), so nothing can be committed until the swap is over and
 *      the copy holds every committed transaction.
 *   2. Readers pick a meta page by the parity of the last transaction id
 *      in lock.mdb, and a compacted copy stores its root in meta page 1
 *      (txnid 1).  The last committed id must therefore be odd: if it is
 *      even, the compactor commits one dummy write ("pad") and starts
 *      again.  The copy is then verified (opened read-only, no lock: its
 *      transaction id must have that parity and its entry count must
 *      match) before it is used.
 *   3. Copy, fsync the copy, rename it over data.mdb, fsync the directory,
 *      then increment the generation counter in the file "generation"
 *      (a shared mapping every process holds), then abort W.
 *   4. Every other process still maps the old inode.  A writer checks,
 *      after beginning each write transaction (so under the writer lock),
 *      the generation counter and the link count of the file it maps (a
 *      renamed-over inode has none: one fstat(), no path walk), and every
 *      GEN_POLL_MS the inode data.mdb names, against what it opened; on a
 *      change it aborts (an aborted transaction writes nothing), closes
 *      and reopens the environment and replays the batch on the new file.
 *      So no write ever lands in the old file, and nothing committed is
 *      lost (a file replaced while its old inode keeps another link is
 *      found within GEN_POLL_MS).  The same check guards the write
 *      transaction that creates the named databases at open.  Readers
 *      compare the generation counter (one atomic load) on each lookup and
 *      reopen on a change; until they do they read the old inode (an older
 *      snapshot, or, when its meta page parity no longer matches, nothing:
 *      a miss).  An idle store thread polls the counter every GEN_POLL_MS
 *      and reopens, so that processes leave a replaced file quickly.
 *   5. Residual risk: LMDB's recovery from a writer that died holding the
 *      writer lock (EOWNERDEAD) resets the shared transaction id from the
 *      meta pages of the file the next locker maps.  If that next locker
 *      still maps a replaced file (within about GEN_POLL_MS of a swap),
 *      the id can move backwards.  It takes a crash inside a commit and a
 *      compaction within the same fraction of a second.
 * A compactor killed mid-way leaves either the old file (and a stray
 * data.mdb.compact, removed by the next compaction) or the new one; the
 * inode check covers a swap whose generation bump was lost.  The
 * generation file must not be deleted while processes run.
 *
 * Damage and full disks.  A page of a mapping that the file cannot back
 * faults (SIGBUS): so the generation and lock files get their blocks
 * allocated before they are mapped (a full disk is ENOSPC at open), and
 * every open first checks data.mdb's meta pages, its length and its root
 * pages with pread() (data_check()), refusing a damaged file with
 * SG_ESTORE and a message that says how to recover.
 *
 * Faults while open.  LMDB keeps a removed file open, so the store thread
 * (env_health(), every GEN_POLL_MS, busy or idle, and write_txn() after
 * such a pause) looks data.mdb up by name; gone, or shorter than it has
 * been (LMDB never shrinks it), the environment is closed (env_down()):
 * the store is down, reported by the connected operation, its lookups and
 * writes fail (the batch that found a removal too).  The next write
 * (env_enter() reopens, creating the directory, the generation file and
 * data.mdb as a first open would) makes a new store; lookups and an idle
 * store thread never create one, they only open a data.mdb that another
 * process put back.  A cut file stays refused by data_check() until it is
 * replaced or deleted.  Between a cut and the check a lookup may reach a
 * page past the end: lookups read under a SIGBUS guard (guarded_get():
 * sigsetjmp without a mask, a process-wide SA_NODEFER handler installed at
 * each open that jumps back when the faulting thread has a guard armed
 * and otherwise passes the signal to the disposition found before), so
 * the lookup fails and asks the store thread to go down.  LMDB's read path
 * holds no lock and allocates nothing but the transaction, which the
 * guard aborts.  Writes are not guarded (a jump out of a write transaction
 * could leave LMDB's dirty lists half updated): a cut inside a write
 * transaction, after its check, still faults.  sg-lastcluster(1), FAULTS
 * WHILE OPEN, is the user's account.
 */
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/types.h>

#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <lmdb.h>

#include "sg_store_internal.h"

#define DB_MAIN		"lc1"
#define DB_TIME		"lc1.time"
#define DB_META		"meta"
#define DATA_FILE	"data.mdb"
#define COMPACT_FILE	"data.mdb.compact"
#define GEN_FILE	"generation"
#define VAL_HDR		16	/* u64 written_ms, u64 seq */
#define IDX_LEN		16	/* u64be written_ms, u64be seq */
#define READER_CHECK_MS	10000	/* periodic mdb_reader_check */
#define GEN_POLL_MS	100	/* an idle store thread follows swaps this fast */
#define GEN_COMMITS	1	/* genp[GEN_COMMITS]: commits, every process */
#define SNAP_MAX_MS	1	/* a lookup reuses a snapshot this long at most */
#define MAX_RETRIES	64	/* resizes and reopens for one transaction */
#define SWEEP_MAX	1000	/* deletions per compaction transaction */
#define MAINT_REOPEN	1u	/* requests from lookups to the store thread */
#define MAINT_ADOPT	2u
#define MAINT_FAULT	4u	/* a lookup faulted on the mapping */

enum { FAULT_NONE, FAULT_REMOVED, FAULT_TRUNCATED };	/* lstore.fault */
enum { SW_NO, SW_SWAPPED, SW_REMOVED };			/* env_swapped() */

enum { OP_PUT, OP_DEL, OP_EXPIRE };
enum { KICK_NONE, KICK_WINDOW, KICK_NOW };	/* lstore.kick */

struct op {
	uint64_t	t;		/* PUT: write time; EXPIRE: seen write time */
	uint16_t	kind;
	uint16_t	id_len;
	unsigned char	digest[SGI_DIGEST_LEN];
	char		id[SG_ID_MAX];
};

/*
 * The cached read transaction and the snapshot it holds; its fields belong
 * to whoever took it from lstore.rtxn.
 */
struct rslot {
	MDB_txn		*txn;
	uint64_t	 commits;	/* the commit counter when renewed */
	uint64_t	 ms;		/* store clock when renewed */
	bool		 live;		/* renewed and not reset: a snapshot */
};

struct job {
	sg_store_compact_result	*r;
	sg_error		 err;
	int			 rc;
	bool			 done;
};

struct lstore {
	sg_store_opts	 o;
	char		*dir;
	char		*datapath;
	char		*tmppath;
	char		*genpath;
	dev_t		 dir_dev;
	ino_t		 dir_ino;

	/* The environment: read-locked while used, write-locked to replace. */
	pthread_rwlock_t rw;
	MDB_env		*env;		/* NULL after a failed reopen */
	int		 env_rc;	/* why env is NULL */
	MDB_dbi		 dbi_main, dbi_time, dbi_meta;
	dev_t		 data_dev;
	ino_t		 data_ino;
	uint64_t	 gen;		/* generation when env was opened */
	uint64_t	 map_size;	/* current map size */
	_Atomic(struct rslot *) rtxn;	/* cached read transaction */
	uint32_t	 psize;		/* page size */
	_Atomic uint64_t data_len;	/* longest data.mdb seen (data_short) */
	_Atomic bool	 up;		/* env open and sound: connected() */
	int		 fault;		/* FAULT_*: why env was closed */
	dev_t		 fault_dev;	/* the data.mdb found faulty */
	ino_t		 fault_ino;

	int		 genfd;
	uint64_t	*genp;		/* shared mapping of GEN_FILE */

	/* The queue, guarded by mu. */
	pthread_mutex_t	 mu;
	pthread_cond_t	 work_cv;
	pthread_cond_t	 done_cv;
	struct op	*q, *w;
	size_t		 qhead, qlen, qcap, wcap;	/* q[qhead..qlen) */
	uint64_t	 enq, done, committed, failed, commits;
	int		 flush_rc;
	sg_error	 flush_err;
	struct job	*job;
	bool		 stop, idle;
	bool		 lingering;	/* in the commit window (commit_delay_us) */
	int		 kick;		/* KICK_*: what tfd is armed for */
	int		 tfd;		/* timerfd: wakes the idle store thread */
	uint64_t	 window_waits;	/* sleeps in the commit window */
	unsigned	 flushing;	/* sg_store_flush() callers waiting */
	uint64_t	 q_first_ns;	/* when the queue last became non-empty */
	uint64_t	 wakeups;	/* times the queue was taken */
	uint64_t	 superseded;	/* puts replaced within their batch */
	pthread_t	 thr;
	bool		 thr_started;
	pthread_mutex_t	 job_mu;	/* one compaction at a time */

	/* Counters written by any thread. */
	_Atomic uint64_t map_grows;
	_Atomic uint64_t reopens;
	_Atomic uint32_t stale_readers;
	_Atomic unsigned maint;		/* MAINT_* requests */
	_Atomic(const struct sgi_store_hook *) hook;	/* tests only */

	/* Store thread only. */
	struct dslot	*dtab;		/* dedupe(): the batch's keys */
	bool		*dskip;		/* dedupe(): puts to skip */
	uint32_t	 dmask, dstamp;
	bool		 dirty;
	uint64_t	 last_sync, last_check;	/* monotonic ms */
	uint64_t	 last_name_check;	/* env_swapped_txn(), ms */
	uint64_t	 last_health;		/* env_health(), ms */
	uint64_t	 last_retry;		/* reopen while down, ms */
};

/* s->rw is write-locked: let a test hold it there (sgi_store_set_hook). */
static void
locked_hook(struct lstore *s, const char *what)
{
	const struct sgi_store_hook *h = atomic_load(&s->hook);

	if (h != NULL && h->fn != NULL)
		h->fn(h->arg, what);
}

/* --- small helpers ------------------------------------------------------- */

static int
mdb_to_sg(int rc)
{
	switch (rc) {
	case 0:			return 0;
	case MDB_NOTFOUND:	return SG_ENOTFOUND;
	case MDB_MAP_FULL:	return SG_EFULL;
	case MDB_READERS_FULL:	return EAGAIN;
	default:		return rc > 0 ? rc : SG_ESTORE;
	}
}

static int
lerr(sg_error *err, int rc, const char *what)
{
	return sg_seterr(err, mdb_to_sg(rc), "%s: %s", what, mdb_strerror(rc));
}

static uint64_t
mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static uint64_t
mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* CLOCK_MONOTONIC nanoseconds to an absolute timespec. */
static void
ns_to_ts(uint64_t ns, struct timespec *ts)
{
	ts->tv_sec = (time_t)(ns / 1000000000ULL);
	ts->tv_nsec = (long)(ns % 1000000000ULL);
}

/*
 * The idle store thread's timer (kick_locked()), or -1: then it sleeps on
 * work_cv as it lingers, and the first write of a window wakes it twice.
 * The system call is made directly: a program may answer timerfd_create(3)
 * itself (sg-proxy makes libevent go without timer descriptors that way),
 * and this descriptor is the library's own.
 */
static int
timer_open(void)
{
	long fd = syscall(SYS_timerfd_create, CLOCK_MONOTONIC,
	    TFD_CLOEXEC | TFD_NONBLOCK);

	return fd >= 0 && fd <= INT_MAX ? (int)fd : -1;
}

/*
 * s->mu held, the store thread idle (asleep in poll() on s->tfd): make it
 * wake at CLOCK_MONOTONIC at_ns (0: at once; a time past is at once too).
 * The timer is all that wakes an idle thread, so that the first write of
 * a commit window arms it for the window's end and the thread wakes once,
 * to commit, rather than once for the write and again for the window.
 */
static void
kick_locked(struct lstore *s, uint64_t at_ns, int why)
{
	struct itimerspec its;

	if (s->kick >= why)
		return;
	if (s->tfd < 0) {	/* no timer: wake it now (it then lingers) */
		pthread_cond_signal(&s->work_cv);
		s->kick = KICK_NOW;
		return;
	}
	memset(&its, 0, sizeof(its));
	ns_to_ts(at_ns > 0 ? at_ns : 1, &its.it_value);
	(void)timerfd_settime(s->tfd, TFD_TIMER_ABSTIME, &its, NULL);
	s->kick = why;
}

/*
 * s->mu held: wake the store thread for urgent work (a flush, a
 * compaction, maintenance, close) if it sleeps, idle or in the commit
 * window.
 */
static void
wake_locked(struct lstore *s)
{
	if (s->idle)
		kick_locked(s, 0, KICK_NOW);
	else if (s->lingering)
		pthread_cond_signal(&s->work_cv);
}

static void
be64_put(unsigned char *p, uint64_t v)
{
	int i;

	for (i = 7; i >= 0; i--) {
		p[i] = (unsigned char)(v & 0xff);
		v >>= 8;
	}
}

static uint64_t
be64_get(const unsigned char *p)
{
	uint64_t v = 0;
	int i;

	for (i = 0; i < 8; i++)
		v = v << 8 | p[i];
	return v;
}

static bool
is_expired(const struct lstore *s, uint64_t written, uint64_t now)
{
	return now >= written && now - written >= s->o.ttl_ms;
}

/* Decode a main-database value; false if it is not one of ours. */
static bool
val_decode(const MDB_val *v, uint64_t *t, uint64_t *seq, const char **id,
    size_t *id_len)
{
	const unsigned char *p = v->mv_data;

	if (v->mv_size <= VAL_HDR || v->mv_size > VAL_HDR + SG_ID_MAX)
		return false;
	memcpy(t, p, 8);
	memcpy(seq, p + 8, 8);
	*id = (const char *)p + VAL_HDR;
	*id_len = v->mv_size - VAL_HDR;
	return sg_lc_cluster_id_valid(*id, *id_len);
}

/* Fill *e; key is the text form when the caller has it, else NULL. */
static void
entry_fill(sg_store_entry *e, const char *key, const unsigned char *digest,
    uint64_t t, const char *id, size_t id_len, uint64_t now)
{
	sgi_lckey k;

	if (key == NULL) {
		sgi_lckey_from_digest(&k, digest);
		key = k.text;
	}
	memcpy(e->key, key, sizeof(e->key));
	memcpy(e->cluster_id, id, id_len);
	e->cluster_id[id_len] = '\0';
	e->cluster_id_len = id_len;
	e->written_ms = t;
	e->age_ms = now > t ? now - t : 0;
}

static uint64_t
gen_load(const struct lstore *s)
{
	return __atomic_load_n(s->genp, __ATOMIC_ACQUIRE);
}

/*
 * The commit counter next to the generation counter: every process bumps it
 * after each write transaction it commits, so that a lookup can tell, with
 * one load, whether the snapshot its cached read transaction holds is still
 * the newest (see guarded_get()).
 */
static uint64_t
commits_load(const struct lstore *s)
{
	return __atomic_load_n(&s->genp[GEN_COMMITS], __ATOMIC_ACQUIRE);
}

static void
commits_bump(struct lstore *s)
{
	(void)__atomic_fetch_add(&s->genp[GEN_COMMITS], 1, __ATOMIC_RELEASE);
}

/* --- one open per directory per process ---------------------------------- */

/*
 * LMDB's locks are POSIX record locks: closing one descriptor of lock.mdb
 * drops every lock the process holds on it, so a directory must not be
 * open twice in one process.  Entries of another pid are leftovers of a
 * fork() and are ignored.
 */
struct regent {
	dev_t		 dev;
	ino_t		 ino;
	pid_t		 pid;
	struct regent	*next;
};
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static struct regent *reg_head;

static int
reg_add(dev_t dev, ino_t ino)
{
	struct regent *e;
	pid_t pid = getpid();
	int rc = 0;

	pthread_mutex_lock(&reg_mu);
	for (e = reg_head; e != NULL; e = e->next)
		if (e->dev == dev && e->ino == ino && e->pid == pid) {
			rc = EBUSY;
			goto out;
		}
	if ((e = malloc(sizeof(*e))) == NULL) {
		rc = ENOMEM;
		goto out;
	}
	e->dev = dev;
	e->ino = ino;
	e->pid = pid;
	e->next = reg_head;
	reg_head = e;
out:
	pthread_mutex_unlock(&reg_mu);
	return rc;
}

static void
reg_del(dev_t dev, ino_t ino)
{
	struct regent **pp, *e;
	pid_t pid = getpid();

	pthread_mutex_lock(&reg_mu);
	for (pp = &reg_head; (e = *pp) != NULL; pp = &e->next)
		if (e->dev == dev && e->ino == ino && e->pid == pid) {
			*pp = e->next;
			free(e);
			break;
		}
	pthread_mutex_unlock(&reg_mu);
}

/* --- files --------------------------------------------------------------- */

/* mkdir -p: parents 0755, the store directory itself 0750. */
static int
mkdirs(const char *path)
{
	char *buf, *p;
	struct stat st;
	int rc = 0;

	if (stat(path, &st) == 0)
		return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
	if ((buf = strdup(path)) == NULL)
		return ENOMEM;
	for (p = buf + 1; *p != '\0'; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
			rc = errno;
			goto out;
		}
		*p = '/';
	}
	if (mkdir(buf, 0750) != 0 && errno != EEXIST)
		rc = errno;
	else if (stat(path, &st) != 0)
		rc = errno;
	else if (!S_ISDIR(st.st_mode))
		rc = ENOTDIR;
out:
	free(buf);
	return rc;
}

static int
fsync_dir(const char *dir)
{
	int fd, rc = 0;

	if ((fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		return errno;
	if (fsync(fd) != 0)
		rc = errno;
	close(fd);
	return rc;
}

/*
 * Where posix_fallocate() is not supported: write the missing tail of the
 * page as zeros (what the kernel then cannot back fails the write).
 */
static int
gen_fill(int fd, off_t have)
{
	static const char zero[4096];
	off_t off = have < 0 ? 0 : have;
	ssize_t n;

	while (off < 4096) {
		n = pwrite(fd, zero, (size_t)(4096 - off), off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? errno : EIO;
		off += n;
	}
	return fsync(fd) != 0 ? errno : 0;
}

/* Map the generation counter, creating the file when needed. */
static int
gen_open(struct lstore *s, sg_error *err)
{
	struct stat st;
	void *p;
	int fd, e;

	/* Created even without o.create: a store made by mdb_load has none. */
	fd = open(s->genpath, O_RDWR | O_CREAT | O_CLOEXEC, 0640);
	if (fd < 0)
		return sg_seterr(err, errno, "cannot open '%s': %s",
		    s->genpath, strerror(errno));
	/*
	 * Allocate the blocks, not just the size: a page of a sparse file
	 * that the filesystem cannot back (a full disk) faults with SIGBUS
	 * on first touch, so a full disk must fail here, as ENOSPC.
	 */
	if (fstat(fd, &st) != 0)
		e = errno;
	else if (fallocate(fd, 0, 0, 4096) == 0)
		e = 0;
	else if ((e = errno) == EOPNOTSUPP)
		e = gen_fill(fd, st.st_size);
	if (e != 0) {
		close(fd);
		return sg_seterr(err, e, "cannot size '%s': %s", s->genpath,
		    strerror(e));
	}
	p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		e = errno;
		close(fd);
		return sg_seterr(err, e, "cannot map '%s': %s", s->genpath,
		    strerror(e));
	}
	s->genfd = fd;
	s->genp = p;
	return 0;
}

/*
 * After the store directory was removed and made again: map the new
 * generation file and register the new directory.  A failure keeps the old
 * mapping (gen_load() always has one).  s->rw write-locked or not shared.
 */
static int
gen_refresh(struct lstore *s, sg_error *err)
{
	struct stat a, b;
	uint64_t *op = s->genp;
	int ofd = s->genfd, rc;

	if (ofd >= 0 && fstat(ofd, &a) == 0 && a.st_nlink > 0 &&
	    stat(s->genpath, &b) == 0 && a.st_ino == b.st_ino &&
	    a.st_dev == b.st_dev)
		return 0;
	if ((rc = gen_open(s, err)) != 0) {
		s->genfd = ofd;
		s->genp = op;
		return rc;
	}
	if (op != NULL)
		munmap(op, 4096);
	if (ofd >= 0)
		close(ofd);
	if (stat(s->dir, &a) == 0 && (a.st_dev != s->dir_dev ||
	    a.st_ino != s->dir_ino) && reg_add(a.st_dev, a.st_ino) == 0) {
		reg_del(s->dir_dev, s->dir_ino);
		s->dir_dev = a.st_dev;
		s->dir_ino = a.st_ino;
	}
	return 0;
}

/* --- checking data.mdb before LMDB maps it ------------------------------- */

/*
 * LMDB maps data.mdb and follows page numbers without checking them
 * against the file: a page past the end of a truncated file faults with
 * SIGBUS.  So before mdb_env_open() the two meta pages are read with
 * pread() and checked: page flag, magic, format version, page size, the
 * last page and the roots within it, and the file long enough to hold
 * that last page; the newest meta's root pages must name themselves and be
 * branch or leaf pages.  What LMDB 0.9 writes (mdb.c, not exported):
 * a 16-byte page header (u64 pgno, u16 pad, u16 flags, u16 lower, u16
 * upper), then in a meta page: u32 magic, u32 version, u64 address, u64
 * map size, two 48-byte database records (u32 pad, which in the first is
 * the page size, u16 flags, u16 depth, u64 branch, leaf and overflow page
 * counts, u64 entries, u64 root), u64 last page, u64 transaction id.
 * Damage inside the tree (a branch or leaf page overwritten) is not found
 * here; sg-lastcluster(1) says what is and is not detected.
 */
#define LM_P_BRANCH	0x01
#define LM_P_LEAF	0x02
#define LM_P_META	0x08
#define LM_MAGIC	0xBEEFC0DEu
#define LM_VERSION	1u
#define LM_HDR		16	/* page header */
#define LM_DB0		40	/* first database record, from the page */
#define LM_DBSZ		48
#define LM_LASTPG	136
#define LM_TXNID	144
#define LM_METASZ	152
#define LM_NOPAGE	UINT64_MAX	/* an empty database's root */
#define LM_MAXDEPTH	64

struct lm_meta {
	uint32_t	psize;
	uint16_t	depth[2];
	uint64_t	root[2];
	uint64_t	last_pg;
	uint64_t	txnid;
};

static uint16_t
ld16(const unsigned char *p)
{
	uint16_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

static uint32_t
ld32(const unsigned char *p)
{
	uint32_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

static uint64_t
ld64(const unsigned char *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

static int
pread_all(int fd, void *buf, size_t n, uint64_t off)
{
	ssize_t r;

	do
		r = pread(fd, buf, n, (off_t)off);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return errno;
	return (size_t)r == n ? 0 : SG_ESTORE;
}

/* Decode and check meta page i; NULL or why it does not check out. */
static const char *
meta_read(int fd, unsigned i, uint32_t psize, struct lm_meta *m)
{
	unsigned char b[LM_METASZ];
	unsigned d;

	if (pread_all(fd, b, sizeof(b), (uint64_t)i * psize) != 0)
		return "cannot be read";
	if ((ld16(b + 10) & LM_P_META) == 0 || ld32(b + LM_HDR) != LM_MAGIC)
		return "is not an LMDB meta page";
	if (ld32(b + LM_HDR + 4) != LM_VERSION)
		return "has an unknown LMDB format version";
	m->psize = ld32(b + LM_DB0);
	if (m->psize < 512 || m->psize > 65536 ||
	    (m->psize & (m->psize - 1)) != 0 || (i > 0 && m->psize != psize))
		return "has a bad page size";
	m->last_pg = ld64(b + LM_LASTPG);
	m->txnid = ld64(b + LM_TXNID);
	if (m->last_pg < 1 || m->last_pg > UINT64_MAX / m->psize - 1)
		return "has a bad last page";
	for (d = 0; d < 2; d++) {
		const unsigned char *db = b + LM_DB0 + d * LM_DBSZ;

		m->depth[d] = ld16(db + 6);
		m->root[d] = ld64(db + 40);
		if (m->root[d] == LM_NOPAGE)
			continue;
		if (m->root[d] < 2 || m->root[d] > m->last_pg ||
		    m->depth[d] < 1 || m->depth[d] > LM_MAXDEPTH)
			return "has a root page out of range";
	}
	return NULL;
}

/* The newest meta's root pages: self-named branch or leaf pages. */
static const char *
roots_check(int fd, const struct lm_meta *m)
{
	unsigned char h[LM_HDR];
	uint16_t fl, lo, up;
	unsigned d;

	for (d = 0; d < 2; d++) {
		if (m->root[d] == LM_NOPAGE)
			continue;
		if (pread_all(fd, h, sizeof(h), m->root[d] * m->psize) != 0)
			return "unreadable root page";
		fl = ld16(h + 10);
		lo = ld16(h + 12);
		up = ld16(h + 14);
		if (ld64(h) != m->root[d] ||
		    (fl & (LM_P_BRANCH | LM_P_LEAF)) == 0 ||
		    ((fl & LM_P_BRANCH) != 0) != (m->depth[d] > 1) ||
		    lo < LM_HDR || lo > up || up > m->psize)
			return "bad root page";
	}
	return NULL;
}

/* One look at the open data.mdb: NULL, or what is wrong. */
static const char *
data_check_once(int fd)
{
	struct lm_meta m[2];
	struct stat st;
	const char *why = NULL;
	uint64_t need;
	unsigned i, newest;

	if (fstat(fd, &st) != 0 || st.st_size == 0)
		return NULL;
	if ((why = meta_read(fd, 0, 0, &m[0])) != NULL) {
		why = "bad first meta page";
		goto out;
	}
	if ((uint64_t)st.st_size < 2 * (uint64_t)m[0].psize) {
		why = "shorter than its meta pages";
		goto out;
	}
	if ((why = meta_read(fd, 1, m[0].psize, &m[1])) != NULL) {
		why = "bad second meta page";
		goto out;
	}
	newest = m[1].txnid > m[0].txnid;
	for (i = 0; i < 2; i++) {
		need = (m[i].last_pg + 1) * m[i].psize;
		if ((uint64_t)st.st_size < need) {
			why = "truncated: shorter than its last page";
			goto out;
		}
	}
	why = roots_check(fd, &m[newest]);
out:
	return why;
}

/*
 * Check data.mdb (see above).  0: fine, or no file / an empty file (LMDB
 * creates it); SG_ESTORE with a message that says how to recover.  The
 * file is read outside any transaction while other processes may commit
 * (a meta page half rewritten, a root page reused), so a failed check is
 * repeated before it counts.
 */
static int
data_check(struct lstore *s, sg_error *err)
{
	const char *why = NULL;
	int fd, tries, rc = 0;

	if ((fd = open(s->datapath, O_RDONLY | O_CLOEXEC)) < 0)
		return 0;	/* LMDB reports, or creates, the file */
	for (tries = 0; tries < 3; tries++)
		if ((why = data_check_once(fd)) == NULL)
			break;
	close(fd);
	if (why != NULL)
		rc = sg_seterr(err, SG_ESTORE, "cannot open store '%s': "
		    "data.mdb is damaged (%s); it holds hints only: delete "
		    "it, or rebuild it with sg-lastcluster load from a dump",
		    s->dir, why);
	return rc;
}

/*
 * LMDB grows lock.mdb with ftruncate() and maps it: the same fault on a
 * full disk.  Allocate its blocks first.  A new (empty) file is sized as
 * LMDB 0.9 sizes it (a 128-byte header and a 64-byte slot per reader);
 * an existing one keeps its size (another process may map it), only its
 * holes are filled.  A filesystem without fallocate() is left to LMDB.
 */
static int
lock_alloc(struct lstore *s, sg_error *err)
{
	char path[PATH_MAX];
	struct stat st;
	off_t len;
	int fd, rc = 0;

	if ((size_t)snprintf(path, sizeof(path), "%s/lock.mdb", s->dir) >=
	    sizeof(path))
		return 0;		/* LMDB reports the long name */
	/* LMDB creates it too, even to read: an error is LMDB's to report. */
	if ((fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0640)) < 0)
		return 0;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
		len = st.st_size > 0 ? st.st_size :
		    (off_t)s->o.max_readers * 64 + 128;
		if (fallocate(fd, 0, 0, len) != 0 && errno != EOPNOTSUPP)
			rc = sg_seterr(err, errno, "cannot open store '%s': "
			    "cannot allocate lock.mdb: %s", s->dir,
			    strerror(errno));
	}
	close(fd);
	return rc;
}

/* --- the environment ----------------------------------------------------- */

static void
rslot_free(struct rslot *r)
{
	mdb_txn_abort(r->txn);
	free(r);
}

/* Drop the cached read transaction (env write-locked, or closing). */
static void
rtxn_drop(struct lstore *s)
{
	struct rslot *r = atomic_exchange(&s->rtxn, NULL);

	if (r != NULL)
		rslot_free(r);
}

#define SWAPPED		(-1)	/* env_open_once(): data.mdb replaced, retry */

static int
dbis_open(struct lstore *s, MDB_txn *txn, unsigned flags)
{
	int rc;

	if ((rc = mdb_dbi_open(txn, DB_MAIN, flags, &s->dbi_main)) != 0 ||
	    (rc = mdb_dbi_open(txn, DB_TIME, flags, &s->dbi_time)) != 0 ||
	    (rc = mdb_dbi_open(txn, DB_META, flags, &s->dbi_meta)) != 0)
		return rc;
	return 0;
}

/* Begin a transaction on a freshly opened env, adopting a grown map. */
static int
fresh_begin(MDB_env *env, unsigned flags, MDB_txn **txn)
{
	int rc, tries;

	for (tries = 0;; tries++) {
		rc = mdb_txn_begin(env, NULL, flags, txn);
		if (rc != MDB_MAP_RESIZED || tries == 4)
			return rc;
		mdb_env_set_mapsize(env, 0);
	}
}

/*
 * Open the environment once.  The named databases are opened in a read
 * transaction when they exist; creating them takes a write transaction,
 * which, like every write transaction here, first checks under the writer
 * lock that data.mdb is still the file this environment maps: a process
 * that opened the store just before a compaction swapped it must not
 * commit into the replaced file (its commit would also move LMDB's shared
 * transaction id and hide the other processes' last commit).
 */
static int
env_open_once(struct lstore *s, sg_error *err)
{
	MDB_env *env = NULL;
	MDB_txn *txn = NULL;
	MDB_envinfo info;
	struct stat st, now;
	unsigned flags = MDB_NOTLS | (s->o.sync ? 0 : MDB_NOSYNC);
	uint64_t g;
	int rc, fd, dead = 0;

	/* A removed store comes back as a new one (sg-lastcluster(1)). */
	if (s->o.create && (rc = mkdirs(s->dir)) != 0)
		return sg_seterr(err, rc, "cannot create store '%s': %s",
		    s->dir, strerror(rc));
	if ((rc = gen_refresh(s, err)) != 0)
		return rc;
	/* Before opening: a swap after this load is seen later as a change. */
	g = gen_load(s);
	if (!s->o.create && stat(s->datapath, &st) != 0)
		return sg_seterr(err, errno, "cannot open store '%s': %s",
		    s->dir, strerror(errno));
	if ((rc = data_check(s, err)) != 0 || (rc = lock_alloc(s, err)) != 0)
		return rc;
	if ((rc = mdb_env_create(&env)) != 0)
		return lerr(err, rc, "mdb_env_create");
	if ((rc = mdb_env_set_maxdbs(env, 4)) != 0 ||
	    (rc = mdb_env_set_maxreaders(env, s->o.max_readers)) != 0 ||
	    (rc = mdb_env_set_mapsize(env, (size_t)s->map_size)) != 0) {
		lerr(err, rc, "LMDB options");
		goto fail;
	}
	if ((rc = mdb_env_open(env, s->dir, flags, 0640)) != 0) {
		sg_seterr(err, mdb_to_sg(rc), "cannot open store '%s': %s",
		    s->dir, mdb_strerror(rc));
		goto fail;
	}
	if ((rc = mdb_env_get_fd(env, &fd)) != 0 || fstat(fd, &st) != 0) {
		rc = rc != 0 ? rc : errno;
		lerr(err, rc, "data file");
		goto fail;
	}
	if (mdb_reader_check(env, &dead) == 0 && dead > 0)
		atomic_fetch_add(&s->stale_readers, (uint32_t)dead);
	if ((rc = fresh_begin(env, MDB_RDONLY, &txn)) != 0) {
		lerr(err, rc, "cannot begin a transaction");
		goto fail;
	}
	rc = dbis_open(s, txn, 0);
	if (rc == 0) {
		rc = mdb_txn_commit(txn);	/* keeps the handles */
		txn = NULL;
		if (rc != 0) {
			lerr(err, rc, "cannot open the databases");
			goto fail;
		}
	} else {
		mdb_txn_abort(txn);
		txn = NULL;
		if (rc != MDB_NOTFOUND) {
			sg_seterr(err, mdb_to_sg(rc), "store '%s' is not a "
			    "last-cluster store: %s", s->dir, mdb_strerror(rc));
			goto fail;
		}
		if ((rc = fresh_begin(env, 0, &txn)) != 0) {
			lerr(err, rc, "cannot begin a write transaction");
			goto fail;
		}
		if (gen_load(s) != g || stat(s->datapath, &now) != 0 ||
		    now.st_ino != st.st_ino || now.st_dev != st.st_dev) {
			mdb_txn_abort(txn);
			mdb_env_close(env);
			return SWAPPED;
		}
		if ((rc = dbis_open(s, txn, MDB_CREATE)) != 0) {
			mdb_txn_abort(txn);
			sg_seterr(err, mdb_to_sg(rc), "store '%s' is not a "
			    "last-cluster store: %s", s->dir, mdb_strerror(rc));
			goto fail;
		}
		if ((rc = mdb_txn_commit(txn)) != 0) {
			lerr(err, rc, "cannot commit");
			goto fail;
		}
		commits_bump(s);
	}
	if (mdb_env_info(env, &info) == 0)
		s->map_size = info.me_mapsize;
	{
		MDB_stat es;

		s->psize = mdb_env_stat(env, &es) == 0 ? es.ms_psize : 4096;
	}
	s->data_dev = st.st_dev;
	s->data_ino = st.st_ino;
	atomic_store(&s->data_len, (uint64_t)st.st_size);
	s->env = env;
	s->env_rc = 0;
	s->gen = g;
	s->fault = FAULT_NONE;
	atomic_store(&s->up, true);
	return 0;
fail:
	mdb_env_close(env);
	return mdb_to_sg(rc);
}

/* Open s->env (s->rw write-locked or not yet shared). */
static int
env_open(struct lstore *s, sg_error *err)
{
	int rc, tries;

	for (tries = 0; tries < MAX_RETRIES; tries++)
		if ((rc = env_open_once(s, err)) != SWAPPED)
			return rc;
	return sg_seterr(err, SG_ESTORE, "store keeps changing under us");
}

/*
 * Whether data.mdb is still the file s->env maps (s->env open): SW_NO,
 * SW_SWAPPED (replaced: reopen) or SW_REMOVED (no data.mdb any more, or
 * no directory).  Every write transaction asks, under the writer lock, so
 * the common answer is cheap: the generation counter (a load from the
 * shared mapping), then fstat() of the mapped file's own descriptor, whose
 * link count a rename over data.mdb (a compactor killed before its
 * generation bump) or a removal drops to zero.  Looking the name up (stat:
 * a path walk) tells those two apart and also catches a replaced file
 * whose old inode keeps another link; by_name asks for it (write_txn:
 * every GEN_POLL_MS; a reopen: always).
 */
static int
env_swapped(struct lstore *s, bool by_name)
{
	struct stat st;
	int fd;

	if (gen_load(s) != s->gen)
		return SW_SWAPPED;
	if (mdb_env_get_fd(s->env, &fd) != 0 || fstat(fd, &st) != 0)
		return SW_SWAPPED;
	if (st.st_nlink > 0 && !by_name)
		return SW_NO;
	if (stat(s->datapath, &st) != 0)
		return errno == ENOENT || errno == ENOTDIR ? SW_REMOVED :
		    SW_SWAPPED;
	return st.st_ino != s->data_ino || st.st_dev != s->data_dev ?
	    SW_SWAPPED : SW_NO;
}

/* write_txn(): look the name up too when GEN_POLL_MS has passed. */
static int
env_swapped_txn(struct lstore *s)
{
	uint64_t now = mono_ms();
	bool by_name = now - s->last_name_check >= GEN_POLL_MS;

	if (by_name)
		s->last_name_check = now;
	return env_swapped(s, by_name);
}

/*
 * True if the mapped data.mdb was cut short while open: shorter than its
 * two meta pages, or shorter than it has been (LMDB never shrinks the file
 * without MDB_WRITEMAP, which is never used here; the page count in the
 * meta page is no bound, pages it counts need not have been written).  A
 * read of a page past the new end faults.  s->env open, s->rw held, no
 * transaction of ours begun.  Pages another process wrote past the length
 * seen here are not covered: lookups are guarded anyway (guarded_get()).
 */
static bool
data_short(struct lstore *s)
{
	struct stat st;
	uint64_t seen, len;
	int fd;

	if (mdb_env_get_fd(s->env, &fd) != 0 || fstat(fd, &st) != 0)
		return false;
	len = (uint64_t)st.st_size;
	seen = atomic_load(&s->data_len);
	while (len > seen && !atomic_compare_exchange_weak(&s->data_len, &seen,
	    len))
		;
	return len < 2 * (uint64_t)s->psize || len < seen;
}

/*
 * Close the environment because its file is gone or damaged (s->rw not
 * held): lookups and writes fail and the store reports itself disconnected
 * until a reopen succeeds (see "Faults while open" at the top).
 */
static void
env_down(struct lstore *s, int why)
{
	pthread_rwlock_wrlock(&s->rw);
	if (s->env != NULL) {
		locked_hook(s, "down");
		atomic_store(&s->up, false);
		rtxn_drop(s);
		mdb_env_close(s->env);
		s->env = NULL;
		s->env_rc = SG_ESTORE;
		s->fault = why;
		s->fault_dev = s->data_dev;
		s->fault_ino = s->data_ino;
	}
	pthread_rwlock_unlock(&s->rw);
}

static int down_err(const struct lstore *, sg_error *);

/* down_err() for a caller that holds no lock. */
static int
store_down_err(struct lstore *s, sg_error *err)
{
	int rc;

	pthread_rwlock_rdlock(&s->rw);
	rc = down_err(s, err);
	pthread_rwlock_unlock(&s->rw);
	return rc;
}

/* Why the store is down, as an error (s->rw held, s->env NULL). */
static int
down_err(const struct lstore *s, sg_error *err)
{
	int rc = s->env_rc != 0 ? s->env_rc : SG_ESTORE;

	switch (s->fault) {
	case FAULT_REMOVED:
		return sg_seterr(err, rc, "store '%s' was removed while open; "
		    "a new one is created at the next write", s->dir);
	case FAULT_TRUNCATED:
		return sg_seterr(err, rc, "store '%s': data.mdb was cut short "
		    "while open; it holds hints only: delete it", s->dir);
	default:
		return sg_seterr(err, rc, "store '%s' is closed: %s", s->dir,
		    sg_strerror(rc));
	}
}

/* Close and reopen the environment if it was swapped or is closed
 * (s->rw write-locked). */
static int
env_reopen_locked(struct lstore *s, sg_error *err)
{
	int rc;

	if (s->env != NULL && env_swapped(s, true) == SW_NO)
		return 0;
	locked_hook(s, "reopen");
	rtxn_drop(s);
	if (s->env != NULL) {
		mdb_env_close(s->env);
		s->env = NULL;
	}
	/* up stays as it was across a reopen (a compaction's swap is not a
	 * disconnection, and lookups wait on s->rw meanwhile) */
	if ((rc = env_open(s, err)) != 0) {
		s->env_rc = rc;
		atomic_store(&s->up, false);
	} else
		atomic_fetch_add(&s->reopens, 1);
	return rc;
}

/* The same, for a caller that holds no lock on s->rw and no transaction. */
static int
env_reopen(struct lstore *s, sg_error *err)
{
	int rc;

	pthread_rwlock_wrlock(&s->rw);
	rc = env_reopen_locked(s, err);
	pthread_rwlock_unlock(&s->rw);
	return rc;
}

/* Another process grew the map: adopt its size (s->rw write-locked). */
static void
env_adopt_locked(struct lstore *s)
{
	MDB_envinfo info;

	if (s->env != NULL) {
		locked_hook(s, "adopt");
		rtxn_drop(s);
		mdb_env_set_mapsize(s->env, 0);
		if (mdb_env_info(s->env, &info) == 0)
			s->map_size = info.me_mapsize;
	}
}

static void
env_adopt(struct lstore *s)
{
	pthread_rwlock_wrlock(&s->rw);
	env_adopt_locked(s);
	pthread_rwlock_unlock(&s->rw);
}

/* Ask the store thread to reopen or adopt, for a caller that cannot wait. */
static void
maint_request(struct lstore *s, unsigned bits)
{
	atomic_fetch_or(&s->maint, bits);
	pthread_mutex_lock(&s->mu);
	wake_locked(s);
	pthread_mutex_unlock(&s->mu);
}

/* The map is full: double it, up to the maximum. */
static int
env_grow(struct lstore *s, sg_error *err)
{
	MDB_envinfo info;
	uint64_t cur, next;
	int rc = 0;

	pthread_rwlock_wrlock(&s->rw);
	if (s->env == NULL) {
		rc = sg_seterr(err, s->env_rc, "store is closed");
		goto out;
	}
	if ((rc = mdb_env_info(s->env, &info)) != 0) {
		rc = lerr(err, rc, "mdb_env_info");
		goto out;
	}
	cur = info.me_mapsize;
	if (cur >= s->o.map_size_max) {
		rc = sg_seterr(err, SG_EFULL, "store map full at its maximum "
		    "size (%llu bytes)", (unsigned long long)cur);
		goto out;
	}
	next = cur > s->o.map_size_max / 2 ? s->o.map_size_max : cur * 2;
	locked_hook(s, "grow");
	rtxn_drop(s);
	if ((rc = mdb_env_set_mapsize(s->env, (size_t)next)) != 0) {
		rc = lerr(err, rc, "cannot grow the map");
		goto out;
	}
	s->map_size = next;
	atomic_fetch_add(&s->map_grows, 1);
out:
	pthread_rwlock_unlock(&s->rw);
	return rc;
}

/*
 * Take s->rw for reading with an open, current environment (reopening it
 * after a swap).  Returns 0 with the lock held, or an error without it.
 */
static int
env_enter(struct lstore *s, sg_error *err)
{
	int rc, tries;

	for (tries = 0; tries < MAX_RETRIES; tries++) {
		pthread_rwlock_rdlock(&s->rw);
		if (s->env != NULL && gen_load(s) == s->gen)
			return 0;
		pthread_rwlock_unlock(&s->rw);
		if ((rc = env_reopen(s, err)) != 0)
			return rc;
	}
	return sg_seterr(err, SG_ESTORE, "store keeps changing under us");
}

/*
 * env_enter() for lookups, which must not wait for the store thread (it may
 * hold s->rw for reading while it waits for LMDB's writer lock).  After a
 * swap the environment is reopened at once when s->rw is free; otherwise
 * the store thread is asked to, and the lookup reads the old file, a
 * consistent snapshot from just before the swap.
 */
static int
env_enter_nowait(struct lstore *s, sg_error *err)
{
	int rc, tries;

	for (tries = 0; tries < MAX_RETRIES; tries++) {
		pthread_rwlock_rdlock(&s->rw);
		if (s->env != NULL && gen_load(s) == s->gen)
			return 0;
		if (s->env == NULL && s->fault != FAULT_NONE) {
			/* Down: a lookup never makes a new store. */
			rc = down_err(s, err);
			pthread_rwlock_unlock(&s->rw);
			maint_request(s, MAINT_REOPEN);
			return rc;
		}
		pthread_rwlock_unlock(&s->rw);
		if (pthread_rwlock_trywrlock(&s->rw) == 0) {
			rc = env_reopen_locked(s, err);
			pthread_rwlock_unlock(&s->rw);
			if (rc != 0)
				return rc;
			continue;
		}
		maint_request(s, MAINT_REOPEN);
		pthread_rwlock_rdlock(&s->rw);
		if (s->env != NULL)
			return 0;
		rc = s->env_rc != 0 ? s->env_rc : SG_ESTORE;
		pthread_rwlock_unlock(&s->rw);
		return sg_seterr(err, rc, "store is being reopened");
	}
	return sg_seterr(err, SG_ESTORE, "store keeps changing under us");
}

/* Cache r, still holding its snapshot; a second one is dropped. */
static void
rtxn_put(struct lstore *s, struct rslot *r)
{
	struct rslot *expect = NULL;

	if (!atomic_compare_exchange_strong(&s->rtxn, &expect, r))
		rslot_free(r);
}

/*
 * Store thread, after its work and every GEN_POLL_MS when idle: let go of
 * a cached snapshot that a commit (of any process) made old, or that is
 * past SNAP_MAX_MS (a writer of an older version bumps no counter), so
 * that an idle lookup side never keeps LMDB from reusing the pages later
 * commits free.
 */
static void
rtxn_release_old(struct lstore *s)
{
	uint64_t now = sgi_store_now(&s->o);
	struct rslot *r;

	pthread_rwlock_rdlock(&s->rw);
	if (s->env != NULL && (r = atomic_exchange(&s->rtxn, NULL)) != NULL) {
		if (r->live && (r->commits != commits_load(s) ||
		    now < r->ms || now - r->ms > SNAP_MAX_MS)) {
			mdb_txn_reset(r->txn);
			r->live = false;
		}
		rtxn_put(s, r);
	}
	pthread_rwlock_unlock(&s->rw);
}

/*
 * Run fn in a write transaction on the store thread, committing when it
 * returns 0.  Replays fn after a swap (reopen), a map resize by another
 * process, or a full map (grown here).  fn must be idempotent apart from
 * what it writes into the transaction.
 */
typedef int txn_fn(struct lstore *s, MDB_txn *txn, void *arg);

static int
write_txn(struct lstore *s, txn_fn *fn, void *arg, sg_error *err)
{
	MDB_txn *txn;
	int rc, tries;

	for (tries = 0; tries < MAX_RETRIES; tries++) {
		int sw;

		if ((rc = env_enter(s, err)) != 0)
			return rc;
		/* A file cut short under us faults where LMDB reads it. */
		if (data_short(s)) {
			pthread_rwlock_unlock(&s->rw);
			env_down(s, FAULT_TRUNCATED);
			return store_down_err(s, err);
		}
		rc = mdb_txn_begin(s->env, NULL, 0, &txn);
		if (rc == MDB_MAP_RESIZED) {
			pthread_rwlock_unlock(&s->rw);
			env_adopt(s);
			continue;
		}
		if (rc != 0) {
			pthread_rwlock_unlock(&s->rw);
			return lerr(err, rc, "cannot begin a write transaction");
		}
		/* Under the writer lock: is data.mdb still our file? */
		if ((sw = env_swapped_txn(s)) != SW_NO) {
			mdb_txn_abort(txn);
			pthread_rwlock_unlock(&s->rw);
			if (sw == SW_REMOVED) {
				/* The batch fails; the next one recreates. */
				env_down(s, FAULT_REMOVED);
				return store_down_err(s, err);
			}
			if ((rc = env_reopen(s, err)) != 0)
				return rc;
			continue;
		}
		if ((rc = fn(s, txn, arg)) == 0) {
			if ((rc = mdb_txn_commit(txn)) == 0)
				commits_bump(s);
		} else
			mdb_txn_abort(txn);
		pthread_rwlock_unlock(&s->rw);
		if (rc == MDB_MAP_FULL) {
			if ((rc = env_grow(s, err)) != 0)
				return rc;
			continue;
		}
		if (rc == MDB_MAP_RESIZED) {
			env_adopt(s);
			continue;
		}
		if (rc != 0)
			return lerr(err, rc, "write transaction");
		return 0;
	}
	return sg_seterr(err, SG_ESTORE, "write transaction: too many retries");
}

/* --- entries inside a write transaction ---------------------------------- */

static int
meta_get_u64(struct lstore *s, MDB_txn *txn, const char *name, uint64_t *v)
{
	MDB_val k = { strlen(name), (void *)(uintptr_t)name }, d;
	int rc;

	*v = 0;
	if ((rc = mdb_get(txn, s->dbi_meta, &k, &d)) == MDB_NOTFOUND)
		return 0;
	if (rc == 0 && d.mv_size == 8)
		memcpy(v, d.mv_data, 8);
	return rc;
}

static int
meta_put_u64(struct lstore *s, MDB_txn *txn, const char *name, uint64_t v)
{
	MDB_val k = { strlen(name), (void *)(uintptr_t)name }, d = { 8, &v };

	return mdb_put(txn, s->dbi_meta, &k, &d, 0);
}

/* Delete digest's entry (both databases); *count drops if it existed. */
static int
entry_del(struct lstore *s, MDB_txn *txn, const unsigned char *digest,
    bool only_expired, uint64_t seen_t, uint64_t now, uint64_t *count)
{
	MDB_val k = { SGI_DIGEST_LEN, (void *)(uintptr_t)digest }, v, ik;
	unsigned char ibuf[IDX_LEN];
	uint64_t t = 0, seq = 0;
	int rc;

	if ((rc = mdb_get(txn, s->dbi_main, &k, &v)) != 0)
		return rc == MDB_NOTFOUND ? 0 : rc;
	if (v.mv_size >= VAL_HDR) {
		memcpy(&t, v.mv_data, 8);
		memcpy(&seq, (const char *)v.mv_data + 8, 8);
	}
	if (only_expired && (t != seen_t || !is_expired(s, t, now)))
		return 0;
	be64_put(ibuf, t);
	be64_put(ibuf + 8, seq);
	ik.mv_size = IDX_LEN;
	ik.mv_data = ibuf;
	if ((rc = mdb_del(txn, s->dbi_time, &ik, NULL)) != 0 &&
	    rc != MDB_NOTFOUND)
		return rc;
	if ((rc = mdb_del(txn, s->dbi_main, &k, NULL)) != 0)
		return rc;
	(*count)--;
	return 0;
}

/* Delete the least recently written entry. */
static int
entry_evict_oldest(struct lstore *s, MDB_txn *txn, MDB_cursor *cur,
    uint64_t *count)
{
	MDB_val ik, d, k;
	int rc;

	if ((rc = mdb_cursor_get(cur, &ik, &d, MDB_FIRST)) != 0)
		return rc;
	if (d.mv_size != SGI_DIGEST_LEN)
		return MDB_CORRUPTED;
	k.mv_size = SGI_DIGEST_LEN;
	k.mv_data = d.mv_data;
	/* The digest lives in the page we are about to change: delete the
	 * main entry first. */
	if ((rc = mdb_del(txn, s->dbi_main, &k, NULL)) != 0 &&
	    rc != MDB_NOTFOUND)
		return rc;
	if ((rc = mdb_cursor_del(cur, 0)) != 0)
		return rc;
	(*count)--;
	return 0;
}

/*
 * Write op's entry through the batch's cursors (cm on the main database,
 * ct on the time index): one descent, a put that refuses to overwrite
 * (MDB_NOOVERWRITE), inserts a new key, or finds the old entry and leaves
 * the cursor on it, which is then overwritten in place (MDB_CURRENT) once
 * its old index key is gone; the new index key, the newest write, normally
 * sorts last and is appended without a search (MDB_APPEND; a key that does
 * not sort last, a clock step back or a restored write time, takes the
 * ordinary put).
 */
static int
entry_put(MDB_cursor *cm, MDB_cursor *ct, const struct op *op, uint64_t seq,
    uint64_t *count)
{
	MDB_val k = { SGI_DIGEST_LEN, (void *)(uintptr_t)op->digest }, v, ik, d;
	unsigned char vbuf[VAL_HDR + SG_ID_MAX], ibuf[IDX_LEN];
	int rc;

	memcpy(vbuf, &op->t, 8);
	memcpy(vbuf + 8, &seq, 8);
	memcpy(vbuf + VAL_HDR, op->id, op->id_len);
	v.mv_size = VAL_HDR + op->id_len;
	v.mv_data = vbuf;
	rc = mdb_cursor_put(cm, &k, &v, MDB_NOOVERWRITE);
	if (rc == MDB_KEYEXIST) {
		uint64_t ot = 0, oseq = 0;

		if (v.mv_size >= VAL_HDR) {
			memcpy(&ot, v.mv_data, 8);
			memcpy(&oseq, (const char *)v.mv_data + 8, 8);
		}
		be64_put(ibuf, ot);
		be64_put(ibuf + 8, oseq);
		ik.mv_size = IDX_LEN;
		ik.mv_data = ibuf;
		rc = mdb_cursor_get(ct, &ik, &d, MDB_SET);
		if (rc == 0)
			rc = mdb_cursor_del(ct, 0);
		if (rc != 0 && rc != MDB_NOTFOUND)
			return rc;
		v.mv_size = VAL_HDR + op->id_len;
		v.mv_data = vbuf;
		rc = mdb_cursor_put(cm, &k, &v, MDB_CURRENT);
	} else if (rc == 0)
		(*count)++;
	if (rc != 0)
		return rc;
	be64_put(ibuf, op->t);
	be64_put(ibuf + 8, seq);
	ik.mv_size = IDX_LEN;
	ik.mv_data = ibuf;
	d.mv_size = SGI_DIGEST_LEN;
	d.mv_data = (void *)(uintptr_t)op->digest;
	if ((rc = mdb_cursor_put(ct, &ik, &d, MDB_APPEND)) == MDB_KEYEXIST)
		rc = mdb_cursor_put(ct, &ik, &d, 0);
	return rc;
}

struct batch {
	const struct op	*ops;
	size_t		 n;
	uint64_t	 now;
	uint64_t	 superseded;	/* puts skipped (dedupe()) */
};

/*
 * Last write wins inside one transaction: a put whose key's next operation
 * in the batch is another put leaves nothing behind (the later put
 * replaces its entry and its time-index key), so it need not be written,
 * provided nothing in between can look at the entry.  Only an eviction
 * could (it takes the oldest entry, wherever that put would have moved the
 * key), so puts are skipped only in a batch that cannot evict: the entries
 * before it plus its puts within max_entries.  Sequence numbers are still
 * given to skipped puts, so every entry, index key and the stored counter
 * end as without skipping.  One walk from the end with a small hash of the
 * batch's keys (store thread only; entries of older batches are told
 * apart by a stamp, so the table is never cleared).
 */
struct dslot {
	uint32_t	stamp;
	uint32_t	idx;		/* the op that is next on this key */
};

#define DEDUPE_MAX	4096	/* larger batches are not deduplicated */

static bool *
dedupe(struct lstore *s, const struct batch *b, uint64_t count)
{
	size_t i, nput = 0, cap;
	uint32_t mask, h;

	for (i = 0; i < b->n; i++)
		nput += b->ops[i].kind == OP_PUT;
	if (nput < 2 || b->n > DEDUPE_MAX || count + nput > s->o.max_entries)
		return NULL;
	if (s->dtab == NULL) {
		for (cap = 64; cap < 2 * DEDUPE_MAX; cap *= 2)
			;
		s->dtab = calloc(cap, sizeof(*s->dtab));
		s->dskip = calloc(DEDUPE_MAX, sizeof(*s->dskip));
		if (s->dtab == NULL || s->dskip == NULL) {
			free(s->dtab);
			free(s->dskip);
			s->dtab = NULL;
			s->dskip = NULL;
			return NULL;
		}
		s->dmask = (uint32_t)cap - 1;
	}
	if (++s->dstamp == 0) {		/* wrapped: forget every stamp */
		memset(s->dtab, 0, ((size_t)s->dmask + 1) * sizeof(*s->dtab));
		s->dstamp = 1;
	}
	mask = s->dmask;
	for (i = b->n; i-- > 0;) {
		const struct op *op = &b->ops[i];
		struct dslot *d;

		memcpy(&h, op->digest, sizeof(h));	/* SHA-256 bits */
		for (h &= mask;; h = (h + 1) & mask) {
			d = &s->dtab[h];
			if (d->stamp != s->dstamp || memcmp(b->ops[d->idx].digest,
			    op->digest, SGI_DIGEST_LEN) == 0)
				break;
		}
		s->dskip[i] = op->kind == OP_PUT && d->stamp == s->dstamp &&
		    b->ops[d->idx].kind == OP_PUT;
		d->stamp = s->dstamp;
		d->idx = (uint32_t)i;
	}
	return s->dskip;
}

static int
apply_batch(struct lstore *s, MDB_txn *txn, void *arg)
{
	struct batch *b = arg;
	MDB_cursor *cur = NULL, *cm = NULL;
	MDB_stat ms;
	uint64_t seq, count;
	const bool *skip;
	size_t i;
	int rc;

	if ((rc = meta_get_u64(s, txn, "seq", &seq)) != 0 ||
	    (rc = mdb_stat(txn, s->dbi_main, &ms)) != 0 ||
	    (rc = mdb_cursor_open(txn, s->dbi_main, &cm)) != 0 ||
	    (rc = mdb_cursor_open(txn, s->dbi_time, &cur)) != 0)
		goto out;
	count = ms.ms_entries;
	skip = dedupe(s, b, count);
	b->superseded = 0;
	for (i = 0; i < b->n && rc == 0; i++) {
		const struct op *op = &b->ops[i];

		if (skip != NULL && skip[i]) {
			seq++;		/* as if written, then replaced */
			b->superseded++;
			continue;
		}
		switch (op->kind) {
		case OP_PUT:
			rc = entry_put(cm, cur, op, ++seq, &count);
			while (rc == 0 && count > s->o.max_entries)
				rc = entry_evict_oldest(s, txn, cur, &count);
			break;
		case OP_DEL:
			rc = entry_del(s, txn, op->digest, false, 0, 0, &count);
			break;
		case OP_EXPIRE:
			rc = entry_del(s, txn, op->digest, true, op->t, b->now,
			    &count);
			break;
		}
	}
	if (rc == 0)
		rc = meta_put_u64(s, txn, "seq", seq);
out:
	if (cur != NULL)
		mdb_cursor_close(cur);
	if (cm != NULL)
		mdb_cursor_close(cm);
	return rc;
}

/* Compaction, first half: expired entries, then capacity, from the front. */
struct sweep {
	uint64_t	now;
	size_t		limit;
	uint64_t	expired, evicted;	/* this transaction */
	uint64_t	entries;		/* after it */
	bool		more;
};

static int
sweep_fn(struct lstore *s, MDB_txn *txn, void *arg)
{
	struct sweep *sw = arg;
	MDB_cursor *cur = NULL;
	MDB_stat ms;
	MDB_val ik, d;
	uint64_t count;
	size_t n = 0;
	int rc;

	sw->expired = sw->evicted = 0;
	sw->more = false;
	if ((rc = mdb_stat(txn, s->dbi_main, &ms)) != 0 ||
	    (rc = mdb_cursor_open(txn, s->dbi_time, &cur)) != 0)
		return rc;
	count = ms.ms_entries;
	while (n < sw->limit) {
		bool expired;

		rc = mdb_cursor_get(cur, &ik, &d, MDB_FIRST);
		if (rc == MDB_NOTFOUND) {
			rc = 0;
			break;
		}
		if (rc != 0)
			break;
		if (ik.mv_size != IDX_LEN) {
			rc = MDB_CORRUPTED;
			break;
		}
		expired = is_expired(s, be64_get(ik.mv_data), sw->now);
		if (!expired && count <= s->o.max_entries)
			break;
		if ((rc = entry_evict_oldest(s, txn, cur, &count)) != 0)
			break;
		if (expired)
			sw->expired++;
		else
			sw->evicted++;
		n++;
	}
	mdb_cursor_close(cur);
	sw->more = rc == 0 && n == sw->limit;
	sw->entries = count;
	return rc;
}

/* Commit one dummy change so that the last transaction id moves on. */
static int
pad_fn(struct lstore *s, MDB_txn *txn, void *arg)
{
	(void)arg;
	return meta_put_u64(s, txn, "pad", mdb_txn_id(txn));
}

/* --- the store thread ---------------------------------------------------- */

/*
 * Before a partial batch commits, top it up with what was queued since the
 * store thread took its work (in order, from the front of the queue, as
 * much as the work buffer holds): a batch is cut short only when nothing
 * waits, never made to wait.  The n ops left at s->w + *off move to the
 * front of s->w.  True if ops were added.
 */
static bool
topup(struct lstore *s, size_t *off, size_t *n)
{
	size_t k, avail;

	pthread_mutex_lock(&s->mu);
	avail = s->qlen - s->qhead;
	if (avail == 0 || *n >= s->o.batch_max || *n >= s->wcap) {
		pthread_mutex_unlock(&s->mu);
		return false;
	}
	if (*off > 0)
		memmove(s->w, s->w + *off, *n * sizeof(*s->w));
	*off = 0;
	k = s->o.batch_max - *n;
	if (k > s->wcap - *n)
		k = s->wcap - *n;
	if (k > avail)
		k = avail;
	memcpy(s->w + *n, s->q + s->qhead, k * sizeof(*s->w));
	s->qhead += k;
	if (s->qhead == s->qlen)
		s->qhead = s->qlen = 0;
	*n += k;
	pthread_mutex_unlock(&s->mu);
	return true;
}

/* Commit the n ops at s->w + off in batches of at most batch_max. */
static void
process(struct lstore *s, size_t off, size_t n)
{
	size_t chunk;

	while (n > 0) {
		struct batch b;
		sg_store_commit ci;
		sg_error e;
		int rc;

		if (n < s->o.batch_max)
			(void)topup(s, &off, &n);
		chunk = n < s->o.batch_max ? n : s->o.batch_max;
		b.ops = s->w + off;
		b.n = chunk;
		b.superseded = 0;
		b.now = sgi_store_now(&s->o);
		sg_error_clear(&e);
		rc = write_txn(s, apply_batch, &b, &e);
		if (rc == 0)
			s->dirty = true;
		ci.ops = chunk;
		ci.ops_done = s->done + chunk;
		ci.committed = s->committed + (rc == 0 ? chunk : 0);
		ci.rc = rc;
		/* Report before waking flushers, so a caller that flushes
		 * has seen every report when flush returns. */
		if (s->o.on_commit != NULL)
			s->o.on_commit(&ci, s->o.commit_arg);
		pthread_mutex_lock(&s->mu);
		s->done += chunk;
		if (rc == 0) {
			s->committed += chunk;
			s->commits++;
			s->superseded += b.superseded;
		} else {
			s->failed += chunk;
			if (s->flush_rc == 0) {
				s->flush_rc = rc;
				s->flush_err = e;
			}
		}
		pthread_cond_broadcast(&s->done_cv);
		pthread_mutex_unlock(&s->mu);
		off += chunk;
		n -= chunk;
	}
}

static int do_compact(struct lstore *, sg_store_compact_result *, sg_error *);

/* True if a compaction swapped the store since s->env was opened. */
static bool
env_stale(struct lstore *s)
{
	bool stale;

	pthread_rwlock_rdlock(&s->rw);
	stale = s->env != NULL && gen_load(s) != s->gen;
	pthread_rwlock_unlock(&s->rw);
	return stale;
}

/* Take s->rw for reading if the environment is open; never reopens. */
static bool
env_enter_up(struct lstore *s)
{
	pthread_rwlock_rdlock(&s->rw);
	if (s->env != NULL)
		return true;
	pthread_rwlock_unlock(&s->rw);
	return false;
}

/*
 * A down store is opened again only when a data.mdb is back by another
 * hand (a new file, or the directory made again): lookups and an idle
 * store thread never create one, writes do (env_enter).
 */
static void
reopen_if_back(struct lstore *s)
{
	struct stat st;

	if (stat(s->datapath, &st) == 0 && (st.st_ino != s->fault_ino ||
	    st.st_dev != s->fault_dev))
		(void)env_reopen(s, NULL);
}

/*
 * Every GEN_POLL_MS on the store thread, busy or idle: is data.mdb still
 * there, still ours and as long as the map needs?  A removed or cut file
 * closes the environment (env_down); a replaced one is reopened.  While
 * down, a data.mdb that another process put back (a new file, or the
 * directory made again) is opened; an idle store never creates one.
 */
static void
env_health(struct lstore *s)
{
	bool down, cut = false;
	int sw = SW_NO;

	pthread_rwlock_rdlock(&s->rw);
	down = s->env == NULL;
	if (!down && (sw = env_swapped(s, true)) == SW_NO)
		cut = data_short(s);
	pthread_rwlock_unlock(&s->rw);
	if (down) {
		reopen_if_back(s);
		return;
	}
	if (sw == SW_REMOVED)
		env_down(s, FAULT_REMOVED);
	else if (cut)
		env_down(s, FAULT_TRUNCATED);
	else if (sw == SW_SWAPPED)
		(void)env_reopen(s, NULL);
}

/* Requests from lookups (MAINT_*); a reopen of a down store at most every
 * GEN_POLL_MS. */
static void
maintain(struct lstore *s, unsigned maint)
{
	uint64_t now = mono_ms();
	bool down;

	if (maint & MAINT_FAULT)
		env_down(s, FAULT_TRUNCATED);
	if (maint & MAINT_REOPEN) {
		pthread_rwlock_rdlock(&s->rw);
		down = s->env == NULL;
		pthread_rwlock_unlock(&s->rw);
		if (!down)
			(void)env_reopen(s, NULL);
		else if (now - s->last_retry >= GEN_POLL_MS) {
			s->last_retry = now;
			reopen_if_back(s);
		}
	}
	if (maint & MAINT_ADOPT)
		env_adopt(s);
}

static void
periodic(struct lstore *s, bool force_sync)
{
	uint64_t now = mono_ms();
	int dead = 0;

	/* Leave a replaced file soon even when idle (see the top comment). */
	if (!force_sync && env_stale(s))
		(void)env_reopen(s, NULL);
	if (!force_sync)
		rtxn_release_old(s);
	if (!force_sync && now - s->last_health >= GEN_POLL_MS) {
		s->last_health = now;
		env_health(s);
	}

	if (s->dirty && (force_sync || (s->o.sync_interval_ms > 0 &&
	    now - s->last_sync >= s->o.sync_interval_ms))) {
		if (!s->o.sync && env_enter_up(s)) {
			mdb_env_sync(s->env, 1);
			pthread_rwlock_unlock(&s->rw);
		}
		s->dirty = false;
		s->last_sync = now;
	}
	if (now - s->last_check >= READER_CHECK_MS) {
		if (env_enter_up(s)) {
			if (mdb_reader_check(s->env, &dead) == 0 && dead > 0)
				atomic_fetch_add(&s->stale_readers,
				    (uint32_t)dead);
			pthread_rwlock_unlock(&s->rw);
		}
		s->last_check = now;
	}
}

/*
 * s->mu held, writes queued: the commit window.  Sleep until the oldest
 * queued write has waited commit_delay_us, so that the writes that come
 * meanwhile share its transaction; a full batch, a flush, a compaction,
 * maintenance or close ends the window at once.
 */
static void
linger(struct lstore *s)
{
	uint64_t end;
	struct timespec ts;

	end = s->q_first_ns + (uint64_t)s->o.commit_delay_us * 1000;
	while (s->qlen != s->qhead && !s->stop && s->job == NULL &&
	    s->flushing == 0 && atomic_load(&s->maint) == 0 &&
	    s->qlen - s->qhead < s->o.batch_max) {
		if (mono_ns() >= end)
			break;
		ns_to_ts(end, &ts);
		s->lingering = true;
		s->window_waits++;
		(void)pthread_cond_timedwait(&s->work_cv, &s->mu, &ts);
		s->lingering = false;
	}
}

/*
 * s->mu held, nothing to do: sleep until s->tfd fires (kick_locked(): a
 * write's commit window ended, or urgent work) or ms pass.  False when the
 * time ran out.  A kick that comes after the thread woke for another
 * reason fires later and wakes it once for nothing.
 */
static bool
sleep_idle(struct lstore *s, uint64_t ms)
{
	struct pollfd pfd = { .fd = s->tfd, .events = POLLIN };
	struct timespec ts;
	uint64_t n;
	int rc;

	s->idle = true;
	if (s->tfd < 0) {
		ns_to_ts(mono_ns() + ms * 1000000, &ts);
		rc = pthread_cond_timedwait(&s->work_cv, &s->mu, &ts);
		s->idle = false;
		s->kick = KICK_NONE;
		return rc != ETIMEDOUT;
	}
	pthread_mutex_unlock(&s->mu);
	rc = poll(&pfd, 1, (int)ms);
	if (rc > 0 && read(s->tfd, &n, sizeof(n)) < 0)
		n = 0;		/* EAGAIN: disarmed meanwhile */
	pthread_mutex_lock(&s->mu);
	s->idle = false;
	s->kick = KICK_NONE;
	return rc != 0;
}

static void *
store_main(void *arg)
{
	struct lstore *s = arg;

	/* named for per-thread accounting (top(1), /proc/PID/task/TID/comm) */
	(void)pthread_setname_np(pthread_self(), "sg-store");
	pthread_mutex_lock(&s->mu);
	for (;;) {
		struct op *tmp;
		struct job *job;
		unsigned maint;
		size_t n, off, cap;

		while (s->qlen == s->qhead && s->job == NULL && !s->stop &&
		    atomic_load(&s->maint) == 0) {
			uint64_t now = mono_ms(), due;

			due = s->last_check + READER_CHECK_MS;
			if (now + GEN_POLL_MS < due)
				due = now + GEN_POLL_MS;
			if (s->dirty && s->o.sync_interval_ms > 0 &&
			    s->last_sync + s->o.sync_interval_ms < due)
				due = s->last_sync + s->o.sync_interval_ms;
			if (due <= now)
				break;
			if (!sleep_idle(s, due - now))
				break;
		}
		if (s->stop && s->qlen == s->qhead && s->job == NULL)
			break;
		if (s->o.commit_delay_us > 0)
			linger(s);
		n = s->qlen - s->qhead;
		if (n > 0)
			s->wakeups++;
		off = s->qhead;
		tmp = s->q;
		cap = s->qcap;
		s->q = s->w;
		s->qcap = s->wcap;
		s->w = tmp;
		s->wcap = cap;
		s->qlen = s->qhead = 0;
		job = s->job;
		pthread_mutex_unlock(&s->mu);

		if ((maint = atomic_exchange(&s->maint, 0)) != 0)
			maintain(s, maint);
		if (n > 0)
			process(s, off, n);
		if (job != NULL) {
			job->rc = do_compact(s, job->r, &job->err);
			pthread_mutex_lock(&s->mu);
			job->done = true;
			s->job = NULL;
			pthread_cond_broadcast(&s->done_cv);
			pthread_mutex_unlock(&s->mu);
		}
		periodic(s, false);
		pthread_mutex_lock(&s->mu);
	}
	pthread_mutex_unlock(&s->mu);
	periodic(s, true);
	return NULL;
}

/*
 * Queue op; *seq (may be NULL) gets its number.  With trylock the queue is
 * skipped (EBUSY) rather than waited for when its mutex is taken.
 */
static int
enqueue(struct lstore *s, const struct op *op, bool trylock, uint64_t *seq,
    sg_error *err)
{
	int rc = 0;

	if (!trylock)
		pthread_mutex_lock(&s->mu);
	else if (pthread_mutex_trylock(&s->mu) != 0)
		return sg_seterr(err, EBUSY, "store queue is busy");
	if (s->stop) {
		rc = sg_seterr(err, EPIPE, "store is closing");
		goto out;
	}
	if (s->qlen == s->qcap && s->qhead > 0) {	/* reuse the taken front */
		memmove(s->q, s->q + s->qhead, (s->qlen - s->qhead) *
		    sizeof(*s->q));
		s->qlen -= s->qhead;
		s->qhead = 0;
	}
	if (s->qlen == s->qcap) {
		size_t ncap = s->qcap == 0 ? 256 : s->qcap * 2;
		struct op *nq;

		if (s->qcap >= s->o.queue_max) {
			rc = sg_seterr(err, EAGAIN, "store queue full "
			    "(%zu operations)", s->qcap);
			goto out;
		}
		if (ncap > s->o.queue_max)
			ncap = s->o.queue_max;
		if ((nq = realloc(s->q, ncap * sizeof(*nq))) == NULL) {
			rc = sg_seterr(err, SG_ENOMEM, "out of memory");
			goto out;
		}
		s->q = nq;
		s->qcap = ncap;
	}
	if (s->qlen == s->qhead && s->o.commit_delay_us > 0)
		s->q_first_ns = mono_ns();	/* the window starts */
	memcpy(&s->q[s->qlen], op, offsetof(struct op, id) + op->id_len);
	s->qlen++;
	s->enq++;
	if (seq != NULL)
		*seq = s->enq;
	/*
	 * One timer per sleep: the first write arms an idle store thread's
	 * timer for the end of its commit window (or at once, without a
	 * window), and the thread wakes once, to commit; later writes find
	 * it armed and cost no system call.  A full batch cuts the window
	 * short, idle or lingering.
	 */
	if (s->idle) {
		if (s->o.commit_delay_us > 0 &&
		    s->qlen - s->qhead < s->o.batch_max)
			kick_locked(s, s->q_first_ns +
			    (uint64_t)s->o.commit_delay_us * 1000, KICK_WINDOW);
		else
			kick_locked(s, 0, KICK_NOW);
	} else if (s->lingering && s->qlen - s->qhead >= s->o.batch_max) {
		s->lingering = false;
		pthread_cond_signal(&s->work_cv);
	}
out:
	pthread_mutex_unlock(&s->mu);
	return rc;
}

/* --- compaction ---------------------------------------------------------- */

static uint64_t
file_size(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
}

/* Open the copy read-only without a lock file and check it. */
static int
verify_copy(struct lstore *s, uint64_t txnid, uint64_t entries, sg_error *err)
{
	MDB_env *env = NULL;
	MDB_txn *txn = NULL;
	MDB_envinfo info;
	MDB_stat ms;
	MDB_dbi dbi;
	int rc;

	if ((rc = mdb_env_create(&env)) != 0 ||
	    (rc = mdb_env_set_maxdbs(env, 4)) != 0 ||
	    (rc = mdb_env_open(env, s->tmppath,
	    MDB_NOSUBDIR | MDB_RDONLY | MDB_NOLOCK, 0640)) != 0 ||
	    (rc = mdb_env_info(env, &info)) != 0 ||
	    (rc = mdb_txn_begin(env, NULL, MDB_RDONLY, &txn)) != 0 ||
	    (rc = mdb_dbi_open(txn, DB_MAIN, 0, &dbi)) != 0 ||
	    (rc = mdb_stat(txn, dbi, &ms)) != 0) {
		rc = lerr(err, rc, "cannot check the compacted copy");
		goto out;
	}
	if ((info.me_last_txnid & 1) != (txnid & 1) || ms.ms_entries != entries) {
		rc = sg_seterr(err, SG_ESTORE, "compacted copy is not what was "
		    "expected (txnid %zu for %llu, %zu entries for %llu)",
		    info.me_last_txnid, (unsigned long long)txnid,
		    ms.ms_entries, (unsigned long long)entries);
		goto out;
	}
out:
	if (txn != NULL)
		mdb_txn_abort(txn);
	mdb_env_close(env);
	return rc;
}

/* Copy-compact and swap (protocol at the top of this file). */
static int
compact_swap(struct lstore *s, uint64_t *generation, sg_error *err)
{
	MDB_txn *w = NULL;
	MDB_stat ms;
	uint64_t last;
	int rc, fd = -1, tries;

	for (tries = 0; tries < MAX_RETRIES; tries++) {
		if ((rc = env_enter(s, err)) != 0)
			return rc;
		rc = mdb_txn_begin(s->env, NULL, 0, &w);
		if (rc == MDB_MAP_RESIZED) {
			pthread_rwlock_unlock(&s->rw);
			env_adopt(s);
			continue;
		}
		if (rc != 0) {
			pthread_rwlock_unlock(&s->rw);
			return lerr(err, rc, "cannot begin a write transaction");
		}
		if (env_swapped(s, true) != SW_NO) {
			mdb_txn_abort(w);
			pthread_rwlock_unlock(&s->rw);
			if ((rc = env_reopen(s, err)) != 0)
				return rc;
			continue;
		}
		last = mdb_txn_id(w) - 1;
		if ((last & 1) == 0) {
			/* Make the last committed id odd, then start again. */
			mdb_txn_abort(w);
			pthread_rwlock_unlock(&s->rw);
			if ((rc = write_txn(s, pad_fn, NULL, err)) != 0)
				return rc;
			continue;
		}
		break;
	}
	if (tries == MAX_RETRIES)
		return sg_seterr(err, SG_ESTORE, "compaction: too many retries");

	/* W holds the writer lock from here to the end. */
	if ((rc = mdb_stat(w, s->dbi_main, &ms)) != 0) {
		rc = lerr(err, rc, "mdb_stat");
		goto out;
	}
	if (unlink(s->tmppath) != 0 && errno != ENOENT) {
		rc = sg_seterr(err, errno, "cannot remove '%s': %s",
		    s->tmppath, strerror(errno));
		goto out;
	}
	fd = open(s->tmppath, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0640);
	if (fd < 0) {
		rc = sg_seterr(err, errno, "cannot create '%s': %s",
		    s->tmppath, strerror(errno));
		goto out;
	}
	if ((rc = mdb_env_copyfd2(s->env, fd, MDB_CP_COMPACT)) != 0) {
		rc = lerr(err, rc, "compacting copy");
		goto out_unlink;
	}
	rc = fsync(fd) != 0 ? errno : 0;
	if (close(fd) != 0 && rc == 0)
		rc = errno;
	fd = -1;
	if (rc != 0) {
		rc = sg_seterr(err, rc, "cannot write '%s': %s", s->tmppath,
		    strerror(rc));
		goto out_unlink;
	}
	if ((rc = verify_copy(s, last, ms.ms_entries, err)) != 0)
		goto out_unlink;
	if (rename(s->tmppath, s->datapath) != 0) {
		rc = sg_seterr(err, errno, "cannot rename '%s': %s",
		    s->tmppath, strerror(errno));
		goto out_unlink;
	}
	/* The rename is done: the swap stands even if fsync fails. */
	fsync_dir(s->dir);
	*generation = __atomic_add_fetch(s->genp, 1, __ATOMIC_SEQ_CST);
	goto out;
out_unlink:
	if (fd >= 0)
		close(fd);
	unlink(s->tmppath);
out:
	mdb_txn_abort(w);	/* W wrote nothing: release the writer lock */
	pthread_rwlock_unlock(&s->rw);
	return rc;
}

static int
do_compact(struct lstore *s, sg_store_compact_result *r, sg_error *err)
{
	struct sweep sw;
	uint64_t gen = 0;
	int rc;

	memset(&sw, 0, sizeof(sw));
	r->bytes_before = file_size(s->datapath);
	do {
		sw.now = sgi_store_now(&s->o);
		sw.limit = s->o.batch_max < SWEEP_MAX ? s->o.batch_max :
		    SWEEP_MAX;
		if ((rc = write_txn(s, sweep_fn, &sw, err)) != 0)
			return rc;
		r->expired += sw.expired;
		r->evicted += sw.evicted;
		s->dirty = true;
	} while (sw.more);
	if ((rc = compact_swap(s, &gen, err)) != 0)
		return rc;
	r->swapped = true;
	if ((rc = env_reopen(s, err)) != 0)
		return rc;
	r->entries = sw.entries;
	r->bytes_after = file_size(s->datapath);
	r->generation = gen;
	return 0;
}

/* --- lookups that survive a file cut short -------------------------------- */

/*
 * A page of the mapping past the end of a data.mdb cut short while open
 * faults with SIGBUS.  A lookup reads the map with a guard armed on its
 * thread: the process-wide handler (installed once, at the first open)
 * jumps back out of LMDB to the guard, which ends the read transaction and
 * fails the lookup; the store thread then closes the environment.  A
 * SIGBUS anywhere else goes to the disposition there was before (by
 * default the process dies, as it would without the store).  LMDB's read
 * path takes no lock and allocates nothing, so leaving it by a jump leaves
 * nothing half done but the transaction, which the guard aborts.
 */
static _Thread_local sigjmp_buf *volatile bus_guard;
static struct sigaction bus_prev;
static pthread_mutex_t bus_mu = PTHREAD_MUTEX_INITIALIZER;

static void
bus_handler(int sig, siginfo_t *si, void *uc)
{
	sigjmp_buf *jb = bus_guard;

	if (jb != NULL && (si == NULL || si->si_code > 0)) {
		bus_guard = NULL;
		siglongjmp(*jb, 1);
	}
	if ((bus_prev.sa_flags & SA_SIGINFO) != 0 &&
	    bus_prev.sa_sigaction != NULL) {
		bus_prev.sa_sigaction(sig, si, uc);
		return;
	}
	if (bus_prev.sa_handler != SIG_DFL && bus_prev.sa_handler != SIG_IGN) {
		bus_prev.sa_handler(sig);
		return;
	}
	/* The default: the faulting access runs again and kills. */
	signal(sig, SIG_DFL);
	if (si == NULL || si->si_code <= 0)
		raise(sig);
}

/* At every open: (re)install the handler unless it is the one in place. */
static void
bus_install(void)
{
	struct sigaction sa, cur;

	bool ours;

	pthread_mutex_lock(&bus_mu);
	if (sigaction(SIGBUS, NULL, &cur) != 0)
		goto out;
	/* Ours, put back by someone who saved it with signal(): no
	 * SA_SIGINFO, and the handler it chains to is still the one saved. */
	ours = (cur.sa_flags & SA_SIGINFO) != 0 ?
	    cur.sa_sigaction == bus_handler :
	    cur.sa_handler == (void (*)(int))(void (*)(void))bus_handler;
	if (ours && (cur.sa_flags & SA_SIGINFO) != 0)
		goto out;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = bus_handler;
	/* SA_NODEFER: the jump out does not restore a signal mask (saving
	 * one would cost a system call per lookup), so SIGBUS must not be
	 * blocked while the handler runs. */
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGBUS, &sa, &cur) == 0 && !ours)
		bus_prev = cur;
out:
	pthread_mutex_unlock(&bus_mu);
}

static void maint_request_try(struct lstore *, unsigned);

#define GET_FAULT	(-30000)	/* guarded_get(): the read faulted */

/*
 * Read k's value (s->rw read-locked) into vbuf (up to VAL_HDR + SG_ID_MAX
 * bytes, *vlen its full length) with the guard armed: 0, MDB_NOTFOUND, an
 * LMDB error (MDB_MAP_RESIZED from the begin), or GET_FAULT.
 */
/*
 * The cached read transaction, holding a snapshot that is still the newest
 * (no commit announced since, by any process: one load of the shared
 * counter) and at most SNAP_MAX_MS old, or else renewed: renewing (which
 * makes LMDB look the named databases up again) costs more than the read.
 * NULL (and *rc) when none can be begun.
 */
static struct rslot *
rtxn_take(struct lstore *s, uint64_t now, struct rslot *volatile *held,
    int *rc)
{
	struct rslot *r;
	uint64_t c = commits_load(s);	/* before the renew: never newer */

	if ((r = atomic_exchange(&s->rtxn, NULL)) != NULL && r->live &&
	    r->commits == c && now >= r->ms && now - r->ms <= SNAP_MAX_MS)
		return r;
	*held = r;		/* the guard aborts it on a fault */
	if (r == NULL) {
		if ((r = calloc(1, sizeof(*r))) == NULL) {
			*rc = ENOMEM;
			return NULL;
		}
		if ((*rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY,
		    &r->txn)) != 0) {
			free(r);
			return NULL;
		}
	} else {
		if (r->live)
			mdb_txn_reset(r->txn);
		r->live = false;
		if ((*rc = mdb_txn_renew(r->txn)) != 0) {
			*held = NULL;
			rslot_free(r);
			return NULL;
		}
	}
	r->live = true;
	r->commits = c;
	r->ms = now;
	return r;
}

/*
 * Read k's value (s->rw read-locked) into vbuf (up to VAL_HDR + SG_ID_MAX
 * bytes, *vlen its full length) with the guard armed: 0, MDB_NOTFOUND, an
 * LMDB error (MDB_MAP_RESIZED from the begin), or GET_FAULT.
 */
static int
guarded_get(struct lstore *s, const sgi_lckey *k, uint64_t now,
    unsigned char *vbuf, size_t *vlen)
{
	MDB_val key = { SGI_DIGEST_LEN, (void *)(uintptr_t)k->digest }, val;
	struct rslot *volatile held = NULL;
	struct rslot *r;
	sigjmp_buf jb;
	int rc = 0;

	if (sigsetjmp(jb, 0) != 0) {
		bus_guard = NULL;
		if (held != NULL)
			rslot_free(held);
		return GET_FAULT;
	}
	bus_guard = &jb;
	held = r = rtxn_take(s, now, &held, &rc);
	if (r == NULL)
		goto out;
	rc = mdb_get(r->txn, s->dbi_main, &key, &val);
	if (rc == 0) {
		*vlen = val.mv_size;
		memcpy(vbuf, val.mv_data, val.mv_size < VAL_HDR + SG_ID_MAX ?
		    val.mv_size : VAL_HDR + SG_ID_MAX);
	}
	held = NULL;
	rtxn_put(s, r);
out:
	bus_guard = NULL;
	return rc;
}

/* --- the backend operations ---------------------------------------------- */

/*
 * Both lookups: read k (s->rw read-locked, released here) and queue an
 * expired entry's deletion (nowait: only if the queue's lock is free).
 * A fault on the mapping (the file cut short) fails the lookup and asks the
 * store thread to close the environment.  MDB_MAP_RESIZED is returned with
 * s->rw still held, for the caller to adopt the new size.
 */
static int
read_entry(struct lstore *s, const sgi_lckey *k, uint64_t now, bool nowait,
    sg_store_entry *out, sg_error *err)
{
	unsigned char vbuf[VAL_HDR + SG_ID_MAX];
	MDB_val val;
	uint64_t t = 0, seq;
	const char *id;
	size_t id_len, vlen = 0;
	bool hit = false;
	int rc;

	rc = guarded_get(s, k, now, vbuf, &vlen);
	if (rc == MDB_MAP_RESIZED)
		return rc;
	pthread_rwlock_unlock(&s->rw);
	if (rc == GET_FAULT) {
		atomic_store(&s->up, false);
		if (nowait)
			maint_request_try(s, MAINT_FAULT);
		else
			maint_request(s, MAINT_FAULT);
		return sg_seterr(err, SG_ESTORE, "store '%s': data.mdb was cut "
		    "short while open; it holds hints only: delete it", s->dir);
	}
	val.mv_size = vlen;
	val.mv_data = vbuf;
	if (rc == 0 && val_decode(&val, &t, &seq, &id, &id_len)) {
		hit = true;
		entry_fill(out, k->text[0] != '\0' ? k->text : NULL,
		    k->digest, t, id, id_len, now);
	}
	if (rc != 0 && rc != MDB_NOTFOUND)
		return lerr(err, rc, "lookup");
	if (!hit)
		return SG_ENOTFOUND;
	if (is_expired(s, t, now)) {
		struct op op;

		op.kind = OP_EXPIRE;
		op.t = t;
		op.id_len = 0;
		memcpy(op.digest, k->digest, SGI_DIGEST_LEN);
		(void)enqueue(s, &op, nowait, NULL, NULL);	/* best effort */
		return SG_ENOTFOUND;
	}
	return 0;
}

static int
lm_lookup(void *be, const sgi_lckey *k, sg_store_entry *out, sg_error *err)
{
	struct lstore *s = be;
	uint64_t now;
	int rc, tries;

	now = sgi_store_now(&s->o);
	for (tries = 0;; tries++) {
		if ((rc = env_enter_nowait(s, err)) != 0)
			return rc;
		rc = read_entry(s, k, now, false, out, err);
		if (rc != MDB_MAP_RESIZED)
			return rc;
		pthread_rwlock_unlock(&s->rw);
		if (tries >= MAX_RETRIES)
			return lerr(err, rc, "read transaction");
		if (pthread_rwlock_trywrlock(&s->rw) == 0) {
			env_adopt_locked(s);
			pthread_rwlock_unlock(&s->rw);
			continue;
		}
		maint_request(s, MAINT_ADOPT);
		return sg_seterr(err, EAGAIN, "store map is being resized");
	}
}

/* Ask the store thread for maintenance without waiting for its mutex: an
 * idle store thread that misses the signal still polls within GEN_POLL_MS. */
static void
maint_request_try(struct lstore *s, unsigned bits)
{
	atomic_fetch_or(&s->maint, bits);
	if (pthread_mutex_trylock(&s->mu) == 0) {
		wake_locked(s);
		pthread_mutex_unlock(&s->mu);
	}
}

/*
 * Take s->rw for reading without waiting, with an open environment (the
 * old one after a swap: the store thread is asked to reopen).  Returns 0
 * with the lock held, or EBUSY or the reason the store is closed.
 */
static int
env_enter_try(struct lstore *s, sg_error *err)
{
	int rc;

	if (pthread_rwlock_tryrdlock(&s->rw) != 0)
		return sg_seterr(err, EBUSY,
		    "store is being resized or reopened");
	if (s->env == NULL) {
		rc = down_err(s, err);
		pthread_rwlock_unlock(&s->rw);
		maint_request_try(s, MAINT_REOPEN);
		return rc;
	}
	if (gen_load(s) != s->gen)
		maint_request_try(s, MAINT_REOPEN);
	return 0;
}

/* The event loop's lookup: lm_lookup() that only ever tries its locks. */
static int
lm_lookup_nowait(void *be, const sgi_lckey *k, sg_store_entry *out,
    sg_error *err)
{
	struct lstore *s = be;
	uint64_t now;
	int rc, tries;

	now = sgi_store_now(&s->o);
	for (tries = 0;; tries++) {
		if ((rc = env_enter_try(s, err)) != 0)
			return rc;
		rc = read_entry(s, k, now, true, out, err);
		if (rc != MDB_MAP_RESIZED)
			return rc;
		pthread_rwlock_unlock(&s->rw);
		if (tries >= 2)
			return lerr(err, rc, "read transaction");
		if (pthread_rwlock_trywrlock(&s->rw) == 0) {
			env_adopt_locked(s);
			pthread_rwlock_unlock(&s->rw);
			continue;
		}
		maint_request_try(s, MAINT_ADOPT);
		return sg_seterr(err, EBUSY, "store map is being resized");
	}
}

static int
lm_put(void *be, const sgi_lckey *k, const char *id, size_t id_len,
    uint64_t written_ms, uint64_t *seq, sg_error *err)
{
	struct op op;

	op.kind = OP_PUT;
	op.t = written_ms;
	op.id_len = (uint16_t)id_len;
	memcpy(op.digest, k->digest, SGI_DIGEST_LEN);
	memcpy(op.id, id, id_len);
	return enqueue(be, &op, false, seq, err);
}

static int
lm_del(void *be, const sgi_lckey *k, sg_error *err)
{
	struct op op;

	op.kind = OP_DEL;
	op.t = 0;
	op.id_len = 0;
	memcpy(op.digest, k->digest, SGI_DIGEST_LEN);
	return enqueue(be, &op, false, NULL, err);
}

static int
lm_flush(void *be, sg_error *err)
{
	struct lstore *s = be;
	uint64_t target;
	int rc;

	pthread_mutex_lock(&s->mu);
	target = s->enq;
	s->flushing++;		/* no commit window while anyone flushes */
	wake_locked(s);
	while (s->done < target)
		pthread_cond_wait(&s->done_cv, &s->mu);
	s->flushing--;
	rc = s->flush_rc;
	if (rc != 0 && err != NULL)
		*err = s->flush_err;
	s->flush_rc = 0;
	pthread_mutex_unlock(&s->mu);
	return rc;
}

static int
lm_iterate(void *be, bool all, sg_store_iter_fn *fn, void *arg, sg_error *err)
{
	struct lstore *s = be;
	MDB_txn *txn = NULL;
	MDB_cursor *cur = NULL;
	MDB_val ik, d, v;
	MDB_cursor_op op = MDB_FIRST;
	sg_store_entry e;
	uint64_t now = sgi_store_now(&s->o);
	int rc;

	if ((rc = env_enter(s, err)) != 0)
		return rc;
	if ((rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn)) != 0 ||
	    (rc = mdb_cursor_open(txn, s->dbi_time, &cur)) != 0) {
		rc = lerr(err, rc, "read transaction");
		goto out;
	}
	for (;; op = MDB_NEXT) {
		uint64_t t, seq;
		const char *id;
		size_t id_len;

		if ((rc = mdb_cursor_get(cur, &ik, &d, op)) != 0)
			break;
		if (d.mv_size != SGI_DIGEST_LEN)
			continue;
		if (mdb_get(txn, s->dbi_main, &d, &v) != 0 ||
		    !val_decode(&v, &t, &seq, &id, &id_len))
			continue;
		if (!all && is_expired(s, t, now))
			continue;
		entry_fill(&e, NULL, d.mv_data, t, id, id_len, now);
		if ((rc = fn(&e, arg)) != 0)
			goto out;
	}
	rc = rc == MDB_NOTFOUND ? 0 : lerr(err, rc, "iterate");
out:
	if (cur != NULL)
		mdb_cursor_close(cur);
	if (txn != NULL)
		mdb_txn_abort(txn);
	pthread_rwlock_unlock(&s->rw);
	return rc;
}

static int
count_reader(const char *msg, void *ctx)
{
	/* One line per live slot, after a header line. */
	if (strstr(msg, "pid") == NULL && strstr(msg, "no active") == NULL)
		(*(uint32_t *)ctx)++;
	return 0;
}

static int
lm_stats(void *be, sg_store_stats *st, sg_error *err)
{
	struct lstore *s = be;
	MDB_txn *txn = NULL;
	MDB_cursor *cur = NULL;
	MDB_envinfo info;
	MDB_stat ms, es;
	MDB_val ik, d;
	MDB_cursor_op op = MDB_FIRST;
	struct stat fst;
	uint64_t now = sgi_store_now(&s->o);
	int rc, fd;

	if ((rc = env_enter(s, err)) != 0)
		return rc;
	if ((rc = mdb_txn_begin(s->env, NULL, MDB_RDONLY, &txn)) != 0 ||
	    (rc = mdb_stat(txn, s->dbi_main, &ms)) != 0 ||
	    (rc = mdb_env_info(s->env, &info)) != 0 ||
	    (rc = mdb_env_stat(s->env, &es)) != 0 ||
	    (rc = mdb_cursor_open(txn, s->dbi_time, &cur)) != 0) {
		rc = lerr(err, rc, "stats");
		goto out;
	}
	st->entries = ms.ms_entries;
	for (;; op = MDB_NEXT) {
		uint64_t t;

		if ((rc = mdb_cursor_get(cur, &ik, &d, op)) != 0)
			break;
		if (ik.mv_size != IDX_LEN)
			continue;
		t = be64_get(ik.mv_data);
		if (op == MDB_FIRST)
			st->oldest_age_ms = now > t ? now - t : 0;
		if (!is_expired(s, t, now))
			break;
		st->expired++;
	}
	if (rc != 0 && rc != MDB_NOTFOUND) {
		rc = lerr(err, rc, "stats");
		goto out;
	}
	rc = 0;
	st->map_size = info.me_mapsize;
	st->page_size = es.ms_psize;
	st->map_used = ((uint64_t)info.me_last_pgno + 1) * es.ms_psize;
	st->last_txnid = info.me_last_txnid;
	st->max_readers = info.me_maxreaders;
	mdb_reader_list(s->env, count_reader, &st->readers_used);
	if (mdb_env_get_fd(s->env, &fd) == 0 && fstat(fd, &fst) == 0)
		st->file_size = (uint64_t)fst.st_size;
	st->generation = s->gen;
out:
	if (cur != NULL)
		mdb_cursor_close(cur);
	if (txn != NULL)
		mdb_txn_abort(txn);
	pthread_rwlock_unlock(&s->rw);
	if (rc != 0)
		return rc;
	st->stale_readers = atomic_load(&s->stale_readers);
	st->map_grows = atomic_load(&s->map_grows);
	st->reopens = atomic_load(&s->reopens);
	pthread_mutex_lock(&s->mu);
	st->queued = s->enq - s->done;
	st->committed = s->committed;
	st->failed = s->failed;
	st->commits = s->commits;
	st->wakeups = s->wakeups;
	st->superseded = s->superseded;
	st->window_waits = s->window_waits;
	pthread_mutex_unlock(&s->mu);
	return 0;
}

static int
lm_compact(void *be, sg_store_compact_result *r, sg_error *err)
{
	struct lstore *s = be;
	struct job job;

	memset(&job, 0, sizeof(job));
	job.r = r;
	pthread_mutex_lock(&s->job_mu);
	pthread_mutex_lock(&s->mu);
	s->job = &job;
	wake_locked(s);
	while (!job.done)
		pthread_cond_wait(&s->done_cv, &s->mu);
	pthread_mutex_unlock(&s->mu);
	pthread_mutex_unlock(&s->job_mu);
	if (job.rc != 0 && err != NULL)
		*err = job.err;
	return job.rc;
}

static void
lm_free(struct lstore *s)
{
	rtxn_drop(s);
	if (s->env != NULL)
		mdb_env_close(s->env);
	if (s->genp != NULL)
		munmap(s->genp, 4096);
	if (s->genfd >= 0)
		close(s->genfd);
	if (s->tfd >= 0)
		close(s->tfd);
	pthread_rwlock_destroy(&s->rw);
	pthread_mutex_destroy(&s->mu);
	pthread_mutex_destroy(&s->job_mu);
	pthread_cond_destroy(&s->work_cv);
	pthread_cond_destroy(&s->done_cv);
	free(s->q);
	free(s->w);
	free(s->dtab);
	free(s->dskip);
	free(s->dir);
	free(s->datapath);
	free(s->tmppath);
	free(s->genpath);
	free(s);
}

static void
lm_close(void *be)
{
	struct lstore *s = be;

	if (s->thr_started) {
		pthread_mutex_lock(&s->mu);
		s->stop = true;
		wake_locked(s);
		pthread_mutex_unlock(&s->mu);
		pthread_join(s->thr, NULL);
	}
	reg_del(s->dir_dev, s->dir_ino);
	lm_free(s);
}

/* Open and sound: false while the store is down (its file removed or cut). */
static bool
lm_connected(void *be)
{
	struct lstore *s = be;

	return atomic_load(&s->up);
}

static void
lm_set_hook(void *be, const struct sgi_store_hook *h)
{
	struct lstore *s = be;

	atomic_store(&s->hook, h);
}

static const struct sgi_store_ops lmdb_ops = {
	.name = "lmdb",
	.digest_keys = true,
	.lookup = lm_lookup,
	.lookup_nowait = lm_lookup_nowait,
	.put = lm_put,
	.del = lm_del,
	.flush = lm_flush,
	.iterate = lm_iterate,
	.stats = lm_stats,
	.compact = lm_compact,
	.close = lm_close,
	.set_hook = lm_set_hook,
	.connected = lm_connected,
};

static char *
path_join(const char *dir, const char *name)
{
	size_t n = strlen(dir) + strlen(name) + 2;
	char *p = malloc(n);

	if (p != NULL)
		snprintf(p, n, "%s/%s", dir, name);
	return p;
}

int
sgi_store_lmdb_open(void **bep, const struct sgi_store_ops **ops,
    const sg_store_opts *o, sg_error *err)
{
	struct lstore *s;
	pthread_rwlockattr_t ra;
	pthread_condattr_t ca;
	struct stat st;
	bool registered = false;
	int rc = 0;

	if ((s = calloc(1, sizeof(*s))) == NULL)
		return sg_seterr(err, SG_ENOMEM, "out of memory");
	s->o = *o;
	s->genfd = -1;
	s->tfd = -1;
	atomic_init(&s->rtxn, NULL);
	atomic_init(&s->up, false);
	bus_install();
	atomic_init(&s->hook, NULL);
	pthread_rwlockattr_init(&ra);
	pthread_rwlockattr_setkind_np(&ra,
	    PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&s->rw, &ra);
	pthread_rwlockattr_destroy(&ra);
	pthread_mutex_init(&s->mu, NULL);
	pthread_mutex_init(&s->job_mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->work_cv, &ca);
	pthread_condattr_destroy(&ca);
	pthread_cond_init(&s->done_cv, NULL);
	if ((s->dir = strdup(o->path)) == NULL ||
	    (s->datapath = path_join(o->path, DATA_FILE)) == NULL ||
	    (s->tmppath = path_join(o->path, COMPACT_FILE)) == NULL ||
	    (s->genpath = path_join(o->path, GEN_FILE)) == NULL) {
		rc = sg_seterr(err, SG_ENOMEM, "out of memory");
		goto fail;
	}
	s->o.path = s->dir;
	s->map_size = o->map_size;
	if (o->create && (rc = mkdirs(s->dir)) != 0) {
		rc = sg_seterr(err, rc, "cannot create store '%s': %s", s->dir,
		    strerror(rc));
		goto fail;
	}
	if (stat(s->dir, &st) != 0)
		rc = errno;
	else if (!S_ISDIR(st.st_mode))
		rc = ENOTDIR;
	if (rc != 0) {
		rc = sg_seterr(err, rc, "cannot open store '%s': %s", s->dir,
		    strerror(rc));
		goto fail;
	}
	if (!o->create && access(s->datapath, F_OK) != 0) {
		rc = sg_seterr(err, errno, "cannot open store '%s': %s",
		    s->dir, strerror(errno));
		goto fail;
	}
	s->dir_dev = st.st_dev;
	s->dir_ino = st.st_ino;
	if ((rc = reg_add(st.st_dev, st.st_ino)) != 0) {
		rc = sg_seterr(err, rc, "store '%s' is already open in this "
		    "process", s->dir);
		goto fail;
	}
	registered = true;
	if ((rc = gen_open(s, err)) != 0)
		goto fail;
	if ((rc = env_open(s, err)) != 0)
		goto fail;
	s->last_sync = s->last_check = mono_ms();
	s->tfd = timer_open();
	if ((rc = pthread_create(&s->thr, NULL, store_main, s)) != 0) {
		rc = sg_seterr(err, rc, "cannot start the store thread: %s",
		    strerror(rc));
		goto fail;
	}
	s->thr_started = true;
	*bep = s;
	*ops = &lmdb_ops;
	return 0;
fail:
	if (registered)
		reg_del(s->dir_dev, s->dir_ino);
	lm_free(s);
	return rc;
}
