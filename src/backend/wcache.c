/* wcache.c — the table of a backend's low-precision weight copies (wcache.h says why they are kept and the
 * contract): lookup by key, staleness by range, the optimizer's refresh accounting, drop on free, the byte total.
 * Written once for every backend so that the CPU's and the GPU's copies follow the same rules; how a copy is
 * stored, filled and guarded is the backend's (the callbacks of llm4d_wcache_ops). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/wcache.h"
#include "core/error.h"

void llm4d_wcache_init(llm4d_wcache *wc, const llm4d_wcache_ops *ops, void *ctx) {
    memset(wc, 0, sizeof *wc);
    wc->ops = ops;
    wc->ctx = ctx;
}

static int overlaps(const llm4d_wcopy *e, const void *p, size_t bytes) {
    const uintptr_t a = (uintptr_t)e->k.src, b = a + e->k.n * sizeof(float);
    const uintptr_t c = (uintptr_t)p, d = c + bytes;
    return a < d && c < b;
}

/* the copy's columns follow from n and rows: they are not compared */
static int same_key(const llm4d_wkey *a, const llm4d_wkey *b) {
    return a->src == b->src && a->n == b->n && a->fmt == b->fmt && a->layout == b->layout && a->rows == b->rows;
}

static void release(llm4d_wcache *wc, int i) {
    wc->ops->release(wc->ctx, &wc->e[i]);
    wc->bytes -= wc->e[i].bytes;
    wc->e[i] = wc->e[--wc->n];
}

static void hold(llm4d_wcache *wc, llm4d_wcopy *e) {
    if (wc->ops->hold) wc->ops->hold(wc->ctx, e);
}

llm4d_wcopy *llm4d_wcache_get(llm4d_wcache *wc, const llm4d_wkey *k, int *fresh) {
    llm4d_wcopy *e = NULL;
    for (int i = 0; i < wc->n && !e; i++)
        if (same_key(&wc->e[i].k, k)) e = &wc->e[i];
    *fresh = e && e->valid && (!wc->ops->holds || wc->ops->holds(wc->ctx, e));
    if (e) return e;
    /* stale copies this range overlaps are of weights no longer there (a ZeRO-3 gather buffer refilled with a
     * group of another layout): dropped, so the copies never hold more than the weights live at once */
    for (int i = 0; i < wc->n;) {
        if (!wc->e[i].valid && overlaps(&wc->e[i], k->src, k->n * sizeof(float))) release(wc, i);
        else i++;
    }
    if (wc->n == wc->cap) {
        const int cap = wc->cap ? 2 * wc->cap : 64;
        llm4d_wcopy *ne = realloc(wc->e, (size_t)cap * sizeof *ne);
        LLM4D_ASSERT(ne != NULL, "out of memory for %d weight copies", cap);
        wc->e = ne;
        wc->cap = cap;
    }
    e = &wc->e[wc->n++];
    memset(e, 0, sizeof *e);
    e->k = *k;
    wc->ops->alloc(wc->ctx, e);
    wc->bytes += e->bytes;
    return e;
}

void llm4d_wcache_made(llm4d_wcache *wc, llm4d_wcopy *e) {
    hold(wc, e);
    e->valid = 1;
    e->refreshed = 0;
}

void llm4d_wcache_stale(llm4d_wcache *wc, const void *p, size_t bytes) {
    for (int i = 0; i < wc->n; i++) {
        llm4d_wcopy *e = &wc->e[i];
        if (!p || overlaps(e, p, bytes)) e->valid = 0, e->refreshed = 0;
    }
}

void llm4d_wcache_drop(llm4d_wcache *wc, const void *p, size_t bytes) {
    for (int i = 0; i < wc->n;) {
        if (!p || overlaps(&wc->e[i], p, bytes)) release(wc, i);
        else i++;
    }
}

int llm4d_wcache_spans(llm4d_wcache *wc, const float *p, size_t n, llm4d_wspan **out) {
    *out = NULL;
    int k = 0;
    for (int i = 0; i < wc->n; i++) {
        const llm4d_wcopy *e = &wc->e[i];
        if (!overlaps(e, p, n * sizeof(float))) continue;
        if (k == wc->spans_cap) {
            const int cap = wc->spans_cap ? 2 * wc->spans_cap : 64;
            llm4d_wspan *ns = realloc(wc->spans, (size_t)cap * sizeof *ns);
            LLM4D_ASSERT(ns != NULL, "out of memory for %d weight-copy spans", cap);
            wc->spans = ns;
            wc->spans_cap = cap;
        }
        /* the overlap, as element offsets into p and into the master */
        const size_t lo = e->k.src > p ? (size_t)(e->k.src - p) : 0;
        const size_t hi = e->k.src + e->k.n < p + n ? (size_t)(e->k.src + e->k.n - p) : n;
        wc->spans[k++] = (llm4d_wspan){lo, hi, (size_t)(p + lo - e->k.src), e};
    }
    *out = wc->spans;
    return k;
}

double llm4d_wcache_refreshed(llm4d_wcache *wc, const float *p, size_t n) {
    double bytes = 0;
    for (int i = 0; i < wc->n; i++) {
        llm4d_wcopy *e = &wc->e[i];
        if (!overlaps(e, p, n * sizeof(float))) continue;
        const float *lo = e->k.src > p ? e->k.src : p, *hi = e->k.src + e->k.n < p + n ? e->k.src + e->k.n : p + n;
        bytes += (double)(hi - lo) * (double)e->k.esize;
        if (e->valid) { /* rewritten in step with its master: still valid */
            hold(wc, e);
            continue;
        }
        e->refreshed += (size_t)(hi - lo);
        if (e->refreshed >= e->k.n) {
            e->valid = 1;
            hold(wc, e);
        }
    }
    return bytes;
}

size_t llm4d_wcache_bytes(const llm4d_wcache *wc) { return wc->bytes; }

void llm4d_wcache_free(llm4d_wcache *wc) {
    llm4d_wcache_drop(wc, NULL, 0);
    free(wc->e);
    free(wc->spans);
    llm4d_wcache_init(wc, wc->ops, wc->ctx);
}
