/* gpt.h — the GPT-2/GPT-3 decoder: forward and backward over one micro-batch.
 *
 * token + learned position embeddings -> dropout -> L pre-LayerNorm blocks
 *   x = x + dropout(c_proj(attn(ln_1(x))));  x = x + dropout(c_proj(gelu(c_fc(ln_2(x)))))
 * -> ln_f -> logits = x wte^T (the LM head is tied to the token embedding) -> softmax cross-entropy over the real
 * vocabulary (padded logits masked out).
 *
 * The model owns its parameters, gradients and activations (allocated once, accounted by category), and calls
 * only the backend's method table. With recompute, forward keeps only each block's input, and backward runs the
 * block's forward again just before its backward (PaddleFleetX's recompute_granularity "full"). */
#ifndef LLM4D_MODEL_GPT_H
#define LLM4D_MODEL_GPT_H

#include <stdint.h>

#include "backend/backend.h"
#include "config/config.h"
#include "core/mem.h"
#include "model/params.h"

typedef struct {
    float *ln1, *ln1_mean, *ln1_rstd;  /* [BT,C], [BT], [BT] */
    float *qkv;                        /* [BT,3C] */
    float *atty;                       /* [BT,C] attention output before c_proj */
    float *lse;                        /* [B,NH,T] log-sum-exp of each attention row (rebuilds softmax) */
    float *res2;                       /* [BT,C] residual stream after the attention sublayer */
    float *ln2, *ln2_mean, *ln2_rstd;
    float *fch;                        /* [BT,F] c_fc output (GELU's input; its output is recomputed, not kept) */
} llm4d_block_acts;

/* Where the model finds a parameter group's weights and gradients (groups: params.h). Data parallel leaves these
 * unset (everything lives in the flat buffers); ZeRO-3 gathers a group's weights in params_for and frees them in
 * release; ZeRO-2 hands out a bucket in grads_for and reduce-scatters it in grads_done; data parallel starts a
 * bucket's all-reduce in grads_done. pass is 0 in forward, 1 in backward (recompute re-reads in backward). */
typedef struct {
    void *ctx;
    float *(*params_for)(void *ctx, int group, int pass);
    void (*release)(void *ctx, int group, int pass);
    float *(*grads_for)(void *ctx, int group);
    void (*grads_done)(void *ctx, int group); /* called once per backward for each group, last writer first */
} llm4d_gpt_hooks;

typedef struct {
    llm4d_model_config cfg;
    llm4d_gpt_hooks hooks;   /* zero: parameters and gradients in the flat buffers */
    llm4d_param_table table;
    llm4d_backend *be;
    llm4d_mem *mem;
    float *params;   /* flat, table.total elements */
    float *grads;    /* same layout */

    int B, T;        /* micro-batch shape the activations are sized for */
    int recompute;
    uint64_t seed;   /* dropout seed */

    float **res;             /* res[l], l = 0..L: input of block l; res[L] is the last block's output */
    llm4d_block_acts *acts;  /* L blocks, or 1 shared block when recomputing */
    float *lnf, *lnf_mean, *lnf_rstd;
    float *logits;           /* [BT,Vp] of the last logits-only forward (targets NULL); allocated on first use */
    float *head;             /* [head_rows,Vp]: one chunk of logits, then of their gradient (loss forwards) */
    int head_rows;           /* chunk size; may be lowered after creation (tests), never raised */
    float *xstats;           /* [3 x head_rows] softmax statistics of a chunk (backend.h, xent_forward) */
    float *dlnf;             /* [BT,C] gradient of ln_f's output, left by a forward with grad for backward */
    float *losses;           /* [BT] per-token loss */
    /* scratch shared by all blocks: GELU's output (c_proj's input, refilled from fch in backward), gradients */
    float *gelu;
    float *dres, *dres2, *dln, *dqkv, *datty, *dproj, *dfch, *dfch_gelu;
    size_t act_bytes;        /* bytes of activations held (for the report) */
} llm4d_gpt;

/* Build the model: parameter table, flat params/grads buffers (params initialised from cfg seed), activations for
 * micro-batches of B x T. */
llm4d_code llm4d_gpt_create(llm4d_gpt *g, const llm4d_model_config *cfg, llm4d_backend *be, llm4d_mem *mem, int B,
                            int T, int recompute, uint64_t seed, llm4d_err *err);

/* How a parallel engine wants the model's state laid out. */
typedef struct {
    int group_align;  /* pad every parameter group to a multiple of this many elements (ZeRO shards) */
    int no_params;    /* do not allocate the flat parameter buffer (ZeRO-3 gathers groups through the hooks) */
    int no_grads;     /* do not allocate the flat gradient buffer (ZeRO-2/3 hand out buckets through the hooks) */
} llm4d_gpt_layout;

llm4d_code llm4d_gpt_create_ex(llm4d_gpt *g, const llm4d_model_config *cfg, llm4d_backend *be, llm4d_mem *mem,
                               int B, int T, int recompute, uint64_t seed, const llm4d_gpt_layout *layout,
                               llm4d_err *err);
void llm4d_gpt_destroy(llm4d_gpt *g);

/* Forward a micro-batch. tokens/targets [B*T]; sample_ids [B] global sample index of each row (dropout positions);
 * step is the global step (dropout stream); train enables dropout. weight[i] (may be NULL: all 1) weighs token i's
 * loss; the return value is sum_i losses[i] * weight[i]. targets NULL: no loss, g->logits receives the logits.
 *
 * The LM head and the cross-entropy run in chunks of head_rows tokens, so the [BT, V] logits never exist at once
 * (at B=8 T=1024 they would be 1.6 GB). With grad, each chunk's logits become their gradient (d loss = weight) and
 * the LM head's backward runs right there: d(ln_f output) into g->dlnf and d(wte) into the embedding gradients.
 * llm4d_gpt_backward must then follow, and finishes the rest. */
double llm4d_gpt_forward(llm4d_gpt *g, const int32_t *tokens, const int32_t *targets, const float *weight,
                         const int64_t *sample_ids, uint32_t step, int train, int grad, int B, int T);
/* Backward of the last forward (same arguments), accumulating into g->grads. */
void llm4d_gpt_backward(llm4d_gpt *g, const int32_t *tokens, const int64_t *sample_ids, uint32_t step, int train,
                        int B, int T);

/* FLOPs per token of one training step (forward + backward): 6 x (parameters in matmuls) + attention's
 * 12 x L x T x C (QK^T and AV, forward and backward, full T x T), the convention of llm.c and Megatron. */
double llm4d_gpt_flops_per_token(const llm4d_model_config *cfg, int T);

#endif
