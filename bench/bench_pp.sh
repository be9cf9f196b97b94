#!/usr/bin/env bash
# bench_pp.sh — the pipeline bubble, measured: pp2 (2 processes x 1 thread) with 1F1B, interleaved 1F1B (2 chunks
# per stage) and ZB-H1, at M = 4, 8 and 16 micro-batches per step, on GPT-2 124M's blocks (12 x hidden 768,
# sequence 64, micro-batch 1) with a 1024-token vocabulary, so that the LM head (50257 rows would cost as much as
# 5.5 blocks on the last stage) does not unbalance the stages: the bubble is then the schedule's own.
#
# Per stage: the time it computed and the time it waited for its neighbour inside the step's schedule (the
# executor's own clocks), the bubble = waiting / (waiting + computing), against the theory from the same stage's
# measured times of one forward (F), one backward (B: with the weight gradients, or without them under ZB-H1) and
# one weight pass (W):
#     1F1B         (P-1)(F+B) / (M(F+B) + (P-1)(F+B))          = (P-1)/(M+P-1)
#     interleaved  (P-1)(F+B)/V over M(F+B) + that               = (P-1)/(V M+P-1)   (F, B per chunk x V)
#     ZB-H1        (P-1)(F+B-W) / (M(F+B+W) + (P-1)(F+B-W))      (Qi et al. 2023: about a third of 1F1B's at F=B=W)
# and the stage's activation memory (slots x bytes per slot). Then what ZeRO costs inside a pipeline: the bytes
# rank 0 sends per step at pp2 x sharding2, stages 1, 2 and 3, for M = 2, 4 and 8 (gpt2-tiny, 8 blocks): stage 1
# reduces once per step, stages 2 and 3 once per micro-batch (and stage 3 gathers twice per micro-batch).
#   bench/bench_pp.sh [steps] [seq_len]
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-3}
T=${2:-64}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "# pp2, 2 processes x 1 thread; $(nproc) cores ($(lscpu | sed -n 's/^Model name: *//p'))"
# the fortunes corpus with its token ids folded into 1024 (the bench measures time, not language)
/usr/bin/python3 - "$tmp/small.npz" <<'PY'
import sys, numpy as np
d = np.load("data/fortunes_ids.npz")
np.savez(sys.argv[1], ids=(d["ids"] % 1024).astype(np.uint16), lens=d["lens"])
PY
run() { # name nproc args...
  local name=$1 np=$2; shift 2
  OMP_NUM_THREADS=1 build/llm4d launch --nproc "$np" --log_dir "$tmp/$name.log" -- train --logging_freq 1 \
    --save_steps -1 --output_dir "$tmp/$name" "$@" >/dev/null 2>&1 || { echo "$name: run failed"; exit 1; }
}
for M in 4 8 16; do
  for s in 1F1B interleaved ZBH1; do
    V=1; [ $s = interleaved ] && V=2
    run "${s}_$M" 2 --model_name_or_path gpt2-en -o Model.vocab_size=1024 --input_dir "$tmp/small.npz" \
      --max_seq_len "$T" --micro_batch_size 1 --global_batch_size "$M" --max_steps $((STEPS + 1)) \
      --pp_degree 2 --pp_schedule $s --virtual_pp_degree $V
  done
done
for st in 0 1 2 3; do
  for M in 2 4 8; do
    sh=2; [ $st = 0 ] && sh=1
    np=$((2 * sh))
    run "zero${st}_$M" $np --model_name_or_path gpt2-tiny -o Model.num_layers=8 --input_dir data/fortunes_ids.npz \
      --max_seq_len 32 --micro_batch_size 1 --global_batch_size $((M * sh)) --max_steps 2 --pp_degree 2 \
      --sharding_degree $sh --sharding_stage $((st > 0 ? st : 1))
  done
done
/usr/bin/python3 - "$tmp" <<'PY'
import json, re, sys
tmp, P = sys.argv[1], 2
print(f"\n{'schedule':<12} {'M':>3} {'stage':>5} {'s/step':>7} {'compute s':>9} {'wait s':>7} {'bubble':>7} "
      f"{'theory':>7} {'F s':>7} {'B s':>7} {'W s':>7} {'activ. MiB':>10} {'slots':>5}")
for M in (4, 8, 16):
    for s in ("1F1B", "interleaved", "ZBH1"):
        V = 2 if s == "interleaved" else 1
        for stage in range(P):
            log = open(f"{tmp}/{s}_{M}.log/workerlog.{stage}").read()
            per = re.search(r"per step ([\d.]+) s, computing ([\d.]+) s, waiting for its neighbours ([\d.]+) s", log)
            ops = re.search(r"one forward ([\d.]+) s, one backward ([\d.]+) s(?: \(input gradients\), one weight pass "
                            r"([\d.]+) s)?", log)
            act = re.search(r"alive at once per chunk:((?: \d+ \(of \d+ slots\))+); activations ([\d.]+) MiB", log)
            step, comp, wait = map(float, per.groups())
            F, B, W = (float(x or 0) for x in ops.groups())
            if s == "ZBH1":
                bub = (P - 1) * (F + B - W)
                theory = bub / (M * (F + B + W) + bub)
            else:  # per chunk times; a stage runs V chunks per micro-batch
                bub = (P - 1) * (F + B)
                theory = bub / (M * V * (F + B) + bub)
            slots = "+".join(re.findall(r"of (\d+) slots", act.group(1)))
            print(f"{s:<12} {M:>3} {stage:>5} {step:>7.3f} {comp:>9.3f} {wait:>7.3f} {wait / (wait + comp):>7.1%} "
                  f"{theory:>7.1%} {F:>7.4f} {B:>7.4f} {W:>7.4f} {float(act.group(2)):>10.1f} {slots:>5}")
print("\nZeRO inside a pipeline (gpt2-tiny, 8 blocks, pp2 x sharding2; rank 0 = stage 0, 4 blocks + embeddings):")
print(f"{'sharding':<10} " + " ".join(f"{'MB sent M=' + str(M):>13}" for M in (2, 4, 8)) + f" {'per micro-batch':>16}")
for st in (0, 1, 2, 3):
    b = []
    for M in (2, 4, 8):
        m = [d for d in map(json.loads, open(f"{tmp}/zero{st}_{M}/metrics.jsonl")) if "step" in d]
        b.append(m[-1]["comm_bytes"] / 1e6)
    name = "none" if st == 0 else f"stage {st}"
    print(f"{name:<10} " + " ".join(f"{x:>13.2f}" for x in b) + f" {(b[2] - b[0]) / 6:>16.3f}")
PY
