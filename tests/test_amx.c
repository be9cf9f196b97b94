/* test_amx.c — the AMX kernel's operand layouts and its GEMM (src/backend/cpu_amx.h), against oracles of this file.
 *
 * Layouts: every packer's output is compared, element by element, with the position cpu_amx.h's description gives
 * (written again here from that description: A tiles [Mp/16][Kp/32][16][32], B tiles [Np/16][Kp/32][16 kk][16 n][2])
 * holding the element rounded to bf16 by this file's own arithmetic (round to nearest even), and every padding
 * element zero; in shapes with every kind of tail (M, N, K below, at and above multiples of 16 and 32, and 1). The
 * range packers (the optimizer's) must rebuild the full pack bit for bit from runs of random lengths, writing nothing
 * else. The GEMM must equal the exact product of the packed bf16 values (computed in double here) within fp32
 * accumulation error, K 2^-24 sum |a b| per element, with a bias, accumulating into C, and into a C whose row stride
 * is wider than N (nothing outside [M, N] written); and give the same bits with 1, 2 and 3 threads.
 *
 * The packers need AVX512-BF16 and the GEMM needs AMX: without AVX512-BF16 the test says so and skips (exit 77);
 * without AMX it checks the layouts and the reference GEMM (plain C over the same layouts) and says the AMX GEMM was
 * not run. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amx_layout.h"
#include "backend/cpu_amx.h"
#include "check.h"

static uint32_t rng = 12345u;
static float frand(void) {
    rng = rng * 1664525u + 1013904223u;
    return ((float)(rng >> 8) / 16777216.0f) * 2.0f - 1.0f;
}

/* v to bf16 bits, round to nearest even (the values here are normal or zero) */
static uint16_t bf16(float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    const uint32_t lsb = (u >> 16) & 1u;
    return (uint16_t)((u + 0x7fffu + lsb) >> 16);
}

static uint16_t *talloc(size_t elems) {
    uint16_t *p = aligned_alloc(64, (elems * 2 + 63) / 64 * 64);
    if (!p) exit(1);
    memset(p, 0xEE, elems * 2); /* garbage: padding a packer fails to write shows up */
    return p;
}

static float gelu(float x) { return (float)(0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))); }

/* the matrix logical(i, j) (R x Cc) should sit in pack p at pos(i, j), padding (Rp x Cp) zero; act: the values
 * went through GELU (vgelu agrees with it to 6e-7, so a few may round to the neighbouring bf16) */
typedef size_t (*pos_fn)(int64_t K, int64_t i, int64_t j);
static int layout_ok(const uint16_t *p, int64_t K, pos_fn pos, int64_t R, int64_t Cc, int64_t Rp, int64_t Cp,
                     const float *src, int64_t ld, int transposed, int act, int *off_by_ulp) {
    int bad = 0;
    *off_by_ulp = 0;
    for (int64_t i = 0; i < Rp; i++)
        for (int64_t j = 0; j < Cp; j++) {
            const uint16_t got = p[pos(K, i, j)];
            if (i >= R || j >= Cc) {
                bad += got != 0;
                continue;
            }
            float v = transposed ? src[j * ld + i] : src[i * ld + j];
            if (act) v = gelu(v);
            const uint16_t want = bf16(v);
            if (got != want) {
                if (act && abs((int)got - (int)want) == 1) (*off_by_ulp)++;
                else bad++;
            }
        }
    return bad == 0;
}

static void test_layouts(int M, int K) {
    /* X [M, K], and G = X read transposed: [K, M] */
    float *x = falloc((size_t)M * K);
    for (size_t i = 0; i < (size_t)M * K; i++) x[i] = 4.0f * frand();
    const int64_t Mp = pad(M, 32), Kp = pad(K, 32);
    uint16_t *a = talloc(llm4d_amx_a_elems(M, K)), *b = talloc(llm4d_amx_b_elems(M, K));
    int ulp;
    llm4d_amx_pack_a(a, llm4d_ct32(x), K, M, K, LLM4D_ACT_NONE);
    check(layout_ok(a, K, pos_a, M, K, Mp, Kp, x, K, 0, 0, &ulp), "pack_a %d x %d: A tiles of X, padding zero", M, K);
    llm4d_amx_pack_a(a, llm4d_ct32(x), K, M, K, LLM4D_ACT_GELU);
    check(layout_ok(a, K, pos_a, M, K, Mp, Kp, x, K, 0, 1, &ulp) && ulp <= M * K / 100,
          "pack_a %d x %d through GELU (%d of %d elements one bf16 ulp off the double GELU)", M, K, ulp, M * K);
    /* A = X^T: M' = K rows, K' = M */
    uint16_t *at = talloc(llm4d_amx_a_elems(K, M));
    llm4d_amx_pack_a_t(at, llm4d_ct32(x), K, K, M);
    check(layout_ok(at, M, pos_a, K, M, pad(K, 32), pad(M, 32), x, K, 1, 0, &ulp),
          "pack_a_t of a %d x %d matrix: A tiles of its transpose", M, K);
    /* B = X [K' = M, N' = K] */
    llm4d_amx_pack_b(b, llm4d_ct32(x), K, M, K, LLM4D_ACT_NONE);
    check(layout_ok(b, M, pos_b, M, K, pad(M, 32), pad(K, 32), x, K, 0, 0, &ulp), "pack_b %d x %d: B tiles, pairs "
          "of rows interleaved", M, K);
    llm4d_amx_pack_b(b, llm4d_ct32(x), K, M, K, LLM4D_ACT_GELU);
    check(layout_ok(b, M, pos_b, M, K, pad(M, 32), pad(K, 32), x, K, 0, 1, &ulp) && ulp <= M * K / 100,
          "pack_b %d x %d through GELU (%d one ulp off)", M, K, ulp);
    /* B = X^T [K' = K, N' = M] */
    uint16_t *bt = talloc(llm4d_amx_b_elems(K, M));
    llm4d_amx_pack_b_t(bt, llm4d_ct32(x), K, M, K);
    check(layout_ok(bt, K, pos_b, K, M, pad(K, 32), pad(M, 32), x, K, 1, 0, &ulp), "pack_b_t of a %d x %d matrix: "
          "B tiles of its transpose", M, K);

    /* the optimizer's runs: random lengths over the whole weight, in a random order, into a zeroed pack */
    const size_t n = (size_t)M * K;
    uint16_t *r1 = talloc(llm4d_amx_b_elems(M, K)), *r2 = talloc(llm4d_amx_b_elems(K, M));
    memset(r1, 0, llm4d_amx_b_elems(M, K) * 2);
    memset(r2, 0, llm4d_amx_b_elems(K, M) * 2);
    size_t cuts[64], nc = 0;
    for (size_t e = 0; e < n && nc < 63; nc++) {
        cuts[nc] = e;
        e += 1 + (size_t)((frand() + 1.0f) * 0.5f * (float)(n / 4 + 1));
    }
    cuts[nc] = n;
    for (size_t k = 0; k < nc; k++) { /* backwards, so that no run relies on an earlier neighbour */
        const size_t c = nc - 1 - k;
        llm4d_amx_pack_b_range(r1, x, M, K, cuts[c], cuts[c + 1]);
        llm4d_amx_pack_b_t_range(r2, x, M, K, cuts[c], cuts[c + 1]);
    }
    llm4d_amx_pack_b(b, llm4d_ct32(x), K, M, K, LLM4D_ACT_NONE);
    check(memcmp(r1, b, llm4d_amx_b_elems(M, K) * 2) == 0, "pack_b_range in %zu runs = pack_b (%d x %d)", nc, M, K);
    check(memcmp(r2, bt, llm4d_amx_b_elems(K, M) * 2) == 0, "pack_b_t_range in %zu runs = pack_b_t (%d x %d)", nc, M,
          K);
    /* a single run that starts and ends inside rows writes only its elements */
    memset(r1, 0, llm4d_amx_b_elems(M, K) * 2);
    const size_t e0 = n / 3 + 1 < n ? n / 3 + 1 : 0, e1 = 2 * n / 3 + 1 < n ? 2 * n / 3 + 1 : n;
    llm4d_amx_pack_b_t_range(r1, x, M, K, e0, e1);
    int outside = 0, inside = 0;
    for (size_t e = 0; e < n; e++) {
        const uint16_t got = r1[pos_b(K, (int64_t)(e % (size_t)K), (int64_t)(e / (size_t)K))];
        if (e >= e0 && e < e1) inside += got == bf16(x[e]);
        else outside += got != 0;
    }
    check(inside == (int)(e1 - e0) && outside == 0, "pack_b_t_range [%zu, %zu) of %zu writes its elements only "
          "(%d written right, %d outside touched)", e0, e1, n, inside, outside);
    free(x), free(a), free(b), free(at), free(bt), free(r1), free(r2);
}

/* exact product of the packed operands, with the bound K 2^-24 sum |a b| per element */
static void exact(const uint16_t *A, const uint16_t *B, const float *bias, const float *c0, int M, int N, int K,
                  double *want, double *mag) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double acc = c0 ? c0[(size_t)i * N + j] : bias ? bias[j] : 0.0, m = fabs(acc);
            for (int k = 0; k < K; k++) {
                const double p = val(A[pos_a(K, i, k)]) * val(B[pos_b(K, k, j)]);
                acc += p;
                m += fabs(p);
            }
            want[(size_t)i * N + j] = acc;
            mag[(size_t)i * N + j] = m;
        }
}

typedef void (*gemm_fn)(float *, int64_t, const uint16_t *, const uint16_t *, const float *, int, int, int, int);

static void test_gemm(gemm_fn gemm, const char *name, int M, int N, int K) {
    const int64_t ldc = N + 7; /* wider than N: columns past N must stay as they were */
    float *x = falloc((size_t)M * K), *w = falloc((size_t)N * K), *bias = falloc((size_t)N);
    float *c = falloc((size_t)M * ldc), *c0 = falloc((size_t)M * N);
    for (size_t i = 0; i < (size_t)M * K; i++) x[i] = frand();
    for (size_t i = 0; i < (size_t)N * K; i++) w[i] = frand();
    for (int i = 0; i < N; i++) bias[i] = frand();
    uint16_t *A = talloc(llm4d_amx_a_elems(M, K)), *B = talloc(llm4d_amx_b_elems(K, N));
    llm4d_amx_pack_a(A, llm4d_ct32(x), K, M, K, LLM4D_ACT_NONE);
    llm4d_amx_pack_b_t(B, llm4d_ct32(w), K, N, K);
    double *want = malloc(sizeof(double) * (size_t)M * N), *mag = malloc(sizeof(double) * (size_t)M * N);
    for (int mode = 0; mode < 3; mode++) { /* C = AB, C = AB + bias, C += AB */
        for (size_t i = 0; i < (size_t)M * ldc; i++) c[i] = 7.0f;
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) c[(size_t)i * ldc + j] = c0[(size_t)i * N + j] = frand();
        exact(A, B, mode == 1 ? bias : NULL, mode == 2 ? c0 : NULL, M, N, K, want, mag);
        gemm(c, ldc, A, B, mode == 1 ? bias : NULL, M, N, K, mode == 2);
        double worst = 0;
        int outside = 0;
        for (int i = 0; i < M; i++) {
            for (int j = 0; j < N; j++) {
                const double e = fabs(c[(size_t)i * ldc + j] - want[(size_t)i * N + j]);
                const double r = e / ((K + 1) * 0x1p-24 * mag[(size_t)i * N + j] + 1e-30);
                if (r > worst) worst = r;
            }
            for (int j = N; j < ldc; j++) outside += c[(size_t)i * ldc + j] != 7.0f;
        }
        static const char *const modes[] = {"C = AB", "C = AB + bias", "C += AB"};
        check(worst <= 1.0 && outside == 0, "%s %d x %d x %d, %s: worst |err| / (K 2^-24 sum|ab|) = %.3f, %d "
              "elements past N written", name, M, N, K, modes[mode], worst, outside);
    }
    free(x), free(w), free(bias), free(c), free(c0), free(A), free(B), free(want), free(mag);
}

/* the same bits with 1, 2 and 3 threads */
static void test_threads(int M, int N, int K) {
    float *x = falloc((size_t)M * K), *w = falloc((size_t)N * K), *c[3];
    for (size_t i = 0; i < (size_t)M * K; i++) x[i] = frand();
    for (size_t i = 0; i < (size_t)N * K; i++) w[i] = frand();
    uint16_t *A = talloc(llm4d_amx_a_elems(M, K)), *B = talloc(llm4d_amx_b_elems(K, N));
    llm4d_amx_pack_a(A, llm4d_ct32(x), K, M, K, LLM4D_ACT_NONE);
    llm4d_amx_pack_b_t(B, llm4d_ct32(w), K, N, K);
    const int before = omp_get_max_threads();
    for (int t = 0; t < 3; t++) {
        c[t] = falloc((size_t)M * N);
        omp_set_num_threads(t + 1);
        llm4d_amx_gemm(c[t], N, A, B, NULL, M, N, K, 0);
    }
    omp_set_num_threads(before);
    check(memcmp(c[0], c[1], sizeof(float) * (size_t)M * N) == 0 &&
              memcmp(c[0], c[2], sizeof(float) * (size_t)M * N) == 0,
          "AMX GEMM %d x %d x %d: the same bits with 1, 2 and 3 threads", M, N, K);
    free(x), free(w), free(A), free(B), free(c[0]), free(c[1]), free(c[2]);
}

int main(void) {
    if (!__builtin_cpu_supports("avx512bf16")) {
        printf("skipped: this CPU has no AVX512-BF16, which the AMX kernel's packers use (and no AMX)\n");
        return 77;
    }
    static const int dims[][2] = {{1, 1}, {5, 31}, {16, 32}, {17, 33}, {32, 64}, {47, 70}, {64, 96}, {100, 200}};
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) test_layouts(dims[i][0], dims[i][1]);
    static const int shapes[][3] = {{1, 1, 1},    {7, 9, 5},     {16, 16, 32},   {33, 17, 31},
                                    {64, 80, 96}, {150, 80, 96}, {96, 300, 600}, {40, 520, 270}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        test_gemm(llm4d_amx_gemm_ref, "reference GEMM", shapes[i][0], shapes[i][1], shapes[i][2]);
    if (!llm4d_amx_usable()) {
        printf("# the AMX GEMM itself not run: this CPU has no AMX, or the kernel did not grant its tile state\n");
        return check_summary();
    }
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        test_gemm(llm4d_amx_gemm, "AMX GEMM", shapes[i][0], shapes[i][1], shapes[i][2]);
    test_gemm(llm4d_amx_gemm, "AMX GEMM", 300, 330, 800); /* several blocks of C and of K */
    test_threads(300, 330, 800);
    test_threads(1000, 96, 64);
    /* K long against the output (the LM head's input gradient): one block of C per thread, cut along its larger
     * side (cpu_amx.c blocking); the last also halves its blocks to keep C in L2 */
    test_gemm(llm4d_amx_gemm, "AMX GEMM", 70, 100, 2100);
    test_threads(100, 90, 3000);
    test_threads(1024, 416, 16400);
    return check_summary();
}
