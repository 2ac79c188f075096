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
#include <sys/stat.h>

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include <jansson.h>

#include "stargate.h"

#define UNTIL_DECIDED_MAX_STEPS	100000

static const char progname[] = "sg-route";

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

static void __attribute__((noreturn))
usage(int status)
{
	FILE *f = status == EX_OK ? stdout : stderr;

	fprintf(f,
	    "usage: %s [-h] [-c lb-config.json] [-s snapshot.json] [--seed N]\n"
	    "                [--elapsed-ms N] [--until-decided] [--explain]\n"
	    "                [--headers | --ndjson] [request.json | -]\n", progname);
	if (status == EX_OK)
		fprintf(f, "\n"
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
		    "      --version        print the version and exit\n");
	exit(status);
}

/* "sg-route: <source>:<line>: <message>" (line 0: no line part). */
static void __attribute__((format(printf, 3, 4)))
complain(const char *source, long line, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", progname);
	if (source != NULL && line > 0)
		fprintf(stderr, "%s:%ld: ", source, line);
	else if (source != NULL)
		fprintf(stderr, "%s: ", source);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* Map a library status to an exit code for input-processing failures. */
static int
exit_for(int rc)
{
	switch (rc) {
	case SG_EINVAL:
	case SG_ERANGE:
	case SG_EREQUEST:
		return EX_DATAERR;
	case SG_ECONFIG:
		return EX_CONFIG;
	case SG_EIO:
		return EX_IOERR;
	default:
		return EX_SOFTWARE;
	}
}

/* Report a library failure: the message, and the HTTP status and class of a
 * request error. */
static void
report(const char *source, long line, int rc, const sg_error *err)
{
	const char *text = err->text[0] != '\0' ? err->text : sg_strerror(rc);

	if (err->status != 0)
		complain(source, line, "%s (%d%s%s)", text, err->status,
		    err->code[0] != '\0' ? " " : "", err->code);
	else
		complain(source, line, "%s", text);
}

/* --- input ---------------------------------------------------------------- */

static const char *
source_name(const char *path)
{
	return path == NULL || strcmp(path, "-") == 0 ? "<stdin>" : path;
}

/* Open path ("-" or NULL: stdin).  On failure report and return NULL. */
static FILE *
open_input(const char *path)
{
	struct stat st;
	FILE *f;

	if (path == NULL || strcmp(path, "-") == 0)
		return stdin;
	if ((f = fopen(path, "r")) == NULL) {
		complain(NULL, 0, "cannot open '%s': %s", path, strerror(errno));
		return NULL;
	}
	if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
		complain(NULL, 0, "cannot open '%s': %s", path, strerror(EISDIR));
		fclose(f);
		return NULL;
	}
	return f;
}

static void
close_input(FILE *f)
{
	if (f != NULL && f != stdin)
		fclose(f);
}

/*
 * Read a whole file of at most SG_MAX_RECORD bytes into a new NUL-terminated
 * buffer.  Returns 0, or an exit code after reporting.
 */
static int
slurp(const char *path, char **out, size_t *outlen)
{
	FILE *f;
	char *buf = NULL, *nbuf;
	size_t len = 0, cap = 0, n;
	int rc = 0;

	if ((f = open_input(path)) == NULL)
		return EX_NOINPUT;
	for (;;) {
		if (cap - len < 4096) {
			size_t ncap = cap == 0 ? 65536 : cap * 2;

			if (ncap > (size_t)SG_MAX_RECORD + 1)
				ncap = (size_t)SG_MAX_RECORD + 1;
			if (ncap <= len) {
				complain(source_name(path), 0,
				    "input larger than %u bytes", SG_MAX_RECORD);
				rc = EX_DATAERR;
				goto out;
			}
			if ((nbuf = realloc(buf, ncap + 1)) == NULL) {
				complain(NULL, 0, "out of memory");
				rc = EX_SOFTWARE;
				goto out;
			}
			buf = nbuf;
			cap = ncap;
		}
		n = fread(buf + len, 1, cap - len, f);
		len += n;
		if (n == 0)
			break;
	}
	if (ferror(f)) {
		complain(source_name(path), 0, "read error: %s", strerror(errno));
		rc = EX_IOERR;
		goto out;
	}
	if (len > SG_MAX_RECORD) {
		complain(source_name(path), 0, "input larger than %u bytes",
		    SG_MAX_RECORD);
		rc = EX_DATAERR;
		goto out;
	}
	buf[len] = '\0';
	*out = buf;
	*outlen = len;
	buf = NULL;
out:
	free(buf);
	close_input(f);
	return rc;
}

/*
 * Read one line (without its newline) into *buf, which grows up to
 * SG_MAX_RECORD + 1 bytes.  Returns 1 with *len set, 0 at end of input,
 * -1 on a read error, -2 when out of memory.  A longer line is consumed to
 * its end and reported through *toolong.
 */
static int
read_line(FILE *f, char **buf, size_t *cap, size_t *len, bool *toolong)
{
	size_t n = 0;
	int ch;

	*toolong = false;
	while ((ch = getc(f)) != EOF) {
		if (ch == '\n')
			break;
		if (n >= SG_MAX_RECORD) {
			*toolong = true;
			continue;
		}
		if (n + 1 >= *cap) {
			size_t ncap = *cap == 0 ? 4096 : *cap * 2;
			char *nbuf;

			if (ncap > (size_t)SG_MAX_RECORD + 1)
				ncap = (size_t)SG_MAX_RECORD + 1;
			if ((nbuf = realloc(*buf, ncap)) == NULL)
				return -2;
			*buf = nbuf;
			*cap = ncap;
		}
		(*buf)[n++] = (char)ch;
	}
	if (ch == EOF && ferror(f))
		return -1;
	if (ch == EOF && n == 0 && !*toolong)
		return 0;
	if (*buf != NULL)
		(*buf)[n] = '\0';
	*len = n;
	return 1;
}

/* Strict JSON object from text (duplicate keys rejected). */
static json_t *
parse_object(const char *text, size_t len, const char *source, long line,
    int *xrc)
{
	json_error_t jerr;
	json_t *v;

	v = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	if (v == NULL) {
		if (line > 0)
			complain(source, line, "%s", jerr.text);
		else
			complain(NULL, 0, "%s:%d:%d: %s", source, jerr.line,
			    jerr.column, jerr.text);
		*xrc = EX_DATAERR;
		return NULL;
	}
	if (!json_is_object(v)) {
		complain(source, line, "expected a JSON object");
		json_decref(v);
		*xrc = EX_DATAERR;
		return NULL;
	}
	return v;
}

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

/* A non-negative decimal number of milliseconds ("150", "149.5"). */
static int
parse_ms(const char *s, double *out)
{
	char *end;
	double v;

	if (*s == '\0' || strspn(s, "0123456789.") != strlen(s))
		return -1;
	errno = 0;
	v = strtod(s, &end);
	if (*end != '\0' || errno != 0 || !(v >= 0.0) || v > 1e15)
		return -1;
	*out = v;
	return 0;
}

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

/* Milliseconds as a JSON integer when whole (they usually are), else real. */
static json_t *
ms_json(double ms)
{
	if (ms >= 0.0 && ms < 9007199254740992.0 && ms == (double)(json_int_t)ms)
		return json_integer((json_int_t)ms);
	return json_real(ms);
}

/* Print one JSON object as a line.  Returns 0 or EX_IOERR. */
static int
emit(json_t *obj, bool flush)
{
	char *s;
	int rc = 0;

	if ((s = json_dumps(obj, JSON_COMPACT)) == NULL) {
		complain(NULL, 0, "out of memory");
		return EX_SOFTWARE;
	}
	if (fputs(s, stdout) == EOF || putchar('\n') == EOF ||
	    (flush && fflush(stdout) == EOF)) {
		complain(NULL, 0, "write error: %s", strerror(errno));
		rc = EX_IOERR;
	}
	free(s);
	return rc;
}

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
		if (lrc != 0) {
			report(source, line, lrc, &err);
			return exit_for(lrc);
		}
		if ((obj = sg_decision_to_json(&d, req)) == NULL ||
		    json_object_set_new(obj, "elapsed_ms",
		    ms_json(elapsed)) != 0) {
			complain(NULL, 0, "out of memory");
			rc = EX_SOFTWARE;
			goto out;
		}
		if (r->o->explain) {
			sg_error_clear(&err);
			lrc = sg_router_explain(r->rt, r->snap, req, elapsed, &ex,
			    &err);
			if (lrc != 0) {
				report(source, line, lrc, &err);
				rc = exit_for(lrc);
				goto out;
			}
			if (json_object_set_new(obj, "explain", ex) != 0) {
				complain(NULL, 0, "out of memory");
				rc = EX_SOFTWARE;
				goto out;
			}
		}
		if ((rc = emit(obj, r->stream)) != 0)
			goto out;
		json_decref(obj);
		obj = NULL;
		if (d.kind == SG_DECIDE_REJECT)
			r->rejected = true;
		if (!r->o->until_decided || d.kind != SG_DECIDE_WAIT)
			return 0;
		/* A wait must move time forward, or the loop would spin. */
		if (!(d.recheck_at_ms > elapsed)) {
			complain(source, line, "wait at %g ms rechecks at %g ms",
			    elapsed, d.recheck_at_ms);
			return EX_SOFTWARE;
		}
		elapsed = d.recheck_at_ms;
	}
	complain(source, line, "no decision after %d steps",
	    UNTIL_DECIDED_MAX_STEPS);
	return EX_SOFTWARE;
out:
	json_decref(obj);
	return rc;
}

/* Load the -s snapshot into r->snap. */
static int
load_snapshot(struct run *r, const char *path)
{
	sg_error err;
	json_t *v;
	char *text = NULL;
	size_t len;
	int rc, lrc;

	if ((rc = slurp(path, &text, &len)) != 0)
		return rc;
	if ((v = parse_object(text, len, source_name(path), 0, &rc)) == NULL)
		goto out;
	sg_error_clear(&err);
	if ((lrc = sg_snapshot_from_json(r->snap, v, &err)) != 0) {
		report(source_name(path), 0, lrc, &err);
		rc = exit_for(lrc);
	} else
		r->have_snap = true;
	json_decref(v);
out:
	free(text);
	return rc;
}

/* One request from a file or stdin (JSON, or header lines). */
static int
run_single(struct run *r)
{
	const char *source = source_name(r->o->input);
	sg_request req;
	sg_error err;
	json_t *v = NULL;
	char *text = NULL;
	size_t len;
	int rc, lrc;

	sg_request_init(&req);
	if ((rc = slurp(r->o->input, &text, &len)) != 0)
		goto out;
	sg_error_clear(&err);
	if (r->o->headers) {
		lrc = sg_request_from_headers(&req, text, len, &err);
	} else {
		if ((v = parse_object(text, len, source, 0, &rc)) == NULL)
			goto out;
		lrc = sg_request_from_json(&req, v, &err);
	}
	if (lrc != 0) {
		report(source, 0, lrc, &err);
		rc = exit_for(lrc);
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
 * record (reported), or a fatal exit code.
 */
static int
stream_record(struct run *r, json_t *rec, const char *source, long line)
{
	json_t *snap, *rq;
	const char *key;
	json_t *val;
	sg_request req;
	sg_error err;
	sg_snapshot *tmp;
	int rc = 0, lrc;

	json_object_foreach(rec, key, val) {
		if (strcmp(key, "snapshot") != 0 && strcmp(key, "request") != 0) {
			complain(source, line, "%s: unknown field (expected "
			    "\"snapshot\" or \"request\")", key);
			return EX_DATAERR;
		}
	}
	snap = json_object_get(rec, "snapshot");
	rq = json_object_get(rec, "request");
	if (snap == NULL && rq == NULL) {
		complain(source, line, "expected \"snapshot\" or \"request\"");
		return EX_DATAERR;
	}
	if (snap != NULL) {
		if (!json_is_object(snap)) {
			complain(source, line, "snapshot: expected an object");
			return EX_DATAERR;
		}
		sg_error_clear(&err);
		if ((lrc = sg_snapshot_from_json(r->staging, snap, &err)) != 0) {
			report(source, line, lrc, &err);
			return exit_for(lrc);
		}
		tmp = r->snap;
		r->snap = r->staging;
		r->staging = tmp;
		r->have_snap = true;
	}
	if (rq == NULL)
		return 0;
	if (!json_is_object(rq)) {
		complain(source, line, "request: expected an object");
		return EX_DATAERR;
	}
	if (!r->have_snap) {
		complain(source, line, "request before any snapshot (use -s or "
		    "a {\"snapshot\": ...} record)");
		return EX_DATAERR;
	}
	sg_request_init(&req);
	sg_error_clear(&err);
	if ((lrc = sg_request_from_json(&req, rq, &err)) != 0) {
		report(source, line, lrc, &err);
		rc = exit_for(lrc);
	} else
		rc = decide(r, &req, source, line);
	sg_request_release(&req);
	return rc;
}

static int
run_stream(struct run *r)
{
	const char *source = source_name(r->o->input);
	FILE *f;
	char *buf = NULL;
	size_t cap = 0, len;
	long line = 0;
	bool toolong;
	json_t *rec;
	int rc = 0, got;

	if ((f = open_input(r->o->input)) == NULL)
		return EX_NOINPUT;
	while ((got = read_line(f, &buf, &cap, &len, &toolong)) == 1) {
		line++;
		if (toolong) {
			complain(source, line, "record larger than %u bytes",
			    SG_MAX_RECORD);
			r->bad = true;
			continue;
		}
		if (len == 0 || strspn(buf, " \t\r") == len)
			continue;
		if ((rec = parse_object(buf, len, source, line, &rc)) == NULL) {
			r->bad = true;
			rc = 0;
			continue;
		}
		rc = stream_record(r, rec, source, line);
		json_decref(rec);
		if (rc == EX_DATAERR) {
			r->bad = true;
			rc = 0;
		} else if (rc != 0)
			break;
	}
	if (got == -2) {
		complain(NULL, 0, "out of memory");
		rc = EX_SOFTWARE;
	} else if (got < 0) {
		complain(source, 0, "read error: %s", strerror(errno));
		rc = EX_IOERR;
	}
	free(buf);
	close_input(f);
	return rc;
}

/* --- main ----------------------------------------------------------------- */

static int
load_config(struct run *r)
{
	sg_error err;
	char *text = NULL;
	size_t len;
	int rc, lrc;

	sg_error_clear(&err);
	if (r->o->config == NULL) {
		lrc = sg_lbconf_default(&r->conf, &err);
		if (lrc != 0) {
			report(NULL, 0, lrc, &err);
			return EX_SOFTWARE;
		}
		return 0;
	}
	if ((rc = slurp(r->o->config, &text, &len)) != 0)
		return rc == EX_DATAERR ? EX_CONFIG : rc;
	lrc = sg_lbconf_parse(&r->conf, text, len, source_name(r->o->config),
	    &err);
	free(text);
	if (lrc != 0) {
		/* The library's message already names the file. */
		report(NULL, 0, lrc, &err);
		return lrc == SG_ENOMEM ? EX_SOFTWARE : EX_CONFIG;
	}
	return 0;
}

int
main(int argc, char *argv[])
{
	struct opts o;
	struct run r;
	sg_error err;
	int ch, rc = 0, lrc;

	memset(&o, 0, sizeof(o));
	memset(&r, 0, sizeof(r));
	while ((ch = getopt_long(argc, argv, "c:hs:", longopts, NULL)) != -1) {
		switch (ch) {
		case 'c':
			o.config = optarg;
			break;
		case 'h':
			usage(EX_OK);
		case 's':
			o.snapshot = optarg;
			break;
		case OPT_SEED:
			if (sg_parse_u64(optarg, strlen(optarg), UINT64_MAX,
			    &o.seed) != 0) {
				complain(NULL, 0, "--seed: expected an unsigned "
				    "64-bit integer, got '%s'", optarg);
				usage(EX_USAGE);
			}
			break;
		case OPT_ELAPSED:
			if (parse_ms(optarg, &o.elapsed_ms) != 0) {
				complain(NULL, 0, "--elapsed-ms: expected a "
				    "non-negative number, got '%s'", optarg);
				usage(EX_USAGE);
			}
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
			printf("%s %s\n", progname, SG_VERSION);
			return fflush(stdout) == EOF || ferror(stdout) ?
			    EX_IOERR : EX_OK;
		default:
			usage(EX_USAGE);
		}
	}
	argc -= optind;
	argv += optind;
	if (argc > 1) {
		complain(NULL, 0, "at most one input operand");
		usage(EX_USAGE);
	}
	o.input = argc == 1 ? argv[0] : NULL;
	if (o.headers && o.ndjson) {
		complain(NULL, 0, "--headers and --ndjson are exclusive");
		usage(EX_USAGE);
	}
	if (o.snapshot == NULL && !o.ndjson) {
		complain(NULL, 0, "-s snapshot.json is required (unless --ndjson)");
		usage(EX_USAGE);
	}
	if (o.snapshot != NULL && strcmp(o.snapshot, "-") == 0 &&
	    (o.input == NULL || strcmp(o.input, "-") == 0)) {
		complain(NULL, 0, "the snapshot and the input cannot both be "
		    "stdin");
		usage(EX_USAGE);
	}

	r.o = &o;
	r.stream = o.ndjson;
	if ((rc = load_config(&r)) != 0)
		goto out;
	sg_error_clear(&err);
	if ((lrc = sg_router_new(&r.rt, r.conf, o.seed, &err)) != 0) {
		report(NULL, 0, lrc, &err);
		rc = lrc == SG_ECONFIG ? EX_CONFIG : EX_SOFTWARE;
		goto out;
	}
	if ((r.snap = sg_snapshot_new()) == NULL ||
	    (r.staging = sg_snapshot_new()) == NULL) {
		complain(NULL, 0, "out of memory");
		rc = EX_SOFTWARE;
		goto out;
	}
	if (o.snapshot != NULL && (rc = load_snapshot(&r, o.snapshot)) != 0)
		goto out;
	rc = o.ndjson ? run_stream(&r) : run_single(&r);
	if (rc == 0 && r.bad)
		rc = EX_DATAERR;
	if (rc == 0 && r.rejected)
		rc = 2;
out:
	if (fflush(stdout) == EOF || ferror(stdout)) {
		if (rc != EX_IOERR)
			complain(NULL, 0, "write error: %s", strerror(errno));
		rc = EX_IOERR;
	}
	sg_snapshot_free(r.staging);
	sg_snapshot_free(r.snap);
	sg_router_free(r.rt);
	sg_lbconf_free(r.conf);
	return rc;
}
