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

@test "the demo's live sg-proxy keeps a returning session with its cache (flag on) and thrashes it (flag off)" {
	[ "$status" = 0 ]
	live=$(sed -n '/== 9. Live/,/== Try it/p' <<<"$output")
	[[ $live == *"turn  1  no hint      -> B"* ]]
	# flag on, then flag off: the tallies of turns 2-11
	[ "$(grep -c 'turns 2-11: 10 on B' <<<"$live")" = 1 ]
	[ "$(grep -c 'turns 2-11: 10 on A' <<<"$live")" = 1 ]
	[ "$(grep -n 'turns 2-11' <<<"$live" | head -1 | cut -d: -f2-)" = "    turns 2-11: 10 on B" ]
	# with the flag on, the second turn reuses the first turn's cache on B
	reused=$(grep -m1 'turn  2  hint B       -> B' <<<"$live" | awk '{print $(NF-1)}')
	[ "$reused" -ge 1000 ]
}
