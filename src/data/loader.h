/* loader.h — the batches a rank trains (or evaluates) on, prefetched by a background thread.
 *
 * Items are numbered globally: global step s (0-based) consumes items s*G .. s*G+G-1 (G = global batch), and the
 * data rank r of W reads items s*G + r + t*W, t < local batch (PaddleNLP's interleaved batch sampler), so what a
 * rank reads depends only on its data rank, and the union over ranks is the same global batch for every layout.
 * Item i is item i of the split's blend of corpora (data/blend.h: Megatron's blending; with one corpus the
 * identity), which is window shuffle_idx[k] of its corpus's GPT sample index (data/gpt_index.h: PaddleNLP's split,
 * epochs, doc/sample/shuffle indices); tokens = window[:-1], targets = window[1:], loss mask 0 where the INPUT
 * token is EOS. A background thread prepares the next step's rows while the current step computes, so the reader cost
 * seen by the step is the wait for an already-filled buffer. */
#ifndef LLM4D_DATA_LOADER_H
#define LLM4D_DATA_LOADER_H

#include <pthread.h>
#include <stdint.h>

#include "core/error.h"
#include "core/mem.h"
#include "data/blend.h"
#include "data/corpus.h"
#include "data/gpt_index.h"

typedef struct {
    int rows, T;
    int32_t *tokens;     /* [rows, T] */
    int32_t *targets;    /* [rows, T] */
    float *mask;         /* [rows, T] 1 = counts in the loss */
    int64_t *sample_ids; /* [rows] global item index of each row (dropout positions) */
    int64_t step;        /* the step (0-based) this buffer holds, -1 when empty */
    int64_t epoch;       /* passes of the loader over the split's blend (llm4d_blend_pass_len) before this step */
    int64_t batch;       /* the step's index within that pass */
} llm4d_batch;

typedef struct {
    llm4d_blend blend;       /* the split's corpora, their GPT indices and the blend */
    int have_blend;
    int T;
    int64_t global_batch;    /* G */
    int local_batch;         /* rows this rank reads per step */
    int data_rank, data_world;
    int eos_id;
    int32_t *window;         /* scratch [T+1] for the filling thread */
    llm4d_mem *mem;
    /* prefetch: buf[k] is being filled or ready; the thread fills the step `want` into the free buffer */
    llm4d_batch buf[2];
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int64_t want;            /* next step the thread should fill, -1 none */
    int filling;             /* index of the buffer being filled, -1 none */
    int stop, started;
} llm4d_loader;

typedef struct {
    const char *split;        /* "949,50,1" */
    llm4d_split_kind kind;    /* which split this loader reads */
    int64_t num_samples;      /* samples the run will read (PaddleNLP's counts, llm4d_gpt_num_samples) */
    int T;                    /* max_seq_len */
    int64_t seed;
    int64_t global_batch;
    int local_batch;
    int data_rank, data_world;
    int eos_id;
    int write_cache;          /* 1 on the rank that writes the index cache files next to the data */
} llm4d_loader_opts;

/* cs must outlive the loader. */
llm4d_code llm4d_loader_init(llm4d_loader *ld, const llm4d_corpora *cs, const llm4d_loader_opts *o, llm4d_mem *mem,
                             llm4d_err *err);
void llm4d_loader_free(llm4d_loader *ld);
/* This rank's rows of global step s (0-based), valid until the next call. Prefetches step s + 1. */
const llm4d_batch *llm4d_loader_get(llm4d_loader *ld, int64_t s);
/* Fill b directly (no thread; b allocated with rows = local batch). */
void llm4d_loader_fill(llm4d_loader *ld, int64_t s, llm4d_batch *b);

#endif
