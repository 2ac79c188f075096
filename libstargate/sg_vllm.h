/*
 * sg_vllm.h — vLLM's Prometheus /metrics as cluster stats
 * (stargate-clusters(5), "stats.format": "vllm").
 *
 * sg_vllm_parse() reads one scrape into a sample of the few families the
 * router needs; sg_vllm_to_cluster() turns a sample (and the previous one,
 * for the prompt-token rate) into an sg_cluster, taking what vLLM does not
 * export from the cluster's entry in the cluster file.
 */
#ifndef SG_VLLM_H
#define SG_VLLM_H

#include "sg_clusterfile.h"
#include "sg_common.h"
#include "sg_snapshot.h"

#define SG_VLLM_MAX_TEXT	(64u << 20)	/* bytes of one scrape */
#define SG_VLLM_MAX_LINE	65536		/* bytes of one line */
#define SG_VLLM_MAX_SAMPLES	1000000		/* sample lines of one scrape */
#define SG_VLLM_MAX_ENGINES	64	/* engines paired by their label */

typedef struct sg_vllm_sample {
	bool		have_running, have_waiting, have_kv_usage, have_blocks,
			have_prompt_total;
	double		running;	/* Σ vllm:num_requests_running */
	double		waiting;	/* Σ vllm:num_requests_waiting */
	double		kv_usage;	/* capacity-weighted mean, 0..1 */
	uint64_t	block_size;	/* of the first engine seen */
	uint64_t	num_gpu_blocks;	/* Σ over engines */
	uint64_t	kv_capacity_tokens;	/* Σ block_size·num_gpu_blocks */
	double		kv_used_tokens;	/* Σ usage · capacity, per engine */
	double		prompt_tokens_total;	/* Σ prompt_tokens_total */
	uint32_t	engines;	/* distinct engine label values seen */
} sg_vllm_sample;

/*
 * Parse Prometheus text exposition (0.0.4) in text[0..len).  Only series
 * whose model_name label equals model are summed (all series when model is
 * NULL; a series without a model_name label always counts, as
 * vllm:cache_config_info has none).  Families: vllm:num_requests_running,
 * vllm:num_requests_waiting, vllm:kv_cache_usage_perc (or the older
 * vllm:gpu_cache_usage_perc when the newer one is absent),
 * vllm:cache_config_info{block_size, num_gpu_blocks} and
 * vllm:prompt_tokens_total; usage and capacity are paired per engine
 * label.  HELP/TYPE/comment lines, unknown families, timestamps, escaped
 * label values and NaN/±Inf values are accepted (a non-finite value of a
 * family used here is ignored).  Bounded: SG_VLLM_MAX_TEXT bytes,
 * SG_VLLM_MAX_LINE per line, SG_VLLM_MAX_SAMPLES samples.  A malformed
 * line of a family used here is SG_EINVAL ("line 12: ..."), as is a scrape
 * without vllm:num_requests_running.  *out is zeroed first.
 */
int	sg_vllm_parse(const char *text, size_t len, const char *model,
	    sg_vllm_sample *out, sg_error *err);

/*
 * Fill *out (id from def) from cur, the previous sample prev (NULL: none)
 * taken dt_s seconds earlier, and the input TPS computed at prev
 * (prev_tps, 0 if none):
 *  running = running + waiting (Stargate counts waiting requests as
 *  running), queued = waiting; kv capacity from cache_config_info, else
 *  def->kv_capacity_tokens; kv used = usage · capacity, free = the rest;
 *  last_mean_input_tps = the rate of vllm:prompt_tokens_total over dt_s
 *  when it moved, else prev_tps (kept while the counter is still, and
 *  across a counter reset), else def->max_input_tps; max_input_tps,
 *  max_engine_concurrency and rtt_ms (when given) from def.  Counts and
 *  token figures saturate at INT64_MAX, the snapshot codec's range, so
 *  the cluster encodes and decodes to itself.
 * SG_EINVAL when cur has no running count or an argument is NULL.
 */
int	sg_vllm_to_cluster(const sg_vllm_sample *cur,
	    const sg_vllm_sample *prev, double dt_s, double prev_tps,
	    const sg_clusterdef *def, sg_cluster *out, sg_error *err);

#endif /* SG_VLLM_H */
