/*
 * sg_store_internal.h — the backend interface of the last-cluster store.
 * Never installed.
 *
 * sg_store.c validates every argument (key syntax, cluster id, options),
 * decodes the key once and dispatches through struct sgi_store_ops; a
 * backend sees only well-formed input.  A backend gets the key both as text
 * (what Redis stores) and as the 32-byte digest (what LMDB stores); one that
 * sets digest_keys may get the digest alone (an empty text).
 */
#ifndef SG_STORE_INTERNAL_H
#define SG_STORE_INTERNAL_H

#include "sg_store.h"

#define SGI_DIGEST_LEN	32

typedef struct sgi_lckey {
	char		text[SG_LC_KEY_LEN + 1];
	unsigned char	digest[SGI_DIGEST_LEN];
} sgi_lckey;

struct sgi_store_hook;

struct sgi_store_ops {
	const char *name;
	/*
	 * True: the backend reads only k->digest, and the _digest entry
	 * points leave k->text empty (""); false: the front fills the text.
	 */
	bool	digest_keys;
	int	(*lookup)(void *be, const sgi_lckey *k, sg_store_entry *out,
		    sg_error *err);
	/* Never waits: 0 hit, SG_ENOTFOUND, EBUSY, or an error. */
	int	(*lookup_nowait)(void *be, const sgi_lckey *k,
		    sg_store_entry *out, sg_error *err);
	int	(*put)(void *be, const sgi_lckey *k, const char *id,
		    size_t id_len, uint64_t written_ms, uint64_t *seq,
		    sg_error *err);
	int	(*del)(void *be, const sgi_lckey *k, sg_error *err);
	int	(*flush)(void *be, sg_error *err);
	int	(*iterate)(void *be, bool all, sg_store_iter_fn *fn, void *arg,
		    sg_error *err);
	int	(*stats)(void *be, sg_store_stats *st, sg_error *err);
	int	(*compact)(void *be, sg_store_compact_result *r, sg_error *err);
	void	(*close)(void *be);
	void	(*set_hook)(void *be, const struct sgi_store_hook *h);
	/* NULL: always connected (LMDB). */
	bool	(*connected)(void *be);
	/*
	 * A backend that answers later (Redis on a loop); NULL: lookup_nowait
	 * answers.  lookup_start returns 0 with req->rc set (answered at
	 * once), or EINPROGRESS and later calls sgi_store_lookup_finish()
	 * exactly once unless lookup_cancel (which must forget req) comes
	 * first.
	 */
	int	(*lookup_start)(void *be, const sgi_lckey *k,
		    sg_store_lookup_req *req);
	void	(*lookup_cancel)(void *be, sg_store_lookup_req *req);
};

/*
 * A backend's answer to a pending lookup: take req off the front's pending
 * list, set req->rc (and req->err when rc is an error, already filled by
 * the backend) and call the callback.  Loop thread only.
 */
void	sgi_store_lookup_finish(sg_store *s, sg_store_lookup_req *req, int rc);

/* Parse "lc:v1:" + 64 lowercase hex.  Returns 0 or SG_EINVAL. */
int	sgi_lckey_parse(sgi_lckey *k, const char *key, size_t len);
/* Text form of a digest. */
void	sgi_lckey_from_digest(sgi_lckey *k, const unsigned char *digest);
/* The opts' clock, or CLOCK_REALTIME in ms. */
uint64_t sgi_store_now(const sg_store_opts *o);

/*
 * Tests only: fn(arg, what) is called by the store thread with the
 * environment write-locked, what = "grow", "adopt" or "reopen", so that a
 * test can hold the lock and show that sg_store_lookup_start() does not
 * wait for it.  h (owned by the caller, NULL to remove) must outlive its
 * use.  Per handle: the store keeps no process-global state but its
 * registry.
 */
struct sgi_store_hook {
	void	(*fn)(void *arg, const char *what);
	void	*arg;
};
void	sgi_store_set_hook(sg_store *s, const struct sgi_store_hook *h);

/* LMDB backend (sg_store_lmdb.c).  o is validated and complete. */
int	sgi_store_lmdb_open(void **be, const struct sgi_store_ops **ops,
	    const sg_store_opts *o, sg_error *err);

#endif /* SG_STORE_INTERNAL_H */
