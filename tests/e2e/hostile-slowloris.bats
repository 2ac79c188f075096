#!/usr/bin/env bats
# hostile-slowloris.bats — issue 12, hostile clients: many slow clients
# (tests/fixtures/proxy/slowloris.py) that stop sending mid-header or
# mid-body are disconnected within the read timeout
# (--header-timeout-ms, --body-timeout-ms: 1 s here) while an ordinary
# client keeps getting answers.  The timeouts are absolute deadlines
# (h1s.h): a client that trickles a byte every 200 ms, never idle, is cut
# at the head's deadline with a 408 all the same.  The time bounds checked
# are the timeout itself (plus scheduling slack) and the issue's latency
# criterion: an ordinary client's p99 with 500 slow connections open
# within 2x its p99 without them, both measured in the same test.

bats_require_minimum_version 1.5.0

load proxy_helpers

N=300

setup() {
	proxy_setup
	start_engine A -c 8 -t 1 --decode-tps 1000
	clusters A
	start_proxy --header-timeout-ms 1000 --body-timeout-ms 1000
	reset_seen A
}

teardown() {
	proxy_teardown
}

# slow MODE: N slow connections in MODE while 20 ordinary requests run;
# all ordinary requests succeed and every slow connection is cut within
# the 1 s timeout (10 s allowed for scheduling under the sanitizers).
slow() {
	local ok=0 i
	"$PY" "$FIX/slowloris.py" "$PROXY_PORT" "$N" "$1" 15 >"$T/slow.out" &
	PIDS+=("$!")
	local sp=$!
	for i in $(seq 1 20); do
		req
		[ "$STATUS" = 200 ] && ok=$((ok + 1))
	done
	wait "$sp"
	cat "$T/slow.out"
	[ "$ok" = 20 ]
	read -r _ cut _ n _ ms <"$T/slow.out"
	[ "$cut" = "$N" ] && [ "$n" = "$N" ]
	[ "$ms" -lt 10000 ]
	# no slow request ever reached the engine
	[ "$(seen_n A)" = 20 ]
	# and the proxy serves after they are gone
	req
	[ "$STATUS" = 200 ]
}

@test "slowloris: $N clients stalled mid-header are cut within --header-timeout-ms" {
	slow header
}

@test "slowloris: $N clients stalled mid-body are cut within --body-timeout-ms" {
	slow body
}

# trickle.py PORT PERIOD_MS: one client sends a request head a byte every
# PERIOD_MS (never idle) and prints "STATUS ELAPSED_MS CLOSED" once the
# server answers or closes: the first status code seen (or 0), the time
# from the first byte, and whether the server then closed.
trickle() {
	"$PY" - "$@" <<'PYEOF'
import socket, sys, time
port, period = int(sys.argv[1]), float(sys.argv[2]) / 1000.0
head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
        b"x-model: dummy-model\r\nx-input-tokens: 5\r\nx-pad: " +
        b"p" * 400 + b"\r\n\r\n")
s = socket.create_connection(("127.0.0.1", port), timeout=5)
s.setblocking(False)
t0 = time.monotonic()
got, i, closed = b"", 0, False
while time.monotonic() - t0 < 30 and not closed:
    if i < len(head):
        try:
            s.send(head[i:i + 1])
        except OSError:
            closed = True
            break
        i += 1
    end = time.monotonic() + period
    while time.monotonic() < end:
        try:
            d = s.recv(65536)
        except BlockingIOError:
            time.sleep(0.01)
            continue
        except OSError:
            d = b""
        if not d:
            closed = True
            break
        got += d
    if got and b"\r\n\r\n" in got and not closed:
        # answered: wait a little for the close
        s.settimeout(2)
        try:
            while True:
                d = s.recv(65536)
                if not d:
                    closed = True
                    break
                got += d
        except OSError:
            closed = closed or False
        break
ms = int((time.monotonic() - t0) * 1000)
st = got.split(b" ")[1].decode() if got.startswith(b"HTTP/1.") else "0"
sys.stdout.write("%s %d %s sent %d\n" % (st, ms, "closed" if closed else
                 "open", i))
sys.stdout.write(got.decode("latin-1").replace("\r", "") + "\n")
PYEOF
}

@test "slowloris: a client trickling a byte every 200 ms (never idle) is cut at the --header-timeout-ms deadline with 408 while a normal client is served" {
	local ok=0 i st ms conn
	trickle "$PROXY_PORT" 200 >"$T/trickle.out" &
	PIDS+=("$!")
	local tp=$!
	for i in $(seq 1 10); do
		req
		[ "$STATUS" = 200 ] && ok=$((ok + 1))
		sleep 0.1
	done
	wait "$tp"
	cat "$T/trickle.out"
	read -r st ms conn _ <"$T/trickle.out"
	[ "$ok" = 10 ]
	[ "$st" = 408 ]
	[ "$conn" = closed ]
	grep -q '"code":"request_timeout"' "$T/trickle.out"
	# cut at the 1 s deadline from its first byte (an idle timer would
	# never fire: a byte arrives every 200 ms); slack for the sanitizers
	[ "$ms" -ge 900 ] && [ "$ms" -lt 5000 ]
	[ "$(seen_n A)" = 10 ]
}

# latency.py PORT N_SLOW N FIXDIR: the p99 (median of 3 rounds of N requests)
# of an ordinary client (routed
# requests on one keep-alive connection) without slow connections, then
# with N_SLOW connections that each sent part of a head and add a byte
# every second (spread over the second); prints "base_p99_us P
# loaded_p99_us Q cut K of N max_ms M".  Bounded: the loaded rounds must
# end before the slow connections' deadline (the script checks).
latency() {
	"$PY" - "$@" <<'PYEOF'
import socket, sys, time
sys.path.insert(0, sys.argv[4])
from slowloris import wait_closed
port, nslow, n = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
body = b'{"model":"dummy-model","messages":[{"role":"user","content":"hi"}]}'
req = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
       b"x-request-id: lat\r\nx-model: dummy-model\r\nx-input-tokens: 5\r\n"
       b"content-type: application/json\r\ncontent-length: %d\r\n\r\n"
       % len(body)) + body
c = socket.create_connection(("127.0.0.1", port), timeout=10)
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
buf = b""
def one():
    global buf
    t0 = time.perf_counter()
    c.sendall(req)
    while True:
        i = buf.find(b"\r\n\r\n")
        if i >= 0:
            head = buf[:i].decode("latin-1").lower()
            assert head.startswith("http/1.1 200"), head
            cl = int(head.split("content-length:")[1].split("\r\n")[0])
            if len(buf) >= i + 4 + cl:
                buf = buf[i + 4 + cl:]
                return time.perf_counter() - t0
        d = c.recv(65536)
        assert d, "closed"
        buf += d
slow, nxt = [], 0
def tick():
    global nxt
    # each slow connection adds a byte once a second, spread evenly
    k = len(slow)
    if k == 0:
        return
    due = int((time.monotonic() - tslow) * k) - nxt
    for _ in range(max(0, min(due, k))):
        try:
            slow[nxt % k].send(b"a")
        except OSError:
            pass
        nxt += 1
def p99(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * 0.99))]
for _ in range(50):
    one()
def rounds(load):
    # the median of three rounds' p99: a burst of other work on the
    # machine spoils one round, not the figure
    ps = []
    for _ in range(3):
        xs = []
        for _ in range(n):
            if load:
                tick()
            xs.append(one())
        ps.append(p99(xs))
    return sorted(ps)[1]
base = rounds(False)
tslow = time.monotonic()
for _ in range(nslow):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nx-slow: ")
    s.setblocking(False)
    slow.append(s)
tslow = time.monotonic()
loaded = rounds(True)
held = time.monotonic() - tslow
left, last = wait_closed(slow, tslow, 20)
print("base_p99_us %d loaded_p99_us %d cut %d of %d max_ms %d held_ms %d" %
      (base * 1e6, loaded * 1e6, nslow - left, nslow,
       last * 1000, held * 1000))
PYEOF
}

@test "slowloris: 500 slow connections open, an ordinary client's p99 stays within 2x its baseline and every slow one is cut at the deadline" {
	local b l cut n max held
	stop_all
	start_engine A -c 8 -t 1 --decode-tps 1000
	clusters A
	start_proxy --header-timeout-ms 6000 --body-timeout-ms 1000
	latency "$PROXY_PORT" 500 300 "$FIX" >"$T/lat.out"
	cat "$T/lat.out"
	read -r _ b _ l _ cut _ n _ max _ held <"$T/lat.out"
	# the loaded rounds ran while all 500 were held open
	[ "$held" -lt 6000 ]
	[ "$l" -le $((2 * b)) ]
	[ "$cut" = 500 ] && [ "$n" = 500 ]
	# cut at the head deadline (6 s from their first byte), not before
	[ "$max" -ge 5500 ] && [ "$max" -lt 15000 ]
}
