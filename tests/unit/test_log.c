/*
 * test_log.c — sg_log.c: record layout and timestamps, logfmt quoting and
 * escaping, redaction of secret keys, hashed values, level filtering, and
 * the record bound (truncation that keeps the line well-formed).
 */
#include "sg_test.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "sg_log.h"

/* A bare msg this long leaves no room for one more key. */
#define LIMIT_FILL	4040

struct capture {
	int	 n;
	int	 level;
	size_t	 len;
	char	 line[SG_LOG_LINE_MAX + 1];
};

static void
capture_sink(void *ctx, int level, const char *line, size_t len)
{
	struct capture *c = ctx;

	assert_true(len <= SG_LOG_LINE_MAX);
	assert_int_equal(line[len], '\0');
	assert_int_equal(line[len - 1], '\n');
	c->n++;
	c->level = level;
	c->len = len;
	memcpy(c->line, line, len + 1);
}

static sg_logger *
logger(struct capture *c, int level)
{
	sg_logger *lg;
	sg_error e;

	memset(c, 0, sizeof(*c));
	assert_int_equal(sg_logger_new(&lg, level, capture_sink, c, &e), 0);
	return lg;
}

/* The line of a record with one string field. */
static const char *
one(sg_logger *lg, struct capture *c, const char *key, const char *val)
{
	sg_log_rec r;

	sg_log_begin(&r, lg, SG_LOG_INFO, 0, "m");
	sg_log_str(&r, key, val);
	sg_log_end(&r);
	/* Skip "ts=... level=info msg=m ". */
	return c->line + strlen("ts=1970-01-01T00:00:00.000Z level=info "
	    "msg=m ");
}

static void
test_record_layout_and_timestamp(void **state)
{
	struct capture c;
	sg_logger *lg = logger(&c, SG_LOG_DEBUG);
	sg_log_rec r;

	(void)state;
	sg_log_begin(&r, lg, SG_LOG_WARN, 1700000000.5, "request routed");
	sg_log_str(&r, "cluster", "c-1");
	sg_log_u64(&r, "tokens", UINT64_MAX);
	sg_log_i64(&r, "delta", INT64_MIN);
	sg_log_f64(&r, "wait_ms", 12.25);
	sg_log_f64(&r, "n", 1e6);
	sg_log_f64(&r, "nan", NAN);
	sg_log_f64(&r, "inf", -INFINITY);
	sg_log_bool(&r, "retry", true);
	sg_log_bool(&r, "cached", false);
	sg_log_end(&r);
	assert_int_equal(c.n, 1);
	assert_int_equal(c.level, SG_LOG_WARN);
	assert_string_equal(c.line,
	    "ts=2023-11-14T22:13:20.500Z level=warn msg=\"request routed\" "
	    "cluster=c-1 tokens=18446744073709551615 "
	    "delta=-9223372036854775808 wait_ms=12.25 n=1000000 nan=NaN "
	    "inf=-Inf retry=true cached=false\n");
	assert_int_equal(c.len, strlen(c.line));
	/* Milliseconds are truncated, not rounded; bad times are the epoch. */
	sg_log_begin(&r, lg, SG_LOG_ERROR, 1.9996, NULL);
	sg_log_end(&r);
	assert_string_equal(c.line,
	    "ts=1970-01-01T00:00:01.999Z level=error msg=\"\"\n");
	sg_log_begin(&r, lg, SG_LOG_DEBUG, NAN, "x");
	sg_log_end(&r);
	assert_string_equal(c.line,
	    "ts=1970-01-01T00:00:00.000Z level=debug msg=x\n");
	sg_log_begin(&r, lg, SG_LOG_INFO, -5, "x");
	sg_log_end(&r);
	assert_non_null(strstr(c.line, "ts=1970-01-01T00:00:00.000Z"));
	sg_log_begin(&r, lg, SG_LOG_INFO, 951782400.042, "x");	/* leap day */
	sg_log_end(&r);
	assert_non_null(strstr(c.line, "ts=2000-02-29T00:00:00.042Z"));
	sg_log_end(&r);				/* ended: no second line */
	assert_int_equal(c.n, 5);
	sg_logger_free(lg);
}

static void
test_logfmt_quoting(void **state)
{
	static const struct {
		const char *in, *out;
	} cases[] = {
		{ "plain", "k=plain\n" },
		{ "", "k=\"\"\n" },
		{ "a b", "k=\"a b\"\n" },
		{ "a=b", "k=\"a=b\"\n" },
		{ "say \"hi\"", "k=\"say \\\"hi\\\"\"\n" },
		{ "back\\slash", "k=\"back\\\\slash\"\n" },
		{ "l1\nl2\r\t", "k=\"l1\\nl2\\r\\t\"\n" },
		{ "\x01\x7f", "k=\"\\u0001\\u007f\"\n" },
		{ "caf\xc3\xa9", "k=caf\xc3\xa9\n" },
		{ "bad\xff", "k=\"bad\xef\xbf\xbd\"\n" },
		{ "\xc3", "k=\"\xef\xbf\xbd\"\n" },
		{ "http://h:1/p?q=1", "k=\"http://h:1/p?q=1\"\n" },
		{ "[x]", "k=[x]\n" },
	};
	struct capture c;
	sg_logger *lg = logger(&c, SG_LOG_INFO);
	sg_log_rec r;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		assert_string_equal(one(lg, &c, "k", cases[i].in),
		    cases[i].out);
	assert_string_equal(one(lg, &c, "k", NULL), "k=\"\"\n");
	/* Keys are bare: bad bytes become '_', an empty key is "_". */
	assert_string_equal(one(lg, &c, "a key=\"x\"", "v"),
	    "a_key__x_=v\n");
	assert_string_equal(one(lg, &c, "", "v"), "_=v\n");
	assert_string_equal(one(lg, &c, NULL, "v"), "_=v\n");
	/* strn takes bytes, NUL included. */
	sg_log_begin(&r, lg, SG_LOG_INFO, 0, "m");
	sg_log_strn(&r, "k", "ab\0cd", 5);
	sg_log_strn(&r, "j", "abcdef", 3);
	sg_log_end(&r);
	assert_non_null(strstr(c.line, " k=\"ab\\u0000cd\" j=abc\n"));
	sg_logger_free(lg);
}

static void
test_secret_keys_are_redacted(void **state)
{
	static const char *const secret[] = { "session_id", "Session-Id",
	    "x-session-id", "cache_affinity_key", "affinity_key", "store_key",
	    "prompt", "api_key", "X-API-Key", "authorization",
	    "upstream_authorization", "messages", "input", "password",
	    "token", "session", "cookie", NULL };
	static const char *const plain[] = { "prompt_tokens", "input_tokens",
	    "cluster", "sessions_active", "model", "tokens", "inputs",
	    "keysession_id", NULL };
	struct capture c;
	sg_logger *lg = logger(&c, SG_LOG_INFO);
	char want[128];
	size_t i;

	(void)state;
	for (i = 0; secret[i] != NULL; i++) {
		assert_true(sg_log_key_is_secret(secret[i]));
		snprintf(want, sizeof(want), "%s=[redacted]\n", secret[i]);
		for (char *p = want; *p != '='; p++)
			if (*p == ' ')
				*p = '_';
		assert_string_equal(one(lg, &c, secret[i], "sk-SECRET"),
		    want);
		assert_null(strstr(c.line, "SECRET"));
	}
	for (i = 0; plain[i] != NULL; i++) {
		assert_false(sg_log_key_is_secret(plain[i]));
		snprintf(want, sizeof(want), "%s=v\n", plain[i]);
		assert_string_equal(one(lg, &c, plain[i], "v"), want);
	}
	assert_false(sg_log_key_is_secret(NULL));
	/* A long key is judged by its end. */
	memset(want, 'a', 100);
	memcpy(want + 100, "_api_key", 9);
	assert_true(sg_log_key_is_secret(want));
	sg_logger_free(lg);
}

static void
test_hashed_values(void **state)
{
	struct capture c;
	sg_logger *lg = logger(&c, SG_LOG_INFO);
	sg_log_rec r;

	(void)state;
	sg_log_begin(&r, lg, SG_LOG_INFO, 0, "m");
	sg_log_hashed(&r, "session_id", "abc", 3);
	sg_log_hashed(&r, "empty", NULL, 5);
	sg_log_end(&r);
	/* SHA-256("abc") = ba7816bf8f01cfea..., SHA-256("") = e3b0c442... */
	assert_non_null(strstr(c.line,
	    " session_id=ba7816bf8f01cfea empty=e3b0c44298fc1c14\n"));
	sg_logger_free(lg);
}

static void
test_level_filtering(void **state)
{
	struct capture c;
	sg_logger *lg = logger(&c, SG_LOG_WARN);
	sg_log_rec r;
	int lv;

	(void)state;
	assert_false(sg_log_enabled(lg, SG_LOG_INFO));
	assert_true(sg_log_enabled(lg, SG_LOG_WARN));
	assert_true(sg_log_enabled(lg, SG_LOG_ERROR));
	assert_false(sg_log_enabled(lg, 99));
	assert_false(sg_log_enabled(NULL, SG_LOG_ERROR));
	sg_log_begin(&r, lg, SG_LOG_INFO, 0, "dropped");
	sg_log_str(&r, "k", "v");
	sg_log_u64(&r, "n", 1);
	sg_log_hashed(&r, "h", "x", 1);
	sg_log_end(&r);
	assert_int_equal(c.n, 0);
	assert_int_equal(r.len, 0);		/* nothing was formatted */
	sg_logger_set_level(lg, SG_LOG_DEBUG);
	sg_logger_set_level(lg, 42);		/* ignored */
	sg_log_begin(&r, lg, SG_LOG_DEBUG, 0, "kept");
	sg_log_end(&r);
	assert_int_equal(c.n, 1);
	sg_log_begin(&r, NULL, SG_LOG_ERROR, 0, "no logger");
	sg_log_str(&r, "k", "v");
	sg_log_end(&r);
	sg_log_begin(&r, lg, -1, 0, "bad level");
	sg_log_end(&r);
	assert_int_equal(c.n, 1);
	assert_int_equal(sg_log_level_parse("debug", &lv), 0);
	assert_int_equal(lv, SG_LOG_DEBUG);
	assert_int_equal(sg_log_level_parse("INFO", &lv), 0);
	assert_int_equal(lv, SG_LOG_INFO);
	assert_int_equal(sg_log_level_parse("warning", &lv), 0);
	assert_int_equal(lv, SG_LOG_WARN);
	assert_int_equal(sg_log_level_parse("error", &lv), 0);
	assert_int_equal(lv, SG_LOG_ERROR);
	assert_int_equal(sg_log_level_parse("trace", &lv), SG_EINVAL);
	assert_int_equal(sg_log_level_parse(NULL, &lv), SG_EINVAL);
	assert_string_equal(sg_log_level_name(SG_LOG_WARN), "warn");
	assert_string_equal(sg_log_level_name(9), "unknown");
	sg_logger_free(lg);
}

static void
test_logger_arguments(void **state)
{
	sg_logger *lg;
	sg_error e;

	(void)state;
	assert_int_equal(sg_logger_new(&lg, SG_LOG_INFO, NULL, NULL, &e),
	    SG_EINVAL);
	assert_null(lg);
	assert_int_equal(sg_logger_new(&lg, 7, capture_sink, NULL, &e),
	    SG_EINVAL);
	sg_logger_free(NULL);
}

static void
test_truncation_keeps_the_line_well_formed(void **state)
{
	static char big[3 * SG_LOG_LINE_MAX];
	struct capture c;
	sg_logger *lg = logger(&c, SG_LOG_INFO);
	sg_log_rec r;
	size_t i;

	(void)state;
	/* A bare value is cut with "...", later fields are dropped. */
	memset(big, 'x', 5000);
	big[5000] = '\0';
	sg_log_begin(&r, lg, SG_LOG_INFO, 0, big);
	sg_log_str(&r, "after", "gone");
	sg_log_end(&r);
	assert_true(c.len <= SG_LOG_LINE_MAX && c.len > SG_LOG_LINE_MAX - 8);
	assert_string_equal(c.line + c.len - 5, "x...\n");
	assert_null(strstr(c.line, "after"));
	/* A quoted value closes its quotes. */
	memset(big, ' ', 5000);
	sg_log_begin(&r, lg, SG_LOG_INFO, 0, "m");
	sg_log_str(&r, "k", big);
	sg_log_end(&r);
	assert_true(c.len <= SG_LOG_LINE_MAX && c.len > SG_LOG_LINE_MAX - 8);
	assert_string_equal(c.line + c.len - 6, " ...\"\n");
	/* Multi-byte characters are never split. */
	for (i = 0; i + 2 <= 5000; i += 2)
		memcpy(big + i, "\xc3\xa9", 2);
	big[i] = '\0';
	sg_log_begin(&r, lg, SG_LOG_INFO, 0, "m");
	sg_log_str(&r, "k", "a");
	sg_log_str(&r, "e", big);
	sg_log_end(&r);
	assert_true(c.len <= SG_LOG_LINE_MAX);
	assert_true(sg_utf8_valid(c.line, c.len));
	assert_string_equal(c.line + c.len - 4, "...\n");
	/* A key that no longer fits ends the record with " ...". */
	memset(big, 'y', LIMIT_FILL);
	big[LIMIT_FILL] = '\0';
	sg_log_begin(&r, lg, SG_LOG_INFO, 0, big);
	sg_log_str(&r, "a_rather_long_key_name", "v");
	sg_log_u64(&r, "n", 1);
	sg_log_end(&r);
	assert_true(c.len <= SG_LOG_LINE_MAX);
	assert_string_equal(c.line + c.len - 5, " ...\n");
	assert_null(strstr(c.line, "a_rather"));
	sg_logger_free(lg);
}

/* Every fill level near the bound, with bare, quoted and key overflows. */
static void
test_bound_sweep(void **state)
{
	static char big[SG_LOG_LINE_MAX + 1];
	struct capture c;
	sg_logger *lg = logger(&c, SG_LOG_INFO);
	sg_log_rec r;
	size_t l;
	int kind;

	(void)state;
	for (kind = 0; kind < 3; kind++)
		for (l = SG_LOG_LINE_MAX - 120; l <= SG_LOG_LINE_MAX; l++) {
			memset(big, kind == 1 ? ' ' : 'z', l);
			big[l - 60] = '\0';
			sg_log_begin(&r, lg, SG_LOG_INFO, 0, big);
			big[l - 60] = kind == 1 ? ' ' : 'z';
			big[l] = '\0';
			sg_log_str(&r, "k", kind == 2 ? "a\"b" : "v");
			sg_log_str(&r, "longer_key", big + (l - 60));
			sg_log_str(&r, "q", "x y");
			sg_log_u64(&r, "n", l);
			sg_log_end(&r);
			assert_true(c.len <= SG_LOG_LINE_MAX);
			assert_true(c.len > SG_LOG_LINE_MAX - 140);
		}
	sg_logger_free(lg);
}

static void
test_random_values_stay_bounded_and_valid(void **state)
{
	static char v[6000];
	struct capture c;
	sg_logger *lg = logger(&c, SG_LOG_INFO);
	sg_log_rec r;
	unsigned seed = 12345;
	size_t i, n, k;
	int round;

	(void)state;
	for (round = 0; round < 300; round++) {
		sg_log_begin(&r, lg, SG_LOG_INFO, round, "fuzz");
		for (k = 0; k < 4; k++) {
			n = (size_t)(rand_r(&seed) % 2000);
			for (i = 0; i < n; i++)
				v[i] = (char)(rand_r(&seed) & 0xff);
			sg_log_strn(&r, "v", v, n);
		}
		sg_log_end(&r);
		assert_true(c.len <= SG_LOG_LINE_MAX);
		assert_true(sg_utf8_valid(c.line, c.len));
		assert_ptr_equal(memchr(c.line, '\n', c.len),
		    c.line + c.len - 1);
		assert_null(memchr(c.line, '\0', c.len));
	}
	sg_logger_free(lg);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_record_layout_and_timestamp),
		cmocka_unit_test(test_logfmt_quoting),
		cmocka_unit_test(test_secret_keys_are_redacted),
		cmocka_unit_test(test_hashed_values),
		cmocka_unit_test(test_level_filtering),
		cmocka_unit_test(test_logger_arguments),
		cmocka_unit_test(test_truncation_keeps_the_line_well_formed),
		cmocka_unit_test(test_bound_sweep),
		cmocka_unit_test(test_random_values_stay_bounded_and_valid),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
