#!/usr/bin/env bash
# test_restarts.sh — `llm4d launch --max_restarts N`'s rules (issue 45), on 2-rank gpt2-tiny jobs (dp2):
#   - a rank that dies (LLM4D_FAULT=crash@5 on rank 1: SIGKILL at its first collective of step 5, every time the job
#     gets there) is restarted from `latest` (step_4), with one line per restart naming the rank, the signal, the
#     step reached, the checkpoint resumed and the steps lost; the same failure from the same checkpoint 3 times in
#     a row stops the restarts with one line (exit 137), after backing off (1 s, then 2 s);
#   - a job whose rank 1 is killed once (SIGKILL from outside after step 3) finishes after one restart; its
#     metrics.jsonl holds each step once, with an uninterrupted run's losses, and its final checkpoint is that run's;
#   - a user error (a collective failing with an I/O error: exit 2) is never restarted;
#   - --max_restarts out of range, and the config key's, are refused with one line, exit 2.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
test_setup
LLM4D=$(cd "$(dirname "$LLM4D")" && pwd)/$(basename "$LLM4D")
cd "$tmp" || exit 1
export OMP_NUM_THREADS=1
unset LLM4D_FAULT LLM4D_FAULT_RANK
T=(train --model_name_or_path gpt2-tiny -o Model.num_layers=1 --input_dir "$SRC_DIR/data/fortunes_ids.npz"
   --max_seq_len 16 --global_batch_size 4 --dp_degree 2 --logging_freq 1 --eval_freq 1000 --save_steps 2
   --max_lr 1e-3 --min_lr 1e-4 --warmup_rate 0.1 --decay_steps 100)
# losses FILE: "step loss" per training line of a metrics.jsonl
losses() { /usr/bin/python3 -c '
import json, sys
for l in open(sys.argv[1]):
    d = json.loads(l)
    if "step" in d: print(d["step"], repr(d["loss"]))' "$1"; }

# 1. the same crash from the same checkpoint, again and again: restarted twice, then given up
t0=$(date +%s.%N)
LLM4D_FAULT=crash@5 LLM4D_FAULT_RANK=1 timeout 120 "$LLM4D" launch --nproc 2 --log_dir l1 --max_restarts 5 -- \
    "${T[@]}" --max_steps 8 --output_dir o1 >out1 2>err1
rc=$?
secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
check_if $(yes_if test $rc = 137) "a rank killed at step 5 every time: the launcher gives up with exit 137 (got $rc, $secs s)"
check_if $(yes_if test "$(grep -cE '^llm4d launch: restart [12] of 5 in [12] s: rank 1 \(pid [0-9]+\) was killed by signal 9 \(Killed\)( at step [45])?; resuming from o1/step_4' err1)" = 2) \
    "two restarts from o1/step_4, the second after backing off 2 s ($(grep -m1 'restart 1' err1))"
f0=$fail
check_if $(has err1 '^llm4d launch: not restarting: the job failed 3 times in a row from o1/step_4 without saving a newer checkpoint') \
    "the third failure from step_4 stops the restarts with one line"
reliability_checked $f0 "restarts (test_restarts)" "a rank dies at the same step after every restart (crash@5, --max_restarts 5)" \
    "$(grep -m1 'not restarting' err1)" $rc "$secs" "yes (step_4)"
check_if $(has err1 '^llm4d launch: the latest checkpoint is o1/step_4; to resume from it: .* --resume o1$') \
    "and names the checkpoint and the command to resume"
check_if $(yes_if test -f l1/failed.1.workerlog.1 -a -f l1/failed.2.workerlog.1) \
    "the failed runs' logs of rank 1 are kept (failed.1.workerlog.1, failed.2.workerlog.1)"

# 2. one death (SIGKILL of rank 1 from outside, after step 3), then the job finishes
timeout 120 "$LLM4D" launch --nproc 2 --log_dir l2 --max_restarts 2 -- "${T[@]}" --max_steps 40 --output_dir ref \
    >/dev/null 2>errref
rcref=$?
"$LLM4D" launch --nproc 2 --log_dir l2b --max_restarts 2 -- "${T[@]}" --max_steps 40 --output_dir o2 >out2 2>err2 &
launcher=$!
wait_for l2b/workerlog.0 60 "global step 3,"
# the launcher's mpirun's workers' children are the ranks
victim=$(for w in $(children "$(children $launcher)"); do children "$w"; done | while read -r p; do
    rank_is "$p" 1 && echo "$p"; done | head -1)
[ -n "$victim" ] && kill -9 "$victim"
wait_for_exit() { local i; for i in $(seq 1 1200); do alive "$1" || return 0; sleep 0.1; done; kill "$1"; }
wait_for_exit $launcher
wait $launcher
rc=$?
check_if $(yes_if test -n "$victim" -a $rc = 0 -a $rcref = 0) \
    "rank 1 (pid ${victim:-?}) killed after step 3: the job restarts and finishes, exit 0 (got $rc; uninterrupted $rcref)"
check_if $(yes_if test "$(grep -c "^llm4d launch: restart 1 of 2 in 1 s: rank 1 (pid $victim) was killed by signal 9 (Killed) at step [0-9]*; resuming from o2/step_[0-9]*" err2)" = 1) \
    "one restart line, naming the rank, the signal, the step reached and the checkpoint ($(grep -m1 'restart 1' err2))"
check_if $(yes_if test "$(losses o2/metrics.jsonl | cut -d' ' -f1 | tr '\n' ' ')" = "$(seq 1 40 | tr '\n' ' ')") \
    "metrics.jsonl holds steps 1-40 once each, the redone steps not twice"
check_if $(yes_if test -n "$(losses ref/metrics.jsonl)" -a "$(losses o2/metrics.jsonl)" = "$(losses ref/metrics.jsonl)") \
    "and every step's loss equals the uninterrupted run's to the bit"
ok=1
for f in ref/step_40/*; do cmp -s "$f" "o2/step_40/$(basename "$f")" || ok=0; done
check_if $ok "the final checkpoint's files equal the uninterrupted run's"

# 3. a user error is never restarted
LLM4D_FAULT=collective@3 LLM4D_FAULT_RANK=1 timeout 120 "$LLM4D" launch --nproc 2 --log_dir l3 --max_restarts 3 -- \
    "${T[@]}" --max_steps 6 --output_dir o3 >out3 2>err3
rc=$?
f0=$fail
check_if $(yes_if test $rc = 2 -a "$(grep -c restart err3)" = 1) \
    "a user error (an I/O error in a collective): exit 2, no restart (got $rc: $(grep -v '^llm4d launch: 2 processes' err3 | head -1))"
reliability_checked $f0 "restarts (test_restarts)" "a user error under --max_restarts 3 (collective@3 on rank 1)" \
    "$(grep -v '^llm4d launch: 2 processes' err3 | head -1)" $rc - "-"

# 4. bad counts
refused "launch --max_restarts -1" "^llm4d launch: --max_restarts '-1' is not a count in \[0, 1000\]" \
    "$LLM4D" launch --nproc 2 --max_restarts -1 -- "${T[@]}"
refused "train's max_restarts key -1" "max_restarts must be in \[0, 1000\]" \
    "$LLM4D" launch --nproc 2 -- "${T[@]}" -o Engine.save_load.max_restarts=-1
finish
