#!/usr/bin/env bats
# fault-disconnect.bats — clients that go away (issue 12, "10 000
# disconnect cycles"): tests/fixtures/faults/disconnect.c drives sg-proxy
# --role router in front of two sg-mockengines with clients that leave
#   - while their request body is being sent (65536 bytes announced, 1000
#     sent),
#   - mid-stream, once the SSE answer's head and first byte came (on A),
#   - during a routing wait: a returning session (affinity key s-30, hint
#     B) whose last cluster B is full waits up to the affinity wait
#     (1000 ms); the client leaves after 30 ms,
# half of them with a FIN, half with a reset.  Afterwards every engine slot
# is free again (sg-mockengine /stats: A running 0, B only its 2 held
# slots), sg-proxy holds no reservation and no request (/debug/state), each
# leaver that had become a request is counted 499 exactly once, and the
# waiting ones never reached an engine.  sg-proxy's file descriptors are
# the same after the run as after a warm-up of 300 cycles (both taken with
# the proxy idle), and its resident set grew by at most 10 % of the
# warm-up's, or 4 MiB if that is more (ASan's allocator and libevent keep
# some freed memory; a leak of 0.5 KiB a cycle would already show).  The
# sanitizer build's free quarantine is bounded to 1 MiB here
# (ASAN_OPTIONS quarantine_size_mb=1), else it alone would grow the RSS by
# up to 256 MiB.
#
# The all role (the gateway stage in front of the router stage) gets the
# same check with clients that leave mid-body and mid-stream.
#
# DISCONNECT_CYCLES (default 10000) sets the router role's count,
# DISCONNECT_CYCLES_ALL (default 3000) the all role's.

bats_require_minimum_version 1.5.0

load proxy_helpers

setup_file() {
	local top
	top=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)
	cc -std=c11 -D_GNU_SOURCE -O2 -Wall -Wextra -Werror -Wshadow \
	    -Wstrict-prototypes -Wmissing-prototypes \
	    -o "$BATS_FILE_TMPDIR/disconnect" \
	    "$top/tests/fixtures/faults/disconnect.c"
}

setup() {
	proxy_setup
	DRIVER=$BATS_FILE_TMPDIR/disconnect
	export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:exitcode=23:quarantine_size_mb=1
	start_engine A -c 64 -t 1000 --decode-tps 50
	start_engine B -c 2 -t 1000 --decode-tps 50
	clusters A B
	lb_session wait-and-widen true 1000
	BHELD=2
}

# router_stack: sg-proxy --role router, B full (its 2 slots held).
router_stack() {
	start_proxy
	hold B 2
	settle
	reset_seen A B
}

teardown() {
	proxy_teardown
}

H=(-H 'x-model: dummy-model' -H 'x-input-tokens: 100')
W=(-W "x-cache-affinity-key: $AKEY" -W 'x-stargate-last-cluster-id: B')

# cycles N [driver options]: N disconnect cycles (mixed, or MODE), at
# most 120 s; the driver's JSON summary in RUN.
cycles() {
	local n=$1
	shift
	RUN=$("$DRIVER" -p "$PROXY_PORT" -n "$n" -c 32 -m "${MODE:-mix}" -w 30 \
	    -T 120 "$@")
	echo "cycles $n: $RUN"
	[ "$(jq .cycles <<<"$RUN")" = "$n" ]
	[ "$(jq .errors <<<"$RUN")" = 0 ]
	[ "$(jq .unexpected <<<"$RUN")" = 0 ]
	# a capacity refusal (the burst outran the engines' stats) is rare;
	# slots that were never freed would refuse nearly every cycle
	[ $(($(jq .refused <<<"$RUN") * 20)) -le "$n" ]
}

# idle: sg-proxy has no request in flight and no reservation, A no
# running or queued request and B only its held slots (bounded wait).
idle() {
	local i s a b
	for i in $(seq 1 100); do
		s=$(curl -sS --max-time 5 "$PROXY_URL/debug/state")
		a=$(estats A | jq -c '[.running, .queued]')
		b=$(estats B | jq -c '[.running, .queued]')
		if [ "$(jq '.inflight' <<<"$s")" = 0 ] &&
		    [ "$(jq '[.clusters[].reservations] | add' <<<"$s")" = 0 ] &&
		    [ "$a" = '[0,0]' ] && [ "$b" = "[$BHELD,0]" ]; then
			return 0
		fi
		sleep 0.1
	done
	echo "not idle: proxy $(jq -c '{inflight, r: [.clusters[].reservations]}' <<<"$s") A $a B $b"
	return 1
}

fds() {
	find "/proc/$PROXY_PID/fd" -mindepth 1 -maxdepth 1 | wc -l
}

@test "disconnect cycles (mid-body, mid-stream, during a routing wait) free every engine slot and reservation, fds exact and RSS flat after the warm-up" {
	local n=${DISCONNECT_CYCLES:-10000} fd0 rss0 fd1 rss1 t0 t1 w499 a499 ref tol
	router_stack
	cycles 300 "${H[@]}" "${W[@]}"
	idle
	w499=$(jq .wait <<<"$RUN") a499=$(jq '.stream - .refused' <<<"$RUN")
	ref=$(jq .refused <<<"$RUN")
	fd0=$(fds) rss0=$(rss_kb "$PROXY_PID")
	t0=$EPOCHREALTIME
	cycles "$n" "${H[@]}" "${W[@]}"
	t1=$EPOCHREALTIME
	idle
	fd1=$(fds) rss1=$(rss_kb "$PROXY_PID")
	w499=$((w499 + $(jq .wait <<<"$RUN")))
	a499=$((a499 + $(jq '.stream - .refused' <<<"$RUN")))
	ref=$((ref + $(jq .refused <<<"$RUN")))
	tol=$((rss0 / 10 > 4096 ? rss0 / 10 : 4096))
	echo "cycles=$n seconds=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') fds $fd0 -> $fd1, rss $rss0 -> $rss1 KiB (tolerance $tol KiB), refused $ref"
	# no request waited out its wait: every waiting client left first
	[ "$(jq .answered <<<"$RUN")" = 0 ]
	# every leaver that became a request is counted 499, once
	METRICS=$(metrics)
	[ "$(msum stargate_requests_total 'status="499"' 'inference_server_id=""')" = "$w499" ]
	[ "$(msum stargate_requests_total 'status="499"' 'inference_server_id="A"')" = "$a499" ]
	[ "$(msum stargate_requests_total)" = $((w499 + a499 + ref)) ]
	# the waiting requests never reached an engine; the streams all did
	[ "$(seen_n B)" = 0 ]
	[ "$(seen_n A)" = "$a499" ]
	[ "$fd1" = "$fd0" ]
	[ "$rss1" -le $((rss0 + tol)) ]
	# and the proxy still serves: B drains, a returning session goes there
	release B
	settle
	req -H "x-cache-affinity-key: $AKEY" -H 'x-stargate-last-cluster-id: B' \
	    -H 'x-input-tokens: 10' -H 'x-output-tokens: 2'
	[ "$STATUS" = 200 ] || { show; return 1; }
	[ "$CLUSTER" = B ]
}

@test "all role: disconnect cycles (mid-body, mid-stream) free every engine slot and reservation, fds exact and RSS flat after the warm-up" {
	local n=${DISCONNECT_CYCLES_ALL:-3000} fd0 rss0 fd1 rss1 s499 ref tol body
	BHELD=0
	start_role proxy-all all --clusters "$T/clusters.json" \
	    --lb-config "$T/lb.json"
	PROXY_URL=$ROLE_URL PROXY_PORT=${ROLE_URL##*:} PROXY_PID=$ROLE_PID
	body=$(cbody acme/dummy-model '{"stream": true}')
	MODE=nowait cycles 300 -B "$body"
	idle
	s499=$(jq '.stream - .refused' <<<"$RUN") ref=$(jq .refused <<<"$RUN")
	fd0=$(fds) rss0=$(rss_kb "$PROXY_PID")
	MODE=nowait cycles "$n" -B "$body"
	idle
	fd1=$(fds) rss1=$(rss_kb "$PROXY_PID")
	s499=$((s499 + $(jq '.stream - .refused' <<<"$RUN")))
	ref=$((ref + $(jq .refused <<<"$RUN")))
	tol=$((rss0 / 10 > 4096 ? rss0 / 10 : 4096))
	echo "all role: cycles=$n refused=$ref fds $fd0 -> $fd1, rss $rss0 -> $rss1 KiB (tolerance $tol KiB)"
	METRICS=$(metrics)
	[ "$(msum stargate_requests_total 'status="499"')" = "$s499" ]
	[ "$(msum stargate_requests_total)" = $((s499 + ref)) ]
	[ $(($(seen_n A) + $(seen_n B))) = "$s499" ]
	[ "$fd1" = "$fd0" ]
	[ "$rss1" -le $((rss0 + tol)) ]
	GW_URL=$ROLE_URL creq "$(cbody acme/dummy-model '{"max_tokens": 2}')"
	[ "$STATUS" = 200 ] || { cat "$T/h"; echo "$BODY"; return 1; }
}
