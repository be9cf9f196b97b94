/* test_kernels16.c — the 16-bit paths of the fast CPU backend's element-wise kernels against the reference backend
 * (issue 42: "each kernel's 16-bit path is tested against the reference backend; the fp32 path does not change by
 * a bit"): convert, LayerNorm forward and backward, GELU forward and backward, the Llama family's RMSNorm, RoPE and
 * SwiGLU forward and backward, dropout, dropout_add forward and backward, the bias gradient, and the cross-entropy
 * (statistics, losses, logits gradients, in place, in vocabulary parts). The linear layers and the attention are
 * in test_kernels16_gemm.c.
 *
 * Each typed argument of a kernel may be fp32, bf16 or fp16 independently (backend.h), so every combination of
 * types of a kernel's typed arguments runs (3^k - 1 of them beside all-fp32): inputs drawn in fp32 and rounded to
 * each argument's type, accumulated outputs (+=) starting from such values, written outputs from garbage. For each
 * combination three checks:
 *  - cpu against ref fed the same typed inputs: both compute the same fp32 math (the reference in double), so a
 *    16-bit output may differ by the rounding of two nearby values, one unit in the last place of its type at the
 *    reference's value (typed.h), on top of the fp32 tolerance test_kernels.c uses (normwise, relative to the
 *    largest value); dropout and convert are one multiply or one rounding and must equal the reference bit for bit;
 *  - the 16-bit result is the kernel's own fp32 path rounded once: the same kernel with fp32 tensors holding the
 *    same values (the 16-bit inputs widened, an accumulated output's old values widened) gives the fp32 result
 *    whose rounding to the output's type (to nearest even, core/bf16.h and IEEE) must be the 16-bit result bit for
 *    bit; this is what catches a truncating or a double rounding, which one ulp against ref would not;
 *  - the fp32 call made before the 16-bit one, made again after it, gives the same bits (a 16-bit call leaves
 *    nothing behind that changes the fp32 path).
 * Then what the combinations do not reach: 16-bit tensors in place (dropout's out = inp, dropout_add_backward's
 * dres or dx = dout, the cross-entropy's dlogits = logits) against separate buffers, bit for bit, and the
 * cross-entropy of 16-bit logits in vocabulary parts (online and as ranks) against the whole vocabulary. The log
 * ends with the worst error seen per kernel and output type. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/rng.h"
#include "backend_pair.h"
#include "check.h"
#include "xent_ranks.h"
#include "typed.h"

#define TOL 1e-5

static uint64_t g_stream = 1;

static float *frand(size_t n, float scale, float shift) {
    float *p = falloc(n);
    const uint64_t st = g_stream++;
    for (size_t i = 0; i < n; i++) p[i] = shift + scale * llm4d_rng_normal(4242, st, i);
    return p;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* the harness: a kernel's arguments, and every combination of its typed arguments' types */

enum { IN, OUT, ACC }; /* read; written; read and added to */

typedef struct {
    const char *name;
    int role, typed; /* typed: a tensor argument (its type from the combination), else a float * (fp32) */
    size_t n;
    const float *init; /* the values (rounded to the argument's type); NULL: normal(0, 1) */
} harg;

#define MAXARGS 8

typedef struct kspec kspec;
struct kspec {
    const char *name; /* tag of the check lines, with the sizes */
    const char *kernel; /* the worst-error table's key */
    int nargs;
    harg a[MAXARGS];
    void (*call)(llm4d_backend *be, const tbuf *x, const kspec *k);
    int N, C, Vl, v0, V;
    size_t n;
    const llm4d_dropout *drop;
    const int32_t *tg;
    const float *dloss;
    llm4d_rope_shape rope;
    double tol;    /* fp32 tolerance against the reference, relative to the output's largest value */
    int exact_ref; /* equal to the reference bit for bit */
};

/* One combination: types[j] for the j-th typed argument. */
static void run_combo(llm4d_backend *cpu, llm4d_backend *ref, const kspec *k, const llm4d_ftype *types) {
    tbuf xc[MAXARGS], xr[MAXARGS], s1[MAXARGS], s2[MAXARGS];
    char tag[320];
    int len = snprintf(tag, sizeof tag, "%s [", k->name);
    const uint64_t st = g_stream++;
    for (int i = 0, j = 0; i < k->nargs; i++) {
        const harg *a = &k->a[i];
        const llm4d_ftype t = a->typed ? types[j++] : LLM4D_F32;
        if (a->typed) len += snprintf(tag + len, sizeof tag - len, "%s%s %s", j > 1 ? ", " : "", a->name, tname(t));
        float *v = falloc(a->n);
        for (size_t e = 0; e < a->n; e++)
            v[e] = a->init && a->role != OUT ? a->init[e] : llm4d_rng_normal(77, st * 16 + (uint64_t)i, e);
        xc[i] = tb_of(t, v, a->n);
        xr[i] = tb_dup(xc[i]);
        s1[i] = tb_wide(xc[i]);
        s2[i] = tb_dup(s1[i]);
        free(v);
    }
    snprintf(tag + len, sizeof tag - len, "]");
    k->call(cpu, s1, k); /* a fresh fp32 call */
    k->call(cpu, xc, k);
    k->call(ref, xr, k);
    k->call(cpu, s2, k); /* and again after the 16-bit one */
    int ok_ref = 1, ok_self = 1, ok_fresh = 1;
    char det[512] = "";
    int dl = 0;
    for (int i = 0; i < k->nargs; i++) {
        if (k->a[i].role == IN) continue;
        const tstat r = tb_compare(xc[i], xr[i], k->exact_ref ? 0 : 1, k->exact_ref ? 0 : k->tol, NULL, 0);
        ok_ref &= k->exact_ref ? r.differ == 0 : r.ratio <= 1.0;
        note_worst(k->kernel, k->a[i].name, xc[i].t, r);
        if (xc[i].t != LLM4D_F32)
            dl += snprintf(det + dl, sizeof det - dl, " %s %.2f ulp (%zu of %zu differ)", k->a[i].name, r.ulps,
                           r.differ, r.n);
        else
            dl += snprintf(det + dl, sizeof det - dl, " %s err %.1e", k->a[i].name, r.err);
        tbuf want = tb_round(s1[i], xc[i].t);
        ok_self &= tb_compare(xc[i], want, 0, 0, NULL, 0).differ == 0;
        tb_free(&want);
        ok_fresh &= !memcmp(s1[i].p, s2[i].p, s1[i].n * sizeof(float));
    }
    check(ok_ref, "%s: cpu vs ref%s:%s", tag, k->exact_ref ? " (bit for bit)" : "", det);
    check(ok_self, "%s: the fp32 path on the same values, rounded once, bit for bit", tag);
    check(ok_fresh, "%s: an fp32 call after it gives the bits of the fp32 call before", tag);
    for (int i = 0; i < k->nargs; i++) tb_free(&xc[i]), tb_free(&xr[i]), tb_free(&s1[i]), tb_free(&s2[i]);
}

/* Every combination of the kernel's typed arguments' types but all-fp32 (test_kernels.c's). */
static void run_all(llm4d_backend *cpu, llm4d_backend *ref, const kspec *k) {
    int nt = 0;
    for (int i = 0; i < k->nargs; i++) nt += k->a[i].typed;
    llm4d_ftype t[MAXARGS];
    for (int c = 1; c < combo_count(nt); c++) {
        combo_types(c, nt, t);
        run_combo(cpu, ref, k, t);
    }
}

/* ---------------------------------------------------------------------------------------------------------- */
/* the kernels as harness calls: x[i] is argument i of the spec */

static void k_convert(llm4d_backend *be, const tbuf *x, const kspec *k) {
    be->convert(be, tb_t(x[0]), tb_ct(x[1]), k->n);
}
static void k_ln_fwd(llm4d_backend *be, const tbuf *x, const kspec *k) {
    be->layernorm_forward(be, tb_t(x[0]), tb_f(x[1]), tb_f(x[2]), tb_ct(x[3]), tb_f(x[4]), tb_f(x[5]), k->N, k->C);
}
static void k_ln_bwd(llm4d_backend *be, const tbuf *x, const kspec *k) {
    be->layernorm_backward(be, tb_t(x[0]), tb_f(x[1]), tb_f(x[2]), tb_ct(x[3]), tb_ct(x[4]), tb_f(x[5]), tb_f(x[6]),
                           tb_f(x[7]), k->N, k->C);
}
static void k_gelu_fwd(llm4d_backend *be, const tbuf *x, const kspec *k) {
    be->gelu_forward(be, tb_t(x[0]), tb_ct(x[1]), k->n);
}
static void k_gelu_bwd(llm4d_backend *be, const tbuf *x, const kspec *k) {
    be->gelu_backward(be, tb_t(x[0]), tb_ct(x[1]), tb_ct(x[2]), k->n);
}
static void k_drop_fwd(llm4d_backend *be, const tbuf *x, const kspec *k) {
    be->dropout_forward(be, tb_t(x[0]), tb_ct(x[1]), k->N, k->C, k->drop);
}
static void k_drop_bwd(llm4d_backend *be, const tbuf *x, const kspec *k) {
    be->dropout_backward(be, tb_t(x[0]), tb_ct(x[1]), k->N, k->C, k->drop);
}
static void k_dadd_fwd(llm4d_backend *be, const tbuf *x, const kspec *k) {
    be->dropout_add_forward(be, tb_t(x[0]), tb_ct(x[1]), tb_ct(x[2]), k->N, k->C, k->drop);
}
static void k_dadd_bwd(llm4d_backend *be, const tbuf *x, const kspec *k) {
    be->dropout_add_backward(be, tb_t(x[0]), tb_t(x[1]), tb_ct(x[2]), k->N, k->C, k->drop);
}
static void k_bias_bwd(llm4d_backend *be, const tbuf *x, const kspec *k) {
    be->bias_backward(be, tb_f(x[0]), tb_ct(x[1]), k->N, k->C);
}
static void k_xent_fwd(llm4d_backend *be, const tbuf *x, const kspec *k) {
    be->xent_forward(be, tb_f(x[0]), tb_ct(x[1]), k->tg, k->N, k->Vl, k->v0, k->V, 0);
}
static void k_xent_bwd(llm4d_backend *be, const tbuf *x, const kspec *k) {
    be->xent_backward(be, tb_f(x[0]), tb_t(x[1]), tb_ct(x[2]), tb_f(x[3]), k->tg, k->dloss, k->N, k->Vl, k->v0, k->V);
}
static void k_rms_fwd(llm4d_backend *be, const tbuf *x, const kspec *k) {
    be->rmsnorm_forward(be, tb_t(x[0]), tb_f(x[1]), tb_ct(x[2]), tb_f(x[3]), k->N, k->C, 1e-5f);
}
static void k_rms_bwd(llm4d_backend *be, const tbuf *x, const kspec *k) {
    be->rmsnorm_backward(be, tb_t(x[0]), tb_f(x[1]), tb_ct(x[2]), tb_ct(x[3]), tb_f(x[4]), tb_f(x[5]), k->N, k->C);
}
static void k_rope_fwd(llm4d_backend *be, const tbuf *x, const kspec *k) {
    be->rope_forward(be, tb_t(x[0]), tb_ct(x[1]), k->rope);
}
static void k_rope_bwd(llm4d_backend *be, const tbuf *x, const kspec *k) {
    be->rope_backward(be, tb_t(x[0]), tb_ct(x[1]), k->rope);
}
static void k_swiglu_fwd(llm4d_backend *be, const tbuf *x, const kspec *k) {
    be->swiglu_forward(be, tb_t(x[0]), tb_ct(x[1]), k->N, k->C);
}
static void k_swiglu_bwd(llm4d_backend *be, const tbuf *x, const kspec *k) {
    be->swiglu_backward(be, tb_t(x[0]), tb_ct(x[1]), tb_ct(x[2]), k->N, k->C);
}

/* ---------------------------------------------------------------------------------------------------------- */

/* Values around every rounding question: ties of bf16 (1 + 2^-8 down to even, 1 + 2^-7 + 2^-8 up) and of fp16
 * (1 + 2^-11), fp16's largest (65504) and the first value rounding to its infinity (65520), fp16's subnormals and
 * what falls below them, bf16's subnormals, infinities, NaN, signed zeros, fp32's largest; then normal values of
 * several magnitudes. */
static float *special_values(size_t n) {
    float *x = frand(n, 1.0f, 0.0f);
    const float sp[] = {1.0f + 0x1p-8f, 1.0f + 0x1p-7f + 0x1p-8f, -(1.0f + 0x1p-8f), 1.0f + 0x1p-11f,
                        1.0f + 0x1p-10f + 0x1p-11f, 65504.0f, 65520.0f, -65520.0f, 65519.0f, 0x1p-24f, 0x1p-25f,
                        0x1.8p-25f, 3e-8f, 1e-39f, -1e-39f, 0x1p-133f, INFINITY, -INFINITY, NAN, 0.0f, -0.0f,
                        0x1.fffffep127f, 1e-45f, 6.1e-5f};
    const size_t ns = sizeof sp / sizeof sp[0];
    for (size_t i = 0; i < ns && i < n; i++) x[i] = sp[i];
    for (size_t i = ns; i < n; i++) x[i] *= i % 5 == 0 ? 1e-3f : i % 5 == 1 ? 300.0f : i % 5 == 2 ? 1e-6f : 1.0f;
    return x;
}

static void test_convert(llm4d_backend *cpu, llm4d_backend *ref, size_t n) {
    float *x = special_values(n);
    char name[64];
    snprintf(name, sizeof name, "convert n=%zu", n);
    kspec k = {.name = name, .kernel = "convert", .nargs = 2,
               .a = {{"dst", OUT, 1, n, NULL}, {"src", IN, 1, n, x}}, .call = k_convert};
    k.n = n, k.exact_ref = 1;
    run_all(cpu, ref, &k);
    /* and against the definition: every element of every pair of types is src's value rounded once (the 16-bit
     * roundings of tensor.h, which the harness's own fp32 path check also relies on) */
    int bad = 0;
    for (int a = 0; a < LLM4D_NFTYPES; a++)
        for (int b = 0; b < LLM4D_NFTYPES; b++) {
            tbuf s = tb_of((llm4d_ftype)a, x, n), d = tb_new((llm4d_ftype)b, n);
            cpu->convert(cpu, tb_t(d), tb_ct(s), n);
            for (size_t i = 0; i < n; i++) bad += !same_value(tb_get(d, i), llm4d_ftype_round(d.t, tb_get(s, i)));
            tb_free(&s), tb_free(&d);
        }
    check(bad == 0, "convert n=%zu: each of the 9 pairs of types rounds each value once to nearest even (%d wrong)",
          n, bad);
    /* the roundings themselves, spelled out: the ties to even, fp16's overflow and subnormals */
    const float probe[] = {1.0f + 0x1p-8f, 1.0f + 0x1p-7f + 0x1p-8f, 1.0f + 0x1p-11f, 65520.0f, 0x1.8p-25f};
    const uint16_t want_bf[] = {0x3f80, 0x3f82, 0x3f80, 0x4780, 0x3340};
    const uint16_t want_h[] = {0x3c04, 0x3c0c, 0x3c00, 0x7c00, 0x0001};
    tbuf s = tb_of(LLM4D_F32, probe, 5), db = tb_new(LLM4D_BF16, 5), dh = tb_new(LLM4D_F16, 5);
    cpu->convert(cpu, tb_t(db), tb_ct(s), 5);
    cpu->convert(cpu, tb_t(dh), tb_ct(s), 5);
    check(!memcmp(db.p, want_bf, sizeof want_bf) && !memcmp(dh.p, want_h, sizeof want_h),
          "convert: bf16 and fp16 ties to even, fp16 overflow to inf, 1.5 x 2^-25 to fp16's smallest subnormal");
    tb_free(&s), tb_free(&db), tb_free(&dh);
    free(x);
}

static void test_layernorm(llm4d_backend *cpu, llm4d_backend *ref, int N, int C) {
    float *x = frand((size_t)N * C, 2.0f, 3.0f), *w = frand(C, 1.0f, 0.0f), *b = frand(C, 1.0f, 0.0f);
    float *m = falloc(N), *r = falloc(N), *o = falloc((size_t)N * C);
    ref->layernorm_forward(ref, llm4d_t32(o), m, r, llm4d_ct32(x), w, b, N, C);
    char name[64];
    snprintf(name, sizeof name, "layernorm forward N=%d C=%d", N, C);
    const size_t n = (size_t)N * C;
    kspec f = {.name = name, .kernel = "layernorm_forward", .nargs = 6,
               .a = {{"out", OUT, 1, n, NULL}, {"mean", OUT, 0, N, NULL}, {"rstd", OUT, 0, N, NULL},
                     {"inp", IN, 1, n, x}, {"w", IN, 0, C, w}, {"b", IN, 0, C, b}},
               .call = k_ln_fwd};
    f.N = N, f.C = C, f.tol = TOL;
    run_all(cpu, ref, &f);
    snprintf(name, sizeof name, "layernorm backward N=%d C=%d", N, C);
    kspec g = {.name = name, .kernel = "layernorm_backward", .nargs = 8,
               .a = {{"dinp", ACC, 1, n, NULL}, {"dw", ACC, 0, C, NULL}, {"db", ACC, 0, C, NULL},
                     {"dout", IN, 1, n, NULL}, {"inp", IN, 1, n, x}, {"w", IN, 0, C, w}, {"mean", IN, 0, N, m},
                     {"rstd", IN, 0, N, r}},
               .call = k_ln_bwd};
    g.N = N, g.C = C, g.tol = TOL;
    run_all(cpu, ref, &g);
    free(x), free(w), free(b), free(m), free(r), free(o);
}

static void test_gelu(llm4d_backend *cpu, llm4d_backend *ref, size_t n) {
    float *x = frand(n, 3.0f, 0.0f);
    x[0] = 0.0f, x[1] = 20.0f, x[2] = -20.0f, x[3] = 1e-8f, x[4] = -30.0f, x[5] = -5.0f; /* the clamps, the tails */
    char name[64];
    snprintf(name, sizeof name, "gelu forward n=%zu", n);
    kspec f = {.name = name, .kernel = "gelu_forward", .nargs = 2,
               .a = {{"out", OUT, 1, n, NULL}, {"inp", IN, 1, n, x}}, .call = k_gelu_fwd};
    f.n = n, f.tol = TOL;
    run_all(cpu, ref, &f);
    snprintf(name, sizeof name, "gelu backward n=%zu", n);
    kspec g = {.name = name, .kernel = "gelu_backward", .nargs = 3,
               .a = {{"dinp", OUT, 1, n, NULL}, {"inp", IN, 1, n, x}, {"dout", IN, 1, n, NULL}}, .call = k_gelu_bwd};
    g.n = n, g.tol = TOL;
    run_all(cpu, ref, &g);
    free(x);
}

/* The Llama family (issue 47): RMSNorm forward and backward on [N, C]; RoPE forward and backward on N rows of NH
 * heads of HS, rows ld apart (the elements past the heads: garbage that must stay), then in place in 16 bits
 * against separate buffers, bit for bit; SwiGLU forward and backward on [N, 2F] (C = F), gates out to +-20. */
static void test_llama(llm4d_backend *cpu, llm4d_backend *ref, int N, int C, llm4d_rope_shape rs) {
    const size_t n = (size_t)N * C, nr = (size_t)rs.N * rs.ld;
    float *x = frand(2 * n, 2.0f, 0.5f), *w = frand(C, 1.0f, 1.0f), *r = falloc(N), *o = falloc(n);
    ref->rmsnorm_forward(ref, llm4d_t32(o), r, llm4d_ct32(x), w, N, C, 1e-5f);
    char name[128];
    snprintf(name, sizeof name, "rmsnorm forward N=%d C=%d", N, C);
    kspec f = {.name = name, .kernel = "rmsnorm_forward", .nargs = 4,
               .a = {{"out", OUT, 1, n, NULL}, {"rstd", OUT, 0, N, NULL}, {"inp", IN, 1, n, x}, {"w", IN, 0, C, w}},
               .call = k_rms_fwd};
    f.N = N, f.C = C, f.tol = TOL;
    run_all(cpu, ref, &f);
    snprintf(name, sizeof name, "rmsnorm backward N=%d C=%d", N, C);
    kspec g = {.name = name, .kernel = "rmsnorm_backward", .nargs = 6,
               .a = {{"dinp", ACC, 1, n, NULL}, {"dw", ACC, 0, C, NULL}, {"dout", IN, 1, n, NULL},
                     {"inp", IN, 1, n, x}, {"w", IN, 0, C, w}, {"rstd", IN, 0, N, r}},
               .call = k_rms_bwd};
    g.N = N, g.C = C, g.tol = TOL;
    run_all(cpu, ref, &g);
    snprintf(name, sizeof name, "rope N=%d NH=%d HS=%d ld=%d T=%d tok0=%lld", rs.N, rs.NH, rs.HS, rs.ld, rs.T,
             (long long)rs.tok0);
    kspec rf = {.name = name, .kernel = "rope_forward", .nargs = 2,
                .a = {{"out", OUT, 1, nr, NULL}, {"inp", IN, 1, nr, NULL}}, .call = k_rope_fwd};
    rf.rope = rs, rf.tol = TOL;
    run_all(cpu, ref, &rf);
    kspec rb = {.name = name, .kernel = "rope_backward", .nargs = 2,
                .a = {{"dinp", OUT, 1, nr, NULL}, {"dout", IN, 1, nr, NULL}}, .call = k_rope_bwd};
    rb.rope = rs, rb.tol = TOL;
    run_all(cpu, ref, &rb);
    float *v = frand(nr, 1.0f, 0.0f);
    for (int t = LLM4D_BF16; t <= LLM4D_F16; t++) {
        const llm4d_ftype ty = (llm4d_ftype)t;
        tbuf a = tb_of(ty, v, nr), b = tb_dup(a), io = tb_dup(a), jo = tb_dup(a);
        cpu->rope_forward(cpu, tb_t(b), tb_ct(a), rs), cpu->rope_forward(cpu, tb_t(io), tb_ct(io), rs);
        cpu->rope_backward(cpu, tb_t(a), tb_ct(b), rs), cpu->rope_backward(cpu, tb_t(jo), tb_ct(b), rs);
        tbuf back = tb_dup(b);
        cpu->rope_backward(cpu, tb_t(back), tb_ct(back), rs);
        check(!memcmp(io.p, b.p, nr * 2) && !memcmp(back.p, a.p, nr * 2) && !memcmp(jo.p, a.p, nr * 2),
              "%s %s: forward and backward in place = separate buffers, bit for bit", name, tname(ty));
        tb_free(&a), tb_free(&b), tb_free(&io), tb_free(&jo), tb_free(&back);
    }
    for (size_t i = 0; i < 2 * n; i++)
        if (i / C % 2 == 0) x[i] = -20.0f + 40.0f * (float)((i * 7919) % n) / (float)n;
    snprintf(name, sizeof name, "swiglu N=%d F=%d", N, C);
    kspec sf = {.name = name, .kernel = "swiglu_forward", .nargs = 2,
                .a = {{"out", OUT, 1, n, NULL}, {"inp", IN, 1, 2 * n, x}}, .call = k_swiglu_fwd};
    sf.N = N, sf.C = C, sf.tol = TOL;
    run_all(cpu, ref, &sf);
    kspec sb = {.name = name, .kernel = "swiglu_backward", .nargs = 3,
                .a = {{"dinp", OUT, 1, 2 * n, NULL}, {"inp", IN, 1, 2 * n, x}, {"dout", IN, 1, n, NULL}},
                .call = k_swiglu_bwd};
    sb.N = N, sb.C = C, sb.tol = TOL;
    run_all(cpu, ref, &sb);
    free(x), free(w), free(r), free(o), free(v);
}

/* dropout, dropout_add, forward and backward, on tokens [tok0, tok0 + N) of rows of T tokens; p = 0 takes the
 * kernels' paths without a mask (a conversion, a copy, a sum). Where the result is one multiply (dropout forward,
 * dropout_add backward) or one add (p = 0) it must equal the reference bit for bit. Where it is x + y mult (dropout
 * backward, dropout_add forward with p > 0) the fast kernel's loop is contracted into a fused multiply-add (GCC's
 * -ffp-contract=fast, one rounding) and the reference's is not (two), so their fp32 results may differ by an fp32
 * ulp, as they always did (test_kernels.c compares these within 1e-6): one ulp of a 16-bit output and 1e-6. */
static void test_dropout(llm4d_backend *cpu, llm4d_backend *ref, int N, int C, int T, int64_t tok0, float p) {
    int64_t sids[8] = {11, 2, 40, 3, 7, 0, 25, 6};
    const llm4d_dropout drop = {p, 99, llm4d_rng_stream(LLM4D_RNG_DROPOUT, 1, LLM4D_DROP_MLP_OUT, 3), sids, T, tok0,
                                NULL};
    const size_t n = (size_t)N * C;
    char name[96];
    snprintf(name, sizeof name, "dropout N=%d C=%d T=%d tok0=%lld p=%.1f", N, C, T, (long long)tok0, p);
    kspec f = {.name = name, .kernel = "dropout_forward", .nargs = 2,
               .a = {{"out", OUT, 1, n, NULL}, {"inp", IN, 1, n, NULL}}, .call = k_drop_fwd};
    f.N = N, f.C = C, f.drop = &drop, f.exact_ref = 1;
    run_all(cpu, ref, &f);
    snprintf(name, sizeof name, "dropout backward N=%d C=%d T=%d tok0=%lld p=%.1f", N, C, T, (long long)tok0, p);
    kspec b = {.name = name, .kernel = "dropout_backward", .nargs = 2,
               .a = {{"dinp", ACC, 1, n, NULL}, {"dout", IN, 1, n, NULL}}, .call = k_drop_bwd};
    b.N = N, b.C = C, b.drop = &drop, b.exact_ref = p == 0.0f, b.tol = 1e-6;
    run_all(cpu, ref, &b);
    snprintf(name, sizeof name, "dropout_add N=%d C=%d T=%d tok0=%lld p=%.1f", N, C, T, (long long)tok0, p);
    kspec af = {.name = name, .kernel = "dropout_add_forward", .nargs = 3,
                .a = {{"out", OUT, 1, n, NULL}, {"res", IN, 1, n, NULL}, {"x", IN, 1, n, NULL}}, .call = k_dadd_fwd};
    af.N = N, af.C = C, af.drop = &drop, af.exact_ref = p == 0.0f, af.tol = 1e-6;
    run_all(cpu, ref, &af);
    snprintf(name, sizeof name, "dropout_add backward N=%d C=%d T=%d tok0=%lld p=%.1f", N, C, T, (long long)tok0, p);
    kspec ab = {.name = name, .kernel = "dropout_add_backward", .nargs = 3,
                .a = {{"dres", OUT, 1, n, NULL}, {"dx", OUT, 1, n, NULL}, {"dout", IN, 1, n, NULL}},
                .call = k_dadd_bwd};
    ab.N = N, ab.C = C, ab.drop = &drop, ab.exact_ref = 1;
    run_all(cpu, ref, &ab);

    /* in place in 16 bits: dropout's out = inp, dropout_add_backward's dres = dout and dx = dout (the same
     * memory and type), against separate buffers, bit for bit */
    float *v = frand(n, 1.0f, 0.0f);
    for (int t = LLM4D_BF16; t <= LLM4D_F16; t++) {
        const llm4d_ftype ty = (llm4d_ftype)t;
        tbuf x = tb_of(ty, v, n), o = tb_new(ty, n), io = tb_dup(x);
        cpu->dropout_forward(cpu, tb_t(o), tb_ct(x), N, C, &drop);
        cpu->dropout_forward(cpu, tb_t(io), tb_ct(io), N, C, &drop);
        int same = !memcmp(o.p, io.p, n * 2);
        tbuf r = tb_new(ty, n), d = tb_new(ty, n), g1 = tb_dup(x), g2 = tb_dup(x), r2 = tb_new(ty, n);
        cpu->dropout_add_backward(cpu, tb_t(r), tb_t(d), tb_ct(x), N, C, &drop);
        cpu->dropout_add_backward(cpu, tb_t(g1), tb_t(d), tb_ct(g1), N, C, &drop); /* dres = dout */
        cpu->dropout_add_backward(cpu, tb_t(r2), tb_t(g2), tb_ct(g2), N, C, &drop); /* dx = dout */
        same &= !memcmp(g1.p, r.p, n * 2) && !memcmp(g2.p, d.p, n * 2) && !memcmp(r2.p, r.p, n * 2);
        check(same, "dropout and dropout_add backward N=%d C=%d T=%d tok0=%lld p=%.1f %s: in place (out = inp; "
              "dres = dout; dx = dout) = separate buffers, bit for bit", N, C, T, (long long)tok0, p, tname(ty));
        tb_free(&x), tb_free(&o), tb_free(&io), tb_free(&r), tb_free(&d), tb_free(&g1), tb_free(&g2), tb_free(&r2);
    }
    free(v);
}

static void test_bias_backward(llm4d_backend *cpu, llm4d_backend *ref, int N, int C) {
    char name[64];
    snprintf(name, sizeof name, "bias backward N=%d C=%d", N, C);
    kspec k = {.name = name, .kernel = "bias_backward", .nargs = 2,
               .a = {{"db", ACC, 0, (size_t)C, NULL}, {"dout", IN, 1, (size_t)N * C, NULL}}, .call = k_bias_bwd};
    k.N = N, k.C = C, k.tol = 1e-6;
    run_all(cpu, ref, &k);
}

/* The cross-entropy over a padded vocabulary (Vp > V: the padding columns hold 100, which must not count): the
 * statistics and the backward with every combination of dlogits' and logits' types, then 16-bit logits in place
 * (dlogits = logits) and in `parts` vocabulary parts, combined online (merge) and as ranks (max, rescale, sum). */
static void test_crossentropy(llm4d_backend *cpu, llm4d_backend *ref, int N, int V, int Vp, int parts) {
    const size_t n = (size_t)N * Vp;
    float *logits = frand(n, 3.0f, 0.0f);
    for (int i = 0; i < N; i++)
        for (int j = V; j < Vp; j++) logits[(size_t)i * Vp + j] = 100.0f;
    int32_t *tg = malloc(sizeof(int32_t) * N);
    float *dloss = falloc(N), *stats = falloc(3 * (size_t)N);
    for (int i = 0; i < N; i++) {
        tg[i] = (int32_t)((i * 104729u + 7u) % (unsigned)V);
        dloss[i] = (i % 3 == 0) ? 0.0f : 1.0f / (float)(i + 1);
    }
    tg[0] = V - 1;
    ref->xent_forward(ref, stats, llm4d_ct32(logits), tg, N, Vp, 0, V, 0);
    char name[96];
    snprintf(name, sizeof name, "crossentropy forward N=%d V=%d Vp=%d", N, V, Vp);
    kspec f = {.name = name, .kernel = "xent_forward", .nargs = 2,
               .a = {{"stats", OUT, 0, 3 * (size_t)N, NULL}, {"logits", IN, 1, n, logits}}, .call = k_xent_fwd};
    f.N = N, f.Vl = Vp, f.v0 = 0, f.V = V, f.tg = tg, f.tol = TOL;
    run_all(cpu, ref, &f);
    snprintf(name, sizeof name, "crossentropy backward N=%d V=%d Vp=%d", N, V, Vp);
    kspec b = {.name = name, .kernel = "xent_backward", .nargs = 4,
               .a = {{"losses", OUT, 0, N, NULL}, {"dlogits", OUT, 1, n, NULL}, {"logits", IN, 1, n, logits},
                     {"stats", IN, 0, 3 * (size_t)N, stats}},
               .call = k_xent_bwd};
    b.N = N, b.Vl = Vp, b.v0 = 0, b.V = V, b.tg = tg, b.dloss = dloss, b.tol = TOL;
    run_all(cpu, ref, &b);

    float *st = falloc(3 * (size_t)N), *l1 = falloc(N), *l2 = falloc(N), *rk = falloc(3 * (size_t)parts * N);
    float *gmax = falloc(N), *sum = falloc(3 * (size_t)N);
    for (int ty = LLM4D_BF16; ty <= LLM4D_F16; ty++) {
        const llm4d_ftype t = (llm4d_ftype)ty;
        tbuf lg = tb_of(t, logits, n), g = tb_new(t, n), al = tb_dup(lg), gr = tb_new(t, n);
        cpu->xent_forward(cpu, st, tb_ct(lg), tg, N, Vp, 0, V, 0);
        cpu->xent_backward(cpu, l1, tb_t(g), tb_ct(lg), st, tg, dloss, N, Vp, 0, V);
        cpu->xent_backward(cpu, l2, tb_t(al), tb_ct(al), st, tg, dloss, N, Vp, 0, V);
        check(!memcmp(al.p, g.p, n * 2) && !memcmp(l1, l2, N * sizeof(float)),
              "%s %s: in place (dlogits = logits) = separate buffers, bit for bit", name, tname(t));
        /* the whole vocabulary on ref, the oracle of the parts */
        float *lr = falloc(N), *sr = falloc(3 * (size_t)N);
        ref->xent_forward(ref, sr, tb_ct(lg), tg, N, Vp, 0, V, 0);
        ref->xent_backward(ref, lr, tb_t(gr), tb_ct(lg), sr, tg, dloss, N, Vp, 0, V);
        /* parts: columns [v0, v0 + w) of the 16-bit logits copied out as a part's own [N, w] tensor */
        const int w = (Vp + parts - 1) / parts;
        tbuf part = tb_new(t, (size_t)N * w), gpart = tb_new(t, (size_t)N * w);
        double worst_on = 0, worst_rk = 0, worst_g = 0;
        for (int pass = 0; pass < 2; pass++)
            for (int k = 0; k < parts; k++) {
                const int v0 = k * w, wk = Vp - v0 < w ? Vp - v0 : w;
                for (int i = 0; i < N; i++)
                    memcpy((char *)part.p + (size_t)i * wk * 2, (char *)lg.p + ((size_t)i * Vp + v0) * 2,
                           (size_t)wk * 2);
                if (pass == 0) {
                    cpu->xent_forward(cpu, st, tb_ct(part), tg, N, wk, v0, V, k > 0);
                    cpu->xent_forward(cpu, rk + 3 * (size_t)k * N, tb_ct(part), tg, N, wk, v0, V, 0);
                    if (k < parts - 1) continue;
                    xent_combine_ranks(cpu, rk, parts, N, gmax, sum);
                    cpu->xent_backward(cpu, l1, llm4d_t32(NULL), tb_ct(lg), st, tg, dloss, N, Vp, 0, V);
                    for (int i = 0; i < N; i++) worst_on = fmax(worst_on, fabs(l1[i] - lr[i]) / fmax(fabs(lr[i]), 1.0));
                    cpu->xent_backward(cpu, l1, llm4d_t32(NULL), tb_ct(lg), sum, tg, dloss, N, Vp, 0, V);
                    for (int i = 0; i < N; i++) worst_rk = fmax(worst_rk, fabs(l1[i] - lr[i]) / fmax(fabs(lr[i]), 1.0));
                    continue;
                }
                /* the part's gradient columns from the combined statistics, against ref's whole gradient: one ulp
                 * of the type beside the fp32 tolerance */
                cpu->xent_backward(cpu, NULL, tb_t(gpart), tb_ct(part), sum, tg, dloss, N, wk, v0, V);
                for (int i = 0; i < N; i++)
                    for (int j = 0; j < wk; j++) {
                        const double a = tb_get(gpart, (size_t)i * wk + j), r = tb_get(gr, (size_t)i * Vp + v0 + j);
                        const double e = fabs(a - r), allowed = ulp_of(t, r) + TOL;
                        worst_g = fmax(worst_g, e / allowed);
                    }
            }
        check(worst_on <= TOL && worst_rk <= TOL && worst_g <= 1.0,
              "%s %s logits in %d parts: losses online %.1e, as ranks %.1e (tol %.0e); gradient columns err/allowed "
              "%.2f", name, tname(t), parts, worst_on, worst_rk, TOL, worst_g);
        free(lr), free(sr);
        tb_free(&lg), tb_free(&g), tb_free(&al), tb_free(&gr), tb_free(&part), tb_free(&gpart);
    }
    free(st), free(l1), free(l2), free(rk), free(gmax), free(sum);
    free(logits), free(tg), free(dloss), free(stats);
}

int main(void) {
    llm4d_backend *cpu, *ref;
    if (!backend_pair_open(&cpu, &ref)) return 1;
    test_convert(cpu, ref, 10007);
    test_layernorm(cpu, ref, 1, 7);
    test_layernorm(cpu, ref, 37, 131);
    test_layernorm(cpu, ref, 64, 768);
    test_gelu(cpu, ref, 10007);
    test_dropout(cpu, ref, 3, 1001, 1, 0, 0.1f);
    test_dropout(cpu, ref, 3, 1001, 1, 0, 0.0f);
    test_dropout(cpu, ref, 21, 300, 16, 11, 0.3f); /* a slice starting mid-row and crossing rows */
    test_llama(cpu, ref, 37, 131,
               (llm4d_rope_shape){.N = 21, .NH = 3, .HS = 10, .ld = 37, .T = 9, .tok0 = 5, .theta = 1e4f});
    test_llama(cpu, ref, 16, 768, (llm4d_rope_shape){.N = 16, .NH = 6, .HS = 128, .ld = 1024, .T = 4096, .tok0 = 4000,
                                                     .theta = 5e5f});
    test_bias_backward(cpu, ref, 37, 131);
    test_bias_backward(cpu, ref, 300, 64);
    test_crossentropy(cpu, ref, 1, 5, 5, 2);
    test_crossentropy(cpu, ref, 13, 1000, 1024, 3);
    test_crossentropy(cpu, ref, 9, 50257, 50304, 4);
    print_worst();
    cpu->destroy(cpu);
    ref->destroy(ref);
    return check_summary();
}
