#!/usr/bin/env bash
# test_memory_plan.sh — every rank plans its memory before allocating its model (train/memplan.c):
#   (a) the plan per category equals what the memory arena holds after allocation and at its peak over the run,
#       for one process and for dp2, ZeRO stages 1/2/3 (and stage 3 with offload, saving a checkpoint at the end),
#       mp2 with sequence parallelism, pp2 with ZB-H1, mp2 x pp2, mp2 x pp2 (interleaved) x sharding2 (8 processes)
#       and the 4D dp2 x pp2 x sharding2 stage 3 x mp2 (16), pp2 x sharding2 stage 1 on Open MPI's collectives
#       (whose tied-embedding all-reduce carries a ZeRO rank's part of the gradient only: planned whole, every rank
#       was 5.7-6.7 % above its peak), on every rank; and llama-tiny (RMSNorm, RoPE, SwiGLU's
#       activations and scratch, no biases, an untied head: its own weights, gradients and moments on the last
#       stage and no tied-embedding all-reduce) in one process and pp2;
#   (a2) on every rank of those layouts and of (e)'s, the whole plan (what the process held when it planned, the
#       allocations, the libraries' working set of a step, MPI's and the segments' pages) is within 5 % of the
#       measured peak resident set (gpt2-tiny's small plans missed by 10-14 % without the working set, ZeRO-3 with
#       offload by 30 % with a checkpoint mapping the offloaded states), and `llm4d plan --evaluate` of the same
#       flags plans each rank as the trainer does (its plan_mib_per_rank against the rank's "memory plan: X MiB
#       to allocate", within the 0.01 MiB the log prints: the same function, paths and coordinates);
#   (b) the whole plan (what it allocates plus what the process held when it planned) is within 5 % of the
#       measured peak resident set, at GPT-2 124M (one process, and sharding2 stage 3);
#   (c) gpt3-175b in one process is refused before anything is allocated: one line, exit 2, in under 5 s, with a
#       peak resident set under 200 MB, naming the model states as what to shard or offload; activations that do
#       not fit name micro_batch_size and recompute instead;
#   (d) with the host's available memory set to 3 GiB (--debug_mem_available), GPT-2 124M at dp2 (two whole
#       copies, 1.9 GiB each) is refused while sharding2 stage 3 (under 1 GiB each) starts;
#   (e) the shared-memory collectives' segments are in the plan: every rank of the layouts above and of dp4 and
#       ZeRO-3 over 4 holds as much beyond its plan as the one process does, within 1.5 MiB;
#   (f) offload saves memory: GPT-2 124M, ZeRO-1 over 2 ranks, T=64, two steps and a checkpoint at the end, with and
#       without sharding_offload: each rank's peak resident set falls by at least half of the Adam moments it moves
#       out (2 x 4 bytes x 124,439,808 parameters / 2 ranks, from GPT-2's shapes), and the offloaded run's plan is
#       within 5 % of its peak. (Its checkpoint mapped the whole offloaded state: 1679 MiB with offload against
#       1656 MiB without.)
set -uo pipefail
source "$(dirname "$0")/lib.sh"
test_setup
export OMP_NUM_THREADS=1
TINY=(train --model_name_or_path gpt2-tiny --input_dir "$SRC_DIR/data/fortunes_ids.npz" --max_seq_len 32
      --global_batch_size 8 --max_steps 3 --logging_freq 1 --save_steps -1 -o Model.num_layers=4)
GPT2=(train --model_name_or_path gpt2-en --input_dir "$SRC_DIR/data/fortunes_ids.npz" --max_seq_len 64
      --global_batch_size 2 --micro_batch_size 1 --logging_freq 1 --save_steps -1)

# ---- (a) the plan against the arena -------------------------------------------------------------------------------
layouts=(
  "single        1 --micro_batch_size 8"
  "dp2           2 --micro_batch_size 4 --dp_degree 2"
  "sh2_s1        2 --micro_batch_size 4 --sharding_degree 2 --sharding_stage 1"
  "sh2_s2        2 --micro_batch_size 4 --sharding_degree 2 --sharding_stage 2"
  "sh2_s3        2 --micro_batch_size 4 --sharding_degree 2 --sharding_stage 3"
  "sh2_s3_off    2 --micro_batch_size 4 --sharding_degree 2 --sharding_stage 3 --sharding_offload true --offload_dir $tmp --save_steps 0"
  "mp2_sp        2 --micro_batch_size 8 --mp_degree 2 --sequence_parallel true"
  "pp2_zb        2 --micro_batch_size 2 --pp_degree 2 --pp_schedule ZBH1"
  "mp2_pp2       4 --micro_batch_size 2 --mp_degree 2 --pp_degree 2"
  "mp2_pp2_sh2   8 --micro_batch_size 2 --mp_degree 2 --pp_degree 2 --virtual_pp_degree 2 --sharding_degree 2 --sharding_stage 2"
  "pp2_sh2_mpi   4 --micro_batch_size 2 --pp_degree 2 --sharding_degree 2 --sharding_stage 1 --comm_path mpi"
  "4d            16 --micro_batch_size 1 --dp_degree 2 --pp_degree 2 --sharding_degree 2 --sharding_stage 3 --mp_degree 2"
  "llama_single  1 --micro_batch_size 8 --model_name_or_path llama-tiny"
  "llama_pp2     2 --micro_batch_size 2 --pp_degree 2 --model_name_or_path llama-tiny"
)
for l in "${layouts[@]}"; do
  read -r name np args <<<"$l"
  # shellcheck disable=SC2086
  "$LLM4D" launch --nproc "$np" --log_dir "$tmp/$name" -- "${TINY[@]}" --output_dir "$tmp/$name.out" $args \
    >"$tmp/$name.stdout" 2>&1 || echo "run $name failed: $(tail -2 "$tmp/$name.stdout")"
done
printf '%s\n' "${layouts[@]}" | awk '{print $1, $2}' >"$tmp/layouts"
/usr/bin/python3 - "$tmp" >"$tmp/a.txt" <<'PY'
import re, sys
tmp = sys.argv[1]
cats = ["params", "grads", "optimizer", "activations", "comm", "workspace"]
for line in open(f"{tmp}/layouts"):
    name, np_ = line.split()
    for r in range(int(np_)):
        try:
            log = open(f"{tmp}/{name}/workerlog.{r}").read()
        except OSError:
            print(f"FAIL {name} rank {r}: no log"); continue
        m = re.search(r"memory plan of this rank, before allocating: (.*)", log)
        plan = dict(re.findall(r"(\w+) ([\d.]+) MiB", m.group(1))) if m else {}
        tables = re.findall(r"memory held by this process, by category:\n((?:    .*\n)+)", log)
        peaks = re.findall(r"peak memory of this process over the run, by category:\n((?:    .*\n)+)", log)
        held = dict(re.findall(r"^\s+(\w+)\s+([\d.]+) MiB", tables[0], re.M)) if tables else {}
        peak = dict((k, v) for k, _, v in re.findall(r"^\s+(\w+)\s+([\d.]+) MiB \(peak\s+([\d.]+) MiB\)", peaks[0], re.M)) if peaks else {}
        bad = [c for c in cats if c not in plan or plan.get(c) != held.get(c) or plan.get(c) != peak.get(c)]
        ok = plan and not bad
        print(("ok   " if ok else "FAIL ") + f"{name} rank {r}: plan = held after allocation = peak over the run, per "
              f"category ({', '.join(f'{c} {plan.get(c)}' for c in cats)}){' mismatched: ' + str([(c, plan.get(c), held.get(c), peak.get(c)) for c in bad]) if bad else ''}")
PY
while read -r verdict rest; do
  if [ "$verdict" = ok ]; then ok "$rest"; else bad "$rest"; fi
done <"$tmp/a.txt"

# ---- (b) the whole plan against the peak resident set ----------------------------------------------------------------
# Within 5 %. Under ZeRO the plan of the sharding group's first rank holds Open MPI's reduce-scatter temporaries
# (without them rank 0 read +4.3..+6.7 % at stage 3 and +9.7 % at stage 1; rank 1 +0.8..+1.1 %).
# Under AddressSanitizer (scripts/sanitize.sh) the resident set also holds its shadow memory and the freed blocks it
# quarantines, so the comparison is made by the normal suite only; the checks per category above hold there too.
rss_check() { # name log [bound %]
  local line pct bound=${3:-5}
  line=$(grep -h "memory plan against the run" "$2" | head -1)
  if [ -n "${ASAN_OPTIONS:-}" ]; then
    check_if $(yes_if test -n "$line") "$1: the run ends with the plan against its peak (not compared under ASan): $(echo "$line" | sed 's/.* - //')"
    return
  fi
  pct=$(echo "$line" | sed -n 's/.*(\([-+][0-9.]*\)%).*/\1/p')
  check_if $(yes_if awk -v p="${pct:-100}" -v b="$bound" 'BEGIN{exit !(p <= b && p >= -b)}') \
    "$1 (within $bound %): $(echo "$line" | sed 's/.* - //')"
}
OMP_NUM_THREADS=2 "$LLM4D" "${GPT2[@]}" --max_steps 2 --output_dir "$tmp/g1" >"$tmp/g1.log" 2>&1
rss_check "GPT-2 124M, one process" "$tmp/g1.log"
# bf16: the backend's copies of the weights (outside the arena's categories) are in the plan
OMP_NUM_THREADS=2 "$LLM4D" "${GPT2[@]}" --max_steps 2 --use_amp true --output_dir "$tmp/b1" >"$tmp/b1.log" 2>&1
# es bytes x (12 blocks x 768 x (2304 + 768 + 3072 + 3072) linear weights + the padded 50304 x 768 token
# embedding) per copy: a bf16 operand is 2 bytes on CPUs with AVX512-BF16, a bf16-rounded fp32 (4 bytes) on the
# others; CPUs with AMX keep two copies, the tiles of W and of W^T of llm4d's AMX kernel (src/backend/cpu_amx.h;
# every dimension here is a multiple of 32, so they have no padding)
es=4; grep -qw avx512_bf16 /proc/cpuinfo && es=2
amx=0; grep -qw amx_bf16 /proc/cpuinfo && grep -qw amx_tile /proc/cpuinfo && amx=1
ncopies=$((1 + amx))
copies=$(/usr/bin/python3 -c "print(f'{$ncopies * $es * (12 * 768 * (2304 + 768 + 3072 + 3072) + 50304 * 768) / 2**20:.2f}')")
check_if $(yes_if grep -q "the backend's bf16 copies of the weights $copies MiB" "$tmp/b1.log") \
  "bf16: the plan holds the weights' bf16 copies: $copies MiB ($ncopies x $es bytes per linear and token-embedding weight)"
# and the operands it converts or makes (use_amp keeps activations in bf16: AMP level O2). With AVX512-BF16 the
# GEMMs read the bf16 activations in place, so the two conversion slots hold only what the backend makes: GELU's
# output as c_proj reads it, 64 tokens x 3072 (2 bytes each); plus the bias gradients' partial sums (a double per 64
# elements of the widest activation, 64 tokens x 3072). Without it the operands are bf16-rounded fp32 (4 bytes):
# two slots as large as the largest operand a GEMM reads, here the LM head's logits gradient for a chunk of 64 tokens
# x 50304, and an fp32 slot as large for the results it rounds into bf16 tensors; on AVX2 CPUs (no AVX-512) also
# the 4 MiB block of a transposed weight (input gradients of few tokens, src/backend/cpu.c). On AMX CPUs three
# slots of tiles: two of the largest operand and one of the widest activation (64 x 3072), each with at most 31
# rows and columns of padding (64 tokens, 50304 columns) and a tile's 32 x 32, and the fp32 result slot.
wt=0; [ $es = 4 ] && ! grep -qw avx512bw /proc/cpuinfo && wt=$((4 << 20))
if [ $amx = 1 ]; then
  ops=$(/usr/bin/python3 -c "p = 31 * (64 + 50304) + 1024
print(f'{((2 * (64 * 50304 + p) + 64 * 3072 + p) * 2 + (64 * 3072 // 64 + 1) * 8 + 4 * 64 * 50304) / 2**20:.2f}')")
  what="three slots of tiles and the fp32 result slot"
elif [ $es = 2 ]; then
  ops=$(/usr/bin/python3 -c "print(f'{(2 * 2 * 64 * 3072 + (64 * 3072 // 64 + 1) * 8) / 2**20:.2f}')")
  what="two slots of the widest operand the backend makes (GELU's output)"
else
  ops=$(/usr/bin/python3 -c "print(f'{(3 * 4 * 64 * 50304 + (64 * 3072 // 64 + 1) * 8 + $wt) / 2**20:.2f}')")
  what="two slots of the largest operand and the fp32 result slot"
fi
check_if $(yes_if grep -q "the backend's converted GEMM operands $ops MiB" "$tmp/b1.log") \
  "bf16: the plan holds the backend's converted GEMM operands: $ops MiB ($what)"
rss_check "GPT-2 124M bf16, one process" "$tmp/b1.log"
"$LLM4D" launch --nproc 2 --log_dir "$tmp/g2" -- "${GPT2[@]}" --max_steps 2 --sharding_degree 2 --sharding_stage 3 \
  --output_dir "$tmp/g2.out" >"$tmp/g2.stdout" 2>&1
rss_check "GPT-2 124M, sharding2 stage 3, rank 0" "$tmp/g2/workerlog.0"
rss_check "GPT-2 124M, sharding2 stage 3, rank 1" "$tmp/g2/workerlog.1"
# stage 1: the embedding is one group, so the first rank's reduce-scatter temporary is largest here (147 MiB); with a
# checkpoint at the end, as (f) compares it with offload
"$LLM4D" launch --nproc 2 --log_dir "$tmp/g3" -- "${GPT2[@]}" --max_steps 2 --sharding_degree 2 --sharding_stage 1 \
  --save_steps 0 --output_dir "$tmp/g3.out" >"$tmp/g3.stdout" 2>&1
rss_check "GPT-2 124M, sharding2 stage 1, rank 0" "$tmp/g3/workerlog.0"
rss_check "GPT-2 124M, sharding2 stage 1, rank 1" "$tmp/g3/workerlog.1"

# ---- (c) refused before allocating ---------------------------------------------------------------------------------
/usr/bin/python3 - "$LLM4D" "$SRC_DIR" "$tmp" >"$tmp/c.txt" <<'PY'
import resource, subprocess, sys, time
llm4d, src, tmp = sys.argv[1:4]
t0 = time.time()
p = subprocess.run([llm4d, "train", "--model_name_or_path", "gpt3-175b", "--input_dir", f"{src}/data/fortunes_ids.npz",
                    "--max_seq_len", "1024", "--global_batch_size", "1", "--micro_batch_size", "1", "--max_steps", "10",
                    "--output_dir", f"{tmp}/big"], capture_output=True, text=True)
secs = time.time() - t0
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
lines = p.stderr.strip().splitlines()
ok = (p.returncode == 2 and len(lines) == 1 and "model states" in lines[0] and "sharding_stage 3" in lines[0]
      and secs < 5 and rss < 200)
print(("ok" if ok else "FAIL") + f" gpt3-175b in one process: exit {p.returncode}, {len(lines)} line(s) in {secs:.2f} s, "
      f"peak resident set {rss:.0f} MiB: {p.stderr.strip()}")
PY
read -r verdict rest <"$tmp/c.txt"
if [ "$verdict" = ok ]; then ok "$rest"; else bad "$rest"; fi
refused "activations that do not fit" "lower micro_batch_size or max_seq_len, or set use_recompute" \
  "$LLM4D" "${TINY[@]}" --output_dir "$tmp/act" --micro_batch_size 8 --max_seq_len 256 --debug_mem_available 60000000

# ---- (d) sharding makes it fit --------------------------------------------------------------------------------------
GIB3=$((3 * 1024 * 1024 * 1024))
f0=$fail
t0=$(date +%s.%N)
timeout 120 "$LLM4D" launch --nproc 2 --log_dir "$tmp/d1" -- "${GPT2[@]}" --max_steps 1 --dp_degree 2 \
  --output_dir "$tmp/d1.out" --debug_mem_available $GIB3 >"$tmp/d1.stdout" 2>"$tmp/d1.err"
rc=$?
# (a condition of several commands goes through a function: in $(yes_if A && B) B's verdict was never read, so this
# line's "needs 1.9x GiB" passed against the 2.13 GiB the plan said; the model states, 1.85 GiB, are what is checked)
d1_refused() {
  test $rc = 2 && grep -qE "needs 2\.[0-9]+ GiB more memory per rank \(model states 1\.8[0-9] GiB.* but 1\.50 GiB is \
available to each of the 2 rank\(s\)" "$tmp/d1.err"
}
check_if $(yes_if d1_refused) \
  "3 GiB for 2 ranks: dp2 refused (exit $rc): $(grep '^llm4d: rank' "$tmp/d1.err" | head -1)"
reliability_checked $f0 "bad input (test_memory_plan)" "GPT-2 124M dp2 with 3 GiB for 2 ranks" \
  "$(grep -m1 '^llm4d: rank' "$tmp/d1.err")" "$rc" "$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')" -
timeout 300 "$LLM4D" launch --nproc 2 --log_dir "$tmp/d2" -- "${GPT2[@]}" --max_steps 1 --sharding_degree 2 \
  --sharding_stage 3 --output_dir "$tmp/d2.out" --debug_mem_available $GIB3 >"$tmp/d2.stdout" 2>&1
rc=$?
d2_trains() { test $rc = 0 && grep -q "global step 1," "$tmp/d2/workerlog.0"; }
check_if $(yes_if d2_trains) \
  "3 GiB for 2 ranks: sharding2 stage 3 fits and trains (exit $rc): $(grep -h 'memory plan:' "$tmp/d2/workerlog.0" | sed 's/.* - //')"
# ---- (e) the shared-memory segments ----------------------------------------------------------------------------------
# Under the default comm_path the ranks of a host collect through shared segments, of which a rank holds the pages its
# collectives touch (comm/shm_footprint.c); the plan counts them. The oracle: what a process holds beyond its plan
# (peak resident set minus the whole plan) is the same whatever the layout, so every rank's residue must equal the
# one-process run's, which has no segment, within 1.5 MiB. Without the segments in the plan a 2-rank layout's residue
# grew by 4 MiB and a 4-rank one's by 5-8 MiB.
# (Not on Open MPI's collectives: libnbc's reduce-scatter temporaries, which the plan counts on the inner ranks of its
# binomial tree, move between identical runs of ZeRO-2 over 4: rank 0 +8 MiB in 1 run of 8, rank 2 +4 MiB in 2.)
for l in "dp4 4 --micro_batch_size 2 --dp_degree 4" "sh4_s3 4 --micro_batch_size 2 --sharding_degree 4 --sharding_stage 3"; do
  read -r name np args <<<"$l"
  # shellcheck disable=SC2086
  "$LLM4D" launch --nproc "$np" --log_dir "$tmp/$name" -- "${TINY[@]}" --output_dir "$tmp/$name.out" $args \
    >"$tmp/$name.stdout" 2>&1 || echo "run $name failed: $(tail -2 "$tmp/$name.stdout")"
done
if [ -z "${ASAN_OPTIONS:-}" ]; then
  /usr/bin/python3 - "$tmp" >"$tmp/e.txt" <<'PY'
import re, sys
tmp = sys.argv[1]
def residues(name, n):
    out = []
    for r in range(n):
        try:
            log = open(f"{tmp}/{name}/workerlog.{r}").read()
        except OSError:
            out.append((None, None)); continue
        m = re.search(r"memory plan against the run: planned ([\d.]+) MiB, peak resident set ([\d.]+) MiB", log)
        seg = re.search(r"the collectives' shared-memory segments ([\d.]+) MiB", log)
        out.append((float(m.group(2)) - float(m.group(1)) if m else None, float(seg.group(1)) if seg else 0.0))
    return out
ref = residues("single", 1)[0][0]
if ref is None:
    print("FAIL the one-process run reports no plan against its peak"); sys.exit()
for name, n in [("dp2", 2), ("sh2_s1", 2), ("sh2_s3", 2), ("pp2_zb", 2), ("mp2_sp", 2), ("dp4", 4), ("sh4_s3", 4)]:
    for r, (res, seg) in enumerate(residues(name, n)):
        if res is None:
            print(f"FAIL {name} rank {r}: no plan against the peak in its log"); continue
        ok = abs(res - ref) <= 1.5 and (seg > 0 or name.startswith("mp2"))
        print(("ok   " if ok else "FAIL ") + f"{name} rank {r}: peak - plan {res:.2f} MiB against the one process's "
              f"{ref:.2f} (within 1.5), segments in the plan {seg:.2f} MiB")
PY
  while read -r verdict rest; do
    if [ "$verdict" = ok ]; then ok "$rest"; else bad "$rest"; fi
  done <"$tmp/e.txt"
fi

# ---- (a2) every rank's whole plan against its peak, and against `llm4d plan --evaluate` ------------------------------
# The planner's plan of a rank is a function of the flags alone: a profile that says only the cores and the memory
# is enough for it (the profile's base, residue and timings are not in the plan).
echo '{"llm4d_machine_profile": 1, "cores": 2, "memory_bytes": 8589934592}' >"$tmp/profile.json"
printf '%s\n' "dp4 4 --micro_batch_size 2 --dp_degree 4" "sh4_s3 4 --micro_batch_size 2 --sharding_degree 4 --sharding_stage 3" |
  cat - <(printf '%s\n' "${layouts[@]}") >"$tmp/all_layouts"
while read -r name np args; do
  # shellcheck disable=SC2086
  "$LLM4D" plan --evaluate --json --machine_profile "$tmp/profile.json" "${TINY[@]:1}" --output_dir "$tmp/$name.out" \
    $args >"$tmp/$name.eval.json" 2>"$tmp/$name.eval.err" </dev/null
done <"$tmp/all_layouts"
ASAN=${ASAN_OPTIONS:+1} /usr/bin/python3 - "$tmp" >"$tmp/a2.txt" <<'PY'
import json, os, re, sys
tmp = sys.argv[1]
asan = os.environ.get("ASAN")
for line in open(f"{tmp}/all_layouts"):
    name, np_ = line.split()[:2]
    try:
        ev = json.load(open(f"{tmp}/{name}.eval.json")).get("plan_mib_per_rank")
    except Exception:
        ev = None
    for r in range(int(np_)):
        try:
            log = open(f"{tmp}/{name}/workerlog.{r}").read()
        except OSError:
            print(f"FAIL {name} rank {r}: no log"); continue
        m = re.search(r"memory plan against the run: planned ([\d.]+) MiB, peak resident set ([\d.]+) MiB", log)
        if not m:
            print(f"FAIL {name} rank {r}: the run reports no plan against its peak")
        elif asan:
            print(f"ok   {name} rank {r}: the run reports its plan against its peak (not compared under ASan)")
        else:
            plan, peak = float(m.group(1)), float(m.group(2))
            err = 100 * (peak - plan) / plan
            print(("ok   " if abs(err) <= 5 else "FAIL ") + f"{name} rank {r}: planned {plan:.2f} MiB, peak resident "
                  f"set {peak:.2f} MiB ({err:+.1f} %, bound 5 %)")
        a = re.search(r"memory plan: ([\d.]+) MiB to allocate", log)
        if not a or not ev or len(ev) <= r:
            why = open(f"{tmp}/{name}.eval.err").read().strip()[:200] if not ev else "no plan line in the log"
            print(f"FAIL {name} rank {r}: no plan of the rank from both the run and plan --evaluate ({why})"); continue
        ok = abs(float(a.group(1)) - ev[r]) <= 0.01
        print(("ok   " if ok else "FAIL ") + f"{name} rank {r}: the trainer plans {float(a.group(1)):.2f} MiB to "
              f"allocate, plan --evaluate {ev[r]:.2f} MiB")
PY
while read -r verdict rest; do
  if [ "$verdict" = ok ]; then ok "$rest"; else bad "$rest"; fi
done <"$tmp/a2.txt"

# ---- (f) offload saves memory ----------------------------------------------------------------------------------------
"$LLM4D" launch --nproc 2 --log_dir "$tmp/g3off" -- "${GPT2[@]}" --max_steps 2 --sharding_degree 2 --sharding_stage 1 \
  --save_steps 0 --sharding_offload true --offload_dir "$tmp" --output_dir "$tmp/g3off.out" >"$tmp/g3off.stdout" 2>&1
rss_check "GPT-2 124M, sharding2 stage 1 with offload, rank 0" "$tmp/g3off/workerlog.0"
rss_check "GPT-2 124M, sharding2 stage 1 with offload, rank 1" "$tmp/g3off/workerlog.1"
# falls WITHOUT WITH MOMENTS SAVES: the peak falls by half the moments or more, and both runs saved
falls() { awk -v a="$1" -v b="$2" -v m="$3" 'BEGIN{exit !(a - b >= m / 2)}' && test "$4" = 2; }
peak_of() { grep -h "peak resident set size" "$1" | sed 's/.*peak resident set size: \([0-9.]*\) MiB.*/\1/'; }
moments=$(/usr/bin/python3 -c "V, P, C, L = 50257, 1024, 768, 12
n = V * C + P * C + L * (12 * C * C + 13 * C) + 2 * C   # GPT-2 124M: 124,439,808 parameters
print(f'{2 * 4 * n / 2 / 2**20:.2f}')")
for r in 0 1; do
  without=$(peak_of "$tmp/g3/workerlog.$r") with=$(peak_of "$tmp/g3off/workerlog.$r")
  saved=$(cat "$tmp/g3/workerlog.$r" "$tmp/g3off/workerlog.$r" | grep -c "saved checkpoint")
  if [ -n "${ASAN_OPTIONS:-}" ]; then
    check_if $(yes_if test -n "$with" -a "$saved" = 2) "offload, rank $r: both runs end and save (not compared under ASan)"
    continue
  fi
  drop=$(awk -v a="${without:-0}" -v b="${with:-0}" 'BEGIN{printf "%.1f", a - b}')
  check_if $(yes_if falls "${without:-0}" "${with:-1e9}" "$moments" "$saved") \
    "offload, rank $r: peak resident set ${without:-?} MiB without, ${with:-?} MiB with: $drop MiB less, at least half \
of the $moments MiB of moments moved out (both runs saved a checkpoint: $saved of 2)"
done

finish
