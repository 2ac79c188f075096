/*
 * sg_fleet.h — the router's view of its clusters (sg-proxy(8)): per cluster the
 * last published stats, their sample time, the ledger of pending routing
 * reservations, and staleness.
 *
 * The proxy (and sg-sim) publish stats as they arrive, reserve on every
 * dispatch, release on a retryable refusal or when a request ends, and build
 * the snapshot a decision reads with sg_fleet_view().  Times are monotonic
 * milliseconds supplied by the caller: the library reads no clock.  A fleet
 * is not locked: use it from one thread (one per event loop).
 */
#ifndef SG_FLEET_H
#define SG_FLEET_H

#include "sg_common.h"
#include "sg_snapshot.h"

/* Bound on the active reservations of one cluster. */
#define SG_FLEET_MAX_RESV	(1u << 20)

typedef struct sg_fleet sg_fleet;

/*
 * New empty fleet; a cluster is fresh while its stats are at most stale_ms
 * old (UINT64_MAX: never stale once published).  SG_ENOMEM.
 */
int	sg_fleet_new(sg_fleet **out, uint64_t stale_ms, sg_error *err);
void	sg_fleet_free(sg_fleet *f);			/* NULL is a no-op */

/*
 * Add a cluster (no stats yet: not fresh until its first publication);
 * its index goes to *idx (NULL: don't care).  Indices are dense, in order
 * of addition.  SG_EINVAL on a bad or duplicate id, SG_ERANGE past
 * SG_MAX_CANDIDATES, SG_ENOMEM.
 */
int	sg_fleet_add(sg_fleet *f, const char *id, size_t len, size_t *idx,
	    sg_error *err);
size_t	sg_fleet_count(const sg_fleet *f);
/* Index of the cluster with this id, or -1. */
long	sg_fleet_find(const sg_fleet *f, const char *id, size_t len);
/* The id of cluster i (NUL-terminated; NULL past the end). */
const char *sg_fleet_id(const sg_fleet *f, size_t i);
void	sg_fleet_set_stale_ms(sg_fleet *f, uint64_t stale_ms);

/*
 * Publish stats of cluster i sampled at sample_ms (the time the stats
 * request was SENT).  Reservations made at or before sample_ms are cleared
 * (the stats cover them); later ones stay and are applied on top.  The
 * stats' id is ignored (the fleet's id is kept).  A sample older than the
 * one already published is ignored (returns 0).  SG_EINVAL on a bad index,
 * NULL stats or a priority map over SG_PRIO_MAX.
 */
int	sg_fleet_publish(sg_fleet *f, size_t i, const sg_cluster *stats,
	    double sample_ms);
/* Published and at most stale_ms old at now_ms. */
bool	sg_fleet_fresh(const sg_fleet *f, size_t i, double now_ms);
/* now_ms - sample time of the published stats; +inf if never published. */
double	sg_fleet_age_ms(const sg_fleet *f, size_t i, double now_ms);
/* The published stats of cluster i as published (no reservations), or
 * NULL if never published or past the end.  Borrowed. */
const sg_cluster *sg_fleet_stats(const sg_fleet *f, size_t i);

/*
 * Reserve on dispatch: input tokens and priority of the request, made at
 * now_ms.  Returns a handle (never 0), or 0 on a bad index, ENOMEM or past
 * SG_FLEET_MAX_RESV.  Release it on a retryable refusal or when the request
 * ends; releasing a handle already cleared by a publication, or 0, is a
 * no-op.
 */
uint64_t sg_fleet_reserve(sg_fleet *f, size_t i, uint64_t tokens,
	    uint32_t priority, double now_ms);
void	sg_fleet_release(sg_fleet *f, size_t i, uint64_t handle);
/* Active reservations of cluster i. */
size_t	sg_fleet_reservations(const sg_fleet *f, size_t i);

/*
 * The snapshot a decision reads: the FRESH clusters whose index is in
 * idx[0..n) (the caller's candidate list, e.g. those serving the model), in
 * that order, each being its published stats with every active reservation
 * applied (sg_snapshot_reserve, in reservation order).  view_idx[k]
 * (NULL: don't care; else room for n) receives the fleet index of view
 * cluster k.  Reuses out's memory: no allocation in steady state, and the
 * same ids in the same order keep out's ids version.  SG_EINVAL on an index
 * out of range or repeated, SG_ENOMEM.
 */
int	sg_fleet_view(const sg_fleet *f, const size_t *idx, size_t n,
	    double now_ms, sg_snapshot *out, size_t *view_idx, sg_error *err);

/*
 * A cursor: a view kept across decisions, for one fleet (free it before
 * the fleet).  sg_fleet_sync(f, idx, n, now_ms, c, &snap, &view_idx, err)
 * makes c's snapshot exactly what sg_fleet_view(f, idx, n, now_ms, ...)
 * would give, but when the fresh candidates are those of its last sync it
 * copies only the clusters that changed since (a reservation, release or
 * publication), so a steady decision loop costs O(n) comparisons of
 * counters rather than n cluster copies.  *snap and *view_idx (NULL: don't
 * care) are borrowed, valid until the next sync or free; the snapshot must
 * not be changed.  The same ids in the same order keep its ids version.
 * SG_EINVAL on an index out of range or repeated, or a cursor of another
 * fleet; SG_ENOMEM.
 */
typedef struct sg_fleet_cursor sg_fleet_cursor;

int	sg_fleet_cursor_new(const sg_fleet *f, sg_fleet_cursor **out,
	    sg_error *err);
void	sg_fleet_cursor_free(sg_fleet_cursor *c);	/* NULL: no-op */
int	sg_fleet_sync(const sg_fleet *f, const size_t *idx, size_t n,
	    double now_ms, sg_fleet_cursor *c, const sg_snapshot **snap,
	    const size_t **view_idx, sg_error *err);

#endif /* SG_FLEET_H */
