/* pipeline.c — the stage split, the schedule executor and the tied-embedding engine (see pipeline.h). */
#include "parallel/pipeline.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_trace.h"
#include "core/timer.h"

/* the executor's table, defined with the executor below */
static const llm4d_executor_ops pipeline_exec_ops;

/* ---- the tied embedding ---- */

static llm4d_pipeline *of(llm4d_engine *e) { return (llm4d_pipeline *)e; }

static llm4d_code pl_finish(llm4d_engine *e, llm4d_err *err) {
    llm4d_pipeline *pl = of(e);
    if (!pl->emb) return LLM4D_OK;
    const double t0 = llm4d_now();
    const llm4d_param_table *t = &pl->g->table;
    for (int i = 0; i < t->n; i++) {
        int64_t j0, j1;
        if (t->p[i].kind != LLM4D_P_WTE) continue;
        float *gr = llm4d_engines_grad_view(pl->stack, i, &j0, &j1);
        if (gr && j1 > j0)
            LLM4D_TRY(llm4d_comm_dev_allreduce(pl->emb, gr, (size_t)(j1 - j0), LLM4D_COMM_F32, LLM4D_COMM_SUM, err));
    }
    e->comm_wait_s = e->comm_total_s = llm4d_now() - t0;
    return LLM4D_OK;
}

/* The transfers in flight, moved forward now and then (comm.h llm4d_comm_progress). */
static void progress(llm4d_pipeline *pl) {
    if (!pl->failed && llm4d_comm_progress(pl->pp, &pl->err) != LLM4D_OK) pl->failed = 1;
}

static void pl_grads_done(llm4d_engine *e, int grp, const llm4d_event *ready) {
    (void)grp, (void)ready;
    progress(of(e));
}

/* The embedding group's traffic is counted per step, like the groups the trainer resets. */
static void pl_begin_step(llm4d_engine *e, int n_micro) {
    (void)n_micro;
    llm4d_pipeline *pl = of(e);
    if (pl->emb) llm4d_comm_stats_reset(pl->emb);
}

static void pl_stats(llm4d_engine *e, llm4d_engine_stats *out) {
    llm4d_pipeline *pl = of(e);
    out->pp_idle_s += pl->idle_s;
    out->pp_busy_s += pl->busy_s;
    for (int k = 0; k < 3; k++) out->pp_op_s[k] += pl->op_s[k], out->pp_op_n[k] += pl->op_n[k];
    out->pp_stage = pl->stage;
    if (pl->emb) llm4d_comm_stats_add(&out->comm, &pl->emb->stats);
}

static llm4d_executor *pl_executor(llm4d_engine *e) { return &of(e)->exec; }

static void pl_describe(llm4d_engine *e, char *buf, size_t n) {
    llm4d_pipeline *pl = of(e);
    const llm4d_model_part *p = &pl->g->table.part;
    int k = snprintf(buf, n, "pipeline stage %d of %d, %s schedule, %d micro-batches per step: blocks", pl->stage,
                     pl->P, llm4d_pp_kind_name(pl->train.kind), pl->train.M);
    for (int c = 0; c < p->n_chunks && k < (int)n; c++)
        k += snprintf(buf + k, n - (size_t)k, " [%d, %d)%s", p->layer_lo[c], p->layer_hi[c],
                      c + 1 < p->n_chunks ? "," : "");
    if (k < (int)n)
        snprintf(buf + k, n - (size_t)k, "%s%s; activation slots per chunk %d", p->embedding ? ", embeddings" : "",
                 p->head ? ", ln_f + LM head + loss (tied embedding summed with stage 0)" : "", pl->train.peak[0]);
}

static void pl_destroy(llm4d_engine *e) {
    llm4d_pipeline *pl = of(e);
    llm4d_gpt *g = pl->g;
    for (int k = 0; k < pl->nrbuf; k++)
        if (pl->rbuf && pl->rbuf[k])
            g->be->free(g->be, g->mem, LLM4D_MEM_COMM, pl->rbuf[k], llm4d_gpt_act_bytes(g));
    free(pl->rbuf);
    free(pl->rbuf_busy);
    free(pl->rreq);
    free(pl->slot_mb);
    free(pl->slot_of);
    free(pl->sreq);
    llm4d_comm_destroy(pl->emb);
    llm4d_pp_schedule_free(&pl->train);
    memset(pl, 0, sizeof *pl);
}

static const llm4d_engine_ops pipeline_ops = {
    .name = "pipeline",
    .grads_done = pl_grads_done,
    .begin_step = pl_begin_step,
    .finish_backward = pl_finish,
    .describe = pl_describe,
    .stats = pl_stats,
    .executor = pl_executor,
    .destroy = pl_destroy,
};

/* Receive buffers: the most receives a schedule keeps outstanding per direction (at least 2), both directions. */
static int rbufs(const llm4d_pp_schedule *s) { return 2 * (s->recv_depth > 2 ? s->recv_depth : 2); }

llm4d_code llm4d_pipeline_bytes(const llm4d_pp_plan *plan, int stage, size_t act_bytes, size_t *bytes, llm4d_err *err) {
    llm4d_pp_schedule tmp;
    const llm4d_pp_schedule *s;
    LLM4D_TRY(llm4d_pp_plan_schedule(plan, stage, &tmp, &s, err));
    *bytes = (size_t)rbufs(s) * act_bytes;
    if (s == &tmp) llm4d_pp_schedule_free(&tmp);
    return LLM4D_OK;
}

llm4d_code llm4d_pipeline_init(llm4d_pipeline *pl, llm4d_engine_stack *stack, llm4d_comm *pp, const llm4d_pp_plan *plan,
                               llm4d_err *err) {
    const int V = plan->V, M = plan->M;
    memset(pl, 0, sizeof *pl);
    pl->base.ops = &pipeline_ops;
    pl->exec.ops = &pipeline_exec_ops;
    pl->stack = stack;
    pl->g = stack->g;
    pl->pp = pp;
    pl->P = llm4d_comm_size(pp);
    pl->stage = llm4d_comm_rank(pp);
    pl->V = V;
    LLM4D_TRY(llm4d_pp_schedule_build(&pl->train, plan->runs->kind, pl->P, V, M, pl->stage, err));
    /* the embedding group: the stages of the first and the last virtual stage (the others split off into a group
     * they never use) */
    llm4d_gpt *g = pl->g;
    const int ends = pl->stage == llm4d_pp_stage_of(pl->P, 0) || pl->stage == llm4d_pp_stage_of(pl->P, pl->P * V - 1);
    llm4d_comm *grp = NULL;
    LLM4D_TRY(llm4d_comm_split(pp, ends ? 0 : 1, pl->stage, "embedding", &grp, err));
    if (ends && !g->cfg.untied) pl->emb = grp; /* an untied LM head has no copy to keep equal */
    else llm4d_comm_destroy(grp);
    pl->max_M = M;
    for (int c = 0; c < V; c++) {
        const int ns = g->layout.slots[c] > 0 ? g->layout.slots[c] : 1;
        if (ns > pl->max_slots) pl->max_slots = ns;
    }
    pl->nrbuf = rbufs(&pl->train);
    pl->rbuf = calloc((size_t)pl->nrbuf, sizeof *pl->rbuf);
    pl->rbuf_busy = calloc((size_t)pl->nrbuf, sizeof *pl->rbuf_busy);
    pl->rreq = calloc((size_t)pl->nrbuf, sizeof *pl->rreq);
    pl->slot_mb = malloc((size_t)V * pl->max_slots * sizeof *pl->slot_mb);
    pl->sreq = calloc((size_t)V * pl->max_slots * 2, sizeof *pl->sreq);
    int ok = pl->rbuf && pl->rbuf_busy && pl->rreq && pl->slot_mb && pl->sreq;
    for (int k = 0; ok && k < pl->nrbuf; k++)
        ok = (pl->rbuf[k] = g->be->alloc(g->be, g->mem, LLM4D_MEM_COMM, llm4d_gpt_act_bytes(g))) != NULL;
    if (!ok) {
        pl_destroy(&pl->base);
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory for the pipeline's buffers");
    }
    return LLM4D_OK;
}

/* ---- what a step moves ---- */

llm4d_code llm4d_pipeline_traffic(const llm4d_pp_plan *plan, int stage, const llm4d_model_part *part,
                                  const llm4d_gpt_layout *layout, const llm4d_config *cfg,
                                  const llm4d_traffic_kept *kept, llm4d_traffic *out, llm4d_err *err) {
    const int P = plan->P, V = plan->V, forward_only = cfg->forward_only;
    const llm4d_model_config *m = &cfg->model;
    /* a message as llm4d_pipeline_run sends it: llm4d_gpt_act_elems of the residual stream's type */
    const int M = part->mp_size > 0 ? part->mp_size : 1;
    const size_t tokens = (size_t)layout->B * layout->T / (size_t)(part->sequence_parallel ? M : 1);
    const size_t elems = tokens * (size_t)m->hidden_size;
    const int f32 = layout->res == LLM4D_F32;
    const size_t count = f32 ? elems : elems * llm4d_ftype_size(layout->res);
    /* Every schedule runs each chunk's forward and backward once per micro-batch, receiving before them and
     * sending after them what crosses a stage boundary (schedule.h; llm4d_pp_schedule_check holds every list to
     * it): chunk c, virtual stage v, receives its input (v > 0) and sends its output (v < V P - 1) plan->M times a
     * step, and in training receives its output's gradient (v < V P - 1) and sends its input's (v > 0) as often.
     * Counted so rather than by walking the list: the planner asks for this on every layout it times. */
    static const struct {
        uint8_t what, comm, first_has, fwd; /* first_has: virtual stage 0 has it; else the last one has it */
    } msg[] = {{LLM4D_TW_PP_ACT, LLM4D_COMM_OP_RECV, 0, 1},
               {LLM4D_TW_PP_ACT, LLM4D_COMM_OP_SEND, 1, 1},
               {LLM4D_TW_PP_GRAD, LLM4D_COMM_OP_RECV, 1, 0},
               {LLM4D_TW_PP_GRAD, LLM4D_COMM_OP_SEND, 0, 0}};
    llm4d_code rc = LLM4D_OK;
    for (int c = 0; rc == LLM4D_OK && c < V; c++) {
        const int v = llm4d_pp_vstage(P, c, stage), first = v == 0, last = v == P * V - 1;
        for (size_t k = 0; rc == LLM4D_OK && k < sizeof msg / sizeof msg[0]; k++) {
            if ((forward_only && !msg[k].fwd) || (first && !msg[k].first_has) || (last && msg[k].first_has)) continue;
            const llm4d_traffic_call call = {
                .what = msg[k].what, .op = msg[k].comm, .group = LLM4D_TG_PIPE,
                .dtype = f32 ? LLM4D_COMM_F32 : LLM4D_COMM_BYTE,
                .when = msg[k].fwd ? LLM4D_AT_FORWARD : LLM4D_AT_BACKWARD, .blocking = 0, .id = c, .count = count,
                .len = count, .per_micro = 1};
            rc = llm4d_traffic_add(out, &call, err);
        }
    }
    /* the tied embedding (pl_finish): the stages of the first and the last virtual stage, one all-reduce per kept
     * token-embedding entry */
    const int ends = stage == llm4d_pp_stage_of(P, 0) || stage == llm4d_pp_stage_of(P, P * V - 1);
    if (forward_only || !ends || m->untied) return rc;
    for (int e = 0; rc == LLM4D_OK && e < kept->shape->n_reduced; e++) {
        const size_t len = kept->shape->reduced[e].wte ? llm4d_traffic_kept_len(kept, e) : 0;
        if (!len) continue;
        const llm4d_traffic_call call = {.what = LLM4D_TW_PP_EMB, .op = LLM4D_COMM_OP_ALLREDUCE, .group = LLM4D_TG_EMB,
                                         .dtype = LLM4D_COMM_F32, .when = LLM4D_AT_BACKWARD_END, .blocking = 1,
                                         .id = -1, .count = len, .len = len, .per_step = 1};
        rc = llm4d_traffic_add(out, &call, err);
    }
    return rc;
}

/* ---- the executor ---- */

#define TRY_P2P(expr)                                                                                            \
    do {                                                                                                         \
        if (!pl->failed && (expr) != LLM4D_OK) pl->failed = 1;                                                   \
    } while (0)

static int tag_of(const llm4d_pipeline *pl, int mb, int v, int dir) {
    return ((mb % 1024) * pl->V * pl->P + v) * 2 + dir; /* unique among the messages ever in flight together */
}

static void wait_req(llm4d_pipeline *pl, llm4d_comm_req *r, double *acc) {
    if (!r->comm) return;
    const double t0 = llm4d_now();
    TRY_P2P(llm4d_comm_wait(r, &pl->err));
    if (acc) *acc += llm4d_now() - t0;
}

/* A free slot of chunk c for micro-batch mb (its earlier sends finished first). */
static int take_slot(llm4d_pipeline *pl, int c, int mb, int M) {
    const int ns = pl->g->layout.slots[c] > 0 ? pl->g->layout.slots[c] : 1;
    for (int s = 0; s < ns; s++) {
        int *owner = &pl->slot_mb[c * pl->max_slots + s];
        if (*owner >= 0) continue;
        for (int d = 0; d < 2; d++) wait_req(pl, &pl->sreq[(c * pl->max_slots + s) * 2 + d], &pl->idle_s);
        *owner = mb;
        pl->slot_of[c * M + mb] = s;
        return s;
    }
    LLM4D_ASSERT(0, "chunk %d: no free activation slot for micro-batch %d (%d slots)", c, mb, ns);
    return -1;
}

static int take_rbuf(llm4d_pipeline *pl) {
    for (int k = 0; k < pl->nrbuf; k++)
        if (!pl->rbuf_busy[k]) {
            pl->rbuf_busy[k] = 1;
            return k;
        }
    LLM4D_ASSERT(0, "no free pipeline receive buffer (%d)", pl->nrbuf);
    return -1;
}

/* op 0 forward, 1 backward, 2 weight pass, begun at t0 */
static void computed(llm4d_pipeline *pl, int op, double t0) {
    const double dt = llm4d_now() - t0;
    pl->busy_s += dt;
    pl->op_s[op] += dt;
    pl->op_n[op]++;
}

llm4d_code llm4d_pipeline_run(llm4d_pipeline *pl, const llm4d_micro *mbs, int M, int forward_only, llm4d_err *err) {
    llm4d_gpt *g = pl->g;
    llm4d_backend *be = g->be;
    const int P = pl->P, V = pl->V, VP = P * V, stage = pl->stage;
    /* a message is a chunk's activation or its gradient in the residual stream's type; 16-bit values only move, so
     * they travel as raw bytes */
    const size_t bytes = llm4d_gpt_act_bytes(g);
    const int f32 = g->res == LLM4D_F32;
    const size_t elems = f32 ? llm4d_gpt_act_elems(g) : bytes;
    const llm4d_comm_dtype mt = f32 ? LLM4D_COMM_F32 : LLM4D_COMM_BYTE;
    llm4d_pp_schedule fwd = {0};
    const llm4d_pp_schedule *s = &pl->train;
    if (forward_only) {
        LLM4D_TRY(llm4d_pp_schedule_build(&fwd, LLM4D_PP_FORWARD, P, V, M, stage, err));
        s = &fwd;
    } else {
        LLM4D_ASSERT(M == pl->train.M, "a step of %d micro-batches, the schedule has %d", M, pl->train.M);
    }
    int *rbuf_of = malloc((size_t)2 * V * M * sizeof *rbuf_of); /* receive buffer of (dir, chunk, mb) */
    free(pl->slot_of);
    pl->slot_of = malloc((size_t)V * M * sizeof *pl->slot_of);
    if (!rbuf_of || !pl->slot_of) {
        free(rbuf_of);
        llm4d_pp_schedule_free(&fwd);
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory running the pipeline");
    }
    for (int i = 0; i < V * M; i++) pl->slot_of[i] = -1;
    for (int i = 0; i < V * pl->max_slots; i++) pl->slot_mb[i] = -1;
    pl->idle_s = pl->busy_s = 0;
    memset(pl->op_s, 0, sizeof pl->op_s);
    memset(pl->op_n, 0, sizeof pl->op_n);
    for (int k = 0; k < s->n && !pl->failed; k++) {
        const llm4d_pp_action *a = &s->a[k];
        const int c = a->chunk, mb = a->mb, v = llm4d_pp_vstage(P, c, stage);
        const llm4d_micro *m = &mbs[mb];
        int *rb = &rbuf_of[((a->op == LLM4D_PP_B || a->op == LLM4D_PP_RECV_B) * V + c) * M + mb];
        const int sl = pl->slot_of[c * M + mb];
        llm4d_comm_req *sreq = sl >= 0 ? &pl->sreq[(c * pl->max_slots + sl) * 2] : NULL;
        progress(pl);
        switch (a->op) {
        case LLM4D_PP_RECV_F:
        case LLM4D_PP_RECV_B: {
            const int fwd_dir = a->op == LLM4D_PP_RECV_F;
            *rb = take_rbuf(pl);
            TRY_P2P(llm4d_comm_dev_irecv(pl->pp, pl->rbuf[*rb], elems, mt,
                                         llm4d_pp_neighbour(P, V, v, fwd_dir ? -1 : 1),
                                     tag_of(pl, mb, v, !fwd_dir), &pl->rreq[*rb], &pl->err));
            break;
        }
        case LLM4D_PP_F: {
            const int slot = take_slot(pl, c, mb, M);
            if (v > 0) {
                wait_req(pl, &pl->rreq[*rb], &pl->idle_s);
                be->copy(be, llm4d_gpt_chunk_input(g, c, slot).p, pl->rbuf[*rb], bytes);
                pl->rbuf_busy[*rb] = 0;
            }
            const double t0 = llm4d_now();
            llm4d_gpt_chunk_forward(g, c, slot, m);
            computed(pl, 0, t0);
            llm4d_trace_pass(llm4d_comm_tracer(pl->pp), LLM4D_TR_FORWARD, mb, V > 1 ? c : -1, t0);
            if (forward_only) pl->slot_mb[c * pl->max_slots + slot] = -1; /* reusable once its send is done */
            break;
        }
        case LLM4D_PP_SEND_F:
            TRY_P2P(llm4d_comm_dev_isend(pl->pp, llm4d_gpt_chunk_output(g, c, sl).p, elems, mt,
                                         llm4d_pp_neighbour(P, V, v, 1),
                                     tag_of(pl, mb, v + 1, 0), &sreq[0], &pl->err));
            break;
        case LLM4D_PP_B: {
            llm4d_ctensor dout = llm4d_ct(NULL, g->res);
            if (v < VP - 1) {
                wait_req(pl, &pl->rreq[*rb], &pl->idle_s);
                dout.p = pl->rbuf[*rb];
            }
            wait_req(pl, &sreq[0], &pl->idle_s); /* backward overwrites the slot's output (recompute) */
            const double t0 = llm4d_now();
            llm4d_gpt_chunk_backward(g, c, sl, m, dout, s->split);
            computed(pl, 1, t0);
            llm4d_trace_pass(llm4d_comm_tracer(pl->pp), LLM4D_TR_BACKWARD, mb, V > 1 ? c : -1, t0);
            if (v < VP - 1) pl->rbuf_busy[*rb] = 0;
            if (!s->split) pl->slot_mb[c * pl->max_slots + sl] = -1;
            break;
        }
        case LLM4D_PP_SEND_B:
            TRY_P2P(llm4d_comm_dev_isend(pl->pp, llm4d_gpt_chunk_dinput(g, c, sl).p, elems, mt,
                                     llm4d_pp_neighbour(P, V, v, -1), tag_of(pl, mb, v - 1, 1), &sreq[1], &pl->err));
            break;
        case LLM4D_PP_W: {
            const double t0 = llm4d_now();
            llm4d_gpt_chunk_backward_weight(g, c, sl, m);
            computed(pl, 2, t0);
            llm4d_trace_pass(llm4d_comm_tracer(pl->pp), LLM4D_TR_WEIGHT, mb, V > 1 ? c : -1, t0);
            pl->slot_mb[c * pl->max_slots + sl] = -1;
            break;
        }
        }
    }
    for (int i = 0; i < V * pl->max_slots * 2; i++) wait_req(pl, &pl->sreq[i], &pl->idle_s);
    for (int k = 0; k < pl->nrbuf; k++) wait_req(pl, &pl->rreq[k], &pl->idle_s), pl->rbuf_busy[k] = 0;
    free(rbuf_of);
    llm4d_pp_schedule_free(&fwd);
    if (pl->failed) {
        pl->failed = 0;
        *err = pl->err;
        return err->code;
    }
    return LLM4D_OK;
}

static llm4d_code pl_exec_run(llm4d_executor *x, const llm4d_micro *mbs, int M, int forward_only, llm4d_err *err) {
    llm4d_pipeline *pl = (llm4d_pipeline *)(void *)((char *)x - offsetof(llm4d_pipeline, exec));
    return llm4d_pipeline_run(pl, mbs, M, forward_only, err);
}

static const llm4d_executor_ops pipeline_exec_ops = {.name = "pipeline", .run = pl_exec_run};
