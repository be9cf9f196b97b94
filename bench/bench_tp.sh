#!/usr/bin/env bash
# bench_tp.sh — tensor parallelism on GPT-2 345M (gpt2-medium-en): one process with 2 threads against 2 processes
# of 1 thread at mp_degree 2, sequence parallelism off and on, at the same micro-batch. Per layout: the step time
# (median of the measured steps), per-rank memory (model states, activations, peak resident set), and the bytes a
# rank sends per step against the formula (per layer 4 all-reduces of B x T x C without sequence parallelism,
# 4 all-gathers + 4 reduce-scatters with it; plus the embedding, the head's statistics and d ln_f, and the
# sequence-parallel partial gradients). The CPU and core count are printed: the machines here differ.
#   bench/bench_tp.sh [steps] [micro_batch] [seq_len]
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-4}
MB=${2:-2}
T=${3:-256}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
C=(--model_name_or_path gpt2-medium-en --input_dir data/fortunes_ids.npz --max_seq_len "$T" --micro_batch_size "$MB"
   --global_batch_size "$MB" --max_steps $((STEPS + 1)) --logging_freq 1 --save_steps -1)
echo "# gpt2-medium-en (345M), micro-batch $MB x $T, $(nproc) cores ($(lscpu | sed -n 's/^Model name: *//p'))"
run() { # name nproc threads args...
  local name=$1 np=$2 th=$3; shift 3
  OMP_NUM_THREADS=$th build/llm4d launch --nproc "$np" --log_dir "$tmp/$name.log" -- train "${C[@]}" "$@" \
    --output_dir "$tmp/$name" >/dev/null 2>&1 || { echo "$name: run failed (see its log)"; exit 1; }
}
run mp1 1 2
run mp2 2 1 --mp_degree 2
run mp2_sp 2 1 --mp_degree 2 --sequence_parallel true
/usr/bin/python3 - "$tmp" "$MB" "$T" <<'PY'
import glob, json, re, statistics, sys
tmp, B, T = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
V, C, L, P = 50257, 1024, 24, 1024
print(f"{'layout':<8} {'s/step':>8} {'tokens/s':>9} {'states MiB':>11} {'activ. MiB':>11} {'peak RSS MiB':>13} "
      f"{'MB sent':>8} {'formula MB':>11}")
def formula(M, sp):
    N = B * T
    if M == 1:
        return 0.0
    ar, half = 2 * (M - 1) / M, (M - 1) / M
    stats = ar * 3 * N
    if not sp:
        return 4 * (ar * (4 * L + 2) * N * C + stats + ar * 2)
    partial = L * 6 * C + P * C + 2 * C
    return 4 * (half * (8 * L + 4) * N * C + stats + ar * partial + ar * 2)
for name, M, sp in (("mp1", 1, False), ("mp2", 2, False), ("mp2_sp", 2, True)):
    m = [d for d in map(json.loads, open(f"{tmp}/{name}/metrics.jsonl")) if "step" in d][1:]
    cost = statistics.median(d["batch_cost"] for d in m)
    log0 = open(f"{tmp}/{name}.log/workerlog.0").read()
    st = re.search(r"model states per rank: ([\d.]+) MiB held.*activations: ([\d.]+) MiB", log0)
    rss = max(float(re.search(r"peak resident set size: ([\d.]+) MiB", open(p).read()).group(1))
              for p in glob.glob(f"{tmp}/{name}.log/workerlog.*"))
    print(f"{name:<8} {cost:>8.3f} {B * T / cost:>9.1f} {float(st.group(1)):>11.1f} {float(st.group(2)):>11.1f} "
          f"{rss:>13.1f} {m[-1]['comm_bytes'] / 1e6:>8.1f} {formula(M, sp) / 1e6:>11.1f}")
PY
