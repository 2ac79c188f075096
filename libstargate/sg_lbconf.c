/*
 * sg_lbconf.c — lb-config.json: parsing, validation and per-request
 * resolution of algorithm definitions (stargate-lb-config(5)).
 *
 * A configuration is flattened into one array of definitions (sg_algdef,
 * every default applied) and a few index tables that point into it:
 *
 *   default set     the top-level `default` (a name, so all defaults) and
 *                   the top-level `request_algorithms`, one slot per
 *                   algorithm;
 *   models          sorted by model id (byte order) for bsearch; each has
 *                   its configured definition and its own
 *                   `request_algorithms` slots.
 *
 * A `request_algorithms` key must name the same algorithm as its entry, so
 * the maps are really keyed by algorithm, and a slot per algorithm is
 * enough.  Definitions carry nothing that depends on where they sit in the
 * file except their id, so two files that differ only in unrelated models
 * yield equal definitions for a model (a router seeds from the definition's
 * seed and fields, never from the id).
 *
 * Parsing an entry is done in two strengths.  Entries that become
 * definitions get the whole treatment (types, unsupported fields, the
 * "factory" checks: ranges and per-algorithm restrictions).  Entries inside
 * a `request_algorithms` map that is itself nested in an override entry are
 * parsed for shape and types and then thrown away, as the reference does.
 *
 * JSON null is accepted only for fields whose default is "unset"
 * (max_input_work_seconds, the selection count, band_widen_interval_ms and
 * the queue-time floor/ceiling), where it means unset; everywhere else it is
 * a type error ("invalid type: null").
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "sg_lbconf.h"

#define NODEF		(-1)
#define LB_MAX_FILE	(64u << 20)	/* bytes of lb-config.json we read */
#define LB_SHOW_MAX	64		/* bytes of a key shown in a message */
#define LB_LOC_MAX	200

struct lbmodel {
	char	*name;
	size_t	 len;
	int	 def;			/* configured definition */
	int	 ra[SG_ALG_COUNT];	/* model-scoped overrides or NODEF */
};

struct sg_lbconf {
	sg_algdef	*defs;
	size_t		 ndefs, defcap;
	int		 def_default;
	int		 ra[SG_ALG_COUNT];	/* top-level overrides or NODEF */
	struct lbmodel	*models;		/* sorted by (bytes, length) */
	size_t		 nmodels, modelcap;
};

/* --- names ----------------------------------------------------------------- */

static const char *const alg_names[SG_ALG_COUNT] = {
	[SG_ALG_POWER_OF_N] =		"power-of-n",
	[SG_ALG_WAIT_AND_WIDEN] =	"wait-and-widen",
	[SG_ALG_ROUND_ROBIN] =		"round-robin",
	[SG_ALG_RANDOM] =		"random",
	[SG_ALG_PULSAR] =		"pulsar",
	[SG_ALG_PULSAR_WAW] =		"pulsar-wait-and-widen",
};

static const struct {
	const char	*name;
	int		 alg;
} alg_aliases[] = {
	{ "power-of-two",	SG_ALG_POWER_OF_N },
	{ "powerOf2",		SG_ALG_POWER_OF_N },
	{ "powerOfN",		SG_ALG_POWER_OF_N },
	{ "powerof2",		SG_ALG_POWER_OF_N },
	{ "powerofn",		SG_ALG_POWER_OF_N },
	{ "groq-multiregion",	SG_ALG_WAIT_AND_WIDEN },
	{ "pulsar-multiregion",	SG_ALG_PULSAR_WAW },
};

static const char *const cmp_names[] = {
	[SG_CMP_NONE] =		NULL,
	[SG_CMP_TTFT] =		"ttft",
	[SG_CMP_QUEUE_TIME] =	"queue-time",
	[SG_CMP_INPUT_WORK] =	"input-work-seconds",
	[SG_CMP_UTILIZATION] =	"utilization",
	[SG_CMP_NUM_QUEUED] =	"num-requests-queued",
};
#define NCMP	((int)(sizeof(cmp_names) / sizeof(cmp_names[0])))

static bool
memeq(const char *s, size_t len, const char *lit)
{
	return strlen(lit) == len && memcmp(s, lit, len) == 0;
}

/* Exact, case-sensitive match of canonical names and aliases (stargate-lb-config(5)). */
int
sg_algorithm_parse(const char *name, size_t len, int *alg)
{
	size_t i;

	if (name == NULL)
		return SG_EINVAL;
	for (i = 0; i < SG_ALG_COUNT; i++) {
		if (memeq(name, len, alg_names[i])) {
			*alg = (int)i;
			return 0;
		}
	}
	for (i = 0; i < sizeof(alg_aliases) / sizeof(alg_aliases[0]); i++) {
		if (memeq(name, len, alg_aliases[i].name)) {
			*alg = alg_aliases[i].alg;
			return 0;
		}
	}
	return SG_EINVAL;
}

const char *
sg_algorithm_name(int alg)
{
	if (alg < 0 || alg >= SG_ALG_COUNT)
		return NULL;
	return alg_names[alg];
}

const char *
sg_comparator_name(int cmp)
{
	if (cmp < 0 || cmp >= NCMP)
		return NULL;
	return cmp_names[cmp];
}

/* --- messages -------------------------------------------------------------- */

/*
 * Copy up to LB_SHOW_MAX bytes of s for a message: printable ASCII passes,
 * anything else becomes '?', and a longer value ends in "...".  Keys and
 * values from the file or a header never put control bytes in a log line.
 */
static void
show(char *dst, size_t dstsz, const char *s, size_t len)
{
	size_t i, n = 0, max = LB_SHOW_MAX;

	if (max > dstsz - 4)
		max = dstsz - 4;
	for (i = 0; i < len && n < max; i++) {
		unsigned char c = (unsigned char)s[i];

		dst[n++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
	}
	if (i < len) {
		memcpy(dst + n, "...", 3);
		n += 3;
	}
	dst[n] = '\0';
}

/* Shortest decimal form that reads back as v ("1.5", "2", "-0.25"). */
static void
fmtnum(char *dst, size_t dstsz, double v)
{
	int prec;

	if (isnan(v)) {
		snprintf(dst, dstsz, "NaN");
		return;
	}
	if (isinf(v)) {
		snprintf(dst, dstsz, v < 0 ? "-inf" : "inf");
		return;
	}
	for (prec = 1; prec < 17; prec++) {
		snprintf(dst, dstsz, "%.*g", prec, v);
		if (strtod(dst, NULL) == v)
			return;
	}
	snprintf(dst, dstsz, "%.17g", v);
}

struct pctx {
	sg_lbconf	*c;
	const char	*source;
	sg_error	*err;
	uint64_t	*big;		/* values of the big integer literals */
	size_t		 nbig;
};

/* "<source>: <loc>: <message>"; returns SG_ECONFIG. */
static int
cerr(struct pctx *p, const char *loc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int
cerr(struct pctx *p, const char *loc, const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (loc != NULL && loc[0] != '\0')
		return sg_seterr(p->err, SG_ECONFIG, "%s: %s: %s", p->source,
		    loc, msg);
	return sg_seterr(p->err, SG_ECONFIG, "%s: %s", p->source, msg);
}

/* loc = parent "." key (key shown safely). */
static void
subloc(char *dst, const char *parent, const char *key, size_t keylen)
{
	char k[LB_SHOW_MAX + 4];
	int n;

	show(k, sizeof(k), key, keylen);
	if (parent[0] != '\0')
		n = snprintf(dst, LB_LOC_MAX, "%s.%s", parent, k);
	else
		n = snprintf(dst, LB_LOC_MAX, "%s", k);
	if (n < 0 || n >= LB_LOC_MAX)	/* deep nesting: keep the head */
		memcpy(dst + LB_LOC_MAX - 4, "...", 4);
}

/* --- definitions ----------------------------------------------------------- */

/* Every default of stargate-lb-config(5) for alg. */
static void
def_init(sg_algdef *d, int alg)
{
	memset(d, 0, sizeof(*d));	/* padding too: definitions compare */
	d->algorithm = alg;
	d->sample_count = 2;
	d->comparator = alg == SG_ALG_PULSAR_WAW ? SG_CMP_NONE : SG_CMP_TTFT;
	d->rendezvous_weight = SG_WEIGHT_MAX_INPUT_TPS;
	d->virtual_nodes = 150;
	d->selection_count = alg == SG_ALG_PULSAR_WAW ? 1 : 0;
	d->affinity_scale = 1.0;
	d->ttft_bucket_size_ms = 20;
	d->next_bucket_unlock_factor = 0.25;
	d->n = 2;
}

/* Append a copy of d, give it the next id; NODEF-safe id in *id. */
static int
add_def(sg_lbconf *c, const sg_algdef *d, int *id)
{
	if (c->ndefs == c->defcap) {
		size_t ncap = c->defcap != 0 ? 2 * c->defcap : 8;
		sg_algdef *nd;

		if (ncap > INT_MAX || (nd = realloc(c->defs,
		    ncap * sizeof(*nd))) == NULL)
			return SG_ENOMEM;
		c->defs = nd;
		c->defcap = ncap;
	}
	memcpy(&c->defs[c->ndefs], d, sizeof(*d));
	c->defs[c->ndefs].id = (unsigned)c->ndefs;
	*id = (int)c->ndefs;
	c->ndefs++;
	return 0;
}

/* --- detailed-object fields (stargate-lb-config(5)) ----------------------- */

enum ftype { FT_BOOL, FT_UINT, FT_U64, FT_F64, FT_STR, FT_CMP, FT_WEIGHT,
    FT_MAP };

enum fid {
	FI_REQUIRE_KEY, FI_REQUIRE_TOKENS, FI_MAX_WORK, FI_REQUEST_ALGS,
	FI_SAMPLE_COUNT, FI_COMPARATOR, FI_SEED, FI_KV_FREE, FI_WEIGHT,
	FI_VNODES, FI_SELECTION, FI_WAIT, FI_SCALE, FI_BAND, FI_FALLBACK,
	FI_FLOOR, FI_CEIL, FI_BUCKET, FI_UNLOCK, FI_N, FI_MAX_QUEUED,
	FI_IGN_QUEUE, FI_IGN_PREFILL, FI_LAST_CLUSTER,
};

#define A(x)	(1u << (x))
#define A_ALL	(A(SG_ALG_POWER_OF_N) | A(SG_ALG_WAIT_AND_WIDEN) | \
		 A(SG_ALG_ROUND_ROBIN) | A(SG_ALG_RANDOM) | A(SG_ALG_PULSAR) | \
		 A(SG_ALG_PULSAR_WAW))
#define A_WAWS	(A(SG_ALG_WAIT_AND_WIDEN) | A(SG_ALG_PULSAR_WAW))
#define A_PULS	(A(SG_ALG_PULSAR) | A(SG_ALG_PULSAR_WAW))

/*
 * accepts: the algorithms whose config has the field at all; a field outside
 * the mask is an unsupported field.  Some fields are accepted and then
 * refused with their own message (comparator on p-w-a-w,
 * consider_kv_free_tokens / band_widen_interval_ms / fallback_max_queued on
 * w-a-w), as the reference's factories do.
 */
static const struct field {
	const char	*name;
	int		 id;
	int		 type;
	unsigned	 accepts;
	bool		 nullable;	/* null means "unset" */
} fields[] = {
	{ "require_cache_affinity_key", FI_REQUIRE_KEY, FT_BOOL, A_ALL, false },
	{ "require_input_tokens", FI_REQUIRE_TOKENS, FT_BOOL, A_ALL, false },
	{ "max_input_work_seconds", FI_MAX_WORK, FT_F64, A_ALL, true },
	{ "request_algorithms", FI_REQUEST_ALGS, FT_MAP, A_ALL, false },
	{ "sample_count", FI_SAMPLE_COUNT, FT_U64, A(SG_ALG_POWER_OF_N), false },
	{ "comparator", FI_COMPARATOR, FT_CMP,
	    A(SG_ALG_POWER_OF_N) | A_WAWS, false },
	{ "seed", FI_SEED, FT_STR, A_WAWS | A(SG_ALG_PULSAR), false },
	{ "consider_kv_free_tokens", FI_KV_FREE, FT_BOOL, A_WAWS | A_PULS,
	    false },
	{ "rendezvous_weight", FI_WEIGHT, FT_WEIGHT, A_PULS, false },
	{ "cache_affinity_virtual_nodes", FI_VNODES, FT_UINT, A_WAWS, false },
	{ "cache_affinity_backend_selection_count", FI_SELECTION, FT_UINT,
	    A_WAWS, true },
	{ "cache_affinity_wait_ms", FI_WAIT, FT_U64, A_WAWS, false },
	{ "cache_affinity_input_tokens_scale", FI_SCALE, FT_F64, A_WAWS, false },
	{ "band_widen_interval_ms", FI_BAND, FT_U64, A_WAWS, true },
	{ "fallback_max_queued", FI_FALLBACK, FT_U64, A_WAWS, false },
	{ "max_queue_time_floor_ms", FI_FLOOR, FT_U64, A_WAWS, true },
	{ "max_queue_time_ceil_ms", FI_CEIL, FT_U64, A_WAWS, true },
	{ "ttft_bucket_size_ms", FI_BUCKET, FT_U64, A_WAWS, false },
	{ "next_bucket_unlock_factor", FI_UNLOCK, FT_F64, A_WAWS, false },
	{ "n", FI_N, FT_UINT, A_WAWS, false },
	{ "max_queued", FI_MAX_QUEUED, FT_U64, A_WAWS, false },
	{ "ignore_queue_time", FI_IGN_QUEUE, FT_BOOL, A_WAWS, false },
	{ "ignore_input_processing_time", FI_IGN_PREFILL, FT_BOOL, A_WAWS,
	    false },
	{ "last_cluster_affinity", FI_LAST_CLUSTER, FT_BOOL, A_WAWS, false },
};
#define NFIELDS	(sizeof(fields) / sizeof(fields[0]))

static const struct field *
find_field(const char *name)
{
	size_t i;

	for (i = 0; i < NFIELDS; i++)
		if (strcmp(fields[i].name, name) == 0)
			return &fields[i];
	return NULL;
}

static int
strptrcmp(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/*
 * "<alg> config does not support field(s): a, b" with the fields sorted.
 * consider_kv_free_tokens on an algorithm outside the pulsar family gets the
 * reference's factory explanation appended, so either text can be found.
 */
static int
check_unsupported(struct pctx *p, const char *loc, json_t *obj, int alg)
{
	const char **bad = NULL, *key;
	char list[200];
	size_t nbad = 0, i, off = 0;
	bool kv = false;
	json_t *val;
	int rc = 0;

	json_object_foreach(obj, key, val) {
		const struct field *f;

		if (strcmp(key, "algorithm") == 0)
			continue;
		f = find_field(key);
		if (f != NULL && (f->accepts & A(alg)) != 0)
			continue;
		if (bad == NULL && (bad = calloc(json_object_size(obj),
		    sizeof(*bad))) == NULL)
			return SG_ENOMEM;
		bad[nbad++] = key;
		if (f != NULL && f->id == FI_KV_FREE)
			kv = true;
	}
	if (nbad == 0)
		return 0;
	qsort(bad, nbad, sizeof(*bad), strptrcmp);
	list[0] = '\0';
	for (i = 0; i < nbad && off < sizeof(list) - 1; i++) {
		char k[LB_SHOW_MAX + 4];
		int n;

		show(k, sizeof(k), bad[i], strlen(bad[i]));
		n = snprintf(list + off, sizeof(list) - off, "%s%s",
		    i > 0 ? ", " : "", k);
		if (n < 0)
			break;
		off += (size_t)n;
	}
	if (off >= sizeof(list) - 1)
		memcpy(list + sizeof(list) - 4, "...", 4);
	rc = cerr(p, loc, "%s config does not support field(s): %s%s",
	    alg_names[alg], list, kv ? "; consider_kv_free_tokens is "
	    "supported only for pulsar and pulsar-wait-and-widen" : "");
	free(bad);
	return rc;
}

/* --- integers above INT64_MAX ------------------------------------------------ */

/*
 * jansson keeps integers as signed 64-bit values and refuses a literal above
 * INT64_MAX, while the u64 fields (max_queued and friends) take the whole
 * range up to 18446744073709551615.  So before json_loadb() the text is
 * scanned (outside strings) for integer literals: one in
 * (INT64_MAX, UINT64_MAX] is replaced, in a copy, by a sentinel, the
 * negative 18-digit integer BIG_BASE + k (19 bytes, padded with a space to
 * the literal's length, so every line and column jansson reports is
 * unchanged), and its exact value is kept in p->big[k]; the field readers
 * (big_value()) turn a sentinel back into its value.  A literal beyond
 * UINT64_MAX gets "e0" appended (a real number: a number field takes it,
 * an integer field calls it the wrong type, as the upstream router does;
 * later columns of its line move by two).  A literal that is itself in the sentinel range is refused when the text
 * also has a big one, so a sentinel never meets a value from the text.
 */
#define BIG_BASE	(-INT64_C(999999999999999999))
#define BIG_MAX		1000000		/* big literals in one file */

/* The integer literal at t[0..n) (digits, no sign) as a u64; false if over. */
static bool
lit_u64(const char *t, size_t n, uint64_t *v)
{
	uint64_t x = 0;
	size_t i;

	for (i = 0; i < n; i++) {
		unsigned d = (unsigned)(t[i] - '0');

		if (x > (UINT64_MAX - d) / 10)
			return false;
		x = x * 10 + d;
	}
	*v = x;
	return true;
}

/* Length of the JSON number token at t (end e); *intlit when it is an
 * integer (optional '-', then digits only). */
static size_t
num_token(const char *t, const char *e, bool *intlit)
{
	const char *q = t;

	*intlit = true;
	if (q < e && *q == '-')
		q++;
	while (q < e && ((*q >= '0' && *q <= '9') || *q == '.' || *q == 'e' ||
	    *q == 'E' || *q == '+' || *q == '-')) {
		if (*q < '0' || *q > '9')
			*intlit = false;
		q++;
	}
	return (size_t)(q - t);
}

/*
 * Scan text[0..len) as above.  *outp: NULL when nothing was replaced, else
 * the rewritten copy (length *outlen, caller frees).  Returns 0, SG_ENOMEM
 * or SG_ECONFIG (a reserved literal, too many big ones).
 */
static int
big_scan(struct pctx *p, const char *text, size_t len, char **outp,
    size_t *outlen)
{
	const char *t = text, *e = text + len, *from = text;
	char *out = NULL;
	size_t o = 0, n, cap = 0;
	bool instr = false, intlit;
	uint64_t v;
	int line = 1, rline = 0;

	*outp = NULL;
	for (; t < e; t += n) {
		n = 1;
		if (*t == '\n')
			line++;
		if (instr) {
			if (*t == '\\' && t + 1 < e)
				n = 2;
			else if (*t == '"')
				instr = false;
			continue;
		}
		if (*t == '"') {
			instr = true;
			continue;
		}
		if (*t != '-' && (*t < '0' || *t > '9'))
			continue;
		n = num_token(t, e, &intlit);
		if (!intlit || n == 0)
			continue;
		if (*t == '-') {
			if (n == 19 && lit_u64(t + 1, 18, &v) &&
			    -(int64_t)v >= BIG_BASE &&
			    -(int64_t)v < BIG_BASE + BIG_MAX && rline == 0)
				rline = line;
			continue;
		}
		if (n < 19 || *t == '0' || (lit_u64(t, n, &v) &&
		    v <= INT64_MAX))
			continue;	/* jansson's (a leading 0: its error) */
		/* a copy: the text before this literal, then its stand-in */
		if (out == NULL) {
			cap = len + 1;
			if ((out = malloc(cap)) == NULL)
				return SG_ENOMEM;
		}
		if (o + (size_t)(t - from) + n + 3 > cap) {
			char *nb;

			cap = (o + (size_t)(t - from) + n + 3) * 2;
			if ((nb = realloc(out, cap)) == NULL) {
				free(out);
				return SG_ENOMEM;
			}
			out = nb;
		}
		memcpy(out + o, from, (size_t)(t - from));
		o += (size_t)(t - from);
		from = t + n;
		if (n > 20 || !lit_u64(t, n, &v)) {
			memcpy(out + o, t, n);
			memcpy(out + o + n, "e0", 2);
			o += n + 2;
			continue;
		}
		if (p->nbig == BIG_MAX) {
			free(out);
			return sg_seterr(p->err, SG_ECONFIG, "%s:%d: more than "
			    "%d integers above %lld", p->source, line, BIG_MAX,
			    (long long)INT64_MAX);
		}
		if (p->nbig % 64 == 0) {
			uint64_t *nb = realloc(p->big, (p->nbig + 64) *
			    sizeof(*nb));

			if (nb == NULL) {
				free(out);
				return SG_ENOMEM;
			}
			p->big = nb;
		}
		p->big[p->nbig] = v;
		o += (size_t)snprintf(out + o, cap - o, "%-*lld", (int)n,
		    (long long)(BIG_BASE + (int64_t)p->nbig));
		p->nbig++;
	}
	if (out == NULL)
		return 0;
	if (rline != 0) {
		free(out);
		return sg_seterr(p->err, SG_ECONFIG, "%s:%d: an integer from "
		    "%lld to %lld cannot be used together with one above %lld",
		    p->source, rline, (long long)BIG_BASE,
		    (long long)(BIG_BASE + BIG_MAX - 1), (long long)INT64_MAX);
	}
	if (o + (size_t)(e - from) + 1 > cap) {
		char *nb = realloc(out, o + (size_t)(e - from) + 1);

		if (nb == NULL) {
			free(out);
			return SG_ENOMEM;
		}
		out = nb;
	}
	memcpy(out + o, from, (size_t)(e - from));
	o += (size_t)(e - from);
	out[o] = '\0';
	*outp = out;
	*outlen = o;
	return 0;
}

/* v is the stand-in of a big literal: its value in *u. */
static bool
big_value(const struct pctx *p, const json_t *v, uint64_t *u)
{
	json_int_t i;

	if (p->nbig == 0 || !json_is_integer(v))
		return false;
	i = json_integer_value(v);
	if (i < BIG_BASE || i >= BIG_BASE + (json_int_t)p->nbig)
		return false;
	*u = p->big[i - BIG_BASE];
	return true;
}

static const char *
type_name(int type)
{
	switch (type) {
	case FT_BOOL:	return "boolean";
	case FT_UINT:
	case FT_U64:	return "unsigned integer";
	case FT_F64:	return "number";
	case FT_MAP:	return "object";
	default:	return "string";
	}
}

/* A field's value, read by its type (fv_read). */
struct fval {
	uint64_t	u;
	double		x;
	bool		b;
};

/* Check v against f's type and read it into *fv (v is not null). */
static int
fv_read(struct pctx *p, const char *loc, const struct field *f, json_t *v,
    struct fval *fv)
{
	switch (f->type) {
	case FT_BOOL:
		if (!json_is_boolean(v))
			goto badtype;
		fv->b = json_is_true(v);
		break;
	case FT_UINT:
	case FT_U64:
		if (big_value(p, v, &fv->u))
			;	/* above INT64_MAX, exact */
		else if (!json_is_integer(v) || json_integer_value(v) < 0)
			goto badtype;
		else
			fv->u = (uint64_t)json_integer_value(v);
		if (f->type == FT_UINT && fv->u > UINT_MAX)
			return cerr(p, loc, "%s: %llu is out of range "
			    "(at most %u)", f->name, (unsigned long long)fv->u,
			    UINT_MAX);
		break;
	case FT_F64:
		if (!json_is_number(v))
			goto badtype;
		fv->x = big_value(p, v, &fv->u) ? (double)fv->u :
		    json_number_value(v);
		break;
	case FT_STR:
	case FT_CMP:
	case FT_WEIGHT:
		if (!json_is_string(v))
			goto badtype;
		break;
	case FT_MAP:
		if (!json_is_object(v))
			goto badtype;
		break;
	}
	return 0;
badtype:
	return cerr(p, loc, "%s: expected %s", f->name, type_name(f->type));
}

static int
set_comparator(struct pctx *p, const char *loc, json_t *v, sg_algdef *d,
    bool full)
{
	const char *s = json_string_value(v);
	size_t len = json_string_length(v);
	char sh[LB_SHOW_MAX + 4];
	int i;

	for (i = 1; i < NCMP; i++)
		if (memeq(s, len, cmp_names[i]))
			break;
	if (i == NCMP) {
		show(sh, sizeof(sh), s, len);
		return cerr(p, loc, "comparator: unknown comparator "
		    "\"%s\" (expected ttft, queue-time, "
		    "input-work-seconds, utilization or "
		    "num-requests-queued)", sh);
	}
	if (full && d->algorithm == SG_ALG_PULSAR_WAW)
		return cerr(p, loc, "comparator is not supported for "
		    "pulsar-wait-and-widen");
	if (d->algorithm != SG_ALG_PULSAR_WAW)
		d->comparator = i;
	return 0;
}

static int
set_seed(struct pctx *p, const char *loc, json_t *v, sg_algdef *d)
{
	size_t len = json_string_length(v);

	if (len > SG_ID_MAX)
		return cerr(p, loc, "seed: longer than %d bytes", SG_ID_MAX);
	memcpy(d->seed, json_string_value(v), len);
	d->seed[len] = '\0';
	d->seed_len = len;
	return 0;
}

static int
set_weight(struct pctx *p, const char *loc, json_t *v, sg_algdef *d)
{
	const char *s = json_string_value(v);
	size_t len = json_string_length(v);
	char sh[LB_SHOW_MAX + 4];

	if (memeq(s, len, "max-input-tps"))
		d->rendezvous_weight = SG_WEIGHT_MAX_INPUT_TPS;
	else if (memeq(s, len, "last-mean-input-tps"))
		d->rendezvous_weight = SG_WEIGHT_LAST_MEAN_INPUT_TPS;
	else {
		show(sh, sizeof(sh), s, len);
		return cerr(p, loc, "rendezvous_weight: unknown weight "
		    "\"%s\" (expected max-input-tps or "
		    "last-mean-input-tps)", sh);
	}
	return 0;
}

/* The fields whose value is stored as read, without a check. */
static bool
set_plain(const struct field *f, const struct fval *fv, sg_algdef *d)
{
	switch (f->id) {
	case FI_REQUIRE_KEY:	d->require_cache_affinity_key = fv->b; break;
	case FI_REQUIRE_TOKENS:	d->require_input_tokens = fv->b; break;
	case FI_WAIT:		d->affinity_wait_ms = fv->u; break;
	case FI_BUCKET:		d->ttft_bucket_size_ms = fv->u; break;
	case FI_MAX_QUEUED:	d->max_queued = fv->u; break;
	case FI_IGN_QUEUE:	d->ignore_queue_time = fv->b; break;
	case FI_IGN_PREFILL:	d->ignore_input_processing_time = fv->b; break;
	case FI_LAST_CLUSTER:	d->last_cluster_affinity = fv->b; break;
	case FI_N:		d->n = fv->u == 0 ? 1 : (unsigned)fv->u; break;
	case FI_UNLOCK:		/* not range-checked */
		d->next_bucket_unlock_factor = fv->x;
		break;
	case FI_MAX_WORK:	/* not range-checked (ref) */
		d->has_max_input_work = true;
		d->max_input_work_seconds = fv->x;
		break;
	case FI_FLOOR:
		d->has_queue_floor = true;
		d->max_queue_time_floor_ms = fv->u;
		break;
	case FI_CEIL:
		d->has_queue_ceil = true;
		d->max_queue_time_ceil_ms = fv->u;
		break;
	case FI_SELECTION:
		if (fv->u == 0)
			d->selection_count =
			    d->algorithm == SG_ALG_PULSAR_WAW ? 1 : 0;
		else
			d->selection_count = (unsigned)fv->u;
		break;
	default:
		return false;
	}
	return true;
}

/*
 * Read one present field into d.  full: also apply the factory checks
 * (ranges, per-algorithm refusals).  *map receives a request_algorithms
 * object (borrowed).
 */
static int
set_field(struct pctx *p, const char *loc, const struct field *f, json_t *v,
    sg_algdef *d, bool full, json_t **map)
{
	int alg = d->algorithm;
	struct fval fv = { 0, 0, false };
	int rc;

	if (json_is_null(v)) {
		if (f->nullable)
			return 0;	/* unset, the default */
		return cerr(p, loc, "%s: invalid type: null, expected %s",
		    f->name, type_name(f->type));
	}
	if ((rc = fv_read(p, loc, f, v, &fv)) != 0)
		return rc;
	if (set_plain(f, &fv, d))
		return 0;
	switch (f->id) {
	case FI_REQUEST_ALGS:
		*map = v;
		break;
	case FI_SAMPLE_COUNT:
		if (full && (fv.u < 1 || fv.u > 64))
			return cerr(p, loc, "power-of-n sample_count must be "
			    "between 1 and 64, got %llu",
			    (unsigned long long)fv.u);
		d->sample_count = fv.u > 64 ? 64 : (unsigned)fv.u;
		break;
	case FI_COMPARATOR:
		return set_comparator(p, loc, v, d, full);
	case FI_SEED:
		return set_seed(p, loc, v, d);
	case FI_KV_FREE:
		if (full && alg != SG_ALG_PULSAR && alg != SG_ALG_PULSAR_WAW)
			return cerr(p, loc, "consider_kv_free_tokens is "
			    "supported only for pulsar and "
			    "pulsar-wait-and-widen");
		d->consider_kv_free_tokens = fv.b;
		break;
	case FI_WEIGHT:
		return set_weight(p, loc, v, d);
	case FI_VNODES:
		/* Bounded like the upstream expression range: the ring holds
		 * V entries per candidate and is rebuilt per decision. */
		if (full && fv.u > 1024)
			return cerr(p, loc, "cache_affinity_virtual_nodes must "
			    "be between 0 and 1024, got %llu",
			    (unsigned long long)fv.u);
		d->virtual_nodes = fv.u == 0 ? 1 : (unsigned)fv.u;
		break;
	case FI_SCALE:
		if (full && !(isfinite(fv.x) && fv.x >= 0.0 && fv.x <= 1.0)) {
			char num[40];

			fmtnum(num, sizeof(num), fv.x);
			return cerr(p, loc, "cache_affinity_input_tokens_scale "
			    "must be between 0.0 and 1.0, got %s", num);
		}
		d->affinity_scale = fv.x;
		break;
	case FI_BAND:
	case FI_FALLBACK:
		if (full && alg != SG_ALG_PULSAR_WAW)
			return cerr(p, loc, "%s is supported only for "
			    "pulsar-wait-and-widen", f->name);
		if (f->id == FI_BAND) {
			d->has_band_widen = true;
			d->band_widen_interval_ms = fv.u;
		} else
			d->fallback_max_queued = fv.u;
		break;
	}
	return 0;
}

static int parse_ra_discard(struct pctx *, const char *, json_t *);

/*
 * Parse one entry (name string or detailed object) into d.  full: a real
 * definition (factory checks on).  *map: the entry's request_algorithms
 * object (borrowed) or NULL; when map is NULL the caller does not use it and
 * it is parsed and discarded here.
 */
static int
parse_entry(struct pctx *p, const char *loc, json_t *v, sg_algdef *d,
    bool full, json_t **map)
{
	json_t *av, *ra = NULL;
	char sh[LB_SHOW_MAX + 4];
	size_t i;
	int alg, rc;

	if (map != NULL)
		*map = NULL;
	if (json_is_string(v)) {
		if (sg_algorithm_parse(json_string_value(v),
		    json_string_length(v), &alg) != 0) {
			show(sh, sizeof(sh), json_string_value(v),
			    json_string_length(v));
			return cerr(p, loc, "unknown algorithm \"%s\"", sh);
		}
		def_init(d, alg);
		return 0;
	}
	if (!json_is_object(v))
		return cerr(p, loc, "must be an algorithm name or detailed "
		    "config object");
	if ((av = json_object_get(v, "algorithm")) == NULL)
		return cerr(p, loc, "missing field algorithm");
	if (!json_is_string(av))
		return cerr(p, loc, "algorithm: %s",
		    json_is_null(av) ? "invalid type: null, expected string" :
		    "expected string");
	if (sg_algorithm_parse(json_string_value(av), json_string_length(av),
	    &alg) != 0) {
		show(sh, sizeof(sh), json_string_value(av),
		    json_string_length(av));
		return cerr(p, loc, "algorithm: unknown algorithm \"%s\"", sh);
	}
	def_init(d, alg);
	if ((rc = check_unsupported(p, loc, v, alg)) != 0)
		return rc;
	/* Table order, not file order: the first error is deterministic. */
	for (i = 0; i < NFIELDS; i++) {
		json_t *fv = json_object_get(v, fields[i].name);

		if (fv == NULL)
			continue;
		if ((rc = set_field(p, loc, &fields[i], fv, d, full, &ra)) != 0)
			return rc;
	}
	if (ra != NULL) {
		if (map != NULL)
			*map = ra;
		else {
			char sub[LB_LOC_MAX];

			subloc(sub, loc, "request_algorithms", 18);
			if ((rc = parse_ra_discard(p, sub, ra)) != 0)
				return rc;
		}
	}
	return 0;
}

/* A request_algorithms map nested in an override: shape and types only. */
static int
parse_ra_discard(struct pctx *p, const char *loc, json_t *map)
{
	const char *key;
	json_t *v;
	int rc;

	json_object_foreach(map, key, v) {
		char sub[LB_LOC_MAX];
		sg_algdef d;

		subloc(sub, loc, key, strlen(key));
		if ((rc = parse_entry(p, sub, v, &d, false, NULL)) != 0)
			return rc;
	}
	return 0;
}

/*
 * A request_algorithms map that counts: every entry becomes a definition in
 * ra[algorithm].  loc names the owner ("" for the top level).
 */
static int
parse_ra(struct pctx *p, const char *loc, json_t *map, int *ra)
{
	const char *firstkey[SG_ALG_COUNT] = { NULL };
	const char *key;
	json_t *v;
	int rc;

	if (!json_is_object(map))
		return cerr(p, loc, "request_algorithms: expected object");
	json_object_foreach(map, key, v) {
		char sub[LB_LOC_MAX], ra_loc[LB_LOC_MAX], k1[LB_SHOW_MAX + 4],
		    k2[LB_SHOW_MAX + 4];
		sg_algdef d;
		int kalg, id;

		subloc(ra_loc, loc, "request_algorithms", 18);
		subloc(sub, ra_loc, key, strlen(key));
		if ((rc = parse_entry(p, sub, v, &d, true, NULL)) != 0)
			return rc;
		if (sg_algorithm_parse(key, strlen(key), &kalg) != 0 ||
		    kalg != d.algorithm) {
			show(k1, sizeof(k1), key, strlen(key));
			return cerr(p, loc, "request_algorithms key %s does not "
			    "match configured algorithm %s", k1,
			    alg_names[d.algorithm]);
		}
		if (firstkey[kalg] != NULL) {
			show(k1, sizeof(k1), firstkey[kalg],
			    strlen(firstkey[kalg]));
			show(k2, sizeof(k2), key, strlen(key));
			return cerr(p, loc, "request_algorithms has more than "
			    "one entry for %s (keys %s and %s)",
			    alg_names[kalg], k1, k2);
		}
		firstkey[kalg] = key;
		if ((rc = add_def(p->c, &d, &id)) != 0)
			return rc;
		ra[kalg] = id;
	}
	return 0;
}

static int
modelcmp(const void *a, const void *b)
{
	const struct lbmodel *x = a, *y = b;
	size_t n = x->len < y->len ? x->len : y->len;
	int r = memcmp(x->name, y->name, n);

	if (r != 0)
		return r;
	return x->len < y->len ? -1 : x->len > y->len;
}

static int
parse_models(struct pctx *p, json_t *models)
{
	sg_lbconf *c = p->c;
	const char *key;
	json_t *v;
	size_t n;
	int rc;

	if (!json_is_object(models))
		return cerr(p, "", "models: expected object");
	if ((n = json_object_size(models)) == 0)
		return 0;
	if ((c->models = calloc(n, sizeof(*c->models))) == NULL)
		return SG_ENOMEM;
	json_object_foreach(models, key, v) {
		struct lbmodel *m = &c->models[c->nmodels];
		char loc[LB_LOC_MAX];
		json_t *ra = NULL;
		sg_algdef d;
		size_t klen = strlen(key), i;

		subloc(loc, "models", key, klen);
		if ((rc = parse_entry(p, loc, v, &d, true, &ra)) != 0)
			return rc;
		if ((m->name = malloc(klen + 1)) == NULL)
			return SG_ENOMEM;
		memcpy(m->name, key, klen + 1);
		m->len = klen;
		for (i = 0; i < SG_ALG_COUNT; i++)
			m->ra[i] = NODEF;
		c->nmodels++;
		if ((rc = add_def(c, &d, &m->def)) != 0)
			return rc;
		if (ra != NULL && (rc = parse_ra(p, loc, ra, m->ra)) != 0)
			return rc;
	}
	qsort(c->models, c->nmodels, sizeof(*c->models), modelcmp);
	return 0;
}

static sg_lbconf *
conf_new(void)
{
	sg_lbconf *c;
	size_t i;

	if ((c = calloc(1, sizeof(*c))) == NULL)
		return NULL;
	c->def_default = NODEF;
	for (i = 0; i < SG_ALG_COUNT; i++)
		c->ra[i] = NODEF;
	return c;
}

/* --- public: lifecycle ----------------------------------------------------- */

/*
 * Parse text[0..len) as lb-config.json.  source names the input at the
 * start of every message.  On success *out owns a new configuration (free
 * with sg_lbconf_free).  Returns 0, SG_ECONFIG (detail in err) or
 * SG_ENOMEM.
 */
int
sg_lbconf_parse(sg_lbconf **out, const char *text, size_t len,
    const char *source, sg_error *err)
{
	struct pctx p = { NULL, source != NULL ? source : "lb-config", err,
	    NULL, 0 };
	json_t *root = NULL, *v;
	json_error_t jerr;
	const char *key;
	char *copy = NULL;
	size_t clen = 0;
	sg_algdef d;
	int rc = 0;

	if (text == NULL && len > 0)
		return sg_seterr(err, SG_EINVAL, "no input");
	if ((p.c = conf_new()) == NULL) {
		rc = SG_ENOMEM;
		goto out;
	}
	if (text != NULL && (rc = big_scan(&p, text, len, &copy, &clen)) != 0)
		goto out;
	root = json_loadb(copy != NULL ? copy : text != NULL ? text : "",
	    copy != NULL ? clen : len, JSON_REJECT_DUPLICATES, &jerr);
	free(copy);
	if (root == NULL) {
		rc = sg_seterr(err, SG_ECONFIG, "%s:%d:%d: invalid JSON: %s",
		    p.source, jerr.line, jerr.column, jerr.text);
		goto out;
	}
	if (!json_is_object(root)) {
		rc = cerr(&p, "", "top level must be a JSON object");
		goto out;
	}
	json_object_foreach(root, key, v) {
		if (strcmp(key, "default") != 0 &&
		    strcmp(key, "request_algorithms") != 0 &&
		    strcmp(key, "models") != 0) {
			char sh[LB_SHOW_MAX + 4];

			show(sh, sizeof(sh), key, strlen(key));
			rc = cerr(&p, "", "unknown field %s (expected default, "
			    "request_algorithms or models)", sh);
			goto out;
		}
	}

	/* default: a name only (stargate-lb-config(5)). */
	if ((v = json_object_get(root, "default")) != NULL) {
		char sh[LB_SHOW_MAX + 4];
		int alg;

		if (json_is_object(v)) {
			rc = cerr(&p, "default", "must be an algorithm name; a "
			    "detailed config object is allowed only under "
			    "models and request_algorithms");
			goto out;
		}
		if (!json_is_string(v)) {
			rc = cerr(&p, "default", "must be an algorithm name");
			goto out;
		}
		if (sg_algorithm_parse(json_string_value(v),
		    json_string_length(v), &alg) != 0) {
			show(sh, sizeof(sh), json_string_value(v),
			    json_string_length(v));
			rc = cerr(&p, "default", "unknown algorithm \"%s\"", sh);
			goto out;
		}
		def_init(&d, alg);
	} else
		def_init(&d, SG_ALG_POWER_OF_N);
	if ((rc = add_def(p.c, &d, &p.c->def_default)) != 0)
		goto out;

	if ((v = json_object_get(root, "request_algorithms")) != NULL &&
	    (rc = parse_ra(&p, "", v, p.c->ra)) != 0)
		goto out;
	if ((v = json_object_get(root, "models")) != NULL &&
	    (rc = parse_models(&p, v)) != 0)
		goto out;
out:
	if (rc == SG_ENOMEM)
		sg_seterr(err, rc, "%s: out of memory", p.source);
	json_decref(root);
	free(p.big);
	if (rc != 0) {
		sg_lbconf_free(p.c);
		return rc;
	}
	*out = p.c;
	return 0;
}

/*
 * Read and parse the file at path (at most 64 MiB).  A file that cannot be
 * opened or read is a configuration error too (SG_ECONFIG, with the system's
 * reason in err), so a program maps every failure here to one exit status.
 */
int
sg_lbconf_load(sg_lbconf **out, const char *path, sg_error *err)
{
	FILE *fp = NULL;
	char *buf = NULL;
	size_t len = 0, cap = 0;
	int rc = 0;

	if (path == NULL)
		return sg_seterr(err, SG_EINVAL, "no path");
	if ((fp = fopen(path, "rb")) == NULL) {
		rc = sg_seterr(err, SG_ECONFIG, "%s: cannot open: %s", path,
		    strerror(errno));
		goto out;
	}
	for (;;) {
		size_t n;

		if (len == cap) {
			size_t ncap = cap != 0 ? 2 * cap : 8192;
			char *nb;

			/* one byte over the limit tells "too big" from "full" */
			if (cap > LB_MAX_FILE) {
				rc = sg_seterr(err, SG_ECONFIG, "%s: larger than "
				    "%u bytes", path, LB_MAX_FILE);
				goto out;
			}
			if (ncap > LB_MAX_FILE + 1)
				ncap = LB_MAX_FILE + 1;
			if ((nb = realloc(buf, ncap)) == NULL) {
				rc = sg_seterr(err, SG_ENOMEM, "%s: out of "
				    "memory", path);
				goto out;
			}
			buf = nb;
			cap = ncap;
		}
		n = fread(buf + len, 1, cap - len, fp);
		len += n;
		if (n == 0) {
			if (ferror(fp)) {
				rc = sg_seterr(err, SG_ECONFIG, "%s: read error: "
				    "%s", path, strerror(errno));
				goto out;
			}
			break;
		}
	}
	rc = sg_lbconf_parse(out, buf, len, path, err);
out:
	if (fp != NULL)
		fclose(fp);
	free(buf);
	return rc;
}

/*
 * The permissive default (stargate-lb-config(5)): power-of-n with defaults, and
 * every other built-in algorithm (defaults) allowed as a request override.
 * power-of-n itself resolves to the default definition (rule 1).
 */
int
sg_lbconf_default(sg_lbconf **out, sg_error *err)
{
	sg_lbconf *c;
	sg_algdef d;
	int alg, rc;

	if ((c = conf_new()) == NULL)
		return sg_seterr(err, SG_ENOMEM, "out of memory");
	def_init(&d, SG_ALG_POWER_OF_N);
	if ((rc = add_def(c, &d, &c->def_default)) != 0)
		goto fail;
	for (alg = 0; alg < SG_ALG_COUNT; alg++) {
		if (alg == SG_ALG_POWER_OF_N)
			continue;
		def_init(&d, alg);
		if ((rc = add_def(c, &d, &c->ra[alg])) != 0)
			goto fail;
	}
	*out = c;
	return 0;
fail:
	sg_lbconf_free(c);
	return sg_seterr(err, rc, "out of memory");
}

void
sg_lbconf_free(sg_lbconf *c)
{
	size_t i;

	if (c == NULL)
		return;
	for (i = 0; i < c->nmodels; i++)
		free(c->models[i].name);
	free(c->models);
	free(c->defs);
	free(c);
}

size_t
sg_lbconf_ndefs(const sg_lbconf *c)
{
	return c != NULL ? c->ndefs : 0;
}

/* Borrowed; NULL when id is out of range. */
const sg_algdef *
sg_lbconf_def(const sg_lbconf *c, size_t id)
{
	if (c == NULL || id >= c->ndefs)
		return NULL;
	return &c->defs[id];
}

/* --- public: resolution (stargate-lb-config(5)) --------------------------- */

static const struct lbmodel *
find_model(const sg_lbconf *c, const char *model)
{
	struct lbmodel key;

	if (model == NULL || c->nmodels == 0)
		return NULL;
	key.name = (char *)(uintptr_t)model;
	key.len = strlen(model);
	return bsearch(&key, c->models, c->nmodels, sizeof(*c->models),
	    modelcmp);
}

#define METHOD_MAX	64	/* longer than any name or alias */

int
sg_lbconf_resolve(const sg_lbconf *c, const char *model,
    const char *routing_method, bool method_invalid,
    const sg_algdef **out, sg_error *err)
{
	const struct lbmodel *m;
	const char *s;
	char buf[METHOD_MAX + 1], sh[LB_SHOW_MAX + 4], mh[LB_SHOW_MAX + 4];
	size_t len, i;
	int cfg, alg, id;

	if (c == NULL || c->ndefs == 0)
		return sg_seterr(err, SG_EINVAL, "no configuration");
	m = find_model(c, model);
	cfg = m != NULL ? m->def : c->def_default;
	if (routing_method == NULL && !method_invalid) {
		*out = &c->defs[cfg];
		return 0;
	}
	if (method_invalid || !sg_utf8_valid(routing_method,
	    strlen(routing_method)))
		return sg_seterr_http(err, SG_EREQUEST, 400, "unknown_method",
		    "unknown routing method \"<invalid-utf8>\"");
	s = routing_method;
	len = strlen(s);
	sg_trim(&s, &len);
	if (len == 0)
		return sg_seterr_http(err, SG_EREQUEST, 400, "unknown_method",
		    "unknown routing method \"\" (blank x-routing-method)");
	if (memchr(s, ';', len) != NULL)
		return sg_seterr_http(err, SG_EREQUEST, 400,
		    "malformed_expression", "malformed routing expression: "
		    "parameters after ';' are not supported");
	show(sh, sizeof(sh), s, len);
	if (len > METHOD_MAX)
		return sg_seterr_http(err, SG_EREQUEST, 400, "unknown_method",
		    "unknown routing method \"%s\"", sh);
	for (i = 0; i < len; i++) {
		char ch = s[i];

		if (ch >= 'A' && ch <= 'Z')
			ch = (char)(ch - 'A' + 'a');
		else if (ch == '_')
			ch = '-';
		buf[i] = ch;
	}
	if (sg_algorithm_parse(buf, len, &alg) != 0)
		return sg_seterr_http(err, SG_EREQUEST, 400, "unknown_method",
		    "unknown routing method \"%s\"", sh);

	if (c->defs[cfg].algorithm == alg)
		id = cfg;				/* (1) */
	else if (m != NULL && m->ra[alg] != NODEF)
		id = m->ra[alg];			/* (2) */
	else
		id = c->ra[alg];		/* (2) default set, or (3) */
	if (id == NODEF) {				/* (4) */
		show(mh, sizeof(mh), model != NULL ? model : "",
		    model != NULL ? strlen(model) : 0);
		return sg_seterr_http(err, SG_EREQUEST, 400, "unavailable",
		    "routing method %s is not available for model \"%s\"",
		    alg_names[alg], mh);
	}
	*out = &c->defs[id];
	return 0;
}
