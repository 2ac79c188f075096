#!/usr/bin/env bats
# proxy-stats.bats — cluster stats in the router (SPEC §2.5): a cluster
# whose stats go stale (its engine stopped with SIGSTOP, or its stats URL
# failing) stops receiving requests and comes back once they are fresh;
# the vLLM /metrics adapter feeds routing; /readyz waits for fresh stats or
# --ready-timeout-ms.
#
# The cluster files here poll every 50 ms and call stats stale after
# 1000 ms.  Routing is pulsar with key s-30, which ranks A first, so
# "requests go to A" is the healthy state.

bats_require_minimum_version 1.5.0

load proxy_helpers

setup() {
	proxy_setup
}

teardown() {
	proxy_teardown
}

KEY="x-cache-affinity-key: $AKEY"

# all_to ID N: N requests, each 200 from cluster ID.
all_to() {
	local i
	for i in $(seq 1 "$2"); do
		REQ_MAX_TIME=5 req -H "$KEY"
		[ "$STATUS" = 200 ] || { show; return 1; }
		[ "$CLUSTER" = "$1" ] || { show; return 1; }
	done
}

# back_to ID: within 5 s a request goes to ID again.
back_to() {
	local i
	for i in $(seq 1 50); do
		REQ_MAX_TIME=5 req -H "$KEY"
		[ "$STATUS" = 200 ] && [ "$CLUSTER" = "$1" ] && return 0
		sleep 0.1
	done
	show
	return 1
}

@test "a stopped engine's cluster goes stale, gets no requests, and comes back after SIGCONT" {
	start_engine A -c 4 -t 1 --decode-tps 1000
	start_engine B -c 4 -t 1 --decode-tps 1000
	clusters A B
	lb_simple pulsar
	start_proxy
	all_to A 2
	kill -STOP "${EPID[A]}"
	# stats_stale_ms is 1000; the stats request in flight times out too
	sleep 1.6
	all_to B 3
	kill -CONT "${EPID[A]}"
	back_to A
	all_to A 2
}

@test "a cluster whose stats URL fails goes stale and comes back when the stats answer again" {
	start_fault A -c 4 --mode ok
	start_engine B -c 4 -t 1 --decode-tps 1000
	clusters A B
	lb_simple pulsar
	start_proxy
	all_to A 2
	ectl A /control/stats '{"mode":"fail"}' >/dev/null
	sleep 1.5
	reset_seen A
	all_to B 3
	[ "$(seen_n A)" = 0 ]
	ectl A /control/stats '{"mode":"ok"}' >/dev/null
	back_to A
}

@test "a cluster whose stats URL never answers goes stale too" {
	start_fault A -c 4 --mode ok
	start_engine B -c 4 -t 1 --decode-tps 1000
	clusters A B
	lb_simple pulsar
	start_proxy
	all_to A 1
	ectl A /control/stats '{"mode":"hang"}' >/dev/null
	sleep 1.6
	all_to B 3
	ectl A /control/stats '{"mode":"ok"}' >/dev/null
	back_to A
}

@test "vLLM-format stats (sg-mockengine /metrics) feed routing" {
	start_engine V1 -c 2 -t 1 --decode-tps 1000
	start_engine V2 -c 2 -t 1 --decode-tps 1000
	local x='{"stats": {"format": "vllm"}, "max_engine_concurrency": 2, "max_input_tps": 20000}'
	write_clusters "$T/clusters.json" "$(cl_entry V1 "$x")" "$(cl_entry V2 "$x")"
	jq -n '{default: "power-of-n", models: {"dummy-model": {algorithm: "power-of-n",
	    sample_count: 2, comparator: "utilization"}}}' >"$T/lb.json"
	start_proxy
	# Utilisation comes from vllm:num_requests_running: the held engine loses.
	hold V1 2
	settle
	local i
	for i in 1 2 3 4; do
		req
		[ "$STATUS" = 200 ] || { show; return 1; }
		[ "$CLUSTER" = V2 ] || { show; return 1; }
	done
	release V1
	hold V2 2
	settle
	for i in 1 2 3 4; do
		req
		[ "$STATUS" = 200 ] || { show; return 1; }
		[ "$CLUSTER" = V1 ] || { show; return 1; }
	done
}

@test "/readyz is 503 until every cluster has fresh stats, or the ready timeout passes" {
	start_fault A -c 4 --mode ok --stats-mode fail
	start_engine B -c 4 -t 1 --decode-tps 1000
	clusters A B
	PROXY_NOWAIT=1 start_proxy --ready-timeout-ms 2000
	run -0 curl -s --max-time 2 -o /dev/null -w '%{http_code}' "$PROXY_URL/readyz"
	[ "$output" = 503 ]
	run -0 curl -s --max-time 2 "$PROXY_URL/healthz"
	[ "$output" = ok ]
	# the timeout passes: ready, and B serves
	wait_for 60 0.1 sh -c "[ \"\$(curl -s --max-time 2 -o /dev/null -w '%{http_code}' '$PROXY_URL/readyz')\" = 200 ]"
	req
	[ "$STATUS" = 200 ] || { show; return 1; }
	[ "$CLUSTER" = B ]
}
