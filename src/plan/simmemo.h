/* simmemo.h — the pipeline simulations a search has run, by their exact inputs.
 *
 * A search simulates the pipeline of every fitting layout it cannot rule out by its bound; many layouts differ only
 * in what does not reach the simulator (the data-parallel degree's end of step, the optimizer's placement), so the
 * same schedule with the same stage costs, send time and core-sharing rates is simulated again and again (GPT-3
 * 175B on 1024 hosts: 13716 simulations, 3364 distinct). The simulator is deterministic, so an entry keyed by every
 * input bit for bit (the schedule kind, P, V, M, the P x 3 x V costs, the send time, the P + 1 rates) answers
 * exactly what a new run would. Owned by the caller and passed in explicitly (llm4d_predictor.sim); NULL simulates
 * every time (`llm4d plan --no_memo`). */
#ifndef LLM4D_PLAN_SIMMEMO_H
#define LLM4D_PLAN_SIMMEMO_H

#include "core/error.h"
#include "parallel/schedule.h"

typedef struct llm4d_sim_memo llm4d_sim_memo;

llm4d_code llm4d_sim_memo_create(llm4d_sim_memo **out, llm4d_err *err);
void llm4d_sim_memo_destroy(llm4d_sim_memo *m);

/* llm4d_pp_schedule_simulate of stages (kind, P, V, M as in stages[0]) with costs (rate required: P + 1 entries),
 * its span and busy[P] from the memo when these inputs were simulated before. m NULL: simulated. */
llm4d_code llm4d_sim_memo_simulate(llm4d_sim_memo *m, const llm4d_pp_schedule *stages, int P,
                                   const llm4d_pp_costs *costs, double *span, double *busy, llm4d_err *err);

#endif
