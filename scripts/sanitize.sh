#!/usr/bin/env bash
# sanitize.sh — the whole test suite under AddressSanitizer + UndefinedBehaviorSanitizer (issue 15, item 2).
#
#   scripts/sanitize.sh                 configure and build build-asan/ (LLM4D_SANITIZE=ON), run every test
#   scripts/sanitize.sh -R test_resume  ctest arguments select tests (CI runs the part in .ci/run)
#
# Every object of llm4d is built with -fsanitize=address,undefined -fno-sanitize-recover=all (CMakeLists.txt), so a
# memory error or undefined behaviour aborts the process and a leak makes it exit 23. Since a test may run a
# command whose exit status it does not judge, every report is also written to build-asan/sanitizer-reports/
# (log_path), and the run fails when that directory is not empty after ctest, whatever the tests said: no report is
# accepted. Leaks inside Open MPI and its runtime are suppressed (scripts/lsan.supp), nothing of llm4d's.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
B=${LLM4D_ASAN_BUILD:-build-asan}
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DLLM4D_SANITIZE=ON >/dev/null || exit 1
cmake --build "$B" -j"$(nproc)" >"$B/build.log" 2>&1 || { tail -30 "$B/build.log"; exit 1; }
R=$ROOT/$B/sanitizer-reports
rm -rf "$R" && mkdir -p "$R"
# Open MPI's components stay mapped until exit, so their leaks can be named and suppressed (scripts/nodlclose.c);
# preloading it puts it before the ASan runtime, which verify_asan_link_order=0 accepts
cc -shared -fPIC -O2 -o "$B/nodlclose.so" scripts/nodlclose.c || exit 1
export LD_PRELOAD=$ROOT/$B/nodlclose.so
export ASAN_OPTIONS="log_path=$R/asan:detect_leaks=1:verify_asan_link_order=0:abort_on_error=0"
export LSAN_OPTIONS="suppressions=$ROOT/scripts/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="log_path=$R/ubsan:print_stacktrace=1:halt_on_error=1"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
start=$(date +%s)
ctest --test-dir "$B" --output-on-failure --timeout 1800 "$@"
rc=$?
n=$(find "$R" -type f | wc -l)
echo "sanitize.sh: ctest exit $rc in $(( $(date +%s) - start )) s; $n sanitizer report file(s) in $R"
for f in $(find "$R" -type f | head -5); do
    echo "--- $f"
    grep -E "ERROR|SUMMARY|runtime error|#[0-9]+ 0x" "$f" | head -20
done
[ $rc = 0 ] && [ "$n" = 0 ]
