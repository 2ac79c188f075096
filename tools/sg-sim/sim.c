/*
 * sim.c — one row of sg-sim: a discrete-event simulation in virtual time
 * (milliseconds, a double) of multi-turn sessions routed by the real
 * libstargate router across clusters of the shared engine model.
 *
 * Event sources, merged in time order (ties: engines first, then the event
 * heap in insertion order, so a run is a pure function of the scenario):
 *  - the engines' own events (first token, last token), found by scanning
 *    each engine's cached next-event time;
 *  - a 4-ary heap of session arrivals (Poisson), turn starts (after the
 *    previous answer plus a think time), routing rechecks, stats samples,
 *    stats publications (after the staleness delay) and background
 *    arrivals; events due past the current 25 ms calendar bucket wait
 *    in their bucket and enter the heap when it runs empty, so the heap
 *    holds a bucket's events rather than every thinking session's.
 *
 * What the router sees: every stats interval each engine's state is sampled
 * into an sg_cluster (clusters are sampled at staggered phases) and, after
 * stats_staleness_ms, published.  Between publications the router's
 * snapshot is the last published sample plus every reservation made since
 * it was published: the sim keeps both in an sg_fleet, the module sg-proxy
 * uses, and decides on its view; a publication clears the reservations
 * (sg-proxy(8)), stale or not.
 *
 * A request: at its turn start it is decided at elapsed 0; "wait" rechecks
 * at min(recheck_at, now + recheck_cap_ms) (the proxy polls the same way,
 * sg-proxy(8)); "select" reserves and submits to the engine; an engine whose
 * queue is full refuses (a retryable 503): the cluster is excluded and the
 * request decided again, up to `retries` times; "reject" ends the session.
 * The hint of a returning session is the cluster of its previous turn (what
 * the gateway's store holds); its cache affinity key is the session key.
 *
 * Every random draw comes from a generator keyed by (seed, stream, index):
 * session i's turns, sizes and think times do not depend on routing, so
 * every row replays the same traffic.  With several rows sg-sim draws
 * that traffic once (traffic.c: arrivals, classes, turn counts, each
 * turn's size draws and think time) and every row reads it back
 * (sim_run_traffic; a session's rng then holds the index of its first
 * turn): the same numbers, without a lognormal draw's exp and Gaussian
 * per size per row.  A trace scenario replays its requests instead: a
 * turn is sent at its time, or think_ms after the previous answer if that
 * is later.
 *
 * The perfect-knowledge row (SIM_ALG_PERFECT) has no router: at each
 * decision it reads every candidate engine exactly (its cache through
 * eng_cached_prefix, its queue and slots through eng_cluster at the
 * decision instant) and asks tools/common/oracle.c for the cluster with
 * the lowest estimated TTFT, under wait-and-widen's capacity rule.  It
 * exists only here, as a bound for the rows that route on published stats:
 * a bound on each decision (it takes the longest cached prefix any
 * candidate holds), not on a run, whose reuse also depends on the cache
 * contents earlier placements left.  Every row reports, per dispatch, the
 * prefix its choice held and the longest any candidate held (best_prefix),
 * so the per-decision bound can be checked.
 *
 * Candidates: the clusters serving the request's model that are not being
 * drained.  Engine events are found through an 8-ary tournament tree over
 * the engines' next-event times (ordered by time, then cluster index, as
 * the linear scan it replaces), so a step costs a few 8-way scans; up to
 * 64 clusters (two levels, a fleet) the replay is unrolled with the
 * levels' offsets constant (tree_fix2).
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "sg-sim/sim.h"
#include "common/oracle.h"

enum { EV_SESSION, EV_TURN, EV_ROUTE, EV_SAMPLE, EV_VISIBLE, EV_BG,
    EV_DRAIN };

typedef struct ev {
	double		t;
	uint32_t	type;
	uint32_t	a;
} ev;

/*
 * A heap item: the time and one word holding the insertion number (high
 * bits), the type and the argument, so that (t, k) orders as (t, seq) and
 * four children fill one 64-byte line.
 */
typedef struct hev {
	double		t;
	uint64_t	k;
} hev;

/* A calendar bucket: the events of one BK_MS interval, unordered. */
typedef struct bkt {
	hev		*v;
	size_t		 n, cap;
} bkt;

/* Buckets of 25 ms keep the heap at a few dozen events at fleet size
 * (a 250 ms bucket held about ten times as many, a level more per pop);
 * 32768 of them reach 819 s ahead, past the longest think times of the
 * bundled scenarios, so few events wait in far. */
#define BK_MS		25.0
#define BK_N		32768	/* buckets ahead (a power of two) */

#define EV_ABITS	24
#define EV_TBITS	3
#define EV_SEQ_MAX	(UINT64_MAX >> (EV_ABITS + EV_TBITS))

typedef struct sample {
	sg_cluster	c;
} sample;

/* The tournament over the engines' next-event times: TREE_W children a
 * node, at most TREE_MAXLEV levels above the leaves; a node is its
 * winner's time (tt) and index (ti), in two arrays so that the eight
 * times of a group are one 64-byte line (tt is 64-byte aligned). */
#define TREE_W		8	/* 1 << 3: tree_fix shifts by 3 a level */
#define TREE_MAXLEV	4
_Static_assert(SIM_MAX_CLUSTERS <= 8 * 8 * 8 * 8, "TREE_MAXLEV levels");

typedef struct cstate {
	eng		*e;
	sg_cluster	 vis;		/* last published sample */
	sample		*pend;		/* taken, not yet published, FIFO */
	size_t		 pend_head, pend_n, pend_cap;
} cstate;

/* The dispatch bookkeeping reads the caches of the last SEEN distinct
 * clusters that served a session: a session's cache entry exists only on
 * an engine that admitted one of its requests (past SEEN, every candidate
 * is read: the same figures, more reads). */
#define SEEN	4

/*
 * A session: one 64-byte record (the pool is aligned), since every event
 * of a session reads most of it.  Its engine cache key and, for the
 * router, its key string "s<id>" are computed from id (a trace session's
 * from the trace) rather than stored.
 */
typedef struct sess {
	uint64_t	rng;		/* its draws; traffic table: first turn */
	uint64_t	context;	/* last prompt + last answer */
	uint32_t	turns, turn;	/* turn: the next one, 1-based */
	uint32_t	ts;		/* trace session, or NONE */
	uint32_t	id;		/* generated number; free: next free */
	int16_t		last;		/* cluster of the previous turn, -1 */
	uint8_t		cls;		/* traffic class */
	bool		seen_over;	/* more than SEEN: any may hold it */
	int16_t		seen[SEEN];	/* last clusters that served it, -1 */
	uint32_t	hint[SEEN];	/* its cache entry there (eng_req.hint) */
} sess;

_Static_assert(sizeof(sess) == 64, "a session is one cache line");
_Static_assert(SIM_MAX_CLUSTERS <= INT16_MAX, "cluster index in int16_t");
_Static_assert(SIM_MAX_CLASSES <= UINT8_MAX, "class index in uint8_t");

/*
 * A request: what every event reads (one cache line), and beside it in a
 * parallel array what only a router decision reads.  The session's next
 * turn is drawn when this one starts (think, not_before; the session's
 * draws come in the same order), so that the answer's end only writes the
 * session's record, never waits to read it.
 */
typedef struct sreq {
	double		arrive;
	double		think;		/* ms from answer to next turn */
	double		not_before;	/* trace: next turn's time, or -inf */
	uint64_t	input, output;
	uint32_t	sess;
	uint32_t	turn;		/* the session's turn it is */
	uint32_t	next_free;
	int16_t		cluster;
	int16_t		last;
	uint8_t		retries;
	uint8_t		nexcl;
	bool		counted;
	bool		last_turn;	/* the session ends with its answer */
} sreq;

_Static_assert(sizeof(sreq) <= 64, "a request is one cache line");
_Static_assert(SIM_MAX_RETRIES < UINT8_MAX, "retries in uint8_t");

typedef struct sreq_cold {
	sg_request	q;
	int32_t		excl[SIM_MAX_RETRIES + 1];
	char		id[96];
	char		key[24];	/* generated session: "s<id>" */
} sreq_cold;

typedef struct sim {
	const scenario	*sc;
	const sim_row	*row;
	const sim_traffic *tr;		/* the drawn traffic, or NULL: draw */
	sg_router	*rt;
	sg_fleet	*fleet;		/* published stats + reservations */
	sg_fleet_cursor	*view[SIM_MAX_CLASSES];	/* per model: the fleet's view */
	size_t		*cand[SIM_MAX_CLASSES];	/* per model: candidates */
	size_t		 ncand[SIM_MAX_CLASSES];
	const size_t	*view_idx;	/* fleet index of view cluster k */
	bool		*drained;
	size_t		*idlen;		/* strlen of each cluster id */
	double		*rtt;		/* each cluster's rtt_ms, compact */
	orc_cand	*oc;		/* perfect row: per cluster */
	uint32_t	*mark;		/* perfect row: served the session */
	uint32_t	*markhint;	/* ... its entry there (eng_req.hint) */
	uint32_t	 mark_stamp;
	double		 svc_sum;	/* perfect row: admission to done */
	uint64_t	 svc_n;
	cstate		*cs;
	size_t		 nc;
	double		*tt;		/* tournament: each node's time, */
	uint32_t	*ti;		/* ... its winner (NONE: empty leaf) */
	size_t		 toff[TREE_MAXLEV + 1];	/* level l at toff[l] */
	size_t		 tlevels;	/* leaves: level 0, root: tlevels */
	size_t		 troot;		/* the root's node */
	double		 now;
	uint64_t	 seq;		/* event insertion order */
	int		 fail;		/* first error */
	sg_error	*err;

	hev		*ring;		/* stats samples due, in (t, seq) order */
	size_t		 ring_head, ring_n;
	hev		*heap;		/* 4-ary min-heap; heap[-3..-1] pad */
	hev		*heapmem;	/* allocation, 64-byte aligned */
	size_t		 nheap, heapcap;
	bkt		*bk;		/* calendar: BK_N buckets of BK_MS */
	uint64_t	 bk_cur;	/* the heap holds buckets <= bk_cur */
	size_t		 bk_items;	/* in the buckets and far */
	bkt		 far;		/* past bk_cur + BK_N buckets */

	sess		*ss;		/* 64-byte aligned */
	uint32_t	 nss, sscap, ss_free;
	uint64_t	*tkey;		/* trace: each session's cache key */
	sreq		*rq;
	sreq_cold	*rqc;		/* rq's cold half, same index */
	uint32_t	 nrq, rqcap, rq_free;

	uint64_t	 arrivals_rng;
	uint64_t	 bg_rng[SIM_MAX_BG];
	uint32_t	 next_session;
	size_t		 next_trace;	/* trace: next session to start */
	uint64_t	 live_sessions;
	uint64_t	 live_bg;
	double		 bg_end;
	int		 bg_marker;

	/* results */
	sim_result	*res;
	double		*ttft;
	size_t		 nttft, ttftcap;
	double		 wait_sum;
	uint64_t	 nwait;
} sim;

#define NONE	UINT32_MAX

/* --- randomness ------------------------------------------------------------ */

static uint64_t
mix(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

uint64_t
sim_rnd(uint64_t *s)
{
	*s += 0x9e3779b97f4a7c15ULL;
	return mix(*s);
}

/* Generator state of (seed, stream, index). */
uint64_t
sim_stream_seed(uint64_t seed, uint64_t stream, uint64_t idx)
{
	return mix(seed ^ mix(stream * 0x9e3779b97f4a7c15ULL ^ mix(idx + 1)));
}

double
sim_unif(uint64_t *s)
{
	return (double)(sim_rnd(s) >> 11) * 0x1.0p-53;
}

double
sim_expo(uint64_t *s, double mean)
{
	return -log1p(-sim_unif(s)) * mean;
}

/*
 * A standard normal by the ziggurat method (Marsaglia and Tsang): the
 * density exp(-x^2/2) on x >= 0 is covered by ZIG_N strips of equal area
 * ZIG_V, strip 0 being the base rectangle [0, zx[0]] with the tail past
 * ZIG_R; strip i >= 1 spans [0, zx[i]] between heights zf[i] and
 * zf[i + 1].  One 64-bit draw picks the strip (7 bits), the sign (1 bit)
 * and x uniform in the strip (53 bits); x inside the next strip's width
 * (about 98.8% of draws) is taken at once, otherwise the wedge or the tail
 * is sampled exactly, drawing again as needed.  The tables come from
 * exp, log and sqrt once per process.
 */
#define ZIG_N	128
#define ZIG_R	3.442619855899
#define ZIG_V	9.91256303526217e-3

static double zx[ZIG_N + 1], zf[ZIG_N + 1];
static pthread_once_t zig_once = PTHREAD_ONCE_INIT;
static atomic_bool zig_ready;	/* the tables are built: no call needed */

static void
zig_init(void)
{
	size_t i;

	zf[1] = exp(-0.5 * ZIG_R * ZIG_R);
	zx[0] = ZIG_V / zf[1];
	zx[1] = ZIG_R;
	zf[0] = 1.0;	/* unused: strip 0 has no wedge */
	for (i = 1; i < ZIG_N - 1; i++) {
		zx[i + 1] = sqrt(-2.0 * log(ZIG_V / zx[i] + zf[i]));
		zf[i + 1] = exp(-0.5 * zx[i + 1] * zx[i + 1]);
	}
	zx[ZIG_N] = 0;
	zf[ZIG_N] = 1.0;
	atomic_store_explicit(&zig_ready, true, memory_order_release);
}

static double
gauss(uint64_t *s)
{
	for (;;) {
		uint64_t r = sim_rnd(s);
		size_t i = r & (ZIG_N - 1);
		double x = (double)(r >> 11) * 0x1.0p-53 * zx[i];
		double y;

		if (x < zx[i + 1])
			return r & ZIG_N ? -x : x;
		if (i == 0) {
			/* The tail past R: x = R + E1 / R, kept when a
			 * second exponential E2 has 2 E2 > (E1 / R)^2. */
			double t, e;

			do {
				t = -log1p(-sim_unif(s)) / ZIG_R;
				e = -log1p(-sim_unif(s));
			} while (2.0 * e <= t * t);
			return r & ZIG_N ? -(ZIG_R + t) : ZIG_R + t;
		}
		y = zf[i] + sim_unif(s) * (zf[i + 1] - zf[i]);
		if (y < exp(-0.5 * x * x))
			return r & ZIG_N ? -x : x;
	}
}

/* A real draw of d before clamping. */
static double
draw_real(uint64_t *s, const sim_dist *d)
{
	switch (d->kind) {
	case DIST_LOGNORMAL:
		if (!atomic_load_explicit(&zig_ready, memory_order_acquire))
			pthread_once(&zig_once, zig_init);
		return d->a * exp(d->b * gauss(s));
	case DIST_PARETO:	/* scale / U^(1/shape), U in (0, 1] */
		return d->b / pow(1.0 - sim_unif(s), 1.0 / d->a);
	case DIST_EXPONENTIAL:
		return sim_expo(s, d->a);
	default:
		return 0;
	}
}

static double
clampd(double v, uint64_t lo, uint64_t hi)
{
	if (!(v >= (double)lo))
		return (double)lo;
	if (v > (double)hi)
		return (double)hi;
	return v;
}

/* llround of v >= 0 without the call: below 2^52, v - trunc(v) is exact,
 * and halves round up as llround's do. */
static uint64_t
round_half_up(double v)
{
	uint64_t n;

	if (!(v < 0x1p52))
		return (uint64_t)llround(v);
	n = (uint64_t)v;
	return n + (v - (double)n >= 0.5);
}

uint64_t
sim_draw(uint64_t *s, const sim_dist *d)
{
	uint64_t r;

	if (d->kind != DIST_UNIFORM)
		return round_half_up(clampd(draw_real(s, d), d->min, d->max));
	if (d->min == d->max)
		return d->min;
	r = sim_rnd(s);
	return d->min + r % (d->max - d->min + 1);
}

/* Milliseconds: like sim_draw, but a real number. */
double
sim_draw_ms(uint64_t *s, const sim_dist *d)
{
	if (d->kind == DIST_UNIFORM) {
		if (d->min == d->max)
			return (double)d->min;
		return (double)d->min + sim_unif(s) * (double)(d->max -
		    d->min);
	}
	return clampd(draw_real(s, d), d->min, d->max);
}

/* The session rate at t relative to rate_per_s (the profile). */
static double
rate_factor(const sim_sessions *ss, double t)
{
	double f = 1;
	size_t i;

	if (ss->diurnal_amp > 0)
		f *= 1.0 + ss->diurnal_amp * sin(2.0 * M_PI * (t -
		    ss->diurnal_phase_ms) / ss->diurnal_period_ms);
	for (i = 0; i < ss->nbursts; i++)
		if (t >= ss->bursts[i].start_ms && t < ss->bursts[i].end_ms)
			f *= ss->bursts[i].factor;
	return f;
}

static double
rate_factor_max(const sim_sessions *ss)
{
	double f = 1.0 + ss->diurnal_amp, b = 1;
	size_t i;

	for (i = 0; i < ss->nbursts; i++)
		if (ss->bursts[i].factor > 1)
			b *= ss->bursts[i].factor;
	return f * b;
}

/*
 * Poisson arrivals at rate_per_s * rate_factor(t): without a profile one
 * exponential gap per arrival (as always); with one, candidates at the
 * peak rate, each kept with probability factor / peak (thinning).
 */
double
sim_next_arrival(const scenario *sc, uint64_t *rng, double t)
{
	const sim_sessions *ss = &sc->sessions;
	double peak, mean;

	if (ss->diurnal_amp <= 0 && ss->nbursts == 0)
		return t + sim_expo(rng, 1000.0 / ss->rate_per_s);
	peak = rate_factor_max(ss);
	mean = 1000.0 / (ss->rate_per_s * peak);
	for (;;) {
		t += sim_expo(rng, mean);
		if (t >= sc->duration_ms)
			return INFINITY;
		if (sim_unif(rng) * peak < rate_factor(ss, t))
			return t;
	}
}

uint32_t
sim_draw_class(const scenario *sc, uint32_t session)
{
	uint64_t g;
	double total = 0, u;
	size_t i;

	if (sc->nclasses <= 1)
		return 0;
	for (i = 0; i < sc->nclasses; i++)
		total += sc->classes[i].weight;
	g = sim_stream_seed(sc->seed, 4, session);
	u = sim_unif(&g) * total;
	for (i = 0; i + 1 < sc->nclasses; i++) {
		if (u < sc->classes[i].weight)
			break;
		u -= sc->classes[i].weight;
	}
	return (uint32_t)i;
}

#define rnd(s)		sim_rnd(s)
#define expo(s, m)	sim_expo(s, m)
#define stream_seed	sim_stream_seed

/* --- event heap ------------------------------------------------------------ */


static bool
ev_less(const hev *a, const hev *b)
{
	return a->t < b->t || (a->t == b->t && a->k < b->k);
}

/* Of heap items a < b, the earlier (a on a tie, which cannot happen: the
 * insertion numbers differ), by a mask rather than a branch. */
static inline size_t
ev_first(const hev *h, size_t a, size_t b)
{
	bool lt = (h[b].t < h[a].t) | ((h[b].t == h[a].t) & (h[b].k < h[a].k));

	return a ^ ((a ^ b) & -(size_t)lt);
}

/* Room for one more item; the heap starts 3 items into a 64-byte aligned
 * block, so that the children 4i+1 .. 4i+4 of any node share one line. */
static int
heap_room(sim *s)
{
	size_t n = s->heapcap ? s->heapcap * 2 : 1024;
	hev *m;

	if (s->nheap < s->heapcap)
		return 0;
	if ((m = aligned_alloc(64, (n + 4) * sizeof(*m))) == NULL)
		return SG_ENOMEM;
	if (s->nheap > 0)
		memcpy(m + 3, s->heap, s->nheap * sizeof(*m));
	free(s->heapmem);
	s->heapmem = m;
	s->heap = m + 3;
	s->heapcap = n;
	return 0;
}

static void
heap_push(sim *s, hev x)
{
	size_t i;

	if (heap_room(s) != 0) {
		s->fail = SG_ENOMEM;
		return;
	}
	i = s->nheap++;
	while (i > 0) {
		size_t p = (i - 1) / 4;

		if (!ev_less(&x, &s->heap[p]))
			break;
		s->heap[i] = s->heap[p];
		i = p;
	}
	s->heap[i] = x;
}

/* The calendar bucket of time t (t / BK_MS rounds monotonically, so a
 * later time never has an earlier bucket). */
static double
bucket_of(double t)
{
	return floor(t / BK_MS);
}

static void
bkt_add(sim *s, bkt *b, hev x)
{
	if (b->n == b->cap && sim_grow((void **)&b->v, &b->cap,
	    sizeof(*b->v), b->n + 1, 16) != 0) {
		s->fail = SG_ENOMEM;
		return;
	}
	b->v[b->n++] = x;
	s->bk_items++;
}

/*
 * An event: into the heap when its bucket is at most bk_cur (the heap's
 * events all come before the buckets'), else into its bucket, or far when
 * past the BK_N buckets ahead.  The heap stays as small as one bucket's
 * events, which keeps its pops in cache.
 */
static void
push(sim *s, double t, uint32_t type, uint32_t a)
{
	double b = bucket_of(t);
	hev x;

	if (a >> EV_ABITS != 0 || s->seq > EV_SEQ_MAX) {
		s->fail = SG_ENOMEM;	/* past the event encoding's range */
		return;
	}
	x.t = t;
	x.k = s->seq++ << (EV_ABITS + EV_TBITS) | (uint64_t)type << EV_ABITS |
	    a;
	if (b <= (double)s->bk_cur)
		heap_push(s, x);
	else if (b < (double)(s->bk_cur + BK_N))
		bkt_add(s, &s->bk[(uint64_t)b & (BK_N - 1)], x);
	else
		bkt_add(s, &s->far, x);
}

/*
 * The heap ran empty: move the next bucket holding events into it.  Every
 * BK_N buckets the far events now within reach go to their buckets (a far
 * event is at least BK_N buckets past the bk_cur it was pushed at, so it
 * is never behind bk_cur then).
 */
static void
refill(sim *s)
{
	while (s->nheap == 0 && s->bk_items > 0 && s->fail == 0) {
		bkt *b;
		size_t k, m;

		s->bk_cur++;
		if (s->bk_cur % BK_N == 0) {
			for (k = m = 0; k < s->far.n; k++) {
				hev x = s->far.v[k];
				double q = bucket_of(x.t);

				if (q < (double)(s->bk_cur + BK_N)) {
					s->bk_items--;
					bkt_add(s, &s->bk[(uint64_t)q &
					    (BK_N - 1)], x);
				} else
					s->far.v[m++] = x;
			}
			s->far.n = m;
		}
		b = &s->bk[s->bk_cur & (BK_N - 1)];
		for (k = 0; k < b->n; k++) {
			/* A turn's session is read when it comes due; asked
			 * for now, it is in cache when the loop reads it one
			 * event ahead (next_turn_sess). */
			uint64_t a = b->v[k].k & ((1u << EV_ABITS) - 1);

			if ((b->v[k].k >> EV_ABITS & ((1u << EV_TBITS) - 1)) ==
			    EV_TURN && a < s->nss)
				__builtin_prefetch(&s->ss[a]);
			heap_push(s, b->v[k]);
		}
		s->bk_items -= b->n;
		b->n = 0;
	}
}

static ev
pop(sim *s)
{
	hev top = s->heap[0], last = s->heap[--s->nheap];
	size_t i = 0, n = s->nheap;
	ev out;

	for (;;) {
		size_t c = 4 * i + 1, j, end;

		if (c >= n)
			break;
		if (c + 4 <= n)		/* four children: no branch on them */
			c = ev_first(s->heap, ev_first(s->heap, c, c + 1),
			    ev_first(s->heap, c + 2, c + 3));
		else {
			end = n;
			for (j = c + 1; j < end; j++)
				if (ev_less(&s->heap[j], &s->heap[c]))
					c = j;
		}
		if (!ev_less(&s->heap[c], &last))
			break;
		s->heap[i] = s->heap[c];
		i = c;
	}
	if (n > 0)
		s->heap[i] = last;
	out.t = top.t;
	out.type = (uint32_t)(top.k >> EV_ABITS) & ((1u << EV_TBITS) - 1);
	out.a = (uint32_t)top.k & ((1u << EV_ABITS) - 1);
	return out;
}

/*
 * A stats sample of cluster a at t.  Samples recur every stats interval at
 * staggered phases, so they come due in the order they are scheduled: they
 * wait in a ring of nc items (one per cluster) instead of the heap, with
 * the insertion number they would have had there, so that the merged order
 * is the same.  A sample that would not go last (rounding) uses the heap.
 */
static void
sched_sample(sim *s, double t, uint32_t a)
{
	hev *tail;

	if (s->ring_n == s->nc || (s->ring_n > 0 &&
	    (tail = &s->ring[(s->ring_head + s->ring_n - 1) % s->nc],
	    t < tail->t))) {
		push(s, t, EV_SAMPLE, a);
		return;
	}
	if (s->seq > EV_SEQ_MAX) {
		s->fail = SG_ENOMEM;
		return;
	}
	s->ring[(s->ring_head + s->ring_n++) % s->nc] = (hev){ t,
	    s->seq++ << (EV_ABITS + EV_TBITS) | (uint64_t)EV_SAMPLE << EV_ABITS |
	    a };
}

/* The next event of the heap (refilled from the calendar) or the ring,
 * or NULL. */
static const hev *
next_ev(sim *s, bool *from_ring)
{
	const hev *h, *r;

	if (s->nheap == 0)
		refill(s);
	h = s->nheap > 0 ? &s->heap[0] : NULL;
	r = s->ring_n > 0 ? &s->ring[s->ring_head] : NULL;

	*from_ring = r != NULL && (h == NULL || ev_less(r, h));
	return *from_ring ? r : h;
}

static ev
pop_ring(sim *s)
{
	const hev *r = &s->ring[s->ring_head];
	ev out;

	out.t = r->t;
	out.type = EV_SAMPLE;
	out.a = (uint32_t)r->k & ((1u << EV_ABITS) - 1);
	s->ring_head = (s->ring_head + 1) % s->nc;
	s->ring_n--;
	return out;
}

/* --- pools ----------------------------------------------------------------- */

static uint32_t
sess_new(sim *s)
{
	uint32_t i;

	if (s->ss_free != NONE) {
		i = s->ss_free;
		s->ss_free = s->ss[i].id;
		return i;
	}
	if (s->nss == s->sscap) {
		uint32_t n = s->sscap ? s->sscap * 2 : 1024;
		sess *p = aligned_alloc(64, (size_t)n * sizeof(*p));

		if (p == NULL)
			return NONE;
		if (s->nss > 0)
			memcpy(p, s->ss, (size_t)s->nss * sizeof(*p));
		free(s->ss);
		s->ss = p;
		s->sscap = n;
	}
	return s->nss++;
}

static void
sess_end(sim *s, uint32_t i)
{
	s->ss[i].id = s->ss_free;	/* a free session's id links the list */
	s->ss_free = i;
	s->live_sessions--;
}

static uint32_t
req_new(sim *s)
{
	uint32_t i;

	if (s->rq_free != NONE) {
		i = s->rq_free;
		s->rq_free = s->rq[i].next_free;
		return i;
	}
	if (s->nrq == s->rqcap) {
		uint32_t n = s->rqcap ? s->rqcap * 2 : 1024;
		sreq *p = realloc(s->rq, (size_t)n * sizeof(*p));
		sreq_cold *pc;

		if (p == NULL)
			return NONE;
		s->rq = p;
		if ((pc = realloc(s->rqc, (size_t)n * sizeof(*pc))) == NULL)
			return NONE;
		s->rqc = pc;
		s->rqcap = n;
	}
	return s->nrq++;
}

static void
req_free(sim *s, uint32_t i)
{
	s->rq[i].next_free = s->rq_free;
	s->rq_free = i;
}

/* --- engine event times ---------------------------------------------------- */

/*
 * The first of the eight earliest times t[0..8): a knockout of pairs, the
 * left one (lower index) kept on a tie, so the first minimum wins as in a
 * scan; three rounds instead of seven dependent steps, the round's times
 * kept in registers, the winners picked by masks (each outcome is a coin
 * toss to a branch predictor).
 */
static inline double
min2(double a, double b)
{
	return b < a ? b : a;
}

static inline unsigned
pick(unsigned a, double ta, unsigned b, double tb)
{
	return a ^ ((a ^ b) & -(unsigned)(tb < ta));
}

static inline unsigned
argmin8(const double *t)
{
	double m01 = min2(t[0], t[1]), m23 = min2(t[2], t[3]);
	double m45 = min2(t[4], t[5]), m67 = min2(t[6], t[7]);
	unsigned i01 = t[1] < t[0], i23 = 2 + (t[3] < t[2]);
	unsigned i45 = 4 + (t[5] < t[4]), i67 = 6 + (t[7] < t[6]);
	unsigned i03 = pick(i01, m01, i23, m23), i47 = pick(i45, m45, i67, m67);

	return pick(i03, min2(m01, m23), i47, min2(m45, m67));
}

/*
 * Cluster i's next event time changed: replay its path of the tree, an
 * 8-ary tournament (two levels up to 64 clusters).  A node is the first
 * earliest of its eight children: the least (time, cluster index), since
 * children are in cluster order and empty leaves (index NONE, at +inf)
 * come last, as in a scan.  At each level the changed child either beats
 * the node's winner (it becomes the winner), or held the winner and fell
 * back (the eight are scanned), or neither (the node, and every one above
 * it, stays: the replay stops).
 */
static void
tree_fix(sim *s, size_t i)
{
	double *tt = s->tt;
	uint32_t *ti = s->ti;
	size_t p = i, l, sh = 0;	/* a child holds 1 << sh leaves */

	for (l = 1; l <= s->tlevels; l++) {
		size_t ch = s->toff[l - 1] + p, c, up;
		double t = tt[ch];

		up = s->toff[l] + p / TREE_W;
		if (t < tt[up] || (t == tt[up] && ti[ch] <= ti[up]))
			c = ch;
		else if (ti[up] != NONE && ti[up] >> sh == p) {
			c = s->toff[l - 1] + p / TREE_W * TREE_W;
			c += argmin8(&tt[c]);
		} else
			return;
		if (ti[up] == ti[c] && tt[up] == tt[c])
			return;
		tt[up] = tt[c];
		ti[up] = ti[c];
		p /= TREE_W;
		sh += 3;
	}
}

/*
 * tree_fix for two levels (9 to 64 clusters, a fleet): the same nodes,
 * unrolled, the offsets constants (leaves at 0, groups at 64, the root at
 * 72).  Each level keeps the node when the changed child neither beats it
 * nor held its winner, takes the child when it beats it (ties: the lower
 * index), and otherwise scans the group.
 */
static inline bool
tree_step(double *tt, uint32_t *ti, size_t ch, size_t grp, size_t up,
    bool held)
{
	double t = tt[ch];
	size_t c;

	if (t < tt[up] || (t == tt[up] && ti[ch] <= ti[up]))
		c = ch;
	else if (held)
		c = grp + argmin8(&tt[grp]);
	else
		return false;
	if (ti[up] == ti[c] && tt[up] == tt[c])
		return false;
	tt[up] = tt[c];
	ti[up] = ti[c];
	return true;
}

static void
tree_fix2(sim *s, size_t i)
{
	double *tt = s->tt;
	uint32_t *ti = s->ti;
	size_t g = i / TREE_W;

	if (!tree_step(tt, ti, i, g * TREE_W, 64 + g, ti[64 + g] == i))
		return;
	(void)tree_step(tt, ti, 64 + g, 64, 72, ti[72] != NONE &&
	    ti[72] / TREE_W == g);
}

static void
set_next(sim *s, size_t i)
{
	double t = eng_next_event(s->cs[i].e);

	if (t == s->tt[i])
		return;
	s->tt[i] = t;
	if (s->tlevels == 2)
		tree_fix2(s, i);
	else
		tree_fix(s, i);
}

/* --- stats and reservations ------------------------------------------------ */

/* Grow *p (*cap elements of elem bytes) to hold want, doubling from first. */
int
sim_grow(void **p, size_t *cap, size_t elem, size_t want, size_t first)
{
	size_t n = *cap ? *cap : first;
	void *q;

	if (want <= *cap)
		return 0;
	while (n < want)
		n *= 2;
	if ((q = realloc(*p, n * elem)) == NULL)
		return SG_ENOMEM;
	*p = q;
	*cap = n;
	return 0;
}

static void
reserve(sim *s, size_t i, uint64_t tokens, uint32_t prio, double t)
{
	if (sg_fleet_reserve(s->fleet, i, tokens, prio, t) == 0)
		s->fail = SG_ENOMEM;
}

/* Make sample the visible stats of cluster i, at time t. */
static void
publish(sim *s, size_t i, const sample *smp, double t)
{
	cstate *c = &s->cs[i];

	/* sg-proxy(8): a publication clears the cluster's reservations, which
	 * are assumed reflected, even when the sample is stale and was
	 * taken before them: so the fleet is told the sample covers every
	 * reservation made up to the publication (t).  (Reservations made
	 * at the same instant as the publication but after it would
	 * survive; none can be made after a publication and before it is
	 * applied.) */
	c->vis = smp->c;
	if (sg_fleet_publish(s->fleet, i, &c->vis, t) != 0)
		s->fail = SG_EINVAL;
}

static void
take_sample(sim *s, size_t i, double t)
{
	cstate *c = &s->cs[i];
	sample smp;

	eng_advance(c->e, t);
	set_next(s, i);
	if (s->sc->stats_staleness_ms <= 0) {
		/* Seen at once: sampled straight into the visible stats (their
		 * id and rtt_ms stay), no copies. */
		eng_cluster(c->e, t, &c->vis);
		if (sg_fleet_publish(s->fleet, i, &c->vis, t) != 0)
			s->fail = SG_EINVAL;
		return;
	}
	smp.c = c->vis;
	eng_cluster(c->e, t, &smp.c);
	if (c->pend_head > 0 && c->pend_head == c->pend_n)
		c->pend_head = c->pend_n = 0;
	if (sim_grow((void **)&c->pend, &c->pend_cap, sizeof(*c->pend),
	    c->pend_n + 1, 16) != 0) {
		s->fail = SG_ENOMEM;
		return;
	}
	c->pend[c->pend_n++] = smp;
	push(s, t + s->sc->stats_staleness_ms, EV_VISIBLE, (uint32_t)i);
}

static bool
busy(const sim *s, double t)
{
	return t < s->sc->duration_ms || t < s->bg_end ||
	    s->live_sessions > 0 || s->live_bg > 0;
}

/* The candidate list of every model: serving it and not drained. */
static void
build_candidates(sim *s)
{
	const scenario *sc = s->sc;
	size_t m, i;

	for (m = 0; m < sc->nmodels; m++) {
		s->ncand[m] = 0;
		for (i = 0; i < s->nc; i++)
			if ((sc->clusters[i].models >> m & 1) && !s->drained[i])
				s->cand[m][s->ncand[m]++] = i;
	}
}

static void
engine_cb(void *ctx, uint32_t handle, int event, const eng_info *info);

/* Drain event: a = 2 * drain + (0 start, 1 end). */
static void
drain_event(sim *s, uint32_t a, double t)
{
	const sim_drain *d = &s->sc->drains[a / 2];
	cstate *c = &s->cs[d->cluster];

	if (a % 2 == 0) {
		s->drained[d->cluster] = true;
		build_candidates(s);
		return;
	}
	s->drained[d->cluster] = false;
	/* A restart empties the cache: a new engine, if nothing is left on
	 * the old one (a drain longer than the longest request). */
	eng_advance(c->e, t);
	if (d->restart && eng_running(c->e) == 0 && eng_waiting(c->e) == 0) {
		eng *e;
		sample smp;

		if (eng_new(&e, &s->sc->clusters[d->cluster].eng, engine_cb, s,
		    NULL) != 0) {
			s->fail = SG_ENOMEM;
			return;
		}
		eng_advance(e, t);
		eng_free(c->e);
		c->e = e;
		smp.c = c->vis;
		eng_cluster(e, t, &smp.c);
		publish(s, d->cluster, &smp, t);
	}
	set_next(s, d->cluster);
	build_candidates(s);
}

/* --- requests ---------------------------------------------------------------- */

/* Engine cache key of generated session id. */
static uint64_t
gen_key(uint64_t seed, uint32_t id)
{
	return mix(seed ^ mix((uint64_t)id + 1)) | 1;
}

/* A session's engine cache key. */
static uint64_t
sess_ckey(const sim *s, const sess *ss)
{
	return ss->ts != NONE ? s->tkey[ss->ts] : gen_key(s->sc->seed, ss->id);
}

/* Decimal digits of v into p (no NUL); returns the length. */
static size_t
utoa(uint64_t v, char *p)
{
	static const char dd[] =
	    "00010203040506070809101112131415161718192021222324"
	    "25262728293031323334353637383940414243444546474849"
	    "50515253545556575859606162636465666768697071727374"
	    "75767778798081828384858687888990919293949596979899";
	char tmp[24], *q = tmp + sizeof(tmp);
	size_t n;

	/* Two digits a division, from the right. */
	while (v >= 100) {
		unsigned d = (unsigned)(v % 100) * 2;

		v /= 100;
		*--q = dd[d + 1];
		*--q = dd[d];
	}
	if (v >= 10) {
		*--q = dd[v * 2 + 1];
		*--q = dd[v * 2];
	} else
		*--q = (char)('0' + v);
	n = (size_t)(tmp + sizeof(tmp) - q);
	memcpy(p, q, n);
	return n;
}

static void
end_request(sim *s, uint32_t ri, bool end_session)
{
	if (end_session)
		sess_end(s, s->rq[ri].sess);
	req_free(s, ri);
}

static bool
excluded(const sim *s, const sreq *r, size_t i)
{
	const int32_t *excl;
	uint32_t k;

	if (r->nexcl == 0)
		return false;
	excl = s->rqc[r - s->rq].excl;
	for (k = 0; k < r->nexcl; k++)
		if (excl[k] == (int32_t)i)
			return true;
	return false;
}

/* Candidate o is cluster i read exactly at t, holding cached tokens of the
 * prompt; svc is the row's mean admission-to-done time so far. */
static void
perfect_cand(const sim *s, orc_cand *o, size_t i, double t, uint64_t cached,
    double svc)
{
	eng_load l;

	eng_load_get(s->cs[i].e, t, &l);
	o->eligible = true;
	o->cached = cached;
	o->backlog = l.backlog;
	o->tps = l.tps;
	o->rtt_ms = s->rtt[i];
	o->running = l.running;
	o->slots = l.slots;
	o->kv_free = l.kv_free;
	o->slot_wait_ms = 0;
	if (o->running >= o->slots && o->slots > 0)
		o->slot_wait_ms = (double)(o->running - o->slots + 1) *
		    svc / (double)o->slots;
}

/*
 * The perfect-knowledge decision: every candidate engine read exactly at
 * t.  A slot wait is estimated from the row's mean admission-to-done time
 * so far: (running - slots + 1) requests ahead, slots at a time.
 *
 * Under KV first the clusters that served the session (the only ones that
 * can hold its prefix) are asked first: when one of them holding some of
 * the prompt has capacity, it beats every other candidate (they hold
 * none), and when one holds some but none of those has capacity the
 * patience rule waits whatever the others are; only otherwise is every
 * candidate read (oracle.h: a choice among a subset).
 */
static void
decide_perfect(sim *s, const sreq *r, double t, size_t m, sg_decision *d)
{
	const size_t *idx = s->cand[m];
	size_t k, j, n = s->ncand[m], hk[SEEN], nh = 0;
	double svc = s->svc_n > 0 ? s->svc_sum / (double)s->svc_n : 0;
	const sess *ss = &s->ss[r->sess];
	eng_req q = { .key = sess_ckey(s, ss), .input_tokens = r->input };
	uint32_t stamp = ++s->mark_stamp;
	uint64_t hc[SEEN], best_c = 0, most_c = 0;
	bool kvf = s->row->objective == ORC_KV_FIRST;
	double wait = kvf ? s->row->patience_ms : 0;
	long best = -1, most = -1;

	/* Only the clusters that served the session can hold its entry:
	 * mark them, so a candidate's check is one load. */
	if (stamp == 0) {
		memset(s->mark, 0, s->nc * sizeof(*s->mark));
		stamp = s->mark_stamp = 1;
	}
	for (k = 0; k < SEEN && ss->seen[k] >= 0; k++) {
		s->mark[ss->seen[k]] = stamp;
		s->markhint[ss->seen[k]] = ss->hint[k];
	}
	memset(d, 0, sizeof(*d));
	/* The marked candidates' prefixes, in candidate order. */
	for (k = 0; k < n && !ss->seen_over; k++) {
		size_t i = idx[k];

		if (s->mark[i] != stamp || excluded(s, r, i))
			continue;
		q.hint = s->markhint[i];
		hc[nh] = eng_cached_prefix(s->cs[i].e, &q);
		hk[nh++] = k;
	}
	if (kvf && nh > 0) {
		bool held;

		for (j = 0; j < nh; j++)
			perfect_cand(s, &s->oc[j], idx[hk[j]], t, hc[j], svc);
		held = orc_pick_held(s->oc, nh, r->input, s->row->max_queued,
		    &best, &most);
		most_c = most >= 0 ? s->oc[most].cached : 0;
		if (held) {
			best_c = s->oc[best].cached;
			best = (long)hk[best];
			goto decided;
		}
		if (most_c > 0 && t - r->arrive < wait)
			goto decided;		/* best holds none: wait */
	}
	for (k = 0, j = 0; k < n; k++) {
		size_t i = idx[k];
		uint64_t cached = 0;

		if (excluded(s, r, i)) {
			s->oc[k].eligible = false;
			continue;
		}
		if (j < nh && hk[j] == k)
			cached = hc[j++];
		else if (ss->seen_over) {
			q.hint = s->mark[i] == stamp ? s->markhint[i] : 0;
			cached = eng_cached_prefix(s->cs[i].e, &q);
		}
		perfect_cand(s, &s->oc[k], i, t, cached, svc);
	}
	best = orc_pick_most(s->oc, n, r->input, s->row->max_queued,
	    s->row->objective, &most);
	best_c = best >= 0 ? s->oc[best].cached : 0;
	most_c = most >= 0 ? s->oc[most].cached : 0;
decided:
	/* Patience (KV first): while the cluster holding the most of the
	 * prompt is full, wait for it (for ever, unless the scenario sets
	 * algorithms.perfect.wait_ms): the bound never gives a cached prefix
	 * up to load. */
	if (kvf && most_c > 0 && (best < 0 || best_c < most_c) &&
	    t - r->arrive < wait) {
		d->kind = SG_DECIDE_WAIT;
		d->recheck_at_ms = t - r->arrive + s->sc->recheck_cap_ms;
		return;
	}
	if (best >= 0) {
		d->kind = SG_DECIDE_SELECT;
		d->index = (size_t)best;
	} else if (s->sc->has_max_wait && t - r->arrive <
	    (double)s->sc->max_wait_ms) {
		d->kind = SG_DECIDE_WAIT;
		d->recheck_at_ms = t - r->arrive + s->sc->recheck_cap_ms;
	} else
		d->kind = SG_DECIDE_REJECT;
}

/* One decision for request ri at t, on the candidates of model m: the
 * oracle's or the router's.  d->index is a position in s->cand[m]. */
static int
decide(sim *s, uint32_t ri, double t, size_t m, sg_decision *d)
{
	const scenario *sc = s->sc;
	const sim_class *cl;
	const char *excl[SIM_MAX_RETRIES + 1];
	const sg_snapshot *snap;
	sg_error e;
	sreq *r = &s->rq[ri];
	sreq_cold *cold = &s->rqc[ri];
	uint32_t k;
	int rc;

	s->res->decisions++;
	if (s->row->alg == SIM_ALG_PERFECT) {
		decide_perfect(s, r, t, m, d);
		return 0;
	}
	cl = &sc->classes[s->ss[r->sess].cls];
	for (k = 0; k < r->nexcl; k++)
		excl[k] = sc->clusters[cold->excl[k]].id;
	cold->q.request_id = cold->id;
	cold->q.routing_key = cl->has_routing_key ? cl->routing_key : NULL;
	cold->q.model = cl->model;
	cold->q.cache_affinity_key = s->ss[r->sess].ts != NONE ?
	    sc->trace.sess[s->ss[r->sess].ts].id : cold->key;
	cold->q.last_cluster_id = r->last >= 0 ? sc->clusters[r->last].id :
	    NULL;
	cold->q.last_cluster_id_len = r->last >= 0 ? s->idlen[r->last] : 0;
	cold->q.excluded = excl;
	cold->q.nexcluded = r->nexcl;
	cold->q.input_tokens = r->input;
	cold->q.priority = sc->sessions.priority;
	cold->q.has_max_wait = sc->has_max_wait;
	cold->q.max_wait_ms = sc->max_wait_ms;
	if ((rc = sg_fleet_sync(s->fleet, s->cand[m], s->ncand[m], t,
	    s->view[m], &snap, &s->view_idx, &e)) != 0) {
		s->fail = rc;
		return sg_seterr(s->err, rc, "row %s: %s", s->row->name,
		    e.text);
	}
	rc = sg_router_decide(s->rt, snap, &cold->q, t - r->arrive, d, &e);
	cold->q.excluded = NULL;
	if (rc != 0) {
		s->fail = SG_EINVAL;
		return sg_seterr(s->err, SG_EINVAL, "row %s: request %s: %s",
		    s->row->name, cold->id, e.text);
	}
	/* The view holds every candidate (never stale here): view index k
	 * is candidate k. */
	return 0;
}

/* Cluster i served the session: most recent first, distinct. */
static void
seen_add(sess *ss, size_t i)
{
	size_t j, k;
	uint32_t hint;

	for (j = 0; j < SEEN - 1 && ss->seen[j] >= 0 &&
	    (size_t)ss->seen[j] != i; j++)
		;
	if (j == SEEN - 1 && ss->seen[j] >= 0 && (size_t)ss->seen[j] != i)
		ss->seen_over = true;
	hint = ss->seen[j] >= 0 && (size_t)ss->seen[j] == i ? ss->hint[j] : 0;
	for (k = j; k > 0; k--) {
		ss->seen[k] = ss->seen[k - 1];
		ss->hint[k] = ss->hint[k - 1];
	}
	ss->seen[0] = (int16_t)i;
	ss->hint[0] = hint;
}

/* The session's remembered entry on cluster i, or 0. */
static uint32_t
seen_hint(const sess *ss, size_t i)
{
	size_t k;

	for (k = 0; k < SEEN && ss->seen[k] >= 0; k++)
		if ((size_t)ss->seen[k] == i)
			return ss->hint[k];
	return 0;
}

/*
 * The longest prefix of r's prompt cached on any cluster r may be sent to
 * at this instant (a candidate of model m, not excluded): only the clusters
 * that served its session hold its entry, unless it has seen more than
 * SEEN of them.  *took receives the prefix on cluster chosen (left alone
 * when chosen cannot hold the entry, or is not a candidate).
 */
static uint64_t
best_prefix(const sim *s, const sreq *r, size_t m, const eng_req *q,
    size_t chosen, uint64_t *took)
{
	const sess *ss = &s->ss[r->sess];
	uint64_t best = 0, v;
	size_t k, n = ss->seen_over ? s->ncand[m] : SEEN;
	eng_req qh = *q;

	for (k = 0; k < n; k++) {
		size_t i;

		if (ss->seen_over)
			i = s->cand[m][k];
		else if (ss->seen[k] < 0)
			break;
		else if (s->drained[i = (size_t)ss->seen[k]])
			continue;
		if (excluded(s, r, i))
			continue;
		qh.hint = ss->seen_over ? seen_hint(ss, i) : ss->hint[k];
		if ((v = eng_cached_prefix(s->cs[i].e, &qh)) > best)
			best = v;
		if (i == chosen)
			*took = v;
	}
	return best;
}

static void
route(sim *s, uint32_t ri, double t)
{
	const scenario *sc = s->sc;
	size_t m;
	sg_decision d;
	sreq *r;
	int rc;

	for (;;) {
		r = &s->rq[ri];
		m = sc->classes[s->ss[r->sess].cls].model_idx;
		if (decide(s, ri, t, m, &d) != 0)
			return;
		if (d.kind == SG_DECIDE_WAIT) {
			double next = r->arrive + d.recheck_at_ms;

			if (next > t + sc->recheck_cap_ms)
				next = t + sc->recheck_cap_ms;
			if (!(next > t))
				next = t + 0.001;
			push(s, next, EV_ROUTE, ri);
			return;
		}
		if (d.kind == SG_DECIDE_SELECT) {
			size_t i = s->row->alg == SIM_ALG_PERFECT ?
			    s->cand[m][d.index] : s->view_idx[d.index];
			eng_req q = {
				.key = sess_ckey(s, &s->ss[r->sess]),
				.input_tokens = r->input,
				.output_tokens = r->output,
				.udata = (void *)(uintptr_t)(ri + 1),
				.hint = seen_hint(&s->ss[r->sess], i),
			};
			uint64_t took = 0, best = 0;
			uint32_t h;

			if (r->counted)
				best = best_prefix(s, r, m, &q, i, &took);
			if (s->row->alg != SIM_ALG_PERFECT)
				reserve(s, i, r->input, sc->sessions.priority,
				    t);
			rc = eng_submit(s->cs[i].e, t, &q, &h);
			set_next(s, i);
			r = &s->rq[ri];
			if (rc == 0) {
				seen_add(&s->ss[r->sess], i);
				r->cluster = (int16_t)i;
				if (r->counted) {
					s->res->took_prefix += (double)took;
					s->res->best_prefix += (double)best;
					s->wait_sum += t - r->arrive;
					s->nwait++;
					if (r->last >= 0) {
						s->res->returning++;
						if (r->last != (int16_t)i)
							s->res->left++;
					}
				}
				return;
			}
			if (rc != ENG_EFULL) {
				s->fail = SG_ENOMEM;
				return;
			}
			/* A retryable refusal: exclude the cluster, decide
			 * again within the retry budget. */
			if (r->counted)
				s->res->retries++;
			if (r->retries < sc->retries) {
				r->retries++;
				s->rqc[ri].excl[r->nexcl++] = (int32_t)i;
				continue;
			}
		}
		/* Rejected, or retries exhausted: the session gives up. */
		if (r->counted)
			s->res->rejected++;
		end_request(s, ri, true);
		return;
	}
}

/* The next turn's sizes: drawn, or the trace's. */
static void
turn_sizes(sim *s, sess *ss, uint64_t *in, uint64_t *out)
{
	const scenario *sc = s->sc;

	if (ss->ts != NONE) {
		const sim_tsess *ts = &sc->trace.sess[ss->ts];
		const sim_treq *tr = &sc->trace.req[ts->first + ss->turn - 1];

		*in = tr->input;
		*out = tr->output;
		return;
	}
	if (s->tr != NULL) {
		/* The same draws, made once (ss->rng: its first turn). */
		const sim_tturn *tt = &s->tr->turn[ss->rng + ss->turn - 1];

		*in = ss->turn == 1 ? tt->in : ss->context + tt->in;
		*out = tt->out;
	} else {
		*in = ss->turn == 1 ? sim_draw(&ss->rng,
		    &sc->sessions.first_input) : ss->context +
		    sim_draw(&ss->rng, &sc->sessions.turn_input);
		*out = sim_draw(&ss->rng, &sc->sessions.output);
	}
	if (*in > sc->sessions.max_context)
		*in = sc->sessions.max_context;
	if (*in == 0)
		*in = 1;
}

/*
 * What the router reads of a request beside its numbers: its id
 * "<session>-t<turn>" (unique, and the same in every row) and the session
 * key ("s<id>", or the trace's id).  The perfect row needs neither.
 */
static void
name_request(const sim *s, sreq_cold *cold, const sess *ss)
{
	const char *key;
	size_t n;

	sg_request_init(&cold->q);
	if (ss->ts != NONE) {
		key = s->sc->trace.sess[ss->ts].id;
		n = strlen(key);
	} else {
		cold->key[0] = 's';
		n = 1 + utoa(ss->id, cold->key + 1);
		cold->key[n] = '\0';
		key = cold->key;
	}
	memcpy(cold->id, key, n);
	cold->id[n++] = '-';
	cold->id[n++] = 't';
	n += utoa(ss->turn, cold->id + n);
	cold->id[n] = '\0';
}

/*
 * What the session's next turn needs from its answer's end, drawn as its
 * turn starts: whether there is one, the think time (the session's next
 * draw, after this turn's sizes, as when it was drawn at the answer's end)
 * or the trace's think time and send time.
 */
static void
next_turn(sim *s, sess *ss, sreq *r)
{
	const sim_treq *tr;

	r->last_turn = ss->turn >= ss->turns;
	r->think = 0;
	r->not_before = -INFINITY;
	if (r->last_turn)
		return;
	if (ss->ts == NONE) {
		r->think = s->tr != NULL ? s->tr->turn[ss->rng + ss->turn -
		    1].think : sim_draw_ms(&ss->rng, &s->sc->sessions.think);
		return;
	}
	tr = &s->sc->trace.req[s->sc->trace.sess[ss->ts].first + ss->turn];
	r->think = tr->think_ms;
	r->not_before = tr->t_ms;
}

static void
start_turn(sim *s, uint32_t si, double t)
{
	const scenario *sc = s->sc;
	sess *ss = &s->ss[si];
	uint64_t in, out;
	uint32_t ri, k;
	sreq *r;

	if (t >= sc->duration_ms) {
		sess_end(s, si);
		return;
	}
	/* The decision and the dispatch read the session's cache entry on
	 * the clusters that served it: fetched while the turn is drawn. */
	if (ss->seen[0] >= 0) {
		eng_req q = { .key = sess_ckey(s, ss) };

		for (k = 0; k < SEEN && ss->seen[k] >= 0; k++) {
			q.hint = ss->hint[k];
			eng_prefetch(s->cs[ss->seen[k]].e, &q);
		}
	}
	turn_sizes(s, ss, &in, &out);
	if ((ri = req_new(s)) == NONE) {
		s->fail = SG_ENOMEM;
		return;
	}
	ss = &s->ss[si];
	r = &s->rq[ri];
	memset(r, 0, sizeof(*r));
	r->arrive = t;
	r->input = in;
	r->output = out;
	r->sess = si;
	r->turn = ss->turn;
	r->cluster = -1;
	r->last = ss->last;
	r->counted = t >= sc->warmup_ms;
	next_turn(s, ss, r);
	if (s->row->alg != SIM_ALG_PERFECT)
		name_request(s, &s->rqc[ri], ss);
	s->res->simulated++;
	if (r->counted)
		s->res->requests++;
	route(s, ri, t);
}

/* Engine cache key of a session id. */
static uint64_t
key_of(const char *id)
{
	return mix(eng_fnv1a(ENG_FNV_OFFSET, id, strlen(id))) | 1;
}

static void
new_session(sim *s, double t)
{
	const scenario *sc = s->sc;
	uint32_t si, id = s->next_session++;
	sess *ss;

	if ((si = sess_new(s)) == NONE) {
		s->fail = SG_ENOMEM;
		return;
	}
	ss = &s->ss[si];
	ss->context = 0;
	ss->turn = 1;
	ss->last = -1;
	ss->ts = NONE;
	memset(ss->seen, 0xff, sizeof(ss->seen));
	memset(ss->hint, 0, sizeof(ss->hint));
	ss->seen_over = false;
	if (sc->has_trace) {
		const sim_tsess *ts = &sc->trace.sess[s->next_trace];

		ss->ts = (uint32_t)s->next_trace++;
		ss->rng = 0;
		ss->id = 0;
		ss->turns = (uint32_t)ts->n;
		ss->cls = (uint8_t)sc->trace.req[ts->first].cls;
	} else if (s->tr != NULL) {
		/* ss->rng holds the index of its first turn in the table. */
		ss->rng = s->tr->first[id];
		ss->id = id;
		ss->turns = s->tr->first[id + 1] - s->tr->first[id];
		ss->cls = s->tr->cls[id];
	} else {
		ss->rng = stream_seed(sc->seed, 1, id);
		ss->id = id;
		ss->turns = (uint32_t)sim_draw(&ss->rng, &sc->sessions.turns);
		ss->cls = (uint8_t)sim_draw_class(sc, id);
	}
	s->live_sessions++;
	start_turn(s, si, t);
}

/* Engine callback: the first token of a session request. */
static void
engine_cb(void *ctx, uint32_t handle, int event, const eng_info *info)
{
	sim *s = ctx;
	uint32_t ri;
	double next;
	sreq *r;
	sess *ss;

	(void)handle;
	if (info->udata == &s->bg_marker) {
		if (event == ENG_DONE)
			s->live_bg--;
		return;
	}
	ri = (uint32_t)((uintptr_t)info->udata - 1);
	r = &s->rq[ri];
	if (event == ENG_FIRST_TOKEN) {
		double ttft;

		if (!r->counted)
			return;
		ttft = info->first_token_ms - r->arrive + s->rtt[r->cluster];
		s->res->completed++;
		if (ttft <= s->sc->slo_ttft_ms)
			s->res->good++;
		s->res->input_tokens += (double)info->input_tokens;
		s->res->reused_tokens += (double)info->reused_tokens;
		if (s->nttft == s->ttftcap && sim_grow((void **)&s->ttft,
		    &s->ttftcap, sizeof(*s->ttft), s->nttft + 1, 16) != 0) {
			s->fail = SG_ENOMEM;
			return;
		}
		s->ttft[s->nttft++] = ttft;
		return;
	}
	/* Done: the session thinks, then starts its next turn. */
	s->svc_sum += info->done_ms - info->admit_ms;
	s->svc_n++;
	/* The session's record is only written here (it is seldom in
	 * cache): remember its cache entry on this engine, found at
	 * admission (the engine is its most recent cluster, seen[0], set
	 * when the request was submitted); the first token leaves the
	 * record alone. */
	ss = &s->ss[r->sess];
	ss->hint[0] = info->entry;
	ss->context = r->input + r->output;
	ss->last = r->cluster;
	ss->turn = r->turn + 1;
	next = info->done_ms + r->think;
	if (next < r->not_before)
		next = r->not_before;
	/* A turn due at or past the end would end the session when it came
	 * due (start_turn); it ends now instead, so that the run's tail is
	 * not spent waiting for thinking sessions (no event is added; the
	 * others keep their order). */
	if (r->last_turn || next >= s->sc->duration_ms)
		end_request(s, ri, true);
	else {
		push(s, next, EV_TURN, r->sess);
		end_request(s, ri, false);
	}
}

static void
background(sim *s, uint32_t b, double t)
{
	const sim_bg *bg = &s->sc->bg[b];
	uint64_t *g = &s->bg_rng[b];
	eng_req q;
	uint32_t h;
	cstate *c;

	if (t >= bg->end_ms)
		return;
	q.key = bg->cache ? (rnd(g) | 1) : 0;
	q.blocks = NULL;
	q.nblocks = 0;
	q.hint = 0;
	q.input_tokens = sim_draw(g, &bg->input);
	q.output_tokens = sim_draw(g, &bg->output);
	q.udata = &s->bg_marker;
	c = &s->cs[bg->cluster];
	if (eng_submit(c->e, t, &q, &h) == 0) {
		s->live_bg++;
		s->res->background++;
	}
	set_next(s, bg->cluster);
	push(s, t + expo(g, 1000.0 / bg->rate_per_s), EV_BG, b);
}

/* --- percentiles ----------------------------------------------------------- */

/* The k-th smallest (0-based) of a[0..n), reordering a; deterministic. */
static double
select_kth(double *a, size_t n, size_t k)
{
	size_t lo = 0, hi = n - 1;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2, i = lo, j = hi;
		double p, x;

		/* Median of three as the pivot. */
		if (a[mid] < a[lo]) { x = a[mid]; a[mid] = a[lo]; a[lo] = x; }
		if (a[hi] < a[lo]) { x = a[hi]; a[hi] = a[lo]; a[lo] = x; }
		if (a[hi] < a[mid]) { x = a[hi]; a[hi] = a[mid]; a[mid] = x; }
		p = a[mid];
		while (i <= j) {
			while (a[i] < p)
				i++;
			while (p < a[j])
				j--;
			if (i <= j) {
				x = a[i];
				a[i] = a[j];
				a[j] = x;
				i++;
				if (j == 0)
					break;
				j--;
			}
		}
		if (k <= j)
			hi = j;
		else if (k >= i)
			lo = i;
		else
			return a[k];
	}
	return a[k];
}

/* Percentile: the value at rank ceil(q * n), 1-based, clamped. */
static double
percentile(double *a, size_t n, double q)
{
	double r;
	size_t k;

	if (n == 0)
		return 0;
	r = ceil(q * (double)n);
	k = r < 1 ? 1 : (size_t)r;
	if (k > n)
		k = n;
	return select_kth(a, n, k - 1);
}

/* --- the run --------------------------------------------------------------- */

static void
sim_free(sim *s)
{
	size_t i;

	if (s->cs != NULL)
		for (i = 0; i < s->nc; i++) {
			eng_free(s->cs[i].e);
			free(s->cs[i].pend);
		}
	free(s->cs);
	free(s->tt);
	free(s->ti);
	free(s->heapmem);
	free(s->ss);
	free(s->tkey);
	free(s->rq);
	free(s->rqc);
	free(s->ttft);
	sg_router_free(s->rt);
	for (i = 0; i < SIM_MAX_CLASSES; i++) {
		free(s->cand[i]);
		sg_fleet_cursor_free(s->view[i]);
	}
	sg_fleet_free(s->fleet);
	free(s->drained);
	free(s->idlen);
	free(s->rtt);
	free(s->oc);
	free(s->mark);
	free(s->markhint);
	free(s->ring);
	if (s->bk != NULL)
		for (i = 0; i < BK_N; i++)
			free(s->bk[i].v);
	free(s->bk);
	free(s->far.v);
}

static int
setup_alloc(sim *s)
{
	const scenario *sc = s->sc;
	size_t i, k, l, w;

	s->nc = sc->nclusters;
	for (s->tlevels = 1, w = TREE_W; w < s->nc; s->tlevels++)
		w *= TREE_W;
	for (k = 0, l = 0; l <= s->tlevels; l++) {
		s->toff[l] = k;
		k += w;
		w /= TREE_W;
	}
	/* Every level below the root is whole groups of eight, so each
	 * group starts a line; the root's level is padded to a group. */
	k = (k + TREE_W - 1) / TREE_W * TREE_W;
	if ((s->cs = calloc(s->nc, sizeof(*s->cs))) == NULL ||
	    (s->tt = aligned_alloc(64, k * sizeof(*s->tt))) == NULL ||
	    (s->ti = malloc(k * sizeof(*s->ti))) == NULL ||
	    (s->drained = calloc(s->nc, sizeof(*s->drained))) == NULL ||
	    (s->oc = calloc(s->nc, sizeof(*s->oc))) == NULL ||
	    (s->mark = calloc(s->nc, sizeof(*s->mark))) == NULL ||
	    (s->markhint = calloc(s->nc, sizeof(*s->markhint))) == NULL ||
	    (s->ring = calloc(s->nc, sizeof(*s->ring))) == NULL ||
	    (s->bk = calloc(BK_N, sizeof(*s->bk))) == NULL ||
	    (s->idlen = calloc(s->nc, sizeof(*s->idlen))) == NULL ||
	    (s->rtt = calloc(s->nc, sizeof(*s->rtt))) == NULL)
		return sg_seterr(s->err, SG_ENOMEM, "out of memory");
	for (i = 0; i < s->nc; i++) {
		s->idlen[i] = strlen(sc->clusters[i].id);
		s->rtt[i] = sc->clusters[i].rtt_ms;
	}
	for (i = 0; i < sc->nmodels; i++)
		if ((s->cand[i] = calloc(s->nc, sizeof(size_t))) == NULL)
			return sg_seterr(s->err, SG_ENOMEM, "out of memory");
	s->troot = s->toff[s->tlevels];
	for (i = 0; i < k; i++) {
		s->tt[i] = INFINITY;
		s->ti[i] = NONE;
	}
	return 0;
}

static int
setup(sim *s)
{
	const scenario *sc = s->sc;
	sg_error e;
	size_t i;
	int rc;

	s->ss_free = s->rq_free = NONE;
	if ((rc = setup_alloc(s)) != 0)
		return rc;
	/* The simulated router never ages stats out: staleness is modelled
	 * by the publication delay, and every cluster is a candidate. */
	if ((rc = sg_fleet_new(&s->fleet, UINT64_MAX, &e)) != 0)
		return sg_seterr(s->err, rc, "%s", e.text);
	if (s->row->alg != SIM_ALG_PERFECT && (rc = sg_router_new(&s->rt,
	    s->row->conf, sc->seed, &e)) != 0)
		return sg_seterr(s->err, SG_EINVAL, "row %s: %s", s->row->name,
		    e.text);
	for (i = 0; i < s->nc; i++) {
		cstate *c = &s->cs[i];
		sample smp;

		if (eng_new(&c->e, &sc->clusters[i].eng, engine_cb, s,
		    NULL) != 0)
			return sg_seterr(s->err, SG_ENOMEM, "out of memory");
		sg_cluster_init(&c->vis, sc->clusters[i].id,
		    strlen(sc->clusters[i].id));
		c->vis.rtt_ms = sc->clusters[i].rtt_ms;
		if ((rc = sg_fleet_add(s->fleet, c->vis.id, c->vis.id_len,
		    NULL, &e)) != 0)
			return sg_seterr(s->err, rc, "%s", e.text);
		/* The router starts with every cluster idle; samples follow
		 * at staggered phases. */
		smp.c = c->vis;
		eng_cluster(c->e, 0, &smp.c);
		publish(s, i, &smp, 0);
		s->ti[i] = (uint32_t)i;
		s->tt[i] = eng_next_event(c->e);
		tree_fix(s, i);
		/* The perfect row reads the engines, never the stats. */
		if (s->row->alg != SIM_ALG_PERFECT)
			sched_sample(s, sc->stats_interval_ms *
			    (double)(i + 1) / (double)s->nc, (uint32_t)i);
	}
	for (i = 0; i < sc->nmodels; i++)
		if ((rc = sg_fleet_cursor_new(s->fleet, &s->view[i], &e)) != 0)
			return sg_seterr(s->err, rc, "%s", e.text);
	build_candidates(s);
	if (sc->has_trace) {
		if ((s->tkey = calloc(sc->trace.nsess + 1,
		    sizeof(*s->tkey))) == NULL)
			return sg_seterr(s->err, SG_ENOMEM, "out of memory");
		for (i = 0; i < sc->trace.nsess; i++)
			s->tkey[i] = key_of(sc->trace.sess[i].id);
		if (sc->trace.nsess > 0)
			push(s, sc->trace.req[sc->trace.sess[0].first].t_ms,
			    EV_SESSION, 0);
	} else {
		double first;

		s->arrivals_rng = stream_seed(sc->seed, 2, 0);
		first = s->tr != NULL ? s->tr->arrive[0] :
		    sim_next_arrival(sc, &s->arrivals_rng, 0);
		if (!isinf(first))
			push(s, first, EV_SESSION, 0);
	}
	for (i = 0; i < sc->nbg; i++) {
		s->bg_rng[i] = stream_seed(sc->seed, 3, i);
		if (sc->bg[i].end_ms > s->bg_end)
			s->bg_end = sc->bg[i].end_ms;
		push(s, sc->bg[i].start_ms + expo(&s->bg_rng[i], 1000.0 /
		    sc->bg[i].rate_per_s), EV_BG, (uint32_t)i);
	}
	for (i = 0; i < sc->ndrains; i++) {
		push(s, sc->drains[i].start_ms, EV_DRAIN, (uint32_t)(2 * i));
		push(s, sc->drains[i].end_ms, EV_DRAIN, (uint32_t)(2 * i + 1));
	}
	return s->fail;
}

/* A session arrival: start it, schedule the next one. */
static void
arrival(sim *s, double t)
{
	const scenario *sc = s->sc;

	double next;

	if (t >= sc->duration_ms)
		return;
	new_session(s, t);
	if (sc->has_trace) {
		if (s->next_trace < sc->trace.nsess)
			push(s, sc->trace.req[sc->trace.sess[
			    s->next_trace].first].t_ms, EV_SESSION, 0);
		return;
	}
	/* The table's last arrival is the first one past the end, pushed
	 * and discarded as a drawn one is. */
	next = s->tr != NULL ? s->tr->arrive[s->next_session] :
	    sim_next_arrival(sc, &s->arrivals_rng, t);
	if (!isinf(next))
		push(s, next, EV_SESSION, 0);
}

static void
dispatch(sim *s, const ev *x)
{
	const scenario *sc = s->sc;

	switch (x->type) {
	case EV_SESSION:
		arrival(s, x->t);
		break;
	case EV_TURN:
		start_turn(s, x->a, x->t);
		break;
	case EV_ROUTE:
		route(s, x->a, x->t);
		break;
	case EV_SAMPLE:
		take_sample(s, x->a, x->t);
		if (busy(s, x->t))
			sched_sample(s, x->t + sc->stats_interval_ms, x->a);
		break;
	case EV_VISIBLE: {
		cstate *c = &s->cs[x->a];

		publish(s, x->a, &c->pend[c->pend_head++], x->t);
		break;
	}
	case EV_BG:
		background(s, x->a, x->t);
		break;
	case EV_DRAIN:
		drain_event(s, x->a, x->t);
		break;
	}
}

/*
 * The session of the heap's next turn start is wanted soon, and is
 * rarely in cache (tens of thousands of sessions think at once): the loop
 * asks for it while this event runs (a hint only: nothing depends on it).
 * The session, or NULL.  (The prefetch itself stays in the caller: a
 * function holding nothing but a prefetch is pure to the compiler, and
 * its calls are dropped.)
 */
static const sess *
next_turn_sess(const sim *s)
{
	uint32_t type, a;

	if (s->nheap == 0)
		return NULL;
	type = (uint32_t)(s->heap[0].k >> EV_ABITS) & ((1u << EV_TBITS) - 1);
	a = (uint32_t)s->heap[0].k & ((1u << EV_ABITS) - 1);
	return type == EV_TURN && a < s->nss ? &s->ss[a] : NULL;
}

static void
summarise(sim *s, sim_result *out)
{
	const scenario *sc = s->sc;

	out->sim_end_ms = s->now;
	out->kv_reuse = out->input_tokens > 0 ? out->reused_tokens /
	    out->input_tokens : 0;
	out->ttft_p99_ms = percentile(s->ttft, s->nttft, 0.99);
	out->ttft_p50_ms = percentile(s->ttft, s->nttft, 0.50);
	out->goodput_rps = (double)out->good * 1000.0 /
	    (sc->duration_ms - sc->warmup_ms);
	out->left_share = out->returning > 0 ? (double)out->left /
	    (double)out->returning : 0;
	out->mean_wait_ms = s->nwait > 0 ? s->wait_sum / (double)s->nwait : 0;
}

int
sim_run(const scenario *sc, const sim_row *row, sim_result *out,
    sg_error *err)
{
	return sim_run_traffic(sc, row, NULL, out, err);
}

int
sim_run_traffic(const scenario *sc, const sim_row *row,
    const sim_traffic *tr, sim_result *out, sg_error *err)
{
	sim s;
	int rc;

	memset(&s, 0, sizeof(s));
	memset(out, 0, sizeof(*out));
	s.sc = sc;
	s.row = row;
	s.tr = sc->has_trace ? NULL : tr;
	s.err = err;
	s.res = out;
	if ((rc = setup(&s)) != 0)
		goto out;
	while (s.fail == 0) {
		uint32_t ie = s.ti[s.troot];
		double te = ie != NONE ? s.tt[s.troot] : INFINITY, th;
		const hev *h;
		const sess *pf;
		bool ring;
		ev x;

		h = next_ev(&s, &ring);
		th = h != NULL ? h->t : INFINITY;
		if (isinf(te) && isinf(th))
			break;
		if (te <= th) {
			s.now = te;
			eng_advance(s.cs[ie].e, te);
			set_next(&s, ie);
			continue;
		}
		x = ring ? pop_ring(&s) : pop(&s);
		s.now = x.t;
		if ((pf = next_turn_sess(&s)) != NULL) {
			__builtin_prefetch(pf);
			/* Its drawn turn, while this event runs. */
			if (s.tr != NULL)
				__builtin_prefetch(&s.tr->turn[pf->rng +
				    pf->turn - 1]);
		}
		dispatch(&s, &x);
	}
	if ((rc = s.fail) != 0) {
		if (rc == SG_ENOMEM)
			sg_seterr(err, rc, "out of memory");
		goto out;
	}
	summarise(&s, out);
out:
	sim_free(&s);
	return rc;
}
