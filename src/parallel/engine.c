/* engine.c — the stack of parallel engines and the model hooks that dispatch into it (see engine.h). */
#include "parallel/engine.h"

#include <stdlib.h>
#include <string.h>

void llm4d_engines_init(llm4d_engine_stack *s, llm4d_gpt *g) {
    memset(s, 0, sizeof *s);
    s->g = g;
}

void llm4d_engines_push(llm4d_engine_stack *s, llm4d_engine *e, int is_storage) {
    LLM4D_ASSERT(s->n < LLM4D_MAX_ENGINES, "more than %d engines", LLM4D_MAX_ENGINES);
    LLM4D_ASSERT(!is_storage || !s->storage, "two storage engines (%s, %s)", s->storage ? s->storage->ops->name : "",
                 e->ops->name);
    LLM4D_ASSERT(is_storage || s->storage, "the storage engine goes first (pushing %s)", e->ops->name);
    s->e[s->n++] = e;
    if (is_storage) s->storage = e;
}

/* The first engine defining a hook answers it. */
#define FIRST_WITH(s, hook)                                                                                      \
    ({                                                                                                           \
        llm4d_engine *found_ = NULL;                                                                             \
        for (int i_ = 0; i_ < (s)->n && !found_; i_++)                                                           \
            if ((s)->e[i_]->ops->hook) found_ = (s)->e[i_];                                                      \
        found_;                                                                                                  \
    })

static float *hook_params_for(void *ctx, int grp, int pass) {
    llm4d_engine_stack *s = ctx;
    llm4d_engine *e = FIRST_WITH(s, params_for);
    return e ? e->ops->params_for(e, grp, pass) : s->g->params + s->g->table.g[grp].lo;
}

static void hook_release(void *ctx, int grp, int pass) {
    llm4d_engine_stack *s = ctx;
    llm4d_engine *e = FIRST_WITH(s, release);
    if (e) e->ops->release(e, grp, pass);
}

static float *hook_grads_for(void *ctx, int grp) {
    llm4d_engine_stack *s = ctx;
    llm4d_engine *e = FIRST_WITH(s, grads_for);
    return e ? e->ops->grads_for(e, grp) : s->g->grads + s->g->table.g[grp].lo;
}

static void hook_grads_done(void *ctx, int grp, const llm4d_event *ready) {
    llm4d_engine_stack *s = ctx;
    for (int i = 0; i < s->n; i++)
        if (s->e[i]->ops->grads_done) s->e[i]->ops->grads_done(s->e[i], grp, ready);
}

void llm4d_engines_install(llm4d_engine_stack *s) {
    s->g->hooks = (llm4d_gpt_hooks){.ctx = s,
                                    .params_for = hook_params_for,
                                    .release = hook_release,
                                    .grads_for = hook_grads_for,
                                    .grads_done = hook_grads_done};
}

void llm4d_engines_destroy(llm4d_engine_stack *s) {
    for (int i = s->n - 1; i >= 0; i--) {
        if (s->e[i]->ops->destroy) s->e[i]->ops->destroy(s->e[i]);
        free(s->e[i]);
    }
    if (s->g && s->g->hooks.ctx == s) s->g->hooks = (llm4d_gpt_hooks){0};
    memset(s, 0, sizeof *s);
}

llm4d_executor *llm4d_engines_executor(llm4d_engine_stack *s) {
    llm4d_engine *e = FIRST_WITH(s, executor);
    if (e) return e->ops->executor(e);
    llm4d_sequential_init(&s->seq, s->g);
    return &s->seq.base;
}

void llm4d_engines_stats(llm4d_engine_stack *s, llm4d_engine_stats *out) {
    memset(out, 0, sizeof *out);
    out->pp_stage = -1;
    for (int i = 0; i < s->n; i++)
        if (s->e[i]->ops->stats) s->e[i]->ops->stats(s->e[i], out);
}

void llm4d_engines_begin_step(llm4d_engine_stack *s, int n_micro) {
    for (int i = 0; i < s->n; i++) {
        s->e[i]->comm_wait_s = s->e[i]->comm_total_s = 0;
        if (s->e[i]->ops->begin_step) s->e[i]->ops->begin_step(s->e[i], n_micro);
    }
}

llm4d_code llm4d_engines_finish_backward(llm4d_engine_stack *s, llm4d_err *err) {
    /* the storage first: its reductions complete the elements the reducers then combine */
    if (s->storage->ops->finish_backward) LLM4D_TRY(s->storage->ops->finish_backward(s->storage, err));
    for (int i = 0; i < s->n; i++)
        if (s->e[i] != s->storage && s->e[i]->ops->finish_backward)
            LLM4D_TRY(s->e[i]->ops->finish_backward(s->e[i], err));
    return LLM4D_OK;
}

llm4d_code llm4d_engines_update(llm4d_engine_stack *s, float lr, float grad_scale, llm4d_err *err) {
    return s->storage->ops->update(s->storage, lr, grad_scale, err);
}

double llm4d_engine_grad_sumsq(llm4d_engine *storage, llm4d_gpt *g, int owners_only, double *each) {
    const llm4d_param_table *t = &g->table;
    const float **x = malloc((size_t)t->n * sizeof *x);
    size_t *len = malloc((size_t)t->n * sizeof *len);
    int *entry = malloc((size_t)t->n * sizeof *entry);
    double *part = malloc((size_t)t->n * sizeof *part);
    LLM4D_ASSERT(x && len && entry && part, "out of memory for %d gradient views", t->n);
    int n = 0;
    for (int i = 0; i < t->n; i++) {
        int64_t j0, j1;
        if (each) each[i] = 0.0;
        if (owners_only && !t->p[i].owner) continue;
        const float *gr = storage->ops->grad_view(storage, i, &j0, &j1);
        if (!gr || j1 <= j0) continue;
        x[n] = gr, len[n] = (size_t)(j1 - j0), entry[n++] = i;
    }
    const double total = n ? g->be->sumsq_many(g->be, n, x, len, part) : 0.0;
    for (int k = 0; each && k < n; k++) each[entry[k]] = part[k];
    free(x), free(len), free(entry), free(part);
    return total;
}

llm4d_code llm4d_engine_state_open(const llm4d_engine_state *st, llm4d_backend *be, llm4d_mem *mem, int mode,
                                   llm4d_state_host *h, llm4d_err *err) {
    memset(h, 0, sizeof *h);
    const llm4d_state_buf *b[3] = {&st->params, &st->m, &st->v};
    float **out[3] = {&h->params, &h->m, &h->v};
    for (int k = 0; k < 3; k++) {
        if (b[k]->host) {
            *out[k] = b[k]->p;
            continue;
        }
        const llm4d_code rc = llm4d_view_open(&h->view[k], be, mem, b[k]->p, b[k]->len * sizeof(float), mode, err);
        if (rc != LLM4D_OK) {
            llm4d_engine_state_close(h, be, mem);
            return rc;
        }
        *out[k] = h->view[k].host;
    }
    return LLM4D_OK;
}

void llm4d_engine_state_close(llm4d_state_host *h, llm4d_backend *be, llm4d_mem *mem) {
    for (int k = 0; k < 3; k++) llm4d_view_close(&h->view[k], be, mem);
    h->params = h->m = h->v = NULL;
}

double llm4d_engines_comm_wait(const llm4d_engine_stack *s) {
    double t = 0;
    for (int i = 0; i < s->n; i++) t += s->e[i]->comm_wait_s;
    return t;
}
