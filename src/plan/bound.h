/* bound.h — a lower bound on a layout's predicted step time that needs no trace, so that a search can set aside a
 * layout bound to be slower than the K fastest it has found before it spends a memory plan and traces on it.
 *
 * The predicted step (steptime.c) is at least the busiest stage's share of the pipeline: every micro-batch's passes
 * run one after another on a stage, at best at the fastest rate the host's sharing allows. A stage's pass is at
 * least the kernels and blocking tensor-parallel collectives of its blocks, so the bound counts, per block and
 * micro-batch, what the model certainly does (model/block.c): its four linear layers forward, twice that backward
 * (input and weight gradients, together or split), once more forward under recompute, each at the profile's fastest
 * linear-layer rate (llm4d_bound_gemm_rate), and its fp32 tensor-parallel reductions (all-reduces, or sequence
 * parallelism's reduce-scatters) priced as the trace would price them. Everything else (attention, the head, the
 * element-wise kernels, the bubble, the end of the step) only adds. tests/test_plan_bound.c checks the bound
 * against the prediction on every layout of several searches and profiles. */
#ifndef LLM4D_PLAN_BOUND_H
#define LLM4D_PLAN_BOUND_H

#include "plan/predict.h"

/* What the bounds of one search share (its profile, cluster and precision). */
typedef struct {
    double gemm_rate;  /* FLOP/s: no linear layer is priced faster (llm4d_bound_gemm_rate) */
    double speed;      /* no stage's work runs faster than this many seconds of work per second (the host's
                        * sharing at any occupancy; 1 on a host of one rank per device) */
    int prec;
} llm4d_bound;

/* The fastest rate (FLOP/s) at which llm4d_price_call prices a linear layer (forward or backward) at `threads`
 * threads and precision prec: over the profile's measured linear calls (scaled to these threads as price.c scales
 * them, and without a kernel's fixed cost, as price.c's nearest-size pricing scales them) and its fallback rate.
 * Infinity where a measured call took no time. Tied to price.c: stagecost.c notes the fastest rate it really
 * priced, and a search that finds one above this searches again without the bound (search.c). */
double llm4d_bound_gemm_rate(const llm4d_profile *p, int threads, int prec);

void llm4d_bound_init(llm4d_bound *b, const llm4d_predictor *pr, int prec);

/* *lb: seconds the layout of cfg (finalized) with pipeline plan pp is certain to take at least. */
llm4d_code llm4d_bound_step(const llm4d_bound *b, const llm4d_predictor *pr, const llm4d_config *cfg,
                            const llm4d_pp_plan *pp, double *lb, llm4d_err *err);

#endif
