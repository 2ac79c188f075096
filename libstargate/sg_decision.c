/*
 * sg_decision.c — the JSON form of a routing decision (sg-route(1)) and
 * the names of its enums.
 *
 * Field order is fixed: request_id, decision, then cluster_id, rank_depth,
 * phase, algorithm, kv_skip, recheck_at_ms, status, code, reason,
 * session_state, promoted, selection — each only where it applies:
 *
 *   select   cluster_id, rank_depth, phase, algorithm, kv_skip (if true)
 *   wait     phase, algorithm, recheck_at_ms
 *   reject   phase, algorithm, status, code, reason (if any)
 *
 * phase is omitted for SG_PHASE_NONE and algorithm when NULL.  When the
 * request was classified (stargate-lb-config(5)) session_state and promoted
 * follow, and a selection also says "selection": "primary" or "fallback"
 * (stargate-lb-config(5)); a wait or a reject selects nothing, so it has no
 * selection field.
 */
#include <math.h>

#include "sg_decision.h"

const char *
sg_phase_name(int phase)
{
	switch (phase) {
	case SG_PHASE_AFFINITY:	return "affinity";
	case SG_PHASE_GLOBAL:	return "global";
	case SG_PHASE_OPEN:	return "open";
	case SG_PHASE_POLL:	return "poll";
	default:		return NULL;
	}
}

const char *
sg_decision_kind_name(int kind)
{
	switch (kind) {
	case SG_DECIDE_SELECT:	return "select";
	case SG_DECIDE_WAIT:	return "wait";
	case SG_DECIDE_REJECT:	return "reject";
	default:		return NULL;
	}
}

/* A time in ms: integral values as JSON integers, others as reals. */
static json_t *
ms_json(double v)
{
	if (isnan(v))
		v = 0;
	if (v == floor(v) && fabs(v) < 9007199254740992.0)
		return json_integer((json_int_t)v);
	return json_real(isinf(v) ? (v > 0 ? 1.7976931348623157e308 :
	    -1.7976931348623157e308) : v);
}

json_t *
sg_decision_to_json(const sg_decision *d, const sg_request *r)
{
	const char *kind = sg_decision_kind_name(d->kind);
	const char *phase = sg_phase_name(d->phase);
	const char *state;
	json_t *o;
	int bad = 0;

	if (kind == NULL || (o = json_object()) == NULL)
		return NULL;
	if (r != NULL && r->request_id != NULL)
		bad |= json_object_set_new(o, "request_id",
		    json_string(r->request_id));
	bad |= json_object_set_new(o, "decision", json_string(kind));
	if (d->kind == SG_DECIDE_SELECT) {
		bad |= json_object_set_new(o, "cluster_id",
		    json_string(d->cluster_id != NULL ? d->cluster_id : ""));
		bad |= json_object_set_new(o, "rank_depth",
		    json_integer((json_int_t)d->rank_depth));
	}
	if (phase != NULL)
		bad |= json_object_set_new(o, "phase", json_string(phase));
	if (d->algorithm != NULL)
		bad |= json_object_set_new(o, "algorithm",
		    json_string(d->algorithm));
	if (d->kind == SG_DECIDE_SELECT && d->kv_skip)
		bad |= json_object_set_new(o, "kv_skip", json_true());
	if (d->kind == SG_DECIDE_WAIT)
		bad |= json_object_set_new(o, "recheck_at_ms",
		    ms_json(d->recheck_at_ms));
	if (d->kind == SG_DECIDE_REJECT) {
		bad |= json_object_set_new(o, "status",
		    json_integer(d->status));
		if (d->code != NULL)
			bad |= json_object_set_new(o, "code",
			    json_string(d->code));
		if (d->reason != NULL)
			bad |= json_object_set_new(o, "reason",
			    json_string(d->reason));
	}
	if (d->classified) {
		if ((state = sg_session_state_name(d->session_state)) != NULL)
			bad |= json_object_set_new(o, "session_state",
			    json_string(state));
		bad |= json_object_set_new(o, "promoted",
		    json_boolean(d->promoted));
		if (d->kind == SG_DECIDE_SELECT)
			bad |= json_object_set_new(o, "selection",
			    json_string(d->primary ? "primary" : "fallback"));
	}
	if (bad) {
		json_decref(o);
		return NULL;
	}
	return o;
}
