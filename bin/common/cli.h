/*
 * cli.h — what the programs in bin/ share: messages, usage and the exit
 * path, bounded input (whole files, lines, NDJSON streams), option values,
 * and the router-side setup and output of sg-route and sg-classify.
 *
 * This is program code, not libstargate: it prints to stderr and speaks in
 * <sysexits.h> exit codes.  A function that "reports" a failure has already
 * printed it, so its caller only passes the exit code on.  Messages read
 * "<progname>: [<source>:[<line>:] ]<message>"; <source> is a file name or
 * "<stdin>", <line> a line of a stream.
 *
 * A program that links cli.o defines cli_progname, cli_synopsis and
 * cli_help.
 */
#ifndef SG_BIN_CLI_H
#define SG_BIN_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "stargate.h"

/* --- defined by the program ----------------------------------------------- */

extern const char cli_progname[];	/* "sg-route" */
extern const char cli_synopsis[];	/* usage after "usage: <prog> " */
extern const char cli_help[];		/* what -h prints after the synopsis */

/* --- messages and exit ---------------------------------------------------- */

/*
 * Print the usage and exit with status.  EX_OK (-h): the synopsis and
 * cli_help on stdout, and EX_IOERR instead when that write failed (as
 * cli_finish).  Any other status: the synopsis alone, on stderr.
 */
void cli_usage(int status) __attribute__((noreturn));

/* Report the message, then exit through cli_usage(EX_USAGE). */
void cli_usage_error(const char *fmt, ...)
    __attribute__((noreturn, format(printf, 1, 2)));

/* Report a message on stderr; source NULL: none, line 0: no line part. */
void cli_complain(const char *source, long line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Report "out of memory"; returns EX_SOFTWARE. */
int cli_oom(void);

/* Report "write error: <strerror(errno)>"; returns EX_IOERR. */
int cli_write_error(void);

/* The exit code for a libstargate status met while processing input. */
int cli_exit_for(int rc);

/*
 * Report a libstargate failure: err's text, else sg_strerror(rc).  With
 * http_status, a request error (err->status set) ends with its HTTP status
 * and error class: "... (400 unknown_method)".  Returns cli_exit_for(rc).
 */
int cli_report(const char *source, long line, int rc, const sg_error *err,
    bool http_status);

/*
 * The end of a run: flush stdout.  If stdout failed, now or earlier, the
 * result is EX_IOERR, and the write error is reported unless rc already is
 * EX_IOERR (whoever returned it has reported).  Otherwise the result is rc.
 */
int cli_finish(int rc);

/* --version: print "<progname> <version>"; returns cli_finish(EX_OK). */
int cli_version(void);

/* --- input ---------------------------------------------------------------- */

/* Whether path means standard input (NULL or "-"). */
bool cli_is_stdin(const char *path);

/* The source name messages use for path: "<stdin>" for standard input. */
const char *cli_source_name(const char *path);

/*
 * Open path for reading; standard input for NULL or "-".  A directory
 * cannot be opened.  Returns NULL after reporting (exit EX_NOINPUT).
 */
FILE *cli_open_input(const char *path);

/* Close what cli_open_input returned (standard input stays open). */
void cli_close_input(FILE *f);

/*
 * The whole of path (as cli_open_input), at most SG_MAX_RECORD bytes, as a
 * new NUL-terminated string in *out (the caller frees it).  Returns 0, or a
 * reported EX_NOINPUT, EX_DATAERR (too large), EX_IOERR or EX_SOFTWARE.
 */
int cli_slurp(const char *path, char **out, size_t *outlen);

/*
 * Read one line, without its newline, into *buf, which grows to at most
 * limit + 1 bytes (*buf and *cap start NULL and 0; the caller frees *buf).
 * Returns 1 with *len set, 0 at the end of input, or a negative value for
 * cli_read_failed().  A line longer than limit is consumed to its end and
 * returned with *toolong set (the bytes past limit are dropped).  *buf
 * stays NULL while every line so far was empty.
 */
int cli_read_line(FILE *f, size_t limit, char **buf, size_t *cap,
    size_t *len, bool *toolong);

/*
 * Report the failure got of cli_read_line on source; returns EX_IOERR (a
 * read error) or EX_SOFTWARE (out of memory).
 */
int cli_read_failed(int got, const char *source);

/*
 * Parse len bytes of text as one JSON object, duplicate keys rejected.
 * Returns a new reference, or NULL after reporting (bad input: EX_DATAERR).
 * A syntax error names source:line for a stream line (line > 0), else
 * source:line:column inside the whole text.
 */
json_t *cli_parse_object(const char *text, size_t len, const char *source,
    long line);

/*
 * A stream record handler: returns 0, EX_DATAERR for a bad record it has
 * reported (the stream goes on), or another reported exit code (the stream
 * stops there).
 */
typedef int cli_record_fn(json_t *rec, const char *source, long line,
    void *arg);

#define CLI_NEED_INPUT	0x1	/* cli_stream: an empty input is EX_NOINPUT */

/*
 * Read path (as cli_open_input) as NDJSON: one JSON object a line, each at
 * most SG_MAX_RECORD bytes, blank lines skipped, every record handed to fn
 * with its line number.  A bad line (too long, not a JSON object, or
 * refused by fn) is reported as source:line, sets *bad and is skipped.
 * flags: CLI_NEED_INPUT.  Returns 0 or the reported exit code that ended
 * the stream.
 */
int cli_stream(const char *path, int flags, cli_record_fn *fn, void *arg,
    bool *bad);

/* --- option values -------------------------------------------------------- */

/*
 * An option's value.  name is the option as documented ("--seed"); a bad
 * value is reported as "name: expected ..., got 'arg'" and returns -1, and
 * the caller exits through cli_usage(EX_USAGE).
 *
 * cli_opt_ms: a non-negative decimal number of milliseconds ("150",
 * "149.5"; no sign, exponent or space), at most 1e15.
 * cli_opt_u64: an unsigned 64-bit decimal integer.
 */
int cli_opt_ms(const char *name, const char *arg, double *out);
int cli_opt_u64(const char *name, const char *arg, uint64_t *out);

/* --- routing -------------------------------------------------------------- */

/*
 * Load the lb-config at path (NULL: the permissive default) and make a
 * router over it with seed.  On success *conf and *rt are new (free the
 * router first: it borrows the config).  Returns 0, or a reported
 * EX_NOINPUT, EX_IOERR, EX_CONFIG (an invalid or oversized lb-config) or
 * EX_SOFTWARE.
 */
int cli_load_router(const char *path, uint64_t seed, sg_lbconf **conf,
    sg_router **rt);

/*
 * Replace snap with the snapshot file at path.  Returns 0, or a reported
 * exit code (EX_DATAERR: not a valid snapshot).
 */
int cli_load_snapshot(const char *path, sg_snapshot *snap);

/*
 * The decision d about req as the programs print it: sg_decision_to_json()
 * plus "elapsed_ms" (an integer when whole).  NULL when out of memory (not
 * reported).
 */
json_t *cli_decision_json(const sg_decision *d, const sg_request *req,
    double elapsed_ms);

/* --- output --------------------------------------------------------------- */

/*
 * Print obj as one compact JSON line on stdout, and flush it if asked.
 * Returns 0, or a reported EX_IOERR or EX_SOFTWARE.
 */
int cli_emit(const json_t *obj, bool flush);

#endif /* SG_BIN_CLI_H */
