#!/usr/bin/env bash
# The Llama family (issue 47) in every kind of layout, against one process: llama-tiny deepened to 4 blocks (RMSNorm,
# rotary positions, SwiGLU, grouped-query attention with 2 key/value heads for 4 heads, no biases, an untied LM head),
# 12 steps, global batch 8, dropout switched on (0.1 in the hidden layers and on the attention probabilities: Llama
# trains without, but the masks must follow the layouts too), fp32: every layout's losses and gradient norms within
# 1e-5 of the one-process run's (its own PyTorch parity is in test_torch_parity):
#   the guard device (the cpu kernels on memory the host cannot touch: nothing outside the backend reads the
#   model's tensors) and the naive reference backend; recompute; data parallel; ZeRO stages 1, 2, 3 and 3 with offload over 2; tensor parallel over 2 with and without
#   sequence parallelism (a key/value head per rank), over 4 (each of the 2 key/value heads on 2 ranks, their
#   gradients summed by the tensor-parallel engine), and multi-query attention (1 key/value head) over 2 with
#   sequence parallelism and with a pipeline; the pipeline's three schedules (1F1B, interleaved
#   with 2 chunks per stage, ZB-H1: the untied head is the last stage's own, no embedding group); the 16-rank 4D
#   layout (dp2 x pp2 x sharding2 stage 3 x mp2). Then AMP at O2 (bf16) on one process and on tensor x pipeline,
#   within the 16-bit floor test_amp_layouts measures for GPT (1e-3). And a checkpoint written by the 4D layout
#   resumes on one process with the uninterrupted curve.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
test_setup
export OMP_NUM_THREADS=1
COMMON=(--model_name_or_path llama-tiny -o Model.num_layers=4 --input_dir "$SRC_DIR/data/fortunes_ids.npz"
        --max_seq_len 32 --global_batch_size 8 --max_steps 12 --max_lr 1e-3 --min_lr 1e-4 --warmup_rate 0.1
        --decay_steps 12 --grad_clip 1.0 --logging_freq 1 --seed 11 -o Model.hidden_dropout_prob=0.1
        -o Model.attention_probs_dropout_prob=0.1 --save_steps -1)
run() { # name np args...
  local name=$1 np=$2; shift 2
  "$LLM4D" launch --nproc "$np" --log_dir "$tmp/$name/log" -- train "${COMMON[@]}" "$@" \
    --output_dir "$tmp/$name/out" >"$tmp/$name.stdout" 2>&1 || { echo "run $name failed:"; tail -5 "$tmp/$name.stdout"; }
}
run single 1 --micro_batch_size 8 --save_steps 6
run single_kv1 1 --micro_batch_size 8 -o Model.num_key_value_heads=1
run single_bf16 1 --micro_batch_size 8 --use_amp true
layouts=(
  # name        np  ref          args (comma-separated)
  "guard        1   single       --micro_batch_size,8,--device,guard"
  "ref          1   single       --micro_batch_size,8,--backend,ref"
  "recompute    1   single       --micro_batch_size,4,--use_recompute,true"
  "dp2          2   single       --dp_degree,2,--micro_batch_size,4"
  "sh2_s1       2   single       --sharding_degree,2,--sharding_stage,1,--micro_batch_size,4"
  "sh2_s2       2   single       --sharding_degree,2,--sharding_stage,2,--micro_batch_size,4"
  "sh2_s3       2   single       --sharding_degree,2,--sharding_stage,3,--micro_batch_size,4"
  "sh2_s3_off   2   single       --sharding_degree,2,--sharding_stage,3,--sharding_offload,true,--micro_batch_size,4"
  "mp2          2   single       --mp_degree,2,--micro_batch_size,8"
  "mp2_sp       2   single       --mp_degree,2,--sequence_parallel,true,--micro_batch_size,8"
  "mp4_kvrep    4   single       --mp_degree,4,--micro_batch_size,8"
  "mp2_sp_kv1   2   single_kv1   --mp_degree,2,--sequence_parallel,true,--micro_batch_size,8,-o,Model.num_key_value_heads=1"
  "pp2_mp2_kv1  4   single_kv1   --pp_degree,2,--mp_degree,2,--micro_batch_size,2,-o,Model.num_key_value_heads=1"
  "pp2_1f1b     2   single       --pp_degree,2,--micro_batch_size,2"
  "pp2_v2       2   single       --pp_degree,2,--virtual_pp_degree,2,--micro_batch_size,2"
  "pp2_zb       2   single       --pp_degree,2,--pp_schedule,ZBH1,--micro_batch_size,2"
  "4d16         16  single       --dp_degree,2,--pp_degree,2,--sharding_degree,2,--sharding_stage,3,--mp_degree,2,--micro_batch_size,1,--save_steps,6"
  "mp2_pp2_bf16 4   single_bf16  --mp_degree,2,--sequence_parallel,true,--pp_degree,2,--micro_batch_size,2,--use_amp,true"
)
for l in "${layouts[@]}"; do
  set -- $l
  IFS=, read -ra extra <<<"$4"
  run "$1" "$2" "${extra[@]}"
done
# the 4D layout's step-6 checkpoint, resumed on one process for the last 6 steps
"$LLM4D" train "${COMMON[@]}" --micro_batch_size 8 --output_dir "$tmp/resumed/out" \
  --resume "$tmp/4d16/out/step_6" >"$tmp/resumed.stdout" 2>&1 || { echo "resume failed:"; tail -5 "$tmp/resumed.stdout"; }
printf '%s\n' "${layouts[@]}" >"$tmp/layouts"
/usr/bin/python3 - "$tmp" >"$tmp/checks" <<'PY'
import json, os, sys
tmp = sys.argv[1]
def check(ok, msg):
    print(("ok " if ok else "FAIL ") + msg)
def load(name, key="loss"):
    p = f"{tmp}/{name}/out/metrics.jsonl"
    return {d["step"]: d[key] for d in map(json.loads, open(p)) if "step" in d} if os.path.exists(p) else {}
def diff(a, b, steps):
    if not all(s in a and s in b for s in steps):
        return float("inf")
    return max(abs(a[s] - b[s]) / max(abs(b[s]), 1e-30) for s in steps)
for line in open(f"{tmp}/layouts"):
    name, _, ref = line.split()[:3]
    dl = diff(load(name), load(ref), range(1, 13))
    if ref.endswith("bf16"):  # 16-bit: the losses, as test_amp_layouts holds GPT's (a norm sums rounded squares)
        check(dl <= 1e-3, f"{name}: 12 losses within 1e-3 of {ref} (worst relative {dl:.1e})")
        continue
    dg = diff(load(name, "grad_norm"), load(ref, "grad_norm"), range(1, 13))
    check(dl <= 1e-5 and dg <= 1e-5, f"{name}: 12 losses and gradient norms within 1e-5 of {ref} (worst relative: "
          f"loss {dl:.1e}, gradient norm {dg:.1e})")
d = diff(load("resumed"), load("single"), range(7, 13))
check(d <= 1e-5, f"the 4D layout's step-6 checkpoint resumed on one process: steps 7-12 within 1e-5 of the "
      f"uninterrupted run (worst relative {d:.1e})")
PY
tally_lines <"$tmp/checks"
for n in single_bf16 mp2_pp2_bf16; do
  check_if $(has "$tmp/$n/log/workerlog.0" "activations and their gradients bf16") "$n: the run keeps its activations in bf16"
done
check_if $(has "$tmp/single/log/workerlog.0" "model: Llama") "the start-up line names the Llama family"
finish
