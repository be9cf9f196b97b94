/* schedule.c — generating and checking pipeline schedules (see schedule.h). */
#include "parallel/schedule.h"

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

/* Time at which (op, virtual stage, micro-batch) finished; -1 not yet. */
typedef struct {
    int *t;
    int VP, M;
} times;

static int *at(times *x, int op, int v, int mb) { return &x->t[((size_t)op * x->VP + (size_t)v) * x->M + (size_t)mb]; }

typedef struct {
    const llm4d_pp_schedule *st;
    int P, VP;
    times *done;
    int *pos, *busy, *work;
} sim;

/* Whether (op, v, mb) finished by time t. */
static int finished(sim *x, int op, int v, int mb, int t) {
    const int d = *at(x->done, op, v, mb);
    return d >= 0 && d <= t;
}

/* Start the actions of stage s that can start at time t, in order; returns how many. */
static int start_ready(sim *x, int s, int t) {
    const llm4d_pp_schedule *st = &x->st[s];
    int n = 0;
    while (x->busy[s] <= t && x->pos[s] < st->n) {
        const llm4d_pp_action *a = &st->a[x->pos[s]];
        const int v = a->chunk * x->P + s, mb = a->mb, VP = x->VP;
        int ready = 1, cost = 0;
        switch (a->op) {
        case LLM4D_PP_F:
            ready = v == 0 || finished(x, LLM4D_PP_SEND_F, v - 1, mb, t);
            cost = 1;
            break;
        case LLM4D_PP_B:
            ready = finished(x, LLM4D_PP_F, v, mb, t) && (v == VP - 1 || finished(x, LLM4D_PP_SEND_B, v + 1, mb, t));
            cost = st->split ? 1 : 2;
            break;
        case LLM4D_PP_W:
            ready = finished(x, LLM4D_PP_B, v, mb, t);
            cost = 1;
            break;
        case LLM4D_PP_SEND_F: /* a send goes out once the action producing its data is done */
            ready = finished(x, LLM4D_PP_F, v, mb, t);
            break;
        case LLM4D_PP_SEND_B:
            ready = finished(x, LLM4D_PP_B, v, mb, t);
            break;
        default: break; /* posting a receive takes no time */
        }
        if (!ready) break;
        *at(x->done, a->op, v, mb) = t + cost;
        x->busy[s] = t + cost;
        x->work[s] += cost;
        x->pos[s]++;
        n++;
    }
    return n;
}

llm4d_code llm4d_pp_schedule_simulate(const llm4d_pp_schedule *st, int P, const double *cost, double *span,
                                      double *busy, double *idle, llm4d_err *err) {
    const int V = st[0].V, M = st[0].M, VP = V * P;
    const size_t nt = (size_t)7 * VP * M;
    double *t = malloc(nt * sizeof *t), *free_at = calloc((size_t)P, sizeof *free_at);
    int *pos = calloc((size_t)P, sizeof *pos);
    if (!t || !free_at || !pos) {
        free(t), free(free_at), free(pos);
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory simulating the pipeline schedule");
    }
    for (size_t i = 0; i < nt; i++) t[i] = -1; /* when (op, virtual stage, micro-batch) finished; -1: not yet */
#define T_AT(op, v, mb) t[((size_t)(op) * VP + (size_t)(v)) * M + (size_t)(mb)]
    for (int s = 0; s < P; s++) busy[s] = 0;
    int moved = 1, left = 0;
    for (int s = 0; s < P; s++) left += st[s].n;
    while (left > 0 && moved) { /* each pass runs every stage as far as its data is known */
        moved = 0;
        for (int s = 0; s < P; s++)
            for (int go = 1; go && pos[s] < st[s].n;) {
                const llm4d_pp_action *a = &st[s].a[pos[s]];
                const int v = a->chunk * P + s, mb = a->mb;
                double ready = 0, c = -1;
                if (a->op == LLM4D_PP_F) {
                    ready = v > 0 ? T_AT(LLM4D_PP_F, v - 1, mb) : 0;
                    c = cost[3 * s];
                } else if (a->op == LLM4D_PP_B) {
                    const double f = T_AT(LLM4D_PP_F, v, mb), b = v < VP - 1 ? T_AT(LLM4D_PP_B, v + 1, mb) : 0;
                    ready = f < 0 || b < 0 ? -1 : f > b ? f : b;
                    c = cost[3 * s + 1];
                } else if (a->op == LLM4D_PP_W) {
                    ready = T_AT(LLM4D_PP_B, v, mb);
                    c = cost[3 * s + 2];
                } /* else a transfer: free, and it never blocks the sender */
                if (ready < 0) {
                    go = 0; /* its data is not there yet: the other stages first */
                    continue;
                }
                if (c >= 0) {
                    const double start = ready > free_at[s] ? ready : free_at[s];
                    free_at[s] = T_AT(a->op, v, mb) = start + c;
                    busy[s] += c;
                }
                pos[s]++, left--, moved = 1;
            }
    }
#undef T_AT
    llm4d_code rc = LLM4D_OK;
    if (left > 0) rc = llm4d_fail(err, LLM4D_EINTERNAL, "the pipeline schedule deadlocks in simulation");
    *span = 0;
    for (int s = 0; s < P; s++)
        if (free_at[s] > *span) *span = free_at[s];
    for (int s = 0; s < P; s++) idle[s] = *span - busy[s];
    free(t), free(free_at), free(pos);
    return rc;
}

llm4d_code llm4d_pp_schedule_check(const llm4d_pp_schedule *st, int P, int *span_out, int *bubble, llm4d_err *err) {
    const int V = st[0].V, M = st[0].M, VP = V * P;
    times done = {calloc((size_t)7 * VP * M, sizeof(int)), VP, M};
    int *count = calloc((size_t)7 * VP * M, sizeof(int));
    int *pos = calloc((size_t)P, sizeof(int)), *busy = calloc((size_t)P, sizeof(int));
    int *work = calloc((size_t)P, sizeof(int));
    if (!done.t || !count || !pos || !busy || !work) {
        free(done.t), free(count), free(pos), free(busy), free(work);
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory checking the pipeline schedule");
    }
    for (size_t i = 0; i < (size_t)7 * VP * M; i++) done.t[i] = -1;
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
    /* run it: a stage starts its next action when that action's data is there (sends never block) */
    sim x = {st, P, VP, &done, pos, busy, work};
    int t = 0, left = 0;
    for (int s = 0; s < P; s++) left += st[s].n;
    while (rc == LLM4D_OK && left > 0) {
        int started = 0, more;
        do { /* at time t, until nothing more can start (a send may unblock a stage already looked at) */
            more = 0;
            for (int s = 0; s < P; s++) more += start_ready(&x, s, t);
            started += more;
        } while (more);
        left -= started;
        int next = -1; /* the next time a running action ends */
        for (int s = 0; s < P; s++)
            if (pos[s] < st[s].n && busy[s] > t && (next < 0 || busy[s] < next)) next = busy[s];
        if (left > 0 && !started && next < 0) {
            char stuck[512] = "";
            int k = 0;
            for (int s = 0; s < P && k < (int)sizeof stuck - 40; s++)
                if (pos[s] < st[s].n) {
                    char what[32];
                    llm4d_pp_action_str(&st[s], &st[s].a[pos[s]], what, sizeof what);
                    k += snprintf(stuck + k, sizeof stuck - (size_t)k, " stage %d at %s;", s, what);
                }
            rc = llm4d_fail(err, LLM4D_EINTERNAL, "the pipeline schedule deadlocks:%s", stuck);
            break;
        }
        t = next > t ? next : t + 1;
    }
    if (rc == LLM4D_OK) {
        int span = 0;
        for (int s = 0; s < P; s++)
            if (busy[s] > span) span = busy[s];
        if (span_out) *span_out = span;
        for (int s = 0; bubble && s < P; s++) bubble[s] = span - work[s];
    }
    free(done.t), free(count), free(pos), free(busy), free(work);
    return rc;
}
