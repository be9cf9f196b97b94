#!/usr/bin/env bash
# guard.sh — the CI-side guard over the test suite's output: a test whose output holds a failed check fails the
# run, whatever exit status the test itself returned.
#
# ctest reports a test by its exit status alone, so a script that printed `FAIL ...` and then exited 0 (a lost
# pipeline status, an `rc=$?` at the end) used to pass. This reads ctest's LastTest.log (every test's output) and
# fails when any test printed a line starting with FAIL (the tests' tally, tests/lib.sh), a TAP `not ok`, or a
# closing line `N passed, M failed` with M > 0, or when a test ran without a closing line at all. It names each
# offending test and line. Exit status: 0 clean, 1 failed checks found, 2 no log to read.
#   tests/guard.sh [build/Testing/Temporary/LastTest.log]
set -uo pipefail
log=${1:-build/Testing/Temporary/LastTest.log}
[ -r "$log" ] || { echo "guard: no ctest log at $log; run ctest first" >&2; exit 2; }
awk '
  # "3/35 Testing: test_model" opens a test; its output runs up to "<end of output>"
  /^[0-9]+\/[0-9]+ Testing: / { name = $3; closing[name] = 0; tests[name] = 1; next }
  /^<end of output>/ { name = ""; next }
  name == "" { next }
  /^(FAIL|not ok)([ :]|$)/ { bad[++nbad] = name ": " $0; next }
  /^[0-9]+ passed, [0-9]+ failed/ {
    closing[name] = 1
    if ($3 + 0 > 0) bad[++nbad] = name ": " $0
  }
  /^[0-9]+% tests passed, / { closing[name] = 1 }
  END {
    for (t in tests) if (!closing[t]) bad[++nbad] = t ": no closing line (N passed, M failed)"
    for (i = 1; i <= nbad; i++) print "guard: " bad[i]
    if (nbad) { printf "guard: %d failed check(s) in the test output\n", nbad; exit 1 }
    printf "guard: %d tests, no failed check in their output\n", length(tests)
  }' "$log"
