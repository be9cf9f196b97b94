#!/usr/bin/env bash
# test_amx_train.sh — training on the CPU backend's AMX paths, on any CPU with AVX512-BF16: build/llm4d_amxemu is
# llm4d with its tile kernel in plain C (LLM4D_AMX_EMULATE, the same packing, blocking and weight copies an AMX
# machine runs; CMakeLists.txt), so what the kernel tests check call by call (the *_amxemu tests) is checked here
# over whole steps: the linear layers' weight copies in the two tile layouts written by AdamW's pass and made stale
# by partial updates and gathers, gradients that start over without being zeroed, every layout's use of them.
#   (a) one process: the run says its linear layers are on the AMX kernel, and its 10-step bf16 loss curve (dropout
#       on) is within 1e-3 of the same run of build/llm4d (the oracle, itself held to PyTorch by test_torch_parity:
#       oneDNN's AVX512-BF16 GEMMs, or its fp32 ones where those measure faster, or the real AMX kernel on an AMX
#       CPU; it prints which), the two differing in the order of fp32 sums inside the GEMMs only;
#   (b) data parallel, ZeRO stage 2 (each rank updates half of every weight: the copies go stale and are written again
#       after the gather), tensor parallel with sequence parallelism (weights cut in 32-column shards, tiles' edges)
#       and a 2-stage pipeline, each within 1e-3 of (a)'s curve on the same binary (test_amp_layouts' bound).
# An AMX machine runs the real kernel in test_amp_layouts and test_amp; where the CPU has no AVX512-BF16 (bf16 runs
# there on fp32 kernels, never on the tile path) this test says so and is skipped (exit 77).
set -uo pipefail
source "$(dirname "$0")/lib.sh"
test_setup
EMU="$BUILD_DIR/llm4d_amxemu"
if ! grep -q avx512_bf16 /proc/cpuinfo; then
  echo "skip: this CPU has no AVX512-BF16, so bf16 never takes the AMX kernel's path (emulated or not)"
  exit 77
fi
[ -x "$EMU" ] || { bad "no $EMU (built beside llm4d unless sanitizing or fuzzing)"; finish; }
export OMP_NUM_THREADS=1
COMMON=(--model_name_or_path gpt2-tiny -o Model.num_layers=2 --input_dir "$SRC_DIR/data/fortunes_ids.npz"
        --max_seq_len 32 --global_batch_size 4 --max_steps 10 --max_lr 1e-3 --min_lr 1e-4 --warmup_rate 0.1
        --decay_steps 10 --grad_clip 1.0 --logging_freq 1 --seed 7 -o Model.hidden_dropout_prob=0.1
        -o Model.attention_probs_dropout_prob=0.1 --use_amp true --save_steps -1)
run() { # name binary np args...
  local name=$1 bin=$2 np=$3
  shift 3
  if [ "$np" = 1 ]; then
    "$bin" train "${COMMON[@]}" --output_dir "$tmp/$name/out" "$@" >"$tmp/$name/log.txt" 2>&1
  else
    "$bin" launch --nproc "$np" --log_dir "$tmp/$name/log" -- train "${COMMON[@]}" --output_dir "$tmp/$name/out" "$@" \
      >"$tmp/$name/log.txt" 2>&1
  fi || { echo "run $name failed:"; tail -5 "$tmp/$name/log.txt"; }
}
mkdir -p "$tmp"/{native,emu,dp2,sh2_s2,mp2_sp,pp2}
run native "$LLM4D" 1 --micro_batch_size 4
run emu "$EMU" 1 --micro_batch_size 4
check_if "$(has "$tmp/emu/log.txt" "linear GEMMs: llm4d's AMX kernel")" \
  "the emulated build's linear layers are on the AMX kernel: $(grep -o 'linear GEMMs: [^;]*' "$tmp/emu/log.txt" | tail -1)"
echo "the oracle's (build/llm4d here): $(grep -o 'oneDNN ISA.*' "$tmp/native/log.txt" | tail -1)"
run dp2 "$EMU" 2 --dp_degree 2 --micro_batch_size 2
run sh2_s2 "$EMU" 2 --sharding_degree 2 --sharding_stage 2 --micro_batch_size 2
run mp2_sp "$EMU" 2 --mp_degree 2 --sequence_parallel true --micro_batch_size 4
run pp2 "$EMU" 2 --pp_degree 2 --micro_batch_size 1
/usr/bin/python3 - "$tmp" >"$tmp/checks" <<'PY'
import json, os, sys
tmp = sys.argv[1]
def load(name):
    p = f"{tmp}/{name}/out/metrics.jsonl"
    return [d["loss"] for d in map(json.loads, open(p)) if "step" in d] if os.path.exists(p) else []
def diff(a, b):
    return max(abs(x - y) for x, y in zip(a, b)) if len(a) == len(b) == 10 else float("inf")
emu = load("emu")
d = diff(emu, load("native"))
print(("ok " if d <= 1e-3 else "FAIL ") + f"one process: the AMX path's 10-step bf16 loss curve vs build/llm4d's, max |diff| "
      f"{d:.2e} (<= 1e-3)")
for name, what in (("dp2", "data parallel"), ("sh2_s2", "ZeRO stage 2"), ("mp2_sp", "tensor parallel with sequence "
                   "parallelism"), ("pp2", "2-stage pipeline")):
    d = diff(load(name), emu)
    print(("ok " if d <= 1e-3 else "FAIL ") + f"{what} ({name}) on the AMX path vs one process on it, max |diff| "
          f"{d:.2e} (<= 1e-3)")
PY
rc=$?
tally_lines <"$tmp/checks"
[ $rc = 0 ] || bad "the Python checks exited $rc"
finish
