/* explain.h — a search's rejected layouts summarised by reason (`llm4d plan --explain`).
 *
 * A large search rejects hundreds of thousands of layouts (GPT-3 175B on 64 hosts of 8: 302,211), nearly all for a
 * handful of reasons whose messages differ only in their numbers. So the rejections are grouped by their message
 * with every number taken out (and by kind: invalid, does not fit memory, refused by the model), counted, and
 * printed as a summary, most frequent first, before any layout's own line; each reason's layouts follow, at most
 * `limit` of them (the rest counted in one line). The JSON form is the summary alone ("rejected_by_reason"): the
 * per-layout list stays where it was ("rejected"), complete, for scripts. */
#ifndef LLM4D_PLAN_EXPLAIN_H
#define LLM4D_PLAN_EXPLAIN_H

#include <cjson/cJSON.h>
#include <stdio.h>

#include "plan/search.h"

typedef struct {
    int count;
    int first;  /* the candidate (index into the search's c) whose message stands for the group */
    int *which; /* [count] candidates of the group, in the search's order */
    char kind[24]; /* "invalid", "does not fit memory", "refused" */
} llm4d_reason_group;

typedef struct {
    llm4d_reason_group *g;
    int n;
} llm4d_reasons;

/* Group s's rejected candidates (those past n_fit, with their reasons kept) by kind and message without numbers,
 * most frequent first (ties: the earlier first). */
llm4d_code llm4d_reasons_group(const llm4d_search *s, llm4d_reasons *out, llm4d_err *err);
void llm4d_reasons_free(llm4d_reasons *r);

/* The summary lines (one per reason, with its count and one layout's message). */
void llm4d_reasons_summary(FILE *f, const llm4d_search *s, const llm4d_reasons *r);
/* Each reason's layouts, at most limit per reason (limit <= 0: all), and how many were left out. */
void llm4d_reasons_detail(FILE *f, const llm4d_search *s, const llm4d_reasons *r, int limit);
/* The summary as a JSON array of {kind, count, example, example_layout}. */
cJSON *llm4d_reasons_json(const llm4d_search *s, const llm4d_reasons *r);

#endif
