#!/usr/bin/env bash
# bench_plan_published.sh — the planner against published GPU training runs (issue 28 item 6, issue 46 item 4;
# reported, a benchmark, not a test): with a machine profile written from published A100 figures
# (bench/profiles/a100_selene.json, its "sources" say where each number comes from), `llm4d plan --evaluate` predicts
# each published run's seconds per step from the run's own layout, and the table prints published against predicted,
# the error of each row, the mean absolute error, and whether llm4d's memory plan fits the run in the GPUs' memory
# (the planner's own test, plan --evaluate's "fits" with the row's GPU memory as --memory_per_rank: every rank within
# its GPU and every host within the profile's memory per host; "NO rank" or "NO host" names the limit it is over).
#
# The rows (every model GPT-style at sequence 2048, bf16/fp16 mixed precision, A100 SXM, 8 per DGX host):
#   K22  Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models" (arXiv 2205.05198),
#        Table 5: seconds per iteration, full recompute and "present work" (sequence parallelism + selective
#        recompute), for the layouts of its Table 3 (22B t8 p1 mbs 4 gbs 4; 175B t8 p8 gbs 64; 530B t8 p35 gbs 280;
#        1T t8 p64 gbs 512; mbs 1 beyond 22B; interleaved with 3 virtual stages for 175B and 530B). NOT read at the
#        paper here: the times and layouts are as transcribed by Calculon (github.com/calculon-ai/calculon,
#        calculon/megatron/validation.py and validation/{22B,175B,530B,1T}_{full,seqsel}.json), which confirm the
#        issue's point: 22B's micro-batch is 4 (this bench had 1) and 175B and 530B are interleaved (3 virtual stages).
#   N21  Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM"
#        (SC21, arXiv 2104.04473), Table 2, PTD-P rows: 175B (96 layers, 12288, 96 heads) t8 p12 gbs 1536 on 384,
#        768, 1536 GPUs at 153, 149, 141 TFLOP/s per GPU; 530B (105, 20480, 128) t8 p35 gbs 2240 on 560, 1120, 2240
#        GPUs at 171, 167, 159. As transcribed by llm-analysis (github.com/cli99/llm-analysis,
#        examples/megatron-lm/run_train.sh); the micro-batch and interleaving are not in that transcription: mbs 1,
#        no interleaving assumed. Full recompute (the paper's runs all recompute).
#        TFLOP/s become seconds with the paper's own FLOP count, Eq. 3, which counts the recompute (its 4x factor):
#        F = 96 B s l h^2 (1 + s / 6h + V / 16 l h), step = F / (GPUs x TFLOP/s).
#   N21T Narayanan et al. 2021 Table 1 (1.7B to 1T, 32 to 3072 GPUs): UNVERIFIED, recalled, not read at a source
#        here (the paper's text was not found in the stored pages); printed for reference and left out of the mean.
#        Micro-batch 1 assumed.
#   MTNLG Smith et al. 2022, "Using DeepSpeed and Megatron to Train Megatron-Turing NLG 530B" (arXiv 2201.11990),
#        Section 2.4: global batch 1920 on 280, 350, 420 DGX A100 80GB hosts (t8 p35, so d 8, 10, 12): 60.1, 50.2,
#        44.4 s per iteration (126, 121, 113 TFLOP/s). As transcribed by llm-analysis
#        (examples/megatron-turing-nlg/README.md); vocabulary 50272; mbs 1 and full recompute assumed.
#   BLOOM Le Scao et al. 2022, BLOOM 176B (70 layers, 14336, 112 heads, vocabulary 250880, ALiBi) on 384 A100 80GB
#        (48 hosts, Jean Zay): t4 p12 d8 mbs 2 gbs 2048, ZeRO-1, full recompute, 105 s per iteration (~150 TFLOP/s):
#        github.com/bigscience-workshop/bigscience train/tr11-176B-ml/README.md ("Replica setup", and the 105 s of
#        its days-left formula). Jean Zay's hosts have 4 Omni-Path links, not Selene's 8 HDR: the Selene profile's
#        inter-host bandwidth overstates it (its data-parallel traffic is small beside 105 s).
# What llm4d cannot express, and the approximation used: llm4d prices its own engine (its flash-style attention, its
# fp32 tensor-parallel sums, its AdamW) on the profile's rates, not Megatron's kernels; selective recompute is
# llm4d's core_attn granularity (no block run again: the flash-style attention's backward rebuilds the scores in
# every mode, and under sequence parallelism a block keeps its LayerNorm outputs sharded and gathers them again in
# backward, as Megatron does); a machine's rates stand in for the backend.
#   bench/bench_plan_published.sh [llm4d binary] [profile]
set -euo pipefail
cd "$(dirname "$0")/.."
LLM4D=${1:-build/llm4d}
PROF=${2:-bench/profiles/a100_selene.json}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# id source heads hidden layers vocab tp pp vpp zero1 mbs gbs recompute(full|sel) gpus gpu_GB published unit ok
rows=(
  "K22-22B-full    K22:T5 64  6144  48  51200  8 1  1 0 4 4    full 8    80 1.42  s 1"
  "K22-22B-sel     K22:T5 64  6144  48  51200  8 1  1 0 4 4    sel  8    80 1.10  s 1"
  "K22-175B-full   K22:T5 96  12288 96  51200  8 8  3 0 1 64   full 64   80 18.13 s 1"
  "K22-175B-sel    K22:T5 96  12288 96  51200  8 8  3 0 1 64   sel  64   80 13.75 s 1"
  "K22-530B-full   K22:T5 128 20480 105 51200  8 35 3 0 1 280  full 280  80 49.05 s 1"
  "K22-530B-sel    K22:T5 128 20480 105 51200  8 35 3 0 1 280  sel  280  80 37.83 s 1"
  "K22-1T-full     K22:T5 160 25600 128 51200  8 64 1 0 1 512  full 512  80 94.42 s 1"
  "K22-1T-sel      K22:T5 160 25600 128 51200  8 64 1 0 1 512  sel  512  80 71.49 s 1"
  "N21-175B-384    N21:T2 96  12288 96  51200  8 12 1 0 1 1536 full 384  80 153 tflops 1"
  "N21-175B-768    N21:T2 96  12288 96  51200  8 12 1 0 1 1536 full 768  80 149 tflops 1"
  "N21-175B-1536   N21:T2 96  12288 96  51200  8 12 1 0 1 1536 full 1536 80 141 tflops 1"
  "N21-530B-560    N21:T2 128 20480 105 51200  8 35 1 0 1 2240 full 560  80 171 tflops 1"
  "N21-530B-1120   N21:T2 128 20480 105 51200  8 35 1 0 1 2240 full 1120 80 167 tflops 1"
  "N21-530B-2240   N21:T2 128 20480 105 51200  8 35 1 0 1 2240 full 2240 80 159 tflops 1"
  "MTNLG-530B-2240 MTNLG  128 20480 105 50272  8 35 1 0 1 1920 full 2240 80 60.1  s 1"
  "MTNLG-530B-2800 MTNLG  128 20480 105 50272  8 35 1 0 1 1920 full 2800 80 50.2  s 1"
  "MTNLG-530B-3360 MTNLG  128 20480 105 50272  8 35 1 0 1 1920 full 3360 80 44.4  s 1"
  "BLOOM-176B-384  BLOOM  112 14336 70  250880 4 12 1 1 2 2048 full 384  80 105   s 1"
  "N21T-1.7B       N21:T1 24  2304  24  51200  1 1  1 0 1 512  full 32   80 137 tflops 0"
  "N21T-3.6B       N21:T1 32  3072  30  51200  2 1  1 0 1 512  full 64   80 138 tflops 0"
  "N21T-7.5B       N21:T1 32  4096  36  51200  4 1  1 0 1 512  full 128  80 142 tflops 0"
  "N21T-18.4B      N21:T1 48  6144  40  51200  8 1  1 0 1 1024 full 256  80 135 tflops 0"
  "N21T-39.1B      N21:T1 64  8192  48  51200  8 2  1 0 1 1536 full 512  80 138 tflops 0"
  "N21T-76.1B      N21:T1 80  10240 60  51200  8 4  1 0 1 1792 full 1024 80 140 tflops 0"
  "N21T-145.6B     N21:T1 96  12288 80  51200  8 8  1 0 1 2304 full 1536 80 148 tflops 0"
  "N21T-310.1B     N21:T1 128 16384 96  51200  8 16 1 0 1 2160 full 1920 80 155 tflops 0"
  "N21T-529.6B     N21:T1 128 20480 105 51200  8 35 1 0 1 2520 full 2520 80 163 tflops 0"
  "N21T-1008B      N21:T1 160 25600 128 51200  8 64 1 0 1 3072 full 3072 80 163 tflops 0"
)
echo "# published A100 runs against llm4d plan --evaluate, profile $PROF"
for row in "${rows[@]}"; do
  read -r id src heads hidden layers vocab tp pp vpp zero1 mbs gbs rc gpus gb pub unit ok <<<"$row"
  args=(--max_seq_len 2048 -o Model.vocab_size="$vocab" -o Model.hidden_size="$hidden" -o Model.num_layers="$layers"
        -o Model.num_attention_heads="$heads" -o Model.max_position_embeddings=2048 --use_amp true
        --mp_degree "$tp" --pp_degree "$pp" --micro_batch_size "$mbs" --global_batch_size "$gbs" --max_steps 10
        --nodes $((gpus / 8)) --ranks_per_node 8 --machine_profile "$PROF" --use_recompute true
        --memory_per_rank "$gb")
  [ "$vpp" -gt 1 ] && args+=(--virtual_pp_degree "$vpp" --pp_schedule interleaved)
  [ "$zero1" = 1 ] && args+=(--sharding_degree $((gpus / tp / pp)) --sharding_stage 1)
  [ "$rc" = sel ] && args+=(-o Model.recompute_granularity=core_attn --sequence_parallel true)
  t0=$(date +%s.%N)
  if ! "$LLM4D" plan --evaluate --json "${args[@]}" >"$tmp/$id.json" 2>"$tmp/$id.err"; then
    echo "$id: llm4d plan --evaluate failed: $(head -c 300 "$tmp/$id.err")"; exit 1
  fi
  echo "$row $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')" >>"$tmp/rows"
done
/usr/bin/python3 - "$tmp" <<'PY'
import json, sys
tmp = sys.argv[1]
S = 2048
def step_of_tflops(B, l, h, V, gpus, tflops):  # Narayanan et al. 2021 Eq. 3 (counts the recompute)
    F = 96 * B * S * l * h * h * (1 + S / (6 * h) + V / (16 * l * h))
    return F / (gpus * tflops * 1e12)
print(f"{'run':16} {'source':7} {'t/p/d':>10} {'vpp':>3} {'mbs':>3} {'gbs':>5} {'rc':>4} {'GPUs':>5} "
      f"{'published':>12} {'pub s':>7} {'pred s':>7} {'error':>7} {'peak GiB':>8} {'fits':>7} {'ans s':>5}")
errs, unver = [], []
for line in open(f"{tmp}/rows"):
    (rid, src, heads, hidden, layers, vocab, tp, pp, vpp, zero1, mbs, gbs, rc, gpus, gb, pub, unit, ok,
     secs) = line.split()
    h, l, V, G = int(hidden), int(layers), int(vocab), int(gpus)
    o = json.load(open(f"{tmp}/{rid}.json"))
    pub_s = float(pub) if unit == "s" else step_of_tflops(int(gbs), l, h, V, G, float(pub))
    pred = o["step_s"]
    err = 100 * (pred - pub_s) / pub_s
    (errs if ok == "1" else unver).append(abs(err))
    d = G // (int(tp) * int(pp))
    # the planner's own fit (plan --evaluate's "fits": every rank within its GPU's gpu_GB, given as --memory_per_rank,
    # and every host within the profile's memory per host), and the limit it is over
    fits = "yes" if o["fits"] else "NO " + o["over_limit"]
    shown = f"{pub} s" if unit == "s" else f"{pub} TFLOP/s"
    mark = "" if ok == "1" else " (unverified)"
    print(f"{rid:16} {src:7} {tp + '/' + pp + '/' + str(d):>10} {vpp:>3} {mbs:>3} {gbs:>5} {rc:>4} {G:5d} "
          f"{shown:>12} {pub_s:7.2f} {pred:7.2f} {err:+6.1f}% {o['peak_mib'] / 1024:8.1f} {fits:>7} {secs:>5}{mark}")
print(f"mean absolute error {sum(errs) / len(errs):.1f} % over the {len(errs)} sourced rows (target <= 10 %)")
if unver:
    print(f"mean absolute error {sum(unver) / len(unver):.1f} % over the {len(unver)} unverified rows (not counted)")
PY
