#!/usr/bin/env bats
# sg-lastcluster(1): every command, every exit status, the environment,
# several processes on one store, crash safety (kill -9 of a writer),
# compaction under load, capacity, and that raw session data never reaches
# the store files.
#
# Generated records use key "lc:v1:" + the index as 64 hex digits and
# cluster id "v-" + its last 8 hex digits, so a reader can check any answer
# without a table: cluster_id == "v-" + key[-8:].
#
# "Unwritable" as root: permission bits do not stop root, so the tests use
# failures that hold for every user: a store path under a regular file
# (mkdir fails with ENOTDIR) and a directory where LMDB must create its
# lock file (open fails with EISDIR).

bats_require_minimum_version 1.5.0

setup() {
	BIN=${SG_BINDIR:-$BATS_TEST_DIRNAME/../../build/san/bin}
	LC=$BIN/sg-lastcluster
	MAN=$BATS_TEST_DIRNAME/../../man/sg-lastcluster.1
	D=$BATS_TEST_TMPDIR/store
	T=$BATS_TEST_TMPDIR
	unset STARGATE_LAST_CLUSTER_STORE STARGATE_LAST_CLUSTER_TTL
	unset STARGATE_LAST_CLUSTER_LOCAL_MAX_ENTRIES
	PIDS=()
}

teardown() {
	local p
	for p in "${PIDS[@]}"; do
		kill -9 "$p" 2>/dev/null || true
	done
	for p in "${PIDS[@]}"; do
		wait "$p" 2>/dev/null || true
	done
}

j() {
	jq -r "$1" <<<"$output"
}

now_ms() {
	date +%s%3N
}

# hexkey I: the generated key of index I.
hexkey() {
	printf 'lc:v1:%064x' "$1"
}

# records FROM TO [WRITTEN_MS]: load records for indexes FROM..TO-1.
records() {
	awk -v a="$1" -v b="$2" -v w="${3:-}" 'BEGIN {
		for (i = a; i < b; i++) {
			printf "{\"key\":\"lc:v1:%064x\",\"cluster_id\":\"v-%08x\"", i, i
			if (w != "")
				printf ",\"written_ms\":%s", w
			printf "}\n"
		}
	}'
}

# slow_records FROM TO EVERY: records with a 20 ms pause every EVERY lines.
slow_records() {
	awk -v a="$1" -v b="$2" -v e="$3" 'BEGIN {
		for (i = a; i < b; i++) {
			printf "{\"key\":\"lc:v1:%064x\",\"cluster_id\":\"v-%08x\"}\n", i, i
			if (i % e == e - 1) {
				fflush()
				system("sleep 0.02")
			}
		}
	}'
}

# keys FROM TO: generated keys, one per line.
keys() {
	awk -v a="$1" -v b="$2" 'BEGIN {
		for (i = a; i < b; i++) printf "lc:v1:%064x\n", i
	}'
}

# be64 N: N as 8 big-endian bytes.
be64() {
	local i s=""
	for ((i = 7; i >= 0; i--)); do
		s+=$(printf '\\x%02x' $(((${1} >> (8 * i)) & 255)))
	done
	printf "$s"
}

# lckey RK MODEL AFF: the store key, computed here with sha256sum(1).
lckey() {
	local LC_ALL=C
	local h
	h=$({
		be64 ${#1}; printf '%s' "$1"
		be64 ${#2}; printf '%s' "$2"
		be64 ${#3}; printf '%s' "$3"
	} | sha256sum | cut -d' ' -f1)
	printf 'lc:v1:%s\n' "$h"
}

# last_committed FILE: the last complete {"committed":N} line's N (or 0).
last_committed() {
	local n
	n=$(grep -oE '^\{"committed":[0-9]+\}$' "$1" 2>/dev/null | tail -n 1 |
	    tr -dc 0-9)
	echo "${n:-0}"
}

# --- usage, help, version ---------------------------------------------------

@test "--help prints usage on stdout and exits 0" {
	run -0 --separate-stderr "$LC" --help
	[[ $output == usage:\ sg-lastcluster* ]]
	[[ $output == *compact* ]]
	[ -z "$stderr" ]
}

@test "-h is --help" {
	run -0 --separate-stderr "$LC" -h
	[[ $output == usage:\ sg-lastcluster* ]]
}

@test "--version prints 'sg-lastcluster 0.1.0'" {
	run -0 --separate-stderr "$LC" --version
	[ "$output" = "sg-lastcluster 0.1.0" ]
}

@test "every long option and command in --help appears in the man page and back" {
	run -0 --separate-stderr "$LC" --help
	help=$output
	opts=$(grep -oE -- '--[a-z][a-z-]+' <<<"$help" | sort -u)
	[ -n "$opts" ]
	for o in $opts; do
		grep -q -- "Fl \\\\-${o#--}" "$MAN" || { echo "missing in man: $o"; false; }
	done
	mopts=$(grep -oE 'Fl \\-[a-z][a-z-]+' "$MAN" | sed 's/Fl \\-/--/' | sort -u)
	for o in $mopts; do
		grep -q -- "$o" <<<"$help" || { echo "missing in --help: $o"; false; }
	done
	for c in key get put del list stats compact dump load; do
		grep -q "^\.It Cm $c" "$MAN" || { echo "command $c not in man"; false; }
	done
}

@test "no command, an unknown command or option, or wrong operands exit 64" {
	run -64 --separate-stderr "$LC"
	[[ $stderr == *usage:* ]]
	run -64 --separate-stderr "$LC" frobnicate
	[[ $stderr == *"unknown command 'frobnicate'"* ]]
	run -64 --separate-stderr "$LC" --bogus stats
	run -64 --separate-stderr "$LC" key a b
	run -64 --separate-stderr "$LC" get
	run -64 --separate-stderr "$LC" put "$(hexkey 1)"
	run -64 --separate-stderr "$LC" del
	run -64 --separate-stderr "$LC" list extra
	run -64 --separate-stderr "$LC" -d "$D" load --bogus
	run -64 --separate-stderr "$LC" get --session a b
}

@test "bad option values exit 64 and name the option" {
	run -64 --separate-stderr "$LC" --ttl 10 stats
	[[ $stderr == *--ttl* ]]
	run -64 --separate-stderr "$LC" --ttl 0 stats
	run -64 --separate-stderr "$LC" --ttl -5s stats
	run -64 --separate-stderr "$LC" --max-entries 0 stats
	[[ $stderr == *--max-entries* ]]
	run -64 --separate-stderr "$LC" --max-entries 1e5 stats
	run -64 --separate-stderr "$LC" --map-size lots stats
	[[ $stderr == *--map-size* ]]
	run -64 --separate-stderr "$LC" --max-readers 0 stats
	run -64 --separate-stderr "$LC" -d "" stats
}

# --- environment ------------------------------------------------------------

@test "STARGATE_LAST_CLUSTER_STORE names the store; -d wins over it" {
	k=$(hexkey 1)
	STARGATE_LAST_CLUSTER_STORE=$D run -0 --separate-stderr "$LC" put "$k" c1
	run -0 --separate-stderr "$LC" -d "$D" get "$k"
	[ "$output" = c1 ]
	STARGATE_LAST_CLUSTER_STORE=$T/elsewhere run -0 --separate-stderr \
	    "$LC" -d "$D" get "$k"
	[ "$output" = c1 ]
	[ ! -e "$T/elsewhere" ]
}

@test "without -d or the environment the store is /var/lib/stargate/lastcluster" {
	[ -e /var/lib/stargate/lastcluster ] && skip "a default store exists here"
	run -66 --separate-stderr "$LC" get "$(hexkey 1)"
	[[ $stderr == *"/var/lib/stargate/lastcluster"* ]]
}

@test "STARGATE_LAST_CLUSTER_TTL sets the TTL; --ttl wins" {
	records 0 1 $(($(now_ms) - 120000)) | "$LC" -d "$D" load >/dev/null
	k=$(hexkey 0)
	run -0 --separate-stderr "$LC" -d "$D" get "$k"	# default 10m
	STARGATE_LAST_CLUSTER_TTL=1h run -0 --separate-stderr "$LC" -d "$D" get "$k"
	STARGATE_LAST_CLUSTER_TTL=1h run -1 --separate-stderr "$LC" -d "$D" \
	    --ttl 1m get "$k"
	STARGATE_LAST_CLUSTER_TTL=1m run -1 --separate-stderr "$LC" -d "$D" get "$k"
}

@test "STARGATE_LAST_CLUSTER_LOCAL_MAX_ENTRIES sets the capacity" {
	records 0 20 | STARGATE_LAST_CLUSTER_LOCAL_MAX_ENTRIES=10 \
	    "$LC" -d "$D" load >/dev/null
	run -0 --separate-stderr "$LC" -d "$D" stats
	[ "$(j .entries)" = 10 ]
}

@test "bad environment values exit 64 and name the variable" {
	STARGATE_LAST_CLUSTER_TTL=10 run -64 --separate-stderr "$LC" -d "$D" stats
	[[ $stderr == *STARGATE_LAST_CLUSTER_TTL* ]]
	STARGATE_LAST_CLUSTER_LOCAL_MAX_ENTRIES=-1 run -64 --separate-stderr \
	    "$LC" -d "$D" stats
	[[ $stderr == *STARGATE_LAST_CLUSTER_LOCAL_MAX_ENTRIES* ]]
}

@test "ENABLED and LOOKUP_TIMEOUT are checked too (one environment file for all)" {
	STARGATE_LAST_CLUSTER_ENABLED=yes run -64 --separate-stderr "$LC" -d "$D" stats
	[[ $stderr == *"STARGATE_LAST_CLUSTER_ENABLED: not a boolean: 'yes'"* ]]
	STARGATE_LAST_CLUSTER_LOOKUP_TIMEOUT=0 run -64 --separate-stderr "$LC" -d "$D" stats
	[[ $stderr == *STARGATE_LAST_CLUSTER_LOOKUP_TIMEOUT* ]]
	mkdir -p "$D"
	STARGATE_LAST_CLUSTER_ENABLED=true STARGATE_LAST_CLUSTER_LOOKUP_TIMEOUT=5ms \
	    run -0 --separate-stderr "$LC" -d "$D" put "$(hexkey 1)" c1
}

@test "a bad flag value names the flag (64)" {
	run -64 --separate-stderr "$LC" -d "$D" --ttl 10 stats
	[[ $stderr == *"--ttl: not a duration > 0: '10'"* ]]
	run -64 --separate-stderr "$LC" -d "$D" --max-entries 0 stats
	[[ $stderr == *"--max-entries: not an integer > 0: '0'"* ]]
}

@test "a rediss:// store is refused with 64 (no TLS), a bad Redis URL too" {
	run -64 --separate-stderr "$LC" -d rediss://127.0.0.1:6379/0 stats
	[[ $stderr == *TLS* ]]
	run -64 --separate-stderr "$LC" -d redis://127.0.0.1:6379/x stats
	[[ $stderr == *"database number"* ]]
	run -64 --separate-stderr "$LC" -d 'redis://:s3cret@h:1,h:2/0' stats
	[[ $stderr != *s3cret* ]]
}

@test "an unreachable redis:// store exits 69 (the tests of Redis itself: sg-lastcluster-redis.bats)" {
	local port
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	run -69 --separate-stderr "$LC" -d "redis://127.0.0.1:$port/0" stats
	[[ $stderr == *"127.0.0.1:$port"* ]]
}

# --- key --------------------------------------------------------------------

@test "key is lc:v1: + sha256 of the length-prefixed fields (checked with sha256sum)" {
	run -0 --separate-stderr "$LC" key fn-123 llama-3-70b conv-42
	[ "$output" = "$(lckey fn-123 llama-3-70b conv-42)" ]
	run -0 --separate-stderr "$LC" key "" model sess
	[ "$output" = "$(lckey "" model sess)" ]
	run -0 --separate-stderr "$LC" key tenant model $'s\xc3\xa9ss'
	[ "$output" = "$(lckey tenant model $'s\xc3\xa9ss')" ]
	# The length prefixes keep "ab"+"c" apart from "a"+"bc".
	[ "$("$LC" key ab c x)" != "$("$LC" key a bc x)" ]
}

# --- get, put ---------------------------------------------------------------

@test "put then get prints the cluster id and exits 0" {
	k=$(hexkey 7)
	run -0 --separate-stderr "$LC" -d "$D" put "$k" cluster-a
	[ -z "$output" ]
	run -0 --separate-stderr "$LC" -d "$D" get "$k"
	[ "$output" = cluster-a ]
	run -0 --separate-stderr "$LC" -d "$D" put "$k" "cluster b~"
	run -0 --separate-stderr "$LC" -d "$D" get "$k"
	[ "$output" = "cluster b~" ]
}

@test "get on a miss exits 1 and prints nothing" {
	"$LC" -d "$D" put "$(hexkey 1)" c1
	run -1 --separate-stderr "$LC" -d "$D" get "$(hexkey 2)"
	[ -z "$output" ]
	[ -z "$stderr" ]
}

@test "get --session hashes the session like key does" {
	k=$("$LC" key tenant model conv-1)
	"$LC" -d "$D" put "$k" c-session
	run -0 --separate-stderr "$LC" -d "$D" get --session tenant model conv-1
	[ "$output" = c-session ]
	run -1 --separate-stderr "$LC" -d "$D" get --session tenant model conv-2
}

@test "get of an expired entry exits 1, and the entry is deleted on sight" {
	records 0 1 $(($(now_ms) - 3600000)) | "$LC" -d "$D" load >/dev/null
	run -0 --separate-stderr "$LC" -d "$D" --ttl 2h get "$(hexkey 0)"
	[ "$output" = v-00000000 ]
	run -1 --separate-stderr "$LC" -d "$D" get "$(hexkey 0)"	# 10m
	run -1 --separate-stderr "$LC" -d "$D" --ttl 2h get "$(hexkey 0)"
	run -0 --separate-stderr "$LC" -d "$D" --ttl 2h stats
	[ "$(j .entries)" = 0 ]
}

@test "get --stdin answers one NDJSON line per key" {
	records 0 3 | "$LC" -d "$D" load >/dev/null
	run -0 --separate-stderr "$LC" -d "$D" get --stdin \
	    < <(hexkey 1; echo; hexkey 5; echo)
	[ "${#lines[@]}" -eq 2 ]
	[ "$(jq -r .cluster_id <<<"${lines[0]}")" = v-00000001 ]
	[ "$(jq -r .key <<<"${lines[0]}")" = "$(hexkey 1)" ]
	[ "$(jq -r .cluster_id <<<"${lines[1]}")" = null ]
}

@test "get --stdin reports a bad key with its line and exits 65" {
	records 0 3 | "$LC" -d "$D" load >/dev/null
	run -65 --separate-stderr "$LC" -d "$D" get --stdin \
	    < <(echo nope; hexkey 2; echo)
	[[ $stderr == *"<stdin>:1: bad key"* ]]
	[ "$(j .cluster_id)" = v-00000002 ]
}

@test "bad keys exit 65: get, put, del" {
	"$LC" -d "$D" put "$(hexkey 1)" c1
	upper=$(hexkey 1 | tr a-f A-F)
	run -65 --separate-stderr "$LC" -d "$D" get "${upper/LC:V1:/lc:v1:}"
	[[ $stderr == *"bad key"* ]]
	run -65 --separate-stderr "$LC" -d "$D" get tenant/session-1
	run -65 --separate-stderr "$LC" -d "$D" get "$(hexkey 1)0"
	run -65 --separate-stderr "$LC" -d "$D" put lc:v1:abc c1
	run -65 --separate-stderr "$LC" -d "$D" del lc:v2:"$(hexkey 1 | cut -c7-)"
}

@test "invalid cluster ids exit 65 and are not stored" {
	k=$(hexkey 3)
	run -65 --separate-stderr "$LC" -d "$D" put "$k" ""
	[[ $stderr == *"invalid cluster id"* ]]
	run -65 --separate-stderr "$LC" -d "$D" put "$k" "$(printf 'x%.0s' {1..257})"
	run -65 --separate-stderr "$LC" -d "$D" put "$k" $'a\tb'
	run -65 --separate-stderr "$LC" -d "$D" put "$k" $'caf\xc3\xa9'
	[ ! -e "$D" ]		# refused before the store was touched
	run -0 --separate-stderr "$LC" -d "$D" put "$k" "$(printf 'x%.0s' {1..256})"
	run -0 --separate-stderr "$LC" -d "$D" get "$k"
	[ "${#output}" -eq 256 ]
}

@test "put creates a missing store directory, parents included" {
	run -0 --separate-stderr "$LC" -d "$T/a/b/c" put "$(hexkey 1)" c1
	[ -f "$T/a/b/c/data.mdb" ]
	[ -f "$T/a/b/c/lock.mdb" ]
}

@test "--sync commits durably and reads back" {
	run -0 --separate-stderr "$LC" -d "$D" --sync put "$(hexkey 1)" c1
	run -0 --separate-stderr "$LC" -d "$D" --sync get "$(hexkey 1)"
	[ "$output" = c1 ]
}

# --- missing or unusable stores ---------------------------------------------

@test "read commands on a missing store exit 66 and create nothing" {
	k=$(hexkey 1)
	for cmd in "get $k" "del $k" list stats compact dump "get --stdin"; do
		run -66 --separate-stderr "$LC" -d "$D" $cmd </dev/null
		[[ $stderr == *"cannot open store"* ]]
	done
	[ ! -e "$D" ]
	mkdir "$D"
	run -66 --separate-stderr "$LC" -d "$D" get "$k"
	[ -z "$(ls -A "$D")" ]	# an empty directory stays empty
}

@test "a store path under a regular file: put exits 73, get exits 66" {
	: >"$T/file"
	run -73 --separate-stderr "$LC" -d "$T/file/store" put "$(hexkey 1)" c1
	[[ $stderr == *"cannot create store"* ]]
	run -66 --separate-stderr "$LC" -d "$T/file/store" get "$(hexkey 1)"
	run -73 --separate-stderr "$LC" -d "$T/file" load </dev/null
}

@test "a store where LMDB cannot create its lock file: put exits 73, get exits 66" {
	"$LC" -d "$D" put "$(hexkey 1)" c1
	rm "$D/lock.mdb"
	mkdir "$D/lock.mdb"		# EISDIR, even for root
	run -73 --separate-stderr "$LC" -d "$D" put "$(hexkey 2)" c2
	[[ $stderr == *"cannot open store"* ]]
	run -66 --separate-stderr "$LC" -d "$D" get "$(hexkey 1)"
}

@test "a data file that is not an LMDB store exits 74" {
	mkdir -p "$D"
	head -c 16384 /dev/urandom >"$D/data.mdb"
	run -74 --separate-stderr "$LC" -d "$D" get "$(hexkey 1)"
	[[ $stderr == *"cannot open store"* ]]
	run -74 --separate-stderr "$LC" -d "$D" put "$(hexkey 1)" c1
}

@test "no free reader slot exits 75 (temporary failure)" {
	k=$(hexkey 1)
	# The process that opens the store alone sizes the reader table.
	"$LC" -d "$D" --max-readers 1 put "$k" c1
	mkfifo "$T/in"
	"$LC" -d "$D" --max-readers 1 get --stdin <"$T/in" >"$T/out" 2>&1 3>&- &
	PIDS+=($!)
	exec 4>"$T/in"
	echo "$k" >&4
	for ((i = 0; i < 200; i++)); do
		[ -s "$T/out" ] && break
		sleep 0.05
	done
	grep -q '"cluster_id":"c1"' "$T/out"	# it holds the only slot
	run -75 --separate-stderr "$LC" -d "$D" get "$k"
	[[ $stderr == *MDB_READERS_FULL* ]]
	exec 4>&-
}

@test "a failed write to stdout exits 74" {
	"$LC" -d "$D" put "$(hexkey 1)" c1
	run -74 --separate-stderr sh -c "'$LC' -d '$D' stats >/dev/full"
	[[ $stderr == *"write error"* ]]
	run -74 --separate-stderr sh -c "'$LC' -d '$D' list >/dev/full"
	run -74 --separate-stderr sh -c "'$LC' -d '$D' get '$(hexkey 1)' >/dev/full"
	run -74 --separate-stderr sh -c "'$LC' key a b c >/dev/full"
}

# --- del, list, stats, dump, load -------------------------------------------

@test "del removes an entry (0), a second del finds nothing (1)" {
	records 0 2 | "$LC" -d "$D" load >/dev/null
	run -0 --separate-stderr "$LC" -d "$D" del "$(hexkey 0)"
	run -1 --separate-stderr "$LC" -d "$D" get "$(hexkey 0)"
	run -0 --separate-stderr "$LC" -d "$D" get "$(hexkey 1)"
	run -1 --separate-stderr "$LC" -d "$D" del "$(hexkey 0)"
}

@test "list prints key, cluster_id and age_ms, oldest first, without expired entries" {
	now=$(now_ms)
	{
		records 0 1 $((now - 7200000))	# expired
		records 1 2 $((now - 60000))
		records 2 3 $((now - 30000))
	} | "$LC" -d "$D" load >/dev/null
	run -0 --separate-stderr "$LC" -d "$D" list
	[ "${#lines[@]}" -eq 2 ]
	[ "$(jq -r .key <<<"${lines[0]}")" = "$(hexkey 1)" ]
	[ "$(jq -r .cluster_id <<<"${lines[0]}")" = v-00000001 ]
	[ "$(jq -r .key <<<"${lines[1]}")" = "$(hexkey 2)" ]
	age=$(jq -r .age_ms <<<"${lines[0]}")
	[ "$age" -ge 60000 ] && [ "$age" -lt 3600000 ]
	[ "$(jq -c 'keys' <<<"${lines[0]}")" = '["age_ms","cluster_id","key"]' ]
}

@test "stats reports entries, expired, oldest age, map size and use, reader slots" {
	now=$(now_ms)
	{
		records 0 3 $((now - 7200000))
		records 3 10 $((now - 1000))
	} | "$LC" -d "$D" load >/dev/null
	run -0 --separate-stderr "$LC" -d "$D" --max-entries 500 stats
	[ "$(j .backend)" = lmdb ]
	[ "$(j .entries)" = 10 ]
	[ "$(j .expired)" = 3 ]
	[ "$(j .oldest_age_ms)" -ge 7200000 ]
	[ "$(j .ttl_ms)" = 600000 ]
	[ "$(j .max_entries)" = 500 ]
	[ "$(j .map_size)" -ge "$(j .map_used)" ]
	[ "$(j .map_used)" -gt 0 ]
	[ "$(j .file_size)" -gt 0 ]
	[ "$(j .max_readers)" = 126 ]
	[ "$(j .readers_used)" -ge 0 ]
	[ "$(j .path)" = "$D" ]
	[ "${#lines[@]}" -eq 1 ]
}

@test "dump and load round-trip entries with their write times" {
	now=$(now_ms)
	records 0 50 $((now - 5000)) | "$LC" -d "$D" load >/dev/null
	records 50 100 | "$LC" -d "$D" load >/dev/null
	run -0 --separate-stderr "$LC" -d "$D" dump
	[ "${#lines[@]}" -eq 100 ]
	[ "$(jq -c 'keys' <<<"${lines[0]}")" = '["cluster_id","key","written_ms"]' ]
	[ "$(jq -r .written_ms <<<"${lines[0]}")" = $((now - 5000)) ]
	dump1=$output
	"$LC" -d "$T/copy" load <<<"$dump1" >/dev/null
	run -0 --separate-stderr "$LC" -d "$T/copy" dump
	[ "$output" = "$dump1" ]
}

@test "load skips bad records with their line numbers and exits 65" {
	run -65 --separate-stderr "$LC" -d "$D" load <<EOF
{"key":"$(hexkey 1)","cluster_id":"ok-1"}
{not json
[1,2]
{"key":"lc:v1:zz","cluster_id":"c"}
{"key":"$(hexkey 2)","cluster_id":""}
{"key":"$(hexkey 3)","key":"$(hexkey 4)","cluster_id":"c"}
{"key":"$(hexkey 5)","cluster_id":"c","written_ms":-1}

{"key":"$(hexkey 6)","cluster_id":"ok-6"}
EOF
	[ "$output" = '{"loaded":2,"skipped":6}' ]
	[[ $stderr == *"<stdin>:2:"* ]]
	[[ $stderr == *"<stdin>:3: not a JSON object"* ]]
	[[ $stderr == *"<stdin>:4: bad or missing \"key\""* ]]
	[[ $stderr == *"<stdin>:5: bad or missing \"cluster_id\""* ]]
	[[ $stderr == *"<stdin>:6:"* ]]
	[[ $stderr == *"<stdin>:7:"*written_ms* ]]
	run -0 --separate-stderr "$LC" -d "$D" get "$(hexkey 6)"
	[ "$output" = ok-6 ]
	run -1 --separate-stderr "$LC" -d "$D" get "$(hexkey 2)"
}

@test "load --progress prints committed counts up to the total" {
	run -0 --separate-stderr "$LC" -d "$D" load --progress < <(records 0 5000)
	[ "${lines[-1]}" = '{"loaded":5000,"skipped":0}' ]
	[ "${lines[-2]}" = '{"committed":5000}' ]
	prev=0
	for l in "${lines[@]:0:${#lines[@]}-1}"; do
		n=$(jq -r .committed <<<"$l")
		[ "$n" -ge "$prev" ]
		prev=$n
	done
}

# --- map size ---------------------------------------------------------------

@test "a full map is grown: --map-size 64k holds 20000 entries" {
	run -0 --separate-stderr "$LC" -d "$D" --map-size 64k load < <(records 0 20000)
	run -0 --separate-stderr "$LC" -d "$D" --map-size 64k stats
	[ "$(j .entries)" = 20000 ]
	[ "$(j .map_size)" -gt 65536 ]
	run -0 --separate-stderr "$LC" -d "$D" get "$(hexkey 19999)"
	[ "$output" = v-00004e1f ]
}

# --- capacity ---------------------------------------------------------------

@test "capacity: 150000 writes with --max-entries 100000 keep exactly the 100000 most recent" {
	run -0 --separate-stderr "$LC" -d "$D" --max-entries 100000 load \
	    < <(records 0 150000)
	run -0 --separate-stderr "$LC" -d "$D" --max-entries 100000 stats
	[ "$(j .entries)" = 100000 ]
	"$LC" -d "$D" dump | jq -r .key | sort >"$T/have"
	keys 50000 150000 | sort >"$T/want"
	cmp "$T/have" "$T/want"
}

# --- compaction -------------------------------------------------------------

@test "compact drops expired entries, prints what it did, and the file shrinks" {
	old=$(($(now_ms) - 300000))	# 5 minutes ago: alive at the default TTL
	records 0 50000 "$old" | "$LC" -d "$D" load >/dev/null
	records 50000 50010 | "$LC" -d "$D" load >/dev/null
	before=$(stat -c %s "$D/data.mdb")
	run -0 --separate-stderr "$LC" -d "$D" --ttl 1m compact
	[ "$(j .expired)" = 50000 ]
	[ "$(j .evicted)" = 0 ]
	[ "$(j .entries)" = 10 ]
	[ "$(j .swapped)" = true ]
	[ "$(j .bytes_before)" = "$before" ]
	after=$(stat -c %s "$D/data.mdb")
	[ "$(j .bytes_after)" = "$after" ]
	[ "$after" -lt $((before / 10)) ]
	run -0 --separate-stderr "$LC" -d "$D" get "$(hexkey 50005)"
	[ "$output" = v-0000c355 ]
	run -0 --separate-stderr mdb_stat -a "$D"
}

@test "compact enforces the capacity" {
	records 0 100 | "$LC" -d "$D" load >/dev/null
	run -0 --separate-stderr "$LC" -d "$D" --max-entries 10 compact
	[ "$(j .evicted)" = 90 ]
	[ "$(j .entries)" = 10 ]
	run -1 --separate-stderr "$LC" -d "$D" get "$(hexkey 89)"
	run -0 --separate-stderr "$LC" -d "$D" get "$(hexkey 90)"
}

@test "compaction under load: another process writes and reads, nothing committed is lost" {
	N=20000
	"$LC" -d "$D" put "$(hexkey 999999)" seed	# the store exists for the reader
	mkfifo "$T/win" "$T/rin"
	"$LC" -d "$D" load --progress <"$T/win" >"$T/prog" 2>"$T/werr" 3>&- &
	wpid=$!
	PIDS+=($wpid)
	slow_records 0 $N 200 >"$T/win" 3>&- &
	PIDS+=($!)
	"$LC" -d "$D" get --stdin <"$T/rin" >"$T/rout" 2>"$T/rerr" 3>&- &
	rpid=$!
	PIDS+=($rpid)
	awk -v n=$N 'BEGIN { for (r = 0; r < 4000; r++) {
		printf "lc:v1:%064x\n", (r * 7) % n
		if (r % 100 == 99) { fflush(); system("sleep 0.02") } } }' \
	    >"$T/rin" 3>&- &
	PIDS+=($!)
	compactions=0
	for ((i = 0; i < 2000; i++)); do
		kill -0 "$wpid" 2>/dev/null || break
		run -0 --separate-stderr "$LC" -d "$D" compact
		[ "$(j .swapped)" = true ]
		compactions=$((compactions + 1))
	done
	wait "$wpid"			# the writer exits 0
	wait "$rpid"			# so does the reader
	echo "# compactions: $compactions" >&3
	[ "$compactions" -ge 3 ]
	[ "$(last_committed "$T/prog")" = $N ]
	[ ! -s "$T/werr" ] && [ ! -s "$T/rerr" ]
	# Every committed write is there, with its value.
	"$LC" -d "$D" dump | jq -r 'select(.cluster_id != "seed") |
	    .key + " " + .cluster_id' | sort >"$T/have"
	keys 0 $N | awk '{ print $0 " v-" substr($0, length($0) - 7) }' |
	    sort >"$T/want"
	cmp "$T/have" "$T/want"
	# Every answer the reader got was right (a miss only before the write).
	[ "$(wc -l <"$T/rout")" -eq 4000 ]
	bad=$(jq -r 'select(.cluster_id != null and
	    .cluster_id != ("v-" + .key[-8:])) | .key' "$T/rout" | wc -l)
	[ "$bad" -eq 0 ]
	hits=$(jq -r 'select(.cluster_id != null) | .key' "$T/rout" | wc -l)
	[ "$hits" -gt 0 ]
	run -0 --separate-stderr "$LC" -d "$D" stats
	[ "$(j .generation)" -ge "$compactions" ]
}

@test "compaction under load: three writers and two compactors at once lose nothing" {
	# Regression: a process opening the store during a swap once
	# committed into the replaced file and rolled another writer back.
	"$LC" -d "$D" put "$(hexkey 999999999)" seed
	pids=()
	for w in 0 1 2; do
		awk -v a=$((w * 100000)) -v b=$((w * 100000 + 20000)) 'BEGIN {
			for (i = a; i < b; i++) {
				printf "{\"key\":\"lc:v1:%064x\",\"cluster_id\":\"v-%08x\"}\n", i, i
				if (i % 2000 == 1999) { fflush(); system("sleep 0.01") }
			} }' | "$LC" -d "$D" --max-entries 1000000 load --progress \
		    >"$T/p$w" 2>"$T/e$w" 3>&- &
		pids+=($!)
		PIDS+=($!)
	done
	for c in 0 1; do
		(for ((i = 0; i < 2000; i++)); do
			[ -e "$T/stop" ] && break
			"$LC" -d "$D" --max-entries 1000000 compact >/dev/null ||
			    echo "compact failed" >>"$T/cerr"
		done) 3>&- &
		PIDS+=($!)
	done
	for p in "${pids[@]}"; do
		wait "$p"		# every writer exits 0
	done
	touch "$T/stop"
	wait
	[ ! -s "$T/cerr" ]
	for w in 0 1 2; do
		[ "$(last_committed "$T/p$w")" = 20000 ]
	done
	"$LC" -d "$D" --max-entries 1000000 dump | jq -r 'select(.cluster_id !=
	    "seed") | .key + " " + .cluster_id' | sort >"$T/have"
	{ keys 0 20000; keys 100000 120000; keys 200000 220000; } |
	    awk '{ print $0 " v-" substr($0, length($0) - 7) }' | sort >"$T/want"
	cmp "$T/have" "$T/want"
	run -0 --separate-stderr "$LC" -d "$D" stats
	[ "$(j .generation)" -ge 2 ]
}

# --- several processes, crashes ---------------------------------------------

@test "two processes: a write by one is visible to a lookup by the other" {
	"$LC" -d "$D" put "$(hexkey 1)" c1
	mkfifo "$T/in"
	"$LC" -d "$D" get --stdin <"$T/in" >"$T/out" 2>&1 3>&- &
	PIDS+=($!)
	exec 4>"$T/in"
	hexkey 2 >&4; echo >&4
	for ((i = 0; i < 200; i++)); do
		[ "$(wc -l <"$T/out")" -ge 1 ] && break
		sleep 0.05
	done
	[ "$(sed -n 1p "$T/out" | jq -r .cluster_id)" = null ]
	"$LC" -d "$D" put "$(hexkey 2)" written-by-another-process
	hexkey 2 >&4; echo >&4
	for ((i = 0; i < 200; i++)); do
		[ "$(wc -l <"$T/out")" -ge 2 ] && break
		sleep 0.05
	done
	exec 4>&-
	[ "$(sed -n 2p "$T/out" | jq -r .cluster_id)" = written-by-another-process ]
}

@test "crash safety: a writer killed with kill -9 mid-stream loses nothing it reported committed" {
	mkfifo "$T/in"
	"$LC" -d "$D" load --progress <"$T/in" >"$T/prog" 2>"$T/err" 3>&- &
	wpid=$!
	PIDS+=($wpid)
	slow_records 0 100000 100 >"$T/in" 3>&- &
	PIDS+=($!)
	for ((i = 0; i < 400; i++)); do
		[ "$(last_committed "$T/prog")" -ge 3000 ] && break
		sleep 0.05
	done
	kill -9 "$wpid"
	wait "$wpid" || true
	K=$(last_committed "$T/prog")
	echo "# killed after $K committed" >&3
	[ "$K" -ge 3000 ] && [ "$K" -lt 100000 ]	# really mid-stream
	# The store opens and walks cleanly.
	run -0 --separate-stderr mdb_stat -a "$D"
	[[ $output == *lc1* ]]
	run -0 --separate-stderr "$LC" -d "$D" stats
	entries=$(j .entries)
	[ "$entries" -ge "$K" ]
	# Every entry it reports is readable, with the value that was written.
	"$LC" -d "$D" dump >"$T/dump"
	[ "$(wc -l <"$T/dump")" -eq "$entries" ]
	jq -r .key "$T/dump" | "$LC" -d "$D" get --stdin >"$T/got"
	[ "$(wc -l <"$T/got")" -eq "$entries" ]
	[ "$(jq -r 'select(.cluster_id != ("v-" + .key[-8:])) | .key' "$T/got" |
	    wc -l)" -eq 0 ]
	# No write reported committed is missing.
	keys 0 "$K" | "$LC" -d "$D" get --stdin >"$T/committed"
	[ "$(wc -l <"$T/committed")" -eq "$K" ]
	[ "$(jq -r 'select(.cluster_id != ("v-" + .key[-8:])) | .key' \
	    "$T/committed" | wc -l)" -eq 0 ]
}

# start_reader N: a long-lived "get --stdin" fed from fifo $T/inN (fd 4+N),
# answering into $T/outN, after it answered one lookup; sets RPID.
start_reader() {
	mkfifo "$T/in$1"
	"$LC" -d "$D" get --stdin <"$T/in$1" >"$T/out$1" 2>&1 3>&- &
	RPID=$!
	PIDS+=($RPID)
	eval "exec $((4 + $1))>\"\$T/in$1\""
	echo "$k" >&$((4 + $1))
	for ((i = 0; i < 200; i++)); do
		[ -s "$T/out$1" ] && break
		sleep 0.05
	done
	[ -s "$T/out$1" ]
}

@test "a reader killed with kill -9 leaves a slot that the next open clears" {
	k=$(hexkey 1)
	"$LC" -d "$D" put "$k" c1
	# A second reader keeps the store open: a process that opens it
	# alone resets the whole reader table instead.
	start_reader 1
	start_reader 2
	victim=$RPID
	kill -9 "$victim"
	wait "$victim" 2>/dev/null || true
	run -0 --separate-stderr "$LC" -d "$D" stats
	[ "$(j .stale_readers_cleared)" -ge 1 ]
	exec 5>&- 6>&-
}

# --- privacy ----------------------------------------------------------------

@test "raw routing keys, models and affinity keys never reach the store files" {
	k=$("$LC" key RAWROUTINGKEY-7f3a RAWMODEL-9c1d RAWAFFINITY-5e2b)
	"$LC" -d "$D" put "$k" cluster-visible-xyz
	run -0 --separate-stderr "$LC" -d "$D" get --session \
	    RAWROUTINGKEY-7f3a RAWMODEL-9c1d RAWAFFINITY-5e2b
	[ "$output" = cluster-visible-xyz ]
	"$LC" -d "$D" compact >/dev/null
	"$LC" -d "$D" get --session RAWROUTINGKEY-7f3a RAWMODEL-9c1d RAWAFFINITY-5e2b
	# The grep can see what is there (the cluster id)...
	grep -a -q cluster-visible-xyz "$D/data.mdb"
	# ...and none of the raw fields, in any file of the store.
	for f in "$D"/*; do
		! grep -a -q RAWROUTINGKEY "$f"
		! grep -a -q RAWMODEL "$f"
		! grep -a -q RAWAFFINITY "$f"
		! grep -a -q "${k#lc:v1:}" "$f"	# not even the hex key
	done
}

# --- deployment files -------------------------------------------------------

@test "deploy: the timer, the service and the cron line run compact every 5 minutes" {
	DEP=$BATS_TEST_DIRNAME/../../tools/deploy
	grep -qx 'OnCalendar=\*:0/5' "$DEP/sg-lastcluster-compact.timer"
	grep -qx 'ExecStart=/usr/local/bin/sg-lastcluster compact' \
	    "$DEP/sg-lastcluster-compact.service"
	grep -qx 'EnvironmentFile=-/etc/stargate/lastcluster.env' \
	    "$DEP/sg-lastcluster-compact.service"
	[ "$(grep -cE '^STARGATE_LAST_CLUSTER_(ENABLED|STORE|TTL|LOOKUP_TIMEOUT|LOCAL_MAX_ENTRIES)=' \
	    "$DEP/lastcluster.env")" -eq 5 ]
	# Run the cron line itself on a test store, with the example
	# environment file (its STORE pointed at the test store).
	line=$(grep -E '^\*/5 \* \* \* \* stargate ' "$DEP/sg-lastcluster-compact.cron")
	cmd=${line#'*/5 * * * * stargate '}
	sed "s|^STARGATE_LAST_CLUSTER_STORE=.*|STARGATE_LAST_CLUSTER_STORE=$D|" \
	    "$DEP/lastcluster.env" >"$T/env"
	cmd=${cmd//\/etc\/stargate\/lastcluster.env/$T/env}
	cmd=${cmd//\/usr\/local\/bin\/sg-lastcluster/$LC}
	records 0 10 $(($(now_ms) - 3600000)) | "$LC" -d "$D" load >/dev/null
	run -0 --separate-stderr sh -c "$cmd"
	run -0 --separate-stderr "$LC" -d "$D" stats
	[ "$(j .entries)" = 0 ]		# the expired entries were dropped
	[ "$(j .generation)" = 1 ]	# and the copy was swapped in
}
