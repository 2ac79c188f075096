/*
 * test_gateway.c — sg_gateway.c: the optional-string rule, store
 * eligibility and keys, the trusted headers of a routing request, and the
 * round trip through the router's header parser (the in-process path).
 */
#include "sg_test.h"

#include <stdlib.h>

#include "sg_gateway.h"

static bool
opt(const char *s, const char *want)
{
	const char *v;
	size_t len;
	bool got = sg_optional_string(s, s != NULL ? strlen(s) : 0, &v, &len);

	if (want == NULL)
		return !got && v == NULL && len == 0;
	return got && len == strlen(want) && memcmp(v, want, len) == 0;
}

static void
test_optional_string_rule(void **state)
{
	(void)state;
	assert_true(opt("B", "B"));
	assert_true(opt("  B \t", "B"));
	assert_true(opt("a b", "a b"));
	assert_true(opt("\xc3\xa9", "\xc3\xa9"));	/* é: valid UTF-8 */
	assert_true(opt("a\tb", "a\tb"));		/* HTAB decodes */
	assert_true(opt(NULL, NULL));
	assert_true(opt("", NULL));
	assert_true(opt("   ", NULL));
	assert_true(opt("A\x01", NULL));		/* control: absent */
	assert_true(opt("A\x7f", NULL));
	assert_true(opt("A\r\nx-evil: 1", NULL));
	assert_true(opt("\xff" "B", NULL));		/* not UTF-8 */
	assert_true(opt("\xc0\xaf", NULL));		/* overlong */
	assert_false(sg_header_value_decodable("a\nb", 3));
	assert_true(sg_header_value_decodable("a b", 3));
}

static void
ident(sg_identity *id, const char *rk, const char *model, int src,
    const char *key)
{
	sg_identity_init(id);
	id->routing_key = rk != NULL ? strdup(rk) : NULL;
	id->model = model != NULL ? strdup(model) : NULL;
	id->source = src;
	id->cache_affinity_key = key != NULL ? strdup(key) : NULL;
	id->eligible = src == SG_SOURCE_PROMPT_CACHE_KEY ||
	    src == SG_SOURCE_CONVERSATION_ID || src == SG_SOURCE_HEADER;
	id->input_tokens = 1234;
}

#define AK	"mt:v1:session:" \
	"0000000000000000000000000000000000000000000000000000000000000000"

static void
test_eligible_sources_only(void **state)
{
	static const struct {
		int src;
		bool eligible;
	} cases[] = {
		{ SG_SOURCE_PROMPT_CACHE_KEY, true },
		{ SG_SOURCE_CONVERSATION_ID, true },
		{ SG_SOURCE_HEADER, true },
		{ SG_SOURCE_PAYLOAD, false },
		{ SG_SOURCE_NONE, false },
	};
	char k[SG_LC_KEY_LEN + 1], want[SG_LC_KEY_LEN + 1];
	sg_identity id;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		ident(&id, "rk", "m", cases[i].src, AK);
		assert_int_equal(sg_gateway_store_eligible(&id),
		    cases[i].eligible);
		if (cases[i].eligible) {
			assert_int_equal(sg_gateway_store_key(&id, k), 0);
			sg_lc_key(want, "rk", 2, "m", 1, AK, strlen(AK));
			assert_string_equal(k, want);
		} else
			assert_int_equal(sg_gateway_store_key(&id, k),
			    SG_ENOTFOUND);
		sg_identity_release(&id);
	}
	/* No model or no key: not eligible whatever the source. */
	ident(&id, "rk", NULL, SG_SOURCE_PROMPT_CACHE_KEY, AK);
	assert_false(sg_gateway_store_eligible(&id));
	sg_identity_release(&id);
	ident(&id, "rk", "m", SG_SOURCE_PROMPT_CACHE_KEY, NULL);
	assert_false(sg_gateway_store_eligible(&id));
	sg_identity_release(&id);
	assert_false(sg_gateway_store_eligible(NULL));
}

static const char *
hget(const sg_gateway_headers *h, const char *name)
{
	size_t i;

	for (i = 0; i < h->n; i++)
		if (strcmp(h->h[i].name, name) == 0)
			return h->h[i].value;
	return NULL;
}

static void
test_headers_in_order(void **state)
{
	static const char *const names[] = { "x-request-id", "x-model",
	    "x-input-tokens", "x-routing-key", "x-cache-affinity-key",
	    "x-routing-method", "x-priority", "x-stargate-last-cluster-id" };
	sg_gateway_route rt = { "r-1", " pulsar ", true, 5, " B " };
	sg_gateway_headers h;
	sg_identity id;
	sg_error e;
	size_t i;

	(void)state;
	ident(&id, "rk", "m", SG_SOURCE_PROMPT_CACHE_KEY, AK);
	assert_int_equal(sg_gateway_build(&h, &id, &rt, &e), 0);
	assert_int_equal(h.n, 8);
	for (i = 0; i < h.n; i++)
		assert_string_equal(h.h[i].name, names[i]);
	assert_string_equal(hget(&h, "x-request-id"), "r-1");
	assert_string_equal(hget(&h, "x-model"), "m");
	assert_string_equal(hget(&h, "x-input-tokens"), "1234");
	assert_string_equal(hget(&h, "x-routing-key"), "rk");
	assert_string_equal(hget(&h, "x-cache-affinity-key"), AK);
	assert_string_equal(hget(&h, "x-routing-method"), "pulsar");
	assert_string_equal(hget(&h, "x-priority"), "5");
	assert_string_equal(hget(&h, "x-stargate-last-cluster-id"), "B");
	sg_identity_release(&id);
}

static void
test_minimal_headers(void **state)
{
	sg_gateway_route rt = { "r-1", NULL, false, 0, NULL };
	sg_gateway_headers h;
	sg_identity id;
	sg_error e;

	(void)state;
	ident(&id, NULL, "m", SG_SOURCE_NONE, NULL);
	id.input_tokens = 0;
	assert_int_equal(sg_gateway_build(&h, &id, &rt, &e), 0);
	assert_int_equal(h.n, 3);
	assert_string_equal(hget(&h, "x-input-tokens"), "0");
	/* the widest values keep every digit */
	id.input_tokens = UINT64_MAX;
	rt.has_priority = true;
	rt.priority = UINT32_MAX;
	assert_int_equal(sg_gateway_build(&h, &id, &rt, &e), 0);
	assert_string_equal(hget(&h, "x-input-tokens"),
	    "18446744073709551615");
	assert_string_equal(hget(&h, "x-priority"), "4294967295");
	sg_identity_release(&id);
}

static void
test_hint_only_for_eligible_sessions(void **state)
{
	sg_gateway_route rt = { "r-1", NULL, false, 0, "B" };
	sg_gateway_headers h;
	sg_identity id;
	sg_error e;

	(void)state;
	ident(&id, "rk", "m", SG_SOURCE_PAYLOAD, AK);
	assert_int_equal(sg_gateway_build(&h, &id, &rt, &e), 0);
	assert_null(hget(&h, "x-stargate-last-cluster-id"));
	assert_non_null(hget(&h, "x-cache-affinity-key"));
	sg_identity_release(&id);
}

/* The single answer for a hint with a control character: absent, so the
 * router classifies the session new (stargate-headers(7)), never stale. */
static void
test_control_character_hint_is_absent(void **state)
{
	static const char *const bad[] = { "A\x01", "\x01", "A\nB", "   ",
	    "\xff" };
	sg_gateway_route rt = { "r-1", NULL, false, 0, NULL };
	sg_gateway_headers h;
	sg_identity id;
	sg_request r;
	sg_error e;
	size_t i;

	(void)state;
	ident(&id, "rk", "m", SG_SOURCE_PROMPT_CACHE_KEY, AK);
	sg_request_init(&r);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		rt.last_cluster_id = bad[i];
		assert_int_equal(sg_gateway_build(&h, &id, &rt, &e), 0);
		assert_null(hget(&h, "x-stargate-last-cluster-id"));
		assert_int_equal(sg_gateway_request(&r, &h, &e), 0);
		assert_null(r.last_cluster_id);
	}
	/* And the router's own parser agrees on the raw header. */
	{
		sg_header raw[] = { { "x-request-id", "r" }, { "x-model", "m" },
		    { "x-input-tokens", "1" },
		    { "x-stargate-last-cluster-id", "A\x01" } };

		assert_int_equal(sg_request_from_header_list(&r, raw, 4, &e),
		    0);
		assert_null(r.last_cluster_id);
	}
	sg_request_release(&r);
	sg_identity_release(&id);
}

static void
test_round_trip_through_the_router_parser(void **state)
{
	sg_gateway_route rt = { "r-7", "wait-and-widen", true, 3, "B" };
	sg_gateway_headers h;
	sg_identity id;
	sg_request r;
	sg_error e;

	(void)state;
	ident(&id, "tenant", "llama", SG_SOURCE_HEADER, AK);
	assert_int_equal(sg_gateway_build(&h, &id, &rt, &e), 0);
	sg_request_init(&r);
	assert_int_equal(sg_gateway_request(&r, &h, &e), 0);
	assert_string_equal(r.request_id, "r-7");
	assert_string_equal(r.model, "llama");
	assert_string_equal(r.routing_key, "tenant");
	assert_string_equal(r.cache_affinity_key, AK);
	assert_string_equal(r.routing_method, "wait-and-widen");
	assert_string_equal(r.last_cluster_id, "B");
	assert_int_equal(r.input_tokens, 1234);
	assert_int_equal(r.priority, 3);
	sg_request_release(&r);
	sg_identity_release(&id);
}

static void
test_client_values_must_fit_a_header(void **state)
{
	sg_gateway_route rt = { "r-1", NULL, false, 0, NULL };
	sg_gateway_headers h;
	sg_identity id;
	sg_error e;

	(void)state;
	ident(&id, "rk", "m\r\nx-routing-key: other", SG_SOURCE_NONE, NULL);
	assert_int_equal(sg_gateway_build(&h, &id, &rt, &e), SG_EREQUEST);
	assert_int_equal(e.status, 400);
	assert_non_null(strstr(e.text, "model"));
	sg_identity_release(&id);
	ident(&id, "r\x01k", "m", SG_SOURCE_NONE, NULL);
	assert_int_equal(sg_gateway_build(&h, &id, &rt, &e), SG_EREQUEST);
	assert_non_null(strstr(e.text, "routing key"));
	sg_identity_release(&id);
	ident(&id, "rk", NULL, SG_SOURCE_NONE, NULL);
	assert_int_equal(sg_gateway_build(&h, &id, &rt, &e), SG_EREQUEST);
	sg_identity_release(&id);
	ident(&id, "rk", "m", SG_SOURCE_NONE, NULL);
	rt.request_id = " ";
	assert_int_equal(sg_gateway_build(&h, &id, &rt, &e), SG_EINVAL);
	rt.request_id = NULL;
	assert_int_equal(sg_gateway_build(&h, &id, &rt, &e), SG_EINVAL);
	sg_identity_release(&id);
}

static void
test_overlong_optional_values_are_not_sent(void **state)
{
	char big[SG_ID_MAX + 8];
	sg_gateway_route rt = { "r-1", NULL, false, 0, big };
	sg_gateway_headers h;
	sg_identity id;
	sg_error e;

	(void)state;
	memset(big, 'c', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	big[0] = ' ';			/* needs trimming into the buffer */
	ident(&id, "rk", "m", SG_SOURCE_PROMPT_CACHE_KEY, AK);
	assert_int_equal(sg_gateway_build(&h, &id, &rt, &e), 0);
	assert_null(hget(&h, "x-stargate-last-cluster-id"));
	sg_identity_release(&id);
}

static void
test_owned_and_stripped_headers(void **state)
{
	(void)state;
	assert_true(sg_gateway_inbound_owned("X-Stargate-Last-Cluster-Id"));
	assert_true(sg_gateway_inbound_owned("x-routing-key"));
	assert_true(sg_gateway_inbound_owned("X-Routing-Method"));
	assert_true(sg_gateway_inbound_owned("x-priority"));
	assert_true(sg_gateway_inbound_owned("x-cache-affinity-key"));
	assert_true(sg_gateway_inbound_owned("x-model"));
	assert_true(sg_gateway_inbound_owned("x-input-tokens"));
	assert_false(sg_gateway_inbound_owned("x-request-id"));
	assert_false(sg_gateway_inbound_owned("x-multi-turn-session-id"));
	assert_false(sg_gateway_inbound_owned("authorization"));
	assert_false(sg_gateway_inbound_owned(NULL));
	assert_true(sg_gateway_response_stripped("x-stargate-cluster-id"));
	assert_true(sg_gateway_response_stripped("X-Inference-Server-Url"));
	assert_false(sg_gateway_response_stripped("x-request-id"));
	assert_false(sg_gateway_response_stripped("retry-after"));
}

/* The rule as first written: a byte loop, then UTF-8 (the reference). */
static bool
decodable_ref(const char *s, size_t len)
{
	size_t i;

	for (i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if ((c < 0x20 && c != '\t') || c == 0x7f)
			return false;
	}
	return sg_utf8_valid(s, len);
}

/*
 * sg_header_value_decodable (word at a time) answers as the byte loop for
 * every length 0..40 with each kind of byte at every position: controls,
 * HTAB, DEL, 0x20, 0x7e, UTF-8 lead and continuation bytes, bad UTF-8.
 */
static void
test_decodable_matches_byte_rule(void **state)
{
	static const unsigned char odd[] = {
		0x00, 0x01, 0x09, 0x0a, 0x1f, 0x20, 0x21, 0x7e, 0x7f, 0x80,
		0xbf, 0xc3, 0xe2, 0xf0, 0xff,
	};
	char buf[48];
	size_t len, at, k, m;

	(void)state;
	for (len = 0; len <= 40; len++)
		for (at = 0; at < (len > 0 ? len : 1); at++)
			for (k = 0; k < sizeof(odd); k++) {
				for (m = 0; m < len; m++)
					buf[m] = (char)('a' + m % 26);
				if (len > 0)
					buf[at] = (char)odd[k];
				assert_int_equal(sg_header_value_decodable(buf,
				    len), decodable_ref(buf, len));
			}
	/* two-byte characters across an 8-byte boundary */
	memcpy(buf, "abcdefg\xc3\xa9hij", 12);
	assert_true(sg_header_value_decodable(buf, 12));
	assert_false(sg_header_value_decodable(buf, 8));
	memcpy(buf, "abcdefghijklmno\x7f", 16);
	assert_false(sg_header_value_decodable(buf, 16));
	assert_true(sg_header_value_decodable(buf, 15));
}

/* Owned names are matched whole and in any case, never by prefix. */
static void
test_owned_names_whole_and_any_case(void **state)
{
	(void)state;
	assert_true(sg_gateway_inbound_owned("X-MODEL"));
	assert_true(sg_gateway_inbound_owned("X-Token-Estimate"));
	assert_true(sg_gateway_inbound_owned("x-elapsed-ms"));
	assert_true(sg_gateway_inbound_owned("X-STARGATE-anything"));
	assert_false(sg_gateway_inbound_owned("x-models"));
	assert_false(sg_gateway_inbound_owned("x-mode"));
	assert_false(sg_gateway_inbound_owned("y-model"));
	assert_false(sg_gateway_inbound_owned("x_model"));
	assert_false(sg_gateway_inbound_owned("x"));
	assert_false(sg_gateway_inbound_owned(""));
	assert_false(sg_gateway_inbound_owned("x-stargate"));
	assert_true(sg_gateway_response_stripped("X-STARGATE-"));
	assert_false(sg_gateway_response_stripped("x-inference-server"));
	assert_false(sg_gateway_response_stripped(""));
	assert_false(sg_gateway_response_stripped(NULL));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_optional_string_rule),
		cmocka_unit_test(test_eligible_sources_only),
		cmocka_unit_test(test_headers_in_order),
		cmocka_unit_test(test_minimal_headers),
		cmocka_unit_test(test_hint_only_for_eligible_sessions),
		cmocka_unit_test(test_control_character_hint_is_absent),
		cmocka_unit_test(test_round_trip_through_the_router_parser),
		cmocka_unit_test(test_client_values_must_fit_a_header),
		cmocka_unit_test(test_overlong_optional_values_are_not_sent),
		cmocka_unit_test(test_owned_and_stripped_headers),
		cmocka_unit_test(test_decodable_matches_byte_rule),
		cmocka_unit_test(test_owned_names_whole_and_any_case),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
