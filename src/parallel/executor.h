/* executor.h — how a step's micro-batches run through this rank's part of the model: the one interface the trainer
 * drives for a training step and for an evaluation alike, so that neither train/step.c nor train/eval.c decides how
 * they run. (What a pipeline measured still reaches the trainer: the engines' statistics carry its busy and idle
 * time, and at the end of a run train/pp_log.c sets them against the schedule's own.)
 *
 *   sequential  (executor.c)  the whole model on this rank: each micro-batch's forward, then (training) its
 *                             backward, in order; the engines' hooks see one gradient window per group per
 *                             micro-batch;
 *   pipeline    (pipeline.c)  this stage's list of actions of the schedule (parallel/schedule.h): forwards,
 *                             backwards, weight passes, the sends and receives between stages.
 *
 * Either way the losses accumulate in the model (model/gpt.h llm4d_gpt_loss_take: one read-back per step), and the
 * micro-batches are in device memory (train/devbatch.h). */
#ifndef LLM4D_PARALLEL_EXECUTOR_H
#define LLM4D_PARALLEL_EXECUTOR_H

#include "core/trace.h"
#include "model/gpt.h"

typedef struct llm4d_executor llm4d_executor;

typedef struct {
    const char *name;
    /* Run micro-batches mbs[0..M): forward and backward, or forward only (evaluation; the mbs need no grad). */
    llm4d_code (*run)(llm4d_executor *x, const llm4d_micro *mbs, int M, int forward_only, llm4d_err *err);
} llm4d_executor_ops;

struct llm4d_executor {
    const llm4d_executor_ops *ops;
    llm4d_trace *trace; /* where the passes it runs are recorded (train/trace_run.c sets it; NULL: tracing off) */
};

static inline llm4d_code llm4d_executor_run(llm4d_executor *x, const llm4d_micro *mbs, int M, int forward_only,
                                            llm4d_err *err) {
    return x->ops->run(x, mbs, M, forward_only, err);
}

typedef struct {
    llm4d_executor base;
    llm4d_gpt *g;
} llm4d_sequential;

/* The sequential executor of model g (a whole model: one chunk with the embedding and the head). */
void llm4d_sequential_init(llm4d_sequential *x, llm4d_gpt *g);

#endif
