/* cpu_dnnl.h — a cache of oneDNN matmul primitives for the CPU backend (private to src/backend and bench/).
 *
 * Creating a oneDNN primitive costs milliseconds (it JIT-compiles a kernel), running one costs what the GEMM
 * costs, so every distinct GEMM the model issues (a handful of shapes per layer) is created once and then
 * reused: the cache is keyed by the full description below (sizes, strides, data type, scale, accumulate, bias).
 * All operands are described by strides over plain row-major buffers, so transposes and the attention's
 * per-head views into qkv are expressed without copies. Memory objects and the scratchpad are owned by the cache
 * too, so a call on a known shape allocates nothing (oneDNN's scratchpad is in "user" mode, one buffer per thread
 * slot shared by all primitives, grown only when a new shape is created).
 *
 * The cache itself is not thread-safe: one caller thread creates and runs primitives (oneDNN parallelises each
 * GEMM inside with OpenMP), except for llm4d_dnnl_run_mt below. */
#ifndef LLM4D_BACKEND_CPU_DNNL_H
#define LLM4D_BACKEND_CPU_DNNL_H

#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

typedef struct llm4d_dnnl llm4d_dnnl;

typedef enum { LLM4D_DNNL_F32 = 0, LLM4D_DNNL_BF16 = 1 } llm4d_dnnl_type;

/* C[b0,b1][M,N] (=|+=) alpha * (A[b0,b1][M,K] B[b0,b1][K,N] + bias[N]) (oneDNN 2.x output scales apply after
 * the bias).
 * Element (m,k) of A for batch (i,j) lives at a[i*a_bs[0] + j*a_bs[1] + m*a_rs + k*a_cs] (strides in elements),
 * likewise B (k,n) and C (m,n). Unused batch dims have size 1 (their strides are then ignored). A and B share
 * `ab_type` (fp32 or bf16); C is `c_type` (fp32, or bf16 with bf16 operands: the result rounded once, after the
 * bias and any accumulation); bias is fp32. accumulate: C += ... instead of C = .... */
typedef struct {
    int64_t batch[2];
    int64_t M, N, K;
    int64_t a_bs[2], a_rs, a_cs;
    int64_t b_bs[2], b_rs, b_cs;
    int64_t c_bs[2], c_rs, c_cs;
    float alpha;
    int accumulate;
    int has_bias;
    llm4d_dnnl_type ab_type;
    llm4d_dnnl_type c_type;
} llm4d_dnnl_mm;

/* Engine + stream on CPU 0. Fails with LLM4D_EINTERNAL naming the oneDNN status. */
llm4d_code llm4d_dnnl_create(llm4d_dnnl **out, llm4d_err *err);
void llm4d_dnnl_destroy(llm4d_dnnl *d);

/* Create (if not cached) the primitive for mm; useful to report creation errors before the hot path and to
 * time creation apart from execution. impl (may be NULL) receives the implementation name ("brg:avx512_core"). */
llm4d_code llm4d_dnnl_prepare(llm4d_dnnl *d, const llm4d_dnnl_mm *mm, const char **impl, llm4d_err *err);

/* Run mm on the given buffers (bias may be NULL when !has_bias). A creation failure here is an internal bug in
 * the caller's description and aborts with the oneDNN status (the ops using this have no error channel). */
void llm4d_dnnl_matmul(llm4d_dnnl *d, const llm4d_dnnl_mm *mm, const void *a, const void *b, const float *bias,
                       void *c);

/* Concurrent use from the threads of an OpenMP parallel region, each running its own (single-threaded: oneDNN
 * does not nest parallelism) GEMM: worthwhile when there are many small independent GEMMs, such as one per
 * attention head. llm4d_dnnl_get_mt (outside any parallel region) creates the primitive if needed and
 * per-thread memory objects, streams and scratchpads for omp_get_max_threads() threads; llm4d_dnnl_run_mt
 * (inside the region) runs it on the calling thread's resources. */
typedef struct llm4d_dnnl_prim llm4d_dnnl_prim;
llm4d_dnnl_prim *llm4d_dnnl_get_mt(llm4d_dnnl *d, const llm4d_dnnl_mm *mm);
void llm4d_dnnl_run_mt(llm4d_dnnl *d, llm4d_dnnl_prim *p, const void *a, const void *b, const float *bias,
                       float *c);

/* Convenience constructors for the common 2-D cases (no batch). lda etc. are row strides; ta/tb: the operand is
 * stored transposed (A given as [K,M] row-major with row stride lda, B as [N,K]). */
llm4d_dnnl_mm llm4d_dnnl_mm_2d(int64_t M, int64_t N, int64_t K, int ta, int64_t lda, int tb, int64_t ldb,
                               int64_t ldc, int accumulate);

/* The implementations oneDNN chose for the cached primitives, "name xcount, ..." (mt = 0: those run by
 * llm4d_dnnl_matmul; mt = 1: those prepared by llm4d_dnnl_get_mt), written to buf (empty when there are none). */
void llm4d_dnnl_impls(const llm4d_dnnl *d, int mt, char *buf, size_t n);

/* Number of primitives created so far (tests check that repeated shapes hit the cache). */
int llm4d_dnnl_cache_size(const llm4d_dnnl *d);
/* Bytes of the shared scratchpad (the largest any cached primitive needs); memory not in llm4d_mem's books. */
size_t llm4d_dnnl_scratch_bytes(const llm4d_dnnl *d);

#endif
