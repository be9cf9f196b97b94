/* devbatch.c — a step's batch in device memory (see devbatch.h). */
#include "train/devbatch.h"

#include <string.h>

#include "model/batch.h"

size_t llm4d_devbatch_bytes(int rows, int T) { return llm4d_batch_bytes(rows, T); }

void llm4d_devbatch_free(llm4d_devbatch *d) {
    if (!d->be) return;
    llm4d_backend *be = d->be;
    const llm4d_mem_category W = LLM4D_MEM_WORKSPACE;
    if (d->tokens) be->free(be, d->mem, W, d->tokens, llm4d_batch_tok_bytes(d->rows, d->T));
    if (d->targets) be->free(be, d->mem, W, d->targets, llm4d_batch_tok_bytes(d->rows, d->T));
    if (d->weight) be->free(be, d->mem, W, d->weight, llm4d_batch_w_bytes(d->rows, d->T));
    if (d->sample_ids) be->free(be, d->mem, W, d->sample_ids, llm4d_batch_id_bytes(d->rows));
    if (d->host_weight) be->free_host(be, d->mem, W, d->host_weight, llm4d_batch_w_bytes(d->rows, d->T));
    memset(d, 0, sizeof *d);
}

llm4d_code llm4d_devbatch_init(llm4d_devbatch *d, llm4d_backend *be, llm4d_mem *mem, int rows, int T, llm4d_err *err) {
    *d = (llm4d_devbatch){.rows = rows, .T = T, .be = be, .mem = mem};
    const llm4d_mem_category W = LLM4D_MEM_WORKSPACE;
    d->tokens = be->alloc(be, mem, W, llm4d_batch_tok_bytes(rows, T));
    d->targets = be->alloc(be, mem, W, llm4d_batch_tok_bytes(rows, T));
    d->weight = be->alloc(be, mem, W, llm4d_batch_w_bytes(rows, T));
    d->sample_ids = be->alloc(be, mem, W, llm4d_batch_id_bytes(rows));
    d->host_weight = be->alloc_host(be, mem, W, llm4d_batch_w_bytes(rows, T));
    if (!d->tokens || !d->targets || !d->weight || !d->sample_ids || !d->host_weight) {
        llm4d_devbatch_free(d);
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory for the batch of %d x %d tokens", rows, T);
    }
    return LLM4D_OK;
}

void llm4d_devbatch_upload(llm4d_devbatch *d, const llm4d_batch *b, double w) {
    llm4d_backend *be = d->be;
    const size_t n = (size_t)b->rows * (size_t)d->T;
    LLM4D_ASSERT(b->rows <= d->rows && b->T == d->T, "a batch of %d x %d rows into %d x %d", b->rows, b->T, d->rows,
                 d->T);
    /* the pinned weights may still feed the previous upload: it has completed once COMPUTE has passed it */
    be->stream_sync(be, LLM4D_STREAM_COMPUTE);
    for (size_t i = 0; i < n; i++) d->host_weight[i] = (float)(b->mask[i] * w);
    be->copy_async(be, d->tokens, b->tokens, n * sizeof(int32_t), LLM4D_H2D, LLM4D_STREAM_COMPUTE);
    be->copy_async(be, d->targets, b->targets, n * sizeof(int32_t), LLM4D_H2D, LLM4D_STREAM_COMPUTE);
    be->copy_async(be, d->weight, d->host_weight, n * sizeof(float), LLM4D_H2D, LLM4D_STREAM_COMPUTE);
    be->copy_async(be, d->sample_ids, b->sample_ids, (size_t)b->rows * sizeof(int64_t), LLM4D_H2D,
                   LLM4D_STREAM_COMPUTE);
}

llm4d_micro llm4d_devbatch_micro(const llm4d_devbatch *d, int k, int micro, uint32_t step, int train) {
    const size_t off = (size_t)k * (size_t)micro * (size_t)d->T;
    return (llm4d_micro){d->tokens + off, d->targets + off, d->weight + off, d->sample_ids + (size_t)k * micro, step,
                         train, train, micro, d->T};
}
