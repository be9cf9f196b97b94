#!/usr/bin/env bash
# PyTorch parity of the single-process model: llm4d trains a model for 10 steps (dropout off, gradient
# accumulation 2, clipping and warmup+cosine on) and dumps its initial weights, batches, step-1 logits and
# gradients; tests/torch_ref.py rebuilds the model in PyTorch from those weights and compares. Models: gpt2-tiny;
# llama-tiny (RMSNorm, rotary positions, SwiGLU, grouped-query attention with 2 key/value heads for 4 heads, no
# biases, untied head); llama-tiny as multi-query attention (1 key/value head) with rope_theta 500000.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
test_setup
models=("gpt2-tiny" "llama-tiny" "llama-tiny -o Model.num_key_value_heads=1 -o Model.rope_theta=500000")
for k in "${!models[@]}"; do
  read -ra model <<<"${models[$k]}"
  d=$tmp/m$k
  if ! "$LLM4D" train --model_name_or_path "${model[@]}" --input_dir "$SRC_DIR/data/fortunes_ids.npz" \
      --output_dir "$d/out" --max_seq_len 32 --micro_batch_size 2 --global_batch_size 4 --max_steps 10 \
      --max_lr 3e-3 --min_lr 3e-4 --warmup_rate 0.2 --decay_steps 10 --weight_decay 0.01 --grad_clip 0.5 \
      --logging_freq 5 --seed 1234 --threads 2 \
      -o Model.hidden_dropout_prob=0 -o Model.attention_probs_dropout_prob=0 \
      --debug_dump "$d/dump" >"$d.log" 2>&1; then
    cat "$d.log"; bad "${models[$k]}: the 10-step training run failed"; continue
  fi
  echo "--- ${models[$k]}"
  /usr/bin/python3 "$SRC_DIR/tests/torch_ref.py" "$d/dump" "$d/out/metrics.jsonl" | tee "$d.ref"
  rc=${PIPESTATUS[0]}
  check_if $(yes_if test "$rc" = 0) "${models[$k]}: logits, gradients and 10 AdamW steps equal to PyTorch's"
done
finish
