/* cuda_wcache.c — the CUDA backend's low-precision copies of the weights the linear layers read (backend.h,
 * weights_changed): the table and its rules are every backend's (wcache.h), the copies here are in device memory.
 *
 * A bf16 (or fp16) GEMM reads its weight as a bf16 copy. A weight is read by several GEMMs per step but changes once
 * per update, so the copy is made on first use and kept: the optimizer's kernel writes the new copy beside the new
 * fp32 value in its pass (k_optim.cu, llm4d_cuda_span; cuda_ops.c turns the table's spans into the kernel's),
 * weights_changed marks copies stale when someone else wrote the weights (a ZeRO gather, a checkpoint load), and
 * freed memory drops its copies. Keyed by the master's address, length and format. This file gives the table its
 * storage (the arena's device memory) and makes a copy with the conversion kernel. Unlike the CPU's, a copy keeps
 * no samples of its master to check (no hold/holds): reading them back would synchronise the device on every
 * GEMM. */
#include <stdlib.h>

#include "backend/cuda/cuda_impl.h"

static void copy_alloc(void *ctx, llm4d_wcopy *e) {
    e->bytes = e->k.n * e->k.esize;
    e->dst = llm4d_cuda_dev_alloc(ctx, e->bytes);
    LLM4D_ASSERT(e->dst != NULL, "cuda: out of device memory for a %zu-byte weight copy", e->bytes);
}

static void copy_release(void *ctx, llm4d_wcopy *e) { llm4d_cuda_dev_free(ctx, e->dst); }

static const llm4d_wcache_ops cuda_wcache_ops = {copy_alloc, copy_release, NULL, NULL};

void llm4d_cuda_wcache_init(cuda_ctx *cx) { llm4d_wcache_init(&cx->wc, &cuda_wcache_ops, cx); }

const void *llm4d_cuda_weight(cuda_ctx *cx, const float *w, size_t n) {
    if (cx->fmt == LLM4D_F32 || n == 0) return w;
    const llm4d_wkey k = {w, n, (int)cx->fmt, 0, 0, 0, llm4d_ftype_size(cx->fmt)};
    int fresh;
    llm4d_wcopy *e = llm4d_wcache_get(&cx->wc, &k, &fresh);
    if (fresh) return e->dst;
    const int m = llm4d_cuda_work_begin(cx, LLM4D_WORK_CONVERT);
    llm4d_k_convert(cx->stream[LLM4D_STREAM_COMPUTE], llm4d_t(e->dst, cx->fmt), llm4d_ct32(w), n, LLM4D_ACT_NONE);
    CU_LAUNCHED();
    llm4d_cuda_work_end(cx, m);
    llm4d_wcache_made(&cx->wc, e);
    return e->dst;
}
