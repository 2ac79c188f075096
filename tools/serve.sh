#!/usr/bin/env bash
# tools/serve.sh — `make serve`: the demo's stack in the foreground, for any
# OpenAI client.  Starts three sg-mockengine clusters (us-east, us-west,
# eu-central) and one sg-proxy --role all with the last-cluster feature on
# and its LMDB store in $O/serve/store (tools/demo/stack.sh), prints the
# base URL, and runs until SIGINT (Ctrl-C) or SIGTERM, which stop every
# process it started, by pid, and exit 0.
#
# O names the build directory (programs in $O/bin).  LISTEN (default
# 127.0.0.1:8080) is the proxy's address; port 0 picks a free one, and the
# URL line tells which.  SERVE_DIR (default $O/serve) holds the logs, the
# store and the file "pids".  Needs jq and curl.
set -euo pipefail
cd "$(dirname "$0")/.."
O=${O:-build}
LISTEN=${LISTEN:-127.0.0.1:8080}
STACK_PROG=serve STACK_DIR=${SERVE_DIR:-$O/serve}
. tools/demo/stack.sh

for p in sg-proxy sg-mockengine; do
	[ -x "$O/bin/$p" ] || stack_die "$O/bin/$p is not built; run make first"
done
for p in jq curl; do
	command -v "$p" >/dev/null || stack_die "needs $p"
done

STOPPING=
stop() {
	[ -n "$STOPPING" ] && return
	STOPPING=1
	echo "serve: stopping" >&2
	[ -n "${NAP:-}" ] && kill "$NAP" 2>/dev/null
	stack_stop
	exit 0
}
trap stop INT TERM
trap stack_stop EXIT

rm -rf "$STACK_DIR"
mkdir -p "$STACK_DIR"
stack_engines
stack_proxy true "$LISTEN"
printf '%s\n' "${STACK_PIDS[@]}" >"$STACK_DIR/pids"

cat <<MSG
Stargate is serving an OpenAI-compatible API at

    $STACK_URL/v1

  model:    acme/dummy-model   (routing key acme, served model dummy-model)
  sessions: prompt_cache_key, the Responses API's conversation, or the
            x-multi-turn-session-id header; the last cluster of each is kept
            in $STACK_DIR/store (sg-lastcluster -d $STACK_DIR/store list)
  clusters: us-east ${STACK_ENG[us-east]}, us-west ${STACK_ENG[us-west]},
            eu-central ${STACK_ENG[eu-central]}
  metrics:  $STACK_URL/metrics       logs: $STACK_DIR/*.log

  curl $STACK_URL/v1/chat/completions -H 'content-type: application/json' \\
      -d '{"model": "acme/dummy-model", "prompt_cache_key": "my-chat",
           "messages": [{"role": "user", "content": "Hello"}]}'

  OPENAI_BASE_URL=$STACK_URL/v1 OPENAI_API_KEY=none  (any OpenAI client)

Press Ctrl-C to stop.
MSG

# Wait for a signal; a child that dies takes the stack down with it.
while :; do
	for p in "${STACK_PIDS[@]}"; do
		if ! kill -0 "$p" 2>/dev/null; then
			echo "serve: process $p exited; stopping" >&2
			stack_stop
			exit 1
		fi
	done
	sleep 0.5 &
	NAP=$!
	wait "$NAP" || true
	NAP=
done
