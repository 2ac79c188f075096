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
	[ "${#lines[@]}" -eq 9 ]
	[[ ${lines[0]} == "# scenario cache-thrash, seed 1, 4 clusters"* ]]
	[ "$(awk '{print $1}' <<<"${lines[1]}")" = algorithm ]
	# Every data line has the header's 10 columns.
	[ "$(sed -n '2,$p' <<<"$output" | awk '{print NF}' | sort -u)" = 10 ]
	# Columns are aligned: every line is as long as the column line.
	[ "$(sed -n '2,$p' <<<"$output" | awk '{print length}' | sort -u | wc -l)" -eq 1 ]
	[ "$(sed -n '3,$p' <<<"$output" | awk '{print $1 "/" $2}' | tr '\n' ' ')" = \
	    "wait-and-widen/off wait-and-widen/on pulsar-wait-and-widen/off pulsar-wait-and-widen/on round-robin/- power-of-n/- pulsar/- " ]
}

@test "--json: one valid JSON object with every row and field" {
	run -0 --separate-stderr "$SIM" --json "$THRASH"
	[ "${#lines[@]}" -eq 1 ]
	[ "$(j '.scenario')" = cache-thrash ]
	[ "$(j '.rows | length')" = 7 ]
	[ "$(j '[.rows[] | has("requests", "kv_reuse", "ttft_p50_ms", "ttft_p99_ms",
	    "goodput_rps", "left_last_cluster_share", "mean_routing_wait_ms",
	    "last_cluster_affinity")] | all')" = true ]
	[ "$(j '[.rows[] | .kv_reuse >= 0 and .kv_reuse <= 1
	    and .ttft_p50_ms <= .ttft_p99_ms and .completed + .rejected <= .requests
	    and .left_last_cluster <= .returning] | all')" = true ]
	[ "$(j '[.rows[].last_cluster_affinity] | map(tostring) | join(",")')" = \
	    "false,true,false,true,null,null,null" ]
	# kv_reuse is reused / input tokens; left share is left / returning.
	[ "$(j '[.rows[] | ((.reused_input_tokens / .input_tokens) - .kv_reuse | fabs) < 1e-6] | all')" = true ]
	[ "$(j '[.rows[] | ((.left_last_cluster / .returning) - .left_last_cluster_share | fabs) < 1e-6] | all')" = true ]
}

@test "--csv: a header and one line of 15 fields per row" {
	run -0 --separate-stderr "$SIM" --csv "$THRASH"
	[ "${#lines[@]}" -eq 8 ]
	[[ ${lines[0]} == row,algorithm,last_cluster_affinity,requests,* ]]
	[ "$(awk -F, '{print NF}' <<<"$output" | sort -u)" = 15 ]
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

@test "--svg: a well-formed SVG chart with both panels and every row" {
	run -0 --separate-stderr "$SIM" --svg "$T/c.svg" "$THRASH"
	[ "${#lines[@]}" -eq 9 ]	# the table still goes to stdout
	xml_check "$T/c.svg"
	grep -q '<svg xmlns="http://www.w3.org/2000/svg"' "$T/c.svg"
	grep -q 'TTFT p99' "$T/c.svg"
	grep -q 'KV-cache reuse' "$T/c.svg"
	local r
	for r in wait-and-widen/off wait-and-widen/on pulsar-wait-and-widen/off \
	    pulsar-wait-and-widen/on round-robin power-of-n pulsar; do
		grep -q ">$r</text>" "$T/c.svg"
	done
	# 7 rows x 2 panels of bars, plus the background.
	[ "$(grep -c '<rect ' "$T/c.svg")" -eq 15 ]
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
	[ "$(j '.rows[6]')" = "$pulsar" ]
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
	scenario '.sessions.output_tokens = {"min": 1, "max": 5, "mean": 3}'
	run -65 --separate-stderr "$SIM" "$T/s.json"
	[[ $stderr == *"sessions.output_tokens.mean: unknown field"* ]]
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
