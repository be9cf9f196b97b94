/* tensor_parallel.c — summing the sequence-parallel partial gradients over the tensor-parallel group, and the
 * tensor-parallel traffic of a step as data (see tensor_parallel.h). */
#include "parallel/tensor_parallel.h"

#include <stdio.h>
#include <string.h>

#include "core/timer.h"

static llm4d_tensor_parallel *of(llm4d_engine *e) { return (llm4d_tensor_parallel *)e; }

/* Copy the kept part of every tp_partial entry's gradient to (dir 0) or from (dir 1) the pack, into its slot of
 * the entry's tp_slots (a replicated key/value head: one slot per head, the others zero, so the sum over the group
 * adds each head's replicas alone); returns the pack's length. */
static size_t pack(llm4d_tensor_parallel *tp, int dir) {
    llm4d_engine_stack *s = tp->stack;
    llm4d_backend *be = s->g->be;
    const llm4d_param_table *t = &s->g->table;
    size_t at = 0;
    for (int i = 0; i < t->n; i++) {
        const llm4d_param *p = &t->p[i];
        if (!p->tp_partial) continue;
        int64_t j0, j1;
        float *gr = llm4d_engines_grad_view(s, i, &j0, &j1);
        if (!gr) continue;
        const size_t n = (size_t)(j1 - j0);
        float *mine = tp->pack + at + (size_t)p->tp_slot * n;
        if (dir == 0) {
            if (p->tp_slots > 1) be->zero(be, tp->pack + at, (size_t)p->tp_slots * n * sizeof(float));
            be->copy(be, mine, gr, n * sizeof(float));
        } else {
            be->copy(be, gr, mine, n * sizeof(float));
        }
        at += (size_t)p->tp_slots * n;
    }
    return at;
}

static llm4d_code tp_finish(llm4d_engine *e, llm4d_err *err) {
    llm4d_tensor_parallel *tp = of(e);
    if (!tp->pack) return LLM4D_OK;
    const double t0 = llm4d_now();
    const size_t n = pack(tp, 0);
    if (n) LLM4D_TRY(llm4d_comm_dev_allreduce(tp->mp, tp->pack, n, LLM4D_COMM_F32, LLM4D_COMM_SUM, err));
    pack(tp, 1);
    e->comm_wait_s = e->comm_total_s = llm4d_now() - t0;
    return LLM4D_OK;
}

static void tp_describe(llm4d_engine *e, char *buf, size_t n) {
    llm4d_tensor_parallel *tp = of(e);
    snprintf(buf, n, "tensor parallel over %d ranks%s", tp->mp->size,
             tp->pack ? ": partial gradients (sequence parallel: LayerNorms, row-parallel biases, wpe; key/value "
                        "heads held by several ranks) summed after backward"
                      : "");
}

static void tp_destroy(llm4d_engine *e) {
    llm4d_tensor_parallel *tp = of(e);
    llm4d_gpt *g = tp->stack->g;
    if (tp->pack) g->be->free(g->be, g->mem, LLM4D_MEM_COMM, tp->pack, tp->pack_len * sizeof(float));
    tp->pack = NULL;
}

static const llm4d_engine_ops tp_ops = {
    .name = "tensor_parallel",
    .finish_backward = tp_finish,
    .describe = tp_describe,
    .destroy = tp_destroy,
};

size_t llm4d_tensor_parallel_bytes(const llm4d_param_table *t) {
    size_t n = 0;
    for (int i = 0; i < t->n; i++)
        if (t->p[i].tp_partial) n += (size_t)t->p[i].tp_slots * t->p[i].numel;
    return n * sizeof(float);
}

llm4d_code llm4d_tensor_parallel_init(llm4d_tensor_parallel *tp, llm4d_engine_stack *stack, llm4d_comm *mp,
                                      llm4d_err *err) {
    memset(tp, 0, sizeof *tp);
    tp->base.ops = &tp_ops;
    tp->stack = stack;
    tp->mp = mp;
    tp->pack_len = llm4d_tensor_parallel_bytes(&stack->g->table) / sizeof(float);
    if (tp->pack_len == 0) return LLM4D_OK;
    llm4d_gpt *g = stack->g;
    tp->pack = g->be->alloc(g->be, g->mem, LLM4D_MEM_COMM, tp->pack_len * sizeof(float));
    if (!tp->pack) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory for the tensor-parallel gradient buffer");
    return LLM4D_OK;
}

/* ---- what a step moves ---- */

/* The calls being appended: one list, the group's size M (a gather's or reduce-scatter's whole buffer). */
typedef struct {
    llm4d_traffic *out;
    int M;
    llm4d_err *err;
    llm4d_code rc;
} tp_list;

/* n calls per micro-batch of `op` with count elements of dtype dt (a 16-bit all-gather: bytes), on chunk c. */
static void tp_add(tp_list *l, int what, int op, int dt, int when, int c, size_t count, int n) {
    if (l->rc != LLM4D_OK || n <= 0 || count == 0) return;
    const size_t len = op == LLM4D_COMM_OP_ALLREDUCE ? count : count * (size_t)l->M;
    const llm4d_traffic_call call = {.what = (uint8_t)what, .op = (uint8_t)op, .group = LLM4D_TG_MODEL,
                                     .dtype = (uint8_t)dt, .when = (uint8_t)when, .blocking = 1, .id = c,
                                     .count = count, .len = len, .per_micro = n};
    l->rc = llm4d_traffic_add(l->out, &call, l->err);
}

/* An all-gather of `elems` values of type t (tp.c: 16-bit values as raw bytes). */
static void tp_gather(tp_list *l, int what, int when, int c, size_t elems, llm4d_ftype t, int n) {
    const int f32 = t == LLM4D_F32;
    tp_add(l, what, LLM4D_COMM_OP_ALLGATHER, f32 ? LLM4D_COMM_F32 : LLM4D_COMM_BYTE, when, c,
           f32 ? elems : elems * llm4d_ftype_size(t), n);
}

/* A sum of partial results over the group: an all-reduce of all N tokens' values, or (sequence parallel) a
 * reduce-scatter to this rank's Nl; fp32. */
static void tp_sum(tp_list *l, int sp, int what, int when, int c, size_t all, size_t mine, int n) {
    tp_add(l, what, sp ? LLM4D_COMM_OP_REDUCE_SCATTER : LLM4D_COMM_OP_ALLREDUCE, LLM4D_COMM_F32, when, c,
           sp ? mine : all, n);
}

llm4d_code llm4d_tensor_parallel_traffic(const llm4d_model_part *part, const llm4d_gpt_layout *layout,
                                         const llm4d_config *cfg, const llm4d_traffic_kept *kept, llm4d_traffic *out,
                                         llm4d_err *err) {
    const int M = part->mp_size, train = !cfg->forward_only;
    if (M <= 1) return LLM4D_OK;
    const llm4d_model_config *m = &cfg->model;
    tp_list l = {out, M, err, LLM4D_OK};
    const int sp = part->sequence_parallel;
    const size_t N = (size_t)layout->B * layout->T, Nl = sp ? N / (size_t)M : N, C = (size_t)m->hidden_size;
    const llm4d_ftype act = layout->act;
    /* recompute runs each block's forward again in backward; a block keeps only its own tokens of the LayerNorm
     * outputs without it (gpt.h llm4d_gpt_ln_local); the slots hold a weight pass's stash only without it (gpt.c) */
    const int again = train && layout->recompute;
    const int ln_local = sp && !layout->recompute, split = layout->split_backward && !layout->recompute;
    /* the head's chunks of rows (gpt.c: HEAD_ROWS, 512) */
    const size_t rows = N < 512 ? N : 512, nch = (N + rows - 1) / rows, tail = N - (nch - 1) * rows;
    enum { F = LLM4D_AT_FORWARD, B = LLM4D_AT_BACKWARD, W = LLM4D_AT_WEIGHT };
    for (int c = 0; c < part->n_chunks; c++) {
        const int nl = part->layer_hi[c] - part->layer_lo[c];
        const int first = part->embedding && c == 0, last = part->head && c == part->n_chunks - 1;
        /* forward (block.c llm4d_gpt_block_forward): f before c_attn and c_fc (sequence parallel: the LayerNorm
         * outputs gathered), g after the two row-parallel layers; recompute runs it again in backward */
        for (int pass = 0; pass < (again ? 2 : 1); pass++) {
            const int when = pass ? B : F;
            if (sp) tp_gather(&l, LLM4D_TW_TP_BLOCK, when, c, Nl * C, act, 2 * nl);
            tp_sum(&l, sp, LLM4D_TW_TP_BLOCK, when, c, N * C, Nl * C, 2 * nl);
        }
        /* backward: g's conjugate (sequence parallel: the output gradients gathered, in the activations' type),
         * f's (the LayerNorm outputs' gradients summed), the LayerNorm outputs gathered again for the weight
         * gradients when only this rank's are kept, and again in a split backward's weight pass */
        const int nb = train ? nl : 0;
        if (sp) tp_gather(&l, LLM4D_TW_TP_BLOCK, B, c, Nl * C, act, 2 * nb);
        tp_sum(&l, sp, LLM4D_TW_TP_BLOCK, B, c, N * C, Nl * C, 2 * nb);
        if (ln_local) tp_gather(&l, LLM4D_TW_TP_BLOCK, B, c, Nl * C, act, 2 * nb);
        if (ln_local && split) tp_gather(&l, LLM4D_TW_TP_BLOCK, W, c, Nl * C, act, 2 * nb);
        if (first) { /* embed.c: the lookup's partial sums; backward gathers the gradient (fp32) */
            tp_sum(&l, sp, LLM4D_TW_TP_EMBED, F, c, N * C, Nl * C, 1);
            if (sp) tp_gather(&l, LLM4D_TW_TP_EMBED, B, c, Nl * C, LLM4D_F32, train);
        }
        if (last) { /* embed.c: ln_f gathered; per chunk of rows MAX of n, SUM of 2n; d(ln_f out) summed */
            if (sp) tp_gather(&l, LLM4D_TW_TP_HEAD, F, c, Nl * C, act, 1);
            tp_add(&l, LLM4D_TW_TP_XENT, LLM4D_COMM_OP_ALLREDUCE, LLM4D_COMM_F32, F, c, rows, (int)nch - 1);
            tp_add(&l, LLM4D_TW_TP_XENT, LLM4D_COMM_OP_ALLREDUCE, LLM4D_COMM_F32, F, c, 2 * rows, (int)nch - 1);
            tp_add(&l, LLM4D_TW_TP_XENT, LLM4D_COMM_OP_ALLREDUCE, LLM4D_COMM_F32, F, c, tail, 1);
            tp_add(&l, LLM4D_TW_TP_XENT, LLM4D_COMM_OP_ALLREDUCE, LLM4D_COMM_F32, F, c, 2 * tail, 1);
            tp_sum(&l, sp, LLM4D_TW_TP_HEAD, F, c, N * C, Nl * C, train);
        }
    }
    /* the engine (tp_finish; not in a forward-only stack): the kept part of every partial entry, in its tp_slots
     * boxes, one all-reduce */
    size_t pack_n = 0;
    for (int e = 0; e < kept->shape->n_reduced; e++)
        if (kept->shape->reduced[e].tp_partial)
            pack_n += (size_t)kept->shape->reduced[e].tp_slots * llm4d_traffic_kept_len(kept, e);
    if (l.rc == LLM4D_OK && train && pack_n) {
        const llm4d_traffic_call call = {.what = LLM4D_TW_TP_PARTIAL, .op = LLM4D_COMM_OP_ALLREDUCE,
                                         .group = LLM4D_TG_MODEL, .dtype = LLM4D_COMM_F32,
                                         .when = LLM4D_AT_BACKWARD_END, .blocking = 1, .id = -1, .count = pack_n,
                                         .len = pack_n, .per_step = 1};
        l.rc = llm4d_traffic_add(out, &call, err);
    }
    return l.rc;
}
