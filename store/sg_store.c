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

static int
hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

int
sgi_lckey_parse(sgi_lckey *k, const char *key, size_t len)
{
	size_t plen = sizeof(SG_LC_KEY_PREFIX) - 1, i;

	if (key == NULL || len != SG_LC_KEY_LEN ||
	    memcmp(key, SG_LC_KEY_PREFIX, plen) != 0)
		return SG_EINVAL;
	for (i = 0; i < SGI_DIGEST_LEN; i++) {
		int hi = hexval(key[plen + 2 * i]);
		int lo = hexval(key[plen + 2 * i + 1]);

		if (hi < 0 || lo < 0)
			return SG_EINVAL;
		k->digest[i] = (unsigned char)(hi << 4 | lo);
	}
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
