/* trace.c — recording one micro-batch of a rank's model part (see trace.h). The model is the trainer's: the same
 * part and layout (llm4d_stack_layout), the same code paths (tensor parallelism, sequence parallelism, recompute,
 * split backward, ZeRO's vocabulary blocks and hooks), only the backend and the tensor-parallel group record. */
#include "plan/trace.h"

#include <stdlib.h>
#include <string.h>

#include "parallel/stack.h"

llm4d_code llm4d_mbtrace_make(llm4d_mbtrace *t, const llm4d_config *cfg, const llm4d_topology *topo,
                            const llm4d_pp_plan *pp, const llm4d_backend *like, llm4d_err *err) {
    memset(t, 0, sizeof *t);
    LLM4D_TRY(llm4d_stack_layout(cfg, topo, pp, &t->part, &t->layout, err));
    llm4d_backend *be = NULL;
    llm4d_comm *mp = NULL;
    llm4d_code rc = llm4d_rec_backend_create(&be, &t->rec, like, err);
    if (rc == LLM4D_OK && t->part.mp_size > 1) rc = llm4d_rec_comm_create(&mp, &t->rec, t->part.mp_size, t->part.mp_rank, err);
    if (rc != LLM4D_OK) {
        if (be) be->destroy(be);
        return rc;
    }
    const llm4d_tp tp = llm4d_tp_make(mp, t->part.sequence_parallel);
    llm4d_mem mem = {0};
    llm4d_gpt g;
    t->rec.paused = 1; /* building the model (its initialisation) is not a step's work */
    const llm4d_gpt_spec spec = {&cfg->model, &t->part, &tp, &t->layout};
    rc = llm4d_gpt_create(&g, &spec, be, &mem, cfg->seed, err);
    t->rec.paused = 0;
    const int have_g = rc == LLM4D_OK;
    if (rc == LLM4D_OK) rc = llm4d_param_table_build(&t->table, &cfg->model, &t->part, err);
    if (rc == LLM4D_OK) {
        g.hooks = llm4d_rec_hooks(&t->rec, &g.table);
        const int B = t->layout.B, T = t->layout.T;
        const llm4d_micro mb = {
            .tokens = (const int32_t *)llm4d_rec_fake(&t->rec, (size_t)B * T * sizeof(int32_t)),
            .targets = (const int32_t *)llm4d_rec_fake(&t->rec, (size_t)B * T * sizeof(int32_t)),
            .weight = (const float *)llm4d_rec_fake(&t->rec, (size_t)B * T * sizeof(float)),
            .sample_ids = (const int64_t *)llm4d_rec_fake(&t->rec, (size_t)B * sizeof(int64_t)),
            .step = 1, .train = 1, .grad = 1, .B = B, .T = T};
        t->act_elems = llm4d_gpt_act_elems(&g);
        t->act_bytes = llm4d_gpt_act_bytes(&g);
        const llm4d_ctensor dout = llm4d_ct((const void *)llm4d_rec_fake(&t->rec, t->act_bytes), g.res);
        t->n_chunks = t->part.n_chunks;
        t->split = t->layout.split_backward && !t->layout.recompute;
        const int last = t->part.head ? t->n_chunks - 1 : -1;
        for (int c = 0; c < t->n_chunks; c++) {
            t->lo[LLM4D_TRACE_F][c] = t->rec.n;
            llm4d_gpt_chunk_forward(&g, c, 0, &mb);
            t->hi[LLM4D_TRACE_F][c] = t->lo[LLM4D_TRACE_B][c] = t->rec.n;
            llm4d_gpt_chunk_backward(&g, c, 0, &mb, c == last ? llm4d_ct(NULL, g.res) : dout, t->split);
            t->hi[LLM4D_TRACE_B][c] = t->lo[LLM4D_TRACE_W][c] = t->rec.n;
            if (t->split) llm4d_gpt_chunk_backward_weight(&g, c, 0, &mb);
            t->hi[LLM4D_TRACE_W][c] = t->rec.n;
        }
        llm4d_gpt_loss_take(&g);
        if (t->rec.failed) rc = llm4d_fail(err, LLM4D_ENOMEM, "out of memory recording the model's calls");
    }
    if (have_g) {
        g.hooks = (llm4d_gpt_hooks){0};
        llm4d_gpt_destroy(&g);
    }
    llm4d_comm_destroy(mp);
    be->destroy(be);
    if (rc != LLM4D_OK) llm4d_mbtrace_free(t);
    return rc;
}

void llm4d_mbtrace_free(llm4d_mbtrace *t) {
    llm4d_rec_free(&t->rec);
    if (t->table.p || t->table.g) llm4d_param_table_free(&t->table);
    memset(t, 0, sizeof *t);
}
