/*
 * fuzz_request_json.c — the routing request's JSON form
 * (sg_request_from_json).
 *
 * Properties: an accepted request encodes (sg_request_to_json) to JSON
 * that is accepted again and encodes the same; a rejected one is left
 * released (all absent) with a message.
 */
#include <jansson.h>

#include "fuzz.h"
#include "sg_request.h"

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	json_error_t jerr;
	json_t *doc, *a = NULL, *b = NULL;
	sg_request r, q;
	sg_error err;

	if (size > (1u << 20))
		return 0;
	doc = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES,
	    &jerr);
	if (doc == NULL)
		return 0;
	sg_request_init(&r);
	sg_request_init(&q);
	sg_error_clear(&err);
	if (sg_request_from_json(&r, doc, &err) != 0) {
		FZ_ASSERT(err.text[0] != '\0');
		FZ_ASSERT(r.request_id == NULL && r.model == NULL &&
		    r.nexcluded == 0 && r.store == NULL);
		goto out;
	}
	FZ_ASSERT(r.request_id != NULL && r.model != NULL);
	FZ_ASSERT(r.nexcluded <= SG_MAX_EXCLUDED);
	if (r.nexcluded > 0)
		FZ_ASSERT(sg_request_excludes(&r, r.excluded[0],
		    strlen(r.excluded[0])));
	FZ_ASSERT((a = sg_request_to_json(&r)) != NULL);
	FZ_ASSERT(sg_request_from_json(&q, a, &err) == 0);
	FZ_ASSERT((b = sg_request_to_json(&q)) != NULL);
	FZ_ASSERT(json_equal(a, b));
out:
	json_decref(a);
	json_decref(b);
	sg_request_release(&r);
	sg_request_release(&q);
	json_decref(doc);
	return 0;
}
