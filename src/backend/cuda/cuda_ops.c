/* cuda_ops.c — the CUDA backend's methods other than memory and the linear layers: each launches its kernels
 * (k_*.cu) on the compute stream inside a work timer, and the few that return a value read it back.
 *
 * The reductions (sumsq, sumsq_many, dot, dot_acc) sum fixed chunks of LLM4D_CUDA_RED_CHUNK elements into double
 * partials and the partials in a fixed tree, so their bits depend on the sizes only, never on the launch or the
 * device; sumsq_many does every tensor's chunks in one launch from a table and reads the n sums back at once, each
 * equal to what sumsq gives that tensor. The attention chooses its kernels here: the tensor-core ones (bf16, head
 * sizes 16/32/64/128), which read bf16 qkv and dout (the tensors as they are when the model keeps them in bf16,
 * else converted), or the portable fp32 ones, which read any type and also emulate bf16 and fp16 by rounding their
 * operands; both write out and dqkv in their tensors' types. Activation arguments are typed (tensor.h) and go to
 * the kernels as they are: each kernel reads and stores the types itself (k_common.cuh); `convert` is the kernel
 * of the GEMM operands' conversions, timed as element-wise work (a copy between types the model asks for).
 * Sampling copies the logits to the host and draws there with the CPU backends' code (host_sample.c): one token's
 * logits are 200 KB, and the host's draw is the one every backend must agree with. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_impl.h"
#include "backend/host.h"

#define TIMED(be, kind, ...)                                                                                     \
    do {                                                                                                         \
        const int mark_ = llm4d_cuda_work_begin(cctx(be), kind);                                                 \
        __VA_ARGS__;                                                                                             \
        CU_LAUNCHED();                                                                                           \
        llm4d_cuda_work_end(cctx(be), mark_);                                                                    \
    } while (0)

static llm4d_dropout drop_of(const llm4d_dropout *d) {
    if (d && d->p > 0.0f) return *d;
    llm4d_dropout none;
    memset(&none, 0, sizeof none);
    return none;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* embeddings, LayerNorm, GELU, the Llama family's RMSNorm, RoPE and SwiGLU, dropout, small helpers */

static void cu_embedding_forward(llm4d_backend *be, float *out, const int32_t *tokens, const float *w, int row0,
                                 int nrows, int N, int C) {
    TIMED(be, LLM4D_WORK_ELEM, llm4d_k_embedding_forward(cstream(be), out, tokens, w, row0, nrows, N, C));
}

static void cu_embedding_backward(llm4d_backend *be, float *dw, const float *dout, const int32_t *tokens, int row0,
                                  int nrows, int N, int C) {
    TIMED(be, LLM4D_WORK_ELEM, llm4d_k_embedding_backward(cstream(be), dw, dout, tokens, row0, nrows, N, C));
}

static void cu_position_forward(llm4d_backend *be, float *out, const float *wpe, int N, int C, int T, int64_t tok0) {
    TIMED(be, LLM4D_WORK_ELEM, llm4d_k_position_forward(cstream(be), out, wpe, N, C, T, tok0));
}

static void cu_position_backward(llm4d_backend *be, float *dwpe, const float *dout, int N, int C, int T,
                                 int64_t tok0) {
    TIMED(be, LLM4D_WORK_ELEM, llm4d_k_position_backward(cstream(be), dwpe, dout, N, C, T, tok0));
}

static void cu_layernorm_forward(llm4d_backend *be, llm4d_tensor out, float *mean, float *rstd, llm4d_ctensor inp,
                                 const float *w, const float *b, int N, int C) {
    TIMED(be, LLM4D_WORK_ELEM, llm4d_k_layernorm_forward(cstream(be), out, mean, rstd, inp, w, b, N, C));
}

static void cu_layernorm_backward(llm4d_backend *be, llm4d_tensor dinp, float *dw, float *db, llm4d_ctensor dout,
                                  llm4d_ctensor inp, const float *w, const float *mean, const float *rstd, int N,
                                  int C) {
    cuda_ctx *cx = cctx(be);
    const int nch = (N + LLM4D_CUDA_COL_ROWS - 1) / LLM4D_CUDA_COL_ROWS;
    float *part = llm4d_cuda_ws(cx, WS_PART, 2 * (size_t)nch * C * sizeof(float));
    TIMED(be, LLM4D_WORK_ELEM, {
        llm4d_k_layernorm_backward(cstream(be), dinp, part, dout, inp, w, mean, rstd, N, C);
        llm4d_k_colsum_final(cstream(be), dw, part, nch, C);
        llm4d_k_colsum_final(cstream(be), db, part + (size_t)nch * C, nch, C);
    });
}

static void cu_gelu_forward(llm4d_backend *be, llm4d_tensor out, llm4d_ctensor inp, size_t n) {
    TIMED(be, LLM4D_WORK_ELEM, llm4d_k_gelu_forward(cstream(be), out, inp, n));
}

static void cu_gelu_backward(llm4d_backend *be, llm4d_tensor dinp, llm4d_ctensor inp, llm4d_ctensor dout, size_t n) {
    TIMED(be, LLM4D_WORK_ELEM, llm4d_k_gelu_backward(cstream(be), dinp, inp, dout, n));
}

static void cu_rmsnorm_forward(llm4d_backend *be, llm4d_tensor out, float *rstd, llm4d_ctensor inp, const float *w,
                               int N, int C, float eps) {
    TIMED(be, LLM4D_WORK_ELEM, llm4d_k_rmsnorm_forward(cstream(be), out, rstd, inp, w, N, C, eps));
}

static void cu_rmsnorm_backward(llm4d_backend *be, llm4d_tensor dinp, float *dw, llm4d_ctensor dout,
                                llm4d_ctensor inp, const float *w, const float *rstd, int N, int C) {
    cuda_ctx *cx = cctx(be);
    const int nch = (N + LLM4D_CUDA_COL_ROWS - 1) / LLM4D_CUDA_COL_ROWS;
    float *part = llm4d_cuda_ws(cx, WS_PART, (size_t)nch * C * sizeof(float));
    TIMED(be, LLM4D_WORK_ELEM, {
        llm4d_k_rmsnorm_backward(cstream(be), dinp, part, dout, inp, w, rstd, N, C);
        llm4d_k_colsum_final(cstream(be), dw, part, nch, C);
    });
}

static void cu_rope_forward(llm4d_backend *be, llm4d_tensor out, llm4d_ctensor inp, llm4d_rope_shape s) {
    TIMED(be, LLM4D_WORK_ELEM, llm4d_k_rope(cstream(be), out, inp, s, 1.0f));
}

static void cu_rope_backward(llm4d_backend *be, llm4d_tensor dinp, llm4d_ctensor dout, llm4d_rope_shape s) {
    TIMED(be, LLM4D_WORK_ELEM, llm4d_k_rope(cstream(be), dinp, dout, s, -1.0f));
}

static void cu_swiglu_forward(llm4d_backend *be, llm4d_tensor out, llm4d_ctensor inp, int N, int F) {
    TIMED(be, LLM4D_WORK_ELEM, llm4d_k_swiglu_forward(cstream(be), out, inp, N, F));
}

static void cu_swiglu_backward(llm4d_backend *be, llm4d_tensor dinp, llm4d_ctensor inp, llm4d_ctensor dout, int N,
                               int F) {
    TIMED(be, LLM4D_WORK_ELEM, llm4d_k_swiglu_backward(cstream(be), dinp, inp, dout, N, F));
}

/* the tensors a dropout mode does not use */
static const llm4d_tensor NO_T = {NULL, LLM4D_F32};
static const llm4d_ctensor NO_CT = {NULL, LLM4D_F32};

static void cu_dropout_forward(llm4d_backend *be, llm4d_tensor out, llm4d_ctensor inp, int N, int C,
                               const llm4d_dropout *drop) {
    TIMED(be, LLM4D_WORK_ELEM, llm4d_k_dropout(cstream(be), 0, out, NO_T, inp, NO_CT, N, C, drop_of(drop)));
}

static void cu_dropout_backward(llm4d_backend *be, llm4d_tensor dinp, llm4d_ctensor dout, int N, int C,
                                const llm4d_dropout *drop) {
    TIMED(be, LLM4D_WORK_ELEM, llm4d_k_dropout(cstream(be), 1, dinp, NO_T, dout, NO_CT, N, C, drop_of(drop)));
}

static void cu_dropout_add_forward(llm4d_backend *be, llm4d_tensor out, llm4d_ctensor res, llm4d_ctensor x, int N,
                                   int C, const llm4d_dropout *drop) {
    TIMED(be, LLM4D_WORK_ELEM, llm4d_k_dropout(cstream(be), 2, out, NO_T, res, x, N, C, drop_of(drop)));
}

static void cu_dropout_add_backward(llm4d_backend *be, llm4d_tensor dres, llm4d_tensor dx, llm4d_ctensor dout, int N,
                                    int C, const llm4d_dropout *drop) {
    TIMED(be, LLM4D_WORK_ELEM, llm4d_k_dropout(cstream(be), 3, dres, dx, dout, NO_CT, N, C, drop_of(drop)));
}

static void cu_add(llm4d_backend *be, float *dst, const float *src, size_t n) {
    TIMED(be, LLM4D_WORK_ELEM, llm4d_k_add(cstream(be), dst, src, n));
}

static void cu_scale(llm4d_backend *be, float *x, float s, size_t n) {
    TIMED(be, LLM4D_WORK_ELEM, llm4d_k_scale(cstream(be), x, s, n));
}

static void cu_convert(llm4d_backend *be, llm4d_tensor dst, llm4d_ctensor src, size_t n) {
    TIMED(be, LLM4D_WORK_ELEM, llm4d_k_convert(cstream(be), dst, src, n, LLM4D_ACT_NONE));
}

static void cu_init_param(llm4d_backend *be, float *dst, const llm4d_init_spec *spec, int64_t j0, int64_t j1) {
    if (j1 <= j0) return;
    TIMED(be, LLM4D_WORK_ELEM, llm4d_k_init_param(cstream(be), dst, *spec, j0, j1));
}

/* ---------------------------------------------------------------------------------------------------------- */
/* cross-entropy */

static void cu_xent_forward(llm4d_backend *be, float *stats, llm4d_ctensor logits, const int32_t *targets, int N,
                            int Vl, int v0, int V, int merge) {
    TIMED(be, LLM4D_WORK_LOSS, llm4d_k_xent_forward(cstream(be), stats, logits, targets, N, Vl, v0, V, merge));
}

static void cu_xent_rescale(llm4d_backend *be, float *stats, const float *gmax, int N) {
    TIMED(be, LLM4D_WORK_LOSS, llm4d_k_xent_rescale(cstream(be), stats, gmax, N));
}

static void cu_xent_backward(llm4d_backend *be, float *losses, llm4d_tensor dlogits, llm4d_ctensor logits,
                             const float *stats, const int32_t *targets, const float *dloss, int N, int Vl, int v0,
                             int V) {
    TIMED(be, LLM4D_WORK_LOSS,
          llm4d_k_xent_backward(cstream(be), losses, dlogits, logits, stats, targets, dloss, N, Vl, v0, V));
}

/* ---------------------------------------------------------------------------------------------------------- */
/* attention */

/* The tensor-core kernels: bf16 operands, a head size they take, and 16-bit outputs whose column pairs are 4-byte
 * aligned (k_attn_mma.cu stores them in pairs). */
static int use_mma(const cuda_ctx *cx, int HS, llm4d_tensor out) {
    return cx->fmt == LLM4D_BF16 && !cx->attn_simt_only && llm4d_k_attn_mma_ok(HS) &&
           (out.t == LLM4D_F32 || (uintptr_t)out.p % 4 == 0);
}

/* t (n elements) in bf16, 16-byte aligned, as the tensor-core kernels read it: t itself when it is, else converted
 * (or copied to alignment) into workspace w */
static const void *bf16_of(llm4d_backend *be, int w, llm4d_ctensor t, size_t n) {
    if (t.t == LLM4D_BF16 && (uintptr_t)t.p % 16 == 0) return t.p;
    void *d = llm4d_cuda_ws(cctx(be), w, n * 2);
    TIMED(be, LLM4D_WORK_ATTN, llm4d_k_convert(cstream(be), llm4d_t(d, LLM4D_BF16), t, n, LLM4D_ACT_NONE));
    return d;
}

static void cu_attention_forward(llm4d_backend *be, llm4d_tensor out, float *lse, llm4d_ctensor qkv,
                                 llm4d_attn_shape s, const llm4d_dropout *drop) {
    cuda_ctx *cx = cctx(be);
    const size_t n = LLM4D_ATTN_QKV_ELEMS(s);
    LLM4D_ASSERT(llm4d_k_attn_simt_ok(s.HS), "cuda: attention head size %d is beyond the kernels' 256", s.HS);
    LLM4D_ASSERT(s.NH % LLM4D_ATTN_NKV(s) == 0, "cuda: %d query heads do not split into %d key/value heads", s.NH,
                 LLM4D_ATTN_NKV(s));
    if (use_mma(cx, s.HS, out)) { /* two stretches, so the sites table tells the conversion from the kernel */
        const void *q16 = bf16_of(be, WS_OP0, qkv, n);
        TIMED(be, LLM4D_WORK_ATTN, llm4d_k_attn_forward_mma(cstream(be), out, lse, q16, s, drop_of(drop)));
    } else {
        TIMED(be, LLM4D_WORK_ATTN,
              llm4d_k_attn_forward_simt(cstream(be), out, lse, qkv, s, drop_of(drop), cx->fmt));
    }
}

static void cu_attention_backward(llm4d_backend *be, llm4d_tensor dqkv, llm4d_ctensor dout, llm4d_ctensor out,
                                  llm4d_ctensor qkv, const float *lse, llm4d_attn_shape s, const llm4d_dropout *drop) {
    cuda_ctx *cx = cctx(be);
    const size_t n = LLM4D_ATTN_QKV_ELEMS(s), nout = LLM4D_ATTN_ELEMS(s);
    LLM4D_ASSERT(s.NH % LLM4D_ATTN_NKV(s) == 0, "cuda: %d query heads do not split into %d key/value heads", s.NH,
                 LLM4D_ATTN_NKV(s));
    float *D = llm4d_cuda_ws(cx, WS_PART, (size_t)s.B * s.NH * s.T * sizeof(float));
    TIMED(be, LLM4D_WORK_ATTN, llm4d_k_attn_rowdot(cstream(be), D, dout, out, s));
    if (use_mma(cx, s.HS, dqkv)) {
        const void *q16 = bf16_of(be, WS_OP0, qkv, n), *d16 = bf16_of(be, WS_OP1, dout, nout);
        TIMED(be, LLM4D_WORK_ATTN, llm4d_k_attn_backward_mma(cstream(be), dqkv, d16, q16, lse, D, s, drop_of(drop)));
    } else {
        TIMED(be, LLM4D_WORK_ATTN,
              llm4d_k_attn_backward_simt(cstream(be), dqkv, dout, qkv, lse, D, s, drop_of(drop), cx->fmt));
    }
}

static void cu_attention_cached(llm4d_backend *be, float *out, const float *qkv, const float *kc, const float *vc,
                                int n, int p0, int NH, int NKV, int HS, float *scores, int ld) {
    TIMED(be, LLM4D_WORK_ATTN,
          llm4d_k_attention_cached(cstream(be), out, qkv, kc, vc, n, p0, NH, NKV, HS, scores, ld));
}

/* ---------------------------------------------------------------------------------------------------------- */
/* the optimizer */

static int by_lo(const void *a, const void *b) {
    const llm4d_wspan *x = a, *y = b;
    return (x->lo > y->lo) - (x->lo < y->lo);
}

static void cu_adamw(llm4d_backend *be, float *params, float *grads, float *m, float *v, size_t n, float lr,
                     float beta1, float beta2, float eps, float wd, int t, float grad_scale, int zero_grads) {
    cuda_ctx *cx = cctx(be);
    const double bc1 = 1.0 - pow(beta1, t), bc2 = 1.0 - pow(beta2, t);
    const llm4d_cuda_adamw k = {grad_scale, lr * wd, beta1, beta2, 1.0f - beta1, 1.0f - beta2,
                                (float)(lr * sqrt(bc2) / bc1), (float)(eps * sqrt(bc2))};
    cx->optim_bytes += (zero_grads ? 32.0 : 28.0) * (double)n;
    llm4d_wspan *sp;
    const int nsp = llm4d_wcache_spans(&cx->wc, params, n, &sp);
    qsort(sp, (size_t)nsp, sizeof *sp, by_lo);
    for (int i = 1; i < nsp; i++)
        LLM4D_ASSERT(sp[i].lo >= sp[i - 1].hi, "cuda: weight copies overlap inside one optimizer range (%zu < %zu)",
                     sp[i].lo, sp[i - 1].hi);
    TIMED(be, LLM4D_WORK_OPTIM, {
        /* a launch per LLM4D_CUDA_MAX_SPANS copies: the range cut where the next launch's first copy starts */
        size_t a = 0;
        int first = 0;
        do {
            const int cnt = nsp - first < LLM4D_CUDA_MAX_SPANS ? nsp - first : LLM4D_CUDA_MAX_SPANS;
            const size_t b = first + cnt < nsp ? sp[first + cnt].lo : n;
            llm4d_cuda_span local[LLM4D_CUDA_MAX_SPANS];
            for (int j = 0; j < cnt; j++) { /* the kernel's span: dst is the copy of the run's first element */
                const llm4d_wspan *w = &sp[first + j];
                local[j] = (llm4d_cuda_span){w->lo - a, w->hi - a, (char *)w->c->dst + w->e_lo * w->c->k.esize,
                                             w->c->k.fmt};
            }
            if (b > a)
                llm4d_k_adamw(cstream(be), params + a, grads + a, m + a, v + a, b - a, k, zero_grads, local, cnt);
            a = b;
            first += cnt;
        } while (first < nsp || a < n);
    });
    if (nsp) cx->optim_bytes += llm4d_wcache_refreshed(&cx->wc, params, n);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* reductions */

static size_t nparts_of(size_t n) { return (n + LLM4D_CUDA_RED_CHUNK - 1) / LLM4D_CUDA_RED_CHUNK; }

static void host_room(cuda_ctx *cx, size_t doubles, size_t table_bytes) {
    if (doubles > cx->red_host_cap) {
        cudaFreeHost(cx->red_host);
        cx->red_host = NULL;
        CU_CHECK(cudaMallocHost((void **)&cx->red_host, doubles * sizeof(double)));
        cx->red_host_cap = doubles;
    }
    if (table_bytes > cx->tab_host_cap) {
        if (cx->tab_host) cudaFreeHost(cx->tab_host);
        cx->tab_host = NULL;
        CU_CHECK(cudaMallocHost(&cx->tab_host, table_bytes));
        cx->tab_host_cap = table_bytes;
    }
}

/* The sum (mode 0: squares, 1: products, 2: values) of one tensor into *out, a double of device memory. */
static void reduce_one(cuda_ctx *cx, double *out, const float *x, const float *y, size_t n, int mode, int add) {
    const size_t np = nparts_of(n);
    double *part = llm4d_cuda_ws(cx, WS_RED, (np ? np : 1) * sizeof(double) + 256);
    cudaStream_t s = cx->stream[LLM4D_STREAM_COMPUTE];
    llm4d_k_reduce_flat(s, part, x, y, n, mode);
    llm4d_k_reduce_final1(s, out, part, (unsigned)np, add);
}

/* One tensor's sum returned to the host. */
static double reduce_read(llm4d_backend *be, const float *x, const float *y, size_t n, int mode, int kind) {
    cuda_ctx *cx = cctx(be);
    const size_t np = nparts_of(n);
    /* the result after the partials, in the same workspace */
    double *part = llm4d_cuda_ws(cx, WS_RED, (np + 1) * sizeof(double) + 256), *res = part + np;
    TIMED(be, kind, {
        llm4d_k_reduce_flat(cstream(be), part, x, y, n, mode);
        llm4d_k_reduce_final1(cstream(be), res, part, (unsigned)np, 0);
    });
    host_room(cx, 1, 0);
    CU_CHECK(cudaMemcpyAsync(cx->red_host, res, sizeof(double), cudaMemcpyDeviceToHost, cstream(be)));
    CU_CHECK(cudaStreamSynchronize(cstream(be)));
    return cx->red_host[0];
}

static double cu_sumsq(llm4d_backend *be, const float *x, size_t n) {
    cctx(be)->optim_bytes += 4.0 * (double)n;
    return reduce_read(be, x, NULL, n, 0, LLM4D_WORK_OPTIM);
}

static double cu_dot(llm4d_backend *be, const float *a, const float *b, size_t n) {
    return reduce_read(be, a, b, n, b ? 1 : 2, LLM4D_WORK_ELEM);
}

static void cu_dot_acc(llm4d_backend *be, double *acc, const float *a, const float *b, size_t n) {
    TIMED(be, LLM4D_WORK_ELEM, reduce_one(cctx(be), acc, a, b, n, b ? 1 : 2, 1));
}

/* Every tensor's chunks in one table and one launch, every tensor's sum in a second, one read-back. */
static double cu_sumsq_many(llm4d_backend *be, int n, const float *const *x, const size_t *len, double *each) {
    cuda_ctx *cx = cctx(be);
    if (n <= 0) return 0.0;
    size_t nch = 0;
    for (int k = 0; k < n; k++) {
        nch += nparts_of(len[k]);
        cx->optim_bytes += 4.0 * (double)len[k];
    }
    const size_t tab_bytes = (nch ? nch : 1) * sizeof(llm4d_cuda_chunk);
    const size_t first_bytes = ((size_t)n + 1) * sizeof(unsigned);
    const size_t off_first = (tab_bytes + 255) & ~(size_t)255, off_part = (off_first + first_bytes + 255) & ~(size_t)255;
    const size_t off_out = off_part + (nch ? nch : 1) * sizeof(double);
    char *ws = llm4d_cuda_ws(cx, WS_RED, off_out + (size_t)n * sizeof(double));
    host_room(cx, (size_t)n, off_part);
    /* the table and the tensors' first partials, on the host, uploaded */
    llm4d_cuda_chunk *tab = cx->tab_host;
    unsigned *first = (unsigned *)((char *)cx->tab_host + off_first);
    size_t c = 0;
    for (int k = 0; k < n; k++) {
        first[k] = (unsigned)c;
        for (size_t i = 0; i < len[k]; i += LLM4D_CUDA_RED_CHUNK, c++) {
            const size_t l = len[k] - i < LLM4D_CUDA_RED_CHUNK ? len[k] - i : LLM4D_CUDA_RED_CHUNK;
            tab[c] = (llm4d_cuda_chunk){x[k] + i, NULL, (unsigned)l, (unsigned)c};
        }
    }
    first[n] = (unsigned)c;
    cudaStream_t s = cstream(be);
    CU_CHECK(cudaMemcpyAsync(ws, cx->tab_host, off_part, cudaMemcpyHostToDevice, s));
    double *out = (double *)(ws + off_out);
    TIMED(be, LLM4D_WORK_OPTIM, {
        if (nch) llm4d_k_reduce_table(s, (double *)(ws + off_part), (const llm4d_cuda_chunk *)ws, (int)nch, 0);
        llm4d_k_reduce_final(s, out, (const double *)(ws + off_part), (const unsigned *)(ws + off_first), n, 0);
    });
    CU_CHECK(cudaMemcpyAsync(cx->red_host, out, (size_t)n * sizeof(double), cudaMemcpyDeviceToHost, s));
    CU_CHECK(cudaStreamSynchronize(s)); /* also: the pinned table may be rewritten by the next call */
    double total = 0.0;
    for (int k = 0; k < n; k++) {
        if (each) each[k] = cx->red_host[k];
        total += cx->red_host[k];
    }
    return total;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* sampling */

static int32_t cu_sample(llm4d_backend *be, const float *logits, int V, const llm4d_sampling *s, uint64_t j,
                         void *scratch) {
    (void)scratch; /* the draw runs on the host, with host scratch */
    cuda_ctx *cx = cctx(be);
    const size_t off = ((size_t)V * sizeof(float) + 15) & ~(size_t)15; /* the scratch after the logits, aligned */
    const size_t need = off + LLM4D_SAMPLE_SCRATCH(V);
    if (need > cx->sample_cap) {
        free(cx->sample_host);
        cx->sample_host = malloc(need);
        LLM4D_ASSERT(cx->sample_host != NULL, "out of memory sampling from %d logits", V);
        cx->sample_cap = need;
    }
    float *host = cx->sample_host;
    /* pageable: returns once the logits are here (after the kernels before it on the stream) */
    CU_CHECK(cudaMemcpyAsync(host, logits, (size_t)V * sizeof(float), cudaMemcpyDeviceToHost, cstream(be)));
    CU_CHECK(cudaStreamSynchronize(cstream(be)));
    return llm4d_host_sample(be, host, V, s, j, (char *)cx->sample_host + off);
}

void llm4d_cuda_ops_install(llm4d_backend *be) {
    be->embedding_forward = cu_embedding_forward, be->embedding_backward = cu_embedding_backward;
    be->position_forward = cu_position_forward, be->position_backward = cu_position_backward;
    be->layernorm_forward = cu_layernorm_forward, be->layernorm_backward = cu_layernorm_backward;
    be->gelu_forward = cu_gelu_forward, be->gelu_backward = cu_gelu_backward;
    be->rmsnorm_forward = cu_rmsnorm_forward, be->rmsnorm_backward = cu_rmsnorm_backward;
    be->rope_forward = cu_rope_forward, be->rope_backward = cu_rope_backward;
    be->swiglu_forward = cu_swiglu_forward, be->swiglu_backward = cu_swiglu_backward;
    be->attention_forward = cu_attention_forward, be->attention_backward = cu_attention_backward;
    be->dropout_forward = cu_dropout_forward, be->dropout_backward = cu_dropout_backward;
    be->dropout_add_forward = cu_dropout_add_forward, be->dropout_add_backward = cu_dropout_add_backward;
    be->xent_forward = cu_xent_forward, be->xent_rescale = cu_xent_rescale, be->xent_backward = cu_xent_backward;
    be->adamw = cu_adamw, be->sumsq = cu_sumsq, be->sumsq_many = cu_sumsq_many;
    be->dot = cu_dot, be->dot_acc = cu_dot_acc, be->add = cu_add, be->scale = cu_scale, be->convert = cu_convert;
    be->init_param = cu_init_param, be->attention_cached = cu_attention_cached, be->sample = cu_sample;
}
