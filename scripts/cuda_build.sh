#!/usr/bin/env bash
# cuda_build.sh — the CUDA build (issue 26): configure build-cuda/ with -DLLM4D_CUDA=ON, build it (every .cu and
# cuda_*.c with warnings as errors, so CI keeps the kernels compiling on a machine without a GPU), then run the tests
# of the CUDA backend there: the host-side ones pass anywhere, the GPU ones (ctest label cuda) skip with exit 77
# where no GPU is present. Needs the CUDA toolkit (nvcc, cuBLASLt); .ci/run calls it where nvcc is installed.
#   scripts/cuda_build.sh [ctest args]   (default: -R 'cuda|dev_arena')
set -uo pipefail
cd "$(dirname "$0")/.."
B=${LLM4D_CUDA_BUILD:-build-cuda}
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DLLM4D_CUDA=ON >"/tmp/llm4d-cuda-configure.$$.log" 2>&1 ||
  { tail -20 "/tmp/llm4d-cuda-configure.$$.log"; rm -f "/tmp/llm4d-cuda-configure.$$.log"; exit 1; }
rm -f "/tmp/llm4d-cuda-configure.$$.log"
cmake --build "$B" -j"$(nproc)" >"$B/build.log" 2>&1 || { tail -30 "$B/build.log"; exit 1; }
echo "cuda_build: built $B/llm4d with the CUDA backend"
[ $# -gt 0 ] || set -- -R 'cuda|dev_arena'
ctest --test-dir "$B" --output-on-failure "$@"
