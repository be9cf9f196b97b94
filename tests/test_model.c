/* test_model.c — whole-model checks on a tiny GPT with the reference kernels:
 *  - finite differences of the loss against the analytic gradient of every parameter tensor (dropout off and on:
 *    masks are a pure function of the seed and position, so the loss stays a deterministic function);
 *  - recompute gives the same gradients as keeping activations;
 *  - gradient accumulation (2 micro-batches of 1) equals one micro-batch of 2;
 *  - the LM head + loss computed in chunks of 5 tokens (not dividing B*T) equals one chunk of all tokens;
 *  - vocabulary padding (to 128 or to 256) changes no loss and no gradient;
 *  - the fast CPU backend agrees with the reference on loss and gradients. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "model/gpt.h"


enum { B = 2, T = 8 };

static llm4d_model_config tiny(int unit, float drop) {
    llm4d_model_config m;
    memset(&m, 0, sizeof m);
    m.vocab_size = 67;
    m.vocab_size_divisible_unit = unit;
    m.padded_vocab_size = (67 + unit - 1) / unit * unit;
    m.hidden_size = 16;
    m.num_layers = 2;
    m.num_attention_heads = 2;
    m.ffn_hidden_size = 64;
    m.max_position_embeddings = 16;
    m.hidden_dropout_prob = drop;
    m.attention_probs_dropout_prob = drop;
    m.initializer_range = 0.2f; /* large weights so that every path carries visible gradient */
    m.eos_token_id = 66;
    return m;
}

static int32_t tokens[B * T], targets[B * T];
static float dloss[B * T];
static int64_t sample_ids[B] = {5, 9};

static double loss_and_grad(llm4d_gpt *g, int with_grad, int micro) {
    if (with_grad) g->be->zero(g->be, g->grads, g->table.total * sizeof(float));
    double loss = 0;
    for (int k = 0; k < B / micro; k++) {
        const int off = k * micro * T;
        const llm4d_micro mb = {tokens + off, targets + off, dloss + off, sample_ids + k * micro, 3, 1, with_grad,
                                micro, T};
        loss += llm4d_gpt_forward(g, &mb);
        if (with_grad) llm4d_gpt_backward(g, tokens + off, sample_ids + k * micro, 3, 1, micro, T);
    }
    return loss;
}

static llm4d_gpt make(llm4d_backend *be, llm4d_mem *mem, llm4d_model_config m, int micro, int recompute) {
    llm4d_gpt g;
    llm4d_err err = {0};
    const llm4d_gpt_layout layout = {.B = micro, .T = T, .recompute = recompute};
    if (llm4d_gpt_create_whole(&g, &m, be, mem, &layout, 42, &err) != LLM4D_OK) {
        fprintf(stderr, "create: %s\n", err.msg);
        exit(1);
    }
    return g;
}

static double rel_diff(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), den += (double)b[i] * b[i];
    return sqrt(num) / (sqrt(den) + 1e-30);
}

static void gradcheck(llm4d_backend *be, float drop) {
    llm4d_mem mem = {0};
    llm4d_gpt g = make(be, &mem, tiny(128, drop), B, 0);
    loss_and_grad(&g, 1, B);
    float *grads = malloc(g.table.total * sizeof(float));
    memcpy(grads, g.grads, g.table.total * sizeof(float));
    for (int i = 0; i < g.table.n; i++) {
        const llm4d_param *p = &g.table.p[i];
        /* probe the 6 entries with the largest gradient (in the real rows) plus 2 fixed ones */
        size_t n_real = (size_t)p->rows_real * (p->ndim == 2 ? (size_t)p->shape[1] : 1);
        size_t idx[8];
        int k = 0;
        for (int r = 0; r < 6; r++) {
            size_t best = 0;
            float bv = -1;
            for (size_t j = 0; j < n_real; j++) {
                int used = 0;
                for (int q = 0; q < k; q++) used |= idx[q] == j;
                if (!used && fabsf(grads[p->offset + j]) > bv) bv = fabsf(grads[p->offset + j]), best = j;
            }
            idx[k++] = best;
        }
        idx[k++] = 0;
        idx[k++] = n_real - 1;
        double worst = 0;
        for (int q = 0; q < k; q++) {
            float *w = g.params + p->offset + idx[q];
            const float saved = *w, h = 1e-2f;
            *w = saved + h;
            double lp = loss_and_grad(&g, 0, B);
            *w = saved - h;
            double lm = loss_and_grad(&g, 0, B);
            *w = saved;
            double fd = (lp - lm) / (2.0 * h), an = grads[p->offset + idx[q]];
            double err = fabs(fd - an) / (fabs(fd) + fabs(an) + 1e-3);
            if (err > worst) worst = err;
        }
        check(worst < 2e-2, "finite differences, dropout %.1f, %-32s worst relative error %.2e", drop, p->name, worst);
    }
    free(grads);
    llm4d_gpt_destroy(&g);
}

int main(void) {
    llm4d_err err = {0};
    llm4d_backend *ref = NULL, *cpu = NULL;
    if (llm4d_backend_ref_create(&ref, &err) || llm4d_backend_cpu_create(&cpu, 2, &err)) {
        fprintf(stderr, "backend: %s\n", err.msg);
        return 1;
    }
    unsigned s = 7;
    int n_unmasked = 0;
    for (int i = 0; i < B * T; i++) {
        s = s * 1103515245u + 12345u;
        tokens[i] = (int32_t)((s >> 8) % 67);
        s = s * 1103515245u + 12345u;
        targets[i] = (int32_t)((s >> 8) % 67);
        n_unmasked += tokens[i] != 66;
    }
    for (int i = 0; i < B * T; i++) dloss[i] = tokens[i] != 66 ? 1.0f / n_unmasked : 0.0f;

    gradcheck(ref, 0.0f);
    gradcheck(ref, 0.3f);

    /* recompute and accumulation against the plain run, with dropout on */
    llm4d_mem mem = {0};
    llm4d_gpt base = make(ref, &mem, tiny(128, 0.1f), B, 0);
    double l0 = loss_and_grad(&base, 1, B);
    llm4d_gpt rc = make(ref, &mem, tiny(128, 0.1f), B, 1);
    double l1 = loss_and_grad(&rc, 1, B);
    check(l0 == l1 && rel_diff(rc.grads, base.grads, base.table.total) == 0.0,
          "recompute: loss %.9f vs %.9f, gradients bit-identical", l1, l0);
    llm4d_gpt acc = make(ref, &mem, tiny(128, 0.1f), 1, 0);
    double l2 = loss_and_grad(&acc, 1, 1);
    double d = rel_diff(acc.grads, base.grads, base.table.total);
    check(fabs(l2 - l0) < 1e-6 && d < 1e-6, "accumulation 2 x 1 vs 1 x 2: loss %.9f vs %.9f, grad rel diff %.2e", l2, l0,
          d);

    /* the fused LM head + loss in chunks of 5 rows: the same loss and gradients up to the GEMMs' summation order */
    llm4d_gpt chunked = make(ref, &mem, tiny(128, 0.1f), B, 0);
    check(chunked.head_rows == B * T, "one LM-head chunk holds all %d tokens of this tiny model", B * T);
    chunked.head_rows = 5;
    double l5 = loss_and_grad(&chunked, 1, B);
    d = rel_diff(chunked.grads, base.grads, base.table.total);
    check(fabs(l5 - l0) < 1e-6 && d < 1e-6, "LM head in chunks of 5: loss %.9f vs %.9f, grad rel diff %.2e", l5, l0, d);
    llm4d_gpt_destroy(&chunked);

    /* padding to 256 instead of 128: same loss; same gradients on every real element */
    llm4d_gpt pad = make(ref, &mem, tiny(256, 0.1f), B, 0);
    double l3 = loss_and_grad(&pad, 1, B);
    double worst = 0;
    for (int i = 0; i < base.table.n; i++) {
        const llm4d_param *p = &base.table.p[i], *q = &pad.table.p[i];
        size_t n_real = (size_t)p->rows_real * (p->ndim == 2 ? (size_t)p->shape[1] : 1);
        double r = rel_diff(pad.grads + q->offset, base.grads + p->offset, n_real);
        if (r > worst) worst = r;
        if (p->kind == LLM4D_P_WTE) {
            double pad_abs = 0;
            for (size_t j = n_real; j < q->numel; j++) pad_abs += fabsf(pad.grads[q->offset + j]);
            check(pad_abs == 0.0, "padding rows of wte get no gradient (sum |g| = %g)", pad_abs);
        }
    }
    check(fabs(l3 - l0) < 1e-6 && worst < 1e-6, "vocab padded to 256 vs 128: loss %.9f vs %.9f, grad rel diff %.2e",
          l3, l0, worst);

    /* fast backend against the reference */
    llm4d_gpt fast = make(cpu, &mem, tiny(128, 0.1f), B, 0);
    double l4 = loss_and_grad(&fast, 1, B);
    d = rel_diff(fast.grads, base.grads, base.table.total);
    check(fabs(l4 - l0) < 1e-5 && d < 1e-4, "cpu backend vs ref: loss %.9f vs %.9f, grad rel diff %.2e", l4, l0, d);

    llm4d_gpt_destroy(&fast);
    llm4d_gpt_destroy(&pad);
    llm4d_gpt_destroy(&acc);
    llm4d_gpt_destroy(&rc);
    llm4d_gpt_destroy(&base);
    ref->destroy(ref);
    cpu->destroy(cpu);
    return check_summary();
}
