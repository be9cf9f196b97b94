/* cpu_amx_pack.c — operands into the bf16 tile layouts of cpu_amx.h, rounding to nearest even.
 *
 * Each packer is the conversion to bf16 a mixed-precision GEMM needs anyway (or, for an activation already stored in
 * bf16, the layout change alone), written to the place the tiles load from instead of in row order. Sources are
 * typed tensors (backend/tensor.h): fp32, bf16 or fp16, read 16 elements at a time as fp32 vectors.
 *  - A tiles of X (rows of X stay rows): 32 elements of a row are one 64-byte tile row.
 *  - B tiles of X [K, N] (K pairs of rows interleaved): two rows' 16 columns are rounded by one VCVTNE2PS2BF16 into
 *    [x0 ... x15, y0 ... y15] and VPERMW interleaves them into (x0, y0, x1, y1 ...), one 64-byte tile row.
 *  - B tiles of W^T and A tiles of G^T (a transposition): 16 vectors of 16 bf16 pairs (a row's 32 K elements, or
 *    two rows interleaved) are transposed as 32-bit elements (16 x 16, in registers), which puts each pair where
 *    the tile wants it.
 * Tails are zero: masked loads past a row's end, zero vectors past the last row. The weights' packs are also
 * written a run of elements at a time by the optimizer (the _range packers, cpu_amx.h), which touch only the
 * elements of their run: vector stores masked to the run's rows, and element by element for the at most two rows a
 * run cuts. */
#include <immintrin.h>
#include <omp.h>
#include <string.h>

#include "backend/cpu_amx.h"
#include "backend/cpu_impl.h"

#define TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

/* elements per piece of a row an activation is applied to on the stack (a multiple of 32) */
#define ACT_PIECE 1024

static inline int64_t kt_of(int K) { return llm4d_amx_pad(K, LLM4D_AMX_KB) / LLM4D_AMX_KB; }
static inline __mmask16 tail_mask(int64_t n) { return n >= 16 ? (__mmask16)0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1); }

/* elements [o, o + 16) of s as fp32 (n valid, the rest zero; s.p NULL: zeros) */
TARGET static inline __m512 ld16(llm4d_ctensor s, size_t o, int64_t n) {
    const __mmask16 m = tail_mask(n);
    if (!s.p || !m) return _mm512_setzero_ps();
    switch (s.t) {
    case LLM4D_BF16:
        return _mm512_castsi512_ps(
            _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, (const uint16_t *)s.p + o)), 16));
    case LLM4D_F16: return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)s.p + o));
    default: return _mm512_maskz_loadu_ps(m, (const float *)s.p + o);
    }
}

/* 32 bf16 of elements [o, o + 32) of s (n valid, the rest zero): [lo..., hi...] */
TARGET static inline __m512i cvt32(llm4d_ctensor s, size_t o, int64_t n) {
    return (__m512i)_mm512_cvtne2ps_pbh(ld16(s, o + 16, n - 16), ld16(s, o, n));
}

/* (x0, y0, x1, y1, ... x15, y15) of 16 elements of x from xo and of y from yo (n valid; a NULL p: zeros) */
TARGET static inline __m512i pairs16(llm4d_ctensor x, size_t xo, llm4d_ctensor y, size_t yo, int64_t n) {
    static const uint16_t ix[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                    8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    return _mm512_permutexvar_epi16(_mm512_loadu_si512(ix), (__m512i)_mm512_cvtne2ps_pbh(ld16(y, yo, n), ld16(x, xo, n)));
}

static const llm4d_ctensor none = {NULL, LLM4D_F32};

/* r[i] lane j <- r[j] lane i, for 16 vectors of 16 32-bit elements */
TARGET static inline void transpose16(__m512i r[16]) {
    __m512i t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
    }
    __m512i u[16]; /* u[4q + c], 128-bit lane L: rows 4q..4q+3 of column 4L + c */
    for (int q = 0; q < 16; q += 4) {
        u[q] = _mm512_unpacklo_epi64(t[q], t[q + 2]);
        u[q + 1] = _mm512_unpackhi_epi64(t[q], t[q + 2]);
        u[q + 2] = _mm512_unpacklo_epi64(t[q + 1], t[q + 3]);
        u[q + 3] = _mm512_unpackhi_epi64(t[q + 1], t[q + 3]);
    }
    for (int c = 0; c < 4; c++) { /* 4 x 4 transpose of 128-bit lanes of u[c], u[4 + c], u[8 + c], u[12 + c] */
        const __m512i v0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x44), v1 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xEE);
        const __m512i v2 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x44);
        const __m512i v3 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xEE);
        r[c] = _mm512_shuffle_i32x4(v0, v2, 0x88);
        r[4 + c] = _mm512_shuffle_i32x4(v0, v2, 0xDD);
        r[8 + c] = _mm512_shuffle_i32x4(v1, v3, 0x88);
        r[12 + c] = _mm512_shuffle_i32x4(v1, v3, 0xDD);
    }
}

/* Position of B[k][n] in the B tiles of a [K, N] operand with KT K tiles. */
static inline size_t b_at(int64_t KT, int64_t k, int64_t n) {
    return ((size_t)(n / 16) * (size_t)KT + (size_t)(k / 32)) * 512 + (size_t)((k % 32) / 2) * 32 + (size_t)(n % 16) * 2 +
           (size_t)(k & 1);
}

static inline uint16_t bf16_of(float v) {
    uint16_t h;
    llm4d_cpu_cvt_bf16_block(&h, &v, 1);
    return h;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* A tiles */

/* elements [k0, k0 + n) of A row r from elements [o, o + n) of src (k0 a multiple of 32; the tile row's elements past
 * n are zeroed) */
TARGET static void a_row_piece(uint16_t *dst, int64_t KT, int r, llm4d_ctensor src, size_t o, int64_t k0, int64_t n) {
    uint16_t *base = dst + (size_t)(r / 16) * (size_t)KT * 512 + (size_t)(r % 16) * 32;
    for (int64_t k = 0; k < n; k += 32)
        _mm512_storeu_si512(base + (size_t)((k0 + k) / 32) * 512, cvt32(src, o + (size_t)k, n - k));
}

void llm4d_amx_pack_a_row_piece(uint16_t *dst, int K, int r, const float *piece, int k0, int n) {
    a_row_piece(dst, kt_of(K), r, llm4d_ct32(piece), 0, k0, n);
}

void llm4d_amx_pack_a_pad_rows(uint16_t *dst, int M, int K) {
    const int64_t KT = kt_of(K), Mp = llm4d_amx_pad(M, LLM4D_AMX_MB);
    for (int64_t r = M; r < Mp; r++)
        for (int64_t kt = 0; kt < KT; kt++)
            memset(dst + ((size_t)(r / 16) * (size_t)KT + (size_t)kt) * 512 + (size_t)(r % 16) * 32, 0, 64);
}

/* n elements from element o of x through act, as fp32 in a (GELU's input widened first) */
static void act_piece(float *a, llm4d_ctensor x, size_t o, int64_t n) {
    float w[ACT_PIECE] __attribute__((aligned(64)));
    const float *v = cpu_in(x, o, (size_t)n, w);
#pragma omp simd
    for (int64_t i = 0; i < n; i++) a[i] = vgelu(v[i]);
}

void llm4d_amx_pack_a(uint16_t *dst, llm4d_ctensor x, int64_t ld, int M, int K, llm4d_act act) {
    const int64_t KT = kt_of(K);
#pragma omp parallel for schedule(static)
    for (int r = 0; r < M; r++) {
        const size_t row = (size_t)r * (size_t)ld;
        if (act == LLM4D_ACT_NONE) {
            a_row_piece(dst, KT, r, x, row, 0, K);
            continue;
        }
        float a[ACT_PIECE] __attribute__((aligned(64)));
        for (int64_t k0 = 0; k0 < K; k0 += ACT_PIECE) {
            const int64_t n = K - k0 < ACT_PIECE ? K - k0 : ACT_PIECE;
            act_piece(a, x, row + (size_t)k0, n);
            a_row_piece(dst, KT, r, llm4d_ct32(a), 0, k0, n);
        }
    }
    llm4d_amx_pack_a_pad_rows(dst, M, K);
}

/* A tile (mt, kt) of G^T: rows m of A are columns of G, so the tile is 32 rows of G (k) x 16 columns (m): pairs of
 * G's rows interleaved, then transposed. */
TARGET static void a_t_tile(uint16_t *dst, llm4d_ctensor g, int64_t ld, int M, int K, int64_t mt, int64_t kt) {
    __m512i r[16];
    const int64_t m0 = mt * 16, n = M - m0;
    for (int j = 0; j < 16; j++) {
        const int64_t k = kt * 32 + 2 * j;
        r[j] = pairs16(k < K ? g : none, (size_t)k * (size_t)ld + (size_t)m0, k + 1 < K ? g : none,
                       (size_t)(k + 1) * (size_t)ld + (size_t)m0, n);
    }
    transpose16(r);
    uint16_t *t = dst + ((size_t)mt * (size_t)kt_of(K) + (size_t)kt) * 512;
    for (int i = 0; i < 16; i++) _mm512_storeu_si512(t + i * 32, r[i]);
}

void llm4d_amx_pack_a_t_block(uint16_t *dst, llm4d_ctensor g, int64_t ld, int M, int K, int64_t kt0, int64_t kt1,
                              int64_t mt0, int64_t mt1) {
    const int64_t MT = llm4d_amx_pad(M, LLM4D_AMX_MB) / 16;
    if (mt1 > MT) mt1 = MT;
    for (int64_t kt = kt0; kt < kt1; kt++)
        for (int64_t mt = mt0; mt < mt1; mt++) a_t_tile(dst, g, ld, M, K, mt, kt);
}

void llm4d_amx_pack_a_t(uint16_t *dst, llm4d_ctensor g, int64_t ld, int M, int K) {
    const int64_t KT = kt_of(K), MT = llm4d_amx_pad(M, LLM4D_AMX_MB) / 16;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < MT * KT; t++) a_t_tile(dst, g, ld, M, K, t / KT, t % KT);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* B tiles */

/* the tile row of K pair p (rows 2p, 2p + 1 of X, each NULL past K) for columns [n0, n0 + n) (n0 a multiple of 16;
 * the columns past n get zeros up to the next multiple of 16) */
TARGET static void b_pair_piece(uint16_t *dst, int64_t KT, int64_t p, llm4d_ctensor x0, size_t o0, llm4d_ctensor x1,
                                size_t o1, int64_t n0, int64_t n) {
    const int64_t kt = p / 16, kk = p % 16;
    for (int64_t c = 0; c < n; c += 16)
        _mm512_storeu_si512(dst + ((size_t)((n0 + c) / 16) * (size_t)KT + (size_t)kt) * 512 + (size_t)kk * 32,
                            pairs16(x0, o0 + (size_t)c, x1, o1 + (size_t)c, n - c));
}

void llm4d_amx_pack_b(uint16_t *dst, llm4d_ctensor x, int64_t ld, int K, int N, llm4d_act act) {
    const int64_t KT = kt_of(K), Np = llm4d_amx_pad(N, LLM4D_AMX_MB);
#pragma omp parallel for schedule(static)
    for (int64_t p = 0; p < KT * 16; p++) {
        const llm4d_ctensor x0 = 2 * p < K ? x : none, x1 = 2 * p + 1 < K ? x : none;
        const size_t o0 = (size_t)(2 * p) * (size_t)ld, o1 = o0 + (size_t)ld;
        if (act == LLM4D_ACT_NONE || !x0.p) {
            b_pair_piece(dst, KT, p, x0, o0, x1, o1, 0, N);
        } else {
            float a0[ACT_PIECE] __attribute__((aligned(64))), a1[ACT_PIECE] __attribute__((aligned(64)));
            for (int64_t c0 = 0; c0 < N; c0 += ACT_PIECE) {
                const int64_t n = N - c0 < ACT_PIECE ? N - c0 : ACT_PIECE;
                act_piece(a0, x0, o0 + (size_t)c0, n);
                if (x1.p) act_piece(a1, x1, o1 + (size_t)c0, n);
                b_pair_piece(dst, KT, p, llm4d_ct32(a0), 0, x1.p ? llm4d_ct32(a1) : none, 0, c0, n);
            }
        }
        if (Np - llm4d_amx_pad(N, 16) > 0) /* a whole padding column tile */
            b_pair_piece(dst, KT, p, none, 0, none, 0, llm4d_amx_pad(N, 16), Np - llm4d_amx_pad(N, 16));
    }
}

/* B tile (nt, kt) of W^T: 16 rows of W (n) x 32 elements (k), each row's 16 pairs transposed into the tile's
 * columns. mask: the rows to store (the others' lanes are left as they are); rows past N are zero. stream: a whole
 * tile (mask 0xffff) goes past the caches (see the _range packers). */
TARGET static void b_t_tile(uint16_t *dst, llm4d_ctensor w, int64_t ld, int N, int K, int64_t nt, int64_t kt,
                            __mmask16 mask, int stream) {
    __m512i r[16];
    const int64_t k0 = kt * 32;
    for (int i = 0; i < 16; i++) {
        const int64_t n = nt * 16 + i;
        r[i] = n < N && (mask >> i & 1) ? cvt32(w, (size_t)n * (size_t)ld + (size_t)k0, K - k0) : _mm512_setzero_si512();
    }
    transpose16(r);
    uint16_t *t = dst + ((size_t)nt * (size_t)kt_of(K) + (size_t)kt) * 512;
    if (stream && mask == 0xffff)
        for (int j = 0; j < 16; j++) _mm512_stream_si512((void *)(t + j * 32), r[j]);
    else
        for (int j = 0; j < 16; j++) _mm512_mask_storeu_epi32(t + j * 32, mask, r[j]);
}

void llm4d_amx_pack_b_t(uint16_t *dst, llm4d_ctensor w, int64_t ld, int N, int K) {
    const int64_t KT = kt_of(K), NT = llm4d_amx_pad(N, LLM4D_AMX_MB) / 16;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < NT * KT; t++) b_t_tile(dst, w, ld, N, K, t / KT, t % KT, 0xffff, 0);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* runs of a weight's elements (the optimizer's)
 *
 * Whole 64-byte tile rows (a tile of W^T whose 16 weight rows the run holds, a pair of rows of W) are written with
 * streaming stores: the packs are read by the next forward and backward, long after the pass has gone through
 * every weight, and ordinary stores read each line before writing it (4 bytes of packs per parameter cost 8 of
 * traffic). On gpt2-en, two Sapphire Rapids threads, the bf16 optimizer pass with both packs took 128 ms this way
 * against 96 streaming (71 without packs); streaming one pack alone saved little, which an earlier test had taken
 * for no gain. Each run ends with a store fence, so the packs are visible before anyone reads them. */

/* The rows of [e0, e1) that the run covers whole: [*f0, *f1); the elements of the cut rows are packed one by one
 * with put(k, n) mapping (row, column) to (k, n) of the B operand. Returns 0 when no row is whole. */
static int whole_rows(size_t e0, size_t e1, int cols, int64_t *f0, int64_t *f1) {
    *f0 = (int64_t)((e0 + (size_t)cols - 1) / (size_t)cols);
    *f1 = (int64_t)(e1 / (size_t)cols);
    return *f0 < *f1;
}

static void cut_elements(uint16_t *dst, const float *w, int cols, int64_t KT, size_t e0, size_t e1, int64_t f0,
                         int64_t f1, int transposed) {
    const size_t w0 = (size_t)f0 * (size_t)cols, w1 = (size_t)f1 * (size_t)cols;
    for (size_t e = e0; e < e1; e++) {
        if (f0 < f1 && e >= w0 && e < w1) {
            e = w1 - 1;
            continue;
        }
        const int64_t r = (int64_t)(e / (size_t)cols), c = (int64_t)(e % (size_t)cols);
        dst[transposed ? b_at(KT, c, r) : b_at(KT, r, c)] = bf16_of(w[e]);
    }
}

void llm4d_amx_pack_b_t_range(uint16_t *dst, const float *w, int rows, int cols, size_t e0, size_t e1) {
    const int64_t KT = kt_of(cols);
    int64_t f0, f1;
    const int any = whole_rows(e0, e1, cols, &f0, &f1);
    cut_elements(dst, w, cols, KT, e0, e1, f0, f1, 1);
    if (!any) return;
    for (int64_t nt = f0 / 16; nt * 16 < f1; nt++) {
        const int64_t lo = f0 > nt * 16 ? f0 - nt * 16 : 0, hi = f1 < nt * 16 + 16 ? f1 - nt * 16 : 16;
        const __mmask16 mask = (__mmask16)(((1u << hi) - 1) & ~((1u << lo) - 1));
        for (int64_t kt = 0; kt < KT; kt++) b_t_tile(dst, llm4d_ct32(w), cols, rows, cols, nt, kt, mask, 1);
    }
    _mm_sfence();
}

/* The tile rows of K pair p for all N columns, from the rows present (x0, x1: NULL when the run does not hold
 * them): a pair the run cuts writes its row's lanes only. */
TARGET static void b_pair_masked(uint16_t *dst, int64_t KT, int64_t p, const float *x0, const float *x1, int N) {
    const __mmask32 m = x0 && x1 ? 0xffffffffu : x0 ? 0x55555555u : 0xaaaaaaaau;
    const int64_t kt = p / 16, kk = p % 16;
    for (int64_t c = 0; c < N; c += 16) {
        uint16_t *d = dst + ((size_t)(c / 16) * (size_t)KT + (size_t)kt) * 512 + (size_t)kk * 32;
        const __m512i v = pairs16(x0 ? llm4d_ct32(x0) : none, (size_t)c, x1 ? llm4d_ct32(x1) : none, (size_t)c, N - c);
        if (m == 0xffffffffu) _mm512_stream_si512((void *)d, v);
        else _mm512_mask_storeu_epi16(d, m, v);
    }
}

void llm4d_amx_pack_b_range(uint16_t *dst, const float *w, int rows, int cols, size_t e0, size_t e1) {
    const int64_t KT = kt_of(rows);
    int64_t f0, f1;
    const int any = whole_rows(e0, e1, cols, &f0, &f1);
    cut_elements(dst, w, cols, KT, e0, e1, f0, f1, 0);
    if (!any) return;
    for (int64_t p = f0 / 2; 2 * p < f1; p++) {
        const float *x0 = 2 * p >= f0 ? w + (size_t)(2 * p) * (size_t)cols : NULL;
        const float *x1 = 2 * p + 1 < f1 ? w + (size_t)(2 * p + 1) * (size_t)cols : NULL;
        b_pair_masked(dst, KT, p, x0, x1, cols);
    }
    _mm_sfence();
}
