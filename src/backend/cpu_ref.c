/* cpu_ref.c — the reference backend: every operation of backend.h as plain loops.
 *
 * This file is the oracle that the fast CPU backend (cpu.c) and any future backend are tested against, and
 * the one the finite-difference gradient checks validate, so it is written for obviousness, not speed: one
 * thread, the formulas spelled out as in llm.c, reductions accumulated in double so that its own rounding is
 * well below the tolerances the tests use, and each dropout decision recomputed from the counter-based RNG
 * (core/rng.h) at the element's global position. Typed tensors (fp32, bf16, fp16: tensor.h) are read and written
 * one element at a time through one pair of helpers, so every kernel is written once for all types. Nothing here
 * allocates except alloc itself and the attention, which takes two rows of T doubles per call (it has no context
 * to keep them in) and, backward, an fp32 buffer for a 16-bit dqkv. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/host.h"
#include "core/bf16.h"
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
/* typed tensors (tensor.h): every kernel below reads a typed element as the fp32 value it holds (a 16-bit value is
 * exactly a float), so with fp32 tensors each expression is the one it was on float arrays, bit for bit; and it
 * stores a result by rounding it to fp32, as the loops always did, then to the tensor's type (nothing more to do
 * for fp32): one rounding per typed output, on store. */

static float ld(llm4d_ctensor t, size_t i) { return llm4d_ftype_get(t, i); }
static void st(llm4d_tensor t, size_t i, double v) { llm4d_ftype_set(t, i, (float)v); }

/* ---------------------------------------------------------------------------------------------------------- */
/* linear */

/* GELU, tanh approximation, in double */
#define GELU_K 0.7978845608028654 /* sqrt(2/pi) */
static double ref_gelu(double x) { return 0.5 * x * (1.0 + tanh(GELU_K * (x + 0.044715 * x * x * x))); }

/* element i of a linear layer's input as the layer reads it */
static double ref_in(llm4d_ctensor inp, size_t i, llm4d_act act) {
    return act == LLM4D_ACT_GELU ? ref_gelu(ld(inp, i)) : (double)ld(inp, i);
}

static void ref_linear_forward_act(llm4d_backend *be, llm4d_tensor out, llm4d_ctensor inp, llm4d_act act,
                                   const float *w, const float *b, int N, int C, int OC) {
    (void)be;
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double acc = b ? b[o] : 0.0;
            for (int c = 0; c < C; c++) acc += ref_in(inp, (size_t)n * C + c, act) * w[(size_t)o * C + c];
            st(out, (size_t)n * OC + o, acc);
        }
}

static void ref_linear_forward(llm4d_backend *be, llm4d_tensor out, llm4d_ctensor inp, const float *w,
                               const float *b, int N, int C, int OC) {
    ref_linear_forward_act(be, out, inp, LLM4D_ACT_NONE, w, b, N, C, OC);
}

static void ref_linear_backward_act(llm4d_backend *be, llm4d_tensor dinp, llm4d_store dinp_store, float *dw,
                                    float *db, llm4d_ctensor dout, llm4d_ctensor inp, llm4d_act act, const float *w,
                                    int N, int C, int OC) {
    (void)be;
    if (dinp.p)
        for (int n = 0; n < N; n++)
            for (int c = 0; c < C; c++) {
                double acc = 0.0;
                for (int o = 0; o < OC; o++) acc += (double)ld(dout, (size_t)n * OC + o) * w[(size_t)o * C + c];
                const size_t k = (size_t)n * C + c;
                st(dinp, k, dinp_store == LLM4D_ADD ? ld(llm4d_cv(dinp), k) + (float)acc : (float)acc);
            }
    for (int o = 0; o < OC; o++) {
        for (int c = 0; dw && c < C; c++) {
            double acc = 0.0;
            for (int n = 0; n < N; n++)
                acc += (double)ld(dout, (size_t)n * OC + o) * ref_in(inp, (size_t)n * C + c, act);
            dw[(size_t)o * C + c] += (float)acc;
        }
        if (db) {
            double acc = 0.0;
            for (int n = 0; n < N; n++) acc += ld(dout, (size_t)n * OC + o);
            db[o] += (float)acc;
        }
    }
}

static void ref_linear_backward(llm4d_backend *be, llm4d_tensor dinp, llm4d_store dinp_store, float *dw, float *db,
                                llm4d_ctensor dout, llm4d_ctensor inp, const float *w, int N, int C, int OC) {
    ref_linear_backward_act(be, dinp, dinp_store, dw, db, dout, inp, LLM4D_ACT_NONE, w, N, C, OC);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* embeddings and bias */

static void ref_embedding_forward(llm4d_backend *be, float *out, const int32_t *tokens, const float *w, int row0,
                                  int nrows, int N, int C) {
    (void)be;
    for (int n = 0; n < N; n++) {
        const int r = tokens[n] - row0;
        if (r < 0 || r >= nrows) continue;
        for (int c = 0; c < C; c++) out[(size_t)n * C + c] += w[(size_t)r * C + c];
    }
}

static void ref_embedding_backward(llm4d_backend *be, float *dw, const float *dout, const int32_t *tokens, int row0,
                                   int nrows, int N, int C) {
    (void)be;
    for (int n = 0; n < N; n++) {
        const int r = tokens[n] - row0;
        if (r < 0 || r >= nrows) continue;
        for (int c = 0; c < C; c++) dw[(size_t)r * C + c] += dout[(size_t)n * C + c];
    }
}

static void ref_position_forward(llm4d_backend *be, float *out, const float *wpe, int N, int C, int T,
                                 int64_t tok0) {
    (void)be;
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) out[(size_t)n * C + c] += wpe[(size_t)((tok0 + n) % T) * C + c];
}

static void ref_position_backward(llm4d_backend *be, float *dwpe, const float *dout, int N, int C, int T,
                                  int64_t tok0) {
    (void)be;
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) dwpe[(size_t)((tok0 + n) % T) * C + c] += dout[(size_t)n * C + c];
}

static void ref_bias_forward(llm4d_backend *be, float *out, const float *b, int N, int C) {
    (void)be;
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) out[(size_t)n * C + c] += b[c];
}

static void ref_bias_backward(llm4d_backend *be, float *db, llm4d_ctensor dout, int N, int C) {
    (void)be;
    for (int c = 0; c < C; c++) {
        double acc = 0.0;
        for (int n = 0; n < N; n++) acc += ld(dout, (size_t)n * C + c);
        db[c] += (float)acc;
    }
}

/* ---------------------------------------------------------------------------------------------------------- */
/* layernorm */

static void ref_layernorm_forward(llm4d_backend *be, llm4d_tensor out, float *mean, float *rstd, llm4d_ctensor inp,
                                  const float *w, const float *b, int N, int C) {
    (void)be;
    for (int n = 0; n < N; n++) {
        const llm4d_ctensor x = llm4d_ct_at(inp, (size_t)n * C);
        double m = 0.0;
        for (int c = 0; c < C; c++) m += ld(x, c);
        m /= C;
        double v = 0.0;
        for (int c = 0; c < C; c++) v += ((double)ld(x, c) - m) * ((double)ld(x, c) - m);
        v /= C; /* biased variance, as PyTorch/Paddle LayerNorm */
        double s = 1.0 / sqrt(v + 1e-5);
        const llm4d_tensor o = llm4d_t_at(out, (size_t)n * C);
        for (int c = 0; c < C; c++) st(o, c, ((double)ld(x, c) - m) * s * w[c] + b[c]);
        if (mean) mean[n] = (float)m;
        if (rstd) rstd[n] = (float)s;
    }
}

static void ref_layernorm_backward(llm4d_backend *be, llm4d_tensor dinp, float *dw, float *db, llm4d_ctensor dout,
                                   llm4d_ctensor inp, const float *w, const float *mean, const float *rstd, int N,
                                   int C) {
    (void)be;
    for (int n = 0; n < N; n++) {
        const llm4d_ctensor x = llm4d_ct_at(inp, (size_t)n * C), d = llm4d_ct_at(dout, (size_t)n * C);
        const llm4d_tensor dx = llm4d_t_at(dinp, (size_t)n * C);
        double m = mean[n], s = rstd[n];
        /* y = xhat*w + b with xhat = (x-m)*s:
         * dx = s * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat = dy*w */
        double mean_dxhat = 0.0, mean_dxhat_xhat = 0.0;
        for (int c = 0; c < C; c++) {
            double xhat = (ld(x, c) - m) * s, dxhat = (double)ld(d, c) * w[c];
            mean_dxhat += dxhat;
            mean_dxhat_xhat += dxhat * xhat;
        }
        mean_dxhat /= C;
        mean_dxhat_xhat /= C;
        for (int c = 0; c < C; c++) {
            double xhat = (ld(x, c) - m) * s, dxhat = (double)ld(d, c) * w[c];
            st(dx, c, ld(llm4d_cv(dx), c) + (float)(s * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat)));
            dw[c] += (float)(ld(d, c) * xhat);
            db[c] += ld(d, c);
        }
    }
}

/* ---------------------------------------------------------------------------------------------------------- */
/* GELU, tanh approximation */

static void ref_gelu_forward(llm4d_backend *be, llm4d_tensor out, llm4d_ctensor inp, size_t n) {
    (void)be;
    for (size_t i = 0; i < n; i++) st(out, i, ref_gelu(ld(inp, i)));
}

static void ref_gelu_backward(llm4d_backend *be, llm4d_tensor dinp, llm4d_ctensor inp, llm4d_ctensor dout, size_t n) {
    (void)be;
    for (size_t i = 0; i < n; i++) {
        double x = ld(inp, i);
        double t = tanh(GELU_K * (x + 0.044715 * x * x * x));
        double dt = (1.0 - t * t) * GELU_K * (1.0 + 3.0 * 0.044715 * x * x);
        st(dinp, i, (0.5 * (1.0 + t) + 0.5 * x * dt) * ld(dout, i));
    }
}

/* ---------------------------------------------------------------------------------------------------------- */
/* the Llama family: RMSNorm, RoPE, SwiGLU (methods.h) */

static void ref_rmsnorm_forward(llm4d_backend *be, llm4d_tensor out, float *rstd, llm4d_ctensor inp, const float *w,
                                int N, int C, float eps) {
    (void)be;
    for (int n = 0; n < N; n++) {
        const llm4d_ctensor x = llm4d_ct_at(inp, (size_t)n * C);
        double ms = 0.0;
        for (int c = 0; c < C; c++) ms += (double)ld(x, c) * ld(x, c);
        ms /= C;
        const double s = 1.0 / sqrt(ms + (double)eps);
        const llm4d_tensor o = llm4d_t_at(out, (size_t)n * C);
        for (int c = 0; c < C; c++) st(o, c, ld(x, c) * s * w[c]);
        if (rstd) rstd[n] = (float)s;
    }
}

static void ref_rmsnorm_backward(llm4d_backend *be, llm4d_tensor dinp, float *dw, llm4d_ctensor dout,
                                 llm4d_ctensor inp, const float *w, const float *rstd, int N, int C) {
    (void)be;
    for (int n = 0; n < N; n++) {
        const llm4d_ctensor x = llm4d_ct_at(inp, (size_t)n * C), d = llm4d_ct_at(dout, (size_t)n * C);
        const llm4d_tensor dx = llm4d_t_at(dinp, (size_t)n * C);
        const double s = rstd[n];
        /* y = xhat w, xhat = x s, s = (mean(x^2) + eps)^(-1/2), ds/dx_c = -s^3 x_c / C:
         * dx_c = s dy_c w_c - s^3 x_c / C sum_k dy_k w_k x_k = s (g_c - xhat_c mean(g xhat)), g = dy w */
        double mean_g_xhat = 0.0;
        for (int c = 0; c < C; c++) mean_g_xhat += (double)ld(d, c) * w[c] * ld(x, c) * s;
        mean_g_xhat /= C;
        for (int c = 0; c < C; c++) {
            const double xhat = ld(x, c) * s, g = (double)ld(d, c) * w[c];
            st(dx, c, ld(llm4d_cv(dx), c) + (float)(s * (g - xhat * mean_g_xhat)));
        }
    }
    for (int c = 0; c < C; c++) {
        double acc = 0.0;
        for (int n = 0; n < N; n++) acc += (double)ld(dout, (size_t)n * C + c) * ld(inp, (size_t)n * C + c) * rstd[n];
        dw[c] += (float)acc;
    }
}

/* Hugging Face Llama's form: out = x cos + rotate_half(x) sin, rotate_half(x) = [-x2, x1] for the halves x1, x2 of
 * a head, cos and sin of the angles [f, f] (each frequency twice); sign -1 turns the other way (backward). A pair
 * (i, i + HS/2) is read before it is written, so out may be inp. */
static void ref_rope(llm4d_tensor out, llm4d_ctensor inp, llm4d_rope_shape s, double sign) {
    const int half = s.HS / 2;
    for (int n = 0; n < s.N; n++) {
        const double pos = (double)((s.tok0 + n) % s.T);
        for (int h = 0; h < s.NH; h++) {
            const size_t at = (size_t)n * s.ld + (size_t)h * s.HS;
            for (int i = 0; i < half; i++) {
                const double f = pos * pow((double)s.theta, -(double)(2 * i) / s.HS);
                const double x1 = ld(inp, at + i), x2 = ld(inp, at + half + i);
                st(out, at + i, x1 * cos(f) + (-x2) * sign * sin(f));
                st(out, at + half + i, x2 * cos(f) + x1 * sign * sin(f));
            }
        }
    }
}

static void ref_rope_forward(llm4d_backend *be, llm4d_tensor out, llm4d_ctensor inp, llm4d_rope_shape s) {
    (void)be;
    ref_rope(out, inp, s, 1.0);
}

static void ref_rope_backward(llm4d_backend *be, llm4d_tensor dinp, llm4d_ctensor dout, llm4d_rope_shape s) {
    (void)be;
    ref_rope(dinp, dout, s, -1.0);
}

static double ref_sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

static void ref_swiglu_forward(llm4d_backend *be, llm4d_tensor out, llm4d_ctensor inp, int N, int F) {
    (void)be;
    for (int n = 0; n < N; n++)
        for (int f = 0; f < F; f++) {
            const double g = ld(inp, 2 * (size_t)n * F + f), u = ld(inp, 2 * (size_t)n * F + F + f);
            st(out, (size_t)n * F + f, g * ref_sigmoid(g) * u);
        }
}

static void ref_swiglu_backward(llm4d_backend *be, llm4d_tensor dinp, llm4d_ctensor inp, llm4d_ctensor dout, int N,
                                int F) {
    (void)be;
    for (int n = 0; n < N; n++)
        for (int f = 0; f < F; f++) {
            const size_t gi = 2 * (size_t)n * F + f, ui = gi + F;
            const double g = ld(inp, gi), u = ld(inp, ui), dy = ld(dout, (size_t)n * F + f), sg = ref_sigmoid(g);
            st(dinp, gi, dy * u * sg * (1.0 + g * (1.0 - sg))); /* silu' = sigmoid (1 + g (1 - sigmoid)) */
            st(dinp, ui, dy * g * sg);
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

/* Where row t of batch row b keeps query head h's query (part 0), and the key (part 1) and value (part 2) of the kv
 * head it reads, h / (NH / NKV), in qkv [B, T, (NH + 2 NKV) HS]; and the head's slice of an [B, T, NH HS] row
 * (part -1: out, dout). */
static size_t att_at(const llm4d_attn_shape *s, int b, int t, int part, int h) {
    const size_t HS = (size_t)s->HS, NKV = (size_t)llm4d_attn_nkv(*s), C = (size_t)s->NH * HS;
    const size_t row = ((size_t)b * s->T + t) * (C + 2 * NKV * HS), kvh = (size_t)h / ((size_t)s->NH / NKV);
    if (part < 0) return ((size_t)b * s->T + t) * C + (size_t)h * HS;
    if (part == 0) return row + (size_t)h * HS;
    return row + C + (size_t)(part - 1) * NKV * HS + kvh * HS;
}

static void att_check(const llm4d_attn_shape *s) {
    const int nkv = llm4d_attn_nkv(*s);
    LLM4D_ASSERT(s->NH % nkv == 0, "attention: %d query heads do not split into %d key/value heads", s->NH, nkv);
}

/* Row t1 of head h of batch row b: the scaled scores s[t2] = scale q.k for t2 <= t1, and their softmax a[t2].
 * Returns the row's log-sum-exp. */
static double att_row(llm4d_ctensor qkv, const llm4d_attn_shape *s, int b, int h, int t1, double *sc, double *a) {
    const int HS = s->HS;
    const double scale = 1.0 / sqrt((double)HS);
    const llm4d_ctensor q = llm4d_ct_at(qkv, att_at(s, b, t1, 0, h));
    double mx = -INFINITY;
    for (int t2 = 0; t2 <= t1; t2++) {
        const llm4d_ctensor k = llm4d_ct_at(qkv, att_at(s, b, t2, 1, h));
        double dot = 0.0;
        for (int i = 0; i < HS; i++) dot += (double)ld(q, i) * ld(k, i);
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

static void ref_attention_forward(llm4d_backend *be, llm4d_tensor out, float *lse, llm4d_ctensor qkv,
                                  llm4d_attn_shape s, const llm4d_dropout *drop) {
    (void)be;
    att_check(&s);
    const int T = s.T, NH = s.NH, HS = s.HS;
    double *sc = att_rows_alloc(T), *a = sc + T;
    for (int b = 0; b < s.B; b++)
        for (int h = 0; h < NH; h++)
            for (int t1 = 0; t1 < T; t1++) {
                lse[((size_t)b * NH + h) * T + t1] = (float)att_row(qkv, &s, b, h, t1, sc, a);
                for (int t2 = 0; t2 <= t1; t2++) a[t2] *= att_mult(&s, drop, b, h, t1, t2); /* dropped: a~ */
                const llm4d_tensor o = llm4d_t_at(out, att_at(&s, b, t1, -1, h));
                for (int i = 0; i < HS; i++) {
                    double acc = 0.0;
                    for (int t2 = 0; t2 <= t1; t2++) acc += a[t2] * ld(qkv, att_at(&s, b, t2, 2, h) + i);
                    st(o, i, acc);
                }
            }
    free(sc);
}

/* The oracle rebuilds the probabilities from qkv (the textbook softmax backward, with its own row sums), so it
 * does not rely on forward's out and lse: fast backends use them, and their agreement with this checks both.
 * Every query row (of every query head of a kv head's group) adds to the keys' and values' gradients, so they are
 * summed in fp32 (in dqkv itself when it is fp32, else in a buffer of qkv's size) and a 16-bit dqkv is rounded
 * once, at the end. */
static void ref_attention_backward(llm4d_backend *be, llm4d_tensor dqkv, llm4d_ctensor dout, llm4d_ctensor out,
                                   llm4d_ctensor qkv, const float *lse, llm4d_attn_shape s,
                                   const llm4d_dropout *drop) {
    (void)be, (void)out, (void)lse;
    att_check(&s);
    const int T = s.T, NH = s.NH, HS = s.HS;
    const size_t n = (size_t)s.B * T * ((size_t)NH + 2 * (size_t)llm4d_attn_nkv(s)) * HS;
    const double scale = 1.0 / sqrt((double)HS);
    double *a = att_rows_alloc(T), *datt = a + T; /* this row's probabilities and dL/d(probabilities) */
    float *g = dqkv.t == LLM4D_F32 ? dqkv.p : malloc(n * sizeof(float));
    LLM4D_ASSERT(g != NULL, "out of memory for the reference attention's fp32 gradient (%zu floats)", n);
    memset(g, 0, n * sizeof(float)); /* written, not added (backend.h); rows accumulate */
    for (int b = 0; b < s.B; b++)
        for (int h = 0; h < NH; h++)
            for (int t1 = 0; t1 < T; t1++) {
                att_row(qkv, &s, b, h, t1, datt, a); /* datt holds the scores until overwritten below */
                const llm4d_ctensor dy = llm4d_ct_at(dout, att_at(&s, b, t1, -1, h));
                /* out = sum_t2 a~[t2] v[t2] with a~ = a * mult: dv += a~ dy, da = mult * (dy . v) */
                for (int t2 = 0; t2 <= t1; t2++) {
                    const llm4d_ctensor v = llm4d_ct_at(qkv, att_at(&s, b, t2, 2, h));
                    float *dv = g + att_at(&s, b, t2, 2, h);
                    const double m = att_mult(&s, drop, b, h, t1, t2);
                    double dot = 0.0;
                    for (int i = 0; i < HS; i++) {
                        dot += (double)ld(dy, i) * ld(v, i);
                        dv[i] += (float)(a[t2] * m * ld(dy, i));
                    }
                    datt[t2] = dot * m;
                }
                /* softmax backward: dpre[t2] = a[t2] * (datt[t2] - sum_j a[j] datt[j]) */
                double sum = 0.0;
                for (int t2 = 0; t2 <= t1; t2++) sum += a[t2] * datt[t2];
                const llm4d_ctensor q = llm4d_ct_at(qkv, att_at(&s, b, t1, 0, h));
                float *dq = g + att_at(&s, b, t1, 0, h);
                for (int t2 = 0; t2 <= t1; t2++) {
                    const double dpre = a[t2] * (datt[t2] - sum) * scale;
                    const llm4d_ctensor k = llm4d_ct_at(qkv, att_at(&s, b, t2, 1, h));
                    float *dk = g + att_at(&s, b, t2, 1, h);
                    for (int i = 0; i < HS; i++) {
                        dq[i] += (float)(dpre * ld(k, i));
                        dk[i] += (float)(dpre * ld(q, i));
                    }
                }
            }
    if (g != dqkv.p) {
        for (size_t i = 0; i < n; i++) st(dqkv, i, g[i]);
        free(g);
    }
    free(a);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* dropout */

/* The multiplier of element (n, c) of an [N, C] activation (positions: backend.h, llm4d_dropout). */
static float act_mult(const llm4d_dropout *d, int n, int C, int c) {
    if (!d || d->p == 0.0f) return 1.0f;
    const int64_t tok = d->tok0 + n;
    const uint64_t row = (uint64_t)d->sample_ids[tok / d->T] * (uint64_t)d->T + (uint64_t)(tok % d->T);
    return drop_mult(d, row * (uint64_t)C + (uint64_t)c);
}

/* In place (out and inp the same memory and type), each element is read before it is written. */
static void ref_dropout_forward(llm4d_backend *be, llm4d_tensor out, llm4d_ctensor inp, int N, int C,
                                const llm4d_dropout *drop) {
    (void)be;
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            size_t k = (size_t)n * C + c;
            st(out, k, ld(inp, k) * act_mult(drop, n, C, c));
        }
}

static void ref_dropout_backward(llm4d_backend *be, llm4d_tensor dinp, llm4d_ctensor dout, int N, int C,
                                 const llm4d_dropout *drop) {
    (void)be;
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            size_t k = (size_t)n * C + c;
            st(dinp, k, ld(llm4d_cv(dinp), k) + ld(dout, k) * act_mult(drop, n, C, c));
        }
}

static void ref_dropout_add_forward(llm4d_backend *be, llm4d_tensor out, llm4d_ctensor res, llm4d_ctensor x, int N,
                                    int C, const llm4d_dropout *drop) {
    (void)be;
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            size_t k = (size_t)n * C + c;
            st(out, k, ld(res, k) + ld(x, k) * act_mult(drop, n, C, c));
        }
}

static void ref_dropout_add_backward(llm4d_backend *be, llm4d_tensor dres, llm4d_tensor dx, llm4d_ctensor dout,
                                     int N, int C, const llm4d_dropout *drop) {
    (void)be;
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            size_t k = (size_t)n * C + c;
            const float d = ld(dout, k); /* dres or dx may be dout itself */
            st(dres, k, d);
            st(dx, k, d * act_mult(drop, n, C, c));
        }
}

/* ---------------------------------------------------------------------------------------------------------- */
/* softmax cross-entropy over vocabulary parts (backend.h) */

static void ref_xent_forward(llm4d_backend *be, float *stats, llm4d_ctensor logits, const int32_t *targets, int N,
                             int Vl, int v0, int V, int merge) {
    (void)be;
    const int real = V - v0 < Vl ? (V - v0 > 0 ? V - v0 : 0) : Vl; /* columns of real entries */
    for (int n = 0; n < N; n++) {
        const llm4d_ctensor l = llm4d_ct_at(logits, (size_t)n * Vl);
        double mx = -INFINITY;
        for (int j = 0; j < real; j++)
            if (ld(l, j) > mx) mx = ld(l, j);
        double sum = 0.0;
        for (int j = 0; j < real; j++) sum += exp(ld(l, j) - mx);
        const int y = targets[n] - v0;
        double ly = y >= 0 && y < real ? ld(l, y) : 0.0;
        if (merge) { /* combine (m, s, y) with this part's (mx, sum, ly) */
            double m0 = stats[n], s0 = stats[N + n];
            double m = m0 > mx ? m0 : mx;
            sum = (s0 > 0 ? s0 * exp(m0 - m) : 0.0) + (real > 0 ? sum * exp(mx - m) : 0.0);
            mx = m;
            ly += stats[2 * N + n];
        }
        stats[n] = (float)mx;
        stats[N + n] = (float)sum;
        stats[2 * N + n] = (float)ly;
    }
}

static void ref_xent_rescale(llm4d_backend *be, float *stats, const float *gmax, int N) {
    (void)be;
    for (int n = 0; n < N; n++) {
        if (stats[N + n] > 0) stats[N + n] = (float)(stats[N + n] * exp((double)stats[n] - gmax[n]));
        stats[n] = gmax[n];
    }
}

static void ref_xent_backward(llm4d_backend *be, float *losses, llm4d_tensor dlogits, llm4d_ctensor logits,
                              const float *stats, const int32_t *targets, const float *dloss, int N, int Vl, int v0,
                              int V) {
    (void)be;
    for (int n = 0; n < N; n++) {
        const double lse = stats[n] + log((double)stats[N + n]);
        if (losses) losses[n] = (float)(lse - stats[2 * N + n]);
        if (!dlogits.p) continue;
        /* dlogits may be logits: each element is read before it is written */
        const llm4d_ctensor l = llm4d_ct_at(logits, (size_t)n * Vl);
        const llm4d_tensor d = llm4d_t_at(dlogits, (size_t)n * Vl);
        const double w = dloss ? dloss[n] : 1.0;
        for (int j = 0; j < Vl; j++) {
            const int v = v0 + j;
            st(d, j, v < V ? (float)((exp(ld(l, j) - lse) - (v == targets[n] ? 1.0 : 0.0)) * w) : 0.0f);
        }
    }
}

/* ---------------------------------------------------------------------------------------------------------- */
/* optimizer helpers */

static void ref_adamw(llm4d_backend *be, float *params, float *grads, float *m, float *v, size_t n, float lr,
                      float beta1, float beta2, float eps, float wd, int t, float grad_scale, int zero_grads) {
    (void)be;
    double bc1 = 1.0 - pow(beta1, t), bc2 = 1.0 - pow(beta2, t);
    float lr_t = (float)(lr * sqrt(bc2) / bc1), eps_t = (float)(eps * sqrt(bc2));
    for (size_t i = 0; i < n; i++) {
        float g = grads[i] * grad_scale;
        params[i] -= lr * wd * params[i];
        m[i] = beta1 * m[i] + (1.0f - beta1) * g;
        v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
        params[i] -= lr_t * m[i] / (sqrtf(v[i]) + eps_t);
        if (zero_grads) grads[i] = 0.0f;
    }
}

static double ref_sumsq(llm4d_backend *be, const float *x, size_t n) {
    (void)be;
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return s;
}

static double ref_dot(llm4d_backend *be, const float *a, const float *b, size_t n) {
    (void)be;
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * (b ? b[i] : 1.0f);
    return s;
}

static void ref_add(llm4d_backend *be, float *dst, const float *src, size_t n) {
    (void)be;
    for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

static void ref_scale(llm4d_backend *be, float *x, float s, size_t n) {
    (void)be;
    for (size_t i = 0; i < n; i++) x[i] *= s;
}

/* The same type: a copy of the bits (a NaN's payload kept); else each value rounded once to dst's type. */
static void ref_convert(llm4d_backend *be, llm4d_tensor dst, llm4d_ctensor src, size_t n) {
    (void)be;
    if (dst.t == src.t) {
        memmove(dst.p, src.p, n * llm4d_ftype_size(dst.t));
        return;
    }
    for (size_t i = 0; i < n; i++) st(dst, i, ld(src, i));
}

static void ref_to_bf16(llm4d_backend *be, uint16_t *dst, const float *src, size_t n) {
    (void)be;
    for (size_t i = 0; i < n; i++) dst[i] = llm4d_bf16_from_f32(src[i]);
}

static void ref_from_bf16(llm4d_backend *be, float *dst, const uint16_t *src, size_t n, llm4d_store store) {
    (void)be;
    for (size_t i = 0; i < n; i++) dst[i] = (store == LLM4D_ADD ? dst[i] : 0.0f) + llm4d_bf16_to_f32(src[i]);
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
    be->linear_forward_act = ref_linear_forward_act;
    be->linear_backward_act = ref_linear_backward_act;
    be->embedding_forward = ref_embedding_forward;
    be->embedding_backward = ref_embedding_backward;
    be->position_forward = ref_position_forward;
    be->position_backward = ref_position_backward;
    be->bias_forward = ref_bias_forward;
    be->bias_backward = ref_bias_backward;
    be->layernorm_forward = ref_layernorm_forward;
    be->layernorm_backward = ref_layernorm_backward;
    be->gelu_forward = ref_gelu_forward;
    be->gelu_backward = ref_gelu_backward;
    be->rmsnorm_forward = ref_rmsnorm_forward;
    be->rmsnorm_backward = ref_rmsnorm_backward;
    be->rope_forward = ref_rope_forward;
    be->rope_backward = ref_rope_backward;
    be->swiglu_forward = ref_swiglu_forward;
    be->swiglu_backward = ref_swiglu_backward;
    be->attention_forward = ref_attention_forward;
    be->attention_backward = ref_attention_backward;
    be->dropout_forward = ref_dropout_forward;
    be->dropout_backward = ref_dropout_backward;
    be->dropout_add_forward = ref_dropout_add_forward;
    be->dropout_add_backward = ref_dropout_add_backward;
    be->xent_forward = ref_xent_forward;
    be->xent_rescale = ref_xent_rescale;
    be->xent_backward = ref_xent_backward;
    be->adamw = ref_adamw;
    be->sumsq = ref_sumsq;
    be->dot = ref_dot;
    be->scale = ref_scale;
    be->add = ref_add;
    be->convert = ref_convert;
    be->to_bf16 = ref_to_bf16;
    be->from_bf16 = ref_from_bf16;
    be->destroy = ref_destroy;
    llm4d_host_install(be);
    *out = be;
    return LLM4D_OK;
}
