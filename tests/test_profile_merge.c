/* test_profile_merge.c — a machine calibration measures its grid twice and merges the passes
 * (llm4d_profile_merge_pass, plan/calib_kernels.c): per kernel the mean of the two, or the faster where they differ
 * by more than 1.5x (a transient slowdown of the machine spoils one pass, rarely both). Checked against values
 * written here, not computed by the function's own rule:
 *   (a) two close measurements (1.2x apart) give their mean, kind by kind;
 *   (b) a second pass 2x slower keeps the first's seconds; one 2x faster gives the second's, split as measured;
 *   (c) a kernel only the second pass has is added; one only the first has stays;
 *   (d) the same sizes at another thread count or precision are another kernel (never compared with this one);
 *   (e) the count of kernels where the faster was taken; and the merged profile saves and loads back the same. */
#include <stdio.h>
#include <unistd.h>

#include "check.h"
#include "plan/profile.h"

/* A linear forward of n x 64 -> 256 at threads and precision prec: gemm seconds g, element-wise seconds e. */
static void add(llm4d_profile *p, int threads, int prec, int64_t n, double g, double e) {
    llm4d_prof_kernel k = {.op = LLM4D_RC_LINEAR_FWD, .threads = threads, .prec = (uint8_t)prec,
                           .d = {n, 64, 256, 0, 1}};
    k.s[LLM4D_WORK_GEMM] = g, k.s[LLM4D_WORK_ELEM] = e;
    llm4d_err err = {0};
    if (llm4d_profile_add_kernel(p, &k, &err) != LLM4D_OK) check(0, "add a kernel: %s", err.msg);
}

static void expect(const llm4d_profile *p, const char *what, int threads, int prec, int64_t n, double g, double e) {
    const llm4d_rc_call c = {.op = LLM4D_RC_LINEAR_FWD, .d = {n, 64, 256, 0, 1}};
    const llm4d_prof_kernel *k = llm4d_profile_find(p, &c, threads, prec);
    const double gg = k ? k->s[LLM4D_WORK_GEMM] : -1, ee = k ? k->s[LLM4D_WORK_ELEM] : -1;
    check(gg == g && ee == e, "%s: gemm %g s and element-wise %g s (expected %g and %g)", what, gg, ee, g, e);
}

int main(void) {
    llm4d_profile first, second;
    llm4d_profile_init(&first), llm4d_profile_init(&second);
    add(&first, 1, LLM4D_PREC_FP32, 256, 4.0e-3, 1.0e-3);  /* 5 ms; the second 6 ms: the mean (a) */
    add(&second, 1, LLM4D_PREC_FP32, 256, 4.0e-3, 2.0e-3);
    add(&first, 1, LLM4D_PREC_FP32, 512, 2.0e-3, 0.0);     /* the second 2x slower: the first's (b) */
    add(&second, 1, LLM4D_PREC_FP32, 512, 4.0e-3, 0.0);
    add(&first, 1, LLM4D_PREC_FP32, 1024, 8.0e-3, 0.0);    /* the second 2x faster: the second's (b) */
    add(&second, 1, LLM4D_PREC_FP32, 1024, 1.0e-3, 3.0e-3);
    add(&first, 1, LLM4D_PREC_FP32, 2048, 9.0e-3, 0.0);    /* only in the first (c) */
    add(&second, 1, LLM4D_PREC_FP32, 4096, 7.0e-3, 0.0);   /* only in the second (c) */
    add(&first, 2, LLM4D_PREC_FP32, 256, 1.0e-3, 0.0);     /* 2 threads: against 2 threads' 3 ms (d) */
    add(&second, 2, LLM4D_PREC_FP32, 256, 3.0e-3, 0.0);
    add(&second, 1, LLM4D_PREC_BF16, 512, 0.5e-3, 0.0);    /* bf16: a kernel of its own, not fp32's (d) */
    llm4d_err err = {0};
    int outliers = -1;
    const llm4d_code rc = llm4d_profile_merge_pass(&first, &second, &outliers, &err);
    check(rc == LLM4D_OK, "the merge succeeds (%s)", err.msg);
    llm4d_profile_sort(&first);
    expect(&first, "(a) 5 and 6 ms: the mean, by kind", 1, LLM4D_PREC_FP32, 256, 4.0e-3, 1.5e-3);
    expect(&first, "(b) the second 2x slower: the first's", 1, LLM4D_PREC_FP32, 512, 2.0e-3, 0.0);
    expect(&first, "(b) the second 2x faster: the second's, split as measured", 1, LLM4D_PREC_FP32, 1024, 1.0e-3,
           3.0e-3);
    expect(&first, "(c) only in the first: kept", 1, LLM4D_PREC_FP32, 2048, 9.0e-3, 0.0);
    expect(&first, "(c) only in the second: added", 1, LLM4D_PREC_FP32, 4096, 7.0e-3, 0.0);
    expect(&first, "(d) 2 threads against 2 threads' 3x slower: the first's", 2, LLM4D_PREC_FP32, 256, 1.0e-3, 0.0);
    expect(&first, "(d) bf16 a kernel of its own", 1, LLM4D_PREC_BF16, 512, 0.5e-3, 0.0);
    check(outliers == 3, "(e) the faster taken for 3 kernels (2 ms against 4, 8 against 4, 1 against 3): %d",
          outliers);
    check(first.n_kernels == 7, "(e) 7 kernels in the merged profile: %d", first.n_kernels);
    first.cores = 2; /* what a profile must say to load */
    char path[] = "/tmp/llm4d_profile_merge_XXXXXX";
    const int fd = mkstemp(path);
    check(fd >= 0, "a temporary file");
    if (fd >= 0) close(fd);
    llm4d_profile back;
    llm4d_profile_init(&back);
    const int saved = fd >= 0 && llm4d_profile_save(&first, path, &err) == LLM4D_OK &&
                      llm4d_profile_load(&back, path, &err) == LLM4D_OK;
    check(saved, "(e) the merged profile saves and loads (%s)", err.msg);
    if (saved) expect(&back, "(e) loaded back", 1, LLM4D_PREC_FP32, 1024, 1.0e-3, 3.0e-3);
    if (fd >= 0) unlink(path);
    llm4d_profile_free(&back), llm4d_profile_free(&first), llm4d_profile_free(&second);
    return check_summary();
}
