// k_xent.cu — the vocabulary-blocked softmax cross-entropy on the GPU (backend.h xent_forward, xent_rescale,
// xent_backward), with the planar statistics and merge rule of the CPU backend (cpu_elem.c):
// stats[0..N) running max, stats[N..2N) sum of exp(logit - max), stats[2N..3N) the target's logit.
//
// A block per row: the row's maximum and its sum of exponentials are reductions over thousands of columns, done by
// the block in a fixed tree (every run the same bits) after one read of the row; the per-thread sums are fp32 over
// ~200 terms (an online softmax), the tree in double (the CPU sums fp32 blocks of 2048 in double). The backward
// writes every column of the part (padding zero), and may write over the logits: each element is read and written
// by the same thread. Typed (k_common.cuh's TY): the logits are read and their gradient written in their own types
// (under O2 both 16-bit, the gradient over the logits: the LM head's backward GEMM reads it as its operand); the
// statistics, losses and dloss are fp32.
#include <math.h>

#include "backend/cuda/k_common.cuh"
#include "backend/cuda/kidx.h"

using namespace llm4d_k;

namespace {

template <bool TY>
__global__ void __launch_bounds__(kThreads) xent_forward_k(float *stats, llm4d_ctensor logits, const int32_t *targets,
                                                           int N, int Vl, int v0, int V, int merge) {
    __shared__ float shf[kThreads];
    __shared__ double shd[kThreads];
    const int n = blockIdx.x, real = llm4d_kidx_real_cols(Vl, v0, V);
    const size_t l0 = (size_t)n * Vl; // the row's first logit
    // one read of the row: each thread keeps its own running max and sum (an online softmax), the block then brings
    // the sums to the row's max (a row is ~200 KB at GPT-2's vocabulary, so a second pass would read it from memory)
    float tm = -INFINITY, ts = 0.0f;
    for (int j = threadIdx.x; j < real; j += kThreads) {
        const float v = ldx<TY>(logits.p, logits.t, l0 + j);
        if (v > tm) {
            ts = ts * expf(tm - v) + 1.0f;
            tm = v;
        } else {
            ts += expf(v - tm);
        }
    }
    const float mx = block_max(tm, shf);
    float m0 = 0.0f, s0 = 0.0f, mref = mx;
    if (merge) { // the running statistics and this part's, combined at the larger max (an online softmax)
        m0 = stats[n];
        s0 = stats[N + n];
        mref = m0 > mx ? m0 : mx;
    }
    const float s = ts > 0.0f ? ts * expf(tm - mref) : 0.0f;
    const double sum = block_sum((double)s, shd);
    if (threadIdx.x != 0) return;
    const int y = targets[n] - v0;
    const float ly = y >= 0 && y < real ? ldx<TY>(logits.p, logits.t, l0 + y) : 0.0f;
    if (merge) {
        const double tot = (s0 > 0 ? (double)s0 * exp((double)m0 - mref) : 0.0) + (real > 0 ? sum : 0.0);
        stats[n] = mref;
        stats[N + n] = (float)tot;
        stats[2 * N + n] += ly;
    } else {
        stats[n] = mx;
        stats[N + n] = real > 0 ? (float)sum : 0.0f;
        stats[2 * N + n] = ly;
    }
}

__global__ void xent_rescale_k(float *stats, const float *gmax, int N) {
    const int n = blockIdx.x * kThreads + threadIdx.x;
    if (n >= N) return;
    if (stats[N + n] > 0) stats[N + n] = (float)(stats[N + n] * exp((double)stats[n] - gmax[n]));
    stats[n] = gmax[n];
}

template <bool TY>
__global__ void __launch_bounds__(kThreads) xent_backward_k(float *losses, llm4d_tensor dlogits, llm4d_ctensor logits,
                                                            const float *stats, const int32_t *targets,
                                                            const float *dloss, int N, int Vl, int v0, int V) {
    const int n = blockIdx.x;
    const double lse = stats[n] + log((double)stats[N + n]);
    if (losses && threadIdx.x == 0) losses[n] = (float)(lse - stats[2 * N + n]);
    if (!dlogits.p) return;
    const int real = llm4d_kidx_real_cols(Vl, v0, V), y = targets[n] - v0;
    const float w = dloss ? dloss[n] : 1.0f, flse = (float)lse;
    const size_t l0 = (size_t)n * Vl;
    for (int j = threadIdx.x; j < Vl; j += kThreads) {
        float g = 0.0f;
        if (j < real) {
            g = expf(ldx<TY>(logits.p, logits.t, l0 + j) - flse) * w;
            if (j == y) g -= w;
        }
        stx<TY>(dlogits.p, dlogits.t, l0 + j, g);
    }
}

} // namespace

extern "C" {

void llm4d_k_xent_forward(cudaStream_t s, float *stats, llm4d_ctensor logits, const int32_t *targets, int N, int Vl,
                          int v0, int V, int merge) {
    if (N <= 0) return;
    if (logits.t != LLM4D_F32) xent_forward_k<true><<<N, kThreads, 0, s>>>(stats, logits, targets, N, Vl, v0, V, merge);
    else xent_forward_k<false><<<N, kThreads, 0, s>>>(stats, logits, targets, N, Vl, v0, V, merge);
}

void llm4d_k_xent_rescale(cudaStream_t s, float *stats, const float *gmax, int N) {
    if (N > 0) xent_rescale_k<<<(N + kThreads - 1) / kThreads, kThreads, 0, s>>>(stats, gmax, N);
}

void llm4d_k_xent_backward(cudaStream_t s, float *losses, llm4d_tensor dlogits, llm4d_ctensor logits,
                           const float *stats, const int32_t *targets, const float *dloss, int N, int Vl, int v0,
                           int V) {
    if (N <= 0) return;
    if (logits.t != LLM4D_F32 || (dlogits.p && dlogits.t != LLM4D_F32))
        xent_backward_k<true><<<N, kThreads, 0, s>>>(losses, dlogits, logits, stats, targets, dloss, N, Vl, v0, V);
    else
        xent_backward_k<false><<<N, kThreads, 0, s>>>(losses, dlogits, logits, stats, targets, dloss, N, Vl, v0, V);
}

} // extern "C"
