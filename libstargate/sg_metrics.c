/*
 * sg_metrics.c — Prometheus registry in one arena (see sg_metrics.h).
 *
 * Arena layout.  Offset 0 holds the registry header (struct sg_metrics);
 * then the series index, an open-addressing hash table of nslots 32-bit
 * series offsets (0 = empty); then families, strings and series, bump
 * allocated in 8-byte units.  Nothing in the arena is a pointer: every
 * reference is an offset from the arena base, and a family finds the base
 * from its own offset (f->self).  A MAP_SHARED arena therefore works in
 * every process forked after its creation.
 *
 * Concurrency.  Creation (families, series) runs under a spinlock in the
 * header (an atomic flag, so it works across processes); it initialises the
 * new object completely, then publishes it with release stores: first the
 * link from the previous family or series (creation order, for exposition),
 * then the index slot.  Readers load offsets with acquire and never lock:
 * a lookup probes linearly from the hash until it meets the series or an
 * empty slot.  The index never passes 3/4 full (past that, creation fails
 * as "arena full"), so a probe always ends.  Values are C11 atomics: u64
 * counts with fetch_add; doubles as their bit pattern, updated by a CAS
 * loop.  A counter keeps integral increments in `count` and the rest in
 * `bits`; a histogram keeps per-bucket (non-cumulative) counts, summed
 * cumulatively on exposition, and its sum in `bits`.
 *
 * A process that dies holding the lock would block later creations (never
 * lookups or updates); the lock is held only for a few hundred
 * instructions with no system call.
 */
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <xxhash.h>

#include "sg_metrics.h"

#if ATOMIC_LLONG_LOCK_FREE != 2 || ATOMIC_INT_LOCK_FREE != 2
#error "sg_metrics needs lock-free 32- and 64-bit atomics (shared memory)"
#endif

#define ARENA_MAGIC	0x5347204d45545253ULL	/* "SG METRS" */
#define SLOT_BYTES	128	/* arena bytes per index slot */
#define OUTBUF		4096	/* exposition buffer */

struct sg_metrics {
	uint64_t		 magic;
	uint32_t		 size;		/* arena bytes */
	uint32_t		 used;		/* bump offset (under lock) */
	atomic_uint		 lock;
	uint32_t		 nslots;	/* power of two */
	uint32_t		 slots;		/* offset of the index */
	uint32_t		 nindexed;	/* used slots (under lock) */
	atomic_uint		 first_fam;
	uint32_t		 last_fam;	/* under lock */
};

struct sg_metric {
	uint32_t		 self;		/* this family's offset */
	uint32_t		 type;
	uint32_t		 nlabels;
	uint32_t		 nbuckets;	/* finite bounds */
	uint32_t		 name;		/* string offsets */
	uint32_t		 help;
	uint32_t		 labels[SG_METRICS_LABELS_MAX];
	uint32_t		 buckets;	/* offset of double[nbuckets] */
	atomic_uint		 max_series;
	atomic_uint		 nseries;
	atomic_uint		 first;		/* series in creation order */
	uint32_t		 last;		/* under lock */
	atomic_uint		 next;		/* next family */
	uint32_t		 pad;
	atomic_ullong		 dropped;
};

struct sg_series {
	uint32_t		 fam;		/* family offset */
	uint32_t		 values;	/* offset of "v0\0v1\0..." */
	uint64_t		 hash;
	atomic_uint		 next;		/* next series of the family */
	uint32_t		 self;		/* this series' offset */
	atomic_ullong		 count;		/* counter: integral part */
	atomic_ullong		 bits;		/* double: value, rest or sum */
	atomic_ullong		 bucket[];	/* histogram: nbuckets + 1 */
};

_Static_assert(sizeof(struct sg_metrics) % 8 == 0, "header alignment");
_Static_assert(sizeof(struct sg_metric) % 8 == 0, "family alignment");
_Static_assert(sizeof(struct sg_series) % 8 == 0, "series alignment");

/* --- arena -------------------------------------------------------------- */

static inline void *
at(const sg_metrics *m, uint32_t off)
{
	return (char *)(uintptr_t)m + off;
}

static inline sg_metrics *
base_of(const sg_metric *f)
{
	return (sg_metrics *)(uintptr_t)((const char *)f - f->self);
}

static inline const char *
str_at(const sg_metrics *m, uint32_t off)
{
	return at(m, off);
}

static void
arena_lock(sg_metrics *m)
{
	unsigned spins = 0;

	while (atomic_exchange_explicit(&m->lock, 1, memory_order_acquire))
		while (atomic_load_explicit(&m->lock, memory_order_relaxed))
			if (++spins % 64 == 0)
				sched_yield();
}

static void
arena_unlock(sg_metrics *m)
{
	atomic_store_explicit(&m->lock, 0, memory_order_release);
}

/* Bump-allocate n zeroed bytes (under lock); 0 when the arena is full. */
static uint32_t
arena_alloc(sg_metrics *m, size_t n)
{
	uint32_t off = m->used;

	n = (n + 7) & ~(size_t)7;
	if (n > m->size - m->used)
		return 0;
	m->used += (uint32_t)n;
	memset(at(m, off), 0, n);
	return off;
}

static uint32_t
arena_strdup(sg_metrics *m, const char *s, size_t len)
{
	uint32_t off = arena_alloc(m, len + 1);

	if (off != 0)
		memcpy(at(m, off), s, len);
	return off;
}

static size_t
pow2_floor(size_t n)
{
	size_t p = 1;

	while (p <= n / 2)
		p *= 2;
	return p;
}

int
sg_metrics_new(sg_metrics **out, size_t arena_bytes, bool shared,
    sg_error *err)
{
	sg_metrics *m;
	void *p;
	size_t nslots;

	*out = NULL;
	if (arena_bytes == 0)
		arena_bytes = SG_METRICS_ARENA_DEFAULT;
	if (arena_bytes < SG_METRICS_ARENA_MIN ||
	    arena_bytes > SG_METRICS_ARENA_MAX)
		return sg_seterr(err, SG_EINVAL,
		    "metrics arena: %zu bytes, expected %u..%u", arena_bytes,
		    SG_METRICS_ARENA_MIN, SG_METRICS_ARENA_MAX);
	p = mmap(NULL, arena_bytes, PROT_READ | PROT_WRITE,
	    MAP_ANONYMOUS | (shared ? MAP_SHARED : MAP_PRIVATE), -1, 0);
	if (p == MAP_FAILED)
		return sg_seterr(err, errno, "metrics arena: mmap: %s",
		    strerror(errno));
	m = p;
	m->magic = ARENA_MAGIC;
	m->size = (uint32_t)arena_bytes;
	m->used = sizeof(*m);
	atomic_init(&m->lock, 0);
	atomic_init(&m->first_fam, 0);
	nslots = pow2_floor(arena_bytes / SLOT_BYTES);
	m->nslots = (uint32_t)nslots;
	m->slots = arena_alloc(m, nslots * sizeof(atomic_uint));
	*out = m;
	return 0;
}

void
sg_metrics_free(sg_metrics *m)
{
	if (m != NULL)
		munmap(m, m->size);
}

/* --- names -------------------------------------------------------------- */

static bool
name_char(char c, bool first, bool colon)
{
	if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_')
		return true;
	if (c == ':')
		return colon;
	return !first && c >= '0' && c <= '9';
}

static bool
valid_name(const char *s, bool colon)
{
	size_t i;

	if (s == NULL || s[0] == '\0' || strlen(s) > SG_METRICS_NAME_MAX)
		return false;
	for (i = 0; s[i] != '\0'; i++)
		if (!name_char(s[i], i == 0, colon))
			return false;
	return true;
}

static int
check_labels(int type, const char *const *labels, size_t *nlabels,
    sg_error *err)
{
	size_t i, j;

	*nlabels = 0;
	if (labels == NULL)
		return 0;
	for (i = 0; labels[i] != NULL; i++) {
		if (i == SG_METRICS_LABELS_MAX)
			return sg_seterr(err, SG_EINVAL,
			    "more than %d labels", SG_METRICS_LABELS_MAX);
		if (!valid_name(labels[i], false) ||
		    strncmp(labels[i], "__", 2) == 0)
			return sg_seterr(err, SG_EINVAL,
			    "invalid label name \"%.64s\"", labels[i]);
		if (type == SG_METRIC_HISTOGRAM && strcmp(labels[i], "le") == 0)
			return sg_seterr(err, SG_EINVAL,
			    "label \"le\" is reserved in a histogram");
		for (j = 0; j < i; j++)
			if (strcmp(labels[i], labels[j]) == 0)
				return sg_seterr(err, SG_EINVAL,
				    "duplicate label name \"%s\"", labels[i]);
	}
	*nlabels = i;
	return 0;
}

static int
check_buckets(int type, const double *b, size_t n, sg_error *err)
{
	size_t i;

	if (type != SG_METRIC_HISTOGRAM) {
		if (n != 0)
			return sg_seterr(err, SG_EINVAL,
			    "buckets given for a non-histogram");
		return 0;
	}
	if (n > SG_METRICS_BUCKETS_MAX || (n > 0 && b == NULL))
		return sg_seterr(err, SG_EINVAL, "histogram: %zu buckets", n);
	for (i = 0; i < n; i++) {
		if (!isfinite(b[i]))
			return sg_seterr(err, SG_EINVAL,
			    "histogram bucket %zu is not finite", i);
		if (i > 0 && !(b[i] > b[i - 1]))
			return sg_seterr(err, SG_EINVAL,
			    "histogram buckets not strictly ascending at %zu",
			    i);
	}
	return 0;
}

static int
check_family(int type, const char *name, const char *help,
    const char *const *labels, const double *buckets, size_t nbuckets,
    size_t *nlabels, sg_error *err)
{
	int rc;

	if (type != SG_METRIC_COUNTER && type != SG_METRIC_GAUGE &&
	    type != SG_METRIC_HISTOGRAM)
		return sg_seterr(err, SG_EINVAL, "unknown metric type %d",
		    type);
	if (!valid_name(name, true))
		return sg_seterr(err, SG_EINVAL,
		    "invalid metric name \"%.64s\"", name == NULL ? "" : name);
	if (help != NULL && strlen(help) > SG_METRICS_HELP_MAX)
		return sg_seterr(err, SG_EINVAL,
		    "%s: help longer than %d bytes", name, SG_METRICS_HELP_MAX);
	if ((rc = check_labels(type, labels, nlabels, err)) != 0 ||
	    (rc = check_buckets(type, buckets, nbuckets, err)) != 0)
		return rc;
	return 0;
}

/* --- families ----------------------------------------------------------- */

static sg_metric *
find_family(sg_metrics *m, const char *name)
{
	uint32_t off;

	off = atomic_load_explicit(&m->first_fam, memory_order_acquire);
	while (off != 0) {
		sg_metric *f = at(m, off);

		if (strcmp(str_at(m, f->name), name) == 0)
			return f;
		off = atomic_load_explicit(&f->next, memory_order_acquire);
	}
	return NULL;
}

static bool
same_family(sg_metrics *m, const sg_metric *f, int type,
    const char *const *labels, size_t nlabels, const double *buckets,
    size_t nbuckets)
{
	const double *fb = at(m, f->buckets);
	size_t i;

	if (f->type != (uint32_t)type || f->nlabels != nlabels ||
	    f->nbuckets != nbuckets)
		return false;
	for (i = 0; i < nlabels; i++)
		if (strcmp(str_at(m, f->labels[i]), labels[i]) != 0)
			return false;
	for (i = 0; i < nbuckets; i++)
		if (fb[i] != buckets[i])
			return false;
	return true;
}

/* Allocate and fill a family (under lock); NULL when the arena is full. */
static sg_metric *
build_family(sg_metrics *m, int type, const char *name, const char *help,
    const char *const *labels, size_t nlabels, const double *buckets,
    size_t nbuckets)
{
	uint32_t off, save = m->used;
	sg_metric *f;
	size_t i;

	if (help == NULL)
		help = "";
	if ((off = arena_alloc(m, sizeof(*f))) == 0)
		return NULL;
	f = at(m, off);
	f->self = off;
	f->type = (uint32_t)type;
	f->nlabels = (uint32_t)nlabels;
	f->nbuckets = (uint32_t)nbuckets;
	atomic_init(&f->max_series, SG_METRICS_SERIES_DEFAULT);
	if ((f->name = arena_strdup(m, name, strlen(name))) == 0 ||
	    (f->help = arena_strdup(m, help, strlen(help))) == 0)
		goto full;
	for (i = 0; i < nlabels; i++)
		if ((f->labels[i] = arena_strdup(m, labels[i],
		    strlen(labels[i]))) == 0)
			goto full;
	if ((f->buckets = arena_alloc(m, nbuckets * sizeof(double) + 1)) == 0)
		goto full;
	if (nbuckets > 0)
		memcpy(at(m, f->buckets), buckets, nbuckets * sizeof(double));
	return f;
full:
	m->used = save;
	return NULL;
}

static void
link_family(sg_metrics *m, sg_metric *f)
{
	if (m->last_fam == 0)
		atomic_store_explicit(&m->first_fam, f->self,
		    memory_order_release);
	else
		atomic_store_explicit(&((sg_metric *)at(m, m->last_fam))->next,
		    f->self, memory_order_release);
	m->last_fam = f->self;
}

int
sg_metrics_family(sg_metrics *m, int type, const char *name,
    const char *help, const char *const *labels, const double *buckets,
    size_t nbuckets, sg_metric **out, sg_error *err)
{
	sg_metric *f;
	size_t nlabels = 0;
	int rc;

	*out = NULL;
	if ((rc = check_family(type, name, help, labels, buckets, nbuckets,
	    &nlabels, err)) != 0)
		return rc;
	arena_lock(m);
	if ((f = find_family(m, name)) != NULL) {
		if (!same_family(m, f, type, labels, nlabels, buckets,
		    nbuckets))
			rc = sg_seterr(err, SG_EINVAL,
			    "%s: declared again differently", name);
		goto out;
	}
	if ((f = build_family(m, type, name, help, labels, nlabels, buckets,
	    nbuckets)) == NULL) {
		rc = sg_seterr(err, SG_EFULL, "%s: metrics arena full", name);
		goto out;
	}
	link_family(m, f);
out:
	arena_unlock(m);
	if (rc != 0)
		return rc;
	/* The unlabelled family's one series exists from the start. */
	if (nlabels == 0 && sg_metric_series(f, NULL) == NULL)
		return sg_seterr(err, SG_EFULL, "%s: metrics arena full", name);
	*out = f;
	return 0;
}

void
sg_metric_set_max_series(sg_metric *f, size_t max)
{
	if (f == NULL)
		return;
	if (max < 1)
		max = 1;
	if (max > UINT32_MAX)
		max = UINT32_MAX;
	atomic_store_explicit(&f->max_series, (uint32_t)max,
	    memory_order_relaxed);
}

uint64_t
sg_metric_dropped(const sg_metric *f)
{
	if (f == NULL)
		return 0;
	return atomic_load_explicit(&((sg_metric *)(uintptr_t)f)->dropped,
	    memory_order_relaxed);
}

/* --- series index ------------------------------------------------------- */

/* Hash of the family and its values; also checks them and sums their
 * stored size ("v0\0v1\0..."). false when a value is invalid. */
static bool
series_key(const sg_metric *f, const char *const *values, uint64_t *hash,
    size_t *vlen)
{
	uint64_t h = XXH3_64bits_withSeed(&f->self, sizeof(f->self), 0x5347);
	size_t i, n, total = 0;

	for (i = 0; i < f->nlabels; i++) {
		if (values == NULL || values[i] == NULL)
			return false;
		n = strlen(values[i]);
		if (n > SG_METRICS_VALUE_MAX || !sg_utf8_valid(values[i], n))
			return false;
		h = XXH3_64bits_withSeed(values[i], n, h + i);
		total += n + 1;
	}
	*hash = h;
	*vlen = total;
	return true;
}

static bool
series_match(const sg_metrics *m, const sg_series *s, const sg_metric *f,
    uint64_t hash, const char *const *values)
{
	const char *p;
	size_t i;

	if (s->hash != hash || s->fam != f->self)
		return false;
	p = str_at(m, s->values);
	for (i = 0; i < f->nlabels; i++) {
		if (strcmp(p, values[i]) != 0)
			return false;
		p += strlen(p) + 1;
	}
	return true;
}

/* The index slot holding the series, or the empty slot where it goes. */
static atomic_uint *
index_probe(const sg_metrics *m, const sg_metric *f, uint64_t hash,
    const char *const *values, sg_series **found)
{
	atomic_uint *slot = at(m, m->slots);
	uint32_t mask = m->nslots - 1, i = (uint32_t)hash & mask, off;

	*found = NULL;
	for (;;) {
		off = atomic_load_explicit(&slot[i], memory_order_acquire);
		if (off == 0)
			return &slot[i];
		if (series_match(m, at(m, off), f, hash, values)) {
			*found = at(m, off);
			return &slot[i];
		}
		i = (i + 1) & mask;
	}
}

static size_t
series_bytes(const sg_metric *f)
{
	size_t nb = f->type == SG_METRIC_HISTOGRAM ? f->nbuckets + 1 : 0;

	return sizeof(struct sg_series) + nb * sizeof(atomic_ullong);
}

/* Build and publish a series (under lock); NULL past a bound. */
static sg_series *
create_series(sg_metrics *m, sg_metric *f, uint64_t hash,
    const char *const *values, size_t vlen, atomic_uint *slot)
{
	uint32_t off, voff, save = m->used;
	sg_series *s;
	char *p;
	size_t i, n;

	if (atomic_load_explicit(&f->nseries, memory_order_relaxed) >=
	    atomic_load_explicit(&f->max_series, memory_order_relaxed) ||
	    (m->nindexed + 1) * 4 > m->nslots * 3)
		return NULL;
	if ((off = arena_alloc(m, series_bytes(f))) == 0 ||
	    (voff = arena_alloc(m, vlen + 1)) == 0) {
		m->used = save;
		return NULL;
	}
	s = at(m, off);
	s->fam = f->self;
	s->values = voff;
	s->self = off;
	s->hash = hash;
	for (p = at(m, voff), i = 0; i < f->nlabels; i++, p += n + 1) {
		n = strlen(values[i]);
		memcpy(p, values[i], n + 1);
	}
	if (f->last == 0)
		atomic_store_explicit(&f->first, off, memory_order_release);
	else
		atomic_store_explicit(&((sg_series *)at(m, f->last))->next,
		    off, memory_order_release);
	f->last = off;
	atomic_fetch_add_explicit(&f->nseries, 1, memory_order_relaxed);
	m->nindexed++;
	atomic_store_explicit(slot, off, memory_order_release);
	return s;
}

sg_series *
sg_metric_series(sg_metric *f, const char *const *values)
{
	sg_metrics *m;
	sg_series *s;
	atomic_uint *slot;
	uint64_t hash;
	size_t vlen;

	if (f == NULL)
		return NULL;
	m = base_of(f);
	if (!series_key(f, values, &hash, &vlen))
		goto drop;
	index_probe(m, f, hash, values, &s);
	if (s != NULL)
		return s;
	arena_lock(m);
	slot = index_probe(m, f, hash, values, &s);
	if (s == NULL)
		s = create_series(m, f, hash, values, vlen, slot);
	arena_unlock(m);
	if (s != NULL)
		return s;
drop:
	atomic_fetch_add_explicit(&f->dropped, 1, memory_order_relaxed);
	return NULL;
}

/* --- updates ------------------------------------------------------------ */

static inline double
bits_double(uint64_t b)
{
	double d;

	memcpy(&d, &b, sizeof(d));
	return d;
}

static inline uint64_t
double_bits(double d)
{
	uint64_t b;

	memcpy(&b, &d, sizeof(b));
	return b;
}

static void
atomic_add_double(atomic_ullong *a, double v)
{
	unsigned long long old = atomic_load_explicit(a,
	    memory_order_relaxed);

	while (!atomic_compare_exchange_weak_explicit(a, &old,
	    double_bits(bits_double(old) + v), memory_order_relaxed,
	    memory_order_relaxed))
		;
}

/* The family of a series: both live in the same arena. */
static inline const sg_metric *
family_of(const sg_series *s)
{
	const char *base = (const char *)s - s->self;

	return (const sg_metric *)(base + s->fam);
}

void
sg_series_inc(sg_series *s)
{
	sg_series_add(s, 1.0);
}

void
sg_series_add(sg_series *s, double v)
{
	const sg_metric *f;

	if (s == NULL)
		return;
	f = family_of(s);
	if (f->type == SG_METRIC_GAUGE) {
		atomic_add_double(&s->bits, v);
		return;
	}
	if (f->type != SG_METRIC_COUNTER || !(v >= 0))
		return;
	if (v <= 9007199254740992.0 && v == floor(v))
		atomic_fetch_add_explicit(&s->count, (uint64_t)v,
		    memory_order_relaxed);
	else
		atomic_add_double(&s->bits, v);
}

void
sg_series_set(sg_series *s, double v)
{
	if (s == NULL || family_of(s)->type != SG_METRIC_GAUGE)
		return;
	atomic_store_explicit(&s->bits, double_bits(v), memory_order_relaxed);
}

/* Index of the first bucket whose bound is >= v (nbuckets: +Inf). */
static size_t
bucket_index(const double *b, size_t n, double v)
{
	size_t lo = 0, hi = n;

	if (isnan(v))
		return n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (v <= b[mid])
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

void
sg_series_observe(sg_series *s, double v)
{
	const sg_metric *f;
	const double *b;

	if (s == NULL || (f = family_of(s))->type != SG_METRIC_HISTOGRAM)
		return;
	b = (const double *)((const char *)f - f->self + f->buckets);
	atomic_fetch_add_explicit(&s->bucket[bucket_index(b, f->nbuckets, v)],
	    1, memory_order_relaxed);
	atomic_add_double(&s->bits, v);
}

static uint64_t
histogram_count(const sg_series *s, const sg_metric *f)
{
	sg_series *w = (sg_series *)(uintptr_t)s;
	uint64_t n = 0;
	size_t i;

	for (i = 0; i <= f->nbuckets; i++)
		n += atomic_load_explicit(&w->bucket[i], memory_order_relaxed);
	return n;
}

double
sg_series_value(const sg_series *s)
{
	sg_series *w = (sg_series *)(uintptr_t)s;
	const sg_metric *f;
	double d;

	if (s == NULL)
		return 0;
	f = family_of(s);
	if (f->type == SG_METRIC_HISTOGRAM)
		return (double)histogram_count(s, f);
	d = bits_double(atomic_load_explicit(&w->bits, memory_order_relaxed));
	if (f->type == SG_METRIC_COUNTER)
		d += (double)atomic_load_explicit(&w->count,
		    memory_order_relaxed);
	return d;
}

/* --- numbers ------------------------------------------------------------ */

size_t
sg_metrics_fmt_double(char *buf, size_t cap, double v)
{
	int prec, n = 0;

	if (cap == 0)
		return 0;
	if (isnan(v))
		n = snprintf(buf, cap, "NaN");
	else if (isinf(v))
		n = snprintf(buf, cap, "%s", v > 0 ? "+Inf" : "-Inf");
	else if (v == 0)
		n = snprintf(buf, cap, "0");
	else if (v == floor(v) && fabs(v) <= 9007199254740992.0)
		n = snprintf(buf, cap, "%.0f", v);
	else
		for (prec = 1; prec <= 17; prec++) {
			n = snprintf(buf, cap, "%.*g", prec, v);
			if (n < 0 || (size_t)n >= cap || strtod(buf, NULL) == v)
				break;
		}
	if (n < 0)
		n = 0;
	if ((size_t)n >= cap)
		n = (int)cap - 1;
	buf[n] = '\0';
	return (size_t)n;
}

/* --- exposition --------------------------------------------------------- */

struct out {
	sg_metrics_sink	 sink;
	void		*ctx;
	int		 rc;
	size_t		 n;
	char		 buf[OUTBUF];
};

static void
out_flush(struct out *o)
{
	if (o->rc == 0 && o->n > 0)
		o->rc = o->sink(o->ctx, o->buf, o->n);
	o->n = 0;
}

static void
out_put(struct out *o, const char *p, size_t n)
{
	while (n > 0 && o->rc == 0) {
		size_t k = sizeof(o->buf) - o->n;

		if (k == 0) {
			out_flush(o);
			continue;
		}
		if (k > n)
			k = n;
		memcpy(o->buf + o->n, p, k);
		o->n += k;
		p += k;
		n -= k;
	}
}

static void
out_str(struct out *o, const char *s)
{
	out_put(o, s, strlen(s));
}

static void
out_double(struct out *o, double v)
{
	char b[40];

	out_put(o, b, sg_metrics_fmt_double(b, sizeof(b), v));
}

static void
out_u64(struct out *o, uint64_t v)
{
	char b[24];
	int n = snprintf(b, sizeof(b), "%llu", (unsigned long long)v);

	out_put(o, b, (size_t)n);
}

/* Escape backslash and newline (HELP), and '"' too (label values). */
static void
out_escaped(struct out *o, const char *s, bool quote)
{
	const char *run = s;

	for (; *s != '\0'; s++) {
		const char *rep = NULL;

		if (*s == '\\')
			rep = "\\\\";
		else if (*s == '\n')
			rep = "\\n";
		else if (*s == '"' && quote)
			rep = "\\\"";
		if (rep == NULL)
			continue;
		out_put(o, run, (size_t)(s - run));
		out_str(o, rep);
		run = s + 1;
	}
	out_put(o, run, (size_t)(s - run));
}

/* name{l1="v1",...[,le="x"]} — nothing for no labels and no le. */
static void
out_labels(struct out *o, const sg_metrics *m, const sg_metric *f,
    const sg_series *s, const char *le)
{
	const char *v = str_at(m, s->values);
	size_t i;

	if (f->nlabels == 0 && le == NULL)
		return;
	out_put(o, "{", 1);
	for (i = 0; i < f->nlabels; i++) {
		if (i > 0)
			out_put(o, ",", 1);
		out_str(o, str_at(m, f->labels[i]));
		out_put(o, "=\"", 2);
		out_escaped(o, v, true);
		out_put(o, "\"", 1);
		v += strlen(v) + 1;
	}
	if (le != NULL) {
		if (f->nlabels > 0)
			out_put(o, ",", 1);
		out_put(o, "le=\"", 4);
		out_str(o, le);
		out_put(o, "\"", 1);
	}
	out_put(o, "}", 1);
}

static void
out_sample(struct out *o, const sg_metrics *m, const sg_metric *f,
    const sg_series *s, const char *suffix, const char *le)
{
	out_str(o, str_at(m, f->name));
	out_str(o, suffix);
	out_labels(o, m, f, s, le);
	out_put(o, " ", 1);
}

static void
expose_histogram(struct out *o, const sg_metrics *m, const sg_metric *f,
    sg_series *s)
{
	const double *b = at(m, f->buckets);
	uint64_t cum = 0;
	char le[40];
	size_t i;

	for (i = 0; i <= f->nbuckets; i++) {
		cum += atomic_load_explicit(&s->bucket[i],
		    memory_order_relaxed);
		if (i < f->nbuckets)
			sg_metrics_fmt_double(le, sizeof(le), b[i]);
		else
			memcpy(le, "+Inf", 5);
		out_sample(o, m, f, s, "_bucket", le);
		out_u64(o, cum);
		out_put(o, "\n", 1);
	}
	out_sample(o, m, f, s, "_sum", NULL);
	out_double(o, bits_double(atomic_load_explicit(&s->bits,
	    memory_order_relaxed)));
	out_put(o, "\n", 1);
	out_sample(o, m, f, s, "_count", NULL);
	out_u64(o, cum);
	out_put(o, "\n", 1);
}

static const char *const type_names[] = {
	[SG_METRIC_COUNTER] = "counter",
	[SG_METRIC_GAUGE] = "gauge",
	[SG_METRIC_HISTOGRAM] = "histogram",
};

static void
expose_family(struct out *o, const sg_metrics *m, sg_metric *f)
{
	const char *name = str_at(m, f->name);
	uint64_t dropped;
	uint32_t off;

	out_str(o, "# HELP ");
	out_str(o, name);
	out_put(o, " ", 1);
	out_escaped(o, str_at(m, f->help), false);
	out_str(o, "\n# TYPE ");
	out_str(o, name);
	out_put(o, " ", 1);
	out_str(o, type_names[f->type]);
	out_put(o, "\n", 1);
	off = atomic_load_explicit(&f->first, memory_order_acquire);
	while (off != 0) {
		sg_series *s = at(m, off);

		if (f->type == SG_METRIC_HISTOGRAM)
			expose_histogram(o, m, f, s);
		else {
			out_sample(o, m, f, s, "", NULL);
			out_double(o, sg_series_value(s));
			out_put(o, "\n", 1);
		}
		off = atomic_load_explicit(&s->next, memory_order_acquire);
	}
	dropped = atomic_load_explicit(&f->dropped, memory_order_relaxed);
	if (dropped > 0) {
		out_str(o, "# sg_dropped_series ");
		out_str(o, name);
		out_put(o, " ", 1);
		out_u64(o, dropped);
		out_put(o, "\n", 1);
	}
}

int
sg_metrics_expose(const sg_metrics *m, sg_metrics_sink sink, void *ctx)
{
	struct out o;
	uint32_t off;

	if (m == NULL || sink == NULL)
		return SG_EINVAL;
	o.sink = sink;
	o.ctx = ctx;
	o.rc = 0;
	o.n = 0;
	off = atomic_load_explicit(&((sg_metrics *)(uintptr_t)m)->first_fam,
	    memory_order_acquire);
	while (off != 0 && o.rc == 0) {
		sg_metric *f = at(m, off);

		expose_family(&o, m, f);
		off = atomic_load_explicit(&f->next, memory_order_acquire);
	}
	out_flush(&o);
	return o.rc;
}
