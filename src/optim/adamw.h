/* adamw.h — Paddle's AdamW and global-norm clipping, over whatever ranges an engine keeps.
 *
 * Weight decay (decoupled, p -= lr * wd * p) applies to the parameters marked for it (linear weights and
 * embeddings; not biases or LayerNorm), as PaddleFleetX's FusedAdamW does by name: the caller says per range.
 * Clipping is Paddle's ClipGradByGlobalNorm: g *= clip / max(||g||, clip), the norm taken over all gradients of the
 * model (double here). The states m and v live with the engine that keeps the parameters (parallel/flat.c holds them
 * whole, parallel/sharding.c its shards), so this file holds only the hyperparameters, the step count and the
 * update of one range; it knows nothing of the model's layout. */
#ifndef LLM4D_OPTIM_ADAMW_H
#define LLM4D_OPTIM_ADAMW_H

#include <stdint.h>

#include "backend/backend.h"

typedef struct {
    float beta1, beta2, eps, weight_decay;
    int64_t t;         /* updates done so far */
} llm4d_adamw;

static inline llm4d_adamw llm4d_adamw_make(float beta1, float beta2, float eps, float weight_decay) {
    return (llm4d_adamw){beta1, beta2, eps, weight_decay, 0};
}

/* Update n parameters at p from gradients g (scaled by grad_scale: the clip factor, over the loss scale) with
 * states m, v at learning rate lr, for update number o->t (call llm4d_adamw_next once per step first), in one pass
 * over memory; zero_grads: the same pass leaves g zeroed (a storage whose next step accumulates into g from zero
 * need not clear it again). */
static inline void llm4d_adamw_apply(const llm4d_adamw *o, llm4d_backend *be, float *p, float *g, float *m,
                                     float *v, size_t n, float lr, float grad_scale, int decay, int zero_grads) {
    be->adamw(be, p, g, m, v, n, lr, o->beta1, o->beta2, o->eps, decay ? o->weight_decay : 0.0f, (int)o->t,
              grad_scale, zero_grads);
}

static inline void llm4d_adamw_next(llm4d_adamw *o) { o->t++; }

/* Paddle's clip factor clip / max(norm, clip); 1 when clip <= 0. */
static inline float llm4d_clip_factor(double norm, double clip) {
    if (clip <= 0) return 1.0f;
    return (float)(clip / (norm > clip ? norm : clip));
}

#endif
