/*
 * sg_store.h — the last-cluster store: for each chat session, the cluster
 * that served its last request (sg-lastcluster(1)).
 *
 * Keys are derived, never raw: sg_lc_key() hashes the routing key, the model
 * and the cache affinity key into "lc:v1:" + 64 lowercase hex digits, so no
 * session id or affinity key ever reaches the store.  Values are a cluster
 * id (1..256 printable ASCII bytes) and the time it was written.
 *
 * One interface, several backends (a small vtable in sg_store_internal.h):
 * the LMDB backend (a directory shared by every process on the host) is the
 * default; the Redis backend (opts.path "redis://[[user]:password@]host:port
 * [/db]", "redis+sentinel://[password@]host:port[,...]/master[/db]" or
 * "redis+cluster://host:port[,...]") shares one map between hosts behind the
 * same calls.  Where Redis differs it says so below ("Redis:").
 *
 * Semantics common to every backend:
 *   - TTL: an entry whose age is >= the TTL is a miss, and is deleted;
 *     a write resets the age (the write time is the time of the put).
 *   - Capacity: beyond max_entries the least recently written entries are
 *     evicted at write time.
 *   - Writes are queued and committed by a store thread in groups (group
 *     commit): sg_store_put() never waits for the disk, only for a mutex, so
 *     it may be called from an event loop.  sg_store_flush() waits.  With
 *     opts.commit_delay_us a write waits in the queue up to that long for
 *     others to share its transaction (LMDB: the store thread wakes once,
 *     at the window's end, per transaction).
 *   - Visibility: a write is seen by lookups (in every process) once it is
 *     committed: after sg_store_flush(), or by itself a moment later, within
 *     commit_delay_us plus the transactions queued before it.  (A lookup
 *     reuses its read snapshot while no process has announced a commit;
 *     a process of an older version announces none, so its writes are seen
 *     within a millisecond.)  Last write wins: writes commit in the order
 *     they were queued, and a put replaced by a later put of the same key
 *     in the same transaction is not written at all.
 *   - Lookups are cheap (an LMDB read transaction, about a microsecond).
 *     sg_store_lookup() is synchronous and may wait, briefly, while the
 *     store thread resizes or reopens the map: it is for tools.  An event
 *     loop uses sg_store_lookup_start(), which never waits for anything: it
 *     has a deadline and completes at once when the store can be read
 *     without waiting, else with EBUSY or ETIMEDOUT (the LMDB backend), or
 *     later through sg_store_dispatch() (a networked backend).
 *   - Commits are reported on the store thread (on_commit) and, with the
 *     events option, to an event loop: sg_store_event_fd() becomes
 *     readable and sg_store_drain() hands over the commit records.
 *
 * Redis: SET PX carries the TTL, so Redis deletes an expired entry itself;
 * capacity is Redis's maxmemory with an LRU policy, not max_entries.
 *
 * Thread safety: every function may be called from any thread, concurrently,
 * except sg_store_close().  With opts.event_base (Redis), every call must
 * come from that loop's thread.  In one process a directory may be open only once
 * at a time (LMDB's rule); a second sg_store_open() of it returns EBUSY.
 * Never use a store handle in a child after fork(); open a new one there.
 */
#ifndef SG_STORE_H
#define SG_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sg_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* --- keys ---------------------------------------------------------------- */

/* "lc:v1:" + 64 hex digits. */
#define SG_LC_KEY_PREFIX	"lc:v1:"
#define SG_LC_KEY_LEN		70

/*
 * Store key of a session: "lc:v1:" + lowercase hex SHA-256 of
 * u64be(rk_len) || rk || u64be(model_len) || model || u64be(ak_len) || ak.
 * An absent routing key is the empty string (rk may be NULL when rk_len is
 * 0; likewise model and affinity_key).  Writes SG_LC_KEY_LEN characters and
 * a NUL into out.  Returns 0, or SG_EINVAL on a NULL pointer with a non-zero
 * length.  Thread-safe, no allocation.
 */
int	sg_lc_key(char out[SG_LC_KEY_LEN + 1], const char *routing_key,
	    size_t rk_len, const char *model, size_t model_len,
	    const char *affinity_key, size_t ak_len);

/* The 32 bytes of a store key's digest (what its 64 hex digits spell). */
#define SG_LC_DIGEST_LEN	32

/*
 * The digest of sg_lc_key() for the same arguments (sg_lc_key() writes its
 * lowercase hex after "lc:v1:"), for the _digest entry points below, which
 * skip the text form and its parsing.  Same returns as sg_lc_key().
 */
int	sg_lc_key_digest(unsigned char out[SG_LC_DIGEST_LEN],
	    const char *routing_key, size_t rk_len, const char *model,
	    size_t model_len, const char *affinity_key, size_t ak_len);

/* True if key[0..len) looks like a store key: "lc:v1:" + 64 lowercase hex. */
bool	sg_lc_key_valid(const char *key, size_t len);

/* True if id[0..len) is a valid cluster id: 1..256 bytes, each 0x20..0x7e. */
bool	sg_lc_cluster_id_valid(const char *id, size_t len);

/* --- the store ----------------------------------------------------------- */

typedef struct sg_store sg_store;

/* Defaults (sg-lastcluster(1)). */
#define SG_STORE_DEFAULT_TTL_MS		600000ULL	/* 10 minutes */
#define SG_STORE_DEFAULT_MAX_ENTRIES	100000ULL
#define SG_STORE_DEFAULT_MAP_SIZE	(64ULL << 20)	/* initial, grows */
#define SG_STORE_DEFAULT_MAP_SIZE_MAX	(1ULL << 40)	/* growth limit */
#define SG_STORE_DEFAULT_SYNC_MS	1000ULL
#define SG_STORE_DEFAULT_MAX_READERS	126
#define SG_STORE_DEFAULT_BATCH		4096	/* operations per transaction */
#define SG_STORE_DEFAULT_QUEUE		65536	/* queued operations */
#define SG_STORE_DEFAULT_COMMIT_DELAY_US 0	/* commit at once */
#define SG_STORE_DEFAULT_PATH		"/var/lib/stargate/lastcluster"

/* Wall clock in milliseconds since the Unix epoch (injectable for tests). */
typedef uint64_t sg_store_clock_fn(void *arg);

/*
 * What one group commit did; passed to on_commit on the store thread after
 * each write transaction.  Operations are numbered in the order they were
 * queued, from 1, over the life of the handle (lookups that find an expired
 * entry queue a deletion too).  ops_done counts operations finished,
 * committed or failed; committed counts those committed.  When rc is 0 every
 * operation up to ops_done is committed (and, with the sync option, durable).
 */
typedef struct sg_store_commit {
	uint64_t	ops;		/* operations in this transaction */
	uint64_t	ops_done;	/* cumulative, committed or failed */
	uint64_t	committed;	/* cumulative, committed */
	int		rc;		/* 0, or why these operations failed */
} sg_store_commit;

typedef void sg_store_commit_fn(const sg_store_commit *c, void *arg);

typedef struct sg_store_opts {
	const char	*path;		/* LMDB directory (default SG_STORE_DEFAULT_PATH) */
	bool		 create;	/* create the directory and files if missing */
	bool		 sync;		/* make every group commit durable */
	uint64_t	 ttl_ms;	/* > 0 */
	uint64_t	 max_entries;	/* > 0 (Redis: its maxmemory instead) */
	uint64_t	 map_size;	/* initial LMDB map size, bytes */
	uint64_t	 map_size_max;	/* the map grows (doubling) up to this */
	uint64_t	 sync_interval_ms; /* periodic fsync; 0 = only at close */
	unsigned	 max_readers;	/* LMDB reader slots (set by the first opener) */
	unsigned	 batch_max;	/* operations per write transaction */
	size_t		 queue_max;	/* queued operations; beyond, put returns EAGAIN */
	sg_store_clock_fn *clock;	/* NULL: CLOCK_REALTIME */
	void		*clock_arg;
	sg_store_commit_fn *on_commit;	/* NULL: none; runs on the store thread */
	void		*commit_arg;
	bool		 events;	/* keep commit records for sg_store_drain() */
	/*
	 * Commit coalescing window, microseconds (LMDB; Redis ignores it).
	 * 0, the default: the store thread takes a write as soon as it is
	 * queued (a commit per wake-up, however few the writes).  > 0: woken
	 * by a write to an empty queue, the store thread waits until that
	 * write has waited commit_delay_us (or batch_max operations are
	 * queued) and commits everything queued in one transaction, so a
	 * steady trickle of writes costs one wake-up and one transaction per
	 * window instead of one per write.  sg_store_flush(),
	 * sg_store_compact() and sg_store_close() never wait for the window.
	 */
	uint32_t	 commit_delay_us;
	/*
	 * A struct event_base * (libevent) or NULL.  NULL: LMDB as ever; a
	 * networked backend (Redis) then uses blocking calls with timeouts,
	 * for tools.  Set: a networked backend runs its asynchronous
	 * connections, timers and reconnects on that loop and never blocks;
	 * every call on the handle must then come from the loop's thread, and
	 * the loop must outlive the handle.  LMDB ignores it.
	 */
	void		*event_base;
} sg_store_opts;

/* Fill o with the defaults above (path SG_STORE_DEFAULT_PATH, create false). */
void	sg_store_opts_init(sg_store_opts *o);

/*
 * Open the store described by o (copied; o->path need not outlive the call)
 * and start its store thread.  Without o->create a missing directory or
 * data file is ENOENT (or ENOTDIR).  Returns 0 and sets *out, or a positive
 * errno (ENOENT, ENOTDIR, EACCES, EBUSY: already open in this process, ...),
 * SG_ECONFIG (bad option, unsupported backend), SG_ESTORE (not an LMDB
 * store, corrupt) or SG_ENOMEM.
 */
int	sg_store_open(sg_store **out, const sg_store_opts *o, sg_error *err);

/*
 * Drain the queued writes, sync the store to disk, stop the store thread
 * and free the handle.  NULL is a no-op.  No other call may be running.
 */
void	sg_store_close(sg_store *s);

/* One entry, copied out of the store. */
typedef struct sg_store_entry {
	char		key[SG_LC_KEY_LEN + 1];	/* "lc:v1:..." */
	char		cluster_id[SG_ID_MAX + 1];	/* NUL-terminated */
	size_t		cluster_id_len;
	uint64_t	written_ms;	/* write time, ms since the epoch */
	uint64_t	age_ms;		/* now - written_ms (0 if negative) */
} sg_store_entry;

/*
 * Look key[0..key_len) up.  Returns 0 and fills *out on a hit, SG_ENOTFOUND
 * on a miss (absent, expired, or an unreadable value), SG_EINVAL for a key
 * that is not "lc:v1:" + 64 lowercase hex, or an error (EAGAIN: the map
 * is being resized by another process; try later).  An expired entry is
 * deleted by the store thread (the lookup itself stays a read-only
 * transaction).  Never waits for LMDB's writer lock, in this process or
 * another: right after a compaction it may read the previous file (a
 * consistent snapshot) until the store thread has reopened the store.  It
 * may wait for this handle's store thread while that resizes the map or
 * reopens the environment (a map grow takes microseconds, a reopen about
 * a millisecond, longer on a slow disk): an event loop must use
 * sg_store_lookup_start() instead.
 */
int	sg_store_lookup(sg_store *s, const char *key, size_t key_len,
	    sg_store_entry *out, sg_error *err);

/*
 * Queue a write of cluster id id[0..id_len) under key, written now.
 * Returns 0 once queued (the commit happens later: see sg_store_flush()
 * and on_commit), SG_EINVAL for a bad key or cluster id, EAGAIN when the
 * queue is full (the write is dropped), or an error.  Never waits for I/O.
 */
int	sg_store_put(sg_store *s, const char *key, size_t key_len,
	    const char *id, size_t id_len, sg_error *err);

/*
 * sg_store_put(), also returning the operation's number (*seq, from 1, in
 * queue order: see sg_store_commit), so that an event loop can match the
 * commit records of sg_store_drain() to its writes.  seq may be NULL.
 */
int	sg_store_put_seq(sg_store *s, const char *key, size_t key_len,
	    const char *id, size_t id_len, uint64_t *seq, sg_error *err);

/*
 * sg_store_put_seq() of the key whose digest is digest (sg_lc_key_digest():
 * the key "lc:v1:" + its lowercase hex), without the key's text: the same
 * write, the same entry.  Returns as sg_store_put_seq() (SG_EINVAL for a
 * NULL digest or a bad cluster id).
 */
int	sg_store_put_digest_seq(sg_store *s,
	    const unsigned char digest[SG_LC_DIGEST_LEN], const char *id,
	    size_t id_len, uint64_t *seq, sg_error *err);

/* sg_store_put() with an explicit write time (restoring a backup). */
int	sg_store_put_at(sg_store *s, const char *key, size_t key_len,
	    const char *id, size_t id_len, uint64_t written_ms, sg_error *err);

/* Queue a deletion of key (absent is not an error); returns as
 * sg_store_put(). */
int	sg_store_del(sg_store *s, const char *key, size_t key_len, sg_error *err);

/*
 * Wait until every operation queued before the call is committed or has
 * failed.  Returns 0, or the first failure since the previous flush (the
 * failed operations are dropped; the store stays usable).
 */
int	sg_store_flush(sg_store *s, sg_error *err);

/* --- from an event loop ------------------------------------------------- */

/*
 * True while the backend can answer: LMDB always; Redis while the
 * connection to the primary (Sentinel: the primary the sentinels named;
 * Cluster: at least one node, with a slot map) is up.  Cheap (a field
 * read), never blocks; for a gauge and for skipping lookups that would
 * only time out.
 */
bool	sg_store_connected(sg_store *s);

/* CLOCK_MONOTONIC in nanoseconds: the clock of lookup deadlines. */
uint64_t sg_store_mono_ns(void);

typedef struct sg_store_lookup_req sg_store_lookup_req;
typedef void sg_store_lookup_cb(sg_store_lookup_req *req, void *arg);

/*
 * One lookup, in storage the caller owns (a request context), so that
 * starting one allocates nothing.  The result fields are set when the
 * lookup completes; the rest belongs to the store.
 */
struct sg_store_lookup_req {
	int		 rc;		/* 0 hit, SG_ENOTFOUND miss, ETIMEDOUT,
					 * EBUSY, or an error */
	sg_store_entry	 entry;		/* on a hit */
	sg_error	 err;		/* why, when rc is an error */
	/* Private to the store. */
	sg_store_lookup_cb *cb;
	void		*arg;
	uint64_t	 deadline_ns;
	bool		 pending;
	sg_store_lookup_req *next, *prev;
	void		*op;		/* the backend's command in flight */
};

/*
 * Start looking key[0..key_len) up, to be answered by deadline_ns
 * (sg_store_mono_ns() plus the lookup timeout, taken before any other
 * work).  Never blocks and never calls cb from inside the call.
 *
 * Returns 0 when the lookup completed at once: req->rc holds the result
 * and cb is never called.  This is what the LMDB backend always does: it
 * reads when it can do so without waiting, and otherwise answers EBUSY
 * (the store thread is resizing or reopening the map: a caller counts it
 * as a timeout) or ETIMEDOUT (the deadline had already passed).
 *
 * Returns EINPROGRESS when the answer needs the network (Redis on
 * opts.event_base): cb(req, arg) is then called exactly once, from the
 * loop, with the result, or with ETIMEDOUT from the backend's own timer at
 * the deadline (or from the first sg_store_dispatch() at or after it,
 * whichever runs first); unless sg_store_lookup_cancel() comes first.
 * req must stay put until then.  Redis answers at once (0) when it
 * cannot send: req->rc ENOTCONN (no connection to the node: reconnecting)
 * or EBUSY (too many commands in flight on a stalled connection), so a
 * Redis that is down costs a lookup nothing.  Without opts.event_base the
 * Redis backend answers at once too, by a blocking GET (tools only).
 *
 * Other returns: SG_EINVAL for a bad key (req->rc too).
 */
int	sg_store_lookup_start(sg_store *s, sg_store_lookup_req *req,
	    const char *key, size_t key_len, uint64_t deadline_ns,
	    sg_store_lookup_cb *cb, void *arg);

/*
 * sg_store_lookup_start() of the key whose digest is digest (see
 * sg_store_put_digest_seq()): the same lookup and result (a hit's
 * entry.key is the key's text), without parsing a key.  SG_EINVAL for a
 * NULL digest.
 */
int	sg_store_lookup_start_digest(sg_store *s, sg_store_lookup_req *req,
	    const unsigned char digest[SG_LC_DIGEST_LEN], uint64_t deadline_ns,
	    sg_store_lookup_cb *cb, void *arg);

/* Forget a pending lookup: its callback will not be called.  A lookup
 * that is not pending (completed, or never started) is left alone. */
void	sg_store_lookup_cancel(sg_store *s, sg_store_lookup_req *req);

/*
 * Complete what is due on the caller's loop: pending lookups whose answer
 * has arrived, and those past their deadline (ETIMEDOUT), each through
 * its callback.  now_ns is sg_store_mono_ns().  Returns the number of
 * callbacks made.  (With the LMDB backend nothing is ever pending.)
 */
size_t	sg_store_dispatch(sg_store *s, uint64_t now_ns);

/*
 * Earliest deadline among pending lookups into *deadline_ns, for the
 * loop's timer; false when nothing is pending.
 */
bool	sg_store_next_deadline(sg_store *s, uint64_t *deadline_ns);

/*
 * With the events option: a non-blocking descriptor (an eventfd) that is
 * readable while commit records wait for sg_store_drain(); the store owns
 * it (never close it).  Without the option, -1.
 *
 * Redis on a loop: a put is one SET sent at once (pipelined behind what is
 * in flight; never waits); its reply makes a commit record of one
 * operation (ops 1, rc 0 or the error).  A put that cannot be sent (no
 * connection) returns ENOTCONN at once and gets no number and no record.
 * With one connection (redis://, Sentinel) replies come in queue order,
 * so records cover (ops_done - ops, ops_done] exactly; with Cluster they
 * come per node, and ops_done counts operations finished in any order.
 * sg_store_flush() on a loop does not wait: it returns 0 when nothing is
 * in flight, else EINPROGRESS (the records tell when it is done).
 */
int	sg_store_event_fd(sg_store *s);

/* Commit records kept for sg_store_drain(); beyond, records merge. */
#define SG_STORE_EVENT_RING	256

/*
 * Take up to max commit records (oldest first) into out and return how
 * many; the descriptor stays readable while more wait.  Each record is
 * what on_commit saw: operations (ops_done - ops, ops_done] committed
 * together when rc is 0, or failed with rc.  When the loop falls more than
 * SG_STORE_EVENT_RING records behind, the newest record absorbs the next
 * ones (its rc is then the first failure among them).  Never blocks on
 * I/O; takes a mutex the store thread holds only to add a record.
 */
size_t	sg_store_drain(sg_store *s, sg_store_commit *out, size_t max);

/*
 * Call fn for each entry, least recently written first, in one read
 * snapshot; expired entries are skipped unless include_expired.  fn returns
 * 0 to go on; anything else stops the walk and is returned.  fn must not
 * call sg_store functions on the same handle.  The entry is valid during
 * the call only.
 */
typedef int sg_store_iter_fn(const sg_store_entry *e, void *arg);
int	sg_store_iterate(sg_store *s, bool include_expired, sg_store_iter_fn *fn,
	    void *arg, sg_error *err);

typedef struct sg_store_stats {
	const char	*backend;	/* "lmdb" or "redis" (static string) */
	uint64_t	 entries;	/* including expired ones */
	uint64_t	 expired;	/* entries already past the TTL */
	uint64_t	 oldest_age_ms;	/* 0 when empty */
	uint64_t	 ttl_ms;
	uint64_t	 max_entries;
	uint64_t	 map_size;	/* bytes mapped */
	uint64_t	 map_used;	/* bytes of the map in use (pages) */
	uint64_t	 file_size;	/* bytes of the data file */
	uint64_t	 page_size;
	uint64_t	 last_txnid;
	uint32_t	 max_readers;	/* reader slots */
	uint32_t	 readers_used;	/* slots held by live processes */
	uint32_t	 stale_readers;	/* dead slots cleared by this handle */
	uint64_t	 generation;	/* bumped by each compaction swap */
	/* Counters of this handle since open. */
	uint64_t	 queued;	/* operations waiting for the store thread */
	uint64_t	 committed;	/* operations committed */
	uint64_t	 failed;	/* operations dropped after an error */
	uint64_t	 commits;	/* write transactions */
	uint64_t	 map_grows;	/* map size increases */
	uint64_t	 reopens;	/* environment reopened after a compaction */
	uint64_t	 wakeups;	/* store thread woken to take writes */
	uint64_t	 superseded;	/* puts replaced by a later put of the
					 * same key in the same transaction,
					 * so never written (LMDB) */
	uint64_t	 window_waits;	/* sleeps of the store thread in a
					 * commit window (LMDB: the first
					 * write to an idle store arms its
					 * timer for the window's end, so
					 * it sleeps no second time) */
	/* Redis (LMDB: zero): INFO memory of the primary (Cluster: summed
	 * over the primaries), and the nodes reached. */
	uint64_t	 mem_used;	/* used_memory, bytes */
	uint64_t	 mem_max;	/* maxmemory, bytes (0: no limit) */
	char		 mem_policy[32];	/* maxmemory_policy */
	uint32_t	 nodes;		/* primaries (1 without Cluster) */
} sg_store_stats;

/* Fill *st (one read snapshot plus counters).  Returns 0 or an error.
 * Redis: entries, expired and oldest_age_ms come from a SCAN of the lc:v1:
 * keys (every primary's, with Cluster): tools only. */
int	sg_store_stats_get(sg_store *s, sg_store_stats *st, sg_error *err);

typedef struct sg_store_compact_result {
	uint64_t	expired;	/* expired entries deleted */
	uint64_t	evicted;	/* entries deleted to enforce the capacity */
	uint64_t	entries;	/* entries left */
	uint64_t	bytes_before;	/* data file size before */
	uint64_t	bytes_after;	/* data file size after */
	uint64_t	generation;	/* after the swap */
	bool		swapped;	/* a compacted copy replaced the data file */
} sg_store_compact_result;

/*
 * A copy of a store path or URL fit for messages and output: the password
 * of a Redis URL becomes "***" (the user name stays).  Writes at most cap
 * bytes with a NUL; returns the length it needed, as snprintf(3).
 */
size_t	sg_store_path_redact(char *out, size_t cap, const char *path);

/*
 * Drain the queue, delete expired entries, enforce the capacity (both in
 * short transactions of at most batch_max deletions), then reclaim file
 * space by copy-compaction and an atomic rename, safe while other processes
 * read and write the store (protocol: sg_store_lmdb.c, sg-lastcluster(1)).
 * Returns 0 and fills *r, or an error (nothing committed is lost either
 * way).  Redis expires entries itself and manages its own memory: the call
 * deletes nothing and returns 0 with *r zeroed but for entries (the live
 * entries a SCAN counts).
 */
int	sg_store_compact(sg_store *s, sg_store_compact_result *r, sg_error *err);

#ifdef __cplusplus
}
#endif

#endif /* SG_STORE_H */
