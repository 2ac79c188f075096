#!/usr/bin/env bats
# proxy-trace.bats — spans and trace context (SPEC §6 "Spans", ref §5.4,
# §9): with OTEL_EXPORTER_OTLP_ENDPOINT pointing at a loopback OTLP/HTTP
# receiver (tests/fixtures/proxy/otlp_receiver.py), the router exports
# OTLP/HTTP JSON spans to <endpoint>/v1/traces, the request span carries
# routing.session_state, and the engine receives a traceparent with the
# client's trace id whose parent is the exported attempt span.

bats_require_minimum_version 1.5.0

load proxy_helpers

setup() {
	proxy_setup
}

teardown() {
	proxy_teardown
}

TRACE=4bf92f3577b34da6a3ce929d0e0e4736
PARENT=00f067aa0ba902b7

# start_otlp: the receiver; sets OTLP_URL; spans land in $T/spans.ndjson.
start_otlp() {
	"$PY" "$FIX/otlp_receiver.py" --port-file "$T/otlp.port" --out "$T/spans.ndjson" \
	    >"$T/otlp.out" 2>"$T/otlp.err" 3>&- &
	PIDS+=("$!")
	wait_file "$T/otlp.port" || { cat "$T/otlp.err"; return 1; }
	OTLP_URL=http://127.0.0.1:$(cat "$T/otlp.port")
}

# spans: every exported span, one compact JSON object per line, with its
# attributes flattened into .attrs {key: value}.
spans() {
	jq -c '.body.resourceSpans[]?.scopeSpans[]?.spans[]? |
	    . + {attrs: ([.attributes[]? | {(.key): (.value | to_entries[0].value)}] | add // {})}' \
	    "$T/spans.ndjson" 2>/dev/null
}

# wait_spans JQ: wait (8 s) until some span satisfies JQ; if none does,
# stop the proxy (a drain flushes the exporter) and look once more.
wait_spans() {
	local i
	for i in $(seq 1 80); do
		has_span "$1" && return 0
		sleep 0.1
	done
	echo "no span matching $1 within 8 s; stopping the proxy to flush"
	kill -TERM "$PROXY_PID"
	wait_for 50 0.1 sh -c "! kill -0 $PROXY_PID 2>/dev/null || grep -q '^[0-9]* ([^)]*) Z' /proc/$PROXY_PID/stat"
	has_span "$1"
}

# has_span JQ: some exported span satisfies JQ.
has_span() {
	[ "$(spans | jq -s "map(select($1)) | length > 0" 2>/dev/null)" = true ]
}

@test "spans reach the OTLP/HTTP receiver with routing.session_state; the engine gets the propagated traceparent" {
	start_otlp
	start_fault A -c 4 --mode ok
	start_fault B -c 4 --mode ok
	clusters A B
	lb_session wait-and-widen true
	OTEL_EXPORTER_OTLP_ENDPOINT=$OTLP_URL start_proxy
	req -H "x-cache-affinity-key: $AKEY" -H "traceparent: 00-$TRACE-$PARENT-01"
	[ "$STATUS" = 200 ] || { show; return 1; }
	[ "$CLUSTER" = A ]
	# What the engine got.
	run -0 curl -sS --max-time 5 "$(eurl A)/control/last-headers"
	local tp
	tp=$(jq -r '.traceparent // empty' <<<"$output")
	echo "engine traceparent: $tp"
	[[ $tp =~ ^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$ ]]
	[ "$(cut -d- -f2 <<<"$tp")" = "$TRACE" ]
	# the parent is the proxy's attempt span, not the client's span
	local attempt
	attempt=$(cut -d- -f3 <<<"$tp")
	[ "$attempt" != "$PARENT" ]
	# What the receiver got.
	wait_spans ".traceId == \"$TRACE\" and (.attrs | has(\"routing.session_state\"))" ||
	    { cat "$T/spans.ndjson"; return 1; }
	spans | jq -c "select(.traceId == \"$TRACE\") | {name, spanId, parentSpanId, attrs}"
	grep -q '"path":"/v1/traces"' "$T/spans.ndjson"
	# the request span: session state "new" (no hint), child of the client's span
	[ "$(spans | jq -r "select(.traceId == \"$TRACE\" and (.attrs | has(\"routing.session_state\"))) | .attrs[\"routing.session_state\"]" | head -1)" = new ]
	[ "$(spans | jq -r "select(.traceId == \"$TRACE\" and .name == \"proxy_openai_request\") | .parentSpanId")" = "$PARENT" ]
	# the attempt span is the one whose id the engine saw
	wait_spans ".traceId == \"$TRACE\" and .spanId == \"$attempt\""
	[ "$(spans | jq -r "select(.spanId == \"$attempt\") | .name")" = proxy_upstream_http_request ]
}

@test "a returning session's span says returning; an unclassified request still propagates a fresh trace" {
	start_otlp
	start_engine A -c 4 -t 1 --decode-tps 1000
	start_engine B -c 4 -t 1 --decode-tps 1000
	clusters A B
	lb_session wait-and-widen true
	OTEL_EXPORTER_OTLP_ENDPOINT=$OTLP_URL start_proxy
	reset_seen A B
	local t2=aaaabbbbccccddddeeeeffff00001111
	req -H "x-cache-affinity-key: $AKEY" -H 'x-stargate-last-cluster-id: B' \
	    -H "traceparent: 00-$t2-1111222233334444-01"
	[ "$STATUS" = 200 ] || { show; return 1; }
	[ "$CLUSTER" = B ]
	# no client traceparent: the engine still gets one
	req
	[ "$STATUS" = 200 ] || { show; return 1; }
	[ $(($(seen A | jq '.headers.traceparent // 0') + $(seen B | jq '.headers.traceparent // 0'))) = 2 ]
	wait_spans ".traceId == \"$t2\" and .attrs[\"routing.session_state\"] == \"returning\""
}
