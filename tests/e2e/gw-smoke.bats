#!/usr/bin/env bats
# gw-smoke.bats — quick checks of sg-proxy's gateway stage (--role all and
# --role gateway in front of --role router) on loopback: trusted headers,
# the body's model rewrite and the public id back, the last-cluster store
# (hint on the second request, write on 2xx only, payload sessions
# skipped), header hygiene toward the client, 529, the API-key allowlist.
# The acceptance suites are tests/e2e/gateway-*.bats.

bats_require_minimum_version 1.5.0

load proxy_helpers

setup() {
	proxy_setup
	PCHAT='{"model":"acme/dummy-model","prompt_cache_key":"sess-1","messages":[{"role":"user","content":"hello there"}]}'
}

teardown() {
	proxy_teardown
}

# gw_start TAG [sg-proxy options]: a --role gateway process (no cluster
# file); sets GW_URL.
gw_start() {
	local tag=$1 i
	shift
	rm -f "$T/$tag.port"
	"$PROXY" --role gateway --listen 127.0.0.1:0 --port-file "$T/$tag.port" \
	    "$@" >"$T/$tag.out" 2>"$T/$tag.err" 3>&- &
	PIDS+=("$!")
	for i in $(seq 1 100); do
		[ -s "$T/$tag.port" ] && break
		sleep 0.1
	done
	[ -s "$T/$tag.port" ] || { cat "$T/$tag.err"; return 1; }
	GW_URL=http://127.0.0.1:$(cat "$T/$tag.port")
}

# post URL BODY [curl args]: POST to URL/v1/chat/completions; the head
# goes to $T/h, the body to $BODY, the status to $STATUS.
post() {
	local url=$1 body=$2
	shift 2
	STATUS=$(curl -sS --max-time 10 -D "$T/h" -o "$T/b" -w '%{http_code}' \
	    -H 'content-type: application/json' "$@" \
	    --data-binary "$body" "$url/v1/chat/completions") || STATUS=000
	BODY=$(cat "$T/b")
}

gmetric() {	# URL NAME RESULT
	curl -sS --max-time 5 "$1/metrics" |
	    awk -v k="$2{result=\"$3\"}" '$1 == k { print $2 }'
}

@test "gateway: client trusted headers are removed and replaced (all role, feature off)" {
	start_fault A
	clusters A
	start_proxy --role all
	post "$PROXY_URL" "$PCHAT" -H 'x-routing-key: evil' -H 'x-priority: 0' \
	    -H 'x-stargate-last-cluster-id: A' -H 'x-cache-affinity-key: mt:v1:x:y' \
	    -H 'x-model: other' -H 'x-input-tokens: 999999' -H 'x-request-id: rid-7'
	[ "$STATUS" = 200 ] || { show; false; }
	run -0 curl -sS --max-time 5 "$(eurl A)/control/last-headers"
	echo "$output"
	[ "$(jq -r '."x-routing-key"' <<<"$output")" = acme ]
	[ "$(jq -r '."x-model"' <<<"$output")" = dummy-model ]
	[ "$(jq -r '."x-request-id"' <<<"$output")" = rid-7 ]
	[ "$(jq -r '."x-priority" // "absent"' <<<"$output")" = absent ]
	[ "$(jq -r '."x-stargate-last-cluster-id" // "absent"' <<<"$output")" = absent ]
	[[ $(jq -r '."x-cache-affinity-key"' <<<"$output") == mt:v1:session:* ]]
	[ "$(jq -r '."x-input-tokens"' <<<"$output")" != 999999 ]
	[ "$(hdr x-request-id)" = rid-7 ]
	[ "$(hdr x-multi-turn-session-id)" = sess-1 ]
	[ -z "$(hdr x-stargate-cluster-id)" ]
}

@test "gateway: the body's model is rewritten to the routed model, byte for byte otherwise" {
	start_fault A
	clusters A
	start_proxy --role all
	post "$PROXY_URL" "$PCHAT"
	[ "$STATUS" = 200 ] || { show; false; }
	local want
	want=$(printf '%s' "${PCHAT/acme\/dummy-model/dummy-model}" | sha256sum | cut -d' ' -f1)
	run -0 curl -sS --max-time 5 "$(eurl A)/control/events"
	[ "$(jq -r .last_body_sha256 <<<"$output")" = "$want" ] || { echo "$output"; false; }
}

@test "gateway: responses carry the public model id back, unary and streamed" {
	start_engine A
	clusters A
	start_proxy --role all
	post "$PROXY_URL" "$PCHAT"
	[ "$STATUS" = 200 ] || { show; false; }
	[ "$(jq -r .model <<<"$BODY")" = acme/dummy-model ]
	post "$PROXY_URL" "${PCHAT/\"messages\"/\"stream\":true,\"messages\"}"
	[ "$STATUS" = 200 ] || { show; false; }
	local models
	models=$(grep '^data: {' "$T/b" | sed 's/^data: //' | jq -r .model | sort -u)
	[ "$models" = acme/dummy-model ] || { cat "$T/b"; false; }
	grep -q '^data: \[DONE\]' "$T/b"
}

@test "gateway: second request of a prompt_cache_key session carries the first one's cluster (all role, LMDB)" {
	start_fault A
	start_fault B
	clusters A B
	start_proxy --role all --last-cluster true --last-cluster-store "$T/store"
	post "$PROXY_URL" "$PCHAT"
	[ "$STATUS" = 200 ] || { show; false; }
	[ "$(gmetric "$PROXY_URL" llm_api_gateway_last_cluster_lookups_total miss)" = 1 ]
	local first n
	first=A
	[ "$(seen_n A)" = 1 ] || first=B
	for n in $(seq 1 50); do
		[ "$(gmetric "$PROXY_URL" llm_api_gateway_last_cluster_writes_total ok)" = 1 ] && break
		sleep 0.1
	done
	[ "$(gmetric "$PROXY_URL" llm_api_gateway_last_cluster_writes_total ok)" = 1 ]
	run -0 "$BIN/sg-lastcluster" -d "$T/store" list
	[[ $output == *"$first"* ]] || { echo "$output"; false; }
	post "$PROXY_URL" "$PCHAT"
	[ "$STATUS" = 200 ]
	[ "$(gmetric "$PROXY_URL" llm_api_gateway_last_cluster_lookups_total hit)" = 1 ]
	[ "$(gmetric "$PROXY_URL" llm_api_gateway_last_cluster_lookups_total error)" = 0 ]
	[ "$(gmetric "$PROXY_URL" llm_api_gateway_last_cluster_lookups_total timeout)" = 0 ]
}

@test "gateway: payload sessions are skipped (no lookup, no write)" {
	start_fault A
	clusters A
	start_proxy --role all --last-cluster true --last-cluster-store "$T/store"
	post "$PROXY_URL" "$CHAT"
	[ "$STATUS" = 400 ]	# "dummy-model" has no routing key
	post "$PROXY_URL" '{"model":"acme/dummy-model","messages":[{"role":"user","content":"x"}]}'
	[ "$STATUS" = 200 ] || { show; false; }
	[ "$(gmetric "$PROXY_URL" llm_api_gateway_last_cluster_lookups_total skipped)" = 1 ]
	[ "$(gmetric "$PROXY_URL" llm_api_gateway_last_cluster_lookups_total miss)" = 0 ]
	sleep 0.3
	[ "$(gmetric "$PROXY_URL" llm_api_gateway_last_cluster_writes_total ok)" = 0 ]
}

@test "gateway: a non-2xx response writes nothing" {
	start_fault A --mode status --status 500 --body '{"error":"boom"}'
	clusters A
	start_proxy --role all --last-cluster true --last-cluster-store "$T/store"
	post "$PROXY_URL" "$PCHAT"
	[ "$STATUS" = 500 ] || { show; false; }
	sleep 0.3
	[ "$(gmetric "$PROXY_URL" llm_api_gateway_last_cluster_writes_total ok)" = 0 ]
	run -0 "$BIN/sg-lastcluster" -d "$T/store" list
	[[ $output != *A* ]] || { echo "$output"; false; }
}

@test "gateway role: hint across processes, x-stargate-* stripped, public id back" {
	start_engine A
	start_engine B
	clusters A B
	start_proxy --role router
	gw_start gw --router-url "$PROXY_URL" --last-cluster true \
	    --last-cluster-store "$T/store"
	post "$GW_URL" "$PCHAT"
	[ "$STATUS" = 200 ] || { show; false; }
	[ -z "$(hdr x-stargate-cluster-id)" ]
	! grep -qi '^x-stargate-\|^x-inference-server-' "$T/h"
	[ "$(jq -r .model <<<"$BODY")" = acme/dummy-model ]
	local i
	for i in $(seq 1 50); do
		[ "$(gmetric "$GW_URL" llm_api_gateway_last_cluster_writes_total ok)" = 1 ] && break
		sleep 0.1
	done
	post "$GW_URL" "$PCHAT"
	[ "$STATUS" = 200 ]
	[ "$(gmetric "$GW_URL" llm_api_gateway_last_cluster_lookups_total hit)" = 1 ]
}

@test "gateway: Stargate's 503 overloaded_error reaches the client as 529 without x-stargate-error-code" {
	clusters_dead() {
		jq -n --arg u "http://127.0.0.1:$(free_port)" \
		    '{stats_interval_ms: 50, stats_stale_ms: 1000, clusters: [{id: "D", url: $u, models: ["dummy-model"], stats: {format: "stargate"}}]}' \
		    >"$T/clusters.json"
	}
	clusters_dead
	PROXY_NOWAIT=1 start_proxy --role all
	post "$PROXY_URL" "$PCHAT"
	[ "$STATUS" = 529 ] || { show; false; }
	[ -z "$(hdr x-stargate-error-code)" ]
	[ "$(jq -r .error.code <<<"$BODY")" = overloaded_error ]
}

@test "gateway: --api-keys refuses a missing or unknown key with 401 and binds the key's routing key" {
	start_fault A
	clusters A
	printf '%s tenant-9 4\n' "$(printf 'sk-good' | sha256sum | cut -d' ' -f1)" >"$T/keys"
	start_proxy --role all --api-keys "$T/keys"
	post "$PROXY_URL" "$PCHAT"
	[ "$STATUS" = 401 ]
	[ "$(jq -r .error.code <<<"$BODY")" = invalid_api_key ]
	[ "$(jq -r .error.type <<<"$BODY")" = invalid_request_error ]
	post "$PROXY_URL" "$PCHAT" -H 'authorization: Bearer sk-bad'
	[ "$STATUS" = 401 ]
	post "$PROXY_URL" "${PCHAT/acme\//}" -H 'authorization: Bearer sk-good'
	[ "$STATUS" = 200 ] || { show; false; }
	run -0 curl -sS --max-time 5 "$(eurl A)/control/last-headers"
	[ "$(jq -r '."x-routing-key"' <<<"$output")" = tenant-9 ]
	[ "$(jq -r '."x-priority"' <<<"$output")" = 4 ]
	post "$PROXY_URL" "$PCHAT" -H 'authorization: Bearer sk-good'
	[ "$STATUS" = 400 ]	# acme is not the key's routing key
}
