#!/usr/bin/env bash
# test_grad_comm_bf16.sh — bf16 payloads for the gradient reductions (Distributed.grad_comm_dtype bfloat16, off by
# default): data parallel's all-reduce and ZeRO-2's reduce-scatters carry bf16, each rank's gradient rounded to bf16
# before the sum. gpt2-tiny, 200 steps (global batch 4 x 16 tokens, dropout on), against one process in fp32:
#   - dp2 and sharding2 stage 2 with bf16 payloads stay within 1 % of the one-process loss at every step, and are
#     not bit-identical to it (the payloads were rounded: a run that ignored the key would match within 1e-5);
#   - the bytes dp2 sends per step with bf16 payloads are half those with fp32 (the gradients' part; a few scalars
#     of the loss and the norm stay fp32), and start-up says which payload the engine reduces;
#   - a payload type other than float32 or bfloat16 gets one line, exit 2.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
test_setup
export OMP_NUM_THREADS=1
C=(--model_name_or_path gpt2-tiny --input_dir "$SRC_DIR/data/fortunes_ids.npz" --max_seq_len 16 --global_batch_size 4
   --max_steps 200 --max_lr 1e-3 --min_lr 1e-4 --warmup_rate 0.01 --decay_steps 200 --grad_clip 1.0 --logging_freq 50
   --seed 7 -o Model.hidden_dropout_prob=0.1 -o Model.attention_probs_dropout_prob=0.1 --eval_freq 0 --save_steps -1)
"$LLM4D" train "${C[@]}" --micro_batch_size 4 --output_dir "$tmp/one" >"$tmp/one.log" 2>&1 ||
    { bad "one process failed: $(tail -2 "$tmp/one.log")"; finish; }
two() { # name args...
    local name=$1
    shift
    "$LLM4D" launch --nproc 2 --log_dir "$tmp/$name/log" -- train "${C[@]}" --micro_batch_size 2 \
        --output_dir "$tmp/$name/out" "$@" >"$tmp/$name.log" 2>&1 || bad "$name failed: $(tail -2 "$tmp/$name.log")"
}
two dp2_bf16 --dp_degree 2 --grad_comm_dtype bfloat16
two sh2_bf16 --sharding_degree 2 --sharding_stage 2 --grad_comm_dtype bfloat16
two dp2_fp32 --dp_degree 2 --max_steps 3
check "dp2 says it reduces bf16 payloads" grep -q "gradients all-reduced in .* buckets .*, bf16 payloads" \
    "$tmp/dp2_bf16/log/workerlog.0"
while read -r verdict msg; do check_if "$verdict" "$msg"; done < <(/usr/bin/python3 - "$tmp" <<'PY'
import json, sys
tmp = sys.argv[1]
def losses(p):
    try:
        return [json.loads(l) for l in open(p)]
    except OSError:
        return []
ref = losses(f"{tmp}/one/metrics.jsonl")
for name in ("dp2_bf16", "sh2_bf16"):
    m = losses(f"{tmp}/{name}/out/metrics.jsonl")
    if len(m) != 200 or len(ref) != 200:
        print(0, f"{name}: 200 steps of metrics ({len(m)}, reference {len(ref)})")
        continue
    rel = max(abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(m, ref))
    ab = max(abs(a["loss"] - b["loss"]) for a, b in zip(m, ref))
    print(int(rel <= 0.01), f"{name}: 200-step loss within 1 % of one process in fp32 (max relative difference "
          f"{rel:.2e}; last step {m[-1]['loss']:.5f} against {ref[-1]['loss']:.5f})")
    print(int(ab > 1e-5), f"{name}: and not the fp32 curve (max |diff| {ab:.2e} > 1e-5: the payloads were rounded)")
b16, b32 = losses(f"{tmp}/dp2_bf16/out/metrics.jsonl"), losses(f"{tmp}/dp2_fp32/out/metrics.jsonl")
if b16 and b32:
    x, y = b16[1]["comm_bytes"], b32[1]["comm_bytes"]
    print(int(abs(x - y / 2) <= 64), f"dp2 sends {x} bytes per step with bf16 payloads, {y} with fp32: half, within "
          f"a few scalars")
else:
    print(0, "dp2 bytes per step: no metrics")
PY
)
refused "a payload type that is not float32 or bfloat16" "grad_comm_dtype (Distributed.grad_comm_dtype) must be" \
    "$LLM4D" train "${C[@]}" --micro_batch_size 4 --output_dir "$tmp/bad" --grad_comm_dtype float16
finish
