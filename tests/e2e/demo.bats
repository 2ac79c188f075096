#!/usr/bin/env bats
# demo.bats — the main job (`make demo`, tools/demo.sh) runs to the end on
# the built programs and shows what it claims to show.

bats_require_minimum_version 1.5.0

setup() {
	TOP=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)
	SG_BINDIR=${SG_BINDIR:-$TOP/build/san/bin}
}

@test "the demo runs to the end, quietly on stderr, and places new and returning sessions" {
	run -0 --separate-stderr env O="${SG_BINDIR%/bin}" "$TOP/tools/demo.sh"
	[ -z "$stderr" ]
	[[ $output == *"select us-west"*"[new, fallback]"* ]]
	[[ $output == *"[returning, promoted, primary]"* ]]
	[[ $output == *"pulsar-wait-and-widen  flag on   10 to us-west"* ]]
	[[ $output == *"pulsar-wait-and-widen  flag off  10 to us-east"* ]]
}

@test "the demo remembers the session's last cluster in a store and reads it back" {
	run -0 --separate-stderr env O="${SG_BINDIR%/bin}" "$TOP/tools/demo.sh"
	[[ $output == *"source prompt_cache_key (eligible: true)"* ]]
	[[ $output == *'get $(sg-classify'*$'\n'"    us-west"* ]]
	[[ $output == *'{"entries":1,'* ]]
}

@test "the demo's simulation shows returning sessions staying with their cache" {
	run -0 --separate-stderr env O="${SG_BINDIR%/bin}" "$TOP/tools/demo.sh"
	line=$(grep -E '^  wait-and-widen: left their last cluster' <<<"$output")
	[[ -n $line ]]
	# "left their last cluster A% -> B%": B must be below A.
	a=$(sed -E 's/.*cluster ([0-9.]+)% -> ([0-9.]+)%.*/\1/' <<<"$line")
	b=$(sed -E 's/.*cluster ([0-9.]+)% -> ([0-9.]+)%.*/\2/' <<<"$line")
	awk -v a="$a" -v b="$b" 'BEGIN { exit !(b < a) }'
}
