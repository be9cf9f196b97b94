#!/usr/bin/env bash
# bench_async_save.sh — what a checkpoint costs the step loop, synchronous against --async_save (issue 45's target:
# with --async_save a step that saves gpt2-en, 1.4 GB of state, takes at most 1.2x a step that does not).
#
# gpt2-en, T=64, one process, three runs of the same steps: without saves (none), saving every 2 steps synchronously
# (sync) and with --async_save (async); with REPEAT=R, R rounds of the three, alternated so that a change in a
# shared machine's load falls on all of them, their steps pooled. A step's time is its whole iteration, from the
# start of its batch to the start of the next, so a saving step includes its save (the synchronous write and fsync;
# the asynchronous snapshot and any wait for the previous writer) and a later step the publication of an
# asynchronous save. It comes from each step's log line (millisecond time stamps, written when its update is done)
# and its batch_cost in metrics.jsonl (the batch's start to that point). Step 1 (warm-up) and the last step (whose
# save the run waits for before exiting) are left out.
# The table: per run, the median of the saving (even) steps and of the others, each against the median step of the
# run without saves; the median time outside a step's own compute (iteration - batch_cost), which the machine's
# load moves much less than the compute; and the median compute, which the async writer thread raises on the steps
# it overlaps (it shares the cores). Then the synchronous save's stall and the async saves' snapshot, background
# write (wall and the writer's CPU) and publication times, from the logs.
#   [REPEAT=R] bench/bench_async_save.sh [threads] [steps] [global_batch] [micro_batch]
#   (defaults: R=1, 2 threads, 10 steps, gpt2-en.yaml's batch: 32 in micro-batches of 4; OUT_DIR=dir keeps the runs)
# Saving every 2 steps asks the disk for the 1.4 GB every 2 steps: when two steps take less than the disk needs to
# write it (B=4: 2 x 0.7 s on an idle 2-core Zen 5 VM, against 1.8 s for 1.4 GB even with O_DIRECT there), every
# save waits for the previous one, and no background writer can help.
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${1:-2}
STEPS=${2:-10}
B=${3:-32}
MB=${4:-4}
REPEAT=${REPEAT:-1}
BUILD=${BUILD:-build}
tmp=${OUT_DIR:-$(mktemp -d)}
mkdir -p "$tmp"
[ -n "${OUT_DIR:-}" ] || trap 'rm -rf "$tmp"' EXIT
C=(--model_name_or_path gpt2-en --input_dir data/fortunes_ids.npz --max_seq_len 64 --micro_batch_size "$MB"
   --global_batch_size "$B" --max_steps "$STEPS" --logging_freq 1 --eval_freq 0 --keep_last 2 --threads "$THREADS")
run() { # NAME ARGS...
  local name=$1
  shift
  rm -rf "$tmp/$name"
  "$BUILD"/llm4d train "${C[@]}" --output_dir "$tmp/$name" "$@" >"$tmp/$name.log" 2>&1 ||
    { tail -5 "$tmp/$name.log"; exit 1; }
  rm -rf "$tmp/$name"/step_* # the disk space, not the metrics
}
echo "# gpt2-en, T=64, global batch $B (micro $MB), 1 process x $THREADS threads, save every 2 steps, $STEPS steps, $REPEAT round(s); $(
  lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$REPEAT"); do
  run "none$r" --save_steps -1
  run "sync$r" --save_steps 2
  run "async$r" --save_steps 2 --async_save true
done
python3 - "$tmp" "$REPEAT" <<'PY'
import datetime, json, re, statistics, sys
tmp, repeat = sys.argv[1], int(sys.argv[2])
med = statistics.median
def ts(line):
    m = re.match(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]", line)
    return datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp() if m else None
res, extra = {}, {k: [] for k in ("stall", "snap", "wrote", "cpu", "pub")}
for name in ("none", "sync", "async"):
    sv, ot, out, compute = [], [], {0: [], 1: []}, []
    for r in range(1, repeat + 1):
        lines = open(f"{tmp}/{name}{r}.log").read().splitlines()
        step_t = {int(m.group(1)): ts(l) for l in lines if (m := re.search(r"- global step (\d+),", l))}
        cost = {j["step"]: j["batch_cost"] for j in map(json.loads, open(f"{tmp}/{name}{r}/metrics.jsonl"))}
        start = {s: step_t[s] - cost[s] for s in step_t}
        for s in start:
            if s > 1 and s + 1 in start:
                it = start[s + 1] - start[s]
                (sv if s % 2 == 0 else ot).append(it)
                out[s % 2].append(it - cost[s])
                compute.append(cost[s])
        last = max(step_t)
        if name == "sync":
            saved = {int(m.group(1)): ts(l) for l in lines if (m := re.search(r"saved checkpoint .*/step_(\d+)$", l))}
            extra["stall"] += [saved[s] - step_t[s] for s in saved if s in step_t and s < last]
        elif name == "async":
            extra["snap"] += [float(m.group(1)) for l in lines
                              if (m := re.search(r"snapshot of .* taken in ([\d.]+) s", l))]
            pub = [re.search(r"in the background in ([\d.]+) s, ([\d.]+) s of CPU; published at step (\d+) in "
                             r"([\d.]+) s", l) for l in lines]
            pub = [m for m in pub if m and int(m.group(3)) < last]
            extra["wrote"] += [float(m.group(1)) for m in pub]
            extra["cpu"] += [float(m.group(2)) for m in pub]
            extra["pub"] += [float(m.group(4)) for m in pub]
    res[name] = dict(sv=med(sv), ot=med(ot), sv_out=med(out[0]), ot_out=med(out[1]), compute=med(compute),
                     n=len(sv) + len(ot))
none_all = res["none"]
clean = med([none_all["sv"], none_all["ot"]])
print(f"{'run':6} {'saving steps s':>15} {'/ no saves':>10} {'other steps s':>14} {'/ no saves':>10}   "
      f"{'outside compute: saving':>23} {'other':>6}   {'compute s':>9}")
for name, r in res.items():
    print(f"{name:6} {r['sv']:15.3f} {r['sv'] / clean:9.2f}x {r['ot']:14.3f} {r['ot'] / clean:9.2f}x   "
          f"{r['sv_out']:23.3f} {r['ot_out']:6.3f}   {r['compute']:9.3f}   ({r['n']} steps)")
print(f"(the run without saves: median step {clean:.3f} s; 'saving steps' there are the even steps)")
print(f"async, a saving step against a step of the same run that does not save: {res['async']['sv'] / res['async']['ot']:.2f}x")
print(f"sync: the save's stall (log line of the step to 'saved checkpoint'): median {med(extra['stall']):.3f} s over "
      f"{len(extra['stall'])} saves")
if extra["wrote"]:
    print(f"async: snapshot median {med(extra['snap']):.3f} s; background write and fsync median "
          f"{med(extra['wrote']):.2f} s ({med(extra['cpu']):.2f} s of the writer's CPU); publication median "
          f"{med(extra['pub']):.3f} s")
PY
echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
