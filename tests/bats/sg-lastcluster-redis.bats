#!/usr/bin/env bats
# sg-lastcluster(1) on Redis: every command against redis://,
# redis+sentinel:// and redis+cluster:// stores, with the same outputs and
# exit codes as against an LMDB directory where the command applies (one
# script runs against both and the transcripts are compared), and what is
# Redis's own: stats, compact, SET ... PX, SCAN never KEYS, AUTH and the
# password kept out of every message, and a Redis that is absent or
# stopped (kill -STOP) failing with 69 instead of hanging.
#
# Real redis-server processes on 127.0.0.1, on free ports, started per test
# and killed by pid in teardown.  Skipped without redis-server.

bats_require_minimum_version 1.5.0

setup() {
	BIN=${SG_BINDIR:-$BATS_TEST_DIRNAME/../../build/san/bin}
	LC=$BIN/sg-lastcluster
	MAN=$BATS_TEST_DIRNAME/../../man/sg-lastcluster.1
	T=$BATS_TEST_TMPDIR
	D=$T/lmdb
	unset STARGATE_LAST_CLUSTER_STORE STARGATE_LAST_CLUSTER_TTL
	unset STARGATE_LAST_CLUSTER_LOCAL_MAX_ENTRIES
	PIDS=()
	command -v redis-server >/dev/null && command -v redis-cli >/dev/null ||
	    skip "redis-server is not installed"
}

teardown() {
	local p
	for p in "${PIDS[@]}"; do
		kill -CONT "$p" 2>/dev/null || true
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

hexkey() {
	printf 'lc:v1:%064x' "$1"
}

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

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# A free port whose cluster bus port (+10000) is free too.
cluster_port() {
	python3 -c '
import socket, random
def free(p):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p)); return True
    except OSError:
        return False
    finally:
        s.close()
for _ in range(200):
    p = random.randint(20000, 50000)
    if free(p) and free(p + 10000):
        print(p); break'
}

# redis_up PORT: wait (bounded) until the server answers PING.
redis_up() {
	local i
	for ((i = 0; i < 500; i++)); do
		redis-cli -p "$1" ping 2>/dev/null | grep -qE 'PONG|NOAUTH' &&
		    return 0
		sleep 0.01
	done
	return 1
}

# start_redis NAME [ARGS...]: a server in $T/NAME; sets PORT_NAME, PID_NAME.
start_redis() {
	local name=$1 port
	shift
	port=${PORT:-$(free_port)}
	mkdir -p "$T/$name"
	redis-server ${CONF:+"$CONF"} --port "$port" --bind 127.0.0.1 \
	    --dir "$T/$name" --save '' --appendonly no --daemonize no \
	    --logfile redis.log "$@" >/dev/null 2>&1 &
	PIDS+=($!)
	printf -v "PID_$name" %s $!
	printf -v "PORT_$name" %s "$port"
	redis_up "$port"
}

single() {
	start_redis r
	URL=redis://127.0.0.1:$PORT_r/4
}

sentinel() {
	start_redis p
	mkdir -p "$T/s"
	printf 'sentinel monitor sgm 127.0.0.1 %s 1\n' "$PORT_p" >"$T/s/s.conf"
	CONF=$T/s/s.conf start_redis s --sentinel
	URL=redis+sentinel://127.0.0.1:$PORT_s/sgm/2
}

cluster() {
	local i hosts=""
	for i in 1 2 3; do
		PORT=$(cluster_port) start_redis "c$i" --cluster-enabled yes \
		    --cluster-config-file nodes.conf --cluster-node-timeout 2000
		eval "hosts+=\" 127.0.0.1:\$PORT_c$i\""
	done
	redis-cli --cluster create $hosts --cluster-yes >/dev/null 2>&1 </dev/null
	for i in 1 2 3; do
		local p
		eval "p=\$PORT_c$i"
		for ((n = 0; n < 500; n++)); do
			redis-cli -p "$p" cluster info | grep -q cluster_state:ok &&
			    break
			sleep 0.02
		done
	done
	URL=redis+cluster://127.0.0.1:$PORT_c1,127.0.0.1:$PORT_c2
}

# transcript STORE: the same commands, with exit codes, against STORE; ages
# (which differ by the milliseconds each run takes) left out.
transcript() {
	local s=$1 k1 k2 w=$(($(now_ms) - 5000))
	k1=$(hexkey 1)
	k2=$(hexkey 2)
	{
		"$LC" -d "$s" put "$k1" cluster-a; echo "put $?"
		"$LC" -d "$s" get "$k1"; echo "get $?"
		"$LC" -d "$s" put "$k1" "cluster b~"; echo "put $?"
		"$LC" -d "$s" get "$k1"; echo "get $?"
		"$LC" -d "$s" get "$k2"; echo "miss $?"
		"$LC" -d "$s" put "$("$LC" key t m conv)" c-s; echo "put $?"
		"$LC" -d "$s" get --session t m conv; echo "session $?"
		"$LC" -d "$s" get --session t m other; echo "session-miss $?"
		"$LC" -d "$s" put nope c 2>&1; echo "badkey $?"
		"$LC" -d "$s" put "$k2" "$(printf 'a\tb')" 2>&1; echo "badid $?"
		records 10 40 "$w" | "$LC" -d "$s" load; echo "load $?"
		{ records 40 42; echo '{bad'; } | "$LC" -d "$s" load 2>&1
		echo "load-bad $?"
		records 50 52 $((w - 3600000)) | "$LC" -d "$s" load; echo "old $?"
		{ hexkey 10; echo nope; hexkey 99; } |
		    "$LC" -d "$s" get --stdin 2>&1; echo "stdin $?"
		"$LC" -d "$s" del "$k1"; echo "del $?"
		"$LC" -d "$s" del "$k1"; echo "del-again $?"
		"$LC" -d "$s" get "$(hexkey 50)"; echo "expired $?"
		"$LC" -d "$s" list | jq -c 'del(.age_ms)' | sort; echo "list $?"
		"$LC" -d "$s" dump | jq -c 'select(.key >= "lc:v1:00") |
		    select(.cluster_id | startswith("v-"))' |
		    jq -sc 'map(select(.written_ms == '"$w"')) | length'
		echo "dump $?"
	} 2>&1
}

compare_with_lmdb() {
	local want got
	want=$(transcript "$D")
	got=$(transcript "$URL")
	if [ "$want" != "$got" ]; then
		diff <(echo "$want") <(echo "$got") >&2
		return 1
	fi
	[[ $got == *"put 0"* && $got == *"miss 1"* && $got == *"del-again 1"* ]]
}

@test "redis://: every command has LMDB's output and exit code" {
	single
	compare_with_lmdb
}

@test "redis+sentinel://: every command has LMDB's output and exit code" {
	sentinel
	compare_with_lmdb
	# The data is in the primary the sentinel names, in database 2.
	[ "$(redis-cli -p "$PORT_p" -n 2 exists "$(hexkey 10)")" = 1 ]
}

@test "redis+cluster://: every command has LMDB's output and exit code, keys on all three primaries" {
	cluster
	compare_with_lmdb
	for i in 1 2 3; do
		eval "p=\$PORT_c$i"
		[ "$(redis-cli -p "$p" dbsize)" -gt 0 ]
	done
	run -0 --separate-stderr "$LC" -d "$URL" stats
	[ "$(j .nodes)" = 3 ]
	[ "$(j .entries)" -ge 30 ]
}

@test "dump from LMDB loads into Redis and dumps back the same" {
	single
	records 0 100 $(($(now_ms) - 1000)) | "$LC" -d "$D" load >/dev/null
	"$LC" -d "$D" dump >"$T/lmdb.ndjson"
	run -0 --separate-stderr "$LC" -d "$URL" load <"$T/lmdb.ndjson"
	[ "$output" = '{"loaded":100,"skipped":0}' ]
	run -0 --separate-stderr "$LC" -d "$URL" dump
	[ "$output" = "$(cat "$T/lmdb.ndjson")" ]
}

@test "values are SET with PX (the time left) and readable with redis-cli" {
	single
	k=$(hexkey 3)
	run -0 "$LC" -d "$URL" --ttl 90s put "$k" B
	v=$(redis-cli -p "$PORT_r" -n 4 get "$k")
	[[ $v =~ ^[0-9]+:B$ ]]
	t=$(redis-cli -p "$PORT_r" -n 4 pttl "$k")
	[ "$t" -gt 80000 ] && [ "$t" -le 90000 ]
	# A record already older than the TTL is not written at all.
	records 5 6 $(($(now_ms) - 700000)) | "$LC" -d "$URL" load >/dev/null
	[ "$(redis-cli -p "$PORT_r" -n 4 exists "$(hexkey 5)")" = 0 ]
}

@test "list and dump use SCAN, never KEYS" {
	single
	records 0 2500 | "$LC" -d "$URL" load >/dev/null
	redis-cli -p "$PORT_r" config resetstat >/dev/null
	run -0 --separate-stderr "$LC" -d "$URL" list
	[ "${#lines[@]}" -eq 2500 ]
	stats=$(redis-cli -p "$PORT_r" info commandstats)
	[[ $stats == *cmdstat_scan:* ]]
	[[ $stats != *cmdstat_keys:* ]]
}

@test "stats on Redis: entries, expired, oldest age, memory, policy, nodes" {
	single
	redis-cli -p "$PORT_r" config set maxmemory-policy allkeys-lru >/dev/null
	now=$(now_ms)
	{
		records 0 3 $((now - 7200000))	# past the TTL: never written
		records 3 10 $((now - 1000))
	} | "$LC" -d "$URL" load >/dev/null
	run -0 --separate-stderr "$LC" -d "$URL" stats
	[ "$(j .backend)" = redis ]
	[ "$(j .entries)" = 7 ]
	[ "$(j .expired)" = 0 ]
	[ "$(j .oldest_age_ms)" -ge 1000 ]
	[ "$(j .ttl_ms)" = 600000 ]
	[ "$(j .used_memory)" -gt 0 ]
	[ "$(j .maxmemory_policy)" = allkeys-lru ]
	[ "$(j .nodes)" = 1 ]
	[ "$(j .path)" = "$URL" ]
	[ "${#lines[@]}" -eq 1 ]
}

@test "compact on Redis says Redis expires entries itself and exits 0" {
	run -0 --separate-stderr "$LC" -d redis://127.0.0.1:1/0 compact
	[ -z "$output" ]
	[[ $stderr == *"Redis expires entries itself"* ]]
}

@test "STARGATE_LAST_CLUSTER_STORE names a Redis store; -d wins over it" {
	single
	export STARGATE_LAST_CLUSTER_STORE=$URL
	run -0 "$LC" put "$(hexkey 1)" env-c
	[ "$(redis-cli -p "$PORT_r" -n 4 dbsize)" = 1 ]
	run -0 "$LC" -d "$D" put "$(hexkey 1)" dir-c
	[ "$(redis-cli -p "$PORT_r" -n 4 dbsize)" = 1 ]
	run -0 --separate-stderr "$LC" get "$(hexkey 1)"
	[ "$output" = env-c ]
}

@test "AUTH: user and password from the URL; a wrong password never shows in a message" {
	start_redis a --requirepass 's3cr:t'
	u="redis://default:s3cr%3At@127.0.0.1:$PORT_a/0"
	run -0 --separate-stderr "$LC" -d "$u" put "$(hexkey 1)" c
	run -0 --separate-stderr "$LC" -d "$u" get "$(hexkey 1)"
	[ "$output" = c ]
	run -0 --separate-stderr "$LC" -d "$u" stats
	[ "$(j .path)" = "redis://default:***@127.0.0.1:$PORT_a/0" ]
	[[ $output != *s3cr* ]]
	run -66 --separate-stderr "$LC" -d "redis://:hunter2@127.0.0.1:$PORT_a/0" \
	    get "$(hexkey 1)"
	[[ $stderr == *WRONGPASS* || $stderr == *invalid* ]]
	[[ $stderr != *hunter2* ]]
}

@test "an absent Redis exits 69 at once; a stopped one (kill -STOP) exits 69 after the timeout" {
	port=$(free_port)
	run -69 --separate-stderr "$LC" -d "redis://127.0.0.1:$port/0" get "$(hexkey 1)"
	[[ $stderr == *"127.0.0.1:$port"* ]]
	single
	"$LC" -d "$URL" put "$(hexkey 1)" c
	kill -STOP "$PID_r"
	run -69 --separate-stderr timeout 30 "$LC" -d "$URL" get "$(hexkey 1)"
	[[ $stderr == *"timed out"* ]]
	kill -CONT "$PID_r"
	run -0 --separate-stderr "$LC" -d "$URL" get "$(hexkey 1)"
	[ "$output" = c ]
}

@test "load --progress on Redis counts every committed record" {
	single
	run -0 --separate-stderr "$LC" -d "$URL" load --progress < <(records 0 300)
	[ "${lines[-1]}" = '{"loaded":300,"skipped":0}' ]
	[ "${lines[-2]}" = '{"committed":300}' ]
}

@test "the man page documents the Redis forms, allkeys-lru, failover and sizing" {
	grep -q 'redis+sentinel://' "$MAN"
	grep -q 'redis+cluster://' "$MAN"
	grep -q 'allkeys-lru' "$MAN"
	grep -qi 'failover' "$MAN"
	grep -qi 'sizing' "$MAN"
}
