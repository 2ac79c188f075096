#!/usr/bin/env bats
# proxy-headers.bats — the header contract at the router's upstream edge:
# x-stargate-last-cluster-id is consumed and never forwarded to an engine,
# for every algorithm and either value of last_cluster_affinity; so are
# x-routing-method, hop-by-hop headers and the caller's internal
# x-stargate-* retry headers, while the routing headers (x-model,
# x-input-tokens, x-cache-affinity-key, ...) are forwarded.  What reached
# each engine is read from its /control/seen-headers counters.

bats_require_minimum_version 1.5.0

load proxy_helpers

setup() {
	proxy_setup
}

teardown() {
	proxy_teardown
}

ALGOS="random round-robin power-of-n wait-and-widen pulsar pulsar-wait-and-widen"

# lb_all FLAG: dummy-model routed by wait-and-widen (k 1) with
# last_cluster_affinity FLAG; its request_algorithms hold a
# pulsar-wait-and-widen with the same flag and the four others, so each of
# the six x-routing-method values resolves to a definition, and both
# session-aware ones carry the flag.
lb_all() {
	jq -n --argjson f "$1" '{default: "power-of-n", models: {"dummy-model": {
	    algorithm: "wait-and-widen", cache_affinity_backend_selection_count: 1,
	    cache_affinity_wait_ms: 100, last_cluster_affinity: $f,
	    request_algorithms: {
	        "pulsar-wait-and-widen": {algorithm: "pulsar-wait-and-widen",
	            cache_affinity_backend_selection_count: 1,
	            cache_affinity_wait_ms: 100, last_cluster_affinity: $f},
	        random: "random", "round-robin": "round-robin",
	        "power-of-n": "power-of-n", pulsar: "pulsar"}}}}' >"$T/lb.json"
}

# never_forwarded FLAG: send, for every algorithm, requests with a
# returning hint (B), a stale hint (Z) and an empty one, then check that no
# engine saw the hint header or x-routing-method, and that both saw the
# routing headers.
never_forwarded() {
	start_engine A -c 4 -t 1 --decode-tps 1000
	start_engine B -c 4 -t 1 --decode-tps 1000
	clusters A B
	lb_all "$1"
	start_proxy
	reset_seen A B
	local a hint n=0
	for a in $ALGOS; do
		for hint in 'x-stargate-last-cluster-id: B' \
		    'x-stargate-last-cluster-id: Z' 'x-stargate-last-cluster-id;'; do
			req -H "x-routing-method: $a" -H "x-cache-affinity-key: k-$n" \
			    -H "$hint" || { show; return 1; }
			[ "$STATUS" = 200 ] || { echo "algorithm $a hint '$hint'"; show; return 1; }
			[[ $CLUSTER == [AB] ]] || { show; return 1; }
			n=$((n + 1))
		done
	done
	seen A >"$T/seen-A.json"
	seen B >"$T/seen-B.json"
	cat "$T/seen-A.json" "$T/seen-B.json"
	# Every request reached an engine, and only once.
	[ $(($(jq .requests "$T/seen-A.json") + $(jq .requests "$T/seen-B.json"))) = "$n" ]
	local f
	for f in "$T/seen-A.json" "$T/seen-B.json"; do
		[ "$(jq '.headers | has("x-stargate-last-cluster-id")' "$f")" = false ]
		[ "$(jq '.headers | has("x-routing-method")' "$f")" = false ]
		# An engine that got requests got the routing headers with each.
		[ "$(jq '.requests == 0 or (.headers["x-model"] == .requests and
		    .headers["x-input-tokens"] == .requests and
		    .headers["x-cache-affinity-key"] == .requests and
		    .headers["x-request-id"] == .requests)' "$f")" = true ]
	done
}

@test "x-stargate-last-cluster-id never reaches an engine, any algorithm, flag on" {
	never_forwarded true
}

@test "x-stargate-last-cluster-id never reaches an engine, any algorithm, flag off" {
	never_forwarded false
}

@test "internal and hop-by-hop request headers are stripped, the others forwarded" {
	start_engine A -c 4 -t 1 --decode-tps 1000
	clusters A
	start_proxy
	reset_seen A
	req -H 'x-routing-key: tenant-1' -H 'x-priority: 3' -H 'x-request-slo-ms: 5000' \
	    -H 'x-max-wait-ms: 5000' -H 'x-cache-affinity-key: k' \
	    -H 'x-stargate-retryable: true' -H 'x-stargate-retry-reason: spoofed' \
	    -H 'x-stargate-retry-after-ms: 5' -H 'x-stargate-error-code: spoofed' \
	    -H 'x-stargate-last-cluster-id: A' -H 'x-routing-method: random' \
	    -H 'proxy-connection: keep-alive' -H 'keep-alive: timeout=5' \
	    -H 'x-custom-app: 1'
	[ "$STATUS" = 200 ] || { show; return 1; }
	[ "$CLUSTER" = A ]
	run -0 seen A
	echo "$output"
	[ "$(jq -r .requests <<<"$output")" = 1 ]
	local h
	for h in x-stargate-retryable x-stargate-retry-reason x-stargate-retry-after-ms \
	    x-stargate-error-code x-stargate-last-cluster-id x-routing-method \
	    proxy-connection keep-alive; do
		[ "$(jq --arg h "$h" '.headers | has($h)' <<<"$output")" = false ] ||
		    { echo "$h was forwarded"; return 1; }
	done
	for h in x-routing-key x-priority x-request-slo-ms x-max-wait-ms \
	    x-cache-affinity-key x-model x-input-tokens x-request-id x-custom-app; do
		[ "$(jq --arg h "$h" '.headers[$h]' <<<"$output")" = 1 ] ||
		    { echo "$h was not forwarded once"; return 1; }
	done
}

@test "the caller's internal header values never reach the engine (values checked on a scripted engine)" {
	start_fault A --mode ok
	clusters A
	start_proxy
	req -H 'x-stargate-expected-queue-ms: 99999' -H 'x-stargate-retryable: true' \
	    -H 'x-stargate-last-cluster-id: A' -H 'x-cache-affinity-key:  raw key 1 ' \
	    -H 'x-routing-key: rk/1'
	[ "$STATUS" = 200 ] || { show; return 1; }
	run -0 curl -sS --max-time 5 "$(eurl A)/control/last-headers"
	echo "$output"
	# The proxy may add its own queue estimate, never the caller's.
	[ "$(jq -r '."x-stargate-expected-queue-ms" // "absent"' <<<"$output")" != 99999 ]
	[ "$(jq 'has("x-stargate-retryable")' <<<"$output")" = false ]
	[ "$(jq 'has("x-stargate-last-cluster-id")' <<<"$output")" = false ]
	[ "$(jq -r '."x-model"' <<<"$output")" = dummy-model ]
	# routing headers reach the engine as the client sent them (the
	# engine's KV cache is keyed by the raw affinity key)
	[ "$(jq -r '."x-cache-affinity-key"' <<<"$output")" = 'raw key 1' ]
	[ "$(jq -r '."x-routing-key"' <<<"$output")" = rk/1 ]
	[ "$(jq -r '."x-input-tokens"' <<<"$output")" = 100 ]
}

@test "responses carry x-stargate-cluster-id and the engine's own headers" {
	start_engine A -c 4 -t 1 --decode-tps 1000
	clusters A
	start_proxy
	req -H 'x-cache-affinity-key: k1'
	[ "$STATUS" = 200 ] || { show; return 1; }
	[ "$CLUSTER" = A ]
	[ "$(hdr x-kv-cache-hit)" = false ]
	[ "$(jq -r .object <<<"$BODY")" = chat.completion ]
	# exactly one cluster id header
	[ "$(tr -d '\r' <"$T/h" | grep -ci '^x-stargate-cluster-id:')" = 1 ]
}
