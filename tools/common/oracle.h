/*
 * oracle.h — the perfect-knowledge scorer of sg-sim's "perfect" row.
 *
 * A router that exists only in a simulator: it reads every cluster's state
 * exactly (the engine's KV cache, its queue and its slots, at the instant of
 * the decision, never a stale or reserved sample) and picks the cluster with
 * the lowest estimated time to first token:
 *
 *	ttft = rtt_ms + slot_wait_ms + (backlog + input - cached) / tps
 *
 * where backlog is the prefill work queued ahead of the request (prompts of
 * waiting requests plus the remaining prefill of admitted ones), cached the
 * request's prefix held in that cluster's cache now, and slot_wait_ms the
 * caller's estimate of the wait for a slot (0 when one is free).  The
 * capacity rule is wait-and-widen's (stargate-lb-config(5)): a cluster is
 * eligible while running < slots + max_queued.
 *
 * ORC_TTFT_FIRST: ties on the estimate go to the larger cached prefix,
 * then to fewer running requests, then to more free KV-cache tokens, then
 * to the lower index.
 *
 * ORC_KV_FIRST, the order that maximises the reuse of each decision: the
 * largest cached prefix first; among equals a cluster with a free slot,
 * then more free KV-cache tokens (in buckets of 16384, so that new
 * sessions spread their caches over the clusters with room instead of
 * piling them onto the fastest one), then the estimate, then the keys
 * above.
 *
 * Pure functions of their arguments: no state, no allocation; unit-tested
 * by tests/unit/test_oracle.c on hand-computed cases.
 */
#ifndef SG_TOOLS_ORACLE_H
#define SG_TOOLS_ORACLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum orc_objective {
	ORC_TTFT_FIRST = 0,	/* lowest estimate; larger cache breaks ties */
	ORC_KV_FIRST,		/* largest cached prefix; estimate breaks ties */
};

/* What the oracle knows of one cluster at the decision instant. */
typedef struct orc_cand {
	bool		eligible;	/* a candidate at all (not excluded...) */
	uint64_t	cached;		/* request prefix tokens in the cache */
	uint64_t	backlog;	/* prefill tokens queued ahead */
	double		tps;		/* prefill tokens per second, > 0 */
	double		rtt_ms;
	uint64_t	running;	/* admitted + waiting requests */
	uint64_t	slots;		/* 0: unknown, always has capacity */
	uint64_t	kv_free;	/* free KV-cache tokens */
	double		slot_wait_ms;	/* estimated wait for a slot */
} orc_cand;

/* Estimated TTFT of a request of input tokens on c, in milliseconds
 * (cached is clamped to input). */
double	orc_ttft_ms(const orc_cand *c, uint64_t input);

/* Does c take one more request under max_queued (running < slots +
 * max_queued, saturating; slots 0 always)? */
bool	orc_has_capacity(const orc_cand *c, uint64_t max_queued);

/*
 * The oracle's choice among c[0..n): the index of the best eligible
 * cluster with capacity under the objective, or -1 when none has capacity.
 * *ttft_ms (when not NULL) receives the chosen cluster's estimate.
 */
long	orc_pick(const orc_cand *c, size_t n, uint64_t input,
	    uint64_t max_queued, int objective, double *ttft_ms);

/*
 * orc_pick(c, n, input, max_queued, objective, NULL) and, into *most,
 * orc_pick(c, n, input, UINT64_MAX, ORC_KV_FIRST, NULL) (the cluster holding
 * the most of the prompt, whatever its load), in one pass.
 */
long	orc_pick_most(const orc_cand *c, size_t n, uint64_t input,
	    uint64_t max_queued, int objective, long *most);

/*
 * The KV-first choice read from the candidates that may hold the prompt
 * alone (a simulator knows them: the clusters that served the session).
 * c[0..n) is a subset of the candidates, in their order, that includes
 * every candidate whose cached is not 0.  Sets *best and *most to
 * orc_pick_most(c, n, input, max_queued, ORC_KV_FIRST, most) and returns
 * true when c[*best] holds some of the prompt: then both are the choices
 * among all the candidates too (indices into c), since every other
 * candidate holds none.  When it returns false the choice among all holds
 * none of the prompt (or there is none), and *most, when c[*most] holds
 * some, is still the cluster holding the most of all the candidates.
 */
bool	orc_pick_held(const orc_cand *c, size_t n, uint64_t input,
	    uint64_t max_queued, long *best, long *most);

#endif /* SG_TOOLS_ORACLE_H */
