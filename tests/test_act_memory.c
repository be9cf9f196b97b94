/* test_act_memory.c — the activations a block keeps, per layer, against Korthikanti et al. 2022 ("Reducing Activation
 * Recomputation in Large Transformer Models", arXiv 2205.05198, section 4), the bytes Megatron keeps per layer with
 * 16-bit activations (s sequence, b micro-batch, h hidden, a heads, t tensor-parallel ranks, sequence parallelism):
 *   full recompute: 2 s b h / t            (the block's 16-bit input)
 *   none:           s b h / t (34 + 5 a s / h)
 * llm4d's per-layer bytes are what the model's own counting run (llm4d_gpt_plan, the memory plan's) adds for one more
 * block: the activations category of L + 1 blocks minus that of L. Under AMP O2 (bf16 activations) full recompute
 * must keep exactly Megatron's 2 s b h / t (4 s b h / t with fp32_residual_connection), and without recompute no
 * more than its s b h / t (34 + 5 a s / h) (llm4d keeps no attention matrix and its dropout masks as bits); and
 * a model's whole activations category under O2 at most 0.55 of the fp32 run's (issue 42's target, gpt2-en at
 * B=8 T=1024, with and without recompute). Independent of the code's arithmetic: the formulas are the paper's. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "model/gpt.h"

/* The activations category of a layout (B, T, recompute, types) of model m over M tensor-parallel ranks. */
static double act_bytes(llm4d_model_config m, int L, int M, int sp, int B, int T, int recompute, llm4d_ftype act,
                        llm4d_ftype res) {
    m.num_layers = L;
    llm4d_model_part part = llm4d_model_part_whole(&m);
    part.mp_size = M, part.mp_rank = 0, part.sequence_parallel = sp && M > 1;
    llm4d_tp tp = {.size = M, .rank = 0, .sp = sp && M > 1};
    const llm4d_gpt_layout layout = {.B = B, .T = T, .recompute = recompute, .act = act, .res = res};
    size_t bytes[LLM4D_MEM_NCATEGORIES];
    llm4d_err err = {0};
    if (llm4d_gpt_plan(&m, &part, &tp, &layout, bytes, NULL, &err) != LLM4D_OK) {
        fprintf(stderr, "plan: %s\n", err.msg);
        exit(1);
    }
    return (double)bytes[LLM4D_MEM_ACTIVATIONS];
}

static llm4d_model_config model(int h, int a, int V) {
    llm4d_model_config m;
    memset(&m, 0, sizeof m);
    m.vocab_size = V;
    m.vocab_size_divisible_unit = 128;
    m.padded_vocab_size = (V + 127) / 128 * 128;
    m.hidden_size = h;
    m.num_attention_heads = a;
    m.ffn_hidden_size = 4 * h;
    m.max_position_embeddings = 2048;
    m.hidden_dropout_prob = m.attention_probs_dropout_prob = 0.1f;
    m.eos_token_id = V - 1;
    return m;
}

int main(void) {
    /* (h, a, s, b, t): GPT-2 124M's block at two sequences, and a GPT-3-like wide block over 2 and 8 ranks */
    const struct {
        int h, a, s, b, t;
    } shapes[] = {{768, 12, 1024, 8, 1}, {768, 12, 256, 4, 1}, {2048, 16, 2048, 1, 2}, {4096, 32, 2048, 2, 8}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int h = shapes[i].h, a = shapes[i].a, s = shapes[i].s, b = shapes[i].b, t = shapes[i].t;
        const llm4d_model_config m = model(h, a, 50257);
        const int sp = t > 1;
        const double sbh = (double)s * b * h;
        /* per layer: L = 3 blocks minus L = 2 */
#define PER_LAYER(rc, act, res) (act_bytes(m, 3, t, sp, b, s, rc, act, res) - act_bytes(m, 2, t, sp, b, s, rc, act, res))
        const double full16 = PER_LAYER(1, LLM4D_BF16, LLM4D_BF16), full32r = PER_LAYER(1, LLM4D_BF16, LLM4D_F32);
        const double none16 = PER_LAYER(0, LLM4D_BF16, LLM4D_BF16), none32 = PER_LAYER(0, LLM4D_F32, LLM4D_F32);
        const double kfull = 2 * sbh / t, knone = sbh / t * (34 + 5.0 * a * s / h);
        check(full16 == kfull, "h%d a%d s%d b%d t%d, full recompute, bf16: %.0f bytes per layer = 2 s b h / t = %.0f "
              "(Korthikanti et al. 2022)", h, a, s, b, t, full16, kfull);
        check(full32r == 2 * kfull, "h%d a%d s%d b%d t%d, full recompute, fp32 residual stream: %.0f bytes per layer = "
              "4 s b h / t = %.0f", h, a, s, b, t, full32r, 2 * kfull);
        check(none16 <= knone, "h%d a%d s%d b%d t%d, no recompute, bf16: %.0f bytes per layer <= s b h / t (34 + 5 a "
              "s / h) = %.0f (%.2fx Megatron's)", h, a, s, b, t, none16, knone, none16 / knone);
        check(none16 <= 0.55 * none32, "h%d a%d s%d b%d t%d, no recompute: bf16 %.0f bytes per layer <= 0.55 x fp32's "
              "%.0f (%.3fx)", h, a, s, b, t, none16, none32, none16 / none32);
#undef PER_LAYER
    }
    /* the whole activations category of gpt2-en (12 layers) at B=8 T=1024, O2 against fp32 */
    llm4d_model_config g = model(768, 12, 50257);
    for (int rc = 0; rc <= 1; rc++) {
        const double b16 = act_bytes(g, 12, 1, 0, 8, 1024, rc, LLM4D_BF16, LLM4D_BF16);
        const double b32 = act_bytes(g, 12, 1, 0, 8, 1024, rc, LLM4D_F32, LLM4D_F32);
        check(b16 <= 0.55 * b32, "gpt2-en B=8 T=1024, recompute %s: activations bf16 %.1f MiB <= 0.55 x fp32 %.1f MiB "
              "(%.3fx)", rc ? "on" : "off", b16 / 1048576, b32 / 1048576, b16 / b32);
    }
    return check_summary();
}
