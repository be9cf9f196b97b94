#!/usr/bin/env bash
# llm4d_env.sh — build-device/llm4d in the device kit's environment (the unpacked oneDNN, MPI, ... of
# ../shared/tools/device/remote.sh), so that a script whose other commands must run outside that environment
# (bench/bench_gpu.sh's PyTorch) can still start llm4d: LLM4D=tests/gpu/llm4d_env.sh.
. "${LLM4D_DEPS:-/opt/llm4d-deps}/env.sh" || exit 1
exec "$(dirname "$0")/../../build-device/llm4d" "$@"
