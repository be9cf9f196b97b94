// k_attn_simt_typed.cu — the portable attention kernels (k_attn_simt.cuh) launched in their typed forms, for calls
// with any 16-bit tensor (fp16 AMP, bf16 at head sizes the tensor-core kernels do not take, 16-bit tensors under
// fp32 GEMMs). A file of its own so that it compiles beside the fp32 forms instead of after them.
#include "backend/cuda/k_attn_simt.cuh"

namespace llm4d_k {

void attn_simt_forward_typed(cudaStream_t s, llm4d_tensor out, float *lse, llm4d_ctensor qkv, llm4d_attn_shape sh,
                             llm4d_dropout drop, int fmt) {
    dispatch(sh.HS, fwd_launch<true>{s, out, lse, qkv, geo_of(sh), drop, fmt});
}

void attn_simt_backward_typed(cudaStream_t s, llm4d_tensor dqkv, llm4d_ctensor dout, llm4d_ctensor qkv,
                              const float *lse, const float *D, llm4d_attn_shape sh, llm4d_dropout drop, int fmt) {
    dispatch(sh.HS, bwd_launch<true>{s, dqkv, dout, qkv, lse, D, geo_of(sh), drop, fmt});
}

} // namespace llm4d_k
