/* executor.c — the sequential executor (see executor.h): one micro-batch after another through the whole model. */
#include "parallel/executor.h"

static llm4d_code seq_run(llm4d_executor *x, const llm4d_micro *mbs, int M, int forward_only, llm4d_err *err) {
    llm4d_gpt *g = ((llm4d_sequential *)x)->g;
    for (int k = 0; k < M; k++) {
        const double tf = llm4d_trace_now(x->trace);
        llm4d_gpt_chunk_forward(g, 0, 0, &mbs[k]);
        if (forward_only) continue;
        const double tb = llm4d_trace_pass(x->trace, LLM4D_TR_FORWARD, k, -1, tf);
        llm4d_gpt_chunk_backward(g, 0, 0, &mbs[k], llm4d_ct(NULL, g->res), 0);
        llm4d_trace_pass(x->trace, LLM4D_TR_BACKWARD, k, -1, tb);
    }
    (void)err; /* nothing here fails: the tensor-parallel group's failures are the trainer's to collect */
    return LLM4D_OK;
}

static const llm4d_executor_ops sequential_ops = {.name = "sequential", .run = seq_run};

void llm4d_sequential_init(llm4d_sequential *x, llm4d_gpt *g) {
    LLM4D_ASSERT(g->table.part.n_chunks == 1 && g->table.part.embedding && g->table.part.head,
                 "the sequential executor runs a whole model");
    *x = (llm4d_sequential){.base = {.ops = &sequential_ops}, .g = g};
}
