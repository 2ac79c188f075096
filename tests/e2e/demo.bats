#!/usr/bin/env bats
# demo.bats — the main job (`make demo`, tools/demo.sh) runs to the end on
# the built programs and shows what it claims to show.

bats_require_minimum_version 1.5.0

# The demo runs once (it starts engines and a proxy: about 20 s); every
# test reads its output.
setup_file() {
	TOP=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)
	SG_BINDIR=${SG_BINDIR:-$TOP/build/san/bin}
	export DEMO_OUT=$BATS_FILE_TMPDIR/out DEMO_ERR=$BATS_FILE_TMPDIR/err
	env O="${SG_BINDIR%/bin}" "$TOP/tools/demo.sh" >"$DEMO_OUT" 2>"$DEMO_ERR"
	echo $? >"$BATS_FILE_TMPDIR/status"
}

setup() {
	status=$(cat "$BATS_FILE_TMPDIR/status")
	output=$(cat "$DEMO_OUT")
	stderr=$(cat "$DEMO_ERR")
}

@test "the demo runs to the end, quietly on stderr, and places new and returning sessions" {
	[ "$status" = 0 ]
	[ -z "$stderr" ]
	[[ $output == *"select us-west"*"[new, fallback]"* ]]
	[[ $output == *"[returning, promoted, primary]"* ]]
	[[ $output == *"pulsar-wait-and-widen  flag on   10 to us-west"* ]]
	[[ $output == *"pulsar-wait-and-widen  flag off  10 to us-east"* ]]
}

@test "the demo remembers the session's last cluster in a store and reads it back" {
	[ "$status" = 0 ]
	[[ $output == *"source prompt_cache_key (eligible: true)"* ]]
	[[ $output == *'get $(sg-classify'*$'\n'"    us-west"* ]]
	[[ $output == *'{"entries":1,'* ]]
}

@test "the demo's simulation shows returning sessions staying with their cache" {
	[ "$status" = 0 ]
	line=$(grep -E '^  wait-and-widen: left their last cluster' <<<"$output")
	[[ -n $line ]]
	# "left their last cluster A% -> B%": B must be below A.
	a=$(sed -E 's/.*cluster ([0-9.]+)% -> ([0-9.]+)%.*/\1/' <<<"$line")
	b=$(sed -E 's/.*cluster ([0-9.]+)% -> ([0-9.]+)%.*/\2/' <<<"$line")
	awk -v a="$a" -v b="$b" 'BEGIN { exit !(b < a) }'
}

# live FLAG: the lines of the live run with the feature FLAG (act 9 for
# true, act 10 for false): "session turn N -> cluster state..." lines.
live() {
	if [ "$1" = true ]; then
		sed -n '/== 9\. Live/,/== 10\./p' <<<"$output"
	else
		sed -n '/== 10\./,/== What the flag changed/p' <<<"$output"
	fi | grep -E '^    chat-[0-9]+ +turn [0-9]'
}

@test "the demo's live stack, flag on: first turns overflow the full us-east as new sessions; turns 2-5 stay on their last cluster as returning sessions and reuse the KV cache" {
	[ "$status" = 0 ]
	local on s first
	on=$(live true)
	[ "$(wc -l <<<"$on")" = 15 ]
	# three sessions, five turns each, through the openai client
	[ "$(awk '{print $1}' <<<"$on" | sort -u | wc -l)" = 3 ]
	# turn 1: us-east is full, every session is new and goes elsewhere
	[ "$(grep -c 'turn 1  -> ' <<<"$on")" = 3 ]
	! grep 'turn 1  -> us-east' <<<"$on"
	[ "$(grep 'turn 1 ' <<<"$on" | grep -c 'new, fallback  .*KV reused     0 of')" = 3 ]
	for s in $(awk '{print $1}' <<<"$on" | sort -u); do
		first=$(awk -v s="$s" '$1 == s && $3 == 1 { print $5 }' <<<"$on")
		# every later turn on the first turn's cluster, as a returning
		# session, finding more than the whole first prompt cached
		[ "$(awk -v s="$s" -v c="$first" '$1 == s && $3 > 1 && $5 == c &&
		    $6 == "returning," && $7 == "primary" && $10 > 2000' <<<"$on" | wc -l)" = 4 ]
	done
	# the gateway remembered each session's cluster, keyed by a hash
	[ "$(grep -cE '^    lc:v1:[0-9a-f]{16}\.\.\.  (us-west|eu-central)$' <<<"$output")" = 3 ]
}

@test "the demo's live stack, flag off: turn 2 of every session goes back to us-east, where nothing is cached" {
	[ "$status" = 0 ]
	local off
	off=$(live false)
	[ "$(wc -l <<<"$off")" = 15 ]
	! grep 'turn 1  -> us-east' <<<"$off"
	[ "$(grep 'turn 2 ' <<<"$off" | grep -c -- '-> us-east .*KV reused     0 of')" = 3 ]
	[ "$(grep -E 'turn [345] ' <<<"$off" | grep -c -- '-> us-east')" = 9 ]
	grep -q 'no store was created' <<<"$output"
}

@test "the demo's tally: the flag keeps every returning turn on its cluster and reuses more KV tokens" {
	[ "$status" = 0 ]
	local on off
	on=$(grep -E '^    flag on: ' <<<"$output")
	off=$(grep -E '^    flag off: ' <<<"$output")
	[[ $on == *"12 returning turns, 0 left their last cluster"* ]]
	[[ $off == *"12 returning turns, 3 left their last cluster"* ]]
	grep -qE '^    difference: 3 fewer moves, [1-9][0-9]+ more KV tokens reused' <<<"$output"
}

@test "the demo stops every process it started" {
	[ "$status" = 0 ]
	local d=${SG_BINDIR%/bin}/demo
	[ -d "$d" ]
	# engines and proxies name files under $O/demo on their command line
	! pgrep -f -- "$d/" >/dev/null
	# and none of them reported a sanitizer error
	! grep -lE 'AddressSanitizer|LeakSanitizer|runtime error:' "$d"/*.log
}
