/*
 * test_sim_tree.c — sg-sim's tournament over the engines' next-event
 * times (tools/sg-sim/sim.c, included here for its static functions): the
 * unrolled two-level replay (tree_fix2, 9 to 64 clusters) against the
 * general one (tree_fix) and against a linear scan, on random updates.
 */
#include "sg_test.h"

#include <math.h>
#include <stdlib.h>

#include "../../tools/sg-sim/sim.c"

/* The first earliest (time, index) of the leaves, as a scan finds it. */
static void
scan_min(const sim *s, double *t, uint32_t *i)
{
	size_t k;

	*t = INFINITY;
	*i = NONE;
	for (k = 0; k < s->nc; k++)
		if (s->tt[k] < *t) {
			*t = s->tt[k];
			*i = (uint32_t)k;
		}
}

/* A tree of nc clusters, every leaf at +inf (setup_alloc's). */
static void
tree_new(sim *s, scenario *sc, size_t nc)
{
	size_t i;

	memset(s, 0, sizeof(*s));
	memset(sc, 0, sizeof(*sc));
	sc->nclusters = nc;
	sc->clusters = calloc(nc, sizeof(*sc->clusters));
	assert_non_null(sc->clusters);
	for (i = 0; i < nc; i++)
		snprintf(sc->clusters[i].id, sizeof(sc->clusters[i].id), "c%zu",
		    i);
	s->sc = sc;
	assert_int_equal(setup_alloc(s), 0);
	for (i = 0; i < nc; i++) {
		s->tt[i] = INFINITY;
		s->ti[i] = (uint32_t)i;
		tree_fix(s, i);
	}
}

/* A time from a few values (ties are common), sometimes +inf. */
static double
rnd_time(uint64_t *g)
{
	uint64_t r = sim_rnd(g);

	if (r % 16 == 0)
		return INFINITY;
	return (double)(r >> 8 & 31);
}

/* Random updates through tree_fix2 and, on a second tree, tree_fix: both
 * roots are the scan's minimum after each, and the trees' nodes agree. */
static void
test_tree_fix2_matches_the_general_replay_and_a_scan(void **state)
{
	static scenario sc1, sc2;
	static const size_t sizes[] = { 9, 12, 17, 48, 63, 64 };
	size_t z, step, k;
	uint64_t g = 42;

	(void)state;
	for (z = 0; z < sizeof(sizes) / sizeof(sizes[0]); z++) {
		sim a, b;

		tree_new(&a, &sc1, sizes[z]);
		tree_new(&b, &sc2, sizes[z]);
		assert_int_equal(a.tlevels, 2);
		for (step = 0; step < 20000; step++) {
			size_t i = sim_rnd(&g) % a.nc;
			double t = rnd_time(&g), mt;
			uint32_t mi;

			a.tt[i] = b.tt[i] = t;
			tree_fix2(&a, i);
			tree_fix(&b, i);
			scan_min(&a, &mt, &mi);
			if (mi == NONE)
				assert_true(isinf(a.tt[a.troot]));
			else {
				assert_int_equal(a.ti[a.troot], mi);
				assert_true(a.tt[a.troot] == mt);
			}
			for (k = 0; k <= a.troot; k++) {
				assert_int_equal(a.ti[k], b.ti[k]);
				assert_true(a.tt[k] == b.tt[k] ||
				    (isinf(a.tt[k]) && isinf(b.tt[k])));
			}
		}
		sim_free(&a);
		sim_free(&b);
		free(sc1.clusters);
		free(sc2.clusters);
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tree_fix2_matches_the_general_replay_and_a_scan),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
