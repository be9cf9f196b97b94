/* simmemo.c — the memo of pipeline simulations by their exact inputs (see simmemo.h): an open-addressing table of
 * entries, each holding its key's doubles and its answer in one allocation. */
#include "plan/simmemo.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    uint64_t h;
    int kind, P, V, M;
    double *key; /* [P 3 V + 1 + P + 1]: costs, send time, rates; then span, busy[P] (the answer) */
} entry;

struct llm4d_sim_memo {
    entry *e;
    size_t cap, n;
};

llm4d_code llm4d_sim_memo_create(llm4d_sim_memo **out, llm4d_err *err) {
    llm4d_sim_memo *m = calloc(1, sizeof *m);
    if (m) m->cap = 1024, m->e = calloc(m->cap, sizeof *m->e);
    if (!m || !m->e) {
        free(m);
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    }
    *out = m;
    return LLM4D_OK;
}

void llm4d_sim_memo_destroy(llm4d_sim_memo *m) {
    if (!m) return;
    for (size_t i = 0; i < m->cap; i++) free(m->e[i].key);
    free(m->e);
    free(m);
}

static uint64_t mix(uint64_t h, uint64_t x) {
    h = (h ^ x) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

/* Grow past half full (the entries move, their keys stay). */
static int grow(llm4d_sim_memo *m) {
    if (2 * (m->n + 1) <= m->cap) return 1;
    const size_t cap = 2 * m->cap;
    entry *ne = calloc(cap, sizeof *ne);
    if (!ne) return 0;
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->e[i].key) continue;
        size_t j = m->e[i].h & (cap - 1);
        while (ne[j].key) j = (j + 1) & (cap - 1);
        ne[j] = m->e[i];
    }
    free(m->e);
    m->e = ne, m->cap = cap;
    return 1;
}

llm4d_code llm4d_sim_memo_simulate(llm4d_sim_memo *m, const llm4d_pp_schedule *stages, int P,
                                   const llm4d_pp_costs *costs, double *span, double *busy, llm4d_err *err) {
    if (!m) return llm4d_pp_schedule_simulate(stages, P, costs, span, busy, err);
    LLM4D_ASSERT(costs->rate, "llm4d_sim_memo_simulate needs the rates");
    const int kind = stages[0].kind, V = stages[0].V, M = stages[0].M;
    const size_t nc = (size_t)P * 3 * V, nk = nc + 1 + (size_t)P + 1;
    /* the key's doubles compared bit for bit: equal bits, equal simulation */
    uint64_t h = mix(mix(mix(mix(0xcbf29ce484222325ull, (uint64_t)kind), (uint64_t)P), (uint64_t)V), (uint64_t)M);
    uint64_t bits;
    for (size_t i = 0; i < nc; i++) memcpy(&bits, &costs->cost[i], sizeof bits), h = mix(h, bits);
    memcpy(&bits, &costs->p2p_s, sizeof bits), h = mix(h, bits);
    for (int i = 0; i <= P; i++) memcpy(&bits, &costs->rate[i], sizeof bits), h = mix(h, bits);
    if (!grow(m)) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    size_t j = h & (m->cap - 1);
    for (; m->e[j].key; j = (j + 1) & (m->cap - 1)) {
        const entry *x = &m->e[j];
        if (x->h != h || x->kind != kind || x->P != P || x->V != V || x->M != M) continue;
        if (memcmp(x->key, costs->cost, nc * sizeof *x->key) || memcmp(&x->key[nc], &costs->p2p_s, sizeof(double)) ||
            memcmp(&x->key[nc + 1], costs->rate, ((size_t)P + 1) * sizeof *x->key))
            continue;
        if (span) *span = x->key[nk];
        if (busy) memcpy(busy, &x->key[nk + 1], (size_t)P * sizeof *busy);
        return LLM4D_OK;
    }
    double *key = malloc((nk + 1 + (size_t)P) * sizeof *key);
    if (!key) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    const llm4d_code rc = llm4d_pp_schedule_simulate(stages, P, costs, &key[nk], &key[nk + 1], err);
    if (rc != LLM4D_OK) { /* not kept: the same inputs fail again the same way */
        free(key);
        return rc;
    }
    memcpy(key, costs->cost, nc * sizeof *key);
    key[nc] = costs->p2p_s;
    memcpy(&key[nc + 1], costs->rate, ((size_t)P + 1) * sizeof *key);
    m->e[j] = (entry){h, kind, P, V, M, key};
    m->n++;
    if (span) *span = key[nk];
    if (busy) memcpy(busy, &key[nk + 1], (size_t)P * sizeof *busy);
    return LLM4D_OK;
}
