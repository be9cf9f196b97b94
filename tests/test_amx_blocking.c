/* test_amx_blocking.c — the AMX GEMM's walk over C and K under every kind of blocking (cpu_amx.h llm4d_amx_blocking),
 * on any CPU.
 *
 * The kernel needs AMX, which most machines (CI's included) lack, but which blocks of C a thread computes, in which
 * order, over which K blocks, and how the tails go through the edge kernel is plain C. So this file compiles
 * src/backend/cpu_amx.c itself with LLM4D_AMX_EMULATE (the 32 x 32 kernel in plain C over the same tiles) and checks,
 * for blockings of every shape (blocks of 32 to larger than C, K blocks of one tile to all of K, both walk orders)
 * and 1 to 3 threads: C against the exact product of the tiles' bf16 values (double, this file's own arithmetic)
 * within fp32 accumulation error, with a bias, and accumulating into C; nothing written past N in a C whose row
 * stride is wider; and the same bits as the default blocking's (no blocking may change a bit). The real kernel is
 * checked against the same oracle by test_amx on AMX machines. */
#define LLM4D_AMX_EMULATE
#include "../src/backend/cpu_amx.c"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "amx_layout.h"
#include "check.h"

static uint32_t rng = 2024u;
static uint16_t rand_bf16(void) { /* a bf16 in (-1, 1) */
    rng = rng * 1664525u + 1013904223u;
    const float f = ((float)(rng >> 8) / 16777216.0f) * 2.0f - 1.0f;
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);
}

typedef struct {
    int M, N, K;
    int64_t ldc;
    uint16_t *A, *B;
    float *bias, *c0;           /* the bias, and C's contents before an accumulating call */
    double *want[3], *mag[3];   /* per mode: the exact result and sum |a b| */
} problem;

static void make(problem *p, int M, int N, int K) {
    p->M = M, p->N = N, p->K = K, p->ldc = N + 5;
    const size_t na = llm4d_amx_a_elems(M, K), nb = llm4d_amx_b_elems(K, N);
    p->A = calloc(na, 2), p->B = calloc(nb, 2); /* padding zero, as the packers leave it */
    p->bias = falloc((size_t)N), p->c0 = falloc((size_t)M * N);
    if (!p->A || !p->B) exit(1);
    for (int m = 0; m < M; m++)
        for (int k = 0; k < K; k++) p->A[pos_a(K, m, k)] = rand_bf16();
    for (int k = 0; k < K; k++)
        for (int n = 0; n < N; n++) p->B[pos_b(K, k, n)] = rand_bf16();
    for (int n = 0; n < N; n++) p->bias[n] = (float)val(rand_bf16());
    for (size_t i = 0; i < (size_t)M * N; i++) p->c0[i] = (float)val(rand_bf16());
    for (int mode = 0; mode < 3; mode++) {
        p->want[mode] = malloc(sizeof(double) * (size_t)M * N), p->mag[mode] = malloc(sizeof(double) * (size_t)M * N);
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) {
                const double init = mode == 1 ? p->bias[n] : mode == 2 ? p->c0[(size_t)m * N + n] : 0.0;
                double s = init, g = fabs(init);
                for (int k = 0; k < K; k++) {
                    const double t = val(p->A[pos_a(K, m, k)]) * val(p->B[pos_b(K, k, n)]);
                    s += t, g += fabs(t);
                }
                p->want[mode][(size_t)m * N + n] = s, p->mag[mode][(size_t)m * N + n] = g;
            }
    }
}

static void drop(problem *p) {
    free(p->A), free(p->B), free(p->bias), free(p->c0);
    for (int mode = 0; mode < 3; mode++) free(p->want[mode]), free(p->mag[mode]);
}

/* C (row stride ldc, 7 past N) for a blocking (NULL: the default) in mode 0 (AB), 1 (AB + bias), 2 (C += AB) */
static float *run(const problem *p, const llm4d_amx_blocking *bk, int mode, int threads) {
    float *c = falloc((size_t)p->M * p->ldc);
    for (int m = 0; m < p->M; m++)
        for (int64_t n = 0; n < p->ldc; n++)
            c[(size_t)m * p->ldc + n] = n < p->N ? p->c0[(size_t)m * p->N + n] : 7.0f;
    const int before = omp_get_max_threads();
    omp_set_num_threads(threads);
    llm4d_amx_gemm_with(bk, c, p->ldc, p->A, p->B, mode == 1 ? p->bias : NULL, p->M, p->N, p->K, mode == 2);
    omp_set_num_threads(before);
    return c;
}

/* worst |err| / (K 2^-24 sum |ab|) over C, and the elements past N that changed */
static double error_of(const problem *p, const float *c, int mode, int *outside) {
    double worst = 0;
    *outside = 0;
    for (int m = 0; m < p->M; m++) {
        for (int n = 0; n < p->N; n++) {
            const size_t i = (size_t)m * p->N + n;
            const double r = fabs(c[(size_t)m * p->ldc + n] - p->want[mode][i]) /
                             ((p->K + 1) * 0x1p-24 * p->mag[mode][i] + 1e-30);
            if (r > worst) worst = r;
        }
        for (int64_t n = p->N; n < p->ldc; n++) *outside += c[(size_t)m * p->ldc + n] != 7.0f;
    }
    return worst;
}

static void test_shape(int M, int N, int K) {
    problem p;
    make(&p, M, N, K);
    static const int sides[] = {32, 64, 160, 4096};
    static const int kcs[] = {32, 64, 256, 4096};
    static const char *const modes[] = {"C = AB", "C = AB + bias", "C += AB"};
    for (int mode = 0; mode < 3; mode++) {
        float *ref = run(&p, NULL, mode, 2);
        int outside;
        const double e = error_of(&p, ref, mode, &outside);
        check(e <= 1.0 && outside == 0, "%d x %d x %d, %s, default blocking: worst error %.3f of the bound, %d "
              "elements past N written", M, N, K, modes[mode], e, outside);
        int tried = 0, differ = 0, bad = 0;
        for (size_t a = 0; a < sizeof sides / sizeof *sides; a++)
            for (size_t b = 0; b < sizeof sides / sizeof *sides; b++)
                for (size_t k = 0; k < sizeof kcs / sizeof *kcs; k++)
                    for (int order = 0; order < 2; order++) {
                        const llm4d_amx_blocking bk = {sides[a], sides[b], kcs[k], order};
                        const int threads = 1 + (int)((a + b + k + (size_t)order) % 3);
                        float *c = run(&p, &bk, mode, threads);
                        const double ev = error_of(&p, c, mode, &outside);
                        if (ev > 1.0 || outside) {
                            if (bad++ < 3)
                                printf("# %d x %d x %d blocking %d x %d x %d order %d, %d threads: error %.3f, %d past "
                                       "N\n", M, N, K, bk.mc, bk.nc, bk.kc, order, threads, ev, outside);
                        }
                        for (int m = 0; m < M; m++)
                            differ += memcmp(c + (size_t)m * p.ldc, ref + (size_t)m * p.ldc, sizeof(float) * N) != 0;
                        tried++;
                        free(c);
                    }
        check(bad == 0 && differ == 0, "%d x %d x %d, %s: %d blockings (1-3 threads) within the bound (%d not) and "
              "bit for bit the default's (%d rows differ)", M, N, K, modes[mode], tried, bad, differ);
        free(ref);
    }
    drop(&p);
}

int main(void) {
    /* tails on every side, several blocks of C and of K, K shorter than a tile, and K long against C (the default's
     * one-block-per-thread case) */
    static const int shapes[][3] = {{1, 1, 1}, {33, 17, 31}, {64, 96, 96}, {150, 80, 300}, {96, 200, 600},
                                    {40, 70, 2100}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) test_shape(shapes[i][0], shapes[i][1], shapes[i][2]);
    /* the default blocking is one the kernel accepts, for the model's shapes at 1 to 16 threads */
    int bad = 0;
    static const int dims[][3] = {{256, 2304, 768}, {2048, 768, 3072}, {3072, 768, 2048}, {512, 50304, 768},
                                  {512, 768, 50304}, {50304, 768, 512}, {1, 1, 1}};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
        for (int t = 1; t <= 16; t++) {
            llm4d_amx_blocking bk;
            llm4d_amx_blocking_of(dims[i][0], dims[i][1], dims[i][2], t, &bk);
            bad += bk.mc <= 0 || bk.nc <= 0 || bk.kc <= 0 || bk.mc % 32 || bk.nc % 32 || bk.kc % 32 ||
                   (bk.order != 0 && bk.order != 1);
        }
    check(bad == 0, "the default blocking of the model's shapes at 1-16 threads: positive multiples of 32 (%d not)",
          bad);
    return check_summary();
}
