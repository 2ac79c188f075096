#!/usr/bin/env bats
# gateway-observe.bats — what the gateway stage tells about its store
# (proposal "Gateway"): child spans llm-api-gateway.last_cluster_lookup and
# llm-api-gateway.last_cluster_write with a result attribute and error
# status on failure; store errors logged at warn with request id, model
# and routing key, never the affinity key or the session id.
#
# sg-proxy --role gateway forwards to tests/fixtures/gateway/fake_router.py
# and exports spans to the loopback OTLP/HTTP receiver
# tests/fixtures/proxy/otlp_receiver.py.  A failing store is a redis://
# URL where nothing listens.

bats_require_minimum_version 1.5.0

load proxy_helpers

setup() {
	proxy_setup
	STORE=$T/store
	start_fake_router
	"$PY" "$FIX/otlp_receiver.py" --port-file "$T/otlp.port" --out "$T/spans.ndjson" \
	    >"$T/otlp.out" 2>"$T/otlp.err" 3>&- &
	PIDS+=("$!")
	wait_file "$T/otlp.port" || { cat "$T/otlp.err"; return 1; }
	OTLP_URL=http://127.0.0.1:$(cat "$T/otlp.port")
}

teardown() {
	proxy_teardown
}

# spans: every exported span, one compact JSON object a line, attributes
# flattened into .attrs.
spans() {
	jq -c '.body.resourceSpans[]?.scopeSpans[]?.spans[]? |
	    . + {attrs: ([.attributes[]? | {(.key): (.value | to_entries[0].value)}] | add // {})}' \
	    "$T/spans.ndjson" 2>/dev/null
}
# nspans JQ: how many exported spans satisfy JQ.
nspans() {
	spans | jq -s "map(select($1)) | length"
}
# wait_nspans N JQ: wait (10 s) until N spans satisfy JQ.
wait_nspans() {
	local i
	for i in $(seq 1 100); do
		[ "$(nspans "$2")" -ge "$1" ] && return 0
		sleep 0.1
	done
	echo "fewer than $1 spans match $2:"
	spans | jq -c '{name, attrs, status}'
	return 1
}

LOOKUP='.name == "llm-api-gateway.last_cluster_lookup"'
WRITE='.name == "llm-api-gateway.last_cluster_write"'

@test "lookup and write each create a child span with a result attribute (miss, hit, ok)" {
	local b
	OTEL_EXPORTER_OTLP_ENDPOINT=$OTLP_URL start_gateway --last-cluster true \
	    --last-cluster-store "$STORE"
	b=$(cbody acme/dummy-model '{"prompt_cache_key": "pck-span"}')
	creq "$b"
	lc_wait "$(lc_key "$b")" B
	creq "$b"
	wait_nspans 1 "$LOOKUP and .attrs.result == \"miss\""
	wait_nspans 1 "$LOOKUP and .attrs.result == \"hit\""
	wait_nspans 2 "$WRITE and .attrs.result == \"ok\""
	# children of a request span, in the request's trace, not errors
	[ "$(nspans "($LOOKUP or $WRITE) and ((.parentSpanId // \"\") == \"\")")" = 0 ]
	[ "$(nspans "($LOOKUP or $WRITE) and (.status.code // 0) == 2")" = 0 ]
	local tr
	tr=$(spans | jq -rs "map(select($LOOKUP))[0].traceId")
	[ "$(nspans ".traceId == \"$tr\" and .spanId == (\"$(spans | jq -rs "map(select($LOOKUP))[0].parentSpanId")\")")" = 1 ]
	# a payload session is not looked up: no span
	creq "$(cbody acme/dummy-model)"
	sleep 0.5
	[ "$(nspans "$LOOKUP")" = 2 ]
}

@test "a failing store: lookup and write spans say error with error status; the warn log names request id, model and routing key, never the session or its keys" {
	local b cak
	OTEL_EXPORTER_OTLP_ENDPOINT=$OTLP_URL start_gateway --last-cluster true \
	    --last-cluster-store "redis://127.0.0.1:$(free_port)/0"
	b=$(cbody acme/dummy-model '{"prompt_cache_key": "pck-secret-session"}')
	cak=$(printf '%s' "$b" | "$BIN/sg-classify" - | jq -r .cache_affinity_key)
	creq "$b" -H 'x-request-id: rid-fail-1'
	[ "$STATUS" = 200 ]
	wait_nspans 1 "$LOOKUP and .attrs.result == \"error\" and .status.code == 2"
	wait_nspans 1 "$WRITE and .attrs.result == \"error\" and .status.code == 2"
	wait_for 50 0.1 grep -q 'level=warn.*rid-fail-1' "$T/proxy-gw.err"
	grep 'level=warn' "$T/proxy-gw.err" | grep 'rid-fail-1' | grep 'dummy-model' | grep -q 'acme'
	! grep -q 'pck-secret-session' "$T/proxy-gw.err"
	! grep -q "${cak##*:}" "$T/proxy-gw.err"
	! grep -q "$(lc_key "$b" | cut -d: -f3)" "$T/proxy-gw.err"
}
