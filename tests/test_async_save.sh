#!/usr/bin/env bash
# test_async_save.sh — --async_save (issue 45, item 2): checkpoints written by a background thread from a snapshot
# while training goes on, published by the main thread with the synchronous save's atomic protocol.
#   1. 8 steps saving every 2 give, with --async_save, every checkpoint byte-identical (every tensor file and
#      meta.json) to the synchronous run's: one process, and dp2 x sharding2 ZeRO-2 through `llm4d launch` (4 ranks,
#      2 of them data-parallel replicas that write nothing);
#   2. a run resumed from an asynchronous checkpoint (step_4) continues bit-identically: the losses of steps 5-8 and
#      step_8's files equal the uninterrupted run's;
#   3. a write failing in the background (LLM4D_FAULT=eio@1 on the save of step 4) stops the run at a later step with
#      exit 2 and the synchronous save's one line (the same words, pid of the temporary directory aside); `latest`
#      still names step_2, which loads, and no temporary directory is left; the same with the fault on rank 1 of a
#      ZeRO-2 x 2 job: every rank stops with rank 1's error;
#   5. the memory plan counts the snapshot: with --async_save each rank's planned workspace, and the workspace it
#      measures at its peak, grow by 3 x 4 bytes per element it writes (parameters, Adam m and v; counted here from
#      gpt2-tiny's shape, not from llm4d's figures): the whole model on one process; half of it on each writing rank
#      of dp2 x sharding2 ZeRO-2, nothing on the two replicas that write nothing;
#   4. SIGKILL while the writer thread is writing step 4 (LLM4D_CKPT_KILL_AT=mid_file, after_first_file: raised in the
#      writer), or while the main thread publishes it (before_rename): exit 137, `latest` names step_2, which loads,
#      no step_4 is named, and a resumed run cleans up and saves on.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
test_setup
export OMP_NUM_THREADS=1
unset LLM4D_FAULT LLM4D_FAULT_RANK LLM4D_CKPT_KILL_AT LLM4D_CKPT_KILL_RANK
C=(--model_name_or_path gpt2-tiny -o Model.num_layers=1 --input_dir "$SRC_DIR/data/fortunes_ids.npz" --max_seq_len 16
   --logging_freq 1 --eval_freq 0 --seed 3 --save_steps 2 -o Model.hidden_dropout_prob=0.1)
ONE=(--global_batch_size 4 --micro_batch_size 4)
Z2=(--global_batch_size 4 --micro_batch_size 2 --sharding_degree 2 --sharding_stage 2)
train() { "$LLM4D" train "${C[@]}" "${ONE[@]}" "$@"; }
# same_ckpts A B STEPS...: the step directories hold the same files, byte for byte; prints what differs
same_ckpts() {
    local a=$1 b=$2 s f why=""
    shift 2
    for s in "$@"; do
        [ -f "$a/step_$s/meta.json" ] || { why+=" $a/step_$s missing;"; continue; }
        [ "$(cd "$a/step_$s" && ls)" = "$(cd "$b/step_$s" 2>/dev/null && ls)" ] || why+=" step_$s: other files;"
        for f in "$a/step_$s"/*; do
            cmp -s "$f" "$b/step_$s/${f##*/}" || why+=" step_$s/${f##*/} differs;"
        done
    done
    echo "$why"
}
losses() { grep -o '"step": [0-9]*\|"loss": [^,]*' "$1" | paste - - | awk -v from="$2" '$2 >= from'; }
loads() { rm -rf "$tmp/hf" && "$LLM4D" convert --to hf --ckpt "$1" --out "$tmp/hf" >/dev/null 2>&1; }
no_tmp() { [ -z "$(find "$1" -maxdepth 1 -name '.tmp_*')" ]; }

# 1. byte-identical checkpoints, one process
t0=$(date +%s)
train --max_steps 8 --output_dir "$tmp/s1" >"$tmp/s1.log" 2>&1
train --max_steps 8 --output_dir "$tmp/a1" --async_save true >"$tmp/a1.log" 2>&1
n_bg=$(grep -c "written in the background in" "$tmp/a1.log")
why=$(same_ckpts "$tmp/s1" "$tmp/a1" 2 4 6 8)
check_if "$(yes_if test -z "$why" -a "$n_bg" = 4 -a "$(cat "$tmp/a1/latest" 2>/dev/null)" = step_8)" \
    "one process, 8 steps, save_steps 2: the 4 asynchronous checkpoints ($n_bg written in the background) are \
byte-identical to the synchronous ones${why:+:$why}"

# ... and dp2 x sharding2 ZeRO-2, 4 ranks
for m in s a; do
    extra=()
    [ $m = a ] && extra=(--async_save true)
    "$LLM4D" launch --nproc 4 --log_dir "$tmp/l$m" -- train "${C[@]}" --global_batch_size 8 --micro_batch_size 2 \
        --dp_degree 2 --sharding_degree 2 --sharding_stage 2 --max_steps 8 --output_dir "$tmp/${m}4" "${extra[@]}" \
        >"$tmp/${m}4.log" 2>&1 || { bad "the dp2 x sharding2 run ($m) failed"; tail -3 "$tmp/${m}4.log"; }
done
n_bg=$(cat "$tmp"/la/workerlog.* | grep -c "written in the background in")
why=$(same_ckpts "$tmp/s4" "$tmp/a4" 2 4 6 8)
check_if "$(yes_if test -z "$why" -a "$n_bg" = 8)" "dp2 x sharding2 ZeRO-2 (4 ranks): the asynchronous checkpoints \
($n_bg rank-saves written in the background) are byte-identical to the synchronous ones${why:+:$why}"
echo "     (part 1: $(($(date +%s) - t0)) s)"

# 5. the snapshot in the memory plan (logs of part 1). gpt2-tiny with one layer: vocabulary 50257, 256 positions,
# hidden 64: wte + wpe + a block (12h^2 + 13h) + the final LayerNorm (2h)
P=$((50257 * 64 + 256 * 64 + 12 * 64 * 64 + 13 * 64 + 2 * 64))
# ws LOG: "planned measured" workspace in bytes (MiB figures with two decimals: +-0.005 MiB)
ws() {
    /usr/bin/python3 - "$1" <<'PY'
import re, sys
t = open(sys.argv[1], errors="replace").read()
plan = re.search(r"memory plan of this rank, before allocating:.*?workspace ([0-9.]+) MiB", t)
peak = re.search(r"peak memory of this process over the run, by category:.*?workspace +[0-9.]+ MiB \(peak +([0-9.]+) MiB", t, re.S)
print(float(plan.group(1)) * 2**20 if plan else -1, float(peak.group(1)) * 2**20 if peak else -1)
PY
}
# grown BASE_LOG ASYNC_LOG EXPECTED_BYTES: both the plan and the measured peak grew by EXPECTED within 0.1 %
# (+ the logs' rounding); prints what is off
grown() {
    read -r p0 m0 <<<"$(ws "$1")"
    read -r p1 m1 <<<"$(ws "$2")"
    /usr/bin/python3 -c "
import sys
p0, m0, p1, m1, want = map(float, sys.argv[1:])
tol = 0.001 * want + 0.011 * 2**20
if min(p0, m0, p1, m1) < 0: print('no memory lines in the log;')
if abs((p1 - p0) - want) > tol: print('plan +%.2f MiB, want +%.2f;' % ((p1 - p0) / 2**20, want / 2**20))
if abs((m1 - m0) - want) > tol: print('measured +%.2f MiB, want +%.2f;' % ((m1 - m0) / 2**20, want / 2**20))
" "$p0" "$m0" "$p1" "$m1" "$3"
}
why=$(grown "$tmp/s1.log" "$tmp/a1.log" $((12 * P)))
check_if "$(yes_if test -z "$why")" "the memory plan counts the snapshot: one process's planned and measured \
workspace grow by 12 bytes x $P parameters ($(awk -v b=$((12 * P)) 'BEGIN{printf "%.2f", b / 1048576}') MiB)${why:+: $why}"
why="" writers=0
for r in 0 1 2 3; do
    w=$(grown "$tmp/ls/workerlog.$r" "$tmp/la/workerlog.$r" $((6 * P)))
    z=$(grown "$tmp/ls/workerlog.$r" "$tmp/la/workerlog.$r" 0)
    if [ -z "$w" ]; then writers=$((writers + 1)); elif [ -n "$z" ]; then why+=" rank $r: $w / $z"; fi
done
check_if "$(yes_if test -z "$why" -a $writers = 2)" "... and on dp2 x sharding2 ZeRO-2: two writing ranks grow by \
half of it each, the two replicas by nothing (writers: $writers)${why:+:$why}"

# 2. resume from an asynchronous checkpoint
train --max_steps 8 --output_dir "$tmp/r1" --resume "$tmp/a1/step_4" --async_save true >"$tmp/r1.log" 2>&1
why=$(same_ckpts "$tmp/a1" "$tmp/r1" 8)
check_if "$(yes_if test -n "$(losses "$tmp/r1/metrics.jsonl" 5)" -a "$(losses "$tmp/a1/metrics.jsonl" 5)" = \
    "$(losses "$tmp/r1/metrics.jsonl" 5)" -a -z "$why")" \
    "resumed from the asynchronous step_4: steps 5-8's losses and step_8's files equal the uninterrupted run's${why:+:$why}"

# 3. a write failing in the background
train --max_steps 2 --output_dir "$tmp/base" >"$tmp/base.log" 2>&1
check "a 2-step run saves step_2 (the checkpoint the failed saves must keep)" \
    test "$(cat "$tmp/base/latest" 2>/dev/null)" = step_2
fault() { # NAME ARGS...: resume a copy of base to step 6 under LLM4D_FAULT=eio@1 (the save of step 4 fails)
    local name=$1
    shift
    rm -rf "$tmp/$name" && cp -a "$tmp/base" "$tmp/$name"
    LLM4D_FAULT=eio@1 "$LLM4D" train "${C[@]}" "${ONE[@]}" --max_steps 6 --output_dir "$tmp/$name" \
        --resume "$tmp/$name" "$@" >"$tmp/$name.log" 2>"$tmp/$name.err"
}
fault fs
src=$?
fault fa --async_save true
arc=$?
norm() { sed -E "s|$tmp/f[sa]|OUT|g; s|\.tmp_step_([0-9]+)_[0-9]+|.tmp_step_\1_PID|g" "$1"; }
reason=""
[ $arc = 2 ] || reason+=" exit $arc;"
[ "$(wc -l <"$tmp/fa.err")" = 1 ] || reason+=" $(wc -l <"$tmp/fa.err") lines on stderr;"
grep -q "Input/output error.*latest still names step_2" "$tmp/fa.err" || reason+=" the line lacks the error or latest;"
[ $src = 2 ] && [ "$(norm "$tmp/fs.err")" = "$(norm "$tmp/fa.err")" ] ||
    reason+=" not the synchronous save's line ($(head -c 300 "$tmp/fs.err"));"
grep -q "global step 5," "$tmp/fa.log" || reason+=" training did not go on after the snapshot;"
[ "$(cat "$tmp/fa/latest")" = step_2 ] || reason+=" latest is $(cat "$tmp/fa/latest");"
[ ! -e "$tmp/fa/step_4" ] || reason+=" step_4 exists;"
no_tmp "$tmp/fa" || reason+=" a temporary directory was left;"
loads "$tmp/fa" || reason+=" step_2 does not load;"
check_if "$(yes_if test -z "$reason")" "eio@1 in the background write of step 4: exit 2 after step \
$(grep -o 'global step [0-9]*' "$tmp/fa.log" | tail -1 | grep -o '[0-9]*$') with the synchronous save's one line, \
latest still step_2 and loadable${reason:+:$reason}"
echo "     $(head -c 300 "$tmp/fa.err")"
reliability_row "save under faults" "asynchronous save (--async_save), a write error in the background (eio@1)" \
    "$(head -c 300 "$tmp/fa.err")" 2 "-" "yes" "$([ -z "$reason" ] && echo 1 || echo 0)"

# ... on rank 1 of a ZeRO-2 x 2 job
"$LLM4D" launch --nproc 2 --log_dir "$tmp/lz" -- train "${C[@]}" "${Z2[@]}" --max_steps 2 --output_dir "$tmp/zbase" \
    >"$tmp/zbase.log" 2>&1
rm -rf "$tmp/zout" && cp -a "$tmp/zbase" "$tmp/zout"
LLM4D_FAULT=eio@1 LLM4D_FAULT_RANK=1 "$LLM4D" launch --nproc 2 --log_dir "$tmp/lz" -- train "${C[@]}" "${Z2[@]}" \
    --max_steps 6 --output_dir "$tmp/zout" --resume "$tmp/zout" --async_save true >"$tmp/z.log" 2>"$tmp/z.err"
zrc=$?
zmsg=$(grep -h "^llm4d: rank [01]: rank 1: " "$tmp/lz/workerlog.0" "$tmp/lz/workerlog.1" | head -1)
check_if "$(yes_if test $zrc = 2 -a "$(cat "$tmp/zout/latest" 2>/dev/null)" = step_2 -a -n "$zmsg" -a ! -e \
    "$tmp/zout/step_4")" "ZeRO-2 x 2, eio@1 on rank 1 in the background: the job stops (exit $zrc) with rank 1's \
error, latest step_2: ${zmsg:0:160}"
loads "$tmp/zout" && no_tmp "$tmp/zout"
check_if "$(yes_if test $? = 0)" "... and step_2 loads, no temporary directory left"

# 4. SIGKILL during the background write, and during the publication
f0=$fail
for point in mid_file after_first_file before_rename; do
    rm -rf "$tmp/k" && cp -a "$tmp/base" "$tmp/k"
    ( # in a subshell of its own, so that its death is not announced by this shell
        LLM4D_CKPT_KILL_AT=$point "$LLM4D" train "${C[@]}" "${ONE[@]}" --max_steps 6 --output_dir "$tmp/k" \
            --resume "$tmp/k" --async_save true >"$tmp/k.log" 2>&1
        exit $?
    ) 2>/dev/null
    krc=$?
    reason=""
    [ $krc = 137 ] || reason+=" exit $krc;"
    grep -q "checkpoint of step 4: a snapshot" "$tmp/k.log" || reason+=" no snapshot of step 4 was taken;"
    [ "$(cat "$tmp/k/latest")" = step_2 ] || reason+=" latest is $(cat "$tmp/k/latest");"
    [ ! -e "$tmp/k/step_4" ] || reason+=" a step_4 is named;"
    loads "$tmp/k" || reason+=" step_2 does not load;"
    half=$(find "$tmp/k" -maxdepth 1 -name '.tmp_step_4_*' | wc -l)
    train --max_steps 6 --output_dir "$tmp/k" --resume "$tmp/k" --async_save true >"$tmp/k2.log" 2>&1 ||
        reason+=" the resumed run failed;"
    [ "$(cat "$tmp/k/latest")" = step_6 ] && no_tmp "$tmp/k" && loads "$tmp/k" ||
        reason+=" the resumed run did not save a loadable step_6 and clean up;"
    check_if "$(yes_if test -z "$reason")" "SIGKILL at $point (the save of step 4, async): latest still step_2 and \
loadable, the half-written directory ($half) unnamed; resumed, step_6 saved and the leftover removed${reason:+:$reason}"
done
reliability_checked "$f0" "crash during a save" "SIGKILL while the background writer writes or the main thread \
publishes (--async_save; mid_file, after_first_file, before_rename)" "the process dies; latest names the previous \
checkpoint" 137 "-" "yes"
finish
