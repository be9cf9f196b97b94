/* loader.h — the batches a rank trains on.
 *
 * Items are numbered globally: global step s (0-based) consumes items s*G .. s*G+G-1 (G = global batch), and the
 * data rank r of W reads items s*G + r + t*W, t < local batch (PaddleNLP's interleaved batch sampler), so what a
 * rank reads depends only on its data rank, and the union over ranks is the same global batch for every layout.
 * An item is a window of max_seq_len + 1 tokens; tokens = window[:-1], targets = window[1:], and the loss mask is
 * 0 where the INPUT token is EOS (PaddleNLP's GPT-3 script).
 *
 * Item -> window: consecutive windows of the corpus (item k starts at token k*L, wrapping around at the end of the
 * corpus, one epoch per pass). */
#ifndef LLM4D_DATA_LOADER_H
#define LLM4D_DATA_LOADER_H

#include <stdint.h>

#include "core/error.h"
#include "core/mem.h"
#include "data/corpus.h"

typedef struct {
    int rows, T;
    int32_t *tokens;     /* [rows, T] */
    int32_t *targets;    /* [rows, T] */
    float *mask;         /* [rows, T] 1 = counts in the loss */
    int64_t *sample_ids; /* [rows] global item index of each row */
    int64_t epoch;       /* epoch of the corpus the step's first item falls in */
    int64_t batch;       /* index of the step within that epoch */
} llm4d_batch;

typedef struct {
    const llm4d_corpus *corpus;
    int T;                   /* max_seq_len */
    int64_t global_batch;    /* G */
    int local_batch;         /* rows this rank reads per step */
    int data_rank, data_world;
    int eos_id;
    int64_t n_samples;       /* windows per epoch */
    int32_t *window;         /* scratch [T+1] */
} llm4d_loader;

llm4d_code llm4d_loader_init(llm4d_loader *ld, const llm4d_corpus *c, int T, int64_t global_batch, int local_batch,
                             int data_rank, int data_world, int eos_id, llm4d_err *err);
void llm4d_loader_free(llm4d_loader *ld);
llm4d_code llm4d_batch_alloc(llm4d_batch *b, llm4d_mem *mem, int rows, int T, llm4d_err *err);
void llm4d_batch_free(llm4d_batch *b, llm4d_mem *mem);
/* Fill b with this rank's rows of global step s (0-based). */
void llm4d_loader_get(llm4d_loader *ld, int64_t s, llm4d_batch *b);

#endif
