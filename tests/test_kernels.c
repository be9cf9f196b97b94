/* test_kernels.c — the fast CPU backend (cpu.c) against the reference backend (cpu_ref.c), op by op.
 *
 * Every operation of backend.h runs on both backends with the same deterministic random inputs, over shapes
 * chosen to hit the awkward cases: sizes that are not multiples of the SIMD width or of the kernels' chunk
 * sizes, sequence lengths that cross the attention's query block (128) and key block (256) boundaries, padded
 * vocabularies (Vp > V). Gradient buffers start with random values so that "accumulates (+=)" is tested, not
 * assumed, and a second backward call must double the increment. Dropout is checked against core/rng.h's definition
 * directly (not only cpu vs ref), on token slices (sequence parallel) and for its drop rate. The embedding and the
 * cross-entropy are also checked in vocabulary parts (vocabulary-parallel ranks, ZeRO blocks) against the whole.
 * Linear layers also with their input read through GELU (linear_forward_act), and GELU's derivative over [-30, 30],
 * where its tails are a tiny sech^2 times a large polynomial. AdamW is checked against a double-precision loop,
 * and sumsq must be bit-identical with 1 and 2 threads. Tolerances: fp32 vs the double-accumulating
 * reference, normwise max|a-b|/max|b| <= 1e-5 (observed errors are ~1e-7); the attention with bf16 / fp16
 * GEMM operands against per-element bounds derived from the formats (test_attention_lowp, attn_bound.h). Every
 * tensor here is fp32; the kernels' 16-bit tensors (backend/tensor.h) are test_kernels16.c's and
 * test_kernels16_gemm.c's. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu_dnnl.h"
#include "core/bf16.h"
#include "core/rng.h"
#include "attn_bound.h"
#include "backend_pair.h"
#include "check.h"
#include "xent_ranks.h"



static float *fdup(const float *x, size_t n) {
    float *p = falloc(n);
    memcpy(p, x, n * sizeof(float));
    return p;
}

static uint64_t g_stream = 1;

/* normal(0, scale) values, a fresh stream per call so that every tensor differs */
static void fill(float *x, size_t n, float scale) {
    uint64_t st = g_stream++;
    for (size_t i = 0; i < n; i++) x[i] = scale * llm4d_rng_normal(1234, st, i);
}

static float *frand(size_t n, float scale) {
    float *p = falloc(n);
    fill(p, n, scale);
    return p;
}

/* normwise relative error max|a-b| / max|b| */
static double relerr(const float *a, const float *b, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= num)) num = d; /* NaN propagates as a failure */
        if (fabs(b[i]) > den) den = fabs(b[i]);
    }
    return den > 0 ? num / den : num;
}

#define TOL 1e-5

static void cmp(const char *what, const float *a, const float *b, size_t n, double tol) {
    double e = relerr(a, b, n);
    check(e <= tol, "%s: rel err %.2e (tol %.0e)", what, e, tol);
}

/* second call doubles the increment: (g2 - g0) == 2 (g1 - g0) */
static void cmp_twice(const char *what, const float *g0, const float *g1, const float *g2, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d1 = (double)g1[i] - g0[i], d2 = (double)g2[i] - g0[i];
        num = fmax(num, fabs(d2 - 2 * d1));
        den = fmax(den, fabs(d1));
    }
    check(den > 0 && num <= 1e-5 * den + 1e-6 * fmax(1.0, den),
          "%s: backward twice accumulates twice (err %.2e of %.2e)", what, num, den);
}

/* The backward kernels that write rather than add (backend.h): run again on a buffer holding the first result,
 * the output must be that result bit for bit (an accumulating kernel would double it). The first run started from
 * random values, so agreement with the reference already shows the old contents are ignored. */
static void cmp_overwrites(const char *what, const float *g1, const float *g2, size_t n) {
    check(!memcmp(g1, g2, n * sizeof(float)), "%s: backward again writes the same values, not their sum", what);
}

/* ---------------------------------------------------------------------------------------------------------- */

/* A linear layer, its input read through act (linear_forward_act / linear_backward_act; the plain entry points
 * for LLM4D_ACT_NONE). */
static void lin_fwd(llm4d_backend *be, float *out, const float *inp, llm4d_act act, const float *w, const float *b,
                    int N, int C, int OC) {
    if (act == LLM4D_ACT_NONE) be->linear_forward(be, llm4d_t32(out), llm4d_ct32(inp), w, b, N, C, OC);
    else be->linear_forward_act(be, llm4d_t32(out), llm4d_ct32(inp), act, w, b, N, C, OC);
}

static void lin_bwd_store(llm4d_backend *be, float *dinp, llm4d_store st, float *dw, float *db, const float *dout,
                          const float *inp, llm4d_act act, const float *w, int N, int C, int OC) {
    if (act == LLM4D_ACT_NONE)
        be->linear_backward(be, llm4d_t32(dinp), st, dw, db, llm4d_ct32(dout), llm4d_ct32(inp), w, N, C, OC);
    else
        be->linear_backward_act(be, llm4d_t32(dinp), st, dw, db, llm4d_ct32(dout), llm4d_ct32(inp), act, w, N, C, OC);
}

static void lin_bwd(llm4d_backend *be, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                    llm4d_act act, const float *w, int N, int C, int OC) {
    lin_bwd_store(be, dinp, LLM4D_ADD, dw, db, dout, inp, act, w, N, C, OC);
}

static void test_linear(llm4d_backend *cpu, llm4d_backend *ref, int N, int C, int OC, int bias, llm4d_act act) {
    char tag[128];
    snprintf(tag, sizeof tag, "linear N=%d C=%d OC=%d bias=%d%s", N, C, OC, bias,
             act == LLM4D_ACT_GELU ? " input through GELU" : "");
    float *inp = frand((size_t)N * C, 1.0f), *w = frand((size_t)OC * C, 0.1f), *b = bias ? frand(OC, 0.5f) : NULL;
    float *o1 = falloc((size_t)N * OC), *o2 = falloc((size_t)N * OC);
    fill(o1, (size_t)N * OC, 1.0f); /* forward must overwrite */
    lin_fwd(cpu, o1, inp, act, w, b, N, C, OC);
    lin_fwd(ref, o2, inp, act, w, b, N, C, OC);
    char what[192];
    snprintf(what, sizeof what, "%s forward", tag);
    cmp(what, o1, o2, (size_t)N * OC, TOL);

    float *dout = frand((size_t)N * OC, 1.0f);
    float *dinp0 = frand((size_t)N * C, 1.0f), *dw0 = frand((size_t)OC * C, 1.0f), *db0 = frand(OC, 1.0f);
    float *dinp1 = fdup(dinp0, (size_t)N * C), *dw1 = fdup(dw0, (size_t)OC * C), *db1 = fdup(db0, OC);
    float *dinp2 = fdup(dinp0, (size_t)N * C), *dw2 = fdup(dw0, (size_t)OC * C), *db2 = fdup(db0, OC);
    lin_bwd(cpu, dinp1, dw1, db1, dout, inp, act, w, N, C, OC);
    lin_bwd(ref, dinp2, dw2, db2, dout, inp, act, w, N, C, OC);
    snprintf(what, sizeof what, "%s backward dinp", tag);
    cmp(what, dinp1, dinp2, (size_t)N * C, TOL);
    snprintf(what, sizeof what, "%s backward dw", tag);
    cmp(what, dw1, dw2, (size_t)OC * C, TOL);
    snprintf(what, sizeof what, "%s backward db", tag);
    cmp(what, db1, db2, OC, TOL);
    /* twice */
    float *dinp3 = fdup(dinp1, (size_t)N * C), *dw3 = fdup(dw1, (size_t)OC * C), *db3 = fdup(db1, OC);
    lin_bwd(cpu, dinp3, dw3, db3, dout, inp, act, w, N, C, OC);
    snprintf(what, sizeof what, "%s dinp", tag);
    cmp_twice(what, dinp0, dinp1, dinp3, (size_t)N * C);
    snprintf(what, sizeof what, "%s dw", tag);
    cmp_twice(what, dw0, dw1, dw3, (size_t)OC * C);
    snprintf(what, sizeof what, "%s db", tag);
    cmp_twice(what, db0, db1, db3, OC);
    /* dinp and db may be NULL: dw alone */
    float *dw4 = fdup(dw0, (size_t)OC * C);
    lin_bwd(cpu, NULL, dw4, NULL, dout, inp, act, w, N, C, OC);
    snprintf(what, sizeof what, "%s backward dw only (dinp, db NULL)", tag);
    cmp(what, dw4, dw2, (size_t)OC * C, TOL);
    /* LLM4D_WRITE: dinp over random contents is the reference's gradient from zero, and again the same bits */
    float *dinp5 = fdup(dinp0, (size_t)N * C), *dinp6 = falloc((size_t)N * C);
    memset(dinp6, 0, (size_t)N * C * sizeof(float));
    lin_bwd_store(cpu, dinp5, LLM4D_WRITE, NULL, NULL, dout, inp, act, w, N, C, OC);
    lin_bwd(ref, dinp6, NULL, NULL, dout, inp, act, w, N, C, OC);
    snprintf(what, sizeof what, "%s backward dinp written", tag);
    cmp(what, dinp5, dinp6, (size_t)N * C, TOL);
    float *dinp7 = fdup(dinp5, (size_t)N * C);
    lin_bwd_store(cpu, dinp7, LLM4D_WRITE, NULL, NULL, dout, inp, act, w, N, C, OC);
    cmp_overwrites(what, dinp5, dinp7, (size_t)N * C);
    free(inp), free(w), free(b), free(o1), free(o2), free(dout);
    free(dinp0), free(dw0), free(db0), free(dinp1), free(dw1), free(db1), free(dinp2), free(dw2), free(db2);
    free(dinp3), free(dw3), free(db3), free(dw4), free(dinp5), free(dinp6), free(dinp7);
}

/* Token embedding over vocabulary parts: the sum of the parts [row0, row0 + nrows) that tile the vocabulary is the
 * whole lookup (a vocabulary-parallel embedding), and each part's gradient lands in its own rows only. */
static void test_embedding(llm4d_backend *cpu, llm4d_backend *ref, int N, int C, int V, int parts) {
    int32_t *tok = malloc(sizeof(int32_t) * N);
    for (int i = 0; i < N; i++) tok[i] = (int32_t)((i * 7919u + 13u) % (unsigned)(V < 5 ? V : 5) * (V / 5 + 1) % V);
    float *w = frand((size_t)V * C, 1.0f);
    float *o0 = frand((size_t)N * C, 1.0f), *o1 = fdup(o0, (size_t)N * C), *o2 = fdup(o0, (size_t)N * C);
    float *whole = fdup(o0, (size_t)N * C);
    cpu->embedding_forward(cpu, whole, tok, w, 0, V, N, C);
    const int rows = (V + parts - 1) / parts;
    for (int r0 = 0; r0 < V; r0 += rows) {
        const int nr = V - r0 < rows ? V - r0 : rows;
        cpu->embedding_forward(cpu, o1, tok, w + (size_t)r0 * C, r0, nr, N, C);
        ref->embedding_forward(ref, o2, tok, w + (size_t)r0 * C, r0, nr, N, C);
    }
    check(memcmp(o1, o2, sizeof(float) * N * C) == 0, "embedding N=%d C=%d V=%d in %d parts: cpu == ref", N, C, V,
          parts);
    cmp("embedding: the sum of the vocabulary parts is the whole lookup", o1, whole, (size_t)N * C, 1e-6);
    float *dout = frand((size_t)N * C, 1.0f), *d0 = frand((size_t)V * C, 1.0f);
    float *d1 = fdup(d0, (size_t)V * C), *d2 = fdup(d0, (size_t)V * C), *dall = fdup(d0, (size_t)V * C);
    for (int r0 = 0; r0 < V; r0 += rows) {
        const int nr = V - r0 < rows ? V - r0 : rows;
        cpu->embedding_backward(cpu, d1 + (size_t)r0 * C, dout, tok, r0, nr, N, C);
        ref->embedding_backward(ref, d2 + (size_t)r0 * C, dout, tok, r0, nr, N, C);
    }
    cpu->embedding_backward(cpu, dall, dout, tok, 0, V, N, C);
    cmp("embedding backward by parts: cpu vs ref", d1, d2, (size_t)V * C, 1e-6);
    cmp("embedding backward by parts == whole", d1, dall, (size_t)V * C, 1e-6);
    float *d3 = fdup(dall, (size_t)V * C);
    cpu->embedding_backward(cpu, d3, dout, tok, 0, V, N, C);
    cmp_twice("embedding dw", d0, dall, d3, (size_t)V * C);
    free(tok), free(w), free(o0), free(o1), free(o2), free(whole), free(dout), free(d0), free(d1), free(d2);
    free(dall), free(d3);
}

/* Position embedding of a run of tokens [tok0, tok0 + N) of a [B, T] micro-batch (sequence-parallel slices). */
static void test_position(llm4d_backend *cpu, llm4d_backend *ref, int N, int C, int T, int64_t tok0) {
    float *wpe = frand((size_t)T * C, 1.0f);
    float *o1 = frand((size_t)N * C, 1.0f), *o2 = fdup(o1, (size_t)N * C);
    cpu->position_forward(cpu, o1, wpe, N, C, T, tok0);
    ref->position_forward(ref, o2, wpe, N, C, T, tok0);
    check(memcmp(o1, o2, sizeof(float) * N * C) == 0, "position N=%d C=%d T=%d tok0=%lld forward identical", N, C,
          T, (long long)tok0);
    float *dout = frand((size_t)N * C, 1.0f), *d0 = frand((size_t)T * C, 1.0f);
    float *d1 = fdup(d0, (size_t)T * C), *d2 = fdup(d0, (size_t)T * C);
    cpu->position_backward(cpu, d1, dout, N, C, T, tok0);
    ref->position_backward(ref, d2, dout, N, C, T, tok0);
    cmp("position backward", d1, d2, (size_t)T * C, 1e-6);
    float *d3 = fdup(d1, (size_t)T * C);
    cpu->position_backward(cpu, d3, dout, N, C, T, tok0);
    cmp_twice("position dwpe", d0, d1, d3, (size_t)T * C);
    free(wpe), free(o1), free(o2), free(dout), free(d0), free(d1), free(d2), free(d3);
}

static void test_bias(llm4d_backend *cpu, llm4d_backend *ref, int N, int C) {
    float *b = frand(C, 1.0f), *o1 = frand((size_t)N * C, 1.0f), *o2 = fdup(o1, (size_t)N * C);
    cpu->bias_forward(cpu, o1, b, N, C);
    ref->bias_forward(ref, o2, b, N, C);
    check(memcmp(o1, o2, sizeof(float) * N * C) == 0, "bias N=%d C=%d forward identical", N, C);
    float *dout = frand((size_t)N * C, 1.0f), *d0 = frand(C, 1.0f), *d1 = fdup(d0, C), *d2 = fdup(d0, C);
    cpu->bias_backward(cpu, d1, llm4d_ct32(dout), N, C);
    ref->bias_backward(ref, d2, llm4d_ct32(dout), N, C);
    cmp("bias backward", d1, d2, C, 1e-6);
    float *d3 = fdup(d1, C);
    cpu->bias_backward(cpu, d3, llm4d_ct32(dout), N, C);
    cmp_twice("bias db", d0, d1, d3, C);
    const double s1 = cpu->dot(cpu, o1, dout, (size_t)N * C), s2 = ref->dot(ref, o1, dout, (size_t)N * C);
    const double u1 = cpu->dot(cpu, o1, NULL, (size_t)N * C), u2 = ref->dot(ref, o1, NULL, (size_t)N * C);
    check(fabs(s1 - s2) <= 1e-9 * fmax(1.0, fabs(s2)) && fabs(u1 - u2) <= 1e-9 * fmax(1.0, fabs(u2)),
          "dot cpu vs ref, weighted and plain (%.9g %.9g, %.9g %.9g)", s1, s2, u1, u2);
    free(b), free(o1), free(o2), free(dout), free(d0), free(d1), free(d2), free(d3);
}

static void test_layernorm(llm4d_backend *cpu, llm4d_backend *ref, int N, int C) {
    float *x = frand((size_t)N * C, 2.0f), *w = frand(C, 1.0f), *b = frand(C, 1.0f);
    for (size_t i = 0; i < (size_t)N * C; i++) x[i] += 3.0f; /* a non-zero mean */
    float *o1 = falloc((size_t)N * C), *o2 = falloc((size_t)N * C);
    float *m1 = falloc(N), *m2 = falloc(N), *r1 = falloc(N), *r2 = falloc(N);
    cpu->layernorm_forward(cpu, llm4d_t32(o1), m1, r1, llm4d_ct32(x), w, b, N, C);
    ref->layernorm_forward(ref, llm4d_t32(o2), m2, r2, llm4d_ct32(x), w, b, N, C);
    char what[128];
    snprintf(what, sizeof what, "layernorm N=%d C=%d forward out", N, C);
    cmp(what, o1, o2, (size_t)N * C, TOL);
    cmp("layernorm forward mean", m1, m2, N, TOL);
    cmp("layernorm forward rstd", r1, r2, N, TOL);
    float *dout = frand((size_t)N * C, 1.0f);
    float *dx0 = frand((size_t)N * C, 1.0f), *dw0 = frand(C, 1.0f), *db0 = frand(C, 1.0f);
    float *dx1 = fdup(dx0, (size_t)N * C), *dw1 = fdup(dw0, C), *db1 = fdup(db0, C);
    float *dx2 = fdup(dx0, (size_t)N * C), *dw2 = fdup(dw0, C), *db2 = fdup(db0, C);
    cpu->layernorm_backward(cpu, llm4d_t32(dx1), dw1, db1, llm4d_ct32(dout), llm4d_ct32(x), w, m2, r2, N, C);
    ref->layernorm_backward(ref, llm4d_t32(dx2), dw2, db2, llm4d_ct32(dout), llm4d_ct32(x), w, m2, r2, N, C);
    snprintf(what, sizeof what, "layernorm N=%d C=%d backward dinp", N, C);
    cmp(what, dx1, dx2, (size_t)N * C, TOL);
    cmp("layernorm backward dw", dw1, dw2, C, TOL);
    cmp("layernorm backward db", db1, db2, C, TOL);
    float *dx3 = fdup(dx1, (size_t)N * C), *dw3 = fdup(dw1, C), *db3 = fdup(db1, C);
    cpu->layernorm_backward(cpu, llm4d_t32(dx3), dw3, db3, llm4d_ct32(dout), llm4d_ct32(x), w, m2, r2, N, C);
    cmp_twice("layernorm dinp", dx0, dx1, dx3, (size_t)N * C);
    cmp_twice("layernorm dw", dw0, dw1, dw3, C);
    cmp_twice("layernorm db", db0, db1, db3, C);
    free(x), free(w), free(b), free(o1), free(o2), free(m1), free(m2), free(r1), free(r2), free(dout);
    free(dx0), free(dw0), free(db0), free(dx1), free(dw1), free(db1), free(dx2), free(dw2), free(db2);
    free(dx3), free(dw3), free(db3);
}

static void test_gelu(llm4d_backend *cpu, llm4d_backend *ref, size_t n) {
    float *x = frand(n, 3.0f), *o1 = falloc(n), *o2 = falloc(n);
    x[0] = 0.0f, x[1] = 20.0f, x[2] = -20.0f, x[3] = 1e-8f; /* the clamps and the origin */
    cpu->gelu_forward(cpu, llm4d_t32(o1), llm4d_ct32(x), n);
    ref->gelu_forward(ref, llm4d_t32(o2), llm4d_ct32(x), n);
    char what[64];
    snprintf(what, sizeof what, "gelu n=%zu forward", n);
    cmp(what, o1, o2, n, TOL);
    float *dout = frand(n, 1.0f), *d0 = frand(n, 1.0f), *d1 = fdup(d0, n), *d2 = fdup(d0, n);
    cpu->gelu_backward(cpu, llm4d_t32(d1), llm4d_ct32(x), llm4d_ct32(dout), n);
    ref->gelu_backward(ref, llm4d_t32(d2), llm4d_ct32(x), llm4d_ct32(dout), n);
    cmp("gelu backward", d1, d2, n, TOL);
    float *d3 = fdup(d1, n);
    cpu->gelu_backward(cpu, llm4d_t32(d3), llm4d_ct32(x), llm4d_ct32(dout), n);
    cmp_overwrites("gelu dinp", d1, d3, n);
    free(x), free(o1), free(o2), free(dout), free(d0), free(d1), free(d2), free(d3);
    /* the derivative over [-30, 30] with unit output gradients: in the tails it is the tanh's sech^2 (tiny) times a
     * large polynomial derivative, where a clamped or cancelling tanh errs by ~1e-4 */
    const size_t m = 6001;
    float *xt = falloc(m), *g = falloc(m), *t1 = falloc(m), *t2 = falloc(m);
    for (size_t i = 0; i < m; i++) xt[i] = -30.0f + 0.01f * (float)i, g[i] = 1.0f, t1[i] = t2[i] = 0.0f;
    cpu->gelu_backward(cpu, llm4d_t32(t1), llm4d_ct32(xt), llm4d_ct32(g), m);
    ref->gelu_backward(ref, llm4d_t32(t2), llm4d_ct32(xt), llm4d_ct32(g), m);
    cmp("gelu derivative on [-30, 30]", t1, t2, m, TOL);
    free(xt), free(g), free(t1), free(t2);
}

/* qkv [B, T, (NH + 2 NKV) HS] (backend.h): query head h's q at column h HS, its kv head's k and v at C + (h / grp) HS
 * and C + NKV HS + (h / grp) HS, grp = NH / NKV query heads per kv head (grouped-query attention; NKV = NH: GPT-2) */
static void test_attention(llm4d_backend *cpu, llm4d_backend *ref, llm4d_attn_shape s, float p, float qscale) {
    const int B = s.B, T = s.T, NH = s.NH, HS = s.HS, C = NH * HS, NKV = llm4d_attn_nkv(s), grp = NH / NKV;
    const size_t C3 = (size_t)C + 2 * (size_t)NKV * HS, kc = (size_t)C, vc = (size_t)C + (size_t)NKV * HS;
    int64_t sids[8] = {3, 0, 17, 5, 1, 2, 9, 4};
    llm4d_dropout drop = {p, 77, llm4d_rng_stream(LLM4D_RNG_DROPOUT, 2, LLM4D_DROP_ATTN_PROBS, 5), sids, T, 0, NULL};
    char tag[160];
    snprintf(tag, sizeof tag, "attention B=%d T=%d NH=%d NKV=%d HS=%d head0=%d/%d p=%.1f qkv scale %g", B, T, NH,
             NKV, HS, s.head0, s.NH_total, p, qscale);
    const size_t nqkv = (size_t)B * T * C3, nout = (size_t)B * T * C, nlse = (size_t)B * NH * T;
    float *qkv = frand(nqkv, qscale);
    float *o1 = frand(nout, 1.0f), *o2 = falloc(nout), *l1 = frand(nlse, 1.0f), *l2 = falloc(nlse);
    cpu->attention_forward(cpu, llm4d_t32(o1), l1, llm4d_ct32(qkv), s, &drop);
    ref->attention_forward(ref, llm4d_t32(o2), l2, llm4d_ct32(qkv), s, &drop);
    char what[256];
    snprintf(what, sizeof what, "%s forward out", tag);
    cmp(what, o1, o2, nout, TOL);
    snprintf(what, sizeof what, "%s forward lse", tag);
    cmp(what, l1, l2, nlse, TOL);
    /* out rebuilt here from the definition: P = exp(scale q.k - lse) must be causal rows summing to 1 (this pins
     * lse's meaning), and out = sum_t2 P mult v with the mask at backend.h's position formula. lse is fp32, so P
     * rebuilt from it carries lse's rounding, |lse| 2^-24 relative: the tolerances allow 4 times that. */
    float *o3 = falloc(nout);
    size_t ndrop = 0;
    double worst = 0.0, lmax = 0.0;
    for (size_t i = 0; i < nlse; i++) lmax = fmax(lmax, fabs(l1[i]));
    const double ltol = 4.0 * lmax * 0x1p-24;
    const double scale = 1.0 / sqrt((double)HS);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t1 = 0; t1 < T; t1++) {
                double sum = 0.0;
                for (int t2 = 0; t2 <= t1; t2++) {
                    double d = 0.0;
                    for (int i = 0; i < HS; i++)
                        d += (double)qkv[((size_t)b * T + t1) * C3 + h * HS + i] *
                             qkv[((size_t)b * T + t2) * C3 + kc + h / grp * HS + i];
                    const double a = exp(d * scale - l1[((size_t)b * NH + h) * T + t1]);
                    sum += a;
                    uint64_t pos = (((uint64_t)sids[b] * s.NH_total + s.head0 + h) * T + t1) * T + t2;
                    uint32_t w[4];
                    llm4d_rng_block(drop.seed, drop.stream, pos >> 2, w);
                    float m = p == 0.0f ? 1.0f : llm4d_rng_u01(w[pos & 3]) >= p ? 1.0f / (1.0f - p) : 0.0f;
                    ndrop += m == 0.0f;
                    for (int i = 0; i < HS; i++)
                        o3[((size_t)b * T + t1) * C + h * HS + i] +=
                            (float)(a * m * qkv[((size_t)b * T + t2) * C3 + vc + h / grp * HS + i]);
                }
                worst = fmax(worst, fabs(sum - 1.0));
            }
    check(worst < 1e-5 + ltol, "%s exp(S - lse) rows sum to 1 (err %.1e, tol %.1e)", tag, worst, 1e-5 + ltol);
    snprintf(what, sizeof what, "%s forward out vs P from lse and mask at backend.h positions (%zu dropped)", tag,
             ndrop);
    cmp(what, o1, o3, nout, TOL + ltol);
    const double expect_drops = p * B * NH * T * (T + 1) / 2.0;
    if (expect_drops >= 20) check(ndrop > 0, "%s some probabilities dropped", tag);
    free(o3);

    float *dout = frand(nout, 1.0f), *d0 = frand(nqkv, 1.0f), *d1 = fdup(d0, nqkv), *d2 = fdup(d0, nqkv);
    cpu->attention_backward(cpu, llm4d_t32(d1), llm4d_ct32(dout), llm4d_ct32(o1), llm4d_ct32(qkv), l1, s, &drop);
    ref->attention_backward(ref, llm4d_t32(d2), llm4d_ct32(dout), llm4d_ct32(o2), llm4d_ct32(qkv), l2, s, &drop);
    snprintf(what, sizeof what, "%s backward dqkv", tag);
    cmp(what, d1, d2, nqkv, TOL);
    float *d3 = fdup(d1, nqkv);
    cpu->attention_backward(cpu, llm4d_t32(d3), llm4d_ct32(dout), llm4d_ct32(o1), llm4d_ct32(qkv), l1, s, &drop);
    snprintf(what, sizeof what, "%s dqkv", tag);
    cmp_overwrites(what, d1, d3, nqkv);
    if (p > 0.0f) {
        /* the mask kept as bits (llm4d_dropout.bits): forward stores the draws at backend.h's positions (this test's
         * own Philox calls), gives the same output, and backward reading them gives the same gradient, bit for bit */
        const size_t wr = LLM4D_MASK_WORDS(T), nbits = (size_t)B * NH * T * wr;
        uint32_t *bits = malloc(nbits * sizeof *bits);
        for (size_t i = 0; i < nbits; i++) bits[i] = 0xA5A5A5A5u; /* garbage the kernel must overwrite */
        llm4d_dropout kept = drop;
        kept.bits = bits;
        float *o4 = falloc(nout), *l4 = falloc(nlse), *d4 = fdup(d0, nqkv);
        cpu->attention_forward(cpu, llm4d_t32(o4), l4, llm4d_ct32(qkv), s, &kept);
        size_t wrong = 0;
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++)
                for (int t1 = 0; t1 < T; t1++)
                    for (int t2 = 0; t2 <= t1; t2++) {
                        const uint64_t pos = (((uint64_t)sids[b] * s.NH_total + s.head0 + h) * T + t1) * T + t2;
                        uint32_t w[4];
                        llm4d_rng_block(drop.seed, drop.stream, pos >> 2, w);
                        const int keep = llm4d_rng_u01(w[pos & 3]) >= p;
                        const int bit = bits[(((size_t)b * NH + h) * T + t1) * wr + (size_t)t2 / 32] >> (t2 % 32) & 1u;
                        wrong += bit != keep;
                    }
        check(wrong == 0, "%s mask bits stored by forward = the draws at backend.h's positions (%zu wrong)", tag,
              wrong);
        check(memcmp(o4, o1, nout * sizeof(float)) == 0 && memcmp(l4, l1, nlse * sizeof(float)) == 0,
              "%s forward keeping the bits: the same output and lse, bit for bit", tag);
        cpu->attention_backward(cpu, llm4d_t32(d4), llm4d_ct32(dout), llm4d_ct32(o1), llm4d_ct32(qkv), l1, s, &kept);
        check(memcmp(d4, d1, nqkv * sizeof(float)) == 0, "%s backward reading the bits = drawing the mask again, bit "
              "for bit", tag);
        free(bits), free(o4), free(l4), free(d4);
    }
    free(qkv), free(o1), free(o2), free(l1), free(l2), free(dout), free(d0), free(d1), free(d2), free(d3);
}

/* Low-precision attention (bf16 or fp16 GEMM operands) against the fp32 reference, per element, with a bound
 * derived from the format (attn_bound.h: first-order propagation of each rounding through the algorithm, times 1.25
 * for the second-order terms). The check also requires a non-zero error (the low-precision path is really taken)
 * and bit-identical fp32 results after switching back. */
static void test_attention_lowp(llm4d_backend *cpu, llm4d_backend *ref, llm4d_attn_shape s, float p,
                                llm4d_precision prec, const char *name) {
    const lp_format fm = prec == LLM4D_PREC_BF16 ? (lp_format){1.0 / 256, 0.0} : (lp_format){1.0 / 2048, 0x1p-25};
    const int B = s.B, T = s.T, NH = s.NH, HS = s.HS, C = NH * HS, C3 = C + 2 * llm4d_attn_nkv(s) * HS;
    int64_t sids[4] = {6, 2, 0, 11};
    llm4d_dropout drop = {p, 5, llm4d_rng_stream(LLM4D_RNG_DROPOUT, 4, LLM4D_DROP_ATTN_PROBS, 1), sids, T, 0, NULL};
    char tag[160];
    snprintf(tag, sizeof tag, "%s attention B=%d T=%d NH=%d NKV=%d HS=%d head0=%d/%d p=%.1f", name, B, T, NH,
             llm4d_attn_nkv(s), HS, s.head0, s.NH_total, p);
    const size_t nqkv = (size_t)B * T * C3, nout = (size_t)B * T * C, nlse = (size_t)B * NH * T;
    float *qkv = frand(nqkv, 1.0f), *dout = frand(nout, 1.0f);
    float *o32 = falloc(nout), *l32 = falloc(nlse), *olp = falloc(nout), *llp = falloc(nlse), *oref = falloc(nout);
    float *lref = falloc(nlse), *d32 = falloc(nqkv), *dlp = falloc(nqkv), *dref = falloc(nqkv);
    cpu->attention_forward(cpu, llm4d_t32(o32), l32, llm4d_ct32(qkv), s, &drop);
    cpu->attention_backward(cpu, llm4d_t32(d32), llm4d_ct32(dout), llm4d_ct32(o32), llm4d_ct32(qkv), l32, s, &drop);
    ref->attention_forward(ref, llm4d_t32(oref), lref, llm4d_ct32(qkv), s, &drop);
    ref->attention_backward(ref, llm4d_t32(dref), llm4d_ct32(dout), llm4d_ct32(oref), llm4d_ct32(qkv), lref, s, &drop);
    llm4d_err err = {0};
    if (cpu->set_precision(cpu, prec, &err) != LLM4D_OK) {
        check(0, "%s: %s", tag, err.msg);
        return;
    }
    cpu->attention_forward(cpu, llm4d_t32(olp), llp, llm4d_ct32(qkv), s, &drop);
    cpu->attention_backward(cpu, llm4d_t32(dlp), llm4d_ct32(dout), llm4d_ct32(olp), llm4d_ct32(qkv), llp, s, &drop);
    cpu->set_precision(cpu, LLM4D_PREC_FP32, &err);
    /* bounds and magnitudes, accumulated per element */
    double *bo = calloc(nout, sizeof(double)), *bl = calloc(nlse, sizeof(double));
    double *bd = calloc(nqkv, sizeof(double)), *md = calloc(nqkv, sizeof(double));
    if (!bo || !bl || !bd || !md) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    attn_bounds(qkv, dout, oref, s, &drop, fm, (lp_format){0.0, 0.0}, bo, bl, bd, md);
    double ro = 0, rl = 0, rd = 0, eo = 0, el = 0, ed = 0;
    for (size_t i = 0; i < nout; i++) {
        const double e = fabs((double)olp[i] - oref[i]);
        eo = fmax(eo, e), ro = fmax(ro, e / (1.25 * bo[i] + 1e-30));
    }
    for (size_t i = 0; i < nlse; i++) {
        const double e = fabs((double)llp[i] - lref[i]);
        el = fmax(el, e), rl = fmax(rl, e / (1.25 * bl[i] + 1e-30));
    }
    for (size_t i = 0; i < nqkv; i++) {
        const double e = fabs((double)dlp[i] - dref[i]);
        ed = fmax(ed, e), rd = fmax(rd, e / (1.25 * (bd[i] + 1e-5 * md[i]) + 1e-30));
    }
    check(ro <= 1.0 && eo > 0, "%s forward out: worst err/bound %.3f, max err %.2e", tag, ro, eo);
    check(rl <= 1.0 && el > 0, "%s forward lse: worst err/bound %.3f, max err %.2e", tag, rl, el);
    check(rd <= 1.0 && ed > 0, "%s backward dqkv: worst err/bound %.3f, max err %.2e", tag, rd, ed);
    float *o4 = falloc(nout), *l4 = falloc(nlse), *d4 = falloc(nqkv);
    cpu->attention_forward(cpu, llm4d_t32(o4), l4, llm4d_ct32(qkv), s, &drop);
    cpu->attention_backward(cpu, llm4d_t32(d4), llm4d_ct32(dout), llm4d_ct32(o4), llm4d_ct32(qkv), l4, s, &drop);
    check(!memcmp(o4, o32, nout * sizeof(float)) && !memcmp(l4, l32, nlse * sizeof(float)) &&
              !memcmp(d4, d32, nqkv * sizeof(float)),
          "%s: back to fp32, bit-identical to the fp32 run before", tag);
    free(qkv), free(dout), free(o32), free(l32), free(olp), free(llp), free(oref), free(lref), free(d32), free(dlp);
    free(dref), free(bo), free(bl), free(bd), free(md), free(o4), free(l4);
    free(d4);
}

/* the mask as core/rng.h and backend.h define it */
static int keep_at(const llm4d_dropout *d, uint64_t pos) {
    uint32_t w[4];
    llm4d_rng_block(d->seed, d->stream, pos >> 2, w);
    return llm4d_rng_u01(w[pos & 3]) >= d->p;
}

/* An [N, C] activation of tokens [tok0, tok0 + N) of a micro-batch of rows of T tokens (llm4d_dropout). */
static void test_dropout(llm4d_backend *cpu, llm4d_backend *ref, int N, int C, int T, int64_t tok0, float p) {
    int64_t sids[8] = {11, 2, 40, 3, 7, 0, 25, 6};
    llm4d_dropout drop = {p, 99, llm4d_rng_stream(LLM4D_RNG_DROPOUT, 1, LLM4D_DROP_MLP_OUT, 3), sids, T, tok0, NULL};
    const size_t n = (size_t)N * C;
    char tag[96];
    snprintf(tag, sizeof tag, "dropout N=%d C=%d T=%d tok0=%lld p=%.1f", N, C, T, (long long)tok0, p);
    char what[160];
    float *x = frand(n, 1.0f), *res = frand(n, 1.0f), *o1 = falloc(n), *o2 = falloc(n);
    cpu->dropout_forward(cpu, llm4d_t32(o1), llm4d_ct32(x), N, C, &drop);
    ref->dropout_forward(ref, llm4d_t32(o2), llm4d_ct32(x), N, C, &drop);
    snprintf(what, sizeof what, "%s forward identical to ref", tag);
    check(memcmp(o1, o2, n * sizeof(float)) == 0, "%s", what);
    /* against the definition: element (i, c) is token tok0 + i, at (sample, t) */
    int bad = 0;
    for (int i = 0; i < N; i++)
        for (int c = 0; c < C; c++) {
            const int64_t tok = tok0 + i;
            const uint64_t pos = ((uint64_t)sids[tok / T] * T + (uint64_t)(tok % T)) * C + c;
            const size_t k = (size_t)i * C + c;
            float want = (p == 0.0f || keep_at(&drop, pos)) ? x[k] * (1.0f / (1.0f - p)) : 0.0f;
            if (o1[k] != want) bad++;
        }
    check(bad == 0, "%s forward matches rng.h mask definition (%d mismatches)", tag, bad);
    float *o3 = fdup(x, n); /* in place */
    cpu->dropout_forward(cpu, llm4d_t32(o3), llm4d_ct32(o3), N, C, &drop);
    check(memcmp(o1, o3, n * sizeof(float)) == 0, "%s forward in place", tag);
    /* a slice of the tokens (sequence parallel) gets the slice of the whole activation's mask */
    if (N > 2) {
        const int half = N / 2 + 1;
        llm4d_dropout d2 = drop;
        d2.tok0 = tok0 + half;
        float *o4 = falloc(n);
        cpu->dropout_forward(cpu, llm4d_t32(o4), llm4d_ct32(x), half, C, &drop);
        cpu->dropout_forward(cpu, llm4d_t32(o4 + (size_t)half * C), llm4d_ct32(x + (size_t)half * C), N - half, C, &d2);
        check(memcmp(o1, o4, n * sizeof(float)) == 0, "%s: two token slices == the whole", tag);
        free(o4);
    }

    float *dout = frand(n, 1.0f), *d0 = frand(n, 1.0f), *d1 = fdup(d0, n), *d2 = fdup(d0, n);
    cpu->dropout_backward(cpu, llm4d_t32(d1), llm4d_ct32(dout), N, C, &drop);
    ref->dropout_backward(ref, llm4d_t32(d2), llm4d_ct32(dout), N, C, &drop);
    snprintf(what, sizeof what, "%s backward", tag);
    cmp(what, d1, d2, n, 1e-6);
    float *d3 = fdup(d1, n);
    cpu->dropout_backward(cpu, llm4d_t32(d3), llm4d_ct32(dout), N, C, &drop);
    cmp_twice(what, d0, d1, d3, n);

    cpu->dropout_add_forward(cpu, llm4d_t32(o1), llm4d_ct32(res), llm4d_ct32(x), N, C, &drop);
    ref->dropout_add_forward(ref, llm4d_t32(o2), llm4d_ct32(res), llm4d_ct32(x), N, C, &drop);
    snprintf(what, sizeof what, "%s add forward", tag);
    cmp(what, o1, o2, n, 1e-6);
    float *e0 = frand(n, 1.0f), *e1 = fdup(e0, n), *e2 = fdup(e0, n), *f1 = fdup(d0, n), *f2 = fdup(d0, n);
    cpu->dropout_add_backward(cpu, llm4d_t32(e1), llm4d_t32(f1), llm4d_ct32(dout), N, C, &drop);
    ref->dropout_add_backward(ref, llm4d_t32(e2), llm4d_t32(f2), llm4d_ct32(dout), N, C, &drop);
    snprintf(what, sizeof what, "%s add backward dres", tag);
    cmp(what, e1, e2, n, 1e-6);
    snprintf(what, sizeof what, "%s add backward dx", tag);
    cmp(what, f1, f2, n, 1e-6);
    float *e3 = fdup(e1, n), *f3 = fdup(f1, n);
    cpu->dropout_add_backward(cpu, llm4d_t32(e3), llm4d_t32(f3), llm4d_ct32(dout), N, C, &drop);
    snprintf(what, sizeof what, "%s add dres", tag);
    cmp_overwrites(what, e1, e3, n);
    snprintf(what, sizeof what, "%s add dx", tag);
    cmp_overwrites(what, f1, f3, n);
    free(x), free(res), free(o1), free(o2), free(o3), free(dout), free(d0), free(d1), free(d2), free(d3);
    free(e0), free(e1), free(e2), free(e3), free(f1), free(f2), free(f3);
}

static void test_dropout_rate(llm4d_backend *cpu, float p) {
    const int N = 4 * 250003, T = 250003, C = 1;
    const size_t n = (size_t)N * C;
    int64_t sids[4] = {0, 1, 2, 3};
    llm4d_dropout drop = {p, 5, llm4d_rng_stream(LLM4D_RNG_DROPOUT, 0, LLM4D_DROP_EMBED, 1), sids, T, 0, NULL};
    float *x = falloc(n);
    for (size_t i = 0; i < n; i++) x[i] = 1.0f;
    cpu->dropout_forward(cpu, llm4d_t32(x), llm4d_ct32(x), N, C, &drop);
    size_t dropped = 0, badval = 0;
    for (size_t i = 0; i < n; i++) {
        if (x[i] == 0.0f)
            dropped++;
        else if (x[i] != 1.0f / (1.0f - p))
            badval++;
    }
    double frac = (double)dropped / n, sigma = sqrt(p * (1 - p) / n);
    check(fabs(frac - p) < 5 * sigma && badval == 0,
          "dropout p=%.2f drop fraction %.5f within 5 sigma (%.5f); kept values = 1/(1-p)", p, frac, 5 * sigma);
    /* a different step must give a different mask */
    llm4d_dropout d2 = drop;
    d2.stream = llm4d_rng_stream(LLM4D_RNG_DROPOUT, 0, LLM4D_DROP_EMBED, 2);
    float *y = falloc(n);
    for (size_t i = 0; i < n; i++) y[i] = 1.0f;
    cpu->dropout_forward(cpu, llm4d_t32(y), llm4d_ct32(y), N, C, &d2);
    size_t differ = 0;
    for (size_t i = 0; i < n; i++) differ += (x[i] == 0.0f) != (y[i] == 0.0f);
    check(differ > n * p * (1 - p), "dropout masks of two steps differ (%zu of %zu)", differ, n);
    free(x), free(y);
}

/* Softmax cross-entropy: the whole vocabulary in one part (cpu vs ref), then split into `parts` column parts
 * combined two ways: online over the parts (merge, as ZeRO's vocabulary blocks do) and as separate ranks would
 * (each part's statistics alone, the max taken over parts, rescaled, the sums added: the vocabulary-parallel
 * combination); both must give the whole vocabulary's losses and, part by part, its gradient columns. */
static void test_crossentropy(llm4d_backend *cpu, llm4d_backend *ref, int N, int V, int Vp, int parts) {
    char tag[96];
    snprintf(tag, sizeof tag, "crossentropy N=%d V=%d Vp=%d", N, V, Vp);
    char what[200];
    const size_t n = (size_t)N * Vp;
    float *logits = frand(n, 3.0f);
    for (int i = 0; i < N; i++)
        for (int j = V; j < Vp; j++) logits[(size_t)i * Vp + j] = 100.0f; /* padding must be ignored */
    int32_t *tg = malloc(sizeof(int32_t) * N);
    float *dloss = falloc(N);
    for (int i = 0; i < N; i++) {
        tg[i] = (int32_t)((i * 104729u + 7u) % (unsigned)V);
        dloss[i] = (i % 3 == 0) ? 0.0f : 1.0f / (float)(i + 1); /* a loss mask / count */
    }
    tg[0] = V - 1;
    float *st1 = falloc(3 * (size_t)N), *st2 = falloc(3 * (size_t)N);
    float *l1 = falloc(N), *l2 = falloc(N), *g1 = frand(n, 1.0f), *g2 = falloc(n);
    cpu->xent_forward(cpu, st1, llm4d_ct32(logits), tg, N, Vp, 0, V, 0);
    ref->xent_forward(ref, st2, llm4d_ct32(logits), tg, N, Vp, 0, V, 0);
    cpu->xent_backward(cpu, l1, llm4d_t32(g1), llm4d_ct32(logits), st1, tg, dloss, N, Vp, 0, V);
    ref->xent_backward(ref, l2, llm4d_t32(g2), llm4d_ct32(logits), st2, tg, dloss, N, Vp, 0, V);
    snprintf(what, sizeof what, "%s losses", tag);
    cmp(what, l1, l2, N, TOL);
    snprintf(what, sizeof what, "%s dlogits", tag);
    cmp(what, g1, g2, n, TOL);
    int padzero = 1;
    double rowsum = 0.0;
    for (int i = 0; i < N; i++) {
        double s = 0.0;
        for (int j = 0; j < Vp; j++) {
            if (j >= V && g1[(size_t)i * Vp + j] != 0.0f) padzero = 0;
            s += g1[(size_t)i * Vp + j];
        }
        rowsum = fmax(rowsum, fabs(s));
    }
    check(padzero && rowsum < 1e-5, "%s padded columns get zero gradient, rows sum to 0 (%.1e)", tag, rowsum);
    /* loss only */
    float *l3 = falloc(N);
    cpu->xent_backward(cpu, l3, llm4d_t32(NULL), llm4d_ct32(logits), st1, tg, dloss, N, Vp, 0, V);
    snprintf(what, sizeof what, "%s loss only (dlogits NULL)", tag);
    cmp(what, l3, l2, N, TOL);
    /* in place: dlogits == logits */
    float *al = fdup(logits, n);
    cpu->xent_backward(cpu, l3, llm4d_t32(al), llm4d_ct32(al), st1, tg, dloss, N, Vp, 0, V);
    snprintf(what, sizeof what, "%s aliased dlogits == logits", tag);
    check(relerr(l3, l2, N) <= TOL && relerr(al, g2, n) <= TOL, "%s (err %.1e, %.1e)", what, relerr(l3, l2, N),
          relerr(al, g2, n));

    /* vocabulary parts: columns [v0, v0 + w) copied out as a part's own [N, w] logits */
    const int w = (Vp + parts - 1) / parts;
    float *part = falloc((size_t)N * w), *gpart = falloc((size_t)N * w);
    float *on = falloc(3 * (size_t)N), *rk = falloc(3 * (size_t)parts * N), *gmax = falloc(N), *sum = falloc(3 * (size_t)N);
    double worst_on = 0, worst_rk = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int k = 0; k < parts; k++) {
            const int v0 = k * w, wk = Vp - v0 < w ? Vp - v0 : w;
            for (int i = 0; i < N; i++) memcpy(part + (size_t)i * wk, logits + (size_t)i * Vp + v0, wk * sizeof(float));
            if (pass == 0) { /* statistics: online over the parts, and per part as a rank would */
                cpu->xent_forward(cpu, on, llm4d_ct32(part), tg, N, wk, v0, V, k > 0);
                cpu->xent_forward(cpu, rk + 3 * (size_t)k * N, llm4d_ct32(part), tg, N, wk, v0, V, 0);
                if (k < parts - 1) continue;
                /* the ranks' combination: MAX of m, rescale, SUM of (s, y), in part order */
                xent_combine_ranks(cpu, rk, parts, N, gmax, sum);
                cpu->xent_backward(cpu, l3, llm4d_t32(NULL), llm4d_ct32(logits), on, tg, dloss, N, Vp, 0, V);
                worst_on = relerr(l3, l2, N);
                cpu->xent_backward(cpu, l3, llm4d_t32(NULL), llm4d_ct32(logits), sum, tg, dloss, N, Vp, 0, V);
                worst_rk = relerr(l3, l2, N);
                continue;
            }
            /* gradients, part by part, from the combined statistics */
            cpu->xent_backward(cpu, NULL, llm4d_t32(gpart), llm4d_ct32(part), sum, tg, dloss, N, wk, v0, V);
            for (int i = 0; i < N; i++)
                for (int j = 0; j < wk; j++)
                    worst_rk = fmax(worst_rk, fabs(gpart[(size_t)i * wk + j] - g2[(size_t)i * Vp + v0 + j]));
        }
    check(worst_on <= TOL, "%s in %d parts, online (merged) statistics: losses rel err %.1e", tag, parts, worst_on);
    check(worst_rk <= TOL, "%s in %d parts combined as ranks (MAX, rescale, SUM): losses and gradient columns, "
          "err %.1e", tag, parts, worst_rk);
    free(logits), free(tg), free(dloss), free(l1), free(l2), free(l3), free(g1), free(g2), free(al), free(st1);
    free(st2), free(part), free(gpart), free(on), free(rk), free(gmax), free(sum);
}

static void test_adamw(llm4d_backend *be, size_t n) {
    float *p = frand(n, 1.0f), *m = falloc(n), *v = falloc(n);
    double *pd = malloc(n * sizeof(double)), *md = calloc(n, sizeof(double)), *vd = calloc(n, sizeof(double));
    for (size_t i = 0; i < n; i++) pd[i] = p[i];
    const float lr = 1e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.5f;
    float *g = falloc(n);
    double worst = 0.0;
    for (int t = 1; t <= 3; t++) {
        fill(g, n, 1.0f);
        g[0] = 0.0f; /* v = 0 at step 1: the eps branch */
        be->adamw(be, p, g, m, v, n, lr, b1, b2, eps, wd, t, gs, 0);
        double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
        for (size_t i = 0; i < n; i++) {
            double gg = (double)g[i] * gs;
            pd[i] -= (double)lr * wd * pd[i];
            md[i] = b1 * md[i] + (1.0 - b1) * gg;
            vd[i] = b2 * vd[i] + (1.0 - b2) * gg * gg;
            pd[i] -= lr * sqrt(bc2) / bc1 * md[i] / (sqrt(vd[i]) + eps * sqrt(bc2));
        }
    }
    for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs(p[i] - pd[i]) / fmax(fabs(pd[i]), 1e-3));
    check(worst < 1e-5, "adamw (%s) n=%zu 3 steps vs double loop: max rel err %.2e", be->name, n, worst);
    free(p), free(m), free(v), free(pd), free(md), free(vd), free(g);
}

static void test_reductions(llm4d_backend *cpu, llm4d_backend *ref) {
    const size_t n = 3000017;
    float *x = frand(n, 1.0f);
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    double s1 = cpu->sumsq(cpu, x, n);
    omp_set_num_threads(2);
    double s2 = cpu->sumsq(cpu, x, n);
    omp_set_num_threads(3);
    double s3 = cpu->sumsq(cpu, x, n);
    omp_set_num_threads(saved);
    double sr = ref->sumsq(ref, x, n);
    check(memcmp(&s1, &s2, sizeof s1) == 0 && memcmp(&s1, &s3, sizeof s1) == 0,
          "sumsq bit-identical with 1, 2, 3 threads (%.17g %.17g %.17g)", s1, s2, s3);
    check(fabs(s1 - sr) <= 1e-12 * sr, "sumsq cpu vs ref (%.17g vs %.17g)", s1, sr);
    check(cpu->sumsq(cpu, x, 0) == 0.0 && cpu->sumsq(cpu, x, 1) == (double)x[0] * x[0], "sumsq n=0 and n=1");

    /* the bias gradient's column sums (plain, and in bf16 fused into the output gradient's conversion) do not
     * depend on the thread count either: 1001 rows x 2997 columns */
    for (int lowp = 0; lowp < 2; lowp++) {
        llm4d_err err = {0};
        if (lowp && cpu->set_precision(cpu, LLM4D_PREC_BF16, &err)) {
            check(0, "bf16 on this CPU: %s", err.msg);
            continue;
        }
        const int R = 1001, K = 2997;
        float *db[3], *w = frand(K, 0.1f), *dx = falloc(R);
        for (int t = 0; t < 3; t++) {
            db[t] = falloc(K);
            memset(db[t], 0, K * sizeof(float));
            omp_set_num_threads(t + 1);
            /* in low precision the bias gradient is fused with dout's conversion */
            if (lowp)
                cpu->linear_backward(cpu, llm4d_t32(dx), LLM4D_WRITE, NULL, db[t], llm4d_ct32(x), llm4d_ct32(x), w,
                                     R, 1, K);
            else cpu->bias_backward(cpu, db[t], llm4d_ct32(x), R, K);
        }
        omp_set_num_threads(saved);
        if (lowp) cpu->set_precision(cpu, LLM4D_PREC_FP32, &err);
        check(memcmp(db[0], db[1], K * sizeof(float)) == 0 && memcmp(db[0], db[2], K * sizeof(float)) == 0,
              "bias gradient%s bit-identical with 1, 2, 3 threads", lowp ? " (bf16, fused)" : "");
        for (int t = 0; t < 3; t++) free(db[t]);
        free(w), free(dx);
    }

    float *y1 = fdup(x, n), *y2 = fdup(x, n);
    cpu->scale(cpu, y1, 0.37f, n);
    ref->scale(ref, y2, 0.37f, n);
    check(memcmp(y1, y2, n * sizeof(float)) == 0, "scale identical to ref");
    cpu->copy(cpu, y1, x, n * sizeof(float));
    check(memcmp(y1, x, n * sizeof(float)) == 0, "copy");
    cpu->zero(cpu, y1, n * sizeof(float));
    int allz = 1;
    for (size_t i = 0; i < n; i++) allz &= y1[i] == 0.0f;
    check(allz, "zero");
    llm4d_mem mem = {0};
    float *a = cpu->alloc(cpu, &mem, LLM4D_MEM_ACTIVATIONS, 1000 * sizeof(float));
    int az = a != NULL && mem.bytes[LLM4D_MEM_ACTIVATIONS] == 1000 * sizeof(float);
    for (int i = 0; a && i < 1000; i++) az &= a[i] == 0.0f;
    cpu->free(cpu, &mem, LLM4D_MEM_ACTIVATIONS, a, 1000 * sizeof(float));
    check(az && mem.bytes[LLM4D_MEM_ACTIVATIONS] == 0, "alloc zeroed and accounted, free unaccounts");

    /* bf16 gradient payloads: rounding to nearest even (ties included), NaN kept a NaN, and back (= and +=) */
    x[0] = 1.0f + 0x1p-8f;              /* a tie: rounds down to the even 1.0 */
    x[1] = 1.0f + 0x1p-7f + 0x1p-8f;    /* a tie: rounds up to the even 1 + 2^-6 */
    x[2] = NAN, x[3] = -INFINITY, x[4] = 0x1.fffffep127f; /* the largest float rounds to inf */
    uint16_t *h = malloc(n * 2), *hr = malloc(n * 2);
    cpu->to_bf16(cpu, h, x, n);
    ref->to_bf16(ref, hr, x, n);
    int same = memcmp(h, hr, n * 2) == 0;
    for (size_t i = 0; i < n; i++) same &= h[i] == llm4d_bf16_from_f32(x[i]);
    check(same && h[0] == 0x3f80 && h[1] == 0x3f82 && (h[2] & 0x7fc0) == 0x7fc0 && h[3] == 0xff80 && h[4] == 0x7f80,
          "to_bf16 = core/bf16.h's rounding (ties to even, NaN quiet, overflow to inf), cpu and ref");
    memcpy(y1, x, n * sizeof(float));
    cpu->from_bf16(cpu, y1, h, n, LLM4D_ADD);
    cpu->from_bf16(cpu, y2, h, n, LLM4D_WRITE);
    same = 1;
    for (size_t i = 5; i < n; i++) same &= y1[i] == x[i] + llm4d_bf16_to_f32(h[i]) && y2[i] == llm4d_bf16_to_f32(h[i]);
    check(same, "from_bf16: written and added");
    free(h), free(hr);
    free(x), free(y1), free(y2);
}

static void test_dnnl_cache(void) {
    llm4d_dnnl *d;
    llm4d_err err = {0};
    if (llm4d_dnnl_create(&d, &err) != LLM4D_OK) {
        check(0, "oneDNN context: %s", err.msg);
        return;
    }
    float a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {1, 0, 0, 1, 1, 1}, c[4] = {0}, bias[2] = {10, 20};
    /* [2,3] x [3,2] */
    llm4d_dnnl_mm mm = llm4d_dnnl_mm_2d(2, 2, 3, 0, 3, 0, 2, 2, 0);
    llm4d_dnnl_matmul(d, &mm, a, b, NULL, c);
    llm4d_dnnl_matmul(d, &mm, a, b, NULL, c);
    int n1 = llm4d_dnnl_cache_size(d);
    check(c[0] == 4 && c[1] == 5 && c[2] == 10 && c[3] == 11 && n1 == 1, "dnnl matmul 2x3x2, cached once (%d)", n1);
    mm.accumulate = 1;
    mm.has_bias = 1;
    mm.alpha = 2.0f;
    llm4d_dnnl_matmul(d, &mm, a, b, bias, c); /* c += 2 (ab + bias) */
    check(c[0] == 4 + 2 * (4 + 10) && c[3] == 11 + 2 * (11 + 20) && llm4d_dnnl_cache_size(d) == 2,
          "dnnl matmul accumulate + alpha + bias (%g %g)", c[0], c[3]);
    llm4d_dnnl_destroy(d);
}

int main(void) {
    llm4d_backend *cpu, *ref;
    if (!backend_pair_open(&cpu, &ref)) return 1;
    test_dnnl_cache();
    test_linear(cpu, ref, 1, 1, 1, 1, LLM4D_ACT_NONE);
    test_linear(cpu, ref, 37, 50, 23, 1, LLM4D_ACT_NONE);
    test_linear(cpu, ref, 136, 64, 200, 0, LLM4D_ACT_NONE);
    test_linear(cpu, ref, 257, 192, 515, 1, LLM4D_ACT_NONE);
    test_linear(cpu, ref, 2048, 40, 96, 1, LLM4D_ACT_NONE);
    test_linear(cpu, ref, 37, 50, 23, 1, LLM4D_ACT_GELU);
    test_linear(cpu, ref, 257, 4100, 65, 1, LLM4D_ACT_GELU); /* more elements than one conversion task (4096) */
    /* few tokens and a row stride of a multiple of 2 KiB: on AVX2 the input gradient goes through blocks of the
     * transposed weight (cpu.c dinp_by_blocks): one block with ragged 8 x 8 tiles (OC = 37), two blocks (a 4 MiB
     * block holds 1496 columns of 701 rows), three blocks of 688, 688 and 672 columns */
    test_linear(cpu, ref, 60, 1024, 37, 1, LLM4D_ACT_NONE);
    test_linear(cpu, ref, 30, 1536, 701, 0, LLM4D_ACT_GELU);
    test_linear(cpu, ref, 20, 2048, 1500, 1, LLM4D_ACT_NONE);
    /* few tokens and a wide output: on AVX2 the forward runs in blocks of 2048 output columns (cpu.c), the last
     * one partial */
    test_linear(cpu, ref, 24, 40, 5000, 1, LLM4D_ACT_GELU);
    test_embedding(cpu, ref, 51, 45, 11, 1);
    test_embedding(cpu, ref, 128, 130, 300, 3);
    test_position(cpu, ref, 51, 45, 17, 0);
    test_position(cpu, ref, 40, 130, 64, 88);
    test_bias(cpu, ref, 37, 131);
    test_bias(cpu, ref, 300, 64);
    test_layernorm(cpu, ref, 1, 7);
    test_layernorm(cpu, ref, 37, 131);
    test_layernorm(cpu, ref, 64, 768);
    test_gelu(cpu, ref, 10007);
    /* the last NKV (0: NH) makes grouped-query attention: 4 query heads on 2 kv heads, on 1 (multi-query), on 4
     * given explicitly, across key blocks (T > 256) and row blocks with a tail, and tensor-parallel head offsets */
    const llm4d_attn_shape shapes[] = {
        {1, 1, 1, 4, 0, 1, 0},    {2, 7, 3, 5, 0, 3, 0},    {3, 33, 2, 16, 0, 2, 0},  {2, 130, 2, 16, 1, 4, 0},
        {1, 257, 2, 8, 2, 5, 0},  {1, 600, 2, 16, 1, 3, 0}, {2, 37, 4, 8, 0, 4, 2},   {2, 37, 4, 8, 4, 8, 1},
        {2, 37, 4, 8, 0, 4, 4},   {1, 300, 4, 16, 4, 8, 2}, {1, 300, 4, 16, 0, 4, 1}, {3, 19, 6, 5, 0, 6, 3},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        test_attention(cpu, ref, shapes[i], 0.0f, 1.0f);
        test_attention(cpu, ref, shapes[i], 0.1f, 1.0f);
    }
    /* scores large enough that many probabilities underflow to exactly 0 */
    const llm4d_attn_shape sharp = {2, 40, 2, 8, 0, 2, 0};
    test_attention(cpu, ref, sharp, 0.0f, 6.0f);
    test_attention(cpu, ref, sharp, 0.3f, 6.0f);
    /* low-precision GEMM operands: T across two key blocks (256) with a tail, and GPT-2's head size; then whole
     * AMX tiles (T and HS multiples of 32: on an AMX CPU the attention's own tile path, cpu_attn.c) across two
     * key blocks and three row blocks, and the narrowest head it takes; grouped-query (2 kv heads of 4) and
     * multi-query attention */
    const llm4d_attn_shape lp_shapes[] = {{2, 300, 2, 16, 1, 3, 0}, {1, 130, 2, 64, 0, 2, 0}, {2, 320, 2, 64, 1, 3, 0},
                                          {1, 96, 3, 32, 0, 3, 0},   {1, 300, 4, 16, 0, 4, 2}, {1, 96, 4, 32, 0, 4, 1}};
    for (size_t i = 0; i < sizeof lp_shapes / sizeof lp_shapes[0]; i++)
        for (int d = 0; d < 2; d++) {
            test_attention_lowp(cpu, ref, lp_shapes[i], d ? 0.1f : 0.0f, LLM4D_PREC_BF16, "bf16");
            test_attention_lowp(cpu, ref, lp_shapes[i], d ? 0.1f : 0.0f, LLM4D_PREC_FP16, "fp16");
        }
    test_dropout(cpu, ref, 3, 1, 1, 0, 0.1f);
    test_dropout(cpu, ref, 3, 1001, 1, 0, 0.0f);
    test_dropout(cpu, ref, 3, 1001, 1, 0, 0.1f);
    test_dropout(cpu, ref, 2, 4099, 1, 0, 0.5f);
    test_dropout(cpu, ref, 40, 64, 16, 0, 0.1f);   /* several rows, positions within rows */
    test_dropout(cpu, ref, 21, 300, 16, 11, 0.3f); /* a slice starting mid-row and crossing rows */
    test_dropout(cpu, ref, 7, 1000, 64, 70, 0.5f); /* a slice inside one row */
    test_dropout_rate(cpu, 0.1f);
    test_dropout_rate(cpu, 0.5f);
    test_crossentropy(cpu, ref, 1, 5, 5, 2);
    test_crossentropy(cpu, ref, 13, 1000, 1024, 3);
    test_crossentropy(cpu, ref, 9, 50257, 50304, 4);
    test_adamw(cpu, 10007);
    test_adamw(ref, 10007);
    test_reductions(cpu, ref);
    cpu->destroy(cpu);
    ref->destroy(ref);
    return check_summary();
}
