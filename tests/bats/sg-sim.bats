#!/usr/bin/env bats
# sg-sim(1): determinism, every output format (table, --json, --csv,
# --svg), scenario errors naming the field (exit 65), options and exit
# statuses, arithmetic on a hand-computed scenario, and the cache-thrash
# acceptance criteria of the session-aware feature, asserted on the JSON
# output of the bundled scenario.

bats_require_minimum_version 1.5.0

setup() {
	BIN=${SG_BINDIR:-$BATS_TEST_DIRNAME/../../build/san/bin}
	SIM=$BIN/sg-sim
	MAN=$BATS_TEST_DIRNAME/../../man/sg-sim.1
	SCEN=$BATS_TEST_DIRNAME/../../tools/sim/scenarios
	T=$BATS_TEST_TMPDIR
	THRASH=$SCEN/cache-thrash.json
}

j() {
	jq -r "$1" <<<"$output"
}

# A small valid scenario; $1 is a jq filter applied to it.
scenario() {
	jq "${1:-.}" >"$T/s.json" <<'EOF'
{
  "name": "small", "seed": 3, "duration_s": 120, "warmup_s": 10,
  "engine": {"slots": 4, "prefill_tps": 20000, "decode_tps": 100},
  "clusters": [{"id": "A"}, {"id": "B"}, {"id": "C"}],
  "sessions": {"rate_per_s": 0.5, "turns": {"min": 2, "max": 4},
               "think_time_ms": 2000, "output_tokens": 50}
}
EOF
}

# row NAME FIELD: a field of a row of the JSON output in $output.
row() {
	jq -r --arg r "$1" ".rows[] | select(.row == \$r) | .$2" <<<"$output"
}

@test "--help prints usage on stdout and exits 0" {
	run -0 --separate-stderr "$SIM" --help
	[[ $output == usage:* ]]
	[ -z "$stderr" ]
}

@test "--version prints the version" {
	run -0 --separate-stderr "$SIM" --version
	[ "$output" = "sg-sim 0.1.0" ]
}

@test "bad usage exits 64" {
	run -64 --separate-stderr "$SIM"
	[[ $stderr == *usage:* ]]
	run -64 --separate-stderr "$SIM" --csv --json "$THRASH"
	run -64 --separate-stderr "$SIM" -j 0 "$THRASH"
	run -64 --separate-stderr "$SIM" --seed -1 "$THRASH"
	run -64 --separate-stderr "$SIM" --rows nope "$THRASH"
	[[ $stderr == *"no row 'nope'"* ]]
	run -64 --separate-stderr "$SIM" --rows pulsar,pulsar "$THRASH"
	run -64 --separate-stderr "$SIM" a.json b.json
}

@test "every long option of --help is in the man page" {
	run -0 "$SIM" --help
	local o
	for o in $(grep -oE -- '--[a-z-]+' <<<"$output" | sort -u); do
		grep -q -- "${o#--}" "$MAN" || { echo "missing $o"; return 1; }
	done
}

@test "determinism: two runs of a scenario are byte-identical" {
	run -0 --separate-stderr "$SIM" "$THRASH"
	first=$output
	run -0 --separate-stderr "$SIM" "$THRASH"
	[ "$output" = "$first" ]
	"$SIM" --json "$THRASH" >"$T/a"
	"$SIM" --json "$THRASH" >"$T/b"
	cmp "$T/a" "$T/b"
	"$SIM" --svg "$T/a.svg" --csv "$THRASH" >"$T/a.csv"
	"$SIM" --svg "$T/b.svg" --csv "$THRASH" >"$T/b.csv"
	cmp "$T/a.svg" "$T/b.svg"
	cmp "$T/a.csv" "$T/b.csv"
}

@test "determinism: the thread count does not change the output" {
	"$SIM" -j 1 --json "$THRASH" >"$T/a"
	"$SIM" -j 4 --json "$THRASH" >"$T/b"
	cmp "$T/a" "$T/b"
}

@test "the seed matters: another seed gives other numbers" {
	"$SIM" --json "$THRASH" >"$T/a"
	"$SIM" --json --seed 2 "$THRASH" >"$T/b"
	! cmp -s "$T/a" "$T/b"
	[ "$(jq .seed "$T/b")" = 2 ]
}

@test "--verbose reports speed on stderr only; stdout is unchanged" {
	run -0 --separate-stderr "$SIM" "$THRASH"
	quiet=$output
	run -0 --separate-stderr "$SIM" -v "$THRASH"
	[ "$output" = "$quiet" ]
	[[ $stderr == *requests/s* ]]
}

@test "table: a header line, a column line and one aligned line per row" {
	run -0 --separate-stderr "$SIM" "$THRASH"
	[ "${#lines[@]}" -eq 10 ]
	[[ ${lines[0]} == "# scenario cache-thrash, seed 1, 4 clusters"* ]]
	[ "$(awk '{print $1}' <<<"${lines[1]}")" = algorithm ]
	# Every data line has the header's 12 columns.
	[ "$(sed -n '2,$p' <<<"$output" | awk '{print NF}' | sort -u)" = 12 ]
	# Columns are aligned: every line is as long as the column line.
	[ "$(sed -n '2,$p' <<<"$output" | awk '{print length}' | sort -u | wc -l)" -eq 1 ]
	[ "$(sed -n '3,$p' <<<"$output" | awk '{print $1 "/" $2}' | tr '\n' ' ')" = \
	    "wait-and-widen/off wait-and-widen/on pulsar-wait-and-widen/off pulsar-wait-and-widen/on round-robin/- power-of-n/- pulsar/- perfect/- " ]
}

@test "--json: one valid JSON object with every row and field" {
	run -0 --separate-stderr "$SIM" --json "$THRASH"
	[ "${#lines[@]}" -eq 1 ]
	[ "$(j '.scenario')" = cache-thrash ]
	[ "$(j '.rows | length')" = 8 ]
	[ "$(j '.bound_row')" = perfect ]
	[ "$(j '[.rows[] | has("requests", "kv_reuse", "ttft_p50_ms", "ttft_p99_ms",
	    "goodput_rps", "left_last_cluster_share", "mean_routing_wait_ms",
	    "last_cluster_affinity")] | all')" = true ]
	[ "$(j '[.rows[] | .kv_reuse >= 0 and .kv_reuse <= 1
	    and .ttft_p50_ms <= .ttft_p99_ms and .completed + .rejected <= .requests
	    and .left_last_cluster <= .returning] | all')" = true ]
	[ "$(j '[.rows[].last_cluster_affinity] | map(tostring) | join(",")')" = \
	    "false,true,false,true,null,null,null,null" ]
	# Ratios are to the bound row, which is 1.
	[ "$(j '.rows[] | select(.row == "perfect") | [.kv_reuse_ratio, .goodput_ratio] | join(",")')" = 1,1 ]
	[ "$(j '(.rows[] | select(.row == "perfect")) as $b | [.rows[] |
	    ((.kv_reuse / $b.kv_reuse - .kv_reuse_ratio) | fabs) < 1e-5 and
	    ((.goodput_rps / $b.goodput_rps - .goodput_ratio) | fabs) < 1e-5] | all')" = true ]
	# kv_reuse is reused / input tokens; left share is left / returning.
	[ "$(j '[.rows[] | ((.reused_input_tokens / .input_tokens) - .kv_reuse | fabs) < 1e-6] | all')" = true ]
	[ "$(j '[.rows[] | ((.left_last_cluster / .returning) - .left_last_cluster_share | fabs) < 1e-6] | all')" = true ]
}

@test "--csv: a header and one line of 17 fields per row" {
	run -0 --separate-stderr "$SIM" --csv "$THRASH"
	[ "${#lines[@]}" -eq 9 ]
	[[ ${lines[0]} == row,algorithm,last_cluster_affinity,requests,* ]]
	[ "$(awk -F, '{print NF}' <<<"$output" | sort -u)" = 17 ]
	[[ ${lines[2]} == wait-and-widen/on,wait-and-widen,true,* ]]
	[[ ${lines[5]} == round-robin,round-robin,,* ]]
	# The CSV numbers are the JSON numbers.
	"$SIM" --json "$THRASH" >"$T/j"
	[ "$(cut -d, -f4 <<<"${lines[1]}")" = "$(jq '.rows[0].requests' "$T/j")" ]
}

# Well-formedness of XML by a tag-stack walk: every start tag is closed in
# order, one root <svg>, entities are the predefined ones.
xml_check() {
	grep -q '^<?xml version="1.0"' "$1" || { echo "no XML declaration"; return 1; }
	if grep -oE '&[^;[:space:]]*;?' "$1" | grep -vqE '^&(amp|lt|gt|quot|apos|#[0-9]+);$'; then
		echo "bad entity"; return 1
	fi
	tr '\n' ' ' <"$1" | grep -oE '<[^>]*>' | awk '
	/^<\?/ { next }
	/\/>$/ { if (depth == 0) { print "element outside root"; exit 1 } next }
	/^<\// { name = substr($1, 3); sub(/>$/, "", name)
		if (depth == 0 || stack[depth] != name) { print "mismatched </" name ">"; exit 1 }
		depth--; next }
	{ name = substr($1, 2); sub(/>$/, "", name)
		if (depth == 0) { roots++; if (name != "svg") { print "root is " name; exit 1 } }
		stack[++depth] = name }
	END { if (depth != 0) { print "unclosed <" stack[depth] ">"; exit 1 }
		if (roots != 1) { print roots " roots"; exit 1 } }'
}

@test "--svg: a well-formed SVG chart with four panels, every row and the bound" {
	run -0 --separate-stderr "$SIM" --svg "$T/c.svg" "$THRASH"
	[ "${#lines[@]}" -eq 10 ]	# the table still goes to stdout
	xml_check "$T/c.svg"
	grep -q '<svg xmlns="http://www.w3.org/2000/svg"' "$T/c.svg"
	grep -q 'TTFT p99' "$T/c.svg"
	grep -q 'KV-cache reuse' "$T/c.svg"
	grep -q 'goodput' "$T/c.svg"
	grep -q 'left their last cluster' "$T/c.svg"
	local r
	for r in wait-and-widen/off wait-and-widen/on pulsar-wait-and-widen/off \
	    pulsar-wait-and-widen/on round-robin power-of-n pulsar perfect; do
		grep -q ">$r</text>" "$T/c.svg"
	done
	# 8 rows x 4 panels of bars, plus the background.
	[ "$(grep -c '<rect ' "$T/c.svg")" -eq 33 ]
	# The bound: a dashed line in the reuse and the goodput panels.
	[ "$(grep -c 'stroke-dasharray' "$T/c.svg")" -eq 2 ]
	# Each row's gap to the bound in reuse points, e.g. "(-0.6)".
	[ "$(grep -cE '%( [(][-+][0-9.]+[)])</text>' "$T/c.svg")" -eq 7 ]
	# Tick labels never overlap: on each axis line (same y), label
	# centres are at least 40 px apart.
	grep -oE '<text x="[0-9.]+" y="[0-9]+" class="v" text-anchor="middle">' "$T/c.svg" |
	    sed -E 's/.*x="([0-9.]+)" y="([0-9]+)".*/\2 \1/' | sort -k1,1n -k2,2n |
	    awk '$1 == y && $2 - x < 40 { print "overlap at " $2; bad = 1 } { y = $1; x = $2 } END { exit bad }'
	# The checker can fail.
	printf '<?xml version="1.0"?>\n<svg><g></svg>\n' >"$T/bad.svg"
	run -1 xml_check "$T/bad.svg"
}

@test "--svg escapes the scenario name" {
	scenario '.name = "a<b&c"'
	run -0 --separate-stderr "$SIM" --rows pulsar --svg "$T/e.svg" "$T/s.json"
	xml_check "$T/e.svg"
	grep -q 'a&lt;b&amp;c' "$T/e.svg"
}

@test "--rows runs the named rows in the given order" {
	run -0 --separate-stderr "$SIM" --json --rows pulsar,wait-and-widen/on "$THRASH"
	[ "$(j '[.rows[].row] | join(",")')" = "pulsar,wait-and-widen/on" ]
	# A row's numbers do not depend on the other rows.
	pulsar=$(j '.rows[0]')
	run -0 --separate-stderr "$SIM" --json "$THRASH"
	# (Ratios need the bound row, which this selection lacks: null.)
	[ "$(jq -c '[.kv_reuse_ratio, .goodput_ratio]' <<<"$pulsar")" = "[null,null]" ]
	[ "$(j '.rows[6] | del(.kv_reuse_ratio, .goodput_ratio)')" = \
	    "$(jq 'del(.kv_reuse_ratio, .goodput_ratio)' <<<"$pulsar")" ]
}

@test "hand-computed: idle engines give TTFT = prefill + rtt and reuse of the previous turn" {
	# One session at a time (rate 0.02/s, each session over in ~2 s), two
	# turns, 1000 prompt tokens at 100000 tokens/s (10 ms), one output
	# token; turn 2 adds 100 tokens: prompt 1101, reused 1001 (turn 1's
	# prompt and answer), prefill 100 tokens (1 ms).  rtt 2 ms.
	scenario '.duration_s = 2000 | .warmup_s = 0 | .rows = ["wait-and-widen/on", "pulsar"]
	    | .clusters = [{"id": "A", "rtt_ms": 2}] | .engine.prefill_tps = 100000
	    | .sessions = {"rate_per_s": 0.02, "turns": 2, "think_time_ms": 0,
	      "first_input_tokens": 1000, "turn_input_tokens": 100, "output_tokens": 1}'
	run -0 --separate-stderr "$SIM" --json "$T/s.json"
	local r
	for r in wait-and-widen/on pulsar; do
		n=$(row "$r" requests)
		reused=$(row "$r" reused_input_tokens)
		[ "$((reused % 1001))" -eq 0 ]
		n2=$((reused / 1001))
		n1=$((n - n2))
		[ "$n1" -ge "$n2" ] && [ "$n2" -gt 0 ]
		[ "$(row "$r" input_tokens)" -eq $((1000 * n1 + 1101 * n2)) ]
		[ "$(row "$r" ttft_p99_ms)" = 12 ]
		[ "$(row "$r" mean_routing_wait_ms)" = 0 ]
		[ "$(row "$r" left_last_cluster)" = 0 ]
		[ "$(row "$r" returning)" = "$n2" ]
	done
	# p50 is at rank ceil(n/2): turn 1 (12 ms) when more than half the
	# requests are first turns, else turn 2 (3 ms).
	n=$(row pulsar requests); reused=$(row pulsar reused_input_tokens)
	if [ $(( (n + 1) / 2 )) -le $((reused / 1001)) ]; then want=3; else want=12; fi
	[ "$(row pulsar ttft_p50_ms)" = "$want" ]
}

@test "an engine whose queue is full refuses; the router retries elsewhere" {
	scenario '.engine.max_queue = 1 | .engine.slots = 1 | .rows = ["round-robin"]
	    | .sessions.rate_per_s = 3'
	run -0 --separate-stderr "$SIM" --json "$T/s.json"
	[ "$(row round-robin retries)" -gt 0 ]
	scenario '.engine.max_queue = 1 | .engine.slots = 1 | .rows = ["round-robin"]
	    | .sessions.rate_per_s = 3 | .retries = 0'
	run -0 --separate-stderr "$SIM" --json "$T/s.json"
	[ "$(row round-robin rejected)" -gt 0 ]
}

@test "bad scenario: unknown fields are errors naming the field (exit 65)" {
	scenario '.bogus = 1'
	run -65 --separate-stderr "$SIM" "$T/s.json"
	[[ $stderr == *"s.json: bogus: unknown field"* ]]
	scenario '.sessions.turnz = 3'
	run -65 --separate-stderr "$SIM" "$T/s.json"
	[[ $stderr == *"sessions.turnz: unknown field"* ]]
	scenario '.clusters[1].engine = {"slotz": 3}'
	run -65 --separate-stderr "$SIM" "$T/s.json"
	[[ $stderr == *"clusters[1].engine.slotz: unknown field"* ]]
	scenario '.sessions.output_tokens = {"min": 1, "max": 5, "mode": 3}'
	run -65 --separate-stderr "$SIM" "$T/s.json"
	[[ $stderr == *"sessions.output_tokens.mode: unknown field"* ]]
	scenario '.sessions.output_tokens = {"min": 1, "max": 5, "mean": 3}'
	run -65 --separate-stderr "$SIM" "$T/s.json"
	[[ $stderr == *"sessions.output_tokens.mean: not a parameter of this distribution"* ]]
}

@test "bad scenario: wrong types and ranges name the field (exit 65)" {
	scenario '.sessions.rate_per_s = "fast"'
	run -65 --separate-stderr "$SIM" "$T/s.json"
	[[ $stderr == *"sessions.rate_per_s: expected a number > 0"* ]]
	scenario '.engine.slots = 0'
	run -65 --separate-stderr "$SIM" "$T/s.json"
	[[ $stderr == *"engine.slots: expected an integer from 1"* ]]
	scenario '.warmup_s = 500'
	run -65 --separate-stderr "$SIM" "$T/s.json"
	[[ $stderr == *"warmup_s: must be < duration_s"* ]]
	scenario 'del(.duration_s)'
	run -65 --separate-stderr "$SIM" "$T/s.json"
	[[ $stderr == *"duration_s: missing"* ]]
	scenario '.clusters[1].id = "A"'
	run -65 --separate-stderr "$SIM" "$T/s.json"
	[[ $stderr == *"clusters[1].id: duplicate cluster id"* ]]
	scenario '.background = [{"cluster": "Z", "end_s": 5, "rate_per_s": 1}]'
	run -65 --separate-stderr "$SIM" "$T/s.json"
	[[ $stderr == *"background[0].cluster: no such cluster"* ]]
	scenario '.rows = ["pulsar/on"]'
	run -65 --separate-stderr "$SIM" "$T/s.json"
	[[ $stderr == *"rows[0]: unknown row"* ]]
}

@test "bad scenario: lb-config errors name the algorithm and the field (exit 65)" {
	scenario '.algorithms = {"wait-and-widen": {"cache_affinity_input_tokens_scale": 2}}'
	run -65 --separate-stderr "$SIM" "$T/s.json"
	[[ $stderr == *"algorithms.wait-and-widen"*cache_affinity_input_tokens_scale* ]]
	scenario '.algorithms = {"pulsar": {"last_cluster_affinity": true}}'
	run -65 --separate-stderr "$SIM" "$T/s.json"
	[[ $stderr == *"algorithms.pulsar.last_cluster_affinity"* ]]
	scenario '.algorithms = {"powerofn": {}}'
	run -65 --separate-stderr "$SIM" "$T/s.json"
	[[ $stderr == *"algorithms.powerofn: not a canonical algorithm name"* ]]
}

@test "bad scenario: malformed JSON gives the line and column (exit 65); a missing file 66" {
	printf '{"duration_s": 10,\n  "clusters": [\n' >"$T/s.json"
	run -65 --separate-stderr "$SIM" "$T/s.json"
	[[ $stderr == *"s.json:3:"* ]]
	run -66 --separate-stderr "$SIM" "$T/nope.json"
	[[ $stderr == *"cannot open"*nope.json* ]]
}

@test "--check validates every bundled scenario without running it" {
	local f
	for f in "$SCEN"/*.json; do
		run -0 --separate-stderr "$SIM" --check "$f"
		[ -z "$output" ]
	done
	scenario '.bogus = 1'
	run -65 --separate-stderr "$SIM" -n "$T/s.json"
}

@test "write errors: stdout on a full device exits 74, an uncreatable SVG 73" {
	run -74 --separate-stderr sh -c '"$1" --rows pulsar "$2" >/dev/full' sh "$SIM" "$THRASH"
	run -73 --separate-stderr "$SIM" --rows pulsar --svg "$T/no/such/dir/x.svg" "$THRASH"
}

# --- the cache-thrash acceptance criteria ------------------------------------

thrash_json() {
	# Both session-aware algorithms run with k = 1 in the bundled scenario.
	[ "$(jq '.algorithms["wait-and-widen"].cache_affinity_backend_selection_count' "$THRASH")" = 1 ]
	[ "$(jq '.algorithms["pulsar-wait-and-widen"].cache_affinity_backend_selection_count' "$THRASH")" = 1 ]
	run -0 --separate-stderr "$SIM" --json "$THRASH"
}

@test "cache-thrash, wait-and-widen k=1: flag on, at most 5% of returning requests leave their last cluster, well below flag off" {
	thrash_json
	on=$(row wait-and-widen/on left_last_cluster_share)
	off=$(row wait-and-widen/off left_last_cluster_share)
	echo "on $on off $off"
	[ "$(row wait-and-widen/on returning)" -gt 1000 ]
	jq -en --argjson on "$on" --argjson off "$off" '$on <= 0.05 and $on * 2 <= $off'
}

@test "cache-thrash, wait-and-widen k=1: KV reuse is higher with the flag on" {
	thrash_json
	on=$(row wait-and-widen/on kv_reuse)
	off=$(row wait-and-widen/off kv_reuse)
	echo "on $on off $off"
	jq -en --argjson on "$on" --argjson off "$off" '$on > $off'
}

@test "cache-thrash, pulsar-wait-and-widen k=1: flag on, at most 5% of returning requests leave their last cluster, well below flag off" {
	thrash_json
	on=$(row pulsar-wait-and-widen/on left_last_cluster_share)
	off=$(row pulsar-wait-and-widen/off left_last_cluster_share)
	echo "on $on off $off"
	[ "$(row pulsar-wait-and-widen/on returning)" -gt 1000 ]
	jq -en --argjson on "$on" --argjson off "$off" '$on <= 0.05 and $on * 2 <= $off'
}

@test "cache-thrash, pulsar-wait-and-widen k=1: KV reuse is higher with the flag on" {
	thrash_json
	on=$(row pulsar-wait-and-widen/on kv_reuse)
	off=$(row pulsar-wait-and-widen/off kv_reuse)
	echo "on $on off $off"
	jq -en --argjson on "$on" --argjson off "$off" '$on > $off'
}

@test "cache-thrash: without the saturation episode the flag changes little (the episode is what the rows measure)" {
	jq 'del(.background)' "$THRASH" >"$T/calm.json"
	run -0 --separate-stderr "$SIM" --json --rows wait-and-widen/off,wait-and-widen/on "$T/calm.json"
	off=$(row wait-and-widen/off left_last_cluster_share)
	jq -en --argjson off "$off" '$off < 0.03'
}

@test "the cache-thrash table in the man page's EXAMPLES is the current output" {
	run -0 --separate-stderr "$SIM" "$THRASH"
	sed -n '/^\$ sg-sim tools\/sim\/scenarios\/cache-thrash.json$/,/^\.Ed$/p' "$MAN" |
	    sed '1d;$d' >"$T/man.txt"
	[ -s "$T/man.txt" ]
	diff "$T/man.txt" - <<<"$output"
}

# --- the perfect-knowledge bound, traces, stdin --------------------------------

TRACES=$BATS_TEST_DIRNAME/../../tools/sim/traces

# Scenarios that take minutes under the sanitizers run only with
# SG_SIM_LARGE=1 (the man page tables of them are checked then).
large() {
	case $(basename "$1") in
	million.json|fleet.json) return 0 ;;
	esac
	return 1
}

@test "determinism: two runs of every bundled scenario and of the example trace print identical bytes" {
	local f
	for f in "$SCEN"/*.json "$TRACES/replay.json"; do
		if large "$f" && [ -z "${SG_SIM_LARGE:-}" ]; then continue; fi
		"$SIM" -j 2 --svg "$T/a.svg" --json "$f" >"$T/a"
		"$SIM" -j 2 --svg "$T/b.svg" --json "$f" >"$T/b"
		cmp "$T/a" "$T/b"
		cmp "$T/a.svg" "$T/b.svg"
	done
}

@test "the traffic drawn once for every row replays each row's own draws: a row alone (drawn live) reports what it reports among the others, on every bundled scenario" {
	local f r
	for f in "$SCEN"/*.json; do
		if large "$f" && [ -z "${SG_SIM_LARGE:-}" ]; then continue; fi
		"$SIM" -j 2 --json "$f" >"$T/all"
		for r in $(jq -r '.rows[].row' "$T/all"); do
			"$SIM" --json --rows "$r" "$f" >"$T/one"
			# (Ratios need the bound row, which a row alone lacks.)
			[ "$(jq -c --arg r "$r" '.rows[] | select(.row == $r) |
			    del(.kv_reuse_ratio, .goodput_ratio)' "$T/all")" = \
			    "$(jq -c '.rows[0] |
			    del(.kv_reuse_ratio, .goodput_ratio)' "$T/one")" ]
		done
	done
}

@test "-h prints usage on stdout and exits 0, like --help" {
	run -0 --separate-stderr "$SIM" -h
	[[ $output == usage:* ]]
	[ -z "$stderr" ]
}

@test "the perfect-knowledge bound: each decision takes the longest cached prefix any candidate holds, on every bundled scenario and the example trace (no tolerance)" {
	local f n=0
	for f in "$SCEN"/*.json "$SCEN"/../traces/chat-small.json; do
		if large "$f" && [ -z "${SG_SIM_LARGE:-}" ]; then continue; fi
		run -0 --separate-stderr "$SIM" -j 2 --json "$f"
		[ "$(j .bound_row)" = perfect ]
		echo "$(basename "$f"): $(j '[.rows[] | "\(.row)=\(.reused_input_tokens)/\(.took_prefix_tokens)/\(.best_prefix_tokens)"] | join(" ")')"
		# The bound: what it took is the most any candidate held, and
		# it reused something.
		j '.rows[] | select(.row == "perfect") |
		    .took_prefix_tokens == .best_prefix_tokens and
		    .reused_input_tokens > 0' | grep -qx true
		# Every row: reused <= took <= best (what a request loses
		# while it waits for a slot is the engine's eviction).
		j '[.rows[] | .reused_input_tokens <= .took_prefix_tokens and
		    .took_prefix_tokens <= .best_prefix_tokens] | all' |
		    grep -qx true
		n=$((n + 1))
	done
	[ "$n" -ge 6 ]
}

@test "the perfect-knowledge bound: the decision sums see what the others leave (a row that ignores caches takes less than it could)" {
	run -0 --separate-stderr "$SIM" --json --rows round-robin,perfect "$THRASH"
	[ "$(row round-robin took_prefix_tokens)" -lt "$(row round-robin best_prefix_tokens)" ]
	[ "$(row perfect took_prefix_tokens)" -eq "$(row perfect best_prefix_tokens)" ]
}

@test "the perfect-knowledge row over a run: no row's KV reuse exceeds it by more than 0.1 point on the bundled scenarios (greedy, not a strict run bound: see sg-sim(1))" {
	local f n=0
	for f in "$SCEN"/*.json; do
		if large "$f" && [ -z "${SG_SIM_LARGE:-}" ]; then continue; fi
		run -0 --separate-stderr "$SIM" -j 2 --json "$f"
		[ "$(j .bound_row)" = perfect ]
		echo "$(basename "$f"): $(j '[.rows[] | "\(.row)=\(.kv_reuse)"] | join(" ")')"
		# Every row other than the bound, at most 0.001 above it.
		j '(.rows[] | select(.row == "perfect") | .kv_reuse) as $b |
		    [.rows[] | select(.row != "perfect") | .kv_reuse <= $b + 0.001] | all' |
		    grep -qx true
		n=$((n + 1))
	done
	[ "$n" -ge 5 ]
}

@test "the perfect-knowledge bound: every last_cluster_affinity row has its ratio to the bound" {
	local f
	for f in "$SCEN"/*.json; do
		if large "$f" && [ -z "${SG_SIM_LARGE:-}" ]; then continue; fi
		run -0 --separate-stderr "$SIM" -j 2 --json "$f"
		j '[.rows[] | select(.last_cluster_affinity == true) |
		    .kv_reuse_ratio > 0 and .goodput_ratio > 0] | length > 0 and all' | grep -qx true
	done
}

@test "the perfect-knowledge bound reads the caches: one cluster saturated, the bound never leaves a cache for load" {
	# Two clusters; the bound's rows under the same capacity rule.
	scenario '.rows = ["perfect", "perfect-ttft", "wait-and-widen/on"]
	    | .algorithms = {"wait-and-widen": {"max_queued": 0}}'
	run -0 --separate-stderr "$SIM" --json "$T/s.json"
	[ "$(row perfect algorithm)" = perfect ]
	[ "$(row perfect-ttft algorithm)" = perfect-ttft ]
	jq -en --argjson p "$(row perfect kv_reuse)" --argjson w "$(row wait-and-widen/on kv_reuse)" '$p >= $w'
	# algorithms.perfect is checked.
	scenario '.algorithms = {"perfect": {"max_queue": 1}}'
	run -65 --separate-stderr "$SIM" "$T/s.json"
	[[ $stderr == *"algorithms.perfect.max_queue: unknown field"* ]]
}

@test "a trace round-trips: a scenario exported as a trace and replayed gives the same report" {
	local f
	for f in "$THRASH" "$SCEN/chat-trace.json"; do
		"$SIM" --export-trace "$T/t.ndjson" "$f"
		[ -s "$T/t.ndjson" ]
		jq -c . "$T/t.ndjson" >/dev/null	# every line is JSON
		jq 'del(.sessions) | .trace = "t.ndjson"' "$f" >"$T/replay.json"
		"$SIM" -j 2 "$f" >"$T/a"
		"$SIM" -j 2 "$T/replay.json" >"$T/b"
		cmp "$T/a" "$T/b"
		"$SIM" -j 2 --json "$f" >"$T/a"
		"$SIM" -j 2 --json "$T/replay.json" >"$T/b"
		cmp "$T/a" "$T/b"
	done
	# The export is deterministic and follows the seed.
	"$SIM" --export-trace - "$THRASH" >"$T/x"
	cmp -s "$T/x" <("$SIM" --export-trace - "$THRASH")
	! cmp -s "$T/x" <("$SIM" --seed 2 --export-trace - "$THRASH")
}

@test "the shipped example trace is the export of its scenario, and replays to its report" {
	"$SIM" --export-trace "$T/t.ndjson" "$TRACES/chat-small.json"
	cmp "$T/t.ndjson" "$TRACES/chat-small.ndjson"
	"$SIM" "$TRACES/chat-small.json" >"$T/a"
	"$SIM" "$TRACES/replay.json" >"$T/b"
	cmp "$T/a" "$T/b"
}

@test "trace replay: absolute times replay open-loop, never before the previous answer" {
	# Turn 2 due at 1 s, but turn 1 (1000 tokens at 1000 tokens/s, then
	# 100 tokens at 1000 tokens/s) ends near 1.1 s: turn 2 waits for it.
	cat >"$T/t.ndjson" <<'NDJSON'
{"time_s": 0.5, "session": "a", "turn": 1, "input_tokens": 1000, "output_tokens": 100}
{"time_s": 1.0, "session": "a", "turn": 2, "input_tokens": 1200, "output_tokens": 1}
{"time_ms": 700, "session": "b", "turn": 1, "input_tokens": 10, "output_tokens": 1}
NDJSON
	cat >"$T/r.json" <<'JSON'
{"duration_s": 10, "trace": "t.ndjson", "rows": ["perfect"],
 "engine": {"slots": 4, "prefill_tps": 1000, "decode_tps": 1000},
 "clusters": [{"id": "A"}]}
JSON
	run -0 --separate-stderr "$SIM" --json "$T/r.json"
	[ "$(row perfect requests)" = 3 ]
	[ "$(row perfect reused_input_tokens)" = 1100 ]
	[ "$(row perfect returning)" = 1 ]
}

@test "trace errors name the line and the field (exit 65)" {
	cat >"$T/r.json" <<'JSON'
{"duration_s": 10, "trace": "t.ndjson", "clusters": [{"id": "A"}]}
JSON
	printf '{"time_ms": 0, "session": "a", "turn": 2, "input_tokens": 5, "output_tokens": 1}\n' >"$T/t.ndjson"
	run -65 --separate-stderr "$SIM" "$T/r.json"
	[[ $stderr == *"t.ndjson:1: turn: expected 1"* ]]
	printf '{"time_ms": 0, "session": "a", "turn": 1, "input_tokens": 5, "output_tokens": 1, "tokens": 3}\n' >"$T/t.ndjson"
	run -65 --separate-stderr "$SIM" "$T/r.json"
	[[ $stderr == *"t.ndjson:1: tokens: unknown field"* ]]
	printf '\n{"time_ms": 0, "session": "a", "turn": 1, "input_tokens": 0, "output_tokens": 1}\n' >"$T/t.ndjson"
	run -65 --separate-stderr "$SIM" "$T/r.json"
	[[ $stderr == *"t.ndjson:2: input_tokens: expected an integer >= 1"* ]]
	printf '{"time_ms": 0, "session": "a", "turn": 1, "input_tokens": 5, "output_tokens": 1, "model": "zz"}\n' >"$T/t.ndjson"
	run -65 --separate-stderr "$SIM" "$T/r.json"
	[[ $stderr == *"t.ndjson:1: model: no traffic class"* ]]
	rm "$T/t.ndjson"
	run -65 --separate-stderr "$SIM" "$T/r.json"
	[[ $stderr == *"cannot open"*t.ndjson* ]]
	jq '.sessions = {"rate_per_s": 1}' "$T/r.json" >"$T/r2.json"
	run -65 --separate-stderr "$SIM" "$T/r2.json"
	[[ $stderr == *"trace: excludes sessions"* ]]
}

@test "sg-sim - reads the scenario from the standard input" {
	"$SIM" --json "$THRASH" >"$T/a"
	"$SIM" --json - <"$THRASH" >"$T/b"
	# Only the default name differs ("stdin").
	[ "$(jq -r .scenario "$T/b")" = cache-thrash ]	# the file names itself
	cmp "$T/a" "$T/b"
	jq 'del(.name)' "$THRASH" | "$SIM" --rows pulsar - >"$T/c"
	[[ $(head -1 "$T/c") == "# scenario stdin,"* ]]
}

@test "scenario features: distributions, classes, cluster models, profile and drains are checked" {
	scenario '.sessions.turns = {"dist": "weibull"}'
	run -65 --separate-stderr "$SIM" "$T/s.json"
	[[ $stderr == *"sessions.turns.dist: expected uniform, lognormal"* ]]
	scenario '.sessions.turns = {"dist": "lognormal", "median": 3}'
	run -65 --separate-stderr "$SIM" "$T/s.json"
	[[ $stderr == *"sessions.turns.sigma: missing"* ]]
	scenario '.classes = [{"model": "a"}, {"model": "b"}] | .clusters[0].models = ["c"]'
	run -65 --separate-stderr "$SIM" "$T/s.json"
	[[ $stderr == *"clusters[0].models: not a model of the traffic classes"* ]]
	scenario '.classes = [{"model": "a"}, {"model": "b"}] | .clusters |= map(.models = ["a"])'
	run -65 --separate-stderr "$SIM" "$T/s.json"
	[[ $stderr == *"no cluster serves model b"* ]]
	scenario '.sessions.diurnal = {"amplitude": 1.5}'
	run -65 --separate-stderr "$SIM" "$T/s.json"
	[[ $stderr == *"sessions.diurnal.amplitude"* ]]
	scenario '.drains = [{"cluster": "A", "start_s": 5, "end_s": 2}]'
	run -65 --separate-stderr "$SIM" "$T/s.json"
	[[ $stderr == *"drains[0].end_s: must be > start_s"* ]]
	# Valid: every feature at once runs, and every class is served.
	scenario '.classes = [{"model": "a", "routing_key": "k1"}, {"weight": 2, "model": "b"}]
	    | .clusters[0].models = ["a"] | .clusters[1].models = ["b"]
	    | .sessions.turns = {"dist": "pareto", "alpha": 1.5, "scale": 1, "max": 20}
	    | .sessions.think_time_ms = {"dist": "lognormal", "median": 2000, "sigma": 1, "max": 60000}
	    | .sessions.diurnal = {"amplitude": 0.5, "period_s": 60}
	    | .sessions.bursts = [{"start_s": 30, "end_s": 40, "factor": 4}]
	    | .drains = [{"cluster": "C", "start_s": 20, "end_s": 60, "restart": true}]'
	run -0 --separate-stderr "$SIM" --json "$T/s.json"
	[ "$(j '[.rows[] | .completed > 0] | all')" = true ]
}

@test "a drained cluster takes no request while drained" {
	# One cluster drained for the whole window but the first second: all
	# requests after it go to the other.
	scenario '.rows = ["round-robin", "perfect"] | .drains = [{"cluster": "A", "start_s": 1, "end_s": 119}]
	    | .clusters = [{"id": "A"}, {"id": "B"}]'
	run -0 --separate-stderr "$SIM" --json "$T/s.json"
	# Round-robin alternates without a drain: left share near 1/2.
	jq -en --argjson l "$(row round-robin left_last_cluster_share)" '$l < 0.2'
}

@test "every bundled scenario's table in the man page is the current output" {
	local f name
	for f in "$SCEN"/*.json; do
		if large "$f" && [ -z "${SG_SIM_LARGE:-}" ]; then continue; fi
		name=$(basename "$f")
		sed -n "/^\\\$ sg-sim tools\\/sim\\/scenarios\\/$name\$/,/^\\.Ed\$/p" "$MAN" |
		    sed '1d;$d' >"$T/man.txt"
		[ -s "$T/man.txt" ] || { echo "no table for $name"; return 1; }
		"$SIM" -j 2 "$f" | diff "$T/man.txt" -
	done
}

@test "performance: tools/sim/fleet-bench.sh reports the user CPU median of each binary and checks they print the same report" {
	BENCH=$BATS_TEST_DIRNAME/../../tools/sim/fleet-bench.sh
	# Long enough (about 135,000 requests, 0.2 s of user CPU in a release
	# build) that no median rounds to /usr/bin/time's 0.00: the small
	# scenario's did on a fast machine, and the ratio had no value.
	scenario '.sessions.rate_per_s = 40 | .duration_s = 300'
	run "$BENCH" -n 2 -s "$T/s.json" "$SIM" "$SIM"
	[ "$status" -eq 0 ]
	[[ $output == *"round 2 bin 2"*" requests, user "*" s, wall "* ]]
	[[ $output == *"bin 1: user CPU median "*"(min "*", max "*", n 2) s"* ]]
	[[ ${lines[-1]} =~ ^"ratio bin 1 / bin 2: "[0-9]+\.[0-9][0-9]$ ]]
	[[ $output != *differ* ]]
	# A scenario too short to time still gets its ratio line, saying why
	# there is no figure.
	scenario
	run "$BENCH" -n 1 -s "$T/s.json" "$SIM" "$SIM"
	[ "$status" -eq 0 ]
	[[ ${lines[-1]} == "ratio bin 1 / bin 2: "* ]]
	run "$BENCH" -n 1
	[ "$status" -eq 64 ]
}
