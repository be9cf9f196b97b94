/* test_kernels16_gemm.c — the 16-bit paths of the fast CPU backend's linear layers (forward and backward, the input
 * read through GELU or not, with and without bias, the input gradient written or added) and of its attention
 * (forward and backward, with and without dropout) against the reference backend fed the same typed tensors (issue
 * 42). The element-wise kernels are in test_kernels16.c, which says how a 16-bit result is compared.
 *
 * Each runs in every GEMM precision (set_precision: fp32, bf16, fp16), whatever the tensors' types: the tensors' type
 * is how an activation is stored, the precision what the GEMM multiplies. Against the reference (which computes in
 * double whatever the precision):
 *  - fp32 precision: the fp32 tolerance of test_kernels.c (normwise 1e-5), plus one ulp of a 16-bit output;
 *  - bf16 / fp16 precision: the bounds of test_amp_unit.c for the linear layers, |y - y_ref| <= (eps + 1e-6)
 *    sum_k |a_ik b_kj| with the operands' values (the typed tensors', gelu(x) for an input through GELU), made
 *    exact per operand (op_unit: the backend rounds the fp32 weights and whatever is not stored in the format, the
 *    reference rounds nothing), and of attn_bound.h for the attention (with the rounding of the output backward
 *    reads, where `out` is 16-bit), plus one ulp of a 16-bit output.
 * And in every precision: the 16-bit result is the backend's own fp32 path rounded once (the same call on fp32
 * tensors holding the same values gives the fp32 result whose rounding must be the 16-bit one, bit for bit; fp32
 * outputs beside it, dw, db, lse, bit for bit), the fp32 call made again after the 16-bit one gives the same bits,
 * and at the end, back in fp32 precision, the all-fp32 calls give the bits they gave before any 16-bit call. Also
 * the paths the model takes beside: a linear backward split as zero-bubble pipelines run it (dinp alone, then dw and
 * db alone) equal to the joint call, and the attention's dropout mask kept as bits equal to the mask drawn again,
 * bit for bit, with 16-bit tensors. The combinations: every one of the three typed arguments' types for the small
 * linear shapes, the model's (all 16-bit of one type; the output fp32) for the others; for the attention the
 * model's (all 16-bit), each tensor 16-bit alone, and bf16 mixed with fp16. An added (LLM4D_ADD) 16-bit input
 * gradient is old + new in fp32 rounded once, the new part being what the fp32 path writes (its own += may add
 * inside the GEMM, in another order).
 *
 * Built a second time as test_kernels16_gemm_amxemu with src/backend/cpu.c and cpu_amx.c compiled with
 * LLM4D_AMX_EMULATE (CMakeLists.txt): the backend then takes its AMX paths in bf16 (packers reading typed
 * tensors, the tile kernel in plain C, 16-bit results rounded from the fp32 result slot) on any CPU with the packers'
 * AVX512-BF16, so the AMX machines' code is checked on every machine that has that; it says which kernels ran. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/rng.h"
#include "attn_bound.h"
#include "check.h"
#include "typed.h"

#define TOL 1e-5

static uint64_t g_stream = 1;

static float *frand(size_t n, float scale) {
    float *p = falloc(n);
    const uint64_t st = g_stream++;
    for (size_t i = 0; i < n; i++) p[i] = scale * llm4d_rng_normal(2424, st, i);
    return p;
}

typedef struct {
    llm4d_precision p;
    const char *name;
    double u; /* unit roundoff of the GEMM operands' format; 0: fp32 (the normwise tolerance instead) */
} prec_mode;

static const prec_mode MODES[] = {
    {LLM4D_PREC_FP32, "fp32", 0.0}, {LLM4D_PREC_BF16, "bf16", 0x1p-8}, {LLM4D_PREC_FP16, "fp16", 0x1p-11}};
#define NMODES 3

/* The rounding unit of a GEMM operand stored in type t (act: read through an activation, computed in fp32) in
 * precision m: 0 where its values are already the format's (bf16 in bf16; bf16 and fp16 in fp16, bf16's 8-bit
 * significands fitting fp16's 11), else m's. A product of two operands then errs by at most ua + ub + ua ub
 * relative: 2^-8 where only the weight is rounded (test_amp_unit.c's bf16 bound), 2^-7 where both are (a bound of
 * 2^-8 was exceeded by 5 % there, with 24-term sums). */
static double op_unit(const prec_mode *m, llm4d_ftype t, llm4d_act act) {
    if (act != LLM4D_ACT_NONE) return m->u;
    if (m->p == LLM4D_PREC_BF16 && t == LLM4D_BF16) return 0.0;
    if (m->p == LLM4D_PREC_FP16 && t != LLM4D_F32) return 0.0;
    return m->u;
}
static double prod_eps(double ua, double ub) { return ua + ub + ua * ub; }

static int set_prec(llm4d_backend *cpu, const prec_mode *m) {
    llm4d_err err = {0};
    if (cpu->set_precision(cpu, m->p, &err) == LLM4D_OK) return 1;
    check(0, "set_precision(%s): %s", m->name, err.msg);
    return 0;
}

/* one comparison's part of a check line, and whether it passed */
static int judge(char *det, size_t cap, const char *name, tbuf got, tstat s, const char *kernel) {
    const size_t l = strlen(det);
    note_worst(kernel, name, got.t, s);
    if (got.t != LLM4D_F32) {
        snprintf(det + l, cap - l, " %s %.3f (%.2f ulp, %zu of %zu differ)", name, s.ratio, s.ulps, s.differ, s.n);
    } else {
        snprintf(det + l, cap - l, " %s %.3f", name, s.ratio);
    }
    return s.ratio <= 1.0;
}

/* whether got is want rounded once to got's type, bit for bit */
static int rounded_from(tbuf got, tbuf want32) {
    tbuf r = tb_round(want32, got.t);
    const int ok = tb_compare(got, r, 0, 0, NULL, 0).differ == 0;
    tb_free(&r);
    return ok;
}

static int same_bits(tbuf a, tbuf b) { return a.n == b.n && !memcmp(a.p, b.p, a.n * llm4d_ftype_size(a.t)); }

/* ---------------------------------------------------------------------------------------------------------- */
/* linear layers */

static double gelu_d(double x) { return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }

/* m[r Cc + c] = sum_t |a[r ars + t acs]| |b[t brs + c bcs]| (R x Cc, K terms): the bound's magnitudes */
static double *magnitudes(const double *a, int ars, int acs, const double *b, int brs, int bcs, int R, int Cc, int K) {
    double *m = calloc((size_t)R * Cc, sizeof(double));
    if (!m) exit(1);
    for (int r = 0; r < R; r++)
        for (int c = 0; c < Cc; c++) {
            double s = 0.0;
            for (int t = 0; t < K; t++)
                s += fabs(a[(size_t)r * ars + (size_t)t * acs] * b[(size_t)t * brs + (size_t)c * bcs]);
            m[(size_t)r * Cc + c] = s;
        }
    return m;
}

/* the values of t as doubles, through GELU when act says */
static double *values(tbuf t, llm4d_act act) {
    double *v = malloc(t.n * sizeof(double));
    if (!v) exit(1);
    for (size_t i = 0; i < t.n; i++) v[i] = act == LLM4D_ACT_GELU ? gelu_d(tb_get(t, i)) : tb_get(t, i);
    return v;
}

typedef struct {
    int N, C, OC;
    llm4d_act act;
    const float *x, *w, *b, *dy, *dinp0, *dw0, *db0;
    char tag[96];
} lcase;

static void lin_fwd(llm4d_backend *be, const lcase *L, tbuf out, tbuf inp) {
    if (L->act == LLM4D_ACT_NONE)
        be->linear_forward(be, tb_t(out), tb_ct(inp), L->w, L->b, L->N, L->C, L->OC);
    else
        be->linear_forward_act(be, tb_t(out), tb_ct(inp), L->act, L->w, L->b, L->N, L->C, L->OC);
}

static void lin_bwd(llm4d_backend *be, const lcase *L, tbuf dinp, llm4d_store st, tbuf dw, tbuf db, tbuf dout,
                    tbuf inp) {
    float *pdb = L->b ? tb_f(db) : NULL;
    if (L->act == LLM4D_ACT_NONE)
        be->linear_backward(be, tb_t(dinp), st, tb_f(dw), pdb, tb_ct(dout), tb_ct(inp), L->w, L->N, L->C, L->OC);
    else
        be->linear_backward_act(be, tb_t(dinp), st, tb_f(dw), pdb, tb_ct(dout), tb_ct(inp), L->act, L->w, L->N, L->C,
                                L->OC);
}

/* the same with any of dinp (p NULL), dw, db not wanted (the zero-bubble schedules' split) */
static void lin_bwd_part(llm4d_backend *be, const lcase *L, llm4d_tensor dinp, llm4d_store st, float *dw, float *db,
                         tbuf dout, tbuf inp) {
    if (L->act == LLM4D_ACT_NONE)
        be->linear_backward(be, dinp, st, dw, db, tb_ct(dout), tb_ct(inp), L->w, L->N, L->C, L->OC);
    else
        be->linear_backward_act(be, dinp, st, dw, db, tb_ct(dout), tb_ct(inp), L->act, L->w, L->N, L->C, L->OC);
}

static void lin_forward_combo(llm4d_backend *cpu, llm4d_backend *ref, const lcase *L, const prec_mode *m,
                              llm4d_ftype to, llm4d_ftype ti) {
    const size_t nin = (size_t)L->N * L->C, nout = (size_t)L->N * L->OC;
    tbuf in = tb_of(ti, L->x, nin), in32 = tb_wide(in);
    float *garbage = frand(nout, 1.0f); /* forward must overwrite */
    tbuf oc = tb_of(to, garbage, nout), orf = tb_dup(oc), s1 = tb_of(LLM4D_F32, garbage, nout), s2 = tb_dup(s1);
    lin_fwd(cpu, L, s1, in32);
    lin_fwd(cpu, L, oc, in);
    lin_fwd(ref, L, orf, in);
    lin_fwd(cpu, L, s2, in32);
    double *mag = NULL;
    if (m->u > 0) {
        double *a = values(in, L->act), *wd = malloc((size_t)L->OC * L->C * sizeof(double));
        if (!wd) exit(1);
        for (size_t i = 0; i < (size_t)L->OC * L->C; i++) wd[i] = L->w[i];
        mag = magnitudes(a, L->C, 1, wd, 1, L->C, L->N, L->OC, L->C);
        free(a), free(wd);
    }
    char det[256] = "";
    const double eps = prod_eps(op_unit(m, ti, L->act), m->u);
    const tstat s = tb_compare(oc, orf, 1, m->u > 0 ? 0 : TOL, mag, eps + 1e-6);
    const int ok = judge(det, sizeof det, "out", oc, s, L->act ? "linear_forward_act" : "linear_forward");
    check(ok, "%s %s precision forward [out %s, inp %s]: cpu vs ref, err/allowed:%s", L->tag, m->name, tname(to),
          tname(ti), det);
    check(rounded_from(oc, s1), "%s %s precision forward [out %s, inp %s]: the fp32 path on the same values, rounded "
          "once, bit for bit", L->tag, m->name, tname(to), tname(ti));
    check(same_bits(s1, s2), "%s %s precision forward [out %s, inp %s]: an fp32 call after it gives the bits of the "
          "fp32 call before", L->tag, m->name, tname(to), tname(ti));
    free(mag), free(garbage);
    tb_free(&in), tb_free(&in32), tb_free(&oc), tb_free(&orf), tb_free(&s1), tb_free(&s2);
}

static void lin_backward_combo(llm4d_backend *cpu, llm4d_backend *ref, const lcase *L, const prec_mode *m,
                               llm4d_ftype tdi, llm4d_ftype tdy, llm4d_ftype ti, llm4d_store st) {
    const int N = L->N, C = L->C, OC = L->OC;
    const size_t nin = (size_t)N * C, nout = (size_t)N * OC, nw = (size_t)OC * C;
    tbuf in = tb_of(ti, L->x, nin), in32 = tb_wide(in), dy = tb_of(tdy, L->dy, nout), dy32 = tb_wide(dy);
    /* the input gradient starts from random values: added to (LLM4D_ADD) or overwritten (LLM4D_WRITE) */
    tbuf dic = tb_of(tdi, L->dinp0, nin), dir = tb_dup(dic), ds1 = tb_wide(dic), ds2 = tb_dup(ds1);
    tbuf wc = tb_of(LLM4D_F32, L->dw0, nw), wr = tb_dup(wc), ws1 = tb_dup(wc), ws2 = tb_dup(wc);
    tbuf bc = tb_of(LLM4D_F32, L->db0, OC), br = tb_dup(bc), bs1 = tb_dup(bc), bs2 = tb_dup(bc);
    lin_bwd(cpu, L, ds1, st, ws1, bs1, dy32, in32);
    lin_bwd(cpu, L, dic, st, wc, bc, dy, in);
    lin_bwd(ref, L, dir, st, wr, br, dy, in);
    lin_bwd(cpu, L, ds2, st, ws2, bs2, dy32, in32);
    double *magd = NULL, *magw = NULL;
    if (m->u > 0) {
        double *g = values(dy, LLM4D_ACT_NONE), *a = values(in, L->act), *wd = malloc(nw * sizeof(double));
        if (!wd) exit(1);
        for (size_t i = 0; i < nw; i++) wd[i] = L->w[i];
        magd = magnitudes(g, OC, 1, wd, C, 1, N, C, OC); /* dinp = dout W */
        magw = magnitudes(g, 1, OC, a, C, 1, OC, C, N);  /* dw = dout^T act(inp) */
        free(g), free(a), free(wd);
    }
    const char *kn = L->act ? "linear_backward_act" : "linear_backward";
    char det[320] = "", how[96];
    snprintf(how, sizeof how, "[dinp %s %s, dout %s, inp %s]", tname(tdi), st == LLM4D_ADD ? "added" : "written",
             tname(tdy), tname(ti));
    const double ud = op_unit(m, tdy, LLM4D_ACT_NONE), ed = prod_eps(ud, m->u);
    const double ew = prod_eps(ud, op_unit(m, ti, L->act));
    int ok = judge(det, sizeof det, "dinp", dic, tb_compare(dic, dir, 1, m->u > 0 ? 0 : TOL, magd, ed + 1e-6), kn);
    ok &= judge(det, sizeof det, "dw", wc, tb_compare(wc, wr, 0, m->u > 0 ? 0 : TOL, magw, ew + 1e-6), kn);
    if (L->b) ok &= judge(det, sizeof det, "db", bc, tb_compare(bc, br, 0, TOL, NULL, 0), kn);
    check(ok, "%s %s precision backward %s: cpu vs ref, err/allowed:%s", L->tag, m->name, how, det);
    /* added into a 16-bit dinp: old + new in fp32, rounded once (backend.h), where the fp32 path may add inside
     * its GEMM (oneDNN's accumulation, in another order): the new part is the fp32 path's written one */
    tbuf want = tb_dup(ds1);
    if (st == LLM4D_ADD && tdi != LLM4D_F32) {
        tbuf nw1 = tb_new(LLM4D_F32, nin), nb = tb_dup(bs1), nwt = tb_dup(ws1);
        lin_bwd(cpu, L, nw1, LLM4D_WRITE, nwt, nb, dy32, in32);
        tbuf old = tb_of(tdi, L->dinp0, nin);
        for (size_t i = 0; i < nin; i++) tb_f(want)[i] = tb_get(old, i) + tb_f(nw1)[i];
        tb_free(&nw1), tb_free(&nb), tb_free(&nwt), tb_free(&old);
    }
    check(rounded_from(dic, want) && same_bits(wc, ws1) && same_bits(bc, bs1),
          "%s %s precision backward %s: the fp32 path on the same values, rounded once, bit for bit (dw, db equal)",
          L->tag, m->name, how);
    check(same_bits(ds1, ds2) && same_bits(ws1, ws2) && same_bits(bs1, bs2),
          "%s %s precision backward %s: an fp32 call after it gives the bits of the fp32 call before", L->tag, m->name,
          how);
    /* split as a zero-bubble pipeline runs it: dinp alone, later dw and db alone (dinp's pointer NULL) */
    tbuf di2 = tb_of(tdi, L->dinp0, nin), w2 = tb_of(LLM4D_F32, L->dw0, nw), b2 = tb_of(LLM4D_F32, L->db0, OC);
    lin_bwd_part(cpu, L, tb_t(di2), st, NULL, NULL, dy, in);
    lin_bwd_part(cpu, L, (llm4d_tensor){NULL, tdi}, st, tb_f(w2), L->b ? tb_f(b2) : NULL, dy, in);
    check(same_bits(di2, dic) && same_bits(w2, wc) && same_bits(b2, bc),
          "%s %s precision backward %s: dinp alone, then dw and db alone = all three at once, bit for bit", L->tag,
          m->name, how);
    tb_free(&di2), tb_free(&w2), tb_free(&b2);
    free(magd), free(magw);
    tb_free(&want), tb_free(&in), tb_free(&in32), tb_free(&dy), tb_free(&dy32), tb_free(&dic), tb_free(&dir);
    tb_free(&ds1), tb_free(&ds2), tb_free(&wc), tb_free(&wr), tb_free(&ws1), tb_free(&ws2), tb_free(&bc);
    tb_free(&br), tb_free(&bs1), tb_free(&bs2);
}

/* all: every combination of the typed arguments' types; else the model's (the 16-bit ones of one type, the output
 * 16-bit or fp32) */
static int lin_wanted(int all, const llm4d_ftype *t, int k) {
    if (all) return 1;
    for (int j = 1; j < k; j++)
        if (t[j] == LLM4D_F32 || t[j] != t[1]) return 0;
    return t[0] == LLM4D_F32 || t[0] == t[1];
}

static void test_linear(llm4d_backend *cpu, llm4d_backend *ref, int N, int C, int OC, int bias, llm4d_act act,
                        int all) {
    lcase L = {N, C, OC, act, NULL, NULL, NULL, NULL, NULL, NULL, NULL, ""};
    snprintf(L.tag, sizeof L.tag, "linear N=%d C=%d OC=%d bias=%d%s", N, C, OC, bias,
             act == LLM4D_ACT_GELU ? " input through GELU" : "");
    float *x = frand((size_t)N * C, 1.0f), *w = frand((size_t)OC * C, 0.1f), *b = bias ? frand(OC, 0.5f) : NULL;
    float *dy = frand((size_t)N * OC, 1.0f), *d0 = frand((size_t)N * C, 1.0f), *dw0 = frand((size_t)OC * C, 1.0f);
    float *db0 = frand(OC, 1.0f);
    L.x = x, L.w = w, L.b = b, L.dy = dy, L.dinp0 = d0, L.dw0 = dw0, L.db0 = db0;
    cpu->weights_changed(cpu, NULL, 0); /* w may sit where an earlier test's weight was */
    /* the all-fp32 calls in fp32 precision, before any 16-bit call: the bits the end must give again */
    const size_t nin = (size_t)N * C, nout = (size_t)N * OC, nw = (size_t)OC * C;
    tbuf x32 = tb_of(LLM4D_F32, x, nin), dy32 = tb_of(LLM4D_F32, dy, nout), o0 = tb_new(LLM4D_F32, nout);
    tbuf di0 = tb_of(LLM4D_F32, d0, nin), dw = tb_of(LLM4D_F32, dw0, nw), db = tb_of(LLM4D_F32, db0, OC);
    tbuf o1 = tb_new(LLM4D_F32, nout), di1 = tb_dup(di0), dw1 = tb_dup(dw), db1 = tb_dup(db);
    lin_fwd(cpu, &L, o0, x32);
    lin_bwd(cpu, &L, di0, LLM4D_ADD, dw, db, dy32, x32);
    llm4d_ftype t[3];
    for (int mi = 0; mi < NMODES; mi++) {
        if (!set_prec(cpu, &MODES[mi])) continue;
        for (int c = 1; c < combo_count(2); c++) {
            combo_types(c, 2, t);
            if (lin_wanted(all, t, 2)) lin_forward_combo(cpu, ref, &L, &MODES[mi], t[0], t[1]);
        }
        for (int c = 1; c < combo_count(3); c++) {
            combo_types(c, 3, t);
            if (!lin_wanted(all, t, 3)) continue;
            lin_backward_combo(cpu, ref, &L, &MODES[mi], t[0], t[1], t[2], LLM4D_ADD);
            lin_backward_combo(cpu, ref, &L, &MODES[mi], t[0], t[1], t[2], LLM4D_WRITE);
        }
    }
    set_prec(cpu, &MODES[0]);
    lin_fwd(cpu, &L, o1, x32);
    lin_bwd(cpu, &L, di1, LLM4D_ADD, dw1, db1, dy32, x32);
    check(same_bits(o0, o1) && same_bits(di0, di1) && same_bits(dw, dw1) && same_bits(db, db1),
          "%s: back in fp32 precision after the 16-bit calls, the all-fp32 calls give the bits they gave before",
          L.tag);
    free(x), free(w), free(b), free(dy), free(d0), free(dw0), free(db0);
    tb_free(&x32), tb_free(&dy32), tb_free(&o0), tb_free(&di0), tb_free(&dw), tb_free(&db), tb_free(&o1);
    tb_free(&di1), tb_free(&dw1), tb_free(&db1);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* attention */

/* The format of type t as attn_bound.h's rounding of a stored output ({0, 0}: fp32). */
static lp_format fmt_of_type(llm4d_ftype t) {
    return t == LLM4D_BF16 ? (lp_format){1.0 / 256, 0.0} : t == LLM4D_F16 ? (lp_format){1.0 / 2048, 0x1p-25}
                                                                          : (lp_format){0.0, 0.0};
}
/* The format of the GEMM operands in precision p. */
static lp_format fmt_of_prec(llm4d_precision p) {
    return p == LLM4D_PREC_BF16 ? fmt_of_type(LLM4D_BF16) : p == LLM4D_PREC_FP16 ? fmt_of_type(LLM4D_F16)
                                                                                 : fmt_of_type(LLM4D_F32);
}

/* One combination of types: qkv tq, out to, dout ty, dqkv td; the reference's results once, then every precision. */
static void attn_combo(llm4d_backend *cpu, llm4d_backend *ref, llm4d_attn_shape s, const llm4d_dropout *drop,
                       const float *qkv32, const float *dout32, const char *tag, llm4d_ftype tq, llm4d_ftype to,
                       llm4d_ftype ty, llm4d_ftype td) {
    const size_t nqkv = LLM4D_ATTN_QKV_ELEMS(s), nout = (size_t)s.B * s.T * s.NH * s.HS;
    const size_t nlse = (size_t)s.B * s.NH * s.T;
    char how[96];
    snprintf(how, sizeof how, "[qkv %s, out %s, dout %s, dqkv %s]", tname(tq), tname(to), tname(ty), tname(td));
    tbuf q = tb_of(tq, qkv32, nqkv), q32 = tb_wide(q), dy = tb_of(ty, dout32, nout), dy32 = tb_wide(dy);
    /* the reference: its typed results, and its fp32 output of the same inputs (the exact out of the bound) */
    tbuf orf = tb_new(to, nout), oex = tb_new(LLM4D_F32, nout), dr = tb_new(td, nqkv);
    float *lr = falloc(nlse), *lx = falloc(nlse);
    ref->attention_forward(ref, tb_t(orf), lr, tb_ct(q), s, drop);
    ref->attention_forward(ref, tb_t(oex), lx, tb_ct(q), s, drop);
    ref->attention_backward(ref, tb_t(dr), tb_ct(dy), tb_ct(orf), tb_ct(q), lr, s, drop);
    tbuf lref = {lr, LLM4D_F32, nlse};
    for (int mi = 0; mi < NMODES; mi++) {
        const prec_mode *m = &MODES[mi];
        if (!set_prec(cpu, m)) continue;
        tbuf oc = tb_new(to, nout), so1 = tb_new(LLM4D_F32, nout), so2 = tb_new(LLM4D_F32, nout);
        tbuf lc = tb_new(LLM4D_F32, nlse), sl1 = tb_new(LLM4D_F32, nlse), sl2 = tb_new(LLM4D_F32, nlse);
        float *junk = frand(nqkv, 1.0f); /* backward writes dqkv: it starts from garbage */
        tbuf dc = tb_of(td, junk, nqkv), sd1 = tb_of(LLM4D_F32, junk, nqkv), sd2 = tb_dup(sd1);
        cpu->attention_forward(cpu, tb_t(so1), tb_f(sl1), tb_ct(q32), s, drop); /* fp32, before the 16-bit call */
        cpu->attention_forward(cpu, tb_t(oc), tb_f(lc), tb_ct(q), s, drop);
        tbuf oc32 = tb_wide(oc); /* backward's `out`: this forward's, as the model keeps it */
        cpu->attention_backward(cpu, tb_t(sd1), tb_ct(dy32), tb_ct(oc32), tb_ct(q32), tb_f(lc), s, drop);
        cpu->attention_backward(cpu, tb_t(dc), tb_ct(dy), tb_ct(oc), tb_ct(q), tb_f(lc), s, drop);
        cpu->attention_forward(cpu, tb_t(so2), tb_f(sl2), tb_ct(q32), s, drop);
        cpu->attention_backward(cpu, tb_t(sd2), tb_ct(dy32), tb_ct(oc32), tb_ct(q32), tb_f(lc), s, drop);
        double *bo = calloc(nout, sizeof(double)), *bl = calloc(nlse, sizeof(double));
        double *bd = calloc(nqkv, sizeof(double)), *md = calloc(nqkv, sizeof(double));
        if (!bo || !bl || !bd || !md) exit(1);
        attn_bounds(tb_f(q32), tb_f(dy32), tb_f(oex), s, drop, fmt_of_prec(m->p), fmt_of_type(to), bo, bl, bd, md);
        for (size_t i = 0; i < nqkv; i++) bd[i] += 1e-5 * md[i];
        char det[320] = "";
        int ok = judge(det, sizeof det, "out", oc, tb_compare(oc, orf, 1, 0, bo, 1.25), "attention_forward");
        ok &= judge(det, sizeof det, "lse", lc, tb_compare(lc, lref, 0, 0, bl, 1.25), "attention_forward");
        ok &= judge(det, sizeof det, "dqkv", dc, tb_compare(dc, dr, 1, 0, bd, 1.25), "attention_backward");
        check(ok, "%s %s precision %s: cpu vs ref, err/allowed:%s", tag, m->name, how, det);
        check(rounded_from(oc, so1) && same_bits(lc, sl1) && rounded_from(dc, sd1),
              "%s %s precision %s: the fp32 path on the same values, rounded once, bit for bit (lse equal)", tag,
              m->name, how);
        check(same_bits(so1, so2) && same_bits(sl1, sl2) && same_bits(sd1, sd2),
              "%s %s precision %s: an fp32 call after it gives the bits of the fp32 call before", tag, m->name, how);
        free(bo), free(bl), free(bd), free(md), free(junk);
        tb_free(&oc), tb_free(&so1), tb_free(&so2), tb_free(&lc), tb_free(&sl1), tb_free(&sl2), tb_free(&dc);
        tb_free(&sd1), tb_free(&sd2), tb_free(&oc32);
    }
    set_prec(cpu, &MODES[0]);
    free(lr), free(lx);
    tb_free(&q), tb_free(&q32), tb_free(&dy), tb_free(&dy32), tb_free(&orf), tb_free(&oex), tb_free(&dr);
}

/* The mask kept as bits (llm4d_dropout.bits) with the model's 16-bit tensors, in each precision: forward storing
 * the bits gives the output and lse of forward without them, and backward reading them the gradient of backward
 * drawing the mask again, bit for bit. */
static void attn_bits(llm4d_backend *cpu, llm4d_attn_shape s, const llm4d_dropout *drop, const float *qkv32,
                      const float *dout32, const char *tag) {
    const size_t nqkv = LLM4D_ATTN_QKV_ELEMS(s), nout = (size_t)s.B * s.T * s.NH * s.HS;
    const size_t nlse = (size_t)s.B * s.NH * s.T, nbits = (size_t)s.B * s.NH * s.T * LLM4D_MASK_WORDS(s.T);
    for (int ty = LLM4D_BF16; ty <= LLM4D_F16; ty++)
        for (int mi = 0; mi < NMODES; mi++) {
            if (!set_prec(cpu, &MODES[mi])) continue;
            const llm4d_ftype t = (llm4d_ftype)ty;
            uint32_t *bits = malloc(nbits * sizeof *bits);
            if (!bits) exit(1);
            for (size_t i = 0; i < nbits; i++) bits[i] = 0xA5A5A5A5u; /* garbage forward must overwrite */
            llm4d_dropout kept = *drop;
            kept.bits = bits;
            tbuf q = tb_of(t, qkv32, nqkv), dy = tb_of(t, dout32, nout), o1 = tb_new(t, nout), o2 = tb_new(t, nout);
            tbuf d1 = tb_new(t, nqkv), d2 = tb_new(t, nqkv);
            float *l1 = falloc(nlse), *l2 = falloc(nlse);
            cpu->attention_forward(cpu, tb_t(o1), l1, tb_ct(q), s, drop);
            cpu->attention_forward(cpu, tb_t(o2), l2, tb_ct(q), s, &kept);
            cpu->attention_backward(cpu, tb_t(d1), tb_ct(dy), tb_ct(o1), tb_ct(q), l1, s, drop);
            cpu->attention_backward(cpu, tb_t(d2), tb_ct(dy), tb_ct(o1), tb_ct(q), l1, s, &kept);
            check(same_bits(o1, o2) && !memcmp(l1, l2, nlse * sizeof(float)) && same_bits(d1, d2),
                  "%s %s precision, all %s: the mask kept as bits = drawn again, forward and backward, bit for bit",
                  tag, MODES[mi].name, tname(t));
            free(bits), free(l1), free(l2);
            tb_free(&q), tb_free(&dy), tb_free(&o1), tb_free(&o2), tb_free(&d1), tb_free(&d2);
        }
    set_prec(cpu, &MODES[0]);
}

static void test_attention(llm4d_backend *cpu, llm4d_backend *ref, llm4d_attn_shape s, float p) {
    int64_t sids[4] = {6, 2, 0, 11};
    const llm4d_dropout drop = {p, 5, llm4d_rng_stream(LLM4D_RNG_DROPOUT, 4, LLM4D_DROP_ATTN_PROBS, 1), sids, s.T, 0,
                                NULL};
    char tag[160];
    snprintf(tag, sizeof tag, "attention B=%d T=%d NH=%d NKV=%d HS=%d head0=%d/%d p=%.1f", s.B, s.T, s.NH,
             llm4d_attn_nkv(s), s.HS, s.head0, s.NH_total, p);
    const size_t nqkv = LLM4D_ATTN_QKV_ELEMS(s), nout = (size_t)s.B * s.T * s.NH * s.HS;
    const size_t nlse = (size_t)s.B * s.NH * s.T;
    float *qkv = frand(nqkv, 1.0f), *dout = frand(nout, 1.0f);
    /* the all-fp32 calls before any 16-bit one */
    float *o0 = falloc(nout), *l0 = falloc(nlse), *d0 = falloc(nqkv), *o1 = falloc(nout), *l1 = falloc(nlse);
    float *d1 = falloc(nqkv);
    cpu->attention_forward(cpu, llm4d_t32(o0), l0, llm4d_ct32(qkv), s, &drop);
    cpu->attention_backward(cpu, llm4d_t32(d0), llm4d_ct32(dout), llm4d_ct32(o0), llm4d_ct32(qkv), l0, s, &drop);
    const llm4d_ftype F = LLM4D_F32, B = LLM4D_BF16, H = LLM4D_F16;
    const llm4d_ftype combos[][4] = {{B, B, B, B}, {H, H, H, H}, {B, F, F, F}, {F, B, F, F}, {F, F, B, F},
                                     {F, F, F, B}, {H, F, F, F}, {F, H, F, F}, {F, F, H, F}, {F, F, F, H},
                                     {B, H, B, H}, {H, B, H, B}};
    for (size_t c = 0; c < sizeof combos / sizeof combos[0]; c++)
        attn_combo(cpu, ref, s, &drop, qkv, dout, tag, combos[c][0], combos[c][1], combos[c][2], combos[c][3]);
    if (p > 0.0f) attn_bits(cpu, s, &drop, qkv, dout, tag);
    cpu->attention_forward(cpu, llm4d_t32(o1), l1, llm4d_ct32(qkv), s, &drop);
    cpu->attention_backward(cpu, llm4d_t32(d1), llm4d_ct32(dout), llm4d_ct32(o1), llm4d_ct32(qkv), l1, s, &drop);
    check(!memcmp(o0, o1, nout * sizeof(float)) && !memcmp(l0, l1, nlse * sizeof(float)) &&
              !memcmp(d0, d1, nqkv * sizeof(float)),
          "%s: back in fp32 precision after the 16-bit calls, the all-fp32 calls give the bits they gave before", tag);
    free(qkv), free(dout), free(o0), free(l0), free(d0), free(o1), free(l1), free(d1);
}

int main(void) {
#ifdef LLM4D_AMX_EMULATE
    if (!__builtin_cpu_supports("avx512bf16")) {
        printf("skipped: this CPU has no AVX512-BF16, which the AMX path's packers use\n");
        return 77;
    }
#endif
    llm4d_backend *cpu, *ref;
    llm4d_err err = {0};
    if (llm4d_backend_cpu_create(&cpu, 0, &err) != LLM4D_OK || llm4d_backend_ref_create(&ref, &err) != LLM4D_OK) {
        printf("FAIL - backend creation: %s\n0 passed, 1 failed\n", err.msg);
        return 1;
    }
    printf("# cpu backend, %d threads\n", cpu->nthreads);
    /* every combination of types on small layers; the model's on the shapes that take other GEMM paths: more tokens
     * than one oneDNN block, and (on AVX2: ONEDNN_MAX_CPU_ISA=AVX2) the input gradient through blocks of the
     * transposed weight (C a multiple of 512, few tokens) and the forward in blocks of 2048 output columns */
    test_linear(cpu, ref, 37, 50, 23, 1, LLM4D_ACT_NONE, 1);
    test_linear(cpu, ref, 37, 50, 23, 0, LLM4D_ACT_GELU, 1);
    test_linear(cpu, ref, 1, 1, 1, 1, LLM4D_ACT_NONE, 0);
    test_linear(cpu, ref, 136, 64, 200, 1, LLM4D_ACT_GELU, 0);
    test_linear(cpu, ref, 20, 1024, 37, 1, LLM4D_ACT_NONE, 0);
    test_linear(cpu, ref, 24, 40, 5000, 1, LLM4D_ACT_GELU, 0);
    /* the query block (128) and key block (256) crossed with tails; whole AMX tiles (T, HS multiples of 32);
     * grouped-query attention (the last: NKV, 0 = NH) on whole tiles, and multi-query across a row block */
    const llm4d_attn_shape shapes[] = {{2, 130, 2, 16, 1, 4, 0}, {1, 300, 2, 16, 0, 2, 0}, {1, 96, 3, 32, 0, 3, 0},
                                       {1, 96, 4, 32, 0, 4, 2},  {1, 130, 4, 16, 4, 8, 1}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        test_attention(cpu, ref, shapes[i], 0.0f);
        test_attention(cpu, ref, shapes[i], 0.1f);
    }
    char gemms[512];
    cpu->describe_gemms(cpu, gemms, sizeof gemms);
    printf("# %s\n", gemms);
#ifdef LLM4D_AMX_EMULATE
    check(strstr(gemms, "linear GEMMs: llm4d's AMX kernel") && strstr(gemms, "attention GEMMs: llm4d's AMX kernel"),
          "the AMX paths ran (emulated tile kernel): %s", gemms);
#endif
    print_worst();
    cpu->destroy(cpu);
    ref->destroy(ref);
    return check_summary();
}
