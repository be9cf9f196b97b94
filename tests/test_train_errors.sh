#!/usr/bin/env bash
# Bad input to `llm4d train`: each case must exit with code 2 and print exactly one line on stderr that names the
# problem (checked by a word it must contain), never crash or hang. The line is `llm4d train: <message>`, the verbs'
# form (src/cli/cli.h); an unknown verb's is `llm4d: ...`, since no verb runs.
set -uo pipefail
source "$(dirname "$0")/lib.sh"
test_setup
PY=/usr/bin/python3
DATA="$SRC_DIR/data/fortunes_ids.npz"
BASE=(--model_name_or_path gpt2-tiny --max_seq_len 16 --micro_batch_size 2 --global_batch_size 2 --max_steps 1
      --output_dir "$tmp/out")

expect() { # name, word the message must contain, then the llm4d arguments
  local name=$1 word=$2 prefix="llm4d: "; shift 2
  [ "$1" = train ] && prefix="llm4d train: "
  timeout 60 "$LLM4D" "$@" >"$tmp/stdout" 2>"$tmp/stderr"
  local rc=$? lines
  lines=$(wc -l <"$tmp/stderr")
  if [ "$rc" = 2 ] && [ "$lines" = 1 ] && grep -qi -- "$word" "$tmp/stderr" &&
     [[ $(cat "$tmp/stderr") == "$prefix"* ]]; then
    ok "$name: $(cat "$tmp/stderr")"
  else
    bad "$name: exit $rc, $lines stderr lines (want 2, 1 starting '$prefix', containing '$word'):"
    cat "$tmp/stderr"
  fi
}

printf 'Global:\n  seed: [1, 2\nModel:\n  hidden_size: 64\n' >"$tmp/bad.yaml"
expect "malformed YAML" "bad.yaml:" train -c "$tmp/bad.yaml" --input_dir "$DATA"
printf 'Model:\n  hiden_size: 64\n' >"$tmp/typo.yaml"
expect "unknown YAML key" "hidden_size" train -c "$tmp/typo.yaml" --input_dir "$DATA"
expect "unknown flag" "--max_lr" train "${BASE[@]}" --max_lrr 1e-3 --input_dir "$DATA"
expect "missing config file" "nope.yaml" train -c "$tmp/nope.yaml"
expect "missing npz" "missing.npz" train "${BASE[@]}" --input_dir "$tmp/missing.npz"
head -c 1000 "$DATA" >"$tmp/trunc_ids.npz"
expect "truncated npz" "trunc_ids.npz" train "${BASE[@]}" --input_dir "$tmp/trunc_ids.npz"
$PY -c "import numpy as np; np.savez('$tmp/noids_ids.npz', lens=np.array([3], dtype=np.int32), tokens=np.array([1,2,3], dtype=np.int32))"
expect "npz without ids" "ids" train "${BASE[@]}" --input_dir "$tmp/noids_ids.npz"
expect "token id >= vocab" "vocab_size" train "${BASE[@]}" --input_dir "$DATA" -o Model.vocab_size=1000
expect "max_seq_len > max_position_embeddings" "max_position_embeddings" train "${BASE[@]}" --input_dir "$DATA" \
  --max_seq_len 512
expect "global batch not a multiple of micro batch" "micro_batch_size" train "${BASE[@]}" --input_dir "$DATA" \
  --global_batch_size 3
expect "negative learning rate" "max_lr" train "${BASE[@]}" --input_dir "$DATA" --max_lr -1e-3
expect "an unknown device (tests/test_cuda_device.sh: gpu without one)" "device" train "${BASE[@]}" --input_dir "$DATA" --device tpu
expect "degrees that do not multiply to the world size" "dp_degree" train "${BASE[@]}" --input_dir "$DATA" \
  --dp_degree 2
expect "empty input directory" "$tmp/emptydir" train "${BASE[@]}" --input_dir "$tmp/emptydir"
mkdir -p "$tmp/emptydir"
expect "input directory without token files" "_ids.npz" train "${BASE[@]}" --input_dir "$tmp/emptydir"
touch "$tmp/file"
expect "output_dir under a regular file" "output_dir" train "${BASE[@]}" --input_dir "$DATA" --output_dir "$tmp/file/out"
expect "unknown verb" "verb" trainn
finish
