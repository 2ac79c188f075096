/*
 * sg-classify — show how Stargate sees an OpenAI request: its session
 * identity (sg-proxy(8) gateway stage, stargate-headers(7)), what the
 * last-cluster store remembers of its session, the routing request the gateway
 * sends, and, given a snapshot, the router's session classification
 * (stargate-lb-config(5)).
 *
 * Every rule here is the library's, the code sg-proxy runs:
 * sg_identity_parse() reads routing key and model, session source, cache
 * affinity key and token estimate; sg_gateway.h says which sessions are
 * eligible for the store, under which key, and builds the trusted headers
 * of the routing request, which the router's own parser reads back
 * (sg_gateway_request), so the hint and every other value follow the
 * router's rules, the optional-string rule included: a hint that is blank,
 * not UTF-8 or holds a control character is no hint (session new), never
 * an error.  The hint reaches the router only for sessions eligible for
 * the store (a payload session never carries one).
 *
 * --store DIR looks the session up with sg_store_lookup_start(), the
 * event loop's lookup, with the lookup timeout and TTL of the
 * STARGATE_LAST_CLUSTER_* settings (sg_lcconf); --request prints the
 * routing request (sg-route(1) JSON) instead of the identity, for
 * `sg-classify --store DIR --request body.json | sg-route -s snap`.
 *
 * Input: one body (file operand or stdin) with -H / --headers-file
 * headers, or --ndjson records {"body", "headers", "endpoint",
 * "last_cluster_id"}, one output line each; a bad record is reported as
 * source:line, skipped, and the run ends with exit 65.
 *
 * Nothing here writes a session id, affinity key or prompt to stderr:
 * error messages carry the reason only.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sysexits.h>

#include <jansson.h>

#include "stargate.h"
#include "sg_gateway.h"
#include "sg_identity.h"
#include "sg_lcconf.h"
#include "sg_store.h"
#include "common/cli.h"

#define MAX_HEADERS		256	/* -H plus --headers-file entries */
#define MAX_HEADER_LINE		16384	/* bytes per --headers-file line */
#define DEFAULT_REQUEST_ID	"sg-classify"

const char cli_progname[] = "sg-classify";

enum {
	OPT_HEADERS_FILE = CHAR_MAX + 1,
	OPT_ENDPOINT,
	OPT_ROUTING_KEY,
	OPT_LAST_CLUSTER,
	OPT_ROUTING_METHOD,
	OPT_ELAPSED,
	OPT_SEED,
	OPT_NDJSON,
	OPT_STORE,
	OPT_REQUEST,
	OPT_TTL,
	OPT_VERSION,
};

static const struct option longopts[] = {
	{ "config",		required_argument,	NULL,	'c' },
	{ "elapsed-ms",		required_argument,	NULL,	OPT_ELAPSED },
	{ "endpoint",		required_argument,	NULL,	OPT_ENDPOINT },
	{ "header",		required_argument,	NULL,	'H' },
	{ "headers-file",	required_argument,	NULL,	OPT_HEADERS_FILE },
	{ "help",		no_argument,		NULL,	'h' },
	{ "last-cluster",	required_argument,	NULL,	OPT_LAST_CLUSTER },
	{ "ndjson",		no_argument,		NULL,	OPT_NDJSON },
	{ "request",		no_argument,		NULL,	OPT_REQUEST },
	{ "routing-key",	required_argument,	NULL,	OPT_ROUTING_KEY },
	{ "routing-method",	required_argument,	NULL,	OPT_ROUTING_METHOD },
	{ "seed",		required_argument,	NULL,	OPT_SEED },
	{ "snapshot",		required_argument,	NULL,	's' },
	{ "store",		required_argument,	NULL,	OPT_STORE },
	{ "ttl",		required_argument,	NULL,	OPT_TTL },
	{ "version",		no_argument,		NULL,	OPT_VERSION },
	{ NULL,			0,			NULL,	0 }
};

const char cli_synopsis[] =
    "[-h] [-H 'name: value'] [--headers-file FILE]\n"
    "                   [--endpoint chat|completions|responses|embeddings]\n"
    "                   [--routing-key RK] [-c lb-config.json] [-s snapshot.json]\n"
    "                   [--last-cluster ID] [--routing-method M] [--elapsed-ms N]\n"
    "                   [--store DIR [--ttl DUR]] [--request]\n"
    "                   [--seed N] [--ndjson] [request.json | -]\n";

const char cli_help[] = "\n"
    "  -H, --header 'name: value'  a request header (repeatable)\n"
    "      --headers-file FILE     request headers, one \"name: value\" a line\n"
    "      --endpoint E            chat, completions, responses or embeddings\n"
    "                              (default chat)\n"
    "      --routing-key RK        routing key bound by the API key (default none)\n"
    "  -c, --config FILE           lb-config.json (default: the permissive default)\n"
    "  -s, --snapshot FILE         snapshot JSON: also classify on the router side\n"
    "      --last-cluster ID       the last-cluster hint (default: the --store\n"
    "                              lookup, else the x-stargate-last-cluster-id\n"
    "                              header, else none)\n"
    "      --store DIR             look the session up in this last-cluster store\n"
    "                              (TTL and lookup timeout from the\n"
    "                              STARGATE_LAST_CLUSTER_* environment)\n"
    "      --ttl DUR               entry TTL for --store (default\n"
    "                              $STARGATE_LAST_CLUSTER_TTL, else 10m)\n"
    "      --request               print the routing request sg-route reads\n"
    "                              instead (exclusive with -s)\n"
    "      --routing-method M      x-routing-method the gateway sends (default none)\n"
    "      --elapsed-ms N          elapsed ms since arrival (default 0)\n"
    "      --seed N                router seed, unsigned 64-bit (default 0)\n"
    "      --ndjson                read {\"body\",\"headers\",\"endpoint\",\n"
    "                              \"last_cluster_id\"} lines\n"
    "  -h, --help                  print this help and exit\n"
    "      --version               print the version and exit\n";

/* --- headers -------------------------------------------------------------- */

/* Header names are HTTP tokens. */
static bool
is_tchar(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	    (c >= '0' && c <= '9') || strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

static bool
is_token(const char *s)
{
	for (; *s != '\0'; s++)
		if (!is_tchar((unsigned char)*s))
			return false;
	return true;
}

struct hdrs {
	sg_header	 h[MAX_HEADERS];
	size_t		 n;
};

static void
hdrs_free(struct hdrs *hs)
{
	size_t i;

	for (i = 0; i < hs->n; i++) {
		free((char *)hs->h[i].name);
		free((char *)hs->h[i].value);
	}
	hs->n = 0;
}

/*
 * Add "name: value" (len bytes).  The value keeps its bytes; only the
 * optional white space HTTP puts around a field value is dropped.
 * Returns 0, -1 for a malformed line, -2 out of memory, -3 when there
 * are MAX_HEADERS already (an input error, not ours).
 */
static int
hdrs_add_line(struct hdrs *hs, const char *s, size_t len)
{
	const char *colon = memchr(s, ':', len), *v, *ve = s + len;
	size_t nlen, i;
	char *name, *value;

	if (colon == NULL || colon == s)
		return -1;
	nlen = (size_t)(colon - s);
	for (i = 0; i < nlen; i++)
		if (!is_tchar((unsigned char)s[i]))
			return -1;
	for (v = colon + 1; v < ve && (*v == ' ' || *v == '\t'); v++)
		;
	while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
		ve--;
	if (memchr(v, '\0', (size_t)(ve - v)) != NULL)
		return -1;
	if (hs->n >= MAX_HEADERS)
		return -3;
	if ((name = strndup(s, nlen)) == NULL ||
	    (value = strndup(v, (size_t)(ve - v))) == NULL) {
		free(name);
		return -2;
	}
	hs->h[hs->n].name = name;
	hs->h[hs->n].value = value;
	hs->n++;
	return 0;
}

static int
hdrs_add(struct hdrs *hs, const char *name, const char *value)
{
	char *n, *v;

	if (hs->n >= MAX_HEADERS)
		return -3;
	if ((n = strdup(name)) == NULL || (v = strdup(value)) == NULL) {
		free(n);
		return -2;
	}
	hs->h[hs->n].name = n;
	hs->h[hs->n].value = v;
	hs->n++;
	return 0;
}

static const char *
hdrs_get(const sg_header *h, size_t n, const char *name)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (strcasecmp(h[i].name, name) == 0)
			return h[i].value;
	return NULL;
}

/* --- options and run state ------------------------------------------------ */

struct opts {
	const char	*config;
	const char	*snapshot;
	const char	*input;
	const char	*headers_file;
	int		 endpoint;
	bool		 has_endpoint;
	const char	*routing_key;
	const char	*last_cluster;
	const char	*routing_method;
	double		 elapsed_ms;
	uint64_t	 seed;
	bool		 ndjson;
	bool		 request;	/* --request: print the routing request */
	const char	*store;		/* --store DIR */
	const char	*ttl;		/* --ttl DUR */
	bool		 route_opts;	/* -c or --seed: need -s */
	bool		 req_opts;	/* need -s or --request */
};

struct run {
	struct opts	*o;
	struct hdrs	 hdrs;		/* -H and --headers-file */
	sg_lbconf	*conf;
	sg_router	*rt;
	sg_snapshot	*snap;		/* NULL: identity only */
	sg_lcconf	 lc;		/* --store: TTL, lookup timeout */
	sg_store	*store;		/* NULL: no lookups */
	bool		 bad;		/* some record was bad */
};

/* The endpoint named by a request line's path. */
static int
endpoint_of_path(const char *p, size_t len, int *endpoint)
{
	static const struct {
		const char	*path;
		int		 endpoint;
	} paths[] = {
		{ "/v1/chat/completions", SG_ENDPOINT_CHAT },
		{ "/v1/completions", SG_ENDPOINT_COMPLETIONS },
		{ "/v1/responses", SG_ENDPOINT_RESPONSES },
		{ "/v1/embeddings", SG_ENDPOINT_EMBEDDINGS },
	};
	const char *q = memchr(p, '?', len);
	size_t i;

	if (q != NULL)
		len = (size_t)(q - p);
	for (i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		if (strlen(paths[i].path) == len &&
		    memcmp(paths[i].path, p, len) == 0) {
			*endpoint = paths[i].endpoint;
			return 0;
		}
	}
	return -1;
}

/*
 * --headers-file: "name: value" lines (LF or CRLF); blank lines are
 * skipped; a first line "POST <path> HTTP/x" names the endpoint unless
 * --endpoint did.  Returns 0 or a reported exit code.
 */
static int
load_headers_file(struct run *r, const char *path)
{
	const char *source = cli_source_name(path);
	char *buf = NULL, *sp1, *sp2;
	size_t cap = 0, len;
	long line = 0;
	bool toolong;
	FILE *f;
	int got, rc = 0, hr, ep;

	if ((f = cli_open_input(path)) == NULL)
		return EX_NOINPUT;
	while ((got = cli_read_line(f, MAX_HEADER_LINE, &buf, &cap, &len,
	    &toolong)) == 1) {
		line++;
		if (toolong) {
			cli_complain(source, line, "line longer than %d bytes",
			    MAX_HEADER_LINE);
			rc = EX_DATAERR;
			goto out;
		}
		if (len > 0 && buf[len - 1] == '\r')
			buf[--len] = '\0';
		if (len == 0)
			continue;
		if (line == 1 && (sp1 = memchr(buf, ' ', len)) != NULL &&
		    (sp2 = memchr(sp1 + 1, ' ', len - (size_t)(sp1 + 1 - buf)))
		    != NULL && strncmp(sp2 + 1, "HTTP/", 5) == 0 &&
		    memchr(buf, ':', (size_t)(sp1 - buf)) == NULL) {
			if (endpoint_of_path(sp1 + 1, (size_t)(sp2 - sp1 - 1),
			    &ep) != 0) {
				cli_complain(source, line,
				    "unknown endpoint path");
				rc = EX_DATAERR;
				goto out;
			}
			if (!r->o->has_endpoint)
				r->o->endpoint = ep;
			continue;
		}
		if ((hr = hdrs_add_line(&r->hdrs, buf, len)) != 0) {
			if (hr == -1)
				cli_complain(source, line,
				    "expected \"name: value\"");
			else if (hr == -3)
				cli_complain(source, line, "more than %d "
				    "headers", MAX_HEADERS);
			else
				cli_complain(source, line, "out of memory");
			rc = hr == -2 ? EX_SOFTWARE : EX_DATAERR;
			goto out;
		}
	}
	if (got < 0)
		rc = cli_read_failed(got, source);
out:
	free(buf);
	cli_close_input(f);
	return rc;
}

/* --- output --------------------------------------------------------------- */

static json_t *
str_or_null(const char *s)
{
	return s != NULL ? json_string(s) : json_null();
}

/* A field of the explanation, copied, or null. */
static json_t *
explain_field(const json_t *ex, const char *key)
{
	const json_t *v = json_object_get(ex, key);

	return v != NULL ? json_deep_copy(v) : json_null();
}

/*
 * The routing request the gateway would send for id (sg_gateway_build:
 * the trusted headers), read back the way the router reads them
 * (sg_gateway_request), so the hint, the method and every other value
 * follow the router's rules exactly.  The request id is the client's
 * x-request-id under the optional-string rule, else DEFAULT_REQUEST_ID.
 * Returns 0 or a reported exit code.
 */
static int
routing_request(struct run *r, const sg_identity *id, const sg_header *h,
    size_t nh, const char *hint, sg_request *req, const char *source,
    long line)
{
	sg_gateway_route rt;
	sg_gateway_headers gh;
	char rid[MAX_HEADER_LINE];
	const char *v, *raw = hdrs_get(h, nh, "x-request-id");
	size_t vlen;
	sg_error err;
	int lrc;

	memset(&rt, 0, sizeof(rt));
	rt.request_id = DEFAULT_REQUEST_ID;
	if (raw != NULL && sg_optional_string(raw, strlen(raw), &v, &vlen) &&
	    vlen < sizeof(rid)) {
		memcpy(rid, v, vlen);
		rid[vlen] = '\0';
		rt.request_id = rid;
	}
	rt.routing_method = r->o->routing_method;
	rt.last_cluster_id = hint;
	sg_error_clear(&err);
	if ((lrc = sg_gateway_build(&gh, id, &rt, &err)) != 0 ||
	    (lrc = sg_gateway_request(req, &gh, &err)) != 0)
		return cli_report(source, line, lrc, &err, false);
	req->elapsed_ms = r->o->elapsed_ms;
	return 0;
}

/*
 * The router half: decide and explain the routing request the gateway
 * would send, into a new "routing" object.  Returns 0 or a reported exit
 * code.
 */
static int
route(struct run *r, const sg_identity *id, const sg_header *h, size_t nh,
    const char *hint, const char *hint_ignored, const char *source,
    long line, json_t **out)
{
	sg_request req;
	sg_decision d;
	sg_error err;
	json_t *ro = NULL, *ex = NULL, *dj = NULL;
	int lrc, rc = 0;

	sg_request_init(&req);
	if ((rc = routing_request(r, id, h, nh, hint, &req, source, line)) != 0)
		goto out;
	hint = req.last_cluster_id;	/* what the router reads */

	sg_error_clear(&err);
	memset(&d, 0, sizeof(d));
	if ((lrc = sg_router_decide(r->rt, r->snap, &req, r->o->elapsed_ms, &d,
	    &err)) != 0) {
		rc = cli_report(source, line, lrc, &err, false);
		goto out;
	}
	sg_error_clear(&err);
	if ((lrc = sg_router_explain(r->rt, r->snap, &req, r->o->elapsed_ms,
	    &ex, &err)) != 0) {
		rc = cli_report(source, line, lrc, &err, false);
		goto out;
	}
	if ((dj = cli_decision_json(&d, &req, r->o->elapsed_ms)) == NULL)
		goto oom;
	ro = json_pack("{s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}",
	    "algorithm", explain_field(ex, "algorithm"),
	    "last_cluster_id", str_or_null(hint),
	    "session_state", d.classified ?
	    str_or_null(sg_session_state_name(d.session_state)) : json_null(),
	    "promoted", d.classified ? json_boolean(d.promoted) : json_null(),
	    "original_order", explain_field(ex, "original_order"),
	    "effective_order", explain_field(ex, "effective_order"),
	    "affinity_group", explain_field(ex, "affinity_group"),
	    "x_ms", explain_field(ex, "x_ms"),
	    "scale", explain_field(ex, "scale"),
	    "decision", dj);
	dj = NULL;	/* stolen, even on failure */
	if (ro == NULL)
		goto oom;
	if (hint_ignored != NULL && json_object_set_new(ro, "hint_ignored",
	    json_string(hint_ignored)) != 0)
		goto oom;
	*out = ro;
	ro = NULL;
	goto out;
oom:
	rc = cli_oom();
out:
	json_decref(ro);
	json_decref(ex);
	json_decref(dj);
	sg_request_release(&req);
	return rc;
}

/* The first of the values that is present under the optional-string rule. */
static const char *
first_present(const char *const *v, size_t n)
{
	const char *t;
	size_t i, tlen;

	for (i = 0; i < n; i++)
		if (v[i] != NULL && sg_optional_string(v[i], strlen(v[i]), &t,
		    &tlen))
			return v[i];
	return NULL;
}

/*
 * --store: look the session up as the gateway does (eligible sessions
 * only, with the lookup timeout, never waiting), into *hint (a copy in
 * buf) and a "store_lookup" object: {"result": hit|miss|timeout|error|
 * skipped, "cluster_id", "age_ms"}; null when the request has no cache
 * affinity key (no lookup at all, as in the gateway).
 */
static int
store_lookup(struct run *r, const sg_identity *id, char *buf,
    const char **hint, json_t **out)
{
	char key[SG_LC_KEY_LEN + 1];
	sg_store_lookup_req req;
	const char *result;
	json_t *o;

	*hint = NULL;
	*out = NULL;
	if (id->cache_affinity_key == NULL)
		return (*out = json_null()) != NULL ? 0 : cli_oom();
	if (sg_gateway_store_key(id, key) != 0)
		return (*out = json_pack("{s:s}", "result", "skipped")) !=
		    NULL ? 0 : cli_oom();
	sg_store_lookup_start(r->store, &req, key, SG_LC_KEY_LEN,
	    sg_store_mono_ns() + r->lc.lookup_timeout_ns, NULL, NULL);
	switch (req.rc) {
	case 0:			result = "hit"; break;
	case SG_ENOTFOUND:	result = "miss"; break;
	case EBUSY:		/* FALLTHROUGH */
	case ETIMEDOUT:		result = "timeout"; break;
	default:		result = "error"; break;
	}
	if (req.rc == 0) {
		memcpy(buf, req.entry.cluster_id, req.entry.cluster_id_len + 1);
		*hint = buf;
		o = json_pack("{s:s, s:s, s:I}", "result", result,
		    "cluster_id", buf, "age_ms", (json_int_t)(req.entry.age_ms >
		    INT64_MAX ? INT64_MAX : req.entry.age_ms));
	} else if (strcmp(result, "miss") != 0)
		o = json_pack("{s:s, s:s}", "result", result, "error",
		    req.err.text);
	else
		o = json_pack("{s:s}", "result", result);
	if (o == NULL)
		return cli_oom();
	*out = o;
	return 0;
}

/*
 * The hint for the routing request: --last-cluster, else the record's
 * last_cluster_id, else (with --store) the store's answer, else the
 * x-stargate-last-cluster-id header.  The first value present under the
 * optional-string rule wins; the gateway then drops it for a session not
 * eligible for the store, and *ignored says why.
 */
static int
pick_hint(struct run *r, const sg_identity *id, const sg_header *h, size_t nh,
    const char *rec_hint, char *buf, const char **hint, const char **ignored,
    json_t **lookup)
{
	const char *given[2] = { r->o->last_cluster, rec_hint }, *hdr;
	int rc;

	*ignored = NULL;
	*lookup = NULL;
	*hint = first_present(given, 2);
	if (r->store != NULL && (rc = store_lookup(r, id, buf,
	    *hint == NULL ? hint : &hdr, lookup)) != 0)
		return rc;
	if (*hint == NULL && r->store == NULL) {
		hdr = hdrs_get(h, nh, "x-stargate-last-cluster-id");
		*hint = first_present(&hdr, 1);
	}
	if (*hint != NULL && !sg_gateway_store_eligible(id)) {
		/* The gateway looks up eligible sessions only. */
		*ignored = id->source == SG_SOURCE_NONE ?
		    "request has no session" :
		    "session source is not eligible for the last-cluster store";
		*hint = NULL;
	}
	return 0;
}

/* --request: the routing request, as sg-route reads it (sg-route(1)). */
static int
emit_request(struct run *r, const sg_identity *id, const sg_header *h,
    size_t nh, const char *hint, const char *source, long line)
{
	sg_request req;
	json_t *o;
	int rc;

	sg_request_init(&req);
	if ((rc = routing_request(r, id, h, nh, hint, &req, source, line)) != 0)
		goto out;
	if ((o = sg_request_to_json(&req)) == NULL) {
		rc = cli_oom();
		goto out;
	}
	rc = cli_emit(o, r->o->ndjson);
	json_decref(o);
out:
	sg_request_release(&req);
	return rc;
}

static json_t *
identity_json(const sg_identity *id)
{
	char lc[SG_LC_KEY_LEN + 1];
	json_t *obj;

	obj = json_pack("{s:s, s:o, s:o, s:o, s:b, s:o, s:o, s:I, s:o}",
	    "endpoint", sg_endpoint_name(id->endpoint),
	    "routing_key", str_or_null(id->routing_key),
	    "model", str_or_null(id->model),
	    "source", str_or_null(sg_session_source_name(id->source)),
	    "eligible", sg_gateway_store_eligible(id),
	    "session_id", str_or_null(id->session_id),
	    "cache_affinity_key", str_or_null(id->cache_affinity_key),
	    "input_tokens", (json_int_t)(id->input_tokens > INT64_MAX ?
	    INT64_MAX : id->input_tokens),
	    "store_key", sg_gateway_store_key(id, lc) == 0 ? json_string(lc) :
	    json_null());
	return obj;
}

/*
 * Classify one request and print it.  rec_hint is a stream record's
 * last_cluster_id (or NULL).  Returns 0, EX_DATAERR for a bad request
 * (reported), or a fatal exit code.
 */
static int
classify(struct run *r, const json_t *body, int endpoint, const sg_header *h,
    size_t nh, const char *rec_hint, const char *source, long line)
{
	char buf[SG_ID_MAX + 1];
	const char *ignored = NULL, *hint = NULL;
	sg_identity id;
	sg_error err;
	json_t *obj = NULL, *routing = NULL, *lookup = NULL;
	int lrc, rc = 0;

	sg_identity_init(&id);
	sg_error_clear(&err);
	if ((lrc = sg_identity_parse(&id, endpoint, body, h, nh,
	    r->o->routing_key, &err)) != 0) {
		rc = cli_report(source, line, lrc, &err, false);
		goto out;
	}
	if ((rc = pick_hint(r, &id, h, nh, rec_hint, buf, &hint, &ignored,
	    &lookup)) != 0)
		goto out;
	if (r->o->request) {
		rc = emit_request(r, &id, h, nh, hint, source, line);
		goto out;
	}
	if ((obj = identity_json(&id)) == NULL)
		goto oom;
	if (lookup != NULL) {
		lrc = json_object_set_new(obj, "store_lookup", lookup);
		lookup = NULL;
		if (lrc != 0)
			goto oom;
	}
	if (r->snap != NULL) {
		if ((rc = route(r, &id, h, nh, hint, ignored, source, line,
		    &routing)) != 0)
			goto out;
		if (json_object_set_new(obj, "routing", routing) != 0)
			goto oom;
	}
	rc = cli_emit(obj, r->o->ndjson);
	goto out;
oom:
	rc = cli_oom();
out:
	json_decref(obj);
	json_decref(lookup);
	sg_identity_release(&id);
	return rc;
}

static int
run_single(struct run *r)
{
	const char *source = cli_source_name(r->o->input);
	char *text = NULL;
	json_t *body = NULL;
	size_t len;
	int rc;

	if ((rc = cli_slurp(r->o->input, &text, &len)) != 0)
		goto out;
	if (len == 0 || strspn(text, " \t\r\n") == len) {
		cli_complain(source, 0, "no request body");
		rc = EX_NOINPUT;
		goto out;
	}
	if ((body = cli_parse_object(text, len, source, 0)) == NULL) {
		rc = EX_DATAERR;
		goto out;
	}
	/* Single mode: messages are "sg-classify: <message>". */
	rc = classify(r, body, r->o->endpoint, r->hdrs.h, r->hdrs.n, NULL,
	    NULL, 0);
out:
	json_decref(body);
	free(text);
	return rc;
}

/* One stream record; 0, EX_DATAERR (reported) or a fatal exit code. */
static int
stream_record(json_t *rec, const char *source, long line, void *arg)
{
	struct run *r = arg;
	struct hdrs hs;
	const char *key, *hint = NULL;
	json_t *val, *body, *hdrs, *ep, *lc;
	size_t i;
	int endpoint = r->o->endpoint, rc = 0, hr;

	json_object_foreach(rec, key, val) {
		if (strcmp(key, "body") != 0 && strcmp(key, "headers") != 0 &&
		    strcmp(key, "endpoint") != 0 &&
		    strcmp(key, "last_cluster_id") != 0) {
			cli_complain(source, line, "%s: unknown field", key);
			return EX_DATAERR;
		}
	}
	body = json_object_get(rec, "body");
	if (!json_is_object(body)) {
		cli_complain(source, line, "body: expected an object");
		return EX_DATAERR;
	}
	if ((ep = json_object_get(rec, "endpoint")) != NULL &&
	    (!json_is_string(ep) ||
	    sg_endpoint_parse(json_string_value(ep), &endpoint) != 0)) {
		cli_complain(source, line, "endpoint: expected chat, "
		    "completions, responses or embeddings");
		return EX_DATAERR;
	}
	if ((lc = json_object_get(rec, "last_cluster_id")) != NULL &&
	    !json_is_null(lc)) {
		if (!json_is_string(lc)) {
			cli_complain(source, line,
			    "last_cluster_id: expected a string");
			return EX_DATAERR;
		}
		hint = json_string_value(lc);
	}
	memset(&hs, 0, sizeof(hs));
	if ((hdrs = json_object_get(rec, "headers")) != NULL &&
	    !json_is_null(hdrs)) {
		if (!json_is_object(hdrs)) {
			cli_complain(source, line,
			    "headers: expected an object");
			return EX_DATAERR;
		}
		json_object_foreach(hdrs, key, val) {
			if (!json_is_string(val) || *key == '\0' ||
			    !is_token(key)) {
				cli_complain(source, line, "headers.%s: "
				    "expected a header name and a string value",
				    key);
				return EX_DATAERR;
			}
		}
		/* The record's headers come first: they win over -H. */
		json_object_foreach(hdrs, key, val)
			if ((hr = hdrs_add(&hs, key,
			    json_string_value(val))) != 0)
				goto full;
	}
	for (i = 0; i < r->hdrs.n; i++)
		if ((hr = hdrs_add(&hs, r->hdrs.h[i].name,
		    r->hdrs.h[i].value)) != 0)
			goto full;
	rc = classify(r, body, endpoint, hs.h, hs.n, hint, source, line);
	goto out;
full:
	/* The limit is the input's fault (65); memory is ours (70). */
	if (hr == -3)
		cli_complain(source, line, "more than %d headers",
		    MAX_HEADERS);
	else
		cli_complain(source, line, "out of memory");
	rc = hr == -3 ? EX_DATAERR : EX_SOFTWARE;
out:
	hdrs_free(&hs);
	return rc;
}

/* --- the store ------------------------------------------------------------ */

/*
 * --store: the STARGATE_LAST_CLUSTER_* settings (sg_lcconf, as sg-proxy
 * reads them), --store and --ttl over them, then the store, never created.
 * Returns 0 or a reported exit code (64 bad setting, 66 no store, ...).
 */
static int
open_store(struct run *r)
{
	sg_store_opts so;
	sg_error err;
	int rc;

	sg_lcconf_init(&r->lc);
	sg_error_clear(&err);
	if ((rc = sg_lcconf_from_env(&r->lc, getenv, &err)) != 0 ||
	    (rc = sg_lcconf_set(&r->lc, SG_LCCONF_STORE, r->o->store,
	    "--store", &err)) != 0 ||
	    (r->o->ttl != NULL && (rc = sg_lcconf_set(&r->lc, SG_LCCONF_TTL,
	    r->o->ttl, "--ttl", &err)) != 0)) {
		cli_complain(NULL, 0, "%s", err.text);
		return EX_USAGE;
	}
	sg_store_opts_init(&so);
	sg_lcconf_store_opts(&r->lc, &so);
	if ((rc = sg_store_open(&r->store, &so, &err)) != 0) {
		cli_complain(NULL, 0, "%s", err.text);
		switch (rc) {
		case ENOENT: case ENOTDIR: case EACCES: case EPERM:
			return EX_NOINPUT;
		case SG_ECONFIG:
			return EX_USAGE;
		default:
			return EX_IOERR;
		}
	}
	return 0;
}

/* --- main ----------------------------------------------------------------- */

/*
 * One option into o (-H into r->hdrs): -1 to go on, else the exit status.
 * Usage errors exit (cli_usage), r->hdrs freed first.
 */
static int
parse_opt(int ch, struct opts *o, struct run *r)
{
	int hr;

	switch (ch) {
	case 'c':
		o->config = optarg;
		o->route_opts = true;
		break;
	case 'H':
		if ((hr = hdrs_add_line(&r->hdrs, optarg,
		    strlen(optarg))) != 0) {
			hdrs_free(&r->hdrs);
			if (hr == -1)
				cli_usage_error("-H: expected 'name: value', "
				    "got '%s'", optarg);
			if (hr == -2)
				return cli_oom();
			cli_complain(NULL, 0, "-H: more than %d headers",
			    MAX_HEADERS);
			return EX_DATAERR;
		}
		break;
	case 'h':
		hdrs_free(&r->hdrs);
		cli_usage(EX_OK);
	case 's':
		o->snapshot = optarg;
		break;
	case OPT_HEADERS_FILE:
		o->headers_file = optarg;
		break;
	case OPT_ENDPOINT:
		if (sg_endpoint_parse(optarg, &o->endpoint) != 0) {
			hdrs_free(&r->hdrs);
			cli_usage_error("--endpoint: expected chat, "
			    "completions, responses or embeddings, got '%s'",
			    optarg);
		}
		o->has_endpoint = true;
		break;
	case OPT_ROUTING_KEY:
		o->routing_key = optarg;
		break;
	case OPT_LAST_CLUSTER:
		o->last_cluster = optarg;
		o->req_opts = true;
		break;
	case OPT_ROUTING_METHOD:
		o->routing_method = optarg;
		o->req_opts = true;
		break;
	case OPT_ELAPSED:
		if (cli_opt_ms("--elapsed-ms", optarg, &o->elapsed_ms) != 0) {
			hdrs_free(&r->hdrs);
			cli_usage(EX_USAGE);
		}
		o->req_opts = true;
		break;
	case OPT_SEED:
		if (cli_opt_u64("--seed", optarg, &o->seed) != 0) {
			hdrs_free(&r->hdrs);
			cli_usage(EX_USAGE);
		}
		o->route_opts = true;
		break;
	case OPT_NDJSON:
		o->ndjson = true;
		break;
	case OPT_REQUEST:
		o->request = true;
		break;
	case OPT_STORE:
		o->store = optarg;
		break;
	case OPT_TTL:
		o->ttl = optarg;
		break;
	case OPT_VERSION:
		hdrs_free(&r->hdrs);
		return cli_version();
	default:
		hdrs_free(&r->hdrs);
		cli_usage(EX_USAGE);
	}
	return -1;
}

/* A usage error, r->hdrs freed first; never returns. */
static void	check_fail(struct run *, const char *)
		    __attribute__((noreturn));

static void
check_fail(struct run *r, const char *msg)
{
	hdrs_free(&r->hdrs);
	cli_usage_error("%s", msg);
}

/* The operand and the options that need or exclude each other. */
static void
check_args(int argc, char *argv[], struct opts *o, struct run *r)
{
	if (argc > 1)
		check_fail(r, "at most one input operand");
	o->input = argc == 1 ? argv[0] : NULL;
	if (o->request && o->snapshot != NULL)
		check_fail(r, "--request and -s are exclusive (pipe the "
		    "request into sg-route -s)");
	if ((o->route_opts && o->snapshot == NULL) ||
	    (o->req_opts && o->snapshot == NULL && !o->request))
		check_fail(r, "-c and --seed need -s snapshot.json; "
		    "--last-cluster, --routing-method and --elapsed-ms need "
		    "-s snapshot.json or --request");
	if (o->ttl != NULL && o->store == NULL)
		check_fail(r, "--ttl needs --store");
	if (cli_is_stdin(o->input) &&
	    ((o->snapshot != NULL && cli_is_stdin(o->snapshot)) ||
	    (o->headers_file != NULL && cli_is_stdin(o->headers_file)) ||
	    (o->config != NULL && cli_is_stdin(o->config))))
		check_fail(r, "only the request can be read from stdin");
}

/* The headers file, the store, the router and the snapshot, as asked. */
static int
setup(struct run *r)
{
	const struct opts *o = r->o;
	int rc;

	if (o->headers_file != NULL &&
	    (rc = load_headers_file(r, o->headers_file)) != 0)
		return rc;
	if (o->store != NULL && (rc = open_store(r)) != 0)
		return rc;
	if (o->snapshot != NULL) {
		if ((rc = cli_load_router(o->config, o->seed, &r->conf,
		    &r->rt)) != 0)
			return rc;
		if ((r->snap = sg_snapshot_new()) == NULL)
			return cli_oom();
		if ((rc = cli_load_snapshot(o->snapshot, r->snap)) != 0)
			return rc;
	}
	return 0;
}

int
main(int argc, char *argv[])
{
	struct opts o;
	struct run r;
	int ch, rc = 0;

	memset(&o, 0, sizeof(o));
	memset(&r, 0, sizeof(r));
	o.endpoint = SG_ENDPOINT_CHAT;
	r.o = &o;
	while ((ch = getopt_long(argc, argv, "c:H:hs:", longopts, NULL)) !=
	    -1)
		if ((rc = parse_opt(ch, &o, &r)) != -1)
			return rc;
	check_args(argc - optind, argv + optind, &o, &r);
	if ((rc = setup(&r)) != 0)
		goto out;
	rc = o.ndjson ? cli_stream(o.input, CLI_NEED_INPUT, stream_record, &r,
	    &r.bad) : run_single(&r);
	if (rc == 0 && r.bad)
		rc = EX_DATAERR;
out:
	sg_store_close(r.store);	/* commits deletions of expired entries */
	rc = cli_finish(rc);
	sg_snapshot_free(r.snap);
	sg_router_free(r.rt);
	sg_lbconf_free(r.conf);
	hdrs_free(&r.hdrs);
	return rc;
}
