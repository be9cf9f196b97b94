/* test_plan_bound.c — the search's trace-free bound (plan/bound.h) is below the predicted step time of EVERY valid
 * layout of several searches, so that setting a layout aside by it can never drop one of the K fastest (issue 46,
 * item 5).
 *
 * The oracle is the prediction itself (plan/steptime.c, from each layout's recorded and priced traces), for every
 * layout the search enumerates that passes the configuration's checks, whether or not it fits in memory. The
 * profiles: the published A100 one (bench/profiles/a100_selene.json: fallback rates only, one rank per GPU) and a
 * copy of it with other numbers, made here: fallback GEMM rates that grow with the threads, a kernel's fixed cost,
 * measured linear layers faster than the fallback (at the asked threads and at another count, so that price.c's
 * exact, thread-scaled and nearest-size pricing all take part), shares below and above 1, collective series within
 * and across hosts, partial overlap and a blocking wait's cost, on hosts whose ranks oversubscribe the cores. Each
 * case also checks that no linear layer the traces priced ran faster than the bound's rate (the search's own guard:
 * it searches again without the bound otherwise), and that the bound is not vacuous (its largest ratio to the
 * prediction above a floor). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "plan_case.h"
#include "plan/bound.h"
#include "plan/layout.h"
#include "plan/memplan.h"
#include "plan/search.h"

typedef struct {
    const llm4d_predictor *pr;
    const llm4d_config *base;
    long long global;
    llm4d_config *cfg;
    llm4d_bound bound;
    int valid, checked, over, refused;
    double worst, best_ratio, sum_ratio; /* the largest and smallest... lb / step */
    char worst_name[160];
} walk;

static llm4d_code each(void *u, const llm4d_layout *l, llm4d_err *err) {
    walk *w = u;
    llm4d_pp_plan pp;
    llm4d_err why = {0};
    const llm4d_code rc = llm4d_layout_config(w->base, l, w->global, w->cfg, &pp, &why);
    if (rc != LLM4D_OK) return rc == LLM4D_EUSER ? LLM4D_OK : (*err = why, rc);
    w->valid++;
    llm4d_prediction p = {0};
    double lb = 0;
    llm4d_code prc = llm4d_bound_step(&w->bound, w->pr, w->cfg, &pp, &lb, &why);
    if (prc == LLM4D_OK) prc = llm4d_predict_time(w->pr, w->cfg, &pp, &p, &why);
    llm4d_pp_plan_free(&pp);
    llm4d_prediction_free(&p);
    if (prc == LLM4D_ENOMEM) return *err = why, prc;
    if (prc != LLM4D_OK) { /* a part the model refuses: the search rejects it too */
        w->refused++;
        return LLM4D_OK;
    }
    w->checked++;
    const double r = p.step_s > 0 ? lb / p.step_s : INFINITY;
    if (lb > p.step_s) w->over++;
    if (r > w->worst) {
        w->worst = r;
        llm4d_layout_name(l, w->worst_name, sizeof w->worst_name);
    }
    w->best_ratio = r < w->best_ratio ? r : w->best_ratio;
    w->sum_ratio += r;
    return LLM4D_OK;
}

/* The published profile with other numbers (see the top). */
static void other_numbers(llm4d_profile *p, int threads) {
    for (int prec = 0; prec < 3; prec++)
        for (int t = 1; t <= LLM4D_PROF_MAXT; t++) {
            p->gemm_gflops[prec][t] = (prec ? 90.0 : 40.0) * pow(t, 0.8);
            p->attn_gflops[prec][t] = (prec ? 30.0 : 15.0) * pow(t, 0.7);
            p->mem_gbps[t] = 20.0 * pow(t, 0.5);
        }
    p->gemm_shape.sms = 0; /* priced as a CPU profile is: measured kernels, else the fallback rates */
    p->kernel_s = 2e-5;
    p->cores = 8;
    p->overlap = 0.6;
    p->oversub_penalty = 0.05;
    p->wait_cpu_s = 3e-4;
    p->coll_latency_s[0] = 4e-6, p->coll_latency_s[1] = 3e-5;
    p->coll_gbps[0] = 8, p->coll_gbps[1] = 1.5;
    /* linear layers of gpt2-tiny's shapes (N = B x 32 tokens, C = 64), faster than the fallback: at the asked
     * threads (the nearest size for the cases' larger ones) and at one more (scaled by the threads) */
    for (int prec = 0; prec < 3; prec++)
        for (int k = 0; k < 4; k++) {
            llm4d_prof_kernel m = {.op = k % 2 ? LLM4D_RC_LINEAR_BWD : LLM4D_RC_LINEAR_FWD, .prec = (uint8_t)prec,
                                   .threads = k < 2 ? threads : threads + 1};
            m.d[0] = 64 * (k + 1), m.d[1] = 64, m.d[2] = 192;
            if (m.op == LLM4D_RC_LINEAR_BWD) m.d[4] = 1, m.d[5] = 1;
            llm4d_rc_call c = {.op = m.op};
            memcpy(c.d, m.d, sizeof c.d);
            m.s[LLM4D_WORK_GEMM] = p->kernel_s + llm4d_rc_flops(&c) / (p->gemm_gflops[prec][m.threads] * 1e9 *
                                                                       (1.3 + 0.1 * k));
            llm4d_err e;
            if (llm4d_profile_add_kernel(p, &m, &e) != LLM4D_OK) exit(1);
        }
    llm4d_profile_sort(p);
    const double f[2][6] = {{0.92, 1.1, 1.2, 1.05, 1.0, 0.97}, {1.3, 1.6, 1.8, 1.2, 1.1, 1.4}};
    for (int r = 2; r <= 8; r++) {
        llm4d_prof_share s = {.threads = threads, .ranks = r};
        for (int k = 0; k < LLM4D_WORK_N; k++) s.factor[k] = f[r > 4][k % 6];
        llm4d_profile_add_share(p, &s);
    }
    for (int op = 0; op < 3; op++) { /* all-reduce, reduce-scatter, all-gather: comm.h's first three */
        const int ops[3] = {LLM4D_COMM_OP_ALLREDUCE, LLM4D_COMM_OP_REDUCE_SCATTER, LLM4D_COMM_OP_ALLGATHER};
        for (int g = 2; g <= 6; g += 2)
            for (int across = 0; across < 2; across++) {
                llm4d_prof_coll c = {.op = ops[op], .group = g, .ranks_on_host = 6, .hosts = across ? 2 : 1, .n = 3};
                const double b[3] = {1e3, 1e5, 1e7};
                for (int i = 0; i < 3; i++)
                    c.bytes[i] = b[i], c.seconds[i] = (across ? 3e-5 : 5e-6) * g + b[i] / (across ? 1e9 : 6e9);
                llm4d_err e;
                if (llm4d_profile_add_coll(p, &c, &e) != LLM4D_OK) exit(1);
            }
    }
}

/* floor: the largest lb / step a case must reach (the bound is not vacuous) */
static void run_case(const char *name, const char *prof_path, int other, int threads, double floor, char **argv,
                     int argc) {
    llm4d_err err = {0};
    plan_case c;
    if (!plan_case_open(&c, name, prof_path, argv, argc)) goto out;
    if (other) other_numbers(&c.prof, threads);
    llm4d_config *base = c.base;
    llm4d_stagecost_cache *cache = c.cache;
    const llm4d_cluster cl = {.nodes = base->plan.nodes, .ranks_per_node = base->plan.ranks_per_node,
                              .threads = threads, .memory_per_node = 1e12};
    const llm4d_predictor pr = {.prof = &c.prof, .be = c.be, .cluster = cl, .cache = cache, .step_only = 1};
    walk w = {.pr = &pr, .base = base, .global = base->global_batch_size, .cfg = c.cfg, .best_ratio = INFINITY};
    llm4d_bound_init(&w.bound, &pr, llm4d_memplan_precision(base));
    const int W = cl.nodes * cl.ranks_per_node;
    if (llm4d_layouts_each(base, w.global, W, each, &w, &err) != LLM4D_OK) {
        check(0, "%s: %s", name, err.msg);
        goto out;
    }
    check(w.checked > 100 && w.over == 0,
          "%s: bound <= predicted step on all %d layouts predicted (%d valid, %d refused): %d over; lb/step from "
          "%.3f to %.6f (%s), mean %.3f", name, w.checked, w.valid, w.refused, w.over, w.best_ratio, w.worst,
          w.worst_name, w.checked ? w.sum_ratio / w.checked : 0);
    check(w.worst > floor, "%s: the bound is not vacuous (its largest lb/step %.3f > %.2f)", name, w.worst, floor);
    const double seen = llm4d_stagecost_cache_gemm_rate(cache);
    check(seen > 0 && seen <= w.bound.gemm_rate * (1 + 1e-9),
          "%s: the fastest linear layer priced, %.4g FLOP/s, is no faster than the bound's rate %.4g", name, seen,
          w.bound.gemm_rate);
out:
    plan_case_close(&c);
}

int main(void) {
    const char *src = getenv("SRC_DIR");
    char prof[4096];
    snprintf(prof, sizeof prof, "%s/bench/profiles/a100_selene.json", src ? src : ".");
#define CASE(name, other, threads, floor, ...)                                                                      \
    run_case(name, prof, other, threads, floor, CASE_ARGS(__VA_ARGS__))
    /* gpt2-tiny with a small vocabulary, so that its blocks, not its head, make the step */
    CASE("tiny fp32 2x6 a100", 0, 1, 0.5, "--model_name_or_path", "gpt2-tiny", "--max_seq_len", "32", "-o",
         "Model.num_layers=4", "-o", "Model.vocab_size=512", "--global_batch_size", "24", "--nodes", "2",
         "--ranks_per_node", "6");
    CASE("tiny bf16 2x6 a100", 0, 1, 0.5, "--model_name_or_path", "gpt2-tiny", "--max_seq_len", "32", "-o",
         "Model.num_layers=4", "-o", "Model.vocab_size=512", "--global_batch_size", "24", "--use_amp", "true",
         "--nodes", "2", "--ranks_per_node", "6");
    CASE("h256 fp32 2x6 other numbers, 3 threads a rank", 1, 3, 0.1, "--model_name_or_path", "gpt2-tiny",
         "--max_seq_len", "64", "-o", "Model.num_layers=4", "-o", "Model.hidden_size=256", "-o",
         "Model.vocab_size=512", "--global_batch_size", "24", "--nodes", "2", "--ranks_per_node", "6");
    CASE("h256 bf16 1x8 other numbers, 1 thread a rank", 1, 1, 0.1, "--model_name_or_path", "gpt2-tiny",
         "--max_seq_len", "64", "-o", "Model.num_layers=8", "-o", "Model.hidden_size=256", "-o",
         "Model.vocab_size=512", "--global_batch_size", "16", "--use_amp", "true", "--nodes", "1",
         "--ranks_per_node", "8");
    CASE("gpt3-1.3b bf16 4x8 a100", 0, 1, 0.5, "--model_name_or_path", "gpt3-1.3b", "--max_seq_len", "2048",
         "--global_batch_size", "64", "--use_amp", "true", "--nodes", "4", "--ranks_per_node", "8");
    return check_summary();
}
