/*
 * sg_store.h — the last-cluster store: for each chat session, the cluster
 * that served its last request (SPEC.md §5, ref §7.4).
 *
 * Keys are derived, never raw: sg_lc_key() hashes the routing key, the model
 * and the cache affinity key into "lc:v1:" + 64 lowercase hex digits, so no
 * session id or affinity key ever reaches disk.
 */
#ifndef SG_STORE_H
#define SG_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sg_common.h"

/* "lc:v1:" + 64 hex digits. */
#define SG_LC_KEY_PREFIX	"lc:v1:"
#define SG_LC_KEY_LEN		70

/*
 * Store key of a session: "lc:v1:" + lowercase hex SHA-256 of
 * u64be(rk_len) || rk || u64be(model_len) || model || u64be(ak_len) || ak.
 * An absent routing key is the empty string (rk may be NULL when rk_len is
 * 0; likewise model and affinity_key).  Writes SG_LC_KEY_LEN characters and
 * a NUL into out.  Returns 0, or SG_EINVAL on a NULL pointer with a non-zero
 * length.
 */
int	sg_lc_key(char out[SG_LC_KEY_LEN + 1], const char *routing_key,
	    size_t rk_len, const char *model, size_t model_len,
	    const char *affinity_key, size_t ak_len);

/* True if key[0..len) looks like a store key: "lc:v1:" + 64 lowercase hex. */
bool	sg_lc_key_valid(const char *key, size_t len);

/* True if id[0..len) is a valid cluster id: 1..256 bytes, each 0x20..0x7e. */
bool	sg_lc_cluster_id_valid(const char *id, size_t len);

#endif /* SG_STORE_H */
