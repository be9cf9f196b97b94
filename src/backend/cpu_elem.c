/* cpu_elem.c — the element-wise kernels of the fast CPU backend: token and position embeddings, LayerNorm, GELU,
 * dropout, the vocabulary-parallel softmax cross-entropy.
 *
 * Each is one pass (or two) over memory, parallelised over fixed chunks with `omp simd` inner loops, so GCC
 * vectorises them and their results do not depend on the thread count: reductions that cross rows (embedding and
 * LayerNorm weight gradients) are split over fixed column blocks, never over "whatever rows this thread got". */
#include <omp.h>
#include <stdlib.h>

#include "backend/cpu_impl.h"

/* ---------------------------------------------------------------------------------------------------------- */
/* embeddings */

static void cpu_embedding_forward(llm4d_backend *be, float *out, const int32_t *tokens, const float *w, int row0,
                                  int nrows, int N, int C) {
    WORK_SCOPE(ctx_of(be), LLM4D_WORK_ELEM);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const int r = tokens[n] - row0;
        if (r < 0 || r >= nrows) continue;
        const float *we = w + (size_t)r * C;
        float *o = out + (size_t)n * C;
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] += we[c];
    }
}

#define ENC_COLS 64 /* channels per embedding-gradient task: tokens repeat, so rows cannot be split safely */

static void cpu_embedding_backward(llm4d_backend *be, float *dw, const float *dout, const int32_t *tokens, int row0,
                                   int nrows, int N, int C) {
    WORK_SCOPE(ctx_of(be), LLM4D_WORK_ELEM);
    const int ntasks = (C + ENC_COLS - 1) / ENC_COLS;
#pragma omp parallel for schedule(static)
    for (int task = 0; task < ntasks; task++) {
        const int c0 = task * ENC_COLS, len = C - c0 < ENC_COLS ? C - c0 : ENC_COLS;
        for (int n = 0; n < N; n++) {
            const int r = tokens[n] - row0;
            if (r < 0 || r >= nrows) continue;
            const float *dr = dout + (size_t)n * C + c0;
            float *dwe = dw + (size_t)r * C + c0;
#pragma omp simd
            for (int j = 0; j < len; j++) dwe[j] += dr[j];
        }
    }
}

static void cpu_position_forward(llm4d_backend *be, float *out, const float *wpe, int N, int C, int T,
                                 int64_t tok0) {
    WORK_SCOPE(ctx_of(be), LLM4D_WORK_ELEM);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *pe = wpe + (size_t)((tok0 + n) % T) * C;
        float *o = out + (size_t)n * C;
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] += pe[c];
    }
}

static void cpu_position_backward(llm4d_backend *be, float *dwpe, const float *dout, int N, int C, int T,
                                  int64_t tok0) {
    WORK_SCOPE(ctx_of(be), LLM4D_WORK_ELEM);
    const int ntasks = (C + ENC_COLS - 1) / ENC_COLS;
#pragma omp parallel for schedule(static)
    for (int task = 0; task < ntasks; task++) {
        const int c0 = task * ENC_COLS, len = C - c0 < ENC_COLS ? C - c0 : ENC_COLS;
        for (int n = 0; n < N; n++) {
            const float *dr = dout + (size_t)n * C + c0;
            float *dpe = dwpe + (size_t)((tok0 + n) % T) * C + c0;
#pragma omp simd
            for (int j = 0; j < len; j++) dpe[j] += dr[j];
        }
    }
}

/* ---------------------------------------------------------------------------------------------------------- */
/* layernorm */

static void cpu_layernorm_forward(llm4d_backend *be, float *out, float *mean, float *rstd, const float *inp,
                                  const float *w, const float *b, int N, int C) {
    WORK_SCOPE(ctx_of(be), LLM4D_WORK_ELEM);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int c = 0; c < C; c++) s += x[c];
        const float m = s / C;
        float v = 0.0f;
#pragma omp simd reduction(+ : v)
        for (int c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
        const float r = 1.0f / sqrtf(v / C + 1e-5f);
        float *o = out + (size_t)n * C;
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = (x[c] - m) * r * w[c] + b[c];
        if (mean) mean[n] = m;
        if (rstd) rstd[n] = r;
    }
}

#define LN_COLS 64 /* channels per dw/db task */

static void cpu_layernorm_backward(llm4d_backend *be, float *dinp, float *dw, float *db, const float *dout,
                                   const float *inp, const float *w, const float *mean, const float *rstd, int N,
                                   int C) {
    WORK_SCOPE(ctx_of(be), LLM4D_WORK_ELEM);
    const int ntasks = (C + LN_COLS - 1) / LN_COLS;
#pragma omp parallel
    {
        /* dinp row by row: dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat*xhat)), dxhat = dy*w */
#pragma omp for schedule(static)
        for (int n = 0; n < N; n++) {
            const float *x = inp + (size_t)n * C, *dy = dout + (size_t)n * C;
            const float m = mean[n], r = rstd[n];
            float a = 0.0f, bsum = 0.0f;
#pragma omp simd reduction(+ : a, bsum)
            for (int c = 0; c < C; c++) {
                float dxhat = dy[c] * w[c];
                a += dxhat;
                bsum += dxhat * (x[c] - m) * r;
            }
            a /= C;
            bsum /= C;
            float *dx = dinp + (size_t)n * C;
#pragma omp simd
            for (int c = 0; c < C; c++) dx[c] += r * (dy[c] * w[c] - a - (x[c] - m) * r * bsum);
        }
        /* dw, db over fixed column blocks, rows in order */
#pragma omp for schedule(static)
        for (int task = 0; task < ntasks; task++) {
            const int c0 = task * LN_COLS, len = C - c0 < LN_COLS ? C - c0 : LN_COLS;
            double aw[LN_COLS] = {0}, ab[LN_COLS] = {0};
            for (int n = 0; n < N; n++) {
                const float *x = inp + (size_t)n * C + c0, *dy = dout + (size_t)n * C + c0;
                const float m = mean[n], r = rstd[n];
#pragma omp simd
                for (int j = 0; j < len; j++) {
                    aw[j] += dy[j] * (x[j] - m) * r;
                    ab[j] += dy[j];
                }
            }
            for (int j = 0; j < len; j++) {
                dw[c0 + j] += (float)aw[j];
                db[c0 + j] += (float)ab[j];
            }
        }
    }
}

/* ---------------------------------------------------------------------------------------------------------- */
/* GELU */

#define EW_CHUNK 4096              /* elements per element-wise task */

static void cpu_gelu_forward(llm4d_backend *be, float *out, const float *inp, size_t n) {
    WORK_SCOPE(ctx_of(be), LLM4D_WORK_ELEM);
    const long ntasks = (long)((n + EW_CHUNK - 1) / EW_CHUNK);
#pragma omp parallel for schedule(static)
    for (long t = 0; t < ntasks; t++) {
        const size_t i0 = (size_t)t * EW_CHUNK, i1 = i0 + EW_CHUNK < n ? i0 + EW_CHUNK : n;
#pragma omp simd
        for (size_t i = i0; i < i1; i++) out[i] = vgelu(inp[i]);
    }
}

static void cpu_gelu_backward(llm4d_backend *be, float *dinp, const float *inp, const float *dout, size_t n) {
    WORK_SCOPE(ctx_of(be), LLM4D_WORK_ELEM);
    const long ntasks = (long)((n + EW_CHUNK - 1) / EW_CHUNK);
#pragma omp parallel for schedule(static)
    for (long t = 0; t < ntasks; t++) {
        const size_t i0 = (size_t)t * EW_CHUNK, i1 = i0 + EW_CHUNK < n ? i0 + EW_CHUNK : n;
#pragma omp simd
        for (size_t i = i0; i < i1; i++) dinp[i] = vgelu_grad(inp[i]) * dout[i];
    }
}


/* ---------------------------------------------------------------------------------------------------------- */
/* dropout */

/* Runs body over an [N, C] activation (llm4d_dropout: token tok0 + n of the flattened micro-batch) in tasks of
 * DROP_CHUNK positions within one batch row, whose positions are consecutive: k0 is the task's first element,
 * n its length, mult[] the multipliers of its elements. */
#define DROP_FOREACH(N, C, drop, ...)                                                                            \
    do {                                                                                                         \
        const int64_t T_ = (drop)->T, t0_ = (drop)->tok0, row_ = T_ * (int64_t)(C);                              \
        const int64_t b0_ = t0_ / T_, nrows_ = (t0_ + (N)-1) / T_ - b0_ + 1;                                     \
        const int64_t per_row_ = (row_ + DROP_CHUNK - 1) / DROP_CHUNK;                                          \
        const long ntasks_ = (long)(nrows_ * per_row_);                                                          \
        _Pragma("omp parallel for schedule(static)") for (long task_ = 0; task_ < ntasks_; task_++) {           \
            const int64_t b_ = b0_ + task_ / per_row_;          /* batch row */                                 \
            int64_t e0_ = (b_ * T_ - t0_) * (int64_t)(C);       /* the row's first element in the activation */ \
            int64_t e1_ = e0_ + row_;                                                                            \
            if (e0_ < 0) e0_ = 0;                                                                                \
            if (e1_ > (int64_t)(N) * (C)) e1_ = (int64_t)(N) * (C);                                              \
            const int64_t k0_ = e0_ + (task_ % per_row_) * DROP_CHUNK;                                           \
            if (k0_ >= e1_) continue;                                                                            \
            const int n = (int)(e1_ - k0_ < DROP_CHUNK ? e1_ - k0_ : DROP_CHUNK);                               \
            const size_t k0 = (size_t)k0_;                                                                       \
            float mult[DROP_CHUNK];                                                                              \
            /* global position: the sample's row, then the element's offset inside the row */                   \
            const int64_t in_row_ = (t0_ * (int64_t)(C) + k0_) - b_ * row_;                                      \
            drop_mults((drop), (uint64_t)(drop)->sample_ids[b_] * (uint64_t)row_ + (uint64_t)in_row_, n, mult);  \
            __VA_ARGS__                                                                                          \
        }                                                                                                        \
    } while (0)

static void cpu_dropout_forward(llm4d_backend *be, float *out, const float *inp, int N, int C,
                                const llm4d_dropout *drop) {
    WORK_SCOPE(ctx_of(be), LLM4D_WORK_ELEM);
    const size_t total = (size_t)N * C;
    if (!drop_on(drop)) {
        if (out != inp) be->copy(be, out, inp, total * sizeof(float));
        return;
    }
    DROP_FOREACH(N, C, drop, {
        _Pragma("omp simd") for (int i = 0; i < n; i++) out[k0 + i] = inp[k0 + i] * mult[i];
    });
}

static void cpu_dropout_backward(llm4d_backend *be, float *dinp, const float *dout, int N, int C,
                                 const llm4d_dropout *drop) {
    WORK_SCOPE(ctx_of(be), LLM4D_WORK_ELEM);
    if (!drop_on(drop)) {
        const size_t total = (size_t)N * C;
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < total; i++) dinp[i] += dout[i];
        return;
    }
    DROP_FOREACH(N, C, drop, {
        _Pragma("omp simd") for (int i = 0; i < n; i++) dinp[k0 + i] += dout[k0 + i] * mult[i];
    });
}

static void cpu_dropout_add_forward(llm4d_backend *be, float *out, const float *res, const float *x, int N, int C,
                                    const llm4d_dropout *drop) {
    WORK_SCOPE(ctx_of(be), LLM4D_WORK_ELEM);
    if (!drop_on(drop)) {
        const size_t total = (size_t)N * C;
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < total; i++) out[i] = res[i] + x[i];
        return;
    }
    DROP_FOREACH(N, C, drop, {
        _Pragma("omp simd") for (int i = 0; i < n; i++) out[k0 + i] = res[k0 + i] + x[k0 + i] * mult[i];
    });
}

static void cpu_dropout_add_backward(llm4d_backend *be, float *dres, float *dx, const float *dout, int N, int C,
                                     const llm4d_dropout *drop) {
    WORK_SCOPE(ctx_of(be), LLM4D_WORK_ELEM);
    if (!drop_on(drop)) {
        const size_t total = (size_t)N * C;
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < total; i++) {
            dres[i] = dout[i];
            dx[i] = dout[i];
        }
        return;
    }
    DROP_FOREACH(N, C, drop, {
        _Pragma("omp simd") for (int i = 0; i < n; i++) {
            dres[k0 + i] = dout[k0 + i];
            dx[k0 + i] = dout[k0 + i] * mult[i];
        }
    });
}

/* ---------------------------------------------------------------------------------------------------------- */
/* softmax cross-entropy over vocabulary parts (backend.h) */

#define CE_BLOCK 2048 /* logits per float partial sum: sums are added in double (a float sum of 50k terms drifts) */

/* Columns of this part that hold real vocabulary entries (the rest is padding). */
static int real_cols(int Vl, int v0, int V) { return V - v0 >= Vl ? Vl : (V - v0 > 0 ? V - v0 : 0); }

/* sum of exp(l[j] - mx) over j < n, float partials over blocks added in double (a float-to-double reduction inside
 * the exp loop vectorises ten times worse) */
static double sum_exp(const float *l, int n, float mx) {
    double sum = 0.0;
    for (int j0 = 0; j0 < n; j0 += CE_BLOCK) {
        const int j1 = j0 + CE_BLOCK < n ? j0 + CE_BLOCK : n;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int j = j0; j < j1; j++) s += vexp(l[j] - mx);
        sum += s;
    }
    return sum;
}

static void cpu_xent_forward(llm4d_backend *be, float *stats, const float *logits, const int32_t *targets, int N,
                             int Vl, int v0, int V, int merge) {
    WORK_SCOPE(ctx_of(be), LLM4D_WORK_LOSS);
    const int real = real_cols(Vl, v0, V);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *l = logits + (size_t)n * Vl;
        float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
        for (int j = 0; j < real; j++) mx = l[j] > mx ? l[j] : mx;
        const int y = targets[n] - v0;
        float ly = y >= 0 && y < real ? l[y] : 0.0f;
        if (merge) { /* combine with the running (m, s, y): rescale the smaller max's sum (an online softmax) */
            const float m0 = stats[n], s0 = stats[N + n];
            const float m = m0 > mx ? m0 : mx;
            const double s = (s0 > 0 ? (double)s0 * exp((double)m0 - m) : 0.0) + (real > 0 ? sum_exp(l, real, m) : 0.0);
            stats[n] = m;
            stats[N + n] = (float)s;
            stats[2 * N + n] += ly;
            continue;
        }
        stats[n] = mx;
        stats[N + n] = real > 0 ? (float)sum_exp(l, real, mx) : 0.0f;
        stats[2 * N + n] = ly;
    }
}

static void cpu_xent_rescale(llm4d_backend *be, float *stats, const float *gmax, int N) {
    WORK_SCOPE(ctx_of(be), LLM4D_WORK_LOSS);
    for (int n = 0; n < N; n++) {
        if (stats[N + n] > 0) stats[N + n] = (float)(stats[N + n] * exp((double)stats[n] - gmax[n]));
        stats[n] = gmax[n];
    }
}

static void cpu_xent_backward(llm4d_backend *be, float *losses, float *dlogits, const float *logits,
                              const float *stats, const int32_t *targets, const float *dloss, int N, int Vl, int v0,
                              int V) {
    WORK_SCOPE(ctx_of(be), LLM4D_WORK_LOSS);
    const int real = real_cols(Vl, v0, V);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const double lse = stats[n] + log((double)stats[N + n]);
        if (losses) losses[n] = (float)(lse - stats[2 * N + n]);
        if (!dlogits) continue;
        const float *l = logits + (size_t)n * Vl;
        float *d = dlogits + (size_t)n * Vl;
        const float w = dloss ? dloss[n] : 1.0f, flse = (float)lse;
        const int y = targets[n] - v0;
        /* exp(l - lse) directly: the combined lse makes every part's softmax consistent (no per-part sum) */
#pragma omp simd
        for (int j = 0; j < real; j++) d[j] = vexp(l[j] - flse) * w;
        if (y >= 0 && y < real) d[y] -= w;
        for (int j = real; j < Vl; j++) d[j] = 0.0f;
    }
}

void llm4d_cpu_elem_install(llm4d_backend *be) {
    be->embedding_forward = cpu_embedding_forward;
    be->embedding_backward = cpu_embedding_backward;
    be->position_forward = cpu_position_forward;
    be->position_backward = cpu_position_backward;
    be->layernorm_forward = cpu_layernorm_forward;
    be->layernorm_backward = cpu_layernorm_backward;
    be->gelu_forward = cpu_gelu_forward;
    be->gelu_backward = cpu_gelu_backward;
    be->dropout_forward = cpu_dropout_forward;
    be->dropout_backward = cpu_dropout_backward;
    be->dropout_add_forward = cpu_dropout_add_forward;
    be->dropout_add_backward = cpu_dropout_add_backward;
    be->xent_forward = cpu_xent_forward;
    be->xent_rescale = cpu_xent_rescale;
    be->xent_backward = cpu_xent_backward;
}
