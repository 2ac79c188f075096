/*
 * sg_clusterfile.c — the cluster-file codec, stargate-clusters(5).
 *
 * Parsing is one pass over the jansson tree: the top level, then each
 * cluster entry, each with a table-free sequence of field readers that
 * report "<path>: <problem>" through one helper (cerr), the path built as
 * "clusters[2].stats.url".  Unknown keys are looked for first, so a typo is
 * reported as such rather than as a missing field.  Duplicate ids are found
 * with a linear scan per entry (files are small; SG_MAX_CANDIDATES bounds
 * them).  URLs are checked for the http://host[:port][/path] shape only:
 * they are handed to an HTTP client later, which does the rest.
 *
 * Everything a parsed file owns is allocated here and released by
 * sg_clusterfile_free(), which also cleans up a half-built file.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sg_clusterfile.h"

#define NELEM(a)	(sizeof(a) / sizeof((a)[0]))
#define SHOW_MAX	64

typedef struct pctx {
	sg_error	*err;
} pctx;

/* "<path>: <message>"; returns SG_ECONFIG. */
static int
cerr(pctx *p, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int
cerr(pctx *p, const char *path, const char *fmt, ...)
{
	char msg[200];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (path[0] == '\0')
		return sg_seterr(p->err, SG_ECONFIG, "%s", msg);
	return sg_seterr(p->err, SG_ECONFIG, "%s: %s", path, msg);
}

/* A printable, bounded rendering of s[0..n) for messages. */
static void
show(char *out, size_t cap, const char *s, size_t n)
{
	size_t i, o = 0;

	for (i = 0; i < n && o + 4 < cap; i++)
		out[o++] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
	if (i < n && o + 4 <= cap) {
		memcpy(out + o, "...", 3);
		o += 3;
	}
	out[o] = '\0';
}

/* No control characters (they could end up in headers and logs). */
static bool
clean(const char *s, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			return false;
	return true;
}

/* out = parent "." key (or key at the top), truncated to cap. */
static void
mkpath(char *out, size_t cap, const char *parent, const char *key)
{
	size_t o = 0, n;

	n = strlen(parent);
	if (n > cap - 1)
		n = cap - 1;
	memcpy(out, parent, n);
	o = n;
	if (o > 0 && o < cap - 1)
		out[o++] = '.';
	n = strlen(key);
	if (n > cap - 1 - o)
		n = cap - 1 - o;
	memcpy(out + o, key, n);
	out[o + n] = '\0';
}

/* Reject keys not in allowed (NULL-terminated). */
static int
check_keys(pctx *p, const char *where, const json_t *obj,
    const char *const *allowed)
{
	const char *key;
	json_t *v;
	size_t i;

	json_object_foreach((json_t *)(uintptr_t)obj, key, v) {
		char sh[SHOW_MAX + 4], path[128];

		for (i = 0; allowed[i] != NULL; i++)
			if (strcmp(key, allowed[i]) == 0)
				break;
		if (allowed[i] != NULL)
			continue;
		show(sh, sizeof(sh), key, strlen(key));
		mkpath(path, sizeof(path), where, sh);
		return cerr(p, path, "unknown field");
	}
	return 0;
}

/* An integer in [lo, hi]. */
static int
get_int(pctx *p, const char *path, const json_t *v, uint64_t lo, uint64_t hi,
    uint64_t *out)
{
	json_int_t x;

	if (!json_is_integer(v) || (x = json_integer_value(v)) < 0 ||
	    (uint64_t)x < lo || (uint64_t)x > hi) {
		if (lo == 0 && hi == UINT64_MAX)
			return cerr(p, path, "expected a non-negative integer");
		return cerr(p, path, "expected an integer %llu..%llu",
		    (unsigned long long)lo, (unsigned long long)hi);
	}
	*out = (uint64_t)x;
	return 0;
}

/* A finite number in [0, hi] (hi = INFINITY: no upper bound). */
static int
get_num(pctx *p, const char *path, const json_t *v, double hi, double *out)
{
	double d;

	if (!json_is_number(v) || !isfinite(d = json_number_value(v)) ||
	    d < 0 || d > hi) {
		if (isinf(hi))
			return cerr(p, path, "expected a non-negative number");
		return cerr(p, path, "expected a number 0..%g", hi);
	}
	*out = d;
	return 0;
}

static int
dup_str(pctx *p, char **out, const char *s, size_t n, const char *suffix)
{
	size_t m = suffix != NULL ? strlen(suffix) : 0;

	if ((*out = malloc(n + m + 1)) == NULL)
		return sg_seterr(p->err, SG_ENOMEM, "out of memory");
	memcpy(*out, s, n);
	if (m > 0)
		memcpy(*out + n, suffix, m);
	(*out)[n + m] = '\0';
	return 0;
}

/* --- URLs ---------------------------------------------------------------- */

static bool
host_char(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
	    (ch >= '0' && ch <= '9') || ch == '.' || ch == '-' || ch == '_' ||
	    ch == '~' || ch == '%';
}

static bool
v6_char(char ch)
{
	return (ch >= 'a' && ch <= 'f') || (ch >= 'A' && ch <= 'F') ||
	    (ch >= '0' && ch <= '9') || ch == ':' || ch == '.';
}

/*
 * Check http://host[:port][/path][?query] (query only when allow_query);
 * NULL if fine, else what is wrong.
 */
static const char *
url_problem(const char *s, size_t n, bool allow_query)
{
	size_t i, h;

	if (n > SG_CF_MAX_URL)
		return "URL too long";
	if (!clean(s, n) || memchr(s, ' ', n) != NULL)
		return "URL contains a space or a control character";
	if (n >= 8 && strncmp(s, "https://", 8) == 0)
		return "https:// is not supported (expected "
		    "http://host[:port])";
	if (n < 7 || strncmp(s, "http://", 7) != 0)
		return "expected an http:// URL (http://host[:port][/path])";
	i = h = 7;
	if (i < n && s[i] == '[') {
		for (i++; i < n && v6_char(s[i]); i++)
			;
		if (i >= n || s[i] != ']' || i == h + 1)
			return "bad IPv6 address literal in host";
		i++;
	} else {
		for (; i < n && host_char(s[i]); i++)
			;
		if (i == h)
			return "missing host";
	}
	if (i < n && s[i] == ':') {
		size_t d = ++i;
		unsigned long port = 0;

		for (; i < n && s[i] >= '0' && s[i] <= '9' && i - d < 6; i++)
			port = port * 10 + (unsigned long)(s[i] - '0');
		if (i == d || port == 0 || port > 65535)
			return "bad port (expected 1..65535)";
	}
	if (i < n && s[i] == '@')
		return "user information is not allowed in the URL";
	if (i < n && s[i] != '/' && !(allow_query && s[i] == '?'))
		return "bad host (expected http://host[:port][/path])";
	for (; i < n; i++) {
		if (s[i] == '#')
			return "a URL fragment is not allowed";
		if (s[i] == '?' && !allow_query)
			return "a query is not allowed in the base URL";
	}
	return NULL;
}

/* --- one cluster --------------------------------------------------------- */

static const char *const cluster_keys[] = { "id", "url", "models", "stats",
	"max_engine_concurrency", "rtt_ms", "max_input_tps",
	"kv_capacity_tokens", NULL };
static const char *const stats_keys[] = { "format", "url", NULL };
static const char *const top_keys[] = { "stats_interval_ms",
	"stats_stale_ms", "stats_timeout_ms", "clusters", NULL };

static int
parse_id(pctx *p, const char *where, const json_t *v, sg_clusterdef *d)
{
	char path[96];
	size_t n;

	mkpath(path, sizeof(path), where, "id");
	if (v == NULL)
		return cerr(p, path, "required");
	if (!json_is_string(v) || (n = json_string_length(v)) == 0 ||
	    n > SG_ID_MAX || strlen(json_string_value(v)) != n ||
	    !clean(json_string_value(v), n))
		return cerr(p, path, "expected a string of 1..%d bytes without "
		    "control characters", SG_ID_MAX);
	memcpy(d->id, json_string_value(v), n);
	d->id[n] = '\0';
	d->id_len = n;
	return 0;
}

static int
parse_url(pctx *p, const char *path, const json_t *v, bool allow_query,
    char **out)
{
	const char *s, *why;
	size_t n;

	if (v == NULL)
		return cerr(p, path, "required");
	if (!json_is_string(v))
		return cerr(p, path, "expected a string");
	s = json_string_value(v);
	n = json_string_length(v);
	if (strlen(s) != n)
		return cerr(p, path, "URL contains a NUL byte");
	if ((why = url_problem(s, n, allow_query)) != NULL) {
		char sh[SHOW_MAX + 4];

		show(sh, sizeof(sh), s, n);
		return cerr(p, path, "%s: \"%s\"", why, sh);
	}
	if (!allow_query)
		while (n > 7 && s[n - 1] == '/')
			n--;
	return dup_str(p, out, s, n, NULL);
}

static int
parse_models(pctx *p, const char *where, const json_t *v, sg_clusterdef *d)
{
	char path[128];
	size_t i, j, n;
	int rc;

	mkpath(path, sizeof(path), where, "models");
	if (v == NULL)
		return cerr(p, path, "required");
	if (!json_is_array(v) || (n = json_array_size(v)) == 0)
		return cerr(p, path, "expected a non-empty array of model "
		    "names");
	if (n > SG_CF_MAX_MODELS)
		return cerr(p, path, "more than %d models", SG_CF_MAX_MODELS);
	if ((d->models = calloc(n, sizeof(*d->models))) == NULL)
		return sg_seterr(p->err, SG_ENOMEM, "out of memory");
	for (i = 0; i < n; i++) {
		const json_t *m = json_array_get(v, i);
		size_t len;

		snprintf(path, sizeof(path), "%s%smodels[%zu]", where,
		    where[0] != '\0' ? "." : "", i);
		if (!json_is_string(m) || (len = json_string_length(m)) == 0 ||
		    len > SG_CF_MAX_NAME || strlen(json_string_value(m)) !=
		    len || !clean(json_string_value(m), len))
			return cerr(p, path, "expected a model name of 1..%d "
			    "bytes without control characters",
			    SG_CF_MAX_NAME);
		for (j = 0; j < d->nmodels; j++)
			if (strcmp(d->models[j], json_string_value(m)) == 0) {
				char sh[SHOW_MAX + 4];

				show(sh, sizeof(sh), json_string_value(m), len);
				return cerr(p, path, "duplicate model \"%s\"",
				    sh);
			}
		if ((rc = dup_str(p, &d->models[i], json_string_value(m), len,
		    NULL)) != 0)
			return rc;
		d->nmodels++;
	}
	return 0;
}

static int
parse_stats(pctx *p, const char *where, const json_t *v, sg_clusterdef *d)
{
	char path[128];
	const json_t *f, *u;
	int rc;

	d->stats_format = SG_STATS_STARGATE;
	mkpath(path, sizeof(path), where, "stats");
	if (v != NULL) {
		char sub[128];

		if (!json_is_object(v))
			return cerr(p, path, "expected an object");
		if ((rc = check_keys(p, path, v, stats_keys)) != 0)
			return rc;
		if ((f = json_object_get(v, "format")) != NULL) {
			mkpath(sub, sizeof(sub), path, "format");
			if (!json_is_string(f))
				return cerr(p, sub, "expected \"stargate\" or "
				    "\"vllm\"");
			if (strcmp(json_string_value(f), "vllm") == 0)
				d->stats_format = SG_STATS_VLLM;
			else if (strcmp(json_string_value(f), "stargate") != 0)
				return cerr(p, sub, "expected \"stargate\" or "
				    "\"vllm\"");
		}
		if ((u = json_object_get(v, "url")) != NULL) {
			mkpath(sub, sizeof(sub), path, "url");
			return parse_url(p, sub, u, true, &d->stats_url);
		}
	}
	return dup_str(p, &d->stats_url, d->url, strlen(d->url),
	    d->stats_format == SG_STATS_VLLM ? "/metrics" : "/stats");
}

static int
parse_cluster(pctx *p, const char *where, const json_t *obj, sg_clusterdef *d)
{
	char path[128];
	const json_t *v;
	int rc;

	if (!json_is_object(obj))
		return cerr(p, where, "expected an object");
	if ((rc = check_keys(p, where, obj, cluster_keys)) != 0 ||
	    (rc = parse_id(p, where, json_object_get(obj, "id"), d)) != 0)
		return rc;
	mkpath(path, sizeof(path), where, "url");
	if ((rc = parse_url(p, path, json_object_get(obj, "url"), false,
	    &d->url)) != 0 ||
	    (rc = parse_models(p, where, json_object_get(obj, "models"),
	    d)) != 0 ||
	    (rc = parse_stats(p, where, json_object_get(obj, "stats"),
	    d)) != 0)
		return rc;
	if ((v = json_object_get(obj, "max_engine_concurrency")) != NULL) {
		mkpath(path, sizeof(path), where, "max_engine_concurrency");
		if ((rc = get_int(p, path, v, 0, 1000000000,
		    &d->max_engine_concurrency)) != 0)
			return rc;
	}
	if ((v = json_object_get(obj, "rtt_ms")) != NULL) {
		mkpath(path, sizeof(path), where, "rtt_ms");
		if ((rc = get_num(p, path, v, 60000, &d->rtt_ms)) != 0)
			return rc;
		d->has_rtt = true;
	}
	if ((v = json_object_get(obj, "max_input_tps")) != NULL) {
		mkpath(path, sizeof(path), where, "max_input_tps");
		if ((rc = get_num(p, path, v, INFINITY,
		    &d->max_input_tps)) != 0)
			return rc;
	}
	if ((v = json_object_get(obj, "kv_capacity_tokens")) != NULL) {
		mkpath(path, sizeof(path), where, "kv_capacity_tokens");
		if ((rc = get_int(p, path, v, 0, UINT64_MAX,
		    &d->kv_capacity_tokens)) != 0)
			return rc;
	}
	return 0;
}

/* --- the file ------------------------------------------------------------ */

static int
parse_timing(pctx *p, const json_t *root, sg_clusterfile *cf)
{
	const json_t *v;
	int rc;

	cf->stats_interval_ms = 250;
	cf->stats_stale_ms = 3000;
	if ((v = json_object_get(root, "stats_interval_ms")) != NULL &&
	    (rc = get_int(p, "stats_interval_ms", v, 10, 60000,
	    &cf->stats_interval_ms)) != 0)
		return rc;
	if ((v = json_object_get(root, "stats_stale_ms")) != NULL) {
		if ((rc = get_int(p, "stats_stale_ms", v, 11, 3600000,
		    &cf->stats_stale_ms)) != 0)
			return rc;
	}
	if (cf->stats_stale_ms <= cf->stats_interval_ms)
		return cerr(p, v != NULL ? "stats_stale_ms" :
		    "stats_interval_ms", "stats_stale_ms (%llu) must be "
		    "greater than stats_interval_ms (%llu)",
		    (unsigned long long)cf->stats_stale_ms,
		    (unsigned long long)cf->stats_interval_ms);
	cf->stats_timeout_ms = cf->stats_stale_ms < 1000 ?
	    cf->stats_stale_ms : 1000;
	if ((v = json_object_get(root, "stats_timeout_ms")) != NULL &&
	    (rc = get_int(p, "stats_timeout_ms", v, 1, cf->stats_stale_ms,
	    &cf->stats_timeout_ms)) != 0)
		return rc;
	return 0;
}

static int
parse_clusters(pctx *p, const json_t *v, sg_clusterfile *cf)
{
	size_t i, j, n;
	int rc;

	if (v == NULL)
		return cerr(p, "clusters", "required");
	if (!json_is_array(v) || (n = json_array_size(v)) == 0)
		return cerr(p, "clusters", "expected a non-empty array");
	if (n > SG_MAX_CANDIDATES)
		return cerr(p, "clusters", "more than %d clusters",
		    SG_MAX_CANDIDATES);
	if ((cf->c = calloc(n, sizeof(*cf->c))) == NULL)
		return sg_seterr(p->err, SG_ENOMEM, "out of memory");
	for (i = 0; i < n; i++) {
		sg_clusterdef *d = &cf->c[i];
		char where[32];

		snprintf(where, sizeof(where), "clusters[%zu]", i);
		cf->n = i + 1;
		if ((rc = parse_cluster(p, where, json_array_get(v, i),
		    d)) != 0)
			return rc;
		for (j = 0; j < i; j++)
			if (cf->c[j].id_len == d->id_len &&
			    memcmp(cf->c[j].id, d->id, d->id_len) == 0) {
				char sh[SHOW_MAX + 4];

				show(sh, sizeof(sh), d->id, d->id_len);
				snprintf(where, sizeof(where),
				    "clusters[%zu].id", i);
				return cerr(p, where, "duplicate id \"%s\" "
				    "(also clusters[%zu])", sh, j);
			}
	}
	return 0;
}

int
sg_clusterfile_parse(sg_clusterfile **out, const char *text, size_t len,
    sg_error *err)
{
	pctx p = { err };
	sg_clusterfile *cf = NULL;
	json_t *root = NULL;
	json_error_t jerr;
	int rc;

	*out = NULL;
	if (text == NULL && len > 0)
		return sg_seterr(err, SG_EINVAL, "no input");
	if ((cf = calloc(1, sizeof(*cf))) == NULL) {
		rc = sg_seterr(err, SG_ENOMEM, "out of memory");
		goto out;
	}
	root = json_loadb(text != NULL ? text : "", len,
	    JSON_REJECT_DUPLICATES, &jerr);
	if (root == NULL) {
		rc = sg_seterr(err, SG_ECONFIG, "%d:%d: invalid JSON: %s",
		    jerr.line, jerr.column, jerr.text);
		goto out;
	}
	if (!json_is_object(root)) {
		rc = cerr(&p, "", "top level must be a JSON object");
		goto out;
	}
	if ((rc = check_keys(&p, "", root, top_keys)) != 0 ||
	    (rc = parse_timing(&p, root, cf)) != 0 ||
	    (rc = parse_clusters(&p, json_object_get(root, "clusters"),
	    cf)) != 0)
		goto out;
out:
	json_decref(root);
	if (rc != 0) {
		sg_clusterfile_free(cf);
		return rc;
	}
	*out = cf;
	return 0;
}

/* Read at most SG_CF_MAX_FILE bytes of path into *buf. */
static int
slurp(const char *path, char **buf, size_t *len, sg_error *err)
{
	FILE *fp;
	size_t cap = 0, n;
	char *b = NULL, *nb;
	int rc = 0;

	*buf = NULL;
	*len = 0;
	if ((fp = fopen(path, "rb")) == NULL)
		return sg_seterr(err, SG_ECONFIG, "%s: cannot open: %s", path,
		    strerror(errno));
	for (;;) {
		if (*len == cap) {
			if (cap > SG_CF_MAX_FILE) {
				rc = sg_seterr(err, SG_ECONFIG, "%s: larger "
				    "than %u bytes", path, SG_CF_MAX_FILE);
				break;
			}
			cap = cap ? 2 * cap : 8192;
			if (cap > SG_CF_MAX_FILE + 1)
				cap = SG_CF_MAX_FILE + 1;
			if ((nb = realloc(b, cap)) == NULL) {
				rc = sg_seterr(err, SG_ENOMEM, "%s: out of "
				    "memory", path);
				break;
			}
			b = nb;
		}
		n = fread(b + *len, 1, cap - *len, fp);
		*len += n;
		if (n == 0) {
			if (ferror(fp))
				rc = sg_seterr(err, SG_ECONFIG, "%s: read "
				    "error: %s", path, strerror(errno));
			break;
		}
	}
	fclose(fp);
	if (rc != 0)
		free(b);
	else
		*buf = b;
	return rc;
}

int
sg_clusterfile_load(sg_clusterfile **out, const char *path, sg_error *err)
{
	sg_error e;
	char *buf = NULL;
	size_t len;
	int rc;

	*out = NULL;
	if (path == NULL)
		return sg_seterr(err, SG_EINVAL, "no path");
	if ((rc = slurp(path, &buf, &len, err)) != 0)
		return rc;
	sg_error_clear(&e);
	if ((rc = sg_clusterfile_parse(out, buf, len, &e)) != 0)
		sg_seterr(err, rc, "%s: %s", path, e.text);
	free(buf);
	return rc;
}

void
sg_clusterfile_free(sg_clusterfile *cf)
{
	size_t i, j;

	if (cf == NULL)
		return;
	for (i = 0; i < cf->n; i++) {
		sg_clusterdef *d = &cf->c[i];

		free(d->url);
		free(d->stats_url);
		for (j = 0; d->models != NULL && j < d->nmodels; j++)
			free(d->models[j]);
		free(d->models);
	}
	free(cf->c);
	free(cf);
}

/* --- output and queries -------------------------------------------------- */

static json_t *
def_to_json(const sg_clusterdef *d)
{
	json_t *o = json_object(), *m = json_array(), *st = json_object();
	size_t i;
	int bad = 0;

	if (o == NULL || m == NULL || st == NULL)
		goto fail;
	for (i = 0; i < d->nmodels; i++)
		bad |= json_array_append_new(m, json_string(d->models[i]));
	bad |= json_object_set_new(st, "format", json_string(
	    d->stats_format == SG_STATS_VLLM ? "vllm" : "stargate"));
	bad |= json_object_set_new(st, "url", json_string(d->stats_url));
	bad |= json_object_set_new(o, "id", json_stringn(d->id, d->id_len));
	bad |= json_object_set_new(o, "url", json_string(d->url));
	bad |= json_object_set_new(o, "models", m);
	m = NULL;
	bad |= json_object_set_new(o, "stats", st);
	st = NULL;
	if (d->max_engine_concurrency > 0)
		bad |= json_object_set_new(o, "max_engine_concurrency",
		    json_integer((json_int_t)d->max_engine_concurrency));
	if (d->has_rtt)
		bad |= json_object_set_new(o, "rtt_ms", json_real(d->rtt_ms));
	if (d->max_input_tps > 0)
		bad |= json_object_set_new(o, "max_input_tps",
		    json_real(d->max_input_tps));
	if (d->kv_capacity_tokens > 0 && d->kv_capacity_tokens <= INT64_MAX)
		bad |= json_object_set_new(o, "kv_capacity_tokens",
		    json_integer((json_int_t)d->kv_capacity_tokens));
	if (bad == 0)
		return o;
fail:
	json_decref(o);
	json_decref(m);
	json_decref(st);
	return NULL;
}

json_t *
sg_clusterfile_to_json(const sg_clusterfile *cf)
{
	json_t *o = json_object(), *a = json_array(), *c;
	size_t i;
	int bad = 0;

	if (o == NULL || a == NULL)
		goto fail;
	bad |= json_object_set_new(o, "stats_interval_ms",
	    json_integer((json_int_t)cf->stats_interval_ms));
	bad |= json_object_set_new(o, "stats_stale_ms",
	    json_integer((json_int_t)cf->stats_stale_ms));
	bad |= json_object_set_new(o, "stats_timeout_ms",
	    json_integer((json_int_t)cf->stats_timeout_ms));
	for (i = 0; i < cf->n; i++) {
		if ((c = def_to_json(&cf->c[i])) == NULL)
			goto fail;
		bad |= json_array_append_new(a, c);
	}
	bad |= json_object_set_new(o, "clusters", a);
	if (bad == 0)
		return o;
	json_decref(o);
	return NULL;
fail:
	json_decref(o);
	json_decref(a);
	return NULL;
}

bool
sg_clusterdef_serves(const sg_clusterdef *d, const char *model)
{
	size_t i;

	if (model == NULL)
		return false;
	for (i = 0; i < d->nmodels; i++)
		if (strcmp(d->models[i], model) == 0)
			return true;
	return false;
}

long
sg_clusterfile_find(const sg_clusterfile *cf, const char *id, size_t len)
{
	size_t i;

	for (i = 0; i < cf->n; i++)
		if (cf->c[i].id_len == len && memcmp(cf->c[i].id, id, len) == 0)
			return (long)i;
	return -1;
}
