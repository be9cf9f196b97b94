/* blend.h — training on several corpora at once: which corpora `input_dir` names, and Megatron's blend of their
 * GPT sample indices.
 *
 * input_dir (Data.Train.dataset.input_dir, --input_dir) is one of
 *   - one path: a token file, a prefix, or a directory (every corpus it holds, llm4d_corpus_list's precedence);
 *   - a list of such paths separated by spaces and/or commas: "a_ids.npz b.bin" or "a_ids.npz,data/b";
 *   - Megatron's weighted form, a weight before every path: "0.3 a_ids.npz 0.7 data/b" (weights >= 0, any scale,
 *     normalised to sum 1; a directory's weight is shared by its corpora in proportion to their tokens).
 * A path that exists as given is always taken whole (so a single path may hold spaces or commas). Without weights
 * each corpus weighs its token count. A list that does not parse (a weight without its path, a weight in a list
 * that does not start with one, a negative or non-finite weight, weights summing to 0) is a user error.
 *
 * Blending (Megatron's BlendedDataset, build_blending_indices of megatron/core/datasets/helpers.cpp): each corpus
 * has its own GPT index of the split (data/gpt_index.h: the split of ITS documents, its epochs and shuffle),
 * built for ceil(w * N * 1.005) samples; blended item i (0 <= i < N) is taken from the corpus d maximising
 * w[d] * max(i, 1) - drawn[d] (the first on ties), as that corpus's next item drawn[d]++. The choice depends only
 * on the weights and i, never on the layout; the samples drawn from corpus d by item i stay within 1 of
 * w[d] * i. A corpus of weight 0 takes no part (Megatron's loop would draw it once, on a tie). A corpus whose
 * share of the split has no documents (or fewer than 2 tokens) is left out of that split's blend and the others'
 * weights renormalised (a small corpus often has no validation documents).
 * When one corpus is blended the blend is the identity: item i is that corpus's item i, built for exactly N
 * samples, so a single corpus gives the same samples as without blending. */
#ifndef LLM4D_DATA_BLEND_H
#define LLM4D_DATA_BLEND_H

#include <stdint.h>

#include "core/error.h"
#include "data/corpus.h"
#include "data/gpt_index.h"

#define LLM4D_BLEND_MAX_CORPORA 65535

typedef struct {
    int n;
    llm4d_corpus *corpus; /* [n], in the order of the list, a directory's corpora in sorted order */
    double *weight;       /* [n] normalised, sum 1 (0 allowed: that corpus is never drawn) */
    int weighted;         /* 1: weights were given ("0.3 a 0.7 b"); 0: proportional to token counts */
} llm4d_corpora;

llm4d_code llm4d_corpora_open(llm4d_corpora *cs, const char *input_dir, llm4d_err *err);
void llm4d_corpora_close(llm4d_corpora *cs);

/* Megatron's build_blending_indices, exactly: for each of size items the corpus (dataset[i]) and that corpus's
 * item (sample[i]); weights[n] normalised. dataset or sample may be NULL; counts[n] receives the draws. */
void llm4d_blend_indices(const double *weights, int n, int64_t size, uint16_t *dataset, int64_t *sample,
                         int64_t *counts);

typedef struct {
    const llm4d_corpora *cs;
    int n;                  /* cs->n */
    int single;             /* the only corpus in this split's blend (identity blend), or -1 */
    double *weight;         /* [n] this split's weights: cs->weight renormalised over the corpora it uses */
    llm4d_gpt_index *index; /* [n]; built only where weight > 0 */
    int64_t *drawn;         /* [n] items drawn from each corpus among the blend's size */
    int64_t size;           /* N: items of the blend; item i >= N wraps (never in a run: N is what it reads) */
    uint16_t *dataset;      /* [size] corpus of each item, NULL for the identity blend */
    int64_t *sample;        /* [size] item within that corpus's index */
} llm4d_blend;

/* Build the blend of one split for num_samples items; o's split, kind, seq_len, seed and write_cache apply to
 * every corpus (num_samples and cache_prefix are set per corpus). */
llm4d_code llm4d_blend_build(llm4d_blend *b, const llm4d_corpora *cs, const llm4d_gpt_index_opts *o,
                             llm4d_err *err);
void llm4d_blend_free(llm4d_blend *b);
/* Item i's corpus and its item in that corpus's index. */
void llm4d_blend_locate(const llm4d_blend *b, int64_t i, int *corpus, int64_t *item);
/* Items in one pass over the blend (the loader's epoch and batch numbers count passes): the index's windows for
 * the identity blend (PaddleNLP's len(dataset)), else N (Megatron's len(BlendedDataset)). */
int64_t llm4d_blend_pass_len(const llm4d_blend *b);
/* Item i as the model reads it (llm4d_gpt_index_sample of the corpus it comes from). */
void llm4d_blend_sample(const llm4d_blend *b, int64_t i, int32_t eos, int32_t *tokens, int32_t *labels,
                        float *loss_mask, int32_t *window);

#endif
