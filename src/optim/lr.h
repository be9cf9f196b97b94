/* lr.h — PaddleNLP's CosineAnnealingWithWarmupDecay, counting update steps from 1.
 *
 *   warmup = warmup_rate * decay_steps
 *   lr(t) = max_lr * t / warmup                                        if warmup > 0 and t <= warmup
 *         = min_lr                                                     if t > decay_steps
 *         = min_lr + 0.5 (cos(pi (t - warmup) / (decay_steps - warmup)) + 1) (max_lr - min_lr)   otherwise
 *
 * The update of global step t uses lr(t). PaddleNLP's GPT-3 script prints the learning rate after stepping the
 * scheduler, i.e. lr(t + 1), in the log line of step t; llm4d prints the same (docs/training.md). */
#ifndef LLM4D_OPTIM_LR_H
#define LLM4D_OPTIM_LR_H

#include <stdint.h>

typedef struct {
    double max_lr, min_lr;
    double warmup_steps;
    double decay_steps;
} llm4d_lr_schedule;

llm4d_lr_schedule llm4d_lr_cosine_warmup(double max_lr, double min_lr, double warmup_rate, int64_t decay_steps);
double llm4d_lr_at(const llm4d_lr_schedule *s, int64_t t);

#endif
