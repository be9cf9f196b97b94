#!/usr/bin/env bash
# test_plan.sh — `llm4d plan` (issue 28) checked against runs of the layouts it predicts:
#   (a) a quick calibration of this machine for gpt2-tiny (4 layers) writes a machine profile, on the default
#       comm_path (auto: shared-memory collectives on one host) and on Open MPI's (mpi);
#   (b) memory: for one process, dp2, ZeRO-3 over 2, mp2 with sequence parallelism and pp2 with ZB-H1 (auto), and
#       dp2 and pp2 with ZB-H1 on mpi,
#       `llm4d plan --evaluate --json` with exactly the flags of the `llm4d train` command predicts every rank's peak;
#       the oracle is the peak resident set each rank of a real run of those flags reports (getrusage; the higher of
#       two runs for the layouts of 2 processes, whose readings move by a few per cent between runs), within 5 %
#       (under AddressSanitizer, scripts/sanitize.sh, the resident set holds its shadow memory: not compared);
#       and the trainer's own memory plan of each rank ("memory plan against the run": the libraries' working set
#       and, on mpi, Open MPI's all-reduce temporaries in it) within 5 % of that rank's peak in each run;
#   (c) time: the search over 2 processes picks a layout; a real run of its flags measures seconds per step (the
#       trainer's avg_batch_cost over its last steps); the prediction must be within a factor of 1.5 of it (the
#       issue's 10 % target is for bench/bench_plan.sh on a quiet machine). When the 1-minute load is above half
#       the cores before the run, other jobs share the cores and the comparison is printed as skipped, not passed;
#   (d) bad inputs (hosts, --top, a missing or garbled profile, node counts that do not make the layout, a missing
#       profile named to `llm4d train`) are one line and exit 2;
#   (e) the trainer's own lines: a run given the profile logs the prediction for its layout at start-up (the same
#       seconds per step and, within 1 %, the same peak as `plan --evaluate --json` of its flags) and at the end the
#       measured step against it; the oracle for that error is computed here from the run's metrics.jsonl (median
#       batch_cost of the steps after the first) and the evaluate's step_s, and the memory error from the run's
#       reported peak resident set; a run with no profile (an empty HOME) logs no prediction;
#   (f) a host given more ranks than cores: the calibration's job at that many ranks measures what a blocking
#       all-reduce in pairs costs a computing rank (the profile's pair_waits), and the planner prices the
#       tensor-parallel waits of a layout there from it: an mp2 layout's step grows with it, in proportion (the
#       figure set to 0, 1 and 2 ms in copies of the profile), and a profile without it prices the waits from
#       wait_cpu_s.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
test_setup
export OMP_NUM_THREADS=1
PROF="$tmp/machine.json"
# The default comm_path (auto: the ranks of a host collect through shared-memory segments, which the memory plan
# counts) for everything; the memory part (b) is also run on Open MPI's collectives (comm_path mpi, calibrated on
# them) for the layouts whose library temporaries differ most
BASE=(--model_name_or_path gpt2-tiny --input_dir "$SRC_DIR/data/fortunes_ids.npz" --max_seq_len 32 -o Model.num_layers=4)
MODEL=("${BASE[@]}" --comm_path auto)
RUN=(--max_steps 3 --logging_freq 1 --save_steps -1 --output_dir "$tmp/out")

# ---- (a) calibration -----------------------------------------------------------------------------------------------
for cp in auto mpi; do
  "$LLM4D" plan --calibrate --quick "${BASE[@]}" --comm_path $cp --global_batch_size 8 --ranks_per_node 2 \
    --machine_profile "$tmp/machine_$cp.json" >"$tmp/cal_$cp.txt" 2>&1
  check "calibration ($cp) writes a machine profile ($(tail -1 "$tmp/cal_$cp.txt"))" test -s "$tmp/machine_$cp.json"
done
cp "$tmp/machine_auto.json" "$PROF"

# ---- (b) memory against the peak resident set of real runs -----------------------------------------------------------
layouts=(
  "single      auto 1 --global_batch_size 4 --micro_batch_size 4"
  "dp2         auto 2 --global_batch_size 8 --micro_batch_size 4 --dp_degree 2"
  "sh2_s3      auto 2 --global_batch_size 8 --micro_batch_size 4 --sharding_degree 2 --sharding_stage 3"
  "mp2_sp      auto 2 --global_batch_size 8 --micro_batch_size 8 --mp_degree 2 --sequence_parallel true"
  "pp2_zb      auto 2 --global_batch_size 8 --micro_batch_size 2 --pp_degree 2 --pp_schedule ZBH1"
  "dp2_mpi     mpi  2 --global_batch_size 8 --micro_batch_size 4 --dp_degree 2"
  "pp2_zb_mpi  mpi  2 --global_batch_size 8 --micro_batch_size 2 --pp_degree 2 --pp_schedule ZBH1"
)
for l in "${layouts[@]}"; do
  read -r name cp np args <<<"$l"
  # shellcheck disable=SC2086
  flags=("${BASE[@]}" --comm_path "$cp" "${RUN[@]}" $args)
  "$LLM4D" plan --evaluate --json --machine_profile "$tmp/machine_$cp.json" "${flags[@]}" >"$tmp/$name.json" \
    2>"$tmp/$name.err"
  if [ "$np" = 1 ]; then
    "$LLM4D" train "${flags[@]}" >"$tmp/$name.log" 2>&1
    cp "$tmp/$name.log" "$tmp/$name.rank0"
  else
    # twice: a rank's peak resident set moves between identical runs (ZeRO-3's rank 0 read 91.4 to 95.8 MiB), and
    # the peak of a layout is the higher reading; both runs' logs go to the verdict
    for run in 1 2; do
      "$LLM4D" launch --nproc "$np" --log_dir "$tmp/$name.$run" -- train "${flags[@]}" >"$tmp/$name.log" 2>&1
      for ((r = 0; r < np; r++)); do cat "$tmp/$name.$run/workerlog.$r" >>"$tmp/$name.rank$r" 2>/dev/null; done
    done
  fi
  /usr/bin/python3 - "$tmp" "$name" "$np" >"$tmp/$name.verdict" <<'PY'
import json, os, re, sys
tmp, name, np_ = sys.argv[1], sys.argv[2], int(sys.argv[3])
try:
    pred = json.load(open(f"{tmp}/{name}.json"))["peak_mib_per_rank"]
except Exception as e:
    print(f"FAIL {name}: no prediction ({open(f'{tmp}/{name}.err').read().strip()[:200]})"); sys.exit()
if len(pred) != np_:
    print(f"FAIL {name}: {len(pred)} ranks predicted, the run has {np_}"); sys.exit()
for r in range(np_):
    try:
        m = re.findall(r"peak resident set size: ([\d.]+) MiB", open(f"{tmp}/{name}.rank{r}").read())
    except OSError:
        m = []
    if not m:
        print(f"FAIL {name} rank {r}: the run reports no peak resident set"); continue
    meas = max(map(float, m)); err = 100 * (pred[r] - meas) / meas
    own = re.findall(r"memory plan against the run: planned ([\d.]+) MiB, peak resident set ([\d.]+) MiB",
                     open(f"{tmp}/{name}.rank{r}").read())
    if os.environ.get("ASAN_OPTIONS"):  # the resident set also holds ASan's shadow and quarantine
        print(f"ok   {name} rank {r}: predicted {pred[r]:.1f} MiB, the run reports a peak (not compared under ASan)")
        continue
    print(("ok   " if abs(err) <= 5 else "FAIL ") +
          f"{name} rank {r}: predicted peak {pred[r]:.1f} MiB, measured peak RSS {meas:.1f} MiB ({err:+.1f} %, bound 5 %)")
    errs = [100 * (float(y) - float(x)) / float(x) for x, y in own]
    print(("ok   " if errs and all(abs(e) <= 5 for e in errs) else "FAIL ") + f"{name} rank {r}: the trainer's plan "
          f"against its peak in {len(errs)} run(s): {', '.join(f'{e:+.1f} %' for e in errs) or 'none logged'} (bound 5 %)")
PY
  while read -r verdict rest; do
    if [ "$verdict" = ok ]; then ok "$rest"; else bad "$rest"; fi
  done <"$tmp/$name.verdict"
done

# ---- (c) the search's first choice against a measured run ------------------------------------------------------------
"$LLM4D" plan --json --machine_profile "$PROF" "${MODEL[@]}" --global_batch_size 8 --ranks_per_node 2 --top 1 \
  >"$tmp/search.json" 2>"$tmp/search.err"
choice=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["layouts"][0]["flags"])' \
  "$tmp/search.json" 2>/dev/null)
step_s=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["layouts"][0]["step_s"])' \
  "$tmp/search.json" 2>/dev/null || echo 0)
world=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["layouts"][0]["world"])' "$tmp/search.json" 2>/dev/null || echo 0)
check_if $(yes_if test "$world" = 2) "the search over 2 processes names a layout of 2 ($choice: $step_s s per step predicted)"
if [ "$world" = 2 ]; then
  load0=$(cut -d' ' -f1 /proc/loadavg)
  # shellcheck disable=SC2086
  "$LLM4D" launch --nproc 2 --log_dir "$tmp/choice" -- train "${MODEL[@]}" --max_steps 16 --logging_freq 5 \
    --save_steps -1 --output_dir "$tmp/out" $choice >"$tmp/choice.log" 2>&1
  meas=$(grep -h "avg_batch_cost" "$tmp/choice/workerlog.0" | tail -2 | sed 's/.*avg_batch_cost: \([0-9.]*\) sec.*/\1/' |
         awk '{s+=$1; n++} END {if (n) printf "%.4f", s/n; else print 0}')
  ratio=$(awk -v p="$step_s" -v m="$meas" 'BEGIN {if (m > 0) printf "%.3f", p/m; else print 0}')
  what="first choice: predicted $step_s s per step, measured $meas s (steps 6-15; predicted/measured $ratio, bound 1.5x; load $load0 before, $(cut -d' ' -f1 /proc/loadavg) after)"
  if [ -z "${ASAN_OPTIONS:-}" ] && awk -v l="$load0" -v c="$(nproc)" 'BEGIN {exit !(l <= 0.5 * c)}'; then
    check_if $(awk -v r="$ratio" 'BEGIN {print (r >= 1/1.5 && r <= 1.5) ? 1 : 0}') "$what"
  else # other jobs on the cores: a time measured now says nothing of the planner (the calibration measured them too)
    echo "skip $what: the machine is busy (load above half its cores)"
  fi
fi

# ---- (d) bad inputs --------------------------------------------------------------------------------------------------
echo '{"llm4d_machine_profile": 1, "cores": "many"' >"$tmp/garbled.json"
refused "no hosts" "--nodes" "$LLM4D" plan --machine_profile "$PROF" "${MODEL[@]}" --global_batch_size 8 --nodes 0
refused "no layouts printed" "--top" "$LLM4D" plan --machine_profile "$PROF" "${MODEL[@]}" --global_batch_size 8 --top 0
refused "a missing profile" "calibrate" "$LLM4D" plan --machine_profile "$tmp/none.json" "${MODEL[@]}" --global_batch_size 8
refused "a garbled profile" "garbled.json" "$LLM4D" plan --machine_profile "$tmp/garbled.json" "${MODEL[@]}" \
  --global_batch_size 8
refused "processes that do not make the layout" "ranks_per_node" "$LLM4D" plan --evaluate --machine_profile "$PROF" \
  "${MODEL[@]}" --global_batch_size 8 --dp_degree 2 --ranks_per_node 3
refused "no layout fits the hosts' memory" "memory_per_node" "$LLM4D" plan --machine_profile "$PROF" "${MODEL[@]}" \
  --global_batch_size 8 --ranks_per_node 2 --memory_per_node 0.05
refused "an unknown option" "--no_such_flag" "$LLM4D" plan --machine_profile "$PROF" "${MODEL[@]}" --no_such_flag 1
refused "a missing profile named to train" "calibrate" "$LLM4D" train "${MODEL[@]}" "${RUN[@]}" \
  --global_batch_size 4 --micro_batch_size 4 --machine_profile "$tmp/none.json"

# ---- (e) the trainer's prediction of its own run, and its error ----------------------------------------------------
TRAIN=("${MODEL[@]}" --max_steps 8 --logging_freq 4 --save_steps -1 --output_dir "$tmp/own" --global_batch_size 4
       --micro_batch_size 4)
"$LLM4D" plan --evaluate --json --machine_profile "$PROF" "${TRAIN[@]}" >"$tmp/own.json" 2>"$tmp/own.err"
"$LLM4D" train "${TRAIN[@]}" --machine_profile "$PROF" >"$tmp/own.log" 2>&1
/usr/bin/python3 - "$tmp" >"$tmp/own.verdict" <<'PY'
import json, re, sys
tmp = sys.argv[1]
log = open(f"{tmp}/own.log").read()
try:
    ev = json.load(open(f"{tmp}/own.json"))
except Exception:
    print(f"FAIL no prediction from plan --evaluate: {open(f'{tmp}/own.err').read().strip()[:200]}"); sys.exit()
start = re.search(r"plan prediction for this layout .*?: ([\d.]+) s per step, (\d+) tokens/s, peak ([\d.]+) MiB on this "
                  r"rank", log)
end = re.search(r"plan prediction against the run: ([\d.]+) s per step measured \(median of (\d+) steps after the "
                r"first\), ([\d.]+) s predicted \(error ([-+][\d.]+) %\); peak resident set ([\d.]+) MiB, predicted "
                r"([\d.]+) MiB \(error ([-+][\d.]+) %", log)
if not start or not end:
    print(f"FAIL the run logs {'no' if not start else 'a'} start-up prediction and {'no' if not end else 'an'} "
          "end-of-run error"); sys.exit()
step_s, peak = ev["step_s"], ev["peak_mib_per_rank"][0]
ok = abs(float(start[1]) - step_s) <= 0.00006 and abs(float(start[3]) - peak) <= 0.01 * peak
print(("ok   " if ok else "FAIL ") + f"start-up: {start[1]} s per step, peak {start[3]} MiB; plan --evaluate: "
      f"{step_s:.5f} s, {peak:.1f} MiB")
costs = sorted(json.loads(l)["batch_cost"] for l in open(f"{tmp}/own/metrics.jsonl") if json.loads(l)["step"] > 1)
n = len(costs)
med = costs[n // 2] if n % 2 else (costs[n // 2 - 1] + costs[n // 2]) / 2
want = 100 * (med - step_s) / step_s
ok = int(end[2]) == n and abs(float(end[4]) - want) <= 0.06 and abs(float(end[1]) - med) <= 0.00006
print(("ok   " if ok else "FAIL ") + f"end of run: error {end[4]} % logged; from metrics.jsonl's median batch_cost of "
      f"{n} steps ({med:.5f} s) and plan --evaluate's step_s: {want:+.2f} %")
rss = re.findall(r"peak resident set size: ([\d.]+) MiB", log)
pm = float(start[3])
want = 100 * (float(rss[-1]) - pm) / pm if rss else float("nan")
ok = bool(rss) and abs(float(end[7]) - want) <= 0.06 + 100 * 0.06 / pm  # the start-up's peak is printed to 0.1 MiB
print(("ok   " if ok else "FAIL ") + f"end of run: memory error {end[7]} % logged; from the reported peak resident set "
      f"{rss[-1] if rss else '?'} MiB and the start-up's {pm} MiB: {want:+.2f} %")
PY
while read -r verdict rest; do
  if [ "$verdict" = ok ]; then ok "$rest"; else bad "$rest"; fi
done <"$tmp/own.verdict"
mkdir -p "$tmp/home"
HOME="$tmp/home" "$LLM4D" train "${TRAIN[@]}" >"$tmp/none.log" 2>&1
check "a run with no machine profile logs no prediction" test "$(grep -c "plan prediction" "$tmp/none.log")" = 0

# ---- (f) an oversubscribed host: the pair waits measured and priced -------------------------------------------------
# ranks per host: twice the cores (nproc would count OMP_NUM_THREADS), at least 4; a host of more than 16 cores
# would start more than 32 processes for it, and says so instead
R=$((2 * $(getconf _NPROCESSORS_ONLN)))
[ $R -lt 4 ] && R=4
if [ $R -gt 32 ]; then
  echo "skip (f): this host has $((R / 2)) cores; oversubscribing it takes more than 32 processes"
  finish
fi
SMALL=(--model_name_or_path gpt2-tiny --input_dir "$SRC_DIR/data/fortunes_ids.npz" --max_seq_len 32 -o Model.num_layers=2
       --comm_path auto --global_batch_size 16)
"$LLM4D" plan --calibrate --quick "${SMALL[@]}" --ranks_per_node $R --machine_profile "$tmp/over.json" \
  >"$tmp/cal_over.txt" 2>&1
LAY=(--dp_degree $((R / 2)) --mp_degree 2 --micro_batch_size 2 --ranks_per_node $R)
/usr/bin/python3 - "$tmp" "$R" <<'PY' >"$tmp/over.verdict"
import json, math, sys
tmp, R = sys.argv[1], int(sys.argv[2])
p = json.load(open(f"{tmp}/over.json"))
w = [x for x in p.get("pair_waits", []) if x["ranks"] == R]
ok = len(w) == 1 and math.isfinite(w[0]["cpu_s"]) and 0 <= w[0]["cpu_s"] < 0.1
print(("ok   " if ok else "FAIL ") + f"the calibration of {R} ranks on {p.get('cores')} cores measured a pair wait: {w}")
for v in (0, 1e-3, 2e-3):
    for x in p["pair_waits"]: x["cpu_s"] = v
    json.dump(p, open(f"{tmp}/over_{v}.json", "w"))
del p["pair_waits"]
json.dump(p, open(f"{tmp}/over_none.json", "w"))
PY
for v in 0 0.001 0.002 none; do
  "$LLM4D" plan --evaluate --json "${SMALL[@]}" "${LAY[@]}" --machine_profile "$tmp/over_$v.json" >"$tmp/ev_$v.json" \
    2>"$tmp/ev_$v.err" || echo "FAIL plan --evaluate with the pair wait $v: $(head -c 300 "$tmp/ev_$v.err")" >>"$tmp/over.verdict"
done
/usr/bin/python3 - "$tmp" <<'PY' >>"$tmp/over.verdict"
import json, sys
tmp = sys.argv[1]
s = {v: json.load(open(f"{tmp}/ev_{v}.json"))["step_s"] for v in ("0", "0.001", "0.002", "none")}
d1, d2 = s["0.001"] - s["0"], s["0.002"] - s["0"]
ok = d1 > 0 and abs(d2 - 2 * d1) <= 0.01 * d2
print(("ok   " if ok else "FAIL ") + f"mp2 on the oversubscribed host: {s['0']:.4f} s a step with pair waits of 0, "
      f"{s['0.001']:.4f} s with 1 ms, {s['0.002']:.4f} s with 2 ms (the growth in proportion)")
ok = s["none"] > s["0"]
print(("ok   " if ok else "FAIL ") + f"without pair waits the profile's wait_cpu_s prices them: {s['none']:.4f} s")
PY
while read -r verdict rest; do
  if [ "$verdict" = ok ]; then ok "$rest"; else bad "$rest"; fi
done <"$tmp/over.verdict"
finish
