#!/usr/bin/env bash
# reliability_table.sh — write docs/reliability.md: every injected fault and bad input the tests exercise, what the
# user sees, the exit code, the time to a clean stop and whether the last checkpoint still loads (issue 15).
#
#   tools/reliability_table.sh [BUILD_DIR]      (default build/; needs a built tree: scripts/setup.sh)
#
# The rows come from the tests themselves, never from this script: a test records one with reliability_row (or
# refused, which records every bad input it checks) from tests/lib.sh, and only when LLM4D_RELIABILITY_OUT names a
# file, which this script sets before running the tests of SOURCES through ctest. So a row is written by the code
# that checked it, and its verdict is that check's. To add rows: call reliability_row in a test (a new fault, the
# watchdog, the non-finite guard, the memory plan ...) and add the test's name to SOURCES.
# Exit status: 0 when every source test passed and every row passed.
# LLM4D_RELIABILITY_ROWS=FILE LLM4D_RELIABILITY_RC=N: write the page from rows a run of the whole suite already
# collected (ctest with LLM4D_RELIABILITY_OUT=FILE; every test that records rows is in SOURCES) and its exit status.
set -uo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
SOURCES=(test_save_faults test_fuzz test_special_files test_convert test_generate_cli test_watchdog test_nonfinite
         test_memory_plan test_pp test_tp test_trace_pp test_report test_cuda_device test_grad_comm_bf16 test_plan
         test_restarts test_chaos test_elastic test_launch test_async_save test_calibrate)
OUT=docs/reliability.md
[ -x "$B/llm4d" ] || { echo "reliability_table.sh: $B/llm4d is not built; run scripts/setup.sh first" >&2; exit 2; }
if [ -n "${LLM4D_RELIABILITY_ROWS:-}" ]; then
    rows=$LLM4D_RELIABILITY_ROWS
    ctest_rc=${LLM4D_RELIABILITY_RC:-0}
else
    rows=$(mktemp)
    trap 'rm -f "$rows" "$rows.ctest"' EXIT
    regex="^($(IFS='|'; echo "${SOURCES[*]}"))\$"
    LLM4D_RELIABILITY_OUT=$rows OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} ctest --test-dir "$B" -R "$regex" \
        --output-on-failure >"$rows.ctest" 2>&1
    ctest_rc=$?
    tail -4 "$rows.ctest"
fi
/usr/bin/python3 - "$rows" "$OUT" "$ctest_rc" "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" \
    "${SOURCES[@]}" <<'PY'
import re, sys
rows_path, out, ctest_rc, commit, sources = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5:]
rows = [l.rstrip("\n").split("\t") for l in open(rows_path) if l.strip()]
bad = [r for r in rows if len(r) != 7]
rows = [r for r in rows if len(r) == 7]
# the tests' temporary directories are shown as TMP
esc = lambda s: re.sub(r"/tmp/(tmp\.|llm4d_[a-z]+_)[A-Za-z0-9]+", "TMP", s).replace("|", "\\|")
order = ["save under faults", "communication", "fuzzing"]
rank = lambda area: (order.index(area) if area in order else len(order), area)
rows.sort(key=lambda r: rank(r[0]))
passed = sum(r[6] == "1" for r in rows)
with open(out, "w") as f:
    f.write("# Reliability: faults and bad inputs, and what the user sees\n\n")
    f.write("Written by `tools/reliability_table.sh` (do not edit): it runs the tests "
            + ", ".join(f"`{s}`" for s in sources)
            + " and collects the rows they record (`reliability_row` / `refused` in `tests/lib.sh`), each one "
              "written by the check that verified it.\n\n")
    f.write("- **What the user sees**: the one line on stderr (TMP: the test's temporary directory).\n"
            "- **Exit**: the exit code of the command (of `llm4d launch` for a multi-process job).\n"
            "- **Stop (s)**: seconds from the fault to the end of the process: from the last log line before the "
            "failing save or collective to the exit; for bad input, the whole command; for a restart (test_chaos's "
            "and test_elastic's rows), from the kill or stop to the job's next trained step.\n"
            "- **Last checkpoint loads**: after the fault, the checkpoint `latest` names is opened, every file's "
            "size and crc32 verified and every tensor read (`-`: no checkpoint involved).\n"
            "- Fault injection: `LLM4D_FAULT=<error>[:<op>]@N` makes the N-th write, fsync, create or rename of a save "
            "fail (`src/core/fault.h`); `collective@K` fails the first collective of step K. The rows that say "
            "\"each of the N\" ran the save once per operation.\n\n")
    f.write(f"{len(rows)} rows, {passed} passing (commit {commit}).\n\n")
    f.write("| area | case | what the user sees | exit | stop (s) | last checkpoint loads | verdict |\n")
    f.write("|---|---|---|---|---|---|---|\n")
    for area, case, seen, code, stop, loads, ok in rows:
        f.write(f"| {esc(area)} | {esc(case)} | {esc(seen)} | {code} | {stop} | {esc(loads)} | "
                f"{'pass' if ok == '1' else '**FAIL**'} |\n")
print(f"reliability_table.sh: {out}: {len(rows)} rows, {passed} passing; source tests "
      f"{'passed' if ctest_rc == 0 else 'FAILED'}" + (f"; {len(bad)} malformed rows" if bad else ""))
sys.exit(0 if ctest_rc == 0 and passed == len(rows) and not bad and rows else 1)
PY
