/* predict_run.c — the planner checking itself on every run that has a machine profile (issue 28): at start-up,
 * `llm4d plan --evaluate`'s prediction for this run's own layout (plan/evaluate.h: the same function, so the two
 * agree) — seconds per step, tokens/s and this rank's peak memory; at the end, what the run measured against it.
 *
 * The profile is Plan.machine_profile (--machine_profile) or the default one (`plan --calibrate` writes it). A
 * profile the user named must load (a user error otherwise); the default one is used only when it exists, and one
 * that does not load, like a prediction that fails, is a warning, not a reason to refuse a run. No profile:
 * nothing is logged.
 *
 * The prediction runs before the data and the model take their memory, and what it allocates is freed before
 * them, so it leaves the run's peak resident set where it was; it prices one layout (milliseconds). The measured
 * step is the median of this rank's steps after the first (the first warms caches and allocators), metrics.jsonl's
 * batch_cost on rank 0; the error is (measured - predicted) / predicted. */
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "core/timer.h"
#include "plan/evaluate.h"
#include "train/trainer.h"

#define MiB (1024.0 * 1024.0)

/* Ranks per host, as the planner's cluster counts them (the same on every host): those on this one (comm.h
 * llm4d_comm_groups), or, where the hosts hold different numbers, every rank of the job as if on one. */
static int ranks_here(const llm4d_comm_groups *g, int world) {
    const int n = g->host_ranks;
    return n > 0 && world % n == 0 ? n : world;
}

llm4d_code llm4d_trainer_predict_start(llm4d_trainer *tr, llm4d_err *err) {
    const llm4d_config *c = tr->cfg;
    const int named = c->plan.machine_profile[0] != 0;
    char path[LLM4D_PATH_MAX];
    if (named) snprintf(path, sizeof path, "%s", c->plan.machine_profile);
    else llm4d_profile_default_path(path, sizeof path);
    struct stat st;
    if (!named && stat(path, &st) != 0) return LLM4D_OK;
    const double t0 = llm4d_now();
    llm4d_profile prof;
    llm4d_profile_init(&prof);
    llm4d_err e = {0};
    llm4d_code rc = llm4d_profile_load(&prof, path, &e);
    const int unreadable = rc != LLM4D_OK;
    llm4d_prediction p = {0};
    const int R = ranks_here(tr->groups, tr->world_size);
    const llm4d_cluster cl = {.nodes = tr->world_size / R, .ranks_per_node = R, .threads = tr->be->nthreads,
                              .memory_per_node = c->plan.memory_per_node_gib > 0
                                                     ? c->plan.memory_per_node_gib * 1024 * MiB
                                                     : prof.memory_bytes,
                              .memory_per_rank = c->plan.memory_per_rank_gib > 0
                                                     ? c->plan.memory_per_rank_gib * 1024 * MiB
                                                     : prof.memory_per_rank_bytes};
    if (rc == LLM4D_OK) rc = llm4d_plan_evaluate(&prof, tr->be, &cl, c, &p, &e);
    if (rc == LLM4D_OK && p.rank_peak) {
        tr->pred.step_s = p.step_s;
        tr->pred.peak_bytes = p.rank_peak[tr->topo.rank];
        tr->pred.costs = calloc((size_t)(c->max_steps > 0 ? c->max_steps : 1), sizeof *tr->pred.costs);
        if (!tr->pred.costs) rc = llm4d_fail(&e, LLM4D_ENOMEM, "out of memory");
        else
            snprintf(tr->pred.line, sizeof tr->pred.line,
                     "plan prediction for this layout (machine profile %s; %d node%s x %d ranks x %d thread%s, "
                     "predicted in %.3f s): %.4f s per step, %.0f tokens/s, peak %.1f MiB on this rank (rank %d)",
                     path, cl.nodes, cl.nodes == 1 ? "" : "s", R, cl.threads, cl.threads == 1 ? "" : "s",
                     llm4d_now() - t0, p.step_s, p.tokens_per_s, tr->pred.peak_bytes / MiB, tr->topo.rank);
    }
    llm4d_prediction_free(&p);
    llm4d_profile_free(&prof);
    if (rc == LLM4D_OK) return LLM4D_OK;
    if (named && unreadable && rc == LLM4D_EUSER) { /* the user asked for this profile: say what is wrong with it */
        *err = e;
        return rc;
    }
    snprintf(tr->pred.line, sizeof tr->pred.line, "plan prediction: none (%s)", e.msg);
    tr->pred.failed = 1;
    return LLM4D_OK;
}

void llm4d_trainer_predict_log(const llm4d_trainer *tr) {
    if (!tr->pred.line[0]) return;
    if (tr->pred.failed) llm4d_log_warn(&tr->log, "%s", tr->pred.line);
    else llm4d_log_info(&tr->log, "%s", tr->pred.line);
}

void llm4d_trainer_predict_step(llm4d_trainer *tr, int64_t step, double seconds) {
    if (tr->pred.costs && step > tr->start_step && tr->pred.n < tr->cfg->max_steps)
        tr->pred.costs[tr->pred.n++] = seconds;
}

static int by_value(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void llm4d_trainer_predict_end(llm4d_trainer *tr) {
    if (!tr->pred.costs) return;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    const double rss = ru.ru_maxrss * 1024.0, pm = tr->pred.peak_bytes;
    const double mem_err = pm > 0 ? 100 * (rss - pm) / pm : 0;
    char mem[192];
    snprintf(mem, sizeof mem, "peak resident set %.1f MiB, predicted %.1f MiB (error %+.1f %%%s)", rss / MiB, pm / MiB,
             mem_err, mem_err > 5 || mem_err < -5 ? ", beyond the planner's 5 % target" : "");
    const int n = tr->pred.n;
    if (n == 0) {
        llm4d_log_info(&tr->log, "plan prediction against the run: step time not measured (no step after the "
                       "first); %s", mem);
        return;
    }
    qsort(tr->pred.costs, (size_t)n, sizeof *tr->pred.costs, by_value);
    const double *x = tr->pred.costs;
    const double med = n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]), ps = tr->pred.step_s;
    llm4d_log_info(&tr->log, "plan prediction against the run: %.4f s per step measured (median of %d step%s after "
                   "the first), %.4f s predicted (error %+.1f %%); %s", med, n, n == 1 ? "" : "s", ps,
                   ps > 0 ? 100 * (med - ps) / ps : 0.0, mem);
}
