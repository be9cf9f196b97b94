// k_attn_simt.cu — the portable attention kernels' entry points (cuda_kernels.h) and their fp32 launches; the
// kernels are in k_attn_simt.cuh, their typed launches in k_attn_simt_typed.cu. Also the softmax-backward row term D
// both attention paths use.
#include "backend/cuda/k_attn_simt.cuh"

using namespace llm4d_k;

namespace {

template <bool TY>
__global__ void rowdot_k(float *D, llm4d_ctensor dout, llm4d_ctensor out, int B, int T, int NH, int HS) {
    const size_t total = (size_t)B * NH * T;
    for (size_t r = blockIdx.x * (size_t)blockDim.x + threadIdx.x; r < total; r += (size_t)gridDim.x * blockDim.x) {
        const int t = (int)(r % T), bh = (int)(r / T), b = bh / NH, h = bh % NH;
        const size_t o = ((size_t)b * T + t) * (size_t)NH * HS + (size_t)h * HS;
        float d = 0.0f;
        for (int c = 0; c < HS; c++) d += ldx<TY>(dout.p, dout.t, o + c) * ldx<TY>(out.p, out.t, o + c);
        D[r] = d;
    }
}

} // namespace

extern "C" {

int llm4d_k_attn_simt_ok(int HS) { return HS >= 1 && HS <= 256; }

void llm4d_k_attn_forward_simt(cudaStream_t s, llm4d_tensor out, float *lse, llm4d_ctensor qkv, llm4d_attn_shape sh,
                               llm4d_dropout drop, int fmt) {
    if (sh.B <= 0 || sh.T <= 0 || sh.NH <= 0) return;
    if (out.t != LLM4D_F32 || qkv.t != LLM4D_F32) attn_simt_forward_typed(s, out, lse, qkv, sh, drop, fmt);
    else dispatch(sh.HS, fwd_launch<false>{s, out, lse, qkv, geo_of(sh), drop, fmt});
}

void llm4d_k_attn_rowdot(cudaStream_t s, float *D, llm4d_ctensor dout, llm4d_ctensor out, llm4d_attn_shape sh) {
    const size_t rows = (size_t)sh.B * sh.NH * sh.T;
    if (!rows) return;
    if (dout.t != LLM4D_F32 || out.t != LLM4D_F32)
        rowdot_k<true><<<grid_for(rows), kThreads, 0, s>>>(D, dout, out, sh.B, sh.T, sh.NH, sh.HS);
    else
        rowdot_k<false><<<grid_for(rows), kThreads, 0, s>>>(D, dout, out, sh.B, sh.T, sh.NH, sh.HS);
}

// out itself is not read: D (llm4d_k_attn_rowdot) holds what backward needs of it
void llm4d_k_attn_backward_simt(cudaStream_t s, llm4d_tensor dqkv, llm4d_ctensor dout, llm4d_ctensor qkv,
                                const float *lse, const float *D, llm4d_attn_shape sh, llm4d_dropout drop, int fmt) {
    if (sh.B <= 0 || sh.T <= 0 || sh.NH <= 0) return;
    if (dqkv.t != LLM4D_F32 || dout.t != LLM4D_F32 || qkv.t != LLM4D_F32)
        attn_simt_backward_typed(s, dqkv, dout, qkv, lse, D, sh, drop, fmt);
    else
        dispatch(sh.HS, bwd_launch<false>{s, dqkv, dout, qkv, lse, D, geo_of(sh), drop, fmt});
}

} // extern "C"
