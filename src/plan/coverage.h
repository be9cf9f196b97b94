/* coverage.h — whether a measured machine profile can price a model, decided before any layout is priced.
 *
 * The planner prices a call it has no measurement of from the nearest measured call of the same method, scaled
 * by its work (plan/price.h). That holds near the measured shapes; far from them it is a guess (gpt2-en at
 * sequence 1024 priced from a gpt2-tiny profile at sequence 32 came out at 92.9 s a step, attention above the
 * GEMMs). So a calibrated profile is asked first whether it is close to the model: the model's calls for one
 * process and micro-batch 1 (its shapes: hidden size, heads, sequence, vocabulary, precision) are each looked up,
 * and one that no measured call of its method is close to makes the planner refuse, in one line naming the
 * profile, what it was measured for and the calibration to run. A profile written by hand (rates only, as the
 * published GPU ones) has no measured calls and is not asked. A machine profile (`--calibrate --machine`: a grid of
 * shapes, plan/grid.h) is asked whether every call lies within its grid (each size between the smallest and the
 * largest it measured of the call's kind), whatever model it is; it names the first call outside otherwise. */
#ifndef LLM4D_PLAN_COVERAGE_H
#define LLM4D_PLAN_COVERAGE_H

#include "config/config.h"
#include "parallel/pp_plan.h"
#include "plan/profile.h"

/* Close: the same method, element types, dropout and flags (activation, storage), and every size within this
 * factor of the measured call's. A chosen bound, not a measured one: a calibration for a global batch measures
 * micro-batches 1 to that batch and tensor-parallel halves, so a model's own layouts span such factors and price.c
 * scales between them by work; a sequence 8x or a hidden size 12x off (gpt2-tiny's 64 against gpt2-en's 768) is
 * another model, whose kernels meet other cache and blocking regimes (gpt2-en at sequence 1024 priced from
 * gpt2-tiny at 32: 92.9 s a step, attention above the GEMMs). How well 4x prices is not yet measured. */
#define LLM4D_COVER_FACTOR 4.0

/* base (parsed, not finalized) as one process with micro-batch 1 and nothing split, finalized into out with its
 * pipeline plan pp (free with llm4d_pp_plan_free); global: the global batch (<= 0: 1). */
llm4d_code llm4d_plan_single(const llm4d_config *base, long long global, llm4d_config *out, llm4d_pp_plan *pp,
                             llm4d_err *err);

/* LLM4D_EUSER with the one-line refusal when profile p (read from path) cannot price base's calls; LLM4D_OK when
 * it can, when it has no measured calls and is not a calibration (rates only), or when the model's calls cannot be
 * recorded (the search reports that itself). */
llm4d_code llm4d_profile_coverage(const llm4d_profile *p, const char *path, const llm4d_config *base,
                                  llm4d_err *err);

/* The sizes a machine profile's grid measured of call c's kind (its method, element types, dropout and flags) in
 * precision prec: for each of c's sizes d[0..n-1] (the rest are flags) the smallest lo[i] and the largest hi[i]
 * measured; returns n, 0 when the grid measured nothing of c's kind. Inside them price.c interpolates; a size
 * outside them is priced beyond the calibration (coverage refuses a model's own such calls; plan/beyond.h names a
 * layout's). */
int llm4d_grid_span(const llm4d_profile *p, const llm4d_rc_call *c, int prec, int64_t lo[LLM4D_RC_DIMS],
                    int64_t hi[LLM4D_RC_DIMS]);

/* A kernel call's name as the refusals say it ("linear forward", "attention backward"; "kernel" for the rest). */
const char *llm4d_rc_op_name(int op);

#endif
