/*
 * sg_sha256.h — SHA-256 (FIPS 180-4) for the per-request hashes of the
 * gateway and router stages: session identities, cache affinity keys and
 * the keys of the decision log.  The digests are those of any other
 * SHA-256 (sha256sum(1), libsodium's crypto_hash_sha256); only the speed
 * differs: the x86 SHA extensions where the processor has them (detected
 * at run time), portable C elsewhere.
 */
#ifndef SG_SHA256_H
#define SG_SHA256_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SG_SHA256_BYTES		32
#define SG_SHA256_HEX_LEN	64	/* lower-case hex digits, without NUL */

/* An incremental hash; plain data, no resources: nothing to release. */
typedef struct sg_sha256_ctx {
	uint32_t	h[8];
	uint64_t	total;		/* bytes hashed so far */
	unsigned char	buf[64];	/* the partial block */
	size_t		nbuf;		/* bytes in buf, < 64 */
	bool		portable;	/* sg_sha256_init_portable() */
} sg_sha256_ctx;

void	sg_sha256_init(sg_sha256_ctx *c);
/*
 * As sg_sha256_init(), but this hash runs the portable implementation
 * even where the hardware one exists: for tests and benchmarks that
 * compare the two (the digests are the same).
 */
void	sg_sha256_init_portable(sg_sha256_ctx *c);
/* Hash len more bytes of data (data may be NULL when len is 0). */
void	sg_sha256_update(sg_sha256_ctx *c, const void *data, size_t len);
/* The digest of everything hashed; c must be initialised again for reuse. */
void	sg_sha256_final(sg_sha256_ctx *c, unsigned char out[SG_SHA256_BYTES]);

/* One-shot: the digest of len bytes of data (data may be NULL if len 0). */
void	sg_sha256(unsigned char out[SG_SHA256_BYTES], const void *data,
	    size_t len);

/*
 * One-shot, as 64 lower-case hex digits and a NUL in out (what sg_hex()
 * would print of sg_sha256()'s digest).
 */
void	sg_sha256_hex(char out[SG_SHA256_HEX_LEN + 1], const void *data,
	    size_t len);

/* Whether the hardware implementation is in use (sg_sha256_init()). */
bool	sg_sha256_accelerated(void);

#endif /* SG_SHA256_H */
