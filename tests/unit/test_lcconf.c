/*
 * test_lcconf.c — sg_lcconf.c: the STARGATE_LAST_CLUSTER_* settings.
 * The environment is a table behind a getenv-shaped function, so the test
 * never touches the process environment.
 */
#include "sg_test.h"

#include "sg_lcconf.h"

static const char *const *env_table;	/* name, value, ..., NULL */

static char *
fake_getenv(const char *name)
{
	const char *const *p;

	for (p = env_table; p != NULL && *p != NULL; p += 2)
		if (strcmp(p[0], name) == 0)
			return (char *)(uintptr_t)p[1];
	return NULL;
}

static int
from(sg_lcconf *c, const char *const *table, sg_error *e)
{
	env_table = table;
	sg_lcconf_init(c);
	sg_error_clear(e);
	return sg_lcconf_from_env(c, fake_getenv, e);
}

static void
test_defaults_when_nothing_is_set(void **state)
{
	static const char *const none[] = { NULL };
	sg_lcconf c;
	sg_error e;

	(void)state;
	assert_int_equal(from(&c, none, &e), 0);
	assert_false(c.enabled);
	assert_int_equal(c.ttl_ms, 600000);
	assert_int_equal(c.lookup_timeout_ns, 20000000);
	assert_int_equal(c.max_entries, 100000);
	assert_string_equal(c.store, SG_STORE_DEFAULT_PATH);
	assert_int_equal(c.backend, SG_LC_BACKEND_LMDB);
	assert_string_equal(sg_lc_backend_name(c.backend), "lmdb");
}

static void
test_every_variable_is_read(void **state)
{
	static const char *const env[] = {
		SG_LCCONF_ENABLED, "true",
		SG_LCCONF_TTL, "1h30m",
		SG_LCCONF_TIMEOUT, " 500us ",
		SG_LCCONF_MAX_ENTRIES, "42",
		SG_LCCONF_STORE, "/tmp/lc",
		NULL,
	};
	sg_lcconf c;
	sg_error e;

	(void)state;
	assert_int_equal(from(&c, env, &e), 0);
	assert_true(c.enabled);
	assert_int_equal(c.ttl_ms, 5400000);
	assert_int_equal(c.lookup_timeout_ns, 500000);
	assert_int_equal(c.max_entries, 42);
	assert_string_equal(c.store, "/tmp/lc");
}

static void
test_blank_variables_keep_the_default(void **state)
{
	static const char *const env[] = {
		SG_LCCONF_ENABLED, "",
		SG_LCCONF_TTL, "  ",
		SG_LCCONF_STORE, "\t",
		NULL,
	};
	sg_lcconf c;
	sg_error e;

	(void)state;
	assert_int_equal(from(&c, env, &e), 0);
	assert_false(c.enabled);
	assert_int_equal(c.ttl_ms, 600000);
	assert_string_equal(c.store, SG_STORE_DEFAULT_PATH);
}

static void
test_booleans_follow_go_parsebool(void **state)
{
	static const char *const yes[] = { "1", "t", "T", "TRUE", "true",
	    "True" };
	static const char *const no[] = { "0", "f", "F", "FALSE", "false",
	    "False" };
	sg_lcconf c;
	sg_error e;
	size_t i;

	(void)state;
	for (i = 0; i < 6; i++) {
		sg_lcconf_init(&c);
		assert_int_equal(sg_lcconf_set(&c, SG_LCCONF_ENABLED, yes[i],
		    NULL, &e), 0);
		assert_true(c.enabled);
		assert_int_equal(sg_lcconf_set(&c, SG_LCCONF_ENABLED, no[i],
		    NULL, &e), 0);
		assert_false(c.enabled);
	}
	assert_int_equal(sg_lcconf_set(&c, SG_LCCONF_ENABLED, "yes", NULL,
	    &e), SG_ECONFIG);
	assert_string_equal(e.text,
	    "STARGATE_LAST_CLUSTER_ENABLED: not a boolean: 'yes'");
}

static void
test_bad_values_name_the_variable(void **state)
{
	static const struct {
		const char *name, *value, *msg;
	} cases[] = {
		{ SG_LCCONF_TTL, "10", "STARGATE_LAST_CLUSTER_TTL: not a "
		    "duration > 0: '10'" },
		{ SG_LCCONF_TTL, "0s", "STARGATE_LAST_CLUSTER_TTL: not a "
		    "duration > 0: '0s'" },
		{ SG_LCCONF_TIMEOUT, "-5ms", "STARGATE_LAST_CLUSTER_LOOKUP_"
		    "TIMEOUT: not a duration > 0: '-5ms'" },
		{ SG_LCCONF_MAX_ENTRIES, "0", "STARGATE_LAST_CLUSTER_LOCAL_"
		    "MAX_ENTRIES: not an integer > 0: '0'" },
		{ SG_LCCONF_MAX_ENTRIES, "-1", "STARGATE_LAST_CLUSTER_LOCAL_"
		    "MAX_ENTRIES: not an integer > 0: '-1'" },
		{ SG_LCCONF_MAX_ENTRIES, "1e3", "STARGATE_LAST_CLUSTER_LOCAL_"
		    "MAX_ENTRIES: not an integer > 0: '1e3'" },
	};
	const char *env[3] = { NULL, NULL, NULL };
	sg_lcconf c;
	sg_error e;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		env[0] = cases[i].name;
		env[1] = cases[i].value;
		assert_int_equal(from(&c, env, &e), SG_ECONFIG);
		assert_string_equal(e.text, cases[i].msg);
	}
}

static void
test_a_refused_value_changes_nothing(void **state)
{
	sg_lcconf c;
	sg_error e;

	(void)state;
	sg_lcconf_init(&c);
	assert_int_equal(sg_lcconf_set(&c, SG_LCCONF_TTL, "90s", NULL, &e), 0);
	assert_int_equal(sg_lcconf_set(&c, SG_LCCONF_TTL, "soon", NULL, &e),
	    SG_ECONFIG);
	assert_int_equal(c.ttl_ms, 90000);
}

static void
test_flag_labels_name_the_flag(void **state)
{
	sg_lcconf c;
	sg_error e;

	(void)state;
	sg_lcconf_init(&c);
	assert_int_equal(sg_lcconf_set(&c, SG_LCCONF_TTL, "x", "--ttl", &e),
	    SG_ECONFIG);
	assert_string_equal(e.text, "--ttl: not a duration > 0: 'x'");
	assert_int_equal(sg_lcconf_set(&c, SG_LCCONF_STORE, " ", "-d", &e),
	    SG_ECONFIG);
	assert_string_equal(e.text, "-d: empty");
	assert_int_equal(sg_lcconf_set(&c, "STARGATE_NOPE", "1", NULL, &e),
	    SG_EINVAL);
}

static void
test_sub_millisecond_ttl_rounds_up(void **state)
{
	sg_lcconf c;
	sg_error e;

	(void)state;
	sg_lcconf_init(&c);
	assert_int_equal(sg_lcconf_set(&c, SG_LCCONF_TTL, "1us", NULL, &e), 0);
	assert_int_equal(c.ttl_ms, 1);
	assert_int_equal(sg_lcconf_set(&c, SG_LCCONF_TTL, "1.5ms", NULL, &e),
	    0);
	assert_int_equal(c.ttl_ms, 2);
}

static void
test_redis_urls_are_recognized(void **state)
{
	static const char *const urls[] = { "redis://h:6379/0",
	    "rediss://u:p@h:6380/1", "redis+sentinel://a:1,b:2/m/0",
	    "redis+cluster://a:1,b:2" };
	sg_lcconf c;
	sg_error e;
	size_t i;

	(void)state;
	for (i = 0; i < 4; i++) {
		sg_lcconf_init(&c);
		assert_int_equal(sg_lcconf_set(&c, SG_LCCONF_STORE, urls[i],
		    NULL, &e), 0);
		assert_int_equal(c.backend, SG_LC_BACKEND_REDIS);
		assert_string_equal(sg_lc_backend_name(c.backend), "redis");
	}
	assert_int_equal(sg_lcconf_set(&c, SG_LCCONF_STORE, "./redis", NULL,
	    &e), 0);
	assert_int_equal(c.backend, SG_LC_BACKEND_LMDB);
}

static void
test_long_store_is_refused(void **state)
{
	static char big[SG_LCCONF_STORE_MAX + 10];
	sg_lcconf c;
	sg_error e;

	(void)state;
	memset(big, 'a', sizeof(big) - 1);
	sg_lcconf_init(&c);
	assert_int_equal(sg_lcconf_set(&c, SG_LCCONF_STORE, big, NULL, &e),
	    SG_ECONFIG);
	big[SG_LCCONF_STORE_MAX - 1] = '\0';
	assert_int_equal(sg_lcconf_set(&c, SG_LCCONF_STORE, big, NULL, &e), 0);
	assert_int_equal(strlen(c.store), SG_LCCONF_STORE_MAX - 1);
}

static void
test_store_opts_take_the_settings(void **state)
{
	sg_store_opts o;
	sg_lcconf c;
	sg_error e;

	(void)state;
	sg_lcconf_init(&c);
	assert_int_equal(sg_lcconf_set(&c, SG_LCCONF_STORE, "/x", NULL, &e),
	    0);
	assert_int_equal(sg_lcconf_set(&c, SG_LCCONF_MAX_ENTRIES, "7", NULL,
	    &e), 0);
	sg_store_opts_init(&o);
	sg_lcconf_store_opts(&c, &o);
	assert_string_equal(o.path, "/x");
	assert_int_equal(o.max_entries, 7);
	assert_int_equal(o.ttl_ms, 600000);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_defaults_when_nothing_is_set),
		cmocka_unit_test(test_every_variable_is_read),
		cmocka_unit_test(test_blank_variables_keep_the_default),
		cmocka_unit_test(test_booleans_follow_go_parsebool),
		cmocka_unit_test(test_bad_values_name_the_variable),
		cmocka_unit_test(test_a_refused_value_changes_nothing),
		cmocka_unit_test(test_flag_labels_name_the_flag),
		cmocka_unit_test(test_sub_millisecond_ttl_rounds_up),
		cmocka_unit_test(test_redis_urls_are_recognized),
		cmocka_unit_test(test_long_store_is_refused),
		cmocka_unit_test(test_store_opts_take_the_settings),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
