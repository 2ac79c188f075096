/*
 * engine.c — the inference-engine model (see engine.h for what is modelled).
 *
 * Layout: request records live in one pool indexed by handle (a free list
 * threads unused records); the FIFO queue and the simple model's prefill
 * queue are singly linked lists through the records; decoding sequences of
 * the simple model sit in a binary min-heap ordered by (done time, sequence
 * number); the step model keeps its admitted sequences in an array in
 * admission order.  The KV cache is an entry pool with an intrusive LRU list
 * and an open-addressing (linear probing, backward-shift delete) index whose
 * slots hold their keys; a caller that remembers a key's entry (eng_info
 * .entry, passed back as eng_req.hint) skips the index when the entry still
 * holds that key (removed entries hold key 0).
 *
 * Reentrancy: callbacks may submit to or cancel on the same engine, which can
 * grow the record pool.  Every handler therefore finishes its state changes
 * before it calls back, and re-reads record pointers after a callback.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"

enum { RS_FREE = 0, RS_WAIT, RS_RUN, RS_DONE };

typedef struct rec {
	eng_info	 info;
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
	uint8_t		 state;
	bool		 cancelled;
	bool		 first_done;
	bool		 step_in;	/* step model: prefill part of this step */
	bool		 step_decode;	/* step model: decodes in this step */
} rec;

typedef struct kv_entry {
	uint64_t	key;
	uint64_t	tokens;
	uint32_t	prev, next;	/* LRU list: head = most recent */
	uint32_t	pin;
} kv_entry;

/* An index slot: the entry's key beside its index, so that a probe reads
 * the table alone (one cache line) and touches the entry only on a hit. */
typedef struct kv_slot {
	uint64_t	key;
	uint32_t	x;		/* entry index or ENG_NONE */
} kv_slot;

typedef struct kvcache {
	uint64_t	 cap, used;
	kv_entry	*ent;
	uint32_t	 nent, entcap, free_head;
	uint32_t	 head, tail;
	kv_slot		*tab;
	uint32_t	 tabmask;	/* size - 1; size is a power of two */
	uint32_t	 count;
} kvcache;

typedef struct heap_item {
	double		t;
	uint64_t	seq;
	uint32_t	h;
} heap_item;

struct eng {
	eng_config	 cfg;
	eng_cb		*cb;
	void		*ctx;
	double		 now;
	bool		 in_advance;

	rec		*r;
	uint32_t	 nrec, reccap, free_head;

	/* FIFO queue */
	uint32_t	 wq_head, wq_tail;
	uint32_t	 nwait;		/* not cancelled */
	uint64_t	 wait_tokens;

	uint32_t	 nadm;		/* admitted (holding a slot) */
	uint32_t	 npre;		/* admitted, before the first token */
	uint32_t	 held;
	uint64_t	 adm_tokens;	/* input tokens of admitted requests */

	/* simple model */
	uint32_t	 pq_head, pq_tail;	/* prefill FIFO; head in progress */
	bool		 pref_busy;
	/* while pref_busy: the head's pstart, pend and uncached tokens (a
	 * copy in the engine, so that load and next-event reads do not
	 * touch its record) */
	double		 pref_start, pref_end;
	uint64_t	 pref_unc;
	uint64_t	 pref_tokens;	/* uncached tokens in the prefill FIFO */
	heap_item	*heap;
	uint32_t	 nheap, heapcap;
	uint64_t	 seq;

	/* step model */
	uint32_t	*run;
	uint32_t	 nrun;
	bool		 step_busy;
	double		 step_end;
	bool		 step_pending;
	double		 step_at;
	uint64_t	 step_p;
	double		 step_dur;

	/* last_mean_input_tps window */
	uint64_t	*win_tok;
	double		*win_ms;
	uint32_t	 win_n, win_pos;
	uint64_t	 win_tok_sum;
	double		 win_ms_sum;

	kvcache		 kv;
	eng_counters	 ctr;
};

#define R(e, h)	(&(e)->r[(h)])

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

static int
kv_init(kvcache *kv, uint64_t cap)
{
	uint32_t i;

	memset(kv, 0, sizeof(*kv));
	kv->cap = cap;
	kv->free_head = kv->head = kv->tail = ENG_NONE;
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
}

static uint32_t
kv_find(const kvcache *kv, uint64_t key)
{
	uint32_t i = (uint32_t)mix64(key) & kv->tabmask;

	for (;;) {
		const kv_slot *t = &kv->tab[i];

		if (t->x == ENG_NONE)
			return ENG_NONE;
		if (t->key == key)
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
kv_tab_put(kvcache *kv, uint64_t key, uint32_t x)
{
	uint32_t i = (uint32_t)mix64(key) & kv->tabmask;

	while (kv->tab[i].x != ENG_NONE)
		i = (i + 1) & kv->tabmask;
	kv->tab[i].key = key;
	kv->tab[i].x = x;
}

static int
kv_tab_grow(kvcache *kv)
{
	uint32_t size = (kv->tabmask + 1) * 2, i;
	uint32_t oldsize = kv->tabmask + 1;
	kv_slot *old = kv->tab;

	kv->tab = malloc((size_t)size * sizeof(*kv->tab));
	if (kv->tab == NULL) {
		kv->tab = old;
		return ENOMEM;
	}
	for (i = 0; i < size; i++)
		kv->tab[i].x = ENG_NONE;
	kv->tabmask = size - 1;
	for (i = 0; i < oldsize; i++)
		if (old[i].x != ENG_NONE)
			kv_tab_put(kv, old[i].key, old[i].x);
	free(old);
	return 0;
}

static void
kv_tab_del(kvcache *kv, uint32_t x)
{
	uint32_t i = (uint32_t)mix64(kv->ent[x].key) & kv->tabmask, j;

	while (kv->tab[i].x != x)
		i = (i + 1) & kv->tabmask;
	kv->tab[i].x = ENG_NONE;
	/* Backward shift: pull later members of the probe run into the hole. */
	for (j = (i + 1) & kv->tabmask; kv->tab[j].x != ENG_NONE;
	    j = (j + 1) & kv->tabmask) {
		uint32_t home = (uint32_t)mix64(kv->tab[j].key) & kv->tabmask;

		if (((j - home) & kv->tabmask) >= ((j - i) & kv->tabmask)) {
			kv->tab[i] = kv->tab[j];
			kv->tab[j].x = ENG_NONE;
			i = j;
		}
	}
}

static void
kv_unlink(kvcache *kv, uint32_t x)
{
	kv_entry *en = &kv->ent[x];

	if (en->prev != ENG_NONE)
		kv->ent[en->prev].next = en->next;
	else
		kv->head = en->next;
	if (en->next != ENG_NONE)
		kv->ent[en->next].prev = en->prev;
	else
		kv->tail = en->prev;
}

static void
kv_push_front(kvcache *kv, uint32_t x)
{
	kv_entry *en = &kv->ent[x];

	en->prev = ENG_NONE;
	en->next = kv->head;
	if (kv->head != ENG_NONE)
		kv->ent[kv->head].prev = x;
	kv->head = x;
	if (kv->tail == ENG_NONE)
		kv->tail = x;
}

static void
kv_touch(kvcache *kv, uint32_t x)
{
	if (kv->head == x)
		return;
	kv_unlink(kv, x);
	kv_push_front(kv, x);
}

static void
kv_remove(kvcache *kv, uint32_t x)
{
	kv_tab_del(kv, x);
	kv_unlink(kv, x);
	kv->used -= kv->ent[x].tokens;
	kv->ent[x].tokens = 0;
	kv->ent[x].key = 0;		/* no hint finds it */
	kv->ent[x].next = kv->free_head;
	kv->free_head = x;
	kv->count--;
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
		if (grow_array((void **)&kv->ent, &kv->entcap,
		    sizeof(*kv->ent), kv->nent + 1) != 0)
			return ENG_NONE;
		x = kv->nent++;
	}
	kv->ent[x].key = key;
	kv->ent[x].tokens = 0;
	kv->ent[x].pin = 0;
	kv_tab_put(kv, key, x);
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
	uint32_t y;

	if (want <= kv->ent[x].tokens)
		return;
	need = want - kv->ent[x].tokens;
	y = kv->tail;
	while (kv->cap - kv->used < need && y != ENG_NONE) {
		uint32_t prev = kv->ent[y].prev;

		if (y != x && kv->ent[y].pin == 0) {
			info->evicted_entries++;
			info->evicted_tokens += kv->ent[y].tokens;
			e->ctr.evicted_entries++;
			e->ctr.evicted_tokens += kv->ent[y].tokens;
			kv_remove(kv, y);
		}
		y = prev;
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

	if (e->free_head != ENG_NONE) {
		h = e->free_head;
		e->free_head = R(e, h)->next;
	} else {
		if (grow_array((void **)&e->r, &e->reccap, sizeof(*e->r),
		    e->nrec + 1) != 0)
			return ENG_NONE;
		h = e->nrec++;
	}
	memset(R(e, h), 0, sizeof(rec));
	R(e, h)->next = ENG_NONE;
	R(e, h)->entry = ENG_NONE;
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
	uint32_t w = e->cfg.tps_window;

	if (tokens == 0 || !(ms > 0))
		return;
	if (e->win_n == w) {
		e->win_tok_sum -= e->win_tok[e->win_pos];
		e->win_ms_sum -= e->win_ms[e->win_pos];
	} else
		e->win_n++;
	e->win_tok[e->win_pos] = tokens;
	e->win_ms[e->win_pos] = ms;
	e->win_tok_sum += tokens;
	e->win_ms_sum += ms;
	e->win_pos = (e->win_pos + 1) % w;
}

static double
max_tps(const eng *e)
{
	const eng_config *c = &e->cfg;

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
		return max_tps(e);
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

static void
fire(eng *e, uint32_t h, int event)
{
	eng_info copy;

	if (e->cb == NULL || R(e, h)->cancelled)
		return;
	copy = R(e, h)->info;
	e->cb(e->ctx, h, event, &copy);
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
	return e->nadm + e->held < e->cfg.slots && e->nwait > 0;
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

static void
heap_push(eng *e, double t, uint32_t h)
{
	uint32_t i;

	if (grow_array((void **)&e->heap, &e->heapcap, sizeof(*e->heap),
	    e->nheap + 1) != 0)
		abort();	/* sized to slots at creation: cannot happen */
	i = e->nheap++;
	while (i > 0) {
		uint32_t p = (i - 1) / 2;

		if (e->heap[p].t < t || (e->heap[p].t == t &&
		    e->heap[p].seq < e->seq))
			break;
		e->heap[i] = e->heap[p];
		i = p;
	}
	e->heap[i].t = t;
	e->heap[i].seq = e->seq++;
	e->heap[i].h = h;
}

static void
heap_pop(eng *e)
{
	heap_item last = e->heap[--e->nheap];
	uint32_t i = 0, n = e->nheap;

	for (;;) {
		uint32_t c = 2 * i + 1;

		if (c >= n)
			break;
		if (c + 1 < n && (e->heap[c + 1].t < e->heap[c].t ||
		    (e->heap[c + 1].t == e->heap[c].t &&
		    e->heap[c + 1].seq < e->heap[c].seq)))
			c++;
		if (last.t < e->heap[c].t || (last.t == e->heap[c].t &&
		    last.seq < e->heap[c].seq))
			break;
		e->heap[i] = e->heap[c];
		i = c;
	}
	if (n > 0)
		e->heap[i] = last;
}

static bool
heap_before(const heap_item *a, const heap_item *b)
{
	return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

/* Remove h from the decode heap (a cancelled sequence). */
static void
heap_remove(eng *e, uint32_t h)
{
	uint32_t i, n;
	heap_item x;

	for (i = 0; i < e->nheap && e->heap[i].h != h; i++)
		;
	if (i == e->nheap)
		return;
	x = e->heap[--e->nheap];
	n = e->nheap;
	if (i == n)
		return;
	while (i > 0 && heap_before(&x, &e->heap[(i - 1) / 2])) {
		e->heap[i] = e->heap[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	for (;;) {
		uint32_t c = 2 * i + 1;

		if (c >= n)
			break;
		if (c + 1 < n && heap_before(&e->heap[c + 1], &e->heap[c]))
			c++;
		if (!heap_before(&e->heap[c], &x))
			break;
		e->heap[i] = e->heap[c];
		i = c;
	}
	e->heap[i] = x;
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
	    e->cfg.prefill_tps;
	e->pref_busy = true;
	e->pref_start = q->pstart;
	e->pref_end = q->pend;
	e->pref_unc = q->info.uncached_tokens;
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
		    e->cfg.decode_tps, h);
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
	if ((e = calloc(1, sizeof(*e))) == NULL)
		return ENOMEM;
	e->cfg = *cfg;
	e->cb = cb;
	e->ctx = ctx;
	e->free_head = e->wq_head = e->wq_tail = ENG_NONE;
	e->pq_head = e->pq_tail = ENG_NONE;
	e->win_tok = calloc(cfg->tps_window, sizeof(*e->win_tok));
	e->win_ms = calloc(cfg->tps_window, sizeof(*e->win_ms));
	e->run = calloc(cfg->slots, sizeof(*e->run));
	if (e->win_tok == NULL || e->win_ms == NULL || e->run == NULL ||
	    grow_array((void **)&e->heap, &e->heapcap, sizeof(*e->heap),
	    cfg->slots) != 0 || kv_init(&e->kv, cfg->kv_capacity_tokens) != 0) {
		eng_free(e);
		return ENOMEM;
	}
	*out = e;
	return 0;
}

void
eng_free(eng *e)
{
	if (e == NULL)
		return;
	kv_fini(&e->kv);
	free(e->r);
	free(e->heap);
	free(e->run);
	free(e->win_tok);
	free(e->win_ms);
	free(e);
}

double
eng_next_event(const eng *e)
{
	double t = INFINITY;

	if (e->cfg.step_model) {
		if (e->step_busy)
			t = e->step_end;
		else if (e->step_pending)
			t = e->step_at;
	} else {
		if (e->nheap > 0)
			t = e->heap[0].t;
		if (e->pref_busy && e->pq_head != ENG_NONE &&
		    e->pref_end < t)
			t = e->pref_end;
	}
	return t;
}

void
eng_advance(eng *e, double now)
{
	bool outer = !e->in_advance;

	e->in_advance = true;
	for (;;) {
		double t = eng_next_event(e);

		if (!(t <= now) || isinf(t))
			break;
		if (t > e->now)
			e->now = t;
		if (e->cfg.step_model) {
			if (e->step_busy)
				step_end(e, t);
			else
				step_start(e, t);
		} else if (e->nheap > 0 && e->heap[0].t == t)
			simple_decode_end(e, t);	/* frees slots first */
		else
			simple_prefill_end(e, t);
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
	if (e->cfg.max_queue > 0 && e->nwait >= e->cfg.max_queue) {
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
	if (e->cfg.step_model)
		step_kick(e, now);
	else
		simple_admit(e, now);
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
	if (e->cfg.step_model) {
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
	if (e->cfg.step_model || q->state == RS_DONE)
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
	e->held = n < e->cfg.slots ? n : e->cfg.slots;
}

void
eng_release(eng *e, double now)
{
	sync_to(e, now);
	e->held = 0;
	if (e->cfg.step_model)
		step_kick(e, e->now);
	else
		simple_admit(e, e->now);
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

	if (e->cfg.step_model) {
		for (i = 0; i < e->nrun; i++) {
			const rec *q = R(e, e->run[i]);

			if (!q->first_done && !q->cancelled)
				pending += q->prefill_left;
		}
		return pending;
	}
	pending = e->pref_tokens;
	if (e->pref_busy && e->pq_head != ENG_NONE) {
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
	l->tps = max_tps(e);
	l->running = (uint64_t)e->nadm + e->held + e->nwait;
	l->slots = e->cfg.slots;
	l->kv_free = e->kv.cap - e->kv.used;
}

void
eng_cluster(const eng *e, double now, sg_cluster *c)
{
	uint64_t pending = pending_prefill(e, now);
	double tps = mean_tps(e);

	c->max_engine_concurrency = e->cfg.slots;
	/* Everything the engine has accepted: a router compares this with
	 * max_engine_concurrency (+ max_queued), stargate-lb-config(5). */
	c->running = (uint64_t)e->nadm + e->held + e->nwait;
	c->queued = (uint64_t)e->nwait + e->npre;
	c->queued_input_tokens = e->wait_tokens + pending;
	c->total_input_tokens = e->wait_tokens + e->adm_tokens;
	/* Sums of float durations drift in the last bits: keep 3 decimals. */
	c->last_mean_input_tps = round(tps * 1000.0) / 1000.0;
	c->max_input_tps = max_tps(e);
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
