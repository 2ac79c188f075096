/*
 * sim.c — one row of sg-sim: a discrete-event simulation in virtual time
 * (milliseconds, a double) of multi-turn sessions routed by the real
 * libstargate router across clusters of the shared engine model.
 *
 * Event sources, merged in time order (ties: engines first, then the event
 * heap in insertion order, so a run is a pure function of the scenario):
 *  - the engines' own events (first token, last token), found by scanning
 *    each engine's cached next-event time;
 *  - a binary heap of session arrivals (Poisson), turn starts (after the
 *    previous answer plus an exponential think time), routing rechecks,
 *    stats samples, stats publications (after the staleness delay) and
 *    background arrivals.
 *
 * What the router sees: every stats interval each engine's state is sampled
 * into an sg_cluster (clusters are sampled at staggered phases) and, after
 * stats_staleness_ms, published.  Between publications the router's
 * snapshot is the last published sample plus every reservation made since
 * it was published: the sim keeps both in an sg_fleet, the module sg-proxy
 * uses, and decides on its view; a publication clears the reservations
 * (ref §2.3), stale or not.
 *
 * A request: at its turn start it is decided at elapsed 0; "wait" rechecks
 * at min(recheck_at, now + recheck_cap_ms) (the proxy polls the same way,
 * ref §6.2); "select" reserves and submits to the engine; an engine whose
 * queue is full refuses (a retryable 503): the cluster is excluded and the
 * request decided again, up to `retries` times; "reject" ends the session.
 * The hint of a returning session is the cluster of its previous turn (what
 * the gateway's store holds); its cache affinity key is the session key.
 *
 * Every random draw comes from a generator keyed by (seed, stream, index):
 * session i's turns, sizes and think times do not depend on routing, so
 * every row replays the same traffic.
 */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "sg-sim/sim.h"

enum { EV_SESSION, EV_TURN, EV_ROUTE, EV_SAMPLE, EV_VISIBLE, EV_BG };

typedef struct ev {
	double		t;
	uint64_t	seq;
	uint32_t	type;
	uint32_t	a;
} ev;

typedef struct sample {
	sg_cluster	c;
} sample;

typedef struct cstate {
	eng		*e;
	double		 next;		/* cached eng_next_event */
	sg_cluster	 vis;		/* last published sample */
	sample		*pend;		/* taken, not yet published, FIFO */
	size_t		 pend_head, pend_n, pend_cap;
} cstate;

typedef struct sess {
	uint64_t	rng;
	uint64_t	key;		/* engine cache key */
	uint64_t	context;	/* last prompt + last answer */
	uint32_t	turns, turn;	/* turn: the next one, 1-based */
	int32_t		last;		/* cluster of the previous turn, -1 */
	uint32_t	next_free;
	char		keystr[24];
} sess;

typedef struct sreq {
	sg_request	q;
	double		arrive;
	double		selected;
	uint64_t	input, output;
	uint32_t	sess;
	int32_t		cluster;
	int32_t		last;
	uint32_t	retries;
	uint32_t	nexcl;
	int32_t		excl[SIM_MAX_RETRIES + 1];
	bool		counted;
	uint32_t	next_free;
	char		id[40];
} sreq;

typedef struct sim {
	const scenario	*sc;
	const sim_row	*row;
	sg_router	*rt;
	sg_fleet	*fleet;		/* published stats + reservations */
	sg_snapshot	*snap;		/* the fleet's view, per decision */
	size_t		*all;		/* 0..nc-1: every cluster a candidate */
	cstate		*cs;
	size_t		 nc;
	double		 now;
	uint64_t	 seq;		/* event insertion order */
	int		 fail;		/* first error */
	sg_error	*err;

	ev		*heap;
	size_t		 nheap, heapcap;

	sess		*ss;
	uint32_t	 nss, sscap, ss_free;
	sreq		*rq;
	uint32_t	 nrq, rqcap, rq_free;

	uint64_t	 arrivals_rng;
	uint64_t	 bg_rng[SIM_MAX_BG];
	uint32_t	 next_session;
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

static uint64_t
rnd(uint64_t *s)
{
	*s += 0x9e3779b97f4a7c15ULL;
	return mix(*s);
}

/* Generator state of (seed, stream, index). */
static uint64_t
stream_seed(uint64_t seed, uint64_t stream, uint64_t idx)
{
	return mix(seed ^ mix(stream * 0x9e3779b97f4a7c15ULL ^ mix(idx + 1)));
}

static double
unif(uint64_t *s)
{
	return (double)(rnd(s) >> 11) * 0x1.0p-53;
}

static double
expo(uint64_t *s, double mean)
{
	return -log1p(-unif(s)) * mean;
}

static uint64_t
draw(uint64_t *s, sim_dist d)
{
	uint64_t r;

	if (d.min == d.max)
		return d.min;
	r = rnd(s);
	return d.min + r % (d.max - d.min + 1);
}

/* --- event heap ------------------------------------------------------------ */

static bool
ev_less(const ev *a, const ev *b)
{
	return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

static void
push(sim *s, double t, uint32_t type, uint32_t a)
{
	size_t i;
	ev x;

	if (s->nheap == s->heapcap) {
		size_t n = s->heapcap ? s->heapcap * 2 : 1024;
		ev *h = realloc(s->heap, n * sizeof(*h));

		if (h == NULL) {
			s->fail = SG_ENOMEM;
			return;
		}
		s->heap = h;
		s->heapcap = n;
	}
	x.t = t;
	x.seq = s->seq++;
	x.type = type;
	x.a = a;
	i = s->nheap++;
	while (i > 0) {
		size_t p = (i - 1) / 2;

		if (!ev_less(&x, &s->heap[p]))
			break;
		s->heap[i] = s->heap[p];
		i = p;
	}
	s->heap[i] = x;
}

static ev
pop(sim *s)
{
	ev top = s->heap[0], last = s->heap[--s->nheap];
	size_t i = 0, n = s->nheap;

	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= n)
			break;
		if (c + 1 < n && ev_less(&s->heap[c + 1], &s->heap[c]))
			c++;
		if (!ev_less(&s->heap[c], &last))
			break;
		s->heap[i] = s->heap[c];
		i = c;
	}
	if (n > 0)
		s->heap[i] = last;
	return top;
}

/* --- pools ----------------------------------------------------------------- */

static uint32_t
sess_new(sim *s)
{
	uint32_t i;

	if (s->ss_free != NONE) {
		i = s->ss_free;
		s->ss_free = s->ss[i].next_free;
		return i;
	}
	if (s->nss == s->sscap) {
		uint32_t n = s->sscap ? s->sscap * 2 : 1024;
		sess *p = realloc(s->ss, (size_t)n * sizeof(*p));

		if (p == NULL)
			return NONE;
		s->ss = p;
		s->sscap = n;
	}
	return s->nss++;
}

static void
sess_end(sim *s, uint32_t i)
{
	s->ss[i].next_free = s->ss_free;
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

		if (p == NULL)
			return NONE;
		s->rq = p;
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

/* --- stats and reservations ------------------------------------------------ */

static int
grow(void **p, size_t *cap, size_t elem, size_t want)
{
	size_t n = *cap ? *cap : 16;
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

	/* Ref §2.3: a publication clears the cluster's reservations, which
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
	c->next = eng_next_event(c->e);
	smp.c = c->vis;
	eng_cluster(c->e, t, &smp.c);
	if (s->sc->stats_staleness_ms <= 0) {
		publish(s, i, &smp, t);
		return;
	}
	if (c->pend_head > 0 && c->pend_head == c->pend_n)
		c->pend_head = c->pend_n = 0;
	if (grow((void **)&c->pend, &c->pend_cap, sizeof(*c->pend),
	    c->pend_n + 1) != 0) {
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

/* --- requests ---------------------------------------------------------------- */

/* Decimal digits of v into p (no NUL); returns the length. */
static size_t
utoa(uint64_t v, char *p)
{
	char tmp[24];
	size_t n = 0, i;

	do {
		tmp[n++] = (char)('0' + v % 10);
	} while ((v /= 10) > 0);
	for (i = 0; i < n; i++)
		p[i] = tmp[n - 1 - i];
	return n;
}

static void
end_request(sim *s, uint32_t ri, bool end_session)
{
	if (end_session)
		sess_end(s, s->rq[ri].sess);
	req_free(s, ri);
}

static void
route(sim *s, uint32_t ri, double t)
{
	const scenario *sc = s->sc;
	const char *excl[SIM_MAX_RETRIES + 1];
	sg_decision d;
	sg_error e;
	sreq *r;
	uint32_t k;
	int rc;

	for (;;) {
		r = &s->rq[ri];
		for (k = 0; k < r->nexcl; k++)
			excl[k] = sc->clusters[r->excl[k]].id;
		r->q.request_id = r->id;
		r->q.routing_key = sc->has_routing_key ? sc->routing_key : NULL;
		r->q.model = sc->model;
		r->q.cache_affinity_key = s->ss[r->sess].keystr;
		r->q.last_cluster_id = r->last >= 0 ?
		    sc->clusters[r->last].id : NULL;
		r->q.excluded = excl;
		r->q.nexcluded = r->nexcl;
		r->q.input_tokens = r->input;
		r->q.priority = sc->sessions.priority;
		r->q.has_max_wait = sc->has_max_wait;
		r->q.max_wait_ms = sc->max_wait_ms;
		s->res->decisions++;
		if ((rc = sg_fleet_view(s->fleet, s->all, s->nc, t, s->snap,
		    NULL, &e)) != 0) {
			s->fail = rc;
			sg_seterr(s->err, rc, "row %s: %s", s->row->name, e.text);
			return;
		}
		rc = sg_router_decide(s->rt, s->snap, &r->q, t - r->arrive, &d,
		    &e);
		r->q.excluded = NULL;
		if (rc != 0) {
			s->fail = SG_EINVAL;
			sg_seterr(s->err, SG_EINVAL, "row %s: request %s: %s",
			    s->row->name, r->id, e.text);
			return;
		}
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
			size_t i = d.index;
			eng_req q = {
				.key = s->ss[r->sess].key,
				.input_tokens = r->input,
				.output_tokens = r->output,
				.udata = (void *)(uintptr_t)(ri + 1),
			};
			uint32_t h;

			reserve(s, i, r->input, sc->sessions.priority, t);
			rc = eng_submit(s->cs[i].e, t, &q, &h);
			s->cs[i].next = eng_next_event(s->cs[i].e);
			r = &s->rq[ri];
			if (rc == 0) {
				r->cluster = (int32_t)i;
				r->selected = t;
				if (r->counted) {
					s->wait_sum += t - r->arrive;
					s->nwait++;
					if (r->last >= 0) {
						s->res->returning++;
						if (r->last != (int32_t)i)
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
				r->excl[r->nexcl++] = (int32_t)i;
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

static void
start_turn(sim *s, uint32_t si, double t)
{
	const scenario *sc = s->sc;
	sess *ss = &s->ss[si];
	uint64_t in;
	uint32_t ri;
	sreq *r;

	if (t >= sc->duration_ms) {
		sess_end(s, si);
		return;
	}
	in = ss->turn == 1 ? draw(&ss->rng, sc->sessions.first_input) :
	    ss->context + draw(&ss->rng, sc->sessions.turn_input);
	if (in > sc->sessions.max_context)
		in = sc->sessions.max_context;
	if (in == 0)
		in = 1;
	if ((ri = req_new(s)) == NONE) {
		s->fail = SG_ENOMEM;
		return;
	}
	ss = &s->ss[si];
	r = &s->rq[ri];
	memset(r, 0, offsetof(sreq, id));
	sg_request_init(&r->q);
	r->arrive = t;
	r->input = in;
	r->output = draw(&ss->rng, sc->sessions.output);
	r->sess = si;
	r->cluster = -1;
	r->last = ss->last;
	r->counted = t >= sc->warmup_ms;
	/* "s<session>-t<turn>": unique, and the same in every row. */
	{
		size_t n = strlen(ss->keystr);

		memcpy(r->id, ss->keystr, n);
		r->id[n++] = '-';
		r->id[n++] = 't';
		n += utoa(ss->turn, r->id + n);
		r->id[n] = '\0';
	}
	s->res->simulated++;
	if (r->counted)
		s->res->requests++;
	route(s, ri, t);
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
	ss->rng = stream_seed(sc->seed, 1, id);
	ss->key = mix(sc->seed ^ mix((uint64_t)id + 1)) | 1;
	ss->context = 0;
	ss->turn = 1;
	ss->last = -1;
	ss->turns = (uint32_t)draw(&ss->rng, sc->sessions.turns);
	snprintf(ss->keystr, sizeof(ss->keystr), "s%u", (unsigned)id);
	s->live_sessions++;
	start_turn(s, si, t);
}

/* Engine callback: the first token of a session request. */
static void
on_engine(void *ctx, uint32_t handle, int event, const eng_info *info)
{
	sim *s = ctx;
	uint32_t ri;
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
		ttft = info->first_token_ms - r->arrive +
		    s->sc->clusters[r->cluster].rtt_ms;
		s->res->completed++;
		if (ttft <= s->sc->slo_ttft_ms)
			s->res->good++;
		s->res->input_tokens += (double)info->input_tokens;
		s->res->reused_tokens += (double)info->reused_tokens;
		if (s->nttft == s->ttftcap && grow((void **)&s->ttft,
		    &s->ttftcap, sizeof(*s->ttft), s->nttft + 1) != 0) {
			s->fail = SG_ENOMEM;
			return;
		}
		s->ttft[s->nttft++] = ttft;
		return;
	}
	/* Done: the session thinks, then starts its next turn. */
	ss = &s->ss[r->sess];
	ss->context = r->input + r->output;
	ss->last = r->cluster;
	ss->turn++;
	if (ss->turn > ss->turns)
		end_request(s, ri, true);
	else {
		push(s, info->done_ms + expo(&ss->rng, s->sc->sessions.think_ms),
		    EV_TURN, r->sess);
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
	q.input_tokens = draw(g, bg->input);
	q.output_tokens = draw(g, bg->output);
	q.udata = &s->bg_marker;
	c = &s->cs[bg->cluster];
	if (eng_submit(c->e, t, &q, &h) == 0) {
		s->live_bg++;
		s->res->background++;
	}
	c->next = eng_next_event(c->e);
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
	free(s->heap);
	free(s->ss);
	free(s->rq);
	free(s->ttft);
	sg_router_free(s->rt);
	sg_snapshot_free(s->snap);
	sg_fleet_free(s->fleet);
	free(s->all);
}

static int
setup(sim *s)
{
	const scenario *sc = s->sc;
	sg_error e;
	size_t i;
	int rc;

	s->ss_free = s->rq_free = NONE;
	s->nc = sc->nclusters;
	if ((s->cs = calloc(s->nc, sizeof(*s->cs))) == NULL ||
	    (s->all = calloc(s->nc, sizeof(*s->all))) == NULL ||
	    (s->snap = sg_snapshot_new()) == NULL)
		return sg_seterr(s->err, SG_ENOMEM, "out of memory");
	/* The simulated router never ages stats out: staleness is modelled
	 * by the publication delay, and every cluster is a candidate. */
	if ((rc = sg_fleet_new(&s->fleet, UINT64_MAX, &e)) != 0)
		return sg_seterr(s->err, rc, "%s", e.text);
	if ((rc = sg_router_new(&s->rt, s->row->conf, sc->seed, &e)) != 0)
		return sg_seterr(s->err, SG_EINVAL, "row %s: %s", s->row->name,
		    e.text);
	for (i = 0; i < s->nc; i++) {
		cstate *c = &s->cs[i];
		sample smp;

		if (eng_new(&c->e, &sc->clusters[i].eng, on_engine, s,
		    NULL) != 0)
			return sg_seterr(s->err, SG_ENOMEM, "out of memory");
		sg_cluster_init(&c->vis, sc->clusters[i].id,
		    strlen(sc->clusters[i].id));
		c->vis.rtt_ms = sc->clusters[i].rtt_ms;
		s->all[i] = i;
		if ((rc = sg_fleet_add(s->fleet, c->vis.id, c->vis.id_len,
		    NULL, &e)) != 0)
			return sg_seterr(s->err, rc, "%s", e.text);
		/* The router starts with every cluster idle; samples follow
		 * at staggered phases. */
		smp.c = c->vis;
		eng_cluster(c->e, 0, &smp.c);
		publish(s, i, &smp, 0);
		c->next = INFINITY;
		push(s, sc->stats_interval_ms * (double)(i + 1) /
		    (double)s->nc, EV_SAMPLE, (uint32_t)i);
	}
	s->arrivals_rng = stream_seed(sc->seed, 2, 0);
	push(s, expo(&s->arrivals_rng, 1000.0 / sc->sessions.rate_per_s),
	    EV_SESSION, 0);
	for (i = 0; i < sc->nbg; i++) {
		s->bg_rng[i] = stream_seed(sc->seed, 3, i);
		if (sc->bg[i].end_ms > s->bg_end)
			s->bg_end = sc->bg[i].end_ms;
		push(s, sc->bg[i].start_ms + expo(&s->bg_rng[i], 1000.0 /
		    sc->bg[i].rate_per_s), EV_BG, (uint32_t)i);
	}
	return s->fail;
}

int
sim_run(const scenario *sc, const sim_row *row, sim_result *out,
    sg_error *err)
{
	sim s;
	int rc;

	memset(&s, 0, sizeof(s));
	memset(out, 0, sizeof(*out));
	s.sc = sc;
	s.row = row;
	s.err = err;
	s.res = out;
	if ((rc = setup(&s)) != 0)
		goto out;
	while (s.fail == 0) {
		double te = INFINITY, th;
		size_t i, ie = 0;
		ev x;

		for (i = 0; i < s.nc; i++)
			if (s.cs[i].next < te) {
				te = s.cs[i].next;
				ie = i;
			}
		th = s.nheap > 0 ? s.heap[0].t : INFINITY;
		if (isinf(te) && isinf(th))
			break;
		if (te <= th) {
			s.now = te;
			eng_advance(s.cs[ie].e, te);
			s.cs[ie].next = eng_next_event(s.cs[ie].e);
			continue;
		}
		x = pop(&s);
		s.now = x.t;
		switch (x.type) {
		case EV_SESSION:
			if (x.t >= sc->duration_ms)
				break;
			new_session(&s, x.t);
			push(&s, x.t + expo(&s.arrivals_rng, 1000.0 /
			    sc->sessions.rate_per_s), EV_SESSION, 0);
			break;
		case EV_TURN:
			start_turn(&s, x.a, x.t);
			break;
		case EV_ROUTE:
			route(&s, x.a, x.t);
			break;
		case EV_SAMPLE:
			take_sample(&s, x.a, x.t);
			if (busy(&s, x.t))
				push(&s, x.t + sc->stats_interval_ms, EV_SAMPLE,
				    x.a);
			break;
		case EV_VISIBLE: {
			cstate *c = &s.cs[x.a];

			publish(&s, x.a, &c->pend[c->pend_head++], x.t);
			break;
		}
		case EV_BG:
			background(&s, x.a, x.t);
			break;
		}
	}
	if ((rc = s.fail) != 0) {
		if (rc == SG_ENOMEM)
			sg_seterr(err, rc, "out of memory");
		goto out;
	}
	out->sim_end_ms = s.now;
	out->kv_reuse = out->input_tokens > 0 ? out->reused_tokens /
	    out->input_tokens : 0;
	out->ttft_p99_ms = percentile(s.ttft, s.nttft, 0.99);
	out->ttft_p50_ms = percentile(s.ttft, s.nttft, 0.50);
	out->goodput_rps = (double)out->good * 1000.0 /
	    (sc->duration_ms - sc->warmup_ms);
	out->left_share = out->returning > 0 ? (double)out->left /
	    (double)out->returning : 0;
	out->mean_wait_ms = s.nwait > 0 ? s.wait_sum / (double)s.nwait : 0;
out:
	sim_free(&s);
	return rc;
}
