/*
 * sg_decision.h — the outcome of one routing decision (sg-route(1)).
 *
 * A decision is a pure function of (router, snapshot, request, elapsed).
 * SG_DECIDE_WAIT returns the elapsed time at which to decide again; the
 * caller owns waiting.
 */
#ifndef SG_DECISION_H
#define SG_DECISION_H

#include <jansson.h>

#include "sg_common.h"
#include "sg_request.h"

enum sg_decision_kind {
	SG_DECIDE_SELECT = 1,
	SG_DECIDE_WAIT,
	SG_DECIDE_REJECT,
};

enum sg_phase {
	SG_PHASE_NONE = 0,	/* algorithms without phases */
	SG_PHASE_AFFINITY,	/* affinity group (w-a-w, p-w-a-w) */
	SG_PHASE_GLOBAL,	/* w-a-w global phase, or w-a-w without a group */
	SG_PHASE_OPEN,		/* p-w-a-w open-set (band) phase */
	SG_PHASE_POLL,		/* unavailable, polling until x-max-wait-ms */
};

typedef struct sg_decision {
	int		 kind;		/* enum sg_decision_kind */
	const char	*algorithm;	/* canonical name (static storage) */
	/* SELECT */
	size_t		 index;		/* candidate index in the snapshot */
	const char	*cluster_id;	/* borrowed from the snapshot */
	unsigned	 rank_depth;	/* 1 = primary; > 1 fallback */
	bool		 kv_skip;	/* an earlier-ranked cluster was a KV skip */
	int		 phase;		/* enum sg_phase */
	/* WAIT */
	double		 recheck_at_ms;	/* elapsed time at which to decide again */
	/* REJECT */
	int		 status;	/* 503, 404 */
	const char	*code;		/* "overloaded_error", "no_eligible_candidates",
					   "input_work_limit_exceeded", ... (static) */
	const char	*reason;	/* admission reason or NULL (static) */
	/* Session rules (stargate-lb-config(5)), set only when the request was classified. */
	bool		 classified;
	int		 session_state;	/* enum sg_session_state */
	bool		 promoted;
	bool		 primary;	/* selection: primary/fallback (stargate-lb-config(5)) */
} sg_decision;

/*
 * The decision as JSON (new reference):
 * {"request_id", "decision": "select"|"wait"|"reject", "cluster_id",
 *  "rank_depth", "phase", "algorithm", "kv_skip" (only when true),
 *  "recheck_at_ms", "status", "code", "reason",
 *  "session_state", "promoted", "selection"}; fields that do not apply to
 * the kind are omitted, the session fields appear only when classified.
 */
json_t	*sg_decision_to_json(const sg_decision *d, const sg_request *r);

const char *sg_phase_name(int phase);		/* "affinity", ...; NULL for NONE */
const char *sg_decision_kind_name(int kind);	/* "select", "wait", "reject" */

#endif /* SG_DECISION_H */
