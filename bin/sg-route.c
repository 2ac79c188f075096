/*
 * sg-route — pipe snapshots and routing requests through the libstargate
 * decision engine from a shell (SPEC.md §1, §2.2–§2.3, §3).
 *
 * One router lives for the whole run, so round-robin counters advance from
 * request to request exactly as in the proxy.  Three input shapes:
 *
 *   single     one request (JSON, or HTTP header lines with --headers) from
 *              the operand or stdin, decided against the -s snapshot;
 *   --ndjson   a stream of {"snapshot": {...}} records (replace the current
 *              snapshot) and {"request": {...}} records (print a decision);
 *              a bad record is reported as source:line, skipped, and the run
 *              ends with exit 65;
 *   --until-decided  (either shape) a wait decision is decided again at its
 *              recheck_at_ms on the same snapshot with the same request
 *              object, so the session classification of the first step is
 *              kept; every step is printed.
 *
 * Output is one compact JSON object per decision: the library's decision
 * (sg_decision_to_json) plus "elapsed_ms" and, with --explain, "explain"
 * (sg_router_explain).  Input is bounded: a file or record larger than
 * SG_MAX_RECORD bytes is bad input, never an unbounded allocation.
 *
 * Exit status: 0 decided, 2 a request was rejected, sysexits otherwise
 * (64 usage, 65 bad input, 66 cannot open, 70 internal, 74 output, 78 config).
 * Bad input outranks a rejection: a stream with both ends in 65.
 */
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include <jansson.h>

#include "stargate.h"
#include "common/cli.h"

#define UNTIL_DECIDED_MAX_STEPS	100000

const char cli_progname[] = "sg-route";

enum {
	OPT_SEED = CHAR_MAX + 1,
	OPT_ELAPSED,
	OPT_UNTIL_DECIDED,
	OPT_EXPLAIN,
	OPT_HEADERS,
	OPT_NDJSON,
	OPT_VERSION,
};

static const struct option longopts[] = {
	{ "config",		required_argument,	NULL,	'c' },
	{ "elapsed-ms",		required_argument,	NULL,	OPT_ELAPSED },
	{ "explain",		no_argument,		NULL,	OPT_EXPLAIN },
	{ "headers",		no_argument,		NULL,	OPT_HEADERS },
	{ "help",		no_argument,		NULL,	'h' },
	{ "ndjson",		no_argument,		NULL,	OPT_NDJSON },
	{ "seed",		required_argument,	NULL,	OPT_SEED },
	{ "snapshot",		required_argument,	NULL,	's' },
	{ "until-decided",	no_argument,		NULL,	OPT_UNTIL_DECIDED },
	{ "version",		no_argument,		NULL,	OPT_VERSION },
	{ NULL,			0,			NULL,	0 }
};

const char cli_synopsis[] =
    "[-h] [-c lb-config.json] [-s snapshot.json] [--seed N]\n"
    "                [--elapsed-ms N] [--until-decided] [--explain]\n"
    "                [--headers | --ndjson] [request.json | -]\n";

const char cli_help[] = "\n"
    "  -c, --config FILE    lb-config.json (default: the permissive default)\n"
    "  -s, --snapshot FILE  snapshot JSON (required unless --ndjson)\n"
    "      --seed N         router seed, unsigned 64-bit (default 0)\n"
    "      --elapsed-ms N   elapsed ms since arrival, overrides the request's\n"
    "                       elapsed_ms (default: the request's, else 0)\n"
    "      --until-decided  repeat a wait at its recheck_at_ms until select\n"
    "                       or reject, printing every step\n"
    "      --explain        add the candidate table as \"explain\"\n"
    "      --headers        read the request as HTTP header lines\n"
    "      --ndjson         read {\"snapshot\":...} / {\"request\":...} lines\n"
    "  -h, --help           print this help and exit\n"
    "      --version        print the version and exit\n";

/* --- options -------------------------------------------------------------- */

struct opts {
	const char	*config;
	const char	*snapshot;
	const char	*input;
	uint64_t	 seed;
	bool		 has_elapsed;
	double		 elapsed_ms;
	bool		 until_decided;
	bool		 explain;
	bool		 headers;
	bool		 ndjson;
};

/* --- deciding ------------------------------------------------------------- */

struct run {
	struct opts	*o;
	sg_lbconf	*conf;
	sg_router	*rt;
	sg_snapshot	*snap;		/* current snapshot */
	sg_snapshot	*staging;	/* parse target for stream snapshots */
	bool		 have_snap;
	bool		 rejected;	/* some request was rejected */
	bool		 bad;		/* some stream record was bad */
	bool		 stream;	/* flush after every line */
};

/*
 * Decide req at elapsed (and, with --until-decided, again at every wait's
 * recheck time), printing each decision.  Returns 0, or an exit code for a
 * failure that has been reported; a request error (400) is EX_DATAERR.
 */
static int
decide(struct run *r, sg_request *req, const char *source, long line)
{
	sg_decision d;
	sg_error err;
	json_t *obj = NULL, *ex = NULL;
	double elapsed = r->o->has_elapsed ? r->o->elapsed_ms : req->elapsed_ms;
	long step;
	int rc = 0, lrc;

	for (step = 0; step < UNTIL_DECIDED_MAX_STEPS; step++) {
		sg_error_clear(&err);
		memset(&d, 0, sizeof(d));
		lrc = sg_router_decide(r->rt, r->snap, req, elapsed, &d, &err);
		if (lrc != 0)
			return cli_report(source, line, lrc, &err, true);
		if ((obj = cli_decision_json(&d, req, elapsed)) == NULL) {
			rc = cli_oom();
			goto out;
		}
		if (r->o->explain) {
			sg_error_clear(&err);
			lrc = sg_router_explain(r->rt, r->snap, req, elapsed, &ex,
			    &err);
			if (lrc != 0) {
				rc = cli_report(source, line, lrc, &err, true);
				goto out;
			}
			if (json_object_set_new(obj, "explain", ex) != 0) {
				rc = cli_oom();
				goto out;
			}
		}
		if ((rc = cli_emit(obj, r->stream)) != 0)
			goto out;
		json_decref(obj);
		obj = NULL;
		if (d.kind == SG_DECIDE_REJECT)
			r->rejected = true;
		if (!r->o->until_decided || d.kind != SG_DECIDE_WAIT)
			return 0;
		/* A wait must move time forward, or the loop would spin. */
		if (!(d.recheck_at_ms > elapsed)) {
			cli_complain(source, line,
			    "wait at %g ms rechecks at %g ms", elapsed,
			    d.recheck_at_ms);
			return EX_SOFTWARE;
		}
		elapsed = d.recheck_at_ms;
	}
	cli_complain(source, line, "no decision after %d steps",
	    UNTIL_DECIDED_MAX_STEPS);
	return EX_SOFTWARE;
out:
	json_decref(obj);
	return rc;
}

/* One request from a file or stdin (JSON, or header lines). */
static int
run_single(struct run *r)
{
	const char *source = cli_source_name(r->o->input);
	sg_request req;
	sg_error err;
	json_t *v = NULL;
	char *text = NULL;
	size_t len;
	int rc, lrc;

	sg_request_init(&req);
	if ((rc = cli_slurp(r->o->input, &text, &len)) != 0)
		goto out;
	sg_error_clear(&err);
	if (r->o->headers) {
		lrc = sg_request_from_headers(&req, text, len, &err);
	} else {
		if ((v = cli_parse_object(text, len, source, 0)) == NULL) {
			rc = EX_DATAERR;
			goto out;
		}
		lrc = sg_request_from_json(&req, v, &err);
	}
	if (lrc != 0) {
		rc = cli_report(source, 0, lrc, &err, true);
		goto out;
	}
	rc = decide(r, &req, source, 0);
out:
	json_decref(v);
	free(text);
	sg_request_release(&req);
	return rc;
}

/*
 * One stream record: {"snapshot": {...}} and/or {"request": {...}}; the
 * snapshot (if any) is applied first.  Returns 0, EX_DATAERR for a bad
 * record (reported), or a fatal exit code (a cli_record_fn).
 */
static int
stream_record(json_t *rec, const char *source, long line, void *arg)
{
	struct run *r = arg;
	json_t *snap, *rq;
	const char *key;
	json_t *val;
	sg_request req;
	sg_error err;
	sg_snapshot *tmp;
	int rc = 0, lrc;

	json_object_foreach(rec, key, val) {
		if (strcmp(key, "snapshot") != 0 && strcmp(key, "request") != 0) {
			cli_complain(source, line, "%s: unknown field "
			    "(expected \"snapshot\" or \"request\")", key);
			return EX_DATAERR;
		}
	}
	snap = json_object_get(rec, "snapshot");
	rq = json_object_get(rec, "request");
	if (snap == NULL && rq == NULL) {
		cli_complain(source, line,
		    "expected \"snapshot\" or \"request\"");
		return EX_DATAERR;
	}
	if (snap != NULL) {
		if (!json_is_object(snap)) {
			cli_complain(source, line,
			    "snapshot: expected an object");
			return EX_DATAERR;
		}
		sg_error_clear(&err);
		if ((lrc = sg_snapshot_from_json(r->staging, snap, &err)) != 0)
			return cli_report(source, line, lrc, &err, true);
		tmp = r->snap;
		r->snap = r->staging;
		r->staging = tmp;
		r->have_snap = true;
	}
	if (rq == NULL)
		return 0;
	if (!json_is_object(rq)) {
		cli_complain(source, line, "request: expected an object");
		return EX_DATAERR;
	}
	if (!r->have_snap) {
		cli_complain(source, line, "request before any snapshot "
		    "(use -s or a {\"snapshot\": ...} record)");
		return EX_DATAERR;
	}
	sg_request_init(&req);
	sg_error_clear(&err);
	if ((lrc = sg_request_from_json(&req, rq, &err)) != 0)
		rc = cli_report(source, line, lrc, &err, true);
	else
		rc = decide(r, &req, source, line);
	sg_request_release(&req);
	return rc;
}

/* --- main ----------------------------------------------------------------- */

int
main(int argc, char *argv[])
{
	struct opts o;
	struct run r;
	int ch, rc = 0;

	memset(&o, 0, sizeof(o));
	memset(&r, 0, sizeof(r));
	while ((ch = getopt_long(argc, argv, "c:hs:", longopts, NULL)) != -1) {
		switch (ch) {
		case 'c':
			o.config = optarg;
			break;
		case 'h':
			cli_usage(EX_OK);
		case 's':
			o.snapshot = optarg;
			break;
		case OPT_SEED:
			if (cli_opt_u64("--seed", optarg, &o.seed) != 0)
				cli_usage(EX_USAGE);
			break;
		case OPT_ELAPSED:
			if (cli_opt_ms("--elapsed-ms", optarg,
			    &o.elapsed_ms) != 0)
				cli_usage(EX_USAGE);
			o.has_elapsed = true;
			break;
		case OPT_UNTIL_DECIDED:
			o.until_decided = true;
			break;
		case OPT_EXPLAIN:
			o.explain = true;
			break;
		case OPT_HEADERS:
			o.headers = true;
			break;
		case OPT_NDJSON:
			o.ndjson = true;
			break;
		case OPT_VERSION:
			return cli_version();
		default:
			cli_usage(EX_USAGE);
		}
	}
	argc -= optind;
	argv += optind;
	if (argc > 1)
		cli_usage_error("at most one input operand");
	o.input = argc == 1 ? argv[0] : NULL;
	if (o.headers && o.ndjson)
		cli_usage_error("--headers and --ndjson are exclusive");
	if (o.snapshot == NULL && !o.ndjson)
		cli_usage_error("-s snapshot.json is required (unless "
		    "--ndjson)");
	if (o.snapshot != NULL && cli_is_stdin(o.snapshot) &&
	    cli_is_stdin(o.input))
		cli_usage_error("the snapshot and the input cannot both be "
		    "stdin");

	r.o = &o;
	r.stream = o.ndjson;
	if ((rc = cli_load_router(o.config, o.seed, &r.conf, &r.rt)) != 0)
		goto out;
	if ((r.snap = sg_snapshot_new()) == NULL ||
	    (r.staging = sg_snapshot_new()) == NULL) {
		rc = cli_oom();
		goto out;
	}
	if (o.snapshot != NULL) {
		if ((rc = cli_load_snapshot(o.snapshot, r.snap)) != 0)
			goto out;
		r.have_snap = true;
	}
	rc = o.ndjson ? cli_stream(o.input, 0, stream_record, &r, &r.bad) :
	    run_single(&r);
	if (rc == 0 && r.bad)
		rc = EX_DATAERR;
	if (rc == 0 && r.rejected)
		rc = 2;
out:
	rc = cli_finish(rc);
	sg_snapshot_free(r.staging);
	sg_snapshot_free(r.snap);
	sg_router_free(r.rt);
	sg_lbconf_free(r.conf);
	return rc;
}
