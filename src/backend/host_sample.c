/* host_sample.c — drawing a token from logits on a CPU backend (backend.h sample; the rules are generate.h's).
 *
 * The draw is Philox (seed, LLM4D_RNG_SAMPLE) at counter j, so a generation is reproducible and does not depend on
 * threads; the candidates are ordered by logit with ties broken by id, so which ones survive a cut and the order
 * the draw walks them are fully determined. */
#include <math.h>
#include <stdlib.h>

#include "backend/host.h"
#include "core/rng.h"

typedef struct {
    float logit;
    int32_t id;
} cand;
_Static_assert(sizeof(cand) + sizeof(double) <= LLM4D_SAMPLE_SCRATCH(1), "the scratch holds a candidate and a "
               "probability per id");

static int32_t argmax(const float *x, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

/* Descending by logit, ties by ascending id. */
static int by_logit_desc(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static int better(const cand *x, const cand *y) { return by_logit_desc(x, y) < 0; }

static void swap_cand(cand *a, cand *b) {
    const cand t = *a;
    *a = *b;
    *b = t;
}

/* Quickselect: afterwards c[0..k) are the k best candidates (in some order). The order is total (ties broken by
 * id), so which candidates are selected does not depend on the pivots. */
static void select_best(cand *c, int n, int k) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        /* median of three as the pivot, moved to hi */
        if (better(&c[mid], &c[lo])) swap_cand(&c[mid], &c[lo]);
        if (better(&c[hi], &c[lo])) swap_cand(&c[hi], &c[lo]);
        if (better(&c[mid], &c[hi])) swap_cand(&c[mid], &c[hi]);
        const cand pivot = c[hi];
        int store = lo;
        for (int i = lo; i < hi; i++)
            if (better(&c[i], &pivot)) swap_cand(&c[i], &c[store++]);
        swap_cand(&c[store], &c[hi]);
        if (store == k - 1 || store == k) return;
        if (store < k) lo = store + 1;
        else hi = store - 1;
    }
}

int32_t llm4d_host_sample(llm4d_backend *be, const float *logits, int V, const llm4d_sampling *s, uint64_t j,
                          void *scratch) {
    (void)be;
    if (s->temperature == 0.0f || s->top_k == 1) return argmax(logits, V);
    cand *c = scratch;
    double *prob = (double *)(void *)(c + V); /* 8-byte candidates: the probabilities stay aligned */
    for (int i = 0; i < V; i++) c[i] = (cand){logits[i], i};
    int n = V;
    const int cut_k = s->top_k > 0 && s->top_k < V;
    if (cut_k) {
        /* the k best to the front in O(V), then only those sorted: a full sort of GPT-2's 50257 logits per token
         * would cost more than the small models' forward */
        select_best(c, V, s->top_k);
        n = s->top_k;
    }
    if (cut_k || s->top_p < 1.0f) qsort(c, (size_t)n, sizeof *c, by_logit_desc);
    const double mx = logits[argmax(logits, V)];
    double total = 0.0;
    for (int i = 0; i < n; i++) {
        prob[i] = exp(((double)c[i].logit - mx) / s->temperature);
        total += prob[i];
    }
    if (s->top_p < 1.0f) { /* the smallest most-probable prefix whose mass reaches top_p */
        double cum = 0.0;
        int keep = n;
        for (int i = 0; i < n; i++) {
            cum += prob[i];
            if (cum >= s->top_p * total) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
        total = 0.0;
        for (int i = 0; i < n; i++) total += prob[i];
    }
    uint32_t w[4];
    llm4d_rng_block(s->seed, llm4d_rng_stream(LLM4D_RNG_SAMPLE, 0, 0, 0), j, w);
    const uint64_t bits = ((uint64_t)w[1] << 32 | w[0]) >> 11; /* 53 random bits */
    const double u = (double)bits * (1.0 / 9007199254740992.0) * total;
    double cum = 0.0;
    for (int i = 0; i < n; i++) {
        cum += prob[i];
        if (u < cum) return c[i].id;
    }
    return c[n - 1].id;
}
