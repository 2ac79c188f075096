#!/usr/bin/env bats
# proxy-dlog.bats — the decision log (SPEC §6, bin/sg-proxy/dlog.h): a log
# captured from real traffic (every algorithm, new/returning/stale sessions,
# timed waits) replays through `sg-route --ndjson` with the same lb-config
# and --seed to exactly the logged decisions; raw affinity keys never
# appear in it; sampling 0 logs nothing; SIGHUP reopens the file.

bats_require_minimum_version 1.5.0

load proxy_helpers

setup() {
	proxy_setup
	start_engine A -c 2 -t 1 --decode-tps 1000
	start_engine B -c 2 -t 1 --decode-tps 1000
	clusters A B
	lb_session wait-and-widen true 300
}

teardown() {
	proxy_teardown
}

SECRET=very-secret-session-key-77

# stop_proxy: SIGTERM (the log is flushed at close) and wait for exit 0.
stop_proxy() {
	kill -TERM "$PROXY_PID"
	local i
	for i in $(seq 1 100); do
		alive "$PROXY_PID" || break
		sleep 0.1
	done
	local st=0
	wait "$PROXY_PID" || st=$?
	[ "$st" = 0 ]
}

@test "a decision log replays through sg-route --ndjson to identical decisions" {
	start_proxy --seed 42 --decision-log "$T/dlog.ndjson"
	local K=(-H "x-cache-affinity-key: $AKEY") a i
	req "${K[@]}"					# new, A
	req -H "x-cache-affinity-key: $SECRET"		# new, another key
	req "${K[@]}" -H 'x-stargate-last-cluster-id: Z'	# stale
	hold A 2
	settle
	req "${K[@]}"					# new, overflow to B
	release A
	settle
	req "${K[@]}" -H 'x-stargate-last-cluster-id: B'	# returning
	hold B 2
	settle
	req "${K[@]}" -H 'x-stargate-last-cluster-id: B'	# waits, then A
	[ "$CLUSTER" = A ] || { show; return 1; }
	release B
	settle
	for a in random round-robin power-of-n pulsar pulsar-wait-and-widen random round-robin power-of-n; do
		req -H "x-routing-method: $a" -H "x-cache-affinity-key: k-$a"
		[ "$STATUS" = 200 ] || { show; return 1; }
	done
	for i in 1 2 3; do
		req					# wait-and-widen, no key
	done
	stop_proxy
	[ -s "$T/dlog.ndjson" ]
	wc -l "$T/dlog.ndjson"
	# every record has the four members; the seed is recorded
	[ "$(jq -s 'map(has("snapshot") and has("request") and has("decision") and has("context")) | all' "$T/dlog.ndjson")" = true ]
	[ "$(jq -rs 'map(.context.seed) | unique | join(",")' "$T/dlog.ndjson")" = 42 ]
	# the traffic above made waits, selects and all three session states
	[ "$(jq -s 'map(.decision.decision) | unique' -c "$T/dlog.ndjson")" = '["select","wait"]' ]
	[ "$(jq -s '[.[].decision.session_state // empty] | unique' -c "$T/dlog.ndjson")" = '["new","returning","stale"]' ]
	[ "$(jq -s '[.[].decision.algorithm] | unique | length' "$T/dlog.ndjson")" = 6 ]
	# no raw key anywhere
	! grep -qF "$SECRET" "$T/dlog.ndjson"
	! grep -qF "\"$AKEY\"" "$T/dlog.ndjson"
	# Replay.
	jq -c '{snapshot, request}' "$T/dlog.ndjson" |
	    "$BIN/sg-route" --ndjson -c "$T/lb.json" --seed 42 >"$T/replay.ndjson" 2>"$T/replay.err" ||
	    { cat "$T/replay.err"; return 1; }
	jq -cS '.decision' "$T/dlog.ndjson" >"$T/logged"
	jq -cS '.' "$T/replay.ndjson" >"$T/replayed"
	diff "$T/logged" "$T/replayed"
}

@test "--decision-log-sample 0 logs no decision" {
	start_proxy --decision-log "$T/dlog.ndjson" --decision-log-sample 0
	req -H "x-cache-affinity-key: $AKEY"
	[ "$STATUS" = 200 ] || { show; return 1; }
	stop_proxy
	[ ! -s "$T/dlog.ndjson" ]
}

@test "SIGHUP reopens the decision log (rotation)" {
	start_proxy --decision-log "$T/dlog.ndjson"
	req
	[ "$STATUS" = 200 ] || { show; return 1; }
	sleep 0.5	# the periodic flush
	mv "$T/dlog.ndjson" "$T/dlog.1"
	kill -HUP "$PROXY_PID"
	sleep 0.3
	OMIT=x-request-id req -H 'x-request-id: after-rotation-2'
	[ "$STATUS" = 200 ] || { show; return 1; }
	stop_proxy
	[ -s "$T/dlog.1" ]
	[ -s "$T/dlog.ndjson" ]
	grep -q 'after-rotation-2' "$T/dlog.ndjson"
	! grep -q 'after-rotation-2' "$T/dlog.1"
}
