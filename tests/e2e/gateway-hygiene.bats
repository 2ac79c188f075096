#!/usr/bin/env bats
# gateway-hygiene.bats — the gateway stage's edges (issue 9 §2, §4;
# proposal "Gateway"): the flag off changes nothing but the stripping of an
# inbound hint; client-supplied trusted headers never pass; the router's
# private response headers never reach the client; 503 overloaded_error
# becomes 529; the API-key allowlist.
#
# sg-proxy --role gateway forwards to the recording
# tests/fixtures/gateway/fake_router.py (answers with x-stargate-cluster-id
# B unless scripted); what the gateway sent is read back from it.

bats_require_minimum_version 1.5.0

load proxy_helpers

setup() {
	proxy_setup
	STORE=$T/store
	LCON=(--last-cluster true --last-cluster-store "$STORE")
	start_fake_router
}

teardown() {
	proxy_teardown
}

HINT=x-stargate-last-cluster-id

# outbound N: the Nth routed request's headers and body, without what
# differs per request by design (request id, trace context).
outbound() {
	rreqs | jq -eS --argjson n "$1" '.requests[$n - 1]
	    // error("no request \($n)")
	    | .headers |= del(."x-request-id", .traceparent, .tracestate)'
}

@test "flag off: outbound requests and store contents do not change, except that an inbound x-stargate-last-cluster-id is stripped" {
	local b key before i
	b=$(cbody acme/dummy-model '{"prompt_cache_key": "pck-off"}')
	key=$(lc_key "$b")
	# an entry for this very session: a gateway with the flag on would use it
	"$BIN/sg-lastcluster" -d "$STORE" put "$key" A
	before=$(lc_dump)
	GW_TAG=proxy-off start_gateway --last-cluster false --last-cluster-store "$STORE"
	creq "$b"
	[ "$STATUS" = 200 ]
	creq "$b" -H "$HINT: A"
	[ "$STATUS" = 200 ]
	creq "$b" -H "$HINT: Z"
	[ "$STATUS" = 200 ]
	# no hint ever reached the router: not the stored A, not the client's
	for i in 1 2 3; do
		rlacks "$i" "$HINT"
	done
	# every turn went out exactly as the first (nothing learnt from B)
	[ "$(outbound 1)" = "$(outbound 2)" ]
	[ "$(outbound 1)" = "$(outbound 3)" ]
	# and as a gateway with the flag on sends a session it has not seen
	"$BIN/sg-lastcluster" -d "$STORE" del "$key"
	GW_TAG=proxy-on start_gateway "${LCON[@]}"
	creq "$b"
	[ "$STATUS" = 200 ]
	[ "$(outbound 1)" = "$(outbound 4)" ]
	# the flag-off gateway wrote nothing and counted nothing
	lc_wait "$key" B	# (the flag-on one did write)
	"$BIN/sg-lastcluster" -d "$STORE" del "$key"
	[ "$(lc_dump)" = "$(grep -v "$key" <<<"$before")" ]
}

@test "flag off: the store is never opened, written or counted" {
	GW_TAG=proxy-off start_gateway --last-cluster false --last-cluster-store "$STORE"
	creq "$(cbody acme/dummy-model '{"prompt_cache_key": "pck-off2"}')"
	[ "$STATUS" = 200 ]
	sleep 0.3
	[ -z "$(lc_dump)" ]
	[ "$(gmsum llm_api_gateway_last_cluster_lookups_total)" = 0 ]
	[ "$(gmsum llm_api_gateway_last_cluster_writes_total)" = 0 ]
}

# strip_paths FLAG: an inbound hint on every path, feature on or off.
strip_paths() {
	local n=0 p
	rreset
	for p in chat chat-stream responses responses-stream completions embeddings; do
		case $p in
		chat) CPATH=/v1/chat/completions creq "$(cbody acme/dummy-model '{"prompt_cache_key": "pck-s"}')" -H "$HINT: A" ;;
		chat-stream) rscript '[{"stream": true}]'
			CPATH=/v1/chat/completions creq "$(cbody acme/dummy-model '{"prompt_cache_key": "pck-s", "stream": true}')" -H "$HINT: A" ;;
		responses) CPATH=/v1/responses creq "$(rbody acme/dummy-model '{"conversation": "c-s"}')" -H "$HINT: A" ;;
		responses-stream) rscript '[{"stream": true}]'
			CPATH=/v1/responses creq "$(rbody acme/dummy-model '{"stream": true}')" -H "$HINT: A" ;;
		completions) CPATH=/v1/completions creq '{"model": "acme/dummy-model", "prompt": "hi"}' -H "$HINT: A" ;;
		embeddings) CPATH=/v1/embeddings creq '{"model": "acme/dummy-model", "input": "hi"}' -H "$HINT: A" ;;
		esac
		n=$((n + 1))
		[ "$STATUS" = 200 ] || { echo "$p: $STATUS"; cat "$T/h"; return 1; }
		[ "$(rcount)" = "$n" ] || { echo "$p: not routed"; return 1; }
		if [ "$(rhdr -1 "$HINT")" = A ]; then
			echo "$p (flag $1): the client's hint reached the router"
			return 1
		fi
	done
}

@test "a client-supplied x-stargate-last-cluster-id never reaches the router on unary, streamed and pass-through requests, flag on or off" {
	GW_TAG=proxy-on start_gateway "${LCON[@]}"
	strip_paths on
	GW_TAG=proxy-off start_gateway --last-cluster false
	strip_paths off
}

@test "client-supplied trusted headers are removed; the router gets the gateway's own" {
	local h
	start_gateway "${LCON[@]}"
	creq "$(cbody acme/dummy-model '{"prompt_cache_key": "pck-t"}')" \
	    -H 'x-routing-key: evil' -H 'x-routing-method: random' \
	    -H 'x-priority: 0' -H 'x-cache-affinity-key: evil-key' \
	    -H 'x-model: evil-model' -H 'x-input-tokens: 999999' \
	    -H 'x-token-estimate: 999999' -H 'x-stargate-max-wait-ms: 1' \
	    -H 'x-custom-app: kept'
	[ "$STATUS" = 200 ]
	[ "$(rhdr 1 x-routing-key)" = acme ]
	[ "$(rhdr 1 x-model)" = dummy-model ]
	[[ $(rhdr 1 x-cache-affinity-key) == mt:v1:session:* ]]
	[ "$(rhdr 1 x-input-tokens)" != 999999 ]
	for h in x-routing-method x-priority x-stargate-max-wait-ms; do
		rlacks 1 "$h"
	done
	[ "$(rhdr 1 x-custom-app)" = kept ]
}

# answer_with HEADERS-JSON [stream]: the router's next answer carries these.
ROUTER_PRIVATE='{"x-stargate-retryable": "false", "x-stargate-retry-reason": "r",
    "x-stargate-retry-after-ms": "5", "x-stargate-upstream-retryable": "false",
    "x-stargate-expected-queue-ms": "7", "x-stargate-error-code": "none",
    "x-stargate-auth-token": "t", "x-stargate-additional-control": "c",
    "x-stargate-something-new": "n", "x-inference-server-id": "pod-1",
    "x-inference-server-url": "http://10.0.0.1:8000", "x-app-header": "kept",
    "retry-after": "3", "vary": "origin"}'

# no_private: the last client response had no router-private header.
no_private() {
	if tr -d '\r' <"$T/h" | grep -iE '^(x-stargate-|x-inference-server-)'; then
		echo "private headers reached the client"
		return 1
	fi
	[ "$(hdr x-app-header)" = kept ]
	[ "$(hdr retry-after)" = 3 ]
	[ -n "$(hdr x-request-id)" ]
}

@test "x-stargate-* and x-inference-server-* response headers never reach the client; x-request-id, x-multi-turn-session-id and others pass" {
	start_gateway "${LCON[@]}"
	rscript "[{\"headers\": $ROUTER_PRIVATE},
	    {\"stream\": true, \"headers\": $ROUTER_PRIVATE},
	    {\"status\": 500, \"headers\": $ROUTER_PRIVATE}]"
	creq "$(cbody acme/dummy-model '{"prompt_cache_key": "pck-h"}')" -H 'x-request-id: rid-1'
	[ "$STATUS" = 200 ]
	no_private
	[ "$(hdr x-request-id)" = rid-1 ]
	[ "$(hdr x-multi-turn-session-id)" = pck-h ]
	[ "$(rhdr 1 x-request-id)" = rid-1 ]
	creq "$(cbody acme/dummy-model '{"stream": true}')"
	[ "$STATUS" = 200 ]
	no_private
	[[ $(hdr x-multi-turn-session-id) == mt:v1:payload:* ]]
	creq "$(cbody acme/dummy-model)"
	[ "$STATUS" = 500 ]
	no_private
}

@test "an upstream 503 with x-stargate-error-code: overloaded_error becomes 529 with its body; other statuses pass" {
	local ob='{"error": {"message": "all clusters are busy", "type": "overloaded_error", "param": null, "code": "overloaded_error"}}'
	start_gateway "${LCON[@]}"
	rscript "[{\"status\": 503, \"headers\": {\"x-stargate-error-code\": \"overloaded_error\", \"retry-after\": \"1\"}, \"body\": $ob},
	    {\"status\": 503, \"body\": {\"error\": {\"message\": \"down\", \"type\": \"x\", \"code\": \"service_unavailable\"}}},
	    {\"status\": 503, \"headers\": {\"x-stargate-error-code\": \"no_capacity\"}, \"body\": $ob},
	    {\"status\": 429, \"headers\": {\"x-stargate-error-code\": \"overloaded_error\"}, \"body\": $ob}]"
	creq "$(cbody acme/dummy-model)"
	[ "$STATUS" = 529 ] || { cat "$T/h"; return 1; }
	[ "$(jq -r .error.code <<<"$BODY")" = overloaded_error ]
	[ "$(jq -r .error.message <<<"$BODY")" = "all clusters are busy" ]
	[ -z "$(hdr x-stargate-error-code)" ]
	creq "$(cbody acme/dummy-model)"
	[ "$STATUS" = 503 ]
	[ "$(jq -r .error.code <<<"$BODY")" = service_unavailable ]
	creq "$(cbody acme/dummy-model)"
	[ "$STATUS" = 503 ]
	creq "$(cbody acme/dummy-model)"
	[ "$STATUS" = 429 ]
}

@test "API keys: a missing or unknown key is 401 with an OpenAI error body; a listed key passes with its routing key and priority" {
	local good bad
	good=$(printf '%s' sk-good-1 | sha256sum | cut -d' ' -f1)
	bad=$(printf '%s' sk-other | sha256sum | cut -d' ' -f1)
	printf '# keys\n%s acme 3\n%s\n' "$good" "$bad" >"$T/keys"
	start_gateway "${LCON[@]}" --api-keys "$T/keys"
	creq "$(cbody acme/dummy-model)"
	[ "$STATUS" = 401 ]
	[ "$(jq -r .error.type <<<"$BODY")" = invalid_request_error ]
	[ "$(jq -r .error.code <<<"$BODY")" = invalid_api_key ]
	[ -n "$(jq -r .error.message <<<"$BODY")" ]
	creq "$(cbody acme/dummy-model)" -H 'authorization: Bearer sk-good-2'
	[ "$STATUS" = 401 ]
	[ "$(jq -r .error.code <<<"$BODY")" = invalid_api_key ]
	creq "$(cbody acme/dummy-model)" -H 'authorization: Basic sk-good-1'
	[ "$STATUS" = 401 ]
	[ "$(rcount)" = 0 ]
	# the key's tenant binds the routing key and the priority
	creq "$(cbody acme/dummy-model)" -H 'authorization: Bearer sk-good-1'
	[ "$STATUS" = 200 ]
	[ "$(rhdr 1 x-routing-key)" = acme ]
	[ "$(rhdr 1 x-priority)" = 3 ]
	# a key without a tenant: the model id names the routing key
	creq "$(cbody globex/dummy-model)" -H 'authorization: Bearer sk-other'
	[ "$STATUS" = 200 ]
	[ "$(rhdr 2 x-routing-key)" = globex ]
	# the key is never logged
	! grep -q 'sk-good-1\|sk-other' "$T"/proxy-gw.err
}
