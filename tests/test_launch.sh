# test_launch.sh — `llm4d launch` end to end, with the hidden `llm4d __commtest` job (an all-reduce every step):
# per-rank workerlog files, rank 0 echoed and only rank 0, the groups each rank prints, the run id on each log's
# first line and in each exit record, exit codes passed on, a user error on one rank (rank 1, rank 0) or on all ->
# exit 2 and exactly one error line on the terminal, nothing from Open MPI; a rank killed with SIGKILL -> every
# process of the job gone within 30 s and the launcher naming the rank, SIGTERM to the launcher; after each, /dev/shm
# holds nothing of the job (Open MPI's segments went to the launcher's directory, removed); what an earlier job left
# in the log directory removed; usage errors, and `mpirun -np 2 llm4d ...` / a single process without any
# launcher.
set -u
source "$(dirname "$0")/lib.sh"
test_setup
LLM4D=$(cd "$(dirname "$LLM4D")" && pwd)/$(basename "$LLM4D")
cd "$tmp" || exit 1
hasnt() { yes_if test "$(has "$1" "$2")" = 0; }
# run_id LOG: the launch's id on the first line of a worker log
run_id() { sed -n '1s/^llm4d worker: rank [0-9]* runs on host .* (run \([0-9a-z-]*\))$/\1/p' "$1"; }
# mpi_noise FILE...: lines Open MPI prints (banners, help aggregation, ORTE's error log)
mpi_noise() { cat "$@" | grep -E 'MPI_ABORT|ORTE|mpirun|-----|help message|Open MPI|orte_' ; }
# job_shm PID: what a job whose rank had pid PID leaves in /dev/shm: Open MPI's segments of its job id
# (vader_segment.<host>.<job id in hex>.<local rank>) and the launcher's directory; the job id is read from the rank's
# environment while it runs (job_of)
job_of() {
    local j
    j=$(tr '\0' '\n' <"/proc/$1/environ" 2>/dev/null | sed -n 's/^OMPI_MCA_ess_base_jobid=//p')
    [ -n "$j" ] && printf '%x' "$j"
}
shm_left() { # JOBID_HEX RUN_ID: the job's files still in /dev/shm
    ls /dev/shm 2>/dev/null | grep -E "^vader_segment\..*\.$1\.[0-9]+$|^llm4d-mpi\.$2$"
}
rank_pid() { sed -n 's/^llm4d commtest: rank [0-9]* of [0-9]*, pid \([0-9]*\),.*/\1/p' "$1" | head -1; }
parent_of() { awk '{print $4}' "/proc/$1/stat" 2>/dev/null; }

# 1. a normal job: 4 ranks, mp 2 x dp 2 (dp derived)
cores=$(getconf _NPROCESSORS_ONLN)
threads=$((cores / 4 > 1 ? cores / 4 : 1))
env -u OMP_NUM_THREADS timeout 60 "$LLM4D" launch --nproc 4 --log_dir logs -- __commtest --steps 5 --mp 2 >out1 2>err1
rc=$?
check_if $(yes_if test $rc = 0) "4-rank job exits 0 (got $rc)"
ok=1
for r in 0 1 2 3; do
    grep -q "rank $r of 4" logs/workerlog.$r 2>/dev/null && grep -q "done, 5 steps" logs/workerlog.$r || ok=0
done
check_if $ok "logs/workerlog.0..3 exist, each with its own rank's output through the end"
check_if $(has out1 "rank 0 of 4") "rank 0 echoed to the terminal"
check_if $(has logs/workerlog.2 "rank 2 of 4, pid [0-9]*, mpi backend, $threads OpenMP threads") \
    "each of 4 ranks on $cores cores gets $threads OpenMP thread(s) when OMP_NUM_THREADS is unset"
check_if $(hasnt out1 "rank [123] of 4") "the other ranks are not echoed"
check_if $(yes_if test "$(has logs/workerlog.1 'mp group ranks: \[0, 1\]')$(has logs/workerlog.1 'dp group ranks: \[1, 3\]')" = 11) \
    "rank 1 prints its groups: mp [0, 1], dp [1, 3]"
# the job all-reduces 1024 floats over the data group (dp 2) each step: 5 x 2(2-1)/2 x 4096 B
check_if $(has logs/workerlog.3 "done, 5 steps, 20480 bytes sent") "rank 3 counted 5 x 2(n-1)/n x 4096 = 20480 bytes"

id1=$(run_id logs/workerlog.0)
ok=$([ -n "$id1" ] && echo 1 || echo 0)
for r in 0 1 2 3; do
    [ "$(run_id logs/workerlog.$r)" = "$id1" ] && grep -qx "run $id1" logs/.workerexit.$r || ok=0
done
check_if $ok "each worker log's first line and each exit record carry the launch's run id (${id1:-none})"

# 2. a user error on one rank mid-job (rank 1: only its log has the line; rank 0: echoed): exit 2, and on the
# terminal exactly the launcher's first line and the rank's error line, once; nothing from Open MPI
for fr in 1 0; do
    t0=$(date +%s)
    timeout 60 "$LLM4D" launch --nproc 3 --log_dir logs2.$fr -- __commtest --steps 100000 --sleep_ms 10 \
        --fail_rank $fr --fail_step 20 >out2.$fr 2>err2.$fr
    rc=$?
    t1=$(date +%s)
    want="llm4d launch: 3 processes, logs in logs2.$fr/workerlog.<rank>, rank 0 shown here
llm4d: rank $fr: commtest: simulated bad input on rank $fr at step 20 (--fail_rank); remove --fail_rank to run normally"
    check_if $(yes_if test $rc = 2) "rank $fr failing a user check -> launcher exits 2 (got $rc, $((t1 - t0)) s)"
    check_if $(yes_if test "$(cat err2.$fr)" = "$want") \
        "rank $fr's user error: stderr is the launcher's line and the rank's error line, nothing else (got: $(head -c 900 err2.$fr))"
    check_if $(yes_if test -z "$(mpi_noise out2.$fr err2.$fr)") "rank $fr's user error: nothing from Open MPI ($(mpi_noise out2.$fr err2.$fr | head -2))"
done

# 3. the same user error on every rank (bad degrees): exit 2, the arithmetic on the terminal once
timeout 60 "$LLM4D" launch --nproc 3 --log_dir logs3 -- __commtest --mp 2 --dp 2 >out3 2>err3
rc=$?
check_if $(yes_if test $rc = 2) "bad degrees on every rank -> exit 2 (got $rc)"
check_if $(yes_if test "$(grep -v '^llm4d launch: 3 processes' err3 | grep -c .)" = 1 -a "$(has err3 "^llm4d: rank 0: parallel degrees dp_degree 2 x pp_degree 1 x sharding_degree 1 x mp_degree 2 = 4, but the job has 3 processes")" = 1) \
    "the degree arithmetic is shown once on the terminal's stderr (rank 0's), and nothing else ($(head -c 600 err3))"
check_if $(yes_if test -z "$(mpi_noise out3 err3)") "bad degrees: nothing from Open MPI ($(mpi_noise out3 err3 | head -2))"

# 4. SIGKILL of one rank mid-job: everything gone within 30 s, the launcher names the rank
"$LLM4D" launch --nproc 3 --log_dir logs4 -- __commtest --steps 100000 --sleep_ms 10 >out4 2>err4 &
launcher=$!
ok=1
for r in 0 1 2; do wait_for logs4/workerlog.$r 30 "step 0 ok" || ok=0; done
check_if $ok "3 ranks running"
pids=""
workers=""
for r in 0 1 2; do
    p=$(rank_pid logs4/workerlog.$r)
    pids="$pids $p"
    workers="$workers $(parent_of "$p")"
done
victim=$(rank_pid logs4/workerlog.1)
mpirun_pid=$(parent_of "$(parent_of "$victim")")
job4=$(job_of "$victim")
id4=$(run_id logs4/workerlog.0)
t0=$(date +%s.%N)
kill -9 "$victim"
gone=0
for i in $(seq 1 300); do # 30 s
    alive $launcher || {
        gone=1
        break
    }
    sleep 0.1
done
wait $launcher 2>/dev/null
rc=$?
t1=$(date +%s.%N)
secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b - a}')
check_if $gone "launcher returned ${secs} s after SIGKILL of rank 1 (limit 30 s)"
# mpirun may return while the workers it stopped are still finishing: allow them the rest of the 30 s
while :; do
    left=""
    for p in $pids $workers $mpirun_pid; do alive "$p" && left="$left $p"; done
    t2=$(date +%s.%N)
    secs=$(awk -v a="$t0" -v b="$t2" 'BEGIN{printf "%.1f", b - a}')
    if [ -z "$left" ] || awk -v s="$secs" 'BEGIN{exit !(s > 30)}'; then break; fi
    sleep 0.05
done
check_if $(yes_if test -z "$left") "every rank, worker and mpirun gone ${secs} s after the kill (ranks$pids, workers$workers, mpirun $mpirun_pid; left:${left:- none})"
check_if $(yes_if test $rc != 0) "launcher exits non-zero (got $rc)"
check_if $(has err4 "llm4d launch: rank 1 (pid $victim) was killed by signal 9 (Killed); see logs4/workerlog.1") \
    "launcher names rank 1 and its pid $victim"
if [ $gone = 0 ]; then kill -9 $launcher $pids $workers $mpirun_pid 2>/dev/null; fi
check_if $(yes_if test -n "$job4" -a -n "$id4" -a -z "$(shm_left "$job4" "$id4")") \
    "after the SIGKILL, /dev/shm holds nothing of the job (job ${job4:-?}, run ${id4:-?}; left: $(shm_left "$job4" "$id4" | tr '\n' ' '))"

# 5. SIGTERM to the launcher alone stops the whole job
"$LLM4D" launch --nproc 2 --log_dir logs5 -- __commtest --steps 100000 --sleep_ms 10 >out5 2>err5 &
launcher=$!
wait_for logs5/workerlog.1 30 "step 0 ok"
pids="$(rank_pid logs5/workerlog.0) $(rank_pid logs5/workerlog.1)"
job5=$(job_of "$(rank_pid logs5/workerlog.1)")
id5=$(run_id logs5/workerlog.0)
in_dir=$(ls "/dev/shm/llm4d-mpi.$id5" 2>/dev/null | grep -c "^vader_segment\..*\.$job5\.")
check_if $(yes_if test "$in_dir" = 2) "while it runs, the job's 2 Open MPI segments are in /dev/shm/llm4d-mpi.$id5 ($in_dir)"
kill -TERM $launcher
gone=0
for i in $(seq 1 300); do
    alive $launcher || {
        gone=1
        break
    }
    sleep 0.1
done
wait $launcher 2>/dev/null
rc=$?
left=""
for p in $pids; do alive "$p" && left="$left $p"; done
check_if $(yes_if test $gone = 1 -a $rc = 143 -a -z "$left") "SIGTERM to the launcher ends the job (exit $rc = 128 + 15, left:${left:- none})"
check_if $(has err5 "llm4d launch: the job was stopped by signal 15 (Terminated) sent to the launcher") "and says so"
if [ $gone = 0 ]; then kill -9 $launcher $pids 2>/dev/null; fi
check_if $(yes_if test -n "$job5" -a -n "$id5" -a -z "$(shm_left "$job5" "$id5")") \
    "after the SIGTERM, /dev/shm holds nothing of the job (job ${job5:-?}, run ${id5:-?}; left: $(shm_left "$job5" "$id5" | tr '\n' ' '))"

# 5b. a job into a log directory an earlier, larger job used: its records, boards and extra logs are gone
mkdir -p logs5b
for f in .workerexit.0 .workerexit.3 .workerexit.7.tmp progress.2 progress.9 workerlog.2 workerlog.11; do
    echo stale >"logs5b/$f"
done
timeout 60 "$LLM4D" launch --nproc 2 --log_dir logs5b -- __commtest --steps 3 >/dev/null 2>&1
left=$(cd logs5b && ls -A | sort | tr '\n' ' ')
check_if $(yes_if test "$left" = ".workerexit.0 .workerexit.1 workerlog.0 workerlog.1 ") \
    "an earlier job's exit records, progress boards and logs of ranks >= 2 are removed (left: $left)"
check_if $(yes_if grep -qx "run $(run_id logs5b/workerlog.0)" logs5b/.workerexit.0) "and rank 0's record is this job's"

# 6. usage errors
timeout 20 "$LLM4D" launch -- __commtest >/dev/null 2>err6
check_if $(yes_if test $? = 2 -a "$(has err6 'give the number of processes with --nproc N')" = 1) "no --nproc -> exit 2"
timeout 20 "$LLM4D" launch --nproc 0 -- __commtest >/dev/null 2>err6
check_if $(yes_if test $? = 2) "--nproc 0 -> exit 2"
timeout 20 "$LLM4D" launch --nproc 2 >/dev/null 2>err6
check_if $(yes_if test $? = 2 -a "$(has err6 'no command to run')" = 1) "no command -> exit 2"
LLM4D_MPIRUN=/nonexistent/mpirun timeout 20 "$LLM4D" launch --nproc 2 --log_dir logs6 -- __commtest >/dev/null 2>err6
check_if $(yes_if test $? = 2 -a "$(has err6 'cannot run /nonexistent/mpirun')" = 1) "missing mpirun -> exit 2 and says so"

# 6b. what every rank of a train job would refuse alike is refused by the launcher, one line, before any rank starts
# (so the earlier job's logs in the directory stay as they were)
cp -r logs5b logs6b
before=$(cat logs6b/workerlog.0)
T=(train -c "$SRC_DIR/configs/gpt2-tiny.yaml" --dp_degree 2 --max_steps 2 --output_dir out6b)
refused "launch with a missing data file" "^llm4d launch: /nonexistent.npz: cannot open the corpus" \
    "$LLM4D" launch --nproc 2 --log_dir logs6b -- "${T[@]}" --input_dir /nonexistent.npz
refused "launch with an unknown device" "^llm4d launch: device (Global.device) 'tpu' is not supported" \
    "$LLM4D" launch --nproc 2 --log_dir logs6b -- "${T[@]}" --input_dir "$SRC_DIR/data/fortunes_ids.npz" --device tpu
if env -u OMPI_COMM_WORLD_SIZE "$LLM4D" train --device cuda --max_steps 1 2>&1 | grep -q "has no CUDA backend"; then
    refused "launch --device cuda on a build without CUDA" "^llm4d launch: --device cuda: this build of llm4d has no CUDA backend" \
        "$LLM4D" launch --nproc 2 --log_dir logs6b -- "${T[@]}" --input_dir "$SRC_DIR/data/fortunes_ids.npz" --device cuda
fi
check_if $(yes_if test "$(cat logs6b/workerlog.0)" = "$before" -a ! -e out6b) \
    "no rank started for them: the log directory's logs untouched, no output directory"

# 7. plain mpirun and a single process work without the launcher
timeout 60 mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 "$LLM4D" __commtest --steps 3 >out7 2>&1
check_if $(yes_if test $? = 0 -a "$(has out7 'rank 1 of 2, pid [0-9]*, mpi backend')" = 1) "mpirun -np 2 llm4d __commtest"
env -u OMPI_COMM_WORLD_SIZE -u PMIX_RANK -u PMI_RANK timeout 60 "$LLM4D" __commtest --steps 3 >out8 2>&1
check_if $(yes_if test $? = 0 -a "$(has out8 'rank 0 of 1, pid [0-9]*, self backend')" = 1) "one process without MPI: self backend"

finish
