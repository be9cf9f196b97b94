// k_norm.cu — LayerNorm on the GPU (backend.h layernorm_forward, layernorm_backward), with the CPU backend's formulas
// (cpu_elem.c): a warp per row for the row statistics and the input gradient, and the weight and bias gradients as
// column sums over fixed chunks of LLM4D_CUDA_COL_ROWS rows (then the chunks in order, in double: k_elem.cu).
//
// Typed: the input, the output and the gradients dout and dinp are each fp32, bf16 or fp16 (k_common.cuh's TY); the
// statistics mean and rstd, the weights and their gradients are fp32. The model's O2 LayerNorm reads the 16-bit
// residual stream and writes the 16-bit operand of the GEMM after it; its backward reads an fp32 dout (the input
// gradient of that GEMM) and adds into the residual stream's gradient (dinp: old value plus the part, rounded once).
#include "backend/cuda/k_common.cuh"

using namespace llm4d_k;

namespace {

constexpr int ROWS_PER_BLOCK = kThreads / 32; // a warp per row

template <bool TY>
__global__ void layernorm_forward_k(llm4d_tensor out, float *mean, float *rstd, llm4d_ctensor inp, const float *w,
                                    const float *b, int N, int C) {
    const int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (row >= N) return;
    const size_t x0 = (size_t)row * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32) s += ldx<TY>(inp.p, inp.t, x0 + c);
    const float m = warp_sum(s) / C;
    float v = 0.0f;
    for (int c = lane; c < C; c += 32) {
        const float x = ldx<TY>(inp.p, inp.t, x0 + c);
        v += (x - m) * (x - m);
    }
    const float r = 1.0f / sqrtf(warp_sum(v) / C + 1e-5f);
    for (int c = lane; c < C; c += 32) {
        const float x = ldx<TY>(inp.p, inp.t, x0 + c);
        stx<TY>(out.p, out.t, x0 + c, (x - m) * r * w[c] + b[c]);
    }
    if (lane == 0) {
        if (mean) mean[row] = m;
        if (rstd) rstd[row] = r;
    }
}

// dinp += rstd (dy w - mean(dy w) - xhat mean(dy w xhat)), a warp per row
template <bool TY>
__global__ void layernorm_backward_dx_k(llm4d_tensor dinp, llm4d_ctensor dout, llm4d_ctensor inp, const float *w,
                                        const float *mean, const float *rstd, int N, int C) {
    const int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (row >= N) return;
    const size_t x0 = (size_t)row * C;
    const float m = mean[row], r = rstd[row];
    float a = 0.0f, bs = 0.0f;
    for (int c = lane; c < C; c += 32) {
        const float dxhat = ldx<TY>(dout.p, dout.t, x0 + c) * w[c];
        a += dxhat;
        bs += dxhat * (ldx<TY>(inp.p, inp.t, x0 + c) - m) * r;
    }
    a = warp_sum(a) / C;
    bs = warp_sum(bs) / C;
    for (int c = lane; c < C; c += 32) {
        const float dy = ldx<TY>(dout.p, dout.t, x0 + c), x = ldx<TY>(inp.p, inp.t, x0 + c);
        stx<TY>(dinp.p, dinp.t, x0 + c, ldx<TY>(dinp.p, dinp.t, x0 + c) + r * (dy * w[c] - a - (x - m) * r * bs));
    }
}

// The two LayerNorm row kernels four columns a lane (C % 4 == 0, rows aligned: al4): the same formulas, each lane's
// partial sums taken over its groups of four in order (so other bits than the scalar forms, the same every run).
template <bool TY>
__global__ void layernorm_forward4_k(llm4d_tensor out, float *mean, float *rstd, llm4d_ctensor inp, const float *w,
                                     const float *b, int N, int C) {
    const int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x & 31, C4 = C / 4;
    if (row >= N) return;
    const size_t x0 = (size_t)row * C4; // in groups of four
    const float4 *w4 = reinterpret_cast<const float4 *>(w), *b4 = reinterpret_cast<const float4 *>(b);
    float s = 0.0f;
    for (int c = lane; c < C4; c += 32) {
        const float4 v = ld4x<TY>(inp.p, inp.t, x0 + c);
        s += v.x + v.y + v.z + v.w;
    }
    const float m = warp_sum(s) / C;
    float v = 0.0f;
    for (int c = lane; c < C4; c += 32) {
        const float4 u = ld4x<TY>(inp.p, inp.t, x0 + c);
        v += (u.x - m) * (u.x - m) + (u.y - m) * (u.y - m) + (u.z - m) * (u.z - m) + (u.w - m) * (u.w - m);
    }
    const float r = 1.0f / sqrtf(warp_sum(v) / C + 1e-5f);
    for (int c = lane; c < C4; c += 32) {
        const float4 u = ld4x<TY>(inp.p, inp.t, x0 + c), ww = w4[c], bb = b4[c];
        st4x<TY>(out.p, out.t, x0 + c,
                 make_float4((u.x - m) * r * ww.x + bb.x, (u.y - m) * r * ww.y + bb.y, (u.z - m) * r * ww.z + bb.z,
                             (u.w - m) * r * ww.w + bb.w));
    }
    if (lane == 0) {
        if (mean) mean[row] = m;
        if (rstd) rstd[row] = r;
    }
}

template <bool TY>
__global__ void layernorm_backward_dx4_k(llm4d_tensor dinp, llm4d_ctensor dout, llm4d_ctensor inp, const float *w,
                                         const float *mean, const float *rstd, int N, int C) {
    const int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x & 31, C4 = C / 4;
    if (row >= N) return;
    const size_t x0 = (size_t)row * C4;
    const float4 *w4 = reinterpret_cast<const float4 *>(w);
    const float m = mean[row], r = rstd[row];
    float a = 0.0f, bs = 0.0f;
    for (int c = lane; c < C4; c += 32) {
        const float4 g = ld4x<TY>(dout.p, dout.t, x0 + c), ww = w4[c], u = ld4x<TY>(inp.p, inp.t, x0 + c);
        const float d0 = g.x * ww.x, d1 = g.y * ww.y, d2 = g.z * ww.z, d3 = g.w * ww.w;
        a += d0 + d1 + d2 + d3;
        bs += d0 * (u.x - m) * r + d1 * (u.y - m) * r + d2 * (u.z - m) * r + d3 * (u.w - m) * r;
    }
    a = warp_sum(a) / C;
    bs = warp_sum(bs) / C;
    for (int c = lane; c < C4; c += 32) {
        const float4 g = ld4x<TY>(dout.p, dout.t, x0 + c), ww = w4[c], u = ld4x<TY>(inp.p, inp.t, x0 + c);
        float4 o = ld4x<TY>(dinp.p, dinp.t, x0 + c);
        o.x += r * (g.x * ww.x - a - (u.x - m) * r * bs);
        o.y += r * (g.y * ww.y - a - (u.y - m) * r * bs);
        o.z += r * (g.z * ww.z - a - (u.z - m) * r * bs);
        o.w += r * (g.w * ww.w - a - (u.w - m) * r * bs);
        st4x<TY>(dinp.p, dinp.t, x0 + c, o);
    }
}

// the chunks' dw and db sums: part[k, c] and part[nchunks + k, c]
template <bool TY>
__global__ void layernorm_backward_part_k(float *part, llm4d_ctensor dout, llm4d_ctensor inp, const float *mean,
                                          const float *rstd, int N, int C) {
    const int c = blockIdx.y * kThreads + threadIdx.x;
    if (c >= C) return;
    const int r0 = blockIdx.x * LLM4D_CUDA_COL_ROWS, r1 = min(r0 + LLM4D_CUDA_COL_ROWS, N);
    float aw = 0.0f, ab = 0.0f;
    for (int r = r0; r < r1; r++) {
        const size_t i = (size_t)r * C + c;
        const float g = ldx<TY>(dout.p, dout.t, i);
        aw += g * (ldx<TY>(inp.p, inp.t, i) - mean[r]) * rstd[r];
        ab += g;
    }
    part[(size_t)blockIdx.x * C + c] = aw;
    part[((size_t)gridDim.x + blockIdx.x) * C + c] = ab;
}

static inline bool al16(const void *p) { return (uintptr_t)p % 16 == 0; }

template <bool TY>
void forward(cudaStream_t s, llm4d_tensor out, float *mean, float *rstd, llm4d_ctensor inp, const float *w,
             const float *b, int N, int C) {
    const unsigned g = (N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
    if (C % 4 == 0 && al4(out.p, out.t) && al4(inp.p, inp.t) && al16(w) && al16(b))
        layernorm_forward4_k<TY><<<g, kThreads, 0, s>>>(out, mean, rstd, inp, w, b, N, C);
    else
        layernorm_forward_k<TY><<<g, kThreads, 0, s>>>(out, mean, rstd, inp, w, b, N, C);
}

template <bool TY>
void backward(cudaStream_t s, llm4d_tensor dinp, float *part, llm4d_ctensor dout, llm4d_ctensor inp, const float *w,
              const float *mean, const float *rstd, int N, int C) {
    const unsigned g = (N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
    if (C % 4 == 0 && al4(dinp.p, dinp.t) && al4(dout.p, dout.t) && al4(inp.p, inp.t) && al16(w))
        layernorm_backward_dx4_k<TY><<<g, kThreads, 0, s>>>(dinp, dout, inp, w, mean, rstd, N, C);
    else
        layernorm_backward_dx_k<TY><<<g, kThreads, 0, s>>>(dinp, dout, inp, w, mean, rstd, N, C);
    const dim3 grid((N + LLM4D_CUDA_COL_ROWS - 1) / LLM4D_CUDA_COL_ROWS, (C + kThreads - 1) / kThreads);
    layernorm_backward_part_k<TY><<<grid, kThreads, 0, s>>>(part, dout, inp, mean, rstd, N, C);
}

} // namespace

extern "C" {

void llm4d_k_layernorm_forward(cudaStream_t s, llm4d_tensor out, float *mean, float *rstd, llm4d_ctensor inp,
                               const float *w, const float *b, int N, int C) {
    if (N <= 0) return;
    if (out.t != LLM4D_F32 || inp.t != LLM4D_F32) forward<true>(s, out, mean, rstd, inp, w, b, N, C);
    else forward<false>(s, out, mean, rstd, inp, w, b, N, C);
}

void llm4d_k_layernorm_backward(cudaStream_t s, llm4d_tensor dinp, float *part, llm4d_ctensor dout, llm4d_ctensor inp,
                                const float *w, const float *mean, const float *rstd, int N, int C) {
    if (N <= 0) return;
    if (dinp.t != LLM4D_F32 || dout.t != LLM4D_F32 || inp.t != LLM4D_F32)
        backward<true>(s, dinp, part, dout, inp, w, mean, rstd, N, C);
    else
        backward<false>(s, dinp, part, dout, inp, w, mean, rstd, N, C);
}

} // extern "C"
