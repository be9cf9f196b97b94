// k_elem.cu — the CUDA backend's element-wise and row kernels: embeddings, bias, column sums, LayerNorm, GELU,
// dropout, conversions of GEMM operands.
//
// Each follows the CPU backend's formula (cpu_elem.c) and, where a result gathers several terms, a fixed order:
// - the token-embedding gradient: block k owns the vocabulary rows r with r % nblocks == k and adds the output-
//   gradient rows of its tokens in token order (found with a ballot per tile of tokens), so every row of dw is summed
//   by one thread per column in the CPU's order, without atomics: the bits equal the CPU backend's;
// - the position-embedding gradient: a thread per (position, column) adds its rows in token order (the CPU's order);
// - column sums (bias and LayerNorm weight gradients): partial sums over fixed chunks of LLM4D_CUDA_COL_ROWS rows,
//   then the chunks in order, in double;
// - dropout draws the word of core/rng.h's Philox at each element's global position (kidx.h): the CPU's masks.
// The grid-stride loops make every kernel correct for any size with the grid llm4d_k::grid_for gives.
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
__global__ void colsum_partial_k(float *part, void *dst, int fmt, const float *src, int N, int C) {
    const int c = blockIdx.y * kThreads + threadIdx.x;
    if (c >= C) return;
    const int r0 = blockIdx.x * LLM4D_CUDA_COL_ROWS, r1 = min(r0 + LLM4D_CUDA_COL_ROWS, N);
    float acc = 0.0f;
    for (int r = r0; r < r1; r++) {
        const size_t i = (size_t)r * C + c;
        const float v = src[i];
        if (dst) store_fmt(dst, fmt, i, v);
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

constexpr int ROWS_PER_BLOCK = kThreads / 32; // LayerNorm: a warp per row

__global__ void layernorm_forward_k(float *out, float *mean, float *rstd, const float *inp, const float *w,
                                    const float *b, int N, int C) {
    const int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (row >= N) return;
    const float *x = inp + (size_t)row * C;
    float s = 0.0f;
    for (int c = lane; c < C; c += 32) s += x[c];
    const float m = warp_sum(s) / C;
    float v = 0.0f;
    for (int c = lane; c < C; c += 32) v += (x[c] - m) * (x[c] - m);
    const float r = 1.0f / sqrtf(warp_sum(v) / C + 1e-5f);
    float *o = out + (size_t)row * C;
    for (int c = lane; c < C; c += 32) o[c] = (x[c] - m) * r * w[c] + b[c];
    if (lane == 0) {
        if (mean) mean[row] = m;
        if (rstd) rstd[row] = r;
    }
}

// dinp += rstd (dy w - mean(dy w) - xhat mean(dy w xhat)), a warp per row
__global__ void layernorm_backward_dx_k(float *dinp, const float *dout, const float *inp, const float *w,
                                        const float *mean, const float *rstd, int N, int C) {
    const int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (row >= N) return;
    const float *x = inp + (size_t)row * C, *dy = dout + (size_t)row * C;
    const float m = mean[row], r = rstd[row];
    float a = 0.0f, bs = 0.0f;
    for (int c = lane; c < C; c += 32) {
        const float dxhat = dy[c] * w[c];
        a += dxhat;
        bs += dxhat * (x[c] - m) * r;
    }
    a = warp_sum(a) / C;
    bs = warp_sum(bs) / C;
    float *dx = dinp + (size_t)row * C;
    for (int c = lane; c < C; c += 32) dx[c] += r * (dy[c] * w[c] - a - (x[c] - m) * r * bs);
}

// The two LayerNorm row kernels four columns a lane (C % 4 == 0, rows 16-byte aligned): the same formulas, each
// lane's partial sums taken over its float4s in order (so other bits than the scalar forms, the same every run).
__global__ void layernorm_forward4_k(float *out, float *mean, float *rstd, const float *inp, const float *w,
                                     const float *b, int N, int C) {
    const int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x & 31, C4 = C / 4;
    if (row >= N) return;
    const float4 *x = reinterpret_cast<const float4 *>(inp + (size_t)row * C);
    const float4 *w4 = reinterpret_cast<const float4 *>(w), *b4 = reinterpret_cast<const float4 *>(b);
    float s = 0.0f;
    for (int c = lane; c < C4; c += 32) {
        const float4 v = x[c];
        s += v.x + v.y + v.z + v.w;
    }
    const float m = warp_sum(s) / C;
    float v = 0.0f;
    for (int c = lane; c < C4; c += 32) {
        const float4 u = x[c];
        v += (u.x - m) * (u.x - m) + (u.y - m) * (u.y - m) + (u.z - m) * (u.z - m) + (u.w - m) * (u.w - m);
    }
    const float r = 1.0f / sqrtf(warp_sum(v) / C + 1e-5f);
    float4 *o = reinterpret_cast<float4 *>(out + (size_t)row * C);
    for (int c = lane; c < C4; c += 32) {
        const float4 u = x[c], ww = w4[c], bb = b4[c];
        o[c] = make_float4((u.x - m) * r * ww.x + bb.x, (u.y - m) * r * ww.y + bb.y, (u.z - m) * r * ww.z + bb.z,
                           (u.w - m) * r * ww.w + bb.w);
    }
    if (lane == 0) {
        if (mean) mean[row] = m;
        if (rstd) rstd[row] = r;
    }
}

__global__ void layernorm_backward_dx4_k(float *dinp, const float *dout, const float *inp, const float *w,
                                         const float *mean, const float *rstd, int N, int C) {
    const int row = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x & 31, C4 = C / 4;
    if (row >= N) return;
    const float4 *x = reinterpret_cast<const float4 *>(inp + (size_t)row * C);
    const float4 *dy = reinterpret_cast<const float4 *>(dout + (size_t)row * C);
    const float4 *w4 = reinterpret_cast<const float4 *>(w);
    const float m = mean[row], r = rstd[row];
    float a = 0.0f, bs = 0.0f;
    for (int c = lane; c < C4; c += 32) {
        const float4 g = dy[c], ww = w4[c], u = x[c];
        const float d0 = g.x * ww.x, d1 = g.y * ww.y, d2 = g.z * ww.z, d3 = g.w * ww.w;
        a += d0 + d1 + d2 + d3;
        bs += d0 * (u.x - m) * r + d1 * (u.y - m) * r + d2 * (u.z - m) * r + d3 * (u.w - m) * r;
    }
    a = warp_sum(a) / C;
    bs = warp_sum(bs) / C;
    float4 *dx = reinterpret_cast<float4 *>(dinp + (size_t)row * C);
    for (int c = lane; c < C4; c += 32) {
        const float4 g = dy[c], ww = w4[c], u = x[c];
        float4 o = dx[c];
        o.x += r * (g.x * ww.x - a - (u.x - m) * r * bs);
        o.y += r * (g.y * ww.y - a - (u.y - m) * r * bs);
        o.z += r * (g.z * ww.z - a - (u.z - m) * r * bs);
        o.w += r * (g.w * ww.w - a - (u.w - m) * r * bs);
        dx[c] = o;
    }
}

// the chunks' dw and db sums: part[k, c] and part[nchunks + k, c]
__global__ void layernorm_backward_part_k(float *part, const float *dout, const float *inp, const float *mean,
                                          const float *rstd, int N, int C) {
    const int c = blockIdx.y * kThreads + threadIdx.x;
    if (c >= C) return;
    const int r0 = blockIdx.x * LLM4D_CUDA_COL_ROWS, r1 = min(r0 + LLM4D_CUDA_COL_ROWS, N);
    float aw = 0.0f, ab = 0.0f;
    for (int r = r0; r < r1; r++) {
        const size_t i = (size_t)r * C + c;
        aw += dout[i] * (inp[i] - mean[r]) * rstd[r];
        ab += dout[i];
    }
    part[(size_t)blockIdx.x * C + c] = aw;
    part[((size_t)gridDim.x + blockIdx.x) * C + c] = ab;
}

__global__ void gelu_forward_k(float *out, const float *inp, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = gelu(inp[i]);
}

__global__ void gelu_backward_k(float *dinp, const float *inp, const float *dout, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dinp[i] = gelu_grad(inp[i]) * dout[i];
}

// Four consecutive elements per thread: with C % 4 == 0 they share one Philox block (one draw for four).
template <int MODE>
__global__ void dropout_k(float *a, float *b, const float *c, const float *d, int N, int C, llm4d_dropout dr) {
    const size_t total = (size_t)N * C, groups = (total + 3) / 4;
    for (size_t gi = blockIdx.x * (size_t)blockDim.x + threadIdx.x; gi < groups; gi += (size_t)gridDim.x * blockDim.x) {
        llm4d_kidx_words wc;
        wc.valid = 0;
        for (size_t i = 4 * gi; i < 4 * gi + 4 && i < total; i++) {
            float mult = 1.0f;
            if (dr.p > 0.0f) {
                const int64_t n = (int64_t)(i / C);
                const uint64_t pos = llm4d_kidx_act_pos(dr.sample_ids, dr.T, dr.tok0, n, C, (int)(i % C));
                mult = llm4d_kidx_mult(&wc, dr.seed, dr.stream, dr.p, pos);
            }
            if (MODE == 0) a[i] = c[i] * mult;            // out = inp m
            else if (MODE == 1) a[i] += c[i] * mult;      // dinp += dout m
            else if (MODE == 2) a[i] = c[i] + d[i] * mult; // out = res + x m
            else {                                         // dres = dout, dx = dout m
                const float g = c[i];
                a[i] = g;
                b[i] = g * mult;
            }
        }
    }
}

__global__ void add_k(float *dst, const float *src, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] += src[i];
}

__global__ void scale_k(float *x, float f, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] *= f;
}

// Four-wide forms of the streaming kernels (16-byte loads and stores), taken when every pointer is 16-byte aligned
// and the length a multiple of 4: the activations' element-wise passes are bound by memory, and a scalar fp32 load
// a thread leaves the H100's memory system half used. Each computes exactly what its scalar form computes.
static inline bool al16(const void *p) { return (uintptr_t)p % 16 == 0; }

__global__ void gelu_backward4_k(float4 *dinp, const float4 *inp, const float4 *dout, size_t n4) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4; i += (size_t)gridDim.x * blockDim.x) {
        const float4 x = inp[i], g = dout[i];
        dinp[i] = make_float4(gelu_grad(x.x) * g.x, gelu_grad(x.y) * g.y, gelu_grad(x.z) * g.z, gelu_grad(x.w) * g.w);
    }
}

__global__ void add4_k(float4 *dst, const float4 *src, size_t n4) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4; i += (size_t)gridDim.x * blockDim.x) {
        float4 a = dst[i];
        const float4 b = src[i];
        a.x += b.x, a.y += b.y, a.z += b.z, a.w += b.w;
        dst[i] = a;
    }
}

// dropout_k's four elements of a group as one vector (C % 4 == 0: the group is in one row, one Philox block)
template <int MODE>
__global__ void dropout4_k(float4 *a, float4 *b, const float4 *c, const float4 *d, int N, int C, llm4d_dropout dr) {
    const size_t groups = (size_t)N * C / 4;
    for (size_t gi = blockIdx.x * (size_t)blockDim.x + threadIdx.x; gi < groups; gi += (size_t)gridDim.x * blockDim.x) {
        float m[4] = {1.0f, 1.0f, 1.0f, 1.0f};
        if (dr.p > 0.0f) {
            llm4d_kidx_words wc;
            wc.valid = 0;
            const size_t i0 = 4 * gi;
            const int64_t n = (int64_t)(i0 / C);
            const int c0 = (int)(i0 % C);
#pragma unroll
            for (int k = 0; k < 4; k++)
                m[k] = llm4d_kidx_mult(&wc, dr.seed, dr.stream, dr.p,
                                       llm4d_kidx_act_pos(dr.sample_ids, dr.T, dr.tok0, n, C, c0 + k));
        }
        const float4 x = c[gi];
        const float4 xm = make_float4(x.x * m[0], x.y * m[1], x.z * m[2], x.w * m[3]);
        if (MODE == 0) {
            a[gi] = xm;
        } else if (MODE == 1) {
            float4 y = a[gi];
            y.x += xm.x, y.y += xm.y, y.z += xm.z, y.w += xm.w;
            a[gi] = y;
        } else if (MODE == 2) {
            const float4 r = x, y = d[gi];
            a[gi] = make_float4(r.x + y.x * m[0], r.y + y.y * m[1], r.z + y.z * m[2], r.w + y.w * m[3]);
        } else {
            a[gi] = x;
            b[gi] = xm;
        }
    }
}

__global__ void convert_k(void *dst, int fmt, const float *src, size_t n, int act) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float v = act == LLM4D_ACT_GELU ? gelu(src[i]) : src[i];
        store_fmt(dst, fmt, i, v);
    }
}

// The same, four elements a thread: one 16-byte load, one 8-byte (16-bit formats) or 16-byte store. The operand
// conversions move a step's activations and gradients once more, so they run at the memory's rate or not at all.
template <int FMT, int ACT>
__global__ void convert4_k(void *dst, const float4 *src, size_t n4) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4; i += (size_t)gridDim.x * blockDim.x) {
        float4 v = src[i];
        if (ACT == LLM4D_ACT_GELU) v = make_float4(gelu(v.x), gelu(v.y), gelu(v.z), gelu(v.w));
        if (FMT == LLM4D_CUDA_BF16) {
            const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
            uint2 w;
            w.x = *reinterpret_cast<const uint32_t *>(&lo);
            w.y = *reinterpret_cast<const uint32_t *>(&hi);
            static_cast<uint2 *>(dst)[i] = w;
        } else if (FMT == LLM4D_CUDA_F16) {
            const __half2 lo = __floats2half2_rn(v.x, v.y), hi = __floats2half2_rn(v.z, v.w);
            uint2 w;
            w.x = *reinterpret_cast<const uint32_t *>(&lo);
            w.y = *reinterpret_cast<const uint32_t *>(&hi);
            static_cast<uint2 *>(dst)[i] = w;
        } else {
            static_cast<float4 *>(dst)[i] = v;
        }
    }
}

template <int FMT>
void convert4(cudaStream_t s, void *dst, const float *src, size_t n4, int act) {
    const float4 *v = reinterpret_cast<const float4 *>(src);
    if (act == LLM4D_ACT_GELU) convert4_k<FMT, LLM4D_ACT_GELU><<<grid_for(n4), kThreads, 0, s>>>(dst, v, n4);
    else convert4_k<FMT, LLM4D_ACT_NONE><<<grid_for(n4), kThreads, 0, s>>>(dst, v, n4);
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

void llm4d_k_colsum_partial(cudaStream_t s, float *part, void *dst, int fmt, const float *src, int N, int C) {
    if (N <= 0 || C <= 0) return;
    const dim3 grid((N + LLM4D_CUDA_COL_ROWS - 1) / LLM4D_CUDA_COL_ROWS, (C + kThreads - 1) / kThreads);
    colsum_partial_k<<<grid, kThreads, 0, s>>>(part, dst, fmt, src, N, C);
}

void llm4d_k_colsum_final(cudaStream_t s, float *db, const float *part, int nchunks, int C) {
    if (C <= 0 || nchunks <= 0) return;
    colsum_final_k<<<(C + kThreads - 1) / kThreads, kThreads, 0, s>>>(db, part, nchunks, C);
}

void llm4d_k_layernorm_forward(cudaStream_t s, float *out, float *mean, float *rstd, const float *inp, const float *w,
                               const float *b, int N, int C) {
    if (N <= 0) return;
    const unsigned g = (N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
    if (C % 4 == 0 && al16(out) && al16(inp) && al16(w) && al16(b))
        layernorm_forward4_k<<<g, kThreads, 0, s>>>(out, mean, rstd, inp, w, b, N, C);
    else
        layernorm_forward_k<<<g, kThreads, 0, s>>>(out, mean, rstd, inp, w, b, N, C);
}

void llm4d_k_layernorm_backward(cudaStream_t s, float *dinp, float *part, const float *dout, const float *inp,
                                const float *w, const float *mean, const float *rstd, int N, int C) {
    if (N <= 0) return;
    const unsigned g = (N + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
    if (C % 4 == 0 && al16(dinp) && al16(dout) && al16(inp) && al16(w))
        layernorm_backward_dx4_k<<<g, kThreads, 0, s>>>(dinp, dout, inp, w, mean, rstd, N, C);
    else
        layernorm_backward_dx_k<<<g, kThreads, 0, s>>>(dinp, dout, inp, w, mean, rstd, N, C);
    const dim3 grid((N + LLM4D_CUDA_COL_ROWS - 1) / LLM4D_CUDA_COL_ROWS, (C + kThreads - 1) / kThreads);
    layernorm_backward_part_k<<<grid, kThreads, 0, s>>>(part, dout, inp, mean, rstd, N, C);
}

void llm4d_k_gelu_forward(cudaStream_t s, float *out, const float *inp, size_t n) {
    if (n) gelu_forward_k<<<grid_for(n), kThreads, 0, s>>>(out, inp, n);
}

void llm4d_k_gelu_backward(cudaStream_t s, float *dinp, const float *inp, const float *dout, size_t n) {
    if (!n) return;
    if (n % 4 == 0 && al16(dinp) && al16(inp) && al16(dout))
        gelu_backward4_k<<<grid_for(n / 4), kThreads, 0, s>>>(reinterpret_cast<float4 *>(dinp),
                                                               reinterpret_cast<const float4 *>(inp),
                                                               reinterpret_cast<const float4 *>(dout), n / 4);
    else
        gelu_backward_k<<<grid_for(n), kThreads, 0, s>>>(dinp, inp, dout, n);
}

void llm4d_k_dropout(cudaStream_t s, int mode, float *a, float *b, const float *c, const float *d, int N, int C,
                     llm4d_dropout drop) {
    const size_t total = (size_t)N * C;
    if (!total) return;
    const unsigned g = grid_for((total + 3) / 4);
    if (C % 4 == 0 && al16(a) && al16(b) && al16(c) && al16(d)) {
        float4 *a4 = reinterpret_cast<float4 *>(a), *b4 = reinterpret_cast<float4 *>(b);
        const float4 *c4 = reinterpret_cast<const float4 *>(c), *d4 = reinterpret_cast<const float4 *>(d);
        switch (mode) {
        case 0: dropout4_k<0><<<g, kThreads, 0, s>>>(a4, b4, c4, d4, N, C, drop); break;
        case 1: dropout4_k<1><<<g, kThreads, 0, s>>>(a4, b4, c4, d4, N, C, drop); break;
        case 2: dropout4_k<2><<<g, kThreads, 0, s>>>(a4, b4, c4, d4, N, C, drop); break;
        default: dropout4_k<3><<<g, kThreads, 0, s>>>(a4, b4, c4, d4, N, C, drop); break;
        }
        return;
    }
    switch (mode) {
    case 0: dropout_k<0><<<g, kThreads, 0, s>>>(a, b, c, d, N, C, drop); break;
    case 1: dropout_k<1><<<g, kThreads, 0, s>>>(a, b, c, d, N, C, drop); break;
    case 2: dropout_k<2><<<g, kThreads, 0, s>>>(a, b, c, d, N, C, drop); break;
    default: dropout_k<3><<<g, kThreads, 0, s>>>(a, b, c, d, N, C, drop); break;
    }
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

void llm4d_k_convert(cudaStream_t s, void *dst, int fmt, const float *src, size_t n, llm4d_act act) {
    if (!n) return;
    const size_t es = fmt == LLM4D_CUDA_F32 ? 4 : 2;
    const size_t n4 = ((uintptr_t)src % 16 == 0 && (uintptr_t)dst % (4 * es) == 0) ? n / 4 : 0;
    if (n4) {
        if (fmt == LLM4D_CUDA_BF16) convert4<LLM4D_CUDA_BF16>(s, dst, src, n4, (int)act);
        else if (fmt == LLM4D_CUDA_F16) convert4<LLM4D_CUDA_F16>(s, dst, src, n4, (int)act);
        else convert4<LLM4D_CUDA_F32>(s, dst, src, n4, (int)act);
    }
    const size_t done = 4 * n4;
    if (done < n)
        convert_k<<<grid_for(n - done), kThreads, 0, s>>>(static_cast<char *>(dst) + done * es, fmt, src + done,
                                                          n - done, (int)act);
}

} // extern "C"
