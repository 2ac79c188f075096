#!/usr/bin/env bats
# gateway-session.bats — the gateway stage's last-cluster memory (issue 9
# §4; proposal "Gateway"): which sessions are looked up and remembered, what
# the router is told, and when the store is written.
#
# sg-proxy --role gateway (feature on, LMDB store $STORE) forwards to the
# recording tests/fixtures/gateway/fake_router.py, which answers with
# x-stargate-cluster-id: B unless a test scripts another answer.  What the
# gateway sent is read back from the fake router (/control/requests); what
# it stored is read with sg-lastcluster, under the key sg-classify computes
# for the same body (the library's one rule, so the test does not restate
# it).  Writes are asynchronous, so a test waits (bounded) for one to become
# visible before it sends the next turn, as a client's next turn would.

bats_require_minimum_version 1.5.0

load proxy_helpers

setup() {
	proxy_setup
	STORE=$T/store
	LCON=(--last-cluster true --last-cluster-store "$STORE")
	start_fake_router
}

teardown() {
	proxy_teardown
}

HINT=x-stargate-last-cluster-id

# turns BODY [curl options]: two requests of one session; the first must
# carry no hint and be remembered as B, the second must carry B.
turns() {
	local b=$1 key
	shift
	key=$(lc_key "$b" "${CLASSIFY_OPTS[@]}")
	[ -n "$key" ] || { echo "sg-classify gave no store key"; return 1; }
	creq "$b" "$@"
	[ "$STATUS" = 200 ] || { cat "$T/h"; echo "$BODY"; return 1; }
	rlacks 1 "$HINT"
	# the router's answer named B; the client never sees that header
	[ -z "$(hdr x-stargate-cluster-id)" ] || { cat "$T/h"; return 1; }
	lc_wait "$key" B
	creq "$b" "$@"
	[ "$STATUS" = 200 ] || { cat "$T/h"; echo "$BODY"; return 1; }
	[ "$(rhdr 2 "$HINT")" = B ] || { rreqs | jq -c '.requests[1].headers'; return 1; }
	# the session the router sees is the gateway's own derivation
	[ "$(rhdr 2 x-cache-affinity-key)" = "$(printf '%s' "$b" |
	    "$BIN/sg-classify" "${CLASSIFY_OPTS[@]}" - | jq -r .cache_affinity_key)" ]
	[ "$(rhdr 2 x-routing-key)" = acme ]
	[ "$(rhdr 2 x-model)" = dummy-model ]
}

@test "prompt_cache_key: the first request carries no hint, its response comes from B, the second carries x-stargate-last-cluster-id: B" {
	start_gateway "${LCON[@]}"
	CLASSIFY_OPTS=()
	turns "$(cbody acme/dummy-model '{"prompt_cache_key": "pck-1"}')"
	# the engine gets the name it serves
	[ "$(rreqs | jq -r '.requests[1].body.model')" = dummy-model ]
}

@test "conversation_id: the first Responses request carries no hint, its response comes from B, the second carries x-stargate-last-cluster-id: B" {
	start_gateway "${LCON[@]}"
	CPATH=/v1/responses CLASSIFY_OPTS=(--endpoint responses)
	turns "$(rbody acme/dummy-model '{"conversation": {"id": "conv-1"}}')"
	rreset
	turns "$(rbody acme/dummy-model '{"conversation": "conv-2"}')"
}

@test "x-multi-turn-session-id: the first request carries no hint, its response comes from B, the second carries x-stargate-last-cluster-id: B" {
	start_gateway "${LCON[@]}"
	CLASSIFY_OPTS=(-H 'x-multi-turn-session-id: sess-1')
	turns "$(cbody acme/dummy-model)" -H 'x-multi-turn-session-id: sess-1'
	# the response names the session
	[ "$(hdr x-multi-turn-session-id)" = sess-1 ]
}

@test "payload sessions: no lookup and no write" {
	local b cak key before
	b=$(cbody acme/dummy-model)
	[ "$(printf '%s' "$b" | "$BIN/sg-classify" - | jq -r .source)" = payload ]
	cak=$(printf '%s' "$b" | "$BIN/sg-classify" - | jq -r .cache_affinity_key)
	# an entry under the payload session's own key: a lookup would find it
	key=$("$BIN/sg-lastcluster" -d "$STORE" key acme dummy-model "$cak")
	"$BIN/sg-lastcluster" -d "$STORE" put "$key" A
	before=$(lc_dump)
	start_gateway "${LCON[@]}"
	creq "$b"
	[ "$STATUS" = 200 ]
	creq "$b"
	[ "$STATUS" = 200 ]
	# the router got the payload key, never a hint
	[ "$(rhdr 1 x-cache-affinity-key)" = "$cak" ]
	rlacks 1 "$HINT"
	rlacks 2 "$HINT"
	# nothing written (the B answers were not remembered), nothing read
	sleep 0.3
	[ "$(lc_dump)" = "$before" ]
	[ "$(gmsum llm_api_gateway_last_cluster_lookups_total 'result="skipped"')" = 2 ]
	[ "$(gmsum llm_api_gateway_last_cluster_lookups_total 'result="hit"')" = 0 ]
	[ "$(gmsum llm_api_gateway_last_cluster_lookups_total 'result="miss"')" = 0 ]
	[ "$(gmsum llm_api_gateway_last_cluster_writes_total)" = 0 ]
}

@test "the same affinity key with another model or routing key: no hint" {
	local b
	start_gateway "${LCON[@]}"
	b=$(cbody acme/dummy-model '{"prompt_cache_key": "pck-shared"}')
	creq "$b"
	[ "$STATUS" = 200 ]
	lc_wait "$(lc_key "$b")" B
	creq "$(cbody acme/other-model '{"prompt_cache_key": "pck-shared"}')"
	[ "$STATUS" = 200 ]
	creq "$(cbody globex/dummy-model '{"prompt_cache_key": "pck-shared"}')"
	[ "$STATUS" = 200 ]
	# same affinity key on all three, a hint on none of the others
	[ "$(rhdr 1 x-cache-affinity-key)" = "$(rhdr 2 x-cache-affinity-key)" ]
	[ "$(rhdr 1 x-cache-affinity-key)" = "$(rhdr 3 x-cache-affinity-key)" ]
	[ "$(rhdr 2 x-model)" = other-model ]
	[ "$(rhdr 3 x-routing-key)" = globex ]
	rlacks 2 "$HINT"
	rlacks 3 "$HINT"
	# and the original pair still hits
	creq "$b"
	[ "$(rhdr 4 "$HINT")" = B ]
}

@test "non-2xx responses leave the stored value unchanged" {
	local b key before s
	start_gateway "${LCON[@]}"
	b=$(cbody acme/dummy-model '{"prompt_cache_key": "pck-non2xx"}')
	key=$(lc_key "$b")
	creq "$b"
	lc_wait "$key" B
	before=$(lc_dump)
	for s in 400 404 429 500 503; do
		rscript "[{\"status\": $s, \"cluster_id\": \"C\",
		    \"body\": {\"error\": {\"message\": \"no\", \"type\": \"x\", \"code\": \"c$s\"}}}]"
		creq "$b"
		[ "$STATUS" = "$s" ] || { cat "$T/h"; return 1; }
	done
	# a 1xx-free 3xx is not a success either
	rscript '[{"status": 302, "cluster_id": "C", "headers": {"location": "/x"}}]'
	creq "$b"
	[ "$STATUS" = 302 ]
	sleep 0.3
	[ "$(lc_get "$key")" = B ]
	[ "$(lc_dump)" = "$before" ]
	# every one of those requests still carried the stored B
	[ "$(rreqs | jq -r --arg h "$HINT" '[.requests[1:][] | .headers[$h][0]] | unique | join(",")')" = B ]
}

@test "transport errors leave the stored value unchanged" {
	local b key before
	start_gateway "${LCON[@]}"
	b=$(cbody acme/dummy-model '{"prompt_cache_key": "pck-transport"}')
	key=$(lc_key "$b")
	creq "$b"
	lc_wait "$key" B
	before=$(lc_dump)
	# every answer now is a reset connection (a replay of the request on
	# a fresh connection is reset too)
	rmode '{"action": "reset"}'
	creq "$b" || true
	[ "$STATUS" != 200 ]
	creq "$b" || true
	[ "$STATUS" != 200 ]
	rmode '{}'
	# a stream cut after its headers is a transport error too, but its
	# 2xx headers have arrived: that one is remembered (ref §7.4), so it is
	# not tested here
	sleep 0.3
	[ "$(lc_get "$key")" = B ]
	[ "$(lc_dump)" = "$before" ]
	creq "$b"
	[ "$STATUS" = 200 ]
	[ "$(rhdr -1 "$HINT")" = B ]
}

@test "a 2xx stream writes the serving cluster before the stream ends" {
	local b key i
	start_gateway "${LCON[@]}"
	b=$(cbody acme/dummy-model '{"prompt_cache_key": "pck-stream", "stream": true}')
	key=$(lc_key "$b")
	rscript '[{"stream": true, "gate": true, "events": 3, "cluster_id": "C"}]'
	curl -sS -N --max-time 20 -H 'content-type: application/json' \
	    --data-binary "$b" "$GW_URL/v1/chat/completions" >"$T/stream.out" &
	PIDS+=("$!")
	local cpid=$!
	# the router holds the stream after its first event
	wait_for 100 0.05 bash -c "[ \"\$(curl -s --max-time 2 $ROUTER_URL/control/gated | jq .waiting)\" = 1 ]"
	# the gateway already wrote C, while the stream is still open
	lc_wait "$key" C
	[ "$(curl -s --max-time 2 "$ROUTER_URL/control/gated" | jq .waiting)" = 1 ]
	alive "$cpid"
	rctl /control/open-gate >/dev/null
	for i in $(seq 1 100); do alive "$cpid" || break; sleep 0.05; done
	grep -q 'data: \[DONE\]' "$T/stream.out"
	[ "$(grep -c '^data: {' "$T/stream.out")" = 3 ]
}

@test "the last write wins" {
	local b key
	start_gateway "${LCON[@]}"
	b=$(cbody acme/dummy-model '{"prompt_cache_key": "pck-lww"}')
	key=$(lc_key "$b")
	rscript '[{"cluster_id": "C"}, {"cluster_id": "D"}]'
	creq "$b"
	lc_wait "$key" C
	creq "$b"
	[ "$(rhdr 2 "$HINT")" = C ]
	lc_wait "$key" D
	creq "$b"
	[ "$(rhdr 3 "$HINT")" = D ]
}

@test "an invalid or missing x-stargate-cluster-id is not stored" {
	local b key
	start_gateway "${LCON[@]}"
	b=$(cbody acme/dummy-model '{"prompt_cache_key": "pck-invalid"}')
	key=$(lc_key "$b")
	rscript "[{\"cluster_id\": null}, {\"cluster_id\": \"\"},
	    {\"cluster_id\": \"$(head -c 257 /dev/zero | tr '\0' x)\"}]"
	creq "$b"; [ "$STATUS" = 200 ]
	creq "$b"; [ "$STATUS" = 200 ]
	creq "$b"; [ "$STATUS" = 200 ]
	sleep 0.3
	[ -z "$(lc_get "$key")" ]
	[ "$(gmsum llm_api_gateway_last_cluster_writes_total)" = 0 ]
	# a padded valid id is trimmed
	rscript '[{"cluster_id": "  B2 "}]'
	creq "$b"
	lc_wait "$key" B2
}

@test "an entry older than the TTL is a miss, and a write resets the TTL" {
	local b key
	start_gateway "${LCON[@]}" --last-cluster-ttl 2s
	b=$(cbody acme/dummy-model '{"prompt_cache_key": "pck-ttl"}')
	key=$(lc_key "$b")
	creq "$b"			# t = 0: written (B)
	lc_wait "$key" B
	sleep 1.2
	creq "$b"			# t = 1.2 s: a hit, and written again
	[ "$(rhdr 2 "$HINT")" = B ]
	sleep 1.3
	creq "$b"			# t = 2.5 s: older than the TTL from the
	[ "$(rhdr 3 "$HINT")" = B ]	# first write, not from the second
	# no request for more than the TTL: a miss
	rmode '{"cluster_id": null}'	# (and no more writes)
	sleep 2.3
	creq "$b"
	rlacks 4 "$HINT"
	[ "$(gmsum llm_api_gateway_last_cluster_lookups_total 'result="miss"')" = 2 ]
	[ "$(gmsum llm_api_gateway_last_cluster_lookups_total 'result="hit"')" = 2 ]
}

@test "gateway metrics: lookups and writes counted by result, every label value present at zero" {
	local r b
	start_gateway "${LCON[@]}"
	METRICS=$(curl -sS --max-time 5 "$GW_URL/metrics")
	for r in hit miss error timeout skipped; do
		grep -qE "^llm_api_gateway_last_cluster_lookups_total\{[^}]*result=\"$r\"[^}]*\} 0\$" <<<"$METRICS"
	done
	for r in ok error; do
		grep -qE "^llm_api_gateway_last_cluster_writes_total\{[^}]*result=\"$r\"[^}]*\} 0\$" <<<"$METRICS"
	done
	grep -q '^llm_api_gateway_last_cluster_store_connected 1' <<<"$METRICS"
	# the histogram's buckets run from 1 ms to 50 ms
	grep -qE '^llm_api_gateway_last_cluster_lookup_duration_seconds_bucket\{[^}]*le="0.001"' <<<"$METRICS"
	grep -qE '^llm_api_gateway_last_cluster_lookup_duration_seconds_bucket\{[^}]*le="0.05"' <<<"$METRICS"
	b=$(cbody acme/dummy-model '{"prompt_cache_key": "pck-metrics"}')
	creq "$b"
	lc_wait "$(lc_key "$b")" B
	creq "$b"
	creq "$(cbody acme/dummy-model)"
	wait_for 50 0.1 bash -c "[ \"\$(curl -s $GW_URL/metrics | grep -E '^llm_api_gateway_last_cluster_writes_total\{[^}]*result=\"ok\"' | awk '{print \$NF}')\" = 2 ]"
	METRICS=$(curl -sS --max-time 5 "$GW_URL/metrics")
	[ "$(msum llm_api_gateway_last_cluster_lookups_total 'result="miss"')" = 1 ]
	[ "$(msum llm_api_gateway_last_cluster_lookups_total 'result="hit"')" = 1 ]
	[ "$(msum llm_api_gateway_last_cluster_lookups_total 'result="skipped"')" = 1 ]
	[ "$(msum llm_api_gateway_last_cluster_writes_total 'result="ok"')" = 2 ]
	[ "$(msum llm_api_gateway_last_cluster_lookup_duration_seconds_count)" = 2 ]
}

@test "all role: a stored hint with blanks around it reaches the router stage trimmed, as over the header contract" {
	local b key
	start_engine A
	start_engine B
	write_clusters "$T/clusters.json" "$(cl_entry A)" "$(cl_entry B)"
	b=$(cbody acme/dummy-model '{"prompt_cache_key": "pck-blank-hint"}')
	key=$(lc_key "$b")
	"$BIN/sg-lastcluster" -d "$STORE" put "$key" ' B '
	[ "$(lc_get "$key")" = ' B ' ]
	start_role proxy-all all --clusters "$T/clusters.json" "${LCON[@]}" \
	    --decision-log "$T/dlog.ndjson"
	GW_URL=$ROLE_URL
	creq "$b"
	[ "$STATUS" = 200 ]
	wait_for 50 0.1 test -s "$T/dlog.ndjson"
	# the in-process router's request holds what a remote router parses
	# from x-stargate-last-cluster-id: the optional-string rule, trimmed
	[ "$(head -1 "$T/dlog.ndjson" | jq -r '.request.last_cluster_id')" = B ] ||
	    { head -1 "$T/dlog.ndjson"; return 1; }
}
