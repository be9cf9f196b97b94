# test_ckpt_collective.sh — collective checkpoint saving under Open MPI (tests/test_ckpt_collective_mpi.c).
#
# 1. The whole scenario of the test program alone (self backend), with 2 and with 4 ranks: ZeRO shards saved by
#    their owners load under other sharding degrees, replicas do not write, a failing rank fails every rank.
# 2. Killing one rank in the middle of a 4-rank save (LLM4D_CKPT_KILL_AT + LLM4D_CKPT_KILL_RANK: a non-zero rank
#    writing its file, a rank about to report its status, rank 0 before and after publishing step_<N>) ends the job
#    and leaves the previous checkpoint as `latest`, loading bit-identically; the next save removes the orphaned
#    temporary directories.
# --oversubscribe: the test machine may have fewer cores than ranks; --bind-to none: do not pin ranks to one core.
set -u
BUILD_DIR=${BUILD_DIR:-build}
prog="$BUILD_DIR/test_ckpt_collective_mpi"
source "$(dirname "$0")/lib.sh"
require_exe "$prog" "cmake --build build --target test_ckpt_collective_mpi"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
MPI="mpirun --oversubscribe --allow-run-as-root --bind-to none"
ALONE="env -u OMPI_COMM_WORLD_SIZE -u PMIX_RANK -u PMI_RANK -u LLM4D_CKPT_KILL_AT -u LLM4D_CKPT_KILL_RANK"

# run NAME WANT_OK CMD...: WANT_OK 1 = exit 0 with "N passed, 0 failed"; 0 = the job must fail (a rank was killed)
run() {
    local name=$1 want=$2
    shift 2
    timeout 60 "$@" >"$out/$name.log" 2>&1
    local rc=$?
    local last
    last=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$out/$name.log" | tail -1)
    local ok=0
    if [ "$want" = 1 ]; then
        grep -E '^(FAIL|rank [0-9]+ FAIL)' "$out/$name.log"
        if [ $rc = 0 ] && [ -n "$last" ] && [ "${last#* passed, }" = "0 failed" ]; then ok=1; else tail -20 "$out/$name.log"; fi
        check_if $ok "$name: exit $rc, '$last'"
    else
        # killed: a non-zero exit, not a timeout, and no rank reached the end
        if [ $rc != 0 ] && [ $rc != 124 ] && [ -z "$last" ]; then ok=1; else tail -20 "$out/$name.log"; fi
        check_if $ok "$name: the job ended with exit $rc when a rank was killed"
    fi
}

run alone 1 $ALONE "$prog"
for n in 2 4; do
    run "np$n" 1 $MPI -np $n "$prog"
    grep -q "world of $n on the mpi backend" "$out/np$n.log" && r=1 || r=0
    check_if $r "np$n: mpi backend with $n ranks"
done

d="$out/kill"
run save10 1 $MPI -np 4 "$prog" save "$d" 10
step=20
for point in mid_file:2 before_agree:1 after_rename:0 before_rename:0; do
    at=${point%:*}
    rank=${point#*:}
    run "kill_${at}_r$rank" 0 $MPI -np 4 -x LLM4D_CKPT_KILL_AT=$at -x LLM4D_CKPT_KILL_RANK=$rank "$prog" save "$d" $step
    [ "$(cat "$d/latest" 2>/dev/null)" = "step_10" ] && r=1 || r=0
    check_if $r "kill at $at on rank $rank (step $step): latest still names step_10"
    if [ $at = after_rename ]; then
        # step_<N> was published complete before the kill; only `latest` was not updated
        run "verify_step$step" 1 $ALONE "$prog" verify "$d/step_$step" $step
    else
        [ ! -e "$d/step_$step" ] && r=1 || r=0
        check_if $r "kill at $at: no step_$step"
    fi
    run "verify_after_${at}" 1 $ALONE "$prog" verify "$d" 10
    step=$((step + 1))
done
n_tmp=$(ls -A "$d" | grep -c '^\.tmp_')
[ "$n_tmp" -ge 1 ] && r=1 || r=0
check_if $r "the last killed save left $n_tmp orphaned temporary directory (hidden, never loaded)"
run save30 1 $MPI -np 4 "$prog" save "$d" 30
n_tmp=$(ls -A "$d" | grep -c '^\.tmp_')
[ "$n_tmp" = 0 ] && [ "$(cat "$d/latest")" = "step_30" ] && r=1 || r=0
check_if $r "the next save publishes step_30 and removes the orphans ($n_tmp left)"
run verify30 1 $ALONE "$prog" verify "$d" 30

finish
