#!/usr/bin/env bash
# bench_sharding_memory.sh — the seeds' memory table for a model large enough to matter here (default gpt3-350m,
# 355M parameters): model-state bytes per rank (params + grads + optimizer, from llm4d's memory arenas) with
# sharding off and at N = 2, 4, 8 processes for each stage, next to the ZeRO formulas, plus the declared
# communication buffers. Each configuration only builds the run (the table is printed before step 1) and is then
# stopped. Layouts whose total does not fit in this machine's memory are listed as skipped.
#   bench/bench_sharding_memory.sh [preset]
set -uo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-gpt3-350m}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1
mem_kib=$(awk '/MemAvailable/ {print $2}' /proc/meminfo)
COMMON=(--model_name_or_path "$MODEL" --input_dir data/fortunes_ids.npz --max_seq_len 32 --max_steps 20
        --logging_freq 1000)
printf '%-22s %6s %4s %14s %14s %10s %12s\n' layout stage N "states MiB" "formula MiB" "diff %" "comm MiB"
run() { # name nproc stage
  local name=$1 np=$2 stage=$3
  local tag="s${stage}_n${np}"
  local args=("${COMMON[@]}" --micro_batch_size 1 --global_batch_size "$np" --output_dir "$tmp/$tag")
  [ "$np" -gt 1 ] && args+=(--sharding_degree "$np" --sharding_stage "$stage")
  if [ "$np" -gt 1 ]; then
    build/llm4d launch --nproc "$np" --log_dir "$tmp/$tag.log" -- train "${args[@]}" >/dev/null 2>&1 &
  else
    mkdir -p "$tmp/$tag.log"; build/llm4d train "${args[@]}" >"$tmp/$tag.log/workerlog.0" 2>&1 &
  fi
  local pid=$! line=""
  for _ in $(seq 1 600); do
    line=$(grep -h "model states per rank" "$tmp/$tag.log/workerlog.0" 2>/dev/null | head -1)
    [ -n "$line" ] && break
    kill -0 $pid 2>/dev/null || break
    sleep 0.5
  done
  pkill -TERM -P $pid 2>/dev/null; kill $pid 2>/dev/null; wait $pid 2>/dev/null
  pkill -f "output_dir $tmp/$tag" 2>/dev/null; sleep 1
  if [ -z "$line" ]; then printf '%-22s %6s %4s %s\n' "$name" "$stage" "$np" "(no start-up line: see the log)"; return; fi
  /usr/bin/python3 - "$line" "$name" "$stage" "$np" <<'PY'
import re, sys
line, name, stage, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
m = re.search(r"([\d.]+) MiB held; ZeRO formula .*?Psi = (\d+)\): ([\d.]+) MiB; communication buffers: ([\d.]+) MiB", line)
held, psi, comm = float(m.group(1)), int(m.group(2)), float(m.group(4))
f = (16 * psi if n == 1 else {1: 8 * psi + 8 * psi / n, 2: 4 * psi + 12 * psi / n, 3: 16 * psi / n}[stage]) / 2**20
print(f"{name:<22} {stage if n > 1 else '-':>6} {n:>4} {held:>14.1f} {f:>14.1f} {100 * (held - f) / f:>9.2f}% {comm:>12.1f}")
PY
}
run "sharding off (1 proc)" 1 0
for stage in 1 2 3; do
  for n in 2 4 8; do
    # skip what cannot fit: the whole job's model states (formula) must leave room in MemAvailable
    need_kib=$(/usr/bin/python3 -c "
n, s, psi = $n, $stage, 360e6
per = {1: 8 * psi + 8 * psi / n, 2: 4 * psi + 12 * psi / n, 3: 16 * psi / n}[s]
print(int(n * per * 1.3 / 1024))")
    if [ "$need_kib" -gt "$mem_kib" ]; then
      printf '%-22s %6s %4s %s\n' "stage $stage N=$n" "$stage" "$n" "skipped: needs ~$((need_kib / 1048576)) GiB for $n ranks, $((mem_kib / 1048576)) GiB available"
      continue
    fi
    run "stage $stage N=$n" "$n" "$stage"
  done
done
