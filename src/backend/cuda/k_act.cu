// k_act.cu — GELU and dropout on the GPU (backend.h gelu_forward, gelu_backward, dropout_forward, dropout_backward,
// dropout_add_forward, dropout_add_backward), element-wise with the CPU backend's formulas (cpu_elem.c).
//
// Dropout draws the word of core/rng.h's Philox at each element's global position (kidx.h): the CPU's masks. Four
// consecutive elements a thread: with C % 4 == 0 they share one Philox block (one draw for four), and with aligned
// tensors they move as one 16-byte access (8 in 16 bits): these passes are bound by memory, and a scalar fp32 access
// a thread leaves the H100's memory system half used. Typed: every activation argument is fp32, bf16 or fp16 on its
// own (k_common.cuh's TY), e.g. the O2 residual connection out (16) = res (16) + dropout(x (fp32)); a gradient added
// to (dropout_backward's dinp) is its old value plus the part, rounded once.
#include "backend/cuda/k_common.cuh"
#include "backend/cuda/kidx.h"

using namespace llm4d_k;

namespace {

template <bool TY>
__global__ void gelu_forward_k(llm4d_tensor out, llm4d_ctensor inp, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        stx<TY>(out.p, out.t, i, gelu(ldx<TY>(inp.p, inp.t, i)));
}

template <bool TY>
__global__ void gelu_backward_k(llm4d_tensor dinp, llm4d_ctensor inp, llm4d_ctensor dout, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        stx<TY>(dinp.p, dinp.t, i, gelu_grad(ldx<TY>(inp.p, inp.t, i)) * ldx<TY>(dout.p, dout.t, i));
}

template <bool TY>
__global__ void gelu_backward4_k(llm4d_tensor dinp, llm4d_ctensor inp, llm4d_ctensor dout, size_t n4) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4; i += (size_t)gridDim.x * blockDim.x) {
        const float4 x = ld4x<TY>(inp.p, inp.t, i), g = ld4x<TY>(dout.p, dout.t, i);
        st4x<TY>(dinp.p, dinp.t, i,
                 make_float4(gelu_grad(x.x) * g.x, gelu_grad(x.y) * g.y, gelu_grad(x.z) * g.z, gelu_grad(x.w) * g.w));
    }
}

// a, b, c, d: the tensors of llm4d_k_dropout's mode (cuda_kernels.h)
template <int MODE, bool TY>
__global__ void dropout_k(llm4d_tensor a, llm4d_tensor b, llm4d_ctensor c, llm4d_ctensor d, int N, int C,
                          llm4d_dropout dr) {
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
            if (MODE == 0) { // out = inp m
                stx<TY>(a.p, a.t, i, ldx<TY>(c.p, c.t, i) * mult);
            } else if (MODE == 1) { // dinp += dout m
                stx<TY>(a.p, a.t, i, ldx<TY>(a.p, a.t, i) + ldx<TY>(c.p, c.t, i) * mult);
            } else if (MODE == 2) { // out = res + x m
                stx<TY>(a.p, a.t, i, ldx<TY>(c.p, c.t, i) + ldx<TY>(d.p, d.t, i) * mult);
            } else { // dres = dout, dx = dout m
                const float g = ldx<TY>(c.p, c.t, i);
                stx<TY>(a.p, a.t, i, g);
                stx<TY>(b.p, b.t, i, g * mult);
            }
        }
    }
}

// dropout_k's four elements of a group as one vector (C % 4 == 0: the group is in one row, one Philox block)
template <int MODE, bool TY>
__global__ void dropout4_k(llm4d_tensor a, llm4d_tensor b, llm4d_ctensor c, llm4d_ctensor d, int N, int C,
                           llm4d_dropout dr) {
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
        const float4 x = ld4x<TY>(c.p, c.t, gi);
        const float4 xm = make_float4(x.x * m[0], x.y * m[1], x.z * m[2], x.w * m[3]);
        if (MODE == 0) {
            st4x<TY>(a.p, a.t, gi, xm);
        } else if (MODE == 1) {
            float4 y = ld4x<TY>(a.p, a.t, gi);
            y.x += xm.x, y.y += xm.y, y.z += xm.z, y.w += xm.w;
            st4x<TY>(a.p, a.t, gi, y);
        } else if (MODE == 2) {
            const float4 r = x, y = ld4x<TY>(d.p, d.t, gi);
            st4x<TY>(a.p, a.t, gi, make_float4(r.x + y.x * m[0], r.y + y.y * m[1], r.z + y.z * m[2], r.w + y.w * m[3]));
        } else {
            st4x<TY>(a.p, a.t, gi, x);
            st4x<TY>(b.p, b.t, gi, xm);
        }
    }
}

template <int MODE, bool TY>
void dropout(cudaStream_t s, bool four, llm4d_tensor a, llm4d_tensor b, llm4d_ctensor c, llm4d_ctensor d, int N,
             int C, const llm4d_dropout &drop) {
    const unsigned g = grid_for(((size_t)N * C + 3) / 4);
    if (four) dropout4_k<MODE, TY><<<g, kThreads, 0, s>>>(a, b, c, d, N, C, drop);
    else dropout_k<MODE, TY><<<g, kThreads, 0, s>>>(a, b, c, d, N, C, drop);
}

template <bool TY>
void dropout_mode(cudaStream_t s, int mode, bool four, llm4d_tensor a, llm4d_tensor b, llm4d_ctensor c,
                  llm4d_ctensor d, int N, int C, const llm4d_dropout &drop) {
    switch (mode) {
    case 0: dropout<0, TY>(s, four, a, b, c, d, N, C, drop); break;
    case 1: dropout<1, TY>(s, four, a, b, c, d, N, C, drop); break;
    case 2: dropout<2, TY>(s, four, a, b, c, d, N, C, drop); break;
    default: dropout<3, TY>(s, four, a, b, c, d, N, C, drop); break;
    }
}

} // namespace

extern "C" {

void llm4d_k_gelu_forward(cudaStream_t s, llm4d_tensor out, llm4d_ctensor inp, size_t n) {
    if (!n) return;
    if (out.t != LLM4D_F32 || inp.t != LLM4D_F32) gelu_forward_k<true><<<grid_for(n), kThreads, 0, s>>>(out, inp, n);
    else gelu_forward_k<false><<<grid_for(n), kThreads, 0, s>>>(out, inp, n);
}

void llm4d_k_gelu_backward(cudaStream_t s, llm4d_tensor dinp, llm4d_ctensor inp, llm4d_ctensor dout, size_t n) {
    if (!n) return;
    const bool ty = dinp.t != LLM4D_F32 || inp.t != LLM4D_F32 || dout.t != LLM4D_F32;
    if (n % 4 == 0 && al4(dinp.p, dinp.t) && al4(inp.p, inp.t) && al4(dout.p, dout.t)) {
        if (ty) gelu_backward4_k<true><<<grid_for(n / 4), kThreads, 0, s>>>(dinp, inp, dout, n / 4);
        else gelu_backward4_k<false><<<grid_for(n / 4), kThreads, 0, s>>>(dinp, inp, dout, n / 4);
    } else {
        if (ty) gelu_backward_k<true><<<grid_for(n), kThreads, 0, s>>>(dinp, inp, dout, n);
        else gelu_backward_k<false><<<grid_for(n), kThreads, 0, s>>>(dinp, inp, dout, n);
    }
}

void llm4d_k_dropout(cudaStream_t s, int mode, llm4d_tensor a, llm4d_tensor b, llm4d_ctensor c, llm4d_ctensor d, int N,
                     int C, llm4d_dropout drop) {
    if ((size_t)N * C == 0) return;
    /* the tensors a mode does not use are not given (p NULL): their type says nothing */
    const bool ty = (a.p && a.t != LLM4D_F32) || (b.p && b.t != LLM4D_F32) || (c.p && c.t != LLM4D_F32) ||
                    (d.p && d.t != LLM4D_F32);
    const bool four = C % 4 == 0 && al4(a.p, a.t) && al4(b.p, b.t) && al4(c.p, c.t) && al4(d.p, d.t);
    if (ty) dropout_mode<true>(s, mode, four, a, b, c, d, N, C, drop);
    else dropout_mode<false>(s, mode, four, a, b, c, d, N, C, drop);
}

} // extern "C"
