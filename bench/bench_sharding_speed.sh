#!/usr/bin/env bash
# bench_sharding_speed.sh — step time of each ZeRO stage against plain data parallel at the same global batch
# (2 processes, 1 thread each, gpt2-en, 2 x 64 tokens per rank), median over the measured steps, with the bytes
# each rank sends per step.
#   bench/bench_sharding_speed.sh [steps]
set -uo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-6}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1
C=(--model_name_or_path gpt2-en --input_dir data/fortunes_ids.npz --max_seq_len 64 --micro_batch_size 2
   --global_batch_size 4 --max_steps $((STEPS + 1)) --logging_freq 1000)
printf '%-14s %12s %16s\n' layout "s/step" "MB sent/step"
for l in "dp2 --dp_degree 2" "stage1 --sharding_degree 2 --sharding_stage 1" \
         "stage2 --sharding_degree 2 --sharding_stage 2" "stage3 --sharding_degree 2 --sharding_stage 3"; do
  set -- $l
  name=$1; shift
  build/llm4d launch --nproc 2 --log_dir "$tmp/$name.log" -- train "${C[@]}" "$@" --output_dir "$tmp/$name" \
    >/dev/null 2>&1 || { echo "$name: run failed (see $tmp/$name.log)"; continue; }
  /usr/bin/python3 - "$tmp/$name/metrics.jsonl" "$name" <<'PY'
import json, statistics, sys
m = [d for d in map(json.loads, open(sys.argv[1])) if "step" in d][1:]
print(f"{sys.argv[2]:<14} {statistics.median(d['batch_cost'] for d in m):>12.3f} {m[-1]['comm_bytes'] / 1e6:>16.1f}")
PY
done
