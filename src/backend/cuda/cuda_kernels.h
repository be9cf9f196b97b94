/* cuda_kernels.h — the C entry points of the CUDA backend's kernels (the k_*.cu files), called by its host files.
 *
 * Every kernel of the backend is launched through one of these functions, so the host side stays C17 and the CUDA
 * C++ stays inside the .cu files. Each takes the stream to launch on first and returns at once (asynchronous);
 * launch errors are checked by the caller's next CUDA call (cuda_impl.h CU_CHECK after the launch). Arguments
 * follow backend.h's method of the same name: outputs first, device pointers, shapes last. Activations are typed
 * tensors (tensor.h: llm4d_tensor, llm4d_ctensor), each of its own type, read as fp32 and rounded once on store
 * (k_common.cuh); a call whose tensors are all fp32 runs the kernels' fp32 forms, the arithmetic they always had.
 * Operand formats (`fmt`: how a GEMM stores its operands, what the attention rounds to) are llm4d_ftype values. */
#ifndef LLM4D_BACKEND_CUDA_KERNELS_H
#define LLM4D_BACKEND_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A run of a parameter range with a low-precision copy: elements [lo, hi) of the range, written to dst (the copy
 * of element lo) in format fmt (an llm4d_ftype). The optimizer writes them in its pass (k_optim.cu). */
typedef struct {
    size_t lo, hi;
    void *dst;
    int fmt;
} llm4d_cuda_span;
#define LLM4D_CUDA_MAX_SPANS 32 /* per launch; more spans take more launches (cuda_ops.c) */

/* Fixed reduction geometry (sumsq, dot): elements per chunk and threads per block. The bits of a sum depend on
 * these constants only, never on the device's size. */
#define LLM4D_CUDA_RED_CHUNK 16384
#define LLM4D_CUDA_RED_THREADS 256
/* Rows per partial sum of the column sums (bias and LayerNorm weight gradients). */
#define LLM4D_CUDA_COL_ROWS 64

/* One chunk of a fused reduction (sumsq_many): len elements of x (and y, or NULL) into partial `part`. */
typedef struct {
    const float *x, *y;
    unsigned len;
    unsigned part;
} llm4d_cuda_chunk;

/* k_elem.cu */
void llm4d_k_embedding_forward(cudaStream_t s, float *out, const int32_t *tokens, const float *w, int row0, int nrows,
                               int N, int C);
void llm4d_k_embedding_backward(cudaStream_t s, float *dw, const float *dout, const int32_t *tokens, int row0,
                                int nrows, int N, int C);
void llm4d_k_position_forward(cudaStream_t s, float *out, const float *wpe, int N, int C, int T, int64_t tok0);
void llm4d_k_position_backward(cudaStream_t s, float *dwpe, const float *dout, int N, int C, int T, int64_t tok0);
void llm4d_k_bias_forward(cudaStream_t s, float *out, const float *b, int N, int C);
/* part[(N / COL_ROWS rounded up) x C] = column sums of each chunk of rows of src (read as fp32); dst (p not NULL):
 * src converted to dst's type in the same pass. Then db[c] += the chunks' sums in chunk order. */
void llm4d_k_colsum_partial(cudaStream_t s, float *part, llm4d_tensor dst, llm4d_ctensor src, int N, int C);
void llm4d_k_colsum_final(cudaStream_t s, float *db, const float *part, int nchunks, int C);
void llm4d_k_add(cudaStream_t s, float *dst, const float *src, size_t n);
void llm4d_k_scale(cudaStream_t s, float *x, float f, size_t n);
/* dst = act(src) in dst's type, n elements of any two types (a copy when the types agree and act is none); dst and
 * src do not overlap, or are the same memory of the same type (then nothing is done) */
void llm4d_k_convert(cudaStream_t s, llm4d_tensor dst, llm4d_ctensor src, size_t n, llm4d_act act);
/* dst[N, C] = src + b (b NULL: src), or dst + src when add: a GEMM's fp32 result stored into a tensor cuBLASLt could
 * not write, computed in fp32 and rounded once to dst's type */
void llm4d_k_store_rows(cudaStream_t s, llm4d_tensor dst, const float *src, const float *b, int N, int C, int add);

/* k_norm.cu */
void llm4d_k_layernorm_forward(cudaStream_t s, llm4d_tensor out, float *mean, float *rstd, llm4d_ctensor inp,
                               const float *w, const float *b, int N, int C);
/* dinp += ...; part [2 x nchunks x C]: the chunks' dw, db sums (then llm4d_k_colsum_final twice) */
void llm4d_k_layernorm_backward(cudaStream_t s, llm4d_tensor dinp, float *part, llm4d_ctensor dout, llm4d_ctensor inp,
                                const float *w, const float *mean, const float *rstd, int N, int C);

/* k_act.cu */
void llm4d_k_gelu_forward(cudaStream_t s, llm4d_tensor out, llm4d_ctensor inp, size_t n);
void llm4d_k_gelu_backward(cudaStream_t s, llm4d_tensor dinp, llm4d_ctensor inp, llm4d_ctensor dout, size_t n);
/* mode: 0 out = inp * m; 1 dinp += dout * m; 2 out = res + x * m; 3 dres = dout, dx = dout * m (a, b, c, d are
 * the method's tensors in order; those a mode does not use have p NULL) */
void llm4d_k_dropout(cudaStream_t s, int mode, llm4d_tensor a, llm4d_tensor b, llm4d_ctensor c, llm4d_ctensor d, int N,
                     int C, llm4d_dropout drop);

/* k_llama.cu (the Llama family) */
void llm4d_k_rmsnorm_forward(cudaStream_t s, llm4d_tensor out, float *rstd, llm4d_ctensor inp, const float *w, int N,
                             int C, float eps);
/* dinp += ...; part [nchunks x C]: the chunks' dw sums (then llm4d_k_colsum_final) */
void llm4d_k_rmsnorm_backward(cudaStream_t s, llm4d_tensor dinp, float *part, llm4d_ctensor dout, llm4d_ctensor inp,
                              const float *w, const float *rstd, int N, int C);
/* out = inp turned by sign (1: forward, -1: backward) times the angles; out may be inp */
void llm4d_k_rope(cudaStream_t s, llm4d_tensor out, llm4d_ctensor inp, llm4d_rope_shape sh, float sign);
void llm4d_k_swiglu_forward(cudaStream_t s, llm4d_tensor out, llm4d_ctensor inp, int N, int F);
void llm4d_k_swiglu_backward(cudaStream_t s, llm4d_tensor dinp, llm4d_ctensor inp, llm4d_ctensor dout, int N, int F);

/* k_xent.cu */
void llm4d_k_xent_forward(cudaStream_t s, float *stats, llm4d_ctensor logits, const int32_t *targets, int N, int Vl,
                          int v0, int V, int merge);
void llm4d_k_xent_rescale(cudaStream_t s, float *stats, const float *gmax, int N);
/* dlogits p NULL: no gradient; it may be logits itself (the same type) */
void llm4d_k_xent_backward(cudaStream_t s, float *losses, llm4d_tensor dlogits, llm4d_ctensor logits,
                           const float *stats, const int32_t *targets, const float *dloss, int N, int Vl, int v0,
                           int V);

/* k_optim.cu */
typedef struct {
    float gs, decay, b1, b2, omb1, omb2, lr_t, eps_t;
} llm4d_cuda_adamw;
void llm4d_k_adamw(cudaStream_t s, float *p, float *g, float *m, float *v, size_t n, llm4d_cuda_adamw k,
                   int zero_grads, const llm4d_cuda_span *spans, int nspans);
/* part[c] = the sum over chunk c of x[i]^2 (mode 0), x[i] y[i] (1) or x[i] (2), chunks of RED_CHUNK elements of
 * one tensor; or of a table of chunks (device memory) */
void llm4d_k_reduce_flat(cudaStream_t s, double *part, const float *x, const float *y, size_t n, int mode);
void llm4d_k_reduce_table(cudaStream_t s, double *part, const llm4d_cuda_chunk *table, int nchunks, int mode);
/* out[k] (= or +=, add) the sum of part[first[k] .. first[k+1]) in a fixed order, for k < ntensors; first in
 * device memory */
void llm4d_k_reduce_final(cudaStream_t s, double *out, const double *part, const unsigned *first, int ntensors,
                          int add);
/* the same for one tensor of nparts partials (first not needed) */
void llm4d_k_reduce_final1(cudaStream_t s, double *out, const double *part, unsigned nparts, int add);
void llm4d_k_init_param(cudaStream_t s, float *dst, llm4d_init_spec spec, int64_t j0, int64_t j1);

/* k_gen.cu */
void llm4d_k_attention_cached(cudaStream_t s, float *out, const float *qkv, const float *kc, const float *vc, int n,
                              int p0, int NH, int NKV, int HS, float *scores, int ld);

/* k_attn_simt.cu (the kernels: k_attn_simt.cuh; their typed forms launched by k_attn_simt_typed.cu): any HS <= 256,
 * fp32 arithmetic on typed qkv and dout; operands rounded to fmt as they are read (bf16 and fp16 as the CPU
 * emulates them); out and dqkv stored in their types. D: scratch of B NH T floats. */
int llm4d_k_attn_simt_ok(int HS);
void llm4d_k_attn_forward_simt(cudaStream_t s, llm4d_tensor out, float *lse, llm4d_ctensor qkv, llm4d_attn_shape sh,
                               llm4d_dropout drop, int fmt);
void llm4d_k_attn_backward_simt(cudaStream_t s, llm4d_tensor dqkv, llm4d_ctensor dout, llm4d_ctensor qkv,
                                const float *lse, const float *D, llm4d_attn_shape sh, llm4d_dropout drop, int fmt);
/* D[b, h, t] = dout . out over the head's dims (both kernels' softmax-backward row term) */
void llm4d_k_attn_rowdot(cudaStream_t s, float *D, llm4d_ctensor dout, llm4d_ctensor out, llm4d_attn_shape sh);

/* k_attn_mma.cu: tensor cores (mma.sync m16n8k16, bf16 in, fp32 accumulate) for HS in {16, 32, 64, 128}. qkv16 and
 * dout16 are qkv and dout in bf16, qkv's and dout's layouts, 16-byte aligned (the tensors themselves when they are
 * bf16 and aligned, else converted: llm4d_k_convert); out and dqkv are stored in their types (16 bits: two columns a
 * store, the tensor 4-byte aligned); D from llm4d_k_attn_rowdot. */
int llm4d_k_attn_mma_ok(int HS);
void llm4d_k_attn_forward_mma(cudaStream_t s, llm4d_tensor out, float *lse, const void *qkv16, llm4d_attn_shape sh,
                              llm4d_dropout drop);
void llm4d_k_attn_backward_mma(cudaStream_t s, llm4d_tensor dqkv, const void *dout16, const void *qkv16,
                               const float *lse, const float *D, llm4d_attn_shape sh, llm4d_dropout drop);

/* k_gen.cu: whether the kernels of this build can run on the current device (cudaSuccess) or why not */
cudaError_t llm4d_k_probe(void);

#ifdef __cplusplus
}
#endif

#endif
