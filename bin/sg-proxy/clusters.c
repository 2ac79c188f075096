/*
 * clusters.c — cluster-file generations.
 *
 * A generation (cgen) is one parsed cluster file plus what the hot path
 * needs from it: per cluster its fleet index, per model the fleet indices
 * of the clusters serving it (sorted by model name for a binary search).
 * Generations are refcounted: the worker holds the current one, every
 * request holds the one it started under, so a SIGHUP reload never frees
 * what an in-flight request reads (a request keeps its cluster URL, and
 * its reservation is made in the fleet, which outlives generations).
 *
 * The fleet only grows: a cluster id seen in any generation keeps its
 * fleet index (and its published stats, reservations and measured RTT)
 * for the life of the worker; a cluster dropped by a reload is simply not
 * a candidate of the new generation and is no longer polled.
 */
#include <stdlib.h>
#include <string.h>

#include "proxy.h"

struct mpair {
	const char	*name;
	size_t		 ci;		/* cluster index in the file */
	size_t		 fidx;
};

static int
mpair_cmp(const void *a, const void *b)
{
	const struct mpair *x = a, *y = b;
	int c = strcmp(x->name, y->name);

	if (c != 0)
		return c;
	return x->ci < y->ci ? -1 : x->ci > y->ci;
}

static int
model_cmp(const void *key, const void *elem)
{
	const pmodel *m = elem;

	return strcmp(key, m->name);
}

const pmodel *
gen_model(const cgen *g, const char *name)
{
	if (name == NULL || g->nmodels == 0)
		return NULL;
	return bsearch(name, g->models, g->nmodels, sizeof(*g->models),
	    model_cmp);
}

/* The cstate of fleet index fidx, created when new. */
static cstate *
cstate_for(proxy *p, size_t fidx)
{
	cstate *cs;
	const char *id;

	if (fidx < p->ncs && p->cs[fidx] != NULL)
		return p->cs[fidx];
	if (fidx >= p->cscap) {
		size_t cap = p->cscap == 0 ? 16 : p->cscap * 2;
		cstate **n;

		while (cap <= fidx)
			cap *= 2;
		if ((n = realloc(p->cs, cap * sizeof(*n))) == NULL)
			return NULL;
		memset(n + p->cscap, 0, (cap - p->cscap) * sizeof(*n));
		p->cs = n;
		p->cscap = cap;
	}
	if ((cs = calloc(1, sizeof(*cs))) == NULL)
		return NULL;
	id = sg_fleet_id(p->fleet, fidx);
	if ((cs->id = strdup(id != NULL ? id : "")) == NULL) {
		free(cs);
		return NULL;
	}
	cs->id_len = strlen(cs->id);
	cs->fidx = fidx;
	{
		const char *v[] = { cs->id };

		cs->age = sg_metric_series(p->m.stats_age, v);
		cs->errors = sg_metric_series(p->m.stats_errors, v);
	}
	p->cs[fidx] = cs;
	if (fidx >= p->ncs)
		p->ncs = fidx + 1;
	return cs;
}

void
cstates_free(proxy *p)
{
	size_t i;

	for (i = 0; i < p->ncs; i++) {
		if (p->cs[i] == NULL)
			continue;
		free(p->cs[i]->id);
		free(p->cs[i]->buf);
		free(p->cs[i]);
	}
	free(p->cs);
	p->cs = NULL;
	p->ncs = p->cscap = 0;
}

static void
gen_free(cgen *g)
{
	size_t i;

	if (g == NULL)
		return;
	for (i = 0; i < g->nmodels; i++)
		free(g->models[i].fidx);
	free(g->models);
	free(g->cl);
	free(g->byf);
	sg_clusterfile_free(g->cf);
	free(g);
}

/* Group the (model, cluster) pairs into the sorted model table. */
static int
build_models(cgen *g)
{
	struct mpair *pr = NULL;
	size_t np = 0, i, j, k;
	int rc = SG_ENOMEM;

	for (i = 0; i < g->n; i++)
		np += g->cl[i].def->nmodels;
	if (np == 0)
		return 0;
	if ((pr = calloc(np, sizeof(*pr))) == NULL ||
	    (g->models = calloc(np, sizeof(*g->models))) == NULL)
		goto out;
	for (i = 0, k = 0; i < g->n; i++)
		for (j = 0; j < g->cl[i].def->nmodels; j++, k++) {
			pr[k].name = g->cl[i].def->models[j];
			pr[k].ci = i;
			pr[k].fidx = g->cl[i].fidx;
		}
	qsort(pr, np, sizeof(*pr), mpair_cmp);
	for (i = 0; i < np; i = j) {
		pmodel *m = &g->models[g->nmodels];

		for (j = i; j < np && strcmp(pr[j].name, pr[i].name) == 0; j++)
			;
		if ((m->fidx = calloc(j - i, sizeof(*m->fidx))) == NULL)
			goto out;
		m->name = pr[i].name;
		for (k = i; k < j; k++)
			m->fidx[m->n++] = pr[k].fidx;
		g->nmodels++;
	}
	rc = 0;
out:
	free(pr);
	return rc;
}

int
gen_build(proxy *p, sg_clusterfile *cf, cgen **out, sg_error *err)
{
	cgen *g;
	size_t i, need;
	int rc;

	*out = NULL;
	if (p->fleet == NULL) {
		if ((rc = sg_fleet_new(&p->fleet, cf->stats_stale_ms, err)) != 0)
			return rc;
	} else
		sg_fleet_set_stale_ms(p->fleet, cf->stats_stale_ms);
	if ((g = calloc(1, sizeof(*g))) == NULL ||
	    (g->cl = calloc(cf->n, sizeof(*g->cl))) == NULL) {
		free(g);
		return sg_seterr(err, SG_ENOMEM, "out of memory");
	}
	g->refs = 1;
	g->n = cf->n;
	for (i = 0; i < cf->n; i++) {
		const sg_clusterdef *d = &cf->c[i];
		long f = sg_fleet_find(p->fleet, d->id, d->id_len);
		size_t fi;

		if (f >= 0)
			fi = (size_t)f;
		else if ((rc = sg_fleet_add(p->fleet, d->id, d->id_len, &fi,
		    err)) != 0)
			goto fail;
		g->cl[i].def = d;
		g->cl[i].fidx = fi;
		g->cl[i].url_len = strlen(d->url);
		if ((g->cl[i].cs = cstate_for(p, fi)) == NULL) {
			rc = sg_seterr(err, SG_ENOMEM, "out of memory");
			goto fail;
		}
	}
	need = sg_fleet_count(p->fleet);
	if ((g->byf = calloc(need, sizeof(*g->byf))) == NULL ||
	    build_models(g) != 0) {
		rc = sg_seterr(err, SG_ENOMEM, "out of memory");
		goto fail;
	}
	g->nbyf = need;
	for (i = 0; i < g->n; i++)
		g->byf[g->cl[i].fidx] = &g->cl[i];
	/* The view's index map must hold any model's candidates. */
	if (need > p->view_cap) {
		size_t *v = realloc(p->view_idx, need * sizeof(*v));

		if (v == NULL) {
			rc = sg_seterr(err, SG_ENOMEM, "out of memory");
			goto fail;
		}
		p->view_idx = v;
		p->view_cap = need;
	}
	g->cf = cf;
	*out = g;
	return 0;
fail:
	g->cf = NULL;
	gen_free(g);
	return rc;
}

void
gen_ref(cgen *g)
{
	g->refs++;
}

void
gen_unref(cgen *g)
{
	if (g != NULL && --g->refs == 0)
		gen_free(g);
}

void
gen_install(proxy *p, cgen *g)
{
	size_t i;
	cgen *old = p->gen;

	for (i = 0; i < p->ncs; i++)
		if (p->cs[i] != NULL)
			p->cs[i]->cur = NULL;
	for (i = 0; i < g->n; i++)
		g->cl[i].cs->cur = &g->cl[i];
	p->gen = g;
	gen_unref(old);
	metrics_session_zero(p, g);
}

void
gen_reload(proxy *p)
{
	sg_clusterfile *cf = NULL;
	sg_error err;
	sg_log_rec r;
	cgen *g = NULL;
	int rc;

	memset(&err, 0, sizeof(err));
	if ((rc = conf_load_clusters(p->conf->clusters, &cf, true,
	    &err)) != 0 || (rc = gen_build(p, cf, &g, &err)) != 0) {
		if (g == NULL)
			sg_clusterfile_free(cf);
		sg_log_begin(&r, p->log, SG_LOG_ERROR, wall_s(),
		    "cluster file reload failed; keeping the previous one");
		sg_log_str(&r, "error", err.text[0] != '\0' ? err.text :
		    sg_strerror(rc));
		sg_log_end(&r);
		return;
	}
	gen_install(p, g);
	sg_log_begin(&r, p->log, SG_LOG_INFO, wall_s(), "cluster file reloaded");
	sg_log_u64(&r, "clusters", g->n);
	sg_log_u64(&r, "models", g->nmodels);
	sg_log_end(&r);
	stats_poll_all(p);
}
