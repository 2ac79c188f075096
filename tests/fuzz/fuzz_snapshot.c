/*
 * fuzz_snapshot.c — the snapshot JSON codec (sg_snapshot.h): a snapshot
 * document, and a cluster object as sg-proxy reads a cluster's /stats.
 *
 * Properties: whatever is accepted encodes back to JSON that is accepted
 * again and encodes to the same JSON (the codec's documented round trip);
 * a rejected document leaves the snapshot as it was.
 */
#include <jansson.h>

#include "fuzz.h"
#include "sg_snapshot.h"

static void
check_snapshot(const json_t *doc)
{
	sg_snapshot *s = sg_snapshot_new(), *t = sg_snapshot_new();
	sg_cluster keep;
	json_t *a = NULL, *b = NULL;
	sg_error err;
	size_t i;

	FZ_ASSERT(s != NULL && t != NULL);
	/* a snapshot that a failed parse must leave alone */
	FZ_ASSERT(sg_cluster_init(&keep, "keep", 4) == 0);
	FZ_ASSERT(sg_snapshot_add(s, &keep, NULL) == 0);
	sg_error_clear(&err);
	if (sg_snapshot_from_json(s, doc, &err) != 0) {
		FZ_ASSERT(err.text[0] != '\0');
		FZ_ASSERT(sg_snapshot_count(s) == 1 &&
		    strcmp(sg_snapshot_get(s, 0)->id, "keep") == 0);
		goto out;
	}
	for (i = 0; i < sg_snapshot_count(s); i++) {
		const sg_cluster *c = sg_snapshot_get(s, i);

		FZ_ASSERT(sg_snapshot_find(s, c->id, c->id_len) == (long)i);
	}
	FZ_ASSERT((a = sg_snapshot_to_json(s)) != NULL);
	FZ_ASSERT(sg_snapshot_from_json(t, a, &err) == 0);
	FZ_ASSERT(sg_snapshot_count(s) == sg_snapshot_count(t));
	FZ_ASSERT((b = sg_snapshot_to_json(t)) != NULL);
	FZ_ASSERT(json_equal(a, b));
out:
	json_decref(a);
	json_decref(b);
	sg_snapshot_free(s);
	sg_snapshot_free(t);
}

static void
check_cluster(const json_t *doc)
{
	sg_cluster c, d;
	json_t *a = NULL, *b = NULL;
	sg_error err;

	sg_error_clear(&err);
	if (sg_cluster_from_json(&c, doc, "stats", &err) != 0) {
		FZ_ASSERT(err.text[0] != '\0');
		return;
	}
	FZ_ASSERT(c.id_len >= 1 && c.id_len <= SG_ID_MAX &&
	    strlen(c.id) == c.id_len);
	FZ_ASSERT(c.nprio <= SG_PRIO_MAX);
	FZ_ASSERT((a = sg_cluster_to_json(&c)) != NULL);
	FZ_ASSERT(sg_cluster_from_json(&d, a, NULL, &err) == 0);
	FZ_ASSERT(d.id_len == c.id_len && memcmp(d.id, c.id, c.id_len) == 0);
	FZ_ASSERT(d.running == c.running && d.queued == c.queued &&
	    d.queued_input_tokens == c.queued_input_tokens &&
	    d.kv_free_tokens == c.kv_free_tokens && d.nprio == c.nprio);
	FZ_ASSERT(d.rtt_ms == c.rtt_ms &&
	    d.last_mean_input_tps == c.last_mean_input_tps);
	FZ_ASSERT((b = sg_cluster_to_json(&d)) != NULL);
	FZ_ASSERT(json_equal(a, b));
	json_decref(a);
	json_decref(b);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	json_error_t jerr;
	json_t *doc;

	if (size > (1u << 20))
		return 0;
	doc = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES,
	    &jerr);
	if (doc == NULL)
		return 0;
	check_snapshot(doc);
	check_cluster(doc);
	/* a stats document is often a snapshot's first cluster */
	if (json_is_array(json_object_get(doc, "clusters")))
		check_cluster(json_array_get(json_object_get(doc, "clusters"),
		    0));
	json_decref(doc);
	return 0;
}
