/* adamw.c — AdamW over ranges of the flat buffer (see adamw.h). */
#include "optim/adamw.h"

#include <string.h>

llm4d_code llm4d_adamw_create(llm4d_adamw *o, llm4d_backend *be, llm4d_mem *mem, size_t lo, size_t hi, float beta1,
                              float beta2, float eps, float weight_decay, llm4d_err *err) {
    memset(o, 0, sizeof *o);
    o->beta1 = beta1;
    o->beta2 = beta2;
    o->eps = eps;
    o->weight_decay = weight_decay;
    o->lo = lo;
    o->hi = hi;
    const size_t bytes = (hi - lo) * sizeof(float);
    o->m = be->alloc(be, mem, LLM4D_MEM_OPTIM, bytes);
    o->v = be->alloc(be, mem, LLM4D_MEM_OPTIM, bytes);
    if (!o->m || !o->v) {
        llm4d_adamw_destroy(o, be, mem);
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory allocating the optimizer states (%zu bytes)", 2 * bytes);
    }
    return LLM4D_OK;
}

void llm4d_adamw_destroy(llm4d_adamw *o, llm4d_backend *be, llm4d_mem *mem) {
    const size_t bytes = (o->hi - o->lo) * sizeof(float);
    if (o->m) be->free(be, mem, LLM4D_MEM_OPTIM, o->m, bytes);
    if (o->v) be->free(be, mem, LLM4D_MEM_OPTIM, o->v, bytes);
    o->m = o->v = NULL;
}

void llm4d_adamw_step(llm4d_adamw *o, llm4d_backend *be, const llm4d_param_table *t, float *params,
                      const float *grads, float lr, float grad_scale) {
    o->t++;
    for (int i = 0; i < t->n; i++) {
        const llm4d_param *p = &t->p[i];
        size_t a = p->offset, b = p->offset + p->numel;
        if (a < o->lo) a = o->lo;
        if (b > o->hi) b = o->hi;
        if (a >= b) continue;
        be->adamw(be, params + a, grads + a, o->m + (a - o->lo), o->v + (a - o->lo), b - a, lr, o->beta1, o->beta2,
                  o->eps, p->decay ? o->weight_decay : 0.0f, (int)o->t, grad_scale);
    }
}
