/* trainer.c — building a run and the training step loop (see trainer.h). */
#include "train/trainer.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/timer.h"

static llm4d_code mkdir_p(const char *path, llm4d_err *err) {
    char buf[LLM4D_PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0777) != 0 && errno != EEXIST) break;
        *p = '/';
    }
    if (mkdir(buf, 0777) != 0 && errno != EEXIST)
        return llm4d_fail(err, LLM4D_EUSER, "cannot create output directory %s: %s; choose a writable --output_dir",
                          path, strerror(errno));
    struct stat st;
    if (stat(buf, &st) != 0 || !S_ISDIR(st.st_mode))
        return llm4d_fail(err, LLM4D_EUSER, "output_dir %s is not a directory; choose another --output_dir", path);
    return LLM4D_OK;
}

static llm4d_code dump_file(const char *dir, const char *name, const void *data, size_t bytes, llm4d_err *err) {
    char path[LLM4D_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, bytes, f) != bytes) {
        if (f) fclose(f);
        return llm4d_fail(err, LLM4D_EIO, "cannot write %s: %s", path, strerror(errno));
    }
    fclose(f);
    return LLM4D_OK;
}

static llm4d_code dump_param_table(const llm4d_trainer *tr, llm4d_err *err) {
    char path[LLM4D_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/params.json", tr->debug_dump);
    FILE *f = fopen(path, "w");
    if (!f) return llm4d_fail(err, LLM4D_EIO, "cannot write %s: %s", path, strerror(errno));
    const llm4d_param_table *t = &tr->model.table;
    const llm4d_model_config *m = &tr->cfg->model;
    const llm4d_optim_config *o = &tr->cfg->optim;
    fprintf(f,
            "{\"vocab_size\": %d, \"padded_vocab_size\": %d, \"hidden_size\": %d, \"num_layers\": %d, "
            "\"num_attention_heads\": %d, \"ffn_hidden_size\": %d, \"max_seq_len\": %d, \"micro_batch_size\": %lld, "
            "\"global_batch_size\": %lld, \"max_steps\": %lld, \"max_lr\": %.9g, \"min_lr\": %.9g, "
            "\"warmup_rate\": %.9g, \"decay_steps\": %lld, \"weight_decay\": %.9g, \"beta1\": %.9g, "
            "\"beta2\": %.9g, \"epsilon\": %.9g, \"grad_clip\": %.9g,\n",
            m->vocab_size, m->padded_vocab_size, m->hidden_size, m->num_layers, m->num_attention_heads,
            m->ffn_hidden_size, tr->cfg->data.max_seq_len, (long long)tr->cfg->micro_batch_size,
            (long long)tr->cfg->global_batch_size, (long long)tr->cfg->max_steps, o->max_lr, o->min_lr, o->warmup_rate,
            (long long)o->decay_steps, o->weight_decay, o->beta1, o->beta2, o->epsilon, o->grad_clip);
    fprintf(f, "\"total\": %zu, \"params\": [\n", t->total);
    for (int i = 0; i < t->n; i++) {
        const llm4d_param *p = &t->p[i];
        char shape[64];
        if (p->ndim == 2)
            snprintf(shape, sizeof shape, "%lld, %lld", (long long)p->shape[0], (long long)p->shape[1]);
        else
            snprintf(shape, sizeof shape, "%lld", (long long)p->shape[0]);
        fprintf(f, "  {\"name\": \"%s\", \"offset\": %zu, \"numel\": %zu, \"shape\": [%s], \"decay\": %d}%s\n",
                p->name, p->offset, p->numel, shape, p->decay, i + 1 < t->n ? "," : "");
    }
    fprintf(f, "]}\n");
    fclose(f);
    return LLM4D_OK;
}

static void print_startup(llm4d_trainer *tr) {
    const llm4d_config *c = tr->cfg;
    const llm4d_model_config *m = &c->model;
    const llm4d_log *log = &tr->log;
    llm4d_log_info(log, "llm4d train: device %s, backend %s, %d threads", c->device, tr->be->name, tr->be->nthreads);
    llm4d_log_info(log, "model: vocab %d (padded %d), hidden %d, layers %d, heads %d, ffn %d, max_position %d",
                   m->vocab_size, m->padded_vocab_size, m->hidden_size, m->num_layers, m->num_attention_heads,
                   m->ffn_hidden_size, m->max_position_embeddings);
    llm4d_log_info(log, "parameters: %zu (%.2fM)", tr->model.table.total_real, tr->model.table.total_real / 1e6);
    llm4d_log_info(log, "FLOPs per token (6 x matmul params + 12 x layers x seq x hidden): %.4g", tr->flops_per_token);
    llm4d_log_info(log,
                   "batch: global %lld = micro %lld x accumulate %lld x data-parallel %d; max_seq_len %d; "
                   "%lld tokens per step",
                   (long long)c->global_batch_size, (long long)c->micro_batch_size, (long long)c->accumulate_steps,
                   c->dist.dp_degree * c->dist.sharding_degree, c->data.max_seq_len,
                   (long long)c->global_batch_size * c->data.max_seq_len);
    llm4d_log_info(log, "data: %s: %lld tokens in %lld documents, %lld samples per epoch", tr->corpus.path,
                   (long long)tr->corpus.n_tokens, (long long)tr->corpus.n_docs, (long long)tr->loader.n_samples);
    llm4d_log_info(log, "recompute: %s; activations held: %.2f MiB", m->use_recompute ? "on (full)" : "off",
                   tr->model.act_bytes / 1048576.0);
    for (int i = 0; i < c->n_noeffect; i++)
        llm4d_log_info(log, "config key %s is accepted but has no effect in llm4d", c->noeffect[i]);
    llm4d_log_info(log, "memory held by this process, by category:");
    if (log->enabled) {
        llm4d_mem_print(&tr->mem, log->out, "    ");
        fflush(log->out);
    }
}

llm4d_code llm4d_trainer_init(llm4d_trainer *tr, const llm4d_config *cfg, const char *debug_dump, llm4d_err *err) {
    memset(tr, 0, sizeof *tr);
    tr->cfg = cfg;
    tr->debug_dump = debug_dump;
    tr->world_size = 1;
    tr->log = (llm4d_log){.out = stdout, .enabled = 1};
    const llm4d_model_config *m = &cfg->model;
    if (strcmp(cfg->device, "cpu") != 0)
        return llm4d_fail(err, LLM4D_EUSER,
                          "--device %s: this build of llm4d trains on the CPU only (the CUDA backend is not built "
                          "yet); use --device cpu",
                          cfg->device);
    if (cfg->use_amp)
        return llm4d_fail(err, LLM4D_EUSER,
                          "use_amp: mixed precision is not implemented in llm4d yet; train in fp32 with --use_amp "
                          "false (Engine.mix_precision.enable: False)");
    const llm4d_dist_config *d = &cfg->dist;
    if (d->dp_degree * d->mp_degree * d->pp_degree * d->sharding_degree != 1)
        return llm4d_fail(err, LLM4D_EUSER,
                          "dp_degree %d x mp_degree %d x pp_degree %d x sharding_degree %d: this build of llm4d "
                          "trains in one process only; set every degree to 1",
                          d->dp_degree, d->mp_degree, d->pp_degree, d->sharding_degree);

    llm4d_code rc = cfg->backend_ref ? llm4d_backend_ref_create(&tr->be, err)
                                     : llm4d_backend_cpu_create(&tr->be, cfg->threads, err);
    if (rc) return rc;
    LLM4D_TRY(mkdir_p(cfg->output_dir, err));
    if (debug_dump) LLM4D_TRY(mkdir_p(debug_dump, err));

    LLM4D_TRY(llm4d_corpus_open(&tr->corpus, cfg->data.input_dir, err));
    tr->have_corpus = 1;
    if (tr->corpus.max_id >= m->vocab_size)
        return llm4d_fail(err, LLM4D_EUSER,
                          "%s holds token id %lld, but the model's vocab_size is %d; tokenize with the model's "
                          "vocabulary or raise Model.vocab_size",
                          tr->corpus.path, (long long)tr->corpus.max_id, m->vocab_size);

    const int T = cfg->data.max_seq_len, mb = (int)cfg->micro_batch_size;
    LLM4D_TRY(llm4d_gpt_create(&tr->model, m, tr->be, &tr->mem, mb, T, m->use_recompute, cfg->seed, err));
    tr->have_model = 1;
    LLM4D_TRY(llm4d_adamw_create(&tr->opt, tr->be, &tr->mem, 0, tr->model.table.total, cfg->optim.beta1,
                                 cfg->optim.beta2, cfg->optim.epsilon, cfg->optim.weight_decay, err));
    tr->have_opt = 1;
    const int data_world = cfg->dist.dp_degree * cfg->dist.sharding_degree;
    LLM4D_TRY(llm4d_loader_init(&tr->loader, &tr->corpus, T, cfg->global_batch_size, (int)cfg->local_batch_size, 0,
                                data_world, m->eos_token_id, err));
    LLM4D_TRY(llm4d_batch_alloc(&tr->batch, &tr->mem, (int)cfg->local_batch_size, T, err));
    tr->have_batch = 1;
    tr->dloss = llm4d_mem_alloc(&tr->mem, LLM4D_MEM_WORKSPACE, (size_t)mb * T * sizeof(float));
    if (!tr->dloss) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    tr->lr = llm4d_lr_cosine_warmup(cfg->optim.max_lr, cfg->optim.min_lr, cfg->optim.warmup_rate,
                                    cfg->optim.decay_steps);
    tr->flops_per_token = llm4d_gpt_flops_per_token(m, T);

    char path[LLM4D_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/metrics.jsonl", cfg->output_dir);
    tr->metrics = fopen(path, "w");
    if (!tr->metrics)
        return llm4d_fail(err, LLM4D_EUSER, "cannot write %s: %s; choose a writable --output_dir", path,
                          strerror(errno));
    if (debug_dump) {
        LLM4D_TRY(dump_param_table(tr, err));
        LLM4D_TRY(dump_file(debug_dump, "params_init.bin", tr->model.params, tr->model.table.total * sizeof(float),
                            err));
    }
    print_startup(tr);
    return LLM4D_OK;
}

void llm4d_trainer_free(llm4d_trainer *tr) {
    if (tr->metrics) fclose(tr->metrics);
    if (tr->dloss)
        llm4d_mem_free(&tr->mem, LLM4D_MEM_WORKSPACE, tr->dloss,
                       (size_t)tr->cfg->micro_batch_size * tr->cfg->data.max_seq_len * sizeof(float));
    if (tr->have_batch) llm4d_batch_free(&tr->batch, &tr->mem);
    llm4d_loader_free(&tr->loader);
    if (tr->have_opt) llm4d_adamw_destroy(&tr->opt, tr->be, &tr->mem);
    if (tr->have_model) llm4d_gpt_destroy(&tr->model);
    if (tr->have_corpus) llm4d_corpus_close(&tr->corpus);
    if (tr->be) tr->be->destroy(tr->be);
    memset(tr, 0, sizeof *tr);
}

/* Debug dumps of step 1, for the PyTorch parity test: the logits of micro-batch 0 (taken by an extra forward
 * without dropout, before training touches anything), then the batch of every step and the step-1 gradients. */
static llm4d_code dump_step(llm4d_trainer *tr, int64_t step, int phase, llm4d_err *err) {
    const llm4d_config *c = tr->cfg;
    const int T = c->data.max_seq_len, mb = (int)c->micro_batch_size;
    const size_t rowsT = (size_t)tr->batch.rows * T;
    char name[64];
    if (phase == 0) {
        snprintf(name, sizeof name, "batch_step%lld.bin", (long long)step);
        char path[LLM4D_PATH_MAX + 64];
        snprintf(path, sizeof path, "%s/%s", tr->debug_dump, name);
        FILE *f = fopen(path, "wb");
        if (!f) return llm4d_fail(err, LLM4D_EIO, "cannot write %s", path);
        fwrite(tr->batch.tokens, sizeof(int32_t), rowsT, f);
        fwrite(tr->batch.targets, sizeof(int32_t), rowsT, f);
        fwrite(tr->batch.mask, sizeof(float), rowsT, f);
        fclose(f);
        if (step == 1) {
            llm4d_gpt_forward(&tr->model, tr->batch.tokens, NULL, NULL, tr->batch.sample_ids, 1, 0, mb, T);
            LLM4D_TRY(dump_file(tr->debug_dump, "logits_step1.bin", tr->model.logits,
                                (size_t)mb * T * c->model.padded_vocab_size * sizeof(float), err));
        }
    } else if (step == 1) {
        LLM4D_TRY(dump_file(tr->debug_dump, "grads_step1.bin", tr->model.grads,
                            tr->model.table.total * sizeof(float), err));
    }
    return LLM4D_OK;
}

llm4d_code llm4d_trainer_run(llm4d_trainer *tr, llm4d_err *err) {
    const llm4d_config *c = tr->cfg;
    llm4d_backend *be = tr->be;
    llm4d_gpt *g = &tr->model;
    const int T = c->data.max_seq_len, mb = (int)c->micro_batch_size;
    const int64_t acc = c->accumulate_steps;
    double reader_cost = 0, batch_cost = 0;
    int logged = 0;
    for (int64_t step = 1; step <= c->max_steps; step++) {
        const double t0 = llm4d_now();
        llm4d_loader_get(&tr->loader, step - 1, &tr->batch);
        const double t1 = llm4d_now();
        if (tr->debug_dump) LLM4D_TRY(dump_step(tr, step, 0, err));

        double count = 0;
        for (size_t i = 0; i < (size_t)tr->batch.rows * T; i++) count += tr->batch.mask[i];
        be->zero(be, g->grads, g->table.total * sizeof(float));
        double loss_sum = 0;
        for (int64_t k = 0; k < acc; k++) {
            const size_t off = (size_t)k * mb * T;
            for (size_t i = 0; i < (size_t)mb * T; i++)
                tr->dloss[i] = count > 0 ? (float)(tr->batch.mask[off + i] / count) : 0.0f;
            loss_sum += llm4d_gpt_forward(g, tr->batch.tokens + off, tr->batch.targets + off, tr->dloss,
                                          tr->batch.sample_ids + k * mb, (uint32_t)step, 1, mb, T);
            llm4d_gpt_backward(g, tr->batch.tokens + off, tr->batch.sample_ids + k * mb, (uint32_t)step, 1, mb, T);
        }
        if (tr->debug_dump) LLM4D_TRY(dump_step(tr, step, 1, err));
        const double loss = loss_sum; /* already divided by the global count through dloss */
        if (!isfinite(loss))
            return llm4d_fail(err, LLM4D_EUSER,
                              "loss is %f at step %lld; lower max_lr or enable gradient clipping (grad_clip)", loss,
                              (long long)step);
        const double norm = sqrt(be->sumsq(be, g->grads, g->table.total));
        const float clip = llm4d_clip_factor(norm, c->optim.grad_clip);
        const double lr = llm4d_lr_at(&tr->lr, step);
        llm4d_adamw_step(&tr->opt, be, &g->table, g->params, g->grads, (float)lr, clip);
        const double t2 = llm4d_now();

        reader_cost += t1 - t0;
        batch_cost += t2 - t0;
        logged++;
        const double lr_printed = llm4d_lr_at(&tr->lr, step + 1);
        const double step_cost = t2 - t0;
        const double tokens = (double)c->global_batch_size * T;
        fprintf(tr->metrics,
                "{\"step\": %lld, \"epoch\": %lld, \"batch\": %lld, \"loss\": %.9f, \"reader_cost\": %.6f, "
                "\"batch_cost\": %.6f, \"speed\": %.4f, \"ips_total\": %.1f, \"ips\": %.1f, \"learning_rate\": %.6e, "
                "\"lr_used\": %.6e, \"grad_norm\": %.6f, \"tokens\": %.0f, \"flops_per_token\": %.6g}\n",
                (long long)step, (long long)tr->batch.epoch, (long long)tr->batch.batch, loss, t1 - t0, step_cost,
                1.0 / step_cost, tokens / step_cost, tokens / step_cost / tr->world_size, lr_printed, lr, norm,
                tokens, tr->flops_per_token);
        fflush(tr->metrics);
        if (step % c->logging_freq == 0 || step == c->max_steps) {
            const double avg_batch = batch_cost / logged, speed = 1.0 / avg_batch;
            llm4d_log_info(&tr->log,
                           "global step %lld, epoch: %lld, batch: %lld, loss: %.9f, avg_reader_cost: %.5f sec, "
                           "avg_batch_cost: %.5f sec, speed: %.2f step/s, ips_total: %.0f tokens/s, ips: %.0f "
                           "tokens/s, learning rate: %.5e",
                           (long long)step, (long long)tr->batch.epoch, (long long)tr->batch.batch, loss,
                           reader_cost / logged, avg_batch, speed, speed * tokens, speed * tokens / tr->world_size,
                           lr_printed);
            reader_cost = batch_cost = 0;
            logged = 0;
        }
    }
    return LLM4D_OK;
}
