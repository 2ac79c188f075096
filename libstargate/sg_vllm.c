/*
 * sg_vllm.c — the vLLM /metrics adapter.
 *
 * The parser walks the text line by line without copying it: comment lines
 * (# HELP, # TYPE, anything after '#') and blank lines are skipped, every
 * other line counts against the sample bound, and its metric name is read
 * first.  A family this module does not use is skipped without looking
 * further, so exotic exposition elsewhere cannot fail a scrape; a family it
 * uses is parsed strictly: labels with escaped values (\\, \", \n), one
 * value (a float, NaN or ±Inf), an optional integer timestamp.
 *
 * vLLM runs one engine per data-parallel rank, each with its own series
 * (label engine="N") and its own cache_config_info, so KV usage (a
 * fraction) and capacity (block_size · num_gpu_blocks) are paired per
 * engine before they are summed: used tokens = Σ usage_e · capacity_e.
 *
 * Conversion to an sg_cluster follows stargate-clusters(5): running counts
 * waiting requests too (as sg-mockengine's /stats does, so a free slot is
 * running < max_engine_concurrency), queued = waiting, and the input TPS is
 * the prompt-token counter's rate, sticky while the counter is still.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sg_vllm.h"

/*
 * Counts and token figures stay inside what the snapshot codec carries
 * (JSON integers, at most INT64_MAX): conversions, products and sums
 * saturate there, so a cluster made from any scrape encodes and decodes
 * to itself (decision logs replay exactly).
 */
#define COUNT_MAX	((uint64_t)INT64_MAX)

static uint64_t
sat_add(uint64_t a, uint64_t b)
{
	if (a > COUNT_MAX)
		a = COUNT_MAX;
	if (b > COUNT_MAX)
		b = COUNT_MAX;
	return a > COUNT_MAX - b ? COUNT_MAX : a + b;
}

static uint64_t
sat_mul(uint64_t a, uint64_t b)
{
	if (a != 0 && b > COUNT_MAX / a)
		return COUNT_MAX;
	return a * b;
}

enum fam { F_NONE, F_RUNNING, F_WAITING, F_KV, F_GPU, F_CONFIG, F_PROMPT };

static const struct {
	const char	*name;
	int		 fam;
} families[] = {
	{ "vllm:num_requests_running", F_RUNNING },
	{ "vllm:num_requests_waiting", F_WAITING },
	{ "vllm:kv_cache_usage_perc", F_KV },
	{ "vllm:gpu_cache_usage_perc", F_GPU },
	{ "vllm:cache_config_info", F_CONFIG },
	{ "vllm:prompt_tokens_total", F_PROMPT },
};

#define NELEM(a)	(sizeof(a) / sizeof((a)[0]))
#define LABEL_MAX	(SG_CF_MAX_NAME + 1)

typedef struct engine {
	char		name[65];
	size_t		nlen;
	bool		have_kv, have_gpu, have_cap;
	double		kv, gpu;
	uint64_t	block_size, blocks;
} engine;

/* What one line of a used family carries. */
typedef struct line {
	int		fam;
	double		value;
	bool		model_ok;		/* model_name absent or equal */
	char		engine[65];
	size_t		engine_len;
	bool		have_bs, have_nb;
	uint64_t	bs, nb;
} line;

typedef struct pstate {
	const char	*model;
	size_t		 model_len;
	engine		 eng[SG_VLLM_MAX_ENGINES];
	uint32_t	 neng;
	sg_vllm_sample	*out;
	sg_error	*err;
	size_t		 lineno;
	char		 buf[LABEL_MAX];	/* one unescaped label value */
} pstate;

static bool
name_start(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
	    c == ':';
}

static bool
name_char(char c)
{
	return name_start(c) || (c >= '0' && c <= '9');
}

static const char *
skip_sp(const char *p, const char *e)
{
	while (p < e && (*p == ' ' || *p == '\t'))
		p++;
	return p;
}

static int
lerr(pstate *ps, const char *what)
{
	return sg_seterr(ps->err, SG_EINVAL, "line %zu: %s", ps->lineno, what);
}

/*
 * A quoted label value at *pp (after the opening quote), unescaped into
 * buf (cap bytes; *n = its length, or cap when it did not fit).
 */
static int
label_value(pstate *ps, const char **pp, const char *e, char *buf, size_t cap,
    size_t *n)
{
	const char *p = *pp;
	size_t o = 0;

	for (;;) {
		char c;

		if (p >= e)
			return lerr(ps, "unterminated label value");
		c = *p++;
		if (c == '"')
			break;
		if (c == '\\') {
			if (p >= e)
				return lerr(ps, "unterminated label value");
			c = *p++;
			if (c == 'n')
				c = '\n';
			else if (c != '\\' && c != '"')
				return lerr(ps, "bad escape in label value");
		}
		if (o < cap)
			buf[o] = c;
		o++;
	}
	*n = o <= cap ? o : cap;
	*pp = p;
	return 0;
}

/* Strict decimal u64 of buf[0..n) (a value that did not fit is bad). */
static bool
label_u64(const char *buf, size_t n, size_t cap, uint64_t *v)
{
	return n < cap && sg_parse_u64(buf, n, UINT64_MAX, v) == 0;
}

static int
parse_labels(pstate *ps, const char **pp, const char *e, line *ln)
{
	char *buf = ps->buf;
	const char *p = *pp;

	for (;;) {
		const char *name;
		size_t nn, vn = 0;
		int rc;

		p = skip_sp(p, e);
		if (p < e && *p == '}')
			break;
		name = p;
		if (p >= e || !(name_start(*p) && *p != ':'))
			return lerr(ps, "bad label name");
		while (p < e && name_char(*p) && *p != ':')
			p++;
		nn = (size_t)(p - name);
		p = skip_sp(p, e);
		if (p >= e || *p != '=')
			return lerr(ps, "expected '=' after a label name");
		p = skip_sp(p + 1, e);
		if (p >= e || *p != '"')
			return lerr(ps, "expected a quoted label value");
		p++;
		if ((rc = label_value(ps, &p, e, buf, LABEL_MAX, &vn)) != 0)
			return rc;
		if (nn == 10 && memcmp(name, "model_name", 10) == 0)
			ln->model_ok = ps->model == NULL ||
			    (vn == ps->model_len && vn < LABEL_MAX &&
			    memcmp(buf, ps->model, vn) == 0);
		else if (nn == 6 && memcmp(name, "engine", 6) == 0) {
			if (vn >= sizeof(ln->engine))
				return lerr(ps, "engine label too long");
			memcpy(ln->engine, buf, vn);
			ln->engine_len = vn;
		} else if (nn == 10 && memcmp(name, "block_size", 10) == 0)
			ln->have_bs = label_u64(buf, vn, LABEL_MAX, &ln->bs);
		else if (nn == 14 && memcmp(name, "num_gpu_blocks", 14) == 0)
			ln->have_nb = label_u64(buf, vn, LABEL_MAX, &ln->nb);
		p = skip_sp(p, e);
		if (p < e && *p == ',') {
			p++;
			continue;
		}
		if (p < e && *p == '}')
			break;
		return lerr(ps, "expected ',' or '}' in labels");
	}
	*pp = p + 1;
	return 0;
}

/* Value and optional timestamp: the rest of the line. */
static int
parse_value(pstate *ps, const char *p, const char *e, double *v)
{
	char num[64], *end;
	const char *t = p;
	size_t n;

	while (p < e && *p != ' ' && *p != '\t')
		p++;
	n = (size_t)(p - t);
	if (n == 0 || n >= sizeof(num))
		return lerr(ps, "expected a sample value");
	memcpy(num, t, n);
	num[n] = '\0';
	*v = strtod(num, &end);
	if (end != num + n)
		return lerr(ps, "bad sample value");
	p = skip_sp(p, e);
	if (p < e) {
		t = p;
		if (*p == '-')
			p++;
		while (p < e && *p >= '0' && *p <= '9')
			p++;
		if (p == t || (*t == '-' && p == t + 1) ||
		    skip_sp(p, e) != e)
			return lerr(ps, "bad timestamp");
	}
	return 0;
}

static engine *
find_engine(pstate *ps, const line *ln)
{
	uint32_t i;
	engine *g;

	for (i = 0; i < ps->neng; i++)
		if (ps->eng[i].nlen == ln->engine_len &&
		    memcmp(ps->eng[i].name, ln->engine, ln->engine_len) == 0)
			return &ps->eng[i];
	if (ps->neng == SG_VLLM_MAX_ENGINES)
		return NULL;
	g = &ps->eng[ps->neng++];
	memset(g, 0, sizeof(*g));
	memcpy(g->name, ln->engine, ln->engine_len);
	g->nlen = ln->engine_len;
	return g;
}

/* Fold one parsed line into the sample. */
static int
fold(pstate *ps, const line *ln)
{
	sg_vllm_sample *o = ps->out;
	engine *g;

	if (!ln->model_ok || !isfinite(ln->value))
		return 0;
	switch (ln->fam) {
	case F_RUNNING:
		o->running += ln->value;
		o->have_running = true;
		return 0;
	case F_WAITING:
		o->waiting += ln->value;
		o->have_waiting = true;
		return 0;
	case F_PROMPT:
		o->prompt_tokens_total += ln->value;
		o->have_prompt_total = true;
		return 0;
	}
	if ((g = find_engine(ps, ln)) == NULL)
		return sg_seterr(ps->err, SG_EINVAL, "line %zu: more than %d "
		    "engines", ps->lineno, SG_VLLM_MAX_ENGINES);
	if (ln->fam == F_KV) {
		g->kv += ln->value;
		g->have_kv = true;
	} else if (ln->fam == F_GPU) {
		g->gpu += ln->value;
		g->have_gpu = true;
	} else if (ln->have_bs && ln->have_nb && !g->have_cap) {
		g->block_size = ln->bs;
		g->blocks = ln->nb;
		g->have_cap = true;
	}
	return 0;
}

static int
parse_line(pstate *ps, const char *p, const char *e)
{
	const char *name;
	line ln;
	size_t i, nn;
	int rc;

	name = p;
	while (p < e && name_char(*p))
		p++;
	nn = (size_t)(p - name);
	memset(&ln, 0, sizeof(ln));
	for (i = 0; i < NELEM(families); i++)
		if (strlen(families[i].name) == nn &&
		    memcmp(families[i].name, name, nn) == 0)
			ln.fam = families[i].fam;
	if (ln.fam == F_NONE)
		return 0;
	ln.model_ok = true;
	if (skip_sp(p, e) < e && *skip_sp(p, e) == '{') {
		p = skip_sp(p, e) + 1;
		if ((rc = parse_labels(ps, &p, e, &ln)) != 0)
			return rc;
	}
	if (p >= e || (*p != ' ' && *p != '\t'))
		return lerr(ps, "expected a space before the value");
	if ((rc = parse_value(ps, skip_sp(p, e), e, &ln.value)) != 0)
		return rc;
	return fold(ps, &ln);
}

/* Sum the per-engine KV figures into the sample. */
static void
finish_kv(pstate *ps)
{
	sg_vllm_sample *o = ps->out;
	bool use_kv = false, paired = true;
	double used = 0, usum = 0, paired_cap = 0;
	uint32_t i, nu = 0;

	for (i = 0; i < ps->neng; i++)
		use_kv |= ps->eng[i].have_kv;
	for (i = 0; i < ps->neng; i++) {
		const engine *g = &ps->eng[i];
		bool hu = use_kv ? g->have_kv : g->have_gpu;
		double u = use_kv ? g->kv : g->gpu;
		double cap = (double)g->block_size * (double)g->blocks;

		if (u < 0)
			u = 0;
		if (u > 1)
			u = 1;
		if (g->have_cap) {
			if (!o->have_blocks)
				o->block_size = g->block_size;
			o->have_blocks = true;
			o->num_gpu_blocks = sat_add(o->num_gpu_blocks,
			    g->blocks);
			o->kv_capacity_tokens = sat_add(o->kv_capacity_tokens,
			    sat_mul(g->block_size, g->blocks));
		}
		if (!hu)
			continue;
		nu++;
		usum += u;
		if (g->have_cap) {
			used += u * cap;
			paired_cap += cap;
		} else
			paired = false;
	}
	o->engines = ps->neng;
	if (nu == 0)
		return;
	o->have_kv_usage = true;
	o->kv_usage = paired && paired_cap > 0 ? used / paired_cap :
	    usum / nu;
	o->kv_used_tokens = paired ? used :
	    o->kv_usage * (double)o->kv_capacity_tokens;
}

int
sg_vllm_parse(const char *text, size_t len, const char *model,
    sg_vllm_sample *out, sg_error *err)
{
	pstate *ps;
	const char *p = text, *e = text + len;
	size_t samples = 0;
	int rc = 0;

	memset(out, 0, sizeof(*out));
	if (text == NULL && len > 0)
		return sg_seterr(err, SG_EINVAL, "no input");
	if (len > SG_VLLM_MAX_TEXT)
		return sg_seterr(err, SG_EINVAL, "metrics larger than %u bytes",
		    SG_VLLM_MAX_TEXT);
	if ((ps = calloc(1, sizeof(*ps))) == NULL)
		return sg_seterr(err, SG_ENOMEM, "out of memory");
	ps->model = model;
	ps->model_len = model != NULL ? strlen(model) : 0;
	ps->out = out;
	ps->err = err;
	while (p < e) {
		const char *nl = memchr(p, '\n', (size_t)(e - p));
		const char *le = nl != NULL ? nl : e;

		ps->lineno++;
		if ((size_t)(le - p) > SG_VLLM_MAX_LINE) {
			rc = sg_seterr(err, SG_EINVAL, "line %zu: longer than "
			    "%d bytes", ps->lineno, SG_VLLM_MAX_LINE);
			goto out;
		}
		if (le > p && le[-1] == '\r')
			le--;
		p = skip_sp(p, le);
		if (p < le && *p != '#') {
			if (++samples > SG_VLLM_MAX_SAMPLES) {
				rc = sg_seterr(err, SG_EINVAL, "more than %d "
				    "samples", SG_VLLM_MAX_SAMPLES);
				goto out;
			}
			if ((rc = parse_line(ps, p, le)) != 0)
				goto out;
		}
		p = nl != NULL ? nl + 1 : e;
	}
	finish_kv(ps);
	if (!out->have_running)
		rc = sg_seterr(err, SG_EINVAL, "no vllm:num_requests_running "
		    "sample%s", model != NULL ? " for the model" : "");
out:
	free(ps);
	if (rc != 0)
		memset(out, 0, sizeof(*out));
	return rc;
}

/* A count from a sample value: rounded, 0..COUNT_MAX (2^63 - 1, which
 * llround cannot exceed). */
static uint64_t
to_u64(double v)
{
	if (!(v > 0))
		return 0;
	if (v >= 9223372036854775807.0)
		return COUNT_MAX;
	return (uint64_t)llround(v);
}

static double
input_tps(const sg_vllm_sample *cur, const sg_vllm_sample *prev, double dt_s,
    double prev_tps, const sg_clusterdef *def)
{
	if (prev != NULL && prev->have_prompt_total &&
	    cur->have_prompt_total && dt_s > 0 && isfinite(dt_s) &&
	    cur->prompt_tokens_total > prev->prompt_tokens_total)
		return (cur->prompt_tokens_total - prev->prompt_tokens_total) /
		    dt_s;
	if (prev_tps > 0 && isfinite(prev_tps))
		return prev_tps;
	return def->max_input_tps > 0 ? def->max_input_tps : 0;
}

int
sg_vllm_to_cluster(const sg_vllm_sample *cur, const sg_vllm_sample *prev,
    double dt_s, double prev_tps, const sg_clusterdef *def, sg_cluster *out,
    sg_error *err)
{
	double waiting, used;
	uint64_t cap;

	if (cur == NULL || def == NULL || out == NULL)
		return sg_seterr(err, SG_EINVAL, "vllm stats: missing "
		    "argument");
	if (!cur->have_running)
		return sg_seterr(err, SG_EINVAL, "vllm stats: no running "
		    "count");
	if (sg_cluster_init(out, def->id, def->id_len) != 0)
		return sg_seterr(err, SG_EINVAL, "vllm stats: bad cluster id");
	waiting = cur->have_waiting && cur->waiting > 0 ? cur->waiting : 0;
	out->running = to_u64((cur->running > 0 ? cur->running : 0) +
	    waiting);
	out->queued = to_u64(waiting);
	out->last_mean_input_tps = input_tps(cur, prev, dt_s, prev_tps, def);
	out->max_input_tps = def->max_input_tps;
	out->max_engine_concurrency = def->max_engine_concurrency;
	if (def->has_rtt)
		out->rtt_ms = def->rtt_ms;
	if (cur->have_blocks) {
		cap = cur->kv_capacity_tokens;
		used = cur->kv_used_tokens;
	} else {
		cap = def->kv_capacity_tokens;
		used = cur->kv_usage * (double)cap;
	}
	if (cap > COUNT_MAX)
		cap = COUNT_MAX;
	out->kv_capacity_tokens = cap;
	if (cur->have_kv_usage && cap > 0) {
		out->kv_used_tokens = to_u64(used);
		if (out->kv_used_tokens > cap)
			out->kv_used_tokens = cap;
		out->kv_free_tokens = cap - out->kv_used_tokens;
	} else
		out->kv_free_tokens = cap;
	return 0;
}
