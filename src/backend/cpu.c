/* cpu.c — the fast CPU backend: oneDNN matmul for every GEMM, OpenMP loops for everything else. This file holds
 * memory, the operands' precision and their conversion, the reductions, the machine's peak and the method table.
 *
 * Why it is shaped this way:
 * - GEMMs dominate a GPT step, so every one (linear layers and the four attention products) goes through a
 *   cached oneDNN primitive (cpu_dnnl.h). Transposes and the per-head views of qkv are strided memory
 *   descriptors, so nothing is copied; accumulation into gradients (backend.h: backward +=) is oneDNN's "sum"
 *   post-op, and the linear bias is the matmul's own bias.
 * - The linear layers (cpu_linear.c) read their activations in place where they are stored as the GEMM's operands
 *   are (fp32, or bf16 on AVX512-BF16 kernels: AMP O2), and convert them into a slot otherwise.
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
#include "core/fault.h"

/* ---------------------------------------------------------------------------------------------------------- */
/* memory */

static void *cpu_alloc(llm4d_backend *be, llm4d_mem *mem, llm4d_mem_category c, size_t bytes) {
    (void)be;
    return llm4d_mem_alloc(mem, c, bytes);
}

static void cpu_free(llm4d_backend *be, llm4d_mem *mem, llm4d_mem_category c, void *p, size_t bytes) {
    llm4d_wcache_drop(&ctx_of(be)->wc, p, bytes); /* copies of weights that lived here */
    llm4d_cpu_grad_written(ctx_of(be), p, bytes); /* and zeros owed to gradients that lived here */
    llm4d_mem_free(mem, c, p, bytes);
}

#define PAR_BYTES ((size_t)1 << 20) /* below this a memset/memcpy is not worth waking threads */

void llm4d_cpu_memzero(void *p, size_t bytes) {
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

static void cpu_zero(llm4d_backend *be, void *p, size_t bytes) {
    WORK_SCOPE(ctx_of(be), LLM4D_WORK_ELEM);
    llm4d_cpu_grad_written(ctx_of(be), p, bytes);
    llm4d_cpu_memzero(p, bytes);
}

static void cpu_copy(llm4d_backend *be, void *dst, const void *src, size_t bytes) {
    WORK_SCOPE(ctx_of(be), LLM4D_WORK_ELEM);
    llm4d_cpu_grad_settle(ctx_of(be), src, bytes);
    llm4d_cpu_grad_written(ctx_of(be), dst, bytes);
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
#ifdef LLM4D_AMX_EMULATE /* tests/test_kernels16_gemm_amxemu: the AMX paths on the plain-C tile kernel, any CPU */
    return llm4d_cpu_fmt_of(p) == LLM4D_CPU_BF16;
#endif
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

void llm4d_cpu_convert_typed(llm4d_cpu_fmt fmt, void *dst, llm4d_ctensor src, size_t i, size_t n) {
    if (src.t == LLM4D_F32) {
        llm4d_cpu_convert_block(fmt, dst, (const float *)src.p + i, n);
    } else if (llm4d_cpu_in_place(fmt, src.t)) {
        memcpy(dst, (const char *)src.p + i * llm4d_ftype_size(src.t), n * llm4d_ftype_size(src.t));
    } else if (fmt == LLM4D_CPU_FP32 || (fmt == LLM4D_CPU_FP32_BF16 && src.t == LLM4D_BF16) ||
               (fmt == LLM4D_CPU_FP32_FP16 && src.t == LLM4D_F16)) {
        llm4d_cpu_load(dst, src, i, n); /* widening is exact: the values are already the format's */
    } else {
        const size_t es = llm4d_cpu_operand_bytes(fmt);
        float buf[CVT_BLOCK];
        for (size_t k = 0; k < n; k += CVT_BLOCK) {
            const size_t len = n - k < CVT_BLOCK ? n - k : CVT_BLOCK;
            llm4d_cpu_load(buf, src, i + k, len);
            llm4d_cpu_convert_block(fmt, (char *)dst + k * es, buf, len);
        }
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

const void *llm4d_cpu_operand(cpu_ctx *cx, int slot, llm4d_ctensor src, size_t n) {
    if (llm4d_cpu_in_place(cx->fmt, src.t)) return src.p;
    WORK_SCOPE(cx, LLM4D_WORK_CONVERT);
    const llm4d_cpu_fmt fmt = cx->fmt;
    const size_t es = llm4d_cpu_operand_bytes(fmt);
    char *d = llm4d_cpu_slot(cx, slot, n * es);
    if (src.t == LLM4D_F32) {
        llm4d_cpu_convert(fmt, d, src.p, n);
        return d;
    }
    const long ntasks = (long)((n + CVT_BLOCK - 1) / CVT_BLOCK);
#pragma omp parallel for schedule(static) if (ntasks > 1)
    for (long t = 0; t < ntasks; t++) {
        const size_t i0 = (size_t)t * CVT_BLOCK;
        llm4d_cpu_convert_typed(fmt, d + i0 * es, src, i0, n - i0 < CVT_BLOCK ? n - i0 : CVT_BLOCK);
    }
    return d;
}

/* Elements per task of an activation applied in the conversion: act(src) goes through a stack block of this many
 * floats, 4 KiB. With 4096 (16 KiB, as CVT_BLOCK) the pass ran at half the speed (Sapphire Rapids: 25 against
 * 12 ms for 25M elements, 2 threads), slower than GELU and the conversion as two passes. */
#define ACT_BLOCK 1024

/* GELU's output is made here, as the GEMM that reads it needs it: element-wise work when the input is stored as
 * the GEMM's operands are (the output is of the same type), a conversion too when it is not. */
const void *llm4d_cpu_operand_act(cpu_ctx *cx, int slot, llm4d_ctensor src, size_t n, llm4d_act act) {
    if (act == LLM4D_ACT_NONE) return llm4d_cpu_operand(cx, slot, src, n);
    WORK_SCOPE(cx, llm4d_cpu_in_place(cx->fmt, src.t) ? LLM4D_WORK_ELEM : LLM4D_WORK_CONVERT);
    const llm4d_cpu_fmt fmt = cx->fmt;
    const size_t es = llm4d_cpu_operand_bytes(fmt);
    char *dst = llm4d_cpu_slot(cx, slot, n * es);
    const long ntasks = (long)((n + ACT_BLOCK - 1) / ACT_BLOCK);
#pragma omp parallel for schedule(static)
    for (long t = 0; t < ntasks; t++) {
        const size_t i0 = (size_t)t * ACT_BLOCK, len = n - i0 < ACT_BLOCK ? n - i0 : ACT_BLOCK;
        float a[ACT_BLOCK], w[ACT_BLOCK];
        const float *x = cpu_in(src, i0, len, w);
#pragma omp simd
        for (size_t i = 0; i < len; i++) a[i] = vgelu(x[i]);
        llm4d_cpu_convert_block(fmt, dst + i0 * es, a, len);
    }
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

/* A CPU's bf16 GEMMs can be slower than its fp32 ones: an Intel Xeon VM with AVX512-BF16 but no AMX exposed ran
 * oneDNN's brg:avx512_core_bf16 at 112 GFLOP/s against 219 in fp32 (issue 42), where training with use_amp took
 * 1.7x longer a step. So where bf16 would run on oneDNN's AVX512-BF16 kernels (not on AMX), set_precision measures
 * both peaks and, when bf16's is below BF16_SLOW of fp32's, computes the bf16 numerics on the fp32 kernels
 * (LLM4D_CPU_FP32_BF16, as on AVX2 CPUs: the same products, bits that differ only by summation order). The margin
 * is wide so that a noisy machine does not flip the choice between two starts of one run (a resumed run would then
 * change kernels): the CPUs measured so far are at 0.51 (that VM) or above 1.6 (Zen 4, Zen 5). */
#define BF16_SLOW 0.75

static double peak_gflops(cpu_ctx *cx); /* below, with the machine's limits */

static llm4d_code cpu_set_precision(llm4d_backend *be, llm4d_precision p, llm4d_err *err) {
    cpu_ctx *cx = ctx_of(be);
    if (p == LLM4D_PREC_TF32)
        return llm4d_fail(err, LLM4D_EUSER, "tfloat32 operands need a GPU's tensor cores (--device cuda); on the CPU "
                          "use --amp_dtype bfloat16 or float16, or drop --use_amp");
    llm4d_cpu_fmt fmt = llm4d_cpu_fmt_of(p);
    const int amx = llm4d_cpu_amx_for(p);
    if (fmt == LLM4D_CPU_BF16) {
        /* create the bf16 primitives now, where errors can be reported */
        llm4d_dnnl_mm probe = llm4d_dnnl_mm_2d(8, 8, 8, 0, 8, 1, 8, 8, 0);
        probe.ab_type = LLM4D_DNNL_BF16;
        LLM4D_TRY(llm4d_dnnl_prepare(cx->dnnl, &probe, NULL, err));
    }
    if (fmt == LLM4D_CPU_BF16 && !amx && !cx->bf16_checked) {
        cx->fmt = LLM4D_CPU_FP32, cx->amx = 0;
        cx->peak_fp32 = peak_gflops(cx);
        cx->fmt = LLM4D_CPU_BF16;
        cx->peak_bf16 = peak_gflops(cx);
        llm4d_fault f;
        llm4d_err ferr;
        const int told = llm4d_fault_from_env(&f, 0, &ferr) == LLM4D_OK;
        const int faked = told && f.op == LLM4D_FAULT_BF16SLOW, fast = told && f.op == LLM4D_FAULT_BF16FAST;
        cx->bf16_slow = !fast && (faked || cx->peak_bf16 < BF16_SLOW * cx->peak_fp32);
        cx->bf16_faked = faked;
        cx->bf16_checked = 1;
    }
    if (fmt == LLM4D_CPU_BF16 && !amx && cx->bf16_slow) fmt = LLM4D_CPU_FP32_BF16;
    cx->fmt = fmt;
    cx->amx = amx;
    return LLM4D_OK;
}

llm4d_cpu_fmt llm4d_cpu_fmt_for(const cpu_ctx *cx, llm4d_precision p) {
    const llm4d_cpu_fmt f = llm4d_cpu_fmt_of(p);
    return f == LLM4D_CPU_BF16 && cx->bf16_slow && !llm4d_cpu_amx_for(p) ? LLM4D_CPU_FP32_BF16 : f;
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
    llm4d_cpu_grad_settle(ctx_of(be), dst, n * sizeof(float));
    llm4d_cpu_grad_settle(ctx_of(be), src, n * sizeof(float));
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

static void cpu_scale(llm4d_backend *be, float *x, float s, size_t n) {
    WORK_SCOPE(ctx_of(be), LLM4D_WORK_ELEM);
    llm4d_cpu_grad_settle(ctx_of(be), x, n * sizeof(float));
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

/* The peak in the context's current format (cx->fmt, cx->amx). */
static double peak_gflops(cpu_ctx *cx) {
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
            llm4d_amx_pack_a(ta, llm4d_ct32(a), PEAK_DIM, PEAK_DIM, PEAK_DIM, LLM4D_ACT_NONE);
            llm4d_amx_pack_b_t(tb, llm4d_ct32(b), PEAK_DIM, PEAK_DIM, PEAK_DIM);
            pa = ta, pb = tb;
        } else {
            pa = llm4d_cpu_operand(cx, 0, llm4d_ct32(a), n), pb = llm4d_cpu_operand(cx, 1, llm4d_ct32(b), n);
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

static double cpu_matmul_peak_gflops(llm4d_backend *be) { return peak_gflops(ctx_of(be)); }

static size_t cpu_workspace_bytes(llm4d_backend *be) {
    const cpu_ctx *cx = ctx_of(be);
    return cx->cvt_cap[0] + cx->cvt_cap[1] + cx->cvt_cap[2] + cx->cvt_cap[3] + cx->colsum_cap * sizeof(double) +
           llm4d_cpu_attention_workspace(cx) + llm4d_dnnl_scratch_bytes(cx->dnnl) + llm4d_wcache_bytes(&cx->wc);
}

size_t llm4d_cpu_operand_bytes_of(llm4d_backend *be, llm4d_precision prec) {
    return llm4d_cpu_operand_bytes(llm4d_cpu_fmt_for(ctx_of(be), prec));
}

/* a bf16 copy in row order, or on the AMX path the two tile layouts (their padding is a few rows per weight) */
static size_t cpu_weight_copy_bytes(llm4d_backend *be, llm4d_precision prec) {
    return (llm4d_cpu_amx_for(prec) ? 2 : 1) * llm4d_cpu_operand_bytes_of(be, prec);
}

static void cpu_weights_changed(llm4d_backend *be, const void *p, size_t bytes) {
    llm4d_wcache_stale(&ctx_of(be)->wc, p, bytes);
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
                                      [LLM4D_CPU_FP32_BF16] = "fp32 holding bf16-rounded values",
                                      [LLM4D_CPU_FP32_FP16] = "fp32 holding fp16-rounded values"};
    static const char amx[] = "llm4d's AMX kernel (bf16 tiles)";
    char why[160] = "";
    if (cx->fmt == LLM4D_CPU_FP32_BF16 && !cx->bf16_slow) snprintf(why, sizeof why, " (no AVX512-BF16)");
    if (cx->fmt == LLM4D_CPU_FP32_BF16 && cx->bf16_slow)
        snprintf(why, sizeof why, " (this CPU's bf16 GEMMs measured %.0f GFLOP/s against fp32's %.0f%s: bf16 numerics "
                 "on the fp32 kernels)", cx->peak_bf16, cx->peak_fp32, cx->bf16_faked ? ", slower by LLM4D_FAULT" : "");
    /* in AMX mode only the AMX kernel; after it, also the oneDNN GEMMs of other precisions */
    const int lin_other = !cx->amx && cx->lin_amx && lin[0];
    snprintf(buf, n, "oneDNN ISA %s; operands %s%s; linear GEMMs: %s%s%s; attention GEMMs: %s%s%s", isa_name(),
             fmt[cx->fmt], why, cx->amx || cx->lin_amx ? amx : lin[0] ? lin : "none yet",
             lin_other ? ", other precisions " : "", lin_other ? lin : "", cx->att_amx ? amx : att[0] ? att : "none yet",
             cx->att_amx && att[0] ? ", other shapes " : "", cx->att_amx && att[0] ? att : "");
}

/* ---------------------------------------------------------------------------------------------------------- */

static void cpu_destroy(llm4d_backend *be) {
    if (!be) return;
    cpu_ctx *cx = be->ctx;
    if (cx) {
        llm4d_dnnl_destroy(cx->dnnl);
        llm4d_cpu_attention_free(cx);
        llm4d_wcache_free(&cx->wc);
        for (int k = 0; k < 4; k++) free(cx->cvt[k]);
        free(cx->colsum);
        free(cx->owed.r);
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
    llm4d_cpu_wcache_init(cx);
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
    llm4d_cpu_linear_install(be);
    be->attention_forward = llm4d_cpu_attention_forward;
    be->attention_backward = llm4d_cpu_attention_backward;
    llm4d_cpu_elem_install(be);
    llm4d_cpu_optim_install(be);
    llm4d_cpu_owed_install(be);
    be->dot = cpu_dot;
    be->scale = cpu_scale;
    be->add = cpu_add;
    be->to_bf16 = cpu_to_bf16;
    be->from_bf16 = cpu_from_bf16;
    be->set_precision = cpu_set_precision;
    be->matmul_peak_gflops = cpu_matmul_peak_gflops;
    be->workspace_bytes = cpu_workspace_bytes;
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
