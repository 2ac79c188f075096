#!/usr/bin/env bats
# proxy-metrics.bats — the router's /metrics: accepted by a real
# Prometheus text parser (the reference Python client's, Debian
# python3-prometheus-client), and the session counter
# stargate_routing_session_selections_total (ref §5.4) starts with all six
# session_state x selection series at zero and then counts exactly the
# traffic sent.

bats_require_minimum_version 1.5.0

load proxy_helpers

setup() {
	proxy_setup
}

teardown() {
	proxy_teardown
}

M=stargate_routing_session_selections_total

# parse: the exposition of /metrics through prom_parse.py into $T/samples
# (one JSON object per sample); skips when the parser is not installed.
parse() {
	metrics >"$T/metrics.txt"
	local st=0
	"$PY" "$FIX/prom_parse.py" <"$T/metrics.txt" >"$T/samples" 2>"$T/parse.err" || st=$?
	if [ "$st" = 3 ]; then
		skip "python3-prometheus-client is not installed (apt-get install python3-prometheus-client)"
	fi
	[ "$st" = 0 ] || { cat "$T/parse.err"; head -50 "$T/metrics.txt"; return 1; }
}

# sel STATE SELECTION: the session counter's value for dummy-model in
# $T/metrics.txt, or "absent" (plain text, so that this does not need the
# Python parser).
sel() {
	METRICS=$(cat "$T/metrics.txt")
	if ! grep -E "^$M\{" "$T/metrics.txt" | grep -F 'model="dummy-model"' |
	    grep -F "session_state=\"$1\"" | grep -qF "selection=\"$2\""; then
		echo absent
		return
	fi
	msum "$M" 'model="dummy-model"' "session_state=\"$1\"" "selection=\"$2\""
}

@test "/metrics is accepted by the Prometheus client's text parser" {
	start_engine A -c 4 -t 1 --decode-tps 1000
	start_engine B -c 4 -t 1 --decode-tps 1000
	clusters A B
	lb_session wait-and-widen true
	start_proxy
	# some traffic of every kind: routed, refused, retried-free
	req -H "x-cache-affinity-key: $AKEY"
	[ "$STATUS" = 200 ] || { show; return 1; }
	OMIT=x-model req
	req -H 'x-routing-key: tenant "quoted" \ back' -H 'x-routing-method: pulsar'
	run -0 curl -sS --max-time 5 -D "$T/mh" -o /dev/null "$PROXY_URL/metrics"
	tr -d '\r' <"$T/mh" | grep -qi '^content-type: text/plain; version=0.0.4'
	parse
	[ -s "$T/samples" ]
	# counters and histograms that ref §9 names are there
	local n
	for n in stargate_requests_total stargate_routing_selections_total \
	    stargate_routing_duration_seconds_bucket \
	    stargate_proxy_duration_seconds_bucket "$M"; do
		[ "$(jq -s --arg n "$n" 'any(.[]; .name == $n)' "$T/samples")" = true ] ||
		    { echo "no samples of $n"; grep -c . "$T/samples"; return 1; }
	done
	# families without traffic yet are declared, typed
	for n in "$M" stargate_proxy_retries_total stargate_proxy_retry_exhausted_total \
	    stargate_admission_rejections_total; do
		grep -qx "# TYPE $n counter" "$T/metrics.txt" || { echo "no TYPE for $n"; return 1; }
	done
}

@test "the session counter has all six state/selection pairs at zero before traffic and counts the traffic after" {
	start_engine A -c 2 -t 1 --decode-tps 1000
	start_engine B -c 2 -t 1 --decode-tps 1000
	clusters A B
	lb_session wait-and-widen true 300
	start_proxy
	metrics >"$T/metrics.txt"
	local s p
	for s in new returning stale; do
		for p in primary fallback; do
			[ "$(sel $s $p)" = 0 ] || { echo "$s/$p: $(sel $s $p)"; grep "$M" "$T/metrics.txt"; return 1; }
		done
	done
	local K=(-H "x-cache-affinity-key: $AKEY")
	# new, primary x2: A (rank 1) free
	req "${K[@]}"; [ "$CLUSTER" = A ] || { show; return 1; }
	req "${K[@]}"; [ "$CLUSTER" = A ] || { show; return 1; }
	# stale, primary: the hint names no cluster; A free
	req "${K[@]}" -H 'x-stargate-last-cluster-id: Z'; [ "$CLUSTER" = A ] || { show; return 1; }
	# A full: new, fallback and stale, fallback go to B at once
	hold A 2
	settle
	req "${K[@]}"; [ "$CLUSTER" = B ] || { show; return 1; }
	req "${K[@]}" -H 'x-stargate-last-cluster-id: Z'; [ "$CLUSTER" = B ] || { show; return 1; }
	release A
	settle
	# returning, primary x3: back to B
	local i
	for i in 1 2 3; do
		req "${K[@]}" -H 'x-stargate-last-cluster-id: B'; [ "$CLUSTER" = B ] || { show; return 1; }
	done
	# B full: the returning session holds for X = 300 ms, then widens
	# to A: returning, fallback
	hold B 2
	settle
	req "${K[@]}" -H 'x-stargate-last-cluster-id: B'
	[ "$CLUSTER" = A ] || { show; return 1; }
	[ "$MS" -ge 270 ]
	# a request without a key is not classified
	req
	[ "$STATUS" = 200 ] || { show; return 1; }
	metrics >"$T/metrics.txt"
	grep "$M" "$T/metrics.txt"
	[ "$(sel new primary)" = 2 ]
	[ "$(sel new fallback)" = 1 ]
	[ "$(sel stale primary)" = 1 ]
	[ "$(sel stale fallback)" = 1 ]
	[ "$(sel returning primary)" = 3 ]
	[ "$(sel returning fallback)" = 1 ]
	# labels: the algorithm, and "" for the unscoped routing key
	[ "$(grep -E "^$M\{" "$T/metrics.txt" | grep -F 'model="dummy-model"' |
	    grep -vF 'routing_key="",' | wc -l)" = 0 ]
	[ "$(grep -E "^$M\{" "$T/metrics.txt" | grep -F 'model="dummy-model"' |
	    grep -vF 'algorithm="wait-and-widen"' | wc -l)" = 0 ]
	# and the whole-request counter agrees: 10 answered 200
	METRICS=$(cat "$T/metrics.txt")
	[ "$(msum stargate_requests_total 'status="200"')" = 10 ]
}

@test "debug logs record the session classification and never a raw affinity key" {
	start_engine A -c 2 -t 1 --decode-tps 1000
	start_engine B -c 2 -t 1 --decode-tps 1000
	clusters A B
	lb_session wait-and-widen true 300
	start_proxy --log-level debug
	local secret=secret-affinity-key-4711
	req -H "x-cache-affinity-key: $secret" -H 'x-stargate-last-cluster-id: B' \
	    -H 'authorization: Bearer sk-do-not-log-0042'
	[ "$STATUS" = 200 ] || { show; return 1; }
	req -H "x-cache-affinity-key: $secret"
	[ "$STATUS" = 200 ] || { show; return 1; }
	sleep 0.2
	grep 'session' "$T/proxy.err" | head -5
	# ref §5.4: one debug line per classification, with the state
	grep -q 'session_state=returning' "$T/proxy.err"
	grep -q 'session_state=new' "$T/proxy.err"
	grep 'session_state=returning' "$T/proxy.err" | grep -q 'last_cluster_promoted='
	! grep -qF "$secret" "$T/proxy.err"
	! grep -qF 'sk-do-not-log-0042' "$T/proxy.err"
	! grep -qF "$secret" "$T/proxy.out"
}
