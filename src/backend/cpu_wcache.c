/* cpu_wcache.c — the low-precision copies of the weights the linear layers read (backend.h, weights_changed).
 *
 * Mixed precision multiplies bf16 operands, and a weight is an operand of three GEMMs per micro-batch (forward, the
 * input gradient, and again with recompute or several micro-batches) but changes once per update, so converting it
 * for every GEMM reads 4 and writes 2 bytes per parameter several times per step for nothing (at B=4 T=64 that was
 * a quarter of the bf16 step). The copies live in the backend, beside the fp32 masters the storage engines own,
 * keyed by the master's address, length and precision: the engines need not know (their code is unchanged, and
 * ZeRO's shards, gathers and offload go on handing the model fp32 weights through the hooks).
 *
 * The table and its rules are every backend's (wcache.h): a copy is made on first use and stays valid until it is
 * told otherwise:
 *  - the optimizer's pass (cpu_optim.c) writes the new copy of every parameter it updates beside the new fp32
 *    value (2 bytes more per parameter instead of a 6-byte conversion pass later), and a copy whose whole range it
 *    rewrote since it went stale is valid again;
 *  - weights_changed(NULL) before an update marks every copy stale (a ZeRO-1/2 engine all-gathers the other ranks'
 *    updated shards into the fp32 weights after its own pass: those copies are converted again on first use);
 *  - weights_changed(p, bytes) marks the copies inside a range stale (the model says so when a ZeRO-3 gather buffer
 *    was refilled with another group's weights), and memory returned through the backend's free drops its copies.
 * On the AMX path a weight has two copies, in the kernel's B tiles of W (for the input gradient) and of W^T (for the
 * forward), keyed by their layout as well; the optimizer writes each in its own order (cpu_amx.h's _range packers).
 * What is this backend's: the copies in host memory (64-byte aligned), filled by the conversion pass or the AMX
 * packers, and, as a guard against a caller that breaks the contract by reusing memory outside the backend's
 * allocator, a few sampled elements of its master that each copy remembers (wcache.h's hold/holds): a copy whose
 * samples differ is rebuilt. */
#include <stdlib.h>

#include "backend/cpu_amx.h"
#include "backend/cpu_impl.h"

#define WC_SAMPLES LLM4D_WCACHE_GUARD

/* the k-th of WC_SAMPLES elements spread from the first to the last */
static size_t sample_at(size_t n, int k) { return (n - 1) / (WC_SAMPLES - 1) * (size_t)k; }

static void take_samples(void *ctx, llm4d_wcopy *e) {
    (void)ctx;
    for (int k = 0; k < WC_SAMPLES; k++) e->guard[k] = e->k.src[sample_at(e->k.n, k)];
}

static int samples_match(void *ctx, const llm4d_wcopy *e) {
    (void)ctx;
    for (int k = 0; k < WC_SAMPLES; k++)
        if (memcmp(&e->guard[k], &e->k.src[sample_at(e->k.n, k)], sizeof(float)) != 0) return 0;
    return 1;
}

static void copy_alloc(void *ctx, llm4d_wcopy *e) {
    (void)ctx;
    const llm4d_wkey *k = &e->k;
    const size_t elems = k->layout == LLM4D_CPU_ROWS ? k->n
                         : k->layout == LLM4D_CPU_TILES_W ? llm4d_amx_b_elems(k->rows, k->cols)
                                                          : llm4d_amx_b_elems(k->cols, k->rows);
    e->bytes = (elems * k->esize + 63) & ~(size_t)63;
    e->dst = aligned_alloc(64, e->bytes);
    LLM4D_ASSERT(e->dst != NULL, "out of memory for a %zu-byte weight copy", e->bytes);
}

static void copy_release(void *ctx, llm4d_wcopy *e) {
    (void)ctx;
    free(e->dst);
}

static const llm4d_wcache_ops cpu_wcache_ops = {copy_alloc, copy_release, take_samples, samples_match};

void llm4d_cpu_wcache_init(cpu_ctx *cx) { llm4d_wcache_init(&cx->wc, &cpu_wcache_ops, cx); }

static llm4d_wkey key_of(const cpu_ctx *cx, const float *w, size_t n, llm4d_cpu_layout layout, int rows, int cols) {
    return (llm4d_wkey){w, n, (int)cx->fmt, (int)layout, rows, cols, llm4d_cpu_operand_bytes(cx->fmt)};
}

const void *llm4d_cpu_weight(cpu_ctx *cx, const float *w, size_t n) {
    if (cx->fmt == LLM4D_CPU_FP32 || n == 0) return w;
    const llm4d_wkey k = key_of(cx, w, n, LLM4D_CPU_ROWS, 0, 0);
    int fresh;
    llm4d_wcopy *e = llm4d_wcache_get(&cx->wc, &k, &fresh);
    if (fresh) return e->dst;
    WORK_SCOPE(cx, LLM4D_WORK_CONVERT);
    llm4d_cpu_convert((llm4d_cpu_fmt)e->k.fmt, e->dst, w, n);
    llm4d_wcache_made(&cx->wc, e);
    return e->dst;
}

const uint16_t *llm4d_cpu_weight_tiles(cpu_ctx *cx, const float *w, int rows, int cols, llm4d_cpu_layout layout) {
    const llm4d_wkey k = key_of(cx, w, (size_t)rows * (size_t)cols, layout, rows, cols);
    int fresh;
    llm4d_wcopy *e = llm4d_wcache_get(&cx->wc, &k, &fresh);
    if (fresh) return e->dst;
    WORK_SCOPE(cx, LLM4D_WORK_CONVERT);
    /* the whole pack, padding included: the optimizer's passes later write only the weight's own elements */
    if (layout == LLM4D_CPU_TILES_W) llm4d_amx_pack_b(e->dst, llm4d_ct32(w), cols, rows, cols, LLM4D_ACT_NONE);
    else llm4d_amx_pack_b_t(e->dst, llm4d_ct32(w), cols, rows, cols);
    llm4d_wcache_made(&cx->wc, e);
    return e->dst;
}
