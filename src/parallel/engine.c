/* engine.c — the stack of parallel engines and the model hooks that dispatch into it (see engine.h). */
#include "parallel/engine.h"

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

static void hook_grads_done(void *ctx, int grp) {
    llm4d_engine_stack *s = ctx;
    for (int i = 0; i < s->n; i++)
        if (s->e[i]->ops->grads_done) s->e[i]->ops->grads_done(s->e[i], grp);
}

void llm4d_engines_install(llm4d_engine_stack *s) {
    s->g->hooks = (llm4d_gpt_hooks){.ctx = s,
                                    .params_for = hook_params_for,
                                    .release = hook_release,
                                    .grads_for = hook_grads_for,
                                    .grads_done = hook_grads_done};
}

void llm4d_engines_destroy(llm4d_engine_stack *s) {
    for (int i = s->n - 1; i >= 0; i--)
        if (s->e[i]->ops->destroy) s->e[i]->ops->destroy(s->e[i]);
    if (s->g && s->g->hooks.ctx == s) s->g->hooks = (llm4d_gpt_hooks){0};
    memset(s, 0, sizeof *s);
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

double llm4d_engines_comm_wait(const llm4d_engine_stack *s) {
    double t = 0;
    for (int i = 0; i < s->n; i++) t += s->e[i]->comm_wait_s;
    return t;
}
