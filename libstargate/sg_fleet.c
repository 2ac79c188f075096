/*
 * sg_fleet.c — fleet state (sg-proxy(8)): published stats, the reservation
 * ledger and staleness of every cluster a router routes to.
 *
 * Each cluster keeps its published stats (pub), the sample time they were
 * requested at, and a ledger of active reservations in the order they were
 * made (handle, tokens, priority, time).  The fleet also keeps one internal
 * snapshot, eff, holding every cluster in fleet order as pub with the
 * ledger applied: a reservation is applied to eff at once
 * (sg_snapshot_reserve), and a publication or a release rebuilds that one
 * cluster from pub and the remaining ledger.  So sg_fleet_view() is a copy
 * of the fresh candidates, O(n) per decision however many reservations are
 * active, and gives the same figures as applying the ledger on every read.
 *
 * A cursor (sg_fleet_sync) keeps one caller's view across decisions: every
 * change to eff[i] stamps gen[i] from the fleet's change clock, the cursor
 * remembers the stamp of each cluster it copied, and a sync whose fresh
 * candidates are unchanged copies only the clusters whose stamp moved.
 * When no stats ever go stale and every cluster is published (sg-sim's
 * fleet), the fresh candidates are the caller's whole list, so a sync is
 * one compare of the list with the view's and the changed clusters'
 * copies.
 *
 * A publication clears the reservations made at or before its sample time
 * (the stats request was sent after them, so the engine's figures include
 * them); reservations made while the request was in flight stay.  Handles
 * come from one counter per fleet and are never reused, so releasing a
 * handle a publication already cleared finds nothing and does nothing.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sg_fleet.h"
#include "sg_internal.h"

typedef struct resv {
	uint64_t	h;
	uint64_t	tokens;
	uint32_t	prio;
	double		t;
} resv;

typedef struct fcl {
	sg_cluster	pub;		/* published stats, fleet id */
	bool		have;		/* pub is valid */
	double		pub_ms;		/* sample time of pub */
	resv		*rv;		/* active reservations, oldest first */
	size_t		nrv, cap;
} fcl;

/* A view kept across decisions (see sg_fleet_sync). */
struct sg_fleet_cursor {
	sg_snapshot	*snap;
	size_t		*fidx;		/* fleet index of view cluster k */
	uint64_t	*gen;		/* gen of that cluster when copied */
	size_t		 cap;		/* room of fidx and gen */
	const sg_fleet	*f;		/* the fleet it belongs to */
};

struct sg_fleet {
	fcl		*c;
	size_t		n, cap;
	sg_snapshot	*eff;		/* pub + ledger, fleet order */
	double		*pubt;		/* sample time of pub; NaN: none */
	uint64_t	*gen;		/* clock at eff[i]'s last change */
	uint64_t	 clock;		/* counts changes to eff */
	size_t		 npub;		/* clusters whose pubt is not NaN */
	uint64_t	stale_ms;
	uint64_t	next_h;
};

/*
 * Published and at most stale_ms old: the hot-path form of sg_fleet_fresh,
 * reading the compact pubt array only (NaN compares false).
 */
static inline bool
fresh(const sg_fleet *f, size_t i, double now_ms)
{
	double t = f->pubt[i];

	if (f->stale_ms == UINT64_MAX)
		return !isnan(t);
	return now_ms - t <= (double)f->stale_ms;
}

static inline bool
ids_equal(const sg_cluster *a, const sg_cluster *b)
{
	size_t i;

	if (a->id_len != b->id_len)
		return false;
	if (a->id_len > 16)
		return memcmp(a->id, b->id, a->id_len) == 0;
	for (i = 0; i < a->id_len; i++)
		if (a->id[i] != b->id[i])
			return false;
	return true;
}

int
sg_fleet_new(sg_fleet **out, uint64_t stale_ms, sg_error *err)
{
	sg_fleet *f;

	*out = NULL;
	if ((f = calloc(1, sizeof(*f))) == NULL ||
	    (f->eff = sg_snapshot_new()) == NULL) {
		free(f);
		return sg_seterr(err, SG_ENOMEM, "out of memory");
	}
	f->stale_ms = stale_ms;
	f->next_h = 1;
	*out = f;
	return 0;
}

void
sg_fleet_free(sg_fleet *f)
{
	size_t i;

	if (f == NULL)
		return;
	for (i = 0; i < f->n; i++)
		free(f->c[i].rv);
	free(f->c);
	free(f->pubt);
	free(f->gen);
	sg_snapshot_free(f->eff);
	free(f);
}

int
sg_fleet_add(sg_fleet *f, const char *id, size_t len, size_t *idx,
    sg_error *err)
{
	sg_cluster c;
	int rc;

	if (sg_cluster_init(&c, id, len) != 0)
		return sg_seterr(err, SG_EINVAL, "cluster id: must be 1..%d "
		    "bytes", SG_ID_MAX);
	if (f->n == f->cap) {
		size_t ncap = f->cap ? 2 * f->cap : 8;
		fcl *p;

		double *t;
		uint64_t *g;

		if ((p = realloc(f->c, ncap * sizeof(*p))) == NULL)
			return sg_seterr(err, SG_ENOMEM, "out of memory");
		f->c = p;
		if ((t = realloc(f->pubt, ncap * sizeof(*t))) == NULL)
			return sg_seterr(err, SG_ENOMEM, "out of memory");
		f->pubt = t;
		if ((g = realloc(f->gen, ncap * sizeof(*g))) == NULL)
			return sg_seterr(err, SG_ENOMEM, "out of memory");
		f->gen = g;
		f->cap = ncap;
	}
	if ((rc = sg_snapshot_add(f->eff, &c, err)) != 0)
		return rc;
	memset(&f->c[f->n], 0, sizeof(f->c[f->n]));
	f->c[f->n].pub = c;
	f->pubt[f->n] = NAN;
	f->gen[f->n] = ++f->clock;
	if (idx != NULL)
		*idx = f->n;
	f->n++;
	return 0;
}

size_t
sg_fleet_count(const sg_fleet *f)
{
	return f->n;
}

long
sg_fleet_find(const sg_fleet *f, const char *id, size_t len)
{
	return sg_snapshot_find(f->eff, id, len);
}

const char *
sg_fleet_id(const sg_fleet *f, size_t i)
{
	return i < f->n ? f->c[i].pub.id : NULL;
}

void
sg_fleet_set_stale_ms(sg_fleet *f, uint64_t stale_ms)
{
	f->stale_ms = stale_ms;
}

/*
 * Copy the load figures of src into dst, which has the same id: the
 * scalars and the used part of the priority map only (a whole sg_cluster
 * is mostly id buffer and unused map room, and views are taken per
 * decision).
 */
static void
copy_load(sg_cluster *dst, const sg_cluster *src)
{
	memcpy(&dst->rtt_ms, &src->rtt_ms, offsetof(sg_cluster, prio_key) -
	    offsetof(sg_cluster, rtt_ms));
	if (src->nprio == 0)
		return;
	memcpy(dst->prio_key, src->prio_key, src->nprio *
	    sizeof(src->prio_key[0]));
	memcpy(dst->prio_ms, src->prio_ms, src->nprio *
	    sizeof(src->prio_ms[0]));
}

/* eff[i] = pub[i] + every active reservation of i, in order. */
static void
rebuild(sg_fleet *f, size_t i)
{
	const fcl *c = &f->c[i];
	size_t k;

	copy_load(sg_snapshot_at(f->eff, i), &c->pub);	/* same id */
	for (k = 0; k < c->nrv; k++)
		sg_snapshot_reserve(f->eff, i, c->rv[k].tokens, c->rv[k].prio);
	f->gen[i] = ++f->clock;
}

int
sg_fleet_publish(sg_fleet *f, size_t i, const sg_cluster *stats,
    double sample_ms)
{
	fcl *c;
	size_t k, m;

	if (i >= f->n || stats == NULL || stats->nprio > SG_PRIO_MAX)
		return SG_EINVAL;
	c = &f->c[i];
	if (c->have && sample_ms < c->pub_ms)
		return 0;
	for (k = m = 0; k < c->nrv; k++)
		if (!(c->rv[k].t <= sample_ms))
			c->rv[m++] = c->rv[k];
	c->nrv = m;
	copy_load(&c->pub, stats);
	if (isnan(f->pubt[i]) && !isnan(sample_ms))
		f->npub++;
	else if (!isnan(f->pubt[i]) && isnan(sample_ms))
		f->npub--;
	c->have = true;
	c->pub_ms = sample_ms;
	f->pubt[i] = sample_ms;
	rebuild(f, i);
	return 0;
}

double
sg_fleet_age_ms(const sg_fleet *f, size_t i, double now_ms)
{
	if (i >= f->n || !f->c[i].have)
		return INFINITY;
	return now_ms - f->c[i].pub_ms;
}

bool
sg_fleet_fresh(const sg_fleet *f, size_t i, double now_ms)
{
	return i < f->n && fresh(f, i, now_ms);
}

const sg_cluster *
sg_fleet_stats(const sg_fleet *f, size_t i)
{
	return i < f->n && f->c[i].have ? &f->c[i].pub : NULL;
}

uint64_t
sg_fleet_reserve(sg_fleet *f, size_t i, uint64_t tokens, uint32_t priority,
    double now_ms)
{
	fcl *c;
	resv *r;

	if (i >= f->n)
		return 0;
	c = &f->c[i];
	if (c->nrv == c->cap) {
		size_t ncap = c->cap ? 2 * c->cap : 16;
		resv *p;

		if (c->cap >= SG_FLEET_MAX_RESV)
			return 0;
		if (ncap > SG_FLEET_MAX_RESV)
			ncap = SG_FLEET_MAX_RESV;
		if ((p = realloc(c->rv, ncap * sizeof(*p))) == NULL)
			return 0;
		c->rv = p;
		c->cap = ncap;
	}
	r = &c->rv[c->nrv++];
	r->h = f->next_h++;
	r->tokens = tokens;
	r->prio = priority;
	r->t = now_ms;
	sg_snapshot_reserve(f->eff, i, tokens, priority);
	f->gen[i] = ++f->clock;
	return r->h;
}

void
sg_fleet_release(sg_fleet *f, size_t i, uint64_t handle)
{
	fcl *c;
	size_t k;

	if (i >= f->n || handle == 0)
		return;
	c = &f->c[i];
	/* Handles ascend along the ledger: search from the newest. */
	for (k = c->nrv; k-- > 0;) {
		if (c->rv[k].h == handle) {
			memmove(&c->rv[k], &c->rv[k + 1], (c->nrv - k - 1) *
			    sizeof(*c->rv));
			c->nrv--;
			rebuild(f, i);
			return;
		}
		if (c->rv[k].h < handle)
			return;
	}
}

size_t
sg_fleet_reservations(const sg_fleet *f, size_t i)
{
	return i < f->n ? f->c[i].nrv : 0;
}

/*
 * Steady state: out holds exactly the fresh clusters of idx, in order;
 * refresh their load figures in place (ids, and so the ids version, stay).
 * False as soon as the list differs (out is then rebuilt).
 */
static bool
view_in_place(const sg_fleet *f, const size_t *idx, size_t n, double now_ms,
    sg_snapshot *out, size_t *view_idx)
{
	const sg_cluster *eff = f->eff->c;
	size_t k, m = 0;

	for (k = 0; k < n; k++) {
		const sg_cluster *src = &eff[idx[k]];
		sg_cluster *dst;

		if (!fresh(f, idx[k], now_ms))
			continue;
		if (m >= out->n)
			return false;
		dst = &out->c[m];
		if (!ids_equal(dst, src))
			return false;
		copy_load(dst, src);
		if (view_idx != NULL)
			view_idx[m] = idx[k];
		m++;
	}
	return m == out->n;
}

int
sg_fleet_view(const sg_fleet *f, const size_t *idx, size_t n, double now_ms,
    sg_snapshot *out, size_t *view_idx, sg_error *err)
{
	size_t k, m = 0;
	int rc;

	for (k = 0; k < n; k++)
		if (idx[k] >= f->n)
			return sg_seterr(err, SG_EINVAL, "fleet view: index "
			    "%zu out of range", idx[k]);
	if (view_in_place(f, idx, n, now_ms, out, view_idx))
		return 0;
	sg_snapshot_clear(out);
	for (k = 0; k < n; k++) {
		const sg_cluster *c = &f->eff->c[idx[k]];

		if (!fresh(f, idx[k], now_ms))
			continue;
		if ((rc = sg_snapshot_add(out, c, err)) != 0) {
			if (rc == SG_EINVAL)
				sg_seterr(err, rc, "fleet view: cluster %s "
				    "listed twice", c->id);
			return rc;
		}
		if (view_idx != NULL)
			view_idx[m] = idx[k];
		m++;
	}
	return 0;
}

int
sg_fleet_cursor_new(const sg_fleet *f, sg_fleet_cursor **out, sg_error *err)
{
	sg_fleet_cursor *c;

	*out = NULL;
	if ((c = calloc(1, sizeof(*c))) == NULL ||
	    (c->snap = sg_snapshot_new()) == NULL) {
		free(c);
		return sg_seterr(err, SG_ENOMEM, "out of memory");
	}
	c->f = f;
	*out = c;
	return 0;
}

void
sg_fleet_cursor_free(sg_fleet_cursor *c)
{
	if (c == NULL)
		return;
	sg_snapshot_free(c->snap);
	free(c->fidx);
	free(c->gen);
	free(c);
}

/*
 * Steady state of sg_fleet_sync: the fresh clusters of idx are the view's,
 * in order; copy the load figures of those changed since they were copied.
 * False as soon as the list differs.
 */
static bool
sync_in_place(const sg_fleet *f, const size_t *idx, size_t n, double now_ms,
    sg_fleet_cursor *c)
{
	sg_cluster *out = c->snap->c;
	size_t k, m = 0, nv = c->snap->n;

	for (k = 0; k < n; k++) {
		size_t i = idx[k];

		/* An index out of range ends the steady state here; the
		 * caller reports it. */
		if (i >= f->n)
			return false;
		if (!fresh(f, i, now_ms))
			continue;
		if (m >= nv || c->fidx[m] != i)
			return false;
		if (c->gen[m] != f->gen[i]) {
			copy_load(&out[m], &f->eff->c[i]);
			c->gen[m] = f->gen[i];
		}
		m++;
	}
	return m == nv;
}

/*
 * The steadiest state: no cluster ever goes stale (stale_ms UINT64_MAX)
 * and every one is published, so every candidate is fresh, and idx is the
 * view's list: one compare of the lists, then the changed clusters'
 * copies.  False when any of that does not hold (sync_in_place decides).
 */
static bool
sync_all_fresh(const sg_fleet *f, const size_t *idx, size_t n,
    sg_fleet_cursor *c)
{
	sg_cluster *out = c->snap->c;
	const uint64_t *gen = f->gen;
	size_t m;

	if (f->stale_ms != UINT64_MAX || f->npub != f->n || n == 0 ||
	    n != c->snap->n || memcmp(idx, c->fidx, n * sizeof(*idx)) != 0)
		return false;
	for (m = 0; m < n; m++) {
		uint64_t g = gen[idx[m]];

		if (c->gen[m] != g) {
			copy_load(&out[m], &f->eff->c[idx[m]]);
			c->gen[m] = g;
		}
	}
	return true;
}

int
sg_fleet_sync(const sg_fleet *f, const size_t *idx, size_t n, double now_ms,
    sg_fleet_cursor *c, const sg_snapshot **snap, const size_t **view_idx,
    sg_error *err)
{
	size_t k, m;
	int rc;

	if (c->f != f)
		return sg_seterr(err, SG_EINVAL, "fleet view: cursor of "
		    "another fleet");
	if (sync_all_fresh(f, idx, n, c))
		goto done;
	if (!sync_in_place(f, idx, n, now_ms, c)) {
		for (k = 0; k < n; k++)
			if (idx[k] >= f->n)
				return sg_seterr(err, SG_EINVAL, "fleet view: "
				    "index %zu out of range", idx[k]);
		if (n > c->cap) {
			size_t *p;
			uint64_t *g;

			if ((p = realloc(c->fidx, n * sizeof(*p))) == NULL)
				return sg_seterr(err, SG_ENOMEM, "out of "
				    "memory");
			c->fidx = p;
			if ((g = realloc(c->gen, n * sizeof(*g))) == NULL)
				return sg_seterr(err, SG_ENOMEM, "out of "
				    "memory");
			c->gen = g;
			c->cap = n;
		}
		if ((rc = sg_fleet_view(f, idx, n, now_ms, c->snap, c->fidx,
		    err)) != 0) {
			sg_snapshot_clear(c->snap);
			return rc;
		}
		for (m = 0; m < c->snap->n; m++)
			c->gen[m] = f->gen[c->fidx[m]];
	}
done:
	*snap = c->snap;
	if (view_idx != NULL)
		*view_idx = c->fidx;
	return 0;
}
