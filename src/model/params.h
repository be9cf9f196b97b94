/* params.h — the GPT parameter table: one flat buffer, named views into it.
 *
 * As in llm.c, all parameters live in one contiguous buffer (and gradients, Adam m and v in buffers of the same
 * layout), so that all-reduce buckets, ZeRO partitions and checkpoint slices are plain ranges. Unlike llm.c the
 * order is layer-major (all of layer 0, then layer 1, ...), so one layer's parameters are one range: that is what
 * ZeRO-3 gathers before a layer and what a pipeline stage owns.
 *
 * Names are Hugging Face GPT-2's global names (transformer.h.3.attn.c_attn.weight, ...); shapes are llm4d's:
 * a linear weight is [out, in] (HF's Conv1D stores [in, out]; `convert` transposes). The token embedding is held
 * padded to padded_vocab_size rows; rows >= vocab_size stay zero and never receive gradient. The attention's
 * c_attn output columns are Q (all heads), then K, then V, as in GPT-2. */
#ifndef LLM4D_MODEL_PARAMS_H
#define LLM4D_MODEL_PARAMS_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"

#define LLM4D_PARAM_NAME_MAX 96

typedef enum {
    LLM4D_P_WTE = 0, LLM4D_P_WPE,
    LLM4D_P_LN1W, LLM4D_P_LN1B, LLM4D_P_QKVW, LLM4D_P_QKVB, LLM4D_P_ATTPROJW, LLM4D_P_ATTPROJB,
    LLM4D_P_LN2W, LLM4D_P_LN2B, LLM4D_P_FCW, LLM4D_P_FCB, LLM4D_P_FCPROJW, LLM4D_P_FCPROJB,
    LLM4D_P_LNFW, LLM4D_P_LNFB,
} llm4d_param_kind;

typedef struct {
    char name[LLM4D_PARAM_NAME_MAX];
    llm4d_param_kind kind;
    int layer;           /* block index, -1 for embeddings and the final LayerNorm */
    int ndim;
    int64_t shape[2];    /* held shape (wte: padded rows) */
    int64_t rows_real;   /* shape[0] without padding (wte: vocab_size); == shape[0] otherwise */
    size_t offset;       /* in elements, into the flat buffer */
    size_t numel;
    int decay;           /* 1: weight decay applies (linear weights, embeddings); 0: biases, LayerNorm */
    float init_std;      /* normal(0, init_std) at init; 0 means constant init (LayerNorm weight 1, biases 0) */
    float init_const;
} llm4d_param;

typedef struct {
    int n;
    llm4d_param *p;      /* n entries, in buffer order */
    size_t total;        /* elements in the flat buffer */
    size_t total_real;   /* parameters of the model (padding rows not counted) */
    int layer_first[1024]; /* index into p of each layer's first parameter (layer-major order) */
    /* Parameter groups, the unit of gathering, bucketing and pipeline ownership: group 0 = embeddings (wte, wpe),
     * group 1 + l = block l, group L + 1 = the final LayerNorm. Group g is the range [group_lo[g], group_hi[g]). */
    int n_groups;
    size_t group_lo[1026], group_hi[1026];
} llm4d_param_table;

/* The group of a parameter's layer index (-1 = embeddings or final LayerNorm, told apart by kind). */
static inline int llm4d_param_group(const llm4d_param *p, int num_layers) {
    if (p->layer >= 0) return 1 + p->layer;
    return (p->kind == LLM4D_P_LNFW || p->kind == LLM4D_P_LNFB) ? num_layers + 1 : 0;
}

/* Build the table for a model; returns LLM4D_ENOMEM on allocation failure. */
llm4d_code llm4d_param_table_build(llm4d_param_table *t, const llm4d_model_config *m, llm4d_err *err);
/* The same with every group's range padded to a multiple of `align` elements (unused zero elements at the end of
 * each group), so that ZeRO can split every group into `align` equal shards. align 1 is the plain table. */
llm4d_code llm4d_param_table_build_aligned(llm4d_param_table *t, const llm4d_model_config *m, int align,
                                           llm4d_err *err);
void llm4d_param_table_free(llm4d_param_table *t);
/* Find a parameter by name; NULL when absent. */
const llm4d_param *llm4d_param_find(const llm4d_param_table *t, const char *name);

/* Fill the flat buffer with the initial weights: normal(0, init_range), output projections normal(0,
 * init_range/sqrt(2*num_layers)), LayerNorm (1, 0), biases 0, padding rows 0. Each element is drawn from the
 * counter-based generator keyed by (seed, parameter, element index), so the weights do not depend on padding,
 * threads or the parallel layout. */
void llm4d_param_init(const llm4d_param_table *t, float *params, uint64_t seed);
/* The same numbers for the flat positions [lo, hi) only, written to dst[0 .. hi-lo) (a ZeRO-3 shard). */
void llm4d_param_init_range(const llm4d_param_table *t, float *dst, size_t lo, size_t hi, uint64_t seed);

#endif
