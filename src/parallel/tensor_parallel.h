/* tensor_parallel.h — the reducer engine (engine.h) of tensor parallelism: after backward, the gradients that each
 * tensor-parallel rank holds only partially are summed over the group.
 *
 * Tensor parallelism itself lives in the model (model/tp.h, block.c, embed.c): the split layers and the conjugate
 * operators' communication. What is left for an engine is the replicated parameters whose gradient is a partial
 * sum on each rank (the entries params.h marks tp_partial): with sequence parallelism, each rank's LayerNorms,
 * row-parallel biases and the position embedding see only its N/M tokens; with fewer key/value heads than ranks
 * (grouped- or multi-query attention over a wide group), M/NKV ranks hold each key/value head and each sees only
 * its own query heads. This engine packs the part of those gradients the storage engine keeps into one buffer (a
 * replicated head into its head's slot of NKV, the other slots zero, so that the group's sum adds each head's
 * replicas alone: (NKV - 1) x the head's bytes of zeros, the price of one collective instead of a group per head),
 * all-reduces it over the tensor-parallel group (one collective per step, 2 (M-1)/M x the packed bytes), and
 * unpacks it. Without sequence parallelism and with whole key/value heads per rank, every replica computes the full
 * gradient from the same replicated activations, and nothing is sent.
 *
 * Clipping counts each element once: replicated entries are `owner` on tensor-parallel rank 0 only (params.h), so
 * the storage engine's norm share leaves the copies out. */
#ifndef LLM4D_PARALLEL_TENSOR_PARALLEL_H
#define LLM4D_PARALLEL_TENSOR_PARALLEL_H

#include "comm/comm.h"
#include "parallel/engine.h"
#include "parallel/traffic.h"

typedef struct {
    llm4d_engine base;
    llm4d_engine_stack *stack;
    llm4d_comm *mp;
    float *pack;
    size_t pack_len;
} llm4d_tensor_parallel;

/* The bytes of communication buffer llm4d_tensor_parallel_init allocates for table t (a memory plan). */
size_t llm4d_tensor_parallel_bytes(const llm4d_param_table *t);
llm4d_code llm4d_tensor_parallel_init(llm4d_tensor_parallel *tp, llm4d_engine_stack *stack, llm4d_comm *mp,
                                      llm4d_err *err);

/* Appends to out the tensor-parallel traffic of a step (traffic.h) of a rank with this part and layout, as the model
 * issues it (model/tp.h; block.c and embed.c state the counts) and the engine: per micro-batch and local chunk,
 * each block's f and g (forward, backward, recompute's second forward, the gathers again of the LayerNorm outputs
 * under sequence parallelism, a split backward's weight pass), the lookup's sum and its gradient's gather on the
 * chunk with the embedding, ln_f's gather, the statistics of each chunk of head rows and the head's input gradient
 * on the chunk with the head; after backward the engine's one all-reduce of the packed partial gradients (the kept
 * part of each tp_partial entry, tp_slots of it). Sums are fp32, gathers move their tensor's type (16-bit as
 * bytes). A forward-only configuration (`llm4d eval`): the forwards' calls only, without the head's gradient. */
llm4d_code llm4d_tensor_parallel_traffic(const llm4d_model_part *part, const llm4d_gpt_layout *layout,
                                         const llm4d_config *cfg, const llm4d_traffic_kept *kept, llm4d_traffic *out,
                                         llm4d_err *err);

#endif
