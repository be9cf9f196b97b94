#!/usr/bin/env bash
# bench_sharding_speed.sh — step time of each ZeRO stage against plain data parallel at the same global batch
# (2 processes, 1 thread each, gpt2-en, 2 x 64 tokens per rank), median over the measured steps, with the bytes
# each rank sends per step, the time blocked in parameter gathers and in gradient reduce-scatters. Stage 3 runs
# twice, with the next group's gather prefetched and with every gather blocking (LLM4D_ZERO_PREFETCH=0); the
# fraction of gather time hidden by the prefetch is 1 - (blocked time with prefetch) / (blocked time without).
#   bench/bench_sharding_speed.sh [steps]
set -uo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-6}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1
C=(--model_name_or_path gpt2-en --input_dir data/fortunes_ids.npz --max_seq_len 64 --micro_batch_size 2
   --global_batch_size 4 --max_steps $((STEPS + 1)) --logging_freq 1000)
printf '%-18s %10s %14s %16s %18s\n' layout "s/step" "MB sent/step" "gather wait s" "reduce-scatter s"
for l in "dp2 --dp_degree 2" "stage1 --sharding_degree 2 --sharding_stage 1" \
         "stage2 --sharding_degree 2 --sharding_stage 2" "stage3 --sharding_degree 2 --sharding_stage 3" \
         "stage3_no_prefetch --sharding_degree 2 --sharding_stage 3"; do
  set -- $l
  name=$1; shift
  if [ "$name" = stage3_no_prefetch ]; then export LLM4D_ZERO_PREFETCH=0; else unset LLM4D_ZERO_PREFETCH; fi
  build/llm4d launch --nproc 2 --log_dir "$tmp/$name.log" -- train "${C[@]}" "$@" --output_dir "$tmp/$name" \
    >/dev/null 2>&1 || { echo "$name: run failed (see $tmp/$name.log)"; continue; }
  /usr/bin/python3 - "$tmp/$name/metrics.jsonl" "$name" <<'PY'
import json, statistics, sys
m = [d for d in map(json.loads, open(sys.argv[1])) if "step" in d][1:]
med = lambda k: statistics.median(d.get(k, 0.0) for d in m)
print(f"{sys.argv[2]:<18} {med('batch_cost'):>10.3f} {m[-1]['comm_bytes'] / 1e6:>14.1f} "
      f"{med('zero_gather_wait_s'):>16.3f} {med('zero_reduce_scatter_s'):>18.3f}")
with open(sys.argv[1] + ".wait", "w") as f:
    f.write(str(med("zero_gather_wait_s")))
PY
done
unset LLM4D_ZERO_PREFETCH
if [ -f "$tmp/stage3/metrics.jsonl.wait" ] && [ -f "$tmp/stage3_no_prefetch/metrics.jsonl.wait" ]; then
  /usr/bin/python3 -c "
on, off = float(open('$tmp/stage3/metrics.jsonl.wait').read()), float(open('$tmp/stage3_no_prefetch/metrics.jsonl.wait').read())
print(f'stage 3 gather time hidden by the prefetch: 1 - {on:.3f} / {off:.3f} = {1 - on / off:.2f}' if off > 0 else 'no gather time')"
fi
echo "reduce-scatters are blocking (issued from backward as each group finishes): none of their time is hidden"
