/*
 * sg_router.h — the decision engine: one routing decision for one request
 * against one snapshot (stargate-lb-config(5)).
 *
 * A router borrows an sg_lbconf and owns the only mutable routing state:
 * one round-robin counter per algorithm definition, and scratch memory sized
 * to the largest snapshot seen (so a decision allocates nothing in steady
 * state).  A router is not thread-safe; use one per thread or lock.
 *
 * Randomness (power-of-n, random, wait-and-widen's n, tie breaks) comes from
 * a PRNG seeded by (router seed, definition seed, request_id, attempt), where
 * attempt is the number of excluded clusters: the same inputs give the same
 * decision in every process and every replay.
 */
#ifndef SG_ROUTER_H
#define SG_ROUTER_H

#include <jansson.h>

#include "sg_common.h"
#include "sg_decision.h"
#include "sg_lbconf.h"
#include "sg_request.h"
#include "sg_snapshot.h"

typedef struct sg_router sg_router;

/* conf is borrowed and must outlive the router. */
int	sg_router_new(sg_router **out, const sg_lbconf *conf, uint64_t seed,
	    sg_error *err);
void	sg_router_free(sg_router *rt);		/* NULL is a no-op */

/*
 * Turn the pulsar ranking cache on (the default) or off.  Rankings of
 * pulsar and pulsar-wait-and-widen are cached per (hash inputs, snapshot
 * ids, weights) and reused while they are exactly what would be computed,
 * so decisions are the same either way; off frees the cache's memory
 * (about 3.5 MiB at 256 candidates, 8.5 MiB at 4096).  SG_ENOMEM when
 * turning it on fails; SG_EINVAL for a NULL router.
 */
int	sg_router_set_cache(sg_router *rt, bool enabled);

/*
 * Memory budget of the wait-and-widen ring cache, in bytes.  A ring
 * depends on (seed, routing key, model, candidate ids, virtual nodes), so
 * a router serving many tenants keeps one ring per (routing key, model,
 * snapshot ids) it sees, each costing sgi_ring_bytes(): about 6 bytes per
 * entry, 6 * candidates * virtual_nodes (58 KiB at 64 candidates and 150
 * virtual nodes, 230 KiB at 256).  A ring is cached when first needed
 * while the budget has room; once it is full, when needed a second time
 * within the last few thousand misses, and the CLOCK hand evicts rings not
 * used since it last passed.  A ring the cache does not hold costs one pass over
 * its virtual-node hashes (nothing is sorted).  While the budget is not
 * 0 the router also keeps the affinity groups of the last few thousand
 * (ring, key) pairs (256 KiB, outside the budget), so a returning key
 * reads no ring at all.  Decisions are the same at every budget; 0 keeps
 * no ring and frees the cache.  The default,
 * SG_ROUTER_RING_CACHE_DEFAULT (128 MiB), holds 300 (routing key, model)
 * pairs at 256 candidates and 150 virtual nodes (about 70 MiB) or 2 000 at
 * 64.  SG_EINVAL for a NULL router.
 */
#define SG_ROUTER_RING_CACHE_DEFAULT	((size_t)128 << 20)
int	sg_router_set_ring_cache_bytes(sg_router *rt, size_t bytes);

/*
 * Decide where req goes at elapsed_ms since it arrived:
 *  1. resolve the definition (stargate-lb-config(5)) and check
 *  require_cache_affinity_key
 *     (request errors: SG_EREQUEST, err->status 400, nothing decided);
 *  2. empty snapshot -> reject 404 no_eligible_candidates; every candidate
 *     excluded -> reject 503 overloaded_error;
 *  3. input-work admission (stargate-lb-config(5)) -> reject 503 with reason;
 *  4. the algorithm, with the session rules when they apply
 *  (stargate-lb-config(5));
 *  5. deadlines (sg-proxy(8)): a wait never rechecks past the wait
 *     deadline (min(max_wait_ms, 60000), 60000 without it); a wait at or
 *     past the deadline, or an unavailable result, is reject 503
 *     overloaded_error — unless max_wait_ms is present and not reached, in
 *     which case unavailable becomes a poll wait of 1..9 ms (PRNG).
 * req->session_state is written by the first decision that classifies the
 * request and reused by later ones.
 */
int	sg_router_decide(sg_router *rt, const sg_snapshot *snap, sg_request *req,
	    double elapsed_ms, sg_decision *out, sg_error *err);

/*
 * The candidate table behind a decision (sg-route(1) --explain), as a new
 * JSON object: {"algorithm", "x_ms", "scale", "session": {"state",
 * "promoted", "last_cluster_id"}, "original_order": [ids],
 * "effective_order": [ids], "affinity_group": [ids], "open_set": [ids],
 * "candidates": [{"cluster_id", "excluded", "queue_ms", "prefill_ms",
 * "ttft_ms", "comparator_ms", "bucket", "has_capacity", "affinity_rank",
 * "kv_feasible"}]}; orders and sets are present only where the algorithm has
 * them; infinities are null.  Does not change router state (round-robin
 * counters) and does not classify the request (it uses the recorded state,
 * or classifies a copy).
 */
int	sg_router_explain(sg_router *rt, const sg_snapshot *snap,
	    const sg_request *req, double elapsed_ms, json_t **out, sg_error *err);

#endif /* SG_ROUTER_H */
