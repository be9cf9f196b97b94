/* pp_log.c — a pipelined run's last words: how its stages computed and waited, set against what the split predicted
 * and what the schedule itself would make them wait. The step loop (step.c) only gathers each stage's measured
 * busy and idle time from the engines' statistics; judging them needs the schedule and its simulator
 * (parallel/schedule.h), which is this file's business, not the loop's. */
#include <stdlib.h>

#include "parallel/schedule.h"
#include "train/trainer.h"

/* Every stage's measured computing per step beside the split's predicted costs, so a split can be judged by what it
 * did; and every stage's waiting share (waiting / (waiting + computing) inside the schedule) beside the schedule's
 * own at the measured durations of one forward, backward and weight pass (llm4d_pp_schedule_simulate), so the
 * bubble can be told apart from what the machine added (transfers, load). */
llm4d_code llm4d_trainer_log_pipeline(llm4d_trainer *tr, const double mine[5], llm4d_err *err) {
    llm4d_comm *pp = tr->groups->axis[LLM4D_AXIS_PIPE];
    const llm4d_pp_plan *plan = &tr->ppplan;
    const int P = pp->size, V = plan->V;
    double *all = calloc((size_t)P * 5, sizeof *all), *cost = calloc((size_t)P * 3 * V, sizeof *cost);
    double *busy = calloc((size_t)P, sizeof *busy), *idle = calloc((size_t)P, sizeof *idle);
    double *ends = calloc((size_t)P, sizeof *ends);
    llm4d_pp_schedule *st = calloc((size_t)P, sizeof *st);
    if (!all || !cost || !busy || !idle || !ends || !st) {
        free(all), free(cost), free(busy), free(idle), free(ends), free(st);
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    }
    llm4d_code rc = llm4d_comm_allgather(pp, mine, all, 5, LLM4D_COMM_F64, err);
    if (rc == LLM4D_OK && tr->is_writer) {
        double sum = 0, psum = 0;
        for (int s = 0; s < P; s++) sum += all[5 * s];
        for (int v = 0; v < P * V; v++) psum += (double)plan->cost[v];
        char line[1024];
        int k = snprintf(line, sizeof line, "pipeline: computing per step by stage, measured against the split's "
                         "prediction (share of the stages' sum):");
        for (int s = 0; s < P && k < (int)sizeof line; s++) {
            double pc = 0;
            for (int c = 0; c < V; c++) pc += (double)plan->cost[llm4d_pp_vstage(P, c, s)];
            k += snprintf(line + k, sizeof line - (size_t)k, "%s stage %d %.4f s (%.1f %%, predicted %.1f %%)",
                          s ? "," : "", s, all[5 * s], sum > 0 ? 100 * all[5 * s] / sum : 0.0,
                          psum > 0 ? 100 * pc / psum : 0.0);
        }
        llm4d_log_info(&tr->log, "%s", line);
        int ok = 1;
        for (int s = 0; s < P && ok; s++) {
            ok = llm4d_pp_schedule_build(&st[s], plan->runs->kind, P, V, plan->M, s, err) == LLM4D_OK;
            for (int op = 0; op < 3; op++)
                for (int c = 0; c < V; c++) cost[(3 * s + op) * V + c] = all[5 * s + 2 + op];
        }
        const llm4d_pp_costs costs = {cost, 0.0, NULL}; /* transfers free, each stage on its own cores */
        /* a stage's waiting inside its schedule ends with its last action, as the executor measures it (the last
         * stage is done before the first stage's last backward) */
        if (ok) ok = llm4d_pp_schedule_simulate_ends(st, P, &costs, NULL, busy, ends, err) == LLM4D_OK;
        for (int s = 0; ok && s < P; s++) idle[s] = ends[s] - busy[s];
        k = snprintf(line, sizeof line, "pipeline: waiting share by stage, measured against %s's at the measured "
                     "F/B/W (waiting / (waiting + computing)):", plan->runs->name);
        for (int s = 0; ok && s < P && k < (int)sizeof line; s++) {
            const double b = all[5 * s], w = all[5 * s + 1];
            k += snprintf(line + k, sizeof line - (size_t)k, "%s stage %d %.1f %% (theory %.1f %%)", s ? "," : "", s,
                          b + w > 0 ? 100 * w / (b + w) : 0.0, ends[s] > 0 ? 100 * idle[s] / ends[s] : 0.0);
        }
        if (ok) llm4d_log_info(&tr->log, "%s", line);
        for (int s = 0; s < P; s++) llm4d_pp_schedule_free(&st[s]);
    }
    free(all), free(cost), free(busy), free(idle), free(ends), free(st);
    return rc;
}
