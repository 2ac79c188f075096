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

/* Short fields (the usual key: a few dozen bytes) are hashed in one call
 * from this buffer rather than in six updates. */
#define KEY_BUF		256

static void
be64(unsigned char be[8], size_t len)
{
	uint64_t n = (uint64_t)len;
	int i;

	for (i = 7; i >= 0; i--) {
		be[i] = (unsigned char)(n & 0xff);
		n >>= 8;
	}
}

static void
put_field(sg_sha256_ctx *st, const char *s, size_t len)
{
	unsigned char be[8];

	be64(be, len);
	sg_sha256_update(st, be, sizeof(be));
	if (len > 0)
		sg_sha256_update(st, s, len);
}

/* Append the field to buf at *o (room checked by the caller). */
static void
buf_field(unsigned char *buf, size_t *o, const char *s, size_t len)
{
	be64(buf + *o, len);
	*o += 8;
	if (len > 0)
		memcpy(buf + *o, s, len);
	*o += len;
}

int
sg_lc_key_digest(unsigned char out[SG_LC_DIGEST_LEN], const char *routing_key,
    size_t rk_len, const char *model, size_t model_len,
    const char *affinity_key, size_t ak_len)
{
	sg_sha256_ctx st;

	if (out == NULL || (routing_key == NULL && rk_len > 0) ||
	    (model == NULL && model_len > 0) ||
	    (affinity_key == NULL && ak_len > 0))
		return SG_EINVAL;
	if (rk_len < KEY_BUF && model_len < KEY_BUF && ak_len < KEY_BUF &&
	    rk_len + model_len + ak_len <= KEY_BUF - 24) {
		unsigned char buf[KEY_BUF];
		size_t o = 0;

		buf_field(buf, &o, routing_key, rk_len);
		buf_field(buf, &o, model, model_len);
		buf_field(buf, &o, affinity_key, ak_len);
		sg_sha256(out, buf, o);
		return 0;
	}
	sg_sha256_init(&st);
	put_field(&st, routing_key, rk_len);
	put_field(&st, model, model_len);
	put_field(&st, affinity_key, ak_len);
	sg_sha256_final(&st, out);
	return 0;
}

int
sg_lc_key(char out[SG_LC_KEY_LEN + 1], const char *routing_key, size_t rk_len,
    const char *model, size_t model_len, const char *affinity_key,
    size_t ak_len)
{
	unsigned char digest[SG_LC_DIGEST_LEN];
	size_t plen = sizeof(SG_LC_KEY_PREFIX) - 1;
	int rc;

	if (out == NULL)
		return SG_EINVAL;
	if ((rc = sg_lc_key_digest(digest, routing_key, rk_len, model,
	    model_len, affinity_key, ak_len)) != 0)
		return rc;
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
