#!/usr/bin/env bash
# bench_dp.sh — data parallel on this machine: the same per-rank batch with dp = 1 (1 and 2 OpenMP threads) and
# dp = 2 (two ranks of 1 thread, through `llm4d launch`), then the step time, the bytes each rank sends per step
# against the ring all-reduce formula, the all-reduce time and how much of it is hidden behind backward.
#
# The dp = 2 job runs with --dp_overlap alternate (data_parallel.h): odd steps overlap the bucket all-reduces
# with backward as training does, even steps reduce the same buckets with blocking all-reduces after backward.
# The blocking steps give the standalone all-reduce time A; the overlapped steps the exposed wait E; both come
# from the `llm4d dp trace` lines (--dp_trace true) of every rank. Measuring both modes in one job, step by
# step, keeps the comparison fair on a machine whose load changes from minute to minute. A second dp = 2 job
# forces Open MPI's ring algorithm for the non-blocking all-reduce (its default for 2-3 ranks or in-place
# buffers is a binomial reduce to rank 0 plus a broadcast, which leaves rank 0 all the reduction work); skip it
# with DP_BENCH_RING=0.
#   bench/bench_dp.sh [model] [micro_batch] [max_seq_len] [steps]      (defaults: gpt2-en 2 64 16)
# gpt2-en at 2 x 64 tokens per rank is about 1-3 s a step with one thread on this 2-core machine, and its
# gradients (124 M parameters, 498 MB) make the communication worth measuring. Takes 3-5 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-gpt2-en}
MB=${2:-2}
T=${3:-64}
STEPS=${4:-16}
WARMUP=2
PY=/usr/bin/python3
LLM4D=${LLM4D:-build/llm4d}
[ -x "$LLM4D" ] || { echo "bench_dp: $LLM4D not built (cmake -S . -B build && cmake --build build -j2)"; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
COMMON=(--model_name_or_path "$MODEL" --input_dir data/fortunes_ids.npz --max_seq_len "$T" --micro_batch_size "$MB"
        --max_steps "$STEPS" --logging_freq 1000 --seed 1)
load0=$(cut -d' ' -f1-3 /proc/loadavg)

single() { # name threads
  echo "bench_dp: dp1, $2 thread(s) ..." >&2
  OMP_NUM_THREADS=$2 "$LLM4D" train "${COMMON[@]}" --global_batch_size "$MB" --threads "$2" --output_dir "$tmp/$1/out" \
    >"$tmp/$1.log" 2>&1 || { cat "$tmp/$1.log"; exit 1; }
}
dp2() { # name [env...]
  local name=$1
  shift
  echo "bench_dp: dp2 x 1 thread $* ..." >&2
  env "$@" OMP_NUM_THREADS=1 "$LLM4D" launch --nproc 2 \
    --log_dir "$tmp/$name/log" -- train "${COMMON[@]}" --global_batch_size $((2 * MB)) --dp_degree 2 --threads 1 \
    --dp_trace true --dp_overlap alternate \
    --output_dir "$tmp/$name/out" >"$tmp/$name.log" 2>&1 || { tail -5 "$tmp/$name.log"; return 1; }
}
single dp1t1 1
single dp1t2 2
dp2 dp2 || exit 1
runs=(dp1t1="$tmp/dp1t1" dp1t2="$tmp/dp1t2" dp2="$tmp/dp2")
if [ "${DP_BENCH_RING:-1}" != 0 ]; then
  if dp2 dp2ring OMPI_MCA_coll_libnbc_iallreduce_algorithm=1; then
    runs+=(dp2ring="$tmp/dp2ring")
  else
    echo "bench_dp: the libnbc ring run failed (above); reporting the others" >&2
  fi
fi
params=$(sed -n 's/.*parameters: \([0-9]*\).*/\1/p' "$tmp/dp1t1.log" | head -1)
echo "model $MODEL ($params parameters), per-rank batch $MB x $T tokens, $STEPS steps per run"
$PY bench/dp_report.py --params "$params" --warmup "$WARMUP" --tokens $((MB * T)) \
  --load "$load0 at start, $(cut -d' ' -f1-3 /proc/loadavg) at end" "${runs[@]}"
