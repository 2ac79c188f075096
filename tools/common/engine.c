/*
 * engine.c — the inference-engine model (see engine.h for what is modelled).
 *
 * Layout, for a caller that drives dozens of engines at random (sg-sim), so
 * that one event touches few cache lines:
 *
 *  - The engine's first cache line holds what eng_next_event and the load
 *    reads (eng_load_get) need: the next event's time and kind, kept current
 *    by every change (renext), the prefill in progress and the queue's
 *    counts; the second line the cache's totals (what eng_load_get and a
 *    hinted eng_cached_prefix read) and the slots.  What an event or a
 *    submission of the simple model reads or writes besides sits in the
 *    next four lines (the prefill FIFO and the decode heap, the records,
 *    the tps window, the configuration's hot values copied, the counters);
 *    the step model's state and the configuration come after.
 *  - Request records are three cache lines, in line-aligned chunks of RC_N
 *    that never move (the pool grows by adding a chunk, no realloc, no
 *    copy), so a callback is handed the record's own eng_info, not a copy;
 *    a free list threads unused records.  The FIFO queue and the simple
 *    model's prefill queue are singly linked lists through the records;
 *    decoding sequences of the simple model sit in a 4-ary min-heap ordered
 *    by (done time, push order; a full set of children settled by three
 *    selects); the step model keeps its admitted sequences in an array in
 *    admission order.
 *  - The KV cache's entries are 32 bytes, two to a cache line: key, tokens,
 *    LRU stamp and pin count together, since a touch, a growth and an
 *    unpin each read all of them (a split into key+tokens and links was
 *    measured: one more miss per event).  The LRU order is a queue of
 *    entry indices in the order of their last use: a use appends a record
 *    and leaves the entry's older one stale (the entry's stamp names its
 *    live record), so that a touch writes the entry and the queue's end,
 *    never its neighbours in the order (an intrusive doubly linked list
 *    wrote two random lines a touch); eviction walks from the queue's
 *    head, and the queue, twice the entries long, is compacted in order
 *    when full.  The index is open addressing (linear
 *    probing, backward-shift delete) over 8-byte slots, a 32-bit hash of the
 *    key beside the entry index: a probe reads the table alone and touches
 *    the entry only when the hashes match, and deletion and growth never read
 *    an entry.  A caller that remembers a key's entry
 *    (eng_info.entry, passed back as eng_req.hint) skips the index when the
 *    entry still holds that key (removed entries hold key 0).
 *
 * Reentrancy: callbacks may submit to or cancel on the same engine, which can
 * add records.  Every handler therefore finishes its state changes (and the
 * next event's time) before it calls back; the simple model's handlers end
 * with their callbacks, so the next event is not computed again after them.
 */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"

enum { RS_FREE = 0, RS_WAIT, RS_RUN, RS_DONE };

typedef struct rec {
	uint64_t	 key;
	const uint64_t	*blocks;
	uint32_t	 nblocks;
	uint32_t	 hint;		/* eng_req.hint */
	uint32_t	 next;		/* queue link or free list */
	uint32_t	 entry;		/* pinned key entry, or ENG_NONE */
	uint64_t	 prefill_left;	/* step model */
	uint64_t	 step_assign;	/* step model: prefill tokens this step */
	double		 pstart;	/* simple model: prefill start */
	double		 pend;		/* simple model: prefill end */
	uint64_t	 hseq;		/* simple model: decode heap push order */
	uint8_t		 state;
	bool		 cancelled;
	bool		 first_done;
	bool		 step_in;	/* step model: prefill part of this step */
	bool		 step_decode;	/* step model: decodes in this step */
	eng_info	 info;
} rec;

/* A record is three cache lines, and the chunks are line-aligned, so that
 * the three lines renext prefetches are the whole record. */
#if UINTPTR_MAX == UINT64_MAX
_Static_assert(sizeof(rec) == 192, "a record is three cache lines");
#endif

/* Records per chunk of the record pool. */
#define RC_SHIFT	6
#define RC_N		(1u << RC_SHIFT)

/* An entry: 32 bytes, two to a cache line (the array is line-aligned), so
 * that a lookup, a touch and a pin read one line of the entry. */
typedef struct kv_entry {
	uint64_t	key;		/* 0: free */
	uint64_t	tokens;
	uint32_t	stamp;		/* its live record in the LRU queue */
	uint32_t	next;		/* free list */
	uint32_t	pin;
	uint32_t	unused;
} kv_entry;

/* An index slot: a 32-bit hash of the entry's key beside its index. */
typedef struct kv_slot {
	uint32_t	h;
	uint32_t	x;		/* entry index or ENG_NONE */
} kv_slot;

typedef struct kvcache {
	uint64_t	 cap, used;
	kv_entry	*ent;		/* line-aligned */
	kv_slot		*tab;
	uint32_t	 tabmask;	/* size - 1; size is a power of two */
	uint32_t	 count;
	uint32_t	 nent, entcap, free_head;
	/* LRU queue: entry indices in the order of their last use, the
	 * least recent at lru_head; a record is live while its entry holds a
	 * key and names the record's position (stamp), stale otherwise */
	uint32_t	 lru_head, lru_n, lru_cap;
	uint32_t	*lru;
} kvcache;

/* The decode heap is 4-ary; its items are 16 bytes and the array starts
 * three items into a cache line, so that the four children of an item share
 * one line.  The push order that breaks ties is kept in the record; the
 * item carries the record's cache entry, so that the next event's entry can
 * be fetched without reading the record first. */
typedef struct heap_item {
	double		t;
	uint32_t	h;
	uint32_t	entry;		/* the record's pinned entry (prefetch) */
} heap_item;

#define HEAP_SKEW	3

typedef struct win_sample {
	uint64_t	tokens;
	double		ms;
} win_sample;

struct eng {
	/* line 0: next event and load */
	double		 next_t;	/* eng_next_event */
	/* while pref_busy: the prefill in progress (the head of the prefill
	 * FIFO): its start, end and uncached tokens */
	double		 pref_start, pref_end;
	uint64_t	 pref_unc;
	uint64_t	 pref_tokens;	/* uncached tokens in the prefill FIFO */
	uint64_t	 wait_tokens;	/* input tokens of waiting requests */
	uint32_t	 nadm;		/* admitted (holding a slot) */
	uint32_t	 held;
	uint32_t	 nwait;		/* waiting, not cancelled */
	uint32_t	 npre;		/* admitted, before the first token */

	/* line 1: the load's and the cache probe's (kv's first 48 bytes);
	 * line 2: kv's LRU ends, then what every event of the simple model
	 * reads */
	double		 max_tps;
	uint32_t	 slots;
	bool		 step_model;
	bool		 pref_busy;
	bool		 in_advance;
	bool		 next_decode;	/* next_t is the decode heap's top */
	kvcache		 kv;
	double		 now;
	uint32_t	 pq_head, pq_tail;	/* prefill FIFO; head in progress */
	uint32_t	 pref_entry;	/* its pinned cache entry, or ENG_NONE */
	uint32_t	 nheap;
	heap_item	*heap;		/* heapmem + HEAP_SKEW; slots items */
	uint64_t	 adm_tokens;	/* input tokens of admitted requests */

	/* line 3: records, the queue, the callback, the tps window */
	rec		**rch;		/* record chunks */
	eng_cb		*cb;
	void		*ctx;
	uint32_t	 nrec, free_head;
	uint32_t	 wq_head, wq_tail;	/* FIFO queue */
	win_sample	*win;		/* last_mean_input_tps window */
	uint32_t	 win_n, win_pos;
	uint64_t	 win_tok_sum;

	/* lines 4-5: the window's time, the configuration's hot values, the
	 * counters */
	double		 win_ms_sum;
	double		 prefill_tps, decode_tps;	/* cfg's */
	uint32_t	 max_queue, tps_window;		/* cfg's */
	uint64_t	 seq;		/* decode heap push order */
	eng_counters	 ctr;

	/* cold: growth, the step model, the configuration */
	uint32_t	 nrch, rchcap;
	heap_item	*heapmem;
	uint32_t	*run;
	uint32_t	 nrun;
	bool		 step_busy;
	double		 step_end;
	bool		 step_pending;
	double		 step_at;
	uint64_t	 step_p;
	double		 step_dur;
	eng_config	 cfg;
};

#if UINTPTR_MAX == UINT64_MAX
_Static_assert(offsetof(struct eng, kv) == 80 &&
    offsetof(struct eng, rch) == 192 && offsetof(struct eng, win_ms_sum) ==
    256, "the engine's hot lines");
#endif

#define R(e, h)	(&(e)->rch[(h) >> RC_SHIFT][(h) & (RC_N - 1)])

/* --- small helpers --------------------------------------------------------- */

uint64_t
eng_fnv1a(uint64_t h, const void *p, size_t len)
{
	const unsigned char *s = p;
	size_t i;

	for (i = 0; i < len; i++) {
		h ^= s[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

static uint64_t
mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return x;
}

static int
grow_array(void **p, uint32_t *cap, size_t elem, uint32_t want)
{
	uint32_t n = *cap ? *cap : 16;
	void *q;

	if (want <= *cap)
		return 0;
	while (n < want) {
		if (n > UINT32_MAX / 2)
			return ENOMEM;
		n *= 2;
	}
	q = realloc(*p, (size_t)n * elem);
	if (q == NULL)
		return ENOMEM;
	*p = q;
	*cap = n;
	return 0;
}

/* --- KV cache -------------------------------------------------------------- */

/* The index's 32-bit hash of a key; its low bits are the home slot. */
static uint32_t
kv_hash(uint64_t key)
{
	return (uint32_t)(mix64(key) >> 32);
}

static int
kv_init(kvcache *kv, uint64_t cap)
{
	uint32_t i;

	memset(kv, 0, sizeof(*kv));
	kv->cap = cap;
	kv->free_head = ENG_NONE;
	kv->tab = malloc(64 * sizeof(*kv->tab));
	if (kv->tab == NULL)
		return ENOMEM;
	for (i = 0; i < 64; i++)
		kv->tab[i].x = ENG_NONE;
	kv->tabmask = 63;
	return 0;
}

static void
kv_fini(kvcache *kv)
{
	free(kv->ent);
	free(kv->tab);
	free(kv->lru);
}

static uint32_t
kv_find(const kvcache *kv, uint64_t key)
{
	uint32_t h = kv_hash(key), i = h & kv->tabmask;

	for (;;) {
		const kv_slot *t = &kv->tab[i];

		if (t->x == ENG_NONE)
			return ENG_NONE;
		if (t->h == h && kv->ent[t->x].key == key)
			return t->x;
		i = (i + 1) & kv->tabmask;
	}
}

/* kv_find, trying the caller's hint (entry + 1) first: a live entry with
 * the key is the key's only entry (a removed one has key 0). */
static uint32_t
kv_find_hint(const kvcache *kv, uint64_t key, uint32_t hint)
{
	if (hint != 0 && hint - 1 < kv->nent && kv->ent[hint - 1].key == key)
		return hint - 1;
	return kv_find(kv, key);
}

static void
kv_tab_put(kv_slot *tab, uint32_t mask, uint32_t h, uint32_t x)
{
	uint32_t i = h & mask;

	while (tab[i].x != ENG_NONE)
		i = (i + 1) & mask;
	tab[i].h = h;
	tab[i].x = x;
}

/* Double the index, rehashing from the slots' own hashes. */
static int
kv_tab_grow(kvcache *kv)
{
	uint32_t size = (kv->tabmask + 1) * 2, i;
	uint32_t oldsize = kv->tabmask + 1;
	kv_slot *old = kv->tab, *tab;

	if ((tab = malloc((size_t)size * sizeof(*tab))) == NULL)
		return ENOMEM;
	for (i = 0; i < size; i++)
		tab[i].x = ENG_NONE;
	for (i = 0; i < oldsize; i++)
		if (old[i].x != ENG_NONE)
			kv_tab_put(tab, size - 1, old[i].h, old[i].x);
	kv->tab = tab;
	kv->tabmask = size - 1;
	free(old);
	return 0;
}

static void
kv_tab_del(kvcache *kv, uint32_t x)
{
	uint32_t mask = kv->tabmask;
	uint32_t i = kv_hash(kv->ent[x].key) & mask, j;
	kv_slot *tab = kv->tab;

	while (tab[i].x != x)
		i = (i + 1) & mask;
	tab[i].x = ENG_NONE;
	/* Backward shift: pull later members of the probe run into the hole. */
	for (j = (i + 1) & mask; tab[j].x != ENG_NONE; j = (j + 1) & mask) {
		uint32_t home = tab[j].h & mask;

		if (((j - home) & mask) >= ((j - i) & mask)) {
			tab[i] = tab[j];
			tab[j].x = ENG_NONE;
			i = j;
		}
	}
}

static inline bool
kv_live(const kvcache *kv, uint32_t i)
{
	const kv_entry *l = &kv->ent[kv->lru[i]];

	return l->key != 0 && l->stamp == i;
}

/* Move the live records to the front of the queue, in order (each entry's
 * stamp follows its record).  The queue holds at least twice the entries,
 * so this frees half of it at least. */
static void
kv_lru_compact(kvcache *kv)
{
	uint32_t i, w = 0;

	for (i = kv->lru_head; i < kv->lru_n; i++)
		if (kv_live(kv, i)) {
			kv->lru[w] = kv->lru[i];
			kv->ent[kv->lru[w]].stamp = w;
			w++;
		}
	kv->lru_head = 0;
	kv->lru_n = w;
}

/* x is now the most recently used: a new record at the queue's end (the
 * old one goes stale). */
static void
kv_push_front(kvcache *kv, uint32_t x)
{
	if (kv->lru_n == kv->lru_cap)
		kv_lru_compact(kv);
	kv->ent[x].stamp = kv->lru_n;
	kv->lru[kv->lru_n++] = x;
}

static void
kv_touch(kvcache *kv, uint32_t x)
{
	if (kv->ent[x].stamp == kv->lru_n - 1 && kv->lru_n > 0 &&
	    kv->lru[kv->lru_n - 1] == x)
		return;
	kv_push_front(kv, x);
}

static void
kv_remove(kvcache *kv, uint32_t x)
{
	kv_tab_del(kv, x);
	kv->used -= kv->ent[x].tokens;
	kv->ent[x].tokens = 0;
	kv->ent[x].key = 0;		/* no hint finds it */
	kv->ent[x].next = kv->free_head;
	kv->free_head = x;
	kv->count--;
}

/* Room for one more entry: a line-aligned array of twice the size. */
static int
kv_ent_grow(kvcache *kv)
{
	uint32_t cap = kv->entcap ? kv->entcap : 16;
	kv_entry *ent;

	if (cap > UINT32_MAX / 4)
		return ENOMEM;
	cap = kv->entcap ? cap * 2 : cap;
	if ((ent = aligned_alloc(64, (size_t)cap * sizeof(*ent))) == NULL)
		return ENOMEM;
	if (kv->nent > 0)
		memcpy(ent, kv->ent, (size_t)kv->nent * sizeof(*ent));
	free(kv->ent);
	kv->ent = ent;
	kv->entcap = cap;
	/* The queue holds twice the entries, so that a compaction frees half
	 * of it at least: a touch never allocates. */
	if (kv->lru_cap < 2 * cap) {
		uint32_t *q;

		if ((q = realloc(kv->lru, (size_t)cap * 2 * sizeof(*q))) ==
		    NULL)
			return ENOMEM;
		kv->lru = q;
		kv->lru_cap = 2 * cap;
	}
	return 0;
}

/* New entry with 0 tokens at the front; ENG_NONE on ENOMEM. */
static uint32_t
kv_insert(kvcache *kv, uint64_t key)
{
	uint32_t x;

	if ((uint64_t)(kv->count + 1) * 2 > (uint64_t)kv->tabmask + 1 &&
	    kv_tab_grow(kv) != 0)
		return ENG_NONE;
	if (kv->free_head != ENG_NONE) {
		x = kv->free_head;
		kv->free_head = kv->ent[x].next;
	} else {
		if (kv->nent == kv->entcap && kv_ent_grow(kv) != 0)
			return ENG_NONE;
		x = kv->nent++;
	}
	kv->ent[x].key = key;
	kv->ent[x].tokens = 0;
	kv->ent[x].pin = 0;
	kv_tab_put(kv->tab, kv->tabmask, kv_hash(key), x);
	kv_push_front(kv, x);
	kv->count++;
	return x;
}

/*
 * Grow entry x to want tokens, evicting least recently used unpinned
 * entries (never x) for room; what cannot be made room for is not cached.
 * Evictions are charged to info and the engine counters.
 */
static void
kv_grow(eng *e, uint32_t x, uint64_t want, eng_info *info)
{
	kvcache *kv = &e->kv;
	uint64_t need, fit;
	uint32_t i, y;

	if (want <= kv->ent[x].tokens)
		return;
	need = want - kv->ent[x].tokens;
	/* Least recent first; stale records at the head are dropped. */
	while (kv->lru_head < kv->lru_n && !kv_live(kv, kv->lru_head))
		kv->lru_head++;
	for (i = kv->lru_head; kv->cap - kv->used < need && i < kv->lru_n;
	    i++) {
		if (!kv_live(kv, i))
			continue;
		y = kv->lru[i];
		if (y != x && kv->ent[y].pin == 0) {
			uint64_t tok = kv->ent[y].tokens;

			info->evicted_entries++;
			info->evicted_tokens += tok;
			e->ctr.evicted_entries++;
			e->ctr.evicted_tokens += tok;
			kv_remove(kv, y);
		}
	}
	fit = kv->cap - kv->used < need ? kv->cap - kv->used : need;
	kv->ent[x].tokens += fit;
	kv->used += fit;
}

/* --- records --------------------------------------------------------------- */

static uint32_t
rec_alloc(eng *e)
{
	uint32_t h;
	rec *q;

	if (e->free_head != ENG_NONE) {
		h = e->free_head;
		e->free_head = R(e, h)->next;
	} else {
		if (e->nrec == UINT32_MAX - 1)
			return ENG_NONE;
		if (e->nrec == e->nrch * RC_N) {
			/* A new chunk: records already handed out stay. */
			if (grow_array((void **)&e->rch, &e->rchcap,
			    sizeof(*e->rch), e->nrch + 1) != 0)
				return ENG_NONE;
			if ((e->rch[e->nrch] = aligned_alloc(64,
			    RC_N * sizeof(rec))) == NULL)
				return ENG_NONE;
			e->nrch++;
		}
		h = e->nrec++;
	}
	q = R(e, h);
	memset(q, 0, sizeof(*q));
	q->next = ENG_NONE;
	q->entry = ENG_NONE;
	return h;
}

static void
rec_free(eng *e, uint32_t h)
{
	R(e, h)->state = RS_FREE;
	R(e, h)->next = e->free_head;
	e->free_head = h;
}

/* --- timing helpers -------------------------------------------------------- */

static void
tps_sample(eng *e, uint64_t tokens, double ms)
{
	uint32_t w = e->tps_window;

	if (tokens == 0 || !(ms > 0))
		return;
	if (e->win_n == w) {
		e->win_tok_sum -= e->win[e->win_pos].tokens;
		e->win_ms_sum -= e->win[e->win_pos].ms;
	} else
		e->win_n++;
	e->win[e->win_pos].tokens = tokens;
	e->win[e->win_pos].ms = ms;
	e->win_tok_sum += tokens;
	e->win_ms_sum += ms;
	if (++e->win_pos == w)
		e->win_pos = 0;
}

static double
max_tps_of(const eng_config *c)
{

	if (c->step_model)
		return (double)c->max_batched_tokens * 1000.0 /
		    (c->step_fixed_ms + c->step_prefill_ms_per_token *
		    (double)c->max_batched_tokens);
	return c->prefill_tps;
}

static double
mean_tps(const eng *e)
{
	if (e->win_n == 0 || !(e->win_ms_sum > 0))
		return e->max_tps;
	return (double)e->win_tok_sum * 1000.0 / e->win_ms_sum;
}

/* --- cache use by requests ------------------------------------------------- */

/* Admission: look the prefix up, pin the key entry. */
static void
cache_admit(eng *e, rec *q)
{
	uint64_t cached = 0;
	uint32_t i, x;

	if (e->kv.cap > 0) {
		if (q->key != 0) {
			x = kv_find_hint(&e->kv, q->key, q->hint);
			if (x == ENG_NONE)
				x = kv_insert(&e->kv, q->key);
			if (x != ENG_NONE) {
				kv_touch(&e->kv, x);
				e->kv.ent[x].pin++;
				cached = e->kv.ent[x].tokens;
				q->entry = x;
				q->info.entry = x + 1;
			}
		} else {
			for (i = 0; i < q->nblocks; i++) {
				x = kv_find(&e->kv, q->blocks[i]);
				if (x == ENG_NONE)
					break;
				kv_touch(&e->kv, x);
				cached += e->kv.ent[x].tokens;
			}
		}
	}
	q->info.cached_tokens = cached;
	q->info.hit = cached > 0;
	q->info.reused_tokens = cached < q->info.input_tokens ? cached :
	    q->info.input_tokens;
	q->info.uncached_tokens = q->info.input_tokens - q->info.reused_tokens;
	e->ctr.cache_queries += q->info.input_tokens;
	e->ctr.cache_hits += q->info.reused_tokens;
}

/* Prefill done: the prompt is cached. */
static void
cache_prefilled(eng *e, rec *q)
{
	uint64_t full;
	uint32_t i, x, n;

	if (e->kv.cap == 0)
		return;
	if (q->entry != ENG_NONE) {
		kv_grow(e, q->entry, q->info.input_tokens, &q->info);
		return;
	}
	if (q->blocks == NULL)
		return;
	full = q->info.input_tokens / e->cfg.block_tokens;
	n = q->nblocks < full ? q->nblocks : (uint32_t)full;
	for (i = 0; i < n; i++) {
		x = kv_find(&e->kv, q->blocks[i]);
		if (x == ENG_NONE) {
			x = kv_insert(&e->kv, q->blocks[i]);
			if (x == ENG_NONE)
				break;
			kv_grow(e, x, e->cfg.block_tokens, &q->info);
			if (e->kv.ent[x].tokens < e->cfg.block_tokens) {
				kv_remove(&e->kv, x);
				break;
			}
		}
	}
	/* Touch back to front so that a chain's first block is the most
	 * recent: eviction then trims chains from their ends. */
	while (i-- > 0)
		if ((x = kv_find(&e->kv, q->blocks[i])) != ENG_NONE)
			kv_touch(&e->kv, x);
}

/* Completion: the generated tokens are cached too; unpin. */
static void
cache_done(eng *e, rec *q)
{
	uint32_t x = q->entry;

	if (x == ENG_NONE)
		return;
	kv_grow(e, x, q->info.input_tokens + q->info.output_tokens, &q->info);
	e->kv.ent[x].pin--;
	if (e->kv.ent[x].tokens == 0 && e->kv.ent[x].pin == 0)
		kv_remove(&e->kv, x);
	q->entry = ENG_NONE;
}

/* Cancelled while admitted: unpin the key entry, nothing more cached. */
static void
cache_unpin(eng *e, rec *q)
{
	uint32_t x = q->entry;

	if (x == ENG_NONE)
		return;
	e->kv.ent[x].pin--;
	if (e->kv.ent[x].tokens == 0 && e->kv.ent[x].pin == 0)
		kv_remove(&e->kv, x);
	q->entry = ENG_NONE;
}

/* --- callbacks ------------------------------------------------------------- */

/* The next internal event's time from the state (eng_next_event reads the
 * copy): called after every change, before a callback and before returning
 * to the caller. */
static void
renext(eng *e)
{
	double t = INFINITY;
	uint32_t h = ENG_NONE, x = ENG_NONE;
	bool decode = false;

	if (e->step_model) {
		if (e->step_busy)
			t = e->step_end;
		else if (e->step_pending)
			t = e->step_at;
	} else {
		if (e->nheap > 0) {
			t = e->heap[0].t;
			h = e->heap[0].h;
			x = e->heap[0].entry;
			decode = true;
		}
		if (e->pref_busy && e->pref_end < t) {
			t = e->pref_end;
			h = e->pq_head;
			x = e->pref_entry;
			decode = false;
		}
	}
	e->next_t = t;
	e->next_decode = decode;
	/* The next event's record, fetched while a caller driving many
	 * engines serves the others' events first. */
	if (h != ENG_NONE) {
		const char *q = (const char *)R(e, h);

		__builtin_prefetch(q);
		__builtin_prefetch(q + 64);
		__builtin_prefetch(q + 128);
	}
	if (x != ENG_NONE)
		__builtin_prefetch(&e->kv.ent[x]);
}

/* The callback sees the record's own numbers: records never move, and h is
 * not reused before the callback returns (a done record is freed after). */
static void
fire(eng *e, uint32_t h, int event)
{
	renext(e);
	if (e->cb == NULL || R(e, h)->cancelled)
		return;
	e->cb(e->ctx, h, event, &R(e, h)->info);
}

/* --- queue ----------------------------------------------------------------- */

/* Pop the next live waiting request, freeing cancelled ones; ENG_NONE if none. */
static uint32_t
wq_pop(eng *e)
{
	while (e->wq_head != ENG_NONE) {
		uint32_t h = e->wq_head;

		e->wq_head = R(e, h)->next;
		if (e->wq_head == ENG_NONE)
			e->wq_tail = ENG_NONE;
		R(e, h)->next = ENG_NONE;
		if (R(e, h)->cancelled) {
			rec_free(e, h);
			continue;
		}
		e->nwait--;
		e->wait_tokens -= R(e, h)->info.input_tokens;
		return h;
	}
	return ENG_NONE;
}

static bool
room(const eng *e)
{
	return e->nadm + e->held < e->slots && e->nwait > 0;
}

static void
admit_one(eng *e, uint32_t h, double t)
{
	rec *q = R(e, h);

	q->state = RS_RUN;
	q->info.admit_ms = t;
	cache_admit(e, q);
	q->prefill_left = q->info.uncached_tokens;
	e->nadm++;
	e->npre++;
	e->adm_tokens += q->info.input_tokens;
}

/* --- simple model ---------------------------------------------------------- */

/* Does a end before b?  Times tie rarely: then the earlier push first. */
static inline bool
heap_before(const eng *e, const heap_item *a, const heap_item *b)
{
	return a->t < b->t || (a->t == b->t &&
	    R(e, a->h)->hseq < R(e, b->h)->hseq);
}

/* The earlier of items a and b: a select on the times, the records read
 * only on a tie. */
static inline uint32_t
heap_min2(const eng *e, uint32_t a, uint32_t b)
{
	const heap_item *hp = e->heap;

	if (__builtin_expect(hp[a].t == hp[b].t, 0))
		return R(e, hp[b].h)->hseq < R(e, hp[a].h)->hseq ? b : a;
	return hp[b].t < hp[a].t ? b : a;
}

/* Put x at hole i or below it.  A full set of four children is settled by
 * a knockout of pairs (three selects, no loop). */
static void
heap_down(eng *e, uint32_t i, heap_item x)
{
	heap_item *hp = e->heap;
	uint32_t n = e->nheap;

	for (;;) {
		uint32_t c = 4 * i + 1, m = c, j;

		if (c >= n)
			break;
		if (n - c >= 4)
			m = heap_min2(e, heap_min2(e, c, c + 1),
			    heap_min2(e, c + 2, c + 3));
		else
			for (j = c + 1; j < n; j++)
				m = heap_min2(e, m, j);
		if (!heap_before(e, &hp[m], &x))
			break;
		hp[i] = hp[m];
		i = m;
	}
	hp[i] = x;
}

/* Put x at hole i or above it; returns where. */
static uint32_t
heap_up(eng *e, uint32_t i, heap_item x)
{
	heap_item *hp = e->heap;

	while (i > 0) {
		uint32_t p = (i - 1) / 4;

		if (!heap_before(e, &x, &hp[p]))
			break;
		hp[i] = hp[p];
		i = p;
	}
	hp[i] = x;
	return i;
}

static void
heap_push(eng *e, double t, uint32_t h)
{
	heap_item x = { .t = t, .h = h, .entry = R(e, h)->entry };

	if (e->nheap == e->slots)
		abort();	/* sized to slots at creation: cannot happen */
	R(e, h)->hseq = e->seq++;
	heap_up(e, e->nheap++, x);
}

static void
heap_pop(eng *e)
{
	heap_item last = e->heap[--e->nheap];

	if (e->nheap > 0)
		heap_down(e, 0, last);
}

/* Remove h from the decode heap (a cancelled sequence). */
static void
heap_remove(eng *e, uint32_t h)
{
	uint32_t i;
	heap_item x;

	for (i = 0; i < e->nheap && e->heap[i].h != h; i++)
		;
	if (i == e->nheap)
		return;
	x = e->heap[--e->nheap];
	if (i == e->nheap)
		return;
	if (heap_up(e, i, x) == i)
		heap_down(e, i, x);
}

/* Unlink h from the prefill FIFO; its prefill stops if it was running. */
static void
pq_remove(eng *e, uint32_t h)
{
	uint32_t p = ENG_NONE, x;

	for (x = e->pq_head; x != ENG_NONE && x != h; x = R(e, x)->next)
		p = x;
	if (x == ENG_NONE)
		return;
	if (p == ENG_NONE) {
		e->pq_head = R(e, h)->next;
		e->pref_busy = false;		/* the head was in prefill */
	} else
		R(e, p)->next = R(e, h)->next;
	if (e->pq_tail == h)
		e->pq_tail = p;
	R(e, h)->next = ENG_NONE;
	e->pref_tokens -= R(e, h)->info.uncached_tokens;
}

static void
prefill_start(eng *e, double t)
{
	rec *q;

	if (e->pref_busy || e->pq_head == ENG_NONE)
		return;
	q = R(e, e->pq_head);
	q->pstart = t;
	q->pend = t + (double)q->info.uncached_tokens * 1000.0 /
	    e->prefill_tps;
	e->pref_busy = true;
	e->pref_start = q->pstart;
	e->pref_end = q->pend;
	e->pref_unc = q->info.uncached_tokens;
	e->pref_entry = q->entry;
}

static void
simple_admit(eng *e, double t)
{
	while (room(e)) {
		uint32_t h = wq_pop(e);

		if (h == ENG_NONE)
			break;
		admit_one(e, h, t);
		if (e->pq_tail == ENG_NONE)
			e->pq_head = h;
		else
			R(e, e->pq_tail)->next = h;
		e->pq_tail = h;
		e->pref_tokens += R(e, h)->info.uncached_tokens;
	}
	prefill_start(e, t);
}

static void
finish(eng *e, uint32_t h, double t)
{
	rec *q = R(e, h);

	q->info.done_ms = t;
	q->info.generated = q->info.output_tokens;
	q->state = RS_DONE;
	cache_done(e, q);
	e->nadm--;
	e->adm_tokens -= q->info.input_tokens;
	e->ctr.requests_done++;
}

static void
first_token(eng *e, uint32_t h, double t)
{
	rec *q = R(e, h);

	q->first_done = true;
	q->info.first_token_ms = t;
	q->info.generated = 1;
	e->npre--;
	e->ctr.prompt_tokens += q->info.input_tokens;
	e->ctr.prefilled_tokens += q->info.uncached_tokens;
	cache_prefilled(e, q);
	q->blocks = NULL;
}

static void
simple_prefill_end(eng *e, double t)
{
	uint32_t h = e->pq_head;
	rec *q = R(e, h);
	bool done;

	e->pq_head = q->next;
	if (e->pq_head == ENG_NONE)
		e->pq_tail = ENG_NONE;
	q->next = ENG_NONE;
	e->pref_busy = false;
	e->pref_tokens -= q->info.uncached_tokens;
	tps_sample(e, q->info.uncached_tokens, q->pend - q->pstart);
	first_token(e, h, t);
	done = q->info.output_tokens <= 1;
	if (done) {
		finish(e, h, t);
		e->ctr.generation_tokens += 1;
	} else
		heap_push(e, t + (double)(q->info.output_tokens - 1) * 1000.0 /
		    e->decode_tps, h);
	prefill_start(e, t);
	if (done)
		simple_admit(e, t);
	fire(e, h, ENG_FIRST_TOKEN);
	if (done) {
		fire(e, h, ENG_DONE);
		rec_free(e, h);
	}
}

static void
simple_decode_end(eng *e, double t)
{
	uint32_t h = e->heap[0].h;

	heap_pop(e);
	e->ctr.generation_tokens += R(e, h)->info.output_tokens;
	finish(e, h, t);
	simple_admit(e, t);
	fire(e, h, ENG_DONE);
	rec_free(e, h);
}

/* --- step model ------------------------------------------------------------ */

/* Cancelled sequences leave run[] (and free their records) at step starts:
 * the batch in flight cannot be aborted, and callbacks may cancel while
 * step_end walks run[]. */
static void
run_drop_cancelled(eng *e)
{
	uint32_t i, w = 0;

	for (i = 0; i < e->nrun; i++) {
		if (R(e, e->run[i])->cancelled)
			rec_free(e, e->run[i]);
		else
			e->run[w++] = e->run[i];
	}
	e->nrun = w;
}

static void
step_start(eng *e, double t)
{
	uint64_t budget, p = 0;
	uint32_t i, d = 0;
	bool any = false;
	double dur;

	e->step_pending = false;
	run_drop_cancelled(e);
	while (room(e)) {
		uint32_t h = wq_pop(e);

		if (h == ENG_NONE)
			break;
		admit_one(e, h, t);
		e->run[e->nrun++] = h;
	}
	for (i = 0; i < e->nrun; i++) {
		rec *q = R(e, e->run[i]);

		q->step_decode = q->first_done &&
		    q->info.generated < q->info.output_tokens;
		q->step_in = false;
		q->step_assign = 0;
		if (q->step_decode)
			d++;
	}
	budget = e->cfg.max_batched_tokens > d ?
	    e->cfg.max_batched_tokens - d : 0;
	for (i = 0; i < e->nrun; i++) {
		rec *q = R(e, e->run[i]);

		if (q->first_done)
			continue;
		if (q->prefill_left == 0) {
			q->step_in = true;	/* one pass for the first token */
			continue;
		}
		if (budget == 0)
			continue;
		q->step_assign = q->prefill_left < budget ? q->prefill_left :
		    budget;
		budget -= q->step_assign;
		p += q->step_assign;
		q->step_in = true;
	}
	for (i = 0; i < e->nrun; i++)
		if (R(e, e->run[i])->step_in || R(e, e->run[i])->step_decode)
			any = true;
	if (!any)
		return;
	dur = e->cfg.step_fixed_ms + e->cfg.step_decode_ms_per_seq * d +
	    e->cfg.step_prefill_ms_per_token * (double)p;
	if (dur < 0.001)
		dur = 0.001;
	e->step_busy = true;
	e->step_end = t + dur;
	e->step_p = p;
	e->step_dur = dur;
}

static void
step_end(eng *e, double t)
{
	uint32_t i, w = 0, n = e->nrun;

	e->step_busy = false;
	tps_sample(e, e->step_p, e->step_dur);
	for (i = 0; i < n; i++) {
		uint32_t h = e->run[i];
		rec *q = R(e, h);
		bool first = false, done = false;

		if (q->cancelled) {
			e->run[w++] = h;	/* dropped at the next start */
			continue;
		}
		if (q->step_decode) {
			q->info.generated++;
			e->ctr.generation_tokens++;
		}
		if (q->step_in) {
			q->prefill_left -= q->step_assign;
			if (q->prefill_left == 0) {
				first_token(e, h, t);
				e->ctr.generation_tokens++;
				first = true;
			}
		}
		if (q->first_done && q->info.generated >= q->info.output_tokens) {
			finish(e, h, t);
			done = true;
		} else
			e->run[w++] = h;
		if (first)
			fire(e, h, ENG_FIRST_TOKEN);
		if (done) {
			fire(e, h, ENG_DONE);
			rec_free(e, h);
		}
	}
	e->nrun = w;
	step_start(e, t);
}

static void
step_kick(eng *e, double t)
{
	if (!e->step_busy && !e->step_pending && room(e)) {
		e->step_pending = true;
		e->step_at = t;
	}
}

/* --- public API ------------------------------------------------------------ */

void
eng_config_default(eng_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->slots = 8;
	cfg->prefill_tps = 20000;
	cfg->decode_tps = 50;
	cfg->kv_capacity_tokens = 400000;
	cfg->block_tokens = 16;
	cfg->tps_window = 8;
	cfg->max_batched_tokens = 2048;
	cfg->step_fixed_ms = 4.0;
	cfg->step_decode_ms_per_seq = 0.085;
	cfg->step_prefill_ms_per_token = 0.05;
}

int
eng_new(eng **out, const eng_config *cfg, eng_cb *cb, void *ctx,
    const char **why)
{
	const char *bad = NULL;
	eng *e;

	if (cfg->slots < 1 || cfg->slots > 1000000)
		bad = "slots";
	else if (!cfg->step_model && !(cfg->prefill_tps > 0 &&
	    isfinite(cfg->prefill_tps)))
		bad = "prefill_tps";
	else if (!cfg->step_model && !(cfg->decode_tps > 0 &&
	    isfinite(cfg->decode_tps)))
		bad = "decode_tps";
	else if (cfg->block_tokens < 1)
		bad = "block_tokens";
	else if (cfg->tps_window < 1 || cfg->tps_window > 65536)
		bad = "tps_window";
	else if (cfg->step_model && cfg->max_batched_tokens < 1)
		bad = "max_batched_tokens";
	else if (cfg->step_model && !(cfg->step_fixed_ms >= 0 &&
	    isfinite(cfg->step_fixed_ms)))
		bad = "step_fixed_ms";
	else if (cfg->step_model && !(cfg->step_decode_ms_per_seq >= 0 &&
	    isfinite(cfg->step_decode_ms_per_seq)))
		bad = "step_decode_ms_per_seq";
	else if (cfg->step_model && !(cfg->step_prefill_ms_per_token > 0 &&
	    isfinite(cfg->step_prefill_ms_per_token)))
		bad = "step_prefill_ms_per_token";
	if (bad != NULL) {
		if (why != NULL)
			*why = bad;
		return EINVAL;
	}
	/* Line-aligned, so that the first two lines are the hot ones. */
	if ((e = aligned_alloc(64, (sizeof(*e) + 63) / 64 * 64)) == NULL)
		return ENOMEM;
	memset(e, 0, sizeof(*e));
	e->cfg = *cfg;
	e->cb = cb;
	e->ctx = ctx;
	e->next_t = INFINITY;
	e->max_tps = max_tps_of(cfg);
	e->slots = cfg->slots;
	e->step_model = cfg->step_model;
	e->prefill_tps = cfg->prefill_tps;
	e->decode_tps = cfg->decode_tps;
	e->max_queue = cfg->max_queue;
	e->tps_window = cfg->tps_window;
	e->free_head = e->wq_head = e->wq_tail = ENG_NONE;
	e->pq_head = e->pq_tail = ENG_NONE;
	e->win = calloc(cfg->tps_window, sizeof(*e->win));
	e->run = calloc(cfg->slots, sizeof(*e->run));
	if (e->win == NULL || e->run == NULL ||
	    (e->heapmem = aligned_alloc(64, ((size_t)cfg->slots + HEAP_SKEW +
	    3) / 4 * 4 * sizeof(heap_item))) == NULL ||
	    kv_init(&e->kv, cfg->kv_capacity_tokens) != 0) {
		eng_free(e);
		return ENOMEM;
	}
	e->heap = e->heapmem + HEAP_SKEW;
	*out = e;
	return 0;
}

void
eng_free(eng *e)
{
	uint32_t i;

	if (e == NULL)
		return;
	kv_fini(&e->kv);
	for (i = 0; i < e->nrch; i++)
		free(e->rch[i]);
	free(e->rch);
	free(e->heapmem);
	free(e->run);
	free(e->win);
	free(e);
}

double
eng_next_event(const eng *e)
{
	return e->next_t;
}

void
eng_advance(eng *e, double now)
{
	bool outer = !e->in_advance;

	e->in_advance = true;
	for (;;) {
		double t = e->next_t;

		if (!(t <= now) || isinf(t))
			break;
		if (t > e->now)
			e->now = t;
		if (e->step_model) {
			if (e->step_busy)
				step_end(e, t);
			else
				step_start(e, t);
			renext(e);
		} else if (e->next_decode)
			simple_decode_end(e, t);	/* frees slots first */
		else
			simple_prefill_end(e, t);
		/* The simple model's handlers end with their callbacks, and
		 * fire() made the next event current before each; a callback
		 * that submits or cancels makes it current again. */
	}
	if (now > e->now)
		e->now = now;
	if (outer)
		e->in_advance = false;
}

/* Advance to now unless called back from inside eng_advance. */
static void
sync_to(eng *e, double now)
{
	if (!e->in_advance)
		eng_advance(e, now);
}

int
eng_submit(eng *e, double now, const eng_req *r, uint32_t *handle)
{
	uint32_t h;
	rec *q;

	sync_to(e, now);
	if (e->max_queue > 0 && e->nwait >= e->max_queue) {
		e->ctr.requests_rejected++;
		return ENG_EFULL;
	}
	if ((h = rec_alloc(e)) == ENG_NONE)
		return ENOMEM;
	q = R(e, h);
	q->state = RS_WAIT;
	q->key = r->key;
	q->blocks = r->blocks;
	q->nblocks = r->blocks != NULL ? r->nblocks : 0;
	q->hint = r->key != 0 ? r->hint : 0;
	q->info.udata = r->udata;
	q->info.arrive_ms = now;
	q->info.input_tokens = r->input_tokens;
	q->info.output_tokens = r->output_tokens > 0 ? r->output_tokens : 1;
	if (e->wq_tail == ENG_NONE)
		e->wq_head = h;
	else
		R(e, e->wq_tail)->next = h;
	e->wq_tail = h;
	e->nwait++;
	e->wait_tokens += r->input_tokens;
	e->ctr.requests_submitted++;
	if (e->step_model)
		step_kick(e, now);
	else
		simple_admit(e, now);
	renext(e);
	*handle = h;
	return 0;
}

/* An admitted request is cancelled: its slot is free at the engine's time. */
static void
abort_admitted(eng *e, uint32_t h)
{
	rec *q = R(e, h);

	if (!q->first_done)
		e->npre--;
	e->nadm--;
	e->adm_tokens -= q->info.input_tokens;
	cache_unpin(e, q);
	if (e->step_model) {
		/* run[] drops it at the next step start (one is due: a
		 * sequence in run[] always has work in the step in flight) */
		step_kick(e, e->now);
		return;
	}
	if (!q->first_done)
		pq_remove(e, h);
	else
		heap_remove(e, h);
	rec_free(e, h);
	simple_admit(e, e->now);
}

void
eng_cancel(eng *e, uint32_t h)
{
	rec *q;

	if (h >= e->nrec)
		return;
	q = R(e, h);
	if (q->state == RS_FREE || q->state == RS_DONE || q->cancelled)
		return;
	q->cancelled = true;
	q->info.udata = NULL;
	q->blocks = NULL;
	e->ctr.requests_cancelled++;
	if (q->state == RS_WAIT) {
		/* Stays linked; wq_pop frees it. */
		e->nwait--;
		e->wait_tokens -= q->info.input_tokens;
		return;
	}
	abort_admitted(e, h);
	renext(e);
}

uint64_t
eng_generated(const eng *e, uint32_t h, double now)
{
	const rec *q;
	double n;

	if (h >= e->nrec)
		return 0;
	q = R(e, h);
	if (q->state == RS_FREE || !q->first_done)
		return 0;
	if (e->step_model || q->state == RS_DONE)
		return q->info.generated;
	n = 1.0 + floor((now - q->info.first_token_ms) * e->cfg.decode_tps /
	    1000.0);
	if (!(n < (double)q->info.output_tokens))
		return q->info.output_tokens;
	return n < 1 ? 1 : (uint64_t)n;
}

const eng_info *
eng_peek(const eng *e, uint32_t h)
{
	if (h >= e->nrec || R(e, h)->state == RS_FREE || R(e, h)->cancelled)
		return NULL;
	return &R(e, h)->info;
}

void
eng_hold(eng *e, double now, uint32_t n)
{
	sync_to(e, now);
	e->held = n < e->slots ? n : e->slots;
}

void
eng_release(eng *e, double now)
{
	sync_to(e, now);
	e->held = 0;
	if (e->step_model)
		step_kick(e, e->now);
	else
		simple_admit(e, e->now);
	renext(e);
}

uint32_t
eng_held(const eng *e)
{
	return e->held;
}

/* Prefill tokens admitted requests still have to compute at now. */
static uint64_t
pending_prefill(const eng *e, double now)
{
	uint64_t pending = 0;
	uint32_t i;

	if (e->step_model) {
		for (i = 0; i < e->nrun; i++) {
			const rec *q = R(e, e->run[i]);

			if (!q->first_done && !q->cancelled)
				pending += q->prefill_left;
		}
		return pending;
	}
	pending = e->pref_tokens;
	if (e->pref_busy) {
		double span = e->pref_end - e->pref_start, done;

		if (span > 0 && now > e->pref_start) {
			done = floor((double)e->pref_unc *
			    (now - e->pref_start) / span);
			if (done > (double)e->pref_unc)
				done = (double)e->pref_unc;
			pending -= (uint64_t)done;
		}
	}
	return pending;
}

void
eng_load_get(const eng *e, double now, eng_load *l)
{
	l->backlog = e->wait_tokens + pending_prefill(e, now);
	l->tps = e->max_tps;
	l->running = (uint64_t)e->nadm + e->held + e->nwait;
	l->slots = e->slots;
	l->kv_free = e->kv.cap - e->kv.used;
}

void
eng_cluster(const eng *e, double now, sg_cluster *c)
{
	uint64_t pending = pending_prefill(e, now);
	double tps = mean_tps(e);

	c->max_engine_concurrency = e->slots;
	/* Everything the engine has accepted: a router compares this with
	 * max_engine_concurrency (+ max_queued), stargate-lb-config(5). */
	c->running = (uint64_t)e->nadm + e->held + e->nwait;
	c->queued = (uint64_t)e->nwait + e->npre;
	c->queued_input_tokens = e->wait_tokens + pending;
	c->total_input_tokens = e->wait_tokens + e->adm_tokens;
	/* Sums of float durations drift in the last bits: keep 3 decimals. */
	c->last_mean_input_tps = round(tps * 1000.0) / 1000.0;
	c->max_input_tps = e->max_tps;
	c->kv_capacity_tokens = e->kv.cap;
	c->kv_used_tokens = e->kv.used;
	c->kv_free_tokens = e->kv.cap - e->kv.used;
	c->nprio = 0;
	if (e->cfg.prio_map) {
		c->nprio = 1;
		c->prio_key[0] = 0;
		c->prio_ms[0] = tps > 0 ?
		    ceil((double)c->queued_input_tokens * 1000.0 / tps) : 0;
	}
}

uint32_t
eng_running(const eng *e)
{
	return e->nadm + e->held;
}

uint32_t
eng_waiting(const eng *e)
{
	return e->nwait;
}

uint64_t
eng_kv_used(const eng *e)
{
	return e->kv.used;
}

uint64_t
eng_kv_capacity(const eng *e)
{
	return e->kv.cap;
}

const eng_counters *
eng_counters_get(const eng *e)
{
	return &e->ctr;
}

const eng_config *
eng_config_get(const eng *e)
{
	return &e->cfg;
}

/* --- read-only cache probe (sg-sim's perfect-knowledge row) ---------------- */

uint64_t
eng_cached_prefix(const eng *e, const eng_req *r)
{
	uint64_t cached = 0;
	uint32_t i, x;

	if (e->kv.cap == 0)
		return 0;
	if (r->key != 0) {
		if ((x = kv_find_hint(&e->kv, r->key, r->hint)) != ENG_NONE)
			cached = e->kv.ent[x].tokens;
	} else if (r->blocks != NULL) {
		for (i = 0; i < r->nblocks; i++) {
			if ((x = kv_find(&e->kv, r->blocks[i])) == ENG_NONE)
				break;
			cached += e->kv.ent[x].tokens;
		}
	}
	return cached < r->input_tokens ? cached : r->input_tokens;
}

void
eng_prefetch(const eng *e, const eng_req *r)
{
	const kvcache *kv = &e->kv;
	uint32_t hint = r->hint;

	if (kv->cap == 0 || r->key == 0)
		return;
	if (hint != 0 && hint - 1 < kv->nent)
		__builtin_prefetch(&kv->ent[hint - 1]);
	else
		__builtin_prefetch(&kv->tab[kv_hash(r->key) & kv->tabmask]);
}
