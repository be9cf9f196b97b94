/* tensor_parallel.c — summing the sequence-parallel partial gradients over the tensor-parallel group (see
 * tensor_parallel.h). */
#include "parallel/tensor_parallel.h"

#include <stdio.h>
#include <string.h>

#include "core/timer.h"

static llm4d_tensor_parallel *of(llm4d_engine *e) { return (llm4d_tensor_parallel *)e; }

/* Copy the kept part of every sp_partial entry's gradient to (dir 0) or from (dir 1) the pack; returns its length. */
static size_t pack(llm4d_tensor_parallel *tp, int dir) {
    llm4d_engine_stack *s = tp->stack;
    llm4d_backend *be = s->g->be;
    const llm4d_param_table *t = &s->g->table;
    size_t at = 0;
    for (int i = 0; i < t->n; i++) {
        if (!t->p[i].sp_partial) continue;
        int64_t j0, j1;
        float *gr = llm4d_engines_grad_view(s, i, &j0, &j1);
        if (!gr) continue;
        const size_t n = (size_t)(j1 - j0);
        if (dir == 0)
            be->copy(be, tp->pack + at, gr, n * sizeof(float));
        else
            be->copy(be, gr, tp->pack + at, n * sizeof(float));
        at += n;
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
             tp->pack ? ": sequence-parallel partial gradients (LayerNorms, row-parallel biases, wpe) summed after "
                        "backward"
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
        if (t->p[i].sp_partial) n += t->p[i].numel;
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
    if (!tp->pack) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory for the sequence-parallel gradient buffer");
    return LLM4D_OK;
}
