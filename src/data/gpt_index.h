/* gpt_index.h — the GPT dataset's sample index, exactly as PaddleNLP's GPT-3 dygraph example builds it
 * (reference/paddle-gpt.md §8), so that llm4d visits the same samples in the same order.
 *
 * A split's documents (train/valid/test by `split`, e.g. "949,50,1", bounds rounded half-to-even) are repeated
 * for E epochs (the fewest giving num_samples windows); `doc_idx` lists them in corpus order (no shuffle in this
 * variant); `sample_idx` locates the start of every window of L+1 tokens (windows advance by L, so one token
 * overlaps, and cross document boundaries); `shuffle_idx` permutes all windows with numpy's
 * RandomState(seed) legacy shuffle, the last epoch shuffled separately when it is short (separate_last_epoch).
 * Item i is the window shuffle_idx[i]. Nothing depends on the number of ranks.
 *
 * The three arrays are cached next to the data under PaddleNLP's names,
 *   P_gpt_<train|valid|test>_indexmap_<N>ns_<L>sl_<doc|sample|shuffle>_idx.npy,
 * plus a sidecar `..._<L>sl.llm4d` recording what they were built from (corpus file size, mtime, document count,
 * tokens, a hash of the document lengths; split bounds, seed, N, L). PaddleNLP's names omit the seed and split
 * and it reuses stale files; llm4d rebuilds whenever the sidecar is missing or differs.
 *
 * Use by the trainer: build once per split (one writer per node with write_cache = 1, the other ranks with
 * write_cache = 0 build the same index in memory or load the cache when it is current), then for global step s,
 * data rank r of W, local batch B: items s*B*W + r + t*W, t < B (PaddleNLP's interleaved sampler), each read with
 * llm4d_gpt_index_sample. */
#ifndef LLM4D_DATA_GPT_INDEX_H
#define LLM4D_DATA_GPT_INDEX_H

#include <stdint.h>

#include "core/error.h"
#include "data/corpus.h"

typedef enum { LLM4D_SPLIT_TRAIN = 0, LLM4D_SPLIT_VALID = 1, LLM4D_SPLIT_TEST = 2 } llm4d_split_kind;

/* Document bounds of the three splits for n_docs documents: split "a,b,c" (or "a/b/c", or fewer numbers, missing
 * ones 0) -> bounds[0..3], split k is documents [bounds[k], bounds[k+1]). Python's round-half-even, as
 * PaddleNLP's get_train_valid_test_split_. A malformed split is a user error. */
llm4d_code llm4d_gpt_split_bounds(const char *split, int64_t n_docs, int64_t bounds[4], llm4d_err *err);

/* PaddleNLP's sample counts: train G*M; valid G*(M/eval_freq + 1)*eval_iters; test G*eval_iters*10
 * (G global batch, M max_steps). */
int64_t llm4d_gpt_num_samples(llm4d_split_kind kind, int64_t global_batch, int64_t max_steps, int64_t eval_freq,
                              int64_t eval_iters);

typedef struct {
    const char *split;        /* "949,50,1" */
    llm4d_split_kind kind;
    int64_t num_samples;      /* N: samples the run will read from this split */
    int seq_len;              /* L: max_seq_len; a sample is L+1 tokens */
    int64_t seed;             /* numpy RandomState seed, 0 .. 2^32-1 */
    const char *cache_prefix; /* P for the cache names; NULL: the corpus path minus _ids.npz/_ids.npy/.bin; "": none */
    int write_cache;          /* 1: write the cache when missing or stale; 0: only read a current one */
} llm4d_gpt_index_opts;

typedef struct {
    const llm4d_corpus *corpus;
    int seq_len;
    int64_t doc_begin, doc_end;   /* the split's documents in the corpus */
    int64_t tokens_per_epoch;     /* T */
    int64_t num_epochs;           /* E */
    int64_t num_samples;          /* N requested */
    int64_t n_samples;            /* windows in the index, all epochs: (E*T - 1) / L >= N */
    int separate_last_epoch;
    int32_t *doc_idx;             /* [n_doc_idx] corpus document ids */
    int64_t n_doc_idx;
    int32_t *sample_idx;          /* [n_samples + 1][2]: (position in doc_idx, offset in that document) */
    uint32_t *shuffle_u32;        /* [n_samples], when n_samples < 2^32 - 1 (numpy's uint32 choice) */
    int64_t *shuffle_i64;         /* [n_samples] otherwise */
    int from_cache;               /* 1: the arrays were read from current cache files */
    int wrote_cache;              /* 1: this call wrote the cache files */
    char cache_base[1100];        /* P_gpt_<name>_indexmap_<N>ns_<L>sl, "" without a cache */
} llm4d_gpt_index;

/* Build (or load from a current cache) the index of one split. An empty split, a split with fewer than two
 * tokens, or a seed outside numpy's range is a user error; a cache that cannot be written is a user error too
 * (the directory of the data must be writable, or pass cache_prefix ""). */
llm4d_code llm4d_gpt_index_build(llm4d_gpt_index *ix, const llm4d_corpus *c, const llm4d_gpt_index_opts *o,
                                 llm4d_err *err);
void llm4d_gpt_index_free(llm4d_gpt_index *ix);

/* The sample number (window) behind item i; i wraps modulo n_samples (PaddleNLP's loader would end instead). */
int64_t llm4d_gpt_index_window(const llm4d_gpt_index *ix, int64_t i);
/* Item i's L+1 tokens as int32. */
void llm4d_gpt_index_get(const llm4d_gpt_index *ix, int64_t i, int32_t *tokens);
/* 0-based epoch of item i: the pass over the split in which its window starts. */
int64_t llm4d_gpt_index_epoch(const llm4d_gpt_index *ix, int64_t i);
/* Item i as the model reads it: tokens = window[:-1], labels = window[1:], loss_mask 0 where the INPUT token is
 * eos (PaddleNLP's GPT-3 example), else 1. window is scratch of L+1 ints. */
void llm4d_gpt_index_sample(const llm4d_gpt_index *ix, int64_t i, int32_t eos, int32_t *tokens, int32_t *labels,
                            float *loss_mask, int32_t *window);

#endif
