/* batch.h — the bytes of a step's batch as the model reads it from device memory (gpt.h: int32 tokens and targets,
 * fp32 loss weights per token, an int64 sample id per row), for the batch's owner (train/devbatch.c) and the memory
 * plan (plan/memplan.c), which must agree on them. */
#ifndef LLM4D_MODEL_BATCH_H
#define LLM4D_MODEL_BATCH_H

#include <stddef.h>
#include <stdint.h>

static inline size_t llm4d_batch_tok_bytes(int rows, int T) { return (size_t)rows * (size_t)T * sizeof(int32_t); }
static inline size_t llm4d_batch_w_bytes(int rows, int T) { return (size_t)rows * (size_t)T * sizeof(float); }
static inline size_t llm4d_batch_id_bytes(int rows) { return (size_t)rows * sizeof(int64_t); }

/* Everything a batch of `rows` rows of T tokens holds: tokens and targets, the loss weights twice (host and
 * device), the sample ids. */
static inline size_t llm4d_batch_bytes(int rows, int T) {
    return 2 * llm4d_batch_tok_bytes(rows, T) + 2 * llm4d_batch_w_bytes(rows, T) + llm4d_batch_id_bytes(rows);
}

#endif
