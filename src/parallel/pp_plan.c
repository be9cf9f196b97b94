/* pp_plan.c — the pipeline of a run (see pp_plan.h): the schedule resolved once, the split of the blocks, each
 * stage's part. */
#include "parallel/pp_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/pp_balance.h"

/* The blocks [lo[v], hi[v]) of each virtual stage v (P x V of them), from cfg's pipeline keys; a user error naming
 * the problem when the layers cannot be split as asked. */
static llm4d_code split(const llm4d_config *cfg, int P, int V, int *lo, int *hi, llm4d_pp_balance_memo *memo,
                        llm4d_err *err) {
    const int L = cfg->model.num_layers, VP = P * V;
    int *n = calloc((size_t)VP, sizeof *n);
    if (!n) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    llm4d_code rc = LLM4D_OK;
    const char *list = cfg->dist.pp_layers;
    if (list[0]) { /* the blocks of each virtual stage, as given */
        int k = 0, sum = 0;
        const char *p = list;
        while (*p && rc == LLM4D_OK) {
            char *end;
            const long x = strtol(p, &end, 10);
            if (end == p || x < 0 || x > L) {
                rc = llm4d_fail(err, LLM4D_EUSER, "pp_layers '%s': '%s' is not a block count; give %d counts, one "
                                "per virtual stage, that sum to num_layers %d (e.g. pp_layers 3,3,3,3)", list, p, VP,
                                L);
                break;
            }
            if (k < VP) n[k] = (int)x;
            k++;
            sum += (int)x;
            p = *end == ',' ? end + 1 : end;
            if (*end && *end != ',') {
                rc = llm4d_fail(err, LLM4D_EUSER, "pp_layers '%s': separate the counts with commas", list);
                break;
            }
        }
        if (rc == LLM4D_OK && k != VP)
            rc = llm4d_fail(err, LLM4D_EUSER, "pp_layers gives %d counts, but pp_degree %d x virtual_pp_degree %d = %d "
                            "virtual stages need one each", k, P, V, VP);
        if (rc == LLM4D_OK && sum != L)
            rc = llm4d_fail(err, LLM4D_EUSER, "pp_layers '%s' holds %d blocks, but the model has num_layers %d; make "
                            "the counts sum to %d", list, sum, L, L);
    } else if (cfg->dist.pp_account_embedding_loss) { /* the embedding and the loss count as one block each */
        if ((L + 2) % VP)
            rc = llm4d_fail(err, LLM4D_EUSER, "pp_account_embedding_loss: num_layers %d + 2 (embedding, loss) = %d is "
                            "not divisible by pp_degree %d x virtual_pp_degree %d; give pp_layers instead", L, L + 2,
                            P, V);
        for (int v = 0; rc == LLM4D_OK && v < VP; v++)
            n[v] = (L + 2) / VP - (v == 0) - (v == VP - 1);
        for (int v = 0; rc == LLM4D_OK && v < VP; v++)
            if (n[v] < 0)
                rc = llm4d_fail(err, LLM4D_EUSER, "pp_account_embedding_loss: %d blocks over %d virtual stages leave "
                                "virtual stage %d less than the embedding or the loss; use fewer stages", L, VP, v);
    } else if (!strcmp(cfg->dist.pp_split, "balanced")) { /* by cost (pp_balance.h) */
        if (L < VP - 2)
            rc = llm4d_fail(err, LLM4D_EUSER, "num_layers %d cannot give each of the %d virtual stages between the "
                            "first and the last a block; use fewer pipeline stages", L, VP - 2);
        else {
            const llm4d_pp_split_costs c = llm4d_pp_costs_of(cfg);
            llm4d_pp_balance_memo_get(memo, &c, L, VP, n);
        }
    } else if (L % VP) {
        rc = llm4d_fail(err, LLM4D_EUSER, "num_layers %d is not divisible by pp_degree %d x virtual_pp_degree %d = %d; "
                        "give the blocks of each stage with pp_layers (e.g. %d counts summing to %d) for an uneven "
                        "split, or use pp_split balanced", L, P, V, VP, VP, L);
    } else {
        for (int v = 0; v < VP; v++) n[v] = L / VP;
    }
    /* consecutive ranges, then the proof: every block held exactly once, every virtual stage holds something */
    int at = 0;
    for (int v = 0; rc == LLM4D_OK && v < VP; v++) {
        lo[v] = at;
        hi[v] = at + n[v];
        at += n[v];
        if (n[v] == 0 && v != 0 && v != VP - 1)
            rc = llm4d_fail(err, LLM4D_EUSER, "virtual stage %d would hold no block (pp_layers %s); give every stage "
                            "between the first and the last at least one block", v, list);
    }
    if (rc == LLM4D_OK) {
        int *held = calloc((size_t)(L > 0 ? L : 1), sizeof *held);
        if (!held) rc = llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
        for (int v = 0; held && v < VP; v++)
            for (int l = lo[v]; l < hi[v]; l++) held[l]++;
        for (int l = 0; held && rc == LLM4D_OK && l < L; l++)
            if (held[l] != 1)
                rc = llm4d_fail(err, LLM4D_EINTERNAL, "the pipeline split holds block %d %d times", l, held[l]);
        free(held);
    }
    free(n);
    return rc;
}

llm4d_code llm4d_pp_plan_make(llm4d_pp_plan *p, const llm4d_config *cfg, llm4d_err *err) {
    return llm4d_pp_plan_make_memo(p, cfg, NULL, err);
}

llm4d_code llm4d_pp_plan_make_memo(llm4d_pp_plan *p, const llm4d_config *cfg, llm4d_pp_balance_memo *memo,
                                   llm4d_err *err) {
    memset(p, 0, sizeof *p);
    const int P = cfg->dist.pp_degree, V = cfg->model.virtual_pp_degree;
    p->P = P, p->V = V, p->M = (int)cfg->accumulate_steps;
    llm4d_pp_kind kind = LLM4D_PP_1F1B; /* pp_degree 1 with pp_layers: only the split is checked */
    if (P > 1) LLM4D_TRY(llm4d_pp_kind_parse(cfg->dist.pp_schedule, &kind, err));
    if (V > 1 && kind == LLM4D_PP_1F1B) kind = LLM4D_PP_INTERLEAVED; /* Paddle: virtual_pp_degree > 1 interleaves */
    p->asked = llm4d_pp_props_of(kind);
    if (p->asked->interleaved && V == 1)
        return llm4d_fail(err, LLM4D_EUSER, "the interleaved schedule needs virtual_pp_degree > 1 (chunks per stage); "
                          "set --virtual_pp_degree 2 or use pp_schedule 1F1B");
    p->runs = llm4d_recompute_blocks(&cfg->model) ? llm4d_pp_props_of(p->asked->with_recompute) : p->asked;
    if (P > 1) LLM4D_TRY(llm4d_pp_schedule_fits(p->runs->kind, P, V, p->M, err));
    p->lo = calloc((size_t)P * V, sizeof *p->lo);
    p->hi = calloc((size_t)P * V, sizeof *p->hi);
    p->cost = calloc((size_t)P * V, sizeof *p->cost);
    llm4d_code rc = p->lo && p->hi && p->cost ? split(cfg, P, V, p->lo, p->hi, memo, err)
                                              : llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    if (rc != LLM4D_OK) {
        llm4d_pp_plan_free(p);
        return rc;
    }
    /* what each virtual stage is predicted to cost, whichever way it was split (the log compares) */
    const llm4d_pp_split_costs c = llm4d_pp_costs_of(cfg);
    p->balanced = !cfg->dist.pp_layers[0] && !cfg->dist.pp_account_embedding_loss &&
                  !strcmp(cfg->dist.pp_split, "balanced");
    for (int v = 0; v < P * V; v++) p->cost[v] = llm4d_pp_stage_cost(&c, v, P * V, p->hi[v] - p->lo[v]);
    return LLM4D_OK;
}

llm4d_code llm4d_pp_plan_keep_schedules(llm4d_pp_plan *p, llm4d_err *err) {
    if (p->sched || p->P <= 1) return LLM4D_OK;
    llm4d_pp_schedule *s = calloc((size_t)p->P, sizeof *s);
    if (!s) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    for (int st = 0; st < p->P; st++) {
        llm4d_err why = {0};
        const llm4d_code rc = llm4d_pp_schedule_build(&s[st], p->runs->kind, p->P, p->V, p->M, st, &why);
        if (rc != LLM4D_OK) { /* kept none: each user builds its own and says why it cannot */
            for (int k = 0; k < st; k++) llm4d_pp_schedule_free(&s[k]);
            free(s);
            return rc == LLM4D_ENOMEM ? (*err = why, rc) : LLM4D_OK;
        }
    }
    p->sched = s;
    return LLM4D_OK;
}

llm4d_code llm4d_pp_plan_schedule(const llm4d_pp_plan *p, int stage, llm4d_pp_schedule *tmp,
                                  const llm4d_pp_schedule **out, llm4d_err *err) {
    if (p->sched) {
        *out = &p->sched[stage];
        return LLM4D_OK;
    }
    LLM4D_TRY(llm4d_pp_schedule_build(tmp, p->runs->kind, p->P, p->V, p->M, stage, err));
    *out = tmp;
    return LLM4D_OK;
}

void llm4d_pp_plan_free(llm4d_pp_plan *p) {
    for (int st = 0; p->sched && st < p->P; st++) llm4d_pp_schedule_free(&p->sched[st]);
    free(p->sched);
    free(p->lo);
    free(p->hi);
    free(p->cost);
    memset(p, 0, sizeof *p);
}

llm4d_code llm4d_pp_plan_stage(const llm4d_pp_plan *p, int stage, llm4d_model_part *part, llm4d_gpt_layout *layout,
                               llm4d_err *err) {
    const int P = p->P, V = p->V;
    if (V > LLM4D_MAX_CHUNKS)
        return llm4d_fail(err, LLM4D_EUSER, "virtual_pp_degree %d: llm4d holds at most %d chunks per stage", V,
                          LLM4D_MAX_CHUNKS);
    part->n_chunks = V;
    for (int c = 0; c < V; c++) {
        part->layer_lo[c] = p->lo[llm4d_pp_vstage(P, c, stage)];
        part->layer_hi[c] = p->hi[llm4d_pp_vstage(P, c, stage)];
    }
    part->embedding = stage == llm4d_pp_stage_of(P, 0);
    part->head = stage == llm4d_pp_stage_of(P, P * V - 1);
    llm4d_pp_schedule tmp;
    const llm4d_pp_schedule *s;
    LLM4D_TRY(llm4d_pp_plan_schedule(p, stage, &tmp, &s, err));
    for (int c = 0; c < V; c++) layout->slots[c] = s->peak[c] > 0 ? s->peak[c] : 1;
    if (s == &tmp) llm4d_pp_schedule_free(&tmp);
    layout->split_backward = p->runs->split_backward;
    return LLM4D_OK;
}

void llm4d_pp_plan_log(const llm4d_pp_plan *p, int recompute, const llm4d_log *log) {
    const int P = p->P, V = p->V;
    const int fell_back = recompute && p->runs != p->asked;
    llm4d_log_info(log, "pipeline: %d stages x %d chunk%s, %s schedule%s, %s split; every block held once:", P, V,
                   V > 1 ? "s" : "", p->runs->name,
                   fell_back ? " (ZB-H1 asked; with recompute the weight gradients are computed in the backward)" : "",
                   p->balanced ? "balanced" : "given");
    double total = 0;
    for (int v = 0; v < P * V; v++) total += (double)p->cost[v];
    for (int st = 0; st < P; st++) {
        char line[512];
        int k = snprintf(line, sizeof line, "    stage %d: blocks", st);
        for (int c = 0; c < V && k < (int)sizeof line; c++)
            k += snprintf(line + k, sizeof line - (size_t)k, "%s [%d, %d)", c ? "," : "",
                          p->lo[llm4d_pp_vstage(P, c, st)], p->hi[llm4d_pp_vstage(P, c, st)]);
        if (k < (int)sizeof line)
            k += snprintf(line + k, sizeof line - (size_t)k, "%s%s",
                          st == llm4d_pp_stage_of(P, 0) ? " + embeddings" : "",
                          st == llm4d_pp_stage_of(P, P * V - 1) ? " + ln_f, LM head, loss" : "");
        double cost = 0;
        for (int c = 0; c < V; c++) cost += (double)p->cost[llm4d_pp_vstage(P, c, st)];
        if (k < (int)sizeof line)
            snprintf(line + k, sizeof line - (size_t)k, "; predicted cost %.2f MFLOP-eq per token (%.1f %%)",
                     cost / 1e6, total > 0 ? 100 * cost / total : 0.0);
        llm4d_log_info(log, "%s", line);
    }
}
