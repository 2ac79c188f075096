/*
 * sg_store_redis_url.c — the Redis backend's pure parts: the three URL
 * forms, redaction of their passwords, the value codec (see
 * sg_store_redis.h) and Redis Cluster's key slots.
 *
 * URLs are parsed by hand, left to right, into fixed buffers: they are
 * short, come from an operator, and every failure must say which part is
 * wrong without echoing the password.  A slot is CRC16-CCITT (XMODEM:
 * polynomial 0x1021, initial value 0, no reflection) of the key or of its
 * hash tag, modulo 16384, the function Redis Cluster itself defines,
 * computed bit by bit (70 bytes a key: a table would save nothing that
 * shows next to a network round trip).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sg_store_redis.h"

static const struct {
	const char	*scheme;
	int		 kind;
} schemes[] = {
	{ "redis://",		SGR_SINGLE },
	{ "redis+sentinel://",	SGR_SENTINEL },
	{ "redis+cluster://",	SGR_CLUSTER },
};

bool
sgr_is_url(const char *path)
{
	return path != NULL && (strncmp(path, "redis://", 8) == 0 ||
	    strncmp(path, "rediss://", 9) == 0 ||
	    strncmp(path, "redis+", 6) == 0);
}

static int
hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Percent-decode s[0..len) into out (cap bytes with NUL). */
static int
unescape(char *out, size_t cap, const char *s, size_t len)
{
	size_t i, n = 0;

	for (i = 0; i < len; i++) {
		int c = (unsigned char)s[i];

		if (c == '%') {
			int h, l;

			if (i + 2 >= len)
				return -1;
			h = hexval((unsigned char)s[i + 1]);
			l = hexval((unsigned char)s[i + 2]);
			if (h < 0 || l < 0)
				return -1;
			c = h * 16 + l;
			i += 2;
		}
		if (c == '\0' || n + 1 >= cap)
			return -1;
		out[n++] = (char)c;
	}
	out[n] = '\0';
	return 0;
}

static int
parse_port(const char *s, size_t len, int *port)
{
	uint64_t v;

	if (sg_parse_u64(s, len, 65535, &v) != 0 || v == 0)
		return -1;
	*port = (int)v;
	return 0;
}

/* "host[:port]" or "[v6]:port", s[0..len). */
static int
parse_hostport(struct sgr_addr *a, const char *s, size_t len, int defport)
{
	const char *colon, *hs = s;
	size_t hlen;

	if (len > 0 && s[0] == '[') {
		const char *rb = memchr(s, ']', len);

		if (rb == NULL)
			return -1;
		hs = s + 1;
		hlen = (size_t)(rb - hs);
		colon = rb + 1 < s + len && rb[1] == ':' ? rb + 1 : NULL;
		if (colon == NULL && rb + 1 != s + len)
			return -1;
	} else {
		colon = memchr(s, ':', len);
		hlen = colon != NULL ? (size_t)(colon - s) : len;
	}
	if (hlen == 0 || hlen >= sizeof(a->host))
		return -1;
	memcpy(a->host, hs, hlen);
	a->host[hlen] = '\0';
	if (strcspn(a->host, "/@,%?#") != hlen)
		return -1;
	a->port = defport;
	if (colon != NULL && parse_port(colon + 1,
	    (size_t)(s + len - colon - 1), &a->port) != 0)
		return -1;
	return 0;
}

static int
parse_hosts(struct sgr_url *u, const char *s, size_t len, int defport,
    sg_error *err)
{
	const char *end = s + len;

	u->nhosts = 0;
	while (s < end) {
		const char *comma = memchr(s, ',', (size_t)(end - s));
		size_t l = comma != NULL ? (size_t)(comma - s) :
		    (size_t)(end - s);

		if (u->nhosts == SGR_HOSTS_MAX)
			return sg_seterr(err, SG_ECONFIG, "Redis URL: more "
			    "than %d hosts", SGR_HOSTS_MAX);
		if (parse_hostport(&u->hosts[u->nhosts], s, l, defport) != 0)
			return sg_seterr(err, SG_ECONFIG, "Redis URL: bad "
			    "host or port (host %zu)", u->nhosts + 1);
		u->nhosts++;
		s += l + (comma != NULL);
		if (comma != NULL && s == end)
			return sg_seterr(err, SG_ECONFIG,
			    "Redis URL: empty host after ','");
	}
	if (u->nhosts == 0)
		return sg_seterr(err, SG_ECONFIG, "Redis URL: no host");
	return 0;
}

/* "[user]:password" or (Sentinel) "password", s[0..len). */
static int
parse_userinfo(struct sgr_url *u, const char *s, size_t len)
{
	const char *colon = memchr(s, ':', len);

	if (colon == NULL)
		return unescape(u->pass, sizeof(u->pass), s, len);
	if (unescape(u->user, sizeof(u->user), s, (size_t)(colon - s)) != 0)
		return -1;
	return unescape(u->pass, sizeof(u->pass), colon + 1,
	    (size_t)(s + len - colon - 1));
}

static int
parse_db(const char *s, size_t len, int *db)
{
	uint64_t v;

	if (sg_parse_u64(s, len, 1000000, &v) != 0)
		return -1;
	*db = (int)v;
	return 0;
}

/* The part after the hosts: "", "/", "/db", or (Sentinel) "/master[/db]". */
static int
parse_path(struct sgr_url *u, const char *p, sg_error *err)
{
	const char *slash;

	if (u->kind == SGR_SENTINEL) {
		size_t ml;

		if (*p != '/' || p[1] == '\0' || p[1] == '/')
			return sg_seterr(err, SG_ECONFIG, "Redis Sentinel "
			    "URL: no master name (.../master[/db])");
		p++;
		slash = strchr(p, '/');
		ml = slash != NULL ? (size_t)(slash - p) : strlen(p);
		if (ml >= sizeof(u->master))
			return sg_seterr(err, SG_ECONFIG,
			    "Redis Sentinel URL: master name too long");
		memcpy(u->master, p, ml);
		u->master[ml] = '\0';
		p += ml;
	}
	if (*p == '\0' || (p[0] == '/' && p[1] == '\0'))
		return 0;
	if (u->kind == SGR_CLUSTER)
		return sg_seterr(err, SG_ECONFIG, "Redis Cluster URL: no "
		    "database number (a cluster has database 0 only)");
	if (parse_db(p + 1, strlen(p + 1), &u->db) != 0)
		return sg_seterr(err, SG_ECONFIG,
		    "Redis URL: bad database number");
	return 0;
}

int
sgr_url_parse(struct sgr_url *u, const char *s, sg_error *err)
{
	const char *p = NULL, *at, *hend;
	size_t i;
	int rc;

	memset(u, 0, sizeof(*u));
	if (s == NULL)
		return sg_seterr(err, SG_ECONFIG, "Redis URL: none");
	if (strncmp(s, "rediss://", 9) == 0)
		return sg_seterr(err, SG_ECONFIG, "Redis URL: TLS "
		    "(rediss://) is not supported; use a local TLS tunnel");
	for (i = 0; i < sizeof(schemes) / sizeof(schemes[0]); i++)
		if (strncmp(s, schemes[i].scheme,
		    strlen(schemes[i].scheme)) == 0) {
			u->kind = schemes[i].kind;
			p = s + strlen(schemes[i].scheme);
		}
	if (p == NULL)
		return sg_seterr(err, SG_ECONFIG, "Redis URL: unknown scheme "
		    "(redis://, redis+sentinel://, redis+cluster://)");
	hend = p + strcspn(p, "/");
	/* The last '@' before the path: a password may hold an escaped one. */
	for (at = hend; at > p && at[-1] != '@'; at--)
		;
	if (at > p) {
		if (parse_userinfo(u, p, (size_t)(at - 1 - p)) != 0)
			return sg_seterr(err, SG_ECONFIG, "Redis URL: bad "
			    "user or password (too long or a bad %%-escape)");
		p = at;
	}
	if ((rc = parse_hosts(u, p, (size_t)(hend - p), u->kind ==
	    SGR_SENTINEL ? SGR_DEFAULT_SENTINEL_PORT : SGR_DEFAULT_PORT,
	    err)) != 0)
		return rc;
	if (u->kind == SGR_SINGLE && u->nhosts != 1)
		return sg_seterr(err, SG_ECONFIG, "Redis URL: redis:// names "
		    "one server (redis+sentinel:// or redis+cluster:// for "
		    "several)");
	return parse_path(u, hend, err);
}

size_t
sg_store_path_redact(char *out, size_t cap, const char *path)
{
	const char *p, *hend, *at, *colon;
	int n;

	if (cap == 0)
		return 0;
	if (!sgr_is_url(path) || (p = strstr(path, "://")) == NULL) {
		n = snprintf(out, cap, "%s", path != NULL ? path : "");
		return n < 0 ? 0 : (size_t)n;
	}
	p += 3;
	hend = p + strcspn(p, "/");
	for (at = hend; at > p && at[-1] != '@'; at--)
		;
	if (at == p) {
		n = snprintf(out, cap, "%s", path);
		return n < 0 ? 0 : (size_t)n;
	}
	/* Keep the user name, never the password. */
	colon = memchr(p, ':', (size_t)(at - 1 - p));
	n = snprintf(out, cap, "%.*s%.*s%s***@%s", (int)(p - path), path,
	    colon != NULL ? (int)(colon - p) : 0, p, colon != NULL ? ":" : "",
	    at);
	return n < 0 ? 0 : (size_t)n;
}

/* --- values -------------------------------------------------------------- */

size_t
sgr_value_encode(char *out, uint64_t written_ms, const char *id,
    size_t id_len)
{
	char digits[21];
	size_t n = 0, i;

	do {
		digits[n++] = (char)('0' + written_ms % 10);
		written_ms /= 10;
	} while (written_ms > 0);
	for (i = 0; i < n; i++)
		out[i] = digits[n - 1 - i];
	out[n++] = ':';
	memcpy(out + n, id, id_len);
	return n + id_len;
}

int
sgr_value_decode(const char *v, size_t len, uint64_t *written_ms,
    const char **id, size_t *id_len)
{
	const char *colon;

	if (v == NULL || (colon = memchr(v, ':', len)) == NULL ||
	    colon == v || (colon - v > 1 && v[0] == '0'))
		return SG_EINVAL;
	if (sg_parse_u64(v, (size_t)(colon - v), UINT64_MAX, written_ms) != 0)
		return SG_EINVAL;
	*id = colon + 1;
	*id_len = len - (size_t)(colon + 1 - v);
	if (!sg_lc_cluster_id_valid(*id, *id_len))
		return SG_EINVAL;
	return 0;
}

uint64_t
sgr_px(uint64_t written_ms, uint64_t now_ms, uint64_t ttl_ms)
{
	uint64_t age = now_ms > written_ms ? now_ms - written_ms : 0;

	return age >= ttl_ms ? 0 : ttl_ms - age;
}

/* --- Cluster slots ------------------------------------------------------- */

static uint16_t
crc16(const unsigned char *p, size_t len)
{
	uint16_t crc = 0;
	size_t i;
	int b;

	for (i = 0; i < len; i++) {
		crc ^= (uint16_t)(p[i] << 8);
		for (b = 0; b < 8; b++)
			crc = crc & 0x8000 ? (uint16_t)(crc << 1 ^ 0x1021) :
			    (uint16_t)(crc << 1);
	}
	return crc;
}

unsigned
sgr_key_slot(const char *key, size_t len)
{
	const char *l = memchr(key, '{', len), *r;

	if (l != NULL && (r = memchr(l + 1, '}',
	    (size_t)(key + len - l - 1))) != NULL && r > l + 1) {
		key = l + 1;
		len = (size_t)(r - l - 1);
	}
	return crc16((const unsigned char *)key, len) & (SGR_SLOTS - 1);
}
