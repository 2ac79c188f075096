#!/usr/bin/env bats
# proxy-cache-thrash.bats — the cache-thrash regression scenario of the
# session-aware proposal (ref §5.5), through a real sg-proxy router in front
# of two sg-mockengine clusters, for wait-and-widen and for
# pulsar-wait-and-widen with k = 1, flag on and off.
#
# Setup: clusters A and B, engine concurrency 2 each; lb-config k = 1,
# X = 300 ms, s = 0.1, 8 virtual nodes (w-a-w).  The cache affinity key
# $AKEY (s-30) ranks A first for both algorithms (checked with sg-route
# --explain on a snapshot of the same two clusters, so the test does not
# silently depend on a guess; see rank1 in proxy_helpers.bash).  A is held full; the session's first request
# (no hint) must go to B — at once with the flag, after the 300 ms wait
# without it; A is released; the next 10 requests carry
# x-stargate-last-cluster-id: B and must all go to B with the flag, to A
# without it.  Decisions are read from the x-stargate-cluster-id response
# header and from the engines' own request counters
# (/control/seen-headers).

bats_require_minimum_version 1.5.0

load proxy_helpers

setup() {
	proxy_setup
}

teardown() {
	proxy_teardown
}

KEY=$AKEY

# thrash ALGO FLAG: the scenario; FLAG true or false.
thrash() {
	local algo=$1 flag=$2 i got=()
	[ "$(rank1 "$algo" "$KEY")" = A ]
	start_engine A -c 2 -t 1 --decode-tps 1000
	start_engine B -c 2 -t 1 --decode-tps 1000
	clusters A B
	lb_session "$algo" "$flag" 300
	start_proxy
	reset_seen A B

	# 1. A is full.
	hold A 2
	settle
	# 2. The first request, without a hint, goes to B.
	req -H "x-cache-affinity-key: $KEY" || { show; return 1; }
	[ "$STATUS" = 200 ] || { show; return 1; }
	[ "$CLUSTER" = B ] || { show; return 1; }
	if [ "$flag" = true ]; then
		# new session: no affinity wait
		[ "$MS" -lt 250 ] || { echo "first request took $MS ms"; return 1; }
	else
		# flag off: it held for A for X = 300 ms first
		[ "$MS" -ge 270 ] || { echo "first request took only $MS ms"; return 1; }
	fi
	[ "$(seen_n A)" = 0 ]
	[ "$(seen_n B)" = 1 ]

	# 3. A drains.
	release A
	settle
	reset_seen A B
	# 4. Ten follow-ups carry the last cluster, B.
	for i in $(seq 1 10); do
		req -H "x-cache-affinity-key: $KEY" -H 'x-stargate-last-cluster-id: B' ||
		    { show; return 1; }
		[ "$STATUS" = 200 ] || { show; return 1; }
		got+=("$CLUSTER")
	done
	echo "follow-ups went to: ${got[*]}"
	# 5. Flag on: all ten stay on B.  Flag off: all ten go back to A.
	if [ "$flag" = true ]; then
		[ "${got[*]}" = "B B B B B B B B B B" ]
		[ "$(seen_n B)" = 10 ]
		[ "$(seen_n A)" = 0 ]
	else
		[ "${got[*]}" = "A A A A A A A A A A" ]
		[ "$(seen_n A)" = 10 ]
		[ "$(seen_n B)" = 0 ]
	fi
	# The session counter tells the same story (ref §5.4, §5.5).
	METRICS=$(metrics)
	local m=stargate_routing_session_selections_total
	local l=("model=\"dummy-model\"" "algorithm=\"$algo\"")
	if [ "$flag" = true ]; then
		[ "$(msum $m "${l[@]}" 'session_state="new"' 'selection="fallback"')" = 1 ]
		[ "$(msum $m "${l[@]}" 'session_state="new"' 'selection="primary"')" = 0 ]
		[ "$(msum $m "${l[@]}" 'session_state="returning"' 'selection="primary"')" = 10 ]
		[ "$(msum $m "${l[@]}" 'session_state="returning"' 'selection="fallback"')" = 0 ]
		[ "$(msum $m "${l[@]}" 'session_state="stale"')" = 0 ]
	else
		# no classification, no session metric
		[ "$(msum $m)" = 0 ]
	fi
}

@test "cache thrash, wait-and-widen, flag on: new session overflows to B at once, the 10 follow-ups stay on B" {
	thrash wait-and-widen true
}

@test "cache thrash, wait-and-widen, flag off: the first request waits X, the 10 follow-ups go back to A" {
	thrash wait-and-widen false
}

@test "cache thrash, pulsar-wait-and-widen, flag on: new session overflows to B at once, the 10 follow-ups stay on B" {
	thrash pulsar-wait-and-widen true
}

@test "cache thrash, pulsar-wait-and-widen, flag off: the first request waits X, the 10 follow-ups go back to A" {
	thrash pulsar-wait-and-widen false
}
