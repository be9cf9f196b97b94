# test_comm.sh — runs the communicator test program (tests/test_comm_mpi.c) under Open MPI's mpirun with 2 and 4
# processes, and once alone (the self backend); then the shared-memory path's (tests/test_comm_shm.c) with 2, 3 and 4
# processes (2 OpenMP threads each, so the chunks are split over threads too) and its dead-peer case (--fault: a
# rank stopped inside a shared-memory all-reduce; its peer's watchdog must name it). Each run must exit 0 and end
# with "N passed, 0 failed".
# --oversubscribe: the test machine may have fewer cores than ranks; --bind-to none: do not pin 4 ranks onto
# the same core.
set -u
BUILD_DIR=${BUILD_DIR:-build}
prog="$BUILD_DIR/test_comm_mpi"
shm="$BUILD_DIR/test_comm_shm"
source "$(dirname "$0")/lib.sh"
require_exe "$prog" "cmake --build build --target test_comm_mpi"
require_exe "$shm" "cmake --build build --target test_comm_shm"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

run() { # run NAME CMD...
    local name=$1
    shift
    timeout 150 "$@" >"$out/$name.log" 2>&1 # a hang's limit: shm_np4 under the sanitizers took 73 s at load 11 on 2 cores
    local rc=$?
    local last
    last=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$out/$name.log" | tail -1)
    grep -E '^(FAIL|rank [0-9]+ FAIL)' "$out/$name.log"
    ok=0
    if [ $rc = 0 ] && [ -n "$last" ] && [ "${last#* passed, }" = "0 failed" ]; then ok=1; else tail -20 "$out/$name.log"; fi
    check_if $ok "$name: exit $rc, '$last'"
}

run alone env -u OMPI_COMM_WORLD_SIZE -u PMIX_RANK -u PMI_RANK "$prog"
grep -q "on the self backend" "$out/alone.log" && r=1 || r=0
check_if $r "alone: self backend"
for n in 2 4; do
    run "np$n" mpirun --oversubscribe --allow-run-as-root --bind-to none -np $n "$prog"
    grep -q "world of $n on the mpi backend" "$out/np$n.log" && r=1 || r=0
    check_if $r "np$n: mpi backend with $n ranks"
done
for n in 2 3 4; do
    run "shm_np$n" mpirun --oversubscribe --allow-run-as-root --bind-to none -x OMP_NUM_THREADS=2 -np $n "$shm"
done
mkdir -p "$out/boards"
run shm_fault mpirun --oversubscribe --allow-run-as-root --bind-to none -x LLM4D_PROGRESS_DIR="$out/boards" -np 2 \
    "$shm" --fault
finish
