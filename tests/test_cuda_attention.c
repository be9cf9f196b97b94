/* test_cuda_attention.c — the CUDA backend's causal attention against the reference backend, and generation's
 * operations (the cached attention, sampling). Skipped (exit 77, one line why) where the backend cannot run.
 *
 * Shapes cross the kernels' tiles (64 rows, 64/32/16 keys) and blocks (128 rows), use local heads of a larger model
 * (head0, NH_total: tensor parallel), head sizes the tensor-core kernels take (16, 32, 64, 128) and ones only the
 * portable kernels take (24, 200), with and without dropout, and grouped-query attention (NKV kv heads of NH, the
 * qkv rows (NH + 2 NKV) HS: backend.h; multi-query NKV = 1) on both kinds of kernels. fp32 (the portable kernels) within 1e-5 of ref; bf16
 * (tensor cores where the head size allows, and the portable kernels forced) and fp16 (portable, rounding as they
 * read) against the CPU backend's error in the same format. Backward writes its gradient (run twice over the same
 * buffer: the same bits), and both directions give the same bits run to run. Generation: the cached attention within
 * 1e-5 of ref (multi-head, grouped-query and multi-query key/value heads), sampling draws ref's tokens for greedy,
 * temperature, top-k and top-p settings.
 *
 * Typed tensors (tensor.h): the same shapes with qkv and dout of one type and out and dqkv of another, as the model
 * keeps them (all bf16 under bf16: the tensor-core kernels read them as they are; all fp16 under fp16; bf16 under
 * fp32 GEMMs; fp32 qkv with bf16 results; bf16 qkv with fp32 results), each backend's backward reading the oracle's
 * out and lse, so that dqkv compares the backward alone. Against ref given the same typed tensors: the forward under
 * fp32 within the fp32 tolerance plus one ulp of the output's type (two backends may round a value computed to
 * within the tolerance to neighbouring 16-bit numbers), everything else against the CPU backend's error in the same
 * format (a 16-bit out read back by the backward carries its rounding), plus one ulp of a 16-bit output. */
#include "cuda_util.h"

/* ---------------------------------------------------------------------------------------------------------- */
typedef struct {
    float *out, *lse, *dqkv;
} att_result;

static att_result gpu_attention(const float *qkv, const float *dout, llm4d_attn_shape s, const llm4d_dropout *d) {
    const size_t nqkv = LLM4D_ATTN_QKV_ELEMS(s), nout = (size_t)s.B * s.T * s.NH * s.HS;
    const size_t nlse = (size_t)s.B * s.NH * s.T;
    float *gq = up(qkv, nqkv), *gy = up(dout, nout), *go = up(NULL, nout), *gl = up(NULL, nlse), *gd = up(qkv, nqkv);
    llm4d_dropout gdr = *d;
    gdr.sample_ids = up_bytes(d->sample_ids, sizeof(int64_t) * (size_t)s.B);
    G->attention_forward(G, llm4d_t32(go), gl, llm4d_ct32(gq), s, &gdr);
    /* over qkv's values: written, not added */
    G->attention_backward(G, llm4d_t32(gd), llm4d_ct32(gy), llm4d_ct32(go), llm4d_ct32(gq), gl, s, &gdr);
    att_result r = {got(go, nout), got(gl, nlse), got(gd, nqkv)};
    dfree(gq, nqkv * 4), dfree(gy, nout * 4), dfree(go, nout * 4), dfree(gl, nlse * 4), dfree(gd, nqkv * 4);
    dfree((void *)gdr.sample_ids, sizeof(int64_t) * (size_t)s.B);
    return r;
}

static att_result host_attention(llm4d_backend *be, const float *qkv, const float *dout, llm4d_attn_shape s,
                                 const llm4d_dropout *d) {
    const size_t nqkv = LLM4D_ATTN_QKV_ELEMS(s), nout = (size_t)s.B * s.T * s.NH * s.HS;
    att_result r = {falloc(nout), falloc((size_t)s.B * s.NH * s.T), falloc(nqkv)};
    be->attention_forward(be, llm4d_t32(r.out), r.lse, llm4d_ct32(qkv), s, d);
    be->attention_backward(be, llm4d_t32(r.dqkv), llm4d_ct32(dout), llm4d_ct32(r.out), llm4d_ct32(qkv), r.lse, s, d);
    return r;
}

static void free_result(att_result *r) { free(r->out), free(r->lse), free(r->dqkv); }

static void test_attention(llm4d_attn_shape s, float p) {
    int64_t sids[4] = {6, 2, 0, 11};
    llm4d_dropout d = {p, 5, llm4d_rng_stream(LLM4D_RNG_DROPOUT, 4, LLM4D_DROP_ATTN_PROBS, 1), sids, s.T, 0, NULL};
    const size_t nqkv = LLM4D_ATTN_QKV_ELEMS(s), nout = (size_t)s.B * s.T * s.NH * s.HS;
    const size_t nlse = (size_t)s.B * s.NH * s.T;
    float *qkv = frand(nqkv, 1.0f), *dout = frand(nout, 1.0f);
    char tag[160], what[224];
    snprintf(tag, sizeof tag, "attention B=%d T=%d NH=%d NKV=%d HS=%d head0=%d/%d p=%.1f", s.B, s.T, s.NH,
             llm4d_attn_nkv(s), s.HS, s.head0, s.NH_total, p);
    att_result ref = host_attention(R, qkv, dout, s, &d);
    llm4d_err err = {0};
    /* fp32: the portable kernels */
    att_result a = gpu_attention(qkv, dout, s, &d), b = gpu_attention(qkv, dout, s, &d);
    snprintf(what, sizeof what, "%s fp32 out", tag), cmp(what, a.out, ref.out, nout, TOL);
    snprintf(what, sizeof what, "%s fp32 lse", tag), cmp(what, a.lse, ref.lse, nlse, TOL);
    snprintf(what, sizeof what, "%s fp32 dqkv (written)", tag), cmp(what, a.dqkv, ref.dqkv, nqkv, TOL);
    check(same_bits(a.out, b.out, nout) && same_bits(a.dqkv, b.dqkv, nqkv), "%s fp32: the same bits run to run", tag);
    free_result(&a), free_result(&b);
    /* bf16 (tensor cores where the head size allows; then the portable kernels forced) and fp16 */
    const llm4d_precision precs[3] = {LLM4D_PREC_BF16, LLM4D_PREC_BF16, LLM4D_PREC_FP16};
    const char *names[3] = {"bf16", "bf16 portable", "fp16 portable"};
    for (int k = 0; k < 3; k++) {
        G->set_precision(G, precs[k], &err);
        CPU->set_precision(CPU, precs[k], &err);
        llm4d_cuda_set_attention_portable(G, k > 0);
        att_result g = gpu_attention(qkv, dout, s, &d), g2 = gpu_attention(qkv, dout, s, &d);
        att_result c = host_attention(CPU, qkv, dout, s, &d);
        snprintf(what, sizeof what, "%s %s out", tag, names[k]), cmp_lowp(what, g.out, c.out, ref.out, nout);
        snprintf(what, sizeof what, "%s %s lse", tag, names[k]), cmp_lowp(what, g.lse, c.lse, ref.lse, nlse);
        snprintf(what, sizeof what, "%s %s dqkv", tag, names[k]), cmp_lowp(what, g.dqkv, c.dqkv, ref.dqkv, nqkv);
        check(same_bits(g.out, g2.out, nout) && same_bits(g.dqkv, g2.dqkv, nqkv), "%s %s: the same bits run to run",
              tag, names[k]);
        free_result(&g), free_result(&g2), free_result(&c);
    }
    llm4d_cuda_set_attention_portable(G, 0);
    G->set_precision(G, LLM4D_PREC_FP32, &err);
    CPU->set_precision(CPU, LLM4D_PREC_FP32, &err);
    free_result(&ref);
    free(qkv), free(dout);
}

/* One typed case: qkv and dout of type tq, out and dqkv of type to, under precision prec (portable: the SIMT kernels
 * forced). [0] ref, [1] cpu, [2] gpu; the backward of each reads ref's out and lse. */
typedef struct {
    llm4d_ftype tq, to;
    llm4d_precision prec;
    int portable;
    const char *name;
} att_case;

static const att_case ATT_CASES[] = {
    {LLM4D_BF16, LLM4D_BF16, LLM4D_PREC_BF16, 0, "bf16 tensors, bf16"},
    {LLM4D_BF16, LLM4D_BF16, LLM4D_PREC_BF16, 1, "bf16 tensors, bf16 portable"},
    {LLM4D_F32, LLM4D_BF16, LLM4D_PREC_BF16, 0, "fp32 qkv, bf16 out and dqkv, bf16"},
    {LLM4D_BF16, LLM4D_F32, LLM4D_PREC_BF16, 0, "bf16 qkv, fp32 out and dqkv, bf16"},
    {LLM4D_F16, LLM4D_F16, LLM4D_PREC_FP16, 0, "fp16 tensors, fp16 portable"},
    {LLM4D_BF16, LLM4D_BF16, LLM4D_PREC_FP32, 0, "bf16 tensors, fp32"},
};

static void test_attention_typed(llm4d_attn_shape s, float p, const att_case *k) {
    int64_t sids[4] = {6, 2, 0, 11};
    llm4d_dropout d = {p, 5, llm4d_rng_stream(LLM4D_RNG_DROPOUT, 4, LLM4D_DROP_ATTN_PROBS, 1), sids, s.T, 0, NULL};
    llm4d_dropout gdr = d;
    gdr.sample_ids = up_bytes(sids, sizeof(int64_t) * (size_t)s.B);
    const size_t nqkv = LLM4D_ATTN_QKV_ELEMS(s), nout = (size_t)s.B * s.T * s.NH * s.HS;
    const size_t nlse = (size_t)s.B * s.NH * s.T;
    char tag[200], what[280];
    snprintf(tag, sizeof tag, "attention B=%d T=%d NH=%d NKV=%d HS=%d head0=%d/%d p=%.1f, %s", s.B, s.T, s.NH,
             llm4d_attn_nkv(s), s.HS, s.head0, s.NH_total, p, k->name);
    float *qkv = frand(nqkv, 1.0f), *dout = frand(nout, 1.0f);
    void *hq = host_t(qkv, nqkv, k->tq), *hy = host_t(dout, nout, k->tq);
    void *ho[2] = {host_t(NULL, nout, k->to), host_t(NULL, nout, k->to)};
    void *hd[2] = {host_t(NULL, nqkv, k->to), host_t(NULL, nqkv, k->to)};
    float *lse[3] = {falloc(nlse), falloc(nlse), NULL}, *out[3], *dqkv[3];
    llm4d_err err = {0};
    llm4d_backend *hb[2] = {R, CPU};
    for (int i = 0; i < 2; i++) {
        llm4d_backend *be = hb[i];
        if (i == 1) be->set_precision(be, k->prec, &err);
        be->attention_forward(be, llm4d_t(ho[i], k->to), lse[i], llm4d_ct(hq, k->tq), s, &d);
        be->attention_backward(be, llm4d_t(hd[i], k->to), llm4d_ct(hy, k->tq), llm4d_ct(ho[0], k->to),
                               llm4d_ct(hq, k->tq), lse[0], s, &d);
        out[i] = widen(ho[i], nout, k->to), dqkv[i] = widen(hd[i], nqkv, k->to);
    }
    CPU->set_precision(CPU, LLM4D_PREC_FP32, &err);
    G->set_precision(G, k->prec, &err);
    llm4d_cuda_set_attention_portable(G, k->portable);
    void *gq = up_bytes(hq, tbytes(nqkv, k->tq)), *gy = up_bytes(hy, tbytes(nout, k->tq));
    void *go = up_bytes(NULL, tbytes(nout, k->to)), *gro = up_bytes(ho[0], tbytes(nout, k->to));
    void *gd = up_bytes(NULL, tbytes(nqkv, k->to));
    float *gl = up(NULL, nlse), *grl = up(lse[0], nlse), *again[2];
    for (int r = 0; r < 2; r++) { /* twice: the same bits */
        G->attention_forward(G, llm4d_t(go, k->to), gl, llm4d_ct(gq, k->tq), s, &gdr);
        G->attention_backward(G, llm4d_t(gd, k->to), llm4d_ct(gy, k->tq), llm4d_ct(gro, k->to), llm4d_ct(gq, k->tq),
                              grl, s, &gdr);
        if (r == 0) out[2] = got_t(go, nout, k->to), dqkv[2] = got_t(gd, nqkv, k->to), lse[2] = got(gl, nlse);
        else again[0] = got_t(go, nout, k->to), again[1] = got_t(gd, nqkv, k->to);
    }
    check(same_bits(again[0], out[2], nout) && same_bits(again[1], dqkv[2], nqkv), "%s: the same bits run to run",
          tag);
    if (k->prec == LLM4D_PREC_FP32) {
        snprintf(what, sizeof what, "%s out", tag), cmp_t(what, out[2], out[0], nout, TOL, k->to);
        snprintf(what, sizeof what, "%s lse", tag), cmp(what, lse[2], lse[0], nlse, TOL);
        /* the backward reads out as stored (its row terms D = dout . out carry out's rounding; ref recomputes the
         * probabilities exactly instead), so its error is the type's, as the CPU backend's */
        snprintf(what, sizeof what, "%s dqkv (written)", tag);
        cmp_lowp_t(what, dqkv[2], dqkv[1], dqkv[0], nqkv, k->to);
    } else {
        snprintf(what, sizeof what, "%s out", tag), cmp_lowp_t(what, out[2], out[1], out[0], nout, k->to);
        const double el = relerr(lse[2], lse[0], nlse), ec = relerr(lse[1], lse[0], nlse);
        /* from 16-bit inputs the products are exact: the sums' order may be all that differs */
        check(el <= 2.0 * ec + 1e-6, "%s lse: rel err %.2e against the CPU backend's %.2e", tag, el, ec);
        snprintf(what, sizeof what, "%s dqkv (written)", tag);
        cmp_lowp_t(what, dqkv[2], dqkv[1], dqkv[0], nqkv, k->to);
    }
    llm4d_cuda_set_attention_portable(G, 0);
    G->set_precision(G, LLM4D_PREC_FP32, &err);
    for (int i = 0; i < 3; i++) free(out[i]), free(dqkv[i]), free(lse[i]);
    for (int i = 0; i < 2; i++) free(ho[i]), free(hd[i]), free(again[i]);
    free(qkv), free(dout), free(hq), free(hy);
    dfree(gq, tbytes(nqkv, k->tq)), dfree(gy, tbytes(nout, k->tq)), dfree(go, tbytes(nout, k->to));
    dfree(gro, tbytes(nout, k->to)), dfree(gd, tbytes(nqkv, k->to)), dfree(gl, nlse * 4), dfree(grl, nlse * 4);
    dfree((void *)gdr.sample_ids, sizeof(int64_t) * (size_t)s.B);
}

/* Cached attention (generation) against the ref backend's: NKV key/value heads of NH (grouped-query when fewer). */
static void test_cached(int n, int p0, int NH, int NKV, int HS, int Tmax) {
    const int C = NH * HS, KV = NKV * HS, W = C + 2 * KV, ld = Tmax;
    float *qkv = frand((size_t)n * W, 1.0f), *kc = frand((size_t)Tmax * KV, 1.0f), *vc = frand((size_t)Tmax * KV, 1.0f);
    float *out = falloc((size_t)n * C), *sc = falloc((size_t)n * NH * ld);
    R->attention_cached(R, out, qkv, kc, vc, n, p0, NH, NKV, HS, sc, ld);
    float *gq = up(qkv, (size_t)n * W), *gk = up(kc, (size_t)Tmax * KV), *gv = up(vc, (size_t)Tmax * KV);
    float *go = up(NULL, (size_t)n * C), *gs = up(NULL, (size_t)n * NH * ld);
    G->attention_cached(G, go, gq, gk, gv, n, p0, NH, NKV, HS, gs, ld);
    float *h = got(go, (size_t)n * C);
    char what[96];
    snprintf(what, sizeof what, "cached attention n=%d p0=%d NH=%d NKV=%d HS=%d", n, p0, NH, NKV, HS);
    cmp(what, h, out, (size_t)n * C, TOL);
    free(qkv), free(kc), free(vc), free(out), free(sc), free(h);
    dfree(gq, (size_t)n * W * 4), dfree(gk, (size_t)Tmax * KV * 4), dfree(gv, (size_t)Tmax * KV * 4);
    dfree(go, (size_t)n * C * 4), dfree(gs, (size_t)n * NH * ld * 4);
}

static void test_sample(int V) {
    float *l = frand(V, 2.0f), *gl = up(l, V);
    void *rs = malloc(LLM4D_SAMPLE_SCRATCH(V)), *gs = up_bytes(NULL, LLM4D_SAMPLE_SCRATCH(V));
    const llm4d_sampling set[5] = {{0.0f, 0, 1.0f, 3}, {0.8f, 0, 1.0f, 3}, {1.0f, 40, 1.0f, 4}, {0.9f, 0, 0.9f, 5},
                                   {0.7f, 50, 0.8f, 6}};
    int same = 0, total = 0;
    for (int k = 0; k < 5; k++)
        for (uint64_t j = 0; j < 20; j++, total++)
            same += R->sample(R, l, V, &set[k], j, rs) == G->sample(G, gl, V, &set[k], j, gs);
    check(same == total, "sampling V=%d: ref's token in %d of %d draws (greedy, temperature, top-k, top-p)", V, same,
          total);
    free(l), free(rs), dfree(gl, (size_t)V * 4), dfree(gs, LLM4D_SAMPLE_SCRATCH(V));
}

int main(void) {
    setup_or_skip();
    /* the last of each: NKV (0: NH). Grouped-query attention on the tensor cores' head sizes 64 (2 kv heads of 4,
     * several key tiles) and 128 (multi-query, their 32-wide tiles), on the portable kernels' 24 (3 of 6), and 16
     * (2 of 4) without dropout; each case also typed */
    enum { NS = 11 };
    const llm4d_attn_shape shapes[NS] = {
        {2, 37, 3, 16, 1, 5, 0},  {1, 130, 2, 64, 0, 2, 0}, {2, 64, 4, 32, 2, 8, 0},  {1, 70, 1, 128, 0, 1, 0},
        {2, 33, 2, 24, 0, 2, 0},  {1, 20, 1, 200, 0, 1, 0}, {2, 256, 4, 64, 4, 12, 0}, {2, 130, 4, 64, 0, 4, 2},
        {1, 70, 4, 128, 4, 8, 1}, {2, 33, 6, 24, 0, 6, 3},  {2, 37, 4, 16, 0, 4, 2}};
    const float ps[NS] = {0.1f, 0.1f, 0.0f, 0.2f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.1f, 0.0f};
    for (int i = 0; i < NS; i++) test_attention(shapes[i], ps[i]);
    for (int i = 0; i < NS; i++)
        for (size_t k = 0; k < sizeof ATT_CASES / sizeof ATT_CASES[0]; k++)
            test_attention_typed(shapes[i], ps[i], &ATT_CASES[k]);
    test_cached(1, 0, 2, 2, 16, 16);
    test_cached(3, 5, 2, 2, 16, 16);
    test_cached(4, 60, 12, 12, 64, 64);
    test_cached(3, 5, 4, 2, 16, 16); /* grouped-query: two query heads per key/value head */
    test_cached(4, 60, 12, 3, 64, 64);
    test_cached(2, 9, 8, 1, 32, 16); /* multi-query */
    test_sample(1000);
    test_sample(50257);
    llm4d_work_stats ws;
    G->work_stats(G, &ws);
    check(ws.seconds[LLM4D_WORK_ATTN] > 0 && ws.calls[LLM4D_WORK_ATTN] > 0, "the work timers counted %.3f ms of "
          "attention in %.0f calls", ws.seconds[LLM4D_WORK_ATTN] * 1e3, ws.calls[LLM4D_WORK_ATTN]);
    G->destroy(G), R->destroy(R), CPU->destroy(CPU);
    return check_summary();
}
