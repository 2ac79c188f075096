/*
 * sg_log.h — structured logger: levelled logfmt records written through a
 * sink the program supplies.
 *
 * A record is one line:
 *
 *	ts=2026-12-01T09:42:36.123Z level=info msg="request routed" key=value
 *
 * ts is RFC 3339 UTC with milliseconds, from the unix time the caller
 * passes (the library reads no clock).  A value is written bare when it is
 * a non-empty run of printable bytes other than space, '=', '"' and '\';
 * otherwise it is quoted, with \" \\ \n \r \t and \u00XX (other control
 * bytes) escapes; bytes that are not UTF-8 become U+FFFD.  Keys are bare:
 * a byte that cannot appear in a bare key becomes '_'.
 *
 * Secrets.  sg_log_str/sg_log_strn write a field whose key names a secret
 * as key=[redacted].  A key names a secret when, lower-cased with '-' read
 * as '_', it equals or ends in "_" + one of: session_id, session,
 * cache_affinity_key, affinity_key, store_key, prompt, api_key,
 * authorization, messages, input, password, secret, cookie, token (so
 * x_api_key and upstream_authorization are secret, prompt_tokens is not).
 * The only way to log such a value is sg_log_hashed(): the first 16 hex
 * digits of its SHA-256.
 *
 * A record is built on the caller's stack (sg_log_rec) and bounded to
 * SG_LOG_LINE_MAX bytes including the newline: a field that does not fit
 * is cut and ends in "..." (inside its quotes when quoted), and later
 * fields are dropped.  When the record's level is disabled, every call on
 * it is a cheap no-op.  Loggers may be shared by threads: a record is
 * private to its builder and reaches the sink in one call.
 */
#ifndef SG_LOG_H
#define SG_LOG_H

#include "sg_common.h"

enum sg_log_level { SG_LOG_DEBUG, SG_LOG_INFO, SG_LOG_WARN, SG_LOG_ERROR };

#define SG_LOG_LINE_MAX	4096	/* bytes per record, newline included */

/*
 * The sink receives one complete record: line[0..len) ends in '\n' and
 * line[len] is '\0'.  level is the record's level.
 */
typedef void (*sg_log_sink)(void *ctx, int level, const char *line,
    size_t len);

typedef struct sg_logger sg_logger;

/* A logger writing records at level and above to sink.  SG_EINVAL for a
 * bad level or a NULL sink, SG_ENOMEM. */
int	sg_logger_new(sg_logger **out, int level, sg_log_sink sink, void *ctx,
	    sg_error *err);
void	sg_logger_free(sg_logger *lg);		/* NULL is a no-op */

/* Change the threshold (any thread; out-of-range levels are ignored). */
void	sg_logger_set_level(sg_logger *lg, int level);
bool	sg_log_enabled(const sg_logger *lg, int level);	/* false for NULL */

/* "debug", "info", "warn" (or "warning"), "error", any case: 0 and *level,
 * else SG_EINVAL. */
int	sg_log_level_parse(const char *s, int *level);
/* The name of a level ("info"), "unknown" when out of range. */
const char *sg_log_level_name(int level);

/* Fields of the record under construction; use only through sg_log_*. */
typedef struct sg_log_rec {
	sg_logger	*lg;
	int		 level;
	bool		 on;		/* level enabled */
	bool		 full;		/* truncated: later fields dropped */
	size_t		 len;
	char		 buf[SG_LOG_LINE_MAX + 1];
} sg_log_rec;

/* Start a record: ts (from unix_time_s; not finite or negative: the
 * epoch), level and msg (NULL: ""). lg NULL: a disabled record. */
void	sg_log_begin(sg_log_rec *r, sg_logger *lg, int level,
	    double unix_time_s, const char *msg);
/* String fields; NULL val writes key="". Secret keys write [redacted]. */
void	sg_log_str(sg_log_rec *r, const char *key, const char *val);
void	sg_log_strn(sg_log_rec *r, const char *key, const char *val,
	    size_t n);
void	sg_log_u64(sg_log_rec *r, const char *key, uint64_t v);
void	sg_log_i64(sg_log_rec *r, const char *key, int64_t v);
/* Shortest exact form, integers without exponent, NaN, +Inf, -Inf. */
void	sg_log_f64(sg_log_rec *r, const char *key, double v);
void	sg_log_bool(sg_log_rec *r, const char *key, bool v);
/* key=<first 16 hex digits of SHA-256(secret[0..n))>, for any key. */
void	sg_log_hashed(sg_log_rec *r, const char *key, const char *secret,
	    size_t n);
/* Finish the record and hand it to the sink (if enabled). */
void	sg_log_end(sg_log_rec *r);

/* True if key names a secret (see above). */
bool	sg_log_key_is_secret(const char *key);

#endif /* SG_LOG_H */
