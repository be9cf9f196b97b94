/* cpu_llama.c — the fast CPU backend's kernels of the Llama family (issue 47): RMSNorm, rotary position embeddings
 * (RoPE) and SwiGLU, forward and backward (methods.h says what each computes).
 *
 * They follow cpu_elem.c's rules: work split over rows in a fixed way, `omp simd` inner loops, reductions across
 * rows (RMSNorm's weight gradient) over fixed column blocks with the rows in order, so no result depends on the
 * thread count; typed tensors are read in place when fp32 and widened a row at a time otherwise, each typed output
 * rounded once on store (cpu_impl.h).
 *
 * RoPE computes its sines and cosines as it goes, not from a table: a table would be an argument every caller has
 * to build and keep per (T, HS, theta), or state the backend keeps, and the pass is bound by memory anyway: a row's
 * HS/2 angles are computed once (in double: pos * theta^(-2i/HS) reaches 10^5 radians at long sequences, where an
 * fp32 angle is off by 10^-2) and serve all its NH heads, Q's and K's together when the row is a fused qkv row. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>

#include "backend/cpu_impl.h"

/* ---------------------------------------------------------------------------------------------------------- */
/* RMSNorm */

static void cpu_rmsnorm_forward(llm4d_backend *be, llm4d_tensor out, float *rstd, llm4d_ctensor inp, const float *w,
                                int N, int C, float eps) {
    WORK_SCOPE(ctx_of(be), LLM4D_WORK_ELEM);
    const int wide = inp.t != LLM4D_F32 || out.t != LLM4D_F32;
#pragma omp parallel
    {
        float *xb = llm4d_cpu_thread_buf(wide ? 2 * (size_t)C : 0), *ob = xb ? xb + C : NULL;
#pragma omp for schedule(static)
        for (int n = 0; n < N; n++) {
            const float *x = cpu_in(inp, (size_t)n * C, (size_t)C, xb);
            float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
            for (int c = 0; c < C; c++) ss += x[c] * x[c];
            const float r = 1.0f / sqrtf(ss / C + eps);
            float *o = cpu_out(out, (size_t)n * C, ob);
#pragma omp simd
            for (int c = 0; c < C; c++) o[c] = x[c] * r * w[c];
            cpu_done(out, (size_t)n * C, o, (size_t)C);
            if (rstd) rstd[n] = r;
        }
        free(xb);
    }
}

static void cpu_rmsnorm_backward(llm4d_backend *be, llm4d_tensor dinp, float *dw, llm4d_ctensor dout,
                                 llm4d_ctensor inp, const float *w, const float *rstd, int N, int C) {
    WORK_SCOPE(ctx_of(be), LLM4D_WORK_ELEM);
    llm4d_cpu_grad_settle(ctx_of(be), dw, (size_t)C * sizeof(float));
    const int wide = dinp.t != LLM4D_F32 || dout.t != LLM4D_F32 || inp.t != LLM4D_F32;
#pragma omp parallel
    {
        float *xb = llm4d_cpu_thread_buf(wide ? 3 * (size_t)C : 0), *yb = xb ? xb + C : NULL, *gb = xb ? yb + C : NULL;
        /* dinp row by row: dx = r (dy w - x r mean(dy w x r)) */
#pragma omp for schedule(static)
        for (int n = 0; n < N; n++) {
            const size_t row = (size_t)n * C;
            const float *x = cpu_in(inp, row, (size_t)C, xb), *dy = cpu_in(dout, row, (size_t)C, yb);
            const float r = rstd[n];
            float a = 0.0f;
#pragma omp simd reduction(+ : a)
            for (int c = 0; c < C; c++) a += dy[c] * w[c] * x[c];
            a = a * r / C;
            float *dx = cpu_acc(dinp, row, (size_t)C, gb);
#pragma omp simd
            for (int c = 0; c < C; c++) dx[c] += r * (dy[c] * w[c] - x[c] * r * a);
            cpu_done(dinp, row, dx, (size_t)C);
        }
        llm4d_cpu_norm_wgrad(dout, inp, NULL, rstd, dw, NULL, N, C); /* LayerNorm's, without mean and bias */
        free(xb);
    }
}

/* ---------------------------------------------------------------------------------------------------------- */
/* RoPE: out = x turned by +angle (forward, sign 1) or -angle (backward, sign -1), in place or not */

static void rope(llm4d_backend *be, llm4d_tensor out, llm4d_ctensor inp, llm4d_rope_shape s, float sign) {
    WORK_SCOPE(ctx_of(be), LLM4D_WORK_ELEM);
    const int half = s.HS / 2, width = s.NH * s.HS;
    if (s.N <= 0 || half <= 0) return;
    /* theta^(-2i/HS), once per call */
    double *inv = malloc((size_t)half * sizeof *inv);
    LLM4D_ASSERT(inv != NULL, "out of memory in rope (%d frequencies)", half);
    for (int i = 0; i < half; i++) inv[i] = pow((double)s.theta, -2.0 * i / s.HS);
    const int wide = inp.t != LLM4D_F32 || out.t != LLM4D_F32;
#pragma omp parallel
    {
        float *cs = llm4d_cpu_thread_buf(2 * (size_t)half + (wide ? 2 * (size_t)width : 0)), *sn = cs + half;
        float *xb = wide ? sn + half : NULL, *ob = wide ? xb + width : NULL;
#pragma omp for schedule(static)
        for (int n = 0; n < s.N; n++) {
            const double pos = (double)((s.tok0 + n) % s.T);
            for (int i = 0; i < half; i++) {
                const double a = pos * inv[i];
                cs[i] = (float)cos(a);
                sn[i] = sign * (float)sin(a);
            }
            const size_t row = (size_t)n * s.ld;
            const float *x = cpu_in(inp, row, (size_t)width, xb);
            float *o = cpu_out(out, row, ob);
            for (int h = 0; h < s.NH; h++) {
                const float *xh = x + (size_t)h * s.HS;
                float *oh = o + (size_t)h * s.HS;
                /* each i reads and writes only elements i and i + half: in place is safe */
#pragma omp simd
                for (int i = 0; i < half; i++) {
                    const float a = xh[i], b = xh[i + half];
                    oh[i] = a * cs[i] - b * sn[i];
                    oh[i + half] = b * cs[i] + a * sn[i];
                }
            }
            cpu_done(out, row, o, (size_t)width);
        }
        free(cs);
    }
    free(inv);
}

static void cpu_rope_forward(llm4d_backend *be, llm4d_tensor out, llm4d_ctensor inp, llm4d_rope_shape s) {
    rope(be, out, inp, s, 1.0f);
}

static void cpu_rope_backward(llm4d_backend *be, llm4d_tensor dinp, llm4d_ctensor dout, llm4d_rope_shape s) {
    rope(be, dinp, dout, s, -1.0f);
}

/* ---------------------------------------------------------------------------------------------------------- */
/* SwiGLU: with e = exp(-|g|) <= 1 and q = 1 / (1 + e), sigmoid(g) is q for g >= 0 and e q below, and
 * sigmoid (1 - sigmoid) = e q^2 for both signs (no overflow, no cancellation; cpu_impl.h's GELU does the same) */

static inline float vsigmoid(float g) {
    const float e = vexp(-fabsf(g)), q = 1.0f / (1.0f + e);
    return g >= 0.0f ? q : e * q;
}

static void cpu_swiglu_forward(llm4d_backend *be, llm4d_tensor out, llm4d_ctensor inp, int N, int F) {
    WORK_SCOPE(ctx_of(be), LLM4D_WORK_ELEM);
    const int wide = inp.t != LLM4D_F32 || out.t != LLM4D_F32;
#pragma omp parallel
    {
        float *xb = llm4d_cpu_thread_buf(wide ? 3 * (size_t)F : 0), *ob = xb ? xb + 2 * (size_t)F : NULL;
#pragma omp for schedule(static)
        for (int n = 0; n < N; n++) {
            const float *x = cpu_in(inp, 2 * (size_t)n * F, 2 * (size_t)F, xb), *g = x, *u = x + F;
            float *o = cpu_out(out, (size_t)n * F, ob);
#pragma omp simd
            for (int f = 0; f < F; f++) o[f] = g[f] * vsigmoid(g[f]) * u[f];
            cpu_done(out, (size_t)n * F, o, (size_t)F);
        }
        free(xb);
    }
}

static void cpu_swiglu_backward(llm4d_backend *be, llm4d_tensor dinp, llm4d_ctensor inp, llm4d_ctensor dout, int N,
                                int F) {
    WORK_SCOPE(ctx_of(be), LLM4D_WORK_ELEM);
    const int wide = inp.t != LLM4D_F32 || dout.t != LLM4D_F32 || dinp.t != LLM4D_F32;
#pragma omp parallel
    {
        float *xb = llm4d_cpu_thread_buf(wide ? 5 * (size_t)F : 0), *yb = xb ? xb + 2 * (size_t)F : NULL;
        float *db = yb ? yb + F : NULL;
#pragma omp for schedule(static)
        for (int n = 0; n < N; n++) {
            const float *x = cpu_in(inp, 2 * (size_t)n * F, 2 * (size_t)F, xb), *g = x, *u = x + F;
            const float *dy = cpu_in(dout, (size_t)n * F, (size_t)F, yb);
            float *d = cpu_out(dinp, 2 * (size_t)n * F, db), *dg = d, *du = d + F;
            /* silu'(g) = s + g s (1 - s) */
#pragma omp simd
            for (int f = 0; f < F; f++) {
                const float e = vexp(-fabsf(g[f])), q = 1.0f / (1.0f + e), s = g[f] >= 0.0f ? q : e * q;
                dg[f] = dy[f] * u[f] * (s + g[f] * e * q * q);
                du[f] = dy[f] * g[f] * s;
            }
            cpu_done(dinp, 2 * (size_t)n * F, d, 2 * (size_t)F);
        }
        free(xb);
    }
}

void llm4d_cpu_llama_install(llm4d_backend *be) {
    be->rmsnorm_forward = cpu_rmsnorm_forward;
    be->rmsnorm_backward = cpu_rmsnorm_backward;
    be->rope_forward = cpu_rope_forward;
    be->rope_backward = cpu_rope_backward;
    be->swiglu_forward = cpu_swiglu_forward;
    be->swiglu_backward = cpu_swiglu_backward;
}
