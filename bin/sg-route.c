/*
 * sg-route — pipe snapshots and routing requests through the libstargate
 * decision engine from a shell (stargate(7)).
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
 * Speed (--ndjson).  Lines are read with one read(2) per MiB (memchr for
 * the newlines).  A {"request": {...}} line is read by a one-pass scan
 * into a request that is reused from line to line (scan_record(),
 * sg_request_scan_json()); any other line, and any line the scan does not
 * take (it gives up on every malformed or unusual form), is parsed with
 * json_loadb, which decides and words every error (--reference-reader,
 * for tests, always takes that path).  A snapshot line identical to the
 * last one applied is not parsed again.  Decisions are written by a
 * bounded hand-written writer straight into a 1 MiB batch that goes to
 * stdout in one fwrite (struct obuf; the same bytes
 * as the jansson rendering, which it falls back to for anything it does
 * not write itself: --explain, strings that need escaping or are not
 * ASCII, milliseconds that are not whole; --reference-writer, for tests,
 * always takes the jansson path, after the batch so far).  Output is
 * flushed before every read that may block and before every message on
 * stderr, so a consumer sees
 * each decision before sg-route waits for more input, and messages keep
 * their place among the decisions.
 *
 * Exit status: 0 decided, 2 a request was rejected, sysexits otherwise
 * (64 usage, 65 bad input, 66 cannot open, 70 internal, 74 output, 78 config).
 * Bad input outranks a rejection: a stream with both ends in 65.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>
#include <unistd.h>

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
	OPT_REFWRITER,
	OPT_REFREADER,
};

static const struct option longopts[] = {
	{ "config",		required_argument,	NULL,	'c' },
	{ "elapsed-ms",		required_argument,	NULL,	OPT_ELAPSED },
	{ "explain",		no_argument,		NULL,	OPT_EXPLAIN },
	{ "headers",		no_argument,		NULL,	OPT_HEADERS },
	{ "help",		no_argument,		NULL,	'h' },
	{ "ndjson",		no_argument,		NULL,	OPT_NDJSON },
	{ "seed",		required_argument,	NULL,	OPT_SEED },
	{ "reference-reader",	no_argument,		NULL,	OPT_REFREADER },
	{ "reference-writer",	no_argument,		NULL,	OPT_REFWRITER },
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
    "      --reference-reader  (tests) read stream records through jansson\n"
    "      --reference-writer  (tests) print decisions through jansson\n"
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
	bool		 refwriter;	/* decisions through jansson only */
	bool		 refreader;	/* stream records through jansson */
};

/* --- deciding ------------------------------------------------------------- */

/* The stream's output batch: decisions in order, for one fwrite. */
struct obuf {
	char		*buf;
	size_t		 len, cap;
};

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
	bool		 fast;		/* the buffered stream path */
	char		*lastsnap;	/* the last snapshot-only line applied */
	size_t		 lastsnap_len;
	sg_request	 req;		/* scanned stream requests (reused) */
	struct obuf	*out;		/* stream_fast()'s batch, or NULL */
};

/* Hand the batch to stdout (one fwrite); EOF on a write error. */
static int
ob_flush(struct obuf *ob)
{
	size_t n;

	if (ob == NULL || ob->len == 0)
		return 0;
	n = ob->len;
	ob->len = 0;
	return fwrite_unlocked(ob->buf, 1, n, stdout) == n ? 0 : EOF;
}

/* Flush the decisions so far before a message (fast path: buffered). */
static void
pre_msg(const struct run *r)
{
	if (r->fast) {
		(void)ob_flush(r->out);
		(void)fflush(stdout);
	}
}

/* --- the decision writer -------------------------------------------------- */

#define DW_MAX	(4 * SG_ID_MAX + 1024)	/* what dw_decision() may write */

/* The bytes dw_str() copies as they are: printable ASCII but '"', '\\'. */
static const unsigned char dw_plain[256] = {
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1,
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
	1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0,
	/* 0x80 and up: 0 */
};

/* Append s if it is printable ASCII without '"' or '\\'; false if not. */
static bool
dw_str(char **p, const char *end, const char *s)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t n = 0;

	while (dw_plain[u[n]])
		n++;
	if (u[n] != '\0' || (size_t)(end - *p) < n)
		return false;
	memcpy(*p, s, n);
	*p += n;
	return true;
}

static bool
dw_lit(char **p, const char *end, const char *lit, size_t n)
{
	if ((size_t)(end - *p) < n)
		return false;
	memcpy(*p, lit, n);
	*p += n;
	return true;
}
#define DW_LIT(p, end, s)	dw_lit(p, end, s, sizeof(s) - 1)

/* A field "name":"value". */
static bool
dw_sfield(char **p, const char *end, const char *name, size_t nlen,
    const char *v)
{
	return dw_lit(p, end, name, nlen) && dw_str(p, end, v) &&
	    DW_LIT(p, end, "\"");
}
#define DW_SFIELD(p, end, n, v)	dw_sfield(p, end, n, sizeof(n) - 1, v)

/* v in decimal, as "%lld" prints it (digits written backwards, then
 * moved: no stdio on the hot path). */
static bool
dw_int(char **p, const char *end, long long v)
{
	char tmp[24], *t = tmp + sizeof(tmp);
	unsigned long long u = v < 0 ? 0 - (unsigned long long)v :
	    (unsigned long long)v;
	size_t n;

	do {
		*--t = (char)('0' + u % 10);
		u /= 10;
	} while (u != 0);
	if (v < 0)
		*--t = '-';
	n = (size_t)(tmp + sizeof(tmp) - t);
	if ((size_t)(end - *p) < n)
		return false;
	memcpy(*p, t, n);
	*p += n;
	return true;
}

/* A whole number of milliseconds both ms renderings print as an integer. */
static bool
dw_ms(char **p, const char *end, double v)
{
	if (!(v >= 0.0 && v < 9007199254740992.0) || v != floor(v))
		return false;
	return dw_int(p, end, (long long)v);
}

/*
 * The line cli_decision_json() + json_dumps(JSON_COMPACT) would print for
 * d (fields in sg_decision_to_json()'s order, then elapsed_ms), into
 * buf[0..DW_MAX); returns its length, or 0 when this writer does not
 * handle it (the caller takes the jansson path).
 */
static size_t
dw_decision(char *buf, const sg_decision *d, const sg_request *req,
    double elapsed)
{
	const char *kind = sg_decision_kind_name(d->kind);
	const char *phase = sg_phase_name(d->phase), *state;
	char *p = buf, *end = buf + DW_MAX;
	bool ok = true;

	if (kind == NULL)
		return 0;
	ok &= DW_LIT(&p, end, "{");
	if (req->request_id != NULL)
		ok = ok && DW_SFIELD(&p, end, "\"request_id\":\"",
		    req->request_id) && DW_LIT(&p, end, ",");
	ok = ok && DW_SFIELD(&p, end, "\"decision\":\"", kind);
	if (d->kind == SG_DECIDE_SELECT)
		ok = ok && DW_SFIELD(&p, end, ",\"cluster_id\":\"",
		    d->cluster_id != NULL ? d->cluster_id : "") &&
		    DW_LIT(&p, end, ",\"rank_depth\":") &&
		    dw_int(&p, end, (long long)d->rank_depth);
	if (phase != NULL)
		ok = ok && DW_SFIELD(&p, end, ",\"phase\":\"", phase);
	if (d->algorithm != NULL)
		ok = ok && DW_SFIELD(&p, end, ",\"algorithm\":\"",
		    d->algorithm);
	if (d->kind == SG_DECIDE_SELECT && d->kv_skip)
		ok = ok && DW_LIT(&p, end, ",\"kv_skip\":true");
	if (d->kind == SG_DECIDE_WAIT)
		ok = ok && DW_LIT(&p, end, ",\"recheck_at_ms\":") &&
		    dw_ms(&p, end, d->recheck_at_ms);
	if (d->kind == SG_DECIDE_REJECT) {
		ok = ok && DW_LIT(&p, end, ",\"status\":") &&
		    dw_int(&p, end, d->status);
		if (d->code != NULL)
			ok = ok && DW_SFIELD(&p, end, ",\"code\":\"",
			    d->code);
		if (d->reason != NULL)
			ok = ok && DW_SFIELD(&p, end, ",\"reason\":\"",
			    d->reason);
	}
	if (d->classified) {
		if ((state = sg_session_state_name(d->session_state)) != NULL)
			ok = ok && DW_SFIELD(&p, end,
			    ",\"session_state\":\"", state);
		ok = ok && (d->promoted ?
		    DW_LIT(&p, end, ",\"promoted\":true") :
		    DW_LIT(&p, end, ",\"promoted\":false"));
		if (d->kind == SG_DECIDE_SELECT)
			ok = ok && (d->primary ?
			    DW_LIT(&p, end, ",\"selection\":\"primary\"") :
			    DW_LIT(&p, end, ",\"selection\":\"fallback\""));
	}
	ok = ok && DW_LIT(&p, end, ",\"elapsed_ms\":") &&
	    dw_ms(&p, end, elapsed) && DW_LIT(&p, end, "}\n");
	return ok ? (size_t)(p - buf) : 0;
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
	char buf[DW_MAX];
	size_t n;
	long step;
	int rc = 0, lrc;

	for (step = 0; step < UNTIL_DECIDED_MAX_STEPS; step++) {
		sg_error_clear(&err);
		memset(&d, 0, sizeof(d));
		lrc = sg_router_decide(r->rt, r->snap, req, elapsed, &d, &err);
		if (lrc != 0) {
			pre_msg(r);
			return cli_report(source, line, lrc, &err, true);
		}
		if (!r->o->explain && !r->o->refwriter && r->out != NULL) {
			struct obuf *ob = r->out;

			if (ob->cap - ob->len < DW_MAX && ob_flush(ob) != 0)
				return cli_write_error();
			if ((n = dw_decision(ob->buf + ob->len, &d, req,
			    elapsed)) > 0) {
				ob->len += n;
				if (r->stream && (ob_flush(ob) != 0 ||
				    fflush(stdout) == EOF))
					return cli_write_error();
				goto next;
			}
		} else if (!r->o->explain && !r->o->refwriter &&
		    (n = dw_decision(buf, &d, req, elapsed)) > 0) {
			if (fwrite_unlocked(buf, 1, n, stdout) != n ||
			    (r->stream && fflush(stdout) == EOF))
				return cli_write_error();
			goto next;
		}
		/* the jansson path: after the decisions batched so far */
		if (ob_flush(r->out) != 0)
			return cli_write_error();
		if ((obj = cli_decision_json(&d, req, elapsed)) == NULL) {
			rc = cli_oom();
			goto out;
		}
		if (r->o->explain) {
			sg_error_clear(&err);
			lrc = sg_router_explain(r->rt, r->snap, req, elapsed, &ex,
			    &err);
			if (lrc != 0) {
				pre_msg(r);
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
next:
		if (d.kind == SG_DECIDE_REJECT)
			r->rejected = true;
		if (!r->o->until_decided || d.kind != SG_DECIDE_WAIT)
			return 0;
		/* A wait must move time forward, or the loop would spin. */
		if (!(d.recheck_at_ms > elapsed)) {
			pre_msg(r);
			cli_complain(source, line,
			    "wait at %g ms rechecks at %g ms", elapsed,
			    d.recheck_at_ms);
			return EX_SOFTWARE;
		}
		elapsed = d.recheck_at_ms;
	}
	pre_msg(r);
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

	/* "decision" and "context" (an sg-proxy decision log record) are
	 * read past: the log replays as it is. */
	json_object_foreach(rec, key, val) {
		if (strcmp(key, "snapshot") != 0 && strcmp(key, "request") != 0 &&
		    strcmp(key, "decision") != 0 && strcmp(key, "context") != 0) {
			pre_msg(r);
			cli_complain(source, line, "%s: unknown field "
			    "(expected \"snapshot\" or \"request\")", key);
			return EX_DATAERR;
		}
	}
	snap = json_object_get(rec, "snapshot");
	rq = json_object_get(rec, "request");
	if (snap == NULL && rq == NULL) {
		pre_msg(r);
		cli_complain(source, line,
		    "expected \"snapshot\" or \"request\"");
		return EX_DATAERR;
	}
	if (snap != NULL) {
		if (!json_is_object(snap)) {
			pre_msg(r);
			cli_complain(source, line,
			    "snapshot: expected an object");
			return EX_DATAERR;
		}
		sg_error_clear(&err);
		if ((lrc = sg_snapshot_from_json(r->staging, snap, &err)) !=
		    0) {
			pre_msg(r);
			return cli_report(source, line, lrc, &err, true);
		}
		tmp = r->snap;
		r->snap = r->staging;
		r->staging = tmp;
		r->have_snap = true;
	}
	if (rq == NULL)
		return 0;
	if (!json_is_object(rq)) {
		pre_msg(r);
		cli_complain(source, line, "request: expected an object");
		return EX_DATAERR;
	}
	if (!r->have_snap) {
		pre_msg(r);
		cli_complain(source, line, "request before any snapshot "
		    "(use -s or a {\"snapshot\": ...} record)");
		return EX_DATAERR;
	}
	sg_request_init(&req);
	sg_error_clear(&err);
	if ((lrc = sg_request_from_json(&req, rq, &err)) != 0) {
		pre_msg(r);
		rc = cli_report(source, line, lrc, &err, true);
	} else
		rc = decide(r, &req, source, line);
	sg_request_release(&req);
	return rc;
}

/*
 * The --ndjson stream, as cli_stream() reads it (same lines, line numbers,
 * limits, messages and exit codes), faster: see the top of the file.
 */
#define RD_CHUNK	((size_t)1 << 20)

struct rd {
	int		 fd;
	struct obuf	*out;		/* flushed before a read */
	char		*buf;		/* RD_CHUNK + SG_MAX_RECORD + 1 bytes */
	size_t		 cap, start, end;
	bool		 eof;
};

/*
 * Make room and read more; returns 1 when bytes were added, 0 at the end,
 * -1 on a read error (errno set).  Flushes stdout first: the read may
 * block.
 */
static int
rd_fill(struct rd *d)
{
	ssize_t n;

	if (d->eof)
		return 0;
	if (d->start > 0) {
		memmove(d->buf, d->buf + d->start, d->end - d->start);
		d->end -= d->start;
		d->start = 0;
	}
	if (ob_flush(d->out) != 0 || fflush(stdout) == EOF)
		return -2;
	do
		n = read(d->fd, d->buf + d->end, d->cap - 1 - d->end);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -1;
	if (n == 0) {
		d->eof = true;
		return 0;
	}
	d->end += (size_t)n;
	return 1;
}

/*
 * The next line (NUL-terminated in place, without its newline) in *line,
 * *len; *toolong for a line over SG_MAX_RECORD bytes (consumed, not
 * returned).  Returns 1, 0 at the end, -1 read error, -2 write error.
 */
static int
rd_line(struct rd *d, char **line, size_t *len, bool *toolong)
{
	size_t scan = d->start;
	char *nl;
	int got;

	*toolong = false;
	for (;;) {
		nl = memchr(d->buf + scan, '\n', d->end - scan);
		if (nl != NULL) {
			size_t n = (size_t)(nl - (d->buf + d->start));

			*nl = '\0';
			*line = d->buf + d->start;
			*len = n;
			d->start += n + 1;
			if (*toolong || n > SG_MAX_RECORD) {
				*toolong = true;
				*len = 0;
			}
			return 1;
		}
		if (d->end - d->start > SG_MAX_RECORD) {
			/* too long: drop what is buffered, keep looking */
			*toolong = true;
			d->start = d->end = 0;
		}
		scan = d->end - d->start;
		if ((got = rd_fill(d)) < 0)
			return got;
		scan += d->start;
		if (got == 0) {
			if (d->end == d->start && !*toolong)
				return 0;
			d->buf[d->end] = '\0';	/* a last line, no newline */
			*line = d->buf + d->start;
			*len = *toolong ? 0 : d->end - d->start;
			d->start = d->end;
			return 1;
		}
	}
}

/* JSON white space from line[i]. */
static size_t
skip_ws(const char *line, size_t len, size_t i)
{
	while (i < len && (line[i] == ' ' || line[i] == '\t' ||
	    line[i] == '\r' || line[i] == '\n'))
		i++;
	return i;
}

/*
 * A line that is exactly {"request": {...}} (white space aside) whose
 * request sg_request_scan_json() reads: 0, the request in r->req.
 * ENOTSUP for anything else (json_loadb's path then reads the line).
 */
static int
scan_record(struct run *r, const char *line, size_t len)
{
	static const char key[] = "\"request\"";
	size_t i, used;

	i = skip_ws(line, len, 0);
	if (i >= len || line[i] != '{')
		return ENOTSUP;
	i = skip_ws(line, len, i + 1);
	if (len - i < sizeof(key) - 1 ||
	    memcmp(line + i, key, sizeof(key) - 1) != 0)
		return ENOTSUP;
	i = skip_ws(line, len, i + sizeof(key) - 1);
	if (i >= len || line[i] != ':')
		return ENOTSUP;
	if (sg_request_scan_json(&r->req, line + i + 1, len - i - 1, &used,
	    NULL) != 0)
		return ENOTSUP;
	i = skip_ws(line, len, i + 1 + used);
	if (i >= len || line[i] != '}' || skip_ws(line, len, i + 1) != len)
		return ENOTSUP;
	return 0;
}

/* A snapshot-only line identical to the last one applied: nothing to do. */
static bool
same_snapshot(const struct run *r, const char *line, size_t len)
{
	return r->lastsnap != NULL && len == r->lastsnap_len &&
	    memcmp(line, r->lastsnap, len) == 0;
}

/* Remember line if rec was a snapshot-only record that was applied. */
static void
keep_snapshot(struct run *r, const json_t *rec, const char *line, size_t len)
{
	char *c;

	if (json_object_size(rec) != 1 ||
	    json_object_get(rec, "snapshot") == NULL)
		return;
	free(r->lastsnap);
	r->lastsnap = NULL;
	if ((c = malloc(len)) == NULL)
		return;		/* only an optimisation */
	memcpy(c, line, len);
	r->lastsnap = c;
	r->lastsnap_len = len;
}

static int
stream_fast(struct run *r, const char *path, bool *bad)
{
	const char *source = cli_source_name(path);
	struct obuf ob;
	struct rd d;
	json_error_t jerr;
	json_t *rec;
	char *line;
	size_t len;
	long lineno = 0;
	bool toolong;
	FILE *f;
	int rc = 0, got;

	if ((f = cli_open_input(path)) == NULL)
		return EX_NOINPUT;
	memset(&d, 0, sizeof(d));
	memset(&ob, 0, sizeof(ob));
	d.fd = fileno(f);
	d.cap = RD_CHUNK + SG_MAX_RECORD + 1;
	ob.cap = RD_CHUNK;
	if ((d.buf = malloc(d.cap)) == NULL ||
	    (ob.buf = malloc(ob.cap)) == NULL) {
		rc = cli_oom();
		goto out;
	}
	d.out = r->out = &ob;
	while ((got = rd_line(&d, &line, &len, &toolong)) == 1) {
		lineno++;
		if (toolong) {
			pre_msg(r);
			cli_complain(source, lineno,
			    "record larger than %u bytes", SG_MAX_RECORD);
			*bad = true;
			continue;
		}
		if (len == 0 || strspn(line, " \t\r") == len)
			continue;
		if (same_snapshot(r, line, len))
			continue;
		if (r->have_snap && !r->o->refreader &&
		    scan_record(r, line, len) == 0) {
			rc = decide(r, &r->req, source, lineno);
			if (rc == EX_DATAERR) {
				*bad = true;
				rc = 0;
			} else if (rc != 0)
				goto out;
			continue;
		}
		rec = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
		if (rec == NULL || !json_is_object(rec)) {
			/* the shared parser reports it, in its words */
			json_decref(rec);
			pre_msg(r);
			json_decref(cli_parse_object(line, len, source,
			    lineno));
			*bad = true;
			continue;
		}
		if (json_object_get(rec, "snapshot") != NULL) {
			/* the current snapshot may change: forget the last */
			free(r->lastsnap);
			r->lastsnap = NULL;
		}
		rc = stream_record(rec, source, lineno, r);
		if (rc == 0)
			keep_snapshot(r, rec, line, len);
		json_decref(rec);
		if (rc == EX_DATAERR) {
			*bad = true;
			rc = 0;
		} else if (rc != 0)
			goto out;
	}
	if (got == -2)
		rc = cli_write_error();
	else if (got < 0) {
		pre_msg(r);
		rc = cli_read_failed(-1, source);
	}
out:
	/* what was decided goes out, whatever ended the stream */
	if (ob_flush(&ob) != 0 && rc == 0)
		rc = cli_write_error();
	r->out = NULL;
	free(ob.buf);
	free(d.buf);
	cli_close_input(f);
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
		case OPT_REFWRITER:
			o.refwriter = true;
			break;
		case OPT_REFREADER:
			o.refreader = true;
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
	r.fast = o.ndjson;
	r.stream = false;	/* flushed before reads and messages */
	if (o.ndjson && setvbuf(stdout, NULL, _IOFBF, RD_CHUNK) != 0) {
		rc = cli_oom();
		goto out;
	}
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
	rc = o.ndjson ? stream_fast(&r, o.input, &r.bad) : run_single(&r);
	if (rc == 0 && r.bad)
		rc = EX_DATAERR;
	if (rc == 0 && r.rejected)
		rc = 2;
out:
	rc = cli_finish(rc);
	free(r.lastsnap);
	sg_request_release(&r.req);
	sg_snapshot_free(r.staging);
	sg_snapshot_free(r.snap);
	sg_router_free(r.rt);
	sg_lbconf_free(r.conf);
	return rc;
}
