/* stack.c — the engine stack a configuration asks for (stack.h): which engines, in which order, the model part
 * and layout they need, and the memory they will hold, all as functions of the configuration and the topology,
 * so that the trainer, the memory plan and a planner read the same answer and none of them tests a layout flag.
 * A forward-only stack (cfg->forward_only: `llm4d eval`) keeps the storage engine without gradients or optimizer
 * state and drops the reducers that only act on gradients (data parallel, tensor parallel's sequence-parallel
 * gradients); the pipeline stays: it runs the forward. */
#include "parallel/stack.h"

#include <stdlib.h>
#include <string.h>

#include "parallel/data_parallel.h"
#include "parallel/flat.h"
#include "parallel/pipeline.h"
#include "parallel/sharding.h"
#include "parallel/tensor_parallel.h"

static int sharded(const llm4d_config *cfg) { return cfg->dist.sharding_degree > 1; }

llm4d_code llm4d_stack_layout(const llm4d_config *cfg, const llm4d_topology *topo, const llm4d_pp_plan *plan,
                              llm4d_model_part *part, llm4d_gpt_layout *layout, llm4d_err *err) {
    *part = llm4d_model_part_whole(&cfg->model);
    part->mp_size = topo->degree[LLM4D_AXIS_MODEL];
    part->mp_rank = topo->index[LLM4D_AXIS_MODEL];
    part->sequence_parallel = cfg->model.sequence_parallel && part->mp_size > 1;
    *layout = (llm4d_gpt_layout){.B = (int)cfg->micro_batch_size, .T = cfg->data.max_seq_len,
                                 .recompute = llm4d_recompute_blocks(&cfg->model)};
    llm4d_config_act_types(cfg, &layout->act, &layout->res);
    if (plan->P > 1) LLM4D_TRY(llm4d_pp_plan_stage(plan, topo->index[LLM4D_AXIS_PIPE], part, layout, err));
    if (sharded(cfg))
        llm4d_sharding_part(cfg->dist.sharding_stage, cfg->dist.sharding_degree, &cfg->model, part, layout);
    if (cfg->forward_only) layout->no_grads = 1;
    return LLM4D_OK;
}

llm4d_code llm4d_stack_bytes(const llm4d_config *cfg, const llm4d_topology *topo, const llm4d_pp_plan *plan,
                             const llm4d_param_table *t, size_t act_bytes, size_t bytes[LLM4D_MEM_NCATEGORIES],
                             llm4d_err *err) {
    const llm4d_dist_config *d = &cfg->dist;
    const int bf16 = !strcmp(d->grad_comm_dtype, "bfloat16"), fwd = cfg->forward_only;
    if (sharded(cfg)) {
        llm4d_sharding_bytes(t, d->sharding_stage, d->sharding_degree, d->sharding_offload, bf16, fwd, bytes);
        llm4d_sharding_staging_bytes(t, d->sharding_stage, d->sharding_degree, d->sharding_offload, fwd, cfg->device,
                                    bytes);
    } else {
        bytes[LLM4D_MEM_OPTIM] += llm4d_flat_bytes(t, fwd);
    }
    if (!fwd && !sharded(cfg) && topo->data_world > 1) bytes[LLM4D_MEM_COMM] += llm4d_dp_bytes(t, bf16);
    if (!fwd && topo->degree[LLM4D_AXIS_MODEL] > 1) bytes[LLM4D_MEM_COMM] += llm4d_tensor_parallel_bytes(t);
    if (plan->P > 1) {
        size_t b;
        LLM4D_TRY(llm4d_pipeline_bytes(plan, topo->index[LLM4D_AXIS_PIPE], act_bytes, &b, err));
        bytes[LLM4D_MEM_COMM] += b;
    }
    return LLM4D_OK;
}

size_t llm4d_stack_snapshot_bytes(const llm4d_config *cfg, const llm4d_topology *topo, const llm4d_param_table *t) {
    if (!cfg->async_save || cfg->forward_only) return 0;
    const size_t state = 3 * sizeof(float);
    if (!sharded(cfg)) return topo->data_rank == 0 ? state * t->total : 0;
    if (cfg->dist.save_consolidated) return state * t->total;
    return topo->index[LLM4D_AXIS_DATA] == 0 ? state * llm4d_sharding_kept(t, cfg->dist.sharding_degree) : 0;
}

/* calloc an engine of `size` bytes, run its init, push it: the stack owns it from then on. */
#define PUSH(type, storage, init_call)                                                                           \
    do {                                                                                                         \
        type *x_ = calloc(1, sizeof *x_);                                                                        \
        if (!x_) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");                                          \
        const llm4d_code rc_ = init_call;                                                                        \
        if (rc_ != LLM4D_OK) {                                                                                   \
            free(x_);                                                                                            \
            return rc_;                                                                                          \
        }                                                                                                        \
        llm4d_engines_push(s, &x_->base, storage);                                                               \
    } while (0)

llm4d_code llm4d_stack_build(llm4d_engine_stack *s, llm4d_gpt *g, const llm4d_config *cfg, const llm4d_topology *topo,
                             llm4d_comm_groups *groups, const llm4d_pp_plan *plan, llm4d_err *err) {
    const llm4d_dist_config *d = &cfg->dist;
    const llm4d_optim_config *o = &cfg->optim;
    const llm4d_adamw opt = llm4d_adamw_make(o->beta1, o->beta2, o->epsilon, o->weight_decay);
    const int fwd = cfg->forward_only;
    llm4d_engines_init(s, g);
    if (sharded(cfg)) {
        const llm4d_sharding_groups over = {groups->axis[LLM4D_AXIS_SHARDING], groups->axis[LLM4D_AXIS_DATA],
                                            topo->index[LLM4D_AXIS_DATA]};
        PUSH(llm4d_sharding, 1, llm4d_sharding_init(x_, g, d, &over, opt, cfg->seed, fwd, err));
    } else {
        PUSH(llm4d_flat, 1, llm4d_flat_init(x_, g, opt, topo->data_rank == 0, fwd, err));
        if (!fwd && topo->data_world > 1)
            PUSH(llm4d_dp, 0,
                 llm4d_dp_init(x_, g, groups->data, (size_t)d->bucket_size_bytes, d->dp_overlap, d->dp_trace,
                               !strcmp(d->grad_comm_dtype, "bfloat16"), err));
    }
    if (!fwd && topo->degree[LLM4D_AXIS_MODEL] > 1)
        PUSH(llm4d_tensor_parallel, 0, llm4d_tensor_parallel_init(x_, s, groups->axis[LLM4D_AXIS_MODEL], err));
    if (plan->P > 1) PUSH(llm4d_pipeline, 0, llm4d_pipeline_init(x_, s, groups->axis[LLM4D_AXIS_PIPE], plan, err));
    llm4d_engines_install(s);
    return LLM4D_OK;
}
