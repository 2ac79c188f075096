#!/usr/bin/env bats
# serve.bats — `make serve` (tools/serve.sh): the stack starts in the
# foreground, prints its base URL, answers an OpenAI request, and SIGINT
# (Ctrl-C) or SIGTERM stops it and every process it started.
#
# A shell starts background jobs with SIGINT ignored, so the script is
# started through `env --default-signal=INT`, as a terminal would run it.

bats_require_minimum_version 1.5.0

setup() {
	TOP=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)
	BIN=${SG_BINDIR:-$TOP/build/san/bin}
	T=$BATS_TEST_TMPDIR
	SPID=
	export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:exitcode=23}
}

teardown() {
	local p
	# only if a test failed half-way: stop what is left, by pid
	for p in $SPID $(cat "$T/serve/pids" 2>/dev/null); do
		kill -TERM "$p" 2>/dev/null || true
	done
}

gone() {
	[ ! -r "/proc/$1/stat" ] ||
	    [ "$(sed 's/.*) //' "/proc/$1/stat" | cut -d' ' -f1)" = Z ]
}

# serve: start tools/serve.sh on a free port; sets SPID, URL, KIDS.
serve() {
	local i
	env --default-signal=INT LISTEN=127.0.0.1:0 O="${BIN%/bin}" \
	    SERVE_DIR="$T/serve" "$TOP/tools/serve.sh" >"$T/out" 2>"$T/err" &
	SPID=$!
	for i in $(seq 1 200); do
		grep -q 'Press Ctrl-C to stop' "$T/out" && break
		gone "$SPID" && break
		sleep 0.05
	done
	cat "$T/out"
	URL=$(grep -oE 'http://127\.0\.0\.1:[0-9]+/v1' "$T/out" | head -1)
	[ -n "$URL" ]
	KIDS=$(cat "$T/serve/pids")
	# three engines and the proxy
	[ "$(wc -w <<<"$KIDS")" = 4 ]
	[ "$(pgrep -P "$SPID" | grep -vx "$(pgrep -P "$SPID" -x sleep || echo none)" | sort)" = \
	    "$(tr ' ' '\n' <<<"$KIDS" | sort)" ]
}

# stop SIGNAL: send it, wait (10 s) for the script; it exits 0 and leaves
# no process behind.
stop() {
	local i p st
	kill "-$1" "$SPID"
	for i in $(seq 1 200); do
		gone "$SPID" && break
		sleep 0.05
	done
	gone "$SPID"
	wait "$SPID" && st=0 || st=$?
	[ "$st" = 0 ]
	for p in $KIDS; do
		gone "$p" || { echo "process $p is still running"; return 1; }
	done
	[ -z "$(pgrep -P "$SPID" || true)" ]
	SPID=
	grep -q 'serve: stopping' "$T/err"
	! grep -qE 'AddressSanitizer|LeakSanitizer|runtime error:' "$T"/serve/*.log
}

chat() {
	curl -sS --max-time 10 -H 'content-type: application/json' \
	    --data-binary "$1" "$URL/chat/completions"
}

@test "make serve: prints the base URL, answers an OpenAI chat request with session memory, and Ctrl-C (SIGINT) stops every process it started" {
	local b r
	serve
	b='{"model": "acme/dummy-model", "prompt_cache_key": "serve-1",
	    "messages": [{"role": "user", "content": "Hello there, how are you today? Tell me about caches."}]}'
	r=$(chat "$b")
	[ "$(jq -r .object <<<"$r")" = chat.completion ]
	[ -n "$(jq -r '.choices[0].message.content' <<<"$r")" ]
	r=$(chat "$b")
	# the second turn found the first one's KV cache
	[ "$(jq -r .usage.prompt_tokens_details.cached_tokens <<<"$r")" -gt 0 ]
	# the gateway remembered the session
	[ "$("$BIN/sg-lastcluster" -d "$T/serve/store" list | wc -l)" = 1 ]
	stop INT
}

@test "make serve: SIGTERM stops it cleanly too" {
	serve
	[ "$(curl -s --max-time 5 -o /dev/null -w '%{http_code}' "${URL%/v1}/readyz")" = 200 ]
	stop TERM
}
