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

/* A split's stage costs sorted from the largest down, as at most four runs of equal costs: the split with j blocks
 * first, k last and the rest even in between has the first stage's cost, the last's, and two middle costs (q and
 * q + 1 blocks) each repeated. Comparing runs instead of sorted arrays keeps each of the O(L^2) candidates O(1)
 * (a search over pipelines of ~100 virtual stages spent most of its time sorting here). */
typedef struct {
    int k;
    int64_t v[4], n[4];
} runs;

static void runs_of(const llm4d_pp_split_costs *c, int L, int VP, int j, int k, runs *r) {
    const int mid = VP - 2, rest = L - j - k;
    int64_t v[4], n[4];
    int m = 0;
    v[m] = llm4d_pp_stage_cost(c, 0, VP, j), n[m++] = 1;
    v[m] = llm4d_pp_stage_cost(c, VP - 1, VP, k), n[m++] = 1;
    if (mid > 0) {
        const int q = rest / mid, extra = rest % mid;
        if (extra) v[m] = llm4d_pp_stage_cost(c, 1, VP, q + 1), n[m++] = extra;
        if (mid - extra) v[m] = llm4d_pp_stage_cost(c, 1, VP, q), n[m++] = mid - extra;
    }
    for (int i = 1; i < m; i++) /* insertion sort, largest first */
        for (int x = i; x > 0 && v[x] > v[x - 1]; x--) {
            const int64_t tv = v[x], tn = n[x];
            v[x] = v[x - 1], n[x] = n[x - 1], v[x - 1] = tv, n[x - 1] = tn;
        }
    r->k = 0;
    for (int i = 0; i < m; i++) {
        if (r->k && r->v[r->k - 1] == v[i]) r->n[r->k - 1] += n[i];
        else r->v[r->k] = v[i], r->n[r->k++] = n[i];
    }
}

/* The sign of the first difference between the two sorted cost lists (both of VP entries). */
static int runs_cmp(const runs *a, const runs *b) {
    int i = 0, j = 0;
    int64_t ra = a->n[0], rb = b->n[0];
    while (i < a->k && j < b->k) {
        if (a->v[i] != b->v[j]) return a->v[i] < b->v[j] ? -1 : 1;
        const int64_t m = ra < rb ? ra : rb;
        ra -= m, rb -= m;
        if (!ra && ++i < a->k) ra = a->n[i];
        if (!rb && ++j < b->k) rb = b->n[j];
    }
    return 0;
}

/* The split's first and last counts (have 0: no candidate, the even split) of (c, L, VP), VP > 1. */
static void best_ends(const llm4d_pp_split_costs *c, int L, int VP, int *have_out, int *bj_out, int *bk_out) {
    runs best = {0}, cur;
    int have = 0, bj = 0, bk = 0;
    const int mid = VP - 2;
    for (int j = 0; j <= L; j++)
        for (int k = 0; j + k <= L; k++) {
            const int rest = L - j - k;
            if ((mid == 0 && rest != 0) || rest < mid) continue; /* every stage between holds a block */
            runs_of(c, L, VP, j, k, &cur);
            if (have && runs_cmp(&cur, &best) >= 0) continue;
            have = 1, best = cur, bj = j, bk = k;
        }
    *have_out = have, *bj_out = bj, *bk_out = bk;
}

/* n[] from the ends best_ends chose. */
static void fill(int L, int VP, int have, int bj, int bk, int *n) {
    const int mid = VP - 2;
    if (have) {
        n[0] = bj, n[VP - 1] = bk;
        const int rest = L - bj - bk;
        for (int v = 1; v <= mid; v++) n[v] = rest / mid + (v - 1 < rest % mid);
    } else /* no split gives every stage between a block (L is then what the caller checked): the even split */
        for (int v = 0; v < VP; v++) n[v] = L / VP + (v < L % VP);
}

void llm4d_pp_balance(const llm4d_pp_split_costs *c, int L, int VP, int *n) {
    if (VP == 1) {
        n[0] = L;
        return;
    }
    int have, bj, bk;
    best_ends(c, L, VP, &have, &bj, &bk);
    fill(L, VP, have, bj, bk, n);
}

/* ---- the memo: an open-addressing table of (costs, L, VP) -> (have, bj, bk) ---- */

typedef struct {
    int used;
    llm4d_pp_split_costs c;
    int L, VP, have, bj, bk;
} balance_slot;

struct llm4d_pp_balance_memo {
    balance_slot *slot;
    size_t cap, n;
};

llm4d_pp_balance_memo *llm4d_pp_balance_memo_create(void) {
    llm4d_pp_balance_memo *m = calloc(1, sizeof *m);
    if (m) m->cap = 256, m->slot = calloc(m->cap, sizeof *m->slot);
    if (m && !m->slot) free(m), m = NULL;
    return m;
}

void llm4d_pp_balance_memo_destroy(llm4d_pp_balance_memo *m) {
    if (!m) return;
    free(m->slot);
    free(m);
}

static uint64_t balance_hash(const llm4d_pp_split_costs *c, int L, int VP) {
    const uint64_t w[5] = {(uint64_t)c->block, (uint64_t)c->embedding, (uint64_t)c->head, (uint64_t)L, (uint64_t)VP};
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < 5; i++) h = (h ^ w[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

static int same(const balance_slot *s, const llm4d_pp_split_costs *c, int L, int VP) {
    return s->c.block == c->block && s->c.embedding == c->embedding && s->c.head == c->head && s->L == L &&
           s->VP == VP;
}

void llm4d_pp_balance_memo_get(llm4d_pp_balance_memo *m, const llm4d_pp_split_costs *c, int L, int VP, int *n) {
    if (!m || VP == 1) {
        llm4d_pp_balance(c, L, VP, n);
        return;
    }
    if (2 * (m->n + 1) > m->cap) { /* grow past half full; without room, compute */
        const size_t cap = 2 * m->cap;
        balance_slot *ns = calloc(cap, sizeof *ns);
        if (!ns) {
            llm4d_pp_balance(c, L, VP, n);
            return;
        }
        for (size_t i = 0; i < m->cap; i++) {
            if (!m->slot[i].used) continue;
            size_t j = balance_hash(&m->slot[i].c, m->slot[i].L, m->slot[i].VP) & (cap - 1);
            while (ns[j].used) j = (j + 1) & (cap - 1);
            ns[j] = m->slot[i];
        }
        free(m->slot);
        m->slot = ns, m->cap = cap;
    }
    size_t j = balance_hash(c, L, VP) & (m->cap - 1);
    while (m->slot[j].used && !same(&m->slot[j], c, L, VP)) j = (j + 1) & (m->cap - 1);
    balance_slot *s = &m->slot[j];
    if (!s->used) {
        *s = (balance_slot){.used = 1, .c = *c, .L = L, .VP = VP};
        best_ends(c, L, VP, &s->have, &s->bj, &s->bk);
        m->n++;
    }
    fill(L, VP, s->have, s->bj, s->bk, n);
}
