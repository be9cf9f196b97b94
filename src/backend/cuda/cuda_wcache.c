/* cuda_wcache.c — the CUDA backend's low-precision copies of the weights the linear layers read (backend.h,
 * weights_changed), the same scheme as the CPU backend's cpu_wcache.c, with the copies in device memory.
 *
 * A bf16 (or fp16) GEMM reads its weight as a bf16 copy. A weight is read by several GEMMs per step but changes once
 * per update, so the copy is made on first use and kept: the optimizer's kernel writes the new copy beside the new
 * fp32 value in its pass (k_optim.cu, llm4d_cuda_span), weights_changed marks copies stale when someone else wrote
 * the weights (a ZeRO gather, a checkpoint load), and freed memory drops its copies. Keyed by the master's
 * address, length and format. Unlike the CPU's, a copy keeps no samples of its master to check: reading them back
 * would synchronise the device on every GEMM. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_impl.h"

typedef struct {
    const float *src;
    size_t n;
    llm4d_ftype fmt;
    void *dst; /* device memory, n elements of fmt */
    size_t bytes;
    int valid;
    size_t refreshed; /* elements the optimizer rewrote since the copy went stale */
} wc_entry;

struct cuda_wcache {
    wc_entry *e;
    int n, cap;
    size_t bytes;
    llm4d_cuda_span *spans; /* llm4d_cuda_wcache_spans' answer */
    int spans_cap;
};

static int overlaps(const wc_entry *e, const void *p, size_t bytes) {
    const uintptr_t a = (uintptr_t)e->src, b = a + e->n * sizeof(float);
    const uintptr_t c = (uintptr_t)p, d = c + bytes;
    return a < d && c < b;
}

static void drop_entry(cuda_ctx *cx, int i) {
    cuda_wcache *wc = cx->wc;
    llm4d_cuda_dev_free(cx, wc->e[i].dst);
    wc->bytes -= wc->e[i].bytes;
    wc->e[i] = wc->e[--wc->n];
}

const void *llm4d_cuda_weight(cuda_ctx *cx, const float *w, size_t n) {
    if (cx->fmt == LLM4D_F32 || n == 0) return w;
    if (!cx->wc) {
        cx->wc = calloc(1, sizeof *cx->wc);
        LLM4D_ASSERT(cx->wc != NULL, "out of memory for the weight copies' table%s", "");
    }
    cuda_wcache *wc = cx->wc;
    wc_entry *e = NULL;
    for (int i = 0; i < wc->n && !e; i++)
        if (wc->e[i].src == w && wc->e[i].n == n && wc->e[i].fmt == cx->fmt) e = &wc->e[i];
    if (e && e->valid) return e->dst;
    if (!e) {
        /* stale copies this range overlaps belong to weights no longer there (a refilled ZeRO-3 gather buffer) */
        for (int i = 0; i < wc->n;) {
            if (!wc->e[i].valid && overlaps(&wc->e[i], w, n * sizeof(float))) drop_entry(cx, i);
            else i++;
        }
        if (wc->n == wc->cap) {
            const int cap = wc->cap ? 2 * wc->cap : 64;
            wc_entry *ne = realloc(wc->e, (size_t)cap * sizeof *ne);
            LLM4D_ASSERT(ne != NULL, "out of memory for %d weight copies", cap);
            wc->e = ne;
            wc->cap = cap;
        }
        e = &wc->e[wc->n++];
        memset(e, 0, sizeof *e);
        e->src = w;
        e->n = n;
        e->fmt = cx->fmt;
        e->bytes = n * llm4d_ftype_size(cx->fmt);
        e->dst = llm4d_cuda_dev_alloc(cx, e->bytes);
        LLM4D_ASSERT(e->dst != NULL, "cuda: out of device memory for a %zu-byte weight copy", e->bytes);
        wc->bytes += e->bytes;
    }
    const int m = llm4d_cuda_work_begin(cx, LLM4D_WORK_CONVERT);
    llm4d_k_convert(cx->stream[LLM4D_STREAM_COMPUTE], llm4d_t(e->dst, e->fmt), llm4d_ct32(w), n, LLM4D_ACT_NONE);
    CU_LAUNCHED();
    llm4d_cuda_work_end(cx, m);
    e->valid = 1;
    e->refreshed = 0;
    return e->dst;
}

void llm4d_cuda_wcache_changed(cuda_ctx *cx, const void *p, size_t bytes) {
    if (!cx->wc) return;
    for (int i = 0; i < cx->wc->n; i++) {
        wc_entry *e = &cx->wc->e[i];
        if (!p || overlaps(e, p, bytes)) e->valid = 0, e->refreshed = 0;
    }
}

void llm4d_cuda_wcache_drop(cuda_ctx *cx, const void *p, size_t bytes) {
    if (!cx->wc) return;
    for (int i = 0; i < cx->wc->n;) {
        if (!p || overlaps(&cx->wc->e[i], p, bytes)) drop_entry(cx, i);
        else i++;
    }
}

int llm4d_cuda_wcache_spans(cuda_ctx *cx, const float *p, size_t n, llm4d_cuda_span **out) {
    cuda_wcache *wc = cx->wc;
    *out = NULL;
    if (!wc) return 0;
    int k = 0;
    for (int i = 0; i < wc->n; i++) {
        const wc_entry *e = &wc->e[i];
        if (!overlaps(e, p, n * sizeof(float))) continue;
        if (k == wc->spans_cap) {
            const int cap = wc->spans_cap ? 2 * wc->spans_cap : 64;
            llm4d_cuda_span *ns = realloc(wc->spans, (size_t)cap * sizeof *ns);
            LLM4D_ASSERT(ns != NULL, "out of memory for %d weight-copy spans", cap);
            wc->spans = ns;
            wc->spans_cap = cap;
        }
        /* the overlap, as element offsets into p and into the copy */
        const size_t lo = e->src > p ? (size_t)(e->src - p) : 0;
        const size_t hi = e->src + e->n < p + n ? (size_t)(e->src + e->n - p) : n;
        const size_t off = (size_t)(p + lo - e->src);
        wc->spans[k++] = (llm4d_cuda_span){lo, hi, (char *)e->dst + off * llm4d_ftype_size(e->fmt), (int)e->fmt};
    }
    *out = wc->spans;
    return k;
}

double llm4d_cuda_wcache_refreshed(cuda_ctx *cx, const float *p, size_t n) {
    if (!cx->wc) return 0;
    double bytes = 0;
    for (int i = 0; i < cx->wc->n; i++) {
        wc_entry *e = &cx->wc->e[i];
        if (!overlaps(e, p, n * sizeof(float))) continue;
        const float *lo = e->src > p ? e->src : p, *hi = e->src + e->n < p + n ? e->src + e->n : p + n;
        bytes += (double)(hi - lo) * (double)llm4d_ftype_size(e->fmt);
        if (e->valid) continue; /* rewritten in step with its master */
        e->refreshed += (size_t)(hi - lo);
        if (e->refreshed >= e->n) e->valid = 1;
    }
    return bytes;
}

size_t llm4d_cuda_wcache_bytes(const cuda_ctx *cx) { return cx->wc ? cx->wc->bytes : 0; }

void llm4d_cuda_wcache_free(cuda_ctx *cx) {
    if (!cx->wc) return;
    llm4d_cuda_wcache_drop(cx, NULL, 0);
    free(cx->wc->e);
    free(cx->wc->spans);
    free(cx->wc);
    cx->wc = NULL;
}
