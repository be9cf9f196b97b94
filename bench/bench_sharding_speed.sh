#!/usr/bin/env bash
# bench_sharding_speed.sh — step time of each ZeRO stage against plain data parallel at the same global batch
# (2 processes, 1 thread each, gpt2-en, 2 x 64 tokens per rank), median over the measured steps, with the bytes
# each rank sends per step, the time blocked in parameter gathers and in gradient reduce-scatters. Each stage runs
# twice: with its collectives non-blocking (reduce-scatters started as each gradient window closes and waited on
# only when the buffer is needed again; stage 3's next gather prefetched) and with every one of them blocking
# (--zero_overlap false --zero_prefetch false). The fraction hidden is 1 - (blocked time overlapped) / (blocked time
# blocking).
#
# What 2 ranks on 2 cores can hide: Open MPI's shared-memory transport moves the bytes with the CPU of the ranks
# themselves, inside MPI calls (the hooks test outstanding requests between kernels), and both cores are busy
# computing; so overlap only hides the waiting for the slower rank and the part of the copy done inside those test
# calls, not the copy itself, which a machine with a network (or a GPU with NCCL) would take off the cores.
#   bench/bench_sharding_speed.sh [steps]
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-6}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1
C=(--model_name_or_path gpt2-en --input_dir data/fortunes_ids.npz --max_seq_len 64 --micro_batch_size 2
   --global_batch_size 4 --max_steps $((STEPS + 1)) --logging_freq 1000 --save_steps -1)
echo "# gpt2-en, 2 ranks x 1 thread, $(lscpu | sed -n 's/^Model name: *//p')"
printf '%-22s %8s %13s %15s %18s\n' layout "s/step" "MB sent/step" "gather wait s" "reduce-scatter s"
for l in "dp2 --dp_degree 2" \
         "stage1 --sharding_degree 2 --sharding_stage 1" "stage1_blocking --sharding_degree 2 --sharding_stage 1" \
         "stage2 --sharding_degree 2 --sharding_stage 2" "stage2_blocking --sharding_degree 2 --sharding_stage 2" \
         "stage3 --sharding_degree 2 --sharding_stage 3" "stage3_blocking --sharding_degree 2 --sharding_stage 3"; do
  set -- $l
  name=$1; shift
  case $name in *_blocking) set -- "$@" --zero_overlap false --zero_prefetch false ;; esac
  build/llm4d launch --nproc 2 --log_dir "$tmp/$name.log" -- train "${C[@]}" "$@" \
    --output_dir "$tmp/$name" >/dev/null 2>&1 || { echo "$name: run failed (see $tmp/$name.log)"; exit 1; }
  /usr/bin/python3 - "$tmp/$name/metrics.jsonl" "$name" <<'PY'
import json, statistics, sys
m = [d for d in map(json.loads, open(sys.argv[1])) if "step" in d][1:]
med = lambda k: statistics.median(d.get(k, 0.0) for d in m)
print(f"{sys.argv[2]:<22} {med('batch_cost'):>8.3f} {m[-1]['comm_bytes'] / 1e6:>13.1f} "
      f"{med('zero_gather_wait_s'):>15.3f} {med('zero_reduce_scatter_s'):>18.3f}")
with open(sys.argv[1] + ".wait", "w") as f:
    f.write(f"{med('zero_gather_wait_s')} {med('zero_reduce_scatter_s')}")
PY
done
/usr/bin/python3 - "$tmp" <<'PY'
import sys
tmp = sys.argv[1]
w = lambda n: [float(x) for x in open(f"{tmp}/{n}/metrics.jsonl.wait").read().split()]
for s in (1, 2, 3):
    (g1, r1), (g0, r0) = w(f"stage{s}"), w(f"stage{s}_blocking")
    line = f"stage {s}: reduce-scatter time hidden 1 - {r1:.3f} / {r0:.3f} = {1 - r1 / r0:.2f}" if r0 > 0 else \
           f"stage {s}: no reduce-scatter time"
    if s == 3 and g0 > 0:
        line += f"; gather time hidden by the prefetch 1 - {g1:.3f} / {g0:.3f} = {1 - g1 / g0:.2f}"
    print(line)
PY
