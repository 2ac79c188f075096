#!/usr/bin/env bats
# proxy-basic.bats — the router's plain endpoints (contract): /healthz,
# /readyz, /v1/models from the cluster file, /debug/state for loopback
# peers, and routed unary requests on each OpenAI path.

bats_require_minimum_version 1.5.0

load proxy_helpers

setup() {
	proxy_setup
	# A and C serve dummy-model, B serves other-model
	start_engine A -c 4 -t 3 --decode-tps 1000
	start_engine B -c 4 -t 3 --decode-tps 1000 -m other-model
	start_engine C -c 4 -t 3 --decode-tps 1000
	write_clusters "$T/clusters.json" "$(cl_entry A)" \
	    "$(cl_entry B '{"models": ["other-model"]}')" "$(cl_entry C)"
	start_proxy
}

teardown() {
	proxy_teardown
}

@test "/healthz is 200 ok and /readyz 200 once stats are fresh" {
	run -0 curl -sS --max-time 5 "$PROXY_URL/healthz"
	[ "$output" = ok ]
	run -0 curl -sS --max-time 5 -o /dev/null -w '%{http_code}' "$PROXY_URL/readyz"
	[ "$output" = 200 ]
}

@test "/v1/models lists every model of the cluster file once" {
	run -0 curl -sS --max-time 5 "$PROXY_URL/v1/models"
	echo "$output"
	[ "$(jq -r .object <<<"$output")" = list ]
	[ "$(jq -c '[.data[].id] | sort' <<<"$output")" = '["dummy-model","other-model"]' ]
	[ "$(jq '[.data[].object == "model"] | all' <<<"$output")" = true ]
}

@test "/debug/state is JSON naming every cluster" {
	run -0 curl -sS --max-time 5 "$PROXY_URL/debug/state"
	echo "$output" | head -c 2000
	jq -e . <<<"$output" >/dev/null
	[[ $output == *'"A"'* && $output == *'"B"'* && $output == *'"C"'* ]]
}

@test "unary chat and text completions are routed to a cluster serving the model" {
	req
	[ "$STATUS" = 200 ] || { show; return 1; }
	[[ $CLUSTER == [AC] ]]
	[ "$(jq -r .object <<<"$BODY")" = chat.completion ]
	[ "$(jq .usage.completion_tokens <<<"$BODY")" = 3 ]
	REQ_PATH=/v1/completions REQ_BODY='{"model":"dummy-model","prompt":"hi"}' req
	[ "$STATUS" = 200 ] || { show; return 1; }
	[ "$(jq -r .object <<<"$BODY")" = text_completion ]
	# only B serves other-model
	local i
	for i in 1 2 3 4; do
		REQ_BODY='{"model":"other-model","messages":[{"role":"user","content":"x"}]}' \
		    req -H 'x-model: other-model'
		[ "$STATUS" = 200 ] || { show; return 1; }
		[ "$CLUSTER" = B ]
	done
}

@test "an engine's own error passes through with its status and body" {
	# the body names a model the engine does not serve: its 404
	REQ_BODY='{"model":"nope","messages":[{"role":"user","content":"x"}]}' req
	[ "$STATUS" = 404 ] || { show; return 1; }
	[ "$(jq -r .error.code <<<"$BODY")" = model_not_found ]
	[[ $CLUSTER == [AC] ]]
}

@test "keep-alive: several requests on one client connection" {
	run -0 curl -sS --max-time 10 -o /dev/null -o /dev/null -o /dev/null \
	    -w '%{http_code} %{num_connects}\n' \
	    -H 'content-type: application/json' -H 'x-request-id: ka' \
	    -H 'x-model: dummy-model' -H 'x-input-tokens: 5' --data-binary "$CHAT" \
	    "$PROXY_URL/v1/chat/completions" "$PROXY_URL/v1/chat/completions" \
	    "$PROXY_URL/v1/chat/completions"
	echo "$output"
	[ "$(grep -c '^200 ' <<<"$output")" = 3 ]
	[ "$(awk '{ s += $2 } END { print s }' <<<"$output")" = 1 ]
}

@test "every OpenAI path is routed with its path and the body passed through byte for byte" {
	stop_all
	start_fault F -c 4 --mode ok
	clusters F
	start_proxy
	local path body
	body=$(printf '{"model": "dummy-model",\n  "input": "h\u00e9llo \xe2\x9c\x93",  "x": [1, 2.50, null]}\n\n')
	for path in /v1/chat/completions /v1/completions /v1/responses /v1/embeddings; do
		REQ_PATH=$path REQ_BODY=$body req
		[ "$STATUS" = 200 ] || { show; return 1; }
		[ "$CLUSTER" = F ]
		run -0 curl -sS --max-time 5 "$(eurl F)/control/events"
		[ "$(jq -r .last_path <<<"$output")" = "$path" ]
		[ "$(jq -r .last_body_sha256 <<<"$output")" = "$(printf '%s' "$body" | sha256sum | cut -d' ' -f1)" ]
	done
	# a query string is kept too
	REQ_PATH='/v1/chat/completions?api-version=2' REQ_BODY=$body req
	[ "$STATUS" = 200 ] || { show; return 1; }
	run -0 curl -sS --max-time 5 "$(eurl F)/control/events"
	[ "$(jq -r .last_path <<<"$output")" = '/v1/chat/completions?api-version=2' ]
}

# seq_of URL: the clusters 10 requests with fixed ids get from URL's random.
seq_of() {
	local i out=
	for i in $(seq 1 10); do
		PROXY_URL=$1 OMIT=x-request-id req -H "x-request-id: det-$i" -H 'x-routing-method: random'
		[ "$STATUS" = 200 ] || { show >&2; return 1; }
		out+=$CLUSTER
	done
	echo "$out"
}

@test "two routers with the same seed choose alike for the same requests; another seed differs" {
	PROXY_TAG=proxy1 start_proxy --seed 7
	local u1=$PROXY_URL
	PROXY_TAG=proxy2 start_proxy --seed 7
	local u2=$PROXY_URL
	PROXY_TAG=proxy3 start_proxy --seed 8
	local u3=$PROXY_URL
	local s1 s2 s3
	s1=$(seq_of "$u1")
	s2=$(seq_of "$u2")
	s3=$(seq_of "$u3")
	echo "seed 7: $s1, seed 7: $s2, seed 8: $s3"
	[ "$s1" = "$s2" ]
	[ "$s1" != "$s3" ]
	[[ $s1 == *A* && $s1 == *C* ]]
}
