#!/usr/bin/python3
"""dp_report.py — the report of bench/bench_dp.sh, from the runs it made.

Each run directory holds out/metrics.jsonl (rank 0: step time, bytes sent per step) and, for data-parallel runs,
log/workerlog.<rank> with the `llm4d dp trace` lines that data_parallel.c prints with --dp_trace true. Those runs
use --dp_overlap alternate: odd steps overlap the bucket all-reduces with backward, even steps run the same
buckets as blocking all-reduces after backward, so both modes are measured in one job under the same machine
load. Every figure is a median over the steps after the warm-up (the machine is shared; single steps are noisy).

    dp_report.py --params P --warmup W --tokens TOKENS_PER_RANK_STEP --load "..." NAME=DIR ...
NAME: dp1t1, dp1t2 (one process, 1 or 2 threads), dp2 (2 ranks x 1 thread), dp2ring (the same with libnbc's
ring algorithm forced). LLM4D_BENCH_VERBOSE=1 prints every traced step on stderr.
"""
import argparse
import json
import os
import re
import statistics as st
import sys

ap = argparse.ArgumentParser()
ap.add_argument("--params", type=int, required=True)
ap.add_argument("--warmup", type=int, required=True)
ap.add_argument("--tokens", type=int, required=True)
ap.add_argument("--load", default="")
ap.add_argument("runs", nargs="+")
a = ap.parse_args()
runs = dict(r.split("=", 1) for r in a.runs)
med = lambda xs: st.median(xs) if xs else float("nan")
# standard error of a median (normal approximation): how far apart two medians may be by noise alone
se = lambda xs: 1.2533 * st.stdev(xs) / len(xs) ** 0.5 if len(xs) > 1 else float("nan")
TRACE = re.compile(r"llm4d dp trace: rank (\d+) (overlap|blocking) backward ([\d.]+) s, (\d+) progress calls, "
                   r"wait ([\d.]+) s, comm ([\d.]+) s, buckets \(MB start done\):(.*)")


def metrics(d):
    return [json.loads(line) for line in open(os.path.join(d, "out", "metrics.jsonl"))]


def traces(d):
    per_rank = []
    r = 0
    while os.path.exists(os.path.join(d, "log", f"workerlog.{r}")):
        steps = []
        for line in open(os.path.join(d, "log", f"workerlog.{r}")):
            m = TRACE.search(line)
            if m:
                b = [float(x) for x in m.group(7).split()]
                steps.append({"mode": m.group(2), "backward": float(m.group(3)), "wait": float(m.group(5)),
                              "comm": float(m.group(6)), "buckets": [b[i:i + 3] for i in range(0, len(b), 3)]})
        per_rank.append(steps)
        r += 1
    return per_rank


def dp_summary(d):
    """Per mode: median step time (rank 0), and per rank the medians of wait, comm, backward, last bucket."""
    m, tr = metrics(d), traces(d)
    out = {"bytes": m[-1]["comm_bytes"], "nproc": len(tr), "buckets": [b[0] for b in tr[0][0]["buckets"]]}
    for mode in ("overlap", "blocking"):
        idx = [i for i, s in enumerate(tr[0]) if i >= a.warmup and s["mode"] == mode]
        steps = [m[i]["batch_cost"] for i in idx]
        o = {"n": len(idx), "step": med(steps), "step_se": se(steps)}
        for key in ("wait", "comm", "backward"):
            o[key] = st.mean(med([t[i][key] for i in idx]) for t in tr)
        o["last"] = st.mean(med([t[i]["buckets"][-1][2] - t[i]["buckets"][-1][1] for i in idx]) for t in tr)
        out[mode] = o
        if os.environ.get("LLM4D_BENCH_VERBOSE"):
            for r, t in enumerate(tr):
                for i in idx:
                    s = t[i]
                    print(f"{os.path.basename(d)} rank {r} step {i + 1} {mode}: backward {s['backward']:.3f} "
                          f"wait {s['wait']:.3f} comm {s['comm']:.3f} | buckets start-done "
                          + " ".join(f"{b[1]:.2f}-{b[2]:.2f}" for b in s["buckets"]), file=sys.stderr)
    return out


print(f"machine: {os.cpu_count()} cores, shared; load average {a.load}")
print(f"figures: medians over steps {a.warmup + 1}.. of each run\n")
rows = []
for name, label, nproc in (("dp1t1", "dp1, 1 thread", 1), ("dp1t2", "dp1, 2 threads", 1)):
    if name in runs:
        m = metrics(runs[name])[a.warmup:]
        rows.append((label, med([x["batch_cost"] for x in m]), nproc))
dps = {name: dp_summary(runs[name]) for name in ("dp2", "dp2ring") if name in runs}
for name, s in dps.items():
    tag = "" if name == "dp2" else ", libnbc ring"
    rows.append((f"dp2 x 1 thread, overlapped{tag}", s["overlap"]["step"], 2))
    rows.append((f"dp2 x 1 thread, blocking{tag}", s["blocking"]["step"], 2))
print(f"{'run':<42} {'step s':>8} {'tokens/s (job)':>15} {'vs dp1 1 thread':>16}")
base = rows[0][1] if rows and rows[0][0].startswith("dp1, 1") else None
for label, step, nproc in rows:
    tps = nproc * a.tokens / step
    rel = f"{tps / (a.tokens / base):.2f}x" if base else ""
    print(f"{label:<42} {step:8.3f} {tps:15.1f} {rel:>16}")

for name, s in dps.items():
    n = s["nproc"]
    ring = 2 * a.params * 4 * (n - 1) / n
    ov, bl = s["overlap"], s["blocking"]
    last_share = s["buckets"][-1] / sum(s["buckets"])
    A, E = bl["wait"], ov["wait"]
    print(f"\n== {name}{' (OMPI_MCA_coll_libnbc_iallreduce_algorithm=1: ring)' if name == 'dp2ring' else ''}: "
          f"{n} ranks, {ov['n']} overlapped and {bl['n']} blocking steps")
    print(f"bytes sent per step per rank: {s['bytes']} measured (communicator stats) vs ring formula "
          f"2 x {a.params} params x 4 B x ({n}-1)/{n} = {ring:.0f} ({100 * (s['bytes'] - ring) / ring:+.3f} %; "
          f"the rest is the loss and token-count all-reduces)")
    print(f"buckets: {len(s['buckets'])} ({' '.join(f'{x:.1f}' for x in s['buckets'])} MB, in backward order); "
          f"the last one holds the embeddings ({100 * last_share:.1f} % of the bytes) and is complete only when "
          f"backward ends")
    print(f"A  all-reduce time, blocking steps (all buckets after backward):        {A:.3f} s "
          f"(of which the last bucket {bl['last']:.3f} s)")
    print(f"E  exposed wait, overlapped steps (blocked in llm4d_dp_finish):          {E:.3f} s "
          f"(of which the last bucket {ov['last']:.3f} s)")
    print(f"   time in comm calls during backward, overlapped steps (starts, tests):  {ov['comm'] - E:.3f} s "
          f"(backward {ov['backward']:.3f} s vs {bl['backward']:.3f} s in blocking steps)")
    print(f"hidden fraction (wait)  1 - E / A = {1 - E / A:.2f}")
    print(f"   the share of the all-reduce time that no longer appears as waiting after backward; A and E are "
          f"means over ranks of per-rank medians and both include waiting for the slower rank")
    noise = (bl["step_se"] ** 2 + ov["step_se"] ** 2) ** 0.5 / A
    print(f"hidden fraction (step)  (T_blocking - T_overlapped) / A = "
          f"({bl['step']:.3f} - {ov['step']:.3f}) / {A:.3f} = {(bl['step'] - ov['step']) / A:.2f} "
          f"+- {noise:.2f} (standard error of the step-time medians / A)")
    print(f"   the share of the all-reduce time actually removed from the step: lower than the wait-based figure "
          f"when the reduction work done inside the progress calls lengthens backward instead")
    print(f"upper bound of either: 1 - (last bucket's share of A) = {1 - bl['last'] / A:.2f} "
          f"(the embeddings bucket cannot overlap backward)")
