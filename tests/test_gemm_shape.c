/* test_gemm_shape.c — a GPU profile's GEMM time by shape (plan/gemm_shape.h) against outside figures:
 *   - bench/profiles/a100_selene.json's model against the measured maximum achievable bf16 matmul of an A100 SXM,
 *     267.9 TFLOP/s at 6912x16384x2048 (S. Bekman, ml-engineering, compute/accelerator/README.md): the largest
 *     GEMMs within 2 % of it, none above it by more than 2 %, the measured shape within 6 % (the model leaves the
 *     epilogue unoverlapped: it says so in the profile's sources);
 *   - wave quantization as NVIDIA's "Matrix Multiplication Background User's Guide" states it: one tile more than
 *     a whole wave costs a whole wave (109 tiles of 256 x 128 over 108 SMs take twice the time of 108);
 *   - the roofline: a GEMM with one output column moves its bytes at the HBM bandwidth (bytes / 2039 GB/s);
 *   - a profile without "gemm_shape" (every measured CPU profile) prices nothing here (price.c keeps its rates);
 *   - a garbled "gemm_shape" is a user error naming the field. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "plan/profile.h"

static double tflops(const llm4d_gemm_shape *g, double M, double N, double K) {
    return 2 * M * N * K / llm4d_gemm_shape_seconds(g, M, N, K, LLM4D_PREC_BF16, 2, 2, 0) / 1e12;
}

static int load_text(const char *text, llm4d_profile *p, llm4d_err *err) {
    const char *path = "test_gemm_shape.tmp.json";
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs(text, f);
    fclose(f);
    const int rc = llm4d_profile_load(p, path, err);
    remove(path);
    return rc;
}

int main(void) {
    llm4d_profile p;
    llm4d_err err = {0};
    if (llm4d_profile_load(&p, "bench/profiles/a100_selene.json", &err) != LLM4D_OK) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    const llm4d_gemm_shape *g = &p.gemm_shape;
    check(g->sms == 108 && g->n_tiles >= 1, "the A100 profile has a GEMM shape model (108 SMs, %d tiles)", g->n_tiles);
    const double mamf = 267.9;
    double top = 0;
    for (double m = 4096; m <= 16384; m += 2048)
        for (double k = 2048; k <= 16384; k *= 2) {
            const double t = tflops(g, m, m, k);
            if (t > top) top = t;
        }
    check(top <= mamf * 1.02 && top >= mamf * 0.98, "largest GEMMs %.1f TFLOP/s within 2 %% of the measured %.1f",
          top, mamf);
    const double best = tflops(g, 6912, 16384, 2048);
    check(fabs(best - mamf) / mamf < 0.06, "6912x16384x2048 %.1f TFLOP/s within 6 %% of the measured %.1f", best, mamf);
    /* one 256 x 128 tile choice on a 1 x 108 grid of tiles against 1 x 109: the same K, one wave against two */
    llm4d_gemm_shape one = *g;
    one.n_tiles = 1, one.tile[0][0] = 256, one.tile[0][1] = 128;
    const double K = 8192;
    const double t108 = llm4d_gemm_shape_seconds(&one, 256, 128 * 108, K, LLM4D_PREC_BF16, 2, 2, 0);
    const double t109 = llm4d_gemm_shape_seconds(&one, 256, 128 * 109, K, LLM4D_PREC_BF16, 2, 2, 0);
    check(fabs(t109 / t108 - 2) < 1e-9, "109 tiles over 108 SMs take %.3f x the time of 108 (a second wave)",
          t109 / t108);
    const double M = 65536, Kt = 65536, bytes = (M * Kt + Kt * 1) * 2 + M * 1 * 2;
    const double thin = llm4d_gemm_shape_seconds(g, M, 1, Kt, LLM4D_PREC_BF16, 2, 2, 0);
    check(fabs(thin - bytes / 2039e9) / (bytes / 2039e9) < 1e-9, "a one-column GEMM takes bytes / HBM bandwidth "
          "(%.3g s)", thin);
    const double small_k = tflops(g, 8192, 8192, 128), large_k = tflops(g, 8192, 8192, 8192);
    check(small_k < 0.6 * large_k, "K 128 runs at %.1f TFLOP/s, well under K 8192's %.1f (the epilogue per tile)",
          small_k, large_k);
    llm4d_rc_call c = {.op = LLM4D_RC_LINEAR_BWD, .d = {8192, 6144, 2304, 0, 1, 1, 0, 0}};
    const double both = llm4d_gemm_shape_call_s(g, &c, LLM4D_PREC_BF16, 5e-6);
    const double sum = llm4d_gemm_shape_seconds(g, 8192, 6144, 2304, LLM4D_PREC_BF16, 2, 2, 5e-6) +
                       llm4d_gemm_shape_seconds(g, 2304, 6144, 8192, LLM4D_PREC_BF16, 2, 4, 5e-6);
    check(fabs(both - sum) < 1e-15, "a linear backward is its input-gradient and weight-gradient GEMMs");
    c.op = LLM4D_RC_LN_FWD;
    check(llm4d_gemm_shape_call_s(g, &c, LLM4D_PREC_BF16, 5e-6) == 0, "a LayerNorm is not priced by GEMM shape");
    llm4d_profile_free(&p);

    const char *cpu = "{\"llm4d_machine_profile\": 1, \"cores\": 2}";
    check(load_text(cpu, &p, &err) == LLM4D_OK && p.gemm_shape.sms == 0, "a profile without gemm_shape has none");
    c.op = LLM4D_RC_LINEAR_FWD;
    double s[LLM4D_WORK_N] = {0};
    check(llm4d_gemm_shape_price(&p.gemm_shape, &c, LLM4D_PREC_BF16, 5e-6, s) == 0 && s[LLM4D_WORK_GEMM] == 0,
          "...and prices no GEMM by shape (the fallback rate does)");
    llm4d_profile_free(&p);
    const char *bad = "{\"llm4d_machine_profile\": 1, \"cores\": 2, \"gemm_shape\": {\"sms\": 108, \"tiles\": "
                      "[[256]], \"peak_gflops\": {\"bf16\": 312000}, \"mainloop_efficiency\": 0.9, "
                      "\"memory_gbps\": 2039}}";
    memset(&err, 0, sizeof err);
    check(load_text(bad, &p, &err) == LLM4D_EUSER && strstr(err.msg, "gemm_shape") && strstr(err.msg, "tile"),
          "a garbled gemm_shape is a user error naming it: %s", err.msg);
    llm4d_profile_free(&p);
    return check_summary();
}
