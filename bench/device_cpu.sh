#!/usr/bin/env bash
# device_cpu.sh — the lent device machine's CPU (a 16-core Xeon with AVX512-BF16 and AMX) as one call of the
# device tool: what only an AMX CPU can check or measure (../shared/tools/device/README.md says how a call works).
#   1. build with the device kit (no CUDA: the CPU backend is what is measured);
#   2. the tests whose bf16 paths take llm4d's AMX kernel there and nowhere else: test_amx, the kernels' and the
#      mixed-precision unit tests, the optimizer's packs, and test_amp (the bf16 200-step curve within 1 % of fp32);
#   3. bench/bench_train.sh at 2 threads, B=4 T=64 and B=2 T=1024 by default, beside the machine's own PyTorch;
#   4. (stage "sweep", not by default) bench/amx_sweep.c: the AMX GEMM's blockings searched at the model's products;
#   5. (stage "ab", not by default) bench/bench_ab.sh in bf16 against the build of commit AB_BASE (a git worktree).
# Results under $OUT: summary.txt, build.log, tests.log, bench.txt, sweep.txt, ab.txt (and the kit's device.log).
# A stage that would start past DEADLINE seconds (default 540) is skipped, so that what ran still comes back.
# Call it (device tool `run`, carry [".device-kit"], timeout_s 600) from the checkout's root:
#   bash bench/device_cpu.sh
# Knobs: STAGES ("build tests bench"), TESTS (ctest -R regex), THREADS (2), STEPS (3), SHAPES ("4 64;2 1024"),
# AB_BASE, AB_ROUNDS (2), BENCH_TORCH (bench_train.sh's: all, bf16 or none), DEADLINE.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/llm4d-cpu-out}
mkdir -p "$OUT"
STAGES=${STAGES:-build tests bench}
TESTS=${TESTS:-'^test_(amx|amp_unit|amp_unit_avx2|kernels|kernels_avx2|kernels_optim|amp|gradcheck)$'}
THREADS=${THREADS:-2}
STEPS=${STEPS:-3}
SHAPES=${SHAPES:-4 64;2 1024}
DEADLINE=${DEADLINE:-540}
T0=$(date +%s)
say() { echo "device_cpu [$(($(date +%s) - T0)) s]: $*" | tee -a "$OUT/summary.txt"; }
stage() { # stage NAME: whether it was asked for and there is time to start it
  [[ " $STAGES " == *" $1 "* ]] || return 1
  [ $(($(date +%s) - T0)) -lt "$DEADLINE" ] && return 0
  say "stage $1 skipped: past the deadline ($DEADLINE s)"
  return 1
}
IFS=';' read -r -a shapes <<<"$SHAPES"
if [ ! -f .device-kit/remote.sh ]; then
  say "no .device-kit here: pack it (../shared/tools/device/pack.sh .) and carry it"
  exit 1
fi
PYBIN=$(command -v python3)

say "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')," \
    "$(git status --porcelain 2>/dev/null | wc -l) changed files"
{ lscpu | grep -E 'Model name|^CPU\(s\)|Thread|L2|L3'
  grep -o 'amx_tile\|avx512_bf16' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
  "$PYBIN" -c 'import torch; print("torch", torch.__version__)' 2>&1 | tail -1
} | sed 's/^/  /' | tee -a "$OUT/summary.txt"

if stage build; then
  say "build (device kit, CPU only) ..."
  timeout 240 bash .device-kit/remote.sh build >"$OUT/build.log" 2>&1
  rc=$?
  if [ $rc != 0 ] && grep -q "Werror\|warnings being treated as errors" "$OUT/build.log"; then
    # the machine's gcc 13 may warn where bookworm's gcc 12 does not: build anyway, the warnings are in the log
    say "build failed on warnings: again with LLM4D_WERROR=OFF (fix them: build.log)"
    LLM4D_CMAKE_ARGS="-DLLM4D_WERROR=OFF" timeout 240 bash .device-kit/remote.sh build >>"$OUT/build.log" 2>&1
    rc=$?
  fi
  grep -E "build: done|warning: " "$OUT/build.log" | head -10 | sed 's/^/  /' | tee -a "$OUT/summary.txt"
  if [ $rc != 0 ]; then
    say "build FAILED (rc $rc): the end of build.log:"
    tail -30 "$OUT/build.log" | tee -a "$OUT/summary.txt"
    exit 1
  fi
fi

if stage sweep; then
  say "amx_sweep, $THREADS threads ..."
  OMP_NUM_THREADS=$THREADS timeout 240 bash .device-kit/remote.sh run build-device/amx_sweep >"$OUT/sweep.txt" 2>&1
  say "amx_sweep exit $?"
  grep -E "^sweep|MISMATCH|amx_sweep" "$OUT/sweep.txt" | tee -a "$OUT/summary.txt"
fi

if stage tests; then
  say "tests ($TESTS) ..."
  timeout 300 bash .device-kit/remote.sh run ctest --test-dir build-device -R "$TESTS" -j6 --timeout 280 \
    --output-on-failure >"$OUT/tests.log" 2>&1
  say "ctest exit $?"
  grep -E "Test +#|tests passed|FAIL|^[0-9]+ passed" "$OUT/tests.log" | head -40 | sed 's/^/  /' |
    tee -a "$OUT/summary.txt"
fi

if stage ab; then
  say "bench_ab.sh bf16, $THREADS threads: ${AB_BASE:?AB_BASE names the commit to compare with} against this tree ..."
  rm -rf /tmp/llm4d-base
  if git worktree add -f /tmp/llm4d-base "$AB_BASE" >"$OUT/ab.txt" 2>&1 && cp -r .device-kit /tmp/llm4d-base/ &&
     (cd /tmp/llm4d-base && LLM4D_CMAKE_ARGS="-DLLM4D_WERROR=OFF" timeout 120 bash .device-kit/remote.sh build) \
       >>"$OUT/ab.txt" 2>&1; then
    AB_AMP=true BENCH_PY="env -u LD_LIBRARY_PATH $PYBIN" timeout 240 bash .device-kit/remote.sh run \
      bash bench/bench_ab.sh /tmp/llm4d-base/build-device/llm4d build-device/llm4d "${AB_ROUNDS:-2}" "$THREADS" \
      "${shapes[@]}" >>"$OUT/ab.txt" 2>&1
    say "bench_ab exit $?"
  else
    say "the base build failed (ab.txt)"
  fi
  grep -E "^# bench_ab|^round" "$OUT/ab.txt" | tee -a "$OUT/summary.txt"
fi

if stage bench; then
  say "bench_train.sh $THREADS threads, $STEPS steps, shapes ${shapes[*]} ..."
  # llm4d runs inside the kit's environment; PyTorch outside it (env.sh puts bookworm's libraries first)
  BENCH_PY="env -u LD_LIBRARY_PATH $PYBIN" BENCH_BUILD=build-device BENCH_TORCH=${BENCH_TORCH:-all} timeout 420 \
    bash .device-kit/remote.sh run bash bench/bench_train.sh "$THREADS" "$STEPS" "${shapes[@]}" >"$OUT/bench.txt" 2>&1
  say "bench exit $?"
  OMP_NUM_THREADS=$THREADS timeout 60 bash .device-kit/remote.sh run build-device/mem_bandwidth --optim 2>&1 |
    grep -v '^llm4d-device' | tee -a "$OUT/bench.txt" | tail -2 >>"$OUT/summary.txt"
  sed -n '/^tokens\/s/,$p' "$OUT/bench.txt" | tee -a "$OUT/summary.txt"
fi
say "done"
