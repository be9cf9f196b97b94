// k_llama.cu — the Llama family's element-wise kernels on the GPU (backend.h rmsnorm_forward, rmsnorm_backward,
// rope_forward, rope_backward, swiglu_forward, swiglu_backward), with the CPU backend's formulas (cpu_llama.c).
//
// RMSNorm: a warp per row for the row statistic and the input gradient (k_norm.cu's LayerNorm less the mean), the
// weight gradient as column sums over fixed chunks of LLM4D_CUDA_COL_ROWS rows, then the chunks in order in double
// (llm4d_k_colsum_final): bits that depend on the sizes only. RoPE: a thread per (row, frequency i), which computes
// its angle once, in double (positions times theta^(-2i/HS) reach 10^5 radians, where an fp32 angle is off by
// 10^-2), and turns pair (i, i + HS/2) of every head of the row with it: neighbouring threads touch neighbouring
// elements, and one sincos serves the row's NH heads (Q's and K's together in a fused qkv row). SwiGLU: a thread
// per output element, the gate and up values of a row F apart. Typed: every activation fp32, bf16 or fp16 on its
// own (k_common.cuh's TY); rstd, the weights and their gradient fp32.
#include "backend/cuda/k_common.cuh"

using namespace llm4d_k;

namespace {

constexpr int ROWS_PER_BLOCK = kThreads / 32; // a warp per row

template <bool TY>
__global__ void rmsnorm_forward_k(llm4d_tensor out, float *rstd, llm4d_ctensor inp, const float *w, int N, int C,
                                  float eps) {
    const int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (row >= N) return;
    const size_t x0 = (size_t)row * C;
    float ss = 0.0f;
    for (int c = lane; c < C; c += 32) {
        const float x = ldx<TY>(inp.p, inp.t, x0 + c);
        ss += x * x;
    }
    const float r = 1.0f / sqrtf(warp_sum(ss) / C + eps);
    for (int c = lane; c < C; c += 32) stx<TY>(out.p, out.t, x0 + c, ldx<TY>(inp.p, inp.t, x0 + c) * r * w[c]);
    if (lane == 0 && rstd) rstd[row] = r;
}

// dinp += r (dy w - x r mean(dy w x r)), a warp per row
template <bool TY>
__global__ void rmsnorm_backward_dx_k(llm4d_tensor dinp, llm4d_ctensor dout, llm4d_ctensor inp, const float *w,
                                      const float *rstd, int N, int C) {
    const int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (row >= N) return;
    const size_t x0 = (size_t)row * C;
    const float r = rstd[row];
    float a = 0.0f;
    for (int c = lane; c < C; c += 32) a += ldx<TY>(dout.p, dout.t, x0 + c) * w[c] * ldx<TY>(inp.p, inp.t, x0 + c);
    a = warp_sum(a) * r / C;
    for (int c = lane; c < C; c += 32) {
        const float dy = ldx<TY>(dout.p, dout.t, x0 + c), x = ldx<TY>(inp.p, inp.t, x0 + c);
        stx<TY>(dinp.p, dinp.t, x0 + c, ldx<TY>(dinp.p, dinp.t, x0 + c) + r * (dy * w[c] - x * r * a));
    }
}

// the chunks' dw sums: part[k, c] = sum over chunk k's rows of dy x r
template <bool TY>
__global__ void rmsnorm_backward_part_k(float *part, llm4d_ctensor dout, llm4d_ctensor inp, const float *rstd, int N,
                                        int C) {
    const int c = blockIdx.y * kThreads + threadIdx.x;
    if (c >= C) return;
    const int r0 = blockIdx.x * LLM4D_CUDA_COL_ROWS, r1 = min(r0 + LLM4D_CUDA_COL_ROWS, N);
    float aw = 0.0f;
    for (int r = r0; r < r1; r++) {
        const size_t i = (size_t)r * C + c;
        aw += ldx<TY>(dout.p, dout.t, i) * ldx<TY>(inp.p, inp.t, i) * rstd[r];
    }
    part[(size_t)blockIdx.x * C + c] = aw;
}

// out = x turned by sign * angle; out may be inp (each thread reads its pairs before writing them)
template <bool TY>
__global__ void rope_k(llm4d_tensor out, llm4d_ctensor inp, llm4d_rope_shape s, float sign) {
    const int half = s.HS / 2;
    const size_t total = (size_t)s.N * half;
    const double lt = log2((double)s.theta);
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < total; k += (size_t)gridDim.x * blockDim.x) {
        const int n = (int)(k / half), i = (int)(k % half);
        const double pos = (double)((s.tok0 + n) % s.T);
        double sd, cd;
        sincos(pos * exp2(-(double)(2 * i) / s.HS * lt), &sd, &cd);
        const float c = (float)cd, sn = sign * (float)sd;
        const size_t row = (size_t)n * s.ld + i;
        for (int h = 0; h < s.NH; h++) {
            const size_t a = row + (size_t)h * s.HS, b = a + half;
            const float x1 = ldx<TY>(inp.p, inp.t, a), x2 = ldx<TY>(inp.p, inp.t, b);
            stx<TY>(out.p, out.t, a, x1 * c - x2 * sn);
            stx<TY>(out.p, out.t, b, x2 * c + x1 * sn);
        }
    }
}

// SwiGLU in cpu_llama.c's overflow-free form: with e = exp(-|g|) and q = 1 / (1 + e), sigmoid(g) is q for g >= 0
// and e q below, sigmoid (1 - sigmoid) = e q^2; silu'(g) = sigmoid + g sigmoid (1 - sigmoid)
template <bool TY>
__global__ void swiglu_forward_k(llm4d_tensor out, llm4d_ctensor inp, int N, int F) {
    const size_t total = (size_t)N * F;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < total; k += (size_t)gridDim.x * blockDim.x) {
        const size_t gi = k / F * 2 * F + k % F;
        const float g = ldx<TY>(inp.p, inp.t, gi), u = ldx<TY>(inp.p, inp.t, gi + F);
        const float e = expf(-fabsf(g)), q = 1.0f / (1.0f + e);
        stx<TY>(out.p, out.t, k, g * (g >= 0.0f ? q : e * q) * u);
    }
}

template <bool TY>
__global__ void swiglu_backward_k(llm4d_tensor dinp, llm4d_ctensor inp, llm4d_ctensor dout, int N, int F) {
    const size_t total = (size_t)N * F;
    for (size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x; k < total; k += (size_t)gridDim.x * blockDim.x) {
        const size_t gi = k / F * 2 * F + k % F;
        const float g = ldx<TY>(inp.p, inp.t, gi), u = ldx<TY>(inp.p, inp.t, gi + F), dy = ldx<TY>(dout.p, dout.t, k);
        const float e = expf(-fabsf(g)), q = 1.0f / (1.0f + e), sg = g >= 0.0f ? q : e * q;
        stx<TY>(dinp.p, dinp.t, gi, dy * u * (sg + g * e * q * q));
        stx<TY>(dinp.p, dinp.t, gi + F, dy * g * sg);
    }
}

template <bool TY>
void rmsnorm_backward(cudaStream_t s, llm4d_tensor dinp, float *part, llm4d_ctensor dout, llm4d_ctensor inp,
                      const float *w, const float *rstd, int N, int C) {
    const unsigned g = (N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
    rmsnorm_backward_dx_k<TY><<<g, kThreads, 0, s>>>(dinp, dout, inp, w, rstd, N, C);
    const dim3 grid((N + LLM4D_CUDA_COL_ROWS - 1) / LLM4D_CUDA_COL_ROWS, (C + kThreads - 1) / kThreads);
    rmsnorm_backward_part_k<TY><<<grid, kThreads, 0, s>>>(part, dout, inp, rstd, N, C);
}

} // namespace

extern "C" {

void llm4d_k_rmsnorm_forward(cudaStream_t s, llm4d_tensor out, float *rstd, llm4d_ctensor inp, const float *w, int N,
                             int C, float eps) {
    if (N <= 0) return;
    const unsigned g = (N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
    if (out.t != LLM4D_F32 || inp.t != LLM4D_F32)
        rmsnorm_forward_k<true><<<g, kThreads, 0, s>>>(out, rstd, inp, w, N, C, eps);
    else
        rmsnorm_forward_k<false><<<g, kThreads, 0, s>>>(out, rstd, inp, w, N, C, eps);
}

void llm4d_k_rmsnorm_backward(cudaStream_t s, llm4d_tensor dinp, float *part, llm4d_ctensor dout, llm4d_ctensor inp,
                              const float *w, const float *rstd, int N, int C) {
    if (N <= 0) return;
    if (dinp.t != LLM4D_F32 || dout.t != LLM4D_F32 || inp.t != LLM4D_F32)
        rmsnorm_backward<true>(s, dinp, part, dout, inp, w, rstd, N, C);
    else
        rmsnorm_backward<false>(s, dinp, part, dout, inp, w, rstd, N, C);
}

void llm4d_k_rope(cudaStream_t s, llm4d_tensor out, llm4d_ctensor inp, llm4d_rope_shape sh, float sign) {
    const size_t total = (size_t)(sh.N > 0 ? sh.N : 0) * (sh.HS / 2);
    if (!total) return;
    if (out.t != LLM4D_F32 || inp.t != LLM4D_F32)
        rope_k<true><<<grid_for(total), kThreads, 0, s>>>(out, inp, sh, sign);
    else
        rope_k<false><<<grid_for(total), kThreads, 0, s>>>(out, inp, sh, sign);
}

void llm4d_k_swiglu_forward(cudaStream_t s, llm4d_tensor out, llm4d_ctensor inp, int N, int F) {
    const size_t total = (size_t)N * F;
    if (N <= 0 || F <= 0) return;
    if (out.t != LLM4D_F32 || inp.t != LLM4D_F32)
        swiglu_forward_k<true><<<grid_for(total), kThreads, 0, s>>>(out, inp, N, F);
    else
        swiglu_forward_k<false><<<grid_for(total), kThreads, 0, s>>>(out, inp, N, F);
}

void llm4d_k_swiglu_backward(cudaStream_t s, llm4d_tensor dinp, llm4d_ctensor inp, llm4d_ctensor dout, int N, int F) {
    const size_t total = (size_t)N * F;
    if (N <= 0 || F <= 0) return;
    if (dinp.t != LLM4D_F32 || inp.t != LLM4D_F32 || dout.t != LLM4D_F32)
        swiglu_backward_k<true><<<grid_for(total), kThreads, 0, s>>>(dinp, inp, dout, N, F);
    else
        swiglu_backward_k<false><<<grid_for(total), kThreads, 0, s>>>(dinp, inp, dout, N, F);
}

} // extern "C"
