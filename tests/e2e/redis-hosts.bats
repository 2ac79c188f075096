#!/usr/bin/env bats
# redis-hosts.bats — one session map for every host (issue 11, acceptance
# 1): two "hosts", network namespaces joined to this one by veth pairs the
# test makes, each with an sg-proxy --role gateway, share one redis-server
# (bound to this side of both links, with a password).  A write through one gateway is a hit
# through the other, and the cache-thrash scenario holds across hosts:
# turn 1 through host 1 lands on B while A is full, A drains, turns 2-11
# through host 2 all go to B.
#
# Each host's gateway forwards to an sg-proxy --role router here (one per
# link, both over the same sg-mockengine clusters A and B on loopback).
# Needs root (ip netns); skipped otherwise, or without redis-server.

bats_require_minimum_version 1.5.0

load proxy_helpers
load redis-helpers

setup() {
	proxy_setup
	redis_skip
	NS_MADE=()
	ns_setup
}

teardown() {
	local rc=0
	proxy_teardown || rc=$?
	ns_teardown
	return "$rc"
}

# rank_first KEY FILTER: the cluster sg-route ranks first for the hashed
# KEY (routing key acme) under $T/lb.json on the idle A, B snapshot
# changed by the jq FILTER.
rank_first() {
	jq -n '{clusters: [
	    {id: "A", rtt_ms: 1, max_engine_concurrency: 2, running: 0, queued: 0,
	     queued_input_tokens: 0, last_mean_input_tps: 20000, max_input_tps: 20000},
	    {id: "B", rtt_ms: 1, max_engine_concurrency: 2, running: 0, queued: 0,
	     queued_input_tokens: 0, last_mean_input_tps: 20000, max_input_tps: 20000}]}' |
	    jq "$2" >"$T/snap-rank.json"
	jq -nc --arg k "h:$(printf '%s' "$1" | sha256sum | cut -d' ' -f1)" \
	    '{request_id: "r", routing_key: "acme", model: "dummy-model",
	      cache_affinity_key: $k, input_tokens: 100}' |
	    "$BIN/sg-route" -c "$T/lb.json" -s "$T/snap-rank.json" --explain |
	    jq -r '.explain.original_order[0]'
}

# pick_key: a prompt_cache_key whose affinity key ranks A first, idle,
# with A full and with either cluster further away; sets PCK.
pick_key() {
	local i cak f ok
	for i in $(seq 1 200); do
		cak=$(cbody acme/dummy-model "{\"prompt_cache_key\": \"hosts-$i\"}" |
		    "$BIN/sg-classify" - | jq -r .cache_affinity_key)
		ok=1
		for f in . '.clusters[0].running = 2' '.clusters[1].rtt_ms = 5' \
		    '.clusters[0].rtt_ms = 5'; do
			[ "$(rank_first "$cak" "$f")" = A ] || { ok=0; break; }
		done
		[ "$ok" = 1 ] && { PCK=hosts-$i; return 0; }
	done
	echo "no key ranks A first"
	return 1
}

# hosts: engines A, B; redis on both links; a router per link; a gateway
# in each namespace.  Sets G1, G2 (the gateways' URLs) and RURL.
hosts() {
	start_engine A -c 2 -t 4 --decode-tps 1000
	start_engine B -c 2 -t 4 --decode-tps 1000
	clusters A B
	lb_session wait-and-widen true 300
	pick_key
	# off loopback Redis wants a password (protected mode): the gateways
	# authenticate
	RBIND="$H1_PEER $H2_PEER" redis_start shared --requirepass hosts-pw
	RURL=redis://:hosts-pw@$H1_PEER:$RPORT_shared/0
	local i peer addr ns
	for i in 1 2; do
		eval "peer=\$H${i}_PEER addr=\$H${i}_ADDR ns=\$NS$i"
		start_at "proxy-router$i" - "$peer" router \
		    --clusters "$T/clusters.json" --lb-config "$T/lb.json"
		start_at "proxy-gw$i" "$ns" "$addr" gateway \
		    --router-url "$AT_URL" --last-cluster true \
		    --last-cluster-store "redis://:hosts-pw@$peer:$RPORT_shared/0"
		eval "G$i=\$AT_URL"
	done
	# the gateways cannot reach each other's namespace, only redis and
	# their router: the store is what they share
	! ip netns exec "$NS1" curl -s --max-time 1 -o /dev/null "$G2/readyz"
}

# turn N: the session's Nth turn through $GW_URL.
turn() {
	local msgs
	msgs=$(jq -nc --argjson n "$1" '[range(1; $n + 1) as $i
	    | {role: "user", content: ("question \($i) " + ("about caches " * 40))},
	      {role: "assistant", content: "answer \($i)"}] | .[:-1]')
	creq "$(jq -nc --arg k "$PCK" --argjson m "$msgs" \
	    '{model: "acme/dummy-model", prompt_cache_key: $k, messages: $m}')"
}

@test "two gateways in two network namespaces share one redis-server: a write through one is a hit through the other" {
	local b key
	hosts
	b=$(cbody acme/dummy-model '{"prompt_cache_key": "pck-two-hosts"}')
	key=$(lc_key "$b")
	GW_URL=$G1 creq "$b"
	[ "$STATUS" = 200 ]
	rlc_wait "$RURL" "$key" "$(rlc_get "$RURL" "$key")"
	[ -n "$(rlc_get "$RURL" "$key")" ]
	[ "$(gw_metric "$G1" llm_api_gateway_last_cluster_lookups_total 'result="miss"')" = 1 ]
	[ "$(gw_metric "$G1" llm_api_gateway_last_cluster_writes_total 'result="ok"')" = 1 ]
	GW_URL=$G2 creq "$b"
	[ "$STATUS" = 200 ]
	[ "$(gw_metric "$G2" llm_api_gateway_last_cluster_lookups_total 'result="hit"')" = 1 ]
	[ "$(gw_metric "$G2" llm_api_gateway_last_cluster_store_connected)" = 1 ]
}

@test "cache thrash across hosts: turn 1 through host 1 lands on B, A drains, turns 2-11 through host 2 all go to B" {
	local i key
	hosts
	reset_seen A B
	hold A 2
	settle
	GW_URL=$G1 turn 1
	[ "$STATUS" = 200 ] || { cat "$T/h"; echo "$BODY"; return 1; }
	[ "$(seen_n A)" = 0 ]
	[ "$(seen_n B)" = 1 ]
	key=$(lc_key "$(cbody acme/dummy-model "{\"prompt_cache_key\": \"$PCK\"}")")
	rlc_wait "$RURL" "$key" B
	release A
	settle
	reset_seen A B
	for i in $(seq 2 11); do
		GW_URL=$G2 turn "$i"
		[ "$STATUS" = 200 ] || { cat "$T/h"; echo "$BODY"; return 1; }
	done
	echo "turns 2-11 through host 2: A saw $(seen_n A), B saw $(seen_n B)"
	[ "$(seen_n B)" = 10 ]
	[ "$(seen_n A)" = 0 ]
	[ "$(gw_metric "$G2" llm_api_gateway_last_cluster_lookups_total 'result="hit"')" = 10 ]
}
