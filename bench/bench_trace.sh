#!/usr/bin/env bash
# bench_trace.sh — what tracing costs (core/trace.h): the same job with and without --trace, run alternately (off,
# on, off, on, ...) so that the machine's load drifts over both alike, PAIRS pairs. Each run's cost is the median
# batch_cost of steps 3..STEPS (every one of them traced in the traced runs; the first steps warm up), and the
# report is the mean of those medians per side, their difference in percent, the spread of the untraced runs (what
# the difference has to beat), and the median over pairs of traced / untraced (a pair's two runs are neighbours in
# time, so the ratio cancels slow drifts of the load). Spans per traced step come from the trace files; times a
# span's cost (tests/test_trace.c prints it) they give the recording's own share of a step.
#   bench/bench_trace.sh [PAIRS] [LAYOUT]    LAYOUT: pp2 (default: 2 stages, 8 micro-batches, the most spans per
#                                            step) or dp2
set -uo pipefail
SRC_DIR=$(cd "$(dirname "$0")/.." && pwd)
LLM4D=${LLM4D:-$SRC_DIR/build/llm4d}
PAIRS=${1:-5}
LAYOUT=${2:-pp2}
STEPS=${STEPS:-30}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
args=(--model_name_or_path gpt2-tiny --input_dir "$SRC_DIR/data/fortunes_ids.npz" --max_seq_len 64
      --global_batch_size 8 --max_steps "$STEPS" --logging_freq 100 --eval_freq 0 --save_steps -1
      -o Model.num_layers=8 --micro_batch_size 1)
case $LAYOUT in
pp2) args+=(--pp_degree 2) ;;
dp2) args+=(--dp_degree 2) ;;
*) echo "bench_trace.sh: LAYOUT is pp2 or dp2" >&2; exit 2 ;;
esac
median() { # metrics.jsonl: the median batch_cost of steps 3..
  /usr/bin/python3 -c '
import json, statistics, sys
c = [json.loads(l)["batch_cost"] for l in open(sys.argv[1]) if "\"step\"" in l]
print(statistics.median(c[2:]))' "$1"
}
for i in $(seq 1 "$PAIRS"); do
  for mode in off on; do
    t=()
    [ $mode = on ] && t=(--trace "$tmp/trace" --trace_steps 3-)
    rm -rf "$tmp/out" "$tmp/trace"
    "$LLM4D" launch --nproc 2 --log_dir "$tmp/log" -- train "${args[@]}" --output_dir "$tmp/out" "${t[@]}" \
      >"$tmp/run.log" 2>&1 || { tail -5 "$tmp/run.log"; exit 1; }
    m=$(median "$tmp/out/metrics.jsonl")
    echo "$mode $m" >>"$tmp/results"
    if [ $mode = on ]; then
      spans=$(/usr/bin/python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
print(sum(e["ph"] == "X" for e in d["traceEvents"]))' "$tmp/trace/trace.rank0.json")
      echo "spans $spans" >>"$tmp/results"
      echo "pair $i: off $(tail -3 "$tmp/results" | head -1 | cut -d' ' -f2) s, on $m s ($spans spans on rank 0)"
    fi
  done
done
/usr/bin/python3 - "$tmp/results" "$STEPS" "$LAYOUT" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
off = [float(v) for m, v in rows if m == "off"]
on = [float(v) for m, v in rows if m == "on"]
spans = [int(v) for m, v in rows if m == "spans"]
mo, mn = statistics.mean(off), statistics.mean(on)
ratio = statistics.median(b / a for a, b in zip(off, on))
steps = int(sys.argv[2]) - 2
print(f"{sys.argv[3]}, steps 3..{sys.argv[2]}, {len(off)} pairs: untraced {mo * 1000:.2f} ms per step "
      f"(runs from {min(off) * 1000:.2f} to {max(off) * 1000:.2f}), traced {mn * 1000:.2f} ms "
      f"(from {min(on) * 1000:.2f} to {max(on) * 1000:.2f}): {100 * (mn - mo) / mo:+.2f} %; median of the pairs' "
      f"traced / untraced {100 * (ratio - 1):+.2f} %; {statistics.mean(spans) / steps:.1f} spans per step on rank 0")
PY
