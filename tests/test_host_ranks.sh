#!/usr/bin/env bash
# test_host_ranks.sh — a rank knows how many ranks share its host from MPI, whatever started it (issue 44, item 3).
#
# The trainer divides the host's memory between the ranks on it (the memory plan's line "available: X for each of
# the N rank(s) on this host") and a GPU backend picks GPU (rank on host) mod GPUs. Both come from the communicators
# (comm.h llm4d_comm_groups host_rank, host_ranks: a split of the world by host), not from Open MPI's
# OMPI_COMM_WORLD_LOCAL_* variables, which another launcher (Slurm's srun, MPICH's hydra, a PMIx prterun) does not
# set. A launcher without them is played by mpirun starting the ranks through `env -u` of those variables; the
# oracle is how many processes the test started on this machine (all of them: one host). Then the same through
# `llm4d launch` (Open MPI's variables present): the same count. Before the change the first case said 1 rank (the
# variable's default), the memory of the whole host to each.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
test_setup
command -v mpirun >/dev/null || { bad "mpirun is not installed (scripts/setup.sh installs it)"; finish; }
cd "$tmp" || exit 1
export OMP_NUM_THREADS=1
T=(train -c "$SRC_DIR/configs/gpt2-tiny.yaml" --input_dir "$SRC_DIR/data/fortunes_ids.npz" --max_steps 1
   --save_steps -1 --logging_freq 1 --micro_batch_size 2)
root=()
[ "$(id -u)" = 0 ] && root=(--allow-run-as-root)

# the memory plan's lines of a run's log: every rank's must name n ranks on this host
says_n() { # says_n LOG N RANKS_LOGGING
    local lines
    lines=$(grep -c "memory plan: .* for each of the $2 rank(s) on this host" "$1")
    [ "$lines" = "$3" ] || { grep "memory plan: .* for each of" "$1" | head -4; return 1; }
}

for n in 2 3; do
    timeout 300 mpirun -q --oversubscribe --bind-to none "${root[@]}" -np $n \
        env -u OMPI_COMM_WORLD_LOCAL_RANK -u OMPI_COMM_WORLD_LOCAL_SIZE -u OMPI_COMM_WORLD_NODE_RANK \
        "$LLM4D" "${T[@]}" --dp_degree $n --global_batch_size $((2 * n)) --output_dir "out$n" >"run$n.log" 2>&1
    rc=$?
    [ $rc = 0 ] || tail -5 "run$n.log"
    check_if $(yes_if test $rc = 0) "$n ranks without Open MPI's local variables: the run ends (exit $rc)"
    check "  every rank's memory plan shares the host between $n ranks" says_n "run$n.log" $n $n
done

timeout 300 "$LLM4D" launch --nproc 2 --log_dir logs -- "${T[@]}" --dp_degree 2 --global_batch_size 4 \
    --output_dir outl >launch.log 2>&1
rc=$?
[ $rc = 0 ] || tail -5 launch.log
check_if $(yes_if test $rc = 0) "llm4d launch --nproc 2 (Open MPI's variables set): the run ends (exit $rc)"
cat logs/workerlog.* >launch_ranks.log 2>/dev/null
check "  every rank's memory plan shares the host between 2 ranks" says_n launch_ranks.log 2 2
finish
