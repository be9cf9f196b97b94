#!/usr/bin/env bash
# test_nonfinite.sh — the non-finite guard and the loss spike guard (gpt2-tiny, fp32, dropout on).
#   (a) a gradient made infinite at step 3 (the loss still finite) stops the run (one line, exit 2), naming
#       the step and the first tensor of the model (in order of use) whose gradient is not finite, in one process
#       and in layouts where that tensor lives on another rank (pp2: on stage 1; mp2 x sharding2 stage 3: as
#       slices and shards); two tensors made infinite: the earlier one in the model is named, whichever rank
#       holds it;
#   (b) nothing of the failed step is saved: `latest` still names step_2, no step_3 exists, and resuming from the
#       output directory continues with the losses of a run that never failed (steps 3..5);
#   (c) the loss spike guard (--loss_spike_threshold 3, window 3) skips the update of a step whose loss is reported
#       10x (--debug_loss_spike_step 5): the parameters after step 5 hash equal to those after step 4, metrics
#       mark step 5 skipped and no other; without the spike no step is skipped; a run resumed at step 6 skips a
#       spike at step 7 (the window is in the checkpoint) and ends with the uninterrupted run's loss;
#   (d) bad guard settings get one line, exit 2.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
test_setup
export OMP_NUM_THREADS=1
T=(train --model_name_or_path gpt2-tiny --input_dir "$SRC_DIR/data/fortunes_ids.npz" --max_seq_len 32
   --global_batch_size 8 --micro_batch_size 4 --max_lr 1e-3 --min_lr 1e-4 --warmup_rate 0.1 --decay_steps 8
   --logging_freq 1 --seed 7)
losses() { sed -n 's/.*"step": \([0-9]*\),.*"loss": \([0-9.]*\),.*/\1:\2/p' "$1" | tr '\n' ' '; }

# reference: 5 steps that never fail
"$LLM4D" "${T[@]}" --max_steps 5 --save_steps -1 --output_dir "$tmp/ref" >"$tmp/ref.log" 2>&1
ref=$(losses "$tmp/ref/metrics.jsonl")

# ---- (a), (b) ---------------------------------------------------------------------------------------------
inf_run() { # name nproc want_name inject args...
  local name=$1 np=$2 want=$3 inject=$4 f0=$fail t0 t1; shift 4
  local run=("$LLM4D")
  [ "$np" = 1 ] || run=("$LLM4D" launch --nproc "$np" --log_dir "$tmp/$name.log" --)
  t0=$(date +%s.%N)
  timeout 120 "${run[@]}" "${T[@]}" --max_steps 5 --save_steps 2 --output_dir "$tmp/$name" \
    --debug_inject_inf_step 3 --debug_inject_inf_param "$inject" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
  local rc=$? err
  t1=$(date +%s.%N)
  err=$(cat "$tmp/$name.err")
  if [ "$np" = 1 ]; then # through the launcher, several ranks add its own lines (which rank, where its log is)
    check_if $(yes_if test $rc = 2 -a "$(grep -c . "$tmp/$name.err")" = 1) "$name: exit 2 with one line (got $rc): $err"
  else
    check_if $(yes_if test $rc = 2) "$name: exit 2 (got $rc): $(grep '^llm4d: rank' "$tmp/$name.err")"
  fi
  check_if $(yes_if grep -q "gradient norm is not finite at step 3 .*first tensor with a non-finite gradient is $want;.*step_2 is the last checkpoint" "$tmp/$name.err") \
    "$name: the line names step 3, $want and the last checkpoint"
  check_if $(yes_if test "$(cat "$tmp/$name/latest" 2>/dev/null)" = step_2 -a ! -e "$tmp/$name/step_3") \
    "$name: latest still names step_2 and no step_3 was written"
  reliability_checked $f0 "training guards" "$name: a gradient made infinite at step 3 ($inject)" \
    "$(grep -m1 'gradient norm is not finite' "$tmp/$name.err")" "$rc" \
    "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')" "latest = step_2, no step_3"
}
inf_run single 1 transformer.h.1.mlp.c_fc.weight transformer.h.1.mlp.c_fc.weight
inf_run pp2 2 transformer.h.1.mlp.c_fc.weight transformer.h.1.mlp.c_fc.weight --pp_degree 2
inf_run mp2_sh2_s3 4 transformer.h.0.attn.c_attn.weight transformer.h.0.attn.c_attn.weight --mp_degree 2 \
  --sharding_degree 2 --sharding_stage 3
# two tensors: the later one (ln_f) on stage 1, the earlier one (block 0's LayerNorm) on stage 0
inf_run pp2_two 2 transformer.h.0.ln_1.bias transformer.ln_f.weight,transformer.h.0.ln_1.bias --pp_degree 2
inf_run pp2_two_rev 2 transformer.h.0.ln_1.bias transformer.h.0.ln_1.bias,transformer.ln_f.weight --pp_degree 2

"$LLM4D" "${T[@]}" --max_steps 5 --save_steps -1 --resume "$tmp/single" --output_dir "$tmp/resumed" \
  >"$tmp/resumed.log" 2>&1
got=$(losses "$tmp/resumed/metrics.jsonl")
want=$(echo "$ref" | tr ' ' '\n' | grep -E '^[345]:' | tr '\n' ' ')
check_if $(yes_if test -n "$got" -a "$got" = "$want") "resumed from the failed run's last checkpoint: [$got] = the uninterrupted [$want]"

# ---- (c) the loss spike guard -------------------------------------------------------------------------------
G=(--loss_spike_threshold 3 --loss_spike_window 3 --debug_check_replicas)
"$LLM4D" "${T[@]}" --max_steps 8 --save_steps -1 --output_dir "$tmp/spike" "${G[@]}" --debug_loss_spike_step 5 \
  >"$tmp/spike.log" 2>&1
hash_after() { sed -n "s/.*parameter hash after step $2: \([0-9a-f]*\),.*/\1/p" "$1"; }
check_if $(yes_if test -n "$(hash_after "$tmp/spike.log" 4)" -a "$(hash_after "$tmp/spike.log" 4)" = "$(hash_after "$tmp/spike.log" 5)") \
  "spike at step 5: the parameters after step 5 equal those after step 4 (update skipped)"
check_if $(yes_if test "$(hash_after "$tmp/spike.log" 5)" != "$(hash_after "$tmp/spike.log" 6)") \
  "and step 6 updates again"
check_if $(has "$tmp/spike.log" "loss spike at step 5: loss .* > 3 x the mean of the last 3 steps .*: update skipped") \
  "the skipped step is logged with the loss and the trend"
skipped=$(sed -n 's/.*"step": \([0-9]*\),.*"loss_spike_skipped": 1.*/\1/p' "$tmp/spike/metrics.jsonl" | tr '\n' ' ')
check_if $(yes_if test "$skipped" = "5 ") "metrics.jsonl marks step 5 skipped, and no other: [$skipped]"
"$LLM4D" "${T[@]}" --max_steps 8 --save_steps -1 --output_dir "$tmp/nospike" "${G[@]}" >"$tmp/nospike.log" 2>&1
check_if $(yes_if test "$(grep -c '"loss_spike_skipped": 1' "$tmp/nospike/metrics.jsonl")" = 0 -a \
  "$(grep -c '"step"' "$tmp/nospike/metrics.jsonl")" = 8) "without a spike the guard skips nothing in 8 steps"
# the window travels in the checkpoint
"$LLM4D" "${T[@]}" --max_steps 8 --save_steps 6 --output_dir "$tmp/spike7" "${G[@]}" --debug_loss_spike_step 7 \
  >"$tmp/spike7.log" 2>&1
"$LLM4D" "${T[@]}" --max_steps 8 --save_steps -1 --resume "$tmp/spike7/step_6" --output_dir "$tmp/spike7r" "${G[@]}" \
  --debug_loss_spike_step 7 >"$tmp/spike7r.log" 2>&1
a=$(losses "$tmp/spike7/metrics.jsonl" | tr ' ' '\n' | grep '^8:')
b=$(losses "$tmp/spike7r/metrics.jsonl" | tr ' ' '\n' | grep '^8:')
check_if $(yes_if test -n "$a" -a "$a" = "$b" -a "$(grep -c 'loss spike at step 7' "$tmp/spike7r.log")" = 1) \
  "resumed at step 6, the spike at step 7 is skipped too and step 8's loss is the uninterrupted run's ($a = $b)"

# ---- (d) bad settings -----------------------------------------------------------------------------------------
refused "loss_spike_threshold below 1" "loss_spike_threshold (Engine.loss_spike_threshold) must be 0 (off) or a factor > 1" \
  "$LLM4D" "${T[@]}" --max_steps 1 --output_dir "$tmp/bad" --loss_spike_threshold 0.5
refused "loss_spike_window 0" "loss_spike_window (Engine.loss_spike_window) must be 1 to 1000 steps" \
  "$LLM4D" "${T[@]}" --max_steps 1 --output_dir "$tmp/bad" --loss_spike_threshold 3 --loss_spike_window 0
finish
