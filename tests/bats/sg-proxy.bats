#!/usr/bin/env bats
# sg-proxy(8): program conventions — help, version, usage errors (64),
# missing files (66), bad configuration (78, naming the field), --check,
# the roles and the gateway's settings (last-cluster flags and variables,
# --api-keys), the listening address (port 0 + --port-file,
# the first stdout line, 69 when the port is taken), --pid-file and a
# clean stop.  Routing behaviour is in tests/e2e/proxy-*.bats.

bats_require_minimum_version 1.5.0

setup() {
	BIN=${SG_BINDIR:-$BATS_TEST_DIRNAME/../../build/san/bin}
	PROXY=$BIN/sg-proxy
	MAN=$BATS_TEST_DIRNAME/../../man/sg-proxy.8
	LBF=$BATS_TEST_DIRNAME/../fixtures/lbconf
	PF=$BATS_TEST_DIRNAME/../fixtures/proxy
	T=$BATS_TEST_TMPDIR
	PIDS=()
	# A cluster file that parses (nothing needs to listen for --check).
	CL=$PF/clusters-two.json
}

teardown() {
	local p
	for p in "${PIDS[@]}"; do
		kill -TERM "$p" 2>/dev/null || true
	done
	for p in "${PIDS[@]}"; do
		for _ in $(seq 1 30); do
			kill -0 "$p" 2>/dev/null || break
			[ "$(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null | cut -d' ' -f1)" = Z ] && break
			sleep 0.1
		done
		kill -KILL "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
}

# check [options]: sg-proxy --check with the given files.
check() {
	run --separate-stderr "$PROXY" --check --role router --listen 127.0.0.1:0 "$@"
}

@test "--help prints usage on stdout and exits 0" {
	run -0 --separate-stderr "$PROXY" --help
	[[ $output == usage:\ sg-proxy* ]]
	[[ $output == *--clusters* ]]
	[ -z "$stderr" ]
}

@test "-h is --help" {
	run -0 --separate-stderr "$PROXY" -h
	[[ $output == usage:\ sg-proxy* ]]
}

@test "--version prints 'sg-proxy 0.1.0'" {
	run -0 --separate-stderr "$PROXY" --version
	[ "$output" = "sg-proxy 0.1.0" ]
}

@test "every long option of --help appears in man/sg-proxy.8" {
	[ -f "$MAN" ] || skip "man/sg-proxy.8 is not written yet"
	run -0 --separate-stderr "$PROXY" --help
	local o
	for o in $(grep -oE -- '--[a-z][a-z-]+' <<<"$output" | sort -u); do
		grep -qF -- "Fl \\${o#-}" "$MAN" || { echo "missing in man: $o"; false; }
	done
}

@test "an unknown option is a usage error: 64, 'sg-proxy: ...' and usage on stderr" {
	run -64 --separate-stderr "$PROXY" --frobnicate --clusters "$CL"
	[ -z "$output" ]
	[[ $stderr == sg-proxy:* ]]
	[[ $stderr == *usage:\ sg-proxy* ]]
}

@test "bad option values exit 64 and name the option" {
	local o
	for o in "--workers 0" "--workers x" "--max-retries -1" "--listen nowhere" \
	    "--listen 127.0.0.1:70000" "--log-level loud" "--max-body-bytes 12k" \
	    "--decision-log-sample 2" "--seed -1" "--connect-timeout-ms x"; do
		# shellcheck disable=SC2086
		run -64 --separate-stderr "$PROXY" --role router --clusters "$CL" $o
		[[ $stderr == sg-proxy:* ]] || { echo "$o: $stderr"; false; }
		[[ $stderr == *"${o%% *}"* ]] || { echo "$o not named: $stderr"; false; }
	done
}

@test "an operand is a usage error (64)" {
	run -64 --separate-stderr "$PROXY" --role router --clusters "$CL" extra
}

@test "without --clusters it is a usage error (64)" {
	run -64 --separate-stderr "$PROXY" --role router --listen 127.0.0.1:0
	[[ $stderr == *--clusters* ]]
}

@test "a missing cluster file exits 66 naming it" {
	run -66 --separate-stderr "$PROXY" --role router --listen 127.0.0.1:0 \
	    --clusters "$T/no-such.json"
	[[ $stderr == sg-proxy:*no-such.json* ]]
}

@test "a missing lb-config exits 66 naming it" {
	run -66 --separate-stderr "$PROXY" --role router --listen 127.0.0.1:0 \
	    --clusters "$CL" --lb-config "$T/no-lb.json"
	[[ $stderr == sg-proxy:*no-lb.json* ]]
}

@test "a bad cluster file exits 78 and names the field" {
	jq '.clusters[1].stats.format = "prometheus"' "$CL" >"$T/bad1.json"
	run -78 --separate-stderr "$PROXY" --role router --listen 127.0.0.1:0 --clusters "$T/bad1.json"
	echo "$stderr"
	[[ $stderr == sg-proxy:*bad1.json* ]]
	[[ $stderr == *"clusters[1].stats.format"* ]]
	jq '.clusters[0].url = "ftp://x"' "$CL" >"$T/bad2.json"
	run -78 --separate-stderr "$PROXY" --role router --listen 127.0.0.1:0 --clusters "$T/bad2.json"
	[[ $stderr == *"clusters[0].url"* ]]
	jq '.clusters[0].colour = "blue"' "$CL" >"$T/bad3.json"
	run -78 --separate-stderr "$PROXY" --role router --listen 127.0.0.1:0 --clusters "$T/bad3.json"
	[[ $stderr == *colour* ]]
	jq '.clusters[1].id = .clusters[0].id' "$CL" >"$T/bad4.json"
	run -78 --separate-stderr "$PROXY" --role router --listen 127.0.0.1:0 --clusters "$T/bad4.json"
	[[ $stderr == *"clusters[1].id"* ]]
	printf '{"clusters": [' >"$T/bad5.json"
	run -78 --separate-stderr "$PROXY" --role router --listen 127.0.0.1:0 --clusters "$T/bad5.json"
	[[ $stderr == sg-proxy:*bad5.json* ]]
	echo '{"clusters": []}' >"$T/bad6.json"
	run -78 --separate-stderr "$PROXY" --role router --listen 127.0.0.1:0 --clusters "$T/bad6.json"
}

@test "a bad lb-config exits 78 naming the file and the field" {
	run -78 --separate-stderr "$PROXY" --role router --listen 127.0.0.1:0 \
	    --clusters "$CL" --lb-config "$LBF/lca-on-pulsar.json"
	echo "$stderr"
	[[ $stderr == sg-proxy:*lca-on-pulsar.json* ]]
	[[ $stderr == *last_cluster_affinity* ]]
	run -78 --separate-stderr "$PROXY" --role router --listen 127.0.0.1:0 \
	    --clusters "$CL" --lb-config "$LBF/bad-syntax.json"
	[[ $stderr == *bad-syntax.json* ]]
}

@test "--check prints 'configuration OK' and exits 0 on good files" {
	check --clusters "$CL" --lb-config "$LBF/production.json"
	[ "$status" = 0 ] || { echo "$stderr"; false; }
	[ "$output" = "configuration OK" ]
	check --clusters "$CL"
	[ "$status" = 0 ]
	run -0 --separate-stderr "$PROXY" -n --role router --clusters "$CL"
	[ "$output" = "configuration OK" ]
}

@test "--check exits 78 on a bad file and does not listen" {
	jq '.clusters[0].models = []' "$CL" >"$T/bad.json"
	check --clusters "$T/bad.json"
	[ "$status" = 78 ]
	[[ $stderr == *"clusters[0].models"* ]]
	check --clusters "$CL" --lb-config "$LBF/lca-on-pulsar.json"
	[ "$status" = 78 ]
}

@test "roles: all is the default, gateway needs --router-url and takes no --clusters, unknown roles are 64" {
	run -0 --separate-stderr "$PROXY" --check --listen 127.0.0.1:0 --clusters "$CL"
	[ "$output" = "configuration OK" ]
	run -0 --separate-stderr "$PROXY" --check --role all --listen 127.0.0.1:0 --clusters "$CL"
	run -0 --separate-stderr "$PROXY" --check --role gateway --listen 127.0.0.1:0 \
	    --router-url http://127.0.0.1:9
	run -64 --separate-stderr "$PROXY" --check --role gateway --listen 127.0.0.1:0
	[[ $stderr == sg-proxy:*--router-url* ]] || { echo "$stderr"; false; }
	run -64 --separate-stderr "$PROXY" --check --role gateway --listen 127.0.0.1:0 \
	    --router-url http://127.0.0.1:9 --clusters "$CL"
	[[ $stderr == sg-proxy:*--clusters* ]]
	run -64 --separate-stderr "$PROXY" --check --role gateway --listen 127.0.0.1:0 \
	    --router-url ftp://x
	[[ $stderr == sg-proxy:*--router-url* ]]
	run -64 --separate-stderr "$PROXY" --check --role router --listen 127.0.0.1:0 \
	    --clusters "$CL" --router-url http://127.0.0.1:9
	[[ $stderr == sg-proxy:*--router-url* ]]
	run -64 --separate-stderr "$PROXY" --check --role all --listen 127.0.0.1:0
	[[ $stderr == sg-proxy:*--clusters* ]]
	run -64 --separate-stderr "$PROXY" --role nonsense --listen 127.0.0.1:0 --clusters "$CL"
	[[ $stderr == *--role* ]]
}

@test "last-cluster settings: a bad flag or variable stops startup with 78 naming it; flags win over the environment" {
	local f
	for f in "--last-cluster maybe" "--last-cluster-ttl 0s" "--last-cluster-ttl ten" \
	    "--last-cluster-timeout -1ms" "--last-cluster-max-entries 0"; do
		# shellcheck disable=SC2086
		run -78 --separate-stderr "$PROXY" --check --listen 127.0.0.1:0 --clusters "$CL" $f
		[[ $stderr == sg-proxy:*"${f%% *}"* ]] || { echo "$f: $stderr"; false; }
	done
	for f in STARGATE_LAST_CLUSTER_ENABLED=maybe STARGATE_LAST_CLUSTER_TTL=0 \
	    STARGATE_LAST_CLUSTER_LOOKUP_TIMEOUT=fast STARGATE_LAST_CLUSTER_LOCAL_MAX_ENTRIES=-3; do
		run -78 --separate-stderr env "$f" "$PROXY" --check --listen 127.0.0.1:0 --clusters "$CL"
		[[ $stderr == sg-proxy:*"${f%%=*}"* ]] || { echo "$f: $stderr"; false; }
	done
	# the flag overrides a bad variable of the same setting
	run -0 --separate-stderr env STARGATE_LAST_CLUSTER_TTL=0 "$PROXY" --check \
	    --listen 127.0.0.1:0 --clusters "$CL" --last-cluster-ttl 5m
}

@test "last-cluster store: an LMDB directory that cannot be used stops startup (78 naming the variable)" {
	: >"$T/file"
	run -78 --separate-stderr "$PROXY" --check --listen 127.0.0.1:0 --clusters "$CL" \
	    --last-cluster true --last-cluster-store "$T/file/sub"
	[[ $stderr == *STARGATE_LAST_CLUSTER_STORE* ]] || { echo "$stderr"; false; }
	run -0 --separate-stderr "$PROXY" --check --listen 127.0.0.1:0 --clusters "$CL" \
	    --last-cluster true --last-cluster-store "$T/store"
	[ -d "$T/store" ]
	# off: the store is not touched
	run -0 --separate-stderr "$PROXY" --check --listen 127.0.0.1:0 --clusters "$CL" \
	    --last-cluster-store "$T/file/sub"
}

@test "--api-keys: a missing file is 66, a malformed line 78 naming file and line; router role refuses it" {
	run -66 --separate-stderr "$PROXY" --check --listen 127.0.0.1:0 --clusters "$CL" \
	    --api-keys "$T/nope"
	[[ $stderr == *"$T/nope"* ]]
	printf '# keys\n%s tenant 3\nnot-a-hash\n' "$(printf %064d 0)" >"$T/keys"
	run -78 --separate-stderr "$PROXY" --check --listen 127.0.0.1:0 --clusters "$CL" \
	    --api-keys "$T/keys"
	[[ $stderr == *"$T/keys"*3* ]] || { echo "$stderr"; false; }
	printf '# keys\n%s tenant 3\n%s\n' "$(printf %064d 0)" "$(printf %064d 1)" >"$T/keys"
	run -0 --separate-stderr "$PROXY" --check --listen 127.0.0.1:0 --clusters "$CL" \
	    --api-keys "$T/keys"
	run -64 --separate-stderr "$PROXY" --check --role router --listen 127.0.0.1:0 \
	    --clusters "$CL" --api-keys "$T/keys"
}

# serve [options]: start the proxy on a free port; sets PPID_, PORT.
serve() {
	"$PROXY" --role router --listen 127.0.0.1:0 --port-file "$T/port" \
	    --clusters "$CL" "$@" >"$T/out" 2>"$T/err" 3>&- &
	PPID_=$!
	PIDS+=("$!")
	local i
	for i in $(seq 1 100); do
		[ -s "$T/port" ] && break
		sleep 0.1
	done
	[ -s "$T/port" ] || { cat "$T/err"; return 1; }
	PORT=$(cat "$T/port")
}

@test "port 0 picks a free port, written to --port-file; the first stdout line says where" {
	serve --pid-file "$T/pid"
	[ "$PORT" -gt 0 ]
	local i
	for i in $(seq 1 50); do
		[ -s "$T/out" ] && break
		sleep 0.1
	done
	[ "$(head -1 "$T/out")" = "listening on 127.0.0.1:$PORT" ]
	[ "$(cat "$T/pid")" = "$PPID_" ]
	run -0 curl -sS --max-time 5 "http://127.0.0.1:$PORT/healthz"
	[ "$output" = ok ]
}

@test "a port in use exits 69" {
	serve
	run -69 --separate-stderr "$PROXY" --role router --listen "127.0.0.1:$PORT" --clusters "$CL"
	[[ $stderr == sg-proxy:* ]]
}

@test "SIGTERM on an idle proxy exits 0 with a quiet stderr (no sanitizer report)" {
	serve
	kill -TERM "$PPID_"
	local st=0 i
	for i in $(seq 1 100); do
		[ "$(sed 's/.*) //' "/proc/$PPID_/stat" 2>/dev/null | cut -d' ' -f1)" = Z ] && break
		kill -0 "$PPID_" 2>/dev/null || break
		sleep 0.1
	done
	wait "$PPID_" || st=$?
	PIDS=()
	[ "$st" = 0 ]
	! grep -qE 'AddressSanitizer|LeakSanitizer|runtime error:' "$T/err"
}

@test "SIGINT exits 0 too, also with --workers 2" {
	serve --workers 2
	kill -INT "$PPID_"
	local st=0 i
	for i in $(seq 1 100); do
		[ "$(sed 's/.*) //' "/proc/$PPID_/stat" 2>/dev/null | cut -d' ' -f1)" = Z ] && break
		kill -0 "$PPID_" 2>/dev/null || break
		sleep 0.1
	done
	wait "$PPID_" || st=$?
	PIDS=()
	[ "$st" = 0 ]
	! grep -qE 'AddressSanitizer|LeakSanitizer|runtime error:' "$T/err"
}
