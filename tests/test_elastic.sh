#!/usr/bin/env bash
# test_elastic.sh — `llm4d launch --nnodes MIN:MAX` (issue 45, item 1's elasticity): a job that loses a host goes on
# with the hosts that answer, in a smaller layout, and grows back when the host returns; it trains the same model.
# The hosts are names of this machine (tests/fake_hosts_mpirun.sh as LLM4D_MPIRUN: a host is "down" while a file of
# its name exists; its probe then fails as ssh does). gpt2-tiny (1 layer, dropout 0.1), dp2 x sharding2 (ZeRO-2) on
# two hosts of 2 processes, global batch 8:
#   1. node-b goes down and its two ranks are killed at step >= 9: the launcher probes, restarts on node-a alone as
#      dp1 x sharding2 (the same global batch in 2 accumulation steps), resharding the checkpoint; node-b comes back
#      and a rank of node-a is killed: the next restart is on both hosts again, dp2 x sharding2. One line per restart
#      says so; metrics.jsonl holds each of the 30 steps once; every loss is the uninterrupted 4-process run's within
#      1e-5 (the losses of the 4-process steps before the first failure to the bit), and so is the final eval loss.
#   2. --nnodes 2:2 with node-b down at a failure: one line, no restart; and at the start: one line, nothing runs.
#   3. bad --nnodes inputs, and a layout that could not run on fewer hosts: one line, exit 2, before anything runs.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
test_setup
LLM4D=$(cd "$(dirname "$LLM4D")" && pwd)/$(basename "$LLM4D")
cd "$tmp" || exit 1
export OMP_NUM_THREADS=1 FAKE_HOSTS_DIR=$tmp/cluster
unset LLM4D_FAULT LLM4D_FAULT_RANK
mkdir -p cluster/down
FAKE=$SRC_DIR/tests/fake_hosts_mpirun.sh
printf 'node-a slots=2\nnode-b slots=2  # the second host\n' >hosts
T=(train --model_name_or_path gpt2-tiny -o Model.num_layers=1 --input_dir "$SRC_DIR/data/fortunes_ids.npz"
   --max_seq_len 16 --global_batch_size 8 --micro_batch_size 2 --dp_degree 2 --sharding_degree 2 --sharding_stage 2
   --logging_freq 1 --eval_freq 30 --eval_iters 2 --save_steps 3 --max_lr 1e-3 --min_lr 1e-4 --warmup_rate 0.1
   --decay_steps 90 --max_steps 90)
# curve FILE: "step loss" per training line, "eval loss" per eval line of a metrics.jsonl
curve() { /usr/bin/python3 -c '
import json, sys
for l in open(sys.argv[1]):
    d = json.loads(l)
    if "step" in d: print(d["step"], repr(d["loss"]))
    elif "eval_loss" in d: print("eval", repr(d["eval_loss"]))' "$1"; }
# ranks_of LAUNCHER R...: the pids of those ranks of the launcher's job (launcher > mpirun > workers > ranks)
ranks_of() {
    local l=$1 r w p
    shift
    for w in $(for m in $(children "$l"); do children "$m"; done); do
        for p in $(children "$w"); do for r in "$@"; do rank_is "$p" "$r" && echo "$p"; done; done
    done
}

# ended SECONDS: waits for $launcher to end (at most SECONDS, then ends it); its exit status in rc
ended() {
    local i
    for i in $(seq 1 $(($1 * 10))); do alive $launcher || break; sleep 0.1; done
    alive $launcher && kill $launcher
    wait $launcher
    rc=$?
}

# the uninterrupted run
timeout 300 "$LLM4D" launch --nproc 4 --log_dir lref -- "${T[@]}" --output_dir ref >/dev/null 2>errref
check_if $(yes_if test $? = 0) "the uninterrupted dp2 x sharding2 run ($(tail -1 errref))"

# 1. node-b lost, then back
t0=$(date +%s.%N)
LLM4D_MPIRUN=$FAKE "$LLM4D" launch --nproc 4 --hostfile hosts --nnodes 1:2 --max_restarts 3 --log_dir l1 -- \
    "${T[@]}" --output_dir o1 >out1 2>err1 &
launcher=$!
wait_for l1/workerlog.0 120 "global step 9,"
touch cluster/down/node-b
victims=$(ranks_of $launcher 2 3)
[ -n "$victims" ] && kill -9 $victims
tkill1=$(date +%s.%N)
# the second failure once the run on node-a has trained 3 steps past the checkpoint it resumed
wait_for err1 60 "^llm4d launch: restart 1 "
resumed=$(grep -m1 '^llm4d launch: restart 1 ' err1 | sed -n 's/.*resuming from o1\/step_\([0-9]*\).*/\1/p')
wait_for l1/workerlog.0 60 "resuming at global step $((${resumed:-0} + 1))$" &&
    wait_for l1/workerlog.0 60 "global step $((${resumed:-0} + 1)),"
tback1=$(date +%s.%N) # training again, on node-a
wait_for l1/workerlog.0 120 "global step $((${resumed:-0} + 3)),"
rm -f cluster/down/node-b
victim=$(ranks_of $launcher 1)
[ -n "$victim" ] && kill -9 $victim
ended 300
secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
check_if $(yes_if test -n "$victims" -a -n "$victim" -a $rc = 0) \
    "node-b lost (ranks ${victims//$'\n'/ } killed), then back (rank 1 killed): the job finishes, exit 0 (got $rc, $secs s)"
f0=$fail
check_if $(yes_if grep -qE '^llm4d launch: restart 1 of 3 in 1 s: rank [23] \(pid [0-9]+\) was killed by signal 9 \(Killed\) at step [0-9]+; resuming from o1/step_[0-9]+( \([0-9]+ steps? lost\))?; now on 1 of 2 hosts \(node-a; not answering: node-b: ssh: connect to host node-b port 22: No route to host\), as 2 processes \(dp_degree 1 x sharding_degree 2 x mp_degree 1 x pp_degree 1, global batch 8\)' err1) \
    "restart 1 names node-b as not answering and goes on as dp1 x sharding2 on node-a ($(grep -m1 'restart 1' err1))"
check_if $(yes_if grep -qE '^llm4d launch: restart 2 of 3 in 1 s: rank 1 \(pid [0-9]+\) was killed by signal 9 \(Killed\) at step [0-9]+; resuming from o1/step_[0-9]+.*; now on 2 of 2 hosts \(node-a node-b\), as 4 processes \(dp_degree 2 x sharding_degree 2 ' err1) \
    "restart 2 takes node-b back: dp2 x sharding2 on both hosts ($(grep -m1 'restart 2' err1 | cut -c1-160)...)"
check_if $(yes_if test "$(tr '\n' '|' <cluster/runs)" = "node-a node-b|node-a|node-a node-b|") \
    "the three runs' hostfiles: both hosts, node-a, both hosts ($(tr '\n' '|' <cluster/runs))"
check_if $(yes_if test "$(curve o1/metrics.jsonl | grep -v eval | cut -d' ' -f1 | tr '\n' ' ')" = "$(seq 1 90 | tr '\n' ' ')") \
    "metrics.jsonl holds steps 1-90 once each"
cmp=$(/usr/bin/python3 - <(curve ref/metrics.jsonl) <(curve o1/metrics.jsonl) <<'PY'
import sys
a = [l.split() for l in open(sys.argv[1])]
b = [l.split() for l in open(sys.argv[2])]
if len(a) != len(b) or len(a) < 91 or [x[0] for x in a] != [x[0] for x in b]:
    print("FAIL the curves' steps differ: %d and %d lines" % (len(a), len(b))); sys.exit()
worst = max(abs(float(x[1]) - float(y[1])) / abs(float(x[1])) for x, y in zip(a, b))
same = next((i for i, (x, y) in enumerate(zip(a, b)) if x[1] != y[1]), len(a))
print(("ok" if worst <= 1e-5 and same >= 9 else "FAIL"),
      "worst relative difference %.2e over %d losses (eval included); the first %d identical to the bit" % (worst, len(a), same))
PY
)
check_if $(yes_if test "${cmp%% *}" = ok) "the elastic run's losses are the uninterrupted run's: ${cmp#* }"
reliability_checked $f0 "restarts (test_elastic)" "a host lost (its 2 ranks killed, probe fails), --nnodes 1:2" \
    "$(grep -m1 'restart 1' err1 | cut -c1-200)" $rc \
    "$(awk -v a="$tkill1" -v b="$tback1" 'BEGIN { printf "%.1f", b - a }')" "yes (resharded)"

# 2. too few hosts: no restart; no start
LLM4D_MPIRUN=$FAKE "$LLM4D" launch --nproc 4 --hostfile hosts --nnodes 2:2 --max_restarts 3 --log_dir l2 -- \
    "${T[@]}" --output_dir o2 >out2 2>err2 &
launcher=$!
wait_for l2/workerlog.0 120 "global step 4,"
touch cluster/down/node-b
victims=$(ranks_of $launcher 3)
[ -n "$victims" ] && kill -9 $victims
ended 120
f0=$fail
check_if $(yes_if test $rc = 137 -a "$(grep -c '^llm4d launch: restart' err2)" = 0) \
    "--nnodes 2:2 and node-b down at the failure: no restart, exit 137 (got $rc)"
check_if $(has err2 '^llm4d launch: not restarting: 1 of 2 hosts (node-a; not answering: node-b: ssh: .*) answers, and --nnodes 2:2 needs at least 2$') \
    "one line says why ($(grep -m1 'not restarting' err2 | cut -c1-150)...)"
check_if $(has err2 '^llm4d launch: the latest checkpoint is o2/step_[0-9]*; to resume from it: ') "and how to resume"
reliability_checked $f0 "restarts (test_elastic)" "a host lost with --nnodes 2:2 (no host to spare)" \
    "$(grep -m1 'not restarting' err2 | cut -c1-200)" $rc - "yes"
LLM4D_MPIRUN=$FAKE "$LLM4D" launch --nproc 4 --hostfile hosts --nnodes 2 --log_dir l3 -- "${T[@]}" --output_dir o3 \
    >out3 2>err3
rc=$?
check_if $(yes_if test $rc = 1 -a ! -e o3 -a "$(grep -c . err3)" = 1) \
    "node-b down at the start of --nnodes 2: exit 1, nothing run (got $rc: $(head -1 err3 | cut -c1-150))"
check_if $(has err3 '^llm4d launch: cannot start: 1 of 2 hosts (node-a; not answering: node-b: ssh: connect to host node-b port 22: No route to host) answers, and --nnodes 2:2 needs at least 2$') \
    "the line names the host that does not answer"
rm -f cluster/down/node-b

# 3. bad inputs
refused "launch --nnodes without --hostfile" "^llm4d launch: --nnodes needs --hostfile FILE" \
    "$LLM4D" launch --nproc 4 --nnodes 1:2 -- "${T[@]}"
refused "launch --nnodes 3:2" "^llm4d launch: --nnodes '3:2' is not MIN:MAX hosts" \
    "$LLM4D" launch --nproc 4 --hostfile hosts --nnodes 3:2 -- "${T[@]}"
refused "launch --nnodes 0:2" "^llm4d launch: --nnodes '0:2' is not MIN:MAX hosts" \
    "$LLM4D" launch --nproc 4 --hostfile hosts --nnodes 0:2 -- "${T[@]}"
refused "launch --nproc 3 --nnodes 1:2" "^llm4d launch: --nproc 3 is not a multiple of --nnodes' most hosts, 2" \
    "$LLM4D" launch --nproc 3 --hostfile hosts --nnodes 1:2 -- "${T[@]}" --dp_degree 3 --sharding_degree 1 \
    --global_batch_size 6
refused "launch --nnodes 1:3 with 2 hosts listed" "^llm4d launch: the hostfile hosts lists 2 hosts, and --nnodes 1:3 asks for up to 3" \
    "$LLM4D" launch --nproc 6 --hostfile hosts --nnodes 1:3 -- "${T[@]}" --dp_degree 3 --global_batch_size 12
printf 'node-a\nnode-a\n' >twice
refused "a host listed twice" "^llm4d launch: the hostfile twice lists node-a twice" \
    "$LLM4D" launch --nproc 2 --hostfile twice --nnodes 1:2 -- "${T[@]}" --dp_degree 1
refused "mp_degree 2 on one host of 1 process" "^llm4d launch: --nnodes 1:2: on 1 host the job would have 1 process, which its mp_degree 2 x pp_degree 1 does not divide" \
    "$LLM4D" launch --nproc 2 --hostfile hosts --nnodes 1:2 -- "${T[@]}" --dp_degree 1 --sharding_degree 1 --mp_degree 2
printf 'node-a\nnode-b\nnode-c\n' >three
refused "a global batch two hosts cannot split" "^llm4d launch: --nnodes 2:3: on 2 hosts (2 processes: dp_degree 2 x sharding_degree 1) the job cannot run: Global.global_batch_size 3 is not a multiple" \
    "$LLM4D" launch --nproc 3 --hostfile three --nnodes 2:3 -- "${T[@]}" --dp_degree 3 --sharding_degree 1 \
    --global_batch_size 3 --micro_batch_size 1
finish
