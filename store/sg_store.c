/*
 * sg_store.c — the last-cluster store's front: option defaults and checks,
 * key parsing, cluster id validation, and dispatch to a backend through
 * struct sgi_store_ops.  Backends (sg_store_lmdb.c; sg_store_redis*.c for
 * "redis://" and its siblings) never see a malformed key or id.
 *
 * The event-loop side lives here too, the same for every backend:
 *   - commit records: the front puts its own on_commit in front of the
 *     caller's; on the store thread it appends the record to a ring (a
 *     fixed array, merged into its newest record when full, so the store
 *     thread never allocates or waits for the loop) and writes the
 *     eventfd; sg_store_drain() reads the eventfd first and then empties
 *     the ring, so a record added after the read writes it again and no
 *     wake-up is lost;
 *   - lookups with a deadline: a backend with a non-blocking lookup
 *     (lookup_nowait) answers inside sg_store_lookup_start(); the pending
 *     list, sg_store_dispatch() and sg_store_next_deadline() are there for
 *     a backend that answers later (the list belongs to the loop thread
 *     and is empty with LMDB).
 */
#include <sys/eventfd.h>

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "sg_store_internal.h"
#include "sg_store_redis.h"

struct sg_store {
	const struct sgi_store_ops	*ops;
	void				*be;
	sg_store_opts			 o;

	/* Commit records for the loop (o.events), guarded by ev_mu. */
	pthread_mutex_t			 ev_mu;
	sg_store_commit			 ring[SG_STORE_EVENT_RING];
	size_t				 ring_head, ring_len;
	int				 evfd;
	sg_store_commit_fn		*user_commit;
	void				*user_arg;

	/* Pending lookups, loop thread only. */
	sg_store_lookup_req		*pending;
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

#ifndef __SSE2__	/* else hex16(), below */
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
#else
/*
 * 16 hex digits to 8 bytes with SSE2 (every x86-64 has it): range checks
 * by signed byte compares (a byte >= 0x80 is negative and fails them),
 * nibble values as in hex8(), then each pair of nibbles joined in its
 * 16-bit lane and the lanes packed.  About a quarter of hex8()'s
 * instructions for the same digits.
 */
static bool
hex16(const unsigned char *p, unsigned char out[8])
{
	__m128i x, ge0, le9, gea, lef, ok, v, w;

	x = _mm_loadu_si128((const __m128i *)(const void *)p);
	ge0 = _mm_cmpgt_epi8(x, _mm_set1_epi8('0' - 1));
	le9 = _mm_cmplt_epi8(x, _mm_set1_epi8('9' + 1));
	gea = _mm_cmpgt_epi8(x, _mm_set1_epi8('a' - 1));
	lef = _mm_cmplt_epi8(x, _mm_set1_epi8('f' + 1));
	ok = _mm_or_si128(_mm_and_si128(ge0, le9), _mm_and_si128(gea, lef));
	if (_mm_movemask_epi8(ok) != 0xffff)
		return false;
	v = _mm_add_epi8(_mm_and_si128(x, _mm_set1_epi8(0x0f)),
	    _mm_and_si128(gea, _mm_set1_epi8(9)));
	/* Lane i: high nibble in its low byte, low nibble in its high. */
	w = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(v,
	    _mm_set1_epi16(0x00ff)), 4), _mm_srli_epi16(v, 8));
	_mm_storel_epi64((__m128i *)(void *)out, _mm_packus_epi16(w, w));
	return true;
}
#endif

int
sgi_lckey_parse(sgi_lckey *k, const char *key, size_t len)
{
	size_t plen = sizeof(SG_LC_KEY_PREFIX) - 1, i;
	const unsigned char *h;

	if (key == NULL || len != SG_LC_KEY_LEN ||
	    memcmp(key, SG_LC_KEY_PREFIX, plen) != 0)
		return SG_EINVAL;
	h = (const unsigned char *)key + plen;
#ifdef __SSE2__
	for (i = 0; i < SGI_DIGEST_LEN / 8; i++)
		if (!hex16(h + 16 * i, k->digest + 8 * i))
			return SG_EINVAL;
#else
	for (i = 0; i < SGI_DIGEST_LEN / 4; i++)
		if (!hex8(h + 8 * i, k->digest + 4 * i))
			return SG_EINVAL;
#endif
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

/* The key of a _digest entry point: the text only for a backend that
 * reads it (struct sgi_store_ops, digest_keys). */
static void
key_from_digest(const sg_store *s, sgi_lckey *k, const unsigned char *digest)
{
	if (s->ops->digest_keys) {
		memcpy(k->digest, digest, SGI_DIGEST_LEN);
		k->text[0] = '\0';
	} else
		sgi_lckey_from_digest(k, digest);
}

/* Runs on the store thread after each write transaction. */
static void
front_commit(const sg_store_commit *c, void *arg)
{
	sg_store *s = arg;
	uint64_t one = 1;
	ssize_t w;

	pthread_mutex_lock(&s->ev_mu);
	if (s->ring_len < SG_STORE_EVENT_RING) {
		s->ring[(s->ring_head + s->ring_len) %
		    SG_STORE_EVENT_RING] = *c;
		s->ring_len++;
	} else {
		sg_store_commit *last = &s->ring[(s->ring_head + s->ring_len -
		    1) % SG_STORE_EVENT_RING];

		last->ops += c->ops;
		last->ops_done = c->ops_done;
		last->committed = c->committed;
		if (last->rc == 0)
			last->rc = c->rc;
	}
	pthread_mutex_unlock(&s->ev_mu);
	/* Non-blocking: a full counter is already readable. */
	w = write(s->evfd, &one, sizeof(one));
	(void)w;
	if (s->user_commit != NULL)
		s->user_commit(c, s->user_arg);
}

static void
store_free(sg_store *s)
{
	if (s->evfd >= 0)
		close(s->evfd);
	pthread_mutex_destroy(&s->ev_mu);
	free(s);
}

int
sg_store_open(sg_store **out, const sg_store_opts *o, sg_error *err)
{
	sg_store *s = NULL;
	sg_store_opts bo;
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
	if ((s = calloc(1, sizeof(*s))) == NULL)
		return sg_seterr(err, SG_ENOMEM, "out of memory");
	s->o = *o;
	s->o.path = NULL;	/* the backend keeps its own copy */
	s->evfd = -1;
	pthread_mutex_init(&s->ev_mu, NULL);
	bo = *o;
	if (o->events) {
		if ((s->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0) {
			rc = sg_seterr(err, errno, "eventfd: %s",
			    strerror(errno));
			store_free(s);
			return rc;
		}
		s->user_commit = o->on_commit;
		s->user_arg = o->commit_arg;
		bo.on_commit = front_commit;
		bo.commit_arg = s;
	}
	if (sgr_is_url(o->path) && o->event_base != NULL)
		rc = sgi_store_redis_async_open(&s->be, &s->ops, &bo, s, err);
	else if (sgr_is_url(o->path))
		rc = sgi_store_redis_open(&s->be, &s->ops, &bo, err);
	else
		rc = sgi_store_lmdb_open(&s->be, &s->ops, &bo, err);
	if (rc != 0) {
		store_free(s);
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
	store_free(s);
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
	return s->ops->put(s->be, &k, id, id_len, written_ms, NULL, err);
}

int
sg_store_put(sg_store *s, const char *key, size_t key_len, const char *id,
    size_t id_len, sg_error *err)
{
	return sg_store_put_at(s, key, key_len, id, id_len,
	    sgi_store_now(&s->o), err);
}

static int
put_key(sg_store *s, const sgi_lckey *k, const char *id, size_t id_len,
    uint64_t *seq, sg_error *err)
{
	if (!sg_lc_cluster_id_valid(id, id_len))
		return sg_seterr(err, SG_EINVAL, "invalid cluster id: "
		    "must be 1..%d bytes of printable ASCII", SG_ID_MAX);
	return s->ops->put(s->be, k, id, id_len, sgi_store_now(&s->o), seq,
	    err);
}

int
sg_store_put_seq(sg_store *s, const char *key, size_t key_len,
    const char *id, size_t id_len, uint64_t *seq, sg_error *err)
{
	sgi_lckey k;
	int rc;

	if ((rc = parse_key(&k, key, key_len, err)) != 0)
		return rc;
	return put_key(s, &k, id, id_len, seq, err);
}

int
sg_store_put_digest_seq(sg_store *s,
    const unsigned char digest[SG_LC_DIGEST_LEN], const char *id,
    size_t id_len, uint64_t *seq, sg_error *err)
{
	sgi_lckey k;

	if (digest == NULL)
		return sg_seterr(err, SG_EINVAL, "no store key digest");
	key_from_digest(s, &k, digest);
	return put_key(s, &k, id, id_len, seq, err);
}

void
sgi_store_set_hook(sg_store *s, const struct sgi_store_hook *h)
{
	if (s->ops->set_hook != NULL)
		s->ops->set_hook(s->be, h);
}

/* --- from an event loop ------------------------------------------------- */

uint64_t
sg_store_mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

bool
sg_store_connected(sg_store *s)
{
	if (s->ops->connected == NULL)
		return true;
	return s->ops->connected(s->be);
}

static void
req_done(sg_store_lookup_req *req, int rc)
{
	req->rc = rc;
	req->pending = false;
	req->next = req->prev = NULL;
}

static void
req_init(sg_store_lookup_req *req, uint64_t deadline_ns,
    sg_store_lookup_cb *cb, void *arg)
{
	memset(req, 0, sizeof(*req));
	req->cb = cb;
	req->arg = arg;
	req->deadline_ns = deadline_ns;
}

static int lookup_key(sg_store *, sg_store_lookup_req *, const sgi_lckey *);

int
sg_store_lookup_start(sg_store *s, sg_store_lookup_req *req, const char *key,
    size_t key_len, uint64_t deadline_ns, sg_store_lookup_cb *cb, void *arg)
{
	sgi_lckey k;
	int rc;

	req_init(req, deadline_ns, cb, arg);
	if ((rc = parse_key(&k, key, key_len, &req->err)) != 0) {
		req_done(req, rc);
		return rc;
	}
	return lookup_key(s, req, &k);
}

int
sg_store_lookup_start_digest(sg_store *s, sg_store_lookup_req *req,
    const unsigned char digest[SG_LC_DIGEST_LEN], uint64_t deadline_ns,
    sg_store_lookup_cb *cb, void *arg)
{
	sgi_lckey k;

	req_init(req, deadline_ns, cb, arg);
	if (digest == NULL) {
		sg_seterr(&req->err, SG_EINVAL, "no store key digest");
		req_done(req, SG_EINVAL);
		return SG_EINVAL;
	}
	key_from_digest(s, &k, digest);
	return lookup_key(s, req, &k);
}

/* Both lookups, once the key is known. */
static int
lookup_key(sg_store *s, sg_store_lookup_req *req, const sgi_lckey *kp)
{
	uint64_t deadline_ns = req->deadline_ns;
	int rc;

	if (sg_store_mono_ns() >= deadline_ns) {
		sg_seterr(&req->err, ETIMEDOUT, "lookup deadline passed");
		req_done(req, ETIMEDOUT);
		return 0;
	}
	if (s->ops->lookup_start != NULL) {
		req->pending = true;
		if (s->ops->lookup_start(s->be, kp, req) != EINPROGRESS) {
			req_done(req, req->rc);
			return 0;
		}
		req->prev = NULL;
		req->next = s->pending;
		if (s->pending != NULL)
			s->pending->prev = req;
		s->pending = req;
		return EINPROGRESS;
	}
	rc = s->ops->lookup_nowait(s->be, kp, &req->entry, &req->err);
	req_done(req, rc);
	return 0;
}

static void
unlink_pending(sg_store *s, sg_store_lookup_req *req)
{
	if (req->prev != NULL)
		req->prev->next = req->next;
	else
		s->pending = req->next;
	if (req->next != NULL)
		req->next->prev = req->prev;
}

void
sgi_store_lookup_finish(sg_store *s, sg_store_lookup_req *req, int rc)
{
	if (!req->pending)
		return;
	unlink_pending(s, req);
	req_done(req, rc);
	req->op = NULL;
	if (req->cb != NULL)
		req->cb(req, req->arg);
}

void
sg_store_lookup_cancel(sg_store *s, sg_store_lookup_req *req)
{
	if (req == NULL || !req->pending)
		return;
	if (s->ops->lookup_cancel != NULL)
		s->ops->lookup_cancel(s->be, req);
	unlink_pending(s, req);
	req->op = NULL;
	req_done(req, ECANCELED);
}

size_t
sg_store_dispatch(sg_store *s, uint64_t now_ns)
{
	sg_store_lookup_req *req, *next;
	size_t n = 0;

	for (req = s->pending; req != NULL; req = next) {
		next = req->next;
		if (now_ns < req->deadline_ns)
			continue;
		sg_store_lookup_cancel(s, req);
		sg_seterr(&req->err, ETIMEDOUT, "lookup deadline passed");
		req->rc = ETIMEDOUT;
		if (req->cb != NULL)
			req->cb(req, req->arg);
		n++;
	}
	return n;
}

bool
sg_store_next_deadline(sg_store *s, uint64_t *deadline_ns)
{
	const sg_store_lookup_req *req;
	bool any = false;

	for (req = s->pending; req != NULL; req = req->next)
		if (!any || req->deadline_ns < *deadline_ns) {
			*deadline_ns = req->deadline_ns;
			any = true;
		}
	return any;
}

int
sg_store_event_fd(sg_store *s)
{
	return s->evfd;
}

size_t
sg_store_drain(sg_store *s, sg_store_commit *out, size_t max)
{
	uint64_t v;
	ssize_t r;
	size_t n = 0;

	if (s->evfd < 0)
		return 0;
	r = read(s->evfd, &v, sizeof(v));	/* first: see the top comment */
	(void)r;
	pthread_mutex_lock(&s->ev_mu);
	while (n < max && s->ring_len > 0) {
		out[n++] = s->ring[s->ring_head];
		s->ring_head = (s->ring_head + 1) % SG_STORE_EVENT_RING;
		s->ring_len--;
	}
	if (s->ring_len > 0) {
		v = 1;
		r = write(s->evfd, &v, sizeof(v));	/* still readable */
		(void)r;
	}
	pthread_mutex_unlock(&s->ev_mu);
	return n;
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
