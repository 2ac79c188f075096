/*
 * test_store_redis_url.c — sg_store_redis_url.c: the three URL forms and
 * what they refuse, password redaction, the value codec (round trip and
 * every malformed value a miss), the PX arithmetic, and Redis Cluster's
 * key slots against values Redis itself gives (CLUSTER KEYSLOT).
 */
#include "sg_test.h"

#include <stdio.h>
#include <stdlib.h>

#include "sg_store.h"
#include "sg_store_redis.h"

static void
test_url_single_with_user_password_and_db(void **state)
{
	struct sgr_url u;
	sg_error e;

	(void)state;
	assert_int_equal(sgr_url_parse(&u,
	    "redis://al%40ice:p%3Aw@db.example:6380/3", &e), 0);
	assert_int_equal(u.kind, SGR_SINGLE);
	assert_string_equal(u.user, "al@ice");
	assert_string_equal(u.pass, "p:w");
	assert_int_equal(u.nhosts, 1);
	assert_string_equal(u.hosts[0].host, "db.example");
	assert_int_equal(u.hosts[0].port, 6380);
	assert_int_equal(u.db, 3);
	assert_int_equal(sgr_url_parse(&u, "redis://h", &e), 0);
	assert_int_equal(u.hosts[0].port, 6379);
	assert_int_equal(u.db, 0);
	assert_string_equal(u.pass, "");
	assert_int_equal(sgr_url_parse(&u, "redis://:only@[::1]:7000/", &e), 0);
	assert_string_equal(u.user, "");
	assert_string_equal(u.pass, "only");
	assert_string_equal(u.hosts[0].host, "::1");
	assert_int_equal(u.hosts[0].port, 7000);
}

static void
test_url_sentinel_names_sentinels_master_and_db(void **state)
{
	struct sgr_url u;
	sg_error e;

	(void)state;
	assert_int_equal(sgr_url_parse(&u,
	    "redis+sentinel://pw@s1:26380,s2,s3:1/mymaster/2", &e), 0);
	assert_int_equal(u.kind, SGR_SENTINEL);
	assert_string_equal(u.pass, "pw");
	assert_int_equal(u.nhosts, 3);
	assert_int_equal(u.hosts[0].port, 26380);
	assert_int_equal(u.hosts[1].port, 26379);
	assert_string_equal(u.hosts[2].host, "s3");
	assert_string_equal(u.master, "mymaster");
	assert_int_equal(u.db, 2);
	assert_int_equal(sgr_url_parse(&u, "redis+sentinel://s1/m", &e), 0);
	assert_int_equal(u.db, 0);
	assert_int_equal(sgr_url_parse(&u, "redis+sentinel://s1:1", &e),
	    SG_ECONFIG);
	assert_non_null(strstr(e.text, "master name"));
}

static void
test_url_cluster_seeds_and_no_db(void **state)
{
	struct sgr_url u;
	sg_error e;

	(void)state;
	assert_int_equal(sgr_url_parse(&u, "redis+cluster://a:1,b:2,c:3", &e),
	    0);
	assert_int_equal(u.kind, SGR_CLUSTER);
	assert_int_equal(u.nhosts, 3);
	assert_string_equal(u.hosts[1].host, "b");
	assert_int_equal(sgr_url_parse(&u, "redis+cluster://a:1/2", &e),
	    SG_ECONFIG);
	assert_non_null(strstr(e.text, "database"));
}

static void
test_url_bad_forms_are_config_errors_without_the_password(void **state)
{
	static const char *const bad[] = {
		"rediss://h:1/0", "redis://", "redis://h:0", "redis://h:65536",
		"redis://h:x", "redis://a:1,b:2", "redis://h/abc",
		"redis+cluster://a:1,", "redis+other://h", "redis://s3cret@",
		"redis://u:s3cret%zz@h", "redis+sentinel://s3cret@h:1//",
	};
	struct sgr_url u;
	sg_error e;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		sg_error_clear(&e);
		if (sgr_url_parse(&u, bad[i], &e) != SG_ECONFIG)
			fail_msg("accepted: %s", bad[i]);
		assert_null(strstr(e.text, "s3cret"));
		assert_true(e.text[0] != '\0');
	}
}

static void
test_redact_hides_the_password_keeps_the_rest(void **state)
{
	char out[256];

	(void)state;
	sg_store_path_redact(out, sizeof(out), "redis://bob:s3cret@h:1/2");
	assert_string_equal(out, "redis://bob:***@h:1/2");
	sg_store_path_redact(out, sizeof(out),
	    "redis+sentinel://s3cret@a:1,b:2/m");
	assert_string_equal(out, "redis+sentinel://***@a:1,b:2/m");
	sg_store_path_redact(out, sizeof(out), "redis://h:1/0");
	assert_string_equal(out, "redis://h:1/0");
	sg_store_path_redact(out, sizeof(out), "/var/lib/x");
	assert_string_equal(out, "/var/lib/x");
	assert_int_equal(sg_store_path_redact(out, 4, "redis://h:1/0"), 13);
	assert_string_equal(out, "red");
}

static void
test_value_codec_round_trips_and_keeps_the_write_time(void **state)
{
	char v[SGR_VALUE_MAX], id[SG_ID_MAX];
	const char *got;
	size_t n, gl;
	uint64_t w;

	(void)state;
	n = sgr_value_encode(v, 1764592056123ULL, "B", 1);
	assert_int_equal(n, 15);
	assert_memory_equal(v, "1764592056123:B", 15);
	assert_int_equal(sgr_value_decode(v, n, &w, &got, &gl), 0);
	assert_true(w == 1764592056123ULL);
	assert_int_equal(gl, 1);
	assert_memory_equal(got, "B", 1);
	/* Longest id, with ':' inside; time 0 and UINT64_MAX. */
	memset(id, ':', sizeof(id));
	n = sgr_value_encode(v, UINT64_MAX, id, sizeof(id));
	assert_int_equal(n, SGR_VALUE_MAX);
	assert_int_equal(sgr_value_decode(v, n, &w, &got, &gl), 0);
	assert_true(w == UINT64_MAX);
	assert_int_equal(gl, SG_ID_MAX);
	n = sgr_value_encode(v, 0, "a b", 3);
	assert_memory_equal(v, "0:a b", 5);
	assert_int_equal(sgr_value_decode(v, n, &w, &got, &gl), 0);
	assert_true(w == 0);
}

static void
test_malformed_values_do_not_decode(void **state)
{
	static const char *const bad[] = {
		"B", ":B", "12:", "01:B", "-1:B", "1x:B", "12:\001",
		"99999999999999999999:B", "",
	};
	const char *got;
	size_t i, gl;
	uint64_t w;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (sgr_value_decode(bad[i], strlen(bad[i]), &w, &got,
		    &gl) != SG_EINVAL)
			fail_msg("decoded: '%s'", bad[i]);
	assert_int_equal(sgr_value_decode(NULL, 0, &w, &got, &gl), SG_EINVAL);
}

static void
test_px_is_the_time_left(void **state)
{
	(void)state;
	assert_true(sgr_px(1000, 1000, 600000) == 600000);
	assert_true(sgr_px(1000, 1500, 600000) == 599500);
	assert_true(sgr_px(1000, 601000, 600000) == 0);
	assert_true(sgr_px(1000, 900000, 600000) == 0);
	assert_true(sgr_px(5000, 1000, 10) == 10);	/* future: full TTL */
}

static void
test_key_slots_match_redis(void **state)
{
	(void)state;
	/* CLUSTER KEYSLOT answers of redis-server 7. */
	assert_int_equal(sgr_key_slot("foo", 3), 12182);
	assert_int_equal(sgr_key_slot("123456789", 9), 12739);
	assert_int_equal(sgr_key_slot("{user1000}.following", 20),
	    sgr_key_slot("user1000", 8));
	assert_int_equal(sgr_key_slot("foo{}{bar}", 10), 8363);
	assert_int_equal(sgr_key_slot("", 0), 0);
	assert_int_equal(sgr_key_slot("lc:v1:2ce64d760c6ac2d235af027fcb2605e6"
	    "607471af8e886e6e1fbbdbf0cef05939", SG_LC_KEY_LEN), 14642);
}

static void
test_is_url_recognizes_every_scheme(void **state)
{
	(void)state;
	assert_true(sgr_is_url("redis://h"));
	assert_true(sgr_is_url("rediss://h"));
	assert_true(sgr_is_url("redis+sentinel://h/m"));
	assert_true(sgr_is_url("redis+cluster://h"));
	assert_false(sgr_is_url("./redis"));
	assert_false(sgr_is_url("/var/lib/stargate"));
	assert_false(sgr_is_url(NULL));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_url_single_with_user_password_and_db),
		cmocka_unit_test(
		    test_url_sentinel_names_sentinels_master_and_db),
		cmocka_unit_test(test_url_cluster_seeds_and_no_db),
		cmocka_unit_test(
		    test_url_bad_forms_are_config_errors_without_the_password),
		cmocka_unit_test(test_redact_hides_the_password_keeps_the_rest),
		cmocka_unit_test(
		    test_value_codec_round_trips_and_keeps_the_write_time),
		cmocka_unit_test(test_malformed_values_do_not_decode),
		cmocka_unit_test(test_px_is_the_time_left),
		cmocka_unit_test(test_key_slots_match_redis),
		cmocka_unit_test(test_is_url_recognizes_every_scheme),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
