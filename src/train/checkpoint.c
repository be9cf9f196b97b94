/* checkpoint.c — the trainer's checkpoints (format: ckpt/gpt_ckpt.h, ckpt/store.h).
 *
 * What makes a resumed run bit-identical to one that never stopped: the weights and Adam's m, v and step count;
 * the global step (which fixes the data position, since step s reads items s*G .. s*G+G-1 of the index; the
 * learning rate, lr(step); and every dropout mask, keyed by (seed, step, position) in the counter-based RNG); the
 * validation iterator's position. All of it is in meta.json next to the tensors. Tensors are stored under their
 * global names and shapes, whatever layout wrote them, so any layout loads any checkpoint.
 *
 * Saving from a sharded run gathers the optimizer states (and at stage 3 the parameters) over the sharding group
 * into whole buffers for the duration of the save, then world rank 0 writes one consolidated checkpoint (the
 * seeds' save_group_sharded_model). Loading reads just the ranges each rank owns. */
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
    cJSON_AddNumberToObject(meta, "adam_t", (double)(tr->have_sh ? tr->sh.t : tr->opt.t));
    cJSON_AddNumberToObject(meta, "eval_next", (double)tr->eval_next);
    cJSON_AddNumberToObject(meta, "loss", tr->last_loss);
    cJSON_AddNumberToObject(meta, "loss_scale", tr->loss_scale);
    cJSON_AddNumberToObject(meta, "loss_scale_good_steps", (double)tr->good_steps);
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

/* Gather the sharding group's shards of a local buffer into a whole (aligned-layout) buffer. */
static llm4d_code gather_full(llm4d_trainer *tr, const float *local, float *full, llm4d_err *err) {
    const llm4d_sharding *s = &tr->sh;
    for (int grp = 0; grp < s->n_groups; grp++)
        LLM4D_TRY(llm4d_comm_allgather(s->sh, local + s->shard_off[grp], full + tr->model.table.group_lo[grp],
                                       s->shard_len[grp], LLM4D_COMM_F32, err));
    return LLM4D_OK;
}

llm4d_code llm4d_trainer_save(llm4d_trainer *tr, int64_t step, llm4d_err *err) {
    const llm4d_config *c = tr->cfg;
    const llm4d_param_table *t = &tr->model.table;
    const float *params = tr->model.params, *m = tr->opt.m, *v = tr->opt.v;
    float *tmp[3] = {NULL, NULL, NULL};
    const size_t bytes = t->total * sizeof(float);
    llm4d_code rc = LLM4D_OK;
    if (tr->have_sh) {
        for (int k = 0; k < (tr->sh.stage >= 3 ? 3 : 2); k++) {
            tmp[k] = llm4d_mem_alloc(&tr->mem, LLM4D_MEM_WORKSPACE, bytes);
            if (!tmp[k]) rc = llm4d_fail(err, LLM4D_ENOMEM, "out of memory gathering the checkpoint (%zu bytes)", bytes);
        }
        if (rc == LLM4D_OK) rc = gather_full(tr, tr->sh.m, tmp[0], err);
        if (rc == LLM4D_OK) rc = gather_full(tr, tr->sh.v, tmp[1], err);
        if (rc == LLM4D_OK && tr->sh.stage >= 3) rc = gather_full(tr, tr->sh.local_params, tmp[2], err);
        m = tmp[0], v = tmp[1];
        if (tr->sh.stage >= 3) params = tmp[2];
    }
    if (rc == LLM4D_OK && tr->is_writer) {
        cJSON *meta = build_meta(tr, step);
        rc = llm4d_gpt_ckpt_save(c->output_dir, step, &c->model, t, params, m, v, 0, t->total, meta, c->keep_last,
                                 err);
        cJSON_Delete(meta);
    }
    for (int k = 0; k < 3; k++)
        if (tmp[k]) llm4d_mem_free(&tr->mem, LLM4D_MEM_WORKSPACE, tmp[k], bytes);
    LLM4D_TRY(llm4d_trainer_agree(tr, rc, err));
    tr->last_saved = step;
    llm4d_log_info(&tr->log, "saved checkpoint %s/step_%lld", c->output_dir, (long long)step);
    return LLM4D_OK;
}

static int64_t meta_int(const cJSON *meta, const char *key, int64_t dflt) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(meta, key);
    return cJSON_IsNumber(j) ? (int64_t)j->valuedouble : dflt;
}

llm4d_code llm4d_trainer_load(llm4d_trainer *tr, const char *path, int require_optim, llm4d_err *err) {
    const llm4d_config *c = tr->cfg;
    const llm4d_param_table *t = &tr->model.table;
    llm4d_ckpt *ck;
    LLM4D_TRY(llm4d_ckpt_open(&ck, path, err));
    const cJSON *meta = llm4d_ckpt_meta(ck);
    int has_optim = 0;
    llm4d_code rc;
    if (!tr->have_sh) {
        rc = llm4d_gpt_ckpt_read(ck, &c->model, t, tr->model.params, tr->opt.m, tr->opt.v, 0, t->total, &has_optim,
                                 err);
    } else {
        llm4d_sharding *s = &tr->sh;
        rc = s->stage < 3 ? llm4d_gpt_ckpt_read(ck, &c->model, t, tr->model.params, NULL, NULL, 0, t->total, NULL, err)
                          : LLM4D_OK;
        for (int grp = 0; grp < s->n_groups && rc == LLM4D_OK; grp++) {
            const size_t lo = t->group_lo[grp] + (size_t)s->rank * s->shard_len[grp], hi = lo + s->shard_len[grp];
            const size_t off = s->shard_off[grp];
            rc = llm4d_gpt_ckpt_read(ck, &c->model, t, s->stage >= 3 ? s->local_params + off : NULL, s->m + off,
                                     s->v + off, lo, hi, &has_optim, err);
        }
    }
    if (rc == LLM4D_OK && require_optim && !has_optim)
        rc = llm4d_fail(err, LLM4D_EUSER,
                        "checkpoint %s holds weights only (no optimizer state), so it cannot be resumed; start a new "
                        "run from its weights with --model_name_or_path %s instead of --resume",
                        llm4d_ckpt_dir(ck), path);
    if (rc == LLM4D_OK && has_optim) {
        const int64_t step = meta_int(meta, "step", llm4d_ckpt_step(ck));
        tr->start_step = step + 1;
        tr->last_saved = step;
        tr->eval_next = meta_int(meta, "eval_next", 0);
        const cJSON *ls = cJSON_GetObjectItemCaseSensitive(meta, "loss_scale");
        if (tr->precision == LLM4D_PREC_FP16 && cJSON_IsNumber(ls) && ls->valuedouble > 0) {
            tr->loss_scale = ls->valuedouble;
            tr->good_steps = meta_int(meta, "loss_scale_good_steps", 0);
        }
        const int64_t adam_t = meta_int(meta, "adam_t", step);
        if (tr->have_sh)
            tr->sh.t = adam_t;
        else
            tr->opt.t = adam_t;
        const cJSON *data = cJSON_GetObjectItemCaseSensitive(meta, "data");
        if (meta_int(data, "global_batch_size", c->global_batch_size) != c->global_batch_size ||
            meta_int(data, "max_seq_len", c->data.max_seq_len) != c->data.max_seq_len)
            llm4d_log_warn(&tr->log,
                           "the checkpoint was written with another global_batch_size or max_seq_len: the run "
                           "continues, but not on the samples an uninterrupted run would have read");
    }
    if (rc == LLM4D_OK && !has_optim) tr->last_saved = meta_int(meta, "step", llm4d_ckpt_step(ck));
    if (rc == LLM4D_OK)
        llm4d_log_info(&tr->log, "loaded %s from %s", has_optim ? "weights and optimizer state" : "weights",
                       llm4d_ckpt_dir(ck));
    llm4d_ckpt_close(ck);
    return rc;
}
