/* pp_plan.h — the pipeline of a run, decided once from the configuration: which schedule runs, how the blocks split
 * into virtual stages, and what each stage holds. The trainer (its model part and layout, the engines, the memory
 * plan) and the launcher's checks read this plan; nothing else parses the schedule's name or re-derives a placement.
 *
 * The P stages of a pipeline (the ranks of one pipe group) each hold consecutive layers: P x V virtual stages of
 * consecutive blocks, placed as schedule.h says (virtual stage v = c P + s on stage s; V > 1 interleaves them), the
 * token and position embeddings with the first virtual stage, ln_f, the LM head and the loss with the last. The
 * split balances the stages' costs by default (the LM head and the loss counted with the last stage: pp_balance.h);
 * pp_split even gives every stage the same number of blocks, pp_layers gives the blocks of each virtual stage, and
 * pp_account_embedding_loss counts the embedding and the loss as one block each of the first and last virtual stage
 * when splitting evenly (Megatron's --account-for-embedding-in-pipeline-split / -loss-). The split is checked to
 * hold every block exactly once (a layer left out or held twice is refused, not trained silently wrong). The schedule asked for is resolved
 * once: virtual_pp_degree > 1 with 1F1B means the interleaved one (Paddle's convention), and what runs with
 * recompute is the schedule's own property (schedule.h llm4d_pp_props). */
#ifndef LLM4D_PARALLEL_PP_PLAN_H
#define LLM4D_PARALLEL_PP_PLAN_H

#include "config/config.h"
#include "core/log.h"
#include "model/gpt.h"
#include "parallel/pp_balance.h"
#include "parallel/schedule.h"

typedef struct {
    int P, V, M;                 /* stages, chunks per stage, micro-batches per step */
    const llm4d_pp_props *asked; /* the schedule the configuration names */
    const llm4d_pp_props *runs;  /* the one that runs (asked, or its with_recompute) */
    int *lo, *hi;                /* [P V] the blocks [lo[v], hi[v]) of each virtual stage */
    int64_t *cost;               /* [P V] each virtual stage's predicted cost per token (pp_balance.h) */
    int balanced;                /* the split was balanced by cost (no pp_layers, pp_split balanced) */
    llm4d_pp_schedule *sched;    /* [P] every stage's list, when kept (llm4d_pp_plan_keep_schedules); else NULL */
} llm4d_pp_plan;

/* The plan of cfg (finalized): the schedule resolved and fitted to the step's micro-batches, the blocks split. With
 * pp_degree 1 only a pp_layers split is checked (no schedule). Every problem is a user error naming it. */
llm4d_code llm4d_pp_plan_make(llm4d_pp_plan *p, const llm4d_config *cfg, llm4d_err *err);
/* The same, a balanced split taken from memo when it has it (pp_balance.h; NULL: computed). */
llm4d_code llm4d_pp_plan_make_memo(llm4d_pp_plan *p, const llm4d_config *cfg, llm4d_pp_balance_memo *memo,
                                   llm4d_err *err);
void llm4d_pp_plan_free(llm4d_pp_plan *p);
/* Build every stage's schedule once and keep it in the plan, for a caller that asks for the stages' lists, slots
 * and receive buffers many times (the planner: each stage's memory plan, traces and simulation); without it each
 * asks builds its own. A list that cannot be built is not kept (its user then builds it and reports why). */
llm4d_code llm4d_pp_plan_keep_schedules(llm4d_pp_plan *p, llm4d_err *err);
/* Stage `stage`'s schedule: the kept one (*owned 0), or built into *tmp (*owned 1: free it). */
llm4d_code llm4d_pp_plan_schedule(const llm4d_pp_plan *p, int stage, llm4d_pp_schedule *tmp,
                                  const llm4d_pp_schedule **out, llm4d_err *err);
/* Stage `stage`'s part of the model (its chunks, the embedding, the head) and its layout (activation slots per
 * chunk, split backward) from the plan. */
llm4d_code llm4d_pp_plan_stage(const llm4d_pp_plan *p, int stage, llm4d_model_part *part, llm4d_gpt_layout *layout,
                               llm4d_err *err);
/* The plan in the start-up log: the schedule, and which stage holds which blocks. */
void llm4d_pp_plan_log(const llm4d_pp_plan *p, int recompute, const llm4d_log *log);

#endif
