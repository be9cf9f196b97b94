/* gemm_plan.h — the linear layers' GEMMs as cuBLASLt (column-major BLAS) calls.
 *
 * backend.h's matrices are row-major and a weight is [OC, C]; cuBLASLt's are column-major. A row-major [R, K]
 * matrix is the column-major [K, R] matrix of the same memory (its transpose), so each product is computed
 * transposed: D^T = op(A) op(B) with the operands' roles swapped. The three products of a linear layer:
 *   forward    out[N,OC]   = x[N,C] W^T          ->  out^T [OC x N] = (W as C x OC)^T . (x as C x N)
 *   input grad dinp[N,C]   = g[N,OC] W           ->  dinp^T [C x N] = (W as C x OC) . (g as OC x N)
 *   weight grad dW[OC,C]  += g^T[OC,N] x[N,C]    ->  dW^T  [C x OC] = (x as C x N) . (g as OC x N)^T
 * Pure arithmetic on shapes, header-only, so tests/test_cuda_host.c runs a plain column-major GEMM with these
 * plans against the reference backend's linear layers on any machine. */
#ifndef LLM4D_BACKEND_CUDA_GEMM_PLAN_H
#define LLM4D_BACKEND_CUDA_GEMM_PLAN_H

typedef enum { LLM4D_GEMM_FWD = 0, LLM4D_GEMM_DINP, LLM4D_GEMM_DW } llm4d_gemm_kind;

/* D (column-major m x n, leading dimension ldd) = op(A) op(B) (+ beta D), op(A) m x k, op(B) k x n; A is stored
 * k x m when transa (else m x k), B n x k when transb (else k x n). a_is_w etc. say which of the layer's tensors
 * each operand is: 'w' the weight, 'x' the input (or act(input)), 'g' the output gradient. */
typedef struct {
    int transa, transb;
    int m, n, k;
    int lda, ldb, ldd;
    char a, b; /* 'w', 'x' or 'g' */
} llm4d_gemm_plan;

static inline llm4d_gemm_plan llm4d_gemm_plan_of(llm4d_gemm_kind kind, int N, int C, int OC) {
    switch (kind) {
    case LLM4D_GEMM_FWD: return (llm4d_gemm_plan){1, 0, OC, N, C, C, C, OC, 'w', 'x'};
    case LLM4D_GEMM_DINP: return (llm4d_gemm_plan){0, 0, C, N, OC, C, OC, C, 'w', 'g'};
    default: return (llm4d_gemm_plan){0, 1, C, OC, N, C, OC, C, 'x', 'g'};
    }
}

#endif
