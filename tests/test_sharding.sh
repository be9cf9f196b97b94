#!/usr/bin/env bash
# Group-sharded (ZeRO) training against one process: 20 steps of gpt2-tiny, global batch 8, dropout on, for
# stages 1, 2, 3 at sharding degree 2 and 4, with and without offload, with gradient accumulation, and hybrid
# dp2 x sharding2. Checks per layout: the loss curve equals the single-process one within 1e-5; the bytes of
# parameters, gradients, optimizer states and communication buffers in the memory arena's own tables (held at
# start-up and peak over the run) equal what this test computes from the model's geometry (the ZeRO formulas;
# with offload, the states replaced by their streaming window); at stages 2 and 3 the communication buffers stay
# under the stated bound 4 G + 2 G/N (G the largest group) and no buffer is the size of the embedding; the elements
# each rank sends per step equal the gather/reduce-scatter schedule's count within 1 % (one micro-batch per step);
# replicas of the same shard hold bit-identical parameters every step. Prints the table.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
test_setup
export OMP_NUM_THREADS=1
COMMON=(--model_name_or_path gpt2-tiny --input_dir "$SRC_DIR/data/fortunes_ids.npz" --max_seq_len 32
        --global_batch_size 8 --max_steps 20 --max_lr 1e-3 --min_lr 1e-4 --warmup_rate 0.1 --decay_steps 20
        --grad_clip 1.0 --logging_freq 1 --seed 7 -o Model.hidden_dropout_prob=0.1
        -o Model.attention_probs_dropout_prob=0.1 --debug_check_replicas)
"$LLM4D" train "${COMMON[@]}" --micro_batch_size 8 --output_dir "$tmp/single/out" >"$tmp/single.log" 2>&1 ||
  { bad "single process run"; cat "$tmp/single.log"; finish; }
layouts=(
  # name          np dp sh stage offload micro
  "s1_n2          2  1  2  1     False   4"
  "s2_n2          2  1  2  2     False   4"
  "s3_n2          2  1  2  3     False   4"
  "s1_n4          4  1  4  1     False   2"
  "s2_n4          4  1  4  2     False   2"
  "s3_n4          4  1  4  3     False   2"
  "s1_n2_offload  2  1  2  1     True    4"
  "s2_n2_offload  2  1  2  2     True    4"
  "s3_n2_offload  2  1  2  3     True    4"
  "s2_n2_acc2     2  1  2  2     False   2"
  "s3_n2_acc2     2  1  2  3     False   2"
  "s1_n2_acc2     2  1  2  1     False   2"
  "hybrid_dp2_s2  4  2  2  2     False   2"
  "hybrid_dp2_s3  4  2  2  3     False   2"
)
for l in "${layouts[@]}"; do
  set -- $l
  "$LLM4D" launch --nproc "$2" --log_dir "$tmp/$1/log" -- train "${COMMON[@]}" --dp_degree "$3" \
    --sharding_degree "$4" --sharding_stage "$5" --sharding_offload "$6" --micro_batch_size "$7" \
    --output_dir "$tmp/$1/out" >"$tmp/$1.stdout" 2>&1 || { echo "run $1 failed:"; tail -5 "$tmp/$1.stdout"; }
done
printf '%s\n' "${layouts[@]}" >"$tmp/layouts"
# bad input: one clear line each, exit 2
bad_input() { # name word args...
  local name=$1 word=$2; shift 2
  timeout 60 "$LLM4D" "$@" >"$tmp/bo" 2>"$tmp/be"
  local rc=$?
  if [ $rc = 2 ] && grep -q -- "$word" "$tmp/be"; then
    ok "$name: $(grep -m1 -- "$word" "$tmp/be")"
  else bad "$name: exit $rc: $(cat "$tmp/be")"; fi
}
bad_input "sharding_stage 4" "sharding_stage" train "${COMMON[@]}" --micro_batch_size 8 --sharding_stage 4
bad_input "offload without sharding" "sharding_offload" train "${COMMON[@]}" --micro_batch_size 8 \
  --sharding_offload True
bad_input "sharding degree not dividing the world" "sharding_degree" launch --nproc 2 --log_dir "$tmp/badlog" -- train \
  "${COMMON[@]}" --micro_batch_size 4 --sharding_degree 3
/usr/bin/python3 - "$tmp" >"$tmp/checks" <<'PY'
import json, os, re, sys
tmp = sys.argv[1]
load = lambda p: [json.loads(l) for l in open(p)]
ref = load(f"{tmp}/single/out/metrics.jsonl")
def check(ok, msg):
    print(("PASS " if ok else "FAIL ") + msg)
# The model's parameter groups, computed here from gpt2-tiny's geometry (vocab 50257 padded to 50304, hidden 64,
# 2 layers, ffn 256, 256 positions), each padded to a multiple of N as ZeRO splits them; at stages 2 and 3 the
# token embedding is cut into vocabulary blocks of max(block group, 2^20) elements (parallel/sharding.h).
V, C, L, F, P = 50304, 64, 2, 256, 256
BLOCK = 2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + F * C + F + C * F + C
def groups(stage, N):
    pad = lambda n: -(-n // N) * N
    rows = -(-max(BLOCK, 2**20) // C) if stage >= 2 else V
    wte = [pad(min(rows, V - r) * C) for r in range(0, V, rows)]
    return wte, pad(P * C), pad(BLOCK), pad(2 * C)
def psi_of(stage, N):
    wte, wpe, block, lnf = groups(stage, N)
    return sum(wte) + wpe + L * block + lnf
def traffic(stage, N, dp):
    """Elements one rank sends in a step of one micro-batch, from the gather/reduce-scatter schedule of
    parallel/sharding.h: ring costs (N-1)/N of the payload for a reduce-scatter or an all-gather."""
    wte, wpe, block, lnf = groups(stage, N)
    e, psi = sum(wte), psi_of(stage, N)
    if stage == 1:   # every group reduce-scattered once (the tied embedding's two uses add up in the flat buffer)
        elems, what = 2 * psi, "2 Psi"
    elif stage == 2: # + the tied embedding's second window (LM head in forward, lookup in backward) reduced apart
        elems, what = 2 * psi + e, "(2 Psi + Psi_wte)"
    else:            # gathers: wte 3x (lookup, head statistics, head gradients), wpe 1x, blocks and ln_f 2x;
                     # reduce-scatters: wte 2x, the rest 1x
        gathers = (3 if len(wte) > 1 else 2) * e + wpe + 2 * (L * block + lnf)
        elems, what = gathers + psi + e, "(3 Psi + 2 Psi_wte - Psi_wpe)"
    elems *= (N - 1) / N
    what += " x (N-1)/N"
    if dp > 1:  # hybrid: the owned shards are all-reduced across the dp replicas too
        elems += 2 * (psi / N) * (dp - 1) / dp
        what += " + a dp all-reduce of the shard"
    return elems, what
def expected_bytes(stage, N, offload):
    """Bytes per category: params, grads, optimizer (fp32 Adam), comm buffers."""
    wte, wpe, block, lnf = groups(stage, N)
    psi = psi_of(stage, N)
    G = max(wte + [wpe, block, lnf])  # the largest group: buckets and gather buffers
    S = G // N                          # its shard: the reduce-scatter's receive buffers
    params = 4 * psi if stage < 3 else 4 * psi // N
    grads = 4 * psi if stage == 1 else 4 * psi // N
    optim = 8 * psi // N
    comm = 4 * {1: 2 * S, 2: 2 * G + 2 * S, 3: 4 * G + 2 * S}[stage]
    if offload:  # the states (and stage-3 parameter shards) live in a file; three windows per stream in memory
        n = psi // N
        W = min(2**20, -(-(-(-n // 4)) // 1024) * 1024)
        streams = 3 if stage == 3 else 2
        optim = 3 * streams * W * 4
        if stage == 3:
            params = 0
    return params, grads, optim, comm
def category_table(text, title):
    """{category: (held MiB, peak MiB)} of the memory table printed after `title`."""
    part = text.split(title, 1)[1] if title in text else ""
    return {k: (float(h), float(p)) for k, h, p in
            re.findall(r"^\s+(\w+)\s+([\d.]+) MiB \(peak\s+([\d.]+) MiB\)", part, re.M)[:7]}
rows = []
for line in open(f"{tmp}/layouts"):
    name, np_, dp, sh, stage, offload, micro = line.split()
    np_, dp, sh, stage, micro = int(np_), int(dp), int(sh), int(stage), int(micro)
    path = f"{tmp}/{name}/out/metrics.jsonl"
    if not os.path.exists(path):
        check(False, f"{name}: no metrics (the run failed)"); continue
    m = load(path)
    d = max(abs(a["loss"] - b["loss"]) for a, b in zip(m, ref))
    check(len(m) == 20 and d <= 1e-5, f"{name}: 20-step loss curve vs one process, max |diff| {d:.2e} (<= 1e-5)")
    log0 = open(f"{tmp}/{name}/log/workerlog.0").read()
    N = sh
    # the memory arena's own books (the category tables printed at start-up and at the end of the run) against
    # the bytes computed here from the geometry: held before step 1, and the most held at once over the run
    start = category_table(log0, "memory held by this process, by category:")
    end = category_table(log0, "peak memory of this process over the run, by category:")
    want = dict(zip(("params", "grads", "optimizer", "comm"), (b / 2**20 for b in expected_bytes(stage, N, offload == "True"))))
    got_start = {k: start.get(k, (-1, -1))[0] for k in want}
    got_peak = {k: end.get(k, (-1, -1))[1] for k in want}
    ok = all(abs(got_start[k] - want[k]) <= 0.01 and abs(got_peak[k] - want[k]) <= 0.01 for k in want)
    check(ok, f"{name}: per-category bytes (held at start, peak over the run) vs computed: " +
          ", ".join(f"{k} {got_start[k]:.2f}/{got_peak[k]:.2f} vs {want[k]:.2f}" for k in want))
    held = sum(got_start[k] for k in ("params", "grads", "optimizer"))
    psi = psi_of(stage, N)
    f = {1: 8 * psi + 8 * psi / N, 2: 4 * psi + 12 * psi / N, 3: 16 * psi / N}[stage] / 2**20
    if offload != "True":
        check(abs(held - f) <= 0.02, f"{name}: model states {held:.2f} MiB = ZeRO stage {stage} formula {f:.2f} MiB "
              "(three categories rounded to 0.01)")
    else:
        check(held < f, f"{name}: offloaded model states {held:.2f} MiB < ZeRO stage {stage} formula {f:.2f} MiB")
    comm = got_start["comm"]
    emb = V * C * 4 / 2**20
    if stage >= 2:  # the stated bound: 4 G + 2 G/N at most, and no buffer the size of the embedding
        wte, wpe, block, lnf = groups(stage, N)
        G = max(wte + [wpe, block, lnf])
        check(comm <= (4 * G + 2 * G / N) * 4 / 2**20 + 0.01 and G * 4 / 2**20 < emb,
              f"{name}: communication buffers {comm:.2f} MiB <= 4 G + 2 G/N = {(4 * G + 2 * G / N) * 4 / 2**20:.2f} "
              f"MiB, G = {G * 4 / 2**20:.2f} MiB < the embedding's {emb:.2f} MiB")
    if micro * sh * dp == 8:  # one micro-batch per step: the traffic of the gather/reduce-scatter schedule
        elems, what = traffic(stage, N, dp)
        got = m[-1]["comm_bytes"] / 4
        check(abs(got - elems) <= 0.01 * elems, f"{name}: elements sent per step per rank {got:.0f} vs "
              f"{what} = {elems:.0f} (within 1 %)")
    # replicas: ranks holding the same shard (same sharding rank) must hold identical parameters every step
    hashes = {}
    for r in range(np_):
        for line in open(f"{tmp}/{name}/log/workerlog.{r}"):
            h = re.search(r"rank (\d+) parameter hash after step (\d+): (\w+)", line)
            if h: hashes.setdefault((int(h.group(2)), (r % sh) if stage == 3 else 0), set()).add(h.group(3))
    check(len(hashes) > 0 and all(len(v) == 1 for v in hashes.values()),
          f"{name}: parameters bit-identical across {'replicas of each shard' if stage == 3 else 'all ranks'} every step")
    rows.append((name, stage, N, dp, held, f, comm))
print(f"\n{'layout':<16}{'stage':>6}{'N':>4}{'dp':>4}{'states MiB':>12}{'formula MiB':>13}{'comm bufs MiB':>15}")
single = [l for l in open(f"{tmp}/single.log") if "model states per rank" in l][0]
single_held = float(re.search(r"([\d.]+) MiB held", single).group(1))
print(f"{'single':<16}{0:>6}{1:>4}{1:>4}{single_held:>12.2f}{16 * psi_of(1, 1) / 2**20:>13.2f}{0:>15.2f}")
for r in rows:
    print(f"{r[0]:<16}{r[1]:>6}{r[2]:>4}{r[3]:>4}{r[4]:>12.2f}{r[5]:>13.2f}{r[6]:>15.2f}")
PY
rc=$?
tally_lines <"$tmp/checks"
[ $rc = 0 ] || bad "the Python checks exited $rc"
finish
