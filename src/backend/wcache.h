/* wcache.h — the bookkeeping of a backend's low-precision weight copies (backend.h, weights_changed), one table for
 * every backend (private to src/backend: cpu_wcache.c and cuda/cuda_wcache.c make and store the copies).
 *
 * Why a cache at all: in mixed precision a weight is an operand of several GEMMs per step (forward, input gradient,
 * again with recompute or several micro-batches) but changes once per update, so a backend converts it once into
 * a copy and keeps that copy until it is told the master changed. The contract, the same for every backend:
 *  - a copy is keyed by its fp32 master's address and length, the operand format, and a layout (0: the master's own
 *    row order; a backend may keep other layouts, the CPU's AMX tiles, keyed by the weight's rows as well);
 *  - it is made on first use and stays valid until told otherwise: weights_changed(p, bytes) marks the copies
 *    overlapping a range stale (NULL: all), the optimizer rewrites the copies of the range it updates in its own
 *    pass and reports it (llm4d_wcache_refreshed: a stale copy wholly rewritten is valid again), and memory given
 *    back through the backend's free drops its copies;
 *  - looking up a copy that is missing drops the stale copies its range overlaps first (a ZeRO-3 gather buffer
 *    refilled with another group's weights), so the copies never hold more than the weights live at once.
 * What is backend-specific is where a copy lives and how it is made: the backend gives the table its storage
 * (alloc/release: host memory, device memory), fills a copy itself (a conversion pass, a kernel, tile packing),
 * and may guard a copy against a caller that breaks the contract (hold/holds: the CPU samples a few elements of the
 * master; a GPU cannot read them back without synchronising). The table is a plain value in the backend's context,
 * empty when zeroed; llm4d_wcache_init gives it the backend's callbacks. */
#ifndef LLM4D_BACKEND_WCACHE_H
#define LLM4D_BACKEND_WCACHE_H

#include <stddef.h>

#define LLM4D_WCACHE_GUARD 8 /* floats of a copy's guard (the backend's; the table never reads them) */

typedef struct {
    const float *src; /* the fp32 master */
    size_t n;         /* its elements */
    int fmt;          /* the backend's operand format */
    int layout;       /* the backend's layout; 0: the master's row order */
    int rows, cols;   /* the weight's shape where the layout needs it (0 otherwise) */
    size_t esize;     /* bytes of one operand element in fmt (the refresh accounting) */
} llm4d_wkey;

typedef struct {
    llm4d_wkey k;
    void *dst;        /* the copy: the backend's storage */
    size_t bytes;     /* held by dst */
    int valid;
    size_t refreshed; /* elements the optimizer rewrote since the copy went stale */
    float guard[LLM4D_WCACHE_GUARD];
} llm4d_wcopy;

/* The storage of copies, and an optional guard. ctx is the backend's context given to llm4d_wcache_init. */
typedef struct {
    /* storage for a new copy (e->k set): sets e->dst and e->bytes; a backend out of memory aborts (no method fails) */
    void (*alloc)(void *ctx, llm4d_wcopy *e);
    void (*release)(void *ctx, llm4d_wcopy *e);
    /* optional: e now holds its master's values (made, or rewritten in step by the optimizer) */
    void (*hold)(void *ctx, llm4d_wcopy *e);
    /* optional: whether a copy the table believes valid still holds its master's values */
    int (*holds)(void *ctx, const llm4d_wcopy *e);
} llm4d_wcache_ops;

/* Elements [lo, hi) of a range p[0, n) have the copy c, where p[lo] is the master's element e_lo. */
typedef struct {
    size_t lo, hi, e_lo;
    const llm4d_wcopy *c;
} llm4d_wspan;

typedef struct {
    const llm4d_wcache_ops *ops;
    void *ctx;
    llm4d_wcopy *e;
    int n, cap;
    size_t bytes;       /* held by the copies */
    llm4d_wspan *spans; /* llm4d_wcache_spans' answer */
    int spans_cap;
} llm4d_wcache;

void llm4d_wcache_init(llm4d_wcache *wc, const llm4d_wcache_ops *ops, void *ctx);
/* The copy of key k: the one the table has (*fresh: it holds the master's values), or a new one (*fresh 0). A copy
 * not fresh is the caller's to fill, then to declare with llm4d_wcache_made. Valid until the table next changes. */
llm4d_wcopy *llm4d_wcache_get(llm4d_wcache *wc, const llm4d_wkey *k, int *fresh);
void llm4d_wcache_made(llm4d_wcache *wc, llm4d_wcopy *e);
/* The copies overlapping bytes at p are stale (p NULL: every copy). */
void llm4d_wcache_stale(llm4d_wcache *wc, const void *p, size_t bytes);
/* The memory at p is going away: its copies are released (p NULL: every copy). */
void llm4d_wcache_drop(llm4d_wcache *wc, const void *p, size_t bytes);
/* The copies overlapping p[0, n), for the optimizer to rewrite in its pass; their number (*out valid until the next
 * call). */
int llm4d_wcache_spans(llm4d_wcache *wc, const float *p, size_t n, llm4d_wspan **out);
/* The optimizer rewrote the copies of p[0, n): a stale one is valid again once wholly rewritten. Returns the bytes
 * written into the copies. */
double llm4d_wcache_refreshed(llm4d_wcache *wc, const float *p, size_t n);
size_t llm4d_wcache_bytes(const llm4d_wcache *wc);
/* Releases every copy and the table's own memory; the table is empty (and initialised) again. */
void llm4d_wcache_free(llm4d_wcache *wc);

#endif
