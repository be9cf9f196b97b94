#!/usr/bin/env bash
# Traces of real runs (--trace DIR --trace_steps A-B; core/trace.h): 4 steps of gpt2-tiny made 4 blocks deep,
# global batch 8, in 2 processes: pp2 1F1B (4 micro-batches), pp2 ZB-H1, pp2 interleaved (2 chunks per stage), dp2
# (each rank 2 micro-batches, traced through -o Global.trace, the YAML key), and pp2 without tracing. Checks:
#   - each rank wrote trace.rank<R>.json, which parses as JSON, and every event has ph, ts, pid and tid, its pid
#     the rank (one process per file, distinct over the job) and tid 0;
#   - complete events nest: on each (pid, tid), an event that starts inside another ends inside it;
#   - the traced steps' spans are there ("step 2", "step 3"), and only those steps' (nothing from step 1 or 4);
#   - the order of forward, backward and weight passes per stage in a traced step is the schedule's, against orders
#     written out here from the papers (not from src/parallel/schedule.c): 1F1B's P - s - 1 warm-up forwards then
#     one forward one backward then the cool-down; ZB-H1's 1F1B order with W(j) right after B(j + s) and the rest
#     at the end; Megatron's interleaved order (forward k is chunk (k / P) mod V of micro-batch (k / PV) P + k mod
#     P, backwards mirrored, (P - s - 1) 2 + (V - 1) P warm-up forwards);
#   - transfers: every pipeline send and receive names the pp group, its peer and the bytes of one activation
#     (B x T x C x 4 = 2 x 32 x 64 x 4); dp's gradient all-reduces name the data group and their bytes sum to the
#     gradients' (every parameter once, 4 bytes each);
#   - the optimizer and data spans of each traced step are there;
#   - tracing changes no number: the traced pp2 run's losses equal the untraced one's, and the untraced run wrote
#     no trace and run.json says trace_dir null;
#   - llm4d report --merge_trace writes one file holding every rank's events;
#   - bad trace settings get one line and exit 2: a malformed --trace_steps, steps after the run's last, and a
#     directory that cannot be written.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
test_setup
export OMP_NUM_THREADS=1
COMMON=(--model_name_or_path gpt2-tiny --input_dir "$SRC_DIR/data/fortunes_ids.npz" --max_seq_len 32
        --global_batch_size 8 --max_steps 4 --max_lr 1e-3 --logging_freq 1 --seed 7 --eval_freq 0 --save_steps -1
        -o Model.num_layers=4)
run() { # name nproc args...
  local name=$1 np=$2
  shift 2
  "$LLM4D" launch --nproc "$np" --log_dir "$tmp/$name/log" -- train "${COMMON[@]}" --output_dir "$tmp/$name/out" \
    "$@" >"$tmp/$name.stdout" 2>&1 || { echo "run $name failed:"; tail -5 "$tmp/$name.stdout"; }
}
run pp2 2 --pp_degree 2 --micro_batch_size 2 --trace "$tmp/pp2/trace" --trace_steps 2-3
run pp2_off 2 --pp_degree 2 --micro_batch_size 2
run zb 2 --pp_degree 2 --pp_schedule ZBH1 --micro_batch_size 2 --trace "$tmp/zb/trace" --trace_steps 2
run v2 2 --pp_degree 2 --virtual_pp_degree 2 --micro_batch_size 2 --trace "$tmp/v2/trace" --trace_steps 2
run dp2 2 --dp_degree 2 --micro_batch_size 2 -o Global.trace="$tmp/dp2/trace" -o Global.trace_steps=2
check "the merged trace written" "$LLM4D" report "$tmp/pp2/out" -o "$tmp/pp2/report.html" \
  --merge_trace "$tmp/pp2/merged.json"
params=$(grep -m1 -o 'parameters, gradients and Adam m, v held whole: [0-9]* elements' "$tmp/dp2/log/workerlog.0" |
  grep -o '[0-9]*' | tail -1)

while IFS= read -r line; do
  case $line in
    "ok   "*) ok "${line#ok   }" ;;
    "FAIL "*) bad "${line#FAIL }" ;;
    *) echo "$line" ;;
  esac
done < <(/usr/bin/python3 - "$tmp" "${params:-0}" <<'PY'
import json, os, sys
tmp, params = sys.argv[1], int(sys.argv[2])
def check(ok, msg):
    print(("ok   " if ok else "FAIL ") + msg, flush=True)

def one_f1b(P, M, s):
    w = min(P - s - 1, M)
    order = [f"F{k}" for k in range(w)]
    for i in range(M):
        if i < M - w:
            order.append(f"F{w + i}")
        order.append(f"B{i}")
    return order

def zbh1(P, M, s):
    order, done_w = [], 0
    for a in one_f1b(P, M, s):
        order.append(a)
        if a[0] == "B" and int(a[1:]) - s >= 0:  # W(j) right after B(j + s)
            order.append(f"W{int(a[1:]) - s}")
            done_w += 1
    return order + [f"W{j}" for j in range(done_w, M)]

def interleaved(P, V, M, s):
    def at(k, backward):
        chunk = (k // P) % V
        return (k // (P * V)) * P + k % P, (V - 1 - chunk if backward else chunk)
    total, w = M * V, min((P - s - 1) * 2 + (V - 1) * P, M * V)
    order = [("F", *at(k, 0)) for k in range(w)]
    for i in range(total - w):
        order += [("F", *at(w + i, 0)), ("B", *at(i, 1))]
    order += [("B", *at(k, 1)) for k in range(total - w, total)]
    return [f"{op}{mb}.{c}" for op, mb, c in order]

def load(name):
    d = os.path.join(tmp, name, "trace")
    files = sorted(f for f in os.listdir(d)) if os.path.isdir(d) else []
    out = {}
    for f in files:
        rank = int(f[len("trace.rank"):-len(".json")])
        out[rank] = json.load(open(os.path.join(d, f)))
    return out

def nested(events):
    """every complete event that starts inside another ends inside it (per pid and tid), in whole nanoseconds"""
    by = {}
    for e in events:
        if e["ph"] == "X":
            by.setdefault((e["pid"], e["tid"]), []).append((round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000)))
    for spans in by.values():
        spans.sort(key=lambda s: (s[0], -s[1]))
        stack = []
        for b, e in spans:
            while stack and stack[-1] <= b and not (stack[-1] == b == e):
                stack.pop()
            if stack and e > stack[-1]:
                return False
            stack.append(e)
    return True

def compute_order(doc, step):
    ev = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    st = [e for e in ev if e.get("cat") == "step" and e["name"] == f"step {step}"]
    if not st:
        return None
    t0, t1 = st[0]["ts"], st[0]["ts"] + st[0]["dur"]
    return [e["name"] for e in sorted(ev, key=lambda e: e["ts"]) if e.get("cat") == "compute" and t0 <= e["ts"] <= t1]

act_bytes = 2 * 32 * 64 * 4
for name, steps, oracle in [("pp2", [2, 3], lambda s: one_f1b(2, 4, s)), ("zb", [2], lambda s: zbh1(2, 4, s)),
                            ("v2", [2], lambda s: interleaved(2, 2, 4, s)), ("dp2", [2], None)]:
    docs = load(name)
    check(sorted(docs) == [0, 1], f"{name}: trace.rank0.json and trace.rank1.json written ({sorted(docs)})")
    all_ev = [e for r in sorted(docs) for e in docs[r]["traceEvents"]]
    fields = all(all(k in e for k in ("ph", "ts", "pid", "tid")) for e in all_ev)
    own = all(all(e["pid"] == r and e["tid"] == 0 for e in docs[r]["traceEvents"]) for r in docs)
    check(fields and own and len(all_ev) > 20,
          f"{name}: all {len(all_ev)} events have ph, ts, pid and tid; each file is one process, pid = its rank")
    check(nested(all_ev), f"{name}: complete events nest on every (pid, tid)")
    traced = sorted({e["name"] for e in all_ev if e.get("cat") == "step"})
    check(traced == [f"step {s}" for s in steps], f"{name}: exactly the traced steps' spans: {traced}")
    for r, doc in sorted(docs.items()):
        cats = {e.get("cat") for e in doc["traceEvents"]}
        check({"optimizer", "data", "compute", "comm"} <= cats, f"{name} rank {r}: optimizer, data, compute and "
              f"communication spans ({sorted(c for c in cats if c)})")
        if oracle is None:
            continue
        stage = doc["otherData"]["coords"]["pp"]
        for s in steps:
            got, want = compute_order(doc, s), oracle(stage)
            check(got == want, f"{name}: stage {stage}'s passes in step {s} in the schedule's order: {got}"
                  + ("" if got == want else f", expected {want}"))
        p2p = [e for e in doc["traceEvents"] if e["name"] in ("isend", "irecv")]
        good = all(e["args"]["group"].startswith("pp:") and e["args"]["peer"] == 1 - stage
                   and e["args"]["bytes"] == act_bytes for e in p2p)
        check(p2p and good, f"{name} rank {r}: {len(p2p)} sends and receives on the pp group, to and from stage "
              f"{1 - stage}, {act_bytes} bytes each")
    if name == "dp2":
        for r, doc in sorted(docs.items()):
            red = [e for e in doc["traceEvents"] if e["name"] in ("iallreduce", "allreduce")
                   and e["args"]["group"].startswith("data:") and e["args"].get("bytes", 0) > 1024]
            total = sum(e["args"]["bytes"] for e in red)
            names = [e["name"] for e in doc["traceEvents"] if e.get("cat") == "compute"]
            check(total == 4 * params and names == ["F0", "B0", "F1", "B1"],
                  f"dp2 rank {r}: gradient all-reduces on the data group of {total} bytes = 4 x {params} "
                  f"parameters; passes {names}")

merged = json.load(open(os.path.join(tmp, "pp2", "merged.json")))
pids = sorted({e["pid"] for e in merged["traceEvents"]})
singles = sum(len(d["traceEvents"]) for d in load("pp2").values())
check(pids == [0, 1] and len(merged["traceEvents"]) == singles,
      f"the merged trace holds both ranks' {singles} events as processes {pids}")

def losses(name):
    rows = [json.loads(l) for l in open(os.path.join(tmp, name, "out", "metrics.jsonl"))]
    return [r["loss"] for r in rows if "step" in r]
a, b = losses("pp2"), losses("pp2_off")
check(len(a) == 4 and a == b, f"tracing changes no number: the traced run's losses equal the untraced one's {a}")
info = json.load(open(os.path.join(tmp, "pp2_off", "out", "run.json")))
check(not os.path.exists(os.path.join(tmp, "pp2_off", "trace")) and info["trace_dir"] is None,
      "the untraced run wrote no trace, and its run.json says trace_dir null")
PY
)

# ---- bad trace settings: one line, exit 2 ----------------------------------------------------------------------
one() { "$LLM4D" train "${COMMON[@]}" --micro_batch_size 8 --output_dir "$tmp/bad" "$@"; }
refused "a malformed --trace_steps" "trace_steps '3to4' is not a range of steps" one --trace "$tmp/t" \
  --trace_steps 3to4
refused "trace steps after the last step" "trace_steps 9-10 starts after the run's last step (max_steps 4)" one \
  --trace "$tmp/t" --trace_steps 9-10
touch "$tmp/a_file"
refused "an unwritable trace directory" "choose a writable --trace directory" one --trace "$tmp/a_file/sub"
finish
