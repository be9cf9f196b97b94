#!/usr/bin/env bash
# test_save_faults.sh — saves under faults (issue 15, item 5). A save that fails (disk full, write error, permission
# lost mid-run) must leave the previous checkpoint as `latest`, load cleanly after, and stop the run with one line
# naming the path and the error, exit 2. LLM4D_FAULT (src/core/fault.h) makes the N-th operation of a kind fail;
# for each kind the test loops N = 1, 2, ... over every such operation of a save, until N is past the last one (the
# save then succeeds). For every N that fails:
#   - the run resumed from step_2 exits 2 with exactly one line on stderr naming a path under output_dir and the
#     error's text, and saying which checkpoint `latest` still names;
#   - `latest` names step_2 (or, only for the directory sync after `latest` itself was replaced, the new step_3, and
#     the message says so); no temporary directory is left behind;
#   - the checkpoint `latest` names loads: `llm4d convert` opens it, verifies every file's size and crc32 and reads
#     every tensor (and the first N past the last operation gives a save of step_3 that loads: an error swallowed
#     on the way would show there);
# and after each loop a resumed run trains on from what `latest` names and saves step_3 (over a step_3 directory a
# failed publication may have left). Then the same for a sharded save (2 ranks, ZeRO-2, collective save: a fault on
# rank 1 must fail the save on every rank), and a collective operation failing at step 3 (LLM4D_FAULT=collective@3,
# one process and rank 1 of 2): exit 2 naming the operation and group, step_2 still `latest` and loadable.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
test_setup
export OMP_NUM_THREADS=1
unset LLM4D_FAULT LLM4D_FAULT_RANK LLM4D_CKPT_KILL_AT LLM4D_CKPT_KILL_RANK
C=(--model_name_or_path gpt2-tiny -o Model.num_layers=1 --input_dir "$SRC_DIR/data/fortunes_ids.npz" --max_seq_len 16
   --global_batch_size 4 --logging_freq 1 --eval_freq 0 --seed 3)

"$LLM4D" train "${C[@]}" --micro_batch_size 4 --max_steps 2 --output_dir "$tmp/base" >"$tmp/base.log" 2>&1
check "a 2-step run saves step_2 (the checkpoint the faulty saves must keep)" \
    test "$(cat "$tmp/base/latest" 2>/dev/null)" = step_2

now() { date +%s.%N; }
# seconds from the last log line of the run (its last step, just before the save) to the process's exit
stop_time() { # LOG END
    /usr/bin/python3 - "$1" "$2" <<'PY'
import datetime, re, sys
ts = [m.group(1) for m in (re.match(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]", l) for l in open(sys.argv[1])) if m]
t = datetime.datetime.strptime(ts[-1], "%Y-%m-%d %H:%M:%S,%f").timestamp() if ts else float(sys.argv[2])
print(f"{max(0.0, float(sys.argv[2]) - t):.2f}")
PY
}
# a run loads: convert opens the checkpoint `latest` names, checks every file's size and crc32, reads every tensor
loads() { "$LLM4D" convert --to hf --ckpt "$1" --out "$tmp/hf" >/dev/null 2>&1; }

# one faulty save: resume $out (a copy of base) to step 3 with LLM4D_FAULT=$1; sets rc, msg, lines, latest, stop
fault_run() {
    rm -rf "$tmp/out" "$tmp/hf"
    cp -a "$tmp/base" "$tmp/out"
    LLM4D_FAULT=$1 "$LLM4D" train "${C[@]}" --micro_batch_size 4 --max_steps 3 --output_dir "$tmp/out" \
        --resume "$tmp/out" >"$tmp/run.log" 2>"$tmp/run.err"
    rc=$?
    local end
    end=$(now)
    stop=$(stop_time "$tmp/run.log" "$end")
    msg=$(head -c 600 "$tmp/run.err")
    lines=$(wc -l <"$tmp/run.err")
    latest=$(cat "$tmp/out/latest" 2>/dev/null)
}

# loop_fault KIND WORDS: N = 1, 2, ... for LLM4D_FAULT=KIND@N until a save succeeds; WORDS: the error's text
loop_fault() {
    local kind=$1 words=$2 n=0 good=0 badn="" worst=0 first="" reason
    while :; do
        n=$((n + 1))
        fault_run "$kind@$n"
        if [ $rc = 0 ] && [ "$latest" = step_3 ] && [ ! -s "$tmp/run.err" ]; then
            # past the last operation: the save must be whole (an error swallowed on the way would show here)
            loads "$tmp/out" || badn+=" N=$n: the save reported success but step_3 does not load;"
            break
        fi
        reason=""
        [ $rc = 2 ] || reason+=" exit $rc;"
        [ "$lines" = 1 ] || reason+=" $lines lines on stderr;"
        grep -q -- "$words" "$tmp/run.err" || reason+=" no '$words';"
        grep -q -- "$tmp/out" "$tmp/run.err" || reason+=" no path under output_dir;"
        if [ "$latest" = step_2 ]; then
            grep -q "latest still names step_2" "$tmp/run.err" || reason+=" does not say latest is step_2;"
        elif [ "$latest" = step_3 ]; then # only when `latest` was replaced before the failing sync
            grep -q "syncing $tmp/out:" "$tmp/run.err" && grep -q "latest names step_3" "$tmp/run.err" ||
                reason+=" latest became step_3 although the failure came earlier;"
        else
            reason+=" latest is '$latest';"
        fi
        [ -z "$(find "$tmp/out" -maxdepth 1 -name '.tmp_*')" ] || reason+=" a temporary directory was left;"
        loads "$tmp/out" || reason+=" the checkpoint latest names does not load;"
        if [ -z "$reason" ]; then
            good=$((good + 1))
            [ -n "$first" ] || first=$msg
            worst=$(awk -v a="$worst" -v b="$stop" 'BEGIN { print (b > a) ? b : a }')
        else
            badn+=" N=$n:$reason"
        fi
        if [ $n -ge 400 ]; then badn+=" (no successful save after 400 operations)"; break; fi
    done
    local total=$((n - 1))
    if [ -z "$badn" ] && [ $total -ge 1 ]; then
        ok "LLM4D_FAULT=$kind@1..$total: each of the $total failed saves exits 2 with one line and keeps a $(
            )loadable latest (stop <= ${worst}s); @$n saves"
        echo "     e.g. $first"
    else
        bad "LLM4D_FAULT=$kind@1..$total:$badn"
        tail -5 "$tmp/run.log"
    fi
    reliability_row "save under faults" "$3 ($kind@N, each of the $total)" "$first" 2 "$worst" \
        "yes, all $good" "$([ -z "$badn" ] && [ $total -ge 1 ] && echo 1 || echo 0)"
    # after the faults the run resumes from what latest names and saves step_3 over anything left there
    fault_run "$kind@1"
    "$LLM4D" train "${C[@]}" --micro_batch_size 4 --max_steps 3 --output_dir "$tmp/out" --resume "$tmp/out" \
        >"$tmp/resume.log" 2>&1
    check "after $kind@1 the run resumes from step_2 and saves step_3" \
        test "$(grep -c 'resuming at global step 3' "$tmp/resume.log"):$(cat "$tmp/out/latest")" = "1:step_3"
}

loop_fault enospc "No space left on device" "disk full at every write of a save"
loop_fault eio "Input/output error" "write error at every write of a save"
loop_fault eio:fsync "Input/output error" "I/O error at every fsync of a save"
loop_fault eacces "Permission denied" "permission lost at every file or directory a save creates"
loop_fault eacces:rename "Permission denied" "permission lost at every rename that publishes a save"

# the sharded, collective save: rank 1 fails, every rank stops, nothing is published
"$LLM4D" launch --nproc 2 --log_dir "$tmp/lz" -- train "${C[@]}" --micro_batch_size 2 --sharding_degree 2 \
    --sharding_stage 2 --max_steps 2 --output_dir "$tmp/zbase" >"$tmp/zbase.log" 2>&1
check "ZeRO-2 x 2 saves step_2 collectively" test "$(cat "$tmp/zbase/latest" 2>/dev/null)" = step_2
zgood=0 zfirst=""
for spec in enospc@1 enospc@9 eio:fsync@2 eacces@1; do
    rm -rf "$tmp/zout" && cp -a "$tmp/zbase" "$tmp/zout"
    LLM4D_FAULT=$spec LLM4D_FAULT_RANK=1 "$LLM4D" launch --nproc 2 --log_dir "$tmp/lz" -- train "${C[@]}" \
        --micro_batch_size 2 --sharding_degree 2 --sharding_stage 2 --max_steps 3 --output_dir "$tmp/zout" \
        --resume "$tmp/zout" >"$tmp/z.log" 2>"$tmp/z.err"
    zrc=$?
    zlatest=$(cat "$tmp/zout/latest" 2>/dev/null)
    # both ranks fail with rank 1's error; whichever aborts first ends the job, so either log may hold it
    zmsg=$(grep -h "^llm4d: rank [01]: rank 1: " "$tmp/lz/workerlog.0" "$tmp/lz/workerlog.1" | head -1)
    if [ $zrc = 2 ] && [ "$zlatest" = step_2 ] && grep -q "rank 1: .*$tmp/zout" <<<"$zmsg" && loads "$tmp/zout" &&
        [ -z "$(find "$tmp/zout" -maxdepth 1 -name '.tmp_*')" ]; then
        ok "ZeRO-2 x 2, LLM4D_FAULT=$spec on rank 1: the job stops (exit 2) with its error, step_2 loads: ${zmsg:0:150}"
        zgood=$((zgood + 1))
        [ -n "$zfirst" ] || zfirst=$zmsg
    else
        bad "ZeRO-2 x 2, LLM4D_FAULT=$spec on rank 1: exit $zrc, latest '$zlatest', the ranks say '$zmsg'"
        tail -5 "$tmp/z.err"
    fi
done
reliability_row "save under faults" \
    "sharded collective save (ZeRO-2 x 2), a fault on rank 1 (enospc@1, enospc@9, eio:fsync@2, eacces@1)" \
    "$zfirst" 2 "-" "yes, all $zgood" "$([ $zgood = 4 ] && echo 1 || echo 0)"

# a collective failing at step 3: one process, and rank 1 of a dp2 job
rm -rf "$tmp/c1"
LLM4D_FAULT=collective@3 "$LLM4D" train "${C[@]}" --micro_batch_size 4 --max_steps 5 --save_steps 2 \
    --output_dir "$tmp/c1" >"$tmp/c1.log" 2>"$tmp/c1.err"
crc=$?
cstop=$(stop_time "$tmp/c1.log" "$(now)")
cmsg=$(cat "$tmp/c1.err")
cok=$([ $crc = 2 ] && [ "$(wc -l <"$tmp/c1.err")" = 1 ] && grep -q "on the data group.*Input/output error.*step 3" \
    "$tmp/c1.err" && [ "$(cat "$tmp/c1/latest")" = step_2 ] && loads "$tmp/c1" && echo 1 || echo 0)
check_if "$cok" "one process, LLM4D_FAULT=collective@3: exit $crc, latest step_2 loads: $cmsg"
reliability_row "communication" "a collective fails at step 3 (collective@3, one process)" "$cmsg" $crc "$cstop" \
    "yes (step_2)" "$cok"
rm -rf "$tmp/c2"
LLM4D_FAULT=collective@3 LLM4D_FAULT_RANK=1 "$LLM4D" launch --nproc 2 --log_dir "$tmp/lc" -- train "${C[@]}" \
    --micro_batch_size 2 --dp_degree 2 --max_steps 5 --save_steps 2 --output_dir "$tmp/c2" \
    >"$tmp/c2.log" 2>"$tmp/c2.err"
crc=$?
t1=$(now)
cmsg=$(grep -h "^llm4d: rank 1" "$tmp/lc/workerlog.1" | head -1)
cstop=$(stop_time "$tmp/lc/workerlog.0" "$t1")
cok=$([ $crc = 2 ] && grep -q "allreduce on the data group (rank 1 of 2): Input/output error" <<<"$cmsg" &&
    [ "$(grep -c . "$tmp/c2.err")" = 2 ] && grep -qxF "$cmsg" "$tmp/c2.err" && [ "$(cat "$tmp/c2/latest")" = step_2 ] &&
    loads "$tmp/c2" && echo 1 || echo 0)
check_if "$cok" "dp2, LLM4D_FAULT=collective@3 on rank 1: the job ends with exit $crc in ${cstop}s, step_2 loads: $cmsg"
reliability_row "communication" "a collective fails at step 3 on rank 1 of 2 (dp2)" "$cmsg" $crc "$cstop" \
    "yes (step_2)" "$cok"
finish
