#!/usr/bin/env bats
# hostile-limits.bats — issue 12, hostile clients: each front-end limit of
# sg-proxy (sg-proxy.8, LIMITS) probed at the limit (served) and one byte
# or field past it (refused with its status, a JSON OpenAI-style error body
# and the connection closed).  The requests are built byte-exact by
# tests/fixtures/proxy/hostile_http.py and sent raw.

bats_require_minimum_version 1.5.0

load proxy_helpers

setup() {
	proxy_setup
	start_engine A -c 4 -t 1 --decode-tps 1000
	clusters A
	start_proxy --max-body-bytes 2000 --max-header-bytes 4096 \
	    --max-headers 20
	reset_seen A
}

teardown() {
	proxy_teardown
}

# probe KIND N: send it; OUT is the answer, ST its status, CONN closed/open.
probe() {
	OUT=$("$PY" "$FIX/hostile_http.py" "$PROXY_PORT" "$@" | tr -d '\r')
	ST=$(head -1 <<<"$OUT" | awk '{print $2}')
	CONN=$(tail -1 <<<"$OUT" | awk '{print $2}')
	EB=$(sed -n '/^{/p' <<<"$OUT" | head -1)
}

# refused STATUS CODE: the last probe was refused so, with a JSON error
# object, Connection: close, and the socket closed afterwards.
refused() {
	[ "$ST" = "$1" ] || { echo "expected $1, got:"; echo "$OUT"; return 1; }
	[ "$(jq -r .error.code <<<"$EB")" = "$2" ] || { echo "$OUT"; return 1; }
	[ "$(jq -r .error.type <<<"$EB")" = invalid_request_error ] ||
	    { echo "$OUT"; return 1; }
	grep -qi '^connection: close' <<<"$OUT" || { echo "$OUT"; return 1; }
	[ "$CONN" = closed ] || { echo "connection left open"; return 1; }
}

@test "limit request target: 8192 bytes served, 8193 answers 414 and closes" {
	probe target 8192
	[ "$ST" = 200 ] || { echo "$OUT"; false; }
	probe target 8193
	refused 414 uri_too_long
	grep -q '^HTTP/1.1 414 URI Too Long' <<<"$OUT"
}

@test "limit header bytes: --max-header-bytes served, one byte more answers 431 and closes" {
	probe hbytes 4096
	[ "$ST" = 200 ] || { echo "$OUT"; false; }
	probe hbytes 4097
	refused 431 request_header_fields_too_large
	grep -q '^HTTP/1.1 431 Request Header Fields Too Large' <<<"$OUT"
}

@test "limit header count: --max-headers fields served, one more answers 431 and closes" {
	probe hcount 20
	[ "$ST" = 200 ] || { echo "$OUT"; false; }
	probe hcount 21
	refused 431 request_header_fields_too_large
}

@test "limit body: --max-body-bytes is forwarded, one byte more answers 413 and closes" {
	probe body 2000
	[ "$ST" = 200 ] || { echo "$OUT"; false; }
	[ "$(seen_n A)" = 1 ]
	probe body 2001
	refused 413 request_too_large
	grep -q '^HTTP/1.1 413 Payload Too Large' <<<"$OUT"
	[ "$(seen_n A)" = 1 ]
}

@test "limit far past: a header block far beyond --max-header-bytes is the same JSON 431 and closed" {
	# the server stops reading at the limit, however much more follows
	probe hbytes 80000
	refused 431 request_header_fields_too_large
	[ "$(seen_n A)" = 0 ]
}

@test "limit reason phrases: 401 goes out as Unauthorized" {
	printf '%s\n' "$(printf 'k' | sha256sum | cut -d' ' -f1)" >"$T/keys"
	PROXY_TAG=proxy-gw
	stop_all
	start_engine A -c 4 -t 1 --decode-tps 1000
	clusters A
	PROXY_NOWAIT=1 start_proxy --role all --api-keys "$T/keys"
	wait_for 50 0.1 curl -sf --max-time 2 -o /dev/null "$PROXY_URL/healthz"
	curl -sS --max-time 5 -D "$T/h" -o "$T/b" -H 'content-type: application/json' \
	    --data-binary "$CHAT" "$PROXY_URL/v1/chat/completions" || true
	run -0 grep -q '^HTTP/1.1 401 Unauthorized' <(tr -d '\r' <"$T/h")
	[ "$(jq -r .error.code "$T/b")" = invalid_api_key ]
}

# status_line VERSION: the status line sg-proxy answers "GET /healthz VERSION".
status_line() {
	"$PY" - "$PROXY_PORT" "$1" <<'PYEOF'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
s.sendall(b"GET /healthz " + sys.argv[2].encode() + b"\r\nHost: x\r\n\r\n")
data = b""
try:
    while b"\r\n" not in data:
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
except socket.timeout:
    pass
print(data.split(b"\r\n")[0].decode("latin-1"))
PYEOF
}

@test "HTTP version: 1.0 and 1.1 served as such, 1.7 answered as 1.1, 0.1 and 2.7 refused with 505 in HTTP/1.1 (found by fuzz_proxy)" {
	[ "$(status_line HTTP/1.1)" = "HTTP/1.1 200 OK" ]
	[ "$(status_line HTTP/1.0)" = "HTTP/1.0 200 OK" ]
	[ "$(status_line HTTP/1.7)" = "HTTP/1.1 200 OK" ]
	run -0 status_line HTTP/0.1
	[ "$output" = "HTTP/1.1 505 HTTP Version Not Supported" ]
	run -0 status_line HTTP/2.7
	[ "$output" = "HTTP/1.1 505 HTTP Version Not Supported" ]
}
