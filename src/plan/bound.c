/* bound.c — a trace-free lower bound on a layout's step time (see bound.h). */
#include "plan/bound.h"

#include <math.h>

#include "config/model_shape.h"
#include "plan/layout.h"
#include "plan/memplan.h"

static int is_linear(int op) { return op == LLM4D_RC_LINEAR_FWD || op == LLM4D_RC_LINEAR_BWD; }

/* price.c's fallback GFLOP/s of a linear layer at t threads (0: none) */
static double fallback_gflops(const llm4d_profile *p, int prec, int t) {
    if (t < 1) return 0;
    return p->gemm_gflops[prec][t > LLM4D_PROF_MAXT ? LLM4D_PROF_MAXT : t];
}

double llm4d_bound_gemm_rate(const llm4d_profile *p, int threads, int prec) {
    if (prec < 0 || prec > 2) return INFINITY;
    const double fb = fallback_gflops(p, prec, threads);
    double best = fb > 0 ? fb * 1e9 : 1e10; /* price.c: nothing known is 10 GFLOP/s */
    for (int i = 0; i < p->n_kernels; i++) {
        const llm4d_prof_kernel *k = &p->kernels[i];
        if (!is_linear(k->op) || k->prec != prec) continue;
        llm4d_rc_call c = {.op = k->op, .ty = k->ty};
        for (int j = 0; j < LLM4D_RC_DIMS; j++) c.d[j] = k->d[j];
        const double w = llm4d_rc_flops(&c);
        double t = 0;
        for (int j = 0; j < LLM4D_WORK_N; j++) t += k->s[j];
        if (w <= 0) continue;
        /* at its own threads: exact (t), or another call's size scaled from it without the fixed cost */
        const double fixed = p->kernel_s < t ? p->kernel_s : 0, at_own = t - fixed;
        double r = at_own > 0 ? w / at_own : INFINITY;
        if (k->threads != threads) { /* the same call at these threads: scaled by price.c's thread speedup */
            const double a = fallback_gflops(p, prec, k->threads), b = fallback_gflops(p, prec, threads);
            const double up = a > 0 && b > 0 ? b / a : (double)threads / (k->threads > 0 ? k->threads : 1);
            const double rt = t > 0 ? w / t * up : INFINITY;
            r = rt > r ? rt : r;
        }
        best = r > best ? r : best;
    }
    /* a GPU profile's GEMM time by shape (gemm_shape.h) is never faster than every SM's K loop at its efficiency */
    const llm4d_gemm_shape *g = &p->gemm_shape;
    if (g->sms > 0 && g->peak_gflops[prec] > 0) {
        const double r = g->peak_gflops[prec] * 1e9 * (g->mainloop_eff > 0 ? g->mainloop_eff : 1);
        best = r > best ? r : best;
    }
    return best;
}

void llm4d_bound_init(llm4d_bound *b, const llm4d_predictor *pr, int prec) {
    const int R = pr->cluster.ranks_per_node > 0 ? pr->cluster.ranks_per_node : 1, T = pr->cluster.threads;
    b->prec = prec;
    b->gemm_rate = llm4d_bound_gemm_rate(pr->prof, T, prec);
    /* steptime.c: a stage's slowdown is its kinds' mean of the shares at full occupancy, at least the smallest of
     * them; the simulator's rate at k computing stages is 1 / (that mean x the GEMM share's ratio at k / R of the
     * host's ranks to full) */
    double full[LLM4D_WORK_N], slow[LLM4D_WORK_N];
    llm4d_price_share(pr->prof, T, R, full);
    double least = 1;
    for (int j = 0; j < LLM4D_WORK_N; j++) least = full[j] < least ? full[j] : least;
    double speed = 1 / least;
    for (int active = 1; active <= R; active++) {
        llm4d_price_share(pr->prof, T, active, slow);
        const double s = 1 / (least * slow[LLM4D_WORK_GEMM] / full[LLM4D_WORK_GEMM]);
        speed = s > speed ? s : speed;
    }
    b->speed = speed;
}

llm4d_code llm4d_bound_step(const llm4d_bound *b, const llm4d_predictor *pr, const llm4d_config *cfg,
                            const llm4d_pp_plan *pp, double *lb, llm4d_err *err) {
    const llm4d_dist_config *d = &cfg->dist;
    const int P = d->pp_degree, V = pp->V, mp = d->mp_degree > 0 ? d->mp_degree : 1;
    const int R = pr->cluster.ranks_per_node, rcp = llm4d_recompute_blocks(&cfg->model);
    const double N = (double)cfg->micro_batch_size * cfg->data.max_seq_len, C = cfg->model.hidden_size;
    /* a rank's columns of each linear layer, as the description shapes them (config/model_shape.h): the QKV
     * projection's (NH + 2 NKV) HS / mp outputs (GPT-2: 3 C / mp), the MLP's 2F / mp with SwiGLU */
    const llm4d_model_shape sh = llm4d_model_shape_of(&cfg->model, mp);
    const double QKVl = (double)sh.qkv_l, Cl = (double)sh.attn_l, FCl = (double)sh.fc_l, Fl = (double)sh.f_l;
    /* a block's linear layers forward (qkv, attention's projection, fc, fc's projection: block.c), on every
     * token of the micro-batch; integers below 2^53, so GPT-2's (3 C Cl + Cl C + 2 C Fl) to the bit */
    const double fwd = 2 * N * (C * QKVl + Cl * C + C * FCl + Fl * C);
    const double gemm = (3 + rcp) * fwd / b->gemm_rate;
    /* the tensor-parallel collectives' ranks per host, as stagecost.c prices them */
    const int fill = llm4d_price_fill(pr->prof, pr->cluster.threads);
    const int coll_ranks = P > 1 && R > fill ? fill : R;
    const int op = cfg->model.sequence_parallel ? LLM4D_COMM_OP_REDUCE_SCATTER : LLM4D_COMM_OP_ALLREDUCE;
    const double bytes = N * C * sizeof(float); /* fp32 sums of [N, C], the reduce-scatter's input whole */
    double most = 0;
    for (int s = 0; s < P; s++) {
        int blocks = 0;
        for (int c = 0; c < V; c++) blocks += pp->hi[c * P + s] - pp->lo[c * P + s];
        double tp = 0;
        if (mp > 1 && blocks > 0) { /* two reductions forward, two backward, two more for recompute's forward */
            llm4d_topology topo;
            LLM4D_TRY(llm4d_layout_stage_topo(cfg, s, &topo, err));
            const int hosts = llm4d_group_hosts(&topo, LLM4D_AXIS_MODEL, R);
            tp = (4 + 2 * rcp) * llm4d_price_coll(pr->prof, op, bytes, mp, coll_ranks, hosts, NULL);
        }
        const double w = blocks * (gemm + tp);
        most = w > most ? w : most;
    }
    /* 1e-9 below, for the simulator ending an action within a rounding of its work (steptime.c span_bound) */
    *lb = (double)cfg->accumulate_steps * most / b->speed * (1 - 1e-9);
    return LLM4D_OK;
}
