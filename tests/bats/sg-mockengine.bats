#!/usr/bin/env bats
# sg-mockengine(1): OpenAI-compatible responses (unary and SSE), the test
# controls (hold/release seen through /stats), the KV-reuse headers, /stats
# and /metrics (checked against the Prometheus text exposition grammar),
# request errors, bounded numeric inputs (400 past each bound), header and
# body read timeouts (408), system_fingerprint, options and a clean SIGTERM.  Every server runs on a free
# loopback port (port 0 + --port-file) and is killed in teardown; every wait
# is a bounded loop.

bats_require_minimum_version 1.5.0

setup() {
	BIN=${SG_BINDIR:-$BATS_TEST_DIRNAME/../../build/san/bin}
	ME=$BIN/sg-mockengine
	MAN=$BATS_TEST_DIRNAME/../../man/sg-mockengine.1
	T=$BATS_TEST_TMPDIR
	PIDS=()
}

teardown() {
	local p
	for p in "${PIDS[@]}"; do
		kill -9 "$p" 2>/dev/null || true
	done
	for p in "${PIDS[@]}"; do
		wait "$p" 2>/dev/null || true
	done
}

# start [options]: run the engine on a free port; sets PORT, URL, MPID.
start() {
	rm -f "$T/port"
	"$ME" -p 0 --port-file "$T/port" "$@" >"$T/me.out" 2>"$T/me.err" &
	MPID=$!
	PIDS+=("$MPID")
	local i
	for i in $(seq 1 100); do
		[ -s "$T/port" ] && break
		sleep 0.1
	done
	[ -s "$T/port" ] || { cat "$T/me.err"; return 1; }
	PORT=$(cat "$T/port")
	URL=http://127.0.0.1:$PORT
}

# post PATH BODY [curl args...]: POST JSON, headers to $T/h, body in $output.
post() {
	local path=$1 body=$2
	shift 2
	run -0 curl -sS --max-time 20 -D "$T/h" -H 'Content-Type: application/json' \
	    "$@" --data-binary "$body" "$URL$path"
}

# status: the HTTP status of the last post.
status_code() {
	head -1 "$T/h" | awk '{print $2}'
}

# hdr NAME: a response header of the last post.
hdr() {
	tr -d '\r' <"$T/h" | awk -v n="$(echo "$1" | tr A-Z a-z)" -F': ' \
	    'tolower($1) == n { print $2 }'
}

j() {
	jq -r "$1" <<<"$output"
}

stats() {
	curl -sS --max-time 10 "$URL/stats"
}

# wait_stats JQ-PREDICATE: poll /stats until the predicate holds (10 s).
wait_stats() {
	local i
	for i in $(seq 1 200); do
		stats | jq -e "$1" >/dev/null && return 0
		sleep 0.05
	done
	echo "timed out waiting for $1: $(stats)"
	return 1
}

CHAT='{"model":"dummy-model","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hello there"}]}'

@test "--help prints usage on stdout and exits 0" {
	run -0 --separate-stderr "$ME" --help
	[[ $output == usage:* ]]
	[ -z "$stderr" ]
}

@test "--version prints the version" {
	run -0 --separate-stderr "$ME" --version
	[ "$output" = "sg-mockengine 0.1.0" ]
}

@test "bad usage exits 64 with usage on stderr" {
	run -64 --separate-stderr "$ME" --no-such-option
	[[ $stderr == *usage:* ]]
	run -64 --separate-stderr "$ME" --port 70000
	[[ $stderr == *--port* ]]
	run -64 --separate-stderr "$ME" --decode-tps 0
	[[ $stderr == *--decode-tps* ]]
	run -64 --separate-stderr "$ME" extra-operand
}

@test "every long option of --help is in the man page" {
	run -0 "$ME" --help
	local o
	for o in $(grep -oE -- '--[a-z-]+' <<<"$output" | sort -u); do
		grep -q -- "Fl \\\\-${o#--}" "$MAN" || grep -q -- "${o#--}" "$MAN" ||
		    { echo "missing $o"; return 1; }
	done
}

@test "port 0 picks a free port, prints it first and writes the port file" {
	start
	[ "$(head -1 "$T/me.out")" = "listening on 127.0.0.1:$PORT" ]
	[ "$PORT" -gt 0 ]
}

@test "unary chat completion parses as an OpenAI chat.completion" {
	start -t 6 --decode-tps 2000
	post /v1/chat/completions "$CHAT"
	[ "$(status_code)" = 200 ]
	[[ $(hdr content-type) == application/json* ]]
	j '.object' | grep -qx chat.completion
	j '.id' | grep -q '^chatcmpl-'
	[ "$(j '.model')" = dummy-model ]
	[ "$(j '.created | type')" = number ]
	[ "$(j '.choices | length')" = 1 ]
	[ "$(j '.choices[0].index')" = 0 ]
	[ "$(j '.choices[0].message.role')" = assistant ]
	[ "$(j '.choices[0].message.content | type')" = string ]
	[ -n "$(j '.choices[0].message.content')" ]
	[ "$(j '.choices[0].finish_reason')" = stop ]
	[ "$(j '.usage.completion_tokens')" = 6 ]
	[ "$(j '.usage.total_tokens == .usage.prompt_tokens + .usage.completion_tokens')" = true ]
}

@test "unary text completion parses as an OpenAI text_completion" {
	start -t 4 --decode-tps 2000
	post /v1/completions '{"model":"dummy-model","prompt":"Once upon a time"}'
	[ "$(status_code)" = 200 ]
	[ "$(j '.object')" = text_completion ]
	j '.id' | grep -q '^cmpl-'
	[ "$(j '.choices[0].text | type')" = string ]
	[ "$(j '.choices[0].finish_reason')" = stop ]
	[ "$(j '.usage.prompt_tokens')" = 4 ]
}

@test "streamed chat completion is SSE of chat.completion.chunk ending with [DONE]" {
	start -t 5 --decode-tps 2000
	post /v1/chat/completions "$(jq -c '.stream = true' <<<"$CHAT")"
	[ "$(status_code)" = 200 ]
	[[ $(hdr content-type) == text/event-stream* ]]
	# Every event is one "data: " line followed by a blank line.
	grep -v '^$' <<<"$output" | grep -vq '^data: ' && return 1
	[ "$(grep '^data: ' <<<"$output" | tail -1)" = "data: [DONE]" ]
	grep '^data: {' <<<"$output" | sed 's/^data: //' >"$T/chunks"
	[ "$(jq -s 'map(.object == "chat.completion.chunk") | all' "$T/chunks")" = true ]
	[ "$(jq -s 'map(.id) | unique | length' "$T/chunks")" = 1 ]
	[ "$(jq -s '.[0].choices[0].delta.role' "$T/chunks")" = '"assistant"' ]
	[ "$(jq -s '[.[].choices[0].finish_reason | select(. != null)]' -c "$T/chunks")" = '["stop"]' ]
	# The streamed text equals the unary text.
	streamed=$(jq -rs 'map(.choices[0].delta.content // "") | join("")' "$T/chunks")
	post /v1/chat/completions "$CHAT"
	[ "$streamed" = "$(j '.choices[0].message.content')" ]
	[ "$(jq -s '[.[].choices[0].delta.content // empty | select(. != "")] | length' "$T/chunks")" = 5 ]
}

@test "streamed text completion chunks are text_completion objects" {
	start -t 3 --decode-tps 2000
	post /v1/completions '{"model":"dummy-model","prompt":"hi","stream":true}'
	grep '^data: {' <<<"$output" | sed 's/^data: //' >"$T/chunks"
	[ "$(jq -s 'map(.object == "text_completion") | all' "$T/chunks")" = true ]
	[ "$(jq -rs 'map(.choices[0].text) | join("")' "$T/chunks")" = "Hello from the" ]
	[ "$(grep '^data: ' <<<"$output" | tail -1)" = "data: [DONE]" ]
}

@test "stream_options.include_usage adds a usage chunk with empty choices" {
	start -t 3 --decode-tps 2000
	post /v1/chat/completions "$(jq -c '.stream = true | .stream_options = {include_usage: true}' <<<"$CHAT")"
	grep '^data: {' <<<"$output" | sed 's/^data: //' | tail -1 >"$T/last"
	[ "$(jq '.choices | length' "$T/last")" = 0 ]
	[ "$(jq '.usage.completion_tokens' "$T/last")" = 3 ]
}

@test "max_tokens below the default length cuts the answer with finish_reason length" {
	start -t 10 --decode-tps 2000
	post /v1/chat/completions "$(jq -c '.max_tokens = 2' <<<"$CHAT")"
	[ "$(j '.usage.completion_tokens')" = 2 ]
	[ "$(j '.choices[0].finish_reason')" = length ]
}

@test "GET /v1/models lists the served model; /healthz answers ok" {
	start -m my-model
	run -0 curl -sS --max-time 10 "$URL/v1/models"
	[ "$(j '.object')" = list ]
	[ "$(j '.data[0].id')" = my-model ]
	[ "$(j '.data[0].object')" = model ]
	run -0 curl -sS --max-time 10 "$URL/healthz"
	[ "$output" = ok ]
}

@test "/stats is a snapshot cluster object" {
	start -c 4 --kv-capacity 1000 --block-tokens 10 --cluster-id east-1
	run -0 stats
	[ "$(j '.id')" = east-1 ]
	[ "$(j '.max_engine_concurrency')" = 4 ]
	[ "$(j '.running')" = 0 ]
	[ "$(j '.queued')" = 0 ]
	[ "$(j '.kv_capacity_tokens')" = 1000 ]
	[ "$(j '.kv_free_tokens')" = 1000 ]
	[ "$(j '.last_mean_input_tps')" = 20000 ]
	[ "$(j '.max_input_tps')" = 20000 ]
	[ "$(j 'has("queued_input_tokens") and has("kv_used_tokens")')" = true ]
}

@test "hold makes /stats show a full cluster and release drains it" {
	start -c 2 -t 2 --decode-tps 1000
	post /control/hold '{"slots": 2}'
	[ "$(j '.held')" = 2 ]
	run -0 stats
	[ "$(j '.running')" = 2 ]
	[ "$(j '.running == .max_engine_concurrency')" = true ]
	# A request now waits in the queue.
	curl -sS --max-time 20 -H 'x-input-tokens: 300' --data-binary "$CHAT" \
	    "$URL/v1/chat/completions" >"$T/held.json" &
	PIDS+=($!)
	local cpid=$!
	wait_stats '.queued == 1 and .queued_input_tokens == 300 and .running == 3'
	post /control/release '{}'
	[ "$(j '.held')" = 0 ]
	wait "$cpid"
	[ "$(jq -r '.object' "$T/held.json")" = chat.completion ]
	wait_stats '.running == 0 and .queued == 0'
}

@test "hold rejects a body that is not {\"slots\": N}" {
	start
	post /control/hold '{"slots": -1}'
	[ "$(status_code)" = 400 ]
	post /control/hold '{"slot": 1}'
	[ "$(status_code)" = 400 ]
}

@test "a repeated session reports KV reuse in the response headers" {
	start -t 10 --decode-tps 2000
	post /v1/chat/completions "$CHAT" -H 'x-cache-affinity-key: sess-1' -H 'x-input-tokens: 1000'
	[ "$(hdr x-kv-cache-hit)" = false ]
	[ "$(hdr x-kv-cache-reused-input-tokens)" = 0 ]
	[ "$(hdr x-kv-cache-uncached-input-tokens)" = 1000 ]
	[ "$(hdr x-kv-cache-evicted-entries)" = 0 ]
	[ "$(hdr x-kv-cache-evicted-tokens)" = 0 ]
	# Turn 2: the cache holds turn 1's prompt and answer (1010 tokens).
	post /v1/chat/completions "$CHAT" -H 'x-cache-affinity-key: sess-1' -H 'x-input-tokens: 1500'
	[ "$(hdr x-kv-cache-hit)" = true ]
	[ "$(hdr x-kv-cache-reused-input-tokens)" = 1010 ]
	[ "$(hdr x-kv-cache-uncached-input-tokens)" = 490 ]
	[ "$(j '.usage.prompt_tokens_details.cached_tokens')" = 1010 ]
	# Another session misses.
	post /v1/chat/completions "$CHAT" -H 'x-cache-affinity-key: sess-2' -H 'x-input-tokens: 1500'
	[ "$(hdr x-kv-cache-hit)" = false ]
}

@test "streamed responses carry the KV headers too" {
	start -t 3 --decode-tps 2000
	post /v1/chat/completions "$CHAT" -H 'x-cache-affinity-key: s' -H 'x-input-tokens: 100'
	post /v1/chat/completions "$(jq -c '.stream = true' <<<"$CHAT")" -H 'x-cache-affinity-key: s' -H 'x-input-tokens: 200'
	[ "$(hdr x-kv-cache-hit)" = true ]
	[ "$(hdr x-kv-cache-reused-input-tokens)" = 103 ]
}

@test "without a cache key the prompt's prefix blocks are cached" {
	start -t 2 --decode-tps 2000 --block-tokens 4
	long=$(printf 'x%.0s' $(seq 1 200))
	body=$(jq -nc --arg c "$long" '{model: "dummy-model", messages: [{role: "user", content: $c}]}')
	post /v1/chat/completions "$body"
	[ "$(hdr x-kv-cache-hit)" = false ]
	post /v1/chat/completions "$body"
	[ "$(hdr x-kv-cache-hit)" = true ]
	[ "$(hdr x-kv-cache-reused-input-tokens)" -gt 0 ]
}

@test "a full cache evicts the least recently used session and says so" {
	start -t 10 --decode-tps 2000 --kv-capacity 2048 --block-tokens 16
	post /v1/chat/completions "$CHAT" -H 'x-cache-affinity-key: a' -H 'x-input-tokens: 1000'
	post /v1/chat/completions "$CHAT" -H 'x-cache-affinity-key: b' -H 'x-input-tokens: 1000'
	[ "$(hdr x-kv-cache-evicted-entries)" = 0 ]
	# a and b hold 1010 each (2020 of 2048): c evicts a.
	post /v1/chat/completions "$CHAT" -H 'x-cache-affinity-key: c' -H 'x-input-tokens: 1000'
	[ "$(hdr x-kv-cache-evicted-entries)" = 1 ]
	[ "$(hdr x-kv-cache-evicted-tokens)" = 1010 ]
	post /v1/chat/completions "$CHAT" -H 'x-cache-affinity-key: a' -H 'x-input-tokens: 1000'
	[ "$(hdr x-kv-cache-hit)" = false ]
}

# The Prometheus text exposition grammar (version 0.0.4), line by line:
# comments (HELP/TYPE with a metric name), samples "name{labels} value".
prom_check() {
	awk '
	function fail(why) { printf "line %d: %s: %s\n", NR, why, $0; bad = 1; exit 1 }
	/^$/ { next }
	/^# (HELP|TYPE) / {
		if ($3 !~ /^[a-zA-Z_:][a-zA-Z0-9_:]*$/) fail("bad metric name")
		if ($2 == "TYPE") {
			if ($4 !~ /^(counter|gauge|histogram|summary|untyped)$/ || NF != 4) fail("bad type")
			if ($3 in typed) fail("second TYPE")
			if ($3 in sampled) fail("TYPE after samples")
			typed[$3] = 1
		}
		next
	}
	/^#/ { next }
	{
		line = $0
		if (!match(line, /^[a-zA-Z_:][a-zA-Z0-9_:]*/)) fail("bad sample name")
		name = substr(line, 1, RLENGTH); line = substr(line, RLENGTH + 1)
		if (substr(line, 1, 1) == "{") {
			line = substr(line, 2)
			while (substr(line, 1, 1) != "}") {
				if (!match(line, /^[a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\\\|\\"|\\n)*"/)) fail("bad label")
				line = substr(line, RLENGTH + 1)
				if (substr(line, 1, 1) == ",") line = substr(line, 2)
				else if (substr(line, 1, 1) != "}") fail("bad label separator")
			}
			line = substr(line, 2)
		}
		if (line !~ /^ ([-+]?[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?|[-+]?\.[0-9]+([eE][-+]?[0-9]+)?|NaN|[-+]?Inf)( [-+]?[0-9]+)?$/) fail("bad value")
		sampled[name] = 1
		n++
	}
	END { if (!bad && n == 0) { print "no samples"; exit 1 } }'
}

@test "/metrics parses as Prometheus text exposition with vLLM names" {
	start -c 3 --kv-capacity 1600 --block-tokens 16 -t 2 --decode-tps 2000
	post /v1/chat/completions "$CHAT" -H 'x-cache-affinity-key: a' -H 'x-input-tokens: 398'
	run -0 curl -sS --max-time 10 -D "$T/h" "$URL/metrics"
	[[ $(hdr content-type) == text/plain* ]]
	prom_check <<<"$output"
	grep -q '^vllm:num_requests_running{engine="0",model_name="dummy-model"} 0$' <<<"$output"
	grep -q '^vllm:num_requests_waiting{' <<<"$output"
	grep -q '^vllm:kv_cache_usage_perc{.*} 0.25$' <<<"$output"
	grep -q '^vllm:gpu_cache_usage_perc{.*} 0.25$' <<<"$output"
	grep -q '^vllm:prompt_tokens_total{.*} 398$' <<<"$output"
	grep -qE '^vllm:cache_config_info\{block_size="16",.*num_gpu_blocks="100"\} 1(\.0)?$' <<<"$output"
	# counters follow the engine's totals across scrapes
	grep -q '^vllm:request_success_total{.*} 1$' <<<"$output"
	post /v1/chat/completions "$CHAT" -H 'x-output-tokens: 3'
	run -0 curl -sS --max-time 10 "$URL/metrics"
	grep -q '^vllm:request_success_total{.*} 2$' <<<"$output"
	grep -q '^vllm:generation_tokens_total{.*} 5$' <<<"$output"
	grep -q '^# TYPE vllm:prompt_tokens_total counter$' <<<"$output"
	# The grammar check can fail.
	run -1 prom_check <<<'vllm:x{a="b} 1'
	run -1 prom_check <<<'vllm:x 1 2 3'
}

@test "hold shows in /metrics as running requests" {
	start -c 3
	post /control/hold '{"slots": 2}'
	run -0 curl -sS --max-time 10 "$URL/metrics"
	grep -q '^vllm:num_requests_running{.*} 2$' <<<"$output"
}

@test "request errors: bad JSON 400, unknown model 404, no messages 400, bad header 400, GET 405" {
	start
	post /v1/chat/completions '{"model": "dummy-model", "messages": ['
	[ "$(status_code)" = 400 ]
	[ "$(j '.error.type')" = invalid_request_error ]
	[[ $(j '.error.message') == *JSON* ]]
	post /v1/completions 'not json'
	[ "$(status_code)" = 400 ]
	post /v1/chat/completions '{"model": "other", "messages": [{"role": "user", "content": "x"}]}'
	[ "$(status_code)" = 404 ]
	[ "$(j '.error.code')" = model_not_found ]
	post /v1/chat/completions '{"model": "dummy-model"}'
	[ "$(status_code)" = 400 ]
	[[ $(j '.error.message') == *messages* ]]
	post /v1/chat/completions "$CHAT" -H 'x-input-tokens: 12x'
	[ "$(status_code)" = 400 ]
	[[ $(j '.error.message') == *x-input-tokens* ]]
	run -0 curl -sS --max-time 10 -o /dev/null -w '%{http_code}' "$URL/v1/chat/completions"
	[ "$output" = 405 ]
	run -0 curl -sS --max-time 10 -o /dev/null -w '%{http_code}' "$URL/nope"
	[ "$output" = 404 ]
}

@test "a full queue answers 503 marked retryable" {
	start -c 1 --max-queue 1
	post /control/hold '{"slots": 1}'
	curl -sS --max-time 20 --data-binary "$CHAT" "$URL/v1/chat/completions" >/dev/null &
	PIDS+=($!)
	wait_stats '.queued == 1'
	post /v1/chat/completions "$CHAT"
	[ "$(status_code)" = 503 ]
	[ "$(hdr x-stargate-retryable)" = true ]
	[ "$(j '.error.type')" = overloaded_error ]
	post /control/release '{}'
}

@test "seeded jitter still answers every request" {
	start --jitter-ms 20 --seed 7 -t 2 --decode-tps 2000
	post /v1/chat/completions "$CHAT"
	[ "$(j '.object')" = chat.completion ]
	post /v1/chat/completions "$(jq -c '.stream = true' <<<"$CHAT")"
	[ "$(grep '^data: ' <<<"$output" | tail -1)" = "data: [DONE]" ]
}

@test "the step model serves requests too" {
	start --step-model --max-batched-tokens 512 -t 4
	post /v1/chat/completions "$CHAT" -H 'x-input-tokens: 2000'
	[ "$(j '.usage.completion_tokens')" = 4 ]
	run -0 stats
	[ "$(j '.max_input_tps > 0')" = true ]
}

@test "SIGTERM with requests in flight exits 0" {
	start -c 1 -t 1000 --decode-tps 10
	curl -sS --max-time 20 -N --data-binary "$(jq -c '.stream = true' <<<"$CHAT")" \
	    "$URL/v1/chat/completions" >/dev/null 2>&1 &
	PIDS+=($!)
	curl -sS --max-time 20 --data-binary "$CHAT" "$URL/v1/chat/completions" >/dev/null 2>&1 &
	PIDS+=($!)
	wait_stats '.running == 2 and .queued == 1'
	kill -TERM "$MPID"
	local st=0
	wait "$MPID" || st=$?
	[ "$st" -eq 0 ]
	[ ! -s "$T/me.err" ]
}

@test "a client that disconnects mid-stream does not disturb the engine" {
	start -c 2 -t 1000 --decode-tps 20
	run -28 curl -sS --max-time 1 -N --data-binary "$(jq -c '.stream = true' <<<"$CHAT")" \
	    "$URL/v1/chat/completions"
	post /v1/chat/completions "$CHAT" -H 'x-output-tokens: 1'
	[ "$(j '.usage.completion_tokens')" = 1 ]
	kill -TERM "$MPID"
	local st=0
	wait "$MPID" || st=$?
	[ "$st" -eq 0 ]
	[ ! -s "$T/me.err" ]
}

# wait_stats_1s JQ-PREDICATE: the predicate holds within about 1 s.
wait_stats_1s() {
	local i
	for i in $(seq 1 20); do
		stats | jq -e "$1" >/dev/null && return 0
		sleep 0.05
	done
	echo "not within 1 s: $1: $(stats)"
	return 1
}

@test "a streamed client that disconnects frees its slot" {
	start -c 2 -t 1000 --decode-tps 20
	run -28 curl -sS --max-time 1 -N --data-binary "$(jq -c '.stream = true' <<<"$CHAT")" \
	    "$URL/v1/chat/completions"
	wait_stats_1s '.running == 0 and .queued == 0'
}

@test "a unary client that disconnects frees its slot" {
	start -c 2 -t 1000 --decode-tps 20
	run -28 curl -sS --max-time 1 --data-binary "$CHAT" "$URL/v1/chat/completions"
	wait_stats_1s '.running == 0 and .queued == 0'
	# the slot serves the next request
	post /v1/chat/completions "$CHAT" -H 'x-output-tokens: 1'
	[ "$(j '.usage.completion_tokens')" = 1 ]
}

@test "a queued client that disconnects leaves the queue" {
	start -c 1
	post /control/hold '{"slots": 1}'
	run -28 curl -sS --max-time 1 --data-binary "$CHAT" "$URL/v1/chat/completions"
	wait_stats_1s '.running == 1 and .queued == 0 and .queued_input_tokens == 0'
	post /control/release '{}'
	wait_stats_1s '.running == 0'
}

@test "a client that disconnects during the jitter delay is forgotten" {
	start -c 1 --jitter-ms 5000 --seed 3
	run -28 curl -sS --max-time 0.5 --data-binary "$CHAT" "$URL/v1/chat/completions"
	sleep 0.1
	kill -TERM "$MPID"
	local st=0
	wait "$MPID" || st=$?
	[ "$st" -eq 0 ]
	[ ! -s "$T/me.err" ]
}

@test "sequential requests on one kept-alive connection are all answered" {
	start --prefill-tps 1e9 -t 2
	local urls=() i
	for i in $(seq 1 50); do
		urls+=("$URL/v1/chat/completions")
	done
	run -0 curl -sS --max-time 20 -H 'Content-Type: application/json' \
	    --data-binary "$CHAT" "${urls[@]}"
	[ "$(jq -s 'map(select(.object == "chat.completion")) | length' <<<"$output")" = 50 ]
	wait_stats_1s '.running == 0 and .queued == 0'
}

@test "seen-headers counts the header names of API requests; reset-seen zeroes them" {
	start
	run -0 curl -sS --max-time 10 "$URL/control/seen-headers"
	[ "$output" = '{"requests":0,"headers":{}}' ]
	post /v1/chat/completions "$CHAT" -H 'X-Request-Id: r1' -H 'x-output-tokens: 1'
	post /v1/chat/completions "$CHAT" -H 'x-request-id: r2' -H 'X-Trace: a' -H 'x-trace: b'
	run -0 curl -sS --max-time 10 "$URL/v1/models"
	# neither the control endpoints nor /stats count
	stats >/dev/null
	run -0 curl -sS --max-time 10 "$URL/control/seen-headers"
	[ "$(j '.requests')" = 3 ]
	[ "$(j '.headers["x-request-id"]')" = 2 ]
	[ "$(j '.headers["x-output-tokens"]')" = 1 ]
	[ "$(j '.headers["x-trace"]')" = 2 ]
	[ "$(j '.headers.host')" = 3 ]
	[ "$(j '.headers["content-type"]')" = 2 ]
	[ "$(j '.headers | has("X-Request-Id") or has("x-stargate-last-cluster-id")')" = false ]
	# rejected requests count too: they reached the engine
	post /v1/chat/completions '{"model":"nope","messages":[]}' -H 'x-stargate-last-cluster-id: B'
	run -0 curl -sS --max-time 10 "$URL/control/seen-headers"
	[ "$(j '.requests')" = 4 ]
	[ "$(j '.headers["x-stargate-last-cluster-id"]')" = 1 ]
	post /control/reset-seen ''
	[ "$(status_code)" = 200 ]
	[ "$output" = '{"requests":0,"headers":{}}' ]
	run -0 curl -sS --max-time 10 "$URL/control/seen-headers"
	[ "$output" = '{"requests":0,"headers":{}}' ]
}

@test "seen-headers wants GET and reset-seen POST" {
	start
	post /control/seen-headers '{}'
	[ "$(status_code)" = 405 ]
	run -0 curl -sS --max-time 10 -D "$T/h" "$URL/control/reset-seen"
	[ "$(status_code)" = 405 ]
}

@test "POST /v1/responses answers a Responses API object with output_text and usage" {
	start -t 4
	post /v1/responses '{"model":"dummy-model","instructions":"be brief","input":[{"role":"user","content":[{"type":"input_text","text":"hello there"}]}]}' \
	    -H 'x-input-tokens: 50'
	[ "$(status_code)" = 200 ]
	[ "$(j '.object')" = response ]
	[[ $(j '.id') == resp_* ]]
	[ "$(j '.status')" = completed ]
	[ "$(j '.output[0].type')" = message ]
	[ "$(j '.output[0].role')" = assistant ]
	[ "$(j '.output[0].content[0].type')" = output_text ]
	[ "$(j '.output[0].content[0].text')" = "Hello from the Stargate" ]
	[ "$(j '.usage.input_tokens')" = 50 ]
	[ "$(j '.usage.output_tokens')" = 4 ]
	[ "$(j '.usage.total_tokens')" = 54 ]
	[ -n "$(hdr x-kv-cache-hit)" ]
	# max_output_tokens cuts the answer: incomplete
	post /v1/responses '{"model":"dummy-model","input":"hi","max_output_tokens":2}'
	[ "$(j '.status')" = incomplete ]
	[ "$(j '.incomplete_details.reason')" = max_output_tokens ]
	[ "$(j '.usage.output_tokens')" = 2 ]
	post /v1/responses '{"model":"dummy-model","input":5}'
	[ "$(status_code)" = 400 ]
}

@test "a streamed response is named SSE events ending with response.completed" {
	start -t 3 --decode-tps 1000
	post /v1/responses '{"model":"dummy-model","input":"hello there","stream":true}'
	[[ $(hdr content-type) == text/event-stream* ]]
	[ "$(grep -c '^event: response.output_text.delta$' <<<"$output")" = 3 ]
	[ "$(grep '^event: ' <<<"$output" | head -1)" = "event: response.created" ]
	[ "$(grep '^event: ' <<<"$output" | tail -1)" = "event: response.completed" ]
	grep '^data: ' <<<"$output" | sed 's/^data: //' | jq -s -e '
	    map(.sequence_number) == [0, 1, 2, 3, 4] and
	    (map(select(.type == "response.output_text.delta") | .delta) | add) == "Hello from the" and
	    .[-1].response.output[0].content[0].text == "Hello from the"' >/dev/null
}

@test "POST /v1/embeddings answers an embeddings list (float or base64)" {
	start
	post /v1/embeddings '{"model":"dummy-model","input":["a","b","a"],"dimensions":8}'
	[ "$(status_code)" = 200 ]
	[ "$(j '.object')" = list ]
	[ "$(j '.data | length')" = 3 ]
	[ "$(j '.data[1].object')" = embedding ]
	[ "$(j '.data[1].index')" = 1 ]
	[ "$(j '.data[0].embedding | length')" = 8 ]
	# unit vectors, the same for the same input
	[ "$(j '.data[0].embedding | map(. * .) | add | . > 0.999 and . < 1.001')" = true ]
	[ "$(j '.data[0].embedding == .data[2].embedding and .data[0].embedding != .data[1].embedding')" = true ]
	[ "$(j '.usage.prompt_tokens == .usage.total_tokens')" = true ]
	post /v1/embeddings '{"model":"dummy-model","input":"hello","encoding_format":"base64"}'
	[ "$(j '.data[0].embedding' | base64 -d | wc -c)" = 64 ]
	post /v1/embeddings '{"model":"dummy-model","input":[]}'
	[ "$(status_code)" = 400 ]
	post /v1/embeddings '{"model":"dummy-model","input":"x","dimensions":0}'
	[ "$(status_code)" = 400 ]
	post /v1/embeddings '{"model":"dummy-model","input":"x","encoding_format":"int8"}'
	[ "$(status_code)" = 400 ]
	post /v1/embeddings '{"model":"other","input":"x"}'
	[ "$(status_code)" = 404 ]
}

# --- issue 12: bounded inputs, read timeouts, -h, system_fingerprint ---------

@test "-h prints usage on stdout and exits 0 (the usage advertises it)" {
	run -0 --separate-stderr "$ME" -h
	[[ $output == usage:* ]]
	[[ $output == *"-h | --help"* ]]
	[ -z "$stderr" ]
}

# Regression: x-input-tokens near 2^64 was accepted and blocked every later
# request (and the queued-token sum overflowed).
@test "bounded inputs: x-input-tokens above 1000000 (near 2^64) is 400 and later requests are served" {
	start -t 2 --decode-tps 1000
	local v
	for v in 18446744073709551615 18446744073709551616 9223372036854775808 1000001; do
		post /v1/chat/completions "$CHAT" -H "x-input-tokens: $v"
		[ "$(status_code)" = 400 ]
		[ "$(j .error.type)" = invalid_request_error ]
		[[ $(j .error.message) == "x-input-tokens: expected an integer in 0..1000000" ]]
	done
	post /v1/chat/completions "$CHAT" -H 'x-input-tokens: 100'
	[ "$(status_code)" = 200 ]
	[ "$(j .usage.prompt_tokens)" = 100 ]
	stats | jq -e '.queued == 0 and .running == 0' >/dev/null ||
	    wait_stats '.running == 0'
}

@test "bounded inputs: 1000000 input tokens is the largest accepted" {
	start -t 1 --prefill-tps 1000000000 --decode-tps 1000
	post /v1/chat/completions "$CHAT" -H 'x-input-tokens: 1000000'
	[ "$(status_code)" = 200 ]
	[ "$(j .usage.prompt_tokens)" = 1000000 ]
}

# Regression: an empty x-input-tokens was accepted.
@test "bounded inputs: an empty x-input-tokens or x-output-tokens is 400" {
	start -t 2
	post /v1/chat/completions "$CHAT" -H 'x-input-tokens;'
	[ "$(status_code)" = 400 ]
	[[ $(j .error.message) == x-input-tokens:* ]]
	post /v1/chat/completions "$CHAT" -H 'x-output-tokens;'
	[ "$(status_code)" = 400 ]
	[[ $(j .error.message) == x-output-tokens:* ]]
	post /v1/chat/completions "$CHAT" -H 'x-input-tokens: -1'
	[ "$(status_code)" = 400 ]
}

@test "bounded inputs: x-output-tokens above 1000000 is 400, 0 means not given" {
	start -t 3 --decode-tps 1000
	post /v1/chat/completions "$CHAT" -H 'x-output-tokens: 1000001'
	[ "$(status_code)" = 400 ]
	[ "$(j .error.message)" = "x-output-tokens: expected an integer in 0..1000000" ]
	post /v1/chat/completions "$CHAT" -H 'x-output-tokens: 18446744073709551615'
	[ "$(status_code)" = 400 ]
	post /v1/chat/completions "$CHAT" -H 'x-output-tokens: 0'
	[ "$(status_code)" = 200 ]
	[ "$(j .usage.completion_tokens)" = 3 ]
}

@test "bounded inputs: max_tokens, max_completion_tokens and max_output_tokens outside 1..1000000 or not integers are 400 naming the field" {
	start -t 3 --decode-tps 1000
	local f v
	for f in max_tokens max_completion_tokens; do
		for v in 0 -1 1.5 '"2"' true 1000001 4294967296; do
			post /v1/chat/completions "$(jq -c ".$f = $v" <<<"$CHAT")"
			[ "$(status_code)" = 400 ] || { echo "$f=$v: $output"; return 1; }
			[ "$(j .error.message)" = "$f: expected an integer in 1..1000000" ] ||
			    { echo "$f=$v: $output"; return 1; }
		done
	done
	post /v1/completions '{"model":"dummy-model","prompt":"x","max_tokens":0}'
	[ "$(status_code)" = 400 ]
	[ "$(j .error.message)" = "max_tokens: expected an integer in 1..1000000" ]
	post /v1/responses '{"model":"dummy-model","input":"x","max_output_tokens":1000001}'
	[ "$(status_code)" = 400 ]
	[ "$(j .error.message)" = "max_output_tokens: expected an integer in 1..1000000" ]
	# a literal jansson cannot hold is a bad body
	post /v1/chat/completions "$(jq -c '.max_tokens = 1' <<<"$CHAT" | sed 's/"max_tokens":1/"max_tokens":18446744073709551616/')"
	[ "$(status_code)" = 400 ]
	# null is absent; the limits still work
	post /v1/chat/completions "$(jq -c '.max_tokens = null | .max_completion_tokens = 2' <<<"$CHAT")"
	[ "$(status_code)" = 200 ]
	[ "$(j .usage.completion_tokens)" = 2 ]
	[ "$(j '.choices[0].finish_reason')" = length ]
}

@test "system_fingerprint is the --cluster-id in chat, completions, every SSE chunk and Responses objects" {
	start -t 2 --decode-tps 1000 --cluster-id east-2
	post /v1/chat/completions "$CHAT"
	[ "$(j .system_fingerprint)" = east-2 ]
	post /v1/completions '{"model":"dummy-model","prompt":"x"}'
	[ "$(j .system_fingerprint)" = east-2 ]
	post /v1/chat/completions "$(jq -c '.stream = true | .stream_options = {include_usage: true}' <<<"$CHAT")"
	local n
	n=$(grep '^data: {' <<<"$output" | sed 's/^data: //' | jq -s 'length')
	[ "$n" -ge 4 ]
	[ "$(grep '^data: {' <<<"$output" | sed 's/^data: //' |
	    jq -s 'map(select(.system_fingerprint == "east-2")) | length')" = "$n" ]
	post /v1/completions '{"model":"dummy-model","prompt":"x","stream":true}'
	[ "$(grep '^data: {' <<<"$output" | sed 's/^data: //' |
	    jq -s 'all(.system_fingerprint == "east-2")')" = true ]
	post /v1/responses '{"model":"dummy-model","input":"x"}'
	[ "$(j .system_fingerprint)" = east-2 ]
	post /v1/responses '{"model":"dummy-model","input":"x","stream":true}'
	[ "$(grep '^data: {' <<<"$output" | sed 's/^data: //' |
	    jq -r 'select(.type == "response.completed") | .response.system_fingerprint')" = east-2 ]
	grep -q system_fingerprint "$MAN"
}

# raw_client SCRIPT: a python client on $PORT (bounded by socket timeouts).
raw_client() {
	python3 -c "$1" "$PORT"
}

@test "read timeouts: half a header gets 408 within --header-timeout-ms, half a body within --body-timeout-ms, a silent connection is closed" {
	start --header-timeout-ms 300 --body-timeout-ms 400 -t 1 --decode-tps 1000
	local i n base
	post /v1/chat/completions "$CHAT"
	base=$(ls "/proc/$MPID/fd" | wc -l)
	run -0 raw_client '
import socket, sys
def go(data):
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
    s.settimeout(10)
    if data:
        s.sendall(data)
    got = b""
    while True:
        b = s.recv(4096)
        if not b:
            break
        got += b
    print(got.split(b"\r\n")[0].decode() or "closed")
go(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nx-input-tokens: 1")
go(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{")
go(b"")
'
	[ "${lines[0]}" = "HTTP/1.1 408 Request Timeout" ]
	[ "${lines[1]}" = "HTTP/1.1 408 Request Timeout" ]
	[ "${lines[2]}" = "HTTP/1.1 408 Request Timeout" ]
	# the engine serves on, and holds no descriptor of the cut clients
	post /v1/chat/completions "$CHAT"
	[ "$(status_code)" = 200 ]
	for i in $(seq 1 50); do
		n=$(ls "/proc/$MPID/fd" | wc -l)
		[ "$n" -le "$base" ] && break
		sleep 0.1
	done
	[ "$n" -le "$base" ] || { ls -l "/proc/$MPID/fd"; return 1; }
}

@test "read timeouts: a kept-alive connection idle longer than the header timeout still serves its next request" {
	start --header-timeout-ms 200 -t 1 --decode-tps 1000
	run -0 raw_client '
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.settimeout(10)
req = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
for i in range(2):
    s.sendall(req)
    got = b""
    while not got.endswith(b"ok\n"):
        b = s.recv(4096)
        if not b:
            break
        got += b
    print(got.split(b"\r\n")[0].decode())
    time.sleep(0.6)
'
	[ "${lines[0]}" = "HTTP/1.1 200 OK" ]
	[ "${lines[1]}" = "HTTP/1.1 200 OK" ]
}

@test "read timeouts: a request served longer than the header timeout is not cut" {
	start --header-timeout-ms 200 --body-timeout-ms 200 -t 20 --decode-tps 20
	post /v1/chat/completions "$CHAT"
	[ "$(status_code)" = 200 ]
	[ "$(j .usage.completion_tokens)" = 20 ]
}

@test "read timeouts: bad --header-timeout-ms and --body-timeout-ms exit 64" {
	run -64 --separate-stderr "$ME" --header-timeout-ms 0
	[[ $stderr == *--header-timeout-ms* ]]
	run -64 --separate-stderr "$ME" --body-timeout-ms 3600001
	[[ $stderr == *--body-timeout-ms* ]]
}
