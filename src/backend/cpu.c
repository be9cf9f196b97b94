/* cpu.c — the fast CPU backend: oneDNN matmul for every GEMM, OpenMP loops for everything else.
 *
 * Why it is shaped this way:
 * - GEMMs dominate a GPT step, so every one (linear layers and the four attention products) goes through a
 *   cached oneDNN primitive (cpu_dnnl.h). Transposes and the per-head views of qkv are strided memory
 *   descriptors, so nothing is copied; accumulation into gradients (backend.h: backward +=) is oneDNN's "sum"
 *   post-op, and the linear bias is the matmul's own bias.
 * - Attention is flash-style (FlashAttention-2): queries in row blocks of ATT_TB, keys in blocks of ATT_KB, only
 *   the blocks left of / on the diagonal computed (about half the FLOPs of the full square), an online softmax
 *   in forward, and no T x T matrix anywhere: forward keeps the log-sum-exp of each row and backward rebuilds
 *   each block's probabilities from it. At GPT-2 124M with B=8, T=1024 this saves 384 MiB of probabilities per
 *   layer plus a 384 MiB backward scratch. The blocks of all heads are many small independent GEMMs, so threads
 *   take whole tasks and run them single-threaded, with the softmax and dropout in between while the block is in
 *   per-thread scratch (faster than oneDNN's batched GEMM over heads with each GEMM split across threads).
 * - The element-wise kernels are written so that GCC vectorises them (`omp simd`): exp is a polynomial rather
 *   than libm's scalar expf, and Philox (core/rng.h) is evaluated for many counters at once. The results are
 *   bit-identical RNG words and exp within a few ulp, so the backend agrees with cpu_ref.c to ~1e-6.
 * - Our own reductions (sumsq, bias-gradient column sums, LayerNorm dw/db, embedding gradients) are split over
 *   fixed columns or fixed-size chunks, never over "whatever rows this thread got", so their bits do not depend
 *   on the number of threads (oneDNN's GEMMs make no such promise).
 * - oneDNN runs on the same OpenMP runtime, so both share one thread pool; nthreads > 0 sets it at creation. */
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu_dnnl.h"
#include "core/rng.h"

/* Causal attention query block (rows per task and per GEMM). 128 keeps the wasted upper-triangle work at 1/16 for
 * T = 1024 while each GEMM is still large enough to run near peak. */
#ifndef ATT_TB
#define ATT_TB 128
#endif

typedef struct {
    llm4d_dnnl *dnnl;
    float *work;             /* attention: each thread's blocks (att_thread_floats), grown only for larger shapes */
    size_t work_cap;         /* floats */
    llm4d_dnnl_prim **prims; /* attention GEMM handles, ATT_NPRIM per (row block, key block) */
    size_t prims_cap;
    llm4d_precision prec;    /* operands of all GEMMs: fp32, bf16, or fp16-rounded fp32 */
    void *cvt[2];            /* converted copies of the two GEMM operands (attention: qkv and dout) */
    size_t cvt_cap[2];       /* bytes */
} cpu_ctx;

static cpu_ctx *ctx_of(llm4d_backend *be) { return (cpu_ctx *)be->ctx; }

/* ---------------------------------------------------------------------------------------------------------- */
/* vectorisable math */

/* exp(x) for x in [-87, 88] (clamped outside): Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2, then a degree-6
 * Taylor polynomial (truncation < 1.3e-7 relative) and 2^n built in the exponent bits. */
static inline float vexp(float x) {
    x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
    /* n = round(x / ln2) by the 1.5*2^23 trick: ternaries and this trick vectorise, libm's floorf/fminf may not */
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - n * 0.693145751953125f;
    r = r - n * 1.428606765330187e-06f;
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* tanh(u) = 1 - 2/(exp(2u)+1); |u| is clamped at 9 where tanh is 1 to float precision. */
static inline float vtanh(float u) {
    u = u < -9.0f ? -9.0f : (u > 9.0f ? 9.0f : u);
    return 1.0f - 2.0f / (vexp(2.0f * u) + 1.0f);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* dropout masks: Philox words for a run of consecutive positions */

/* Words of blocks blk0 .. blk0+nb-1 of the stream, interleaved (4 per block) exactly as llm4d_rng_block. */
static void philox_blocks(uint64_t seed, uint64_t stream, uint64_t blk0, int nb, uint32_t *out) {
    const uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
    const uint32_t s0 = (uint32_t)stream, s1 = (uint32_t)(stream >> 32);
#pragma omp simd
    for (int j = 0; j < nb; j++) {
        uint64_t blk = blk0 + (uint64_t)j;
        uint32_t c0 = (uint32_t)blk, c1 = (uint32_t)(blk >> 32), c2 = s0, c3 = s1;
        uint32_t key0 = k0, key1 = k1;
        for (int round = 0; round < 10; round++) {
            uint64_t p0 = (uint64_t)0xD2511F53u * c0;
            uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
            uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ key0;
            uint32_t n1 = (uint32_t)p1;
            uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ key1;
            uint32_t n3 = (uint32_t)p0;
            c0 = n0;
            c1 = n1;
            c2 = n2;
            c3 = n3;
            key0 += 0x9E3779B9u;
            key1 += 0xBB67AE85u;
        }
        out[4 * j + 0] = c0;
        out[4 * j + 1] = c1;
        out[4 * j + 2] = c2;
        out[4 * j + 3] = c3;
    }
}

#define DROP_CHUNK 256 /* positions per mask chunk (stack buffers) */

/* mult[i] = 1/(1-p) if position pos0+i is kept, else 0, for n <= DROP_CHUNK positions. */
static void drop_mults(const llm4d_dropout *d, uint64_t pos0, int n, float *mult) {
    uint32_t words[DROP_CHUNK + 8];
    uint64_t blk0 = pos0 >> 2;
    int off = (int)(pos0 & 3), nb = (off + n + 3) >> 2;
    philox_blocks(d->seed, d->stream, blk0, nb, words);
    const float p = d->p, s = 1.0f / (1.0f - d->p);
#pragma omp simd
    for (int i = 0; i < n; i++) mult[i] = llm4d_rng_u01(words[off + i]) >= p ? s : 0.0f;
}

static int drop_on(const llm4d_dropout *d) { return d && d->p > 0.0f; }

/* ---------------------------------------------------------------------------------------------------------- */
/* memory */

static void *cpu_alloc(llm4d_backend *be, llm4d_mem *mem, llm4d_mem_category c, size_t bytes) {
    (void)be;
    return llm4d_mem_alloc(mem, c, bytes);
}

static void cpu_free(llm4d_backend *be, llm4d_mem *mem, llm4d_mem_category c, void *p, size_t bytes) {
    (void)be;
    llm4d_mem_free(mem, c, p, bytes);
}

#define PAR_BYTES ((size_t)1 << 20) /* below this a memset/memcpy is not worth waking threads */

static void cpu_zero(llm4d_backend *be, void *p, size_t bytes) {
    (void)be;
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
    (void)be;
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
/* mixed precision: the GEMM operands of the linear layers and of the attention are rounded to bf16 (oneDNN's
 * bf16 kernels, fp32 accumulation and output) or to fp16 precision (no fp16 GEMM on CPUs without AVX512-FP16: the
 * operands are rounded to fp16 and multiplied in fp32, which reproduces fp16 inputs' numerics). In the attention
 * that means Q, K, V, dout and the per-block probabilities and score gradients; its softmax statistics
 * (max, sum, log-sum-exp), D and every output stay fp32. Master weights, gradients and every other kernel stay
 * fp32. */

static uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);                                         /* round to nearest even */
    return (uint16_t)(u >> 16);
}

/* bf16 mode is only entered on CPUs with AVX512-BF16 (cpu_set_precision), whose VCVTNE2PS2BF16 rounds 32 floats
 * to nearest-even per instruction: converting the GEMM operands is memory-bound instead of ~1 ns per element.
 * It flushes fp32 subnormals (|x| < 1.2e-38) to zero, which no GEMM operand of a GPT notices. The target attribute
 * lets the file build with any -march; the scalar loop finishes the tail. */
#define CVT_BLOCK 4096 /* elements per task */

__attribute__((target("avx512f,avx512bw,avx512bf16"))) static void cvt_bf16_block(uint16_t *d, const float *s,
                                                                                    size_t n) {
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        const __m512bh r = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(s + i + 16), _mm512_loadu_ps(s + i));
        _mm512_storeu_si512((void *)(d + i), (__m512i)r);
    }
    for (; i < n; i++) d[i] = f32_to_bf16(s[i]);
}

static void cvt_bf16(uint16_t *d, const float *s, size_t n) {
    const long ntasks = (long)((n + CVT_BLOCK - 1) / CVT_BLOCK);
#pragma omp parallel for schedule(static) if (ntasks > 1)
    for (long t = 0; t < ntasks; t++) {
        const size_t i0 = (size_t)t * CVT_BLOCK;
        cvt_bf16_block(d + i0, s + i0, n - i0 < CVT_BLOCK ? n - i0 : CVT_BLOCK);
    }
}

/* The operand `src` (n elements) in the working precision: returns src itself in fp32 mode. */
static const void *operand(cpu_ctx *cx, int slot, const float *src, size_t n) {
    if (cx->prec == LLM4D_PREC_FP32) return src;
    const size_t bytes = n * (cx->prec == LLM4D_PREC_BF16 ? 2 : 4);
    if (bytes > cx->cvt_cap[slot]) {
        free(cx->cvt[slot]);
        cx->cvt[slot] = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
        LLM4D_ASSERT(cx->cvt[slot], "out of memory converting a %zu-byte GEMM operand", bytes);
        cx->cvt_cap[slot] = bytes;
    }
    if (cx->prec == LLM4D_PREC_BF16) {
        cvt_bf16(cx->cvt[slot], src, n);
    } else {
        float *d = cx->cvt[slot];
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) d[i] = (float)(_Float16)src[i];
    }
    return cx->cvt[slot];
}

static llm4d_dnnl_type operand_type(const cpu_ctx *cx) {
    return cx->prec == LLM4D_PREC_BF16 ? LLM4D_DNNL_BF16 : LLM4D_DNNL_F32;
}

/* A 2-D GEMM (llm4d_dnnl_mm_2d's arguments) whose operands are in the working precision. */
static llm4d_dnnl_mm gemm_2d(const cpu_ctx *cx, int64_t M, int64_t N, int64_t K, int ta, int64_t lda, int tb,
                             int64_t ldb, int64_t ldc, int accumulate) {
    llm4d_dnnl_mm mm = llm4d_dnnl_mm_2d(M, N, K, ta, lda, tb, ldb, ldc, accumulate);
    mm.ab_type = operand_type(cx);
    return mm;
}

static llm4d_code cpu_set_precision(llm4d_backend *be, llm4d_precision p, llm4d_err *err) {
    cpu_ctx *cx = ctx_of(be);
    if (p == LLM4D_PREC_BF16 && !__builtin_cpu_supports("avx512bf16"))
        return llm4d_fail(err, LLM4D_EUSER,
                          "use_amp with bfloat16 needs a CPU with AVX512-BF16 (this one has none); train in fp32 "
                          "(--use_amp false) or use Engine.mix_precision.dtype float16");
    if (p != LLM4D_PREC_FP32) {
        /* create the bf16 primitives now, where errors can be reported */
        llm4d_dnnl_mm probe = llm4d_dnnl_mm_2d(8, 8, 8, 0, 8, 1, 8, 8, 0);
        probe.ab_type = p == LLM4D_PREC_BF16 ? LLM4D_DNNL_BF16 : LLM4D_DNNL_F32;
        LLM4D_TRY(llm4d_dnnl_prepare(cx->dnnl, &probe, NULL, err));
    }
    cx->prec = p;
    return LLM4D_OK;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* linear */

static void cpu_linear_forward(llm4d_backend *be, float *out, const float *inp, const float *w, const float *b,
                               int N, int C, int OC) {
    cpu_ctx *cx = ctx_of(be);
    /* out[N,OC] = inp[N,C] . (W[OC,C])^T: W is read as a [C,OC] operand with strides (1, C) */
    llm4d_dnnl_mm mm = gemm_2d(cx, N, OC, C, 0, C, 1, C, OC, 0);
    mm.has_bias = b != NULL;
    const void *a = operand(cx, 0, inp, (size_t)N * C), *bw = operand(cx, 1, w, (size_t)OC * C);
    llm4d_dnnl_matmul(cx->dnnl, &mm, a, bw, b, out);
}

#define DB_COLS 128 /* columns per bias-gradient task: each task sums whole columns, so no thread-count effect */

static void cpu_linear_backward(llm4d_backend *be, float *dinp, float *dw, float *db, const float *dout,
                                const float *inp, const float *w, int N, int C, int OC) {
    cpu_ctx *cx = ctx_of(be);
    llm4d_dnnl *d = cx->dnnl;
    const void *g = operand(cx, 0, dout, (size_t)N * OC);
    if (dinp) {
        llm4d_dnnl_mm mm = gemm_2d(cx, N, C, OC, 0, OC, 0, C, C, 1); /* dinp += dout[N,OC] W[OC,C] */
        llm4d_dnnl_matmul(d, &mm, g, operand(cx, 1, w, (size_t)OC * C), NULL, dinp);
    }
    llm4d_dnnl_mm mm = gemm_2d(cx, OC, C, N, 1, OC, 0, C, C, 1); /* dw += dout^T[OC,N] inp[N,C] */
    llm4d_dnnl_matmul(d, &mm, g, operand(cx, 1, inp, (size_t)N * C), NULL, dw);
    if (db) {
        const int ntasks = (OC + DB_COLS - 1) / DB_COLS;
#pragma omp parallel for schedule(static)
        for (int t = 0; t < ntasks; t++) {
            const int o0 = t * DB_COLS, len = OC - o0 < DB_COLS ? OC - o0 : DB_COLS;
            double acc[DB_COLS] = {0}; /* N is thousands of rows: float would drift from the reference */
            for (int n = 0; n < N; n++) {
                const float *row = dout + (size_t)n * OC + o0;
#pragma omp simd
                for (int j = 0; j < len; j++) acc[j] += row[j];
            }
            for (int j = 0; j < len; j++) db[o0 + j] += (float)acc[j];
        }
    }
}

/* ---------------------------------------------------------------------------------------------------------- */
/* encoder */

static void cpu_encoder_forward(llm4d_backend *be, float *out, const int32_t *tokens, const float *wte,
                                const float *wpe, int B, int T, int C) {
    (void)be;
#pragma omp parallel for schedule(static)
    for (int bt = 0; bt < B * T; bt++) {
        const float *we = wte + (size_t)tokens[bt] * C, *pe = wpe + (size_t)(bt % T) * C;
        float *o = out + (size_t)bt * C;
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = we[c] + pe[c];
    }
}

#define ENC_COLS 64 /* channels per embedding-gradient task: tokens repeat, so rows cannot be split safely */

static void cpu_encoder_backward(llm4d_backend *be, float *dwte, float *dwpe, const float *dout,
                                 const int32_t *tokens, int B, int T, int C) {
    (void)be;
    const int ntasks = (C + ENC_COLS - 1) / ENC_COLS;
#pragma omp parallel for schedule(static)
    for (int task = 0; task < ntasks; task++) {
        const int c0 = task * ENC_COLS, len = C - c0 < ENC_COLS ? C - c0 : ENC_COLS;
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                const float *dr = dout + ((size_t)b * T + t) * C + c0;
                float *dwe = dwte + (size_t)tokens[b * T + t] * C + c0, *dpe = dwpe + (size_t)t * C + c0;
#pragma omp simd
                for (int j = 0; j < len; j++) {
                    dwe[j] += dr[j];
                    dpe[j] += dr[j];
                }
            }
    }
}

/* ---------------------------------------------------------------------------------------------------------- */
/* layernorm */

static void cpu_layernorm_forward(llm4d_backend *be, float *out, float *mean, float *rstd, const float *inp,
                                  const float *w, const float *b, int N, int C) {
    (void)be;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int c = 0; c < C; c++) s += x[c];
        const float m = s / C;
        float v = 0.0f;
#pragma omp simd reduction(+ : v)
        for (int c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
        const float r = 1.0f / sqrtf(v / C + 1e-5f);
        float *o = out + (size_t)n * C;
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = (x[c] - m) * r * w[c] + b[c];
        if (mean) mean[n] = m;
        if (rstd) rstd[n] = r;
    }
}

#define LN_COLS 64 /* channels per dw/db task */

static void cpu_layernorm_backward(llm4d_backend *be, float *dinp, float *dw, float *db, const float *dout,
                                   const float *inp, const float *w, const float *mean, const float *rstd, int N,
                                   int C) {
    (void)be;
    const int ntasks = (C + LN_COLS - 1) / LN_COLS;
#pragma omp parallel
    {
        /* dinp row by row: dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat*xhat)), dxhat = dy*w */
#pragma omp for schedule(static)
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
            const float m = mean[n], r = rstd[n];
            float a = 0.0f, bsum = 0.0f;
#pragma omp simd reduction(+ : a, bsum)
            for (int c = 0; c < C; c++) {
                float dxhat = dy[c] * w[c];
                a += dxhat;
                bsum += dxhat * (x[c] - m) * r;
            }
            a /= C;
            bsum /= C;
            float *dx = dinp + (size_t)n * C;
#pragma omp simd
            for (int c = 0; c < C; c++) dx[c] += r * (dy[c] * w[c] - a - (x[c] - m) * r * bsum);
        }
        /* dw, db over fixed column blocks, rows in order */
#pragma omp for schedule(static)
        for (int task = 0; task < ntasks; task++) {
            const int c0 = task * LN_COLS, len = C - c0 < LN_COLS ? C - c0 : LN_COLS;
            double aw[LN_COLS] = {0}, ab[LN_COLS] = {0};
            for (int n = 0; n < N; n++) {
                const float *x = inp + (size_t)n * C + c0, *dy = dout + (size_t)n * C + c0;
                const float m = mean[n], r = rstd[n];
#pragma omp simd
                for (int j = 0; j < len; j++) {
                    aw[j] += dy[j] * (x[j] - m) * r;
                    ab[j] += dy[j];
                }
            }
            for (int j = 0; j < len; j++) {
                dw[c0 + j] += (float)aw[j];
                db[c0 + j] += (float)ab[j];
            }
        }
    }
}

/* ---------------------------------------------------------------------------------------------------------- */
/* GELU */

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define EW_CHUNK 4096              /* elements per element-wise task */

static void cpu_gelu_forward(llm4d_backend *be, float *out, const float *inp, size_t n) {
    (void)be;
    const long ntasks = (long)((n + EW_CHUNK - 1) / EW_CHUNK);
#pragma omp parallel for schedule(static)
    for (long t = 0; t < ntasks; t++) {
        const size_t i0 = (size_t)t * EW_CHUNK, i1 = i0 + EW_CHUNK < n ? i0 + EW_CHUNK : n;
#pragma omp simd
        for (size_t i = i0; i < i1; i++) {
            float x = inp[i];
            out[i] = 0.5f * x * (1.0f + vtanh(GELU_K * (x + 0.044715f * x * x * x)));
        }
    }
}

static void cpu_gelu_backward(llm4d_backend *be, float *dinp, const float *inp, const float *dout, size_t n) {
    (void)be;
    const long ntasks = (long)((n + EW_CHUNK - 1) / EW_CHUNK);
#pragma omp parallel for schedule(static)
    for (long t = 0; t < ntasks; t++) {
        const size_t i0 = (size_t)t * EW_CHUNK, i1 = i0 + EW_CHUNK < n ? i0 + EW_CHUNK : n;
#pragma omp simd
        for (size_t i = i0; i < i1; i++) {
            float x = inp[i];
            float th = vtanh(GELU_K * (x + 0.044715f * x * x * x));
            float dth = (1.0f - th * th) * GELU_K * (1.0f + 3.0f * 0.044715f * x * x);
            dinp[i] += (0.5f * (1.0f + th) + 0.5f * x * dth) * dout[i];
        }
    }
}

/* ---------------------------------------------------------------------------------------------------------- */
/* causal self-attention */

/* Position of (b,h,t1,0) in the attention-dropout stream (backend.h). */
static uint64_t att_row_pos(const llm4d_attn_shape *s, const llm4d_dropout *d, int b, int h, int t1) {
    return (((uint64_t)d->sample_ids[b] * s->NH_total + s->head0 + h) * s->T + t1) * s->T;
}

/* Flash-style (FlashAttention-2) attention: the scores are never stored whole. A task takes a block of ATT_TB
 * query rows and walks the key blocks of ATT_KB keys left of and on the diagonal; forward keeps a running max
 * and sum per row (online softmax, rescaling the output accumulator when the max grows) and leaves only the
 * log-sum-exp per row; backward recomputes each block's probabilities from it. ATT_KB = 256 keeps the per-thread
 * blocks (four ATT_TB x ATT_KB arrays, 512 KiB) within L2 while halving the GEMM calls of a 128-key block. The
 * causal waste is only the upper triangle of the diagonal ATT_TB x ATT_TB square, as keys >= the block's last
 * row are never computed. */
#ifndef ATT_KB
#define ATT_KB 256
#endif
_Static_assert(ATT_KB <= DROP_CHUNK, "one drop_mults call covers a key block row");

/* The GEMMs of (row block i, key block j) of one head, as 2-D problems on strided views: qkv rows are 3C apart,
 * out and dout rows C apart, the per-thread blocks rows ATT_KB apart, the output accumulator rows HS apart.
 * Rows [r0, r1) of the block (m of them), keys [c0, c1) (n of them). */
enum { P_S, P_PV, P_DP, P_DV, P_DQ, P_DK, ATT_NPRIM };

typedef struct {
    const llm4d_attn_shape *s;
    const llm4d_dropout *drop; /* NULL when not dropping */
    int T, HS, C, C3, nblk, nkb;
    float scale;
    llm4d_precision prec;
    size_t esz;            /* bytes of one GEMM operand element */
    const void *qkv;       /* qkv in the operand precision (qkv itself in fp32 mode) */
    const void *dout;      /* backward: dout in the operand precision */
    llm4d_dnnl_prim **prims;
} att_call;

static llm4d_dnnl_prim **att_prim(const att_call *ac, int i, int j) {
    return ac->prims + ((size_t)i * ac->nkb + j) * ATT_NPRIM;
}

static void att_prims(cpu_ctx *cx, const att_call *ac, int backward) {
    const int T = ac->T, HS = ac->HS, C = ac->C, C3 = ac->C3;
    for (int i = 0; i < ac->nblk; i++) {
        const int r0 = i * ATT_TB, r1 = r0 + ATT_TB < T ? r0 + ATT_TB : T, m = r1 - r0;
        for (int j = 0; j * ATT_KB < r1; j++) {
            const int c0 = j * ATT_KB, n = (c0 + ATT_KB < r1 ? c0 + ATT_KB : r1) - c0;
            llm4d_dnnl_prim **q = att_prim(ac, i, j);
            llm4d_dnnl_mm mm = gemm_2d(cx, m, n, HS, 0, C3, 1, C3, ATT_KB, 0); /* S = scale Q K^T */
            mm.alpha = ac->scale;
            q[P_S] = llm4d_dnnl_get_mt(cx->dnnl, &mm);
            if (!backward) {
                mm = gemm_2d(cx, m, HS, n, 0, ATT_KB, 0, C3, HS, 1); /* O += P~ V */
                q[P_PV] = llm4d_dnnl_get_mt(cx->dnnl, &mm);
                continue;
            }
            mm = gemm_2d(cx, m, n, HS, 0, C, 1, C3, ATT_KB, 0); /* dP~ = dout V^T */
            q[P_DP] = llm4d_dnnl_get_mt(cx->dnnl, &mm);
            mm = gemm_2d(cx, n, HS, m, 1, ATT_KB, 0, C, C3, 1); /* dV += P~^T dout */
            q[P_DV] = llm4d_dnnl_get_mt(cx->dnnl, &mm);
            mm = gemm_2d(cx, m, HS, n, 0, ATT_KB, 0, C3, C3, 1); /* dQ += dS K */
            q[P_DQ] = llm4d_dnnl_get_mt(cx->dnnl, &mm);
            mm = gemm_2d(cx, n, HS, m, 1, ATT_KB, 0, C3, C3, 1); /* dK += dS^T Q */
            q[P_DK] = llm4d_dnnl_get_mt(cx->dnnl, &mm);
        }
    }
}

/* Floats of one thread's scratch: S and dP blocks (fp32), the P~ and dS blocks in operand precision (sized as
 * fp32), the m x HS output accumulator, the running max and sum, and backward's D of a whole head. Rounded to
 * 64 bytes so every thread's slice starts aligned. */
static size_t att_thread_floats(int T, int HS) {
    const size_t n = 4 * (size_t)ATT_TB * ATT_KB + (size_t)ATT_TB * HS + 2 * (size_t)ATT_TB + (size_t)T;
    return (n + 15) & ~(size_t)15;
}

/* Set up one call: the operands in the working precision, room for the primitive handles and each thread's
 * scratch (both grown on the first call of a larger shape only), and the primitives themselves. */
static att_call att_begin(cpu_ctx *cx, const llm4d_attn_shape *s, const llm4d_dropout *drop, const float *qkv,
                          const float *dout) {
    att_call ac = {.s = s, .drop = drop_on(drop) ? drop : NULL, .T = s->T, .HS = s->HS, .C = s->NH * s->HS};
    ac.C3 = 3 * ac.C;
    ac.nblk = (ac.T + ATT_TB - 1) / ATT_TB;
    ac.nkb = (ac.T + ATT_KB - 1) / ATT_KB;
    ac.scale = 1.0f / sqrtf((float)ac.HS);
    ac.prec = cx->prec;
    ac.esz = cx->prec == LLM4D_PREC_BF16 ? 2 : 4;
    /* the linear layers' conversion slots are free between kernels: Q, K, V are converted once per call */
    ac.qkv = operand(cx, 0, qkv, (size_t)s->B * ac.T * ac.C3);
    ac.dout = dout ? operand(cx, 1, dout, (size_t)s->B * ac.T * ac.C) : NULL;
    const size_t nprim = (size_t)ac.nblk * ac.nkb * ATT_NPRIM;
    if (nprim > cx->prims_cap) {
        free(cx->prims);
        cx->prims = malloc(nprim * sizeof *cx->prims);
        LLM4D_ASSERT(cx->prims != NULL, "out of memory for %zu attention primitive handles", nprim);
        cx->prims_cap = nprim;
    }
    ac.prims = cx->prims;
    const size_t per = att_thread_floats(ac.T, ac.HS), need = (size_t)omp_get_max_threads() * per;
    if (need > cx->work_cap) {
        free(cx->work);
        cx->work = aligned_alloc(64, need * sizeof(float));
        LLM4D_ASSERT(cx->work != NULL, "out of memory for the attention's per-thread blocks (%zu floats)", need);
        cx->work_cap = need;
    }
    att_prims(cx, &ac, dout != NULL);
    return ac;
}

/* Element e of an operand-precision array. */
static const void *att_at(const att_call *ac, const void *base, size_t e) {
    return (const char *)base + e * ac->esz;
}

/* Row of n operand-precision elements from fp32 src, whose first lim entries are valid and the rest zero. dst may
 * be src itself in fp32 mode. fp16 mode rounds to fp16 precision in fp32, as the linear layers do. */
static void att_store_row(const att_call *ac, void *dst, const float *src, int lim, int n) {
    if (ac->prec == LLM4D_PREC_BF16) {
        uint16_t *d = dst;
        cvt_bf16_block(d, src, (size_t)lim); /* single-threaded: called inside the tasks' parallel region */
        for (int t = lim; t < n; t++) d[t] = 0;
        return;
    }
    float *d = dst;
    if (ac->prec == LLM4D_PREC_FP16) {
#pragma omp simd
        for (int t = 0; t < lim; t++) d[t] = (float)(_Float16)src[t];
    } else if (d != src) {
        memcpy(d, src, (size_t)lim * sizeof(float));
    }
    for (int t = lim; t < n; t++) d[t] = 0.0f;
}

/* One forward task: rows [r0, r1) of head h of batch row b. */
static void att_forward_task(cpu_ctx *cx, const att_call *ac, float *work, int b, int h, int i, float *out,
                             float *lse) {
    const int T = ac->T, HS = ac->HS, C = ac->C, C3 = ac->C3;
    const int r0 = i * ATT_TB, r1 = r0 + ATT_TB < T ? r0 + ATT_TB : T, m = r1 - r0;
    float *S = work, *Pop = S + 2 * ATT_TB * ATT_KB, *O = S + 4 * ATT_TB * ATT_KB, *rmax = O + ATT_TB * HS;
    float *rsum = rmax + ATT_TB;
    const size_t q0 = (size_t)b * T * C3 + (size_t)h * HS; /* element of Q[b, 0, h, 0] */
    memset(O, 0, (size_t)m * HS * sizeof(float));
    for (int r = 0; r < m; r++) rmax[r] = -INFINITY, rsum[r] = 0.0f;
    /* fp32 without dropout multiplies the exponentials in place; otherwise P~ goes to the operand block */
    const int in_place = ac->prec == LLM4D_PREC_FP32 && !ac->drop;
    void *pa = in_place ? (void *)S : (void *)Pop;
    for (int j = 0; j * ATT_KB < r1; j++) {
        const int c0 = j * ATT_KB, c1 = c0 + ATT_KB < r1 ? c0 + ATT_KB : r1, n = c1 - c0;
        llm4d_dnnl_prim **p = att_prim(ac, i, j);
        llm4d_dnnl_run_mt(cx->dnnl, p[P_S], att_at(ac, ac->qkv, q0 + (size_t)r0 * C3),
                          att_at(ac, ac->qkv, q0 + C + (size_t)c0 * C3), NULL, S);
        for (int r = 0; r < m; r++) {
            const int t1 = r0 + r, lim = (t1 < c1 - 1 ? t1 : c1 - 1) - c0 + 1; /* keys t2 <= t1 of the block */
            float *srow = S + (size_t)r * ATT_KB;
            void *prow = (char *)pa + (size_t)r * ATT_KB * ac->esz;
            if (lim <= 0) { /* a row of the diagonal block that sees none of these keys */
                att_store_row(ac, prow, srow, 0, n);
                continue;
            }
            float mx = rmax[r];
#pragma omp simd reduction(max : mx)
            for (int t = 0; t < lim; t++) mx = srow[t] > mx ? srow[t] : mx;
            /* the first block always holds key 0, so rmax is finite from then on */
            const float f = rmax[r] == -INFINITY ? 0.0f : vexp(rmax[r] - mx);
            float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
            for (int t = 0; t < lim; t++) {
                srow[t] = vexp(srow[t] - mx);
                sum += srow[t];
            }
            rsum[r] = rsum[r] * f + sum;
            rmax[r] = mx;
            if (f != 1.0f) {
                float *o = O + (size_t)r * HS;
#pragma omp simd
                for (int c = 0; c < HS; c++) o[c] *= f;
            }
            if (ac->drop) {
                float mult[DROP_CHUNK];
                drop_mults(ac->drop, att_row_pos(ac->s, ac->drop, b, h, t1) + (uint64_t)c0, lim, mult);
#pragma omp simd
                for (int t = 0; t < lim; t++) srow[t] *= mult[t];
            }
            att_store_row(ac, prow, srow, lim, n);
        }
        llm4d_dnnl_run_mt(cx->dnnl, p[P_PV], pa, att_at(ac, ac->qkv, q0 + 2 * (size_t)C + (size_t)c0 * C3), NULL,
                          O);
    }
    for (int r = 0; r < m; r++) {
        const float inv = 1.0f / rsum[r], *o = O + (size_t)r * HS;
        float *y = out + ((size_t)b * T + r0 + r) * C + (size_t)h * HS;
#pragma omp simd
        for (int c = 0; c < HS; c++) y[c] = o[c] * inv;
        lse[((size_t)b * ac->s->NH + h) * T + r0 + r] = rmax[r] + logf(rsum[r]);
    }
}

/* Threads take whole (head, row block) tasks and run their GEMMs single-threaded (llm4d_dnnl_run_mt): attention
 * is many small independent GEMMs, better run side by side than each split over the threads, and the softmax of
 * a block happens while the block is in cache. */
static void cpu_attention_forward(llm4d_backend *be, float *out, float *lse, const float *qkv, llm4d_attn_shape s,
                                  const llm4d_dropout *drop) {
    cpu_ctx *cx = ctx_of(be);
    const att_call ac = att_begin(cx, &s, drop, qkv, NULL);
    const long nbh = (long)s.B * s.NH, ntasks = (long)ac.nblk * nbh;
    const size_t per = att_thread_floats(ac.T, ac.HS);
#pragma omp parallel
    {
        float *work = cx->work + (size_t)omp_get_thread_num() * per;
        /* largest row blocks first, so the dynamic schedule ends with the small ones */
#pragma omp for schedule(dynamic, 1)
        for (long task = 0; task < ntasks; task++) {
            const int i = ac.nblk - 1 - (int)(task / nbh), bh = (int)(task % nbh);
            att_forward_task(cx, &ac, work, bh / s.NH, bh % s.NH, i, out, lse);
        }
    }
}

/* One backward task: all of head h of batch row b (dK and dV of a key block receive a contribution from every
 * row block at or below it, so a head's blocks run in order on one thread; different heads write disjoint
 * columns of dqkv). */
static void att_backward_task(cpu_ctx *cx, const att_call *ac, float *work, int b, int h, float *dqkv,
                              const float *dout, const float *out, const float *lse) {
    const int T = ac->T, HS = ac->HS, C = ac->C, C3 = ac->C3;
    float *S = work, *dP = S + ATT_TB * ATT_KB, *Pop = dP + ATT_TB * ATT_KB, *dSop = Pop + ATT_TB * ATT_KB;
    float *D = S + 4 * ATT_TB * ATT_KB + ATT_TB * HS + 2 * ATT_TB;
    const size_t q0 = (size_t)b * T * C3 + (size_t)h * HS, y0 = (size_t)b * T * C + (size_t)h * HS;
    const float *lrow = lse + ((size_t)b * ac->s->NH + h) * T;
    /* D_t = sum_t2 P~ dP~ = dout_t . out_t: the softmax backward's row term, from the kept output */
    for (int t = 0; t < T; t++) {
        const float *dy = dout + y0 + (size_t)t * C, *y = out + y0 + (size_t)t * C;
        float d = 0.0f;
#pragma omp simd reduction(+ : d)
        for (int c = 0; c < HS; c++) d += dy[c] * y[c];
        D[t] = d;
    }
    const int in_place = ac->prec == LLM4D_PREC_FP32;          /* dS overwrites dP */
    const int p_in_place = in_place && !ac->drop;              /* P~ is P, in S */
    void *pa = p_in_place ? (void *)S : (void *)Pop, *da = in_place ? (void *)dP : (void *)dSop;
    for (int i = 0; i < ac->nblk; i++) {
        const int r0 = i * ATT_TB, r1 = r0 + ATT_TB < T ? r0 + ATT_TB : T, m = r1 - r0;
        for (int j = 0; j * ATT_KB < r1; j++) {
            const int c0 = j * ATT_KB, c1 = c0 + ATT_KB < r1 ? c0 + ATT_KB : r1, n = c1 - c0;
            llm4d_dnnl_prim **p = att_prim(ac, i, j);
            const void *qi = att_at(ac, ac->qkv, q0 + (size_t)r0 * C3);
            const void *kj = att_at(ac, ac->qkv, q0 + C + (size_t)c0 * C3);
            const void *vj = att_at(ac, ac->qkv, q0 + 2 * (size_t)C + (size_t)c0 * C3);
            const void *dyi = att_at(ac, ac->dout, y0 + (size_t)r0 * C);
            llm4d_dnnl_run_mt(cx->dnnl, p[P_S], qi, kj, NULL, S);
            llm4d_dnnl_run_mt(cx->dnnl, p[P_DP], dyi, vj, NULL, dP);
            for (int r = 0; r < m; r++) {
                const int t1 = r0 + r, lim = (t1 < c1 - 1 ? t1 : c1 - 1) - c0 + 1;
                float *srow = S + (size_t)r * ATT_KB, *grow = dP + (size_t)r * ATT_KB;
                void *prow = (char *)pa + (size_t)r * ATT_KB * ac->esz;
                void *drow = (char *)da + (size_t)r * ATT_KB * ac->esz;
                if (lim <= 0) {
                    att_store_row(ac, prow, srow, 0, n);
                    att_store_row(ac, drow, grow, 0, n);
                    continue;
                }
                const float l = lrow[t1], Dt = D[t1];
#pragma omp simd
                for (int t = 0; t < lim; t++) srow[t] = vexp(srow[t] - l); /* P */
                if (ac->drop) {
                    /* P~ = mult P goes to the operand block, dP = mult dP~ in place */
                    float mult[DROP_CHUNK], pt[ATT_KB];
                    drop_mults(ac->drop, att_row_pos(ac->s, ac->drop, b, h, t1) + (uint64_t)c0, lim, mult);
#pragma omp simd
                    for (int t = 0; t < lim; t++) {
                        pt[t] = srow[t] * mult[t];
                        grow[t] *= mult[t];
                    }
                    att_store_row(ac, prow, pt, lim, n);
                } else {
                    att_store_row(ac, prow, srow, lim, n);
                }
                /* dS = scale P (dP - D) */
#pragma omp simd
                for (int t = 0; t < lim; t++) grow[t] = ac->scale * srow[t] * (grow[t] - Dt);
                att_store_row(ac, drow, grow, lim, n);
            }
            float *dq = dqkv + q0 + (size_t)r0 * C3, *dk = dqkv + q0 + C + (size_t)c0 * C3;
            float *dv = dqkv + q0 + 2 * (size_t)C + (size_t)c0 * C3;
            llm4d_dnnl_run_mt(cx->dnnl, p[P_DV], pa, dyi, NULL, dv);
            llm4d_dnnl_run_mt(cx->dnnl, p[P_DQ], da, kj, NULL, dq);
            llm4d_dnnl_run_mt(cx->dnnl, p[P_DK], da, qi, NULL, dk);
        }
    }
}

static void cpu_attention_backward(llm4d_backend *be, float *dqkv, const float *dout, const float *out,
                                   const float *qkv, const float *lse, llm4d_attn_shape s, const llm4d_dropout *drop) {
    cpu_ctx *cx = ctx_of(be);
    const att_call ac = att_begin(cx, &s, drop, qkv, dout);
    const size_t per = att_thread_floats(ac.T, ac.HS);
#pragma omp parallel
    {
        float *work = cx->work + (size_t)omp_get_thread_num() * per;
#pragma omp for schedule(dynamic, 1)
        for (long bh = 0; bh < (long)s.B * s.NH; bh++)
            att_backward_task(cx, &ac, work, (int)(bh / s.NH), (int)(bh % s.NH), dqkv, dout, out, lse);
    }
}

/* ---------------------------------------------------------------------------------------------------------- */
/* dropout */

/* Runs body over [B,row] in tasks of DROP_CHUNK positions within one batch row, with mult[] the multipliers
 * of the task's positions (position of (b,i) = sample_ids[b]*row + i). */
#define DROP_FOREACH(B, row, drop, ...)                                                                         \
    do {                                                                                                         \
        const size_t per_row_ = ((row) + DROP_CHUNK - 1) / DROP_CHUNK;                                          \
        const long ntasks_ = (long)((size_t)(B)*per_row_);                                                       \
        _Pragma("omp parallel for schedule(static)") for (long task_ = 0; task_ < ntasks_; task_++) {           \
            const int b_ = (int)((size_t)task_ / per_row_);                                                      \
            const size_t i0_ = ((size_t)task_ % per_row_) * DROP_CHUNK;                                          \
            const int n = (int)((row)-i0_ < DROP_CHUNK ? (row)-i0_ : DROP_CHUNK);                               \
            const size_t k0 = (size_t)b_ * (row) + i0_;                                                          \
            float mult[DROP_CHUNK];                                                                              \
            drop_mults((drop), (uint64_t)(drop)->sample_ids[b_] * (row) + i0_, n, mult);                         \
            __VA_ARGS__                                                                                          \
        }                                                                                                        \
    } while (0)

static void cpu_dropout_forward(llm4d_backend *be, float *out, const float *inp, int B, size_t row,
                                const llm4d_dropout *drop) {
    if (!drop_on(drop)) {
        if (out != inp) cpu_copy(be, out, inp, (size_t)B * row * sizeof(float));
        return;
    }
    DROP_FOREACH(B, row, drop, {
        _Pragma("omp simd") for (int i = 0; i < n; i++) out[k0 + i] = inp[k0 + i] * mult[i];
    });
}

static void cpu_dropout_backward(llm4d_backend *be, float *dinp, const float *dout, int B, size_t row,
                                 const llm4d_dropout *drop) {
    (void)be;
    if (!drop_on(drop)) {
        const size_t n = (size_t)B * row;
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) dinp[i] += dout[i];
        return;
    }
    DROP_FOREACH(B, row, drop, {
        _Pragma("omp simd") for (int i = 0; i < n; i++) dinp[k0 + i] += dout[k0 + i] * mult[i];
    });
}

static void cpu_dropout_add_forward(llm4d_backend *be, float *out, const float *res, const float *x, int B,
                                    size_t row, const llm4d_dropout *drop) {
    (void)be;
    if (!drop_on(drop)) {
        const size_t n = (size_t)B * row;
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) out[i] = res[i] + x[i];
        return;
    }
    DROP_FOREACH(B, row, drop, {
        _Pragma("omp simd") for (int i = 0; i < n; i++) out[k0 + i] = res[k0 + i] + x[k0 + i] * mult[i];
    });
}

static void cpu_dropout_add_backward(llm4d_backend *be, float *dres, float *dx, const float *dout, int B,
                                     size_t row, const llm4d_dropout *drop) {
    (void)be;
    if (!drop_on(drop)) {
        const size_t n = (size_t)B * row;
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) {
            dres[i] += dout[i];
            dx[i] += dout[i];
        }
        return;
    }
    DROP_FOREACH(B, row, drop, {
        _Pragma("omp simd") for (int i = 0; i < n; i++) {
            dres[k0 + i] += dout[k0 + i];
            dx[k0 + i] += dout[k0 + i] * mult[i];
        }
    });
}

/* ---------------------------------------------------------------------------------------------------------- */
/* softmax cross-entropy */

#define CE_BLOCK 2048 /* logits per float partial sum */

static void cpu_crossentropy_forward_backward(llm4d_backend *be, float *losses, float *dlogits, const float *logits,
                                              const int32_t *targets, const float *dloss, int N, int V, int Vp) {
    (void)be;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *l = logits + (size_t)n * Vp;
        const int y = targets[n];
        LLM4D_ASSERT(y >= 0 && y < V, "target %d of row %d outside the vocabulary [0, %d)", y, n, V);
        float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
        for (int j = 0; j < V; j++) mx = l[j] > mx ? l[j] : mx;
        const float ly = l[y]; /* read before dlogits (which may be logits) is written */
        /* float partial sums over blocks, added in double: a float-to-double reduction inside the exp loop
         * vectorises ten times worse, and a single float sum over 50k terms would lose digits */
        double sum = 0.0;
        float *d = dlogits ? dlogits + (size_t)n * Vp : NULL;
        for (int j0 = 0; j0 < V; j0 += CE_BLOCK) {
            const int j1 = j0 + CE_BLOCK < V ? j0 + CE_BLOCK : V;
            float s = 0.0f;
            if (d) {
                /* keep the exponentials in dlogits so the gradient pass does not recompute them */
#pragma omp simd reduction(+ : s)
                for (int j = j0; j < j1; j++) {
                    float e = vexp(l[j] - mx);
                    d[j] = e;
                    s += e;
                }
            } else {
#pragma omp simd reduction(+ : s)
                for (int j = j0; j < j1; j++) s += vexp(l[j] - mx);
            }
            sum += s;
        }
        if (d) {
            const float w = dloss ? dloss[n] : 1.0f, f = (float)(w / sum);
#pragma omp simd
            for (int j = 0; j < V; j++) d[j] *= f;
            d[y] -= w;
            for (int j = V; j < Vp; j++) d[j] = 0.0f;
        }
        if (losses) losses[n] = (float)(log(sum) + (double)mx - (double)ly);
    }
}

/* ---------------------------------------------------------------------------------------------------------- */
/* optimizer helpers */

static void cpu_adamw(llm4d_backend *be, float *params, const float *grads, float *m, float *v, size_t n, float lr,
                      float beta1, float beta2, float eps, float wd, int t, float grad_scale) {
    (void)be;
    const double bc1 = 1.0 - pow(beta1, t), bc2 = 1.0 - pow(beta2, t);
    const float lr_t = (float)(lr * sqrt(bc2) / bc1), eps_t = (float)(eps * sqrt(bc2));
    const float decay = lr * wd, omb1 = 1.0f - beta1, omb2 = 1.0f - beta2;
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float g = grads[i] * grad_scale;
        float p = params[i] - decay * params[i];
        float mi = beta1 * m[i] + omb1 * g;
        float vi = beta2 * v[i] + omb2 * g * g;
        m[i] = mi;
        v[i] = vi;
        params[i] = p - lr_t * mi / (sqrtf(vi) + eps_t);
    }
}

/* Chunks of a size that depends only on n, partial sums added in chunk order: thread count cannot change the
 * result. At most SUMSQ_MAXCHUNKS partials live on the stack. */
#define SUMSQ_MINCHUNK 16384
#define SUMSQ_MAXCHUNKS 4096

static double cpu_sumsq(llm4d_backend *be, const float *x, size_t n) {
    (void)be;
    size_t chunk = (n + SUMSQ_MAXCHUNKS - 1) / SUMSQ_MAXCHUNKS;
    if (chunk < SUMSQ_MINCHUNK) chunk = SUMSQ_MINCHUNK;
    const long nchunks = (long)((n + chunk - 1) / chunk);
    double part[SUMSQ_MAXCHUNKS];
#pragma omp parallel for schedule(static)
    for (long c = 0; c < nchunks; c++) {
        const size_t i0 = (size_t)c * chunk, i1 = i0 + chunk < n ? i0 + chunk : n;
        double s = 0.0;
#pragma omp simd reduction(+ : s)
        for (size_t i = i0; i < i1; i++) s += (double)x[i] * x[i];
        part[c] = s;
    }
    double total = 0.0;
    for (long c = 0; c < nchunks; c++) total += part[c];
    return total;
}

static void cpu_scale(llm4d_backend *be, float *x, float s, size_t n) {
    (void)be;
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* what the machine can do, and what the backend holds */

/* A 1024^3 GEMM (large enough for oneDNN's blocked kernels to reach their steady rate, small enough to cost
 * ~10 ms) in the operand precision of the linear layers, best of PEAK_REPS after a warm-up: at start-up on a
 * shared machine the best run is the closest to what the hardware can do. */
#define PEAK_DIM 1024
#define PEAK_REPS 5

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
        llm4d_dnnl_mm mm = gemm_2d(cx, PEAK_DIM, PEAK_DIM, PEAK_DIM, 0, PEAK_DIM, 1, PEAK_DIM, PEAK_DIM, 0);
        const void *pa = operand(cx, 0, a, n), *pb = operand(cx, 1, b, n);
        for (int r = 0; r <= PEAK_REPS; r++) {
            const double t0 = omp_get_wtime();
            llm4d_dnnl_matmul(cx->dnnl, &mm, pa, pb, NULL, c);
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
    return cx->cvt_cap[0] + cx->cvt_cap[1] + cx->work_cap * sizeof(float) + cx->prims_cap * sizeof *cx->prims +
           llm4d_dnnl_scratch_bytes(cx->dnnl);
}

/* ---------------------------------------------------------------------------------------------------------- */

static void cpu_destroy(llm4d_backend *be) {
    if (!be) return;
    cpu_ctx *cx = be->ctx;
    if (cx) {
        llm4d_dnnl_destroy(cx->dnnl);
        free(cx->work);
        free(cx->prims);
        free(cx->cvt[0]);
        free(cx->cvt[1]);
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
    llm4d_code rc = llm4d_dnnl_create(&cx->dnnl, err);
    if (rc != LLM4D_OK) {
        cpu_destroy(be);
        return rc;
    }
    /* oneDNN parallelises on the same OpenMP runtime, so this one setting governs both */
    if (nthreads > 0) omp_set_num_threads(nthreads);
    be->name = "cpu";
    be->nthreads = omp_get_max_threads();
    be->alloc = cpu_alloc;
    be->free = cpu_free;
    be->zero = cpu_zero;
    be->copy = cpu_copy;
    be->linear_forward = cpu_linear_forward;
    be->linear_backward = cpu_linear_backward;
    be->encoder_forward = cpu_encoder_forward;
    be->encoder_backward = cpu_encoder_backward;
    be->layernorm_forward = cpu_layernorm_forward;
    be->layernorm_backward = cpu_layernorm_backward;
    be->gelu_forward = cpu_gelu_forward;
    be->gelu_backward = cpu_gelu_backward;
    be->attention_forward = cpu_attention_forward;
    be->attention_backward = cpu_attention_backward;
    be->dropout_forward = cpu_dropout_forward;
    be->dropout_backward = cpu_dropout_backward;
    be->dropout_add_forward = cpu_dropout_add_forward;
    be->dropout_add_backward = cpu_dropout_add_backward;
    be->crossentropy_forward_backward = cpu_crossentropy_forward_backward;
    be->adamw = cpu_adamw;
    be->sumsq = cpu_sumsq;
    be->scale = cpu_scale;
    be->set_precision = cpu_set_precision;
    be->matmul_peak_gflops = cpu_matmul_peak_gflops;
    be->workspace_bytes = cpu_workspace_bytes;
    be->destroy = cpu_destroy;
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
