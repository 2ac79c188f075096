/*
 * sg_lckey.c — last-cluster store keys and cluster id validation.
 *
 * The key is a SHA-256 over length-prefixed fields so that no two
 * different (routing key, model, affinity key) triples can collide by
 * shifting bytes between fields; the raw fields never leave this function.
 * The hash is sg_sha256 (the processor's SHA extensions where it has them:
 * a key is made per request, and the portable hash of its two blocks cost
 * more than the rest of the store's work for the request).
 */
#include <string.h>

#include "sg_sha256.h"
#include "sg_store.h"

static void
put_field(sg_sha256_ctx *st, const char *s, size_t len)
{
	unsigned char be[8];
	uint64_t n = (uint64_t)len;
	int i;

	for (i = 7; i >= 0; i--) {
		be[i] = (unsigned char)(n & 0xff);
		n >>= 8;
	}
	sg_sha256_update(st, be, sizeof(be));
	if (len > 0)
		sg_sha256_update(st, s, len);
}

int
sg_lc_key(char out[SG_LC_KEY_LEN + 1], const char *routing_key, size_t rk_len,
    const char *model, size_t model_len, const char *affinity_key,
    size_t ak_len)
{
	sg_sha256_ctx st;
	unsigned char digest[SG_SHA256_BYTES];
	size_t plen = sizeof(SG_LC_KEY_PREFIX) - 1;

	if (out == NULL || (routing_key == NULL && rk_len > 0) ||
	    (model == NULL && model_len > 0) ||
	    (affinity_key == NULL && ak_len > 0))
		return SG_EINVAL;
	sg_sha256_init(&st);
	put_field(&st, routing_key, rk_len);
	put_field(&st, model, model_len);
	put_field(&st, affinity_key, ak_len);
	sg_sha256_final(&st, digest);
	memcpy(out, SG_LC_KEY_PREFIX, plen);
	sg_hex(out + plen, digest, sizeof(digest));
	out[SG_LC_KEY_LEN] = '\0';
	return 0;
}

bool
sg_lc_key_valid(const char *key, size_t len)
{
	size_t plen = sizeof(SG_LC_KEY_PREFIX) - 1, i;

	if (key == NULL || len != SG_LC_KEY_LEN ||
	    memcmp(key, SG_LC_KEY_PREFIX, plen) != 0)
		return false;
	for (i = plen; i < len; i++) {
		char c = key[i];

		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
			return false;
	}
	return true;
}

bool
sg_lc_cluster_id_valid(const char *id, size_t len)
{
	size_t i;

	if (id == NULL || len == 0 || len > SG_ID_MAX)
		return false;
	for (i = 0; i < len; i++) {
		unsigned char c = (unsigned char)id[i];

		if (c < 0x20 || c > 0x7e)
			return false;
	}
	return true;
}
