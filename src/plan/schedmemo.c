/* schedmemo.c — the memo of the stages' schedules by (kind, P, V, M) (see schedmemo.h): an index (core/hmap.h) of
 * entries that each hold the P lists of one pipeline, or none where one of them cannot be built. */
#include "plan/schedmemo.h"

#include <stdlib.h>

#include "core/hmap.h"

typedef struct {
    int kind, P, V, M;
    llm4d_pp_schedule *sched; /* [P]; NULL: a stage's list cannot be built (the plan keeps none) */
} entry;

struct llm4d_sched_memo {
    llm4d_hmap index; /* of entry */
};

llm4d_code llm4d_sched_memo_create(llm4d_sched_memo **out, llm4d_err *err) {
    llm4d_sched_memo *m = calloc(1, sizeof *m);
    if (!m || !llm4d_hmap_init(&m->index, 64)) {
        free(m);
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    }
    *out = m;
    return LLM4D_OK;
}

static void entry_free(entry *e) {
    for (int s = 0; e->sched && s < e->P; s++) llm4d_pp_schedule_free(&e->sched[s]);
    free(e->sched);
    free(e);
}

void llm4d_sched_memo_clear(llm4d_sched_memo *m) {
    if (!m) return;
    for (size_t i = 0; i < m->index.cap; i++)
        if (m->index.s[i].e) entry_free(m->index.s[i].e);
    llm4d_hmap_clear(&m->index);
}

void llm4d_sched_memo_destroy(llm4d_sched_memo *m) {
    if (!m) return;
    llm4d_sched_memo_clear(m);
    llm4d_hmap_free(&m->index);
    free(m);
}

static int same(const void *e_, const void *k_) {
    const entry *e = e_;
    const int *k = k_;
    return e->kind == k[0] && e->P == k[1] && e->V == k[2] && e->M == k[3];
}

/* Every stage's list into *out (NULL when one cannot be built, as llm4d_pp_plan_keep_schedules keeps none). */
static llm4d_code build_all(int kind, int P, int V, int M, llm4d_pp_schedule **out, llm4d_err *err) {
    *out = NULL;
    llm4d_pp_schedule *s = calloc((size_t)P, sizeof *s);
    if (!s) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    for (int st = 0; st < P; st++) {
        llm4d_err why = {0};
        const llm4d_code rc = llm4d_pp_schedule_build(&s[st], (llm4d_pp_kind)kind, P, V, M, st, &why);
        if (rc != LLM4D_OK) {
            for (int k = 0; k < st; k++) llm4d_pp_schedule_free(&s[k]);
            free(s);
            return rc == LLM4D_ENOMEM ? (*err = why, rc) : LLM4D_OK;
        }
    }
    *out = s;
    return LLM4D_OK;
}

llm4d_code llm4d_sched_memo_lend(llm4d_sched_memo *m, llm4d_pp_plan *pp, llm4d_err *err) {
    if (!m) return llm4d_pp_plan_keep_schedules(pp, err);
    if (pp->sched || pp->P <= 1) return LLM4D_OK;
    const int k[4] = {(int)pp->runs->kind, pp->P, pp->V, pp->M};
    const int64_t kw[4] = {k[0], k[1], k[2], k[3]};
    const uint64_t h = llm4d_hmap_hash(kw, 4);
    llm4d_hslot *s = llm4d_hmap_find(&m->index, h, same, k);
    if (!s) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    if (!s->e) {
        entry *e = calloc(1, sizeof *e);
        if (!e) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
        e->kind = k[0], e->P = k[1], e->V = k[2], e->M = k[3];
        const llm4d_code rc = build_all(k[0], k[1], k[2], k[3], &e->sched, err);
        if (rc != LLM4D_OK) {
            free(e);
            return rc;
        }
        s->h = h, s->e = e, m->index.n++;
    }
    pp->sched = ((entry *)s->e)->sched;
    return LLM4D_OK;
}

void llm4d_sched_memo_return(const llm4d_sched_memo *m, llm4d_pp_plan *pp) {
    if (m) pp->sched = NULL;
}
