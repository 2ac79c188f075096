/*
 * sg_snapshot.h — the routing state of one routing target (sg-route(1),
 * stargate-lb-config(5)): an ordered list of clusters with their load figures.
 *
 * sg_cluster is a plain struct: the simulator and the proxy fill it from
 * their own sources.  A missing JSON field is "unknown" exactly as in
 * stargate-lb-config(5): 0 for counts, capacities and rates (a rate <= 0 or not
 * finite is invalid), 0 ms for rtt.  The snapshot owns copies of its clusters.
 */
#ifndef SG_SNAPSHOT_H
#define SG_SNAPSHOT_H

#include <jansson.h>

#include "sg_common.h"

typedef struct sg_cluster {
	char		id[SG_ID_MAX + 1];	/* NUL-terminated, 1..SG_ID_MAX bytes */
	size_t		id_len;
	double		rtt_ms;			/* >= 0 */
	uint64_t	max_engine_concurrency;	/* 0 = unknown */
	uint64_t	running;		/* includes pending reservations */
	uint64_t	queued;			/* queue_size */
	uint64_t	queued_input_tokens;	/* queued_input_size */
	uint64_t	total_input_tokens;	/* informational (sg-proxy(8)) */
	double		last_mean_input_tps;	/* valid iff > 0 and finite */
	double		max_input_tps;		/* 0 = absent; valid iff > 0 and finite */
	uint64_t	kv_capacity_tokens;
	uint64_t	kv_used_tokens;
	uint64_t	kv_free_tokens;
	/* queue_time_ms_by_priority: nprio entries, keys strictly ascending */
	uint32_t	nprio;
	uint32_t	prio_key[SG_PRIO_MAX];
	double		prio_ms[SG_PRIO_MAX];
} sg_cluster;

typedef struct sg_snapshot sg_snapshot;

/* Zero a cluster (all fields unknown) and set its id; SG_EINVAL if the id
 * is empty or longer than SG_ID_MAX. */
int	sg_cluster_init(sg_cluster *c, const char *id, size_t len);

/* Set one priority-map entry, keeping keys sorted; SG_ERANGE when full. */
int	sg_cluster_set_prio(sg_cluster *c, uint32_t priority, double ms);

/* New empty snapshot (caller frees with sg_snapshot_free; NULL on ENOMEM). */
sg_snapshot	*sg_snapshot_new(void);
void		 sg_snapshot_free(sg_snapshot *s);	/* NULL is a no-op */
void		 sg_snapshot_clear(sg_snapshot *s);	/* keeps its memory */

/* Append a copy of c.  SG_EINVAL on a duplicate id, SG_ERANGE past
 * SG_MAX_CANDIDATES, SG_ENOMEM. */
int	sg_snapshot_add(sg_snapshot *s, const sg_cluster *c, sg_error *err);

size_t		 sg_snapshot_count(const sg_snapshot *s);
/* Borrowed; valid until the snapshot is changed or freed. */
const sg_cluster *sg_snapshot_get(const sg_snapshot *s, size_t i);
/*
 * Mutable access to cluster i's load figures (NULL past the end).  The id
 * and id_len must not be changed through it (the id index and the ids
 * version would go stale); to change ids, rebuild with clear and add.
 */
sg_cluster	*sg_snapshot_at(sg_snapshot *s, size_t i);
/* Index of the cluster with this id, or -1. */
long		 sg_snapshot_find(const sg_snapshot *s, const char *id, size_t len);

/*
 * Version of the ordered list of cluster ids: a 64-bit value, random per
 * snapshot, that changes whenever the set or order of ids changes (add,
 * clear, copy, from_json).  Rebuilding the same ids in the same order gives
 * the same version back, and a copy has its source's version.  Equal
 * versions mean equal id lists (with probability 1 - 2^-64); load figures
 * are not covered.  Routers key their id-derived caches on it.
 */
uint64_t	 sg_snapshot_ids_version(const sg_snapshot *s);

/* Copy src into dst (dst keeps its memory when large enough); dst takes
 * src's ids version. */
int	sg_snapshot_copy(sg_snapshot *dst, const sg_snapshot *src);

/*
 * Apply one pending routing reservation to cluster i (sg-proxy(8)):
 * queued += 1, queued_input_tokens += tokens, running += 1,
 * total_input_tokens += tokens (saturating), and the priority-map update.
 */
void	sg_snapshot_reserve(sg_snapshot *s, size_t i, uint64_t tokens,
	    uint32_t priority);

/*
 * JSON codec.  Strict: unknown fields, wrong types, negative counts and
 * out-of-range values are errors naming the field, e.g.
 * "clusters[2].running: expected a non-negative integer".
 * sg_snapshot_from_json replaces the content of s.
 */
int	sg_snapshot_from_json(sg_snapshot *s, const json_t *obj, sg_error *err);
int	sg_cluster_from_json(sg_cluster *c, const json_t *obj, const char *where,
	    sg_error *err);
json_t	*sg_snapshot_to_json(const sg_snapshot *s);	/* new reference */
json_t	*sg_cluster_to_json(const sg_cluster *c);	/* new reference */

#endif /* SG_SNAPSHOT_H */
