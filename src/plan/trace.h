/* trace.h — the recorded work of one micro-batch on one rank of a layout (plan/record.h): the rank's model part and
 * layout as the trainer would build them (parallel/stack.h), created on the recording backend with a recording
 * tensor-parallel group, then each of its chunks run forward, backward and (split backward) the weight pass for one
 * micro-batch. What the planner prices: every kernel at its shapes, every tensor-parallel collective, and the order
 * in which groups' weights are asked for and their gradients handed back (ZeRO's gathers and reduce-scatters, the
 * data-parallel buckets). */
#ifndef LLM4D_PLAN_TRACE_H
#define LLM4D_PLAN_TRACE_H

#include "comm/topology.h"
#include "config/config.h"
#include "parallel/pp_plan.h"
#include "plan/record.h"

enum { LLM4D_TRACE_F = 0, LLM4D_TRACE_B, LLM4D_TRACE_W, LLM4D_TRACE_NPASS };

typedef struct {
    llm4d_rec rec;
    int n_chunks;
    int split;                                           /* the weight pass is separate (ZB-H1) */
    int lo[LLM4D_TRACE_NPASS][LLM4D_MAX_CHUNKS];         /* chunk c's pass k: calls [lo, hi) of rec */
    int hi[LLM4D_TRACE_NPASS][LLM4D_MAX_CHUNKS];
    llm4d_param_table table;                             /* the rank's table: its groups' sizes */
    llm4d_model_part part;
    llm4d_gpt_layout layout;
    size_t act_elems;                                    /* one activation crossing a stage boundary */
    size_t act_bytes;                                    /* its bytes (the residual stream's type: 16-bit at O2) */
} llm4d_mbtrace;

/* The trace of the rank at topo's coordinates of cfg (finalized) with pipeline plan pp. like: the real backend
 * whose size functions the recording lends (may be NULL). */
llm4d_code llm4d_mbtrace_make(llm4d_mbtrace *t, const llm4d_config *cfg, const llm4d_topology *topo,
                            const llm4d_pp_plan *pp, const llm4d_backend *like, llm4d_err *err);
void llm4d_mbtrace_free(llm4d_mbtrace *t);

#endif
