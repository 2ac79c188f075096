/*
 * sg_snapshot.c — the routing state of one routing target (sg-route(1)):
 * an ordered array of clusters plus an id index.
 *
 * The snapshot owns a growable array of sg_cluster copies (candidate order is
 * the array order) and an open-addressing hash index from cluster id to
 * array position, so that sg_snapshot_find() and the duplicate check of
 * sg_snapshot_add() are O(1) even at SG_MAX_CANDIDATES.  Memory is kept
 * across sg_snapshot_clear() and sg_snapshot_copy(), so a caller that
 * rebuilds the same snapshot every decision does not allocate in steady
 * state.
 *
 * Ids version.  Routers cache work that depends only on the ordered list
 * of cluster ids (the consistent-hash ring, pulsar rankings), so a snapshot
 * carries a 64-bit version of that list: a random nonce drawn at
 * sg_snapshot_new() (getrandom; no global state), chained through
 * XXH3_64bits_withSeed(id, version) for each id in order.  The empty list's
 * version is the nonce.  So the version changes whenever the set or order of
 * ids changes (add, clear, copy, from_json), rebuilding the same list in the
 * same snapshot gives back the same version, and two snapshots share a
 * version only when one is a copy of the other with the same ids (copy
 * adopts the source's nonce).  Distinct lists collide with probability
 * about 2^-64, and ids cannot be chosen to collide without the nonce.
 *
 * sg_snapshot_reserve() applies one pending routing reservation (sg-proxy(8)):
 * saturating counters, and the priority-map update.  It never allocates.
 *
 * The JSON codec is strict (sg-route(1)): unknown fields, wrong types,
 * negative counts and out-of-range values are SG_EINVAL with a message
 * naming the field path ("clusters[1].runing: unknown field").  A missing
 * numeric field is "unknown" = 0, exactly as in stargate-lb-config(5).
 */
#include <sys/random.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <xxhash.h>

#include "sg_internal.h"
#include "sg_snapshot.h"

/* struct sg_snapshot is in sg_internal.h (the decision loops read it). */

/* --- clusters ------------------------------------------------------------- */

int
sg_cluster_init(sg_cluster *c, const char *id, size_t len)
{
	if (id == NULL || len == 0 || len > SG_ID_MAX)
		return SG_EINVAL;
	memset(c, 0, sizeof(*c));
	memcpy(c->id, id, len);
	c->id[len] = '\0';
	c->id_len = len;
	return 0;
}

/* Position of the first key >= priority (nprio when none). */
static uint32_t
prio_lower_bound(const sg_cluster *c, uint32_t priority)
{
	uint32_t lo = 0, hi = c->nprio;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (c->prio_key[mid] < priority)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

int
sg_cluster_set_prio(sg_cluster *c, uint32_t priority, double ms)
{
	uint32_t i = prio_lower_bound(c, priority);

	if (i < c->nprio && c->prio_key[i] == priority) {
		c->prio_ms[i] = ms;
		return 0;
	}
	if (c->nprio >= SG_PRIO_MAX)
		return SG_ERANGE;
	memmove(&c->prio_key[i + 1], &c->prio_key[i],
	    (c->nprio - i) * sizeof(c->prio_key[0]));
	memmove(&c->prio_ms[i + 1], &c->prio_ms[i],
	    (c->nprio - i) * sizeof(c->prio_ms[0]));
	c->prio_key[i] = priority;
	c->prio_ms[i] = ms;
	c->nprio++;
	return 0;
}

/* --- the id index --------------------------------------------------------- */

/*
 * A multiply-xorshift over the id's 8-byte words (the last word overlaps
 * the one before it), cheaper than XXH3 on a per-decision hint lookup.
 * Ids come from the operator's cluster list, and the index is never
 * persisted, so a fast non-cryptographic mix is enough; a collision costs
 * a probe, never a wrong answer (ids are compared in full).
 */
static size_t
id_hash(const char *id, size_t len)
{
	uint64_t h = (uint64_t)len * 0x9e3779b97f4a7c15ULL, w = 0;
	size_t i;

	if (len < 8) {
		for (i = 0; i < len; i++)
			w = w << 8 | (unsigned char)id[i];
		h = (h ^ w) * 0xff51afd7ed558ccdULL;
	} else {
		for (i = 0; i + 8 < len; i += 8) {
			memcpy(&w, id + i, sizeof(w));
			h = (h ^ w) * 0xff51afd7ed558ccdULL;
			h ^= h >> 32;
		}
		memcpy(&w, id + len - 8, sizeof(w));
		h = (h ^ w) * 0xc4ceb9fe1a85ec53ULL;
	}
	h ^= h >> 29;
	return (size_t)(h ^ (h >> 32));
}

static void
index_put(sg_snapshot *s, size_t pos)
{
	const sg_cluster *c = &s->c[pos];
	size_t mask = s->nslot - 1, h = id_hash(c->id, c->id_len) & mask;

	while (s->slot[h] != 0)
		h = (h + 1) & mask;
	s->slot[h] = (uint32_t)pos + 1;
}

static void
index_rebuild(sg_snapshot *s)
{
	size_t i;

	if (s->nslot == 0)
		return;
	memset(s->slot, 0, s->nslot * sizeof(s->slot[0]));
	for (i = 0; i < s->n; i++)
		index_put(s, i);
}

/* Make room for want clusters (array and index); SG_ENOMEM. */
static int
grow(sg_snapshot *s, size_t want)
{
	sg_cluster *nc;
	uint32_t *ns;
	size_t cap, nslot;

	if (want <= s->cap)
		return 0;
	cap = s->cap != 0 ? s->cap : 8;
	while (cap < want)
		cap *= 2;
	nslot = 16;
	while (nslot < 2 * cap)
		nslot *= 2;
	nc = realloc(s->c, cap * sizeof(*nc));
	if (nc == NULL)
		return SG_ENOMEM;
	s->c = nc;
	ns = calloc(nslot, sizeof(*ns));
	if (ns == NULL)
		return SG_ENOMEM;	/* the array grew; cap is unchanged */
	free(s->slot);
	s->slot = ns;
	s->nslot = nslot;
	s->cap = cap;
	index_rebuild(s);
	return 0;
}

/* --- snapshots ------------------------------------------------------------ */

static uint64_t
splitmix(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ULL;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/*
 * A random nonce.  Without getrandom (ENOSYS, or no entropy yet) the
 * snapshot's address and the clock stand in: weaker against chosen ids,
 * still distinct between snapshots that coexist.
 */
static uint64_t
new_nonce(const void *self)
{
	struct timespec ts;
	uint64_t v;

	if (getrandom(&v, sizeof(v), GRND_NONBLOCK) == (ssize_t)sizeof(v))
		return v;
	(void)clock_gettime(CLOCK_MONOTONIC, &ts);
	return splitmix((uint64_t)(uintptr_t)self ^
	    splitmix((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec));
}

/* The version after appending id to a list of version v. */
static uint64_t
ver_step(uint64_t v, const char *id, size_t len)
{
	return XXH3_64bits_withSeed(id, len, v);
}

sg_snapshot *
sg_snapshot_new(void)
{
	sg_snapshot *s;

	if ((s = calloc(1, sizeof(*s))) == NULL)
		return NULL;
	s->nonce = new_nonce(s);
	s->ids_ver = s->nonce;
	return s;
}

void
sg_snapshot_free(sg_snapshot *s)
{
	if (s == NULL)
		return;
	free(s->c);
	free(s->slot);
	free(s);
}

void
sg_snapshot_clear(sg_snapshot *s)
{
	s->n = 0;
	s->ids_ver = s->nonce;
	if (s->nslot != 0)
		memset(s->slot, 0, s->nslot * sizeof(s->slot[0]));
}

size_t
sg_snapshot_count(const sg_snapshot *s)
{
	return s->n;
}

const sg_cluster *
sg_snapshot_get(const sg_snapshot *s, size_t i)
{
	return i < s->n ? &s->c[i] : NULL;
}

sg_cluster *
sg_snapshot_at(sg_snapshot *s, size_t i)
{
	return i < s->n ? &s->c[i] : NULL;
}

long
sg_snapshot_find(const sg_snapshot *s, const char *id, size_t len)
{
	size_t mask, h;

	if (s->n == 0 || id == NULL)
		return -1;
	mask = s->nslot - 1;
	h = id_hash(id, len) & mask;
	while (s->slot[h] != 0) {
		const sg_cluster *c = &s->c[s->slot[h] - 1];

		/* the last byte first: it tells most same-length ids apart */
		if (c->id_len == len && c->id[len - 1] == id[len - 1] &&
		    memcmp(c->id, id, len) == 0)
			return (long)(s->slot[h] - 1);
		h = (h + 1) & mask;
	}
	return -1;
}

int
sg_snapshot_add(sg_snapshot *s, const sg_cluster *c, sg_error *err)
{
	int rc;

	if (c->id_len == 0 || c->id_len > SG_ID_MAX)
		return sg_seterr(err, SG_EINVAL, "cluster id: must be 1..%d bytes",
		    SG_ID_MAX);
	if (c->nprio > SG_PRIO_MAX)
		return sg_seterr(err, SG_EINVAL,
		    "%s: more than %d priority entries", c->id, SG_PRIO_MAX);
	if (sg_snapshot_find(s, c->id, c->id_len) >= 0)
		return sg_seterr(err, SG_EINVAL, "duplicate cluster id \"%s\"",
		    c->id);
	if (s->n >= SG_MAX_CANDIDATES)
		return sg_seterr(err, SG_ERANGE, "more than %d clusters",
		    SG_MAX_CANDIDATES);
	if ((rc = grow(s, s->n + 1)) != 0)
		return sg_seterr(err, rc, "out of memory");
	s->c[s->n] = *c;
	s->c[s->n].id[c->id_len] = '\0';
	index_put(s, s->n);
	s->n++;
	s->ids_ver = ver_step(s->ids_ver, c->id, c->id_len);
	return 0;
}

uint64_t
sg_snapshot_ids_version(const sg_snapshot *s)
{
	return s->ids_ver;
}


int
sg_snapshot_copy(sg_snapshot *dst, const sg_snapshot *src)
{
	int rc;

	if (dst == src)
		return 0;
	sg_snapshot_clear(dst);
	if ((rc = grow(dst, src->n)) != 0)
		return rc;
	if (src->n != 0)
		memcpy(dst->c, src->c, src->n * sizeof(src->c[0]));
	dst->n = src->n;
	dst->nonce = src->nonce;	/* same ids, same version */
	dst->ids_ver = src->ids_ver;
	index_rebuild(dst);
	return 0;
}

/* --- reservations (sg-proxy(8)) ------------------------------------------- */

static uint64_t
sat_add(uint64_t a, uint64_t b)
{
	return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* Map values model the reference's u64 milliseconds: saturate there. */
static double
ms_add(double a, double b)
{
	double v = a + b;

	return v >= 18446744073709551615.0 ? 18446744073709551615.0 : v;
}

/*
 * The priority-map part of a reservation.  delta = ceil(tokens / tps * 1000)
 * ms (0 if tokens == 0); an invalid TPS clears the whole map.  The entry at
 * the request priority is created from the pre-reservation estimate there
 * (largest key <= priority, else 0) and raised by delta, as is every entry
 * with a larger (less urgent) key.
 *
 * When the map is already full (SG_PRIO_MAX keys) and has no entry at the
 * request priority, no entry can be created; the entry that answers for the
 * request priority (the largest key below it) is raised instead, so that the
 * reserved work is never forgotten by the priorities that wait behind it.  A
 * request more urgent than every key then only raises the larger keys.
 */
static void
reserve_prio(sg_cluster *c, uint64_t tokens, uint32_t priority)
{
	double tps = c->last_mean_input_tps, delta, base;
	uint32_t i, k;

	if (c->nprio == 0)
		return;
	if (!(tps > 0) || !isfinite(tps)) {
		c->nprio = 0;
		return;
	}
	delta = tokens == 0 ? 0 : ceil((double)tokens / tps * 1000.0);
	if (delta > 18446744073709551615.0)
		delta = 18446744073709551615.0;
	i = prio_lower_bound(c, priority);
	if (i == c->nprio || c->prio_key[i] != priority) {
		/* pre-reservation estimate at this priority */
		base = i > 0 ? c->prio_ms[i - 1] : 0;
		if (c->nprio < SG_PRIO_MAX)
			(void)sg_cluster_set_prio(c, priority, base);
		else if (i > 0)
			i--;	/* full: raise the entry that answers for priority */
	}
	for (k = i; k < c->nprio; k++)
		c->prio_ms[k] = ms_add(c->prio_ms[k], delta);
}

void
sg_snapshot_reserve(sg_snapshot *s, size_t i, uint64_t tokens,
    uint32_t priority)
{
	sg_cluster *c;

	if (i >= s->n)
		return;
	c = &s->c[i];
	c->queued = sat_add(c->queued, 1);
	c->queued_input_tokens = sat_add(c->queued_input_tokens, tokens);
	c->running = sat_add(c->running, 1);
	c->total_input_tokens = sat_add(c->total_input_tokens, tokens);
	reserve_prio(c, tokens, priority);
}

/* --- JSON codec ----------------------------------------------------------- */

/*
 * Field readers.  Each takes the JSON value and the path pieces used in the
 * error message ("<where>.<field>: <problem>"); where may be "" at the top.
 */
static int
field_err(sg_error *err, const char *where, const char *field,
    const char *what)
{
	return sg_seterr(err, SG_EINVAL, "%s%s%s: %s", where,
	    *where != '\0' ? "." : "", field, what);
}

/* JSON integers only (a real such as 4.0 is a wrong type), >= 0. */
static int
get_u64(const json_t *v, uint64_t *out, const char *where, const char *field,
    sg_error *err)
{
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return field_err(err, where, field,
		    "expected a non-negative integer");
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

/* Integers or reals, finite, >= 0. */
static int
get_num(const json_t *v, double *out, const char *where, const char *field,
    sg_error *err)
{
	double d;

	if (!json_is_number(v))
		return field_err(err, where, field,
		    "expected a non-negative number");
	d = json_number_value(v);
	if (!isfinite(d) || d < 0)
		return field_err(err, where, field,
		    "expected a non-negative number");
	*out = d;
	return 0;
}

/* "queue_time_ms_by_priority": {"<u32>": ms, ...} */
static int
get_prio_map(sg_cluster *c, const json_t *v, const char *where,
    sg_error *err)
{
	static const char field[] = "queue_time_ms_by_priority";
	const char *key;
	json_t *val;

	c->nprio = 0;
	if (!json_is_object(v))
		return field_err(err, where, field, "expected an object");
	if (json_object_size(v) > SG_PRIO_MAX)
		return sg_seterr(err, SG_EINVAL,
		    "%s%s%s: more than %d priority entries", where,
		    *where != '\0' ? "." : "", field, SG_PRIO_MAX);
	json_object_foreach((json_t *)(uintptr_t)v, key, val) {
		uint64_t prio;
		uint32_t i;
		double ms;

		if (sg_parse_u64(key, strlen(key), UINT32_MAX, &prio) != 0)
			return sg_seterr(err, SG_EINVAL,
			    "%s%s%s: key \"%.32s\" is not a priority "
			    "(decimal 0..4294967295)", where,
			    *where != '\0' ? "." : "", field, key);
		if (!json_is_number(val) || !isfinite(json_number_value(val)) ||
		    json_number_value(val) < 0)
			return sg_seterr(err, SG_EINVAL,
			    "%s%s%s.%s: expected a non-negative number", where,
			    *where != '\0' ? "." : "", field, key);
		ms = json_number_value(val);
		i = prio_lower_bound(c, (uint32_t)prio);
		if (i < c->nprio && c->prio_key[i] == (uint32_t)prio)
			return sg_seterr(err, SG_EINVAL,
			    "%s%s%s: duplicate priority %u", where,
			    *where != '\0' ? "." : "", field,
			    (unsigned)prio);
		if (sg_cluster_set_prio(c, (uint32_t)prio, ms) != 0)
			return sg_seterr(err, SG_EINVAL,
			    "%s%s%s: more than %d priority entries", where,
			    *where != '\0' ? "." : "", field, SG_PRIO_MAX);
	}
	return 0;
}

/* The u64 fields of a cluster object, by name. */
static const struct {
	const char	*name;
	size_t		 off;
} u64_fields[] = {
	{ "max_engine_concurrency", offsetof(sg_cluster, max_engine_concurrency) },
	{ "running", offsetof(sg_cluster, running) },
	{ "queued", offsetof(sg_cluster, queued) },
	{ "queued_input_tokens", offsetof(sg_cluster, queued_input_tokens) },
	{ "total_input_tokens", offsetof(sg_cluster, total_input_tokens) },
	{ "kv_capacity_tokens", offsetof(sg_cluster, kv_capacity_tokens) },
	{ "kv_used_tokens", offsetof(sg_cluster, kv_used_tokens) },
	{ "kv_free_tokens", offsetof(sg_cluster, kv_free_tokens) },
};

static const struct {
	const char	*name;
	size_t		 off;
} num_fields[] = {
	{ "rtt_ms", offsetof(sg_cluster, rtt_ms) },
	{ "last_mean_input_tps", offsetof(sg_cluster, last_mean_input_tps) },
	{ "max_input_tps", offsetof(sg_cluster, max_input_tps) },
};

#define NELEM(a)	(sizeof(a) / sizeof((a)[0]))

/*
 * One cluster object.  where prefixes error messages ("clusters[2]"); NULL
 * or "" means none.  c is written only on success.
 */
int
sg_cluster_from_json(sg_cluster *c, const json_t *obj, const char *where,
    sg_error *err)
{
	sg_cluster tmp;
	const char *key;
	json_t *val, *id;
	size_t i;
	int rc;

	if (where == NULL)
		where = "";
	if (!json_is_object(obj))
		return sg_seterr(err, SG_EINVAL, "%s: expected an object",
		    *where != '\0' ? where : "cluster");
	id = json_object_get(obj, "id");
	if (id == NULL)
		return field_err(err, where, "id", "required");
	if (!json_is_string(id) || json_string_length(id) == 0 ||
	    json_string_length(id) > SG_ID_MAX ||
	    strlen(json_string_value(id)) != json_string_length(id))
		return sg_seterr(err, SG_EINVAL,
		    "%s%sid: expected a string of 1..%d bytes", where,
		    *where != '\0' ? "." : "", SG_ID_MAX);
	(void)sg_cluster_init(&tmp, json_string_value(id),
	    json_string_length(id));

	json_object_foreach((json_t *)(uintptr_t)obj, key, val) {
		bool known = false;

		if (strcmp(key, "id") == 0)
			continue;
		for (i = 0; i < NELEM(u64_fields) && !known; i++) {
			if (strcmp(key, u64_fields[i].name) != 0)
				continue;
			known = true;
			if ((rc = get_u64(val, (uint64_t *)(void *)((char *)&tmp +
			    u64_fields[i].off), where, key, err)) != 0)
				return rc;
		}
		for (i = 0; i < NELEM(num_fields) && !known; i++) {
			if (strcmp(key, num_fields[i].name) != 0)
				continue;
			known = true;
			if ((rc = get_num(val, (double *)(void *)((char *)&tmp +
			    num_fields[i].off), where, key, err)) != 0)
				return rc;
		}
		if (!known && strcmp(key, "queue_time_ms_by_priority") == 0) {
			known = true;
			if ((rc = get_prio_map(&tmp, val, where, err)) != 0)
				return rc;
		}
		if (!known)
			return field_err(err, where, key, "unknown field");
	}
	*c = tmp;
	return 0;
}

/*
 * {"clusters": [...]}.  On failure s is unchanged: the clusters are read
 * into a fresh snapshot that replaces s's content only on success.
 */
int
sg_snapshot_from_json(sg_snapshot *s, const json_t *obj, sg_error *err)
{
	sg_snapshot tmp = { 0 };
	const json_t *arr = NULL;
	const char *key;
	json_t *val;
	sg_cluster c;
	size_t i, n;
	int rc = 0;

	if (!json_is_object(obj))
		return sg_seterr(err, SG_EINVAL, "snapshot: expected an object");
	json_object_foreach((json_t *)(uintptr_t)obj, key, val) {
		if (strcmp(key, "clusters") == 0)
			arr = val;
		else
			return field_err(err, "", key, "unknown field");
	}
	if (arr == NULL)
		return field_err(err, "", "clusters", "required");
	if (!json_is_array(arr))
		return field_err(err, "", "clusters", "expected an array");
	n = json_array_size(arr);
	if (n > SG_MAX_CANDIDATES)
		return sg_seterr(err, SG_EINVAL, "clusters: more than %d clusters",
		    SG_MAX_CANDIDATES);
	if ((rc = grow(&tmp, n)) != 0) {
		rc = sg_seterr(err, rc, "out of memory");
		goto out;
	}
	tmp.nonce = tmp.ids_ver = s->nonce;	/* versions chain from s's */
	for (i = 0; i < n; i++) {
		char where[32];

		snprintf(where, sizeof(where), "clusters[%zu]", i);
		if ((rc = sg_cluster_from_json(&c, json_array_get(arr, i), where,
		    err)) != 0)
			goto out;
		if (sg_snapshot_find(&tmp, c.id, c.id_len) >= 0) {
			rc = sg_seterr(err, SG_EINVAL,
			    "%s.id: duplicate cluster id \"%s\"", where, c.id);
			goto out;
		}
		if ((rc = sg_snapshot_add(&tmp, &c, err)) != 0)
			goto out;
	}
	/* swap: s takes tmp's arrays, tmp takes s's old ones to free */
	{
		sg_snapshot old = *s;

		*s = tmp;
		tmp = old;
	}
out:
	free(tmp.c);
	free(tmp.slot);
	return rc;
}

/*
 * A number as JSON: an integer when the value is integral and exactly
 * representable (so 20000 prints as 20000, not 20000.0), else a real.
 */
static json_t *
num_json(double v)
{
	if (v == floor(v) && fabs(v) < 9007199254740992.0)
		return json_integer((json_int_t)v);
	return json_real(v);
}

/* u64 as a JSON integer; jansson integers are signed 64-bit, so values past
 * INT64_MAX (only reachable by saturation) are written as INT64_MAX. */
static json_t *
u64_json(uint64_t v)
{
	return json_integer(v > (uint64_t)INT64_MAX ? INT64_MAX :
	    (json_int_t)v);
}

/* Rates that are not finite or negative are invalid, as 0 is. */
static double
rate_out(double v)
{
	return isfinite(v) && v > 0 ? v : 0;
}

/* Times: NaN or negative as 0, +inf as the largest finite double. */
static double
ms_out(double v)
{
	if (isnan(v) || v < 0)
		return 0;
	return isinf(v) ? 1.7976931348623157e308 : v;
}

/*
 * Every field is written (zeros included), in the order of sg-route(1), so
 * sg_cluster_from_json(sg_cluster_to_json(c)) == c for any cluster the
 * codec accepts.
 */
json_t *
sg_cluster_to_json(const sg_cluster *c)
{
	json_t *o = NULL, *m = NULL;
	uint32_t i;
	int bad = 0;

	if ((o = json_object()) == NULL || (m = json_object()) == NULL)
		goto fail;
	bad |= json_object_set_new(o, "id", json_stringn(c->id, c->id_len));
	bad |= json_object_set_new(o, "rtt_ms", num_json(ms_out(c->rtt_ms)));
	bad |= json_object_set_new(o, "max_engine_concurrency",
	    u64_json(c->max_engine_concurrency));
	bad |= json_object_set_new(o, "running", u64_json(c->running));
	bad |= json_object_set_new(o, "queued", u64_json(c->queued));
	bad |= json_object_set_new(o, "queued_input_tokens",
	    u64_json(c->queued_input_tokens));
	bad |= json_object_set_new(o, "total_input_tokens",
	    u64_json(c->total_input_tokens));
	bad |= json_object_set_new(o, "last_mean_input_tps",
	    num_json(rate_out(c->last_mean_input_tps)));
	bad |= json_object_set_new(o, "max_input_tps",
	    num_json(rate_out(c->max_input_tps)));
	bad |= json_object_set_new(o, "kv_capacity_tokens",
	    u64_json(c->kv_capacity_tokens));
	bad |= json_object_set_new(o, "kv_used_tokens",
	    u64_json(c->kv_used_tokens));
	bad |= json_object_set_new(o, "kv_free_tokens",
	    u64_json(c->kv_free_tokens));
	for (i = 0; i < c->nprio && i < SG_PRIO_MAX; i++) {
		char key[16];

		snprintf(key, sizeof(key), "%u", (unsigned)c->prio_key[i]);
		bad |= json_object_set_new(m, key,
		    num_json(ms_out(c->prio_ms[i])));
	}
	bad |= json_object_set_new(o, "queue_time_ms_by_priority", m);
	m = NULL;
	if (bad)
		goto fail;
	return o;
fail:
	json_decref(m);
	json_decref(o);
	return NULL;
}

json_t *
sg_snapshot_to_json(const sg_snapshot *s)
{
	json_t *o, *arr;
	size_t i;

	if ((o = json_object()) == NULL)
		return NULL;
	if ((arr = json_array()) == NULL ||
	    json_object_set_new(o, "clusters", arr) != 0)
		goto fail;
	for (i = 0; i < s->n; i++)
		if (json_array_append_new(arr, sg_cluster_to_json(&s->c[i])) != 0)
			goto fail;
	return o;
fail:
	json_decref(o);
	return NULL;
}
