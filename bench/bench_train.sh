#!/usr/bin/env bash
# bench_train.sh — GPT-2 124M (gpt2-en) training throughput on this CPU: llm4d against PyTorch CPU with the same
# threads, each in fp32 and in bf16 mixed precision (llm4d --use_amp; PyTorch torch.autocast("cpu", bfloat16)),
# at B=4 T=64 and B=8 T=1024, all in one run so that machine noise affects every column alike. MFU is model FLOPs
# (6 x params + attention FLOPs per token) per second over the matmul peak bench/matmul_peak measures in the same
# run, fp32 for fp32 and bf16 for bf16. Memory is each run's peak resident set size.
# A second table says where llm4d's step goes, per shape and precision, from the backend's own timers
# (metrics.jsonl's work_s, steps after the first): the share in the big GEMMs (linear layers and LM head), in the
# attention, in the optimizer, and the rest (operand conversions, element-wise kernels, the loss, and what runs
# outside the backend), the optimizer's GB/s against the copy bandwidth bench/mem_bandwidth measures in the same
# run, and the GEMM implementations (ISA) oneDNN chose.
#   bench/bench_train.sh [threads] [steps] [shape ...]     shape: "B T" (default "4 64" "8 1024")
# Elsewhere than a Debian machine (the lent device machine: bench/device_cpu.sh), BENCH_PY names the python with
# PyTorch to use (nothing is installed then) and BENCH_BUILD the build folder (default build). BENCH_TORCH=bf16 runs
# the PyTorch peer in bf16 only, none not at all (its columns then read 0), where machine time is short.
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=${1:-$(nproc)}
STEPS=${2:-3}
shift $(( $# < 2 ? $# : 2 ))
SHAPES=("$@")
[ ${#SHAPES[@]} -gt 0 ] || SHAPES=("4 64" "8 1024")
PY=${BENCH_PY:-/usr/bin/python3}
BUILD=${BENCH_BUILD:-build}
TORCH=${BENCH_TORCH:-all}
export OMP_NUM_THREADS=$THREADS
# The peer must use an optimized BLAS: Debian's python3-torch calls the system libblas.so.3, which is the slow
# reference BLAS unless OpenBLAS provides it (the OpenMP build shares one thread pool, as llm4d's kernels do).
# The peer itself is Debian's python3-torch (what `LLM4D_TEST_DEPS=1 scripts/setup.sh`, i.e. ./test.sh, installs).
need=()
[ -n "${BENCH_PY:-}" ] || for p in python3-torch python3-numpy libopenblas0-openmp; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "bench: installing ${need[*]} (the PyTorch peer, on an optimized BLAS)"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null
fi
$PY -c "import torch, time; torch.set_num_threads($THREADS); a = torch.randn(2048, 2048); a @ a; t = time.time(); a @ a; \
print('PyTorch fp32 matmul (2048^3, %d threads): %.1f GFLOP/s' % ($THREADS, 2 * 2048**3 / (time.time() - t) / 1e9))"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
TIME="" # peak RSS by GNU time, where there is one (not on the device machine: the memory columns read 0 there)
if [ -x /usr/bin/time ]; then TIME="/usr/bin/time -f %M -o $tmp/rss"; fi

# The peak is measured before the runs and again after them, and the higher reading kept: a neighbour's burst on
# this shared machine can only lower a reading, and an understated peak would overstate MFU.
"$BUILD"/mem_bandwidth >"$tmp/membw"
copy_gbps=$(awk '$1 == "copy_gbps:" {print $2}' "$tmp/membw")
echo "copy bandwidth (bench/mem_bandwidth, $THREADS threads, read + write): $copy_gbps GB/s"
"$BUILD"/matmul_peak >"$tmp/peak"
peak_of() { awk -v k="$1_peak_gflops:" '$1 == k {print $2}' "$tmp/peak"; }
peak32=$(peak_of fp32)
peak16=$(peak_of bf16)
echo "matmul peak (oneDNN, $THREADS threads), first reading: fp32 $peak32 GFLOP/s, bf16 $peak16 GFLOP/s"
bf16=1
if [ "$(awk -v p="$peak16" 'BEGIN {print (p > 0)}')" = 0 ]; then
  echo "bench: this CPU has no AVX512-BF16: llm4d's bf16 runs fp32 GEMMs on bf16-rounded operands" \
       "(no faster than fp32); bf16 columns skipped"
  bf16=0
fi

# llm4d: median step time of the measured steps (the first is warm-up) -> "sec flops_per_token rss_mib"; the
# backend's timers over the same steps go to $tmp/work_<B>_<T>_<amp>.json for the second table
ours() { # B T amp
  rm -rf "$tmp/out"
  echo 0 >"$tmp/rss"
  $TIME "$BUILD"/llm4d train --model_name_or_path gpt2-en \
      --input_dir data/fortunes_ids.npz --output_dir "$tmp/out" --max_seq_len "$2" --micro_batch_size "$1" \
      --global_batch_size "$1" --max_steps $((STEPS + 1)) --logging_freq 1000 --save_steps 1000000 \
      --threads "$THREADS" --use_amp "$3" >"$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }
  $PY - "$tmp/out/metrics.jsonl" "$(cat "$tmp/rss")" "$tmp/log" "$tmp/work_$1_$2_$3.json" <<'PY'
import json, re, statistics, sys
m = [json.loads(l) for l in open(sys.argv[1])][1:]
print(statistics.median(x["batch_cost"] for x in m), m[0]["flops_per_token"], int(sys.argv[2]) // 1024)
work = {k: sum(x["work_s"][k] for x in m) for k in m[0]["work_s"]}
isa = [l.split(" - ", 1)[1].strip() for l in open(sys.argv[3]) if "oneDNN ISA" in l]
json.dump({"step_s": sum(x["batch_cost"] for x in m), "steps": len(m), "work_s": work,
           "optim_bytes": sum(x["optim_bytes"] for x in m), "isa": isa[-1] if isa else "?"}, open(sys.argv[4], "w"))
PY
}
# PyTorch keeps every layer's T x T attention tensors (scores, probabilities, dropout mask and output): at
# B=8 T=1024 that exceeds 24 GiB, so the peer accumulates 2 micro-batches of 4 there (same FLOPs and math).
theirs() { # B T [--bf16] -> "sec rss_mib"
  local accum=1
  [ "$2" -ge 1024 ] && accum=2
  $PY bench/torch_gpt_step.py --B "$1" --T "$2" --steps "$STEPS" --threads "$THREADS" --accum $accum ${3:-} |
    awk '/^torch_step_sec:/ {s = $2} /^torch_peak_rss_mib:/ {r = int($2)} END {print s, r}'
}

rows=()
for shape in "${SHAPES[@]}"; do
  set -- $shape
  B=$1 T=$2
  echo "bench: B=$B T=$T: llm4d fp32 ..." >&2
  o32=$(ours "$B" "$T" false)
  t32="0 0" o16="0 0 0" t16="0 0"
  if [ "$TORCH" = all ]; then
    echo "bench: B=$B T=$T: PyTorch fp32 ..." >&2
    t32=$(theirs "$B" "$T")
  fi
  if [ $bf16 = 1 ]; then
    echo "bench: B=$B T=$T: llm4d bf16 ..." >&2
    o16=$(ours "$B" "$T" true)
    if [ "$TORCH" != none ]; then
      echo "bench: B=$B T=$T: PyTorch bf16 ..." >&2
      t16=$(theirs "$B" "$T" --bf16)
    fi
  fi
  rows+=("$B $T $o32 $t32 $o16 $t16")
done

# The linear layers' GEMMs per shape at each run's token count (forward, and backward with its input and weight
# gradients; a bf16 layer's operand conversions included, as in the step), against the peak of their precision.
for shape in "${SHAPES[@]}"; do
  set -- $shape
  "$BUILD"/matmul_peak --linear --tokens $(($1 * $2)) --reps 3 >"$tmp/linear_$1_$2"
done
"$BUILD"/matmul_peak >"$tmp/peak"
peak32=$(awk -v a="$peak32" -v b="$(peak_of fp32)" 'BEGIN {print (a > b ? a : b)}')
peak16=$(awk -v a="$peak16" -v b="$(peak_of bf16)" 'BEGIN {print (a > b ? a : b)}')
echo "matmul peak, higher of the readings before and after the runs: fp32 $peak32 GFLOP/s, bf16 $peak16 GFLOP/s"

$PY - "$peak32" "$peak16" "$copy_gbps" "$tmp" "${rows[@]}" <<'PY'
import json, os, sys
peak32, peak16, copy_gbps, tmp = float(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
rows = sys.argv[5:]
def tps(tok, sec):
    return tok / sec if sec > 0 else 0.0
print()
print("tokens/s (higher is better); ratios are llm4d over PyTorch at the same precision; MFU against the same-run")
print("matmul peak of that precision; memory is peak RSS in MiB")
hdr = ("shape", "llm4d_fp32", "torch_fp32", "ratio", "MFU", "llm4d_bf16", "torch_bf16", "ratio", "MFU",
       "bf16/fp32", "MiB_l32", "MiB_t32", "MiB_l16", "MiB_t16")
print("%-12s %10s %10s %6s %6s %10s %10s %6s %6s %9s %8s %8s %8s %8s" % hdr)
for r in rows:
    B, T, o32, fpt, orss32, t32, trss32, o16, _, orss16, t16, trss16 = r.split()
    B, T, fpt = int(B), int(T), float(fpt)
    tok = B * T
    l32, p32, l16, p16 = tps(tok, float(o32)), tps(tok, float(t32)), tps(tok, float(o16)), tps(tok, float(t16))
    mfu32 = l32 * fpt / (peak32 * 1e9)
    mfu16 = l16 * fpt / (peak16 * 1e9) if peak16 > 0 else 0.0
    print("%-12s %10.1f %10.1f %6.2f %5.1f%% %10.1f %10.1f %6.2f %5.1f%% %9.2f %8s %8s %8s %8s" % (
        "B=%d T=%d" % (B, T), l32, p32, l32 / p32 if p32 else 0, 100 * mfu32, l16, p16, l16 / p16 if p16 else 0,
        100 * mfu16, l16 / l32 if l32 else 0, orss32, trss32, orss16, trss16))
print()
print("where llm4d's step goes (backend timers, steps after the first): shares of the step in the big GEMMs (linear")
print("layers, LM head), the attention, the optimizer, and the rest = conversions (cvt) + element-wise kernels (elem) +")
print("the loss + what runs outside the backend (out); the optimizer's GB/s of the traffic it needs, and its time over")
print("the time the copy bandwidth (%.1f GB/s) needs for the same bytes (x_copy, target <= 1.3)" % copy_gbps)
print("%-12s %-5s %7s %6s %6s %6s %6s | %5s %5s %5s %5s | %7s %6s  %s" % (
    "shape", "prec", "step_s", "gemm", "attn", "optim", "rest", "cvt", "elem", "loss", "out", "opt_GB/s", "x_copy",
    "oneDNN"))
for r in rows:
    B, T = r.split()[:2]
    for amp, prec in (("false", "fp32"), ("true", "bf16")):
        f = os.path.join(tmp, "work_%s_%s_%s.json" % (B, T, amp))
        if not os.path.exists(f):
            continue
        w = json.load(open(f))
        st, ws = w["step_s"], w["work_s"]
        if st <= 0:
            continue
        share = lambda s: 100.0 * s / st
        out = st - sum(ws.values())
        rest = ws["convert"] + ws["elementwise"] + ws["cross_entropy"] + out
        ob, os_ = w["optim_bytes"], ws["optimizer"]
        gbps = ob / os_ / 1e9 if os_ > 0 else 0.0
        xcopy = os_ / (ob / (copy_gbps * 1e9)) if ob > 0 and copy_gbps > 0 else 0.0
        print("%-12s %-5s %7.3f %5.1f%% %5.1f%% %5.1f%% %5.1f%% | %4.1f%% %4.1f%% %4.1f%% %4.1f%% | %7.1f %6.2f  %s" % (
            "B=%s T=%s" % (B, T), prec, st / w["steps"], share(ws["gemm"]), share(ws["attention"]), share(os_),
            share(rest), share(ws["convert"]), share(ws["elementwise"]), share(ws["cross_entropy"]), share(out), gbps, xcopy,
            w["isa"]))

print()
print("the linear layers' GEMMs at each shape's tokens (bench/matmul_peak --linear; % of that precision's peak as")
print("matmul_peak measured it then; a bf16 layer's time includes its operand conversions)")
for r in rows:
    B, T = r.split()[:2]
    f = os.path.join(tmp, "linear_%s_%s" % (B, T))
    if os.path.exists(f):
        for line in open(f):
            if line.startswith("linear"):
                print("  B=%s T=%s %s" % (B, T, line.strip()))

# The throughput targets (issue 16; the bf16 ones as issue 30 restated them for AMX) against this run's figures, so
# that one run on a machine says which hold there.
# The bf16 targets follow the kernels the bf16 run used (its ISA line); "non-GEMM" counts the attention as GEMM work
# (its block GEMMs dominate it at T = 1024) and everything else as not.
print()
print("targets, this run (measured / target):")
isa16 = " ".join(json.load(open(os.path.join(tmp, f))).get("isa", "") for f in os.listdir(tmp)
                 if f.startswith("work_") and f.endswith("_true.json"))
amx = "amx" in isa16
# issue 42's targets by what the bf16 GEMMs ran on: AMX 3x / 4x; oneDNN's AVX512-BF16 kernels (Zen 4) 1.75x at
# both shapes; the fp32 kernels (an AVX2 CPU, or bf16 kernels slower than fp32's) never slower than fp32
avx512bf16 = not amx and "operands bf16" in isa16
for r in rows:
    B, T, o32, fpt, _, t32, _, o16, _, _, t16, _ = r.split()
    B, T, fpt, o32, o16, t16 = int(B), int(T), float(fpt), float(o32), float(o16), float(t16)
    big = T >= 1024
    line = []
    mfu32 = B * T / o32 * fpt / (peak32 * 1e9) if o32 > 0 else 0.0
    line.append("fp32 MFU %.1f%% / %d%%" % (100 * mfu32, 85 if big else 75))
    if o16 > 0:
        if amx:
            line.append("bf16 step %.2fx fp32 / %dx" % (o32 / o16, 4 if big else 3))
        elif avx512bf16:
            line.append("bf16 step %.2fx fp32 / 1.75x (AVX512-BF16 target; AMX's: %dx)" % (o32 / o16, 4 if big else 3))
        else:
            line.append("bf16 step %.2fx fp32 / 1.00x (bf16 numerics on fp32 kernels here)" % (o32 / o16))
        if t16 > 0:
            line.append("bf16 %.2fx PyTorch bf16 / 3x%s" % (t16 / o16, "" if amx else " (AMX target)"))
    f = os.path.join(tmp, "work_%d_%d_false.json" % (B, T))
    if big and os.path.exists(f):
        w = json.load(open(f))
        non = w["step_s"] - w["work_s"]["gemm"] - w["work_s"]["attention"]
        line.append("non-GEMM share of the fp32 step %.1f%% / 10%%" % (100 * non / w["step_s"]))
    print("  B=%d T=%d: %s" % (B, T, "; ".join(line)))
PY
