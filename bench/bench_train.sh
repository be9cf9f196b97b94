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
# The peer must use an optimized BLAS: Debian's python3-torch calls the system libblas.so.3, which is the slow
# reference BLAS unless OpenBLAS provides it (the OpenMP build shares one thread pool, as llm4d's kernels do).
if ! dpkg-query -W -f='${Status}' libopenblas0-openmp 2>/dev/null | grep -q "install ok installed"; then
  echo "bench: installing libopenblas0-openmp so that PyTorch does not run on the reference BLAS"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q libopenblas0-openmp >/dev/null
fi
$PY -c "import torch, time; torch.set_num_threads($THREADS); a = torch.randn(2048, 2048); a @ a; t = time.time(); a @ a; \
print('PyTorch fp32 matmul (2048^3, %d threads): %.1f GFLOP/s' % ($THREADS, 2 * 2048**3 / (time.time() - t) / 1e9))"
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
  # PyTorch keeps every layer's T x T attention tensors (scores, probabilities, dropout mask and output): at
  # B=8 T=1024 that exceeds 24 GiB, so the peer accumulates 2 micro-batches of 4 there (same FLOPs and math)
  accum=1; [ "$T" -ge 1024 ] && accum=2
  theirs=$($PY bench/torch_gpt_step.py --B "$B" --T "$T" --steps "$STEPS" --threads "$THREADS" --accum $accum)
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
