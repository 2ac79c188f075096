#!/usr/bin/env bats
# proxy-signals.bats — SIGHUP reloads the cluster file under load without
# failing a request (a bad file keeps the old one); SIGTERM drains: a long
# request in flight when TERM arrives completes with 200 and the process
# exits 0; --workers N shares one port and one metrics registry.

bats_require_minimum_version 1.5.0

load proxy_helpers

setup() {
	proxy_setup
}

teardown() {
	proxy_teardown
}

# load_loop N OUT: N sequential requests; one "<status> <cluster>" line each.
load_loop() {
	local i
	for i in $(seq 1 "$1"); do
		curl -sS --max-time 10 -o /dev/null -D "$2.h$i" \
		    -w '%{http_code}' -H 'content-type: application/json' \
		    -H "x-request-id: load-$2-$i" -H 'x-model: dummy-model' \
		    -H 'x-input-tokens: 10' --data-binary "$CHAT" \
		    "$PROXY_URL/v1/chat/completions" 2>/dev/null || true
		printf ' %s\n' "$(tr -d '\r' <"$2.h$i" | awk -F': ' 'tolower($1) == "x-stargate-cluster-id" { print $2 }')"
		rm -f "$2.h$i"
	done >"$2"
}

# exited PID [TENTHS]: wait (10 s) for PID to exit, reap it, and set
# EXIT_ST to its exit status (not in a subshell: only the parent can reap).
exited() {
	local i
	EXIT_ST=running
	for i in $(seq 1 "${2:-100}"); do
		alive "$1" || break
		sleep 0.1
	done
	alive "$1" && return 1
	EXIT_ST=0
	wait "$1" || EXIT_ST=$?
}

@test "SIGHUP reloads the cluster file under load and no request fails" {
	start_engine A -c 8 -t 1 --decode-tps 1000
	start_engine B -c 8 -t 1 --decode-tps 1000
	start_engine C -c 8 -t 1 --decode-tps 1000
	clusters A B
	lb_simple round-robin
	start_proxy
	load_loop 100 "$T/load1" 3>&- &
	local l1=$!
	PIDS+=("$l1")
	load_loop 100 "$T/load2" 3>&- &
	local l2=$!
	PIDS+=("$l2")
	sleep 0.5
	# add C
	clusters A B C
	kill -HUP "$PROXY_PID"
	sleep 0.7
	# remove A
	clusters B C
	kill -HUP "$PROXY_PID"
	sleep 0.7
	# a bad file in between: ignored
	echo '{"clusters": [{"id": "A"}]}' >"$T/clusters.json"
	kill -HUP "$PROXY_PID"
	sleep 0.3
	clusters A B C
	kill -HUP "$PROXY_PID"
	local i
	for i in $(seq 1 300); do
		alive "$l1" || alive "$l2" || break
		sleep 0.1
	done
	! alive "$l1" && ! alive "$l2"
	cat "$T/load1" "$T/load2" | sort | uniq -c
	[ "$(cat "$T/load1" "$T/load2" | wc -l)" = 200 ]
	# no request failed
	[ -z "$(cat "$T/load1" "$T/load2" | grep -v '^200 [ABC]$')" ]
	# the reload took effect: C served
	grep -q '^200 C$' "$T/load1" "$T/load2"
	# the bad file was reported and survived
	grep -qiE 'error|level=err' "$T/proxy.err"
	# after the last reload all three serve
	local got=
	for i in $(seq 1 6); do
		req
		[ "$STATUS" = 200 ] || { show; return 1; }
		got+=$CLUSTER
	done
	[[ $got == *A* && $got == *B* && $got == *C* ]]
}

@test "SIGHUP with a bad cluster file keeps the old one" {
	start_engine A -c 4 -t 1 --decode-tps 1000
	clusters A
	start_proxy
	echo 'not json' >"$T/clusters.json"
	kill -HUP "$PROXY_PID"
	sleep 0.5
	alive "$PROXY_PID"
	req
	[ "$STATUS" = 200 ] || { show; return 1; }
	[ "$CLUSTER" = A ]
	grep -qi 'clusters.json' "$T/proxy.err"
}

@test "SIGTERM drains: requests in flight complete with 200 and the proxy exits 0" {
	# 40 tokens at 20/s: each answer takes 2 s.
	start_engine A -c 4 -t 40 --decode-tps 20
	clusters A
	start_proxy
	curl -sS --max-time 20 -o "$T/unary.json" -w '%{http_code}' \
	    -H 'content-type: application/json' -H 'x-request-id: long-1' \
	    -H 'x-model: dummy-model' -H 'x-input-tokens: 10' \
	    --data-binary "$CHAT" "$PROXY_URL/v1/chat/completions" >"$T/unary.code" 2>&1 3>&- &
	local c1=$!
	PIDS+=("$c1")
	curl -sS -N --max-time 20 -o "$T/stream.txt" -w '%{http_code}' \
	    -H 'content-type: application/json' -H 'x-request-id: long-2' \
	    -H 'x-model: dummy-model' -H 'x-input-tokens: 10' \
	    --data-binary "$SCHAT" "$PROXY_URL/v1/chat/completions" >"$T/stream.code" 2>&1 3>&- &
	local c2=$!
	PIDS+=("$c2")
	wait_for 100 0.05 sh -c "curl -sS --max-time 2 '$(eurl A)/stats' | jq '.running == 2' | grep -qx true"
	local t0=${EPOCHREALTIME/./}
	kill -TERM "$PROXY_PID"
	# while draining: /readyz 503 or the listener closed; never a new 200
	sleep 0.2
	local code
	code=$(curl -s --max-time 2 -o /dev/null -w '%{http_code}' "$PROXY_URL/readyz" || true)
	echo "readyz while draining: $code"
	[ "$code" != 200 ]
	exited "$PROXY_PID" 150 || true
	echo "proxy exit status $EXIT_ST after $(((${EPOCHREALTIME/./} - t0) / 1000)) ms"
	[ "$EXIT_ST" = 0 ]
	wait "$c1" || true
	wait "$c2" || true
	[ "$(cat "$T/unary.code")" = 200 ]
	[ "$(jq .usage.completion_tokens "$T/unary.json")" = 40 ]
	[ "$(cat "$T/stream.code")" = 200 ]
	[ "$(grep '^data: ' "$T/stream.txt" | tail -1)" = "data: [DONE]" ]
	[ "$(grep '^data: {' "$T/stream.txt" | sed 's/^data: //' |
	    jq -s '[.[].choices[0].delta.content // empty | select(. != "")] | length')" = 40 ]
}

@test "--workers 2 serves on one port, aggregates metrics, and drains on SIGTERM" {
	start_engine A -c 8 -t 1 --decode-tps 1000
	clusters A
	start_proxy --workers 2 --pid-file "$T/pid"
	[ "$(cat "$T/pid")" = "$PROXY_PID" ]
	[ "$(pgrep -P "$PROXY_PID" | wc -l)" -ge 2 ]
	local i
	for i in $(seq 1 12); do
		req
		[ "$STATUS" = 200 ] || { show; return 1; }
	done
	# whichever worker answers /metrics counts every request
	for i in 1 2 3 4; do
		[ "$(msum stargate_requests_total 'status="200"')" = 12 ]
	done
	kill -TERM "$PROXY_PID"
	exited "$PROXY_PID" 100 || true
	[ "$EXIT_ST" = 0 ]
	[ -z "$(pgrep -P "$PROXY_PID")" ]
}

@test "a worker that dies is started again by the master" {
	start_engine A -c 8 -t 1 --decode-tps 1000
	clusters A
	start_proxy --workers 2
	local w
	w=$(pgrep -P "$PROXY_PID" | head -1)
	[ -n "$w" ]
	kill -KILL "$w"
	wait_for 50 0.1 sh -c "[ \$(pgrep -P $PROXY_PID | grep -vx $w | wc -l) -ge 2 ]"
	local i
	for i in $(seq 1 4); do
		req
		[ "$STATUS" = 200 ] || { show; return 1; }
	done
}

@test "after a reload removes a session's last cluster, the session is stale and served elsewhere" {
	start_engine A -c 4 -t 1 --decode-tps 1000
	start_engine B -c 4 -t 1 --decode-tps 1000
	clusters A B
	lb_session wait-and-widen true 300
	start_proxy
	req -H "x-cache-affinity-key: $AKEY" -H 'x-stargate-last-cluster-id: B'
	[ "$CLUSTER" = B ] || { show; return 1; }
	clusters A
	kill -HUP "$PROXY_PID"
	sleep 0.5
	req -H "x-cache-affinity-key: $AKEY" -H 'x-stargate-last-cluster-id: B'
	[ "$STATUS" = 200 ] || { show; return 1; }
	[ "$CLUSTER" = A ]
	# stale: no affinity wait either
	[ "$MS" -lt 250 ]
	METRICS=$(metrics)
	local m=stargate_routing_session_selections_total
	[ "$(msum $m 'session_state="returning"' 'selection="primary"')" = 1 ]
	[ "$(msum $m 'session_state="stale"' 'selection="primary"')" = 1 ]
}
