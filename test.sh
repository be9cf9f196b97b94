#!/usr/bin/env bash
# The test command of the quick start: install what is missing, build, run the whole suite (ctest), then the guard
# (tests/guard.sh): a test whose output holds a failed check fails the run even if the test exited 0.
set -uo pipefail
cd "$(dirname "$0")"
LLM4D_TEST_DEPS=1 scripts/setup.sh || exit $?
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
rc=0
ctest --test-dir build --output-on-failure --timeout 900 "$@" || rc=$?
tests/guard.sh build/Testing/Temporary/LastTest.log || rc=1
exit $rc
