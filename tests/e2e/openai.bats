#!/usr/bin/env bats
# openai.bats — the official `openai` npm client (version 6, pinned in
# tools/demo/openai/package-lock.json, installed into the build directory by
# tools/demo/openai/install.sh) against sg-proxy --role all (feature on,
# LMDB store) in front of two sg-mockengine clusters: unary and streamed
# chat completions, the Responses API, multi-turn sessions keyed by
# prompt_cache_key whose later turns reuse KV-cache tokens, and API errors
# as the client reports them.  The client speaks plain OpenAI: the public
# model id acme/dummy-model and nothing Stargate-specific.
#
# tools/demo/openai/sg-openai.mjs runs the client: one JSON command a line
# in, one JSON result a line out (see its header).

bats_require_minimum_version 1.5.0

load proxy_helpers

setup_file() {
	local top o
	top=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)
	o=${SG_BINDIR:-$top/build/san/bin}
	"$top/tools/demo/openai/install.sh" "${o%/bin}/openai" >&3 2>&3
}

setup() {
	proxy_setup
	OAI=${BIN%/bin}/openai
	STORE=$T/store
	[ -f "$OAI/node_modules/openai/package.json" ]
	start_engine A -c 4 -t 6 --decode-tps 2000
	start_engine B -c 4 -t 6 --decode-tps 2000
	clusters A B
	lb_session wait-and-widen true 300
}

teardown() {
	proxy_teardown
}

# stack [sg-proxy options]: --role all over A and B; sets GW_URL.
stack() {
	start_role proxy-all all --clusters "$T/clusters.json" \
	    --lb-config "$T/lb.json" --last-cluster true \
	    --last-cluster-store "$STORE" "$@"
	GW_URL=$ROLE_URL
}

# client [--api-key K]: run the commands on stdin through the openai client;
# the results are in $T/results (one a line) and in RES (a JSON array).
client() {
	node "$TOP/tools/demo/openai/sg-openai.mjs" --modules "$OAI" \
	    --base-url "$GW_URL/v1" "$@" >"$T/results" 2>"$T/client.err" || {
		cat "$T/client.err"
		return 1
	}
	RES=$(jq -s . "$T/results")
	cat "$T/results"
}
# res N FILTER: jq FILTER over the Nth result (1-based).
res() {
	jq -r --argjson n "$1" ".[\$n - 1] | $2" <<<"$RES"
}

@test "openai client: a unary chat completion through sg-proxy is a well-formed chat.completion" {
	stack
	client <<-'EOF'
	{"op": "chat", "model": "acme/dummy-model", "messages": [{"role": "user", "content": "Say hello"}]}
	EOF
	[ "$(res 1 .ok)" = true ]
	[ "$(res 1 .status)" = 200 ]
	[ "$(res 1 .object)" = chat.completion ]
	[[ $(res 1 .id) == chatcmpl-* ]]
	[ "$(res 1 .role)" = assistant ]
	[ -n "$(res 1 .text)" ]
	[ "$(res 1 .finish_reason)" = stop ]
	[ "$(res 1 .usage.completion_tokens)" = 6 ]
	[ "$(res 1 .usage.prompt_tokens)" -ge 1 ]
	# the client sees the public model id, and the proxy's request id
	[ "$(res 1 .model)" = acme/dummy-model ] || [ "$(res 1 .model)" = dummy-model ]
	[ -n "$(res 1 .request_id)" ]
	[ "$(( $(seen_n A) + $(seen_n B) ))" = 1 ]
	# the engine that served it names itself (system_fingerprint)
	[ "$(seen_n "$(res 1 .fingerprint)")" = 1 ]
}

@test "openai client: a streamed chat completion arrives chunk by chunk with its usage" {
	stack
	client <<-'EOF'
	{"op": "chat", "model": "acme/dummy-model", "stream": true, "messages": [{"role": "user", "content": "Say hello"}]}
	EOF
	[ "$(res 1 .ok)" = true ]
	[ "$(res 1 .object)" = chat.completion.chunk ]
	[ "$(res 1 .chunks)" -ge 7 ]		# role, 6 tokens, finish (+ usage)
	[ -n "$(res 1 .text)" ]
	[ "$(res 1 .finish_reason)" = stop ]
	[ "$(res 1 .usage.completion_tokens)" = 6 ]
	[[ $(res 1 .fingerprint) == [AB] ]]
}

@test "openai client: Responses API calls, unary and streamed, are well-formed response objects" {
	stack
	client <<-'EOF'
	{"op": "responses", "model": "acme/dummy-model", "input": "Say hello"}
	{"op": "responses", "model": "acme/dummy-model", "input": [{"role": "user", "content": "Say hello"}], "stream": true}
	{"op": "responses", "model": "acme/dummy-model", "input": "Say hello", "max_output_tokens": 2}
	EOF
	[ "$(res 1 .ok)" = true ]
	[ "$(res 1 .object)" = response ]
	[[ $(res 1 .id) == resp_* ]]
	[ "$(res 1 .finish_reason)" = completed ]
	[ -n "$(res 1 .text)" ]
	[ "$(res 1 .usage.completion_tokens)" = 6 ]
	[ "$(res 2 .ok)" = true ]
	[ "$(res 2 .finish_reason)" = completed ]
	[ "$(res 2 .chunks)" -ge 8 ]		# created, 6 deltas, completed
	[ "$(res 2 .streamed_text)" = "$(res 2 .text)" ]
	[[ $(res 1 .fingerprint) == [AB] ]]
	[[ $(res 2 .fingerprint) == [AB] ]]
	[ "$(res 3 .finish_reason)" = incomplete ]
	[ "$(res 3 .usage.completion_tokens)" = 2 ]
}

@test "openai client: multi-turn sessions keyed by prompt_cache_key stay on one cluster and their later turns reuse KV tokens" {
	local s t long
	stack
	long=$(printf 'Tell me about caches. %.0s' $(seq 1 60))
	{
		for t in 1 2 3 4; do
			for s in chat-a chat-b; do
				jq -nc --arg s "$s" --arg c "$t: $long" \
				    '{op: "turn", session: $s, content: $c, model: "acme/dummy-model"}'
			done
			jq -nc --arg c "$t: $long" --argjson st "$([ "$t" = 3 ] && echo true || echo false)" \
			    '{op: "turn", session: "resp-c", api: "responses", stream: $st, content: $c, model: "acme/dummy-model"}'
		done
	} | client
	[ "$(jq -s 'map(select(.ok)) | length' "$T/results")" = 12 ]
	for s in chat-a chat-b resp-c; do
		# the proxy names the session in every answer
		[ "$(jq -rs --arg s "$s" '[.[] | select(.session == $s)] | length' "$T/results")" = 4 ]
		# the first turn found nothing cached; every later turn reused
		# at least the previous turn's prompt
		jq -es --arg s "$s" '
		    [.[] | select(.session == $s)] as $r
		    | $r[0].usage.cached_tokens == 0
		      and all(range(1; 4); $r[.].usage.cached_tokens >= $r[. - 1].usage.prompt_tokens)
		      and all(range(1; 4); $r[.].usage.cached_tokens < $r[.].usage.prompt_tokens)' \
		    "$T/results" || { jq -c --arg s "$s" 'select(.session == $s) | .usage' "$T/results"; return 1; }
		# all four turns on one engine, as the engines name themselves
		[ "$(jq -rs --arg s "$s" '[.[] | select(.session == $s) | .fingerprint] | unique | map(select(. == "A" or . == "B")) | length' "$T/results")" = 1 ]
	done
	# each session's turns went to one cluster: its last cluster is stored
	for s in chat-a chat-b; do
		[ -n "$(lc_get "$(lc_key "$(cbody acme/dummy-model "{\"prompt_cache_key\": \"$s\"}")")")" ]
	done
	[ "$(( $(seen_n A) + $(seen_n B) ))" = 12 ]
}

@test "openai client: proxy errors arrive as OpenAI errors (401 invalid_api_key, 400 for a model of another routing key)" {
	local h
	h=$(printf '%s' sk-test-good | sha256sum | cut -d' ' -f1)
	printf '%s acme\n' "$h" >"$T/keys"
	stack --api-keys "$T/keys"
	client --api-key sk-test-wrong <<-'EOF'
	{"op": "chat", "model": "acme/dummy-model", "messages": [{"role": "user", "content": "hi"}]}
	{"op": "chat", "model": "acme/dummy-model", "stream": true, "messages": [{"role": "user", "content": "hi"}]}
	EOF
	[ "$(res 1 .ok)" = false ]
	[ "$(res 1 .status)" = 401 ]
	[ "$(res 1 .code)" = invalid_api_key ]
	[ "$(res 2 .status)" = 401 ]
	client --api-key sk-test-good <<-'EOF'
	{"op": "chat", "model": "acme/dummy-model", "messages": [{"role": "user", "content": "hi"}]}
	{"op": "chat", "model": "globex/dummy-model", "messages": [{"role": "user", "content": "hi"}]}
	{"op": "models"}
	EOF
	[ "$(res 1 .ok)" = true ]
	[ "$(res 1 .status)" = 200 ]
	[ "$(res 2 .ok)" = false ]
	[ "$(res 2 .status)" = 400 ]
	[ "$(res 3 .ok)" = true ]
	[ "$(res 3 '.ids | length')" -ge 1 ]
}
