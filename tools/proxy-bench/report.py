#!/usr/bin/env python3
"""tools/proxy-bench/report.py OUTDIR [ARGS] -- the Markdown report of a run.

Reads OUTDIR/results.tsv (one wrk run per line), sse.tsv (one SSE probe run
per line) and rss.tsv (RSS samples), written by tools/proxy-bench/run, and
prints figures and ratios.  Every figure is the median over the rounds with
the min-max spread in brackets.  "Added" latency is computed per round
(through the proxy minus direct, the same round), then summarised; a ratio
is sg-proxy's median over nginx's median.
"""
import csv
import os
import statistics
import sys

OUT = sys.argv[1]
ARGS = sys.argv[2] if len(sys.argv) > 2 else ""


def load(name):
    path = os.path.join(OUT, name)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return list(csv.DictReader(f, delimiter="\t"))


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def fmt(v, nd=0):
    if v != v:
        return "n/a"
    return f"{v:,.{nd}f}"


def spread(xs, nd=0):
    if not xs:
        return "n/a"
    return f"{fmt(med(xs), nd)} ({fmt(min(xs), nd)}–{fmt(max(xs), nd)})"


def ratio(a, b):
    """a / b; not a number when a or b is not positive (an "added" figure
    at or below zero is noise, and a ratio with it means nothing)."""
    if a != a or b != b or b <= 0 or a <= 0:
        return float("nan")
    return a / b


def round_ratios(sg, ng):
    """Per-round ratios of two {round: value} maps (same round only)."""
    out = [ratio(sg[k], ng[k]) for k in sg if k in ng]
    return [r for r in out if r == r]


def by_round(rs, f):
    return {r["round"]: f(r) for r in rs}


def rr_text(rs):
    return f"{fmt(med(rs), 2)} ({fmt(min(rs), 2)}–{fmt(max(rs), 2)})" \
        if rs else "n/a"


res = load("results.tsv")
sse = load("sse.tsv")
rssr = load("rss.tsv")
targets = [t for t in ("direct", "nginx", "sgproxy")
           if any(r["target"] == t for r in res + sse)]
have_sg = "sgproxy" in targets
names = {"direct": "direct", "nginx": "nginx proxy_pass",
         "sgproxy": "sg-proxy router"}


def rows(b, c, t):
    return [r for r in res if r["backend"] == b and r["conc"] == c
            and r["target"] == t]


def col(rs, k):
    return [float(r[k]) for r in rs]


def cpu_us(rs):
    """Proxy process CPU microseconds per request, per run."""
    return [float(r["proxy_ticks"]) * 1e6 / float(r["clk_tck"]) /
            float(r["requests"]) for r in rs if float(r["requests"]) > 0]


def added_map(b, c, t, k):
    """{round: added latency of target t over direct in that round}."""
    d = {r["round"]: float(r[k]) for r in rows(b, c, "direct")}
    return {r["round"]: float(r[k]) - d[r["round"]] for r in rows(b, c, t)
            if r["round"] in d}


def added(b, c, t, k):
    return list(added_map(b, c, t, k).values())


def cpu_map(b, c, t):
    return {r["round"]: float(r["proxy_ticks"]) * 1e6 /
            float(r["clk_tck"]) / float(r["requests"])
            for r in rows(b, c, t) if float(r["requests"]) > 0}


print("# sg-proxy router vs nginx proxy_pass\n")
print(f"Command: `tools/proxy-bench/run {ARGS}`".rstrip() + "  ")
print(f"Raw results: `{OUT}` (commands.txt has every command "
      "with its ports).\n")
print("Medians over the rounds, (min–max) spread.  CPU is the proxy "
      "process's user+system time (/proc/PID/stat, with children) over the "
      "run divided by its requests; for *direct* it is the backend's.\n")

loads = [float(r["load1"]) for r in res if r.get("load1")]
if loads:
    print("Host 1-minute load average during the wrk runs: "
          f"{spread(loads, 2)} on {os.cpu_count()} CPUs "
          "(other work on the machine shows up as spread).\n")

checks = []
backends = [b for b in ("mock", "nginx") if any(r["backend"] == b
                                                for r in res)]
for b in backends:
    title = {"mock": "sg-mockengine (instant prefill and decode)",
             "nginx": "nginx fixed body (not the bottleneck)"}[b]
    print(f"## Backend: {title}\n")
    print("| conc | target | req/s | p50 µs | p99 µs | CPU µs/req | errors |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    concs = sorted({r["conc"] for r in res if r["backend"] == b}, key=int)
    for c in concs:
        for t in targets:
            rs = rows(b, c, t)
            if not rs:
                continue
            print(f"| {c} | {names[t]} | {spread(col(rs, 'rps'))} | "
                  f"{spread(col(rs, 'p50_us'))} | "
                  f"{spread(col(rs, 'p99_us'))} | "
                  f"{spread(cpu_us(rs), 1)} | "
                  f"{int(sum(col(rs, 'errors')))} |")
    print()
    print("Ratio: sg-proxy's median over nginx's median; per-round: the "
          "median (min–max) of the ratios taken within each round.\n")
    print("| conc | figure | nginx | sg-proxy | ratio sg/nginx | "
          "per-round ratio | target |")
    print("|---:|---|---:|---:|---:|---:|---|")
    for c in concs:
        n_cpu, s_cpu = cpu_us(rows(b, c, "nginx")), cpu_us(rows(b, c,
                                                              "sgproxy"))
        r = ratio(med(s_cpu), med(n_cpu))
        rr = round_ratios(cpu_map(b, c, "sgproxy"), cpu_map(b, c, "nginx"))
        print(f"| {c} | CPU µs/request | {spread(n_cpu, 1)} | "
              f"{spread(s_cpu, 1)} | {fmt(r, 2)} | {rr_text(rr)} "
              "| ≤ 1.10 |")
        checks.append((f"{b}: CPU per request, c={c}", r, r <= 1.10))
        if c == "1":
            for k, lim in (("p50_us", 1.25), ("p99_us", 1.5)):
                na, sa = added(b, c, "nginx", k), added(b, c, "sgproxy", k)
                r = ratio(med(sa), med(na))
                rr = round_ratios(added_map(b, c, "sgproxy", k),
                                  added_map(b, c, "nginx", k))
                print(f"| {c} | added {k[:3]} µs | {spread(na)} | "
                      f"{spread(sa)} | {fmt(r, 2)} | {rr_text(rr)} | "
                      f"≤ {lim:.2f} |")
                checks.append((f"{b}: added {k[:3]} at c=1", r, r <= lim))
        else:
            nrs, srs = rows(b, c, "nginx"), rows(b, c, "sgproxy")
            nr, sr = col(nrs, "rps"), col(srs, "rps")
            r = ratio(med(sr), med(nr))
            rr = round_ratios(by_round(srs, lambda x: float(x["rps"])),
                              by_round(nrs, lambda x: float(x["rps"])))
            print(f"| {c} | req/s | {spread(nr)} | {spread(sr)} | "
                  f"{fmt(r, 2)} | {rr_text(rr)} | ≥ 0.90 |")
            checks.append((f"{b}: throughput, c={c}", r, r >= 0.90))
            for k in ("p50_us", "p99_us"):
                na, sa = added(b, c, "nginx", k), added(b, c, "sgproxy", k)
                print(f"| {c} | added {k[:3]} µs | {spread(na)} | "
                      f"{spread(sa)} | {fmt(ratio(med(sa), med(na)), 2)} "
                      "| | (info) |")
    print()

if sse:
    print("## SSE: per-event latency, backend write to client read\n")
    print("| streams | target | p50 µs | p99 µs | added p50 µs | "
          "added p99 µs |")
    print("|---:|---|---:|---:|---:|---:|")
    for s in sorted({r["streams"] for r in sse}, key=int):
        base = {(r["round"]): r for r in sse
                if r["streams"] == s and r["target"] == "direct"}
        add = {}
        for t in targets:
            rs = [r for r in sse if r["streams"] == s and r["target"] == t]
            a50 = [float(r["p50_us"]) - float(base[r["round"]]["p50_us"])
                   for r in rs if r["round"] in base]
            a99 = [float(r["p99_us"]) - float(base[r["round"]]["p99_us"])
                   for r in rs if r["round"] in base]
            add[t] = (a50, a99)
            print(f"| {s} | {names[t]} | {spread(col(rs, 'p50_us'), 1)} | "
                  f"{spread(col(rs, 'p99_us'), 1)} | "
                  f"{spread(a50, 1) if t != 'direct' else '—'} | "
                  f"{spread(a99, 1) if t != 'direct' else '—'} |")
        if have_sg:
            r = ratio(med(add["sgproxy"][0]), med(add["nginx"][0]))
            checks.append((f"sse: added per-event p50, {s} stream(s)", r,
                           r <= 1.25))
            r = ratio(med(add["sgproxy"][1]), med(add["nginx"][1]))
            checks.append((f"sse: added per-event p99, {s} stream(s) (info)",
                           r, None))
    print()

if rssr:
    print("## RSS over the long run (nginx backend, highest concurrency)\n")
    print("| target | RSS at 5 s kB | RSS at end kB | max kB | growth |")
    print("|---|---:|---:|---:|---:|")
    for t in ("nginx", "sgproxy"):
        v = [(int(r["second"]), int(r["rss_kb"])) for r in rssr
             if r["target"] == t]
        if not v:
            continue
        start = next((k for s, k in v if s >= 5), v[0][1])
        end = v[-1][1]
        g = end - start
        flat = g <= max(512, start * 0.02)
        print(f"| {names[t]} | {start:,} | {end:,} | "
              f"{max(k for _, k in v):,} | {g:+,} kB |")
        if t == "sgproxy":
            checks.append((f"RSS flat over {v[-1][0]} s (growth "
                           f"{g:+,} kB after 5 s)", float("nan"), flat))
    print()

perfs = sorted(f for f in os.listdir(OUT) if f.startswith("perf-")
               and f.endswith(".txt"))
if perfs:
    print("## Profiles (perf, self time, nginx backend)\n")
    for f in perfs:
        with open(os.path.join(OUT, f)) as fh:
            top = [ln.rstrip() for ln in fh if "%" in ln
                   and not ln.startswith("#")][:12]
        print(f"`{f}`:\n\n```")
        print("\n".join(top))
        print("```\n")

if checks and have_sg:
    print("## Targets\n")
    print("| target | ratio | met |")
    print("|---|---:|---|")
    for name, r, ok in checks:
        m = "—" if ok is None else ("yes" if ok else "**no**")
        if r != r and ok is not None and "RSS" not in name:
            m = "n/a (an added figure ≤ 0: noise)"
        print(f"| {name} | {fmt(r, 2)} | {m} |")
    print()
