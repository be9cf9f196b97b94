#!/usr/bin/env bash
# Pipeline parallelism (pp_degree) with each schedule, alone and stacked with tensor, data and sharding parallelism,
# against one process: 20 steps of gpt2-tiny made 8 blocks deep (4 heads, hidden 64, ffn 256), global batch 8,
# dropout on, an evaluation at steps 10 and 20.
# Checks per layout:
#   - the loss curve and the evaluation losses equal the single-process ones within 1e-5 (bf16: the
#     single-process bf16 curve within 1e-3);
#   - every step, the tied token embedding hashes identically on the first and the last stage (the lookup's copy
#     and the LM head's), for each tensor/sharding/data coordinate; entries replicated over a tensor group hash
#     identically on its ranks; ranks holding the same part (data replicas) hash identically over everything;
#   - the micro-batches each stage kept alive at once, against the schedule's bound worked out here (1F1B: stage s
#     holds min(P - s, M); ZB-H1 holds W's activations until the B s micro-batches later: min(P, M) on every
#     stage), and the stage's activation bytes against the slots times the bytes of one slot computed here from
#     the geometry (its blocks, the head on the last stage, the weight-gradient inputs ZB-H1 keeps until W);
#   - the bytes stage 0 sends per step (pipeline alone): its activations forward and gradients backward, one
#     B x T x C tensor per micro-batch and virtual stage boundary, plus the tied embedding's gradient all-reduce;
#   - the split the first stage prints: even (pp_split even, what these layouts use unless said), given by
#     pp_layers, with the embedding and loss counted, or balanced by cost (pp_split balanced, the default: worked out
#     here from pp_balance.h's cost model; at gpt2-tiny's 50k vocabulary the LM head outweighs its 8 blocks, so the
#     last stage holds the head alone).
# Then a checkpoint written by a 16-process dp2 x pp2 x sharding2 stage 3 x mp2 run (step 10) resumes in one
# process, at pp4 (ZB-H1) and at pp2 x mp2 and continues with the single-process losses of steps 11..20; a rank
# killed mid-schedule ends the job within 30 s naming the rank; and bad pipeline settings get one line, exit 2.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
test_setup
export OMP_NUM_THREADS=1
COMMON=(--model_name_or_path gpt2-tiny --input_dir "$SRC_DIR/data/fortunes_ids.npz" --max_seq_len 32
        --global_batch_size 8 --max_steps 20 --max_lr 1e-3 --min_lr 1e-4 --warmup_rate 0.1 --decay_steps 20
        --grad_clip 1.0 --logging_freq 1 --seed 7 -o Model.hidden_dropout_prob=0.1 --eval_freq 10 --eval_iters 2
        -o Model.attention_probs_dropout_prob=0.1 -o Model.num_layers=8 --debug_check_replicas --pp_split even)
single() { # name extra args...
  local name=$1; shift
  "$LLM4D" train "${COMMON[@]}" --micro_batch_size 8 --output_dir "$tmp/$name/out" --save_steps -1 "$@" \
    >"$tmp/$name.log" 2>&1 || { echo "FAIL single process run $name"; tail -3 "$tmp/$name.log"; }
}
single single
single single_bf16 --use_amp true --amp_dtype bfloat16
single single_l10 -o Model.num_layers=10
layouts=(
  # name           np pp V schedule     mp dp sh stage sp    micro extra
  "pp2             2  2  1 1F1B         1  1  1  1     False 2     -"
  "pp4             4  4  1 1F1B         1  1  1  1     False 1     -"
  "pp2_v2          2  2  2 interleaved  1  1  1  1     False 2     -"
  "pp4_v2          4  4  2 interleaved  1  1  1  1     False 1     -"
  "pp2_zb          2  2  1 ZBH1         1  1  1  1     False 2     -"
  "pp4_zb          4  4  1 ZBH1         1  1  1  1     False 1     -"
  "pp2_uneven      2  2  1 1F1B         1  1  1  1     False 2     --pp_layers=5,3"
  "pp4_balanced    4  4  1 1F1B         1  1  1  1     False 1     --pp_split=balanced"
  "pp4_account     4  4  1 1F1B         1  1  1  1     False 2     --pp_account_embedding_loss=true;-o;Model.num_layers=10"
  "pp2_rc          2  2  1 1F1B         1  1  1  1     False 2     --use_recompute=true"
  "pp2_zb_rc       2  2  1 ZBH1         1  1  1  1     False 2     --use_recompute=true"
  "pp2_bf16        2  2  1 1F1B         1  1  1  1     False 2     --use_amp=true;--amp_dtype=bfloat16"
  "pp2_mp2_sp      4  2  1 1F1B         2  1  1  1     True  2     -"
  "pp2_dp2         4  2  1 1F1B         1  2  1  1     False 2     -"
  "pp2_sh2_s1      4  2  1 1F1B         1  1  2  1     False 2     -"
  "pp2_sh2_s2_zb   4  2  1 ZBH1         1  1  2  2     False 2     -"
  "pp2_v2_sh2_s3   4  2  2 interleaved  1  1  2  3     False 2     -"
  "pp2_mp2_sh2     8  2  1 ZBH1         2  1  2  2     True  2     -"
  "dp2_pp2_sh2_mp2 16 2  1 1F1B         2  2  2  3     False 1     -"
)
for l in "${layouts[@]}"; do
  set -- $l
  extra=()
  [ "${12}" != - ] && IFS=';' read -ra extra <<<"${12}"
  "$LLM4D" launch --nproc "$2" --log_dir "$tmp/$1/log" -- train "${COMMON[@]}" --pp_degree "$3" \
    --virtual_pp_degree "$4" --pp_schedule "$5" --mp_degree "$6" --dp_degree "$7" --sharding_degree "$8" \
    --sharding_stage "$9" --sequence_parallel "${10}" --micro_batch_size "${11}" \
    --save_steps "$([ "$1" = dp2_pp2_sh2_mp2 ] && echo 10 || echo -1)" "${extra[@]}" --output_dir "$tmp/$1/out" \
    >"$tmp/$1.stdout" 2>&1 || { echo "run $1 failed:"; tail -5 "$tmp/$1.stdout"; }
done
printf '%s\n' "${layouts[@]}" >"$tmp/layouts"

# the step-10 checkpoint of the 16-process run resumed in other layouts (steps 11..20)
ck="$tmp/dp2_pp2_sh2_mp2/out/step_10"
resume() { # name nproc args...
  local name=$1 np=$2; shift 2
  "$LLM4D" launch --nproc "$np" --log_dir "$tmp/$name/log" -- train "${COMMON[@]}" --resume "$ck" --save_steps -1 \
    --output_dir "$tmp/$name/out" "$@" >"$tmp/$name.stdout" 2>&1 || tail -5 "$tmp/$name.stdout"
}
resume resume_single 1 --micro_batch_size 8
resume resume_pp4_zb 4 --micro_batch_size 2 --pp_degree 4 --pp_schedule ZBH1
resume resume_pp2_mp2 4 --micro_batch_size 4 --pp_degree 2 --mp_degree 2

# ---- a rank killed mid-schedule: the job ends within 30 s, naming it ------------------------------------------
"$LLM4D" launch --nproc 2 --log_dir "$tmp/kill/log" -- train "${COMMON[@]}" --pp_degree 2 --micro_batch_size 1 \
  --max_steps 100000 --decay_steps 100000 --eval_freq 0 --save_steps -1 --output_dir "$tmp/kill/out" \
  >"$tmp/kill.stdout" 2>"$tmp/kill.stderr" &
launcher=$!
wait_for "$tmp/kill/log/workerlog.1" 40 "global step 3,"
mpirun_pid=$(children $launcher | head -1)
victim="" procs="$launcher $mpirun_pid"
for w in $(children "$mpirun_pid"); do
  procs="$procs $w"
  for p in $(children "$w"); do
    procs="$procs $p"
    rank_is "$p" 1 && victim=$p
  done
done
f0=$fail
check_if $(yes_if test -n "$victim") "pp2 training running: found the last stage's process ($victim)"
t0=$(date +%s)
[ -n "$victim" ] && kill -9 "$victim"
left=$procs
while [ -n "$left" ] && [ $(($(date +%s) - t0)) -le 30 ]; do
  left=""
  for p in $procs; do alive "$p" && left="$left $p"; done
  sleep 0.1
done
for p in $left; do kill -9 "$p" 2>/dev/null; done
wait $launcher 2>/dev/null
rc=$?
check_if $(yes_if test -z "$left" -a $rc != 0) \
  "every process gone $(($(date +%s) - t0)) s after the kill (limit 30 s; left:${left:- none}), exit $rc"
check_if $(has "$tmp/kill.stderr" "rank 1 (pid $victim) was killed by signal 9") "the launcher names rank 1"
reliability_checked $f0 communication "pp2: the last stage killed (SIGKILL) mid-schedule" \
  "$(grep -m1 'killed by signal 9' "$tmp/kill.stderr")" "$rc" "$(($(date +%s) - t0))" -

# ---- bad pipeline settings: one clear line each, exit 2 -------------------------------------------------------
launch_bad() { # nproc args...
  local np=$1; shift
  timeout 60 "$LLM4D" launch --nproc "$np" --log_dir "$tmp/bad_log" -- train "${COMMON[@]}" --micro_batch_size 1 \
    --save_steps -1 --output_dir "$tmp/bad" "$@"
}
refused "layers not divisible by the stages" "num_layers 8 is not divisible by pp_degree 3" launch_bad 3 \
  --pp_degree 3
refused "pp_layers not summing to num_layers" "pp_layers '5,4' holds 9 blocks, but the model has num_layers 8" \
  launch_bad 2 --pp_degree 2 --pp_layers 5,4
refused "pp_layers with the wrong count" "pp_layers gives 3 counts, but pp_degree 2" launch_bad 2 --pp_degree 2 \
  --pp_layers 3,3,2
refused "pp_layers leaving a middle stage empty" "virtual stage 1 would hold no block" launch_bad 4 --pp_degree 4 \
  --pp_layers 3,0,3,2
refused "pp_layers not a number" "pp_layers must be a list of non-negative whole numbers" launch_bad 2 --pp_degree 2 --pp_layers 4,x
refused "embedding and loss accounting impossible" "num_layers 8 + 2 (embedding, loss) = 10 is not divisible" \
  launch_bad 4 --pp_degree 4 --pp_account_embedding_loss true
refused "ZB-H1 with fewer micro-batches than stages" "ZB-H1 needs at least pp_degree = 4 micro-batches" \
  launch_bad 4 --pp_degree 4 --pp_schedule ZBH1 --micro_batch_size 4
refused "interleaved with micro-batches not a multiple of the stages" "groups of pp_degree 4" launch_bad 4 \
  --pp_degree 4 --virtual_pp_degree 2 --micro_batch_size 4
refused "interleaved without virtual stages" "the interleaved schedule needs virtual_pp_degree > 1" launch_bad 2 \
  --pp_degree 2 --pp_schedule interleaved
refused "an unknown schedule" "pp_schedule 'gpipe' is not a pipeline schedule" launch_bad 2 --pp_degree 2 \
  --pp_schedule gpipe
refused "virtual stages without a pipeline" "virtual_pp_degree 2 interleaves pipeline stages, but pp_degree is 1" \
  launch_bad 1 --virtual_pp_degree 2
refused "degrees not multiplying to the processes" "pp_degree 2" launch_bad 3 --pp_degree 2

echo "$pass $fail" >"$tmp/shell_tally"
/usr/bin/python3 - "$tmp" <<'PY'
import json, os, re, sys
tmp = sys.argv[1]
passed, failed = map(int, open(f"{tmp}/shell_tally").read().split())
def check(ok, msg):
    global passed, failed
    print(("ok   " if ok else "FAIL ") + msg)
    passed += ok; failed += not ok
def load(p):
    rows = list(map(json.loads, open(p)))
    return [d for d in rows if "step" in d], [d for d in rows if "eval_step" in d]
ref = {"": load(f"{tmp}/single/out/metrics.jsonl"), "bf16": load(f"{tmp}/single_bf16/out/metrics.jsonl"),
       "l10": load(f"{tmp}/single_l10/out/metrics.jsonl")}
# gpt2-tiny: vocab 50257 padded to 128 x mp, hidden 64, 4 heads, ffn 256, 256 positions; micro-batch B x 32 tokens
V, C, H, F, T = 50257, 64, 4, 256, 32
MiB = 2**20
def vocab(M):
    u = 128 * M
    return -(-V // u) * u
def slot_bytes(nl, B, M, sp, zb, recompute, head, a=4):
    """Bytes one activation slot of a chunk of nl blocks holds (gpt.c): the residual stream entering each block and
    leaving the chunk; per block what backward reads (not with recompute), the attention dropout's mask among it (a
    32-bit word per 32 keys of each of the B x H/M x T rows); with ZB-H1, the inputs of the weight gradients kept
    until W; on the last stage, d ln_f and ln_f's statistics. a: bytes of an activation element (2 under bf16 AMP
    O2: the residual stream, LayerNorm outputs, qkv, the attention output, the MLP's hidden layer and the kept
    gradients; statistics, masks and d ln_f are 4-byte)."""
    N = B * T
    Nl = N // M if sp else N
    mask = B * (H // M) * T * -(-T // 32)  # attention_probs_dropout_prob is 0.1 here
    # ln1, qkv, atty, res2, ln2, fch; both LayerNorms' statistics, lse, the mask. Under sequence parallelism a block
    # keeps this rank's tokens of ln1 and ln2 (backward gathers them again), except the one block recompute refills
    Nln = Nl if sp and not recompute else N
    block = a * (Nln * C + 3 * N * C // M + N * C // M + Nl * C + Nln * C + N * F // M) \
        + 4 * (4 * Nl + B * (H // M) * T)
    block += 4 * mask
    wgrad = a * (3 * N * C // M + N * C + N * F // M + N * C) + 4 * 4 * C
    f = a * (nl + 1) * Nl * C
    if not recompute:
        f += nl * (block + (wgrad if zb else 0))
    if head:
        f += 4 * (Nl * C + 2 * Nl)
    return f, block
def balanced(L, VP, M, recompute):
    """pp_balance.h: per token, a block's FLOPs plus 10 x its bytes, times 3 passes (4 with recompute); the embedding
    with the first virtual stage, the head with the last; the middle stages even, earlier ones taking the extra
    block; the stages' costs sorted from the largest down compared lexicographically, the first best kept."""
    Vp = vocab(M)
    block = (4 if recompute else 3) * (2 * (4 * C * C + 2 * C * F) // M + 4 * T * C // M
                                       + 10 * 4 * (16 * C + 2 * F // M + 3 * H * T // M))
    emb, head = 10 * 4 * 7 * C, 3 * 2 * C * Vp // M + 10 * 4 * 4 * Vp // M
    if VP == 1:
        return [L]
    best, mid = None, VP - 2
    for j in range(L + 1):
        for k in range(L - j + 1):
            rest = L - j - k
            if (mid == 0 and rest) or rest < mid:
                continue
            n = [j] + [rest // mid + (v < rest % mid) for v in range(mid)] + [k]
            cost = sorted((n[v] * block + (emb if v == 0 else 0) + (head if v == VP - 1 else 0) for v in range(VP)),
                          reverse=True)
            if best is None or cost < best[0]:
                best = (cost, n)
    return best[1]
def split(L, P, Vv, extra):
    """Blocks of each virtual stage, worked out from the options (not read from the program)."""
    m = re.search(r"--pp_layers=([\d,]+)", extra)
    if m:
        return [int(x) for x in m.group(1).split(",")]
    VP = P * Vv
    if "pp_split=balanced" in extra:
        return balanced(L, VP, 1, "use_recompute" in extra)
    if "pp_account_embedding_loss" in extra:
        n = [(L + 2) // VP] * VP
        n[0] -= 1; n[-1] -= 1
        return n
    return [L // VP] * VP
def coords(path):
    log = open(path).read()
    return {g: int(re.search(rf"- {g} rank: (\d+)", log).group(1)) for g in ("mp", "sharding", "pp", "dp")}
for line in open(f"{tmp}/layouts"):
    name, np_, P, Vv, sched, mp, dp, sh, stage, sp, micro, extra = line.split()
    np_, P, Vv, mp, dp, sh, stage, micro = map(int, (np_, P, Vv, mp, dp, sh, stage, micro))
    sp = sp == "True"
    L = 10 if "num_layers=10" in extra else 8
    path = f"{tmp}/{name}/out/metrics.jsonl"
    if not os.path.exists(path):
        check(False, f"{name}: no metrics (the run failed)"); continue
    m, ev = load(path)
    bf16 = "bfloat16" in extra
    (r, rev), tol = (ref["bf16"] if bf16 else ref["l10"] if L == 10 else ref[""]), (1e-3 if bf16 else 1e-5)
    d = max(abs(a["loss"] - b["loss"]) for a, b in zip(m, r)) if len(m) == len(r) == 20 else float("inf")
    de = max(abs(a["eval_loss"] - b["eval_loss"]) for a, b in zip(ev, rev)) if len(ev) == len(rev) == 2 else float("inf")
    check(d <= tol and de <= tol, f"{name}: 20-step loss curve and 2 evaluations vs one process"
          f"{' (bf16)' if bf16 else ''}, max |diff| {d:.2e}, {de:.2e} (<= {tol:g})")
    # hashes every step
    emb, rep, full = {}, {}, {}
    logs, stage_rank = {}, {}
    for rk in range(np_):
        lp = f"{tmp}/{name}/log/workerlog.{rk}"
        logs[rk] = open(lp).read()
        c = coords(lp)
        if c["dp"] == c["sharding"] == c["mp"] == 0:
            stage_rank[c["pp"]] = rk
        for h in re.finditer(r"rank \d+ parameter hash after step (\d+): (\w+), replicated entries (\w+)"
                             r"(?:, embedding (\w+))?", logs[rk]):
            s = int(h.group(1))
            shard = c["sharding"] if stage == 3 else 0
            if h.group(4):
                    emb.setdefault((s, c["dp"], shard, c["mp"]), []).append(h.group(4))
            rep.setdefault((s, c["pp"], c["dp"], c["sharding"]), set()).add(h.group(3))
            full.setdefault((s, c["pp"], c["mp"], shard), set()).add(h.group(2))
    # keys: (step, dp, sharding (stage 3: its shard) , mp); stages 1-2 replicate the whole embedding over sharding
    n_emb, copies = 20 * dp * mp * (sh if stage == 3 else 1), 2 * (1 if stage == 3 else sh)
    check(len(emb) == n_emb and all(len(v) == copies and len(set(v)) == 1 for v in emb.values()),
          f"{name}: the tied embedding bit-identical on the first and the last stage every step ({len(emb)} "
          f"coordinates x {copies} copies, want {n_emb})")
    check(len(rep) == 20 * np_ // mp and all(len(v) == 1 for v in rep.values()),
          f"{name}: replicated entries bit-identical across each tensor group every step")
    check(all(len(v) == 1 for v in full.values()) and len(full) > 0,
          f"{name}: every parameter bit-identical across the ranks holding the same part every step")
    # the split printed by rank 0 against the options
    n = split(L, P, Vv, extra)
    lo = [sum(n[:v]) for v in range(P * Vv)]
    want = [f"stage {s}: blocks " + ", ".join(f"[{lo[c * P + s]}, {lo[c * P + s] + n[c * P + s]})" for c in range(Vv))
            for s in range(P)]
    got = re.findall(r"- +(stage \d+: blocks [^+;\n]*?)(?: \+.*|; predicted cost.*)?$", logs[0], re.M)
    check(got == want, f"{name}: the split {n} printed by stage 0: {got}")
    if "pp_split=balanced" in extra:
        ends = [r"pipeline: computing per step by stage, measured against the split's prediction",
                r"pipeline: waiting share by stage, measured against 1F1B's at the measured F/B/W"]
        check(all(re.search(e, logs[0]) for e in ends), f"{name}: the run's end prints each stage's computing beside "
              "its predicted cost and its waiting beside the schedule's theory")
    # micro-batches alive and activation bytes, on the stages of the first pipeline
    M = 8 // (micro * dp * sh)
    rc_ = "use_recompute" in extra
    zb = sched == "ZBH1" and not rc_   # with recompute W runs inside B: ZB-H1 runs as 1F1B
    for s in range(P):
        rk = stage_rank.get(s, 0)
        a = re.search(r"pipeline stage (\d+): most micro-batches alive at once per chunk:((?: \d+ \(of \d+ slots\))+);"
                      r" activations ([\d.]+) MiB", logs[rk])
        if not a:
            check(False, f"{name}: stage {s} printed no pipeline summary"); continue
        peaks = [tuple(map(int, x)) for x in re.findall(r"(\d+) \(of (\d+) slots\)", a.group(2))]
        nbytes = 0
        a_ = 2 if "bfloat16" in extra else 4
        for c, (peak, slots) in enumerate(peaks):
            head = s == P - 1 and c == Vv - 1
            f, block = slot_bytes(n[c * P + s], micro, mp, sp, zb, rc_, head, a_)
            nbytes += slots * f
        if rc_:
            nbytes += block
        if sched == "interleaved":  # the bound per chunk comes from the schedule itself (test_schedule checks it)
            ok = all(p == sl for p, sl in peaks)
            what = f"alive {peaks} reach the schedule's slots"
        else:
            bound = min(P if zb else P - s, M)
            ok = peaks == [(bound, bound)]
            what = f"alive {peaks[0][0]} of {peaks[0][1]} slots = {'min(P, M)' if zb else 'min(P - s, M)'} = {bound}"
        got_mib = float(a.group(3))
        check(ok and abs(got_mib - nbytes / MiB) <= 0.001,
              f"{name}: stage {s}: {what}; activations {got_mib:.3f} MiB = {nbytes / MiB:.3f} MiB computed")
    # bytes stage 0 sends per step, the pipeline alone
    if np_ == P:
        VP = P * Vv
        bounds = sum((v < VP - 1) + (v > 0) for v in range(0, VP, P))   # stage 0 holds v = 0, P, 2P, ...
        # a message is B x T x C of the residual stream's type (bf16 under AMP O2), + the 2-rank all-reduce of wte's
        # fp32 gradient
        want = M * bounds * micro * T * C * (2 if "bfloat16" in extra else 4) + vocab(1) * C * 4
        got = m[-1]["comm_bytes"]
        check(want <= got <= want + 64, f"{name}: stage 0 sends {got} bytes per step = {M} micro-batches x {bounds} "
              f"transfers x B x T x C + the tied embedding's all-reduce ({want}) + a few scalars")
# resumes of the 16-process checkpoint (step 10) in other layouts: steps 11..20
r, _ = ref[""]
for name in ("resume_single", "resume_pp4_zb", "resume_pp2_mp2"):
    p = f"{tmp}/{name}/out/metrics.jsonl"
    m = load(p)[0] if os.path.exists(p) else []
    d = max(abs(a["loss"] - b["loss"]) for a, b in zip(m, r[10:])) if [x["step"] for x in m] == list(range(11, 21)) \
        else float("inf")
    check(d <= 1e-5, f"{name}: the dp2 x pp2 x sharding2 stage 3 x mp2 checkpoint of step 10 continues with the "
          f"single-process steps 11..20, max |diff| {d:.2e}")
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
PY
