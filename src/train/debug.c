/* debug.c — what the test facilities (debug.h) do to a run. The dumps (`llm4d train --debug_dump DIR`, used by
 * tests/test_torch_parity.sh): the parameter table and initial weights, every step's batch, the logits of step 1's
 * first micro-batch (taken by an extra forward without dropout, before training touches anything) and the step-1
 * gradients. The bends of a step: a rank that hangs, an overflowing gradient, a loss spike. */
#include <errno.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "backend/view.h"
#include "train/trainer.h"

void llm4d_trainer_debug_hang(const llm4d_trainer *tr, int64_t step) {
    if (step == tr->debug.hang_step && tr->topo.rank == tr->debug.hang_rank) /* as a rank stuck in a kernel */
        for (;;) pause();
}

/* Whether `name` is one of the comma-separated names of `list`. */
static int name_in_list(const char *name, const char *list) {
    const size_t n = strlen(name);
    for (const char *p = list; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (!strncmp(p, name, n) && (p[n] == ',' || !p[n])) return 1;
    return 0;
}

void llm4d_trainer_debug_after_backward(llm4d_trainer *tr, int64_t step, double *loss) {
    const llm4d_debug *d = &tr->debug;
    if (step == d->loss_spike_step) *loss *= 10;
    if (step != d->inject_inf_step) return;
    const llm4d_param_table *t = &tr->model.table; /* an overflow, as an fp16 gradient would produce */
    int64_t j0, j1;
    for (int i = 0; i < t->n; i++) {
        if (d->inject_inf_param && !name_in_list(t->p[i].name, d->inject_inf_param)) continue;
        float *gr = llm4d_engines_grad_view(&tr->engines, i, &j0, &j1);
        if (gr && j1 > j0) {
            tr->be->scale(tr->be, gr, (float)INFINITY, 1); /* inf, or NaN where it was 0 */
            if (!d->inject_inf_param) break;
        }
    }
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

/* A tensor in device memory, through a host view (backend/view.h). */
static llm4d_code dump_tensor(llm4d_trainer *tr, const char *name, void *dev, size_t bytes, llm4d_err *err) {
    llm4d_view v;
    LLM4D_TRY(llm4d_view_open(&v, tr->be, &tr->mem, dev, bytes, LLM4D_VIEW_READ, err));
    const llm4d_code rc = dump_file(tr->debug.debug_dump, name, v.host, bytes, err);
    llm4d_view_close(&v, tr->be, &tr->mem);
    return rc;
}

llm4d_code llm4d_trainer_dump_init(llm4d_trainer *tr, llm4d_err *err) {
    char path[LLM4D_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/params.json", tr->debug.debug_dump);
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
    fprintf(f,
            "\"llama\": %d, \"rmsnorm\": %d, \"rope\": %d, \"swiglu\": %d, \"bias\": %d, \"tied\": %d, "
            "\"num_key_value_heads\": %d, \"norm_epsilon\": %.9g, \"rope_theta\": %.9g,\n",
            m->llama, m->rmsnorm, m->rope, m->swiglu, !m->no_bias, !m->untied,
            llm4d_model_kv_heads(m), m->norm_epsilon, m->rope_theta);
    fprintf(f, "\"total\": %zu, \"params\": [\n", t->total);
    for (int i = 0; i < t->n; i++) {
        const llm4d_param *p = &t->p[i];
        char shape[64];
        if (p->ndim == 2)
            snprintf(shape, sizeof shape, "%lld, %lld", (long long)p->shape[0], (long long)p->shape[1]);
        else
            snprintf(shape, sizeof shape, "%lld", (long long)p->shape[0]);
        fprintf(f, "  {\"name\": \"%s\", \"offset\": %zu, \"numel\": %zu, \"shape\": [%s], \"decay\": %d}%s\n", p->name,
                p->offset, p->numel, shape, p->decay, i + 1 < t->n ? "," : "");
    }
    fprintf(f, "]}\n");
    fclose(f);
    if (!tr->model.params) return LLM4D_OK;
    return dump_tensor(tr, "params_init.bin", tr->model.params, t->total * sizeof(float), err);
}

llm4d_code llm4d_trainer_dump_step(llm4d_trainer *tr, int64_t step, const llm4d_batch *b, int after_backward,
                                   llm4d_err *err) {
    const llm4d_config *c = tr->cfg;
    const int T = c->data.max_seq_len, mb = (int)c->micro_batch_size;
    const size_t rowsT = (size_t)b->rows * T;
    if (after_backward) {
        if (step != 1 || !tr->model.grads) return LLM4D_OK;
        return dump_tensor(tr, "grads_step1.bin", tr->model.grads, tr->model.table.total * sizeof(float), err);
    }
    char path[LLM4D_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/batch_step%lld.bin", tr->debug.debug_dump, (long long)step);
    FILE *f = fopen(path, "wb");
    if (!f) return llm4d_fail(err, LLM4D_EIO, "cannot write %s: %s", path, strerror(errno));
    fwrite(b->tokens, sizeof(int32_t), rowsT, f);
    fwrite(b->targets, sizeof(int32_t), rowsT, f);
    fwrite(b->mask, sizeof(float), rowsT, f);
    fclose(f);
    const llm4d_model_part *part = &tr->model.table.part;
    if (step != 1 || part->n_chunks != 1 || !part->embedding || !part->head) return LLM4D_OK; /* a whole model's */
    llm4d_devbatch_upload(&tr->batch, b, 0);
    llm4d_gpt_forward(&tr->model, &(llm4d_micro){.tokens = tr->batch.tokens, .sample_ids = tr->batch.sample_ids,
                                                 .step = 1, .B = mb, .T = T});
    return dump_tensor(tr, "logits_step1.bin", tr->model.logits,
                       (size_t)mb * T * c->model.padded_vocab_size * sizeof(float), err);
}
