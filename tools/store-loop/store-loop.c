/*
 * store-loop — what the last-cluster store costs an event loop per request
 * (tools/store-loop/run builds it against a build's libstargate.a; it is
 * never installed).
 *
 * It plays sg-proxy's gateway loop without the network: per request, the
 * session's store key (sg_lc_key: SHA-256), a lookup that never waits
 * (sg_store_lookup_start), the write of its last cluster (gathered and
 * handed over every --handover-ms, as sg-proxy gathers them, or at once),
 * and the commit records taken from the store's eventfd whenever the loop
 * wakes.  Requests come at --rate per second on an absolute schedule
 * (a timerfd in the same epoll set as the eventfd, so the loop sleeps
 * between requests and is woken by commits, as a proxy's loop is), or as
 * fast as the loop goes (--rate 0).  The same loop without the store calls
 * (keys still made) is the baseline; rounds alternate the two.
 *
 * Per operation it reports the CPU of the whole process (every thread:
 * CLOCK_PROCESS_CPUTIME_ID), of the loop thread (CLOCK_THREAD_CPUTIME_ID),
 * of the other threads (the difference: the store thread), context switches
 * (getrusage: the process's, and less the loop thread's, the store
 * thread's) and write transactions (sg_store_stats_get).  The store is a
 * new directory under --dir per round, removed afterwards.  Medians over
 * --rounds with the min-max spread; the last line is the store's added CPU
 * per request (store minus baseline, medians of the rounds' differences).
 *
 * With --read-your-writes a request whose session has a write still on its
 * way (gathered, or queued and not yet reported committed) skips the store
 * lookup, as sg-proxy's pending-write table answers it.
 *
 * Usage: store-loop [--ops N] [--rate R] [--sessions K] [--handover-ms MS]
 *                   [--handover-max N]
 *                   [--commit-delay-ms MS] [--rounds N] [--dir DIR]
 *                   [--read-your-writes]
 */
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/timerfd.h>

#include <errno.h>
#include <ftw.h>
#include <stdbool.h>
#include <stdint.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sg_store.h"

#define MAXROUNDS	64
#define HANDOVER_MAX	128	/* writes per hand-over, as sg-proxy */
#define HANDOVER_LIMIT	65536	/* --handover-max bound */

struct cfg {
	unsigned long	 ops;
	double		 rate;
	unsigned	 sessions;
	double		 handover_ms;
	unsigned	 handover_max;	/* writes per hand-over at most */
	double		 commit_delay_ms;
	unsigned	 rounds;
	const char	*dir;
	bool		 ryw;		/* skip lookups of keys still pending */
};

struct result {
	double	cpu_us, loop_us, other_us, csw, other_csw, commits;
	double	wall_s;
};

struct pend {
	char		key[SG_LC_KEY_LEN + 1];
	unsigned long	sess;
};

#define UNSENT	UINT64_MAX	/* gathered, not yet handed over */

static uint64_t
now_ns(clockid_t c)
{
	struct timespec ts;

	clock_gettime(c, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static int
rm_one(const char *path, const struct stat *st, int flag, struct FTW *f)
{
	(void)st;
	(void)flag;
	(void)f;
	return remove(path);
}

static uint64_t ops_done;	/* the newest commit record's ops_done */

static void
drain(sg_store *s, unsigned long *records)
{
	sg_store_commit recs[32];
	size_t n;

	while ((n = sg_store_drain(s, recs, 32)) > 0) {
		*records += n;
		if (recs[n - 1].ops_done > ops_done)
			ops_done = recs[n - 1].ops_done;
	}
}

static void
hand_over(sg_store *s, struct pend *pb, size_t *npb, uint64_t *last)
{
	sg_error err;
	uint64_t seq;
	size_t i;

	for (i = 0; i < *npb; i++) {
		if (sg_store_put_seq(s, pb[i].key, SG_LC_KEY_LEN, "cluster-a",
		    9, &seq, &err) != 0) {
			fprintf(stderr, "store-loop: put: %s\n", err.text);
			exit(1);
		}
		last[pb[i].sess] = seq;
	}
	*npb = 0;
}

/* Arm the request timer for absolute CLOCK_MONOTONIC time t (ns). */
static void
arm(int tfd, uint64_t t)
{
	struct itimerspec its;

	memset(&its, 0, sizeof(its));
	its.it_value.tv_sec = (time_t)(t / 1000000000ULL);
	its.it_value.tv_nsec = (long)(t % 1000000000ULL);
	if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0)
		its.it_value.tv_nsec = 1;
	(void)timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL);
}

/* Sleep in epoll until the next request is due, taking commit records. */
static void
wait_due(int ep, int tfd, int evfd, sg_store *s, unsigned long *records)
{
	struct epoll_event ev[4];
	uint64_t v;
	int n, i;
	ssize_t r;

	for (;;) {
		n = epoll_wait(ep, ev, 4, -1);
		if (n < 0 && errno == EINTR)
			continue;
		for (i = 0; i < n; i++)
			if (ev[i].data.fd == evfd && s != NULL)
				drain(s, records);
		for (i = 0; i < n; i++)
			if (ev[i].data.fd == tfd) {
				r = read(tfd, &v, sizeof(v));
				(void)r;
				return;
			}
	}
}

static sg_store *
open_store(const struct cfg *c, char *dir, size_t cap)
{
	sg_store_opts o;
	sg_store *s;
	sg_error err;

	snprintf(dir, cap, "%s/store-loop.XXXXXX", c->dir);
	if (mkdtemp(dir) == NULL) {
		fprintf(stderr, "store-loop: mkdtemp %s: %s\n", dir,
		    strerror(errno));
		exit(1);
	}
	sg_store_opts_init(&o);
	o.path = dir;
	o.create = true;
	o.events = true;
#ifdef SG_STORE_DEFAULT_COMMIT_DELAY_US	/* a library with the option */
	if (c->commit_delay_ms >= 0)
		o.commit_delay_us = (uint32_t)(c->commit_delay_ms * 1000);
#endif
	if (sg_store_open(&s, &o, &err) != 0) {
		fprintf(stderr, "store-loop: open %s: %s\n", dir, err.text);
		exit(1);
	}
	return s;
}

static void
run_round(const struct cfg *c, bool store, struct result *res)
{
	char dir[4096];
	struct pend *pb;
	uint64_t *last;		/* per session: its last write's number */
	sg_store *s = NULL;
	sg_store_lookup_req req;
	sg_store_stats st;
	struct epoll_event e;
	struct rusage ru0, ru1, rt0, rt1;
	uint64_t p0, t0, w0, due, last_ho, gap;
	unsigned long i, records = 0;
	size_t npb = 0;
	int ep, tfd, evfd = -1;
	sg_error err;

	if ((pb = calloc(c->handover_max, sizeof(*pb))) == NULL ||
	    (last = calloc(c->sessions, sizeof(*last))) == NULL)
		exit(1);
	ops_done = 0;
	if (store)
		s = open_store(c, dir, sizeof(dir));
	ep = epoll_create1(EPOLL_CLOEXEC);
	tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (ep < 0 || tfd < 0)
		exit(1);
	e.events = EPOLLIN;
	e.data.fd = tfd;
	(void)epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &e);
	if (s != NULL) {
		evfd = sg_store_event_fd(s);
		e.data.fd = evfd;
		(void)epoll_ctl(ep, EPOLL_CTL_ADD, evfd, &e);
	}
	gap = c->rate > 0 ? (uint64_t)(1e9 / c->rate) : 0;
	getrusage(RUSAGE_SELF, &ru0);
	getrusage(RUSAGE_THREAD, &rt0);
	p0 = now_ns(CLOCK_PROCESS_CPUTIME_ID);
	t0 = now_ns(CLOCK_THREAD_CPUTIME_ID);
	w0 = now_ns(CLOCK_MONOTONIC);
	due = last_ho = w0;
	for (i = 0; i < c->ops; i++) {
		char ak[32], key[SG_LC_KEY_LEN + 1];
		int n;

		if (gap > 0) {
			due += gap;
			arm(tfd, due);
			wait_due(ep, tfd, evfd, s, &records);
		}
		n = snprintf(ak, sizeof(ak), "bench-%lu", i % c->sessions);
		(void)sg_lc_key(key, "fn-1", 4, "bench-model", 11, ak,
		    (size_t)n);
		if (s == NULL)
			continue;
		/* As sg-proxy: a key with a write on its way answers itself. */
		if (!c->ryw || last[i % c->sessions] == 0 ||
		    (last[i % c->sessions] != UNSENT &&
		    last[i % c->sessions] <= ops_done))
			(void)sg_store_lookup_start(s, &req, key,
			    SG_LC_KEY_LEN, sg_store_mono_ns() + 10000000ULL,
			    NULL, NULL);
		last[i % c->sessions] = UNSENT;
		pb[npb].sess = i % c->sessions;
		memcpy(pb[npb++].key, key, sizeof(key));
		if (c->handover_ms <= 0 || npb == c->handover_max ||
		    (double)(now_ns(CLOCK_MONOTONIC) - last_ho) >=
		    c->handover_ms * 1e6) {
			hand_over(s, pb, &npb, last);
			last_ho = now_ns(CLOCK_MONOTONIC);
		}
		if (gap == 0 && (i & 15) == 0)
			drain(s, &records);
	}
	if (s != NULL) {
		hand_over(s, pb, &npb, last);
		(void)sg_store_flush(s, NULL);
		drain(s, &records);
	}
	res->wall_s = (double)(now_ns(CLOCK_MONOTONIC) - w0) / 1e9;
	res->loop_us = (double)(now_ns(CLOCK_THREAD_CPUTIME_ID) - t0) / 1e3 /
	    (double)c->ops;
	res->cpu_us = (double)(now_ns(CLOCK_PROCESS_CPUTIME_ID) - p0) / 1e3 /
	    (double)c->ops;
	res->other_us = res->cpu_us - res->loop_us;
	getrusage(RUSAGE_SELF, &ru1);
	getrusage(RUSAGE_THREAD, &rt1);
	res->csw = (double)(ru1.ru_nvcsw - ru0.ru_nvcsw + ru1.ru_nivcsw -
	    ru0.ru_nivcsw) / (double)c->ops;
	/* the store thread's: the process's less the loop thread's */
	res->other_csw = res->csw - (double)(rt1.ru_nvcsw - rt0.ru_nvcsw +
	    rt1.ru_nivcsw - rt0.ru_nivcsw) / (double)c->ops;
	res->commits = 0;
	if (s != NULL) {
		if (sg_store_stats_get(s, &st, &err) == 0)
			res->commits = (double)st.commits / (double)c->ops;
		sg_store_close(s);
		(void)nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	}
	close(tfd);
	close(ep);
	free(pb);
	free(last);
}

static int
cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Median of n values (sorted in place), with the spread. */
static void
stat3(double *v, unsigned n, double *med, double *lo, double *hi)
{
	qsort(v, n, sizeof(*v), cmp_d);
	*med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
	*lo = v[0];
	*hi = v[n - 1];
}

static void
report(const char *name, struct result *r, unsigned n)
{
	double v[MAXROUNDS], m, lo, hi;
	static const char *col[] = { "cpu us/op", "loop us/op",
	    "other us/op", "csw/op", "other csw/op", "commits/op" };
	unsigned i, j;

	printf("%-9s", name);
	for (j = 0; j < 6; j++) {
		for (i = 0; i < n; i++) {
			const double *f = &r[i].cpu_us;

			v[i] = f[j];
		}
		stat3(v, n, &m, &lo, &hi);
		printf("  %s %.3f [%.3f-%.3f]", col[j], m, lo, hi);
	}
	printf("\n");
}

static void
usage(FILE *f)
{
	fprintf(f, "usage: store-loop [--ops N] [--rate R] [--sessions K] "
	    "[--handover-ms MS]\n"
	    "                  [--handover-max N] [--commit-delay-ms MS] "
	    "[--rounds N]\n                  "
	    "[--dir DIR] [--read-your-writes]\n");
}

int
main(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "ops", required_argument, NULL, 'n' },
		{ "rate", required_argument, NULL, 'r' },
		{ "sessions", required_argument, NULL, 'k' },
		{ "handover-ms", required_argument, NULL, 'H' },
		{ "handover-max", required_argument, NULL, 'M' },
		{ "commit-delay-ms", required_argument, NULL, 'd' },
		{ "rounds", required_argument, NULL, 'R' },
		{ "dir", required_argument, NULL, 'D' },
		{ "read-your-writes", no_argument, NULL, 'y' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct cfg c = { 100000, 10000, 10, 10, HANDOVER_MAX, -1, 5, "/tmp",
	    false };
	struct result base[MAXROUNDS], st[MAXROUNDS];
	double d[MAXROUNDS], m, l, h;
	unsigned i;
	int ch;

	while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1)
		switch (ch) {
		case 'n': c.ops = strtoul(optarg, NULL, 10); break;
		case 'r': c.rate = strtod(optarg, NULL); break;
		case 'k': c.sessions = (unsigned)strtoul(optarg, NULL, 10);
			break;
		case 'H': c.handover_ms = strtod(optarg, NULL); break;
		case 'M': c.handover_max = (unsigned)strtoul(optarg, NULL,
			    10);
			break;
		case 'd': c.commit_delay_ms = strtod(optarg, NULL); break;
		case 'R': c.rounds = (unsigned)strtoul(optarg, NULL, 10);
			break;
		case 'D': c.dir = optarg; break;
		case 'y': c.ryw = true; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 64;
		}
	if (c.ops == 0 || c.sessions == 0 || c.rounds == 0 ||
	    c.handover_max == 0 || c.handover_max > HANDOVER_LIMIT ||
	    c.rounds > MAXROUNDS) {
		usage(stderr);
		return 64;
	}
	printf("store-loop: ops %lu rate %.0f/s sessions %u handover %.1f ms "
	    "(at most %u) commit delay %s%.1f ms rounds %u\n", c.ops, c.rate,
	    c.sessions, c.handover_ms, c.handover_max, c.commit_delay_ms < 0 ? "default " : "",
	    c.commit_delay_ms < 0 ? 0 : c.commit_delay_ms, c.rounds);
	for (i = 0; i < c.rounds; i++) {
		run_round(&c, false, &base[i]);
		run_round(&c, true, &st[i]);
		d[i] = st[i].cpu_us - base[i].cpu_us;
	}
	report("baseline", base, c.rounds);
	report("store", st, c.rounds);
	stat3(d, c.rounds, &m, &l, &h);
	printf("added    cpu us/op %.3f [%.3f-%.3f]\n", m, l, h);
	return 0;
}
