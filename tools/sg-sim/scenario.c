/*
 * scenario.c — sg-sim scenario files: strict JSON in, a checked scenario
 * with one lb-config per row out.
 *
 * Every object is checked against its list of fields first, so a typo is
 * an error naming the field ("sessions.turnz: unknown field") instead of a
 * silently ignored line.  Values are range-checked with messages naming the
 * field and the expected range.  The lb-config of a row is the scenario's
 * "algorithms" entry for the row's algorithm, plus "algorithm" and, for the
 * "/on" rows, "last_cluster_affinity": true, parsed by sg_lbconf_parse like
 * any lb-config.json; its errors are reported with the row's name.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sg-sim/sim.h"
#include "common/oracle.h"

/* Path of the current object, for messages ("sessions", "clusters[2]"). */
typedef struct ctx {
	const char	*file;
	sg_error	*err;
} ctx;

static int
bad(ctx *c, const char *where, const char *field, const char *what)
{
	return sg_seterr(c->err, SG_EINVAL, "%s: %s%s%s: %s", c->file, where,
	    *where != '\0' && field != NULL ? "." : "", field != NULL ? field :
	    "", what);
}

/* Reject fields not in allowed (NULL-terminated). */
static int
check_fields(ctx *c, const json_t *obj, const char *where,
    const char *const *allowed)
{
	const char *k;
	json_t *v;
	size_t i;

	if (!json_is_object(obj))
		return sg_seterr(c->err, SG_EINVAL, "%s: %s: expected an object",
		    c->file, *where != '\0' ? where : "scenario");
	json_object_foreach((json_t *)obj, k, v) {
		for (i = 0; allowed[i] != NULL; i++)
			if (strcmp(k, allowed[i]) == 0)
				break;
		if (allowed[i] == NULL)
			return bad(c, where, k, "unknown field");
	}
	return 0;
}

/* Number field in [min, max] (min exclusive when open); absent keeps *out. */
static int
get_num(ctx *c, const json_t *obj, const char *where, const char *field,
    double min, bool open, double max, bool required, double *out)
{
	json_t *v = json_object_get(obj, field);
	char msg[96];
	double d;

	if (v == NULL) {
		if (required)
			return bad(c, where, field, "missing");
		return 0;
	}
	d = json_number_value(v);
	if (!json_is_number(v) || !isfinite(d) || d < min || (open &&
	    d == min) || d > max) {
		snprintf(msg, sizeof(msg), "expected a number %s %g%s",
		    open ? ">" : ">=", min, max < 1e300 ? " and at most" : "");
		if (max < 1e300)
			snprintf(msg + strlen(msg), sizeof(msg) - strlen(msg),
			    " %g", max);
		return bad(c, where, field, msg);
	}
	*out = d;
	return 0;
}

static int
get_u64(ctx *c, const json_t *obj, const char *where, const char *field,
    uint64_t min, uint64_t max, bool required, uint64_t *out)
{
	json_t *v = json_object_get(obj, field);
	char msg[96];

	if (v == NULL) {
		if (required)
			return bad(c, where, field, "missing");
		return 0;
	}
	if (!json_is_integer(v) || json_integer_value(v) < 0 ||
	    (uint64_t)json_integer_value(v) < min ||
	    (uint64_t)json_integer_value(v) > max) {
		snprintf(msg, sizeof(msg), "expected an integer from %llu to "
		    "%llu", (unsigned long long)min, (unsigned long long)max);
		return bad(c, where, field, msg);
	}
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

static int
get_bool(ctx *c, const json_t *obj, const char *where, const char *field,
    bool *out)
{
	json_t *v = json_object_get(obj, field);

	if (v == NULL)
		return 0;
	if (!json_is_boolean(v))
		return bad(c, where, field, "expected true or false");
	*out = json_is_true(v);
	return 0;
}

static int
get_str(ctx *c, const json_t *obj, const char *where, const char *field,
    char *out, size_t size, bool *present)
{
	json_t *v = json_object_get(obj, field);

	if (v == NULL)
		return 0;
	if (!json_is_string(v) || json_string_length(v) == 0 ||
	    json_string_length(v) >= size) {
		char msg[64];

		snprintf(msg, sizeof(msg), "expected a string of 1 to %zu bytes",
		    size - 1);
		return bad(c, where, field, msg);
	}
	memcpy(out, json_string_value(v), json_string_length(v) + 1);
	if (present != NULL)
		*present = true;
	return 0;
}

/* A real field > 0 (or >= 0 when zero_ok) of a distribution object. */
static int
dist_param(ctx *c, const json_t *v, const char *sub, const char *field,
    bool zero_ok, double *out)
{
	return get_num(c, v, sub, field, 0, !zero_ok, 1e12, true, out);
}

/*
 * A distribution: an integer N; {"min": a, "max": b} (uniform, a <= b);
 * or {"dist": "lognormal", "median", "sigma"}, {"dist": "pareto",
 * "alpha", "scale"}, {"dist": "exponential", "mean"}, each with optional
 * "min" and "max" clamps.  Values are >= min.
 */
static int
get_dist(ctx *c, const json_t *obj, const char *where, const char *field,
    uint64_t min, sim_dist *out)
{
	static const char *const fields[] = { "dist", "min", "max", "median",
	    "sigma", "alpha", "scale", "mean", NULL };
	static const char *const kinds[] = { "uniform", "lognormal", "pareto",
	    "exponential", NULL };
	json_t *v = json_object_get(obj, field), *k;
	char sub[160];
	uint64_t a = min, b = UINT64_C(1) << 40;
	sim_dist d;
	int rc;

	if (v == NULL)
		return 0;
	memset(&d, 0, sizeof(d));
	if (json_is_integer(v)) {
		if (json_integer_value(v) < 0 ||
		    (uint64_t)json_integer_value(v) < min) {
			char msg[80];

			snprintf(msg, sizeof(msg), "expected an integer >= %llu "
			    "or a distribution", (unsigned long long)min);
			return bad(c, where, field, msg);
		}
		out->kind = DIST_UNIFORM;
		out->min = out->max = (uint64_t)json_integer_value(v);
		return 0;
	}
	snprintf(sub, sizeof(sub), "%s%s%s", where, *where ? "." : "", field);
	if (!json_is_object(v))
		return sg_seterr(c->err, SG_EINVAL, "%s: %s: expected an integer "
		    "or a distribution object", c->file, sub);
	if ((rc = check_fields(c, v, sub, fields)) != 0)
		return rc;
	if ((k = json_object_get(v, "dist")) != NULL) {
		for (d.kind = 0; kinds[d.kind] != NULL; d.kind++)
			if (json_is_string(k) && strcmp(json_string_value(k),
			    kinds[d.kind]) == 0)
				break;
		if (kinds[d.kind] == NULL)
			return bad(c, sub, "dist", "expected uniform, lognormal, "
			    "pareto or exponential");
	}
	if ((rc = get_u64(c, v, sub, "min", min, UINT64_C(1) << 40,
	    d.kind == DIST_UNIFORM, &a)) != 0 ||
	    (rc = get_u64(c, v, sub, "max", min, UINT64_C(1) << 40,
	    d.kind == DIST_UNIFORM, &b)) != 0)
		return rc;
	if (a > b)
		return bad(c, sub, "max", "must be >= min");
	switch (d.kind) {
	case DIST_LOGNORMAL:
		if ((rc = dist_param(c, v, sub, "median", false, &d.a)) != 0 ||
		    (rc = dist_param(c, v, sub, "sigma", true, &d.b)) != 0)
			return rc;
		break;
	case DIST_PARETO:
		if ((rc = dist_param(c, v, sub, "alpha", false, &d.a)) != 0 ||
		    (rc = dist_param(c, v, sub, "scale", false, &d.b)) != 0)
			return rc;
		break;
	case DIST_EXPONENTIAL:
		if ((rc = dist_param(c, v, sub, "mean", true, &d.a)) != 0)
			return rc;
		break;
	}
	{
		/* Parameters of another kind are mistakes. */
		static const char *const own[][2] = { { "", "" },
		    { "median", "sigma" }, { "alpha", "scale" },
		    { "mean", "" } };
		size_t i;

		for (i = 3; fields[i] != NULL; i++)
			if (json_object_get(v, fields[i]) != NULL &&
			    strcmp(fields[i], own[d.kind][0]) != 0 &&
			    strcmp(fields[i], own[d.kind][1]) != 0)
				return bad(c, sub, fields[i], "not a parameter "
				    "of this distribution");
	}
	d.min = a;
	d.max = b;
	*out = d;
	return 0;
}

static int
parse_engine(ctx *c, const json_t *o, const char *where, eng_config *e)
{
	static const char *const fields[] = { "slots", "max_queue",
	    "prefill_tps", "decode_tps", "kv_capacity_tokens", "block_tokens",
	    "tps_window", "prio_map", "step_model", "max_batched_tokens",
	    "step_fixed_ms", "step_decode_ms_per_seq",
	    "step_prefill_ms_per_token", NULL };
	uint64_t u;
	int rc;

	if ((rc = check_fields(c, o, where, fields)) != 0)
		return rc;
	u = e->slots;
	if ((rc = get_u64(c, o, where, "slots", 1, 100000, false, &u)) != 0)
		return rc;
	e->slots = (uint32_t)u;
	u = e->max_queue;
	if ((rc = get_u64(c, o, where, "max_queue", 0, 10000000, false,
	    &u)) != 0)
		return rc;
	e->max_queue = (uint32_t)u;
	u = e->block_tokens;
	if ((rc = get_u64(c, o, where, "block_tokens", 1, 65536, false,
	    &u)) != 0)
		return rc;
	e->block_tokens = (uint32_t)u;
	u = e->tps_window;
	if ((rc = get_u64(c, o, where, "tps_window", 1, 65536, false,
	    &u)) != 0)
		return rc;
	e->tps_window = (uint32_t)u;
	u = e->max_batched_tokens;
	if ((rc = get_u64(c, o, where, "max_batched_tokens", 1, 1000000, false,
	    &u)) != 0)
		return rc;
	e->max_batched_tokens = (uint32_t)u;
	if ((rc = get_u64(c, o, where, "kv_capacity_tokens", 0,
	    UINT64_C(1) << 40, false, &e->kv_capacity_tokens)) != 0 ||
	    (rc = get_num(c, o, where, "prefill_tps", 0, true, 1e12, false,
	    &e->prefill_tps)) != 0 ||
	    (rc = get_num(c, o, where, "decode_tps", 0, true, 1e9, false,
	    &e->decode_tps)) != 0 ||
	    (rc = get_bool(c, o, where, "prio_map", &e->prio_map)) != 0 ||
	    (rc = get_bool(c, o, where, "step_model", &e->step_model)) != 0 ||
	    (rc = get_num(c, o, where, "step_fixed_ms", 0, false, 1e6, false,
	    &e->step_fixed_ms)) != 0 ||
	    (rc = get_num(c, o, where, "step_decode_ms_per_seq", 0, false, 1e6,
	    false, &e->step_decode_ms_per_seq)) != 0 ||
	    (rc = get_num(c, o, where, "step_prefill_ms_per_token", 0, true,
	    1e6, false, &e->step_prefill_ms_per_token)) != 0)
		return rc;
	return 0;
}

static int
parse_clusters(ctx *c, scenario *sc, const json_t *arr, const eng_config *def)
{
	static const char *const fields[] = { "id", "count", "rtt_ms",
	    "engine", "models", NULL };
	size_t i, k, n = 0, total = 0;
	char where[64];
	int rc;

	if (!json_is_array(arr) || json_array_size(arr) == 0)
		return sg_seterr(c->err, SG_EINVAL, "%s: clusters: expected a "
		    "non-empty array", c->file);
	for (i = 0; i < json_array_size(arr); i++) {
		json_t *o = json_array_get(arr, i);
		uint64_t cnt = 1;

		snprintf(where, sizeof(where), "clusters[%zu]", i);
		if ((rc = check_fields(c, o, where, fields)) != 0 ||
		    (rc = get_u64(c, o, where, "count", 1, SIM_MAX_CLUSTERS,
		    false, &cnt)) != 0)
			return rc;
		total += cnt;
		if (total > SIM_MAX_CLUSTERS)
			return bad(c, "", "clusters", "too many clusters");
	}
	if ((sc->clusters = calloc(total, sizeof(*sc->clusters))) == NULL)
		return sg_seterr(c->err, SG_ENOMEM, "out of memory");
	for (i = 0; i < json_array_size(arr); i++) {
		json_t *o = json_array_get(arr, i), *e;
		uint64_t cnt = 1;
		char id[SG_ID_MAX + 1] = "";
		bool has_id = false, has_count;
		double rtt = 0;

		snprintf(where, sizeof(where), "clusters[%zu]", i);
		has_count = json_object_get(o, "count") != NULL;
		(void)get_u64(c, o, where, "count", 1, SIM_MAX_CLUSTERS, false,
		    &cnt);
		if ((rc = get_str(c, o, where, "id", id, has_count ?
		    SG_ID_MAX - 8 : sizeof(id), &has_id)) != 0 ||
		    (rc = get_num(c, o, where, "rtt_ms", 0, false, 1e6, false,
		    &rtt)) != 0)
			return rc;
		if (!has_id)
			return bad(c, where, "id", "missing");
		for (k = 0; k < cnt; k++, n++) {
			sim_cluster *cl = &sc->clusters[n];
			size_t j;

			if (has_count)
				snprintf(cl->id, sizeof(cl->id), "%s%zu", id,
				    k + 1);
			else
				memcpy(cl->id, id, sizeof(id));
			for (j = 0; j < n; j++)
				if (strcmp(sc->clusters[j].id, cl->id) == 0)
					return bad(c, where, "id",
					    "duplicate cluster id");
			cl->rtt_ms = rtt;
			cl->eng = *def;
			sc->nclusters = n + 1;
			if ((e = json_object_get(o, "engine")) != NULL) {
				char sub[80];

				snprintf(sub, sizeof(sub), "%s.engine", where);
				if ((rc = parse_engine(c, e, sub, &cl->eng)) != 0)
					return rc;
			}
		}
	}
	return 0;
}

/* sessions.diurnal and sessions.bursts: the arrival-rate profile. */
static int
parse_profile(ctx *c, sim_sessions *s, const json_t *o)
{
	static const char *const dfields[] = { "amplitude", "period_s",
	    "peak_s", NULL };
	static const char *const bfields[] = { "start_s", "end_s", "factor",
	    NULL };
	const json_t *d = json_object_get(o, "diurnal");
	const json_t *b = json_object_get(o, "bursts");
	double period = 86400, peak = 0;
	char where[48];
	size_t i;
	int rc;

	if (d != NULL) {
		if ((rc = check_fields(c, d, "sessions.diurnal", dfields)) != 0 ||
		    (rc = get_num(c, d, "sessions.diurnal", "amplitude", 0,
		    false, 0.99, true, &s->diurnal_amp)) != 0 ||
		    (rc = get_num(c, d, "sessions.diurnal", "period_s", 0, true,
		    1e9, false, &period)) != 0 ||
		    (rc = get_num(c, d, "sessions.diurnal", "peak_s", 0, false,
		    1e9, false, &peak)) != 0)
			return rc;
		s->diurnal_period_ms = period * 1000.0;
		/* sin peaks a quarter period after the phase. */
		s->diurnal_phase_ms = (peak - period / 4) * 1000.0;
	}
	if (b == NULL)
		return 0;
	if (!json_is_array(b) || json_array_size(b) > SIM_MAX_BURSTS)
		return bad(c, "sessions", "bursts", "expected an array of at "
		    "most 16 bursts");
	for (i = 0; i < json_array_size(b); i++) {
		const json_t *x = json_array_get(b, i);
		double st = 0, en = 0, f = 1;

		snprintf(where, sizeof(where), "sessions.bursts[%zu]", i);
		if ((rc = check_fields(c, x, where, bfields)) != 0 ||
		    (rc = get_num(c, x, where, "start_s", 0, false, 1e9, true,
		    &st)) != 0 ||
		    (rc = get_num(c, x, where, "end_s", 0, true, 1e9, true,
		    &en)) != 0 ||
		    (rc = get_num(c, x, where, "factor", 0, false, 1000, true,
		    &f)) != 0)
			return rc;
		if (en <= st)
			return bad(c, where, "end_s", "must be > start_s");
		s->bursts[i].start_ms = st * 1000.0;
		s->bursts[i].end_ms = en * 1000.0;
		s->bursts[i].factor = f;
		s->nbursts = i + 1;
	}
	return 0;
}

static void
sessions_defaults(sim_sessions *s)
{
	s->turns.min = s->turns.max = 1;
	s->first_input.min = s->first_input.max = 1000;
	s->turn_input.min = s->turn_input.max = 100;
	s->output.min = s->output.max = 100;
	s->max_context = 131072;
	s->think.kind = DIST_EXPONENTIAL;
	s->think.max = UINT64_MAX;
}

static int
parse_sessions(ctx *c, scenario *sc, const json_t *o)
{
	static const char *const fields[] = { "rate_per_s", "turns",
	    "think_time_ms", "first_input_tokens", "turn_input_tokens",
	    "output_tokens", "max_context_tokens", "priority", "diurnal",
	    "bursts", NULL };
	sim_sessions *s = &sc->sessions;
	const json_t *think;
	uint64_t prio = 0;
	int rc;

	sessions_defaults(s);
	if (o == NULL)
		return bad(c, "", "sessions", "missing");
	if ((rc = check_fields(c, o, "sessions", fields)) != 0 ||
	    (rc = get_num(c, o, "sessions", "rate_per_s", 0, true, 1e7, true,
	    &s->rate_per_s)) != 0 ||
	    (rc = get_dist(c, o, "sessions", "turns", 1, &s->turns)) != 0 ||
	    (rc = get_dist(c, o, "sessions", "first_input_tokens", 1,
	    &s->first_input)) != 0 ||
	    (rc = get_dist(c, o, "sessions", "turn_input_tokens", 0,
	    &s->turn_input)) != 0 ||
	    (rc = get_dist(c, o, "sessions", "output_tokens", 1,
	    &s->output)) != 0 ||
	    (rc = get_u64(c, o, "sessions", "max_context_tokens", 1,
	    UINT64_C(1) << 40, false, &s->max_context)) != 0 ||
	    (rc = get_u64(c, o, "sessions", "priority", 0, UINT32_MAX, false,
	    &prio)) != 0 ||
	    (rc = parse_profile(c, s, o)) != 0)
		return rc;
	/* think_time_ms: the mean of an exponential, or a distribution. */
	think = json_object_get(o, "think_time_ms");
	if (think != NULL && json_is_object(think)) {
		if ((rc = get_dist(c, o, "sessions", "think_time_ms", 0,
		    &s->think)) != 0)
			return rc;
	} else if ((rc = get_num(c, o, "sessions", "think_time_ms", 0, false,
	    1e9, false, &s->think.a)) != 0)
		return rc;
	if (s->turns.max > 100000)
		return bad(c, "sessions", "turns", "at most 100000");
	s->priority = (uint32_t)prio;
	return 0;
}

/* Top-level "classes": [{"weight", "model", "routing_key"}]; without it
 * one class, the scenario's model and routing key. */
static int
parse_classes(ctx *c, scenario *sc, const json_t *arr)
{
	static const char *const fields[] = { "weight", "model",
	    "routing_key", NULL };
	size_t i, k;
	int rc;

	if (arr == NULL) {
		sim_class *cl = &sc->classes[0];

		cl->weight = 1;
		memcpy(cl->model, sc->model, sizeof(cl->model));
		memcpy(cl->routing_key, sc->routing_key,
		    sizeof(cl->routing_key));
		cl->has_routing_key = sc->has_routing_key;
		sc->nclasses = 1;
	} else {
		if (!json_is_array(arr) || json_array_size(arr) == 0 ||
		    json_array_size(arr) > SIM_MAX_CLASSES)
			return bad(c, "", "classes", "expected an array of 1 to "
			    "16 classes");
		for (i = 0; i < json_array_size(arr); i++) {
			const json_t *o = json_array_get(arr, i);
			sim_class *cl = &sc->classes[i];
			char where[32];

			snprintf(where, sizeof(where), "classes[%zu]", i);
			cl->weight = 1;
			snprintf(cl->model, sizeof(cl->model), "%s", sc->model);
			if ((rc = check_fields(c, o, where, fields)) != 0 ||
			    (rc = get_num(c, o, where, "weight", 0, true, 1e9,
			    false, &cl->weight)) != 0 ||
			    (rc = get_str(c, o, where, "model", cl->model,
			    sizeof(cl->model), NULL)) != 0 ||
			    (rc = get_str(c, o, where, "routing_key",
			    cl->routing_key, sizeof(cl->routing_key),
			    &cl->has_routing_key)) != 0)
				return rc;
			for (k = 0; k < i; k++)
				if (strcmp(sc->classes[k].model, cl->model) == 0 &&
				    strcmp(sc->classes[k].routing_key,
				    cl->routing_key) == 0)
					return bad(c, where, "model",
					    "duplicate (model, routing_key)");
			sc->nclasses = i + 1;
		}
	}
	for (i = 0; i < sc->nclasses; i++) {
		sim_class *cl = &sc->classes[i];

		for (k = 0; k < sc->nmodels; k++)
			if (strcmp(sc->models[k], cl->model) == 0)
				break;
		if (k == sc->nmodels)
			sc->models[sc->nmodels++] = cl->model;
		cl->model_idx = (uint32_t)k;
	}
	return 0;
}

/* clusters[i].models: the class models it serves (default: all). */
static int
parse_cluster_models(ctx *c, scenario *sc, const json_t *arr)
{
	size_t i, n = 0, k, m;
	int rc;

	for (i = 0; i < json_array_size(arr); i++) {
		const json_t *o = json_array_get(arr, i);
		const json_t *ms = json_object_get(o, "models");
		json_int_t cnt = json_integer_value(json_object_get(o,
		    "count"));
		uint32_t bits = 0;
		char where[64];

		snprintf(where, sizeof(where), "clusters[%zu]", i);
		if (ms == NULL)
			bits = UINT32_MAX;
		else if (!json_is_array(ms) || json_array_size(ms) == 0)
			return bad(c, where, "models", "expected a non-empty "
			    "array of model names");
		for (k = 0; ms != NULL && k < json_array_size(ms); k++) {
			const json_t *v = json_array_get(ms, k);

			for (m = 0; m < sc->nmodels; m++)
				if (json_is_string(v) && strcmp(sc->models[m],
				    json_string_value(v)) == 0)
					break;
			if (m == sc->nmodels)
				return bad(c, where, "models", "not a model of "
				    "the traffic classes");
			bits |= UINT32_C(1) << m;
		}
		for (k = 0; k < (size_t)(cnt > 0 ? cnt : 1); k++)
			sc->clusters[n++].models = bits;
	}
	/* Every model needs a cluster. */
	for (m = 0; m < sc->nmodels; m++) {
		for (k = 0; k < sc->nclusters; k++)
			if (sc->clusters[k].models >> m & 1)
				break;
		if (k == sc->nclusters) {
			rc = sg_seterr(c->err, SG_EINVAL, "%s: clusters: no "
			    "cluster serves model %s", c->file, sc->models[m]);
			return rc;
		}
	}
	return 0;
}

/* Top-level "drains": [{"cluster", "start_s", "end_s", "restart"}]. */
static int
parse_drains(ctx *c, scenario *sc, const json_t *arr)
{
	static const char *const fields[] = { "cluster", "start_s", "end_s",
	    "restart", NULL };
	char where[32], id[SG_ID_MAX + 1];
	size_t i, k;
	int rc;

	if (arr == NULL)
		return 0;
	if (!json_is_array(arr) || json_array_size(arr) > SIM_MAX_DRAINS)
		return bad(c, "", "drains", "expected an array of at most 16 "
		    "drains");
	for (i = 0; i < json_array_size(arr); i++) {
		const json_t *o = json_array_get(arr, i);
		sim_drain *d = &sc->drains[i];
		bool has_id = false;
		double st = 0, en = 0;

		snprintf(where, sizeof(where), "drains[%zu]", i);
		if ((rc = check_fields(c, o, where, fields)) != 0 ||
		    (rc = get_str(c, o, where, "cluster", id, sizeof(id),
		    &has_id)) != 0 ||
		    (rc = get_num(c, o, where, "start_s", 0, false, 1e9, true,
		    &st)) != 0 ||
		    (rc = get_num(c, o, where, "end_s", 0, true, 1e9, true,
		    &en)) != 0 ||
		    (rc = get_bool(c, o, where, "restart", &d->restart)) != 0)
			return rc;
		if (!has_id)
			return bad(c, where, "cluster", "missing");
		for (k = 0; k < sc->nclusters; k++)
			if (strcmp(sc->clusters[k].id, id) == 0)
				break;
		if (k == sc->nclusters)
			return bad(c, where, "cluster", "no such cluster");
		if (en <= st)
			return bad(c, where, "end_s", "must be > start_s");
		d->cluster = k;
		d->start_ms = st * 1000.0;
		d->end_ms = en * 1000.0;
		sc->ndrains = i + 1;
	}
	return 0;
}

static int
parse_background(ctx *c, scenario *sc, const json_t *arr)
{
	static const char *const fields[] = { "cluster", "start_s", "end_s",
	    "rate_per_s", "input_tokens", "output_tokens", "cache", NULL };
	char where[48], id[SG_ID_MAX + 1];
	size_t i, k;
	int rc;

	if (arr == NULL)
		return 0;
	if (!json_is_array(arr))
		return bad(c, "", "background", "expected an array");
	if (json_array_size(arr) > SIM_MAX_BG)
		return bad(c, "", "background", "too many entries");
	for (i = 0; i < json_array_size(arr); i++) {
		json_t *o = json_array_get(arr, i);
		sim_bg *b = &sc->bg[i];
		bool has_id = false;
		double start = 0, end = 0;

		snprintf(where, sizeof(where), "background[%zu]", i);
		b->input.min = b->input.max = 1000;
		b->output.min = b->output.max = 100;
		b->cache = true;
		if ((rc = check_fields(c, o, where, fields)) != 0 ||
		    (rc = get_str(c, o, where, "cluster", id, sizeof(id),
		    &has_id)) != 0 ||
		    (rc = get_num(c, o, where, "start_s", 0, false, 1e9, false,
		    &start)) != 0 ||
		    (rc = get_num(c, o, where, "end_s", 0, true, 1e9, true,
		    &end)) != 0 ||
		    (rc = get_num(c, o, where, "rate_per_s", 0, true, 1e7, true,
		    &b->rate_per_s)) != 0 ||
		    (rc = get_dist(c, o, where, "input_tokens", 1,
		    &b->input)) != 0 ||
		    (rc = get_dist(c, o, where, "output_tokens", 1,
		    &b->output)) != 0 ||
		    (rc = get_bool(c, o, where, "cache", &b->cache)) != 0)
			return rc;
		if (!has_id)
			return bad(c, where, "cluster", "missing");
		for (k = 0; k < sc->nclusters; k++)
			if (strcmp(sc->clusters[k].id, id) == 0)
				break;
		if (k == sc->nclusters)
			return bad(c, where, "cluster", "no such cluster");
		if (end <= start)
			return bad(c, where, "end_s", "must be > start_s");
		b->cluster = k;
		b->start_ms = start * 1000.0;
		b->end_ms = end * 1000.0;
		sc->nbg = i + 1;
	}
	return 0;
}

/* --- rows ------------------------------------------------------------------ */

static const struct {
	const char	*name;
	int		 alg;
	int		 lca;
} row_names[] = {
	{ "wait-and-widen/off",		SG_ALG_WAIT_AND_WIDEN,	0 },
	{ "wait-and-widen/on",		SG_ALG_WAIT_AND_WIDEN,	1 },
	{ "pulsar-wait-and-widen/off",	SG_ALG_PULSAR_WAW,	0 },
	{ "pulsar-wait-and-widen/on",	SG_ALG_PULSAR_WAW,	1 },
	{ "round-robin",		SG_ALG_ROUND_ROBIN,	-1 },
	{ "power-of-n",			SG_ALG_POWER_OF_N,	-1 },
	{ "pulsar",			SG_ALG_PULSAR,		-1 },
	{ "perfect",			SIM_ALG_PERFECT,	-1 },
	{ "random",			SG_ALG_RANDOM,		-1 },
	{ "perfect-ttft",		SIM_ALG_PERFECT,	-2 },
};
#define NROWNAMES	(sizeof(row_names) / sizeof(row_names[0]))
#define NDEFAULTROWS	8	/* every name above but random */

static int
add_row(scenario *sc, size_t k)
{
	sim_row *r;

	if (sc->nrows == SIM_MAX_ROWS)
		return SG_ERANGE;
	r = &sc->rows[sc->nrows++];
	memset(r, 0, sizeof(*r));
	r->alg = row_names[k].alg;
	r->lca = row_names[k].lca;
	snprintf(r->name, sizeof(r->name), "%s", row_names[k].name);
	return 0;
}

static int
find_row(const char *name, size_t len)
{
	size_t k;

	for (k = 0; k < NROWNAMES; k++)
		if (strlen(row_names[k].name) == len &&
		    strncmp(row_names[k].name, name, len) == 0)
			return (int)k;
	return -1;
}

/* Defaults when the scenario has no "algorithms" entry for an algorithm:
 * the session-aware pair with k = 1, X = 300 ms and a 0.1 discount. */
static const char *
default_fields(int alg)
{
	switch (alg) {
	case SG_ALG_WAIT_AND_WIDEN:
		return "{\"cache_affinity_backend_selection_count\": 1,"
		    "\"cache_affinity_wait_ms\": 300,"
		    "\"cache_affinity_input_tokens_scale\": 0.1}";
	case SG_ALG_PULSAR_WAW:
		return "{\"cache_affinity_backend_selection_count\": 1,"
		    "\"cache_affinity_wait_ms\": 300,"
		    "\"cache_affinity_input_tokens_scale\": 0.1}";
	default:
		return "{}";
	}
}

/*
 * The perfect row's settings: algorithms.perfect {"max_queued",
 * "objective"}; max_queued defaults to wait-and-widen's (same capacity
 * rule), objective to "kv" (oracle.h).
 */
static uint64_t
waw_field(const json_t *algs, const char *field, uint64_t def)
{
	const json_t *w = algs != NULL ? json_object_get(algs,
	    "wait-and-widen") : NULL;
	const json_t *v = w != NULL ? json_object_get(w, field) : NULL;

	if (w == NULL)
		return def;
	return json_is_integer(v) && json_integer_value(v) >= 0 ?
	    (uint64_t)json_integer_value(v) : 0;
}

/*
 * The perfect rows' settings, from algorithms.perfect {"max_queued",
 * "wait_ms"}: by default wait-and-widen's max_queued (the same capacity
 * rule) and no limit on the wait for the cluster that holds the most of the
 * prompt.  "perfect" orders clusters by cached prefix first,
 * "perfect-ttft" by estimated TTFT first and never waits for a cache.
 */
static int
perfect_conf(ctx *c, sim_row *r, const json_t *algs)
{
	static const char *const fields[] = { "max_queued", "wait_ms", NULL };
	const json_t *p = algs != NULL ? json_object_get(algs, "perfect") :
	    NULL;
	uint64_t wait = 0;
	bool wait_set;
	int rc;

	r->objective = r->lca == -2 ? ORC_TTFT_FIRST : ORC_KV_FIRST;
	r->lca = -1;
	r->max_queued = waw_field(algs, "max_queued", 0);
	if (p != NULL && ((rc = check_fields(c, p, "algorithms.perfect",
	    fields)) != 0 ||
	    (rc = get_u64(c, p, "algorithms.perfect", "max_queued", 0,
	    UINT32_MAX, false, &r->max_queued)) != 0 ||
	    (rc = get_u64(c, p, "algorithms.perfect", "wait_ms", 0, 3600000,
	    false, &wait)) != 0))
		return rc;
	wait_set = p != NULL && json_object_get(p, "wait_ms") != NULL;
	if (r->objective != ORC_KV_FIRST)
		r->patience_ms = 0;
	else
		r->patience_ms = wait_set ? (double)wait : INFINITY;
	return 0;
}

static int
build_conf(ctx *c, scenario *sc, sim_row *r, const json_t *algs)
{
	json_t *def = NULL, *doc = NULL, *models;
	const char *name;
	char *text = NULL;
	sg_error e;
	size_t m;
	int rc = SG_ENOMEM;

	if (r->alg == SIM_ALG_PERFECT)
		return perfect_conf(c, r, algs);
	name = sg_algorithm_name(r->alg);
	def = algs != NULL ? json_object_get(algs, name) : NULL;
	if (def != NULL)
		def = json_deep_copy(def);
	else
		def = json_loads(default_fields(r->alg), 0, NULL);
	if (def == NULL)
		goto out;
	json_object_set_new(def, "algorithm", json_string(name));
	if (r->lca == 1)
		json_object_set_new(def, "last_cluster_affinity", json_true());
	if ((doc = json_object()) == NULL || (models = json_object()) == NULL)
		goto out;
	json_object_set_new(doc, "models", models);
	for (m = 0; m < sc->nmodels; m++)
		json_object_set(models, sc->models[m], def);
	if ((text = json_dumps(doc, JSON_COMPACT)) == NULL)
		goto out;
	sg_error_clear(&e);
	if (sg_lbconf_parse(&r->conf, text, strlen(text), "lb-config",
	    &e) != 0) {
		rc = sg_seterr(c->err, SG_EINVAL, "%s: algorithms.%s (row %s): "
		    "%s", c->file, name, r->name, e.text);
		goto out;
	}
	rc = 0;
out:
	if (rc == SG_ENOMEM)
		sg_seterr(c->err, rc, "out of memory");
	free(text);
	json_decref(def);
	json_decref(doc);
	return rc;
}

static int
parse_algorithms(ctx *c, const json_t *algs)
{
	const char *k;
	json_t *v;
	int alg;

	if (algs == NULL)
		return 0;
	if (!json_is_object(algs))
		return bad(c, "", "algorithms", "expected an object");
	json_object_foreach((json_t *)algs, k, v) {
		if (strcmp(k, "perfect") == 0)
			continue;	/* checked with the row */
		if (sg_algorithm_parse(k, strlen(k), &alg) != 0 ||
		    strcmp(k, sg_algorithm_name(alg)) != 0)
			return bad(c, "algorithms", k, "not a canonical "
			    "algorithm name");
		if (!json_is_object(v))
			return bad(c, "algorithms", k, "expected an object");
		if (json_object_get(v, "algorithm") != NULL ||
		    json_object_get(v, "last_cluster_affinity") != NULL) {
			char sub[80];

			snprintf(sub, sizeof(sub), "algorithms.%s", k);
			return bad(c, sub, json_object_get(v, "algorithm") ?
			    "algorithm" : "last_cluster_affinity",
			    "set by the row, not here");
		}
	}
	return 0;
}

static int
parse_rows(ctx *c, scenario *sc, const json_t *rows)
{
	size_t i;
	int k;

	if (rows == NULL) {
		for (i = 0; i < NDEFAULTROWS; i++)
			add_row(sc, i);
		return 0;
	}
	if (!json_is_array(rows) || json_array_size(rows) == 0 ||
	    json_array_size(rows) > SIM_MAX_ROWS)
		return bad(c, "", "rows", "expected an array of 1 to 16 row "
		    "names");
	for (i = 0; i < json_array_size(rows); i++) {
		json_t *v = json_array_get(rows, i);
		char where[32];

		snprintf(where, sizeof(where), "rows[%zu]", i);
		if (!json_is_string(v) || (k = find_row(json_string_value(v),
		    json_string_length(v))) < 0)
			return sg_seterr(c->err, SG_EINVAL, "%s: %s: unknown row "
			    "(one of wait-and-widen/off, wait-and-widen/on, "
			    "pulsar-wait-and-widen/off, pulsar-wait-and-widen/on, "
			    "round-robin, power-of-n, pulsar, perfect, random, "
			    "perfect-ttft)",
			    c->file,
			    where);
		add_row(sc, (size_t)k);
	}
	return 0;
}

/* The sessions: generated ("sessions") or replayed ("trace", a path
 * relative to the scenario file's directory). */
static int
parse_traffic(ctx *c, scenario *sc, const json_t *root)
{
	const json_t *tr = json_object_get(root, "trace");
	const char *slash;
	char path[4096];
	int rc;

	if (tr == NULL)
		return parse_sessions(c, sc, json_object_get(root, "sessions"));
	if (json_object_get(root, "sessions") != NULL)
		return bad(c, "", "trace", "excludes sessions");
	if (!json_is_string(tr) || json_string_length(tr) == 0)
		return bad(c, "", "trace", "expected a file name");
	sessions_defaults(&sc->sessions);
	slash = strrchr(c->file, '/');
	if (json_string_value(tr)[0] == '/' || slash == NULL ||
	    strcmp(c->file, "-") == 0)
		snprintf(path, sizeof(path), "%s", json_string_value(tr));
	else
		snprintf(path, sizeof(path), "%.*s/%s", (int)(slash - c->file),
		    c->file, json_string_value(tr));
	if ((rc = trace_load(sc, path, c->err)) != 0)
		return rc == SG_ENOMEM || rc == SG_EINVAL ? rc : SG_EINVAL;
	sc->has_trace = true;
	return 0;
}

static int
parse(ctx *c, scenario *sc, const json_t *root)
{
	static const char *const fields[] = { "name", "description", "seed",
	    "duration_s", "warmup_s", "model", "routing_key",
	    "stats_interval_ms", "stats_staleness_ms", "recheck_cap_ms",
	    "max_wait_ms", "retries", "slo_ttft_ms", "engine", "clusters",
	    "sessions", "background", "algorithms", "rows", "classes",
	    "drains", "trace", NULL };
	eng_config def;
	double dur = 0, warm = 0;
	uint64_t retries = 2;
	json_t *v;
	size_t i;
	int rc;

	if ((rc = check_fields(c, root, "", fields)) != 0)
		return rc;
	v = json_object_get(root, "description");
	if (v != NULL && !json_is_string(v))
		return bad(c, "", "description", "expected a string");
	snprintf(sc->model, sizeof(sc->model), "m");
	sc->seed = 1;
	sc->stats_interval_ms = 250;
	sc->recheck_cap_ms = 25;
	sc->slo_ttft_ms = 2000;
	if ((rc = get_str(c, root, "", "name", sc->name, sizeof(sc->name),
	    NULL)) != 0 ||
	    (rc = get_u64(c, root, "", "seed", 0, UINT64_MAX, false,
	    &sc->seed)) != 0 ||
	    (rc = get_num(c, root, "", "duration_s", 0, true, 1e7, true,
	    &dur)) != 0 ||
	    (rc = get_num(c, root, "", "warmup_s", 0, false, 1e7, false,
	    &warm)) != 0 ||
	    (rc = get_str(c, root, "", "model", sc->model, sizeof(sc->model),
	    NULL)) != 0 ||
	    (rc = get_str(c, root, "", "routing_key", sc->routing_key,
	    sizeof(sc->routing_key), &sc->has_routing_key)) != 0 ||
	    (rc = get_num(c, root, "", "stats_interval_ms", 0, true, 1e7,
	    false, &sc->stats_interval_ms)) != 0 ||
	    (rc = get_num(c, root, "", "stats_staleness_ms", 0, false, 1e7,
	    false, &sc->stats_staleness_ms)) != 0 ||
	    (rc = get_num(c, root, "", "recheck_cap_ms", 0, true, 60000,
	    false, &sc->recheck_cap_ms)) != 0 ||
	    (rc = get_u64(c, root, "", "retries", 0, SIM_MAX_RETRIES, false,
	    &retries)) != 0 ||
	    (rc = get_num(c, root, "", "slo_ttft_ms", 0, true, 1e9, false,
	    &sc->slo_ttft_ms)) != 0)
		return rc;
	if (json_object_get(root, "max_wait_ms") != NULL) {
		if ((rc = get_u64(c, root, "", "max_wait_ms", 0, UINT64_MAX,
		    false, &sc->max_wait_ms)) != 0)
			return rc;
		sc->has_max_wait = true;
	}
	if (warm >= dur)
		return bad(c, "", "warmup_s", "must be < duration_s");
	sc->duration_ms = dur * 1000.0;
	sc->warmup_ms = warm * 1000.0;
	sc->retries = (unsigned)retries;
	eng_config_default(&def);
	if ((v = json_object_get(root, "engine")) != NULL &&
	    (rc = parse_engine(c, v, "engine", &def)) != 0)
		return rc;
	if ((v = json_object_get(root, "clusters")) == NULL)
		return bad(c, "", "clusters", "missing");
	if ((rc = parse_classes(c, sc, json_object_get(root, "classes"))) != 0 ||
	    (rc = parse_clusters(c, sc, v, &def)) != 0 ||
	    (rc = parse_cluster_models(c, sc, v)) != 0 ||
	    (rc = parse_traffic(c, sc, root)) != 0 ||
	    (rc = parse_drains(c, sc, json_object_get(root, "drains"))) != 0 ||
	    (rc = parse_background(c, sc, json_object_get(root,
	    "background"))) != 0 ||
	    (rc = parse_algorithms(c, json_object_get(root, "algorithms"))) != 0 ||
	    (rc = parse_rows(c, sc, json_object_get(root, "rows"))) != 0)
		return rc;
	/* Check every engine now rather than in the middle of a run. */
	for (i = 0; i < sc->nclusters; i++) {
		const char *why = NULL;
		eng *e = NULL;

		if ((rc = eng_new(&e, &sc->clusters[i].eng, NULL, NULL,
		    &why)) != 0) {
			char where[64];

			snprintf(where, sizeof(where), "clusters[%zu].engine", i);
			return rc == EINVAL ? bad(c, where, why, "out of range") :
			    sg_seterr(c->err, SG_ENOMEM, "out of memory");
		}
		eng_free(e);
	}
	for (i = 0; i < sc->nrows; i++)
		if ((rc = build_conf(c, sc, &sc->rows[i],
		    json_object_get(root, "algorithms"))) != 0)
			return rc;
	return 0;
}

int
scenario_loadf(scenario *sc, FILE *fp, const char *path, sg_error *err)
{
	json_error_t je;
	json_t *root;
	const char *base = strrchr(path, '/');
	ctx c = { path, err };
	int rc;

	memset(sc, 0, sizeof(*sc));
	root = json_loadf(fp, JSON_REJECT_DUPLICATES, &je);
	if (root == NULL)
		return sg_seterr(err, SG_EINVAL, "%s:%d:%d: %s", path, je.line,
		    je.column, je.text);
	/* Name defaults to the file name without ".json". */
	snprintf(sc->name, sizeof(sc->name), "%s", strcmp(path, "-") == 0 ?
	    "stdin" : base != NULL ? base + 1 : path);
	if (strlen(sc->name) > 5 && strcmp(sc->name + strlen(sc->name) - 5,
	    ".json") == 0)
		sc->name[strlen(sc->name) - 5] = '\0';
	rc = parse(&c, sc, root);
	json_decref(root);
	if (rc != 0)
		scenario_free(sc);
	return rc;
}

int
scenario_load(scenario *sc, const char *path, sg_error *err)
{
	FILE *fp;
	int rc;

	if (strcmp(path, "-") == 0)
		return scenario_loadf(sc, stdin, path, err);
	memset(sc, 0, sizeof(*sc));
	if ((fp = fopen(path, "r")) == NULL) {
		rc = errno;
		sg_seterr(err, SG_EIO, "cannot open '%s': %s", path,
		    strerror(rc));
		return rc;
	}
	rc = scenario_loadf(sc, fp, path, err);
	fclose(fp);
	return rc;
}

int
scenario_bound_row(const scenario *sc)
{
	size_t i;

	for (i = 0; i < sc->nrows; i++)
		if (sc->rows[i].alg == SIM_ALG_PERFECT)
			return (int)i;
	return -1;
}

int
scenario_select_rows(scenario *sc, const char *list, sg_error *err)
{
	sim_row keep[SIM_MAX_ROWS];
	bool moved[SIM_MAX_ROWS] = { false };
	size_t n = 0, i;
	const char *p = list;
	int rc = 0;

	while (*p != '\0') {
		size_t len = strcspn(p, ",");

		for (i = 0; i < sc->nrows; i++)
			if (strlen(sc->rows[i].name) == len &&
			    strncmp(sc->rows[i].name, p, len) == 0)
				break;
		if (i == sc->nrows) {
			rc = sg_seterr(err, SG_EINVAL, "--rows: no row '%.*s' in "
			    "the scenario", (int)len, p);
			goto fail;
		}
		if (moved[i]) {
			rc = sg_seterr(err, SG_EINVAL, "--rows: row '%.*s' named "
			    "twice", (int)len, p);
			goto fail;
		}
		if (n == SIM_MAX_ROWS)
			break;
		keep[n++] = sc->rows[i];
		moved[i] = true;
		sc->rows[i].conf = NULL;	/* moved */
		p += len;
		if (*p == ',')
			p++;
	}
	if (n == 0) {
		rc = sg_seterr(err, SG_EINVAL, "--rows: empty list");
		goto fail;
	}
	for (i = 0; i < sc->nrows; i++)
		sg_lbconf_free(sc->rows[i].conf);
	memcpy(sc->rows, keep, n * sizeof(keep[0]));
	sc->nrows = n;
	return 0;
fail:
	/* Give the moved definitions back so scenario_free frees them. */
	for (i = 0; i < n; i++)
		sg_lbconf_free(keep[i].conf);
	return rc;
}

void
scenario_free(scenario *sc)
{
	size_t i;

	for (i = 0; i < sc->nrows; i++)
		sg_lbconf_free(sc->rows[i].conf);
	free(sc->clusters);
	trace_free(&sc->trace);
	memset(sc, 0, sizeof(*sc));
}
