/* flat.c — the whole-buffer storage engine (see flat.h). */
#include "parallel/flat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/hash.h"

static llm4d_flat *of(llm4d_engine *e) { return (llm4d_flat *)e; }

static void flat_begin_step(llm4d_engine *e, int n_micro) {
    (void)n_micro;
    llm4d_flat *f = of(e);
    /* a backend that can reset gradients is told they start over every step (nothing is zeroed); otherwise the
     * update zeroed them in its own pass, and a skipped update (fp16 overflow, a loss spike) or the first step did
     * not */
    if (f->g->grads && (f->be->grads_reset || !f->grads_zero))
        llm4d_grads_start(f->be, f->g->grads, f->g->table.total * sizeof(float));
    f->grads_zero = 0;
}

static float *flat_grad_view(llm4d_engine *e, int i, int64_t *j0, int64_t *j1) {
    llm4d_flat *f = of(e);
    const llm4d_param *p = &f->g->table.p[i];
    *j0 = 0;
    *j1 = (int64_t)p->numel;
    return f->g->grads + p->offset;
}

static double flat_grad_sumsq(llm4d_engine *e) {
    llm4d_flat *f = of(e);
    return f->counts ? llm4d_engine_grad_sumsq(e, f->g, 1, NULL) : 0.0;
}

static llm4d_code flat_update(llm4d_engine *e, float lr, float grad_scale, llm4d_err *err) {
    llm4d_flat *f = of(e);
    if (f->forward_only) return llm4d_fail(err, LLM4D_EINTERNAL, "a forward-only stack has no optimizer to update");
    const llm4d_param_table *t = &f->g->table;
    llm4d_optimizer_next(&f->opt);
    /* the entries tile the buffer (any padding between them is never written), so zeroing each entry's gradients
     * in its update pass leaves the whole buffer zero; where the next step resets them instead, not written */
    const int zero = !f->be->grads_reset;
    llm4d_optimizer_apply(&f->opt, f->ranges, t->n, lr, grad_scale, zero);
    f->grads_zero = zero;
    return LLM4D_OK;
}

static void flat_state(llm4d_engine *e, llm4d_engine_state *out) {
    llm4d_flat *f = of(e);
    const size_t n = f->g->table.total;
    *out = (llm4d_engine_state){.n = 1, .lo = &f->range_lo, .hi = &f->range_hi, .params = {f->g->params, n, 0},
                                .m = {f->m, n, 0}, .v = {f->v, n, 0}, .params_whole = 1, .writes = f->counts};
}

static uint64_t flat_param_hash(llm4d_engine *e, int which) {
    llm4d_flat *f = of(e);
    const llm4d_param_table *t = &f->g->table;
    llm4d_view v;
    llm4d_err err;
    if (llm4d_view_open(&v, f->be, f->mem, f->g->params, t->total * sizeof(float), LLM4D_VIEW_READ, &err) != LLM4D_OK)
        return 0; /* no memory to stage the parameters: no hash (a test facility) */
    const float *p = v.host;
    uint64_t h = LLM4D_HASH_INIT;
    if (which == LLM4D_HASH_ALL) h = llm4d_hash_words(p, t->total);
    else
        for (int i = 0; i < t->n; i++)
            if (llm4d_hash_takes(&t->p[i], which)) h = llm4d_hash_more(h, p + t->p[i].offset, t->p[i].numel);
    llm4d_view_close(&v, f->be, f->mem);
    return h;
}

static int64_t flat_adam_steps(llm4d_engine *e, int64_t set) {
    llm4d_flat *f = of(e);
    if (set >= 0) f->opt.hp.t = set;
    return f->opt.hp.t;
}

static void flat_describe(llm4d_engine *e, char *buf, size_t n) {
    llm4d_flat *f = of(e);
    if (f->forward_only)
        snprintf(buf, n, "parameters held whole: %zu elements; forward only: no gradients, no Adam m, v",
                 f->g->table.total);
    else
        snprintf(buf, n, "parameters, gradients and Adam m, v held whole: %zu elements each", f->g->table.total);
}

static void flat_destroy(llm4d_engine *e) {
    llm4d_flat *f = of(e);
    const size_t bytes = f->g->table.total * sizeof(float);
    if (f->m) f->be->free(f->be, f->mem, LLM4D_MEM_OPTIM, f->m, bytes);
    if (f->v) f->be->free(f->be, f->mem, LLM4D_MEM_OPTIM, f->v, bytes);
    f->m = f->v = NULL;
    free(f->ranges);
    f->ranges = NULL;
}

static const llm4d_engine_ops flat_ops = {
    .name = "flat",
    .begin_step = flat_begin_step,
    .grad_view = flat_grad_view,
    .grad_sumsq = flat_grad_sumsq,
    .update = flat_update,
    .state = flat_state,
    .param_hash = flat_param_hash,
    .adam_steps = flat_adam_steps,
    .describe = flat_describe,
    .destroy = flat_destroy,
};

llm4d_code llm4d_flat_init(llm4d_flat *f, llm4d_gpt *g, llm4d_adamw opt, int data_replica0, int forward_only,
                           llm4d_err *err) {
    memset(f, 0, sizeof *f);
    f->base.ops = &flat_ops;
    f->g = g;
    f->be = g->be;
    f->mem = g->mem;
    f->opt = llm4d_optimizer_make(opt, g->be);
    f->counts = data_replica0;
    f->range_hi = g->table.total;
    f->forward_only = forward_only;
    if (forward_only) { /* the checkpoint's weights go to the parameters; its m, v are not read (state: NULL) */
        LLM4D_ASSERT(g->params, "the flat engine needs the model's flat parameter buffer");
        return LLM4D_OK;
    }
    LLM4D_ASSERT(g->params && g->grads, "the flat engine needs the model's flat parameter and gradient buffers");
    const size_t bytes = g->table.total * sizeof(float);
    f->m = f->be->alloc(f->be, f->mem, LLM4D_MEM_OPTIM, bytes);
    f->v = f->be->alloc(f->be, f->mem, LLM4D_MEM_OPTIM, bytes);
    f->ranges = calloc((size_t)g->table.n, sizeof *f->ranges);
    if (!f->m || !f->v || !f->ranges) {
        flat_destroy(&f->base);
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory allocating the optimizer states (%zu bytes)", 2 * bytes);
    }
    for (int i = 0; i < g->table.n; i++) {
        const llm4d_param *p = &g->table.p[i];
        f->ranges[i] = (llm4d_opt_range){g->params + p->offset, g->grads + p->offset, f->m + p->offset,
                                         f->v + p->offset, p->numel, p->decay};
    }
    return LLM4D_OK;
}
