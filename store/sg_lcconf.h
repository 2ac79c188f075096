/*
 * sg_lcconf.h — the settings of the last-cluster feature: the four
 * STARGATE_LAST_CLUSTER_* variables of the reference gateway
 * (sg-lastcluster(1)) plus STARGATE_LAST_CLUSTER_STORE (sg-lastcluster(1)),
 * with their defaults, their parsing and the messages that name them.  sg-proxy
 * and sg-lastcluster read the same variables through this one module, so a
 * value means the same thing to both and is refused by both alike.
 *
 * The library never reads the environment: the program hands over a
 * lookup function (getenv(3) itself fits) or sets values one by one, and
 * flags, which win over the environment, go through the same setter with
 * the flag's name as the label of the message.
 *
 *   variable                                 default   rule
 *   STARGATE_LAST_CLUSTER_ENABLED            false     Go ParseBool
 *   STARGATE_LAST_CLUSTER_TTL                10m       Go duration > 0
 *   STARGATE_LAST_CLUSTER_LOOKUP_TIMEOUT     20ms      Go duration > 0
 *   STARGATE_LAST_CLUSTER_LOCAL_MAX_ENTRIES  100000    integer > 0
 *   STARGATE_LAST_CLUSTER_STORE              SG_STORE_DEFAULT_PATH
 *                                                      LMDB directory, or
 *                                                      redis://...
 *
 * Values are trimmed of white space; an unset or blank variable keeps the
 * default.  A TTL below a millisecond rounds up to 1 ms (the store counts
 * milliseconds); the lookup timeout keeps nanoseconds.  A redis:// (or
 * rediss://, redis+sentinel://, redis+cluster://) value selects the Redis
 * backend; sg_store_open() checks the URL itself (and refuses rediss://:
 * TLS is not built in).
 */
#ifndef SG_LCCONF_H
#define SG_LCCONF_H

#include <stdbool.h>
#include <stdint.h>

#include "sg_common.h"
#include "sg_store.h"

#define SG_LCCONF_ENABLED	"STARGATE_LAST_CLUSTER_ENABLED"
#define SG_LCCONF_TTL		"STARGATE_LAST_CLUSTER_TTL"
#define SG_LCCONF_TIMEOUT	"STARGATE_LAST_CLUSTER_LOOKUP_TIMEOUT"
#define SG_LCCONF_MAX_ENTRIES	"STARGATE_LAST_CLUSTER_LOCAL_MAX_ENTRIES"
#define SG_LCCONF_STORE		"STARGATE_LAST_CLUSTER_STORE"

#define SG_LCCONF_DEFAULT_TIMEOUT_NS	20000000ULL	/* 20ms */
#define SG_LCCONF_STORE_MAX		4096	/* bytes of the store, with NUL */

enum sg_lc_backend {
	SG_LC_BACKEND_LMDB = 0,		/* a directory */
	SG_LC_BACKEND_REDIS,		/* redis://, rediss://, redis+...:// */
};

typedef struct sg_lcconf {
	bool		 enabled;
	uint64_t	 ttl_ms;		/* > 0 */
	uint64_t	 lookup_timeout_ns;	/* > 0 */
	uint64_t	 max_entries;		/* > 0 */
	int		 backend;		/* enum sg_lc_backend */
	char		 store[SG_LCCONF_STORE_MAX];	/* path or URL */
} sg_lcconf;

/* The defaults of the table above. */
void	sg_lcconf_init(sg_lcconf *c);

/*
 * Set the variable called name (one of the five above) from value.  label
 * names the value in the message (a flag such as "--ttl"); NULL means
 * name.  A blank value is SG_ECONFIG here ("<label>: empty"): a flag
 * must say something; sg_lcconf_from_env() skips blank variables before
 * calling this.  Errors (c unchanged): SG_ECONFIG with
 * "<label>: not a boolean: '<value>'", "... not a duration > 0: ...",
 * "... not an integer > 0: ...", "... longer than 4095 bytes", or
 * SG_EINVAL "<name>: unknown variable".
 */
int	sg_lcconf_set(sg_lcconf *c, const char *name, const char *value,
	    const char *label, sg_error *err);

/*
 * Read the five variables through getenv_fn (getenv(3), or a test double;
 * NULL or blank = unset) on top of what c holds.  Stops at the first bad
 * value, in the table's order, and returns its error; c may then hold the
 * values before it.  Returns 0 or SG_ECONFIG.
 */
int	sg_lcconf_from_env(sg_lcconf *c, char *(*getenv_fn)(const char *),
	    sg_error *err);

/* Copy the store settings (path, TTL, capacity) into store options; o->path
 * points into c, which must outlive sg_store_open() (the store copies it). */
void	sg_lcconf_store_opts(const sg_lcconf *c, sg_store_opts *o);

/* "lmdb" or "redis". */
const char *sg_lc_backend_name(int backend);

#endif /* SG_LCCONF_H */
