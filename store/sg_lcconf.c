/*
 * sg_lcconf.c — the STARGATE_LAST_CLUSTER_* settings (sg_lcconf.h).
 *
 * A table names each variable, its parser and its message; sg_lcconf_set()
 * parses into a copy of the one field and stores it only when the value is
 * good, so a refused value never half-changes the settings.
 */
#include <string.h>

#include "sg_lcconf.h"

enum field { F_ENABLED, F_TTL, F_TIMEOUT, F_MAX_ENTRIES, F_STORE };

static const struct var {
	const char	*name;
	enum field	 field;
} vars[] = {
	{ SG_LCCONF_ENABLED,	 F_ENABLED },
	{ SG_LCCONF_TTL,	 F_TTL },
	{ SG_LCCONF_TIMEOUT,	 F_TIMEOUT },
	{ SG_LCCONF_MAX_ENTRIES, F_MAX_ENTRIES },
	{ SG_LCCONF_STORE,	 F_STORE },
};
#define NVARS	(sizeof(vars) / sizeof(vars[0]))

void
sg_lcconf_init(sg_lcconf *c)
{
	memset(c, 0, sizeof(*c));
	c->enabled = false;
	c->ttl_ms = SG_STORE_DEFAULT_TTL_MS;
	c->lookup_timeout_ns = SG_LCCONF_DEFAULT_TIMEOUT_NS;
	c->max_entries = SG_STORE_DEFAULT_MAX_ENTRIES;
	c->backend = SG_LC_BACKEND_LMDB;
	memcpy(c->store, SG_STORE_DEFAULT_PATH, sizeof(SG_STORE_DEFAULT_PATH));
}

static bool
is_redis(const char *s)
{
	static const char *const schemes[] = {
		"redis://", "rediss://", "redis+sentinel://", "redis+cluster://",
	};
	size_t i;

	for (i = 0; i < sizeof(schemes) / sizeof(schemes[0]); i++)
		if (strncmp(s, schemes[i], strlen(schemes[i])) == 0)
			return true;
	return false;
}

/* A Go duration > 0 in nanoseconds. */
static bool
duration_pos(const char *s, uint64_t *ns)
{
	return sg_parse_duration(s, ns) == 0 && *ns > 0;
}

static int
set_field(sg_lcconf *c, enum field f, const char *v, size_t len,
    const char *label, sg_error *err)
{
	uint64_t u;
	bool b;

	switch (f) {
	case F_ENABLED:
		if (sg_parse_bool(v, &b) != 0)
			return sg_seterr(err, SG_ECONFIG,
			    "%s: not a boolean: '%s'", label, v);
		c->enabled = b;
		return 0;
	case F_TTL:
		if (!duration_pos(v, &u))
			return sg_seterr(err, SG_ECONFIG,
			    "%s: not a duration > 0: '%s'", label, v);
		c->ttl_ms = u / 1000000 + (u % 1000000 != 0);
		return 0;
	case F_TIMEOUT:
		if (!duration_pos(v, &u))
			return sg_seterr(err, SG_ECONFIG,
			    "%s: not a duration > 0: '%s'", label, v);
		c->lookup_timeout_ns = u;
		return 0;
	case F_MAX_ENTRIES:
		if (sg_parse_u64(v, len, UINT64_MAX, &u) != 0 || u == 0)
			return sg_seterr(err, SG_ECONFIG,
			    "%s: not an integer > 0: '%s'", label, v);
		c->max_entries = u;
		return 0;
	case F_STORE:
		if (len >= sizeof(c->store))
			return sg_seterr(err, SG_ECONFIG,
			    "%s: longer than %zu bytes", label,
			    sizeof(c->store) - 1);
		memcpy(c->store, v, len);
		c->store[len] = '\0';
		c->backend = is_redis(c->store) ? SG_LC_BACKEND_REDIS :
		    SG_LC_BACKEND_LMDB;
		return 0;
	}
	return sg_seterr(err, SG_EINVAL, "%s: unknown variable", label);
}

int
sg_lcconf_set(sg_lcconf *c, const char *name, const char *value,
    const char *label, sg_error *err)
{
	char buf[SG_LCCONF_STORE_MAX + 1];
	const char *v = value;
	size_t len, i;

	if (c == NULL || name == NULL)
		return sg_seterr(err, SG_EINVAL, "no settings or no name");
	if (label == NULL)
		label = name;
	for (i = 0; i < NVARS; i++)
		if (strcmp(vars[i].name, name) == 0)
			break;
	if (i == NVARS)
		return sg_seterr(err, SG_EINVAL, "%s: unknown variable", name);
	len = v != NULL ? strlen(v) : 0;
	if (len > 0)
		sg_trim(&v, &len);
	if (len == 0)
		return sg_seterr(err, SG_ECONFIG, "%s: empty", label);
	if (len >= sizeof(buf))
		return sg_seterr(err, SG_ECONFIG, "%s: longer than %d bytes",
		    label, SG_LCCONF_STORE_MAX - 1);
	memcpy(buf, v, len);
	buf[len] = '\0';
	return set_field(c, vars[i].field, buf, len, label, err);
}

int
sg_lcconf_from_env(sg_lcconf *c, char *(*getenv_fn)(const char *),
    sg_error *err)
{
	const char *v;
	size_t i, len;
	int rc;

	if (c == NULL || getenv_fn == NULL)
		return sg_seterr(err, SG_EINVAL, "no settings or no lookup");
	for (i = 0; i < NVARS; i++) {
		if ((v = getenv_fn(vars[i].name)) == NULL)
			continue;
		len = strlen(v);
		sg_trim(&v, &len);
		if (len == 0)
			continue;
		if ((rc = sg_lcconf_set(c, vars[i].name, v, NULL, err)) != 0)
			return rc;
	}
	return 0;
}

void
sg_lcconf_store_opts(const sg_lcconf *c, sg_store_opts *o)
{
	o->path = c->store;
	o->ttl_ms = c->ttl_ms;
	o->max_entries = c->max_entries;
}

const char *
sg_lc_backend_name(int backend)
{
	return backend == SG_LC_BACKEND_REDIS ? "redis" : "lmdb";
}
