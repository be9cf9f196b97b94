#!/usr/bin/env bash
# Training the tiny preset on the shipped corpus for a few hundred steps brings the loss well below the corpus's
# unigram entropy (the loss of the best context-free model), i.e. the model learns to use context.
# Bound: the mean loss of the last 20 of 400 steps must be at least 0.5 nats below the unigram entropy.
# The same run's outputs carry the throughput report: every step has a positive model FLOPs utilisation (the cpu
# backend measures its matmul peak at start-up), and the log ends with the peak memory by category.
set -euo pipefail
SRC_DIR=${SRC_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
LLM4D=${LLM4D:-$SRC_DIR/build/llm4d}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$LLM4D" train -c "$SRC_DIR/configs/gpt2-tiny.yaml" --input_dir "$SRC_DIR/data/fortunes_ids.npz" \
    --output_dir "$tmp/out" --max_steps 400 --global_batch_size 16 --micro_batch_size 16 --max_lr 3e-3 \
    --min_lr 1e-4 --decay_steps 400 --logging_freq 100 --threads 2 >"$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }
grep 'global step' "$tmp/log"
/usr/bin/python3 - "$SRC_DIR/data/fortunes_ids.npz" "$tmp/out/metrics.jsonl" "$tmp/log" <<'PY'
import json, sys
import numpy as np
ids = np.load(sys.argv[1])["ids"].astype(np.int64)
p = np.bincount(ids) / ids.size
p = p[p > 0]
unigram = float(-(p * np.log(p)).sum())
m = [d for d in map(json.loads, open(sys.argv[2])) if "step" in d]
first, last = m[0]["loss"], sum(x["loss"] for x in m[-20:]) / 20
ok = last <= unigram - 0.5
print(f"{'PASS' if ok else 'FAIL'} loss: first step {first:.3f}, mean of last 20 steps {last:.3f}, "
      f"unigram entropy {unigram:.3f} nats (bound {unigram - 0.5:.3f})")
mfu = [x.get("mfu") for x in m]
ok_mfu = all(isinstance(v, float) and 0 < v <= 1 for v in mfu)  # a utilisation: above 1 is a wrong figure
print(f"{'PASS' if ok_mfu else 'FAIL'} mfu on every step: min {min(v or 0 for v in mfu):.4f}, "
      f"max {max(v or 0 for v in mfu):.4f}")
log = open(sys.argv[3]).read()
ok_mem = "peak memory of this process over the run, by category:" in log and "peak resident set size" in log
print(f"{'PASS' if ok_mem else 'FAIL'} the log ends with the peak memory by category and the peak RSS")
n_ok = int(ok) + int(ok_mfu) + int(ok_mem)
print(f"{n_ok} passed, {3 - n_ok} failed")
sys.exit(0 if n_ok == 3 else 1)
PY
