#!/usr/bin/env bash
# The device boundary, proven: training, checkpoints, every kind of layout and generation run on the guard backend
# (--device guard: the cpu kernels on tensor memory the host cannot touch outside backend calls, src/backend/guard.c)
# and give the cpu backend's results bit for bit. Any host access to a tensor would kill the run with a stack, so a
# run that finishes is a run where nothing outside src/backend touched one; the cpu backend's run of the same layout
# is the oracle for its numbers.
# gpt2-tiny (4 layers), global batch 8, dropout on, 3 steps, per layout, guard against cpu:
#   single process with an evaluation and a checkpoint; resumed on the guard from the cpu run's step-2 checkpoint
#   (and the cpu from the guard's); dp2; ZeRO-1, ZeRO-2, ZeRO-3 and ZeRO-1 with offload (sharding 2: on the guard
#   the offloaded AdamW runs on its host backend over staged host copies, ZeRO-Offload's CPU Adam, so equal losses
#   say the host update read and wrote no device memory directly); dp2 and ZeRO-2 with bf16
#   gradient payloads (grad_comm_dtype bfloat16: the rounding is the backend's); mp2 with sequence
#   parallelism; pp2 with 1F1B, interleaved (V=2) and ZB-H1; 4D dp2 x sharding2 (stage 3) x mp2 x pp2 (16 ranks);
# checks: every step's loss, every evaluation loss and every gradient norm equal (as printed to 9 digits), the
# checkpoints' tensors equal; and `llm4d generate` (sampling, with the logits dumped) gives the same tokens and the
# same logits file on both.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
test_setup
export OMP_NUM_THREADS=1
COMMON=(--model_name_or_path gpt2-tiny --input_dir "$SRC_DIR/data/fortunes_ids.npz" --max_seq_len 32
        --global_batch_size 8 --max_steps 3 --max_lr 1e-3 --min_lr 1e-4 --warmup_rate 0.1 --decay_steps 20
        --grad_clip 1.0 --logging_freq 1 --seed 7 -o Model.hidden_dropout_prob=0.1 -o Model.num_layers=4
        -o Model.attention_probs_dropout_prob=0.1 --save_steps -1)
run() { # device name nproc args...
  local dev=$1 name=$2 np=$3
  shift 3
  local out="$tmp/$dev/$name"
  if [ "$np" = 1 ]; then
    "$LLM4D" train "${COMMON[@]}" --device "$dev" --output_dir "$out" "$@" >"$out.log" 2>&1
  else
    "$LLM4D" launch --nproc "$np" --log_dir "$out.logs" -- train "${COMMON[@]}" --device "$dev" --output_dir "$out" \
      "$@" >"$out.log" 2>&1
  fi || { echo "run $dev/$name failed:"; tail -25 "$out.log"; [ -d "$out.logs" ] && tail -n 25 "$out.logs"/workerlog.*; }
}
layouts=(
  # name     np  args
  "single    1   --micro_batch_size 4 --eval_freq 2 --eval_iters 2 --save_steps 2"
  "dp2       2   --dp_degree 2 --micro_batch_size 2"
  "zero1     2   --sharding_degree 2 --sharding_stage 1 --micro_batch_size 4"
  "zero2     2   --sharding_degree 2 --sharding_stage 2 --micro_batch_size 2"
  "dp2_bf16  2   --dp_degree 2 --micro_batch_size 2 --grad_comm_dtype bfloat16"
  "zero2_bf16 2  --sharding_degree 2 --sharding_stage 2 --micro_batch_size 2 --grad_comm_dtype bfloat16"
  "zero3_off 2   --sharding_degree 2 --sharding_stage 3 --sharding_offload True --micro_batch_size 4"
  "zero1_off 2   --sharding_degree 2 --sharding_stage 1 --sharding_offload True --micro_batch_size 4"
  "mp2_sp    2   --mp_degree 2 --sequence_parallel True --micro_batch_size 4"
  "pp2_1f1b  2   --pp_degree 2 --pp_schedule 1F1B --micro_batch_size 2 --eval_freq 3 --eval_iters 1"
  "pp2_v2    2   --pp_degree 2 --virtual_pp_degree 2 --pp_schedule interleaved --micro_batch_size 2"
  "pp2_zbh1  2   --pp_degree 2 --pp_schedule ZBH1 --micro_batch_size 2"
  "4d        16  --dp_degree 2 --sharding_degree 2 --sharding_stage 3 --mp_degree 2 --sequence_parallel True
                 --pp_degree 2 --micro_batch_size 1"
)
mkdir -p "$tmp/cpu" "$tmp/guard"
for l in "${layouts[@]}"; do
  read -r -d '' name np args <<<"$l" # the whole entry (it may span lines)
  for dev in cpu guard; do run "$dev" "$name" "$np" $args; done
done
# checkpoints across the boundary: each device resumes the other's step 2
for dev in cpu guard; do
  other=$([ $dev = cpu ] && echo guard || echo cpu)
  run "$dev" resume 1 --micro_batch_size 4 --resume "$tmp/$other/single/step_2" --save_steps 3
done

# the metrics, the checkpoint's tensors (safetensors files: the bytes of the tensors, whatever wrote them)
for l in "${layouts[@]}" "resume"; do
  read -r name _ <<<"$l"
  a="$tmp/cpu/$name/metrics.jsonl" b="$tmp/guard/$name/metrics.jsonl"
  if [ -s "$a" ] && [ -s "$b" ] && cmp -s <(grep -o '"\(loss\|eval_loss\|grad_norm\)": [^,]*' "$a") \
       <(grep -o '"\(loss\|eval_loss\|grad_norm\)": [^,]*' "$b"); then
    ok "$name: guard losses, evaluation losses and gradient norms equal the cpu backend's ($(grep -c '"loss"' \
       "$b") steps)"
  else
    bad "$name: the guard's metrics differ from the cpu backend's (or a run failed)"
    diff <(grep -o '"\(loss\|eval_loss\|grad_norm\)": [^,]*' "$a" 2>/dev/null) \
         <(grep -o '"\(loss\|eval_loss\|grad_norm\)": [^,]*' "$b" 2>/dev/null) | head -6
  fi
done
same_tensors() { # dir dir: every *.safetensors of the first has an equal one in the second
  local f n=0
  for f in "$1"/*.safetensors; do
    [ -f "$f" ] || return 1
    cmp -s "$f" "$2/$(basename "$f")" || return 1
    n=$((n + 1))
  done
  [ $n -gt 0 ]
}
# the offloaded runs took the host-Adam path on the guard (and the in-place one on the cpu, whose device memory is
# host memory): their start-up lines say so
host_adam() { # guard-log cpu-log
  grep -q "AdamW on the host backend" "$1" && [ -s "$2" ] && ! grep -q "AdamW on the host backend" "$2"
}
for name in zero3_off zero1_off; do
  check "$name: the guard's offloaded update ran on its host backend (staged), the cpu's in place" \
    host_adam "$tmp/guard/$name.log" "$tmp/cpu/$name.log"
done
check "checkpoint step 2 written on the guard holds the cpu run's tensors byte for byte" \
  same_tensors "$tmp/cpu/single/step_2" "$tmp/guard/single/step_2"
check "the resumed runs' step-3 checkpoints hold the same tensors" \
  same_tensors "$tmp/cpu/resume/step_3" "$tmp/guard/resume/step_3"

# generation from the cpu run's checkpoint: sampled tokens and every logit
for dev in cpu guard; do
  "$LLM4D" generate --ckpt "$tmp/cpu/single/step_2" --prompt_ids "464 2068 7586" --max_new_tokens 12 \
    --temperature 0.8 --top_k 40 --seed 3 --device "$dev" --dump_logits "$tmp/$dev.logits" >"$tmp/$dev.gen" \
    2>"$tmp/$dev.generr" || { echo "generate on $dev failed:"; cat "$tmp/$dev.generr"; }
done
check_if "$(yes_if cmp -s "$tmp/cpu.gen" "$tmp/guard.gen")" \
  "generate on the guard samples the cpu backend's tokens ($(tr '\n' ' ' <"$tmp/guard.gen"))"
check_if "$(yes_if cmp -s "$tmp/cpu.logits" "$tmp/guard.logits")" \
  "generate on the guard computes the cpu backend's logits ($(stat -c %s "$tmp/guard.logits" 2>/dev/null) bytes)"
finish
