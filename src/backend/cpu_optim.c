/* cpu_optim.c — the optimizer's passes of the fast CPU backend: AdamW and the gradient norm's sum of squares.
 *
 * Both are memory-bound: per parameter AdamW reads the parameter, its gradient and the two Adam states and writes
 * back three of them (and the zeroed gradient), a handful of flops each; the norm reads the gradient once. So each
 * is one pass over memory in chunks that stay in L1 while they are worked on, the arithmetic vectorised by GCC
 * (`omp simd`; -fno-math-errno lets sqrtf vectorise), and everything else that must touch the gradients once per
 * update happens inside the same pass: zeroing them for the next step's accumulation (zero_grads) costs the write
 * of a line already in cache instead of a separate pass over the whole buffer, and the low-precision copies of the
 * weights the linear layers read (cpu_wcache.c; their table wcache.h) are written from the new values while they
 * are in L1, 2 bytes per parameter instead of a later conversion pass reading 4 and writing 2. Each pass's traffic
 * is counted (optim_bytes) so the trainer and bench/bench_train.sh can hold its time against the copy bandwidth. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>

#include "backend/cpu_amx.h"
#include "backend/cpu_impl.h"

#define OPT_CHUNK 16384 /* elements per task: 4 streams x 64 KiB, far more than a thread-wake's cost of work */

typedef struct {
    float gs, decay, b1, b2, omb1, omb2, lr_t, eps_t;
} adamw_consts;

/* The update of n elements (Paddle's formula, in this order, as backend.h states it and cpu_ref.c computes it). */
static void adamw_chunk(const adamw_consts *k, float *restrict p, float *restrict g, float *restrict m,
                        float *restrict v, size_t n, int zero_grads) {
    const float gs = k->gs, decay = k->decay, b1 = k->b1, b2 = k->b2, omb1 = k->omb1, omb2 = k->omb2;
    const float lr_t = k->lr_t, eps_t = k->eps_t;
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        const float gi = g[i] * gs;
        const float pi = p[i] - decay * p[i];
        const float mi = b1 * m[i] + omb1 * gi;
        const float vi = b2 * v[i] + omb2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = pi - lr_t * mi / (sqrtf(vi) + eps_t);
    }
    if (zero_grads) memset(g, 0, n * sizeof(float)); /* the lines were just read: still in L1 */
}

/* The new values of params[a, b) into the span's copy: in row order, or into the weight's tiles. */
static void write_copy(const llm4d_wspan *sp, const float *params, size_t a, size_t b) {
    if (a >= b) return;
    const llm4d_wcopy *c = sp->c;
    const size_t e0 = sp->e_lo + (a - sp->lo), e1 = e0 + (b - a);
    switch ((llm4d_cpu_layout)c->k.layout) {
    case LLM4D_CPU_ROWS:
        llm4d_cpu_convert_block((llm4d_cpu_fmt)c->k.fmt, (char *)c->dst + e0 * c->k.esize, params + a, b - a);
        return;
    case LLM4D_CPU_TILES_W: llm4d_amx_pack_b_range(c->dst, c->k.src, c->k.rows, c->k.cols, e0, e1); return;
    case LLM4D_CPU_TILES_WT: llm4d_amx_pack_b_t_range(c->dst, c->k.src, c->k.rows, c->k.cols, e0, e1); return;
    }
}

/* Where the optimizer's task starting at element i ends: after OPT_CHUNK elements, except in a weight whose copy
 * is in tiles, where tasks are groups of 16 whole rows of the weight (the first and last as the range cuts them),
 * so that the packers transpose whole tile columns instead of rows cut at arbitrary chunk ends, element by element
 * (4x slower). */
static size_t next_cut(const llm4d_wspan *sp, int nsp, size_t i, size_t n) {
    size_t next = i + OPT_CHUNK < n ? i + OPT_CHUNK : n;
    for (int s = 0; s < nsp; s++) {
        if (sp[s].c->k.layout == LLM4D_CPU_ROWS) continue;
        if (i >= sp[s].lo && i < sp[s].hi) {
            const size_t g = (size_t)16 * (size_t)sp[s].c->k.cols, e = sp[s].e_lo + (i - sp[s].lo);
            const size_t end = sp[s].lo + ((e / g + 1) * g - sp[s].e_lo);
            return end < sp[s].hi ? end : sp[s].hi;
        }
        if (sp[s].lo > i && sp[s].lo < next) next = sp[s].lo;
    }
    return next;
}

static void cpu_adamw(llm4d_backend *be, float *params, float *grads, float *m, float *v, size_t n, float lr,
                      float beta1, float beta2, float eps, float wd, int t, float grad_scale, int zero_grads) {
    cpu_ctx *cx = ctx_of(be);
    WORK_SCOPE(cx, LLM4D_WORK_OPTIM);
    llm4d_cpu_grad_settle(cx, grads, n * sizeof(float)); /* settled after the backward; a guard costing a compare */
    const double bc1 = 1.0 - pow(beta1, t), bc2 = 1.0 - pow(beta2, t);
    const adamw_consts k = {grad_scale, lr * wd, beta1, beta2, 1.0f - beta1, 1.0f - beta2,
                            (float)(lr * sqrt(bc2) / bc1), (float)(eps * sqrt(bc2))};
    /* reads params, grads, m, v; writes params, m, v, and the gradients when zeroing them */
    cx->optim_bytes += (zero_grads ? 32.0 : 28.0) * (double)n;
    llm4d_wspan *sp;
    const int nsp = llm4d_wcache_spans(&cx->wc, params, n, &sp); /* low-precision copies to rewrite in the pass */
    long ntasks = 0;
    for (size_t i = 0; i < n; i = next_cut(sp, nsp, i, n)) ntasks++;
    size_t *cut = malloc(((size_t)ntasks + 1) * sizeof *cut);
    LLM4D_ASSERT(cut != NULL, "out of memory for %ld optimizer tasks", ntasks);
    ntasks = 0;
    for (size_t i = 0; i < n; i = next_cut(sp, nsp, i, n)) cut[ntasks++] = i;
    cut[ntasks] = n;
#pragma omp parallel for schedule(static) if (ntasks > 1)
    for (long c = 0; c < ntasks; c++) {
        const size_t i0 = cut[c], len = cut[c + 1] - i0;
        adamw_chunk(&k, params + i0, grads + i0, m + i0, v + i0, len, zero_grads);
        for (int s = 0; s < nsp; s++) /* the chunk's new parameters are in L1 */
            write_copy(&sp[s], params, i0 > sp[s].lo ? i0 : sp[s].lo, i0 + len < sp[s].hi ? i0 + len : sp[s].hi);
    }
    free(cut);
    if (nsp) cx->optim_bytes += llm4d_wcache_refreshed(&cx->wc, params, n);
}

/* The sum of squares of one chunk, in double, as four quarters side by side: one running sum is a chain of
 * dependent adds that holds a core to ~10 GB/s; four run at what the core reads (the norm pass over gpt2-en's
 * gradients 26 -> 19 ms on two Sapphire Rapids threads). The order is fixed by the chunk alone. */
static double sumsq_chunk(const float *x, size_t n) {
    const size_t q = n / 4;
    const float *a = x, *b = x + q, *c = x + 2 * q, *d = x + 3 * q;
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
    for (size_t i = 0; i < q; i++) {
        s0 += (double)a[i] * a[i];
        s1 += (double)b[i] * b[i];
        s2 += (double)c[i] * c[i];
        s3 += (double)d[i] * d[i];
    }
    for (size_t i = 4 * q; i < n; i++) s3 += (double)x[i] * x[i];
    return (s0 + s1) + (s2 + s3);
}

static double cpu_sumsq(llm4d_backend *be, const float *x, size_t n) {
    cpu_ctx *cx = ctx_of(be);
    WORK_SCOPE(cx, LLM4D_WORK_OPTIM);
    llm4d_cpu_grad_settle(cx, x, n * sizeof(float));
    cx->optim_bytes += 4.0 * (double)n;
    size_t chunk = (n + SUMSQ_MAXCHUNKS - 1) / SUMSQ_MAXCHUNKS;
    if (chunk < SUMSQ_MINCHUNK) chunk = SUMSQ_MINCHUNK;
    const long nchunks = (long)((n + chunk - 1) / chunk);
    double part[SUMSQ_MAXCHUNKS];
#pragma omp parallel for schedule(static) if (nchunks > 1)
    for (long c = 0; c < nchunks; c++) {
        const size_t i0 = (size_t)c * chunk, i1 = i0 + chunk < n ? i0 + chunk : n;
        part[c] = sumsq_chunk(x + i0, i1 - i0);
    }
    double total = 0.0;
    for (long c = 0; c < nchunks; c++) total += part[c];
    return total;
}

void llm4d_cpu_optim_install(llm4d_backend *be) {
    be->adamw = cpu_adamw;
    be->sumsq = cpu_sumsq;
}
