#!/usr/bin/env bash
# fuzz_long.sh — long runs of the libFuzzer harnesses in fuzz/ (issue 15, item 1); the test suite's pass
# (tests/test_fuzz.sh) is short and fixed, this is where new findings come from.
#
#   scripts/fuzz_long.sh [-t SECONDS] [-j JOBS] [NAME ...]
#     -t  seconds per harness (default 600)      -j  harnesses run at once (default: the number of cores)
#     NAME  fuzz_npy, fuzz_ckpt, ... (default: every fuzz/fuzz_*.c)
#
# Builds build-fuzz/ (clang-14, LLM4D_FUZZ=ON: libFuzzer + ASan + UBSan), then runs each harness for SECONDS over a
# working corpus build-fuzz/corpus/<name> (seeded from fuzz/corpus/<name> and fuzz/regress/<name>; it grows from
# run to run and is never written into the repository). A crash, leak, sanitizer report, timeout (20 s per input),
# out-of-memory (2 GB) or broken property stops that harness and leaves the input in build-fuzz/findings/<name>/
# (inputs slower than 10 s are left there too as slow-unit-*, listed but not counted: time them alone).
# Prints one line per harness (executions, coverage, corpus size, findings) and the totals; exits 1 when anything
# was found. A finding is fixed in the parser, and its input is copied into fuzz/regress/<name>/ under a name that
# says what it broke, so tests/test_fuzz.sh runs it from then on.
set -uo pipefail
cd "$(dirname "$0")/.."
secs=600
jobs=$(nproc)
while getopts "t:j:" o; do
    case $o in
    t) secs=$OPTARG ;;
    j) jobs=$OPTARG ;;
    *) sed -n '4,7p' "$0"; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
names=("$@")
[ ${#names[@]} -gt 0 ] || for f in fuzz/fuzz_*.c; do names+=("$(basename "$f" .c)"); done
B=build-fuzz
cmake -S . -B $B -DCMAKE_C_COMPILER=clang-14 -DCMAKE_BUILD_TYPE=Release -DLLM4D_FUZZ=ON >/dev/null || exit 1
cmake --build $B -j"$(nproc)" --target fuzzers >$B/build.log 2>&1 || { tail -20 $B/build.log; exit 1; }
mkdir -p $B/logs

one() { # NAME: one harness for $secs seconds
    local n=$1 dirs=("fuzz/corpus/$1")
    [ -d "fuzz/regress/$n" ] && dirs+=("fuzz/regress/$n")
    mkdir -p "$B/corpus/$n" "$B/findings/$n"
    mkdir -p "$B/scratch" # a harness that crashes leaves its scratch directory here, not in /tmp
    env -u ASAN_OPTIONS -u LSAN_OPTIONS -u UBSAN_OPTIONS TMPDIR="$PWD/$B/scratch" \
        "$B/$n" -max_total_time="$secs" -timeout=20 -rss_limit_mb=2048 -max_len=65536 -dict="fuzz/dict/$n.dict" -artifact_prefix="$B/findings/$n/" \
        -print_final_stats=1 "$B/corpus/$n" "${dirs[@]}" >"$B/logs/$n.log" 2>&1
    echo "$n $?"
}
export -f one
export B secs
start=$(date +%s)
touch $B/logs/start.marker # findings of earlier runs stay in findings/<name>/; this run counts only its own
printf '%s\n' "${names[@]}" | xargs -P "$jobs" -I{} bash -c 'one {}' >$B/logs/exit.txt
total=0 found=0
printf '%-18s %12s %8s %8s %s\n' harness executions cov corpus findings
for n in "${names[@]}"; do
    log=$B/logs/$n.log
    execs=$(awk '/stat::number_of_executed_units/ { print $2 }' "$log")
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
    # crash-, leak-, timeout-, oom- inputs are findings; slow-unit- ones (over 10 s, usually a starved machine) are
    # only listed
    nf=$(find "$B/findings/$n" -type f -newer $B/logs/start.marker ! -name 'slow-unit-*' | wc -l)
    ns=$(find "$B/findings/$n" -type f -newer $B/logs/start.marker -name 'slow-unit-*' | wc -l)
    total=$((total + ${execs:-0}))
    found=$((found + nf))
    printf '%-18s %12s %8s %8s %s\n' "$n" "${execs:-?}" "${cov:-?}" "$(ls "$B/corpus/$n" | wc -l)" \
        "$nf$([ "$nf" != 0 ] && echo " (build-fuzz/findings/$n/, $(grep -m1 -E 'ERROR|property failed' "$log"))")$(
        )$([ "$ns" != 0 ] && echo " ($ns slow-unit inputs: rerun them alone)")"
done
echo "total: $total executions in $(( $(date +%s) - start )) s, $found finding(s)"
[ "$found" = 0 ]
