#!/usr/bin/env bash
# bench_sharding_memory.sh — the seeds' memory table for a model large enough to matter here (default gpt3-350m,
# 355M parameters): per rank, the model states (params + grads + optimizer, from llm4d's memory arena) next to the
# ZeRO formula, the communication buffers, the activations and the measured peak resident set size (the most of
# any rank), with sharding off and at N = 2, 4, 8 processes for each stage, with and without offload; plus the step
# time (the mean of steps 2..3, all ranks on this machine's cores). Every layout trains 3 steps of micro-batch 1 x 32
# tokens (no checkpoint). Layouts whose states do not fit in this machine's memory are listed as skipped.
#   bench/bench_sharding_memory.sh [preset] [N ...]        (STAGES="3" bench/... runs only those stages)
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-gpt3-350m}
shift || true
NS=("$@")
[ ${#NS[@]} -gt 0 ] || NS=(2 4 8)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1
mem_kib=$(awk '/MemAvailable/ {print $2}' /proc/meminfo)
COMMON=(--model_name_or_path "$MODEL" --input_dir data/fortunes_ids.npz --max_seq_len 32 --max_steps 3
        --logging_freq 1 --save_steps -1 --micro_batch_size 1)
echo "# $MODEL, micro-batch 1 x 32, $(nproc --all) cores ($(lscpu | sed -n 's/^Model name: *//p'))"
printf '%-26s %5s %3s %10s %10s %9s %9s %9s %8s\n' layout stage N "states" "formula" "comm" "activ." "peak RSS" "step s"
printf '%-26s %5s %3s %10s %10s %9s %9s %9s %8s\n' "" "" "" "MiB" "MiB" "MiB" "MiB" "MiB" ""
run() { # name nproc stage offload
  local name=$1 np=$2 stage=$3 off=$4
  local tag="s${stage}_n${np}_o${off}"
  local args=("${COMMON[@]}" --global_batch_size "$np" --output_dir "$tmp/$tag")
  [ "$np" -gt 1 ] && args+=(--sharding_degree "$np" --sharding_stage "$stage" --sharding_offload "$off"
                            --offload_dir "$tmp")
  local rc=0
  if [ "$np" -gt 1 ]; then
    build/llm4d launch --nproc "$np" --log_dir "$tmp/$tag.log" -- train "${args[@]}" >/dev/null 2>&1 || rc=$?
  else
    mkdir -p "$tmp/$tag.log"
    build/llm4d train "${args[@]}" >"$tmp/$tag.log/workerlog.0" 2>&1 || rc=$?
  fi
  if [ $rc != 0 ]; then
    printf '%-26s %5s %3s failed (exit %d): %s\n' "$name" "$stage" "$np" $rc "$(tail -1 "$tmp/$tag.log/workerlog.0")"
    return 1
  fi
  /usr/bin/python3 - "$tmp/$tag.log" "$name" "$stage" "$np" <<'PY'
import glob, re, sys
d, name, stage, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
log0 = open(f"{d}/workerlog.0").read()
m = re.search(r"model states per rank: ([\d.]+) MiB held; ZeRO formula .*?Psi = (\d+)\): ([\d.]+) MiB; "
              r"communication buffers: ([\d.]+) MiB; activations: ([\d.]+) MiB", log0)
held, psi, comm, act = float(m.group(1)), int(m.group(2)), float(m.group(4)), float(m.group(5))
f = (16 * psi if n == 1 else {1: 8 * psi + 8 * psi / n, 2: 4 * psi + 12 * psi / n, 3: 16 * psi / n}[stage]) / 2**20
rss = max(float(re.search(r"peak resident set size: ([\d.]+) MiB", open(p).read()).group(1))
          for p in glob.glob(f"{d}/workerlog.*"))
costs = [float(x) for x in re.findall(r"global step [23], .*?avg_batch_cost: ([\d.]+) sec", log0)]
print(f"{name:<26} {stage if n > 1 else '-':>5} {n:>3} {held:>10.1f} {f:>10.1f} {comm:>9.1f} {act:>9.1f} "
      f"{rss:>9.1f} {sum(costs) / len(costs):>8.2f}")
PY
}
fits() { # nproc stage offload: whether n ranks' states (x1.3 for the rest) fit in MemAvailable
  /usr/bin/python3 -c "
n, s, off, psi = $1, $2, $3, 360e6
per = 16 * psi if n == 1 else {1: 8 * psi + 8 * psi / n, 2: 4 * psi + 12 * psi / n, 3: 16 * psi / n}[s]
if off: per -= (8 if s < 3 else 12) * psi / n
exit(0 if n * per * 1.3 / 1024 < $mem_kib else 1)"
}
run "sharding off (1 proc)" 1 0 False
for stage in ${STAGES:-1 2 3}; do
  for off in False True; do
    for n in "${NS[@]}"; do
      name="stage $stage N=$n$([ $off = True ] && echo ' offload' || true)"
      if ! fits "$n" "$stage" "$([ $off = True ] && echo 1 || echo 0)"; then
        printf '%-26s %5s %3s skipped: the %d ranks'"'"' states do not fit in %d GiB available\n' "$name" "$stage" "$n" \
          "$n" $((mem_kib / 1048576))
        continue
      fi
      run "$name" "$n" "$stage" "$off" || true # a layout llm4d's memory plan refuses is listed with its line
    done
  done
done
