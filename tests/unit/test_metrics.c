/*
 * test_metrics.c — sg_metrics.c: exposition (golden text), escaping,
 * number format, name checks, bounds, the shared arena across fork()
 * (counts and series created by children, exact totals under concurrent
 * increments from several processes), and no allocation on the hot path.
 */
#include "sg_test.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sg_metrics.h"

/* --- allocation counter (as in tools/sg-bench/decide.c) ----------------- */

static volatile int	count_allocs;
static unsigned long	nallocs;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
/* A sanitizer owns malloc: count through its allocation hooks. */
int	__sanitizer_install_malloc_and_free_hooks(
	    void (*)(const volatile void *, size_t),
	    void (*)(const volatile void *));

static void
on_malloc(const volatile void *p, size_t n)
{
	(void)p;
	(void)n;
	if (count_allocs)
		nallocs++;
}

static void
on_free(const volatile void *p)
{
	(void)p;
}

static void
alloc_counting_init(void)
{
	__sanitizer_install_malloc_and_free_hooks(on_malloc, on_free);
}
#else
static void
alloc_counting_init(void)
{
}

void	*__libc_malloc(size_t);
void	*__libc_calloc(size_t, size_t);
void	*__libc_realloc(void *, size_t);
void	 __libc_free(void *);

void *
malloc(size_t n)
{
	if (count_allocs)
		nallocs++;
	return __libc_malloc(n);
}

void *
calloc(size_t n, size_t m)
{
	if (count_allocs)
		nallocs++;
	return __libc_calloc(n, m);
}

void *
realloc(void *p, size_t n)
{
	if (count_allocs)
		nallocs++;
	return __libc_realloc(p, n);
}

void
free(void *p)
{
	__libc_free(p);
}
#endif

/* --- helpers ------------------------------------------------------------ */

struct text {
	char	*p;
	size_t	 n, cap;
	int	 calls;
};

static int
text_sink(void *ctx, const char *p, size_t n)
{
	struct text *t = ctx;

	if (t->n + n + 1 > t->cap) {
		t->cap = (t->n + n + 1) * 2;
		t->p = realloc(t->p, t->cap);
		assert_non_null(t->p);
	}
	memcpy(t->p + t->n, p, n);
	t->n += n;
	t->p[t->n] = '\0';
	t->calls++;
	return 0;
}

/* The exposition as a string (caller frees). */
static char *
expose(const sg_metrics *m)
{
	struct text t = { NULL, 0, 0, 0 };

	assert_int_equal(sg_metrics_expose(m, text_sink, &t), 0);
	if (t.p == NULL)
		t.p = calloc(1, 1);
	return t.p;
}

static sg_metrics *
registry(size_t bytes, bool shared)
{
	sg_metrics *m;
	sg_error e;

	assert_int_equal(sg_metrics_new(&m, bytes, shared, &e), 0);
	return m;
}

static sg_metric *
family(sg_metrics *m, int type, const char *name, const char *help,
    const char *const *labels, const double *b, size_t nb)
{
	sg_metric *f;
	sg_error e;

	if (sg_metrics_family(m, type, name, help, labels, b, nb, &f, &e) != 0)
		fail_msg("%s: %s", name, e.text);
	return f;
}

static sg_series *
series1(sg_metric *f, const char *v)
{
	const char *vals[] = { v, NULL };

	return sg_metric_series(f, vals);
}

/* --- exposition --------------------------------------------------------- */

static void
test_exposition_golden(void **state)
{
	static const char *const cl[] = { "code", "cluster", NULL };
	static const char *const hl[] = { "cluster", NULL };
	static const double b[] = { 0.005, 0.25, 1, 10 };
	static const char want[] =
	    "# HELP sg_requests_total Requests routed.\n"
	    "# TYPE sg_requests_total counter\n"
	    "sg_requests_total{code=\"200\",cluster=\"a\"} 3\n"
	    "sg_requests_total{code=\"503\",cluster=\"b\"} 0\n"
	    "# HELP sg_up Whether the router is up.\n"
	    "# TYPE sg_up gauge\n"
	    "sg_up 1\n"
	    "# HELP sg_latency_seconds Latency.\n"
	    "# TYPE sg_latency_seconds histogram\n"
	    "sg_latency_seconds_bucket{cluster=\"a\",le=\"0.005\"} 1\n"
	    "sg_latency_seconds_bucket{cluster=\"a\",le=\"0.25\"} 1\n"
	    "sg_latency_seconds_bucket{cluster=\"a\",le=\"1\"} 3\n"
	    "sg_latency_seconds_bucket{cluster=\"a\",le=\"10\"} 3\n"
	    "sg_latency_seconds_bucket{cluster=\"a\",le=\"+Inf\"} 4\n"
	    "sg_latency_seconds_sum{cluster=\"a\"} 102.001\n"
	    "sg_latency_seconds_count{cluster=\"a\"} 4\n"
	    "# HELP sg_empty_seconds Nothing yet.\n"
	    "# TYPE sg_empty_seconds histogram\n"
	    "sg_empty_seconds_bucket{le=\"+Inf\"} 0\n"
	    "sg_empty_seconds_sum 0\n"
	    "sg_empty_seconds_count 0\n";
	sg_metrics *m = registry(0, false);
	sg_metric *req, *up, *lat;
	sg_series *s;
	const char *v1[] = { "200", "a", NULL }, *v2[] = { "503", "b", NULL };
	char *got;

	(void)state;
	req = family(m, SG_METRIC_COUNTER, "sg_requests_total",
	    "Requests routed.", cl, NULL, 0);
	up = family(m, SG_METRIC_GAUGE, "sg_up", "Whether the router is up.",
	    NULL, NULL, 0);
	lat = family(m, SG_METRIC_HISTOGRAM, "sg_latency_seconds", "Latency.",
	    hl, b, 4);
	family(m, SG_METRIC_HISTOGRAM, "sg_empty_seconds", "Nothing yet.",
	    NULL, NULL, 0);
	s = sg_metric_series(req, v1);
	sg_series_inc(s);
	sg_series_add(s, 2);
	assert_ptr_equal(sg_metric_series(req, v1), s);
	assert_non_null(sg_metric_series(req, v2));	/* declared at 0 */
	sg_series_set(sg_metric_series(up, NULL), 1);
	s = series1(lat, "a");
	sg_series_observe(s, 0.001);
	sg_series_observe(s, 0.5);
	sg_series_observe(s, 1);	/* le is inclusive */
	sg_series_observe(s, 100.5);
	got = expose(m);
	assert_string_equal(got, want);
	free(got);
	assert_near(sg_series_value(s), 4, 0);
	sg_metrics_free(m);
}

static void
test_escaping_of_label_values_and_help(void **state)
{
	static const char *const l[] = { "path", NULL };
	sg_metrics *m = registry(0, false);
	sg_metric *f;
	char *got;

	(void)state;
	f = family(m, SG_METRIC_COUNTER, "x_total",
	    "a \\ backslash\nand \"quotes\"", l, NULL, 0);
	sg_series_inc(series1(f, "C:\\dir \"q\"\nline2"));
	sg_series_inc(series1(f, "caf\xc3\xa9"));
	got = expose(m);
	assert_string_equal(got,
	    "# HELP x_total a \\\\ backslash\\nand \"quotes\"\n"
	    "# TYPE x_total counter\n"
	    "x_total{path=\"C:\\\\dir \\\"q\\\"\\nline2\"} 1\n"
	    "x_total{path=\"caf\xc3\xa9\"} 1\n");
	free(got);
	/* Invalid UTF-8, overlong and missing values are refused (and
	 * counted). */
	assert_null(series1(f, "\xff"));
	assert_null(series1(f, NULL));
	{
		static char big[SG_METRICS_VALUE_MAX + 2];

		memset(big, 'v', SG_METRICS_VALUE_MAX + 1);
		assert_null(series1(f, big));
		big[SG_METRICS_VALUE_MAX] = '\0';
		assert_non_null(series1(f, big));
	}
	assert_int_equal(sg_metric_dropped(f), 3);
	sg_metrics_free(m);
}

static void
test_numbers_are_formatted_like_prometheus(void **state)
{
	static const struct {
		double v;
		const char *s;
	} cases[] = {
		{ 0, "0" }, { 1, "1" }, { -1, "-1" }, { 1e6, "1000000" },
		{ 0.1, "0.1" }, { 2.5, "2.5" }, { 102.001, "102.001" },
		{ 1e-9, "1e-09" }, { 1e300, "1e+300" },
		{ 9007199254740992.0, "9007199254740992" },
		{ 9007199254740994.0, "9007199254740994" }, { 1e17, "1e+17" },
		{ 0.30000000000000004, "0.30000000000000004" },
		{ 123456789012, "123456789012" },
	};
	char b[40];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		sg_metrics_fmt_double(b, sizeof(b), cases[i].v);
		assert_string_equal(b, cases[i].s);
	}
	sg_metrics_fmt_double(b, sizeof(b), NAN);
	assert_string_equal(b, "NaN");
	sg_metrics_fmt_double(b, sizeof(b), INFINITY);
	assert_string_equal(b, "+Inf");
	sg_metrics_fmt_double(b, sizeof(b), -INFINITY);
	assert_string_equal(b, "-Inf");
	assert_int_equal(sg_metrics_fmt_double(b, 3, 12345), 2);
	assert_string_equal(b, "12");
}

static void
test_gauge_values_and_special_numbers(void **state)
{
	sg_metrics *m = registry(0, false);
	sg_metric *g;
	sg_series *s;
	char *got;

	(void)state;
	g = family(m, SG_METRIC_GAUGE, "g", NULL, NULL, NULL, 0);
	s = sg_metric_series(g, NULL);
	sg_series_set(s, 1.5);
	sg_series_add(s, -3);
	sg_series_inc(s);
	assert_near(sg_series_value(s), -0.5, 0);
	got = expose(m);
	assert_string_equal(got, "# HELP g \n# TYPE g gauge\ng -0.5\n");
	free(got);
	sg_series_set(s, NAN);
	got = expose(m);
	assert_string_equal(got, "# HELP g \n# TYPE g gauge\ng NaN\n");
	free(got);
	sg_series_set(s, INFINITY);
	got = expose(m);
	assert_string_equal(got, "# HELP g \n# TYPE g gauge\ng +Inf\n");
	free(got);
	sg_metrics_free(m);
}

static void
test_wrong_updates_are_ignored(void **state)
{
	static const double b[] = { 1 };
	sg_metrics *m = registry(0, false);
	sg_series *c, *h;

	(void)state;
	c = sg_metric_series(family(m, SG_METRIC_COUNTER, "c_total", "", NULL,
	    NULL, 0), NULL);
	h = sg_metric_series(family(m, SG_METRIC_HISTOGRAM, "h", "", NULL, b,
	    1), NULL);
	sg_series_add(c, 0.25);
	sg_series_add(c, -1);		/* counters never go down */
	sg_series_add(c, NAN);
	sg_series_set(c, 100);		/* not a gauge */
	sg_series_observe(c, 1);	/* not a histogram */
	assert_near(sg_series_value(c), 0.25, 0);
	sg_series_inc(h);		/* not a counter */
	sg_series_observe(h, NAN);	/* +Inf bucket */
	assert_near(sg_series_value(h), 1, 0);
	sg_series_inc(NULL);
	sg_series_add(NULL, 1);
	sg_series_set(NULL, 1);
	sg_series_observe(NULL, 1);
	assert_near(sg_series_value(NULL), 0, 0);
	assert_null(sg_metric_series(NULL, NULL));
	sg_metrics_free(m);
}

/* --- declarations ------------------------------------------------------- */

static void
test_invalid_names_and_buckets_are_rejected(void **state)
{
	static const char *const bad_names[] = { "", "1abc", "a-b", "a b",
	    "é", NULL };
	static const char *const l_dunder[] = { "__x", NULL };
	static const char *const l_digit[] = { "1x", NULL };
	static const char *const l_colon[] = { "a:b", NULL };
	static const char *const l_dup[] = { "a", "a", NULL };
	static const char *const l_le[] = { "le", NULL };
	static const double desc[] = { 1, 0.5 }, dup[] = { 1, 1 },
	    inf[] = { 1, INFINITY };
	sg_metrics *m = registry(0, false);
	sg_metric *f;
	sg_error e;
	size_t i;

	(void)state;
	for (i = 0; bad_names[i] != NULL; i++)
		assert_int_equal(sg_metrics_family(m, SG_METRIC_COUNTER,
		    bad_names[i], "", NULL, NULL, 0, &f, &e), SG_EINVAL);
	assert_int_equal(sg_metrics_family(m, SG_METRIC_COUNTER, NULL, "",
	    NULL, NULL, 0, &f, &e), SG_EINVAL);
	assert_non_null(strstr(e.text, "invalid metric name"));
	assert_int_equal(sg_metrics_family(m, SG_METRIC_COUNTER, "ok", "",
	    l_dunder, NULL, 0, &f, &e), SG_EINVAL);
	assert_non_null(strstr(e.text, "invalid label name \"__x\""));
	assert_int_equal(sg_metrics_family(m, SG_METRIC_COUNTER, "ok", "",
	    l_digit, NULL, 0, &f, &e), SG_EINVAL);
	assert_int_equal(sg_metrics_family(m, SG_METRIC_COUNTER, "ok", "",
	    l_colon, NULL, 0, &f, &e), SG_EINVAL);
	assert_int_equal(sg_metrics_family(m, SG_METRIC_COUNTER, "ok", "",
	    l_dup, NULL, 0, &f, &e), SG_EINVAL);
	assert_int_equal(sg_metrics_family(m, SG_METRIC_HISTOGRAM, "ok", "",
	    l_le, NULL, 0, &f, &e), SG_EINVAL);
	assert_int_equal(sg_metrics_family(m, SG_METRIC_HISTOGRAM, "ok", "",
	    NULL, desc, 2, &f, &e), SG_EINVAL);
	assert_int_equal(sg_metrics_family(m, SG_METRIC_HISTOGRAM, "ok", "",
	    NULL, dup, 2, &f, &e), SG_EINVAL);
	assert_int_equal(sg_metrics_family(m, SG_METRIC_HISTOGRAM, "ok", "",
	    NULL, inf, 2, &f, &e), SG_EINVAL);
	assert_int_equal(sg_metrics_family(m, SG_METRIC_GAUGE, "ok", "",
	    NULL, desc, 1, &f, &e), SG_EINVAL);
	assert_int_equal(sg_metrics_family(m, 7, "ok", "", NULL, NULL, 0, &f,
	    &e), SG_EINVAL);
	/* le is an ordinary label outside histograms; colons in names. */
	assert_int_equal(sg_metrics_family(m, SG_METRIC_GAUGE, "ns:ok", "",
	    l_le, NULL, 0, &f, &e), 0);
	sg_metrics_free(m);
}

static void
test_redeclaration(void **state)
{
	static const char *const l[] = { "a", NULL }, *const l2[] = { "b",
	    NULL };
	sg_metrics *m = registry(0, false);
	sg_metric *f, *g;
	sg_error e;
	char *got;

	(void)state;
	f = family(m, SG_METRIC_COUNTER, "c_total", "help", l, NULL, 0);
	g = family(m, SG_METRIC_COUNTER, "c_total", "other help", l, NULL, 0);
	assert_ptr_equal(f, g);
	assert_int_equal(sg_metrics_family(m, SG_METRIC_GAUGE, "c_total", "",
	    l, NULL, 0, &g, &e), SG_EINVAL);
	assert_null(g);
	assert_int_equal(sg_metrics_family(m, SG_METRIC_COUNTER, "c_total", "",
	    l2, NULL, 0, &g, &e), SG_EINVAL);
	assert_int_equal(sg_metrics_family(m, SG_METRIC_COUNTER, "c_total", "",
	    NULL, NULL, 0, &g, &e), SG_EINVAL);
	got = expose(m);
	assert_string_equal(got,
	    "# HELP c_total help\n# TYPE c_total counter\n");
	free(got);
	/* Too few values for the labels. */
	assert_null(sg_metric_series(f, NULL));
	sg_metrics_free(m);
}

static void
test_arena_size_is_checked(void **state)
{
	sg_metrics *m;
	sg_error e;

	(void)state;
	assert_int_equal(sg_metrics_new(&m, 1000, false, &e), SG_EINVAL);
	assert_null(m);
	assert_int_equal(sg_metrics_new(&m, (size_t)SG_METRICS_ARENA_MAX + 1,
	    true, &e), SG_EINVAL);
	sg_metrics_free(NULL);
}

/* --- bounds ------------------------------------------------------------- */

static void
test_family_series_limit(void **state)
{
	static const char *const l[] = { "k", NULL };
	sg_metrics *m = registry(0, false);
	sg_metric *f;
	char v[16], *got;
	int i;

	(void)state;
	f = family(m, SG_METRIC_COUNTER, "lim_total", "", l, NULL, 0);
	sg_metric_set_max_series(f, 3);
	for (i = 0; i < 3; i++) {
		snprintf(v, sizeof(v), "%d", i);
		assert_non_null(series1(f, v));
	}
	assert_null(series1(f, "3"));
	assert_null(series1(f, "4"));
	assert_non_null(series1(f, "1"));	/* existing ones still found */
	assert_int_equal(sg_metric_dropped(f), 2);
	got = expose(m);
	assert_non_null(strstr(got, "# sg_dropped_series lim_total 2\n"));
	assert_null(strstr(got, "k=\"3\""));
	free(got);
	sg_metrics_free(m);
}

static void
test_default_series_limit(void **state)
{
	static const char *const l[] = { "k", NULL };
	sg_metrics *m = registry(16u << 20, false);
	sg_metric *f;
	char v[16];
	int i;

	(void)state;
	f = family(m, SG_METRIC_GAUGE, "many", "", l, NULL, 0);
	for (i = 0; i < SG_METRICS_SERIES_DEFAULT; i++) {
		snprintf(v, sizeof(v), "%d", i);
		assert_non_null(series1(f, v));
	}
	assert_null(series1(f, "x"));
	assert_int_equal(sg_metric_dropped(f), 1);
	sg_metrics_free(m);
}

static void
test_arena_full(void **state)
{
	static const char *const l[] = { "k", NULL };
	static const double b[] = { 1, 2, 3, 4, 5, 6, 7, 8 };
	sg_metrics *m = registry(SG_METRICS_ARENA_MIN, false);
	sg_metric *f, *g;
	sg_error e;
	char v[32], *got;
	int i, made = 0;

	(void)state;
	f = family(m, SG_METRIC_HISTOGRAM, "h", "", l, b, 8);
	for (i = 0; i < 10000; i++) {
		snprintf(v, sizeof(v), "value-%d", i);
		if (series1(f, v) != NULL)
			made++;
	}
	assert_true(made > 50);
	assert_true(made < 10000);
	assert_int_equal(sg_metric_dropped(f), 10000 - made);
	sg_series_observe(series1(f, "value-0"), 1);
	/* A family may still fit, or fail cleanly. */
	if (sg_metrics_family(m, SG_METRIC_COUNTER, "late_total", "", NULL,
	    NULL, 0, &g, &e) != 0)
		assert_null(g);
	got = expose(m);
	assert_non_null(strstr(got, "h_bucket{k=\"value-0\",le=\"1\"} 1\n"));
	free(got);
	sg_metrics_free(m);
}

/* --- processes ---------------------------------------------------------- */

static void
wait_ok(pid_t pid)
{
	int st;

	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
}

static void
test_series_are_shared_across_fork(void **state)
{
	static const char *const l[] = { "who", NULL };
	sg_metrics *m = registry(0, true);
	sg_metric *f;
	sg_series *s;
	pid_t pid;
	char *got;
	int i;

	(void)state;
	f = family(m, SG_METRIC_COUNTER, "forked_total", "", l, NULL, 0);
	s = series1(f, "parent");
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		for (i = 0; i < 1000; i++)
			sg_series_inc(s);
		sg_series_add(series1(f, "child"), 7);
		sg_series_set(sg_metric_series(family(m, SG_METRIC_GAUGE,
		    "child_gauge", "Made by the child.", NULL, NULL, 0), NULL),
		    2.5);
		_exit(0);
	}
	wait_ok(pid);
	assert_near(sg_series_value(s), 1000, 0);
	assert_near(sg_series_value(series1(f, "child")), 7, 0);
	got = expose(m);
	assert_string_equal(got,
	    "# HELP forked_total \n# TYPE forked_total counter\n"
	    "forked_total{who=\"parent\"} 1000\n"
	    "forked_total{who=\"child\"} 7\n"
	    "# HELP child_gauge Made by the child.\n"
	    "# TYPE child_gauge gauge\n"
	    "child_gauge 2.5\n");
	free(got);
	sg_metrics_free(m);
}

static void
test_private_registry_is_not_shared(void **state)
{
	sg_metrics *m = registry(0, false);
	sg_series *s;
	pid_t pid;

	(void)state;
	s = sg_metric_series(family(m, SG_METRIC_COUNTER, "p_total", "", NULL,
	    NULL, 0), NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		sg_series_inc(s);
		_exit(sg_series_value(s) == 1 ? 0 : 1);
	}
	wait_ok(pid);
	assert_near(sg_series_value(s), 0, 0);
	sg_metrics_free(m);
}

#define NPROC	3
#define NITER	200000
#define NNEW	300

static void
hammer(sg_metric *c, sg_metric *g, sg_metric *h, sg_metric *n, int who)
{
	sg_series *cs = sg_metric_series(c, NULL), *gs;
	sg_series *hs = series1(h, "x");
	char v[32];
	int i;

	gs = sg_metric_series(g, NULL);
	for (i = 0; i < NITER; i++) {
		sg_series_inc(cs);
		sg_series_add(gs, 0.5);
		sg_series_observe(hs, (double)(i % 4));
		if (i % (NITER / NNEW) == 0 && i / (NITER / NNEW) < NNEW) {
			/* Series creation races too: distinct and shared. */
			snprintf(v, sizeof(v), "%d-%d", who, i);
			sg_series_inc(series1(n, v));
			snprintf(v, sizeof(v), "common-%d", i);
			sg_series_inc(series1(n, v));
		}
	}
}

static void
test_concurrent_processes_give_exact_totals(void **state)
{
	static const char *const l[] = { "k", NULL };
	static const double b[] = { 0.5, 1.5, 2.5 };
	sg_metrics *m = registry(8u << 20, true);
	sg_metric *c, *g, *h, *n;
	pid_t pid[NPROC];
	char *got;
	int i;

	(void)state;
	c = family(m, SG_METRIC_COUNTER, "cc_total", "", NULL, NULL, 0);
	g = family(m, SG_METRIC_GAUGE, "cg", "", NULL, NULL, 0);
	h = family(m, SG_METRIC_HISTOGRAM, "ch", "", l, b, 3);
	n = family(m, SG_METRIC_COUNTER, "cn_total", "", l, NULL, 0);
	for (i = 0; i < NPROC; i++) {
		pid[i] = fork();
		assert_true(pid[i] >= 0);
		if (pid[i] == 0) {
			hammer(c, g, h, n, i);
			_exit(0);
		}
	}
	hammer(c, g, h, n, NPROC);
	for (i = 0; i < NPROC; i++)
		wait_ok(pid[i]);
	assert_near(sg_series_value(sg_metric_series(c, NULL)),
	    (NPROC + 1) * NITER, 0);
	assert_near(sg_series_value(sg_metric_series(g, NULL)),
	    (NPROC + 1) * NITER * 0.5, 0);
	assert_near(sg_series_value(series1(h, "x")), (NPROC + 1) * NITER, 0);
	got = expose(m);
	assert_non_null(strstr(got, "ch_bucket{k=\"x\",le=\"0.5\"} 200000\n"));
	assert_non_null(strstr(got, "ch_bucket{k=\"x\",le=\"2.5\"} 600000\n"));
	assert_non_null(strstr(got, "ch_sum{k=\"x\"} 1200000\n"));
	assert_non_null(strstr(got, "ch_count{k=\"x\"} 800000\n"));
	assert_non_null(strstr(got, "cn_total{k=\"common-0\"} 4\n"));
	free(got);
	/* Each common series exists once, each private one once. */
	assert_near(sg_series_value(series1(n, "common-0")), NPROC + 1, 0);
	assert_near(sg_series_value(series1(n, "2-0")), 1, 0);
	assert_int_equal(sg_metric_dropped(n), 0);
	sg_metrics_free(m);
}

struct targ {
	sg_metric	*c, *g, *h, *n;
	int		 who;
};

static void *
hammer_thread(void *p)
{
	struct targ *a = p;

	hammer(a->c, a->g, a->h, a->n, a->who);
	return NULL;
}

static void
test_concurrent_threads_give_exact_totals(void **state)
{
	static const char *const l[] = { "k", NULL };
	static const double b[] = { 0.5, 1.5, 2.5 };
	sg_metrics *m = registry(8u << 20, false);
	struct targ a[NPROC];
	pthread_t tid[NPROC];
	int i;

	(void)state;
	a[0].c = family(m, SG_METRIC_COUNTER, "tc_total", "", NULL, NULL, 0);
	a[0].g = family(m, SG_METRIC_GAUGE, "tg", "", NULL, NULL, 0);
	a[0].h = family(m, SG_METRIC_HISTOGRAM, "th", "", l, b, 3);
	a[0].n = family(m, SG_METRIC_COUNTER, "tn_total", "", l, NULL, 0);
	for (i = 0; i < NPROC; i++) {
		a[i] = a[0];
		a[i].who = i;
		assert_int_equal(pthread_create(&tid[i], NULL, hammer_thread,
		    &a[i]), 0);
	}
	for (i = 0; i < NPROC; i++)
		assert_int_equal(pthread_join(tid[i], NULL), 0);
	assert_near(sg_series_value(sg_metric_series(a[0].c, NULL)),
	    NPROC * NITER, 0);
	assert_near(sg_series_value(sg_metric_series(a[0].g, NULL)),
	    NPROC * NITER * 0.5, 0);
	assert_near(sg_series_value(series1(a[0].h, "x")), NPROC * NITER, 0);
	assert_near(sg_series_value(series1(a[0].n, "common-0")), NPROC, 0);
	assert_int_equal(sg_metric_dropped(a[0].n), 0);
	sg_metrics_free(m);
}

/* --- hot path ----------------------------------------------------------- */

static void
test_hot_path_does_not_allocate(void **state)
{
	static const char *const l[] = { "code", "cluster", NULL };
	static const double b[] = { 0.1, 1, 10 };
	const char *v[] = { "200", "cluster-a", NULL };
	sg_metrics *m = registry(0, true);
	sg_metric *c, *h;
	int i;

	(void)state;
	alloc_counting_init();
	c = family(m, SG_METRIC_COUNTER, "hp_total", "", l, NULL, 0);
	h = family(m, SG_METRIC_HISTOGRAM, "hp_seconds", "", l, b, 3);
	sg_metric_series(c, v);
	sg_metric_series(h, v);
	nallocs = 0;
	count_allocs = 1;
	for (i = 0; i < 10000; i++) {
		sg_series_inc(sg_metric_series(c, v));
		sg_series_add(sg_metric_series(c, v), 0.5);
		sg_series_observe(sg_metric_series(h, v), i * 0.01);
	}
	count_allocs = 0;
	assert_int_equal(nallocs, 0);
	/* The counter does count. */
	{
		void *volatile p;

		count_allocs = 1;
		p = malloc(32);
		count_allocs = 0;
		free(p);
		assert_int_equal(nallocs, 1);
	}
	assert_near(sg_series_value(sg_metric_series(c, v)), 15000, 0);
	sg_metrics_free(m);
}

static int
stop_sink(void *ctx, const char *p, size_t n)
{
	(void)p;
	(void)n;
	++*(int *)ctx;
	return 42;
}

static void
test_sink_error_stops_exposition(void **state)
{
	static const char *const l[] = { "k", NULL };
	sg_metrics *m = registry(0, false);
	sg_metric *f;
	struct text t = { NULL, 0, 0, 0 };
	char v[16];
	int i, calls = 0;

	(void)state;
	f = family(m, SG_METRIC_COUNTER, "big_total", "", l, NULL, 0);
	for (i = 0; i < 2000; i++) {
		snprintf(v, sizeof(v), "%d", i);
		assert_non_null(series1(f, v));
	}
	assert_int_equal(sg_metrics_expose(m, stop_sink, &calls), 42);
	assert_int_equal(calls, 1);
	assert_int_equal(sg_metrics_expose(m, text_sink, &t), 0);
	assert_true(t.calls > 1);		/* output in bounded pieces */
	assert_non_null(strstr(t.p, "big_total{k=\"1999\"} 0\n"));
	free(t.p);
	assert_int_equal(sg_metrics_expose(NULL, text_sink, &t), SG_EINVAL);
	sg_metrics_free(m);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_exposition_golden),
		cmocka_unit_test(test_escaping_of_label_values_and_help),
		cmocka_unit_test(test_numbers_are_formatted_like_prometheus),
		cmocka_unit_test(test_gauge_values_and_special_numbers),
		cmocka_unit_test(test_wrong_updates_are_ignored),
		cmocka_unit_test(test_invalid_names_and_buckets_are_rejected),
		cmocka_unit_test(test_redeclaration),
		cmocka_unit_test(test_arena_size_is_checked),
		cmocka_unit_test(test_family_series_limit),
		cmocka_unit_test(test_default_series_limit),
		cmocka_unit_test(test_arena_full),
		cmocka_unit_test(test_series_are_shared_across_fork),
		cmocka_unit_test(test_private_registry_is_not_shared),
		cmocka_unit_test(test_concurrent_processes_give_exact_totals),
		cmocka_unit_test(test_concurrent_threads_give_exact_totals),
		cmocka_unit_test(test_hot_path_does_not_allocate),
		cmocka_unit_test(test_sink_error_stops_exposition),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
