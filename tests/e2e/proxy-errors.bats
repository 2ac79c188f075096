#!/usr/bin/env bats
# proxy-errors.bats — bad input to the router (ref §1.2, §1.5, contract):
# each refusal has its status and a JSON error body whose .code names the
# class (and the same class in x-stargate-error-code), nothing reaches an
# engine, and the daemon keeps serving: a good request afterwards succeeds.

bats_require_minimum_version 1.5.0

load proxy_helpers

setup() {
	proxy_setup
	start_engine A -c 4 -t 1 --decode-tps 1000
	clusters A
	start_proxy --max-body-bytes 4096 --max-header-bytes 8192
	reset_seen A
}

teardown() {
	proxy_teardown
}

# refused STATUS CODE: the last req was refused so, and the daemon still
# serves a good request that reaches the engine.  The refusal's body is
# kept in EBODY.
refused() {
	[ "$STATUS" = "$1" ] || { echo "expected $1 $2"; show; return 1; }
	[ "$CODE" = "$2" ] || { echo "expected code $2"; show; return 1; }
	[ "$(hdr x-stargate-error-code)" = "$2" ] || { show; return 1; }
	[[ $(hdr content-type) == application/json* ]] || { show; return 1; }
	[ "$(jq 'has("error")' <<<"$BODY")" = true ] || { show; return 1; }
	[ "$(seen_n A)" = 0 ] || { echo "the refused request reached the engine"; return 1; }
	EBODY=$BODY
	good
	reset_seen A
}

good() {
	OMIT= REQ_BODY= REQ_PATH= req
	[ "$STATUS" = 200 ] || { echo "a good request failed afterwards"; show; return 1; }
	[ "$CLUSTER" = A ]
}

@test "missing x-model is 400 invalid_request" {
	OMIT=x-model req
	refused 400 invalid_request
	[[ $(jq -r .error <<<"$EBODY") == *x-model* ]]
}

@test "missing x-input-tokens is 400 invalid_request" {
	OMIT=x-input-tokens req
	refused 400 invalid_request
	[[ $(jq -r .error <<<"$EBODY") == *x-input-tokens* ]]
}

@test "missing x-request-id is 400 invalid_request" {
	OMIT=x-request-id req
	refused 400 invalid_request
}

@test "non-numeric x-input-tokens, x-priority, x-max-wait-ms, x-request-slo-ms, x-stargate-max-wait-ms are 400 invalid_request" {
	OMIT=x-input-tokens req -H 'x-input-tokens: 12x'
	refused 400 invalid_request
	req -H 'x-priority: high'
	refused 400 invalid_request
	[[ $(jq -r .error <<<"$EBODY") == *x-priority* ]]
	req -H 'x-priority: 99999999999'	# wider than u32
	refused 400 invalid_request
	req -H 'x-max-wait-ms: -5'
	refused 400 invalid_request
	req -H 'x-request-slo-ms: 1.5'
	refused 400 invalid_request
	req -H 'x-stargate-max-wait-ms: soon'
	refused 400 invalid_request
	# the widest u32 priority is fine
	req -H 'x-priority: 4294967295'
	[ "$STATUS" = 200 ] || { show; return 1; }
}

@test "a blank or undecodable x-stargate-last-cluster-id is absent, never an error" {
	req -H 'x-stargate-last-cluster-id;' -H 'x-cache-affinity-key: k'
	[ "$STATUS" = 200 ] || { show; return 1; }
	req -H "$(printf 'x-stargate-last-cluster-id: \xff\xfe')" -H 'x-cache-affinity-key: k'
	[ "$STATUS" = 200 ] || { show; return 1; }
}

@test "an unknown x-routing-method is 400 unknown_method; parameters are 400 malformed_expression" {
	req -H 'x-routing-method: no-such-algorithm'
	refused 400 unknown_method
	req -H 'x-routing-method: pulsar;seed=x'
	refused 400 malformed_expression
}

@test "an algorithm the lb-config does not offer is 400 unavailable" {
	stop_all
	start_engine A -c 4 -t 1 --decode-tps 1000
	clusters A
	lb_simple round-robin
	start_proxy
	reset_seen A
	req -H 'x-routing-method: pulsar'
	refused 400 unavailable
}

@test "a model no cluster serves is 404 no_eligible_candidates" {
	req -H 'x-model: other-model'
	[ "$STATUS" = 404 ] || { show; return 1; }
	[ "$CODE" = no_eligible_candidates ]
	good
}

@test "a body over --max-body-bytes is 413 request_too_large" {
	local big
	big=$(jq -nc --arg c "$(head -c 6000 /dev/zero | tr '\0' x)" \
	    '{model: "dummy-model", messages: [{role: "user", content: $c}]}')
	REQ_BODY=$big req
	refused 413 request_too_large
	# the same without a content-length (chunked upload)
	REQ_BODY=$big req -H 'transfer-encoding: chunked'
	[ "$STATUS" = 413 ] || { show; return 1; }
	good
	# exactly at the limit is fine
	REQ_BODY=$(jq -nc --arg c "$(head -c 3000 /dev/zero | tr '\0' y)" \
	    '{model: "dummy-model", messages: [{role: "user", content: $c}]}') req
	[ "$STATUS" = 200 ] || { show; return 1; }
}

@test "malformed HTTP gets a 4xx and the daemon keeps serving" {
	run -0 "$PY" "$FIX/raw_http.py" "$PROXY_PORT" 3 <<<$'GARBAGE\r\n\r\n'
	echo "$output" | head -3
	[[ $output == HTTP/1.[01]\ 4[0-9][0-9]* ]]
	good
	run -0 "$PY" "$FIX/raw_http.py" "$PROXY_PORT" 3 < <(printf 'POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nthis is not a header\r\ncontent-length: 2\r\n\r\n{}')
	echo "$output" | head -3
	[[ $output == HTTP/1.[01]\ 4[0-9][0-9]* ]]
	good
	run -0 "$PY" "$FIX/raw_http.py" "$PROXY_PORT" 3 < <(printf 'POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: nope\r\n\r\n{}')
	[[ $output == HTTP/1.[01]\ 4[0-9][0-9]* ]]
	good
	# a client that sends half a request and goes away
	run -0 "$PY" "$FIX/raw_http.py" "$PROXY_PORT" 1 < <(printf 'POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{"a"')
	good
}

@test "headers over --max-header-bytes are refused with a 4xx" {
	REQ_MAX_TIME=5 req -H "x-big: $(head -c 10000 /dev/zero | tr '\0' z)"
	show | head -3
	[[ $STATUS == 4[0-9][0-9] ]]
	[ "$(seen_n A)" = 0 ]
	good
}

@test "more headers than --max-headers (100) are refused with a 4xx" {
	local h=() i
	for i in $(seq 1 150); do
		h+=(-H "x-extra-$i: v")
	done
	REQ_MAX_TIME=5 req "${h[@]}"
	show | head -3
	[[ $STATUS == 4[0-9][0-9] ]]
	[ "$(seen_n A)" = 0 ]
	good
}

@test "unknown paths are 404 and wrong methods 405, as JSON" {
	run -0 curl -sS --max-time 5 -o /dev/null -w '%{http_code}' "$PROXY_URL/v2/nothing"
	[ "$output" = 404 ]
	run -0 curl -sS --max-time 5 -o /dev/null -w '%{http_code}' "$PROXY_URL/v1/chat/completions"
	[ "$output" = 405 ]
	good
}
