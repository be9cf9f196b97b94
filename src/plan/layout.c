/* layout.c — a layout as configuration keys, checked by the configuration's own validation (see layout.h). */
#include "plan/layout.h"

#include <stdio.h>
#include <stddef.h>
#include <string.h>
#include <strings.h>

#include "parallel/schedule.h"

llm4d_layout llm4d_layout_of(const llm4d_config *cfg) {
    const llm4d_dist_config *d = &cfg->dist;
    llm4d_layout l = {.dp = d->dp_degree, .sharding = d->sharding_degree, .stage = d->sharding_stage,
                      .offload = d->sharding_offload, .mp = d->mp_degree, .sp = cfg->model.sequence_parallel,
                      .pp = d->pp_degree, .vpp = cfg->model.virtual_pp_degree, .schedule = LLM4D_PP_1F1B,
                      .split = d->pp_layers[0] ? LLM4D_SPLIT_GIVEN
                               : d->pp_account_embedding_loss ? LLM4D_SPLIT_EMBED_LOSS : LLM4D_SPLIT_EVEN,
                      .mb = (int)cfg->micro_batch_size, .recompute = llm4d_recompute_blocks(&cfg->model)};
    llm4d_pp_kind k;
    llm4d_err err;
    if (d->pp_degree > 1 && llm4d_pp_kind_parse(d->pp_schedule, &k, &err) == LLM4D_OK) l.schedule = k;
    if (l.vpp > 1) l.schedule = LLM4D_PP_INTERLEAVED;
    if (l.sharding <= 1) l.stage = 0, l.offload = 0;
    if (l.mp <= 1) l.sp = 0;
    return l;
}

/* snprintf(dst, n, "%s", src) without the formatter: a search configures every layout (half a million at 1024
 * hosts), and formatting was a visible share of it. */
static void put(char *dst, size_t n, const char *src) {
    size_t k = strlen(src);
    if (k >= n) k = n - 1;
    memcpy(dst, src, k);
    dst[k] = 0;
}

/* *out = *base without the unused ends of the two key lists (48 of the configuration's 57 KiB; every reader stops at
 * their counts): a search configures every layout, and copying whole configurations was a twelfth of its time. */
_Static_assert(offsetof(llm4d_config, n_explicit) > offsetof(llm4d_config, noeffect) &&
                   offsetof(llm4d_config, explicit_keys) > offsetof(llm4d_config, n_explicit) &&
                   sizeof(llm4d_config) - offsetof(llm4d_config, explicit_keys) <
                       sizeof(((llm4d_config *)0)->explicit_keys) + 8,
               "config_copy copies whole everything before noeffect: the two key lists must stay at the end");
static void config_copy(llm4d_config *out, const llm4d_config *base) {
    memcpy(out, base, offsetof(llm4d_config, noeffect));
    memcpy(out->noeffect, base->noeffect, (size_t)base->n_noeffect * sizeof base->noeffect[0]);
    out->n_explicit = base->n_explicit;
    memcpy(out->explicit_keys, base->explicit_keys, (size_t)base->n_explicit * sizeof base->explicit_keys[0]);
}

llm4d_code llm4d_layout_config(const llm4d_config *base, const llm4d_layout *l, long long global, llm4d_config *out,
                               llm4d_pp_plan *pp, llm4d_err *err) {
    return llm4d_layout_config_memo(base, l, global, out, pp, NULL, err);
}

llm4d_code llm4d_layout_config_memo(const llm4d_config *base, const llm4d_layout *l, long long global,
                                    llm4d_config *out, llm4d_pp_plan *pp, llm4d_pp_balance_memo *memo,
                                    llm4d_err *err) {
    config_copy(out, base);
    llm4d_dist_config *d = &out->dist;
    d->dp_degree = l->dp, d->sharding_degree = l->sharding, d->mp_degree = l->mp, d->pp_degree = l->pp;
    d->sharding_stage = l->sharding > 1 ? l->stage : (d->sharding_stage >= 1 && d->sharding_stage <= 3 ? d->sharding_stage : 1);
    d->sharding_offload = l->sharding > 1 && l->offload;
    put(d->pp_schedule, sizeof d->pp_schedule, l->schedule == LLM4D_PP_ZBH1 ? "ZBH1"
                                               : l->schedule == LLM4D_PP_INTERLEAVED ? "interleaved" : "1F1B");
    if (l->split != LLM4D_SPLIT_GIVEN) d->pp_layers[0] = 0;
    d->pp_account_embedding_loss = l->split == LLM4D_SPLIT_EMBED_LOSS;
    out->model.sequence_parallel = l->mp > 1 && l->sp;
    out->model.virtual_pp_degree = l->vpp;
    out->model.use_recompute = l->recompute;
    out->micro_batch_size = l->mb;
    out->local_batch_size = 0;
    out->global_batch_size = global;
    if (!out->data.input_dir[0]) put(out->data.input_dir, sizeof out->data.input_dir, "(planning)");
    LLM4D_TRY(llm4d_config_finalize(out, llm4d_layout_world(l), err));
    return llm4d_pp_plan_make_memo(pp, out, memo, err);
}

void llm4d_layout_name(const llm4d_layout *l, char *buf, size_t n) {
    int k = snprintf(buf, n, "dp%d", l->dp);
    if (l->sharding > 1 && k < (int)n)
        k += snprintf(buf + k, n - (size_t)k, " sh%d/z%d%s", l->sharding, l->stage, l->offload ? "+off" : "");
    if (l->mp > 1 && k < (int)n) k += snprintf(buf + k, n - (size_t)k, " mp%d%s", l->mp, l->sp ? "+sp" : "");
    if (l->pp > 1 && k < (int)n) {
        k += snprintf(buf + k, n - (size_t)k, " pp%d", l->pp);
        if (l->vpp > 1 && k < (int)n) k += snprintf(buf + k, n - (size_t)k, "x%d", l->vpp);
        if (k < (int)n)
            k += snprintf(buf + k, n - (size_t)k, " %s%s", l->schedule == LLM4D_PP_ZBH1 ? "ZBH1"
                                                           : l->schedule == LLM4D_PP_INTERLEAVED ? "intl" : "1F1B",
                          l->split == LLM4D_SPLIT_EMBED_LOSS ? "/el" : l->split == LLM4D_SPLIT_GIVEN ? "/given" : "");
    }
    if (k < (int)n) k += snprintf(buf + k, n - (size_t)k, " mb%d", l->mb);
    if (l->recompute && k < (int)n) snprintf(buf + k, n - (size_t)k, " rc");
}

void llm4d_layout_flags(const llm4d_layout *l, const llm4d_config *cfg, char *buf, size_t n) {
    int k = snprintf(buf, n, "--dp_degree %d --mp_degree %d --pp_degree %d --sharding_degree %d", l->dp, l->mp,
                     l->pp, l->sharding);
    if (l->sharding > 1 && k < (int)n)
        k += snprintf(buf + k, n - (size_t)k, " --sharding_stage %d%s", l->stage,
                      l->offload ? " --sharding_offload true" : "");
    if (l->mp > 1 && l->sp && k < (int)n) k += snprintf(buf + k, n - (size_t)k, " --sequence_parallel true");
    if (l->pp > 1 && k < (int)n) {
        k += snprintf(buf + k, n - (size_t)k, " --pp_schedule %s", l->schedule == LLM4D_PP_ZBH1 ? "ZBH1"
                                                                    : l->schedule == LLM4D_PP_INTERLEAVED ? "interleaved"
                                                                                                           : "1F1B");
        if (l->vpp > 1 && k < (int)n) k += snprintf(buf + k, n - (size_t)k, " --virtual_pp_degree %d", l->vpp);
        if (l->split == LLM4D_SPLIT_EMBED_LOSS && k < (int)n)
            k += snprintf(buf + k, n - (size_t)k, " --pp_account_embedding_loss true");
        if (l->split == LLM4D_SPLIT_GIVEN && k < (int)n)
            k += snprintf(buf + k, n - (size_t)k, " --pp_layers %s", cfg->dist.pp_layers);
    }
    if (k < (int)n)
        k += snprintf(buf + k, n - (size_t)k, " --micro_batch_size %d --global_batch_size %lld", l->mb,
                      (long long)cfg->global_batch_size);
    if (k < (int)n) snprintf(buf + k, n - (size_t)k, " --use_recompute %s", l->recompute ? "true" : "false");
}

llm4d_code llm4d_layout_stage_topo(const llm4d_config *cfg, int s, llm4d_topology *topo, llm4d_err *err) {
    const llm4d_dist_config *d = &cfg->dist;
    const int world = d->dp_degree * d->pp_degree * d->sharding_degree * d->mp_degree;
    llm4d_topology t0;
    LLM4D_TRY(llm4d_topology_init(&t0, world, 0, d->dp_degree, d->pp_degree, d->sharding_degree, d->mp_degree, err));
    const int idx[LLM4D_NAXES] = {0, s, 0, 0};
    return llm4d_topology_init(topo, world, llm4d_topology_rank_at(&t0, idx), d->dp_degree, d->pp_degree,
                               d->sharding_degree, d->mp_degree, err);
}
