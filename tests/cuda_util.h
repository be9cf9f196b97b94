/* cuda_util.h — what the GPU kernel tests (test_cuda_kernels.c, test_cuda_attention.c) share: the CUDA backend
 * under test, the reference backend as the oracle and the CPU backend for the low-precision comparisons, and
 * moving test data to and from device memory through the backend's own copies (ordinary host memory: the copies
 * are synchronous, so a download after a kernel holds its result).
 *
 * Where the CUDA backend cannot be created (a build without CUDA, a machine without a GPU) the test prints one line
 * saying why and its closing line, and exits 77: ctest reports it skipped. Header-only: each test is its own
 * executable. */
#ifndef LLM4D_TESTS_CUDA_UTIL_H
#define LLM4D_TESTS_CUDA_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_api.h"
#include "core/rng.h"
#include "check.h"

static llm4d_backend *G, *R, *CPU; /* the GPU under test, ref (the oracle), cpu (bf16 comparisons) */
static llm4d_mem M;

static inline void setup_or_skip(void) {
    llm4d_err err = {0};
    if (llm4d_backend_cuda_create(&G, 0, &err) != LLM4D_OK) {
        printf("SKIP: the CUDA backend cannot run here: %s\n", err.msg);
        printf("0 passed, 0 failed\n");
        exit(77);
    }
    if (llm4d_backend_ref_create(&R, &err) != LLM4D_OK || llm4d_backend_cpu_create(&CPU, 2, &err) != LLM4D_OK) {
        printf("FAIL %s\n", err.msg);
        exit(1);
    }
    char line[512];
    G->describe_gemms(G, line, sizeof line);
    printf("# %s\n", line);
}

static uint64_t g_stream = 1;

static inline float *frand(size_t n, float scale) {
    float *p = falloc(n);
    const uint64_t st = g_stream++;
    for (size_t i = 0; i < n; i++) p[i] = scale * llm4d_rng_normal(4321, st, i);
    return p;
}

static inline float *fdup(const float *x, size_t n) {
    float *p = falloc(n);
    memcpy(p, x, n * sizeof(float));
    return p;
}

/* device copies of host data; `down` brings a device buffer back */
static inline void *up_bytes(const void *h, size_t bytes) {
    void *d = G->alloc(G, &M, LLM4D_MEM_ACTIVATIONS, bytes ? bytes : 1);
    if (!d) {
        printf("FAIL out of device memory (%zu bytes)\n", bytes);
        exit(1);
    }
    if (h && bytes) G->copy_async(G, d, h, bytes, LLM4D_H2D, LLM4D_STREAM_COMPUTE);
    return d;
}
static inline float *up(const float *h, size_t n) { return up_bytes(h, n * sizeof(float)); }
static inline void down(float *h, const void *d, size_t n) {
    G->copy_async(G, h, d, n * sizeof(float), LLM4D_D2H, LLM4D_STREAM_COMPUTE);
}
/* the device buffer's contents as a new host array */
static inline float *got(const void *d, size_t n) {
    float *h = falloc(n);
    down(h, d, n);
    return h;
}
static inline void dfree(void *d, size_t bytes) { G->free(G, &M, LLM4D_MEM_ACTIVATIONS, d, bytes ? bytes : 1); }

/* normwise relative error max|a-b| / max|b| (NaN: infinite) */
static inline double relerr(const float *a, const float *b, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - b[i]);
        if (!(d <= num)) num = isnan(d) ? INFINITY : d;
        if (fabs(b[i]) > den) den = fabs(b[i]);
    }
    return den > 0 ? num / den : num;
}

#define TOL 1e-5

static inline void cmp(const char *what, const float *a, const float *b, size_t n, double tol) {
    const double e = relerr(a, b, n);
    check(e <= tol, "%s: rel err %.2e (tol %.0e)", what, e, tol);
}

/* Low precision: the GPU's error against the fp32 oracle is the format's, as the CPU backend's is in the same
 * format (whose bounds tests/test_kernels.c and test_amp_unit.c prove): at most 2 x the CPU's (+ fp32 noise),
 * and not zero (the low-precision path ran). */
static inline void cmp_lowp(const char *what, const float *gpu, const float *cpu, const float *oracle, size_t n) {
    const double eg = relerr(gpu, oracle, n), ec = relerr(cpu, oracle, n);
    check(eg > 0 && eg <= 2.0 * ec + 1e-6, "%s: rel err %.2e against the CPU backend's %.2e in the same format", what,
          eg, ec);
}

static inline int same_bits(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }

/* ---- typed test data (backend/tensor.h): buffers of fp32, bf16 or fp16, and comparisons by the type's ulp ---- */

static inline size_t tbytes(size_t n, llm4d_ftype t) { return (n ? n : 1) * llm4d_ftype_size(t); }

/* h's values rounded to type t in a new host buffer of that type (h NULL: zeros) */
static inline void *host_t(const float *h, size_t n, llm4d_ftype t) {
    void *p = calloc(1, tbytes(n, t));
    if (!p) exit(1);
    for (size_t i = 0; h && i < n; i++) llm4d_ftype_set(llm4d_t(p, t), i, h[i]);
    return p;
}

/* a typed buffer's values as fp32 */
static inline float *widen(const void *p, size_t n, llm4d_ftype t) {
    float *f = falloc(n);
    for (size_t i = 0; i < n; i++) f[i] = llm4d_ftype_get(llm4d_ct(p, t), i);
    return f;
}

/* h rounded to t, in device memory (h NULL: zeros); and a device buffer of type t brought back as fp32 */
static inline void *up_t(const float *h, size_t n, llm4d_ftype t) {
    void *x = host_t(h, n, t), *d = up_bytes(x, tbytes(n, t));
    free(x);
    return d;
}
static inline float *got_t(const void *d, size_t n, llm4d_ftype t) {
    void *x = host_t(NULL, n, t);
    G->copy_async(G, x, d, tbytes(n, t), LLM4D_D2H, LLM4D_STREAM_COMPUTE);
    float *f = widen(x, n, t);
    free(x);
    return f;
}
static inline void dfree_t(void *d, size_t n, llm4d_ftype t) { dfree(d, tbytes(n, t)); }

/* One ulp of type t at magnitude x (fp32: 0, the tolerance covers it) */
static inline double ulp_t(double x, llm4d_ftype t) {
    int e;
    frexp(fabs(x), &e); /* |x| = m 2^e, m in [0.5, 1) */
    if (t == LLM4D_BF16) return ldexp(1.0, e - 8);
    if (t == LLM4D_F16) return ldexp(1.0, (e - 1 < -14 ? -14 : e - 1) - 10);
    return 0.0;
}

/* every |a - b| within one ulp of t at the larger of the two, plus tol of max|b| */
static inline void cmp_t(const char *what, const float *a, const float *b, size_t n, double tol, llm4d_ftype t) {
    double den = 0.0, worst = 0.0;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        if (fabs(b[i]) > den) den = fabs(b[i]);
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - b[i]), m = fabs(a[i]) > fabs(b[i]) ? fabs(a[i]) : fabs(b[i]);
        bad += !(d <= ulp_t(m, t) + tol * den);
        if (!(d <= worst)) worst = d;
    }
    check(bad == 0, "%s: %zu of %zu beyond one %s ulp + %.0e (largest difference %.2e of max %.2e)", what, bad, n,
          llm4d_ftype_name(t), tol, worst, den);
}

/* cmp_lowp for an output of type t: one more ulp of a 16-bit t, normwise (2^-7 of max|oracle| in bf16, 2^-10 in
 * fp16); an fp32 output must differ from the oracle's (the low-precision path ran), a rounded one may not */
static inline void cmp_lowp_t(const char *what, const float *gpu, const float *cpu, const float *oracle, size_t n,
                       llm4d_ftype t) {
    const double eg = relerr(gpu, oracle, n), ec = relerr(cpu, oracle, n);
    const double u = t == LLM4D_BF16 ? 0x1p-7 : t == LLM4D_F16 ? 0x1p-10 : 0.0;
    check((t != LLM4D_F32 || eg > 0) && eg <= 2.0 * ec + u + 1e-6, "%s: rel err %.2e against the CPU backend's "
          "%.2e in the same format", what, eg, ec);
}

/* ---------------------------------------------------------------------------------------------------------- */

#endif
