/* pp_balance.c — the pipeline split balanced by cost (see pp_balance.h). */
#include "parallel/pp_balance.h"

#include <stdlib.h>

#include "config/model_shape.h"
#include "core/hmap.h"

llm4d_pp_split_costs llm4d_pp_costs_of(const llm4d_config *cfg) {
    const llm4d_model_config *m = &cfg->model;
    const int64_t M = cfg->dist.mp_degree > 0 ? cfg->dist.mp_degree : 1;
    const llm4d_model_shape s = llm4d_model_shape_of(m, (int)M); /* the description's shapes (config/model_shape.h) */
    const int64_t C = s.C, F = s.F, H = s.NH, T = cfg->data.max_seq_len, Vp = m->padded_vocab_size;
    const int64_t B = LLM4D_PP_BYTE_FLOPS;
    /* A block's forward FLOPs per token, 2 per multiply-add: the QKV GEMM 2 C qkv (GPT-2: qkv = 3C; grouped-query
     * attention: (NH + 2 NKV) HS) and the attention projection 2 C C, the MLP's two GEMMs 2 C fc and 2 F C (GPT-2:
     * fc = F, 4 C F; SwiGLU: fc = 2F, 6 C F); attention's Q K^T and P V 2 T C each (4 T C, over all T keys: the
     * causal half is not subtracted; grouped-query attention does the query heads' products), each split over the
     * M tensor-parallel ranks. For GPT-2 at F = 4C that is 24 C^2 + 4 T C, Narayanan et al. 2021's
     * 24 B s h^2 (1 + s / 6h) per layer's forward divided by its B s tokens. */
    const int64_t fwd_flops = 2 * s.block_matmul / M + 4 * T * C / M;
    /* Its element-wise passes per token, in fp32 elements (x 4 bytes; 16-bit activations are not priced apart),
     * each pass over a tensor counted (a row a pass re-reads from cache still counts: the balance needs the passes'
     * relative weight, not DRAM traffic), the GEMMs' own operand reads being in fwd_flops:
     *   16 C     = 2 x 4 C, the LayerNorms (cpu_elem.c: the input read by three passes, mean, variance and
     *              normalise, the output written once; RMSNorm's two reads and a write, 3 C each: 14 C)
     *            + 2 x 4 C, the residual joins (the row-parallel GEMM's output written and read back by
     *              dropout_add, which also reads the residual and writes the sum; the separate bias pass under
     *              tensor parallelism, 2 C each, is not counted);
     *   2 F / M  = the MLP's hidden activations, written by the first GEMM and read by the second (an operand
     *              read, counted for the GELU applied as it reads); SwiGLU's 6 F / M: gate and up written (2F),
     *              read by the SwiGLU (2F), its output written and read by the second GEMM (2F);
     *   3 H T / M = attention's scores of each local head against all T keys: S written, read by the softmax,
     *              P written (the flash-style kernel's per-block scratch; P V reads P as a GEMM operand);
     *   RoPE: the local Q and K heads read and written, 2 (NH + NKV) HS / M (GPT-2: none). */
    const int64_t norms = m->rmsnorm ? 2 * 3 * C : 2 * 4 * C, mlp = m->swiglu ? 6 * F / M : 2 * F / M;
    const int64_t rope = m->rope ? 2 * (s.NH + s.NKV) * s.HS / M : 0;
    const int64_t fwd_bytes = 4 * (norms + 2 * 4 * C + mlp + 3 * H * T / M + rope);
    const int64_t passes = llm4d_recompute_blocks(m) ? 4 : 3; /* forward, backward (2 x), the recomputed forward */
    llm4d_pp_split_costs c = {
        .block = passes * (fwd_flops + B * fwd_bytes),
        /* forward and backward together, no FLOPs: 7 C fp32 counted by tensor, not by pass: the token's wte and wpe
         * rows read and its x written (3 C), then for each table the gradient read and added into the row (2 C
         * each); the adds' reads of the rows they update are not counted. Without a position table (RoPE): 4 C */
        .embedding = B * 4 * (s.wpe ? 7 : 4) * C,
        /* the LM head's GEMM, forward and two backward products (3 x 2 C Vp / M: Narayanan et al.'s 6 B s h V over
         * B s tokens; never recomputed), and 4 Vp / M fp32 counted by tensor: the logits written and read by the
         * softmax, their gradient written and read by the backward GEMMs (operand reads, counted here); tied or
         * untied, the same work */
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

/* ---- the memo: (costs, L, VP) -> (have, bj, bk), indexed by core/hmap.h ---- */

typedef struct {
    llm4d_pp_split_costs c;
    int L, VP, have, bj, bk;
} balance_entry;

struct llm4d_pp_balance_memo {
    llm4d_hmap index;
};

llm4d_pp_balance_memo *llm4d_pp_balance_memo_create(void) {
    llm4d_pp_balance_memo *m = calloc(1, sizeof *m);
    if (m && !llm4d_hmap_init(&m->index, 256)) free(m), m = NULL;
    return m;
}

void llm4d_pp_balance_memo_destroy(llm4d_pp_balance_memo *m) {
    if (!m) return;
    for (size_t i = 0; i < m->index.cap; i++) free(m->index.s[i].e);
    llm4d_hmap_free(&m->index);
    free(m);
}

static int same(const void *entry, const void *key) {
    const balance_entry *s = entry, *k = key;
    return s->c.block == k->c.block && s->c.embedding == k->c.embedding && s->c.head == k->c.head && s->L == k->L &&
           s->VP == k->VP;
}

void llm4d_pp_balance_memo_get(llm4d_pp_balance_memo *m, const llm4d_pp_split_costs *c, int L, int VP, int *n) {
    if (!m || VP == 1) {
        llm4d_pp_balance(c, L, VP, n);
        return;
    }
    const balance_entry k = {.c = *c, .L = L, .VP = VP};
    const int64_t w[5] = {c->block, c->embedding, c->head, L, VP};
    const uint64_t h = llm4d_hmap_hash(w, 5);
    llm4d_hslot *s = llm4d_hmap_find(&m->index, h, same, &k);
    balance_entry *e = s && !s->e ? malloc(sizeof *e) : NULL;
    if (e) {
        *e = k;
        best_ends(c, L, VP, &e->have, &e->bj, &e->bk);
        s->h = h, s->e = e, m->index.n++;
    }
    if (!s || !s->e) { /* without room: computed */
        llm4d_pp_balance(c, L, VP, n);
        return;
    }
    const balance_entry *x = s->e;
    fill(L, VP, x->have, x->bj, x->bk, n);
}
