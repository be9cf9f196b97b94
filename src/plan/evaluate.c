/* evaluate.c — one layout predicted (see evaluate.h): its pipeline planned, its data's indices measured, priced
 * through a cache of its own (one layout: nothing to share with other calls). */
#include "plan/evaluate.h"

#include "plan/data_mem.h"

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
