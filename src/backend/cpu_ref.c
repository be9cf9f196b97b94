/* cpu_ref.c — the reference backend: every operation of backend.h as plain loops.
 *
 * This file is the oracle that the fast CPU backend (cpu.c) and any future backend are tested against, and
 * the one the finite-difference gradient checks validate, so it is written for obviousness, not speed: one
 * thread, the formulas spelled out as in llm.c, reductions accumulated in double so that its own rounding is
 * well below the tolerances the tests use, and each dropout decision recomputed from the counter-based RNG
 * (core/rng.h) at the element's global position. Nothing here allocates except alloc itself and the attention,
 * which takes two rows of T doubles per call (it has no context to keep them in). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/rng.h"

/* ---------------------------------------------------------------------------------------------------------- */
/* memory */

static void *ref_alloc(llm4d_backend *be, llm4d_mem *mem, llm4d_mem_category c, size_t bytes) {
    (void)be;
    return llm4d_mem_alloc(mem, c, bytes);
}

static void ref_free(llm4d_backend *be, llm4d_mem *mem, llm4d_mem_category c, void *p, size_t bytes) {
    (void)be;
    llm4d_mem_free(mem, c, p, bytes);
}

static void ref_zero(llm4d_backend *be, void *p, size_t bytes) {
    (void)be;
    memset(p, 0, bytes);
}

static void ref_copy(llm4d_backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    memmove(dst, src, bytes);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* dropout: the multiplier of the element at global position pos (0 if dropped, 1/(1-p) if kept) */

static float drop_mult(const llm4d_dropout *d, uint64_t pos) {
    if (!d || d->p == 0.0f) return 1.0f;
    uint32_t w[4];
    llm4d_rng_block(d->seed, d->stream, pos >> 2, w);
    return llm4d_rng_u01(w[pos & 3]) >= d->p ? 1.0f / (1.0f - d->p) : 0.0f;
}

/* ---------------------------------------------------------------------------------------------------------- */
/* linear */

static void ref_linear_forward(llm4d_backend *be, float *out, const float *inp, const float *w, const float *b,
                               int N, int C, int OC) {
    (void)be;
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double acc = b ? b[o] : 0.0;
            for (int c = 0; c < C; c++) acc += (double)inp[(size_t)n * C + c] * w[(size_t)o * C + c];
            out[(size_t)n * OC + o] = (float)acc;
        }
}

static void ref_linear_backward(llm4d_backend *be, float *dinp, float *dw, float *db, const float *dout,
                                const float *inp, const float *w, int N, int C, int OC) {
    (void)be;
    if (dinp)
        for (int n = 0; n < N; n++)
            for (int c = 0; c < C; c++) {
                double acc = 0.0;
                for (int o = 0; o < OC; o++) acc += (double)dout[(size_t)n * OC + o] * w[(size_t)o * C + c];
                dinp[(size_t)n * C + c] += (float)acc;
            }
    for (int o = 0; o < OC; o++) {
        for (int c = 0; c < C; c++) {
            double acc = 0.0;
            for (int n = 0; n < N; n++) acc += (double)dout[(size_t)n * OC + o] * inp[(size_t)n * C + c];
            dw[(size_t)o * C + c] += (float)acc;
        }
        if (db) {
            double acc = 0.0;
            for (int n = 0; n < N; n++) acc += dout[(size_t)n * OC + o];
            db[o] += (float)acc;
        }
    }
}

/* ---------------------------------------------------------------------------------------------------------- */
/* encoder (token + position embedding) */

static void ref_encoder_forward(llm4d_backend *be, float *out, const int32_t *tokens, const float *wte,
                                const float *wpe, int B, int T, int C) {
    (void)be;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float *we = wte + (size_t)tokens[b * T + t] * C, *pe = wpe + (size_t)t * C;
            float *o = out + ((size_t)b * T + t) * C;
            for (int c = 0; c < C; c++) o[c] = we[c] + pe[c];
        }
}

static void ref_encoder_backward(llm4d_backend *be, float *dwte, float *dwpe, const float *dout,
                                 const int32_t *tokens, int B, int T, int C) {
    (void)be;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float *d = dout + ((size_t)b * T + t) * C;
            float *dwe = dwte + (size_t)tokens[b * T + t] * C, *dpe = dwpe + (size_t)t * C;
            for (int c = 0; c < C; c++) {
                dwe[c] += d[c];
                dpe[c] += d[c];
            }
        }
}

/* ---------------------------------------------------------------------------------------------------------- */
/* layernorm */

static void ref_layernorm_forward(llm4d_backend *be, float *out, float *mean, float *rstd, const float *inp,
                                  const float *w, const float *b, int N, int C) {
    (void)be;
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        double m = 0.0;
        for (int c = 0; c < C; c++) m += x[c];
        m /= C;
        double v = 0.0;
        for (int c = 0; c < C; c++) v += ((double)x[c] - m) * ((double)x[c] - m);
        v /= C; /* biased variance, as PyTorch/Paddle LayerNorm */
        double s = 1.0 / sqrt(v + 1e-5);
        float *o = out + (size_t)n * C;
        for (int c = 0; c < C; c++) o[c] = (float)(((double)x[c] - m) * s * w[c] + b[c]);
        if (mean) mean[n] = (float)m;
        if (rstd) rstd[n] = (float)s;
    }
}

static void ref_layernorm_backward(llm4d_backend *be, float *dinp, float *dw, float *db, const float *dout,
                                   const float *inp, const float *w, const float *mean, const float *rstd, int N,
                                   int C) {
    (void)be;
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C, *d = dout + (size_t)n * C;
        double m = mean[n], s = rstd[n];
        /* y = xhat*w + b with xhat = (x-m)*s:
         * dx = s * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat = dy*w */
        double mean_dxhat = 0.0, mean_dxhat_xhat = 0.0;
        for (int c = 0; c < C; c++) {
            double xhat = (x[c] - m) * s, dxhat = (double)d[c] * w[c];
            mean_dxhat += dxhat;
            mean_dxhat_xhat += dxhat * xhat;
        }
        mean_dxhat /= C;
        mean_dxhat_xhat /= C;
        for (int c = 0; c < C; c++) {
            double xhat = (x[c] - m) * s, dxhat = (double)d[c] * w[c];
            dinp[(size_t)n * C + c] += (float)(s * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat));
            dw[c] += (float)(d[c] * xhat);
            db[c] += d[c];
        }
    }
}

/* ---------------------------------------------------------------------------------------------------------- */
/* GELU, tanh approximation */

#define GELU_K 0.7978845608028654 /* sqrt(2/pi) */

static void ref_gelu_forward(llm4d_backend *be, float *out, const float *inp, size_t n) {
    (void)be;
    for (size_t i = 0; i < n; i++) {
        double x = inp[i];
        out[i] = (float)(0.5 * x * (1.0 + tanh(GELU_K * (x + 0.044715 * x * x * x))));
    }
}

static void ref_gelu_backward(llm4d_backend *be, float *dinp, const float *inp, const float *dout, size_t n) {
    (void)be;
    for (size_t i = 0; i < n; i++) {
        double x = inp[i];
        double t = tanh(GELU_K * (x + 0.044715 * x * x * x));
        double dt = (1.0 - t * t) * GELU_K * (1.0 + 3.0 * 0.044715 * x * x);
        dinp[i] += (float)((0.5 * (1.0 + t) + 0.5 * x * dt) * dout[i]);
    }
}

/* ---------------------------------------------------------------------------------------------------------- */
/* causal self-attention */

static uint64_t att_pos(const llm4d_attn_shape *s, const llm4d_dropout *d, int b, int h, int t1, int t2) {
    return (((uint64_t)d->sample_ids[b] * s->NH_total + s->head0 + h) * s->T + t1) * s->T + t2;
}

static float att_mult(const llm4d_attn_shape *s, const llm4d_dropout *d, int b, int h, int t1, int t2) {
    return d && d->p > 0.0f ? drop_mult(d, att_pos(s, d, b, h, t1, t2)) : 1.0f;
}

/* Row t1 of head h of batch row b: the scaled scores s[t2] = scale q.k for t2 <= t1, and their softmax a[t2].
 * Returns the row's log-sum-exp. */
static double att_row(const float *qkv, const llm4d_attn_shape *s, int b, int h, int t1, double *sc, double *a) {
    const int T = s->T, HS = s->HS, C = s->NH * HS, C3 = 3 * C;
    const double scale = 1.0 / sqrt((double)HS);
    const float *q = qkv + ((size_t)b * T + t1) * C3 + h * HS;
    double mx = -INFINITY;
    for (int t2 = 0; t2 <= t1; t2++) {
        const float *k = qkv + ((size_t)b * T + t2) * C3 + C + h * HS;
        double dot = 0.0;
        for (int i = 0; i < HS; i++) dot += (double)q[i] * k[i];
        sc[t2] = dot * scale;
        if (sc[t2] > mx) mx = sc[t2];
    }
    double sum = 0.0;
    for (int t2 = 0; t2 <= t1; t2++) sum += exp(sc[t2] - mx);
    for (int t2 = 0; t2 <= t1; t2++) a[t2] = exp(sc[t2] - mx) / sum;
    return mx + log(sum);
}

static double *att_rows_alloc(int T) {
    double *p = malloc(2 * (size_t)T * sizeof(double));
    LLM4D_ASSERT(p != NULL, "out of memory for the reference attention's row buffers (T = %d)", T);
    return p;
}

static void ref_attention_forward(llm4d_backend *be, float *out, float *lse, const float *qkv, llm4d_attn_shape s,
                                  const llm4d_dropout *drop) {
    (void)be;
    const int T = s.T, NH = s.NH, HS = s.HS, C = NH * HS, C3 = 3 * C;
    double *sc = att_rows_alloc(T), *a = sc + T;
    for (int b = 0; b < s.B; b++)
        for (int h = 0; h < NH; h++)
            for (int t1 = 0; t1 < T; t1++) {
                lse[((size_t)b * NH + h) * T + t1] = (float)att_row(qkv, &s, b, h, t1, sc, a);
                for (int t2 = 0; t2 <= t1; t2++) a[t2] *= att_mult(&s, drop, b, h, t1, t2); /* dropped: a~ */
                float *o = out + ((size_t)b * T + t1) * C + h * HS;
                for (int i = 0; i < HS; i++) {
                    double acc = 0.0;
                    for (int t2 = 0; t2 <= t1; t2++) acc += a[t2] * qkv[((size_t)b * T + t2) * C3 + 2 * C + h * HS + i];
                    o[i] = (float)acc;
                }
            }
    free(sc);
}

/* The oracle rebuilds the probabilities from qkv (the textbook softmax backward, with its own row sums), so it
 * does not rely on forward's out and lse: fast backends use them, and their agreement with this checks both. */
static void ref_attention_backward(llm4d_backend *be, float *dqkv, const float *dout, const float *out,
                                   const float *qkv, const float *lse, llm4d_attn_shape s, const llm4d_dropout *drop) {
    (void)be, (void)out, (void)lse;
    const int T = s.T, NH = s.NH, HS = s.HS, C = NH * HS, C3 = 3 * C;
    const double scale = 1.0 / sqrt((double)HS);
    double *a = att_rows_alloc(T), *datt = a + T; /* this row's probabilities and dL/d(probabilities) */
    for (int b = 0; b < s.B; b++)
        for (int h = 0; h < NH; h++)
            for (int t1 = 0; t1 < T; t1++) {
                att_row(qkv, &s, b, h, t1, datt, a); /* datt holds the scores until overwritten below */
                const float *dy = dout + ((size_t)b * T + t1) * C + h * HS;
                /* out = sum_t2 a~[t2] v[t2] with a~ = a * mult: dv += a~ dy, da = mult * (dy . v) */
                for (int t2 = 0; t2 <= t1; t2++) {
                    const float *v = qkv + ((size_t)b * T + t2) * C3 + 2 * C + h * HS;
                    float *dv = dqkv + ((size_t)b * T + t2) * C3 + 2 * C + h * HS;
                    const double m = att_mult(&s, drop, b, h, t1, t2);
                    double dot = 0.0;
                    for (int i = 0; i < HS; i++) {
                        dot += (double)dy[i] * v[i];
                        dv[i] += (float)(a[t2] * m * dy[i]);
                    }
                    datt[t2] = dot * m;
                }
                /* softmax backward: dpre[t2] = a[t2] * (datt[t2] - sum_j a[j] datt[j]) */
                double sum = 0.0;
                for (int t2 = 0; t2 <= t1; t2++) sum += a[t2] * datt[t2];
                const float *q = qkv + ((size_t)b * T + t1) * C3 + h * HS;
                float *dq = dqkv + ((size_t)b * T + t1) * C3 + h * HS;
                for (int t2 = 0; t2 <= t1; t2++) {
                    const double dpre = a[t2] * (datt[t2] - sum) * scale;
                    const float *k = qkv + ((size_t)b * T + t2) * C3 + C + h * HS;
                    float *dk = dqkv + ((size_t)b * T + t2) * C3 + C + h * HS;
                    for (int i = 0; i < HS; i++) {
                        dq[i] += (float)(dpre * k[i]);
                        dk[i] += (float)(dpre * q[i]);
                    }
                }
            }
    free(a);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* dropout */

static void ref_dropout_forward(llm4d_backend *be, float *out, const float *inp, int B, size_t row,
                                const llm4d_dropout *drop) {
    (void)be;
    for (int b = 0; b < B; b++)
        for (size_t i = 0; i < row; i++) {
            size_t k = (size_t)b * row + i;
            out[k] = inp[k] * (drop && drop->p > 0.0f ? drop_mult(drop, (uint64_t)drop->sample_ids[b] * row + i)
                                                      : 1.0f);
        }
}

static void ref_dropout_backward(llm4d_backend *be, float *dinp, const float *dout, int B, size_t row,
                                 const llm4d_dropout *drop) {
    (void)be;
    for (int b = 0; b < B; b++)
        for (size_t i = 0; i < row; i++) {
            size_t k = (size_t)b * row + i;
            dinp[k] += dout[k] * (drop && drop->p > 0.0f
                                      ? drop_mult(drop, (uint64_t)drop->sample_ids[b] * row + i)
                                      : 1.0f);
        }
}

static void ref_dropout_add_forward(llm4d_backend *be, float *out, const float *res, const float *x, int B,
                                    size_t row, const llm4d_dropout *drop) {
    (void)be;
    for (int b = 0; b < B; b++)
        for (size_t i = 0; i < row; i++) {
            size_t k = (size_t)b * row + i;
            float m = drop && drop->p > 0.0f ? drop_mult(drop, (uint64_t)drop->sample_ids[b] * row + i) : 1.0f;
            out[k] = res[k] + x[k] * m;
        }
}

static void ref_dropout_add_backward(llm4d_backend *be, float *dres, float *dx, const float *dout, int B,
                                     size_t row, const llm4d_dropout *drop) {
    (void)be;
    for (int b = 0; b < B; b++)
        for (size_t i = 0; i < row; i++) {
            size_t k = (size_t)b * row + i;
            float m = drop && drop->p > 0.0f ? drop_mult(drop, (uint64_t)drop->sample_ids[b] * row + i) : 1.0f;
            dres[k] += dout[k];
            dx[k] += dout[k] * m;
        }
}

/* ---------------------------------------------------------------------------------------------------------- */
/* softmax cross-entropy over the first V of Vp logits */

static void ref_crossentropy_forward_backward(llm4d_backend *be, float *losses, float *dlogits, const float *logits,
                                              const int32_t *targets, const float *dloss, int N, int V, int Vp) {
    (void)be;
    for (int n = 0; n < N; n++) {
        const float *l = logits + (size_t)n * Vp;
        int y = targets[n];
        double mx = -INFINITY;
        for (int j = 0; j < V; j++)
            if (l[j] > mx) mx = l[j];
        double sum = 0.0;
        for (int j = 0; j < V; j++) sum += exp(l[j] - mx);
        double logit_y = l[y];
        if (losses) losses[n] = (float)(log(sum) + mx - logit_y);
        if (dlogits) {
            /* dlogits may be logits: each element is read before it is written */
            float *d = dlogits + (size_t)n * Vp;
            double w = dloss ? dloss[n] : 1.0;
            for (int j = 0; j < V; j++) d[j] = (float)((exp(l[j] - mx) / sum - (j == y ? 1.0 : 0.0)) * w);
            for (int j = V; j < Vp; j++) d[j] = 0.0f;
        }
    }
}

/* ---------------------------------------------------------------------------------------------------------- */
/* optimizer helpers */

static void ref_adamw(llm4d_backend *be, float *params, const float *grads, float *m, float *v, size_t n, float lr,
                      float beta1, float beta2, float eps, float wd, int t, float grad_scale) {
    (void)be;
    double bc1 = 1.0 - pow(beta1, t), bc2 = 1.0 - pow(beta2, t);
    float lr_t = (float)(lr * sqrt(bc2) / bc1), eps_t = (float)(eps * sqrt(bc2));
    for (size_t i = 0; i < n; i++) {
        float g = grads[i] * grad_scale;
        params[i] -= lr * wd * params[i];
        m[i] = beta1 * m[i] + (1.0f - beta1) * g;
        v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
        params[i] -= lr_t * m[i] / (sqrtf(v[i]) + eps_t);
    }
}

static double ref_sumsq(llm4d_backend *be, const float *x, size_t n) {
    (void)be;
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return s;
}

static void ref_scale(llm4d_backend *be, float *x, float s, size_t n) {
    (void)be;
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

static void ref_destroy(llm4d_backend *be) { free(be); }

llm4d_code llm4d_backend_ref_create(llm4d_backend **out, llm4d_err *err) {
    llm4d_backend *be = calloc(1, sizeof *be);
    if (!be) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory creating the reference backend");
    be->name = "ref";
    be->nthreads = 1;
    be->alloc = ref_alloc;
    be->free = ref_free;
    be->zero = ref_zero;
    be->copy = ref_copy;
    be->linear_forward = ref_linear_forward;
    be->linear_backward = ref_linear_backward;
    be->encoder_forward = ref_encoder_forward;
    be->encoder_backward = ref_encoder_backward;
    be->layernorm_forward = ref_layernorm_forward;
    be->layernorm_backward = ref_layernorm_backward;
    be->gelu_forward = ref_gelu_forward;
    be->gelu_backward = ref_gelu_backward;
    be->attention_forward = ref_attention_forward;
    be->attention_backward = ref_attention_backward;
    be->dropout_forward = ref_dropout_forward;
    be->dropout_backward = ref_dropout_backward;
    be->dropout_add_forward = ref_dropout_add_forward;
    be->dropout_add_backward = ref_dropout_add_backward;
    be->crossentropy_forward_backward = ref_crossentropy_forward_backward;
    be->adamw = ref_adamw;
    be->sumsq = ref_sumsq;
    be->scale = ref_scale;
    be->destroy = ref_destroy;
    *out = be;
    return LLM4D_OK;
}
