/* gpt.h — the decoder (GPT-2/GPT-3, or Llama-shaped), or this rank's part of it: forward and backward of
 * micro-batches.
 *
 * token + learned position embeddings -> dropout -> L pre-LayerNorm blocks
 *   x = x + dropout(c_proj(attn(ln_1(x))));  x = x + dropout(c_proj(gelu(c_fc(ln_2(x)))))
 * -> ln_f -> logits = x wte^T (the LM head is tied to the token embedding) -> softmax cross-entropy over the real
 * vocabulary (padded logits masked out). The model's description (config.h, config/model_desc.c) swaps the parts
 * for Llama's: RMSNorm, rotary positions on Q and K instead of learned ones, SwiGLU, grouped-query attention, no
 * biases, an LM head of its own (lm_head); block.c says how.
 *
 * A rank holds a part of the model (params.h, llm4d_model_part): its tensor-parallel slice (model/tp.h; the math
 * and communication of each layer are at the top of block.c and embed.c) of the blocks of its pipeline chunks, plus
 * the embeddings on the first stage and ln_f + the head + the loss on the last. The entry points run one chunk for
 * one micro-batch, from a given input activation, keeping that micro-batch's activations in a slot until its
 * backward; a pipeline schedule keeps several micro-batches in flight, each in its own slot. Without pipeline
 * parallelism there is one chunk and one slot, and llm4d_gpt_forward / llm4d_gpt_backward run the whole model.
 *
 * The model owns its activations (allocated once, accounted by category) and calls only the backend's method
 * table and, for tensor parallelism, the tensor-parallel group (tp.h). It finds a parameter group's weights and
 * gradients through hooks (below), which the parallel engines fill (parallel/engine.h); it knows nothing else of
 * them. With recompute, forward keeps only each block's input, and backward runs the block's forward again just
 * before its backward (PaddleFleetX's recompute_granularity "full").
 *
 * Types (backend/tensor.h). The layout says the type of the activations (`act`: fp32, or under AMP O2 the 16-bit
 * type, as PaddleFleetX's O2 and Megatron's --bf16 keep them) and of the residual stream (`res`: act, or fp32 with
 * Megatron's fp32_residual_connection). Every activation a block keeps or hands on, and the activation gradients
 * between layers, are of those types: LayerNorm outputs, Q/K/V, the attention output, the MLP's hidden layer, the
 * logits chunks and their gradient, the residual stream and its gradient, the pipeline's messages. Reductions stay
 * fp32: the LayerNorm, softmax and loss statistics, and the sums over ranks or over parts, which the model takes
 * before it rounds: a row-parallel layer's output (summed over the tensor-parallel group, then added to the residual
 * and rounded once), the gradient of a LayerNorm's output (summed over the group, read by LayerNorm's backward),
 * the embedding's lookup (vocabulary blocks and ranks) plus the positions, and d(ln_f output) (vocabulary blocks
 * and ranks). Values are therefore rounded at the same points in every layout. */
#ifndef LLM4D_MODEL_GPT_H
#define LLM4D_MODEL_GPT_H

#include <stdint.h>

#include "backend/backend.h"
#include "config/config.h"
#include "core/mem.h"
#include "model/params.h"
#include "model/tp.h"

/* What a block keeps from forward for backward. Sizes with BT tokens of the micro-batch, BTl = BT/M with sequence
 * parallelism (else BT), the tensor-parallel slice C/M of the attention, F/M of the MLP. */
typedef struct {
    llm4d_tensor ln1;                  /* [BTln,C] ln_1's output (BTln: llm4d_gpt_ln_local) */
    float *ln1_mean, *ln1_rstd;        /* [BTl] (mean: LayerNorm's only) */
    llm4d_tensor qkv;                  /* [BT,QKVl] this rank's heads' Q, K, V (with rotary positions: Q and K
                                        * turned) */
    llm4d_tensor atty;                 /* [BT,C/M] attention output before c_proj */
    float *lse;                        /* [B,NH/M,T] log-sum-exp of each attention row (rebuilds softmax) */
    uint32_t *attn_bits;               /* [B,NH/M,T,T/32] the attention dropout's mask (backend.h llm4d_dropout.bits;
                                        * NULL without attention dropout) */
    llm4d_tensor res2;                 /* [BTl,C] residual stream after the attention sublayer (type res) */
    llm4d_tensor ln2;                  /* [BTln,C] */
    float *ln2_mean, *ln2_rstd;        /* [BTl] */
    llm4d_tensor fch;                  /* [BT,FCl] c_fc output (GELU's or SwiGLU's input; their output is
                                        * recomputed, not kept) */
} llm4d_block_acts;

/* Zero-bubble pipelines (split backward): the output gradients of a block's four linear layers, kept from the
 * input-gradient pass (B) to the weight-gradient pass (W). */
typedef struct {
    llm4d_tensor dqkv;  /* [BT,QKVl] */
    llm4d_tensor dattn; /* [BT,C] gradient at attn.c_proj's output (all tokens) */
    llm4d_tensor dfch;  /* [BT,FCl] gradient at c_fc's output */
    llm4d_tensor dmlp;  /* [BT,C] gradient at mlp.c_proj's output */
    float *dln[4];      /* [C] each, contiguous: ln_1 weight, bias, ln_2 weight, bias gradients (computed in B) */
} llm4d_block_wgrad;

/* One micro-batch in flight through one chunk. */
typedef struct {
    llm4d_tensor *res;         /* res[i], i = 0..nl: [BTl,C] input of the chunk's i-th block; res[nl] its output
                                * (type res). After backward res[0] holds the gradient of the chunk's input. */
    llm4d_block_acts *acts;    /* nl blocks, or NULL with recompute (the model's shared set is refilled) */
    llm4d_block_wgrad *wg;     /* nl blocks when backward is split (zero-bubble schedules), else NULL */
    float *dlnf;               /* last chunk: [BTl,C] d(ln_f output), left by a forward with grad for backward */
    float *lnf_mean, *lnf_rstd; /* last chunk: [BTl] ln_f's statistics */
    int busy;                  /* a micro-batch is in it */
} llm4d_slot;

/* Where the model finds a parameter group's weights and gradients (groups: params.h). The engines fill these
 * (parallel/engine.h): data parallel leaves params/grads in the flat buffers; ZeRO-3 gathers a group's weights in
 * params_for and frees them in release; ZeRO-2 hands out a bucket in grads_for and reduce-scatters it in
 * grads_done; data parallel starts a bucket's all-reduce in grads_done. pass is 0 in forward, 1 in backward
 * (recompute re-reads in backward). A gradient "window" is one grads_for ... grads_done: every group has one per
 * micro-batch, except the tied token embedding on a rank holding both ends of the model, which has two (the LM
 * head's, inside forward, and the lookup's, at the end of backward): llm4d_gpt_windows. grads_done carries the event
 * the model recorded on the compute stream after the window's last kernel: an engine reducing the gradient on the
 * communicator's data plane orders the reduction after it (comm.h), at once or when its bucket is full. */
typedef struct {
    void *ctx;
    float *(*params_for)(void *ctx, int group, int pass);
    void (*release)(void *ctx, int group, int pass);
    float *(*grads_for)(void *ctx, int group);
    void (*grads_done)(void *ctx, int group, const llm4d_event *ready);
} llm4d_gpt_hooks;

/* One micro-batch: tokens, targets, weight [B*T] (the whole micro-batch on every rank; the model takes its
 * sequence-parallel share itself), all in device memory (uploaded: train/devbatch.h). weight[i] weighs token i's
 * loss (NULL: all 1). */
typedef struct {
    const int32_t *tokens, *targets;
    const float *weight;
    const int64_t *sample_ids;  /* [B] global sample index of each row: dropout positions */
    uint32_t step;              /* the global step: dropout stream */
    int train;                  /* dropout on */
    int grad;                   /* a training forward: the LM head's backward runs inside it (see below) */
    int B, T;
} llm4d_micro;

typedef struct {
    int B, T;                  /* micro-batch shape the activations are sized for */
    int recompute;
    int slots[LLM4D_MAX_CHUNKS]; /* activation slots per chunk (micro-batches in flight); 0 means 1 */
    int split_backward;        /* keep the linear layers' output gradients for a later weight-gradient pass */
    int no_params;             /* do not allocate the flat parameter buffer (ZeRO-3 gathers through the hooks) */
    int no_grads;              /* do not allocate the flat gradient buffer (ZeRO-2/3 hand out buckets) */
    llm4d_ftype act, res;      /* the activations' type and the residual stream's (see the top; zero: fp32) */
} llm4d_gpt_layout;

typedef struct {
    llm4d_model_config cfg;
    llm4d_gpt_hooks hooks;   /* zero: parameters and gradients in the flat buffers */
    llm4d_param_table table;
    llm4d_backend *be;
    llm4d_mem *mem;
    llm4d_event *grads_ready; /* recorded at every gradient window's end (the hooks' grads_done) */
    llm4d_tp tp;
    float *params;   /* flat, table.total elements (NULL with layout.no_params) */
    float *grads;    /* same layout (NULL with layout.no_grads) */

    llm4d_gpt_layout layout;
    int B, T, BT, BTl;       /* micro-batch shape; BTl: tokens this rank holds in the LayerNorm/dropout regions */
    llm4d_ftype act, res;    /* the layout's types */
    int C, F, NH, Cl, Fl, NHl, Vl; /* hidden, ffn, heads; their tensor-parallel slices; vocabulary rows per rank */
    int NKV, NKVl;           /* key/value heads (grouped-query attention: fewer than NH) and this rank's */
    int QKVl, FCl;           /* this rank's widths of the attention's input projection, (NHl + 2 NKVl) x head size,
                              * and of the MLP's, Fl (GELU) or 2 Fl (SwiGLU's gate and up) */
    int64_t tok0;            /* first token of this rank's sequence-parallel share (0 without) */
    uint64_t seed;           /* dropout seed */

    int nl[LLM4D_MAX_CHUNKS];           /* blocks per chunk */
    llm4d_slot *slot[LLM4D_MAX_CHUNKS]; /* slots per chunk */
    int *group_of_layer;     /* [num_layers] group of each block held, -1 otherwise */
    size_t boff[LLM4D_P_NKINDS]; /* offset of each block parameter kind inside a block group */
    int has[LLM4D_P_NKINDS];   /* the block has parameters of that kind (no biases in a Llama block, ...) */
    int lnf_group, wpe_group;

    llm4d_block_acts racts;  /* recompute: the shared block activations */
    float *logits;           /* [BT,Vl] of the last logits-only forward (targets NULL); allocated on first use */
    llm4d_tensor head;       /* [head_rows,Vl]: one chunk of logits, then of their gradient (type act) */
    int head_rows;           /* chunk size; may be lowered after creation (tests), never raised */
    float *xstats;           /* [BT/head_rows chunks][3 x head_rows] softmax statistics (backend.h, xent_forward) */
    float *xmax;             /* [head_rows] the group's maximum of a chunk's row maxima (vocabulary parallel) */
    float *losses;           /* [BT] per-token loss */
    double *loss_acc;        /* [1] the weighted losses of the micro-batches forwarded since the last take */
    llm4d_tensor lnf;        /* [BT,C] ln_f's output as the head reads it (type act) */
    float *dlnf_full;        /* [BT,C] the head's partial d(ln_f output) before the tensor-parallel reduction */
    /* scratch shared by all blocks: a row-parallel output or gathered input, and gradients (GELU's output is never
     * stored: c_proj reads fch through it, backend.h linear_forward_act). full and dlocal have room for fp32 and
     * hold either type as their use says; dres, dres2 are the residual stream's type, dln fp32 (a LayerNorm
     * output's gradient, summed over the tensor-parallel group before LayerNorm's backward reads it), the others
     * the activations' type. */
    void *full;              /* [BT,C] (a row-parallel output before its reduction, fp32; a gathered input) */
    void *dlocal;            /* [BTl,C] (this rank's tokens: a LayerNorm output before its gather, a reduced sum) */
    float *dln;
    llm4d_tensor dres, dres2, dqkv, datty, dproj, dfch, dfch_gelu;
    llm4d_tensor swi;        /* SwiGLU: [BT, F/M] its output, made again where the down projection reads it (as GELU's,
                              * it is not kept) */
    size_t act_bytes;        /* bytes of activations held (for the report) */
    llm4d_operand_sizes operands; /* the largest GEMM operands of a step (the memory plan's backend estimate) */
    int n_allocs;            /* everything allocated at creation, freed by destroy */
    struct llm4d_gpt_alloc *allocs;
    size_t slot_bytes;       /* bytes of one slot of each chunk, summed over chunks */
    int slots_peak[LLM4D_MAX_CHUNKS]; /* most slots of each chunk busy at once (a pipeline's in-flight count) */
} llm4d_gpt;

/* Whether a block keeps only this rank's tokens of its LayerNorm outputs (BTln = BTl) and gathers them again for
 * backward, as Megatron-LM does under sequence parallelism; else it keeps them gathered (BTln = BT). Recompute's
 * one refilled block keeps them gathered: its backward follows its forward at once. */
static inline int llm4d_gpt_ln_local(const llm4d_gpt *g) { return g->tp.sp && !g->layout.recompute; }

/* What a rank builds: the part `part` of the model cfg, over the tensor-parallel context tp (its size and rank must
 * be the part's), laid out as layout says (micro-batch shape, slots, types). */
typedef struct {
    const llm4d_model_config *cfg;
    const llm4d_model_part *part;
    const llm4d_tp *tp;
    const llm4d_gpt_layout *layout;
} llm4d_gpt_spec;

/* Build the model part spec describes on be: parameter table, flat params/grads buffers (params initialised from
 * seed), activations for micro-batches of layout->B x layout->T. */
llm4d_code llm4d_gpt_create(llm4d_gpt *g, const llm4d_gpt_spec *spec, llm4d_backend *be, llm4d_mem *mem, uint64_t seed,
                            llm4d_err *err);
/* The bytes per memory category llm4d_gpt_create would allocate for the same arguments, without allocating them
 * (the same code runs, counting): the model's part of a rank's memory plan. operands (may be NULL): the sizes of
 * the step's largest GEMM operands, for the backend's share of the plan (backend.h operand_workspace). */
llm4d_code llm4d_gpt_plan(const llm4d_model_config *cfg, const llm4d_model_part *part, const llm4d_tp *tp,
                          const llm4d_gpt_layout *layout, size_t bytes[LLM4D_MEM_NCATEGORIES],
                          llm4d_operand_sizes *operands, llm4d_err *err);
/* The same with the part's parameter table given (table NULL: built), for a caller that keeps tables by part (the
 * planner's memory-plan memo): building the table, which names every parameter, was most of a counting run. The
 * table must be the one llm4d_param_table_build makes of part, or of a part with the same block count per chunk (the
 * counting reads its sizes, not the blocks' places); it is only read. */
llm4d_code llm4d_gpt_plan_table(const llm4d_model_config *cfg, const llm4d_model_part *part, const llm4d_tp *tp,
                                const llm4d_gpt_layout *layout, const llm4d_param_table *table,
                                size_t bytes[LLM4D_MEM_NCATEGORIES], llm4d_operand_sizes *operands, llm4d_err *err);
/* The whole model in one process, one slot: what tests and tools use. Of layout, only B, T and recompute are read. */
llm4d_code llm4d_gpt_create_whole(llm4d_gpt *g, const llm4d_model_config *cfg, llm4d_backend *be, llm4d_mem *mem,
                                  const llm4d_gpt_layout *layout, uint64_t seed, llm4d_err *err);
void llm4d_gpt_destroy(llm4d_gpt *g);

/* Gradient windows per micro-batch of group grp (see the hooks). */
int llm4d_gpt_windows(const llm4d_gpt *g, int grp);

/* ---- one chunk, one micro-batch ---- */

/* The slot's input buffer of chunk c (not the model's first chunk): where the previous stage's output goes. */
llm4d_tensor llm4d_gpt_chunk_input(llm4d_gpt *g, int c, int slot);
/* The slot's output of chunk c after its forward (not the last chunk): what goes to the next stage. */
llm4d_ctensor llm4d_gpt_chunk_output(const llm4d_gpt *g, int c, int slot);
/* The gradient of chunk c's input after its backward (not the first chunk): what goes to the previous stage. */
llm4d_ctensor llm4d_gpt_chunk_dinput(const llm4d_gpt *g, int c, int slot);
/* Elements of a chunk's input/output activation, [BTl, C], and its bytes (the residual stream's type). */
size_t llm4d_gpt_act_elems(const llm4d_gpt *g);
size_t llm4d_gpt_act_bytes(const llm4d_gpt *g);

/* Forward of chunk c for micro-batch mb into `slot` (marked busy). The model's first chunk embeds mb->tokens; any
 * other reads llm4d_gpt_chunk_input. The model's last chunk adds the loss, sum_i losses[i] * weight[i], to the
 * model's loss accumulator in device memory (every tensor-parallel rank adds the same value; llm4d_gpt_loss_take
 * reads it back), and with mb->grad runs the LM head's backward right there: the [BT, V] logits never exist, each
 * chunk of them becomes its gradient (d loss = weight), d(ln_f output) waits in the slot for backward and d(wte)
 * goes to the embedding's gradients. */
void llm4d_gpt_chunk_forward(llm4d_gpt *g, int c, int slot, const llm4d_micro *mb);
/* The losses the last chunk accumulated since the last take (0 on a rank without the last chunk), read back to the
 * host once (this synchronises), and the accumulator cleared. */
double llm4d_gpt_loss_take(llm4d_gpt *g);
/* Backward of the same micro-batch: dout is the gradient of chunk c's output ([BTl, C]; NULL for the last chunk).
 * With split (and the layout's split_backward), only input gradients (and the cheap LayerNorm, bias and embedding
 * gradients) are computed now, and llm4d_gpt_chunk_backward_weight must follow; the slot stays busy until then. */
void llm4d_gpt_chunk_backward(llm4d_gpt *g, int c, int slot, const llm4d_micro *mb, llm4d_ctensor dout, int split);
/* The weight-gradient pass of a split backward: the four linear layers' weight gradients of every block of the
 * chunk; frees the slot. */
void llm4d_gpt_chunk_backward_weight(llm4d_gpt *g, int c, int slot, const llm4d_micro *mb);

/* ---- the whole model (one chunk, slot 0) ---- */

/* Forward a micro-batch (device memory); returns its loss (llm4d_gpt_loss_take: anything accumulated before is
 * included). mb->targets NULL: no loss, g->logits receives this rank's vocabulary slice of the logits. */
double llm4d_gpt_forward(llm4d_gpt *g, const llm4d_micro *mb);
/* Backward of the last forward (same arguments), accumulating into the gradients. */
void llm4d_gpt_backward(llm4d_gpt *g, const int32_t *tokens, const int64_t *sample_ids, uint32_t step, int train,
                        int B, int T);

/* FLOPs per token of one training step (forward + backward): 6 x (parameters in matmuls) + attention's
 * 12 x L x T x C (QK^T and AV, forward and backward, full T x T), the convention of llm.c and Megatron. */
double llm4d_gpt_flops_per_token(const llm4d_model_config *cfg, int T);

/* ---- inside the model (block.c, embed.c) ---- */

/* Pointer to parameter `kind` inside block group buffer `base` (a group's weights or gradients). */
static inline float *llm4d_gpt_at(const llm4d_gpt *g, float *base, llm4d_param_kind kind) {
    return base + g->boff[kind];
}
float *llm4d_gpt_params_of(llm4d_gpt *g, int grp, int pass);
void llm4d_gpt_release(llm4d_gpt *g, int grp, int pass);
float *llm4d_gpt_grads_of(llm4d_gpt *g, int grp);
void llm4d_gpt_grads_done(llm4d_gpt *g, int grp);
llm4d_dropout llm4d_gpt_dropout(const llm4d_gpt *g, float p, int layer, int site, const llm4d_micro *mb);

void llm4d_gpt_block_forward(llm4d_gpt *g, llm4d_block_acts *a, llm4d_ctensor x, llm4d_tensor out, int l,
                             const llm4d_micro *mb);
void llm4d_gpt_block_backward(llm4d_gpt *g, llm4d_block_acts *a, llm4d_ctensor x, llm4d_block_wgrad *wg, int l,
                              const llm4d_micro *mb);
void llm4d_gpt_block_backward_weight(llm4d_gpt *g, llm4d_block_acts *a, llm4d_block_wgrad *wg, int l,
                                     const llm4d_micro *mb);

void llm4d_gpt_embed_forward(llm4d_gpt *g, llm4d_tensor out, const llm4d_micro *mb);
void llm4d_gpt_embed_backward(llm4d_gpt *g, llm4d_ctensor dout, const llm4d_micro *mb);
void llm4d_gpt_head_forward(llm4d_gpt *g, llm4d_slot *s, llm4d_ctensor x, const llm4d_micro *mb);
void llm4d_gpt_head_backward(llm4d_gpt *g, llm4d_slot *s, llm4d_ctensor x);
void llm4d_gpt_head_logits(llm4d_gpt *g, llm4d_slot *s, llm4d_ctensor x, int B, int T);

#endif
