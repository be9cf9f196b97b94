#!/usr/bin/env bash
# bench_train.sh — GPT-2 124M (gpt2-en) training throughput on this CPU: llm4d against PyTorch CPU (same threads,
# fp32), at B=4 T=64 and B=8 T=1024, in one run so that machine noise affects both; plus the fraction of the fp32
# matmul peak (measured here by bench/matmul_peak) that llm4d reaches (MFU, 6 x params + attention FLOPs/token).
#   bench/bench_train.sh [threads] [steps]     (build first: ./scripts/setup.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${1:-$(nproc)}
STEPS=${2:-3}
PY=/usr/bin/python3
export OMP_NUM_THREADS=$THREADS
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

peak=$(build/matmul_peak | awk '/^fp32_peak_gflops:/ {print $2}')
echo "fp32 matmul peak (oneDNN, $THREADS threads): $peak GFLOP/s"
printf '%-12s %14s %14s %8s %8s %12s %12s\n' shape llm4d_tok/s torch_tok/s ratio MFU llm4d_MiB torch_MiB
for shape in "4 64" "8 1024"; do
  set -- $shape
  B=$1 T=$2
  /usr/bin/time -f "%M" -o "$tmp/rss" build/llm4d train --model_name_or_path gpt2-en --input_dir data/fortunes_ids.npz \
      --output_dir "$tmp/out" --max_seq_len "$T" --micro_batch_size "$B" --global_batch_size "$B" \
      --max_steps $((STEPS + 1)) --logging_freq 1000 --threads "$THREADS" >"$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }
  ours=$($PY - "$tmp/out/metrics.jsonl" <<'PY'
import json, statistics, sys
m = [json.loads(l) for l in open(sys.argv[1])][1:]
print(statistics.median(x["batch_cost"] for x in m), m[0]["flops_per_token"])
PY
)
  set -- $ours
  our_sec=$1 fpt=$2
  our_rss=$(( $(cat "$tmp/rss") / 1024 ))
  theirs=$($PY bench/torch_gpt_step.py --B "$B" --T "$T" --steps "$STEPS" --threads "$THREADS")
  torch_sec=$(echo "$theirs" | awk '/^torch_step_sec:/ {print $2}')
  torch_rss=$(echo "$theirs" | awk '/^torch_peak_rss_mib:/ {printf "%d", $2}')
  $PY - "$B" "$T" "$our_sec" "$torch_sec" "$fpt" "$peak" "$our_rss" "$torch_rss" <<'PY'
import sys
B, T, ours, theirs, fpt, peak, orss, trss = sys.argv[1:]
B, T, ours, theirs, fpt, peak = int(B), int(T), float(ours), float(theirs), float(fpt), float(peak)
tok = B * T
mfu = tok / ours * fpt / (peak * 1e9)
print(f"{'B=%d T=%d' % (B, T):<12} {tok / ours:14.1f} {tok / theirs:14.1f} {theirs / ours:8.2f} {mfu * 100:7.1f}% {orss:>12} {trss:>12}")
PY
done
