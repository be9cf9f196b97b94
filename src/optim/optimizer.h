/* optimizer.h — the optimizer as an object over ranges: AdamW's hyperparameters and step count (adamw.h) and the
 * backend the update runs on, applied to the ranges a storage engine hands it (one per parameter entry it keeps, or
 * per entry's part of an offloaded window). The engines decide what is kept where; the optimizer decides nothing
 * about layout. Holding its own backend is what lets a run say where the update runs: on the model's backend, or on
 * another one whose memory holds the ranges (compute on a device and AdamW on the host, the states in host memory:
 * ZeRO offload on a backend with a host backend, parallel/sharding.h) without the optimizer changing. */
#ifndef LLM4D_OPTIM_OPTIMIZER_H
#define LLM4D_OPTIM_OPTIMIZER_H

#include "optim/adamw.h"

/* n parameters at p, their gradients g and AdamW states m, v, all in the memory of the optimizer's backend; decay:
 * weight decay applies (adamw.h). */
typedef struct {
    float *p, *g, *m, *v;
    size_t n;
    int decay;
} llm4d_opt_range;

typedef struct {
    llm4d_adamw hp;
    llm4d_backend *be;
} llm4d_optimizer;

static inline llm4d_optimizer llm4d_optimizer_make(llm4d_adamw hp, llm4d_backend *be) {
    return (llm4d_optimizer){hp, be};
}

/* A new update begins (once per step, before its ranges). */
static inline void llm4d_optimizer_next(llm4d_optimizer *o) { llm4d_adamw_next(&o->hp); }

/* Update the ranges, in order, one pass over memory each, at learning rate lr with gradients scaled by grad_scale
 * (the clip factor over the loss scale); zero_grads: the pass leaves the gradients zero (adamw.h). */
static inline void llm4d_optimizer_apply(const llm4d_optimizer *o, const llm4d_opt_range *r, int n, float lr,
                                         float grad_scale, int zero_grads) {
    for (int k = 0; k < n; k++)
        llm4d_adamw_apply(&o->hp, o->be, r[k].p, r[k].g, r[k].m, r[k].v, r[k].n, lr, grad_scale, r[k].decay,
                          zero_grads);
}

#endif
