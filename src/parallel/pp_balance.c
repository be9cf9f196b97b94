/* pp_balance.c — the pipeline split balanced by cost (see pp_balance.h). */
#include "parallel/pp_balance.h"

#include <stdlib.h>

llm4d_pp_split_costs llm4d_pp_costs_of(const llm4d_config *cfg) {
    const llm4d_model_config *m = &cfg->model;
    const int64_t C = m->hidden_size, F = m->ffn_hidden_size, H = m->num_attention_heads, T = cfg->data.max_seq_len;
    const int64_t Vp = m->padded_vocab_size, M = cfg->dist.mp_degree > 0 ? cfg->dist.mp_degree : 1;
    const int64_t B = LLM4D_PP_BYTE_FLOPS;
    const int64_t fwd_flops = 2 * (4 * C * C + 2 * C * F) / M + 4 * T * C / M;
    const int64_t fwd_bytes = 4 * (16 * C + 2 * F / M + 3 * H * T / M);
    const int64_t passes = m->use_recompute ? 4 : 3; /* forward, backward (2 x), the recomputed forward */
    llm4d_pp_split_costs c = {
        .block = passes * (fwd_flops + B * fwd_bytes),
        .embedding = B * 4 * 7 * C,
        .head = 3 * 2 * C * Vp / M + B * 4 * 4 * Vp / M,
    };
    return c;
}

static int cmp_desc(const void *a, const void *b) {
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* The split with j blocks first, k last and the rest even in between; its costs sorted from the largest down. */
static void candidate(const llm4d_pp_split_costs *c, int L, int VP, int j, int k, int *n, int64_t *sorted) {
    n[0] = j;
    n[VP - 1] = k;
    const int mid = VP - 2, rest = L - j - k;
    for (int v = 1; v <= mid; v++) n[v] = rest / mid + (v - 1 < rest % mid);
    for (int v = 0; v < VP; v++) sorted[v] = llm4d_pp_stage_cost(c, v, VP, n[v]);
    qsort(sorted, (size_t)VP, sizeof *sorted, cmp_desc);
}

void llm4d_pp_balance(const llm4d_pp_split_costs *c, int L, int VP, int *n) {
    if (VP == 1) {
        n[0] = L;
        return;
    }
    int *cand = malloc((size_t)VP * sizeof *cand);
    int64_t *best = malloc((size_t)VP * sizeof *best), *cur = malloc((size_t)VP * sizeof *cur);
    int have = 0;
    const int mid = VP - 2;
    for (int j = 0; cand && best && cur && j <= L; j++)
        for (int k = 0; j + k <= L; k++) {
            const int rest = L - j - k;
            if ((mid == 0 && rest != 0) || rest < mid) continue; /* every stage between holds a block */
            candidate(c, L, VP, j, k, cand, cur);
            int better = !have;
            for (int v = 0; have && v < VP; v++)
                if (cur[v] != best[v]) {
                    better = cur[v] < best[v];
                    break;
                }
            if (!better) continue;
            have = 1;
            for (int v = 0; v < VP; v++) best[v] = cur[v], n[v] = cand[v];
        }
    if (!have) /* out of memory: the even split (L is then what the caller checked) */
        for (int v = 0; v < VP; v++) n[v] = L / VP + (v < L % VP);
    free(cand);
    free(best);
    free(cur);
}
