#!/usr/bin/env bash
# test_plan_flags.sh — every flag that changes the work `llm4d plan` prices changes its prediction, in the right
# direction and by the amount bytes / bandwidth say (issue 46). The case: GPT-3 1.3B, sequence 2048, global batch 512,
# micro-batch 4, bf16 O2, at dp8 x mp2 x pp2 (12 blocks a stage) on 4 hosts of 8, priced by the published A100 profile
# (bench/profiles/a100_selene.json), which measured no collective: a collective costs latency x (log2 group + 1) plus
# its ring bytes over the profile's bus bandwidth (240 GB/s within a host, 22 GB/s across; a data group of 8 over 4
# hosts is across, a pipeline or tensor pair within). The expected amounts below are computed here from the model's
# shape and those two numbers, not read from the planner:
#   --dp_overlap off: every data-parallel bucket all-reduced blocking after backward (data_parallel.h): the stage's
#     exposed all-reduce is 2 x 7/8 x 4 bytes x its parameters / 22 GB/s (+ a latency per bucket); the step is longer,
#     by at most what overlap hides (all but the last bucket, the embedding's, which is blocking either way);
#   --dp_overlap alternate: odd steps overlapped, even steps blocking: the mean of the two;
#   --grad_comm_dtype bfloat16: the same all-reduces with 2-byte payloads (half the time, off: exactly half the
#     bytes), less two conversion passes over the gradients (6 bytes an element each at the profile's 1631.2 GB/s);
#     ZeRO-2's reduce-scatters likewise halve;
#   --fp16_opt_level O1 against O2: a pipeline send moves B x T x C activations in fp32, not bf16 (twice the bytes
#     at 240 GB/s); with sequence parallelism the tensor-parallel all-gathers of activations double (6 a block: f and
#     g's 4 and the 2 LayerNorm outputs gathered again in backward; the 16-bit ones of O2), while the reduce-scatters and all-reduces, fp32 sums under both, do not change.
# Tensor-parallel collectives are not overlapped by the engine (they block: model/tp.c), so no flag prices an
# overlap of them. And the answer names its precision in its first lines; --explain counts the rejections by reason
# before any layout's own line and lists at most --explain_lines per reason (against the complete JSON list).
set -uo pipefail
source "$(dirname "$0")/lib.sh"
test_setup
# one thread a rank, as the expected figures below assume: the planner prices a host's ranks x threads against the
# profile's 8 cores, so OMP_NUM_THREADS=2 (test.sh's) would price the conversions on an oversubscribed host
export OMP_NUM_THREADS=1
PROF="$SRC_DIR/bench/profiles/a100_selene.json"
BASE="--evaluate --json --machine_profile $PROF --model_name_or_path gpt3-1.3b --max_seq_len 2048
  --global_batch_size 512 --micro_batch_size 4 --use_amp true --mp_degree 2 --pp_degree 2 --pp_layers 12,12
  --max_steps 10 --nodes 4 --input_dir $tmp/no_data"
cases=(
  "on      --dp_degree 8"
  "off     --dp_degree 8 --dp_overlap off"
  "alt     --dp_degree 8 --dp_overlap alternate"
  "bf      --dp_degree 8 --grad_comm_dtype bfloat16"
  "offbf   --dp_degree 8 --dp_overlap off --grad_comm_dtype bfloat16"
  "o1      --dp_degree 8 --fp16_opt_level O1"
  "sp      --dp_degree 8 --sequence_parallel true"
  "spo1    --dp_degree 8 --sequence_parallel true --fp16_opt_level O1"
  "z2      --dp_degree 1 --sharding_degree 8 --sharding_stage 2"
  "z2bf    --dp_degree 1 --sharding_degree 8 --sharding_stage 2 --grad_comm_dtype bfloat16"
)
for c in "${cases[@]}"; do
  read -r name args <<<"$c"
  # shellcheck disable=SC2086
  "$LLM4D" plan $BASE $args >"$tmp/$name.json" 2>"$tmp/$name.err" ||
    echo "exit $?: $(head -c 300 "$tmp/$name.err")" >"$tmp/$name.json"
done
/usr/bin/python3 - "$tmp" >"$tmp/verdicts" <<'PY'
import json, sys
d = sys.argv[1]
def load(n):
    try:
        return json.load(open(f"{d}/{n}.json"))
    except Exception as e:
        print(f"0 {n}: no prediction ({open(f'{d}/{n}.json').read()[:200]!r})"); return None
r = {n: load(n) for n in "on off alt bf offbf o1 sp spo1 z2 z2bf".split()}
def say(ok, what): print(f"{1 if ok else 0} {what}")
def near(x, want, tol): return abs(x - want) <= tol * abs(want)
# the model: GPT-3 1.3B at mp2 (vocabulary padded to 128 x mp), 12 blocks a stage
C, T, B, M, L = 2048, 2048, 4, 512 // (8 * 4), 12
V = -(-50257 // 256) * 256
block = 6 * C * C + 9.5 * C  # qkv, proj, fc, fc-proj split over 2; their biases, the LayerNorms
P = {0: L * block + V // 2 * C + T * C,  # stage 0: the embedding's half of the vocabulary, the positions
     1: L * block + V // 2 * C + 2 * C}  # stage 1: the tied embedding's copy, the final LayerNorm
emb = {0: V // 2 * C + T * C, 1: V // 2 * C + 2 * C}  # the last bucket (blocking in either mode)
bw_x, bw_in, lat_x, lat_in, mem_bw = 22e9, 240e9, 2e-5, 1e-5, 1631.2e9
ar = lambda n, esz: 2 * 7 / 8 * n * esz / bw_x  # a data-parallel ring all-reduce, without latency
if all(r.values()):
    dp = lambda n: r[n]["comm_s"]["data_parallel"]
    on, off, alt, bf, offbf = (r[n]["step_s"] for n in "on off alt bf offbf".split())
    crit = r["off"]["critical_stage"]
    # dp_overlap off: the critical stage's buckets all blocking: bytes / bandwidth (+ at most 40 buckets' latency)
    want = ar(P[crit], 4)
    x = dp("off")
    say(x["hidden"] == 0 and want <= x["exposed"] <= want + 40 * 4 * lat_x,
        f"dp_overlap off: data-parallel all-reduce exposed {x['exposed']:.4f} s, none hidden; expected "
        f"2 x 7/8 x 4 B x {P[crit] / 1e6:.1f} M / 22 GB/s = {want:.4f} s + latencies")
    gain, most = off - on, ar(P[0], 4) - ar(emb[0], 4)
    say(0.25 * most <= gain <= most * 1.01,
        f"dp_overlap on is {gain:.4f} s a step faster than off: at most the overlappable all-reduces "
        f"({most:.4f} s), at least a quarter of them")
    say(on < alt < off and abs(alt - (on + off) / 2) <= 1e-9 * on,
        f"dp_overlap alternate: {alt:.5f} s, the mean of on {on:.5f} and off {off:.5f} (odd steps overlapped, even "
        f"blocking)")
    # bf16 payloads, off: the stage-0 all-reduces at half the bytes, less the two conversion passes
    conv = 2 * 6 * P[0] / mem_bw
    want = ar(P[0], 4) - ar(P[0], 2) - conv
    say(near(off - offbf, want, 0.05),
        f"grad_comm_dtype bfloat16 (dp_overlap off): {off - offbf:.4f} s a step less; expected half of "
        f"{ar(P[0], 4):.4f} s of all-reduce less {conv:.4f} s of conversions = {want:.4f} s (5 %)")
    x, y = dp("offbf")["exposed"], dp("off")["exposed"]
    say(near(x - (y - ar(P[crit], 2)), 0, 0.02 * y) or near(x, y / 2, 0.03),
        f"grad_comm_dtype bfloat16: exposed all-reduce {x:.4f} s against fp32's {y:.4f} s (half the bytes)")
    lo = ar(emb[0], 2) - conv
    say(lo <= on - bf <= ar(P[0], 2) * 1.01,
        f"grad_comm_dtype bfloat16 (dp_overlap on): {on - bf:.4f} s a step less, between the blocking embedding "
        f"bucket's half less the conversions ({lo:.4f} s) and half of every bucket ({ar(P[0], 2):.4f} s)")
    # pipeline sends: 2 M sends of B x T x C activations, bf16 under O2, fp32 under O1 (within a host)
    sends = lambda n: r[n]["comm_s"]["pipeline"]["exposed"] + r[n]["comm_s"]["pipeline"]["hidden"]
    want = 2 * M * B * T * C * 2 / bw_in
    say(near(sends("on"), want + 2 * M * 2 * lat_in, 0.03),
        f"pipeline sends under O2: {sends('on'):.5f} s a step; expected 2 x {M} x {B * T * C * 2 / 1e6:.1f} MB "
        f"(bf16) / 240 GB/s + latencies = {want + 2 * M * 2 * lat_in:.5f} s")
    say(near(sends("o1") - sends("on"), want, 0.03),
        f"pipeline sends under O1: {sends('o1') - sends('on'):.5f} s more than O2 (fp32 activations, twice the "
        f"bytes); expected {want:.5f} s")
    # tensor parallel: the all-reduces (fp32 sums) the same under O1 and O2; with sp, 6 all-gathers a block (f and
    # g's 4, the 2 LayerNorm outputs again in backward; and the last stage's final LayerNorm's) move bf16 under O2
    tp = lambda n: r[n]["comm_s"]["tensor_parallel"]["exposed"]
    say(abs(tp("o1") - tp("on")) <= 1e-6 * tp("on"),
        f"tensor parallel without sp: O1 {tp('o1'):.4f} s = O2 {tp('on'):.4f} s (fp32 sums in both)")
    ag = M * 0.5 * B * T * C * 2 / bw_in  # one all-gather's bytes saved a step: ring (g-1)/g of N x C x 2 B
    say(6 * L * ag * 0.99 <= tp("spo1") - tp("sp") <= (6 * L + 1) * ag * 1.01,
        f"tensor parallel with sp: O1 {tp('spo1'):.4f} s, O2 {tp('sp'):.4f} s: the 16-bit all-gathers save "
        f"{tp('spo1') - tp('sp'):.4f} s; expected {6 * L} to {6 * L + 1} all-gathers x {ag / M * 1e6:.1f} us x {M}")
    # ZeRO-2: every window's reduce-scatter (12 blocks and the embedding's vocabulary blocks) halves in bytes
    rs = lambda n: r[n]["comm_s"]["zero_reduce_scatter"]["exposed"] + r[n]["comm_s"]["zero_reduce_scatter"]["hidden"]
    Pz = P[r["z2"]["critical_stage"]]
    want = M * 7 / 8 * Pz * 4 / bw_x
    say(want <= rs("z2") <= want * 1.05,
        f"ZeRO-2 reduce-scatters, fp32: {rs('z2'):.4f} s a step; expected {M} x 7/8 x 4 B x {Pz / 1e6:.1f} M / "
        f"22 GB/s = {want:.4f} s + latencies")
    say(near(rs("z2") - rs("z2bf"), want / 2, 0.03) and r["z2bf"]["step_s"] < r["z2"]["step_s"],
        f"ZeRO-2 reduce-scatters, bf16: {rs('z2bf'):.4f} s, {rs('z2') - rs('z2bf'):.4f} s less (expected half of "
        f"{want:.4f} s); the step {r['z2']['step_s']:.4f} -> {r['z2bf']['step_s']:.4f} s")
    say(r["on"].get("precision") == "bf16 O2" and r["o1"].get("precision") == "bf16 O1",
        f"the JSON names the precision priced: {r['on'].get('precision')}, {r['o1'].get('precision')}")
PY
while read -r v what; do check_if "$v" "$what"; done <"$tmp/verdicts"
[ -s "$tmp/verdicts" ] || bad "the checks did not run"

# the answer's first lines name the precision, and say how to ask for bf16 when it priced fp32
ev="--evaluate --machine_profile $PROF --model_name_or_path gpt3-1.3b --max_seq_len 2048 --global_batch_size 64
  --micro_batch_size 4 --dp_degree 8 --mp_degree 2 --max_steps 10 --nodes 2 --input_dir $tmp/no_data"
# shellcheck disable=SC2086
"$LLM4D" plan $ev >"$tmp/fp32.txt" 2>&1
check_if "$(yes_if bash -c "head -3 '$tmp/fp32.txt' | grep -q 'precision priced: fp32 .*--use_amp true'")" \
  "--evaluate without --use_amp: $(sed -n 3p "$tmp/fp32.txt" | cut -c1-110)..."
# shellcheck disable=SC2086
"$LLM4D" plan $ev --use_amp true >"$tmp/bf16.txt" 2>&1
check_if "$(yes_if bash -c "head -3 '$tmp/bf16.txt' | grep -q 'precision priced: bf16 O2'")" \
  "--evaluate --use_amp true: $(sed -n 3p "$tmp/bf16.txt" | cut -c1-60)..."
srch="--machine_profile $PROF --model_name_or_path gpt3-1.3b --max_seq_len 2048 --global_batch_size 64 --nodes 2
  --ranks_per_node 8 --memory_per_node 200 --top 2 --input_dir $tmp/no_data"
# shellcheck disable=SC2086
"$LLM4D" plan $srch --explain --explain_lines 3 >"$tmp/search.txt" 2>"$tmp/search.err"
# shellcheck disable=SC2086
"$LLM4D" plan $srch --explain --json >"$tmp/search.json" 2>>"$tmp/search.err"
check_if "$(yes_if bash -c "head -3 '$tmp/search.txt' | grep -q 'precision priced: fp32 .*--use_amp true'")" \
  "a search without --use_amp says it priced fp32 in its first lines"
verdict=$(/usr/bin/python3 - "$tmp/search.txt" "$tmp/search.json" <<'PY'
import json, re, sys
from collections import Counter
txt = open(sys.argv[1]).read().splitlines()
try:
    js = json.load(open(sys.argv[2]))
except Exception as e:
    print(f"0 no JSON answer ({e})"); sys.exit()
# the oracle: the complete list, grouped by message without its numbers
want = Counter(re.sub(r"\d+(\.\d+)*", "#", x["reason"]) for x in js["rejected"])
try:
    s = next(i for i, l in enumerate(txt) if l.startswith("rejected ") and "reasons" in l)
    first_layout = next(i for i, l in enumerate(txt) if re.match(r"\s+\d+\.\s+dp", l) or re.match(r"\s{4}dp\d", l))
except StopIteration:
    print("0 no summary or no layout line"); sys.exit()
rows = []
for l in txt[s + 1:]:
    m = re.match(r"\s+(\d+)\s+(invalid|does not fit memory|refused): (.*)$", l)
    if not m: break
    rows.append((int(m.group(1)), re.sub(r"\d+(\.\d+)*", "#", m.group(3))))
got = Counter({k: n for n, k in rows})
detail = [l for l in txt if re.match(r"\s{4}dp\d", l)]
more = [int(m.group(1)) for l in txt for m in [re.match(r"\s+\.\.\. and (\d+) more", l)] if m]
ok = s < first_layout and got == want and len(detail) + sum(more) == len(js["rejected"]) and \
     all(c <= 3 for c in Counter(re.sub(r"\d+(\.\d+)*", "#", l[39:]) for l in detail).values())
print(f"{1 if ok else 0} --explain: {len(rows)} reasons counted ({sum(got.values())} rejections) before any layout's "
      f"line, as the complete JSON list groups them ({sum(want.values())}); {len(detail)} listed, at most 3 a reason, "
      f"{sum(more)} counted as left out")
PY
)
check_if "${verdict%% *}" "${verdict#* }"
finish
