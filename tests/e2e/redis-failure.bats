#!/usr/bin/env bats
# redis-failure.bats — the gateway's Redis store failing open (issue 11,
# acceptance 2): a redis-server stopped with kill -STOP makes lookups end at
# the lookup timeout and requests route as new sessions; continued, the
# hints come back.  Killed, the gateway reconnects with a capped backoff
# (counted against a listener that accepts and hangs up), and once Redis is
# back it uses it again; no client request fails meanwhile.  Run under the
# sanitizer build, the proxy's stderr is checked for ASan/UBSan/LSan
# reports in teardown.
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
	redis_start one
	RURL=redis://127.0.0.1:$RPORT_one/0
	start_gateway --last-cluster true --last-cluster-timeout 20ms \
	    --last-cluster-store "$RURL"
	B=$(cbody acme/dummy-model '{"prompt_cache_key": "pck-failure"}')
	KEY=$(lc_key "$B")
}

teardown() {
	proxy_teardown
}

lk() {
	gw_metric "$GW_URL" llm_api_gateway_last_cluster_lookups_total \
	    "result=\"$1\""
}

# hinted: the next request carries the hint B.
hinted() {
	creq "$B" && [ "$STATUS" = 200 ] && [ "$(rhdr -1 "$HINT")" = B ]
}

@test "Redis stopped (kill -STOP): lookups end at the lookup timeout and route as new; continued: hits again" {
	local i t0 e0 b
	creq "$B"
	[ "$STATUS" = 200 ]
	rlc_wait "$RURL" "$KEY" B
	hinted
	# Six more sessions, stored and committed before the stop: each is
	# asked once while Redis is stopped (a session's own write that is
	# still in flight would answer its next lookup in the gateway itself)
	for i in 1 2 3 4 5 6; do
		b=$(cbody acme/dummy-model "{\"prompt_cache_key\": \"pck-stop-$i\"}")
		creq "$b"
		rlc_wait "$RURL" "$(lc_key "$b")" B
	done
	kill -STOP "$RPID_one"
	t0=$(lk timeout)
	e0=$(lk error)
	for i in 1 2 3 4 5 6; do
		creq "$(cbody acme/dummy-model "{\"prompt_cache_key\": \"pck-stop-$i\"}")"
		[ "$STATUS" = 200 ] || { show; return 1; }
		rlacks -1 "$HINT"
	done
	# each lookup timed out, or failed at once after the backend gave up
	# the stalled connection; never a hint, never an error to the client
	[ "$(($(lk timeout) - t0))" -ge 1 ]
	[ "$(($(lk timeout) - t0 + $(lk error) - e0))" = 6 ]
	kill -CONT "$RPID_one"
	wait_for 100 0.1 hinted
	[ "$(gw_metric "$GW_URL" llm_api_gateway_last_cluster_store_connected)" = 1 ]
}

@test "Redis killed and restarted: the gateway reconnects with backoff, no request fails" {
	local n
	creq "$B"
	rlc_wait "$RURL" "$KEY" B
	hinted
	: >"$T/loop.status"
	client_loop "$T/loop.status" "$(cbody acme/dummy-model \
	    '{"prompt_cache_key": "pck-loop"}')" "$GW_URL" &
	LOOP_PID=$!
	PIDS+=("$LOOP_PID")
	kill -9 "$RPID_one"
	wait_for 50 0.1 bash -c "[ \"\$(curl -s $GW_URL/metrics |
	    awk '/^llm_api_gateway_last_cluster_store_connected/ { print \$NF }')\" = 0 ]"
	# Something that accepts and hangs up: every reconnect is counted.
	"$PY" -c '
import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(64)
s.settimeout(0.1)
n = 0
end = time.time() + 3
while time.time() < end:
    try:
        c, _ = s.accept()
    except socket.timeout:
        continue
    n += 1
    c.close()
print(n)' "$RPORT_one" >"$T/accepts"
	n=$(cat "$T/accepts")
	echo "reconnect attempts in 3 s: $n"
	# 50, 100, 200, ... ms capped at 2 s: a handful, not a storm
	[ "$n" -ge 2 ] && [ "$n" -le 12 ]
	RPORT=$RPORT_one redis_start one
	wait_for 100 0.1 bash -c "[ \"\$(curl -s $GW_URL/metrics |
	    awk '/^llm_api_gateway_last_cluster_store_connected/ { print \$NF }')\" = 1 ]"
	# the restarted server is empty: one response writes, the next hits
	# (retried: a 20 ms lookup under the sanitizer, beside the client
	# loop, can miss its deadline once)
	creq "$B"
	rlc_wait "$RURL" "$KEY" B
	wait_for 20 0.1 hinted
	loop_stop
}
