/* checkpoint.c — the trainer's checkpoints (format: ckpt/gpt_ckpt.h, ckpt/store.h).
 *
 * What makes a resumed run bit-identical to one that never stopped: the weights and Adam's m, v and step count;
 * the global step (which fixes the data position, since step s reads items s*G .. s*G+G-1 of the index; the
 * learning rate, lr(step); and every dropout mask, keyed by (seed, step, position) in the counter-based RNG); the
 * validation iterator's position. All of it is in meta.json next to the tensors. Tensors are stored under their
 * global names and shapes, whatever layout wrote them, so any layout loads any checkpoint.
 *
 * Every run saves collectively: each rank writes what its storage engine keeps (parallel/engine.h: the whole
 * buffers of its part of the model, or its ZeRO shards) as slices of the global tensors, only the entries it owns
 * (a tensor-parallel replica is written by rank 0 of its group) and only from the first data-parallel replica;
 * nothing is gathered, and rank 0 publishes the step once every rank's files are safely written (ckpt/store.h).
 * With --async_save the files are written by a background thread from a snapshot (async_save.c).
 * Loading reads just the ranges each rank keeps, whatever layout wrote them. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/gpt_ckpt.h"
#include "train/trainer.h"

static cJSON *build_meta(const llm4d_trainer *tr, int64_t step) {
    const llm4d_config *c = tr->cfg;
    cJSON *meta = cJSON_CreateObject();
    cJSON_AddNumberToObject(meta, "step", (double)step);
    cJSON_AddNumberToObject(meta, "consumed_samples", (double)(step * c->global_batch_size));
    cJSON_AddNumberToObject(meta, "adam_t", (double)tr->engines.storage->ops->adam_steps(tr->engines.storage, -1));
    cJSON_AddNumberToObject(meta, "eval_next", (double)tr->eval_next);
    cJSON_AddNumberToObject(meta, "loss", tr->last_loss);
    cJSON_AddNumberToObject(meta, "loss_scale", tr->loss_scale);
    cJSON_AddNumberToObject(meta, "loss_scale_good_steps", (double)tr->good_steps);
    /* the loss spike guard's window, so a resumed run takes the decisions the uninterrupted one would */
    cJSON *recent = cJSON_AddArrayToObject(meta, "recent_losses");
    for (int k = 0; recent && k < tr->n_recent; k++) cJSON_AddItemToArray(recent, cJSON_CreateNumber(tr->recent_loss[k]));
    cJSON_AddNumberToObject(meta, "loss_spikes_skipped", (double)tr->spikes_skipped);
    cJSON *data = cJSON_AddObjectToObject(meta, "data");
    cJSON_AddStringToObject(data, "input_dir", c->data.input_dir);
    cJSON_AddStringToObject(data, "split", c->data.split);
    cJSON_AddNumberToObject(data, "max_seq_len", c->data.max_seq_len);
    cJSON_AddNumberToObject(data, "global_batch_size", (double)c->global_batch_size);
    cJSON_AddNumberToObject(data, "next_item", (double)(step * c->global_batch_size));
    cJSON *lr = cJSON_AddObjectToObject(meta, "lr_schedule");
    cJSON_AddStringToObject(lr, "name", "CosineAnnealingWithWarmupDecay");
    cJSON_AddNumberToObject(lr, "max_lr", c->optim.max_lr);
    cJSON_AddNumberToObject(lr, "min_lr", c->optim.min_lr);
    cJSON_AddNumberToObject(lr, "warmup_rate", c->optim.warmup_rate);
    cJSON_AddNumberToObject(lr, "decay_steps", (double)c->optim.decay_steps);
    cJSON_AddNumberToObject(lr, "last_step", (double)step);
    cJSON *rng = cJSON_AddObjectToObject(meta, "rng");
    cJSON_AddStringToObject(rng, "generator", "philox4x32-10, keyed by (seed, step, layer, site, position)");
    cJSON_AddNumberToObject(rng, "seed", (double)c->seed);
    cJSON *layout = cJSON_AddObjectToObject(meta, "layout");
    cJSON_AddNumberToObject(layout, "world_size", tr->world_size);
    cJSON_AddNumberToObject(layout, "dp_degree", c->dist.dp_degree);
    cJSON_AddNumberToObject(layout, "sharding_degree", c->dist.sharding_degree);
    cJSON_AddNumberToObject(layout, "sharding_stage", c->dist.sharding_degree > 1 ? c->dist.sharding_stage : 0);
    cJSON_AddNumberToObject(layout, "mp_degree", c->dist.mp_degree);
    cJSON_AddNumberToObject(layout, "pp_degree", c->dist.pp_degree);
    return meta;
}

llm4d_ckpt_state llm4d_trainer_ckpt_state(const llm4d_trainer *tr, const llm4d_engine_state *st,
                                         const llm4d_state_host *h) {
    return (llm4d_ckpt_state){.t = &tr->model.table, .n = st->n, .lo = st->lo, .hi = st->hi, .params = h->params,
                              .params_off = st->params_off, .m = h->m, .v = h->v, .state_off = st->state_off};
}

llm4d_ckpt_dest llm4d_trainer_ckpt_dest(const llm4d_trainer *tr, int64_t step, int writes) {
    return (llm4d_ckpt_dest){.output_dir = tr->cfg->output_dir, .step = step, .keep_last = tr->cfg->keep_last,
                             .tag = tr->world_size == 1 ? "" : NULL, .writes = writes};
}

/* save_consolidated: the storage engine gathers its state over its group into whole buffers for the duration of
 * the save (a temporary of 2 or 3 x the model part on every rank), and the rank it names writes whole tensors. */
static llm4d_code save_consolidated(llm4d_trainer *tr, int64_t step, const cJSON *meta, llm4d_err *err) {
    const llm4d_config *c = tr->cfg;
    const llm4d_param_table *t = &tr->model.table;
    llm4d_engine *e = tr->engines.storage;
    const size_t bytes = t->total * sizeof(float);
    llm4d_engine_state st;
    e->ops->state(e, &st);
    float *tmp[3] = {NULL, NULL, NULL}; /* m, v, parameters (when the state's are not whole) */
    llm4d_state_host h;
    llm4d_code rc = llm4d_engine_state_open(&st, tr->be, &tr->mem, LLM4D_VIEW_READ, &h, err);
    const int opened = rc == LLM4D_OK;
    for (int k = 0; k < (st.params_whole ? 2 : 3) && rc == LLM4D_OK; k++)
        if (!(tmp[k] = llm4d_mem_alloc(&tr->mem, LLM4D_MEM_WORKSPACE, bytes)))
            rc = llm4d_fail(err, LLM4D_ENOMEM, "out of memory gathering the checkpoint (%zu bytes)", bytes);
    int writes = 0;
    if (rc == LLM4D_OK) rc = e->ops->gather_state(e, &h, tmp[2], tmp[0], tmp[1], &writes, err);
    if (e->ops->state_done) {
        llm4d_err e2;
        llm4d_code r2 = e->ops->state_done(e, &e2);
        if (rc == LLM4D_OK && r2 != LLM4D_OK) rc = r2, *err = e2;
    }
    rc = llm4d_trainer_agree(tr, rc, err);
    const size_t whole[2] = {0, t->total};
    const llm4d_ckpt_state cs = llm4d_ckpt_state_range(t, whole, st.params_whole ? h.params : tmp[2], tmp[0], tmp[1]);
    const llm4d_ckpt_dest d = llm4d_trainer_ckpt_dest(tr, step, writes);
    if (rc == LLM4D_OK) rc = llm4d_gpt_ckpt_save_collective(tr->groups->world, &d, &c->model, &cs, meta, err);
    for (int k = 0; k < 3; k++)
        if (tmp[k]) llm4d_mem_free(&tr->mem, LLM4D_MEM_WORKSPACE, tmp[k], bytes);
    if (opened) llm4d_engine_state_close(&h, tr->be, &tr->mem);
    return rc;
}

llm4d_code llm4d_trainer_save(llm4d_trainer *tr, int64_t step, llm4d_err *err) {
    const llm4d_config *c = tr->cfg;
    llm4d_engine *e = tr->engines.storage;
    llm4d_code rc = LLM4D_OK;
    const double t0 = llm4d_trace_now(tr->trace);
    if (tr->async) { /* the previous save published first (saves are published in order), then this one's snapshot */
        LLM4D_TRY(llm4d_trainer_save_poll(tr, step, 1, err));
        cJSON *meta = build_meta(tr, step);
        rc = llm4d_trainer_save_async(tr, step, meta, err);
        cJSON_Delete(meta);
        llm4d_trace_span(tr->trace, LLM4D_TR_CKPT, "checkpoint snapshot", step, t0);
        return rc;
    }
    cJSON *meta = build_meta(tr, step);
    if (e->ops->gather_state && c->dist.save_consolidated) {
        rc = save_consolidated(tr, step, meta, err);
    } else {
        llm4d_engine_state st;
        e->ops->state(e, &st);
        llm4d_state_host h;
        rc = llm4d_engine_state_open(&st, tr->be, &tr->mem, LLM4D_VIEW_READ, &h, err);
        if (rc == LLM4D_OK) {
            const llm4d_ckpt_state cs = llm4d_trainer_ckpt_state(tr, &st, &h);
            const llm4d_ckpt_dest d = llm4d_trainer_ckpt_dest(tr, step, st.writes);
            rc = llm4d_gpt_ckpt_save_collective(tr->groups->world, &d, &c->model, &cs, meta, err);
            llm4d_engine_state_close(&h, tr->be, &tr->mem);
        }
        if (e->ops->state_done) {
            llm4d_err e2;
            llm4d_code r2 = e->ops->state_done(e, &e2);
            if (rc == LLM4D_OK && r2 != LLM4D_OK) rc = r2, *err = e2;
        }
    }
    cJSON_Delete(meta);
    LLM4D_TRY(llm4d_trainer_agree(tr, rc, err));
    tr->last_saved = step;
    llm4d_trace_span(tr->trace, LLM4D_TR_CKPT, "checkpoint save", step, t0);
    llm4d_log_info(&tr->log, "saved checkpoint %s/step_%lld", c->output_dir, (long long)step);
    return LLM4D_OK;
}

/* A whole number >= 0 of meta.json (dflt when absent). meta.json is not checksummed (it holds the checksums), so an
 * edited or damaged value is refused rather than cast: converting a double outside int64's range is undefined. */
static llm4d_code meta_int(const llm4d_ckpt *ck, const cJSON *obj, const char *key, int64_t dflt, int64_t *out,
                           llm4d_err *err) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, key);
    *out = dflt;
    if (!j) return LLM4D_OK;
    if (!cJSON_IsNumber(j) || !(j->valuedouble >= 0 && j->valuedouble <= 9007199254740992.0) ||
        j->valuedouble != (double)(int64_t)j->valuedouble)
        return llm4d_fail(err, LLM4D_EUSER, "checkpoint %s: meta.json's \"%s\" is not a whole number >= 0; the file "
                          "was edited or damaged: restore it or resume from another checkpoint", llm4d_ckpt_dir(ck), key);
    *out = (int64_t)j->valuedouble;
    return LLM4D_OK;
}

/* The training progress a resumed run continues from: the step, the evaluation cursor, the fp16 loss scale, Adam's
 * step count and the loss spike guard's window. */
static llm4d_code restore_progress(llm4d_trainer *tr, const llm4d_ckpt *ck, llm4d_engine *e, llm4d_err *err) {
    const llm4d_config *c = tr->cfg;
    const cJSON *meta = llm4d_ckpt_meta(ck);
    int64_t step, adam_t;
    LLM4D_TRY(meta_int(ck, meta, "step", llm4d_ckpt_step(ck), &step, err));
    tr->start_step = step + 1;
    tr->last_saved = step;
    LLM4D_TRY(meta_int(ck, meta, "eval_next", 0, &tr->eval_next, err));
    const cJSON *ls = cJSON_GetObjectItemCaseSensitive(meta, "loss_scale");
    if (tr->precision == LLM4D_PREC_FP16 && cJSON_IsNumber(ls) && ls->valuedouble > 0) {
        tr->loss_scale = ls->valuedouble;
        LLM4D_TRY(meta_int(ck, meta, "loss_scale_good_steps", 0, &tr->good_steps, err));
    }
    LLM4D_TRY(meta_int(ck, meta, "adam_t", step, &adam_t, err));
    e->ops->adam_steps(e, adam_t);
    const cJSON *recent = cJSON_GetObjectItemCaseSensitive(meta, "recent_losses"), *x;
    const int n = cJSON_IsArray(recent) ? cJSON_GetArraySize(recent) : 0, w = c->loss_spike_window;
    tr->n_recent = 0;
    int k = 0;
    cJSON_ArrayForEach(x, recent) { /* the last loss_spike_window of them */
        if (k++ < n - w || !cJSON_IsNumber(x)) continue;
        tr->recent_loss[tr->n_recent++] = x->valuedouble;
    }
    LLM4D_TRY(meta_int(ck, meta, "loss_spikes_skipped", 0, &tr->spikes_skipped, err));
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(meta, "data");
    int64_t gbs, seq;
    LLM4D_TRY(meta_int(ck, data, "global_batch_size", c->global_batch_size, &gbs, err));
    LLM4D_TRY(meta_int(ck, data, "max_seq_len", c->data.max_seq_len, &seq, err));
    if (gbs != c->global_batch_size || seq != c->data.max_seq_len)
        llm4d_log_warn(&tr->log, "the checkpoint was written with another global_batch_size or max_seq_len: the run "
                       "continues, but not on the samples an uninterrupted run would have read");
    return LLM4D_OK;
}

llm4d_code llm4d_trainer_load(llm4d_trainer *tr, const char *path, int require_optim, llm4d_err *err) {
    const llm4d_config *c = tr->cfg;
    const llm4d_param_table *t = &tr->model.table;
    llm4d_ckpt *ck;
    LLM4D_TRY(llm4d_ckpt_open(&ck, path, err));
    const cJSON *meta = llm4d_ckpt_meta(ck);
    int has_optim = 0;
    llm4d_engine *e = tr->engines.storage;
    llm4d_engine_state st;
    e->ops->state(e, &st);
    const size_t whole[2] = {0, t->total};
    llm4d_state_host h; /* read as well as written: what the checkpoint leaves out keeps its value */
    llm4d_code rc = llm4d_engine_state_open(&st, tr->be, &tr->mem, LLM4D_VIEW_READ | LLM4D_VIEW_WRITE, &h, err);
    const int opened = rc == LLM4D_OK;
    llm4d_ckpt_state cs = llm4d_trainer_ckpt_state(tr, &st, &h);
    if (rc == LLM4D_OK && st.params_whole) { /* every entry of this rank's part, then the states of its ranges */
        const llm4d_ckpt_state all = llm4d_ckpt_state_range(t, whole, h.params, NULL, NULL);
        rc = llm4d_gpt_ckpt_read(ck, &c->model, &all, NULL, err);
        cs.params = NULL;
    }
    if (rc == LLM4D_OK) rc = llm4d_gpt_ckpt_read(ck, &c->model, &cs, &has_optim, err);
    if (opened) llm4d_engine_state_close(&h, tr->be, &tr->mem);
    /* the weights were written behind the backend's back: any low-precision copy it keeps is stale */
    if (tr->be->weights_changed) tr->be->weights_changed(tr->be, NULL, 0);
    if (e->ops->state_done) {
        llm4d_err e2;
        llm4d_code r2 = e->ops->state_done(e, &e2);
        if (rc == LLM4D_OK && r2 != LLM4D_OK) rc = r2, *err = e2;
    }
    if (rc == LLM4D_OK && require_optim && !has_optim)
        rc = llm4d_fail(err, LLM4D_EUSER,
                        "checkpoint %s holds weights only (no optimizer state), so it cannot be resumed; start a new "
                        "run from its weights with --model_name_or_path %s instead of --resume",
                        llm4d_ckpt_dir(ck), path);
    if (rc == LLM4D_OK && has_optim) rc = restore_progress(tr, ck, e, err);
    int64_t step = 0;
    if (rc == LLM4D_OK && !has_optim) rc = meta_int(ck, meta, "step", llm4d_ckpt_step(ck), &step, err);
    if (rc == LLM4D_OK && !has_optim) tr->last_saved = step;
    /* a forward-only stack (llm4d eval) keeps no moments: state() reports m, v NULL, and only the weights are read */
    const int moments = st.m.p || st.v.p;
    if (rc == LLM4D_OK)
        llm4d_log_info(&tr->log, "loaded %s from %s", has_optim && moments ? "weights and optimizer state" : "weights",
                       llm4d_ckpt_dir(ck));
    llm4d_ckpt_close(ck);
    return rc;
}
