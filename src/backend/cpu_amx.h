/* cpu_amx.h — bf16 GEMMs on Intel AMX tiles, with our own kernel and operand layouts (private to src/backend, the
 * tests and bench/).
 *
 * Why our own: oneDNN 2.6 (Debian bookworm's) multiplies plain-layout bf16 operands on AMX at 1.2-1.5 TFLOP/s on
 * two Sapphire Rapids cores inside a training step, a fifth of what the tile unit executes (TDPBF16PS: 1024 FLOP per
 * cycle and core; 6.8 TFLOP/s measured on 2 cores with operands in tiles), because every call re-packs B into the
 * pair-interleaved ("VNNI") layout the unit reads, in a scratchpad, and its blocking keeps neither operand in L1. The
 * backend converts every GEMM operand to bf16 anyway (activations per call, weights once per update), so it can
 * write them straight into the layouts the tiles load, and a kernel that keeps one operand's K block in L1 then runs
 * at the unit's load bandwidth instead.
 *
 * The layouts (bf16, zero-padded; a tile is 16 rows of 64 bytes, 1 KiB, contiguous):
 *  - A operand ("A tiles") of an [M, K] matrix: [Mp/16][Kp/32] tiles of [16 rows][32 k]: rows of A as they are.
 *  - B operand ("B tiles") of a [K, N] matrix: [Np/16][Kp/32] tiles of [16 kk][16 n][2]: row kk of a tile holds,
 *    for each of its 16 columns, the pair (B[2kk][n], B[2kk+1][n]) — TDPBF16PS multiplies a row of A by pairs of
 *    B's rows, so consecutive K elements of a column sit side by side.
 * with Mp, Np rounded up to 32 (the kernel's 32 x 32 block of C, four 16 x 16 fp32 tiles) and Kp to 32 (one tile's
 * K). Padding is zero, so it adds nothing to any product and C is written only inside [M, N].
 *
 * Packing (from a typed tensor, backend/tensor.h: fp32 or fp16 rounded to nearest even, bf16 as it is) in every
 * orientation a linear layer needs:
 *  - pack_a: A = act(X) (the forward's activations; an output gradient for the input gradient);
 *  - pack_a_t: A = G^T for G [K, M] (the weight gradient's output-gradient operand, tokens along K);
 *  - pack_b: B = act(X) for X [K, N] (the weight gradient's input operand; a weight W [OC, C] for dX = dY W);
 *  - pack_b_t: B = W^T for W [N, K] (the forward's weight).
 * The weights' packs are made once per update, in the optimizer's pass (the _range packers: any run of a weight's
 * row-major elements, as an optimizer chunk or a ZeRO shard cuts it).
 *
 * The kernel (cpu_amx.c) computes C[M, N] (=|+=) A B (+ bias[N]) in fp32: tiles of C accumulate over K in a fixed
 * order and each C element is computed by one thread, so the bits do not depend on the thread count. */
#ifndef LLM4D_BACKEND_CPU_AMX_H
#define LLM4D_BACKEND_CPU_AMX_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

#define LLM4D_AMX_MB 32 /* rows and columns of C per kernel call: the padding granule of M and N */
#define LLM4D_AMX_KB 32 /* K per tile: the padding granule of K */

static inline int64_t llm4d_amx_pad(int64_t n, int64_t g) { return (n + g - 1) / g * g; }
/* Elements (bf16) of the A tiles of an [M, K] operand and of the B tiles of a [K, N] one. */
static inline size_t llm4d_amx_a_elems(int64_t M, int64_t K) {
    return (size_t)llm4d_amx_pad(M, LLM4D_AMX_MB) * (size_t)llm4d_amx_pad(K, LLM4D_AMX_KB);
}
static inline size_t llm4d_amx_b_elems(int64_t K, int64_t N) {
    return (size_t)llm4d_amx_pad(N, LLM4D_AMX_MB) * (size_t)llm4d_amx_pad(K, LLM4D_AMX_KB);
}

/* Whether this process can run the kernel: the CPU has AMX-TILE and AMX-BF16 and the kernel granted the tile state
 * (Linux asks each process to request it: arch_prctl ARCH_REQ_XCOMP_PERM). The first call makes the request. */
int llm4d_amx_usable(void);

/* C[M, N] (=|+=: accumulate) A B (+ bias[N], may be NULL), C fp32 with row stride ldc; A in A tiles of [M, K], B in
 * B tiles of [K, N]. Parallel (OpenMP); call outside parallel regions. */
void llm4d_amx_gemm(float *C, int64_t ldc, const uint16_t *A, const uint16_t *B, const float *bias, int M, int N,
                    int K, int accumulate);

/* How llm4d_amx_gemm cuts the product: C into mc x nc blocks (each thread owns whole blocks: no C element is shared),
 * K into blocks of kc, and inside a block the 32 x 32 kernel calls walk along N for each pair of A's tile rows
 * (order 0: A's K slice stays in L1) or along M for each pair of B's tile columns (order 1). Each a multiple of 32.
 * No blocking changes a bit of C: every element is summed over K in the same order. */
typedef struct {
    int mc, nc, kc, order;
} llm4d_amx_blocking;
/* The blocking llm4d_amx_gemm uses for this shape on nth threads. */
void llm4d_amx_blocking_of(int M, int N, int K, int nth, llm4d_amx_blocking *bk);
/* llm4d_amx_gemm with a given blocking (NULL: llm4d_amx_blocking_of's), for the benchmark's sweep and the tests. */
void llm4d_amx_gemm_with(const llm4d_amx_blocking *bk, float *C, int64_t ldc, const uint16_t *A, const uint16_t *B,
                         const float *bias, int M, int N, int K, int accumulate);

/* The same on one thread, for callers that run many small products side by side (the attention's blocks): C[M, N]
 * (=|+=) A B over ksteps K tiles, A given by its first tile with its 16-row groups a_rs elements apart and
 * consecutive K tiles 512 apart (a block of rows of a larger pack: A tiles of [M', K'] have a_rs = 512 Kp'/32), B
 * the same with its 16-column groups b_rs apart. Both must be readable to 32 rows / columns past M, N (the packs'
 * padding). The thread must have the tiles on: llm4d_amx_tiles_on() before, llm4d_amx_tiles_off() after. */
void llm4d_amx_gemm_block(float *C, int64_t ldc, const uint16_t *A, int64_t a_rs, const uint16_t *B, int64_t b_rs,
                          int M, int N, int ksteps, int accumulate);
void llm4d_amx_tiles_on(void);
void llm4d_amx_tiles_off(void);

/* The same product computed in plain C from the same packed operands (fp32 products of bf16 values, accumulated
 * in double): the tests' oracle for the kernel and for the layouts. */
void llm4d_amx_gemm_ref(float *C, int64_t ldc, const uint16_t *A, const uint16_t *B, const float *bias, int M, int N,
                        int K, int accumulate);

/* --- packing (cpu_amx_pack.c); every packer writes the whole padded operand unless it says otherwise --- */

/* A tiles of act(X), X [M, K] with row stride ld. Parallel. */
void llm4d_amx_pack_a(uint16_t *dst, llm4d_ctensor x, int64_t ld, int M, int K, llm4d_act act);
/* Elements [k0, k0 + n) of row r of the A tiles of an [M, K] operand from the n floats at piece (k0 a multiple of 32;
 * a piece ending inside a tile row zeroes the rest of it), single-threaded: inside a caller's parallel loop, whose
 * pass reads the row for something else too, e.g. a bias gradient's column sums. The padding rows [M, Mp) are
 * pack_a_pad_rows'. */
void llm4d_amx_pack_a_row_piece(uint16_t *dst, int K, int r, const float *piece, int k0, int n);
void llm4d_amx_pack_a_pad_rows(uint16_t *dst, int M, int K);
/* A tiles of G^T, G [K, M] with row stride ld (A[m][k] = G[k][m]). Parallel. */
void llm4d_amx_pack_a_t(uint16_t *dst, llm4d_ctensor g, int64_t ld, int M, int K);
/* The same for the tiles of K tiles [kt0, kt1) (rows [32 kt0, 32 kt1) of G) and M tiles [mt0, mt1) (columns
 * [16 mt0, 16 mt1) of G; mt1 is capped at the padded M's), single-threaded: a pass over a block of G that packs it
 * as A tiles too (pack_a_row_piece) writes its transpose while the block is in cache. */
void llm4d_amx_pack_a_t_block(uint16_t *dst, llm4d_ctensor g, int64_t ld, int M, int K, int64_t kt0, int64_t kt1,
                              int64_t mt0, int64_t mt1);
/* B tiles of act(X), X [K, N] with row stride ld. Parallel. */
void llm4d_amx_pack_b(uint16_t *dst, llm4d_ctensor x, int64_t ld, int K, int N, llm4d_act act);
/* B tiles of W^T, W [N, K] with row stride ld (B[k][n] = W[n][k]). Parallel. */
void llm4d_amx_pack_b_t(uint16_t *dst, llm4d_ctensor w, int64_t ld, int N, int K);

/* The elements [e0, e1) of a row-major weight W [rows, cols] (w: its element 0) written into its packs, nothing else
 * (single-threaded: the optimizer's tasks call them on disjoint runs, in parallel). The padding is never written:
 * the pack's memory must start zeroed. pack_b_range: the B tiles of W itself ([K, N] = [rows, cols]); pack_b_t_range:
 * the B tiles of W^T ([K, N] = [cols, rows]). */
void llm4d_amx_pack_b_range(uint16_t *dst, const float *w, int rows, int cols, size_t e0, size_t e1);
void llm4d_amx_pack_b_t_range(uint16_t *dst, const float *w, int rows, int cols, size_t e0, size_t e1);

#endif
