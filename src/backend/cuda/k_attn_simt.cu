// k_attn_simt.cu — causal self-attention on the GPU in fp32 arithmetic (CUDA cores): the fp32 path, and the
// portable one for any head size up to 256 in every precision.
//
// Flash-style like the CPU backend's (cpu_attn.c): no T x T matrix, forward keeps each row's log-sum-exp, backward
// rebuilds the probabilities from it. A group of G threads owns one row (a query in forward and in the dQ kernel,
// a key in the dK/dV kernel), each thread DPT of its head's dimensions in registers; the other side's rows come
// through shared memory in tiles of KT, and the group's dot products are summed across its threads by shuffles.
// Backward is two kernels, dQ (query rows) and dK/dV (key rows), each recomputing the probabilities it needs, so no
// gradient is summed with atomics and the bits do not depend on scheduling. In low precision the operands are
// rounded to the format as they are read (Q, K, V, dout, and the probabilities and score gradients before their
// products), which is what the CPU backend's bf16 and fp16 GEMMs compute; sums stay fp32.
// Dropout: the word of core/rng.h's Philox at each probability's global position (kidx.h), the CPU's mask.
#include "backend/cuda/k_common.cuh"
#include "backend/cuda/kidx.h"

using namespace llm4d_k;

namespace {

constexpr int AT = 128; // threads per block

// Rows of the other side per shared tile. The loops over a tile are unrolled (its scores stay in registers), so the
// tile's size is the code's: 32 doubled the build time of this file for no gain on a path that is not the fast one.
constexpr int KT = 16;

struct geo {
    int B, T, NH, HS, C, C3, head0, NHt;
    float scale;
};

geo geo_of(const llm4d_attn_shape &s) {
    return geo{s.B, s.T, s.NH, s.HS, s.NH * s.HS, 3 * s.NH * s.HS, s.head0, s.NH_total, 1.0f / sqrtf((float)s.HS)};
}

// Shared tiles hold a row's DPT-wide slices one float apart, so the G threads of a row read different banks.
template <int DPT>
__device__ __forceinline__ int col(int d) {
    return (d / DPT) * (DPT + 1) + d % DPT;
}

// rows [r0, r0 + KT) of part `part` (0 Q, 1 K, 2 V) of head h, rounded, into tile[KT][W]; zero beyond T and HS
template <int DPT, int G>
__device__ void load_tile(float *tile, const float *head, int part, int r0, const geo &g, int fmt) {
    constexpr int HSP = DPT * G, W = G * (DPT + 1);
    for (int e = threadIdx.x; e < KT * HSP; e += AT) {
        const int j = e / HSP, d = e % HSP, t = r0 + j;
        float v = 0.0f;
        if (t < g.T && d < g.HS) v = round_fmt(head[(size_t)t * g.C3 + part * g.C + d], fmt);
        tile[j * W + col<DPT>(d)] = v;
    }
}

// the G-thread group's sum of a partial dot product
template <int G>
__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
    for (int o = 1; o < G; o <<= 1) v += __shfl_xor_sync(kFull, v, o);
    return v;
}

// Bit j set where probability (row, k0 + j) is kept, for the nk keys of a tile: the Philox words drawn in a loop
// of its own (not unrolled), so the unrolled loops over the tile carry no copies of the generator.
__device__ __noinline__ uint32_t tile_keep(llm4d_kidx_words *wc, const llm4d_dropout &dr, uint64_t rowpos, int k0,
                                           int nk) {
    uint32_t keep = 0;
    for (int j = 0; j < nk; j++)
        if (llm4d_kidx_mult(wc, dr.seed, dr.stream, dr.p, rowpos + (uint64_t)(k0 + j)) > 0.0f) keep |= 1u << j;
    return keep;
}

template <int DPT, int G>
__global__ void __launch_bounds__(AT) fwd_k(float *out, float *lse, const float *qkv, geo g, llm4d_dropout dr,
                                            int fmt) {
    constexpr int R = AT / G, W = G * (DPT + 1);
    __shared__ float Ks[KT * W], Vs[KT * W];
    const int blk = gridDim.x - 1 - blockIdx.x; // the longest rows first
    const int bh = blockIdx.y, b = bh / g.NH, h = bh % g.NH;
    const int gl = threadIdx.x % G, t1 = blk * R + threadIdx.x / G;
    const bool active = t1 < g.T;
    const float *head = qkv + (size_t)b * g.T * g.C3 + h * g.HS;
    float q[DPT], o[DPT];
#pragma unroll
    for (int d = 0; d < DPT; d++) {
        const int dd = gl * DPT + d;
        q[d] = active && dd < g.HS ? round_fmt(head[(size_t)t1 * g.C3 + dd], fmt) : 0.0f;
        o[d] = 0.0f;
    }
    float mx = -INFINITY, sum = 0.0f;
    llm4d_kidx_words wc;
    wc.valid = 0;
    const uint64_t rowpos =
        dr.p > 0.0f && active ? llm4d_kidx_att_row(dr.sample_ids[b], g.NHt, g.head0, h, g.T, t1) : 0;
    const float kscale = dr.p > 0.0f ? 1.0f / (1.0f - dr.p) : 1.0f; /* a kept probability's multiplier */
    const int last = min(g.T - 1, blk * R + R - 1);
    for (int k0 = 0; k0 <= last; k0 += KT) {
        __syncthreads();
        load_tile<DPT, G>(Ks, head, 1, k0, g, fmt);
        load_tile<DPT, G>(Vs, head, 2, k0, g, fmt);
        __syncthreads();
        const int nk = active ? min(KT, t1 - k0 + 1) : 0;
        float s[KT];
        float tmax = -INFINITY;
#pragma unroll
        for (int j = 0; j < KT; j++) {
            float acc = 0.0f;
#pragma unroll
            for (int d = 0; d < DPT; d++) acc += q[d] * Ks[j * W + gl * (DPT + 1) + d];
            acc = group_sum<G>(acc); // every thread takes part: no divergence around the shuffles
            s[j] = j < nk ? acc * g.scale : -INFINITY;
            tmax = fmaxf(tmax, s[j]);
        }
        if (tmax == -INFINITY) continue; // nothing of this tile for this row
        const uint32_t keep = dr.p > 0.0f ? tile_keep(&wc, dr, rowpos, k0, nk) : 0xffffffffu;
        const float mnew = fmaxf(mx, tmax), f = mx == -INFINITY ? 0.0f : expf(mx - mnew);
        sum *= f;
#pragma unroll
        for (int d = 0; d < DPT; d++) o[d] *= f;
        mx = mnew;
#pragma unroll
        for (int j = 0; j < KT; j++) {
            if (j >= nk) break;
            float p = expf(s[j] - mx);
            sum += p;
            if (dr.p > 0.0f) p = (keep >> j) & 1u ? p * kscale : 0.0f;
            p = round_fmt(p, fmt);
#pragma unroll
            for (int d = 0; d < DPT; d++) o[d] += p * Vs[j * W + gl * (DPT + 1) + d];
        }
    }
    if (!active) return;
    const float inv = 1.0f / sum;
    float *y = out + ((size_t)b * g.T + t1) * g.C + h * g.HS;
#pragma unroll
    for (int d = 0; d < DPT; d++)
        if (gl * DPT + d < g.HS) y[gl * DPT + d] = o[d] * inv;
    if (gl == 0) lse[(size_t)bh * g.T + t1] = mx + logf(sum);
}

// dQ = scale sum_t2 P (m dP~ - D) K, a group per query row
template <int DPT, int G>
__global__ void __launch_bounds__(AT) dq_k(float *dqkv, const float *dout, const float *qkv, const float *lse,
                                           const float *D, geo g, llm4d_dropout dr, int fmt) {
    constexpr int R = AT / G, W = G * (DPT + 1);
    __shared__ float Ks[KT * W], Vs[KT * W];
    const int blk = gridDim.x - 1 - blockIdx.x;
    const int bh = blockIdx.y, b = bh / g.NH, h = bh % g.NH;
    const int gl = threadIdx.x % G, t1 = blk * R + threadIdx.x / G;
    const bool active = t1 < g.T;
    const float *head = qkv + (size_t)b * g.T * g.C3 + h * g.HS;
    const float *dyrow = dout + ((size_t)b * g.T + (active ? t1 : 0)) * g.C + h * g.HS;
    float q[DPT], dy[DPT], dq[DPT];
#pragma unroll
    for (int d = 0; d < DPT; d++) {
        const int dd = gl * DPT + d;
        const bool in = active && dd < g.HS;
        q[d] = in ? round_fmt(head[(size_t)t1 * g.C3 + dd], fmt) : 0.0f;
        dy[d] = in ? round_fmt(dyrow[dd], fmt) : 0.0f;
        dq[d] = 0.0f;
    }
    const float l = active ? lse[(size_t)bh * g.T + t1] : 0.0f, Dt = active ? D[(size_t)bh * g.T + t1] : 0.0f;
    llm4d_kidx_words wc;
    wc.valid = 0;
    const uint64_t rowpos =
        dr.p > 0.0f && active ? llm4d_kidx_att_row(dr.sample_ids[b], g.NHt, g.head0, h, g.T, t1) : 0;
    const float kscale = dr.p > 0.0f ? 1.0f / (1.0f - dr.p) : 1.0f; /* a kept probability's multiplier */
    const int last = min(g.T - 1, blk * R + R - 1);
    for (int k0 = 0; k0 <= last; k0 += KT) {
        __syncthreads();
        load_tile<DPT, G>(Ks, head, 1, k0, g, fmt);
        load_tile<DPT, G>(Vs, head, 2, k0, g, fmt);
        __syncthreads();
        const int nk = active ? min(KT, t1 - k0 + 1) : 0;
        const uint32_t keep = dr.p > 0.0f && nk > 0 ? tile_keep(&wc, dr, rowpos, k0, nk) : 0xffffffffu;
#pragma unroll
        for (int j = 0; j < KT; j++) {
            float sd = 0.0f, pd = 0.0f;
#pragma unroll
            for (int d = 0; d < DPT; d++) {
                sd += q[d] * Ks[j * W + gl * (DPT + 1) + d];
                pd += dy[d] * Vs[j * W + gl * (DPT + 1) + d];
            }
            sd = group_sum<G>(sd);
            pd = group_sum<G>(pd);
            if (j < nk) {
                const float p = expf(sd * g.scale - l);
                const float m = dr.p > 0.0f ? ((keep >> j) & 1u ? kscale : 0.0f) : 1.0f;
                const float ds = round_fmt(g.scale * p * (pd * m - Dt), fmt);
#pragma unroll
                for (int d = 0; d < DPT; d++) dq[d] += ds * Ks[j * W + gl * (DPT + 1) + d];
            }
        }
    }
    if (!active) return;
    float *row = dqkv + ((size_t)b * g.T + t1) * g.C3 + h * g.HS;
#pragma unroll
    for (int d = 0; d < DPT; d++)
        if (gl * DPT + d < g.HS) row[gl * DPT + d] = dq[d];
}

// dK = scale sum_t1 P (m dP~ - D) Q and dV = sum_t1 m P dout, a group per key row
template <int DPT, int G>
__global__ void __launch_bounds__(AT) dkdv_k(float *dqkv, const float *dout, const float *qkv, const float *lse,
                                             const float *D, geo g, llm4d_dropout dr, int fmt) {
    constexpr int R = AT / G, W = G * (DPT + 1);
    __shared__ float Qs[KT * W], Ys[KT * W], ls[KT], Ds[KT];
    const int blk = blockIdx.x; // the first keys have the most queries: launched first
    const int bh = blockIdx.y, b = bh / g.NH, h = bh % g.NH;
    const int gl = threadIdx.x % G, t2 = blk * R + threadIdx.x / G;
    const bool active = t2 < g.T;
    const float *head = qkv + (size_t)b * g.T * g.C3 + h * g.HS;
    const float *dybase = dout + (size_t)b * g.T * g.C + h * g.HS;
    float k[DPT], v[DPT], dk[DPT], dv[DPT];
#pragma unroll
    for (int d = 0; d < DPT; d++) {
        const int dd = gl * DPT + d;
        const bool in = active && dd < g.HS;
        k[d] = in ? round_fmt(head[(size_t)t2 * g.C3 + g.C + dd], fmt) : 0.0f;
        v[d] = in ? round_fmt(head[(size_t)t2 * g.C3 + 2 * g.C + dd], fmt) : 0.0f;
        dk[d] = dv[d] = 0.0f;
    }
    const int64_t sid = dr.p > 0.0f ? dr.sample_ids[b] : 0;
    for (int q0 = (blk * R) / KT * KT; q0 < g.T; q0 += KT) {
        __syncthreads();
        load_tile<DPT, G>(Qs, head, 0, q0, g, fmt);
        constexpr int HSP = DPT * G;
        for (int e = threadIdx.x; e < KT * HSP; e += AT) { // the dout rows, rounded
            const int i = e / HSP, d = e % HSP, t = q0 + i;
            Ys[i * W + col<DPT>(d)] = t < g.T && d < g.HS ? round_fmt(dybase[(size_t)t * g.C + d], fmt) : 0.0f;
        }
        for (int i = threadIdx.x; i < KT; i += AT) {
            const int t = q0 + i;
            ls[i] = t < g.T ? lse[(size_t)bh * g.T + t] : 0.0f;
            Ds[i] = t < g.T ? D[(size_t)bh * g.T + t] : 0.0f;
        }
        __syncthreads();
#pragma unroll 1
        for (int i = 0; i < KT; i++) {
            const int t1 = q0 + i;
            float sd = 0.0f, pd = 0.0f;
#pragma unroll
            for (int d = 0; d < DPT; d++) {
                sd += Qs[i * W + gl * (DPT + 1) + d] * k[d];
                pd += Ys[i * W + gl * (DPT + 1) + d] * v[d];
            }
            sd = group_sum<G>(sd);
            pd = group_sum<G>(pd);
            if (!active || t1 < t2 || t1 >= g.T) continue;
            const float p = expf(sd * g.scale - ls[i]);
            float m = 1.0f;
            if (dr.p > 0.0f) {
                const uint64_t pos = llm4d_kidx_att_row(sid, g.NHt, g.head0, h, g.T, t1) + (uint64_t)t2;
                uint32_t w[4];
                llm4d_rng_block(dr.seed, dr.stream, pos >> 2, w);
                m = llm4d_kidx_keep(w[pos & 3], dr.p);
            }
            const float pt = round_fmt(p * m, fmt), ds = round_fmt(g.scale * p * (pd * m - Ds[i]), fmt);
#pragma unroll
            for (int d = 0; d < DPT; d++) {
                dv[d] += pt * Ys[i * W + gl * (DPT + 1) + d];
                dk[d] += ds * Qs[i * W + gl * (DPT + 1) + d];
            }
        }
    }
    if (!active) return;
    float *row = dqkv + ((size_t)b * g.T + t2) * g.C3 + h * g.HS;
#pragma unroll
    for (int d = 0; d < DPT; d++)
        if (gl * DPT + d < g.HS) {
            row[g.C + gl * DPT + d] = dk[d];
            row[2 * g.C + gl * DPT + d] = dv[d];
        }
}

__global__ void rowdot_k(float *D, const float *dout, const float *out, int B, int T, int NH, int HS) {
    const size_t total = (size_t)B * NH * T;
    for (size_t r = blockIdx.x * (size_t)blockDim.x + threadIdx.x; r < total; r += (size_t)gridDim.x * blockDim.x) {
        const int t = (int)(r % T), bh = (int)(r / T), b = bh / NH, h = bh % NH;
        const size_t o = ((size_t)b * T + t) * (size_t)NH * HS + (size_t)h * HS;
        float d = 0.0f;
        for (int c = 0; c < HS; c++) d += dout[o + c] * out[o + c];
        D[r] = d;
    }
}

// the group shape for a head size: G threads of DPT dimensions each
template <typename F>
void dispatch(int HS, F &&f) {
    if (HS <= 32) f.template operator()<32, 1>();
    else if (HS <= 64) f.template operator()<32, 2>();
    else if (HS <= 128) f.template operator()<32, 4>();
    else f.template operator()<32, 8>();
}

struct fwd_launch {
    cudaStream_t s;
    float *out, *lse;
    const float *qkv;
    geo g;
    llm4d_dropout dr;
    int fmt;
    template <int DPT, int G>
    void operator()() const {
        constexpr int R = AT / G;
        const dim3 grid((g.T + R - 1) / R, g.B * g.NH);
        fwd_k<DPT, G><<<grid, AT, 0, s>>>(out, lse, qkv, g, dr, fmt);
    }
};

struct bwd_launch {
    cudaStream_t s;
    float *dqkv;
    const float *dout, *qkv, *lse, *D;
    geo g;
    llm4d_dropout dr;
    int fmt;
    template <int DPT, int G>
    void operator()() const {
        constexpr int R = AT / G;
        const dim3 grid((g.T + R - 1) / R, g.B * g.NH);
        dq_k<DPT, G><<<grid, AT, 0, s>>>(dqkv, dout, qkv, lse, D, g, dr, fmt);
        dkdv_k<DPT, G><<<grid, AT, 0, s>>>(dqkv, dout, qkv, lse, D, g, dr, fmt);
    }
};

} // namespace

extern "C" {

int llm4d_k_attn_simt_ok(int HS) { return HS >= 1 && HS <= 256; }

void llm4d_k_attn_forward_simt(cudaStream_t s, float *out, float *lse, const float *qkv, llm4d_attn_shape sh,
                               llm4d_dropout drop, int fmt) {
    if (sh.B <= 0 || sh.T <= 0 || sh.NH <= 0) return;
    dispatch(sh.HS, fwd_launch{s, out, lse, qkv, geo_of(sh), drop, fmt});
}

void llm4d_k_attn_rowdot(cudaStream_t s, float *D, const float *dout, const float *out, llm4d_attn_shape sh) {
    const size_t rows = (size_t)sh.B * sh.NH * sh.T;
    if (rows) rowdot_k<<<grid_for(rows), kThreads, 0, s>>>(D, dout, out, sh.B, sh.T, sh.NH, sh.HS);
}

void llm4d_k_attn_backward_simt(cudaStream_t s, float *dqkv, const float *dout, const float *out, const float *qkv,
                                const float *lse, float *D, llm4d_attn_shape sh, llm4d_dropout drop, int fmt) {
    (void)out; // D (llm4d_k_attn_rowdot) holds what backward needs of it
    if (sh.B <= 0 || sh.T <= 0 || sh.NH <= 0) return;
    dispatch(sh.HS, bwd_launch{s, dqkv, dout, qkv, lse, D, geo_of(sh), drop, fmt});
}

} // extern "C"
