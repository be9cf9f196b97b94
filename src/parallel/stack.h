/* stack.h — the engine stack a configuration asks for (engine.h), as functions of the configuration and the
 * topology: the model part and layout the stack needs (llm4d_stack_layout), the memory its engines will hold
 * (llm4d_stack_bytes: the memory plan's share, computed before anything is allocated), and the stack itself
 * (llm4d_stack_build). The stack:
 *   storage:  sharding (ZeRO, sharding_degree > 1) or flat;
 *   reducers: data_parallel (flat storage over a data group of more than one rank), tensor_parallel (mp_degree > 1),
 *             pipeline (pp_degree > 1: it also brings the executor).
 * With cfg->forward_only (`llm4d eval`) the storage holds no gradients and no optimizer state, and the reducers of
 * gradients (data_parallel, tensor_parallel) are left out; the three functions agree on that, so the plan does too.
 * The trainer holds only the stack; it never names an engine or tests a layout flag. */
#ifndef LLM4D_PARALLEL_STACK_H
#define LLM4D_PARALLEL_STACK_H

#include "comm/comm.h"
#include "comm/topology.h"
#include "parallel/engine.h"
#include "parallel/pp_plan.h"

/* This rank's model part (tensor-parallel slice, pipeline stage, ZeRO alignment and vocabulary blocks) and layout
 * (micro-batch shape, activation slots, split backward, flat buffers or not). */
llm4d_code llm4d_stack_layout(const llm4d_config *cfg, const llm4d_topology *topo, const llm4d_pp_plan *plan,
                              llm4d_model_part *part, llm4d_gpt_layout *layout, llm4d_err *err);
/* The host snapshot of --async_save on this rank (cfg->async_save; 0 when off or forward only): what its checkpoint
 * holds, parameters and Adam's m and v in fp32, back to back.
 *   - A rank that writes (flat: the first data-parallel replica, its part's whole table; ZeRO: the first replica of
 *     the sharding group, its shard of every group): 3 x 4 x the elements it writes. A data-parallel replica of
 *     another rank's state writes nothing and holds no snapshot.
 *   - save_consolidated under ZeRO: the gather fills whole buffers on every rank of the group, 3 x 4 x t->total.
 * The trainer allocates exactly this (train/async_save.c checks it against the engine's state), so plan and
 * allocation agree by construction. */
size_t llm4d_stack_snapshot_bytes(const llm4d_config *cfg, const llm4d_topology *topo, const llm4d_param_table *t);
/* Adds to bytes[category] what the engines of the stack will allocate for the table t (act_bytes: the bytes of one
 * activation crossing a pipeline stage, in the residual stream's type). */
llm4d_code llm4d_stack_bytes(const llm4d_config *cfg, const llm4d_topology *topo, const llm4d_pp_plan *plan,
                             const llm4d_param_table *t, size_t act_bytes, size_t bytes[LLM4D_MEM_NCATEGORIES],
                             llm4d_err *err);
/* The stack on model g (made with llm4d_stack_layout's part and layout), its hooks installed. */
llm4d_code llm4d_stack_build(llm4d_engine_stack *s, llm4d_gpt *g, const llm4d_config *cfg, const llm4d_topology *topo,
                             llm4d_comm_groups *groups, const llm4d_pp_plan *plan, llm4d_err *err);

#endif
