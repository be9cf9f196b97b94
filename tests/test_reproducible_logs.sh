#!/usr/bin/env bash
# test_reproducible_logs.sh — two runs of the same configuration give byte-identical logs apart from timings
# (issue 15). One process and a dp2 job (through llm4d launch), each run twice from the same state: dropout on,
# evaluation, two checkpoints. Compared byte for byte after masking only what measures time: the log lines'
# timestamps, avg_reader_cost / avg_batch_cost / speed / ips_total / ips, the matmul peak measured at start-up
# (GFLOP/s), metrics.jsonl's time fields (reader_cost, batch_cost, speed, ips_total, ips, mfu, comm_exposed_s,
# comm_s, zero_gather_wait_s, zero_reduce_scatter_s, pp_idle_s, pp_busy_s, work_s) and the end-of-run line of
# the backend timers' shares and the optimizer's GB/s, the planner's prediction and its error (logged only where a
# machine profile exists, ~/.cache/llm4d/machine.json: a measured step and resident set), and what the kernel
# reports of memory:
# the peak resident set size at the end, the memory plan's resident and available bytes (page accounting, which
# moves by a few pages between runs like a timing does; the plan's per-category bytes are compared):
#   - the training log (rank 0's terminal output; each rank's workerlog for dp2);
#   - metrics.jsonl (losses, learning rates, gradient norms, bytes communicated: every other field);
#   - run.json (the run's version, machine, layout and configuration, how it ended), its start and end times,
#     measured matmul peak and its writer's pid and start time masked;
#   - every checkpoint file (tensors and meta.json), unmasked.
# (The launcher's exit records, log/.workerexit.<rank>, hold pids and wall-clock times and are not compared.)
# A third run with another seed must differ under the same masking, which shows the comparison can see a change.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
test_setup
export OMP_NUM_THREADS=1
mkdir -p "$tmp/data"
cp "$SRC_DIR/data/fortunes_ids.npz" "$tmp/data/" # the sample-index caches land beside it, not in the repository
C=(--model_name_or_path gpt2-tiny --input_dir "$tmp/data/fortunes_ids.npz" --max_seq_len 32 --global_batch_size 8
   --max_steps 6 --logging_freq 2 --eval_freq 3 --eval_iters 2 --save_steps 3 -o Model.hidden_dropout_prob=0.1
   -o Model.attention_probs_dropout_prob=0.1 --output_dir "$tmp/out")

# mask NAME FILE: FILE with the timings masked
mask() {
    case "$1" in
    *.jsonl) /usr/bin/python3 -c '
import json, sys
T = ("reader_cost", "batch_cost", "speed", "ips_total", "ips", "mfu", "comm_exposed_s", "comm_s",
     "zero_gather_wait_s", "zero_reduce_scatter_s", "pp_idle_s", "pp_busy_s", "work_s")
for l in open(sys.argv[1]):
    d = json.loads(l)
    print(json.dumps({k: ("T" if k in T else v) for k, v in d.items()}))' "$2" ;;
    *run.json) /usr/bin/python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
d["started"] = d["started_unix_s"] = d["machine"]["matmul_peak_gflops"] = "T"
if "run_id" in d: d["run_id"] = "ID"  # every launch makes its own (cli/launch.h)
d["process"]["pid"] = d["process"]["start_ticks"] = "P"  # the process that wrote it (its namespace compared)
d["end"]["unix_s"] = "T"
print(json.dumps(d, indent=1))' "$2" ;;
    *) sed -E 's/^\[[0-9-]+ [0-9:,]+\]/[T]/; s/(avg_reader_cost|avg_batch_cost|speed|ips_total|ips): [0-9.]+/\1: T/g
               s/[0-9.]+ GFLOP\/s/T GFLOP\/s/
               s/peak resident set size: [0-9.]+ MiB/peak resident set size: T MiB/
               s/on top of [0-9.]+ MiB held now/on top of T MiB held now/
               s/^(\[T\] \[ *INFO\] - time per step by kind of work).*/\1: T/
               s/^(\[T\] \[ *(INFO|WARNING)\] - plan prediction).*/\1 T/
               s/^(\[T\] \[ *INFO\] - optimizer passes: [0-9.]+ GB per step in).*/\1 T/
               s/: [0-9.]+ [GMT]iB per rank; available: [0-9.]+ [GMT]iB/: T per rank; available: T/
               s/planned [0-9.]+ MiB, peak resident set [0-9.]+ MiB \([-+][0-9.]+%\)/planned T, peak resident set T/
               s/\(run [0-9a-z-]+\)$/(run ID)/' "$2" ;;
    esac
}

# run N WHAT ARGS...: one run from a clean state, its outputs kept in $tmp/runN
run() {
    local n=$1 what=$2
    shift 2
    rm -rf "$tmp/out" "$tmp/log" "$tmp"/data/*_indexmap_* # the index is built by every run alike
    if [ "$what" = one ]; then
        "$LLM4D" train "${C[@]}" "$@" >"$tmp/train.log" 2>&1
    else
        "$LLM4D" launch --nproc 2 --log_dir "$tmp/log" -- train "${C[@]}" "$@" >"$tmp/train.log" 2>&1
    fi
    local rc=$?
    mkdir -p "$tmp/run$n"
    mv "$tmp/train.log" "$tmp/out" "$tmp/run$n/"
    [ -d "$tmp/log" ] && mv "$tmp/log" "$tmp/run$n/"
    return $rc
}

# files of run N: everything but the launcher's exit records (log/.workerexit.<rank>: pids and wall-clock times)
files() { (cd "$tmp/run$1" && find . -type f ! -name '.workerexit.*' | sort); }
# same A B: every log, metrics.jsonl and checkpoint file of run A equals run B's (logs and metrics masked);
# prints the first difference
same() {
    local a=$tmp/run$1 b=$tmp/run$2 f rel
    [ "$(files "$1")" = "$(files "$2")" ] ||
        { echo "     different files: $(diff <(files "$1") <(files "$2") | head -3 | tr '\n' ' ')"; return 1; }
    while read -r rel; do
        f=${rel#./}
        case "$f" in
        *.safetensors | */meta.json | */latest) cmp -s "$a/$f" "$b/$f" || { echo "     $f differs"; return 1; } ;;
        *) diff <(mask "$f" "$a/$f") <(mask "$f" "$b/$f") >"$tmp/diff" ||
               { echo "     $f differs:"; head -4 "$tmp/diff" | cut -c1-200 | sed 's/^/     /'; return 1; } ;;
        esac
    done < <(files "$1")
}

run 1 one --micro_batch_size 4
rc1=$?
run 2 one --micro_batch_size 4
rc2=$?
check "one process: two runs exit 0 ($rc1, $rc2) and write 6 steps" \
    test "$rc1$rc2:$(grep -c '"step"' "$tmp/run1/out/metrics.jsonl")" = "00:6"
check "one process: the two runs' log, metrics.jsonl and checkpoints are byte-identical apart from timings" same 1 2
run 3 one --micro_batch_size 4 --seed 6
if same 1 3 >/dev/null; then bad "a run with another seed gives the same masked logs: the comparison is blind"
else ok "a run with another seed differs (the comparison sees changes)"; fi

run 4 dp2 --micro_batch_size 4 --dp_degree 2
rc1=$?
run 5 dp2 --micro_batch_size 4 --dp_degree 2
rc2=$?
check "dp2 through llm4d launch: two runs exit 0 ($rc1, $rc2)" test "$rc1$rc2" = 00
check "dp2: the terminal log, both workerlogs, metrics.jsonl and checkpoints are byte-identical apart from timings" \
    same 4 5
finish
