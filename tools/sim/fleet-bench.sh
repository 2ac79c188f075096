#!/bin/sh
#
# fleet-bench.sh — the simulation speed of sg-sim on the fleet scenario
# (four rows, about 10 million requests), as user CPU seconds of one
# process on one thread, median of N rounds with the spread.  With a second
# binary the two are run alternately, round by round, so that both see the
# same machine load, and the ratio of the medians is printed.
#
# usage: tools/sim/fleet-bench.sh [-n rounds] [-s scenario] sg-sim [sg-sim2]
#
# Each round runs "sg-sim -v scenario" (the whole scenario, every row, one
# thread) and reads its user time from /usr/bin/time; -v's per-row lines
# go to the log (the requests of each row and its wall time).

set -eu
rounds=3
scenario=$(dirname "$0")/scenarios/fleet.json
while getopts n:s: opt; do
	case $opt in
	n) rounds=$OPTARG ;;
	s) scenario=$OPTARG ;;
	*) echo "usage: $0 [-n rounds] [-s scenario] sg-sim [sg-sim2]" >&2
	   exit 64 ;;
	esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] && [ $# -le 2 ] || {
	echo "usage: $0 [-n rounds] [-s scenario] sg-sim [sg-sim2]" >&2
	exit 64
}
[ -x /usr/bin/time ] || { echo "$0: needs /usr/bin/time" >&2; exit 69; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

r=1
while [ "$r" -le "$rounds" ]; do
	k=1
	for bin in "$@"; do
		/usr/bin/time -o "$tmp/time" -f "%U %e" "$bin" -v "$scenario" \
		    >"$tmp/out.$k" 2>"$tmp/log"
		read -r user wall <"$tmp/time"
		reqs=$(sed -n 's/.* rows, \([0-9]*\) requests.*/\1/p' "$tmp/log")
		echo "$user" >>"$tmp/user.$k"
		echo "round $r bin $k ($bin): $reqs requests, user $user s," \
		    "wall $wall s"
		[ "$k" -eq 1 ] || cmp -s "$tmp/out.1" "$tmp/out.$k" ||
		    echo "  (the reports of bin 1 and bin $k differ)"
		k=$((k + 1))
	done
	r=$((r + 1))
done

median() {
	sort -n "$1" | awk '{ v[NR] = $1 } END {
	    printf "%.2f (min %.2f, max %.2f, n %d)", v[int((NR + 1) / 2)],
	    v[1], v[NR], NR }'
}
k=1
for bin in "$@"; do
	echo "bin $k: user CPU median $(median "$tmp/user.$k") s"
	k=$((k + 1))
done
if [ $# -eq 2 ]; then
	m1=$(sort -n "$tmp/user.1" | awk '{ v[NR] = $1 } END {
	    print v[int((NR + 1) / 2)] }')
	m2=$(sort -n "$tmp/user.2" | awk '{ v[NR] = $1 } END {
	    print v[int((NR + 1) / 2)] }')
	# /usr/bin/time counts in hundredths: a median of 0.00 has no ratio,
	# and the line says so rather than being left out.
	awk -v a="$m1" -v b="$m2" 'BEGIN { if (a > 0 && b > 0)
	    printf "ratio bin 1 / bin 2: %.2f\n", a / b
	    else printf "ratio bin 1 / bin 2: none (a median below 0.01 s;" \
	    " use a longer scenario)\n" }'
fi
