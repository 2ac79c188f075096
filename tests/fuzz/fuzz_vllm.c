/*
 * fuzz_vllm.c — vLLM's Prometheus /metrics text (sg_vllm_parse) and its
 * conversion to cluster stats (sg_vllm_to_cluster), as sg-proxy's stats
 * poller runs them on every scrape.
 *
 * The input is one scrape, or two separated by a blank line (the first
 * is the previous scrape, for the prompt-token rate).  Properties: a
 * rejected scrape is zeroed with a message; an accepted one has its
 * running count and at most SG_VLLM_MAX_ENGINES engines; the cluster made
 * from it keeps used + free KV tokens equal to the capacity, never queues
 * more than it runs, and is one the snapshot codec accepts back.
 */
#include <math.h>

#include <jansson.h>

#include "fuzz.h"
#include "sg_snapshot.h"
#include "sg_vllm.h"

static const char model[] = "meta-llama/Llama-3.1-8B-Instruct";

static bool
parse(const char *text, size_t len, const char *m, sg_vllm_sample *s)
{
	sg_error err;
	static const sg_vllm_sample zero;

	sg_error_clear(&err);
	if (sg_vllm_parse(text, len, m, s, &err) != 0) {
		FZ_ASSERT(err.text[0] != '\0');
		FZ_ASSERT(memcmp(s, &zero, sizeof(zero)) == 0);
		return false;
	}
	FZ_ASSERT(s->have_running);
	FZ_ASSERT(s->engines <= SG_VLLM_MAX_ENGINES);
	return true;
}

static void
convert(const sg_vllm_sample *cur, const sg_vllm_sample *prev, bool fallback)
{
	sg_clusterdef def;
	sg_cluster c, back;
	sg_error err;
	json_t *j;

	memset(&def, 0, sizeof(def));
	memcpy(def.id, "vllm-0", 7);
	def.id_len = 6;
	if (fallback) {
		def.kv_capacity_tokens = 123456;
		def.max_input_tps = 4000;
		def.max_engine_concurrency = 64;
		def.has_rtt = true;
		def.rtt_ms = 2.5;
	}
	FZ_ASSERT(sg_vllm_to_cluster(cur, prev, 1.0, fallback ? 10.0 : 0,
	    &def, &c, &err) == 0);
	FZ_ASSERT(c.queued <= c.running);
	FZ_ASSERT(c.kv_free_tokens <= c.kv_capacity_tokens);
	if (cur->have_kv_usage && c.kv_capacity_tokens > 0)
		FZ_ASSERT(c.kv_used_tokens + c.kv_free_tokens ==
		    c.kv_capacity_tokens);
	FZ_ASSERT(!isnan(c.last_mean_input_tps));
	FZ_ASSERT((j = sg_cluster_to_json(&c)) != NULL);
	FZ_ASSERT(sg_cluster_from_json(&back, j, "stats", &err) == 0);
	FZ_ASSERT(back.running == c.running && back.queued == c.queued);
	json_decref(j);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *text = (const char *)data, *body;
	sg_vllm_sample whole, prev, cur, m;
	size_t head, blen;
	bool hp, hc;

	if (size > (1u << 20))
		return 0;
	if (parse(text, size, NULL, &whole)) {
		convert(&whole, NULL, false);
		convert(&whole, NULL, true);
	}
	if (parse(text, size, model, &m))
		convert(&m, NULL, true);
	fz_split(text, size, &head, &body, &blen);
	if (blen > 0) {
		hp = parse(text, head, NULL, &prev);
		hc = parse(body, blen, NULL, &cur);
		if (hc) {
			convert(&cur, hp ? &prev : NULL, false);
			convert(&cur, hp ? &prev : NULL, true);
		}
	}
	return 0;
}
