# proxy_helpers.bash — the harness of the sg-proxy end-to-end suites
# (tests/e2e/proxy*.bats), loaded with `load proxy_helpers`.
#
# Every suite calls proxy_setup in setup() and proxy_teardown in teardown().
# The harness starts engines (sg-mockengine, or the scriptable
# tests/fixtures/proxy/fault_engine.py) on free loopback ports (port 0 +
# --port-file), writes a cluster file and an lb-config, starts
# `sg-proxy --role router` on a free port and waits for /readyz.  Every
# process it starts is recorded in PIDS and stopped in teardown (TERM, then
# KILL after a bounded wait); the per-test directory $T is bats' own
# BATS_TEST_TMPDIR, removed by bats.  Every wait is a bounded loop; every
# curl has --max-time.  Addresses are 127.0.0.1 only.
#
# The proxy's stderr is checked in teardown for sanitizer reports: a test
# during which the proxy reported an ASan/UBSan error fails.

PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

proxy_setup() {
	TOP=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)
	BIN=${SG_BINDIR:-$TOP/build/san/bin}
	PROXY=$BIN/sg-proxy
	FIX=$TOP/tests/fixtures/proxy
	T=$BATS_TEST_TMPDIR
	PIDS=()
	declare -gA EPORT=() EPID=()
	PROXY_PID= PROXY_PORT= PROXY_URL=
	REQN=0
	CHAT='{"model":"dummy-model","messages":[{"role":"user","content":"hello there"}]}'
	SCHAT='{"model":"dummy-model","stream":true,"messages":[{"role":"user","content":"hello there"}]}'
	export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:exitcode=23}
	export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
	if [ ! -x "$PROXY" ]; then
		echo "no sg-proxy at $PROXY (set SG_BINDIR)" >&2
		return 1
	fi
}

# alive PID: the process exists and is not a zombie.
alive() {
	local st
	[ -r "/proc/$1/stat" ] || return 1
	st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)
	[ -n "$st" ] && [ "$st" != Z ] && [ "$st" != X ]
}

# stop_all: CONT and TERM every recorded pid, wait up to 5 s for them all,
# KILL the rest, reap them.
stop_all() {
	local p i left
	for p in "${PIDS[@]}"; do
		kill -CONT "$p" 2>/dev/null || true
		kill -TERM "$p" 2>/dev/null || true
	done
	for i in $(seq 1 50); do
		left=0
		for p in "${PIDS[@]}"; do
			alive "$p" && left=1
		done
		[ "$left" = 0 ] && break
		sleep 0.1
	done
	for p in "${PIDS[@]}"; do
		kill -KILL "$p" 2>/dev/null || true
	done
	for p in "${PIDS[@]}"; do
		wait "$p" 2>/dev/null || true
	done
	PIDS=()
}

proxy_teardown() {
	stop_all
	local f bad=0
	for f in "$T"/proxy*.err; do
		[ -f "$f" ] || continue
		if grep -qE 'AddressSanitizer|LeakSanitizer|runtime error:' "$f"; then
			echo "sanitizer report in $f:"
			grep -E -A40 'AddressSanitizer|LeakSanitizer|runtime error:' "$f" | head -80
			bad=1
		fi
	done
	return "$bad"
}

# wait_file FILE [TENTHS]: wait until FILE is non-empty (default 10 s).
wait_file() {
	local i
	for i in $(seq 1 "${2:-100}"); do
		[ -s "$1" ] && return 0
		sleep 0.1
	done
	return 1
}

# wait_for TRIES SLEEP CMD...: run CMD until it succeeds, at most TRIES times.
wait_for() {
	local n=$1 s=$2 i
	shift 2
	for i in $(seq 1 "$n"); do
		"$@" && return 0
		sleep "$s"
	done
	return 1
}

# start_engine ID [sg-mockengine options]: an sg-mockengine whose /stats id
# is ID; sets EPORT[ID] and EPID[ID].
start_engine() {
	local id=$1
	shift
	rm -f "$T/eng-$id.port"
	"$BIN/sg-mockengine" -p 0 --port-file "$T/eng-$id.port" --cluster-id "$id" \
	    "$@" >"$T/eng-$id.out" 2>"$T/eng-$id.err" 3>&- &
	EPID[$id]=$!
	PIDS+=("$!")
	wait_file "$T/eng-$id.port" || { cat "$T/eng-$id.err"; return 1; }
	EPORT[$id]=$(cat "$T/eng-$id.port")
}

# start_fault ID [fault_engine.py options]: the scriptable engine.
start_fault() {
	local id=$1
	shift
	rm -f "$T/eng-$id.port"
	"$PY" "$FIX/fault_engine.py" --port-file "$T/eng-$id.port" --cluster-id "$id" \
	    "$@" >"$T/eng-$id.out" 2>"$T/eng-$id.err" 3>&- &
	EPID[$id]=$!
	PIDS+=("$!")
	wait_file "$T/eng-$id.port" || { cat "$T/eng-$id.err"; return 1; }
	EPORT[$id]=$(cat "$T/eng-$id.port")
}

# free_port: a loopback port nobody listens on (bound, then closed).
free_port() {
	"$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

eurl() {
	echo "http://127.0.0.1:${EPORT[$1]}"
}

# cl_entry ID [JSON-OBJECT]: a cluster-file entry for engine ID, with the
# object's members merged over the defaults (jq `*`).
cl_entry() {
	local extra=${2:-'{}'}
	jq -nc --arg id "$1" --arg url "$(eurl "$1")" --argjson x "$extra" \
	    '{id: $id, url: $url, models: ["dummy-model"], stats: {format: "stargate"}} * $x'
}

# write_clusters FILE ENTRY...: the cluster file (atomically), with
# stats_interval_ms $CL_INTERVAL (50) and stats_stale_ms $CL_STALE (1000).
write_clusters() {
	local f=$1
	shift
	printf '%s\n' "$@" | jq -s --argjson i "${CL_INTERVAL:-50}" \
	    --argjson s "${CL_STALE:-1000}" \
	    '{stats_interval_ms: $i, stats_stale_ms: $s, clusters: .}' >"$f.tmp" &&
	    mv "$f.tmp" "$f"
}

# clusters ID...: $T/clusters.json with the default entries of these engines.
clusters() {
	local id e=()
	for id in "$@"; do
		e+=("$(cl_entry "$id")")
	done
	write_clusters "$T/clusters.json" "${e[@]}"
}

# lb_session ALGO FLAG [X_MS]: $T/lb.json for the cache-thrash scenario
# (ref §5.5): dummy-model routed by ALGO (wait-and-widen or
# pulsar-wait-and-widen) with k = 1, X = X_MS (300), s = 0.1, 8 virtual
# nodes (w-a-w), last_cluster_affinity FLAG (true/false).  Every other
# algorithm is available through x-routing-method.
lb_session() {
	local algo=$1 flag=$2 x=${3:-300}
	jq -n --arg a "$algo" --argjson f "$flag" --argjson x "$x" '
	    {algorithm: $a, cache_affinity_backend_selection_count: 1,
	     cache_affinity_wait_ms: $x, cache_affinity_input_tokens_scale: 0.1,
	     last_cluster_affinity: $f}
	    | if $a == "wait-and-widen" then .cache_affinity_virtual_nodes = 8 else . end
	    | {default: "power-of-n",
	       request_algorithms: {random: "random", "round-robin": "round-robin",
	          "power-of-n": "power-of-n", pulsar: "pulsar",
	          "wait-and-widen": "wait-and-widen",
	          "pulsar-wait-and-widen": "pulsar-wait-and-widen"},
	       models: {"dummy-model": .}}' >"$T/lb.json"
}

# lb_simple ALGO: $T/lb.json routing dummy-model with ALGO's defaults.
lb_simple() {
	jq -n --arg a "$1" '{default: $a, models: {"dummy-model": $a}}' >"$T/lb.json"
}

# start_proxy [sg-proxy options]: the router on a free port with
# $T/clusters.json and $T/lb.json (when present); waits for the port file
# and for /readyz 200 (not with PROXY_NOWAIT set).  Sets PROXY_PID,
# PROXY_PORT, PROXY_URL.  The output
# goes to $T/proxy.out and $T/proxy.err (PROXY_TAG changes the names;
# keep it starting with "proxy" so that teardown checks its stderr).
start_proxy() {
	local tag=${PROXY_TAG:-proxy} lb=() i code
	[ -f "$T/lb.json" ] && lb=(--lb-config "$T/lb.json")
	rm -f "$T/$tag.port"
	"$PROXY" --role router --listen 127.0.0.1:0 --port-file "$T/$tag.port" \
	    --clusters "$T/clusters.json" "${lb[@]}" "$@" \
	    >"$T/$tag.out" 2>"$T/$tag.err" 3>&- &
	PROXY_PID=$!
	PIDS+=("$!")
	for i in $(seq 1 100); do
		[ -s "$T/$tag.port" ] && break
		alive "$PROXY_PID" || break
		sleep 0.1
	done
	if [ ! -s "$T/$tag.port" ]; then
		echo "sg-proxy did not write its port file; stderr:"
		cat "$T/$tag.err"
		return 1
	fi
	PROXY_PORT=$(cat "$T/$tag.port")
	PROXY_URL=http://127.0.0.1:$PROXY_PORT
	[ -n "${PROXY_NOWAIT:-}" ] && return 0
	for i in $(seq 1 100); do
		code=$(curl -s --max-time 2 -o /dev/null -w '%{http_code}' "$PROXY_URL/readyz") || true
		[ "$code" = 200 ] && return 0
		sleep 0.1
	done
	echo "sg-proxy never became ready (last /readyz: $code); stderr:"
	cat "$T/$tag.err"
	return 1
}

# settle: let the proxy's stats poller see a change on the engines (the
# cluster files here poll every 50 ms).
settle() {
	sleep "${SETTLE:-0.4}"
}

# req [curl options...]: POST $REQ_BODY (default $CHAT) to
# $PROXY_URL$REQ_PATH (default /v1/chat/completions) with the default
# headers x-request-id (unique per call), x-model: dummy-model and
# x-input-tokens: 100, minus those named in $OMIT (space separated) and
# those the options give with -H, plus the options given.  Sets STATUS (000 when curl failed), BODY, CLUSTER
# (x-stargate-cluster-id), CODE (.code of a JSON body, if any) and MS (the
# elapsed milliseconds).  The response headers are in $T/h.  Returns
# curl's exit status.
req() {
	local t0 t1 rc=0 h=() a prev= omit=" ${OMIT:-} "
	REQN=$((REQN + 1))
	# a default header the caller gives itself is not added
	for a in "$@"; do
		if [ "$prev" = -H ]; then
			a=${a%%[:;]*}
			omit+=" ${a,,} "
		fi
		prev=$a
	done
	[[ $omit == *" x-request-id "* ]] || h+=(-H "x-request-id: r-${BATS_TEST_NUMBER:-0}-$REQN")
	[[ $omit == *" x-model "* ]] || h+=(-H 'x-model: dummy-model')
	[[ $omit == *" x-input-tokens "* ]] || h+=(-H 'x-input-tokens: 100')
	: >"$T/h"
	t0=${EPOCHREALTIME/./}
	BODY=$(curl -sS --max-time "${REQ_MAX_TIME:-20}" -D "$T/h" \
	    -H 'content-type: application/json' "${h[@]}" "$@" \
	    --data-binary "${REQ_BODY:-$CHAT}" \
	    "$PROXY_URL${REQ_PATH:-/v1/chat/completions}" 2>"$T/curl.err") || rc=$?
	t1=${EPOCHREALTIME/./}
	MS=$(((t1 - t0) / 1000))
	STATUS=$(tr -d '\r' <"$T/h" | grep -E '^HTTP/' | tail -1 | awk '{print $2}')
	STATUS=${STATUS:-000}
	CLUSTER=$(hdr x-stargate-cluster-id)
	CODE=$(jq -r '.code? // empty' <<<"$BODY" 2>/dev/null || true)
	return "$rc"
}

# hdr NAME: the (last) value of response header NAME of the last req.
hdr() {
	tr -d '\r' <"$T/h" | awk -v n="$(echo "$1" | tr 'A-Z' 'a-z')" '
	    { i = index($0, ":"); if (i == 0) next
	      k = tolower(substr($0, 1, i - 1)); v = substr($0, i + 1)
	      sub(/^[ \t]+/, "", v); if (k == n) last = v }
	    END { if (last != "") print last }'
}

# show: print the last response (for failure messages).
show() {
	echo "status=$STATUS cluster=$CLUSTER ms=$MS code=$CODE"
	cat "$T/h"
	echo "$BODY" | head -c 2000
	echo
}

# Engine controls (sg-mockengine, also answered by fault_engine.py).
ectl() {	# ID PATH [BODY]: POST to an engine control
	local b=${3:-'{}'}
	curl -sS --max-time 5 -H 'content-type: application/json' \
	    --data-binary "$b" "$(eurl "$1")$2"
}
hold() {
	ectl "$1" /control/hold "{\"slots\": $2}" >/dev/null
}
release() {
	ectl "$1" /control/release '{}' >/dev/null
}
estats() {
	curl -sS --max-time 5 "$(eurl "$1")/stats"
}
seen() {
	curl -sS --max-time 5 "$(eurl "$1")/control/seen-headers"
}
# seen_n ID: routed requests engine ID received since its last reset.
seen_n() {
	seen "$1" | jq -r '.requests'
}
# reset_seen ID...
reset_seen() {
	local id
	for id in "$@"; do
		ectl "$id" /control/reset-seen '{}' >/dev/null || return 1
	done
}

# metrics: the proxy's /metrics.
metrics() {
	curl -sS --max-time 5 "$PROXY_URL/metrics"
}

# msum NAME [LABEL-SUBSTRING...]: the sum of the samples of metric NAME
# (exact name) whose label set contains every substring given; 0 if none.
# Reads the exposition from $METRICS when set, else fetches /metrics.
msum() {
	local name=$1
	shift
	{ if [ -n "${METRICS:-}" ]; then printf '%s\n' "$METRICS"; else metrics; fi; } |
	    awk -v n="$name" -v want="$(printf '%s\n' "$@")" '
	    BEGIN { k = split(want, w, "\n") }
	    /^#/ { next }
	    {
		sp = index($0, " "); nm = substr($0, 1, sp - 1); lb = ""
		b = index(nm, "{")
		if (b > 0) { lb = substr($0, b); sp = index(lb, "} "); lb = substr(lb, 1, sp); nm = substr(nm, 1, b - 1); val = substr($0, b + sp + 1) }
		else val = substr($0, sp + 1)
		if (nm != n) next
		for (i = 1; i <= k; i++) if (w[i] != "" && index(lb, w[i]) == 0) next
		split(val, vv, " "); s += vv[1]
	    }
	    END { printf "%.17g\n", s + 0 }'
}

# rss_kb PID: resident set of PID and its children, in KiB.
rss_kb() {
	local p total=0 v
	for p in "$1" $(pgrep -P "$1" 2>/dev/null); do
		v=$(awk '/^VmRSS:/ { print $2 }' "/proc/$p/status" 2>/dev/null)
		total=$((total + ${v:-0}))
	done
	echo "$total"
}

# The cache affinity key of the suites: with clusters A and B of equal
# weight, AKEY ranks A first in the wait-and-widen ring (8 or 150 virtual
# nodes) and in the pulsar ranking, both as the raw key and in the hashed
# form "h:<sha256 hex>" that sg-proxy routes on (bin/sg-proxy/dlog.h,
# dlog_affinity_key), so the tests hold whichever the daemon uses.  rank1
# checks it.
AKEY=s-30

# rank1 ALGO KEY [FORM]: the cluster sg-route ranks first for KEY (FORM raw
# or hashed; default both, which must agree) on an idle A, B snapshot under
# lb_session ALGO.  Overwrites $T/lb.json.
rank1() {
	local algo=$1 key=$2 form=${3:-both} k r out=
	jq -n '{clusters: [
	    {id: "A", rtt_ms: 1, max_engine_concurrency: 2, running: 0, queued: 0,
	     queued_input_tokens: 0, last_mean_input_tps: 20000, max_input_tps: 20000},
	    {id: "B", rtt_ms: 1, max_engine_concurrency: 2, running: 0, queued: 0,
	     queued_input_tokens: 0, last_mean_input_tps: 20000, max_input_tps: 20000}]}' >"$T/snap2.json"
	lb_session "$algo" true
	for k in "$key" "h:$(printf '%s' "$key" | sha256sum | cut -d' ' -f1)"; do
		r=$(jq -nc --arg k "$k" '{request_id: "r", model: "dummy-model",
		    cache_affinity_key: $k, input_tokens: 100}' |
		    "$BIN/sg-route" -c "$T/lb.json" -s "$T/snap2.json" --explain |
		    jq -r '.explain.original_order[0]')
		case $form in
		raw) echo "$r"; return 0 ;;
		hashed) out=$r ;;
		both) [ -z "$out" ] && out=$r
		      [ "$r" = "$out" ] || { echo "raw/hashed disagree"; return 1; } ;;
		esac
	done
	echo "$out"
}

# --- gateway role (tests/e2e/gateway-*.bats, openai.bats) --------------------
# The gateway suites put sg-proxy --role gateway in front of an upstream
# router: the recording tests/fixtures/gateway/fake_router.py (to see what
# the gateway sent and to script the router's answer) or a real
# sg-proxy --role router over sg-mockengines.  Clients send the public model
# id <routing_key>/<model>; STORE is the LMDB last-cluster store directory.

# start_fake_router [fake_router.py options]: sets ROUTER_URL.
start_fake_router() {
	rm -f "$T/router.port"
	"$PY" "$TOP/tests/fixtures/gateway/fake_router.py" \
	    --port-file "$T/router.port" "$@" \
	    >"$T/router.out" 2>"$T/router.err" 3>&- &
	PIDS+=("$!")
	wait_file "$T/router.port" || { cat "$T/router.err"; return 1; }
	ROUTER_URL=http://127.0.0.1:$(cat "$T/router.port")
}
# rctl PATH [BODY]: POST to a fake-router control.
rctl() {
	curl -sS --max-time 5 -H 'content-type: application/json' \
	    --data-binary "${2:-{\}}" "$ROUTER_URL$1"
}
rmode() { rctl /control/mode "$1" >/dev/null; }
rscript() { rctl /control/script "$1" >/dev/null; }
rreset() { rctl /control/reset >/dev/null; }
# rreqs: the routed requests the fake router recorded (JSON).
rreqs() { curl -sS --max-time 5 "$ROUTER_URL/control/requests"; }
rcount() { rreqs | jq '.requests | length'; }
# rhdr N NAME: the values (comma-joined) of header NAME on the Nth routed
# request (1-based; -1 the last); empty when absent.
rhdr() {
	rreqs | jq -r --argjson n "$1" --arg h "${2,,}" '
	    .requests[if $n < 0 then $n else $n - 1 end].headers[$h] // []
	    | join(",")'
}
# rhas N NAME: the Nth routed request carried header NAME; rlacks N NAME:
# it exists and did not (both fail when there is no Nth request).
rhas() {
	rreqs | jq -e --argjson n "$1" --arg h "${2,,}" '
	    .requests[if $n < 0 then $n else $n - 1 end].headers
	    | if . == null then error("no such request") else has($h) end' \
	    >/dev/null
}
rlacks() {
	rreqs | jq -e --argjson n "$1" --arg h "${2,,}" '
	    .requests[if $n < 0 then $n else $n - 1 end].headers
	    | if . == null then error("no such request") else has($h) | not end' \
	    >/dev/null || { echo "request $1: missing, or it carried $2"; return 1; }
}

# start_role TAG ROLE [sg-proxy options]: sg-proxy --role ROLE on a free
# port, output in $T/TAG.out and $T/TAG.err (TAG starts with "proxy" so
# teardown checks it), waits for /readyz 200.  Sets ROLE_PID, ROLE_URL.
start_role() {
	local tag=$1 role=$2 i code=
	shift 2
	rm -f "$T/$tag.port"
	"$PROXY" --role "$role" --listen 127.0.0.1:0 --port-file "$T/$tag.port" \
	    "$@" >"$T/$tag.out" 2>"$T/$tag.err" 3>&- &
	ROLE_PID=$!
	PIDS+=("$!")
	for i in $(seq 1 100); do
		[ -s "$T/$tag.port" ] && break
		alive "$ROLE_PID" || break
		sleep 0.1
	done
	if [ ! -s "$T/$tag.port" ]; then
		echo "sg-proxy --role $role did not write its port file; stderr:"
		cat "$T/$tag.err"
		return 1
	fi
	ROLE_URL=http://127.0.0.1:$(cat "$T/$tag.port")
	for i in $(seq 1 100); do
		code=$(curl -s --max-time 2 -o /dev/null -w '%{http_code}' "$ROLE_URL/readyz") || true
		[ "$code" = 200 ] && return 0
		sleep 0.1
	done
	echo "sg-proxy --role $role never became ready (last /readyz: $code); stderr:"
	cat "$T/$tag.err"
	return 1
}

# start_gateway [options]: --role gateway in front of $ROUTER_URL; sets
# GW_PID and GW_URL (GW_TAG names the output files, default proxy-gw).
start_gateway() {
	start_role "${GW_TAG:-proxy-gw}" gateway --router-url "$ROUTER_URL" "$@" ||
	    return 1
	GW_PID=$ROLE_PID
	GW_URL=$ROLE_URL
}
# cbody MODEL [JQ-OBJECT]: a chat body for the public model id MODEL with
# the object's members merged in.
cbody() {
	jq -nc --arg m "$1" --argjson x "${2:-{\}}" \
	    '{model: $m, messages: [{role: "user", content: "hello there"}]} + $x'
}
# rbody MODEL [JQ-OBJECT]: a Responses API body.
rbody() {
	jq -nc --arg m "$1" --argjson x "${2:-{\}}" \
	    '{model: $m, input: "hello there"} + $x'
}

# creq BODY [curl options]: a client's POST of BODY to
# $GW_URL${CPATH:-/v1/chat/completions}.  Sets STATUS (000 when curl
# failed), BODY, US and MS (elapsed microseconds and milliseconds); the
# response headers are in $T/h (hdr NAME).
creq() {
	local b=$1 t0 t1 rc=0
	shift
	: >"$T/h"
	t0=${EPOCHREALTIME/./}
	: >"$T/body"
	US=$(curl -sS --max-time "${REQ_MAX_TIME:-20}" -D "$T/h" -o "$T/body" \
	    -w '%{time_total}' -H 'content-type: application/json' "$@" \
	    --data-binary "$b" "${GW_URL}${CPATH:-/v1/chat/completions}" \
	    2>"$T/curl.err") || rc=$?
	t1=${EPOCHREALTIME/./}
	BODY=$(cat "$T/body")
	# curl's own clock (no fork in it); the shell's when curl failed
	US=$(awk -v s="${US:-}" 'BEGIN { printf "%d", s * 1000000 }')
	[ "$US" -gt 0 ] || US=$((t1 - t0))
	MS=$((US / 1000))
	STATUS=$(tr -d '\r' <"$T/h" | grep -E '^HTTP/' | tail -1 | awk '{print $2}')
	STATUS=${STATUS:-000}
	return "$rc"
}

# Store inspection with the real tools.
# lc_key BODY [sg-classify options]: the store key of a request body.
lc_key() {
	local b=$1
	shift
	printf '%s' "$b" | "$BIN/sg-classify" "$@" - | jq -r '.store_key // empty'
}
# lc_get KEY: the stored cluster id (empty on a miss or without a store).
lc_get() {
	"$BIN/sg-lastcluster" -d "$STORE" get "$1" 2>/dev/null || true
}
# lc_wait KEY VALUE: wait (bounded, 5 s) until the store maps KEY to VALUE.
lc_wait() {
	local i
	for i in $(seq 1 100); do
		[ "$(lc_get "$1")" = "$2" ] && return 0
		sleep 0.05
	done
	echo "store: $1 is '$(lc_get "$1")', not '$2'"
	return 1
}
# lc_dump: the store's entries, sorted (empty without a store).
lc_dump() {
	[ -e "$STORE/data.mdb" ] || return 0
	"$BIN/sg-lastcluster" -d "$STORE" dump | sort
}
# gmsum NAME [LABEL...]: msum over the gateway's /metrics.
gmsum() {
	METRICS=$(curl -sS --max-time 5 "$GW_URL/metrics") msum "$@"
}
