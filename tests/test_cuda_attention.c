/* test_cuda_attention.c — the CUDA backend's causal attention against the reference backend, and generation's
 * operations (the cached attention, sampling). Skipped (exit 77, one line why) where the backend cannot run.
 *
 * Shapes cross the kernels' tiles (64 rows, 64/32/16 keys) and blocks (128 rows), use local heads of a larger model
 * (head0, NH_total: tensor parallel), head sizes the tensor-core kernels take (16, 32, 64, 128) and ones only the
 * portable kernels take (24, 200), with and without dropout. fp32 (the portable kernels) within 1e-5 of ref; bf16
 * (tensor cores where the head size allows, and the portable kernels forced) and fp16 (portable, rounding as they
 * read) against the CPU backend's error in the same format. Backward writes its gradient (run twice over the same
 * buffer: the same bits), and both directions give the same bits run to run. Generation: the cached attention within
 * 1e-5 of ref, sampling draws ref's tokens for greedy, temperature, top-k and top-p settings. */
#include "cuda_util.h"

typedef struct {
    float *out, *lse, *dqkv;
} att_result;

static att_result gpu_attention(const float *qkv, const float *dout, llm4d_attn_shape s, const llm4d_dropout *d) {
    const size_t nqkv = (size_t)s.B * s.T * 3 * s.NH * s.HS, nout = (size_t)s.B * s.T * s.NH * s.HS;
    const size_t nlse = (size_t)s.B * s.NH * s.T;
    float *gq = up(qkv, nqkv), *gy = up(dout, nout), *go = up(NULL, nout), *gl = up(NULL, nlse), *gd = up(qkv, nqkv);
    llm4d_dropout gdr = *d;
    gdr.sample_ids = up_bytes(d->sample_ids, sizeof(int64_t) * (size_t)s.B);
    G->attention_forward(G, go, gl, gq, s, &gdr);
    G->attention_backward(G, gd, gy, go, gq, gl, s, &gdr); /* over qkv's values: written, not added */
    att_result r = {got(go, nout), got(gl, nlse), got(gd, nqkv)};
    dfree(gq, nqkv * 4), dfree(gy, nout * 4), dfree(go, nout * 4), dfree(gl, nlse * 4), dfree(gd, nqkv * 4);
    dfree((void *)gdr.sample_ids, sizeof(int64_t) * (size_t)s.B);
    return r;
}

static att_result host_attention(llm4d_backend *be, const float *qkv, const float *dout, llm4d_attn_shape s,
                                 const llm4d_dropout *d) {
    const size_t nqkv = (size_t)s.B * s.T * 3 * s.NH * s.HS, nout = (size_t)s.B * s.T * s.NH * s.HS;
    att_result r = {falloc(nout), falloc((size_t)s.B * s.NH * s.T), falloc(nqkv)};
    be->attention_forward(be, r.out, r.lse, qkv, s, d);
    be->attention_backward(be, r.dqkv, dout, r.out, qkv, r.lse, s, d);
    return r;
}

static void free_result(att_result *r) { free(r->out), free(r->lse), free(r->dqkv); }

static void test_attention(llm4d_attn_shape s, float p) {
    int64_t sids[4] = {6, 2, 0, 11};
    llm4d_dropout d = {p, 5, llm4d_rng_stream(LLM4D_RNG_DROPOUT, 4, LLM4D_DROP_ATTN_PROBS, 1), sids, s.T, 0, NULL};
    const size_t nqkv = (size_t)s.B * s.T * 3 * s.NH * s.HS, nout = (size_t)s.B * s.T * s.NH * s.HS;
    const size_t nlse = (size_t)s.B * s.NH * s.T;
    float *qkv = frand(nqkv, 1.0f), *dout = frand(nout, 1.0f);
    char tag[160], what[224];
    snprintf(tag, sizeof tag, "attention B=%d T=%d NH=%d HS=%d head0=%d/%d p=%.1f", s.B, s.T, s.NH, s.HS, s.head0,
             s.NH_total, p);
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

static void test_cached(int n, int p0, int NH, int HS, int Tmax) {
    const int C = NH * HS, ld = Tmax;
    float *qkv = frand((size_t)n * 3 * C, 1.0f), *kc = frand((size_t)Tmax * C, 1.0f), *vc = frand((size_t)Tmax * C, 1.0f);
    float *out = falloc((size_t)n * C), *sc = falloc((size_t)n * NH * ld);
    R->attention_cached(R, out, qkv, kc, vc, n, p0, NH, HS, sc, ld);
    float *gq = up(qkv, (size_t)n * 3 * C), *gk = up(kc, (size_t)Tmax * C), *gv = up(vc, (size_t)Tmax * C);
    float *go = up(NULL, (size_t)n * C), *gs = up(NULL, (size_t)n * NH * ld);
    G->attention_cached(G, go, gq, gk, gv, n, p0, NH, HS, gs, ld);
    float *h = got(go, (size_t)n * C);
    char what[96];
    snprintf(what, sizeof what, "cached attention n=%d p0=%d NH=%d HS=%d", n, p0, NH, HS);
    cmp(what, h, out, (size_t)n * C, TOL);
    free(qkv), free(kc), free(vc), free(out), free(sc), free(h);
    dfree(gq, (size_t)n * 3 * C * 4), dfree(gk, (size_t)Tmax * C * 4), dfree(gv, (size_t)Tmax * C * 4);
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
    test_attention((llm4d_attn_shape){2, 37, 3, 16, 1, 5}, 0.1f);
    test_attention((llm4d_attn_shape){1, 130, 2, 64, 0, 2}, 0.1f);
    test_attention((llm4d_attn_shape){2, 64, 4, 32, 2, 8}, 0.0f);
    test_attention((llm4d_attn_shape){1, 70, 1, 128, 0, 1}, 0.2f);
    test_attention((llm4d_attn_shape){2, 33, 2, 24, 0, 2}, 0.1f);
    test_attention((llm4d_attn_shape){1, 20, 1, 200, 0, 1}, 0.1f);
    test_attention((llm4d_attn_shape){2, 256, 4, 64, 4, 12}, 0.1f);
    test_cached(1, 0, 2, 16, 16);
    test_cached(3, 5, 2, 16, 16);
    test_cached(4, 60, 12, 64, 64);
    test_sample(1000);
    test_sample(50257);
    llm4d_work_stats ws;
    G->work_stats(G, &ws);
    check(ws.seconds[LLM4D_WORK_ATTN] > 0 && ws.calls[LLM4D_WORK_ATTN] > 0, "the work timers counted %.3f ms of "
          "attention in %.0f calls", ws.seconds[LLM4D_WORK_ATTN] * 1e3, ws.calls[LLM4D_WORK_ATTN]);
    G->destroy(G), R->destroy(R), CPU->destroy(CPU);
    return check_summary();
}
