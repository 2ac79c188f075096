/*
 * test_waw.c — wait-and-widen (stargate-lb-config(5)): the worked checks of its
 * queue-SLO and bucket rules, bucket unlocking and its budget, ties by cluster
 * id, exclusions, the queue SLO, the affinity ring, through the real router.
 */
#include "sg_test.h"

#include "sg_waw_fixture.h"

#define WAW	"{\"default\":\"wait-and-widen\"}"

/* stargate-lb-config(5): 3 full fast clusters at 205 ms and one idle slow at 805 ms. */
static sg_snapshot *
fast_and_slow(bool slow_full)
{
	sg_snapshot *s = sg_snapshot_new();
	sg_cluster c;

	c = fx_cluster("fast-1", 5, 1, 1, 1000);
	fx_add(s, &c);
	c = fx_cluster("fast-2", 5, 1, 1, 1000);
	fx_add(s, &c);
	c = fx_cluster("fast-3", 5, 1, 1, 1000);
	fx_add(s, &c);
	c = fx_cluster("slow", 5, 1, slow_full ? 1 : 0, 250);
	fx_add(s, &c);
	return s;
}

static void
test_worked_check_fast_full_slow_idle(void **state)
{
	sg_lbconf *conf = fx_conf(WAW);
	sg_router *rt = fx_router(conf, 1);
	sg_snapshot *s = fast_and_slow(false);
	sg_request r;
	sg_decision d;
	size_t i;

	(void)state;
	fx_req(&r, "r-1", NULL, 200);
	/* the TTFTs the check is about */
	for (i = 0; i < 3; i++)
		assert_near(sgi_ttft_ms(sg_snapshot_get(s, i), 200, 0, 1.0,
		    false, false), 205, 1e-9);
	assert_near(sgi_ttft_ms(sg_snapshot_get(s, 3), 200, 0, 1.0, false,
	    false), 805, 1e-9);

	d = fx_decide(rt, s, &r, 0);
	fx_assert_wait(d, 150);
	assert_int_equal(d.phase, SG_PHASE_GLOBAL);
	fx_assert_wait(fx_decide(rt, s, &r, 149), 150);
	d = fx_decide(rt, s, &r, 150);
	fx_assert_select(d, 3);
	assert_int_equal(d.rank_depth, 1);
	assert_false(d.classified);
	fx_assert_select(fx_decide(rt, s, &r, 400), 3);
	sg_snapshot_free(s);
	sg_router_free(rt);
	sg_lbconf_free(conf);
}

static void
test_worked_check_all_full_is_unavailable(void **state)
{
	sg_lbconf *conf = fx_conf(WAW);
	sg_router *rt = fx_router(conf, 1);
	sg_snapshot *s = fast_and_slow(true);
	sg_request r;
	sg_decision d;
	double e[] = { 0, 149, 150, 5000 };
	size_t i;

	(void)state;
	fx_req(&r, "r-1", NULL, 200);
	for (i = 0; i < sizeof(e) / sizeof(e[0]); i++) {
		d = fx_decide(rt, s, &r, e[i]);
		fx_assert_reject(d, 503);
		assert_string_equal(d.code, "overloaded_error");
		assert_string_equal(d.reason, "routing_capacity_unavailable");
	}
	sg_snapshot_free(s);
	sg_router_free(rt);
	sg_lbconf_free(conf);
}

/*
 * stargate-lb-config(5): K=1, X=200, comparator utilization; the affine cluster
 * full at TTFT 1100, the others at 1300 and 1500 (tps 100, 100 tokens).  The
 * affine cluster is found by walking the ring, not assumed.
 */
struct affine_case {
	sg_lbconf	*conf;
	sg_router	*rt;
	sg_snapshot	*s;
	sg_request	 r;
	size_t		 affine, mid, far;
};

static void
affine_setup(struct affine_case *t, bool all_full)
{
	size_t order[3], i;

	t->conf = fx_conf("{\"models\":{\"m\":{"
	    "\"algorithm\":\"wait-and-widen\","
	    "\"cache_affinity_backend_selection_count\":1,"
	    "\"cache_affinity_wait_ms\":200,\"comparator\":\"utilization\"}}}");
	t->rt = fx_router(t->conf, 7);
	t->s = fx_snapshot(3);
	fx_req(&t->r, "r-affine", "session-17", 100);
	assert_int_equal(fx_ring_order(fx_def(t->conf, &t->r), &t->r, t->s,
	    order), 3);
	t->affine = order[0];
	t->mid = order[1];
	t->far = order[2];
	for (i = 0; i < 3; i++) {
		fx_at(t->s, i)->last_mean_input_tps = 100;
		fx_at(t->s, i)->max_engine_concurrency = 4;
	}
	fx_at(t->s, t->affine)->rtt_ms = 100;
	fx_at(t->s, t->affine)->running = 4;
	fx_at(t->s, t->mid)->rtt_ms = 300;
	fx_at(t->s, t->mid)->running = all_full ? 4 : 3;
	fx_at(t->s, t->far)->rtt_ms = 500;
	fx_at(t->s, t->far)->running = all_full ? 4 : 1;
	assert_near(sgi_ttft_ms(fx_at(t->s, t->affine), 100, 0, 1.0, false,
	    false), 1100, 1e-9);
	assert_near(sgi_ttft_ms(fx_at(t->s, t->mid), 100, 0, 1.0, false,
	    false), 1300, 1e-9);
	assert_near(sgi_ttft_ms(fx_at(t->s, t->far), 100, 0, 1.0, false,
	    false), 1500, 1e-9);
}

static void
affine_teardown(struct affine_case *t)
{
	sg_snapshot_free(t->s);
	sg_router_free(t->rt);
	sg_lbconf_free(t->conf);
}

static void
test_worked_check_affinity_wait_then_widen(void **state)
{
	struct affine_case t;
	sg_decision d;
	double e;

	(void)state;
	affine_setup(&t, false);
	d = fx_decide(t.rt, t.s, &t.r, 0);
	fx_assert_wait(d, 200);
	assert_int_equal(d.phase, SG_PHASE_AFFINITY);
	fx_assert_wait(fx_decide(t.rt, t.s, &t.r, 199), 200);
	d = fx_decide(t.rt, t.s, &t.r, 200);
	fx_assert_wait(d, 250);
	assert_int_equal(d.phase, SG_PHASE_GLOBAL);
	for (e = 250; e < 300; e += 7) {
		d = fx_decide(t.rt, t.s, &t.r, e);
		fx_assert_select(d, t.mid);
		assert_int_equal(d.rank_depth, 2);
		assert_int_equal(d.phase, SG_PHASE_GLOBAL);
	}
	fx_assert_select(fx_decide(t.rt, t.s, &t.r, 299), t.mid);
	d = fx_decide(t.rt, t.s, &t.r, 300);
	fx_assert_select(d, t.far);
	assert_int_equal(d.rank_depth, 2);
	affine_teardown(&t);
}

static void
test_worked_check_affinity_all_full_unavailable_after_x(void **state)
{
	struct affine_case t;
	double e;

	(void)state;
	affine_setup(&t, true);
	fx_assert_wait(fx_decide(t.rt, t.s, &t.r, 0), 200);
	for (e = 200; e < 2000; e += 150)
		fx_assert_reject(fx_decide(t.rt, t.s, &t.r, e), 503);
	affine_teardown(&t);
}

static void
test_affine_free_is_selected_at_once_rank_1(void **state)
{
	struct affine_case t;
	sg_decision d;

	(void)state;
	affine_setup(&t, false);
	fx_free(t.s, t.affine);
	d = fx_decide(t.rt, t.s, &t.r, 0);
	fx_assert_select(d, t.affine);
	assert_int_equal(d.rank_depth, 1);
	assert_int_equal(d.phase, SG_PHASE_AFFINITY);
	affine_teardown(&t);
}

/* Ring groups: K distinct clusters in walk order; K > n is capped at n. */
static void
test_affinity_group_follows_the_ring_walk(void **state)
{
	char conf_text[256], key[32];
	size_t order[8], k, i, j;

	(void)state;
	for (k = 1; k <= 9; k += 2) {
		sg_lbconf *conf;
		sg_router *rt;
		sg_snapshot *s = fx_snapshot(8);

		snprintf(conf_text, sizeof(conf_text),
		    "{\"models\":{\"m\":{\"algorithm\":\"wait-and-widen\","
		    "\"cache_affinity_backend_selection_count\":%zu,"
		    "\"cache_affinity_virtual_nodes\":%zu,"
		    "\"cache_affinity_wait_ms\":1000}}}", k, 3 * k + 1);
		conf = fx_conf(conf_text);
		rt = fx_router(conf, 3);
		for (j = 0; j < 20; j++) {
			sg_request r;
			size_t m = k < 8 ? k : 8;
			json_t *ex = NULL, *g;

			snprintf(key, sizeof(key), "key-%zu", j);
			fx_req(&r, "r", key, 10);
			assert_int_equal(fx_ring_order(fx_def(conf, &r), &r, s,
			    order), 8);
			/* every cluster free: the selection is in the group */
			{
				sg_decision d = fx_decide(rt, s, &r, 0);

				assert_int_equal(d.kind, SG_DECIDE_SELECT);
				for (i = 0; i < m && order[i] != d.index; i++)
					;
				assert_true(i < m);
				assert_int_equal(d.rank_depth, 1);
			}
			assert_int_equal(sg_router_explain(rt, s, &r, 0, &ex,
			    NULL), 0);
			g = json_object_get(ex, "affinity_group");
			assert_int_equal(json_array_size(g), m);
			for (i = 0; i < m; i++)
				assert_string_equal(json_string_value(
				    json_array_get(g, i)),
				    sg_snapshot_get(s, order[i])->id);
			json_decref(ex);
		}
		sg_router_free(rt);
		sg_lbconf_free(conf);
		sg_snapshot_free(s);
	}
}

/*
 * A ring too large for the router's cache (lb-config caps V at 1024, but
 * 1024 * 4096 candidates is past the cache) is computed without it and
 * gives the same group.  Driven through sgi_wait_and_widen with a
 * hand-made definition so that three candidates suffice.
 */
static void
test_huge_ring_gives_the_same_group(void **state)
{
	sg_lbconf *conf = fx_conf("{\"models\":{\"m\":{\"algorithm\":"
	    "\"wait-and-widen\","
	    "\"cache_affinity_backend_selection_count\":2}}}");
	sg_snapshot *s = fx_snapshot(3);
	sgi_scratch sc;
	sg_algdef def;
	sg_decision d;
	sgi_ctx x;
	size_t order[3];
	uint64_t rr = 0;
	json_t *ex = json_object(), *g;
	sg_request r;

	(void)state;
	fx_req(&r, "r", "k-huge", 10);
	def = *fx_def(conf, &r);
	def.virtual_nodes = 400000;	/* 1.2M ring entries */
	assert_int_equal(fx_ring_order(&def, &r, s, order), 3);
	memset(&sc, 0, sizeof(sc));
	assert_int_equal(sgi_scratch_reserve(&sc, 3), 0);
	assert_null(sc.rings);	/* budget 0: not cached */
	memset(sc.excluded, 0, 3);
	memset(&x, 0, sizeof(x));
	x.def = &def;
	x.snap = s;
	x.req = &r;
	x.scratch = &sc;
	x.n = x.neligible = 3;
	x.rr_counter = &rr;
	x.explain = ex;
	assert_int_equal(sgi_wait_and_widen(&x, &d), 0);
	assert_int_equal(d.kind, SG_DECIDE_SELECT);
	assert_true(d.index == order[0] || d.index == order[1]);
	g = json_object_get(ex, "affinity_group");
	assert_int_equal(json_array_size(g), 2);
	assert_string_equal(json_string_value(json_array_get(g, 0)),
	    sg_snapshot_get(s, order[0])->id);
	assert_string_equal(json_string_value(json_array_get(g, 1)),
	    sg_snapshot_get(s, order[1])->id);
	json_decref(ex);
	sgi_scratch_free(&sc);
	sg_snapshot_free(s);
	sg_lbconf_free(conf);
}

/* --- ring paths: cached, one pass, reference ------------------------------- */

static uint64_t
rp_next(uint64_t *g)
{
	uint64_t z = (*g += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* The affinity group of one --explain, as candidate indices. */
static size_t
rp_group(sg_router *rt, const sg_snapshot *s, const sg_request *r,
    size_t *out)
{
	json_t *ex = NULL, *g;
	sg_error err;
	size_t i, n;

	assert_int_equal(sg_router_explain(rt, s, r, 0, &ex, &err), 0);
	g = json_object_get(ex, "affinity_group");
	n = json_array_size(g);
	for (i = 0; i < n; i++) {
		const char *id = json_string_value(json_array_get(g, i));
		long k = sg_snapshot_find(s, id, strlen(id));

		assert_true(k >= 0);
		out[i] = (size_t)k;
	}
	json_decref(ex);
	return n;
}

#define RP_ROUTERS	5
#define RP_MAXC		300

/*
 * Property: the affinity group is the same from a cached ring (default
 * budget), a ring cache holding about two rings (evictions), a cache whose
 * rings keep only a few top hash bits (truncation ties: the walk must
 * detect them and fall back), no cache at all (the one pass), and the
 * reference construction (the ring built, sorted by (hash, id, index) and
 * walked), and for up to FX_MAXC candidates the fixture's own ring walk;
 * over random snapshots (ids of random bytes and lengths), K, V, routing
 * keys, models and cache-affinity keys.  Requests repeat their (routing
 * key, model) so rings are built, hit and evicted.
 */
static void
test_ring_paths_agree_on_random_inputs(void **state)
{
	static const char *const rks[] = { "tenant-a", "tenant-b", "t", NULL };
	static const char *const models[] = { "m0", "m1", "m2" };
	uint64_t g = 0xfeedULL;
	size_t trial, i, j, k, n, K, V, ng[RP_ROUTERS], nref;
	size_t grp[RP_ROUTERS][RP_MAXC], want[FX_MAXC];
	struct sgi_ring_stats st[RP_ROUTERS], tot[RP_ROUTERS];
	char cfg[1024], id[64], key[32];

	(void)state;
	memset(tot, 0, sizeof(tot));
	for (trial = 0; trial < 160; trial++) {
		sg_snapshot *s = sg_snapshot_new();
		sg_router *rt[RP_ROUTERS];
		sg_lbconf *conf;

		n = trial % 8 == 0 ? 65 + (size_t)(rp_next(&g) % 230) :
		    1 + (size_t)(rp_next(&g) % FX_MAXC);
		K = 1 + (size_t)(rp_next(&g) % (trial % 5 == 0 ? n + 2 :
		    4));
		V = 1 + (size_t)(rp_next(&g) % (n > 64 ? 40 : 200));
		snprintf(cfg, sizeof(cfg), "{\"models\":{"
		    "\"m0\":{\"algorithm\":\"wait-and-widen\","
		    "\"cache_affinity_backend_selection_count\":%zu,"
		    "\"cache_affinity_virtual_nodes\":%zu},"
		    "\"m1\":{\"algorithm\":\"wait-and-widen\","
		    "\"cache_affinity_backend_selection_count\":%zu,"
		    "\"cache_affinity_virtual_nodes\":%zu},"
		    "\"m2\":{\"algorithm\":\"wait-and-widen\","
		    "\"cache_affinity_backend_selection_count\":%zu,"
		    "\"cache_affinity_virtual_nodes\":%zu}}}",
		    K, V, K, V, K, V);
		conf = fx_conf(cfg);
		for (j = 0; j < RP_ROUTERS; j++)
			rt[j] = fx_router(conf, 5);
		assert_int_equal(sg_router_set_ring_cache_bytes(rt[1],
		    2 * sgi_ring_bytes(n, V) + sgi_ring_bytes(n, V) / 2), 0);
		sgi_router_scratch(rt[2])->ring_coarse = 1 +
		    (unsigned)(rp_next(&g) % 14);
		assert_int_equal(sg_router_set_ring_cache_bytes(rt[3], 0), 0);
		sgi_router_scratch(rt[4])->reference = true;
		for (i = 0; i < n; i++) {
			size_t len = 1 + (size_t)(rp_next(&g) % 40);
			sg_cluster c;

			for (k = 0; k < len; k++)
				id[k] = (char)('!' + rp_next(&g) % 90);
			/* distinct ids: a unique suffix */
			len += (size_t)snprintf(id + len, sizeof(id) - len,
			    "#%zu", i);
			assert_int_equal(sg_cluster_init(&c, id, len), 0);
			assert_int_equal(sg_snapshot_add(s, &c, NULL), 0);
		}
		for (j = 0; j < 40; j++) {
			sg_request r;

			snprintf(key, sizeof(key), "key-%zu",
			    (size_t)(rp_next(&g) % 1000));
			fx_req(&r, "r", key, 10);
			r.routing_key = rks[rp_next(&g) % 4];
			r.model = models[rp_next(&g) % 3];
			for (k = 0; k < RP_ROUTERS; k++)
				ng[k] = rp_group(rt[k], s, &r, grp[k]);
			nref = ng[4];
			assert_int_equal(nref, K < n ? K : n);
			for (k = 0; k < RP_ROUTERS - 1; k++) {
				assert_int_equal(ng[k], nref);
				for (i = 0; i < nref; i++)
					if (grp[k][i] != grp[4][i])
						fail_msg("trial %zu (n %zu K "
						    "%zu V %zu): path %zu "
						    "member %zu: %zu, reference "
						    "%zu", trial, n, K, V, k, i,
						    grp[k][i], grp[4][i]);
			}
			if (n <= FX_MAXC) {
				sg_algdef d = *fx_def(conf, &r);

				assert_int_equal(fx_ring_order(&d, &r, s,
				    want), n);
				for (i = 0; i < nref; i++)
					assert_int_equal(grp[4][i], want[i]);
			}
		}
		for (k = 0; k < RP_ROUTERS; k++) {
			sgi_rings_stats(sgi_router_scratch(rt[k]), &st[k]);
			tot[k].hits += st[k].hits;
			tot[k].builds += st[k].builds;
			tot[k].evictions += st[k].evictions;
			tot[k].onepass += st[k].onepass;
			tot[k].ambiguous += st[k].ambiguous;
			if (k == 1)
				assert_true(st[k].bytes <= 2 *
				    sgi_ring_bytes(n, V) +
				    sgi_ring_bytes(n, V) / 2);
			sg_router_free(rt[k]);
		}
		sg_lbconf_free(conf);
		sg_snapshot_free(s);
	}
	/* every path was taken */
	assert_true(tot[0].hits > 1000 && tot[0].builds > 100);
	assert_true(tot[1].evictions > 100 && tot[1].hits > 100);
	assert_true(tot[2].ambiguous > 100 && tot[2].hits > 100);
	assert_true(tot[3].hits + tot[3].builds == 0 && tot[3].onepass > 1000);
	assert_true(tot[4].hits + tot[4].builds == 0);
}

/*
 * The cache stays within its budget, CLOCK keeps the rings in use, and a
 * budget of 0 frees it; a ring is built on its first miss while there is
 * room, on its identity's second miss once the budget is full.
 */
/*
 * A decision with a key not seen before: the group memo cannot answer, so
 * the ring cache itself is exercised (rings depend on the routing key and
 * model, not on the cache key).
 */
static sg_decision
decide_new_key(sg_router *rt, const sg_snapshot *s, sg_request *r)
{
	static char key[32];
	static unsigned seq;

	snprintf(key, sizeof(key), "k-%u", seq++);
	r->cache_affinity_key = key;
	return fx_decide(rt, s, r, 0);
}

static void
test_ring_cache_budget_and_eviction(void **state)
{
	sg_lbconf *conf = fx_conf("{\"models\":{\"m\":{\"algorithm\":"
	    "\"wait-and-widen\",\"cache_affinity_backend_selection_count\":2,"
	    "\"cache_affinity_virtual_nodes\":50}}}");
	sg_router *rt = fx_router(conf, 1);
	sg_snapshot *s = fx_snapshot(20);
	sgi_scratch *sc = sgi_router_scratch(rt);
	struct sgi_ring_stats st;
	size_t one = sgi_ring_bytes(20, 50), i;
	static const char *const rks[] = { "a", "b", "c", "d" };
	sg_request r;

	(void)state;
	assert_true(one > 20 * 50 * 6 && one < 20 * 50 * 7 + 256);
	assert_true(sgi_ring_bytes(SG_MAX_CANDIDATES + 1, 1) == SIZE_MAX);
	assert_int_equal(sg_router_set_ring_cache_bytes(NULL, 1), SG_EINVAL);
	fx_req(&r, "r", "k", 10);
	r.model = "m";
	r.routing_key = "a";
	(void)decide_new_key(rt, s, &r);
	sgi_rings_stats(sc, &st);
	assert_int_equal(st.builds, 1);		/* room: built at once */
	assert_int_equal(st.onepass, 0);
	(void)decide_new_key(rt, s, &r);
	sgi_rings_stats(sc, &st);
	assert_int_equal(st.builds, 1);
	assert_int_equal(st.hits, 1);
	assert_int_equal(st.rings, 1);
	assert_int_equal(st.bytes, one);
	/* full: a new identity's first miss takes one pass, its second builds */
	assert_int_equal(sg_router_set_ring_cache_bytes(rt, one), 0);
	r.routing_key = "b";
	(void)decide_new_key(rt, s, &r);
	sgi_rings_stats(sc, &st);
	assert_int_equal(st.builds, 1);
	assert_int_equal(st.onepass, 1);
	(void)decide_new_key(rt, s, &r);
	sgi_rings_stats(sc, &st);
	assert_int_equal(st.builds, 2);
	assert_int_equal(st.evictions, 1);
	assert_int_equal(st.rings, 1);
	r.routing_key = "a";
	/* room for two: four tenants, "a" used between every other */
	assert_int_equal(sg_router_set_ring_cache_bytes(rt, 2 * one), 0);
	for (i = 0; i < 40; i++) {
		r.routing_key = i % 2 == 0 ? "a" : rks[1 + i / 2 % 3];
		(void)decide_new_key(rt, s, &r);
		sgi_rings_stats(sc, &st);
		assert_true(st.bytes <= 2 * one && st.rings <= 2);
	}
	assert_true(st.evictions > 5);
	r.routing_key = "a";
	i = (size_t)st.hits;
	(void)decide_new_key(rt, s, &r);
	sgi_rings_stats(sc, &st);
	assert_int_equal(st.hits, i + 1);	/* "a" was kept */
	/* shrinking evicts, 0 frees everything */
	assert_int_equal(sg_router_set_ring_cache_bytes(rt, one), 0);
	sgi_rings_stats(sc, &st);
	assert_true(st.rings <= 1 && st.bytes <= one);
	assert_int_equal(sg_router_set_ring_cache_bytes(rt, 0), 0);
	assert_null(sc->rings);
	(void)decide_new_key(rt, s, &r);
	assert_null(sc->rings);
	/* a ring larger than the budget is never built */
	assert_int_equal(sg_router_set_ring_cache_bytes(rt, one - 1), 0);
	for (i = 0; i < 4; i++)
		(void)decide_new_key(rt, s, &r);
	sgi_rings_stats(sc, &st);
	assert_int_equal(st.builds, 0);
	sg_snapshot_free(s);
	sg_router_free(rt);
	sg_lbconf_free(conf);
}

/*
 * Many tenants: a returning key's group comes from the group memo (a
 * ring hit, no build, no pass), equal to the reference path's group, for
 * every tenant; after the candidates change the memo never answers with
 * the old ring's group.
 */
static void
test_group_memo_answers_returning_keys_exactly(void **state)
{
	sg_lbconf *conf = fx_conf("{\"models\":{\"m\":{\"algorithm\":"
	    "\"wait-and-widen\",\"cache_affinity_backend_selection_count\":3,"
	    "\"cache_affinity_virtual_nodes\":40}}}");
	sg_router *rt = fx_router(conf, 3), *ref = fx_router(conf, 3);
	sg_snapshot *s = fx_snapshot(30);
	struct sgi_ring_stats a, b;
	static const char *const rks[] = { "t0", "t1", "t2", "t3", "t4" };
	char key[32];
	sg_request r;
	sg_decision d, e;
	size_t i, round;

	(void)state;
	sgi_router_scratch(ref)->reference = true;
	for (round = 0; round < 3; round++) {
		for (i = 0; i < 200; i++) {
			fx_req(&r, "r", key, 10);
			snprintf(key, sizeof(key), "s-%zu", i % 40);
			r.model = "m";
			r.routing_key = rks[i % 5];
			sgi_rings_stats(sgi_router_scratch(rt), &a);
			d = fx_decide(rt, s, &r, 0);
			sgi_rings_stats(sgi_router_scratch(rt), &b);
			fx_req(&r, "r", key, 10);
			r.model = "m";
			r.routing_key = rks[i % 5];
			e = fx_decide(ref, s, &r, 0);
			assert_int_equal(d.kind, e.kind);
			assert_int_equal(d.index, e.index);
			assert_int_equal(d.rank_depth, e.rank_depth);
			if (i >= 80) {	/* every (tenant, key) seen before */
				assert_int_equal(b.hits, a.hits + 1);
				assert_int_equal(b.builds, a.builds);
				assert_int_equal(b.onepass, a.onepass);
			}
		}
		/* other ids: the memo must not answer with old groups */
		sg_snapshot_free(s);
		s = fx_snapshot(30 - 7 * (round + 1));
	}
	sg_snapshot_free(s);
	sg_router_free(rt);
	sg_router_free(ref);
	sg_lbconf_free(conf);
}

/*
 * The cached ring follows the candidate set: removing a cluster, renaming
 * one, or reordering the snapshot gives the group of the new set.
 */
static void
test_ring_cache_follows_candidate_changes(void **state)
{
	sg_lbconf *conf = fx_conf("{\"models\":{\"m\":{\"algorithm\":"
	    "\"wait-and-widen\",\"cache_affinity_backend_selection_count\":3,"
	    "\"cache_affinity_virtual_nodes\":40}}}");
	sg_router *rt = fx_router(conf, 1);
	size_t order[FX_MAXC], round, i, n;
	sg_request r;

	(void)state;
	fx_req(&r, "r", "k-cache", 10);
	for (round = 0; round < 6; round++) {
		sg_snapshot *s = sg_snapshot_new();
		json_t *ex = NULL, *g;
		char id[16];

		n = 4 + round % 3;
		for (i = 0; i < n; i++) {
			sg_cluster c;

			snprintf(id, sizeof(id), "%s%zu",
			    round == 4 ? "z" : "c", (i * 7 + round) % 11);
			c = fx_cluster(id, 5, 4, 0, 1000);
			fx_add(s, &c);
		}
		fx_ring_order(fx_def(conf, &r), &r, s, order);
		assert_int_equal(sg_router_explain(rt, s, &r, 0, &ex, NULL), 0);
		g = json_object_get(ex, "affinity_group");
		assert_int_equal(json_array_size(g), 3);
		for (i = 0; i < 3; i++)
			assert_string_equal(json_string_value(
			    json_array_get(g, i)),
			    sg_snapshot_get(s, order[i])->id);
		json_decref(ex);
		sg_snapshot_free(s);
	}
	sg_router_free(rt);
	sg_lbconf_free(conf);
}

/*
 * The same snapshot object changed in place (the ring cache sees the same
 * pointer every time): rebuilt with renamed or reordered ids, replaced from
 * JSON, overwritten by a copy, and back to an earlier list.  Each time the
 * group is the one of the current ids.
 */
static void
test_ring_cache_follows_in_place_changes(void **state)
{
	sg_lbconf *conf = fx_conf("{\"models\":{\"m\":{\"algorithm\":"
	    "\"wait-and-widen\",\"cache_affinity_backend_selection_count\":3,"
	    "\"cache_affinity_virtual_nodes\":40}}}");
	sg_router *rt = fx_router(conf, 1);
	sg_snapshot *s = sg_snapshot_new(), *other = fx_snapshot(5);
	size_t order[FX_MAXC], round, i, n;
	json_error_t jerr;
	sg_request r;

	(void)state;
	fx_req(&r, "r", "k-cache", 10);
	for (round = 0; round < 12; round++) {
		json_t *ex = NULL, *g, *j;
		char id[16], text[512];
		size_t len;

		n = round == 2 ? 6 : 5;	/* mostly the same size */
		if (round == 6) {
			assert_int_equal(sg_snapshot_copy(s, other), 0);
		} else if (round % 2 == 1 || round > 8) {
			len = (size_t)snprintf(text, sizeof(text),
			    "{\"clusters\":[");
			for (i = 0; i < n; i++)
				len += (size_t)snprintf(text + len,
				    sizeof(text) - len, "%s{\"id\":\"j%zu\","
				    "\"rtt_ms\":5,\"max_engine_concurrency\":4,"
				    "\"last_mean_input_tps\":1000}",
				    i > 0 ? "," : "", (i * 5 + round) % 13);
			snprintf(text + len, sizeof(text) - len, "]}");
			j = json_loads(text, 0, &jerr);
			assert_non_null(j);
			assert_int_equal(sg_snapshot_from_json(s, j, NULL), 0);
			json_decref(j);
		} else {
			sg_snapshot_clear(s);
			for (i = 0; i < n; i++) {
				sg_cluster c;

				/* round 8 repeats round 0's list */
				snprintf(id, sizeof(id), "%s%zu",
				    round == 4 ? "z" : "c",
				    (i * 7 + 3 * (round % 8)) % 11);
				c = fx_cluster(id, 5, 4, 0, 1000);
				fx_add(s, &c);
			}
		}
		n = fx_ring_order(fx_def(conf, &r), &r, s, order);
		assert_int_equal(sg_router_explain(rt, s, &r, 0, &ex, NULL), 0);
		g = json_object_get(ex, "affinity_group");
		assert_int_equal(json_array_size(g), 3);
		for (i = 0; i < 3; i++)
			assert_string_equal(json_string_value(
			    json_array_get(g, i)),
			    sg_snapshot_get(s, order[i])->id);
		json_decref(ex);
		/* and the decision picks from that group */
		{
			sg_decision d = fx_decide(rt, s, &r, 0);

			assert_int_equal(d.kind, SG_DECIDE_SELECT);
			assert_true(d.index == order[0] || d.index == order[1] ||
			    d.index == order[2]);
		}
	}
	sg_snapshot_free(other);
	sg_snapshot_free(s);
	sg_router_free(rt);
	sg_lbconf_free(conf);
}

/*
 * Several buckets: TTFTs 100 (full), 200 (full), 300 (free).  Each gap is
 * measured from its bucket's start and each bucket consumes its own need
 * (25 ms each), so the free cluster unlocks at 50 ms, not at 75.
 */
static void
test_bucket_budget_is_consumed_per_bucket(void **state)
{
	sg_lbconf *conf = fx_conf(WAW);
	sg_router *rt = fx_router(conf, 1);
	sg_snapshot *s = sg_snapshot_new();
	sg_cluster c;
	sg_request r;

	(void)state;
	c = fx_cluster("a", 100, 1, 1, 1000);
	fx_add(s, &c);
	c = fx_cluster("b", 200, 1, 1, 1000);
	fx_add(s, &c);
	c = fx_cluster("c", 300, 1, 0, 1000);
	fx_add(s, &c);
	fx_req(&r, "r", NULL, 0);
	fx_assert_wait(fx_decide(rt, s, &r, 0), 25);
	fx_assert_wait(fx_decide(rt, s, &r, 25), 50);
	fx_assert_wait(fx_decide(rt, s, &r, 49), 50);
	fx_assert_select(fx_decide(rt, s, &r, 50), 2);
	sg_snapshot_free(s);
	sg_router_free(rt);
	sg_lbconf_free(conf);
}

/*
 * Gaps from the bucket start: 100 (full), 115 (full), 130 (free).  115 is in
 * the first bucket; 130 is 30 ms from its start (not 15 from 115), so it
 * needs 7.5 ms.
 */
static void
test_gap_is_measured_from_the_bucket_start(void **state)
{
	sg_lbconf *conf = fx_conf(WAW);
	sg_router *rt = fx_router(conf, 1);
	sg_snapshot *s = sg_snapshot_new();
	sg_cluster c;
	sg_request r;

	(void)state;
	c = fx_cluster("a", 100, 1, 1, 1000);
	fx_add(s, &c);
	c = fx_cluster("b", 115, 1, 1, 1000);
	fx_add(s, &c);
	c = fx_cluster("c", 130, 1, 0, 1000);
	fx_add(s, &c);
	fx_req(&r, "r", NULL, 0);
	fx_assert_wait(fx_decide(rt, s, &r, 0), 7.5);
	fx_assert_select(fx_decide(rt, s, &r, 7.5), 2);
	sg_snapshot_free(s);
	sg_router_free(rt);
	sg_lbconf_free(conf);
}

/* No later candidate with capacity: no wait is offered, Unavailable. */
static void
test_no_wait_when_no_later_candidate_has_capacity(void **state)
{
	sg_lbconf *conf = fx_conf(WAW);
	sg_router *rt = fx_router(conf, 1);
	sg_snapshot *s = sg_snapshot_new();
	sg_cluster c;
	sg_request r;

	(void)state;
	c = fx_cluster("a", 100, 1, 1, 1000);
	fx_add(s, &c);
	c = fx_cluster("b", 300, 1, 1, 1000);
	fx_add(s, &c);
	c = fx_cluster("c", 500, 1, 0, 0);	/* free but TTFT +inf */
	fx_add(s, &c);
	fx_req(&r, "r", NULL, 10);
	fx_assert_reject(fx_decide(rt, s, &r, 0), 503);
	fx_assert_reject(fx_decide(rt, s, &r, 10000), 503);
	/* the smallest TTFT infinite: Unavailable even with capacity */
	fx_at(s, 0)->last_mean_input_tps = 0;
	fx_at(s, 1)->last_mean_input_tps = 0;
	fx_free(s, 0);
	fx_assert_reject(fx_decide(rt, s, &r, 0), 503);
	sg_snapshot_free(s);
	sg_router_free(rt);
	sg_lbconf_free(conf);
}

/* max_queued extends admission past the engine concurrency. */
static void
test_max_queued_admits_a_full_cluster(void **state)
{
	sg_lbconf *conf = fx_conf("{\"models\":{\"m\":{\"algorithm\":"
	    "\"wait-and-widen\",\"max_queued\":2}}}");
	sg_router *rt = fx_router(conf, 1);
	sg_snapshot *s = sg_snapshot_new();
	sg_cluster c;
	sg_request r;

	(void)state;
	c = fx_cluster("a", 5, 2, 3, 1000);
	fx_add(s, &c);
	fx_req(&r, "r", NULL, 10);
	fx_assert_select(fx_decide(rt, s, &r, 0), 0);
	fx_at(s, 0)->running = 4;
	fx_assert_reject(fx_decide(rt, s, &r, 0), 503);
	sg_snapshot_free(s);
	sg_router_free(rt);
	sg_lbconf_free(conf);
}

/*
 * Ties by cluster id: with equal TTFTs in the first bucket and a later
 * bucket forcing the sorted walk, the sampled order is by id, so the
 * decision does not depend on the snapshot's order.
 */
static void
test_ttft_ties_are_ordered_by_cluster_id(void **state)
{
	sg_lbconf *conf = fx_conf("{\"models\":{\"m\":{\"algorithm\":"
	    "\"wait-and-widen\",\"n\":1}}}");
	sg_router *rt = fx_router(conf, 11);
	sg_snapshot *s1 = sg_snapshot_new(), *s2 = sg_snapshot_new();
	sg_cluster x = fx_cluster("x", 5, 4, 0, 1000);
	sg_cluster y = fx_cluster("y", 5, 4, 0, 1000);
	sg_cluster z = fx_cluster("z", 900, 4, 0, 1000);
	char id[32];
	int saw[2] = { 0, 0 }, i;

	(void)state;
	fx_add(s1, &x);
	fx_add(s1, &y);
	fx_add(s1, &z);
	fx_add(s2, &y);
	fx_add(s2, &x);
	fx_add(s2, &z);
	for (i = 0; i < 64; i++) {
		sg_request r;
		sg_decision a, b;

		snprintf(id, sizeof(id), "tie-%d", i);
		fx_req(&r, id, NULL, 10);
		a = fx_decide(rt, s1, &r, 0);
		b = fx_decide(rt, s2, &r, 0);
		assert_int_equal(a.kind, SG_DECIDE_SELECT);
		assert_int_equal(b.kind, SG_DECIDE_SELECT);
		assert_string_equal(a.cluster_id, b.cluster_id);
		assert_string_not_equal(a.cluster_id, "z");
		saw[a.cluster_id[0] == 'y']++;
	}
	/* both tied clusters are chosen sometimes: the test can fail */
	assert_true(saw[0] > 0 && saw[1] > 0);
	sg_snapshot_free(s1);
	sg_snapshot_free(s2);
	sg_router_free(rt);
	sg_lbconf_free(conf);
}

/* Excluded clusters are never selected, in any phase. */
static void
test_excluded_clusters_are_never_selected(void **state)
{
	sg_lbconf *conf = fx_conf("{\"models\":{\"m\":{\"algorithm\":"
	    "\"wait-and-widen\",\"n\":4}}}");
	sg_router *rt = fx_router(conf, 5);
	sg_snapshot *s = fx_snapshot(4);
	const char *ex[] = { "c1", "c3" };
	char id[32];
	int i;

	(void)state;
	for (i = 0; i < 50; i++) {
		sg_request r;
		sg_decision d;

		snprintf(id, sizeof(id), "ex-%d", i);
		fx_req(&r, id, NULL, 10);
		r.excluded = ex;
		r.nexcluded = 2;
		d = fx_decide(rt, s, &r, 0);
		assert_int_equal(d.kind, SG_DECIDE_SELECT);
		assert_true(d.index == 0 || d.index == 2);
	}
	sg_snapshot_free(s);
	sg_router_free(rt);
	sg_lbconf_free(conf);
}

/*
 * NEW: an excluded group member stays a member (no cold successor enters
 * the group): the request waits X for it, then widens with rank_depth K+1.
 */
static void
test_excluded_group_member_is_not_replaced(void **state)
{
	sg_lbconf *conf = fx_conf("{\"models\":{\"m\":{\"algorithm\":"
	    "\"wait-and-widen\",\"cache_affinity_backend_selection_count\":1,"
	    "\"cache_affinity_wait_ms\":200}}}");
	sg_router *rt = fx_router(conf, 5);
	sg_snapshot *s = fx_snapshot(4);
	size_t order[4];
	const char *ex[1];
	sg_request r;
	sg_decision d;

	(void)state;
	fx_req(&r, "r-ex", "sess-ex", 10);
	fx_ring_order(fx_def(conf, &r), &r, s, order);
	ex[0] = sg_snapshot_get(s, order[0])->id;
	r.excluded = ex;
	r.nexcluded = 1;
	fx_assert_wait(fx_decide(rt, s, &r, 0), 200);
	d = fx_decide(rt, s, &r, 200);
	assert_int_equal(d.kind, SG_DECIDE_SELECT);
	assert_int_not_equal(d.index, order[0]);
	assert_int_equal(d.rank_depth, 2);
	sg_snapshot_free(s);
	sg_router_free(rt);
	sg_lbconf_free(conf);
}

/*
 * Queue SLO (stargate-lb-config(5)): a cluster whose queue estimate is over the
 * bound is dropped; the bound grows from floor to ceil with elapsed / SLO.
 */
static void
test_queue_slo_drops_clusters_over_the_bound(void **state)
{
	sg_lbconf *conf = fx_conf("{\"models\":{\"m\":{\"algorithm\":"
	    "\"wait-and-widen\",\"max_queued\":4,"
	    "\"max_queue_time_floor_ms\":0,\"max_queue_time_ceil_ms\":100}}}");
	sg_lbconf *plain = fx_conf("{\"models\":{\"m\":{\"algorithm\":"
	    "\"wait-and-widen\",\"max_queued\":4}}}");
	sg_router *rt = fx_router(conf, 1), *rp = fx_router(plain, 1);
	sg_snapshot *s = sg_snapshot_new();
	sg_cluster a = fx_cluster("a", 0, 4, 4, 1000);
	sg_cluster b = fx_cluster("b", 300, 4, 0, 1000);
	sg_request r;

	(void)state;
	assert_int_equal(sg_cluster_set_prio(&a, 0, 50), 0);
	fx_add(s, &a);
	fx_add(s, &b);
	fx_req(&r, "r-slo", NULL, 100);
	r.has_slo = true;
	r.request_slo_ms = 1000;
	/* without the SLO fields the queued cluster a wins */
	fx_assert_select(fx_decide(rp, s, &r, 0), 0);
	/* bound 0 at elapsed 0: a (50 ms queue) dropped, b selected */
	fx_assert_select(fx_decide(rt, s, &r, 0), 1);
	/* bound 40 at 400 ms: still dropped */
	fx_assert_select(fx_decide(rt, s, &r, 400), 1);
	/* bound 100 at 1000 ms: a is back and has the lower TTFT */
	fx_assert_select(fx_decide(rt, s, &r, 1000), 0);
	/* no request SLO: the ceil applies at once */
	r.has_slo = false;
	fx_assert_select(fx_decide(rt, s, &r, 0), 0);
	sg_snapshot_free(s);
	sg_router_free(rt);
	sg_router_free(rp);
	sg_lbconf_free(conf);
	sg_lbconf_free(plain);
}

/* The sample comparator: the lower comparator value wins among n. */
static void
test_sample_comparator_picks_the_minimum(void **state)
{
	sg_lbconf *conf = fx_conf("{\"models\":{\"m\":{\"algorithm\":"
	    "\"wait-and-widen\",\"n\":3,\"comparator\":\"num-requests-queued\","
	    "\"ttft_bucket_size_ms\":1000}}}");
	sg_router *rt = fx_router(conf, 1);
	sg_snapshot *s = fx_snapshot(3);
	char id[32];
	int i;

	(void)state;
	fx_at(s, 0)->queued = 5;
	fx_at(s, 1)->queued = 1;
	fx_at(s, 2)->queued = 3;
	for (i = 0; i < 20; i++) {
		sg_request r;

		snprintf(id, sizeof(id), "cmp-%d", i);
		fx_req(&r, id, NULL, 10);
		fx_assert_select(fx_decide(rt, s, &r, 0), 1);
	}
	sg_snapshot_free(s);
	sg_router_free(rt);
	sg_lbconf_free(conf);
}

/* The affinity discount (scale) applies inside the group only. */
static void
test_affinity_scale_applies_to_group_bucketing(void **state)
{
	sg_lbconf *conf = fx_conf("{\"models\":{\"m\":{\"algorithm\":"
	    "\"wait-and-widen\",\"cache_affinity_backend_selection_count\":2,"
	    "\"cache_affinity_input_tokens_scale\":0.1}}}");
	sg_lbconf *full = fx_conf("{\"models\":{\"m\":{\"algorithm\":"
	    "\"wait-and-widen\","
	    "\"cache_affinity_backend_selection_count\":2}}}");
	sg_router *rt = fx_router(conf, 1), *rf = fx_router(full, 1);
	sg_snapshot *s = fx_snapshot(3);
	size_t order[3];
	sg_request r;

	(void)state;
	fx_req(&r, "r-scale", "k-scale", 1000);
	fx_ring_order(fx_def(conf, &r), &r, s, order);
	/* member 0: prefill 10 s at full scale, 1 s at 0.1 */
	fx_at(s, order[0])->rtt_ms = 0;
	fx_at(s, order[0])->last_mean_input_tps = 100;
	/* member 1: ~5001 ms either way */
	fx_at(s, order[1])->rtt_ms = 5000;
	fx_at(s, order[1])->last_mean_input_tps = 1e6;
	fx_full(s, order[2]);
	fx_assert_select(fx_decide(rt, s, &r, 0), order[0]);
	fx_assert_select(fx_decide(rf, s, &r, 0), order[1]);
	sg_snapshot_free(s);
	sg_router_free(rt);
	sg_router_free(rf);
	sg_lbconf_free(conf);
	sg_lbconf_free(full);
}

/* Without a key (or without K) there is no group: one global phase. */
static void
test_no_key_or_no_k_means_no_group(void **state)
{
	sg_lbconf *conf = fx_conf("{\"models\":{\"m\":{\"algorithm\":"
	    "\"wait-and-widen\",\"cache_affinity_wait_ms\":500}}}");
	sg_lbconf *withk = fx_conf("{\"models\":{\"m\":{\"algorithm\":"
	    "\"wait-and-widen\",\"cache_affinity_backend_selection_count\":1,"
	    "\"cache_affinity_wait_ms\":500}}}");
	sg_router *rt = fx_router(conf, 1), *rk = fx_router(withk, 1);
	sg_snapshot *s = fx_snapshot(2);
	sg_request r;
	sg_decision d;

	(void)state;
	fx_full(s, 0);
	fx_full(s, 1);
	fx_at(s, 1)->running = 0;
	/* K unset: key or not, no hold */
	fx_req(&r, "r", "key", 10);
	d = fx_decide(rt, s, &r, 0);
	fx_assert_select(d, 1);
	assert_int_equal(d.rank_depth, 1);
	assert_int_equal(d.phase, SG_PHASE_GLOBAL);
	/* K set, no key: no hold either */
	fx_req(&r, "r", NULL, 10);
	fx_assert_select(fx_decide(rk, s, &r, 0), 1);
	/* blank key is absent */
	fx_req(&r, "r", "", 10);
	fx_assert_select(fx_decide(rk, s, &r, 0), 1);
	sg_snapshot_free(s);
	sg_router_free(rt);
	sg_router_free(rk);
	sg_lbconf_free(conf);
	sg_lbconf_free(withk);
}

/* --- session promotion: the plain rule ----------------------------------- */

/* An --explain order (key) as candidate indices; its length. */
static size_t
sp_order(const json_t *ex, const char *key, const sg_snapshot *s,
    size_t *out, size_t cap)
{
	const json_t *a = json_object_get(ex, key);
	size_t i, n = json_array_size(a);

	assert_non_null(a);
	assert_true(n <= cap);
	for (i = 0; i < n; i++) {
		const char *id = json_string_value(json_array_get(a, i));
		long k = sg_snapshot_find(s, id, strlen(id));

		assert_true(k >= 0);
		out[i] = (size_t)k;
	}
	return n;
}

/*
 * stargate-lb-config(5)'s rule for wait-and-widen, written plainly: the
 * last cluster in the group at p is rotated to the front (positions 0..p
 * move right by one); absent, it is put at the front and the last member
 * drops out.  Whether the order changed.
 */
static bool
sp_promote(const size_t *orig, size_t len, long last, size_t *eff)
{
	size_t p, i;

	memcpy(eff, orig, len * sizeof(*eff));
	if (last < 0 || len == 0)
		return false;
	for (p = 0; p < len && orig[p] != (size_t)last; p++)
		;
	if (p == 0)
		return false;
	if (p == len)
		p = len - 1;
	for (i = p; i > 0; i--)
		eff[i] = orig[i - 1];
	eff[0] = (size_t)last;
	return true;
}

#define SP_MAXC		300

/*
 * Property: with last_cluster_affinity on, the effective order
 * sg_router_explain() reports is the original order promoted by the plain
 * rule above (the router's promotion and its primary flag are computed by
 * selection, without branches), the session's promoted flag is whether it
 * changed, and the decision's promoted and primary fields are the rule's:
 * primary when selected and, for a returning session, the last cluster was
 * chosen, otherwise the selection is within the first group.  Over random
 * snapshots (up to 300 candidates, some full), K (2 most often: its own
 * path), V, keys, hints at the group's first or second member, elsewhere
 * among the candidates, of no candidate, or none, with and without their
 * length, and times before and after the wait.
 */
static void
test_session_promotion_follows_the_plain_rule_on_random_inputs(
    void **state)
{
	uint64_t g = 0x5e5510ULL;
	size_t trial, j, i, n, K, V, len, glen, orig[SP_MAXC], eff[SP_MAXC];
	size_t want[SP_MAXC], nprom = 0, nret = 0, nprim = 0;
	char cfg[512], key[32], stale[32];
	long last;

	(void)state;
	for (trial = 0; trial < 120; trial++) {
		sg_snapshot *s;
		sg_router *rt;
		sg_lbconf *conf;

		n = trial % 6 == 0 ? 65 + (size_t)(rp_next(&g) % 236) :
		    1 + (size_t)(rp_next(&g) % 12);
		K = rp_next(&g) % 3 != 0 ? 2 : 1 + (size_t)(rp_next(&g) % 5);
		V = 1 + (size_t)(rp_next(&g) % (n > 64 ? 20 : 100));
		snprintf(cfg, sizeof(cfg), "{\"models\":{\"m\":{"
		    "\"algorithm\":\"wait-and-widen\","
		    "\"cache_affinity_backend_selection_count\":%zu,"
		    "\"cache_affinity_virtual_nodes\":%zu,"
		    "\"cache_affinity_wait_ms\":300,"
		    "\"last_cluster_affinity\":true}}}", K, V);
		conf = fx_conf(cfg);
		rt = fx_router(conf, 7);
		s = fx_snapshot(n);
		for (i = 0; i < n; i++)
			if (rp_next(&g) % 3 == 0)
				fx_full(s, i);
		for (j = 0; j < 40; j++) {
			sg_request r;
			json_t *ex = NULL, *ss;
			sg_decision d;
			double e = rp_next(&g) % 4 == 0 ? 400 : 0;
			size_t pick = (size_t)(rp_next(&g) % 5), gs;
			bool ret, prom;

			snprintf(key, sizeof(key), "key-%zu",
			    (size_t)(rp_next(&g) % 500));
			fx_req(&r, "r", key, 10);
			/* the group without a hint */
			glen = rp_group(rt, s, &r, orig);
			last = -1;
			if (pick <= 1 && pick < glen)
				last = (long)orig[pick];
			else if (pick == 2)
				last = (long)(rp_next(&g) % n);
			if (last >= 0)
				r.last_cluster_id = sg_snapshot_get(s,
				    (size_t)last)->id;
			else if (pick == 3) {
				snprintf(stale, sizeof(stale), "gone-%zu", j);
				r.last_cluster_id = stale;
			}
			if (r.last_cluster_id != NULL && rp_next(&g) % 2)
				r.last_cluster_id_len =
				    strlen(r.last_cluster_id);
			assert_int_equal(sg_router_explain(rt, s, &r, e, &ex,
			    NULL), 0);
			len = sp_order(ex, "original_order", s, orig, SP_MAXC);
			assert_int_equal(len, glen);
			assert_int_equal(sp_order(ex, "effective_order", s, eff,
			    SP_MAXC), len);
			prom = sp_promote(orig, len, last, want);
			for (i = 0; i < len; i++)
				assert_int_equal(eff[i], want[i]);
			ss = json_object_get(ex, "session");
			assert_non_null(ss);
			assert_int_equal(json_is_true(json_object_get(ss,
			    "promoted")), prom);
			json_decref(ex);
			d = fx_decide(rt, s, &r, e);
			ret = last >= 0;
			assert_true(d.classified);
			assert_int_equal(d.session_state, ret ?
			    SG_SESSION_RETURNING : r.last_cluster_id != NULL ?
			    SG_SESSION_STALE : SG_SESSION_NEW);
			assert_int_equal(d.promoted, prom);
			assert_int_equal(r.session_promoted, prom);
			gs = K;
			assert_int_equal(d.primary, d.kind == SG_DECIDE_SELECT &&
			    (ret ? d.index == (size_t)last :
			    d.rank_depth <= gs));
			nret += ret;
			nprom += prom;
			nprim += d.primary;
		}
		sg_router_free(rt);
		sg_lbconf_free(conf);
		sg_snapshot_free(s);
	}
	/* the cases the property is about occurred */
	assert_true(nret > 1000 && nprom > 500 && nprim > 500);
}

/*
 * Step 7 draws from a long unlocked list by rank (quickselect of the drawn
 * ranks) instead of sorting it when few are drawn; the picks must be those
 * of the sorted list.  Property: against the reference router (which sorts
 * every list), over random snapshots of 32 to 300 candidates whose TTFTs
 * spread over several buckets, many of them tied (so the exact rule, the
 * cluster id, orders them), some full; n from 1 to 6 (above the draws by
 * rank too), bucket sizes and unlock factors varied, elapsed times that
 * unlock one bucket or several; wait-and-widen without a key (core
 * selection over every candidate) and pulsar-wait-and-widen.
 */
static void
test_draws_by_rank_pick_as_the_sorted_list(void **state)
{
	static const double factor[] = { 0.1, 0.25, 0.5, 1.0 };
	static const double elapsed[] = { 0, 5, 40, 200, 2000 };
	uint64_t g = 0x5e1ec7ULL;
	size_t trial, j, i, n, nsel = 0;
	char cfg[512], id[32], rid[32];

	(void)state;
	for (trial = 0; trial < 160; trial++) {
		sg_snapshot *s = sg_snapshot_new();
		sg_lbconf *conf;
		sg_router *fast, *ref;

		assert_non_null(s);
		n = 32 + (size_t)(rp_next(&g) % 269);
		snprintf(cfg, sizeof(cfg), "{\"models\":{\"m\":{"
		    "\"algorithm\":\"%s\",\"n\":%zu,"
		    "\"ttft_bucket_size_ms\":%zu,"
		    "\"next_bucket_unlock_factor\":%g}}}",
		    trial % 2 ? "pulsar-wait-and-widen" : "wait-and-widen",
		    1 + (size_t)(rp_next(&g) % 6),
		    1 + (size_t)(rp_next(&g) % 30),
		    factor[rp_next(&g) % 4]);
		conf = fx_conf(cfg);
		fast = fx_router(conf, 11);
		ref = fx_router(conf, 11);
		sgi_router_scratch(ref)->reference = true;
		for (i = 0; i < n; i++) {
			sg_cluster c;

			snprintf(id, sizeof(id), "c%03zu-%zu",
			    (size_t)(rp_next(&g) % 1000), i);
			c = fx_cluster(id, 1 + 4 * (double)(rp_next(&g) % 25),
			    4, rp_next(&g) % 7, 1000);
			fx_add(s, &c);
		}
		for (j = 0; j < 40; j++) {
			sg_request ra, rb;
			sg_decision a, b;
			double e = elapsed[rp_next(&g) % 5];

			snprintf(rid, sizeof(rid), "draw-%zu-%zu", trial, j);
			fx_req(&ra, rid, trial % 2 ? "k" : NULL, 2000);
			fx_req(&rb, rid, trial % 2 ? "k" : NULL, 2000);
			a = fx_decide(fast, s, &ra, e);
			b = fx_decide(ref, s, &rb, e);
			assert_true(fx_same(&a, &b));
			nsel += a.kind == SG_DECIDE_SELECT;
		}
		sg_router_free(fast);
		sg_router_free(ref);
		sg_lbconf_free(conf);
		sg_snapshot_free(s);
	}
	assert_true(nsel > 3000);
}

/*
 * sgi_total_unkey() undoes sgi_total_key() bit for bit (core selection
 * keeps only the keys of lo and hi): the special values, NaNs of either
 * sign with payloads, both zeros, subnormals, then random bit patterns;
 * and the keys of the special values are in total order.
 */
static void
test_total_unkey_inverts_total_key_bit_for_bit(void **state)
{
	static const uint64_t bits[] = {
		0, 0x8000000000000000ULL,		/* +0, -0 */
		0x7ff0000000000000ULL, 0xfff0000000000000ULL,	/* +-inf */
		0x7ff8000000000000ULL, 0xfff8000000000000ULL,	/* qNaN */
		0x7ff0000000000001ULL, 0xfff0000000000001ULL,	/* sNaN */
		0x7fffffffffffffffULL, 0xffffffffffffffffULL,
		1, 0x8000000000000001ULL,		/* subnormals */
		0x000fffffffffffffULL, 0x7fefffffffffffffULL,
	};
	static const double order[] = {
		-INFINITY, -1e300, -1, -0.0, 0.0, 5e-324, 1, 1e300, INFINITY,
	};
	uint64_t x = 0x9e3779b97f4a7c15ULL, b, u;
	double a;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bits) / sizeof(bits[0]) + 100000; i++) {
		if (i < sizeof(bits) / sizeof(bits[0]))
			b = bits[i];
		else {
			x ^= x << 13;	/* xorshift64 */
			x ^= x >> 7;
			x ^= x << 17;
			b = x;
		}
		memcpy(&a, &b, sizeof(a));
		a = sgi_total_unkey(sgi_total_key(a));
		memcpy(&u, &a, sizeof(u));
		assert_true(u == b);
	}
	for (i = 1; i < sizeof(order) / sizeof(order[0]); i++)
		assert_true(sgi_total_key(order[i - 1]) <
		    sgi_total_key(order[i]));
	/* -NaN below everything, +NaN above */
	assert_true(sgi_total_key(-NAN) < sgi_total_key(-INFINITY));
	assert_true(sgi_total_key(NAN) > sgi_total_key(INFINITY));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_draws_by_rank_pick_as_the_sorted_list),
		cmocka_unit_test(test_total_unkey_inverts_total_key_bit_for_bit),
		cmocka_unit_test(test_worked_check_fast_full_slow_idle),
		cmocka_unit_test(test_worked_check_all_full_is_unavailable),
		cmocka_unit_test(test_worked_check_affinity_wait_then_widen),
		cmocka_unit_test(
		    test_worked_check_affinity_all_full_unavailable_after_x),
		cmocka_unit_test(test_affine_free_is_selected_at_once_rank_1),
		cmocka_unit_test(test_affinity_group_follows_the_ring_walk),
		cmocka_unit_test(test_huge_ring_gives_the_same_group),
		cmocka_unit_test(test_ring_paths_agree_on_random_inputs),
		cmocka_unit_test(test_ring_cache_budget_and_eviction),
		cmocka_unit_test(test_group_memo_answers_returning_keys_exactly),
		cmocka_unit_test(test_ring_cache_follows_candidate_changes),
		cmocka_unit_test(test_ring_cache_follows_in_place_changes),
		cmocka_unit_test(test_bucket_budget_is_consumed_per_bucket),
		cmocka_unit_test(test_gap_is_measured_from_the_bucket_start),
		cmocka_unit_test(
		    test_no_wait_when_no_later_candidate_has_capacity),
		cmocka_unit_test(test_max_queued_admits_a_full_cluster),
		cmocka_unit_test(test_ttft_ties_are_ordered_by_cluster_id),
		cmocka_unit_test(test_excluded_clusters_are_never_selected),
		cmocka_unit_test(test_excluded_group_member_is_not_replaced),
		cmocka_unit_test(test_queue_slo_drops_clusters_over_the_bound),
		cmocka_unit_test(test_sample_comparator_picks_the_minimum),
		cmocka_unit_test(
		    test_affinity_scale_applies_to_group_bucketing),
		cmocka_unit_test(test_no_key_or_no_k_means_no_group),
		cmocka_unit_test(
		    test_session_promotion_follows_the_plain_rule_on_random_inputs),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
