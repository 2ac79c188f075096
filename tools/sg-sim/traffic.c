/*
 * traffic.c — a scenario's generated session traffic drawn once, for every
 * row to replay (sim.h: sim_traffic).
 *
 * Every row of a scenario replays the same sessions: session i's arrival,
 * class, turn count, and each turn's size draws and think time come from
 * generators keyed by the seed and i, never by routing (sim.c).  Drawing
 * them costs a row about a tenth of its instructions at fleet size
 * (lognormal draws: an exp and a Gaussian each), so with several rows they
 * are drawn here once, in the order sim.c and trace_export() draw them, and
 * each row reads them back: the arrival times (one past the last session,
 * the time sim.c pushes and discards), and per session its class and the
 * range of its turns; per turn the prompt draw (the first prompt, or the
 * growth added to the context), the answer's size and the think time drawn
 * after them (before the next turn; 0 after the last).  The row applies
 * the context, clamps and rounding exactly as with live draws, so a row
 * gives the same bytes with or without the table (sg-sim.bats checks every
 * row alone, drawing live, against the rows run together).
 *
 * The sizes are stored in 32 bits: a scenario whose size distributions
 * reach beyond, whose traffic exceeds TR_MAX_TURNS turns, or that replays
 * a trace gets no table (sim_traffic_new sets NULL, and the rows draw).
 */
#include <math.h>
#include <stdlib.h>

#include "sg-sim/sim.h"

#define TR_MAX_TURNS	(1u << 28)	/* 4 GiB of turns: draw live past it */

/* Whether every size fits the table's 32 bits. */
static bool
tr_fits(const sim_sessions *ss)
{
	return ss->first_input.max <= UINT32_MAX &&
	    ss->turn_input.max <= UINT32_MAX && ss->output.max <= UINT32_MAX &&
	    ss->turns.max <= UINT32_MAX;
}

/* Session id's turns (sim.c's order: turns; then per turn the prompt, the
 * answer and, before another turn, the think time). */
static int
tr_session(sim_traffic *tr, const scenario *sc, uint32_t id, size_t *tcap)
{
	const sim_sessions *ss = &sc->sessions;
	uint64_t rng = sim_stream_seed(sc->seed, 1, id);
	uint32_t turns = (uint32_t)sim_draw(&rng, &ss->turns), k;

	if (tr->nturn + turns > TR_MAX_TURNS)
		return SG_ERANGE;
	if (sim_grow((void **)&tr->turn, tcap, sizeof(*tr->turn),
	    tr->nturn + turns, 1024) != 0)
		return SG_ENOMEM;
	tr->cls[id] = (uint8_t)sim_draw_class(sc, id);
	for (k = 1; k <= turns; k++) {
		sim_tturn *t = &tr->turn[tr->nturn++];

		t->in = (uint32_t)sim_draw(&rng, k == 1 ? &ss->first_input :
		    &ss->turn_input);
		t->out = (uint32_t)sim_draw(&rng, &ss->output);
		t->think = k < turns ? sim_draw_ms(&rng, &ss->think) : 0;
	}
	return 0;
}

static int
tr_build(sim_traffic *tr, const scenario *sc)
{
	uint64_t arr = sim_stream_seed(sc->seed, 2, 0);
	size_t acap = 0, fcap = 0, ccap = 0, tcap = 0;
	double t = 0;
	int rc;

	for (;;) {
		t = sim_next_arrival(sc, &arr, t);
		if (tr->nsess >= UINT32_MAX - 1)
			return SG_ERANGE;
		if (sim_grow((void **)&tr->arrive, &acap,
		    sizeof(*tr->arrive), tr->nsess + 1, 1024) != 0 ||
		    sim_grow((void **)&tr->first, &fcap, sizeof(*tr->first),
		    tr->nsess + 1, 1024) != 0 ||
		    sim_grow((void **)&tr->cls, &ccap, sizeof(*tr->cls),
		    tr->nsess + 1, 1024) != 0)
			return SG_ENOMEM;
		tr->arrive[tr->nsess] = t;
		tr->first[tr->nsess] = (uint32_t)tr->nturn;
		if (!(t < sc->duration_ms))
			return 0;
		if ((rc = tr_session(tr, sc, (uint32_t)tr->nsess, &tcap)) != 0)
			return rc;
		tr->nsess++;
	}
}

int
sim_traffic_new(const scenario *sc, sim_traffic **out, sg_error *err)
{
	sim_traffic *tr;
	int rc;

	*out = NULL;
	if (sc->has_trace || !tr_fits(&sc->sessions))
		return 0;
	if ((tr = calloc(1, sizeof(*tr))) == NULL)
		return sg_seterr(err, SG_ENOMEM, "out of memory");
	if ((rc = tr_build(tr, sc)) != 0) {
		sim_traffic_free(tr);
		if (rc == SG_ERANGE)
			return 0;		/* too large: draw live */
		return sg_seterr(err, rc, "out of memory");
	}
	*out = tr;
	return 0;
}

void
sim_traffic_free(sim_traffic *tr)
{
	if (tr == NULL)
		return;
	free(tr->arrive);
	free(tr->first);
	free(tr->cls);
	free(tr->turn);
	free(tr);
}
