/*
 * test_lckey.c — sg_lckey.c: last-cluster store keys (sg-lastcluster(1)) and
 * cluster id validation.  Expected keys are computed independently, at
 * test time, by sha256sum(1) over the length-prefixed message built with
 * printf(1) octal escapes; the test never uses libsodium itself.
 */
#include "sg_test.h"

#include <stdio.h>
#include <stdlib.h>

#include "sg_store.h"

/* Append "\ooo" escapes for len bytes of s to the printf format in fmt. */
static size_t
esc(char *fmt, size_t at, const unsigned char *s, size_t len)
{
	size_t i;

	for (i = 0; i < len; i++)
		at += (size_t)sprintf(fmt + at, "\\%03o", s[i]);
	return at;
}

static size_t
esc_field(char *fmt, size_t at, const char *s, size_t len)
{
	unsigned char be[8];
	uint64_t n = len;
	int i;

	for (i = 7; i >= 0; i--) {
		be[i] = (unsigned char)(n & 0xff);
		n >>= 8;
	}
	at = esc(fmt, at, be, 8);
	return esc(fmt, at, (const unsigned char *)s, len);
}

/* "lc:v1:" + sha256sum of u64be(len)||field for the three fields. */
static void
expected_key(char out[SG_LC_KEY_LEN + 1], const char *rk, size_t rkl,
    const char *m, size_t ml, const char *ak, size_t akl)
{
	size_t cap = 64 + 4 * (24 + rkl + ml + akl), at;
	char *cmd = malloc(cap), hex[65];
	FILE *p;

	assert_non_null(cmd);
	at = (size_t)sprintf(cmd, "printf '");
	at = esc_field(cmd, at, rk, rkl);
	at = esc_field(cmd, at, m, ml);
	at = esc_field(cmd, at, ak, akl);
	sprintf(cmd + at, "' | sha256sum");
	p = popen(cmd, "r");
	assert_non_null(p);
	assert_int_equal(fscanf(p, "%64s", hex), 1);
	assert_int_equal(pclose(p), 0);
	free(cmd);
	assert_int_equal(strlen(hex), 64);
	snprintf(out, SG_LC_KEY_LEN + 1, "lc:v1:%s", hex);
}

/* sg_lc_key_digest() is the 32 bytes the key's hex spells. */
static void
check_digest(const char *want, const char *rk, size_t rkl, const char *m,
    size_t ml, const char *ak, size_t akl)
{
	static const char hx[] = "0123456789abcdef";
	unsigned char d[SG_LC_DIGEST_LEN];
	char hex[2 * SG_LC_DIGEST_LEN + 1];
	size_t i;

	assert_int_equal(sg_lc_key_digest(d, rk, rkl, m, ml, ak, akl), 0);
	for (i = 0; i < SG_LC_DIGEST_LEN; i++) {
		hex[2 * i] = hx[d[i] >> 4];
		hex[2 * i + 1] = hx[d[i] & 15];
	}
	hex[2 * SG_LC_DIGEST_LEN] = '\0';
	assert_string_equal(hex, want + strlen(SG_LC_KEY_PREFIX));
}

static void
check(const char *rk, size_t rkl, const char *m, size_t ml, const char *ak,
    size_t akl)
{
	char want[SG_LC_KEY_LEN + 1], got[SG_LC_KEY_LEN + 1];

	expected_key(want, rk, rkl, m, ml, ak, akl);
	memset(got, 'x', sizeof(got));
	assert_int_equal(sg_lc_key(got, rk, rkl, m, ml, ak, akl), 0);
	assert_string_equal(got, want);
	assert_true(sg_lc_key_valid(got, strlen(got)));
	check_digest(want, rk, rkl, m, ml, ak, akl);
}

/* A field of n bytes, 'a' + i % 26. */
static char *
field(size_t n)
{
	char *f = malloc(n + 1);
	size_t i;

	assert_non_null(f);
	for (i = 0; i < n; i++)
		f[i] = (char)('a' + i % 26);
	f[n] = '\0';
	return f;
}

/*
 * sg_lc_key() hashes short fields from one buffer (256 bytes with the
 * three length prefixes) and longer ones field by field: both sides of
 * the bound, in every field, against sha256sum(1), and sg_lc_key_digest()
 * spelling the same key.
 */
static void
test_key_short_and_long_fields_match_sha256sum_and_the_digest(void **state)
{
	static const size_t n[] = { 0, 1, 100, 231, 232, 233, 255, 256, 300 };
	char *f[sizeof(n) / sizeof(n[0])];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(n) / sizeof(n[0]); i++)
		f[i] = field(n[i]);
	for (i = 0; i < sizeof(n) / sizeof(n[0]); i++) {
		check(f[i], n[i], "m", 1, "k", 1);
		check("r", 1, f[i], n[i], "", 0);
		check("", 0, "m", 1, f[i], n[i]);
	}
	/* 24 + 232 = 256 bytes: the buffer's last fit; 233: past it */
	check(f[3], n[3], "", 0, "k", 1);
	check(f[4], n[4], "", 0, "", 0);
	check(f[5], n[5], "", 0, "", 0);
	check(f[2], n[2], f[2], n[2], "abcdefghijklmnopqrstuvwxyzabcdef", 32);
	check(f[2], n[2], f[2], n[2], "abcdefghijklmnopqrstuvwxyzabcdefg", 33);
	for (i = 0; i < sizeof(n) / sizeof(n[0]); i++)
		free(f[i]);
}

static void
test_key_matches_sha256sum_of_length_prefixed_fields(void **state)
{
	static const char utf8[] = "sess-\xc3\xa9\xe2\x82\xac";	/* é€ */
	static const char nul[] = { 'a', '\0', 'b' };

	(void)state;
	check("fn-123", 6, "llama-3-70b", 11, "conv-42", 7);
	check("", 0, "m", 1, "sess", 4);
	check("tenant", 6, "model", 5, utf8, sizeof(utf8) - 1);
	check("rk", 2, "model", 5, nul, sizeof(nul));
	check("", 0, "", 0, "", 0);
}

static void
test_key_absent_routing_key_is_empty_string(void **state)
{
	char a[SG_LC_KEY_LEN + 1], b[SG_LC_KEY_LEN + 1];

	(void)state;
	assert_int_equal(sg_lc_key(a, NULL, 0, "m", 1, "k", 1), 0);
	assert_int_equal(sg_lc_key(b, "", 0, "m", 1, "k", 1), 0);
	assert_string_equal(a, b);
}

static void
test_key_length_prefix_separates_fields(void **state)
{
	char a[SG_LC_KEY_LEN + 1], b[SG_LC_KEY_LEN + 1];

	(void)state;
	/* Same concatenation "abc", different split: different keys. */
	assert_int_equal(sg_lc_key(a, "ab", 2, "c", 1, "", 0), 0);
	assert_int_equal(sg_lc_key(b, "a", 1, "bc", 2, "", 0), 0);
	assert_string_not_equal(a, b);
	check("ab", 2, "c", 1, "", 0);
	check("a", 1, "bc", 2, "", 0);
}

static void
test_key_refuses_null_with_length(void **state)
{
	char k[SG_LC_KEY_LEN + 1];

	(void)state;
	assert_int_equal(sg_lc_key(k, NULL, 1, "m", 1, "k", 1), SG_EINVAL);
	assert_int_equal(sg_lc_key(k, "r", 1, NULL, 1, "k", 1), SG_EINVAL);
	assert_int_equal(sg_lc_key(k, "r", 1, "m", 1, NULL, 1), SG_EINVAL);
	assert_int_equal(sg_lc_key(NULL, "r", 1, "m", 1, "k", 1), SG_EINVAL);
	assert_int_equal(sg_lc_key_digest(NULL, "r", 1, "m", 1, "k", 1),
	    SG_EINVAL);
	assert_int_equal(sg_lc_key_digest((unsigned char *)k, "r", 1, NULL, 1,
	    "k", 1), SG_EINVAL);
}

static void
test_key_valid_syntax(void **state)
{
	char k[SG_LC_KEY_LEN + 1];

	(void)state;
	assert_int_equal(sg_lc_key(k, "r", 1, "m", 1, "a", 1), 0);
	assert_true(sg_lc_key_valid(k, SG_LC_KEY_LEN));
	assert_false(sg_lc_key_valid(k, SG_LC_KEY_LEN - 1));
	k[10] = 'A';	/* uppercase hex is not ours */
	assert_false(sg_lc_key_valid(k, SG_LC_KEY_LEN));
	k[10] = 'g';
	assert_false(sg_lc_key_valid(k, SG_LC_KEY_LEN));
	assert_int_equal(sg_lc_key(k, "r", 1, "m", 1, "a", 1), 0);
	k[3] = '2';	/* lc:v2: */
	assert_false(sg_lc_key_valid(k, SG_LC_KEY_LEN));
	assert_false(sg_lc_key_valid(NULL, 0));
	assert_false(sg_lc_key_valid("lc:v1:", 6));
}

static void
test_cluster_id_valid_printable_ascii_1_to_256(void **state)
{
	char id[300];

	(void)state;
	assert_true(sg_lc_cluster_id_valid("a", 1));
	assert_true(sg_lc_cluster_id_valid(" ~", 2));	/* 0x20 and 0x7e */
	memset(id, 'x', sizeof(id));
	assert_true(sg_lc_cluster_id_valid(id, 256));
	assert_false(sg_lc_cluster_id_valid(id, 257));
	assert_false(sg_lc_cluster_id_valid(id, 0));
	assert_false(sg_lc_cluster_id_valid(NULL, 0));
	assert_false(sg_lc_cluster_id_valid("a\x1f", 2));
	assert_false(sg_lc_cluster_id_valid("a\x7f", 2));
	assert_false(sg_lc_cluster_id_valid("a\n", 2));
	assert_false(sg_lc_cluster_id_valid("a\0b", 3));
	assert_false(sg_lc_cluster_id_valid("\xc3\xa9", 2));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_key_matches_sha256sum_of_length_prefixed_fields),
		cmocka_unit_test(test_key_absent_routing_key_is_empty_string),
		cmocka_unit_test(
		    test_key_short_and_long_fields_match_sha256sum_and_the_digest),
		cmocka_unit_test(test_key_length_prefix_separates_fields),
		cmocka_unit_test(test_key_refuses_null_with_length),
		cmocka_unit_test(test_key_valid_syntax),
		cmocka_unit_test(test_cluster_id_valid_printable_ascii_1_to_256),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
