/* test_cuda_kernels.c — the CUDA backend's kernels against the reference backend, op by op (the attention has its
 * own test, test_cuda_attention.c). Skipped (exit 77, one line why) where the backend cannot run.
 *
 * fp32 within 1e-5 normwise relative (test_kernels.c's tolerance for the CPU backend); the kernels that sum in the
 * CPU's order (embedding and position gradients), move data (bias, dropout masks, add, scale) or draw the same
 * Philox words are checked for equal bits; bf16, fp16 and tf32 GEMMs against the CPU backend's error in the same
 * format (cuda_util.h cmp_lowp). Gradients that accumulate are given random contents first, and a second call must
 * add the increment again. Also: AdamW's in-pass bf16 weight copies equal a fresh conversion (one range with more
 * copies than a launch carries, too); the reductions are bit-identical run to run and sumsq_many's parts are sumsq's;
 * init_param is the CPU's weights; memory is zeroed, copies and streams order as backend.h says; the work timers
 * count every kind that ran. */
#include "backend/cuda/cuda_kernels.h"
#include "core/bf16.h"
#include "cuda_util.h"

static void test_linear(int N, int C, int OC, int bias, llm4d_act act) {
    char tag[160];
    snprintf(tag, sizeof tag, "linear N=%d C=%d OC=%d bias=%d%s", N, C, OC, bias, act ? " through GELU" : "");
    const size_t nx = (size_t)N * C, nw = (size_t)OC * C, ny = (size_t)N * OC;
    float *x = frand(nx, 1.0f), *w = frand(nw, 0.1f), *b = bias ? frand(OC, 0.5f) : NULL, *dy = frand(ny, 1.0f);
    float *dx0 = frand(nx, 1.0f), *dw0 = frand(nw, 1.0f), *db0 = frand(OC, 1.0f);
    float *y = falloc(ny), *dx = fdup(dx0, nx), *dw = fdup(dw0, nw), *db = fdup(db0, OC);
    R->linear_forward_act(R, y, x, act, w, b, N, C, OC);
    R->linear_backward_act(R, dx, LLM4D_ADD, dw, db, dy, x, act, w, N, C, OC);
    float *gx = up(x, nx), *gw = up(w, nw), *gb = b ? up(b, OC) : NULL, *gdy = up(dy, ny), *gy = up(NULL, ny);
    float *gdx = up(dx0, nx), *gdw = up(dw0, nw), *gdb = up(db0, OC);
    char what[224];
    const llm4d_precision precs[4] = {LLM4D_PREC_FP32, LLM4D_PREC_BF16, LLM4D_PREC_FP16, LLM4D_PREC_TF32};
    const char *names[4] = {"fp32", "bf16", "fp16", "tf32"};
    llm4d_err err = {0};
    for (int p = 0; p < 4; p++) {
        G->set_precision(G, precs[p], &err);
        G->copy_async(G, gdx, dx0, nx * 4, LLM4D_H2D, LLM4D_STREAM_COMPUTE);
        G->copy_async(G, gdw, dw0, nw * 4, LLM4D_H2D, LLM4D_STREAM_COMPUTE);
        G->copy_async(G, gdb, db0, OC * 4, LLM4D_H2D, LLM4D_STREAM_COMPUTE);
        G->linear_forward_act(G, gy, gx, act, gw, gb, N, C, OC);
        G->linear_backward_act(G, gdx, LLM4D_ADD, gdw, gdb, gdy, gx, act, gw, N, C, OC);
        float *hy = got(gy, ny), *hdx = got(gdx, nx), *hdw = got(gdw, nw), *hdb = got(gdb, OC);
        if (p == 0) {
            snprintf(what, sizeof what, "%s fp32 forward", tag), cmp(what, hy, y, ny, TOL);
            snprintf(what, sizeof what, "%s fp32 dinp (added)", tag), cmp(what, hdx, dx, nx, TOL);
            snprintf(what, sizeof what, "%s fp32 dw (added)", tag), cmp(what, hdw, dw, nw, TOL);
            snprintf(what, sizeof what, "%s fp32 db (added)", tag), cmp(what, hdb, db, OC, TOL);
            if (b) { /* a bias 4 bytes off alignment (inside a flat buffer): added by a kernel, not the epilogue */
                float *b1 = falloc((size_t)OC + 1), *gy1 = up(NULL, ny);
                memcpy(b1 + 1, b, (size_t)OC * 4);
                float *gb1 = up(b1, (size_t)OC + 1);
                G->linear_forward_act(G, gy1, gx, act, gw, gb1 + 1, N, C, OC);
                float *hy1 = got(gy1, ny);
                snprintf(what, sizeof what, "%s fp32 forward, bias not 16-byte aligned", tag);
                cmp(what, hy1, y, ny, TOL);
                free(b1), free(hy1), dfree(gy1, ny * 4), dfree(gb1, ((size_t)OC + 1) * 4);
            }
            /* written: over random contents, the gradient from zero, twice the same bits */
            float *rx = falloc(nx);
            R->linear_backward_act(R, rx, LLM4D_WRITE, NULL, NULL, dy, x, act, w, N, C, OC);
            G->linear_backward_act(G, gdx, LLM4D_WRITE, NULL, NULL, gdy, gx, act, gw, N, C, OC);
            float *a1 = got(gdx, nx);
            G->linear_backward_act(G, gdx, LLM4D_WRITE, NULL, NULL, gdy, gx, act, gw, N, C, OC);
            float *a2 = got(gdx, nx);
            snprintf(what, sizeof what, "%s fp32 dinp written", tag), cmp(what, a1, rx, nx, TOL);
            check(same_bits(a1, a2, nx), "%s: dinp written again, the same bits", tag);
            free(rx), free(a1), free(a2);
        } else if (p < 3) { /* against the CPU backend in the same format */
            CPU->set_precision(CPU, precs[p], &err);
            float *cy = falloc(ny), *cdx = fdup(dx0, nx), *cdw = fdup(dw0, nw), *cdb = fdup(db0, OC);
            CPU->linear_forward_act(CPU, cy, x, act, w, b, N, C, OC);
            CPU->linear_backward_act(CPU, cdx, LLM4D_ADD, cdw, cdb, dy, x, act, w, N, C, OC);
            CPU->set_precision(CPU, LLM4D_PREC_FP32, &err);
            snprintf(what, sizeof what, "%s %s forward", tag, names[p]), cmp_lowp(what, hy, cy, y, ny);
            snprintf(what, sizeof what, "%s %s dinp", tag, names[p]), cmp_lowp(what, hdx, cdx, dx, nx);
            snprintf(what, sizeof what, "%s %s dw", tag, names[p]), cmp_lowp(what, hdw, cdw, dw, nw);
            /* the bias gradient is summed from fp32 values in every format */
            snprintf(what, sizeof what, "%s %s db", tag, names[p]), cmp(what, hdb, db, OC, TOL);
            free(cy), free(cdx), free(cdw), free(cdb);
        } else { /* tf32: 10-bit significands, fp32 accumulation */
            const double e = relerr(hy, y, ny);
            check(e > 0 && e < 4e-3, "%s tf32 forward: rel err %.2e (0 < err < 4e-3)", tag, e);
        }
        free(hy), free(hdx), free(hdw), free(hdb);
    }
    G->set_precision(G, LLM4D_PREC_FP32, &err);
    free(x), free(w), free(b), free(dy), free(dx0), free(dw0), free(db0), free(y), free(dx), free(dw), free(db);
    dfree(gx, nx * 4), dfree(gw, nw * 4), dfree(gdy, ny * 4), dfree(gy, ny * 4), dfree(gdx, nx * 4);
    dfree(gdw, nw * 4), dfree(gdb, OC * 4);
    if (gb) dfree(gb, OC * 4);
}

static void test_embeddings(int N, int C, int V, int parts, int T, int64_t tok0) {
    int32_t *tok = malloc(sizeof(int32_t) * N);
    for (int i = 0; i < N; i++) tok[i] = (int32_t)((i * 7919u + 13u) % 5u * (unsigned)(V / 5 + 1) % (unsigned)V);
    const size_t ny = (size_t)N * C, nw = (size_t)V * C;
    float *w = frand(nw, 1.0f), *o = frand(ny, 1.0f), *dy = frand(ny, 1.0f), *dw = frand(nw, 1.0f);
    float *ro = fdup(o, ny), *rdw = fdup(dw, nw);
    int32_t *gt = up_bytes(tok, sizeof(int32_t) * N);
    float *gw = up(w, nw), *go = up(o, ny), *gdy = up(dy, ny), *gdw = up(dw, nw);
    const int rows = (V + parts - 1) / parts;
    for (int r0 = 0; r0 < V; r0 += rows) {
        const int nr = V - r0 < rows ? V - r0 : rows;
        R->embedding_forward(R, ro, tok, w + (size_t)r0 * C, r0, nr, N, C);
        G->embedding_forward(G, go, gt, gw + (size_t)r0 * C, r0, nr, N, C);
        R->embedding_backward(R, rdw + (size_t)r0 * C, dy, tok, r0, nr, N, C);
        G->embedding_backward(G, gdw + (size_t)r0 * C, gdy, gt, r0, nr, N, C);
    }
    float *ho = got(go, ny), *hdw = got(gdw, nw);
    check(same_bits(ho, ro, ny), "embedding N=%d C=%d V=%d in %d parts: forward equals ref's bits", N, C, V, parts);
    check(same_bits(hdw, rdw, nw), "embedding backward in %d parts: ref's bits (the same order of additions)", parts);
    /* positions of a slice */
    float *wpe = frand((size_t)T * C, 1.0f), *dwpe = frand((size_t)T * C, 1.0f);
    float *rp = fdup(o, ny), *rdp = fdup(dwpe, (size_t)T * C);
    float *gwpe = up(wpe, (size_t)T * C), *gp = up(o, ny), *gdp = up(dwpe, (size_t)T * C);
    R->position_forward(R, rp, wpe, N, C, T, tok0), G->position_forward(G, gp, gwpe, N, C, T, tok0);
    R->position_backward(R, rdp, dy, N, C, T, tok0), G->position_backward(G, gdp, gdy, N, C, T, tok0);
    float *hp = got(gp, ny), *hdp = got(gdp, (size_t)T * C);
    check(same_bits(hp, rp, ny) && same_bits(hdp, rdp, (size_t)T * C),
          "position embedding N=%d T=%d tok0=%lld: forward and backward equal ref's bits", N, T, (long long)tok0);
    free(tok), free(w), free(o), free(dy), free(dw), free(ro), free(rdw), free(ho), free(hdw), free(wpe), free(dwpe);
    free(rp), free(rdp), free(hp), free(hdp);
    dfree(gt, sizeof(int32_t) * N), dfree(gw, nw * 4), dfree(go, ny * 4), dfree(gdy, ny * 4), dfree(gdw, nw * 4);
    dfree(gwpe, (size_t)T * C * 4), dfree(gp, ny * 4), dfree(gdp, (size_t)T * C * 4);
}

static void test_layernorm_gelu_bias(int N, int C) {
    const size_t n = (size_t)N * C;
    float *x = frand(n, 2.0f), *w = frand(C, 1.0f), *b = frand(C, 1.0f), *dy = frand(n, 1.0f);
    float *y = falloc(n), *mean = falloc(N), *rstd = falloc(N);
    float *dx = frand(n, 1.0f), *dw = frand(C, 1.0f), *db = frand(C, 1.0f);
    float *gx = up(x, n), *gw = up(w, C), *gb = up(b, C), *gdy = up(dy, n), *gy = up(NULL, n);
    float *gm = up(NULL, N), *gr = up(NULL, N), *gdx = up(dx, n), *gdw = up(dw, C), *gdb = up(db, C);
    R->layernorm_forward(R, y, mean, rstd, x, w, b, N, C);
    G->layernorm_forward(G, gy, gm, gr, gx, gw, gb, N, C);
    float *hy = got(gy, n), *hm = got(gm, N), *hr = got(gr, N);
    char what[128];
    snprintf(what, sizeof what, "layernorm N=%d C=%d forward", N, C), cmp(what, hy, y, n, TOL);
    cmp("layernorm mean", hm, mean, N, TOL), cmp("layernorm rstd", hr, rstd, N, TOL);
    R->layernorm_backward(R, dx, dw, db, dy, x, w, mean, rstd, N, C);
    G->layernorm_backward(G, gdx, gdw, gdb, gdy, gx, gw, gm, gr, N, C);
    float *hdx = got(gdx, n), *hdw = got(gdw, C), *hdb = got(gdb, C);
    cmp("layernorm dinp (added)", hdx, dx, n, TOL), cmp("layernorm dw (added)", hdw, dw, C, TOL);
    cmp("layernorm db (added)", hdb, db, C, TOL);
    /* GELU over [-30, 30] (its tails) and the bias */
    for (size_t i = 0; i < n; i++) x[i] = -30.0f + 60.0f * (float)i / (float)n;
    G->copy_async(G, gx, x, n * 4, LLM4D_H2D, LLM4D_STREAM_COMPUTE);
    R->gelu_forward(R, y, x, n), G->gelu_forward(G, gy, gx, n);
    R->gelu_backward(R, dx, x, dy, n), G->gelu_backward(G, gdx, gx, gdy, n);
    float *hg = got(gy, n), *hgd = got(gdx, n);
    cmp("gelu forward on [-30, 30]", hg, y, n, TOL), cmp("gelu backward (written)", hgd, dx, n, TOL);
    float *o = frand(n, 1.0f), *go = up(o, n), *ro = fdup(o, n);
    R->bias_forward(R, ro, b, N, C), G->bias_forward(G, go, gb, N, C);
    float *ho = got(go, n);
    check(same_bits(ho, ro, n), "bias forward: ref's bits");
    float *rdb = fdup(db, C);
    R->bias_backward(R, rdb, dy, N, C), G->bias_backward(G, gdb, gdy, N, C);
    float *hb2 = got(gdb, C);
    cmp("bias backward (added)", hb2, rdb, C, TOL);
    free(x), free(w), free(b), free(dy), free(y), free(mean), free(rstd), free(dx), free(dw), free(db), free(hy);
    free(hm), free(hr), free(hdx), free(hdw), free(hdb), free(hg), free(hgd), free(o), free(ro), free(ho), free(rdb);
    free(hb2);
    dfree(gx, n * 4), dfree(gw, C * 4), dfree(gb, C * 4), dfree(gdy, n * 4), dfree(gy, n * 4), dfree(gm, N * 4);
    dfree(gr, N * 4), dfree(gdx, n * 4), dfree(gdw, C * 4), dfree(gdb, C * 4), dfree(go, n * 4);
}

static void test_dropout(int N, int C, int T, int64_t tok0, float p) {
    int64_t sids[8] = {11, 2, 40, 3, 7, 0, 25, 6};
    llm4d_dropout d = {p, 99, llm4d_rng_stream(LLM4D_RNG_DROPOUT, 1, LLM4D_DROP_MLP_OUT, 3), sids, T, tok0, NULL};
    llm4d_dropout gd = d;
    gd.sample_ids = up_bytes(sids, sizeof sids);
    const size_t n = (size_t)N * C;
    float *ones = falloc(n), *x = frand(n, 1.0f), *res = frand(n, 1.0f), *g0 = frand(n, 1.0f);
    for (size_t i = 0; i < n; i++) ones[i] = 1.0f;
    float *gones = up(ones, n), *gx = up(x, n), *gres = up(res, n), *ga = up(NULL, n), *gb = up(NULL, n);
    float *ra = falloc(n), *rb = falloc(n);
    R->dropout_forward(R, ra, ones, N, C, &d), G->dropout_forward(G, ga, gones, N, C, &gd);
    float *h = got(ga, n);
    check(same_bits(h, ra, n), "dropout N=%d C=%d T=%d tok0=%lld p=%.1f: the mask is ref's, bit for bit", N, C, T,
          (long long)tok0, p);
    free(h);
    R->dropout_add_forward(R, ra, res, x, N, C, &d), G->dropout_add_forward(G, ga, gres, gx, N, C, &gd);
    h = got(ga, n), cmp("dropout_add forward", h, ra, n, 1e-6), free(h);
    memcpy(ra, g0, n * 4), G->copy_async(G, ga, g0, n * 4, LLM4D_H2D, LLM4D_STREAM_COMPUTE);
    R->dropout_backward(R, ra, x, N, C, &d), G->dropout_backward(G, ga, gx, N, C, &gd);
    h = got(ga, n), cmp("dropout backward (added)", h, ra, n, 1e-6), free(h);
    R->dropout_add_backward(R, ra, rb, x, N, C, &d), G->dropout_add_backward(G, ga, gb, gx, N, C, &gd);
    float *h2 = got(gb, n);
    h = got(ga, n);
    check(same_bits(h, ra, n) && same_bits(h2, rb, n), "dropout_add backward: dres and dx are ref's bits");
    free(h), free(h2), free(ones), free(x), free(res), free(g0), free(ra), free(rb);
    dfree((void *)gd.sample_ids, sizeof sids), dfree(gones, n * 4), dfree(gx, n * 4), dfree(gres, n * 4);
    dfree(ga, n * 4), dfree(gb, n * 4);
}

/* the loss over vocabulary blocks (merge) of a padded vocabulary, then its gradient written over the logits */
static void test_xent(int N, int Vp, int V, int blocks) {
    const size_t n = (size_t)N * Vp;
    float *l = frand(n, 3.0f), *dloss = frand(N, 1.0f);
    int32_t *tg = malloc(sizeof(int32_t) * N);
    for (int i = 0; i < N; i++) tg[i] = (int32_t)((i * 7u + 3u) % (unsigned)V);
    float *gl = up(l, n), *gdl = up(dloss, N), *gs = up(NULL, 3 * (size_t)N), *gloss = up(NULL, N);
    int32_t *gtg = up_bytes(tg, sizeof(int32_t) * N);
    float *rs = falloc(3 * (size_t)N), *rloss = falloc(N), *rl = fdup(l, n);
    const int w = (Vp + blocks - 1) / blocks;
    /* each block's columns are a separate [N, w] matrix: the model's vocabulary blocks are */
    float *blk = falloc((size_t)N * w), *gblk = up(NULL, (size_t)N * w);
    for (int k = 0, v0 = 0; v0 < Vp; k++, v0 += w) {
        const int Vl = Vp - v0 < w ? Vp - v0 : w;
        for (int i = 0; i < N; i++) memcpy(blk + (size_t)i * Vl, l + (size_t)i * Vp + v0, (size_t)Vl * 4);
        G->copy_async(G, gblk, blk, (size_t)N * Vl * 4, LLM4D_H2D, LLM4D_STREAM_COMPUTE);
        R->xent_forward(R, rs, blk, tg, N, Vl, v0, V, k > 0);
        G->xent_forward(G, gs, gblk, gtg, N, Vl, v0, V, k > 0);
    }
    float *hs = got(gs, 3 * (size_t)N);
    cmp("cross-entropy statistics merged over blocks", hs, rs, 3 * (size_t)N, TOL);
    float gmax_h[64];
    for (int i = 0; i < N && i < 64; i++) gmax_h[i] = rs[i] + 0.5f;
    float *gmax = up(gmax_h, N);
    R->xent_rescale(R, rs, gmax_h, N), G->xent_rescale(G, gs, gmax, N);
    free(hs), hs = got(gs, 3 * (size_t)N);
    cmp("cross-entropy rescaled to a larger max", hs, rs, 3 * (size_t)N, TOL);
    R->xent_backward(R, rloss, rl, rl, rs, tg, dloss, N, Vp, 0, V);
    G->xent_backward(G, gloss, gl, gl, gs, gtg, gdl, N, Vp, 0, V);
    float *hl = got(gloss, N), *hd = got(gl, n);
    cmp("cross-entropy losses", hl, rloss, N, TOL), cmp("cross-entropy dlogits (written over the logits)", hd, rl, n, TOL);
    free(l), free(dloss), free(tg), free(rs), free(rloss), free(rl), free(blk), free(hs), free(hl), free(hd);
    dfree(gl, n * 4), dfree(gdl, N * 4), dfree(gs, 12 * (size_t)N), dfree(gloss, N * 4), dfree(gtg, N * 4);
    dfree(gblk, (size_t)N * w * 4), dfree(gmax, N * 4);
}

/* AdamW against ref; then its bf16 copies: in one flat range holding nw weights used by linear layers, the copies
 * AdamW rewrites in its pass must equal a fresh conversion of the new weights (weights_changed forces one). */
static void test_adamw(int nw) {
    const int C = 24, OC = 16, N = 8;
    const size_t per = (size_t)OC * C, n = per * nw + 37; /* a tail no weight covers */
    float *p = frand(n, 0.5f), *g = frand(n, 0.1f), *m = frand(n, 0.01f), *v = falloc(n), *x = frand((size_t)N * C, 1.0f);
    for (size_t i = 0; i < n; i++) v[i] = 0.001f * (float)(i % 17);
    float *gp = up(p, n), *gg = up(g, n), *gm = up(m, n), *gv = up(v, n), *gx = up(x, (size_t)N * C);
    float *gy = up(NULL, (size_t)N * OC * nw);
    llm4d_err err = {0};
    G->set_precision(G, LLM4D_PREC_BF16, &err);
    for (int k = 0; k < nw; k++) G->linear_forward(G, gy + (size_t)k * N * OC, gx, gp + k * per, NULL, N, C, OC);
    G->weights_changed(G, NULL, 0); /* as the trainer says before an update: AdamW's pass makes them valid again */
    R->adamw(R, p, g, m, v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, 0.5f, 1);
    G->adamw(G, gp, gg, gm, gv, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, 0.5f, 1);
    float *hp = got(gp, n), *hm = got(gm, n), *hv = got(gv, n), *hg = got(gg, n);
    cmp("adamw params", hp, p, n, 1e-6), cmp("adamw m", hm, m, n, 1e-6), cmp("adamw v", hv, v, n, 1e-6);
    int zero = 1;
    for (size_t i = 0; i < n; i++) zero &= hg[i] == 0.0f;
    check(zero, "adamw zeroed the gradients in its pass");
    for (int k = 0; k < nw; k++) G->linear_forward(G, gy + (size_t)k * N * OC, gx, gp + k * per, NULL, N, C, OC);
    float *y1 = got(gy, (size_t)N * OC * nw);
    G->weights_changed(G, NULL, 0);
    for (int k = 0; k < nw; k++) G->linear_forward(G, gy + (size_t)k * N * OC, gx, gp + k * per, NULL, N, C, OC);
    float *y2 = got(gy, (size_t)N * OC * nw);
    check(same_bits(y1, y2, (size_t)N * OC * nw), "adamw over %d weights with bf16 copies: the copies it wrote equal "
          "a fresh conversion (the GEMMs agree bit for bit)", nw);
    G->set_precision(G, LLM4D_PREC_FP32, &err);
    free(p), free(g), free(m), free(v), free(x), free(hp), free(hm), free(hv), free(hg), free(y1), free(y2);
    dfree(gp, n * 4), dfree(gg, n * 4), dfree(gm, n * 4), dfree(gv, n * 4), dfree(gx, (size_t)N * C * 4);
    dfree(gy, (size_t)N * OC * nw * 4);
}

static void test_reductions(void) {
    const size_t lens[4] = {1, 16384, 100003, 3 << 20};
    const float *xs[4];
    float *hx[4];
    double each[4], sum = 0.0;
    for (int k = 0; k < 4; k++) {
        hx[k] = frand(lens[k], 1.0f);
        xs[k] = up(hx[k], lens[k]);
    }
    int ok = 1, same = 1;
    for (int k = 0; k < 4; k++) {
        const double r = R->sumsq(R, hx[k], lens[k]), a = G->sumsq(G, xs[k], lens[k]), b = G->sumsq(G, xs[k], lens[k]);
        ok &= fabs(a - r) <= 1e-12 * r;
        same &= memcmp(&a, &b, sizeof a) == 0;
    }
    check(ok && same, "sumsq of 1, 16384, 100003 and 3M elements: within 1e-12 of ref, the same bits run to run");
    const double tot = G->sumsq_many(G, 4, xs, lens, each);
    ok = 1;
    for (int k = 0; k < 4; k++) {
        const double a = G->sumsq(G, xs[k], lens[k]);
        ok &= memcmp(&a, &each[k], sizeof a) == 0;
        sum += each[k];
    }
    check(ok && memcmp(&sum, &tot, sizeof sum) == 0, "sumsq_many: each tensor's sum is sumsq's bits, the total their "
          "sum in order");
    const double rd = R->dot(R, hx[2], hx[2] + 3, 100000), gdot = G->dot(G, xs[2], xs[2] + 3, 100000);
    const double rs = R->dot(R, hx[2], NULL, 100003), gs = G->dot(G, xs[2], NULL, 100003);
    check(fabs(gdot - rd) <= 1e-12 * fabs(rd) + 1e-9 && fabs(gs - rs) <= 1e-12 * fabs(rs) + 1e-9,
          "dot and sum: within 1e-12 of ref");
    double *acc = up_bytes(NULL, sizeof(double)), h = 0.0;
    G->dot_acc(G, acc, xs[2], NULL, 100003), G->dot_acc(G, acc, xs[2], xs[2] + 3, 100000);
    G->copy_async(G, &h, acc, sizeof h, LLM4D_D2H, LLM4D_STREAM_COMPUTE);
    check(fabs(h - (gs + gdot)) <= 1e-12 * (fabs(gs) + fabs(gdot)), "dot_acc adds to a double in device memory");
    dfree(acc, sizeof(double));
    for (int k = 0; k < 4; k++) free(hx[k]), dfree((void *)xs[k], lens[k] * 4);
}

static void test_small_ops(void) {
    const size_t n = 70001;
    float *a = frand(n, 1.0f), *b = frand(n, 1.0f), *ga = up(a, n), *gb = up(b, n);
    for (size_t i = 0; i < n; i++) a[i] += b[i];
    G->add(G, ga, gb, n);
    float *h = got(ga, n);
    check(same_bits(h, a, n), "add: ref's bits");
    for (size_t i = 0; i < n; i++) a[i] *= 0.37f;
    G->scale(G, ga, 0.37f, n);
    free(h), h = got(ga, n);
    check(same_bits(h, a, n), "scale: ref's bits");
    /* init_param: the CPU's weights (double log and cos: at most an ulp apart, rarely) */
    const llm4d_init_spec spec = {0.02f, 0.0f, 1234, llm4d_rng_stream(LLM4D_RNG_INIT, 0, 0, 2), 3, 8, 64, 256, 1 << 20};
    R->init_param(R, a, &spec, 5, (int64_t)n + 5);
    G->init_param(G, ga, &spec, 5, (int64_t)n + 5);
    free(h), h = got(ga, n);
    size_t same = 0, near = 0;
    for (size_t i = 0; i < n; i++) {
        same += h[i] == a[i];
        near += fabsf(h[i] - a[i]) <= 1.2e-7f * fabsf(a[i]);
    }
    check(near == n && same >= n - n / 10000, "init_param: %zu of %zu values equal ref's bits, all within an ulp",
          same, n);
    /* memory: zeroed when allocated; zero, copy (overlapping: memmove) and 2-D copies */
    float *z = up(NULL, n);
    free(h), h = got(z, n);
    int zero = 1;
    for (size_t i = 0; i < n; i++) zero &= h[i] == 0.0f;
    check(zero, "alloc returns zeroed device memory");
    G->copy_async(G, ga, b, n * 4, LLM4D_H2D, LLM4D_STREAM_COMPUTE);
    G->copy(G, ga + 100, ga, 5000 * 4);
    memmove(b + 100, b, 5000 * 4);
    free(h), h = got(ga, n);
    check(same_bits(h, b, n), "copy with overlapping ranges moves as memmove");
    G->copy_2d(G, gb, 3 * 4, ga, 7 * 4, 2 * 4, 1000, LLM4D_D2D, LLM4D_STREAM_COMPUTE);
    float *h2 = got(gb, 3000);
    int ok2 = 1;
    for (int r = 0; r < 1000; r++) ok2 &= h2[3 * r] == h[7 * r] && h2[3 * r + 1] == h[7 * r + 1];
    check(ok2, "copy_2d moves a column block");
    /* streams: the comm stream's copy waits for the compute stream's kernel through an event */
    llm4d_event *ev = G->event_create(G);
    float *pin = G->alloc_host(G, &M, LLM4D_MEM_WORKSPACE, n * 4);
    G->scale(G, ga, 2.0f, n);
    G->event_record(G, ev, LLM4D_STREAM_COMPUTE);
    G->stream_wait(G, LLM4D_STREAM_COMM, ev);
    G->copy_async(G, pin, ga, n * 4, LLM4D_D2H, LLM4D_STREAM_COMM);
    G->stream_sync(G, LLM4D_STREAM_COMM);
    ok2 = 1;
    for (size_t i = 0; i < n; i++) ok2 &= pin[i] == h[i] * 2.0f;
    check(ok2, "an event orders a pinned copy on the comm stream after a kernel on the compute stream");
    G->free_host(G, &M, LLM4D_MEM_WORKSPACE, pin, n * 4);
    G->event_destroy(G, ev);
    size_t fr = 0, tot = 0;
    G->mem_info(G, &fr, &tot);
    check(fr > 0 && fr <= tot, "mem_info: %.1f GiB free of %.1f GiB", fr / 1073741824.0, tot / 1073741824.0);
    free(a), free(b), free(h), free(h2);
    dfree(ga, n * 4), dfree(gb, n * 4), dfree(z, n * 4);
}

/* The operand conversion on its own (the linear layers' shapes all take its four-wide path): lengths that leave a
 * tail, and src and dst one element off 16-byte alignment (the scalar path), each against a conversion on the host
 * (bf16 and fp16 bit for bit; GELU's fp32 values against the fp32 path's, which the linear tests check). */
static void test_convert(void) {
    const size_t ns[5] = {1, 3, 6, 1029, 262147};
    const int fmts[3] = {LLM4D_CUDA_F32, LLM4D_CUDA_BF16, LLM4D_CUDA_F16};
    for (int in = 0; in < 5; in++)
        for (int off = 0; off < 2; off++)
            for (int act = 0; act < 2; act++) {
                const size_t n = ns[in];
                float *x = frand(n + 1, 3.0f);
                float *gx = up(x, n + 1), *gf = up(NULL, n + 1), *g16 = up(NULL, n / 2 + 2);
                cudaDeviceSynchronize(); /* the uploads ran on the backend's stream */
                float *want = NULL;
                for (int f = 0; f < 3; f++) {
                    void *dst = fmts[f] == LLM4D_CUDA_F32 ? (void *)(gf + off) : (void *)((uint16_t *)g16 + off);
                    llm4d_k_convert(0, dst, fmts[f], gx + off, n, act ? LLM4D_ACT_GELU : LLM4D_ACT_NONE);
                    check(cudaDeviceSynchronize() == cudaSuccess, "convert n=%zu: the kernels ran", n);
                    if (fmts[f] == LLM4D_CUDA_F32) {
                        want = got(gf, n + 1);
                        if (!act) check(same_bits(want + off, x + off, n), "convert fp32 n=%zu off=%d: a copy", n, off);
                        continue;
                    }
                    uint16_t *h = (uint16_t *)got(g16, n / 2 + 2);
                    size_t bad = 0;
                    for (size_t i = 0; i < n; i++) {
                        const float v = want[off + i];
                        uint16_t r;
                        if (fmts[f] == LLM4D_CUDA_BF16) {
                            r = llm4d_bf16_from_f32(v);
                        } else {
                            const _Float16 hv = (_Float16)v;
                            memcpy(&r, &hv, 2);
                        }
                        bad += h[off + i] != r;
                    }
                    check(bad == 0, "convert %s n=%zu off=%d%s: %zu of %zu differ from the host's rounding",
                          fmts[f] == LLM4D_CUDA_BF16 ? "bf16" : "fp16", n, off, act ? " through GELU" : "", bad, n);
                    free(h);
                }
                free(x), free(want);
                dfree(gx, (n + 1) * 4), dfree(gf, (n + 1) * 4), dfree(g16, (n / 2 + 2) * 4);
            }
}

int main(void) {
    setup_or_skip();
    test_linear(7, 12, 5, 1, LLM4D_ACT_NONE);
    test_linear(64, 96, 288, 1, LLM4D_ACT_GELU);
    test_linear(130, 200, 72, 0, LLM4D_ACT_NONE);
    test_embeddings(50, 24, 37, 3, 16, 5);
    test_embeddings(300, 70, 1000, 1, 64, 0);
    test_layernorm_gelu_bias(33, 50);
    test_layernorm_gelu_bias(256, 768);
    test_dropout(24, 20, 8, 0, 0.1f);
    test_dropout(13, 7, 5, 9, 0.5f);
    test_dropout(40, 64, 16, 3, 0.0f);
    test_xent(17, 530, 500, 3);
    test_xent(64, 2048, 2000, 1);
    test_adamw(3);
    test_adamw(45); /* more copies than one launch carries */
    test_reductions();
    test_small_ops();
    test_convert();
    llm4d_work_stats ws;
    G->work_stats(G, &ws);
    int all = 1;
    for (int k = 0; k < LLM4D_WORK_N; k++)
        if (k != LLM4D_WORK_ATTN) all &= ws.seconds[k] > 0 && ws.calls[k] > 0;
    check(all, "the work timers counted gemm %.3f ms, optimizer %.3f, loss %.3f, convert %.3f, elementwise %.3f",
          ws.seconds[LLM4D_WORK_GEMM] * 1e3, ws.seconds[LLM4D_WORK_OPTIM] * 1e3, ws.seconds[LLM4D_WORK_LOSS] * 1e3,
          ws.seconds[LLM4D_WORK_CONVERT] * 1e3, ws.seconds[LLM4D_WORK_ELEM] * 1e3);
    const double peak = G->matmul_peak_gflops(G);
    check(peak > 0, "matmul peak (fp32): %.0f GFLOP/s", peak);
    G->destroy(G), R->destroy(R), CPU->destroy(CPU);
    return check_summary();
}
