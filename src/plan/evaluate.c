/* evaluate.c — one layout predicted (see evaluate.h): its pipeline planned, its data's indices measured, priced
 * through a cache of its own (one layout: nothing to share with other calls). */
#include "plan/evaluate.h"

#include "plan/data_mem.h"

#include <string.h>

llm4d_code llm4d_plan_evaluate(const llm4d_profile *prof, llm4d_backend *be, const llm4d_cluster *cl,
                               const llm4d_config *cfg, llm4d_prediction *out, llm4d_err *err) {
    llm4d_pp_plan pp;
    LLM4D_TRY(llm4d_pp_plan_make(&pp, cfg, err));
    llm4d_stagecost_cache *cache = NULL;
    double data = 0;
    llm4d_code rc = llm4d_plan_data_bytes(cfg, cfg->dist.dp_degree * cfg->dist.sharding_degree, &data, err);
    if (rc == LLM4D_OK) rc = llm4d_stagecost_cache_create(&cache, err);
    if (rc == LLM4D_OK) {
        const llm4d_predictor pr = {.prof = prof, .be = be, .cluster = *cl, .data_bytes = data, .per_rank = 1,
                                    .cache = cache};
        rc = llm4d_predict(&pr, cfg, &pp, out, err);
    }
    llm4d_stagecost_cache_destroy(cache);
    llm4d_pp_plan_free(&pp);
    return rc;
}

llm4d_code llm4d_plan_traffic(const llm4d_profile *prof, llm4d_backend *be, const llm4d_cluster *cl,
                              const llm4d_config *cfg, FILE *f, llm4d_err *err) {
    llm4d_pp_plan pp;
    LLM4D_TRY(llm4d_pp_plan_make(&pp, cfg, err));
    llm4d_stagecost_cache *cache = NULL;
    llm4d_code rc = llm4d_stagecost_cache_create(&cache, err);
    const llm4d_predictor pr = {.prof = prof, .be = be, .cluster = *cl, .per_rank = 1, .cache = cache};
    /* a step as the first runs it: dp_overlap alternate overlaps the odd steps */
    const int overlap = strcmp(cfg->dist.dp_overlap, "off") != 0;
    for (int s = 0; rc == LLM4D_OK && s < cfg->dist.pp_degree; s++) {
        llm4d_traffic tr;
        rc = llm4d_predict_traffic(&pr, cfg, &pp, s, overlap, &tr, err);
        if (rc != LLM4D_OK) break;
        fprintf(f, "stage %d: %d collectives of the engines, %d micro-batches a step\n", s, tr.n,
                (int)cfg->accumulate_steps);
        llm4d_traffic_print(f, &tr, (int)cfg->accumulate_steps);
        llm4d_traffic_free(&tr);
    }
    llm4d_stagecost_cache_destroy(cache);
    llm4d_pp_plan_free(&pp);
    return rc;
}
