/*
 * sg_store.c — the last-cluster store's front: option defaults and checks,
 * key parsing, cluster id validation, and dispatch to a backend through
 * struct sgi_store_ops.  Backends (sg_store_lmdb.c, a future Redis one)
 * never see a malformed key or id.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sg_store_internal.h"

struct sg_store {
	const struct sgi_store_ops	*ops;
	void				*be;
	sg_store_opts			 o;
};

void
sg_store_opts_init(sg_store_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->path = SG_STORE_DEFAULT_PATH;
	o->ttl_ms = SG_STORE_DEFAULT_TTL_MS;
	o->max_entries = SG_STORE_DEFAULT_MAX_ENTRIES;
	o->map_size = SG_STORE_DEFAULT_MAP_SIZE;
	o->map_size_max = SG_STORE_DEFAULT_MAP_SIZE_MAX;
	o->sync_interval_ms = SG_STORE_DEFAULT_SYNC_MS;
	o->max_readers = SG_STORE_DEFAULT_MAX_READERS;
	o->batch_max = SG_STORE_DEFAULT_BATCH;
	o->queue_max = SG_STORE_DEFAULT_QUEUE;
}

uint64_t
sgi_store_now(const sg_store_opts *o)
{
	struct timespec ts;

	if (o->clock != NULL)
		return o->clock(o->clock_arg);
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/*
 * Hex to bytes, 8 characters at a time (SWAR): this runs on every lookup,
 * where a branch per character costs more than the rest of the parsing.
 * For ASCII bytes b (high bit clear), b + (0x80 - c) has its high bit set
 * iff b >= c, with no carry between bytes.
 */
#define ONES	0x0101010101010101ULL
#define HIGHS	0x8080808080808080ULL

static bool
hex8(const unsigned char *p, unsigned char out[4])
{
	uint64_t x, digit, alpha, v, t;

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	memcpy(&x, p, 8);		/* byte i is p[i] */
#else
	int i;

	for (x = 0, i = 7; i >= 0; i--)
		x = x << 8 | p[i];
#endif
	if (x & HIGHS)
		return false;
	digit = (x + (0x80 - '0') * ONES) & ~(x + (0x80 - '9' - 1) * ONES);
	alpha = (x + (0x80 - 'a') * ONES) & ~(x + (0x80 - 'f' - 1) * ONES);
	if (((digit | alpha) & HIGHS) != HIGHS)
		return false;
	/* '0'..'9' -> low nibble; 'a'..'f' -> low nibble + 9 (bit 6 set). */
	v = (x & 0x0f * ONES) + 9 * ((x >> 6) & ONES);
	t = ((v << 4) | (v >> 8)) & 0x00ff00ff00ff00ffULL;
	t = (t | (t >> 8)) & 0x0000ffff0000ffffULL;
	t = (t | (t >> 16)) & 0xffffffffULL;
	out[0] = (unsigned char)t;
	out[1] = (unsigned char)(t >> 8);
	out[2] = (unsigned char)(t >> 16);
	out[3] = (unsigned char)(t >> 24);
	return true;
}

int
sgi_lckey_parse(sgi_lckey *k, const char *key, size_t len)
{
	size_t plen = sizeof(SG_LC_KEY_PREFIX) - 1, i;
	const unsigned char *h;

	if (key == NULL || len != SG_LC_KEY_LEN ||
	    memcmp(key, SG_LC_KEY_PREFIX, plen) != 0)
		return SG_EINVAL;
	h = (const unsigned char *)key + plen;
	for (i = 0; i < SGI_DIGEST_LEN / 4; i++)
		if (!hex8(h + 8 * i, k->digest + 4 * i))
			return SG_EINVAL;
	memcpy(k->text, key, SG_LC_KEY_LEN);
	k->text[SG_LC_KEY_LEN] = '\0';
	return 0;
}

void
sgi_lckey_from_digest(sgi_lckey *k, const unsigned char *digest)
{
	size_t plen = sizeof(SG_LC_KEY_PREFIX) - 1;

	memcpy(k->digest, digest, SGI_DIGEST_LEN);
	memcpy(k->text, SG_LC_KEY_PREFIX, plen);
	sg_hex(k->text + plen, digest, SGI_DIGEST_LEN);
}

int
sg_store_open(sg_store **out, const sg_store_opts *o, sg_error *err)
{
	sg_store *s = NULL;
	int rc;

	if (out == NULL || o == NULL)
		return sg_seterr(err, SG_EINVAL, "no options");
	if (o->path == NULL || o->path[0] == '\0')
		return sg_seterr(err, SG_ECONFIG, "store path is empty");
	if (o->ttl_ms == 0)
		return sg_seterr(err, SG_ECONFIG, "TTL must be > 0");
	if (o->max_entries == 0)
		return sg_seterr(err, SG_ECONFIG, "max entries must be > 0");
	if (o->batch_max == 0 || o->queue_max == 0)
		return sg_seterr(err, SG_ECONFIG,
		    "batch and queue sizes must be > 0");
	if (o->map_size == 0 || o->map_size_max < o->map_size)
		return sg_seterr(err, SG_ECONFIG,
		    "map size must be > 0 and <= the maximum map size");
	if (o->max_readers == 0)
		return sg_seterr(err, SG_ECONFIG, "max readers must be > 0");
	if (strncmp(o->path, "redis://", 8) == 0 ||
	    strncmp(o->path, "rediss://", 9) == 0)
		return sg_seterr(err, SG_ECONFIG,
		    "the Redis backend is not built into this library");
	if ((s = calloc(1, sizeof(*s))) == NULL)
		return sg_seterr(err, SG_ENOMEM, "out of memory");
	s->o = *o;
	s->o.path = NULL;	/* the backend keeps its own copy */
	if ((rc = sgi_store_lmdb_open(&s->be, &s->ops, o, err)) != 0) {
		free(s);
		return rc;
	}
	*out = s;
	return 0;
}

void
sg_store_close(sg_store *s)
{
	if (s == NULL)
		return;
	s->ops->close(s->be);
	free(s);
}

static int
parse_key(sgi_lckey *k, const char *key, size_t len, sg_error *err)
{
	if (sgi_lckey_parse(k, key, len) != 0)
		return sg_seterr(err, SG_EINVAL,
		    "store key is not lc:v1: followed by 64 lowercase hex digits");
	return 0;
}

int
sg_store_lookup(sg_store *s, const char *key, size_t key_len,
    sg_store_entry *out, sg_error *err)
{
	sgi_lckey k;
	int rc;

	if ((rc = parse_key(&k, key, key_len, err)) != 0)
		return rc;
	return s->ops->lookup(s->be, &k, out, err);
}

int
sg_store_put_at(sg_store *s, const char *key, size_t key_len, const char *id,
    size_t id_len, uint64_t written_ms, sg_error *err)
{
	sgi_lckey k;
	int rc;

	if ((rc = parse_key(&k, key, key_len, err)) != 0)
		return rc;
	if (!sg_lc_cluster_id_valid(id, id_len))
		return sg_seterr(err, SG_EINVAL, "invalid cluster id: "
		    "must be 1..%d bytes of printable ASCII", SG_ID_MAX);
	return s->ops->put(s->be, &k, id, id_len, written_ms, err);
}

int
sg_store_put(sg_store *s, const char *key, size_t key_len, const char *id,
    size_t id_len, sg_error *err)
{
	return sg_store_put_at(s, key, key_len, id, id_len,
	    sgi_store_now(&s->o), err);
}

int
sg_store_del(sg_store *s, const char *key, size_t key_len, sg_error *err)
{
	sgi_lckey k;
	int rc;

	if ((rc = parse_key(&k, key, key_len, err)) != 0)
		return rc;
	return s->ops->del(s->be, &k, err);
}

int
sg_store_flush(sg_store *s, sg_error *err)
{
	return s->ops->flush(s->be, err);
}

int
sg_store_iterate(sg_store *s, bool include_expired, sg_store_iter_fn *fn,
    void *arg, sg_error *err)
{
	if (fn == NULL)
		return sg_seterr(err, SG_EINVAL, "no callback");
	return s->ops->iterate(s->be, include_expired, fn, arg, err);
}

int
sg_store_stats_get(sg_store *s, sg_store_stats *st, sg_error *err)
{
	sg_store_stats tmp;
	int rc;

	memset(&tmp, 0, sizeof(tmp));
	tmp.backend = s->ops->name;
	tmp.ttl_ms = s->o.ttl_ms;
	tmp.max_entries = s->o.max_entries;
	if ((rc = s->ops->stats(s->be, &tmp, err)) != 0)
		return rc;
	*st = tmp;
	return 0;
}

int
sg_store_compact(sg_store *s, sg_store_compact_result *r, sg_error *err)
{
	sg_store_compact_result tmp;
	int rc;

	memset(&tmp, 0, sizeof(tmp));
	if ((rc = s->ops->compact(s->be, &tmp, err)) != 0)
		return rc;
	if (r != NULL)
		*r = tmp;
	return 0;
}
