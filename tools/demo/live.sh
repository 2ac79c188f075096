# tools/demo/live.sh — the live acts of `make demo` (sourced by
# tools/demo.sh, after tools/demo/stack.sh): the whole stack on loopback,
# driven by the official openai npm client, flag on and then flag off.
#
# Three sessions whose rank-1 cluster is us-east (chosen by asking sg-route
# on the live engines' own /stats, so nothing is assumed) talk to
# sg-proxy --role all for five turns each.  us-east is held full by other
# work during the first turn and drains before the second.  Per turn the
# demo prints the cluster that served it (the engine's system_fingerprint,
# else the engines' request counters), the session state the router gave it
# (from stargate_routing_session_selections_total) and the KV-cache tokens
# the engine reused (usage.prompt_tokens_details.cached_tokens).  Then the
# same traffic again on fresh engines, with STARGATE_LAST_CLUSTER_ENABLED
# off, and the difference.

LIVE_SESSIONS=()
LIVE_TURNS=5

# live_snapshot: the engines' /stats as a routing snapshot.
live_snapshot() {
	local c
	for c in "${STACK_CLUSTERS[@]}"; do
		curl -fsS --max-time 5 "${STACK_ENG[$c]}/stats"
	done | jq -s '{clusters: .}'
}

# live_pick N: N prompt_cache_keys whose sessions rank us-east first, on
# the engines' idle /stats, with us-east full, and with us-east further
# away than the others (the proxy measures round trips, and pulsar's
# ranking weighs them: a fraction of a millisecond on loopback must not
# change the story).  The keys are ranked as the daemon ranks them: the
# affinity key the gateway derives (sg-classify), hashed ("h:" + SHA-256),
# with the routing key acme; one sg-classify and one sg-route stream per
# snapshot for 200 candidates.
live_pick() {
	local f
	live_snapshot >"$STACK_DIR/snap-idle.json"
	jq '(.clusters[] | select(.id == "us-east")) |= (.running = 2 | .rtt_ms = 5)' \
	    "$STACK_DIR/snap-idle.json" >"$STACK_DIR/snap-full.json"
	jq '(.clusters[] | select(.id != "us-east")) |= (.rtt_ms = 5)' \
	    "$STACK_DIR/snap-idle.json" >"$STACK_DIR/snap-near.json"
	seq 1 200 | jq -c '{body: {model: "acme/dummy-model",
	    prompt_cache_key: "chat-\(.)", messages: []}}' |
	    "$O/bin/sg-classify" --ndjson | jq -r .cache_affinity_key |
	    while read -r cak; do
		printf 'h:%s\n' "$(printf '%s' "$cak" | sha256sum | cut -d' ' -f1)"
	    done >"$STACK_DIR/pick-keys.txt"
	for f in idle full near; do
		{ printf '{"snapshot": %s}\n' "$(jq -c . "$STACK_DIR/snap-$f.json")"
		  jq -Rc '{request: {request_id: "pick", routing_key: "acme",
		      model: "dummy-model", cache_affinity_key: ., input_tokens: 300}}' \
		      "$STACK_DIR/pick-keys.txt"
		} | "$O/bin/sg-route" -c "$STACK_DIR/lb-config.json" --ndjson \
		    --explain | jq -r '.explain.original_order[0]' \
		    >"$STACK_DIR/pick-$f.txt"
	done
	mapfile -t LIVE_SESSIONS < <(paste -d' ' "$STACK_DIR/pick-idle.txt" \
	    "$STACK_DIR/pick-full.txt" "$STACK_DIR/pick-near.txt" |
	    awk -v n="$1" '$1 == "us-east" && $2 == "us-east" && $3 == "us-east" {
		print "chat-" NR; if (++k == n) exit }')
	[ "${#LIVE_SESSIONS[@]}" = "$1" ] ||
	    stack_die "fewer than $1 of chat-1..200 rank us-east first"
}

# The openai client as a coprocess: one JSON command in, one result out.
live_client_start() {
	coproc LIVE_OAI { exec node tools/demo/openai/sg-openai.mjs \
	    --modules "$O/openai" --base-url "$STACK_URL/v1" \
	    2>>"$STACK_DIR/client.log"; }
	STACK_PIDS+=("$LIVE_OAI_PID")
}
live_client_stop() {
	exec {LIVE_OAI[1]}>&-
	wait "$LIVE_OAI_PID" 2>/dev/null || true
}
live_ask() {
	printf '%s\n' "$1" >&"${LIVE_OAI[1]}"
	IFS= read -r -t 30 LIVE_RESULT <&"${LIVE_OAI[0]}" ||
	    stack_die "the openai client did not answer (see $STACK_DIR/client.log)"
}

# live_counts: "cluster requests" per engine.
live_counts() {
	local c
	for c in "${STACK_CLUSTERS[@]}"; do
		printf '%s ' "$c"
		curl -fsS --max-time 5 "${STACK_ENG[$c]}/control/seen-headers" |
		    sed -E 's/^\{"requests": *([0-9]+).*/\1/'
		echo
	done
}

# live_sessions_metric: "state,selection value" lines of the router's
# session counter.
live_sessions_metric() {
	curl -fsS --max-time 5 "$STACK_URL/metrics" | awk '
	    /^stargate_routing_session_selections_total\{/ {
		st = $0; sub(/.*session_state="/, "", st); sub(/".*/, "", st)
		se = $0; sub(/.*selection="/, "", se); sub(/".*/, "", se)
		v[st "," se] += $NF
	    }
	    END { for (k in v) print k, v[k] }' | sort
}

# live_diff BEFORE AFTER: the key whose value grew ("?" if none).
live_diff() {
	join -a 2 -e 0 -o 0,1.2,2.2 <(printf '%s\n' "$1") <(printf '%s\n' "$2") |
	    awk '$3 > $2 { print $1; found = 1; exit } END { if (!found) print "?" }'
}

# live_turn SESSION N: one turn; prints its line and appends
# "session turn cluster state reused prompt" to $LIVE_LOG.
live_turn() {
	local s=$1 n=$2 c0 c1 m0 m1 text cluster state reused prompt ok ms
	# the first turn pastes a file (about 2500 tokens), later turns a bit more
	text=$(printf 'Turn %d of %s: here is more of my code, please keep reviewing it. ' "$n" "$s")
	text=$text$(printf 'static int f%d(int x) { return x * %d; } ' \
	    $(seq 1 $([ "$n" = 1 ] && echo 500 || echo 60)))
	c0=$(live_counts)
	m0=$(live_sessions_metric)
	live_ask "$(jq -nc --arg s "$s" --arg t "$text" \
	    '{op: "turn", session: $s, content: $t, model: "acme/dummy-model"}')"
	c1=$(live_counts)
	m1=$(live_sessions_metric)
	read -r ok cluster reused prompt ms < <(jq -r '[.ok, (.fingerprint // "-"),
	    .usage.cached_tokens, .usage.prompt_tokens, .ms] | @tsv' <<<"$LIVE_RESULT")
	[ "$ok" = true ] || stack_die "turn $n of $s failed: $LIVE_RESULT"
	[ "$cluster" != - ] || cluster=$(live_diff "$c0" "$c1")
	state=$(live_diff "$m0" "$m1")
	[ "$state" != "?" ] || state=unclassified
	printf '    %-8s turn %d  -> %-10s  %-20s  KV reused %5d of %5d prompt tokens  %4d ms\n' \
	    "$s" "$n" "$cluster" "${state/,/, }" "$reused" "$prompt" "$ms"
	printf '%s %s %s %s %s %s\n' "$s" "$n" "$cluster" "$state" \
	    "$reused" "$prompt" >>"$LIVE_LOG"
}

# live_run FLAG: the episode on fresh engines with the feature FLAG.
live_run() {
	local flag=$1 s n
	LIVE_LOG=$STACK_DIR/turns-$flag.txt
	: >"$LIVE_LOG"
	stack_stop
	rm -rf "$STACK_DIR/store"
	stack_engines
	[ "${#LIVE_SESSIONS[@]}" -gt 0 ] || live_pick 3
	stack_lbconfig "$flag"
	stack_proxy "$flag" 127.0.0.1:0
	live_client_start
	cmd "sg-proxy --role all --last-cluster $flag --last-cluster-store $STACK_DIR/store --lb-config lb-config.json ..."
	printf '    (last_cluster_affinity %s in lb-config.json; the client'"'"'s base URL: %s/v1)\n' \
	    "$flag" "$STACK_URL"
	curl -fsS --max-time 5 -X POST -d '{"slots": 2}' \
	    "${STACK_ENG[us-east]}/control/hold" >/dev/null
	sleep 0.3	# the proxy polls /stats every 50 ms
	say "us-east is full (2 of 2 slots held by other work); every session's first turn:"
	for s in "${LIVE_SESSIONS[@]}"; do
		live_turn "$s" 1
	done
	curl -fsS --max-time 5 -X POST -d '{}' \
	    "${STACK_ENG[us-east]}/control/release" >/dev/null
	sleep 0.3
	say "us-east drains; turns 2 to $LIVE_TURNS:"
	for n in $(seq 2 "$LIVE_TURNS"); do
		for s in "${LIVE_SESSIONS[@]}"; do
			live_turn "$s" "$n"
		done
	done
	live_client_stop
	if [ "$flag" = true ]; then
		cmd "sg-lastcluster -d $STACK_DIR/store list   # what the gateway remembered"
		"$O/bin/sg-lastcluster" -d "$STACK_DIR/store" list |
		    jq -r '"    " + .key[0:22] + "...  " + .cluster_id'
	else
		say "The store was not used: $(find "$STACK_DIR/store" -name data.mdb 2>/dev/null |
		    grep -q . && echo "it exists" || echo "no store was created")."
	fi
}

# live_tally FLAG: "returning left reused prompt" over turns 2.. of a run.
live_tally() {
	awk '
	    { last[$1 "," $2] = $3 }
	    $2 > 1 { n++; r += $5; p += $6
		     if (last[$1 "," ($2 - 1)] != $3) left++ }
	    END { printf "%d %d %d %d\n", n, left, r, p }' "$STACK_DIR/turns-$1.txt"
}

live_acts() {
	act "9. Live: the whole stack, driven by the openai client"
	say "Now the real thing on loopback: three sg-mockengine clusters (us-east, \
us-west, eu-central; 2 slots each, a prefix KV cache) behind one sg-proxy \
--role all: its gateway stage derives each request's session from \
prompt_cache_key, looks up the session's last cluster in an LMDB store and \
hints it to its router stage, which places the request.  The client is the \
official openai npm package, sending plain chat completions with the public \
model id acme/dummy-model.  Three sessions that rank us-east first take five \
turns each."
	stack_check_tools
	stack_client_install
	rm -rf "$STACK_DIR"
	mkdir -p "$STACK_DIR"
	live_run true
	say "us-east was full for the first turns, so each new session overflowed \
at once; after us-east drained, every returning turn stayed with its KV cache."

	act "10. The same traffic with the feature off"
	say "Fresh engines (cold caches), the same sessions and turns, with \
STARGATE_LAST_CLUSTER_ENABLED=false at the gateway and last_cluster_affinity \
false in the router's lb-config: Stargate as it routed before sessions."
	live_run false
	stack_stop
	say "Without the session rules the first turns hold up to 300 ms for the \
full us-east before they widen, and without the memory the second turn of \
every session goes back to us-east, its rank-1 cluster, where nothing is \
cached, and pays the prefill again."

	act "What the flag changed"
	local on off
	read -r -a on < <(live_tally true)
	read -r -a off < <(live_tally false)
	printf '    flag on:  %2d returning turns, %d left their last cluster, KV reused %6d of %6d prompt tokens\n' \
	    "${on[@]}"
	printf '    flag off: %2d returning turns, %d left their last cluster, KV reused %6d of %6d prompt tokens\n' \
	    "${off[@]}"
	printf '    difference: %d fewer moves, %d more KV tokens reused (%d fewer tokens prefilled)\n' \
	    $((off[1] - on[1])) $((on[2] - off[2])) $((on[2] - off[2]))
}
