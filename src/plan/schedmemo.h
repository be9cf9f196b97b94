/* schedmemo.h — the stages' pipeline schedules a search has built, by (kind, P, V, M), lent to its layouts.
 *
 * Every stage's action list of a pipeline is a function of the schedule the layout runs (its kind after recompute),
 * P, V and M alone (parallel/schedule.h llm4d_pp_schedule_build), and a search's layouts repeat those four across
 * their ZeRO stage, offload, sequence parallelism and split choices: building each layout's P lists afresh
 * (llm4d_pp_plan_keep_schedules) was a sixth of a large search (a 145B model on 192 hosts of 8: 22 of 121 s). The
 * memo builds them once and lends them to every plan that asks; a plan holding a loan must give it back before it
 * is freed. A layout's lists never change once built, so a loan is what building them would have given, bit for
 * bit. The memo serves one thread; the search empties it between blocks of layouts (one (mp, pp) pair each, whose
 * P is fixed), so what it holds stays within one block's distinct (kind, V, M). */
#ifndef LLM4D_PLAN_SCHEDMEMO_H
#define LLM4D_PLAN_SCHEDMEMO_H

#include "core/error.h"
#include "parallel/pp_plan.h"

typedef struct llm4d_sched_memo llm4d_sched_memo;

llm4d_code llm4d_sched_memo_create(llm4d_sched_memo **out, llm4d_err *err);
void llm4d_sched_memo_destroy(llm4d_sched_memo *m);
/* Forget every schedule (none may be on loan). */
void llm4d_sched_memo_clear(llm4d_sched_memo *m);

/* pp->sched lent from the memo (built there the first time), as llm4d_pp_plan_keep_schedules would keep it: a
 * schedule that cannot be built leaves pp->sched NULL (each user then builds its own and says why); m NULL: kept
 * by the plan itself. Out of memory is the only failure. */
llm4d_code llm4d_sched_memo_lend(llm4d_sched_memo *m, llm4d_pp_plan *pp, llm4d_err *err);
/* Give pp's loan back (pp->sched NULL), so that llm4d_pp_plan_free leaves the lists to the memo; m NULL: nothing. */
void llm4d_sched_memo_return(const llm4d_sched_memo *m, llm4d_pp_plan *pp);

#endif
