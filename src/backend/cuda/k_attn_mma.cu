// k_attn_mma.cu — causal self-attention on tensor cores (bf16 operands, fp32 accumulation): FlashAttention-2's
// scheme written with the warp-level mma.sync.m16n8k16 instruction, for head sizes 16, 32, 64 and 128.
//
// Why mma.sync and not WMMA: the online softmax rescales the output accumulator row by row, and only mma.sync's
// documented fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16") say which rows a thread holds. In that
// layout, lane l of a warp holds, of a 16 x 8 fp32 tile, rows l/4 and l/4 + 8 at columns 2 (l%4) and 2 (l%4) + 1;
// of a 16 x 16 bf16 A tile, the same rows at columns 2 (l%4) + {0, 1, 8, 9}; of a 16 x 8 bf16 B tile, column l/4
// at rows 2 (l%4) + {0, 1, 8, 9}. So the scores a thread computes are, unchanged, the probabilities it feeds to the
// next product (P~ V in forward), and no score ever goes through shared memory.
//
// Forward: a block of 4 warps takes 64 query rows of one (batch row, head), 16 per warp; it walks the key tiles of
// 64 up to the diagonal (each tile copied by cp.async while the one before is multiplied), S = Q K^T (Q in
// registers, K from shared memory), the running max and sum per row, P~ = P x dropout in bf16, O += P~ V (V
// row-major in shared memory; ldmatrix .trans reads its B fragments). Out and the log-sum-exp per row at the end.
// Backward is two kernels, so that no gradient needs atomics: dQ (query rows: S, P, dP~ = dout V^T, dS,
// dQ += dS K) and dK/dV (key rows: S^T = K Q^T, dV += P~^T dout, dP~^T = V dout^T, dK += dS^T Q), each
// double-buffering its tiles as the forward does. The probabilities and score gradients are rounded to bf16
// before their products, as the CPU's bf16 attention rounds them. Q, K, V and dout arrive in bf16, in qkv's layout
// (the model's O2 tensors as they are, or converted by llm4d_k_convert). Out and dqkv are stored in their own types
// (k_common.cuh's TY, a template parameter of each kernel): bf16 under O2, each pair of a lane's adjacent columns
// one 4-byte store; fp32 as always.
// Dropout: the word of core/rng.h's Philox at each probability's position (kidx.h), the CPU's mask.
// Grouped-query attention (llm4d_attn_shape.NKV): forward and dQ load the K and V tiles of the query head's kv head;
// a dK/dV block takes a kv head's keys and walks the query heads of its group in order, summing in its registers.
#include "backend/cuda/k_common.cuh"
#include "backend/cuda/kidx.h"

using namespace llm4d_k;

namespace {

typedef __nv_bfloat16 bf16;

constexpr int NT = 128; // threads: 4 warps
constexpr int BR = 64;  // rows of a block: 16 per warp

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

// element offset of row 0 of query head h's Q (kv 0) or of kv head h's K (kv 1) in batch row b of qkv
__device__ __forceinline__ size_t head_at(const geo &g, int b, int h, int kv) {
    return (size_t)b * g.T * g.C3 + (kv ? g.C : 0) + (size_t)h * g.HS;
}

__device__ __forceinline__ void mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi); // .x (the low half) is lo
    return *reinterpret_cast<uint32_t *>(&v);
}

__device__ __forceinline__ uint32_t ld32(const bf16 *p) { return *reinterpret_cast<const uint32_t *>(p); }

// elements i and i + 1 of a tensor of type t (i even and, in 16 bits, the tensor 4-byte aligned: one store)
template <bool TY>
__device__ __forceinline__ void st2x(void *p, int t, size_t i, float a, float b) {
    if constexpr (TY) {
        if (t == LLM4D_BF16) {
            *reinterpret_cast<__nv_bfloat162 *>(static_cast<bf16 *>(p) + i) = __floats2bfloat162_rn(a, b);
            return;
        }
        if (t == LLM4D_F16) {
            *reinterpret_cast<__half2 *>(static_cast<__half *>(p) + i) = __floats2half2_rn(a, b);
            return;
        }
    }
    float *f = static_cast<float *>(p);
    f[i] = a;
    f[i + 1] = b;
}

// rows [r0, r0 + ROWS) of one head's part (head points at row 0 of it; rows C3 apart) into dst[ROWS][HS + 8]
template <int HS, int ROWS>
__device__ void load_rows(bf16 *dst, const bf16 *head, int r0, int T, int C3) {
    constexpr int VPR = HS / 8, LD = HS + 8;
    for (int e = threadIdx.x; e < ROWS * VPR; e += NT) {
        const int r = e / VPR, v = e % VPR, t = r0 + r;
        uint4 x = make_uint4(0, 0, 0, 0);
        if (t < T) x = *reinterpret_cast<const uint4 *>(head + (size_t)t * C3 + v * 8);
        *reinterpret_cast<uint4 *>(dst + r * LD + v * 8) = x;
    }
}

// The same rows copied by cp.async (16 bytes a lane, zero-filled past T): the next tile is on its way while the
// current one is multiplied (two buffers). Completed by cp_wait, made visible to the block by __syncthreads.
template <int HS, int ROWS>
__device__ void load_rows_async(bf16 *dst, const bf16 *head, int r0, int T, int C3) {
    constexpr int VPR = HS / 8, LD = HS + 8;
    for (int e = threadIdx.x; e < ROWS * VPR; e += NT) {
        const int r = e / VPR, v = e % VPR, t = r0 + r;
        const bf16 *src = t < T ? head + (size_t)t * C3 + v * 8 : head; // a valid address; nothing read past T
        const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst + r * LD + v * 8));
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(t < T ? 16 : 0)
                     : "memory");
    }
}

__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// The K and V tiles of keys [k, k + ROWS) into buf (K) and buf + ROWS (HS + 8) (V), as one cp.async group (kvh:
// row 0 of the kv head's K, its V Ckv after).
template <int HS, int ROWS>
__device__ __forceinline__ void kv_issue(bf16 *buf, const bf16 *kvh, const geo g, int k) {
    load_rows_async<HS, ROWS>(buf, kvh, k, g.T, g.C3);
    load_rows_async<HS, ROWS>(buf + ROWS * (HS + 8), kvh + g.Ckv, k, g.T, g.C3);
    cp_commit();
}

// Round `it` of a walk over key tiles from 0 to `last` (tile it in buffer it & 1 of KV): the next tile into the other
// buffer (read last in the previous round, which ended with __syncthreads), then wait for this round's.
template <int HS, int ROWS>
__device__ __forceinline__ void kv_next(bf16 *KV, const bf16 *kvh, const geo g, int k0, int last, int it) {
    if (k0 + ROWS <= last) {
        kv_issue<HS, ROWS>(KV + 2 * ((it + 1) & 1) * ROWS * (HS + 8), kvh, g, k0 + ROWS);
        cp_wait<1>();
    } else {
        cp_wait<0>();
    }
}

// B fragments for two 8-column tiles of a row-major tile src[k][n] (rows LD apart): ldmatrix .trans hands lane l,
// of each 8 x 8 matrix, column l/4 at rows 2 (l%4) and 2 (l%4) + 1, which is mma's B fragment of B[k][n] = src[k][n].
// Lanes 0-15 address rows k0 .. k0 + 15 at column n0, lanes 16-31 the same rows at n0 + 8: b[0..1] are n-tile n0,
// b[2..3] n-tile n0 + 8. So no tile is ever transposed into shared memory (scattered 2-byte stores that hit one bank).
__device__ __forceinline__ void ldsm_x4_t(uint32_t b[4], const bf16 *src, int LD, int k0, int n0, int lane) {
    const bf16 *p = src + (k0 + (lane & 15)) * LD + n0 + (lane >> 4) * 8;
    const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3])
                 : "r"(a)
                 : "memory");
}

// A fragments of a warp's 16 rows (wr .. wr + 15 of tile src[.][HS + 8]) for the HS/16 k-steps
template <int HS>
__device__ __forceinline__ void a_frags(uint32_t (*a)[4], const bf16 *src, int wr, int gq, int tq) {
    constexpr int LD = HS + 8;
#pragma unroll
    for (int kk = 0; kk < HS / 16; kk++) {
        const bf16 *p = src + (wr + gq) * LD + kk * 16 + 2 * tq;
        a[kk][0] = ld32(p);
        a[kk][1] = ld32(p + 8 * LD);
        a[kk][2] = ld32(p + 8);
        a[kk][3] = ld32(p + 8 * LD + 8);
    }
}

// acc[nt] (16 x 8 tiles, NC / 8 of them) = A (registers, HS/16 k-steps) times rows of src[.][HS + 8] as B^T
template <int HS, int NC>
__device__ __forceinline__ void mul_abt(float (*acc)[4], const uint32_t (*a)[4], const bf16 *src, int gq, int tq) {
    constexpr int LD = HS + 8;
#pragma unroll
    for (int nt = 0; nt < NC / 8; nt++) {
        acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < HS / 16; kk++) {
            const bf16 *p = src + (nt * 8 + gq) * LD + kk * 16 + 2 * tq;
            mma(acc[nt], a[kk], ld32(p), ld32(p + 8));
        }
    }
}

// out[dt] (16 x HS) += P (the NC-column score tiles as bf16 A fragments) times src[NC][HS + 8] (B, row-major)
template <int HS, int NC>
__device__ __forceinline__ void mul_pv(float (*out)[4], const float (*p)[4], const bf16 *src, int lane) {
    constexpr int LD = HS + 8;
#pragma unroll
    for (int kk = 0; kk < NC / 16; kk++) {
        const uint32_t a[4] = {pack2(p[2 * kk][0], p[2 * kk][1]), pack2(p[2 * kk][2], p[2 * kk][3]),
                               pack2(p[2 * kk + 1][0], p[2 * kk + 1][1]), pack2(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
        for (int dt = 0; dt < HS / 8; dt += 2) {
            uint32_t b[4];
            ldsm_x4_t(b, src, LD, kk * 16, dt * 8, lane);
            mma(out[dt], a, b[0], b[1]);
            mma(out[dt + 1], a, b[2], b[3]);
        }
    }
}

// Dropout, drawn outside the unrolled loops (one copy of the generator per kernel, not one per element): the keep
// bits of a lane's probabilities in a tile of nct n-tiles. Row-major tiles (forward, dQ): bit 2 nt + c for (row,
// key k0 + 8 nt + 2 tq + c). Transposed tiles (dK/dV): bit 4 nt + e for (key key_e>>1, query q0 + 8 nt + 2 tq +
// (e & 1)). Masked positions (the future, past T) are 0.
__device__ __noinline__ uint32_t row_keep(llm4d_kidx_words *wc, const llm4d_dropout &dr, uint64_t rowpos, int row,
                                          int k0, int tq, int nct, int T) {
    uint32_t keep = 0;
    if (row >= T) return 0;
    for (int i = 0; i < 2 * nct; i++) {
        const int key = k0 + (i >> 1) * 8 + 2 * tq + (i & 1);
        if (key <= row && key < T && llm4d_kidx_mult(wc, dr.seed, dr.stream, dr.p, rowpos + (uint64_t)key) > 0.0f)
            keep |= 1u << i;
    }
    return keep;
}

__device__ __noinline__ uint32_t col_keep(const llm4d_dropout &dr, const geo &g, int64_t sid, int h, int key0,
                                          int key1, int q0, int tq, int nct) {
    uint32_t keep = 0;
    for (int i = 0; i < 4 * nct; i++) {
        const int key = (i & 2) ? key1 : key0, q = q0 + (i >> 2) * 8 + 2 * tq + (i & 1);
        if (q < key || q >= g.T || key >= g.T) continue;
        const uint64_t pos = llm4d_kidx_att_row(sid, g.NHt, g.head0, h, g.T, q) + (uint64_t)key;
        uint32_t w[4];
        llm4d_rng_block(dr.seed, dr.stream, pos >> 2, w);
        if (llm4d_kidx_keep(w[pos & 3], dr.p) > 0.0f) keep |= 1u << i;
    }
    return keep;
}

template <int HS>
constexpr size_t fwd_smem() {
    return (size_t)(5 * BR * (HS + 8)) * sizeof(bf16); // Q, and K and V twice
}

template <int HS, bool TY>
__global__ void __launch_bounds__(NT) fwd_k(llm4d_tensor out, float *lse, const bf16 *qkv, geo g, llm4d_dropout dr) {
    constexpr int LD = HS + 8, DT = HS / 8;
    extern __shared__ __align__(16) unsigned char smem[];
    bf16 *Qs = reinterpret_cast<bf16 *>(smem), *KV = Qs + BR * LD; // KV: buffer i's K at 2 i, its V at 2 i + 1
    const int qb = gridDim.x - 1 - blockIdx.x, bh = blockIdx.y, b = bh / g.NH, h = bh % g.NH;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane >> 2, tq = lane & 3, wr = warp * 16;
    const int q0 = qb * BR;
    const bf16 *head = qkv + head_at(g, b, h, 0), *kvh = qkv + head_at(g, b, h / g.grp, 1);
    load_rows<HS, BR>(Qs, head, q0, g.T, g.C3);
    __syncthreads();
    uint32_t qa[HS / 16][4];
    a_frags<HS>(qa, Qs, wr, gq, tq);
    float o[DT][4];
#pragma unroll
    for (int dt = 0; dt < DT; dt++) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    const int rows[2] = {q0 + wr + gq, q0 + wr + gq + 8};
    uint64_t rowpos[2] = {0, 0};
    llm4d_kidx_words wc[2];
    wc[0].valid = wc[1].valid = 0;
    if (dr.p > 0.0f)
        for (int r = 0; r < 2; r++)
            if (rows[r] < g.T) rowpos[r] = llm4d_kidx_att_row(dr.sample_ids[b], g.NHt, g.head0, h, g.T, rows[r]);
    const float kscale = dr.p > 0.0f ? 1.0f / (1.0f - dr.p) : 1.0f; /* a kept probability's multiplier */
    const int last = min(g.T - 1, q0 + BR - 1);
    kv_issue<HS, BR>(KV, kvh, g, 0);
    for (int k0 = 0, it = 0; k0 <= last; k0 += BR, it++) {
        const bf16 *Ks = KV + (2 * (it & 1)) * BR * LD, *Vs = Ks + BR * LD;
        kv_next<HS, BR>(KV, kvh, g, k0, last, it);
        __syncthreads();
        float sc[BR / 8][4];
        mul_abt<HS, BR>(sc, qa, Ks, gq, tq);
        float tmax[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int nt = 0; nt < BR / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = e >> 1, key = k0 + nt * 8 + 2 * tq + (e & 1);
                const float v = key <= rows[r] && key < g.T ? sc[nt][e] * g.scale : -INFINITY;
                sc[nt][e] = v;
                tmax[r] = fmaxf(tmax[r], v);
            }
        float mref[2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            tmax[r] = fmaxf(tmax[r], __shfl_xor_sync(kFull, tmax[r], 1));
            tmax[r] = fmaxf(tmax[r], __shfl_xor_sync(kFull, tmax[r], 2));
            const float mnew = fmaxf(m[r], tmax[r]);
            const float f = m[r] == -INFINITY ? 0.0f : expf(m[r] - mnew);
            m[r] = mnew;
            mref[r] = mnew == -INFINITY ? 0.0f : mnew;
            l[r] *= f;
#pragma unroll
            for (int dt = 0; dt < DT; dt++) o[dt][2 * r] *= f, o[dt][2 * r + 1] *= f;
        }
        uint32_t keep0 = 0xffffffffu, keep1 = 0xffffffffu;
        if (dr.p > 0.0f) {
            keep0 = row_keep(&wc[0], dr, rowpos[0], rows[0], k0, tq, BR / 8, g.T);
            keep1 = row_keep(&wc[1], dr, rowpos[1], rows[1], k0, tq, BR / 8, g.T);
        }
#pragma unroll
        for (int nt = 0; nt < BR / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = e >> 1;
                float p = expf(sc[nt][e] - mref[r]); // 0 where masked
                l[r] += p;
                if (dr.p > 0.0f) p = ((r ? keep1 : keep0) >> (2 * nt + (e & 1))) & 1u ? p * kscale : 0.0f;
                sc[nt][e] = p;
            }
        mul_pv<HS, BR>(o, sc, Vs, lane);
        __syncthreads(); // this buffer is no longer read: the next round may fill it
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(kFull, l[r], 1);
        l[r] += __shfl_xor_sync(kFull, l[r], 2);
        if (rows[r] >= g.T) continue;
        const float inv = 1.0f / l[r];
        const size_t y = ((size_t)b * g.T + rows[r]) * g.C + h * g.HS;
#pragma unroll
        for (int dt = 0; dt < DT; dt++)
            st2x<TY>(out.p, out.t, y + dt * 8 + 2 * tq, o[dt][2 * r] * inv, o[dt][2 * r + 1] * inv);
        if (tq == 0) lse[(size_t)bh * g.T + rows[r]] = m[r] + logf(l[r]);
    }
}

// dQ: KW keys per tile (32 at HS 128, to keep the accumulators in registers)
template <int HS, int KW>
constexpr size_t dq_smem() {
    return (size_t)(2 * BR * (HS + 8) + 4 * KW * (HS + 8)) * sizeof(bf16); // Q, dout; K and V twice
}

template <int HS, int KW, bool TY>
__global__ void __launch_bounds__(NT) dq_k(llm4d_tensor dqkv, const bf16 *dout, const bf16 *qkv, const float *lse,
                                           const float *D, geo g, llm4d_dropout dr) {
    constexpr int LD = HS + 8, DT = HS / 8;
    extern __shared__ __align__(16) unsigned char smem[];
    bf16 *Qs = reinterpret_cast<bf16 *>(smem), *Ys = Qs + BR * LD, *KV = Ys + BR * LD;
    const int qb = gridDim.x - 1 - blockIdx.x, bh = blockIdx.y, b = bh / g.NH, h = bh % g.NH;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane >> 2, tq = lane & 3, wr = warp * 16;
    const int q0 = qb * BR;
    const bf16 *head = qkv + head_at(g, b, h, 0), *kvh = qkv + head_at(g, b, h / g.grp, 1);
    load_rows<HS, BR>(Qs, head, q0, g.T, g.C3);
    load_rows<HS, BR>(Ys, dout + (size_t)b * g.T * g.C + h * g.HS, q0, g.T, g.C);
    __syncthreads();
    uint32_t qa[HS / 16][4], ya[HS / 16][4];
    a_frags<HS>(qa, Qs, wr, gq, tq);
    a_frags<HS>(ya, Ys, wr, gq, tq);
    const int rows[2] = {q0 + wr + gq, q0 + wr + gq + 8};
    float lr[2], Dr[2];
    uint64_t rowpos[2] = {0, 0};
    llm4d_kidx_words wc[2];
    wc[0].valid = wc[1].valid = 0;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        const bool in = rows[r] < g.T;
        lr[r] = in ? lse[(size_t)bh * g.T + rows[r]] : 0.0f;
        Dr[r] = in ? D[(size_t)bh * g.T + rows[r]] : 0.0f;
        if (in && dr.p > 0.0f) rowpos[r] = llm4d_kidx_att_row(dr.sample_ids[b], g.NHt, g.head0, h, g.T, rows[r]);
    }
    float dq[DT][4];
#pragma unroll
    for (int dt = 0; dt < DT; dt++) dq[dt][0] = dq[dt][1] = dq[dt][2] = dq[dt][3] = 0.0f;
    const float kscale = dr.p > 0.0f ? 1.0f / (1.0f - dr.p) : 1.0f;
    const int last = min(g.T - 1, q0 + BR - 1);
    kv_issue<HS, KW>(KV, kvh, g, 0);
    for (int k0 = 0, it = 0; k0 <= last; k0 += KW, it++) {
        const bf16 *Ks = KV + (2 * (it & 1)) * KW * LD, *Vs = Ks + KW * LD;
        kv_next<HS, KW>(KV, kvh, g, k0, last, it);
        __syncthreads();
        float sc[KW / 8][4], dp[KW / 8][4];
        mul_abt<HS, KW>(sc, qa, Ks, gq, tq); // S = Q K^T
        mul_abt<HS, KW>(dp, ya, Vs, gq, tq); // dP~ = dout V^T
        uint32_t keep0 = 0xffffffffu, keep1 = 0xffffffffu;
        if (dr.p > 0.0f) {
            keep0 = row_keep(&wc[0], dr, rowpos[0], rows[0], k0, tq, KW / 8, g.T);
            keep1 = row_keep(&wc[1], dr, rowpos[1], rows[1], k0, tq, KW / 8, g.T);
        }
#pragma unroll
        for (int nt = 0; nt < KW / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int r = e >> 1, key = k0 + nt * 8 + 2 * tq + (e & 1);
                float ds = 0.0f;
                if (key <= rows[r] && key < g.T && rows[r] < g.T) {
                    const float p = expf(sc[nt][e] * g.scale - lr[r]);
                    const float mlt =
                        dr.p > 0.0f ? (((r ? keep1 : keep0) >> (2 * nt + (e & 1))) & 1u ? kscale : 0.0f) : 1.0f;
                    ds = g.scale * p * (dp[nt][e] * mlt - Dr[r]);
                }
                sc[nt][e] = ds;
            }
        mul_pv<HS, KW>(dq, sc, Ks, lane); // dQ += dS K
        __syncthreads();
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        if (rows[r] >= g.T) continue;
        const size_t y = ((size_t)b * g.T + rows[r]) * g.C3 + h * g.HS;
#pragma unroll
        for (int dt = 0; dt < DT; dt++)
            st2x<TY>(dqkv.p, dqkv.t, y + dt * 8 + 2 * tq, dq[dt][2 * r], dq[dt][2 * r + 1]);
    }
}

// dK, dV: QW queries per tile (32 at HS 128)
template <int HS, int QW>
constexpr size_t dkdv_smem() {
    return (size_t)(2 * BR * (HS + 8) + 4 * QW * (HS + 8)) * sizeof(bf16) + // K, V; Q and dout twice
           4 * QW * sizeof(float);
}

template <int HS, int QW, bool TY>
__global__ void __launch_bounds__(NT) dkdv_k(llm4d_tensor dqkv, const bf16 *dout, const bf16 *qkv, const float *lse,
                                             const float *D, geo g, llm4d_dropout dr) {
    constexpr int LD = HS + 8, DT = HS / 8;
    extern __shared__ __align__(16) unsigned char smem[];
    bf16 *Kst = reinterpret_cast<bf16 *>(smem), *Vst = Kst + BR * LD, *QY = Vst + BR * LD; // buffer i: Q, dout
    float *rowt = reinterpret_cast<float *>(QY + 4 * QW * LD);                              // buffer i: lse, D
    const int kb = blockIdx.x, bg = blockIdx.y, b = bg / g.NKV, kvh = bg % g.NKV; // a block: keys of a kv head
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane >> 2, tq = lane & 3, wr = warp * 16;
    const int k0 = kb * BR;
    const bf16 *khead = qkv + head_at(g, b, kvh, 1);
    load_rows<HS, BR>(Kst, khead, k0, g.T, g.C3);
    load_rows<HS, BR>(Vst, khead + g.Ckv, k0, g.T, g.C3);
    __syncthreads();
    uint32_t ka[HS / 16][4], va[HS / 16][4];
    a_frags<HS>(ka, Kst, wr, gq, tq);
    a_frags<HS>(va, Vst, wr, gq, tq);
    const int keys[2] = {k0 + wr + gq, k0 + wr + gq + 8};
    const int64_t sid = dr.p > 0.0f ? dr.sample_ids[b] : 0;
    const float kscale = dr.p > 0.0f ? 1.0f / (1.0f - dr.p) : 1.0f;
    float dk[DT][4], dv[DT][4];
#pragma unroll
    for (int dt = 0; dt < DT; dt++)
#pragma unroll
        for (int e = 0; e < 4; e++) dk[dt][e] = dv[dt][e] = 0.0f;
    // the query heads of the kv head's group in order, each walking its query tiles: dK and dV sum over them in
    // registers (no atomics; one query head in multi-head attention)
    for (int h = kvh * g.grp; h < (kvh + 1) * g.grp; h++) {
        const int bh = b * g.NH + h;
        const bf16 *head = qkv + head_at(g, b, h, 0), *yhead = dout + (size_t)b * g.T * g.C + h * g.HS;
        // tile loads: Q and dout by cp.async, the row terms by the threads (a few hundred bytes)
        auto issue = [&](int q, int buf) {
            bf16 *qs = QY + 2 * buf * QW * LD;
            load_rows_async<HS, QW>(qs, head, q, g.T, g.C3);
            load_rows_async<HS, QW>(qs + QW * LD, yhead, q, g.T, g.C);
            cp_commit();
            float *l2 = rowt + 2 * buf * QW;
            for (int i = threadIdx.x; i < QW; i += NT) {
                const int t = q + i;
                l2[i] = t < g.T ? lse[(size_t)bh * g.T + t] : 0.0f;
                l2[QW + i] = t < g.T ? D[(size_t)bh * g.T + t] : 0.0f;
            }
        };
        issue(k0, 0); // every buffer is free: the previous head's last round ended with __syncthreads
        for (int q0 = k0, it = 0; q0 < g.T; q0 += QW, it++) {
            const bf16 *Qs = QY + 2 * (it & 1) * QW * LD, *Ys = Qs + QW * LD;
            const float *ls = rowt + 2 * (it & 1) * QW, *Ds = ls + QW;
            if (q0 + QW < g.T) {
                issue(q0 + QW, (it + 1) & 1);
                cp_wait<1>();
            } else {
                cp_wait<0>();
            }
            __syncthreads();
            float st[QW / 8][4], dpt[QW / 8][4];
            mul_abt<HS, QW>(st, ka, Qs, gq, tq);  // S^T = K Q^T
            mul_abt<HS, QW>(dpt, va, Ys, gq, tq); // dP~^T = V dout^T
            const uint32_t keep =
                dr.p > 0.0f ? col_keep(dr, g, sid, h, keys[0], keys[1], q0, tq, QW / 8) : 0xffffffffu;
#pragma unroll
            for (int nt = 0; nt < QW / 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int r = e >> 1, qi = nt * 8 + 2 * tq + (e & 1), q = q0 + qi;
                    float p = 0.0f, ds = 0.0f;
                    if (q >= keys[r] && q < g.T && keys[r] < g.T) {
                        p = expf(st[nt][e] * g.scale - ls[qi]);
                        const float mlt = dr.p > 0.0f ? ((keep >> (4 * nt + e)) & 1u ? kscale : 0.0f) : 1.0f;
                        ds = g.scale * p * (dpt[nt][e] * mlt - Ds[qi]);
                        p *= mlt;
                    }
                    dpt[nt][e] = p; /* P~, in the registers dP~ no longer needs */
                    st[nt][e] = ds;
                }
            mul_pv<HS, QW>(dv, dpt, Ys, lane); // dV += P~^T dout
            mul_pv<HS, QW>(dk, st, Qs, lane);  // dK += dS^T Q
            __syncthreads();
        }
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        if (keys[r] >= g.T) continue;
        const size_t y = head_at(g, b, kvh, 1) + (size_t)keys[r] * g.C3;
#pragma unroll
        for (int dt = 0; dt < DT; dt++) {
            st2x<TY>(dqkv.p, dqkv.t, y + dt * 8 + 2 * tq, dk[dt][2 * r], dk[dt][2 * r + 1]);
            st2x<TY>(dqkv.p, dqkv.t, y + g.Ckv + dt * 8 + 2 * tq, dv[dt][2 * r], dv[dt][2 * r + 1]);
        }
    }
}

template <int HS, bool TY>
void forward(cudaStream_t s, llm4d_tensor out, float *lse, const bf16 *qkv, const geo &g, const llm4d_dropout &dr) {
    constexpr size_t sm = fwd_smem<HS>();
    cudaFuncSetAttribute(fwd_k<HS, TY>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm);
    const dim3 grid((g.T + BR - 1) / BR, g.B * g.NH);
    fwd_k<HS, TY><<<grid, NT, sm, s>>>(out, lse, qkv, g, dr);
}

template <int HS, bool TY>
void backward(cudaStream_t s, llm4d_tensor dqkv, const bf16 *dout, const bf16 *qkv, const float *lse, const float *D,
              const geo &g, const llm4d_dropout &dr) {
    constexpr int W = HS >= 128 ? 32 : 64;
    constexpr size_t sq = dq_smem<HS, W>(), skv = dkdv_smem<HS, W>();
    cudaFuncSetAttribute(dq_k<HS, W, TY>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sq);
    cudaFuncSetAttribute(dkdv_k<HS, W, TY>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)skv);
    const dim3 grid((g.T + BR - 1) / BR, g.B * g.NH), gkv((g.T + BR - 1) / BR, g.B * g.NKV);
    dq_k<HS, W, TY><<<grid, NT, sq, s>>>(dqkv, dout, qkv, lse, D, g, dr);
    dkdv_k<HS, W, TY><<<gkv, NT, skv, s>>>(dqkv, dout, qkv, lse, D, g, dr);
}

template <bool TY>
void forward_hs(cudaStream_t s, llm4d_tensor out, float *lse, const bf16 *q, const geo &g, const llm4d_dropout &dr) {
    switch (g.HS) {
    case 16: forward<16, TY>(s, out, lse, q, g, dr); break;
    case 32: forward<32, TY>(s, out, lse, q, g, dr); break;
    case 64: forward<64, TY>(s, out, lse, q, g, dr); break;
    default: forward<128, TY>(s, out, lse, q, g, dr); break;
    }
}

template <bool TY>
void backward_hs(cudaStream_t s, llm4d_tensor dqkv, const bf16 *y, const bf16 *q, const float *lse, const float *D,
                 const geo &g, const llm4d_dropout &dr) {
    switch (g.HS) {
    case 16: backward<16, TY>(s, dqkv, y, q, lse, D, g, dr); break;
    case 32: backward<32, TY>(s, dqkv, y, q, lse, D, g, dr); break;
    case 64: backward<64, TY>(s, dqkv, y, q, lse, D, g, dr); break;
    default: backward<128, TY>(s, dqkv, y, q, lse, D, g, dr); break;
    }
}

} // namespace

extern "C" {

int llm4d_k_attn_mma_ok(int HS) { return HS == 16 || HS == 32 || HS == 64 || HS == 128; }

void llm4d_k_attn_forward_mma(cudaStream_t s, llm4d_tensor out, float *lse, const void *qkv16, llm4d_attn_shape sh,
                              llm4d_dropout drop) {
    if (sh.B <= 0 || sh.T <= 0 || sh.NH <= 0) return;
    const geo g = geo_of(sh);
    const bf16 *q = static_cast<const bf16 *>(qkv16);
    if (out.t != LLM4D_F32) forward_hs<true>(s, out, lse, q, g, drop);
    else forward_hs<false>(s, out, lse, q, g, drop);
}

void llm4d_k_attn_backward_mma(cudaStream_t s, llm4d_tensor dqkv, const void *dout16, const void *qkv16,
                               const float *lse, const float *D, llm4d_attn_shape sh, llm4d_dropout drop) {
    if (sh.B <= 0 || sh.T <= 0 || sh.NH <= 0) return;
    const geo g = geo_of(sh);
    const bf16 *q = static_cast<const bf16 *>(qkv16), *y = static_cast<const bf16 *>(dout16);
    if (dqkv.t != LLM4D_F32) backward_hs<true>(s, dqkv, y, q, lse, D, g, drop);
    else backward_hs<false>(s, dqkv, y, q, lse, D, g, drop);
}

} // extern "C"
