/* test_cuda_kernels.c — the CUDA backend's kernels against the reference backend, op by op (the attention has its
 * own test, test_cuda_attention.c). Skipped (exit 77, one line why) where the backend cannot run.
 *
 * fp32 within 1e-5 normwise relative (test_kernels.c's tolerance for the CPU backend); the kernels that sum in the
 * CPU's order (embedding and position gradients), move data (bias, dropout masks, add, scale) or draw the same
 * Philox words are checked for equal bits; bf16, fp16 and tf32 GEMMs against the CPU backend's error in the same
 * format (cuda_util.h cmp_lowp). Gradients that accumulate are given random contents first, and a second call must
 * add the increment again. Also: AdamW's in-pass bf16 weight copies equal a fresh conversion (one range with more
 * copies than a launch carries, too); the reductions are bit-identical run to run and sumsq_many's parts are sumsq's;
 * init_param is the CPU's weights; the Llama family's RMSNorm, RoPE and SwiGLU (every activation type); memory is
 * zeroed, copies and streams order as backend.h says; the work timers count every kind that ran.
 *
 * Typed tensors (tensor.h): every typed method again with bf16 and fp16 activations (and the mixes the model uses:
 * fp32 dout into LayerNorm, fp32 x into the residual add, fp32 outputs of 16-bit GEMMs), each against ref given the
 * same typed tensors. Two backends that compute a value to within the fp32 tolerance may still round it to
 * neighbouring 16-bit numbers, so a 16-bit result may differ by one ulp of its type at that value (2^-8 to 2^-7 of
 * it in bf16, 2^-11 to 2^-10 in fp16) plus what the fp32 comparison allows (cmp_t); results that are the same fp32
 * value on both sides (dropout masks, copies, conversions) must have the same bits. 16-bit GEMMs are compared as
 * the fp32 ones (against the CPU backend's error in the same format), plus one ulp of a 16-bit output (cmp_lowp_t). */
#include "backend/cuda/cuda_kernels.h"
#include "core/bf16.h"
#include "cuda_util.h"

#define T32 llm4d_t32
#define C32 llm4d_ct32

/* ---------------------------------------------------------------------------------------------------------- */
/* the stream the backend runs its kernels on, for the kernels this test launches itself */
static cudaStream_t gstream(void) { return (cudaStream_t)llm4d_cuda_stream(G, LLM4D_STREAM_COMPUTE); }

static void test_linear(int N, int C, int OC, int bias, llm4d_act act) {
    char tag[160];
    snprintf(tag, sizeof tag, "linear N=%d C=%d OC=%d bias=%d%s", N, C, OC, bias, act ? " through GELU" : "");
    const size_t nx = (size_t)N * C, nw = (size_t)OC * C, ny = (size_t)N * OC;
    float *x = frand(nx, 1.0f), *w = frand(nw, 0.1f), *b = bias ? frand(OC, 0.5f) : NULL, *dy = frand(ny, 1.0f);
    float *dx0 = frand(nx, 1.0f), *dw0 = frand(nw, 1.0f), *db0 = frand(OC, 1.0f);
    float *y = falloc(ny), *dx = fdup(dx0, nx), *dw = fdup(dw0, nw), *db = fdup(db0, OC);
    R->linear_forward_act(R, T32(y), C32(x), act, w, b, N, C, OC);
    R->linear_backward_act(R, T32(dx), LLM4D_ADD, dw, db, C32(dy), C32(x), act, w, N, C, OC);
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
        G->linear_forward_act(G, T32(gy), C32(gx), act, gw, gb, N, C, OC);
        G->linear_backward_act(G, T32(gdx), LLM4D_ADD, gdw, gdb, C32(gdy), C32(gx), act, gw, N, C, OC);
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
                G->linear_forward_act(G, T32(gy1), C32(gx), act, gw, gb1 + 1, N, C, OC);
                float *hy1 = got(gy1, ny);
                snprintf(what, sizeof what, "%s fp32 forward, bias not 16-byte aligned", tag);
                cmp(what, hy1, y, ny, TOL);
                free(b1), free(hy1), dfree(gy1, ny * 4), dfree(gb1, ((size_t)OC + 1) * 4);
            }
            /* written: over random contents, the gradient from zero, twice the same bits */
            float *rx = falloc(nx);
            R->linear_backward_act(R, T32(rx), LLM4D_WRITE, NULL, NULL, C32(dy), C32(x), act, w, N, C, OC);
            G->linear_backward_act(G, T32(gdx), LLM4D_WRITE, NULL, NULL, C32(gdy), C32(gx), act, gw, N, C, OC);
            float *a1 = got(gdx, nx);
            G->linear_backward_act(G, T32(gdx), LLM4D_WRITE, NULL, NULL, C32(gdy), C32(gx), act, gw, N, C, OC);
            float *a2 = got(gdx, nx);
            snprintf(what, sizeof what, "%s fp32 dinp written", tag), cmp(what, a1, rx, nx, TOL);
            check(same_bits(a1, a2, nx), "%s: dinp written again, the same bits", tag);
            free(rx), free(a1), free(a2);
        } else if (p < 3) { /* against the CPU backend in the same format */
            CPU->set_precision(CPU, precs[p], &err);
            float *cy = falloc(ny), *cdx = fdup(dx0, nx), *cdw = fdup(dw0, nw), *cdb = fdup(db0, OC);
            CPU->linear_forward_act(CPU, T32(cy), C32(x), act, w, b, N, C, OC);
            CPU->linear_backward_act(CPU, T32(cdx), LLM4D_ADD, cdw, cdb, C32(dy), C32(x), act, w, N, C, OC);
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

/* A linear layer's tensors: in (inp), out, dout, dinp, each of its own type, under a GEMM precision. */
typedef struct {
    llm4d_precision prec;
    llm4d_ftype in, out, dout, dinp;
    const char *name;
} lin_case;

static const lin_case LIN_CASES[] = {
    {LLM4D_PREC_BF16, LLM4D_BF16, LLM4D_BF16, LLM4D_BF16, LLM4D_BF16, "bf16 GEMMs, bf16 tensors (O2)"},
    {LLM4D_PREC_BF16, LLM4D_BF16, LLM4D_F32, LLM4D_F32, LLM4D_F32, "bf16 GEMMs, bf16 input, fp32 out and grads"},
    {LLM4D_PREC_FP16, LLM4D_F16, LLM4D_F16, LLM4D_F16, LLM4D_F16, "fp16 GEMMs, fp16 tensors"},
    {LLM4D_PREC_FP32, LLM4D_BF16, LLM4D_BF16, LLM4D_BF16, LLM4D_BF16, "fp32 GEMMs, bf16 tensors"},
    {LLM4D_PREC_BF16, LLM4D_F16, LLM4D_F16, LLM4D_F16, LLM4D_BF16, "bf16 GEMMs, fp16 tensors, bf16 dinp"},
};

/* forward, backward added to random contents and backward written, on ref (the oracle: fp32 arithmetic on the typed
 * values), the CPU backend (the same precision) and the GPU; [0] ref, [1] cpu, [2] gpu */
static void test_linear_typed(int N, int C, int OC, int bias, llm4d_act act, const lin_case *k) {
    char tag[200], what[300];
    snprintf(tag, sizeof tag, "linear N=%d C=%d OC=%d bias=%d%s, %s", N, C, OC, bias, act ? " through GELU" : "",
             k->name);
    const size_t nx = (size_t)N * C, nw = (size_t)OC * C, ny = (size_t)N * OC;
    float *x = frand(nx, 1.0f), *w = frand(nw, 0.1f), *b = bias ? frand(OC, 0.5f) : NULL, *dy = frand(ny, 1.0f);
    float *dx0 = frand(nx, 1.0f), *dw0 = frand(nw, 1.0f), *db0 = frand(OC, 1.0f);
    float *y[3], *dxa[3], *dxw[3], *dw[3], *db[3];
    llm4d_err err = {0};
    void *hx = host_t(x, nx, k->in), *hdy = host_t(dy, ny, k->dout);
    llm4d_backend *hb[2] = {R, CPU};
    for (int i = 0; i < 2; i++) {
        llm4d_backend *be = hb[i];
        if (i == 1) be->set_precision(be, k->prec, &err);
        void *hy = host_t(NULL, ny, k->out), *ha = host_t(dx0, nx, k->dinp), *hw = host_t(dx0, nx, k->dinp);
        dw[i] = fdup(dw0, nw), db[i] = fdup(db0, OC);
        be->linear_forward_act(be, llm4d_t(hy, k->out), llm4d_ct(hx, k->in), act, w, b, N, C, OC);
        be->linear_backward_act(be, llm4d_t(ha, k->dinp), LLM4D_ADD, dw[i], db[i], llm4d_ct(hdy, k->dout),
                                llm4d_ct(hx, k->in), act, w, N, C, OC);
        be->linear_backward_act(be, llm4d_t(hw, k->dinp), LLM4D_WRITE, NULL, NULL, llm4d_ct(hdy, k->dout),
                                llm4d_ct(hx, k->in), act, w, N, C, OC);
        y[i] = widen(hy, ny, k->out), dxa[i] = widen(ha, nx, k->dinp), dxw[i] = widen(hw, nx, k->dinp);
        free(hy), free(ha), free(hw);
    }
    CPU->set_precision(CPU, LLM4D_PREC_FP32, &err);
    G->set_precision(G, k->prec, &err);
    void *gx = up_t(x, nx, k->in), *gdy = up_t(dy, ny, k->dout), *gy = up_t(NULL, ny, k->out);
    void *gdx = up_t(dx0, nx, k->dinp);
    float *gw = up(w, nw), *gb = b ? up(b, OC) : NULL, *gdw = up(dw0, nw), *gdb = up(db0, OC);
    G->linear_forward_act(G, llm4d_t(gy, k->out), llm4d_ct(gx, k->in), act, gw, gb, N, C, OC);
    G->linear_backward_act(G, llm4d_t(gdx, k->dinp), LLM4D_ADD, gdw, gdb, llm4d_ct(gdy, k->dout), llm4d_ct(gx, k->in),
                           act, gw, N, C, OC);
    y[2] = got_t(gy, ny, k->out), dxa[2] = got_t(gdx, nx, k->dinp), dw[2] = got(gdw, nw), db[2] = got(gdb, OC);
    void *g0 = up_t(dx0, nx, k->dinp); /* written over random contents, twice */
    G->linear_backward_act(G, llm4d_t(g0, k->dinp), LLM4D_WRITE, NULL, NULL, llm4d_ct(gdy, k->dout),
                           llm4d_ct(gx, k->in), act, gw, N, C, OC);
    dxw[2] = got_t(g0, nx, k->dinp);
    G->linear_backward_act(G, llm4d_t(g0, k->dinp), LLM4D_WRITE, NULL, NULL, llm4d_ct(gdy, k->dout),
                           llm4d_ct(gx, k->in), act, gw, N, C, OC);
    float *again = got_t(g0, nx, k->dinp);
    check(same_bits(again, dxw[2], nx), "%s: dinp written again, the same bits", tag);
    if (k->prec == LLM4D_PREC_FP32) { /* the same fp32 GEMMs of the same values: the fp32 tolerance, one ulp more */
        snprintf(what, sizeof what, "%s forward", tag), cmp_t(what, y[2], y[0], ny, TOL, k->out);
        snprintf(what, sizeof what, "%s dinp (added)", tag), cmp_t(what, dxa[2], dxa[0], nx, TOL, k->dinp);
        snprintf(what, sizeof what, "%s dinp (written)", tag), cmp_t(what, dxw[2], dxw[0], nx, TOL, k->dinp);
        snprintf(what, sizeof what, "%s dw (added)", tag), cmp(what, dw[2], dw[0], nw, TOL);
    } else {
        snprintf(what, sizeof what, "%s forward", tag), cmp_lowp_t(what, y[2], y[1], y[0], ny, k->out);
        snprintf(what, sizeof what, "%s dinp (added)", tag), cmp_lowp_t(what, dxa[2], dxa[1], dxa[0], nx, k->dinp);
        snprintf(what, sizeof what, "%s dinp (written)", tag), cmp_lowp_t(what, dxw[2], dxw[1], dxw[0], nx, k->dinp);
        /* dw's operands already in the GEMM's type: nothing is rounded, only the sums' order differs */
        const llm4d_ftype f = k->prec == LLM4D_PREC_BF16 ? LLM4D_BF16 : LLM4D_F16;
        snprintf(what, sizeof what, "%s dw (added)", tag);
        if (k->in == f && k->dout == f && !act) cmp(what, dw[2], dw[0], nw, TOL);
        else cmp_lowp(what, dw[2], dw[1], dw[0], nw);
    }
    /* the bias gradient: the column sums of dout's values as stored, in every format */
    snprintf(what, sizeof what, "%s db (added)", tag), cmp(what, db[2], db[0], OC, TOL);
    if (b) { /* a bias 4 bytes off alignment: a 16-bit output takes it from an aligned copy */
        float *b1 = falloc((size_t)OC + 1);
        memcpy(b1 + 1, b, (size_t)OC * 4);
        float *gb1 = up(b1, (size_t)OC + 1);
        void *gy1 = up_t(NULL, ny, k->out);
        G->linear_forward_act(G, llm4d_t(gy1, k->out), llm4d_ct(gx, k->in), act, gw, gb1 + 1, N, C, OC);
        float *y1 = got_t(gy1, ny, k->out);
        snprintf(what, sizeof what, "%s forward, bias not 16-byte aligned", tag);
        cmp_t(what, y1, y[2], ny, TOL, k->out);
        free(b1), free(y1), dfree(gb1, ((size_t)OC + 1) * 4), dfree_t(gy1, ny, k->out);
    }
    G->set_precision(G, LLM4D_PREC_FP32, &err);
    for (int i = 0; i < 3; i++) free(y[i]), free(dxa[i]), free(dxw[i]), free(dw[i]), free(db[i]);
    free(x), free(w), free(b), free(dy), free(dx0), free(dw0), free(db0), free(hx), free(hdy), free(again);
    dfree_t(gx, nx, k->in), dfree_t(gdy, ny, k->dout), dfree_t(gy, ny, k->out), dfree_t(gdx, nx, k->dinp);
    dfree_t(g0, nx, k->dinp), dfree(gw, nw * 4), dfree(gdw, nw * 4), dfree(gdb, OC * 4);
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
    R->layernorm_forward(R, T32(y), mean, rstd, C32(x), w, b, N, C);
    G->layernorm_forward(G, T32(gy), gm, gr, C32(gx), gw, gb, N, C);
    float *hy = got(gy, n), *hm = got(gm, N), *hr = got(gr, N);
    char what[128];
    snprintf(what, sizeof what, "layernorm N=%d C=%d forward", N, C), cmp(what, hy, y, n, TOL);
    cmp("layernorm mean", hm, mean, N, TOL), cmp("layernorm rstd", hr, rstd, N, TOL);
    R->layernorm_backward(R, T32(dx), dw, db, C32(dy), C32(x), w, mean, rstd, N, C);
    G->layernorm_backward(G, T32(gdx), gdw, gdb, C32(gdy), C32(gx), gw, gm, gr, N, C);
    float *hdx = got(gdx, n), *hdw = got(gdw, C), *hdb = got(gdb, C);
    cmp("layernorm dinp (added)", hdx, dx, n, TOL), cmp("layernorm dw (added)", hdw, dw, C, TOL);
    cmp("layernorm db (added)", hdb, db, C, TOL);
    /* GELU over [-30, 30] (its tails) and the bias */
    for (size_t i = 0; i < n; i++) x[i] = -30.0f + 60.0f * (float)i / (float)n;
    G->copy_async(G, gx, x, n * 4, LLM4D_H2D, LLM4D_STREAM_COMPUTE);
    R->gelu_forward(R, T32(y), C32(x), n), G->gelu_forward(G, T32(gy), C32(gx), n);
    R->gelu_backward(R, T32(dx), C32(x), C32(dy), n), G->gelu_backward(G, T32(gdx), C32(gx), C32(gdy), n);
    float *hg = got(gy, n), *hgd = got(gdx, n);
    cmp("gelu forward on [-30, 30]", hg, y, n, TOL), cmp("gelu backward (written)", hgd, dx, n, TOL);
    float *o = frand(n, 1.0f), *go = up(o, n), *ro = fdup(o, n);
    R->bias_forward(R, ro, b, N, C), G->bias_forward(G, go, gb, N, C);
    float *ho = got(go, n);
    check(same_bits(ho, ro, n), "bias forward: ref's bits");
    float *rdb = fdup(db, C);
    R->bias_backward(R, rdb, C32(dy), N, C), G->bias_backward(G, gdb, C32(gdy), N, C);
    float *hb2 = got(gdb, C);
    cmp("bias backward (added)", hb2, rdb, C, TOL);
    free(x), free(w), free(b), free(dy), free(y), free(mean), free(rstd), free(dx), free(dw), free(db), free(hy);
    free(hm), free(hr), free(hdx), free(hdw), free(hdb), free(hg), free(hgd), free(o), free(ro), free(ho), free(rdb);
    free(hb2);
    dfree(gx, n * 4), dfree(gw, C * 4), dfree(gb, C * 4), dfree(gdy, n * 4), dfree(gy, n * 4), dfree(gm, N * 4);
    dfree(gr, N * 4), dfree(gdx, n * 4), dfree(gdw, C * 4), dfree(gdb, C * 4), dfree(go, n * 4);
}

/* LayerNorm, GELU and the bias gradient with typed tensors: ta is the type of the 16-bit side (the LayerNorm output,
 * its input gradient, GELU's tensors), tb LayerNorm's input; the backward's dout is fp32 as the model's (the input
 * gradient of the GEMM after it) and then ta. */
static void test_elem_typed(int N, int C, llm4d_ftype ta, llm4d_ftype tb) {
    const size_t n = (size_t)N * C;
    char tag[96], what[192];
    snprintf(tag, sizeof tag, "N=%d C=%d, %s over %s", N, C, llm4d_ftype_name(ta), llm4d_ftype_name(tb));
    float *x = frand(n, 2.0f), *w = frand(C, 1.0f), *b = frand(C, 1.0f), *dy = frand(n, 1.0f), *dx0 = frand(n, 1.0f);
    float *dw = frand(C, 1.0f), *db = frand(C, 1.0f), *mean = falloc(N), *rstd = falloc(N);
    void *rx = host_t(x, n, tb), *ry = host_t(NULL, n, ta);
    void *gx = up_t(x, n, tb), *gy = up_t(NULL, n, ta);
    float *gw = up(w, C), *gb = up(b, C), *gm = up(NULL, N), *gr = up(NULL, N);
    R->layernorm_forward(R, llm4d_t(ry, ta), mean, rstd, llm4d_ct(rx, tb), w, b, N, C);
    G->layernorm_forward(G, llm4d_t(gy, ta), gm, gr, llm4d_ct(gx, tb), gw, gb, N, C);
    float *ref = widen(ry, n, ta), *h = got_t(gy, n, ta), *hm = got(gm, N), *hr = got(gr, N);
    snprintf(what, sizeof what, "layernorm %s forward", tag), cmp_t(what, h, ref, n, TOL, ta);
    snprintf(what, sizeof what, "layernorm %s mean and rstd", tag);
    check(relerr(hm, mean, N) <= TOL && relerr(hr, rstd, N) <= TOL, "%s", what);
    free(ref), free(h);
    for (int k = 0; k < 2; k++) { /* dout fp32, then ta */
        const llm4d_ftype td = k ? ta : LLM4D_F32;
        void *rdy = host_t(dy, n, td), *rdx = host_t(dx0, n, ta), *gdy = up_t(dy, n, td), *gdx = up_t(dx0, n, ta);
        float *rdw = fdup(dw, C), *rdb = fdup(db, C), *gdw = up(dw, C), *gdb = up(db, C);
        R->layernorm_backward(R, llm4d_t(rdx, ta), rdw, rdb, llm4d_ct(rdy, td), llm4d_ct(rx, tb), w, mean, rstd, N, C);
        G->layernorm_backward(G, llm4d_t(gdx, ta), gdw, gdb, llm4d_ct(gdy, td), llm4d_ct(gx, tb), gw, gm, gr, N, C);
        float *r1 = widen(rdx, n, ta), *h1 = got_t(gdx, n, ta), *hw = got(gdw, C), *hb = got(gdb, C);
        snprintf(what, sizeof what, "layernorm %s backward, dout %s: dinp (added)", tag, llm4d_ftype_name(td));
        cmp_t(what, h1, r1, n, TOL, ta);
        snprintf(what, sizeof what, "layernorm %s backward, dout %s: dw, db (added)", tag, llm4d_ftype_name(td));
        check(relerr(hw, rdw, C) <= TOL && relerr(hb, rdb, C) <= TOL, "%s", what);
        free(rdy), free(rdx), free(rdw), free(rdb), free(r1), free(h1), free(hw), free(hb);
        dfree_t(gdy, n, td), dfree_t(gdx, n, ta), dfree(gdw, C * 4), dfree(gdb, C * 4);
    }
    /* GELU over [-30, 30] (its tails), all ta; the bias gradient of a ta gradient */
    for (size_t i = 0; i < n; i++) x[i] = -30.0f + 60.0f * (float)i / (float)n;
    void *ga = up_t(x, n, ta), *gd = up_t(dy, n, ta), *gg = up_t(NULL, n, ta), *ha = host_t(x, n, ta);
    void *hd = host_t(dy, n, ta), *hg = host_t(NULL, n, ta);
    R->gelu_forward(R, llm4d_t(hg, ta), llm4d_ct(ha, ta), n), G->gelu_forward(G, llm4d_t(gg, ta), llm4d_ct(ga, ta), n);
    ref = widen(hg, n, ta), h = got_t(gg, n, ta);
    snprintf(what, sizeof what, "gelu forward %s on [-30, 30]", tag), cmp_t(what, h, ref, n, TOL, ta);
    free(ref), free(h);
    R->gelu_backward(R, llm4d_t(hg, ta), llm4d_ct(ha, ta), llm4d_ct(hd, ta), n);
    G->gelu_backward(G, llm4d_t(gg, ta), llm4d_ct(ga, ta), llm4d_ct(gd, ta), n);
    ref = widen(hg, n, ta), h = got_t(gg, n, ta);
    snprintf(what, sizeof what, "gelu backward %s (written)", tag), cmp_t(what, h, ref, n, TOL, ta);
    float *rdb = fdup(db, C), *gdb = up(db, C);
    R->bias_backward(R, rdb, llm4d_ct(hd, ta), N, C), G->bias_backward(G, gdb, llm4d_ct(gd, ta), N, C);
    float *hb = got(gdb, C);
    snprintf(what, sizeof what, "bias backward of a %s gradient (added)", tag), cmp(what, hb, rdb, C, TOL);
    free(ref), free(h), free(rdb), free(hb), free(ha), free(hd), free(hg), free(rx), free(ry), free(hm), free(hr);
    free(x), free(w), free(b), free(dy), free(dx0), free(dw), free(db), free(mean), free(rstd);
    dfree_t(ga, n, ta), dfree_t(gd, n, ta), dfree_t(gg, n, ta), dfree_t(gx, n, tb), dfree_t(gy, n, ta);
    dfree(gw, C * 4), dfree(gb, C * 4), dfree(gm, N * 4), dfree(gr, N * 4), dfree(gdb, C * 4);
}

/* The Llama family's kernels with activations of type t (rstd, w, dw fp32), against ref given the same typed values:
 * RMSNorm forward and backward (added to random contents), RoPE forward then backward in place on rows ld apart
 * (the elements past a row's heads untouched; positions far along a long sequence, where the angle must be taken
 * in double), SwiGLU forward and backward (written) with gates out to +-30. */
static void test_llama(int N, int C, llm4d_ftype t) {
    char tag[64], what[160];
    snprintf(tag, sizeof tag, "N=%d C=%d %s", N, C, llm4d_ftype_name(t));
    const size_t n = (size_t)N * C;
    float *x = frand(2 * n, 2.0f), *w = frand(C, 1.0f), *dy = frand(n, 1.0f), *dx0 = frand(2 * n, 1.0f);
    float *dw = frand(C, 1.0f), *rstd = falloc(N), *gw = up(w, C), *gr = up(NULL, N), *gdw = up(dw, C);
    void *hx = host_t(x, n, t), *hy = host_t(NULL, n, t), *hdy = host_t(dy, n, t), *hdx = host_t(dx0, n, t);
    void *gx = up_t(x, n, t), *gy = up_t(NULL, n, t), *gdy = up_t(dy, n, t), *gdx = up_t(dx0, n, t);
    R->rmsnorm_forward(R, llm4d_t(hy, t), rstd, llm4d_ct(hx, t), w, N, C, 1e-5f);
    G->rmsnorm_forward(G, llm4d_t(gy, t), gr, llm4d_ct(gx, t), gw, N, C, 1e-5f);
    float *r1 = widen(hy, n, t), *h1 = got_t(gy, n, t), *h2 = got(gr, N);
    snprintf(what, sizeof what, "rmsnorm %s forward", tag), cmp_t(what, h1, r1, n, TOL, t);
    snprintf(what, sizeof what, "rmsnorm %s rstd", tag), cmp(what, h2, rstd, N, TOL);
    free(r1), free(h1), free(h2);
    R->rmsnorm_backward(R, llm4d_t(hdx, t), dw, llm4d_ct(hdy, t), llm4d_ct(hx, t), w, rstd, N, C);
    G->rmsnorm_backward(G, llm4d_t(gdx, t), gdw, llm4d_ct(gdy, t), llm4d_ct(gx, t), gw, gr, N, C);
    r1 = widen(hdx, n, t), h1 = got_t(gdx, n, t), h2 = got(gdw, C);
    snprintf(what, sizeof what, "rmsnorm %s dinp (added)", tag), cmp_t(what, h1, r1, n, TOL, t);
    snprintf(what, sizeof what, "rmsnorm %s dw (added)", tag), cmp(what, h2, dw, C, TOL);
    free(r1), free(h1), free(h2), free(hx), free(hdx), dfree_t(gx, n, t), dfree_t(gdx, n, t);
    /* RoPE in place: N rows of C elements, the first 2 x (C / 5 even) of each the heads, tokens of T = 70000 */
    const int HS = (C / 5) & ~1;
    const llm4d_rope_shape rs = {.N = N, .NH = 2, .HS = HS, .ld = C, .T = 70000, .tok0 = 69990 - N, .theta = 1e4f};
    hx = host_t(x, n, t), gx = up_t(x, n, t);
    R->rope_forward(R, llm4d_t(hx, t), llm4d_ct(hx, t), rs), G->rope_forward(G, llm4d_t(gx, t), llm4d_ct(gx, t), rs);
    r1 = widen(hx, n, t), h1 = got_t(gx, n, t);
    snprintf(what, sizeof what, "rope %s HS=%d forward in place", tag, HS), cmp_t(what, h1, r1, n, TOL, t);
    free(r1), free(h1);
    R->rope_backward(R, llm4d_t(hx, t), llm4d_ct(hx, t), rs), G->rope_backward(G, llm4d_t(gx, t), llm4d_ct(gx, t), rs);
    r1 = widen(hx, n, t), h1 = got_t(gx, n, t);
    snprintf(what, sizeof what, "rope %s backward in place", tag), cmp_t(what, h1, r1, n, TOL, t);
    free(r1), free(h1), free(hx), dfree_t(gx, n, t);
    /* SwiGLU: inp [N, 2C], the gates spread over [-30, 30] */
    for (size_t i = 0; i < 2 * n; i++)
        if (i / C % 2 == 0) x[i] = -30.0f + 60.0f * (float)((i * 7919) % n) / (float)n;
    hx = host_t(x, 2 * n, t), gx = up_t(x, 2 * n, t), hdx = host_t(dx0, 2 * n, t), gdx = up_t(dx0, 2 * n, t);
    R->swiglu_forward(R, llm4d_t(hy, t), llm4d_ct(hx, t), N, C);
    G->swiglu_forward(G, llm4d_t(gy, t), llm4d_ct(gx, t), N, C);
    r1 = widen(hy, n, t), h1 = got_t(gy, n, t);
    snprintf(what, sizeof what, "swiglu %s forward", tag), cmp_t(what, h1, r1, n, TOL, t);
    free(r1), free(h1);
    R->swiglu_backward(R, llm4d_t(hdx, t), llm4d_ct(hx, t), llm4d_ct(hdy, t), N, C);
    G->swiglu_backward(G, llm4d_t(gdx, t), llm4d_ct(gx, t), llm4d_ct(gdy, t), N, C);
    r1 = widen(hdx, 2 * n, t), h1 = got_t(gdx, 2 * n, t);
    snprintf(what, sizeof what, "swiglu %s backward (written)", tag), cmp_t(what, h1, r1, 2 * n, TOL, t);
    free(r1), free(h1), free(hx), free(hy), free(hdy), free(hdx), free(x), free(w), free(dy), free(dx0), free(dw);
    free(rstd), dfree_t(gx, 2 * n, t), dfree_t(gy, n, t), dfree_t(gdy, n, t), dfree_t(gdx, 2 * n, t);
    dfree(gw, C * 4), dfree(gr, N * 4), dfree(gdw, C * 4);
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
    R->dropout_forward(R, T32(ra), C32(ones), N, C, &d), G->dropout_forward(G, T32(ga), C32(gones), N, C, &gd);
    float *h = got(ga, n);
    check(same_bits(h, ra, n), "dropout N=%d C=%d T=%d tok0=%lld p=%.1f: the mask is ref's, bit for bit", N, C, T,
          (long long)tok0, p);
    free(h);
    R->dropout_add_forward(R, T32(ra), C32(res), C32(x), N, C, &d);
    G->dropout_add_forward(G, T32(ga), C32(gres), C32(gx), N, C, &gd);
    h = got(ga, n), cmp("dropout_add forward", h, ra, n, 1e-6), free(h);
    memcpy(ra, g0, n * 4), G->copy_async(G, ga, g0, n * 4, LLM4D_H2D, LLM4D_STREAM_COMPUTE);
    R->dropout_backward(R, T32(ra), C32(x), N, C, &d), G->dropout_backward(G, T32(ga), C32(gx), N, C, &gd);
    h = got(ga, n), cmp("dropout backward (added)", h, ra, n, 1e-6), free(h);
    R->dropout_add_backward(R, T32(ra), T32(rb), C32(x), N, C, &d);
    G->dropout_add_backward(G, T32(ga), T32(gb), C32(gx), N, C, &gd);
    float *h2 = got(gb, n);
    h = got(ga, n);
    check(same_bits(h, ra, n) && same_bits(h2, rb, n), "dropout_add backward: dres and dx are ref's bits");
    free(h), free(h2), free(ones), free(x), free(res), free(g0), free(ra), free(rb);
    dfree((void *)gd.sample_ids, sizeof sids), dfree(gones, n * 4), dfree(gx, n * 4), dfree(gres, n * 4);
    dfree(ga, n * 4), dfree(gb, n * 4);
}

/* The dropouts with typed tensors as the model mixes them: out (t) = dropout(inp fp32); out (t) = res (t) +
 * dropout(x fp32); dinp (fp32 and t) += dropout'(dout t); dres, dx (t) = dout (t), dropout'(dout). A product of a
 * mask and a value is the same fp32 number on both sides, so its rounding has the same bits; a sum with a product
 * may be one fused multiply-add on one side and not the other (test_dropout's 1e-6), so one ulp more. */
static void test_dropout_typed(int N, int C, int T, int64_t tok0, float p, llm4d_ftype t) {
    int64_t sids[8] = {11, 2, 40, 3, 7, 0, 25, 6};
    llm4d_dropout d = {p, 99, llm4d_rng_stream(LLM4D_RNG_DROPOUT, 1, LLM4D_DROP_ATTN_OUT, 3), sids, T, tok0, NULL};
    llm4d_dropout gd = d;
    gd.sample_ids = up_bytes(sids, sizeof sids);
    const size_t n = (size_t)N * C;
    char tag[96];
    snprintf(tag, sizeof tag, "dropout %s N=%d C=%d T=%d tok0=%lld p=%.1f", llm4d_ftype_name(t), N, C, T,
             (long long)tok0, p);
    float *x = frand(n, 1.0f), *res = frand(n, 1.0f), *g0 = frand(n, 1.0f);
    void *hres = host_t(res, n, t), *hdy = host_t(x, n, t), *ha = host_t(NULL, n, t), *hb = host_t(NULL, n, t);
    float *gx = up(x, n), *gf = up(g0, n);
    void *gres = up_t(res, n, t), *gdy = up_t(x, n, t), *ga = up_t(NULL, n, t), *gb = up_t(NULL, n, t);
    R->dropout_forward(R, llm4d_t(ha, t), C32(x), N, C, &d);
    G->dropout_forward(G, llm4d_t(ga, t), C32(gx), N, C, &gd);
    float *r = widen(ha, n, t), *h = got_t(ga, n, t);
    check(same_bits(h, r, n), "%s: forward of an fp32 input, ref's bits", tag);
    free(r), free(h);
    R->dropout_add_forward(R, llm4d_t(ha, t), llm4d_ct(hres, t), C32(x), N, C, &d);
    G->dropout_add_forward(G, llm4d_t(ga, t), llm4d_ct(gres, t), C32(gx), N, C, &gd);
    char what[160];
    r = widen(ha, n, t), h = got_t(ga, n, t);
    snprintf(what, sizeof what, "%s: residual add of an fp32 x", tag), cmp_t(what, h, r, n, 1e-6, t);
    free(r), free(h);
    float *rf = fdup(g0, n);
    R->dropout_backward(R, T32(rf), llm4d_ct(hdy, t), N, C, &d);
    G->dropout_backward(G, T32(gf), llm4d_ct(gdy, t), N, C, &gd);
    h = got(gf, n);
    snprintf(what, sizeof what, "%s: backward into fp32 (added)", tag), cmp(what, h, rf, n, 1e-6);
    free(h);
    void *hacc = host_t(g0, n, t), *gacc = up_t(g0, n, t);
    R->dropout_backward(R, llm4d_t(hacc, t), llm4d_ct(hdy, t), N, C, &d);
    G->dropout_backward(G, llm4d_t(gacc, t), llm4d_ct(gdy, t), N, C, &gd);
    r = widen(hacc, n, t), h = got_t(gacc, n, t);
    snprintf(what, sizeof what, "%s: backward into %s (added, rounded once)", tag, llm4d_ftype_name(t));
    cmp_t(what, h, r, n, 1e-6, t);
    free(r), free(h);
    R->dropout_add_backward(R, llm4d_t(ha, t), llm4d_t(hb, t), llm4d_ct(hdy, t), N, C, &d);
    G->dropout_add_backward(G, llm4d_t(ga, t), llm4d_t(gb, t), llm4d_ct(gdy, t), N, C, &gd);
    float *r2 = widen(hb, n, t), *h2 = got_t(gb, n, t);
    r = widen(ha, n, t), h = got_t(ga, n, t);
    check(same_bits(h, r, n) && same_bits(h2, r2, n), "%s: residual backward, dres and dx are ref's bits", tag);
    free(r), free(h), free(r2), free(h2), free(x), free(res), free(g0), free(rf), free(hres), free(hdy), free(ha);
    free(hb), free(hacc);
    dfree((void *)gd.sample_ids, sizeof sids), dfree(gx, n * 4), dfree(gf, n * 4), dfree_t(gres, n, t);
    dfree_t(gdy, n, t), dfree_t(ga, n, t), dfree_t(gb, n, t), dfree_t(gacc, n, t);
}

/* The loss over vocabulary blocks (merge) of a padded vocabulary of logits of type t (the LM head's output), then its
 * gradient: in fp32 beside the logits, and written in t over them (the model's). The statistics and losses of the
 * same values within the fp32 tolerance, a 16-bit gradient within one ulp more. */
static void test_xent(int N, int Vp, int V, int blocks, llm4d_ftype t) {
    const size_t n = (size_t)N * Vp, es = llm4d_ftype_size(t);
    char tag[96], what[192];
    snprintf(tag, sizeof tag, "cross-entropy of %s logits N=%d V=%d/%d in %d blocks", llm4d_ftype_name(t), N, V, Vp,
             blocks);
    float *l = frand(n, 3.0f), *dloss = frand(N, 1.0f);
    int32_t *tg = malloc(sizeof(int32_t) * N);
    for (int i = 0; i < N; i++) tg[i] = (int32_t)((i * 7u + 3u) % (unsigned)V);
    void *rl = host_t(l, n, t), *gl = up_t(l, n, t);
    float *gdl = up(dloss, N), *gs = up(NULL, 3 * (size_t)N), *gloss = up(NULL, N), *gd32 = up(NULL, n);
    int32_t *gtg = up_bytes(tg, sizeof(int32_t) * N);
    float *rs = falloc(3 * (size_t)N), *rloss = falloc(N), *rd32 = falloc(n);
    const int w = (Vp + blocks - 1) / blocks;
    /* each block's columns are a separate [N, w] matrix: the model's vocabulary blocks are */
    char *blk = host_t(NULL, (size_t)N * w, t);
    void *gblk = up_t(NULL, (size_t)N * w, t);
    for (int k = 0, v0 = 0; v0 < Vp; k++, v0 += w) {
        const size_t Vl = (size_t)(Vp - v0 < w ? Vp - v0 : w);
        for (int i = 0; i < N; i++) memcpy(blk + i * Vl * es, (char *)rl + ((size_t)i * Vp + v0) * es, Vl * es);
        G->copy_async(G, gblk, blk, N * Vl * es, LLM4D_H2D, LLM4D_STREAM_COMPUTE);
        R->xent_forward(R, rs, llm4d_ct(blk, t), tg, N, (int)Vl, v0, V, k > 0);
        G->xent_forward(G, gs, llm4d_ct(gblk, t), gtg, N, (int)Vl, v0, V, k > 0);
    }
    float *hs = got(gs, 3 * (size_t)N);
    snprintf(what, sizeof what, "%s: statistics merged over blocks", tag), cmp(what, hs, rs, 3 * (size_t)N, TOL);
    float gmax_h[64];
    for (int i = 0; i < N && i < 64; i++) gmax_h[i] = rs[i] + 0.5f;
    float *gmax = up(gmax_h, N);
    R->xent_rescale(R, rs, gmax_h, N), G->xent_rescale(G, gs, gmax, N);
    free(hs), hs = got(gs, 3 * (size_t)N);
    snprintf(what, sizeof what, "%s: rescaled to a larger max", tag), cmp(what, hs, rs, 3 * (size_t)N, TOL);
    R->xent_backward(R, NULL, T32(rd32), llm4d_ct(rl, t), rs, tg, dloss, N, Vp, 0, V);
    G->xent_backward(G, NULL, T32(gd32), llm4d_ct(gl, t), gs, gtg, gdl, N, Vp, 0, V);
    float *h = got(gd32, n);
    snprintf(what, sizeof what, "%s: fp32 dlogits", tag), cmp(what, h, rd32, n, TOL);
    free(h);
    R->xent_backward(R, rloss, llm4d_t(rl, t), llm4d_ct(rl, t), rs, tg, dloss, N, Vp, 0, V);
    G->xent_backward(G, gloss, llm4d_t(gl, t), llm4d_ct(gl, t), gs, gtg, gdl, N, Vp, 0, V);
    float *hloss = got(gloss, N), *r = widen(rl, n, t);
    h = got_t(gl, n, t);
    snprintf(what, sizeof what, "%s: losses", tag), cmp(what, hloss, rloss, N, TOL);
    snprintf(what, sizeof what, "%s: dlogits written over the logits", tag), cmp_t(what, h, r, n, TOL, t);
    free(l), free(dloss), free(tg), free(rl), free(rs), free(rloss), free(rd32), free(blk), free(hs), free(h);
    free(hloss), free(r);
    dfree_t(gl, n, t), dfree(gdl, N * 4), dfree(gs, 12 * (size_t)N), dfree(gloss, N * 4), dfree(gd32, n * 4);
    dfree(gtg, sizeof(int32_t) * N), dfree_t(gblk, (size_t)N * w, t), dfree(gmax, N * 4);
}

/* y = x w^T on the GPU, fp32 */
static void linear_into(float *y, const float *x, const float *w, int N, int C, int OC) {
    G->linear_forward(G, T32(y), C32(x), w, NULL, N, C, OC);
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
    for (int k = 0; k < nw; k++) linear_into(gy + (size_t)k * N * OC, gx, gp + k * per, N, C, OC);
    G->weights_changed(G, NULL, 0); /* as the trainer says before an update: AdamW's pass makes them valid again */
    R->adamw(R, p, g, m, v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, 0.5f, 1);
    G->adamw(G, gp, gg, gm, gv, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, 0.5f, 1);
    float *hp = got(gp, n), *hm = got(gm, n), *hv = got(gv, n), *hg = got(gg, n);
    cmp("adamw params", hp, p, n, 1e-6), cmp("adamw m", hm, m, n, 1e-6), cmp("adamw v", hv, v, n, 1e-6);
    int zero = 1;
    for (size_t i = 0; i < n; i++) zero &= hg[i] == 0.0f;
    check(zero, "adamw zeroed the gradients in its pass");
    for (int k = 0; k < nw; k++) linear_into(gy + (size_t)k * N * OC, gx, gp + k * per, N, C, OC);
    float *y1 = got(gy, (size_t)N * OC * nw);
    G->weights_changed(G, NULL, 0);
    for (int k = 0; k < nw; k++) linear_into(gy + (size_t)k * N * OC, gx, gp + k * per, N, C, OC);
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

/* The conversion kernel on its own (the linear layers' shapes all take its four-wide paths), from each type: lengths
 * that leave a tail, and src and dst one element off alignment (the scalar path), each against a conversion on the
 * host: widening exact, rounding to bf16 and fp16 bit for bit the host's (GELU's fp32 values: the kernel's own fp32
 * output, which the linear tests check). Then the backend's convert against ref's, bit for bit. */
static void test_convert(void) {
    const size_t ns[5] = {1, 3, 6, 1029, 262147};
    const llm4d_ftype ts[3] = {LLM4D_F32, LLM4D_BF16, LLM4D_F16};
    for (int in = 0; in < 5; in++)
        for (int off = 0; off < 2; off++)
            for (int act = 0; act < 2; act++)
                for (int st = 0; st < 3; st++) {
                    const size_t n = ns[in], es = llm4d_ftype_size(ts[st]);
                    const llm4d_act a = act ? LLM4D_ACT_GELU : LLM4D_ACT_NONE;
                    float *x = frand(n + 1, 3.0f);
                    void *hx = host_t(x, n + 1, ts[st]), *gx = up_t(x, n + 1, ts[st]);
                    float *xs = widen(hx, n + 1, ts[st]), *gf = up(NULL, n + 1);
                    uint16_t *g16 = (uint16_t *)up(NULL, n / 2 + 2);
                    const llm4d_ctensor src = llm4d_ct((char *)gx + off * es, ts[st]);
                    cudaDeviceSynchronize(); /* the uploads ran on the backend's stream */
                    llm4d_k_convert(0, T32(gf + off), src, n, a);
                    check(cudaDeviceSynchronize() == cudaSuccess, "convert n=%zu: the kernels ran", n);
                    float *want = got(gf, n + 1);
                    if (!act)
                        check(same_bits(want + off, xs + off, n), "convert %s -> fp32 n=%zu off=%d: exact",
                              llm4d_ftype_name(ts[st]), n, off);
                    for (int dt = 1; dt < 3; dt++) {
                        llm4d_k_convert(0, llm4d_t(g16 + off, ts[dt]), src, n, a);
                        check(cudaDeviceSynchronize() == cudaSuccess, "convert n=%zu: the kernels ran", n);
                        uint16_t *h = (uint16_t *)got(g16, n / 2 + 2);
                        size_t bad = 0;
                        for (size_t i = 0; i < n; i++) {
                            uint16_t r[2] = {0, 0}; /* room for what the setter's fp32 branch could store */
                            llm4d_ftype_set(llm4d_t(r, ts[dt]), 0, want[off + i]);
                            bad += h[off + i] != r[0];
                        }
                        check(bad == 0, "convert %s -> %s n=%zu off=%d%s: %zu of %zu differ from the host's rounding",
                              llm4d_ftype_name(ts[st]), llm4d_ftype_name(ts[dt]), n, off, act ? " through GELU" : "",
                              bad, n);
                        free(h);
                    }
                    free(x), free(hx), free(xs), free(want);
                    dfree(gx, (n + 1) * es), dfree(gf, (n + 1) * 4), dfree(g16, (n / 2 + 2) * 4);
                }
    /* the method, between every pair of types */
    const size_t n = 1029;
    float *x = frand(n, 3.0f);
    int same = 1;
    for (int st = 0; st < 3; st++)
        for (int dt = 0; dt < 3; dt++) {
            void *hx = host_t(x, n, ts[st]), *hy = host_t(NULL, n, ts[dt]), *gx = up_t(x, n, ts[st]);
            void *gy = up_t(NULL, n, ts[dt]);
            R->convert(R, llm4d_t(hy, ts[dt]), llm4d_ct(hx, ts[st]), n);
            G->convert(G, llm4d_t(gy, ts[dt]), llm4d_ct(gx, ts[st]), n);
            float *r = widen(hy, n, ts[dt]), *h = got_t(gy, n, ts[dt]);
            same &= same_bits(h, r, n);
            free(hx), free(hy), free(r), free(h), dfree_t(gx, n, ts[st]), dfree_t(gy, n, ts[dt]);
        }
    check(same, "convert between every pair of fp32, bf16 and fp16: ref's bits");
    free(x);
}

/* A GEMM's fp32 result stored into a 16-bit output: src + bias, or the old value + src, in fp32, rounded once */
static void test_store_rows(int N, int C, llm4d_ftype t) {
    const size_t n = (size_t)N * C;
    float *src = frand(n, 2.0f), *b = frand(C, 1.0f), *old = frand(n, 2.0f);
    float *gsrc = up(src, n), *gbias = up(b, C);
    int ok = 1;
    for (int mode = 0; mode < 3; mode++) { /* 0: src, 1: src + b, 2: old + src */
        void *gd = up_t(old, n, t), *hold = host_t(old, n, t);
        llm4d_k_store_rows(gstream(), llm4d_t(gd, t), gsrc, mode == 1 ? gbias : NULL, N, C, mode == 2);
        float *h = got_t(gd, n, t), *o = widen(hold, n, t);
        for (size_t i = 0; i < n; i++) {
            float v = src[i];
            if (mode == 1) v += b[i % C];
            if (mode == 2) v = o[i] + v;
            ok &= h[i] == llm4d_ftype_round(t, v);
        }
        free(h), free(o), free(hold), dfree_t(gd, n, t);
    }
    check(ok, "a GEMM's fp32 result stored in %s N=%d C=%d (as it is, with a bias, added): rounded once, the host's "
          "bits", llm4d_ftype_name(t), N, C);
    free(src), free(b), free(old), dfree(gsrc, n * 4), dfree(gbias, C * 4);
}

int main(void) {
    setup_or_skip();
    test_linear(7, 12, 5, 1, LLM4D_ACT_NONE);
    test_linear(64, 96, 288, 1, LLM4D_ACT_GELU);
    test_linear(130, 200, 72, 0, LLM4D_ACT_NONE);
    for (size_t k = 0; k < sizeof LIN_CASES / sizeof LIN_CASES[0]; k++) {
        test_linear_typed(64, 96, 288, 1, LLM4D_ACT_GELU, &LIN_CASES[k]);
        test_linear_typed(7, 12, 5, 1, LLM4D_ACT_NONE, &LIN_CASES[k]);
        test_linear_typed(130, 200, 72, 0, LLM4D_ACT_NONE, &LIN_CASES[k]);
    }
    test_embeddings(50, 24, 37, 3, 16, 5);
    test_embeddings(300, 70, 1000, 1, 64, 0);
    test_layernorm_gelu_bias(33, 50);
    test_layernorm_gelu_bias(256, 768);
    const llm4d_ftype ta[3] = {LLM4D_BF16, LLM4D_BF16, LLM4D_F16}, tb[3] = {LLM4D_BF16, LLM4D_F32, LLM4D_F16};
    for (int k = 0; k < 3; k++) test_elem_typed(33, 50, ta[k], tb[k]), test_elem_typed(256, 768, ta[k], tb[k]);
    for (int t = 0; t < LLM4D_NFTYPES; t++) test_llama(33, 50, (llm4d_ftype)t), test_llama(256, 768, (llm4d_ftype)t);
    test_dropout(24, 20, 8, 0, 0.1f);
    test_dropout(13, 7, 5, 9, 0.5f);
    test_dropout(40, 64, 16, 3, 0.0f);
    test_dropout_typed(24, 20, 8, 0, 0.1f, LLM4D_BF16);
    test_dropout_typed(13, 7, 5, 9, 0.5f, LLM4D_BF16);
    test_dropout_typed(24, 20, 8, 0, 0.1f, LLM4D_F16);
    test_dropout_typed(13, 7, 5, 9, 0.5f, LLM4D_F16);
    for (int t = 0; t < LLM4D_NFTYPES; t++) test_xent(17, 530, 500, 3, (llm4d_ftype)t);
    test_xent(64, 2048, 2000, 1, LLM4D_F32), test_xent(64, 2048, 2000, 1, LLM4D_BF16);
    test_adamw(3);
    test_adamw(45); /* more copies than one launch carries */
    test_reductions();
    test_small_ops();
    test_convert();
    test_store_rows(7, 5, LLM4D_BF16), test_store_rows(64, 96, LLM4D_BF16), test_store_rows(64, 96, LLM4D_F16);
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
