#!/usr/bin/env bats
# proxy-wait.bats — timed routing waits in the router: a returning session
# whose last cluster is full holds for it during the affinity wait X and is
# served there when a slot frees; x-max-wait-ms shorter than X ends the
# wait with 503 overloaded_error at about that time (ref §6.1, §6.2).
#
# wait-and-widen, k = 1, X = 1000 ms, flag on; key s-30 ranks A first, the
# hint names B, so the session is returning and B is promoted.

bats_require_minimum_version 1.5.0

load proxy_helpers

setup() {
	proxy_setup
	start_engine A -c 2 -t 1 --decode-tps 1000
	start_engine B -c 2 -t 1 --decode-tps 1000
	clusters A B
	lb_session wait-and-widen true 1000
	start_proxy
}

teardown() {
	proxy_teardown
}

HINT=(-H "x-cache-affinity-key: $AKEY" -H 'x-stargate-last-cluster-id: B')

@test "a returning session waits for its full last cluster and is served there when a slot frees" {
	hold B 2
	settle
	reset_seen A B
	( sleep 0.2; release B ) >/dev/null 2>&1 3>&- &
	PIDS+=("$!")
	req "${HINT[@]}"
	show
	[ "$STATUS" = 200 ]
	[ "$CLUSTER" = B ]
	# it waited for the release, and did not widen to A
	[ "$MS" -ge 150 ]
	[ "$(seen_n A)" = 0 ]
	[ "$(seen_n B)" = 1 ]
}

@test "x-max-wait-ms shorter than the affinity wait ends it with 503 overloaded_error" {
	hold B 2
	settle
	reset_seen A B
	req "${HINT[@]}" -H 'x-max-wait-ms: 300'
	show
	[ "$STATUS" = 503 ]
	[ "$CODE" = overloaded_error ]
	[ "$(jq -r '.error.code' <<<"$BODY")" = overloaded_error ]
	[ "$(jq -r '.error.type' <<<"$BODY")" = overloaded_error ]
	[ "$(hdr x-stargate-error-code)" = overloaded_error ]
	[[ $(hdr content-type) == application/json* ]]
	# about x-max-wait-ms: at least most of it (no tight upper bound)
	[ "$MS" -ge 250 ]
	# while it waited, nothing went to A
	[ "$(seen_n A)" = 0 ]
	[ "$(seen_n B)" = 0 ]
	# B drains: the same session is served there again
	release B
	settle
	req "${HINT[@]}"
	[ "$STATUS" = 200 ] || { show; return 1; }
	[ "$CLUSTER" = B ]
}

@test "a new session is not held: A full, it goes to B at once even with X = 1000 ms" {
	hold A 2
	settle
	req -H "x-cache-affinity-key: $AKEY"
	show
	[ "$STATUS" = 200 ]
	[ "$CLUSTER" = B ]
	[ "$MS" -lt 500 ]
}

@test "a client that leaves during a routing wait is not forwarded afterwards" {
	hold B 2
	settle
	reset_seen A B
	# the client gives up after 0.3 s of the 1 s affinity wait
	REQ_MAX_TIME=0.3 req "${HINT[@]}" || true
	[ "$STATUS" = 000 ]
	sleep 0.2
	release B
	# well past X: the abandoned request went nowhere
	sleep 1.2
	[ "$(seen_n A)" = 0 ]
	[ "$(seen_n B)" = 0 ]
	[ "$(curl -sS --max-time 5 "$PROXY_URL/debug/state" | jq .inflight)" = 0 ]
	req "${HINT[@]}"
	[ "$STATUS" = 200 ] || { show; return 1; }
	[ "$CLUSTER" = B ]
}
