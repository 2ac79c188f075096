/*
 * dlog.h — the decision log of sg-proxy (sg-proxy(8) "Decision log").
 *
 * --decision-log FILE appends one NDJSON record per routing decision:
 *
 *   {"snapshot": <sg_snapshot_to_json of the view the decision read>,
 *    "request":  <sg_request_to_json, elapsed_ms = the decision's elapsed>,
 *    "decision": <what `sg-route` prints for it: sg_decision_to_json plus
 *                 elapsed_ms>,
 *    "context":  {"time_unix_ms", "pid", "worker", "seq" (this worker's
 *                 decision count, logged or not), "attempt",
 *                 "seed": "<router seed, decimal>",
 *                 "session_state" (when the decision classified),
 *                 "replay_exact": false (only when known not to be)}}
 *
 * Replay: the snapshot and request members are exactly what
 * `sg-route --ndjson` reads, so
 *   jq -c '{snapshot, request}' FILE | sg-route --ndjson -c LB --seed SEED
 * prints the logged decisions again, in order, with the same lb-config and
 * the proxy's --seed (jq 1.6 rounds integers above 2^53; a filter that
 * keeps numbers exact, or an sg-route that ignores the decision and
 * context members, reads the file as is).  Exactness conditions:
 *  - round-robin is stateful (one counter per definition in each worker's
 *    router): its replay is exact only for the complete, ordered stream of
 *    one worker (filter on context.pid; context.seq numbers every decision
 *    of the worker, logged or not, so a gap shows a sampled-out or dropped
 *    record).  A sample below 1 makes round-robin replays approximate:
 *    once a round-robin selection went unlogged (sampled out, dropped),
 *    every later round-robin record says "replay_exact": false.
 *  - the session classification (stargate-lb-config(5)) is made by a request's
 *  first
 *    decision and kept for its later ones; a fresh replay classifies every
 *    record again.  When the hint's presence in the view changed between
 *    decisions of one request, the record says "replay_exact": false.
 *  - affinity keys: the raw key is never written.  The record carries
 *    dlog_affinity_key(raw); decisions replay exactly because the daemon
 *    routes on that same hashed string (the router uses the key only as hash
 *    input and for presence), see dlog_affinity_key().  A key that is not in
 *    the hashed form is hashed before writing and the record is marked
 *    "replay_exact": false.  The hint (last_cluster_id) is a cluster id,
 *    not a secret, and is written as is.
 *  - request integers above INT64_MAX are written clamped (JSON integers
 *    are signed 64-bit here): such a record says "replay_exact": false.
 *
 * Sampling is deterministic per request id (XXH3 of the id against the
 * rate), so every decision of a request is kept or none.  Writes are
 * buffered in memory and appended with write(2) (O_APPEND) when the buffer
 * passes a threshold, on a timer of the event loop, on dlog_flush and at
 * close; a full buffer drops the record and counts it.  Each worker opens
 * its own dlog (after fork); records of several workers interleave by whole
 * lines in the same file.  Not thread-safe.
 */
#ifndef SG_PROXY_DLOG_H
#define SG_PROXY_DLOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sg_decision.h"
#include "sg_request.h"
#include "sg_snapshot.h"

struct event_base;

typedef struct dlog dlog;

typedef struct dlog_options {
	const char	*path;		/* --decision-log; NULL or "" = off */
	double		 sample;	/* --decision-log-sample, 0..1 */
	uint64_t	 seed;		/* the router's --seed (recorded) */
	int		 worker;	/* worker index (recorded) */
	size_t		 buffer_bytes;	/* 0 = 4 MiB */
	struct event_base *base;	/* periodic flush (250 ms); NULL = none */
} dlog_options;

typedef struct dlog_stats {
	uint64_t	 decisions;	/* dlog_record calls */
	uint64_t	 written;	/* records appended to the buffer */
	uint64_t	 sampled_out;	/* not logged by sampling */
	uint64_t	 dropped;	/* buffer full, record too large, no memory */
	uint64_t	 write_errors;	/* failed write(2) calls */
	uint64_t	 bytes;		/* bytes written to the file */
} dlog_stats;

/*
 * Open (create, mode 0640, O_APPEND) the log.  With no path, *out = NULL
 * and 0: every function accepts a NULL dlog as "off".  Errors: a positive
 * errno (cannot open) or SG_EINVAL (sample outside 0..1) or SG_ENOMEM,
 * with err filled ("decision log FILE: Permission denied").
 */
int	dlog_open(dlog **out, const dlog_options *o, sg_error *err);

/*
 * Log one decision: call after every successful sg_router_decide() (all of
 * them, so seq counts them and round-robin replays stay exact), with the
 * same snapshot view, request (after the decision: its session state is
 * read), elapsed_ms and decision.  attempt is the upstream attempt number
 * (1 for the first).  Returns true when the record was kept.
 */
bool	dlog_record(dlog *d, const sg_snapshot *snap, const sg_request *req,
	    double elapsed_ms, const sg_decision *dec, unsigned attempt);

/* Would a request with this id be logged (sampling)?  false when off. */
bool	dlog_sampled(const dlog *d, const char *request_id);

/* Write the buffer now.  0 or a positive errno. */
int	dlog_flush(dlog *d);

/*
 * SIGHUP: flush, then open the path again (log rotation).  If the new open
 * fails the old file stays in use and the errno is returned (err filled).
 */
int	dlog_reopen(dlog *d, sg_error *err);

void	dlog_stats_get(const dlog *d, dlog_stats *st);	/* NULL: zeros */

/* Flush, close and free.  NULL is a no-op. */
void	dlog_close(dlog *d);

/*
 * The cache affinity key the daemon routes on: "h:" and the lowercase hex
 * SHA-256 of the raw key (DLOG_AFFINITY_KEY_LEN chars + NUL).  Stable
 * across processes, restarts and hosts (no secret).  The daemon applies it
 * ALWAYS (decision log on or off, so the log never changes decisions) to
 * the trimmed, non-blank x-cache-affinity-key before the first decision,
 * and sets req->cache_affinity_key to the result; the raw key is used for
 * nothing else by the router stage.
 */
#define DLOG_AFFINITY_KEY_LEN	66
void	dlog_affinity_key(const char *raw, size_t n,
	    char out[DLOG_AFFINITY_KEY_LEN + 1]);

/* True if key (NUL-terminated) has the dlog_affinity_key() form. */
bool	dlog_affinity_key_hashed(const char *key);

#endif /* SG_PROXY_DLOG_H */
