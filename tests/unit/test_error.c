/*
 * test_error.c — sg_error.c: status descriptions and the caller-owned error
 * record.
 */
#include "sg_test.h"

#include "sg_common.h"

static void
test_http_error_record_carries_status_and_class(void **state)
{
	sg_error e;

	(void)state;
	assert_int_equal(sg_seterr(NULL, SG_EINVAL, "x"), SG_EINVAL);
	assert_int_equal(sg_seterr_http(&e, SG_EREQUEST, 400, "unknown_method",
	    "unknown routing method %s", "foo"), SG_EREQUEST);
	assert_int_equal(e.status, 400);
	assert_string_equal(e.code, "unknown_method");
	assert_string_equal(e.text, "unknown routing method foo");
	assert_string_equal(sg_strerror(SG_ENOTFOUND), "not found");
	assert_string_equal(sg_strerror(ENOENT), strerror(ENOENT));
}

static void
test_null_error_record_is_allowed(void **state)
{
	(void)state;
	assert_int_equal(sg_seterr(NULL, SG_EINVAL, "x %d", 1), SG_EINVAL);
	assert_int_equal(sg_seterr_http(NULL, SG_EREQUEST, 400, "c", "y"),
	    SG_EREQUEST);
	sg_error_clear(NULL);
}

static void
test_plain_error_resets_status_and_class(void **state)
{
	sg_error e;

	(void)state;
	sg_seterr_http(&e, SG_EREQUEST, 400, "unknown_method", "a");
	assert_int_equal(sg_seterr(&e, SG_ECONFIG, "bad %s", "config"),
	    SG_ECONFIG);
	assert_int_equal(e.status, 0);
	assert_string_equal(e.code, "");
	assert_string_equal(e.text, "bad config");
	sg_error_clear(&e);
	assert_string_equal(e.text, "");
}

static void
test_long_messages_are_truncated_not_overflowed(void **state)
{
	sg_error e;
	char big[1000];

	(void)state;
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	sg_seterr(&e, SG_EINVAL, "%s", big);
	assert_int_equal(strlen(e.text), sizeof(e.text) - 1);
}

static void
test_every_code_has_a_description(void **state)
{
	static const int codes[] = { SG_OK, SG_EINVAL, SG_ECONFIG, SG_ENOMEM,
	    SG_ENOTFOUND, SG_EFULL, SG_ESTORE, SG_EIO, SG_ERANGE, SG_EREQUEST };
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(codes) / sizeof(codes[0]); i++)
		assert_string_not_equal(sg_strerror(codes[i]), "unknown error");
	assert_string_equal(sg_strerror(-1), "unknown error");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_http_error_record_carries_status_and_class),
		cmocka_unit_test(test_null_error_record_is_allowed),
		cmocka_unit_test(test_plain_error_resets_status_and_class),
		cmocka_unit_test(test_long_messages_are_truncated_not_overflowed),
		cmocka_unit_test(test_every_code_has_a_description),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
