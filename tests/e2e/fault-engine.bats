#!/usr/bin/env bats
# fault-engine.bats — engines that fail in precise ways (issue 12, "Engine
# faults"), played by tests/fixtures/proxy/fault_engine.py, in front of
# sg-proxy in the router role and in the default all role.
#
# Each fault is bounded in time by a documented limit (sg-proxy(8),
# "Limits and timeouts": --upstream-timeout-ms, here 1000 ms), counted in
# stargate_proxy_attempts_total (proxy_502 for a transport or framing
# error, proxy_504 for the idle timeout) and answered cleanly:
#   - nothing sent to the client yet: a 502 upstream_error or 504
#     upstream_timeout JSON error (stargate-headers(7));
#   - an engine that closed before any response byte: retried on another
#     cluster (connect_failover);
#   - an answer already under way: the client gets what the engine sent
#     and then a connection closed without the end of the body (short of
#     Content-Length, or no last chunk), never a well-formed end.
# The all role holds a unary JSON answer to rewrite its model id, so there
# a unary answer cut short is a clean 502 instead.  After every fault the
# proxy holds no reservation and no request, and the engine saw its
# connection closed.
#
# The faults: never answers; closes (or resets, mid-body too) before any
# byte; a connect that hangs (--connect-timeout-ms); headers then EOF; a
# Content-Length body cut short or stalled; a chunked body cut mid-chunk;
# an SSE stream closed or stalled mid-stream; a garbage status line, a
# field line without a colon, a head over 16 KiB, a head that trickles in;
# a bad chunk size; and a client that leaves while the engine hangs.  The
# libcurl upstream client (--upstream-client curl) gets a few of them.
#
# Routing: router tests route with pulsar and the affinity key s-30, which
# ranks A (the faulty engine) before B (a healthy sg-mockengine); all-role
# tests use round-robin, so that of two requests one tries A first.

bats_require_minimum_version 1.5.0

load proxy_helpers

setup() {
	proxy_setup
}

teardown() {
	proxy_teardown
}

KEY="x-cache-affinity-key: $AKEY"
UT=1000		# --upstream-timeout-ms of these tests

# router MODE [fault_engine options]: A faulty (MODE), B healthy, the
# router in front with --upstream-timeout-ms $UT.
router() {
	local mode=$1
	shift
	start_fault A --mode "$mode" --events 3 --interval-ms 10 "$@"
	start_engine B -c 4 -t 1 --decode-tps 1000
	clusters A B
	lb_simple pulsar
	start_proxy --upstream-timeout-ms "$UT"
	reset_seen A B
}

# all_role MODE: the same engines behind one --role all process (client
# model acme/dummy-model); PROXY_URL is the process's, for metrics.
all_role() {
	start_fault A --mode "$1" --events 3 --interval-ms 10
	start_engine B -c 4 -t 1 --decode-tps 1000
	clusters A B
	lb_simple round-robin
	start_role proxy-all all --clusters "$T/clusters.json" \
	    --lb-config "$T/lb.json" --upstream-timeout-ms "$UT"
	GW_URL=$ROLE_URL PROXY_URL=$ROLE_URL
	reset_seen A B
}

# fmode MODE: switch A's fault at run time.
fmode() {
	ectl A /control/mode "{\"mode\": \"$1\"}" >/dev/null
}

# events ID FIELD: a counter of fault_engine ID's /control/events.
events() {
	curl -sS --max-time 5 "$(eurl "$1")/control/events" | jq -r ".$2"
}

# engine_saw_close N: A counted N connections closed by the proxy while
# it hung on them (bounded wait).
engine_saw_close() {
	local i
	for i in $(seq 1 50); do
		[ "$(events A disconnects)" -ge "$1" ] && return 0
		sleep 0.1
	done
	echo "engine A saw $(events A disconnects) closes, want $1"
	return 1
}

# proxy_idle: no request in flight and no reservation left (bounded wait).
proxy_idle() {
	local s i
	for i in $(seq 1 50); do
		s=$(curl -sS --max-time 5 "$PROXY_URL/debug/state")
		[ "$(jq '.inflight' <<<"$s")" = 0 ] &&
		    [ "$(jq '[.clusters[].reservations] | add' <<<"$s")" = 0 ] &&
		    return 0
		sleep 0.1
	done
	echo "proxy not idle: $s"
	return 1
}

# attempts RESULT: stargate_proxy_attempts_total{result=RESULT} on A.
attempts() {
	msum stargate_proxy_attempts_total 'inference_server_id="A"' "result=\"$1\""
}

# cut_req [req options]: req, which must fail as curl 18 (the transfer
# closed short of its announced end); sets RC.
cut_req() {
	RC=0
	req "$@" || RC=$?
	[ "$RC" = 18 ] || { echo "curl exit $RC, want 18 (truncated)"; show; cat "$T/curl.err"; return 1; }
}

# --- router role ----------------------------------------------------------------

@test "router: an engine that accepts and never answers is cut at --upstream-timeout-ms: 504 upstream_timeout, counted proxy_504" {
	router hang
	req -H "$KEY"
	show
	[ "$STATUS" = 504 ]
	[ "$CODE" = upstream_timeout ]
	[ "$(hdr x-stargate-error-code)" = upstream_timeout ]
	[[ $(hdr content-type) == application/json* ]]
	# bounded by the documented timeout: not before it, not long after
	[ "$MS" -ge $((UT - 50)) ]
	[ "$MS" -lt $((UT + 3000)) ]
	[ "$(attempts proxy_504)" = 1 ]
	[ "$(msum stargate_requests_total 'status="504"')" = 1 ]
	# not retried: the engine may be working on it
	[ "$(seen_n B)" = 0 ]
	engine_saw_close 1
	proxy_idle
}

@test "router: a client that leaves while the engine hangs has the engine connection closed at once, counted 499" {
	# a 30 s upstream timeout: the close can only be the client's doing
	UT=30000 router hang
	REQ_MAX_TIME=0.3 req -H "$KEY" || true
	[ "$STATUS" = 000 ]
	engine_saw_close 1
	[ "$(msum stargate_requests_total 'status="499"' 'inference_server_id="A"')" = 1 ]
	[ "$(attempts proxy_504)" = 0 ]
	proxy_idle
}

@test "router: an engine that closes before any response byte is retried on another cluster, counted connect_failover" {
	router close
	local i
	for i in 1 2 3; do
		req -H "$KEY"
		[ "$STATUS" = 200 ] || { show; return 1; }
		[ "$CLUSTER" = B ] || { show; return 1; }
	done
	[ "$(seen_n A)" = 3 ]
	[ "$(seen_n B)" = 3 ]
	[ "$(msum stargate_proxy_retries_total 'reason="connect_failover"')" = 3 ]
	[ "$(attempts proxy_502)" = 3 ]
	proxy_idle
}

@test "router: an engine that resets the connection while a large body is being sent is retried on another cluster, which gets the whole body" {
	start_fault A --mode close-unread
	start_fault B --mode ok
	clusters A B
	lb_simple pulsar
	start_proxy --upstream-timeout-ms "$UT"
	local want
	# 4 MB: more than the socket buffers hold, so the reset meets the send
	head -c 3000000 /dev/urandom | base64 -w 76 |
	    jq -Rsc '{model: "dummy-model", messages: [{role: "user", content: .}]}' >"$T/big.json"
	STATUS=$(curl -sS --max-time 20 -o "$T/big.out" -D "$T/h" -w '%{http_code}' \
	    -H 'x-request-id: r-big' -H 'x-model: dummy-model' \
	    -H 'x-input-tokens: 100' -H "$KEY" -H 'content-type: application/json' \
	    --data-binary @"$T/big.json" "$PROXY_URL/v1/chat/completions")
	[ "$STATUS" = 200 ] || { cat "$T/h" "$T/big.out"; return 1; }
	[ "$(hdr x-stargate-cluster-id)" = B ]
	want=$(sha256sum <"$T/big.json" | cut -d' ' -f1)
	[ "$(events B last_body_sha256)" = "$want" ]
	[ "$(events A requests)" = 1 ]
	grep 'upstream attempt failed' "$T/proxy.err" | grep -q 'cluster_id=A'
	[ "$(msum stargate_proxy_retries_total 'reason="connect_failover"')" = 1 ]
	[ "$(attempts proxy_502)" = 1 ]
	proxy_idle
}

@test "router: an engine that closes before any byte with no other cluster left is 503 overloaded_error, counted no_eligible_backend" {
	start_fault A --mode close
	clusters A
	lb_simple pulsar
	start_proxy --upstream-timeout-ms "$UT"
	req
	show
	[ "$STATUS" = 503 ]
	[ "$CODE" = overloaded_error ]
	[ "$(attempts proxy_502)" = 1 ]
	[ "$(msum stargate_proxy_retry_exhausted_total 'reason="no_eligible_backend"')" = 1 ]
	proxy_idle
}

@test "router: headers then EOF: the client gets the head and a close short of Content-Length, counted proxy_502, not retried" {
	router headers-eof
	cut_req -H "$KEY"
	[ "$STATUS" = 200 ]
	[ "$(hdr content-length)" = 64 ]
	[ -z "$BODY" ]
	[ "$(attempts proxy_502)" = 1 ]
	[ "$(seen_n B)" = 0 ]
	proxy_idle
}

@test "router: a Content-Length body cut short reaches the client as sent, then the connection closes short of it" {
	router short-cl
	cut_req -H "$KEY"
	[ "$STATUS" = 200 ] || { show; return 1; }
	[ "$BODY" = '{"id":"chatcmpl-cut",' ] || { show; return 1; }
	[ "$(attempts proxy_502)" = 1 ]
	[ "$(seen_n B)" = 0 ]
	proxy_idle
}

@test "router: a Content-Length body that stalls is cut at --upstream-timeout-ms: the bytes sent, then a close short of it, counted proxy_504" {
	router cl-stall
	cut_req -H "$KEY"
	[ "$STATUS" = 200 ]
	[ "$BODY" = '{"id":"chatcmpl-cut",' ] || { show; return 1; }
	[ "$MS" -ge $((UT - 50)) ]
	[ "$MS" -lt $((UT + 3000)) ]
	[ "$(attempts proxy_504)" = 1 ]
	engine_saw_close 1
	proxy_idle
}

@test "router: a chunked body cut mid-chunk ends without the last chunk, after the bytes the engine sent" {
	router short-chunk
	cut_req -H "$KEY"
	[ "$STATUS" = 200 ]
	[ "$BODY" = '{"id":1,"object":"' ] || { show; return 1; }
	[ "$(attempts proxy_502)" = 1 ]
	proxy_idle
}

@test "router: an SSE stream the engine closes mid-stream keeps its events and ends without [DONE] or the last chunk" {
	router sse-cut
	REQ_BODY=$SCHAT cut_req -H "$KEY"
	[ "$STATUS" = 200 ]
	[ "$(grep -c '^data: {' <<<"$BODY")" = 3 ] || { show; return 1; }
	! grep -q 'DONE' <<<"$BODY"
	[ "$(attempts upstream_200)" = 1 ]
	[ "$(attempts proxy_502)" = 1 ]
	[ "$(seen_n B)" = 0 ]
	proxy_idle
}

@test "router: an SSE stream that stalls is cut at --upstream-timeout-ms: events kept, no last chunk, counted proxy_504" {
	router sse-stall
	REQ_BODY=$SCHAT cut_req -H "$KEY"
	[ "$STATUS" = 200 ]
	[ "$(grep -c '^data: {' <<<"$BODY")" = 3 ]
	[ "$MS" -ge $((UT - 50)) ]
	[ "$MS" -lt $((UT + 3000)) ]
	[ "$(attempts proxy_504)" = 1 ]
	engine_saw_close 1
	proxy_idle
}

@test "router: a malformed response head (garbage status line, a field line without a colon, over 16 KiB) is a 502 upstream_error JSON, counted proxy_502, not retried" {
	router garbage
	local m n=0
	for m in garbage bad-header huge-head; do
		fmode "$m"
		n=$((n + 1))
		req -H "$KEY"
		echo "$m: status=$STATUS code=$CODE ms=$MS"
		[ "$STATUS" = 502 ]
		[ "$CODE" = upstream_error ]
		[ "$(hdr x-stargate-error-code)" = upstream_error ]
		[[ $(hdr content-type) == application/json* ]]
		[ "$MS" -lt "$UT" ]
		[ "$(attempts proxy_502)" = "$n" ]
		# the engine connection is closed, not left to the engine
		engine_saw_close "$n"
	done
	[ "$(seen_n B)" = 0 ]
	proxy_idle
}

@test "router: a bad chunk size mid-stream keeps the events before it and ends without the last chunk, counted proxy_502" {
	router bad-chunk
	REQ_BODY=$SCHAT cut_req -H "$KEY"
	[ "$STATUS" = 200 ]
	[ "$BODY" = 'data: {"i": 0}' ] || { show; return 1; }
	[ "$MS" -lt "$UT" ]
	[ "$(attempts proxy_502)" = 1 ]
	engine_saw_close 1
	proxy_idle
}

@test "router: a response head that drips in a byte at a time is cut at --upstream-timeout-ms from the attempt's start: 504 upstream_timeout" {
	router slow-head
	req -H "$KEY"
	show
	[ "$STATUS" = 504 ]
	[ "$CODE" = upstream_timeout ]
	[ "$MS" -ge $((UT - 50)) ]
	[ "$MS" -lt $((UT + 3000)) ]
	[ "$(attempts proxy_504)" = 1 ]
	engine_saw_close 1
	proxy_idle
}

@test "router: an engine whose connect hangs is given up at --connect-timeout-ms and the request retried on another cluster" {
	# A's URL is a listener that never accepts (its queue full: the
	# kernel drops the SYNs); its stats come from the fault engine.
	start_fault A --blackhole-port-file "$T/bh.port"
	start_engine B -c 4 -t 1 --decode-tps 1000
	write_clusters "$T/clusters.json" \
	    "$(jq -nc --arg u "http://127.0.0.1:$(cat "$T/bh.port")" \
	        --arg s "$(eurl A)/stats" \
	        '{id: "A", url: $u, models: ["dummy-model"], stats: {format: "stargate", url: $s}}')" \
	    "$(cl_entry B)"
	lb_simple pulsar
	start_proxy --connect-timeout-ms 300 --upstream-timeout-ms "$UT"
	reset_seen B
	req -H "$KEY"
	show
	[ "$STATUS" = 200 ]
	[ "$CLUSTER" = B ]
	[ "$MS" -ge 250 ]
	[ "$MS" -lt "$UT" ]
	[ "$(attempts proxy_502)" = 1 ]
	[ "$(msum stargate_proxy_retries_total 'reason="connect_failover"')" = 1 ]
	proxy_idle
}

@test "router, --upstream-client curl: the same bounds and answers (never answers: 504 at the timeout; a body cut short or a bad chunk: what came, then a close)" {
	start_fault A --mode hang --events 3 --interval-ms 10
	clusters A
	lb_simple pulsar
	start_proxy --upstream-client curl --upstream-timeout-ms "$UT"
	req
	show
	[ "$STATUS" = 504 ]
	[ "$CODE" = upstream_timeout ]
	[ "$MS" -ge $((UT - 50)) ]
	[ "$MS" -lt $((UT + 3000)) ]
	engine_saw_close 1
	fmode short-cl
	cut_req
	[ "$BODY" = '{"id":"chatcmpl-cut",' ] || { show; return 1; }
	fmode bad-chunk
	REQ_BODY=$SCHAT cut_req
	[ "$BODY" = 'data: {"i": 0}' ] || { show; return 1; }
	[ "$(attempts proxy_504)" = 1 ]
	[ "$(attempts proxy_502)" = 2 ]
	proxy_idle
}

# --- all role ---------------------------------------------------------------------

# acreq [curl options]: a client request of the all role (public model id
# acme/dummy-model), streaming when STREAM is set; sets RC too.
acreq() {
	local b
	b=$(cbody acme/dummy-model "${STREAM:-{\}}")
	RC=0
	creq "$b" "$@" || RC=$?
}

@test "all: an engine that never answers is cut at --upstream-timeout-ms: 504 upstream_timeout, counted proxy_504" {
	all_role hang
	local i n=0
	# round-robin: one of the two requests tries A first
	for i in 1 2; do
		acreq
		if [ "$STATUS" = 504 ]; then
			n=$((n + 1))
			[ "$(jq -r .code <<<"$BODY")" = upstream_timeout ]
			[ "$MS" -ge $((UT - 50)) ]
			[ "$MS" -lt $((UT + 3000)) ]
		else
			[ "$STATUS" = 200 ] || { cat "$T/h"; echo "$BODY"; return 1; }
		fi
	done
	[ "$n" = 1 ]
	[ "$(attempts proxy_504)" = 1 ]
	engine_saw_close 1
	proxy_idle
}

@test "all: an engine that closes before any byte is retried on the other cluster, counted connect_failover" {
	all_role close
	local i
	for i in 1 2 3 4; do
		acreq
		[ "$STATUS" = 200 ] || { cat "$T/h"; echo "$BODY"; return 1; }
	done
	[ "$(seen_n A)" -ge 1 ]
	[ "$(seen_n B)" = 4 ]
	[ "$(msum stargate_proxy_retries_total 'reason="connect_failover"')" = "$(seen_n A)" ]
	proxy_idle
}

# all_on_a MODE: all_role MODE (or, with it running, A switched to MODE),
# then one request per cluster (round-robin); the answer that came from A
# (the engine's request count moved) is left in STATUS, BODY, RC.
all_on_a() {
	local i before a=
	if [ -z "${ROLE_PID:-}" ]; then
		all_role "$1"
	else
		fmode "$1"
	fi
	for i in 1 2; do
		before=$(seen_n A)
		acreq
		if [ "$(seen_n A)" != "$before" ]; then
			a="$STATUS|$RC|$BODY"
			cp "$T/h" "$T/h.a"
		else
			[ "$STATUS" = 200 ] || { cat "$T/h"; echo "$BODY"; return 1; }
		fi
	done
	[ -n "$a" ] || { echo "no request reached A"; return 1; }
	STATUS=${a%%|*} a=${a#*|} RC=${a%%|*} BODY=${a#*|}
	cp "$T/h.a" "$T/h"
}

@test "all: a unary JSON answer cut short (headers then EOF, Content-Length body short) is a clean 502 upstream_error, one that stalls a 504 at the timeout" {
	local m n=0
	for m in headers-eof short-cl; do
		all_on_a "$m"
		n=$((n + 1))
		echo "$m: status=$STATUS rc=$RC body=$BODY"
		[ "$STATUS" = 502 ]
		[ "$RC" = 0 ]
		[ "$(jq -r .code <<<"$BODY")" = upstream_error ]
		[[ $(hdr content-type) == application/json* ]]
		[ "$(attempts proxy_502)" = "$n" ]
		proxy_idle
	done
	all_on_a cl-stall
	echo "cl-stall: status=$STATUS rc=$RC body=$BODY"
	[ "$STATUS" = 504 ]
	[ "$(jq -r .code <<<"$BODY")" = upstream_timeout ]
	[ "$(attempts proxy_504)" = 1 ]
	engine_saw_close 1
	proxy_idle
}

@test "all: a chunked answer cut mid-chunk or by a bad chunk size ends without the last chunk, after what came" {
	all_on_a short-chunk
	echo "short-chunk: status=$STATUS rc=$RC body=$BODY"
	[ "$STATUS" = 200 ]
	[ "$RC" = 18 ]
	[ "$BODY" = '{"id":1,"object":"' ]
	[ "$(attempts proxy_502)" = 1 ]
	proxy_idle
	STREAM='{"stream": true}' all_on_a bad-chunk
	echo "bad-chunk: status=$STATUS rc=$RC body=$BODY"
	[ "$STATUS" = 200 ]
	[ "$RC" = 18 ]
	[ "$(printf '%s' "$BODY" | head -1)" = 'data: {"i": 0}' ]
	[ "$(attempts proxy_502)" = 2 ]
	proxy_idle
}

@test "all: an SSE stream closed mid-stream keeps its events and ends without [DONE] or the last chunk" {
	STREAM='{"stream": true}' all_on_a sse-cut
	[ "$STATUS" = 200 ]
	[ "$RC" = 18 ]
	[ "$(grep -c '^data: {' <<<"$BODY")" = 3 ]
	! grep -q DONE <<<"$BODY"
	[ "$(attempts proxy_502)" = 1 ]
	proxy_idle
}

@test "all: a garbage status line or a bad header line is a 502 upstream_error JSON, engine connection closed" {
	local m n=0
	for m in garbage bad-header; do
		all_on_a "$m"
		n=$((n + 1))
		echo "$m: status=$STATUS rc=$RC body=$BODY"
		[ "$STATUS" = 502 ]
		[ "$(jq -r .code <<<"$BODY")" = upstream_error ]
		[ "$(attempts proxy_502)" = "$n" ]
		engine_saw_close "$n"
		proxy_idle
	done
}
