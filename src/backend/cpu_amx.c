/* cpu_amx.c — the AMX bf16 GEMM kernel of cpu_amx.h: C[M, N] (=|+=) A B (+ bias) on operands in tile layouts.
 *
 * Eight tile registers: four 16 x 16 fp32 accumulators make a 32 x 32 block of C, and each K step (32 elements of
 * K) loads two A tiles and two B tiles and issues four TDPBF16PS, each loaded tile used twice. The unit retires one
 * TDPBF16PS (16 x 16 x 32 multiply-adds) per 16 cycles, so the step's 4 KiB of tile loads must come mostly from L1:
 * measured on Sapphire Rapids, one core, the same kernel ran at 2.8 TFLOP/s with both operands' K blocks in L1
 * (256 K: 16 KiB each) and at 1.5-2.0 with them in L2 (768 K). A thread holds a 32 x kc slice of A while it walks
 * the block's columns (each B slice read from L2), and C's tiles are stored after each K block and loaded again for
 * the next (4 KiB each way per kc / 8 TDPBF16PS). Inside whole products the C round trips weigh more than the
 * kernel alone shows: bench/amx_sweep.c on the lent 16-core Xeon (2 threads) found the whole of K in one block (the
 * first block starts C from zero or the bias, so C is then written once and never read) faster than blocks of 256
 * for 9 of the 12 products with K = 768 at 256 and 2048 tokens, and K blocks of 2048-3072 for 5 of the 8 longer ones.
 * So K goes in one block up to AMX_KC_MAX, in blocks of AMX_KC_LONG past it. A thread owns whole MC x NC blocks of C
 * (sized down until every thread has several), so no C element is shared and each is summed in one fixed order over
 * K, whatever the thread count and blocking.
 *
 * Tails: the packed operands are padded with zeros to 32 rows, 32 columns and 32 K (cpu_amx.h), so every kernel
 * call is a full 32 x 32 block in the packed space; a block of C that crosses M or N goes through a 32 x 32
 * buffer on the stack (loaded from and stored back to C's valid part). */
#include "backend/cpu_amx.h"

#include <immintrin.h>
#include <omp.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/error.h"

#define AMX_KC_MAX 4096  /* K up to this in one block (the model's layers: 768 to 3072) */
#define AMX_KC_LONG 1024 /* K per block past it (weight gradients over many tokens) */
#define AMX_KC_LONGK 256 /* K per block where K is long against C (below): C's block stays in L2 across them */
#define AMX_MC 256 /* rows of C per block */
#define AMX_NC 256 /* columns of C per block */

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

enum { INIT_LOAD, INIT_ZERO, INIT_BIAS };

#ifndef LLM4D_AMX_EMULATE
int llm4d_amx_usable(void) {
    unsigned a, b, c, d;
    __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(7), "c"(0));
    const int tile = (d >> 24) & 1, bf16 = (d >> 22) & 1;
    if (!tile || !bf16) return 0;
    /* the request is per process and idempotent; it fails where the kernel does not manage the tile state */
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
}

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_tilecfg;

/* Palette 1, eight tiles of 16 rows x 64 bytes. A constant: built on the stack, GCC 12 dropped the stores of the
 * column and row fields where it inlined this into a caller (it does not see LDTILECFG read them), and the
 * configuration loaded was garbage. */
static const amx_tilecfg tile_cfg = {
    .palette = 1,
    .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 16, 16},
};

__attribute__((target("amx-tile"))) static void tiles_configure(void) { _tile_loadconfig(&tile_cfg); }

__attribute__((target("amx-tile"))) static void tiles_release(void) { _tile_release(); }

/* The 32 x 32 block of C at c (row stride ldc floats) over `steps` K tiles: a0, a1 the first K tile of the block's
 * two A tile rows, b0, b1 of its two B tile columns (consecutive K tiles are 512 elements apart). init: start from
 * C (INIT_LOAD), from zero, or from bias (32 floats; a stride-0 load repeats it down the rows). */
__attribute__((target("amx-tile,amx-bf16"))) static void kernel(float *c, int64_t ldc, const uint16_t *a0,
                                                                 const uint16_t *a1, const uint16_t *b0,
                                                                 const uint16_t *b1, int steps, int init,
                                                                 const float *bias) {
    const long ld = (long)ldc * (long)sizeof(float);
    if (init == INIT_LOAD) {
        _tile_loadd(0, c, ld);
        _tile_loadd(1, c + 16, ld);
        _tile_loadd(2, c + 16 * ldc, ld);
        _tile_loadd(3, c + 16 * ldc + 16, ld);
    } else if (init == INIT_BIAS) {
        _tile_loadd(0, bias, 0);
        _tile_loadd(1, bias + 16, 0);
        _tile_loadd(2, bias, 0);
        _tile_loadd(3, bias + 16, 0);
    } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
    }
    for (int s = 0; s < steps; s++) {
        const size_t o = (size_t)s * 512;
        _tile_loadd(4, a0 + o, 64);
        _tile_loadd(6, b0 + o, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_loadd(7, b1 + o, 64);
        _tile_dpbf16ps(1, 4, 7);
        _tile_loadd(5, a1 + o, 64);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, c, ld);
    _tile_stored(1, c + 16, ld);
    _tile_stored(2, c + 16 * ldc, ld);
    _tile_stored(3, c + 16 * ldc + 16, ld);
}

#else
/* The kernel in plain C, for tests/test_amx_blocking.c, which compiles this file with LLM4D_AMX_EMULATE on any CPU to
 * check the blockings' walk over C, K and the tails: the same 32 x 32 block from the same tiles, each fp32 element
 * accumulating its K pairs in the kernel's order (the rounding inside TDPBF16PS is not modelled). */
int llm4d_amx_usable(void) { return 1; }
static void tiles_configure(void) {}
static void tiles_release(void) {}

static float emu_bf16(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static void kernel(float *c, int64_t ldc, const uint16_t *a0, const uint16_t *a1, const uint16_t *b0,
                   const uint16_t *b1, int steps, int init, const float *bias) {
    const uint16_t *a[2] = {a0, a1}, *b[2] = {b0, b1};
    for (int i = 0; i < 32; i++)
        for (int j = 0; j < 32; j++) {
            float acc = init == INIT_LOAD ? c[(size_t)i * ldc + j] : init == INIT_BIAS ? bias[j] : 0.0f;
            for (int s = 0; s < steps; s++) {
                const uint16_t *at = a[i / 16] + (size_t)s * 512 + (size_t)(i % 16) * 32;
                const uint16_t *bt = b[j / 16] + (size_t)s * 512 + (size_t)(j % 16) * 2;
                for (int kk = 0; kk < 16; kk++)
                    acc += emu_bf16(at[2 * kk]) * emu_bf16(bt[kk * 32]) +
                           emu_bf16(at[2 * kk + 1]) * emu_bf16(bt[kk * 32 + 1]);
            }
            c[(size_t)i * ldc + j] = acc;
        }
}
#endif

/* A block that crosses M or N: rows mr and columns nr of C are real. */
static void kernel_edge(float *c, int64_t ldc, int mr, int nr, const uint16_t *a0, const uint16_t *a1,
                        const uint16_t *b0, const uint16_t *b1, int steps, int init, const float *bias) {
    float tmp[32 * 32] __attribute__((aligned(64)));
    float bpad[32] __attribute__((aligned(64))) = {0};
    if (init == INIT_LOAD) {
        memset(tmp, 0, sizeof tmp);
        for (int i = 0; i < mr; i++) memcpy(tmp + i * 32, c + (size_t)i * ldc, (size_t)nr * sizeof(float));
    } else if (init == INIT_BIAS && bias) {
        memcpy(bpad, bias, (size_t)nr * sizeof(float));
    }
    kernel(tmp, 32, a0, a1, b0, b1, steps, init, bpad);
    for (int i = 0; i < mr; i++) memcpy(c + (size_t)i * ldc, tmp + i * 32, (size_t)nr * sizeof(float));
}

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* The 32 x 32 blocks of C in rows [m0, m1) and columns [n0, n1) over `steps` K tiles, on the calling thread: A's
 * 16-row groups a_rs elements apart from its first K tile, B's 16-column groups b_rs apart (consecutive K tiles 512
 * apart in both); the blocks crossing M or N through kernel_edge. Order 0 walks along N for each pair of A's tile
 * rows (their K slice stays in L1 while B's slices pass), order 1 along M for each pair of B's tile columns. */
static void blocks(float *C, int64_t ldc, const uint16_t *A, int64_t a_rs, const uint16_t *B, int64_t b_rs,
                   int64_t m0, int64_t m1, int64_t n0, int64_t n1, int M, int N, int steps, int init,
                   const float *bias, int order) {
    const int64_t outer0 = order ? n0 : m0, outer1 = order ? n1 : m1;
    const int64_t inner0 = order ? m0 : n0, inner1 = order ? m1 : n1;
    for (int64_t o = outer0; o < outer1; o += 32)
        for (int64_t i = inner0; i < inner1; i += 32) {
            const int64_t m = order ? i : o, n = order ? o : i;
            const uint16_t *a0 = A + (size_t)(m / 16) * (size_t)a_rs, *a1 = a0 + a_rs;
            const uint16_t *b0 = B + (size_t)(n / 16) * (size_t)b_rs, *b1 = b0 + b_rs;
            float *c = C + (size_t)m * (size_t)ldc + n;
            const float *bn = bias ? bias + n : NULL;
            if (m + 32 <= M && n + 32 <= N)
                kernel(c, ldc, a0, a1, b0, b1, steps, init, bn);
            else
                kernel_edge(c, ldc, M - m < 32 ? (int)(M - m) : 32, N - n < 32 ? (int)(N - n) : 32, a0, a1, b0, b1,
                            steps, init, bn);
        }
}

/* The C blocks threads own. A block streams its rows of A and its columns of B over the whole of K, so where K is
 * long against the output (the LM head's input gradient: 512 x 768 over K = 50304) the operands are read once per
 * block: 12 blocks of 128 x 256 read 464 MB for a 40 GFLOP product. There each thread gets one block, the larger side
 * cut in equal parts, kept under LONGK_C_BYTES so the block of C stays in L2 while the K blocks pass. Otherwise
 * blocks of up to AMX_MC x AMX_NC, halved until every thread has several (load balance). The K order of every C
 * element is the same either way: the blocking never changes a bit. */
#define LONGK_C_BYTES ((int64_t)768 << 10)

void llm4d_amx_blocking_of(int M, int N, int K, int nth, llm4d_amx_blocking *bk) {
    const int64_t Mp = llm4d_amx_pad(M, LLM4D_AMX_MB), Np = llm4d_amx_pad(N, LLM4D_AMX_MB);
    const int64_t Kp = llm4d_amx_pad(K, LLM4D_AMX_KB);
    const int longk = K >= 16 * (Mp > Np ? Mp : Np);
    int64_t mc = AMX_MC, nc = AMX_NC;
    if (longk) {
        mc = Mp, nc = Np;
        if (nc >= mc) nc = llm4d_amx_pad(cdiv(Np, nth), 32);
        else mc = llm4d_amx_pad(cdiv(Mp, nth), 32);
        while (mc * nc * (int64_t)sizeof(float) > LONGK_C_BYTES && (mc > 32 || nc > 32)) {
            if (mc >= nc && mc > 32) mc = llm4d_amx_pad(mc / 2, 32);
            else nc = llm4d_amx_pad(nc / 2, 32);
        }
    } else {
        while (cdiv(Mp, mc) * cdiv(Np, nc) < 4 * (int64_t)nth && (mc > 32 || nc > 32)) {
            if (mc >= nc && mc > 32) mc /= 2;
            else nc /= 2;
        }
    }
    const int64_t kc = longk ? AMX_KC_LONGK : Kp <= AMX_KC_MAX ? Kp : AMX_KC_LONG;
    *bk = (llm4d_amx_blocking){.mc = (int)mc, .nc = (int)nc, .kc = (int)(kc > 0 ? kc : LLM4D_AMX_KB), .order = 0};
}

void llm4d_amx_gemm_with(const llm4d_amx_blocking *blk, float *C, int64_t ldc, const uint16_t *A, const uint16_t *B,
                         const float *bias, int M, int N, int K, int accumulate) {
    if (M <= 0 || N <= 0) return;
    const int64_t Mp = llm4d_amx_pad(M, LLM4D_AMX_MB), Np = llm4d_amx_pad(N, LLM4D_AMX_MB);
    const int64_t KT = llm4d_amx_pad(K, LLM4D_AMX_KB) / LLM4D_AMX_KB; /* K tiles */
    llm4d_amx_blocking bk;
    if (blk) bk = *blk;
    else llm4d_amx_blocking_of(M, N, K, omp_get_max_threads(), &bk);
    const int64_t mc = bk.mc, nc = bk.nc, kct = bk.kc / LLM4D_AMX_KB; /* kct: K tiles per K block */
    LLM4D_ASSERT(mc > 0 && nc > 0 && kct > 0 && mc % 32 == 0 && nc % 32 == 0 && bk.kc % LLM4D_AMX_KB == 0,
                 "AMX blocking %d x %d x %d: each must be a positive multiple of 32", bk.mc, bk.nc, bk.kc);
    const int64_t nbm = cdiv(Mp, mc), nbn = cdiv(Np, nc), nblocks = nbm * nbn;
    const int init0 = accumulate ? INIT_LOAD : bias ? INIT_BIAS : INIT_ZERO;
    if (K <= 0) { /* no products: C is the bias, or what it held */
        if (!accumulate)
            for (int i = 0; i < M; i++)
                for (int j = 0; j < N; j++) C[(size_t)i * ldc + j] = bias ? bias[j] : 0.0f;
        return;
    }
#pragma omp parallel if (nblocks > 1)
    {
        tiles_configure();
#pragma omp for schedule(static)
        for (int64_t blk = 0; blk < nblocks; blk++) {
            const int64_t m0 = blk / nbn * mc, n0 = blk % nbn * nc;
            const int64_t m1 = m0 + mc < Mp ? m0 + mc : Mp, n1 = n0 + nc < Np ? n0 + nc : Np;
            for (int64_t k0 = 0; k0 < KT; k0 += kct) {
                const int steps = (int)(KT - k0 < kct ? KT - k0 : kct);
                blocks(C, ldc, A + (size_t)k0 * 512, KT * 512, B + (size_t)k0 * 512, KT * 512, m0, m1, n0, n1, M, N,
                       steps, k0 == 0 ? init0 : INIT_LOAD, bias, bk.order);
            }
        }
        tiles_release();
    }
}

void llm4d_amx_gemm(float *C, int64_t ldc, const uint16_t *A, const uint16_t *B, const float *bias, int M, int N,
                    int K, int accumulate) {
    llm4d_amx_gemm_with(NULL, C, ldc, A, B, bias, M, N, K, accumulate);
}

void llm4d_amx_tiles_on(void) { tiles_configure(); }
void llm4d_amx_tiles_off(void) { tiles_release(); }

void llm4d_amx_gemm_block(float *C, int64_t ldc, const uint16_t *A, int64_t a_rs, const uint16_t *B, int64_t b_rs,
                          int M, int N, int ksteps, int accumulate) {
    blocks(C, ldc, A, a_rs, B, b_rs, 0, M, 0, N, M, N, ksteps, accumulate ? INIT_LOAD : INIT_ZERO, NULL, 0);
}

static float bf16_value(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

void llm4d_amx_gemm_ref(float *C, int64_t ldc, const uint16_t *A, const uint16_t *B, const float *bias, int M, int N,
                        int K, int accumulate) {
    const int64_t KT = llm4d_amx_pad(K, LLM4D_AMX_KB) / LLM4D_AMX_KB;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double acc = accumulate ? C[(size_t)i * ldc + j] : bias ? bias[j] : 0.0;
            for (int k = 0; k < K; k++) {
                const uint16_t a = A[((size_t)(i / 16) * KT + k / 32) * 512 + (size_t)(i % 16) * 32 + k % 32];
                const uint16_t b = B[((size_t)(j / 16) * KT + k / 32) * 512 + (size_t)((k % 32) / 2) * 32 +
                                     (size_t)(j % 16) * 2 + (k & 1)];
                acc += (double)bf16_value(a) * bf16_value(b);
            }
            C[(size_t)i * ldc + j] = (float)acc;
        }
}
