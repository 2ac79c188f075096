/*
 * sg_common.h — error model and small helpers shared by every module.
 *
 * Error model: functions that can fail return int: 0 on success, a positive
 * errno for system failures, or a negative SG_E* code for library conditions.
 * Detail goes into a caller-owned sg_error (NULL means "don't care").  When a
 * failure maps onto an HTTP answer (a bad request header, an unknown routing
 * method) the sg_error also carries the status and the error class, so the
 * proxy and the CLI tools report the same thing.
 *
 * The library never prints, exits, reads the environment or touches the
 * network.
 */
#ifndef SG_COMMON_H
#define SG_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifndef SG_VERSION
#define SG_VERSION "0.1.0"
#endif

/* Library status codes (negative, never reused). */
enum {
	SG_OK = 0,
	SG_EINVAL = -30600,	/* bad input: JSON, header, value out of range */
	SG_ECONFIG = -30601,	/* bad configuration (lb-config, options) */
	SG_ENOMEM = -30602,	/* allocation failed */
	SG_ENOTFOUND = -30603,	/* "not found" is a status, not a failure */
	SG_EFULL = -30604,	/* store map full */
	SG_ESTORE = -30605,	/* store backend failure */
	SG_EIO = -30606,	/* I/O error */
	SG_ERANGE = -30607,	/* number out of range */
	SG_EREQUEST = -30608,	/* request refused with an HTTP status (see sg_error) */
};

/* Bounds on anything input can grow. */
#define SG_ID_MAX		256	/* cluster id bytes */
#define SG_PRIO_MAX		32	/* entries in queue_time_ms_by_priority */
#define SG_MAX_CANDIDATES	4096	/* clusters in one snapshot */
#define SG_MAX_EXCLUDED		4096	/* excluded cluster ids in a request */
#define SG_MAX_WAIT_CAP_MS	60000	/* routing wait cap (sg-proxy(8)) */
#define SG_MAX_RECORD		(4u << 20)	/* bytes per JSON/NDJSON record */

typedef struct sg_error {
	int	status;		/* HTTP status when the failure is a request error, else 0 */
	char	code[48];	/* error class ("malformed_expression", ...) or "" */
	char	text[256];	/* human message: no trailing newline or period */
} sg_error;

/* Static description of a status code. */
const char *sg_strerror(int rc);

/*
 * Record a failure in err (may be NULL) and return rc, so that callers can
 * write `return sg_seterr(err, SG_EINVAL, "field %s: ...", name);`.
 * sg_seterr_http() also sets the HTTP status and error class.
 */
int sg_seterr(sg_error *err, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int sg_seterr_http(sg_error *err, int rc, int status, const char *code,
    const char *fmt, ...) __attribute__((format(printf, 5, 6)));
void sg_error_clear(sg_error *err);

/*
 * One request header as the caller received it (both NUL-terminated), as
 * evhttp hands them over; the request and identity parsers read lists of
 * these.
 */
typedef struct sg_header {
	const char	*name;		/* compared case-insensitively */
	const char	*value;		/* raw, untrimmed */
} sg_header;

/* --- parsing helpers ------------------------------------------------------ */

/*
 * Strict base-10 unsigned integer: digits only (no sign, no space, no
 * empty string), value <= max.  Returns 0, SG_EINVAL or SG_ERANGE.
 */
int sg_parse_u64(const char *s, size_t len, uint64_t max, uint64_t *out);

/*
 * Go-style duration ("300ms", "10m", "1h30m", "1.5s", "20us", "0") to
 * nanoseconds.  Units: ns, us (also µs), ms, s, m, h.  A bare number other
 * than "0" is an error.  Returns 0, SG_EINVAL or SG_ERANGE.
 */
int sg_parse_duration(const char *s, uint64_t *ns);

/* Go strconv.ParseBool: 1 t T TRUE true True 0 f F FALSE false False. */
int sg_parse_bool(const char *s, bool *out);

/* True if s[0..len) is well-formed UTF-8 (no overlongs, no surrogates). */
bool sg_utf8_valid(const char *s, size_t len);

/* Trim ASCII white space (space, \t, \r, \n, \v, \f) on both ends, in place. */
void sg_trim(const char **s, size_t *len);

/* Lowercase hex of in[0..n) into out (2n characters plus a NUL). */
void sg_hex(char *out, const unsigned char *in, size_t n);

#endif /* SG_COMMON_H */
