/* block.c — one transformer block, forward and backward, split over the tensor-parallel group (Megatron style).
 *
 * The block (pre-LayerNorm GPT-2), with B*T = N tokens, hidden C, heads NH, MLP width F, and M tensor-parallel
 * ranks, rank r holding heads [r NH/M, (r+1) NH/M) and MLP features [r F/M, (r+1) F/M):
 *
 *   h   = LN1(x)                                   replicated (or, sequence-parallel, on this rank's N/M tokens)
 *   qkv = f(h) Wqkv_r^T + bqkv_r                   column-parallel: this rank's heads          [N, 3C/M]
 *   y   = attention(qkv)                           per head, no communication                 [N, C/M]
 *   a   = g(y Wo_r^T) + bo                         row-parallel: Wo_r = columns of Wo         [N, C]
 *   x2  = x + dropout(a)
 *   u   = f(LN2(x2)) Wfc_r^T + bfc_r               column-parallel                            [N, F/M]
 *   m   = g(gelu(u) Wp_r^T) + bp                   row-parallel
 *   out = x2 + dropout(m)
 *
 * The model's description (config/model_desc.c) changes the pieces, not the structure: LN may be RMSNorm (no mean,
 * no bias); with rotary positions Q and K of every head are turned in place after the qkv product (dqkv turned back
 * after the attention's backward); with grouped-query attention qkv holds NH/M query heads and NKV/M key/value heads
 * (QKVl wide); with SwiGLU u is [N, 2F/M] (gate, then up) and c_proj reads silu(gate) * up, made again in backward
 * as GELU's output is; without biases every b is absent. No communication changes.
 *
 * Types (gpt.h): h, qkv, y, u and the input gradients of the linear layers are the activations' type; x, x2 and
 * their gradients the residual stream's; g(...) of a row-parallel layer is fp32 until the residual connection
 * rounds x2 or out, and the gradient of a LayerNorm output is fp32 until LayerNorm's backward reads it.
 *
 * f and g are the conjugate operators (tp.h): without sequence parallelism f is the identity forward and an
 * all-reduce of the input gradient backward, g an all-reduce of the partial sums forward and the identity backward;
 * with it, f all-gathers the tokens (forward) / reduce-scatters the gradient (backward), g reduce-scatters
 * (forward) / all-gathers (backward), and x, x2, the LayerNorms and the dropouts hold only N/M tokens.
 *
 * Communication per block per micro-batch, tensor-parallel group of M, payload N x C floats each:
 *   without sequence parallelism: 2 all-reduces forward (a, m) + 2 backward (dh, dLN2) = 4 all-reduces;
 *   with it: forward 2 all-gathers (h, LN2) + 2 reduce-scatters (a, m), backward 2 all-gathers (da, dm) +
 *   2 reduce-scatters (dh, dLN2) = 4 all-gathers + 4 reduce-scatters, the same bytes (an all-reduce is one of
 *   each). As Megatron-LM does (Korthikanti et al. 2022, section 4.2.2), a block keeps only this rank's N/M tokens
 *   of each LayerNorm output and backward gathers them again for the weight gradients of c_attn and c_fc: 2
 *   all-gathers more per block (4 with a split backward, whose weight pass gathers them a second time), for
 *   every activation of a block divided by M (24 s b h / M bytes in 16 bits and the statistics, docs/design.md;
 *   Megatron's 34 s b h / M), where keeping the gathered outputs would hold 4 s b h more.
 * Recompute adds one forward's worth (2 + 2) per block; the one block it refills keeps the gathered outputs, so
 * its backward gathers nothing again.
 *
 * The row-parallel biases are added once, after the reduction; their gradient is the column sum of the output
 * gradient, complete on every rank without sequence parallelism, partial (this rank's tokens) with it, as are the
 * LayerNorms': those are the entries marked tp_partial, summed over the group after backward
 * (parallel/tensor_parallel.c). Dropout positions are global (sample, token, feature) and attention-dropout
 * positions carry the global head, so every M draws the single-process masks.
 *
 * A split backward (zero-bubble pipelines) computes only input gradients in llm4d_gpt_block_backward, keeping the
 * four linear layers' output gradients and the LayerNorms' weight gradients (llm4d_block_wgrad); the weight
 * gradients of the linear layers and every gradient hand-off to the engines happen in
 * llm4d_gpt_block_backward_weight. */
#include "model/gpt.h"

#include "core/rng.h"

typedef struct {
    const float *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
} block_weights;

/* A parameter of the block group at p (weights or gradients), NULL when the block has none of that kind (no biases
 * in a Llama block, no LayerNorm bias with RMSNorm) or p is NULL (a split backward's input pass). */
static float *at(const llm4d_gpt *g, float *p, llm4d_param_kind k) {
    return p && g->has[k] ? llm4d_gpt_at(g, p, k) : NULL;
}

static block_weights weights(const llm4d_gpt *g, float *p) {
    return (block_weights){at(g, p, LLM4D_P_LN1W),     at(g, p, LLM4D_P_LN1B), at(g, p, LLM4D_P_QKVW),
                           at(g, p, LLM4D_P_QKVB),     at(g, p, LLM4D_P_ATTPROJW), at(g, p, LLM4D_P_ATTPROJB),
                           at(g, p, LLM4D_P_LN2W),     at(g, p, LLM4D_P_LN2B), at(g, p, LLM4D_P_FCW),
                           at(g, p, LLM4D_P_FCB),      at(g, p, LLM4D_P_FCPROJW), at(g, p, LLM4D_P_FCPROJB)};
}

/* The model's normalisation (LayerNorm, or RMSNorm: no mean, no bias) of N rows into out. */
static void norm_forward(llm4d_gpt *g, llm4d_tensor out, float *mean, float *rstd, llm4d_ctensor x, const float *w,
                         const float *b, int N) {
    llm4d_backend *be = g->be;
    if (g->cfg.rmsnorm) be->rmsnorm_forward(be, out, rstd, x, w, N, g->C, g->cfg.norm_epsilon);
    else be->layernorm_forward(be, out, mean, rstd, x, w, b, N, g->C);
}

/* A normalisation as its backward reads it: the input, the weight, forward's statistics (mean: LayerNorm's only)
 * and where the weight and bias gradients are added (db: LayerNorm's only). */
typedef struct {
    llm4d_ctensor x;
    const float *w, *mean, *rstd;
    float *dw, *db;
} norm_back;

/* Its backward: dinp and the weight (and bias) gradients added to. */
static void norm_backward(llm4d_gpt *g, llm4d_tensor dinp, llm4d_ctensor dout, const norm_back *n, int N) {
    llm4d_backend *be = g->be;
    if (g->cfg.rmsnorm) be->rmsnorm_backward(be, dinp, n->dw, dout, n->x, n->w, n->rstd, N, g->C);
    else be->layernorm_backward(be, dinp, n->dw, n->db, dout, n->x, n->w, n->mean, n->rstd, N, g->C);
}

/* Rotary positions of the rank's Q and K heads, the first NHl + NKVl heads of each qkv row (all N tokens of the
 * micro-batch: the attention's input is never split by sequence parallelism). */
static llm4d_rope_shape rope_shape(const llm4d_gpt *g, const llm4d_micro *mb) {
    const int HS = g->C / g->NH;
    return (llm4d_rope_shape){.N = mb->B * mb->T, .NH = g->NHl + g->NKVl, .HS = HS, .ld = g->QKVl, .T = mb->T,
                              .tok0 = 0, .theta = g->cfg.rope_theta};
}

/* The three dropouts of block l: attention probabilities, and the outputs of the attention and MLP sublayers.
 * Forward and backward build the same three, so backward recomputes exactly the masks forward drew. */
typedef struct {
    llm4d_dropout attn, out1, out2;
} block_dropouts;

/* The block's three dropouts; the attention's keeps its mask in the block's activations (a->attn_bits), which
 * forward writes and backward reads. */
static block_dropouts dropouts(const llm4d_gpt *g, int l, const llm4d_micro *mb, const llm4d_block_acts *a) {
    block_dropouts d = {llm4d_gpt_dropout(g, g->cfg.attention_probs_dropout_prob, l, LLM4D_DROP_ATTN_PROBS, mb),
                        llm4d_gpt_dropout(g, g->cfg.hidden_dropout_prob, l, LLM4D_DROP_ATTN_OUT, mb),
                        llm4d_gpt_dropout(g, g->cfg.hidden_dropout_prob, l, LLM4D_DROP_MLP_OUT, mb)};
    d.attn.bits = a->attn_bits;
    return d;
}

static llm4d_attn_shape attn_shape(const llm4d_gpt *g, const llm4d_micro *mb) {
    return (llm4d_attn_shape){.B = mb->B, .T = mb->T, .NH = g->NHl, .HS = g->C / g->NH,
                              .head0 = g->tp.rank * g->NHl, .NH_total = g->NH, .NKV = g->NKVl};
}

static const llm4d_tensor none = {NULL, LLM4D_F32};

/* The tokens of a micro-batch a layer works on: all N of them, and the Nl this rank holds in the LayerNorm and
 * dropout regions (N / M with sequence parallelism, else N). */
typedef struct {
    int N, Nl;
} token_rows;

/* A linear layer as its backward sees it: its weight, where its weight and bias gradients go (NULL: not now; a split
 * backward's weight pass computes them), and where its output gradient is kept for that pass (none: not kept). */
typedef struct {
    const float *w;
    float *dw, *db;
    llm4d_tensor keep;
} linear_back;

/* LayerNorm of this rank's Nl tokens into the kept output `out`, then f: returns the normalised tokens of the whole
 * micro-batch [N, C] (the activations' type: a 16-bit gather moves half the bytes and rounds nothing). out holds
 * N tokens, or Nl when the block keeps only its own (llm4d_gpt_ln_local); then the gather lands in g->full. */
static llm4d_ctensor ln_gather(llm4d_gpt *g, llm4d_tensor out, float *mean, float *rstd, llm4d_ctensor x,
                               const float *w, const float *b, token_rows rows) {
    const int N = rows.N, Nl = rows.Nl;
    const int C = g->C;
    if (!g->tp.sp) {
        norm_forward(g, out, mean, rstd, x, w, b, N);
        return llm4d_cv(out);
    }
    const int own = llm4d_gpt_ln_local(g);
    const llm4d_tensor local = own ? out : llm4d_t(g->dlocal, out.t);
    const llm4d_tensor all = own ? llm4d_t(g->full, out.t) : out;
    norm_forward(g, local, mean, rstd, x, w, b, Nl);
    llm4d_tp_allgather(&g->tp, llm4d_cv(local), all, (size_t)Nl * C);
    return llm4d_cv(all);
}

/* A kept LayerNorm output as a weight gradient reads it, all N tokens: itself, or gathered again into g->full when
 * the block keeps only this rank's tokens. */
static llm4d_ctensor ln_all(llm4d_gpt *g, llm4d_tensor kept, int Nl) {
    if (!llm4d_gpt_ln_local(g)) return llm4d_cv(kept);
    const llm4d_tensor all = llm4d_t(g->full, kept.t);
    llm4d_tp_allgather(&g->tp, llm4d_cv(kept), all, (size_t)Nl * g->C);
    return llm4d_cv(all);
}

/* Row-parallel linear + g: out = (act(inp)[N, K] W[C, K]^T reduced over the group) + b, on this rank's Nl tokens,
 * in fp32 (the partial sums are reduced before anything rounds them; the residual connection after it does).
 * Returns where it is ([Nl, C]): g->full or g->dlocal. */
static const float *row_parallel(llm4d_gpt *g, llm4d_ctensor inp, llm4d_act act, const float *w, const float *b,
                                 int N, int Nl, int K) {
    llm4d_backend *be = g->be;
    const int C = g->C;
    float *full = g->full;
    if (g->tp.size == 1) {
        be->linear_forward_act(be, llm4d_t32(full), inp, act, w, b, N, K, C);
        return full;
    }
    be->linear_forward_act(be, llm4d_t32(full), inp, act, w, NULL, N, K, C);
    float *out = full;
    if (g->tp.sp) {
        llm4d_tp_reduce_scatter(&g->tp, full, g->dlocal, (size_t)Nl * C);
        out = g->dlocal;
    } else {
        llm4d_tp_allreduce(&g->tp, full, (size_t)N * C);
    }
    if (b) be->bias_forward(be, out, b, Nl, C);
    return out;
}

void llm4d_gpt_block_forward(llm4d_gpt *g, llm4d_block_acts *a, llm4d_ctensor x, llm4d_tensor out, int l,
                             const llm4d_micro *mb) {
    llm4d_backend *be = g->be;
    const int N = mb->B * mb->T, Nl = g->tp.sp ? N / g->tp.size : N, C = g->C;
    const int grp = g->group_of_layer[l];
    const block_weights w = weights(g, llm4d_gpt_params_of(g, grp, 0));
    const block_dropouts d = dropouts(g, l, mb, a);

    const llm4d_ctensor h = ln_gather(g, a->ln1, a->ln1_mean, a->ln1_rstd, x, w.ln1w, w.ln1b, (token_rows){N, Nl});
    be->linear_forward(be, a->qkv, h, w.qkvw, w.qkvb, N, C, g->QKVl);
    if (g->cfg.rope) be->rope_forward(be, a->qkv, llm4d_cv(a->qkv), rope_shape(g, mb));
    be->attention_forward(be, a->atty, a->lse, llm4d_cv(a->qkv), attn_shape(g, mb), &d.attn);
    const float *att = row_parallel(g, llm4d_cv(a->atty), LLM4D_ACT_NONE, w.attprojw, w.attprojb, N, Nl, g->Cl);
    be->dropout_add_forward(be, a->res2, x, llm4d_ct32(att), Nl, C, &d.out1);

    const llm4d_ctensor h2 =
        ln_gather(g, a->ln2, a->ln2_mean, a->ln2_rstd, llm4d_cv(a->res2), w.ln2w, w.ln2b, (token_rows){N, Nl});
    be->linear_forward(be, a->fch, h2, w.fcw, w.fcb, N, C, g->FCl);
    /* GELU is applied as c_proj reads its input (backend.h linear_forward_act): its output is never stored;
     * SwiGLU's output goes through a scratch buffer, made again in backward */
    const float *mlp;
    if (g->cfg.swiglu) {
        be->swiglu_forward(be, g->swi, llm4d_cv(a->fch), N, g->Fl);
        mlp = row_parallel(g, llm4d_cv(g->swi), LLM4D_ACT_NONE, w.fcprojw, w.fcprojb, N, Nl, g->Fl);
    } else {
        mlp = row_parallel(g, llm4d_cv(a->fch), LLM4D_ACT_GELU, w.fcprojw, w.fcprojb, N, Nl, g->Fl);
    }
    be->dropout_add_forward(be, out, llm4d_cv(a->res2), llm4d_ct32(mlp), Nl, C, &d.out2);
    llm4d_gpt_release(g, grp, 0);
}

/* Backward of row-parallel + g: dloc [Nl, C] is the gradient of this rank's tokens of the output. Writes the input
 * gradient (with respect to act(inp)) to dinp [N, K] and adds (unless split) the weight and bias gradients; with
 * split, keeps the output gradient of all tokens in L->keep [N, C]. */
static void row_parallel_backward(llm4d_gpt *g, llm4d_tensor dinp, const linear_back *L, llm4d_ctensor dloc,
                                  llm4d_ctensor inp, llm4d_act act, token_rows rows, int K) {
    llm4d_backend *be = g->be;
    const int N = rows.N, Nl = rows.Nl;
    const float *w = L->w;
    float *dw = L->dw, *db = L->db;
    const llm4d_tensor keep = L->keep;
    const int C = g->C;
    llm4d_ctensor dfull = dloc;
    if (g->tp.sp) {
        const llm4d_tensor full = llm4d_t(g->full, dloc.t);
        llm4d_tp_allgather(&g->tp, dloc, full, (size_t)Nl * C);
        dfull = llm4d_cv(full);
    }
    if (keep.p) be->copy(be, keep.p, dfull.p, (size_t)N * C * llm4d_ftype_size(dfull.t));
    if (g->tp.size == 1) {
        be->linear_backward_act(be, dinp, LLM4D_WRITE, dw, db, dfull, inp, act, w, N, K, C);
        return;
    }
    if (db) be->bias_backward(be, db, dloc, Nl, C);
    be->linear_backward_act(be, dinp, LLM4D_WRITE, dw, NULL, dfull, inp, act, w, N, K, C);
}

/* Backward of f + column-parallel linear: dout [N, OC] is the gradient of this rank's output features. Adds the
 * weight and bias gradients (unless split: L->keep [N, OC] gets dout) and returns the gradient of the LayerNorm
 * output for this rank's Nl tokens, reduced over the group, in fp32 (LayerNorm's backward reads the sum unrounded,
 * whatever the group's size). */
static const float *column_parallel_backward(llm4d_gpt *g, const linear_back *L, llm4d_ctensor dout,
                                             llm4d_ctensor inp, token_rows rows, int OC) {
    llm4d_backend *be = g->be;
    const int N = rows.N, Nl = rows.Nl;
    const float *w = L->w;
    float *dw = L->dw, *db = L->db;
    const llm4d_tensor keep = L->keep;
    const int C = g->C;
    if (keep.p) be->copy(be, keep.p, dout.p, (size_t)N * OC * llm4d_ftype_size(dout.t));
    be->linear_backward(be, llm4d_t32(g->dln), LLM4D_WRITE, dw, db, dout, inp, w, N, C, OC);
    if (g->tp.sp) {
        llm4d_tp_reduce_scatter(&g->tp, g->dln, g->dlocal, (size_t)Nl * C);
        return g->dlocal;
    }
    llm4d_tp_allreduce(&g->tp, g->dln, (size_t)N * C);
    return g->dln;
}

void llm4d_gpt_block_backward(llm4d_gpt *g, llm4d_block_acts *a, llm4d_ctensor x, llm4d_block_wgrad *wg, int l,
                              const llm4d_micro *mb) {
    llm4d_backend *be = g->be;
    const int N = mb->B * mb->T, Nl = g->tp.sp ? N / g->tp.size : N, C = g->C, Fl = g->Fl, Cl = g->Cl;
    const size_t NF = (size_t)N * Fl;
    const int grp = g->group_of_layer[l];
    const block_weights w = weights(g, llm4d_gpt_params_of(g, grp, 1));
    /* split: no parameter gradient now (they go to the engines in one window, in the weight pass), the LayerNorms'
     * into the slot's small stash */
    float *dp = wg ? NULL : llm4d_gpt_grads_of(g, grp);
    const int lnb = g->has[LLM4D_P_LN1B];
    float *dln1w = wg ? wg->dln[0] : at(g, dp, LLM4D_P_LN1W);
    float *dln1b = wg ? (lnb ? wg->dln[1] : NULL) : at(g, dp, LLM4D_P_LN1B);
    float *dln2w = wg ? wg->dln[2] : at(g, dp, LLM4D_P_LN2W);
    float *dln2b = wg ? (lnb ? wg->dln[3] : NULL) : at(g, dp, LLM4D_P_LN2B);
    if (wg) be->zero(be, wg->dln[0], 4 * (size_t)C * sizeof(float));
#define DW(kind) at(g, dp, kind)
    const block_dropouts d = dropouts(g, l, mb, a);

    /* g->dres holds d(out). MLP sublayer: out = x2 + dropout(m) */
    be->dropout_add_backward(be, g->dres2, g->dproj, llm4d_cv(g->dres), Nl, C, &d.out2);
    /* c_proj's input is GELU(fch), applied again as its weight gradient reads it (never stored: it is the widest
     * activation of a block, N x F/M); SwiGLU's is made again into its scratch */
    const token_rows rows = {N, Nl};
    const linear_back fcproj = {w.fcprojw, DW(LLM4D_P_FCPROJW), DW(LLM4D_P_FCPROJB), wg ? wg->dmlp : none};
    if (g->cfg.swiglu) {
        be->swiglu_forward(be, g->swi, llm4d_cv(a->fch), N, Fl);
        row_parallel_backward(g, g->dfch_gelu, &fcproj, llm4d_cv(g->dproj), llm4d_cv(g->swi), LLM4D_ACT_NONE, rows,
                              Fl);
        be->swiglu_backward(be, g->dfch, llm4d_cv(a->fch), llm4d_cv(g->dfch_gelu), N, Fl);
    } else {
        row_parallel_backward(g, g->dfch_gelu, &fcproj, llm4d_cv(g->dproj), llm4d_cv(a->fch), LLM4D_ACT_GELU, rows,
                              Fl);
        be->gelu_backward(be, g->dfch, llm4d_cv(a->fch), llm4d_cv(g->dfch_gelu), NF);
    }
    const linear_back fc = {w.fcw, DW(LLM4D_P_FCW), DW(LLM4D_P_FCB), wg ? wg->dfch : none};
    /* g->full is free again: row_parallel_backward is done with it */
    const float *dln2 = column_parallel_backward(g, &fc, llm4d_cv(g->dfch), ln_all(g, a->ln2, Nl), rows, g->FCl);
    const norm_back ln2 = {llm4d_cv(a->res2), w.ln2w, a->ln2_mean, a->ln2_rstd, dln2w, dln2b};
    norm_backward(g, g->dres2, llm4d_ct32(dln2), &ln2, Nl);

    /* attention sublayer: x2 = x + dropout(a); d(x) goes to g->dres */
    be->dropout_add_backward(be, g->dres, g->dproj, llm4d_cv(g->dres2), Nl, C, &d.out1);
    const linear_back attproj = {w.attprojw, DW(LLM4D_P_ATTPROJW), DW(LLM4D_P_ATTPROJB), wg ? wg->dattn : none};
    row_parallel_backward(g, g->datty, &attproj, llm4d_cv(g->dproj), llm4d_cv(a->atty), LLM4D_ACT_NONE, rows, Cl);
    be->attention_backward(be, g->dqkv, llm4d_cv(g->datty), llm4d_cv(a->atty), llm4d_cv(a->qkv), a->lse,
                           attn_shape(g, mb), &d.attn);
    if (g->cfg.rope) be->rope_backward(be, g->dqkv, llm4d_cv(g->dqkv), rope_shape(g, mb));
    const linear_back qkv = {w.qkvw, DW(LLM4D_P_QKVW), DW(LLM4D_P_QKVB), wg ? wg->dqkv : none};
    const float *dln1 = column_parallel_backward(g, &qkv, llm4d_cv(g->dqkv), ln_all(g, a->ln1, Nl), rows, g->QKVl);
    const norm_back ln1 = {x, w.ln1w, a->ln1_mean, a->ln1_rstd, dln1w, dln1b};
    norm_backward(g, g->dres, llm4d_ct32(dln1), &ln1, Nl);
#undef DW
    llm4d_gpt_release(g, grp, 1);
    if (!wg) llm4d_gpt_grads_done(g, grp);
}

void llm4d_gpt_block_backward_weight(llm4d_gpt *g, llm4d_block_acts *a, llm4d_block_wgrad *wg, int l,
                                     const llm4d_micro *mb) {
    llm4d_backend *be = g->be;
    const int N = mb->B * mb->T, Nl = g->tp.sp ? N / g->tp.size : N, C = g->C, Fl = g->Fl, Cl = g->Cl;
    const int grp = g->group_of_layer[l];
    float *dp = llm4d_gpt_grads_of(g, grp);
    /* the row-parallel biases' gradients: this rank's tokens of the kept output gradients */
    const size_t own = (size_t)g->tok0 * C;
    float *dfcprojb = at(g, dp, LLM4D_P_FCPROJB), *dattprojb = at(g, dp, LLM4D_P_ATTPROJB);
    if (g->cfg.swiglu) {
        be->swiglu_forward(be, g->swi, llm4d_cv(a->fch), N, Fl);
        be->linear_backward(be, none, LLM4D_WRITE, at(g, dp, LLM4D_P_FCPROJW), NULL, llm4d_cv(wg->dmlp),
                            llm4d_cv(g->swi), NULL, N, Fl, C);
    } else {
        be->linear_backward_act(be, none, LLM4D_WRITE, at(g, dp, LLM4D_P_FCPROJW), NULL, llm4d_cv(wg->dmlp),
                                llm4d_cv(a->fch), LLM4D_ACT_GELU, NULL, N, Fl, C);
    }
    if (dfcprojb) be->bias_backward(be, dfcprojb, llm4d_ct_at(llm4d_cv(wg->dmlp), own), Nl, C);
    be->linear_backward(be, none, LLM4D_WRITE, at(g, dp, LLM4D_P_FCW), at(g, dp, LLM4D_P_FCB), llm4d_cv(wg->dfch),
                        ln_all(g, a->ln2, Nl), NULL, N, C, g->FCl);
    be->linear_backward(be, none, LLM4D_WRITE, at(g, dp, LLM4D_P_ATTPROJW), NULL, llm4d_cv(wg->dattn),
                        llm4d_cv(a->atty), NULL, N, Cl, C);
    if (dattprojb) be->bias_backward(be, dattprojb, llm4d_ct_at(llm4d_cv(wg->dattn), own), Nl, C);
    be->linear_backward(be, none, LLM4D_WRITE, at(g, dp, LLM4D_P_QKVW), at(g, dp, LLM4D_P_QKVB), llm4d_cv(wg->dqkv),
                        ln_all(g, a->ln1, Nl), NULL, N, C, g->QKVl);
    static const llm4d_param_kind norms[4] = {LLM4D_P_LN1W, LLM4D_P_LN1B, LLM4D_P_LN2W, LLM4D_P_LN2B};
    for (int k = 0; k < 4; k++)
        if (g->has[norms[k]]) be->add(be, at(g, dp, norms[k]), wg->dln[k], (size_t)C);
    llm4d_gpt_grads_done(g, grp);
}
