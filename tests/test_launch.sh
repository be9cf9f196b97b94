# test_launch.sh — `llm4d launch` end to end, with the hidden `llm4d __commtest` job (an all-reduce every step):
# per-rank workerlog files, rank 0 echoed and only rank 0, the groups each rank prints, exit codes passed on (a
# user error on one rank or on all -> 2 with the message visible), a rank killed with SIGKILL -> every process
# of the job gone within 30 s and the launcher naming the rank, SIGTERM to the launcher, usage errors, and
# `mpirun -np 2 llm4d ...` / a single process without any launcher.
set -u
LLM4D=${LLM4D:-build/llm4d}
source "$(dirname "$0")/lib.sh"
require_exe "$LLM4D"
LLM4D=$(cd "$(dirname "$LLM4D")" && pwd)/$(basename "$LLM4D")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
hasnt() { yes_if test "$(has "$1" "$2")" = 0; }
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

# 2. a user error on one rank mid-job: exit 2, the rank named, its message shown
t0=$(date +%s)
timeout 60 "$LLM4D" launch --nproc 3 --log_dir logs2 -- __commtest --steps 100000 --sleep_ms 10 --fail_rank 1 \
    --fail_step 20 >out2 2>err2
rc=$?
t1=$(date +%s)
check_if $(yes_if test $rc = 2) "rank 1 failing a user check -> launcher exits 2 (got $rc, $((t1 - t0)) s)"
check_if $(has err2 "llm4d launch: rank 1 (pid [0-9]*) exited with code 2; see logs2/workerlog.1") "launcher names rank 1"
check_if $(has err2 "simulated bad input on rank 1 at step 20") "rank 1's message is shown on the terminal"

# 3. the same user error on every rank (bad degrees): exit 2, the arithmetic on the terminal
timeout 60 "$LLM4D" launch --nproc 3 --log_dir logs3 -- __commtest --mp 2 --dp 2 >out3 2>err3
rc=$?
check_if $(yes_if test $rc = 2) "bad degrees on every rank -> exit 2 (got $rc)"
check_if $(has err3 "llm4d: rank 0: parallel degrees dp_degree 2 x pp_degree 1 x sharding_degree 1 x mp_degree 2 = 4, but the job has 3 processes") \
    "the degree arithmetic is shown on the terminal's stderr (rank 0's stderr)"

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

# 5. SIGTERM to the launcher alone stops the whole job
"$LLM4D" launch --nproc 2 --log_dir logs5 -- __commtest --steps 100000 --sleep_ms 10 >out5 2>err5 &
launcher=$!
wait_for logs5/workerlog.1 30 "step 0 ok"
pids="$(rank_pid logs5/workerlog.0) $(rank_pid logs5/workerlog.1)"
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

# 6. usage errors
timeout 20 "$LLM4D" launch -- __commtest >/dev/null 2>err6
check_if $(yes_if test $? = 2 -a "$(has err6 'give the number of processes with --nproc N')" = 1) "no --nproc -> exit 2"
timeout 20 "$LLM4D" launch --nproc 0 -- __commtest >/dev/null 2>err6
check_if $(yes_if test $? = 2) "--nproc 0 -> exit 2"
timeout 20 "$LLM4D" launch --nproc 2 >/dev/null 2>err6
check_if $(yes_if test $? = 2 -a "$(has err6 'no command to run')" = 1) "no command -> exit 2"
LLM4D_MPIRUN=/nonexistent/mpirun timeout 20 "$LLM4D" launch --nproc 2 --log_dir logs6 -- __commtest >/dev/null 2>err6
check_if $(yes_if test $? = 2 -a "$(has err6 'cannot run /nonexistent/mpirun')" = 1) "missing mpirun -> exit 2 and says so"

# 7. plain mpirun and a single process work without the launcher
timeout 60 mpirun --oversubscribe --allow-run-as-root --bind-to none -np 2 "$LLM4D" __commtest --steps 3 >out7 2>&1
check_if $(yes_if test $? = 0 -a "$(has out7 'rank 1 of 2, pid [0-9]*, mpi backend')" = 1) "mpirun -np 2 llm4d __commtest"
env -u OMPI_COMM_WORLD_SIZE -u PMIX_RANK -u PMI_RANK timeout 60 "$LLM4D" __commtest --steps 3 >out8 2>&1
check_if $(yes_if test $? = 0 -a "$(has out8 'rank 0 of 1, pid [0-9]*, self backend')" = 1) "one process without MPI: self backend"

finish
