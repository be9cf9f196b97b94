/* kidx.h — the index arithmetic of the CUDA kernels, as plain functions the host can run too.
 *
 * Which random word an element draws, which global element an initial weight is, which vocabulary columns are
 * real: each is a formula of backend.h that the CPU backends compute in their own loops. The GPU kernels call these
 * functions (they compile as device code, like core/rng.h), and tests/test_cuda_host.c checks them against the
 * reference backend's loops on any machine, so the formulas a GPU runs are tested even where no GPU is. */
#ifndef LLM4D_BACKEND_CUDA_KIDX_H
#define LLM4D_BACKEND_CUDA_KIDX_H

#include <stdint.h>

#include "backend/backend.h"
#include "core/rng.h"

/* Global position of element (n, c) of an [N, C] activation whose first token is tok0 of the micro-batch
 * (backend.h llm4d_dropout): ((sample_ids[b] * T + t) * C + c) for token tok0 + n = b * T + t. */
LLM4D_HD static inline uint64_t llm4d_kidx_act_pos(const int64_t *sample_ids, int T, int64_t tok0, int64_t n, int C,
                                                   int c) {
    const int64_t tok = tok0 + n;
    return ((uint64_t)sample_ids[tok / T] * (uint64_t)T + (uint64_t)(tok % T)) * (uint64_t)C + (uint64_t)c;
}

/* Position of probability (b, h, t1, 0) of the attention (backend.h attention_forward); t2 is added to it. */
LLM4D_HD static inline uint64_t llm4d_kidx_att_row(int64_t sample_id, int NH_total, int head0, int h, int T, int t1) {
    return (((uint64_t)sample_id * (uint64_t)NH_total + (uint64_t)(head0 + h)) * (uint64_t)T + (uint64_t)t1) *
           (uint64_t)T;
}

/* The dropout multiplier of the word drawn for a position: 1/(1-p) kept, 0 dropped (the CPU's expression). */
LLM4D_HD static inline float llm4d_kidx_keep(uint32_t word, float p) {
    return llm4d_rng_u01(word) >= p ? 1.0f / (1.0f - p) : 0.0f;
}

/* A small cache of one Philox block: positions drawn in increasing order mostly share blocks of four. */
typedef struct {
    uint64_t blk;
    uint32_t w[4];
    int valid;
} llm4d_kidx_words;

LLM4D_HD static inline float llm4d_kidx_mult(llm4d_kidx_words *c, uint64_t seed, uint64_t stream, float p,
                                             uint64_t pos) {
    if (!c->valid || c->blk != pos >> 2) {
        c->blk = pos >> 2;
        c->valid = 1;
        llm4d_rng_block(seed, stream, c->blk, c->w);
    }
    return llm4d_kidx_keep(c->w[pos & 3], p);
}

/* Global element of element j of an init_param entry (backend.h llm4d_init_spec). */
LLM4D_HD static inline int64_t llm4d_kidx_init_elem(const llm4d_init_spec *s, int64_t j) {
    return (s->off0 + j / s->cols) * s->gcols + s->off1 + j % s->cols;
}

/* The value init_param gives element j. */
LLM4D_HD static inline float llm4d_kidx_init_value(const llm4d_init_spec *s, int64_t j) {
    if (s->std == 0.0f) return s->value;
    const int64_t g = llm4d_kidx_init_elem(s, j);
    return g < s->real ? s->std * llm4d_rng_normal(s->seed, s->stream, (uint64_t)g) : 0.0f;
}

/* Columns of a vocabulary part [v0, v0 + Vl) that hold real entries (< V); the rest is padding. */
LLM4D_HD static inline int llm4d_kidx_real_cols(int Vl, int v0, int V) {
    return V - v0 >= Vl ? Vl : (V - v0 > 0 ? V - v0 : 0);
}

/* The first row n >= 0 of a slice starting at token tok0 whose position (tok0 + n) % T is t. */
LLM4D_HD static inline int64_t llm4d_kidx_first_row_at(int64_t tok0, int T, int t) {
    return ((int64_t)t - tok0 % T + T) % T;
}

#endif
