/*
 * sg_lbconf.h — lb-config.json (stargate-lb-config(5)).
 *
 * A parsed configuration is a set of algorithm definitions (sg_algdef), each
 * with a small integer id so that a router can keep per-definition state
 * (round-robin counters) in an array.  Definitions are read-only after
 * parsing.
 */
#ifndef SG_LBCONF_H
#define SG_LBCONF_H

#include "sg_common.h"

enum sg_algorithm {
	SG_ALG_POWER_OF_N = 0,
	SG_ALG_WAIT_AND_WIDEN,
	SG_ALG_ROUND_ROBIN,
	SG_ALG_RANDOM,
	SG_ALG_PULSAR,
	SG_ALG_PULSAR_WAW,
	SG_ALG_COUNT
};

enum sg_comparator {
	SG_CMP_NONE = 0,	/* p-w-a-w: queue_ms, then utilisation */
	SG_CMP_TTFT,
	SG_CMP_QUEUE_TIME,
	SG_CMP_INPUT_WORK,
	SG_CMP_UTILIZATION,
	SG_CMP_NUM_QUEUED,
};

enum sg_weight {
	SG_WEIGHT_MAX_INPUT_TPS = 0,
	SG_WEIGHT_LAST_MEAN_INPUT_TPS,
};

/* One algorithm definition with every default applied (stargate-lb-config(5)). */
typedef struct sg_algdef {
	unsigned	id;		/* 0..sg_lbconf_ndefs()-1 */
	int		algorithm;	/* enum sg_algorithm */
	/* common */
	bool		require_cache_affinity_key;
	bool		require_input_tokens;
	bool		has_max_input_work;
	double		max_input_work_seconds;
	/* power-of-n */
	unsigned	sample_count;		/* 1..64, default 2 */
	int		comparator;		/* default SG_CMP_TTFT; SG_CMP_NONE for p-w-a-w */
	/* hashing */
	char		seed[SG_ID_MAX + 1];	/* "" by default */
	size_t		seed_len;
	bool		consider_kv_free_tokens;
	int		rendezvous_weight;	/* enum sg_weight */
	unsigned	virtual_nodes;		/* V >= 1, default 150 */
	unsigned	selection_count;	/* K; 0 = unset (w-a-w); p-w-a-w: >= 1 */
	/* wait-and-widen family */
	uint64_t	affinity_wait_ms;	/* X */
	double		affinity_scale;		/* s in [0, 1], default 1.0 */
	bool		has_band_widen;
	uint64_t	band_widen_interval_ms;	/* p-w-a-w only */
	uint64_t	fallback_max_queued;	/* p-w-a-w only */
	bool		has_queue_floor, has_queue_ceil;
	uint64_t	max_queue_time_floor_ms;
	uint64_t	max_queue_time_ceil_ms;
	uint64_t	ttft_bucket_size_ms;	/* B, default 20 */
	double		next_bucket_unlock_factor; /* f, default 0.25 */
	unsigned	n;			/* >= 1, default 2 */
	uint64_t	max_queued;		/* default 0 */
	bool		ignore_queue_time;
	bool		ignore_input_processing_time;
	bool		last_cluster_affinity;
} sg_algdef;

typedef struct sg_lbconf sg_lbconf;

/*
 * Parse lb-config.json text.  source names the input in messages.  Every
 * rule and message of stargate-lb-config(5), plus last_cluster_affinity
 * (accepted for wait-and-widen and pulsar-wait-and-widen only; elsewhere
 * "<alg> config does not support field(s): last_cluster_affinity").
 * Routing expressions are out of scope.  Returns 0, SG_ECONFIG (every
 * problem with the file or its content, including a file that cannot be
 * opened or read), SG_ENOMEM, or SG_EINVAL for a NULL text with a length.
 * Messages start with the source and the location in the file.
 */
int	sg_lbconf_parse(sg_lbconf **out, const char *text, size_t len,
	    const char *source, sg_error *err);
int	sg_lbconf_load(sg_lbconf **out, const char *path, sg_error *err);
/* The permissive default (stargate-lb-config(5)): power-of-n, every algorithm allowed. */
int	sg_lbconf_default(sg_lbconf **out, sg_error *err);
void	sg_lbconf_free(sg_lbconf *c);		/* NULL is a no-op */

size_t	sg_lbconf_ndefs(const sg_lbconf *c);
/* Borrowed, valid for the life of c. */
const sg_algdef *sg_lbconf_def(const sg_lbconf *c, size_t id);

/*
 * Resolve the definition for a request (stargate-lb-config(5)): model's
 * configured algorithm when routing_method is NULL, else the normalised
 * override. Failures return SG_EREQUEST with err->status 400 and err->code one
 * of "unknown_method", "unavailable", "malformed_expression" (a value with ';'
 * parameters).  method_invalid means the header did not decode.
 */
int	sg_lbconf_resolve(const sg_lbconf *c, const char *model,
	    const char *routing_method, bool method_invalid,
	    const sg_algdef **out, sg_error *err);

/* Canonical names and aliases (stargate-lb-config(5)).  Returns 0 or SG_EINVAL. */
int	sg_algorithm_parse(const char *name, size_t len, int *alg);
const char *sg_algorithm_name(int alg);		/* canonical */
const char *sg_comparator_name(int cmp);	/* "ttft", ...; NULL for NONE */

#endif /* SG_LBCONF_H */
