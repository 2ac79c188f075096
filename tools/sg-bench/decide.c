/*
 * decide.c — `sg-bench decide`: per-decision latency of every algorithm
 * through the public sg_router_decide(), next to a "floor" loop doing only
 * the unavoidable work of the same decision with the same primitives in the
 * same run (sg-bench(1): p50(decision) / p50(floor)).
 *
 * Method.  For every scenario (an lb-config and a request shape) and every
 * candidate count N, a deterministic "realistic" snapshot of N clusters is
 * built (mixed load: some clusters with free engine slots, some full with a
 * queue, varied rtt and throughput).  Requests rotate over --keys cache keys
 * and request ids, so hashes, samples and rings vary per call.  Timing is by
 * batches of BATCH (16) consecutive calls between two
 * clock_gettime(CLOCK_MONOTONIC) reads; a batch's time / 16 is one sample, so
 * the timer's own ~20 ns is amortised.  p50 and p99 are over those batch
 * means (the p99 therefore understates single-call outliers).  A second
 * loop times every call on its own (two clock reads around it, minus the
 * median cost of two back-to-back reads measured at start-up): its p50 and
 * p99 are the per-call figures (goal A2 is per-call p99 / p50 <= 3); they
 * carry the timer's jitter, so they matter for the slower algorithms.
 * Each measurement is repeated --runs times, decision, floor and per-call
 * runs interleaved, and the median of the runs is reported.
 *
 * Caches.  The router caches pulsar rankings (sg_router_set_cache).  The
 * plain pulsar rows rotate over --keys keys (1024 by default), which the
 * cache holds after two sightings each, so they measure cache hits.  The
 * -nocache rows run the same decisions on a router with the cache off, and
 * pulsar-cold-keys rotates over 2^20 distinct keys with the cache on (every
 * decision misses: the cost of the cache on a key stream it cannot hold).
 * The floors never cache.  The hit column is the cache's hit rate over the
 * allocation-counting loop.
 *
 * Floors (sg-bench.1 lists each one's primitives) do the least work the
 * row's algorithm must do on the same path, with the library's fastest
 * primitives, plus the router's fixed per-call work (floor_fixed: the
 * argument checks, a memo probe, the key check, the decision filled, the
 * deadline check), so a ratio is the overhead of the whole call.  Rows
 * that hit the ranking cache are divided by a hit's work (the prefix, one
 * XXH3, one probe of a table keyed the same way, the n-weight check and
 * the walk); uncached pulsar by one batch of hashes, a bound per
 * candidate and one logarithm; uncached pulsar-wait-and-widen by the top
 * k = 2 of those bounds and core selection over them.  The -vs-off rows'
 * floor is the same request on a router whose configuration differs only
 * in last_cluster_affinity (interleaved), so their ratio is 1 + the
 * session rules' overhead; the -samepath rows keep only the requests
 * whose decision has the same kind and phase both ways.
 *
 * Allocations.  This file interposes malloc, calloc, realloc and free (the
 * executable's definitions win over libc's; they forward to glibc's
 * __libc_* entry points).  Counting is switched on only around a
 * steady-state loop of --iterations decisions after warm-up, so the result
 * is heap allocations per decision in steady state (goal A3: 0).
 *
 * Tenants.  The router caches wait-and-widen rings per (routing key,
 * model, candidate ids) within a byte budget.  waw-many-tenants rotates its
 * requests over 100 routing keys and 3 models (300 rings, all held by the
 * default budget); its "floor" is the same decision (same key, same
 * request id) on the single-tenant stream of the plain wait-and-widen row,
 * on the same router, interleaved, so its ratio is the per-decision cost
 * of many tenants against one (target <= 1.1).  A key's affinity group
 * depends on the tenant's ring, so a key whose group has room for one
 * tenant may have none for another and go on to the global phase:
 * waw-many-tenants-samepath keeps only the requests whose decision has
 * the same kind and phase on both streams, which leaves the tenants' own
 * cost.  waw-uncached-ring runs
 * with the ring cache off, so every decision finds its group in one pass
 * over the n * V virtual-node hashes; its floor is that hashing alone
 * (prefix, key hash, sgi_ring_entry_hashes over every cluster), so its
 * ratio is the cost of an uncached ring against hashing its virtual nodes
 * once (target <= 2).  The router answers a returning key from its group
 * memo, so the plain rows never read a ring; waw-many-tenants-cold-keys
 * rotates over 2^20 keys, so every decision reads its tenant's ring.
 * pulsar-many-tenants runs the same 300-tenant stream through pulsar with
 * the ranking cache on (a hit or miss per key as the plain pulsar row),
 * against the same decisions on the single-tenant stream, same router,
 * interleaved: the cost of many hash-prefix classes against one.
 *
 * Scenarios are a table: adding a row (e.g. another session case) is one
 * line in `scenarios[]`.
 */
#include <sys/resource.h>

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>
#include <time.h>

#include <xxhash.h>

#include "sg_internal.h"
#include "sg_router.h"
#include "sg-bench/bench.h"

#define BATCH		16
#define MAX_NCAND	16
#define MODEL		"bench-model"
#define TOKENS		2000
#define TOKENS_STR	"2000"

/* --- allocation counter ------------------------------------------------------ */

static volatile int	count_allocs;
static unsigned long	nallocs;

/*
 * Under AddressSanitizer the sanitizer owns malloc; replacing it would mix
 * two allocators, so the counter is compiled out and reported as n/a.
 */
#if defined(__SANITIZE_ADDRESS__)
#define ALLOC_COUNTING	0
#else
#define ALLOC_COUNTING	1

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

/* --- scenarios --------------------------------------------------------------- */

enum floor_kind {
	FL_RANDOM,
	FL_RR,
	FL_PON,
	FL_WAW,
	FL_PULSAR,
	FL_PWAW,
	FL_SINGLE,	/* the same decision on a single-tenant stream */
	FL_VNODES,	/* hashing the n * V virtual nodes once */
	FL_PULSAR_HIT,	/* a ranking-cache hit, the walk to rank 1 */
	FL_PWAW_HIT,	/* a ranking-cache hit, core selection over k */
	FL_FLAGOFF,	/* the same request, last_cluster_affinity off */
};

enum hint_kind {
	HINT_NONE,		/* no x-stargate-last-cluster-id: new session */
	HINT_OTHER,		/* a present, non-first cluster: returning */
};

struct scenario {
	const char	*name;
	const char	*algo;		/* models.bench-model entry (JSON) */
	int		 floor;		/* enum floor_kind */
	int		 hint;		/* enum hint_kind */
	bool		 nocache;	/* the router's ranking cache off */
	size_t		 keys;		/* distinct keys; 0: --keys */
	bool		 tenants;	/* TENANT_RKS routing keys x 3 models */
	bool		 noring;	/* the router's ring cache off */
	const char	*offalgo;	/* FL_FLAGOFF: the flag-off twin */
	bool		 samepath;	/* only requests whose path is the same
					   with the flag on and off */
};

#define TENANT_RKS	100
#define TENANT_MODELS	3
#define WAW_K2_V150	"{\"algorithm\":\"wait-and-widen\","		\
	    "\"cache_affinity_backend_selection_count\":2,"		\
	    "\"cache_affinity_virtual_nodes\":150}"

#define WAW_SESS(on) "{\"algorithm\":\"wait-and-widen\","		\
	    "\"cache_affinity_backend_selection_count\":2,"		\
	    "\"cache_affinity_virtual_nodes\":150,"			\
	    "\"cache_affinity_wait_ms\":300,"				\
	    "\"cache_affinity_input_tokens_scale\":0.1,"		\
	    "\"last_cluster_affinity\":" on "}"
#define PWAW_SESS(on) "{\"algorithm\":\"pulsar-wait-and-widen\","	\
	    "\"cache_affinity_backend_selection_count\":2,"		\
	    "\"cache_affinity_wait_ms\":300,"				\
	    "\"last_cluster_affinity\":" on "}"
#define WAW_SESS_ON	WAW_SESS("true")
#define WAW_SESS_OFF	WAW_SESS("false")
#define PWAW_SESS_ON	PWAW_SESS("true")
#define PWAW_SESS_OFF	PWAW_SESS("false")

#define COLD_KEYS	((size_t)1 << 20)
#define MAX_REQS	4096		/* request structs (keys rotate over them) */

static const struct scenario scenarios[] = {
	{ "random", "\"random\"", FL_RANDOM, HINT_NONE, false, 0,
	    false, false, NULL, false },
	{ "round-robin", "\"round-robin\"", FL_RR, HINT_NONE, false, 0,
	    false, false, NULL, false },
	{ "power-of-n", "{\"algorithm\":\"power-of-n\",\"sample_count\":2}",
	    FL_PON, HINT_NONE, false, 0, false, false, NULL, false },
	{ "wait-and-widen",
	    "{\"algorithm\":\"wait-and-widen\","
	    "\"cache_affinity_backend_selection_count\":2,"
	    "\"cache_affinity_virtual_nodes\":150}", FL_WAW, HINT_NONE,
	    false, 0, false, false, NULL, false },
	{ "pulsar", "\"pulsar\"", FL_PULSAR_HIT, HINT_NONE, false, 0,
	    false, false, NULL, false },
	{ "pulsar-wait-and-widen",
	    "{\"algorithm\":\"pulsar-wait-and-widen\","
	    "\"cache_affinity_backend_selection_count\":2}", FL_PWAW_HIT,
	    HINT_NONE, false, 0, false, false, NULL, false },
	/* The same without the ranking cache, and with keys it cannot hold. */
	{ "pulsar-nocache", "\"pulsar\"", FL_PULSAR, HINT_NONE, true, 0,
	    false, false, NULL, false },
	{ "pwaw-nocache",
	    "{\"algorithm\":\"pulsar-wait-and-widen\","
	    "\"cache_affinity_backend_selection_count\":2}", FL_PWAW,
	    HINT_NONE, true, 0, false, false, NULL, false },
	{ "pulsar-cold-keys", "\"pulsar\"", FL_PULSAR, HINT_NONE, false,
	    COLD_KEYS, false, false, NULL, false },
	/*
	 * Session routing (issue 3): flag on, new and returning sessions,
	 * against their own floors; then against the same requests with
	 * every parameter identical but the flag off (issue 13: the
	 * overhead of the session rules), for new sessions also over only
	 * the requests that take the same path both ways.
	 */
	{ "waw-session-new", WAW_SESS_ON, FL_WAW, HINT_NONE, false, 0,
	    false, false, NULL, false },
	{ "waw-session-returning", WAW_SESS_ON, FL_WAW, HINT_OTHER, false, 0,
	    false, false, NULL, false },
	{ "pwaw-session-new", PWAW_SESS_ON, FL_PWAW_HIT, HINT_NONE, false, 0,
	    false, false, NULL, false },
	{ "pwaw-session-returning", PWAW_SESS_ON, FL_PWAW_HIT, HINT_OTHER,
	    false, 0, false, false, NULL, false },
	{ "waw-returning-vs-off", WAW_SESS_ON, FL_FLAGOFF, HINT_OTHER, false,
	    0, false, false, WAW_SESS_OFF, false },
	{ "pwaw-returning-vs-off", PWAW_SESS_ON, FL_FLAGOFF, HINT_OTHER,
	    false, 0, false, false, PWAW_SESS_OFF, false },
	{ "waw-returning-samepath-vs-off", WAW_SESS_ON, FL_FLAGOFF,
	    HINT_OTHER, false, 0, false, false, WAW_SESS_OFF, true },
	{ "pwaw-returning-samepath-vs-off", PWAW_SESS_ON, FL_FLAGOFF,
	    HINT_OTHER, false, 0, false, false, PWAW_SESS_OFF, true },
	{ "waw-new-vs-off", WAW_SESS_ON, FL_FLAGOFF, HINT_NONE, false, 0,
	    false, false, WAW_SESS_OFF, false },
	{ "pwaw-new-vs-off", PWAW_SESS_ON, FL_FLAGOFF, HINT_NONE, false, 0,
	    false, false, PWAW_SESS_OFF, false },
	{ "waw-new-samepath-vs-off", WAW_SESS_ON, FL_FLAGOFF, HINT_NONE,
	    false, 0, false, false, WAW_SESS_OFF, true },
	{ "pwaw-new-samepath-vs-off", PWAW_SESS_ON, FL_FLAGOFF, HINT_NONE,
	    false, 0, false, false, PWAW_SESS_OFF, true },
	/*
	 * Many tenants (issue 13): a stream alternating over 100 routing keys
	 * and 3 models (300 rings, all cached) against the same decisions on
	 * a single-tenant stream; and a ring the cache does not hold (ring
	 * cache off: one pass per decision) against hashing its virtual
	 * nodes once.
	 */
	{ "waw-many-tenants", WAW_K2_V150, FL_SINGLE, HINT_NONE, false, 0,
	    true, false, NULL, false },
	{ "waw-many-tenants-samepath", WAW_K2_V150, FL_SINGLE, HINT_NONE,
	    false, 0, true, false, NULL, true },
	{ "waw-many-tenants-cold-keys", WAW_K2_V150, FL_SINGLE, HINT_NONE,
	    false, COLD_KEYS, true, false, NULL, false },
	{ "waw-uncached-ring", WAW_K2_V150, FL_VNODES, HINT_NONE, false, 0,
	    false, true, NULL, false },
	/*
	 * The same 300-tenant stream through pulsar with the ranking cache
	 * on: 300 distinct prefix classes, each decision's class another
	 * than the one met last, all held by the class memo (1,024 classes:
	 * found by the pointers' hint, or by their hash) so that a decision
	 * builds no class; against the single-tenant stream's same
	 * decisions (the class met last, found by its bytes).
	 */
	{ "pulsar-many-tenants", "\"pulsar\"", FL_SINGLE, HINT_NONE, false, 0,
	    true, false, NULL, false },
};
#define NSCEN	(sizeof scenarios / sizeof scenarios[0])

/* --- options ----------------------------------------------------------------- */

struct opts {
	unsigned long	 iterations;
	unsigned long	 warmup;
	size_t		 cand[MAX_NCAND];
	size_t		 ncand;
	size_t		 keys;
	unsigned	 runs;
	const char	*csv;
	const char	*only;		/* scenario names (a, b, ...) or NULL */
};

/*
 * The comma list's iterator: the name at *p (its start and length; names
 * may be empty), then *p moves past its comma, or to NULL after the last.
 * Returns false once *p is NULL.
 */
static bool
list_next(const char **p, const char **name, size_t *len)
{
	const char *e;

	if (*p == NULL)
		return false;
	if ((e = strchr(*p, ',')) == NULL)
		e = *p + strlen(*p);
	*name = *p;
	*len = (size_t)(e - *p);
	*p = *e != '\0' ? e + 1 : NULL;
	return true;
}

/* Whether the list's name s (len bytes) is name. */
static bool
same_name(const char *name, const char *s, size_t len)
{
	return strlen(name) == len && memcmp(name, s, len) == 0;
}

/* Whether name is in the comma-separated list (NULL: every name). */
static bool
wanted(const char *list, const char *name)
{
	const char *p = list, *s;
	size_t len;

	if (list == NULL)
		return true;
	while (list_next(&p, &s, &len))
		if (same_name(name, s, len))
			return true;
	return false;
}

static void
usage(FILE *fp)
{
	size_t i;

	fprintf(fp,
	    "usage: sg-bench decide [--iterations N] [--warmup N] "
	    "[--candidates N,N,...]\n"
	    "                       [--keys N] [--runs R] [--csv FILE] "
	    "[--scenario LIST]\n"
	    "  --iterations N    timed decisions per run (default 200000)\n"
	    "  --warmup N        untimed decisions before each run "
	    "(default 20000)\n"
	    "  --candidates L    candidate counts (default 8,64,256)\n"
	    "  --keys N          rotating cache keys and request ids "
	    "(default 1024)\n"
	    "  --runs R          runs per cell; the median is reported "
	    "(default 5)\n"
	    "  --csv FILE        also write the table as CSV\n"
	    "  --scenario LIST   only these scenarios (NAME,NAME,...; "
	    "in table order), of:\n");
	for (i = 0; i < NSCEN; i++)
		fprintf(fp, "                      %s\n", scenarios[i].name);
}

static int
parse_ulong(const char *s, unsigned long min, unsigned long max,
    unsigned long *out)
{
	uint64_t v;

	if (sg_parse_u64(s, strlen(s), max, &v) != 0 || v < min)
		return -1;
	*out = (unsigned long)v;
	return 0;
}

static int
parse_cands(const char *s, struct opts *o)
{
	char buf[256], *tok, *save = NULL;
	unsigned long v;

	size_t len = strlen(s);

	if (len >= sizeof buf)
		return -1;
	memcpy(buf, s, len + 1);
	o->ncand = 0;
	for (tok = strtok_r(buf, ",", &save); tok != NULL;
	    tok = strtok_r(NULL, ",", &save)) {
		if (o->ncand == MAX_NCAND ||
		    parse_ulong(tok, 1, SG_MAX_CANDIDATES, &v) != 0)
			return -1;
		o->cand[o->ncand++] = v;
	}
	return o->ncand > 0 ? 0 : -1;
}

/* --- the benchmark world ----------------------------------------------------- */

struct world {
	sg_lbconf	*conf;
	sg_router	*rt;
	sg_snapshot	*snap;
	size_t		 n;
	size_t		 nreq;		/* requests, <= MAX_REQS */
	size_t		 nkeys;		/* keys; call k uses key k % nkeys */
	sg_request	*req;
	sg_request	*req1;		/* FL_SINGLE: req[] on one tenant */
	char		(*rks)[16];	/* tenants: routing keys */
	char		(*keys)[24];
	char		(*rids)[32];
	char		(*hints)[SG_ID_MAX + 1];	/* the requests' own hints */
	/* floor state */
	const sg_algdef	*def;
	uint64_t	*ring;		/* sorted entry hashes */
	uint32_t	*ring_idx;
	size_t		 nring;
	size_t		*order;
	size_t		*order2;
	double		*score;
	uint64_t	 rr;
	size_t		 k;		/* calls so far: keys keep rotating */
	/* FL_FLAGOFF: the flag-off twin router; samepath: the requests used */
	sg_lbconf	*conf_off;
	sg_router	*rt_off;
	size_t		*sel;		/* NULL: every request */
	size_t		 nsel;
	double		 same;		/* samepath: % of requests kept */
	/* the fixed per-call work (floor_fixed) */
	char		 memo_model[64];
	const char	*algname;
	double		 elapsed;	/* the decisions' elapsed time (0) */
	size_t		 excl_hi;	/* the marked exclusions (none) */
	sg_decision	 fdec;
	/* FL_*_HIT: a ranking table keyed like the router's cache */
	uint64_t	*ftag;		/* XXH3 of the prefix per slot */
	unsigned char	*fpfx;		/* the prefix bytes per slot */
	size_t		*fplen;
	uint16_t	*frank;		/* n candidate indices per slot */
	uint64_t	*fw;		/* the weights' bits the table holds */
	size_t		 nfslot;	/* a power of two */
	/* FL_WAW: each key's group by its key hash (a memo hit's table) */
	uint64_t	*gkh;
	uint16_t	(*gg)[2];
	size_t		 ngslot;	/* a power of two */
};

#define FPFX_MAX	320		/* prefix bytes the table holds */

/* The request of call k, with key k % nkeys. */
static sg_request *
req_for(struct world *w, size_t k)
{
	size_t j = w->sel != NULL ? w->sel[k % w->nsel] : k % w->nreq;
	sg_request *r = &w->req[j];

	/* (one division per call when keys and requests pair up) */
	if (w->nkeys != w->nreq)
		r->cache_affinity_key = w->keys[k % w->nkeys];
	return r;
}

/*
 * A deterministic, realistic snapshot: 32-slot engines, about a third of
 * them full with a queue behind, throughput 8k..14k tokens/s, rtt 1..13 ms.
 */
static int
build_snapshot(sg_snapshot *s, size_t n)
{
	sg_error err;
	size_t i;

	sg_snapshot_clear(s);
	for (i = 0; i < n; i++) {
		sg_cluster c;
		char id[64];
		uint64_t run;

		snprintf(id, sizeof id, "region-%02zu-cluster-%03zu", i % 7, i);
		if (sg_cluster_init(&c, id, strlen(id)) != 0)
			return -1;
		c.rtt_ms = (double)(1 + (i * 5) % 13);
		c.last_mean_input_tps = 8000.0 + 1000.0 * (double)(i % 7);
		c.max_input_tps = c.last_mean_input_tps * 1.5;
		c.max_engine_concurrency = 32;
		run = (i * 11) % 45;
		c.running = run;
		c.queued = run > 32 ? run - 32 : 0;
		c.queued_input_tokens = c.queued * 1800 + (i % 3) * 500;
		c.total_input_tokens = c.queued_input_tokens + run * 1500;
		c.kv_capacity_tokens = 1000000;
		c.kv_used_tokens = run * 20000;
		c.kv_free_tokens = c.kv_capacity_tokens - c.kv_used_tokens;
		if (sg_snapshot_add(s, &c, &err) != 0)
			return -1;
	}
	return 0;
}

static int
world_init(struct world *w, const struct scenario *sc, size_t n, size_t nkeys)
{
	size_t nreq = nkeys < MAX_REQS ? nkeys : MAX_REQS;
	char cfg[1024];
	sg_error err;
	size_t j;

	memset(w, 0, sizeof *w);
	if (sc->tenants)
		snprintf(cfg, sizeof cfg, "{\"default\":\"power-of-n\","
		    "\"models\":{\"" MODEL "\":%s,\"" MODEL "-1\":%s,"
		    "\"" MODEL "-2\":%s}}", sc->algo, sc->algo, sc->algo);
	else
		snprintf(cfg, sizeof cfg, "{\"default\":\"power-of-n\","
		    "\"models\":{\"" MODEL "\":%s}}", sc->algo);
	if (sg_lbconf_parse(&w->conf, cfg, strlen(cfg), "bench", &err) != 0) {
		fprintf(stderr, "sg-bench: %s: %s\n", sc->name, err.text);
		return -1;
	}
	if (sg_router_new(&w->rt, w->conf, 42, &err) != 0) {
		fprintf(stderr, "sg-bench: router: %s\n", err.text);
		return -1;
	}
	if (sc->nocache && sg_router_set_cache(w->rt, false) != 0)
		return -1;
	if (sc->noring && sg_router_set_ring_cache_bytes(w->rt, 0) != 0)
		return -1;
	if (sc->offalgo != NULL) {
		snprintf(cfg, sizeof cfg, "{\"default\":\"power-of-n\","
		    "\"models\":{\"" MODEL "\":%s}}", sc->offalgo);
		if (sg_lbconf_parse(&w->conf_off, cfg, strlen(cfg), "bench",
		    &err) != 0 || sg_router_new(&w->rt_off, w->conf_off, 42,
		    &err) != 0) {
			fprintf(stderr, "sg-bench: %s: %s\n", sc->name,
			    err.text);
			return -1;
		}
	}
	if (sg_lbconf_resolve(w->conf, MODEL, NULL, false, &w->def, &err) != 0)
		return -1;
	snprintf(w->memo_model, sizeof w->memo_model, "%s", MODEL);
	w->algname = sg_algorithm_name(w->def->algorithm);
	w->snap = sg_snapshot_new();
	w->n = n;
	w->nreq = nreq;
	w->nkeys = nkeys;
	w->req = calloc(nreq, sizeof *w->req);
	w->keys = calloc(nkeys, sizeof *w->keys);
	w->rids = calloc(nreq, sizeof *w->rids);
	w->hints = calloc(nreq, sizeof *w->hints);
	w->req1 = calloc(nreq, sizeof *w->req1);
	w->rks = calloc(TENANT_RKS, sizeof *w->rks);
	w->order = calloc(n, sizeof *w->order);
	w->order2 = calloc(n, sizeof *w->order2);
	w->score = calloc(n, sizeof *w->score);
	if (w->snap == NULL || w->req == NULL || w->keys == NULL ||
	    w->rids == NULL || w->hints == NULL || w->order == NULL || w->order2 == NULL ||
	    w->req1 == NULL || w->rks == NULL ||
	    w->score == NULL ||
	    build_snapshot(w->snap, n) != 0)
		return -1;
	for (j = 0; j < nkeys; j++)
		snprintf(w->keys[j], sizeof w->keys[j], "session-%08zx",
		    j * 2654435761u);
	for (j = 0; j < TENANT_RKS; j++)
		snprintf(w->rks[j], sizeof w->rks[j], "tenant-%03zu", j);
	for (j = 0; j < nreq; j++) {
		sg_request *r = &w->req[j];

		sg_header h[6];
		size_t nh = 0;

		snprintf(w->rids[j], sizeof w->rids[j], "req-%zu", j);
		/*
		 * Each request is parsed from its headers, so its strings
		 * (the hint among them, with its length) live together in
		 * the request's own storage, as a proxy's parsed request
		 * holds them, not in scattered arrays; and the hint is the
		 * request's copy, not the snapshot's (reading that would read
		 * a cold candidate record).
		 */
		h[nh++] = (sg_header){ "x-request-id", w->rids[j] };
		h[nh++] = (sg_header){ "x-model", MODEL };
		h[nh++] = (sg_header){ "x-input-tokens", TOKENS_STR };
		h[nh++] = (sg_header){ "x-routing-key", "tenant-a" };
		h[nh++] = (sg_header){ "x-cache-affinity-key", w->keys[j] };
		if (sc->hint == HINT_OTHER) {
			snprintf(w->hints[j], sizeof w->hints[j], "%s",
			    sg_snapshot_get(w->snap, (j * 31 + 1) % n)->id);
			h[nh++] = (sg_header){ "x-stargate-last-cluster-id",
			    w->hints[j] };
		}
		sg_request_init(r);
		if (sg_request_from_header_list(r, h, nh, &err) != 0) {
			fprintf(stderr, "sg-bench: request: %s\n", err.text);
			return -1;
		}
		w->req1[j] = *r;
		if (sc->tenants) {
			/* j mod 300 picks the pair: 100 and 3 are coprime */
			static const char *const models[TENANT_MODELS] = {
				MODEL, MODEL "-1", MODEL "-2" };

			r->routing_key = w->rks[j % TENANT_RKS];
			r->model = models[j % TENANT_MODELS];
		}
	}
	return 0;
}

static void
world_free(struct world *w)
{
	size_t j;

	if (w->req != NULL)
		for (j = 0; j < w->nreq; j++)
			sg_request_release(&w->req[j]);
	free(w->req);
	free(w->req1);
	free(w->rks);
	free(w->keys);
	free(w->rids);
	free(w->hints);
	free(w->ring);
	free(w->ring_idx);
	free(w->order);
	free(w->order2);
	free(w->score);
	free(w->sel);
	free(w->gkh);
	free(w->gg);
	free(w->ftag);
	free(w->fpfx);
	free(w->fplen);
	free(w->frank);
	free(w->fw);
	sg_snapshot_free(w->snap);
	sg_router_free(w->rt);
	sg_lbconf_free(w->conf);
	sg_router_free(w->rt_off);
	sg_lbconf_free(w->conf_off);
}

/* --- floors ------------------------------------------------------------------- */

static volatile size_t	sink;		/* results land here: nothing is elided */

static int
ring_cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

/*
 * The w-a-w ring, built once outside the timed loop (the floor assumes a
 * cached ring).  Entries pack (hash, index) sorted by hash.
 */
static int
build_ring(struct world *w)
{
	unsigned V = w->def->virtual_nodes ? w->def->virtual_nodes : 150;
	sgi_hashbuf prefix;
	uint64_t *pairs;
	size_t i, v, k = 0;

	w->nring = w->n * V;
	pairs = calloc(w->nring * 2, sizeof *pairs);
	w->ring = calloc(w->nring, sizeof *w->ring);
	w->ring_idx = calloc(w->nring, sizeof *w->ring_idx);
	if (pairs == NULL || w->ring == NULL || w->ring_idx == NULL) {
		free(pairs);
		return -1;
	}
	sgi_ring_prefix(&prefix, w->def, &w->req[0]);
	for (i = 0; i < w->n; i++) {
		const sg_cluster *c = sg_snapshot_get(w->snap, i);

		for (v = 0; v < V; v++) {
			pairs[2 * k] = sgi_ring_entry_hash(&prefix, c->id,
			    c->id_len, v);
			pairs[2 * k + 1] = i;
			k++;
		}
	}
	qsort(pairs, w->nring, 2 * sizeof *pairs, ring_cmp);
	for (k = 0; k < w->nring; k++) {
		w->ring[k] = pairs[2 * k];
		w->ring_idx[k] = (uint32_t)pairs[2 * k + 1];
	}
	free(pairs);
	return 0;
}

/* Ring lookup: key hash, lower_bound, walk to K distinct clusters. */
static size_t
floor_ring(struct world *w, const sg_request *r, size_t *group, size_t K)
{
	sgi_hashbuf prefix;
	size_t lo = 0, hi = w->nring, got = 0, i, j, steps;
	uint64_t h;

	sgi_ring_prefix(&prefix, w->def, r);
	h = sgi_ring_key_hash(&prefix, r->cache_affinity_key,
	    strlen(r->cache_affinity_key));
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (w->ring[mid] < h)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (steps = 0; got < K && steps < w->nring; steps++) {
		uint32_t c = w->ring_idx[(lo + steps) % w->nring];

		for (j = 0; j < got && group[j] != c; j++)
			;
		if (j == got)
			group[got++] = c;
	}
	i = got;
	return i;
}

/* Each key's group (from the prebuilt ring) at the slot of its hash. */
static int
build_gtable(struct world *w)
{
	sgi_hashbuf prefix;
	size_t j, group[8], slot;
	uint64_t h;

	for (w->ngslot = 64; w->ngslot < 4 * w->nkeys; w->ngslot *= 2)
		;
	w->gkh = calloc(w->ngslot, sizeof *w->gkh);
	w->gg = calloc(w->ngslot, sizeof *w->gg);
	if (w->gkh == NULL || w->gg == NULL)
		return -1;
	for (j = 0; j < w->nkeys; j++) {
		sg_request *r = req_for(w, j);

		sgi_ring_prefix(&prefix, w->def, r);
		h = sgi_ring_key_hash(&prefix, r->cache_affinity_key,
		    strlen(r->cache_affinity_key));
		slot = (size_t)(h >> 20) & (w->ngslot - 1);
		(void)floor_ring(w, r, group, 2);
		w->gkh[slot] = h;
		w->gg[slot][0] = (uint16_t)group[0];
		w->gg[slot][1] = (uint16_t)group[1];
	}
	return 0;
}

/*
 * A group-memo hit: the ring prefix and its fingerprint (one XXH3), the
 * key hash, one probe (the key hash compared), the group copied.
 */
static size_t
floor_group(struct world *w, const sg_request *r, size_t *group)
{
	sgi_hashbuf prefix;
	uint64_t h;
	size_t slot;

	sgi_ring_prefix(&prefix, w->def, r);
	h = sgi_ring_key_hash(&prefix, r->cache_affinity_key,
	    strlen(r->cache_affinity_key));
	sink += (size_t)sgi_hb_xxh3(&prefix);
	slot = (size_t)(h >> 20) & (w->ngslot - 1);
	if (w->gkh[slot] != h)
		sink++;		/* a table collision: same work */
	group[0] = w->gg[slot][0];
	group[1] = w->n > 1 ? w->gg[slot][1] : w->gg[slot][0];
	return w->n > 1 ? 2 : 1;
}

/*
 * Core selection's unavoidable part over a set: TTFT and capacity of each
 * member, the bucket span, n = 2 samples.  Returns the pick, or SIZE_MAX
 * when no member has capacity.
 */
static size_t
floor_core(struct world *w, const sg_request *r, const size_t *set,
    size_t nset, sgi_rng *g)
{
	double lo = INFINITY, hi = -INFINITY, best = INFINITY;
	size_t i, pick = SIZE_MAX, s, ncap = 0;

	for (i = 0; i < nset; i++) {
		const sg_cluster *c = sg_snapshot_get(w->snap, set[i]);
		double t = sgi_ttft_ms(c, r->input_tokens, r->priority, 1.0,
		    false, false);

		if (t < lo)
			lo = t;
		if (t > hi)
			hi = t;
		if (sgi_has_capacity(c, 0))
			w->order2[ncap++] = set[i];
		w->score[set[i]] = t;
	}
	if (hi - lo > 20)	/* several buckets: the walk is part of it */
		sink += (size_t)(hi - lo);
	for (s = 0; s < 2 && ncap > 0; s++) {
		i = w->order2[(size_t)sgi_rng_below(g, ncap)];
		if (w->score[i] < best) {
			best = w->score[i];
			pick = i;
		}
	}
	return pick;
}

/* N hashes (one pass), then N scores (a second pass, so both pipeline). */
static size_t
floor_pulsar_scores(struct world *w, const sg_request *r)
{
	sgi_hashbuf prefix;
	size_t i, nr = 0;
	uint64_t h;
	double wt;

	sgi_pulsar_prefix(&prefix, w->def, r);
	sgi_hb_prepare(&prefix);	/* the library's fastest hashing */
	sgi_pulsar_hashes(&prefix, sgi_snapshot_clusters(w->snap), w->n,
	    w->score);
	for (i = 0; i < w->n; i++) {
		memcpy(&h, &w->score[i], sizeof h);
		if (sgi_pulsar_weight(w->def, sg_snapshot_get(w->snap, i), &wt) &&
		    sgi_pulsar_score(h, wt, &w->score[i]))
			w->order[nr++] = i;
		else
			w->score[i] = -1;
	}
	return nr;
}

/*
 * The decision of r's twin (same key and id) on router rt: the
 * single-tenant stream (FL_SINGLE) or the flag-off router (FL_FLAGOFF).
 */
static size_t
floor_twin(struct world *w, sg_router *rt, const sg_request *r)
{
	sg_request *t = &w->req1[(size_t)(r - w->req)];
	sg_decision d;
	sg_error err;

	t->cache_affinity_key = r->cache_affinity_key;
	t->session_state = SG_SESSION_UNCLASSIFIED;
	t->session_promoted = false;
	if (sg_router_decide(rt, w->snap, t, 0, &d, &err) != 0)
		return 0;
	return d.index;
}

/* The empty decision (a memset of the struct would be `rep stos`). */
static const sg_decision zero_decision;

/*
 * The router's fixed per-call work, which every algorithm pays, check for
 * check: the arguments and the elapsed time (finite, >= 0), one probe of
 * the resolution memo (a string compare of the model name), the
 * required-key check, the algorithm's range, the empty snapshot, the
 * request's exclusions (none here: the loop bound and the marked array's
 * high-water mark), the all-excluded and admission checks, the dispatch
 * on the algorithm, the decision zeroed and filled, the kind and
 * wait-deadline checks after it.  Returns pick.
 */
static size_t
floor_fixed(struct world *w, const sg_request *r, size_t pick)
{
	sg_decision *d = &w->fdec;
	double e = w->elapsed;
	size_t i;

	if (w->rt == NULL || w->snap == NULL || r == NULL)
		return 0;
	if (!(e >= 0) || !isfinite(e))
		return 0;
	if (r->routing_method == NULL && !r->routing_method_invalid &&
	    strcmp(w->memo_model, r->model) != 0)
		return 0;
	if (w->def->require_cache_affinity_key &&
	    (r->cache_affinity_key == NULL || r->cache_affinity_key[0] == 0))
		return 0;
	if (w->def->algorithm < 0 || w->def->algorithm >= SG_ALG_COUNT ||
	    sgi_snapshot_count(w->snap) == 0)
		return 0;
	if (w->excl_hi > 0)
		w->excl_hi = 0;
	for (i = 0; i < r->nexcluded; i++)
		sink++;
	if (w->n - r->nexcluded == 0 || w->def->has_max_input_work)
		sink++;
	switch (w->def->algorithm) {	/* the dispatch */
	case SG_ALG_ROUND_ROBIN:
		sink += 3;
		break;
	case SG_ALG_RANDOM:
		sink += 5;
		break;
	default:
		sink++;
		break;
	}
	*d = zero_decision;	/* vector stores, as the router's */
	d->algorithm = w->algname;
	d->kind = SG_DECIDE_SELECT;
	d->index = pick;
	d->cluster_id = sg_snapshot_get(w->snap, pick)->id;
	d->rank_depth = 1;
	if (r->has_max_wait && (double)r->max_wait_ms < SG_MAX_WAIT_CAP_MS)
		sink++;
	if (d->kind == SG_DECIDE_WAIT || d->kind == SG_DECIDE_REJECT ||
	    d->algorithm == NULL)
		sink++;
	return pick;
}

/* The weight's bits under the definition's mode (the cache compares them). */
static uint64_t
weight_bits(const struct world *w, const sg_cluster *c)
{
	uint64_t b;

	if (w->def->rendezvous_weight == SG_WEIGHT_LAST_MEAN_INPUT_TPS)
		memcpy(&b, &c->last_mean_input_tps, sizeof b);
	else
		memcpy(&b, &c->max_input_tps, sizeof b);
	return b;
}

/* The ranking of r (untimed): ranked candidates by score, then the rest. */
static void
rank_full(struct world *w, const sg_request *r, uint16_t *rank)
{
	size_t i, k, nr = floor_pulsar_scores(w, r);

	for (i = 0; i < nr; i++) {
		uint64_t b;

		memcpy(&b, &w->score[w->order[i]], sizeof b);
		w->order[i] = ((size_t)~b & ~(size_t)0xfff) | w->order[i];
	}
	sgi_sort_keys(w->order, w->order2, nr);
	for (i = 0; i < nr; i++)
		rank[i] = (uint16_t)(w->order[i] & 0xfff);
	for (i = 0, k = nr; i < w->n && k < w->n; i++)
		if (!(w->score[i] > 0))
			rank[k++] = (uint16_t)i;
}

/*
 * The table the cache-hit floors probe: every key's prefix at the slot of
 * its XXH3, the weights' bits and a ranking per slot (built untimed).
 */
static int
build_ftable(struct world *w)
{
	sgi_hashbuf prefix;
	size_t j, i, slot;
	uint64_t h;

	for (w->nfslot = 64; w->nfslot < 4 * w->nkeys; w->nfslot *= 2)
		;
	w->ftag = calloc(w->nfslot, sizeof *w->ftag);
	w->fpfx = calloc(w->nfslot, FPFX_MAX);
	w->fplen = calloc(w->nfslot, sizeof *w->fplen);
	w->frank = calloc(w->nfslot * w->n, sizeof *w->frank);
	w->fw = calloc(w->n, sizeof *w->fw);
	if (w->ftag == NULL || w->fpfx == NULL || w->fplen == NULL ||
	    w->frank == NULL || w->fw == NULL)
		return -1;
	for (i = 0; i < w->n; i++)
		w->fw[i] = weight_bits(w, sg_snapshot_get(w->snap, i));
	for (j = 0; j < w->nkeys; j++) {
		sg_request *r = req_for(w, j);

		sgi_pulsar_prefix(&prefix, w->def, r);
		if (prefix.len > FPFX_MAX)
			return -1;
		h = XXH3_64bits(prefix.b, prefix.len);
		slot = (size_t)h & (w->nfslot - 1);
		w->ftag[slot] = h;
		w->fplen[slot] = prefix.len;
		memcpy(w->fpfx + slot * FPFX_MAX, prefix.b, prefix.len);
		rank_full(w, r, w->frank + slot * w->n);
	}
	return 0;
}

/*
 * A ranking-cache hit: build the key (the prefix), one XXH3 of it, one
 * probe (tag, length and bytes compared) and the check that the n
 * weights are those the ranking was computed under (n loads: callers may
 * change a snapshot's clusters in place, so a hit must look).  Returns
 * the slot's ranking.
 */
static const uint16_t *
floor_probe(struct world *w, const sg_request *r)
{
	const sg_cluster *c = sgi_snapshot_clusters(w->snap);
	sgi_hashbuf prefix;
	uint64_t h, diff = 0;
	size_t slot, i;

	sgi_pulsar_prefix(&prefix, w->def, r);
	h = XXH3_64bits(prefix.b, prefix.len);
	slot = (size_t)h & (w->nfslot - 1);
	for (i = 0; i < w->n; i++)
		diff |= w->fw[i] ^ weight_bits(w, &c[i]);
	if (w->ftag[slot] != h || w->fplen[slot] != prefix.len ||
	    memcmp(w->fpfx + slot * FPFX_MAX, prefix.b, prefix.len) != 0 ||
	    diff != 0)
		sink++;		/* a table collision: same work */
	return w->frank + slot * w->n;
}

/* The first ranked candidate with KV room (pulsar's walk). */
static size_t
floor_walk(struct world *w, const sg_request *r, const uint16_t *rank)
{
	size_t i;

	for (i = 0; i < w->n; i++) {
		const sg_cluster *c = sg_snapshot_get(w->snap, rank[i]);

		if (!w->def->consider_kv_free_tokens ||
		    c->kv_free_tokens >= r->input_tokens)
			return rank[i];
	}
	return 0;
}

/*
 * Uncached pulsar's least work: the prefix, every candidate hashed (one
 * batch, prepared prefix) and weighed, the upper bound w / (1 - u) of its
 * score (a division), the top m bounds kept in top[0..m) (best first),
 * and one logarithm (the exact score) for each of those m.
 */
static size_t
floor_pulsar_top(struct world *w, const sg_request *r, size_t *top,
    size_t m)
{
	const sg_cluster *c = sgi_snapshot_clusters(w->snap);
	double wt, b, tb[2] = { -1, -1 }, v;
	sgi_hashbuf prefix;
	size_t i, nt = 0;
	uint64_t h;

	sgi_pulsar_prefix(&prefix, w->def, r);
	sgi_hb_prepare(&prefix);
	sgi_pulsar_hashes(&prefix, c, w->n, w->score);
	for (i = 0; i < w->n; i++) {
		memcpy(&h, &w->score[i], sizeof h);
		if (!sgi_pulsar_weight(w->def, &c[i], &wt))
			continue;
		b = wt / ((double)(int64_t)(~h >> 1) * 0x1p-63);
		if (b > tb[0]) {
			tb[1] = tb[0];
			top[1] = top[0];
			tb[0] = b;
			top[0] = i;
		} else if (m > 1 && b > tb[1]) {
			tb[1] = b;
			top[1] = i;
		}
	}
	nt = w->n < m ? w->n : m;
	for (i = 0; i < nt; i++) {
		memcpy(&h, &w->score[top[i]], sizeof h);
		if (sgi_pulsar_weight(w->def, &c[top[i]], &wt) &&
		    sgi_pulsar_score(h, wt, &v))
			sink += v > 1;
	}
	return nt;
}

/*
 * What a ring the cache does not hold must do at least: build the prefix,
 * hash the key and every one of the n * V virtual nodes once (the
 * library's batch hashing with a prepared prefix), nothing else.
 */
static size_t
floor_vnodes(struct world *w, const sg_request *r)
{
	uint64_t V = w->def->virtual_nodes ? w->def->virtual_nodes : 1, v;
	uint64_t hv[64], acc;
	sgi_hashbuf prefix;
	size_t i, j, nb;

	sgi_ring_prefix(&prefix, w->def, r);
	acc = sgi_ring_key_hash(&prefix, r->cache_affinity_key,
	    strlen(r->cache_affinity_key));
	sgi_hb_prepare(&prefix);
	for (i = 0; i < w->n; i++) {
		const sg_cluster *c = sg_snapshot_get(w->snap, i);

		for (v = 0; v < V; v += nb) {
			nb = V - v < 64 ? (size_t)(V - v) : 64;
			sgi_ring_entry_hashes(&prefix, c->id, c->id_len, v, nb,
			    hv);
			for (j = 0; j < nb; j++)
				acc ^= hv[j];
		}
	}
	return (size_t)acc;
}

/* The pulsar-wait-and-widen fallback: the full ranking, core over all. */
static size_t
floor_pwaw_all(struct world *w, const sg_request *r, sgi_rng *g)
{
	size_t i, nr = floor_pulsar_scores(w, r);

	/*
	 * The library's sort: scores (positive) packed as ~bits above the
	 * index, sorted as integers (ties left as they fall).
	 */
	for (i = 0; i < nr; i++) {
		uint64_t b;

		memcpy(&b, &w->score[w->order[i]], sizeof b);
		w->order[i] = ((size_t)~b & ~(size_t)0xfff) | w->order[i];
	}
	sgi_sort_keys(w->order, w->order2, nr);
	for (i = 0; i < nr; i++)
		w->order[i] &= 0xfff;
	return floor_core(w, r, w->order, nr, g);
}

/* One floor "decision"; returns something derived so it is not elided. */
static size_t
floor_once(struct world *w, const struct scenario *sc, sg_request *r)
{
	size_t group[8], i, best = 0, nr;
	const uint16_t *rank;
	const sg_cluster *c;
	sgi_rng g;

	switch (sc->floor) {
	case FL_RANDOM:
		sgi_rng_seed(&g, 42, w->def, r);
		return floor_fixed(w, r, (size_t)sgi_rng_below(&g, w->n));
	case FL_RR:
		c = sg_snapshot_get(w->snap, (size_t)(w->rr++ % w->n));
		return floor_fixed(w, r, c->id_len % w->n);
	case FL_PON:
		sgi_rng_seed(&g, 42, w->def, r);
		group[0] = (size_t)sgi_rng_below(&g, w->n);
		group[1] = (size_t)sgi_rng_below(&g, w->n - 1);
		if (group[1] >= group[0])
			group[1]++;
		return floor_fixed(w, r, sgi_comparator_ms(sg_snapshot_get(
		    w->snap, group[0]), r->input_tokens, r->priority, 1.0) <=
		    sgi_comparator_ms(sg_snapshot_get(w->snap, group[1]),
		    r->input_tokens, r->priority, 1.0) ? group[0] : group[1]);
	case FL_WAW:
		/*
		 * ring lookup + walk to K = 2, core selection over the group;
		 * only when no member has capacity, the scan and bucket walk
		 * over every candidate.
		 */
		sgi_rng_seed(&g, 42, w->def, r);
		nr = floor_group(w, r, group);
		best = floor_core(w, r, group, nr, &g);
		if (best == SIZE_MAX) {
			for (i = 0; i < w->n; i++)
				w->order[i] = i;
			best = floor_core(w, r, w->order, w->n, &g);
		}
		return floor_fixed(w, r, best != SIZE_MAX ? best : 0);
	case FL_PULSAR:
		floor_pulsar_top(w, r, group, 1);
		return floor_fixed(w, r, group[0]);
	case FL_PULSAR_HIT:
		rank = floor_probe(w, r);
		return floor_fixed(w, r, floor_walk(w, r, rank));
	case FL_PWAW_HIT:
		/* a hit, core selection over rank 1..k; else over them all */
		sgi_rng_seed(&g, 42, w->def, r);
		rank = floor_probe(w, r);
		group[0] = rank[0];
		group[1] = w->n > 1 ? rank[1] : rank[0];
		best = floor_core(w, r, group, w->n < 2 ? w->n : 2, &g);
		if (best == SIZE_MAX) {
			for (i = 0; i < w->n; i++)
				w->order[i] = rank[i];
			best = floor_core(w, r, w->order, w->n, &g);
		}
		return floor_fixed(w, r, best != SIZE_MAX ? best : 0);
	case FL_SINGLE:
		/* the same request (key, id) from the single-tenant stream */
		return floor_twin(w, w->rt, r);
	case FL_FLAGOFF:
		return floor_twin(w, w->rt_off, r);
	case FL_VNODES:
		return floor_fixed(w, r, floor_vnodes(w, r) % w->n);
	case FL_PWAW:
	default:
		/*
		 * the top k = 2 by bound (two logarithms), core selection
		 * over them; only when neither has capacity, the full
		 * ranking and core selection over every candidate.
		 */
		sgi_rng_seed(&g, 42, w->def, r);
		nr = floor_pulsar_top(w, r, group, 2);
		best = floor_core(w, r, group, nr, &g);
		if (best == SIZE_MAX)
			best = floor_pwaw_all(w, r, &g);
		return floor_fixed(w, r, best != SIZE_MAX ? best : 0);
	}
}

/* --- measurement --------------------------------------------------------------- */

static int
dbl_cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

struct tally {
	unsigned long	select, wait, reject, fail;
};

static int
decide_once(struct world *w, size_t k, struct tally *t)
{
	sg_request *r = req_for(w, k);
	sg_decision d;
	sg_error err;
	int rc;

	r->session_state = SG_SESSION_UNCLASSIFIED;
	r->session_promoted = false;
	rc = sg_router_decide(w->rt, w->snap, r, 0, &d, &err);
	if (rc != 0) {
		if (t != NULL)
			t->fail++;
		return rc;
	}
	if (t != NULL) {
		if (d.kind == SG_DECIDE_SELECT)
			t->select++;
		else if (d.kind == SG_DECIDE_WAIT)
			t->wait++;
		else
			t->reject++;
	}
	sink += d.index;
	return 0;
}

static double	timer_ns;	/* two back-to-back clock reads */

static void
timer_calibrate(void)
{
	double v[4097];
	size_t i;

	for (i = 0; i < 4097; i++) {
		double t0 = now_ns();

		v[i] = now_ns() - t0;
	}
	qsort(v, 4097, sizeof *v, dbl_cmp);
	timer_ns = v[2048];
}

/*
 * Samples are kept in groups of GROUP batches (or GROUP * BATCH single
 * calls), and a group during which the thread was switched out
 * (getrusage(2): voluntary or involuntary context switches) is dropped:
 * its time includes other processes' work, and on a shared machine those
 * groups, not the decision, make the p99.  The check costs a system call
 * per group, outside the timed calls.  nkept/ndropped count the samples.
 * A dropped group is followed by rewarm(): the other process evicted the
 * row's working set (at 256 candidates its rings, group memo and records
 * are about a megabyte), and the batches right after the switch, timed
 * on cold caches, were kept and made the p99 of the faster rows.
 */
#define GROUP		64

static unsigned long	nkept, ndropped, nrewarm;

static long
nswitches(void)
{
	struct rusage ru;

	if (getrusage(RUSAGE_THREAD, &ru) != 0)
		return 0;
	return ru.ru_nvcsw + ru.ru_nivcsw;
}

/*
 * After a group that ends at samples[end] and started at samples[start]:
 * keep it (return end) or drop it (return start) if a switch happened.
 */
static unsigned long
group_done(long *cs, unsigned long start, unsigned long end)
{
	long now = nswitches();

	if (now == *cs) {
		nkept += end - start;
		return end;
	}
	*cs = now;
	ndropped += end - start;
	return start;
}

/*
 * After a dropped group: every request once more, untimed, so that the
 * next group does not start on the caches the other process left behind
 * (at 8 candidates and under load, the batches just after a switch made
 * most of the plain wait-and-widen row's p99: sg-bench(1)).
 */
static void
rewarm(struct world *w, const struct scenario *sc, bool floor)
{
	size_t i, n = w->sel != NULL ? w->nsel : w->nreq;

	for (i = 0; i < n; i++, w->k++) {
		if (floor)
			sink += floor_once(w, sc, req_for(w, w->k));
		else
			(void)decide_once(w, w->k, NULL);
	}
	nrewarm++;
}

/*
 * p50 and p99 of samples[0..n), or, when every group was dropped, of the
 * last group's, samples[0..last) (then they include the interference; the
 * earlier groups' were written over).
 */
static void
percentiles(double *samples, unsigned long n, unsigned long last,
    double *p50, double *p99)
{
	if (n == 0)
		n = last;
	qsort(samples, n, sizeof *samples, dbl_cmp);
	*p50 = samples[n / 2];
	*p99 = samples[(size_t)((double)(n - 1) * 0.99)];
}

/*
 * One run: warm-up, then iterations in batches; fills p50/p99 (ns per
 * decision) of the batch means.
 */
static void
run_cell(struct world *w, const struct scenario *sc, const struct opts *o,
    bool floor, double *samples, double *p50, double *p99)
{
	unsigned long nb = o->iterations / BATCH, b, i, kept = 0, g = 0;
	unsigned long last = 0;
	long cs;

	for (i = 0; i < o->warmup; i++, w->k++) {
		if (floor)
			sink += floor_once(w, sc, req_for(w, w->k));
		else
			(void)decide_once(w, w->k, NULL);
	}
	cs = nswitches();
	for (b = 0; b < nb; b++) {
		double t0 = now_ns(), t1;

		if (floor)
			for (i = 0; i < BATCH; i++, w->k++)
				sink += floor_once(w, sc, req_for(w, w->k));
		else
			for (i = 0; i < BATCH; i++, w->k++)
				(void)decide_once(w, w->k, NULL);
		t1 = now_ns();
		samples[kept++] = (t1 - t0) / BATCH;
		if (++g == GROUP || b + 1 == nb) {
			unsigned long start = kept - g;

			kept = group_done(&cs, start, kept);
			if (kept == start && b + 1 < nb) {
				rewarm(w, sc, floor);
				cs = nswitches();	/* a switch in it: no matter */
			}
			last = g;
			g = 0;
		}
	}
	percentiles(samples, kept, last, p50, p99);
}

/* One run timing every decision on its own, minus the timer's cost. */
static void
run_calls(struct world *w, const struct scenario *sc, const struct opts *o,
    double *samples, double *p50, double *p99)
{
	unsigned long n = o->iterations, i, kept = 0, g = 0, last = 0;
	long cs;

	for (i = 0; i < o->warmup; i++, w->k++)
		(void)decide_once(w, w->k, NULL);
	cs = nswitches();
	for (i = 0; i < n; i++, w->k++) {
		double t0 = now_ns(), t1;

		(void)decide_once(w, w->k, NULL);
		t1 = now_ns();
		samples[kept++] = t1 - t0 - timer_ns;
		if (++g == GROUP * BATCH || i + 1 == n) {
			unsigned long start = kept - g;

			kept = group_done(&cs, start, kept);
			if (kept == start && i + 1 < n) {
				rewarm(w, sc, false);
				cs = nswitches();
			}
			last = g;
			g = 0;
		}
	}
	percentiles(samples, kept, last, p50, p99);
}

static double
median(double *v, size_t n)
{
	qsort(v, n, sizeof *v, dbl_cmp);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

struct row {
	const char	*scenario;
	size_t		 n;
	double		 p50, p99, floor50, ratio, allocs;
	double		 c50, c99;	/* per call */
	double		 hit;		/* ranking-cache hit %, NAN: none */
	double		 sel, wait, rej;
	double		 same;		/* samepath: % of requests kept */
	double		 rmin, rmax;	/* spread of the per-run ratios */
};

/*
 * Keep only the requests whose decision takes the same path (kind and
 * phase) as their twin's: with the flag off (FL_FLAGOFF) or on the
 * single-tenant stream (FL_SINGLE, the same router); w->nsel of w->nreq
 * remain.
 */
static int
same_path(struct world *w)
{
	sg_router *twin = w->rt_off != NULL ? w->rt_off : w->rt;
	sg_decision on, off;
	sg_error err;
	size_t j;

	if ((w->sel = calloc(w->nreq, sizeof *w->sel)) == NULL)
		return -1;
	for (j = 0; j < w->nreq; j++) {
		sg_request *r = &w->req[j], *t = &w->req1[j];

		r->session_state = t->session_state = SG_SESSION_UNCLASSIFIED;
		r->session_promoted = t->session_promoted = false;
		if (sg_router_decide(w->rt, w->snap, r, 0, &on, &err) != 0 ||
		    sg_router_decide(twin, w->snap, t, 0, &off, &err) != 0)
			return -1;
		if (on.kind == off.kind && on.phase == off.phase)
			w->sel[w->nsel++] = j;
	}
	w->same = 100.0 * (double)w->nsel / (double)w->nreq;
	return w->nsel > 0 ? 0 : -1;
}

static int
measure(const struct scenario *sc, size_t n, const struct opts *o,
    struct row *row)
{
	struct world w;
	struct tally t = { 0, 0, 0, 0 };
	struct sgi_rcache_stats st0, st1;
	struct sgi_ring_stats rs0, rs1;
	unsigned long k;
	double *samples = NULL, p50s[64], p99s[64], f50s[64], c50s[64];
	double c99s[64], p, q;
	size_t nkeys = sc->keys != 0 ? sc->keys : o->keys, nr = 0;
	unsigned run;
	int rc = -1;

	if (world_init(&w, sc, n, nkeys) != 0)
		goto out;
	if ((sc->floor == FL_WAW) && (build_ring(&w) != 0 ||
	    build_gtable(&w) != 0))
		goto out;
	if ((sc->floor == FL_PULSAR_HIT || sc->floor == FL_PWAW_HIT) &&
	    build_ftable(&w) != 0)
		goto out;
	if (sc->samepath && same_path(&w) != 0) {
		fprintf(stderr, "sg-bench: %s at %zu candidates: no request "
		    "takes the same path as its twin\n",
		    sc->name, n);
		goto out;
	}
	samples = calloc(o->iterations, sizeof *samples);
	if (samples == NULL)
		goto out;
	/* classify outcomes once (not timed) */
	nr = w.sel != NULL ? w.nsel : w.nreq;
	for (k = 0; k < nr; k++)
		(void)decide_once(&w, k, &t);
	if (t.fail > 0) {
		fprintf(stderr, "sg-bench: %s at %zu candidates: decisions "
		    "failed\n", sc->name, n);
		goto out;
	}
	w.k = w.nreq;	/* cold keys stay unseen until they wrap around */
	for (run = 0; run < o->runs; run++) {
		/* interleave decision, floor and per-call runs */
		run_cell(&w, sc, o, false, samples, &p, &q);
		p50s[run] = p;
		p99s[run] = q;
		run_cell(&w, sc, o, true, samples, &p, &q);
		f50s[run] = p;
		run_calls(&w, sc, o, samples, &p, &q);
		c50s[run] = p;
		c99s[run] = q;
	}
	/* steady-state allocations per decision, and the cache's hit rate */
	sgi_rcache_stats(sgi_router_scratch(w.rt)->rcache, &st0);
	sgi_rings_stats(sgi_router_scratch(w.rt), &rs0);
	nallocs = 0;
	count_allocs = 1;
	for (k = 0; k < o->iterations; k++, w.k++)
		(void)decide_once(&w, w.k, NULL);
	count_allocs = 0;
	sgi_rcache_stats(sgi_router_scratch(w.rt)->rcache, &st1);
	sgi_rings_stats(sgi_router_scratch(w.rt), &rs1);
	if (rs1.hits + rs1.misses > rs0.hits + rs0.misses) {
		/* w-a-w: the ring cache's hit rate instead */
		st0.hits = rs0.hits;
		st0.misses = rs0.misses;
		st1.hits = rs1.hits;
		st1.misses = rs1.misses;
	}

	row->rmin = INFINITY;
	row->rmax = -INFINITY;
	for (run = 0; run < o->runs; run++) {
		double rr = p50s[run] / f50s[run];

		if (rr < row->rmin)
			row->rmin = rr;
		if (rr > row->rmax)
			row->rmax = rr;
	}
	row->scenario = sc->name;
	row->n = n;
	row->p50 = median(p50s, o->runs);
	row->p99 = median(p99s, o->runs);
	row->floor50 = median(f50s, o->runs);
	row->c50 = median(c50s, o->runs);
	row->c99 = median(c99s, o->runs);
	row->ratio = row->p50 / row->floor50;
	row->allocs = ALLOC_COUNTING ?
	    (double)nallocs / (double)o->iterations : NAN;
	row->hit = st1.hits + st1.misses > st0.hits + st0.misses ?
	    100.0 * (double)(st1.hits - st0.hits) /
	    (double)(st1.hits + st1.misses - st0.hits - st0.misses) : NAN;
	row->sel = 100.0 * (double)t.select / (double)nr;
	row->wait = 100.0 * (double)t.wait / (double)nr;
	row->rej = 100.0 * (double)t.reject / (double)nr;
	row->same = w.sel != NULL ? w.same : NAN;
	rc = 0;
out:
	free(samples);
	world_free(&w);
	return rc;
}

/* 0 when every name of the list is a scenario, else -1 (said on stderr). */
static int
unknown_scenario(const char *list)
{
	const char *p = list, *name;
	size_t s, len;

	while (list_next(&p, &name, &len)) {
		for (s = 0; s < NSCEN && !same_name(scenarios[s].name, name,
		    len); s++)
			;
		if (s == NSCEN) {
			fprintf(stderr, "sg-bench: unknown scenario '%.*s'\n",
			    (int)len, name);
			return -1;
		}
	}
	return 0;
}

int
bench_decide_main(int argc, char *argv[])
{
	static const struct option longopts[] = {
		{ "iterations", required_argument, NULL, 'i' },
		{ "warmup", required_argument, NULL, 'w' },
		{ "candidates", required_argument, NULL, 'c' },
		{ "keys", required_argument, NULL, 'k' },
		{ "runs", required_argument, NULL, 'r' },
		{ "csv", required_argument, NULL, 'o' },
		{ "scenario", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct opts o = {
		.iterations = 200000, .warmup = 20000,
		.cand = { 8, 64, 256 }, .ncand = 3, .keys = 1024, .runs = 5,
	};
	unsigned long v;
	FILE *csv = NULL;
	size_t s, c;
	int ch, rc = EX_OK;

	optind = 1;
	while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (ch) {
		case 'i':
			if (parse_ulong(optarg, BATCH, 100000000, &v) != 0)
				goto bad;
			o.iterations = v;
			break;
		case 'w':
			if (parse_ulong(optarg, 0, 100000000, &v) != 0)
				goto bad;
			o.warmup = v;
			break;
		case 'c':
			if (parse_cands(optarg, &o) != 0)
				goto bad;
			break;
		case 'k':
			if (parse_ulong(optarg, 1, 1 << 20, &v) != 0)
				goto bad;
			o.keys = v;
			break;
		case 'r':
			if (parse_ulong(optarg, 1, 64, &v) != 0)
				goto bad;
			o.runs = (unsigned)v;
			break;
		case 'o':
			o.csv = optarg;
			break;
		case 's':
			o.only = optarg;
			break;
		case 'h':
			usage(stdout);
			return EX_OK;
		default:
			usage(stderr);
			return EX_USAGE;
		}
	}
	if (optind != argc)
		goto bad;
	if (o.only != NULL && unknown_scenario(o.only) != 0)
		goto bad;
	if (o.csv != NULL && (csv = fopen(o.csv, "w")) == NULL) {
		fprintf(stderr, "sg-bench: %s: %s\n", o.csv, strerror(errno));
		return EX_CANTCREAT;
	}
	if (csv != NULL)
		fprintf(csv, "scenario,candidates,p50_ns,p99_ns,floor_p50_ns,"
		    "ratio_p50_floor,allocs_per_decision,select_pct,wait_pct,"
		    "reject_pct,iterations,runs,batch,call_p50_ns,call_p99_ns,"
		    "cache_hit_pct,ratio_min,ratio_max,same_path_pct\n");
	timer_calibrate();
	printf("%-30s %5s %10s %10s %10s %7s %9s %9s %6s %8s  %s\n",
	    "scenario", "N", "p50(ns)", "p99(ns)", "floor(ns)", "ratio",
	    "call-p50", "call-p99", "hit%", "allocs", "select/wait/reject %");
	for (s = 0; s < NSCEN; s++) {
		if (!wanted(o.only, scenarios[s].name))
			continue;
		for (c = 0; c < o.ncand; c++) {
			struct row row;

			if (measure(&scenarios[s], o.cand[c], &o, &row) != 0) {
				rc = EX_SOFTWARE;
				continue;
			}
			char hit[16] = "", same[16] = "";

			if (!isnan(row.hit))
				snprintf(hit, sizeof hit, "%.1f", row.hit);
			printf("%-30s %5zu %10.1f %10.1f %10.1f %7.2f %9.1f "
			    "%9.1f %6s %8.3f  %.0f/%.0f/%.0f",
			    row.scenario, row.n, row.p50, row.p99,
			    row.floor50, row.ratio, row.c50, row.c99,
			    hit[0] != '\0' ? hit : "-", row.allocs, row.sel,
			    row.wait, row.rej);
			if (!isnan(row.same)) {
				printf(" (same path: %.0f%%)", row.same);
				snprintf(same, sizeof same, "%.0f", row.same);
			}
			putchar('\n');
			fflush(stdout);
			if (csv != NULL)
				fprintf(csv, "%s,%zu,%.1f,%.1f,%.1f,%.3f,%.4f,"
				    "%.1f,%.1f,%.1f,%lu,%u,%d,%.1f,%.1f,%s,%.3f,"
				    "%.3f,%s\n",
				    row.scenario, row.n, row.p50, row.p99,
				    row.floor50, row.ratio, row.allocs,
				    row.sel, row.wait, row.rej, o.iterations,
				    o.runs, BATCH, row.c50, row.c99, hit,
				    row.rmin, row.rmax, same);
		}
	}
	printf("# median of %u runs; p50/p99 over means of batches of %d "
	    "calls; ratio = p50 / floor p50; call-p50/p99 = each call timed "
	    "alone, minus %.1f ns of timer; hit%% = ranking-cache (pulsar) or "
	    "ring-cache (wait-and-widen) hits "
	    "(-: no lookups); allocs = heap allocations per decision after "
	    "warm-up; %.1f%% of the timed samples were dropped (a context "
	    "switch in their group of %d; each such group followed by an "
	    "untimed pass over the requests, %lu times)\n", o.runs, BATCH,
	    timer_ns, nkept + ndropped > 0 ? 100.0 * (double)ndropped /
	    (double)(nkept + ndropped) : 0.0, GROUP, nrewarm);
	if (csv != NULL && fclose(csv) != 0) {
		fprintf(stderr, "sg-bench: %s: %s\n", o.csv, strerror(errno));
		return EX_IOERR;
	}
	if (fflush(stdout) != 0 || ferror(stdout))
		return EX_IOERR;
	return rc;
bad:
	usage(stderr);
	return EX_USAGE;
}
