/* embed.c — the vocabulary-parallel token embedding and the tied LM head with its cross-entropy.
 *
 * The token embedding wte [Vp, C] is split by vocabulary rows: tensor-parallel rank r holds rows
 * [r Vp/M, (r+1) Vp/M), and each rank's rows may be cut further into vocabulary blocks (ZeRO-2/3 gather and
 * reduce-scatter one block at a time, so no buffer the size of the embedding exists; params.h).
 *
 * Lookup. Each block adds the rows of the tokens it holds (backend.h embedding_forward: tokens outside give
 * nothing), so the sum over blocks and ranks is wte[tokens]:
 *   e = sum_r sum_blocks wte_block[tokens]      all-reduce over the group (sequence parallel: reduce-scatter to
 *   x0 = dropout(e + wpe)                       this rank's tokens); wpe is replicated and added after the sum.
 * Backward: the gradient of e for all tokens (sequence parallel: all-gathered) goes to each block's rows.
 *
 * Head and loss. logits = ln_f(x) wte^T; each rank computes its vocabulary slice, and no rank ever holds the
 * [tokens, V] logits: the tokens go through in chunks of head_rows, and for each chunk
 *   per part (a block or the rank's rows):  m = max_j logit, s = sum_j exp(logit - m), y = the target's logit
 *   over blocks: an online softmax (backend.h xent_forward with merge)
 *   over ranks:  M = all-reduce MAX of m; s *= exp(m - M); all-reduce SUM of (s, y)
 *   loss = M + log s - y;  d logits = (exp(logit - loss - y ...) = softmax - onehot) * weight
 * so per chunk the group exchanges 3 floats per token. A training forward turns each chunk of logits into its
 * gradient and runs the head's backward at once: d(ln_f out) += dlogits wte_block (partial over the vocabulary:
 * summed over the group, or reduce-scattered with sequence parallelism) and d(wte_block) += dlogits^T ln_f(x).
 * With one block per rank that is a single pass over the vocabulary. With several blocks the gradient of a block
 * needs the statistics of all of them, so the head makes two passes: statistics, then gradients (the logits are
 * computed twice: the price of holding one block at a time).
 *
 * Types (gpt.h): the lookup's sum, the positions added to it and the gradient of both are fp32 (the dropout rounds
 * the sum into the residual stream's type once, whatever the layout); ln_f's output and each chunk of logits and of
 * their gradient are the activations' type (the cross-entropy reads 16-bit logits and writes the 16-bit gradient
 * the head's backward GEMM reads); the statistics, the losses and d(ln_f output) are fp32.
 *
 * Communication per micro-batch, group of M, N tokens: lookup one all-reduce (or reduce-scatter) of N x C; head
 * 2 all-reduces of N floats + 1 of 2N (statistics) and one all-reduce (or reduce-scatter) of N x C (d ln_f);
 * backward of the lookup (sequence parallel) one all-gather of N x C. */
#include <math.h>

#include "model/gpt.h"

#include "core/rng.h"

/* The model's embedding groups and the vocabulary rows of each; the LM head's (the same when it is tied). */
static int wte_group(const llm4d_gpt *g, int k) { return g->table.wte_first + k; }
static int head_group(const llm4d_gpt *g, int k) { return g->table.head_first + k; }

void llm4d_gpt_embed_forward(llm4d_gpt *g, llm4d_tensor out, const llm4d_micro *mb) {
    llm4d_backend *be = g->be;
    const int N = mb->B * mb->T, Nl = g->tp.sp ? N / g->tp.size : N, C = g->C;
    /* all tokens: [N, C], fp32; in the slot itself when it is fp32 and holds them all */
    float *e = !g->tp.sp && out.t == LLM4D_F32 ? (float *)out.p : (float *)g->full;
    be->zero(be, e, (size_t)N * C * sizeof(float));
    for (int k = 0; k < g->table.wte_groups; k++) {
        const int grp = wte_group(g, k);
        const llm4d_group *gr = &g->table.g[grp];
        be->embedding_forward(be, e, mb->tokens, llm4d_gpt_params_of(g, grp, 0), (int)gr->row0, (int)gr->nrows, N,
                              C);
        llm4d_gpt_release(g, grp, 0);
    }
    float *mine = e; /* this rank's tokens, [Nl, C] */
    if (g->tp.sp) {
        mine = out.t == LLM4D_F32 ? (float *)out.p : (float *)g->dlocal;
        llm4d_tp_reduce_scatter(&g->tp, e, mine, (size_t)Nl * C);
    } else {
        llm4d_tp_allreduce(&g->tp, e, (size_t)N * C);
    }
    if (g->wpe_group >= 0) { /* learned positions (rotary ones turn Q and K in each block) */
        be->position_forward(be, mine, llm4d_gpt_params_of(g, g->wpe_group, 0), Nl, C, mb->T, g->tok0);
        llm4d_gpt_release(g, g->wpe_group, 0);
    }
    const llm4d_dropout d = llm4d_gpt_dropout(g, g->cfg.hidden_dropout_prob, -1, LLM4D_DROP_EMBED, mb);
    be->dropout_forward(be, out, llm4d_ct32(mine), Nl, C, &d);
}

void llm4d_gpt_embed_backward(llm4d_gpt *g, llm4d_ctensor dout, const llm4d_micro *mb) {
    llm4d_backend *be = g->be;
    const int N = mb->B * mb->T, Nl = g->tp.sp ? N / g->tp.size : N, C = g->C;
    const llm4d_dropout d = llm4d_gpt_dropout(g, g->cfg.hidden_dropout_prob, -1, LLM4D_DROP_EMBED, mb);
    /* [Nl, C] fp32: the residual stream's gradient buffer when that is fp32 (as ever), else the local scratch */
    float *de = g->dres2.t == LLM4D_F32 ? (float *)g->dres2.p : (float *)g->dlocal;
    be->zero(be, de, (size_t)Nl * C * sizeof(float));
    be->dropout_backward(be, llm4d_t32(de), dout, Nl, C, &d);
    if (g->wpe_group >= 0) {
        be->position_backward(be, llm4d_gpt_grads_of(g, g->wpe_group), de, Nl, C, mb->T, g->tok0);
        llm4d_gpt_grads_done(g, g->wpe_group);
    }
    const float *dall = de;
    if (g->tp.sp) {
        llm4d_tp_allgather(&g->tp, llm4d_ct32(de), llm4d_t32(g->full), (size_t)Nl * C);
        dall = g->full;
    }
    for (int k = 0; k < g->table.wte_groups; k++) {
        const int grp = wte_group(g, k);
        const llm4d_group *gr = &g->table.g[grp];
        be->embedding_backward(be, llm4d_gpt_grads_of(g, grp), dall, mb->tokens, (int)gr->row0, (int)gr->nrows, N,
                               C);
        llm4d_gpt_grads_done(g, grp);
    }
}

/* Rows [r0, r0 + n) of the micro-batch: chunk ci of the head. */
static float *chunk_stats(const llm4d_gpt *g, int ci) { return g->xstats + (size_t)ci * 3 * g->head_rows; }

/* The group's statistics of a chunk from each rank's: MAX of the maxima, rescale, SUM of the sums and targets. */
static void combine(llm4d_gpt *g, float *st, int n) {
    if (g->tp.size == 1) return;
    llm4d_backend *be = g->be;
    be->copy(be, g->xmax, st, (size_t)n * sizeof(float));
    llm4d_tp_allreduce_max(&g->tp, g->xmax, (size_t)n);
    be->xent_rescale(be, st, g->xmax, n);
    llm4d_tp_allreduce(&g->tp, st + n, 2 * (size_t)n);
}

/* ln_f on this rank's tokens, then (sequence parallel) gathered: g->lnf [N, C] is what the head reads. */
static void final_ln(llm4d_gpt *g, llm4d_slot *s, llm4d_ctensor x, int N, int Nl) {
    llm4d_backend *be = g->be;
    const int C = g->C;
    float *fin = llm4d_gpt_params_of(g, g->lnf_group, 0);
    const llm4d_tensor out = g->tp.sp ? llm4d_t(g->dlocal, g->lnf.t) : g->lnf;
    if (g->cfg.rmsnorm) be->rmsnorm_forward(be, out, s->lnf_rstd, x, fin, g->tp.sp ? Nl : N, C, g->cfg.norm_epsilon);
    else be->layernorm_forward(be, out, s->lnf_mean, s->lnf_rstd, x, fin, fin + C, g->tp.sp ? Nl : N, C);
    llm4d_gpt_release(g, g->lnf_group, 0);
    if (g->tp.sp) llm4d_tp_allgather(&g->tp, llm4d_cv(out), g->lnf, (size_t)Nl * C);
}

void llm4d_gpt_head_forward(llm4d_gpt *g, llm4d_slot *s, llm4d_ctensor x, const llm4d_micro *mb) {
    llm4d_backend *be = g->be;
    const int N = mb->B * mb->T, Nl = g->tp.sp ? N / g->tp.size : N, C = g->C, V = g->cfg.vocab_size;
    const int K = g->table.head_groups, grad = mb->grad, nch = (N + g->head_rows - 1) / g->head_rows;
    final_ln(g, s, x, N, Nl);
    /* d(ln_f out), partial over the vocabulary: straight into the slot unless sequence parallel reduce-scatters */
    float *dlnf = g->tp.sp ? g->dlnf_full : s->dlnf;
    if (grad) be->zero(be, dlnf, (size_t)N * C * sizeof(float));
    for (int pass = 0; pass < (K == 1 || !grad ? 1 : 2); pass++)
        for (int k = 0; k < K; k++) {
            const int grp = head_group(g, k), rows = (int)g->table.g[grp].nrows, v0 = (int)g->table.g[grp].row0;
            const float *w = llm4d_gpt_params_of(g, grp, 0);
            /* one pass (one block): statistics and gradients chunk by chunk; two passes: statistics, then
             * gradients with the statistics of every block */
            const int stats = pass == 0, grads = grad && (K == 1 || pass == 1);
            float *dw = grads ? llm4d_gpt_grads_of(g, grp) : NULL;
            for (int ci = 0; ci < nch; ci++) {
                const int r0 = ci * g->head_rows, n = N - r0 < g->head_rows ? N - r0 : g->head_rows;
                float *st = chunk_stats(g, ci);
                const llm4d_ctensor xin = llm4d_ct_at(llm4d_cv(g->lnf), (size_t)r0 * C), head = llm4d_cv(g->head);
                be->linear_forward(be, g->head, xin, w, NULL, n, C, rows);
                if (stats) be->xent_forward(be, st, head, mb->targets + r0, n, rows, v0, V, k > 0);
                if (stats && K == 1) combine(g, st, n);
                if (!grads) continue;
                be->xent_backward(be, NULL, g->head, head, st, mb->targets + r0, mb->weight ? mb->weight + r0 : NULL, n,
                                  rows, v0, V);
                be->linear_backward(be, llm4d_t32(dlnf + (size_t)r0 * C), LLM4D_ADD, dw, NULL, head, xin, w, n, C,
                                    rows);
            }
            llm4d_gpt_release(g, grp, 0);
            if (grads) llm4d_gpt_grads_done(g, grp);
            if (stats && K > 1 && k == K - 1)
                for (int ci = 0; ci < nch; ci++) {
                    const int n = N - ci * g->head_rows < g->head_rows ? N - ci * g->head_rows : g->head_rows;
                    combine(g, chunk_stats(g, ci), n);
                }
        }
    for (int ci = 0; ci < nch; ci++) { /* losses from the combined statistics */
        const int r0 = ci * g->head_rows, n = N - r0 < g->head_rows ? N - r0 : g->head_rows;
        be->xent_backward(be, g->losses + r0, llm4d_t(NULL, g->act), llm4d_ct(NULL, g->act), chunk_stats(g, ci),
                          mb->targets + r0, NULL, n, 0, 0, V);
    }
    if (grad) {
        if (g->tp.sp)
            llm4d_tp_reduce_scatter(&g->tp, dlnf, s->dlnf, (size_t)Nl * C);
        else
            llm4d_tp_allreduce(&g->tp, dlnf, (size_t)N * C);
    }
    be->dot_acc(be, g->loss_acc, g->losses, mb->weight, (size_t)N);
}

void llm4d_gpt_head_backward(llm4d_gpt *g, llm4d_slot *s, llm4d_ctensor x) {
    llm4d_backend *be = g->be;
    const int C = g->C, Nl = g->BTl;
    float *fin = llm4d_gpt_params_of(g, g->lnf_group, 1), *dfin = llm4d_gpt_grads_of(g, g->lnf_group);
    be->zero(be, g->dres.p, (size_t)Nl * C * llm4d_ftype_size(g->dres.t));
    if (g->cfg.rmsnorm) be->rmsnorm_backward(be, g->dres, dfin, llm4d_ct32(s->dlnf), x, fin, s->lnf_rstd, Nl, C);
    else be->layernorm_backward(be, g->dres, dfin, dfin + C, llm4d_ct32(s->dlnf), x, fin, s->lnf_mean, s->lnf_rstd, Nl,
                                C);
    llm4d_gpt_grads_done(g, g->lnf_group);
    llm4d_gpt_release(g, g->lnf_group, 1);
}

void llm4d_gpt_head_logits(llm4d_gpt *g, llm4d_slot *s, llm4d_ctensor x, int B, int T) {
    llm4d_backend *be = g->be;
    const int N = B * T, Nl = g->tp.sp ? N / g->tp.size : N, C = g->C;
    final_ln(g, s, x, N, Nl);
    if (!g->logits) {
        g->logits = be->alloc(be, g->mem, LLM4D_MEM_WORKSPACE, (size_t)g->B * g->T * g->Vl * sizeof(float));
        LLM4D_ASSERT(g->logits, "out of memory for the %d x %d logits", g->B * g->T, g->Vl);
    }
    int col = 0;
    for (int k = 0; k < g->table.head_groups; k++) { /* block k's columns of every row */
        const int grp = head_group(g, k), rows = (int)g->table.g[grp].nrows;
        const float *w = llm4d_gpt_params_of(g, grp, 0);
        for (int r0 = 0; r0 < N; r0 += g->head_rows) {
            const int n = N - r0 < g->head_rows ? N - r0 : g->head_rows;
            be->linear_forward(be, g->head, llm4d_ct_at(llm4d_cv(g->lnf), (size_t)r0 * C), w, NULL, n, C, rows);
            for (int i = 0; i < n; i++) /* the logits the loss would read, as fp32 */
                be->convert(be, llm4d_t32(g->logits + (size_t)(r0 + i) * g->Vl + col),
                            llm4d_ct_at(llm4d_cv(g->head), (size_t)i * rows), (size_t)rows);
        }
        llm4d_gpt_release(g, grp, 0);
        col += rows;
    }
}
