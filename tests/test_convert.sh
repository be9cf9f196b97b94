#!/usr/bin/env bash
# test_convert.sh — `llm4d convert` against a PyTorch GPT-2 with Hugging Face's semantics.
#
# 1. `convert --from init` writes a random model (3 layers, hidden 64, ffn 200 so n_inner is not 4 x n_embd,
#    vocab 1000 so the 1024-row padding must be cut, noise on every parameter so biases and LayerNorms matter).
# 2. `convert --to hf` exports it; tests/hf_gpt2_ref.py parses config.json and model.safetensors by hand, runs its
#    own GPT-2 (Conv1D x @ W + b, gelu_new, tied head) on prompt + continuation and compares with the logits
#    `llm4d generate --dump_logits` produced with its KV cache: <= 1e-4 relative, at every position.
# 3. `convert --from hf` of the export gives the original tensors bit for bit, and the same generation; so do the
#    Hub's layout (no "transformer." prefix, mask buffers, stored lm_head) and a sharded directory with an index.
# 4. Bad input: an HF directory with another activation, shapes that do not fit config.json, a missing tensor, an
#    untied head, only pytorch_model.bin; a checkpoint that does not exist or has a flipped byte; an --out that
#    cannot be written: exit 2, one line on stderr, and no checkpoint written.
# 5. The tokenizer files: the export of a model with GPT-2's vocabulary (gpt2-tiny) holds vocab.json, merges.txt
#    and tokenizer_config.json; tests/hf_gpt2_tokenizer.py loads them as transformers' GPT2Tokenizer does (not
#    installed here) and checks their format, and its encoding of some texts against `llm4d tokenize`. The model
#    above (vocabulary 1000) and a machine without the vocabulary get the weights alone, and the line says why;
#    --vocab_dir naming no vocabulary, or one that does not fit the model, is refused before anything is written.
set -u
source "$(dirname "$0")/lib.sh"
test_setup
PY=/usr/bin/python3
REF=$SRC_DIR/tests/hf_gpt2_ref.py
# python checks print their own PASS/FAIL lines; count them
pycheck() {
    local out
    out=$("$PY" "$REF" "$@" 2>&1)
    echo "$out"
    pass=$((pass + $(grep -c '^PASS' <<<"$out")))
    fail=$((fail + $(grep -c '^FAIL' <<<"$out")))
    if ! grep -q '^PASS' <<<"$out"; then bad "python helper ran ($*)"; fi
}

cd "$tmp" || exit 1
check "convert --from init writes a random model" \
    "$LLM4D" convert --from init --out ck --model_name_or_path gpt2-tiny -o Model.vocab_size=1000 \
    -o Model.num_layers=3 -o Model.ffn_hidden_size=200 --init_noise 0.1 --seed 5
check "convert --to hf exports it" "$LLM4D" convert --to hf --ckpt ck --out hf
check "the export holds config.json and model.safetensors" test -s hf/config.json -a -s hf/model.safetensors

PROMPT="7 99 3 3 512 640 1 0 999 42 42 42 17 300 301 302 5 6 7 8 9 10 800 801 802 803 804 805 806 807"
"$LLM4D" generate --ckpt ck --prompt_ids "$PROMPT" --max_new_tokens 20 --temperature 0 --dump_logits logits.bin \
    >gen.txt 2>gen.err
check "llm4d generate ran (greedy: the 30-token prompt, then 20 new tokens)" \
    bash -c '[[ $(wc -w <gen.txt) -eq 50 && "$(cut -d" " -f1-30 gen.txt)" == "$1" ]]' - "$PROMPT"
cp gen.txt ids.txt
pycheck check hf ids.txt logits.bin

check "convert --from hf imports the export" "$LLM4D" convert --from hf --hf_dir hf --out back
pycheck same ck/step_0/model.safetensors back/step_0/model.safetensors
"$LLM4D" generate --ckpt back --prompt_ids "$PROMPT" --max_new_tokens 20 --temperature 0 --dump_logits logits2.bin \
    >gen2.txt 2>/dev/null
check "the imported checkpoint generates the same tokens with the same logits" \
    bash -c 'cmp -s gen.txt gen2.txt && cmp -s logits.bin logits2.bin'
check "the imported checkpoint is weights only (no optim files) with the geometry in meta.json" \
    "$PY" -c "
import json, os, sys
m = json.load(open('back/step_0/meta.json'))
sys.exit(0 if m['model']['ffn_hidden_size'] == 200 and m['model']['num_layers'] == 3
         and m['format']['optimizer'] is None
         and sorted(os.listdir('back/step_0')) == ['meta.json', 'model.safetensors'] else 1)"

for mode in hub sharded; do
    "$PY" "$REF" hubify hf "hf_$mode" "$mode"
    check "convert --from hf reads the $mode layout" "$LLM4D" convert --from hf --hf_dir "hf_$mode" --out "ck_$mode"
    pycheck same ck/step_0/model.safetensors "ck_$mode/step_0/model.safetensors"
done

for mode in badact badshape missing untied pytorch; do "$PY" "$REF" hubify hf "hf_$mode" "$mode"; done
refused "another activation is refused" "activation_function is relu" \
    "$LLM4D" convert --from hf --hf_dir hf_badact --out x_badact
refused "a shape config.json does not imply is refused" "c_fc.bias' has shape \[200\] but config.json implies \[400\]" \
    "$LLM4D" convert --from hf --hf_dir hf_badshape --out x_badshape
refused "a missing tensor is refused" "no tensor 'transformer.h.1.mlp.c_fc.bias'" \
    "$LLM4D" convert --from hf --hf_dir hf_missing --out x_missing
refused "an untied LM head is refused" "lm_head.weight differs" \
    "$LLM4D" convert --from hf --hf_dir hf_untied --out x_untied
refused "pytorch_model.bin alone is refused" "pytorch_model.bin" \
    "$LLM4D" convert --from hf --hf_dir hf_pytorch --out x_pytorch
refused "an HF directory that does not exist is refused" "nowhere has no config.json" \
    "$LLM4D" convert --from hf --hf_dir nowhere --out x_nowhere
check "refused imports wrote nothing" test -z "$(ls -d x_* 2>/dev/null)"

refused "exporting a checkpoint that does not exist is refused" "does not exist" \
    "$LLM4D" convert --to hf --ckpt nowhere --out hf_x
cp -r ck ck_flip
"$PY" -c "
p = 'ck_flip/step_0/model.safetensors'
b = bytearray(open(p, 'rb').read()); b[len(b) // 2] ^= 0x10; open(p, 'wb').write(b)"
refused "exporting a checkpoint with a flipped byte is refused" "crc32" \
    "$LLM4D" convert --to hf --ckpt ck_flip --out hf_flip
check "refused exports wrote nothing" test ! -e hf_x -a ! -e hf_flip
touch afile
refused "an --out that is a file is refused" "not a directory" "$LLM4D" convert --to hf --ckpt ck --out afile
refused "--to and --from together are refused" "one of --to hf and --from" \
    "$LLM4D" convert --to hf --from hf --out x
refused "an unknown --to is refused" "--to must be hf" "$LLM4D" convert --to onnx --ckpt ck --out x

# ---- 5. the tokenizer files ----
VOCAB=$(gpt2_vocab_dir)
export LLM4D_VOCAB_DIR=$VOCAB
check "convert --from init writes a model with GPT-2's vocabulary (gpt2-tiny)" \
    "$LLM4D" convert --from init --out ck_gpt2 --model_name_or_path gpt2-tiny --seed 5
"$LLM4D" convert --to hf --ckpt ck_gpt2 --out hf_gpt2 >export.out 2>&1
check "its export writes the tokenizer files and says so: $(cat export.out)" \
    grep -q "hf_gpt2/config.json, model.safetensors and the tokenizer's vocab.json, merges.txt, tokenizer_config.json" \
    export.out
"$PY" - <<'EOF'
import json
texts = ["Hello, world! It's a test.", "The quick brown fox jumps over the lazy dog 1234567 times...",
         "  leading and trailing spaces  ", "tabs\tand\nnewlines\n\n  indented  line\n",
         "they're we've I'm you'll he'd -- \"quoted\" (parenthesised) [bracketed] {braced}",
         "emoji \U0001f642\U0001f680 and dashes \u2014 \u2013 and symbols \u2122 \u00a9 \u20ac 100",
         "antidisestablishmentarianism supercalifragilisticexpialidocious pneumonoultramicroscopic",
         "x" * 300 + " " + "ab" * 100, "def f(x):\n    return x ** 2  # comment\n", "a"]
with open("texts.jsonl", "w") as f:
    for t in texts:
        f.write(json.dumps({"text": t}) + "\n")
EOF
"$LLM4D" tokenize --jsonl texts.jsonl >texts_ids.txt
tok_out=$("$PY" "$SRC_DIR/tests/hf_gpt2_tokenizer.py" hf_gpt2 texts.jsonl texts_ids.txt "$VOCAB" 2>&1)
echo "$tok_out"
pass=$((pass + $(grep -c '^PASS' <<<"$tok_out")))
fail=$((fail + $(grep -c '^FAIL' <<<"$tok_out")))
grep -q '^PASS' <<<"$tok_out" || bad "tests/hf_gpt2_tokenizer.py ran"
check "the export with the tokenizer files still imports" "$LLM4D" convert --from hf --hf_dir hf_gpt2 --out back_gpt2

"$LLM4D" convert --to hf --ckpt ck --out hf_v1000 >v1000.out 2>&1
check "a model whose vocabulary is not GPT-2's gets no tokenizer files, and the line says why: $(cat v1000.out)" \
    bash -c 'test -s hf_v1000/model.safetensors -a ! -e hf_v1000/vocab.json -a ! -e hf_v1000/merges.txt &&
             grep -q "no tokenizer files: the model.s vocabulary of 1000 tokens is not GPT-2.s 50257" v1000.out'
LLM4D_VOCAB_DIR=$tmp/novocab "$LLM4D" convert --to hf --ckpt ck_gpt2 --out hf_novocab >novocab.out 2>&1
check "without the vocabulary the export is the weights alone, and the line says how to get it: $(cat novocab.out)" \
    bash -c 'test -s hf_novocab/model.safetensors -a ! -e hf_novocab/vocab.json &&
             grep -q "no tokenizer files: .*novocab/encoder.json.*fetch_gpt2_vocab.sh" novocab.out'
refused "--vocab_dir naming no vocabulary is refused" "novocab/encoder.json" \
    "$LLM4D" convert --to hf --ckpt ck_gpt2 --out hf_nv --vocab_dir "$tmp/novocab"
refused "--vocab_dir for a model of another vocabulary is refused" "vocabulary has 1000 tokens" \
    "$LLM4D" convert --to hf --ckpt ck --out hf_nv2 --vocab_dir "$VOCAB"
check "refused exports wrote nothing" test ! -e hf_nv -a ! -e hf_nv2

finish
