/* loader.c — consecutive-window batches sliced by data rank (see loader.h). */
#include "data/loader.h"

#include <stdlib.h>
#include <string.h>

llm4d_code llm4d_loader_init(llm4d_loader *ld, const llm4d_corpus *c, int T, int64_t global_batch, int local_batch,
                             int data_rank, int data_world, int eos_id, llm4d_err *err) {
    memset(ld, 0, sizeof *ld);
    if (c->n_tokens < (int64_t)T + 1)
        return llm4d_fail(err, LLM4D_EUSER,
                          "%s holds %lld tokens, fewer than one sample of max_seq_len + 1 = %d; use a larger corpus "
                          "or a smaller max_seq_len",
                          c->path, (long long)c->n_tokens, T + 1);
    ld->corpus = c;
    ld->T = T;
    ld->global_batch = global_batch;
    ld->local_batch = local_batch;
    ld->data_rank = data_rank;
    ld->data_world = data_world;
    ld->eos_id = eos_id;
    ld->n_samples = (c->n_tokens - 1) / T;
    ld->window = malloc(((size_t)T + 1) * sizeof(int32_t));
    if (!ld->window) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    return LLM4D_OK;
}

void llm4d_loader_free(llm4d_loader *ld) {
    free(ld->window);
    memset(ld, 0, sizeof *ld);
}

llm4d_code llm4d_batch_alloc(llm4d_batch *b, llm4d_mem *mem, int rows, int T, llm4d_err *err) {
    memset(b, 0, sizeof *b);
    b->rows = rows;
    b->T = T;
    const size_t n = (size_t)rows * T;
    b->tokens = llm4d_mem_alloc(mem, LLM4D_MEM_WORKSPACE, n * sizeof(int32_t));
    b->targets = llm4d_mem_alloc(mem, LLM4D_MEM_WORKSPACE, n * sizeof(int32_t));
    b->mask = llm4d_mem_alloc(mem, LLM4D_MEM_WORKSPACE, n * sizeof(float));
    b->sample_ids = llm4d_mem_alloc(mem, LLM4D_MEM_WORKSPACE, (size_t)rows * sizeof(int64_t));
    if (!b->tokens || !b->targets || !b->mask || !b->sample_ids) {
        llm4d_batch_free(b, mem);
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory allocating a batch of %d x %d", rows, T);
    }
    return LLM4D_OK;
}

void llm4d_batch_free(llm4d_batch *b, llm4d_mem *mem) {
    const size_t n = (size_t)b->rows * b->T;
    llm4d_mem_free(mem, LLM4D_MEM_WORKSPACE, b->tokens, n * sizeof(int32_t));
    llm4d_mem_free(mem, LLM4D_MEM_WORKSPACE, b->targets, n * sizeof(int32_t));
    llm4d_mem_free(mem, LLM4D_MEM_WORKSPACE, b->mask, n * sizeof(float));
    llm4d_mem_free(mem, LLM4D_MEM_WORKSPACE, b->sample_ids, (size_t)b->rows * sizeof(int64_t));
    memset(b, 0, sizeof *b);
}

void llm4d_loader_get(llm4d_loader *ld, int64_t s, llm4d_batch *b) {
    const int T = ld->T;
    const int64_t first = s * ld->global_batch;
    b->epoch = first / ld->n_samples;
    b->batch = (first % ld->n_samples) / ld->global_batch;
    for (int t = 0; t < ld->local_batch; t++) {
        const int64_t item = first + ld->data_rank + (int64_t)t * ld->data_world;
        const int64_t k = item % ld->n_samples;
        llm4d_corpus_read(ld->corpus, k * T, T + 1, ld->window);
        b->sample_ids[t] = item;
        for (int i = 0; i < T; i++) {
            b->tokens[(size_t)t * T + i] = ld->window[i];
            b->targets[(size_t)t * T + i] = ld->window[i + 1];
            b->mask[(size_t)t * T + i] = ld->window[i] == ld->eos_id ? 0.0f : 1.0f;
        }
    }
}
