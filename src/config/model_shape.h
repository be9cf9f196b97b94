/* model_shape.h — a decoder block's matrix shapes read from the model's description, for the formulas that cost a
 * model without running it (the pipeline's balanced split, parallel/pp_balance.c; the planner's trace-free lower
 * bound, plan/bound.c; the FLOPs per token of the logs' MFU, model/gpt.c).
 *
 * The model itself (model/block.c, embed.c) reads the description where it runs; these formulas used to write
 * GPT-2's shapes out (a 3C-wide QKV projection, a 4C GELU MLP, a learned position table, a tied head), which
 * overstates a grouped-query Llama's QKV and understates its SwiGLU MLP. Here, once: QKV is (NH + 2 NKV) x HS wide,
 * the MLP's first projection 2F (SwiGLU's gate and up) or F, its second F -> C; a zero description (GPT-2) gives
 * exactly the integers the formulas wrote before. */
#ifndef LLM4D_CONFIG_MODEL_SHAPE_H
#define LLM4D_CONFIG_MODEL_SHAPE_H

#include <stdint.h>

#include "config/config.h"

typedef struct {
    int64_t C, F, NH, NKV, HS; /* hidden, MLP width (ffn_hidden_size; 0: 4C), heads, key/value heads, head size */
    int64_t qkv;               /* the attention's input projection's output features, (NH + 2 NKV) HS: 3C at NKV = NH */
    int64_t fc;                /* the MLP's first projection's output features: 2F with SwiGLU, else F */
    /* one tensor-parallel rank's share (mp ranks: whole heads, F / mp columns), as model/gpt.c splits them */
    int64_t qkv_l, attn_l, fc_l, f_l; /* QKV outputs (NH/mp + 2 max(NKV/mp, 1)) HS, attention width C/mp, fc
                                       * outputs, F/mp */
    int64_t block_matmul;      /* a block's GEMM weights: C qkv + C C + C fc + F C (no biases, norms) */
    int64_t head_matmul;       /* the LM head's: V C (the real vocabulary; tied or not, it is a GEMM) */
    int wpe;                   /* a learned position table (GPT-2); RoPE has none */
    int tied;                  /* the head is the token embedding */
} llm4d_model_shape;

/* The shapes of m at mp tensor-parallel ranks (mp < 1: 1). */
llm4d_model_shape llm4d_model_shape_of(const llm4d_model_config *m, int mp);

#endif
