#!/usr/bin/env python3
"""gw-report.py -- the report of tools/proxy-bench/run --gateway.

Reads OUT/results.tsv (one line per wrk run: targets sgproxy = --role
router, sgall = --role all with the last-cluster store on) and prints
Markdown: per concurrency and target the median (min-max over the rounds)
of requests/s, p50, p99 and the proxy's CPU per request (the process and
its threads: the LMDB store thread's commits count); then the gateway
stage's cost per round -- CPU per request of all (and of all with the
store off) over router, as added percent and microseconds, and p50 of all
minus router -- as median (min-max), against the issue's targets (<= 20 %
CPU, <= 100 us p50).  With --base-bindir the same three targets of an
older build (bsgproxy, bsgall, bsgallns) run in the same rounds, and a
last table gives this build's CPU per request over the base build's and
the change of the gateway stage's added CPU, round by round.  When
results.tsv has the per-thread columns (run's threads(): schedstat
nanoseconds and context switches of the main thread, the event loop, and
of the other threads, the store thread), two more tables split the CPU
per request and the stage's added CPU by thread.
"""
import csv
import statistics
import sys
from collections import defaultdict

out, argv = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else ""
rows = list(csv.DictReader(open(out + "/results.tsv"), delimiter="\t"))
by = defaultdict(dict)		# (conc, round) -> target -> row
for r in rows:
    by[(int(r["conc"]), int(r["round"]))][r["target"]] = r


def cpu_us(r):
    req = int(r["requests"])
    return int(r["proxy_ticks"]) / int(r["clk_tck"]) / req * 1e6 if req else 0


def has_threads(r):
    return r.get("loop_ns") not in (None, "")


def thr_us(r, col):
    """CPU per request of the loop thread ("loop") or the other threads
    ("other": the store thread), us, from the per-thread schedstat."""
    req = int(r["requests"])
    return int(r[col + "_ns"]) / 1e3 / req if req else 0


def csw(r, col):
    """Context switches (voluntary + involuntary) per request."""
    req = int(r["requests"])
    return (int(r[col + "_vcsw"]) + int(r[col + "_ivcsw"])) / req \
        if req else 0


def paired(c, t, base):
    """Each round at concurrency c that ran both t and base: (t's row,
    base's row)."""
    return [(by[k][t], by[k][base]) for k in by
            if k[0] == c and t in by[k] and base in by[k]]


def med(v):
    v = sorted(v)
    return "%.1f (%.1f-%.1f)" % (statistics.median(v), v[0], v[-1]) \
        if v else "-"


concs = sorted({c for c, _ in by})
names = {"sgproxy": "router", "sgall": "all", "sgallns": "all, store off",
         "sgallredis": "all, Redis store", "bsgproxy": "base router",
         "bsgall": "base all", "bsgallns": "base all, store off"}
targets = [t for t in names if any(t in v for v in by.values())]
print("# sg-proxy gateway stage: --role all vs --role router\n")
print("`tools/proxy-bench/run %s`; medians over the rounds (min-max)\n"
      % argv)
print("| conc | role | req/s | p50 us | p99 us | CPU us/req | errors |")
print("|---|---|---|---|---|---|---|")
for c in concs:
    for t in targets:
        rs = [by[k][t] for k in by if k[0] == c and t in by[k]]
        print("| %d | %s | %s | %s | %s | %s | %d |" % (
            c, names[t], med([float(r["rps"]) for r in rs]),
            med([float(r["p50_us"]) for r in rs]),
            med([float(r["p99_us"]) for r in rs]),
            med([cpu_us(r) for r in rs]),
            sum(int(r["errors"]) for r in rs)))
print("\nGateway stage, per round (all over router in the same round):\n")
print("| conc | variant | added CPU per request, % (target <= 20) | "
      "added CPU per request, us | added p50, us (target <= 100) |")
print("|---|---|---|---|---|")
pairs = [("sgall", "sgproxy"), ("sgallns", "sgproxy"),
         ("bsgall", "bsgproxy"), ("bsgallns", "bsgproxy")]
for c in concs:
    for t, base in pairs:
        pct, dus, dp50 = [], [], []
        for a, b in paired(c, t, base):
            if cpu_us(b) > 0:
                pct.append((cpu_us(a) / cpu_us(b) - 1) * 100)
            dus.append(cpu_us(a) - cpu_us(b))
            dp50.append(float(a["p50_us"]) - float(b["p50_us"]))
        if dp50:
            print("| %d | %s | %s | %s | %s |" % (c, names[t], med(pct),
                  med(dus), med(dp50)))
if all(has_threads(r) for r in rows):
    print("\nPer thread (the scheduler's accounting, /proc/PID/task/TID/"
          "schedstat, ns exact): the event loop (main thread) and the "
          "other threads (the LMDB store thread), CPU us per request and "
          "context switches per request (voluntary + involuntary):\n")
    print("| conc | role | loop CPU us/req | other CPU us/req | "
          "loop csw/req | other csw/req |")
    print("|---|---|---|---|---|---|")
    for c in concs:
        for t in targets:
            rs = [by[k][t] for k in by if k[0] == c and t in by[k]]
            print("| %d | %s | %s | %s | %s | %s |" % (
                c, names[t], med([thr_us(r, "loop") for r in rs]),
                med([thr_us(r, "other") for r in rs]),
                "%.2f" % statistics.median([csw(r, "loop") for r in rs]),
                "%.3f" % statistics.median([csw(r, "other") for r in rs])))
    print("\nGateway stage per thread, per round (all minus router in the "
          "same round), us per request: added loop-thread CPU, added "
          "other-thread (store thread) CPU, and their sum over the "
          "router's CPU (the schedstat form of the added %):\n")
    print("| conc | variant | added loop us | added other us | "
          "added CPU % (schedstat) |")
    print("|---|---|---|---|---|")
    for c in concs:
        for t, base in pairs:
            dl, do, pct = [], [], []
            for a, b in paired(c, t, base):
                dl.append(thr_us(a, "loop") - thr_us(b, "loop"))
                do.append(thr_us(a, "other") - thr_us(b, "other"))
                tb = thr_us(b, "loop") + thr_us(b, "other")
                if tb > 0:
                    pct.append((thr_us(a, "loop") + thr_us(a, "other")) /
                               tb * 100 - 100)
            if dl:
                print("| %d | %s | %s | %s | %s |" % (c, names[t], med(dl),
                      med(do), med(pct)))
if "sgallredis" in targets:
    print("\nRedis store vs LMDB store, --role all, requests/s per round "
          "(target >= 0.9):\n")
    print("| conc | Redis / LMDB req/s |")
    print("|---|---|")
    for c in concs:
        rat = [float(by[k]["sgallredis"]["rps"]) / float(by[k]["sgall"]["rps"])
               for k in by if k[0] == c and "sgallredis" in by[k] and
               "sgall" in by[k] and float(by[k]["sgall"]["rps"]) > 0]
        if rat:
            print("| %d | %s |" % (c, med(rat)))
if "bsgproxy" in targets:
    print("\nThis build over the base build (--base-bindir), per round: "
          "CPU per request, new / base, and the gateway stage's added CPU "
          "per request (all - router), new - base:\n")
    print("| conc | role | CPU new/base | added CPU us, new - base |")
    print("|---|---|---|---|")
    for c in concs:
        for t in ("sgproxy", "sgall", "sgallns"):
            rat, dd = [], []
            for k in by:
                v = by[k]
                if k[0] != c or t not in v or "b" + t not in v:
                    continue
                if cpu_us(v["b" + t]) > 0:
                    rat.append(cpu_us(v[t]) / cpu_us(v["b" + t]))
                if t != "sgproxy" and "sgproxy" in v and "bsgproxy" in v:
                    dd.append((cpu_us(v[t]) - cpu_us(v["sgproxy"])) -
                              (cpu_us(v["b" + t]) - cpu_us(v["bsgproxy"])))
            if rat:
                print("| %d | %s | %s | %s |" % (c, names[t],
                      "%.3f (%.3f-%.3f)" % (statistics.median(rat),
                                            min(rat), max(rat)),
                      med(dd) if dd else "-"))


def quart(v):
    """Median, quartiles and extremes of v: "m [q1-q3] (min-max)"."""
    v = sorted(v)
    if not v:
        return "-"
    if len(v) < 4:
        return "%.1f [-] (%.1f-%.1f)" % (statistics.median(v), v[0], v[-1])
    q = statistics.quantiles(v, n=4)
    return "%.1f [%.1f-%.1f] (%.1f-%.1f)" % (statistics.median(v), q[0],
                                             q[2], v[0], v[-1])


# The summary: the stage's added CPU per round with its quartiles, next
# to the same-run noise floor -- two targets that run the same code
# (this build's router and the base build's, when --base-bindir ran the
# same router stage) or the base build's own stage -- so that a reader
# can tell the added figure from the noise of the run.
print("\nSummary: the gateway stage's added CPU per request, % over the "
      "router in the same round, median [quartiles] (min-max) over the "
      "rounds; the target is <= 20:\n")
print("| conc | rounds | all (store on) | all, store off | "
      "base all (store on) | router, this build over base - 1, % |")
print("|---|---|---|---|---|---|")
for c in concs:
    cols, n = [], 0
    for t, base in pairs[:3]:
        pct = []
        for k in by:
            if k[0] != c or base not in by[k] or t not in by[k]:
                continue
            a, b = by[k][t], by[k][base]
            if cpu_us(b) > 0:
                pct.append((cpu_us(a) / cpu_us(b) - 1) * 100)
        n = max(n, len(pct))
        cols.append(quart(pct))
    floor = [(cpu_us(by[k]["sgproxy"]) / cpu_us(by[k]["bsgproxy"]) - 1) *
             100 for k in by if k[0] == c and "sgproxy" in by[k] and
             "bsgproxy" in by[k] and cpu_us(by[k]["bsgproxy"]) > 0]
    print("| %d | %d | %s | %s | %s | %s |" % (c, n, cols[0], cols[1],
          cols[2], quart(floor)))
