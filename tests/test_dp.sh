#!/usr/bin/env bash
# Data parallel against one process: the same global batch (8 samples) with dropout on, over 20 steps, as
#   1 process x micro 8 | dp2 x micro 4 | dp2 x micro 2 x accumulate 2 | dp4 x micro 2 | dp4 x micro 1 x acc 2,
# run through `llm4d launch`. Checks: every layout's loss curve equals the single-process one within 1e-5; the
# parameters are bit-identical on every rank after every step (hashes logged by --debug_check_replicas); the
# bytes each rank sends per step equal a ring all-reduce of the gradients, 2 x params x 4 x (dp-1)/dp, within 5 %.
# The gradients are shared in place with the host's ranks (comm/shm_share.h) and say so; dp2 again with rank 1's
# sharing failing as where /dev/shm is too small (LLM4D_FAULT=shmshare@1): both ranks fall back to the segment's
# slots, each says why in its log, and the loss curve is the shared run's bit for bit (both sum in rank order).
set -uo pipefail
source "$(dirname "$0")/lib.sh"
test_setup
export OMP_NUM_THREADS=1
COMMON=(--model_name_or_path gpt2-tiny --input_dir "$SRC_DIR/data/fortunes_ids.npz" --max_seq_len 32
        --global_batch_size 8 --max_steps 20 --max_lr 1e-3 --min_lr 1e-4 --warmup_rate 0.1 --decay_steps 20
        --grad_clip 1.0 --logging_freq 1 --seed 7 -o Model.hidden_dropout_prob=0.1
        -o Model.attention_probs_dropout_prob=0.1 --debug_check_replicas)
run() { # name nproc micro [bucket MB]
  local name=$1 np=$2 micro=$3 bucket=${4:-25}
  if ! "$LLM4D" launch --nproc "$np" --log_dir "$tmp/$name/log" -- train "${COMMON[@]}" --dp_degree "$np" \
      --micro_batch_size "$micro" --bucket_size_mb "$bucket" --output_dir "$tmp/$name/out" >"$tmp/$name.stdout" 2>&1; then
    echo "FAIL $name: llm4d launch failed"; cat "$tmp/$name.stdout"; return 1
  fi
}
mkdir -p "$tmp"
"$LLM4D" train "${COMMON[@]}" --micro_batch_size 8 --output_dir "$tmp/single/out" >"$tmp/single.log" 2>&1 ||
  { bad "single process run"; cat "$tmp/single.log"; finish; }
# dp2_acc2 uses 0.1 MB buckets, so most buckets take the non-blocking path started during backward (with the
# default 25 MB the tiny model has one bucket, which is reduced after backward)
for cfg in "dp2 2 4" "dp2_acc2 2 2 0.1" "dp4 4 2" "dp4_acc2 4 1"; do
  set -- $cfg
  run "$1" "$2" "$3" "${4:-25}"
done
LLM4D_FAULT=shmshare@1 LLM4D_FAULT_RANK=1 run dp2_noshare 2 4
/usr/bin/python3 - "$tmp" >"$tmp/checks" <<'PY'
import json, os, re, sys
tmp = sys.argv[1]
load = lambda p: [json.loads(l) for l in open(p)]
ref = load(f"{tmp}/single/out/metrics.jsonl")
def check(ok, msg):
    print(("PASS " if ok else "FAIL ") + msg)
params = None
for name, np_ in (("dp2", 2), ("dp2_acc2", 2), ("dp4", 4), ("dp4_acc2", 4)):
    path = f"{tmp}/{name}/out/metrics.jsonl"
    if not os.path.exists(path):
        check(False, f"{name}: no metrics (the run failed)"); continue
    m = load(path)
    d = max(abs(a["loss"] - b["loss"]) for a, b in zip(m, ref))
    check(len(m) == len(ref) == 20 and d <= 1e-5, f"{name}: 20-step loss curve vs one process, max |diff| {d:.2e} (<= 1e-5)")
    hashes = {}
    for r in range(np_):
        for line in open(f"{tmp}/{name}/log/workerlog.{r}"):
            h = re.search(r"rank (\d+) parameter hash after step (\d+): (\w+)", line)
            if h: hashes.setdefault(int(h.group(2)), {})[int(h.group(1))] = h.group(3)
    same = len(hashes) == 20 and all(len(v) == np_ and len(set(v.values())) == 1 for v in hashes.values())
    check(same, f"{name}: parameters bit-identical on all {np_} ranks after each of 20 steps")
    if params is None:
        for line in open(f"{tmp}/single.log"):
            p = re.search(r"parameters: (\d+)", line)
            if p: params = int(p.group(1))
    expect = 2 * params * 4 * (np_ - 1) / np_
    got = m[-1]["comm_bytes"]
    check(abs(got - expect) <= 0.05 * expect, f"{name}: bytes sent per step per rank {got} vs ring all-reduce "
          f"2 x {params} x 4 x ({np_}-1)/{np_} = {expect:.0f} ({100 * (got - expect) / expect:+.2f} %)")
def engine_line(name, r):
    try:
        return next((l for l in open(f"{tmp}/{name}/log/workerlog.{r}") if "data parallel over" in l), "")
    except OSError:
        return ""
for r in range(2):
    check("summed in place in memory the host's ranks share" in engine_line("dp2", r),
          f"dp2 rank {r}: the gradients shared in place ({engine_line('dp2', r).strip()[-90:]})")
why = {0: "another rank of the group could not share", 1: "does not fit in /dev/shm"}
for r in range(2):
    line = engine_line("dp2_noshare", r)
    check("not shared in place" in line and why[r] in line,
          f"dp2 with rank 1's sharing failing: rank {r} on the slots, saying why ({line.strip()[-110:]})")
try:
    a, b = load(f"{tmp}/dp2/out/metrics.jsonl"), load(f"{tmp}/dp2_noshare/out/metrics.jsonl")
    check(len(a) == len(b) == 20 and all(x["loss"] == y["loss"] for x, y in zip(a, b)),
          "dp2 through the slots = dp2 shared in place, bit for bit over 20 steps")
except OSError:
    check(False, "dp2_noshare: no metrics (the run failed)")
PY
rc=$?
tally_lines <"$tmp/checks"
[ $rc = 0 ] || bad "the Python checks exited $rc"
finish
