/*
 * trace.c — sg-sim's NDJSON traces: export a scenario's session traffic,
 * and load a trace to replay instead of generated sessions.
 *
 * One request a line, a JSON object:
 *
 *	{"time_ms": 1234.5, "session": "s17", "turn": 2,
 *	 "input_tokens": 5210, "output_tokens": 180, "think_ms": 8012.25,
 *	 "model": "m", "routing_key": "k"}
 *
 * time_ms (or time_s) is when the request may be sent at the earliest;
 * turn 2 and later are sent at that time or think_ms (default 0) after
 * the previous turn's answer, whichever is later, so a trace of absolute
 * timestamps replays open-loop (but never before the answer a turn follows)
 * and a trace of think times replays closed-loop.  input_tokens is the whole
 * prompt (history included).  model and routing_key pick the scenario's
 * traffic class (default: the first class).  A session's lines come in
 * turn order, 1, 2, ...; sessions may interleave.
 *
 * The export writes each generated session's turns with the session's
 * arrival as time_ms and the drawn think times: the same draws, in the same
 * order, as the simulation makes, so replaying the export reproduces the
 * scenario's report exactly (numbers are printed with 17 significant
 * digits, which read back to the same doubles).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sg-sim/sim.h"

#define TRACE_ID_MAX	64

/* --- export ---------------------------------------------------------------- */

static void
put_str(FILE *fp, const char *key, const char *v)
{
	/* Ids are checked printable ASCII without quotes or backslashes. */
	fprintf(fp, ",\"%s\":\"%s\"", key, v);
}

int
trace_export(FILE *fp, const scenario *sc)
{
	const sim_sessions *ss = &sc->sessions;
	uint64_t arr = sim_stream_seed(sc->seed, 2, 0);
	double t = 0;
	uint32_t id;

	for (id = 0;; id++) {
		uint64_t rng, context = 0, in, out, turns;
		uint32_t k, cls;
		double think = 0;

		t = sim_next_arrival(sc, &arr, t);
		if (!(t < sc->duration_ms))
			break;
		rng = sim_stream_seed(sc->seed, 1, id);
		turns = sim_draw(&rng, &ss->turns);
		cls = sim_draw_class(sc, id);
		for (k = 1; k <= turns; k++) {
			if (k > 1)
				think = sim_draw_ms(&rng, &ss->think);
			in = k == 1 ? sim_draw(&rng, &ss->first_input) :
			    context + sim_draw(&rng, &ss->turn_input);
			if (in > ss->max_context)
				in = ss->max_context;
			if (in == 0)
				in = 1;
			out = sim_draw(&rng, &ss->output);
			context = in + out;
			fprintf(fp, "{\"time_ms\":%.17g,\"session\":\"s%u\","
			    "\"turn\":%u,\"input_tokens\":%llu,"
			    "\"output_tokens\":%llu", t, (unsigned)id,
			    (unsigned)k, (unsigned long long)in,
			    (unsigned long long)out);
			if (k > 1)
				fprintf(fp, ",\"think_ms\":%.17g", think);
			if (sc->nclasses > 1) {
				put_str(fp, "model", sc->classes[cls].model);
				if (sc->classes[cls].has_routing_key)
					put_str(fp, "routing_key",
					    sc->classes[cls].routing_key);
			}
			if (fputs("}\n", fp) == EOF)
				return -1;
		}
	}
	return ferror(fp) ? -1 : 0;
}

/* --- load ------------------------------------------------------------------ */

typedef struct loader {
	sim_trace	*t;
	size_t		 reqcap, sesscap, strcap, strlen_;
	size_t		*stroff;	/* session id offsets */
	uint32_t	*last_turn;	/* per session */
	double		*first_t;	/* per session */
	size_t		*first_line;
	uint32_t	*tab;		/* id hash table: session + 1 */
	size_t		 tabcap;
} loader;

static uint64_t
fnv(const char *s, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ULL;
	size_t i;

	for (i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 0x100000001b3ULL;
	return h;
}

static int
tab_rehash(loader *l)
{
	size_t n = l->tabcap ? l->tabcap * 2 : 1024, i;
	uint32_t *tab = calloc(n, sizeof(*tab));

	if (tab == NULL)
		return SG_ENOMEM;
	for (i = 0; i < l->t->nsess; i++) {
		const char *id = l->t->strings + l->stroff[i];
		size_t h = (size_t)fnv(id, strlen(id)) & (n - 1);

		while (tab[h] != 0)
			h = (h + 1) & (n - 1);
		tab[h] = (uint32_t)(i + 1);
	}
	free(l->tab);
	l->tab = tab;
	l->tabcap = n;
	return 0;
}

/* The session of id, created (at time t, line) if new; SIZE_MAX on
 * ENOMEM. */
static size_t
session_of(loader *l, const char *id, size_t n, double t, size_t line,
    bool *created)
{
	sim_trace *tr = l->t;
	size_t h, k;

	*created = false;
	if ((tr->nsess + 1) * 2 > l->tabcap && tab_rehash(l) != 0)
		return SIZE_MAX;
	h = (size_t)fnv(id, n) & (l->tabcap - 1);
	while (l->tab[h] != 0) {
		k = l->tab[h] - 1;
		if (strncmp(tr->strings + l->stroff[k], id, n) == 0 &&
		    tr->strings[l->stroff[k] + n] == '\0')
			return k;
		h = (h + 1) & (l->tabcap - 1);
	}
	k = tr->nsess;
	if (sim_grow((void **)&tr->strings, &l->strcap, 1, l->strlen_ + n +
	    1, 64) != 0 ||
	    sim_grow((void **)&l->stroff, &l->sesscap, sizeof(size_t),
	    k + 1, 64) != 0)
		return SIZE_MAX;
	/* The other per-session arrays follow sesscap. */
	{
		size_t cap = l->sesscap;
		uint32_t *lt = realloc(l->last_turn, cap * sizeof(*lt));
		double *ft;
		size_t *fl;

		if (lt == NULL)
			return SIZE_MAX;
		l->last_turn = lt;
		if ((ft = realloc(l->first_t, cap * sizeof(*ft))) == NULL)
			return SIZE_MAX;
		l->first_t = ft;
		if ((fl = realloc(l->first_line, cap * sizeof(*fl))) == NULL)
			return SIZE_MAX;
		l->first_line = fl;
	}
	memcpy(tr->strings + l->strlen_, id, n);
	tr->strings[l->strlen_ + n] = '\0';
	l->stroff[k] = l->strlen_;
	l->strlen_ += n + 1;
	l->last_turn[k] = 0;
	l->first_t[k] = t;
	l->first_line[k] = line;
	l->tab[h] = (uint32_t)(k + 1);
	tr->nsess++;
	*created = true;
	return k;
}

static int
bad_line(sg_error *err, const char *path, size_t line, const char *field,
    const char *what)
{
	return sg_seterr(err, SG_EINVAL, "%s:%zu: %s%s%s", path, line,
	    field != NULL ? field : "", field != NULL ? ": " : "", what);
}

static bool
id_ok(const char *s, size_t n)
{
	size_t i;

	if (n == 0 || n > TRACE_ID_MAX)
		return false;
	for (i = 0; i < n; i++)
		if (s[i] <= ' ' || s[i] > '~' || s[i] == '"' || s[i] == '\\')
			return false;
	return true;
}

/* The class of (model, routing_key); -1 if none. */
static int
class_of(const scenario *sc, const json_t *o)
{
	const json_t *m = json_object_get(o, "model");
	const json_t *k = json_object_get(o, "routing_key");
	size_t i;

	if (m == NULL && k == NULL)
		return 0;
	for (i = 0; i < sc->nclasses; i++) {
		const sim_class *c = &sc->classes[i];

		if (m != NULL && (!json_is_string(m) ||
		    strcmp(json_string_value(m), c->model) != 0))
			continue;
		if (k == NULL ? c->has_routing_key : (!json_is_string(k) ||
		    !c->has_routing_key || strcmp(json_string_value(k),
		    c->routing_key) != 0))
			continue;
		return (int)i;
	}
	return -1;
}

static int
u64_field(const json_t *o, const char *f, uint64_t min, uint64_t *out)
{
	const json_t *v = json_object_get(o, f);

	if (!json_is_integer(v) || json_integer_value(v) < (json_int_t)min ||
	    json_integer_value(v) > ((json_int_t)1 << 40))
		return -1;
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

static int
real_field(const json_t *o, const char *f, double *out)
{
	const json_t *v = json_object_get(o, f);

	if (v == NULL)
		return 1;
	if (!json_is_number(v) || !isfinite(json_number_value(v)) ||
	    json_number_value(v) < 0 || json_number_value(v) > 1e13)
		return -1;
	*out = json_number_value(v);
	return 0;
}

/* One line into the loader. */
static int
load_line(loader *l, scenario *sc, const char *path, size_t line,
    const char *text, size_t len, sg_error *err)
{
	static const char *const fields[] = { "time_ms", "time_s", "session",
	    "turn", "input_tokens", "output_tokens", "think_ms", "model",
	    "routing_key", NULL };
	sim_trace *tr = l->t;
	json_error_t je;
	json_t *o = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je);
	const char *k, *id;
	json_t *v;
	sim_treq q;
	uint64_t turn;
	size_t si, i;
	bool created;
	int rc = SG_EINVAL, cls, r;

	memset(&q, 0, sizeof(q));
	if (o == NULL || !json_is_object(o)) {
		rc = bad_line(err, path, line, NULL, o == NULL ? je.text :
		    "expected an object");
		goto out;
	}
	json_object_foreach(o, k, v) {
		for (i = 0; fields[i] != NULL; i++)
			if (strcmp(k, fields[i]) == 0)
				break;
		if (fields[i] == NULL) {
			rc = bad_line(err, path, line, k, "unknown field");
			goto out;
		}
	}
	if ((r = real_field(o, "time_ms", &q.t_ms)) == 1 &&
	    (r = real_field(o, "time_s", &q.t_ms)) == 0)
		q.t_ms *= 1000.0;
	if (r != 0) {
		rc = bad_line(err, path, line, "time_ms", "expected a number >= "
		    "0 (or time_s)");
		goto out;
	}
	if ((r = real_field(o, "think_ms", &q.think_ms)) < 0) {
		rc = bad_line(err, path, line, "think_ms", "expected a number "
		    ">= 0");
		goto out;
	}
	v = json_object_get(o, "session");
	if (!json_is_string(v) || !id_ok(json_string_value(v),
	    json_string_length(v))) {
		rc = bad_line(err, path, line, "session", "expected 1 to 64 "
		    "printable characters, no quotes or backslashes");
		goto out;
	}
	id = json_string_value(v);
	if (u64_field(o, "turn", 1, &turn) != 0 || turn > 100000) {
		rc = bad_line(err, path, line, "turn", "expected an integer from "
		    "1 to 100000");
		goto out;
	}
	if (u64_field(o, "input_tokens", 1, &q.input) != 0 ||
	    u64_field(o, "output_tokens", 1, &q.output) != 0) {
		rc = bad_line(err, path, line, json_object_get(o,
		    "input_tokens") == NULL || u64_field(o, "input_tokens", 1,
		    &q.input) != 0 ? "input_tokens" : "output_tokens",
		    "expected an integer >= 1");
		goto out;
	}
	if ((cls = class_of(sc, o)) < 0) {
		rc = bad_line(err, path, line, "model", "no traffic class "
		    "with this model and routing_key");
		goto out;
	}
	q.cls = (uint32_t)cls;
	q.turn = (uint32_t)turn;
	if ((si = session_of(l, id, json_string_length(v), q.t_ms, line,
	    &created)) == SIZE_MAX) {
		rc = sg_seterr(err, SG_ENOMEM, "out of memory");
		goto out;
	}
	if (turn != (uint64_t)l->last_turn[si] + 1) {
		char msg[96];

		snprintf(msg, sizeof(msg), "expected %u (a session's turns in "
		    "order from 1)", l->last_turn[si] + 1);
		rc = bad_line(err, path, line, "turn", msg);
		goto out;
	}
	l->last_turn[si] = (uint32_t)turn;
	q.sess = (uint32_t)si;
	if (sim_grow((void **)&tr->req, &l->reqcap, sizeof(*tr->req),
	    tr->nreq + 1, 64) != 0) {
		rc = sg_seterr(err, SG_ENOMEM, "out of memory");
		goto out;
	}
	tr->req[tr->nreq++] = q;
	rc = 0;
out:
	json_decref(o);
	return rc;
}

/* Sessions by first-turn time, then by the line of their first turn. */
static const loader *sort_l;

static int
cmp_sess(const void *a, const void *b)
{
	size_t x = *(const size_t *)a, y = *(const size_t *)b;
	double tx = sort_l->first_t[x], ty = sort_l->first_t[y];

	if (tx != ty)
		return tx < ty ? -1 : 1;
	return sort_l->first_line[x] < sort_l->first_line[y] ? -1 :
	    sort_l->first_line[x] > sort_l->first_line[y];
}

/* Group the requests by session (stable: turns stay in order) and order
 * the sessions. */
static int
finish(loader *l)
{
	sim_trace *tr = l->t;
	size_t *order = NULL, *start = NULL, i;
	sim_treq *req = NULL;
	int rc = SG_ENOMEM;

	if (tr->nsess == 0)
		return 0;
	if ((order = malloc(tr->nsess * sizeof(*order))) == NULL ||
	    (start = calloc(tr->nsess + 1, sizeof(*start))) == NULL ||
	    (req = malloc(tr->nreq * sizeof(*req))) == NULL ||
	    (tr->sess = calloc(tr->nsess, sizeof(*tr->sess))) == NULL)
		goto out;
	for (i = 0; i < tr->nsess; i++)
		order[i] = i;
	sort_l = l;
	qsort(order, tr->nsess, sizeof(*order), cmp_sess);
	/* start[k]: first request of the k-th session in time order. */
	{
		size_t *rank = start, acc = 0;

		for (i = 0; i < tr->nsess; i++)
			rank[order[i]] = i;
		/* reuse: count per rank, then prefix sums */
		memset(tr->sess, 0, tr->nsess * sizeof(*tr->sess));
		for (i = 0; i < tr->nreq; i++)
			tr->sess[rank[tr->req[i].sess]].n++;
		for (i = 0; i < tr->nsess; i++) {
			tr->sess[i].first = acc;
			acc += tr->sess[i].n;
			tr->sess[i].id = tr->strings + l->stroff[order[i]];
			tr->sess[i].n = 0;
		}
		for (i = 0; i < tr->nreq; i++) {
			sim_tsess *s = &tr->sess[rank[tr->req[i].sess]];

			req[s->first + s->n++] = tr->req[i];
		}
	}
	free(tr->req);
	tr->req = req;
	req = NULL;
	rc = 0;
out:
	free(order);
	free(start);
	free(req);
	return rc;
}

int
trace_load(scenario *sc, const char *path, sg_error *err)
{
	loader l;
	FILE *fp;
	char *line = NULL;
	size_t cap = 0, lineno = 0;
	ssize_t n;
	int rc = 0;

	memset(&l, 0, sizeof(l));
	l.t = &sc->trace;
	if ((fp = fopen(path, "r")) == NULL) {
		rc = errno;
		sg_seterr(err, SG_EIO, "trace: cannot open '%s': %s", path,
		    strerror(rc));
		return rc;
	}
	while ((n = getline(&line, &cap, fp)) >= 0) {
		lineno++;
		while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
			n--;
		if (n == 0)
			continue;
		if ((rc = load_line(&l, sc, path, lineno, line, (size_t)n,
		    err)) != 0)
			goto out;
	}
	if (ferror(fp)) {
		rc = sg_seterr(err, SG_EINVAL, "%s: read error", path);
		goto out;
	}
	if (sc->trace.nreq == 0) {
		rc = sg_seterr(err, SG_EINVAL, "%s: no requests", path);
		goto out;
	}
	if ((rc = finish(&l)) != 0)
		sg_seterr(err, rc, "out of memory");
out:
	free(line);
	fclose(fp);
	free(l.stroff);
	free(l.last_turn);
	free(l.first_t);
	free(l.first_line);
	free(l.tab);
	return rc;
}

void
trace_free(sim_trace *t)
{
	free(t->sess);
	free(t->req);
	free(t->strings);
	memset(t, 0, sizeof(*t));
}
