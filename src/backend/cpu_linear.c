/* cpu_linear.c — the linear layers of the fast CPU backend: forward, input, weight and bias gradients, on oneDNN's
 * GEMMs or on llm4d's AMX kernel, and the memory their operands take (operand_workspace).
 *
 * Operands are typed tensors (backend/tensor.h): an activation stored as the GEMM's operands are (fp32 in fp32
 * precision; bf16 under bf16 on AVX512-BF16 kernels, as AMP O2 keeps them) is read in place, any other is converted
 * into a conversion slot (cpu.c llm4d_cpu_operand); an output oneDNN can store in its type (fp32; bf16 from bf16
 * operands) is written by the GEMM, rounded once after the bias and any accumulation, any other goes through the
 * fp32 result slot and one rounding pass (gemm_out). A bias gradient rides on the pass that converts the output
 * gradient where there is one, and takes its own pass over the 16-bit tensor where there is none. */
#include <immintrin.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu_amx.h"
#include "backend/cpu_impl.h"

#define OUT_BLOCK 4096 /* elements per task of the pass that rounds a GEMM's fp32 result into a 16-bit tensor */

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
static void colsum(cpu_ctx *cx, float *db, llm4d_ctensor dout, int N, int OC, void *dst, uint16_t *dst_t) {
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
            float wide[COLSUM_STRIP];
            for (int r = r0; r < r1; r++) {
                const float *row = cpu_in(dout, (size_t)r * OC + c0, (size_t)n, wide);
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
    const int fresh = llm4d_cpu_grad_take(cx, db, (size_t)OC * sizeof(float)); /* owed zeros: written, not added */
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
        for (int j = 0; j < len; j++) db[o0 + j] = (fresh ? 0.0f : db[o0 + j]) + (float)acc[j];
    }
}

/* dout [N, OC] in the working precision in conversion slot `slot`, with db += its column sums (not in fp32 mode,
 * where there is no conversion pass to join). */
static const void *operand_colsum(cpu_ctx *cx, int slot, llm4d_ctensor dout, int N, int OC, float *db) {
    WORK_SCOPE(cx, LLM4D_WORK_CONVERT);
    const size_t elems = cx->amx ? llm4d_amx_a_elems(N, OC) : (size_t)N * OC;
    void *dst = llm4d_cpu_slot(cx, slot, elems * llm4d_cpu_operand_bytes(cx->fmt));
    colsum(cx, db, dout, N, OC, dst, NULL);
    return dst;
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
/* a GEMM's output: oneDNN stores an fp32 result, or a bf16 one from bf16 operands (rounded once, after the bias and
 * any accumulation); anything else (a 16-bit output of an fp32 or emulated GEMM, of the AMX kernel, an fp16 output)
 * is computed into an fp32 slot and rounded into the tensor in one pass, which adds to what the tensor held where
 * the GEMM accumulates: old + new, rounded once. */

typedef struct {
    void *c;              /* where the GEMM writes, rows ldc apart */
    llm4d_dnnl_type type; /* c's type */
    int via_slot;         /* c is the fp32 slot: gemm_out_done rounds it into the tensor */
} gemm_out;

static gemm_out gemm_out_begin(cpu_ctx *cx, llm4d_tensor out, size_t n) {
    if (out.t == LLM4D_F32) return (gemm_out){out.p, LLM4D_DNNL_F32, 0};
    if (out.t == LLM4D_BF16 && cx->fmt == LLM4D_CPU_BF16 && !cx->amx) return (gemm_out){out.p, LLM4D_DNNL_BF16, 0};
    return (gemm_out){llm4d_cpu_slot(cx, 3, n * sizeof(float)), LLM4D_DNNL_F32, 1};
}

/* The result in the slot into out (n elements), added to what it held when accumulating. */
static void gemm_out_done(cpu_ctx *cx, const gemm_out *g, llm4d_tensor out, size_t n, int accumulate) {
    if (!g->via_slot) return;
    WORK_SCOPE(cx, LLM4D_WORK_CONVERT);
    const float *src = g->c;
    const long ntasks = (long)((n + OUT_BLOCK - 1) / OUT_BLOCK);
#pragma omp parallel for schedule(static) if (ntasks > 1)
    for (long t = 0; t < ntasks; t++) {
        const size_t i0 = (size_t)t * OUT_BLOCK, len = n - i0 < OUT_BLOCK ? n - i0 : OUT_BLOCK;
        if (!accumulate) {
            llm4d_cpu_store(out, i0, src + i0, len);
            continue;
        }
        float acc[OUT_BLOCK];
        llm4d_cpu_load(acc, llm4d_cv(out), i0, len);
#pragma omp simd
        for (size_t i = 0; i < len; i++) acc[i] += src[i0 + i];
        llm4d_cpu_store(out, i0, acc, len);
    }
}

/* ---------------------------------------------------------------------------------------------------------- */
/* linear layers on the AMX kernel (cpu_amx.h): every operand is converted into the tiles it is read from, the
 * weights once per update (the optimizer's pass writes both of a weight's packs), the activations and gradients per
 * call (the pass that converts them, or only lays them out when they are bf16 already):
 *   forward  out[N, OC] = act(X)[N, C] W^T          A: act(X) as A tiles       B: the tiles of W^T
 *   dinp     dX[N, C] (=|+=) dY[N, OC] W             A: dY as A tiles (+ db)    B: the tiles of W
 *   dw       dW[OC, C] += dY^T[OC, N] act(X)[N, C]   A: dY^T as A tiles         B: act(X) as B tiles
 * Slot 0 holds the first A operand, slots 1 and 2 the weight gradient's two, slot 3 a 16-bit output's fp32 result
 * (the kernel stores fp32). */

/* How a pack of an operand of type t is counted: a conversion, or (bf16 already) the GEMM's own layout work. */
static int pack_kind(llm4d_ftype t) { return t == LLM4D_BF16 ? LLM4D_WORK_GEMM : LLM4D_WORK_CONVERT; }

static void amx_forward(cpu_ctx *cx, llm4d_tensor out, llm4d_ctensor inp, llm4d_act act, const float *w,
                        const float *b, int N, int C, int OC) {
    uint16_t *a;
    cx->lin_amx = 1;
    {
        WORK_SCOPE(cx, act != LLM4D_ACT_NONE && inp.t == LLM4D_BF16 ? LLM4D_WORK_ELEM : pack_kind(inp.t));
        a = llm4d_cpu_slot(cx, 0, llm4d_amx_a_elems(N, C) * sizeof(uint16_t));
        llm4d_amx_pack_a(a, inp, C, N, C, act);
    }
    const gemm_out g = gemm_out_begin(cx, out, (size_t)N * OC);
    llm4d_amx_gemm(g.c, OC, a, llm4d_cpu_weight_tiles(cx, w, OC, C, LLM4D_CPU_TILES_WT), b, N, OC, C, 0);
    gemm_out_done(cx, &g, out, (size_t)N * OC, 0);
}

static void amx_backward(cpu_ctx *cx, llm4d_tensor dinp, llm4d_store dinp_store, float *dw, float *db,
                         llm4d_ctensor dout, llm4d_ctensor inp, llm4d_act act, const float *w, int N, int C, int OC) {
    uint16_t *g = NULL, *gt = NULL, *x = NULL;
    cx->lin_amx = 1;
    {
        /* dout's packs (the A tiles for dinp, their transpose for dw) and its column sums in one pass */
        WORK_SCOPE(cx, pack_kind(dout.t));
        if (dinp.p) g = llm4d_cpu_slot(cx, 0, llm4d_amx_a_elems(N, OC) * sizeof(uint16_t));
        if (dw) gt = llm4d_cpu_slot(cx, 1, llm4d_amx_a_elems(OC, N) * sizeof(uint16_t));
        colsum(cx, db, dout, N, OC, g, gt);
    }
    if (dinp.p) {
        const int acc = dinp_store == LLM4D_ADD;
        const gemm_out o = gemm_out_begin(cx, dinp, (size_t)N * C);
        llm4d_amx_gemm(o.c, C, g, llm4d_cpu_weight_tiles(cx, w, OC, C, LLM4D_CPU_TILES_W), NULL, N, C, OC,
                       acc && !o.via_slot);
        gemm_out_done(cx, &o, dinp, (size_t)N * C, acc);
    }
    if (!dw) return;
    {
        WORK_SCOPE(cx, act != LLM4D_ACT_NONE && inp.t == LLM4D_BF16 ? LLM4D_WORK_ELEM : pack_kind(inp.t));
        x = llm4d_cpu_slot(cx, 2, llm4d_amx_b_elems(N, C) * sizeof(uint16_t));
        llm4d_amx_pack_b(x, inp, C, N, C, act);
    }
    /* the first write of a gradient owed zeros stores the product instead of adding it (cpu_owed.c) */
    llm4d_amx_gemm(dw, C, gt, x, NULL, OC, C, N, !llm4d_cpu_grad_take(cx, dw, (size_t)OC * C * sizeof(float)));
}

static void cpu_linear_forward_act(llm4d_backend *be, llm4d_tensor out, llm4d_ctensor inp, llm4d_act act,
                                   const float *w, const float *b, int N, int C, int OC) {
    WORK_SCOPE(ctx_of(be), LLM4D_WORK_GEMM);
    cpu_ctx *cx = ctx_of(be);
    if (cx->amx) {
        amx_forward(cx, out, inp, act, w, b, N, C, OC);
        return;
    }
    const void *a = llm4d_cpu_operand_act(cx, 0, inp, (size_t)N * C, act);
    const char *wop = llm4d_cpu_weight(cx, w, (size_t)OC * C);
    const size_t es = llm4d_cpu_operand_bytes(cx->fmt);
    const gemm_out g = gemm_out_begin(cx, out, (size_t)N * OC);
    const size_t cs = g.type == LLM4D_DNNL_BF16 ? 2 : sizeof(float);
    const int cols = forward_in_blocks(cx, N, OC) ? WIDE_COLS : OC;
    for (int o0 = 0; o0 < OC; o0 += cols) {
        const int n = OC - o0 < cols ? OC - o0 : cols;
        /* out[N, o0:o0+n] = act(inp)[N,C] . (W[o0:o0+n, C])^T: W is read as a [C,n] operand with strides (1, C) */
        llm4d_dnnl_mm mm = llm4d_cpu_gemm_2d(cx, N, n, C, 0, C, 1, C, OC, 0);
        mm.has_bias = b != NULL;
        mm.c_type = g.type;
        llm4d_dnnl_matmul(cx->dnnl, &mm, a, wop + (size_t)o0 * C * es, b ? b + o0 : NULL, (char *)g.c + (size_t)o0 * cs);
    }
    gemm_out_done(cx, &g, out, (size_t)N * OC, 0);
}

static void cpu_linear_forward(llm4d_backend *be, llm4d_tensor out, llm4d_ctensor inp, const float *w, const float *b,
                               int N, int C, int OC) {
    cpu_linear_forward_act(be, out, inp, LLM4D_ACT_NONE, w, b, N, C, OC);
}

/* db[C] += column sums of dout[N, C] */
static void cpu_bias_backward(llm4d_backend *be, float *db, llm4d_ctensor dout, int N, int C) {
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

static void cpu_linear_backward_act(llm4d_backend *be, llm4d_tensor dinp, llm4d_store dinp_store, float *dw, float *db,
                                    llm4d_ctensor dout, llm4d_ctensor inp, llm4d_act act, const float *w, int N, int C,
                                    int OC) {
    WORK_SCOPE(ctx_of(be), LLM4D_WORK_GEMM);
    cpu_ctx *cx = ctx_of(be);
    llm4d_dnnl *d = cx->dnnl;
    if (cx->amx && (dinp.p || dw)) {
        amx_backward(cx, dinp, dinp_store, dw, db, dout, inp, act, w, N, C, OC);
        return;
    }
    if (!dinp.p && !dw) {
        if (db) cpu_bias_backward(be, db, dout, N, OC);
        return;
    }
    /* where dout is converted for the GEMMs, the bias gradient comes with that pass */
    const int fused_db = db && !llm4d_cpu_in_place(cx->fmt, dout.t);
    const void *g = fused_db ? operand_colsum(cx, 0, dout, N, OC, db) : llm4d_cpu_operand(cx, 0, dout, (size_t)N * OC);
    if (dinp.p) {
        const void *wop = llm4d_cpu_weight(cx, w, (size_t)OC * C);
        const int acc = dinp_store == LLM4D_ADD;
        const gemm_out o = gemm_out_begin(cx, dinp, (size_t)N * C);
        if (dinp_transposed(cx, N, C, OC)) {
            dinp_by_blocks(cx, o.c, acc && !o.via_slot, g, wop, N, C, OC);
        } else { /* dinp (=|+=) dout[N,OC] W[OC,C] */
            llm4d_dnnl_mm mm = llm4d_cpu_gemm_2d(cx, N, C, OC, 0, OC, 0, C, C, acc && !o.via_slot);
            mm.c_type = o.type;
            llm4d_dnnl_matmul(d, &mm, g, wop, NULL, o.c);
        }
        gemm_out_done(cx, &o, dinp, (size_t)N * C, acc);
    }
    if (dw) { /* dw += dout^T[OC,N] act(inp)[N,C]; stored where dw is owed zeros (cpu_owed.c: beta 0, no read) */
        const int acc = !llm4d_cpu_grad_take(cx, dw, (size_t)OC * C * sizeof(float));
        llm4d_dnnl_mm mm = llm4d_cpu_gemm_2d(cx, OC, C, N, 1, OC, 0, C, C, acc);
        llm4d_dnnl_matmul(d, &mm, g, llm4d_cpu_operand_act(cx, 1, inp, (size_t)N * C, act), NULL, dw);
    }
    if (db && !fused_db) cpu_bias_backward(be, db, dout, N, OC);
}

static void cpu_linear_backward(llm4d_backend *be, llm4d_tensor dinp, llm4d_store dinp_store, float *dw, float *db,
                                llm4d_ctensor dout, llm4d_ctensor inp, const float *w, int N, int C, int OC) {
    cpu_linear_backward_act(be, dinp, dinp_store, dw, db, dout, inp, LLM4D_ACT_NONE, w, N, C, OC);
}

/* The two conversion slots, each as large as the largest operand they hold: only what the backend makes (an
 * activation applied, the attention's packed panels) where the activations are stored as the GEMMs read them (fp32
 * in fp32, bf16 under bf16 on AVX512-BF16: llm4d_cpu_in_place), every converted operand otherwise; the bias
 * gradients' partial sums (a double per 64 elements of an output gradient, at most the widest activation's); where
 * input gradients may go through a transposed weight (dinp_transposed: fp32 operands on an AVX2 CPU), its block, at
 * most WT_BLOCK_BYTES (the plan does not know whether the model's shapes will call for it, so it counts it whenever
 * they might); and where 16-bit activations come out of GEMMs that cannot store them (an emulated format, the AMX
 * kernel), the fp32 result slot, as large as the largest operand. On the AMX path three slots hold tiles: two of
 * any operand (the input gradient's output gradient, the weight gradient's transposed one) and one of an activation
 * (the weight gradient's input), each with its padding to 32 rows and columns. */
static size_t cpu_operand_workspace(llm4d_backend *be, llm4d_operand_sizes s, llm4d_precision prec) {
    const llm4d_cpu_fmt fmt = llm4d_cpu_fmt_for(ctx_of(be), prec);
    const int amx = llm4d_cpu_amx_for(prec);
    const size_t slot = llm4d_cpu_in_place(fmt, s.act) ? s.made : s.read, es = llm4d_cpu_operand_bytes_of(be, prec);
    const size_t result = s.act != LLM4D_F32 && (amx || fmt != LLM4D_CPU_BF16) ? s.read * sizeof(float) : 0;
    if (amx) {
        const size_t pad = (LLM4D_AMX_MB - 1) * (s.rows + s.cols) + LLM4D_AMX_MB * LLM4D_AMX_MB;
        return (2 * (s.read + pad) + s.made + pad) * es + (s.made / COLSUM_ROWS + 1) * sizeof(double) + result;
    }
    const size_t wt = ctx_of(be)->avx2_nocopy && es == sizeof(float) ? WT_BLOCK_BYTES : 0;
    return 2 * slot * es + (s.made / COLSUM_ROWS + 1) * sizeof(double) + wt + result;
}

void llm4d_cpu_linear_install(llm4d_backend *be) {
    be->linear_forward = cpu_linear_forward;
    be->linear_backward = cpu_linear_backward;
    be->linear_forward_act = cpu_linear_forward_act;
    be->linear_backward_act = cpu_linear_backward_act;
    be->bias_forward = cpu_bias_forward;
    be->bias_backward = cpu_bias_backward;
    be->operand_workspace = cpu_operand_workspace;
}
