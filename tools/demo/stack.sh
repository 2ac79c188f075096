# tools/demo/stack.sh — the local Stargate stack of `make demo` and
# `make serve`, sourced by tools/demo.sh and tools/serve.sh (bash).
#
# Three sg-mockengine clusters (us-east, us-west, eu-central: 2 engine
# slots each, a prefix KV cache) on free loopback ports, and one
# sg-proxy --role all in front of them: the gateway stage (session identity,
# the last-cluster store in an LMDB directory) and the router stage
# (pulsar-wait-and-widen with last_cluster_affinity, k = 1, X = 300 ms,
# s = 0.1) in one process.  Clients use the public model id
# acme/dummy-model.  Every process started is recorded in STACK_PIDS and
# stopped by stack_stop (TERM, then KILL after 5 s), by pid.
#
# The caller sets O (the build directory: programs in $O/bin) and
# STACK_DIR (a directory for ports, logs, the cluster file and the store).

STACK_PIDS=()
STACK_CLUSTERS=(us-east us-west eu-central)
declare -A STACK_ENG=()		# cluster id -> engine base URL
STACK_PROXY_PID=
STACK_URL=

stack_die() {
	echo "${STACK_PROG:-stack}: $*" >&2
	stack_stop
	exit 1
}

# stack_waitfile FILE: up to 10 s for FILE to be non-empty.
stack_waitfile() {
	local i
	for i in $(seq 1 200); do
		[ -s "$1" ] && return 0
		sleep 0.05
	done
	return 1
}

# stack_engines: start the three engines (again, with cold caches, when
# called a second time) and write $STACK_DIR/clusters.json.
stack_engines() {
	local c entries=()
	mkdir -p "$STACK_DIR"
	for c in "${STACK_CLUSTERS[@]}"; do
		rm -f "$STACK_DIR/$c.port"
		"$O/bin/sg-mockengine" -p 0 --port-file "$STACK_DIR/$c.port" \
		    --cluster-id "$c" -c 2 -t 12 --decode-tps 2000 \
		    >/dev/null 2>>"$STACK_DIR/$c.log" &
		STACK_PIDS+=("$!")
	done
	for c in "${STACK_CLUSTERS[@]}"; do
		stack_waitfile "$STACK_DIR/$c.port" ||
		    stack_die "sg-mockengine $c did not start (see $STACK_DIR/$c.log)"
		STACK_ENG[$c]=http://127.0.0.1:$(cat "$STACK_DIR/$c.port")
		entries+=("$(jq -nc --arg id "$c" --arg url "${STACK_ENG[$c]}" \
		    '{id: $id, url: $url, models: ["dummy-model"],
		      stats: {format: "stargate"}}')")
	done
	printf '%s\n' "${entries[@]}" | jq -s '{stats_interval_ms: 50,
	    stats_stale_ms: 1000, clusters: .}' >"$STACK_DIR/clusters.json"
	stack_lbconfig true
}

# stack_lbconfig FLAG: $STACK_DIR/lb-config.json with last_cluster_affinity
# FLAG (read by the next stack_proxy).
stack_lbconfig() {
	jq -n --argjson f "$1" '{models: {"dummy-model": {
	    algorithm: "pulsar-wait-and-widen",
	    cache_affinity_backend_selection_count: 1,
	    cache_affinity_wait_ms: 300, cache_affinity_input_tokens_scale: 0.1,
	    last_cluster_affinity: $f}}}' >"$STACK_DIR/lb-config.json"
}

# stack_proxy FLAG LISTEN: sg-proxy --role all with the feature FLAG
# (true/false) on LISTEN (ADDR:PORT; port 0 picks one); sets STACK_URL.
stack_proxy() {
	local flag=$1 listen=$2 i
	rm -f "$STACK_DIR/proxy.port"
	"$O/bin/sg-proxy" --role all --listen "$listen" \
	    --port-file "$STACK_DIR/proxy.port" \
	    --clusters "$STACK_DIR/clusters.json" \
	    --lb-config "$STACK_DIR/lb-config.json" \
	    --last-cluster "$flag" --last-cluster-store "$STACK_DIR/store" \
	    ${STACK_PROXY_OPTS:-} >/dev/null 2>>"$STACK_DIR/proxy.log" &
	STACK_PROXY_PID=$!
	STACK_PIDS+=("$!")
	for i in $(seq 1 200); do
		[ -s "$STACK_DIR/proxy.port" ] && break
		kill -0 "$STACK_PROXY_PID" 2>/dev/null || break
		sleep 0.05
	done
	[ -s "$STACK_DIR/proxy.port" ] ||
	    stack_die "sg-proxy did not start: $(tail -3 "$STACK_DIR/proxy.log")"
	STACK_URL=http://127.0.0.1:$(cat "$STACK_DIR/proxy.port")
	for i in $(seq 1 200); do
		curl -fs --max-time 2 -o /dev/null "$STACK_URL/readyz" && return 0
		sleep 0.05
	done
	stack_die "sg-proxy did not become ready: $(tail -3 "$STACK_DIR/proxy.log")"
}

# stack_stop_pid PID: TERM, wait up to 5 s, KILL; reap.
stack_stop_pid() {
	local p=$1 i
	kill -TERM "$p" 2>/dev/null || return 0
	for i in $(seq 1 100); do
		kill -0 "$p" 2>/dev/null || break
		sleep 0.05
	done
	kill -KILL "$p" 2>/dev/null || true
	wait "$p" 2>/dev/null || true
}

# stack_stop: stop everything started (the proxy first, so that it drains).
stack_stop() {
	local i
	for ((i = ${#STACK_PIDS[@]} - 1; i >= 0; i--)); do
		stack_stop_pid "${STACK_PIDS[$i]}"
	done
	STACK_PIDS=()
	STACK_PROXY_PID=
}

# stack_check_tools: the programs and commands the stack needs.
stack_check_tools() {
	local p
	for p in sg-proxy sg-mockengine sg-route sg-classify sg-lastcluster; do
		[ -x "$O/bin/$p" ] || stack_die "$O/bin/$p is not built; run make first"
	done
	for p in jq curl node npm; do
		command -v "$p" >/dev/null || stack_die "needs $p"
	done
}

# stack_client_install: the pinned openai client in $O/openai.
stack_client_install() {
	"$(dirname "${BASH_SOURCE[0]}")/openai/install.sh" "$O/openai" ||
	    stack_die "could not install the openai client into $O/openai"
}
