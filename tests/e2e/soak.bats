#!/usr/bin/env bats
# soak.bats — issue 12, the soak at moderate load with flat RSS and file
# descriptors, short variant: tools/soak/run for 25 s against one
# sg-proxy --role all (LMDB last-cluster store) and one --role router in
# front of two sg-mockengine clusters: unary, streamed, multi-turn session
# (prompt_cache_key, x-multi-turn-session-id, x-cache-affinity-key) and
# disconnecting clients.  The RSS and descriptor bounds are the tool's own
# (tools/soak/README); the 10-minute run is `tools/soak/run` with its
# defaults, outside make test.
#
# On a sanitizer build the ASan quarantine (freed blocks held back to find
# use-after-free) grows the resident set for its first hundreds of MiB,
# which is not the proxy's: it is turned off here (quarantine_size_mb=0).

bats_require_minimum_version 1.5.0

load proxy_helpers

setup() {
	proxy_setup
	SOAK=$TOP/tools/soak/run
}

teardown() {
	proxy_teardown
}

# sanitizer reports in the soak's proxies' stderr fail the test
san_clean() {
	local f bad=0
	for f in "$T"/soak/proxy-*.err; do
		[ -f "$f" ] || continue
		if grep -qE 'AddressSanitizer|LeakSanitizer|runtime error:' "$f"; then
			grep -E -A30 'AddressSanitizer|LeakSanitizer|runtime error:' \
			    "$f" | head -60
			bad=1
		fi
	done
	return "$bad"
}

@test "soak, short variant: 25 s of mixed load (unary, SSE, sessions, disconnects) on the all role with an LMDB store and the router role: RSS and fds flat after warm-up, every answer 2xx" {
	ASAN_OPTIONS="$ASAN_OPTIONS:quarantine_size_mb=0" \
	    run timeout 120 "$SOAK" -b "$BIN" -d 25 -i 1 --warmup 8 \
	    --roles all,router --workdir "$T/soak" --keep --csv "$T/soak.csv"
	echo "$output" | tail -25
	[ "$status" -eq 0 ]
	[[ $output == *"soak: ok"* ]]
	# the curve was sampled all along: a line per second, both proxies
	[ "$(wc -l <"$T/soak.csv")" -ge 20 ]
	head -1 "$T/soak.csv" | grep -q "all_rss_kb,all_fds,all_live,router_rss_kb,router_fds,router_live"
	# load went to every kind on both roles
	local k
	for k in "all unary 200" "all stream 200" "all session 200" \
	    "router unary 200" "router stream 200" "router session 200" \
	    disconnect; do
		grep -qE "^  $k +[1-9]" <<<"$output" || { echo "no '$k'"; false; }
	done
	san_clean
}

@test "soak: a proxy that grows past the RSS bound fails the run (the check can fail)" {
	# the same run with a bound nobody meets: -1 KiB of growth allowed
	run timeout 60 "$SOAK" -b "$BIN" -d 8 -i 1 --warmup 2 --roles router \
	    --rss-bound-kb -1 --rss-bound-pct -1 --fd-slack -1 \
	    --workdir "$T/soak" --keep
	echo "$output" | tail -12
	[ "$status" -eq 1 ]
	[[ $output == *"soak: FAIL: router: descriptors grew"* ]] ||
	    [[ $output == *"soak: FAIL: router: RSS grew"* ]]
}
