#!/usr/bin/env bash
# Tensor parallelism (mp_degree) with and without sequence parallelism, alone and with data parallel and sharding,
# against one process: 20 steps of gpt2-tiny (4 heads, hidden 64, ffn 256), global batch 8, dropout on.
# Checks per layout:
#   - the loss curve equals the single-process one within 1e-5 (bf16: the single-process bf16 curve within 1e-3);
#   - every step, the entries replicated over the tensor group hash identically on its ranks, and ranks holding the
#     same slice (data replicas) hash identically over everything they hold;
#   - the parameter bytes of rank 0 (the memory arena's params category) equal split tensors / M + replicated ones,
#     computed here from the geometry (/ N again at stage 3);
#   - the activation bytes: computed here per layout; with sequence parallelism the LayerNorm/dropout regions
#     (residual streams, LayerNorm outputs and statistics, the head's d ln_f) fall by M;
#   - the elements each rank sends per step (one micro-batch, tensor parallelism alone) equal the formula: per layer
#     4 all-reduces of B x T x C, or 6 all-gathers + 4 reduce-scatters with sequence parallelism, plus the
#     embedding, the head's statistics and d ln_f, and the sequence-parallel partial gradients.
# Then a checkpoint written at mp2 x sharding2 stage 3 (step 10) resumes at mp1, mp4 and in one process and
# continues with the single-process losses of steps 11..20; and bad degrees are refused with one line, exit 2.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
test_setup
export OMP_NUM_THREADS=1
COMMON=(--model_name_or_path gpt2-tiny --input_dir "$SRC_DIR/data/fortunes_ids.npz" --max_seq_len 32
        --global_batch_size 8 --max_steps 20 --max_lr 1e-3 --min_lr 1e-4 --warmup_rate 0.1 --decay_steps 20
        --grad_clip 1.0 --logging_freq 1 --seed 7 -o Model.hidden_dropout_prob=0.1
        -o Model.attention_probs_dropout_prob=0.1 --debug_check_replicas)
single() { # name extra args...
  local name=$1; shift
  "$LLM4D" train "${COMMON[@]}" --micro_batch_size 8 --output_dir "$tmp/$name/out" "$@" >"$tmp/$name.log" 2>&1 ||
    { echo "FAIL single process run $name"; tail -3 "$tmp/$name.log"; }
}
single single --save_steps 10
single single_bf16 --use_amp true --amp_dtype bfloat16 --save_steps -1
layouts=(
  # name          np mp dp sh stage sp    micro extra
  "mp2            2  2  1  1  1     False 8     -"
  "mp2_sp         2  2  1  1  1     True  8     -"
  "mp4            4  4  1  1  1     False 8     -"
  "mp4_sp         4  4  1  1  1     True  8     -"
  "mp2_acc2       2  2  1  1  1     False 4     -"
  "mp2_sp_rc      2  2  1  1  1     True  4     --use_recompute=true"
  "mp2_sp_core    2  2  1  1  1     True  4     --use_recompute=true,-o,Model.recompute_granularity=core_attn"
  "mp2_bf16       2  2  1  1  1     True  8     --use_amp=true,--amp_dtype=bfloat16"
  "mp2_dp2        4  2  2  1  1     False 4     -"
  "mp2_sh2_s1     4  2  1  2  1     False 4     -"
  "mp2_sh2_s2     4  2  1  2  2     True  4     -"
  "mp2_sh2_s3     4  2  1  2  3     False 4     -"
  "mp2_sp_sh2_s3  4  2  1  2  3     True  4     -"
  "mp2_sh4        8  2  1  4  2     False 2     -"
  "mp2_dp2_sh2    8  2  2  2  2     True  2     -"
)
for l in "${layouts[@]}"; do
  set -- $l
  extra=()
  [ "$9" != - ] && IFS=, read -ra extra <<<"$9"
  "$LLM4D" launch --nproc "$2" --log_dir "$tmp/$1/log" -- train "${COMMON[@]}" --mp_degree "$3" --dp_degree "$4" \
    --sharding_degree "$5" --sharding_stage "$6" --sequence_parallel "$7" --micro_batch_size "$8" \
    --save_steps "$([ "$1" = mp2_sh2_s3 ] && echo 10 || echo -1)" "${extra[@]}" --output_dir "$tmp/$1/out" \
    >"$tmp/$1.stdout" 2>&1 || { echo "run $1 failed:"; tail -5 "$tmp/$1.stdout"; }
done
printf '%s\n' "${layouts[@]}" >"$tmp/layouts"

# the step-10 checkpoint of mp2 x sharding2 stage 3 resumed in other layouts (steps 11..20)
ck="$tmp/mp2_sh2_s3/out/step_10"
"$LLM4D" launch --nproc 1 --log_dir "$tmp/resume_mp1/log" -- train "${COMMON[@]}" --resume "$ck" --save_steps -1 \
  --micro_batch_size 8 --output_dir "$tmp/resume_mp1/out" >"$tmp/resume_mp1.stdout" 2>&1 ||
  tail -5 "$tmp/resume_mp1.stdout"
"$LLM4D" launch --nproc 4 --log_dir "$tmp/resume_mp4/log" -- train "${COMMON[@]}" --resume "$ck" --save_steps -1 \
  --mp_degree 4 --sequence_parallel true --micro_batch_size 8 --output_dir "$tmp/resume_mp4/out" \
  >"$tmp/resume_mp4.stdout" 2>&1 || tail -5 "$tmp/resume_mp4.stdout"
"$LLM4D" train "${COMMON[@]}" --resume "$ck" --save_steps -1 --micro_batch_size 4 \
  --output_dir "$tmp/resume_single/out" >"$tmp/resume_single.stdout" 2>&1 || tail -5 "$tmp/resume_single.stdout"

# bad input: one clear line each, exit 2
bad_input() { # name word nproc args...
  local name=$1 word=$2 np=$3; shift 3
  timeout 60 "$LLM4D" launch --nproc "$np" --log_dir "$tmp/bad_$np" -- train "${COMMON[@]}" --micro_batch_size 8 \
    --save_steps -1 --output_dir "$tmp/bad" "$@" >"$tmp/bo" 2>"$tmp/be"
  local rc=$?
  if [ $rc = 2 ] && grep -q -- "$word" "$tmp/be" && [ "$(grep -c . "$tmp/be")" = 1 ]; then
    ok "$name: $(cat "$tmp/be")"
  else bad "$name: exit $rc: $(cat "$tmp/be")"; fi
}
bad_input "heads not divisible by mp_degree" "num_attention_heads 4 is not divisible by mp_degree 3" 3 --mp_degree 3
bad_input "ffn_hidden_size not divisible" "ffn_hidden_size 250 is not divisible by mp_degree 4" 4 --mp_degree 4 \
  -o Model.ffn_hidden_size=250
bad_input "sequence length not divisible (sequence parallel)" "max_seq_len 30 is not divisible by mp_degree 4" 4 \
  --mp_degree 4 --sequence_parallel true --max_seq_len 30
bad_input "degrees not multiplying to the processes" "mp_degree 2" 3 --mp_degree 2 --dp_degree 1

/usr/bin/python3 - "$tmp" >"$tmp/checks" <<'PY'
import json, os, re, sys
tmp = sys.argv[1]
load = lambda p: [d for d in map(json.loads, open(p)) if "step" in d]
def check(ok, msg):
    print(("PASS " if ok else "FAIL ") + msg)
ref, ref16 = load(f"{tmp}/single/out/metrics.jsonl"), load(f"{tmp}/single_bf16/out/metrics.jsonl")
# gpt2-tiny: vocab 50257 padded to 128 x mp, hidden 64, 4 heads, 2 layers, ffn 256, 256 positions; micro-batch
# B x T = B x 32 tokens
V, C, L, F, P, T = 50257, 64, 2, 256, 256, 32
MiB = 2**20
def vocab(M):
    u = 128 * M
    return -(-V // u) * u
def param_bytes(M, sh, stage):
    """Bytes of rank 0's params category: its slices of split tensors plus the replicated ones, padded per group to
    the sharding degree; at stage 3 only its shard of each group (the flat buffer is not allocated)."""
    pad = lambda n: -(-n // sh) * sh
    block = (3 * C * C + 3 * C + C * F + F + F * C + C * C) // M + 6 * C   # split / M + LayerNorms, row biases
    wte_rows = vocab(M) // M
    if stage >= 2 and sh > 1:   # vocabulary blocks of max(block group, 2^20) elements
        rows = -(-max(block, 2**20) // C)
        wte = [pad(min(rows, wte_rows - r) * C) for r in range(0, wte_rows, rows)]
    else:
        wte = [pad(wte_rows * C)]
    total = sum(wte) + pad(P * C) + L * pad(block) + pad(2 * C)
    return 4 * total // (sh if stage == 3 and sh > 1 else 1)
def act_bytes(M, sp, B, recompute, a=4):
    """Bytes of activations the model keeps (one slot): the residual stream entering each block and the output,
    the head's d ln_f and ln_f's statistics, and per block what backward reads (with recompute: one block's worth,
    refilled). a: bytes of an activation element (2 under bf16 AMP O2: the residual stream, the LayerNorm outputs,
    qkv, the attention output and the MLP's hidden layer; d ln_f and the statistics stay fp32). Returns (all of it,
    the LayerNorm/dropout regions' part)."""
    N = B * T
    Nl = N // M if sp else N                     # tokens of the LayerNorm/dropout regions on this rank
    res, head = a * (L + 1) * Nl * C, 4 * (Nl * C + 2 * Nl)
    # res2, both LayerNorms' mean and rstd; ln1 and ln2 too, except in recompute's one refilled block, which keeps
    # them gathered (Megatron's sequence parallelism keeps this rank's tokens and gathers them again in backward)
    region_block = a * Nl * C + 4 * 4 * Nl + (0 if recompute else a * 2 * Nl * C)
    # (ln1, ln2 gathered under recompute), qkv, atty, fch; lse
    other_block = a * ((2 * N * C if recompute else 0) + 3 * N * C // M + N * C // M + N * F // M) \
        + 4 * B * (4 // M) * T
    nb = 1 if recompute else L
    return res + head + nb * (region_block + other_block), res + head + nb * region_block
def traffic(M, sp, B, a=4):
    """Bytes a rank sends in a step of one micro-batch, tensor parallelism alone (ring costs: all-reduce
    2 (M-1)/M, all-gather and reduce-scatter (M-1)/M of the payload). a: bytes of an activation element; the sums
    (all-reduces, reduce-scatters: a row-parallel layer's partial outputs, a LayerNorm output's gradient, the
    embedding, d ln_f) are fp32 in every precision, the gathers of activations move a bytes each (the embedding's
    backward gathers its fp32 gradient)."""
    N = B * T
    ar, half = 2 * (M - 1) / M, (M - 1) / M
    NC = N * C
    stats = 4 * ar * 3 * N             # the head's row maxima (MAX) and sums/target logits (SUM): one chunk
    norm = 8 * ar                      # the gradient norm: one double
    if not sp:                         # per layer 4 all-reduces; the embedding's and d ln_f's all-reduces
        return 4 * ar * (4 * L + 2) * NC + stats + norm
    partial = L * 6 * C + P * C + 2 * C  # LayerNorms, row-parallel biases, wpe, ln_f: summed after backward
    # per layer 6 all-gathers (a bytes: 4 + the 2 LayerNorm outputs again in backward) + 4 reduce-scatters (4); the
    # embedding's reduce-scatter and its backward all-gather (4), ln_f's all-gather (a) and d ln_f's reduce-scatter
    return half * ((6 * L + 1) * a + (4 * L + 3) * 4) * NC + stats + 4 * ar * partial + norm
for line in open(f"{tmp}/layouts"):
    name, np_, mp, dp, sh, stage, sp, micro, extra = line.split()
    np_, mp, dp, sh, stage, micro, sp = int(np_), int(mp), int(dp), int(sh), int(stage), int(micro), sp == "True"
    path = f"{tmp}/{name}/out/metrics.jsonl"
    if not os.path.exists(path):
        check(False, f"{name}: no metrics (the run failed)"); continue
    m = load(path)
    bf16 = "bfloat16" in extra
    r, tol = (ref16, 1e-3) if bf16 else (ref, 1e-5)
    d = max(abs(a["loss"] - b["loss"]) for a, b in zip(m, r)) if len(m) == len(r) == 20 else float("inf")
    check(d <= tol, f"{name}: 20-step loss curve vs one process{' (bf16)' if bf16 else ''}, max |diff| {d:.2e} "
          f"(<= {tol:g})")
    # hashes: replicated entries equal across each tensor group; everything equal across data replicas
    rep, full = {}, {}
    for rk in range(np_):
        for l in open(f"{tmp}/{name}/log/workerlog.{rk}"):
            h = re.search(r"rank (\d+) parameter hash after step (\d+): (\w+), replicated entries (\w+)", l)
            if not h: continue
            s = int(h.group(2))
            rep.setdefault((s, rk // mp), set()).add(h.group(4))
            # ranks holding the same slice: same mp index, same sharding index (stage 3) or any (stages 1, 2)
            key = (s, rk % mp, (rk // mp) % sh if stage == 3 else 0)
            full.setdefault(key, set()).add(h.group(3))
    check(len(rep) == 20 * (np_ // mp) and all(len(v) == 1 for v in rep.values()),
          f"{name}: replicated entries bit-identical across the tensor group every step ({len(rep)} checks)")
    check(len(full) > 0 and all(len(v) == 1 for v in full.values()),
          f"{name}: every parameter bit-identical across the ranks holding the same slice every step")
    log0 = open(f"{tmp}/{name}/log/workerlog.0").read()
    table = dict((k, float(v)) for k, v in re.findall(r"^\s+(\w+)\s+([\d.]+) MiB \(peak", log0, re.M)[:7])
    want = param_bytes(mp, sh, stage) / MiB
    check(abs(table.get("params", -1) - want) <= 0.01,
          f"{name}: rank 0 parameter bytes {table.get('params', -1):.2f} MiB = split / {mp} + replicated "
          f"{'/ ' + str(sh) + ' (stage 3) ' if stage == 3 and sh > 1 else ''}= {want:.2f} MiB")
    # core_attn (selective) recomputes no block: its activations are those of a run without recompute
    rc = "use_recompute" in extra and "core_attn" not in extra
    a = 2 if bf16 else 4
    act, region = act_bytes(mp, sp, micro, rc, a)
    got = float(re.search(r"activations: ([\d.]+) MiB", log0).group(1))
    check(abs(got - act / MiB) <= 0.01, f"{name}: activations {got:.2f} MiB = {act / MiB:.2f} MiB computed "
          f"(LayerNorm/dropout regions {region / MiB:.3f} MiB{', / ' + str(mp) + ' by sequence parallelism' if sp else ''})")
    if dp * sh == 1 and micro == 8 and not rc:  # one micro-batch, tensor parallelism alone
        got = m[-1]["comm_bytes"]
        want = traffic(mp, sp, micro, a)
        check(abs(got - want) <= 0.001 * want, f"{name}: bytes sent per step {got:.0f} vs formula {want:.0f} "
              f"({'6 all-gathers + 4 reduce-scatters' if sp else '4 all-reduces'} of B x T x C per layer + embedding, "
              f"head, {'partial gradients, ' if sp else ''}norm{'; gathers of bf16 activations' if a == 2 else ''})")
# activations with sequence parallelism: the LayerNorm/dropout regions fall by M
for M in (2, 4):
    a0, r0 = act_bytes(M, False, 8, False)
    a1, r1 = act_bytes(M, True, 8, False)
    check(r1 * M == r0, f"mp{M}: LayerNorm/dropout-region activations {r0 / MiB:.3f} -> {r1 / MiB:.3f} MiB with "
          f"sequence parallelism (/ {M})")
# resumes of the mp2 x sharding2 stage-3 checkpoint (step 10) in other layouts: steps 11..20
for name, path in (("resume at mp1", "resume_mp1/out"), ("resume at mp4 sequence parallel", "resume_mp4/out"),
                   ("resume in one process", "resume_single/out")):
    p = f"{tmp}/{path}/metrics.jsonl"
    m = load(p) if os.path.exists(p) else []
    tail = [x for x in m if x["step"] > 10]
    d = max((abs(a["loss"] - b["loss"]) for a, b in zip(tail, ref[10:])), default=float("inf"))
    check(len(tail) == 10 and d <= 1e-5, f"{name}: steps 11..20 vs one process, max |diff| {d:.2e} (<= 1e-5)")
PY
rc=$?
tally_lines <"$tmp/checks"
[ $rc = 0 ] || bad "the Python checks exited $rc"
finish
