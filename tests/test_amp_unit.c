/* test_amp_unit.c — the mixed-precision GEMM paths of the CPU backend against fp32, with tolerances that follow
 * from the formats: rounding an operand to bf16 (8-bit significand) errs by at most 2^-8 relative (half an ulp), so
 * a product of two rounded operands by at most ~2^-7; the sums of random-signed products here stay within half
 * that, |y_lowp - y_fp32| <= 2^-8 * sum_k |a_ik b_jk| (+ fp32 accumulation noise), which is what is checked (a
 * rigorous per-operand bound: test_kernels16_gemm.c); fp16 (11-bit significand) gives 2^-10. Also checks the
 * low-precision path is really taken (the error is not zero), and backward (dinp, dw) the same way; a layer whose
 * input goes through GELU (linear_forward_act) against the same bound with gelu(x) in place of x; and the bias
 * gradient, which in low precision is summed while the output gradient is converted, against the column sums in
 * double (it must not lose precision). And that the forward computes exactly the format's products whatever the CPU
 * stores (bf16 for AVX512-BF16 kernels, or fp32 holding rounded values on CPUs without): equal, to fp32
 * accumulation error (C x 2^-24 relative), to x~ w~^T in double with x~, w~ rounded to the format's significand by
 * this test's own arithmetic. */
#include <fenv.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "check.h"

static void check_bound(int ok, const char *what, double ratio, double maxerr) {
    check(ok, "%s: worst |err| / bound = %.3f, max |err| = %.3e", what, ratio, maxerr);
}

static float frand(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return ((float)(*s >> 8) / 16777216.0f) * 2.0f - 1.0f;
}

/* worst ratio of |got - ref| to eps * sum_k |x_ik w_jk| over all (i, j) of y = x w^T */
static double worst_ratio(const float *got, const float *ref, const float *x, const float *w, int N, int C, int OC,
                          double eps, double *maxerr) {
    double worst = 0;
    *maxerr = 0;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < OC; j++) {
            double mag = 0;
            for (int k = 0; k < C; k++) mag += fabs((double)x[(size_t)i * C + k] * w[(size_t)j * C + k]);
            const double e = fabs((double)got[(size_t)i * OC + j] - ref[(size_t)i * OC + j]);
            if (e > *maxerr) *maxerr = e;
            const double r = e / (eps * mag + 1e-6 * mag + 1e-30);
            if (r > worst) worst = r;
        }
    return worst;
}

/* v rounded to nearest (ties to even: the default rounding mode) with a `bits`-bit significand */
static float round_sig(float v, int bits) {
    if (v == 0.0f || !isfinite(v)) return v;
    int e;
    const double f = frexp((double)v, &e); /* v = f 2^e, 0.5 <= |f| < 1 */
    return (float)ldexp(nearbyint(ldexp(f, bits)), e - bits);
}

/* The low-precision forward against x~ w~^T in double: the worst |got - exact| / (C 2^-24 sum |x~ w~|). */
static double exact_ratio(const float *got, const float *x, const float *w, int N, int C, int OC, int bits,
                          double *maxerr) {
    double worst = 0;
    *maxerr = 0;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < OC; j++) {
            double acc = 0, mag = 0;
            for (int k = 0; k < C; k++) {
                const double p = (double)round_sig(x[(size_t)i * C + k], bits) * round_sig(w[(size_t)j * C + k], bits);
                acc += p;
                mag += fabs(p);
            }
            const double e = fabs(got[(size_t)i * OC + j] - acc);
            if (e > *maxerr) *maxerr = e;
            const double r = e / (C * 0x1p-24 * mag + 1e-30);
            if (r > worst) worst = r;
        }
    return worst;
}

/* worst |got - exact| / (eps sum |a b|) over C[r][c] = sum_t a[r ars + t acs] b[t brs + c bcs] (R x Cc, K terms),
 * the exact product in double */
static double worst_product(const float *got, const float *a, int ars, int acs, const float *b, int brs, int bcs,
                            int R, int Cc, int K, double eps, double *maxerr) {
    double worst = 0;
    *maxerr = 0;
    for (int r = 0; r < R; r++)
        for (int c = 0; c < Cc; c++) {
            double acc = 0, mag = 0;
            for (int t = 0; t < K; t++) {
                const double p = (double)a[(size_t)r * ars + (size_t)t * acs] * b[(size_t)t * brs + (size_t)c * bcs];
                acc += p, mag += fabs(p);
            }
            const double e = fabs(got[(size_t)r * Cc + c] - acc), q = e / (eps * mag + 1e-30);
            if (q > worst) worst = q;
            if (e > *maxerr) *maxerr = e;
        }
    return worst;
}

/* The bias gradient: fp32 column sums of dy whatever the GEMM precision (against the sums in double); and the input
 * and weight gradients of that call, whose output gradient is converted in the same pass as the sums (on AMX CPUs
 * also transposed for the weight gradient, a block of rows and columns at a time): against the products in double,
 * within the format's bound. w: the layer's weight [OC, C], or NULL for a random one. */
static void fused_bias_case(llm4d_backend *be, const char *name, double eps, int NB, int C, int OC, const float *w,
                            unsigned *s) {
    float *dyb = malloc((size_t)NB * OC * sizeof(float)), *xb = malloc((size_t)NB * C * sizeof(float));
    float *dxb = malloc((size_t)NB * C * sizeof(float)), *dwb = calloc((size_t)OC * C, sizeof(float));
    float *db = calloc((size_t)OC, sizeof(float)), *wr = w ? NULL : malloc((size_t)OC * C * sizeof(float));
    if (!dyb || !xb || !dxb || !dwb || !db || (!w && !wr)) {
        check(0, "out of memory");
        exit(1);
    }
    for (size_t i = 0; i < (size_t)NB * OC; i++) dyb[i] = frand(s);
    for (size_t i = 0; i < (size_t)NB * C; i++) xb[i] = frand(s);
    if (wr)
        for (size_t i = 0; i < (size_t)OC * C; i++) wr[i] = frand(s);
    const float *wl = w ? w : wr;
    be->linear_backward(be, llm4d_t32(dxb), LLM4D_WRITE, dwb, db, llm4d_ct32(dyb), llm4d_ct32(xb), wl, NB, C, OC);
    double db_err = 0;
    for (int j = 0; j < OC; j++) {
        double sum = 0;
        for (int i = 0; i < NB; i++) sum += dyb[(size_t)i * OC + j];
        db_err = fmax(db_err, fabs(db[j] - sum) / (fabs(sum) + 1e-3));
    }
    char what[96];
    snprintf(what, sizeof what, "%s bias gradient = fp32 column sums (relative error), %d x %d", name, NB, OC);
    check_bound(db_err < 1e-6, what, db_err, db_err);
    double ex, eb;
    const double wx = worst_product(dxb, dyb, OC, 1, wl, C, 1, NB, C, OC, eps, &ex);
    const double wb = worst_product(dwb, dyb, 1, OC, xb, C, 1, OC, C, NB, eps, &eb);
    snprintf(what, sizeof what, "%s linear backward dinp, %d x %d, bias gradient fused", name, NB, OC);
    check_bound(wx <= 1.0, what, wx, ex);
    snprintf(what, sizeof what, "%s linear backward dweight, %d x %d, bias gradient fused", name, NB, OC);
    check_bound(wb <= 1.0, what, wb, eb);
    free(dyb), free(xb), free(dxb), free(dwb), free(db), free(wr);
}

int main(void) {
    if (fegetround() != FE_TONEAREST) return fprintf(stderr, "rounding mode is not to-nearest\n"), 1;
    llm4d_err err = {0};
    llm4d_backend *be;
    if (llm4d_backend_cpu_create(&be, 2, &err) != LLM4D_OK) return fprintf(stderr, "%s\n", err.msg), 1;
    enum { N = 64, C = 96, OC = 80 };
    static float x[N * C], w[OC * C], b[OC], y32[N * OC], ylp[N * OC], dy[N * OC];
    static float dx32[N * C], dxlp[N * C], dw32[OC * C], dwlp[OC * C], xt[C * N], dyt[OC * N];
    unsigned s = 1;
    for (int i = 0; i < N * C; i++) x[i] = frand(&s);
    for (int i = 0; i < OC * C; i++) w[i] = frand(&s);
    for (int i = 0; i < OC; i++) b[i] = frand(&s);
    for (int i = 0; i < N * OC; i++) dy[i] = frand(&s);
    /* transposes, to express dx = dy w and dw = dy^T x as y = a b^T products for the bound */
    for (int i = 0; i < N; i++)
        for (int k = 0; k < C; k++) xt[(size_t)k * N + i] = x[(size_t)i * C + k];
    for (int i = 0; i < N; i++)
        for (int j = 0; j < OC; j++) dyt[(size_t)j * N + i] = dy[(size_t)i * OC + j];
    static float wt[C * OC];
    for (int j = 0; j < OC; j++)
        for (int k = 0; k < C; k++) wt[(size_t)k * OC + j] = w[(size_t)j * C + k];

    be->linear_forward(be, llm4d_t32(y32), llm4d_ct32(x), w, NULL, N, C, OC);
    be->linear_backward(be, llm4d_t32(dx32), LLM4D_ADD, dw32, NULL, llm4d_ct32(dy), llm4d_ct32(x), w, N, C, OC);
    const struct { llm4d_precision p; const char *name; double eps; int bits; } modes[] = {
        {LLM4D_PREC_BF16, "bf16", 1.0 / 256, 8}, {LLM4D_PREC_FP16, "fp16", 1.0 / 1024, 11}};
    for (int m = 0; m < 2; m++) {
        if (be->set_precision(be, modes[m].p, &err) != LLM4D_OK) {
            check(0, "%s: %s", modes[m].name, err.msg);
            continue;
        }
        char what[64];
        double maxerr, r;
        be->linear_forward(be, llm4d_t32(ylp), llm4d_ct32(x), w, NULL, N, C, OC);
        r = worst_ratio(ylp, y32, x, w, N, C, OC, modes[m].eps, &maxerr);
        snprintf(what, sizeof what, "%s linear forward", modes[m].name);
        check_bound(r <= 1.0 && maxerr > 0, what, r, maxerr);
        r = exact_ratio(ylp, x, w, N, C, OC, modes[m].bits, &maxerr);
        snprintf(what, sizeof what, "%s linear forward = the rounded operands' products", modes[m].name);
        check_bound(r <= 1.0, what, r, maxerr);
        memset(dxlp, 0, sizeof dxlp);
        memset(dwlp, 0, sizeof dwlp);
        be->linear_backward(be, llm4d_t32(dxlp), LLM4D_ADD, dwlp, NULL, llm4d_ct32(dy), llm4d_ct32(x), w, N, C, OC);
        r = worst_ratio(dxlp, dx32, dy, wt, N, OC, C, modes[m].eps, &maxerr);
        snprintf(what, sizeof what, "%s linear backward dinp", modes[m].name);
        check_bound(r <= 1.0 && maxerr > 0, what, r, maxerr);
        r = worst_ratio(dwlp, dw32, dyt, xt, OC, N, C, modes[m].eps, &maxerr);
        snprintf(what, sizeof what, "%s linear backward dweight", modes[m].name);
        check_bound(r <= 1.0 && maxerr > 0, what, r, maxerr);
        /* the bias is added in fp32 */
        be->linear_forward(be, llm4d_t32(ylp), llm4d_ct32(x), w, b, N, C, OC);
        double bias_err = 0;
        static float ynb[N * OC];
        be->linear_forward(be, llm4d_t32(ynb), llm4d_ct32(x), w, NULL, N, C, OC);
        for (int i = 0; i < N * OC; i++) bias_err = fmax(bias_err, fabs(ylp[i] - ynb[i] - b[i % OC]));
        snprintf(what, sizeof what, "%s bias added in fp32", modes[m].name);
        check_bound(bias_err < 1e-5, what, bias_err, bias_err);
        /* input through GELU: the bound of y = gelu(x) w^T */
        static float gx[N * C], yg32[N * OC];
        for (int i = 0; i < N * C; i++) {
            const double v = x[i];
            gx[i] = (float)(0.5 * v * (1.0 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))));
        }
        be->set_precision(be, LLM4D_PREC_FP32, &err);
        be->linear_forward(be, llm4d_t32(yg32), llm4d_ct32(gx), w, NULL, N, C, OC);
        be->set_precision(be, modes[m].p, &err);
        be->linear_forward_act(be, llm4d_t32(ylp), llm4d_ct32(x), LLM4D_ACT_GELU, w, NULL, N, C, OC);
        r = worst_ratio(ylp, yg32, gx, w, N, C, OC, modes[m].eps, &maxerr);
        snprintf(what, sizeof what, "%s linear forward, input through GELU", modes[m].name);
        check_bound(r <= 1.0 && maxerr > 0, what, r, maxerr);
        /* the bias gradient fused into the output gradient's conversion, over a row count that is not a multiple
         * of the sums' chunk (64 rows); then an output wider than one strip of that pass (1024 columns) and not a
         * multiple of the tiles' 32 */
        fused_bias_case(be, modes[m].name, modes[m].eps, 150, C, OC, w, &s);
        fused_bias_case(be, modes[m].name, modes[m].eps, 70, 40, 1100, NULL, &s);
    }
    be->set_precision(be, LLM4D_PREC_FP32, &err);
    be->linear_forward(be, llm4d_t32(ylp), llm4d_ct32(x), w, NULL, N, C, OC);
    check_bound(memcmp(ylp, y32, sizeof y32) == 0, "back to fp32: bit-identical to the first fp32 run", 0, 0);
    be->destroy(be);
    return check_summary();
}
