/*
 * cli.c — the program side shared by sg-route, sg-classify and
 * sg-lastcluster (see cli.h).
 *
 * Every input is bounded by SG_MAX_RECORD (a whole file, a stream line), so
 * no input grows an allocation without limit.  A write error on stdout is
 * reported once: where it is seen (cli_emit), or at the end (cli_finish).
 */
#include <sys/stat.h>

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>

#include <jansson.h>

#include "cli.h"

/* --- messages and exit ---------------------------------------------------- */

/*
 * getopt_long reports a bad option as "<argv[0]>: ...", and argv[0] is
 * whatever path the program was started by.  Every message of ours reads
 * "<progname>: ...", so before main() runs argv[0] is pointed at the
 * program's name (glibc calls .init_array functions with argc, argv and
 * envp).  /proc/PID/cmdline is untouched: only the pointer changes.
 */
static void
cli_argv0(int argc, char **argv, char **envp)
{
	(void)envp;
	if (argc > 0)
		argv[0] = (char *)cli_progname;
}
__attribute__((section(".init_array"), used))
static void (*const cli_argv0_init)(int, char **, char **) = cli_argv0;

void
cli_usage(int status)
{
	FILE *f = status == EX_OK ? stdout : stderr;

	fprintf(f, "usage: %s %s", cli_progname, cli_synopsis);
	if (status != EX_OK)
		exit(status);
	fputs(cli_help, f);
	exit(cli_finish(EX_OK));
}

/* The body of cli_complain(). */
static void __attribute__((format(printf, 3, 0)))
vcomplain(const char *source, long line, const char *fmt, va_list ap)
{
	fprintf(stderr, "%s: ", cli_progname);
	if (source != NULL && line > 0)
		fprintf(stderr, "%s:%ld: ", source, line);
	else if (source != NULL)
		fprintf(stderr, "%s: ", source);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

void
cli_usage_error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vcomplain(NULL, 0, fmt, ap);
	va_end(ap);
	cli_usage(EX_USAGE);
}

void
cli_complain(const char *source, long line, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vcomplain(source, line, fmt, ap);
	va_end(ap);
}

int
cli_oom(void)
{
	cli_complain(NULL, 0, "out of memory");
	return EX_SOFTWARE;
}

int
cli_write_error(void)
{
	cli_complain(NULL, 0, "write error: %s", strerror(errno));
	return EX_IOERR;
}

int
cli_exit_for(int rc)
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

int
cli_report(const char *source, long line, int rc, const sg_error *err,
    bool http_status)
{
	const char *text = err->text[0] != '\0' ? err->text : sg_strerror(rc);

	if (http_status && err->status != 0)
		cli_complain(source, line, "%s (%d%s%s)", text, err->status,
		    err->code[0] != '\0' ? " " : "", err->code);
	else
		cli_complain(source, line, "%s", text);
	return cli_exit_for(rc);
}

int
cli_finish(int rc)
{
	if (fflush(stdout) == EOF || ferror(stdout)) {
		if (rc != EX_IOERR)
			cli_write_error();
		rc = EX_IOERR;
	}
	return rc;
}

int
cli_version(void)
{
	printf("%s %s\n", cli_progname, SG_VERSION);
	return cli_finish(EX_OK);
}

/* --- input ---------------------------------------------------------------- */

bool
cli_is_stdin(const char *path)
{
	return path == NULL || strcmp(path, "-") == 0;
}

const char *
cli_source_name(const char *path)
{
	return cli_is_stdin(path) ? "<stdin>" : path;
}

FILE *
cli_open_input(const char *path)
{
	struct stat st;
	FILE *f;

	if (cli_is_stdin(path))
		return stdin;
	if ((f = fopen(path, "r")) == NULL) {
		cli_complain(NULL, 0, "cannot open '%s': %s", path,
		    strerror(errno));
		return NULL;
	}
	if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
		cli_complain(NULL, 0, "cannot open '%s': %s", path,
		    strerror(EISDIR));
		fclose(f);
		return NULL;
	}
	return f;
}

void
cli_close_input(FILE *f)
{
	if (f != NULL && f != stdin)
		fclose(f);
}

int
cli_slurp(const char *path, char **out, size_t *outlen)
{
	FILE *f;
	char *buf = NULL, *nbuf;
	size_t len = 0, cap = 0, n;
	int rc = 0;

	if ((f = cli_open_input(path)) == NULL)
		return EX_NOINPUT;
	for (;;) {
		if (cap - len < 4096) {
			size_t ncap = cap == 0 ? 65536 : cap * 2;

			if (ncap > (size_t)SG_MAX_RECORD + 1)
				ncap = (size_t)SG_MAX_RECORD + 1;
			if (ncap <= len)
				goto toolarge;
			if ((nbuf = realloc(buf, ncap + 1)) == NULL) {
				rc = cli_oom();
				goto out;
			}
			buf = nbuf;
			cap = ncap;
		}
		if ((n = fread(buf + len, 1, cap - len, f)) == 0)
			break;
		len += n;
	}
	if (ferror(f)) {
		cli_complain(cli_source_name(path), 0, "read error: %s",
		    strerror(errno));
		rc = EX_IOERR;
		goto out;
	}
	if (len > SG_MAX_RECORD)
		goto toolarge;
	buf[len] = '\0';
	*out = buf;
	*outlen = len;
	buf = NULL;
	goto out;
toolarge:
	cli_complain(cli_source_name(path), 0, "input larger than %u bytes",
	    SG_MAX_RECORD);
	rc = EX_DATAERR;
out:
	free(buf);
	cli_close_input(f);
	return rc;
}

int
cli_read_line(FILE *f, size_t limit, char **buf, size_t *cap, size_t *len,
    bool *toolong)
{
	size_t n = 0;
	int ch;

	*toolong = false;
	while ((ch = getc(f)) != EOF) {
		if (ch == '\n')
			break;
		if (n >= limit) {
			*toolong = true;
			continue;
		}
		if (n + 1 >= *cap) {
			size_t ncap = *cap == 0 ? 4096 : *cap * 2;
			char *nbuf;

			if (ncap > limit + 1)
				ncap = limit + 1;
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

int
cli_read_failed(int got, const char *source)
{
	if (got == -2)
		return cli_oom();
	cli_complain(source, 0, "read error: %s", strerror(errno));
	return EX_IOERR;
}

json_t *
cli_parse_object(const char *text, size_t len, const char *source, long line)
{
	json_error_t jerr;
	json_t *v;

	v = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	if (v == NULL) {
		if (line > 0)
			cli_complain(source, line, "%s", jerr.text);
		else
			cli_complain(NULL, 0, "%s:%d:%d: %s", source,
			    jerr.line, jerr.column, jerr.text);
		return NULL;
	}
	if (!json_is_object(v)) {
		cli_complain(source, line, "expected a JSON object");
		json_decref(v);
		return NULL;
	}
	return v;
}

int
cli_stream(const char *path, int flags, cli_record_fn *fn, void *arg,
    bool *bad)
{
	const char *source = cli_source_name(path);
	char *buf = NULL;
	size_t cap = 0, len;
	long line = 0;
	bool toolong;
	json_t *rec;
	FILE *f;
	int rc = 0, got;

	if ((f = cli_open_input(path)) == NULL)
		return EX_NOINPUT;
	while ((got = cli_read_line(f, SG_MAX_RECORD, &buf, &cap, &len,
	    &toolong)) == 1) {
		line++;
		if (toolong) {
			cli_complain(source, line,
			    "record larger than %u bytes", SG_MAX_RECORD);
			*bad = true;
			continue;
		}
		if (len == 0 || strspn(buf, " \t\r") == len)
			continue;
		if ((rec = cli_parse_object(buf, len, source, line)) == NULL) {
			*bad = true;
			continue;
		}
		rc = fn(rec, source, line, arg);
		json_decref(rec);
		if (rc == EX_DATAERR) {
			*bad = true;
			rc = 0;
		} else if (rc != 0)
			goto out;
	}
	if (got < 0)
		rc = cli_read_failed(got, source);
	else if (line == 0 && (flags & CLI_NEED_INPUT)) {
		cli_complain(source, 0, "no input");
		rc = EX_NOINPUT;
	}
out:
	free(buf);
	cli_close_input(f);
	return rc;
}

/* --- option values -------------------------------------------------------- */

int
cli_opt_ms(const char *name, const char *arg, double *out)
{
	char *end;
	double v;

	if (*arg == '\0' || strspn(arg, "0123456789.") != strlen(arg))
		goto bad;
	errno = 0;
	v = strtod(arg, &end);
	if (*end != '\0' || errno != 0 || !(v >= 0.0) || v > 1e15)
		goto bad;
	*out = v;
	return 0;
bad:
	cli_complain(NULL, 0, "%s: expected a non-negative number, got '%s'",
	    name, arg);
	return -1;
}

int
cli_opt_u64(const char *name, const char *arg, uint64_t *out)
{
	if (sg_parse_u64(arg, strlen(arg), UINT64_MAX, out) != 0) {
		cli_complain(NULL, 0, "%s: expected an unsigned 64-bit "
		    "integer, got '%s'", name, arg);
		return -1;
	}
	return 0;
}

/* --- routing -------------------------------------------------------------- */

int
cli_load_router(const char *path, uint64_t seed, sg_lbconf **confp,
    sg_router **rtp)
{
	sg_lbconf *conf = NULL;
	sg_router *rt = NULL;
	sg_error err;
	char *text = NULL;
	size_t len;
	int rc = 0, lrc;

	sg_error_clear(&err);
	if (path == NULL) {
		if ((lrc = sg_lbconf_default(&conf, &err)) != 0) {
			cli_report(NULL, 0, lrc, &err, false);
			rc = EX_SOFTWARE;
			goto out;
		}
	} else {
		if ((rc = cli_slurp(path, &text, &len)) != 0) {
			if (rc == EX_DATAERR)
				rc = EX_CONFIG;
			goto out;
		}
		if ((lrc = sg_lbconf_parse(&conf, text, len,
		    cli_source_name(path), &err)) != 0) {
			/* The library's message already names the file. */
			cli_report(NULL, 0, lrc, &err, false);
			rc = lrc == SG_ENOMEM ? EX_SOFTWARE : EX_CONFIG;
			goto out;
		}
	}
	sg_error_clear(&err);
	if ((lrc = sg_router_new(&rt, conf, seed, &err)) != 0) {
		cli_report(NULL, 0, lrc, &err, false);
		rc = lrc == SG_ECONFIG ? EX_CONFIG : EX_SOFTWARE;
		goto out;
	}
	*confp = conf;
	*rtp = rt;
	conf = NULL;
out:
	sg_lbconf_free(conf);
	free(text);
	return rc;
}

int
cli_load_snapshot(const char *path, sg_snapshot *snap)
{
	const char *source = cli_source_name(path);
	sg_error err;
	json_t *v = NULL;
	char *text = NULL;
	size_t len;
	int rc, lrc;

	if ((rc = cli_slurp(path, &text, &len)) != 0)
		goto out;
	if ((v = cli_parse_object(text, len, source, 0)) == NULL) {
		rc = EX_DATAERR;
		goto out;
	}
	sg_error_clear(&err);
	if ((lrc = sg_snapshot_from_json(snap, v, &err)) != 0)
		rc = cli_report(source, 0, lrc, &err, false);
out:
	json_decref(v);
	free(text);
	return rc;
}

/* Milliseconds as a JSON integer when whole (they usually are), else real. */
static json_t *
ms_json(double ms)
{
	if (ms >= 0.0 && ms < 9007199254740992.0 &&
	    ms == (double)(json_int_t)ms)
		return json_integer((json_int_t)ms);
	return json_real(ms);
}

json_t *
cli_decision_json(const sg_decision *d, const sg_request *req,
    double elapsed_ms)
{
	json_t *obj;

	if ((obj = sg_decision_to_json(d, req)) == NULL)
		return NULL;
	/* json_object_set_new() takes the value even when it fails. */
	if (json_object_set_new(obj, "elapsed_ms", ms_json(elapsed_ms)) != 0) {
		json_decref(obj);
		return NULL;
	}
	return obj;
}

/* --- output --------------------------------------------------------------- */

int
cli_emit(const json_t *obj, bool flush)
{
	char *s;
	int rc = 0;

	if ((s = json_dumps(obj, JSON_COMPACT)) == NULL)
		return cli_oom();
	if (fputs(s, stdout) == EOF || putchar('\n') == EOF ||
	    (flush && fflush(stdout) == EOF))
		rc = cli_write_error();
	free(s);
	return rc;
}
