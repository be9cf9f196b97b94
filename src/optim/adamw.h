/* adamw.h — Paddle's AdamW over the flat parameter buffer, with global-norm gradient clipping.
 *
 * Weight decay (decoupled, p -= lr * wd * p) applies to the parameters the table marks `decay` (linear weights and
 * embeddings; not biases or LayerNorm), as PaddleFleetX's FusedAdamW does by name. Clipping is Paddle's
 * ClipGradByGlobalNorm: g *= clip / max(||g||, clip), the norm taken over all gradients in fp32 (double here). The
 * states m and v are flat buffers of the same layout as the parameters, accounted as optimizer memory. A range
 * [lo, hi) of the flat buffer can be updated on its own, which is what a ZeRO partition is. */
#ifndef LLM4D_OPTIM_ADAMW_H
#define LLM4D_OPTIM_ADAMW_H

#include "backend/backend.h"
#include "model/params.h"

typedef struct {
    float beta1, beta2, eps, weight_decay;
    float *m, *v;      /* over the updated range */
    size_t lo, hi;     /* range of the flat buffer this optimizer updates */
    int64_t t;         /* updates done so far */
} llm4d_adamw;

llm4d_code llm4d_adamw_create(llm4d_adamw *o, llm4d_backend *be, llm4d_mem *mem, size_t lo, size_t hi, float beta1,
                              float beta2, float eps, float weight_decay, llm4d_err *err);
void llm4d_adamw_destroy(llm4d_adamw *o, llm4d_backend *be, llm4d_mem *mem);

/* One update of params[lo,hi) from grads[lo,hi) scaled by grad_scale (the clipping factor), at learning rate lr. */
void llm4d_adamw_step(llm4d_adamw *o, llm4d_backend *be, const llm4d_param_table *t, float *params,
                      const float *grads, float lr, float grad_scale);

/* Paddle's clip factor clip / max(norm, clip); 1 when clip <= 0. */
static inline float llm4d_clip_factor(double norm, double clip) {
    if (clip <= 0) return 1.0f;
    return (float)(clip / (norm > clip ? norm : clip));
}

#endif
