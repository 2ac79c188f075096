/*
 * sg_store_redis.h — the Redis backend's internal interface.  Never
 * installed.
 *
 * Three files:
 *   sg_store_redis_url.c    the URL forms, the value codec and Redis
 *                           Cluster's key slots: pure functions, no I/O;
 *   sg_store_redis.c        the backend's ops for tools: blocking hiredis
 *                           with timeouts (opts.event_base NULL);
 *   sg_store_redis_async.c  the same ops on a libevent loop: hiredis's
 *                           asynchronous API, never blocking.
 *
 * Value encoding.  A Redis value is the write time and the cluster id:
 * "<written_ms>:<cluster id>", written_ms in decimal (1..20 digits, no
 * sign, no leading zero unless 0) and the cluster id verbatim (1..256
 * printable ASCII bytes, which may themselves contain ':': the first ':'
 * ends the time).  The key is the "lc:v1:" text key, so every host computes
 * the same key, and `redis-cli GET` shows a readable value.  A value that
 * does not decode is a miss, as in LMDB.  SET carries PX with the time left
 * (TTL minus the entry's age), so Redis expires an entry exactly when LMDB
 * would; a reader also treats an entry as expired by age, in case readers
 * run a shorter TTL than writers.
 */
#ifndef SG_STORE_REDIS_H
#define SG_STORE_REDIS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sg_store_internal.h"

#define SGR_HOSTS_MAX		16	/* sentinels or seed nodes in a URL */
#define SGR_HOST_MAX		256	/* host name, with NUL */
#define SGR_CRED_MAX		256	/* user or password, with NUL */
#define SGR_VALUE_MAX		(20 + 1 + SG_ID_MAX)	/* encoded value */
#define SGR_SLOTS		16384
#define SGR_DEFAULT_PORT	6379
#define SGR_DEFAULT_SENTINEL_PORT 26379

/* Timeouts of the blocking (tools) mode and of the loop's handshake. */
#define SGR_CONNECT_TIMEOUT_MS	1000
#define SGR_COMMAND_TIMEOUT_MS	2000
/* Reconnect backoff on the loop: first wait, doubling up to the cap. */
#define SGR_BACKOFF_MIN_MS	50
#define SGR_BACKOFF_MAX_MS	2000
/* A connection whose oldest command waits this long is dropped. */
#define SGR_STALL_MS		1000
/* Commands in flight per connection; beyond, lookups fail at once. */
#define SGR_INFLIGHT_MAX	8192
/* MOVED/ASK redirects followed for one command. */
#define SGR_REDIRECTS_MAX	5

enum sgr_kind { SGR_SINGLE, SGR_SENTINEL, SGR_CLUSTER };

struct sgr_addr {
	char	host[SGR_HOST_MAX];
	int	port;
};

struct sgr_url {
	int		kind;			/* enum sgr_kind */
	char		user[SGR_CRED_MAX];	/* "" = none (AUTH password) */
	char		pass[SGR_CRED_MAX];	/* "" = no AUTH */
	struct sgr_addr	hosts[SGR_HOSTS_MAX];	/* server, sentinels, seeds */
	size_t		nhosts;
	char		master[SGR_HOST_MAX];	/* Sentinel's master name */
	int		db;			/* SELECT (not with Cluster) */
};

/* True if path names a Redis store (any of the URL schemes). */
bool	sgr_is_url(const char *path);

/*
 * Parse one of
 *   redis://[[user]:password@]host[:port][/db]
 *   redis+sentinel://[password@]host[:port][,host[:port]...]/master[/db]
 *   redis+cluster://[[user]:password@]host[:port][,host[:port]...]
 * (%XX escapes allowed in user and password; default ports 6379 and, for
 * sentinels, 26379).  Returns 0, or SG_ECONFIG with a message that never
 * contains the password.
 */
int	sgr_url_parse(struct sgr_url *u, const char *s, sg_error *err);

/* Encode a value; out has SGR_VALUE_MAX bytes.  Returns its length. */
size_t	sgr_value_encode(char *out, uint64_t written_ms, const char *id,
	    size_t id_len);

/* Decode v[0..len): 0, or SG_EINVAL (then a miss). *id points into v. */
int	sgr_value_decode(const char *v, size_t len, uint64_t *written_ms,
	    const char **id, size_t *id_len);

/* Redis Cluster's slot of a key: CRC16 (XMODEM) of the key, or of its
 * hash tag (the bytes between the first '{' and the next '}', if any),
 * modulo 16384. */
unsigned sgr_key_slot(const char *key, size_t len);

/*
 * The milliseconds a SET should carry (PX) for an entry written at
 * written_ms, at now_ms, under ttl_ms; 0 when it is already expired.
 */
uint64_t sgr_px(uint64_t written_ms, uint64_t now_ms, uint64_t ttl_ms);

/* --- shared by both modes (sg_store_redis.c) ---------------------------- */

struct redisReply;

/* A MOVED or ASK error reply: *ask, the slot and the node it names. */
bool	sgr_parse_redirect(const struct redisReply *rep, bool *ask,
	    unsigned *slot, struct sgr_addr *a);

/*
 * Walk a CLUSTER SLOTS reply: fn(arg, lo, hi, primary) for each slot
 * range; a primary whose host is empty is on the host that answered
 * (asked).  Returns 0, fn's non-zero, or SG_ESTORE for a malformed reply.
 */
typedef int sgr_slots_fn(void *arg, unsigned lo, unsigned hi,
	    const struct sgr_addr *primary);
int	sgr_parse_slots(const struct redisReply *rep, const char *asked,
	    sgr_slots_fn *fn, void *arg);

/* A SENTINEL get-master-addr-by-name reply into *a: 0, or SG_ENOTFOUND. */
int	sgr_parse_master_addr(const struct redisReply *rep, struct sgr_addr *a);

/* A ROLE reply says "master". */
bool	sgr_role_is_master(const struct redisReply *rep);

/* An error reply as an error: EACCES (NOAUTH, WRONGPASS), EROFS
 * (READONLY), EAGAIN (LOADING, TRYAGAIN, CLUSTERDOWN), else SG_ESTORE; the
 * reply's text (never a password) goes into err after what. */
int	sgr_reply_error(const struct redisReply *rep, const char *what,
	    sg_error *err);

/* Decode a GET reply into *e for key k at now_ms under ttl_ms: 0 hit,
 * SG_ENOTFOUND (nil, undecodable, expired by age), or an error. */
int	sgr_get_entry(const struct redisReply *rep, const sgi_lckey *k,
	    uint64_t now_ms, uint64_t ttl_ms, sg_store_entry *e, sg_error *err);

/* Backends.  o is validated and complete; front is for lookup callbacks. */
int	sgi_store_redis_open(void **be, const struct sgi_store_ops **ops,
	    const sg_store_opts *o, sg_error *err);
int	sgi_store_redis_async_open(void **be, const struct sgi_store_ops **ops,
	    const sg_store_opts *o, sg_store *front, sg_error *err);

#endif /* SG_STORE_REDIS_H */
