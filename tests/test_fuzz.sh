#!/usr/bin/env bash
# test_fuzz.sh — a short, deterministic pass of every libFuzzer harness in fuzz/ (issue 15, item 1).
#
# Builds the harnesses with clang-14 into BUILD_DIR/fuzz (LLM4D_FUZZ=ON: libFuzzer + AddressSanitizer +
# UndefinedBehaviorSanitizer, leak checking on), then runs each one over its committed seed corpus
# (fuzz/corpus/<name>) and regression inputs (fuzz/regress/<name>: every input that once made a harness fail) plus
# a fixed number of mutations from a fixed seed (-seed=1 -runs=N), so a pass is the same run every time. New inputs
# libFuzzer finds go to a temporary directory, never into the repository. A crash, leak, sanitizer report, timeout
# or broken property (fuzz/util.h: a refusal must be a one-line user error) makes the harness exit non-zero, which
# is a failed check. Long runs: scripts/fuzz_long.sh.
set -uo pipefail
SRC_DIR=${SRC_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
BUILD_DIR=${BUILD_DIR:-$SRC_DIR/build}
source "$SRC_DIR/tests/lib.sh"
FB=$BUILD_DIR/fuzz
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# mutations per harness: each pass takes a few seconds (the checkpoint and prepare-data harnesses do far more work
# per input than the header parsers)
declare -A RUNS=([fuzz_npy]=20000 [fuzz_npz]=8000 [fuzz_megatron]=8000 [fuzz_safetensors]=20000 [fuzz_ckpt]=150
                 [fuzz_vocab]=1500 [fuzz_encode]=3000 [fuzz_prepare]=800 [fuzz_yaml]=1500 [fuzz_flags]=4000)

# what each harness feeds (docs/reliability.md's rows)
declare -A WHAT=([fuzz_npy]="npy arrays" [fuzz_npz]="Paddle npz corpora and npy + npz pairs"
                 [fuzz_megatron]="Megatron bin/idx pairs"
                 [fuzz_safetensors]="safetensors files (and writer round trips)"
                 [fuzz_ckpt]="checkpoint directories (meta.json, manifest, latest, slices, geometry; loaded)"
                 [fuzz_vocab]="vocabularies (encoder.json + vocab.bpe)" [fuzz_encode]="texts through the GPT-2 encoder"
                 [fuzz_prepare]="prepare-data inputs (JSON lines, text, gzip)"
                 [fuzz_yaml]="YAML configs with _base_ chains and -o overrides" [fuzz_flags]="train command lines")

if ! command -v clang-14 >/dev/null; then
    bad "clang-14 is not installed (scripts/setup.sh installs it with LLM4D_TEST_DEPS=1)"
    finish
fi
if ! { cmake -S "$SRC_DIR" -B "$FB" -DCMAKE_C_COMPILER=clang-14 -DCMAKE_BUILD_TYPE=Release -DLLM4D_FUZZ=ON \
        >"$tmp/build.log" 2>&1 && cmake --build "$FB" -j"$(nproc)" --target fuzzers >>"$tmp/build.log" 2>&1; }; then
    tail -20 "$tmp/build.log"
    bad "building the fuzzers (clang-14, LLM4D_FUZZ=ON)"
    finish
fi
ok "built the fuzzers in $FB"

total=0
for src in "$SRC_DIR"/fuzz/fuzz_*.c; do
    name=$(basename "$src" .c)
    runs=${RUNS[$name]:-2000}
    dirs=("$SRC_DIR/fuzz/corpus/$name")
    [ -d "$SRC_DIR/fuzz/regress/$name" ] && dirs+=("$SRC_DIR/fuzz/regress/$name")
    mkdir -p "$tmp/$name/new" "$tmp/$name/art"
    log=$tmp/$name/log
    t0=$(date +%s.%N)
    # the harnesses carry their own sanitizers and options; a sanitizer run's (scripts/sanitize.sh) are not theirs
    # (TMPDIR: a harness that crashes leaves its scratch directory where the trap removes it)
    env -u ASAN_OPTIONS -u LSAN_OPTIONS -u UBSAN_OPTIONS TMPDIR="$tmp" \
        "$FB/$name" -seed=1 -runs="$runs" -timeout=20 -rss_limit_mb=2048 -max_len=65536 \
        -dict="$SRC_DIR/fuzz/dict/$name.dict" -artifact_prefix="$tmp/$name/art/" -print_final_stats=1 \
        "$tmp/$name/new" "${dirs[@]}" >"$log" 2>&1
    rc=$?
    secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    execs=$(awk '/stat::number_of_executed_units/ { print $2 }' "$log")
    nin=$(find "${dirs[@]}" -type f | wc -l)
    reliability_row "fuzzing" "$name: ${execs:-?} mutated ${WHAT[$name]:-inputs}" \
        "each read, or refused with one line (a user error: exit 2 from the CLI); no crash, leak, sanitizer report" \
        2 "-" "-" "$([ $rc = 0 ] && [ -n "$execs" ] && echo 1 || echo 0)"
    if [ $rc = 0 ] && [ -n "$execs" ]; then
        total=$((total + execs))
        ok "$name: $execs executions in ${secs}s over $nin seed and regression inputs, no finding"
    else
        bad "$name: exit $rc after ${secs}s; the input is kept below, the report follows"
        ls "$tmp/$name/art" | sed 's/^/    artifact: /'
        grep -E "ERROR|SUMMARY|property failed|runtime error|#[0-9]+ 0x" "$log" | head -25 | sed 's/^/    /'
        mkdir -p "$BUILD_DIR/fuzz-findings/$name" && cp "$tmp/$name/art/"* "$BUILD_DIR/fuzz-findings/$name/" 2>/dev/null
    fi
done
echo "total: $total executions"
finish
