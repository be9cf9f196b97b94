/* test_grads_reset.c — gradients that start over without being zeroed (backend.h grads_reset / grads_settle) on the
 * fast CPU backend.
 *
 * A reset range is filled with NaN first, so any kernel that adds to it instead of writing, and any read of it that
 * is not settled, shows as NaN. Checked: the bookkeeping (settling part of a range, everything, ranges merged and
 * cut, zero and copy dropping what they overwrite, memory freed through the backend); every kernel that writes a
 * gradient (a linear layer's weight and bias gradients in fp32 and bf16, on this CPU's GEMMs: oneDNN, or the AMX
 * kernel where the CPU has it; LayerNorm's and RMSNorm's weights; the token and position embeddings) gives on a
 * reset buffer what it gives on a zeroed one (the bias, norm and embedding sums to the bit: 0 + x is x; the weight
 * gradient's GEMM then stores instead of adding, a different oneDNN kernel: 1e-5 relative), accumulates a second
 * micro-batch onto the first, and adds to the part of a range that was not reset; and the passes that read
 * gradients (the norm's sum of squares, AdamW, a copy) read a reset range as zeros. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/rng.h"
#include "backend_pair.h"
#include "check.h"

static uint64_t g_stream = 1;

static float *frand(size_t n, float scale) {
    float *p = falloc(n);
    const uint64_t st = g_stream++;
    for (size_t i = 0; i < n; i++) p[i] = scale * llm4d_rng_normal(99, st, i);
    return p;
}

static void fill(float *p, size_t n, float v) {
    for (size_t i = 0; i < n; i++) p[i] = v;
}

static int all_equal(const float *p, size_t n, float v) {
    for (size_t i = 0; i < n; i++)
        if (!(p[i] == v)) return 0;
    return 1;
}

/* the largest relative difference (NaN anywhere: infinite) */
static double maxrel(const float *a, const float *b, size_t n) {
    double w = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - b[i]) / fmax(fabs((double)b[i]), 1e-3);
        if (!(d <= w)) w = isnan(d) ? INFINITY : d;
    }
    return w;
}

static void test_bookkeeping(llm4d_backend *be) {
    const size_t n = 1000, B = sizeof(float);
    float *g = falloc(n), *src = falloc(n);
    fill(g, n, 7.0f);
    be->grads_reset(be, g + 100, 400 * B);
    be->grads_reset(be, g + 500, 400 * B); /* touches the first: one range [100, 900) */
    be->grads_settle(be, g, 200 * B);
    check(all_equal(g, 100, 7.0f) && all_equal(g + 100, 100, 0.0f) && all_equal(g + 200, 800, 7.0f),
          "settling [0, 200) of a reset [100, 900) zeroes [100, 200) only (the rest is owed, not yet written)");
    be->grads_settle(be, g + 300, 100 * B); /* cuts the range in two */
    check(all_equal(g + 300, 100, 0.0f) && all_equal(g + 200, 100, 7.0f) && all_equal(g + 400, 500, 7.0f),
          "settling the middle [300, 400) zeroes it alone");
    be->grads_settle(be, NULL, 0);
    check(all_equal(g, 100, 7.0f) && all_equal(g + 100, 800, 0.0f) && all_equal(g + 900, 100, 7.0f),
          "settling everything zeroes what was reset and nothing else");
    be->grads_settle(be, NULL, 0);
    fill(g, n, 7.0f);
    be->grads_settle(be, NULL, 0);
    check(all_equal(g, n, 7.0f), "nothing owed after a settle: a second one writes nothing");

    fill(g, n, 7.0f);
    fill(src, n, 3.0f);
    be->grads_reset(be, g, n * B);
    be->zero(be, g, 100 * B);
    fill(g, 100, 5.0f); /* written after the zero: not owed any more */
    be->copy(be, g + 100, src, 100 * B);
    be->grads_settle(be, NULL, 0);
    check(all_equal(g, 100, 5.0f) && all_equal(g + 100, 100, 3.0f) && all_equal(g + 200, 800, 0.0f),
          "zero and copy over a reset range drop what they wrote from it; the rest settles to zeros");

    llm4d_mem mem = {0};
    float *d = be->alloc(be, &mem, LLM4D_MEM_GRADS, n * B);
    fill(d, n, 7.0f);
    be->grads_reset(be, d, n * B);
    be->free(be, &mem, LLM4D_MEM_GRADS, d, n * B);
    float *d2 = be->alloc(be, &mem, LLM4D_MEM_GRADS, n * B);
    fill(d2, n, 7.0f);
    be->grads_settle(be, NULL, 0);
    if (d2 == d)
        check(all_equal(d2, n, 7.0f), "memory freed through the backend is owed nothing (reused: left as written)");
    else printf("# the allocator did not hand the freed block back: its case not checked\n");
    be->free(be, &mem, LLM4D_MEM_GRADS, d2, n * B);
    free(g);
    free(src);
}

/* A linear layer's weight and bias gradients into [dw | db] (one buffer, as a storage's), reset and NaN-filled,
 * against the same call on a zeroed buffer. */
static void test_linear(llm4d_backend *be, llm4d_precision prec, const char *pname) {
    llm4d_err err = {0};
    if (be->set_precision(be, prec, &err) != LLM4D_OK) {
        printf("# %s: not on this CPU (%s)\n", pname, err.msg);
        return;
    }
    const int N = 96, C = 64, OC = 80;
    const size_t nw = (size_t)OC * C, ng = nw + OC, B = sizeof(float);
    float *x = frand((size_t)N * C, 1.0f), *w = frand(nw, 0.1f), *dy = frand((size_t)N * OC, 1.0f);
    float *dx = falloc((size_t)N * C), *want = falloc(ng), *got = falloc(ng), *want2 = falloc(ng);
    be->linear_backward(be, llm4d_t32(dx), LLM4D_WRITE, want, want + nw, llm4d_ct32(dy), llm4d_ct32(x), w, N, C, OC);
    memcpy(want2, want, ng * B);
    be->linear_backward(be, llm4d_t32(dx), LLM4D_WRITE, want2, want2 + nw, llm4d_ct32(dy), llm4d_ct32(x), w, N, C,
                        OC);

    fill(got, ng, NAN);
    be->grads_reset(be, got, ng * B);
    be->linear_backward(be, llm4d_t32(dx), LLM4D_WRITE, got, got + nw, llm4d_ct32(dy), llm4d_ct32(x), w, N, C, OC);
    be->grads_settle(be, NULL, 0);
    double e = maxrel(got, want, nw);
    check(e <= 1e-5, "%s linear: the weight gradient written over a reset buffer = added to zeros (%.1e)", pname, e);
    check(memcmp(got + nw, want + nw, OC * B) == 0, "%s linear: the bias gradient too, to the bit", pname);

    fill(got, ng, NAN);
    be->grads_reset(be, got, ng * B);
    for (int k = 0; k < 2; k++)
        be->linear_backward(be, llm4d_t32(dx), LLM4D_WRITE, got, got + nw, llm4d_ct32(dy), llm4d_ct32(x), w, N, C,
                            OC);
    be->grads_settle(be, NULL, 0);
    e = maxrel(got, want2, ng);
    check(e <= 1e-5, "%s linear: a second micro-batch adds to what the first wrote (%.1e)", pname, e);

    /* only the second half of the weight gradient reset: the first half holds 1 and the GEMM must add to it */
    fill(got, nw / 2, 1.0f);
    fill(got + nw / 2, ng - nw / 2, NAN);
    be->grads_reset(be, got + nw / 2, (ng - nw / 2) * B);
    be->linear_backward(be, llm4d_t32(dx), LLM4D_WRITE, got, got + nw, llm4d_ct32(dy), llm4d_ct32(x), w, N, C, OC);
    be->grads_settle(be, NULL, 0);
    for (size_t i = 0; i < nw / 2; i++) want2[i] = want[i] + 1.0f;
    e = fmax(maxrel(got, want2, nw / 2), maxrel(got + nw / 2, want + nw / 2, ng - nw / 2));
    check(e <= 1e-5, "%s linear: over a partly reset gradient, the part not reset is added to (%.1e)", pname, e);
    be->set_precision(be, LLM4D_PREC_FP32, &err);
    free(x), free(w), free(dy), free(dx), free(want), free(got), free(want2);
}

/* The norms' and embeddings' gradients: reset and NaN-filled against zeroed, to the bit. */
static void test_sums(llm4d_backend *be) {
    const int N = 48, C = 40, V = 30, Tmax = 16, T = 12;
    const size_t B = sizeof(float);
    float *x = frand((size_t)N * C, 1.0f), *dy = frand((size_t)N * C, 1.0f), *w = frand(C, 1.0f);
    float *mean = falloc(N), *rstd = falloc(N), *y = falloc((size_t)N * C), *dx = falloc((size_t)N * C);
    int32_t *tok = malloc(N * sizeof *tok);
    for (int n = 0; n < N; n++) tok[n] = (n * 7) % V;
    const size_t ng = 2 * (size_t)C + (size_t)V * C + (size_t)Tmax * C + C;
    float *want = falloc(ng), *got = falloc(ng);
    be->layernorm_forward(be, llm4d_t32(y), mean, rstd, llm4d_ct32(x), w, w, N, C);
    for (int pass = 0; pass < 2; pass++) {
        float *g = pass ? got : want;
        if (pass) {
            fill(g, ng, NAN);
            be->grads_reset(be, g, ng * B);
        }
        memset(dx, 0, (size_t)N * C * B);
        be->layernorm_backward(be, llm4d_t32(dx), g, g + C, llm4d_ct32(dy), llm4d_ct32(x), w, mean, rstd, N, C);
        be->embedding_backward(be, g + 2 * C, dy, tok, 0, V, N, C);
        be->position_backward(be, g + 2 * C + (size_t)V * C, dy, N, C, T, 0); /* rows T..Tmax-1 untouched */
        be->rmsnorm_backward(be, llm4d_t32(dx), g + ng - C, llm4d_ct32(dy), llm4d_ct32(x), w, rstd, N, C);
        if (pass) be->grads_settle(be, NULL, 0);
    }
    check(memcmp(got, want, 2 * C * B) == 0, "LayerNorm's weight and bias gradients over a reset buffer, to the bit");
    check(memcmp(got + 2 * C, want + 2 * C, (size_t)V * C * B) == 0,
          "the token embedding's gradient (a scatter-add: zeroed first), to the bit");
    check(memcmp(got + 2 * C + (size_t)V * C, want + 2 * C + (size_t)V * C, (size_t)Tmax * C * B) == 0,
          "the position embedding's, rows past T settled to zeros, to the bit");
    check(memcmp(got + ng - C, want + ng - C, C * B) == 0, "RMSNorm's weight gradient, to the bit");
    free(x), free(dy), free(w), free(mean), free(rstd), free(y), free(dx), free(tok), free(want), free(got);
}

/* The passes that read gradients read a reset range as zeros. */
static void test_readers(llm4d_backend *be, llm4d_backend *ref) {
    const size_t n = 40000, B = sizeof(float);
    float *g = falloc(n), *out = falloc(n);
    fill(g, n, NAN);
    be->grads_reset(be, g, n * B);
    check(be->sumsq(be, g, n) == 0.0, "the norm's sum of squares over a reset range is 0");
    fill(g, n, NAN);
    be->grads_reset(be, g, n * B);
    be->copy(be, out, g, n * B);
    check(all_equal(out, n, 0.0f), "a copy out of a reset range copies zeros");
    fill(g, n, NAN);
    be->grads_reset(be, g, n * B);
    float *p1 = frand(n, 1.0f), *p2 = falloc(n), *m1 = falloc(n), *m2 = falloc(n), *v1 = falloc(n), *v2 = falloc(n);
    float *z = falloc(n);
    memcpy(p2, p1, n * B);
    be->adamw(be, p1, g, m1, v1, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 1.0f, 0);
    ref->adamw(ref, p2, z, m2, v2, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 1.0f, 0);
    check(maxrel(p1, p2, n) <= 1e-6 && all_equal(m1, n, 0.0f) && all_equal(g, n, 0.0f),
          "AdamW over reset gradients = the reference over zeros (weight decay only; m stays 0)");
    free(g), free(out), free(p1), free(p2), free(m1), free(m2), free(v1), free(v2), free(z);
}

int main(void) {
    llm4d_backend *cpu, *ref;
    if (!backend_pair_open(&cpu, &ref)) return 1;
    check(cpu->grads_reset && cpu->grads_settle && !ref->grads_reset,
          "the cpu backend resets gradients; the reference zeroes them (no grads_reset)");
    test_bookkeeping(cpu);
    test_linear(cpu, LLM4D_PREC_FP32, "fp32");
    test_linear(cpu, LLM4D_PREC_BF16, "bf16");
    test_sums(cpu);
    test_readers(cpu, ref);
    cpu->destroy(cpu);
    ref->destroy(ref);
    return check_summary();
}
