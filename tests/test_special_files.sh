#!/usr/bin/env bash
# test_special_files.sh — input paths that name something other than a file (issue 15: bad input gets one line and
# exit 2, never a hang or a crash). A config that is a named pipe used to hang in fopen until a writer came; a
# vocabulary file that is /dev/zero was read until memory ran out. Each case runs under a 20 s timeout, so a hang is
# a failed check (exit 124), not a stuck suite. Also a malformed LLM4D_FAULT (the fault-injection variable) is
# refused the same way.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
test_setup
export OMP_NUM_THREADS=1
T=(timeout 20)
mkfifo "$tmp/fifo"
mkdir -p "$tmp/dir" "$tmp/vzero" "$tmp/vfifo"
cp "$SRC_DIR/fuzz/vocab/vocab.bpe" "$tmp/vzero/" && ln -s /dev/zero "$tmp/vzero/encoder.json"
cp "$SRC_DIR/fuzz/vocab/encoder.json" "$tmp/vfifo/" && mkfifo "$tmp/vfifo/vocab.bpe"
printf '_base_: ./fifo\nEngine:\n  max_steps: 1\n' >"$tmp/base_fifo.yaml"

refused "-c a named pipe (used to wait for a writer forever)" "is a named pipe" "${T[@]}" "$LLM4D" train -c "$tmp/fifo"
refused "-c a directory" "is a directory" "${T[@]}" "$LLM4D" train -c "$tmp/dir"
refused "-c /dev/zero" "/dev/zero" "${T[@]}" "$LLM4D" train -c /dev/zero
refused "_base_ naming a named pipe" "is a named pipe" "${T[@]}" "$LLM4D" train -c "$tmp/base_fifo.yaml"
refused "encoder.json -> /dev/zero (used to be read until memory ran out)" "is a device" \
    "${T[@]}" "$LLM4D" tokenize --vocab_dir "$tmp/vzero" hello
refused "vocab.bpe a named pipe" "is a named pipe" "${T[@]}" "$LLM4D" tokenize --vocab_dir "$tmp/vfifo" hello
refused "prepare-data --input /dev/zero" "is a device" "${T[@]}" "$LLM4D" prepare-data --input /dev/zero \
    --output-prefix "$tmp/out/p" --vocab_dir "$SRC_DIR/fuzz/vocab" --workers 1
refused "LLM4D_FAULT malformed" "LLM4D_FAULT 'enospc@x'" env LLM4D_FAULT=enospc@x "${T[@]}" "$LLM4D" train \
    --model_name_or_path gpt2-tiny -o Model.num_layers=1 --input_dir "$SRC_DIR/data/fortunes_ids.npz" \
    --max_seq_len 16 --global_batch_size 2 --micro_batch_size 2 --max_steps 1 --output_dir "$tmp/o"
finish
