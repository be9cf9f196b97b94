/* simmemo.c — the memo of pipeline simulations by their exact inputs (see simmemo.h): an open-addressing table of
 * entries (core/hmap.h), each holding its key's doubles and its answer in one allocation. */
#include "plan/simmemo.h"

#include <stdlib.h>
#include <string.h>

#include "core/hmap.h"

typedef struct {
    int kind, P, V, M;
    double key[]; /* [P 3 V + 1 + P + 1]: costs, send time, rates; then span, busy[P] (the answer) */
} entry;

struct llm4d_sim_memo {
    llm4d_hmap index; /* of entry */
};

llm4d_code llm4d_sim_memo_create(llm4d_sim_memo **out, llm4d_err *err) {
    llm4d_sim_memo *m = calloc(1, sizeof *m);
    if (!m || !llm4d_hmap_init(&m->index, 1024)) {
        free(m);
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    }
    *out = m;
    return LLM4D_OK;
}

void llm4d_sim_memo_destroy(llm4d_sim_memo *m) {
    if (!m) return;
    for (size_t i = 0; i < m->index.cap; i++) free(m->index.s[i].e);
    llm4d_hmap_free(&m->index);
    free(m);
}

static uint64_t mix(uint64_t h, uint64_t x) {
    h = (h ^ x) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

typedef struct {
    int kind, P, V, M;
    const llm4d_pp_costs *costs;
} probe;

/* the key's doubles compared bit for bit: equal bits, equal simulation */
static int same(const void *entry_, const void *key) {
    const entry *x = entry_;
    const probe *q = key;
    const size_t nc = (size_t)q->P * 3 * q->V;
    return x->kind == q->kind && x->P == q->P && x->V == q->V && x->M == q->M &&
           !memcmp(x->key, q->costs->cost, nc * sizeof *x->key) &&
           !memcmp(&x->key[nc], &q->costs->p2p_s, sizeof(double)) &&
           !memcmp(&x->key[nc + 1], q->costs->rate, ((size_t)q->P + 1) * sizeof *x->key);
}

llm4d_code llm4d_sim_memo_simulate(llm4d_sim_memo *m, const llm4d_pp_schedule *stages, int P,
                                   const llm4d_pp_costs *costs, double *span, double *busy, llm4d_err *err) {
    if (!m) return llm4d_pp_schedule_simulate(stages, P, costs, span, busy, err);
    LLM4D_ASSERT(costs->rate, "llm4d_sim_memo_simulate needs the rates");
    const int kind = stages[0].kind, V = stages[0].V, M = stages[0].M;
    const size_t nc = (size_t)P * 3 * V, nk = nc + 1 + (size_t)P + 1;
    uint64_t h = mix(mix(mix(mix(0xcbf29ce484222325ull, (uint64_t)kind), (uint64_t)P), (uint64_t)V), (uint64_t)M);
    uint64_t bits;
    for (size_t i = 0; i < nc; i++) memcpy(&bits, &costs->cost[i], sizeof bits), h = mix(h, bits);
    memcpy(&bits, &costs->p2p_s, sizeof bits), h = mix(h, bits);
    for (int i = 0; i <= P; i++) memcpy(&bits, &costs->rate[i], sizeof bits), h = mix(h, bits);
    const probe q = {kind, P, V, M, costs};
    llm4d_hslot *s = llm4d_hmap_find(&m->index, h, same, &q);
    if (!s) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    if (!s->e) {
        entry *x = malloc(sizeof *x + (nk + 1 + (size_t)P) * sizeof *x->key);
        if (!x) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
        const llm4d_code rc = llm4d_pp_schedule_simulate(stages, P, costs, &x->key[nk], &x->key[nk + 1], err);
        if (rc != LLM4D_OK) { /* not kept: the same inputs fail again the same way */
            free(x);
            return rc;
        }
        x->kind = kind, x->P = P, x->V = V, x->M = M;
        memcpy(x->key, costs->cost, nc * sizeof *x->key);
        x->key[nc] = costs->p2p_s;
        memcpy(&x->key[nc + 1], costs->rate, ((size_t)P + 1) * sizeof *x->key);
        s->h = h, s->e = x, m->index.n++;
    }
    const entry *x = s->e;
    if (span) *span = x->key[nk];
    if (busy) memcpy(busy, &x->key[nk + 1], (size_t)P * sizeof *busy);
    return LLM4D_OK;
}
