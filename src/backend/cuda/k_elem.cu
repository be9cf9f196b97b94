// k_elem.cu — the CUDA backend's element-wise and column kernels: embeddings, bias, column sums, conversions between
// types (GEMM operands, the convert method, a GEMM's fp32 result stored in a 16-bit tensor), add and scale. LayerNorm
// is in k_norm.cu, GELU and dropout in k_act.cu.
//
// Each follows the CPU backend's formula (cpu_elem.c) and, where a result gathers several terms, a fixed order:
// - the token-embedding gradient: block k owns the vocabulary rows r with r % nblocks == k and adds the output-
//   gradient rows of its tokens in token order (found with a ballot per tile of tokens), so every row of dw is summed
//   by one thread per column in the CPU's order, without atomics: the bits equal the CPU backend's;
// - the position-embedding gradient: a thread per (position, column) adds its rows in token order (the CPU's order);
// - column sums (bias and LayerNorm weight gradients): partial sums over fixed chunks of LLM4D_CUDA_COL_ROWS rows,
//   then the chunks in order, in double; their source may be a 16-bit gradient, read as it is (k_common.cuh's TY).
// The embeddings, their gradients and the bias of a row-parallel layer are fp32 (backend.h). The grid-stride loops
// make every kernel correct for any size with the grid llm4d_k::grid_for gives.
#include "backend/cuda/k_common.cuh"
#include "backend/cuda/kidx.h"

using namespace llm4d_k;

namespace {

__global__ void embedding_forward_k(float *out, const int32_t *tokens, const float *w, int row0, int nrows, int N,
                                    int C) {
    const size_t total = (size_t)N * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const int n = (int)(i / C), c = (int)(i % C), r = tokens[n] - row0;
        if (r >= 0 && r < nrows) out[i] += w[(size_t)r * C + c];
    }
}

constexpr int EB = 256; // tokens per tile of the embedding gradient

__global__ void __launch_bounds__(EB) embedding_backward_k(float *dw, const float *dout, const int32_t *tokens,
                                                           int row0, int nrows, int N, int C) {
    __shared__ int list[EB];
    __shared__ int warp_first[EB / 32];
    __shared__ int count;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nb = gridDim.x;
    for (int n0 = 0; n0 < N; n0 += EB) {
        const int n = n0 + threadIdx.x;
        const int r = n < N ? tokens[n] - row0 : -1;
        const bool mine = r >= 0 && r < nrows && r % nb == (int)blockIdx.x;
        const unsigned bal = __ballot_sync(kFull, mine);
        if (lane == 0) warp_first[warp] = __popc(bal);
        __syncthreads();
        if (threadIdx.x == 0) { // the tile's matches in token order: warps in order, lanes in order
            int s = 0;
            for (int k = 0; k < EB / 32; k++) {
                const int c = warp_first[k];
                warp_first[k] = s;
                s += c;
            }
            count = s;
        }
        __syncthreads();
        if (mine) list[warp_first[warp] + __popc(bal & ((1u << lane) - 1u))] = n;
        __syncthreads();
        for (int k = 0; k < count; k++) {
            const int nn = list[k], rr = tokens[nn] - row0;
            for (int c = threadIdx.x; c < C; c += EB) dw[(size_t)rr * C + c] += dout[(size_t)nn * C + c];
        }
        __syncthreads();
    }
}

__global__ void position_forward_k(float *out, const float *wpe, int N, int C, int T, int64_t tok0) {
    const size_t total = (size_t)N * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const int64_t n = (int64_t)(i / C);
        const int c = (int)(i % C);
        out[i] += wpe[(size_t)((tok0 + n) % T) * C + c];
    }
}

__global__ void position_backward_k(float *dwpe, const float *dout, int N, int C, int T, int64_t tok0) {
    const size_t total = (size_t)T * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        const int t = (int)(i / C), c = (int)(i % C);
        int64_t n = llm4d_kidx_first_row_at(tok0, T, t);
        if (n >= N) continue;
        float v = dwpe[i];
        for (; n < N; n += T) v += dout[(size_t)n * C + c];
        dwpe[i] = v;
    }
}

__global__ void bias_forward_k(float *out, const float *b, int N, int C) {
    const size_t total = (size_t)N * C;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x)
        out[i] += b[i % C];
}

// grid (chunks of COL_ROWS rows, column blocks of kThreads): one thread per column of a chunk
template <bool TY>
__global__ void colsum_partial_k(float *part, llm4d_tensor dst, llm4d_ctensor src, int N, int C) {
    const int c = blockIdx.y * kThreads + threadIdx.x;
    if (c >= C) return;
    const int r0 = blockIdx.x * LLM4D_CUDA_COL_ROWS, r1 = min(r0 + LLM4D_CUDA_COL_ROWS, N);
    float acc = 0.0f;
    for (int r = r0; r < r1; r++) {
        const size_t i = (size_t)r * C + c;
        const float v = ldx<TY>(src.p, src.t, i);
        if (dst.p) st_t(dst.p, dst.t, i, v);
        acc += v;
    }
    part[(size_t)blockIdx.x * C + c] = acc;
}

__global__ void colsum_final_k(float *db, const float *part, int nchunks, int C) {
    const int c = blockIdx.x * kThreads + threadIdx.x;
    if (c >= C) return;
    double acc = 0.0;
    for (int k = 0; k < nchunks; k++) acc += part[(size_t)k * C + c];
    db[c] += (float)acc;
}

__global__ void add_k(float *dst, const float *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] += src[i];
}

__global__ void scale_k(float *x, float f, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] *= f;
}

// add's four-wide form (16-byte loads and stores), taken when both pointers are 16-byte aligned and the length a
// multiple of 4: it computes exactly what its scalar form computes.
static inline bool al16(const void *p) { return (uintptr_t)p % 16 == 0; }

__global__ void add4_k(float4 *dst, const float4 *src, size_t n4) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4; i += (size_t)gridDim.x * blockDim.x) {
        float4 a = dst[i];
        const float4 b = src[i];
        a.x += b.x, a.y += b.y, a.z += b.z, a.w += b.w;
        dst[i] = a;
    }
}

// dst = act(src): src any type (TY false: fp32), dst any type
template <bool TY>
__global__ void convert_k(llm4d_tensor dst, llm4d_ctensor src, size_t n, int act) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float v = act == LLM4D_ACT_GELU ? gelu(ldx<TY>(src.p, src.t, i)) : ldx<TY>(src.p, src.t, i);
        st_t(dst.p, dst.t, i, v);
    }
}

// The same, four elements a thread: one 16-byte load (8 bytes from 16 bits), one 8-byte (16-bit types) or 16-byte
// store. The operand conversions move a step's activations and gradients once more, so they run at the memory's
// rate or not at all. The destination's type FMT is the template's, so each form stores in one way.
template <bool TY, int FMT, int ACT>
__global__ void convert4_k(void *dst, llm4d_ctensor src, size_t n4) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4; i += (size_t)gridDim.x * blockDim.x) {
        float4 v = ld4x<TY>(src.p, src.t, i);
        if (ACT == LLM4D_ACT_GELU) v = make_float4(gelu(v.x), gelu(v.y), gelu(v.z), gelu(v.w));
        st4_t(dst, FMT, i, v);
    }
}

template <bool TY, int FMT>
void convert4(cudaStream_t s, void *dst, llm4d_ctensor src, size_t n4, int act) {
    if (act == LLM4D_ACT_GELU) convert4_k<TY, FMT, LLM4D_ACT_GELU><<<grid_for(n4), kThreads, 0, s>>>(dst, src, n4);
    else convert4_k<TY, FMT, LLM4D_ACT_NONE><<<grid_for(n4), kThreads, 0, s>>>(dst, src, n4);
}

template <bool TY>
void convert4_to(cudaStream_t s, llm4d_tensor dst, llm4d_ctensor src, size_t n4, int act) {
    if (dst.t == LLM4D_BF16) convert4<TY, LLM4D_BF16>(s, dst.p, src, n4, act);
    else if (dst.t == LLM4D_F16) convert4<TY, LLM4D_F16>(s, dst.p, src, n4, act);
    else convert4<TY, LLM4D_F32>(s, dst.p, src, n4, act);
}

// dst = src + b, or dst + src: a GEMM's fp32 result into a tensor of another type (W = 4: four columns a thread,
// C % 4 == 0 and every pointer aligned)
template <int W>
__global__ void store_rows_k(llm4d_tensor dst, const float *src, const float *b, int N, int C, int add) {
    const size_t groups = (size_t)N * C / W;
    for (size_t g = blockIdx.x * (size_t)blockDim.x + threadIdx.x; g < groups; g += (size_t)gridDim.x * blockDim.x) {
        if constexpr (W == 4) {
            float4 v = reinterpret_cast<const float4 *>(src)[g];
            if (b) {
                const float4 bb = reinterpret_cast<const float4 *>(b)[g % (size_t)(C / 4)];
                v.x += bb.x, v.y += bb.y, v.z += bb.z, v.w += bb.w;
            }
            if (add) {
                const float4 o = ld4_t(dst.p, dst.t, g);
                v.x = o.x + v.x, v.y = o.y + v.y, v.z = o.z + v.z, v.w = o.w + v.w;
            }
            st4_t(dst.p, dst.t, g, v);
        } else {
            float v = src[g];
            if (b) v += b[g % (size_t)C];
            if (add) v = ld_t(dst.p, dst.t, g) + v;
            st_t(dst.p, dst.t, g, v);
        }
    }
}

} // namespace

extern "C" {

void llm4d_k_embedding_forward(cudaStream_t s, float *out, const int32_t *tokens, const float *w, int row0, int nrows,
                               int N, int C) {
    if (N <= 0 || C <= 0) return;
    embedding_forward_k<<<grid_for((size_t)N * C), kThreads, 0, s>>>(out, tokens, w, row0, nrows, N, C);
}

void llm4d_k_embedding_backward(cudaStream_t s, float *dw, const float *dout, const int32_t *tokens, int row0,
                                int nrows, int N, int C) {
    if (N <= 0 || C <= 0 || nrows <= 0) return;
    const int nb = nrows < 1024 ? nrows : 1024;
    embedding_backward_k<<<nb, EB, 0, s>>>(dw, dout, tokens, row0, nrows, N, C);
}

void llm4d_k_position_forward(cudaStream_t s, float *out, const float *wpe, int N, int C, int T, int64_t tok0) {
    if (N <= 0 || C <= 0) return;
    position_forward_k<<<grid_for((size_t)N * C), kThreads, 0, s>>>(out, wpe, N, C, T, tok0);
}

void llm4d_k_position_backward(cudaStream_t s, float *dwpe, const float *dout, int N, int C, int T, int64_t tok0) {
    if (N <= 0 || C <= 0) return;
    position_backward_k<<<grid_for((size_t)T * C), kThreads, 0, s>>>(dwpe, dout, N, C, T, tok0);
}

void llm4d_k_bias_forward(cudaStream_t s, float *out, const float *b, int N, int C) {
    if (N <= 0 || C <= 0) return;
    bias_forward_k<<<grid_for((size_t)N * C), kThreads, 0, s>>>(out, b, N, C);
}

void llm4d_k_colsum_partial(cudaStream_t s, float *part, llm4d_tensor dst, llm4d_ctensor src, int N, int C) {
    if (N <= 0 || C <= 0) return;
    const dim3 grid((N + LLM4D_CUDA_COL_ROWS - 1) / LLM4D_CUDA_COL_ROWS, (C + kThreads - 1) / kThreads);
    if (src.t != LLM4D_F32) colsum_partial_k<true><<<grid, kThreads, 0, s>>>(part, dst, src, N, C);
    else colsum_partial_k<false><<<grid, kThreads, 0, s>>>(part, dst, src, N, C);
}

void llm4d_k_colsum_final(cudaStream_t s, float *db, const float *part, int nchunks, int C) {
    if (C <= 0 || nchunks <= 0) return;
    colsum_final_k<<<(C + kThreads - 1) / kThreads, kThreads, 0, s>>>(db, part, nchunks, C);
}

void llm4d_k_add(cudaStream_t s, float *dst, const float *src, size_t n) {
    if (!n) return;
    if (n % 4 == 0 && al16(dst) && al16(src))
        add4_k<<<grid_for(n / 4), kThreads, 0, s>>>(reinterpret_cast<float4 *>(dst),
                                                     reinterpret_cast<const float4 *>(src), n / 4);
    else
        add_k<<<grid_for(n), kThreads, 0, s>>>(dst, src, n);
}

void llm4d_k_scale(cudaStream_t s, float *x, float f, size_t n) {
    if (n) scale_k<<<grid_for(n), kThreads, 0, s>>>(x, f, n);
}

void llm4d_k_convert(cudaStream_t s, llm4d_tensor dst, llm4d_ctensor src, size_t n, llm4d_act act) {
    if (!n) return;
    if (dst.t == src.t && act == LLM4D_ACT_NONE) { /* a copy (a failure shows at the caller's cudaGetLastError) */
        if (dst.p != src.p) (void)cudaMemcpyAsync(dst.p, src.p, n * esize(dst.t), cudaMemcpyDefault, s);
        return;
    }
    const bool ty = src.t != LLM4D_F32;
    const size_t n4 = al4(src.p, src.t) && al4(dst.p, dst.t) ? n / 4 : 0;
    if (n4) {
        if (ty) convert4_to<true>(s, dst, src, n4, (int)act);
        else convert4_to<false>(s, dst, src, n4, (int)act);
    }
    const size_t done = 4 * n4;
    if (done == n) return;
    const llm4d_tensor d{static_cast<char *>(dst.p) + done * esize(dst.t), dst.t};
    const llm4d_ctensor x{static_cast<const char *>(src.p) + done * esize(src.t), src.t};
    if (ty) convert_k<true><<<grid_for(n - done), kThreads, 0, s>>>(d, x, n - done, (int)act);
    else convert_k<false><<<grid_for(n - done), kThreads, 0, s>>>(d, x, n - done, (int)act);
}

void llm4d_k_store_rows(cudaStream_t s, llm4d_tensor dst, const float *src, const float *b, int N, int C, int add) {
    const size_t n = (size_t)N * C;
    if (!n) return;
    if (C % 4 == 0 && al4(dst.p, dst.t) && al16(src) && al16(b))
        store_rows_k<4><<<grid_for(n / 4), kThreads, 0, s>>>(dst, src, b, N, C, add);
    else
        store_rows_k<1><<<grid_for(n), kThreads, 0, s>>>(dst, src, b, N, C, add);
}

} // extern "C"
