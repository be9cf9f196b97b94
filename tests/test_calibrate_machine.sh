#!/usr/bin/env bash
# test_calibrate_machine.sh — a machine calibration (`llm4d plan --calibrate --machine`, issue 46 item 1): kernels
# measured once over a grid of shapes (plan/grid.h), then any model inside the grid priced from it; here a small grid
# (hidden 64 and 768, sequences 32 and 64, fp32, --quick: under a minute on a loaded 2-vCPU VM):
#   (a) the sweep ends, writes a machine profile (calibration.machine_grid, kernel rows at 1 and 2 threads, complete),
#       with its progress lines; a bad --calibrate_grid, or --machine without --calibrate, is one line, exit 2;
#   (b) from that ONE profile, gpt2-tiny at sequences 32 and 64 and gpt2-en at 48 and 64 are all priced (no
#       per-model calibration), while gpt2-en at sequence 256 and gpt2-medium-en (hidden 1024) are refused in one
#       line naming a call outside the grid and the grid's range;
#   (c) the grid's pricing against a direct measurement: a model between the grid's points (hidden 256 with 4 heads
#       of 64, one layer, sequence 48) calibrated on its own (its calls replayed and measured exactly), and its
#       one-process step predicted from both profiles (`plan --evaluate --json`), and per GEMM call the measured time
#       against an interpolation computed here from the grid's rows (log-log in FLOPs between the nearest shapes on
#       either side, as price.h says): each within a factor of 2, after scaling the grid's times by the two
#       calibrations' own GEMM peak at 1 thread (fallback.gemm_gflops_fp32[1], measured at the start of each): the
#       two run a minute apart on a shared 2-vCPU VM whose load average moved between 10 and 27 while this was
#       written, and unscaled the grid's step read 0.085 s against 0.117 s in one run, 0.072 against 0.150 and 0.193
#       against 0.108 in others (the median GEMM 62 % off in the last): a tighter band would test the load.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
test_setup
export OMP_NUM_THREADS=1
M="$tmp/machine.json"
t0=$(date +%s)
"$LLM4D" plan --calibrate --machine --quick --calibrate_grid 64,768:32,64 --model_name_or_path gpt2-tiny \
  --max_seq_len 32 --global_batch_size 2 --ranks_per_node 2 --machine_profile "$M" >"$tmp/a.log" 2>&1
rc=$?
t1=$(date +%s)
info=$(/usr/bin/python3 -c '
import json, sys
try:
    p = json.load(open(sys.argv[1])); c = p.get("calibration", {})
    print(len(p["kernels"]), len(p["collectives"]), int(bool(c.get("complete"))), sorted({r[3] for r in p["kernels"]}) == [1, 2],
          json.dumps(c.get("machine_grid", "")))
except Exception as e: print("bad", e)' "$M")
read -r nk nc done threads grid <<<"$info"
check_if "$(yes_if test $rc = 0 -a "${nk:-bad}" != bad)" "the machine sweep ends (exit $rc, $((t1 - t0)) s): $(tail -1 "$tmp/a.log" | cut -c1-120)"
check_if "$(yes_if test "${done:-0}" = 1 -a "${nk:-0}" -gt 100 -a "${threads:-}" = True)" \
  "its profile is complete, with $nk kernel rows at 1 and 2 threads and $nc collective series"
check_if "$(yes_if test "${grid:-}" = '"hidden 64,768; sequence 32,64"')" "it is a machine profile: calibration.machine_grid $grid"
check_if "$(has "$tmp/a.log" "calibrate --machine: 2 threads, fp32: point .* of 4 (hidden 768, sequence 64)")" \
  "progress lines name the grid point: $(grep -m1 'point' "$tmp/a.log" | cut -c1-120)"
refused "a bad --calibrate_grid" "calibrate_grid needs HIDDENS:SEQUENCES" \
  "$LLM4D" plan --calibrate --calibrate_grid 64,32:32 --machine_profile "$tmp/x.json"
refused "--machine without --calibrate" "go with --calibrate" "$LLM4D" plan --machine --machine_profile "$M"

# ---- (b) one profile, several models ------------------------------------------------------------------------------
ASK=(plan --global_batch_size 2 --ranks_per_node 2 --nodes 1 --top 1 --machine_profile "$M")
for ms in "gpt2-tiny 32" "gpt2-tiny 64" "gpt2-en 48" "gpt2-en 64"; do
  read -r model seq <<<"$ms"
  "$LLM4D" "${ASK[@]}" --model_name_or_path "$model" --max_seq_len "$seq" >"$tmp/b.txt" 2>&1
  check_if "$(yes_if grep -q "s/step" "$tmp/b.txt")" "$model at sequence $seq is priced from the machine profile: $(grep -m1 's/step' "$tmp/b.txt" | cut -c1-80)"
done
refused "gpt2-en at sequence 256 (beyond the grid's 64)" "machine profile $M (a machine calibration over hidden 64,768; sequence 32,64) cannot price gpt2-en .* at sequence 256.*outside the grid's 32..64" \
  "$LLM4D" "${ASK[@]}" --model_name_or_path gpt2-en --max_seq_len 256
refused "gpt2-medium-en (hidden 1024, beyond the grid's 768)" "cannot price gpt2-medium-en (hidden 1024.*outside its grid.*--calibrate --machine --calibrate_grid" \
  "$LLM4D" "${ASK[@]}" --model_name_or_path gpt2-medium-en --max_seq_len 64

# ---- (c) against a direct measurement -----------------------------------------------------------------------------
MID=(--model_name_or_path gpt2-tiny -o Model.hidden_size=256 -o Model.num_layers=1 --max_seq_len 48 --global_batch_size 1)
E="$tmp/exact.json"
"$LLM4D" plan --calibrate --quick "${MID[@]}" --ranks_per_node 1 --machine_profile "$E" >"$tmp/c.log" 2>&1
check_if "$(yes_if test $? = 0)" "the model between the grid's points calibrated on its own: $(tail -1 "$tmp/c.log" | cut -c1-100)"
step() { # step PROFILE: the predicted one-process step
  "$LLM4D" plan --evaluate --json "${MID[@]}" --micro_batch_size 1 --machine_profile "$1" 2>/dev/null |
    /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["step_s"])' 2>/dev/null
}
sg=$(step "$M")
se=$(step "$E")
# the machine's speed at each calibration: its GEMM peak at 1 thread
speed=$(/usr/bin/python3 -c '
import json, sys
g, e = (json.load(open(f))["fallback"]["gemm_gflops_fp32"][1] for f in sys.argv[1:])
print(g / e if g > 0 and e > 0 else 1.0)' "$M" "$E" 2>/dev/null)
check_if "$(/usr/bin/python3 -c "import sys; g, e, k = float('${sg:-nan}'), float('${se:-nan}'), float('${speed:-nan}'); sys.exit(0 if 0.5 <= g * k / e <= 2 else 1)" 2>/dev/null && echo 1 || echo 0)" \
  "its step priced from the grid ${sg:-?} s (x ${speed:-?}, the two calibrations' GEMM peak ratio) against ${se:-?} s from its own measured calls (within a factor of 2)"
per=$(/usr/bin/python3 - "$M" "$E" "${speed:-1}" <<'PY'
import json, math, sys
grid = [r for r in json.load(open(sys.argv[1]))["kernels"] if r[0] == 0 and r[3] == 1 and r[2] == 0]
exact = [r for r in json.load(open(sys.argv[2]))["kernels"] if r[0] == 0 and r[3] == 1 and r[2] == 0]
k = float(sys.argv[3])
flops = lambda r: 2.0 * r[4] * r[5] * r[6]
secs = lambda r: sum(r[12:18])
flags = lambda r: tuple(r[7:12]) + (r[18] if len(r) > 18 else 0, r[1])
def interp(x):
    same = [g for g in grid if flags(g) == flags(x)]
    dist = lambda g: sum(abs(math.log(max(a, 1) / max(b, 1))) for a, b in zip(x[4:7], g[4:7]))
    lo = min((g for g in same if flops(g) <= flops(x)), key=dist, default=None)
    hi = min((g for g in same if flops(g) >= flops(x)), key=dist, default=None)
    if lo is None or hi is None or flops(hi) == flops(lo): return None
    f = math.log(flops(x) / flops(lo)) / math.log(flops(hi) / flops(lo))
    return math.exp(math.log(secs(lo)) * (1 - f) + math.log(secs(hi)) * f)
ratios = sorted(interp(x) * k / secs(x) for x in exact if interp(x))
print(len(ratios), ratios[len(ratios) // 2] if ratios else "nan")
PY
)
read -r ncalls med <<<"$per"
check_if "$(/usr/bin/python3 -c "import sys; sys.exit(0 if int('${ncalls:-0}') >= 2 and 0.5 <= float('${med:-nan}') <= 2 else 1)" 2>/dev/null && echo 1 || echo 0)" \
  "per GEMM: $ncalls measured linear-forward calls against the grid's log-log interpolation (scaled likewise), median ratio ${med:-?} (within a factor of 2)"
finish
