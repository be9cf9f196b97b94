#!/usr/bin/env bash
# test_npz_fixtures.sh — llm4d's npz/corpus readers against files numpy wrote, and numpy against files llm4d wrote.
#
# numpy is the outside oracle: tests/make_npz_fixtures.py writes good corpora (np.save, np.savez,
# np.savez_compressed; old and new Paddle layouts) with their expected contents, and damaged ones with the word their
# error must contain; test_npz (NPZ_FIXTURES) checks llm4d reads each exactly or refuses it as a user error naming
# the file, and writes its own .npy/.npz files (NPZ_OUT) that the script's --verify mode loads back with numpy.
# Env: SRC_DIR, BUILD_DIR (set by ctest). Ends with `N passed, M failed` summed over all three stages.
set -u
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
SRC_DIR=${SRC_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
BUILD_DIR=${BUILD_DIR:-$SRC_DIR/build}
PY=/usr/bin/python3 # Debian's, which has numpy

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$TMP/fx" "$TMP/out"

if "$PY" -c 'import numpy' 2>/dev/null; then ok "$PY has numpy"; else bad "$PY has numpy (apt-get install python3-numpy)"; fi
if "$PY" "$SRC_DIR/tests/make_npz_fixtures.py" "$TMP/fx/npz" >"$TMP/make.log" 2>&1; then
    ok "numpy wrote the fixtures ($(tail -1 "$TMP/make.log"))"
else
    bad "numpy fixture writer failed:"
    cat "$TMP/make.log"
fi

if [ -x "$BUILD_DIR/test_npz" ]; then
    SRC_DIR="$SRC_DIR" NPZ_FIXTURES="$TMP/fx/npz" NPZ_OUT="$TMP/out" "$BUILD_DIR/test_npz" >"$TMP/c.log" 2>&1
    rc=$?
    grep -v '^ok ' "$TMP/c.log" | grep -vE '^[0-9]+ passed' # failures and crashes only
    echo "test_npz (with numpy fixtures): $(tail -1 "$TMP/c.log")"
    add_counts "$TMP/c.log" test_npz
    [ $rc -eq 0 ] || [ "$(grep -c '^FAIL' "$TMP/c.log")" -gt 0 ] || bad "test_npz exited $rc without a failed check"
else
    bad "$BUILD_DIR/test_npz is not built (cmake --build build --target test_npz)"
fi

if "$PY" "$SRC_DIR/tests/make_npz_fixtures.py" --verify "$TMP/out" >"$TMP/v.log" 2>&1; then :; fi
grep -v '^ok ' "$TMP/v.log" | grep -vE '^[0-9]+ passed'
echo "numpy --verify of llm4d's files: $(tail -1 "$TMP/v.log")"
add_counts "$TMP/v.log" "make_npz_fixtures.py --verify"

finish
