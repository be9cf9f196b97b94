/* params.h — the GPT parameter table of one rank: one flat buffer, named views into it, each a box of a global
 * tensor.
 *
 * As in llm.c, a rank's parameters live in one contiguous buffer (and gradients, Adam m and v in buffers of the
 * same layout), so that all-reduce buckets, ZeRO partitions and checkpoint slices are plain ranges. The order is
 * the order of use in forward (embeddings, then the blocks, then the final LayerNorm), so one block's parameters are
 * one range: what ZeRO-3 gathers before a block and what a pipeline stage owns.
 *
 * A rank holds a PART of the model (llm4d_model_part): the blocks of its pipeline chunks, the embeddings if it is
 * the first stage, the final LayerNorm and the LM head if it is the last, and of each of those only its
 * tensor-parallel slice. Each table entry is a box of a global tensor (Megatron's partition_dim / stride):
 *   - replicated over the tensor-parallel group: the whole tensor (LayerNorms, the row-parallel layers' biases,
 *     the position embedding);
 *   - split on dim 0: rows [r*n/M, (r+1)*n/M) of the tensor: the column-parallel layers' weights and biases
 *     (attn.c_attn, mlp.c_fc: their output features) and the token embedding (vocabulary rows);
 *   - split on dim 1: columns [r*n/M, (r+1)*n/M): the row-parallel layers' weights (attn.c_proj.weight,
 *     mlp.c_proj.weight: their input features).
 * The attention's input projection gives Q (all heads), then K, then V (of the key/value heads: fewer under
 * grouped-query attention), so a rank's heads are three row ranges: its weight and bias are three entries (q, k, v
 * parts) adjacent in the buffer, which together form the rank's [(NH + 2 NKV) HS / M, C] matrix; SwiGLU's gate and
 * up projections likewise two entries forming [2F/M, C]. The token embedding and an untied LM head may also be cut
 * into vocabulary blocks (several entries of one name): ZeRO-2/3 gather and reduce one block at a time so that no
 * buffer the size of the whole embedding exists.
 *
 * Names are Hugging Face's global names with the GLOBAL block index: GPT-2's (transformer.h.3.attn.c_attn.weight:
 * Q, K and V are parts of one fused tensor, as are SwiGLU's gate and up in mlp.c_fc) or Llama's
 * (model.layers.3.self_attn.q_proj.weight, k_proj, v_proj, mlp.gate_proj, up_proj: each its own tensor); an untied
 * head is lm_head.weight. Shapes are llm4d's: a linear weight is [out, in] (HF's Llama stores the same; GPT-2's
 * Conv1D stores [in, out]; `convert` transposes). The token embedding's global shape is padded to
 * padded_vocab_size rows; rows >= vocab_size stay zero and never receive gradient.
 *
 * Groups, the unit of gathering, bucketing and gradient hand-off (the model's hooks, gpt.h): each vocabulary block
 * of the token embedding, the position embedding, each block, the final LayerNorm, each vocabulary block of an
 * untied LM head. A group is a range of the flat
 * buffer, padded to a multiple of `align` elements (ZeRO splits every group into equal shards); the padding is
 * never read by the model. */
#ifndef LLM4D_MODEL_PARAMS_H
#define LLM4D_MODEL_PARAMS_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "config/config.h"

#define LLM4D_PARAM_NAME_MAX 96
#define LLM4D_MAX_CHUNKS 64 /* pipeline chunks (virtual stages) one rank may hold */

typedef enum {
    LLM4D_P_WTE = 0, LLM4D_P_WPE,
    LLM4D_P_LN1W, LLM4D_P_LN1B, LLM4D_P_QKVW, LLM4D_P_QKVB, LLM4D_P_ATTPROJW, LLM4D_P_ATTPROJB,
    LLM4D_P_LN2W, LLM4D_P_LN2B, LLM4D_P_FCW, LLM4D_P_FCB, LLM4D_P_FCPROJW, LLM4D_P_FCPROJB,
    LLM4D_P_LNFW, LLM4D_P_LNFB,
    LLM4D_P_HEAD,        /* the untied LM head (lm_head.weight; a tied model's head is LLM4D_P_WTE) */
    LLM4D_P_NKINDS
} llm4d_param_kind;

typedef struct {
    char name[LLM4D_PARAM_NAME_MAX]; /* global name */
    llm4d_param_kind kind;
    int layer;           /* global block index, -1 for embeddings and the final LayerNorm */
    int ndim;
    int64_t gshape[2];   /* global shape (wte: padded rows) */
    int64_t rows_real;   /* gshape[0] without padding (wte: vocab_size); == gshape[0] otherwise */
    int64_t off[2];      /* the box this entry holds: its first element in the global tensor ... */
    int64_t shape[2];    /* ... and its extent (shape[1] = 1 for a vector) */
    int split_dim;       /* -1: replicated over the tensor-parallel group; 0: rows split; 1: columns split */
    int tp_partial;      /* this rank's gradient is a partial sum, completed over the tensor-parallel group after
                          * backward (parallel/tensor_parallel.h): with sequence parallelism the LayerNorms, the
                          * row-parallel biases and wpe (each rank saw its N/M tokens); and a key/value head held by
                          * several ranks (fewer key/value heads than ranks: each saw its query heads only) */
    int tp_slots, tp_slot; /* tp_partial: the sum runs over tp_slots boxes of this entry's size, this rank's being
                            * tp_slot (1 and 0, except a replicated key/value head: the heads, its head) */
    int owner;           /* 1: this rank's copy is the one that is saved and counted in the gradient norm (0: a
                          * tensor-parallel replica on mp rank > 0, or the last stage's copy of the tied embedding) */
    int group;           /* the group holding it */
    int piece;           /* in a block: its place in the block's list of global tensors (model order) */
    size_t offset;       /* in elements, into the flat buffer */
    size_t numel;        /* shape[0] * shape[1] */
    int decay;           /* 1: weight decay applies (linear weights, embeddings); 0: biases, LayerNorm */
    float init_std;      /* normal(0, init_std) at init; 0 means constant init (LayerNorm weight 1, biases 0) */
    float init_const;
} llm4d_param;

typedef enum { LLM4D_G_WTE = 0, LLM4D_G_WPE, LLM4D_G_BLOCK, LLM4D_G_LNF, LLM4D_G_HEAD } llm4d_group_kind;

typedef struct {
    llm4d_group_kind kind;
    int layer;           /* LLM4D_G_BLOCK: global block index */
    int64_t row0, nrows; /* LLM4D_G_WTE: the vocabulary rows [row0, row0 + nrows) of the (padded) embedding */
    size_t lo, hi;       /* its range of the flat buffer, padding included */
    int p0, p1;          /* its entries [p0, p1) */
} llm4d_group;

/* What one rank holds of the model. */
typedef struct {
    int mp_size, mp_rank;      /* tensor-parallel group (1, 0: none) */
    int n_chunks;              /* pipeline chunks held, in forward order */
    int layer_lo[LLM4D_MAX_CHUNKS], layer_hi[LLM4D_MAX_CHUNKS]; /* chunk c = blocks [layer_lo[c], layer_hi[c]) */
    int embedding;             /* holds the token and position embeddings (the model's first chunk is chunk 0) */
    int head;                  /* holds ln_f and the LM head (the model's last chunk is chunk n_chunks - 1) */
    int sequence_parallel;     /* Megatron's sequence parallelism (marks tp_partial) */
    int align;                 /* pad every group to a multiple of this (ZeRO: the sharding degree); >= 1 */
    int64_t wte_block_rows;    /* vocabulary rows per embedding group; 0: one group for the rank's rows */
} llm4d_model_part;

/* The whole model in one process. */
llm4d_model_part llm4d_model_part_whole(const llm4d_model_config *m);

typedef struct {
    int n;
    llm4d_param *p;      /* n entries, in buffer order */
    size_t total;        /* elements in the flat buffer */
    size_t total_real;   /* parameters held (padding rows and alignment not counted) */
    int n_groups;
    llm4d_group *g;      /* n_groups, in buffer order */
    llm4d_model_part part;
    int num_layers;      /* of the whole model */
    int wte_groups;      /* the embedding groups are groups [0, wte_groups) on the first stage; on a last stage
                          * without the embedding (pipeline) they are the last wte_groups groups */
    int wte_first;       /* index of the first embedding group (-1: none on this rank) */
    int head_first, head_groups; /* the LM head's vocabulary blocks on the last stage: the embedding groups when
                                  * it is tied, the lm_head groups (LLM4D_G_HEAD) when not; head_first -1: none */
} llm4d_param_table;

/* Build this rank's table (part NULL: the whole model); returns LLM4D_ENOMEM on allocation failure, LLM4D_EUSER
 * for a part that does not fit the model (more chunks than LLM4D_MAX_CHUNKS, layers outside the model). */
llm4d_code llm4d_param_table_build(llm4d_param_table *t, const llm4d_model_config *m, const llm4d_model_part *part,
                                   llm4d_err *err);
void llm4d_param_table_free(llm4d_param_table *t);
/* The first entry of a global name; NULL when absent. */
const llm4d_param *llm4d_param_find(const llm4d_param_table *t, const char *name);
/* A key ordering the whole model's tensors by use (wte, wpe, block 0's tensors in order, ..., ln_f, lm_head), the
 * same on every rank whatever its part: a minimum over ranks finds the first tensor of the model with some property.
 * m is the model the table was built for. */
int64_t llm4d_param_order(const llm4d_model_config *m, const llm4d_param *p);
/* The global name of the tensor with order key `order`. */
void llm4d_param_order_name(const llm4d_model_config *m, int64_t order, char *buf, size_t n);
/* The buffer's end after a group that ends at n, rounded up to the part's alignment (a group begins where the
 * previous one ends; the planner re-pads a part's groups at another alignment with it). */
static inline size_t llm4d_param_align_up(size_t n, int64_t align) {
    const size_t a = align < 1 ? 1 : (size_t)align;
    return (n + a - 1) / a * a;
}
/* The gradient windows of group grp per micro-batch (model/gpt.h): one, except the tied token embedding on a rank
 * holding both ends of the model, which has two (the LM head's and the lookup's). The model's hooks, the engines
 * that count them and the planner (parallel/traffic.h) read this one answer. */
static inline int llm4d_param_windows(const llm4d_param_table *t, int grp) {
    return t->part.embedding && t->part.head && t->g[grp].kind == LLM4D_G_WTE && t->head_first == t->wte_first ? 2
                                                                                                             : 1;
}
/* The group of block `layer`, of the final LayerNorm (kind LLM4D_G_LNF), of the position embedding (LLM4D_G_WPE);
 * -1 when this rank does not hold it. */
int llm4d_param_group_of(const llm4d_param_table *t, llm4d_group_kind kind, int layer);

/* Fill the flat buffer (device memory of be) with the initial weights: normal(0, init_range), output projections
 * normal(0, init_range/sqrt(2*num_layers)), LayerNorm (1, 0), biases 0, padding rows 0. Each element is drawn from
 * the counter-based generator keyed by (seed, global name, index of the element in the GLOBAL tensor), so the
 * weights do not depend on padding, threads, the tensor-parallel split, the pipeline stage or the backend (the
 * backend's init_param draws them where they live). */
void llm4d_param_init(const llm4d_param_table *t, llm4d_backend *be, float *params, uint64_t seed);
/* The same numbers for the flat positions [lo, hi) only, written to dst[0 .. hi-lo) (a ZeRO-3 shard). */
void llm4d_param_init_range(const llm4d_param_table *t, llm4d_backend *be, float *dst, size_t lo, size_t hi,
                            uint64_t seed);


#endif
