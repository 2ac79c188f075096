#!/usr/bin/env bats
# sg-route(1): every algorithm, the NDJSON stream, --headers,
# --until-decided, --explain, every exit status, the shortcut-removal
# criteria of the session-aware routing proposal, determinism, and the session-aware criteria of
# issue 3 that are visible through sg-route.
#
# How the fixtures were chosen (tests/fixtures/sg-route/README.txt has the
# details).  Which cluster is rank 1 for a key depends on XXH3, so the keys
# were picked by computing the orders, then checked with
# `sg-route --explain` (original_order):
#   key "s-1",   model "m", no routing key, seed "", clusters {A, B}:
#                ring walk (V = 150) A, B and pulsar ranking A, B;
#   key "s-135", clusters {A, B, C}: ring A, B, C and pulsar A, B, C.
# Equal weights (max_input_tps 1000) everywhere, so only the hash orders.
# The "rank 1 is A" tests assert original_order too, so a fixture that
# stopped meaning what it says fails loudly instead of passing by accident.

bats_require_minimum_version 1.5.0

setup() {
	BIN=${SG_BINDIR:-$BATS_TEST_DIRNAME/../../build/san/bin}
	ROUTE=$BIN/sg-route
	F=$BATS_TEST_DIRNAME/../fixtures/sg-route
	MAN=$BATS_TEST_DIRNAME/../../man/sg-route.1
}

# j FILTER: jq -r over the captured output (one or more JSON lines).
j() {
	jq -r "$1" <<<"$output"
}

# js FILTER: jq -r over the captured lines as one array.
js() {
	jq -rs "$1" <<<"$output"
}

# --- usage, help, version ---------------------------------------------------

@test "--help prints usage on stdout and exits 0" {
	run -0 --separate-stderr "$ROUTE" --help
	[[ $output == usage:\ sg-route* ]]
	[[ $output == *--until-decided* ]]
	[ -z "$stderr" ]
}

@test "-h is --help" {
	run -0 --separate-stderr "$ROUTE" -h
	[[ $output == usage:\ sg-route* ]]
}

@test "--version prints 'sg-route 0.1.0'" {
	run -0 --separate-stderr "$ROUTE" --version
	[ "$output" = "sg-route 0.1.0" ]
}

@test "every long option in --help appears in man/sg-route.1 and back" {
	run -0 --separate-stderr "$ROUTE" --help
	opts=$(grep -oE -- '--[a-z][a-z-]+' <<<"$output" | sort -u)
	[ -n "$opts" ]
	for o in $opts; do
		grep -qF -- "Fl \\${o#-}" "$MAN" || { echo "missing in man: $o"; false; }
	done
	for o in $(grep -oE 'Fl \\-[a-z][a-z-]+' "$MAN" | sed 's/Fl \\-/--/' | sort -u); do
		grep -qF -- "$o" <<<"$output" || { echo "missing in --help: $o"; false; }
	done
}

@test "an unknown option is a usage error (64) with usage on stderr" {
	run -64 --separate-stderr "$ROUTE" --frobnicate -s "$F/abc-free.json" "$F/req-plain.json"
	[ -z "$output" ]
	[[ $stderr == *usage:\ sg-route* ]]
}

@test "a missing -s without --ndjson is a usage error (64)" {
	run -64 --separate-stderr "$ROUTE" "$F/req-plain.json"
	[[ $stderr == *"-s snapshot.json is required"* ]]
}

@test "--headers with --ndjson is a usage error (64)" {
	run -64 --separate-stderr "$ROUTE" --headers --ndjson "$F/rr.ndjson"
	[[ $stderr == *exclusive* ]]
}

@test "a bad --seed or --elapsed-ms is a usage error (64)" {
	run -64 --separate-stderr "$ROUTE" --seed -1 -s "$F/abc-free.json" "$F/req-plain.json"
	[[ $stderr == *--seed* ]]
	run -64 --separate-stderr "$ROUTE" --elapsed-ms 1e3 -s "$F/abc-free.json" "$F/req-plain.json"
	[[ $stderr == *--elapsed-ms* ]]
	run -64 --separate-stderr "$ROUTE" --elapsed-ms '' -s "$F/abc-free.json" "$F/req-plain.json"
}

@test "two input operands are a usage error (64)" {
	run -64 --separate-stderr "$ROUTE" -s "$F/abc-free.json" "$F/req-plain.json" "$F/req-new.json"
}

@test "the snapshot and the request cannot both come from stdin (64)" {
	run -64 --separate-stderr "$ROUTE" -s - </dev/null
}

# --- one decision per algorithm --------------------------------------------

@test "random: the only non-excluded cluster is chosen, rank 1" {
	run -0 --separate-stderr "$ROUTE" -s "$F/abc-free.json" "$F/req-random.json"
	[ "$(j .decision)" = select ]
	[ "$(j .algorithm)" = random ]
	[ "$(j .cluster_id)" = B ]
	[ "$(j .rank_depth)" = 1 ]
	[ "$(j .request_id)" = r-rand ]
}

@test "random: the choice varies with the request id" {
	reqs=$(for i in $(seq 1 30); do
		printf '{"request": {"request_id": "x-%d", "model": "m", "input_tokens": 1, "routing_method": "random"}}\n' "$i"
	done)
	run -0 --separate-stderr "$ROUTE" -s "$F/abc-free.json" --ndjson <<<"$reqs"
	[ "$(js 'length')" = 30 ]
	[ "$(js '[.[].cluster_id] | unique | length')" -ge 2 ]
	[ "$(js '[.[].cluster_id] - ["A","B","C"] | length')" = 0 ]
}

@test "round-robin: the stream advances A, B, C, A; a new snapshot replaces the old" {
	run -0 --separate-stderr "$ROUTE" -c "$F/lb-rr.json" --ndjson "$F/rr.ndjson"
	[ "$(js '[.[].cluster_id] | join(" ")')" = "A B C A Z" ]
	[ "$(js '[.[].algorithm] | unique | join(" ")')" = round-robin ]
}

@test "round-robin: the counter lives for the whole run, not per request" {
	# The same request four times still rotates: the state is the router's.
	reqs=$(printf '{"request": {"request_id": "same", "model": "m", "input_tokens": 1}}\n%.0s' 1 2 3 4)
	run -0 --separate-stderr "$ROUTE" -c "$F/lb-rr.json" -s "$F/abc-free.json" --ndjson <<<"$reqs"
	[ "$(js '[.[].cluster_id] | join(" ")')" = "A B C A" ]
}

@test "power-of-n: sampling every cluster picks the lowest TTFT" {
	# abc-rtt: rtt A 50, B 1, C 30 ms, otherwise equal and free.
	run -0 --separate-stderr "$ROUTE" -c "$F/lb-pon3.json" -s "$F/abc-rtt.json" "$F/req-plain.json"
	[ "$(j .algorithm)" = power-of-n ]
	[ "$(j .cluster_id)" = B ]
	[ "$(j .rank_depth)" = 1 ]
}

@test "pulsar: rank 1 of the rendezvous ranking is chosen" {
	run -0 --separate-stderr "$ROUTE" -s "$F/abc-free.json" --explain "$F/req-pulsar.json"
	[ "$(j .algorithm)" = pulsar ]
	[ "$(j '.explain.effective_order | join(" ")')" = "A B C" ]
	[ "$(j .cluster_id)" = A ]
	[ "$(j .rank_depth)" = 1 ]
}

@test "pulsar: consider_kv_free_tokens skips a rank 1 without free KV tokens" {
	# abc-kv: A has 50 free KV tokens, the request needs 100.
	run -0 --separate-stderr "$ROUTE" -c "$F/lb-pulsar-kv.json" -s "$F/abc-kv.json" "$F/req-pulsar.json"
	[ "$(j .cluster_id)" = B ]
	[ "$(j .rank_depth)" = 2 ]
	[ "$(j .kv_skip)" = true ]
}

@test "wait-and-widen: full fast clusters, idle slow one -> wait 150 ms (ref 4.5.2)" {
	run -0 --separate-stderr "$ROUTE" -s "$F/fast-full-slow-idle.json" "$F/req-slow.json"
	[ "$(j .algorithm)" = wait-and-widen ]
	[ "$(j .decision)" = wait ]
	[ "$(j .recheck_at_ms)" = 150 ]
	run -0 --separate-stderr "$ROUTE" -s "$F/fast-full-slow-idle.json" --elapsed-ms 149 "$F/req-slow.json"
	[ "$(j .decision)" = wait ]
	[ "$(j .recheck_at_ms)" = 150 ]
	run -0 --separate-stderr "$ROUTE" -s "$F/fast-full-slow-idle.json" --elapsed-ms 150 "$F/req-slow.json"
	[ "$(j .decision)" = select ]
	[ "$(j .cluster_id)" = S ]
}

@test "wait-and-widen: every cluster full -> reject 503, exit 2" {
	run -2 --separate-stderr "$ROUTE" -c "$F/lb-waw-noflag.json" -s "$F/ab-full.json" "$F/req-plain.json"
	[ "$(j .decision)" = reject ]
	[ "$(j .status)" = 503 ]
	[ "$(j .code)" = overloaded_error ]
}

@test "pulsar-wait-and-widen: a free rank 1 is chosen in the affinity phase" {
	run -0 --separate-stderr "$ROUTE" -c "$F/lb-pwaw-defaults.json" -s "$F/ab-drained.json" --explain "$F/req-new.json"
	[ "$(j .algorithm)" = pulsar-wait-and-widen ]
	[ "$(j '.explain.original_order | join(" ")')" = "A B" ]
	[ "$(j .cluster_id)" = A ]
	[ "$(j .rank_depth)" = 1 ]
	[ "$(j .phase)" = affinity ]
}

# --- --until-decided ---------------------------------------------------------

@test "--until-decided: prints every step, the wait, then the select" {
	run -0 --separate-stderr "$ROUTE" -s "$F/fast-full-slow-idle.json" --until-decided "$F/req-slow.json"
	[ "${#lines[@]}" -eq 2 ]
	[ "$(js '.[0].decision + " " + (.[0].elapsed_ms|tostring) + " " + (.[0].recheck_at_ms|tostring)')" = "wait 0 150" ]
	[ "$(js '.[1].decision + " " + (.[1].elapsed_ms|tostring) + " " + .[1].cluster_id')" = "select 150 S" ]
}

@test "--until-decided: a select at once is a single line" {
	run -0 --separate-stderr "$ROUTE" -s "$F/abc-free.json" --until-decided "$F/req-random.json"
	[ "${#lines[@]}" -eq 1 ]
	[ "$(j .decision)" = select ]
}

@test "--until-decided: waits that end in a reject exit 2" {
	# x-max-wait-ms 40: polls (1..9 ms) until the deadline, then 503.
	req='{"request_id": "poll", "model": "m", "input_tokens": 1, "max_wait_ms": 40}'
	run -2 --separate-stderr "$ROUTE" -c "$F/lb-waw-noflag.json" -s "$F/ab-full.json" --until-decided <<<"$req"
	[ "$(js '.[-1].decision')" = reject ]
	[ "$(js '[.[:-1][].decision] | unique | join(" ")')" = wait ]
	[ "$(js '.[-2].recheck_at_ms <= 40')" = true ]
	[ "$(js '[.[].elapsed_ms] | . == sort')" = true ]
}

# --- --explain ---------------------------------------------------------------

@test "--explain adds the candidate table" {
	run -0 --separate-stderr "$ROUTE" -s "$F/fast-full-slow-idle.json" --explain "$F/req-slow.json"
	[ "$(j '.explain.candidates | length')" = 4 ]
	[ "$(j '[.explain.candidates[].cluster_id] | join(" ")')" = "F1 F2 F3 S" ]
	[ "$(j '.explain.candidates[] | select(.cluster_id == "S") | .ttft_ms')" = 805 ]
	[ "$(j '.explain.candidates[] | select(.cluster_id == "F1") | .ttft_ms')" = 205 ]
	[ "$(j '.explain.candidates[] | select(.cluster_id == "F1") | .has_capacity')" = false ]
	# The decision itself is unchanged by --explain.
	[ "$(j .decision)" = wait ]
	[ "$(j .recheck_at_ms)" = 150 ]
}

@test "--explain does not advance round-robin" {
	reqs=$(printf '{"request": {"request_id": "e", "model": "m", "input_tokens": 1}}\n%.0s' 1 2 3)
	run -0 --separate-stderr "$ROUTE" -c "$F/lb-rr.json" -s "$F/abc-free.json" --explain --ndjson <<<"$reqs"
	[ "$(js '[.[].cluster_id] | join(" ")')" = "A B C" ]
}

# --- NDJSON stream -------------------------------------------------------------

@test "stream: bad lines are reported as source:line, skipped, exit 65" {
	run -65 --separate-stderr "$ROUTE" --ndjson "$F/bad-lines.ndjson"
	[ "$(js '[.[].request_id] | join(" ")')" = "b-1 b-5" ]
	# The bad snapshot (line 5) left the current one in place.
	[ "$(js '[.[].cluster_id] | join(" ")')" = "A A" ]
	for n in 3 4 5 6 7; do
		[[ $stderr == *"bad-lines.ndjson:$n: "* ]] || { echo "no report for line $n"; false; }
	done
	[[ $stderr != *"bad-lines.ndjson:8:"* ]]
	[[ $stderr == *":4: "*"(400 unknown_method)"* ]]
	[[ $stderr == *":5: "*runing* ]]
}

@test "stream: a request before any snapshot is bad input (65)" {
	run -65 --separate-stderr "$ROUTE" --ndjson "$F/no-snapshot.ndjson"
	[ -z "$output" ]
	[[ $stderr == *"no-snapshot.ndjson:1: request before any snapshot"* ]]
}

@test "stream: -s gives the first snapshot; stdin is the default input" {
	run -0 --separate-stderr "$ROUTE" -s "$F/abc-free.json" --ndjson <"$F/no-snapshot.ndjson"
	[ "$(j .decision)" = select ]
	[ "$(j .request_id)" = n-1 ]
}

@test "stream: exit 2 if any request was rejected" {
	reqs='{"request": {"request_id": "ok", "model": "m", "input_tokens": 1, "routing_method": "random"}}
{"snapshot": {"clusters": []}}
{"request": {"request_id": "none", "model": "m", "input_tokens": 1}}'
	run -2 --separate-stderr "$ROUTE" -s "$F/abc-free.json" --ndjson <<<"$reqs"
	[ "$(js '[.[].decision] | join(" ")')" = "select reject" ]
	[ "$(js '.[1].status')" = 404 ]
	[ "$(js '.[1].code')" = no_eligible_candidates ]
}

@test "stream: a record longer than 4 MiB is bad input, the rest flows" {
	big=$BATS_TEST_TMPDIR/big.ndjson
	{
		head -c 4200000 /dev/zero | tr '\0' ' '
		echo
		echo '{"request": {"request_id": "after", "model": "m", "input_tokens": 1}}'
	} >"$big"
	run -65 --separate-stderr "$ROUTE" -s "$F/abc-free.json" --ndjson "$big"
	[ "$(j .request_id)" = after ]
	[[ $stderr == *"big.ndjson:1: record larger than"* ]]
}

# --- --headers -----------------------------------------------------------------

@test "--headers: a trimmed x-stargate-last-cluster-id makes a returning session" {
	run -0 --separate-stderr "$ROUTE" -c "$F/lb-pwaw-flag.json" -s "$F/ab-drained.json" --headers "$F/hdr-returning.txt"
	[ "$(j .request_id)" = h-1 ]
	[ "$(j .session_state)" = returning ]
	[ "$(j .cluster_id)" = B ]
	[ "$(j .selection)" = primary ]
}

@test "--headers: a blank x-stargate-last-cluster-id is absent (new, not 400)" {
	run -0 --separate-stderr "$ROUTE" -c "$F/lb-pwaw-flag.json" -s "$F/ab-drained.json" --headers "$F/hdr-blank-hint.txt"
	[ "$(j .session_state)" = new ]
	[ "$(j .cluster_id)" = A ]
	[ -z "$stderr" ]
}

@test "--headers: an invalid UTF-8 x-stargate-last-cluster-id is absent (new, not 400)" {
	run -0 --separate-stderr "$ROUTE" -c "$F/lb-pwaw-flag.json" -s "$F/ab-drained.json" --headers "$F/hdr-invalid-utf8-hint.txt"
	[ "$(j .session_state)" = new ]
	[ "$(j .cluster_id)" = A ]
	[ -z "$stderr" ]
}

@test "--headers: a bad x-input-tokens is a 400 request error, exit 65" {
	run -65 --separate-stderr "$ROUTE" -s "$F/abc-free.json" --headers "$F/hdr-bad-input-tokens.txt"
	[ -z "$output" ]
	[[ $stderr == sg-route:\ *hdr-bad-input-tokens.txt:\ * ]]
	[[ $stderr == *x-input-tokens* ]]
	[[ $stderr == *"(400"* ]]
}

@test "--headers: read from stdin" {
	run -0 --separate-stderr "$ROUTE" -s "$F/abc-free.json" --headers - < <(printf 'X-Request-Id: h-9\nX-Model: m\nX-Input-Tokens: 5\nX-Routing-Method: random\n')
	[ "$(j .request_id)" = h-9 ]
	[ "$(j .algorithm)" = random ]
}

@test "--headers: a missing x-request-id is a 400 request error, exit 65" {
	run -65 --separate-stderr "$ROUTE" -s "$F/abc-free.json" --headers < <(printf 'x-model: m\nx-input-tokens: 5\n')
	[[ $stderr == *x-request-id* ]]
}

# --- error exits -----------------------------------------------------------------

@test "malformed request JSON is bad input (65) with file:line:column" {
	run -65 --separate-stderr "$ROUTE" -s "$F/abc-free.json" "$F/req-bad-json.json"
	[ -z "$output" ]
	[[ $stderr == sg-route:\ *req-bad-json.json:2:* ]]
}

@test "an unknown request field is bad input (65) naming the field" {
	run -65 --separate-stderr "$ROUTE" -s "$F/abc-free.json" "$F/req-unknown-field.json"
	[[ $stderr == *colour* ]]
}

@test "an unknown routing_method is a 400 request error, exit 65 with the class" {
	run -65 --separate-stderr "$ROUTE" -s "$F/abc-free.json" "$F/req-bad-method.json"
	[ -z "$output" ]
	[[ $stderr == *"(400 unknown_method)"* ]]
}

@test "a bad snapshot file is bad input (65) naming the field" {
	echo '{"clusters": [{"id": "A", "runing": 1}]}' >"$BATS_TEST_TMPDIR/snap.json"
	run -65 --separate-stderr "$ROUTE" -s "$BATS_TEST_TMPDIR/snap.json" "$F/req-plain.json"
	[[ $stderr == *runing* ]]
}

@test "a missing request, snapshot or config file is exit 66" {
	run -66 --separate-stderr "$ROUTE" -s "$F/abc-free.json" "$F/no-such-request.json"
	[[ $stderr == *"cannot open"*no-such-request.json* ]]
	run -66 --separate-stderr "$ROUTE" -s "$F/no-such-snapshot.json" "$F/req-plain.json"
	[[ $stderr == *no-such-snapshot.json* ]]
	run -66 --separate-stderr "$ROUTE" -c "$F/no-such-config.json" -s "$F/abc-free.json" "$F/req-plain.json"
	[[ $stderr == *no-such-config.json* ]]
	run -66 --separate-stderr "$ROUTE" --ndjson "$F/no-such-stream.ndjson"
	run -66 --separate-stderr "$ROUTE" -s "$F" "$F/req-plain.json"
	[[ $stderr == *"Is a directory"* ]]
}

@test "last_cluster_affinity on pulsar is a config error (78) naming field and algorithm" {
	run -78 --separate-stderr "$ROUTE" -c "$F/lb-bad-pulsar-flag.json" -s "$F/abc-free.json" "$F/req-plain.json"
	[ -z "$output" ]
	[[ $stderr == *last_cluster_affinity* ]]
	[[ $stderr == *pulsar* ]]
}

@test "malformed lb-config JSON is a config error (78)" {
	run -78 --separate-stderr "$ROUTE" -c "$F/lb-bad-json.json" -s "$F/abc-free.json" "$F/req-plain.json"
	[[ $stderr == sg-route:\ * ]]
}

@test "an empty snapshot is reject 404 no_eligible_candidates, exit 2" {
	run -2 --separate-stderr "$ROUTE" -s "$F/empty.json" "$F/req-plain.json"
	[ "$(j .decision)" = reject ]
	[ "$(j .status)" = 404 ]
	[ "$(j .code)" = no_eligible_candidates ]
}

@test "a failed write to stdout is exit 74" {
	run -74 --separate-stderr sh -c '"$1" -s "$2" "$3" >/dev/full' sh "$ROUTE" "$F/abc-free.json" "$F/req-plain.json"
	[[ $stderr == *"write error"* ]]
	run -74 --separate-stderr sh -c '"$1" -c "$2" --ndjson "$3" >/dev/full' sh "$ROUTE" "$F/lb-rr.json" "$F/rr.ndjson"
}

# --- shortcut removal ------------------------------------------------------

@test "shortcut removal: no queue-SLO fields, max_queued 0, rank 1 at its limit, rank 2 free -> not rank 1" {
	run -0 --separate-stderr "$ROUTE" -c "$F/lb-pwaw-defaults.json" -s "$F/ab-afull.json" --explain "$F/req-new.json"
	[ "$(j '.explain.original_order[0]')" = A ]
	[ "$(j .decision)" = select ]
	[ "$(j .cluster_id)" = B ]
	[ "$(j .rank_depth)" = 2 ]
}

@test "shortcut removal: max_queued 4 with one request queued on rank 1 -> rank 1" {
	run -0 --separate-stderr "$ROUTE" -c "$F/lb-pwaw-mq4.json" -s "$F/ab-aqueued.json" "$F/req-new.json"
	[ "$(j .cluster_id)" = A ]
	[ "$(j .rank_depth)" = 1 ]
	# Contrast: the same snapshot with max_queued 0 overflows to rank 2.
	run -0 --separate-stderr "$ROUTE" -c "$F/lb-pwaw-defaults.json" -s "$F/ab-aqueued.json" "$F/req-new.json"
	[ "$(j .cluster_id)" = B ]
}

@test "shortcut removal: cache_affinity_wait_ms 300, max_queued 0 -> wait until 300 ms, then widens" {
	run -0 --separate-stderr "$ROUTE" -c "$F/lb-pwaw-x300.json" -s "$F/ab-afull.json" --until-decided "$F/req-new.json"
	[ "${#lines[@]}" -eq 2 ]
	[ "$(js '.[0].decision + " " + (.[0].recheck_at_ms|tostring)')" = "wait 300" ]
	[ "$(js '.[1].decision + " " + (.[1].elapsed_ms|tostring) + " " + .[1].cluster_id + " " + (.[1].rank_depth|tostring)')" = "select 300 B 2" ]
}

# --- determinism (reproducible randomness, stargate-lb-config(5)) ---------
# eight-free: eight identical free clusters and the utilization comparator,
# so every power-of-n choice is a tie broken by the PRNG.

@test "determinism: the same request twice in one process decides the same" {
	run -0 --separate-stderr "$ROUTE" -c "$F/lb-det-a.json" --ndjson "$F/det-twice.ndjson"
	[ "$(js length)" = 40 ]
	# Pairs (d-i, d-i) agree ...
	[ "$(js '[range(0; length; 2) as $i | .[$i] == .[$i + 1]] | all')" = true ]
	# ... and the choice is really random across request ids.
	[ "$(js '[.[].cluster_id] | unique | length')" -ge 3 ]
}

@test "determinism: two processes with the same seed decide the same" {
	run -0 --separate-stderr "$ROUTE" -c "$F/lb-det-a.json" --seed 7 --ndjson "$F/det-twice.ndjson"
	first=$output
	run -0 --separate-stderr "$ROUTE" -c "$F/lb-det-a.json" --seed 7 --ndjson "$F/det-twice.ndjson"
	[ "$output" = "$first" ]
	# A different seed gives a different sequence (the seed is wired in).
	run -0 --separate-stderr "$ROUTE" -c "$F/lb-det-a.json" --seed 8 --ndjson "$F/det-twice.ndjson"
	[ "$output" != "$first" ]
}

@test "determinism: lb-config files that differ only in unrelated models decide the same" {
	run -0 --separate-stderr "$ROUTE" -c "$F/lb-det-a.json" --ndjson "$F/det-twice.ndjson"
	a=$output
	run -0 --separate-stderr "$ROUTE" -c "$F/lb-det-b.json" --ndjson "$F/det-twice.ndjson"
	[ "$output" = "$a" ]
}

# --- session-aware routing through sg-route (issue 3) ------------------------

# thrash ALG FLAG: the cache-thrash stream of stargate(7) with k = 1 (A full
# -> first request with no hint; A drains; 10 requests with hint B).
thrash() {
	run -0 --separate-stderr "$ROUTE" -c "$F/lb-$1-$2.json" --until-decided --ndjson "$F/thrash.ndjson"
}

@test "cache thrash, wait-and-widen, flag on: new overflows to B at once, 10 returning stay on B" {
	thrash waw flag
	[ "$(js length)" = 11 ]
	[ "$(js '.[0] | [.request_id, .decision, .cluster_id, .elapsed_ms, .session_state, .selection] | join(" ")')" = "t-0 select B 0 new fallback" ]
	[ "$(js '[.[1:][] | .cluster_id + "/" + .session_state + "/" + .selection + "/" + (.promoted|tostring)] | unique | join(" ")')" = "B/returning/primary/true" ]
	[ "$(js '[.[1:][].request_id] | join(" ")')" = "t-1 t-2 t-3 t-4 t-5 t-6 t-7 t-8 t-9 t-10" ]
}

@test "cache thrash, wait-and-widen, flag off: first waits 300 ms then B; the 10 go back to A" {
	thrash waw noflag
	[ "$(js '.[0] | [.request_id, .decision, .recheck_at_ms] | join(" ")')" = "t-0 wait 300" ]
	[ "$(js '.[1] | [.request_id, .cluster_id, .elapsed_ms] | join(" ")')" = "t-0 B 300" ]
	[ "$(js '[.[2:][].cluster_id] | join("")')" = AAAAAAAAAA ]
	[ "$(js '[.[] | has("session_state")] | any')" = false ]
}

@test "cache thrash, pulsar-wait-and-widen, flag on: new overflows to B at once, 10 returning stay on B" {
	thrash pwaw flag
	[ "$(js length)" = 11 ]
	[ "$(js '.[0] | [.request_id, .decision, .cluster_id, .elapsed_ms, .session_state, .selection] | join(" ")')" = "t-0 select B 0 new fallback" ]
	[ "$(js '[.[1:][] | .cluster_id + "/" + .session_state + "/" + .selection + "/" + (.promoted|tostring)] | unique | join(" ")')" = "B/returning/primary/true" ]
}

@test "cache thrash, pulsar-wait-and-widen, flag off: first waits 300 ms then B; the 10 go back to A" {
	thrash pwaw noflag
	[ "$(js '.[0] | [.request_id, .decision, .recheck_at_ms] | join(" ")')" = "t-0 wait 300" ]
	[ "$(js '.[1] | [.request_id, .cluster_id, .elapsed_ms] | join(" ")')" = "t-0 B 300" ]
	[ "$(js '[.[2:][].cluster_id] | join("")')" = AAAAAAAAAA ]
	[ "$(js '[.[] | has("session_state")] | any')" = false ]
}

@test "new session (both algorithms): rank 1 full, rank 2 free -> rank 2 at elapsed 0, not promoted" {
	for alg in waw pwaw; do
		run -0 --separate-stderr "$ROUTE" -c "$F/lb-$alg-flag.json" -s "$F/ab-afull.json" "$F/req-new.json"
		[ "$(j '[.decision, .cluster_id, .session_state, .promoted, .selection] | map(tostring) | join(" ")')" = "select B new false fallback" ]
	done
}

@test "returning session (both algorithms): waits for B during X, never A, then widens" {
	# ab-bfull: A free, B (the last cluster) full.
	for alg in waw pwaw; do
		run -0 --separate-stderr "$ROUTE" -c "$F/lb-$alg-flag.json" -s "$F/ab-bfull.json" --until-decided "$F/req-returning-b.json"
		[ "$(js '.[0] | [.decision, .session_state, .promoted, .recheck_at_ms] | map(tostring) | join(" ")')" = "wait returning true 300" ]
		[ "$(js '[.[] | select(.decision == "select")] | length')" = 1 ]
		[ "$(js '.[-1] | [.cluster_id, .selection, .session_state] | join(" ")')" = "A fallback returning" ]
		[ "$(js '.[-1].elapsed_ms >= 300')" = true ]
	done
}

@test "returning session, flag off (both algorithms): the hint is ignored, A at once" {
	for alg in waw pwaw; do
		run -0 --separate-stderr "$ROUTE" -c "$F/lb-$alg-noflag.json" -s "$F/ab-bfull.json" "$F/req-returning-b.json"
		[ "$(j .cluster_id)" = A ]
		[ "$(j 'has("session_state")')" = false ]
	done
}

@test "--explain shows the promotion: effective_order starts with the hint" {
	for alg in waw pwaw; do
		run -0 --separate-stderr "$ROUTE" -c "$F/lb-$alg-flag.json" -s "$F/ab-drained.json" --explain "$F/req-returning-b.json"
		[ "$(j '.explain.session.state')" = returning ]
		[ "$(j '.explain.session.promoted')" = true ]
		[ "$(j '.explain.session.last_cluster_id')" = B ]
		[ "$(j '.explain.original_order[0]')" = A ]
		[ "$(j '.explain.effective_order[0]')" = B ]
		[ "$(j .cluster_id)" = B ]
	done
	# pulsar-wait-and-widen rotates the full ranking.
	[ "$(j '.explain.effective_order | join(" ")')" = "B A" ]
}

@test "--explain for a new session: no promotion, X 0, scale 1" {
	run -0 --separate-stderr "$ROUTE" -c "$F/lb-pwaw-flag.json" -s "$F/ab-afull.json" --explain "$F/req-new.json"
	[ "$(j '.explain.session.state')" = new ]
	[ "$(j '.explain.session.promoted')" = false ]
	[ "$(j '.explain.x_ms')" = 0 ]
	[ "$(j '.explain.scale')" = 1 ]
	[ "$(j '.explain.effective_order == .explain.original_order')" = true ]
}

@test "stale hint (both algorithms): classified stale, decided exactly like new" {
	for alg in waw pwaw; do
		for snap in ab-afull ab-drained ab-full; do
			run --separate-stderr "$ROUTE" -c "$F/lb-$alg-flag.json" -s "$F/$snap.json" "$F/req-new.json"
			new_status=$status
			new=$(j 'del(.session_state)')
			[ "$(j .session_state)" = new ]
			run --separate-stderr "$ROUTE" -c "$F/lb-$alg-flag.json" -s "$F/$snap.json" "$F/req-stale.json"
			[ "$status" = "$new_status" ]
			[ "$(j .session_state)" = stale ]
			[ "$(j 'del(.session_state)')" = "$new" ]
		done
	done
}

@test "the hint has no effect without a cache affinity key" {
	run -0 --separate-stderr "$ROUTE" -c "$F/lb-pwaw-flag.json" -s "$F/ab-bfull.json" "$F/req-nokey-b.json"
	[ "$(j 'has("session_state")')" = false ]
}

@test "returning, k = 1 (both algorithms): the discount s applies to B, not to A" {
	for alg in waw pwaw; do
		run -0 --separate-stderr "$ROUTE" -c "$F/lb-$alg-flag.json" -s "$F/ab-drained.json" --explain "$F/req-returning-b.json"
		[ "$(j '.explain.candidates[] | select(.cluster_id == "B") | .prefill_ms')" = 10 ]
		[ "$(j '.explain.candidates[] | select(.cluster_id == "A") | .prefill_ms')" = 100 ]
	done
}

@test "returning, k = 2 (both algorithms): group (A, B) with last C becomes (C, A); B only after X" {
	# key s-135 orders A, B, C on the ring and in the pulsar ranking.
	req='{"request_id": "k2", "model": "m", "cache_affinity_key": "s-135", "input_tokens": 100, "last_cluster_id": "C"}'
	for alg in waw pwaw; do
		run -0 --separate-stderr "$ROUTE" -c "$F/lb-$alg-k2-flag.json" -s "$F/abc-free.json" --explain <<<"$req"
		[ "$(j '.explain.original_order[:2] | join(" ")')" = "A B" ]
		[ "$(j '.explain.affinity_group | join(" ")')" = "C A" ]
		# abc-bonly: only B is free.  It is outside the group, so only after X.
		run -0 --separate-stderr "$ROUTE" -c "$F/lb-$alg-k2-flag.json" -s "$F/abc-bonly.json" --until-decided <<<"$req"
		[ "$(js '.[0] | [.decision, .recheck_at_ms] | map(tostring) | join(" ")')" = "wait 300" ]
		[ "$(js '.[-1] | [.decision, .cluster_id, .elapsed_ms, .selection] | map(tostring) | join(" ")')" = "select B 300 fallback" ]
	done
}

@test "returning, k = 2 (both algorithms): group (A, B) with last B keeps members A and B" {
	req='{"request_id": "k2", "model": "m", "cache_affinity_key": "s-135", "input_tokens": 100, "last_cluster_id": "B"}'
	for alg in waw pwaw; do
		run -0 --separate-stderr "$ROUTE" -c "$F/lb-$alg-k2-flag.json" -s "$F/abc-free.json" --explain <<<"$req"
		[ "$(j '.explain.affinity_group | join(" ")')" = "B A" ]
		[ "$(j '.promoted')" = true ]
	done
}

@test "returning, pulsar-wait-and-widen k = 1 with bands: last D -> open set D, A, B after X; C with the next band" {
	# key s-41 ranks A, B, C, D, E; abcde-conly: only C is free.
	req='{"request_id": "bands", "model": "m", "cache_affinity_key": "s-41", "input_tokens": 100, "last_cluster_id": "D"}'
	run -0 --separate-stderr "$ROUTE" -c "$F/lb-pwaw-bands-flag.json" -s "$F/abcde-conly.json" --explain --until-decided <<<"$req"
	[ "$(js '.[0].explain.original_order | join(" ")')" = "A B C D E" ]
	[ "$(js '.[0].explain.effective_order | join(" ")')" = "D A B C E" ]
	[ "$(js '[.[] | [.elapsed_ms, .decision] | map(tostring) | join(" ")] | join(", ")')" = "0 wait, 300 wait, 500 select" ]
	[ "$(js '.[1].explain.open_set | join(" ")')" = "D A B" ]
	[ "$(js '.[1].recheck_at_ms')" = 500 ]
	[ "$(js '.[2].cluster_id')" = C ]
}

@test "returning: an excluded last cluster acts as an ineligible rank 1 (wait X, then widen)" {
	req='{"request_id": "ex", "model": "m", "cache_affinity_key": "s-1", "input_tokens": 100, "last_cluster_id": "B", "excluded_cluster_ids": ["B"]}'
	for alg in waw pwaw; do
		run -0 --separate-stderr "$ROUTE" -c "$F/lb-$alg-flag.json" -s "$F/ab-drained.json" --until-decided <<<"$req"
		[ "$(js '.[0] | [.decision, .session_state, .recheck_at_ms] | map(tostring) | join(" ")')" = "wait returning 300" ]
		[ "$(js '.[-1] | [.decision, .cluster_id, .elapsed_ms] | map(tostring) | join(" ")')" = "select A 300" ]
	done
}

@test "no promotion is carried into the next request of the same key" {
	reqs='{"request": {"request_id": "p-1", "model": "m", "cache_affinity_key": "s-1", "input_tokens": 100, "last_cluster_id": "B"}}
{"request": {"request_id": "p-2", "model": "m", "cache_affinity_key": "s-1", "input_tokens": 100}}'
	for alg in waw pwaw; do
		run -0 --separate-stderr "$ROUTE" -c "$F/lb-$alg-flag.json" -s "$F/ab-drained.json" --explain --ndjson <<<"$reqs"
		[ "$(js '[.[] | .cluster_id + "/" + .session_state] | join(" ")')" = "B/returning A/new" ]
		[ "$(js '.[1].explain.effective_order[0]')" = A ]
	done
}

@test "the hint has no effect when wait-and-widen has no selection count" {
	run -0 --separate-stderr "$ROUTE" -c "$F/lb-waw-nok-flag.json" -s "$F/ab-drained.json" "$F/req-returning-b.json"
	[ "$(j .decision)" = select ]
	[ "$(j 'has("session_state")')" = false ]
}

@test "the hint has no effect when routing_method selects a definition without the flag" {
	req='{"request_id": "o", "model": "m", "cache_affinity_key": "s-1", "input_tokens": 100, "last_cluster_id": "B", "routing_method": "wait-and-widen"}'
	run -0 --separate-stderr "$ROUTE" -c "$F/lb-pwaw-flag-override.json" -s "$F/ab-drained.json" <<<"$req"
	[ "$(j .algorithm)" = wait-and-widen ]
	[ "$(j .cluster_id)" = A ]
	[ "$(j 'has("session_state")')" = false ]
	# Without the override the model's own definition classifies it.
	run -0 --separate-stderr "$ROUTE" -c "$F/lb-pwaw-flag-override.json" -s "$F/ab-drained.json" "$F/req-returning-b.json"
	[ "$(j .session_state)" = returning ]
}

# random_stream SEED: 300 random snapshots, each followed by one request
# without a hint and the same request with a hint (a cluster id, or "Z").
random_stream() {
	awk -v seed="$1" 'BEGIN {
		srand(seed)
		for (i = 1; i <= 300; i++) {
			n = 2 + int(rand() * 5)
			printf "{\"snapshot\": {\"clusters\": ["
			for (c = 1; c <= n; c++) {
				max = 1 + int(rand() * 4); run = int(rand() * (max + 2))
				q = int(rand() * 3); qt = q * int(rand() * 500)
				printf "%s{\"id\": \"c%d\", \"rtt_ms\": %d, \"max_engine_concurrency\": %d, \"running\": %d, \"queued\": %d, \"queued_input_tokens\": %d, \"last_mean_input_tps\": %d, \"max_input_tps\": %d}", \
				    (c > 1 ? ", " : ""), c, 1 + int(rand() * 100), max, run, q, qt, \
				    500 + int(rand() * 2000), 1000 + int(rand() * 3000)
			}
			printf "]}}\n"
			base = sprintf("\"request_id\": \"p-%d\", \"model\": \"m\", \"cache_affinity_key\": \"k-%d\", \"input_tokens\": %d, \"elapsed_ms\": %d", \
			    i, int(rand() * 50), 1 + int(rand() * 400), int(rand() * 700))
			hint = rand() < 0.2 ? "Z" : "c" (1 + int(rand() * n))
			printf "{\"request\": {%s}}\n", base
			printf "{\"request\": {%s, \"last_cluster_id\": \"%s\"}}\n", base, hint
		}
	}'
}

@test "flag off (both algorithms): decisions are identical with and without the hint over 300 random snapshots" {
	random_stream 42 >"$BATS_TEST_TMPDIR/random.ndjson"
	for alg in waw pwaw; do
		run --separate-stderr "$ROUTE" -c "$F/lb-$alg-noflag.json" --ndjson "$BATS_TEST_TMPDIR/random.ndjson"
		[ "$status" -eq 0 ] || [ "$status" -eq 2 ]
		[ -z "$stderr" ]
		[ "$(js length)" = 600 ]
		[ "$(js '[range(0; length; 2) as $i | .[$i] == .[$i + 1]] | all')" = true ]
		# The table covers more than one kind of decision.
		[ "$(js '[.[].decision] | unique | length')" -ge 2 ]
		# With the flag on the same stream does change where requests go,
		# so the comparison above can fail.
		run --separate-stderr "$ROUTE" -c "$F/lb-$alg-flag.json" --ndjson "$BATS_TEST_TMPDIR/random.ndjson"
		[ "$(js 'map(del(.session_state, .promoted, .selection)) | [range(0; length; 2) as $i | .[$i] == .[$i + 1]] | all')" = false ]
	done
}

# --- documentation and the demo ----------------------------------------------

@test "the README example prints what the README says" {
	root=$BATS_TEST_DIRNAME/../..
	run -0 --separate-stderr "$ROUTE" -c "$root/tools/demo/lb-config.json" \
	    -s "$root/tools/demo/fleet-east-drained.json" --explain "$root/tools/demo/session-next.json"
	got=$(jq -c '{decision, cluster_id, session_state, selection, order: .explain.effective_order}' <<<"$output")
	grep -qxF "    $got" "$root/README.md"
}

@test "--until-decided: max_wait_ms shorter than X ends the wait with a 503 (exit 2)" {
	req=$(jq -c '.max_wait_ms = 200' "$F/req-returning-b.json")
	run -2 --separate-stderr "$ROUTE" -c "$F/lb-pwaw-flag.json" -s "$F/ab-bfull.json" --until-decided <<<"$req"
	[ "$(js '[.[] | [.elapsed_ms, .decision] | map(tostring) | join(" ")] | join(", ")')" = "0 wait, 200 reject" ]
	[ "$(js '.[0].recheck_at_ms')" = 200 ]
	[ "$(js '.[1] | [.status, .code, .session_state] | map(tostring) | join(" ")')" = "503 overloaded_error returning" ]
}

# A stream of many decisions of every kind: selects, waits (whole and
# fractional recheck times), rejects with codes and reasons, classified
# sessions (new, stale, returning; primary and fallback), ids that need
# escaping or are not ASCII.
mixed_stream() {
	local i
	printf '{"snapshot": %s}\n' "$(jq -c . "$F/abc-free.json")"
	for i in $(seq 1 120); do
		printf '{"request": {"request_id": "r-%d", "model": "m", "input_tokens": %d, "cache_affinity_key": "s-%d", "elapsed_ms": %s%s}}\n' \
		    "$i" $((i * 37 % 5000)) $((i % 9)) "$((i % 4 * 25))$([ $((i % 5)) = 0 ] && echo .5)" \
		    "$([ $((i % 3)) = 0 ] && printf ', "last_cluster_id": "%s"' "$(printf 'A\nB\nZ' | sed -n "$((i % 3 + 1))p")")"
		[ $((i % 40)) = 0 ] && printf '{"snapshot": %s}\n' "$(jq -c . "$F/ab-full.json")"
		[ $((i % 40)) = 20 ] && printf '{"snapshot": %s}\n' "$(jq -c . "$F/abc-free.json")"
	done
	printf '{"request": {"request_id": "q\\"uote\\\\back\\nnl", "model": "m", "input_tokens": 1}}\n'
	printf '{"request": {"request_id": "caf\\u00e9-\\u65e5", "model": "m", "input_tokens": 1}}\n'
	printf '{"request": {"model": "m", "input_tokens": 1}}\n'
}

@test "--ndjson: the hand-written writer prints the jansson path's bytes" {
	mixed_stream >"$BATS_TEST_TMPDIR/mixed.ndjson"
	for lb in "" lb-rr.json lb-waw-flag.json lb-waw-k2-flag.json lb-pwaw-flag.json \
	    lb-pwaw-x300.json lb-pwaw-bands-flag.json lb-pulsar-kv.json lb-pon3.json; do
		for extra in "" --until-decided "--elapsed-ms 12.25"; do
			c=()
			[ -n "$lb" ] && c=(-c "$F/$lb")
			run --separate-stderr "$ROUTE" "${c[@]}" $extra --ndjson "$BATS_TEST_TMPDIR/mixed.ndjson"
			fast=$output fast_err=$stderr fast_rc=$status
			run --separate-stderr "$ROUTE" "${c[@]}" $extra --reference-writer --ndjson "$BATS_TEST_TMPDIR/mixed.ndjson"
			[ "$fast_rc" = "$status" ] || { echo "$lb $extra: exit $fast_rc vs $status"; false; }
			[ "$fast" = "$output" ] || { echo "$lb $extra: outputs differ"; diff <(echo "$fast") <(echo "$output"); false; }
			[ "$fast_err" = "$stderr" ]
			[ "$(wc -l <<<"$output")" -ge 120 ]
		done
	done
}

@test "--ndjson: a repeated snapshot line is applied again after another snapshot" {
	one() {
		printf '{"clusters":[{"id":"%s","rtt_ms":1,"max_engine_concurrency":2,"running":0,"queued":0,"queued_input_tokens":0,"last_mean_input_tps":1000,"max_input_tps":1000}]}' "$1"
	}
	p=$(one P)
	q=$(one Q)
	req='{"request_id": "x", "model": "m", "input_tokens": 10}'
	stream=$(printf '{"snapshot": %s}\n{"request": %s}\n{"snapshot": %s}\n{"request": %s}\n{"snapshot": %s, "request": %s}\n{"snapshot": %s}\n{"request": %s}\n{"snapshot": %s}\n{"snapshot": %s}\n{"request": %s}\n' \
	    "$p" "$req" "$p" "$req" "$q" "$req" "$p" "$req" "$q" "$p" "$req")
	run -0 --separate-stderr "$ROUTE" --ndjson <<<"$stream"
	[ "$(jq -rs '[.[].cluster_id] | join(" ")' <<<"$output")" = "P P Q P P" ]
}

@test "--ndjson: messages keep their place among the decisions" {
	stream=$(printf '{"snapshot": %s}\n{"request": {"request_id": "a", "model": "m", "input_tokens": 1}}\nnot json\n{"request": {"request_id": "b", "model": "m", "input_tokens": 1}}\n' "$(jq -c . "$F/abc-free.json")")
	run -65 sh -c '"$1" --ndjson 2>&1' sh "$ROUTE" <<<"$stream"
	[ "${lines[0]:0:18}" = '{"request_id":"a",' ]
	[[ ${lines[1]} == *"<stdin>:3: "* ]]
	[ "${lines[2]:0:18}" = '{"request_id":"b",' ]
}

@test "--ndjson reads an sg-proxy decision-log record as it is: decision and context are read past" {
	local snap req out
	snap=$(jq -c . "$F/abc-free.json")
	req='{"request_id":"r-1","model":"m","input_tokens":10}'
	out=$(printf '{"snapshot":%s,"request":%s}\n' "$snap" "$req" | "$ROUTE" --ndjson)
	run -0 --separate-stderr "$ROUTE" --ndjson <<<"{\"snapshot\":$snap,\"request\":$req,\"decision\":$out,\"context\":{\"pid\":1,\"seq\":0}}"
	[ "$output" = "$out" ]
	[ -z "$stderr" ]
	run -65 --separate-stderr "$ROUTE" --ndjson <<<"{\"snapshot\":$snap,\"request\":$req,\"decisions\":1}"
	[[ $stderr == *"decisions: unknown field"* ]]
}

# A stream of request lines in every form the JSON text allows and a few it
# does not: escapes (short, \u, surrogate pairs, bad ones), raw UTF-8 (and
# invalid bytes), odd white space, repeated and escaped member names,
# numbers at and past their limits, missing, unknown and mistyped fields.
odd_stream() {
	local f v n
	printf '{"snapshot": %s}\n' "$(jq -c . "$F/abc-free.json")"
	while IFS= read -r f; do
		printf '{"request": {"request_id": "%s", "model": "m", "input_tokens": 1}}\n' "$f"
		printf '{"request": {"request_id": "r", "model": "%s", "input_tokens": 1, "cache_affinity_key": "%s", "routing_key": "%s"}}\n' "$f" "$f" "$f"
		printf '{"request": {"request_id": "r", "model": "m", "input_tokens": 1, "excluded_cluster_ids": ["%s", "A"], "last_cluster_id": "%s"}}\n' "$f" "$f"
	done <<-'FORMS'
	plain
	  padded  
	\u0020lead\u0009
	q\"uote
	back\\slash
	sl\/ash
	ctl\b\f\n\r\t
	caf\u00e9
	\u65E5\u672c
	\ud83d\ude00
	\uDBFF\uDFFF
	café 日本 😀
	del
	\u0000
	\ud800
	\udc00x
	\ud800\u0041
	\x
	\u12
	
	   
	FORMS
	printf '{"request": {"request_id": "%b", "model": "m", "input_tokens": 1}}\n' 'raw\xff' 'raw\xc0\x80' 'raw\xed\xa0\x80' 'raw\x01' 'raw\x7f' 'raw\xe6\x97'
	for n in 0 01 -0 -1 1.0 1e2 999999999999999999 1000000000000000000 9223372036854775807 9223372036854775808 18446744073709551615 '"1"' null; do
		printf '{"request": {"request_id": "n", "model": "m", "input_tokens": %s}}\n' "$n"
		printf '{"request": {"request_id": "n", "model": "m", "input_tokens": 1, "priority": %s, "max_wait_ms": %s, "request_slo_ms": %s}}\n' "$n" "$n" "$n"
	done
	printf '{"request": {"request_id": "p", "model": "m", "input_tokens": 1, "priority": %s}}\n' 4294967295 4294967296
	for v in 0 12.25 100 0.1 0.30000000000000004 1e1 -0.0 -1 12. .5 007; do
		printf '{"request": {"request_id": "e", "model": "m", "input_tokens": 1, "elapsed_ms": %s}}\n' "$v"
	done
	# white space, framing, member names
	printf '\t{ "request" :\t{"request_id":"w" , "model" : "m","input_tokens":1 } }\r\n'
	printf '{"request":{"request_id":"w","model":"m","input_tokens":1}}   \t\n'
	printf '{"request": {"request_id": "w", "model": "m", "input_tokens": 1}\f}\n'
	printf '{"request": {"request_id": "w", "model": "m", "input_tokens": 1}} x\n'
	printf '{"request": {"request_id": "w", "model": "m", "input_tokens": 1},}\n'
	printf '{"request": {"request_id": "w", "model": "m", "input_tokens": 1,}}\n'
	printf '{"request": {"request_id": "w", "model": "m", "input_tokens": 1}\n'
	printf '{"request": {"request_id": "d1", "request_id": "d2", "model": "m", "input_tokens": 1}}\n'
	printf '{"request": {"request_id": "d", "model": "m", "input_tokens": 1, "input_tokens": 2}}\n'
	printf '{"request": {"request_id": "d", "request\\u005fid": "e", "model": "m", "input_tokens": 1}}\n'
	printf '{"request": {"request_id": "a", "model": "m", "input_tokens": 1}, "request": {"request_id": "b", "model": "m", "input_tokens": 1}}\n'
	printf '{"requ\\u0065st": {"request_id": "u", "model": "m", "input_tokens": 1}}\n'
	printf '{"request": {"request_id": "c", "model": "m", "input_tokens": 1}, "context": {"pid": 1}}\n'
	printf '{"request": {"request_id": "x", "model": "m", "input_tokens": 1, "colour": "red"}}\n'
	printf '{"request": {"request_id": "x", "model": "m"}}\n'
	printf '{"request": {"model": "m", "input_tokens": 1}}\n'
	printf '{"request": {"request_id": "x", "model": "m", "input_tokens": 1, "excluded_cluster_ids": "A"}}\n'
	printf '{"request": {"request_id": "x", "model": "m", "input_tokens": 1, "excluded_cluster_ids": ["A", 1]}}\n'
	printf '{"request": {"request_id": "x", "model": "m", "input_tokens": 1, "routing_method": "teleport"}}\n'
	printf '{"request": {"request_id": "x", "model": "m", "input_tokens": 1, "routing_method": " pulsar "}}\n'
	printf '{"request": {}}\n{"request": []}\n{"request": 1}\n[]\n'
}

@test "--ndjson: the request scan prints the jansson reader's bytes and messages on every stream fixture" {
	mixed_stream >"$BATS_TEST_TMPDIR/mixed.ndjson"
	for s in "$F"/*.ndjson "$BATS_TEST_TMPDIR/mixed.ndjson"; do
		for lb in "" lb-waw-flag.json lb-pwaw-bands-flag.json lb-rr.json; do
			for extra in "" --until-decided; do
				c=()
				[ -n "$lb" ] && c=(-c "$F/$lb")
				run --separate-stderr "$ROUTE" "${c[@]}" $extra --ndjson "$s"
				fast=$output fast_err=$stderr fast_rc=$status
				run --separate-stderr "$ROUTE" "${c[@]}" $extra --reference-reader --reference-writer --ndjson "$s"
				[ "$fast_rc" = "$status" ] || { echo "${s##*/} $lb $extra: exit $fast_rc vs $status"; false; }
				[ "$fast" = "$output" ] || { echo "${s##*/} $lb $extra: outputs differ"; diff <(echo "$fast") <(echo "$output"); false; }
				[ "$fast_err" = "$stderr" ] || { echo "${s##*/} $lb $extra: messages differ"; diff <(echo "$fast_err") <(echo "$stderr"); false; }
			done
		done
	done
}

@test "--ndjson: escapes, UTF-8, odd white space and duplicate members read as the jansson reader reads them" {
	odd_stream >"$BATS_TEST_TMPDIR/odd.ndjson"
	for lb in lb-waw-flag.json ""; do
		c=()
		[ -n "$lb" ] && c=(-c "$F/$lb")
		run --separate-stderr "$ROUTE" "${c[@]}" --ndjson "$BATS_TEST_TMPDIR/odd.ndjson"
		fast=$output fast_err=$stderr fast_rc=$status
		run --separate-stderr "$ROUTE" "${c[@]}" --reference-reader --ndjson "$BATS_TEST_TMPDIR/odd.ndjson"
		[ "$fast_rc" = "$status" ] || { echo "$lb: exit $fast_rc vs $status"; false; }
		[ "$fast" = "$output" ] || { echo "$lb: outputs differ"; diff <(echo "$fast") <(echo "$output"); false; }
		[ "$fast_err" = "$stderr" ] || { echo "$lb: messages differ"; diff <(echo "$fast_err") <(echo "$stderr"); false; }
	done
	# what the stream means, pinned: both readers could be wrong together
	[ "$status" = 65 ]
	[ "$(wc -l <<<"$output")" = 62 ]
	[ "$(wc -l <<<"$stderr")" = 70 ]
	ids=$(jq -c '.request_id' <<<"$output")
	for id in plain padded lead 'q"uote' 'back\slash' sl/ash café 日本 😀 \
	    $'\U0010ffff' 'café 日本 😀' $'raw\x7f' $'ctl\b'; do
		grep -qxF "$(jq -cn --arg id "$id" '$id')" <<<"$ids" || { echo "no $id"; false; }
	done
	[ "$(jq -r 'select(.request_id == "e") | .elapsed_ms' <<<"$output" | tr '\n' ' ')" = "0 12.25 100 0.1 0.30000000000000004 10 0 " ]
	[[ $stderr == *":117: duplicate object key near '\"request_id\"'"* ]]
	[[ $stderr == *":118: duplicate object key near '\"input_tokens\"'"* ]]
	[[ $stderr == *":119: duplicate object key near '\"request\\u005fid\"'"* ]]
	[[ $stderr == *":120: duplicate object key near '\"request\"'"* ]]
	[[ $stderr == *":41: \\u0000 is not allowed"* ]]
	[[ $stderr == *":65: unable to decode byte 0xff"* ]]
}

@test "route-vs-jq.sh: every sg-route run's output is checked byte for byte; a difference fails the comparison" {
	local bench=$BATS_TEST_DIRNAME/../../tools/sg-bench/route-vs-jq.sh
	run -0 sh "$bench" -b "$BIN" -n 300 -c 8 -r 1
	[[ $output == *"ratio sg-route / jq (medians): "* ]]
	[[ $output == *"output: every sg-route run byte-identical"* ]]
	# an sg-route whose fast path prints one different byte
	mkdir "$BATS_TEST_TMPDIR/fake"
	cat >"$BATS_TEST_TMPDIR/fake/sg-route" <<-FAKE
	#!/bin/sh
	case "\$*" in
	*reference*) exec "$ROUTE" "\$@" ;;
	esac
	"$ROUTE" "\$@" | sed 's/req-000042/req-00004X/'
	FAKE
	chmod +x "$BATS_TEST_TMPDIR/fake/sg-route"
	run -1 --separate-stderr sh "$bench" -b "$BATS_TEST_TMPDIR/fake" -n 300 -c 8 -r 1 -k "$BATS_TEST_TMPDIR/keep"
	[[ $stderr == *"output: DIFFERS"* ]]
}
