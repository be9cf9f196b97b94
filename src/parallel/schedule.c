/* schedule.c — generating and checking pipeline schedules (see schedule.h). */
#include "parallel/schedule.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const struct {
    const char *name;
    llm4d_pp_kind kind;
} kinds[] = {
    {"1F1B", LLM4D_PP_1F1B},          {"interleaved", LLM4D_PP_INTERLEAVED}, {"Interleaved1F1B", LLM4D_PP_INTERLEAVED},
    {"ZBH1", LLM4D_PP_ZBH1},          {"ZB-H1", LLM4D_PP_ZBH1},              {"zero_bubble", LLM4D_PP_ZBH1},
    {"forward", LLM4D_PP_FORWARD},
};

llm4d_code llm4d_pp_kind_parse(const char *name, llm4d_pp_kind *out, llm4d_err *err) {
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (kinds[i].kind != LLM4D_PP_FORWARD && !strcasecmp(name, kinds[i].name)) {
            *out = kinds[i].kind;
            return LLM4D_OK;
        }
    return llm4d_fail(err, LLM4D_EUSER, "pp_schedule '%s' is not a pipeline schedule; use 1F1B, interleaved (with "
                      "virtual_pp_degree > 1) or ZBH1", name);
}

static const llm4d_pp_props props[] = {
    [LLM4D_PP_1F1B] = {LLM4D_PP_1F1B, "1F1B", 0, 0, LLM4D_PP_1F1B},
    [LLM4D_PP_INTERLEAVED] = {LLM4D_PP_INTERLEAVED, "interleaved 1F1B", 0, 1, LLM4D_PP_INTERLEAVED},
    [LLM4D_PP_ZBH1] = {LLM4D_PP_ZBH1, "ZB-H1", 1, 0, LLM4D_PP_1F1B},
    [LLM4D_PP_FORWARD] = {LLM4D_PP_FORWARD, "forward-only", 0, 0, LLM4D_PP_FORWARD},
};

const llm4d_pp_props *llm4d_pp_props_of(llm4d_pp_kind kind) {
    LLM4D_ASSERT(kind >= 0 && (size_t)kind < sizeof props / sizeof props[0], "schedule kind %d", (int)kind);
    return &props[kind];
}

const char *llm4d_pp_kind_name(llm4d_pp_kind kind) { return llm4d_pp_props_of(kind)->name; }

llm4d_code llm4d_pp_schedule_fits(llm4d_pp_kind kind, int P, int V, int M, llm4d_err *err) {
    if (M < 1) return llm4d_fail(err, LLM4D_EUSER, "a pipeline needs at least one micro-batch per step");
    if (kind == LLM4D_PP_INTERLEAVED && M % P)
        return llm4d_fail(err, LLM4D_EUSER, "the interleaved schedule runs micro-batches in groups of pp_degree %d, "
                          "but a step has %d; make global_batch_size / (micro_batch_size x dp x sharding) a multiple "
                          "of %d", P, M, P);
    if (kind == LLM4D_PP_ZBH1 && M < P)
        return llm4d_fail(err, LLM4D_EUSER, "ZB-H1 needs at least pp_degree = %d micro-batches per step to fill its "
                          "bubble, but a step has %d; raise global_batch_size or lower micro_batch_size", P, M);
    if (kind != LLM4D_PP_INTERLEAVED && V != 1)
        return llm4d_fail(err, LLM4D_EUSER, "virtual_pp_degree %d asks for the interleaved schedule, not %s", V,
                          llm4d_pp_kind_name(kind));
    return LLM4D_OK;
}

/* ---- the compute order ---- */

typedef struct {
    llm4d_pp_action *a;
    int n, cap;
} list;

static int push(list *l, int op, int chunk, int mb) {
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 64;
        llm4d_pp_action *na = realloc(l->a, (size_t)cap * sizeof *na);
        if (!na) return 0;
        l->a = na;
        l->cap = cap;
    }
    l->a[l->n++] = (llm4d_pp_action){(uint8_t)op, (uint8_t)chunk, mb};
    return 1;
}

/* Megatron's interleaved order: the k-th forward (backward) of a stage. */
static void interleaved_at(int k, int P, int V, int backward, int *chunk, int *mb) {
    const int c = (k / P) % V;
    *chunk = backward ? V - 1 - c : c;
    *mb = (k / (P * V)) * P + k % P;
}

static int compute_order(list *l, llm4d_pp_kind kind, int P, int V, int M, int s) {
    int ok = 1;
    if (kind == LLM4D_PP_FORWARD) {
        for (int mb = 0; mb < M; mb++)
            for (int c = 0; c < V; c++) ok &= push(l, LLM4D_PP_F, c, mb);
        return ok;
    }
    if (kind == LLM4D_PP_INTERLEAVED) {
        const int total = M * V;
        int w = (P - s - 1) * 2 + (V - 1) * P;
        if (w > total) w = total;
        int c, mb;
        for (int k = 0; k < w; k++) interleaved_at(k, P, V, 0, &c, &mb), ok &= push(l, LLM4D_PP_F, c, mb);
        for (int i = 0; i < total - w; i++) {
            interleaved_at(w + i, P, V, 0, &c, &mb), ok &= push(l, LLM4D_PP_F, c, mb);
            interleaved_at(i, P, V, 1, &c, &mb), ok &= push(l, LLM4D_PP_B, c, mb);
        }
        for (int i = total - w; i < total; i++) interleaved_at(i, P, V, 1, &c, &mb), ok &= push(l, LLM4D_PP_B, c, mb);
        return ok;
    }
    /* 1F1B's forward/backward order; ZB-H1 adds W(j) after B(j + s) and the rest at the end */
    const int w = P - s - 1 < M ? P - s - 1 : M, delay = s;
    int nb = 0, nw = 0;
    for (int k = 0; k < w; k++) ok &= push(l, LLM4D_PP_F, 0, k);
    for (int i = 0; i < M; i++) {
        if (i < M - w) ok &= push(l, LLM4D_PP_F, 0, w + i);
        ok &= push(l, LLM4D_PP_B, 0, i);
        nb++;
        while (kind == LLM4D_PP_ZBH1 && nw < nb - delay) ok &= push(l, LLM4D_PP_W, 0, nw++);
    }
    while (kind == LLM4D_PP_ZBH1 && nw < M) ok &= push(l, LLM4D_PP_W, 0, nw++);
    return ok;
}

/* ---- communication ---- */

/* The receive a compute action needs (-1 none) and the send it makes (-1 none), for virtual stage v of VP. */
static int recv_of(const llm4d_pp_action *a, int v, int VP) {
    if (a->op == LLM4D_PP_F && v > 0) return LLM4D_PP_RECV_F;
    if (a->op == LLM4D_PP_B && v < VP - 1) return LLM4D_PP_RECV_B;
    return -1;
}
static int send_of(const llm4d_pp_action *a, int v, int VP) {
    if (a->op == LLM4D_PP_F && v < VP - 1) return LLM4D_PP_SEND_F;
    if (a->op == LLM4D_PP_B && v > 0) return LLM4D_PP_SEND_B;
    return -1;
}

llm4d_code llm4d_pp_schedule_build(llm4d_pp_schedule *s, llm4d_pp_kind kind, int P, int V, int M, int stage,
                                   llm4d_err *err) {
    memset(s, 0, sizeof *s);
    LLM4D_ASSERT(P >= 1 && V >= 1 && stage >= 0 && stage < P && V <= LLM4D_MAX_CHUNKS, "schedule P %d V %d stage %d",
                 P, V, stage);
    if (kind != LLM4D_PP_FORWARD) LLM4D_TRY(llm4d_pp_schedule_fits(kind, P, V, M, err));
    s->kind = kind;
    s->P = P, s->V = V, s->M = M, s->stage = stage;
    s->split = kind == LLM4D_PP_ZBH1;
    list comp = {0}, out = {0};
    int ok = compute_order(&comp, kind, P, V, M, stage);
    const int VP = V * P;
    /* each receive is posted before the compute action preceding the one that needs it */
    for (int k = 0; ok && k < comp.n; k++) {
        const llm4d_pp_action *a = &comp.a[k];
        if (k == 0) {
            const int r = recv_of(a, llm4d_pp_vstage(P, a->chunk, stage), VP);
            if (r >= 0) ok &= push(&out, r, a->chunk, a->mb);
        }
        if (k + 1 < comp.n) {
            const llm4d_pp_action *b = &comp.a[k + 1];
            const int r = recv_of(b, llm4d_pp_vstage(P, b->chunk, stage), VP);
            if (r >= 0) ok &= push(&out, r, b->chunk, b->mb);
        }
        ok &= push(&out, a->op, a->chunk, a->mb);
        const int snd = send_of(a, llm4d_pp_vstage(P, a->chunk, stage), VP);
        if (snd >= 0) ok &= push(&out, snd, a->chunk, a->mb);
    }
    free(comp.a);
    if (!ok) {
        free(out.a);
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory building the pipeline schedule");
    }
    s->a = out.a;
    s->n = out.n;
    /* slots per chunk (alive from F to the end of its backward) and receive buffers per direction */
    int alive[LLM4D_MAX_CHUNKS] = {0}, pending[2] = {0, 0};
    for (int k = 0; k < s->n; k++) {
        const llm4d_pp_action *a = &s->a[k];
        switch (a->op) {
        case LLM4D_PP_F:
            if (++alive[a->chunk] > s->peak[a->chunk]) s->peak[a->chunk] = alive[a->chunk];
            if (llm4d_pp_vstage(P, a->chunk, stage) > 0) pending[0]--;
            break;
        case LLM4D_PP_B:
            if (!s->split) alive[a->chunk]--;
            if (llm4d_pp_vstage(P, a->chunk, stage) < VP - 1) pending[1]--;
            break;
        case LLM4D_PP_W: alive[a->chunk]--; break;
        case LLM4D_PP_RECV_F:
        case LLM4D_PP_RECV_B: {
            const int d = a->op == LLM4D_PP_RECV_B;
            if (++pending[d] > s->recv_depth) s->recv_depth = pending[d];
            break;
        }
        default: break;
        }
    }
    return LLM4D_OK;
}

void llm4d_pp_schedule_free(llm4d_pp_schedule *s) {
    free(s->a);
    memset(s, 0, sizeof *s);
}

void llm4d_pp_action_str(const llm4d_pp_schedule *s, const llm4d_pp_action *a, char *buf, int n) {
    static const char *const names[] = {"F", "B", "W", "RECV_F", "SEND_F", "RECV_B", "SEND_B"};
    if (s->V > 1)
        snprintf(buf, (size_t)n, "%s%d.%d", names[a->op], a->mb, a->chunk);
    else
        snprintf(buf, (size_t)n, "%s%d", names[a->op], a->mb);
}

/* ---- checking a whole pipeline ---- */

/* Counts of (op, virtual stage, micro-batch) in the lists. */
typedef struct {
    int *t;
    int VP, M;
} times;

static int *at(times *x, int op, int v, int mb) { return &x->t[((size_t)op * x->VP + (size_t)v) * x->M + (size_t)mb]; }

llm4d_code llm4d_pp_schedule_check(const llm4d_pp_schedule *st, int P, int *span_out, int *bubble, llm4d_err *err) {
    const int V = st[0].V, M = st[0].M, VP = V * P;
    int *count = calloc((size_t)7 * VP * M, sizeof(int));
    double *work = calloc((size_t)P, sizeof(double));
    if (!count || !work) {
        free(count), free(work);
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory checking the pipeline schedule");
    }
    llm4d_code rc = LLM4D_OK;
    /* every action of every stage appears once, with the right stage and chunk */
    for (int s = 0; s < P && rc == LLM4D_OK; s++) {
        if (st[s].stage != s || st[s].P != P || st[s].V != V || st[s].M != M)
            rc = llm4d_fail(err, LLM4D_EINTERNAL, "schedule %d describes stage %d of %d", s, st[s].stage, st[s].P);
        for (int k = 0; k < st[s].n && rc == LLM4D_OK; k++) {
            const llm4d_pp_action *a = &st[s].a[k];
            if (a->chunk >= V || a->mb < 0 || a->mb >= M) {
                rc = llm4d_fail(err, LLM4D_EINTERNAL, "stage %d action %d: chunk %d, micro-batch %d", s, k, a->chunk,
                                a->mb);
                break;
            }
            (*at(&(times){count, VP, M}, a->op, llm4d_pp_vstage(P, a->chunk, s), a->mb))++;
        }
    }
    const int need_w = st[0].split, fwd = st[0].kind == LLM4D_PP_FORWARD;
    for (int v = 0; v < VP && rc == LLM4D_OK; v++)
        for (int mb = 0; mb < M && rc == LLM4D_OK; mb++) {
            const int want[7] = {1, !fwd, need_w, v > 0, v < VP - 1, !fwd && v < VP - 1, !fwd && v > 0};
            for (int op = 0; op < 7; op++)
                if (*at(&(times){count, VP, M}, op, v, mb) != want[op]) {
                    char what[32];
                    llm4d_pp_action a = {(uint8_t)op, (uint8_t)(v / P), mb};
                    llm4d_pp_action_str(&st[llm4d_pp_stage_of(P, v)], &a, what, sizeof what);
                    rc = llm4d_fail(err, LLM4D_EINTERNAL, "stage %d runs %s %d times, not %d", llm4d_pp_stage_of(P, v),
                                    what,
                                    *at(&(times){count, VP, M}, op, v, mb), want[op]);
                    break;
                }
        }
    /* run it with unit times (schedule_sim.c): every receive met, no deadlock, and the bubble */
    if (rc == LLM4D_OK) {
        double span = 0;
        if (llm4d_pp_schedule_simulate(st, P, NULL, &span, work, err) != LLM4D_OK) rc = err->code;
        if (rc == LLM4D_OK && span_out) *span_out = (int)lround(span);
        for (int s = 0; rc == LLM4D_OK && bubble && s < P; s++) bubble[s] = (int)lround(span - work[s]);
    }
    free(count), free(work);
    return rc;
}
