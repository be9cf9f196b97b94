/* test_kernels_llama.c — the Llama family's kernels (issue 47: rmsnorm, rope, swiglu and grouped-query attention,
 * forward and backward): the fast CPU backend against the reference backend, and both against PyTorch.
 *
 * cpu vs ref, fp32, on sizes that are not multiples of the SIMD width or of the weight gradient's column blocks (64),
 * with the test_kernels.c conventions: normwise max|a-b|/max|b| <= 1e-5; outputs that are written start from
 * garbage, gradients that are added start from random values and a second backward must add the increment again;
 * the backward kernels that write must write the same bits again. RoPE also: rows ld apart whose elements past
 * the NH heads stay untouched, in place equal to out of place bit for bit, sequence-parallel slices (tok0) whose
 * positions wrap at T, positions near 70000 (angles where an fp32 angle would be 10^-2 off), and two properties no
 * implementation detail can fake: backward(forward(x)) = x (a rotation's transpose is its inverse) and each pair's
 * norm kept. The weight gradient of RMSNorm and everything else give the same bits with 1 and 2 threads. The
 * planner's recorder writes each call with its cost key and bytes, and its replay makes each again.
 *
 * The outside oracle: each case's inputs and both backends' outputs go to files, and tests/llama_torch_ref.py
 * recomputes them in PyTorch (float64): RMSNorm by its formula with autograd (the torch of Debian has no
 * F.rms_norm), RoPE as the complex product (x_i + j x_{i+HS/2}) e^{j pos theta_i} with autograd through it, SwiGLU
 * as F.silu(gate) * up with autograd, grouped-query causal attention with K and V expanded by repeat_interleave and
 * autograd through it; its check lines are counted here. The 16-bit tensors of these kernels are
 * test_kernels16.c's; the finite-difference checks of the backward passes are test_gradcheck.c's. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "core/rng.h"
#include "plan/record.h"
#include "plan/replay.h"
#include "check.h"

#define TOL 1e-5

static uint64_t g_stream = 1;

/* shift + scale * normal(0, 1), a fresh stream per call */
static float *frand(size_t n, float scale, float shift) {
    float *p = falloc(n);
    const uint64_t st = g_stream++;
    for (size_t i = 0; i < n; i++) p[i] = shift + scale * llm4d_rng_normal(2718, st, i);
    return p;
}

static float *fdup(const float *x, size_t n) {
    float *p = falloc(n);
    memcpy(p, x, n * sizeof(float));
    return p;
}

static double relerr(const float *a, const float *b, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - b[i]);
        if (!(d <= num)) num = d; /* NaN propagates as a failure */
        if (fabs(b[i]) > den) den = fabs(b[i]);
    }
    return den > 0 ? num / den : num;
}

static void cmp(const char *what, const float *a, const float *b, size_t n) {
    const double e = relerr(a, b, n);
    check(e <= TOL, "%s: rel err %.2e (tol %.0e)", what, e, TOL);
}

/* second call doubles the increment: (g2 - g0) == 2 (g1 - g0) */
static void cmp_twice(const char *what, const float *g0, const float *g1, const float *g2, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double d1 = (double)g1[i] - g0[i], d2 = (double)g2[i] - g0[i];
        num = fmax(num, fabs(d2 - 2 * d1));
        den = fmax(den, fabs(d1));
    }
    check(den > 0 && num <= 1e-5 * den + 1e-6 * fmax(1.0, den),
          "%s: backward twice accumulates twice (err %.2e of %.2e)", what, num, den);
}

static int same(const float *a, const float *b, size_t n) { return !memcmp(a, b, n * sizeof(float)); }

/* ---------------------------------------------------------------------------------------------------------- */
/* the files PyTorch reads: <dir>/cases.txt, one line per case ("kind name sizes..."), and <dir>/<name>.<t>.f32 */

static char g_dir[256];
static FILE *g_cases;

static void dump(const char *name, const char *t, const float *p, size_t n) {
    if (!g_cases) return;
    char path[512];
    snprintf(path, sizeof path, "%s/%s.%s.f32", g_dir, name, t);
    FILE *f = fopen(path, "wb");
    const int ok = f && fwrite(p, sizeof(float), n, f) == n;
    if (f) fclose(f);
    if (!ok) check(0, "writing %s", path);
}

/* ---------------------------------------------------------------------------------------------------------- */

/* x ~ scale (normal(0, 4) + 0.5): a scale of 1e-3 makes eps a third of mean(x^2), where a wrong eps shows */
static void test_rmsnorm(llm4d_backend *cpu, llm4d_backend *ref, int N, int C, float eps, float scale) {
    char tag[96], what[160];
    snprintf(tag, sizeof tag, "rmsnorm N=%d C=%d eps=%g x scale %g", N, C, eps, scale);
    const size_t n = (size_t)N * C;
    float *x = frand(n, 2.0f * scale, 0.5f * scale), *w = frand(C, 1.0f, 1.0f), *dy = frand(n, 1.0f, 0.0f);
    float *o1 = frand(n, 1.0f, 0.0f), *o2 = falloc(n), *r1 = frand(N, 1.0f, 0.0f), *r2 = falloc(N);
    cpu->rmsnorm_forward(cpu, llm4d_t32(o1), r1, llm4d_ct32(x), w, N, C, eps); /* o1, r1 overwritten */
    ref->rmsnorm_forward(ref, llm4d_t32(o2), r2, llm4d_ct32(x), w, N, C, eps);
    snprintf(what, sizeof what, "%s forward out", tag), cmp(what, o1, o2, n);
    snprintf(what, sizeof what, "%s forward rstd", tag), cmp(what, r1, r2, N);
    float *dx0 = frand(n, 1.0f, 0.0f), *dw0 = frand(C, 1.0f, 0.0f);
    float *dx1 = fdup(dx0, n), *dw1 = fdup(dw0, C), *dx2 = fdup(dx0, n), *dw2 = fdup(dw0, C);
    cpu->rmsnorm_backward(cpu, llm4d_t32(dx1), dw1, llm4d_ct32(dy), llm4d_ct32(x), w, r2, N, C);
    ref->rmsnorm_backward(ref, llm4d_t32(dx2), dw2, llm4d_ct32(dy), llm4d_ct32(x), w, r2, N, C);
    snprintf(what, sizeof what, "%s backward dinp (added)", tag), cmp(what, dx1, dx2, n);
    snprintf(what, sizeof what, "%s backward dw (added)", tag), cmp(what, dw1, dw2, C);
    float *dx3 = fdup(dx1, n), *dw3 = fdup(dw1, C);
    cpu->rmsnorm_backward(cpu, llm4d_t32(dx3), dw3, llm4d_ct32(dy), llm4d_ct32(x), w, r2, N, C);
    snprintf(what, sizeof what, "%s dinp", tag), cmp_twice(what, dx0, dx1, dx3, n);
    snprintf(what, sizeof what, "%s dw", tag), cmp_twice(what, dw0, dw1, dw3, C);
    /* the same bits with one thread */
    float *o4 = falloc(n), *r4 = falloc(N), *dx4 = fdup(dx0, n), *dw4 = fdup(dw0, C);
    const int nt = omp_get_max_threads();
    omp_set_num_threads(1);
    cpu->rmsnorm_forward(cpu, llm4d_t32(o4), r4, llm4d_ct32(x), w, N, C, eps);
    cpu->rmsnorm_backward(cpu, llm4d_t32(dx4), dw4, llm4d_ct32(dy), llm4d_ct32(x), w, r2, N, C);
    omp_set_num_threads(nt);
    check(same(o4, o1, n) && same(r4, r1, N) && same(dx4, dx1, n) && same(dw4, dw1, C),
          "%s: 1 thread gives the bits of %d", tag, nt);
    /* for PyTorch: the backward from zeros */
    if (g_cases) {
        char name[64];
        snprintf(name, sizeof name, "rms_%d_%d_%g", N, C, scale);
        fprintf(g_cases, "rmsnorm %s %d %d %.9g\n", name, N, C, eps);
        dump(name, "x", x, n), dump(name, "w", w, C), dump(name, "dy", dy, n);
        llm4d_backend *be[2] = {cpu, ref};
        const char *side[2] = {"cpu", "ref"};
        for (int k = 0; k < 2; k++) {
            float *o = falloc(n), *r = falloc(N), *dx = falloc(n), *dw = falloc(C);
            be[k]->rmsnorm_forward(be[k], llm4d_t32(o), r, llm4d_ct32(x), w, N, C, eps);
            be[k]->rmsnorm_backward(be[k], llm4d_t32(dx), dw, llm4d_ct32(dy), llm4d_ct32(x), w, r, N, C);
            char t[16];
            snprintf(t, sizeof t, "%s_out", side[k]), dump(name, t, o, n);
            snprintf(t, sizeof t, "%s_rstd", side[k]), dump(name, t, r, N);
            snprintf(t, sizeof t, "%s_dx", side[k]), dump(name, t, dx, n);
            snprintf(t, sizeof t, "%s_dw", side[k]), dump(name, t, dw, C);
            free(o), free(r), free(dx), free(dw);
        }
    }
    free(x), free(w), free(dy), free(o1), free(o2), free(r1), free(r2), free(dx0), free(dw0), free(dx1), free(dw1);
    free(dx2), free(dw2), free(dx3), free(dw3), free(o4), free(r4), free(dx4), free(dw4);
}

static void test_rope(llm4d_backend *cpu, llm4d_backend *ref, llm4d_rope_shape s) {
    char tag[160], what[224];
    snprintf(tag, sizeof tag, "rope N=%d NH=%d HS=%d ld=%d T=%d tok0=%lld theta=%g", s.N, s.NH, s.HS, s.ld, s.T,
             (long long)s.tok0, s.theta);
    const size_t n = (size_t)s.N * s.ld, width = (size_t)s.NH * s.HS;
    float *x = frand(n, 1.0f, 0.0f), *o1 = frand(n, 1.0f, 0.0f), *o2 = fdup(o1, n), *keep = fdup(o1, n);
    cpu->rope_forward(cpu, llm4d_t32(o1), llm4d_ct32(x), s);
    ref->rope_forward(ref, llm4d_t32(o2), llm4d_ct32(x), s);
    snprintf(what, sizeof what, "%s forward", tag), cmp(what, o1, o2, n);
    int untouched = 1;
    for (size_t i = 0; i < n; i++)
        if (i % s.ld >= width) untouched &= o1[i] == keep[i] && o2[i] == keep[i];
    check(untouched, "%s: the elements of a row past its heads are not touched", tag);
    float *io = fdup(x, n);
    cpu->rope_forward(cpu, llm4d_t32(io), llm4d_ct32(io), s);
    int inplace = 1;
    for (size_t i = 0; i < n; i++) inplace &= i % s.ld < width ? io[i] == o1[i] : io[i] == x[i];
    check(inplace, "%s: in place = out of place bit for bit, the rest of each row as it was", tag);
    /* the rotation keeps each pair's norm; backward (the transpose) turns it back */
    double worst = 0.0;
    const int half = s.HS / 2;
    for (int r = 0; r < s.N; r++)
        for (int h = 0; h < s.NH; h++)
            for (int i = 0; i < half; i++) {
                const size_t a = (size_t)r * s.ld + (size_t)h * s.HS + i, b = a + half;
                const double n0 = hypot(x[a], x[b]), n1 = hypot(o1[a], o1[b]);
                worst = fmax(worst, fabs(n1 - n0) / fmax(n0, 1e-30));
            }
    check(worst <= 1e-6, "%s: each pair's norm kept (worst relative change %.1e)", tag, worst);
    float *back1 = frand(n, 1.0f, 0.0f), *back2 = fdup(back1, n);
    cpu->rope_backward(cpu, llm4d_t32(back1), llm4d_ct32(o1), s);
    ref->rope_backward(ref, llm4d_t32(back2), llm4d_ct32(o1), s);
    snprintf(what, sizeof what, "%s backward", tag), cmp(what, back1, back2, n);
    double e = 0.0, m = 0.0;
    for (size_t i = 0; i < n; i++)
        if (i % s.ld < width) e = fmax(e, fabs((double)back1[i] - x[i])), m = fmax(m, fabs(x[i]));
    check(e <= 1e-6 * m, "%s: backward(forward(x)) = x (err %.1e of %.1e)", tag, e, m);
    float *back3 = fdup(back1, n);
    cpu->rope_backward(cpu, llm4d_t32(back3), llm4d_ct32(o1), s); /* written: again, the same bits */
    float *bio = fdup(o1, n);
    cpu->rope_backward(cpu, llm4d_t32(bio), llm4d_ct32(bio), s);
    int bsame = same(back3, back1, n);
    for (size_t i = 0; i < n; i++) bsame &= i % s.ld < width ? bio[i] == back1[i] : 1;
    check(bsame, "%s: backward written (again the same bits), in place = out of place", tag);
    const int nt = omp_get_max_threads();
    float *o4 = fdup(keep, n);
    omp_set_num_threads(1);
    cpu->rope_forward(cpu, llm4d_t32(o4), llm4d_ct32(x), s);
    omp_set_num_threads(nt);
    check(same(o4, o1, n), "%s: 1 thread gives the bits of %d", tag, nt);
    if (g_cases) {
        char name[64];
        snprintf(name, sizeof name, "rope_%d_%d_%d_%lld", s.N, s.HS, s.T, (long long)s.tok0);
        fprintf(g_cases, "rope %s %d %d %d %d %d %lld %.9g\n", name, s.N, s.NH, s.HS, s.ld, s.T, (long long)s.tok0,
                s.theta);
        float *dy = frand(n, 1.0f, 0.0f), *d1 = falloc(n), *d2 = falloc(n);
        cpu->rope_backward(cpu, llm4d_t32(d1), llm4d_ct32(dy), s);
        ref->rope_backward(ref, llm4d_t32(d2), llm4d_ct32(dy), s);
        dump(name, "x", x, n), dump(name, "dy", dy, n), dump(name, "cpu_out", o1, n), dump(name, "ref_out", o2, n);
        dump(name, "cpu_dx", d1, n), dump(name, "ref_dx", d2, n);
        free(dy), free(d1), free(d2);
    }
    free(x), free(o1), free(o2), free(keep), free(io), free(back1), free(back2), free(back3), free(bio), free(o4);
}

static void test_swiglu(llm4d_backend *cpu, llm4d_backend *ref, int N, int F) {
    char tag[64], what[128];
    snprintf(tag, sizeof tag, "swiglu N=%d F=%d", N, F);
    const size_t n = (size_t)N * F;
    float *x = frand(2 * n, 3.0f, 0.0f), *dy = frand(n, 1.0f, 0.0f);
    /* gates at the exponential's clamps and in the tails, and tiny ones */
    const float sp[] = {0.0f, 1e-8f, -1e-8f, 30.0f, -30.0f, 90.0f, -90.0f, 200.0f, -200.0f, 15.0f, -15.0f, -1.2785f};
    for (size_t k = 0; k < sizeof sp / sizeof sp[0] && k < n; k++) x[k / F * 2 * F + k % F] = sp[k];
    float *o1 = frand(n, 1.0f, 0.0f), *o2 = falloc(n), *d1 = frand(2 * n, 1.0f, 0.0f), *d2 = falloc(2 * n);
    cpu->swiglu_forward(cpu, llm4d_t32(o1), llm4d_ct32(x), N, F);
    ref->swiglu_forward(ref, llm4d_t32(o2), llm4d_ct32(x), N, F);
    snprintf(what, sizeof what, "%s forward", tag), cmp(what, o1, o2, n);
    cpu->swiglu_backward(cpu, llm4d_t32(d1), llm4d_ct32(x), llm4d_ct32(dy), N, F);
    ref->swiglu_backward(ref, llm4d_t32(d2), llm4d_ct32(x), llm4d_ct32(dy), N, F);
    snprintf(what, sizeof what, "%s backward", tag), cmp(what, d1, d2, 2 * n);
    /* each half on its own scale (the up gradients are silu-sized, the gate gradients can be much smaller) */
    double eg = 0.0, mg = 0.0;
    for (size_t i = 0; i < 2 * n; i++)
        if (i / F % 2 == 0) eg = fmax(eg, fabs((double)d1[i] - d2[i])), mg = fmax(mg, fabs(d2[i]));
    check(eg <= TOL * mg, "%s backward, the gates' part alone: rel err %.2e", tag, mg > 0 ? eg / mg : eg);
    float *d3 = fdup(d1, 2 * n);
    cpu->swiglu_backward(cpu, llm4d_t32(d3), llm4d_ct32(x), llm4d_ct32(dy), N, F);
    check(same(d3, d1, 2 * n), "%s: backward written (again the same bits)", tag);
    if (g_cases) {
        char name[64];
        snprintf(name, sizeof name, "swiglu_%d_%d", N, F);
        fprintf(g_cases, "swiglu %s %d %d\n", name, N, F);
        dump(name, "x", x, 2 * n), dump(name, "dy", dy, n), dump(name, "cpu_out", o1, n), dump(name, "ref_out", o2, n);
        dump(name, "cpu_dx", d1, 2 * n), dump(name, "ref_dx", d2, 2 * n);
    }
    free(x), free(dy), free(o1), free(o2), free(d1), free(d2), free(d3);
}

/* The planner's recorder (methods.h's entries: the cost keys) and its replay on the cpu backend: each call recorded
 * with its op, sizes, replay values and typed arguments' types, its bytes those of its operands counted by hand
 * (each element read or written once, the input of RMSNorm's forward twice, its input gradient read and written),
 * and each made again by the replay. */
static void test_recorder(llm4d_backend *cpu) {
    llm4d_rec rec = {0};
    llm4d_backend *rb = NULL;
    llm4d_err err = {0};
    if (llm4d_rec_backend_create(&rb, &rec, NULL, &err) != LLM4D_OK) {
        check(0, "the recording backend: %s", err.msg);
        return;
    }
    enum { N = 6, C = 10, F = 7 };
    const llm4d_rope_shape rs = {.N = N, .NH = 2, .HS = 4, .ld = 12, .T = 4, .tok0 = 3, .theta = 1e4f};
    void *p[10];
    const size_t bytes[10] = {N * C * 2, N * 4, N * C * 4, C * 4, N * C * 4, C * 4, N * C * 4, N * 12 * 4,
                              N * 2 * F * 4, N * F * 4};
    for (int i = 0; i < 10; i++) p[i] = rb->alloc(rb, NULL, LLM4D_MEM_ACTIVATIONS, bytes[i]);
    rb->rmsnorm_forward(rb, llm4d_t(p[0], LLM4D_BF16), p[1], llm4d_ct32(p[2]), p[3], N, C, 1e-5f);
    rb->rmsnorm_backward(rb, llm4d_t32(p[4]), p[5], llm4d_ct32(p[6]), llm4d_ct32(p[2]), p[3], p[1], N, C);
    rb->rope_forward(rb, llm4d_t32(p[7]), llm4d_ct32(p[7]), rs);
    rb->rope_backward(rb, llm4d_t32(p[7]), llm4d_ct32(p[7]), rs);
    rb->swiglu_forward(rb, llm4d_t32(p[9]), llm4d_ct32(p[8]), N, F);
    rb->swiglu_backward(rb, llm4d_t32(p[8]), llm4d_ct32(p[8]), llm4d_ct32(p[9]), N, F);
    const int ops[6] = {LLM4D_RC_RMSNORM_FWD, LLM4D_RC_RMSNORM_BWD, LLM4D_RC_ROPE_FWD, LLM4D_RC_ROPE_BWD,
                        LLM4D_RC_SWIGLU_FWD, LLM4D_RC_SWIGLU_BWD};
    const double want[6] = {(2.0 + 2 * 4) * N * C, (2 * 4.0 + 4 + 4) * N * C, 8.0 * N * 2 * 4, 8.0 * N * 2 * 4,
                            (4.0 + 2 * 4) * N * F, (2 * 4.0 + 2 * 4 + 4) * N * F};
    int ok = rec.n == 6 && !rec.failed;
    for (int i = 0; ok && i < 6; i++) {
        const llm4d_rc_call *c = &rec.calls[i];
        ok &= c->op == ops[i] && llm4d_rc_kind(c) == LLM4D_WORK_ELEM && llm4d_rc_bytes(c) == want[i];
        if (i < 2) ok &= c->d[0] == N && c->d[1] == C && c->d[2] == 0;
        else if (i < 4) ok &= c->d[0] == N && c->d[1] == 2 && c->d[2] == 4 && c->d[3] == 12 && c->aux[0] == 4 &&
                              c->aux[1] == 3 && c->p[0] == c->p[1];
        else ok &= c->d[0] == N && c->d[1] == F && c->d[2] == 0;
    }
    ok &= rec.n == 6 && rec.calls[0].ty == LLM4D_BF16 && rec.calls[1].ty == 0; /* slot 0 bf16, the rest fp32 */
    check(ok, "recorder: %d calls, each with its op, sizes, replay values, types and bytes", rec.n);
    llm4d_replay rp;
    double s[6][LLM4D_WORK_N];
    if (ok && llm4d_replay_init(&rp, &rec, cpu, &err) == LLM4D_OK) {
        llm4d_replay_run(&rp, 0, rec.n, s);
        int made = 1;
        for (int i = 0; i < 6; i++) made &= s[i][0] >= 0 && s[i][LLM4D_WORK_ELEM] > 0;
        check(made, "replay: the 6 calls made again on the cpu backend, timed as element-wise work");
        llm4d_replay_free(&rp);
    } else {
        check(0, "replay: %s", ok ? err.msg : "nothing to replay");
    }
    rb->destroy(rb);
    llm4d_rec_free(&rec);
}

/* Grouped-query attention (backend.h llm4d_attn_shape.NKV): qkv [B, T, (NH + 2 NKV) HS], query head h reading kv
 * head h / (NH / NKV). cpu vs ref in fp32, with and without dropout; the same bits with 1 thread as with 2 (a kv
 * head's dK and dV are summed over its group in a fixed order); and against multi-head attention on K and V
 * repeated per query head (Hugging Face's repeat_kv, the MHA path as the oracle): the same out and lse bit for bit
 * (the same products), dQ the same, and a kv head's dK and dV the sum of its query heads' (in double here). The
 * case without dropout goes to PyTorch. */
static void test_gqa_attention(llm4d_backend *cpu, llm4d_backend *ref, int B, int T, int NH, int NKV, int HS) {
    char tag[96], what[192];
    snprintf(tag, sizeof tag, "gqa attention B=%d T=%d NH=%d NKV=%d HS=%d", B, T, NH, NKV, HS);
    const int grp = NH / NKV, C = NH * HS, Ckv = NKV * HS, C3 = C + 2 * Ckv;
    const llm4d_attn_shape s = {.B = B, .T = T, .NH = NH, .HS = HS, .head0 = NH, .NH_total = 3 * NH, .NKV = NKV};
    const size_t nq = (size_t)B * T * C3, no = (size_t)B * T * C, nl = (size_t)B * NH * T;
    int64_t sids[4] = {7, 1, 30, 2};
    float *qkv = frand(nq, 1.0f, 0.0f), *dy = frand(no, 1.0f, 0.0f);
    for (int pass = 0; pass < 2; pass++) {
        const float p = pass ? 0.1f : 0.0f;
        const llm4d_dropout drop = {p, 91, llm4d_rng_stream(LLM4D_RNG_DROPOUT, 1, LLM4D_DROP_ATTN_PROBS, 3), sids, T, 0,
                                    NULL};
        float *o[2], *l[2], *g[2];
        llm4d_backend *be[2] = {cpu, ref};
        for (int k = 0; k < 2; k++) {
            o[k] = frand(no, 1.0f, 0.0f), l[k] = frand(nl, 1.0f, 0.0f), g[k] = frand(nq, 1.0f, 0.0f); /* garbage */
            be[k]->attention_forward(be[k], llm4d_t32(o[k]), l[k], llm4d_ct32(qkv), s, &drop);
            be[k]->attention_backward(be[k], llm4d_t32(g[k]), llm4d_ct32(dy), llm4d_ct32(o[k]), llm4d_ct32(qkv), l[k],
                                      s, &drop);
        }
        snprintf(what, sizeof what, "%s p=%.1f cpu vs ref forward out", tag, p), cmp(what, o[0], o[1], no);
        snprintf(what, sizeof what, "%s p=%.1f cpu vs ref lse", tag, p), cmp(what, l[0], l[1], nl);
        snprintf(what, sizeof what, "%s p=%.1f cpu vs ref dqkv", tag, p), cmp(what, g[0], g[1], nq);
        /* dK, dV alone (dQ dominates a normwise error of the whole row) */
        float *kv0 = falloc((size_t)B * T * 2 * Ckv), *kv1 = falloc((size_t)B * T * 2 * Ckv);
        for (size_t r = 0; r < (size_t)B * T; r++)
            for (int c = 0; c < 2 * Ckv; c++)
                kv0[r * 2 * Ckv + c] = g[0][r * C3 + C + c], kv1[r * 2 * Ckv + c] = g[1][r * C3 + C + c];
        snprintf(what, sizeof what, "%s p=%.1f cpu vs ref dK and dV", tag, p);
        cmp(what, kv0, kv1, (size_t)B * T * 2 * Ckv);
        float *o1 = falloc(no), *l1 = falloc(nl), *g1 = falloc(nq);
        const int nt = omp_get_max_threads();
        omp_set_num_threads(1);
        cpu->attention_forward(cpu, llm4d_t32(o1), l1, llm4d_ct32(qkv), s, &drop);
        cpu->attention_backward(cpu, llm4d_t32(g1), llm4d_ct32(dy), llm4d_ct32(o1), llm4d_ct32(qkv), l1, s, &drop);
        omp_set_num_threads(nt > 1 ? nt : 2);
        float *o2 = falloc(no), *l2 = falloc(nl), *g2 = falloc(nq);
        cpu->attention_forward(cpu, llm4d_t32(o2), l2, llm4d_ct32(qkv), s, &drop);
        cpu->attention_backward(cpu, llm4d_t32(g2), llm4d_ct32(dy), llm4d_ct32(o2), llm4d_ct32(qkv), l2, s, &drop);
        omp_set_num_threads(nt);
        check(same(o1, o[0], no) && same(l1, l[0], nl) && same(g1, g[0], nq) && same(o2, o1, no) &&
                  same(l2, l1, nl) && same(g2, g1, nq),
              "%s p=%.1f: 1 thread gives the bits of %d and of %d", tag, p, nt, nt > 1 ? nt : 2);
        /* multi-head attention on K, V repeated: query head h gets kv head h / grp's */
        const llm4d_attn_shape m = {.B = B, .T = T, .NH = NH, .HS = HS, .head0 = NH, .NH_total = 3 * NH};
        const size_t nm = (size_t)B * T * 3 * C;
        float *qm = falloc(nm), *om = falloc(no), *lm = falloc(nl), *gm = falloc(nm);
        for (size_t r = 0; r < (size_t)B * T; r++)
            for (int h = 0; h < NH; h++)
                for (int c = 0; c < HS; c++) {
                    const float *in = qkv + r * C3;
                    float *out = qm + r * 3 * C;
                    out[h * HS + c] = in[h * HS + c];
                    out[C + h * HS + c] = in[C + h / grp * HS + c];
                    out[2 * C + h * HS + c] = in[C + Ckv + h / grp * HS + c];
                }
        cpu->attention_forward(cpu, llm4d_t32(om), lm, llm4d_ct32(qm), m, &drop);
        cpu->attention_backward(cpu, llm4d_t32(gm), llm4d_ct32(dy), llm4d_ct32(om), llm4d_ct32(qm), lm, m, &drop);
        check(same(om, o[0], no) && same(lm, l[0], nl), "%s p=%.1f: out and lse = multi-head attention's on K, V "
              "repeated, bit for bit", tag, p);
        float *gs = falloc(nq);
        double *acc = calloc(nq, sizeof(double));
        for (size_t r = 0; r < (size_t)B * T; r++)
            for (int h = 0; h < NH; h++)
                for (int c = 0; c < HS; c++) {
                    const float *in = gm + r * 3 * C;
                    double *out = acc + r * C3;
                    out[h * HS + c] = in[h * HS + c];
                    out[C + h / grp * HS + c] += in[C + h * HS + c];
                    out[C + Ckv + h / grp * HS + c] += in[2 * C + h * HS + c];
                }
        for (size_t i = 0; i < nq; i++) gs[i] = (float)acc[i];
        snprintf(what, sizeof what, "%s p=%.1f dqkv = multi-head attention's on K, V repeated, dK and dV summed over "
                 "each group", tag, p);
        cmp(what, g[0], gs, nq);
        if (!pass && g_cases) { /* for PyTorch */
            char name[64];
            snprintf(name, sizeof name, "attn_%d_%d_%d_%d_%d", B, T, NH, NKV, HS);
            fprintf(g_cases, "attn %s %d %d %d %d %d\n", name, B, T, NH, NKV, HS);
            dump(name, "qkv", qkv, nq), dump(name, "dy", dy, no);
            const char *side[2] = {"cpu", "ref"};
            for (int k = 0; k < 2; k++) {
                char t[16];
                snprintf(t, sizeof t, "%s_out", side[k]), dump(name, t, o[k], no);
                snprintf(t, sizeof t, "%s_lse", side[k]), dump(name, t, l[k], nl);
                snprintf(t, sizeof t, "%s_dqkv", side[k]), dump(name, t, g[k], nq);
            }
        }
        for (int k = 0; k < 2; k++) free(o[k]), free(l[k]), free(g[k]);
        free(kv0), free(kv1), free(o1), free(l1), free(g1), free(o2), free(l2), free(g2), free(qm), free(om), free(lm);
        free(gm), free(gs), free(acc);
    }
    free(qkv), free(dy);
}

/* The recorder's attention calls: multi-head attention keeps its key (d[4] = 0, NKV given as 0 or as NH: the machine
 * profiles measured before grouped-query attention stay valid) and its bytes; grouped-query attention carries NKV in
 * d[4], its bytes counted by hand (qkv and dqkv (NH + 2 NKV) HS a token, out and dout NH HS), and the replay makes
 * the call with it: on the guard backend, which refuses (aborts) a kernel whose extent (methods.h, NH + 2 NKV heads
 * of qkv) is past its allocation, so a replay that lost NKV (NH kv heads) would not pass. */
static void test_recorder_attention(void) {
    llm4d_rec rec = {0};
    llm4d_backend *rb = NULL, *guard = NULL;
    llm4d_err err = {0};
    if (llm4d_rec_backend_create(&rb, &rec, NULL, &err) != LLM4D_OK ||
        llm4d_backend_guard_create(&guard, 1, &err) != LLM4D_OK) {
        check(0, "the recording and guard backends: %s", err.msg);
        if (rb) rb->destroy(rb);
        return;
    }
    enum { B = 2, T = 16, NH = 4, HS = 8 };
    const int nkv[3] = {0, NH, 1};
    const int64_t *sid = rb->alloc(rb, NULL, LLM4D_MEM_ACTIVATIONS, B * sizeof(int64_t)); /* the replay's: zeros */
    const llm4d_dropout drop = {0.1f, 1, 1, sid, T, 0, NULL};
    for (int i = 0; i < 3; i++) {
        const llm4d_attn_shape s = {.B = B, .T = T, .NH = NH, .HS = HS, .head0 = 0, .NH_total = NH, .NKV = nkv[i]};
        const size_t nq = (size_t)B * T * (NH + 2 * (nkv[i] ? nkv[i] : NH)) * HS, no = (size_t)B * T * NH * HS;
        void *q = rb->alloc(rb, NULL, LLM4D_MEM_ACTIVATIONS, nq * 4), *dq = rb->alloc(rb, NULL, LLM4D_MEM_ACTIVATIONS,
                                                                                      nq * 4);
        void *o = rb->alloc(rb, NULL, LLM4D_MEM_ACTIVATIONS, no * 4), *dy = rb->alloc(rb, NULL, LLM4D_MEM_ACTIVATIONS,
                                                                                      no * 4);
        void *l = rb->alloc(rb, NULL, LLM4D_MEM_ACTIVATIONS, (size_t)B * NH * T * 4);
        rb->attention_forward(rb, llm4d_t32(o), l, llm4d_ct32(q), s, &drop);
        rb->attention_backward(rb, llm4d_t32(dq), llm4d_ct32(dy), llm4d_ct32(o), llm4d_ct32(q), l, s, &drop);
    }
    const double tok = (double)B * T * HS * 4; /* bytes of one head's values over the micro-batch, fp32 */
    const double want[6] = {4 * NH * tok, 8 * NH * tok, 4 * NH * tok, 8 * NH * tok, (2 * NH + 2) * tok,
                            (4 * NH + 4) * tok};
    int ok = rec.n == 6 && !rec.failed;
    for (int i = 0; ok && i < 6; i++) {
        const llm4d_rc_call *c = &rec.calls[i];
        ok &= c->op == (i % 2 ? LLM4D_RC_ATTN_BWD : LLM4D_RC_ATTN_FWD) && llm4d_rc_kind(c) == LLM4D_WORK_ATTN &&
              c->d[0] == B && c->d[1] == T && c->d[2] == NH && c->d[3] == HS && c->d[4] == (i < 4 ? 0 : 1) &&
              c->d[5] == 0 && llm4d_rc_bytes(c) == want[i] &&
              llm4d_rc_flops(c) == (i % 2 ? 5.0 : 2.0) * B * NH * (double)T * T * HS;
    }
    check(ok, "recorder: attention's key is B, T, NH, HS and 0 for multi-head attention (NKV 0 or NH), NKV for "
          "grouped-query; bytes by hand");
    llm4d_replay rp;
    double t[6][LLM4D_WORK_N];
    if (ok && llm4d_replay_init(&rp, &rec, guard, &err) == LLM4D_OK) {
        llm4d_replay_run(&rp, 0, rec.n, t);
        int made = 1;
        for (int i = 0; i < 6; i++) made &= t[i][LLM4D_WORK_ATTN] > 0;
        check(made, "replay: the 6 attention calls made again on the guard backend within their allocations, timed as "
              "attention");
        llm4d_replay_free(&rp);
    } else {
        check(0, "replay: %s", ok ? err.msg : "nothing to replay");
    }
    rb->destroy(rb);
    guard->destroy(guard);
    llm4d_rec_free(&rec);
}

/* tests/llama_torch_ref.py on the files: its check lines become this test's */
static void torch_oracle(void) {
    fclose(g_cases);
    g_cases = NULL;
    const char *src = getenv("SRC_DIR");
    char cmd[768];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 %s/tests/llama_torch_ref.py %s 2>&1", src ? src : ".", g_dir);
    FILE *p = popen(cmd, "r");
    if (!p) {
        check(0, "running %s", cmd);
        return;
    }
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, p)) {
        line[strcspn(line, "\n")] = 0;
        if (!strncmp(line, "ok   ", 5)) check(1, "torch: %s", line + 5), n++;
        else if (!strncmp(line, "FAIL ", 5)) check(0, "torch: %s", line + 5), n++;
        else printf("  %s\n", line);
    }
    const int st = pclose(p);
    check(st == 0 && n > 0, "tests/llama_torch_ref.py ran %d checks and exited %d", n, st);
}

int main(void) {
    llm4d_backend *ref, *cpu;
    llm4d_err err = {0};
    if (llm4d_backend_ref_create(&ref, &err) != LLM4D_OK || llm4d_backend_cpu_create(&cpu, 0, &err) != LLM4D_OK) {
        printf("FAIL - backend creation: %s\n0 passed, 1 failed\n", err.msg);
        return 1;
    }
    snprintf(g_dir, sizeof g_dir, "/tmp/llm4d-llama-XXXXXX");
    if (!mkdtemp(g_dir)) {
        printf("FAIL - mkdtemp %s\n0 passed, 1 failed\n", g_dir);
        return 1;
    }
    char path[300];
    snprintf(path, sizeof path, "%s/cases.txt", g_dir);
    g_cases = fopen(path, "w");
    check(g_cases != NULL, "the cases' files for PyTorch in %s", g_dir);

    test_rmsnorm(cpu, ref, 1, 7, 1e-5f, 1.0f);
    test_rmsnorm(cpu, ref, 37, 131, 1e-6f, 1.0f);
    test_rmsnorm(cpu, ref, 64, 768, 1e-5f, 1.0f);
    test_rmsnorm(cpu, ref, 19, 257, 1e-5f, 1e-3f);
    /* packed rows; Q and K heads of a GQA qkv row (6 + 2 of 10 heads turned); a slice whose positions wrap; HS/2
     * odd; positions near 70000 */
    test_rope(cpu, ref, (llm4d_rope_shape){.N = 13, .NH = 3, .HS = 16, .ld = 48, .T = 13, .tok0 = 0, .theta = 1e4f});
    test_rope(cpu, ref, (llm4d_rope_shape){.N = 24, .NH = 8, .HS = 12, .ld = 120, .T = 8, .tok0 = 0, .theta = 1e4f});
    test_rope(cpu, ref, (llm4d_rope_shape){.N = 21, .NH = 2, .HS = 10, .ld = 27, .T = 9, .tok0 = 5, .theta = 5e5f});
    test_rope(cpu, ref,
              (llm4d_rope_shape){.N = 9, .NH = 4, .HS = 128, .ld = 640, .T = 70000, .tok0 = 69980, .theta = 1e4f});
    test_swiglu(cpu, ref, 1, 12);
    test_swiglu(cpu, ref, 37, 131);
    test_swiglu(cpu, ref, 16, 4100);
    test_recorder(cpu);
    /* grouped-query attention: 2 kv heads of 4, multi-query (1 of 4), multi-head given as NKV = NH; across the
     * cpu backend's key blocks (256) and row blocks (128) with tails; 3 of 6 with an odd head size */
    test_gqa_attention(cpu, ref, 2, 37, 4, 2, 8);
    test_gqa_attention(cpu, ref, 2, 37, 4, 1, 8);
    test_gqa_attention(cpu, ref, 2, 37, 4, 4, 8);
    test_gqa_attention(cpu, ref, 1, 300, 4, 2, 16);
    test_gqa_attention(cpu, ref, 1, 140, 6, 3, 5);
    test_recorder_attention();
    torch_oracle();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0) printf("  (could not remove %s)\n", g_dir);
    ref->destroy(ref);
    cpu->destroy(cpu);
    return check_summary();
}
