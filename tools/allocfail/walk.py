#!/usr/bin/env python3
"""walk.py -- drive tools/allocfail's shim against a running HTTP server.

    walk.py status --ctl FILE
    walk.py walk --ctl FILE --pid PID --url URL [request options] [walk options]

The shim (allocfail.so, loaded with LD_PRELOAD into the server, with
ALLOCFAIL_CTL=FILE) shares a page of 64-bit counters with this script;
the layout is documented at the top of tools/allocfail/allocfail.c.

`walk` takes one request (method, path, headers, body) and:

 1. warms the server up with --warmup plain requests (caches, pools,
    metric series, the store's environment), then sends --steady more,
    measuring the live allocation count after each once the server is idle:
    a server whose count still moves at steady state gives no baseline,
    and the walk stops there (exit 1);
 2. counts the allocations one request makes (armed, nothing failing),
    --counts times; N is the largest count;
 3. for k = 1 .. N + --extra: fails the k-th allocation after arming
    (and --run - 1 more after it), sends the request, waits until the
    server is idle, disarms, checks that the server is alive, classifies
    the answer, then sends one plain request (the probe), which must be
    answered normally, and reads the live allocation count once idle.

Answers to a failing request, by class:
    ok        2xx, body complete (--check json: parses; sse: ends with
              data: [DONE]; text: non-empty)
    damaged   2xx that looks complete but lacks a header a plain answer
              has, or (sse) has fewer events: a silent loss   FAIL
    error     5xx with a JSON body that has an "error" member
    closed    the connection closed before a status line: the server's
              front end could not take the connection or the request in
              (a failure below the program's own code; from a call the
              program made, it is `bad`)
    refused   a 4xx from the front end: it could not store a header and
              took the request for a malformed one (evhttp's answer; as
              for closed, `bad` when the program's code made the call)
    truncated 2xx whose body stops short (the failure came after the
              status line was sent; nothing else is possible then)
    hang      no complete answer within --timeout seconds      FAIL
    crash     the process is gone or a zombie                  FAIL
    bad       any other answer (4xx, a 5xx without JSON, ...)  FAIL
A probe that is not `ok` is a FAIL (the server did not recover).

With --run N > 1 (every allocation from the k-th on fails, until the
answer is in: memory exhausted) the error reply itself may not be
buildable: a 5xx without its JSON body (`error-bare`) and a connection
closed or refused from the program's own code pass too; what still fails
is a crash, a hang, a damaged 2xx, a leak, and a probe not answered.

Leaks: the live count after step k's probe is compared with the count
after step k-1's probe (both at idle).  A one-time warm-up (a metric
series for a status seen the first time, a pool growing once) shows as a
single rise; a leak rises every time the same failure recurs.  So a step
whose count rose is replayed --replays times; if the count rises on every
replay, the step leaks (FAIL).  The tolerance is zero allocations: the
steady-state phase shows the server's count returns exactly to its value
after every plain request.

Output: one line per problem, a summary line, and (with --json FILE) the
per-step record.  Exit 0 when nothing failed, 1 otherwise, 2 on a usage
or setup error.
"""

import argparse
import http.client
import json
import mmap
import os
import struct
import subprocess
import sys
import time

SLOTS = ["magic", "pid", "armed", "fail_at", "fail_run", "count",
         "injected", "live", "bytes", "total", "fail_ra", "fail_n",
         "nskip", "skipped"]
S_SKIP, S_SKIP_MAX = 16, 16
S_NFRAMES, S_FRAMES = 48, 49
MAGIC = 0x314c46434f4c4c41
SIGNED = {"live", "bytes"}
PAGE = 4096
# Response headers whose presence may change from one answer to the next.
VOLATILE = {"date", "content-length", "transfer-encoding", "connection",
            "keep-alive"}


class Ctl:
    """The shim's control page."""

    def __init__(self, path):
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            if os.fstat(fd).st_size < PAGE:
                os.ftruncate(fd, PAGE)
            self.m = mmap.mmap(fd, PAGE, mmap.MAP_SHARED,
                               mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)

    def get(self, name):
        i = SLOTS.index(name)
        fmt = "<q" if name in SIGNED else "<Q"
        return struct.unpack_from(fmt, self.m, 8 * i)[0]

    def set(self, name, v):
        struct.pack_into("<Q", self.m, 8 * SLOTS.index(name),
                         v & 0xffffffffffffffff)

    def set_skips(self, ranges):
        self.set("nskip", 0)
        for i, (lo, hi) in enumerate(ranges[:S_SKIP_MAX]):
            struct.pack_into("<QQ", self.m, 8 * (S_SKIP + 2 * i), lo, hi)
        self.set("nskip", min(len(ranges), S_SKIP_MAX))

    def stack(self):
        n = min(self.get_i(S_NFRAMES), 16)
        return [self.get_i(S_FRAMES + i) for i in range(n)]

    def get_i(self, i):
        return struct.unpack_from("<Q", self.m, 8 * i)[0]

    def snapshot(self):
        return {n: self.get(n) for n in SLOTS}

    def arm(self, fail_at, run):
        self.set("armed", 0)
        self.set("fail_at", fail_at)
        self.set("fail_run", run)
        self.set("count", 0)
        self.set("injected", 0)
        self.set("skipped", 0)
        self.set("fail_ra", 0)
        self.set("fail_n", 0)
        self.set("armed", 1)

    def disarm(self):
        self.set("armed", 0)


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            st = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return st not in ("Z", "X")


class Walk:
    def __init__(self, a):
        self.a = a
        self.ctl = Ctl(a.ctl)
        u = a.url
        if u.startswith("http://"):
            u = u[len("http://"):]
        host, _, port = u.partition(":")
        self.host, self.port = host, int(port.rstrip("/"))
        self.headers = {}
        for h in a.header:
            k, _, v = h.partition(":")
            self.headers[k.strip()] = v.strip()
        self.headers["Connection"] = "close"
        self.body = a.data.encode() if a.data is not None else None
        self.nreq = 0
        self.ref = None         # (header names, SSE events) of a plain answer
        self.problems = []
        self.steps = []

    # --- one request --------------------------------------------------------

    def request(self):
        """Send the request once; return (class, status, detail)."""
        self.nreq += 1
        h = dict(self.headers)
        h.setdefault("x-request-id", "af-%d" % self.nreq)
        c = http.client.HTTPConnection(self.host, self.port,
                                       timeout=self.a.timeout)
        deadline = time.monotonic() + self.a.timeout
        status = 0
        try:
            c.request(self.a.method, self.a.path, body=self.body, headers=h)
            r = c.getresponse()
            status = r.status
            ctype = r.getheader("content-type", "")
            chunks = []
            while True:
                if time.monotonic() > deadline:
                    return ("hang", status, "body not complete in %gs"
                            % self.a.timeout)
                b = r.read1(65536) if hasattr(r, "read1") else r.read(65536)
                if not b:
                    break
                chunks.append(b)
            body = b"".join(chunks)
        except http.client.IncompleteRead as e:
            return ("truncated" if 200 <= status < 300 else "bad", status,
                    "incomplete body (%d bytes)" % len(e.partial))
        except (http.client.RemoteDisconnected, ConnectionResetError,
                BrokenPipeError) as e:
            if status == 0:
                return ("closed", 0, type(e).__name__)
            return ("truncated" if 200 <= status < 300 else "bad", status,
                    type(e).__name__)
        except (TimeoutError, OSError) as e:
            if isinstance(e, TimeoutError) or "timed out" in str(e):
                return ("hang", status, "no answer in %gs" % self.a.timeout)
            return ("closed" if status == 0 else "bad", status, repr(e))
        except http.client.HTTPException as e:
            return ("bad", status, repr(e))
        finally:
            c.close()
        if 200 <= status < 300:
            names = {k.lower() for k in r.headers.keys()} - VOLATILE
            return self.check_2xx(status, body, names)
        if 500 <= status < 600:
            try:
                doc = json.loads(body)
                if (isinstance(doc, dict) and "error" in doc and
                        "json" in ctype):
                    return ("error", status, doc.get("code", ""))
            except ValueError:
                pass
            return ("bad" if self.a.run <= 1 else "error-bare", status,
                    "5xx without a JSON error: %r" % body[:200])
        if 400 <= status < 500:
            return ("refused", status, repr(body[:80]))
        return ("bad", status, repr(body[:200]))

    def check_2xx(self, status, body, names):
        chk = self.a.check
        if chk == "json":
            try:
                json.loads(body)
            except ValueError:
                return ("truncated", status, "JSON does not parse (%d bytes)"
                        % len(body))
        elif chk == "sse":
            if b"data: [DONE]" not in body:
                return ("truncated", status, "stream without [DONE] "
                        "(%d bytes)" % len(body))
        elif chk == "text" and not body:
            return ("truncated", status, "empty body")
        events = body.count(b"\ndata:") + body.startswith(b"data:")
        if self.ref is None:
            self.last = (names, events)
        else:
            lost = self.ref[0] - names
            if lost:
                return ("damaged", status, "headers missing: %s"
                        % " ".join(sorted(lost)))
            if chk == "sse" and events != self.ref[1]:
                return ("damaged", status, "%d events, not %d"
                        % (events, self.ref[1]))
        return ("ok", status, "")

    # --- idleness -----------------------------------------------------------

    def idle(self):
        """Wait until the live and total counts stop moving for --quiet ms;
        return the live count (None: still busy after 5 s)."""
        quiet = self.a.quiet / 1000.0
        end = time.monotonic() + 5.0
        last = (self.ctl.get("live"), self.ctl.get("total"))
        since = time.monotonic()
        while time.monotonic() < end:
            time.sleep(0.001)
            cur = (self.ctl.get("live"), self.ctl.get("total"))
            now = time.monotonic()
            if cur != last:
                last, since = cur, now
            elif now - since >= quiet:
                return cur[0]
        return None

    # --- phases -------------------------------------------------------------

    def fail(self, what):
        self.problems.append(what)
        print("FAIL: " + what, flush=True)

    def plain(self, why):
        r = self.request()
        if r[0] != "ok":
            self.fail("%s: a plain request got %s %s %s" % ((why,) + r))
        return r[0] == "ok"

    def steady(self):
        for _ in range(self.a.warmup):
            if not self.plain("warm-up"):
                return False
            self.idle()
        # --steady plain requests in a row leaving the same live count
        # (a few more tries: a scheduling pause can end an idle wait early)
        counts = []
        for _ in range(3 * self.a.steady):
            if not self.plain("steady state"):
                return False
            counts.append(self.idle())
            tail = counts[-self.a.steady:]
            if (len(tail) == self.a.steady and None not in tail and
                    len(set(tail)) == 1):
                self.ref = self.last
                self.baseline = tail[-1]
                return True
        self.fail("no steady state: live counts after plain requests %s"
                  % counts)
        return False

    def count(self):
        ns = []
        for _ in range(self.a.counts):
            self.ctl.arm(0, 0)
            r = self.request()
            self.idle()
            self.ctl.disarm()
            if r[0] != "ok":
                self.fail("counting: %s %s %s" % r)
                return 0
            ns.append(self.ctl.get("count"))
        self.counts = ns
        return max(ns)

    def one(self, k):
        """Step k: fail, probe, measure.  Returns the live count or None."""
        self.ctl.arm(k, self.a.run)
        t0 = time.monotonic()
        r = self.request()
        t1 = time.monotonic()
        # armed until idle only while the k-th allocation has not come
        # (it may be in the request's tail: a store write after the reply)
        busy = self.ctl.get("injected") == 0 and self.idle() is None
        t2 = time.monotonic()
        self.ctl.disarm()
        inj = self.ctl.get("injected")
        ra = self.ctl.get("fail_ra")
        rec = {"k": k, "class": r[0], "status": r[1], "detail": r[2],
               "injected": inj, "ra": ra,
               "skipped": self.ctl.get("skipped"),
               "stack": self.ctl.stack() if inj else [],
               "req_ms": round((t1 - t0) * 1000, 1),
               "idle_ms": round((t2 - t1) * 1000, 1)}
        if r[0] != "ok" and alive(self.a.pid):
            time.sleep(0.05)    # a crashing process may still be exiting
        if not alive(self.a.pid):
            rec["class"] = "crash"
        elif (rec["class"] in ("closed", "refused") and self.a.run <= 1 and
              self.in_program(rec)):
            rec["detail"] += " (after the program had the request)"
            rec["class"] = "bad"
        self.steps.append(rec)
        if rec["class"] in ("hang", "crash", "bad", "damaged") or busy:
            self.fail("k=%d: %s status=%s %s%s" % (k, rec["class"], r[1],
                      r[2], " (still busy 5 s later)" if busy else ""))
            return None
        if not self.plain("k=%d probe" % k):
            return None
        live = self.idle()
        if live is None:
            self.fail("k=%d: never idle after the probe" % k)
        return live

    def skips(self):
        """--skip LIB:FUNC: the address range of FUNC in the mapped LIB
        (its dynamic symbol table, nm -D)."""
        ranges = []
        for sk in self.a.skip:
            lib, _, fn = sk.partition(":")
            path = base = None
            for lo, hi, off, pth in self.maps():
                if lib in os.path.basename(pth):
                    path, base = pth, lo - off
                    break
            if path is None:
                continue        # not loaded: nothing to skip
            out = subprocess.run(["nm", "-D", "-S", "--defined-only", path],
                                 capture_output=True, text=True).stdout
            for line in out.splitlines():
                p = line.split()
                if len(p) == 4 and p[3] == fn:
                    lo = base + int(p[0], 16)
                    ranges.append((lo, lo + int(p[1], 16)))
                    break
            else:
                print("walk.py: no %s in %s" % (fn, path), file=sys.stderr)
                sys.exit(2)
        self.ctl.set_skips(ranges)

    def walk(self):
        self.maps()
        self.skips()
        if not self.steady():
            return
        n = self.count()
        if n == 0:
            return
        prev = self.baseline
        last = n + self.a.extra
        if self.a.max_steps and last > self.a.max_steps:
            last = self.a.max_steps
        for k in range(1, last + 1):
            live = self.one(k)
            if live is None:
                if not alive(self.a.pid):
                    return
                prev = self.idle()
                continue
            if live > prev:
                rises = 0
                for _ in range(self.a.replays):
                    again = self.one(k)
                    if again is None:
                        break
                    if again > live:
                        rises += 1
                    live = again
                if rises == self.a.replays:
                    s = self.steps[-1]
                    self.fail("k=%d: leak: the live count rose on every "
                              "replay (%d -> %d after %d replays), failed "
                              "call from %s" % (k, prev, live, rises,
                                                self.site(s)))
            prev = live

    # --- reporting ----------------------------------------------------------

    def maps(self):
        if not hasattr(self, "_maps"):
            self._maps = []
            try:
                with open("/proc/%d/maps" % self.a.pid) as f:
                    for line in f:
                        p = line.split()
                        if len(p) < 6 or "x" not in p[1]:
                            continue
                        lo, hi = (int(x, 16) for x in p[0].split("-"))
                        self._maps.append((lo, hi, int(p[2], 16), p[5]))
            except OSError:
                pass
        return self._maps

    def dynsyms(self, path):
        """(start, size, name) of a library's dynamic symbols, sorted."""
        if not hasattr(self, "_dyn"):
            self._dyn = {}
        if path not in self._dyn:
            t = []
            try:
                out = subprocess.run(["nm", "-D", "-S", "--defined-only",
                                      path], capture_output=True, text=True,
                                     timeout=20).stdout
                for line in out.splitlines():
                    p = line.split()
                    if len(p) == 4 and p[2] in "TtWi":
                        t.append((int(p[0], 16), int(p[1], 16), p[3]))
            except (OSError, subprocess.SubprocessError):
                pass
            self._dyn[path] = sorted(t)
        return self._dyn[path]

    def resolve(self, addrs):
        """Name the code addresses not named yet: one addr2line per
        library for all of them ("func file:line" where there is debug
        information: our programs), else "lib:func" where the address is
        inside an exported function, else "lib+offset"; None for the
        shim's own frames."""
        if not hasattr(self, "_frames"):
            self._frames = {}
        todo = {}
        for ra in addrs:
            if ra in self._frames:
                continue
            self._frames[ra] = "%#x" % ra
            for lo, hi, off, path in self.maps():
                if lo <= ra < hi:
                    todo.setdefault(path, []).append((ra, ra - lo + off - 1))
                    break
        for path, lst in todo.items():
            base = os.path.basename(path)
            if base.startswith("allocfail"):
                for ra, _ in lst:
                    self._frames[ra] = None
                continue
            short = base.split(".so")[0]
            names = {}
            try:
                out = subprocess.run(["addr2line", "-f", "-s", "-e", path] +
                                     ["%#x" % rel for _, rel in lst],
                                     capture_output=True, text=True,
                                     timeout=60).stdout.split("\n")
                for i, (ra, _) in enumerate(lst):
                    fn, loc = out[2 * i], out[2 * i + 1]
                    if not loc.startswith("??"):
                        names[ra] = "%s %s" % (fn, loc.split(" ")[0])
            except (OSError, subprocess.SubprocessError, IndexError):
                pass
            syms = self.dynsyms(path) if len(names) < len(lst) else []
            for ra, rel in lst:
                txt = names.get(ra)
                if txt is None:
                    txt = "%s+%#x" % (short, rel)
                    for st, sz, nm in syms:
                        if st <= rel < st + sz:
                            txt = "%s:%s" % (short, nm)
                            break
                self._frames[ra] = txt

    def frame(self, ra):
        self.resolve([ra])
        return self._frames[ra]

    def in_program(self, rec):
        """True if the failed call came from the program's own code: a
        frame with debug information (the program and its static library)
        inside the event loop's callbacks (frames from event_base_loop out,
        worker_run and main, do not count)."""
        self.resolve(rec.get("stack") or [])
        for ra in rec.get("stack") or []:
            f = self.frame(ra) or ""
            if "event_base_loop" in f:
                return False
            if ".c:" in f:
                src = f.split(" ")[-1].split(":")[0]
                return src not in self.a.front_end
        return False

    def site(self, rec):
        """The failed call's stack, innermost first, to the first frame
        of the program itself (at most 6 frames)."""
        if isinstance(rec, int):
            rec = {"stack": [rec]}
        out = []
        for ra in rec.get("stack") or [rec.get("ra", 0)]:
            f = self.frame(ra)
            if f is None:
                continue
            out.append(f)
            if ".c:" in f or len(out) >= 6:
                break
        return " < ".join(out) if out else "?"

    def summary(self):
        by = {}
        for s in self.steps:
            by[s["class"]] = by.get(s["class"], 0) + 1
        reached = sum(1 for s in self.steps if s["injected"] > 0)
        skipped = sum(1 for s in self.steps if s["skipped"] > 0)
        counts = getattr(self, "counts", [])
        print("%s: allocations per request %s; %d steps, %d with a failure "
              "injected, %d skipped; answers %s; %d problems" % (
                  self.a.name, counts, len(self.steps), reached, skipped,
                  " ".join("%s=%d" % kv for kv in sorted(by.items())),
                  len(self.problems)), flush=True)
        if self.a.sites:
            for s in self.steps:
                if s["class"] not in ("ok", "error") or self.a.sites > 1:
                    print("  k=%d %s %s %s  <- %s" % (
                        s["k"], s["class"], s["status"], s["detail"],
                        self.site(s)))
        self.resolve([ra for s in self.steps for ra in s.get("stack") or []])
        if self.a.json:
            for s in self.steps:
                s["site"] = self.site(s) if self.a.sites else ""
            with open(self.a.json, "w") as f:
                json.dump({"name": self.a.name, "counts": counts,
                           "steps": self.steps,
                           "problems": self.problems}, f, indent=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    st = sub.add_parser("status", help="print the control page as JSON")
    st.add_argument("--ctl", required=True)
    w = sub.add_parser("walk", help="fail each allocation of one request")
    w.add_argument("--ctl", required=True, help="the ALLOCFAIL_CTL file")
    w.add_argument("--pid", type=int, required=True, help="server pid")
    w.add_argument("--url", required=True, help="http://127.0.0.1:PORT")
    w.add_argument("--name", default="request")
    w.add_argument("-X", "--method", default="GET")
    w.add_argument("--path", default="/")
    w.add_argument("-H", "--header", action="append", default=[])
    w.add_argument("-d", "--data")
    w.add_argument("--check", choices=("json", "sse", "text", "any"),
                   default="any", help="what makes a 2xx body complete")
    w.add_argument("--timeout", type=float, default=10.0,
                   help="seconds one request may take")
    w.add_argument("--quiet", type=float, default=5.0,
                   help="ms without allocation activity that count as idle")
    w.add_argument("--warmup", type=int, default=10)
    w.add_argument("--steady", type=int, default=5)
    w.add_argument("--counts", type=int, default=3)
    w.add_argument("--extra", type=int, default=3,
                   help="steps past the largest count")
    w.add_argument("--run", type=int, default=1,
                   help="allocations failed from the k-th on "
                   "(0 or 1: one; large: every one until disarmed)")
    w.add_argument("--replays", type=int, default=2)
    w.add_argument("--max-steps", type=int, default=0)
    w.add_argument("--sites", type=int, default=1,
                   help="1: name the failed call of unusual answers; "
                   "2: of every step; 0: none")
    w.add_argument("--skip", action="append", default=[],
                   metavar="LIB:FUNC", help="never fail a call made from "
                   "FUNC of the library whose file name contains LIB")
    w.add_argument("--front-end", action="append", default=[],
                   metavar="FILE.c", help="the program's own HTTP server "
                   "source: a failure whose innermost program frame is in "
                   "it counts as the front end's (closed, refused pass)")
    w.add_argument("--json", help="write the per-step record here")
    a = ap.parse_args()
    if a.cmd == "status":
        print(json.dumps(Ctl(a.ctl).snapshot()))
        return 0
    wk = Walk(a)
    if wk.ctl.get("magic") != MAGIC or wk.ctl.get("pid") != a.pid:
        print("walk.py: %s is not the control page of pid %d (is the shim "
              "preloaded?)" % (a.ctl, a.pid), file=sys.stderr)
        return 2
    wk.walk()
    wk.summary()
    return 1 if wk.problems else 0


if __name__ == "__main__":
    sys.exit(main())
