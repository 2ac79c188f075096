#!/bin/sh
# route-vs-jq.sh — sg-route --ndjson against `jq -c .` on the same stream,
# in the same run (issue 13, "sg-route as fast as jq on a stream").
#
# usage: route-vs-jq.sh [-b bindir] [-n requests] [-c clusters] [-r runs]
#                       [-k dir] [-g]
#   -b bindir   where sg-route is (default: build/bin)
#   -n N        requests in the stream (default 100000)
#   -c N        clusters in the snapshot (default 64)
#   -r R        runs of each program, alternating (default 5)
#   -k dir      keep the stream and the outputs in dir (default: a temp dir)
#   -g          only write the stream to stdout and exit
#
# The stream is one {"snapshot": ...} record of N clusters (mixed load),
# then the requests, each with its own id, a cache-affinity key out of
# 1000, a routing key out of 3 and varied input tokens.  Each run's wall
# time is measured around the whole program (output to a file); lines/s is
# input lines / seconds.  Three programs take turns on the same file in
# every round: sg-route --ndjson, jq -c ., and sg-route --ndjson
# --reference-reader (every line through jansson: the reader this
# comparison measured before the request scan).  Printed: the median and
# the spread (min..max) of each one's lines/s, the ratio of the medians
# (sg-route / jq; the target is >= 1), and the output check: every
# sg-route run's output must be byte for byte the output of
# --reference-reader --reference-writer (jansson reading and writing,
# run once), and jq must have passed every line; a difference fails the
# script (exit 1).
set -eu

bindir=build/bin
n=100000
c=64
runs=5
keep=
genonly=
while getopts b:n:c:r:k:g opt; do
	case $opt in
	b) bindir=$OPTARG ;;
	n) n=$OPTARG ;;
	c) c=$OPTARG ;;
	r) runs=$OPTARG ;;
	k) keep=$OPTARG ;;
	g) genonly=1 ;;
	*) sed -n '4,11p' "$0" >&2; exit 64 ;;
	esac
done

gen() {
	awk -v n="$n" -v c="$c" 'BEGIN {
		printf "{\"snapshot\": {\"clusters\":["
		for (i = 0; i < c; i++) {
			run = (i * 11) % 45
			q = run > 32 ? run - 32 : 0
			printf "%s{\"id\":\"region-%02d-cluster-%03d\",\"rtt_ms\":%d,", \
			    (i ? "," : ""), i % 7, i, 1 + (i * 5) % 13
			printf "\"max_engine_concurrency\":32,\"running\":%d,", run
			printf "\"queued\":%d,\"queued_input_tokens\":%d,", q, q * 1800
			printf "\"last_mean_input_tps\":%d,\"max_input_tps\":%d}", \
			    8000 + 1000 * (i % 7), 12000 + 1500 * (i % 7)
		}
		printf "]}}\n"
		for (j = 0; j < n; j++)
			printf "{\"request\": {\"request_id\": \"req-%06d\", " \
			    "\"model\": \"m\", \"routing_key\": \"tenant-%d\", " \
			    "\"cache_affinity_key\": \"session-%04d\", " \
			    "\"input_tokens\": %d}}\n", j, j % 3, (j * 7919) % 1000, \
			    100 + (j * 37) % 4000
	}'
}

if [ -n "$genonly" ]; then
	gen
	exit 0
fi
command -v jq >/dev/null || { echo "route-vs-jq.sh: jq not found" >&2; exit 69; }
[ -x "$bindir/sg-route" ] || { echo "route-vs-jq.sh: no $bindir/sg-route" >&2; exit 66; }
if [ -n "$keep" ]; then
	dir=$keep
	mkdir -p "$dir"
else
	dir=$(mktemp -d)
	trap 'rm -rf "$dir"' EXIT
fi
gen >"$dir/stream.ndjson"
lines=$(wc -l <"$dir/stream.ndjson")

# The output every sg-route run must print: jansson's reading and writing.
"$bindir/sg-route" --ndjson --reference-reader --reference-writer \
    <"$dir/stream.ndjson" >"$dir/expected.out" || [ $? -eq 2 ]

# Seconds of wall time for one run of "$@" (stdin the stream, stdout $out).
secs() {
	out=$1
	shift
	t0=$(date +%s.%N)
	"$@" <"$dir/stream.ndjson" >"$out" || [ $? -eq 2 ]
	t1=$(date +%s.%N)
	echo "$t0 $t1" | awk '{ printf "%.6f\n", $2 - $1 }'
}

: >"$dir/route.t"
: >"$dir/jq.t"
: >"$dir/ref.t"
same=yes
i=0
while [ "$i" -lt "$runs" ]; do
	secs "$dir/route.out" "$bindir/sg-route" --ndjson >>"$dir/route.t"
	cmp -s "$dir/route.out" "$dir/expected.out" || same=no
	secs "$dir/jq.out" jq -c . >>"$dir/jq.t"
	[ "$(wc -l <"$dir/jq.out")" -eq "$lines" ] || same=no
	secs "$dir/ref.out" "$bindir/sg-route" --ndjson --reference-reader \
	    >>"$dir/ref.t"
	cmp -s "$dir/ref.out" "$dir/expected.out" || same=no
	i=$((i + 1))
done

# median, min, max of lines/s over the runs of one program
stats() {
	awk -v l="$lines" '{ print l / $1 }' "$1" | sort -g | awk '
	    { v[NR] = $1 }
	    END {
		m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
		printf "%.0f %.0f %.0f\n", m, v[1], v[NR]
	    }'
}
set -- $(stats "$dir/route.t")
rm_=$1 rlo=$2 rhi=$3
set -- $(stats "$dir/jq.t")
jm=$1 jlo=$2 jhi=$3
set -- $(stats "$dir/ref.t")
fm=$1 flo=$2 fhi=$3
printf 'stream: %s lines (%s requests, %s clusters), %s runs each, alternating\n' \
    "$lines" "$n" "$c" "$runs"
printf '%-28s %10s %21s\n' program "lines/s" "spread (min..max)"
printf '%-28s %10s %10s..%-10s\n' "sg-route --ndjson" "$rm_" "$rlo" "$rhi"
printf '%-28s %10s %10s..%-10s\n' "jq -c ." "$jm" "$jlo" "$jhi"
printf '%-28s %10s %10s..%-10s\n' "sg-route --reference-reader" "$fm" \
    "$flo" "$fhi"
echo "$rm_ $jm" | awk '{ printf "ratio sg-route / jq (medians): %.2f\n", $1 / $2 }'
echo "$rm_ $fm" | awk '{ printf "ratio sg-route / --reference-reader (medians): %.2f\n", $1 / $2 }'
if [ "$same" = yes ]; then
	echo "output: every sg-route run byte-identical to jansson's reading and writing; jq passed every line"
else
	echo "output: DIFFERS (kept in $dir)" >&2
	trap - EXIT
	exit 1
fi
