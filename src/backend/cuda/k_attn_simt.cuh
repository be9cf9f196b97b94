// k_attn_simt.cuh — causal self-attention on the GPU in fp32 arithmetic (CUDA cores): the fp32 path, and the
// portable one for any head size up to 256 in every precision. The kernels, shared by k_attn_simt.cu, which launches
// their fp32 forms (TY false), and k_attn_simt_typed.cu, which launches their typed ones: the two compile in parallel,
// each about as long as the one file took before its kernels were typed.
//
// Flash-style like the CPU backend's (cpu_attn.c): no T x T matrix, forward keeps each row's log-sum-exp, backward
// rebuilds the probabilities from it. A group of G threads owns one row (a query in forward and in the dQ kernel,
// a key in the dK/dV kernel), each thread DPT of its head's dimensions in registers; the other side's rows come
// through shared memory in tiles of KT, and the group's dot products are summed across its threads by shuffles.
// Backward is two kernels, dQ (query rows) and dK/dV (key rows), each recomputing the probabilities it needs, so no
// gradient is summed with atomics and the bits do not depend on scheduling. In low precision the operands are
// rounded to the format as they are read (Q, K, V, dout, and the probabilities and score gradients before their
// products), which is what the CPU backend's bf16 and fp16 GEMMs compute; sums stay fp32.
// Typed (k_common.cuh's TY, a third template parameter of each kernel): qkv and dout are read in their types (fp32,
// bf16 or fp16) and out and dqkv stored in theirs, rounded once; lse and D are fp32.
// Dropout: the word of core/rng.h's Philox at each probability's global position (kidx.h), the CPU's mask.
// Grouped-query attention (llm4d_attn_shape.NKV): a query head reads its kv head's K and V; the dK/dV kernel's blocks
// are per kv head and walk the query heads of its group in order, so dK and dV are summed without atomics.
#ifndef LLM4D_BACKEND_CUDA_K_ATTN_SIMT_CUH
#define LLM4D_BACKEND_CUDA_K_ATTN_SIMT_CUH

#include "backend/cuda/k_common.cuh"
#include "backend/cuda/kidx.h"

namespace llm4d_k {

/* k_attn_simt_typed.cu: the typed kernels' launches (any argument 16-bit), called by k_attn_simt.cu's entry points */
void attn_simt_forward_typed(cudaStream_t s, llm4d_tensor out, float *lse, llm4d_ctensor qkv, llm4d_attn_shape sh,
                             llm4d_dropout drop, int fmt);
void attn_simt_backward_typed(cudaStream_t s, llm4d_tensor dqkv, llm4d_ctensor dout, llm4d_ctensor qkv,
                              const float *lse, const float *D, llm4d_attn_shape sh, llm4d_dropout drop, int fmt);

} // namespace llm4d_k

namespace { // each file instantiates the forms it launches

using namespace llm4d_k;

constexpr int AT = 128; // threads per block

// Rows of the other side per shared tile. The loops over a tile are unrolled (its scores stay in registers), so the
// tile's size is the code's: 32 doubled the build time of this file for no gain on a path that is not the fast one.
constexpr int KT = 16;

// C: the query heads' width (Q, out, dout rows); Ckv: K's and V's, NKV heads; C3 = C + 2 Ckv, a qkv row; grp: query
// heads per kv head (query head h reads kv head h / grp)
struct geo {
    int B, T, NH, HS, C, C3, head0, NHt, NKV, Ckv, grp;
    float scale;
};

geo geo_of(const llm4d_attn_shape &s) {
    const int nkv = llm4d_attn_nkv(s);
    return geo{s.B,        s.T,         s.NH, s.HS, s.NH * s.HS, (s.NH + 2 * nkv) * s.HS, s.head0, s.NH_total, nkv,
               nkv * s.HS, s.NH / nkv, 1.0f / sqrtf((float)s.HS)};
}

// element offset of row 0 of query head h's Q (kv 0) or of kv head h's K (kv 1) in batch row b of qkv (its V: Ckv
// after its K)
__device__ __forceinline__ size_t head_at(const geo &g, int b, int h, int kv) {
    return (size_t)b * g.T * g.C3 + (kv ? g.C : 0) + (size_t)h * g.HS;
}

// Shared tiles hold a row's DPT-wide slices one float apart, so the G threads of a row read different banks.
template <int DPT>
__device__ __forceinline__ int col(int d) {
    return (d / DPT) * (DPT + 1) + d % DPT;
}

// rows [r0, r0 + KT) of the head whose row 0 is element `head` of qkv (a Q, K or V head: head_at), rounded, into
// tile[KT][W]; zero beyond T and HS
template <int DPT, int G, bool TY>
__device__ void load_tile(float *tile, llm4d_ctensor qkv, size_t head, int r0, const geo &g, int fmt) {
    constexpr int HSP = DPT * G, W = G * (DPT + 1);
    for (int e = threadIdx.x; e < KT * HSP; e += AT) {
        const int j = e / HSP, d = e % HSP, t = r0 + j;
        float v = 0.0f;
        if (t < g.T && d < g.HS) v = round_fmt(ldx<TY>(qkv.p, qkv.t, head + (size_t)t * g.C3 + d), fmt);
        tile[j * W + col<DPT>(d)] = v;
    }
}

// A thread's DPT dimensions of a row: r[d] = element at + d of x, rounded to fmt, for d < n (0 beyond). The type's
// switch is taken once around the unrolled loop (TY true), not once per element.
template <int DPT, bool TY>
__device__ __forceinline__ void load_row(float (&r)[DPT], const void *x, int t, size_t at, int n, int fmt) {
    if constexpr (TY) {
        if (t == LLM4D_BF16) {
            const __nv_bfloat16 *p = static_cast<const __nv_bfloat16 *>(x) + at;
#pragma unroll
            for (int d = 0; d < DPT; d++) r[d] = d < n ? round_fmt(__bfloat162float(p[d]), fmt) : 0.0f;
            return;
        }
        if (t == LLM4D_F16) {
            const __half *p = static_cast<const __half *>(x) + at;
#pragma unroll
            for (int d = 0; d < DPT; d++) r[d] = d < n ? round_fmt(__half2float(p[d]), fmt) : 0.0f;
            return;
        }
    }
    const float *p = static_cast<const float *>(x);
#pragma unroll
    for (int d = 0; d < DPT; d++) r[d] = d < n ? round_fmt(p[at + d], fmt) : 0.0f;
}

// element at + d of x (type t) = r[d], for d < n
template <int DPT, bool TY>
__device__ __forceinline__ void store_row(void *x, int t, size_t at, int n, const float (&r)[DPT]) {
    if constexpr (TY) {
        if (t == LLM4D_BF16) {
            __nv_bfloat16 *p = static_cast<__nv_bfloat16 *>(x) + at;
#pragma unroll
            for (int d = 0; d < DPT; d++)
                if (d < n) p[d] = __float2bfloat16_rn(r[d]);
            return;
        }
        if (t == LLM4D_F16) {
            __half *p = static_cast<__half *>(x) + at;
#pragma unroll
            for (int d = 0; d < DPT; d++)
                if (d < n) p[d] = __float2half_rn(r[d]);
            return;
        }
    }
    float *p = static_cast<float *>(x);
#pragma unroll
    for (int d = 0; d < DPT; d++)
        if (d < n) p[at + d] = r[d];
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

template <int DPT, int G, bool TY>
__global__ void __launch_bounds__(AT) fwd_k(llm4d_tensor out, float *lse, llm4d_ctensor qkv, geo g,
                                            llm4d_dropout dr, int fmt) {
    constexpr int R = AT / G, W = G * (DPT + 1);
    __shared__ float Ks[KT * W], Vs[KT * W];
    const int blk = gridDim.x - 1 - blockIdx.x; // the longest rows first
    const int bh = blockIdx.y, b = bh / g.NH, h = bh % g.NH;
    const int gl = threadIdx.x % G, t1 = blk * R + threadIdx.x / G;
    const bool active = t1 < g.T;
    const size_t head = head_at(g, b, h, 0), kvh = head_at(g, b, h / g.grp, 1);
    const int mine = active ? g.HS - gl * DPT : 0; // the group's dimensions this thread holds (<= 0: none)
    float q[DPT], o[DPT];
    load_row<DPT, TY>(q, qkv.p, qkv.t, head + (size_t)(active ? t1 : 0) * g.C3 + gl * DPT, mine, fmt);
#pragma unroll
    for (int d = 0; d < DPT; d++) o[d] = 0.0f;
    float mx = -INFINITY, sum = 0.0f;
    llm4d_kidx_words wc;
    wc.valid = 0;
    const uint64_t rowpos =
        dr.p > 0.0f && active ? llm4d_kidx_att_row(dr.sample_ids[b], g.NHt, g.head0, h, g.T, t1) : 0;
    const float kscale = dr.p > 0.0f ? 1.0f / (1.0f - dr.p) : 1.0f; /* a kept probability's multiplier */
    const int last = min(g.T - 1, blk * R + R - 1);
    for (int k0 = 0; k0 <= last; k0 += KT) {
        __syncthreads();
        load_tile<DPT, G, TY>(Ks, qkv, kvh, k0, g, fmt);
        load_tile<DPT, G, TY>(Vs, qkv, kvh + g.Ckv, k0, g, fmt);
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
#pragma unroll
    for (int d = 0; d < DPT; d++) o[d] *= inv;
    store_row<DPT, TY>(out.p, out.t, ((size_t)b * g.T + t1) * g.C + h * g.HS + gl * DPT, mine, o);
    if (gl == 0) lse[(size_t)bh * g.T + t1] = mx + logf(sum);
}

// dQ = scale sum_t2 P (m dP~ - D) K, a group per query row
template <int DPT, int G, bool TY>
__global__ void __launch_bounds__(AT) dq_k(llm4d_tensor dqkv, llm4d_ctensor dout, llm4d_ctensor qkv, const float *lse,
                                           const float *D, geo g, llm4d_dropout dr, int fmt) {
    constexpr int R = AT / G, W = G * (DPT + 1);
    __shared__ float Ks[KT * W], Vs[KT * W];
    const int blk = gridDim.x - 1 - blockIdx.x;
    const int bh = blockIdx.y, b = bh / g.NH, h = bh % g.NH;
    const int gl = threadIdx.x % G, t1 = blk * R + threadIdx.x / G;
    const bool active = t1 < g.T;
    const size_t head = head_at(g, b, h, 0), kvh = head_at(g, b, h / g.grp, 1);
    const size_t dyrow = ((size_t)b * g.T + (active ? t1 : 0)) * g.C + h * g.HS;
    const int mine = active ? g.HS - gl * DPT : 0;
    float q[DPT], dy[DPT], dq[DPT];
    load_row<DPT, TY>(q, qkv.p, qkv.t, head + (size_t)(active ? t1 : 0) * g.C3 + gl * DPT, mine, fmt);
    load_row<DPT, TY>(dy, dout.p, dout.t, dyrow + gl * DPT, mine, fmt);
#pragma unroll
    for (int d = 0; d < DPT; d++) dq[d] = 0.0f;
    const float l = active ? lse[(size_t)bh * g.T + t1] : 0.0f, Dt = active ? D[(size_t)bh * g.T + t1] : 0.0f;
    llm4d_kidx_words wc;
    wc.valid = 0;
    const uint64_t rowpos =
        dr.p > 0.0f && active ? llm4d_kidx_att_row(dr.sample_ids[b], g.NHt, g.head0, h, g.T, t1) : 0;
    const float kscale = dr.p > 0.0f ? 1.0f / (1.0f - dr.p) : 1.0f; /* a kept probability's multiplier */
    const int last = min(g.T - 1, blk * R + R - 1);
    for (int k0 = 0; k0 <= last; k0 += KT) {
        __syncthreads();
        load_tile<DPT, G, TY>(Ks, qkv, kvh, k0, g, fmt);
        load_tile<DPT, G, TY>(Vs, qkv, kvh + g.Ckv, k0, g, fmt);
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
    store_row<DPT, TY>(dqkv.p, dqkv.t, ((size_t)b * g.T + t1) * g.C3 + h * g.HS + gl * DPT, mine, dq);
}

// dK = scale sum_t1 P (m dP~ - D) Q and dV = sum_t1 m P dout, a group per key row of a kv head, summed over the
// query heads of its group in order (one in multi-head attention)
template <int DPT, int G, bool TY>
__global__ void __launch_bounds__(AT) dkdv_k(llm4d_tensor dqkv, llm4d_ctensor dout, llm4d_ctensor qkv,
                                             const float *lse, const float *D, geo g, llm4d_dropout dr, int fmt) {
    constexpr int R = AT / G, W = G * (DPT + 1);
    __shared__ float Qs[KT * W], Ys[KT * W], ls[KT], Ds[KT];
    const int blk = blockIdx.x; // the first keys have the most queries: launched first
    const int bg = blockIdx.y, b = bg / g.NKV, kvh = bg % g.NKV;
    const int gl = threadIdx.x % G, t2 = blk * R + threadIdx.x / G;
    const bool active = t2 < g.T;
    const int mine = active ? g.HS - gl * DPT : 0;
    const size_t krow = head_at(g, b, kvh, 1) + (size_t)(active ? t2 : 0) * g.C3 + gl * DPT;
    float k[DPT], v[DPT], dk[DPT], dv[DPT];
    load_row<DPT, TY>(k, qkv.p, qkv.t, krow, mine, fmt);
    load_row<DPT, TY>(v, qkv.p, qkv.t, krow + g.Ckv, mine, fmt);
#pragma unroll
    for (int d = 0; d < DPT; d++) dk[d] = dv[d] = 0.0f;
    const int64_t sid = dr.p > 0.0f ? dr.sample_ids[b] : 0;
    for (int h = kvh * g.grp; h < (kvh + 1) * g.grp; h++) {
        const int bh = b * g.NH + h;
        const size_t head = head_at(g, b, h, 0), dybase = (size_t)b * g.T * g.C + h * g.HS;
        for (int q0 = (blk * R) / KT * KT; q0 < g.T; q0 += KT) {
            __syncthreads();
            load_tile<DPT, G, TY>(Qs, qkv, head, q0, g, fmt);
            constexpr int HSP = DPT * G;
            for (int e = threadIdx.x; e < KT * HSP; e += AT) { // the dout rows, rounded
                const int i = e / HSP, d = e % HSP, t = q0 + i;
                Ys[i * W + col<DPT>(d)] =
                    t < g.T && d < g.HS ? round_fmt(ldx<TY>(dout.p, dout.t, dybase + (size_t)t * g.C + d), fmt)
                                        : 0.0f;
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
    }
    if (!active) return;
    store_row<DPT, TY>(dqkv.p, dqkv.t, krow, mine, dk);
    store_row<DPT, TY>(dqkv.p, dqkv.t, krow + g.Ckv, mine, dv);
}

// the group shape for a head size: G threads of DPT dimensions each
template <typename F>
void dispatch(int HS, F &&f) {
    if (HS <= 32) f.template operator()<32, 1>();
    else if (HS <= 64) f.template operator()<32, 2>();
    else if (HS <= 128) f.template operator()<32, 4>();
    else f.template operator()<32, 8>();
}

template <bool TY>
struct fwd_launch {
    cudaStream_t s;
    llm4d_tensor out;
    float *lse;
    llm4d_ctensor qkv;
    geo g;
    llm4d_dropout dr;
    int fmt;
    template <int DPT, int G>
    void operator()() const {
        constexpr int R = AT / G;
        const dim3 grid((g.T + R - 1) / R, g.B * g.NH);
        fwd_k<DPT, G, TY><<<grid, AT, 0, s>>>(out, lse, qkv, g, dr, fmt);
    }
};

template <bool TY>
struct bwd_launch {
    cudaStream_t s;
    llm4d_tensor dqkv;
    llm4d_ctensor dout, qkv;
    const float *lse, *D;
    geo g;
    llm4d_dropout dr;
    int fmt;
    template <int DPT, int G>
    void operator()() const {
        constexpr int R = AT / G;
        const dim3 grid((g.T + R - 1) / R, g.B * g.NH), gkv((g.T + R - 1) / R, g.B * g.NKV);
        dq_k<DPT, G, TY><<<grid, AT, 0, s>>>(dqkv, dout, qkv, lse, D, g, dr, fmt);
        dkdv_k<DPT, G, TY><<<gkv, AT, 0, s>>>(dqkv, dout, qkv, lse, D, g, dr, fmt);
    }
};

} // namespace

#endif
