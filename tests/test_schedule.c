/* test_schedule.c — the pipeline schedule generator (parallel/schedule.h) without a model.
 *
 *  - the compute order of each stage against tables worked out by hand from the schedules' definitions (1F1B,
 *    Megatron's interleaved order, ZB-H1's W of micro-batch j after B of j + stage), and one stage's whole list
 *    with its receives (one compute action ahead) and sends (right after);
 *  - for many (P, V, M), every stage's list run together by the checker: every action once, every send met by its
 *    receive, no deadlock;
 *  - the micro-batches alive at once per stage: 1F1B at most P - s (and reached), ZB-H1 at most P, interleaved at
 *    most Megatron's warm-up + 1 per stage;
 *  - the bubble of the simulated step in unit times: 1F1B 3 (P - 1) per stage, ZB-H1 P - 1 (a third), interleaved
 *    3 (P - 1) units of a V-times finer action (a V-th of 1F1B's share);
 *  - the simulation with measured durations: at unit times the checker's span and bubbles, and a hand count with a
 *    slow last stage;
 *  - the split balanced by cost (parallel/pp_balance.h): a stage's blocks sum to the layers, every stage between the
 *    first and the last holds one, its slowest stage costs what the best of every such split's does (brute force),
 *    no head gives the even split, and GPT-2's head (about five blocks) moves blocks off the last stage; the split
 *    itself is the one the first implementation chose (every candidate's costs sorted in full, the least sorted list
 *    first found wins; kept here as the oracle), up to 98 virtual stages of GPT-3 175B's costs;
 *  - the checker itself fails on a deadlocking order and on a missing send (negative controls);
 *  - bad micro-batch counts are refused with the rule in the message. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "parallel/pp_balance.h"
#include "parallel/schedule.h"

static int cmp_desc(const void *a, const void *b) {
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* pp_balance's first implementation: every split with j blocks first, k last and the rest even in between, its
 * stage costs sorted from the largest down, the lexicographically least first found kept. n: VP counts. */
static void balance_ref(const llm4d_pp_split_costs *c, int L, int VP, int *n) {
    int64_t best[128], cur[128];
    int cand[128], have = 0;
    const int mid = VP - 2;
    if (VP == 1) {
        n[0] = L;
        return;
    }
    for (int j = 0; j <= L; j++)
        for (int k = 0; j + k <= L; k++) {
            const int rest = L - j - k;
            if ((mid == 0 && rest != 0) || rest < mid) continue;
            cand[0] = j, cand[VP - 1] = k;
            for (int v = 1; v <= mid; v++) cand[v] = rest / mid + (v - 1 < rest % mid);
            for (int v = 0; v < VP; v++) cur[v] = llm4d_pp_stage_cost(c, v, VP, cand[v]);
            qsort(cur, (size_t)VP, sizeof *cur, cmp_desc);
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
    if (!have)
        for (int v = 0; v < VP; v++) n[v] = L / VP + (v < L % VP);
}

/* The least cost of the slowest virtual stage over every split of L blocks into VP stages whose stages between the
 * first and the last hold a block (n: the counts tried so far, v: the stage to fill). */
static int64_t best_max(const llm4d_pp_split_costs *c, int L, int VP, int v, int left, int64_t worst) {
    if (v == VP - 1) {
        const int64_t x = llm4d_pp_stage_cost(c, v, VP, left);
        return x > worst ? x : worst;
    }
    int64_t best = INT64_MAX;
    for (int k = (v == 0 ? 0 : 1); k <= left; k++) {
        const int64_t x = llm4d_pp_stage_cost(c, v, VP, k);
        const int64_t m = best_max(c, L, VP, v + 1, left - k, x > worst ? x : worst);
        if (m < best) best = m;
    }
    return best;
}

/* The compute actions of a list as text: "F0 F1 B0 ..." (with ".chunk" when V > 1). */
static void compute_str(const llm4d_pp_schedule *s, char *buf, size_t n) {
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < s->n && k + 16 < n; i++) {
        if (s->a[i].op > LLM4D_PP_W) continue;
        char a[32];
        llm4d_pp_action_str(s, &s->a[i], a, sizeof a);
        k += (size_t)snprintf(buf + k, n - k, "%s%s", k ? " " : "", a);
    }
}

static void all_str(const llm4d_pp_schedule *s, char *buf, size_t n) {
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < s->n && k + 16 < n; i++) {
        char a[32];
        llm4d_pp_action_str(s, &s->a[i], a, sizeof a);
        k += (size_t)snprintf(buf + k, n - k, "%s%s", k ? " " : "", a);
    }
}

static void expect_order(llm4d_pp_kind kind, int P, int V, int M, int stage, const char *want) {
    llm4d_pp_schedule s;
    llm4d_err err = {0};
    char got[1024] = "";
    if (llm4d_pp_schedule_build(&s, kind, P, V, M, stage, &err) == LLM4D_OK) {
        compute_str(&s, got, sizeof got);
        llm4d_pp_schedule_free(&s);
    }
    check(!strcmp(got, want), "%s P=%d V=%d M=%d stage %d: %s%s%s", llm4d_pp_kind_name(kind), P, V, M, stage, got,
          strcmp(got, want) ? " (want " : "", strcmp(got, want) ? want : "");
    if (strcmp(got, want)) printf("#   want: %s\n", want);
}

/* Build every stage, check the pipeline, return the bubble of each stage (bubble NULL: not needed). */
static int check_pipeline(llm4d_pp_kind kind, int P, int V, int M, int *span, int *bubble, int *peak_ok) {
    llm4d_pp_schedule *st = calloc((size_t)P, sizeof *st);
    llm4d_err err = {0};
    int ok = 1;
    for (int s = 0; s < P && ok; s++) ok = llm4d_pp_schedule_build(&st[s], kind, P, V, M, s, &err) == LLM4D_OK;
    if (ok) ok = llm4d_pp_schedule_check(st, P, span, bubble, &err) == LLM4D_OK;
    if (!ok) printf("#   %s P=%d V=%d M=%d: %s\n", llm4d_pp_kind_name(kind), P, V, M, err.msg);
    *peak_ok = 1;
    for (int s = 0; s < P && ok; s++) {
        int total = 0, bound;
        for (int c = 0; c < V; c++) total += st[s].peak[c];
        if (kind == LLM4D_PP_1F1B)
            bound = P - s < M ? P - s : M;
        else if (kind == LLM4D_PP_ZBH1)
            bound = P < M ? P : M;
        else
            bound = (P - s - 1) * 2 + (V - 1) * P + 1 < M * V ? (P - s - 1) * 2 + (V - 1) * P + 1 : M * V;
        /* 1F1B reaches its bound exactly; the interleaved per-chunk peaks may sum above the bound only if they are
         * reached at different times, so check the total alive at once instead (recomputed here) */
        int alive = 0, most = 0;
        for (int k = 0; k < st[s].n; k++) {
            const llm4d_pp_action *a = &st[s].a[k];
            if (a->op == LLM4D_PP_F) alive++;
            if ((a->op == LLM4D_PP_B && !st[s].split) || a->op == LLM4D_PP_W) alive--;
            if (alive > most) most = alive;
        }
        if (most > bound || (kind == LLM4D_PP_1F1B && most != bound)) {
            printf("#   %s P=%d V=%d M=%d stage %d: %d micro-batches alive at once, bound %d (per chunk sum %d)\n",
                   llm4d_pp_kind_name(kind), P, V, M, s, most, bound, total);
            *peak_ok = 0;
        }
    }
    for (int s = 0; s < P; s++) llm4d_pp_schedule_free(&st[s]);
    free(st);
    return ok;
}

int main(void) {
    /* ---- worked tables ---- */
    expect_order(LLM4D_PP_1F1B, 2, 1, 4, 0, "F0 F1 B0 F2 B1 F3 B2 B3");
    expect_order(LLM4D_PP_1F1B, 2, 1, 4, 1, "F0 B0 F1 B1 F2 B2 F3 B3");
    expect_order(LLM4D_PP_1F1B, 4, 1, 6, 0, "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5");
    expect_order(LLM4D_PP_1F1B, 4, 1, 6, 2, "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 B5");
    expect_order(LLM4D_PP_1F1B, 4, 1, 2, 0, "F0 F1 B0 B1"); /* fewer micro-batches than stages */
    /* Megatron's interleaved order, P=2 V=2 M=4 (F<mb>.<chunk>): stage 0 warms up with (2-0-1)*2 + (2-1)*2 = 4 */
    expect_order(LLM4D_PP_INTERLEAVED, 2, 2, 4, 0,
                 "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0");
    expect_order(LLM4D_PP_INTERLEAVED, 2, 2, 4, 1,
                 "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0");
    /* ZB-H1: 1F1B's F/B order, W of micro-batch j after B of j + stage */
    expect_order(LLM4D_PP_ZBH1, 2, 1, 4, 0, "F0 F1 B0 W0 F2 B1 W1 F3 B2 W2 B3 W3");
    expect_order(LLM4D_PP_ZBH1, 2, 1, 4, 1, "F0 B0 F1 B1 W0 F2 B2 W1 F3 B3 W2 W3");
    expect_order(LLM4D_PP_ZBH1, 3, 1, 4, 2, "F0 B0 F1 B1 F2 B2 W0 F3 B3 W1 W2 W3");
    expect_order(LLM4D_PP_FORWARD, 2, 2, 2, 0, "F0.0 F0.1 F1.0 F1.1");
    {   /* the whole list of 1F1B's stage 0 at P=2 M=4: each receive one compute action ahead, sends right after */
        llm4d_pp_schedule s;
        llm4d_err err = {0};
        char got[1024] = "";
        if (llm4d_pp_schedule_build(&s, LLM4D_PP_1F1B, 2, 1, 4, 0, &err) == LLM4D_OK) all_str(&s, got, sizeof got);
        const char *want = "F0 SEND_F0 RECV_B0 F1 SEND_F1 B0 RECV_B1 F2 SEND_F2 B1 RECV_B2 F3 SEND_F3 RECV_B3 B2 B3";
        check(!strcmp(got, want), "1F1B P=2 M=4 stage 0 with its transfers: %s", got);
        check(s.recv_depth == 2 && s.peak[0] == 2, "... two receives outstanding at most, two micro-batches alive "
              "(%d, %d)", s.recv_depth, s.peak[0]);
        llm4d_pp_schedule_free(&s);
        if (llm4d_pp_schedule_build(&s, LLM4D_PP_1F1B, 2, 1, 4, 1, &err) == LLM4D_OK) all_str(&s, got, sizeof got);
        want = "RECV_F0 F0 RECV_F1 B0 SEND_B0 F1 RECV_F2 B1 SEND_B1 F2 RECV_F3 B2 SEND_B2 F3 B3 SEND_B3";
        check(!strcmp(got, want), "1F1B P=2 M=4 stage 1 with its transfers: %s", got);
        llm4d_pp_schedule_free(&s);
    }

    /* ---- whole pipelines: complete, matched, deadlock-free, bounded; unit-time bubbles ---- */
    const int Ps[] = {1, 2, 3, 4, 8}, Ms[] = {1, 2, 4, 8, 16};
    int n_ok = 0, n_peak = 0, n = 0;
    for (int a = 0; a < 5; a++)
        for (int b = 0; b < 5; b++) {
            const int P = Ps[a], M = Ms[b];
            int span, bubble[8], pk;
            n++;
            n_ok += check_pipeline(LLM4D_PP_1F1B, P, 1, M, &span, bubble, &pk), n_peak += pk;
            if (M >= P) n++, n_ok += check_pipeline(LLM4D_PP_ZBH1, P, 1, M, &span, bubble, &pk), n_peak += pk;
            for (int V = 2; V <= 3 && P > 1 && M % P == 0; V++)
                n++, n_ok += check_pipeline(LLM4D_PP_INTERLEAVED, P, V, M, &span, bubble, &pk), n_peak += pk;
        }
    check(n_ok == n, "%d of %d pipelines (1F1B, ZB-H1, interleaved V=2,3; P up to 8, M up to 16) complete, every "
          "send met by its receive, no deadlock", n_ok, n);
    check(n_peak == n, "%d of %d within their alive-micro-batch bounds (1F1B exactly P - s, ZB-H1 P, interleaved "
          "Megatron's warm-up + 1)", n_peak, n);
    const struct {
        llm4d_pp_kind kind;
        int P, V, M, bubble;
    } bub[] = {{LLM4D_PP_1F1B, 4, 1, 8, 9},  {LLM4D_PP_1F1B, 4, 1, 16, 9},       {LLM4D_PP_1F1B, 2, 1, 8, 3},
               {LLM4D_PP_ZBH1, 4, 1, 8, 3},  {LLM4D_PP_ZBH1, 4, 1, 16, 3},       {LLM4D_PP_ZBH1, 2, 1, 8, 1},
               {LLM4D_PP_INTERLEAVED, 4, 2, 8, 9}, {LLM4D_PP_INTERLEAVED, 2, 2, 8, 3}};
    for (size_t i = 0; i < sizeof bub / sizeof bub[0]; i++) {
        int span, bubble[8], pk;
        check_pipeline(bub[i].kind, bub[i].P, bub[i].V, bub[i].M, &span, bubble, &pk);
        int all = 1;
        for (int s = 0; s < bub[i].P; s++) all &= bubble[s] == bub[i].bubble;
        const int work = 3 * bub[i].M * bub[i].V;
        check(all, "%s P=%d V=%d M=%d: bubble %d units per stage (want %d) of a %d-unit step: %.3f of the work "
              "(theory (P-1)/(V M)%s = %.3f)", llm4d_pp_kind_name(bub[i].kind), bub[i].P, bub[i].V, bub[i].M,
              bubble[0], bub[i].bubble, span, (double)bubble[0] / work,
              bub[i].kind == LLM4D_PP_ZBH1 ? " / 3" : "",
              (double)(bub[i].P - 1) / (bub[i].V * bub[i].M) / (bub[i].kind == LLM4D_PP_ZBH1 ? 3 : 1));
    }

    /* ---- the simulation with measured durations: at unit times it is the checker's; with the head on the last
     * stage (its forward 3 x a block stage's) 1F1B's stage 0 waits what a hand count gives ---- */
    {
        int agree = 1;
        const llm4d_pp_kind kinds[3] = {LLM4D_PP_1F1B, LLM4D_PP_INTERLEAVED, LLM4D_PP_ZBH1};
        for (int ki = 0; ki < 3; ki++)
            for (int P = 2; P <= 4; P += 2)
                for (int M = 4; M <= 8; M += 4) {
                    const int V = kinds[ki] == LLM4D_PP_INTERLEAVED ? 2 : 1;
                    llm4d_pp_schedule st[4];
                    llm4d_err err = {0};
                    for (int s = 0; s < P; s++) llm4d_pp_schedule_build(&st[s], kinds[ki], P, V, M, s, &err);
                    double cost[24], span, busy[4];
                    for (int s = 0; s < P; s++)
                        for (int c = 0; c < V; c++)
                            cost[(3 * s) * V + c] = 1, cost[(3 * s + 1) * V + c] = st[s].split ? 1 : 2,
                                           cost[(3 * s + 2) * V + c] = 1;
                    const llm4d_pp_costs costs = {cost, 0.0, NULL};
                    int ispan, bubble[4];
                    agree &= llm4d_pp_schedule_check(st, P, &ispan, bubble, &err) == LLM4D_OK &&
                             llm4d_pp_schedule_simulate(st, P, &costs, &span, busy, &err) == LLM4D_OK &&
                             span == ispan;
                    for (int s = 0; s < P; s++) agree &= span - busy[s] == bubble[s];
                    for (int s = 0; s < P; s++) llm4d_pp_schedule_free(&st[s]);
                }
        check(agree, "simulation at unit durations = the checker's span and bubbles (1F1B, interleaved, ZB-H1; P 2, 4; "
                     "M 4, 8)");
        /* 1F1B, P = 2, M = 4, stage 0: F = 1, B = 2; stage 1: F = 3, B = 2. Stage 1 runs F0 at 1..4, then
         * B0 F1 B1 F2 B2 F3 B3 back to back (every input is there in time) until 21; stage 0's last backward needs
         * stage 1's B3: 21..23. Span 23; stage 0 busy 12, idle 11; stage 1 busy 20, idle 3 */
        llm4d_pp_schedule st[2];
        llm4d_err err = {0};
        for (int s = 0; s < 2; s++) llm4d_pp_schedule_build(&st[s], LLM4D_PP_1F1B, 2, 1, 4, s, &err);
        const double cost[6] = {1, 2, 0, 3, 2, 0};
        const llm4d_pp_costs costs = {cost, 0.0, NULL};
        double span = 0, busy[2] = {0, 0}, idle[2] = {0, 0}, end[2] = {0, 0};
        if (llm4d_pp_schedule_simulate_ends(st, 2, &costs, &span, busy, end, &err) == LLM4D_OK)
            for (int s = 0; s < 2; s++) idle[s] = span - busy[s];
        check(span == 23 && idle[0] == 11 && idle[1] == 3, "1F1B with a slow last stage: span %g (want 23), idle %g, "
              "%g (want 11, 3)", span, idle[0], idle[1]);
        /* inside its own schedule stage 1 waits only for the first forward (0..1): it is done at 21 */
        check(end[0] == 23 && end[1] == 21, "1F1B with a slow last stage: the stages' last actions end at %g, %g "
              "(want 23, 21)", end[0], end[1]);
        for (int s = 0; s < 2; s++) llm4d_pp_schedule_free(&st[s]);
    }

    /* ---- the split balanced by cost ---- */
    {
        int ok = 1, n[8];
        char why[200] = "";
        const int64_t heads[3] = {0, 50, 400};
        for (int hi = 0; hi < 3; hi++)
            for (int VP = 1; VP <= 6; VP++)
                for (int L = VP > 2 ? VP - 2 : 0; L <= 13; L++) {
                    const llm4d_pp_split_costs c = {.block = 10, .embedding = 3, .head = heads[hi]};
                    llm4d_pp_balance(&c, L, VP, n);
                    int sum = 0;
                    int64_t worst = 0;
                    for (int v = 0; v < VP; v++) {
                        sum += n[v];
                        if (n[v] < (v > 0 && v < VP - 1)) ok = 0;
                        const int64_t x = llm4d_pp_stage_cost(&c, v, VP, n[v]);
                        if (x > worst) worst = x;
                    }
                    const int64_t want = best_max(&c, L, VP, 0, L, 0);
                    if ((sum != L || worst != want) && !why[0])
                        snprintf(why, sizeof why, " (head %lld, L %d, VP %d: sum %d, slowest %lld, best %lld)",
                                 (long long)heads[hi], L, VP, sum, (long long)worst, (long long)want);
                    ok &= sum == L && worst == want;
                }
        check(ok, "balanced split: all blocks once, a block on every middle stage, the slowest stage as cheap as the "
              "best split's (brute force; head 0, 5, 40 blocks, 1-6 virtual stages, up to 13 blocks)%s", why);
        const llm4d_pp_split_costs none = {.block = 10}, gpt2 = {.block = 482, .embedding = 2, .head = 2398};
        llm4d_pp_balance(&none, 12, 4, n);
        check(n[0] == 3 && n[1] == 3 && n[2] == 3 && n[3] == 3, "no head nor embedding: the even split 3,3,3,3 (got "
              "%d,%d,%d,%d)", n[0], n[1], n[2], n[3]);
        llm4d_pp_balance(&gpt2, 12, 2, n);
        check(n[0] == 8 && n[1] == 4, "GPT-2 124M at sequence 256 (head about 5 blocks), pp2: 8,4 (got %d,%d)", n[0],
              n[1]);
        /* the same split as the first implementation's, ties included: small grids of every head and embedding,
         * and GPT-3 175B's costs (llm4d_pp_costs_of at sequence 2048, mp 8, recompute) over 96 blocks */
        const llm4d_pp_split_costs grid[] = {{.block = 10}, {.block = 10, .embedding = 3, .head = 50},
                                             {.block = 10, .embedding = 30, .head = 400}, {.block = 7, .embedding = 7, .head = 7},
                                             {.block = 482, .embedding = 2, .head = 2398},
                                             {.block = 237780025344, .embedding = 344064, .head = 3705438208}};
        int same = 1, got[128], want[128];
        char diff[160] = "";
        for (size_t g = 0; g < sizeof grid / sizeof *grid; g++)
            for (int VP = 1; VP <= (g + 1 < sizeof grid / sizeof *grid ? 14 : 98); VP++)
                for (int L = VP > 2 ? VP - 2 : 0; L <= (g + 1 < sizeof grid / sizeof *grid ? 30 : 96); L++) {
                    if (g + 1 == sizeof grid / sizeof *grid && L != 96) continue;
                    llm4d_pp_balance(&grid[g], L, VP, got);
                    balance_ref(&grid[g], L, VP, want);
                    for (int v = 0; v < VP; v++)
                        if (got[v] != want[v]) {
                            if (same)
                                snprintf(diff, sizeof diff, " (costs %zu, L %d, VP %d: stage %d holds %d, the first "
                                         "implementation %d)", g, L, VP, v, got[v], want[v]);
                            same = 0;
                            break;
                        }
                }
        check(same, "balanced split: the first implementation's split (sorted costs compared in full) on every grid "
              "case and GPT-3 175B over 1 to 98 virtual stages%s", diff);
    }

    /* ---- the checker can fail ---- */
    {
        llm4d_pp_schedule st[2];
        llm4d_err err = {0};
        llm4d_pp_schedule_build(&st[0], LLM4D_PP_1F1B, 2, 1, 4, 0, &err);
        llm4d_pp_schedule_build(&st[1], LLM4D_PP_1F1B, 2, 1, 4, 1, &err);
        /* stage 0 waits for B0's gradient before it has sent F0's activation: a cycle */
        llm4d_pp_action tmp = st[0].a[0];
        /* F0 SEND_F0 RECV_B0 F1 SEND_F1 B0 -> SEND_F0 RECV_B0 F1 SEND_F1 B0 F0: F0's send and B0 before F0 */
        memmove(st[0].a, st[0].a + 1, 5 * sizeof tmp);
        st[0].a[5] = tmp;
        llm4d_code rc = llm4d_pp_schedule_check(st, 2, NULL, NULL, &err);
        check(rc != LLM4D_OK && strstr(err.msg, "deadlock"), "negative control: an order waiting on itself is "
              "reported as a deadlock (%s)", rc ? err.msg : "accepted");
        llm4d_pp_schedule_free(&st[0]);
        llm4d_pp_schedule_build(&st[0], LLM4D_PP_1F1B, 2, 1, 4, 0, &err);
        st[0].a[1] = st[0].a[0]; /* SEND_F0 replaced: F0 twice, no send of micro-batch 0 */
        rc = llm4d_pp_schedule_check(st, 2, NULL, NULL, &err);
        check(rc != LLM4D_OK && strstr(err.msg, "times"), "negative control: a lost send is reported (%s)",
              rc ? err.msg : "accepted");
        llm4d_pp_schedule_free(&st[0]);
        llm4d_pp_schedule_free(&st[1]);
    }

    /* ---- micro-batch counts a schedule cannot take ---- */
    llm4d_err err = {0};
    check(llm4d_pp_schedule_fits(LLM4D_PP_INTERLEAVED, 4, 2, 6, &err) == LLM4D_EUSER && strstr(err.msg, "multiple of 4"),
          "interleaved with 6 micro-batches over 4 stages: %s", err.msg);
    check(llm4d_pp_schedule_fits(LLM4D_PP_ZBH1, 4, 1, 3, &err) == LLM4D_EUSER && strstr(err.msg, "at least"),
          "ZB-H1 with 3 micro-batches over 4 stages: %s", err.msg);
    check(llm4d_pp_schedule_fits(LLM4D_PP_1F1B, 4, 1, 1, &err) == LLM4D_OK, "1F1B takes any micro-batch count");
    llm4d_pp_kind k;
    check(llm4d_pp_kind_parse("gpipe", &k, &err) == LLM4D_EUSER && strstr(err.msg, "1F1B"),
          "an unknown schedule name: %s", err.msg);
    check(llm4d_pp_kind_parse("zb-h1", &k, &err) == LLM4D_OK && k == LLM4D_PP_ZBH1, "schedule names are "
          "case-insensitive");
    return check_summary();
}
