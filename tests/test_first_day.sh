#!/usr/bin/env bash
# test_first_day.sh — how a job ends, as a new user meets it (issue 43): what `llm4d launch` says, what `llm4d
# report` calls the run, and what is left in /dev/shm, for dp2 gpt2-tiny jobs (checkpoints every 2 steps) ended
#   - by success (4 ranks): exit 0, the report says finished;
#   - by SIGINT to the launcher's process group (a terminal's Ctrl-C): exit 130, the launcher names the step, the
#     latest checkpoint and the command to resume, and that command, run, continues from the checkpoint; the report
#     says stopped (not finished), with the step it reached and the latest checkpoint;
#   - by SIGTERM to the launcher alone (a scheduler): exit 143, the same, the report says stopped;
#   - by SIGKILL of rank 1: the launcher names rank 1 and how to resume; the report says failed, rank 1 killed;
#   - by a user error on rank 1 (a failing collective, LLM4D_FAULT): exit 2, on the terminal exactly the launcher's
#     first line and rank 1's error line; the report says failed with that line. This job is launched into the log
#     directory of the successful 4-rank job: afterwards that job's report still says finished, says its logs now
#     belong to another run and reads none of them, and no exit record or log of ranks 2 and 3 is left there;
# and after every one of them /dev/shm holds none of the job's files (Open MPI's segments, by the job id read from a
# rank's environment, and the launcher's directory for them). Then `llm4d train` run directly (no launcher, so no
# worker logs or exit records: run.json's end and process say it), the report's state
#   - while it runs: in progress, its process (pid, host) running;
#   - after a Ctrl-C to its process group: stopped at the step it reached, its process gone, with the latest
#     checkpoint; the same run.json naming another host: it cannot tell (no guess); naming this shell's process with
#     that process's start time (read here from /proc): running, and with another start time (a reused pid): stopped;
#   - after a failure (a non-finite gradient injected at step 3, exit 2): failed, the last good step 2, its error;
#   - after success: finished, and run.json says so ("end": finished).
set -uo pipefail
source "$(dirname "$0")/lib.sh"
test_setup
LLM4D=$(cd "$(dirname "$LLM4D")" && pwd)/$(basename "$LLM4D")
cd "$tmp" || exit 1
export OMP_NUM_THREADS=1
C=(train --model_name_or_path gpt2-tiny --input_dir "$SRC_DIR/data/fortunes_ids.npz" --max_seq_len 32
   --global_batch_size 8 --logging_freq 1 --seed 7 --eval_freq 1000 --save_steps 2 --max_lr 1e-3 --min_lr 1e-4
   --warmup_rate 0.1 --decay_steps 100)

# ranks_of LAUNCHER_PID: the pids of the job's ranks (the launcher's mpirun's workers' children)
ranks_of() {
    local m w
    for m in $(children "$1"); do for w in $(children "$m"); do children "$w"; done; done
}
# job_of PID: the Open MPI job id (hex, as in vader_segment.<host>.<job>.<local rank>) in a rank's environment
job_of() {
    local j
    j=$(tr '\0' '\n' <"/proc/$1/environ" 2>/dev/null | sed -n 's/^OMPI_MCA_ess_base_jobid=//p')
    [ -n "$j" ] && printf '%x' "$j"
}
# shm_left JOB RUN_ID: the job's files still in /dev/shm
shm_left() { ls /dev/shm 2>/dev/null | grep -E "^vader_segment\..*\.$1\.[0-9]+$|^llm4d-mpi\.$2$" | tr '\n' ' '; }
run_id() { sed -n '1s/^llm4d worker: rank [0-9]* runs on host .* (run \([0-9a-z-]*\))$/\1/p' "$1"; }
# last_step OUT: the last step metrics.jsonl recorded
last_step() { sed -n 's/^{"step": \([0-9]*\),.*/\1/p' "$1/metrics.jsonl" 2>/dev/null | tail -1; }
# start NAME ARGS...: a job in the background (its own process group, as a shell's job), its pid in $launcher
start() {
    local name=$1
    shift
    setsid "$LLM4D" launch --nproc 2 --log_dir "$tmp/$name.log" -- "${C[@]}" --dp_degree 2 --micro_batch_size 4 \
        --output_dir "$tmp/$name" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
    launcher=$!
}
# running NAME: waits until the job has saved step_4 and logged step 5, then notes its ranks and job id
running() {
    local i
    for i in $(seq 1 600); do
        [ "$(last_step "$tmp/$1")" -ge 5 ] 2>/dev/null && [ -d "$tmp/$1/step_4" ] && break
        sleep 0.1
    done
    ranks=$(ranks_of "$launcher" | tr '\n' ' ')
    job=$(job_of "${ranks%% *}")
}
# ended [SECONDS]: waits for the launcher (30 s at most), its exit code in $rc
ended() {
    local i
    for i in $(seq 1 300); do alive "$launcher" || break; sleep 0.1; done
    alive "$launcher" && kill -9 "$launcher" $ranks 2>/dev/null
    wait "$launcher" 2>/dev/null
    rc=$?
}
# report NAME: the report of NAME's run; its state line in $state
report() {
    "$LLM4D" report "$tmp/$1" -o "$tmp/$1.html" >/dev/null 2>"$tmp/$1.report.err"
    state=$(grep -o '<div id="state" class="state [a-z]*">[^<]*' "$tmp/$1.html" 2>/dev/null | sed 's/.*class="state //')
    [ -n "$state" ] || state="no state line; the report said: $(head -c 300 "$tmp/$1.report.err")"
}
shm_clean() { # NAME [LOG_DIR]: /dev/shm holds nothing of the job
    local id left
    id=$(run_id "${2:-$tmp/$1.log}/workerlog.0")
    left=$(shm_left "${job:-none}" "${id:-none}")
    check_if $(yes_if test -n "$job" -a -z "$left") "$1: /dev/shm holds nothing of the job (job ${job:-?}; left: ${left:-none})"
}

# ---- success, 4 ranks ------------------------------------------------------------------------------------------
timeout 120 "$LLM4D" launch --nproc 4 --log_dir "$tmp/shared.log" -- "${C[@]}" --dp_degree 4 --micro_batch_size 2 \
    --max_steps 4 --output_dir "$tmp/ok" >"$tmp/ok.out" 2>"$tmp/ok.err"
rc=$?
report ok
check_if $(yes_if test $rc = 0) "success: exit 0 (got $rc)"
check_if $(yes_if test "$state" = "finished\">finished: 4 steps") "success: the report says finished ($state)"

# ---- SIGINT to the process group (Ctrl-C) ----------------------------------------------------------------------
start int --max_steps 100000
running int
t0=$(date +%s.%N)
kill -INT -- -"$launcher"
ended
secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
step=$(last_step "$tmp/int")
latest=$(cat "$tmp/int/latest" 2>/dev/null)
check_if $(yes_if test $rc = 130) "Ctrl-C: the launcher exits 130 in $secs s (got $rc)"
check_if $(has "$tmp/int.err" "^llm4d launch: the job was stopped by signal 2 (Interrupt)[a-z ]* at step $step of 100000$") \
    "Ctrl-C: the launcher says the job was stopped by signal 2 at step $step: $(grep stopped "$tmp/int.err")"
resume=$(sed -n "s|^llm4d launch: the latest checkpoint is $tmp/int/$latest; to resume from it: ||p" "$tmp/int.err")
check_if $(yes_if test -n "$latest" -a -n "$resume") "Ctrl-C: the launcher names the latest checkpoint ($latest) and the command to resume: ${resume:-none}"
check_if $(yes_if grep -q -- "--resume $tmp/int\$" <<<"$resume") "Ctrl-C: the command ends in --resume $tmp/int"
report int
check_if $(yes_if grep -q "^stopped\">stopped at step $step of 100000 by signal .*the latest checkpoint is $tmp/int/$latest" <<<"$state") \
    "Ctrl-C: the report says stopped at step $step, latest $latest, not finished ($state)"
shm_clean int
if [ -n "$resume" ]; then # the command printed, run (for 2 more steps), continues from the checkpoint
    until_step=$((${latest#step_} + 2))
    eval "timeout 120 $resume --max_steps $until_step" >"$tmp/resumed.out" 2>&1
    rrc=$?
    check_if $(yes_if test $rrc = 0 -a "$(last_step "$tmp/int")" = $until_step) \
        "the resume command continues from $latest to step $until_step (exit $rrc, last step $(last_step "$tmp/int"))"
    check_if $(has "$tmp/resumed.out" "resuming at global step $((${latest#step_} + 1))") "and says it resumes at step $((${latest#step_} + 1))"
else
    bad "the resume command continues from the checkpoint (no command printed)"
fi

# ---- SIGTERM to the launcher alone (a scheduler) ---------------------------------------------------------------
start term --max_steps 100000
running term
kill -TERM "$launcher"
ended
step=$(last_step "$tmp/term")
check_if $(yes_if test $rc = 143) "SIGTERM: the launcher exits 143 (got $rc)"
check_if $(has "$tmp/term.err" "^llm4d launch: the job was stopped by signal 15 (Terminated) sent to the launcher at step $step of 100000$") \
    "SIGTERM: the launcher says so, with the step: $(grep stopped "$tmp/term.err")"
check_if $(has "$tmp/term.err" "^llm4d launch: the latest checkpoint is $tmp/term/step_[0-9]*; to resume from it: .* --resume $tmp/term$") \
    "SIGTERM: and how to resume"
report term
check_if $(yes_if grep -q "^stopped\">stopped at step $step of 100000 by signal 15 (Terminated), passed on to every rank by the launcher; the latest checkpoint is $tmp/term/step_" <<<"$state") \
    "SIGTERM: the report says stopped at step $step ($state)"
shm_clean term

# ---- SIGKILL of rank 1 ------------------------------------------------------------------------------------------
start kill --max_steps 100000
running kill
victim=""
for p in $ranks; do rank_is "$p" 1 && victim=$p; done
kill -9 "${victim:-0}"
ended
check_if $(yes_if test $rc = 137) "SIGKILL of rank 1 ($victim): the launcher exits 137 (got $rc)"
check_if $(has "$tmp/kill.err" "^llm4d launch: rank 1 (pid $victim) was killed by signal 9 (Killed); see $tmp/kill.log/workerlog.1$") \
    "SIGKILL: the launcher names rank 1"
check_if $(has "$tmp/kill.err" "^llm4d launch: the latest checkpoint is $tmp/kill/step_[0-9]*; to resume from it: .* --resume $tmp/kill$") \
    "SIGKILL: and how to resume"
report kill
check_if $(yes_if grep -q "^failed\">failed (the last good step is [0-9]*): rank 1 was killed by signal 9 (Killed); the latest checkpoint is $tmp/kill/step_" <<<"$state") \
    "SIGKILL: the report says failed, rank 1 killed ($state)"
shm_clean kill

# ---- a user error on rank 1, launched into the successful 4-rank job's log directory ----------------------------
LLM4D_FAULT=collective@6 LLM4D_FAULT_RANK=1 setsid "$LLM4D" launch --nproc 2 --log_dir "$tmp/shared.log" -- "${C[@]}" \
    --dp_degree 2 --micro_batch_size 4 --max_steps 100 --output_dir "$tmp/user" >"$tmp/user.out" 2>"$tmp/user.err" &
launcher=$!
for i in $(seq 1 300); do
    ranks=$(ranks_of "$launcher" | tr '\n' ' ')
    job=$(job_of "${ranks%% *}" 2>/dev/null)
    [ -n "$job" ] || ! alive "$launcher" && break
    sleep 0.05
done
ended
err=$(grep -v '^llm4d launch: 2 processes, logs in ' "$tmp/user.err")
check_if $(yes_if test $rc = 2) "user error on rank 1: exit 2 (got $rc)"
check_if $(yes_if test "$(grep -c . <<<"$err")" = 1 -a "$(grep -c "^llm4d: rank 1: .*Input/output error" <<<"$err")" = 1) \
    "user error on rank 1: the terminal shows the launcher's line and rank 1's one line, nothing else: $(head -c 800 "$tmp/user.err")"
check_if $(yes_if test -z "$(grep -E 'MPI_ABORT|ORTE|-----|help message' "$tmp/user.out" "$tmp/user.err")") \
    "user error on rank 1: nothing from Open MPI"
report user
check_if $(yes_if grep -q "^failed\">failed (.*): llm4d: rank 1: .*Input/output error" <<<"$state") "user error: the report says failed with rank 1's line ($state)"
shm_clean user "$tmp/shared.log"
shared=$(cd "$tmp/shared.log" && ls -A | sort | tr '\n' ' ')
check_if $(yes_if test "$shared" = ".workerexit.0 .workerexit.1 workerlog.0 workerlog.1 ") \
    "the 4-rank job's exit records and logs of ranks 2 and 3 are gone from the shared log directory (left: $shared)"
report ok
check_if $(yes_if test "$state" = "finished\">finished: 4 steps") \
    "the 4-rank job's report still says finished, not the later job's failure ($state)"
check_if $(has "$tmp/ok.html" "The worker logs in $tmp/shared.log belong to another run (run [0-9a-z-]*; this run is [0-9a-z-]*)") \
    "and says the logs in its log directory belong to another run"
check_if $(yes_if test "$(grep -c 'Input/output error\|rank [0-9]: plan' "$tmp/ok.html")" = 0) "and reads none of them"

# ---- llm4d train without the launcher ---------------------------------------------------------------------------
D=("${C[@]}" --micro_batch_size 8)
set -m # a job of its own process group (a background command of a script ignores SIGINT otherwise)
"$LLM4D" "${D[@]}" --max_steps 100000 --output_dir "$tmp/direct" >"$tmp/direct.out" 2>&1 &
trainer=$!
set +m
for i in $(seq 1 600); do [ "$(last_step "$tmp/direct")" -ge 5 ] 2>/dev/null && [ -d "$tmp/direct/step_4" ] && break; sleep 0.1; done
report direct
check_if $(yes_if grep -q "^running\">in progress: step [0-9]* of 100000; its process (pid $trainer on host $(hostname)) is running$" <<<"$state") \
    "direct: while it runs the report says in progress, its process running ($state)"
kill -INT -- -"$trainer"
for i in $(seq 1 300); do alive "$trainer" || break; sleep 0.1; done
wait "$trainer" 2>/dev/null
step=$(last_step "$tmp/direct")
latest=$(cat "$tmp/direct/latest" 2>/dev/null)
report direct
check_if $(yes_if grep -q "^stopped\">stopped at step $step of 100000: its process (pid $trainer on host $(hostname)) is gone without saying how it ended (interrupted or killed); the latest checkpoint is $tmp/direct/$latest" <<<"$state") \
    "direct, Ctrl-C: the report says stopped at step $step, latest ${latest:-none} ($state)"
edit() { # edit KEY VALUE ...: a copy of the run whose run.json has process.KEY (machine.host for KEY host) = VALUE
  rm -rf "$tmp/direct_e" && cp -r "$tmp/direct" "$tmp/direct_e"
  /usr/bin/python3 -c '
import json, sys
p = sys.argv[1] + "/run.json"; d = json.load(open(p))
for k, v in zip(sys.argv[2::2], sys.argv[3::2]):
    if k == "host": d["machine"]["host"] = v
    else: d["process"][k] = int(v)
json.dump(d, open(p, "w"))' "$tmp/direct_e" "$@"
}
edit host elsewhere
report direct_e
check_if $(yes_if grep -q "^running\">in progress: step $step of 100000; without worker logs a run that stopped cannot be told from one going on (its process ran on another host" <<<"$state") \
    "direct, run.json naming another host: the report cannot tell, and says why ($state)"
ticks=$(/usr/bin/python3 -c 's = open("/proc/%d/stat" % int(__import__("sys").argv[1])).read(); print(s[s.rfind(")") + 2:].split()[19])' $$)
edit pid $$ start_ticks "$ticks"
report direct_e
check_if $(yes_if grep -q "^running\">in progress: .*its process (pid $$ on host $(hostname)) is running$" <<<"$state") \
    "direct, run.json naming this shell's process and start time ($ticks ticks): running ($state)"
edit pid $$ start_ticks $((ticks + 1))
report direct_e
check_if $(yes_if grep -q "^stopped\">stopped at step $step of 100000: its process (pid $$ on host $(hostname)) is gone" <<<"$state") \
    "direct, the same pid with another start time (a reused pid): stopped ($state)"
"$LLM4D" "${D[@]}" --max_steps 6 --output_dir "$tmp/dfail" --debug_inject_inf_step 3 >"$tmp/dfail.out" 2>&1
rc=$?
report dfail
check_if $(yes_if test $rc = 2) "direct, a failure at step 3: exit 2 (got $rc)"
check_if $(yes_if grep -q "^failed\">failed (the last good step is 2): the gradient norm is not finite at step 3" <<<"$state") \
    "direct, a failure: the report says failed, the last good step and the error ($state)"
"$LLM4D" "${D[@]}" --max_steps 3 --output_dir "$tmp/dok" >"$tmp/dok.out" 2>&1
rc=$?
report dok
said=$(/usr/bin/python3 -c 'import json, sys; print(json.load(open(sys.argv[1] + "/run.json")).get("end", {}).get("status"))' "$tmp/dok")
check_if $(yes_if test $rc = 0 -a "$state" = "finished\">finished: 3 steps" -a "$said" = finished) \
    "direct, success: exit $rc, the report says finished ($state), run.json's end: $said"
finish
