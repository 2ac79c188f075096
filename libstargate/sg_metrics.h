/*
 * sg_metrics.h — a Prometheus metrics registry (counters, gauges,
 * histograms with labels) and its text exposition, format 0.0.4.
 *
 * All memory comes from one arena allocated by sg_metrics_new().  With
 * shared = true the arena is an anonymous MAP_SHARED mapping: a registry
 * created before fork() is one registry in every child (the mapping sits at
 * the same address, and the arena holds offsets only), so counts aggregate
 * across worker processes and any process can expose the whole.
 *
 * Hot path: sg_metric_series() for an existing series and the sg_series_*
 * updates are lock-free and never allocate (C11 atomics in the arena).  A
 * lookup hashes the label values (some tens of ns); keep the sg_series
 * pointer of a fixed label set instead of looking it up per request.
 * Creating a series or a family takes the arena's spinlock (rare path).
 * Series are never removed.
 *
 * Bounds: a family holds at most SG_METRICS_SERIES_DEFAULT series (change
 * with sg_metric_set_max_series).  The arena bounds everything: its series
 * index has arena_bytes / 128 slots (rounded down to a power of two),
 * filled to 3/4 at most, so the default 4 MiB arena holds up to 24576
 * series in all, fewer when they fill the arena first (a series takes
 * about 40 bytes, 8 more per histogram bucket, plus its label values).
 * Past a bound sg_metric_series() returns NULL and the family's dropped
 * count increments (see sg_metric_dropped; the exposition also shows it as
 * a "# sg_dropped_series <family> <n>" comment, which parsers ignore).
 * Every sg_series_* function accepts NULL, so callers need not check.
 *
 * Declaring label combinations at zero: call sg_metric_series() once for
 * each combination right after sg_metrics_family(); a series is exposed
 * from its creation, with value 0.  An unlabelled family has its single
 * series created (at 0) by sg_metrics_family().
 */
#ifndef SG_METRICS_H
#define SG_METRICS_H

#include "sg_common.h"

typedef struct sg_metrics sg_metrics;	/* registry */
typedef struct sg_metric  sg_metric;	/* one family */
typedef struct sg_series  sg_series;	/* one labelled series */

enum sg_metric_type { SG_METRIC_COUNTER, SG_METRIC_GAUGE, SG_METRIC_HISTOGRAM };

#define SG_METRICS_ARENA_DEFAULT	(4u << 20)	/* arena_bytes 0 */
#define SG_METRICS_ARENA_MIN		(64u << 10)
#define SG_METRICS_ARENA_MAX		(1u << 30)
#define SG_METRICS_SERIES_DEFAULT	4096	/* series per family */
#define SG_METRICS_LABELS_MAX		16	/* label names per family */
#define SG_METRICS_BUCKETS_MAX		64	/* finite histogram bounds */
#define SG_METRICS_NAME_MAX		200	/* name bytes */
#define SG_METRICS_HELP_MAX		1024	/* help text bytes */
#define SG_METRICS_VALUE_MAX		1024	/* label value bytes */

/*
 * Create a registry whose memory is one arena of arena_bytes (0: the
 * default; else SG_METRICS_ARENA_MIN..SG_METRICS_ARENA_MAX).  shared: map it
 * MAP_SHARED so that it is shared with the children of later fork()s.
 * Returns 0, SG_EINVAL (size) or an errno of mmap.
 */
int	sg_metrics_new(sg_metrics **out, size_t arena_bytes, bool shared,
	    sg_error *err);

/* Unmap this process's view of the registry (other processes keep theirs;
 * the memory goes when the last one unmaps or exits).  NULL is a no-op. */
void	sg_metrics_free(sg_metrics *m);

/*
 * Declare a family.  name must match [a-zA-Z_:][a-zA-Z0-9_:]*; help is any
 * text (escaped on exposition); labels is a NULL-terminated array of label
 * names ([a-zA-Z_][a-zA-Z0-9_]*, not starting with "__", no duplicates,
 * not "le" for a histogram) or NULL; buckets only for histograms (NULL with
 * nbuckets 0 elsewhere): finite, strictly ascending upper bounds, +Inf
 * implied.  Names, help and buckets are copied into the arena.
 * Declaring an existing name again with the same type, labels and buckets
 * returns the existing family (so each worker may declare it); any other
 * redeclaration is SG_EINVAL.  Returns 0, SG_EINVAL, SG_EFULL (arena).
 */
int	sg_metrics_family(sg_metrics *m, int type, const char *name,
	    const char *help, const char *const *labels, const double *buckets,
	    size_t nbuckets, sg_metric **out, sg_error *err);

/*
 * Find or create the series with these label values (one per label name,
 * in order; NULL for an unlabelled family).  Values are raw bytes (valid
 * UTF-8, at most SG_METRICS_VALUE_MAX bytes), escaped on exposition.
 * NULL, with the family's dropped count incremented, when the family's
 * series limit or the arena is reached or a value is invalid; NULL f gives
 * NULL.  Finding an existing series is lock-free and allocation-free.
 */
sg_series	*sg_metric_series(sg_metric *f, const char *const *values);

/* Change the family's series limit (at least 1; existing series stay). */
void	sg_metric_set_max_series(sg_metric *f, size_t max);

/* Series refused to the family since creation. */
uint64_t	sg_metric_dropped(const sg_metric *f);

/* Updates: lock-free, any process.  NULL s is a no-op; a call that does not
 * fit the family type (set on a counter, observe on a gauge...) and a
 * negative or NaN counter increment are ignored. */
void	sg_series_inc(sg_series *s);			/* counter/gauge += 1 */
void	sg_series_add(sg_series *s, double v);		/* counter/gauge += v */
void	sg_series_set(sg_series *s, double v);		/* gauge = v */
void	sg_series_observe(sg_series *s, double v);	/* histogram */

/* Current value of a counter or gauge (count of a histogram); 0 for NULL. */
double	sg_series_value(const sg_series *s);

/*
 * Text exposition format 0.0.4: families in declaration order, each with
 * "# HELP" and "# TYPE", then its series in creation order; histograms as
 * cumulative name_bucket{...,le="..."} lines ending at le="+Inf", then
 * name_sum and name_count.  Output goes through sink in pieces of at most
 * a few KiB; a sink that returns non-zero stops the exposition and its
 * value is returned.  Safe while other processes update and create series.
 */
typedef int (*sg_metrics_sink)(void *ctx, const char *p, size_t n);
int	sg_metrics_expose(const sg_metrics *m, sg_metrics_sink sink, void *ctx);

/*
 * A double as Prometheus writes it: integers up to 2^53 without exponent
 * or fraction, "+Inf", "-Inf", "NaN", else the shortest %g form that reads
 * back exactly.  Writes a NUL-terminated string into buf (cap >= 32 always
 * suffices) and returns its length.
 */
size_t	sg_metrics_fmt_double(char *buf, size_t cap, double v);

#endif /* SG_METRICS_H */
