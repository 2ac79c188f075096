#!/usr/bin/env bats
# redis-ha.bats — the gateway's Redis store on replicated and sharded
# Redis (issue 11, acceptance 3 and 4).  Sentinel: a primary, a replica
# and three sentinels; the primary is killed during client traffic; after
# the failover the gateway writes to and reads from the new primary, and no
# client request failed meanwhile.  Cluster: three primaries made with
# `redis-cli --cluster create`; sessions spread over all three; a slot
# migrated during traffic (ASK while it moves, MOVED after) is followed
# without a lookup error or timeout.
#
# The gateway forwards to the recording fake router (which answers as
# cluster B), so the tests see which requests carried a hint.

bats_require_minimum_version 1.5.0

load proxy_helpers
load redis-helpers

HINT=x-stargate-last-cluster-id

setup() {
	proxy_setup
	redis_skip
	start_fake_router
}

teardown() {
	proxy_teardown
}

lk() {
	gw_metric "$GW_URL" llm_api_gateway_last_cluster_lookups_total \
	    "result=\"$1\""
}

# hinted BODY: the next request of BODY's session carries the hint B.
hinted() {
	creq "$1" && [ "$STATUS" = 200 ] && [ "$(rhdr -1 "$HINT")" = B ]
}

# raw_get PORT KEY: the raw value on one server.
raw_get() {
	redis-cli -p "$1" get "$2"
}

@test "Sentinel: the primary is killed; after the failover the gateway writes to and reads from the new primary; no request failed" {
	local b1 k1 b2 k2 i
	redis_sentinels sgm
	start_gateway --last-cluster true --last-cluster-timeout 50ms \
	    --last-cluster-store "$SENTINEL_URL"
	b1=$(cbody acme/dummy-model '{"prompt_cache_key": "pck-before"}')
	k1=$(lc_key "$b1")
	creq "$b1"
	[ "$STATUS" = 200 ]
	wait_for 100 0.05 bash -c "redis-cli -p $RPORT_p get $k1 | grep -q ':B$'"
	hinted "$b1"
	wait_for 100 0.05 bash -c "redis-cli -p $RPORT_r get $k1 | grep -q ':B$'"
	: >"$T/loop.status"
	client_loop "$T/loop.status" "$b1" "$GW_URL" &
	LOOP_PID=$!
	PIDS+=("$LOOP_PID")
	kill -9 "$RPID_p"
	wait_for 300 0.1 bash -c "[ \"\$(redis-cli -p $RPORT_s1 sentinel get-master-addr-by-name sgm | tail -1)\" = $RPORT_r ]"
	# a new session is written to the new primary, and read back from it
	b2=$(cbody acme/dummy-model '{"prompt_cache_key": "pck-after"}')
	k2=$(lc_key "$b2")
	for i in $(seq 1 100); do
		creq "$b2"
		[ "$STATUS" = 200 ] || { show; return 1; }
		raw_get "$RPORT_r" "$k2" | grep -q ':B$' && break
		sleep 0.1
	done
	raw_get "$RPORT_r" "$k2" | grep -q ':B$'
	hinted "$b2"
	# the session from before the failover: replicated, so still a hit
	hinted "$b1"
	loop_stop
	[ "$(gw_metric "$GW_URL" llm_api_gateway_last_cluster_store_connected)" = 1 ]
}

@test "Cluster: sessions spread over three primaries; a slot migrated during traffic is followed (ASK, MOVED) without errors" {
	local i b k p slot src dst sid did all=()
	redis_cluster
	start_gateway --last-cluster true --last-cluster-timeout 200ms \
	    --last-cluster-store "$CLUSTER_URL"
	for i in $(seq 1 30); do
		b=$(cbody acme/dummy-model "{\"prompt_cache_key\": \"pck-c$i\"}")
		creq "$b"
		[ "$STATUS" = 200 ]
	done
	wait_for 100 0.05 bash -c "[ \$(( \$(redis-cli -p $RPORT_c1 dbsize) + \$(redis-cli -p $RPORT_c2 dbsize) + \$(redis-cli -p $RPORT_c3 dbsize) )) = 30 ]"
	for p in "$RPORT_c1" "$RPORT_c2" "$RPORT_c3"; do
		echo "node $p: $(redis-cli -p "$p" dbsize) entries"
		[ "$(redis-cli -p "$p" dbsize)" -gt 0 ]
	done
	for i in $(seq 1 30); do
		hinted "$(cbody acme/dummy-model "{\"prompt_cache_key\": \"pck-c$i\"}")"
	done
	# Migrate the slot of session 7 while a client keeps using it.
	b=$(cbody acme/dummy-model '{"prompt_cache_key": "pck-c7"}')
	k=$(lc_key "$b")
	slot=$(redis-cli -p "$RPORT_c1" cluster keyslot "$k")
	for p in "$RPORT_c1" "$RPORT_c2" "$RPORT_c3"; do
		[ "$(redis-cli -p "$p" cluster countkeysinslot "$slot")" = 1 ] &&
		    src=$p
	done
	for p in "$RPORT_c1" "$RPORT_c2" "$RPORT_c3"; do
		[ "$p" != "$src" ] && { dst=$p; break; }
	done
	sid=$(redis-cli -p "$src" cluster myid)
	did=$(redis-cli -p "$dst" cluster myid)
	: >"$T/loop.status"
	client_loop "$T/loop.status" "$b" "$GW_URL" &
	LOOP_PID=$!
	PIDS+=("$LOOP_PID")
	sleep 0.3
	redis-cli -p "$dst" cluster setslot "$slot" importing "$sid" >/dev/null
	redis-cli -p "$src" cluster setslot "$slot" migrating "$did" >/dev/null
	redis-cli -p "$src" migrate 127.0.0.1 "$dst" "$k" 0 5000 | grep -qx OK
	sleep 0.5			# ASK from the old owner
	hinted "$b"
	# the order Redis documents for a migration: the destination, then
	# the source, then the rest (the other order leaves a window in
	# which the two bounce MOVED between them, which no client follows)
	for p in "$dst" "$src" "$RPORT_c1" "$RPORT_c2" "$RPORT_c3"; do
		redis-cli -p "$p" cluster setslot "$slot" node "$did" >/dev/null
	done
	sleep 0.5			# MOVED, then the new map
	hinted "$b"
	loop_stop
	[ "$(redis-cli -p "$dst" cluster countkeysinslot "$slot")" = 1 ]
	[ "$(lk error)" = 0 ]
	[ "$(lk timeout)" = 0 ]
	[ "$(gw_metric "$GW_URL" llm_api_gateway_last_cluster_writes_total 'result="error"')" = 0 ]
	# every request of the loop after its first found the hint
	[ "$(rreqs | jq --arg h "${HINT,,}" '[.requests[] | select(.headers[$h] == null)] | length')" = 30 ]
}
