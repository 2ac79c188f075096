#!/usr/bin/env bats
# hostile-smuggle.bats — issue 12, hostile clients: the request smuggling
# matrix against sg-proxy's front end.  Each ambiguous framing is refused
# with a 4xx, the connection is closed (nothing after it on the connection
# is read as a request), and nothing reaches the engine
# (sg-mockengine's /control/seen-headers counts zero routed requests).
# What evhttp still accepts is listed in sg-proxy.8, LIMITS.

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
	refused 400	# libevent's own page
}

@test "smuggle: a chunk size that is not hex is refused and closed" {
	# libevent answers a malformed chunk size with its own 413 page
	send "${H}Transfer-Encoding: chunked\r\n\r\nzz\r\n$B\r\n0\r\n\r\n$NEXT"
	[[ $ST == 4?? ]] || { echo "$OUT"; false; }
	refused "$ST"
}

@test "smuggle: a negative chunk size is refused and closed" {
	send "${H}Transfer-Encoding: chunked\r\n\r\n-5\r\nhello\r\n0\r\n\r\n$NEXT"
	[[ $ST == 4?? ]] || { echo "$OUT"; false; }
	refused "$ST"
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
