/* k_common.cuh — device helpers the CUDA backend's kernel files share: launch sizes, warp and block reductions in a
 * fixed order, typed loads and stores (tensor.h's fp32, bf16 and fp16), and GELU written as the CPU backend writes it.
 *
 * Fixed order: every reduction here combines its terms in an order set by constants (the shuffle pattern, the
 * tree over a block of a fixed size), never by timing or by how many blocks the device runs at once, so a kernel's
 * bits are the same on every run and every GPU.
 *
 * Typed tensors: a kernel that reads or writes activations is a template on `bool TY`. TY false is its fp32 form:
 * plain float loads and stores around the arithmetic it always had, so an all-fp32 call keeps its bits; TY true reads
 * each typed argument as fp32 (bf16: its 16 bits shifted up; fp16: IEEE half to float) and rounds each typed result
 * once, when it stores it (bf16 and fp16 to nearest even, a NaN staying a quiet NaN). The type is a kernel argument,
 * the same for every thread of a launch, so its switch is a uniform branch, not a divergent one. */
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

/* v rounded to a type and back (the precision a GEMM whose operands are stored in that type sees). */
static __device__ __forceinline__ float round_fmt(float v, int fmt) {
    if (fmt == LLM4D_BF16) return __bfloat162float(__float2bfloat16_rn(v));
    if (fmt == LLM4D_F16) return __half2float(__float2half_rn(v));
    return v;
}

/* element i of a tensor of type t, as fp32 */
static __device__ __forceinline__ float ld_t(const void *p, int t, size_t i) {
    if (t == LLM4D_BF16) return __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[i]);
    if (t == LLM4D_F16) return __half2float(static_cast<const __half *>(p)[i]);
    return static_cast<const float *>(p)[i];
}

/* element i of a tensor of type t set to v, rounded to t */
static __device__ __forceinline__ void st_t(void *p, int t, size_t i, float v) {
    if (t == LLM4D_BF16) static_cast<__nv_bfloat16 *>(p)[i] = __float2bfloat16_rn(v);
    else if (t == LLM4D_F16) static_cast<__half *>(p)[i] = __float2half_rn(v);
    else static_cast<float *>(p)[i] = v;
}

/* elements 4 i .. 4 i + 3 of a tensor of type t: one 16-byte access in fp32, one 8-byte access in 16 bits (the
 * launcher checked the alignment: al4) */
static __device__ __forceinline__ float4 ld4_t(const void *p, int t, size_t i) {
    if (t == LLM4D_F32) return static_cast<const float4 *>(p)[i];
    const uint2 w = static_cast<const uint2 *>(p)[i];
    if (t == LLM4D_BF16) {
        const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&w.x));
        const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&w.y));
        return make_float4(lo.x, lo.y, hi.x, hi.y);
    }
    const float2 lo = __half22float2(*reinterpret_cast<const __half2 *>(&w.x));
    const float2 hi = __half22float2(*reinterpret_cast<const __half2 *>(&w.y));
    return make_float4(lo.x, lo.y, hi.x, hi.y);
}

static __device__ __forceinline__ void st4_t(void *p, int t, size_t i, float4 v) {
    if (t == LLM4D_F32) {
        static_cast<float4 *>(p)[i] = v;
        return;
    }
    uint2 w;
    if (t == LLM4D_BF16) {
        const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
        w.x = *reinterpret_cast<const uint32_t *>(&lo);
        w.y = *reinterpret_cast<const uint32_t *>(&hi);
    } else {
        const __half2 lo = __floats2half2_rn(v.x, v.y), hi = __floats2half2_rn(v.z, v.w);
        w.x = *reinterpret_cast<const uint32_t *>(&lo);
        w.y = *reinterpret_cast<const uint32_t *>(&hi);
    }
    static_cast<uint2 *>(p)[i] = w;
}

/* The same under a kernel's TY: fp32 pointers as they are (TY false), the type's switch (TY true). */
template <bool TY>
static __device__ __forceinline__ float ldx(const void *p, int t, size_t i) {
    if constexpr (TY) return ld_t(p, t, i);
    else return static_cast<const float *>(p)[i];
}
template <bool TY>
static __device__ __forceinline__ void stx(void *p, int t, size_t i, float v) {
    if constexpr (TY) st_t(p, t, i, v);
    else static_cast<float *>(p)[i] = v;
}
template <bool TY>
static __device__ __forceinline__ float4 ld4x(const void *p, int t, size_t i) {
    if constexpr (TY) return ld4_t(p, t, i);
    else return static_cast<const float4 *>(p)[i];
}
template <bool TY>
static __device__ __forceinline__ void st4x(void *p, int t, size_t i, float4 v) {
    if constexpr (TY) st4_t(p, t, i, v);
    else static_cast<float4 *>(p)[i] = v;
}

/* Host side: bytes of an element of type t, and whether p may be accessed four elements at a time (ld4_t: 16 bytes
 * in fp32, 8 in 16 bits; NULL, an argument not given, never stands in the way). */
static inline size_t esize(int t) { return t == LLM4D_F32 ? 4 : 2; }
static inline bool al4(const void *p, int t) { return (uintptr_t)p % (4 * esize(t)) == 0; }

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
