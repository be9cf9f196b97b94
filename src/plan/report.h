/* report.h — a prediction as text (the breakdowns a person reads) and as JSON (what scripts read: step_s,
 * tokens_per_s, peak_mib_per_rank, the breakdowns by kind of work, engine and memory kind). */
#ifndef LLM4D_PLAN_REPORT_H
#define LLM4D_PLAN_REPORT_H

#include <cjson/cJSON.h>
#include <stdio.h>

#include "plan/predict.h"

/* The breakdown lines of one prediction (indented by `indent`), and the flags that ask for its layout. */
void llm4d_report_text(FILE *f, const llm4d_prediction *p, const llm4d_config *cfg, const char *indent);
/* The precision cfg is priced in, short ("fp32", "bf16 O2", "fp16 O1": the JSON's "precision"), and as the line
 * an answer starts with: what was priced and how to ask for the other (a user asking about GPT-3 without
 * --use_amp gets fp32, twelve times slower on an A100, and must see it). */
const char *llm4d_report_precision(const llm4d_config *cfg);
void llm4d_report_precision_line(FILE *f, const llm4d_config *cfg);
/* One JSON object for a prediction (peak_mib_per_rank when the prediction has every rank's). */
cJSON *llm4d_report_json(const llm4d_prediction *p, const llm4d_config *cfg);

#endif
