#!/usr/bin/env bats
# store-faults.bats — the LMDB last-cluster store failing under a running
# sg-proxy (issue 12, "Store faults"): the store directory removed, the
# filesystem full, data.mdb cut short.  In each case the proxy keeps
# routing, as it does a new session (every request answers 200; the
# store's lookup is not a hit, so no last-cluster hint reaches the
# router), counts the failure (llm_api_gateway_last_cluster_lookups_total
# and _writes_total with result="error", and
# llm_api_gateway_last_cluster_store_connected 0 while the store is down),
# logs it at warn without the session or affinity key, and does not crash.
#
# Black box: sg-proxy --role all over sg-mockengine clusters, observed
# through /metrics, its log and the store files (sg-lastcluster reads
# them as another process would).  The full filesystem is the 256 KiB
# tmpfs of hardening-store.bats, in a private mount namespace.

bats_require_minimum_version 1.5.0

load proxy_helpers

setup() {
	proxy_setup
	STORE=$T/store
	FS=$T/fs
	mkdir -p "$FS"
	NS=(unshare -m)
	[ "$(id -u)" = 0 ] || NS=(unshare -rm)
	start_engine A
	start_engine B
	clusters A B
	lb_simple power-of-n
}

teardown() {
	proxy_teardown
}

# start_all [store dir]: sg-proxy --role all with the last-cluster store on.
start_all() {
	start_role proxy-all all --clusters "$T/clusters.json" \
	    --lb-config "$T/lb.json" --last-cluster true \
	    --last-cluster-store "${1:-$STORE}"
	GW_URL=$ROLE_URL
}

# turn N: one request of session "sess-N"; it must answer 200.
turn() {
	creq "$(cbody acme/dummy-model "{\"prompt_cache_key\": \"sess-$1\"}")"
	[ "$STATUS" = 200 ] || { echo "session $1: status $STATUS: $BODY"; return 1; }
}

# lk RESULT / wr RESULT: the lookup / write counter with that result.
lk() { gmsum llm_api_gateway_last_cluster_lookups_total "result=\"$1\""; }
wr() { gmsum llm_api_gateway_last_cluster_writes_total "result=\"$1\""; }
connected() { gmsum llm_api_gateway_last_cluster_store_connected; }

# wait_metric FN ARG OP VALUE: wait (bounded, 5 s) until $(FN ARG) OP VALUE.
wait_metric() {
	local i v
	for i in $(seq 1 100); do
		v=$("$1" "$2")
		[ "${v%.*}" "$3" "$4" ] && return 0
		sleep 0.05
	done
	echo "$1 $2: $v, wanted $3 $4"
	return 1
}

# key N: session N's store key.
key() {
	lc_key "$(cbody acme/dummy-model "{\"prompt_cache_key\": \"sess-$1\"}")"
}

# no_secrets FILE: the log never names a session id or a store key.
no_secrets() {
	! grep -q 'sess-' "$1"
	! grep -q 'lc:v1:' "$1"
}

@test "store removed under a running proxy: requests answer 200 as new sessions, the removal shows as disconnected and as errors, logged at warn" {
	local i hits
	start_all
	turn 1
	wait_metric wr ok -ge 1
	turn 1
	hits=$(lk hit)
	[ "$hits" -ge 1 ]
	[ "$(connected)" = 1 ]
	rm -rf "$STORE"
	# the store thread finds it on its own, within its 100 ms poll
	wait_metric connected x -eq 0
	turn 1
	# no hint from the removed file: not one more hit, an error instead
	[ "$(lk hit)" = "$hits" ]
	[ "$(lk error)" -ge 1 ]
	alive "$ROLE_PID"
	grep 'level=warn' "$T/proxy-all.err" | grep -q 'last-cluster'
	no_secrets "$T/proxy-all.err"
}

@test "store removed under a running proxy: the next write makes a new store in its place, which another process reads and the proxy uses" {
	local k
	start_all
	turn 1
	wait_metric wr ok -ge 1
	rm -rf "$STORE"
	wait_metric connected x -eq 0
	# a new session's write recreates the store (as a new sg-proxy would)
	turn 2
	wait_metric connected x -eq 1
	k=$(key 2)
	for i in $(seq 1 50); do
		[ -n "$(lc_get "$k")" ] && break
		turn 2
		sleep 0.1
	done
	# written into the file by that name, not into the removed one
	[ -n "$(lc_get "$k")" ]
	[ -z "$(lc_get "$(key 1)")" ]
	# and the proxy reads it: the session's next turn is a hit
	local hits=$(lk hit)
	turn 2
	[ "$(lk hit)" -gt "$hits" ]
	alive "$ROLE_PID"
}

@test "store removed and made again by another process: the running proxy follows the new store" {
	local hits
	start_all
	turn 1
	wait_metric wr ok -ge 1
	rm -rf "$STORE"
	wait_metric connected x -eq 0
	# another process makes the store again, remembering session 3 at B
	"$BIN/sg-lastcluster" -d "$STORE" put "$(key 3)" B
	wait_metric connected x -eq 1
	hits=$(lk hit)
	turn 3
	[ "$(lk hit)" = $((hits + 1)) ]
	alive "$ROLE_PID"
}

@test "full disk under a running proxy: writes fail and are counted, lookups of remembered sessions keep hitting, writes resume when space is back" {
	local i hits werr
	"${NS[@]}" sh -c "mount -t tmpfs -o size=256k tmpfs '$FS'" \
	    2>"$T/ns.err" ||
	    skip "cannot mount a tmpfs in a private namespace: $(cat "$T/ns.err")"
	printf '#!/bin/sh\nexec %s sh -c %s "%s" "%s" "$@"\n' "${NS[*]}" \
	    "'mount -t tmpfs -o size=256k tmpfs \"\$0\" || exit 99; exec \"\$@\"'" \
	    "$FS" "$BIN/sg-proxy" >"$T/proxy-ns"
	chmod +x "$T/proxy-ns"
	PROXY=$T/proxy-ns
	start_all "$FS/store"
	local root=/proc/$ROLE_PID/root$FS now
	# three remembered sessions among 600, written by another process in
	# one transaction: leaves filled to where a few more entries split
	# one, and a split needs a page that freed ones cannot supply
	now=$(($(date +%s) * 1000))
	{
		for i in 1 2 3; do
			printf '{"key":"%s","cluster_id":"B","written_ms":%d}\n' \
			    "$(key "$i")" "$now"
		done
		for ((i = 1; i <= 600; i++)); do
			printf '{"key":"lc:v1:%064x","cluster_id":"A","written_ms":%d}\n' \
			    "$((i * 7919))" "$now"
		done
	} | "$BIN/sg-lastcluster" -d "$root/store" load >/dev/null
	cat /dev/zero >"$root/fill" 2>/dev/null || true
	werr=$(wr error)
	# new sessions: their writes need pages the disk no longer has
	for i in $(seq 10 60); do
		turn "$i"
		[ "$(wr error)" -gt "$werr" ] && break
	done
	wait_metric wr error -gt "$werr"
	# the remembered sessions still hit (lookups read, never write)
	hits=$(lk hit)
	for i in 1 2 3; do
		turn "$i"
	done
	[ "$(lk hit)" = $((hits + 3)) ]
	[ "$(connected)" = 1 ]
	grep 'level=warn' "$T/proxy-all.err" | grep -q 'write failed'
	no_secrets "$T/proxy-all.err"
	# space back: a new session is written and then found
	rm -f "$root/fill"
	werr=$(wr ok)
	turn 99
	wait_metric wr ok -gt "$werr"
	hits=$(lk hit)
	turn 99
	[ "$(lk hit)" = $((hits + 1)) ]
	alive "$ROLE_PID"
}

# fill_store N: a store of N entries (sg-lastcluster load), big enough
# that its pages spread over the file.
fill_store() {
	local now i
	now=$(($(date +%s) * 1000))
	for ((i = 1; i <= $1; i++)); do
		printf '{"key":"lc:v1:%064x","cluster_id":"A","written_ms":%d}\n' \
		    "$i" "$now"
	done | "$BIN/sg-lastcluster" -d "$STORE" load >/dev/null
}

@test "data.mdb cut to a few pages under a running proxy: no crash, lookups fail and are counted, the store reports disconnected" {
	local i
	fill_store 1500
	start_all
	turn 1
	wait_metric wr ok -ge 1
	truncate -s 16384 "$STORE/data.mdb"
	for i in 1 2 3 4 5 6; do
		turn "$i"
	done
	alive "$ROLE_PID"
	[ "$(lk error)" -ge 1 ]
	wait_metric connected x -eq 0
	# still routing, still alive, writes now fail with the way out
	local werr=$(wr error)
	turn 7
	wait_metric wr error -gt "$werr"
	grep 'level=warn' "$T/proxy-all.err" | grep 'last-cluster' |
	    grep -q 'result=error'
	no_secrets "$T/proxy-all.err"
	alive "$ROLE_PID"
}

@test "data.mdb cut to half its size under a running proxy: every request answers, the cut is found, deleting the store recovers" {
	local i
	fill_store 1500
	start_all
	turn 1
	wait_metric wr ok -ge 1
	truncate -s $(($(stat -c %s "$STORE/data.mdb") / 2)) "$STORE/data.mdb"
	for i in $(seq 1 20); do
		turn "$i"
	done
	wait_metric connected x -eq 0
	alive "$ROLE_PID"
	# the way out: delete the store (hints only); the next write makes one
	rm -rf "$STORE"
	turn 30
	wait_metric connected x -eq 1
	local hits=$(lk hit)
	for i in $(seq 1 50); do
		[ -n "$(lc_get "$(key 31)")" ] && break
		turn 31
		sleep 0.1
	done
	turn 31
	[ "$(lk hit)" -gt "$hits" ]
	alive "$ROLE_PID"
}
