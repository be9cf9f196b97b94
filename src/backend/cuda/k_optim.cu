// k_optim.cu — the optimizer's kernels on the GPU: AdamW fused with the low-precision weight copies, the sums of
// squares and dot products in a fixed order, and the initial weights.
//
// AdamW is one pass over params, grads, m and v (the CPU's formula, cpu_optim.c, in the same order), zeroing the
// gradient in the same pass when asked, and writing each parameter's bf16 copy beside its new fp32 value where a
// linear layer keeps one (llm4d_cuda_span; cuda_wcache.c), 2 bytes more per parameter instead of a conversion
// pass later.
//
// Reductions: a block of LLM4D_CUDA_RED_THREADS sums one chunk of LLM4D_CUDA_RED_CHUNK elements (each thread every
// 256th element of it, in double, then a fixed tree), then one block sums a tensor's chunk partials the same way.
// Only those two constants decide the order of the additions, so the bits depend on the data alone.
//
// init_param draws each element's value from its global index (kidx.h, core/rng.h's Philox and Box-Muller in
// double), the function the CPU backends evaluate, so a GPU run starts from the CPU run's weights (up to the last
// bit of double log and cos, which CUDA computes within an ulp or two of glibc: the float results agree but for a
// rare element).
#include "backend/cuda/k_common.cuh"
#include "backend/cuda/kidx.h"

using namespace llm4d_k;

namespace {

static_assert(LLM4D_CUDA_RED_THREADS == kThreads, "the reductions' tree is block_sum's");

struct span_pack {
    llm4d_cuda_span s[LLM4D_CUDA_MAX_SPANS];
    int n;
};

__global__ void adamw_k(float *p, float *g, float *m, float *v, size_t n, llm4d_cuda_adamw k, int zero_grads,
                        span_pack sp) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float gi = g[i] * k.gs;
        const float pi = p[i] - k.decay * p[i];
        const float mi = k.b1 * m[i] + k.omb1 * gi;
        const float vi = k.b2 * v[i] + k.omb2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        const float pn = pi - k.lr_t * mi / (sqrtf(vi) + k.eps_t);
        p[i] = pn;
        if (zero_grads) g[i] = 0.0f;
        if (sp.n) { // the span holding i (sorted by lo, disjoint): binary search
            int lo = 0, hi = sp.n - 1;
            while (lo < hi) {
                const int mid = (lo + hi + 1) / 2;
                if (sp.s[mid].lo <= i) lo = mid;
                else hi = mid - 1;
            }
            if (sp.s[lo].lo <= i && i < sp.s[lo].hi) st_t(sp.s[lo].dst, sp.s[lo].fmt, i - sp.s[lo].lo, pn);
        }
    }
}

static __device__ __forceinline__ double term(const float *x, const float *y, size_t i, int mode) {
    const double a = x[i];
    return mode == 0 ? a * a : mode == 1 ? a * (double)y[i] : a;
}

__global__ void __launch_bounds__(kThreads) reduce_flat_k(double *part, const float *x, const float *y, size_t n,
                                                          int mode) {
    __shared__ double sh[kThreads];
    const size_t i0 = (size_t)blockIdx.x * LLM4D_CUDA_RED_CHUNK;
    const size_t i1 = i0 + LLM4D_CUDA_RED_CHUNK < n ? i0 + LLM4D_CUDA_RED_CHUNK : n;
    double s = 0.0;
    for (size_t i = i0 + threadIdx.x; i < i1; i += kThreads) s += term(x, y, i, mode);
    s = block_sum(s, sh);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

__global__ void __launch_bounds__(kThreads) reduce_table_k(double *part, const llm4d_cuda_chunk *table, int mode) {
    __shared__ double sh[kThreads];
    const llm4d_cuda_chunk c = table[blockIdx.x];
    double s = 0.0;
    for (unsigned i = threadIdx.x; i < c.len; i += kThreads) s += term(c.x, c.y, i, mode);
    s = block_sum(s, sh);
    if (threadIdx.x == 0) part[c.part] = s;
}

// out[k] (=|+=) the sum of part[first[k] .. first[k+1]): a block per tensor
__global__ void __launch_bounds__(kThreads) reduce_final_k(double *out, const double *part, const unsigned *first,
                                                           unsigned nparts1, int add) {
    __shared__ double sh[kThreads];
    const unsigned a = first ? first[blockIdx.x] : 0, b = first ? first[blockIdx.x + 1] : nparts1;
    double s = 0.0;
    for (unsigned i = a + threadIdx.x; i < b; i += kThreads) s += part[i];
    s = block_sum(s, sh);
    if (threadIdx.x == 0) out[blockIdx.x] = add ? out[blockIdx.x] + s : s;
}

__global__ void init_param_k(float *dst, llm4d_init_spec spec, int64_t j0, int64_t j1) {
    const int64_t n = j1 - j0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = llm4d_kidx_init_value(&spec, j0 + i);
}

} // namespace

extern "C" {

void llm4d_k_adamw(cudaStream_t s, float *p, float *g, float *m, float *v, size_t n, llm4d_cuda_adamw k,
                   int zero_grads, const llm4d_cuda_span *spans, int nspans) {
    if (!n) return;
    span_pack sp;
    sp.n = nspans < LLM4D_CUDA_MAX_SPANS ? nspans : LLM4D_CUDA_MAX_SPANS;
    for (int i = 0; i < sp.n; i++) sp.s[i] = spans[i];
    adamw_k<<<grid_for(n), kThreads, 0, s>>>(p, g, m, v, n, k, zero_grads, sp);
}

void llm4d_k_reduce_flat(cudaStream_t s, double *part, const float *x, const float *y, size_t n, int mode) {
    const size_t nparts = (n + LLM4D_CUDA_RED_CHUNK - 1) / LLM4D_CUDA_RED_CHUNK;
    if (nparts) reduce_flat_k<<<(unsigned)nparts, kThreads, 0, s>>>(part, x, y, n, mode);
}

void llm4d_k_reduce_table(cudaStream_t s, double *part, const llm4d_cuda_chunk *table, int nchunks, int mode) {
    if (nchunks > 0) reduce_table_k<<<nchunks, kThreads, 0, s>>>(part, table, mode);
}

void llm4d_k_reduce_final(cudaStream_t s, double *out, const double *part, const unsigned *first, int ntensors,
                          int add) {
    if (ntensors > 0) reduce_final_k<<<ntensors, kThreads, 0, s>>>(out, part, first, 0, add);
}

void llm4d_k_reduce_final1(cudaStream_t s, double *out, const double *part, unsigned nparts, int add) {
    reduce_final_k<<<1, kThreads, 0, s>>>(out, part, NULL, nparts, add); // nparts 0: writes (adds) zero
}

void llm4d_k_init_param(cudaStream_t s, float *dst, llm4d_init_spec spec, int64_t j0, int64_t j1) {
    if (j1 > j0) init_param_k<<<grid_for((size_t)(j1 - j0)), kThreads, 0, s>>>(dst, spec, j0, j1);
}

} // extern "C"
