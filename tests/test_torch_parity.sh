#!/usr/bin/env bash
# PyTorch parity of the single-process model: llm4d trains gpt2-tiny for 10 steps (dropout off, gradient
# accumulation 2, clipping and warmup+cosine on) and dumps its initial weights, batches, step-1 logits and
# gradients; tests/torch_ref.py rebuilds the model in PyTorch from those weights and compares.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
test_setup
"$LLM4D" train --model_name_or_path gpt2-tiny --input_dir "$SRC_DIR/data/fortunes_ids.npz" \
    --output_dir "$tmp/out" --max_seq_len 32 --micro_batch_size 2 --global_batch_size 4 --max_steps 10 \
    --max_lr 3e-3 --min_lr 3e-4 --warmup_rate 0.2 --decay_steps 10 --weight_decay 0.01 --grad_clip 0.5 \
    --logging_freq 5 --seed 1234 --threads 2 \
    -o Model.hidden_dropout_prob=0 -o Model.attention_probs_dropout_prob=0 \
    --debug_dump "$tmp/dump" >"$tmp/log" 2>&1 || { cat "$tmp/log"; bad "the 10-step training run failed"; finish; }
/usr/bin/python3 "$SRC_DIR/tests/torch_ref.py" "$tmp/dump" "$tmp/out/metrics.jsonl"
