/* pipeline.h — pipeline parallelism: the executor of a schedule (schedule.h), and the engine (engine.h) that keeps
 * the tied embedding's two copies equal. Which stage holds what is the plan's (pp_plan.h).
 *
 * The executor runs a step's list of actions: a forward of chunk c for a micro-batch reads its input from the
 * previous stage (received into a ring of receive buffers, then copied into the chunk's activation slot) and
 * sends its output to the next; a backward receives its output gradient from the next stage and sends its input
 * gradient to the previous; every transfer is a non-blocking send or receive, each receive posted one compute
 * action ahead of the action that needs it. A send's buffer (the slot's output or input gradient) is not reused
 * before the send completes. The time each stage waits for a receive is its idle time (the bubble, measured).
 *
 * The tied embedding: the first and the last stage each hold the token embedding (the lookup on one, the LM head
 * on the other; params.h), initialised identically; after backward this engine sums their gradients over the
 * embedding group (the two ranks, one all-reduce of the gradient elements the storage keeps: the whole embedding,
 * or a ZeRO shard of it), so both apply the same update and stay bit-identical. The first stage's copy is the one
 * saved and counted in the gradient norm. */
#ifndef LLM4D_PARALLEL_PIPELINE_H
#define LLM4D_PARALLEL_PIPELINE_H

#include "comm/comm.h"
#include "config/config.h"
#include "parallel/engine.h"
#include "parallel/executor.h"
#include "parallel/pp_plan.h"
#include "parallel/schedule.h"
#include "parallel/traffic.h"

typedef struct {
    llm4d_engine base;         /* the reducer: the tied embedding's gradients over the embedding group */
    llm4d_executor exec;       /* the executor (executor.h): runs a step's schedule */
    llm4d_engine_stack *stack;
    llm4d_gpt *g;
    llm4d_comm *pp;            /* the pipe group: rank = stage */
    llm4d_comm *emb;           /* the first and last stage (owned); NULL on the other stages or without a pipeline */
    int P, V, stage;
    llm4d_pp_schedule train;   /* this stage's list for a training step */
    void **rbuf;               /* receive ring: [2 x recv_depth] buffers of one activation (inputs, then gradients) */
    int nrbuf;
    int *rbuf_busy;
    llm4d_comm_req *rreq;      /* [nrbuf] */
    int *slot_mb;              /* [V x slots] micro-batch in each slot, -1 free */
    int *slot_of;              /* [V x M] slot of each micro-batch per chunk, -1 none */
    llm4d_comm_req *sreq;      /* [V x slots x 2] pending sends from each slot (output, input gradient) */
    int max_slots, max_M;
    double idle_s;             /* this step: time waiting for receives */
    double busy_s;             /* this step: time computing */
    double op_s[3];            /* this step: time in forwards, backwards, weight passes (B includes W unless split) */
    int op_n[3];               /* and how many of each ran */
    llm4d_err err;
    int failed;
} llm4d_pipeline;

/* Build the executor for this stage: the plan's training schedule, the buffers, and the embedding group (split from
 * pp; collective over it). The model must have been created with the plan's part and layout (llm4d_pp_plan_stage). */
llm4d_code llm4d_pipeline_init(llm4d_pipeline *pl, llm4d_engine_stack *stack, llm4d_comm *pp, const llm4d_pp_plan *plan,
                               llm4d_err *err);
/* The bytes of receive buffers llm4d_pipeline_init allocates for `stage` (activations of act_bytes bytes; a memory
 * plan). */
llm4d_code llm4d_pipeline_bytes(const llm4d_pp_plan *plan, int stage, size_t act_bytes, size_t *bytes, llm4d_err *err);

/* Appends to out what a step of stage `stage` moves (traffic.h), as the executor and the engine do it: per local
 * chunk and micro-batch the schedule's sends and receives of activations (RECV_F, SEND_F: not into the first
 * virtual stage, not out of the last) and of their gradients (RECV_B, SEND_B, the reverse), non-blocking, one
 * activation of the part's layout each ([tokens held, C] in the residual stream's type; 16-bit
 * values as bytes); on the first and the last stage of a tied model, the embedding's gradient all-reduced over the
 * embedding group after backward, one call per token-embedding entry the storage keeps (kept). A forward-only
 * configuration (`llm4d eval`) sends only activations, with the forward-only schedule. */
llm4d_code llm4d_pipeline_traffic(const llm4d_pp_plan *plan, int stage, const llm4d_model_part *part,
                                  const llm4d_gpt_layout *layout, const llm4d_config *cfg,
                                  const llm4d_traffic_kept *kept, llm4d_traffic *out, llm4d_err *err);

/* Run the step's schedule for micro-batches mbs[0..M) (the forward-only schedule when forward_only, for
 * evaluation: mbs need no grad); the last stage's model accumulates their losses. pl->exec runs this. */
llm4d_code llm4d_pipeline_run(llm4d_pipeline *pl, const llm4d_micro *mbs, int M, int forward_only, llm4d_err *err);

#endif
