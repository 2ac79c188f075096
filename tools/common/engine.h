/*
 * engine.h — the inference-engine model shared by sg-mockengine (real time)
 * and sg-sim (virtual time).
 *
 * One engine is one inference server: a fixed number of slots (maximum
 * concurrent sequences), a FIFO queue in front of them, a prefix KV cache,
 * and one of two timing models:
 *
 *  - the simple model (default): prefill is a single engine-wide FIFO server
 *    running at prefill_tps tokens/s over the *uncached* prompt tokens (cached
 *    tokens skip prefill); the first token is emitted when a request's
 *    prefill ends; each sequence then decodes its remaining output tokens
 *    independently at decode_tps tokens/s.  A request holds its slot from
 *    admission to its last token.
 *  - the batching step model (stargate(7), simplified): the engine runs steps;
 *    each step decodes one token of every decoding sequence and spends what
 *    is left of max_batched_tokens on chunked prefill, FIFO in admission
 *    order; step time = step_fixed_ms + step_decode_ms_per_seq * decoding +
 *    step_prefill_ms_per_token * prefill tokens (at least 1 us).  New work is
 *    admitted at step boundaries.  Not modelled: several GPU workers per
 *    engine, KV reservation for admission (head-of-line blocking on memory).
 *
 * Prefix KV cache: capacity in tokens, LRU.  A request with a cache key (the
 * session / cache affinity key, hashed to 64 bits) uses one entry per key;
 * a request without one uses per-block entries keyed by the chain hashes of
 * its prompt blocks (block_tokens tokens each; the caller hashes the prompt).
 * At admission the cached prefix is looked up (reused = min(cached, input));
 * after prefill the key's entry covers max(cached, input) tokens (missing
 * blocks are inserted); at completion a key entry grows to input + output
 * tokens (the generated tokens' KV stays cached, as in engines with prefix
 * caching).  An active request pins its key entry; growth evicts the least
 * recently used unpinned entries, and is truncated if nothing more can be
 * evicted.  Blocks are not pinned.
 *
 * Time is a double in milliseconds chosen by the caller, never read from a
 * clock: the caller advances the engine (eng_advance) to "now" and asks when
 * the next internal event is (eng_next_event).  Events are reported through
 * one callback (first token, done), in time order; ties are processed in a
 * fixed order, so a run is deterministic.  Steady state allocates nothing:
 * request records are a pool that grows by chunks that never move, cache
 * tables pools that grow by doubling.  eng_next_event is one load (the
 * engine keeps the time current), and eng_next_event, eng_load_get and the
 * key-hinted eng_cached_prefix read about two cache lines of the engine.
 */
#ifndef SG_TOOLS_ENGINE_H
#define SG_TOOLS_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "sg_snapshot.h"

#define ENG_NONE	UINT32_MAX	/* no handle / no entry */
#define ENG_EFULL	(-1)		/* eng_submit: queue at max_queue */

enum eng_event {
	ENG_FIRST_TOKEN = 1,	/* prefill done, first token out */
	ENG_DONE,		/* last token out; the handle dies after the callback */
};

typedef struct eng_config {
	uint32_t	slots;			/* max concurrent sequences, >= 1 */
	uint32_t	max_queue;		/* waiting requests; 0 = unbounded */
	double		prefill_tps;		/* simple model: tokens/s, > 0 */
	double		decode_tps;		/* simple model: tokens/s per sequence, > 0 */
	uint64_t	kv_capacity_tokens;	/* prefix cache; 0 = no cache */
	uint32_t	block_tokens;		/* prompt-prefix block size, >= 1 */
	uint32_t	tps_window;		/* samples in last_mean_input_tps, >= 1 */
	bool		prio_map;		/* publish queue_time_ms_by_priority {"0"} */
	/* batching step model */
	bool		step_model;
	uint32_t	max_batched_tokens;	/* tokens per step, >= 1 */
	double		step_fixed_ms;
	double		step_decode_ms_per_seq;
	double		step_prefill_ms_per_token;
} eng_config;

/* One request as submitted. */
typedef struct eng_req {
	uint64_t	 key;		/* cache key; 0 = none (use blocks) */
	const uint64_t	*blocks;	/* chain hashes of full prompt blocks; borrowed
					   until ENG_FIRST_TOKEN or eng_cancel */
	uint32_t	 nblocks;
	uint64_t	 input_tokens;	/* >= 1 */
	uint64_t	 output_tokens;	/* >= 1 */
	void		*udata;		/* handed back in callbacks */
	uint32_t	 hint;		/* eng_info.entry of an earlier request
					   with this key on this engine, or 0:
					   a cheaper lookup, same result */
} eng_req;

/* What the callback sees: the request's own record, valid during the
 * callback only (records never move, so submitting from the callback keeps
 * it valid; cancelling the callback's own handle ends it). */
typedef struct eng_info {
	void		*udata;
	double		 arrive_ms;	/* submitted */
	double		 admit_ms;	/* got a slot */
	double		 first_token_ms;
	double		 done_ms;
	uint64_t	 input_tokens;
	uint64_t	 output_tokens;
	uint64_t	 cached_tokens;	/* cache prefix found at admission */
	uint64_t	 reused_tokens;	/* min(cached, input) */
	uint64_t	 uncached_tokens; /* input - reused: the prefill work */
	uint64_t	 generated;	/* tokens out so far */
	uint32_t	 evicted_entries; /* cache entries this request evicted */
	uint64_t	 evicted_tokens;
	bool		 hit;		/* cached_tokens > 0 */
	uint32_t	 entry;		/* the key's cache entry + 1 (0: none),
					   for eng_req.hint */
} eng_info;

/* Totals since creation, for /metrics. */
typedef struct eng_counters {
	uint64_t	requests_submitted;
	uint64_t	requests_done;
	uint64_t	requests_rejected;	/* ENG_EFULL */
	uint64_t	requests_cancelled;	/* eng_cancel of a live request */
	uint64_t	prompt_tokens;		/* input tokens of prefilled requests */
	uint64_t	prefilled_tokens;	/* uncached tokens actually computed */
	uint64_t	generation_tokens;
	uint64_t	cache_queries;		/* input tokens looked up in the cache */
	uint64_t	cache_hits;		/* reused tokens */
	uint64_t	evicted_entries;
	uint64_t	evicted_tokens;
} eng_counters;

typedef struct eng eng;

typedef void eng_cb(void *ctx, uint32_t handle, int event,
    const eng_info *info);

/* Defaults: 8 slots, 20000/50 tps, 400000 KV tokens, blocks of 16, window 8,
 * step model "H100 Llama 3.1 8B" numbers (2048 tokens, 4.0/0.085/0.05 ms). */
void	eng_config_default(eng_config *cfg);

/*
 * New engine at time 0 (times passed later must not go backwards).  cb may
 * be NULL.  Returns 0, EINVAL (a configuration value out of range; *why
 * names it when why is not NULL) or ENOMEM.
 */
int	eng_new(eng **out, const eng_config *cfg, eng_cb *cb, void *ctx,
	    const char **why);
void	eng_free(eng *e);		/* NULL is a no-op */

/*
 * Submit a request at now: first advances to now (events up to now run,
 * callbacks included), then queues the request.  Returns 0 with *handle set,
 * ENG_EFULL when max_queue requests are already waiting, or ENOMEM.
 * Callbacks may call eng_submit and eng_cancel on the same engine.
 */
int	eng_submit(eng *e, double now, const eng_req *r, uint32_t *handle);

/* Time of the next internal event (>= the engine's time), or INFINITY. */
double	eng_next_event(const eng *e);

/* Process every event with time <= now, in order, calling the callback. */
void	eng_advance(eng *e, double now);

/*
 * Forget a request (its client went away): no more callbacks, the handle is
 * invalid at once.  A waiting request leaves the queue; an admitted one
 * frees its slot at the engine's time (advance to now first to free it at
 * now) and unpins its cache entry (what it had prefilled stays cached),
 * and waiting requests are admitted into the slot.  The simple model stops
 * the request's prefill or decode at once; the step model cannot abort the
 * batch in flight, so the slot is reused from the next step.  No callback
 * runs inside eng_cancel.
 */
void	eng_cancel(eng *e, uint32_t handle);

/* Tokens generated so far by a live request at now (>= the engine's time). */
uint64_t eng_generated(const eng *e, uint32_t handle, double now);

/* Live request numbers (NULL for a dead handle). */
const eng_info *eng_peek(const eng *e, uint32_t handle);

/* Hold n slots busy (in addition to requests) until eng_release; n is
 * clamped to slots.  Held slots count as running. */
void	eng_hold(eng *e, double now, uint32_t n);
void	eng_release(eng *e, double now);
uint32_t eng_held(const eng *e);

/*
 * Fill c's load fields from the engine state at now (call eng_advance(now)
 * first): max_engine_concurrency, running (every request the engine holds,
 * running or waiting, plus held slots: so "running < max_engine_concurrency"
 * is "a slot is free" and max_queued counts waiting requests, as
 * stargate-lb-config(5) expects), queued (not yet past the first token),
 * queued_input_tokens (prompt tokens of waiting requests plus the remaining
 * prefill of admitted ones), total_input_tokens, last_mean_input_tps (prefill
 * tokens / prefill time over the last tps_window samples), max_input_tps, kv_*,
 * and the priority map when configured.  id and rtt_ms are untouched.
 */
void	eng_cluster(const eng *e, double now, sg_cluster *c);

/*
 * The load fields of eng_cluster a router that reads the engine itself needs
 * (sg-sim's perfect-knowledge row), without the rest: backlog is
 * queued_input_tokens, tps max_input_tps, running, slots
 * max_engine_concurrency and kv_free kv_free_tokens, computed the same way.
 */
typedef struct eng_load {
	uint64_t	backlog;
	double		tps;
	uint64_t	running;
	uint64_t	slots;
	uint64_t	kv_free;
} eng_load;

void	eng_load_get(const eng *e, double now, eng_load *l);

/* Current numbers. */
uint32_t eng_running(const eng *e);	/* admitted + held */
uint32_t eng_waiting(const eng *e);	/* in the FIFO queue */
uint64_t eng_kv_used(const eng *e);
uint64_t eng_kv_capacity(const eng *e);
const eng_counters *eng_counters_get(const eng *e);
const eng_config *eng_config_get(const eng *e);

/* 64-bit FNV-1a (cache keys from strings, prompt block chains). */
uint64_t eng_fnv1a(uint64_t h, const void *p, size_t len);
#define ENG_FNV_OFFSET	0xcbf29ce484222325ULL

/*
 * Prefix tokens of r the cache holds at the engine's time: what admission
 * would reuse if r were admitted now (min(cached, input)).  Read-only: the
 * LRU order and the counters do not change.  For sg-sim's perfect-knowledge
 * row, which reads every engine's cache.
 */
uint64_t eng_cached_prefix(const eng *e, const eng_req *r);

/*
 * A hint that r's cache entry is read soon (eng_cached_prefix, or admission
 * of r): starts fetching the memory that lookup reads (the entry r->hint
 * names, else the key's home slot in the index), so that a caller driving
 * many engines can overlap that miss with other work.  Reads and changes
 * nothing else; no result depends on it.
 */
void	eng_prefetch(const eng *e, const eng_req *r);

#endif /* SG_TOOLS_ENGINE_H */
