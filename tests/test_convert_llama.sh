#!/usr/bin/env bash
# test_convert_llama.sh — `llm4d convert` of Llama models (issue 47) against Hugging Face's format and a PyTorch
# LlamaForCausalLM. tests/hf_llama_ref.py writes and reads the HF side by hand (no transformers or safetensors here)
# and runs tests/llama_ref.py's model written from its definition.
#
# 1. An HF Llama directory as releases ship it (bf16 tensors in two shards with model.safetensors.index.json,
#    rope_theta 20000, untied head) imports: every tensor equal to the bf16 value as fp32, meta.json describing a
#    Llama (RMSNorm, rope and its theta, SwiGLU, key/value heads, no bias, untied). Training from it
#    (--model_name_or_path DIR): step 1's logits and loss equal LlamaForCausalLM's over the HF weights on the same
#    batch; the same training on two processes (tensor parallel mp2, pipeline pp2) gives the one-process losses
#    within 1e-5. A tied model with biases (attention_bias and mlp_bias) likewise (its lm_head is not stored).
# 2. Grouped-query attention's shapes (num_key_value_heads 2 of 4 heads; trained once the attention has it): the
#    import holds k_proj/v_proj [2 x 16, 64] and meta.json's 2 heads, and exports back to the same config and
#    tensors.
# 3. Round trips: llm4d -> HF -> llm4d gives the checkpoint's tensors bit for bit (llama-tiny with noise on every
#    tensor; and tied, biased, 2 key/value heads), the export being exactly LlamaForCausalLM's names and shapes with
#    the checkpoint's config; HF -> llm4d -> HF gives the source's config keys and tensors (fp32 of the bf16).
# 4. What llm4d cannot compute is refused with one line, exit 2, nothing written: rope_scaling (Llama 3.1's
#    "llama3"), attention_bias without mlp_bias, another head_dim, a missing tensor, a shape config.json does not
#    imply, another hidden_act, another model_type; the export of a Llama-family model with LayerNorm, of a GPT-2 with
#    rotary positions.
# 5. The tokenizer: --vocab_dir naming a tokenizer.json (a Llama-3-style one from tests/hf_bpe_oracle.py) is copied
#    as it is, with tokenizer_config.json for PreTrainedTokenizerFast and config.json's bos_token_id
#    (<|begin_of_text|>'s id); one with more ids than the model's vocabulary is refused.
set -u
source "$(dirname "$0")/lib.sh"
test_setup
export OMP_NUM_THREADS=1
PY=/usr/bin/python3
REF=$SRC_DIR/tests/hf_llama_ref.py
cd "$tmp" || exit 1
# ref ARGS...: hf_llama_ref.py's PASS/FAIL lines into the tally (a helper that prints none is a failed check)
ref() {
    "$PY" "$REF" "$@" >ref.out 2>&1
    grep -q '^PASS\|^FAIL' ref.out || { cat ref.out; bad "hf_llama_ref.py $1 ran"; return; }
    tally_lines <ref.out
}
TRAIN=(--input_dir "$SRC_DIR/data/fortunes_ids.npz" --max_seq_len 32 --global_batch_size 4 --max_steps 3
       --max_lr 1e-3 --min_lr 1e-4 --warmup_rate 0.1 --decay_steps 3 --logging_freq 1 --seed 7 --save_steps -1)
train() { # name np model_dir args...
    local name=$1 np=$2 model=$3
    shift 3
    "$LLM4D" launch --nproc "$np" --log_dir "$name/log" -- train --model_name_or_path "$model" "${TRAIN[@]}" \
        --output_dir "$name/out" "$@" >"$name.stdout" 2>&1 || { echo "run $name failed:"; tail -5 "$name.stdout"; }
}

# ---- 1. an HF Llama directory, imported and trained ----
"$PY" "$REF" make hf
check "the HF directory is sharded: two files and an index, bf16" \
    bash -c 'test -s hf/model-00001-of-00002.safetensors -a -s hf/model-00002-of-00002.safetensors \
             -a -s hf/model.safetensors.index.json -a ! -e hf/model.safetensors && grep -q BF16 hf/model-00001-of-00002.safetensors'
check "convert --from hf imports it" "$LLM4D" convert --from hf --hf_dir hf --out imp
ref same hf imp/step_0
check "meta.json describes the Llama (RMSNorm, rope theta 20000, SwiGLU, 4 kv heads, no bias, untied), weights only" \
    "$PY" -c "
import json, os, sys
m = json.load(open('imp/step_0/meta.json'))
d = m['model']
want = dict(type='LLaMA', normalization='RMSNorm', position_embedding_type='rope', rope_theta=20000,
            hidden_act='swiglu', num_key_value_heads=4, add_bias_linear=False, tie_word_embeddings=False,
            norm_epsilon=1e-5, hidden_size=64, num_layers=2, ffn_hidden_size=192, vocab_size=50257,
            hidden_dropout_prob=0, attention_probs_dropout_prob=0)
bad = [k for k in want if d.get(k) != want[k]]
print('meta.json differs at', bad) if bad else None
sys.exit(1 if bad or m['converted_from']['format'] != 'huggingface-llama' or m['format']['optimizer'] is not None
         or sorted(os.listdir('imp/step_0')) != ['meta.json', 'model.safetensors'] else 0)"
train single 1 imp --micro_batch_size 2 --debug_dump "$tmp/dump"
ref forward hf dump single/out/metrics.jsonl
train mp2 2 imp --micro_batch_size 2 --mp_degree 2
train pp2 2 imp --micro_batch_size 1 --pp_degree 2
"$PY" - "$tmp" >layouts.out <<'EOF'
import json, os, sys
def losses(name):
    p = f"{sys.argv[1]}/{name}/out/metrics.jsonl"
    return [d["loss"] for d in map(json.loads, open(p)) if "step" in d] if os.path.exists(p) else []
one = losses("single")
for name in ("mp2", "pp2"):
    two = losses(name)
    ok = len(one) == len(two) == 3 and all(abs(a - b) <= 1e-5 for a, b in zip(one, two))
    print(("ok " if ok else "FAIL ") + f"the import trains on {name}: its 3 losses {two} equal one process's {one} "
          "within 1e-5")
EOF
tally_lines <layouts.out

"$PY" "$REF" make hf_tb --tied --bias --seed 2
check "a tied Llama with biases imports" "$LLM4D" convert --from hf --hf_dir hf_tb --out imp_tb
ref same hf_tb imp_tb/step_0
train tb 1 imp_tb --micro_batch_size 2 --max_steps 1 --decay_steps 1 --debug_dump "$tmp/dump_tb"
ref forward hf_tb dump_tb tb/out/metrics.jsonl

# ---- 2. grouped-query attention's shapes ----
"$PY" "$REF" make hf_gqa --kv 2 --seed 3 --shards 1
check "a Llama with 2 key/value heads of 4 imports" "$LLM4D" convert --from hf --hf_dir hf_gqa --out imp_gqa
ref same hf_gqa imp_gqa/step_0
check "its k_proj and v_proj are [32, 64] and meta.json says 2 key/value heads" "$PY" -c "
import json, sys
sys.path.insert(0, '$SRC_DIR/tests')
import hf_llama_ref as r
t = r.load('imp_gqa/step_0')
m = json.load(open('imp_gqa/step_0/meta.json'))['model']
sys.exit(0 if t['model.layers.1.self_attn.k_proj.weight'].shape == (32, 64) and
         t['model.layers.0.self_attn.v_proj.weight'].shape == (32, 64) and m['num_key_value_heads'] == 2 else 1)"
check "it exports" "$LLM4D" convert --to hf --ckpt imp_gqa --out hf_gqa_back
ref export hf_gqa_back hf_gqa
ref same hf_gqa hf_gqa_back

# ---- 3. round trips ----
check "convert --from init writes a random llama-tiny (vocab 1000, noise on every tensor)" \
    "$LLM4D" convert --from init --out ck --model_name_or_path llama-tiny -o Model.vocab_size=1000 \
    -o Model.num_layers=3 --init_noise 0.1 --seed 5
check "convert --from init writes a tied llama-tiny with biases and 2 key/value heads" \
    "$LLM4D" convert --from init --out ck2 --model_name_or_path llama-tiny -o Model.vocab_size=1000 \
    -o Model.tie_word_embeddings=true -o Model.add_bias_linear=true -o Model.num_key_value_heads=2 \
    --init_noise 0.1 --seed 6
for c in ck ck2; do
    "$LLM4D" convert --to hf --ckpt $c --out hf_$c >export_$c.out 2>&1
    check "$c exports to HF: $(cat export_$c.out)" grep -q "wrote hf_$c/config.json and model.safetensors (Llama" \
        export_$c.out
    ref export hf_$c $c/step_0
    ref same $c/step_0 hf_$c
    check "$c's export imports" "$LLM4D" convert --from hf --hf_dir hf_$c --out back_$c
    ref same $c/step_0 back_$c/step_0
done
check "the HF import exports back" "$LLM4D" convert --to hf --ckpt imp --out hf_back
ref export hf_back hf
ref same hf hf_back

# ---- 4. refusals ----
for mode in rope_scaling abias head_dim missing shape act mistral; do "$PY" "$REF" bad hf "hf_$mode" "$mode"; done
refused "rope_scaling (Llama 3.1's llama3) is refused" "rope_scaling is set (type 'llama3', Llama 3.1's); llm4d's rotary positions are unscaled" \
    "$LLM4D" convert --from hf --hf_dir hf_rope_scaling --out x_rope_scaling
refused "attention_bias without mlp_bias is refused" "attention_bias is true but mlp_bias is false" \
    "$LLM4D" convert --from hf --hf_dir hf_abias --out x_abias
refused "another head_dim is refused" "head_dim is 32, not hidden_size / num_attention_heads = 16" \
    "$LLM4D" convert --from hf --hf_dir hf_head_dim --out x_head_dim
refused "a missing tensor is refused" "has no tensor 'model.layers.1.mlp.up_proj.weight'; the model files" \
    "$LLM4D" convert --from hf --hf_dir hf_missing --out x_missing
refused "a shape config.json does not imply is refused" "k_proj.weight' has shape \[32, 64\] but config.json implies \[64, 64\]" \
    "$LLM4D" convert --from hf --hf_dir hf_shape --out x_shape
refused "another hidden_act is refused" "hidden_act is gelu" \
    "$LLM4D" convert --from hf --hf_dir hf_act --out x_act
refused "another model_type is refused" "model_type is 'mistral'" \
    "$LLM4D" convert --from hf --hf_dir hf_mistral --out x_mistral
check "refused imports wrote nothing" test -z "$(ls -d x_* 2>/dev/null)"
"$LLM4D" convert --from init --out ck_ln --model_name_or_path llama-tiny -o Model.vocab_size=1000 \
    -o Model.normalization=LayerNorm >/dev/null
refused "exporting a Llama-family model with LayerNorm is refused" "LayerNorm, which transformers' LlamaForCausalLM" \
    "$LLM4D" convert --to hf --ckpt ck_ln --out y_ln
"$LLM4D" convert --from init --out ck_gr --model_name_or_path gpt2-tiny -o Model.vocab_size=1000 \
    -o Model.position_embedding_type=rope >/dev/null
refused "exporting a GPT-2 with rotary positions is refused" "rotary positions, which transformers' GPT2LMHeadModel" \
    "$LLM4D" convert --to hf --ckpt ck_gr --out y_gr
check "refused exports wrote nothing" test -z "$(ls -d y_* 2>/dev/null)"

# ---- 5. the tokenizer ----
"$PY" "$SRC_DIR/tests/hf_bpe_oracle.py" toy toy >/dev/null
"$LLM4D" convert --from init --out ck_tok --model_name_or_path llama-tiny -o Model.vocab_size=390 >/dev/null
"$LLM4D" convert --to hf --ckpt ck_tok --out hf_tok --vocab_dir toy/llama3/tokenizer.json >tok.out 2>&1
check "an export with --vocab_dir tokenizer.json says so: $(cat tok.out)" \
    grep -q "hf_tok/config.json, model.safetensors and the tokenizer's tokenizer.json, tokenizer_config.json" tok.out
check "tokenizer.json is copied as it is" cmp toy/llama3/tokenizer.json hf_tok/tokenizer.json
check "tokenizer_config.json names PreTrainedTokenizerFast and <|begin_of_text|>; config.json's bos_token_id is its id" \
    "$PY" -c "
import json, sys
t = json.load(open('hf_tok/tokenizer_config.json'))
c = json.load(open('hf_tok/config.json'))
ids = {a['content']: a['id'] for a in json.load(open('toy/llama3/tokenizer.json'))['added_tokens']}
sys.exit(0 if t['tokenizer_class'] == 'PreTrainedTokenizerFast' and t['bos_token'] == '<|begin_of_text|>'
         and t['model_max_length'] == 256 and c['bos_token_id'] == ids['<|begin_of_text|>'] else 1)"
"$LLM4D" convert --from init --out ck_tok300 --model_name_or_path llama-tiny -o Model.vocab_size=300 >/dev/null
refused "a tokenizer.json with more ids than the model's vocabulary is refused" "vocabulary has 300 tokens but .* has ids up to 389" \
    "$LLM4D" convert --to hf --ckpt ck_tok300 --out y_tok300 --vocab_dir toy/llama3
check "and wrote nothing" test ! -e y_tok300

finish
