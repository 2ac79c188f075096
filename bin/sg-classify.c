/*
 * sg-classify — show how Stargate sees an OpenAI request: its session
 * identity (SPEC.md §6 gateway stage, ref §7.1–§7.3) and, given a snapshot,
 * the router's session classification (SPEC.md §4, ref §5).
 *
 * The gateway half is sg_identity_parse(), the code sg-proxy runs: routing
 * key and model from the model id, the session source and cache affinity
 * key, eligibility for the last-cluster store, the token estimate, and the
 * store key (sg_lc_key, the function the store uses).  The router half
 * builds the routing request the gateway would send (request id, routing
 * key, model, affinity key, token estimate, and the last-cluster hint) and
 * asks the decision engine for a decision and its explanation.
 *
 * The hint is what the gateway would send: it reaches the router only for
 * sessions eligible for the store (a payload session never carries one),
 * and it follows the optional-string rule (trimmed; blank or not UTF-8 is
 * absent, never an error).
 *
 * Input: one body (file operand or stdin) with -H / --headers-file
 * headers, or --ndjson records {"body", "headers", "endpoint",
 * "last_cluster_id"}, one output line each; a bad record is reported as
 * source:line, skipped, and the run ends with exit 65.
 *
 * Nothing here writes a session id, affinity key or prompt to stderr:
 * error messages carry the reason only.
 */
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sysexits.h>

#include <jansson.h>

#include "stargate.h"
#include "sg_identity.h"
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
	{ "routing-key",	required_argument,	NULL,	OPT_ROUTING_KEY },
	{ "routing-method",	required_argument,	NULL,	OPT_ROUTING_METHOD },
	{ "seed",		required_argument,	NULL,	OPT_SEED },
	{ "snapshot",		required_argument,	NULL,	's' },
	{ "version",		no_argument,		NULL,	OPT_VERSION },
	{ NULL,			0,			NULL,	0 }
};

const char cli_synopsis[] =
    "[-h] [-H 'name: value'] [--headers-file FILE]\n"
    "                   [--endpoint chat|completions|responses|embeddings]\n"
    "                   [--routing-key RK] [-c lb-config.json] [-s snapshot.json]\n"
    "                   [--last-cluster ID] [--routing-method M] [--elapsed-ms N]\n"
    "                   [--seed N] [--ndjson] [request.json | -]\n";

const char cli_help[] = "\n"
    "  -H, --header 'name: value'  a request header (repeatable)\n"
    "      --headers-file FILE     request headers, one \"name: value\" a line\n"
    "      --endpoint E            chat, completions, responses or embeddings\n"
    "                              (default chat)\n"
    "      --routing-key RK        routing key bound by the API key (default none)\n"
    "  -c, --config FILE           lb-config.json (default: the permissive default)\n"
    "  -s, --snapshot FILE         snapshot JSON: also classify on the router side\n"
    "      --last-cluster ID       the last-cluster hint (default: the\n"
    "                              x-stargate-last-cluster-id header, else none)\n"
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
 * Returns 0, -1 for a malformed line, -2 when full or out of memory.
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
		return -2;
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
		return -2;
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

/*
 * The optional-string rule of ref §1.2: the value trimmed; blank or not
 * UTF-8 is absent (NULL), never an error.  A new string or NULL; *oom set
 * when allocation failed.
 */
static char *
opt_string(const char *s, bool *oom)
{
	size_t len;
	char *out;

	if (s == NULL)
		return NULL;
	len = strlen(s);
	if (!sg_utf8_valid(s, len))
		return NULL;
	sg_trim(&s, &len);
	if (len == 0)
		return NULL;
	if ((out = strndup(s, len)) == NULL)
		*oom = true;
	return out;
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
	bool		 route_opts;	/* a router-side option was given */
};

struct run {
	struct opts	*o;
	struct hdrs	 hdrs;		/* -H and --headers-file */
	sg_lbconf	*conf;
	sg_router	*rt;
	sg_snapshot	*snap;		/* NULL: identity only */
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
			else
				cli_complain(source, line, "more than %d "
				    "headers, or out of memory", MAX_HEADERS);
			rc = hr == -1 ? EX_DATAERR : EX_SOFTWARE;
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
	char *request_id = NULL;
	bool oom = false;
	int lrc, rc = 0;

	sg_request_init(&req);
	request_id = opt_string(hdrs_get(h, nh, "x-request-id"), &oom);
	if (oom)
		return cli_oom();
	req.request_id = request_id != NULL ? request_id : DEFAULT_REQUEST_ID;
	req.routing_key = id->routing_key;
	req.model = id->model;
	req.cache_affinity_key = id->cache_affinity_key;
	req.input_tokens = id->input_tokens;
	req.last_cluster_id = hint;
	req.routing_method = r->o->routing_method;
	req.elapsed_ms = r->o->elapsed_ms;

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
	free(request_id);
	return rc;
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
	char lc[SG_LC_KEY_LEN + 1];
	const char *ignored = NULL;
	sg_identity id;
	sg_error err;
	json_t *obj = NULL, *routing = NULL;
	char *hint = NULL;
	bool oom = false;
	int lrc, rc = 0;

	sg_identity_init(&id);
	sg_error_clear(&err);
	if ((lrc = sg_identity_parse(&id, endpoint, body, h, nh,
	    r->o->routing_key, &err)) != 0) {
		rc = cli_report(source, line, lrc, &err, false);
		goto out;
	}
	obj = json_pack("{s:s, s:o, s:o, s:o, s:b, s:o, s:o, s:I}",
	    "endpoint", sg_endpoint_name(endpoint),
	    "routing_key", str_or_null(id.routing_key),
	    "model", str_or_null(id.model),
	    "source", str_or_null(sg_session_source_name(id.source)),
	    "eligible", id.eligible,
	    "session_id", str_or_null(id.session_id),
	    "cache_affinity_key", str_or_null(id.cache_affinity_key),
	    "input_tokens", (json_int_t)(id.input_tokens > INT64_MAX ?
	    INT64_MAX : id.input_tokens));
	if (obj == NULL)
		goto oom;
	if (id.eligible) {
		if (sg_lc_key(lc, id.routing_key, strlen(id.routing_key),
		    id.model, strlen(id.model), id.cache_affinity_key,
		    strlen(id.cache_affinity_key)) != 0)
			goto oom;
		lrc = json_object_set_new(obj, "store_key", json_string(lc));
	} else
		lrc = json_object_set_new(obj, "store_key", json_null());
	if (lrc != 0)
		goto oom;

	if (r->snap != NULL) {
		/* --last-cluster, else the record's, else the header. */
		hint = opt_string(r->o->last_cluster, &oom);
		if (hint == NULL && !oom)
			hint = opt_string(rec_hint, &oom);
		if (hint == NULL && !oom)
			hint = opt_string(hdrs_get(h, nh,
			    "x-stargate-last-cluster-id"), &oom);
		if (oom)
			goto oom;
		if (hint != NULL && !id.eligible) {
			/* The gateway looks up eligible sessions only. */
			ignored = id.source == SG_SOURCE_NONE ?
			    "request has no session" :
			    "session source is not eligible for the "
			    "last-cluster store";
			free(hint);
			hint = NULL;
		}
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
	free(hint);
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
	int endpoint = r->o->endpoint, rc = 0;

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
			if (hdrs_add(&hs, key, json_string_value(val)) != 0)
				goto full;
	}
	for (i = 0; i < r->hdrs.n; i++)
		if (hdrs_add(&hs, r->hdrs.h[i].name, r->hdrs.h[i].value) != 0)
			goto full;
	rc = classify(r, body, endpoint, hs.h, hs.n, hint, source, line);
	goto out;
full:
	cli_complain(source, line, "more than %d headers, or out of memory",
	    MAX_HEADERS);
	rc = EX_DATAERR;
out:
	hdrs_free(&hs);
	return rc;
}

/* --- main ----------------------------------------------------------------- */

int
main(int argc, char *argv[])
{
	struct opts o;
	struct run r;
	int ch, rc = 0, hr;

	memset(&o, 0, sizeof(o));
	memset(&r, 0, sizeof(r));
	o.endpoint = SG_ENDPOINT_CHAT;
	r.o = &o;
	while ((ch = getopt_long(argc, argv, "c:H:hs:", longopts, NULL)) !=
	    -1) {
		switch (ch) {
		case 'c':
			o.config = optarg;
			o.route_opts = true;
			break;
		case 'H':
			if ((hr = hdrs_add_line(&r.hdrs, optarg,
			    strlen(optarg))) != 0) {
				hdrs_free(&r.hdrs);
				if (hr == -1)
					cli_usage_error("-H: expected "
					    "'name: value', got '%s'", optarg);
				cli_complain(NULL, 0, "-H: more than %d "
				    "headers, or out of memory", MAX_HEADERS);
				return EX_SOFTWARE;
			}
			break;
		case 'h':
			hdrs_free(&r.hdrs);
			cli_usage(EX_OK);
		case 's':
			o.snapshot = optarg;
			break;
		case OPT_HEADERS_FILE:
			o.headers_file = optarg;
			break;
		case OPT_ENDPOINT:
			if (sg_endpoint_parse(optarg, &o.endpoint) != 0) {
				hdrs_free(&r.hdrs);
				cli_usage_error("--endpoint: expected chat, "
				    "completions, responses or embeddings, "
				    "got '%s'", optarg);
			}
			o.has_endpoint = true;
			break;
		case OPT_ROUTING_KEY:
			o.routing_key = optarg;
			break;
		case OPT_LAST_CLUSTER:
			o.last_cluster = optarg;
			o.route_opts = true;
			break;
		case OPT_ROUTING_METHOD:
			o.routing_method = optarg;
			o.route_opts = true;
			break;
		case OPT_ELAPSED:
			if (cli_opt_ms("--elapsed-ms", optarg,
			    &o.elapsed_ms) != 0) {
				hdrs_free(&r.hdrs);
				cli_usage(EX_USAGE);
			}
			o.route_opts = true;
			break;
		case OPT_SEED:
			if (cli_opt_u64("--seed", optarg, &o.seed) != 0) {
				hdrs_free(&r.hdrs);
				cli_usage(EX_USAGE);
			}
			o.route_opts = true;
			break;
		case OPT_NDJSON:
			o.ndjson = true;
			break;
		case OPT_VERSION:
			hdrs_free(&r.hdrs);
			return cli_version();
		default:
			hdrs_free(&r.hdrs);
			cli_usage(EX_USAGE);
		}
	}
	argc -= optind;
	argv += optind;
	if (argc > 1) {
		hdrs_free(&r.hdrs);
		cli_usage_error("at most one input operand");
	}
	o.input = argc == 1 ? argv[0] : NULL;
	if (o.route_opts && o.snapshot == NULL) {
		hdrs_free(&r.hdrs);
		cli_usage_error("-c, --last-cluster, --routing-method, "
		    "--elapsed-ms and --seed need -s snapshot.json");
	}
	if (cli_is_stdin(o.input) &&
	    ((o.snapshot != NULL && cli_is_stdin(o.snapshot)) ||
	    (o.headers_file != NULL && cli_is_stdin(o.headers_file)) ||
	    (o.config != NULL && cli_is_stdin(o.config)))) {
		hdrs_free(&r.hdrs);
		cli_usage_error("only the request can be read from stdin");
	}

	if (o.headers_file != NULL &&
	    (rc = load_headers_file(&r, o.headers_file)) != 0)
		goto out;
	if (o.snapshot != NULL) {
		if ((rc = cli_load_router(o.config, o.seed, &r.conf,
		    &r.rt)) != 0)
			goto out;
		if ((r.snap = sg_snapshot_new()) == NULL) {
			rc = cli_oom();
			goto out;
		}
		if ((rc = cli_load_snapshot(o.snapshot, r.snap)) != 0)
			goto out;
	}
	rc = o.ndjson ? cli_stream(o.input, CLI_NEED_INPUT, stream_record, &r,
	    &r.bad) : run_single(&r);
	if (rc == 0 && r.bad)
		rc = EX_DATAERR;
out:
	rc = cli_finish(rc);
	sg_snapshot_free(r.snap);
	sg_router_free(r.rt);
	sg_lbconf_free(r.conf);
	hdrs_free(&r.hdrs);
	return rc;
}
