/* evaluate.h — one layout predicted: the configuration of a run, finalized for its world size, priced on a cluster
 * by a machine profile (plan/predict.h). `llm4d plan --evaluate` prints it; `llm4d train` logs it for its own
 * layout at start-up and its error at the end (train/predict_run.c). One function for both, so the trainer's
 * lines and the planner's answer are the same prediction, not two computations that could drift apart. */
#ifndef LLM4D_PLAN_EVALUATE_H
#define LLM4D_PLAN_EVALUATE_H

#include <stdio.h>

#include "plan/predict.h"

/* Predict cfg (finalized; its world = cl->nodes x cl->ranks_per_node) on cl with prof, every rank's peak filled
 * (out->rank_peak; free with llm4d_prediction_free). be: the backend whose size functions the memory plan reads
 * (the run's). The data loaders' indices are measured by opening the configured data (plan/data_mem.h). */
llm4d_code llm4d_plan_evaluate(const llm4d_profile *prof, llm4d_backend *be, const llm4d_cluster *cl,
                               const llm4d_config *cfg, llm4d_prediction *out, llm4d_err *err);
/* The collectives and pipeline messages the engines of each stage's first rank issue in a step of cfg
 * (parallel/traffic.h; the prediction's time part reads its data-parallel, ZeRO and pipeline-message entries), one
 * line each (llm4d_traffic_print) after a line per stage: `llm4d plan --evaluate --traffic`, which
 * tests/test_traffic.sh checks against a run's trace. */
llm4d_code llm4d_plan_traffic(const llm4d_profile *prof, llm4d_backend *be, const llm4d_cluster *cl,
                              const llm4d_config *cfg, FILE *f, llm4d_err *err);

#endif
