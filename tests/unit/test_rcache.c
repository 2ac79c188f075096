/*
 * test_rcache.c — sg_rcache.c, the router's pulsar ranking cache, driven
 * directly: admission (probation, then store, then hits), invalidation by
 * weights and by ids, the states kept for alternating snapshots, long keys
 * never cached, one-off keys never evicting hot ones, bounded memory, and
 * the size: growth to a working set under eviction pressure, within the
 * byte budget, records widened for more candidates or longer prefixes, a
 * smaller budget shrinking the cache, every move keeping the rankings, and
 * first sights stored where a miss ranks everything anyway, and the
 * memo of class prefixes giving the pulsar prefix's bytes.
 * That cached rankings give the decisions of uncached ones is the property
 * test in test_router.c.
 */
#include "sg_test.h"

#include <stdio.h>
#include <stdlib.h>

#include "sg_internal.h"

struct rfx {
	sg_algdef	 def;
	sg_request	 req;
	sgi_hashbuf	 prefix;
	char		 key[512];
};

static void
rfx_init(struct rfx *f, int mode)
{
	memset(f, 0, sizeof(*f));
	f->def.algorithm = SG_ALG_PULSAR;
	f->def.rendezvous_weight = mode;
	sg_request_init(&f->req);
	f->req.request_id = "r";
	f->req.model = "m";
	f->req.cache_affinity_key = f->key;
}

/* The prefix for key number k (or a key of len bytes when len > 0). */
static const sgi_hashbuf *
rfx_prefix(struct rfx *f, size_t k, size_t len)
{
	if (len > 0) {
		memset(f->key, 'k', len);
		f->key[len] = '\0';
	} else
		snprintf(f->key, sizeof(f->key), "key-%zu", k);
	sgi_pulsar_prefix(&f->prefix, &f->def, &f->req);
	return &f->prefix;
}

static sg_snapshot *
snap_new(size_t n, const char *pfx, double w)
{
	sg_snapshot *s = sg_snapshot_new();
	char id[32];
	size_t i;

	assert_non_null(s);
	for (i = 0; i < n; i++) {
		sg_cluster c;

		snprintf(id, sizeof(id), "%s%zu", pfx, i);
		assert_int_equal(sg_cluster_init(&c, id, strlen(id)), 0);
		c.max_input_tps = w + (double)i;
		c.last_mean_input_tps = 2 * w + (double)i;
		assert_int_equal(sg_snapshot_add(s, &c, NULL), 0);
	}
	return s;
}

/* A recognisable ranking: n - 1 .. 0 shifted by tag. */
static void
fake_ranking(size_t *order, size_t n, size_t tag)
{
	size_t i;

	for (i = 0; i < n; i++)
		order[i] = (n - 1 - i + tag) % n;
}

/* Look up key k and store its fake ranking when asked; the state. */
static int
visit(sgi_rcache *rc, struct rfx *f, const sg_snapshot *s, size_t k,
    size_t tag)
{
	size_t n = sg_snapshot_count(s), order[SG_MAX_CANDIDATES], nr, i;
	const uint16_t *r;
	sgi_rclookup lk;
	int st;

	st = sgi_rcache_lookup(rc, &f->def, s, rfx_prefix(f, k, 0), &lk, &r,
	    &nr);
	if (st == SGI_RC_HIT) {
		fake_ranking(order, n, tag);
		assert_int_equal(nr, n);
		for (i = 0; i < nr; i++) {
			assert_int_equal(r[i], order[i]);
			/* and its inverse */
			assert_int_equal(sgi_rcache_pos(rc, r)[order[i]],
			    i + 1);
		}
	} else if (st == SGI_RC_STORE) {
		fake_ranking(order, n, tag);
		r = sgi_rcache_store(rc, &lk, order, n);
		assert_int_equal(r[0], order[0]);
	}
	return st;
}

static void
test_second_miss_stores_and_then_hits(void **state)
{
	sgi_rcache *rc = sgi_rcache_new();
	sg_snapshot *s = snap_new(10, "c", 100);
	struct rfx f;
	struct sgi_rcache_stats st;

	(void)state;
	rfx_init(&f, SG_WEIGHT_MAX_INPUT_TPS);
	assert_int_equal(visit(rc, &f, s, 1, 0), SGI_RC_MISS);
	assert_int_equal(visit(rc, &f, s, 1, 0), SGI_RC_STORE);
	assert_int_equal(visit(rc, &f, s, 1, 0), SGI_RC_HIT);
	assert_int_equal(visit(rc, &f, s, 1, 0), SGI_RC_HIT);
	/* another key is its own entry */
	assert_int_equal(visit(rc, &f, s, 2, 3), SGI_RC_MISS);
	assert_int_equal(visit(rc, &f, s, 2, 3), SGI_RC_STORE);
	assert_int_equal(visit(rc, &f, s, 2, 3), SGI_RC_HIT);
	assert_int_equal(visit(rc, &f, s, 1, 0), SGI_RC_HIT);
	sgi_rcache_stats(rc, &st);
	assert_int_equal(st.hits, 4);
	assert_int_equal(st.stores, 2);
	assert_int_equal(st.entries, 2);
	sg_snapshot_free(s);
	sgi_rcache_free(rc);
	sgi_rcache_free(NULL);
}

static void
test_weight_change_invalidates_and_refreshes(void **state)
{
	sgi_rcache *rc = sgi_rcache_new();
	sg_snapshot *s = snap_new(10, "c", 100);
	struct rfx f;

	(void)state;
	rfx_init(&f, SG_WEIGHT_MAX_INPUT_TPS);
	visit(rc, &f, s, 1, 0);
	visit(rc, &f, s, 1, 0);
	assert_int_equal(visit(rc, &f, s, 1, 0), SGI_RC_HIT);
	/* the other mode's field does not matter */
	sg_snapshot_at(s, 4)->last_mean_input_tps = 1;
	assert_int_equal(visit(rc, &f, s, 1, 0), SGI_RC_HIT);
	/* the selected field does, down to the last bit */
	sg_snapshot_at(s, 9)->max_input_tps =
	    nextafter(sg_snapshot_get(s, 9)->max_input_tps, 0);
	/* a key cached under the old weights is stored again at once */
	assert_int_equal(visit(rc, &f, s, 1, 5), SGI_RC_STORE);
	assert_int_equal(visit(rc, &f, s, 1, 5), SGI_RC_HIT);
	/* the last-mean definition sees its own field */
	f.def.rendezvous_weight = SG_WEIGHT_LAST_MEAN_INPUT_TPS;
	f.def.seed_len = 1;	/* (another definition: another prefix) */
	f.def.seed[0] = 's';
	visit(rc, &f, s, 1, 2);
	assert_int_equal(visit(rc, &f, s, 1, 2), SGI_RC_STORE);
	assert_int_equal(visit(rc, &f, s, 1, 2), SGI_RC_HIT);
	sg_snapshot_at(s, 4)->last_mean_input_tps = 2;
	assert_int_equal(visit(rc, &f, s, 1, 6), SGI_RC_STORE);
	sg_snapshot_free(s);
	sgi_rcache_free(rc);
}

static void
test_ids_change_invalidates_even_with_equal_weights(void **state)
{
	sgi_rcache *rc = sgi_rcache_new();
	sg_snapshot *s = snap_new(10, "c", 100), *t = snap_new(10, "d", 100);
	struct rfx f;

	(void)state;
	rfx_init(&f, SG_WEIGHT_MAX_INPUT_TPS);
	visit(rc, &f, s, 1, 0);
	visit(rc, &f, s, 1, 0);
	assert_int_equal(visit(rc, &f, s, 1, 0), SGI_RC_HIT);
	/* the same object, renamed in place: same weights, other ids */
	assert_int_equal(sg_snapshot_copy(s, t), 0);
	assert_int_not_equal(visit(rc, &f, s, 1, 7), SGI_RC_HIT);
	sg_snapshot_free(s);
	sg_snapshot_free(t);
	sgi_rcache_free(rc);
}

/* Two snapshots with the same ids and different weights, alternating. */
static void
test_alternating_snapshots_both_stay_cached(void **state)
{
	sgi_rcache *rc = sgi_rcache_new();
	sg_snapshot *a = snap_new(10, "c", 100), *b = sg_snapshot_new();
	struct rfx f;
	int i;

	(void)state;
	assert_int_equal(sg_snapshot_copy(b, a), 0);
	sg_snapshot_at(b, 0)->max_input_tps = 5;
	rfx_init(&f, SG_WEIGHT_MAX_INPUT_TPS);
	assert_int_equal(visit(rc, &f, a, 1, 0), SGI_RC_MISS);
	assert_int_equal(visit(rc, &f, b, 1, 1), SGI_RC_STORE);
	/* known under b's weights: a stores at once, next to b's entry */
	assert_int_equal(visit(rc, &f, a, 1, 0), SGI_RC_STORE);
	for (i = 0; i < 5; i++) {
		assert_int_equal(visit(rc, &f, b, 1, 1), SGI_RC_HIT);
		assert_int_equal(visit(rc, &f, a, 1, 0), SGI_RC_HIT);
	}
	sg_snapshot_free(a);
	sg_snapshot_free(b);
	sgi_rcache_free(rc);
}

static void
test_long_prefixes_are_never_cached(void **state)
{
	sgi_rcache *rc = sgi_rcache_new();
	sg_snapshot *s = snap_new(4, "c", 100);
	const uint16_t *r;
	sgi_rclookup lk;
	struct rfx f;
	size_t nr;
	int i;

	(void)state;
	rfx_init(&f, SG_WEIGHT_MAX_INPUT_TPS);
	for (i = 0; i < 3; i++)
		assert_int_equal(sgi_rcache_lookup(rc, &f.def, s,
		    rfx_prefix(&f, 0, 400), &lk, &r, &nr), SGI_RC_BYPASS);
	/* a NULL cache (turned off) bypasses too */
	assert_int_equal(sgi_rcache_lookup(NULL, &f.def, s,
	    rfx_prefix(&f, 1, 0), &lk, &r, &nr), SGI_RC_BYPASS);
	sg_snapshot_free(s);
	sgi_rcache_free(rc);
}

/* A stream of keys seen once each never evicts the keys in use. */
static void
test_one_off_keys_do_not_evict_hot_keys(void **state)
{
	sgi_rcache *rc = sgi_rcache_new();
	sg_snapshot *s = snap_new(16, "c", 100);
	struct rfx f;
	size_t k;

	(void)state;
	rfx_init(&f, SG_WEIGHT_MAX_INPUT_TPS);
	for (k = 0; k < 3 * 500; k++)
		visit(rc, &f, s, k % 500, k % 500);
	for (k = 0; k < 100000; k++)
		assert_int_not_equal(visit(rc, &f, s, 1000000 + k, 0),
		    SGI_RC_HIT);
	for (k = 0; k < 500; k++)
		assert_int_equal(visit(rc, &f, s, k, k), SGI_RC_HIT);
	sg_snapshot_free(s);
	sgi_rcache_free(rc);
}

/* Memory stays bounded however many keys and candidates pass through. */
static void
test_memory_is_bounded(void **state)
{
	static const size_t ns[] = { 8, 256, SG_MAX_CANDIDATES };
	struct sgi_rcache_stats st;
	struct rfx f;
	size_t i, k;

	(void)state;
	rfx_init(&f, SG_WEIGHT_MAX_INPUT_TPS);
	for (i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
		sgi_rcache *rc = sgi_rcache_new();
		sg_snapshot *s = snap_new(ns[i], "c", 100);

		/* a working set inside the probation window gets admitted */
		for (k = 0; k < 3 * 3000; k++)
			visit(rc, &f, s, k % 3000, k % 3000);
		sgi_rcache_stats(rc, &st);
		assert_int_equal(st.budget, SGI_RCACHE_BUDGET_DEFAULT);
		assert_true(st.bytes <= st.budget);
		assert_true(st.entries <= st.capacity);
		if (ns[i] <= 256) {
			assert_true(st.capacity >= 4096);
			assert_true(st.entries >= 3000 * 9 / 10);
		} else
			assert_true(st.entries >= st.capacity / 2);
		/* many more keys than fit: the cache stops at its budget */
		for (k = 0; k < 3 * 40000; k++)
			visit(rc, &f, s, 10000 + k % 40000, k % 40000);
		sgi_rcache_stats(rc, &st);
		assert_true(st.bytes <= st.budget);
		assert_true(st.entries <= st.capacity);
		sg_snapshot_free(s);
		sgi_rcache_free(rc);
	}
}

/* Visit keys base..base+nkeys rounds times in turn; the hits of the last
 * round. */
static size_t
cycle(sgi_rcache *rc, struct rfx *f, const sg_snapshot *s, size_t base,
    size_t nkeys, size_t rounds)
{
	size_t r, k, hits = 0;

	for (r = 0; r < rounds; r++)
		for (k = 0; k < nkeys; k++)
			if (visit(rc, f, s, base + k, base + k) == SGI_RC_HIT &&
			    r == rounds - 1)
				hits++;
	return hits;
}

/*
 * Issue 10 (the fleet row): a working set several times the initial
 * capacity (the sessions a fleet keeps alive) is held once the cache has
 * grown to it, within the budget, and every hit on the way (through each
 * doubling that moved the entries) returned the key's own ranking.
 */
static void
test_cache_grows_to_hold_a_working_set_larger_than_it(void **state)
{
	sgi_rcache *rc = sgi_rcache_new();
	sg_snapshot *s = snap_new(12, "c", 100);
	struct sgi_rcache_stats st;
	struct rfx f;
	size_t hits;

	(void)state;
	rfx_init(&f, SG_WEIGHT_MAX_INPUT_TPS);
	sgi_rcache_stats(rc, &st);
	assert_int_equal(st.capacity, 0);	/* nothing before first use */
	hits = cycle(rc, &f, s, 0, 30000, 8);
	sgi_rcache_stats(rc, &st);
	assert_true(st.grows >= 3);
	assert_true(st.capacity >= 32768);
	assert_true(st.bytes <= st.budget);
	assert_true(hits >= 30000 * 98 / 100);
	/* held: more passes hit as well and never grow it again */
	hits = st.grows;
	assert_true(cycle(rc, &f, s, 0, 30000, 2) >= 30000 * 98 / 100);
	sgi_rcache_stats(rc, &st);
	assert_int_equal(st.grows, hits);
	sg_snapshot_free(s);
	sgi_rcache_free(rc);
}

/* A small budget caps the growth, and a stream of one-off keys (no
 * pressure: none is admitted) never starts it. */
static void
test_growth_stops_at_the_budget_and_one_offs_never_grow_it(void **state)
{
	sgi_rcache *rc = sgi_rcache_new(), *one = sgi_rcache_new();
	sg_snapshot *s = snap_new(12, "c", 100);
	struct sgi_rcache_stats st;
	struct rfx f;
	size_t k;

	(void)state;
	rfx_init(&f, SG_WEIGHT_MAX_INPUT_TPS);
	assert_int_equal(sgi_rcache_set_budget(NULL, 1), SG_EINVAL);
	assert_int_equal(sgi_rcache_set_budget(rc, (size_t)2 << 20), 0);
	(void)cycle(rc, &f, s, 0, 30000, 4);
	sgi_rcache_stats(rc, &st);
	assert_int_equal(st.budget, (size_t)2 << 20);
	assert_true(st.bytes <= st.budget);
	assert_true(st.bytes > st.budget / 4);	/* it did grow towards it */
	assert_true(st.grows >= 1);
	assert_true(st.evictions > 0);
	for (k = 0; k < 200000; k++)
		assert_int_not_equal(visit(one, &f, s, 1000000 + k, 0),
		    SGI_RC_HIT);
	sgi_rcache_stats(one, &st);
	assert_int_equal(st.grows, 0);
	assert_int_equal(st.stores, 0);
	assert_int_equal(st.capacity, 4096);
	sg_snapshot_free(s);
	sgi_rcache_free(rc);
	sgi_rcache_free(one);
}

/*
 * Records widen for a larger snapshot and for a longer prefix, and a
 * smaller budget shrinks the cache: the entries that fit stay, with their
 * own rankings (visit() checks each hit's ranking against its key).
 */
static void
test_widening_and_shrinking_keep_the_rankings(void **state)
{
	sgi_rcache *rc = sgi_rcache_new();
	sg_snapshot *s = snap_new(10, "c", 100), *big = snap_new(300, "b", 7);
	struct sgi_rcache_stats st, st2;
	struct rfx f;
	size_t k, hits = 0;

	(void)state;
	rfx_init(&f, SG_WEIGHT_MAX_INPUT_TPS);
	assert_int_equal(cycle(rc, &f, s, 0, 1000, 3), 1000);
	/* more candidates: the records widen, the 10-candidate ones stay */
	assert_int_equal(visit(rc, &f, big, 5000, 1), SGI_RC_MISS);
	sgi_rcache_stats(rc, &st);
	assert_int_equal(st.entries, 1000);
	assert_int_equal(cycle(rc, &f, s, 0, 1000, 1), 1000);
	/* a prefix longer than any before (the key is 200 bytes) */
	assert_int_equal(sgi_rcache_lookup(rc, &f.def, s,
	    rfx_prefix(&f, 0, 200), &(sgi_rclookup){ 0 },
	    &(const uint16_t *){ NULL }, &k), SGI_RC_MISS);
	sgi_rcache_stats(rc, &st2);
	assert_true(st2.bytes > st.bytes);
	assert_int_equal(cycle(rc, &f, s, 0, 1000, 1), 1000);
	/* a budget of a quarter: fewer entries, each still right */
	assert_int_equal(sgi_rcache_set_budget(rc, st2.bytes / 4), 0);
	sgi_rcache_stats(rc, &st);
	assert_true(st.bytes <= st2.bytes / 4);
	assert_true(st.capacity < st2.capacity);
	assert_true(st.entries > 0 && st.entries <= st.capacity);
	for (k = 0; k < 1000; k++)
		if (visit(rc, &f, s, k, k) == SGI_RC_HIT)
			hits++;
	assert_true(hits >= st.entries / 2);
	sg_snapshot_free(s);
	sg_snapshot_free(big);
	sgi_rcache_free(rc);
}

/*
 * Issue 10 (a session's second turn): pulsar-wait-and-widen over fewer
 * than SGI_PULSAR_TOP_MIN_N candidates ranks everything on a miss, so the
 * first sight stores; from that size on, and for pulsar, the probation
 * rule holds.
 */
static void
test_pwaw_short_lists_store_at_first_sight(void **state)
{
	sgi_rcache *rc = sgi_rcache_new();
	sg_snapshot *s = snap_new(12, "c", 100);
	sg_snapshot *l = snap_new(SGI_PULSAR_TOP_MIN_N, "l", 100);
	sg_snapshot *k = snap_new(SGI_PULSAR_TOP_MIN_N - 1, "k", 100);
	struct rfx f;

	(void)state;
	rfx_init(&f, SG_WEIGHT_MAX_INPUT_TPS);
	f.def.algorithm = SG_ALG_PULSAR_WAW;
	assert_int_equal(visit(rc, &f, s, 1, 1), SGI_RC_STORE);
	assert_int_equal(visit(rc, &f, s, 1, 1), SGI_RC_HIT);
	assert_int_equal(visit(rc, &f, k, 2, 2), SGI_RC_STORE);
	assert_int_equal(visit(rc, &f, k, 2, 2), SGI_RC_HIT);
	assert_int_equal(visit(rc, &f, l, 3, 3), SGI_RC_MISS);
	assert_int_equal(visit(rc, &f, l, 3, 3), SGI_RC_STORE);
	assert_int_equal(visit(rc, &f, l, 3, 3), SGI_RC_HIT);
	f.def.algorithm = SG_ALG_PULSAR;
	f.def.seed_len = 1;	/* (another definition: another prefix) */
	f.def.seed[0] = 'p';
	assert_int_equal(visit(rc, &f, s, 1, 4), SGI_RC_MISS);
	assert_int_equal(visit(rc, &f, s, 1, 4), SGI_RC_STORE);
	sg_snapshot_free(s);
	sg_snapshot_free(l);
	sg_snapshot_free(k);
	sgi_rcache_free(rc);
}

/*
 * First sights replace only entries never hit: keys in use survive a
 * stream of one-off keys, which never grows the cache either; keys stored
 * at first sight and evicted unused before they return are pressure, and
 * the cache grows to hold them.
 */
static void
test_first_sights_never_evict_a_hit_entry(void **state)
{
	sgi_rcache *rc = sgi_rcache_new(), *ws = sgi_rcache_new();
	sg_snapshot *s = snap_new(12, "c", 100);
	struct sgi_rcache_stats st;
	struct rfx f;
	size_t k;

	(void)state;
	rfx_init(&f, SG_WEIGHT_MAX_INPUT_TPS);
	f.def.algorithm = SG_ALG_PULSAR_WAW;
	assert_int_equal(cycle(rc, &f, s, 0, 500, 2), 500);
	for (k = 0; k < 100000; k++)
		assert_int_equal(visit(rc, &f, s, 1000000 + k, 0),
		    SGI_RC_STORE);
	for (k = 0; k < 500; k++)
		assert_int_equal(visit(rc, &f, s, k, k), SGI_RC_HIT);
	sgi_rcache_stats(rc, &st);
	assert_int_equal(st.grows, 0);
	assert_int_equal(st.capacity, 4096);
	/* a working set of 30 000 keys, each stored at first sight */
	assert_true(cycle(ws, &f, s, 0, 30000, 6) >= 30000 * 95 / 100);
	sgi_rcache_stats(ws, &st);
	assert_true(st.grows >= 3);
	assert_true(st.bytes <= st.budget);
	sg_snapshot_free(s);
	sgi_rcache_free(rc);
	sgi_rcache_free(ws);
}

/*
 * The prefix memo: sgi_rcache_prefix() gives sgi_pulsar_prefix()'s bytes
 * for every class, through classes that revisit one another, seeds,
 * routing keys and models that are prefixes of one another, absent and
 * empty strings (the same bytes), a model too long to remember, and a
 * caller's buffer rewritten between calls (the memo is keyed by bytes,
 * not pointers), keys that fill the hash buffer or overflow it (a stream
 * state).  Without a cache it is sgi_pulsar_prefix().  The class part
 * alone (sgi_rcache_ring_prefix) is sgi_ring_prefix()'s.
 */
static void
test_prefix_memo_gives_the_pulsar_prefix_of_every_class(void **state)
{
	static const char *seeds[] = { "", "s", "s2" };
	static const char *rks[] = { NULL, "", "t", "tenant-a", "tenant-ab",
	    "tenant-b" };
	static const char *models[] = { NULL, "m", "m2", "model-x", "LONG" };
	static const char *keys[] = { "k", NULL, "", "session-12345",
	    "K1900", "K2100" };
	char rkbuf[32], longm[240], *k1900, *k2100;
	sgi_rcache *rc = sgi_rcache_new();
	sgi_hashbuf want, got;
	sg_algdef def;
	sg_request req;
	size_t i, a, b, c, k;

	(void)state;
	assert_non_null(rc);
	memset(longm, 'L', sizeof(longm) - 1);
	longm[sizeof(longm) - 1] = '\0';
	/* keys that fit the buffer after the class, and one that does not */
	assert_non_null(k1900 = malloc(1901));
	assert_non_null(k2100 = malloc(2101));
	memset(k1900, 'a', 1900);
	k1900[1900] = '\0';
	memset(k2100, 'b', 2100);
	k2100[2100] = '\0';
	memset(&def, 0, sizeof(def));
	def.algorithm = SG_ALG_PULSAR;
	sg_request_init(&req);
	req.request_id = "r";
	for (i = 0; i < 4000; i++) {
		/* a walk through the 3 * 6 * 5 classes that revisits them */
		a = (i * 7 / 5) % 3;
		b = (i * 5 / 3) % 6;
		c = (i / 2 + i % 3) % 5;
		k = i % 6;
		def.seed_len = strlen(seeds[a]);
		memcpy(def.seed, seeds[a], def.seed_len + 1);
		if (rks[b] != NULL && i % 2 == 0) {
			/* the same buffer, other bytes */
			snprintf(rkbuf, sizeof(rkbuf), "%s", rks[b]);
			req.routing_key = rkbuf;
		} else
			req.routing_key = rks[b];
		req.model = models[c] != NULL && strcmp(models[c], "LONG") == 0 ?
		    longm : models[c];
		req.cache_affinity_key = k == 4 ? k1900 : k == 5 ? k2100 :
		    keys[k];
		sgi_pulsar_prefix(&want, &def, &req);
		sgi_rcache_prefix(i % 97 == 0 ? NULL : rc, &got, &def, &req);
		assert_int_equal(got.len, want.len);
		if (want.len <= sizeof(want.b))	/* else a stream state */
			assert_memory_equal(got.b, want.b, want.len);
		assert_int_equal(sgi_hb_xxh3(&got), sgi_hb_xxh3(&want));
		/* the class part alone, as wait-and-widen's ring prefix */
		sgi_ring_prefix(&want, &def, &req);
		sgi_rcache_ring_prefix(i % 89 == 0 ? NULL : rc, &got, &def,
		    &req);
		assert_int_equal(got.len, want.len);
		assert_memory_equal(got.b, want.b, want.len);
	}
	free(k1900);
	free(k2100);
	sgi_rcache_free(rc);
}

/*
 * Many tenants: 300 classes (100 routing keys, 3 models) alternating, one
 * class per call, as a fleet's tenants do.  Every prefix is
 * sgi_pulsar_prefix()'s bytes and every class part sgi_ring_prefix()'s;
 * after the first pass each class is found (300 misses in all, however
 * many passes), through pointers met before, through other buffers with
 * the same bytes, and through a buffer rewritten to another class.  Then
 * 3000 classes, more than the memo holds: the same bytes, and its memory
 * stays what it was (a fixed block).
 */
static void
test_prefix_memo_holds_300_alternating_classes(void **state)
{
	static const char *models[] = { "model-a", "model-b", "model-c" };
	char (*rk)[24], (*rk2)[24], shared[24];
	sgi_rcache *rc = sgi_rcache_new();
	struct sgi_rcache_stats st;
	sgi_hashbuf want, got;
	sg_algdef def;
	sg_request req;
	size_t i, j, pass, memo;

	(void)state;
	assert_non_null(rc);
	assert_non_null(rk = calloc(3000, sizeof(*rk)));
	assert_non_null(rk2 = calloc(3000, sizeof(*rk2)));
	for (i = 0; i < 3000; i++) {
		snprintf(rk[i], sizeof(rk[i]), "tenant-%04zu", i);
		memcpy(rk2[i], rk[i], sizeof(rk[i]));
	}
	memset(&def, 0, sizeof(def));
	def.algorithm = SG_ALG_PULSAR;
	def.seed_len = 4;
	memcpy(def.seed, "seed", 5);
	sg_request_init(&req);
	req.request_id = "r";
	req.cache_affinity_key = "session-1";
	for (pass = 0; pass < 4; pass++) {
		for (j = 0; j < 300; j++) {
			i = j % 100;
			req.model = models[(j / 100 + pass) % 3];
			/* pass 2: other buffers, same bytes; pass 3: one
			 * buffer rewritten for every class */
			if (pass == 3) {
				memcpy(shared, rk[i], sizeof(shared));
				req.routing_key = shared;
			} else
				req.routing_key = pass == 2 ? rk2[i] : rk[i];
			sgi_pulsar_prefix(&want, &def, &req);
			sgi_rcache_prefix(rc, &got, &def, &req);
			assert_int_equal(got.len, want.len);
			assert_memory_equal(got.b, want.b, want.len);
			sgi_ring_prefix(&want, &def, &req);
			sgi_rcache_ring_prefix(rc, &got, &def, &req);
			assert_int_equal(got.len, want.len);
			assert_memory_equal(got.b, want.b, want.len);
		}
		sgi_rcache_stats(rc, &st);
		assert_int_equal(st.prefix_misses, 300);
		assert_int_equal(st.prefix_hits, 600 * (pass + 1) - 300);
	}
	memo = st.memo_bytes;
	assert_true(memo > 0 && memo <= (size_t)300 << 10);
	for (pass = 0; pass < 2; pass++)
		for (j = 0; j < 9000; j++) {
			req.routing_key = rk[j % 3000];
			req.model = models[j / 3000];
			sgi_pulsar_prefix(&want, &def, &req);
			sgi_rcache_prefix(rc, &got, &def, &req);
			assert_int_equal(got.len, want.len);
			assert_memory_equal(got.b, want.b, want.len);
		}
	sgi_rcache_stats(rc, &st);
	assert_int_equal(st.memo_bytes, memo);
	free(rk);
	free(rk2);
	sgi_rcache_free(rc);
}

/*
 * One tenant whose requests are parsed into their own buffers (a proxy's
 * stream): every call's routing key and model are new pointers with the
 * class's bytes, found as the class met last by those bytes, so the
 * class's strings are hashed once in 1000 calls (its first sight).  Then
 * the buffers rewritten in place to two classes alternating: neither is
 * taken for the other (the bytes), and each is found again.
 */
static void
test_prefix_memo_finds_the_class_met_last_in_new_buffers(void **state)
{
	char rk[16][16], model[16][16];
	sgi_rcache *rc = sgi_rcache_new();
	struct sgi_rcache_stats st;
	sgi_hashbuf want, got;
	sg_algdef def;
	sg_request req;
	size_t i, b;

	(void)state;
	assert_non_null(rc);
	memset(&def, 0, sizeof(def));
	def.algorithm = SG_ALG_PULSAR;
	def.seed_len = 2;
	memcpy(def.seed, "s1", 3);
	sg_request_init(&req);
	req.request_id = "r";
	req.cache_affinity_key = "session-7";
	for (i = 0; i < 1200; i++) {
		b = i % 16;
		/* from call 1000 on: two classes alternating */
		snprintf(rk[b], sizeof(rk[b]), "tenant-%c",
		    i >= 1000 && i % 2 == 1 ? 'b' : 'a');
		snprintf(model[b], sizeof(model[b]), "model-x");
		req.routing_key = rk[b];
		req.model = model[b];
		sgi_pulsar_prefix(&want, &def, &req);
		sgi_rcache_prefix(rc, &got, &def, &req);
		assert_int_equal(got.len, want.len);
		assert_memory_equal(got.b, want.b, want.len);
		if (i == 999) {
			sgi_rcache_stats(rc, &st);
			assert_int_equal(st.prefix_misses, 1);
			assert_int_equal(st.prefix_hits, 999);
			assert_int_equal(st.prefix_hashed, 1);
		}
	}
	sgi_rcache_stats(rc, &st);
	assert_int_equal(st.prefix_misses, 2);
	assert_int_equal(st.prefix_hits, 1198);
	sgi_rcache_free(rc);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_second_miss_stores_and_then_hits),
		cmocka_unit_test(test_weight_change_invalidates_and_refreshes),
		cmocka_unit_test(
		    test_ids_change_invalidates_even_with_equal_weights),
		cmocka_unit_test(test_alternating_snapshots_both_stay_cached),
		cmocka_unit_test(test_long_prefixes_are_never_cached),
		cmocka_unit_test(test_one_off_keys_do_not_evict_hot_keys),
		cmocka_unit_test(test_memory_is_bounded),
		cmocka_unit_test(
		    test_cache_grows_to_hold_a_working_set_larger_than_it),
		cmocka_unit_test(
		    test_growth_stops_at_the_budget_and_one_offs_never_grow_it),
		cmocka_unit_test(test_widening_and_shrinking_keep_the_rankings),
		cmocka_unit_test(test_pwaw_short_lists_store_at_first_sight),
		cmocka_unit_test(test_first_sights_never_evict_a_hit_entry),
		cmocka_unit_test(
		    test_prefix_memo_gives_the_pulsar_prefix_of_every_class),
		cmocka_unit_test(
		    test_prefix_memo_holds_300_alternating_classes),
		cmocka_unit_test(
		    test_prefix_memo_finds_the_class_met_last_in_new_buffers),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
