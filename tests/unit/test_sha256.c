/*
 * test_sha256.c — sg_sha256.c: the FIPS 180-4 example digests, and the
 * digests of libsodium's crypto_hash_sha256 (an independent
 * implementation) for every length from 0 to 320 bytes and for messages
 * fed in pieces, through the hardware block function (where the machine
 * has the SHA extensions) and through the portable one alike.  The
 * identities and store keys built on top stay byte-identical: the
 * affinity key of a known session is pinned too.
 */
#include "sg_test.h"

#include <stdio.h>
#include <stdlib.h>

#include <sodium.h>

#include "sg_identity.h"
#include "sg_sha256.h"
#include "sg_common.h"

static void
hex(char *out, const unsigned char *d)
{
	int i;

	for (i = 0; i < SG_SHA256_BYTES; i++)
		snprintf(out + 2 * i, 3, "%02x", d[i]);
}

/* The implementation under test: the best one (0) or the portable (1). */
static int portable;

static void
begin(sg_sha256_ctx *c)
{
	if (portable)
		sg_sha256_init_portable(c);
	else
		sg_sha256_init(c);
}

static void
digest(unsigned char out[SG_SHA256_BYTES], const void *data, size_t len)
{
	sg_sha256_ctx c;

	begin(&c);
	sg_sha256_update(&c, data, len);
	sg_sha256_final(&c, out);
}

/* Run fn with the best implementation, then with the portable one. */
static void
both(void (*fn)(void))
{
	portable = 0;
	fn();
	portable = 1;
	fn();
	portable = 0;
}

static const struct {
	const char *msg;
	const char *want;
} vectors[] = {
	{ "", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" },
	{ "abc",
	  "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" },
	{ "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
	  "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1" },
	{ "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmn"
	  "hijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
	  "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1" },
};

static void
check_vectors(void)
{
	char got[SG_SHA256_HEX_LEN + 1];
	unsigned char d[SG_SHA256_BYTES];
	size_t i;

	for (i = 0; i < sizeof(vectors) / sizeof(vectors[0]); i++) {
		if (!portable) {
			sg_sha256_hex(got, vectors[i].msg,
			    strlen(vectors[i].msg));
			assert_string_equal(got, vectors[i].want);
			sg_sha256(d, vectors[i].msg, strlen(vectors[i].msg));
			hex(got, d);
			assert_string_equal(got, vectors[i].want);
		}
		digest(d, vectors[i].msg, strlen(vectors[i].msg));
		hex(got, d);
		assert_string_equal(got, vectors[i].want);
	}
}

/* FIPS 180-4 example digests, hardware and portable. */
static void
sha256_fips_vectors(void **state)
{
	(void)state;
	both(check_vectors);
}

static void
check_million(void)
{
	static char a[1000];
	char got[SG_SHA256_HEX_LEN + 1];
	unsigned char d[SG_SHA256_BYTES];
	sg_sha256_ctx c;
	int i;

	memset(a, 'a', sizeof(a));
	begin(&c);
	for (i = 0; i < 1000; i++)
		sg_sha256_update(&c, a, sizeof(a));
	sg_sha256_final(&c, d);
	hex(got, d);
	assert_string_equal(got,
	    "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

/* One million 'a's, in pieces of 1000 bytes (FIPS 180-4 example). */
static void
sha256_million_a(void **state)
{
	(void)state;
	both(check_million);
}

static unsigned char msg[320];

static void
check_lengths(void)
{
	unsigned char want[crypto_hash_sha256_BYTES], got[SG_SHA256_BYTES];
	char wh[SG_SHA256_HEX_LEN + 1], gh[SG_SHA256_HEX_LEN + 1];
	size_t len;

	for (len = 0; len <= sizeof(msg); len++) {
		crypto_hash_sha256(want, msg, len);
		digest(got, len > 0 ? msg : NULL, len);
		assert_memory_equal(got, want, sizeof(want));
		if (portable)
			continue;
		sg_sha256(got, len > 0 ? msg : NULL, len);
		assert_memory_equal(got, want, sizeof(want));
		sg_hex(wh, want, sizeof(want));
		sg_sha256_hex(gh, msg, len);
		assert_string_equal(gh, wh);
	}
}

/* Every length 0..320 (all padding cases, 1 to 6 blocks) as libsodium. */
static void
sha256_matches_libsodium_every_length(void **state)
{
	size_t i;

	(void)state;
	srand(11);
	for (i = 0; i < sizeof(msg); i++)
		msg[i] = (unsigned char)rand();
	both(check_lengths);
}

static void
check_pieces(void)
{
	unsigned char want[SG_SHA256_BYTES], got[SG_SHA256_BYTES];
	sg_sha256_ctx c;
	size_t len, at, k;
	int round;

	for (round = 0; round < 200; round++) {
		len = (size_t)rand() % (sizeof(msg) + 1);
		crypto_hash_sha256(want, msg, len);
		begin(&c);
		for (at = 0; at < len; at += k) {
			k = (size_t)rand() % 80;
			if (k > len - at)
				k = len - at;
			sg_sha256_update(&c, msg + at, k);
		}
		sg_sha256_final(&c, got);
		assert_memory_equal(got, want, sizeof(want));
	}
}

/* Messages fed in random pieces (0..79 bytes) hash as in one piece. */
static void
sha256_incremental_pieces(void **state)
{
	size_t i;

	(void)state;
	srand(12);
	for (i = 0; i < sizeof(msg); i++)
		msg[i] = (unsigned char)rand();
	both(check_pieces);
}

static void
check_affinity(void)
{
	char key[SG_AFFINITY_KEY_MAX];

	assert_int_equal(sg_identity_affinity_key(key, sizeof(key), "pck",
	    "bench-1", 7), 0);
	/* printf 'bench-1' | sha256sum */
	assert_string_equal(key, "mt:v1:pck:"
	    "ab29e27f94d7a6e97bec92c4e65a34c9fcba9f00c070cd5500036e7c2e49763b");
}

/* Affinity keys stay byte-identical (the best implementation: the one
 * the identity uses; the portable one gives the same digests above). */
static void
sha256_affinity_key_pinned(void **state)
{
	(void)state;
	check_affinity();
}

/* Where the CPU has the SHA extensions, they are used. */
static void
sha256_uses_sha_extensions(void **state)
{
	FILE *f = fopen("/proc/cpuinfo", "r");
	char line[4096];
	bool has = false;

	(void)state;
	if (f != NULL) {
		while (fgets(line, sizeof(line), f) != NULL)
			if (strncmp(line, "flags", 5) == 0) {
				has = strstr(line, " sha_ni") != NULL;
				break;
			}
		fclose(f);
	}
	assert_int_equal(sg_sha256_accelerated(), has);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(sha256_fips_vectors),
		cmocka_unit_test(sha256_million_a),
		cmocka_unit_test(sha256_matches_libsodium_every_length),
		cmocka_unit_test(sha256_incremental_pieces),
		cmocka_unit_test(sha256_affinity_key_pinned),
		cmocka_unit_test(sha256_uses_sha_extensions),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
