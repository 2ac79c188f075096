/*
 * fuzz_lbconf.c — lb-config.json (sg_lbconf_parse) and what a router
 * does with every definition it yields.
 *
 * Properties: a rejected file has a message that starts with the source;
 * an accepted one has definitions inside their documented ranges, ids
 * 0..n-1, and resolves each configured model (with no method and with
 * every canonical method) to a definition or a 400; and a router over it
 * decides a small fixed snapshot for each model without failing other
 * than with a request error.
 */
#include <math.h>

#include <jansson.h>

#include "fuzz.h"
#include "sg_lbconf.h"
#include "sg_router.h"

static sg_snapshot *snap;

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	static const char *const ids[] = { "a", "b", "c", "d" };
	size_t i;

	(void)argc;
	(void)argv;
	FZ_ASSERT((snap = sg_snapshot_new()) != NULL);
	for (i = 0; i < 4; i++) {
		sg_cluster c;

		FZ_ASSERT(sg_cluster_init(&c, ids[i], 1) == 0);
		c.max_engine_concurrency = 4;
		c.running = i;
		c.queued = i / 2;
		c.queued_input_tokens = 100 * i;
		c.last_mean_input_tps = 1000.0 * (double)(i + 1);
		c.max_input_tps = 5000;
		c.kv_capacity_tokens = 10000;
		c.kv_free_tokens = 1000 * i;
		c.rtt_ms = (double)i;
		FZ_ASSERT(sg_snapshot_add(snap, &c, NULL) == 0);
	}
	return 0;
}

static void
check_def(const sg_lbconf *c, size_t id)
{
	const sg_algdef *d = sg_lbconf_def(c, id);

	FZ_ASSERT(d != NULL && d->id == id);
	FZ_ASSERT(d->algorithm >= 0 && d->algorithm < SG_ALG_COUNT);
	FZ_ASSERT(sg_algorithm_name(d->algorithm) != NULL);
	FZ_ASSERT(d->seed_len <= SG_ID_MAX && strlen(d->seed) == d->seed_len);
	if (d->algorithm == SG_ALG_POWER_OF_N)
		FZ_ASSERT(d->sample_count >= 1 && d->sample_count <= 64);
	if (d->algorithm == SG_ALG_WAIT_AND_WIDEN ||
	    d->algorithm == SG_ALG_PULSAR_WAW) {
		FZ_ASSERT(d->n >= 1 && d->virtual_nodes >= 1);
		FZ_ASSERT(d->affinity_scale >= 0 && d->affinity_scale <= 1);
		/* next_bucket_unlock_factor is not range-checked (ref) */
	}
	if (d->algorithm == SG_ALG_PULSAR_WAW)
		FZ_ASSERT(d->selection_count >= 1);
	if (d->has_max_input_work)
		FZ_ASSERT(!isnan(d->max_input_work_seconds));
}

static void
decide_model(sg_router *rt, const sg_lbconf *c, const char *model,
    const char *method)
{
	const sg_algdef *d;
	sg_request r;
	sg_decision dec;
	sg_error err;
	int rc;

	sg_error_clear(&err);
	rc = sg_lbconf_resolve(c, model, method, false, &d, &err);
	if (rc != 0) {
		FZ_ASSERT(rc == SG_EREQUEST && err.status == 400);
		return;
	}
	FZ_ASSERT(d != NULL && d->id < sg_lbconf_ndefs(c));
	sg_request_init(&r);
	r.request_id = "fuzz-1";
	r.model = model;
	r.routing_method = method;
	r.routing_key = "rk";
	r.cache_affinity_key = "mt:v1:payload:00";
	r.input_tokens = 1000;
	r.last_cluster_id = "b";
	memset(&dec, 0, sizeof(dec));
	rc = sg_router_decide(rt, snap, &r, 0, &dec, &err);
	FZ_ASSERT(rc == 0 || (rc == SG_EREQUEST && err.status == 400));
	if (rc == 0 && dec.kind == SG_DECIDE_SELECT)
		FZ_ASSERT(dec.index < sg_snapshot_count(snap));
	if (rc == 0 && dec.kind == SG_DECIDE_WAIT)
		FZ_ASSERT(dec.recheck_at_ms > 0);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	sg_lbconf *c = NULL;
	sg_router *rt = NULL;
	sg_error err;
	json_t *doc = NULL, *models;
	const char *key;
	json_t *val;
	size_t i, nmodels = 0;
	int rc, alg;

	if (size > (1u << 20))
		return 0;
	sg_error_clear(&err);
	rc = sg_lbconf_parse(&c, (const char *)data, size, "fuzz", &err);
	if (rc != 0) {
		FZ_ASSERT(rc == SG_ECONFIG || rc == SG_ENOMEM);
		FZ_ASSERT(c == NULL && strncmp(err.text, "fuzz", 4) == 0);
		return 0;
	}
	FZ_ASSERT(c != NULL && sg_lbconf_ndefs(c) >= 1);
	for (i = 0; i < sg_lbconf_ndefs(c); i++)
		check_def(c, i);
	FZ_ASSERT(sg_router_new(&rt, c, 1, &err) == 0);
	decide_model(rt, c, "no-such-model", NULL);
	doc = json_loadb((const char *)data, size, 0, NULL);
	models = json_object_get(doc, "models");
	json_object_foreach(models, key, val) {
		if (nmodels++ == 16)
			break;
		decide_model(rt, c, key, NULL);
		for (alg = 0; alg < SG_ALG_COUNT; alg++)
			decide_model(rt, c, key, sg_algorithm_name(alg));
		decide_model(rt, c, key, "no-such-method");
	}
	(void)val;
	json_decref(doc);
	sg_router_free(rt);
	sg_lbconf_free(c);
	return 0;
}
