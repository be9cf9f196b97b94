#!/usr/bin/env bash
# test_watchdog.sh — a rank that stops answering ends the job, with a line that says where (comm/watch.h).
#   (a) dp2: rank 1 hangs at step 4 (--debug_hang_step: it pauses, alive, as a rank stuck in a kernel would), the
#       watchdog (--comm_timeout 3) ends the job: the line names the operation and its sequence number, the data
#       group and its world ranks, step 4, and rank 1 with its pid as not arrived; rank 0's log holds the flight
#       recorder with the pending operation; every process is gone within 30 s; no progress board is left;
#   (b) pp2: rank 1 is SIGSTOPped mid-schedule: stage 0 times out in a point-to-point transfer from rank 1 of the
#       pp group (or in a collective such as the tied embedding's all-reduce, when rank 1 stopped there) and says
#       that rank 1 is STOPPED; the stopped process is gone too;
#   (c) ZeRO-3 (sharding2 stage 3): the hang is seen in a parameter gather or gradient reduce-scatter of the
#       sharding group, started non-blocking in the model's hooks;
#   (d) the first step has its own, generous timeout: a hang at step 1 with comm_timeout 60 and
#       comm_timeout_first 3 fires after ~3 s naming step 1;
#   (e) under plain mpirun (no progress boards) the line still names the operation, group and step, and lists the
#       group's ranks; comm_timeout 0 turns the watchdog off (the hung job is still waiting after 12 s);
#   (f) a negative timeout gets one line, exit 2.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
test_setup
export OMP_NUM_THREADS=1
T=(train --model_name_or_path gpt2-tiny --input_dir "$SRC_DIR/data/fortunes_ids.npz" --max_seq_len 32
   --global_batch_size 8 --logging_freq 1 --seed 7 --max_steps 100000 --decay_steps 100000 --save_steps -1)
descendants() { local p; for p in $(children "$1"); do echo "$p"; descendants "$p"; done; }
rank_pid() { # launcher_pid rank: the pid of the rank's `llm4d train`; a few tries, then the process tree on stderr
  local p try
  for try in $(seq 1 20); do
    for p in $(descendants "$1"); do
      rank_is "$p" "$2" &&
        grep -q "train" "/proc/$p/cmdline" 2>/dev/null && ! grep -q "__worker" "/proc/$p/cmdline" && echo "$p" && return
    done
    sleep 0.1
  done
  echo "no process of rank $2 under launcher $1:" >&2
  for p in $(descendants "$1"); do echo "  $p: $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | cut -c1-120)" >&2; done
}
# run NAME NPROC ARGS...: a launched job in the background; sets launcher, t0
run() {
  local name=$1 np=$2; shift 2
  "$LLM4D" launch --nproc "$np" --log_dir "$tmp/$name.log" -- "${T[@]}" --output_dir "$tmp/$name" "$@" \
    >"$tmp/$name.out" 2>"$tmp/$name.err" &
  launcher=$!
}
# ends NAME LIMIT: waits for the job (all its processes) to end, killing it after LIMIT s; sets secs (or
# "timeout") and rc, the launcher's exit code
ends() {
  local procs="$launcher $(descendants $launcher | tr '\n' ' ')" start=$(date +%s) left p
  secs=timeout
  while :; do
    left=""
    for p in $procs; do alive "$p" && left="$left $p"; done
    [ -z "$left" ] && secs=$(($(date +%s) - start)) && break
    if [ $(($(date +%s) - start)) -gt "$2" ]; then kill -9 $left 2>/dev/null; break; fi
    sleep 0.2
  done
  wait $launcher 2>/dev/null
  rc=$?
}

# ---- (a) dp2, rank 1 hangs at step 4 ---------------------------------------------------------------------------
f0=$fail
run hang 2 --micro_batch_size 4 --dp_degree 2 --comm_timeout 3 --debug_hang_step 4
wait_for "$tmp/hang.log/workerlog.1" 30 "global step 3,"
pid1=$(rank_pid $launcher 1)
ends hang 40
err=$(grep '^llm4d: rank' "$tmp/hang.err")
check_if $(yes_if test "$secs" != timeout -a "$rc" != 0) "dp2, rank 1 hung at step 4: the job ended by itself in $secs s, exit $rc"
check_if $(yes_if grep -q "allreduce #[0-9]* on the data group (world ranks \[0, 1\]) at step 4 has not completed after 3 s .*not arrived: rank 1 (pid $pid1): step 4, computing" "$tmp/hang.err") \
  "the line names the all-reduce, the data group, step 4 and rank 1 (pid $pid1) as not arrived: $err"
check_if $(yes_if grep -q "PENDING" "$tmp/hang.log/workerlog.0") "rank 0's log holds its flight recorder with the pending operation"
check_if $(yes_if test "$(grep -c '^  op [0-9]*:' "$tmp/hang.log/workerlog.0")" -ge 10) "... and its earlier operations"
check_if $(yes_if test -z "$(ls "$tmp/hang.log" | grep progress)") "no progress board is left in the log directory"
reliability_checked $f0 communication "dp2: rank 1 hangs in step 4 (comm_timeout 3)" "$err" "$rc" "$secs" -

# ---- (b) pp2, rank 1 stopped ------------------------------------------------------------------------------------
f0=$fail
run stop 2 --micro_batch_size 1 --pp_degree 2 --comm_timeout 3
wait_for "$tmp/stop.log/workerlog.1" 30 "global step 3," || echo "rank 1 of pp2 has not logged step 3 after 30 s" >&2
pid1=$(rank_pid $launcher 1)
[ -n "$pid1" ] && kill -STOP "$pid1"
ends stop 40
err=$(grep '^llm4d: rank' "$tmp/stop.err")
check_if $(yes_if test -n "$pid1" -a "$secs" != timeout -a "$rc" != 0) "pp2, rank 1 (pid $pid1) stopped: every process gone in $secs s, exit $rc"
# Rank 0 waits in a transfer from rank 1 or, when rank 1 was stopped there, in a collective of the step (the tied
# embedding's all-reduce, the gradient norm's): either way the line names the operation and says rank 1 is stopped.
check_if $(yes_if grep -q "\(i\?\(recv from\|send to\) rank 1 on the pp group\|#[0-9]* on the [a-z]* group\) (world ranks \[0, 1\]) at step [0-9]* has not completed .*rank 1 (pid $pid1, STOPPED" "$tmp/stop.err") \
  "the line names the transfer or collective with rank 1 and says rank 1 is stopped: $err"
reliability_checked $f0 communication "pp2: rank 1 stopped (SIGSTOP) mid-schedule (comm_timeout 3)" "$err" "$rc" \
  "$secs" -

# ---- (c) ZeRO-3 ---------------------------------------------------------------------------------------------------
f0=$fail
run zero3 2 --micro_batch_size 4 --sharding_degree 2 --sharding_stage 3 --comm_timeout 3 --debug_hang_step 3
ends zero3 60
err=$(grep '^llm4d: rank' "$tmp/zero3.err")
check_if $(yes_if grep -q "\(allgather\|reduce_scatter\|allreduce\) #[0-9]* on the \(sharding\|data\) group .* at step 3 has not completed .*not arrived: rank 1" "$tmp/zero3.err") \
  "sharding2 stage 3: the hang is seen in a collective of the sharding group at step 3 ($secs s): $err"
reliability_checked $f0 communication "sharding2 stage 3: rank 1 hangs in step 3 (comm_timeout 3)" "$err" "$rc" \
  "$secs" -

# ---- (d) the first step's timeout -------------------------------------------------------------------------------------
run first 2 --micro_batch_size 4 --dp_degree 2 --comm_timeout 60 --comm_timeout_first 3 --debug_hang_step 1
ends first 40
check_if $(yes_if test "$secs" != timeout && test "$secs" -lt 30 && grep -q "at step 1 has not completed after 3 s (comm_timeout 3 s)" "$tmp/first.err") \
  "a hang at step 1 fires after comm_timeout_first (3 s), not comm_timeout (60 s): ended in $secs s"

# ---- (e) plain mpirun; the watchdog off -----------------------------------------------------------------------------
MPI=(mpirun --oversubscribe --allow-run-as-root --bind-to none -x OMP_NUM_THREADS -np 2)
timeout 60 "${MPI[@]}" "$LLM4D" "${T[@]}" --output_dir "$tmp/plain" --micro_batch_size 4 --dp_degree 2 \
  --comm_timeout 3 --debug_hang_step 3 >"$tmp/plain.out" 2>&1
rc=$?
check_if $(yes_if test $rc != 0 -a $rc != 124 && grep -q "at step 3 has not completed after 3 s .*its ranks are world ranks 0 1" "$tmp/plain.out") \
  "plain mpirun: the line names the step and lists the group's world ranks (exit $rc)"
timeout 12 "${MPI[@]}" "$LLM4D" "${T[@]}" --output_dir "$tmp/off" --micro_batch_size 4 --dp_degree 2 \
  --comm_timeout 0 --comm_timeout_first 0 --debug_hang_step 2 >"$tmp/off.out" 2>&1
rc=$?
check_if $(yes_if test $rc = 124) "comm_timeout 0: no watchdog, the hung job still waits after 12 s (timeout(1) ended it: $rc)"
pkill -9 -f "$tmp/off" 2>/dev/null

# ---- (f) bad input ----------------------------------------------------------------------------------------------------
refused "a negative comm_timeout" "comm_timeout -1 / comm_timeout_first 1800 must be seconds >= 0" \
  "$LLM4D" "${T[@]}" --output_dir "$tmp/bad" --micro_batch_size 8 --comm_timeout -1
finish
