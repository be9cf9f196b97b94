/* price.c — pricing recorded calls and collectives from a machine profile (see price.h). */
#include "plan/price.h"

#include <math.h>
#include <string.h>

static int is_gemm(int op) {
    return op == LLM4D_RC_LINEAR_FWD || op == LLM4D_RC_LINEAR_BWD || op == LLM4D_RC_ATTN_FWD ||
           op == LLM4D_RC_ATTN_BWD;
}

/* The profile's fallback rate for a call's kind at t threads (0: unknown): GFLOP/s for GEMMs and attention, GB/s
 * for the rest. */
static double fallback_rate(const llm4d_profile *p, int op, int prec, int t) {
    if (t < 1) return 0;
    if (t > LLM4D_PROF_MAXT) t = LLM4D_PROF_MAXT;
    if (op == LLM4D_RC_ATTN_FWD || op == LLM4D_RC_ATTN_BWD)
        return p->attn_gflops[prec][t] > 0 ? p->attn_gflops[prec][t] : p->gemm_gflops[prec][t];
    if (is_gemm(op)) return p->gemm_gflops[prec][t];
    return p->mem_gbps[t];
}

/* How much faster t threads are than t0 for this kind of call: the fallback rates' ratio, else linear in threads
 * for GEMMs and flat for memory-bound work. */
static double thread_speedup(const llm4d_profile *p, int op, int prec, int t0, int t) {
    const double a = fallback_rate(p, op, prec, t0), b = fallback_rate(p, op, prec, t);
    if (a > 0 && b > 0) return b / a;
    return is_gemm(op) ? (double)t / t0 : 1.0;
}

/* The first kernel entry of (op, prec, threads) and one past its last (the table is sorted by them first). */
static void range_of(const llm4d_profile *p, int op, int prec, int threads, int *lo, int *hi) {
    int a = 0, b = p->n_kernels;
    while (a < b) { /* lower bound */
        const int m = (a + b) / 2;
        const llm4d_prof_kernel *k = &p->kernels[m];
        const int less = k->op != op ? k->op < op : k->prec != prec ? k->prec < prec : k->threads < threads;
        if (less) a = m + 1;
        else b = m;
    }
    *lo = a;
    int e = a;
    while (e < p->n_kernels && p->kernels[e].op == op && p->kernels[e].prec == prec && p->kernels[e].threads == threads)
        e++;
    *hi = e;
}

static double total(const double s[LLM4D_WORK_N]) {
    double t = 0;
    for (int k = 0; k < LLM4D_WORK_N; k++) t += s[k];
    return t;
}

/* The first of a call's d[] that is a flag (an activation, which gradients a linear layer computes, whether AdamW
 * zeroes the gradients) rather than a size: calls that differ in one are different kinds of work. */
static int first_flag_of(int op) {
    switch (op) {
    case LLM4D_RC_LINEAR_FWD:
    case LLM4D_RC_LINEAR_BWD: return 3;
    case LLM4D_RC_XENT_FWD:
    case LLM4D_RC_XENT_BWD: return 2;
    case LLM4D_RC_ADAMW: return 1;
    default: return LLM4D_RC_DIMS;
    }
}

/* Log distance between two calls' sizes (a different flag, activation or dropout counts as far). */
static double distance(const llm4d_rc_call *c, const llm4d_prof_kernel *k) {
    double d = (c->drop > 0) != k->drop ? 4.0 : 0.0;
    const int first_flag = first_flag_of(c->op);
    for (int i = 0; i < LLM4D_RC_DIMS; i++) {
        if (i >= first_flag) {
            d += c->d[i] != k->d[i] ? 8.0 : 0.0;
            continue;
        }
        const double a = (double)(c->d[i] > 0 ? c->d[i] : 1), b = (double)(k->d[i] > 0 ? k->d[i] : 1);
        d += fabs(log(a / b));
    }
    return d;
}

static double work_of(const llm4d_rc_call *c) { return is_gemm(c->op) ? llm4d_rc_flops(c) : llm4d_rc_bytes(c); }

static double kernel_work(const llm4d_prof_kernel *k) {
    llm4d_rc_call like = {.op = k->op, .ty = k->ty, .drop = k->drop ? 0.1f : 0.0f};
    memcpy(like.d, k->d, sizeof like.d);
    return work_of(&like);
}

/* Whether measured call k is c's kind: the same element types, dropout and flags (only its sizes differ). */
static int same_kind(const llm4d_rc_call *c, const llm4d_prof_kernel *k) {
    if (k->ty != c->ty || k->drop != (c->drop > 0)) return 0;
    for (int i = first_flag_of(c->op); i < LLM4D_RC_DIMS; i++)
        if (c->d[i] != k->d[i]) return 0;
    return 1;
}

/* A machine profile's price of c (price.h): 0 when its grid holds no call of c's kind. The neighbours on either
 * side of c's work are the nearest in shape (log distance) among those of the kind: a GEMM's rate depends on its
 * shape, not on its work alone, so the nearest shapes carry it; between them the time follows a power of the work
 * (log-log), which holds a kernel's fixed cost at small sizes and its rate at large ones. */
static int grid_price(const llm4d_pricer *pr, const llm4d_rc_call *c, double s[LLM4D_WORK_N]) {
    const llm4d_profile *p = pr->prof;
    const double w = work_of(c);
    if (!(w > 0)) return 0;
    int t = 0, lo = 0, hi = 0;
    for (int dt = 0; dt < LLM4D_PROF_MAXT && !t; dt++)
        for (int sign = -1; sign <= 1 && !t; sign += 2) {
            const int u = pr->threads + sign * dt;
            if (u < 1) continue;
            range_of(p, c->op, pr->prec, u, &lo, &hi);
            for (int i = lo; i < hi && !t; i++)
                if (same_kind(c, &p->kernels[i])) t = u;
        }
    if (!t) return 0;
    range_of(p, c->op, pr->prec, t, &lo, &hi);
    const llm4d_prof_kernel *below = NULL, *above = NULL;
    double d_below = INFINITY, d_above = INFINITY, w_below = 0, w_above = 0;
    for (int i = lo; i < hi; i++) {
        const llm4d_prof_kernel *k = &p->kernels[i];
        const double wk = kernel_work(k);
        if (!same_kind(c, k) || !(wk > 0) || !(total(k->s) > 0)) continue;
        const double d = distance(c, k);
        if (wk <= w && d < d_below) d_below = d, below = k, w_below = wk;
        if (wk >= w && d < d_above) d_above = d, above = k, w_above = wk;
    }
    if (!below && !above) return 0;
    const llm4d_prof_kernel *split;
    double tt;
    if (below && above && w_above > w_below) {
        const double f = log(w / w_below) / log(w_above / w_below);
        tt = exp(log(total(below->s)) * (1 - f) + log(total(above->s)) * f);
        split = f < 0.5 ? below : above;
    } else { /* beyond the grid's work on one side (or at a measured work): scaled by work, its fixed cost kept */
        split = below ? below : above;
        const double wk = below ? w_below : w_above, t0 = total(split->s), fixed = p->kernel_s < t0 ? p->kernel_s : 0;
        tt = fixed + (t0 - fixed) * w / wk;
    }
    if (t != pr->threads) tt /= thread_speedup(p, c->op, pr->prec, t, pr->threads);
    const double t_split = total(split->s);
    for (int i = 0; i < LLM4D_WORK_N; i++) s[i] += split->s[i] / t_split * tt;
    return 1;
}

llm4d_price_how llm4d_price_call(const llm4d_pricer *pr, const llm4d_rc_call *c, double s[LLM4D_WORK_N]) {
    const llm4d_profile *p = pr->prof;
    const llm4d_work kind = llm4d_rc_kind(c);
    const llm4d_prof_kernel *k = llm4d_profile_find(p, c, pr->threads, pr->prec);
    if (k) {
        for (int i = 0; i < LLM4D_WORK_N; i++) s[i] += k->s[i];
        return LLM4D_PRICE_EXACT;
    }
    /* the same call at the nearest thread count measured */
    const llm4d_prof_kernel *best = NULL;
    for (int dt = 1; dt < LLM4D_PROF_MAXT && !best; dt++)
        for (int sign = -1; sign <= 1 && !best; sign += 2) {
            const int t = pr->threads + sign * dt;
            if (t >= 1) best = llm4d_profile_find(p, c, t, pr->prec);
        }
    if (best) {
        const double f = 1.0 / thread_speedup(p, c->op, pr->prec, best->threads, pr->threads);
        for (int i = 0; i < LLM4D_WORK_N; i++) s[i] += best->s[i] * f;
        return LLM4D_PRICE_THREADS;
    }
    if (p->machine && grid_price(pr, c, s)) return LLM4D_PRICE_GRID;
    /* the nearest call of the same method, at its rate */
    int lo, hi;
    range_of(p, c->op, pr->prec, pr->threads, &lo, &hi);
    double best_d = INFINITY;
    for (int i = lo; i < hi; i++) {
        const double d = distance(c, &p->kernels[i]);
        if (d < best_d) best_d = d, best = &p->kernels[i];
    }
    if (best && best_d < 12.0) {
        llm4d_rc_call like = {.op = best->op, .ty = best->ty, .drop = best->drop ? 0.1f : 0.0f};
        memcpy(like.d, best->d, sizeof like.d);
        const double w0 = work_of(&like), w = work_of(c), t0 = total(best->s);
        if (w0 > 0 && t0 > 0) {
            /* the fixed part (a kernel's start) does not scale with the work */
            const double fixed = p->kernel_s < t0 ? p->kernel_s : 0.0, t = fixed + (t0 - fixed) * w / w0;
            for (int i = 0; i < LLM4D_WORK_N; i++) s[i] += best->s[i] / t0 * t;
            return LLM4D_PRICE_NEAREST;
        }
    }
    /* the fallback rates */
    if (llm4d_gemm_shape_price(&p->gemm_shape, c, pr->prec, p->kernel_s, s) > 0) return LLM4D_PRICE_FALLBACK;
    const double rate = fallback_rate(p, c->op, pr->prec, pr->threads);
    const double w = work_of(c);
    double t = p->kernel_s;
    if (rate > 0) t += w / (rate * 1e9);
    else if (w > 0) t += w / (is_gemm(c->op) ? 1e10 : 5e9); /* nothing known: 10 GFLOP/s, 5 GB/s */
    s[kind] += t;
    return LLM4D_PRICE_FALLBACK;
}

double llm4d_coll_ring_bytes(int op, double bytes, int group) {
    if (group <= 1) return 0;
    const double f = (double)(group - 1) / group;
    switch (op) {
    case LLM4D_PROF_AR_SHARED:
    case LLM4D_COMM_OP_ALLREDUCE: return 2 * f * bytes;
    case LLM4D_COMM_OP_REDUCE_SCATTER:
    case LLM4D_COMM_OP_ALLGATHER: return f * bytes;
    default: return bytes;
    }
}

/* Piecewise-linear in bytes between measured sizes; below the first, its time; beyond the last, its last slope. */
static double interp(const double *x, const double *y, int n, double at) {
    if (n == 1 || at <= x[0]) return n == 1 && at > x[0] ? y[0] * at / x[0] : y[0];
    for (int i = 1; i < n; i++)
        if (at <= x[i]) return y[i - 1] + (y[i] - y[i - 1]) * (at - x[i - 1]) / (x[i] - x[i - 1]);
    const double slope = (y[n - 1] - y[n - 2]) / (x[n - 1] - x[n - 2]);
    return y[n - 1] + (slope > 0 ? slope : 0) * (at - x[n - 1]);
}

/* The measured series nearest to (op, group, ranks_on_host, within or across hosts), or NULL. */
static const llm4d_prof_coll *nearest_coll(const llm4d_profile *p, int op, int group, int ranks_on_host, int hosts) {
    const int across = hosts > 1;
    const llm4d_prof_coll *best = NULL;
    double best_d = INFINITY;
    for (int i = 0; i < p->n_colls; i++) {
        const llm4d_prof_coll *c = &p->colls[i];
        if (c->op != op || (c->hosts > 1) != across) continue;
        /* the same group size first, then the ranks on the host nearest to this job's */
        const double d = fabs(log((double)c->group / group)) * 4 + fabs(log((double)c->ranks_on_host / ranks_on_host));
        if (d < best_d) best_d = d, best = c;
    }
    return best;
}

double llm4d_price_coll(const llm4d_profile *p, int op, double bytes, int group, int ranks_on_host, int hosts,
                        double temp[3]) {
    if (temp) temp[0] = temp[1] = temp[2] = 0;
    if (group <= 1 || bytes <= 0) return 0;
    const int across = hosts > 1;
    const llm4d_prof_coll *best = nearest_coll(p, op, group, ranks_on_host, hosts);
    if (!best && op == LLM4D_PROF_AR_SHARED) /* not measured: a plain all-reduce */
        return llm4d_price_coll(p, LLM4D_COMM_OP_ALLREDUCE, bytes, group, ranks_on_host, hosts, temp);
    if (best) {
        /* another group size: its bus bandwidth, scaled by the ring bytes */
        const double scale = best->group == group ? 1.0
                                                  : llm4d_coll_ring_bytes(op, 1.0, group) /
                                                        llm4d_coll_ring_bytes(op, 1.0, best->group);
        if (temp) {
            temp[0] = interp(best->bytes, best->temp_first, best->n, bytes);
            temp[1] = interp(best->bytes, best->temp_other, best->n, bytes);
            temp[2] = interp(best->bytes, best->temp_odd, best->n, bytes);
        }
        return interp(best->bytes, best->seconds, best->n, bytes) * scale;
    }
    return p->coll_latency_s[across] * (group > 1 ? log2((double)group) + 1 : 1) +
           llm4d_coll_ring_bytes(op, bytes, group) / (p->coll_gbps[across] * 1e9);
}

int llm4d_price_fill(const llm4d_profile *p, int threads) {
    const int t = threads > 0 ? threads : 1, cores = p->cores > 0 ? p->cores : 1;
    return cores / t > 0 ? cores / t : 1;
}

double llm4d_price_wait(const llm4d_profile *p, int threads, int ranks_on_host, int group) {
    const int t = threads > 0 ? threads : 1, cores = p->cores > 0 ? p->cores : 1;
    if (group <= 1 || (double)ranks_on_host * t <= cores) return 0;
    /* a rank arriving finds every other member of its group running with the chance that the F - 1 other ranks
     * the cores run beside it (F = cores / threads) include them all, the scheduler picking at random among the
     * R - 1; otherwise it waits for a descheduled one */
    const int F = llm4d_price_fill(p, t), g = group < ranks_on_host ? group : ranks_on_host;
    double together = 1, pair = 1;
    for (int j = 1; j < g; j++) together *= F - j > 0 ? (double)(F - j) / (ranks_on_host - j) : 0;
    if (ranks_on_host > 1) pair = F - 1 > 0 ? (double)(F - 1) / (ranks_on_host - 1) : 0;
    /* measured in pairs at this many ranks (or the nearest count measured): a larger group waits for a
     * descheduled member more often, by the same chance */
    const llm4d_prof_share *m = NULL;
    for (int i = 0; i < p->n_pair_wait; i++) {
        const llm4d_prof_share *w = &p->pair_wait[i];
        if (w->threads == t && (!m || fabs(log((double)w->ranks / ranks_on_host)) <
                                          fabs(log((double)m->ranks / ranks_on_host))))
            m = w;
    }
    if (m && pair < 1) return m->factor[0] * (1 - together) / (1 - pair);
    return p->wait_cpu_s * (1 - together);
}

/* The measured share of (threads, ranks), or NULL. */
static const llm4d_prof_share *share_of(const llm4d_profile *p, int threads, int ranks) {
    for (int i = 0; i < p->n_share; i++)
        if (p->share[i].threads == threads && p->share[i].ranks == ranks) return &p->share[i];
    return NULL;
}

void llm4d_price_share(const llm4d_profile *p, int threads, int active, double slow[LLM4D_WORK_N]) {
    for (int k = 0; k < LLM4D_WORK_N; k++) slow[k] = 1.0;
    if (active < 1 || threads < 1) return;
    const int cores = p->cores > 0 ? p->cores : 1, full = llm4d_price_fill(p, threads);
    const int within = active < full ? active : full;
    /* the share of `within` co-running ranks: measured, else the nearest measured fewer */
    for (int r = within; r >= 2; r--) {
        const llm4d_prof_share *s = share_of(p, threads, r);
        if (!s) continue;
        for (int k = 0; k < LLM4D_WORK_N; k++) slow[k] = s->factor[k] > 0 ? s->factor[k] : 1.0;
        break;
    }
    const double demand = (double)active * threads;
    if (demand <= cores) return;
    /* oversubscribed: the cores are time-sliced among the threads; an OpenMP team whose threads are descheduled
     * waits for its slowest one (the penalty, per extra thread, when a rank has several) */
    const double slice = demand / cores * (threads > 1 ? 1.0 + p->oversub_penalty * (threads - 1) : 1.0);
    for (int k = 0; k < LLM4D_WORK_N; k++) slow[k] *= slice;
}
