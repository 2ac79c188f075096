#!/usr/bin/env bats
# hostile-slowloris.bats — issue 12, hostile clients: many slow clients
# (tests/fixtures/proxy/slowloris.py) that stop sending mid-header or
# mid-body are disconnected within the read timeout
# (--header-timeout-ms, --body-timeout-ms: 1 s here) while an ordinary
# client keeps getting answers.  The only time bound checked is the
# timeout itself (plus scheduling slack).

bats_require_minimum_version 1.5.0

load proxy_helpers

N=300

setup() {
	proxy_setup
	start_engine A -c 8 -t 1 --decode-tps 1000
	clusters A
	start_proxy --header-timeout-ms 1000 --body-timeout-ms 1000
	reset_seen A
}

teardown() {
	proxy_teardown
}

# slow MODE: N slow connections in MODE while 20 ordinary requests run;
# all ordinary requests succeed and every slow connection is cut within
# the 1 s timeout (10 s allowed for scheduling under the sanitizers).
slow() {
	local ok=0 i
	"$PY" "$FIX/slowloris.py" "$PROXY_PORT" "$N" "$1" 15 >"$T/slow.out" &
	PIDS+=("$!")
	local sp=$!
	for i in $(seq 1 20); do
		req
		[ "$STATUS" = 200 ] && ok=$((ok + 1))
	done
	wait "$sp"
	cat "$T/slow.out"
	[ "$ok" = 20 ]
	read -r _ cut _ n _ ms <"$T/slow.out"
	[ "$cut" = "$N" ] && [ "$n" = "$N" ]
	[ "$ms" -lt 10000 ]
	# no slow request ever reached the engine
	[ "$(seen_n A)" = 20 ]
	# and the proxy serves after they are gone
	req
	[ "$STATUS" = 200 ]
}

@test "slowloris: $N clients stalled mid-header are cut within --header-timeout-ms" {
	slow header
}

@test "slowloris: $N clients stalled mid-body are cut within --body-timeout-ms" {
	slow body
}
