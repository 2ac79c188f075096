#!/usr/bin/env bats
# hardening-store.bats — the LMDB last-cluster store on a full filesystem
# and with a damaged data.mdb (issue 12, "Found by probing"): a full disk
# and a damaged file are errors (sg-lastcluster exit 74 and a message that
# says how to recover), never a signal, in every program.
#
# A full filesystem is a 256 KiB tmpfs, mounted in a private mount
# namespace (unshare -m as root, else unshare -rm: a user namespace) so
# that nothing outside the test sees it, and filled with one file.  The
# command under test runs in that namespace; a daemon started there is
# reached from outside through /proc/PID/root.

bats_require_minimum_version 1.5.0

load proxy_helpers

setup() {
	proxy_setup
	LC=$BIN/sg-lastcluster
	FS=$T/fs
	mkdir -p "$FS"
	NS=(unshare -m)
	[ "$(id -u)" = 0 ] || NS=(unshare -rm)
}

teardown() {
	proxy_teardown
}

hexkey() {
	printf 'lc:v1:%064x' "$1"
}

# need_ns: skip (with the reason) where no private tmpfs can be mounted.
need_ns() {
	"${NS[@]}" sh -c "mount -t tmpfs -o size=256k tmpfs '$FS'" \
	    2>"$T/ns.err" ||
	    skip "cannot mount a tmpfs in a private namespace: $(cat "$T/ns.err")"
}

# full_fs CMD...: run CMD with a 256 KiB tmpfs on $FS, where $PREP (a shell
# command, optional) ran first and a file then took all the free space.
full_fs() {
	"${NS[@]}" sh -c '
	    mount -t tmpfs -o size=256k tmpfs "$0" || exit 99
	    if [ -n "$PREP" ]; then sh -c "$PREP" || exit 98; fi
	    cat /dev/zero >"$0/fill" 2>/dev/null
	    exec "$@"' "$FS" "$@"
}

# A store of N entries made by load.
make_store() {
	local dir=$1 n=$2 now i
	now=$(($(date +%s) * 1000))
	for ((i = 1; i <= n; i++)); do
		printf '{"key":"%s","cluster_id":"c%d","written_ms":%d}\n' \
		    "$(hexkey "$i")" "$i" "$now"
	done | "$LC" -d "$dir" load >/dev/null
}

# refused CMD...: exit 74, no signal, the message says what and how out.
refused() {
	run -74 --separate-stderr "$@"
	[[ $stderr == *"data.mdb is damaged"* ]] || { echo "$stderr"; return 1; }
	[[ $stderr == *"hints only"* ]]
	[[ $stderr == *"sg-lastcluster load from a dump"* ]]
}

# every_command DIR: each command on the damaged store DIR is refused.
every_command() {
	local d=$1
	refused "$LC" -d "$d" stats
	refused "$LC" -d "$d" list
	refused "$LC" -d "$d" dump
	refused "$LC" -d "$d" get "$(hexkey 5)"
	refused "$LC" -d "$d" put "$(hexkey 5)" cx
	refused "$LC" -d "$d" del "$(hexkey 5)"
	refused "$LC" -d "$d" compact
	refused "$LC" -d "$d" load </dev/null
}

# --- full filesystem ---------------------------------------------------------

@test "full disk: sg-lastcluster put creating a store exits 74 with a message, not SIGBUS" {
	need_ns
	run -74 --separate-stderr full_fs "$LC" -d "$FS/store" put "$(hexkey 1)" c1
	[[ $stderr == *"No space left on device"* ]]
	[[ $stderr == "sg-lastcluster: "* ]]
}

@test "full disk: get on a store whose lock.mdb must be created exits 74, not SIGBUS" {
	need_ns
	PREP="'$LC' -d '$FS/store' put $(hexkey 1) c1 && rm '$FS/store/lock.mdb'" \
	    run -74 --separate-stderr full_fs "$LC" -d "$FS/store" get "$(hexkey 1)"
	[[ $stderr == *"lock.mdb"*"No space left on device"* ]]
}

@test "full disk: put and load into an existing store exit 74 with a message" {
	need_ns
	PREP="'$LC' -d '$FS/store' put $(hexkey 1) c1" \
	    run -74 --separate-stderr full_fs sh -c '
	    for i in $(seq 2 40); do
		"$0" -d "$1" put "$(printf "lc:v1:%064x" "$i")" c || exit $?
	    done' "$LC" "$FS/store"
	[[ $stderr == *"No space left on device"* ]]
}

@test "full disk: sg-proxy whose store fills up while it runs keeps routing and counts the failed writes" {
	need_ns
	local i ok=0
	start_engine A -c 4 -t 4 --decode-tps 1000
	clusters A
	lb_simple power-of-n
	# the proxy in its own namespace, with a tmpfs that has room yet
	printf '#!/bin/sh\nexec %s sh -c %s "%s" "%s" "$@"\n' "${NS[*]}" \
	    "'mount -t tmpfs -o size=256k tmpfs \"\$0\" || exit 99; exec \"\$@\"'" \
	    "$FS" "$BIN/sg-proxy" >"$T/proxy-ns"
	chmod +x "$T/proxy-ns"
	PROXY=$T/proxy-ns
	start_role proxy-all all --clusters "$T/clusters.json" \
	    --lb-config "$T/lb.json" --last-cluster true \
	    --last-cluster-store "$FS/store"
	GW_URL=$ROLE_URL
	[ -e "/proc/$ROLE_PID/root$FS/store/data.mdb" ]
	cat /dev/zero >"/proc/$ROLE_PID/root$FS/fill" 2>/dev/null || true
	for i in $(seq 1 30); do
		creq "$(cbody acme/dummy-model "{\"prompt_cache_key\": \"full-$i\"}")"
		[ "$STATUS" = 200 ] && ok=$((ok + 1))
	done
	[ "$ok" = 30 ]
	alive "$ROLE_PID"
	wait_for 50 0.1 bash -c "[ \"\$(curl -s --max-time 2 $GW_URL/metrics |
	    awk '/^llm_api_gateway_last_cluster_writes_total\\{.*result=\"error\"/ { s += \$NF }
	    END { print s + 0 }')\" -ge 1 ]"
	creq "$(cbody acme/dummy-model '{"prompt_cache_key": "full-after"}')"
	[ "$STATUS" = 200 ]
}

@test "full disk: sg-proxy starting with its store on a full disk says so and exits without a signal" {
	need_ns
	start_engine A
	clusters A
	run --separate-stderr full_fs "$BIN/sg-proxy" --role all \
	    --listen 127.0.0.1:0 --clusters "$T/clusters.json" \
	    --last-cluster true --last-cluster-store "$FS/store"
	[ "$status" -ne 0 ] && [ "$status" -lt 128 ]
	[[ $stderr == *"No space left on device"* ]]
	! grep -qE 'AddressSanitizer|runtime error:' <<<"$stderr"
}

# --- a damaged data.mdb --------------------------------------------------------

@test "damaged: data.mdb cut to half its size: stats, list, dump, get, put, del, compact and load exit 74 with the way to recover" {
	make_store "$T/s" 3000
	truncate -s $(($(stat -c %s "$T/s/data.mdb") / 2)) "$T/s/data.mdb"
	every_command "$T/s"
	[[ $stderr == *"shorter than its last page"* ]]
}

@test "damaged: data.mdb cut to a few pages: every command exits 74 with the way to recover" {
	make_store "$T/s" 3000
	truncate -s 16384 "$T/s/data.mdb"
	every_command "$T/s"
}

@test "damaged: a meta page that does not check out: every command exits 74" {
	make_store "$T/s" 100
	# the second meta page's magic number
	printf 'XXXXXXXX' | dd of="$T/s/data.mdb" bs=1 seek=$((4096 + 16)) \
	    conv=notrunc 2>/dev/null
	every_command "$T/s"
	[[ $stderr == *"bad second meta page"* ]]
}

@test "damaged: compact on a damaged store exits 74, not 70" {
	make_store "$T/s" 3000
	truncate -s 16384 "$T/s/data.mdb"
	run -74 --separate-stderr "$LC" -d "$T/s" compact
}

@test "damaged: deleting the store directory recovers (it holds hints only); dump and load rebuild one" {
	make_store "$T/s" 50
	"$LC" -d "$T/s" dump >"$T/saved.ndjson"
	truncate -s 8192 "$T/s/data.mdb"
	refused "$LC" -d "$T/s" list
	rm -rf "$T/s"
	"$LC" -d "$T/s" load <"$T/saved.ndjson"
	[ "$("$LC" -d "$T/s" get "$(hexkey 7)")" = c7 ]
}

@test "damaged: sg-proxy with a truncated store says how to recover and exits without a signal" {
	make_store "$T/s" 3000
	truncate -s 16384 "$T/s/data.mdb"
	start_engine A
	clusters A
	run --separate-stderr "$BIN/sg-proxy" --role all --listen 127.0.0.1:0 \
	    --clusters "$T/clusters.json" --last-cluster true \
	    --last-cluster-store "$T/s"
	[ "$status" -ne 0 ] && [ "$status" -lt 128 ]
	[[ $stderr == *"data.mdb is damaged"* ]]
}
