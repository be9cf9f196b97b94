#!/usr/bin/env bash
# test_dp_faults.sh — `llm4d train` as a multi-process job when things go wrong, and the 4D group printout.
# test_launch.sh covers the launcher with the small `__commtest` job; this runs the real trainer (gpt2-tiny), whose
# ranks sit in bucketed non-blocking all-reduces and other collectives most of the time, which is where a dead
# peer or a rank that gave up would leave the others waiting forever:
#   (a) one rank of a 2-process training run SIGKILLed after a few steps: the launcher returns, every process of
#       the job (launcher, mpirun, workers, ranks) is gone within 30 s, the exit code is non-zero and names the rank;
#   (b) a user-input check failing on ONE rank only while the other goes on into the first collective: the job
#       exits 2 with the message instead of hanging. Rank 0 alone creates --output_dir, so an output_dir below a
#       regular file fails on rank 0 only (through `llm4d launch`); with mpirun's MPMD form rank 1 alone gets a bad
#       option. Plus a bad --input_dir on every rank;
#   (c) `mpirun -np 2 llm4d train` without the launcher gives the same losses as `llm4d launch` (bit for bit);
#   (d) 8 processes, dp2 x pp2 x sharding1 x mp2: each rank's printed groups (workerlog.<r>) equal a table worked
#       out by hand below, and the job trains its 5 steps (test_pp.sh checks what such layouts compute).
set -uo pipefail
source "$(dirname "$0")/lib.sh"
test_setup
LLM4D=$(cd "$(dirname "$LLM4D")" && pwd)/$(basename "$LLM4D")
cd "$tmp" || exit 1
export OMP_NUM_THREADS=1
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b - a}'; }
TRAIN=(train --model_name_or_path gpt2-tiny --input_dir "$SRC_DIR/data/fortunes_ids.npz" --max_seq_len 32
       --global_batch_size 8 --micro_batch_size 4 --logging_freq 1 --seed 7 --dp_degree 2)

# ---- (a) SIGKILL of rank 1 after it has logged 3 steps -------------------------------------------------------
"$LLM4D" launch --nproc 2 --log_dir logA -- "${TRAIN[@]}" --max_steps 100000 --output_dir outA >outA.txt 2>errA.txt &
launcher=$!
wait_for logA/workerlog.1 40 "global step 3,"
check_if $(yes_if wait_for logA/workerlog.0 5 "global step 3,") "2-rank training job running (both ranks logged step 3)"
# the job's processes: launcher -> mpirun -> one worker per rank -> the rank (`llm4d train`, OMPI_COMM_WORLD_RANK set)
mpirun_pid=$(children $launcher | head -1)
workers=$(children "$mpirun_pid" | tr '\n' ' ')
ranks=""
victim=""
for w in $workers; do
    for p in $(children "$w"); do
        ranks="$ranks $p"
        rank_is "$p" 1 && victim=$p
    done
done
check_if $(yes_if test -n "$victim" -a -n "$mpirun_pid") "found rank 1's pid ($victim) under mpirun $mpirun_pid, workers $workers"
t0=$(date +%s.%N)
[ -n "$victim" ] && kill -9 "$victim"
for i in $(seq 1 300); do
    alive $launcher || break
    sleep 0.1
done
# never hang here: a launcher still running after 30 s has failed the test, and its job is killed
alive $launcher && kill -9 $launcher $mpirun_pid $workers $ranks 2>/dev/null
wait $launcher 2>/dev/null
rc=$?
check_if $(yes_if test $rc != 0) "launcher exits non-zero ($rc) $(elapsed "$t0") s after rank 1 was killed"
while :; do # mpirun may return while the workers it stopped are finishing: they get the rest of the 30 s
    left=""
    for p in $launcher $mpirun_pid $workers $ranks; do alive "$p" && left="$left $p"; done
    secs=$(elapsed "$t0")
    if [ -z "$left" ] || awk -v s="$secs" 'BEGIN{exit !(s > 30)}'; then break; fi
    sleep 0.05
done
check_if $(yes_if test -z "$left") "every process of the job gone $secs s after the kill (limit 30 s; left:${left:- none})"
check_if $(has errA.txt "llm4d launch: rank 1 (pid $victim) was killed by signal 9 (Killed); see logA/workerlog.1") \
    "the launcher names rank 1, its pid and its log"
for p in $left; do kill -9 "$p" 2>/dev/null; done

# ---- (b) a user-input check failing on one rank only ---------------------------------------------------------
touch afile
t0=$(date +%s.%N)
timeout 60 "$LLM4D" launch --nproc 2 --log_dir logB -- "${TRAIN[@]}" --max_steps 50 --output_dir afile/out \
    >outB.txt 2>errB.txt
rc=$?
check_if $(yes_if test $rc = 2) "output_dir below a regular file (only rank 0 writes it) -> job exits 2 in $(elapsed "$t0") s (got $rc)"
check_if $(has errB.txt "llm4d: rank 0: .*afile/out") "rank 0's message about afile/out is on the terminal"
check_if $(yes_if test "$(grep -vc '^llm4d launch: 2 processes' errB.txt)" = 1) \
    "and it is the only line: a user error is said once, by the rank (issue 43)"

# MPMD: rank 1 alone gets an invalid option; rank 0 goes on into the collective that builds the groups
t0=$(date +%s.%N)
timeout 60 mpirun --oversubscribe --allow-run-as-root --bind-to none -x OMP_NUM_THREADS \
    -np 1 "$LLM4D" "${TRAIN[@]}" --max_steps 50 --output_dir outB2 : \
    -np 1 "$LLM4D" "${TRAIN[@]}" --max_steps 50 --output_dir outB2 --max_lr -1 >outB2.txt 2>&1
rc=$?
check_if $(yes_if test $rc = 2) "mpirun MPMD, a bad --max_lr on rank 1 only -> exits 2 in $(elapsed "$t0") s (got $rc)"
check_if $(has outB2.txt "llm4d: rank 1: .*max_lr") "rank 1's message about max_lr is shown"

t0=$(date +%s.%N)
timeout 60 "$LLM4D" launch --nproc 2 --log_dir logB3 -- "${TRAIN[@]}" --max_steps 50 --output_dir outB3 \
    --input_dir "$tmp/no_such.npz" >outB3.txt 2>errB3.txt
rc=$?
check_if $(yes_if test $rc = 2) "a missing --input_dir on every rank -> exits 2 in $(elapsed "$t0") s (got $rc)"
check_if $(yes_if test "$(cat errB3.txt)" = "llm4d launch: $tmp/no_such.npz: cannot open the corpus: No such file or directory") \
    "the launcher names the missing file, in one line, before starting any rank ($(head -c 200 errB3.txt))"

# ---- (c) plain mpirun gives the launcher's losses -------------------------------------------------------------
timeout 60 "$LLM4D" launch --nproc 2 --log_dir logC1 -- "${TRAIN[@]}" --max_steps 5 --output_dir outC1 \
    >outC1.txt 2>&1
rc1=$?
timeout 60 mpirun --oversubscribe --allow-run-as-root --bind-to none -x OMP_NUM_THREADS -np 2 "$LLM4D" \
    "${TRAIN[@]}" --max_steps 5 --output_dir outC2 >outC2.txt 2>&1
rc2=$?
# rank 0 writes metrics.jsonl (plain mpirun shows every rank's log lines on the terminal, so not those)
losses() { sed -n 's/.*"step": \([0-9]*\),.*"loss": \([0-9.]*\),.*/\1:\2/p' "$1"; }
l1=$(losses outC1/metrics.jsonl | tr '\n' ' ')
l2=$(losses outC2/metrics.jsonl | tr '\n' ' ')
check_if $(yes_if test $rc1 = 0 -a $rc2 = 0) "llm4d launch and mpirun -np 2 llm4d train both exit 0 ($rc1, $rc2)"
check_if $(yes_if test -n "$l1" -a "$l1" = "$l2" -a "$(losses outC2/metrics.jsonl | wc -l)" = 5) \
    "5 losses equal between llm4d launch and mpirun: [$l1] vs [$l2]"
check_if $(yes_if test "$(has outC2.txt 'global rank: 1')" = 1 -a -s outC2/metrics.jsonl) \
    "under mpirun both ranks ran (rank 1's groups printed) and rank 0 wrote metrics.jsonl"

# ---- (d) 8 processes, dp2 x pp2 x sharding1 x mp2 -------------------------------------------------------------
# Paddle's order, model fastest: rank = dp_idx x 4 + pp_idx x 2 + mp_idx (sharding 1 adds no factor).
# rank | mp rank, members | sharding rank, members | pp rank, members | dp rank, members
TABLE="0 | 0 [0, 1] | 0 [0] | 0 [0, 2] | 0 [0, 4]
1 | 1 [0, 1] | 0 [1] | 0 [1, 3] | 0 [1, 5]
2 | 0 [2, 3] | 0 [2] | 1 [0, 2] | 0 [2, 6]
3 | 1 [2, 3] | 0 [3] | 1 [1, 3] | 0 [3, 7]
4 | 0 [4, 5] | 0 [4] | 0 [4, 6] | 1 [0, 4]
5 | 1 [4, 5] | 0 [5] | 0 [5, 7] | 1 [1, 5]
6 | 0 [6, 7] | 0 [6] | 1 [4, 6] | 1 [2, 6]
7 | 1 [6, 7] | 0 [7] | 1 [5, 7] | 1 [3, 7]"
t0=$(date +%s.%N)
timeout 60 "$LLM4D" launch --nproc 8 --log_dir logD -- "${TRAIN[@]}" --max_steps 5 \
    --output_dir outD --pp_degree 2 --sharding_degree 1 --mp_degree 2 >outD.txt 2>errD.txt
rc=$?
secs=$(elapsed "$t0")
# what rank r printed, in the table's form, and its group sizes (2 for mp, pp, dp; 1 for sharding)
field() { sed -n "s/.* - $2: //p" "logD/workerlog.$1" | head -1; }
printed() {
    local g
    echo -n "$(field $1 'global rank')"
    for g in mp sharding pp dp; do echo -n " | $(field $1 "$g rank") $(field $1 "$g group ranks")"; done
    echo
}
sizes() { local g; for g in mp sharding pp dp; do echo -n "$(field $1 "$g group size")"; done; }
for r in 0 1 2 3 4 5 6 7; do
    want=$(echo "$TABLE" | sed -n "$((r + 1))p")
    got=$(printed $r 2>/dev/null)
    check_if $(yes_if test "$got" = "$want" -a "$(sizes $r)" = 2122) "rank $r groups: printed [$got], table [$want], sizes mp/sh/pp/dp $(sizes $r)"
done
ok=1
for r in 0 1 2 3 4 5 6 7; do
    grep -q "data rank: $((r / 4)) of 2 (dp x sharding)" logD/workerlog.$r || ok=0
done
check_if $ok "every rank prints its data rank r / 4 of 2"
check_if $(yes_if test $rc = 0 -a "$(grep -c '"step"' outD/metrics.jsonl 2>/dev/null)" = 5) \
    "the 8-process job trains 5 steps and exits 0 in $secs s (got $rc)"

finish
