/* trace_run.c — the trainer's side of tracing (core/trace.h): the trace is opened at start-up when --trace names
 * a directory, armed at the top of every step, given the step's own span at its end, and written once the last
 * traced step is over.
 *
 * Opening is collective, for two reasons: the ranks agree on the time origin (the earliest wall-clock time among
 * them, so the files of a job line up in a merged view), and a rank that cannot write its file fails the job at
 * start-up rather than at the end of the traced steps. Writing is agreed on too (llm4d_trainer_agree), so a rank
 * that cannot write stops every rank with its message instead of leaving them in the next collective. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "train/trainer.h"
#include "train/version.h"

static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

llm4d_code llm4d_trainer_trace_open(llm4d_trainer *tr, llm4d_err *err) {
    const llm4d_config *c = tr->cfg;
    if (!c->trace_dir[0]) return LLM4D_OK;
    const double mono = llm4d_now(), wall = wall_now();
    double earliest = -wall; /* the maximum of minus the times is the minimum */
    LLM4D_TRY(llm4d_comm_allreduce_max(tr->groups->world, &earliest, 1, LLM4D_COMM_F64, err));
    const double origin = mono - (wall + earliest); /* the earliest wall time, on this rank's monotonic clock */
    const llm4d_topology *tp = &tr->topo;
    char process[160], other[512];
    snprintf(process, sizeof process, "rank %d (dp %d, pp %d, sharding %d, mp %d)", tp->rank,
             tp->index[LLM4D_AXIS_DATA], tp->index[LLM4D_AXIS_PIPE], tp->index[LLM4D_AXIS_SHARDING],
             tp->index[LLM4D_AXIS_MODEL]);
    snprintf(other, sizeof other, "\"version\": \"%s\", \"world_size\": %d, \"coords\": {\"dp\": %d, \"pp\": %d, "
             "\"sharding\": %d, \"mp\": %d}, \"degrees\": {\"dp\": %d, \"pp\": %d, \"sharding\": %d, \"mp\": %d}, "
             "\"pp_schedule\": \"%s\", \"virtual_pp_degree\": %d, \"micro_batches\": %lld, \"origin_unix_s\": %.6f",
             llm4d_version(), tp->world_size, tp->index[LLM4D_AXIS_DATA], tp->index[LLM4D_AXIS_PIPE],
             tp->index[LLM4D_AXIS_SHARDING], tp->index[LLM4D_AXIS_MODEL], tp->degree[LLM4D_AXIS_DATA],
             tp->degree[LLM4D_AXIS_PIPE], tp->degree[LLM4D_AXIS_SHARDING], tp->degree[LLM4D_AXIS_MODEL],
             tr->ppplan.P > 1 ? tr->ppplan.runs->name : "none", c->model.virtual_pp_degree,
             (long long)c->accumulate_steps, -earliest);
    const llm4d_trace_process me = {tp->rank, process, other};
    const llm4d_code rc = llm4d_trace_create(&tr->trace, c->trace_dir, &me, c->trace_first, c->trace_last, origin, err);
    LLM4D_TRY(llm4d_trainer_agree(tr, rc, err));
    if (tr->groups->world->watch) tr->groups->world->watch->trace = tr->trace; /* the communicators' spans */
    tr->exec->trace = tr->trace;                                                /* the executor's passes */
    char last[32] = "the end";
    if (c->trace_last < c->max_steps) snprintf(last, sizeof last, "%lld", (long long)c->trace_last);
    llm4d_log_info(&tr->log, "tracing steps %lld to %s into %s/trace.rank%d.json (Chrome Trace Event format)",
                   (long long)c->trace_first, last, c->trace_dir, tp->rank);
    return LLM4D_OK;
}

llm4d_code llm4d_trainer_trace_step_end(llm4d_trainer *tr, int64_t step, double t0, double t1, llm4d_err *err) {
    llm4d_trace *t = tr->trace;
    if (!llm4d_trace_on(t)) return LLM4D_OK;
    llm4d_trace_event *d = llm4d_trace_add(t, LLM4D_TR_DATA, "data", t0, t1);
    if (d) d->a = step;
    char name[32];
    snprintf(name, sizeof name, "step %lld", (long long)step);
    llm4d_trace_record_span(t, LLM4D_TR_STEP, name, step, t0);
    if (step < t->last && step < tr->cfg->max_steps) return LLM4D_OK;
    t->on = 0;
    LLM4D_TRY(llm4d_trainer_agree(tr, llm4d_trace_write(t, err), err));
    if (t->lost)
        llm4d_log_warn(&tr->log, "trace written: %s, %zu spans; %lld more were not kept (a trace keeps at most %d): "
                       "trace fewer steps", t->path, t->n, (long long)t->lost, LLM4D_TRACE_MAX_SPANS);
    else llm4d_log_info(&tr->log, "trace written: %s (%zu spans)", t->path, t->n);
    return LLM4D_OK;
}

void llm4d_trainer_trace_close(llm4d_trainer *tr) {
    if (!tr->trace) return;
    if (tr->groups && tr->groups->world && tr->groups->world->watch) tr->groups->world->watch->trace = NULL;
    if (tr->exec) tr->exec->trace = NULL;
    if (tr->trace->n && !tr->trace->written) { /* the run stopped inside its traced steps: keep what it recorded */
        llm4d_err e;
        if (llm4d_trace_write(tr->trace, &e) == LLM4D_OK)
            llm4d_log_info(&tr->log, "trace of the steps run so far written: %s", tr->trace->path);
    }
    llm4d_trace_destroy(tr->trace);
    tr->trace = NULL;
}
