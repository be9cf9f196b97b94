/* tensor_parallel.c — summing the sequence-parallel partial gradients over the tensor-parallel group (see
 * tensor_parallel.h). */
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
