#!/usr/bin/env bash
# The main command of the quick start: install what is missing, build, and train a small GPT on the shipped
# English corpus (data/fortunes_ids.npz) in two data-parallel processes, printing PaddleNLP's log line.
# Extra arguments are passed to `llm4d train` (e.g. --max_steps 50).
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup.sh
exec build/llm4d launch --nproc 2 --log_dir log/quickstart -- train -c configs/gpt2-tiny.yaml \
  --input_dir data/fortunes_ids.npz --dp_degree 2 --output_dir output/quickstart "$@"
