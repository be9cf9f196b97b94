/* step.c — the training loop: one step per global batch, the seeds' log line, metrics.jsonl (see trainer.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/resource.h>

#include "core/hash.h"
#include "core/timer.h"
#include "train/trainer.h"

llm4d_code llm4d_trainer_agree(llm4d_trainer *tr, llm4d_code rc, llm4d_err *err) {
    /* every rank learns whether any rank failed, so all stop together instead of waiting in a collective */
    int64_t failed = rc != LLM4D_OK;
    llm4d_err cerr = {0};
    if (llm4d_comm_allreduce(tr->groups->world, &failed, 1, LLM4D_COMM_I64, &cerr) != LLM4D_OK) {
        if (rc == LLM4D_OK) *err = cerr;
        return rc != LLM4D_OK ? rc : cerr.code;
    }
    if (rc != LLM4D_OK) return rc;
    if (failed) return llm4d_fail(err, LLM4D_EUSER, "another rank failed (its message is in its log)");
    return LLM4D_OK;
}

llm4d_code llm4d_trainer_global_loss(llm4d_trainer *tr, double *loss, llm4d_err *err) {
    /* each rank's sum is already divided by the global count: the global loss is the sum over data ranks (every
     * tensor-parallel rank computed the same value); with a pipeline only the last stage holds it */
    LLM4D_TRY(llm4d_comm_allreduce(tr->groups->data, loss, 1, LLM4D_COMM_F64, err));
    LLM4D_TRY(llm4d_comm_allreduce(tr->groups->axis[LLM4D_AXIS_PIPE], loss, 1, LLM4D_COMM_F64, err));
    return LLM4D_OK;
}

llm4d_code llm4d_trainer_run_batch(llm4d_trainer *tr, int64_t step, const llm4d_batch *b, double w, int train,
                                   double *loss, llm4d_err *err) {
    const int acc = (int)tr->cfg->accumulate_steps, mb = (int)tr->cfg->micro_batch_size;
    llm4d_devbatch_upload(&tr->batch, b, w);
    for (int k = 0; k < acc; k++) tr->mbs[k] = llm4d_devbatch_micro(&tr->batch, k, mb, (uint32_t)step, train);
    LLM4D_TRY(llm4d_executor_run(tr->exec, tr->mbs, acc, !train, err));
    LLM4D_TRY(llm4d_tp_check(&tr->model.tp, err));
    *loss = llm4d_gpt_loss_take(&tr->model);
    return LLM4D_OK;
}

/* Forward and backward of one global step's rows; returns the global loss. */
static llm4d_code train_step(llm4d_trainer *tr, int64_t step, const llm4d_batch *b, double *loss_out,
                             llm4d_err *err) {
    const llm4d_config *c = tr->cfg;
    const int T = c->data.max_seq_len;
    /* the loss is normalised by the unmasked tokens of the whole global batch, over every data rank */
    double count = 0;
    for (size_t i = 0; i < (size_t)b->rows * T; i++) count += b->mask[i];
    LLM4D_TRY(llm4d_comm_allreduce(tr->groups->data, &count, 1, LLM4D_COMM_F64, err));
    llm4d_trainer_debug_hang(tr, step);
    llm4d_engines_begin_step(&tr->engines, (int)c->accumulate_steps);
    /* fp16: the loss (hence every gradient) is scaled up so small gradients survive fp16 */
    double loss;
    LLM4D_TRY(llm4d_trainer_run_batch(tr, step, b, count > 0 ? tr->loss_scale / count : 0, 1, &loss, err));
    /* gradients a storage reset at the step's start and no kernel wrote are zeros before the engines read them */
    if (tr->be->grads_settle) tr->be->grads_settle(tr->be, NULL, 0);
    LLM4D_TRY(llm4d_engines_finish_backward(&tr->engines, err));
    LLM4D_TRY(llm4d_trainer_global_loss(tr, &loss, err));
    *loss_out = loss / tr->loss_scale;
    llm4d_trainer_debug_after_backward(tr, step, loss_out);
    return LLM4D_OK;
}

/* The first tensor of the model (in order of use) whose gradient is not finite on some rank, by name. */
static llm4d_code first_nonfinite(llm4d_trainer *tr, char *name, size_t n, llm4d_err *err) {
    const llm4d_param_table *t = &tr->model.table;
    int64_t first = -INT64_MAX; /* the maximum of minus the order key is the minimum key */
    double *each = malloc((size_t)t->n * sizeof *each);
    if (!each) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    llm4d_engine_grad_sumsq(tr->engines.storage, &tr->model, 0, each);
    for (int i = 0; i < t->n; i++) {
        if (isfinite(each[i])) continue;
        const int64_t key = -llm4d_param_order(&tr->model.cfg, &t->p[i]);
        if (key > first) first = key;
    }
    free(each);
    LLM4D_TRY(llm4d_comm_allreduce_max(tr->groups->world, &first, 1, LLM4D_COMM_I64, err));
    if (first == -INT64_MAX) snprintf(name, n, "(none found: a gradient too large to square)");
    else llm4d_param_order_name(&tr->model.cfg, -first, name, n);
    return LLM4D_OK;
}

/* The loss spike guard: whether this step's loss is more than loss_spike_threshold x the mean of the previous
 * loss_spike_window steps (once it has them). The loss is the global one, so every rank decides alike. */
static int loss_spike(llm4d_trainer *tr, double loss, double *trend) {
    const llm4d_config *c = tr->cfg;
    if (c->loss_spike_threshold <= 0 || tr->n_recent < c->loss_spike_window) return 0;
    double sum = 0;
    for (int k = 0; k < tr->n_recent; k++) sum += tr->recent_loss[k];
    *trend = sum / tr->n_recent;
    return loss > c->loss_spike_threshold * *trend;
}

/* The last loss_spike_window steps' losses (a window kept in step order: oldest first). */
static void remember_loss(llm4d_trainer *tr, double loss) {
    const int w = tr->cfg->loss_spike_window;
    if (tr->n_recent == w) {
        memmove(tr->recent_loss, tr->recent_loss + 1, (size_t)(w - 1) * sizeof *tr->recent_loss);
        tr->n_recent--;
    }
    tr->recent_loss[tr->n_recent++] = loss;
}

/* Clip, then AdamW at lr(step). With fp16 loss scaling, a non-finite gradient norm (an overflow somewhere) skips
 * the update and halves the scale; 2000 finite steps in a row double it (Paddle's GradScaler defaults). In fp32
 * and bf16 a non-finite loss or gradient norm stops the run before the update, naming the first tensor (in the
 * model's order) whose gradient is not finite; nothing of the step is applied or saved, so the last checkpoint is
 * the last good state. The loss spike guard skips the update of a step whose loss is far above the recent mean.
 * The norm and the loss are the same on every rank (reduced first), so every rank takes the same decision. */
static llm4d_code update(llm4d_trainer *tr, int64_t step, double loss, double *norm_out, double *lr_out,
                         int *found_inf, int *spike, llm4d_err *err) {
    /* every element once over the job: each rank's share (engine.h), summed over the world */
    double sumsq = tr->engines.storage->ops->grad_sumsq(tr->engines.storage);
    LLM4D_TRY(llm4d_comm_allreduce(tr->groups->world, &sumsq, 1, LLM4D_COMM_F64, err));
    const double lr = llm4d_lr_at(&tr->lr, step);
    *lr_out = lr;
    /* fp16: an overflow in the forward (a non-finite loss) or in the backward (a non-finite gradient norm) is the
     * same event, handled the same way: skip the update and halve the scale, as Paddle's GradScaler does */
    *found_inf = !isfinite(sumsq) || !isfinite(loss);
    if (*found_inf) {
        *norm_out = INFINITY;
        if (tr->precision != LLM4D_PREC_FP16) { /* stop before anything of this step is applied or saved */
            /* a save still written in the background holds the last good state: it is finished first (the ranks
             * all take this branch, the norm and loss being reduced) */
            LLM4D_TRY(llm4d_trainer_save_poll(tr, step, 1, err));
            char saved[64] = "no checkpoint was written yet";
            if (tr->last_saved > 0) snprintf(saved, sizeof saved, "step_%lld is the last checkpoint",
                                             (long long)tr->last_saved);
            if (!isfinite(loss))
                return llm4d_fail(err, LLM4D_EUSER, "loss is %f at step %lld; the update was not applied (%s); lower "
                                  "max_lr or enable gradient clipping (grad_clip)", loss, (long long)step, saved);
            char name[LLM4D_PARAM_NAME_MAX + 64];
            LLM4D_TRY(first_nonfinite(tr, name, sizeof name, err));
            return llm4d_fail(err, LLM4D_EUSER, "the gradient norm is not finite at step %lld (the loss, %.6f, is): "
                              "the first tensor with a non-finite gradient is %s; the update was not applied (%s); "
                              "lower max_lr or enable grad_clip, then resume", (long long)step, loss, name, saved);
        }
        tr->loss_scale *= 0.5;
        tr->good_steps = 0;
        llm4d_log_warn(&tr->log, "found_inf at step %lld: update skipped, loss scale halved to %g", (long long)step,
                       tr->loss_scale);
        return LLM4D_OK;
    }
    const double norm = sqrt(sumsq) / tr->loss_scale;
    double trend = 0;
    if (loss_spike(tr, loss, &trend)) { /* skipped as an fp16 overflow is: the step's gradients are dropped */
        tr->spikes_skipped++;
        llm4d_log_warn(&tr->log, "loss spike at step %lld: loss %.6f > %g x the mean of the last %d steps (%.6f): "
                       "update skipped (%lld so far)", (long long)step, loss, tr->cfg->loss_spike_threshold,
                       tr->n_recent, trend, (long long)tr->spikes_skipped);
        *norm_out = norm;
        *spike = 1;
        return LLM4D_OK;
    }
    remember_loss(tr, loss);
    const float scale = (float)(llm4d_clip_factor(norm, tr->cfg->optim.grad_clip) / tr->loss_scale);
    /* the update changes every weight: the backend's low-precision copies are stale until its AdamW pass rewrites
     * them (ZeRO-1/2 then gather the other ranks' shards, whose copies stay stale until converted on first use) */
    if (tr->be->weights_changed) tr->be->weights_changed(tr->be, NULL, 0);
    LLM4D_TRY(llm4d_engines_update(&tr->engines, (float)lr, scale, err));
    if (tr->precision == LLM4D_PREC_FP16 && ++tr->good_steps >= 2000) {
        tr->loss_scale *= 2.0;
        tr->good_steps = 0;
    }
    *norm_out = norm;
    return LLM4D_OK;
}

/* The most each category held at once during the run (the start-up table shows what was held before the first
 * step), what the backend holds outside those books, and the process's peak RSS, which covers everything. */
static void print_peak_memory(const llm4d_trainer *tr) {
    const llm4d_log *log = &tr->log;
    llm4d_trainer_log_memory(tr, "peak memory of this process over the run, by category:");
    if (!log->enabled) return;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    llm4d_log_info(log, "backend workspaces (not in the categories): %.2f MiB; peak resident set size: %.2f MiB",
                   (tr->be->workspace_bytes ? tr->be->workspace_bytes(tr->be) : 0) / 1048576.0,
                   ru.ru_maxrss / 1024.0);
    if (tr->plan_total > 0)
        llm4d_log_info(log, "memory plan against the run: planned %.2f MiB, peak resident set %.2f MiB (%+.1f%%)",
                       tr->plan_total / 1048576.0, ru.ru_maxrss / 1024.0,
                       100.0 * (ru.ru_maxrss * 1024.0 - (double)tr->plan_total) / (double)tr->plan_total);
}

/* The backend's timers now (zero when it keeps none). */
static llm4d_work_stats work_now(llm4d_trainer *tr) {
    llm4d_work_stats w;
    memset(&w, 0, sizeof w);
    if (tr->be->work_stats) tr->be->work_stats(tr->be, &w);
    return w;
}

/* a - b, kind by kind */
static llm4d_work_stats work_delta(const llm4d_work_stats *a, const llm4d_work_stats *b) {
    llm4d_work_stats d;
    for (int k = 0; k < LLM4D_WORK_N; k++) {
        d.seconds[k] = a->seconds[k] - b->seconds[k];
        d.calls[k] = a->calls[k] - b->calls[k];
    }
    d.optim_bytes = a->optim_bytes - b->optim_bytes;
    return d;
}

/* Where the steps after the first spent their time, by the backend's own timers, and the GEMM implementations
 * its library chose: what bench/bench_train.sh reports per shape and precision. */
static void log_work(const llm4d_trainer *tr, const llm4d_work_stats *w, double step_s, int steps) {
    if (!tr->be->work_stats || steps <= 0 || step_s <= 0) return;
    char line[512];
    double in_backend = 0;
    int k = snprintf(line, sizeof line, "time per step by kind of work (backend timers, %d steps after the first, "
                     "%.4f s per step):", steps, step_s / steps);
    for (int i = 0; i < LLM4D_WORK_N && k < (int)sizeof line; i++) {
        in_backend += w->seconds[i];
        k += snprintf(line + k, sizeof line - (size_t)k, " %s %.4f s (%.1f%%),", llm4d_work_name(i),
                      w->seconds[i] / steps, 100 * w->seconds[i] / step_s);
    }
    if (k < (int)sizeof line)
        snprintf(line + k, sizeof line - (size_t)k, " outside the backend %.4f s (%.1f%%)", (step_s - in_backend) / steps,
                 100 * (step_s - in_backend) / step_s);
    llm4d_log_info(&tr->log, "%s", line);
    const double opt_s = w->seconds[LLM4D_WORK_OPTIM];
    if (opt_s > 0)
        llm4d_log_info(&tr->log, "optimizer passes: %.3f GB per step in %.4f s: %.2f GB/s", w->optim_bytes / steps / 1e9,
                       opt_s / steps, w->optim_bytes / opt_s / 1e9);
    if (tr->be->describe_gemms) {
        char d[768];
        tr->be->describe_gemms(tr->be, d, sizeof d);
        llm4d_log_info(&tr->log, "%s", d);
    }
}

static llm4d_code run_steps(llm4d_trainer *tr, llm4d_err *err) {
    const llm4d_config *c = tr->cfg;
    const int T = c->data.max_seq_len;
    const double tokens = (double)c->global_batch_size * T;
    double reader_cost = 0, batch_cost = 0;
    int logged = 0;
    const int64_t first = tr->start_step;
    double pp_idle = 0, pp_busy = 0, pp_step = 0; /* pipeline, steps after the first: waiting, computing, all */
    double pp_op[3] = {0, 0, 0};
    int pp_steps = 0, pp_n[3] = {0, 0, 0}, pp_stage = -1;
    llm4d_work_stats work_sum; /* steps after the first */
    memset(&work_sum, 0, sizeof work_sum);
    double work_step_s = 0;
    int work_steps = 0;
    llm4d_comm_watch *watch = tr->groups->world->watch;
    for (int64_t step = tr->start_step; step <= c->max_steps; step++) {
        /* the watchdog: generous for the first step (first-touch allocation, the stage-3 trace), tight after */
        if (watch) llm4d_watch_set(watch, step, step == first ? c->dist.comm_timeout_first : c->dist.comm_timeout);
        llm4d_trace_arm(tr->trace, step);
        const llm4d_work_stats w0 = work_now(tr);
        const double t0 = llm4d_now();
        llm4d_comm_groups_stats_reset(tr->groups);
        const llm4d_batch *b = llm4d_loader_get(&tr->loader, step - 1);
        const double t1 = llm4d_now();
        if (tr->debug.debug_dump) LLM4D_TRY(llm4d_trainer_dump_step(tr, step, b, 0, err));
        double loss, norm, lr;
        int found_inf = 0, spike = 0;
        LLM4D_TRY(train_step(tr, step, b, &loss, err));
        if (tr->debug.debug_dump) LLM4D_TRY(llm4d_trainer_dump_step(tr, step, b, 1, err));
        const double scale_used = tr->loss_scale;
        const double tu = llm4d_trace_now(tr->trace);
        LLM4D_TRY(update(tr, step, loss, &norm, &lr, &found_inf, &spike, err));
        llm4d_trace_span(tr->trace, LLM4D_TR_OPTIM, "optimizer", step, tu);
        const double t2 = llm4d_now();
        const llm4d_work_stats w1 = work_now(tr), wd = work_delta(&w1, &w0);
        if (step > first) {
            for (int k = 0; k < LLM4D_WORK_N; k++) work_sum.seconds[k] += wd.seconds[k];
            work_sum.optim_bytes += wd.optim_bytes;
            work_step_s += t2 - t0;
            work_steps++;
        }
        tr->last_loss = loss;
        llm4d_engine_stats es; /* what the engines measured in this step */
        llm4d_engines_stats(&tr->engines, &es);
        pp_stage = es.pp_stage;
        if (es.pp_stage >= 0 && step > first) { /* the first step warms caches and allocators: not a bubble */
            pp_idle += es.pp_idle_s;
            pp_busy += es.pp_busy_s;
            for (int k = 0; k < 3; k++) pp_op[k] += es.pp_op_s[k], pp_n[k] += es.pp_op_n[k];
            pp_step += t2 - t0;
            pp_steps++;
        }

        reader_cost += t1 - t0;
        batch_cost += t2 - t0;
        logged++;
        const double lr_printed = llm4d_lr_at(&tr->lr, step + 1);
        const double step_cost = t2 - t0;
        llm4d_trainer_predict_step(tr, step, step_cost);
        llm4d_comm_stats cs = llm4d_comm_groups_stats(tr->groups);
        llm4d_comm_stats_add(&cs, &es.comm); /* groups the engines own: the tied embedding's */
        if (tr->debug.check_replicas) {
            llm4d_engine *e = tr->engines.storage;
            char emb[64] = "";
            if (tr->model.table.wte_first >= 0)
                snprintf(emb, sizeof emb, ", embedding %016llx",
                         (unsigned long long)e->ops->param_hash(e, LLM4D_HASH_EMBEDDING));
            llm4d_log_info(&tr->log, "rank %d parameter hash after step %lld: %016llx, replicated entries %016llx%s",
                           tr->topo.rank, (long long)step, (unsigned long long)e->ops->param_hash(e, LLM4D_HASH_ALL),
                           (unsigned long long)e->ops->param_hash(e, LLM4D_HASH_REPLICATED), emb);
        }
        if (tr->metrics) {
            double comm_total = 0;
            for (int i = 0; i < tr->engines.n; i++) comm_total += tr->engines.e[i]->comm_total_s;
            char norm_s[32] = "null", loss_s[32] = "null"; /* JSON has no inf: an overflowed step's is null */
            if (isfinite(norm)) snprintf(norm_s, sizeof norm_s, "%.6f", norm);
            if (isfinite(loss)) snprintf(loss_s, sizeof loss_s, "%.9f", loss);
            /* model FLOPs utilisation of this rank: its tokens' model FLOPs per second over its measured peak */
            char mfu_s[32] = "null";
            if (tr->peak_gflops > 0)
                snprintf(mfu_s, sizeof mfu_s, "%.4f",
                         tokens / tr->world_size / step_cost * tr->flops_per_token / (tr->peak_gflops * 1e9));
            _Static_assert(LLM4D_WORK_N == 6, "metrics.jsonl's work_s names six kinds");
            fprintf(tr->metrics,
                    "{\"step\": %lld, \"epoch\": %lld, \"batch\": %lld, \"loss\": %s, \"reader_cost\": %.6f, "
                    "\"batch_cost\": %.6f, \"speed\": %.4f, \"ips_total\": %.1f, \"ips\": %.1f, "
                    "\"learning_rate\": %.6e, \"lr_used\": %.6e, \"grad_norm\": %s, \"tokens\": %.0f, "
                    "\"flops_per_token\": %.6g, \"mfu\": %s, \"comm_bytes\": %llu, \"comm_exposed_s\": %.6f, \"comm_s\": %.6f, "
                    "\"loss_scale\": %g, \"found_inf\": %d, \"loss_spike_skipped\": %d, \"zero_gather_wait_s\": %.6f, "
                    "\"zero_reduce_scatter_s\": %.6f, \"pp_idle_s\": %.6f, \"pp_busy_s\": %.6f, \"work_s\": {\"%s\": %.6f, "
                    "\"%s\": %.6f, \"%s\": %.6f, \"%s\": %.6f, \"%s\": %.6f, \"%s\": %.6f}, \"optim_bytes\": %.0f}\n",
                    (long long)step, (long long)b->epoch, (long long)b->batch, loss_s, t1 - t0, step_cost,
                    1.0 / step_cost, tokens / step_cost, tokens / step_cost / tr->world_size, lr_printed, lr, norm_s,
                    tokens, tr->flops_per_token, mfu_s, (unsigned long long)llm4d_comm_stats_sent(&cs),
                    llm4d_engines_comm_wait(&tr->engines), comm_total, scale_used, found_inf, spike,
                    es.zero_gather_wait_s, es.zero_rs_wait_s, es.pp_idle_s, es.pp_busy_s,
                    llm4d_work_name(0), wd.seconds[0], llm4d_work_name(1), wd.seconds[1], llm4d_work_name(2),
                    wd.seconds[2], llm4d_work_name(3), wd.seconds[3], llm4d_work_name(4), wd.seconds[4],
                    llm4d_work_name(5), wd.seconds[5], wd.optim_bytes);
            fflush(tr->metrics);
        }
        if (step % c->logging_freq == 0 || step == c->max_steps) {
            const double avg_batch = batch_cost / logged, speed = 1.0 / avg_batch;
            char amp[96] = "";
            if (tr->precision == LLM4D_PREC_FP16)
                snprintf(amp, sizeof amp, ", loss_scale: %g, found_inf: %d", scale_used, found_inf);
            llm4d_log_info(&tr->log,
                           "global step %lld, epoch: %lld, batch: %lld, loss: %.9f, avg_reader_cost: %.5f sec, "
                           "avg_batch_cost: %.5f sec, speed: %.2f step/s, ips_total: %.0f tokens/s, ips: %.0f "
                           "tokens/s, learning rate: %.5e%s",
                           (long long)step, (long long)b->epoch, (long long)b->batch, loss, reader_cost / logged,
                           avg_batch, speed, speed * tokens, speed * tokens / tr->world_size, lr_printed, amp);
            reader_cost = batch_cost = 0;
            logged = 0;
        }
        if (tr->have_eval && c->eval_freq > 0 && step % c->eval_freq == 0) {
            double eval_loss;
            LLM4D_TRY(llm4d_trainer_eval(tr, step, &eval_loss, err));
        }
        if ((c->save_steps > 0 && step % c->save_steps == 0) || (step == c->max_steps && c->save_steps >= 0)) {
            if (watch) llm4d_watch_set(watch, step, c->dist.comm_timeout_first); /* a save waits on the slowest disk */
            LLM4D_TRY(llm4d_trainer_save(tr, step, err));
        } else {
            LLM4D_TRY(llm4d_trainer_save_poll(tr, step, 0, err)); /* --async_save: publish a save once written */
        }
        LLM4D_TRY(llm4d_trainer_trace_step_end(tr, step, t0, t1, err));
    }
    LLM4D_TRY(llm4d_trainer_save_poll(tr, c->max_steps, 1, err)); /* the last save written and published */
    print_peak_memory(tr);
    llm4d_trainer_predict_end(tr);
    log_work(tr, &work_sum, work_step_s, work_steps);
    if (pp_stage >= 0) { /* what the schedule kept alive, against the slots it was given */
        const llm4d_gpt *g = &tr->model;
        char line[256];
        int k = snprintf(line, sizeof line, "pipeline stage %d: most micro-batches alive at once per chunk:",
                         pp_stage);
        for (int c = 0; c < g->table.part.n_chunks && k < (int)sizeof line; c++)
            k += snprintf(line + k, sizeof line - (size_t)k, " %d (of %d slots)", g->slots_peak[c],
                          g->layout.slots[c] > 0 ? g->layout.slots[c] : 1);
        llm4d_log_info(&tr->log, "%s; activations %.3f MiB, %.3f MiB per slot", line,
                       tr->mem.bytes[LLM4D_MEM_ACTIVATIONS] / 1048576.0, g->slot_bytes / 1048576.0);
        if (pp_steps > 0) { /* what a schedule's bubble is made of: the times of F, B and W */
            char w[96] = " (with the weight gradients)";
            if (pp_n[2]) snprintf(w, sizeof w, " (input gradients), one weight pass %.4f s", pp_op[2] / pp_n[2]);
            llm4d_log_info(&tr->log, "pipeline stage %d: one forward %.4f s, one backward %.4f s%s (means per "
                           "micro-batch and chunk)", pp_stage, pp_n[0] ? pp_op[0] / pp_n[0] : 0.0,
                           pp_n[1] ? pp_op[1] / pp_n[1] : 0.0, w);
        }
        if (pp_step > 0)
            llm4d_log_info(&tr->log, "pipeline stage %d: per step %.4f s, computing %.4f s, waiting for its "
                           "neighbours %.4f s = %.1f%% of the step (the bubble and transfers not hidden; steps after "
                           "the first)", pp_stage, pp_step / pp_steps, pp_busy / pp_steps, pp_idle / pp_steps,
                           100 * pp_idle / pp_step);
        const double mine[5] = {pp_steps ? pp_busy / pp_steps : 0, pp_steps ? pp_idle / pp_steps : 0,
                                pp_n[0] ? pp_op[0] / pp_n[0] : 0, pp_n[1] ? pp_op[1] / pp_n[1] : 0,
                                pp_n[2] ? pp_op[2] / pp_n[2] : 0};
        LLM4D_TRY(llm4d_trainer_log_pipeline(tr, mine, err));
    }
    return LLM4D_OK;
}

llm4d_code llm4d_trainer_run(llm4d_trainer *tr, llm4d_err *err) {
    const llm4d_code rc = run_steps(tr, err);
    if (rc != LLM4D_OK) llm4d_trainer_save_settle(tr); /* --async_save: a save pending when the run failed */
    llm4d_trainer_runinfo_end(tr, rc == LLM4D_OK ? NULL : err);
    return rc;
}
