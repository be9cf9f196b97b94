/* cpu_wcache.c — the low-precision copies of the weights the linear layers read (backend.h, weights_changed).
 *
 * Mixed precision multiplies bf16 operands, and a weight is an operand of three GEMMs per micro-batch (forward, the
 * input gradient, and again with recompute or several micro-batches) but changes once per update, so converting it
 * for every GEMM reads 4 and writes 2 bytes per parameter several times per step for nothing (at B=4 T=64 that was
 * a quarter of the bf16 step). The copies live here, beside the fp32 masters the storage engines own, keyed by the
 * master's address, length and precision: the engines need not know (their code is unchanged, and ZeRO's shards,
 * gathers and offload go on handing the model fp32 weights through the hooks).
 *
 * A copy is made on first use and stays valid until it is told otherwise:
 *  - the optimizer's pass (cpu_optim.c) writes the new copy of every parameter it updates beside the new fp32
 *    value (2 bytes more per parameter instead of a 6-byte conversion pass later), and a copy whose whole range it
 *    rewrote since it went stale is valid again;
 *  - weights_changed(NULL) before an update marks every copy stale (a ZeRO-1/2 engine all-gathers the other ranks'
 *    updated shards into the fp32 weights after its own pass: those copies are converted again on first use);
 *  - weights_changed(p, bytes) marks the copies inside a range stale (the model says so when a ZeRO-3 gather buffer
 *    was refilled with another group's weights), and memory returned through the backend's free drops its copies.
 * On the AMX path a weight has two copies, in the kernel's B tiles of W (for the input gradient) and of W^T (for the
 * forward), keyed by their layout as well; the optimizer writes each in its own order (cpu_amx.h's _range packers).
 * As a guard against a caller that breaks the contract by reusing memory outside the backend's allocator, each
 * copy also remembers a few sampled elements of its master and is rebuilt when they differ. */
#include <stdlib.h>

#include "backend/cpu_amx.h"
#include "backend/cpu_impl.h"

#define WC_SAMPLES 8

typedef struct {
    const float *src;   /* the fp32 master */
    size_t n;
    llm4d_cpu_fmt fmt;
    llm4d_cpu_layout layout;
    int rows, cols;     /* the weight's shape (tiled layouts) */
    void *dst;          /* n operand elements */
    size_t bytes;
    int valid;
    size_t refreshed;   /* elements the optimizer rewrote since the copy went stale */
    float sample[WC_SAMPLES];
} wc_entry;

struct llm4d_cpu_wcache {
    wc_entry *e;
    int n, cap;
    size_t bytes;        /* held by the copies */
    llm4d_cpu_wspan *spans;
    int spans_cap;
};

/* the k-th of WC_SAMPLES elements spread from the first to the last */
static size_t sample_at(size_t n, int k) { return (n - 1) / (WC_SAMPLES - 1) * (size_t)k; }

static void take_samples(wc_entry *e) {
    for (int k = 0; k < WC_SAMPLES; k++) e->sample[k] = e->src[sample_at(e->n, k)];
}

static int samples_match(const wc_entry *e) {
    for (int k = 0; k < WC_SAMPLES; k++)
        if (memcmp(&e->sample[k], &e->src[sample_at(e->n, k)], sizeof(float)) != 0) return 0;
    return 1;
}

static llm4d_cpu_wcache *wc_of(cpu_ctx *cx) {
    if (!cx->wc) {
        cx->wc = calloc(1, sizeof *cx->wc);
        LLM4D_ASSERT(cx->wc != NULL, "out of memory for the weight copies' table%s", "");
    }
    return cx->wc;
}

static int overlaps(const wc_entry *e, const void *p, size_t bytes) {
    const uintptr_t a = (uintptr_t)e->src, b = a + e->n * sizeof(float);
    const uintptr_t c = (uintptr_t)p, d = c + bytes;
    return a < d && c < b;
}

/* The copy of w (n elements) in format fmt and layout (rows x cols for tiles): the one it has, or a new one,
 * which the caller fills. *fresh: the copy holds w's values (made since w last changed). */
static wc_entry *find_or_add(cpu_ctx *cx, const float *w, size_t n, llm4d_cpu_layout layout, int rows, int cols,
                             int *fresh) {
    llm4d_cpu_wcache *wc = wc_of(cx);
    wc_entry *e = NULL;
    for (int i = 0; i < wc->n && !e; i++)
        if (wc->e[i].src == w && wc->e[i].n == n && wc->e[i].fmt == cx->fmt && wc->e[i].layout == layout &&
            wc->e[i].rows == rows)
            e = &wc->e[i];
    *fresh = e && e->valid && samples_match(e);
    if (e) return e;
    /* stale copies this range overlaps are of weights no longer there (a ZeRO-3 gather buffer refilled with a
     * group of another layout): dropped, so the copies never hold more than the weights live at once */
    for (int i = 0; i < wc->n;) {
        if (!wc->e[i].valid && overlaps(&wc->e[i], w, n * sizeof(float))) {
            free(wc->e[i].dst);
            wc->bytes -= wc->e[i].bytes;
            wc->e[i] = wc->e[--wc->n];
        } else {
            i++;
        }
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
    e->layout = layout;
    e->rows = rows;
    e->cols = cols;
    const size_t elems = layout == LLM4D_CPU_ROWS ? n
                         : layout == LLM4D_CPU_TILES_W ? llm4d_amx_b_elems(rows, cols)
                                                       : llm4d_amx_b_elems(cols, rows);
    e->bytes = (elems * llm4d_cpu_operand_bytes(cx->fmt) + 63) & ~(size_t)63;
    e->dst = aligned_alloc(64, e->bytes);
    LLM4D_ASSERT(e->dst != NULL, "out of memory for a %zu-byte weight copy", e->bytes);
    wc->bytes += e->bytes;
    return e;
}

static void made(wc_entry *e) {
    take_samples(e);
    e->valid = 1;
    e->refreshed = 0;
}

const void *llm4d_cpu_weight(cpu_ctx *cx, const float *w, size_t n) {
    if (cx->fmt == LLM4D_CPU_FP32 || n == 0) return w;
    int fresh;
    wc_entry *e = find_or_add(cx, w, n, LLM4D_CPU_ROWS, 0, 0, &fresh);
    if (fresh) return e->dst;
    WORK_SCOPE(cx, LLM4D_WORK_CONVERT);
    llm4d_cpu_convert(e->fmt, e->dst, w, n);
    made(e);
    return e->dst;
}

const uint16_t *llm4d_cpu_weight_tiles(cpu_ctx *cx, const float *w, int rows, int cols, llm4d_cpu_layout layout) {
    int fresh;
    wc_entry *e = find_or_add(cx, w, (size_t)rows * (size_t)cols, layout, rows, cols, &fresh);
    if (fresh) return e->dst;
    WORK_SCOPE(cx, LLM4D_WORK_CONVERT);
    /* the whole pack, padding included: the optimizer's passes later write only the weight's own elements */
    if (layout == LLM4D_CPU_TILES_W) llm4d_amx_pack_b(e->dst, llm4d_ct32(w), cols, rows, cols, LLM4D_ACT_NONE);
    else llm4d_amx_pack_b_t(e->dst, llm4d_ct32(w), cols, rows, cols);
    made(e);
    return e->dst;
}

void llm4d_cpu_wcache_changed(cpu_ctx *cx, const void *p, size_t bytes) {
    if (!cx->wc) return;
    for (int i = 0; i < cx->wc->n; i++) {
        wc_entry *e = &cx->wc->e[i];
        if (!p || overlaps(e, p, bytes)) e->valid = 0, e->refreshed = 0;
    }
}

void llm4d_cpu_wcache_drop(cpu_ctx *cx, const void *p, size_t bytes) {
    llm4d_cpu_wcache *wc = cx->wc;
    if (!wc) return;
    for (int i = 0; i < wc->n;) {
        if (!p || overlaps(&wc->e[i], p, bytes)) {
            free(wc->e[i].dst);
            wc->bytes -= wc->e[i].bytes;
            wc->e[i] = wc->e[--wc->n];
        } else {
            i++;
        }
    }
}

int llm4d_cpu_wcache_spans(cpu_ctx *cx, const float *p, size_t n, llm4d_cpu_wspan **out) {
    llm4d_cpu_wcache *wc = cx->wc;
    *out = NULL;
    if (!wc || wc->n == 0) return 0;
    int k = 0;
    for (int i = 0; i < wc->n; i++) {
        const wc_entry *e = &wc->e[i];
        if (!overlaps(e, p, n * sizeof(float))) continue;
        if (k == wc->spans_cap) {
            const int cap = wc->spans_cap ? 2 * wc->spans_cap : 16;
            llm4d_cpu_wspan *ns = realloc(wc->spans, (size_t)cap * sizeof *ns);
            LLM4D_ASSERT(ns != NULL, "out of memory for %d weight-copy spans", cap);
            wc->spans = ns;
            wc->spans_cap = cap;
        }
        /* the overlap, as element offsets into p and into the copy */
        const size_t lo = e->src > p ? (size_t)(e->src - p) : 0;
        const size_t hi = e->src + e->n < p + n ? (size_t)(e->src + e->n - p) : n;
        const size_t off = (size_t)(p + lo - e->src);
        void *dst = e->layout == LLM4D_CPU_ROWS ? (char *)e->dst + off * llm4d_cpu_operand_bytes(e->fmt) : e->dst;
        wc->spans[k++] = (llm4d_cpu_wspan){lo, hi, e->fmt, e->layout, dst, e->src, off, e->rows, e->cols};
    }
    *out = wc->spans;
    return k;
}

double llm4d_cpu_wcache_refreshed(cpu_ctx *cx, const float *p, size_t n) {
    llm4d_cpu_wcache *wc = cx->wc;
    double bytes = 0;
    if (!wc) return 0;
    for (int i = 0; i < wc->n; i++) {
        wc_entry *e = &wc->e[i];
        if (!overlaps(e, p, n * sizeof(float))) continue;
        const float *lo = e->src > p ? e->src : p, *hi = e->src + e->n < p + n ? e->src + e->n : p + n;
        bytes += (double)(hi - lo) * (double)llm4d_cpu_operand_bytes(e->fmt);
        if (e->valid) { /* rewritten in step with its master: still valid */
            take_samples(e);
            continue;
        }
        e->refreshed += (size_t)(hi - lo);
        if (e->refreshed >= e->n) {
            e->valid = 1;
            take_samples(e);
        }
    }
    return bytes;
}

size_t llm4d_cpu_wcache_bytes(const cpu_ctx *cx) { return cx->wc ? cx->wc->bytes : 0; }

void llm4d_cpu_wcache_free(cpu_ctx *cx) {
    if (!cx->wc) return;
    llm4d_cpu_wcache_drop(cx, NULL, 0);
    free(cx->wc->e);
    free(cx->wc->spans);
    free(cx->wc);
    cx->wc = NULL;
}
