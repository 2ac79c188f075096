#!/usr/bin/env bats
# gw-upstream.bats — sg-proxy --role gateway and its upstream router
# (issue 9): what the client gets when the router's reply breaks off, what
# /v1/models and /readyz say about the router, and that the all role's two
# upstream clients send an engine the same bytes.
#
# The "router" is tests/fixtures/proxy/fault_engine.py (a reply cut or
# stalled in a precise way) or tests/fixtures/gateway/fake_router.py (a
# scriptable router whose /readyz and /v1/models the test switches), or a
# real sg-proxy --role router; the engines are fault_engine.py (which
# records the hash of the last routed body) and sg-mockengine.  The
# gateway holds a unary JSON reply whole to put the public model id back
# (sg-proxy(8), "Gateway stage"), so a reply cut before its end has sent
# the client nothing: it is answered like the all role's (fault-engine.bats).

bats_require_minimum_version 1.5.0

load proxy_helpers

setup() {
	proxy_setup
}

teardown() {
	proxy_teardown
}

UT=1000		# --upstream-timeout-ms of these tests

# gw_nowait URL [sg-proxy options]: --role gateway in front of URL, waits
# for its port and /healthz only (a router without /readyz keeps it
# unready); sets GW_PID, GW_URL.
gw_nowait() {
	local url=$1 i
	shift
	rm -f "$T/proxy-gw.port"
	"$PROXY" --role gateway --listen 127.0.0.1:0 --port-file "$T/proxy-gw.port" \
	    --router-url "$url" "$@" >"$T/proxy-gw.out" 2>"$T/proxy-gw.err" 3>&- &
	GW_PID=$!
	PIDS+=("$!")
	wait_file "$T/proxy-gw.port" || { cat "$T/proxy-gw.err"; return 1; }
	GW_URL=http://127.0.0.1:$(cat "$T/proxy-gw.port")
	wait_for 50 0.1 curl -sf --max-time 2 -o /dev/null "$GW_URL/healthz"
}

# gw_requests STATUS: stargate_requests_total of the gateway with status STATUS.
gw_requests() {
	gmsum stargate_requests_total "status=\"$1\""
}

# gw_idle: nothing in flight in the gateway (bounded wait).
gw_idle() {
	local i s
	for i in $(seq 1 50); do
		s=$(curl -sS --max-time 5 "$GW_URL/debug/state")
		[ "$(jq '.inflight' <<<"$s")" = 0 ] && return 0
		sleep 0.1
	done
	echo "gateway not idle: $s"
	return 1
}

# fault_router MODE: fault_engine.py A as the gateway's router.
fault_router() {
	start_fault A --mode "$1"
	gw_nowait "$(eurl A)" --upstream-timeout-ms "$UT"
}

# --- 1. a held unary reply cut short ------------------------------------------

@test "gateway role, reply cut: a held unary reply the router cuts short (headers then EOF, Content-Length body short) is a clean 502 upstream_error JSON, counted" {
	local m n=0 b
	b=$(cbody acme/dummy-model)
	fault_router headers-eof
	for m in headers-eof short-cl; do
		ectl A /control/mode "{\"mode\": \"$m\"}" >/dev/null
		creq "$b"
		n=$((n + 1))
		echo "$m: status=$STATUS body=$BODY"
		[ "$STATUS" = 502 ]
		[ "$(jq -r .error.code <<<"$BODY")" = upstream_error ]
		[ "$(jq -r .error.type <<<"$BODY")" = api_error ]
		[[ $(hdr content-type) == application/json* ]]
		[ -n "$(hdr x-request-id)" ]
		# nothing of the cut reply's head reaches the client
		[ "$(hdr content-length)" = "$(wc -c <"$T/body")" ]
		[ "$(gw_requests 502)" = "$n" ]
		gw_idle
	done
	grep -q 'router reply cut short' "$T/proxy-gw.err"
}

@test "gateway role, reply stalled: a held unary reply that stalls past --upstream-timeout-ms is a 504 upstream_timeout JSON at the timeout, counted" {
	fault_router cl-stall
	creq "$(cbody acme/dummy-model)"
	echo "status=$STATUS ms=$MS body=$BODY"
	[ "$STATUS" = 504 ]
	[ "$(jq -r .error.code <<<"$BODY")" = upstream_timeout ]
	[[ $(hdr content-type) == application/json* ]]
	[ "$MS" -ge $((UT - 50)) ]
	[ "$MS" -lt $((UT + 3000)) ]
	[ "$(gw_requests 504)" = 1 ]
	gw_idle
	# the router's connection was closed, not left hanging
	for i in $(seq 1 50); do
		[ "$(curl -sS --max-time 5 "$(eurl A)/control/events" | jq .disconnects)" -ge 1 ] && break
		sleep 0.1
	done
	[ "$(curl -sS --max-time 5 "$(eurl A)/control/events" | jq .disconnects)" -ge 1 ]
}

@test "gateway role, reply cut: a stream the router cuts keeps its events and still ends without a well-formed end" {
	local rc=0
	fault_router sse-cut
	creq "$(cbody acme/dummy-model '{"stream": true}')" || rc=$?
	echo "status=$STATUS rc=$rc body=$BODY"
	[ "$STATUS" = 200 ]
	[ "$rc" = 18 ]
	grep -q '^data: ' <<<"$BODY"
	! grep -q '\[DONE\]' <<<"$BODY"
	gw_idle
}

# --- 2. /readyz and /v1/models follow the router ------------------------------

# ready_is CODE: the gateway's /readyz answers CODE (bounded wait, 5 s).
ready_is() {
	local i code=
	for i in $(seq 1 50); do
		code=$(curl -s --max-time 2 -o "$T/ready" -w '%{http_code}' "$GW_URL/readyz") || true
		[ "$code" = "$1" ] && return 0
		sleep 0.1
	done
	echo "/readyz is $code ($(cat "$T/ready")), want $1"
	return 1
}

# router_on PORT [options]: a real sg-proxy --role router over one cluster
# at 127.0.0.1:PORT (which need not listen yet), never ready before its
# stats are fresh; sets PROXY_URL, PROXY_PID.
router_on() {
	local port=$1
	shift
	EPORT[A]=$port
	write_clusters "$T/clusters.json" \
	    "$(cl_entry A '{"models": ["dummy-model", "zeta-model"]}')"
	PROXY_NOWAIT=1 start_proxy --ready-timeout-ms 600000 "$@"
}

@test "gateway role, /readyz: 503 while the router is not ready or unreachable, 200 once it is ready, 503 again when it goes away" {
	local port i
	port=$(free_port)
	router_on "$port"
	gw_nowait "$PROXY_URL"
	# the router answers /readyz 503 (its cluster has no stats yet)
	ready_is 503
	[ "$(cat "$T/ready")" = "router not ready" ]
	for i in 1 2 3 4 5 6 7 8 9 10; do
		[ "$(curl -s --max-time 2 -o /dev/null -w '%{http_code}' "$GW_URL/readyz")" = 503 ]
		sleep 0.1
	done
	[ "$(curl -s --max-time 2 -o /dev/null -w '%{http_code}' "$PROXY_URL/readyz")" = 503 ]
	# the engine comes up: the router, then the gateway, are ready
	"$BIN/sg-mockengine" -p "$port" --cluster-id A >"$T/eng-A.out" 2>"$T/eng-A.err" 3>&- &
	PIDS+=("$!")
	ready_is 200
	[ "$(cat "$T/ready")" = ready ]
	[ "$(curl -sS --max-time 5 "$GW_URL/debug/state" | jq .ready)" = true ]
	# the router goes away: not ready again
	kill -TERM "$PROXY_PID"
	ready_is 503
	[ "$(cat "$T/ready")" = "router not ready" ]
	[ "$(curl -sS --max-time 5 "$GW_URL/debug/state" | jq .ready)" = false ]
	grep -q 'msg="router ready"\|router ready' "$T/proxy-gw.err"
	grep -q 'router not ready' "$T/proxy-gw.err"
}

@test "gateway role, /readyz: a router that never answers keeps the gateway unready, and its poll never delays the gateway's own answers" {
	local i t0 t1
	# a listener that never accepts: connects complete, nothing answers
	"$PY" -c '
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(64)
open(sys.argv[1] + ".tmp", "w").write(str(s.getsockname()[1]))
import os; os.rename(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(120)' "$T/mute.port" 3>&- &
	PIDS+=("$!")
	wait_file "$T/mute.port"
	gw_nowait "http://127.0.0.1:$(cat "$T/mute.port")"
	# 20 rounds of /readyz and /metrics: a loop blocked by the poll (1 s
	# without a byte, again every 500 ms) would hold most of them for
	# hundreds of ms; on the loop they take a few ms each
	t0=${EPOCHREALTIME/./}
	for i in $(seq 1 20); do
		[ "$(curl -s --max-time 3 -o /dev/null -w '%{http_code}' "$GW_URL/readyz")" = 503 ]
		curl -sf --max-time 3 -o /dev/null "$GW_URL/metrics"
		sleep 0.1
	done
	t1=${EPOCHREALTIME/./}
	echo "20 rounds: $(((t1 - t0) / 1000)) ms"
	[ $((t1 - t0)) -lt 8000000 ]
	# a client that leaves while its /v1/models waits for the router,
	# and one still waiting when the gateway stops (teardown: no leak)
	! curl -s --max-time 0.3 "$GW_URL/v1/models"
	curl -s --max-time 0.2 -o /dev/null "$GW_URL/healthz"
	curl -s --max-time 10 -o /dev/null "$GW_URL/v1/models" 3>&- &
	PIDS+=("$!")
	sleep 0.3
	curl -sf --max-time 2 -o /dev/null "$GW_URL/healthz"
}

@test "gateway role, /readyz: a networked store that is down leaves the gateway ready (its lookups fail open) and says so in its gauge" {
	start_fake_router
	gw_nowait "$ROUTER_URL" --last-cluster true \
	    --last-cluster-store "redis://127.0.0.1:$(free_port)/0" \
	    --last-cluster-timeout 20ms
	ready_is 200
	[ "$(gmsum llm_api_gateway_last_cluster_store_connected)" = 0 ]
	creq "$(cbody acme/dummy-model '{"prompt_cache_key": "down"}')"
	[ "$STATUS" = 200 ]
}

# keys_file: $T/keys with key-acme (routing key acme) and key-any (none).
keys_file() {
	{
		printf '%s acme\n' "$(printf key-acme | sha256sum | cut -d' ' -f1)"
		printf '%s\n' "$(printf key-any | sha256sum | cut -d' ' -f1)"
	} >"$T/keys"
}

# models [curl options]: the ids of $GW_URL/v1/models, one line, in
# MODELS; its status in STATUS.
models() {
	STATUS=$(curl -sS --max-time 5 -o "$T/models" -w '%{http_code}' "$@" "$GW_URL/v1/models")
	MODELS=$(jq -r '[.data[].id] | join(" ")' <"$T/models" 2>/dev/null || true)
}

@test "gateway role, /v1/models: the router's models as public ids (<routing_key>/<model> for a key that binds one), usable as the model of a request" {
	local port
	port=$(free_port)
	"$BIN/sg-mockengine" -p "$port" --cluster-id A >"$T/eng-A.out" 2>"$T/eng-A.err" 3>&- &
	PIDS+=("$!")
	router_on "$port"
	keys_file
	gw_nowait "$PROXY_URL" --api-keys "$T/keys"
	ready_is 200
	models
	[ "$STATUS" = 401 ]
	[ "$(jq -r .error.code <"$T/models")" = invalid_api_key ]
	models -H 'Authorization: Bearer key-acme'
	echo "acme: $STATUS $MODELS"
	[ "$STATUS" = 200 ]
	[ "$MODELS" = "acme/dummy-model acme/zeta-model" ]
	[ "$(jq -r '.object' <"$T/models")" = list ]
	[ "$(jq -r '[.data[].object] | unique | join(",")' <"$T/models")" = model ]
	models -H 'Authorization: Bearer key-any'
	[ "$STATUS" = 200 ]
	[ "$MODELS" = "dummy-model zeta-model" ]
	# an id from the list is a model a request may name
	creq "$(cbody acme/dummy-model)" -H 'Authorization: Bearer key-acme'
	[ "$STATUS" = 200 ]
	[ "$(jq -r .model <<<"$BODY")" = acme/dummy-model ]
}

@test "gateway role, /v1/models: asked of the router per request; 502 while the router cannot be asked or answers no list" {
	local port
	port=$(free_port)
	gw_nowait "http://127.0.0.1:$port"
	models
	[ "$STATUS" = 502 ]
	[ "$(jq -r .error.code <"$T/models")" = upstream_error ]
	grep -q 'router models request failed' "$T/proxy-gw.err"
	# a router that answers: its list, asked again for each client
	start_fake_router
	gw_nowait "$ROUTER_URL"
	ready_is 200
	rreset
	models
	[ "$STATUS" = 200 ]
	[ "$MODELS" = dummy-model ]
	models
	[ "$(rreqs | jq '[.requests[] | select(.path == "/v1/models")] | length')" = 2 ]
	# a router without a model list (fault_engine.py answers 404)
	start_fault A --mode ok
	gw_nowait "$(eurl A)"
	models
	[ "$STATUS" = 502 ]
}

@test "all role, /v1/models: the cluster file's models, as public ids for a key that binds a routing key" {
	start_engine A
	write_clusters "$T/clusters.json" \
	    "$(cl_entry A '{"models": ["dummy-model", "zeta-model"]}')"
	keys_file
	start_role proxy-all all --clusters "$T/clusters.json" --api-keys "$T/keys"
	GW_URL=$ROLE_URL
	models
	[ "$STATUS" = 401 ]
	models -H 'Authorization: Bearer key-acme'
	[ "$MODELS" = "acme/dummy-model acme/zeta-model" ]
	models -H 'Authorization: Bearer key-any'
	[ "$MODELS" = "dummy-model zeta-model" ]
}

# --- 3. both upstream clients send an engine the same bytes -------------------

# sent_with CLIENT BODY: the all role with --upstream-client CLIENT in
# front of fault_engine.py A; BODY through it; SENT is the sha256 and
# length of the body A received, SENTH the header lines A saw (sorted,
# without the per-attempt traceparent and the framing's connection).
sent_with() {
	local b=$2
	PROXY_TAG=proxy-$1 start_role "proxy-$1" all --clusters "$T/clusters.json" \
	    --lb-config "$T/lb.json" --upstream-client "$1"
	GW_URL=$ROLE_URL
	creq "$b" -H 'x-request-id: same-id' -H 'x-client-thing: kept'
	[ "$STATUS" = 200 ] || { echo "$1: $STATUS $BODY"; return 1; }
	SENT=$(curl -sS --max-time 5 "$(eurl A)/control/events" |
	    jq -r '"\(.last_body_sha256) \(.last_body_len)"')
	SENTH=$(curl -sS --max-time 5 "$(eurl A)/control/last-headers" |
	    jq -r 'to_entries[] | select(.key != "traceparent" and .key != "connection" and .key != "host")
	    | "\(.key): \(.value)"' | sort)
	kill -TERM "$ROLE_PID"
}

@test "all role, upstream clients: native and curl send the engine the same rewritten body (model routed, byte for byte otherwise) and the same fields" {
	local b want native nativeh
	start_fault A --mode ok
	clusters A
	lb_simple random
	# odd spacing, a second "model" deeper down, and escapes: only the
	# top-level value changes
	b='{ "messages":[{"role":"user","content":"say \"model\": \"acme/dummy-model\""}],
	  "model" :  "acme/dummy-model", "metadata": {"model": "acme/dummy-model"}, "max_tokens": 1 }'
	want="$(printf '%s' "${b/\"model\" :  \"acme\/dummy-model\"/\"model\" :  \"dummy-model\"}" | sha256sum | cut -d' ' -f1) $(( ${#b} - 5 ))"
	sent_with native "$b"
	native=$SENT nativeh=$SENTH
	echo "want $want; native $native"
	[ "$native" = "$want" ]
	sent_with curl "$b"
	echo "curl $SENT"
	[ "$SENT" = "$want" ]
	diff <(echo "$nativeh") <(echo "$SENTH")
	grep -q '^x-client-thing: kept$' <<<"$SENTH"
	grep -q '^x-request-id: same-id$' <<<"$SENTH"
	grep -q '^content-length: ' <<<"$SENTH"
	# "model" after 5000 bytes (the rewrite copies the body instead of
	# moving its head in place): the same bytes again
	local pad
	pad=$(head -c 5000 /dev/zero | tr '\0' x)
	b="{\"user\": \"$pad\", \"model\": \"acme/dummy-model\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}"
	want="$(printf '%s' "${b/acme\/dummy-model/dummy-model}" | sha256sum | cut -d' ' -f1) $(( ${#b} - 5 ))"
	sent_with native "$b"
	[ "$SENT" = "$want" ]
	sent_with curl "$b"
	[ "$SENT" = "$want" ]
}
