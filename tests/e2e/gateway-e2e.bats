#!/usr/bin/env bats
# gateway-e2e.bats — the end-to-end cache-thrash scenario (proposal
# "End-to-end"; ref §5.5) through the whole stack: a client speaking plain
# OpenAI (public model id acme/dummy-model, a prompt_cache_key, nothing
# Stargate-specific) -> sg-proxy --role gateway (feature on or off, LMDB
# store) -> sg-proxy --role router (last_cluster_affinity on) -> two
# sg-mockengine clusters A and B; and the same through one --role all.
#
# The session's prompt_cache_key is chosen so that the affinity key the
# gateway derives from it (sg-classify prints it) ranks A first (checked
# with sg-route --explain on snapshots of the same two clusters, idle, with
# A full and with either further away; see pick_key).  A is held full; the first turn must land on B;
# A is released; the next 10 turns must all go to B with the gateway's flag
# on (the gateway remembered B and hints it) and to A with the flag off (no
# hint, and the router's last_cluster_affinity off too, as before the
# feature: A is free and first).  A last test turns only the gateway's flag
# off: the router then sees every turn as a new session.  Placement
# is read from the engines' own request counters; the client never sees
# x-stargate-cluster-id.

bats_require_minimum_version 1.5.0

load proxy_helpers

setup() {
	proxy_setup
	STORE=$T/store
}

teardown() {
	proxy_teardown
}

# rank_first ALGO KEY SNAPSHOT-FILTER: the cluster sg-route ranks first for
# the hashed KEY of routing key acme (the ranking hashes the routing key
# too) under lb_session ALGO, on the idle A, B snapshot changed by the jq
# filter.
rank_first() {
	jq -n '{clusters: [
	    {id: "A", rtt_ms: 1, max_engine_concurrency: 2, running: 0, queued: 0,
	     queued_input_tokens: 0, last_mean_input_tps: 20000, max_input_tps: 20000},
	    {id: "B", rtt_ms: 1, max_engine_concurrency: 2, running: 0, queued: 0,
	     queued_input_tokens: 0, last_mean_input_tps: 20000, max_input_tps: 20000}]}' |
	    jq "$3" >"$T/snap-rank.json"
	lb_session "$1" true
	jq -nc --arg k "h:$(printf '%s' "$2" | sha256sum | cut -d' ' -f1)" \
	    '{request_id: "r", routing_key: "acme", model: "dummy-model",
	      cache_affinity_key: $k, input_tokens: 100}' |
	    "$BIN/sg-route" -c "$T/lb.json" -s "$T/snap-rank.json" --explain |
	    jq -r '.explain.original_order[0]'
}

# pick_key ALGO: a prompt_cache_key whose gateway affinity key ranks A
# first, idle, with A full, and with either cluster further away (pulsar's
# ranking weighs load and the round-trip times the router measures, which
# vary by a fraction of a millisecond on loopback); sets PCK and CAK.
pick_key() {
	local i cak f ok
	for i in $(seq 1 200); do
		cak=$(cbody acme/dummy-model "{\"prompt_cache_key\": \"thrash-$i\"}" |
		    "$BIN/sg-classify" - | jq -r .cache_affinity_key)
		ok=1
		for f in . '.clusters[0].running = 2' \
		    '.clusters[0].running = 2 | .clusters[0].rtt_ms = 5' \
		    '.clusters[1].rtt_ms = 5' '.clusters[0].rtt_ms = 5'; do
			[ "$(rank_first "$1" "$cak" "$f")" = A ] || { ok=0; break; }
		done
		if [ "$ok" = 1 ]; then
			PCK=thrash-$i CAK=$cak
			return 0
		fi
	done
	echo "no key among thrash-1..200 ranks A first"
	return 1
}

# stack ALGO FLAG ROLES [ROUTERFLAG]: engines A and B (2 slots each), then
# either ROLES=split (a router and a separate gateway) or ROLES=all (one
# --role all process); the gateway's feature is FLAG, the router's
# last_cluster_affinity ROUTERFLAG (default FLAG).  Sets GW_URL (the
# client's URL).
stack() {
	local algo=$1 flag=$2 roles=$3
	pick_key "$algo"
	start_engine A -c 2 -t 4 --decode-tps 1000
	start_engine B -c 2 -t 4 --decode-tps 1000
	clusters A B
	lb_session "$algo" "${4:-$flag}" 300
	if [ "$roles" = split ]; then
		start_proxy
		ROUTER_URL=$PROXY_URL
		start_gateway --last-cluster "$flag" --last-cluster-store "$STORE"
	else
		start_role proxy-all all --clusters "$T/clusters.json" \
		    --lb-config "$T/lb.json" --last-cluster "$flag" \
		    --last-cluster-store "$STORE"
		GW_URL=$ROLE_URL PROXY_URL=$ROLE_URL
	fi
}

# turn N: the session's Nth turn (the conversation grows by one exchange a
# turn); sets STATUS, BODY.
turn() {
	local n=$1 msgs
	msgs=$(jq -nc --argjson n "$n" '[range(1; $n + 1) as $i
	    | {role: "user", content: ("question \($i) " + ("about caches " * 40))},
	      {role: "assistant", content: "answer \($i)"}] | .[:-1]')
	creq "$(jq -nc --arg k "$PCK" --argjson m "$msgs" \
	    '{model: "acme/dummy-model", prompt_cache_key: $k, messages: $m}')"
}

# thrash ALGO FLAG ROLES
thrash() {
	local algo=$1 flag=$2 roles=$3 i got=() fp
	stack "$algo" "$flag" "$roles"
	reset_seen A B
	# 1. A is full.
	hold A 2
	settle
	# 2. The first turn, a new session, lands on B.
	turn 1
	[ "$STATUS" = 200 ] || { cat "$T/h"; echo "$BODY"; return 1; }
	[ "$(seen_n A)" = 0 ]
	[ "$(seen_n B)" = 1 ]
	# a new session does not wait for A; without the feature it waits X
	if [ "$flag" = true ]; then
		[ "$MS" -lt 250 ] || { echo "first turn took $MS ms"; return 1; }
	else
		[ "$MS" -ge 270 ] || { echo "first turn took only $MS ms"; return 1; }
	fi
	# the engine names itself to the client (system_fingerprint)
	[ "$(jq -r .system_fingerprint <<<"$BODY")" = B ]
	[ -z "$(hdr x-stargate-cluster-id)" ]
	[ "$(hdr x-multi-turn-session-id)" = "$PCK" ]
	if [ "$flag" = true ]; then
		lc_wait "$(lc_key "$(cbody acme/dummy-model "{\"prompt_cache_key\": \"$PCK\"}")")" B
	fi
	# 3. A drains.
	release A
	settle
	reset_seen A B
	# 4. The next 10 turns of the session.
	for i in $(seq 2 11); do
		turn "$i"
		[ "$STATUS" = 200 ] || { cat "$T/h"; echo "$BODY"; return 1; }
		fp=$(jq -r '.system_fingerprint // empty' <<<"$BODY")
		got+=("${fp:-?}")
		[ "$i" != 2 ] || CACHED2=$(jq -r '.usage.prompt_tokens_details.cached_tokens // 0' <<<"$BODY")
	done
	echo "turns 2-11 (system_fingerprint): ${got[*]}; A saw $(seen_n A), B saw $(seen_n B)"
	# 5. Flag on: all ten on B, reusing the cache; off: all ten back on A.
	if [ "$flag" = true ]; then
		[ "$(seen_n B)" = 10 ]
		[ "$(seen_n A)" = 0 ]
		[ "$CACHED2" -gt 0 ]
		METRICS=$(metrics)
		[ "$(msum stargate_routing_session_selections_total 'session_state="returning"' 'selection="primary"')" = 10 ]
	else
		[ "$(seen_n A)" = 10 ]
		[ "$(seen_n B)" = 0 ]
		[ "$CACHED2" = 0 ]
		[ -z "$(lc_dump)" ]
	fi
	if [ "$flag" = true ]; then
		[ "${got[*]}" = "B B B B B B B B B B" ]
	else
		[ "${got[*]}" = "A A A A A A A A A A" ]
	fi
}

@test "end to end, gateway and router processes, wait-and-widen: the first turn lands on B, A drains, the next 10 turns go to B" {
	thrash wait-and-widen true split
}

@test "end to end, gateway and router processes, wait-and-widen, flag off: the next 10 turns go to A" {
	thrash wait-and-widen false split
}

@test "end to end, gateway and router processes, pulsar-wait-and-widen: the first turn lands on B, A drains, the next 10 turns go to B" {
	thrash pulsar-wait-and-widen true split
}

@test "end to end, gateway and router processes, pulsar-wait-and-widen, flag off: the next 10 turns go to A" {
	thrash pulsar-wait-and-widen false split
}

@test "end to end, one --role all process, wait-and-widen: the first turn lands on B, A drains, the next 10 turns go to B; flag off sends them to A" {
	thrash wait-and-widen true all
	stop_all
	rm -rf "$STORE"
	thrash wait-and-widen false all
}

@test "end to end, gateway and router processes: with only the gateway's flag off no hint reaches the router, which sees every turn as a new session" {
	local i
	stack pulsar-wait-and-widen false split true
	hold A 2
	settle
	for i in 1 2 3; do
		turn "$i"
		[ "$STATUS" = 200 ]
	done
	release A
	settle
	for i in 4 5 6; do
		turn "$i"
		[ "$STATUS" = 200 ]
	done
	METRICS=$(metrics)
	local m=stargate_routing_session_selections_total
	[ "$(msum $m 'session_state="new"')" = 6 ]
	[ "$(msum $m 'session_state="returning"')" = 0 ]
	[ "$(msum $m 'session_state="stale"')" = 0 ]
	[ "$(seen A | jq '.headers["x-stargate-last-cluster-id"] // 0')" = 0 ]
	[ -z "$(lc_dump)" ]
}
