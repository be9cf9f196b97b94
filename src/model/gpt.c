/* gpt.c — building the model part, its activation slots, and running a chunk for a micro-batch (see gpt.h; the
 * layers themselves are in block.c and embed.c).
 *
 * Memory is laid out once here. Without recompute every block of every slot keeps its activations (except GELU's
 * output, recomputed from its input in backward: it is the widest of them); with recompute a slot keeps only the
 * residual stream entering each block (res[i]) and one shared set of block activations is refilled by re-running
 * the block's forward right before its backward. Backward kernels accumulate, so every activation gradient buffer
 * is zeroed before the kernels that write it. */
#include "model/gpt.h"

#include <stdlib.h>
#include <string.h>

#include "config/model_shape.h"
#include "core/rng.h"

/* Tokens per chunk of the LM head + loss: 512 x 50304 logits are 98 MiB (instead of 1.6 GB at B=8 T=1024), and a
 * 512-row GEMM still runs at full speed. */
#define HEAD_ROWS 512

struct llm4d_gpt_alloc {
    void *p;
    size_t bytes;
    llm4d_mem_category c;
};

/* ---- parameters and gradients through the hooks ---- */

float *llm4d_gpt_params_of(llm4d_gpt *g, int grp, int pass) {
    if (!g->hooks.params_for) return g->params + g->table.g[grp].lo;
    float *p = g->hooks.params_for(g->hooks.ctx, grp, pass);
    /* Weights outside the flat buffer were just gathered (ZeRO-3) into a buffer that other groups' weights also
     * pass through: the backend's low-precision copies of what was there before are stale (backend.h). */
    const uintptr_t a = (uintptr_t)p, lo = (uintptr_t)g->params, hi = lo + g->table.total * sizeof(float);
    const size_t bytes = (g->table.g[grp].hi - g->table.g[grp].lo) * sizeof(float);
    if (g->be->weights_changed && (!g->params || a < lo || a >= hi)) g->be->weights_changed(g->be, p, bytes);
    return p;
}
void llm4d_gpt_release(llm4d_gpt *g, int grp, int pass) {
    if (g->hooks.release) g->hooks.release(g->hooks.ctx, grp, pass);
}
float *llm4d_gpt_grads_of(llm4d_gpt *g, int grp) {
    if (g->hooks.grads_for) return g->hooks.grads_for(g->hooks.ctx, grp);
    return g->grads + g->table.g[grp].lo;
}
void llm4d_gpt_grads_done(llm4d_gpt *g, int grp) {
    /* gradients of the whole buffer (the storage that resets them, backend.h grads_reset) that the group's backward
     * wrote nowhere (a position embedding's rows past T) are zeros now, before a hook hands them to a collective;
     * the buffer is addressed directly: asking the hooks for it would open a ZeRO engine's gradient window */
    if (g->be->grads_settle && g->grads)
        g->be->grads_settle(g->be, g->grads + g->table.g[grp].lo,
                            (g->table.g[grp].hi - g->table.g[grp].lo) * sizeof(float));
    if (!g->hooks.grads_done) return;
    g->be->event_record(g->be, g->grads_ready, LLM4D_STREAM_COMPUTE);
    g->hooks.grads_done(g->hooks.ctx, grp, g->grads_ready);
}

int llm4d_gpt_windows(const llm4d_gpt *g, int grp) { return llm4d_param_windows(&g->table, grp); }

llm4d_dropout llm4d_gpt_dropout(const llm4d_gpt *g, float p, int layer, int site, const llm4d_micro *mb) {
    return (llm4d_dropout){.p = mb->train ? p : 0.0f,
                           .seed = g->seed,
                           .stream = llm4d_rng_stream(LLM4D_RNG_DROPOUT, (unsigned)(layer + 1), (unsigned)site,
                                                      mb->step),
                           .sample_ids = mb->sample_ids,
                           .T = mb->T,
                           .tok0 = g->tok0};
}

/* ---- allocation ---- */

typedef struct {
    llm4d_gpt *g;
    int cap, ok;
    size_t *plan; /* planning (llm4d_gpt_plan): count the bytes per category, allocate nothing */
} allocator;

static void *alloc_b(allocator *A, llm4d_mem_category c, size_t bytes) {
    llm4d_gpt *g = A->g;
    if (!A->ok || bytes == 0) return NULL;
    if (A->plan) {
        A->plan[c] += bytes;
        if (c == LLM4D_MEM_ACTIVATIONS) g->act_bytes += bytes;
        return NULL;
    }
    if (g->n_allocs == A->cap) {
        int cap = A->cap ? 2 * A->cap : 64;
        struct llm4d_gpt_alloc *na = realloc(g->allocs, (size_t)cap * sizeof *na);
        if (!na) {
            A->ok = 0;
            return NULL;
        }
        g->allocs = na;
        A->cap = cap;
    }
    void *p = g->be->alloc(g->be, g->mem, c, bytes);
    if (!p) {
        A->ok = 0;
        return NULL;
    }
    g->allocs[g->n_allocs++] = (struct llm4d_gpt_alloc){p, bytes, c};
    if (c == LLM4D_MEM_ACTIVATIONS) g->act_bytes += bytes;
    return p;
}

static float *alloc_f(allocator *A, llm4d_mem_category c, size_t n) { return alloc_b(A, c, n * sizeof(float)); }

/* n elements of type t */
static llm4d_tensor alloc_t(allocator *A, llm4d_mem_category c, size_t n, llm4d_ftype t) {
    return llm4d_t(alloc_b(A, c, n * llm4d_ftype_size(t)), t);
}

static void alloc_block(allocator *A, llm4d_block_acts *a) {
    const llm4d_gpt *g = A->g;
    const size_t N = (size_t)g->BT, Nl = (size_t)g->BTl, C = g->C;
    const llm4d_mem_category X = LLM4D_MEM_ACTIVATIONS;
    const llm4d_ftype t = g->act;
    /* the LayerNorm outputs: this rank's tokens under sequence parallelism (block.c gathers them again in backward),
     * except in the one block recompute refills just before its backward */
    const size_t Nln = llm4d_gpt_ln_local(g) ? Nl : N;
    const int ln = !g->cfg.rmsnorm; /* LayerNorm keeps its means too */
    a->ln1 = alloc_t(A, X, Nln * C, t);
    a->ln1_mean = ln ? alloc_f(A, X, Nl) : NULL;
    a->ln1_rstd = alloc_f(A, X, Nl);
    a->qkv = alloc_t(A, X, N * g->QKVl, t);
    a->atty = alloc_t(A, X, N * g->Cl, t);
    a->lse = alloc_f(A, X, (size_t)g->B * g->NHl * g->T);
    /* the attention dropout's mask, kept so backward reads it instead of drawing its Philox words again (a bit per
     * probability: 1/32 of the scores a non-flash attention would keep) */
    a->attn_bits = g->cfg.attention_probs_dropout_prob > 0.0f
                       ? (uint32_t *)alloc_f(A, X, (size_t)g->B * g->NHl * g->T * LLM4D_MASK_WORDS(g->T))
                       : NULL;
    a->res2 = alloc_t(A, X, Nl * C, g->res);
    a->ln2 = alloc_t(A, X, Nln * C, t);
    a->ln2_mean = ln ? alloc_f(A, X, Nl) : NULL;
    a->ln2_rstd = alloc_f(A, X, Nl);
    a->fch = alloc_t(A, X, N * g->FCl, t);
}

static void alloc_wgrad(allocator *A, llm4d_block_wgrad *w) {
    const llm4d_gpt *g = A->g;
    const size_t N = (size_t)g->BT, C = g->C;
    const llm4d_mem_category X = LLM4D_MEM_ACTIVATIONS;
    w->dqkv = alloc_t(A, X, N * g->QKVl, g->act);
    w->dattn = alloc_t(A, X, N * C, g->act);
    w->dfch = alloc_t(A, X, N * g->FCl, g->act);
    w->dmlp = alloc_t(A, X, N * C, g->act);
    w->dln[0] = alloc_f(A, X, 4 * C);
    for (int k = 1; k < 4; k++) w->dln[k] = w->dln[0] ? w->dln[0] + (size_t)k * C : NULL;
}

static int is_last(const llm4d_gpt *g, int c) { return g->table.part.head && c == g->table.part.n_chunks - 1; }
static int is_first(const llm4d_gpt *g, int c) { return g->table.part.embedding && c == 0; }

/* One slot of chunk c. Counting (A->plan), the slot's arrays are not made: only its bytes are counted (the planner
 * counts hundreds of thousands of model parts, and the arrays were most of a count's time). */
static void alloc_slot(allocator *A, int c, llm4d_slot *s) {
    llm4d_gpt *g = A->g;
    const int nl = g->nl[c], count = A->plan != NULL;
    const size_t Nl = (size_t)g->BTl, C = g->C;
    llm4d_block_acts scratch_a;
    llm4d_block_wgrad scratch_w;
    if (!count) {
        s->res = calloc((size_t)nl + 1, sizeof *s->res);
        if (!s->res) A->ok = 0;
    }
    for (int i = 0; (count || s->res) && i <= nl; i++) {
        const llm4d_tensor x = alloc_t(A, LLM4D_MEM_ACTIVATIONS, Nl * C, g->res);
        if (s->res) s->res[i] = x;
    }
    if (!g->layout.recompute && nl > 0) {
        if (!count) {
            s->acts = calloc((size_t)nl, sizeof *s->acts);
            if (!s->acts) A->ok = 0;
        }
        for (int i = 0; (count || s->acts) && i < nl; i++) alloc_block(A, s->acts ? &s->acts[i] : &scratch_a);
    }
    if (g->layout.split_backward && !g->layout.recompute && nl > 0) {
        if (!count) {
            s->wg = calloc((size_t)nl, sizeof *s->wg);
            if (!s->wg) A->ok = 0;
        }
        for (int i = 0; (count || s->wg) && i < nl; i++) alloc_wgrad(A, s->wg ? &s->wg[i] : &scratch_w);
    }
    if (is_last(g, c)) {
        s->dlnf = alloc_f(A, LLM4D_MEM_ACTIVATIONS, Nl * C);
        s->lnf_mean = g->cfg.rmsnorm ? NULL : alloc_f(A, LLM4D_MEM_ACTIVATIONS, Nl);
        s->lnf_rstd = alloc_f(A, LLM4D_MEM_ACTIVATIONS, Nl);
    }
}

/* Counting (A->plan): chunk c's ns slots, every one the same size, as one slot counted and its bytes added ns - 1
 * more times (the sums of ns slots counted one by one, exactly: integer additions). */
static void count_slots(allocator *A, int c, int ns) {
    size_t *plan = A->plan, before[LLM4D_MEM_NCATEGORIES];
    memcpy(before, plan, sizeof before);
    const size_t act0 = A->g->act_bytes;
    llm4d_slot one;
    memset(&one, 0, sizeof one);
    alloc_slot(A, c, &one);
    for (int q = 0; q < LLM4D_MEM_NCATEGORIES; q++) plan[q] += (plan[q] - before[q]) * (size_t)(ns - 1);
    A->g->act_bytes += (A->g->act_bytes - act0) * (size_t)(ns - 1);
}

/* Where each kind of block parameter sits inside a block group (the same in every block group). */
static void block_offsets(llm4d_gpt *g) {
    const llm4d_param_table *t = &g->table;
    memset(g->boff, 0, sizeof g->boff);
    memset(g->has, 0, sizeof g->has);
    g->group_of_layer = calloc((size_t)g->cfg.num_layers, sizeof *g->group_of_layer);
    for (int l = 0; g->group_of_layer && l < g->cfg.num_layers; l++) g->group_of_layer[l] = -1;
    for (int k = 0; k < t->n_groups; k++) {
        const llm4d_group *gr = &t->g[k];
        if (gr->kind != LLM4D_G_BLOCK) continue;
        if (g->group_of_layer) g->group_of_layer[gr->layer] = k;
        for (int i = gr->p0; i < gr->p1; i++)
            if (!g->has[t->p[i].kind]) g->has[t->p[i].kind] = 1, g->boff[t->p[i].kind] = t->p[i].offset - gr->lo;
    }
    g->lnf_group = llm4d_param_group_of(t, LLM4D_G_LNF, -1);
    g->wpe_group = llm4d_param_group_of(t, LLM4D_G_WPE, -1);
}

/* Everything but the weights' values: the table, the sizes, and every buffer (counted only, when planning). */
static llm4d_code build(llm4d_gpt *g, const llm4d_gpt_spec *spec, llm4d_backend *be, llm4d_mem *mem, uint64_t seed,
                        size_t *plan, const llm4d_param_table *given, llm4d_err *err) {
    const llm4d_model_config *cfg = spec->cfg;
    const llm4d_model_part *part = spec->part;
    const llm4d_tp *tp = spec->tp;
    const llm4d_gpt_layout *layout = spec->layout;
    memset(g, 0, sizeof *g);
    g->cfg = *cfg;
    g->be = be;
    g->mem = mem;
    g->tp = *tp;
    g->tp.be = be;
    g->layout = *layout;
    g->seed = seed;
    LLM4D_ASSERT(tp->size == part->mp_size && tp->rank == part->mp_rank, "tensor-parallel context %d/%d, part %d/%d",
                 tp->rank, tp->size, part->mp_rank, part->mp_size);
    if (given) g->table = *given; /* borrowed (planning): let go before destroying g */
    else LLM4D_TRY(llm4d_param_table_build(&g->table, cfg, part, err));
    const int M = tp->size;
    g->B = layout->B, g->T = layout->T, g->BT = g->B * g->T;
    g->act = layout->act, g->res = layout->res;
    g->BTl = tp->sp ? g->BT / M : g->BT;
    g->tok0 = tp->sp ? (int64_t)tp->rank * g->BTl : 0;
    g->C = cfg->hidden_size, g->F = cfg->ffn_hidden_size, g->NH = cfg->num_attention_heads;
    g->Cl = g->C / M, g->Fl = g->F / M, g->NHl = g->NH / M, g->Vl = cfg->padded_vocab_size / M;
    /* key/value heads: NKV/M each, or one (replicated over M/NKV ranks: params.c) when there are fewer than M */
    g->NKV = llm4d_model_kv_heads(cfg), g->NKVl = llm4d_model_kv_heads_per_rank(cfg, M);
    g->QKVl = (g->NHl + 2 * g->NKVl) * (g->C / g->NH);
    g->FCl = llm4d_model_fc_parts(cfg) * g->Fl;
    LLM4D_ASSERT((g->NKV >= M ? g->NKV % M : M % g->NKV) == 0 && g->NH % g->NKV == 0,
                 "%d key/value heads over %d ranks, %d heads", g->NKV, M, g->NH);
    LLM4D_ASSERT(g->BTl * (tp->sp ? M : 1) == g->BT, "sequence parallel: %d tokens over %d ranks", g->BT, M);
    block_offsets(g);
    allocator A = {.g = g, .ok = g->group_of_layer != NULL, .plan = plan};
    const size_t N = (size_t)g->BT, Nl = (size_t)g->BTl, C = g->C;
    const llm4d_mem_category W = LLM4D_MEM_WORKSPACE;
    if (!layout->no_params) g->params = alloc_f(&A, LLM4D_MEM_PARAMS, g->table.total);
    if (!layout->no_grads) g->grads = alloc_f(&A, LLM4D_MEM_GRADS, g->table.total);
    for (int c = 0; c < part->n_chunks; c++) {
        g->nl[c] = part->layer_hi[c] - part->layer_lo[c];
        const int ns = layout->slots[c] > 0 ? layout->slots[c] : 1;
        const size_t before = g->act_bytes;
        if (plan) {
            count_slots(&A, c, ns);
        } else {
            g->slot[c] = calloc((size_t)ns, sizeof *g->slot[c]);
            if (!g->slot[c]) A.ok = 0;
            for (int k = 0; g->slot[c] && k < ns; k++) alloc_slot(&A, c, &g->slot[c][k]);
        }
        g->slot_bytes += ns ? (g->act_bytes - before) / (size_t)ns : 0;
    }
    if (layout->recompute) alloc_block(&A, &g->racts);
    if (part->head) {
        int64_t widest = 0; /* the head's chunk of logits spans the widest vocabulary block */
        for (int k = 0; k < g->table.head_groups; k++)
            if (g->table.g[g->table.head_first + k].nrows > widest)
                widest = g->table.g[g->table.head_first + k].nrows;
        g->head_rows = (int)(N < HEAD_ROWS ? N : HEAD_ROWS);
        const size_t nch = (N + (size_t)g->head_rows - 1) / (size_t)g->head_rows;
        g->head = alloc_t(&A, W, (size_t)g->head_rows * (size_t)widest, g->act);
        g->operands.read = (size_t)g->head_rows * (size_t)widest; /* the head's logits gradient, a chunk at a time */
        g->operands.cols = (size_t)widest;
        g->xstats = alloc_f(&A, W, nch * 3 * (size_t)g->head_rows);
        g->xmax = alloc_f(&A, W, (size_t)g->head_rows);
        g->losses = alloc_f(&A, W, N);
        g->loss_acc = (double *)(void *)alloc_f(&A, W, 2); /* one double */
        g->lnf = alloc_t(&A, W, N * C, g->act);
        if (tp->sp) g->dlnf_full = alloc_f(&A, W, N * C);
    }
    /* every block's GEMMs read [N, QKVl], [N, C], [N, FCl] inputs and gradients; the widest may have to be made by
     * the backend in any precision (GELU applied to c_proj's input, the attention's packed Q, K, V) */
    int widest = g->FCl;
    if (g->QKVl > widest) widest = g->QKVl;
    if (g->C > widest) widest = g->C;
    g->operands.made = N * (size_t)widest;
    if (g->operands.made > g->operands.read) g->operands.read = g->operands.made;
    if ((size_t)widest > g->operands.cols) g->operands.cols = (size_t)widest;
    g->operands.rows = N;
    g->operands.act = g->act;
    g->full = alloc_f(&A, W, N * C);
    g->dres = alloc_t(&A, W, Nl * C, g->res);
    g->dres2 = alloc_t(&A, W, Nl * C, g->res);
    g->dln = alloc_f(&A, W, N * C);
    g->dqkv = alloc_t(&A, W, N * g->QKVl, g->act);
    g->datty = alloc_t(&A, W, N * g->Cl, g->act);
    g->dproj = alloc_t(&A, W, Nl * C, g->act);
    g->dfch = alloc_t(&A, W, N * g->FCl, g->act);
    g->dfch_gelu = alloc_t(&A, W, N * g->Fl, g->act);
    if (cfg->swiglu) g->swi = alloc_t(&A, W, N * g->Fl, g->act);
    g->dlocal = alloc_f(&A, W, Nl * C);
    if (!A.ok) {
        if (given) memset(&g->table, 0, sizeof g->table);
        llm4d_gpt_destroy(g);
        return llm4d_fail(err, LLM4D_ENOMEM,
                          "out of memory allocating the model for micro batches of %d x %d; lower micro_batch_size "
                          "or max_seq_len, or set use_recompute",
                          layout->B, layout->T);
    }
    return LLM4D_OK;
}

llm4d_code llm4d_gpt_create(llm4d_gpt *g, const llm4d_gpt_spec *spec, llm4d_backend *be, llm4d_mem *mem, uint64_t seed,
                            llm4d_err *err) {
    LLM4D_TRY(build(g, spec, be, mem, seed, NULL, NULL, err));
    if (!(g->grads_ready = be->event_create(be))) {
        llm4d_gpt_destroy(g);
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory creating the model's event");
    }
    if (g->params) llm4d_param_init(&g->table, be, g->params, seed);
    return LLM4D_OK;
}

llm4d_code llm4d_gpt_plan(const llm4d_model_config *cfg, const llm4d_model_part *part, const llm4d_tp *tp,
                          const llm4d_gpt_layout *layout, size_t bytes[LLM4D_MEM_NCATEGORIES],
                          llm4d_operand_sizes *operands, llm4d_err *err) {
    return llm4d_gpt_plan_table(cfg, part, tp, layout, NULL, bytes, operands, err);
}

llm4d_code llm4d_gpt_plan_table(const llm4d_model_config *cfg, const llm4d_model_part *part, const llm4d_tp *tp,
                                const llm4d_gpt_layout *layout, const llm4d_param_table *table,
                                size_t bytes[LLM4D_MEM_NCATEGORIES], llm4d_operand_sizes *operands, llm4d_err *err) {
    llm4d_gpt g;
    memset(bytes, 0, LLM4D_MEM_NCATEGORIES * sizeof *bytes);
    const llm4d_gpt_spec spec = {cfg, part, tp, layout};
    llm4d_code rc = build(&g, &spec, NULL, NULL, 0, bytes, table, err);
    if (operands) *operands = g.operands;
    if (table) memset(&g.table, 0, sizeof g.table); /* borrowed (a failed build let go of it already) */
    llm4d_gpt_destroy(&g);
    return rc;
}

llm4d_code llm4d_gpt_create_whole(llm4d_gpt *g, const llm4d_model_config *cfg, llm4d_backend *be, llm4d_mem *mem,
                                  const llm4d_gpt_layout *layout, uint64_t seed, llm4d_err *err) {
    const llm4d_model_part part = llm4d_model_part_whole(cfg);
    const llm4d_tp tp = llm4d_tp_make(NULL, 0);
    const llm4d_gpt_layout whole = {.B = layout->B, .T = layout->T, .recompute = layout->recompute};
    const llm4d_gpt_spec spec = {cfg, &part, &tp, &whole};
    return llm4d_gpt_create(g, &spec, be, mem, seed, err);
}

void llm4d_gpt_destroy(llm4d_gpt *g) {
    if (g->grads_ready) g->be->event_destroy(g->be, g->grads_ready);
    for (int i = g->n_allocs - 1; i >= 0; i--)
        g->be->free(g->be, g->mem, g->allocs[i].c, g->allocs[i].p, g->allocs[i].bytes);
    if (g->logits)
        g->be->free(g->be, g->mem, LLM4D_MEM_WORKSPACE, g->logits, (size_t)g->BT * g->Vl * sizeof(float));
    for (int c = 0; c < LLM4D_MAX_CHUNKS; c++) {
        const int ns = g->layout.slots[c] > 0 ? g->layout.slots[c] : 1;
        for (int k = 0; g->slot[c] && k < ns; k++) {
            free(g->slot[c][k].res);
            free(g->slot[c][k].acts);
            free(g->slot[c][k].wg);
        }
        free(g->slot[c]);
    }
    free(g->allocs);
    free(g->group_of_layer);
    llm4d_param_table_free(&g->table);
    memset(g, 0, sizeof *g);
}

/* ---- one chunk ---- */

static llm4d_slot *slot_of(llm4d_gpt *g, int c, int si) {
    const int ns = g->layout.slots[c] > 0 ? g->layout.slots[c] : 1;
    LLM4D_ASSERT(c >= 0 && c < g->table.part.n_chunks && si >= 0 && si < ns, "chunk %d slot %d (of %d)", c, si, ns);
    return &g->slot[c][si];
}

llm4d_tensor llm4d_gpt_chunk_input(llm4d_gpt *g, int c, int si) { return slot_of(g, c, si)->res[0]; }
llm4d_ctensor llm4d_gpt_chunk_output(const llm4d_gpt *g, int c, int si) {
    return llm4d_cv(g->slot[c][si].res[g->nl[c]]);
}
llm4d_ctensor llm4d_gpt_chunk_dinput(const llm4d_gpt *g, int c, int si) { return llm4d_cv(g->slot[c][si].res[0]); }
size_t llm4d_gpt_act_elems(const llm4d_gpt *g) { return (size_t)g->BTl * g->C; }
size_t llm4d_gpt_act_bytes(const llm4d_gpt *g) { return llm4d_gpt_act_elems(g) * llm4d_ftype_size(g->res); }

static llm4d_block_acts *acts_of(llm4d_gpt *g, llm4d_slot *s, int i) {
    return g->layout.recompute ? &g->racts : &s->acts[i];
}

void llm4d_gpt_chunk_forward(llm4d_gpt *g, int c, int si, const llm4d_micro *mb) {
    LLM4D_ASSERT(mb->B <= g->B && mb->T <= g->T, "micro batch %dx%d exceeds the allocated %dx%d", mb->B, mb->T, g->B,
                 g->T);
    LLM4D_ASSERT(!mb->grad || (mb->B == g->B && mb->T == g->T), "a training micro batch is %dx%d, not %dx%d", mb->B,
                 mb->T, g->B, g->T);
    LLM4D_ASSERT(!mb->grad || (mb->targets && mb->weight), "a forward with gradient needs targets and loss weights");
    llm4d_slot *s = slot_of(g, c, si);
    LLM4D_ASSERT(!s->busy, "chunk %d slot %d already holds a micro-batch", c, si);
    int busy = 1;
    for (int k = 0; k < (g->layout.slots[c] > 0 ? g->layout.slots[c] : 1); k++) busy += g->slot[c][k].busy;
    if (busy > g->slots_peak[c]) g->slots_peak[c] = busy;
    s->busy = mb->grad;
    if (is_first(g, c)) llm4d_gpt_embed_forward(g, s->res[0], mb);
    const int l0 = g->table.part.layer_lo[c];
    for (int i = 0; i < g->nl[c]; i++)
        llm4d_gpt_block_forward(g, acts_of(g, s, i), llm4d_cv(s->res[i]), s->res[i + 1], l0 + i, mb);
    if (!is_last(g, c)) return;
    if (mb->targets) llm4d_gpt_head_forward(g, s, llm4d_cv(s->res[g->nl[c]]), mb);
    else llm4d_gpt_head_logits(g, s, llm4d_cv(s->res[g->nl[c]]), mb->B, mb->T);
}

double llm4d_gpt_loss_take(llm4d_gpt *g) {
    if (!g->loss_acc) return 0.0;
    double loss;
    g->be->copy_async(g->be, &loss, g->loss_acc, sizeof loss, LLM4D_D2H, LLM4D_STREAM_COMPUTE);
    g->be->zero(g->be, g->loss_acc, sizeof loss);
    return loss;
}

void llm4d_gpt_chunk_backward(llm4d_gpt *g, int c, int si, const llm4d_micro *mb, llm4d_ctensor dout, int split) {
    llm4d_backend *be = g->be;
    llm4d_slot *s = slot_of(g, c, si);
    LLM4D_ASSERT(s->busy, "chunk %d slot %d: backward without its forward", c, si);
    split = split && s->wg != NULL; /* recompute computes weight gradients in the same pass */
    const int nl = g->nl[c], l0 = g->table.part.layer_lo[c];
    if (is_last(g, c)) {
        llm4d_gpt_head_backward(g, s, llm4d_cv(s->res[nl]));
    } else {
        LLM4D_ASSERT(dout.t == g->res, "chunk %d: a %s output gradient for a %s residual stream", c,
                     llm4d_ftype_name(dout.t), llm4d_ftype_name(g->res));
        be->copy(be, g->dres.p, dout.p, llm4d_gpt_act_bytes(g));
    }
    for (int i = nl - 1; i >= 0; i--) {
        llm4d_block_acts *a = acts_of(g, s, i);
        /* recompute: the block's forward again (its output lands on res[i+1], whose backward is done) */
        if (g->layout.recompute) llm4d_gpt_block_forward(g, a, llm4d_cv(s->res[i]), s->res[i + 1], l0 + i, mb);
        llm4d_gpt_block_backward(g, a, llm4d_cv(s->res[i]), split ? &s->wg[i] : NULL, l0 + i, mb);
    }
    if (is_first(g, c))
        llm4d_gpt_embed_backward(g, llm4d_cv(g->dres), mb);
    else
        be->copy(be, s->res[0].p, g->dres.p, llm4d_gpt_act_bytes(g));
    if (!split) s->busy = 0;
}

void llm4d_gpt_chunk_backward_weight(llm4d_gpt *g, int c, int si, const llm4d_micro *mb) {
    llm4d_slot *s = slot_of(g, c, si);
    if (!s->wg) return; /* recompute: the backward computed the weight gradients and freed the slot */
    LLM4D_ASSERT(s->busy, "chunk %d slot %d: weight pass without its backward", c, si);
    const int l0 = g->table.part.layer_lo[c];
    for (int i = g->nl[c] - 1; i >= 0; i--) llm4d_gpt_block_backward_weight(g, acts_of(g, s, i), &s->wg[i], l0 + i, mb);
    s->busy = 0;
}

/* ---- the whole model ---- */

double llm4d_gpt_forward(llm4d_gpt *g, const llm4d_micro *mb) {
    LLM4D_ASSERT(g->table.part.n_chunks == 1 && g->table.part.embedding && g->table.part.head,
                 "llm4d_gpt_forward runs a whole model");
    llm4d_gpt_chunk_forward(g, 0, 0, mb);
    return llm4d_gpt_loss_take(g);
}

void llm4d_gpt_backward(llm4d_gpt *g, const int32_t *tokens, const int64_t *sample_ids, uint32_t step, int train,
                        int B, int T) {
    const llm4d_micro mb = {tokens, NULL, NULL, sample_ids, step, train, 1, B, T};
    llm4d_gpt_chunk_backward(g, 0, 0, &mb, llm4d_ct(NULL, g->res), 0);
}

double llm4d_gpt_flops_per_token(const llm4d_model_config *c, int T) {
    /* the description's GEMM weights (config/model_shape.h: GQA's narrower QKV, SwiGLU's three matrices) */
    const llm4d_model_shape s = llm4d_model_shape_of(c, 1);
    const double C = c->hidden_size, L = c->num_layers, V = c->vocab_size;
    const double matmul_params = L * (double)s.block_matmul + V * C;
    return 6.0 * matmul_params + 12.0 * L * T * C;
}
