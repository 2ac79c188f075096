#!/usr/bin/env bats
# allocfail.bats — issue 12, allocation failure injection: every allocation
# one request makes on sg-proxy's request path is made to fail, one at a
# time, and each time the client gets a clean answer, the process lives and
# serves the next request normally, and nothing leaks.
#
# tools/allocfail/allocfail.so (built by `make build` into $O/lib/) is
# preloaded into sg-proxy only (a wrapper script execs it with LD_PRELOAD
# and ALLOCFAIL_CTL, so curl and the engines never load it), and
# tools/allocfail/walk.py drives it through the shared control file: warm
# up, check the live allocation count is steady, count the allocations of
# one request (N), then for k = 1 .. N+3 fail the k-th, classify the
# answer, send a plain probe, and compare the live count with the step
# before (a rise is replayed; rising on every replay is a leak).  The
# answer classes, and which of them fail a test, are in walk.py's header
# and tools/allocfail/README.  Every request is bounded (5 s); one proxy
# serves the whole walk of a test.
#
# The stats poller polls once a minute here (stats_interval_ms 60000,
# stale after an hour) so that the allocations counted are the request's.
#
# The front end is sg-proxy's own server (bin/sg-proxy/h1s.c): an
# allocation it cannot make while taking a connection or a request in
# closes that connection (walk.py --front-end), which passes; every other
# answer class is judged as for the program's code.  The native server
# and its pools allocate little per request (a few allocations for a
# routed request, none for /metrics once warm), so each test states the
# least count it expects and the walk must inject a failure at every k
# up to the largest count.
# With a sanitizer build the shim goes in front of libasan's allocator
# (ASAN_OPTIONS verify_asan_link_order=0), so ASan watches the failure
# paths too.

bats_require_minimum_version 1.5.0

load proxy_helpers

FRONT=(--front-end h1s.c)

setup() {
	proxy_setup
	SHIM=$(cd "$BIN/.." && pwd)/lib/allocfail.so
	if [ ! -f "$SHIM" ]; then
		echo "no $SHIM (make O=... build builds it)"
		return 1
	fi
	WALK=$TOP/tools/allocfail/walk.py
	CTL=$T/allocfail.ctl
	local asan= lsan=${LSAN_OPTIONS:-}
	if ldd "$BIN/sg-proxy" 2>/dev/null | grep -q libasan; then
		asan=":verify_asan_link_order=0"
		lsan="${lsan:+$lsan:}suppressions=$TOP/tools/allocfail/lsan.supp:print_suppressions=0"
	fi
	cat >"$T/sg-proxy-af" <<-EOF
	#!/bin/sh
	ASAN_OPTIONS="$ASAN_OPTIONS$asan" LSAN_OPTIONS="$lsan" \
	    LD_PRELOAD="$SHIM" ALLOCFAIL_CTL="$CTL" exec "$BIN/sg-proxy" "\$@"
	EOF
	chmod +x "$T/sg-proxy-af"
	PROXY=$T/sg-proxy-af
	start_engine A -t 4 --decode-tps 100000 --prefill-tps 1000000
	CL_INTERVAL=60000 CL_STALE=3600000 clusters A
}

teardown() {
	proxy_teardown
}

H=(-H 'content-type: application/json' -H 'x-model: dummy-model'
    -H 'x-input-tokens: 100')

# walk NAME MIN [walk.py options]: walk the running proxy, whose request
# makes at least MIN allocations; the output is in $T/walk.out (printed
# on failure); checks that a failure was injected at every k up to the
# largest count.
walk() {
	local name=$1 min=$2 rc=0
	shift 2
	"$PY" "$WALK" walk --ctl "$CTL" --pid "$PROXY_PID" --url "$PROXY_URL" \
	    --name "$name" --timeout 5 --json "$T/walk.json" "${FRONT[@]}" \
	    "$@" >"$T/walk.out" 2>&1 || rc=$?
	cat "$T/walk.out"
	[ "$rc" = 0 ] || return 1
	alive "$PROXY_PID" || { echo "sg-proxy is gone"; return 1; }
	# the walk reached every allocation: the request made at least MIN,
	# and a failure was injected at each k up to the largest count
	jq -e --argjson min "$min" '(.counts | min) >= $min and
	    ([.steps[] | select(.injected > 0)] | length) >= (.counts | max)' \
	    "$T/walk.json" >/dev/null ||
	    { echo "too few allocations walked (at least $min expected)"; return 1; }
}

@test "allocfail shim: counts allocations, fails the Nth one after arming (and every one after it with a run), keeps the live count" {
	local out
	# ls(1) allocates: armed from the start, the first allocation failing
	# with every later one is "memory exhausted"
	run env LD_PRELOAD="$SHIM" ALLOCFAIL_ARM=1 ALLOCFAIL_NTH=1 \
	    ALLOCFAIL_RUN=18446744073709551615 ls -l /
	[ "$status" -ne 0 ] || { echo "ls did not see a failure"; false; }
	[[ $output == *"memory exhausted"* ]] || { echo "$output"; false; }
	# counting only: ls succeeds, and the control file says how many
	run -0 env LD_PRELOAD="$SHIM" ALLOCFAIL_ARM=1 ALLOCFAIL_CTL="$T/ls.ctl" \
	    ls -l /
	out=$("$PY" "$WALK" status --ctl "$T/ls.ctl")
	echo "$out"
	jq -e '.count > 10 and .injected == 0 and .total >= .count' \
	    <<<"$out" >/dev/null
	# not armed: nothing counted as armed, nothing failed
	run -0 env LD_PRELOAD="$SHIM" ALLOCFAIL_NTH=1 ALLOCFAIL_CTL="$T/ls2.ctl" \
	    ls -l /
	out=$("$PY" "$WALK" status --ctl "$T/ls2.ctl")
	jq -e '.count == 0 and .injected == 0 and .total > 10' <<<"$out" >/dev/null
}

@test "allocation failures, router role, unary POST /v1/chat/completions: each allocation failed in turn gets a clean answer, the proxy serves the next request, no leak" {
	start_proxy
	walk unary 1 -X POST --path /v1/chat/completions "${H[@]}" -d "$CHAT" \
	    --check json
}

@test "allocation failures, router role, streaming (SSE) POST /v1/chat/completions: a clean answer or a cut stream, never a stream with a hole, no leak" {
	start_proxy
	walk stream 1 -X POST --path /v1/chat/completions "${H[@]}" -d "$SCHAT" \
	    --check sse
}

@test "allocation failures, --role all with the LMDB last-cluster store (lookup, rewrite, store write on its thread): clean answers, no leak" {
	local b
	b=$(cbody acme/dummy-model '{"prompt_cache_key": "pck-allocfail"}')
	start_proxy --role all --last-cluster true --last-cluster-store "$T/store"
	walk all 4 -X POST --path /v1/chat/completions \
	    -H 'content-type: application/json' -d "$b" --check json
	# the store kept working through it: the key maps to the one cluster
	run -0 "$BIN/sg-lastcluster" -d "$T/store" list
	[[ $output == *A* ]] || { echo "$output"; false; }
}

@test "allocation failures, GET /metrics: a complete exposition or a 500, no leak" {
	start_proxy
	walk metrics 0 --path /metrics --check text
}

@test "allocation failures, memory exhausted from the k-th allocation on (every later one fails too), unary: never a crash, a hang or a leak, the next request is served" {
	start_proxy
	walk exhausted 1 -X POST --path /v1/chat/completions "${H[@]}" -d "$CHAT" \
	    --check json --run 1000000
}
