/* lr.c — the warmup + cosine learning-rate schedule (see lr.h). */
#include "optim/lr.h"

#include <math.h>

llm4d_lr_schedule llm4d_lr_cosine_warmup(double max_lr, double min_lr, double warmup_rate, int64_t decay_steps) {
    return (llm4d_lr_schedule){.max_lr = max_lr, .min_lr = min_lr, .warmup_steps = warmup_rate * (double)decay_steps,
                               .decay_steps = (double)decay_steps};
}

double llm4d_lr_at(const llm4d_lr_schedule *s, int64_t t) {
    const double tt = (double)t;
    if (s->warmup_steps > 0 && tt <= s->warmup_steps) return s->max_lr * tt / s->warmup_steps;
    if (tt > s->decay_steps) return s->min_lr;
    const double span = s->decay_steps - s->warmup_steps;
    if (span <= 0) return s->min_lr;
    const double ratio = (tt - s->warmup_steps) / span;
    return s->min_lr + 0.5 * (cos(M_PI * ratio) + 1.0) * (s->max_lr - s->min_lr);
}
