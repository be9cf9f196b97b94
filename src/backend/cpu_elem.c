/* cpu_elem.c — the element-wise kernels of the fast CPU backend: token and position embeddings, LayerNorm, GELU,
 * dropout, the vocabulary-parallel softmax cross-entropy.
 *
 * Each is one pass (or two) over memory, parallelised over fixed chunks with `omp simd` inner loops, so GCC
 * vectorises them and their results do not depend on the thread count: reductions that cross rows (embedding and
 * LayerNorm weight gradients) are split over fixed column blocks, never over "whatever rows this thread got".
 * Typed tensors (cpu_impl.h): a kernel works on a row (LayerNorm), a chunk (GELU, dropout) or a block of a row
 * (the cross-entropy) at a time, reading an fp32 tensor in place and widening a 16-bit one into a buffer, and
 * rounds its typed outputs once from fp32; with every tensor fp32 the loops are the ones that ran before. */
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
    llm4d_cpu_grad_settle(ctx_of(be), dw, (size_t)nrows * C * sizeof(float)); /* a scatter adds: zeros first */
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
    llm4d_cpu_grad_settle(ctx_of(be), dwpe, (size_t)T * C * sizeof(float));
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

static void cpu_layernorm_forward(llm4d_backend *be, llm4d_tensor out, float *mean, float *rstd, llm4d_ctensor inp,
                                  const float *w, const float *b, int N, int C) {
    WORK_SCOPE(ctx_of(be), LLM4D_WORK_ELEM);
    const int wide = inp.t != LLM4D_F32 || out.t != LLM4D_F32;
#pragma omp parallel
    {
    float *xb = llm4d_cpu_thread_buf(wide ? 2 * (size_t)C : 0), *ob = xb ? xb + C : NULL;
#pragma omp for schedule(static)
    for (int n = 0; n < N; n++) {
        const float *x = cpu_in(inp, (size_t)n * C, (size_t)C, xb);
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int c = 0; c < C; c++) s += x[c];
        const float m = s / C;
        float v = 0.0f;
#pragma omp simd reduction(+ : v)
        for (int c = 0; c < C; c++) v += (x[c] - m) * (x[c] - m);
        const float r = 1.0f / sqrtf(v / C + 1e-5f);
        float *o = cpu_out(out, (size_t)n * C, ob);
#pragma omp simd
        for (int c = 0; c < C; c++) o[c] = (x[c] - m) * r * w[c] + b[c];
        cpu_done(out, (size_t)n * C, o, (size_t)C);
        if (mean) mean[n] = m;
        if (rstd) rstd[n] = r;
    }
    free(xb);
    }
}

#define NORM_COLS 64 /* channels per dw/db task */

void llm4d_cpu_norm_wgrad(llm4d_ctensor dout, llm4d_ctensor inp, const float *mean, const float *rstd, float *dw,
                          float *db, int N, int C) {
    const int ntasks = (C + NORM_COLS - 1) / NORM_COLS;
#pragma omp for schedule(static)
    for (int task = 0; task < ntasks; task++) {
        const int c0 = task * NORM_COLS, len = C - c0 < NORM_COLS ? C - c0 : NORM_COLS;
        double aw[NORM_COLS] = {0}, ab[NORM_COLS] = {0};
        float xs[NORM_COLS], ys[NORM_COLS];
        for (int n = 0; n < N; n++) {
            const size_t at = (size_t)n * C + c0;
            const float *x = cpu_in(inp, at, (size_t)len, xs), *dy = cpu_in(dout, at, (size_t)len, ys);
            const float m = mean ? mean[n] : 0.0f, r = rstd[n]; /* x - 0.0f is x: RMSNorm's terms exactly */
#pragma omp simd
            for (int j = 0; j < len; j++) {
                aw[j] += dy[j] * (x[j] - m) * r;
                ab[j] += dy[j];
            }
        }
        for (int j = 0; j < len; j++) {
            dw[c0 + j] += (float)aw[j];
            if (db) db[c0 + j] += (float)ab[j];
        }
    }
}

static void cpu_layernorm_backward(llm4d_backend *be, llm4d_tensor dinp, float *dw, float *db, llm4d_ctensor dout,
                                   llm4d_ctensor inp, const float *w, const float *mean, const float *rstd, int N,
                                   int C) {
    WORK_SCOPE(ctx_of(be), LLM4D_WORK_ELEM);
    llm4d_cpu_grad_settle(ctx_of(be), dw, (size_t)C * sizeof(float));
    llm4d_cpu_grad_settle(ctx_of(be), db, (size_t)C * sizeof(float));
    const int wide = dinp.t != LLM4D_F32 || dout.t != LLM4D_F32 || inp.t != LLM4D_F32;
#pragma omp parallel
    {
        float *xb = llm4d_cpu_thread_buf(wide ? 3 * (size_t)C : 0), *yb = xb ? xb + C : NULL, *gb = xb ? yb + C : NULL;
        /* dinp row by row: dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat*xhat)), dxhat = dy*w */
#pragma omp for schedule(static)
        for (int n = 0; n < N; n++) {
            const size_t row = (size_t)n * C;
            const float *x = cpu_in(inp, row, (size_t)C, xb), *dy = cpu_in(dout, row, (size_t)C, yb);
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
            float *dx = cpu_acc(dinp, row, (size_t)C, gb);
#pragma omp simd
            for (int c = 0; c < C; c++) dx[c] += r * (dy[c] * w[c] - a - (x[c] - m) * r * bsum);
            cpu_done(dinp, row, dx, (size_t)C);
        }
        llm4d_cpu_norm_wgrad(dout, inp, mean, rstd, dw, db, N, C);
        free(xb);
    }
}

/* ---------------------------------------------------------------------------------------------------------- */
/* GELU */

#define EW_CHUNK 4096              /* elements per element-wise task */

static void cpu_gelu_forward(llm4d_backend *be, llm4d_tensor out, llm4d_ctensor inp, size_t n) {
    WORK_SCOPE(ctx_of(be), LLM4D_WORK_ELEM);
    const long ntasks = (long)((n + EW_CHUNK - 1) / EW_CHUNK);
#pragma omp parallel for schedule(static)
    for (long t = 0; t < ntasks; t++) {
        const size_t i0 = (size_t)t * EW_CHUNK, len = n - i0 < EW_CHUNK ? n - i0 : EW_CHUNK;
        float xb[EW_CHUNK], ob[EW_CHUNK];
        const float *x = cpu_in(inp, i0, len, xb);
        float *o = cpu_out(out, i0, ob);
#pragma omp simd
        for (size_t i = 0; i < len; i++) o[i] = vgelu(x[i]);
        cpu_done(out, i0, o, len);
    }
}

static void cpu_gelu_backward(llm4d_backend *be, llm4d_tensor dinp, llm4d_ctensor inp, llm4d_ctensor dout,
                              size_t n) {
    WORK_SCOPE(ctx_of(be), LLM4D_WORK_ELEM);
    const long ntasks = (long)((n + EW_CHUNK - 1) / EW_CHUNK);
#pragma omp parallel for schedule(static)
    for (long t = 0; t < ntasks; t++) {
        const size_t i0 = (size_t)t * EW_CHUNK, len = n - i0 < EW_CHUNK ? n - i0 : EW_CHUNK;
        float xb[EW_CHUNK], yb[EW_CHUNK], gb[EW_CHUNK];
        const float *x = cpu_in(inp, i0, len, xb), *dy = cpu_in(dout, i0, len, yb);
        float *dx = cpu_out(dinp, i0, gb);
#pragma omp simd
        for (size_t i = 0; i < len; i++) dx[i] = vgelu_grad(x[i]) * dy[i];
        cpu_done(dinp, i0, dx, len);
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

static void cpu_dropout_forward(llm4d_backend *be, llm4d_tensor out, llm4d_ctensor inp, int N, int C,
                                const llm4d_dropout *drop) {
    WORK_SCOPE(ctx_of(be), LLM4D_WORK_ELEM);
    const size_t total = (size_t)N * C;
    if (!drop_on(drop)) {
        if (out.t != inp.t) be->convert(be, out, inp, total);
        else if (out.p != inp.p) be->copy(be, out.p, inp.p, total * llm4d_ftype_size(out.t));
        return;
    }
    DROP_FOREACH(N, C, drop, {
        float xb[DROP_CHUNK], ob[DROP_CHUNK];
        const float *x = cpu_in(inp, k0, (size_t)n, xb);
        float *o = cpu_out(out, k0, ob);
        _Pragma("omp simd") for (int i = 0; i < n; i++) o[i] = x[i] * mult[i];
        cpu_done(out, k0, o, (size_t)n);
    });
}

static void cpu_dropout_backward(llm4d_backend *be, llm4d_tensor dinp, llm4d_ctensor dout, int N, int C,
                                 const llm4d_dropout *drop) {
    WORK_SCOPE(ctx_of(be), LLM4D_WORK_ELEM);
    if (!drop_on(drop)) {
        const size_t total = (size_t)N * C;
        if (dinp.t == LLM4D_F32 && dout.t == LLM4D_F32) {
            float *d = dinp.p;
            const float *g = dout.p;
#pragma omp parallel for simd schedule(static)
            for (size_t i = 0; i < total; i++) d[i] += g[i];
            return;
        }
        const long ntasks = (long)((total + EW_CHUNK - 1) / EW_CHUNK);
#pragma omp parallel for schedule(static)
        for (long t = 0; t < ntasks; t++) {
            const size_t i0 = (size_t)t * EW_CHUNK, len = total - i0 < EW_CHUNK ? total - i0 : EW_CHUNK;
            float gb[EW_CHUNK], db[EW_CHUNK];
            const float *g = cpu_in(dout, i0, len, gb);
            float *d = cpu_acc(dinp, i0, len, db);
#pragma omp simd
            for (size_t i = 0; i < len; i++) d[i] += g[i];
            cpu_done(dinp, i0, d, len);
        }
        return;
    }
    DROP_FOREACH(N, C, drop, {
        float gb[DROP_CHUNK], db[DROP_CHUNK];
        const float *g = cpu_in(dout, k0, (size_t)n, gb);
        float *d = cpu_acc(dinp, k0, (size_t)n, db);
        _Pragma("omp simd") for (int i = 0; i < n; i++) d[i] += g[i] * mult[i];
        cpu_done(dinp, k0, d, (size_t)n);
    });
}

static void cpu_dropout_add_forward(llm4d_backend *be, llm4d_tensor out, llm4d_ctensor res, llm4d_ctensor x, int N,
                                    int C, const llm4d_dropout *drop) {
    WORK_SCOPE(ctx_of(be), LLM4D_WORK_ELEM);
    if (!drop_on(drop)) {
        const size_t total = (size_t)N * C;
        if (out.t == LLM4D_F32 && res.t == LLM4D_F32 && x.t == LLM4D_F32) {
            float *o = out.p;
            const float *r = res.p, *a = x.p;
#pragma omp parallel for simd schedule(static)
            for (size_t i = 0; i < total; i++) o[i] = r[i] + a[i];
            return;
        }
        const long ntasks = (long)((total + EW_CHUNK - 1) / EW_CHUNK);
#pragma omp parallel for schedule(static)
        for (long t = 0; t < ntasks; t++) {
            const size_t i0 = (size_t)t * EW_CHUNK, len = total - i0 < EW_CHUNK ? total - i0 : EW_CHUNK;
            float rb[EW_CHUNK], ab[EW_CHUNK], ob[EW_CHUNK];
            const float *r = cpu_in(res, i0, len, rb), *a = cpu_in(x, i0, len, ab);
            float *o = cpu_out(out, i0, ob);
#pragma omp simd
            for (size_t i = 0; i < len; i++) o[i] = r[i] + a[i];
            cpu_done(out, i0, o, len);
        }
        return;
    }
    DROP_FOREACH(N, C, drop, {
        float rb[DROP_CHUNK], ab[DROP_CHUNK], ob[DROP_CHUNK];
        const float *r = cpu_in(res, k0, (size_t)n, rb), *a = cpu_in(x, k0, (size_t)n, ab);
        float *o = cpu_out(out, k0, ob);
        _Pragma("omp simd") for (int i = 0; i < n; i++) o[i] = r[i] + a[i] * mult[i];
        cpu_done(out, k0, o, (size_t)n);
    });
}

static void cpu_dropout_add_backward(llm4d_backend *be, llm4d_tensor dres, llm4d_tensor dx, llm4d_ctensor dout, int N,
                                     int C, const llm4d_dropout *drop) {
    WORK_SCOPE(ctx_of(be), LLM4D_WORK_ELEM);
    if (!drop_on(drop)) {
        const size_t total = (size_t)N * C;
        if (dres.t == LLM4D_F32 && dx.t == LLM4D_F32 && dout.t == LLM4D_F32) {
            float *r = dres.p, *a = dx.p;
            const float *g = dout.p;
#pragma omp parallel for simd schedule(static)
            for (size_t i = 0; i < total; i++) {
                r[i] = g[i];
                a[i] = g[i];
            }
            return;
        }
        be->convert(be, dres, dout, total);
        be->convert(be, dx, dout, total);
        return;
    }
    DROP_FOREACH(N, C, drop, {
        float gb[DROP_CHUNK], rb[DROP_CHUNK], ab[DROP_CHUNK];
        const float *g = cpu_in(dout, k0, (size_t)n, gb);
        float *r = cpu_out(dres, k0, rb), *a = cpu_out(dx, k0, ab);
        _Pragma("omp simd") for (int i = 0; i < n; i++) {
            r[i] = g[i];
            a[i] = g[i] * mult[i];
        }
        cpu_done(dres, k0, r, (size_t)n);
        cpu_done(dx, k0, a, (size_t)n);
    });
}

/* ---------------------------------------------------------------------------------------------------------- */
/* softmax cross-entropy over vocabulary parts (backend.h) */

#define CE_BLOCK 2048 /* logits per float partial sum: sums are added in double (a float sum of 50k terms drifts) */

/* Columns of this part that hold real vocabulary entries (the rest is padding). */
static int real_cols(int Vl, int v0, int V) { return V - v0 >= Vl ? Vl : (V - v0 > 0 ? V - v0 : 0); }

/* sum of exp(l[j] - mx) over the n columns of row `row` of the logits, float partials over blocks added in double
 * (a float-to-double reduction inside the exp loop vectorises ten times worse); a 16-bit row is widened a block at
 * a time */
static double sum_exp(llm4d_ctensor logits, size_t row, int n, float mx) {
    double sum = 0.0;
    float buf[CE_BLOCK];
    for (int j0 = 0; j0 < n; j0 += CE_BLOCK) {
        const int len = n - j0 < CE_BLOCK ? n - j0 : CE_BLOCK;
        const float *l = cpu_in(logits, row + (size_t)j0, (size_t)len, buf);
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int j = 0; j < len; j++) s += vexp(l[j] - mx);
        sum += s;
    }
    return sum;
}

/* the largest of the n logits of row `row` (exact in any order) */
static float row_max(llm4d_ctensor logits, size_t row, int n) {
    float mx = -INFINITY, buf[CE_BLOCK];
    for (int j0 = 0; j0 < n; j0 += CE_BLOCK) {
        const int len = n - j0 < CE_BLOCK ? n - j0 : CE_BLOCK;
        const float *l = cpu_in(logits, row + (size_t)j0, (size_t)len, buf);
#pragma omp simd reduction(max : mx)
        for (int j = 0; j < len; j++) mx = l[j] > mx ? l[j] : mx;
    }
    return mx;
}

static void cpu_xent_forward(llm4d_backend *be, float *stats, llm4d_ctensor logits, const int32_t *targets, int N,
                             int Vl, int v0, int V, int merge) {
    WORK_SCOPE(ctx_of(be), LLM4D_WORK_LOSS);
    const int real = real_cols(Vl, v0, V);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const size_t row = (size_t)n * Vl;
        const float mx = row_max(logits, row, real);
        const int y = targets[n] - v0;
        float ly = y >= 0 && y < real ? llm4d_ftype_get(logits, row + (size_t)y) : 0.0f;
        if (merge) { /* combine with the running (m, s, y): rescale the smaller max's sum (an online softmax) */
            const float m0 = stats[n], s0 = stats[N + n];
            const float m = m0 > mx ? m0 : mx;
            const double s = (s0 > 0 ? (double)s0 * exp((double)m0 - m) : 0.0) +
                             (real > 0 ? sum_exp(logits, row, real, m) : 0.0);
            stats[n] = m;
            stats[N + n] = (float)s;
            stats[2 * N + n] += ly;
            continue;
        }
        stats[n] = mx;
        stats[N + n] = real > 0 ? (float)sum_exp(logits, row, real, mx) : 0.0f;
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

static void cpu_xent_backward(llm4d_backend *be, float *losses, llm4d_tensor dlogits, llm4d_ctensor logits,
                              const float *stats, const int32_t *targets, const float *dloss, int N, int Vl, int v0,
                              int V) {
    WORK_SCOPE(ctx_of(be), LLM4D_WORK_LOSS);
    const int real = real_cols(Vl, v0, V);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const double lse = stats[n] + log((double)stats[N + n]);
        if (losses) losses[n] = (float)(lse - stats[2 * N + n]);
        if (!dlogits.p) continue;
        const size_t row = (size_t)n * Vl;
        const float w = dloss ? dloss[n] : 1.0f, flse = (float)lse;
        const int y = targets[n] - v0;
        /* exp(l - lse) directly: the combined lse makes every part's softmax consistent (no per-part sum); a block
         * at a time, the padding columns (>= real) zero */
        for (int j0 = 0; j0 < Vl; j0 += CE_BLOCK) {
            const int len = Vl - j0 < CE_BLOCK ? Vl - j0 : CE_BLOCK;
            int lim = real - j0; /* real columns of the block */
            lim = lim < 0 ? 0 : lim > len ? len : lim;
            float lb[CE_BLOCK], db[CE_BLOCK];
            const float *l = cpu_in(logits, row + (size_t)j0, (size_t)lim, lb);
            float *d = cpu_out(dlogits, row + (size_t)j0, db);
#pragma omp simd
            for (int j = 0; j < lim; j++) d[j] = vexp(l[j] - flse) * w;
            if (y >= j0 && y < j0 + lim) d[y - j0] -= w;
            for (int j = lim; j < len; j++) d[j] = 0.0f;
            cpu_done(dlogits, row + (size_t)j0, d, (size_t)len);
        }
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
    llm4d_cpu_cast_install(be);
    llm4d_cpu_llama_install(be);
}
