/* tensor.h — what a kernel argument is: a pointer and the type of its elements.
 *
 * Mixed precision as PaddleFleetX's O2 and Megatron-LM's --bf16 run it keeps activations in 16 bits: the residual
 * stream, LayerNorm outputs, Q/K/V, the attention output, the MLP's hidden layer, the logits and the activation
 * gradients between layers, while master weights, their gradients, the optimizer's moments and every reduction
 * (LayerNorm and softmax statistics, the loss, bias and LayerNorm weight gradients) stay fp32. So the backend's
 * methods take their activation arguments as typed tensors (backend.h says which arguments those are), and a
 * method computes in fp32 (or wider) and rounds each typed output once, to its type, on store: bf16 to nearest even
 * (core/bf16.h), fp16 by IEEE rounding to nearest even (overflowing to infinity, which dynamic loss scaling
 * catches). Arguments that are always fp32 (weights, gradients of weights, statistics) stay `float *`.
 *
 * A tensor whose pointer is NULL is "not given" where a method allows that (an input gradient not wanted). */
#ifndef LLM4D_BACKEND_TENSOR_H
#define LLM4D_BACKEND_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "core/bf16.h"
#include "core/f16.h"

/* Element types of tensors. */
typedef enum { LLM4D_F32 = 0, LLM4D_BF16, LLM4D_F16 } llm4d_ftype;
#define LLM4D_NFTYPES 3

static inline size_t llm4d_ftype_size(llm4d_ftype t) { return t == LLM4D_F32 ? 4 : 2; }
static inline const char *llm4d_ftype_name(llm4d_ftype t) {
    return t == LLM4D_BF16 ? "bf16" : t == LLM4D_F16 ? "fp16" : "fp32";
}

/* A tensor the method writes (or reads and writes), and one it only reads. */
typedef struct {
    void *p;
    llm4d_ftype t;
} llm4d_tensor;
typedef struct {
    const void *p;
    llm4d_ftype t;
} llm4d_ctensor;

/* The helpers are C (compound literals); the CUDA kernels, compiled as C++, see only the types. */
#ifndef __cplusplus
static inline llm4d_tensor llm4d_t(void *p, llm4d_ftype t) { return (llm4d_tensor){p, t}; }
static inline llm4d_ctensor llm4d_ct(const void *p, llm4d_ftype t) { return (llm4d_ctensor){p, t}; }
static inline llm4d_tensor llm4d_t32(float *p) { return (llm4d_tensor){p, LLM4D_F32}; }
static inline llm4d_ctensor llm4d_ct32(const float *p) { return (llm4d_ctensor){p, LLM4D_F32}; }
/* The read-only view of t. */
static inline llm4d_ctensor llm4d_cv(llm4d_tensor t) { return (llm4d_ctensor){t.p, t.t}; }
/* The tensor from element n of t on (a row block, a micro-batch's slice). */
static inline llm4d_tensor llm4d_t_at(llm4d_tensor t, size_t n) {
    return (llm4d_tensor){t.p ? (char *)t.p + n * llm4d_ftype_size(t.t) : NULL, t.t};
}
static inline llm4d_ctensor llm4d_ct_at(llm4d_ctensor t, size_t n) {
    return (llm4d_ctensor){t.p ? (const char *)t.p + n * llm4d_ftype_size(t.t) : NULL, t.t};
}

/* One element, on the host side of a test or a tool (kernels have their own vectorised forms). */
static inline float llm4d_ftype_get(llm4d_ctensor t, size_t i) {
    switch (t.t) {
    case LLM4D_BF16: return llm4d_bf16_to_f32(((const uint16_t *)t.p)[i]);
    case LLM4D_F16: return llm4d_f16_to_f32(((const uint16_t *)t.p)[i]);
    default: return ((const float *)t.p)[i];
    }
}
static inline void llm4d_ftype_set(llm4d_tensor t, size_t i, float v) {
    switch (t.t) {
    case LLM4D_BF16: ((uint16_t *)t.p)[i] = llm4d_bf16_from_f32(v); return;
    case LLM4D_F16: ((uint16_t *)t.p)[i] = llm4d_f16_from_f32(v); return;
    default: ((float *)t.p)[i] = v; return;
    }
}
/* v rounded to type t and back (the value a tensor of that type holds after storing v). */
static inline float llm4d_ftype_round(llm4d_ftype t, float v) {
    return t == LLM4D_BF16 ? llm4d_bf16_round(v) : t == LLM4D_F16 ? llm4d_f16_to_f32(llm4d_f16_from_f32(v)) : v;
}
#endif

#endif
