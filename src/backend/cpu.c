/* cpu.c — the fast CPU backend: oneDNN matmul for every GEMM, OpenMP loops for everything else.
 *
 * Why it is shaped this way:
 * - GEMMs dominate a GPT step, so every one (linear layers and the four attention products) goes through a
 *   cached oneDNN primitive (cpu_dnnl.h). Transposes and the per-head views of qkv are strided memory
 *   descriptors, so nothing is copied; accumulation into gradients (backend.h: backward +=) is oneDNN's "sum"
 *   post-op, and the linear bias is the matmul's own bias.
 * - Attention is flash-style (cpu_attn.c): no T x T matrix anywhere.
 * - The element-wise kernels (cpu_elem.c) are written so that GCC vectorises them (`omp simd`): exp is a
 *   polynomial rather than libm's scalar expf, and Philox (core/rng.h) is evaluated for many counters at once. The
 *   results are bit-identical RNG words and exp within a few ulp, so the backend agrees with cpu_ref.c to ~1e-6.
 * - The optimizer's passes (cpu_optim.c) are memory-bound: one fused pass per range, at the copy bandwidth.
 * - In mixed precision a weight is converted once per update, not per GEMM (cpu_wcache.c): the optimizer's pass
 *   writes its bf16 copy beside the new fp32 master.
 * - Our own reductions (sumsq, bias-gradient column sums, LayerNorm dw/db, embedding gradients) are split over
 *   fixed columns or fixed-size chunks, never over "whatever rows this thread got", so their bits do not depend
 *   on the number of threads (oneDNN's GEMMs make no such promise).
 * - oneDNN runs on the same OpenMP runtime, so both share one thread pool; nthreads > 0 sets it at creation. */
#include <dnnl.h>
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu_amx.h"
#include "backend/cpu_impl.h"
#include "backend/host.h"
#include "core/bf16.h"

/* ---------------------------------------------------------------------------------------------------------- */
/* memory */

static void *cpu_alloc(llm4d_backend *be, llm4d_mem *mem, llm4d_mem_category c, size_t bytes) {
    (void)be;
    return llm4d_mem_alloc(mem, c, bytes);
}

static void cpu_free(llm4d_backend *be, llm4d_mem *mem, llm4d_mem_category c, void *p, size_t bytes) {
    llm4d_cpu_wcache_drop(ctx_of(be), p, bytes); /* copies of weights that lived here */
    llm4d_mem_free(mem, c, p, bytes);
}

#define PAR_BYTES ((size_t)1 << 20) /* below this a memset/memcpy is not worth waking threads */

static void cpu_zero(llm4d_backend *be, void *p, size_t bytes) {
    WORK_SCOPE(ctx_of(be), LLM4D_WORK_ELEM);
    if (bytes < PAR_BYTES) {
        memset(p, 0, bytes);
        return;
    }
    const size_t chunk = PAR_BYTES / 4;
    const long nchunks = (long)((bytes + chunk - 1) / chunk);
#pragma omp parallel for schedule(static)
    for (long i = 0; i < nchunks; i++) {
        size_t o = (size_t)i * chunk, len = bytes - o < chunk ? bytes - o : chunk;
        memset((char *)p + o, 0, len);
    }
}

static void cpu_copy(llm4d_backend *be, void *dst, const void *src, size_t bytes) {
    WORK_SCOPE(ctx_of(be), LLM4D_WORK_ELEM);
    const char *s = src;
    char *d = dst;
    /* overlapping copies (memmove semantics) are done serially */
    if (bytes < PAR_BYTES || (d < s + bytes && s < d + bytes)) {
        memmove(dst, src, bytes);
        return;
    }
    const size_t chunk = PAR_BYTES / 4;
    const long nchunks = (long)((bytes + chunk - 1) / chunk);
#pragma omp parallel for schedule(static)
    for (long i = 0; i < nchunks; i++) {
        size_t o = (size_t)i * chunk, len = bytes - o < chunk ? bytes - o : chunk;
        memcpy(d + o, s + o, len);
    }
}

/* ---------------------------------------------------------------------------------------------------------- */
/* mixed precision: the GEMM operands of the linear layers and of the attention are rounded to bf16 or fp16 and
 * stored as cpu_impl.h's llm4d_cpu_fmt says: bf16 for oneDNN's bf16 kernels (fp32 accumulation and output) where
 * the CPU has AVX512-BF16, otherwise fp32 holding the rounded values, multiplied in fp32, which reproduces the
 * format's numerics (an AVX2-only CPU trains in bf16 as an AMX one does, at fp32 GEMM speed). In the attention
 * that means Q, K, V, dout and the per-block probabilities and score gradients; its softmax statistics
 * (max, sum, log-sum-exp), D and every output stay fp32. Master weights, gradients and every other kernel stay
 * fp32. */

/* bf16 storage needs oneDNN's bf16 kernels and our AVX512-BF16 conversion. oneDNN's ISA, not the CPU's flags,
 * decides, so that capping it (ONEDNN_MAX_CPU_ISA=AVX2, oneDNN's own setting) runs an AVX-512 machine the way an
 * AVX2-only one runs: the tests use that to cover the emulated bf16 and the AVX2 GEMM rules on every CPU. */
static int native_bf16(void) {
    const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    return (isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16 &&
           __builtin_cpu_supports("avx512bf16");
}

llm4d_cpu_fmt llm4d_cpu_fmt_of(llm4d_precision p) {
    switch (p) {
    case LLM4D_PREC_BF16: return native_bf16() ? LLM4D_CPU_BF16 : LLM4D_CPU_FP32_BF16;
    case LLM4D_PREC_FP16: return LLM4D_CPU_FP32_FP16;
    default: return LLM4D_CPU_FP32;
    }
}

int llm4d_cpu_amx_for(llm4d_precision p) {
    const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    return llm4d_cpu_fmt_of(p) == LLM4D_CPU_BF16 &&
           (isa & dnnl_cpu_isa_avx512_core_amx) == dnnl_cpu_isa_avx512_core_amx && llm4d_amx_usable();
}

/* The bf16 format is only used on CPUs with AVX512-BF16 (llm4d_cpu_fmt_of), whose VCVTNE2PS2BF16 rounds 32 floats
 * to nearest-even per instruction: converting the GEMM operands is memory-bound instead of ~1 ns per element.
 * It flushes fp32 subnormals (|x| < 1.2e-38) to zero, which no GEMM operand of a GPT notices. The target attribute
 * lets the file build with any -march; the scalar loop finishes the tail. */
#define CVT_BLOCK 4096 /* elements per task */

__attribute__((target("avx512f,avx512bw,avx512bf16"))) void llm4d_cpu_cvt_bf16_block(uint16_t *d, const float *s,
                                                                                      size_t n) {
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m512bh r = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(s + i + 16), _mm512_loadu_ps(s + i));
        _mm512_storeu_si512((void *)(d + i), (__m512i)r);
    }
    for (; i < n; i++) d[i] = llm4d_bf16_from_f32(s[i]);
}

void llm4d_cpu_convert_block(llm4d_cpu_fmt fmt, void *dst, const float *src, size_t n) {
    float *d = dst;
    switch (fmt) {
    case LLM4D_CPU_BF16: llm4d_cpu_cvt_bf16_block(dst, src, n); return;
    case LLM4D_CPU_FP32_BF16:
#pragma omp simd
        for (size_t i = 0; i < n; i++) d[i] = llm4d_bf16_round(src[i]);
        return;
    case LLM4D_CPU_FP32_FP16:
#pragma omp simd
        for (size_t i = 0; i < n; i++) d[i] = (float)(_Float16)src[i];
        return;
    case LLM4D_CPU_FP32:
        if (d != src) memcpy(d, src, n * sizeof(float));
        return;
    }
}

void llm4d_cpu_convert(llm4d_cpu_fmt fmt, void *dst, const float *src, size_t n) {
    const size_t es = llm4d_cpu_operand_bytes(fmt);
    const long ntasks = (long)((n + CVT_BLOCK - 1) / CVT_BLOCK);
#pragma omp parallel for schedule(static) if (ntasks > 1)
    for (long t = 0; t < ntasks; t++) {
        const size_t i0 = (size_t)t * CVT_BLOCK;
        llm4d_cpu_convert_block(fmt, (char *)dst + i0 * es, src + i0, n - i0 < CVT_BLOCK ? n - i0 : CVT_BLOCK);
    }
}

void *llm4d_cpu_slot(cpu_ctx *cx, int slot, size_t bytes) {
    if (bytes > cx->cvt_cap[slot]) {
        free(cx->cvt[slot]);
        cx->cvt[slot] = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
        LLM4D_ASSERT(cx->cvt[slot], "out of memory converting a %zu-byte GEMM operand", bytes);
        cx->cvt_cap[slot] = bytes;
    }
    return cx->cvt[slot];
}

const void *llm4d_cpu_operand(cpu_ctx *cx, int slot, const float *src, size_t n) {
    if (cx->fmt == LLM4D_CPU_FP32) return src;
    WORK_SCOPE(cx, LLM4D_WORK_CONVERT);
    void *d = llm4d_cpu_slot(cx, slot, n * llm4d_cpu_operand_bytes(cx->fmt));
    llm4d_cpu_convert(cx->fmt, d, src, n);
    return d;
}

/* Elements per task of an activation applied in the conversion: act(src) goes through a stack block of this many
 * floats, 4 KiB. With 4096 (16 KiB, as CVT_BLOCK) the pass ran at half the speed (Sapphire Rapids: 25 against
 * 12 ms for 25M elements, 2 threads), slower than GELU and the conversion as two passes. */
#define ACT_BLOCK 1024

const void *llm4d_cpu_operand_act(cpu_ctx *cx, int slot, const float *src, size_t n, llm4d_act act) {
    if (act == LLM4D_ACT_NONE) return llm4d_cpu_operand(cx, slot, src, n);
    WORK_SCOPE(cx, LLM4D_WORK_CONVERT);
    const llm4d_cpu_fmt fmt = cx->fmt;
    const size_t es = llm4d_cpu_operand_bytes(fmt);
    char *dst = llm4d_cpu_slot(cx, slot, n * es);
    const long ntasks = (long)((n + ACT_BLOCK - 1) / ACT_BLOCK);
#pragma omp parallel for schedule(static)
    for (long t = 0; t < ntasks; t++) {
        const size_t i0 = (size_t)t * ACT_BLOCK, len = n - i0 < ACT_BLOCK ? n - i0 : ACT_BLOCK;
        float a[ACT_BLOCK];
#pragma omp simd
        for (size_t i = 0; i < len; i++) a[i] = vgelu(src[i0 + i]);
        llm4d_cpu_convert_block(fmt, dst + i0 * es, a, len);
    }
    return dst;
}

/* Column sums (bias gradients): rows per chunk, and columns per task of the chunks' final sum. */
#define COLSUM_ROWS 64
#define COLSUM_COLS 64
/* Columns of a chunk worked on at a time: 64 rows x 1024 floats (256 KiB) stay in L2 while the strip is summed and
 * packed both ways, so dout is read from memory once (whole rows of the LM head's 50304 logits, 12.9 MB a chunk,
 * were read again for the transposed pack: that layer's backward 55 -> 50 ms for a 512-token chunk, two Sapphire
 * Rapids threads). */
#define COLSUM_STRIP 1024
_Static_assert(COLSUM_ROWS % LLM4D_AMX_KB == 0, "a chunk of rows is whole K tiles of the transposed pack");
_Static_assert(COLSUM_STRIP % LLM4D_AMX_KB == 0, "a strip is whole tile rows of the A pack, whole M tiles of its "
                                                 "transpose");

/* db[OC] += the column sums of dout [N, OC] (db may be NULL: none), and, when dst is not NULL, dout in the working
 * precision written to dst in the same pass (on the AMX path as the kernel's A tiles); on the AMX path, when dst_t
 * is not NULL, also dout^T's A tiles (the weight gradient's operand), each chunk's while its rows are in cache: one
 * read of dout for all three. A linear layer's bias gradient rides on the conversion of its output gradient instead
 * of reading it again. The sums are in double (N is thousands of rows: float would drift from the reference) over
 * fixed chunks of COLSUM_ROWS rows, and the chunks' partial sums are added in chunk order, so the thread count
 * does not change the bits. */
static void colsum(cpu_ctx *cx, float *db, const float *dout, int N, int OC, void *dst, uint16_t *dst_t) {
    const llm4d_cpu_fmt fmt = cx->fmt;
    const size_t es = llm4d_cpu_operand_bytes(fmt);
    const long nch = (N + COLSUM_ROWS - 1) / COLSUM_ROWS;
    if (db && (size_t)nch * OC > cx->colsum_cap) {
        free(cx->colsum);
        cx->colsum = aligned_alloc(64, ((size_t)nch * OC * sizeof(double) + 63) & ~(size_t)63);
        LLM4D_ASSERT(cx->colsum, "out of memory for %ld x %d partial bias-gradient sums", nch, OC);
        cx->colsum_cap = (size_t)nch * OC;
    }
    double *part = cx->colsum;
#pragma omp parallel for schedule(static)
    for (long ch = 0; ch < nch; ch++) {
        double *p = db ? part + (size_t)ch * OC : NULL;
        const int r0 = (int)ch * COLSUM_ROWS, r1 = r0 + COLSUM_ROWS < N ? r0 + COLSUM_ROWS : N;
        if (p) memset(p, 0, (size_t)OC * sizeof(double));
        for (int c0 = 0; c0 < OC; c0 += COLSUM_STRIP) {
            const int c1 = c0 + COLSUM_STRIP < OC ? c0 + COLSUM_STRIP : OC, n = c1 - c0;
            for (int r = r0; r < r1; r++) {
                const float *row = dout + (size_t)r * OC + c0;
                if (dst && cx->amx) llm4d_amx_pack_a_row_piece(dst, OC, r, row, c0, n);
                else if (dst) llm4d_cpu_convert_block(fmt, (char *)dst + ((size_t)r * OC + c0) * es, row, (size_t)n);
                if (!p) continue;
                double *pc = p + c0;
#pragma omp simd
                for (int o = 0; o < n; o++) pc[o] += row[o];
            }
            /* the strip's transpose, the last strip's reaching into M's padding */
            if (dst_t)
                llm4d_amx_pack_a_t_block(dst_t, dout, OC, OC, N, r0 / 32, (r1 + 31) / 32, c0 / 16,
                                         c1 == OC ? INT64_MAX : c1 / 16);
        }
    }
    if (dst && cx->amx) llm4d_amx_pack_a_pad_rows(dst, N, OC);
    if (!db) return;
    const int ncb = (OC + COLSUM_COLS - 1) / COLSUM_COLS;
#pragma omp parallel for schedule(static)
    for (int cb = 0; cb < ncb; cb++) {
        const int o0 = cb * COLSUM_COLS, len = OC - o0 < COLSUM_COLS ? OC - o0 : COLSUM_COLS;
        double acc[COLSUM_COLS] = {0};
        for (long ch = 0; ch < nch; ch++) {
            const double *p = part + (size_t)ch * OC + o0;
#pragma omp simd
            for (int j = 0; j < len; j++) acc[j] += p[j];
        }
        for (int j = 0; j < len; j++) db[o0 + j] += (float)acc[j];
    }
}

/* dout [N, OC] in the working precision in conversion slot `slot`, with db += its column sums (not in fp32 mode,
 * where there is no conversion pass to join). */
static const void *operand_colsum(cpu_ctx *cx, int slot, const float *dout, int N, int OC, float *db) {
    WORK_SCOPE(cx, LLM4D_WORK_CONVERT);
    const size_t elems = cx->amx ? llm4d_amx_a_elems(N, OC) : (size_t)N * OC;
    void *dst = llm4d_cpu_slot(cx, slot, elems * llm4d_cpu_operand_bytes(cx->fmt));
    colsum(cx, db, dout, N, OC, dst, NULL);
    return dst;
}

static llm4d_dnnl_type operand_type(const cpu_ctx *cx) {
    return cx->fmt == LLM4D_CPU_BF16 ? LLM4D_DNNL_BF16 : LLM4D_DNNL_F32;
}

llm4d_dnnl_mm llm4d_cpu_gemm_2d(const cpu_ctx *cx, int64_t M, int64_t N, int64_t K, int ta, int64_t lda, int tb,
                                int64_t ldb, int64_t ldc, int accumulate) {
    llm4d_dnnl_mm mm = llm4d_dnnl_mm_2d(M, N, K, ta, lda, tb, ldb, ldc, accumulate);
    mm.ab_type = operand_type(cx);
    return mm;
}

static llm4d_code cpu_set_precision(llm4d_backend *be, llm4d_precision p, llm4d_err *err) {
    cpu_ctx *cx = ctx_of(be);
    if (p == LLM4D_PREC_TF32)
        return llm4d_fail(err, LLM4D_EUSER, "tfloat32 operands need a GPU's tensor cores (--device cuda); on the CPU "
                          "use --amp_dtype bfloat16 or float16, or drop --use_amp");
    const llm4d_cpu_fmt fmt = llm4d_cpu_fmt_of(p);
    if (fmt == LLM4D_CPU_BF16) {
        /* create the bf16 primitives now, where errors can be reported */
        llm4d_dnnl_mm probe = llm4d_dnnl_mm_2d(8, 8, 8, 0, 8, 1, 8, 8, 0);
        probe.ab_type = LLM4D_DNNL_BF16;
        LLM4D_TRY(llm4d_dnnl_prepare(cx->dnnl, &probe, NULL, err));
    }
    cx->fmt = fmt;
    cx->amx = llm4d_cpu_amx_for(p);
    return LLM4D_OK;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* linear */

/* oneDNN 2.6's sgemm (gemm:jit) packs neither operand when one side of the output is short (its "no-copy" kernels,
 * chosen when 1/m + 1/n >= 0.0038: N up to ~260 tokens), and on AVX2 those kernels are slow in two of the shapes a
 * GPT step has; the backend goes around them there (dinp_transposed, forward_in_blocks), where it was measured
 * (cx->avx2_nocopy: oneDNN's ISA is AVX2 without AVX-512, whose sgemm has its own rules) and the operands are
 * 4-byte (fp32, or fp32 holding rounded values). */
static int nocopy_fp32(const cpu_ctx *cx, int m, int n) {
    return cx->avx2_nocopy && llm4d_cpu_operand_bytes(cx->fmt) == sizeof(float) && 1.0 / m + 1.0 / n >= 0.0038;
}

/* Very wide outputs: the LM head's logits, 256 tokens x 50304 x 768, take 125-128 ms at once against 114 ms in
 * blocks of 2048 output columns (Zen 3, 2 threads; outputs up to 3072 wide gain nothing). So a forward wider than
 * 2 WIDE_COLS in the no-copy regime runs a block of WIDE_COLS columns at a time (rows of W, columns of the output):
 * the same dot products, each summed by the same kind of kernel over the same K. */
#define WIDE_COLS 2048

static int forward_in_blocks(const cpu_ctx *cx, int N, int OC) { return OC > 2 * WIDE_COLS && nocopy_fp32(cx, N, OC); }

/* ---------------------------------------------------------------------------------------------------------- */
/* linear layers on the AMX kernel (cpu_amx.h): every operand is converted into the tiles it is read from, the
 * weights once per update (the optimizer's pass writes both of a weight's packs), the activations and gradients per
 * call (the pass that converts them anyway):
 *   forward  out[N, OC] = act(X)[N, C] W^T          A: act(X) as A tiles       B: the tiles of W^T
 *   dinp     dX[N, C] (=|+=) dY[N, OC] W             A: dY as A tiles (+ db)    B: the tiles of W
 *   dw       dW[OC, C] += dY^T[OC, N] act(X)[N, C]   A: dY^T as A tiles         B: act(X) as B tiles
 * Slot 0 holds the first A operand, slots 1 and 2 the weight gradient's two. */

static void amx_forward(cpu_ctx *cx, float *out, const float *inp, llm4d_act act, const float *w, const float *b,
                        int N, int C, int OC) {
    uint16_t *a;
    {
        WORK_SCOPE(cx, LLM4D_WORK_CONVERT);
        a = llm4d_cpu_slot(cx, 0, llm4d_amx_a_elems(N, C) * sizeof(uint16_t));
        llm4d_amx_pack_a(a, inp, C, N, C, act);
    }
    llm4d_amx_gemm(out, OC, a, llm4d_cpu_weight_tiles(cx, w, OC, C, LLM4D_CPU_TILES_WT), b, N, OC, C, 0);
}

static void amx_backward(cpu_ctx *cx, float *dinp, llm4d_store dinp_store, float *dw, float *db, const float *dout,
                         const float *inp, llm4d_act act, const float *w, int N, int C, int OC) {
    uint16_t *g = NULL, *gt = NULL, *x = NULL;
    {
        /* dout's packs (the A tiles for dinp, their transpose for dw) and its column sums in one pass */
        WORK_SCOPE(cx, LLM4D_WORK_CONVERT);
        if (dinp) g = llm4d_cpu_slot(cx, 0, llm4d_amx_a_elems(N, OC) * sizeof(uint16_t));
        if (dw) gt = llm4d_cpu_slot(cx, 1, llm4d_amx_a_elems(OC, N) * sizeof(uint16_t));
        colsum(cx, db, dout, N, OC, g, gt);
    }
    if (dinp)
        llm4d_amx_gemm(dinp, C, g, llm4d_cpu_weight_tiles(cx, w, OC, C, LLM4D_CPU_TILES_W), NULL, N, C, OC,
                       dinp_store == LLM4D_ADD);
    if (!dw) return;
    {
        WORK_SCOPE(cx, LLM4D_WORK_CONVERT);
        x = llm4d_cpu_slot(cx, 2, llm4d_amx_b_elems(N, C) * sizeof(uint16_t));
        llm4d_amx_pack_b(x, inp, C, N, C, act);
    }
    llm4d_amx_gemm(dw, C, gt, x, NULL, OC, C, N, 1);
}

static void cpu_linear_forward_act(llm4d_backend *be, float *out, const float *inp, llm4d_act act, const float *w,
                                   const float *b, int N, int C, int OC) {
    WORK_SCOPE(ctx_of(be), LLM4D_WORK_GEMM);
    cpu_ctx *cx = ctx_of(be);
    if (cx->amx) {
        amx_forward(cx, out, inp, act, w, b, N, C, OC);
        return;
    }
    const void *a = llm4d_cpu_operand_act(cx, 0, inp, (size_t)N * C, act);
    const char *wop = llm4d_cpu_weight(cx, w, (size_t)OC * C);
    const size_t es = llm4d_cpu_operand_bytes(cx->fmt);
    const int cols = forward_in_blocks(cx, N, OC) ? WIDE_COLS : OC;
    for (int o0 = 0; o0 < OC; o0 += cols) {
        const int n = OC - o0 < cols ? OC - o0 : cols;
        /* out[N, o0:o0+n] = act(inp)[N,C] . (W[o0:o0+n, C])^T: W is read as a [C,n] operand with strides (1, C) */
        llm4d_dnnl_mm mm = llm4d_cpu_gemm_2d(cx, N, n, C, 0, C, 1, C, OC, 0);
        mm.has_bias = b != NULL;
        llm4d_dnnl_matmul(cx->dnnl, &mm, a, wop + (size_t)o0 * C * es, b ? b + o0 : NULL, out + o0);
    }
}

static void cpu_linear_forward(llm4d_backend *be, float *out, const float *inp, const float *w, const float *b,
                               int N, int C, int OC) {
    cpu_linear_forward_act(be, out, inp, LLM4D_ACT_NONE, w, b, N, C, OC);
}

/* db[C] += column sums of dout[N, C] */
static void cpu_bias_backward(llm4d_backend *be, float *db, const float *dout, int N, int C) {
    WORK_SCOPE(ctx_of(be), LLM4D_WORK_GEMM);
    colsum(ctx_of(be), db, dout, N, C, NULL, NULL);
}

static void cpu_bias_forward(llm4d_backend *be, float *out, const float *b, int N, int C) {
    WORK_SCOPE(ctx_of(be), LLM4D_WORK_GEMM);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        float *o = out + (size_t)n * C;
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] += b[c];
    }
}

/* The input gradient through a transposed weight.
 *
 * dinp = dout W reads W [OC, C] as a row-major B operand, and in the no-copy regime (nocopy_fp32) the AVX2 kernel
 * walks W's rows at a stride of C floats: when that stride is a multiple of 2 KiB (C = 1024, 1536, 2048, 3072, ...)
 * the GEMM runs at half speed (rows that far apart compete for the same cache sets, the likely cause). Measured on
 * a Zen 3, 2 threads, N = 256 tokens, OC = 768 (bench/matmul_peak --tokens 256 shows it in the GPT-2 MLP
 * projection's backward): C = 3072 90 GFLOP/s, C = 2304 175; the same products with W^T as a [C, OC] operand (the
 * forward's orientation, its rows contiguous) 160-180 at every C. So there the backend copies W^T a block of columns
 * at a time into a buffer of at most WT_BLOCK_BYTES (the block stays in cache for its GEMM) and multiplies by it:
 * GPT-2 124M's MLP projection, dinp 13.5 -> 7.5 ms, of which the transposition is 0.7 ms. The copies are exact, so
 * the result is the same product (summed in another kernel's order). */
#define WT_BLOCK_BYTES ((size_t)4 << 20)

#define WT_MIN_COLS 64 /* narrower blocks would cost the GEMM more than the stride does */

static int dinp_transposed(const cpu_ctx *cx, int N, int C, int OC) {
    return C >= 1024 && C % 512 == 0 && WT_BLOCK_BYTES / ((size_t)OC * sizeof(float)) >= WT_MIN_COLS &&
           nocopy_fp32(cx, N, C);
}

/* wt[j, r] = w[r, j] for r < R, j < cols: w is R rows of row stride ld, wt cols rows of R floats */
static void transpose_block(float *wt, const float *w, int R, int ld, int cols) {
#ifdef __AVX__
    const int R8 = R & ~7, cols8 = cols & ~7;
#endif
#pragma omp parallel for schedule(static)
    for (int j0 = 0; j0 < cols; j0 += 8) {
        int r0 = 0;
#ifdef __AVX__
        if (j0 < cols8) /* 8 x 8 tiles in registers: unpack pairs, shuffle quads, swap 128-bit halves */
            for (; r0 < R8; r0 += 8) {
                const float *s = w + (size_t)r0 * ld + j0;
                float *d = wt + (size_t)j0 * R + r0;
                __m256 a[8], b[8];
                for (int i = 0; i < 8; i++) a[i] = _mm256_loadu_ps(s + (size_t)i * ld);
                for (int i = 0; i < 8; i += 2)
                    b[i] = _mm256_unpacklo_ps(a[i], a[i + 1]), b[i + 1] = _mm256_unpackhi_ps(a[i], a[i + 1]);
                a[0] = _mm256_shuffle_ps(b[0], b[2], 0x44), a[1] = _mm256_shuffle_ps(b[0], b[2], 0xEE);
                a[2] = _mm256_shuffle_ps(b[1], b[3], 0x44), a[3] = _mm256_shuffle_ps(b[1], b[3], 0xEE);
                a[4] = _mm256_shuffle_ps(b[4], b[6], 0x44), a[5] = _mm256_shuffle_ps(b[4], b[6], 0xEE);
                a[6] = _mm256_shuffle_ps(b[5], b[7], 0x44), a[7] = _mm256_shuffle_ps(b[5], b[7], 0xEE);
                for (int i = 0; i < 4; i++) {
                    _mm256_storeu_ps(d + (size_t)i * R, _mm256_permute2f128_ps(a[i], a[i + 4], 0x20));
                    _mm256_storeu_ps(d + (size_t)(i + 4) * R, _mm256_permute2f128_ps(a[i], a[i + 4], 0x31));
                }
            }
#endif
        const int j1 = j0 + 8 < cols ? j0 + 8 : cols;
        for (int j = j0; j < j1; j++)
            for (int r = r0; r < R; r++) wt[(size_t)j * R + r] = w[(size_t)r * ld + j];
    }
}

/* dinp (=|+=) g[N,OC] W[OC,C] with W^T copied a block of columns at a time (dinp_transposed) */
static void dinp_by_blocks(cpu_ctx *cx, float *dinp, int accumulate, const void *g, const float *w, int N, int C,
                           int OC) {
    const int maxcols = (int)(WT_BLOCK_BYTES / ((size_t)OC * sizeof(float))) & ~7;
    const int nblk = (C + maxcols - 1) / maxcols;
    const int cols = ((C + nblk - 1) / nblk + 7) & ~7; /* equal blocks of a multiple of 8 columns, <= maxcols */
    float *wt = llm4d_cpu_slot(cx, 2, (size_t)cols * OC * sizeof(float));
    for (int c0 = 0; c0 < C; c0 += cols) {
        const int n = C - c0 < cols ? C - c0 : cols;
        transpose_block(wt, w + c0, OC, C, n);
        /* dinp[:, c0:c0+n] (=|+=) g[N,OC] (W^T[c0:c0+n, OC])^T */
        llm4d_dnnl_mm mm = llm4d_cpu_gemm_2d(cx, N, n, OC, 0, OC, 1, OC, C, accumulate);
        llm4d_dnnl_matmul(cx->dnnl, &mm, g, wt, NULL, dinp + c0);
    }
}

static void cpu_linear_backward_act(llm4d_backend *be, float *dinp, llm4d_store dinp_store, float *dw, float *db,
                                    const float *dout, const float *inp, llm4d_act act, const float *w, int N, int C,
                                    int OC) {
    WORK_SCOPE(ctx_of(be), LLM4D_WORK_GEMM);
    cpu_ctx *cx = ctx_of(be);
    llm4d_dnnl *d = cx->dnnl;
    if (cx->amx && (dinp || dw)) {
        amx_backward(cx, dinp, dinp_store, dw, db, dout, inp, act, w, N, C, OC);
        return;
    }
    if (!dinp && !dw) {
        if (db) cpu_bias_backward(be, db, dout, N, OC);
        return;
    }
    /* in low precision the bias gradient comes with dout's conversion */
    const int fused_db = db && cx->fmt != LLM4D_CPU_FP32;
    const void *g = fused_db ? operand_colsum(cx, 0, dout, N, OC, db) : llm4d_cpu_operand(cx, 0, dout, (size_t)N * OC);
    if (dinp) {
        const void *wop = llm4d_cpu_weight(cx, w, (size_t)OC * C);
        if (dinp_transposed(cx, N, C, OC)) {
            dinp_by_blocks(cx, dinp, dinp_store == LLM4D_ADD, g, wop, N, C, OC);
        } else { /* dinp (=|+=) dout[N,OC] W[OC,C] */
            llm4d_dnnl_mm mm = llm4d_cpu_gemm_2d(cx, N, C, OC, 0, OC, 0, C, C, dinp_store == LLM4D_ADD);
            llm4d_dnnl_matmul(d, &mm, g, wop, NULL, dinp);
        }
    }
    if (dw) {
        llm4d_dnnl_mm mm = llm4d_cpu_gemm_2d(cx, OC, C, N, 1, OC, 0, C, C, 1); /* dw += dout^T[OC,N] act(inp)[N,C] */
        llm4d_dnnl_matmul(d, &mm, g, llm4d_cpu_operand_act(cx, 1, inp, (size_t)N * C, act), NULL, dw);
    }
    if (db && !fused_db) cpu_bias_backward(be, db, dout, N, OC);
}

static void cpu_linear_backward(llm4d_backend *be, float *dinp, llm4d_store dinp_store, float *dw, float *db,
                                const float *dout, const float *inp, const float *w, int N, int C, int OC) {
    cpu_linear_backward_act(be, dinp, dinp_store, dw, db, dout, inp, LLM4D_ACT_NONE, w, N, C, OC);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* reductions and small helpers (the optimizer's passes are in cpu_optim.c) */

static double cpu_dot(llm4d_backend *be, const float *a, const float *b, size_t n) {
    WORK_SCOPE(ctx_of(be), LLM4D_WORK_ELEM);
    size_t chunk = (n + SUMSQ_MAXCHUNKS - 1) / SUMSQ_MAXCHUNKS;
    if (chunk < SUMSQ_MINCHUNK) chunk = SUMSQ_MINCHUNK;
    const long nchunks = (long)((n + chunk - 1) / chunk);
    double part[SUMSQ_MAXCHUNKS];
#pragma omp parallel for schedule(static)
    for (long c = 0; c < nchunks; c++) {
        const size_t i0 = (size_t)c * chunk, i1 = i0 + chunk < n ? i0 + chunk : n;
        double s = 0.0;
        if (b) {
#pragma omp simd reduction(+ : s)
            for (size_t i = i0; i < i1; i++) s += (double)a[i] * b[i];
        } else {
#pragma omp simd reduction(+ : s)
            for (size_t i = i0; i < i1; i++) s += a[i];
        }
        part[c] = s;
    }
    double total = 0.0;
    for (long c = 0; c < nchunks; c++) total += part[c];
    return total;
}

static void cpu_add(llm4d_backend *be, float *dst, const float *src, size_t n) {
    WORK_SCOPE(ctx_of(be), LLM4D_WORK_ELEM);
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

static void cpu_scale(llm4d_backend *be, float *x, float s, size_t n) {
    WORK_SCOPE(ctx_of(be), LLM4D_WORK_ELEM);
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

/* llm4d_bf16_round keeps the 16 bits llm4d_bf16_from_f32 returns, written without a call so that GCC vectorises it */
static void cpu_to_bf16(llm4d_backend *be, uint16_t *dst, const float *src, size_t n) {
    WORK_SCOPE(ctx_of(be), LLM4D_WORK_CONVERT);
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) {
        const float r = llm4d_bf16_round(src[i]);
        uint32_t u;
        memcpy(&u, &r, 4);
        dst[i] = (uint16_t)(u >> 16);
    }
}

static void cpu_from_bf16(llm4d_backend *be, float *dst, const uint16_t *src, size_t n, llm4d_store store) {
    WORK_SCOPE(ctx_of(be), LLM4D_WORK_CONVERT);
    if (store == LLM4D_ADD) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
        for (size_t i = 0; i < n; i++) dst[i] += llm4d_bf16_to_f32(src[i]);
    } else {
#pragma omp parallel for simd schedule(static) if (n > 65536)
        for (size_t i = 0; i < n; i++) dst[i] = llm4d_bf16_to_f32(src[i]);
    }
}

/* ---------------------------------------------------------------------------------------------------------- */
/* what the machine can do, and what the backend holds */

/* A 1024^3 GEMM (large enough for oneDNN's blocked kernels to reach their steady rate, small enough to cost
 * ~10 ms) in the operand precision of the linear layers, on their kernel (oneDNN's, or on the AMX path ours), the
 * best of at least PEAK_REPS runs after a warm-up and of as many as fit in PEAK_SECONDS: on a shared machine the
 * best run is the closest to what the hardware can do, and a quarter of a second gives it the chance to see one
 * that no other process slowed down (an underestimated peak would report a utilisation above 1). */
#define PEAK_DIM 1024
#define PEAK_REPS 5
#define PEAK_SECONDS 0.25

static double cpu_matmul_peak_gflops(llm4d_backend *be) {
    cpu_ctx *cx = ctx_of(be);
    const size_t n = (size_t)PEAK_DIM * PEAK_DIM;
    float *a = aligned_alloc(64, n * sizeof(float)), *b = aligned_alloc(64, n * sizeof(float));
    float *c = aligned_alloc(64, n * sizeof(float));
    double best = 0.0;
    if (a && b && c) {
        for (size_t i = 0; i < n; i++) {
            a[i] = (float)(i % 97) * 0.01f;
            b[i] = (float)(i % 89) * 0.01f;
        }
        /* the linear layers' kernel in the working precision, operands prepared as they are for it */
        llm4d_dnnl_mm mm = llm4d_cpu_gemm_2d(cx, PEAK_DIM, PEAK_DIM, PEAK_DIM, 0, PEAK_DIM, 1, PEAK_DIM, PEAK_DIM, 0);
        const void *pa, *pb;
        if (cx->amx) {
            uint16_t *ta = llm4d_cpu_slot(cx, 0, llm4d_amx_a_elems(PEAK_DIM, PEAK_DIM) * sizeof(uint16_t));
            uint16_t *tb = llm4d_cpu_slot(cx, 1, llm4d_amx_b_elems(PEAK_DIM, PEAK_DIM) * sizeof(uint16_t));
            llm4d_amx_pack_a(ta, a, PEAK_DIM, PEAK_DIM, PEAK_DIM, LLM4D_ACT_NONE);
            llm4d_amx_pack_b_t(tb, b, PEAK_DIM, PEAK_DIM, PEAK_DIM);
            pa = ta, pb = tb;
        } else {
            pa = llm4d_cpu_operand(cx, 0, a, n), pb = llm4d_cpu_operand(cx, 1, b, n);
        }
        const double start = omp_get_wtime();
        for (int r = 0; r <= PEAK_REPS || (omp_get_wtime() - start < PEAK_SECONDS && r < 100); r++) {
            const double t0 = omp_get_wtime();
            if (cx->amx) llm4d_amx_gemm(c, PEAK_DIM, pa, pb, NULL, PEAK_DIM, PEAK_DIM, PEAK_DIM, 0);
            else llm4d_dnnl_matmul(cx->dnnl, &mm, pa, pb, NULL, c);
            const double gf = 2.0 * PEAK_DIM * PEAK_DIM * PEAK_DIM / (omp_get_wtime() - t0) / 1e9;
            if (r > 0 && gf > best) best = gf;
        }
    }
    free(a);
    free(b);
    free(c);
    return best;
}

static size_t cpu_workspace_bytes(llm4d_backend *be) {
    const cpu_ctx *cx = ctx_of(be);
    return cx->cvt_cap[0] + cx->cvt_cap[1] + cx->cvt_cap[2] + cx->colsum_cap * sizeof(double) +
           llm4d_cpu_attention_workspace(cx) + llm4d_dnnl_scratch_bytes(cx->dnnl) + llm4d_cpu_wcache_bytes(cx);
}

static size_t cpu_operand_bytes(llm4d_backend *be, llm4d_precision prec) {
    (void)be;
    return llm4d_cpu_operand_bytes(llm4d_cpu_fmt_of(prec));
}

/* a bf16 copy in row order, or on the AMX path the two tile layouts (their padding is a few rows per weight) */
static size_t cpu_weight_copy_bytes(llm4d_backend *be, llm4d_precision prec) {
    return (llm4d_cpu_amx_for(prec) ? 2 : 1) * cpu_operand_bytes(be, prec);
}

/* The two conversion slots, each as large as the largest operand they hold: in fp32 only what the backend makes
 * (an activation applied, the attention's packed panels: GEMMs read every other fp32 operand in place), in low
 * precision every converted operand; the bias gradients' partial sums (a double per 64 elements of an output
 * gradient, at most the widest activation's); and where input gradients may go through a transposed weight
 * (dinp_transposed: fp32 operands on an AVX2 CPU), its block, at most WT_BLOCK_BYTES (the plan does not know
 * whether the model's shapes will call for it, so it counts it whenever they might). On the AMX path three slots
 * hold tiles: two of any operand (the input gradient's output gradient, the weight gradient's transposed one) and
 * one of an activation (the weight gradient's input), each with its padding to 32 rows and columns. */
static size_t cpu_operand_workspace(llm4d_backend *be, llm4d_operand_sizes s, llm4d_precision prec) {
    const size_t slot = prec == LLM4D_PREC_FP32 ? s.made : s.read, es = cpu_operand_bytes(be, prec);
    if (llm4d_cpu_amx_for(prec)) {
        const size_t pad = (LLM4D_AMX_MB - 1) * (s.rows + s.cols) + LLM4D_AMX_MB * LLM4D_AMX_MB;
        return (2 * (s.read + pad) + s.made + pad) * es + (s.made / COLSUM_ROWS + 1) * sizeof(double);
    }
    const size_t wt = ctx_of(be)->avx2_nocopy && es == sizeof(float) ? WT_BLOCK_BYTES : 0;
    return 2 * slot * es + (s.made / COLSUM_ROWS + 1) * sizeof(double) + wt;
}

static void cpu_weights_changed(llm4d_backend *be, const void *p, size_t bytes) {
    llm4d_cpu_wcache_changed(ctx_of(be), p, bytes);
}

static void cpu_work_stats(llm4d_backend *be, llm4d_work_stats *out) {
    const cpu_ctx *cx = ctx_of(be);
    memset(out, 0, sizeof *out);
    for (int k = 0; k < LLM4D_WORK_N; k++) {
        out->seconds[k] = cx->work_s[k];
        out->calls[k] = cx->work_calls[k];
    }
    out->optim_bytes = cx->optim_bytes;
}

static const char *isa_name(void) {
    switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx2: return "avx2";
    default: return "other";
    }
}

static void cpu_describe_gemms(llm4d_backend *be, char *buf, size_t n) {
    const cpu_ctx *cx = ctx_of(be);
    char lin[256], att[256];
    llm4d_dnnl_impls(cx->dnnl, 0, lin, sizeof lin);
    llm4d_dnnl_impls(cx->dnnl, 1, att, sizeof att);
    static const char *const fmt[] = {[LLM4D_CPU_FP32] = "fp32", [LLM4D_CPU_BF16] = "bf16",
                                      [LLM4D_CPU_FP32_BF16] = "fp32 holding bf16-rounded values (no AVX512-BF16)",
                                      [LLM4D_CPU_FP32_FP16] = "fp32 holding fp16-rounded values"};
    static const char amx[] = "llm4d's AMX kernel (bf16 tiles)";
    snprintf(buf, n, "oneDNN ISA %s; operands %s; linear GEMMs: %s; attention GEMMs: %s%s%s", isa_name(),
             fmt[cx->fmt], cx->amx ? amx : lin[0] ? lin : "none yet",
             cx->att_amx ? amx : att[0] ? att : "none yet", cx->att_amx && att[0] ? ", other shapes " : "",
             cx->att_amx && att[0] ? att : "");
}

/* ---------------------------------------------------------------------------------------------------------- */

static void cpu_destroy(llm4d_backend *be) {
    if (!be) return;
    cpu_ctx *cx = be->ctx;
    if (cx) {
        llm4d_dnnl_destroy(cx->dnnl);
        llm4d_cpu_attention_free(cx);
        llm4d_cpu_wcache_free(cx);
        for (int k = 0; k < 3; k++) free(cx->cvt[k]);
        free(cx->colsum);
        free(cx);
    }
    free(be);
}

llm4d_code llm4d_backend_cpu_create(llm4d_backend **out, int nthreads, llm4d_err *err) {
    *out = NULL;
    llm4d_backend *be = calloc(1, sizeof *be);
    cpu_ctx *cx = calloc(1, sizeof *cx);
    if (!be || !cx) {
        free(be);
        free(cx);
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory creating the CPU backend");
    }
    be->ctx = cx;
    cx->work_cur = -1;
    llm4d_code rc = llm4d_dnnl_create(&cx->dnnl, err);
    if (rc != LLM4D_OK) {
        cpu_destroy(be);
        return rc;
    }
    /* oneDNN parallelises on the same OpenMP runtime, so this one setting governs both */
    if (nthreads > 0) omp_set_num_threads(nthreads);
    const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    cx->avx2_nocopy = (isa & dnnl_cpu_isa_avx2) == dnnl_cpu_isa_avx2 &&
                      (isa & dnnl_cpu_isa_avx512_core) != dnnl_cpu_isa_avx512_core;
    be->name = "cpu";
    be->nthreads = omp_get_max_threads();
    be->alloc = cpu_alloc;
    be->free = cpu_free;
    be->zero = cpu_zero;
    be->copy = cpu_copy;
    be->linear_forward = cpu_linear_forward;
    be->linear_backward = cpu_linear_backward;
    be->linear_forward_act = cpu_linear_forward_act;
    be->linear_backward_act = cpu_linear_backward_act;
    be->bias_forward = cpu_bias_forward;
    be->bias_backward = cpu_bias_backward;
    be->attention_forward = llm4d_cpu_attention_forward;
    be->attention_backward = llm4d_cpu_attention_backward;
    llm4d_cpu_elem_install(be);
    llm4d_cpu_optim_install(be);
    be->dot = cpu_dot;
    be->scale = cpu_scale;
    be->add = cpu_add;
    be->to_bf16 = cpu_to_bf16;
    be->from_bf16 = cpu_from_bf16;
    be->set_precision = cpu_set_precision;
    be->matmul_peak_gflops = cpu_matmul_peak_gflops;
    be->workspace_bytes = cpu_workspace_bytes;
    be->operand_workspace = cpu_operand_workspace;
    be->weight_copy_bytes = cpu_weight_copy_bytes;
    be->weights_changed = cpu_weights_changed;
    be->work_stats = cpu_work_stats;
    be->describe_gemms = cpu_describe_gemms;
    be->destroy = cpu_destroy;
    llm4d_host_install(be);
    /* A first GEMM proves the oneDNN installation works (and reports it here, where there is an error path,
     * rather than in the hot path, where a failure can only abort). */
    llm4d_dnnl_mm probe = llm4d_dnnl_mm_2d(8, 8, 8, 0, 8, 1, 8, 8, 0);
    rc = llm4d_dnnl_prepare(cx->dnnl, &probe, NULL, err);
    if (rc != LLM4D_OK) {
        cpu_destroy(be);
        return rc;
    }
    *out = be;
    return LLM4D_OK;
}
