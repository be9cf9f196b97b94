#!/usr/bin/env bash
# run_all.sh — everything issue 26 needs a GPU for, as one call of the device tool (under 10 minutes):
#   1. the machine: GPU, driver, nvcc, NCCL (to summary.txt);
#   2. the build with the device kit, CUDA on (../shared/tools/device/README.md: the kit's debs for oneDNN, MPI...);
#   3. the GPU tests: test_cuda_kernels, test_cuda_attention (each kernel against the reference backend),
#      test_cuda_train (curves on the GPU against the CPU: fp32, bf16, dp2, mp2, pp2, 4D, checkpoints both ways,
#      generation), plus the ones that run anywhere (test_cuda_device, test_cuda_host, test_dev_arena);
#   4. profile, then bench/bench_gpu.sh (GPT-2 124M bf16 at B=16 and 32, T=1024, beside PyTorch eager and torch.compile), if the
#      time left allows it (torch.compile only with more than 5 minutes left).
# Results under $OUT (at most 8 files come back): summary.txt (what passed, the bench table), build.log, tests.log,
# LastTest.log.gz (every test's full output), bench.txt, bench_logs.tar.gz, and the kit's device.log.
# How to call it (device tool `run`, carry [".device-kit"], timeout_s 600), from the checkout's root:
#   bash tests/gpu/run_all.sh
#   5. profile (when asked: STAGES with "profile"): where the kernels' time goes in a few GPT-2 124M bf16 steps at
#      B=16, from Nsight Systems if the machine has it (kernels.csv: each kernel's total time, calls and share).
# Knobs: BUDGET (seconds for the whole script, default 570), STAGES ("build tests bench"), TESTS (ctest -R regex),
# COMPILE (1/0: torch.compile in the bench; default: only with more than 5 minutes left).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/llm4d-gpu-out}
mkdir -p "$OUT"
BUDGET=${BUDGET:-570}
STAGES=${STAGES:-build tests bench}
TESTS=${TESTS:-cuda|dev_arena}
T0=$(date +%s)
left() { echo $((BUDGET - ($(date +%s) - T0))); }
say() { echo "run_all [$(($(date +%s) - T0)) s]: $*" | tee -a "$OUT/summary.txt"; }
kit() { bash .device-kit/remote.sh "$@"; }
[ -f .device-kit/remote.sh ] || { say "no .device-kit here: pack it (../shared/tools/device/pack.sh .) and carry it"; exit 1; }

say "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?') $(git status --porcelain 2>/dev/null | wc -l) changed files"
{ nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader 2>&1 | head -2
  nvcc --version 2>/dev/null | tail -2
  ls /usr/lib/x86_64-linux-gnu/libnccl.so* 2>/dev/null | head -2
  python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)' 2>&1 | tail -1; } | sed 's/^/  /' |
  tee -a "$OUT/summary.txt"

if [[ " $STAGES " == *" build "* ]]; then
  say "build (device kit, LLM4D_CUDA=ON) ..."
  LLM4D_CMAKE_ARGS="-DLLM4D_CUDA=ON" timeout 240 bash .device-kit/remote.sh build >"$OUT/build.log" 2>&1
  rc=$?
  grep -E "build: done|error|warning: " "$OUT/build.log" | head -20 | sed 's/^/  /' | tee -a "$OUT/summary.txt"
  if [ $rc != 0 ] && grep -q "Werror\|warnings being treated as errors\|all-warnings" "$OUT/build.log"; then
    # the machine's gcc 13 may warn where bookworm's gcc 12 does not: build anyway, the warnings are in the log
    say "build failed on warnings: again with LLM4D_WERROR=OFF (fix them: build.log)"
    LLM4D_CMAKE_ARGS="-DLLM4D_CUDA=ON -DLLM4D_WERROR=OFF" timeout 240 bash .device-kit/remote.sh build \
      >>"$OUT/build.log" 2>&1
    rc=$?
  fi
  if [ $rc != 0 ]; then
    say "build FAILED (rc $rc): the end of build.log:"
    tail -30 "$OUT/build.log" | tee -a "$OUT/summary.txt"
    exit 1
  fi
fi

if [[ " $STAGES " == *" tests "* ]]; then
  t=$(($(left) - 150))
  [ $t -gt 400 ] && t=400
  say "tests ($TESTS), at most $t s ..."
  timeout $t bash .device-kit/remote.sh run ctest --test-dir build-device -R "$TESTS" -j3 --timeout 300 \
    --output-on-failure >"$OUT/tests.log" 2>&1
  say "ctest exit $?"
  grep -E "Test +#|tests passed|SKIP|FAIL|^[0-9]+ passed" "$OUT/tests.log" | head -60 | sed 's/^/  /' |
    tee -a "$OUT/summary.txt"
  if [ -f build-device/Testing/Temporary/LastTest.log ]; then
    gzip -c build-device/Testing/Temporary/LastTest.log >"$OUT/LastTest.log.gz"
    bash tests/guard.sh build-device/Testing/Temporary/LastTest.log 2>&1 | tail -8 | tee -a "$OUT/summary.txt"
  fi
fi

if [[ " $STAGES " == *" profile "* ]]; then
  NSYS=$(command -v nsys || ls /usr/local/cuda*/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
  l=$(left)
  if [ -z "$NSYS" ]; then
    say "profile skipped: no nsys on this machine"
  elif [ "$l" -lt 60 ]; then
    say "profile skipped: $l s left"
  else
    say "profile ($NSYS), at most $((l - 10)) s ..."
    rm -rf /tmp/llm4d-prof && mkdir -p /tmp/llm4d-prof
    timeout $((l - 30)) "$NSYS" profile -t cuda -o /tmp/llm4d-prof/p --force-overwrite true \
      tests/gpu/llm4d_env.sh train --model_name_or_path gpt2-en --input_dir data/fortunes_ids.npz --max_seq_len 1024 \
      --device cuda --use_amp true --amp_dtype bfloat16 --micro_batch_size 16 --global_batch_size 16 --max_steps 4 \
      --save_steps -1 -o Model.hidden_dropout_prob=0.0 -o Model.attention_probs_dropout_prob=0.0 \
      --output_dir /tmp/llm4d-prof/out >/tmp/llm4d-prof/run.log 2>&1
    say "nsys exit $?"
    timeout 60 "$NSYS" stats --report cuda_gpu_kern_sum --format csv --output /tmp/llm4d-prof/k /tmp/llm4d-prof/p.nsys-rep \
      >/tmp/llm4d-prof/stats.log 2>&1
    f=$(ls /tmp/llm4d-prof/k*.csv 2>/dev/null | head -1)
    if [ -n "$f" ]; then
      cp "$f" "$OUT/kernels.csv"
      head -25 "$f" | cut -c1-160 | tee -a "$OUT/summary.txt"
    else
      tail -5 /tmp/llm4d-prof/stats.log /tmp/llm4d-prof/run.log | tee -a "$OUT/summary.txt"
    fi
  fi
fi
if [[ " $STAGES " == *" bench "* ]]; then
  l=$(left)
  if [ "$l" -lt 120 ]; then
    say "bench skipped: $l s left"
  else
    compile=${COMPILE:-1}
    [ -z "${COMPILE:-}" ] && [ "$l" -lt 300 ] && compile=0
    say "bench (torch.compile: $compile), at most $((l - 15)) s ..."
    # llm4d runs in the kit's environment, PyTorch in the machine's own (the kit's libraries would shadow its own)
    eval "$(kit env 2>/dev/null | grep '^export LLM4D_DEPS=')"
    LLM4D="$PWD/tests/gpu/llm4d_env.sh" COMPILE=$compile BENCH_LOGS="$OUT/bench_logs" \
      timeout $((l - 15)) bash bench/bench_gpu.sh 6 >"$OUT/bench.txt" 2>&1
    say "bench exit $?"
    tee -a "$OUT/summary.txt" <"$OUT/bench.txt" | tail -20
    [ -d "$OUT/bench_logs" ] && tar -czf "$OUT/bench_logs.tar.gz" -C "$OUT" bench_logs && rm -rf "$OUT/bench_logs"
  fi
fi
say "done"
