/* cuda_gemm.c — the CUDA backend's linear layers: cuBLASLt GEMMs and the type conversions around them.
 *
 * Precision (set_precision): fp32 multiplies fp32 operands in fp32 (CUBLAS_COMPUTE_32F: no tensor cores, the
 * numbers the CPU's fp32 GEMMs give up to summation order); tf32 multiplies the same operands on tensor cores with
 * 10-bit significands; bf16 and fp16 multiply operands stored in 16 bits and accumulate in fp32, as the CPU's mixed
 * precision does. Master weights and their gradients stay fp32 in every mode.
 *
 * Typed activations (tensor.h). An input (or output gradient) already stored in the operands' type, a bf16 tensor
 * under bf16 (O2), is given to cuBLASLt as it is; one in another type (fp32 under bf16: O1; bf16 under fp32) is
 * converted into a workspace first (k_elem.cu llm4d_k_convert), as is any input read through GELU. An output is
 * written by cuBLASLt in its own type where cuBLASLt can: fp32 always (the accumulating LLM4D_ADD: beta 1, C = D),
 * and 16 bits of the operands' type (bf16 D with the BIAS epilogue, its bias fp32; beta 1 with C = D bf16 adds in
 * fp32 and rounds once). Any other output type, or a bias cuBLASLt will not add to a 16-bit D, goes through an fp32
 * result in a workspace that a kernel stores in the output's type (llm4d_k_store_rows), so a result is rounded
 * once whichever way it is written. With every tensor fp32 the launches are the ones this file always made.
 *
 * What the CPU backend does, this does the same way: a linear layer whose input goes through GELU
 * (linear_forward_act) applies it in the kernel that converts its operand, so GELU's output is never stored; a
 * weight is converted once per update into its bf16 copy (cuda_wcache.c); the bias gradient is summed in the pass
 * that converts the output gradient, or, when the gradient needs no conversion, in a pass of its own that reads it
 * as it is stored; the forward's bias is cuBLASLt's BIAS epilogue. The GEMMs are the column-major plans of
 * gemm_plan.h. cuBLASLt's descriptors and its chosen algorithm are kept per shape and types (a step has a handful),
 * the pointers' alignment part of the key, because offsets into flat parameter buffers are only 4-byte aligned and
 * an algorithm chosen for aligned operands would read them wrong. */
#include <string.h>

#include "backend/cuda/cuda_impl.h"
#include "backend/cuda/gemm_plan.h"

#define LT_WS_BYTES ((size_t)32 << 20) /* cuBLASLt's workspace: 32 MiB, NVIDIA's advice for Hopper */

typedef struct {
    llm4d_gemm_plan p;
    int abtype;      /* cudaDataType of A and B */
    int dtype;       /* cudaDataType of C and D */
    int compute;     /* cublasComputeType_t */
    int bias;        /* BIAS epilogue asked */
    int align[4];    /* log2 of the alignment of A, B, C, D, up to 256 bytes */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
    int bias_kernel; /* the epilogue was refused: the bias is a kernel after the GEMM */
    int refused;     /* a 16-bit D cuBLASLt has no algorithm for (odd leading dimensions): D goes through fp32 */
} gemm_entry;

struct cuda_gemms {
    gemm_entry *e;
    int n, cap;
};

llm4d_code llm4d_cuda_gemm_init(cuda_ctx *cx, llm4d_err *err) {
    if (cublasLtCreate(&cx->lt) != CUBLAS_STATUS_SUCCESS)
        return llm4d_fail(err, LLM4D_EINTERNAL, "cuda: cuBLASLt cannot be initialised");
    cx->lt_ws = llm4d_cuda_dev_alloc(cx, LT_WS_BYTES);
    if (!cx->lt_ws) return llm4d_fail(err, LLM4D_ENOMEM, "cuda: out of device memory for cuBLASLt's workspace");
    cx->lt_ws_bytes = LT_WS_BYTES;
    cx->gm = calloc(1, sizeof *cx->gm);
    if (!cx->gm) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    return LLM4D_OK;
}

void llm4d_cuda_gemm_free(cuda_ctx *cx) {
    if (cx->gm) {
        for (int i = 0; i < cx->gm->n; i++) {
            gemm_entry *e = &cx->gm->e[i];
            cublasLtMatrixLayoutDestroy(e->la);
            cublasLtMatrixLayoutDestroy(e->lb);
            cublasLtMatrixLayoutDestroy(e->lc);
            cublasLtMatmulDescDestroy(e->desc);
        }
        free(cx->gm->e);
        free(cx->gm);
        cx->gm = NULL;
    }
    if (cx->lt) cublasLtDestroy(cx->lt);
    cx->lt = NULL;
}

static int align_log2(const void *p) {
    const uintptr_t a = (uintptr_t)p;
    int k = 0;
    while (k < 8 && !(a & ((uintptr_t)1 << k))) k++;
    return k;
}

static cudaDataType_t cuda_type(llm4d_ftype t) {
    return t == LLM4D_BF16 ? CUDA_R_16BF : t == LLM4D_F16 ? CUDA_R_16F : CUDA_R_32F;
}

/* field by field: the plan's padding bytes (after its two chars) are indeterminate, so memcmp could miss an entry
 * and plan the same shape again at every call */
static int same_plan(const llm4d_gemm_plan *a, const llm4d_gemm_plan *b) {
    return a->transa == b->transa && a->transb == b->transb && a->m == b->m && a->n == b->n && a->k == b->k &&
           a->lda == b->lda && a->ldb == b->ldb && a->ldd == b->ldd && a->a == b->a && a->b == b->b;
}

static int same_key(const gemm_entry *e, const llm4d_gemm_plan *p, int abtype, int dtype, int compute, int bias,
                    const int al[4]) {
    return same_plan(&e->p, p) && e->abtype == abtype && e->dtype == dtype && e->compute == compute &&
           e->bias == bias && !memcmp(e->align, al, sizeof e->align);
}

/* Whether the heuristic finds an algorithm for the entry's descriptors (and stores it). */
static int choose_algo(cuda_ctx *cx, gemm_entry *e) {
    cublasLtMatmulPreference_t pref;
    LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = cx->lt_ws_bytes;
    LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    const cublasLtMatmulPreferenceAttributes_t al_attr[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; i++) {
        const uint32_t bytes = 1u << e->align[i];
        LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, al_attr[i], &bytes, sizeof bytes));
    }
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(cx->lt, e->desc, e->la, e->lb, e->lc, e->lc, pref, 1,
                                                             &res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || found == 0) return 0;
    e->algo = res.algo;
    return 1;
}

static void set_epilogue(gemm_entry *e, int bias) {
    const cublasLtEpilogue_t epi = bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    LT_CHECK(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    if (bias) { /* fp32 whatever D's type: the bias is a parameter; cuBLASLt adds it in fp32 before rounding D */
        const cudaDataType_t bt = CUDA_R_32F;
        LT_CHECK(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt));
    }
}

static gemm_entry *entry_for(cuda_ctx *cx, const llm4d_gemm_plan *p, int abtype, int dtype, int compute, int bias,
                             const int al[4]) {
    cuda_gemms *gm = cx->gm;
    for (int i = 0; i < gm->n; i++)
        if (same_key(&gm->e[i], p, abtype, dtype, compute, bias, al)) return &gm->e[i];
    if (gm->n == gm->cap) {
        const int cap = gm->cap ? 2 * gm->cap : 32;
        gemm_entry *ne = realloc(gm->e, (size_t)cap * sizeof *ne);
        LLM4D_ASSERT(ne != NULL, "out of memory for %d GEMM plans", cap);
        gm->e = ne;
        gm->cap = cap;
    }
    gemm_entry *e = &gm->e[gm->n];
    memset(e, 0, sizeof *e);
    e->p = *p;
    e->abtype = abtype;
    e->dtype = dtype;
    e->compute = compute;
    e->bias = bias;
    memcpy(e->align, al, sizeof e->align);
    LT_CHECK(cublasLtMatmulDescCreate(&e->desc, (cublasComputeType_t)compute, CUDA_R_32F));
    const cublasOperation_t ta = p->transa ? CUBLAS_OP_T : CUBLAS_OP_N, tb = p->transb ? CUBLAS_OP_T : CUBLAS_OP_N;
    LT_CHECK(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT_CHECK(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    LT_CHECK(cublasLtMatrixLayoutCreate(&e->la, (cudaDataType_t)abtype, p->transa ? p->k : p->m,
                                        p->transa ? p->m : p->k, p->lda));
    LT_CHECK(cublasLtMatrixLayoutCreate(&e->lb, (cudaDataType_t)abtype, p->transb ? p->n : p->k,
                                        p->transb ? p->k : p->n, p->ldb));
    LT_CHECK(cublasLtMatrixLayoutCreate(&e->lc, (cudaDataType_t)dtype, p->m, p->n, p->ldd));
    set_epilogue(e, bias);
    if (!choose_algo(cx, e)) {
        if (bias) {
            set_epilogue(e, 0); /* the bias by a kernel instead */
            e->bias_kernel = 1;
        }
        /* an fp32 D always has one; a 16-bit D is then written through fp32 (gemm's caller) */
        e->refused = !(bias && choose_algo(cx, e));
        LLM4D_ASSERT(!e->refused || dtype != CUDA_R_32F,
                     "cuBLASLt has no algorithm for a %c%c GEMM m=%d n=%d k=%d (types %d -> %d, compute %d)",
                     p->transa ? 'T' : 'N', p->transb ? 'T' : 'N', p->m, p->n, p->k, abtype, dtype, compute);
    }
    gm->n++;
    return e;
}

/* D (type dt: fp32, or 16 bits of the operands' type) = the product `kind` of the layer's operands in the current
 * format (+ beta D, + bias). Returns 0, having launched nothing, when D is 16-bit and cuBLASLt cannot write it, or
 * the bias cannot be its epilogue: a bias added by a kernel to a rounded 16-bit D would round the result twice. */
static int gemm(cuda_ctx *cx, llm4d_gemm_kind kind, void *d, llm4d_ftype dt, const void *w, const void *x,
                const void *g, const float *bias, float beta, int N, int C, int OC) {
    const llm4d_gemm_plan p = llm4d_gemm_plan_of(kind, N, C, OC);
    const void *A = p.a == 'w' ? w : p.a == 'x' ? x : g, *B = p.b == 'w' ? w : p.b == 'x' ? x : g;
    const int compute = cx->prec == LLM4D_PREC_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cudaStream_t s = cx->stream[LLM4D_STREAM_COMPUTE];
    /* a bias inside a flat parameter buffer may be 4-byte aligned; the epilogue reads it in 16-byte vectors: an fp32
     * D then takes the bias by a kernel, a 16-bit D from an aligned copy (OC floats) */
    if (bias && dt != LLM4D_F32 && align_log2(bias) < 4) {
        float *b16 = llm4d_cuda_ws(cx, WS_BIAS, (size_t)OC * sizeof(float));
        CU_CHECK(cudaMemcpyAsync(b16, bias, (size_t)OC * sizeof(float), cudaMemcpyDeviceToDevice, s));
        bias = b16;
    }
    const int al[4] = {align_log2(A), align_log2(B), align_log2(d), align_log2(d)};
    const int epi = bias != NULL && align_log2(bias) >= 4;
    gemm_entry *e = entry_for(cx, &p, cuda_type(cx->fmt), cuda_type(dt), compute, epi, al);
    const int bias_kernel = bias != NULL && (!epi || e->bias_kernel);
    if (e->refused || (bias_kernel && dt != LLM4D_F32)) return 0;
    if (bias && !bias_kernel)
        LT_CHECK(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    const float alpha = 1.0f;
    LT_CHECK(cublasLtMatmul(cx->lt, e->desc, &alpha, A, e->la, B, e->lb, &beta, d, e->lc, d, e->lc, &e->algo, cx->lt_ws,
                            cx->lt_ws_bytes, s));
    if (bias_kernel) {
        llm4d_k_bias_forward(s, d, bias, N, OC);
        CU_LAUNCHED();
    }
    return 1;
}

/* out[N, cols] (= or += when add) the product `kind` (+ bias), in out's type: cuBLASLt writes fp32 and the operands'
 * 16-bit type itself; any other type, or a 16-bit bias it refuses, through an fp32 result in WS_OUT stored by a
 * kernel (the old value added in fp32, rounded once). */
static void gemm_into(cuda_ctx *cx, llm4d_gemm_kind kind, llm4d_tensor out, const void *w, const void *x,
                      const void *g, const float *bias, int add, int N, int C, int OC) {
    if (out.t == LLM4D_F32 || out.t == cx->fmt) {
        const int m = llm4d_cuda_work_begin(cx, LLM4D_WORK_GEMM);
        const int done = gemm(cx, kind, out.p, out.t, w, x, g, bias, add ? 1.0f : 0.0f, N, C, OC);
        llm4d_cuda_work_end(cx, m);
        if (done) return;
    }
    const int cols = kind == LLM4D_GEMM_FWD ? OC : C;
    float *tmp = llm4d_cuda_ws(cx, WS_OUT, (size_t)N * cols * sizeof(float));
    int m = llm4d_cuda_work_begin(cx, LLM4D_WORK_GEMM);
    gemm(cx, kind, tmp, LLM4D_F32, w, x, g, bias, 0.0f, N, C, OC);
    llm4d_cuda_work_end(cx, m);
    m = llm4d_cuda_work_begin(cx, LLM4D_WORK_CONVERT);
    llm4d_k_store_rows(cx->stream[LLM4D_STREAM_COMPUTE], out, tmp, NULL, N, cols, add);
    CU_LAUNCHED();
    llm4d_cuda_work_end(cx, m);
}

/* src (n elements, through act) as an operand of the current format: src itself when it is stored in that type and
 * no act applies, else converted into workspace w. */
static const void *operand(cuda_ctx *cx, int w, llm4d_ctensor src, size_t n, llm4d_act act) {
    if (src.t == cx->fmt && act == LLM4D_ACT_NONE) return src.p;
    void *dst = llm4d_cuda_ws(cx, w, n * llm4d_ftype_size(cx->fmt));
    const int m = llm4d_cuda_work_begin(cx, LLM4D_WORK_CONVERT);
    llm4d_k_convert(cx->stream[LLM4D_STREAM_COMPUTE], llm4d_t(dst, cx->fmt), src, n, act);
    CU_LAUNCHED();
    llm4d_cuda_work_end(cx, m);
    return dst;
}

/* db[OC] += column sums of dout[N, OC] (any type, summed in fp32 per chunk and in double over chunks) in a fixed
 * order; dst (p not NULL): dout converted to dst's type in the same pass. */
static void colsum(cuda_ctx *cx, float *db, llm4d_ctensor dout, int N, int OC, llm4d_tensor dst) {
    const int nch = (N + LLM4D_CUDA_COL_ROWS - 1) / LLM4D_CUDA_COL_ROWS;
    float *part = llm4d_cuda_ws(cx, WS_PART, (size_t)nch * OC * sizeof(float));
    cudaStream_t s = cx->stream[LLM4D_STREAM_COMPUTE];
    llm4d_k_colsum_partial(s, part, dst, dout, N, OC);
    CU_LAUNCHED();
    llm4d_k_colsum_final(s, db, part, nch, OC);
    CU_LAUNCHED();
}

static void cu_bias_backward(llm4d_backend *be, float *db, llm4d_ctensor dout, int N, int C) {
    const int m = llm4d_cuda_work_begin(cctx(be), LLM4D_WORK_GEMM);
    colsum(cctx(be), db, dout, N, C, llm4d_t(NULL, LLM4D_F32));
    llm4d_cuda_work_end(cctx(be), m);
}

static void cu_bias_forward(llm4d_backend *be, float *out, const float *b, int N, int C) {
    const int m = llm4d_cuda_work_begin(cctx(be), LLM4D_WORK_GEMM);
    llm4d_k_bias_forward(cstream(be), out, b, N, C);
    CU_LAUNCHED();
    llm4d_cuda_work_end(cctx(be), m);
}

static void cu_linear_forward_act(llm4d_backend *be, llm4d_tensor out, llm4d_ctensor inp, llm4d_act act,
                                  const float *w, const float *b, int N, int C, int OC) {
    cuda_ctx *cx = cctx(be);
    const void *x = operand(cx, WS_OP0, inp, (size_t)N * C, act);
    const void *wop = llm4d_cuda_weight(cx, w, (size_t)OC * C);
    gemm_into(cx, LLM4D_GEMM_FWD, out, wop, x, NULL, b, 0, N, C, OC);
}

static void cu_linear_forward(llm4d_backend *be, llm4d_tensor out, llm4d_ctensor inp, const float *w, const float *b,
                              int N, int C, int OC) {
    cu_linear_forward_act(be, out, inp, LLM4D_ACT_NONE, w, b, N, C, OC);
}

static void cu_linear_backward_act(llm4d_backend *be, llm4d_tensor dinp, llm4d_store dinp_store, float *dw, float *db,
                                   llm4d_ctensor dout, llm4d_ctensor inp, llm4d_act act, const float *w, int N, int C,
                                   int OC) {
    cuda_ctx *cx = cctx(be);
    if (!dinp.p && !dw) {
        if (db) cu_bias_backward(be, db, dout, N, OC);
        return;
    }
    /* the output gradient in the operand format (the bias gradient summed in the same pass), unless it is already */
    const void *g = dout.p;
    int db_done = 0;
    if (dout.t != cx->fmt) {
        void *dst = llm4d_cuda_ws(cx, WS_OP0, (size_t)N * OC * llm4d_ftype_size(cx->fmt));
        const int m = llm4d_cuda_work_begin(cx, LLM4D_WORK_CONVERT);
        if (db) {
            colsum(cx, db, dout, N, OC, llm4d_t(dst, cx->fmt));
            db_done = 1;
        } else {
            llm4d_k_convert(cstream(be), llm4d_t(dst, cx->fmt), dout, (size_t)N * OC, LLM4D_ACT_NONE);
            CU_LAUNCHED();
        }
        llm4d_cuda_work_end(cx, m);
        g = dst;
    }
    if (dinp.p) {
        const void *wop = llm4d_cuda_weight(cx, w, (size_t)OC * C);
        gemm_into(cx, LLM4D_GEMM_DINP, dinp, wop, NULL, g, NULL, dinp_store == LLM4D_ADD, N, C, OC);
    }
    if (dw) {
        const void *x = operand(cx, WS_OP1, inp, (size_t)N * C, act);
        const int m = llm4d_cuda_work_begin(cx, LLM4D_WORK_GEMM);
        gemm(cx, LLM4D_GEMM_DW, dw, LLM4D_F32, NULL, x, g, NULL, 1.0f, N, C, OC);
        llm4d_cuda_work_end(cx, m);
    }
    if (db && !db_done) cu_bias_backward(be, db, dout, N, OC);
}

static void cu_linear_backward(llm4d_backend *be, llm4d_tensor dinp, llm4d_store dinp_store, float *dw, float *db,
                               llm4d_ctensor dout, llm4d_ctensor inp, const float *w, int N, int C, int OC) {
    cu_linear_backward_act(be, dinp, dinp_store, dw, db, dout, inp, LLM4D_ACT_NONE, w, N, C, OC);
}

static llm4d_code cu_set_precision(llm4d_backend *be, llm4d_precision p, llm4d_err *err) {
    (void)err;
    cuda_ctx *cx = cctx(be);
    cx->prec = p;
    cx->fmt = llm4d_cuda_fmt_of(p);
    return LLM4D_OK;
}

/* A 4096^3 GEMM in the current precision, the best of 10 timed runs after two warm-ups: the denominator of the MFU
 * the trainer reports (bench/bench_gpu.sh also gives MFU against the datasheet's peak). Operands are normal random
 * numbers (zeros draw less power and would flatter the peak). */
#define PEAK_DIM 4096

static double cu_matmul_peak_gflops(llm4d_backend *be) {
    cuda_ctx *cx = cctx(be);
    const size_t n = (size_t)PEAK_DIM * PEAK_DIM, es = llm4d_ftype_size(cx->fmt);
    float *src = llm4d_cuda_dev_alloc(cx, n * sizeof(float)), *d = llm4d_cuda_dev_alloc(cx, n * sizeof(float));
    void *a = llm4d_cuda_dev_alloc(cx, n * es);
    double best = 0.0;
    cudaEvent_t t0 = NULL, t1 = NULL;
    if (src && d && a && cudaEventCreate(&t0) == cudaSuccess && cudaEventCreate(&t1) == cudaSuccess) {
        cudaStream_t s = cstream(be);
        const llm4d_init_spec spec = {1.0f, 0.0f, 1, 7, 0, 0, PEAK_DIM, PEAK_DIM, (int64_t)n};
        llm4d_k_init_param(s, src, spec, 0, (int64_t)n);
        llm4d_k_convert(s, llm4d_t(a, cx->fmt), llm4d_ct32(src), n, LLM4D_ACT_NONE);
        CU_LAUNCHED();
        for (int r = 0; r < 12; r++) {
            CU_CHECK(cudaEventRecord(t0, s));
            gemm(cx, LLM4D_GEMM_FWD, d, LLM4D_F32, a, a, NULL, NULL, 0.0f, PEAK_DIM, PEAK_DIM, PEAK_DIM);
            CU_CHECK(cudaEventRecord(t1, s));
            CU_CHECK(cudaEventSynchronize(t1));
            float ms = 0.0f;
            CU_CHECK(cudaEventElapsedTime(&ms, t0, t1));
            const double gf = 2.0 * PEAK_DIM * PEAK_DIM * (double)PEAK_DIM / (ms * 1e-3) / 1e9;
            if (r >= 2 && gf > best) best = gf;
        }
    }
    if (t0) cudaEventDestroy(t0);
    if (t1) cudaEventDestroy(t1);
    llm4d_cuda_dev_free(cx, src);
    llm4d_cuda_dev_free(cx, d);
    llm4d_cuda_dev_free(cx, a);
    return best;
}

/* The workspaces a step of these largest operands needs, by how its activations are stored (s.act) against the
 * operands' type (cuBLASLt's workspace and the bf16 weight copies are counted elsewhere: held from creation; the
 * plan's weight_copies):
 * - fp32 operands, fp32 activations: act(input) only (the made ones);
 * - fp32 operands, 16-bit activations: both operands widened to fp32 (input or output gradient; act(input) for the
 *   weight gradient) and a GEMM's fp32 result for a 16-bit output (WS_OUT), each at most the largest read;
 * - 16-bit operands, fp32 activations (O1): both operands converted (the attention's bf16 qkv and dout too);
 * - 16-bit operands, activations of that type (O2): act(input) for the weight gradient, and an output gradient the
 *   model keeps in fp32 (its fp32 residual stream) converted; outputs are written by cuBLASLt (a bias copied
 *   aligned: WS_BIAS), the attention reads the tensors as they are;
 * - 16-bit operands, activations of the other 16-bit type: converted as O1, and every output through WS_OUT.
 * Plus the column-sum partials and the attention's row terms (WS_PART). */
static size_t cu_operand_workspace(llm4d_backend *be, llm4d_operand_sizes s, llm4d_precision prec) {
    (void)be;
    const llm4d_ftype f = llm4d_cuda_fmt_of(prec);
    const size_t es = llm4d_ftype_size(f);
    size_t ops;
    if (f == LLM4D_F32)
        ops = s.act == LLM4D_F32 ? s.made * sizeof(float) : 3 * s.read * sizeof(float);
    else if (s.act == LLM4D_F32)
        ops = 2 * s.read * es;
    else if (s.act == f)
        ops = 2 * s.made * es + s.cols * sizeof(float);
    else
        ops = 2 * s.read * es + s.read * sizeof(float);
    return ops + (s.read / LLM4D_CUDA_COL_ROWS + 1) * 3 * sizeof(float);
}

/* one bf16 or fp16 copy per weight element (2 bytes); fp32 and tf32 read the masters: no copies */
static size_t cu_weight_copy_bytes(llm4d_backend *be, llm4d_precision prec) {
    (void)be;
    const llm4d_ftype f = llm4d_cuda_fmt_of(prec);
    return f == LLM4D_F32 ? 0 : llm4d_ftype_size(f);
}

static void cu_weights_changed(llm4d_backend *be, const void *p, size_t bytes) {
    llm4d_wcache_stale(&cctx(be)->wc, p, bytes);
}

static void cu_describe_gemms(llm4d_backend *be, char *buf, size_t n) {
    const cuda_ctx *cx = cctx(be);
    static const char *const ops[] = {"fp32 (CUBLAS_COMPUTE_32F, no tensor cores)", "bf16 (fp32 accumulation, "
                                      "outputs in their tensors' types)", "fp16 (fp32 accumulation, outputs in "
                                      "their tensors' types)", "tf32 (fp32 operands, tensor cores)"};
    snprintf(buf, n, "cuBLASLt on GPU %d (%s, sm_%d%d, %d SMs): operands %s, %d GEMM shapes planned; attention: "
             "%s", cx->device, cx->gpu_name, cx->cc_major, cx->cc_minor, cx->sm_count, ops[cx->prec],
             cx->gm ? cx->gm->n : 0,
             cx->fmt == LLM4D_BF16 && !cx->attn_simt_only
                 ? "flash kernels on tensor cores (mma.sync bf16) for head sizes 16/32/64/128, fp32 SIMT otherwise"
                 : "flash kernels in fp32 (SIMT), operands rounded to the format");
}

void llm4d_cuda_gemm_install(llm4d_backend *be) {
    be->linear_forward = cu_linear_forward;
    be->linear_backward = cu_linear_backward;
    be->linear_forward_act = cu_linear_forward_act;
    be->linear_backward_act = cu_linear_backward_act;
    be->bias_forward = cu_bias_forward;
    be->bias_backward = cu_bias_backward;
    be->set_precision = cu_set_precision;
    be->matmul_peak_gflops = cu_matmul_peak_gflops;
    be->operand_workspace = cu_operand_workspace;
    be->weight_copy_bytes = cu_weight_copy_bytes;
    be->weights_changed = cu_weights_changed;
    be->describe_gemms = cu_describe_gemms;
}
