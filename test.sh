#!/usr/bin/env bash
# The test command of the quick start: install what is missing, build, run the whole suite (ctest).
set -euo pipefail
cd "$(dirname "$0")"
LLM4D_TEST_DEPS=1 scripts/setup.sh
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
ctest --test-dir build --output-on-failure --timeout 900 "$@"
