#!/usr/bin/env bats
# proxy-retry.bats — retries (SPEC §6, ref §6.3 adapted): a cluster whose
# engine refuses connections, or answers 429/503 with
# x-stargate-retryable: true, is excluded and the algorithm decides again;
# the request succeeds on another cluster and stargate_proxy_retries_total
# counts it.  Anything else (a 500, a 503 without the mark) passes through
# unchanged.  The retry budget is --max-retries.
#
# The routing is made deterministic with pulsar and the cache affinity key
# s-30, which ranks A before B (equal weights), so every request tries A
# first.  Faulty engines are tests/fixtures/proxy/fault_engine.py, which
# serves fresh /stats while it fails the requests.

bats_require_minimum_version 1.5.0

load proxy_helpers

setup() {
	proxy_setup
}

teardown() {
	proxy_teardown
}

KEY="x-cache-affinity-key: $AKEY"

@test "a cluster that refuses connections is excluded and the request succeeds on another" {
	# A's engine URL is a closed port; its stats come from a live engine
	# (S, not itself a cluster) so A stays a fresh candidate.
	start_engine S -c 4
	start_engine B -c 4 -t 1 --decode-tps 1000
	local dead
	dead=$(free_port)
	write_clusters "$T/clusters.json" \
	    "$(jq -nc --arg u "http://127.0.0.1:$dead" --arg s "$(eurl S)/stats" \
	        '{id: "A", url: $u, models: ["dummy-model"], stats: {format: "stargate", url: $s}}')" \
	    "$(cl_entry B)"
	lb_simple pulsar
	start_proxy
	reset_seen B
	local i
	for i in 1 2 3; do
		req -H "$KEY"
		[ "$STATUS" = 200 ] || { show; return 1; }
		[ "$CLUSTER" = B ] || { show; return 1; }
	done
	[ "$(seen_n B)" = 3 ]
	METRICS=$(metrics)
	grep '^stargate_proxy_retries_total' <<<"$METRICS" || true
	[ "$(msum stargate_proxy_retries_total 'model="dummy-model"')" = 3 ]
}

# retryable STATUS: A answers STATUS with x-stargate-retryable: true.
retryable() {
	start_fault A --mode status --status "$1" \
	    --header 'x-stargate-retryable: true' \
	    --header 'x-stargate-retry-reason: engine_busy' \
	    --body '{"error":{"message":"busy","type":"overloaded_error"}}'
	start_engine B -c 4 -t 1 --decode-tps 1000
	clusters A B
	lb_simple pulsar
	start_proxy
	reset_seen A B
	[ "$(msum stargate_proxy_retries_total)" = 0 ]
	local i
	for i in 1 2; do
		req -H "$KEY"
		[ "$STATUS" = 200 ] || { show; return 1; }
		[ "$CLUSTER" = B ] || { show; return 1; }
		[ "$(jq -r .object <<<"$BODY")" = chat.completion ]
		# retry metadata never reaches the client
		[ -z "$(hdr x-stargate-retryable)" ]
		[ -z "$(hdr x-stargate-retry-reason)" ]
	done
	[ "$(seen_n A)" = 2 ]
	[ "$(seen_n B)" = 2 ]
	METRICS=$(metrics)
	grep '^stargate_proxy_retries_total' <<<"$METRICS" || true
	[ "$(msum stargate_proxy_retries_total 'model="dummy-model"')" = 2 ]
}

@test "an engine answering 503 with x-stargate-retryable: true is retried on another cluster and counted" {
	retryable 503
}

@test "an engine answering 429 with x-stargate-retryable: true is retried on another cluster and counted" {
	retryable 429
}

@test "a retried request reaches the next cluster with the same body" {
	start_fault A --mode status --status 503 --header 'x-stargate-retryable: true'
	start_fault B --mode ok
	clusters A B
	lb_simple pulsar
	start_proxy
	local body
	body=$(head -c 30000 /dev/urandom | base64 -w 76 | jq -Rsc '{model: "dummy-model", messages: [{role: "user", content: .}]}')
	REQ_BODY=$body req -H "$KEY"
	[ "$STATUS" = 200 ] || { show; return 1; }
	[ "$CLUSTER" = B ]
	local want
	want=$(printf '%s' "$body" | sha256sum | cut -d' ' -f1)
	[ "$(curl -sS --max-time 5 "$(eurl A)/control/events" | jq -r .last_body_sha256)" = "$want" ]
	[ "$(curl -sS --max-time 5 "$(eurl B)/control/events" | jq -r .last_body_sha256)" = "$want" ]
}

@test "a non-retryable 500 passes through unchanged, status, headers and body" {
	local body='{"error":{"message":"boom","type":"server_error","code":"internal"}}'
	start_fault A --mode status --status 500 --header 'x-engine-note: kept' --body "$body"
	start_engine B -c 4 -t 1 --decode-tps 1000
	clusters A B
	lb_simple pulsar
	start_proxy
	reset_seen A B
	req -H "$KEY"
	[ "$STATUS" = 500 ] || { show; return 1; }
	[ "$BODY" = "$body" ] || { show; return 1; }
	[ "$(hdr x-engine-note)" = kept ]
	[ "$CLUSTER" = A ]
	[ "$(seen_n A)" = 1 ]
	[ "$(seen_n B)" = 0 ]
	[ "$(msum stargate_proxy_retries_total)" = 0 ]
}

@test "a 503 without the retryable mark is not retried" {
	local body='{"error":{"message":"down","type":"overloaded_error"}}'
	start_fault A --mode status --status 503 --body "$body"
	start_engine B -c 4 -t 1 --decode-tps 1000
	clusters A B
	lb_simple pulsar
	start_proxy
	reset_seen A B
	req -H "$KEY"
	[ "$STATUS" = 503 ] || { show; return 1; }
	[ "$BODY" = "$body" ]
	[ "$(seen_n B)" = 0 ]
	[ "$(msum stargate_proxy_retries_total)" = 0 ]
}

@test "retries stop at --max-retries; the last answer passes through without the retry headers" {
	local id
	for id in A B C; do
		start_fault "$id" --mode status --status 503 \
		    --header 'x-stargate-retryable: true' \
		    --body '{"error":{"message":"busy","type":"overloaded_error"}}'
	done
	clusters A B C
	lb_simple pulsar
	start_proxy --max-retries 1
	reset_seen A B C
	req -H "$KEY"
	show
	[ "$STATUS" = 503 ]
	[ -z "$(hdr x-stargate-retryable)" ]
	# one attempt plus one retry
	[ $(($(seen_n A) + $(seen_n B) + $(seen_n C))) = 2 ]
	METRICS=$(metrics)
	[ "$(msum stargate_proxy_retries_total)" = 1 ]
	[ "$(msum stargate_proxy_retry_exhausted_total)" -ge 1 ]
}
