/*
 * test_util.c — sg_util.c: strict numbers, durations, booleans, UTF-8,
 * trimming, hex.
 */
#include <stdio.h>

#include "sg_test.h"

#include "sg_common.h"

static void
test_parse_u64_strict(void **state)
{
	uint64_t v = 7;

	(void)state;
	assert_int_equal(sg_parse_u64("42", 2, UINT64_MAX, &v), 0);
	assert_int_equal(v, 42);
	assert_int_equal(sg_parse_u64("18446744073709551615", 20, UINT64_MAX, &v), 0);
	assert_true(v == UINT64_MAX);
	assert_int_equal(sg_parse_u64("18446744073709551616", 20, UINT64_MAX, &v), SG_ERANGE);
	assert_int_equal(sg_parse_u64("4294967296", 10, UINT32_MAX, &v), SG_ERANGE);
	assert_int_equal(sg_parse_u64("", 0, UINT64_MAX, &v), SG_EINVAL);
	assert_int_equal(sg_parse_u64("-1", 2, UINT64_MAX, &v), SG_EINVAL);
	assert_int_equal(sg_parse_u64("+1", 2, UINT64_MAX, &v), SG_EINVAL);
	assert_int_equal(sg_parse_u64(" 1", 2, UINT64_MAX, &v), SG_EINVAL);
	assert_int_equal(sg_parse_u64("1x", 2, UINT64_MAX, &v), SG_EINVAL);
}

static void
test_parse_duration_go_style(void **state)
{
	uint64_t ns = 0;

	(void)state;
	assert_int_equal(sg_parse_duration("10m", &ns), 0);
	assert_true(ns == 600000000000ULL);
	assert_int_equal(sg_parse_duration("20ms", &ns), 0);
	assert_true(ns == 20000000ULL);
	assert_int_equal(sg_parse_duration("1h30m", &ns), 0);
	assert_true(ns == 5400000000000ULL);
	assert_int_equal(sg_parse_duration("1.5s", &ns), 0);
	assert_true(ns == 1500000000ULL);
	assert_int_equal(sg_parse_duration("250us", &ns), 0);
	assert_true(ns == 250000ULL);
	assert_int_equal(sg_parse_duration("0", &ns), 0);
	assert_true(ns == 0);
	assert_int_equal(sg_parse_duration("10", &ns), SG_EINVAL);
	assert_int_equal(sg_parse_duration("", &ns), SG_EINVAL);
	assert_int_equal(sg_parse_duration("m", &ns), SG_EINVAL);
	assert_int_equal(sg_parse_duration("5x", &ns), SG_EINVAL);
	assert_int_equal(sg_parse_duration("-5s", &ns), SG_EINVAL);
	assert_int_equal(sg_parse_duration("99999999999999999h", &ns), SG_ERANGE);
}

static void
test_parse_bool_go_style(void **state)
{
	bool b = false;

	(void)state;
	assert_int_equal(sg_parse_bool("true", &b), 0);
	assert_true(b);
	assert_int_equal(sg_parse_bool("0", &b), 0);
	assert_false(b);
	assert_int_equal(sg_parse_bool("True", &b), 0);
	assert_true(b);
	assert_int_equal(sg_parse_bool("yes", &b), SG_EINVAL);
	assert_int_equal(sg_parse_bool("", &b), SG_EINVAL);
}

static void
test_utf8_validation(void **state)
{
	(void)state;
	assert_true(sg_utf8_valid("plain", 5));
	assert_true(sg_utf8_valid("\xc3\xa9t\xc3\xa9", 6));
	assert_true(sg_utf8_valid("\xf0\x9f\x98\x80", 4));
	assert_false(sg_utf8_valid("\xff", 1));
	assert_false(sg_utf8_valid("\xc3", 1));		/* truncated */
	assert_false(sg_utf8_valid("\xc0\xaf", 2));	/* overlong */
	assert_false(sg_utf8_valid("\xed\xa0\x80", 3));	/* surrogate */
	assert_false(sg_utf8_valid("\xf4\x90\x80\x80", 4)); /* > U+10FFFF */
}

static void
test_trim_and_hex(void **state)
{
	const char *s = " \t abc \r\n";
	size_t n = strlen(s);
	unsigned char in[] = { 0x00, 0xab, 0x7f };
	char hex[7];

	(void)state;
	sg_trim(&s, &n);
	assert_int_equal(n, 3);
	assert_memory_equal(s, "abc", 3);
	s = "   ";
	n = 3;
	sg_trim(&s, &n);
	assert_int_equal(n, 0);
	sg_hex(hex, in, 3);
	assert_string_equal(hex, "00ab7f");
}

/* The 16-byte steps and the byte tail agree with a digit table, every length. */
static void
test_hex_every_length_and_byte(void **state)
{
	unsigned char in[70];
	char got[2 * sizeof(in) + 1], want[2 * sizeof(in) + 1];
	size_t n, i;

	(void)state;
	for (i = 0; i < sizeof(in); i++)
		in[i] = (unsigned char)(i * 37 + 11);
	in[0] = 0x00;
	in[1] = 0xff;
	in[17] = 0x9a;
	for (n = 0; n <= sizeof(in); n++) {
		memset(got, 'x', sizeof(got));
		for (i = 0; i < n; i++)
			snprintf(want + 2 * i, 3, "%02x", in[i]);
		want[2 * n] = '\0';
		sg_hex(got, in, n);
		assert_string_equal(got, want);
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_u64_strict),
		cmocka_unit_test(test_hex_every_length_and_byte),
		cmocka_unit_test(test_parse_duration_go_style),
		cmocka_unit_test(test_parse_bool_go_style),
		cmocka_unit_test(test_utf8_validation),
		cmocka_unit_test(test_trim_and_hex),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
