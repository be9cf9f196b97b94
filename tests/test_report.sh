#!/usr/bin/env bash
# llm4d report (report/report.h) on real runs, rendered by headless Chromium (Debian's chromium package). Runs, all
# 8 steps of gpt2-tiny made 4 blocks deep with an evaluation every 4 steps: dp2 x pp2 (4 processes, 1F1B, steps 3-4
# traced), the same model in 1 process, and dp2 made to fail at step 5 (an injected non-finite gradient). Checks:
#   - the dp2 x pp2 report (with --compare of the 1-process run): every chart is there as an <svg> with its id
#     (loss against steps and tokens, learning rate, gradient norm, loss scale, tokens/s, MFU, the step's time by
#     kind of work and its shares, memory per rank, the grid, the schedule); the state is finished; the schedule
#     draws each of the 4 ranks' 4 forwards and 4 backwards of step 3; the memory chart has each rank's plan and
#     peak; the two layouts' losses differ by less than 1e-5 in the equivalence table; the configuration shows
#     the explicitly set keys;
#   - the failed run's report: state failed, the last good step (4) marked and named, and the rank's error line;
#   - what the report says in the units and terms the user gave (issue 43): Distributed.bucket_size_mb as 25 (the
#     YAML's megabytes, also from a run.json of format 1, which held bytes), no fp16 loss-scale chart for fp32 runs
#     (and one for a run that computed in fp16), the whole model's parameters against rank 0's part on a pipeline,
#     and a schedule whose boxes too narrow for their label have none (not the label cut to its digits);
#   - a run in progress (its metrics.jsonl's last line cut in half, its logs without the end-of-run tables and
#     exit records): state in progress, the partial line left out;
#   - the page is self-contained: no script, no stylesheet or image link, no url(), and a Content-Security-Policy
#     that forbids loading anything;
#   - in headless Chromium each page loads with no console message (CSP refusals included), its DOM holds the
#     same charts, and its screenshot is not blank (many colours, a share of non-white pixels, the pixels of the
#     loss curve's and the schedule's colours; tests/png_stats.c reads the PNG). The checker is shown to fail too:
#     a page with an inline script gets a console error, a blank page a blank screenshot;
#   - bad input gets one line and exit 2: a missing run directory, a file, a directory that is not a run's, a
#     damaged metrics.jsonl line, a damaged run.json, a damaged trace file, an unknown option, no directory, a
#     --compare without a value, a missing --log_dir, an unwritable output, --merge_trace without traces.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
test_setup
export OMP_NUM_THREADS=1
COMMON=(--model_name_or_path gpt2-tiny --input_dir "$SRC_DIR/data/fortunes_ids.npz" --max_seq_len 32
        --global_batch_size 8 --max_steps 8 --max_lr 1e-3 --min_lr 1e-4 --warmup_rate 0.1 --decay_steps 8
        --logging_freq 1 --seed 7 --eval_freq 4 --eval_iters 2 --save_steps -1 -o Model.num_layers=4)
run() { # name nproc args...
  local name=$1 np=$2
  shift 2
  "$LLM4D" launch --nproc "$np" --log_dir "$tmp/$name/log" -- train "${COMMON[@]}" --output_dir "$tmp/$name/out" \
    "$@" >"$tmp/$name.stdout" 2>&1
}
run grid 4 --dp_degree 2 --pp_degree 2 --micro_batch_size 1 --trace "$tmp/grid/trace" --trace_steps 3-4 ||
  { echo "dp2 x pp2 run failed:"; tail -5 "$tmp/grid.stdout"; }
run single 1 --micro_batch_size 8 || { echo "1-process run failed:"; tail -5 "$tmp/single.stdout"; }
run fail 2 --dp_degree 2 --micro_batch_size 4 --debug_inject_inf_step 5
check_if $(yes_if test $? = 2) "the run made to fail at step 5 exited with 2"
# a run in progress: the last metrics line half written, logs without their end and no exit records
mkdir -p "$tmp/prog/log"
cp -r "$tmp/grid/out" "$tmp/prog/"
/usr/bin/python3 - "$tmp/grid/out/metrics.jsonl" "$tmp/prog/out/metrics.jsonl" <<'PY'
import sys
lines = open(sys.argv[1]).read().splitlines()
cut = next(i for i, l in enumerate(lines) if l.startswith('{"step": 7,'))
open(sys.argv[2], "w").write("\n".join(lines[:cut]) + "\n" + lines[cut][:len(lines[cut]) // 2])
PY
for f in "$tmp"/grid/log/workerlog.*; do
  sed '/global step 6,/,$d' "$f" >"$tmp/prog/log/$(basename "$f")"
done

report() { # name args...: the report of run `name` into $tmp/name.html
  local name=$1
  shift
  check "report of the $name run written" "$LLM4D" report "$tmp/$name/out" -o "$tmp/$name.html" "$@"
}
report grid --compare "$tmp/single/out"
report fail
report prog --log_dir "$tmp/prog/log"
has_all() { # FILE PATTERN...: every pattern is in FILE
  local f=$1 p
  shift
  for p in "$@"; do grep -q -- "$p" "$f" || { echo "  missing in $(basename "$f"): $p"; return 1; }; done
}
charts=(chart-loss-step chart-loss-tokens chart-lr chart-grad-norm chart-tokens-s chart-mfu
        chart-step-time chart-step-shares chart-memory chart-grid)
ids() { printf '<svg id="%s"\n' "$@"; }
check "dp2 x pp2: every chart and the schedule" has_all "$tmp/grid.html" $(ids "${charts[@]}" chart-schedule chart-loss-delta)
check "dp2 x pp2: state finished" has_all "$tmp/grid.html" 'class="state finished">out (dp2 pp2): finished: 8 steps'
boxes=$(sed -n '/<svg id="chart-schedule"/,/<\/svg>/p' "$tmp/grid.html" | grep -o '<title>[FB][0-9]*: ' | sort | uniq -c |
  awk '{print $1}' | sort -u | tr '\n' ' ')
nboxes=$(sed -n '/<svg id="chart-schedule"/,/<\/svg>/p' "$tmp/grid.html" | grep -o '<title>[FB][0-9]*: ' | wc -l)
check_if $(yes_if test "$nboxes" = 32 -a "$boxes" = "4 ") \
  "the schedule of step 3: 32 boxes, F0..F3 and B0..B3 once on each of the 4 ranks (per name: $boxes; $nboxes)"
check_if $(yes_if test "$(grep -o 'rank [0-3]: plan' "$tmp/grid.html" | wc -l)" = 4 -a \
  "$(grep -o 'MiB peak RSS (' "$tmp/grid.html" | wc -l)" = 4) "the memory chart: a plan and a peak bar per rank"
delta=$(sed -n '/<table id="equivalence"/,/<\/table>/p' "$tmp/grid.html" |
  grep -o '<tr><td>out (1 process)</td><td class="num">[0-9]*</td><td class="num">[^<]*' | sed 's/.*>//')
check_if $(yes_if awk -v d="${delta:-1}" 'BEGIN { exit !(d + 0 < 1e-5) }') \
  "dp2 x pp2 against 1 process: max |loss difference| ${delta:-missing} < 1e-5 in the equivalence table"
check "the configuration shows the keys set" has_all "$tmp/grid.html" '<tr class="set"><td>Distributed.pp_degree' \
  'Global.trace_steps'

# ---- in the user's units and terms (issue 43) ---------------------------------------------------------------------
mb() { grep -o '<td>Distributed.bucket_size_mb</td><td class="mono">[^<]*' "$1" | head -1 | sed 's/.*>//'; }
check_if $(yes_if test "$(mb "$tmp/grid.html")" = 25) "bucket_size_mb in the megabytes the YAML gives: $(mb "$tmp/grid.html")"
cp -r "$tmp/single/out" "$tmp/format1"
/usr/bin/python3 - "$tmp/format1/run.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["format"] = "llm4d run 1"
d["config"]["values"]["Distributed.bucket_size_mb"] = 26214400
json.dump(d, open(sys.argv[1], "w"))
PY
"$LLM4D" report "$tmp/format1" -o "$tmp/format1.html" >/dev/null
check_if $(yes_if test "$(mb "$tmp/format1.html")" = 25) "and from a run.json of format 1, which held bytes: $(mb "$tmp/format1.html")"
check_if $(yes_if test "$(grep -c '<svg id="chart-loss-scale"' "$tmp/grid.html")" = 0) "fp32 runs: no fp16 loss-scale chart"
check "fp32 runs: the page says why" has_all "$tmp/grid.html" "No loss-scale chart: no run here computed in fp16"
cp -r "$tmp/single/out" "$tmp/fp16"
/usr/bin/python3 - "$tmp/fp16" <<'PY'
import json, sys
d = json.load(open(sys.argv[1] + "/run.json"))
d["machine"]["precision"] = "fp16"
json.dump(d, open(sys.argv[1] + "/run.json", "w"))
PY
"$LLM4D" report "$tmp/fp16" -o "$tmp/fp16.html" >/dev/null
check_if $(yes_if test "$(grep -c '<svg id="chart-loss-scale"' "$tmp/fp16.html")" = 1) "a run that computed in fp16: the loss-scale chart"
check "the model's parameters: the whole model's, and rank 0's part of the pipeline" has_all "$tmp/grid.html" \
  '[0-9]* parameters in the whole model (rank 0 holds [0-9]* of them'
# a schedule of 40 narrow forward boxes (12 us of a 1 ms step: 12 px, under a label's width) and one wide backward
mkdir -p "$tmp/narrow"
/usr/bin/python3 - "$tmp/narrow/trace.rank0.json" <<'PY'
import json, sys
ev = [{"ph": "X", "name": "step 1", "cat": "step", "ts": 0, "dur": 1000, "pid": 0, "tid": 0}]
ev += [{"ph": "X", "name": "F%d" % i, "cat": "compute", "ts": 25 * i, "dur": 12, "pid": 0, "tid": 0,
        "args": {"mb": i}} for i in range(32)]
ev += [{"ph": "X", "name": "B0", "cat": "compute", "ts": 800, "dur": 190, "pid": 0, "tid": 0, "args": {"mb": 0}}]
json.dump({"traceEvents": ev, "otherData": {"rank": 0, "coords": {"dp": 0, "pp": 0, "sharding": 0, "mp": 0},
           "pp_schedule": "none", "degrees": {"pp": 1}, "micro_batches": 32, "virtual_pp_degree": 1}},
          open(sys.argv[1], "w"))
PY
"$LLM4D" report "$tmp/single/out" --trace "$tmp/narrow" -o "$tmp/narrow.html" >/dev/null
labels=$(sed -n '/<svg id="chart-schedule"/,/<\/svg>/p' "$tmp/narrow.html" | grep -o 'class="boxlabel"[^>]*>[^<]*' |
  sed 's/.*>//' | tr '\n' ' ')
check_if $(yes_if test "$labels" = "B0 ") "schedule: only boxes wide enough for their whole label have one (labels: ${labels:-none})"
check "failed run: state, last good step and error line" has_all "$tmp/fail.html" 'class="state failed"' \
  'the last good step is 4' 'llm4d: rank [01]: the gradient norm is not finite at step 5' 'last good step</text>'
check "run in progress: state and the partial line" has_all "$tmp/prog.html" \
  'class="state running">in progress: step 6 of 8 (the next step&#39;s line is being written)' \
  "last line is incomplete"
for r in grid fail prog; do
  check_if $(yes_if test "$(grep -cE '<script|<link|<img|<iframe|src=|url\(|@import' "$tmp/$r.html")" = 0) \
    "$r report: no script, link, image or url()"
  check "$r report: a policy that loads nothing" has_all "$tmp/$r.html" "content=\"default-src 'none'"
done

# ---- headless Chromium: loads with no console message, the DOM holds the charts, the screenshot is not blank ----
chromium_run() { # what(screenshot|dump-dom) HTML OUT: runs Chromium, its log in OUT.log
  local ud
  ud=$(mktemp -d "$tmp/profile.XXXXXX")
  local mode=(--dump-dom)
  [ "$1" = screenshot ] && mode=(--screenshot="$3" --window-size=1280,3200 --hide-scrollbars)
  timeout 120 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync --user-data-dir="$ud" \
    --enable-logging=stderr --v=0 "${mode[@]}" "file://$2" >"$3.dom" 2>"$3.log"
}
console() { grep -E 'CONSOLE|Refused to|ERR_' "$1.log"; } # the messages of the page, not of Chromium itself
if ! command -v chromium >/dev/null; then
  bad "chromium is not installed (scripts/setup.sh installs it with LLM4D_TEST_DEPS=1)"
  finish
fi
if ! cc -O2 -o "$tmp/png_stats" "$SRC_DIR/tests/png_stats.c" -lz; then
  bad "building tests/png_stats.c"
  finish
fi
pixels() { "$tmp/png_stats" "$@"; } # FILE COLOURS...
nonblank() { # PNG: many colours, some share not white, the loss curve's blue and the schedule's forward blue
  local s
  s=$(pixels "$1" '#1f77b4' '#4e79a7')
  echo "  $s"
  awk '{ exit !($6 >= 300 && $8 >= 40 && $10 >= 300 && $12 >= 100) }' <<<"$s"
}
for r in grid fail prog; do
  chromium_run dump-dom "$tmp/$r.html" "$tmp/$r.dom"
  n_file=$(grep -o '<svg id="chart-[a-z-]*"' "$tmp/$r.html" | sort | tr '\n' ' ')
  n_dom=$(grep -o '<svg id="chart-[a-z-]*"' "$tmp/$r.dom.dom" | sort | tr '\n' ' ')
  check_if $(yes_if test -n "$n_dom" -a "$n_dom" = "$n_file") "$r report in Chromium: the DOM holds the charts ($n_dom)"
  check_if $(yes_if test -z "$(console "$tmp/$r.dom")") "$r report in Chromium: no console message $(console "$tmp/$r.dom" | head -2)"
  chromium_run screenshot "$tmp/$r.html" "$tmp/$r.png"
  check_if $(yes_if test -z "$(console "$tmp/$r.png")") "$r report screenshot: no console message"
  [ "$r" = grid ] || continue # the failed and in-progress pages have no schedule (blue forward boxes)
  check "$r report screenshot is not blank" nonblank "$tmp/$r.png"
done
s=$(pixels "$tmp/fail.png" '#1f77b4' '#d62728')
check_if $(yes_if awk '{ exit !($6 >= 300 && $8 >= 40 && $10 >= 300 && $12 >= 20) }' <<<"$s") \
  "fail report screenshot is not blank, has the loss curve and the red last-good-step line: $s"
# the checks can fail: an inline script (refused by the policy, and an error if it ran), a blank page
sed 's|</body>|<script>console.error("broken on purpose")</script></body>|' "$tmp/grid.html" >"$tmp/broken.html"
chromium_run dump-dom "$tmp/broken.html" "$tmp/broken.dom"
check_if $(yes_if test -n "$(console "$tmp/broken.dom")") "the console check sees an injected script: $(console "$tmp/broken.dom" | head -1 | cut -c1-160)"
printf '<!DOCTYPE html><html><head><meta charset="utf-8"><title>blank</title></head><body></body></html>\n' \
  >"$tmp/blank.html"
chromium_run screenshot "$tmp/blank.html" "$tmp/blank.png"
check_if $(yes_if test -s "$tmp/blank.png" -a "$(nonblank "$tmp/blank.png" >/dev/null; echo $?)" != 0) \
  "the blank-screenshot check rejects a blank page: $(pixels "$tmp/blank.png")"

# ---- bad input: one line, exit 2 ---------------------------------------------------------------------------------
refused "a missing run directory" "run directory $tmp/nowhere does not exist" "$LLM4D" report "$tmp/nowhere"
refused "a file as the run directory" "is not a directory" "$LLM4D" report "$tmp/grid/out/metrics.jsonl"
mkdir -p "$tmp/empty"
refused "a directory that is not a run's" "holds neither metrics.jsonl nor run.json" "$LLM4D" report "$tmp/empty"
cp -r "$tmp/grid/out" "$tmp/damaged"
sed -i '3s/.*/{"step": 3, "loss": 1.0, oops/' "$tmp/damaged/metrics.jsonl"
refused "a damaged metrics.jsonl line" "metrics.jsonl line 3 is not a step or evaluation record" "$LLM4D" report \
  "$tmp/damaged"
cp -r "$tmp/grid/out" "$tmp/damaged_info"
echo '{"version": ' >"$tmp/damaged_info/run.json"
refused "a damaged run.json" "run.json is not a JSON object" "$LLM4D" report "$tmp/damaged_info"
cp -r "$tmp/grid/trace" "$tmp/damaged_trace"
echo '[1, 2' >"$tmp/damaged_trace/trace.rank1.json"
refused "a damaged trace file" "trace.rank1.json is not Trace Event JSON" "$LLM4D" report "$tmp/grid/out" \
  -o "$tmp/x.html" --trace "$tmp/damaged_trace"
refused "an unknown option" "unknown option '--bogus'" "$LLM4D" report "$tmp/grid/out" --bogus
refused "no run directory" "give the run's output_dir" "$LLM4D" report
refused "--compare without a value" "--compare needs a value" "$LLM4D" report "$tmp/grid/out" --compare
refused "a missing --log_dir" "--log_dir $tmp/nologs is not a directory" "$LLM4D" report "$tmp/grid/out" \
  --log_dir "$tmp/nologs"
refused "an unwritable output" "cannot write $tmp/empty/no/r.html" "$LLM4D" report "$tmp/grid/out" \
  -o "$tmp/empty/no/r.html"
refused "--merge_trace without traces" "the run has no trace files" "$LLM4D" report "$tmp/single/out" \
  --merge_trace "$tmp/m.json"
finish
