/*
 * fuzz_identity.c — the gateway's reading of an OpenAI request: the body's
 * identity (sg_identity_parse: model id, session, input-token estimate)
 * and the trusted routing headers made from it (sg_gateway_build), which
 * the router stage then reads (sg_gateway_request).
 *
 * Input (text, so fixtures seed it):
 *
 *   <endpoint>[ <bound routing key>]     c chat, o completions, r responses,
 *                                        e embeddings
 *   name: value                          request headers, raw
 *   ...
 *   <blank line>
 *   {...}                                the body
 *
 * Properties: a refused request is a 400 invalid_request_error with a
 * message and leaves the identity empty; an accepted one has a model, a
 * cache affinity key of the documented form exactly when it has a
 * session, a session id within its bound, and a store key exactly when it
 * is eligible; and whenever the gateway builds its headers, the router
 * accepts them and reads back the same model, key and token count.
 */
#include <jansson.h>

#include "fuzz.h"
#include "sg_gateway.h"
#include "sg_identity.h"
#include "sg_request.h"

#define MAX_HDRS	64

static size_t
headers(char *buf, size_t len, sg_header *h)
{
	char *p = buf, *end = buf + len;
	size_t n = 0;

	while (p < end && n < MAX_HDRS) {
		char *nl = memchr(p, '\n', (size_t)(end - p));
		char *le = nl != NULL ? nl : end, *c;

		if (le > p && le[-1] == '\r')
			le[-1] = '\0';
		*le = '\0';
		if ((c = strchr(p, ':')) != NULL && c != p) {
			*c = '\0';
			h[n].name = p;
			h[n].value = c + 1;
			n++;
		}
		p = le + 1;
	}
	return n;
}

static void
check_route(const sg_identity *id, const char *hint)
{
	sg_gateway_headers gh;
	sg_gateway_route rt;
	sg_request r;
	sg_error err;
	char key[SG_LC_KEY_LEN + 1];
	int rc;

	FZ_ASSERT((sg_gateway_store_key(id, key) == 0) ==
	    sg_gateway_store_eligible(id));
	memset(&rt, 0, sizeof(rt));
	rt.request_id = "fuzz-req-1";
	rt.routing_method = hint;	/* any text: optional-string rule */
	rt.has_priority = hint != NULL;
	rt.priority = 7;
	rt.last_cluster_id = hint;
	sg_error_clear(&err);
	rc = sg_gateway_build(&gh, id, &rt, &err);
	if (rc != 0) {
		FZ_ASSERT(rc == SG_EREQUEST && err.status == 400);
		return;
	}
	FZ_ASSERT(gh.n <= SG_GATEWAY_MAX_HEADERS);
#ifdef FZ_SKIP_KNOWN
	/* to fuzz on past /work/fz-bugs.txt item 1 (a blank model suffix) */
	if (strspn(id->model, " \t") == strlen(id->model))
		return;
#endif
	sg_request_init(&r);
	rc = sg_gateway_request(&r, &gh, &err);
	if (rc != 0)
		fprintf(stderr, "router refused the gateway's headers: %s\n",
		    err.text);
	FZ_ASSERT(rc == 0);
	FZ_ASSERT(r.input_tokens == id->input_tokens);
	FZ_ASSERT(r.model != NULL);
	if (id->cache_affinity_key != NULL)
		FZ_ASSERT(r.cache_affinity_key != NULL &&
		    strcmp(r.cache_affinity_key, id->cache_affinity_key) == 0);
	if (r.last_cluster_id != NULL)
		FZ_ASSERT(sg_gateway_store_eligible(id));
	sg_request_release(&r);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char eps[] = "cores";
	static sg_header h[MAX_HDRS];
	char *buf, *first, *bound = NULL, *nl;
	const char *body;
	size_t head, blen, nh;
	json_t *doc;
	sg_identity id;
	sg_error err;
	int endpoint, rc;

	if (size < 2 || size > (1u << 20))
		return 0;
	FZ_ASSERT((buf = malloc(size + 1)) != NULL);
	memcpy(buf, data, size);
	buf[size] = '\0';
	endpoint = (int)(strchr(eps, buf[0]) != NULL && buf[0] != '\0' ?
	    strchr(eps, buf[0]) - eps : (unsigned char)buf[0] % 4);
	if (endpoint == 4)	/* 's': chat again */
		endpoint = SG_ENDPOINT_CHAT;
	if ((nl = memchr(buf, '\n', size)) == NULL)
		goto out;
	*nl = '\0';
	first = buf + 1;
	if (*first == ' ' && first[1] != '\0')
		bound = first + 1;
	fz_split(nl + 1, size - (size_t)(nl + 1 - buf), &head, &body, &blen);
	nh = headers(nl + 1, head, h);
	if ((doc = json_loadb(body, blen, JSON_REJECT_DUPLICATES, NULL)) ==
	    NULL)
		goto out;
	sg_identity_init(&id);
	sg_error_clear(&err);
	rc = sg_identity_parse(&id, endpoint, doc, h, nh, bound, &err);
	if (rc != 0) {
		FZ_ASSERT(rc == SG_EREQUEST || rc == SG_ENOMEM);
		FZ_ASSERT(rc != SG_EREQUEST || (err.status == 400 &&
		    strcmp(err.code, "invalid_request_error") == 0));
		FZ_ASSERT(err.text[0] != '\0');
		FZ_ASSERT(id.model == NULL && id.session_id == NULL &&
		    id.cache_affinity_key == NULL);
	} else {
		FZ_ASSERT(id.model != NULL && id.model[0] != '\0');
		FZ_ASSERT(id.endpoint == endpoint);
		FZ_ASSERT((id.source == SG_SOURCE_NONE) ==
		    (id.cache_affinity_key == NULL));
		if (id.cache_affinity_key != NULL)
			FZ_ASSERT(sg_identity_is_affinity_key(
			    id.cache_affinity_key,
			    strlen(id.cache_affinity_key)));
		if (id.session_id != NULL && id.source != SG_SOURCE_PAYLOAD)
			FZ_ASSERT(sg_identity_session_check(id.session_id,
			    strlen(id.session_id)) == NULL);
		check_route(&id, NULL);
		check_route(&id, nh > 0 ? h[0].value : "c1");
	}
	sg_identity_release(&id);
	json_decref(doc);
out:
	free(buf);
	return 0;
}
