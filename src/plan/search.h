/* search.h — every layout of a job on a cluster, checked, fitted and ranked (`llm4d plan`).
 *
 * For a world of nodes x ranks_per_node processes the search enumerates every ordered factorisation into
 * dp x pp x sharding x mp, and for each the ZeRO stage (1, 2, 3) and offload, sequence parallelism, the pipeline
 * schedule (1F1B, ZB-H1, interleaved with 2 to 8 virtual stages) and split (even, or the embedding and the loss
 * counted as blocks; the configuration's pp_layers where it applies), every micro-batch size dividing the local
 * batch, and recompute on and off. Each is checked by the configuration's validation (plan/layout.h), then by
 * memory (every rank's peak from the trainer's plan; the fullest host against its memory and, on a GPU cluster,
 * the largest rank against its device's: predict.h llm4d_prediction_over), then timed; the fitting ones are
 * ranked by predicted step time. A rejected layout keeps the reason, for --explain. The search runs on
 * Plan.search_threads threads of this machine (search.c says how); the answer does not depend on them. */
#ifndef LLM4D_PLAN_SEARCH_H
#define LLM4D_PLAN_SEARCH_H

#include "plan/predict.h"

/* LLM4D_CAND_BOUND: set aside before its memory was judged, its trace-free bound (plan/bound.h) already slower than
 * the K fastest found by then (step_s: that bound) */
enum { LLM4D_CAND_OK = 0, LLM4D_CAND_INVALID, LLM4D_CAND_MEMORY, LLM4D_CAND_ERROR, LLM4D_CAND_BOUND };

typedef struct {
    llm4d_layout layout;
    int status;           /* LLM4D_CAND_* */
    double step_s, peak_bytes, host_bytes;
    char *reason;         /* why it was rejected (kept when asked) */
} llm4d_candidate;

typedef struct {
    llm4d_candidate *c;
    int n, cap;
    int n_valid, n_fit;
    int n_bound;             /* valid layouts set aside by the bound before their memory was judged (0 when every
                              * layout is judged: --explain, --no_memo); n_fit counts the others' fits only */
    double memory_per_node;  /* the memory a host was checked against (bytes) */
    double seconds;          /* the search's own time */
} llm4d_search;

/* Every layout of base for global batch `global` on W processes, in the search's order, each given to fn (a
 * failure from fn ends the walk). Nothing is checked: fn sees invalid layouts too. */
typedef llm4d_code (*llm4d_layout_fn)(void *u, const llm4d_layout *l, llm4d_err *err);
llm4d_code llm4d_layouts_each(const llm4d_config *base, long long global, int W, llm4d_layout_fn fn, void *u,
                              llm4d_err *err);

/* Search the layouts of base (parsed, not finalized) for global batch `global` on pr's cluster; reasons: keep each
 * rejection's message. Candidates are sorted: fitting ones by step time first, then the rejected. Unless reasons
 * or pr->exhaustive, a valid layout whose trace-free bound is past the K-th fastest found so far (base->plan.top)
 * is set aside before its memory is judged (LLM4D_CAND_BOUND): the K fastest are the exhaustive search's, the
 * count of fitting layouts is of those judged. */
llm4d_code llm4d_search_run(const llm4d_predictor *pr, const llm4d_config *base, long long global, int reasons,
                            llm4d_search *out, llm4d_err *err);
void llm4d_search_free(llm4d_search *s);

#endif
