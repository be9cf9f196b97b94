#!/usr/bin/env bash
# bench_gpu.sh — GPT-2 124M (gpt2-en) training on one GPU: llm4d's CUDA backend against PyTorch on the same GPU in
# the same run, bf16 mixed precision, T=1024, at B=16 and B=32 (one micro-batch per step, no accumulation).
#   tokens/s   B x T over the median step time of the measured steps (the first two are warm-up)
#   MFU        model FLOPs per token (llm4d's count: 6 x matmul params + 12 x layers x T x hidden, the same for both)
#              x tokens/s over the GPU's dense bf16 peak from its datasheet (PEAK_TFLOPS, 989 for H100/H200 SXM);
#              llm4d's own mfu field (over the cuBLASLt bf16 peak it measures at start-up) beside it
#   by method:  the same timers by the backend method (function and line) that launched the kernels
#   where the step goes: llm4d's backend timers (metrics.jsonl work_s: CUDA events around its kernels), as shares of
#              the step: GEMMs (linear layers, LM head), attention, optimizer, loss, operand conversions, the rest of
#              the kernels, and what the GPU did not account for (host work and launch gaps: "other")
# PyTorch: eager (SDPA, fused AdamW, bf16 autocast) and torch.compile (COMPILE=0 skips it), with the system python3
# (the kit's environment is not needed for it). Dropout: DROPOUT (default 0.0, llm.c's choice) in both.
# Where there is no GPU, or this build has no CUDA backend, it says so and exits 77: no numbers are made up.
#   bench/bench_gpu.sh [steps]   env: LLM4D (build/llm4d), PY (python3), DROPOUT, COMPILE, PEAK_TFLOPS, BENCH_LOGS (a
#                                folder to keep every run's log in)
set -uo pipefail
cd "$(dirname "$0")/.."
STEPS=${1:-8}
LLM4D=${LLM4D:-build/llm4d}
PY=${PY:-python3}
DROPOUT=${DROPOUT:-0.0}
COMPILE=${COMPILE:-1}
PEAK_TFLOPS=${PEAK_TFLOPS:-989}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ -x "$LLM4D" ] || { echo "bench_gpu: $LLM4D not built"; exit 1; }

common=(--model_name_or_path gpt2-en --input_dir data/fortunes_ids.npz --max_seq_len 1024 --device cuda
        --use_amp true --amp_dtype bfloat16 --logging_freq 1000 --save_steps 1000000
        -o Model.hidden_dropout_prob="$DROPOUT" -o Model.attention_probs_dropout_prob="$DROPOUT")
if ! "$LLM4D" train "${common[@]}" --micro_batch_size 1 --global_batch_size 1 --max_steps 1 \
     --output_dir "$tmp/probe" >"$tmp/probe.log" 2>&1; then
  if grep -q -- "--device cuda:" "$tmp/probe.log"; then
    echo "bench_gpu: cannot run here: $(grep -m1 -- '--device cuda:' "$tmp/probe.log" | sed 's/^llm4d: //'); nothing measured"
    exit 77
  fi
  echo "bench_gpu: a one-step llm4d run on the GPU failed:"
  tail -20 "$tmp/probe.log"
  exit 1
fi
grep -m1 "device memory: GPU" "$tmp/probe.log" | sed 's/.* - /llm4d: /'
grep -m1 "cuBLASLt on GPU" "$tmp/probe.log" | sed 's/.* - /llm4d: /'

ours() { # B -> "step_s flops_per_token mfu_measured"; the timers' shares to $tmp/work_B.json
  local B=$1
  rm -rf "$tmp/out"
  LLM4D_CUDA_SITES="$tmp/sites_$B.tsv" \
  "$LLM4D" train "${common[@]}" --micro_batch_size "$B" --global_batch_size "$B" --max_steps $((STEPS + 2)) \
    --output_dir "$tmp/out" >"$tmp/llm4d_$B.log" 2>&1 || { echo "llm4d B=$B failed:" >&2; tail -20 "$tmp/llm4d_$B.log" >&2; echo "0 0 0"; return; }
  "$PY" - "$tmp/out/metrics.jsonl" "$tmp/work_$B.json" <<'PY'
import json, statistics, sys
m = [json.loads(l) for l in open(sys.argv[1])][2:]
step = statistics.median(x["batch_cost"] for x in m)
mfu = statistics.median(x["mfu"] or 0 for x in m)
tot = sum(x["batch_cost"] for x in m)
work = {k: sum(x["work_s"][k] for x in m) / tot for k in m[0]["work_s"]}
json.dump(work, open(sys.argv[2], "w"))
print(step, m[0]["flops_per_token"], mfu)
PY
}
theirs() { # B [--compile] -> "step_s peak_gib"
  local B=$1 opt=${2:-}
  local log="$tmp/torch_$B$opt.log"
  "$PY" bench/torch_gpt_gpu.py --B "$B" --T 1024 --steps "$STEPS" --dropout "$DROPOUT" $opt >"$log" 2>&1
  local rc=$?
  [ $rc = 0 ] || { echo "PyTorch B=$B $opt failed (rc $rc):" >&2; tail -5 "$log" >&2; echo "0 0"; return; }
  awk '/^torch_step_sec:/ {s = $2} /^torch_peak_mem_gib:/ {m = $2} END {print s, m}' "$log"
}

rows=()
for B in 16 32; do
  echo "bench_gpu: B=$B T=1024: llm4d ..." >&2
  o=$(ours $B)
  echo "bench_gpu: B=$B T=1024: PyTorch eager ..." >&2
  e=$(theirs $B)
  c="0 0"
  if [ "$COMPILE" = 1 ]; then
    echo "bench_gpu: B=$B T=1024: PyTorch torch.compile ..." >&2
    c=$(theirs $B --compile)
  fi
  rows+=("$B $o $e $c")
done
grep -h "^torch_device:" "$tmp"/torch_16.log 2>/dev/null | head -1

"$PY" - "$PEAK_TFLOPS" "$tmp" "${rows[@]}" <<'PY'
import json, os, sys
peak, tmp, rows = float(sys.argv[1]) * 1e12, sys.argv[2], sys.argv[3:]
print()
print("GPT-2 124M, bf16, T=1024, one GPU: tokens/s (higher is better); MFU over the datasheet's %.0f TFLOP/s" % (peak / 1e12))
print("%-6s %11s %6s %8s %11s %6s %11s %6s %9s %9s" % ("B", "llm4d", "MFU", "MFU_meas", "torch_eager", "MFU",
                                                       "torch_comp", "MFU", "vs_eager", "vs_comp"))
for r in rows:
    B, ostep, fpt, omfu, estep, emem, cstep, cmem = r.split()
    B, fpt = int(B), float(fpt)
    tok = B * 1024
    def tps(s):
        return tok / float(s) if float(s) > 0 else 0.0
    lo, le, lc = tps(ostep), tps(estep), tps(cstep)
    mfu = lambda t: 100 * t * fpt / peak
    print("%-6d %11.0f %5.1f%% %7.1f%% %11.0f %5.1f%% %11.0f %5.1f%% %9.2f %9.2f" % (
        B, lo, mfu(lo), 100 * float(omfu), le, mfu(le), lc, mfu(lc), lo / le if le else 0, lo / lc if lc else 0))
print()
print("where llm4d's step goes (backend timers: shares of the measured steps' wall time)")
names = ["gemm", "attention", "optimizer", "cross_entropy", "convert", "elementwise"]
print("%-6s " % "B" + " ".join("%11s" % n for n in names) + " %11s" % "other")
for r in rows:
    B = r.split()[0]
    f = os.path.join(tmp, "work_%s.json" % B)
    if not os.path.exists(f):
        continue
    w = json.load(open(f))
    print("%-6s " % B + " ".join("%10.1f%%" % (100 * w.get(n, 0)) for n in names) +
          " %10.1f%%" % (100 * max(0.0, 1 - sum(w.values()))))
PY
"$PY" - "$tmp" <<'PY'
import glob, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "sites_*.tsv"))):
    rows = [l.rstrip("\n").split("\t") for l in open(f)][1:]
    tot = sum(float(r[2]) for r in rows)
    if not tot:
        continue
    print()
    print("llm4d's GPU time by backend method (B=%s, every step; LLM4D_CUDA_SITES), the largest first" %
          os.path.basename(f)[6:-4])
    for r in sorted(rows, key=lambda r: -float(r[2]))[:18]:
        print("  %-36s %-13s %6.1f%% %9.4f s %7s calls" % (r[0], r[1], 100 * float(r[2]) / tot, float(r[2]), r[3]))
PY
[ -n "${BENCH_LOGS:-}" ] && mkdir -p "$BENCH_LOGS" && cp "$tmp"/*.log "$tmp"/sites_*.tsv "$BENCH_LOGS"/ 2>/dev/null
exit 0
