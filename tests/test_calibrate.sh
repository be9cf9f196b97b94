#!/usr/bin/env bash
# test_calibrate.sh — `llm4d plan --calibrate` a user can run (issue 46, item 1), on gpt2-tiny (2 blocks, sequence
# 32, the quick calibration: under a minute here):
#   (a) interrupted: SIGINT once the profile holds measured kernels; the file left is a whole profile (it loads),
#       marked unfinished, holding the jobs' collectives and at least the kernel shapes the last progress line had
#       reported (the oracle: the run's own progress lines, read from its stderr, against the file's rows);
#   (b) the same command again continues: it says so, every kernel row the interrupted file held is in the new file
#       unchanged (kept, not measured again: the seconds are the earlier run's), the 1-rank job is not run again,
#       and the file ends marked complete;
#   (c) --calibrate_budget: a budget the jobs alone exceed leaves every model part unmeasured, says how many in its
#       last line and marks the file unfinished; a bad budget is one line, exit 2;
#   (d) a profile that cannot price the asked model refuses in one line (exit 2) naming the profile, what it was
#       measured for and the calibration to run: gpt2-en (hidden 768 against 64) and gpt2-tiny at sequence 256 (8x
#       the measured 32: attention's sequence beyond the 4x a profile prices within, plan/coverage.h), and the
#       unfinished profile of (c) (no linear layer measured); gpt2-tiny at sequence 128 (4x) is priced, and so is
#       gpt2-en from the published A100 profile (rates only: not asked);
#   (e) the update as the measured backend runs it: the CPU backend starts gradients over instead of zeroing them
#       (backend.h grads_reset), the profile says so ("grads_reset": true), and a one-process plan prices the AdamW
#       pass that does not zero them: with the measured rows of that pass made 10x slower in a copy of the profile
#       the predicted optimizer time grows, with the zeroing pass's rows made slower it does not; a copy saying
#       false (a backend that zeroes, as the CUDA one does) the other way round.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
test_setup
export OMP_NUM_THREADS=1
P="$tmp/machine.json"
CAL=(plan --calibrate --quick --model_name_or_path gpt2-tiny -o Model.num_layers=2 --max_seq_len 32
     --global_batch_size 4 --ranks_per_node 2)
count() { # count FILE: "kernels collectives complete" of a profile, or "bad"
  /usr/bin/python3 -c '
import json, sys
try:
    p = json.load(open(sys.argv[1])); c = p.get("calibration", {})
    print(len(p["kernels"]), len(p["collectives"]), int(bool(c.get("complete"))))
except Exception: print("bad")' "$1"
}

# ---- (a) interrupted ------------------------------------------------------------------------------------------------
# job control on: a background command of a script ignores SIGINT otherwise (as a terminal's Ctrl-C would not)
set -m
"$LLM4D" "${CAL[@]}" --machine_profile "$P" >"$tmp/a.log" 2>&1 &
pid=$!
set +m
# once the file holds a kernel measured by a model part (the jobs come first: their series are in it by then)
for _ in $(seq 1 1200); do
  read -r k _ _ <<<"$(count "$P" 2>/dev/null)"
  [ "${k:-bad}" != bad ] && [ "$k" -gt 0 ] 2>/dev/null && grep -q "kernels at 1 thread: part" "$tmp/a.log" && break
  alive $pid || break
  sleep 0.1
done
kill -INT $pid 2>/dev/null
wait $pid
rc=$?
read -r k1 c1 done1 <<<"$(count "$P")"
reported=$(sed -n 's/.*kernels at \([0-9]*\) threads\{0,1\}: part [0-9]* of [0-9]* ([0-9.]* MiB), \([0-9]*\) new shapes.*/\1 \2/p' \
  "$tmp/a.log" | awk '{n[$1] = $2} END {s = 0; for (t in n) s += n[t]; print s + 0}')
check_if "$(yes_if test "$rc" -ne 0)" "SIGINT stopped the calibration (exit $rc) after $(grep -c 'part' "$tmp/a.log") progress line(s)"
check_if "$(yes_if test "${k1:-bad}" != bad)" "the interrupted profile is whole JSON: $k1 kernel rows, $c1 collective series"
check_if "$(yes_if test "${done1:-1}" = 0)" "it is marked unfinished (calibration.complete false)"
check_if "$(yes_if test "${c1:-0}" -gt 0 -a "${k1:-0}" -ge "$reported" -a "$reported" -gt 0)" \
  "it holds what was measured: the jobs' $c1 collective series and $k1 kernel rows >= the $reported shapes the progress lines reported"
cp "$P" "$tmp/interrupted.json"

# ---- (b) continued ------------------------------------------------------------------------------------------------
"$LLM4D" "${CAL[@]}" --machine_profile "$P" >"$tmp/b.log" 2>&1
rc=$?
read -r k2 c2 done2 <<<"$(count "$P")"
check_if "$(yes_if test $rc = 0)" "the re-run ends (exit $rc): $(tail -1 "$tmp/b.log" | cut -c1-120)"
check_if "$(has "$tmp/b.log" "continuing the calibration in $P")" "it says it continues: $(grep -m1 continuing "$tmp/b.log" | cut -c1-140)"
check_if "$(has "$tmp/b.log" "1 rank: measured before")" "the 1-rank job measured before is not run again"
kept=$(/usr/bin/python3 -c '
import json, sys
a = json.load(open(sys.argv[1]))["kernels"]; b = {tuple(r) for r in json.load(open(sys.argv[2]))["kernels"]}
print(sum(tuple(r) in b for r in a), len(a))' "$tmp/interrupted.json" "$P")
read -r same all <<<"$kept"
check_if "$(yes_if test "$same" = "$all" -a "$all" -gt 0)" "all $all kernel rows of the interrupted file are in the final one unchanged ($same)"
new=$(sed -n 's/.*thread.*: \([0-9]*\) kernel shapes in .*/\1/p' "$tmp/b.log" | awk '{s += $1} END {print s + 0}')
# the optimizer's passes (ops 21, 22: AdamW, the square sum) are not counted in those lines
opt=$(/usr/bin/python3 -c 'import json, sys; print(sum(r[0] in (21, 22) for r in json.load(open(sys.argv[1]))["kernels"]))' "$P")
check_if "$(yes_if test "${done2:-0}" = 1 -a "$k2" -gt "$k1" -a "$((k1 + new + opt))" -ge "$k2")" \
  "the file ends complete with $k2 rows: the $k1 kept plus at most the $new model shapes the re-run measured and $opt optimizer rows"

# ---- (c) the time budget ------------------------------------------------------------------------------------------
"$LLM4D" "${CAL[@]}" --calibrate_budget 1 --machine_profile "$tmp/short.json" >"$tmp/c.log" 2>&1
rc=$?
read -r k3 c3 done3 <<<"$(count "$tmp/short.json")"
left=$(sed -n 's/.*left \([0-9]*\) of the model.s parts unmeasured.*/\1/p' "$tmp/c.log")
parts=$(sed -n 's/.*: \([0-9]*\) distinct model parts.*/\1/p' "$tmp/c.log")
check_if "$(yes_if test $rc = 0 -a -n "$left" -a "${left:-0}" = "${parts:-x}")" \
  "--calibrate_budget 1 (the jobs alone take longer): exit $rc, all ${parts:-?} parts left unmeasured, said in its last line: $(tail -1 "$tmp/c.log" | cut -c1-160)"
check_if "$(yes_if test "${done3:-1}" = 0 -a "${c3:-0}" -gt 0)" "that profile is marked unfinished and holds the jobs' $c3 series"
refused "a bad --calibrate_budget" "calibrate_budget" "$LLM4D" "${CAL[@]}" --calibrate_budget soon --machine_profile "$tmp/x.json"

# ---- (d) a profile that cannot price the model ----------------------------------------------------------------------
ASK=(plan --global_batch_size 4 --ranks_per_node 2 --nodes 1 --top 1)
refused "gpt2-en from a gpt2-tiny profile" "machine profile $P cannot price gpt2-en (hidden 768.*measured for gpt2-tiny (hidden 64, 2 layers) at sequence 32.*--calibrate --model_name_or_path gpt2-en --max_seq_len 1024.*--machine_profile $P" \
  "$LLM4D" "${ASK[@]}" --model_name_or_path gpt2-en --max_seq_len 1024 --machine_profile "$P"
refused "gpt2-tiny at sequence 256 (8x the measured 32)" "cannot price gpt2-tiny.*at sequence 256.*attention.*8x off.*--max_seq_len 256" \
  "$LLM4D" "${ASK[@]}" --model_name_or_path gpt2-tiny -o Model.num_layers=2 --max_seq_len 256 --machine_profile "$P"
refused "the budget-cut profile (no model part measured)" "cannot price gpt2-tiny.*measured no fp32 linear forward" \
  "$LLM4D" "${ASK[@]}" --model_name_or_path gpt2-tiny -o Model.num_layers=2 --max_seq_len 32 --machine_profile "$tmp/short.json"
"$LLM4D" "${ASK[@]}" --model_name_or_path gpt2-tiny -o Model.num_layers=2 --max_seq_len 128 --machine_profile "$P" >"$tmp/d1.txt" 2>&1
check_if "$(yes_if grep -q "s/step" "$tmp/d1.txt")" "gpt2-tiny at sequence 128 (4x) is priced: $(grep -m1 's/step' "$tmp/d1.txt" | cut -c1-90)"
"$LLM4D" "${ASK[@]}" --model_name_or_path gpt2-en --max_seq_len 1024 --machine_profile "$SRC_DIR/bench/profiles/a100_selene.json" \
  --memory_per_node 640 >"$tmp/d2.txt" 2>&1
check_if "$(yes_if grep -q "s/step" "$tmp/d2.txt")" "a published profile (rates only) still prices gpt2-en: $(grep -m1 's/step' "$tmp/d2.txt" | cut -c1-90)"
# ---- (e) the update as the measured backend runs it -----------------------------------------------------------------
said=$(/usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1])).get("grads_reset"))' "$P")
check_if "$(yes_if test "$said" = True)" \
  "the CPU backend's profile says its gradients start over (\"grads_reset\": true)"
variant() { # variant RESET Z OUT: $P with grads_reset RESET and its AdamW rows of zero_grads Z 10x slower, to OUT
  /usr/bin/python3 -c '
import json, sys
p = json.load(open(sys.argv[1])); p["grads_reset"] = sys.argv[2] == "true"
for r in p["kernels"]:
    if r[0] == 21 and r[5] == int(sys.argv[3]): r[12:18] = [x * 10 for x in r[12:18]]
json.dump(p, open(sys.argv[4], "w"))' "$P" "$1" "$2" "$3"
}
optim_of() { # optim_of PROFILE: the optimizer seconds a one-process plan of the calibrated model predicts
  "$LLM4D" plan --evaluate --json --machine_profile "$1" --model_name_or_path gpt2-tiny -o Model.num_layers=2 \
    --max_seq_len 32 --global_batch_size 4 --ranks_per_node 1 --micro_batch_size 4 2>"$tmp/e.err" |
    /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["optimizer_s"])'
}
for reset in true false; do
  for z in 0 1; do
    variant $reset $z "$tmp/e_${reset}_$z.json"
    eval "o_${reset}_$z=$(optim_of "$tmp/e_${reset}_$z.json" || echo x)"
  done
done
grew() { # grew A B: B more than twice A (both numbers)
  /usr/bin/python3 -c 'import sys; a, b = map(float, sys.argv[1:]); sys.exit(not b > 2 * a)' "$1" "$2" 2>/dev/null
}
check_if "$(yes_if grew "$o_true_1" "$o_true_0")" \
  "\"grads_reset\": true prices the pass that does not zero: its rows 10x slower $o_true_0 s, the other's $o_true_1 s"
check_if "$(yes_if grew "$o_false_0" "$o_false_1")" \
  "\"grads_reset\": false prices the zeroing pass: its rows 10x slower $o_false_1 s, the other rows' $o_false_0 s"
finish
