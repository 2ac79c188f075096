#!/bin/sh
# report.sh — one report of every side-by-side comparison of the project
# (issue 13, "One report"): `make bench` and `sg-bench report` run it.
#
# usage: report.sh [-b bindir] [-o dir] [-r runs] [-q] [-P]
#   -b bindir   the programs (default: build/bin)
#   -o dir      where report.md, the SVG charts and the raw results go
#               (default: a new /tmp/sg-bench-report.XXXXXX)
#   -r R        runs of every comparison (default 5); figures are medians
#               of the runs with their spread (min..max)
#   -q          quick: small sizes (for tests; the figures mean little)
#   -P          skip sg-proxy against nginx even when both are there
#
# Every comparison is a ratio measured in the same run: decisions against
# their floors and flag-on against flag-off (sg-bench decide), the store
# against raw LMDB and against a loopback redis-server (sg-bench store and
# redis-benchmark on the same server), sg-route --ndjson against jq -c .
# (route-vs-jq.sh), sg-sim's simulated requests per second, and sg-proxy
# against nginx proxy_pass (tools/proxy-bench/run) when sg-proxy, nginx and
# wrk are present.  Every server it needs is started on 127.0.0.1 and
# stopped by its pid.  The exact commands are written into the report.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
bindir=$top/build/bin
out=
runs=5
quick=
noproxy=
while getopts :b:o:r:qP opt; do
	case $opt in
	b) bindir=$(cd "$OPTARG" && pwd) ;;
	o) out=$OPTARG ;;
	r) runs=$OPTARG ;;
	q) quick=1 ;;
	P) noproxy=1 ;;
	*) echo "report.sh: unknown option or missing value: -$OPTARG" >&2
	   sed -n '5,12p' "$0" >&2; exit 64 ;;
	esac
done
case $runs in ''|*[!0-9]*|0) echo "report.sh: -r: a count >= 1" >&2; exit 64 ;; esac
for p in sg-bench sg-route sg-sim; do
	if [ ! -x "$bindir/$p" ]; then
		echo "report.sh: $bindir/$p: not found (build first)" >&2
		exit 69
	fi
done
if [ -z "$out" ]; then
	out=$(mktemp -d /tmp/sg-bench-report.XXXXXX)
else
	mkdir -p "$out"
fi
out=$(cd "$out" && pwd)

redis_pid=
cleanup() {
	if [ -n "$redis_pid" ]; then
		kill "$redis_pid" 2>/dev/null || true
		wait "$redis_pid" 2>/dev/null || true
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -n "$quick" ]; then
	it=320 wu=32 cands=8 keys=64
	st_entries=500 st_ops=500 rq=1000 rb_n=500 sim=steady
else
	it=200000 wu=20000 cands=8,64,256 keys=1024
	st_entries=100000 st_ops=100000 rq=100000 rb_n=100000 sim=steady
fi

cmds=$out/commands.txt
: >"$cmds"
run() {	# log the command, then run it
	echo "$*" >>"$cmds"
	"$@"
}

# median min max of the numbers on stdin, one a line
mstat() {
	sort -g | awk '{ v[NR] = $1 } END {
	    if (NR == 0) { print "n/a n/a n/a"; exit }
	    m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
	    printf "%.6g %.6g %.6g\n", m, v[1], v[NR] }'
}

load() { cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo n/a; }
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null |
    head -1)
cores=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo n/a)
load0=$(load)
started=$(date -u '+%Y-%m-%d %H:%M:%S UTC')

# --- 1. decisions against their floors, flag on against flag off ---------
echo "report.sh: sg-bench decide ($runs runs)..." >&2
run "$bindir/sg-bench" decide --runs "$runs" --iterations "$it" \
    --warmup "$wu" --candidates "$cands" --keys "$keys" \
    --csv "$out/decide.csv" >"$out/decide.txt"

# --- 2. the store against raw LMDB and a loopback redis-server -----------
rport=
if command -v redis-server >/dev/null 2>&1; then
	rport=$(python3 -c 'import socket; s = socket.socket();
s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()' \
	    2>/dev/null || echo)
fi
if [ -n "$rport" ]; then
	redis-server --bind 127.0.0.1 --port "$rport" --save '' \
	    --appendonly no --daemonize no >"$out/redis.log" 2>&1 &
	redis_pid=$!
	i=0
	until redis-cli -h 127.0.0.1 -p "$rport" ping >/dev/null 2>&1; do
		i=$((i + 1))
		if [ "$i" -gt 100 ]; then
			echo "report.sh: redis-server did not start" >&2
			kill "$redis_pid" 2>/dev/null || true
			redis_pid= rport=
			break
		fi
		sleep 0.05
	done
fi
echo "report.sh: sg-bench store..." >&2
if [ -n "$rport" ]; then
	run "$bindir/sg-bench" store --runs "$runs" --entries "$st_entries" \
	    --lookups "$st_ops" --writes "$st_ops" --sync-writes "$st_ops" \
	    --redis "127.0.0.1:$rport" --json >"$out/store.json"
else
	run "$bindir/sg-bench" store --runs "$runs" --entries "$st_entries" \
	    --lookups "$st_ops" --writes "$st_ops" --sync-writes "$st_ops" \
	    --no-redis --json >"$out/store.json"
fi
: >"$out/redis-benchmark.csv"
if [ -n "$rport" ] && command -v redis-benchmark >/dev/null 2>&1; then
	i=0
	while [ "$i" -lt "$runs" ]; do
		run redis-benchmark -h 127.0.0.1 -p "$rport" -c 1 -n "$rb_n" \
		    -t get,set -q --csv >>"$out/redis-benchmark.csv"
		i=$((i + 1))
	done
fi
cleanup
redis_pid=

# --- 3. sg-route against jq ----------------------------------------------
echo "report.sh: sg-route vs jq..." >&2
run sh "$here/route-vs-jq.sh" -b "$bindir" -n "$rq" -r "$runs" \
    >"$out/route-vs-jq.txt"

# --- 4. sg-sim's simulated requests per second ----------------------------
echo "report.sh: sg-sim..." >&2
: >"$out/sim.txt"
i=0
while [ "$i" -lt "$runs" ]; do
	run "$bindir/sg-sim" -v -j 1 "$top/tools/sim/scenarios/$sim.json" \
	    2>&1 >/dev/null | sed -n 's/.* rows, .*: \([0-9]*\) requests\/s$/\1/p' \
	    >>"$out/sim.txt"
	i=$((i + 1))
done

# --- 5. sg-proxy against nginx --------------------------------------------
proxy=
if [ -z "$noproxy" ] && [ -x "$bindir/sg-proxy" ] &&
    [ -x "$bindir/sg-mockengine" ] && command -v nginx >/dev/null 2>&1 &&
    command -v wrk >/dev/null 2>&1; then
	echo "report.sh: sg-proxy vs nginx..." >&2
	if [ -n "$quick" ]; then
		popts="--duration 1 --warmup 0 --rss-duration 0 --concurrency 16"
	else
		popts="--duration 5 --rss-duration 0"
	fi
	# shellcheck disable=SC2086
	if run "$top/tools/proxy-bench/run" --bindir "$bindir" --runs "$runs" \
	    $popts --out "$out/proxy" >"$out/proxy.txt" 2>&1; then
		proxy=1
	fi
fi
load1=$(load)

# --- the report -------------------------------------------------------------
num() { jq -r "$1 // \"n/a\"" "$out/store.json"; }
svgbars() {	# title file: "label value" lines on stdin, a rule at $3
	awk -v title="$1" -v rule="$3" '
	{ lab[NR] = $1; val[NR] = $2 + 0; if ($2 + 0 > max) max = $2 + 0 }
	END {
		if (rule + 0 > max) max = rule + 0
		max = max * 1.1; if (max <= 0) max = 1
		w = 760; lw = 300; bh = 16; h = 40 + NR * (bh + 4) + 30
		printf "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" font-size=\"11\">\n", w, h
		printf "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
		printf "<text x=\"10\" y=\"20\" font-size=\"14\">%s</text>\n", title
		for (i = 1; i <= NR; i++) {
			y = 34 + (i - 1) * (bh + 4)
			bw = (w - lw - 60) * val[i] / max
			printf "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%s</text>\n", lw - 6, y + 12, lab[i]
			printf "<rect x=\"%d\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"#4a7ab5\"/>\n", lw, y, bw, bh
			printf "<text x=\"%.1f\" y=\"%d\">%.2f</text>\n", lw + bw + 4, y + 12, val[i]
		}
		if (rule + 0 > 0) {
			x = lw + (w - lw - 60) * rule / max
			printf "<line x1=\"%.1f\" y1=\"30\" x2=\"%.1f\" y2=\"%d\" stroke=\"#c33\" stroke-dasharray=\"4 3\"/>\n", x, x, h - 24
			printf "<text x=\"%.1f\" y=\"%d\" fill=\"#c33\">target %s</text>\n", x + 3, h - 10, rule
		}
		printf "</svg>\n"
	}' >"$2"
}

md=$out/report.md
{
	echo "# Stargate benchmark report"
	echo
	echo "Started $started. Machine: ${cpu:-unknown CPU}, $cores cores;"
	echo "load average (1/5/15 min) $load0 at the start, $load1 at the end."
	echo "Every figure is the median of $runs runs with its spread"
	echo "(min..max of the runs); every ratio is measured in the same run."
	[ -n "$quick" ] && echo "Quick mode (-q): small sizes, the figures mean little."
	echo
	echo "## Decisions against their floors (sg-bench decide)"
	echo
	echo "Floors: see sg-bench(1). Targets: ratio <= 2 (1.5 stretch),"
	echo "batch p99/p50 <= 3."
	echo
	echo "| scenario | N | p50 ns | floor ns | ratio (spread) | batch p99/p50 | call p99/p50 |"
	echo "|---|---:|---:|---:|---:|---:|---:|"
	awk -F, 'NR > 1 && $1 !~ /-vs-off$/ && $1 !~ /many-tenants/ {
		printf "| %s | %s | %.0f | %.0f | %.2f (%.2f..%.2f) | %.1f | %.1f |\n",
		    $1, $2, $3, $5, $6, $17, $18, $4 / $3, $15 / ($14 > 0 ? $14 : 1)
	    }' "$out/decide.csv"
	echo
	echo "## Session rules: flag on against flag off, equal parameters"
	echo
	echo "Ratio = flag-on p50 / flag-off p50 on the same requests (target"
	echo "<= 1.05); samepath rows keep only the requests whose decision"
	echo "has the same kind and phase both ways."
	echo
	echo "| comparison | N | on ns | off ns | ratio (spread) | overhead | same path |"
	echo "|---|---:|---:|---:|---:|---:|---:|"
	awk -F, 'NR > 1 && $1 ~ /-vs-off$/ {
		printf "| %s | %s | %.0f | %.0f | %.3f (%.3f..%.3f) | %+.1f%% | %s |\n",
		    $1, $2, $3, $5, $6, $17, $18, 100 * ($6 - 1),
		    $19 != "" ? $19 "%" : "all"
	    }' "$out/decide.csv"
	echo
	echo "## Many tenants (100 routing keys x 3 models) against one"
	echo
	echo "| comparison | N | many ns | one ns | ratio (spread) |"
	echo "|---|---:|---:|---:|---:|"
	awk -F, 'NR > 1 && $1 ~ /many-tenants/ {
		printf "| %s | %s | %.0f | %.0f | %.2f (%.2f..%.2f) |\n",
		    $1, $2, $3, $5, $6, $17, $18 }' "$out/decide.csv"
	echo
	echo "## The last-cluster store (sg-bench store)"
	echo
	echo "Medians of $runs runs; cv = coefficient of variation across runs."
	echo
	echo "| figure | store | raw / baseline | ratio |"
	echo "|---|---:|---:|---:|"
	echo "| lookup p50 (ns) vs raw LMDB | $(num .lookup.p50_ns) | $(num .lookup.raw_p50_ns) | $(num .lookup.p50_ratio) |"
	echo "| durable writes/s vs raw LMDB, equal batches of $(num .sync.batch) | $(num .sync.per_s) | $(num .sync.raw_per_s) | $(num .sync.ratio) |"
	echo "| group-commit writes/s (no sync) | $(num .write.per_s) | | |"
	if jq -e .redis "$out/store.json" >/dev/null 2>&1; then
		echo "| lookup p50 (ns) vs redis GET p50, one client | $(num .lookup.p50_ns) | $(num .redis.get_p50_ns) | $(jq -r '.lookup.p50_ns / .redis.get_p50_ns | . * 1000 | round / 1000' "$out/store.json") |"
	fi
	if [ -s "$out/redis-benchmark.csv" ]; then
		for t in GET SET; do
			set -- $(grep "^\"$t\"" "$out/redis-benchmark.csv" |
			    cut -d, -f2 | tr -d '"' | mstat)
			echo "| redis-benchmark $t req/s (-c 1), same server | | $1 ($2..$3) | |"
		done
	fi
	echo
	echo "## sg-route --ndjson against jq -c ."
	echo
	echo '```'
	cat "$out/route-vs-jq.txt"
	echo '```'
	echo
	echo "## sg-sim"
	echo
	set -- $(mstat <"$out/sim.txt")
	echo "Scenario $sim: $1 simulated requests/s ($2..$3), one thread."
	echo
	echo "## sg-proxy against nginx proxy_pass"
	echo
	if [ -n "$proxy" ] && [ -f "$out/proxy/report.md" ]; then
		sed 's/^#/##/' "$out/proxy/report.md"
	else
		echo "Not measured (sg-proxy, sg-mockengine, nginx or wrk missing,"
		echo "-P given, or the run failed: see proxy.txt)."
	fi
	echo
	echo "## Charts"
	echo
	echo "decide.svg (ratio to floor), compare.svg (same-run comparisons)."
	echo
	echo "## Commands"
	echo
	echo '```'
	cat "$cmds"
	echo '```'
} >"$md"

awk -F, 'NR > 1 && $1 !~ /-vs-off$/ { print $1 "@" $2, $6 }' \
    "$out/decide.csv" | svgbars "decision p50 / floor p50" "$out/decide.svg" 2
{
	awk -F, 'NR > 1 && ($1 ~ /-vs-off$/ || $1 ~ /many-tenants/) {
		print $1 "@" $2, $6 }' "$out/decide.csv"
	jq -r '"store-lookup/raw " + (.lookup.p50_ratio | tostring),
	    "store-sync/raw " + (.sync.ratio | tostring)' "$out/store.json"
	sed -n 's/^ratio sg-route \/ jq (medians): /sg-route\/jq /p' \
	    "$out/route-vs-jq.txt"
} | svgbars "same-run ratios" "$out/compare.svg" 1

cat "$md"
echo "report.sh: wrote $md, $out/decide.svg, $out/compare.svg" >&2
