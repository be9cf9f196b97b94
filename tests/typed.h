/* typed.h — typed test tensors (fp32, bf16, fp16: backend/tensor.h) and the comparisons of the 16-bit kernel tests
 * (tests/test_kernels16.c, tests/test_kernels16_gemm.c). Header-only, as check.h, because every tests/test_*.c is
 * its own executable.
 *
 * A kernel's 16-bit result is its fp32 math rounded once, on store (backend.h). Two backends whose fp32 results
 * differ by a little can round them to neighbouring 16-bit values where the exact result lies near a rounding
 * boundary, so a comparison of two 16-bit results allows one unit in the last place of the output type at the
 * reference's value (ulp_of), on top of whatever the fp32 comparison allows. The spacing is the type's own: 2^(e-7)
 * for bf16 (8-bit significand) and 2^(e-10) for fp16 (11 bits, subnormal below 2^-14) at a value in [2^e, 2^(e+1)). */
#ifndef LLM4D_TESTS_TYPED_H
#define LLM4D_TESTS_TYPED_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/tensor.h"
#include "check.h"

/* A test tensor: n elements of type t (zeroed when made). */
typedef struct {
    void *p;
    llm4d_ftype t;
    size_t n;
} tbuf;

static inline tbuf tb_new(llm4d_ftype t, size_t n) {
    tbuf a = {calloc(n ? n : 1, llm4d_ftype_size(t)), t, n};
    if (!a.p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return a;
}
static inline float tb_get(tbuf a, size_t i) { return llm4d_ftype_get((llm4d_ctensor){a.p, a.t}, i); }
static inline void tb_set(tbuf a, size_t i, float v) { llm4d_ftype_set((llm4d_tensor){a.p, a.t}, i, v); }
/* x rounded to t (to nearest even), element by element */
static inline tbuf tb_of(llm4d_ftype t, const float *x, size_t n) {
    tbuf a = tb_new(t, n);
    for (size_t i = 0; i < n; i++) tb_set(a, i, x[i]);
    return a;
}
static inline tbuf tb_dup(tbuf a) {
    tbuf d = tb_new(a.t, a.n);
    memcpy(d.p, a.p, a.n * llm4d_ftype_size(a.t));
    return d;
}
/* the values of a as fp32 (exact) */
static inline tbuf tb_wide(tbuf a) {
    tbuf d = tb_new(LLM4D_F32, a.n);
    for (size_t i = 0; i < a.n; i++) ((float *)d.p)[i] = tb_get(a, i);
    return d;
}
/* the values of a rounded once to t */
static inline tbuf tb_round(tbuf a, llm4d_ftype t) {
    tbuf d = tb_new(t, a.n);
    for (size_t i = 0; i < a.n; i++) tb_set(d, i, tb_get(a, i));
    return d;
}
static inline void tb_free(tbuf *a) {
    free(a->p);
    a->p = NULL;
}
static inline llm4d_tensor tb_t(tbuf a) { return (llm4d_tensor){a.p, a.t}; }
static inline llm4d_ctensor tb_ct(tbuf a) { return (llm4d_ctensor){a.p, a.t}; }
static inline float *tb_f(tbuf a) { return a.p; } /* an fp32 tensor's floats */
static inline const char *tname(llm4d_ftype t) { return llm4d_ftype_name(t); }

/* The spacing of type t's values at |v|; 0 for fp32 (whose rounding the fp32 tolerances cover). */
static inline double ulp_of(llm4d_ftype t, double v) {
    if (t == LLM4D_F32) return 0.0;
    const int p = t == LLM4D_BF16 ? 8 : 11, emin = t == LLM4D_BF16 ? -126 : -14;
    const double a = fabs(v);
    int e = a > 0 && isfinite(a) ? ilogb(a) : emin;
    if (e < emin) e = emin;
    return ldexp(1.0, e - (p - 1));
}

/* the same value (a NaN equal to any NaN; +0 and -0 told apart) */
static inline int same_value(float a, float b) { return (isnan(a) && isnan(b)) || !memcmp(&a, &b, sizeof a); }

/* How far got is from want, element by element: ratio is the worst |got - want| / allowed, where allowed is
 * nulp ulp_of(want's type, want) + tol max|want| + bscale bound[i] (bound NULL: none); err the worst |got - want|;
 * ulps the worst part of an error beyond the fp32 allowance (tol, bound) in units of want's type (16-bit types: the
 * roundings' share); differ the elements whose values differ. */
typedef struct {
    double ratio, err, ulps;
    size_t differ, n;
} tstat;

static inline tstat tb_compare(tbuf got, tbuf want, double nulp, double tol, const double *bound, double bscale) {
    tstat s = {0, 0, 0, 0, want.n};
    double wmax = 0.0;
    for (size_t i = 0; i < want.n; i++)
        if (isfinite(tb_get(want, i))) wmax = fmax(wmax, fabs(tb_get(want, i)));
    for (size_t i = 0; i < want.n; i++) {
        const float g = tb_get(got, i), w = tb_get(want, i);
        if (same_value(g, w)) continue;
        s.differ++;
        const double e = fabs((double)g - w), u = ulp_of(want.t, w);
        const double allowed = nulp * u + tol * wmax + (bound ? bscale * bound[i] : 0.0);
        const double r = e <= allowed ? (allowed > 0 ? e / allowed : 0.0) : (allowed > 0 ? e / allowed : INFINITY);
        if (!(r <= s.ratio)) s.ratio = r; /* NaN (a NaN against a number) propagates as a failure */
        if (!(e <= s.err)) s.err = e;
        const double beyond = e - tol * wmax - (bound ? bscale * bound[i] : 0.0); /* what the ulps must explain */
        if (u > 0 && beyond > 0 && !(beyond / u <= s.ulps)) s.ulps = beyond / u;
    }
    return s;
}

/* The worst observed per kernel, output and output type, printed at the end ("# worst ..." lines): what the tests
 * saw, for whoever reads the log (ulp: the part of an error that the fp32 allowance does not explain). */
#define WORST_MAX 128
static struct {
    char key[80];
    double ulps, err, ratio;
} worst_tab[WORST_MAX];
static int worst_n;

static inline void note_worst(const char *kernel, const char *output, llm4d_ftype t, tstat s) {
    char key[80];
    snprintf(key, sizeof key, "%s %s %s", kernel, output, tname(t));
    int i = 0;
    while (i < worst_n && strcmp(worst_tab[i].key, key)) i++;
    if (i == worst_n) {
        if (worst_n == WORST_MAX) return;
        snprintf(worst_tab[worst_n++].key, sizeof worst_tab[0].key, "%s", key);
    }
    worst_tab[i].ulps = fmax(worst_tab[i].ulps, s.ulps);
    worst_tab[i].err = fmax(worst_tab[i].err, s.err);
    worst_tab[i].ratio = fmax(worst_tab[i].ratio, s.ratio);
}

static inline void print_worst(void) {
    for (int i = 0; i < worst_n; i++)
        printf("# worst %-40s %5.3f ulp  max err %.2e  err/allowed %.3f\n", worst_tab[i].key, worst_tab[i].ulps,
               worst_tab[i].err, worst_tab[i].ratio);
}

/* Type combination number idx of k typed arguments: argument j gets type (idx / 3^j) % 3. idx 0 is all fp32. */
static inline void combo_types(int idx, int k, llm4d_ftype *t) {
    for (int j = 0; j < k; j++, idx /= 3) t[j] = (llm4d_ftype)(idx % 3);
}
static inline int combo_count(int k) {
    int n = 1;
    for (int j = 0; j < k; j++) n *= 3;
    return n;
}

#endif
