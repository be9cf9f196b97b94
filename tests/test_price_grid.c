/* test_price_grid.c — a machine profile's grid prices a call between its measured shapes by interpolating log-log
 * in work (plan/price.h, issue 46 item 1), checked against outside oracles, not against price.c's own formula:
 *   (a) kernels that follow a known power law of their work (t = a w^b, the law chosen here) priced at shapes
 *       between the grid's: log-log interpolation reproduces the law exactly whatever neighbours it takes, a
 *       linear-in-work or nearest-scaled one does not (b != 1);
 *   (b) the same at another thread count: the law divided by the profile's rate ratio between the two counts;
 *   (c) beyond the grid's largest work: the largest nearest shape scaled by work (its fixed cost kept);
 *   (d) a profile that is not a machine profile (as every profile from before) prices as before: NEAREST, not GRID;
 *   (e) the saved machine profile loads back as one (its grid kept) and prices the same. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "plan/price.h"
#include "plan/profile.h"

#define A 3e-11
#define B 0.8

static double law(double w) { return A * pow(w, B); }

static void add_linear(llm4d_profile *p, int threads, int64_t n, int64_t c, int64_t oc, double t) {
    llm4d_prof_kernel k = {.op = LLM4D_RC_LINEAR_FWD, .threads = threads, .d = {n, c, oc, 0, 1}};
    k.s[LLM4D_WORK_GEMM] = t;
    llm4d_err err = {0};
    if (llm4d_profile_add_kernel(p, &k, &err) != LLM4D_OK) check(0, "add a kernel: %s", err.msg);
}

static double price(const llm4d_profile *p, int threads, int64_t n, int64_t c, int64_t oc, llm4d_price_how *how) {
    const llm4d_rc_call call = {.op = LLM4D_RC_LINEAR_FWD, .d = {n, c, oc, 0, 1}};
    const llm4d_pricer pr = {.prof = p, .threads = threads, .prec = LLM4D_PREC_FP32};
    double s[LLM4D_WORK_N] = {0}, t = 0;
    *how = llm4d_price_call(&pr, &call, s);
    for (int i = 0; i < LLM4D_WORK_N; i++) t += s[i];
    return t;
}

int main(void) {
    llm4d_profile p;
    llm4d_profile_init(&p);
    p.cores = 2, p.calibrated = 1, p.complete = 1, p.machine = 1;
    snprintf(p.grid, sizeof p.grid, "hidden 64,256,1024; sequence 64,256,1024");
    p.gemm_gflops[LLM4D_PREC_FP32][1] = 50, p.gemm_gflops[LLM4D_PREC_FP32][2] = 90;
    const int64_t pts[3] = {64, 256, 1024};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++) { /* M over the sequence, K the hidden size, N = 3K (a QKV projection) */
            const int64_t n = pts[i], c = pts[j];
            add_linear(&p, 1, n, c, 3 * c, law(2.0 * n * c * 3 * c));
        }
    llm4d_profile_sort(&p);
    /* (a) between the grid's shapes */
    const int64_t calls[][3] = {{128, 768, 2304}, {100, 64, 192}, {512, 384, 1152}, {64, 768, 3072}, {1000, 100, 300}};
    double worst = 0;
    int all_grid = 1;
    for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
        llm4d_price_how how;
        const double got = price(&p, 1, calls[i][0], calls[i][1], calls[i][2], &how);
        const double want = law(2.0 * calls[i][0] * calls[i][1] * calls[i][2]);
        const double e = fabs(got / want - 1);
        worst = e > worst ? e : worst;
        all_grid &= how == LLM4D_PRICE_GRID;
        printf("     [%lld, %lld, %lld]: priced %.6g s, the law %.6g s\n", (long long)calls[i][0],
               (long long)calls[i][1], (long long)calls[i][2], got, want);
    }
    check(all_grid, "every call inside the grid is priced from it (LLM4D_PRICE_GRID)");
    check(worst < 1e-9, "(a) priced on the power law t = %g w^%g the grid follows: worst relative error %.2g", A, B, worst);
    /* (b) at 2 threads, only 1 measured: the law over the rate ratio 90 / 50 */
    llm4d_price_how how;
    double got = price(&p, 2, 128, 768, 2304, &how), want = law(2.0 * 128 * 768 * 2304) * 50 / 90;
    check(how == LLM4D_PRICE_GRID && fabs(got / want - 1) < 1e-9, "(b) at 2 threads: %.6g s against %.6g s", got, want);
    /* (c) beyond the largest work: [1024, 1024, 3072] scaled by work, its kernel_s kept */
    got = price(&p, 1, 4096, 1024, 3072, &how);
    const double t0 = law(2.0 * 1024 * 1024 * 3072);
    want = p.kernel_s + (t0 - p.kernel_s) * 4;
    check(how == LLM4D_PRICE_GRID && fabs(got / want - 1) < 1e-9, "(c) beyond the grid (4x the largest work): %.6g s "
          "against %.6g s", got, want);
    /* (e) saved and loaded */
    char path[] = "/tmp/test_price_grid_XXXXXX";
    const int fd = mkstemp(path);
    if (fd >= 0) close(fd);
    llm4d_err err = {0};
    llm4d_profile q;
    const int saved = fd >= 0 && llm4d_profile_save(&p, path, &err) == LLM4D_OK;
    const int loaded = saved && llm4d_profile_load(&q, path, &err) == LLM4D_OK;
    check(loaded && q.machine && !strcmp(q.grid, p.grid), "(e) the machine profile loads back as one: grid \"%s\"",
          loaded ? q.grid : err.msg);
    if (loaded) {
        const double a = price(&p, 1, 128, 768, 2304, &how), b = price(&q, 1, 128, 768, 2304, &how);
        check(fabs(a / b - 1) < 1e-12, "(e) and prices the same: %.6g s and %.6g s", a, b);
        llm4d_profile_free(&q);
    }
    unlink(path);
    /* (d) not a machine profile: the nearest measured shape scaled by work, as before */
    p.machine = 0;
    got = price(&p, 1, 128, 768, 2304, &how);
    check(how == LLM4D_PRICE_NEAREST, "(d) a profile without a grid prices as before (the nearest shape: how %d), "
          "%.6g s", (int)how, got);
    llm4d_profile_free(&p);
    return check_summary();
}
