/* report.h — a prediction as text (the breakdowns a person reads) and as JSON (what scripts read: step_s,
 * tokens_per_s, peak_mib_per_rank, the breakdowns by kind of work, engine and memory kind). */
#ifndef LLM4D_PLAN_REPORT_H
#define LLM4D_PLAN_REPORT_H

#include <cjson/cJSON.h>
#include <stdio.h>

#include "plan/predict.h"

/* The breakdown lines of one prediction (indented by `indent`), and the flags that ask for its layout. */
void llm4d_report_text(FILE *f, const llm4d_prediction *p, const llm4d_config *cfg, const char *indent);
/* One JSON object for a prediction (peak_mib_per_rank when the prediction has every rank's). */
cJSON *llm4d_report_json(const llm4d_prediction *p, const llm4d_config *cfg);

#endif
