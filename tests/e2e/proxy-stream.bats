#!/usr/bin/env bats
# proxy-stream.bats — streamed (SSE) responses through the router: they
# arrive incrementally and intact, a client that goes away mid-stream frees
# the engine's slot, and a client that reads slowly does not make the
# proxy buffer the stream in memory.

bats_require_minimum_version 1.5.0

load proxy_helpers

setup() {
	proxy_setup
}

teardown() {
	proxy_teardown
}

# stamp URL BODY OUT: stream a POST, writing "<microseconds> <line>" per
# received line to OUT; the response headers go to OUT.h.
stamp() {
	curl -sS -N --max-time 20 -D "$3.h" -H 'content-type: application/json' \
	    -H "x-request-id: s-$RANDOM" -H 'x-model: dummy-model' \
	    -H 'x-input-tokens: 100' --data-binary "$2" "$1" |
	    while IFS= read -r line; do
		printf '%s %s\n' "${EPOCHREALTIME/./}" "$line"
	    done >"$3"
}

@test "a 200-token SSE stream arrives incrementally and intact" {
	start_engine A -c 2 -t 200 --decode-tps 400
	clusters A
	start_proxy
	stamp "$PROXY_URL/v1/chat/completions" "$SCHAT" "$T/via"
	tr -d '\r' <"$T/via.h" | grep -qi '^content-type: text/event-stream'
	tr -d '\r' <"$T/via.h" | grep -qi '^x-stargate-cluster-id: A$'
	# Intact: every event is a data line; 200 content chunks, then [DONE].
	cut -d' ' -f2- "$T/via" | grep -v '^$' >"$T/lines"
	! grep -qv '^data: ' "$T/lines"
	[ "$(tail -1 "$T/lines")" = "data: [DONE]" ]
	grep '^data: {' "$T/lines" | sed 's/^data: //' >"$T/chunks"
	[ "$(jq -s 'map(.object == "chat.completion.chunk") | all' "$T/chunks")" = true ]
	[ "$(jq -s '[.[].choices[0].delta.content // empty | select(. != "")] | length' "$T/chunks")" = 200 ]
	# ... and the same text the engine streams directly.
	stamp "$(eurl A)/v1/chat/completions" "$SCHAT" "$T/direct"
	[ "$(jq -rs 'map(.choices[0].delta.content // "") | join("")' "$T/chunks")" = \
	  "$(cut -d' ' -f2- "$T/direct" | grep '^data: {' | sed 's/^data: //' |
	     jq -rs 'map(.choices[0].delta.content // "") | join("")')" ]
	# Incremental: the engine needs 0.5 s to decode 200 tokens at 400/s;
	# the first content event must arrive well before the last one.
	local first last
	first=$(grep -m1 '"content":"[^"]' "$T/via" | cut -d' ' -f1)
	last=$(grep 'data: \[DONE\]' "$T/via" | cut -d' ' -f1)
	echo "first content event to [DONE]: $(((last - first) / 1000)) ms"
	[ $(((last - first) / 1000)) -ge 250 ]
}

@test "a streamed text completion passes through /v1/completions" {
	start_engine A -c 2 -t 5 --decode-tps 1000
	clusters A
	start_proxy
	REQ_PATH=/v1/completions REQ_BODY='{"model":"dummy-model","prompt":"hi","stream":true}' req
	[ "$STATUS" = 200 ] || { show; return 1; }
	[ "$(grep '^data: ' <<<"$BODY" | tail -1)" = "data: [DONE]" ]
	[ "$(grep '^data: {' <<<"$BODY" | sed 's/^data: //' | jq -s 'map(.object == "text_completion") | all')" = true ]
}

@test "a client that disconnects mid-stream frees the engine slot within 1 s" {
	# 200 events 50 ms apart: a 10 s stream from the scripted engine.
	start_fault A -c 2 --mode stream --events 200 --interval-ms 50
	clusters A
	start_proxy
	run -28 curl -sS -N --max-time 1 -H 'content-type: application/json' \
	    -H 'x-request-id: d-1' -H 'x-model: dummy-model' -H 'x-input-tokens: 10' \
	    --data-binary "$SCHAT" "$PROXY_URL/v1/chat/completions"
	[[ $output == *"data: "* ]]	# it was streaming when we left
	# Poll for at most 1 s from the disconnect.
	local t0=${EPOCHREALTIME/./} i ev ms
	for i in $(seq 1 100); do
		ev=$(curl -sS --max-time 1 "$(eurl A)/control/events")
		ms=$(((${EPOCHREALTIME/./} - t0) / 1000))
		[ "$(jq .active <<<"$ev")" = 0 ] && break
		[ "$ms" -gt 1000 ] && break
		sleep 0.05
	done
	echo "after $ms ms: $ev"
	[ "$(jq .active <<<"$ev")" = 0 ]
	[ "$ms" -le 1000 ]
	[ "$(jq .disconnects <<<"$ev")" = 1 ]
	[ "$(estats A | jq .running)" = 0 ]
	# The proxy still serves.
	curl -sS --max-time 5 -H 'content-type: application/json' \
	    --data-binary '{"mode":"ok"}' "$(eurl A)/control/mode" >/dev/null
	req
	[ "$STATUS" = 200 ] || { show; return 1; }
}

@test "a client that leaves a streamed sg-mockengine answer frees the engine slot within 1 s" {
	# 1000 tokens at 20/s: a 50 s stream.
	start_engine A -c 2 -t 1000 --decode-tps 20
	clusters A
	start_proxy
	run -28 curl -sS -N --max-time 1 -H 'content-type: application/json' \
	    -H 'x-request-id: d-2' -H 'x-model: dummy-model' -H 'x-input-tokens: 10' \
	    --data-binary "$SCHAT" "$PROXY_URL/v1/chat/completions"
	[[ $output == *"data: "* ]]
	local t0=${EPOCHREALTIME/./} i st ms
	for i in $(seq 1 100); do
		st=$(estats A)
		ms=$(((${EPOCHREALTIME/./} - t0) / 1000))
		[ "$(jq .running <<<"$st")" = 0 ] && break
		[ "$ms" -gt 1000 ] && break
		sleep 0.05
	done
	echo "after $ms ms: $st"
	[ "$(jq .running <<<"$st")" = 0 ]
	[ "$ms" -le 1000 ]
}

@test "a slow reader of a long fast stream does not grow the proxy's memory without bound" {
	# 96 MiB of SSE, written as fast as the proxy takes it.
	start_fault A -c 2 --mode flood --flood-bytes $((96 << 20)) --chunk-bytes 4096
	clusters A
	start_proxy
	# Warm up (first-use allocations), then measure.
	curl -sS --max-time 5 -H 'content-type: application/json' \
	    --data-binary '{"mode":"ok"}' "$(eurl A)/control/mode" >/dev/null
	req
	[ "$STATUS" = 200 ] || { show; return 1; }
	curl -sS --max-time 5 -H 'content-type: application/json' \
	    --data-binary '{"mode":"flood"}' "$(eurl A)/control/mode" >/dev/null
	local before after sent
	before=$(rss_kb "$PROXY_PID")
	"$PY" "$FIX/slow_reader.py" "$PROXY_PORT" 4 64 'x-request-id: slow-1' \
	    'x-model: dummy-model' 'x-input-tokens: 10' >"$T/slow.out" 2>&1 3>&- &
	local rpid=$!
	PIDS+=("$rpid")
	sleep 3
	after=$(rss_kb "$PROXY_PID")
	sent=$(curl -sS --max-time 2 "$(eurl A)/control/events" | jq .sent_bytes)
	wait "$rpid" || true
	cat "$T/slow.out"
	echo "proxy RSS before ${before} KiB, during the slow read ${after} KiB; engine sent ${sent} bytes"
	head -1 "$T/slow.out" | grep -q '^HTTP/1.1 200'
	[ "$after" -lt $((before + 20 * 1024)) ]
	# Once the reader is gone the proxy lets go of the engine.
	wait_for 40 0.05 sh -c "curl -sS --max-time 2 '$(eurl A)/control/events' | jq '.active == 0' | grep -qx true"
}
