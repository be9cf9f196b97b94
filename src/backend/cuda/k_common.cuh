/* k_common.cuh — device helpers the CUDA backend's kernel files share: launch sizes, warp and block reductions in a
 * fixed order, the operand formats, and GELU written as the CPU backend writes it.
 *
 * Fixed order: every reduction here combines its terms in an order set by constants (the shuffle pattern, the
 * tree over a block of a fixed size), never by timing or by how many blocks the device runs at once, so a kernel's
 * bits are the same on every run and every GPU. */
#ifndef LLM4D_BACKEND_CUDA_K_COMMON_CUH
#define LLM4D_BACKEND_CUDA_K_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "backend/cuda/cuda_kernels.h"

namespace llm4d_k {

constexpr int kThreads = 256;
constexpr unsigned kFull = 0xffffffffu;

/* Blocks for a grid-stride loop over n items (at least one, at most 2^20: the loops stride over the rest). */
static inline unsigned grid_for(size_t n, int per_block = kThreads) {
    size_t g = (n + (size_t)per_block - 1) / (size_t)per_block;
    if (g > ((size_t)1 << 20)) g = (size_t)1 << 20;
    return g ? (unsigned)g : 1u;
}

static __device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
    return v;
}

static __device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
    return v;
}

/* Sum over a block of kThreads threads in a fixed tree; every thread gets the result. sh: kThreads doubles. */
static __device__ __forceinline__ double block_sum(double v, double *sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
#pragma unroll
    for (int s = kThreads / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    const double r = sh[0];
    __syncthreads();
    return r;
}

static __device__ __forceinline__ float block_max(float v, float *sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
#pragma unroll
    for (int s = kThreads / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + s]);
        __syncthreads();
    }
    const float r = sh[0];
    __syncthreads();
    return r;
}

/* v rounded to an operand format and back (the precision a GEMM in that format sees). */
static __device__ __forceinline__ float round_fmt(float v, int fmt) {
    if (fmt == LLM4D_CUDA_BF16) return __bfloat162float(__float2bfloat16_rn(v));
    if (fmt == LLM4D_CUDA_F16) return __half2float(__float2half_rn(v));
    return v;
}

/* element i of dst, stored in format fmt */
static __device__ __forceinline__ void store_fmt(void *dst, int fmt, size_t i, float v) {
    if (fmt == LLM4D_CUDA_BF16) static_cast<__nv_bfloat16 *>(dst)[i] = __float2bfloat16_rn(v);
    else if (fmt == LLM4D_CUDA_F16) static_cast<__half *>(dst)[i] = __float2half_rn(v);
    else static_cast<float *>(dst)[i] = v;
}

/* GELU, tanh approximation, in the CPU backend's overflow-free form (cpu_impl.h vgelu): with u = K (x + 0.044715
 * x^3), e = exp(-2|u|) and q = 1/(1+e), sigmoid(2u) is q for u >= 0 and e q below, and its derivative e q^2. */
#define LLM4D_K_GELU_K 0.7978845608028654f
static __device__ __forceinline__ float gelu(float x) {
    const float u = LLM4D_K_GELU_K * (x + 0.044715f * x * x * x), e = expf(-2.0f * fabsf(u)), q = 1.0f / (1.0f + e);
    return x * (u >= 0.0f ? q : e * q);
}

static __device__ __forceinline__ float gelu_grad(float x) {
    const float u = LLM4D_K_GELU_K * (x + 0.044715f * x * x * x), e = expf(-2.0f * fabsf(u)), q = 1.0f / (1.0f + e);
    const float s = u >= 0.0f ? q : e * q;
    return s + 2.0f * x * e * q * q * LLM4D_K_GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
}

} // namespace llm4d_k

#endif
