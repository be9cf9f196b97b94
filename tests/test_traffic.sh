#!/usr/bin/env bash
# test_traffic.sh — the collectives and messages the engines publish for a step (parallel/traffic.h; printed by
# `llm4d plan --evaluate --traffic`, what the planner's step time reads) against what a real run moves: one traced
# step (--trace, core/trace.h: every communication call with its group and payload bytes, recorded by the
# communicator) of 2- and 4-process gpt2-tiny runs (2 micro-batches a step with dp2, else 4):
#   dp2 (0.1 MB buckets: two started during backward, the last blocking), dp2 with bf16 payloads, sharding2 at
#   stages 1, 2 and 3, dp2 x sharding2 at stage 1 (the hybrid all-reduce per group) and at stage 2 with bf16
#   payloads (one hybrid all-reduce of the own shards, fp32);
#   tensor parallel: mp2 (the blocks' all-reduces, the lookup's and the head's, the cross-entropy's statistics),
#   mp2 with sequence parallelism (all-gathers and reduce-scatters, the LayerNorm outputs gathered again, the
#   engine's sum of the partial gradients), the same with recompute under use_amp O2 (a second forward per block in
#   backward, 16-bit gathers), llama-tiny with one key/value head over mp2 (the replicated head's gradient in the
#   engine's sum);
#   pipeline: pp2 1F1B and interleaved (2 virtual stages; the schedule's sends and receives of activations and
#   gradients, the tied embedding's all-reduce), pp2 x mp2 ZB-H1 with sequence parallelism under O2 (16-bit
#   messages, the split backward's weight pass gathering again), pp2 x sharding2 stage 2 (the embedding all-reduce
#   of the own shard).
# Per (group, kind) of collective on every rank: the bytes a step moves and the calls equal the list's (bytes per
# call x calls per step summed), the payload sizes agree call for call (the multiset of bytes per call), and the
# calls the list says the engine starts without waiting are the trace's non-blocking ones (iallreduce, isend, ...;
# not for stage 3's gathers at use, whose first of a step is fetched blocking before the recorded order is
# replayed). The trainer's scalars (8-byte loss, norm and found-inf all-reduces over the world, data and pipe
# groups) are not the engines' and are left out.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
test_setup
export OMP_NUM_THREADS=1
PROF="$SRC_DIR/bench/profiles/a100_selene.json"
COMMON=(--model_name_or_path gpt2-tiny --input_dir "$SRC_DIR/data/fortunes_ids.npz" --max_seq_len 32
        --global_batch_size 8 --micro_batch_size 2 --max_steps 2 --max_lr 1e-3 --logging_freq 1 --seed 7
        --eval_freq 0 --save_steps -1)
cases=(
  "dp2     2 --dp_degree 2 --bucket_size_mb 0.1"
  "dp2bf   2 --dp_degree 2 --bucket_size_mb 0.1 --grad_comm_dtype bfloat16"
  "z1      2 --dp_degree 1 --sharding_degree 2 --sharding_stage 1"
  "z2      2 --dp_degree 1 --sharding_degree 2 --sharding_stage 2"
  "z3      2 --dp_degree 1 --sharding_degree 2 --sharding_stage 3"
  "h1      4 --dp_degree 2 --sharding_degree 2 --sharding_stage 1"
  "h2bf    4 --dp_degree 2 --sharding_degree 2 --sharding_stage 2 --grad_comm_dtype bfloat16"
  "mp2     2 --mp_degree 2"
  "mp2sp   2 --mp_degree 2 --sequence_parallel true"
  "mp2rc   2 --mp_degree 2 --sequence_parallel true --use_recompute true --use_amp true"
  "mp2kv   2 --mp_degree 2 --sequence_parallel true --model_name_or_path llama-tiny -o Model.num_key_value_heads=1"
  "pp2     2 --pp_degree 2"
  "pp2v2   2 --pp_degree 2 --virtual_pp_degree 2 --pp_schedule interleaved -o Model.num_layers=4"
  "pp2mp2  4 --pp_degree 2 --mp_degree 2 --sequence_parallel true --pp_schedule ZBH1 --use_amp true"
  "pp2z2   4 --pp_degree 2 --sharding_degree 2 --sharding_stage 2"
)
for c in "${cases[@]}"; do
  read -r name np args <<<"$c"
  # shellcheck disable=SC2086
  "$LLM4D" plan --evaluate --traffic --machine_profile "$PROF" "${COMMON[@]}" $args >"$tmp/$name.list" \
    2>"$tmp/$name.list.err" || echo "plan $name failed: $(head -c 300 "$tmp/$name.list.err")"
  # shellcheck disable=SC2086
  "$LLM4D" launch --nproc "$np" --log_dir "$tmp/$name/log" -- train "${COMMON[@]}" $args \
    --output_dir "$tmp/$name/out" --trace "$tmp/$name/trace" --trace_steps 2 >"$tmp/$name.stdout" 2>&1 ||
    { echo "run $name failed:"; tail -5 "$tmp/$name.stdout"; }
done

/usr/bin/python3 - "$tmp" "${cases[@]}" >"$tmp/verdicts" 2>&1 <<'PY'
import collections, glob, json, sys
tmp, cases = sys.argv[1], [c.split()[0] for c in sys.argv[2:]]
KIND = {"allreduce": "allreduce", "iallreduce": "allreduce", "allreduce (max)": "allreduce",
        "reduce_scatter": "reduce_scatter", "ireduce_scatter": "reduce_scatter", "allgather": "allgather",
        "iallgather": "allgather", "send": "send", "isend": "send", "recv": "recv", "irecv": "recv"}
GROUPS = ("data", "sharding", "dp", "mp", "pp", "embedding")
def check(ok, msg):
    print(("ok   " if ok else "FAIL ") + msg, flush=True)

def degree(args, flag):
    return int(args[args.index(flag) + 1]) if flag in args else 1

for name, args in zip(cases, [c.split()[2:] for c in sys.argv[2:]]):
    # the list, per pipeline stage ("stage <s>: ..." then its calls):
    # "traffic <what> <op> group <g> <size> dtype <t> id <i> bytes <b> calls <k> at <when> <blocking|started>"
    want = collections.defaultdict(lambda: collections.defaultdict(
        lambda: {"bytes": 0, "sizes": collections.Counter(), "started": 0}))
    n_lines, stage = 0, 0
    try:
        lines = [l.split() for l in open(f"{tmp}/{name}.list")]
    except OSError:
        lines = []
    for f in lines:
        if f and f[0] == "stage":
            stage = int(f[1].rstrip(":"))
        if not f or f[0] != "traffic":
            continue
        n_lines += 1
        op, group, b, k, when, how = f[2], f[4], int(f[11]), int(f[13]), f[15], f[16]
        w = want[stage][(group, op)]
        w["bytes"] += b * k
        w["sizes"][b] += k
        w["started"] += k if how == "started" else 0
        w["use"] = when == "use"
    check(n_lines > 0, f"{name}: llm4d plan --traffic published {n_lines} collectives")
    # a rank's stage: the grid is (data, pipe, sharding, model), the model axis fastest (comm/topology.h)
    pp, inner = degree(args, "--pp_degree"), degree(args, "--sharding_degree") * degree(args, "--mp_degree")
    traces = sorted(glob.glob(f"{tmp}/{name}/trace/trace.rank*.json"))
    check(len(traces) > 0, f"{name}: the run wrote {len(traces)} traces")
    for path in traces:
        rank = path.rsplit("rank", 1)[1].split(".")[0]
        want_r = want[int(rank) // inner % pp]
        got = collections.defaultdict(lambda: {"bytes": 0, "sizes": collections.Counter(), "started": 0})
        for e in json.load(open(path))["traceEvents"]:
            if e.get("cat") != "comm" or e.get("name") not in KIND:
                continue
            group, b = e["args"]["group"].split(":")[0], e["args"].get("bytes", -1)
            if group not in GROUPS or (group != "mp" and KIND[e["name"]] == "allreduce" and b == 8):
                continue  # the trainer's scalars (loss, gradient norm, found-inf), not an engine's
            g = got[(group, KIND[e["name"]])]
            g["bytes"] += b
            g["sizes"][b] += 1
            g["started"] += e["name"].startswith("i")
        for key in sorted(set(want_r) | set(got)):
            w, g = want_r.get(key), got.get(key)
            wb, gb = (w["bytes"] if w else 0), (g["bytes"] if g else 0)
            wn, gn = (sum(w["sizes"].values()) if w else 0), (sum(g["sizes"].values()) if g else 0)
            check(wb == gb and wn == gn, f"{name} rank {rank} {key[0]} {key[1]}: the list says {wb} bytes in {wn} "
                  f"calls a step, the run moved {gb} bytes in {gn}")
            if w and g:
                check(w["sizes"] == g["sizes"], f"{name} rank {rank} {key[0]} {key[1]}: bytes per call agree "
                      f"({dict(sorted(w['sizes'].items()))} listed, {dict(sorted(g['sizes'].items()))} run)")
                if not w.get("use"):
                    check(w["started"] == g["started"], f"{name} rank {rank} {key[0]} {key[1]}: {w['started']} "
                          f"calls listed as started without waiting, {g['started']} non-blocking in the run")
PY
tally_lines <"$tmp/verdicts"
finish
