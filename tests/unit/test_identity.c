/*
 * test_identity.c — sg_identity.c: model id splitting and its 400 messages,
 * session sources and precedence, session id validation, the mt:v1 cache
 * affinity key and the lc:v1 store key (test vectors computed independently
 * with sha256sum, see each constant), eligibility, and the stargate-headers(7)
 * token estimate on hand-computed bodies.
 */
#include "sg_test.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sg_identity.h"
#include "sg_store.h"

/* printf 'sess-1' | sha256sum */
#define SHA_SESS1 "abe633f3a47a2758174eabe9160daf36c4b1a33e8642ebf96e8f91c3fcbd5f9c"
/* printf 'conv_abc' | sha256sum */
#define SHA_CONV "e04a76640a60e94cfede5d5ba6a42cb1c64e38292c985b2f4553b95fa84505ff"
/* printf 'hdr-7' | sha256sum */
#define SHA_HDR7 "1af6fc6fce33625d4e9145ffe036217030984f87e836f103b7389444be1bead1"
/* printf '%s' '[{"role":"user","content":"hi"}]' | sha256sum */
#define SHA_MSGS_HI "b03d228fdf33e7c81a9a7ea3eadadcf2cdcb98823fe93c669b8f0db42e0fa8a0"
/* printf '%s' '"hello"' | sha256sum */
#define SHA_INPUT_HELLO "5aa762ae383fbb727af3c7a36d4940a5b8c40a989452d2304fc958ff3f354e7a"
/* printf 'mt:v1:x:abc' | sha256sum */
#define SHA_SHORTKEY "30e2f1248da1d093fd16a814b8f9c4a21961f0a771a454fa3bb931f7ff766b3d"
/* printf 'mt:v1:a:b:<SHA_SESS1>' | sha256sum */
#define SHA_FIVEPARTS "46982bbb6c12dcd5f1b02df37edadfd8d8b710f1a57dfb2516437b311e866b9f"
/* printf '  padded ' | sha256sum */
#define SHA_PADDED "ac8b74492b9497e39058662aafe3c18a9c9b9717604234cb240a8c094e2d474c"
/*
 * AK="mt:v1:session:$SHA_SESS1" (78 bytes);
 * { printf '\x00\x00\x00\x00\x00\x00\x00\x08tenant-a';
 *   printf '\x00\x00\x00\x00\x00\x00\x00\x05llama';
 *   printf '\x00\x00\x00\x00\x00\x00\x00\x4e%s' "$AK"; } | sha256sum
 */
#define SHA_LC "8121ec116a23fd87345f6102a2400f5f262d3b81b28ce5fc4c4b0d6cce6e49e9"

/* Small fixture: parse body text with up to two headers. */
static int
parse(sg_identity *id, int endpoint, const char *body, const char *h1,
    const char *v1, const char *bound, sg_error *err)
{
	sg_header hdrs[1];
	json_error_t jerr;
	json_t *j;
	int rc;

	j = json_loads(body, JSON_REJECT_DUPLICATES, &jerr);
	if (j == NULL)
		fail_msg("bad test JSON: %s: %s", body, jerr.text);
	hdrs[0].name = h1;
	hdrs[0].value = v1;
	sg_error_clear(err);
	rc = sg_identity_parse(id, endpoint, j, hdrs, h1 != NULL ? 1 : 0,
	    bound, err);
	json_decref(j);
	return rc;
}

/* Parse and expect a 400 with exactly msg. */
static void
expect_400(int endpoint, const char *body, const char *hname,
    const char *hvalue, const char *bound, const char *msg)
{
	sg_identity id;
	sg_error err;

	sg_identity_init(&id);
	assert_int_equal(parse(&id, endpoint, body, hname, hvalue, bound,
	    &err), SG_EREQUEST);
	assert_int_equal(err.status, 400);
	assert_string_equal(err.code, "invalid_request_error");
	assert_string_equal(err.text, msg);
	assert_null(id.model);
	sg_identity_release(&id);
}

static void
test_model_id_splits_at_first_slash(void **state)
{
	sg_identity id;
	sg_error err;

	(void)state;
	sg_identity_init(&id);
	assert_int_equal(parse(&id, SG_ENDPOINT_CHAT,
	    "{\"model\":\"tenant-a/org/llama\",\"messages\":[]}", NULL, NULL,
	    NULL, &err), 0);
	assert_string_equal(id.routing_key, "tenant-a");
	assert_string_equal(id.model, "org/llama");
	sg_identity_release(&id);
	assert_null(id.model);
}

static void
test_uuid_routing_key_is_lower_cased(void **state)
{
	char *rk = NULL, *m = NULL;
	sg_error err;

	(void)state;
	assert_int_equal(sg_identity_split_model(
	    "0A1B2C3D-4E5F-6071-8293-A4B5C6D7E8F9/llama", NULL, &rk, &m, &err),
	    0);
	assert_string_equal(rk, "0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9");
	assert_string_equal(m, "llama");
	free(rk);
	free(m);
	/* Not a UUID (a 'G', or no hyphens): passed through unchanged. */
	assert_int_equal(sg_identity_split_model(
	    "0A1B2C3D-4E5F-6071-8293-A4B5C6D7E8FG/llama", NULL, &rk, &m, &err),
	    0);
	assert_string_equal(rk, "0A1B2C3D-4E5F-6071-8293-A4B5C6D7E8FG");
	free(rk);
	free(m);
	assert_int_equal(sg_identity_split_model("Tenant-B/x", NULL, &rk, &m,
	    &err), 0);
	assert_string_equal(rk, "Tenant-B");
	free(rk);
	free(m);
}

static void
test_model_id_400_messages(void **state)
{
	(void)state;
	expect_400(SG_ENDPOINT_CHAT, "{\"messages\":[]}", NULL, NULL, NULL,
	    "model is required");
	expect_400(SG_ENDPOINT_CHAT, "{\"model\":\"\"}", NULL, NULL, NULL,
	    "model is required");
	expect_400(SG_ENDPOINT_CHAT, "{\"model\":null}", NULL, NULL, NULL,
	    "model is required");
	expect_400(SG_ENDPOINT_CHAT, "{\"model\":7}", NULL, NULL, NULL,
	    "model must be a string");
	expect_400(SG_ENDPOINT_EMBEDDINGS, "{\"model\":\"llama\"}", NULL, NULL,
	    NULL, "model prefix is required");
	expect_400(SG_ENDPOINT_COMPLETIONS, "{\"model\":\"/llama\"}", NULL,
	    NULL, NULL, "routing key is required before model");
	expect_400(SG_ENDPOINT_RESPONSES, "{\"model\":\"tenant-a/\"}", NULL,
	    NULL, NULL, "model suffix is required after routing key");
	/* Blank is empty (found by fuzz_identity: the router read a blank
	 * x-model as absent and refused a header the client never sent). */
	expect_400(SG_ENDPOINT_CHAT, "{\"model\":\"tenant/     \"}", NULL,
	    NULL, NULL, "model suffix is required after routing key");
	expect_400(SG_ENDPOINT_CHAT, "{\"model\":\" \\t /llama\"}", NULL,
	    NULL, NULL, "routing key is required before model");
	expect_400(SG_ENDPOINT_CHAT, "{\"model\":\"tenant-a/llama\"}", NULL,
	    NULL, "tenant-b", "model targets a different routing key");
	expect_400(SG_ENDPOINT_CHAT, "[1]", NULL, NULL, NULL,
	    "request body must be a JSON object");
}

static void
test_bound_routing_key_must_match(void **state)
{
	sg_identity id;
	sg_error err;

	(void)state;
	sg_identity_init(&id);
	assert_int_equal(parse(&id, SG_ENDPOINT_CHAT,
	    "{\"model\":\"tenant-a/llama\"}", NULL, NULL, "tenant-a", &err), 0);
	assert_string_equal(id.routing_key, "tenant-a");
	/* UUIDs compare in canonical form on both sides. */
	assert_int_equal(parse(&id, SG_ENDPOINT_CHAT,
	    "{\"model\":\"0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9/llama\"}", NULL,
	    NULL, "0A1B2C3D-4E5F-6071-8293-A4B5C6D7E8F9", &err), 0);
	/* An empty bound key binds nothing. */
	assert_int_equal(parse(&id, SG_ENDPOINT_CHAT,
	    "{\"model\":\"other/llama\"}", NULL, NULL, "", &err), 0);
	sg_identity_release(&id);
}

static void
test_prompt_cache_key_source(void **state)
{
	sg_identity id;
	sg_error err;

	(void)state;
	sg_identity_init(&id);
	assert_int_equal(parse(&id, SG_ENDPOINT_CHAT,
	    "{\"model\":\"tenant-a/llama\",\"prompt_cache_key\":\"sess-1\","
	    "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
	    NULL, NULL, NULL, &err), 0);
	assert_int_equal(id.source, SG_SOURCE_PROMPT_CACHE_KEY);
	assert_string_equal(sg_session_source_name(id.source),
	    "prompt_cache_key");
	assert_string_equal(id.session_id, "sess-1");
	assert_string_equal(id.cache_affinity_key,
	    "mt:v1:session:" SHA_SESS1);
	assert_true(id.eligible);
	sg_identity_release(&id);
}

static void
test_conversation_id_source_string_and_object(void **state)
{
	sg_identity id;
	sg_error err;

	(void)state;
	sg_identity_init(&id);
	assert_int_equal(parse(&id, SG_ENDPOINT_RESPONSES,
	    "{\"model\":\"t/m\",\"conversation\":\"conv_abc\",\"input\":\"x\"}",
	    NULL, NULL, NULL, &err), 0);
	assert_int_equal(id.source, SG_SOURCE_CONVERSATION_ID);
	assert_string_equal(sg_session_source_name(id.source),
	    "conversation_id");
	assert_string_equal(id.session_id, "conv_abc");
	assert_string_equal(id.cache_affinity_key, "mt:v1:session:" SHA_CONV);
	assert_true(id.eligible);
	assert_int_equal(parse(&id, SG_ENDPOINT_RESPONSES,
	    "{\"model\":\"t/m\",\"conversation\":{\"id\":\"conv_abc\"}}",
	    NULL, NULL, NULL, &err), 0);
	assert_int_equal(id.source, SG_SOURCE_CONVERSATION_ID);
	assert_string_equal(id.cache_affinity_key, "mt:v1:session:" SHA_CONV);
	sg_identity_release(&id);
}

static void
test_header_source_is_trimmed(void **state)
{
	sg_identity id;
	sg_error err;

	(void)state;
	sg_identity_init(&id);
	assert_int_equal(parse(&id, SG_ENDPOINT_CHAT,
	    "{\"model\":\"t/m\",\"messages\":[]}", "X-Multi-Turn-Session-Id",
	    "  hdr-7\t", NULL, &err), 0);
	assert_int_equal(id.source, SG_SOURCE_HEADER);
	assert_string_equal(sg_session_source_name(id.source), "header");
	assert_string_equal(id.session_id, "hdr-7");
	assert_string_equal(id.cache_affinity_key, "mt:v1:session:" SHA_HDR7);
	assert_true(id.eligible);
	sg_identity_release(&id);
}

static void
test_header_in_key_form_is_used_verbatim(void **state)
{
	sg_identity id;
	sg_error err;
	const char *upper =
	    "mt:v1:session:ABE633F3A47A2758174EABE9160DAF36C4B1A33E8642EBF96E8F91C3FCBD5F9C";

	(void)state;
	sg_identity_init(&id);
	assert_int_equal(parse(&id, SG_ENDPOINT_CHAT,
	    "{\"model\":\"t/m\"}", "x-multi-turn-session-id", upper, NULL, &err),
	    0);
	assert_string_equal(id.cache_affinity_key, upper);
	assert_string_equal(id.session_id, upper);
	assert_int_equal(parse(&id, SG_ENDPOINT_CHAT, "{\"model\":\"t/m\"}",
	    "x-multi-turn-session-id", "mt:v1:payload:" SHA_SESS1, NULL, &err),
	    0);
	assert_string_equal(id.cache_affinity_key, "mt:v1:payload:" SHA_SESS1);
	sg_identity_release(&id);
}

static void
test_header_not_in_key_form_is_rehashed(void **state)
{
	sg_identity id;
	sg_error err;

	(void)state;
	sg_identity_init(&id);
	/* Too short a hex part. */
	assert_int_equal(parse(&id, SG_ENDPOINT_CHAT, "{\"model\":\"t/m\"}",
	    "x-multi-turn-session-id", "mt:v1:x:abc", NULL, &err), 0);
	assert_string_equal(id.cache_affinity_key,
	    "mt:v1:session:" SHA_SHORTKEY);
	/* Five colon-separated parts. */
	assert_int_equal(parse(&id, SG_ENDPOINT_CHAT, "{\"model\":\"t/m\"}",
	    "x-multi-turn-session-id", "mt:v1:a:b:" SHA_SESS1, NULL, &err), 0);
	assert_string_equal(id.cache_affinity_key,
	    "mt:v1:session:" SHA_FIVEPARTS);
	assert_false(sg_identity_is_affinity_key("mt:v1::" SHA_SESS1,
	    strlen("mt:v1::" SHA_SESS1)));
	assert_false(sg_identity_is_affinity_key("mt:v2:s:" SHA_SESS1,
	    strlen("mt:v2:s:" SHA_SESS1)));
	sg_identity_release(&id);
}

static void
test_payload_source_hashes_messages_and_is_never_eligible(void **state)
{
	sg_identity id;
	sg_error err;

	(void)state;
	sg_identity_init(&id);
	assert_int_equal(parse(&id, SG_ENDPOINT_CHAT,
	    "{\"model\":\"t/m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
	    NULL, NULL, NULL, &err), 0);
	assert_int_equal(id.source, SG_SOURCE_PAYLOAD);
	assert_string_equal(sg_session_source_name(id.source), "payload");
	assert_string_equal(id.cache_affinity_key,
	    "mt:v1:payload:" SHA_MSGS_HI);
	assert_string_equal(id.session_id, id.cache_affinity_key);
	assert_false(id.eligible);
	/* Responses: the input. */
	assert_int_equal(parse(&id, SG_ENDPOINT_RESPONSES,
	    "{\"model\":\"t/m\",\"input\":\"hello\"}", NULL, NULL, NULL, &err),
	    0);
	assert_int_equal(id.source, SG_SOURCE_PAYLOAD);
	assert_string_equal(id.cache_affinity_key,
	    "mt:v1:payload:" SHA_INPUT_HELLO);
	assert_false(id.eligible);
	/* A blank header does not make a session eligible. */
	assert_int_equal(parse(&id, SG_ENDPOINT_CHAT,
	    "{\"model\":\"t/m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
	    "x-multi-turn-session-id", "   ", NULL, &err), 0);
	assert_int_equal(id.source, SG_SOURCE_PAYLOAD);
	assert_false(id.eligible);
	sg_identity_release(&id);
}

static void
test_no_messages_no_session(void **state)
{
	sg_identity id;
	sg_error err;

	(void)state;
	sg_identity_init(&id);
	assert_int_equal(parse(&id, SG_ENDPOINT_CHAT, "{\"model\":\"t/m\"}",
	    NULL, NULL, NULL, &err), 0);
	assert_int_equal(id.source, SG_SOURCE_NONE);
	assert_null(sg_session_source_name(id.source));
	assert_null(id.cache_affinity_key);
	assert_null(id.session_id);
	assert_false(id.eligible);
	sg_identity_release(&id);
}

static void
test_completions_and_embeddings_have_no_session(void **state)
{
	sg_identity id;
	sg_error err;

	(void)state;
	sg_identity_init(&id);
	/* Even with every source present, and an invalid header. */
	assert_int_equal(parse(&id, SG_ENDPOINT_COMPLETIONS,
	    "{\"model\":\"t/m\",\"prompt_cache_key\":\"sess-1\",\"prompt\":\"x\"}",
	    "x-multi-turn-session-id", "bad\x01", NULL, &err), 0);
	assert_int_equal(id.source, SG_SOURCE_NONE);
	assert_null(id.cache_affinity_key);
	assert_false(id.eligible);
	assert_int_equal(parse(&id, SG_ENDPOINT_EMBEDDINGS,
	    "{\"model\":\"t/m\",\"prompt_cache_key\":\"sess-1\",\"input\":\"x\"}",
	    "x-multi-turn-session-id", "hdr-7", NULL, &err), 0);
	assert_int_equal(id.source, SG_SOURCE_NONE);
	assert_null(id.cache_affinity_key);
	sg_identity_release(&id);
}

static void
test_chat_precedence_prompt_cache_key_then_header_then_payload(void **state)
{
	sg_identity id;
	sg_error err;
	const char *msgs = "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]";
	char body[256];

	(void)state;
	sg_identity_init(&id);
	snprintf(body, sizeof(body), "{\"model\":\"t/m\",\"prompt_cache_key\":"
	    "\"sess-1\",\"conversation\":\"conv_abc\",%s}", msgs);
	assert_int_equal(parse(&id, SG_ENDPOINT_CHAT, body,
	    "x-multi-turn-session-id", "hdr-7", NULL, &err), 0);
	assert_int_equal(id.source, SG_SOURCE_PROMPT_CACHE_KEY);
	/* Chat ignores conversation: the header is next. */
	snprintf(body, sizeof(body), "{\"model\":\"t/m\",\"conversation\":"
	    "\"conv_abc\",%s}", msgs);
	assert_int_equal(parse(&id, SG_ENDPOINT_CHAT, body,
	    "x-multi-turn-session-id", "hdr-7", NULL, &err), 0);
	assert_int_equal(id.source, SG_SOURCE_HEADER);
	/* An empty prompt_cache_key is absent. */
	snprintf(body, sizeof(body), "{\"model\":\"t/m\",\"prompt_cache_key\":"
	    "\"\",%s}", msgs);
	assert_int_equal(parse(&id, SG_ENDPOINT_CHAT, body,
	    "x-multi-turn-session-id", "hdr-7", NULL, &err), 0);
	assert_int_equal(id.source, SG_SOURCE_HEADER);
	assert_int_equal(parse(&id, SG_ENDPOINT_CHAT, body, NULL, NULL, NULL,
	    &err), 0);
	assert_int_equal(id.source, SG_SOURCE_PAYLOAD);
	sg_identity_release(&id);
}

static void
test_responses_precedence_pck_conversation_header_payload(void **state)
{
	sg_identity id;
	sg_error err;

	(void)state;
	sg_identity_init(&id);
	assert_int_equal(parse(&id, SG_ENDPOINT_RESPONSES,
	    "{\"model\":\"t/m\",\"prompt_cache_key\":\"sess-1\","
	    "\"conversation\":\"conv_abc\",\"input\":\"hello\"}",
	    "x-multi-turn-session-id", "hdr-7", NULL, &err), 0);
	assert_int_equal(id.source, SG_SOURCE_PROMPT_CACHE_KEY);
	assert_int_equal(parse(&id, SG_ENDPOINT_RESPONSES,
	    "{\"model\":\"t/m\",\"conversation\":{\"id\":\"conv_abc\"},"
	    "\"input\":\"hello\"}", "x-multi-turn-session-id", "hdr-7", NULL,
	    &err), 0);
	assert_int_equal(id.source, SG_SOURCE_CONVERSATION_ID);
	assert_int_equal(parse(&id, SG_ENDPOINT_RESPONSES,
	    "{\"model\":\"t/m\",\"input\":\"hello\"}", "x-multi-turn-session-id",
	    "hdr-7", NULL, &err), 0);
	assert_int_equal(id.source, SG_SOURCE_HEADER);
	assert_int_equal(parse(&id, SG_ENDPOINT_RESPONSES,
	    "{\"model\":\"t/m\",\"input\":\"hello\"}", NULL, NULL, NULL, &err),
	    0);
	assert_int_equal(id.source, SG_SOURCE_PAYLOAD);
	sg_identity_release(&id);
}

static void
test_body_values_are_raw_not_trimmed(void **state)
{
	sg_identity id;
	sg_error err;

	(void)state;
	sg_identity_init(&id);
	assert_int_equal(parse(&id, SG_ENDPOINT_CHAT,
	    "{\"model\":\"t/m\",\"prompt_cache_key\":\"  padded \"}", NULL, NULL,
	    NULL, &err), 0);
	assert_string_equal(id.session_id, "  padded ");
	assert_string_equal(id.cache_affinity_key,
	    "mt:v1:session:" SHA_PADDED);
	sg_identity_release(&id);
}

static void
test_header_validation_errors(void **state)
{
	char longv[258];

	(void)state;
	memset(longv, 'a', 257);
	longv[257] = '\0';
	expect_400(SG_ENDPOINT_CHAT, "{\"model\":\"t/m\"}",
	    "x-multi-turn-session-id", longv, NULL,
	    "x-multi-turn-session-id is invalid: exceeds 256 bytes");
	expect_400(SG_ENDPOINT_CHAT, "{\"model\":\"t/m\"}",
	    "x-multi-turn-session-id", "a\x01z", NULL,
	    "x-multi-turn-session-id is invalid: contains a control character");
	expect_400(SG_ENDPOINT_RESPONSES, "{\"model\":\"t/m\"}",
	    "x-multi-turn-session-id", "a\x7fz", NULL,
	    "x-multi-turn-session-id is invalid: contains a control character");
	/* Validated first: a valid prompt_cache_key does not save it. */
	expect_400(SG_ENDPOINT_CHAT,
	    "{\"model\":\"t/m\",\"prompt_cache_key\":\"sess-1\"}",
	    "x-multi-turn-session-id", "a\x1fz", NULL,
	    "x-multi-turn-session-id is invalid: contains a control character");
}

static void
test_header_of_256_bytes_is_valid(void **state)
{
	sg_identity id;
	sg_error err;
	char v[257];

	(void)state;
	memset(v, 'h', 256);
	v[256] = '\0';
	sg_identity_init(&id);
	/* Trimming happens before the length check. */
	assert_int_equal(parse(&id, SG_ENDPOINT_CHAT, "{\"model\":\"t/m\"}",
	    "x-multi-turn-session-id", v, NULL, &err), 0);
	assert_int_equal(strlen(id.session_id), 256);
	sg_identity_release(&id);
	assert_null(sg_identity_session_check(v, 256));
	assert_string_equal(sg_identity_session_check(v, 257),
	    "exceeds 256 bytes");
	/* Bytes >= 0x80 are not control bytes. */
	assert_null(sg_identity_session_check("caf\xc3\xa9", 5));
}

static void
test_body_validation_errors(void **state)
{
	char body[400], k[258];

	(void)state;
	memset(k, 'k', 257);
	k[257] = '\0';
	snprintf(body, sizeof(body),
	    "{\"model\":\"t/m\",\"prompt_cache_key\":\"%s\"}", k);
	expect_400(SG_ENDPOINT_CHAT, body, NULL, NULL, NULL,
	    "session id from prompt_cache_key is invalid: exceeds 256 bytes");
	expect_400(SG_ENDPOINT_CHAT,
	    "{\"model\":\"t/m\",\"prompt_cache_key\":\"a\\tb\"}", NULL, NULL, NULL,
	    "session id from prompt_cache_key is invalid: contains a control character");
	expect_400(SG_ENDPOINT_RESPONSES,
	    "{\"model\":\"t/m\",\"conversation\":{\"id\":\"a\\u007fb\"}}", NULL,
	    NULL, NULL,
	    "session id from conversation_id is invalid: contains a control character");
	expect_400(SG_ENDPOINT_CHAT,
	    "{\"model\":\"t/m\",\"prompt_cache_key\":5}", NULL, NULL, NULL,
	    "prompt_cache_key must be a string");
	expect_400(SG_ENDPOINT_RESPONSES,
	    "{\"model\":\"t/m\",\"conversation\":[1]}", NULL, NULL, NULL,
	    "conversation must be a string or an object with an id");
	expect_400(SG_ENDPOINT_RESPONSES,
	    "{\"model\":\"t/m\",\"conversation\":{\"id\":7}}", NULL, NULL,
	    NULL, "conversation.id must be a string");
	/* The losing source is not validated. */
	{
		sg_identity id;
		sg_error err;

		sg_identity_init(&id);
		assert_int_equal(parse(&id, SG_ENDPOINT_RESPONSES,
		    "{\"model\":\"t/m\",\"prompt_cache_key\":\"ok\","
		    "\"conversation\":\"a\\u0001b\"}", NULL, NULL, NULL, &err), 0);
		assert_int_equal(id.source, SG_SOURCE_PROMPT_CACHE_KEY);
		sg_identity_release(&id);
	}
}

static void
test_affinity_key_vectors(void **state)
{
	char k[SG_AFFINITY_KEY_MAX];

	(void)state;
	assert_int_equal(sg_identity_affinity_key(k, sizeof(k), "session",
	    "sess-1", 6), 0);
	assert_string_equal(k, "mt:v1:session:" SHA_SESS1);
	assert_true(sg_identity_is_affinity_key(k, strlen(k)));
	/* printf '' | sha256sum */
	assert_int_equal(sg_identity_affinity_key(k, sizeof(k), "payload", NULL,
	    0), 0);
	assert_string_equal(k, "mt:v1:payload:"
	    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	assert_int_equal(sg_identity_affinity_key(k, 20, "session", "x", 1),
	    SG_ERANGE);
}

static void
test_store_key_of_a_session_vector(void **state)
{
	char lc[SG_LC_KEY_LEN + 1];
	sg_identity id;
	sg_error err;

	(void)state;
	sg_identity_init(&id);
	assert_int_equal(parse(&id, SG_ENDPOINT_CHAT,
	    "{\"model\":\"tenant-a/llama\",\"prompt_cache_key\":\"sess-1\"}",
	    NULL, NULL, NULL, &err), 0);
	assert_int_equal(sg_lc_key(lc, id.routing_key, strlen(id.routing_key),
	    id.model, strlen(id.model), id.cache_affinity_key,
	    strlen(id.cache_affinity_key)), 0);
	assert_string_equal(lc, "lc:v1:" SHA_LC);
	sg_identity_release(&id);
}

static void
test_names_round_trip(void **state)
{
	int e = -1, i;

	(void)state;
	for (i = SG_ENDPOINT_CHAT; i <= SG_ENDPOINT_EMBEDDINGS; i++) {
		assert_int_equal(sg_endpoint_parse(sg_endpoint_name(i), &e), 0);
		assert_int_equal(e, i);
	}
	assert_int_equal(sg_endpoint_parse("chat_completions", &e), SG_EINVAL);
	assert_null(sg_endpoint_name(99));
}

/* --- token estimate ------------------------------------------------------ */

static uint64_t
tokens(int endpoint, const char *body)
{
	sg_identity id;
	sg_error err;
	uint64_t t;

	sg_identity_init(&id);
	if (parse(&id, endpoint, body, NULL, NULL, NULL, &err) != 0)
		fail_msg("parse: %s", err.text);
	t = id.input_tokens;
	sg_identity_release(&id);
	return t;
}

static void
test_text_tokens_formula(void **state)
{
	(void)state;
	assert_int_equal(sg_identity_text_tokens(0), 0);
	assert_int_equal(sg_identity_text_tokens(1), 6);
	assert_int_equal(sg_identity_text_tokens(4), 6);
	assert_int_equal(sg_identity_text_tokens(5), 7);
	assert_int_equal(sg_identity_text_tokens(16), 9);
}

static void
test_chat_messages_hand_computed(void **state)
{
	(void)state;
	/*
	 * system "You are helpful." (16 B): 3 + 2 + (5 + 4) = 14
	 * user "Hello there, how are you?" (25 B), name "bob":
	 *   3 + 2 + (5 + 7) + (5 + 1) + 1 = 24
	 */
	assert_int_equal(tokens(SG_ENDPOINT_CHAT,
	    "{\"model\":\"t/m\",\"messages\":["
	    "{\"role\":\"system\",\"content\":\"You are helpful.\"},"
	    "{\"role\":\"user\",\"content\":\"Hello there, how are you?\","
	    "\"name\":\"bob\"}]}"), 38);
	/* + stop ["\n\n" (6), "END" (6)] + user "u1" (6) + tool_choice
	 * "auto" (6) = 62 */
	assert_int_equal(tokens(SG_ENDPOINT_CHAT,
	    "{\"model\":\"t/m\",\"messages\":["
	    "{\"role\":\"system\",\"content\":\"You are helpful.\"},"
	    "{\"role\":\"user\",\"content\":\"Hello there, how are you?\","
	    "\"name\":\"bob\"}],\"stop\":[\"\\n\\n\",\"END\"],\"user\":\"u1\","
	    "\"tool_choice\":\"auto\"}"), 62);
	/* stop as a plain string */
	assert_int_equal(tokens(SG_ENDPOINT_CHAT,
	    "{\"model\":\"t/m\",\"stop\":\"END\"}"), 6);
}

static void
test_chat_values_hand_computed(void **state)
{
	(void)state;
	/*
	 * tools [{"type":"function","function":{"name":"f","parameters":{}}}]
	 * is 61 bytes of JSON -> 5 + 16 = 21; response_format
	 * {"type":"json_object"} 22 B -> 11; metadata {"a":"b"} 9 B -> 8;
	 * functions [] 2 B -> 6; reasoning_effort "low" -> 6.
	 */
	assert_int_equal(tokens(SG_ENDPOINT_CHAT,
	    "{\"model\":\"t/m\",\"tools\":[{\"type\":\"function\",\"function\":"
	    "{\"name\":\"f\",\"parameters\":{}}}],"
	    "\"response_format\":{\"type\":\"json_object\"},"
	    "\"metadata\":{\"a\":\"b\"},\"functions\":[],"
	    "\"reasoning_effort\":\"low\"}"), 21 + 11 + 8 + 6 + 6);
	/* tool_choice as an object is a value: {"type":"none"} 15 B -> 9 */
	assert_int_equal(tokens(SG_ENDPOINT_CHAT,
	    "{\"model\":\"t/m\",\"tool_choice\":{\"type\":\"none\"}}"), 9);
	/*
	 * assistant message with tool_calls
	 * [{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]
	 * (72 B -> 23) and no content: 5 + 23 = 28; tool message
	 * tool_call_id "c1" (6), content "42" (6): 5 + 12 = 17.
	 */
	assert_int_equal(tokens(SG_ENDPOINT_CHAT,
	    "{\"model\":\"t/m\",\"messages\":[{\"role\":\"assistant\","
	    "\"content\":null,\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\","
	    "\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},"
	    "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"42\"}]}"),
	    28 + 17);
}

static void
test_model_extras(void **state)
{
	(void)state;
	assert_int_equal(tokens(SG_ENDPOINT_CHAT,
	    "{\"model\":\"t/llama2-70b-4096\"}"), 15);
	assert_int_equal(tokens(SG_ENDPOINT_CHAT,
	    "{\"model\":\"t/mixtral-8x7b-32768\"}"), 1);
	assert_int_equal(tokens(SG_ENDPOINT_CHAT,
	    "{\"model\":\"t/gemma-7b-it\"}"), 2);
	assert_int_equal(tokens(SG_ENDPOINT_CHAT,
	    "{\"model\":\"t/gemma-7b\"}"), 0);
}

static void
test_content_parts_text_and_images(void **state)
{
	(void)state;
	/* text part: floor(10 / 4) = 2, no +5 */
	assert_int_equal(tokens(SG_ENDPOINT_CHAT,
	    "{\"model\":\"t/m\",\"messages\":[{\"role\":\"user\",\"content\":"
	    "[{\"type\":\"text\",\"text\":\"abcdefghij\"}]}]}"), 5 + 2);
	/* image behind an http URL: size unknown, the cap 16384 */
	assert_int_equal(tokens(SG_ENDPOINT_CHAT,
	    "{\"model\":\"t/m\",\"messages\":[{\"role\":\"user\",\"content\":"
	    "[{\"type\":\"image_url\",\"image_url\":{\"url\":"
	    "\"https://example.com/a.png\"}}]}]}"), 5 + 16384);
	/* PNG 100 x 200: 85 + ceil(20000 / 784) = 111 */
	assert_int_equal(tokens(SG_ENDPOINT_CHAT,
	    "{\"model\":\"t/m\",\"messages\":[{\"role\":\"user\",\"content\":"
	    "[{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/png;"
	    "base64,iVBORw0KGgoAAAANSUhEUgAAAGQAAADICAIAAAAAAAAA\"}}]}]}"),
	    5 + 111);
	/* GIF 640 x 480: 85 + ceil(307200 / 784) = 477 (string image_url) */
	assert_int_equal(tokens(SG_ENDPOINT_CHAT,
	    "{\"model\":\"t/m\",\"messages\":[{\"role\":\"user\",\"content\":"
	    "[{\"type\":\"image_url\",\"image_url\":\"data:image/gif;base64,"
	    "R0lGODlhgALgAQAAAAAAAAAAAAAAAAAAAAAAAAAA\"}]}]}"), 5 + 477);
	/* JPEG 400 x 300 (after a JFIF segment): 85 + ceil(120000/784) = 239 */
	assert_int_equal(tokens(SG_ENDPOINT_CHAT,
	    "{\"model\":\"t/m\",\"messages\":[{\"role\":\"user\",\"content\":"
	    "[{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:image/jpeg;"
	    "base64,/9j/4AAQSkZJRgAAAAAAAAAAAAD/wAARCAEsAZAAAAAAAAAAAAAAAAA=\"}}]}]}"),
	    5 + 239);
	/* GIF 4000 x 4000: 20494 capped at 16384 */
	assert_int_equal(tokens(SG_ENDPOINT_CHAT,
	    "{\"model\":\"t/m\",\"messages\":[{\"role\":\"user\",\"content\":"
	    "[{\"type\":\"image_url\",\"image_url\":\"data:image/gif;base64,"
	    "R0lGODlhoA+gDwAAAAAAAAAAAAAAAAAAAAAAAAAA\"}]}]}"), 5 + 16384);
	/* a zero dimension: 256 */
	assert_int_equal(tokens(SG_ENDPOINT_CHAT,
	    "{\"model\":\"t/m\",\"messages\":[{\"role\":\"user\",\"content\":"
	    "[{\"type\":\"image_url\",\"image_url\":\"data:image/gif;base64,"
	    "R0lGODlhAAAKAAAAAAAAAAAAAAAAAAAAAAAAAAAA\"}]}]}"), 5 + 256);
	/* other parts are values: {"type":"input_audio"} 22 B -> 11 */
	assert_int_equal(tokens(SG_ENDPOINT_CHAT,
	    "{\"model\":\"t/m\",\"messages\":[{\"role\":\"user\",\"content\":"
	    "[{\"type\":\"input_audio\"}]}]}"), 5 + 11);
}

static void
test_responses_counted_as_chat(void **state)
{
	(void)state;
	/* instructions "Be brief." (9 B): 5 + 8; input "hello": 5 + 7 */
	assert_int_equal(tokens(SG_ENDPOINT_RESPONSES,
	    "{\"model\":\"t/m\",\"instructions\":\"Be brief.\",\"input\":\"hello\"}"),
	    13 + 12);
	/* the same conversation as a chat body gives the same number */
	assert_int_equal(tokens(SG_ENDPOINT_CHAT,
	    "{\"model\":\"t/m\",\"messages\":[{\"role\":\"system\",\"content\":"
	    "\"Be brief.\"},{\"role\":\"user\",\"content\":\"hello\"}]}"), 25);
	/* input_text part: floor(8 / 4) = 2 */
	assert_int_equal(tokens(SG_ENDPOINT_RESPONSES,
	    "{\"model\":\"t/m\",\"input\":[{\"role\":\"user\",\"content\":"
	    "[{\"type\":\"input_text\",\"text\":\"abcdefgh\"}]}]}"), 5 + 2);
	/* function_call -> assistant tool_calls (28), output -> tool (17) */
	assert_int_equal(tokens(SG_ENDPOINT_RESPONSES,
	    "{\"model\":\"t/m\",\"input\":[{\"type\":\"function_call\","
	    "\"call_id\":\"c1\",\"name\":\"f\",\"arguments\":\"{}\"},"
	    "{\"type\":\"function_call_output\",\"call_id\":\"c1\","
	    "\"output\":\"42\"}]}"), 28 + 17);
	/* flat function tool -> chat tool (61 B -> 21) */
	assert_int_equal(tokens(SG_ENDPOINT_RESPONSES,
	    "{\"model\":\"t/m\",\"tools\":[{\"type\":\"function\",\"name\":\"f\","
	    "\"parameters\":{}}]}"), 21);
	/* text.format -> response_format (11), reasoning.effort (6) */
	assert_int_equal(tokens(SG_ENDPOINT_RESPONSES,
	    "{\"model\":\"t/m\",\"text\":{\"format\":{\"type\":\"json_object\"}},"
	    "\"reasoning\":{\"effort\":\"low\"}}"), 11 + 6);
	/* PNG input_image 100 x 200: 111 */
	assert_int_equal(tokens(SG_ENDPOINT_RESPONSES,
	    "{\"model\":\"t/m\",\"input\":[{\"role\":\"user\",\"content\":"
	    "[{\"type\":\"input_image\",\"image_url\":\"data:image/png;base64,"
	    "iVBORw0KGgoAAAANSUhEUgAAAGQAAADICAIAAAAAAAAA\"}]}]}"), 5 + 111);
}

static void
test_embeddings_and_completions_sum_text_items(void **state)
{
	(void)state;
	/* "abcd" (6) + "efghi" (7) */
	assert_int_equal(tokens(SG_ENDPOINT_EMBEDDINGS,
	    "{\"model\":\"t/m\",\"input\":[\"abcd\",\"efghi\"]}"), 13);
	assert_int_equal(tokens(SG_ENDPOINT_EMBEDDINGS,
	    "{\"model\":\"t/m\",\"input\":\"abcd\"}"), 6);
	/* token ids: one each */
	assert_int_equal(tokens(SG_ENDPOINT_EMBEDDINGS,
	    "{\"model\":\"t/m\",\"input\":[[1,2,3],[4]]}"), 4);
	assert_int_equal(tokens(SG_ENDPOINT_COMPLETIONS,
	    "{\"model\":\"t/m\",\"prompt\":\"abcdefgh\"}"), 7);
	assert_int_equal(tokens(SG_ENDPOINT_EMBEDDINGS, "{\"model\":\"t/m\"}"),
	    0);
}

static size_t
jlen(const char *text)
{
	json_t *j = json_loads(text, JSON_DECODE_ANY, NULL);
	size_t n;

	if (j == NULL)
		fail_msg("bad test JSON %s", text);
	n = sg_identity_json_len(j);
	json_decref(j);
	return n;
}

static void
test_json_len_matches_reference_encoder(void **state)
{
	(void)state;
	assert_int_equal(jlen("0.1"), 3);
	assert_int_equal(jlen("1e21"), 5);		/* 1e+21 */
	assert_int_equal(jlen("1e-7"), 4);		/* 1e-7 */
	assert_int_equal(jlen("1.5e-6"), 9);		/* 0.0000015 */
	assert_int_equal(jlen("123456789.0"), 9);	/* 123456789 */
	assert_int_equal(jlen("-2.5"), 4);
	assert_int_equal(jlen("12"), 2);
	assert_int_equal(jlen("1e100"), 6);		/* 1e+100 */
	assert_int_equal(jlen("\"a<b\""), 10);		/* "a\u003cb" */
	assert_int_equal(jlen("\"\\u00e9\""), 4);	/* UTF-8 as is */
	assert_int_equal(jlen("\"\\u2028\""), 8);
	assert_int_equal(jlen("\"\\u0001\""), 8);
	assert_int_equal(jlen("\"\\n\""), 4);
	assert_int_equal(jlen("{\"a\":[true,false,null]}"), 23);
	assert_int_equal(jlen("{}"), 2);
	assert_int_equal(jlen("[]"), 2);
}

/* --- the byte scan agrees with the full parse ------------------------- */

/* Both readings of body (with header h1: v1 when h1 is not NULL): the
 * scan answers ENOTSUP, or exactly what the full parse answers.  Returns
 * the scan's code. */
static int
both(const char *body, const char *h1, const char *v1, const char *bound)
{
	sg_identity a, b;
	sg_error ea, eb;
	sg_header hdrs[1];
	json_error_t jerr;
	json_t *j;
	int ra, rb;

	sg_identity_init(&a);
	sg_identity_init(&b);
	hdrs[0].name = h1;
	hdrs[0].value = v1;
	sg_error_clear(&ea);
	sg_error_clear(&eb);
	ra = sg_identity_parse_text(&a, SG_ENDPOINT_CHAT, body, strlen(body),
	    hdrs, h1 != NULL ? 1 : 0, bound, &ea);
	if (ra == ENOTSUP)
		return ra;
	j = json_loads(body, 0, &jerr);
	if (j == NULL)
		fail_msg("the scan accepted a body jansson refuses: %s", body);
	rb = sg_identity_parse(&b, SG_ENDPOINT_CHAT, j, hdrs,
	    h1 != NULL ? 1 : 0, bound, &eb);
	json_decref(j);
	if (ra != rb)
		fail_msg("%s: scan %d, parse %d", body, ra, rb);
	if (ra != 0)
		assert_string_equal(ea.text, eb.text);
	else {
		assert_string_equal(a.model, b.model);
		assert_string_equal(a.routing_key, b.routing_key);
		assert_int_equal(a.source, b.source);
		assert_string_equal(a.session_id, b.session_id);
		assert_string_equal(a.cache_affinity_key, b.cache_affinity_key);
		assert_int_equal(a.eligible, b.eligible);
		if (a.input_tokens != b.input_tokens)
			fail_msg("%s: scan %llu tokens, parse %llu", body,
			    (unsigned long long)a.input_tokens,
			    (unsigned long long)b.input_tokens);
	}
	sg_identity_release(&a);
	sg_identity_release(&b);
	return ra;
}

static void
test_scan_agrees_with_parse_on_common_chat_bodies(void **state)
{
	static const char *const bodies[] = {
		"{\"model\":\"acme/llama\",\"prompt_cache_key\":\"sess-1\","
		    "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
		" { \"messages\" : [ {\"role\":\"system\",\"content\":"
		    "\"a\\nb\\\"c\\u00e9\\ud83d\\ude00\\/\"}, {\"role\":\"user\","
		    "\"content\":\"caf\xc3\xa9 \xe2\x80\xa8 <&>\",\"name\":\"bob\"}"
		    ", 7, null, [1, {\"x\": [true, false]}] ] , \"model\" : "
		    "\"t/llama2-70b-4096\", \"prompt_cache_key\": \"k\", "
		    "\"temperature\": 0.5, \"max_tokens\": -12, \"stream\": true,"
		    " \"stop\": [\"a\", 3, \"\\t\"], \"user\": \"u-1\", "
		    "\"tools\": null, \"tool_choice\": \"auto\", "
		    "\"reasoning_effort\": \"low\", \"x\": {\"y\": [[], {}]} }\n",
		"{\"model\":\"acme/m\",\"prompt_cache_key\":\"p\",\"messages\":"
		    "[{\"role\":\"tool\",\"content\":null,\"tool_call_id\":\"c1\","
		    "\"reasoning\":\"r\",\"channel\":\"ch\",\"name\":\"\","
		    "\"tool_calls\":null}],\"stop\":\"END\"}",
		"{\"model\":\"acme/m\",\"messages\":[]}",
		"{\"model\":\"acme/m\",\"prompt_cache_key\":\"\",\"messages\":[]}",
		"{\"model\":\"nokey\",\"prompt_cache_key\":\"p\",\"messages\":[]}",
		"{\"model\":\"/m\",\"prompt_cache_key\":\"p\",\"messages\":[]}",
		"{\"model\":\"acme/\",\"prompt_cache_key\":\"p\",\"messages\":[]}",
		"{\"model\":\"ABCDEF01-2345-6789-ABCD-EF0123456789/m\","
		    "\"prompt_cache_key\":\"p\",\"messages\":[]}",
		/* a session id over 256 bytes: the same 400 */
		"{\"model\":\"acme/m\",\"prompt_cache_key\":\""
		    "0123456789abcdef0123456789abcdef0123456789abcdef"
		    "0123456789abcdef0123456789abcdef0123456789abcdef"
		    "0123456789abcdef0123456789abcdef0123456789abcdef"
		    "0123456789abcdef0123456789abcdef0123456789abcdef"
		    "0123456789abcdef0123456789abcdef0123456789abcdef"
		    "0123456789abcdef0123456789abcdef0\","
		    "\"messages\":[]}",
	};
	size_t i, answered = 0;

	(void)state;
	for (i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++)
		if (both(bodies[i], NULL, NULL, NULL) != ENOTSUP)
			answered++;
	/* the header source, and its checks, with the scan */
	assert_int_equal(both(bodies[3], "x-multi-turn-session-id", " hdr-7 ",
	    NULL), 0);
	assert_int_equal(both(bodies[3], "X-Multi-Turn-Session-Id",
	    "mt:v1:session:" SHA_SESS1, NULL), 0);
	assert_int_equal(both(bodies[0], "x-multi-turn-session-id",
	    "bad\x7fheader", NULL), SG_EREQUEST);
	assert_int_equal(both(bodies[0], NULL, NULL, "acme"), 0);
	assert_int_equal(both(bodies[0], NULL, NULL, "other"), SG_EREQUEST);
	/* all but the payload sessions (3, 4) answered by the scan */
	assert_int_equal(answered, sizeof(bodies) / sizeof(bodies[0]) - 2);
}

static void
test_scan_leaves_the_rest_to_the_parse(void **state)
{
	static const char *const bodies[] = {
		/* payload session: jansson's encoding is hashed */
		"{\"model\":\"a/m\",\"messages\":[{\"role\":\"user\"}]}",
		/* values the estimate encodes */
		"{\"model\":\"a/m\",\"prompt_cache_key\":\"p\",\"messages\":"
		    "[{\"content\":[{\"type\":\"text\",\"text\":\"x\"}]}]}",
		"{\"model\":\"a/m\",\"prompt_cache_key\":\"p\",\"messages\":"
		    "[{\"content\":\"x\",\"tool_calls\":[]}]}",
		"{\"model\":\"a/m\",\"prompt_cache_key\":\"p\",\"messages\":[],"
		    "\"tools\":[]}",
		"{\"model\":\"a/m\",\"prompt_cache_key\":\"p\",\"messages\":[],"
		    "\"metadata\":{}}",
		"{\"model\":\"a/m\",\"prompt_cache_key\":\"p\",\"messages\":[],"
		    "\"tool_choice\":{\"type\":\"none\"}}",
		/* escaped ids, duplicates, numbers jansson may refuse */
		"{\"model\":\"a\\/m\",\"prompt_cache_key\":\"p\",\"messages\":[]}",
		"{\"model\":\"a/m\",\"prompt_cache_key\":\"\\u0070\","
		    "\"messages\":[]}",
		"{\"model\":\"a/m\",\"model\":\"b/m\",\"prompt_cache_key\":\"p\","
		    "\"messages\":[]}",
		"{\"model\":\"a/m\",\"prompt_cache_key\":\"p\",\"messages\":[],"
		    "\"n\":1e400}",
		"{\"model\":\"a/m\",\"prompt_cache_key\":\"p\",\"messages\":[],"
		    "\"n\":123456789012345678901}",
		/* malformed: the parse words the error */
		"{\"model\":\"a/m\",\"prompt_cache_key\":\"p\",\"messages\":[]",
		"{\"model\":\"a/m\",\"prompt_cache_key\":\"p\",\"messages\":[]}x",
		"{\"model\":\"a/m\",\"prompt_cache_key\":\"p\",\"messages\":[],}",
		"{\"model\":\"a/m\",\"prompt_cache_key\":\"p\",\"messages\":"
		    "[\"\xc3\x28\"]}",
		"{\"model\":\"a/m\",\"prompt_cache_key\":\"p\",\"messages\":"
		    "[\"\\ud800\"]}",
		"{\"model\":\"a/m\",\"prompt_cache_key\":\"p\",\"messages\":"
		    "[\"a\x01\"]}",
		"{\"model\":\"a/m\",\"prompt_cache_key\":\"p\",\"messages\":"
		    "[\"\\u0000\"]}",
		"{\"model\":\"a/m\",\"prompt_cache_key\":\"p\",\"messages\":[01]}",
		"{\"model\":null,\"prompt_cache_key\":\"p\",\"messages\":[]}",
		"[]",
		"",
	};
	sg_identity id;
	sg_error err;
	size_t i;

	(void)state;
	sg_identity_init(&id);
	for (i = 0; i < sizeof(bodies) / sizeof(bodies[0]); i++) {
		sg_error_clear(&err);
		if (sg_identity_parse_text(&id, SG_ENDPOINT_CHAT, bodies[i],
		    strlen(bodies[i]), NULL, 0, NULL, &err) != ENOTSUP)
			fail_msg("scan answered: %s", bodies[i]);
		assert_null(id.model);
	}
	/* other endpoints: always the parse */
	assert_int_equal(sg_identity_parse_text(&id, SG_ENDPOINT_RESPONSES,
	    "{}", 2, NULL, 0, NULL, &err), ENOTSUP);
}

static void
test_scan_of_a_220_kib_prompt_counts_like_the_parse(void **state)
{
	size_t n = 225280, i, pre;
	char *b = malloc(n + 200);
	const char *tail = "\"}]}";

	(void)state;
	assert_non_null(b);
	pre = (size_t)snprintf(b, 200, "{\"model\":\"acme/m\","
	    "\"prompt_cache_key\":\"big\",\"messages\":[{\"role\":\"system\","
	    "\"content\":\"");
	for (i = 0; i < n; i++)
		b[pre + i] = i % 997 == 0 ? '\\' : "lorem ipsum dolor sit "[i % 22];
	for (i = 0; i < n; i++)		/* every backslash escapes an 'n' */
		if (b[pre + i] == '\\')
			b[pre + ++i] = 'n';
	memcpy(b + pre + n, tail, strlen(tail) + 1);
	assert_int_equal(both(b, NULL, NULL, NULL), 0);
	free(b);
}

/*
 * The string skip (64 and 16 bytes a step where SSE2 is there, 32 and 8
 * otherwise) meets each kind of byte it must stop at or note -- a quote
 * (the end), an escape, a control byte (refused), a non-ASCII byte (valid
 * or not as UTF-8) -- at every offset of the first 160 bytes of a long
 * string and at the string's last bytes: the scan answers like the parse.
 */
static void
test_scan_string_skip_stops_at_every_offset(void **state)
{
	static const char *const ins[] = {
		"\\n", "\\\"", "\\u00e9", "\x01", "\x1f", "\xc3\xa9",
		"\xe2\x82\xac", "\xc3\x28", "\x7f", " ",
	};
	size_t len, k, at, i;
	char *b = malloc(1024);
	int rc;

	(void)state;
	assert_non_null(b);
	for (len = 150; len <= 230; len += 40)
		for (k = 0; k < sizeof(ins) / sizeof(ins[0]); k++)
			for (at = 0; at <= len; at++) {
				size_t o = (size_t)snprintf(b, 1024,
				    "{\"model\":\"acme/m\",\"prompt_cache_key\""
				    ":\"s\",\"messages\":[{\"role\":\"user\","
				    "\"content\":\"");

				for (i = 0; i < len; i++) {
					if (i == at) {
						memcpy(b + o, ins[k],
						    strlen(ins[k]));
						o += strlen(ins[k]);
					}
					b[o++] = "abcdefghijklmnopq"[i % 17];
				}
				if (at == len) {
					memcpy(b + o, ins[k], strlen(ins[k]));
					o += strlen(ins[k]);
				}
				memcpy(b + o, "\"}]}", 5);
				rc = both(b, NULL, NULL, NULL);
				/* refused bytes: the parse words the 400 */
				if ((k == 3 || k == 4 || k == 7) &&
				    rc != ENOTSUP)
					fail_msg("scan took %s at %zu",
					    ins[k], at);
				if (k != 3 && k != 4 && k != 7 && rc != 0)
					fail_msg("scan %d on %s at %zu", rc,
					    ins[k], at);
			}
	free(b);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_model_id_splits_at_first_slash),
		cmocka_unit_test(test_uuid_routing_key_is_lower_cased),
		cmocka_unit_test(test_model_id_400_messages),
		cmocka_unit_test(test_bound_routing_key_must_match),
		cmocka_unit_test(test_prompt_cache_key_source),
		cmocka_unit_test(test_conversation_id_source_string_and_object),
		cmocka_unit_test(test_header_source_is_trimmed),
		cmocka_unit_test(test_header_in_key_form_is_used_verbatim),
		cmocka_unit_test(test_header_not_in_key_form_is_rehashed),
		cmocka_unit_test(test_payload_source_hashes_messages_and_is_never_eligible),
		cmocka_unit_test(test_no_messages_no_session),
		cmocka_unit_test(test_completions_and_embeddings_have_no_session),
		cmocka_unit_test(test_chat_precedence_prompt_cache_key_then_header_then_payload),
		cmocka_unit_test(test_responses_precedence_pck_conversation_header_payload),
		cmocka_unit_test(test_body_values_are_raw_not_trimmed),
		cmocka_unit_test(test_header_validation_errors),
		cmocka_unit_test(test_header_of_256_bytes_is_valid),
		cmocka_unit_test(test_body_validation_errors),
		cmocka_unit_test(test_affinity_key_vectors),
		cmocka_unit_test(test_store_key_of_a_session_vector),
		cmocka_unit_test(test_names_round_trip),
		cmocka_unit_test(test_text_tokens_formula),
		cmocka_unit_test(test_chat_messages_hand_computed),
		cmocka_unit_test(test_chat_values_hand_computed),
		cmocka_unit_test(test_model_extras),
		cmocka_unit_test(test_content_parts_text_and_images),
		cmocka_unit_test(test_responses_counted_as_chat),
		cmocka_unit_test(test_embeddings_and_completions_sum_text_items),
		cmocka_unit_test(test_json_len_matches_reference_encoder),
		cmocka_unit_test(test_scan_agrees_with_parse_on_common_chat_bodies),
		cmocka_unit_test(test_scan_leaves_the_rest_to_the_parse),
		cmocka_unit_test(test_scan_of_a_220_kib_prompt_counts_like_the_parse),
		cmocka_unit_test(test_scan_string_skip_stops_at_every_offset),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
