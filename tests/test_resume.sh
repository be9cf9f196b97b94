#!/usr/bin/env bash
# Checkpoints and resume (issue 5, and issue 7's cross-layout resume):
#  1. 20 steps straight == 10 steps, stop, --resume, 10 steps: bit-identical losses and eval losses (dropout on);
#  2. a process SIGKILLed in the middle of writing step 10's checkpoint leaves step 5 as `latest`, loadable; the
#     run resumed from it still reproduces the straight run bit for bit;
#  3. a checkpoint written at sharding stage 3 with N = 4 resumes at stage 1 with N = 2 and in one process with the
#     same next losses (within 1e-5);
#  4. model_name_or_path pointing at a weights-only checkpoint starts a new run from those weights; --resume of it
#     is refused;
#  5. bad checkpoints (flipped byte, missing file, another model's meta.json, missing tensor) exit 2 with one line.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
test_setup
export OMP_NUM_THREADS=1
C=(--model_name_or_path gpt2-tiny --input_dir "$SRC_DIR/data/fortunes_ids.npz" --max_seq_len 32
   --global_batch_size 8 --max_lr 1e-3 --min_lr 1e-4 --warmup_rate 0.1 --decay_steps 20 --logging_freq 5
   --seed 7 -o Model.hidden_dropout_prob=0.1 -o Model.attention_probs_dropout_prob=0.1 --eval_freq 5 --eval_iters 2)
curve() { /usr/bin/python3 -c "
import json, sys
for l in open(sys.argv[1]):
    d = json.loads(l)
    print(d.get('step'), repr(d.get('loss')), d.get('eval_step'), repr(d.get('eval_loss')))" "$1"; }
run() { "$LLM4D" train "${C[@]}" "$@" >>"$tmp/log" 2>&1; }

# 1. straight vs stop + resume
run --micro_batch_size 4 --max_steps 20 --output_dir "$tmp/straight" --save_steps 5
run --micro_batch_size 4 --max_steps 10 --output_dir "$tmp/resumed"
run --micro_batch_size 4 --max_steps 20 --output_dir "$tmp/resumed" --resume "$tmp/resumed"
if [ -n "$(curve "$tmp/straight/metrics.jsonl")" ] && diff <(curve "$tmp/straight/metrics.jsonl") <(curve "$tmp/resumed/metrics.jsonl") >/dev/null
then ok "20 steps straight == 10 + resume + 10: bit-identical losses and eval losses"
else bad "resumed curve differs"; diff <(curve "$tmp/straight/metrics.jsonl") <(curve "$tmp/resumed/metrics.jsonl") | head; fi

# `llm4d eval` of step_5 == the run's own first evaluation, at step 5 (same weights, validation from its start)
"$LLM4D" eval "${C[@]}" --micro_batch_size 4 --ckpt "$tmp/straight/step_5" >"$tmp/eval.log" 2>&1
e=$(grep -o "eval step 5, loss: [0-9.]*" "$tmp/eval.log")
t=$(grep -ho "eval step 5, loss: [0-9.]*" "$tmp/log" | head -1)
if [ -n "$e" ] && [ "$e" = "$t" ]; then ok "llm4d eval --ckpt step_5 == the training run's evaluation at step 5 ($e)"
else bad "llm4d eval: '$e' vs training '$t'"; tail -3 "$tmp/eval.log"; fi

# 2. SIGKILL while writing step 10
run --micro_batch_size 4 --max_steps 5 --output_dir "$tmp/killed"
for point in mid_file before_rename latest_partial; do
  LLM4D_CKPT_KILL_AT=$point "$LLM4D" train "${C[@]}" --micro_batch_size 4 --max_steps 10 --output_dir "$tmp/killed" \
    --resume "$tmp/killed" >>"$tmp/log" 2>&1
  rc=$?
  latest=$(cat "$tmp/killed/latest" 2>/dev/null)
  if [ "$rc" = 137 ] && [ "$latest" = step_5 ]; then ok "killed at $point while saving step 10: latest is still step_5"
  else bad "killed at $point: exit $rc, latest '$latest'"; fi
done
# the run goes on from step 5 and matches the straight run
"$LLM4D" train "${C[@]}" --micro_batch_size 4 --max_steps 20 --output_dir "$tmp/killed" --resume "$tmp/killed" \
  >>"$tmp/log" 2>&1
# compare the last occurrence of every step and eval in the killed run's history with the straight run
d=$(/usr/bin/python3 - "$tmp/straight/metrics.jsonl" "$tmp/killed/metrics.jsonl" <<'PY'
import json, sys
def last(p):
    out = {}
    for d in map(json.loads, open(p)):
        key = ("step", d["step"]) if "step" in d else ("eval", d["eval_step"])
        out[key] = d.get("loss", d.get("eval_loss"))
    return out
a, b = last(sys.argv[1]), last(sys.argv[2])
print("same" if a == b else "differ: " + str([(k, a.get(k), b.get(k)) for k in sorted(a) if a.get(k) != b.get(k)][:3]))
PY
)
if [ "$d" = same ]; then ok "after the kills, resuming from step_5 reproduces steps 6-20 bit for bit"
else bad "resume after kill: $d"; fi

# 3. stage 3 x 4 -> stage 1 x 2 and one process
"$LLM4D" launch --nproc 4 --log_dir "$tmp/l1" -- train "${C[@]}" --micro_batch_size 2 --sharding_degree 4 \
  --sharding_stage 3 --max_steps 20 --output_dir "$tmp/s3ref" >>"$tmp/log" 2>&1
"$LLM4D" launch --nproc 4 --log_dir "$tmp/l2" -- train "${C[@]}" --micro_batch_size 2 --sharding_degree 4 \
  --sharding_stage 3 --max_steps 10 --output_dir "$tmp/s3" >>"$tmp/log" 2>&1
"$LLM4D" launch --nproc 2 --log_dir "$tmp/l3" -- train "${C[@]}" --micro_batch_size 4 --sharding_degree 2 \
  --sharding_stage 1 --max_steps 20 --output_dir "$tmp/s1" --resume "$tmp/s3" >>"$tmp/log" 2>&1
"$LLM4D" train "${C[@]}" --micro_batch_size 8 --max_steps 20 --output_dir "$tmp/one" --resume "$tmp/s3" \
  >>"$tmp/log" 2>&1
# the same with a consolidated save (whole tensors gathered on rank 0), resumed at stage 2 x 2
"$LLM4D" launch --nproc 4 --log_dir "$tmp/l4" -- train "${C[@]}" --micro_batch_size 2 --sharding_degree 4 \
  --sharding_stage 3 --max_steps 10 --output_dir "$tmp/s3c" --save_consolidated true >>"$tmp/log" 2>&1
"$LLM4D" launch --nproc 2 --log_dir "$tmp/l5" -- train "${C[@]}" --micro_batch_size 4 --sharding_degree 2 \
  --sharding_stage 2 --max_steps 20 --output_dir "$tmp/s2c" --resume "$tmp/s3c" >>"$tmp/log" 2>&1
if [ "$(ls "$tmp/s3c/step_10" | grep -c safetensors)" = 3 ]; then ok "consolidated save: one file per kind (whole tensors)"
else bad "consolidated save files: $(ls "$tmp/s3c/step_10")"; fi
if [ "$(ls "$tmp/s3/step_10" | grep -c '_r00[0-3].safetensors')" = 12 ]; then ok "sharded save: each of 4 ranks wrote its own slices"
else bad "sharded save files: $(ls "$tmp/s3/step_10")"; fi
for target in s1 one s2c; do
  d=$(/usr/bin/python3 - "$tmp/s3ref/metrics.jsonl" "$tmp/$target/metrics.jsonl" <<'PY'
import json, sys
ref = {d["step"]: d["loss"] for d in map(json.loads, open(sys.argv[1])) if "step" in d}
got = {d["step"]: d["loss"] for d in map(json.loads, open(sys.argv[2])) if "step" in d}
steps = [s for s in range(11, 21) if s in got]
print(max(abs(ref[s] - got[s]) for s in steps) if len(steps) == 10 else "missing")
PY
)
  if [ "$d" != missing ] && /usr/bin/python3 -c "import sys; sys.exit(0 if float('$d') <= 1e-5 else 1)" 2>/dev/null
  then ok "stage 3 x 4 checkpoint resumed as $target: steps 11-20 within $d of the uninterrupted stage-3 run"
  else bad "stage 3 x 4 checkpoint resumed as $target: $d"; fi
done

# 4. weights only
"$LLM4D" convert --to hf --ckpt "$tmp/straight" --out "$tmp/hf" >>"$tmp/log" 2>&1 &&
  "$LLM4D" convert --from hf --hf_dir "$tmp/hf" --out "$tmp/weights" >>"$tmp/log" 2>&1
"$LLM4D" train "${C[@]}" --model_name_or_path "$tmp/weights" --micro_batch_size 4 --max_steps 2 \
  --output_dir "$tmp/fromw" >"$tmp/w.log" 2>&1
if grep -q "global step 2," "$tmp/w.log" && head -1 "$tmp/fromw/metrics.jsonl" | grep -q "^{\"step\": 1," && grep -q "loaded weights from" "$tmp/w.log"
then ok "model_name_or_path = weights-only checkpoint: a new run from step 1 with those weights"
else bad "weights-only start"; tail -3 "$tmp/w.log"; fi
"$LLM4D" train "${C[@]}" --micro_batch_size 4 --max_steps 2 --output_dir "$tmp/fromw2" --resume "$tmp/weights" \
  >/dev/null 2>"$tmp/e"; rc=$?
if [ $rc = 2 ] && grep -q "weights only" "$tmp/e"; then ok "--resume of weights only refused: $(cat "$tmp/e")"
else bad "--resume of weights only: exit $rc $(cat "$tmp/e")"; fi

# 5. bad checkpoints
bad_ckpt() { # name word dir
  "$LLM4D" train "${C[@]}" --micro_batch_size 4 --max_steps 12 --output_dir "$tmp/bad_out" --resume "$3" \
    >/dev/null 2>"$tmp/e"; local rc=$?
  if [ $rc = 2 ] && [ "$(wc -l <"$tmp/e")" = 1 ] && grep -qi -- "$2" "$tmp/e"; then ok "$1: $(cat "$tmp/e")"
  else bad "$1: exit $rc: $(cat "$tmp/e")"; fi
}
cp -r "$tmp/resumed/step_10" "$tmp/flip"
printf '\x55' | dd of="$tmp/flip/model.safetensors" bs=1 seek=5000 conv=notrunc 2>/dev/null
bad_ckpt "flipped byte" "model.safetensors" "$tmp/flip"
cp -r "$tmp/resumed/step_10" "$tmp/missing" && rm "$tmp/missing/optim_v.safetensors"
bad_ckpt "missing file" "optim_v.safetensors" "$tmp/missing"
for v in 1e300 -3 2.5 '"ten"'; do # meta.json holds the checksums, so it is checked value by value
  cp -r "$tmp/resumed/step_10" "$tmp/meta_$v"
  /usr/bin/python3 -c 'import json, sys; p = sys.argv[1] + "/meta.json"; m = json.load(open(p)); m["step"] = json.loads(sys.argv[2]); json.dump(m, open(p, "w"))' "$tmp/meta_$v" "$v"
  bad_ckpt "meta.json step $v" 'meta.json.s "step" is not a whole number' "$tmp/meta_$v"
done
"$LLM4D" train "${C[@]}" -o Model.hidden_size=32 --micro_batch_size 4 --max_steps 10 --resume "$tmp/resumed/step_10" \
  --output_dir "$tmp/bad2" >/dev/null 2>"$tmp/e"; rc=$?
if [ $rc = 2 ] && grep -qi "different model" "$tmp/e"; then ok "checkpoint of another model (hidden 64 vs 32): $(cat "$tmp/e")"
else bad "checkpoint of another model: exit $rc $(cat "$tmp/e")"; fi
[ "$fail" = 0 ] || { echo "--- log tail"; tail -30 "$tmp/log"; }
finish
