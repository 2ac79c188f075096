#!/usr/bin/env bats
# hostile-smuggle.bats — issue 12, hostile clients: the request smuggling
# matrix against sg-proxy's front end.  Each ambiguous framing is refused
# with a 4xx, the connection is closed (nothing after it on the connection
# is read as a request), and nothing reaches the engine
# (sg-mockengine's /control/seen-headers counts zero routed requests).
# The framing rules are h1s's (bin/sg-proxy/h1s.h, sg-proxy.8 LIMITS):
# obsolete line folding, a NUL or a bare CR in the head, and any chunk
# size but 1 to 16 hex digits are refused too (evhttp accepted them).

bats_require_minimum_version 1.5.0

load proxy_helpers

setup() {
	proxy_setup
	start_engine A -c 4 -t 1 --decode-tps 1000
	clusters A
	start_proxy
	reset_seen A
	B='{"model":"dummy-model","messages":[{"role":"user","content":"hi"}]}'
	H="POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nx-request-id: s1\r\nx-model: dummy-model\r\nx-input-tokens: 5\r\ncontent-type: application/json\r\n"
	# a second request pipelined behind the hostile one: it must never
	# be answered or forwarded
	NEXT="POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nx-request-id: s2\r\nx-model: dummy-model\r\nx-input-tokens: 5\r\ncontent-length: ${#B}\r\n\r\n$B"
}

teardown() {
	proxy_teardown
}

# send FORMAT: printf FORMAT raw to the proxy; OUT, ST, CONN as in
# hostile-limits.bats.
send() {
	OUT=$(printf "$1" | "$PY" "$FIX/hostile_http.py" "$PROXY_PORT" raw - |
	    tr -d '\r')
	ST=$(head -1 <<<"$OUT" | awk '{print $2}')
	CONN=$(tail -1 <<<"$OUT" | awk '{print $2}')
}

# refused STATUS: one answer with STATUS, the connection closed, nothing
# forwarded, and a good request afterwards is served.
refused() {
	[ "$ST" = "$1" ] || { echo "expected $1, got:"; echo "$OUT"; return 1; }
	[ "$CONN" = closed ] || { echo "left open:"; echo "$OUT"; return 1; }
	[ "$(grep -c '^HTTP/1' <<<"$OUT")" = 1 ] || { echo "$OUT"; return 1; }
	[ "$(seen_n A)" = 0 ] || { seen A; return 1; }
	req
	[ "$STATUS" = 200 ] || { show; return 1; }
}

# json: the refusal carried sg-proxy's JSON error object (not libevent's page).
json() {
	[ "$(sed -n '/^{/p' <<<"$OUT" | jq -r .error.type)" = invalid_request_error ] ||
	    { echo "$OUT"; return 1; }
}

@test "smuggle: Content-Length with Transfer-Encoding is 400 and closed" {
	send "${H}Content-Length: ${#B}\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n$NEXT"
	refused 400
}

@test "smuggle: Transfer-Encoding before Content-Length is 400 and closed" {
	send "${H}Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n$NEXT"
	refused 400
}

@test "smuggle: two Content-Lengths are 400 and closed" {
	send "${H}Content-Length: ${#B}\r\nContent-Length: 0\r\n\r\n$B$NEXT"
	refused 400
	json
}

@test "smuggle: two equal Content-Lengths are 400 and closed" {
	send "${H}Content-Length: ${#B}\r\nContent-Length: ${#B}\r\n\r\n$B$NEXT"
	refused 400
	json
}

@test "smuggle: a Transfer-Encoding other than chunked is 400 and closed" {
	send "${H}Transfer-Encoding: gzip, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n$NEXT"
	refused 400
	json
}

@test "smuggle: two Transfer-Encoding fields are 400 and closed" {
	send "${H}Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n$NEXT"
	refused 400
	json
}

@test "smuggle: a chunk size that is not hex is 400 and closed" {
	send "${H}Transfer-Encoding: chunked\r\n\r\nzz\r\n$B\r\n0\r\n\r\n$NEXT"
	refused 400
	json
}

@test "smuggle: a negative chunk size is 400 and closed" {
	send "${H}Transfer-Encoding: chunked\r\n\r\n-5\r\nhello\r\n0\r\n\r\n$NEXT"
	refused 400
	json
}

# chunked SIZE-LINE: a chunked body whose first chunk-size line is
# SIZE-LINE with the 5 bytes "hello" after it.
chunked() {
	send "${H}Transfer-Encoding: chunked\r\n\r\n$1\r\nhello\r\n0\r\n\r\n$NEXT"
}

@test "smuggle: a chunk size with a plus sign (+5) is 400 and closed, never forwarded" {
	chunked "+5"
	refused 400
	json
}

@test "smuggle: a chunk size with a leading space ( 5) is 400 and closed, never forwarded" {
	chunked " 5"
	refused 400
	json
}

@test "smuggle: a chunk size with a 0x prefix (0x5) is 400 and closed, never forwarded" {
	chunked "0x5"
	refused 400
	json
}

@test "smuggle: a chunk size of 17 hex digits is 400 and closed, never forwarded" {
	chunked "00000000000000005"
	refused 400
	json
}

@test "smuggle: 16 hex digits are still a chunk size (the bound of the rule above)" {
	local body
	body=$(printf '%016x' ${#B})
	send "${H}Transfer-Encoding: chunked\r\n\r\n$body\r\n$B\r\n0\r\n\r\n"
	[ "$ST" = 200 ] || { echo "$OUT"; false; }
	[ "$(seen_n A)" = 1 ]
}

@test "smuggle: chunk data not followed by CRLF is 400 and closed, never forwarded" {
	send "${H}Transfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n$NEXT"
	refused 400
	json
}

@test "smuggle: obsolete line folding is 400 and closed, never forwarded" {
	send "${H}x-foo: a\r\n b\r\nContent-Length: ${#B}\r\n\r\n$B$NEXT"
	refused 400
	json
}

@test "smuggle: obsolete line folding with a tab is 400 and closed" {
	send "${H}x-foo: a\r\n\tContent-Length: 0\r\nContent-Length: ${#B}\r\n\r\n$B$NEXT"
	refused 400
	json
}

@test "smuggle: a NUL in a header value is 400 and closed, never forwarded" {
	send "${H}x-foo: a\000b\r\nContent-Length: ${#B}\r\n\r\n$B$NEXT"
	refused 400
	json
}

@test "smuggle: a NUL in a header name is 400 and closed" {
	send "${H}x-f\000oo: a\r\nContent-Length: ${#B}\r\n\r\n$B$NEXT"
	refused 400
	json
}

@test "smuggle: a bare CR in a header value is 400 and closed" {
	send "${H}x-foo: a\rb\r\nContent-Length: ${#B}\r\n\r\n$B$NEXT"
	refused 400
}

@test "smuggle: a space before the colon of a field name is 400 and closed" {
	send "${H}Content-Length : 3\r\nContent-Length: ${#B}\r\n\r\n$B$NEXT"
	refused 400
	json
}

@test "smuggle: a control byte in a header value is 400 and closed" {
	send "${H}x-foo: a\001b\r\nContent-Length: ${#B}\r\n\r\n$B$NEXT"
	refused 400
	json
}
