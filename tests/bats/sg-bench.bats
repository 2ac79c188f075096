#!/usr/bin/env bats
# sg-bench.bats — the benchmark program: modes, options, output shapes and
# errors.  Sizes are tiny: these tests check behaviour, never speed.

bats_require_minimum_version 1.5.0

setup() {
	TOP=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)
	SG_BINDIR=${SG_BINDIR:-$TOP/build/san/bin}
	BENCH=$SG_BINDIR/sg-bench
	TMP=$(mktemp -d)
}

teardown() {
	rm -rf "$TMP"
}

@test "--help prints usage on stdout and exits 0" {
	run -0 --separate-stderr "$BENCH" --help
	[[ $output == usage:* ]]
	[ -z "$stderr" ]
}

@test "--version prints 'sg-bench 0.1.0'" {
	run -0 "$BENCH" --version
	[ "$output" = "sg-bench 0.1.0" ]
}

@test "no mode, or an unknown mode, is a usage error (64)" {
	run -64 --separate-stderr "$BENCH"
	[[ $stderr == *usage:* ]]
	run -64 --separate-stderr "$BENCH" sideways
	[[ $stderr == *"sg-bench: unknown mode 'sideways'"* ]]
}

@test "decide: a bad option value is a usage error (64)" {
	run -64 --separate-stderr "$BENCH" decide --iterations lots
	run -64 --separate-stderr "$BENCH" decide --scenario no-such-algorithm
	run -64 --separate-stderr "$BENCH" decide --frobnicate
}

@test "decide: one row per algorithm and session scenario, with a CSV twin" {
	run -0 --separate-stderr "$BENCH" decide --iterations 320 --warmup 32 \
	    --runs 1 --candidates 8 --csv "$TMP/d.csv"
	for s in random round-robin power-of-n wait-and-widen pulsar \
	    pulsar-wait-and-widen pulsar-nocache pwaw-nocache pulsar-cold-keys \
	    waw-session-new waw-session-returning pwaw-session-new \
	    pwaw-session-returning waw-returning-vs-off pwaw-returning-vs-off \
	    waw-new-vs-off pwaw-new-vs-off waw-new-samepath-vs-off \
	    pwaw-new-samepath-vs-off waw-returning-samepath-vs-off \
	    pwaw-returning-samepath-vs-off waw-many-tenants \
	    waw-many-tenants-samepath waw-many-tenants-cold-keys \
	    waw-uncached-ring pulsar-many-tenants; do
		grep -qE "^$s +8 " <<<"$output" || { echo "no row for $s"; false; }
		grep -q "^$s,8," "$TMP/d.csv" || { echo "no CSV row for $s"; false; }
	done
	head -1 "$TMP/d.csv" | grep -q '^scenario,candidates,p50_ns,p99_ns,floor_p50_ns,ratio_p50_floor,allocs_per_decision,select_pct,wait_pct,reject_pct,iterations,runs,batch,call_p50_ns,call_p99_ns,cache_hit_pct,ratio_min,ratio_max,same_path_pct$'
	# Every CSV row has as many fields as the header.
	awk -F, 'NR == 1 { n = NF } NF != n { exit 1 }' "$TMP/d.csv"
	# The footer says how many samples were dropped and re-warmed after.
	grep -qE 'dropped \(a context switch in their group of 64; each such group followed by an untimed pass over the requests, [0-9]+ times\)' <<<"$output"
}

@test "decide: every scenario the man page names is a scenario of the program" {
	for s in $(grep -oE 'Cm [a-z]+(\\-[a-z]+)*' "$TOP/man/sg-bench.1" | sed 's/^Cm //; s/\\-/-/g' |
	    grep -E '^(pulsar|pwaw|waw)-'); do
		run -0 --separate-stderr "$BENCH" decide --iterations 16 --warmup 0 \
		    --runs 1 --candidates 8 --scenario "$s"
	done
}

@test "decide: honest floors: session rules against equal-parameter flag-off decisions, same-path share printed" {
	run -0 --separate-stderr "$BENCH" decide --iterations 320 --warmup 32 \
	    --runs 1 --candidates 8 --scenario waw-new-samepath-vs-off
	grep -qE '^waw-new-samepath-vs-off +8 .*\(same path: [0-9]+%\)$' <<<"$output"
	run -0 --separate-stderr "$BENCH" decide --iterations 320 --warmup 32 \
	    --runs 1 --candidates 8 --scenario pwaw-returning-vs-off
	! grep -q 'same path' <<<"$output"
	# The floors' primitives are documented, one entry per floor.
	grep -q 'fixed per-call work' "$TOP/man/sg-bench.1"
	grep -q 'a cache hit.s work' "$TOP/man/sg-bench.1"
}

@test "decide: --scenario and --candidates select the cells" {
	run -0 --separate-stderr "$BENCH" decide --iterations 320 --warmup 32 \
	    --runs 1 --candidates 8,64 --scenario pulsar --csv "$TMP/d.csv"
	[ "$(grep -c '^pulsar,' "$TMP/d.csv")" -eq 2 ]
	[ "$(wc -l < "$TMP/d.csv")" -eq 3 ]
}

@test "decide: waw-many-tenants-samepath keeps the requests whose path is their single-tenant twin's, share printed" {
	run -0 --separate-stderr "$BENCH" decide --iterations 320 --warmup 32 \
	    --runs 1 --candidates 8,64 \
	    --scenario waw-many-tenants,waw-many-tenants-samepath
	for n in 8 64; do
		grep -qE "^waw-many-tenants-samepath +$n .*\(same path: [0-9]+%\)$" <<<"$output" ||
		    { echo "no same-path row at $n"; false; }
		grep -E "^waw-many-tenants +$n " <<<"$output" | grep -qv 'same path' ||
		    { echo "the plain row keeps every request at $n"; false; }
	done
}

@test "decide: pulsar-many-tenants row at 8, 64 and 256 candidates with its fields, floor the single-tenant stream" {
	run -0 --separate-stderr "$BENCH" decide --iterations 320 --warmup 32 \
	    --runs 1 --scenario pulsar-many-tenants --csv "$TMP/d.csv"
	for n in 8 64 256; do
		grep -qE "^pulsar-many-tenants +$n +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.-]+ +[0-9.-]+ +[0-9.]+ +[0-9.na]+  100/0/0$" <<<"$output" ||
		    { echo "no row at $n"; false; }
		# p50, p99, floor and ratio present and positive; ranking-cache hits counted
		awk -F, -v n="$n" '$1 == "pulsar-many-tenants" && $2 == n && $3 > 0 &&
		    $4 > 0 && $5 > 0 && $6 > 0 && $16 != "" { ok = 1 } END { exit !ok }' "$TMP/d.csv" ||
		    { echo "no CSV row at $n"; false; }
	done
	[ "$(wc -l < "$TMP/d.csv")" -eq 4 ]
}

@test "decide: --scenario takes a comma list, run in table order; an unknown name in it is a usage error" {
	run -0 --separate-stderr "$BENCH" decide --iterations 320 --warmup 32 \
	    --runs 1 --candidates 8 --scenario wait-and-widen,random \
	    --csv "$TMP/d.csv"
	[ "$(wc -l < "$TMP/d.csv")" -eq 3 ]
	[ "$(sed -n 2p "$TMP/d.csv" | cut -d, -f1)" = random ]
	[ "$(sed -n 3p "$TMP/d.csv" | cut -d, -f1)" = wait-and-widen ]
	run -64 --separate-stderr "$BENCH" decide --scenario random,wait-and-wide
	[[ "$stderr" == *"unknown scenario 'wait-and-wide'"* ]]
}

@test "store: lookups, writes and the durable ratio on a small store, as JSON" {
	run -0 --separate-stderr "$BENCH" store --entries 500 --lookups 500 \
	    --writes 500 --sync-writes 500 --runs 1 --no-redis --dir "$TMP/s" --json
	jq -e '.entries == 500 and .runs == 1
	    and (.lookup.p50_ns > 0) and (.lookup.raw_p50_ns > 0)
	    and (.write.per_s > 0) and (.sync.per_s > 0) and (.sync.raw_per_s > 0)' <<<"$output"
}

@test "report: one run writes a Markdown report of every comparison, SVG charts and the exact commands, and stops its servers" {
	run -0 --separate-stderr "$BENCH" report -q -P -r 1 -o "$TMP/rep"
	for h in "Decisions against their floors" "Session rules: flag on against flag off" \
	    "Many tenants" "The last-cluster store" "sg-route --ndjson against jq" \
	    "## sg-sim" "sg-proxy against nginx" "## Commands"; do
		grep -qF "$h" "$TMP/rep/report.md" || { echo "no section: $h"; false; }
	done
	grep -q '^Started .* Machine: .* cores;' "$TMP/rep/report.md"
	grep -q 'load average' "$TMP/rep/report.md"
	grep -q 'sg-bench decide --runs 1' "$TMP/rep/report.md"
	grep -q '^| waw-returning-vs-off | 8 |' "$TMP/rep/report.md"
	grep -q 'equal batches of 1000' "$TMP/rep/report.md"
	head -c 4 "$TMP/rep/decide.svg" | grep -q '<svg'
	head -c 4 "$TMP/rep/compare.svg" | grep -q '<svg'
	# the report is also its stdout
	[[ $output == "# Stargate benchmark report"* ]]
	# the redis-server it started is gone
	port=$(sed -n 's/.*--redis 127.0.0.1:\([0-9]*\).*/\1/p' "$TMP/rep/commands.txt")
	if [ -n "$port" ]; then
		! redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null
	fi
}

@test "report: a bad option is a usage error (64)" {
	run -64 --separate-stderr "$BENCH" report -Z
	[[ $stderr == *"report.sh: unknown option"* ]]
}

@test "store: a bad option value is a usage error (64)" {
	run -64 --separate-stderr "$BENCH" store --entries -3
	run -64 --separate-stderr "$BENCH" store --redis
}
