/* test_cuda_host.c — the CUDA backend's host-side arithmetic, on any machine (no GPU needed), against the reference
 * backend as the oracle:
 *   - kidx.h, the index formulas the kernels run: which dropout word each element of an activation draws (against
 *     the masks ref's dropout_forward applies, on token slices), which word each attention probability draws
 *     (against ref's attention with V chosen so that its output shows each kept probability), the initial weights
 *     (bit for bit against ref's init_param, on boxes of a tensor), the real columns of a vocabulary part, and the
 *     first token of a slice at a position;
 *   - gemm_plan.h, the linear layers' products as column-major GEMMs: a plain column-major GEMM that follows BLAS's
 *     rules, run with each plan, against ref's linear forward, input gradient and weight gradient;
 *   - nccl_pick.h, which groups may use NCCL: only members with distinct GPUs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cuda/gemm_plan.h"
#include "backend/cuda/kidx.h"
#include "comm/nccl/nccl_pick.h"
#include "check.h"

static float *frand(size_t n, float scale, uint64_t stream) {
    float *p = falloc(n);
    for (size_t i = 0; i < n; i++) p[i] = scale * llm4d_rng_normal(99, stream, i);
    return p;
}

/* dropout of an [N, C] slice: the word kidx picks keeps exactly what ref keeps */
static void test_act_dropout(llm4d_backend *ref, int N, int C, int T, int64_t tok0) {
    int64_t sids[6] = {9, 0, 4, 13, 2, 7};
    llm4d_dropout d = {0.3f, 42, llm4d_rng_stream(LLM4D_RNG_DROPOUT, 3, LLM4D_DROP_MLP_OUT, 5), sids, T, tok0, NULL};
    const size_t n = (size_t)N * C;
    float *ones = falloc(n), *out = falloc(n);
    for (size_t i = 0; i < n; i++) ones[i] = 1.0f;
    ref->dropout_forward(ref, llm4d_t32(out), llm4d_ct32(ones), N, C, &d);
    size_t same = 0, kept = 0;
    for (int r = 0; r < N; r++)
        for (int c = 0; c < C; c++) {
            llm4d_kidx_words w = {0};
            const float m = llm4d_kidx_mult(&w, d.seed, d.stream, d.p, llm4d_kidx_act_pos(sids, T, tok0, r, C, c));
            same += m == out[(size_t)r * C + c];
            kept += m > 0;
        }
    check(same == n && kept > n / 2 && kept < n, "dropout N=%d C=%d T=%d tok0=%lld: kidx's words keep what ref keeps "
          "(%zu of %zu equal, %zu kept)", N, C, T, (long long)tok0, same, n, kept);
    free(ones), free(out);
}

/* attention dropout: with V[t2] = e_t2 (HS >= T) ref's out[t1][t2] is the kept probability, 0 where dropped */
static void test_att_dropout(llm4d_backend *ref) {
    const int B = 2, T = 12, NH = 2, HS = 16, C = NH * HS, C3 = 3 * C;
    int64_t sids[2] = {5, 3};
    llm4d_attn_shape s = {B, T, NH, HS, 1, 4, 0};
    llm4d_dropout d = {0.25f, 11, llm4d_rng_stream(LLM4D_RNG_DROPOUT, 2, LLM4D_DROP_ATTN_PROBS, 9), sids, T, 0, NULL};
    float *qkv = frand((size_t)B * T * C3, 0.5f, 1), *out = falloc((size_t)B * T * C), *lse = falloc((size_t)B * NH * T);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH; h++)
                for (int i = 0; i < HS; i++) qkv[((size_t)b * T + t) * C3 + 2 * C + h * HS + i] = i == t ? 1.0f : 0.0f;
    ref->attention_forward(ref, llm4d_t32(out), lse, llm4d_ct32(qkv), s, &d);
    int same = 0, total = 0;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t1 = 0; t1 < T; t1++) {
                const uint64_t row = llm4d_kidx_att_row(sids[b], s.NH_total, s.head0, h, T, t1);
                llm4d_kidx_words w = {0};
                for (int t2 = 0; t2 <= t1; t2++) {
                    const int kept = llm4d_kidx_mult(&w, d.seed, d.stream, d.p, row + (uint64_t)t2) > 0;
                    const int ref_kept = out[((size_t)b * T + t1) * C + h * HS + t2] != 0.0f;
                    same += kept == ref_kept;
                    total++;
                }
            }
    check(same == total, "attention dropout: kidx's positions keep the probabilities ref keeps (%d of %d)", same,
          total);
    free(qkv), free(out), free(lse);
}

/* init_param: the values a kernel computes element by element, bit for bit ref's */
static void test_init(llm4d_backend *ref) {
    const llm4d_init_spec specs[3] = {
        {0.02f, 0.0f, 1234, llm4d_rng_stream(LLM4D_RNG_INIT, 0, 0, 3), 0, 0, 48, 48, 40 * 48},  /* padding rows */
        {0.5f, 0.0f, 7, llm4d_rng_stream(LLM4D_RNG_INIT, 0, 0, 8), 5, 16, 20, 64, 1 << 20},      /* a box */
        {0.0f, 1.0f, 7, 0, 0, 0, 30, 30, 900}};                                                 /* constant */
    for (int k = 0; k < 3; k++) {
        const int64_t j0 = k == 1 ? 13 : 0, j1 = 48 * 48;
        float *a = falloc((size_t)(j1 - j0));
        ref->init_param(ref, a, &specs[k], j0, j1);
        int64_t same = 0;
        for (int64_t j = j0; j < j1; j++) {
            const float v = llm4d_kidx_init_value(&specs[k], j);
            same += memcmp(&v, &a[j - j0], sizeof v) == 0;
        }
        check(same == j1 - j0, "init_param spec %d: kidx's values equal ref's bit for bit (%lld of %lld)", k,
              (long long)same, (long long)(j1 - j0));
        free(a);
    }
}

static void test_small_formulas(void) {
    int ok = 1;
    for (int V = 1; V < 40; V += 7)
        for (int v0 = 0; v0 < 60; v0 += 5)
            for (int Vl = 1; Vl < 30; Vl += 4) {
                int n = 0;
                for (int j = 0; j < Vl; j++) n += v0 + j < V;
                ok &= llm4d_kidx_real_cols(Vl, v0, V) == n;
            }
    check(ok, "real columns of a vocabulary part: every (V, v0, Vl) tried");
    ok = 1;
    for (int T = 1; T < 20; T += 3)
        for (int64_t tok0 = 0; tok0 < 50; tok0 += 7)
            for (int t = 0; t < T; t++) {
                int64_t n = 0;
                while ((tok0 + n) % T != t) n++;
                ok &= llm4d_kidx_first_row_at(tok0, T, t) == n;
            }
    check(ok, "first row of a slice at each position: every (T, tok0, t) tried");
}

/* element (i, j) of op(M), M column-major with leading dimension ld */
static double at(const float *M, int ld, int trans, int i, int j) {
    return trans ? M[(size_t)j + (size_t)i * ld] : M[(size_t)i + (size_t)j * ld];
}

/* D = op(A) op(B), as BLAS defines it, in double */
static void colmajor_gemm(const llm4d_gemm_plan *p, const float *A, const float *B, float *D) {
    for (int j = 0; j < p->n; j++)
        for (int i = 0; i < p->m; i++) {
            double acc = 0.0;
            for (int l = 0; l < p->k; l++) acc += at(A, p->lda, p->transa, i, l) * at(B, p->ldb, p->transb, l, j);
            D[(size_t)i + (size_t)j * p->ldd] = (float)acc;
        }
}

static double relerr(const float *a, const float *b, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)a[i] - b[i]);
        if (!(d <= num)) num = d;
        if (fabs(b[i]) > den) den = fabs(b[i]);
    }
    return den > 0 ? num / den : num;
}

static const float *pick(char which, const float *w, const float *x, const float *g) {
    return which == 'w' ? w : which == 'x' ? x : g;
}

static void test_gemm_plans(llm4d_backend *ref, int N, int C, int OC) {
    float *x = frand((size_t)N * C, 1.0f, 2), *w = frand((size_t)OC * C, 0.3f, 3), *g = frand((size_t)N * OC, 1.0f, 4);
    float *want = falloc((size_t)N * OC), *got = falloc((size_t)N * OC);
    ref->linear_forward(ref, llm4d_t32(want), llm4d_ct32(x), w, NULL, N, C, OC);
    llm4d_gemm_plan p = llm4d_gemm_plan_of(LLM4D_GEMM_FWD, N, C, OC);
    colmajor_gemm(&p, pick(p.a, w, x, g), pick(p.b, w, x, g), got);
    const double e1 = relerr(got, want, (size_t)N * OC);
    float *dx = falloc((size_t)N * C), *dx2 = falloc((size_t)N * C), *dw = falloc((size_t)OC * C);
    float *dw2 = falloc((size_t)OC * C);
    ref->linear_backward(ref, llm4d_t32(dx), LLM4D_WRITE, dw, NULL, llm4d_ct32(g), llm4d_ct32(x), w, N, C, OC);
    p = llm4d_gemm_plan_of(LLM4D_GEMM_DINP, N, C, OC);
    colmajor_gemm(&p, pick(p.a, w, x, g), pick(p.b, w, x, g), dx2);
    const double e2 = relerr(dx2, dx, (size_t)N * C);
    p = llm4d_gemm_plan_of(LLM4D_GEMM_DW, N, C, OC);
    colmajor_gemm(&p, pick(p.a, w, x, g), pick(p.b, w, x, g), dw2);
    const double e3 = relerr(dw2, dw, (size_t)OC * C);
    check(e1 < 1e-6 && e2 < 1e-6 && e3 < 1e-6, "GEMM plans N=%d C=%d OC=%d as column-major BLAS calls: forward %.1e, "
          "input gradient %.1e, weight gradient %.1e from ref's", N, C, OC, e1, e2, e3);
    free(x), free(w), free(g), free(want), free(got), free(dx), free(dx2), free(dw), free(dw2);
}

static void test_nccl_pick(void) {
    enum { L = 16 };
    char keys[6][L] = {"h1/0000:1b:00", "h1/0000:1c:00", "h1/0000:1b:00", "h2/0000:1b:00", "", "h1/0000:1d:00"};
    const int distinct[3] = {0, 1, 3}, shared[2] = {0, 2}, nogpu[2] = {1, 4}, alone[1] = {5};
    check(llm4d_nccl_distinct(&keys[0][0], L, distinct, 3), "NCCL for ranks on different GPUs (and hosts)");
    check(!llm4d_nccl_distinct(&keys[0][0], L, shared, 2), "not for ranks sharing a GPU");
    check(!llm4d_nccl_distinct(&keys[0][0], L, nogpu, 2), "not with a rank that has no GPU");
    check(!llm4d_nccl_distinct(&keys[0][0], L, alone, 1), "not for a group of one");
}

int main(void) {
    llm4d_backend *ref;
    llm4d_err err = {0};
    if (llm4d_backend_ref_create(&ref, &err) != LLM4D_OK) {
        printf("FAIL %s\n", err.msg);
        return 1;
    }
    test_act_dropout(ref, 24, 20, 8, 0);
    test_act_dropout(ref, 13, 7, 5, 9);   /* C % 4 != 0, a slice starting mid-row */
    test_act_dropout(ref, 30, 12, 16, 3);
    test_att_dropout(ref);
    test_init(ref);
    test_small_formulas();
    test_gemm_plans(ref, 7, 12, 5);
    test_gemm_plans(ref, 16, 33, 24);
    test_nccl_pick();
    ref->destroy(ref);
    return check_summary();
}
