/*
 * sg_log.c — logfmt records with redaction of secret fields (see sg_log.h).
 *
 * A record is assembled in the caller's sg_log_rec: "ts=... level=...",
 * then " key=value" per field.  Invariant: between appends, RESERVE bytes
 * stay free below LIMIT, enough for any truncation marker (" ...", "...",
 * `..."`) plus a quoted value's closing quote.  Every append checks that
 * the invariant holds after it (counting the closing quote still owed), so
 * a record that runs out of space can always end in a marker plus the
 * newline: the line stays well-formed logfmt and valid UTF-8 (values are
 * cut only between characters).  After a truncation later fields are
 * dropped.
 *
 * SHA-256 is sg_sha256() (sg_sha256.h), the library's one implementation,
 * as in sg_identity.c: the same digests as any other SHA-256.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "sg_log.h"
#include "sg_metrics.h"
#include "sg_sha256.h"

#define LIMIT		(SG_LOG_LINE_MAX - 1)	/* bytes before the '\n' */
#define RESERVE		5	/* a marker (<= 4) + a closing quote */
#define KEY_TAIL	64	/* bytes of a key the secret check reads */
#define HASH_HEX	16
#define MAX_UNIX_S	253402300799.0	/* 9999-12-31T23:59:59Z */

struct sg_logger {
	atomic_int	 level;
	sg_log_sink	 sink;
	void		*ctx;
};

static const char *const level_names[] = {
	[SG_LOG_DEBUG] = "debug",
	[SG_LOG_INFO] = "info",
	[SG_LOG_WARN] = "warn",
	[SG_LOG_ERROR] = "error",
};

/* Keys whose values are never logged in the clear. */
static const char *const secret_keys[] = {
	"session_id", "session", "cache_affinity_key", "affinity_key",
	"store_key", "prompt", "api_key", "authorization", "messages",
	"input", "password", "secret", "cookie", "token",
};

static bool
valid_level(int level)
{
	return level >= SG_LOG_DEBUG && level <= SG_LOG_ERROR;
}

int
sg_logger_new(sg_logger **out, int level, sg_log_sink sink, void *ctx,
    sg_error *err)
{
	sg_logger *lg;

	*out = NULL;
	if (!valid_level(level) || sink == NULL)
		return sg_seterr(err, SG_EINVAL, "logger: bad level or sink");
	if ((lg = calloc(1, sizeof(*lg))) == NULL)
		return sg_seterr(err, SG_ENOMEM, "logger: out of memory");
	atomic_init(&lg->level, level);
	lg->sink = sink;
	lg->ctx = ctx;
	*out = lg;
	return 0;
}

void
sg_logger_free(sg_logger *lg)
{
	free(lg);
}

void
sg_logger_set_level(sg_logger *lg, int level)
{
	if (lg != NULL && valid_level(level))
		atomic_store_explicit(&lg->level, level, memory_order_relaxed);
}

bool
sg_log_enabled(const sg_logger *lg, int level)
{
	return lg != NULL && valid_level(level) &&
	    level >= atomic_load_explicit(&((sg_logger *)(uintptr_t)lg)->level,
	    memory_order_relaxed);
}

int
sg_log_level_parse(const char *s, int *level)
{
	size_t i;

	if (s == NULL)
		return SG_EINVAL;
	for (i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++)
		if (strcasecmp(s, level_names[i]) == 0) {
			*level = (int)i;
			return 0;
		}
	if (strcasecmp(s, "warning") == 0) {
		*level = SG_LOG_WARN;
		return 0;
	}
	return SG_EINVAL;
}

const char *
sg_log_level_name(int level)
{
	return valid_level(level) ? level_names[level] : "unknown";
}

bool
sg_log_key_is_secret(const char *key)
{
	char tail[KEY_TAIL + 1];
	size_t len, tl, i, wl;

	if (key == NULL)
		return false;
	len = strlen(key);
	tl = len > KEY_TAIL ? KEY_TAIL : len;
	for (i = 0; i < tl; i++) {
		char c = key[len - tl + i];

		if (c >= 'A' && c <= 'Z')
			c = (char)(c - 'A' + 'a');
		tail[i] = c == '-' ? '_' : c;
	}
	tail[tl] = '\0';
	for (i = 0; i < sizeof(secret_keys) / sizeof(secret_keys[0]); i++) {
		wl = strlen(secret_keys[i]);
		if (len == wl && strcmp(tail, secret_keys[i]) == 0)
			return true;
		if (tl > wl && tail[tl - wl - 1] == '_' &&
		    memcmp(tail + tl - wl, secret_keys[i], wl) == 0)
			return true;
	}
	return false;
}

/* --- record buffer ------------------------------------------------------ */

/* True if n more bytes fit and still leave RESERVE free. */
static bool
room(const sg_log_rec *r, size_t n)
{
	return r->len + n + RESERVE <= LIMIT;
}

static void
put(sg_log_rec *r, const char *p, size_t n)
{
	memcpy(r->buf + r->len, p, n);
	r->len += n;
}

/* End the record here with a truncation marker. */
static void
cut(sg_log_rec *r, const char *marker)
{
	put(r, marker, strlen(marker));
	r->full = true;
}

static bool
bare_key_byte(unsigned char c)
{
	return c > ' ' && c < 0x7f && c != '=' && c != '"' && c != '\\';
}

/* " key=" — false (record cut) when it does not fit. */
static bool
put_key(sg_log_rec *r, const char *key)
{
	size_t i, n;

	if (key == NULL || key[0] == '\0')
		key = "_";
	n = strlen(key);
	if (!room(r, n + 3)) {		/* " key=" and maybe a '"' */
		cut(r, " ...");
		return false;
	}
	put(r, " ", 1);
	for (i = 0; i < n; i++)
		r->buf[r->len++] = bare_key_byte((unsigned char)key[i]) ?
		    key[i] : '_';
	put(r, "=", 1);
	return true;
}

/* Length of the UTF-8 character at s[0..n), 0 if it is not valid. */
static size_t
utf8_char(const char *s, size_t n)
{
	unsigned char c = (unsigned char)s[0];
	size_t l;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		l = 2;
	else if (c >= 0xe0 && c <= 0xef)
		l = 3;
	else if (c >= 0xf0 && c <= 0xf4)
		l = 4;
	else
		return 0;
	return l <= n && sg_utf8_valid(s, l) ? l : 0;
}

static bool
needs_quotes(const char *s, size_t n)
{
	size_t i;

	if (n == 0)
		return true;
	for (i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c <= ' ' || c == 0x7f || c == '=' || c == '"' || c == '\\')
			return true;
	}
	return !sg_utf8_valid(s, n);
}

/* The quoted form of the character at s (*used bytes of it) into out. */
static size_t
escape_char(const char *s, size_t n, char out[8], size_t *used)
{
	unsigned char c = (unsigned char)s[0];
	size_t l;

	*used = 1;
	switch (c) {
	case '"':	memcpy(out, "\\\"", 2); return 2;
	case '\\':	memcpy(out, "\\\\", 2); return 2;
	case '\n':	memcpy(out, "\\n", 2); return 2;
	case '\r':	memcpy(out, "\\r", 2); return 2;
	case '\t':	memcpy(out, "\\t", 2); return 2;
	}
	if (c < 0x20 || c == 0x7f)
		return (size_t)snprintf(out, 8, "\\u%04x", c);
	if ((l = utf8_char(s, n)) == 0) {
		memcpy(out, "\xef\xbf\xbd", 3);	/* U+FFFD */
		return 3;
	}
	memcpy(out, s, l);
	*used = l;
	return l;
}

static void
put_value(sg_log_rec *r, const char *s, size_t n)
{
	bool q = needs_quotes(s, n);
	size_t i = 0, used, k;
	char enc[8];

	if (q)
		put(r, "\"", 1);
	while (i < n) {
		k = escape_char(s + i, n - i, enc, &used);
		if (!q)		/* bare values are valid UTF-8 already */
			k = used;
		if (!room(r, k + q)) {	/* q: the closing quote */
			cut(r, q ? "...\"" : "...");
			return;
		}
		put(r, q ? enc : s + i, k);
		i += used;
	}
	if (q)
		put(r, "\"", 1);
}

/* One field (numbers, hashes and [redacted] always come out bare). */
static void
field(sg_log_rec *r, const char *key, const char *val, size_t n)
{
	if (!r->on || r->full || !put_key(r, key))
		return;
	put_value(r, val, n);
}

/* --- public ------------------------------------------------------------- */

static void
put_ts(sg_log_rec *r, double t)
{
	struct tm tm;
	time_t secs;
	int64_t ms;
	int n;

	if (!isfinite(t) || t < 0)
		t = 0;
	if (t > MAX_UNIX_S)
		t = MAX_UNIX_S;
	ms = (int64_t)floor(t * 1000.0);
	secs = (time_t)(ms / 1000);
	if (gmtime_r(&secs, &tm) == NULL)
		memset(&tm, 0, sizeof(tm));
	n = snprintf(r->buf + r->len, LIMIT - r->len,
	    "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03dZ level=%s",
	    tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
	    tm.tm_min, tm.tm_sec, (int)(ms % 1000), level_names[r->level]);
	if (n > 0)
		r->len += (size_t)n;
}

void
sg_log_begin(sg_log_rec *r, sg_logger *lg, int level, double unix_time_s,
    const char *msg)
{
	r->lg = lg;
	r->level = level;
	r->full = false;
	r->len = 0;
	r->on = sg_log_enabled(lg, level);
	if (!r->on)
		return;
	put_ts(r, unix_time_s);
	if (msg == NULL)
		msg = "";
	field(r, "msg", msg, strlen(msg));
}

void
sg_log_strn(sg_log_rec *r, const char *key, const char *val, size_t n)
{
	if (!r->on)
		return;
	if (sg_log_key_is_secret(key)) {
		field(r, key, "[redacted]", 10);
		return;
	}
	if (val == NULL)
		n = 0;
	field(r, key, val == NULL ? "" : val, n);
}

void
sg_log_str(sg_log_rec *r, const char *key, const char *val)
{
	if (r->on)
		sg_log_strn(r, key, val, val == NULL ? 0 : strlen(val));
}

void
sg_log_u64(sg_log_rec *r, const char *key, uint64_t v)
{
	char b[24];
	int n;

	if (!r->on)
		return;
	n = snprintf(b, sizeof(b), "%llu", (unsigned long long)v);
	field(r, key, b, (size_t)n);
}

void
sg_log_i64(sg_log_rec *r, const char *key, int64_t v)
{
	char b[24];
	int n;

	if (!r->on)
		return;
	n = snprintf(b, sizeof(b), "%lld", (long long)v);
	field(r, key, b, (size_t)n);
}

void
sg_log_f64(sg_log_rec *r, const char *key, double v)
{
	char b[40];
	size_t n;

	if (!r->on)
		return;
	n = sg_metrics_fmt_double(b, sizeof(b), v);
	field(r, key, b, n);
}

void
sg_log_bool(sg_log_rec *r, const char *key, bool v)
{
	if (r->on)
		field(r, key, v ? "true" : "false", v ? 4 : 5);
}

void
sg_log_hashed(sg_log_rec *r, const char *key, const char *secret, size_t n)
{
	unsigned char h[SG_SHA256_BYTES];
	char hex[HASH_HEX + 1];

	if (!r->on)
		return;
	if (secret == NULL)
		n = 0;
	sg_sha256(h, secret == NULL ? "" : secret, n);
	sg_hex(hex, h, HASH_HEX / 2);
	field(r, key, hex, HASH_HEX);
}

void
sg_log_end(sg_log_rec *r)
{
	if (!r->on)
		return;
	r->buf[r->len++] = '\n';
	r->buf[r->len] = '\0';
	r->on = false;
	r->lg->sink(r->lg->ctx, r->level, r->buf, r->len);
}
