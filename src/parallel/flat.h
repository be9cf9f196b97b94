/* flat.h — the storage engine that keeps this rank's part of the model whole (engine.h).
 *
 * Parameters and gradients are the model's flat buffers; Adam's m and v are flat buffers of the same layout. It
 * is the storage of a single process, and of data, tensor and pipeline parallel runs without ZeRO (each rank's
 * buffers are its part of the model; data_parallel.c sums the gradients over the data group during backward).
 * Model states per rank: 16 bytes per parameter held (4 params + 4 grads + 8 Adam); forward only (`llm4d eval`): the
 * parameters alone (the model is made without gradients: stack.c), no Adam states, and update is refused. */
#ifndef LLM4D_PARALLEL_FLAT_H
#define LLM4D_PARALLEL_FLAT_H

#include "optim/optimizer.h"
#include "parallel/engine.h"

typedef struct {
    llm4d_engine base;
    llm4d_gpt *g;
    llm4d_backend *be;
    llm4d_mem *mem;
    float *m, *v;
    llm4d_optimizer opt;
    llm4d_opt_range *ranges; /* [table entries]: every entry's parameters, gradients, m and v (fixed buffers) */
    int counts;      /* this rank's gradients count in the norm and it saves (data replica 0) */
    int grads_zero;  /* the last update's pass left every gradient zero: the next step need not clear them */
    int forward_only; /* no gradients, no m, v (llm4d eval) */
    size_t range_lo, range_hi; /* the one range of llm4d_engine_state: the whole buffer */
} llm4d_flat;

/* data_replica0: this rank is the first of its data-parallel replicas (data rank 0); forward_only: no Adam states
 * (and the model has no gradients). */
llm4d_code llm4d_flat_init(llm4d_flat *f, llm4d_gpt *g, llm4d_adamw opt, int data_replica0, int forward_only,
                           llm4d_err *err);
/* Bytes llm4d_flat_init allocates for the table t (the memory plan): Adam m, v, or nothing forward only. */
static inline size_t llm4d_flat_bytes(const llm4d_param_table *t, int forward_only) {
    return forward_only ? 0 : 2 * t->total * sizeof(float);
}

#endif
