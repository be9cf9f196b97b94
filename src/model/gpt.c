/* gpt.c — GPT forward and backward composed from the backend's kernels (see gpt.h for the architecture).
 *
 * Memory is laid out once in gpt_create. Without recompute every block keeps its activations (except GELU's output,
 * recomputed from its input in backward: it is the widest of them); with recompute only
 * the residual stream entering each block is kept (res[l]) and one shared set of block activations is refilled
 * by re-running the block's forward right before its backward. Backward kernels accumulate, so every activation
 * gradient buffer is zeroed before the kernels that write it. */
#include "model/gpt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"

/* Tokens per chunk of the LM head + loss: 512 x 50304 logits are 98 MiB (instead of 1.6 GB at B=8 T=1024), and a
 * 512-row GEMM still runs at full speed. */
#define HEAD_ROWS 512

/* Rows of the LM-head chunk buffer for micro-batches of BT tokens. */
static size_t head_rows_for(size_t BT) { return BT < HEAD_ROWS ? BT : HEAD_ROWS; }

/* Pointer to parameter `kind` of `layer` (-1: embeddings / final LayerNorm) inside its group's buffer `base`. */
static float *at(const llm4d_gpt *g, float *base, int layer, llm4d_param_kind kind) {
    const llm4d_param_table *t = &g->table;
    int first = layer < 0 ? 0 : t->layer_first[layer];
    for (int i = first; i < t->n; i++) {
        const llm4d_param *p = &t->p[i];
        if (p->layer != layer || p->kind != kind) continue;
        return base + (p->offset - t->group_lo[llm4d_param_group(p, g->cfg.num_layers)]);
    }
    LLM4D_ASSERT(0, "no parameter of kind %d in layer %d", (int)kind, layer);
    return NULL;
}

static float *params_of(llm4d_gpt *g, int group, int pass) {
    if (g->hooks.params_for) return g->hooks.params_for(g->hooks.ctx, group, pass);
    return g->params + g->table.group_lo[group];
}
static void release(llm4d_gpt *g, int group, int pass) {
    if (g->hooks.release) g->hooks.release(g->hooks.ctx, group, pass);
}
static float *grads_of(llm4d_gpt *g, int group) {
    if (g->hooks.grads_for) return g->hooks.grads_for(g->hooks.ctx, group);
    return g->grads + g->table.group_lo[group];
}
static void grads_done(llm4d_gpt *g, int group) {
    if (g->hooks.grads_done) g->hooks.grads_done(g->hooks.ctx, group);
}

typedef struct {
    const float *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
} block_weights;
typedef struct {
    float *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
} block_grads;

static block_grads block_ptrs(const llm4d_gpt *g, float *b, int l) {
    return (block_grads){at(g, b, l, LLM4D_P_LN1W), at(g, b, l, LLM4D_P_LN1B), at(g, b, l, LLM4D_P_QKVW),
                         at(g, b, l, LLM4D_P_QKVB), at(g, b, l, LLM4D_P_ATTPROJW), at(g, b, l, LLM4D_P_ATTPROJB),
                         at(g, b, l, LLM4D_P_LN2W), at(g, b, l, LLM4D_P_LN2B), at(g, b, l, LLM4D_P_FCW),
                         at(g, b, l, LLM4D_P_FCB), at(g, b, l, LLM4D_P_FCPROJW), at(g, b, l, LLM4D_P_FCPROJB)};
}
static block_weights block_w(const llm4d_gpt *g, float *base, int l) {
    block_grads p = block_ptrs(g, base, l);
    return (block_weights){p.ln1w, p.ln1b, p.qkvw, p.qkvb, p.attprojw, p.attprojb,
                           p.ln2w, p.ln2b, p.fcw, p.fcb, p.fcprojw, p.fcprojb};
}

static llm4d_attn_shape attn_shape(const llm4d_gpt *g, int B, int T) {
    const int NH = g->cfg.num_attention_heads;
    return (llm4d_attn_shape){.B = B, .T = T, .NH = NH, .HS = g->cfg.hidden_size / NH, .head0 = 0, .NH_total = NH};
}

static llm4d_dropout dropout(const llm4d_gpt *g, float p, int layer, int site, uint32_t step,
                             const int64_t *sample_ids, int train, int T) {
    return (llm4d_dropout){.p = train ? p : 0.0f,
                           .seed = g->seed,
                           .stream = llm4d_rng_stream(LLM4D_RNG_DROPOUT, (unsigned)(layer + 1), (unsigned)site, step),
                           .sample_ids = sample_ids,
                           .T = T};
}

/* The dropouts of block l: attention probabilities, and the outputs of the attention and MLP sublayers. Forward
 * and backward build the same three, so backward recomputes exactly the masks forward drew. */
typedef struct {
    llm4d_dropout attn, out1, out2;
} block_dropouts;

static block_dropouts block_drop(const llm4d_gpt *g, int l, uint32_t step, const int64_t *sample_ids, int train,
                                 int T) {
    return (block_dropouts){
        dropout(g, g->cfg.attention_probs_dropout_prob, l, LLM4D_DROP_ATTN_PROBS, step, sample_ids, train, T),
        dropout(g, g->cfg.hidden_dropout_prob, l, LLM4D_DROP_ATTN_OUT, step, sample_ids, train, T),
        dropout(g, g->cfg.hidden_dropout_prob, l, LLM4D_DROP_MLP_OUT, step, sample_ids, train, T)};
}

/* ---- allocation ---- */

static float *alloc_f(llm4d_gpt *g, llm4d_mem_category c, size_t n, int *ok) {
    float *p = g->be->alloc(g->be, g->mem, c, n * sizeof(float));
    if (!p) *ok = 0;
    if (c == LLM4D_MEM_ACTIVATIONS) g->act_bytes += n * sizeof(float);
    return p;
}

static void alloc_block(llm4d_gpt *g, llm4d_block_acts *a, int *ok) {
    const size_t BT = (size_t)g->B * g->T, C = g->cfg.hidden_size, F = g->cfg.ffn_hidden_size;
    const size_t NH = g->cfg.num_attention_heads;
    const llm4d_mem_category A = LLM4D_MEM_ACTIVATIONS;
    a->ln1 = alloc_f(g, A, BT * C, ok);
    a->ln1_mean = alloc_f(g, A, BT, ok);
    a->ln1_rstd = alloc_f(g, A, BT, ok);
    a->qkv = alloc_f(g, A, BT * 3 * C, ok);
    a->atty = alloc_f(g, A, BT * C, ok);
    a->lse = alloc_f(g, A, (size_t)g->B * NH * g->T, ok);
    a->res2 = alloc_f(g, A, BT * C, ok);
    a->ln2 = alloc_f(g, A, BT * C, ok);
    a->ln2_mean = alloc_f(g, A, BT, ok);
    a->ln2_rstd = alloc_f(g, A, BT, ok);
    a->fch = alloc_f(g, A, BT * F, ok);
}

static void free_f(llm4d_gpt *g, llm4d_mem_category c, float *p, size_t n) {
    if (p) g->be->free(g->be, g->mem, c, p, n * sizeof(float));
}

static void free_block(llm4d_gpt *g, llm4d_block_acts *a) {
    const size_t BT = (size_t)g->B * g->T, C = g->cfg.hidden_size, F = g->cfg.ffn_hidden_size;
    const size_t NH = g->cfg.num_attention_heads;
    const llm4d_mem_category A = LLM4D_MEM_ACTIVATIONS;
    free_f(g, A, a->ln1, BT * C);
    free_f(g, A, a->ln1_mean, BT);
    free_f(g, A, a->ln1_rstd, BT);
    free_f(g, A, a->qkv, BT * 3 * C);
    free_f(g, A, a->atty, BT * C);
    free_f(g, A, a->lse, (size_t)g->B * NH * g->T);
    free_f(g, A, a->res2, BT * C);
    free_f(g, A, a->ln2, BT * C);
    free_f(g, A, a->ln2_mean, BT);
    free_f(g, A, a->ln2_rstd, BT);
    free_f(g, A, a->fch, BT * F);
}

static int n_block_acts(const llm4d_gpt *g) { return g->recompute ? 1 : g->cfg.num_layers; }

llm4d_code llm4d_gpt_create(llm4d_gpt *g, const llm4d_model_config *cfg, llm4d_backend *be, llm4d_mem *mem, int B,
                            int T, int recompute, uint64_t seed, llm4d_err *err) {
    const llm4d_gpt_layout plain = {.group_align = 1};
    return llm4d_gpt_create_ex(g, cfg, be, mem, B, T, recompute, seed, &plain, err);
}

llm4d_code llm4d_gpt_create_ex(llm4d_gpt *g, const llm4d_model_config *cfg, llm4d_backend *be, llm4d_mem *mem,
                               int B, int T, int recompute, uint64_t seed, const llm4d_gpt_layout *layout,
                               llm4d_err *err) {
    memset(g, 0, sizeof *g);
    g->cfg = *cfg;
    g->be = be;
    g->mem = mem;
    g->B = B;
    g->T = T;
    g->recompute = recompute;
    g->seed = seed;
    LLM4D_TRY(llm4d_param_table_build_aligned(&g->table, cfg, layout->group_align, err));
    const size_t BT = (size_t)B * T, C = cfg->hidden_size, F = cfg->ffn_hidden_size, L = cfg->num_layers;
    const size_t Vp = cfg->padded_vocab_size;
    int ok = 1;
    if (!layout->no_params) g->params = alloc_f(g, LLM4D_MEM_PARAMS, g->table.total, &ok);
    if (!layout->no_grads) g->grads = alloc_f(g, LLM4D_MEM_GRADS, g->table.total, &ok);
    g->res = calloc(L + 1, sizeof *g->res);
    g->acts = calloc((size_t)n_block_acts(g), sizeof *g->acts);
    if (!g->res || !g->acts) ok = 0;
    if (ok) {
        for (size_t l = 0; l <= L; l++) g->res[l] = alloc_f(g, LLM4D_MEM_ACTIVATIONS, BT * C, &ok);
        for (int l = 0; l < n_block_acts(g); l++) alloc_block(g, &g->acts[l], &ok);
        g->lnf = alloc_f(g, LLM4D_MEM_ACTIVATIONS, BT * C, &ok);
        g->lnf_mean = alloc_f(g, LLM4D_MEM_ACTIVATIONS, BT, &ok);
        g->lnf_rstd = alloc_f(g, LLM4D_MEM_ACTIVATIONS, BT, &ok);
        g->head_rows = (int)head_rows_for(BT);
        g->head = alloc_f(g, LLM4D_MEM_WORKSPACE, (size_t)g->head_rows * Vp, &ok);
        g->xstats = alloc_f(g, LLM4D_MEM_WORKSPACE, 3 * head_rows_for(BT), &ok);
        g->dlnf = alloc_f(g, LLM4D_MEM_ACTIVATIONS, BT * C, &ok);
        g->losses = alloc_f(g, LLM4D_MEM_ACTIVATIONS, BT, &ok);
        const llm4d_mem_category W = LLM4D_MEM_WORKSPACE;
        g->gelu = alloc_f(g, W, BT * F, &ok);
        g->dres = alloc_f(g, W, BT * C, &ok);
        g->dres2 = alloc_f(g, W, BT * C, &ok);
        g->dln = alloc_f(g, W, BT * C, &ok);
        g->dqkv = alloc_f(g, W, BT * 3 * C, &ok);
        g->datty = alloc_f(g, W, BT * C, &ok);
        g->dproj = alloc_f(g, W, BT * C, &ok);
        g->dfch = alloc_f(g, W, BT * F, &ok);
        g->dfch_gelu = alloc_f(g, W, BT * F, &ok);
    }
    if (!ok) {
        llm4d_gpt_destroy(g);
        return llm4d_fail(err, LLM4D_ENOMEM,
                          "out of memory allocating the model for micro batches of %d x %d; lower micro_batch_size "
                          "or max_seq_len, or set use_recompute",
                          B, T);
    }
    if (g->params) llm4d_param_init(&g->table, g->params, seed);
    return LLM4D_OK;
}

void llm4d_gpt_destroy(llm4d_gpt *g) {
    if (!g->be) return;
    const size_t BT = (size_t)g->B * g->T, C = g->cfg.hidden_size, F = g->cfg.ffn_hidden_size;
    const size_t L = g->cfg.num_layers, Vp = g->cfg.padded_vocab_size;
    free_f(g, LLM4D_MEM_PARAMS, g->params, g->table.total);
    free_f(g, LLM4D_MEM_GRADS, g->grads, g->table.total);
    if (g->res)
        for (size_t l = 0; l <= L; l++) free_f(g, LLM4D_MEM_ACTIVATIONS, g->res[l], BT * C);
    if (g->acts)
        for (int l = 0; l < n_block_acts(g); l++) free_block(g, &g->acts[l]);
    free(g->res);
    free(g->acts);
    const llm4d_mem_category A = LLM4D_MEM_ACTIVATIONS, W = LLM4D_MEM_WORKSPACE;
    free_f(g, A, g->lnf, BT * C);
    free_f(g, A, g->lnf_mean, BT);
    free_f(g, A, g->lnf_rstd, BT);
    free_f(g, W, g->logits, BT * Vp);
    free_f(g, W, g->head, head_rows_for(BT) * Vp); /* its allocated size: tests may lower head_rows */
    free_f(g, W, g->xstats, 3 * head_rows_for(BT));
    free_f(g, A, g->dlnf, BT * C);
    free_f(g, A, g->losses, BT);
    free_f(g, W, g->gelu, BT * F);
    free_f(g, W, g->dres, BT * C);
    free_f(g, W, g->dres2, BT * C);
    free_f(g, W, g->dln, BT * C);
    free_f(g, W, g->dqkv, BT * 3 * C);
    free_f(g, W, g->datty, BT * C);
    free_f(g, W, g->dproj, BT * C);
    free_f(g, W, g->dfch, BT * F);
    free_f(g, W, g->dfch_gelu, BT * F);
    llm4d_param_table_free(&g->table);
    memset(g, 0, sizeof *g);
}

/* ---- forward ---- */

static llm4d_block_acts *acts_of(llm4d_gpt *g, int l) { return &g->acts[g->recompute ? 0 : l]; }

static void block_forward(llm4d_gpt *g, float *pbase, int l, const int64_t *sample_ids, uint32_t step, int train,
                          int B, int T) {
    llm4d_backend *be = g->be;
    const int C = g->cfg.hidden_size, F = g->cfg.ffn_hidden_size, N = B * T;
    const block_weights w = block_w(g, pbase, l);
    llm4d_block_acts *a = acts_of(g, l);
    const float *x = g->res[l];
    const block_dropouts d = block_drop(g, l, step, sample_ids, train, T);
    const llm4d_dropout *dattn = &d.attn, *dout1 = &d.out1, *dout2 = &d.out2;

    be->layernorm_forward(be, a->ln1, a->ln1_mean, a->ln1_rstd, x, w.ln1w, w.ln1b, N, C);
    be->linear_forward(be, a->qkv, a->ln1, w.qkvw, w.qkvb, N, C, 3 * C);
    be->attention_forward(be, a->atty, a->lse, a->qkv, attn_shape(g, B, T), dattn);
    float *proj = g->dproj; /* scratch: the c_proj output is only needed to form the residual */
    be->linear_forward(be, proj, a->atty, w.attprojw, w.attprojb, N, C, C);
    be->dropout_add_forward(be, a->res2, x, proj, N, C, dout1);
    be->layernorm_forward(be, a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, w.ln2w, w.ln2b, N, C);
    be->linear_forward(be, a->fch, a->ln2, w.fcw, w.fcb, N, C, F);
    be->gelu_forward(be, g->gelu, a->fch, (size_t)N * F);
    be->linear_forward(be, proj, g->gelu, w.fcprojw, w.fcprojb, N, F, C);
    be->dropout_add_forward(be, g->res[l + 1], a->res2, proj, N, C, dout2);
}

/* The tied LM head and the loss over rows [0, N) of ln_f's output, head_rows at a time (see gpt.h). */
static double head_forward(llm4d_gpt *g, const int32_t *targets, const float *weight, int grad, int N) {
    llm4d_backend *be = g->be;
    const int C = g->cfg.hidden_size, V = g->cfg.vocab_size, Vp = g->cfg.padded_vocab_size;
    const float *wte = at(g, params_of(g, 0, 0), -1, LLM4D_P_WTE);
    float *dwte = grad ? at(g, grads_of(g, 0), -1, LLM4D_P_WTE) : NULL;
    if (grad) be->zero(be, g->dlnf, (size_t)N * C * sizeof(float));
    for (int r0 = 0; r0 < N; r0 += g->head_rows) {
        const int n = N - r0 < g->head_rows ? N - r0 : g->head_rows;
        const float *x = g->lnf + (size_t)r0 * C;
        be->linear_forward(be, g->head, x, wte, NULL, n, C, Vp);
        be->xent_forward(be, g->xstats, g->head, targets + r0, n, Vp, 0, V, 0);
        be->xent_backward(be, g->losses + r0, grad ? g->head : NULL, g->head, g->xstats, targets + r0,
                          weight ? weight + r0 : NULL, n, Vp, 0, V);
        if (grad) be->linear_backward(be, g->dlnf + (size_t)r0 * C, dwte, NULL, g->head, x, wte, n, C, Vp);
    }
    release(g, 0, 0);
    return be->dot(be, g->losses, weight, (size_t)N);
}

double llm4d_gpt_forward(llm4d_gpt *g, const int32_t *tokens, const int32_t *targets, const float *weight,
                         const int64_t *sample_ids, uint32_t step, int train, int grad, int B, int T) {
    LLM4D_ASSERT(B <= g->B && T <= g->T, "micro batch %dx%d exceeds the allocated %dx%d", B, T, g->B, g->T);
    LLM4D_ASSERT(!grad || (targets && weight), "a forward with gradient needs targets and loss weights");
    llm4d_backend *be = g->be;
    const int C = g->cfg.hidden_size, L = g->cfg.num_layers, N = B * T, Vp = g->cfg.padded_vocab_size;
    const llm4d_dropout demb = dropout(g, g->cfg.hidden_dropout_prob, -1, LLM4D_DROP_EMBED, step, sample_ids, train, T);
    float *emb = params_of(g, 0, 0);
    be->zero(be, g->res[0], (size_t)N * C * sizeof(float));
    be->embedding_forward(be, g->res[0], tokens, at(g, emb, -1, LLM4D_P_WTE), 0, Vp, N, C);
    be->position_forward(be, g->res[0], at(g, emb, -1, LLM4D_P_WPE), N, C, T, 0);
    release(g, 0, 0);
    be->dropout_forward(be, g->res[0], g->res[0], N, C, &demb);
    for (int l = 0; l < L; l++) {
        block_forward(g, params_of(g, 1 + l, 0), l, sample_ids, step, train, B, T);
        release(g, 1 + l, 0);
    }
    float *fin = params_of(g, L + 1, 0);
    be->layernorm_forward(be, g->lnf, g->lnf_mean, g->lnf_rstd, g->res[L], at(g, fin, -1, LLM4D_P_LNFW),
                          at(g, fin, -1, LLM4D_P_LNFB), N, C);
    release(g, L + 1, 0);
    if (targets) return head_forward(g, targets, weight, grad, N);
    /* logits wanted (inspection, tests): the whole [BT, Vp] matrix, allocated the first time */
    if (!g->logits) {
        g->logits = be->alloc(be, g->mem, LLM4D_MEM_WORKSPACE, (size_t)g->B * g->T * Vp * sizeof(float));
        LLM4D_ASSERT(g->logits, "out of memory for the %d x %d x %d logits", g->B, g->T, Vp);
    }
    be->linear_forward(be, g->logits, g->lnf, at(g, params_of(g, 0, 0), -1, LLM4D_P_WTE), NULL, N, C, Vp);
    release(g, 0, 0);
    return 0.0;
}

/* ---- backward ---- */

static void block_backward(llm4d_gpt *g, int l, const int64_t *sample_ids, uint32_t step, int train, int B, int T) {
    llm4d_backend *be = g->be;
    const int C = g->cfg.hidden_size, F = g->cfg.ffn_hidden_size, N = B * T;
    const size_t NC = (size_t)N * C, NF = (size_t)N * F;
    float *pbase = params_of(g, 1 + l, 1);
    if (g->recompute) block_forward(g, pbase, l, sample_ids, step, train, B, T);
    const block_weights w = block_w(g, pbase, l);
    const block_grads dw = block_ptrs(g, grads_of(g, 1 + l), l);
    llm4d_block_acts *a = acts_of(g, l);
    const float *x = g->res[l];
    const block_dropouts d = block_drop(g, l, step, sample_ids, train, T);
    const llm4d_dropout *dattn = &d.attn, *dout1 = &d.out1, *dout2 = &d.out2;

    /* g->dres holds d(res[l+1]). MLP sublayer: res[l+1] = res2 + drop(fcproj(gelu(fc(ln2(res2))))) */
    be->zero(be, g->dres2, NC * sizeof(float));
    be->zero(be, g->dproj, NC * sizeof(float));
    be->dropout_add_backward(be, g->dres2, g->dproj, g->dres, N, C, dout2);
    be->zero(be, g->dfch_gelu, NF * sizeof(float));
    /* GELU's output is the widest activation of a block (BT x 4C): recomputing it costs one element-wise pass,
     * keeping it would cost BT x 4C floats per layer */
    if (!g->recompute) be->gelu_forward(be, g->gelu, a->fch, NF); /* (recompute just refilled it) */
    be->linear_backward(be, g->dfch_gelu, dw.fcprojw, dw.fcprojb, g->dproj, g->gelu, w.fcprojw, N, F, C);
    be->zero(be, g->dfch, NF * sizeof(float));
    be->gelu_backward(be, g->dfch, a->fch, g->dfch_gelu, NF);
    be->zero(be, g->dln, NC * sizeof(float));
    be->linear_backward(be, g->dln, dw.fcw, dw.fcb, g->dfch, a->ln2, w.fcw, N, C, F);
    be->layernorm_backward(be, g->dres2, dw.ln2w, dw.ln2b, g->dln, a->res2, w.ln2w, a->ln2_mean, a->ln2_rstd, N, C);

    /* attention sublayer: res2 = x + drop(attproj(attn(qkv(ln1(x))))); d(x) goes to g->dres */
    be->zero(be, g->dres, NC * sizeof(float));
    be->zero(be, g->dproj, NC * sizeof(float));
    be->dropout_add_backward(be, g->dres, g->dproj, g->dres2, N, C, dout1);
    be->zero(be, g->datty, NC * sizeof(float));
    be->linear_backward(be, g->datty, dw.attprojw, dw.attprojb, g->dproj, a->atty, w.attprojw, N, C, C);
    be->zero(be, g->dqkv, NC * 3 * sizeof(float));
    be->attention_backward(be, g->dqkv, g->datty, a->atty, a->qkv, a->lse, attn_shape(g, B, T), dattn);
    be->zero(be, g->dln, NC * sizeof(float));
    be->linear_backward(be, g->dln, dw.qkvw, dw.qkvb, g->dqkv, a->ln1, w.qkvw, N, C, 3 * C);
    be->layernorm_backward(be, g->dres, dw.ln1w, dw.ln1b, g->dln, x, w.ln1w, a->ln1_mean, a->ln1_rstd, N, C);
    grads_done(g, 1 + l);
    release(g, 1 + l, 1);
}

void llm4d_gpt_backward(llm4d_gpt *g, const int32_t *tokens, const int64_t *sample_ids, uint32_t step, int train,
                        int B, int T) {
    llm4d_backend *be = g->be;
    const int C = g->cfg.hidden_size, L = g->cfg.num_layers, N = B * T;
    const size_t NC = (size_t)N * C;
    /* the LM head's backward ran inside the forward (head_forward): g->dlnf holds d(ln_f output) */
    float *fin = params_of(g, L + 1, 1), *dfin = grads_of(g, L + 1);
    be->zero(be, g->dres, NC * sizeof(float));
    be->layernorm_backward(be, g->dres, at(g, dfin, -1, LLM4D_P_LNFW), at(g, dfin, -1, LLM4D_P_LNFB), g->dlnf,
                           g->res[L], at(g, fin, -1, LLM4D_P_LNFW), g->lnf_mean, g->lnf_rstd, N, C);
    grads_done(g, L + 1);
    release(g, L + 1, 1);
    for (int l = L - 1; l >= 0; l--) block_backward(g, l, sample_ids, step, train, B, T);
    /* embeddings: res[0] = drop(wte[tokens] + wpe) */
    const llm4d_dropout demb = dropout(g, g->cfg.hidden_dropout_prob, -1, LLM4D_DROP_EMBED, step, sample_ids, train, T);
    be->zero(be, g->dres2, NC * sizeof(float));
    be->dropout_backward(be, g->dres2, g->dres, N, C, &demb);
    float *demb_g = grads_of(g, 0);
    be->embedding_backward(be, at(g, demb_g, -1, LLM4D_P_WTE), g->dres2, tokens, 0, g->cfg.padded_vocab_size, N, C);
    be->position_backward(be, at(g, demb_g, -1, LLM4D_P_WPE), g->dres2, N, C, T, 0);
    grads_done(g, 0);
}

double llm4d_gpt_flops_per_token(const llm4d_model_config *c, int T) {
    const double C = c->hidden_size, F = c->ffn_hidden_size, L = c->num_layers, V = c->vocab_size;
    const double matmul_params = L * (3 * C * C + C * C + 2 * C * F) + V * C;
    return 6.0 * matmul_params + 12.0 * L * T * C;
}
