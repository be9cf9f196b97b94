/* test_gradcheck.c — finite-difference checks of the reference backend's backward kernels (and of the fast
 * backend's attention, whose backward takes forward's out and log-sum-exp instead of recomputing everything, and
 * its RMSNorm, RoPE and SwiGLU: the Llama family's kernels are new, so both backends' are checked here).
 *
 * test_kernels.c shows the fast backend equals the reference; this file shows the reference's backward is the
 * derivative of its forward, so together they pin both backends to the math. For each op the scalar objective
 * is L = sum(out * R) with a fixed random R (for cross-entropy L = sum(dloss * losses), whose gradient is what
 * the kernel returns), the analytic gradient is backward(dout = R) into zeroed buffers, and the numerical one
 * is the central difference (L(x+h) - L(x-h)) / (2h) at a spread of coordinates, L summed in double.
 *
 * Tolerance: the kernels take and return fp32, so L carries the rounding of every output (~6e-8 relative
 * each, ~1e-6 absolute summed over these small tensors), which the difference divides by 2h; with h = 1e-2 that
 * is ~1e-4 against gradients of order 1, and the O(h^2) truncation of these smooth functions is of the same
 * order (observed errors are 1e-7 .. 5e-5). We require max|fd - analytic| <= 5e-4 * max|analytic|; a gradient
 * off by 1% must fail, which a negative control checks. Dropout (p > 0) uses the same deterministic mask in
 * every evaluation, so the function being differentiated is fixed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/rng.h"
#include "check.h"



static uint64_t g_stream = 1;

static float *frand(size_t n, float scale) {
    float *p = falloc(n);
    uint64_t st = g_stream++;
    for (size_t i = 0; i < n; i++) p[i] = scale * llm4d_rng_normal(4321, st, i);
    return p;
}

static double dot(const float *a, const float *b, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

#define H 1e-2f
#define TOL 5e-4
#define MAXCOORDS 48

typedef double (*objective)(void *ctx);

/* max |fd - scale*analytic| / max |analytic| over up to maxc coordinates of x, spread over the tensor */
static double fd_error(float *x, size_t n, const float *analytic, double scale, objective f, void *ctx,
                       size_t maxc) {
    double num = 0.0, den = 0.0;
    size_t ncoords = n < maxc ? n : maxc;
    for (size_t k = 0; k < ncoords; k++) {
        size_t j = n <= maxc ? k : (k * n) / maxc + (k * 7) % (n / maxc);
        float save = x[j];
        x[j] = save + H;
        double hp = (double)x[j] - save, fp = f(ctx);
        x[j] = save - H;
        double hm = save - (double)x[j], fm = f(ctx);
        x[j] = save;
        double fd = (fp - fm) / (hp + hm);
        num = fmax(num, fabs(fd - scale * analytic[j]));
        den = fmax(den, fabs(analytic[j]));
    }
    return den > 0 ? num / den : num;
}

static void gradcheck_n(const char *what, float *x, size_t n, const float *analytic, objective f, void *ctx,
                        size_t maxc) {
    double e = fd_error(x, n, analytic, 1.0, f, ctx, maxc);
    double amax = 0.0;
    for (size_t i = 0; i < n; i++) amax = fmax(amax, fabs(analytic[i]));
    check(e <= TOL && amax > 0, "%s: finite-difference rel err %.2e (tol %.0e, max|grad| %.2g)", what, e, TOL, amax);
}

static void gradcheck(const char *what, float *x, size_t n, const float *analytic, objective f, void *ctx) {
    gradcheck_n(what, x, n, analytic, f, ctx, MAXCOORDS);
}

/* ---------------------------------------------------------------------------------------------------------- */

typedef struct {
    llm4d_backend *be;
    int N, C, OC;
    float *inp, *w, *b, *out, *R;
} linear_ctx;

static double linear_obj(void *p) {
    linear_ctx *c = p;
    c->be->linear_forward(c->be, llm4d_t32(c->out), llm4d_ct32(c->inp), c->w, c->b, c->N, c->C, c->OC);
    return dot(c->out, c->R, (size_t)c->N * c->OC);
}

static void test_linear(llm4d_backend *be) {
    linear_ctx c = {be, 5, 7, 6, NULL, NULL, NULL, NULL, NULL};
    c.inp = frand((size_t)c.N * c.C, 1.0f), c.w = frand((size_t)c.OC * c.C, 0.5f), c.b = frand(c.OC, 0.5f);
    c.out = falloc((size_t)c.N * c.OC), c.R = frand((size_t)c.N * c.OC, 1.0f);
    float *dinp = falloc((size_t)c.N * c.C), *dw = falloc((size_t)c.OC * c.C), *db = falloc(c.OC);
    be->linear_backward(be, llm4d_t32(dinp), LLM4D_WRITE, dw, db, llm4d_ct32(c.R), llm4d_ct32(c.inp), c.w, c.N, c.C,
                        c.OC);
    gradcheck("linear dinp", c.inp, (size_t)c.N * c.C, dinp, linear_obj, &c);
    gradcheck("linear dw", c.w, (size_t)c.OC * c.C, dw, linear_obj, &c);
    gradcheck("linear db", c.b, c.OC, db, linear_obj, &c);
    /* negative control: a gradient 1% off must be caught */
    double e = fd_error(c.w, (size_t)c.OC * c.C, dw, 1.01, linear_obj, &c, MAXCOORDS);
    check(e > TOL, "negative control: linear dw scaled by 1.01 is rejected (err %.2e > %.0e)", e, TOL);
    free(c.inp), free(c.w), free(c.b), free(c.out), free(c.R), free(dinp), free(dw), free(db);
}

typedef struct {
    llm4d_backend *be;
    int B, T, C;
    int32_t *tok;
    float *wte, *wpe, *out, *R;
} enc_ctx;

/* token + position embedding, the token rows in two vocabulary parts [0, 2) and [2, V) as a vocabulary-parallel
 * embedding adds them */
static double enc_obj(void *p) {
    enc_ctx *c = p;
    const int N = c->B * c->T;
    c->be->zero(c->be, c->out, (size_t)N * c->C * sizeof(float));
    c->be->embedding_forward(c->be, c->out, c->tok, c->wte, 0, 2, N, c->C);
    c->be->embedding_forward(c->be, c->out, c->tok, c->wte + 2 * c->C, 2, 3, N, c->C);
    c->be->position_forward(c->be, c->out, c->wpe, N, c->C, c->T, 0);
    return dot(c->out, c->R, (size_t)N * c->C);
}

static void test_encoder(llm4d_backend *be) {
    const int V = 5;
    int32_t tok[6] = {1, 3, 1, 4, 1, 0}; /* token 1 three times: its gradient sums three rows */
    enc_ctx c = {be, 2, 3, 4, tok, NULL, NULL, NULL, NULL};
    c.wte = frand((size_t)V * c.C, 1.0f), c.wpe = frand((size_t)c.T * c.C, 1.0f);
    c.out = falloc((size_t)c.B * c.T * c.C), c.R = frand((size_t)c.B * c.T * c.C, 1.0f);
    float *dwte = falloc((size_t)V * c.C), *dwpe = falloc((size_t)c.T * c.C);
    be->embedding_backward(be, dwte, c.R, tok, 0, 2, c.B * c.T, c.C);
    be->embedding_backward(be, dwte + 2 * c.C, c.R, tok, 2, 3, c.B * c.T, c.C);
    be->position_backward(be, dwpe, c.R, c.B * c.T, c.C, c.T, 0);
    gradcheck("encoder dwte (repeated tokens)", c.wte, (size_t)V * c.C, dwte, enc_obj, &c);
    gradcheck("encoder dwpe", c.wpe, (size_t)c.T * c.C, dwpe, enc_obj, &c);
    int unused_zero = 1;
    for (int i = 0; i < c.C; i++) unused_zero &= dwte[2 * c.C + i] == 0.0f;
    check(unused_zero, "encoder: an unused token's embedding gets zero gradient");
    free(c.wte), free(c.wpe), free(c.out), free(c.R), free(dwte), free(dwpe);
}

typedef struct {
    llm4d_backend *be;
    int N, C;
    float *x, *w, *b, *out, *mean, *rstd, *R;
} ln_ctx;

static double ln_obj(void *p) {
    ln_ctx *c = p;
    c->be->layernorm_forward(c->be, llm4d_t32(c->out), c->mean, c->rstd, llm4d_ct32(c->x), c->w, c->b, c->N, c->C);
    return dot(c->out, c->R, (size_t)c->N * c->C);
}

static void test_layernorm(llm4d_backend *be) {
    ln_ctx c = {be, 3, 9, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    const size_t n = (size_t)c.N * c.C;
    c.x = frand(n, 1.0f), c.w = frand(c.C, 1.0f), c.b = frand(c.C, 1.0f);
    for (size_t i = 0; i < n; i++) c.x[i] += 0.5f;
    c.out = falloc(n), c.mean = falloc(c.N), c.rstd = falloc(c.N), c.R = frand(n, 1.0f);
    ln_obj(&c);
    float *dx = falloc(n), *dw = falloc(c.C), *db = falloc(c.C);
    be->layernorm_backward(be, llm4d_t32(dx), dw, db, llm4d_ct32(c.R), llm4d_ct32(c.x), c.w, c.mean, c.rstd, c.N, c.C);
    gradcheck("layernorm dinp", c.x, n, dx, ln_obj, &c);
    gradcheck("layernorm dw", c.w, c.C, dw, ln_obj, &c);
    gradcheck("layernorm db", c.b, c.C, db, ln_obj, &c);
    free(c.x), free(c.w), free(c.b), free(c.out), free(c.mean), free(c.rstd), free(c.R), free(dx), free(dw), free(db);
}

typedef struct {
    llm4d_backend *be;
    size_t n;
    float *x, *out, *R;
} gelu_ctx;

static double gelu_obj(void *p) {
    gelu_ctx *c = p;
    c->be->gelu_forward(c->be, llm4d_t32(c->out), llm4d_ct32(c->x), c->n);
    return dot(c->out, c->R, c->n);
}

static void test_gelu(llm4d_backend *be) {
    gelu_ctx c = {be, 40, NULL, NULL, NULL};
    c.x = frand(c.n, 2.0f), c.out = falloc(c.n), c.R = frand(c.n, 1.0f);
    float *dx = falloc(c.n);
    be->gelu_backward(be, llm4d_t32(dx), llm4d_ct32(c.x), llm4d_ct32(c.R), c.n);
    gradcheck("gelu dinp", c.x, c.n, dx, gelu_obj, &c);
    free(c.x), free(c.out), free(c.R), free(dx);
}

/* the Llama family (issue 47): RMSNorm, RoPE, SwiGLU, on the backend given (ref, and cpu's own kernels) */
typedef struct {
    llm4d_backend *be;
    int N, C;
    float *x, *w, *out, *rstd, *R;
} rms_ctx;

static double rms_obj(void *p) {
    rms_ctx *c = p;
    c->be->rmsnorm_forward(c->be, llm4d_t32(c->out), c->rstd, llm4d_ct32(c->x), c->w, c->N, c->C, 1e-5f);
    return dot(c->out, c->R, (size_t)c->N * c->C);
}

static void test_rmsnorm(llm4d_backend *be) {
    rms_ctx c = {be, 3, 9, NULL, NULL, NULL, NULL, NULL};
    const size_t n = (size_t)c.N * c.C;
    c.x = frand(n, 1.0f), c.w = frand(c.C, 1.0f), c.out = falloc(n), c.rstd = falloc(c.N), c.R = frand(n, 1.0f);
    rms_obj(&c);
    float *dx = falloc(n), *dw = falloc(c.C);
    be->rmsnorm_backward(be, llm4d_t32(dx), dw, llm4d_ct32(c.R), llm4d_ct32(c.x), c.w, c.rstd, c.N, c.C);
    char what[64];
    snprintf(what, sizeof what, "%s rmsnorm dinp", be->name), gradcheck(what, c.x, n, dx, rms_obj, &c);
    snprintf(what, sizeof what, "%s rmsnorm dw", be->name), gradcheck(what, c.w, c.C, dw, rms_obj, &c);
    free(c.x), free(c.w), free(c.out), free(c.rstd), free(c.R), free(dx), free(dw);
}

typedef struct {
    llm4d_backend *be;
    llm4d_rope_shape s;
    float *x, *out, *R;
} rope_ctx;

static double rope_obj(void *p) {
    rope_ctx *c = p;
    c->be->rope_forward(c->be, llm4d_t32(c->out), llm4d_ct32(c->x), c->s);
    return dot(c->out, c->R, (size_t)c->s.N * c->s.ld);
}

/* rows of 2 heads of 6 and 3 elements more (not turned: their gradient is not rope's), a slice from token 4 of
 * rows of 5 tokens */
static void test_rope(llm4d_backend *be) {
    rope_ctx c = {be, {.N = 7, .NH = 2, .HS = 6, .ld = 15, .T = 5, .tok0 = 4, .theta = 100.0f}, NULL, NULL, NULL};
    const size_t n = (size_t)c.s.N * c.s.ld;
    c.x = frand(n, 1.0f), c.out = falloc(n), c.R = frand(n, 1.0f);
    for (size_t i = 0; i < n; i++)
        if (i % c.s.ld >= 12) c.R[i] = 0.0f; /* out's untouched elements are no function of x */
    float *dx = falloc(n);
    be->rope_backward(be, llm4d_t32(dx), llm4d_ct32(c.R), c.s);
    char what[64];
    snprintf(what, sizeof what, "%s rope dinp", be->name), gradcheck(what, c.x, n, dx, rope_obj, &c);
    free(c.x), free(c.out), free(c.R), free(dx);
}

typedef struct {
    llm4d_backend *be;
    int N, F;
    float *x, *out, *R;
} swiglu_ctx;

static double swiglu_obj(void *p) {
    swiglu_ctx *c = p;
    c->be->swiglu_forward(c->be, llm4d_t32(c->out), llm4d_ct32(c->x), c->N, c->F);
    return dot(c->out, c->R, (size_t)c->N * c->F);
}

static void test_swiglu(llm4d_backend *be) {
    swiglu_ctx c = {be, 4, 5, NULL, NULL, NULL};
    const size_t n = (size_t)c.N * c.F;
    c.x = frand(2 * n, 2.0f), c.out = falloc(n), c.R = frand(n, 1.0f);
    float *dx = falloc(2 * n);
    be->swiglu_backward(be, llm4d_t32(dx), llm4d_ct32(c.x), llm4d_ct32(c.R), c.N, c.F);
    char what[64];
    snprintf(what, sizeof what, "%s swiglu dinp (gate and up)", be->name);
    gradcheck(what, c.x, 2 * n, dx, swiglu_obj, &c);
    free(c.x), free(c.out), free(c.R), free(dx);
}

typedef struct {
    llm4d_backend *be;
    llm4d_attn_shape s;
    const llm4d_dropout *drop;
    float *qkv, *out, *lse, *R;
} att_ctx;

static double att_obj(void *p) {
    att_ctx *c = p;
    c->be->attention_forward(c->be, llm4d_t32(c->out), c->lse, llm4d_ct32(c->qkv), c->s, c->drop);
    return dot(c->out, c->R, (size_t)c->s.B * c->s.T * c->s.NH * c->s.HS);
}

/* backward gets the out and lse of the forward at the unperturbed qkv, as the model passes them; maxc caps the
 * coordinates checked (spread over q, k and v of all heads; with grouped-query attention a kv head's coordinate
 * moves every query head of its group) */
static void test_attention(llm4d_backend *be, llm4d_attn_shape s, float p, size_t maxc) {
    int64_t sids[2] = {4, 1};
    llm4d_dropout drop = {p, 42, llm4d_rng_stream(LLM4D_RNG_DROPOUT, 3, LLM4D_DROP_ATTN_PROBS, 7), sids, s.T, 0, NULL};
    att_ctx c = {be, s, &drop, NULL, NULL, NULL, NULL};
    const size_t nqkv = LLM4D_ATTN_QKV_ELEMS(s), nout = LLM4D_ATTN_ELEMS(s), nlse = (size_t)s.B * s.NH * s.T;
    c.qkv = frand(nqkv, 1.0f), c.out = falloc(nout), c.lse = falloc(nlse), c.R = frand(nout, 1.0f);
    att_obj(&c);
    float *dqkv = falloc(nqkv);
    be->attention_backward(be, llm4d_t32(dqkv), llm4d_ct32(c.R), llm4d_ct32(c.out), llm4d_ct32(c.qkv), c.lse, s, &drop);
    char what[128];
    snprintf(what, sizeof what, "%s attention dqkv (B=%d T=%d NH=%d NKV=%d HS=%d, p=%.1f)", be->name, s.B, s.T, s.NH,
             llm4d_attn_nkv(s), s.HS, p);
    gradcheck_n(what, c.qkv, nqkv, dqkv, att_obj, &c, maxc);
    free(c.qkv), free(c.out), free(c.lse), free(c.R), free(dqkv);
}

typedef struct {
    llm4d_backend *be;
    int N, V, Vp;
    float *logits, *losses, *w, *stats;
    int32_t *tg;
} ce_ctx;

static double ce_obj(void *p) {
    ce_ctx *c = p;
    c->be->xent_forward(c->be, c->stats, llm4d_ct32(c->logits), c->tg, c->N, c->Vp, 0, c->V, 0);
    c->be->xent_backward(c->be, c->losses, llm4d_t32(NULL), llm4d_ct32(c->logits), c->stats, c->tg, NULL, c->N, c->Vp,
                         0, c->V);
    return dot(c->losses, c->w, c->N);
}

static void test_crossentropy(llm4d_backend *be) {
    int32_t tg[4] = {0, 6, 3, 3};
    ce_ctx c = {be, 4, 7, 9, NULL, NULL, NULL, NULL, tg};
    const size_t n = (size_t)c.N * c.Vp;
    c.logits = frand(n, 2.0f), c.losses = falloc(c.N), c.w = falloc(c.N), c.stats = falloc(3 * (size_t)c.N);
    float wv[4] = {0.25f, 0.0f, 0.5f, 1.0f / 3.0f}; /* a loss mask / count, one row masked out */
    memcpy(c.w, wv, sizeof wv);
    float *dl = falloc(n);
    be->xent_forward(be, c.stats, llm4d_ct32(c.logits), tg, c.N, c.Vp, 0, c.V, 0);
    be->xent_backward(be, c.losses, llm4d_t32(dl), llm4d_ct32(c.logits), c.stats, tg, c.w, c.N, c.Vp, 0, c.V);
    gradcheck("crossentropy dlogits (Vp > V, weighted rows)", c.logits, n, dl, ce_obj, &c);
    int pad = 1, masked = 1;
    for (int i = 0; i < c.N; i++)
        for (int j = c.V; j < c.Vp; j++) pad &= dl[(size_t)i * c.Vp + j] == 0.0f;
    for (int j = 0; j < c.Vp; j++) masked &= dl[(size_t)1 * c.Vp + j] == 0.0f;
    check(pad && masked, "crossentropy: padded columns and the zero-weight row get zero gradient");
    free(c.logits), free(c.losses), free(c.w), free(dl), free(c.stats);
}

typedef struct {
    llm4d_backend *be;
    int N, C;
    const llm4d_dropout *drop;
    float *res, *x, *out, *R;
    int add;
} drop_ctx;

static double drop_obj(void *p) {
    drop_ctx *c = p;
    if (c->add)
        c->be->dropout_add_forward(c->be, llm4d_t32(c->out), llm4d_ct32(c->res), llm4d_ct32(c->x), c->N, c->C, c->drop);
    else
        c->be->dropout_forward(c->be, llm4d_t32(c->out), llm4d_ct32(c->x), c->N, c->C, c->drop);
    return dot(c->out, c->R, (size_t)c->N * c->C);
}

static void test_dropout(llm4d_backend *be, int add, float p) {
    int64_t sids[2] = {7, 3};
    llm4d_dropout drop = {p, 9, llm4d_rng_stream(LLM4D_RNG_DROPOUT, 1, LLM4D_DROP_ATTN_OUT, 2), sids, 3, 0, NULL};
    drop_ctx c = {be, 6, 3, &drop, NULL, NULL, NULL, NULL, add}; /* 2 rows of 3 tokens of 3 channels */
    const size_t n = (size_t)c.N * c.C;
    c.res = frand(n, 1.0f), c.x = frand(n, 1.0f), c.out = falloc(n), c.R = frand(n, 1.0f);
    float *dres = falloc(n), *dx = falloc(n);
    if (add)
        be->dropout_add_backward(be, llm4d_t32(dres), llm4d_t32(dx), llm4d_ct32(c.R), c.N, c.C, &drop);
    else
        be->dropout_backward(be, llm4d_t32(dx), llm4d_ct32(c.R), c.N, c.C, &drop);
    char what[96];
    snprintf(what, sizeof what, "%s dx (p=%.1f)", add ? "dropout_add" : "dropout", p);
    gradcheck(what, c.x, n, dx, drop_obj, &c);
    if (add) {
        snprintf(what, sizeof what, "dropout_add dres (p=%.1f)", p);
        gradcheck(what, c.res, n, dres, drop_obj, &c);
    }
    size_t zeros = 0;
    for (size_t i = 0; i < n; i++) zeros += dx[i] == 0.0f;
    check(p == 0.0f ? zeros == 0 : zeros > 0, "%s (p=%.1f): %zu of %zu elements dropped",
          add ? "dropout_add" : "dropout", p, zeros, n);
    free(c.res), free(c.x), free(c.out), free(c.R), free(dres), free(dx);
}

int main(void) {
    llm4d_backend *ref, *cpu;
    llm4d_err err = {0};
    if (llm4d_backend_ref_create(&ref, &err) != LLM4D_OK || llm4d_backend_cpu_create(&cpu, 0, &err) != LLM4D_OK) {
        printf("FAIL - backend creation: %s\n0 passed, 1 failed\n", err.msg);
        return 1;
    }
    test_linear(ref);
    test_encoder(ref);
    test_layernorm(ref);
    test_gelu(ref);
    for (int k = 0; k < 2; k++) {
        test_rmsnorm(k ? cpu : ref);
        test_rope(k ? cpu : ref);
        test_swiglu(k ? cpu : ref);
    }
    const llm4d_attn_shape small = {2, 5, 2, 3, 1, 3, 0}, blocks = {1, 300, 2, 4, 0, 2, 0};
    /* grouped-query: 4 query heads on 2 kv heads and on 1 (multi-query) */
    const llm4d_attn_shape gqa = {2, 5, 4, 3, 0, 4, 2}, mqa = {1, 7, 4, 3, 4, 8, 1};
    test_attention(ref, small, 0.0f, SIZE_MAX); /* every coordinate: q, k, v of both heads */
    test_attention(ref, small, 0.3f, SIZE_MAX);
    /* the fast backend's flash kernel directly: its backward rebuilds the probabilities from forward's lse and
     * uses forward's out, which the reference does not; T = 300 spans two key blocks and three query blocks */
    test_attention(cpu, small, 0.0f, SIZE_MAX);
    test_attention(cpu, small, 0.3f, SIZE_MAX);
    test_attention(cpu, blocks, 0.0f, 300);
    test_attention(cpu, blocks, 0.3f, 300);
    for (int k = 0; k < 2; k++) {
        test_attention(k ? cpu : ref, gqa, 0.0f, SIZE_MAX);
        test_attention(k ? cpu : ref, gqa, 0.3f, SIZE_MAX);
        test_attention(k ? cpu : ref, mqa, 0.0f, SIZE_MAX);
        test_attention(k ? cpu : ref, mqa, 0.3f, SIZE_MAX);
    }
    test_crossentropy(ref);
    test_dropout(ref, 0, 0.3f);
    test_dropout(ref, 1, 0.0f);
    test_dropout(ref, 1, 0.3f);
    ref->destroy(ref);
    cpu->destroy(cpu);
    return check_summary();
}
