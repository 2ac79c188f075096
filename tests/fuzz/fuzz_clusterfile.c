/*
 * fuzz_clusterfile.c — the cluster file, stargate-clusters(5)
 * (sg_clusterfile_parse).
 *
 * Properties: a rejected file leaves *out NULL with a message; an accepted
 * file is complete (its documented bounds and defaults hold, every id is
 * found at its own index, every cluster serves its models) and its
 * rendering with every default spelled out (sg_clusterfile_to_json)
 * parses back to an equal file.
 */
#include <jansson.h>

#include "fuzz.h"
#include "sg_clusterfile.h"

static void
check(const sg_clusterfile *cf)
{
	size_t i, j;

	FZ_ASSERT(cf->n >= 1 && cf->n <= SG_MAX_CANDIDATES && cf->c != NULL);
	FZ_ASSERT(cf->stats_interval_ms >= 10 &&
	    cf->stats_interval_ms <= 60000);
	FZ_ASSERT(cf->stats_stale_ms > cf->stats_interval_ms);
	FZ_ASSERT(cf->stats_timeout_ms > 0);
	for (i = 0; i < cf->n; i++) {
		const sg_clusterdef *d = &cf->c[i];

		FZ_ASSERT(d->id_len >= 1 && d->id_len <= SG_ID_MAX &&
		    strlen(d->id) == d->id_len);
		FZ_ASSERT(sg_clusterfile_find(cf, d->id, d->id_len) == (long)i);
		FZ_ASSERT(d->url != NULL && strncmp(d->url, "http://", 7) == 0);
		FZ_ASSERT(strlen(d->url) <= SG_CF_MAX_URL);
		FZ_ASSERT(d->url[strlen(d->url) - 1] != '/');
		FZ_ASSERT(d->stats_url != NULL);
		FZ_ASSERT(d->stats_format == SG_STATS_STARGATE ||
		    d->stats_format == SG_STATS_VLLM);
		FZ_ASSERT(d->nmodels >= 1 && d->nmodels <= SG_CF_MAX_MODELS);
		for (j = 0; j < d->nmodels; j++) {
			FZ_ASSERT(d->models[j] != NULL &&
			    strlen(d->models[j]) <= SG_CF_MAX_NAME);
			FZ_ASSERT(sg_clusterdef_serves(d, d->models[j]));
		}
		FZ_ASSERT(!d->has_rtt || d->rtt_ms >= 0);
		FZ_ASSERT(d->max_input_tps >= 0);
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	sg_clusterfile *cf = NULL, *cf2 = NULL;
	json_t *a = NULL, *b = NULL;
	sg_error err;
	char *text = NULL;
	int rc;

	if (size > (1u << 20))
		return 0;
	sg_error_clear(&err);
	rc = sg_clusterfile_parse(&cf, (const char *)data, size, &err);
	if (rc != 0) {
		FZ_ASSERT(rc == SG_ECONFIG || rc == SG_ENOMEM);
		FZ_ASSERT(cf == NULL && err.text[0] != '\0');
		return 0;
	}
	FZ_ASSERT(cf != NULL);
	check(cf);
	FZ_ASSERT((a = sg_clusterfile_to_json(cf)) != NULL);
	FZ_ASSERT((text = json_dumps(a, JSON_COMPACT)) != NULL);
	rc = sg_clusterfile_parse(&cf2, text, strlen(text), &err);
	if (rc != 0)
		fprintf(stderr, "reparse: %s\n%s\n", err.text, text);
	FZ_ASSERT(rc == 0);
	check(cf2);
	FZ_ASSERT((b = sg_clusterfile_to_json(cf2)) != NULL);
	FZ_ASSERT(json_equal(a, b));
	free(text);
	json_decref(a);
	json_decref(b);
	sg_clusterfile_free(cf);
	sg_clusterfile_free(cf2);
	return 0;
}
