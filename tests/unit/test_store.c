/*
 * test_store.c — sg_store.c, the store's front: option defaults and
 * checks, key syntax, cluster id validation before anything is queued, the
 * key codec shared by the backends.  Runs against a real LMDB directory
 * (the only backend) so that refused writes are seen not to reach it.
 */
#include "sg_test.h"

#include <stdlib.h>

#include "sg_store_fixture.h"
#include "sg_store_internal.h"

struct fx {
	char		 dir[64];
	sg_store_opts	 o;
	sg_store	*s;
};

static int
setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	sgt_tmpdir(f->dir, sizeof(f->dir), "store");
	sgt_opts(&f->o, f->dir, NULL);
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fx *f = *state;

	sg_store_close(f->s);
	sgt_rmtree(f->dir);
	free(f);
	return 0;
}

static void
key_of(char k[SG_LC_KEY_LEN + 1], const char *aff)
{
	assert_int_equal(sg_lc_key(k, "rk", 2, "model", 5, aff, strlen(aff)), 0);
}

static void
test_opts_init_has_documented_defaults(void **state)
{
	sg_store_opts o;

	(void)state;
	memset(&o, 0xa5, sizeof(o));
	sg_store_opts_init(&o);
	assert_string_equal(o.path, "/var/lib/stargate/lastcluster");
	assert_false(o.create);
	assert_false(o.sync);
	assert_true(o.ttl_ms == 600000);
	assert_true(o.max_entries == 100000);
	assert_true(o.sync_interval_ms == 1000);
	assert_int_equal(o.max_readers, 126);
	assert_null(o.clock);
	assert_null(o.on_commit);
	assert_null(o.event_base);
}

static void
test_lmdb_store_is_always_connected(void **state)
{
	struct fx *f = *state;

	assert_int_equal(sg_store_open(&f->s, &f->o, NULL), 0);
	assert_true(sg_store_connected(f->s));
}

static void
test_bad_options_are_config_errors(void **state)
{
	struct fx *f = *state;
	sg_store *t = NULL;
	sg_store_opts o = f->o;
	sg_error er;

	o.ttl_ms = 0;
	assert_int_equal(sg_store_open(&t, &o, &er), SG_ECONFIG);
	assert_non_null(strstr(er.text, "TTL"));
	o = f->o;
	o.max_entries = 0;
	assert_int_equal(sg_store_open(&t, &o, NULL), SG_ECONFIG);
	o = f->o;
	o.map_size_max = o.map_size - 1;
	assert_int_equal(sg_store_open(&t, &o, NULL), SG_ECONFIG);
	o = f->o;
	o.batch_max = 0;
	assert_int_equal(sg_store_open(&t, &o, NULL), SG_ECONFIG);
	o = f->o;
	o.path = "";
	assert_int_equal(sg_store_open(&t, &o, NULL), SG_ECONFIG);
	o = f->o;
	o.path = "rediss://localhost:6379/0";
	assert_int_equal(sg_store_open(&t, &o, &er), SG_ECONFIG);
	assert_non_null(strstr(er.text, "TLS"));
	o.path = "redis://localhost:6379/x";
	assert_int_equal(sg_store_open(&t, &o, &er), SG_ECONFIG);
	assert_non_null(strstr(er.text, "database"));
	assert_null(t);
}

static void
test_invalid_cluster_ids_are_refused_before_queueing(void **state)
{
	struct fx *f = *state;
	char k[SG_LC_KEY_LEN + 1], longid[300];
	sg_store_entry e;
	sg_store_stats st;
	sg_error er;

	assert_int_equal(sg_store_open(&f->s, &f->o, NULL), 0);
	key_of(k, "s1");
	memset(longid, 'x', sizeof(longid));
	assert_int_equal(sg_store_put(f->s, k, SG_LC_KEY_LEN, "", 0, &er),
	    SG_EINVAL);
	assert_non_null(strstr(er.text, "cluster id"));
	assert_int_equal(sg_store_put(f->s, k, SG_LC_KEY_LEN, longid, 257,
	    NULL), SG_EINVAL);
	assert_int_equal(sg_store_put(f->s, k, SG_LC_KEY_LEN, "a\nb", 3,
	    NULL), SG_EINVAL);
	assert_int_equal(sg_store_put(f->s, k, SG_LC_KEY_LEN, "a\x7f", 2,
	    NULL), SG_EINVAL);
	assert_int_equal(sg_store_put(f->s, k, SG_LC_KEY_LEN, "\xc3\xa9", 2,
	    NULL), SG_EINVAL);
	assert_int_equal(sg_store_put(f->s, k, SG_LC_KEY_LEN, NULL, 0, NULL),
	    SG_EINVAL);
	assert_int_equal(sg_store_flush(f->s, NULL), 0);
	assert_int_equal(sg_store_lookup(f->s, k, SG_LC_KEY_LEN, &e, NULL),
	    SG_ENOTFOUND);
	assert_int_equal(sg_store_stats_get(f->s, &st, NULL), 0);
	assert_int_equal(st.committed, 0);
	/* The longest valid id round-trips. */
	assert_int_equal(sg_store_put(f->s, k, SG_LC_KEY_LEN, longid, 256,
	    NULL), 0);
	assert_int_equal(sg_store_flush(f->s, NULL), 0);
	assert_int_equal(sg_store_lookup(f->s, k, SG_LC_KEY_LEN, &e, NULL), 0);
	assert_int_equal(e.cluster_id_len, 256);
	assert_int_equal(memcmp(e.cluster_id, longid, 256), 0);
	assert_string_equal(e.key, k);
}

static void
test_bad_keys_are_refused(void **state)
{
	struct fx *f = *state;
	char k[SG_LC_KEY_LEN + 1];
	sg_store_entry e;
	sg_error er;

	assert_int_equal(sg_store_open(&f->s, &f->o, NULL), 0);
	key_of(k, "s1");
	k[20] = 'F';
	assert_int_equal(sg_store_lookup(f->s, k, SG_LC_KEY_LEN, &e, &er),
	    SG_EINVAL);
	assert_non_null(strstr(er.text, "lc:v1:"));
	assert_int_equal(sg_store_put(f->s, k, SG_LC_KEY_LEN, "a", 1, NULL),
	    SG_EINVAL);
	assert_int_equal(sg_store_del(f->s, k, SG_LC_KEY_LEN, NULL), SG_EINVAL);
	/* A raw session id is never a key. */
	assert_int_equal(sg_store_lookup(f->s, "tenant/session", 14, &e, NULL),
	    SG_EINVAL);
	key_of(k, "s1");
	assert_int_equal(sg_store_lookup(f->s, k, SG_LC_KEY_LEN - 1, &e, NULL),
	    SG_EINVAL);
	assert_int_equal(sg_store_iterate(f->s, false, NULL, NULL, NULL),
	    SG_EINVAL);
}

static void
test_key_codec_round_trips(void **state)
{
	char k[SG_LC_KEY_LEN + 1];
	sgi_lckey a, b;

	(void)state;
	key_of(k, "s1");
	assert_int_equal(sgi_lckey_parse(&a, k, SG_LC_KEY_LEN), 0);
	assert_string_equal(a.text, k);
	sgi_lckey_from_digest(&b, a.digest);
	assert_string_equal(b.text, k);
	/* The digest is the hex pair by pair. */
	assert_int_equal(a.digest[0] >> 4,
	    k[6] <= '9' ? k[6] - '0' : k[6] - 'a' + 10);
	k[69] = 'z';
	assert_int_equal(sgi_lckey_parse(&a, k, SG_LC_KEY_LEN), SG_EINVAL);
}

static int
ref_hex(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

/* Every byte value at every hex position: accepted iff [0-9a-f]. */
static void
test_key_parse_every_byte_at_every_position(void **state)
{
	char k[SG_LC_KEY_LEN + 1];
	sgi_lckey a;
	int pos, c, i;

	(void)state;
	key_of(k, "s1");
	for (pos = 6; pos < SG_LC_KEY_LEN; pos++) {
		char save = k[pos];

		for (c = 1; c < 256; c++) {
			int rc;

			k[pos] = (char)c;
			rc = sgi_lckey_parse(&a, k, SG_LC_KEY_LEN);
			if (ref_hex(c) < 0) {
				if (rc != SG_EINVAL)
					fail_msg("byte %#x at %d accepted", c, pos);
				continue;
			}
			assert_int_equal(rc, 0);
			for (i = 0; i < 32; i++)
				assert_int_equal(a.digest[i],
				    ref_hex(k[6 + 2 * i]) << 4 |
				    ref_hex(k[7 + 2 * i]));
		}
		k[pos] = save;
	}
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_opts_init_has_documented_defaults),
		T(test_bad_options_are_config_errors),
		T(test_lmdb_store_is_always_connected),
		T(test_invalid_cluster_ids_are_refused_before_queueing),
		T(test_bad_keys_are_refused),
		cmocka_unit_test(test_key_codec_round_trips),
		cmocka_unit_test(test_key_parse_every_byte_at_every_position),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
