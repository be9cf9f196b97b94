/* cpu_optim.c — the optimizer's passes of the fast CPU backend: AdamW and the gradient norm's sum of squares.
 *
 * Both are memory-bound: per parameter AdamW reads the parameter, its gradient and the two Adam states and writes
 * back three of them (and the zeroed gradient), a handful of flops each; the norm reads the gradient once. So each
 * is one pass over memory in chunks that stay in L1 while they are worked on, the arithmetic vectorised by GCC
 * (`omp simd`; -fno-math-errno lets sqrtf vectorise), and everything else that must touch the gradients once per
 * update happens inside the same pass: zeroing them for the next step's accumulation (zero_grads) costs the write
 * of a line already in cache instead of a separate pass over the whole buffer, and the low-precision copies of the
 * weights the linear layers read (cpu_wcache.c) are written from the new values while they are in L1, 2 bytes per
 * parameter instead of a later conversion pass reading 4 and writing 2. Each pass's traffic is counted
 * (optim_bytes) so the trainer and bench/bench_train.sh can hold its time against the copy bandwidth. */
#include <math.h>
#include <omp.h>

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

static void cpu_adamw(llm4d_backend *be, float *params, float *grads, float *m, float *v, size_t n, float lr,
                      float beta1, float beta2, float eps, float wd, int t, float grad_scale, int zero_grads) {
    cpu_ctx *cx = ctx_of(be);
    WORK_SCOPE(cx, LLM4D_WORK_OPTIM);
    const double bc1 = 1.0 - pow(beta1, t), bc2 = 1.0 - pow(beta2, t);
    const adamw_consts k = {grad_scale, lr * wd, beta1, beta2, 1.0f - beta1, 1.0f - beta2,
                            (float)(lr * sqrt(bc2) / bc1), (float)(eps * sqrt(bc2))};
    /* reads params, grads, m, v; writes params, m, v, and the gradients when zeroing them */
    cx->optim_bytes += (zero_grads ? 32.0 : 28.0) * (double)n;
    llm4d_cpu_wspan *sp;
    const int nsp = llm4d_cpu_wcache_spans(cx, params, n, &sp); /* low-precision copies to rewrite in the pass */
    const long ntasks = (long)((n + OPT_CHUNK - 1) / OPT_CHUNK);
#pragma omp parallel for schedule(static) if (ntasks > 1)
    for (long c = 0; c < ntasks; c++) {
        const size_t i0 = (size_t)c * OPT_CHUNK, len = n - i0 < OPT_CHUNK ? n - i0 : OPT_CHUNK;
        adamw_chunk(&k, params + i0, grads + i0, m + i0, v + i0, len, zero_grads);
        for (int s = 0; s < nsp; s++) { /* the chunk's new parameters are in L1 */
            const size_t a = sp[s].lo > i0 ? sp[s].lo : i0, b = sp[s].hi < i0 + len ? sp[s].hi : i0 + len;
            const size_t es = llm4d_cpu_operand_bytes(sp[s].fmt);
            if (a < b) llm4d_cpu_convert_block(sp[s].fmt, (char *)sp[s].dst + (a - sp[s].lo) * es, params + a, b - a);
        }
    }
    if (nsp) cx->optim_bytes += llm4d_cpu_wcache_refreshed(cx, params, n);
}

static double cpu_sumsq(llm4d_backend *be, const float *x, size_t n) {
    cpu_ctx *cx = ctx_of(be);
    WORK_SCOPE(cx, LLM4D_WORK_OPTIM);
    cx->optim_bytes += 4.0 * (double)n;
    size_t chunk = (n + SUMSQ_MAXCHUNKS - 1) / SUMSQ_MAXCHUNKS;
    if (chunk < SUMSQ_MINCHUNK) chunk = SUMSQ_MINCHUNK;
    const long nchunks = (long)((n + chunk - 1) / chunk);
    double part[SUMSQ_MAXCHUNKS];
#pragma omp parallel for schedule(static) if (nchunks > 1)
    for (long c = 0; c < nchunks; c++) {
        const size_t i0 = (size_t)c * chunk, i1 = i0 + chunk < n ? i0 + chunk : n;
        double s = 0.0;
#pragma omp simd reduction(+ : s)
        for (size_t i = i0; i < i1; i++) s += (double)x[i] * x[i];
        part[c] = s;
    }
    double total = 0.0;
    for (long c = 0; c < nchunks; c++) total += part[c];
    return total;
}

void llm4d_cpu_optim_install(llm4d_backend *be) {
    be->adamw = cpu_adamw;
    be->sumsq = cpu_sumsq;
}
