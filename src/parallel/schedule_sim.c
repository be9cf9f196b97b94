/* schedule_sim.c — running the P action lists of one pipeline in simulated time (schedule.h
 * llm4d_pp_schedule_simulate): what llm4d_pp_schedule_check does with unit times to prove a schedule, and what the
 * planner does with each stage's measured F, B and W to predict a step.
 *
 * A stage walks its list in order. Posting a receive takes no time; a send's data reaches the next stage p2p_s
 * after the action that produced it ends (sends never block the sender, as the executor's are non-blocking). A
 * forward starts when its input has arrived (the first virtual stage: at once), a backward when its forward is done
 * and its output gradient has arrived (the last virtual stage: at once), a weight pass when its backward is done.
 * Stages that compute at the same time may share the machine (ranks oversubscribing a host's cores): with k stages
 * computing, each advances at rate[k] seconds of work per second (processor sharing), so an idle stage's cores go
 * to the others, as they do when a waiting rank sleeps. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "parallel/schedule.h"

typedef struct {
    const llm4d_pp_schedule *st;
    const llm4d_pp_costs *c;
    int P, V, VP, M;
    double *done;    /* [op F, B, W][VP][M]: when the action ended (-1: not yet) */
    double *arrive;  /* [dir F, B][VP][M]: when the send of virtual stage v's output (F) or input gradient (B) arrives */
    int *pos, *running;
    double *left;    /* seconds of work left of the running action */
    double *busy;
} sim;

static double *at3(double *x, const sim *s, int k, int v, int mb) {
    return &x[((size_t)k * s->VP + (size_t)v) * s->M + (size_t)mb];
}

static double cost_of(const sim *s, int stage, int op, int chunk) {
    if (!s->c) return op == LLM4D_PP_B && !s->st[stage].split ? 2.0 : 1.0; /* unit times */
    return s->c->cost[((size_t)stage * 3 + (size_t)op) * s->V + (size_t)chunk];
}

/* The time the data compute action a of stage `stage` waits for arrives (0: needs none; -1: not sent yet), or -2
 * when a local action it depends on has not ended by t. */
static double needs(const sim *s, int stage, const llm4d_pp_action *a, double t) {
    const int v = llm4d_pp_vstage(s->P, a->chunk, stage), mb = a->mb;
    const double *d;
    switch (a->op) {
    case LLM4D_PP_F: return v == 0 ? 0.0 : *at3(s->arrive, s, 0, v - 1, mb);
    case LLM4D_PP_B:
        d = at3(s->done, s, LLM4D_PP_F, v, mb);
        if (*d < 0 || *d > t) return -2;
        return v == s->VP - 1 ? 0.0 : *at3(s->arrive, s, 1, v + 1, mb);
    case LLM4D_PP_W:
        d = at3(s->done, s, LLM4D_PP_B, v, mb);
        return *d < 0 || *d > t ? -2 : 0.0;
    default: return 0.0;
    }
}

/* Start what stage `stage` can start at time t; returns whether anything changed. */
static int advance(sim *s, int stage, double t) {
    const llm4d_pp_schedule *st = &s->st[stage];
    int changed = 0;
    while (!s->running[stage] && s->pos[stage] < st->n) {
        const llm4d_pp_action *a = &st->a[s->pos[stage]];
        const int v = llm4d_pp_vstage(s->P, a->chunk, stage);
        if (a->op == LLM4D_PP_SEND_F || a->op == LLM4D_PP_SEND_B) {
            const int dir = a->op == LLM4D_PP_SEND_B;
            const double *d = at3(s->done, s, dir ? LLM4D_PP_B : LLM4D_PP_F, v, a->mb);
            if (*d < 0 || *d > t) break; /* not produced yet (cannot happen in a well-formed list) */
            *at3(s->arrive, s, dir, v, a->mb) = *d + (s->c ? s->c->p2p_s : 0.0);
        } else if (a->op == LLM4D_PP_F || a->op == LLM4D_PP_B || a->op == LLM4D_PP_W) {
            const double need = needs(s, stage, a, t);
            if (need < 0 || need > t) break;
            s->running[stage] = 1;
            s->left[stage] = cost_of(s, stage, a->op, a->chunk);
            changed = 1;
            break; /* pos moves on when it ends */
        }
        s->pos[stage]++; /* receives are posted at once */
        changed = 1;
    }
    return changed;
}

/* The earliest arrival after t that a waiting stage needs (INFINITY: none known). */
static double next_arrival(const sim *s, double t) {
    double best = INFINITY;
    for (int p = 0; p < s->P; p++) {
        if (s->running[p] || s->pos[p] >= s->st[p].n) continue;
        const llm4d_pp_action *a = &s->st[p].a[s->pos[p]];
        const double need = needs(s, p, a, t);
        if (need > t && need < best) best = need;
    }
    return best;
}

llm4d_code llm4d_pp_schedule_simulate(const llm4d_pp_schedule *st, int P, const llm4d_pp_costs *costs, double *span,
                                      double *busy, llm4d_err *err) {
    return llm4d_pp_schedule_simulate_ends(st, P, costs, span, busy, NULL, err);
}

llm4d_code llm4d_pp_schedule_simulate_ends(const llm4d_pp_schedule *st, int P, const llm4d_pp_costs *costs,
                                           double *span, double *busy, double *end, llm4d_err *err) {
    sim s = {.st = st, .c = costs, .P = P, .V = st[0].V, .M = st[0].M};
    s.VP = s.V * P;
    const size_t n3 = (size_t)3 * s.VP * s.M, n2 = (size_t)2 * s.VP * s.M;
    s.done = malloc(n3 * sizeof *s.done);
    s.arrive = malloc(n2 * sizeof *s.arrive);
    s.pos = calloc((size_t)P, sizeof *s.pos);
    s.running = calloc((size_t)P, sizeof *s.running);
    s.left = calloc((size_t)P, sizeof *s.left);
    s.busy = calloc((size_t)P, sizeof *s.busy);
    llm4d_code rc = LLM4D_OK;
    if (!s.done || !s.arrive || !s.pos || !s.running || !s.left || !s.busy) {
        rc = llm4d_fail(err, LLM4D_ENOMEM, "out of memory simulating the pipeline schedule");
        goto out;
    }
    for (size_t i = 0; i < n3; i++) s.done[i] = -1;
    for (size_t i = 0; i < n2; i++) s.arrive[i] = -1;
    double t = 0;
    for (;;) {
        for (int more = 1; more;) { /* at time t, until nothing more starts (a send may unblock a stage seen before) */
            more = 0;
            for (int p = 0; p < P; p++) more |= advance(&s, p, t);
        }
        int k = 0, left = 0;
        for (int p = 0; p < P; p++) k += s.running[p], left += s.pos[p] < st[p].n;
        if (!left) break;
        const double rate = costs && costs->rate ? costs->rate[k < P ? k : P] : 1.0;
        double next = next_arrival(&s, t);
        for (int p = 0; p < P; p++)
            if (s.running[p] && t + s.left[p] / rate < next) next = t + s.left[p] / rate;
        if (!isfinite(next) || !(rate > 0)) {
            char stuck[512] = "";
            int n = 0;
            for (int p = 0; p < P && n < (int)sizeof stuck - 40; p++)
                if (s.pos[p] < st[p].n) {
                    char what[32];
                    llm4d_pp_action_str(&st[p], &st[p].a[s.pos[p]], what, sizeof what);
                    n += snprintf(stuck + n, sizeof stuck - (size_t)n, " stage %d at %s;", p, what);
                }
            rc = llm4d_fail(err, LLM4D_EINTERNAL, "the pipeline schedule deadlocks:%s", stuck);
            goto out;
        }
        const double dt = next - t;
        for (int p = 0; p < P; p++) {
            if (!s.running[p]) continue;
            s.busy[p] += dt;
            s.left[p] -= dt * rate;
            /* ended: nothing left, or less than the clock can still tell apart at `next` (long steps: at
             * t ~ 1e4 s a remainder below one ulp would give dt = 0 for ever) */
            if (s.left[p] > 1e-12 * (1 + dt) && next + s.left[p] / rate > next) continue;
            const llm4d_pp_action *a = &st[p].a[s.pos[p]];
            *at3(s.done, &s, a->op, llm4d_pp_vstage(P, a->chunk, p), a->mb) = next;
            if (end) end[p] = next;
            s.running[p] = 0;
            s.pos[p]++;
        }
        t = next;
    }
    if (span) *span = t;
    for (int p = 0; busy && p < P; p++) busy[p] = s.busy[p];
out:
    free(s.done), free(s.arrive), free(s.pos), free(s.running), free(s.left), free(s.busy);
    return rc;
}
