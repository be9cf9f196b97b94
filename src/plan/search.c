/* search.c — enumerating, checking, fitting and ranking layouts (see search.h).
 *
 * The search runs on this machine's threads (OpenMP, Plan.search_threads): the layouts come in blocks of one
 * (mp, pp) pair, a thread takes a block at a time and prices it with memos of its own (traces, memory plans,
 * simulations, splits: a block's layouts share their stages and pipelines, so a thread's memos serve its blocks
 * about as well as one set served them all), and the blocks' candidates are put back in the enumeration's order
 * before they are ranked. Every prediction is a function of its layout alone, whichever memo holds it, so the
 * answer does not depend on the thread count. Only the pruning does: a thread bounds a layout against the K
 * fastest of the blocks it has seen, and a layout pruned there or not is slower than the final K fastest either
 * way. GPT-3 175B on 1024 hosts: 10.3-11.7 s on one thread, 5.6-7.2 s on two (2-vCPU Zen 4 VM; docs/design.md).
 * A thread's layouts borrow their stages' schedules from its memo (plan/schedmemo.h), emptied between blocks: a
 * block's layouts repeat (kind, V, M) across their ZeRO, offload, sequence-parallel and split choices.
 * Once a thread has its K fastest, a layout whose trace-free bound (plan/bound.h) is past the K-th is set aside
 * before its memory plan and traces are made (unless every layout's memory is asked for): two thirds of the valid
 * layouts of the large searches, which were three quarters of their time. */
#include "plan/search.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "parallel/schedule.h"
#include "plan/bound.h"
#include "plan/schedmemo.h"
#include "plan/simmemo.h"
#include "plan/memplan.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static llm4d_code add(llm4d_search *s, const llm4d_candidate *c, llm4d_err *err) {
    if (s->n == s->cap) {
        const int cap = s->cap ? 2 * s->cap : 1024;
        llm4d_candidate *nc = realloc(s->c, (size_t)cap * sizeof *nc);
        if (!nc) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
        s->c = nc, s->cap = cap;
    }
    s->c[s->n++] = *c;
    return LLM4D_OK;
}

void llm4d_search_free(llm4d_search *s) {
    for (int i = 0; i < s->n; i++) free(s->c[i].reason);
    free(s->c);
    memset(s, 0, sizeof *s);
}

static int by_rank(const void *a, const void *b) {
    const llm4d_candidate *x = a, *y = b;
    if (x->status != y->status) return x->status < y->status ? -1 : 1;
    if (x->status == LLM4D_CAND_OK && x->step_s != y->step_s) return x->step_s < y->step_s ? -1 : 1;
    if (x->status == LLM4D_CAND_MEMORY && x->host_bytes != y->host_bytes) return x->host_bytes < y->host_bytes ? -1 : 1;
    return 0;
}

typedef struct {
    llm4d_predictor *pr; /* the caller's, with time_above following the K-th fastest found */
    const llm4d_config *base;
    long long global;
    int reasons;
    llm4d_search *out;
    llm4d_config *cfg; /* scratch: one layout's configuration */
    llm4d_prediction pred;
    int top;           /* the K fastest a search reports (0: no bound) */
    double *best;      /* [top] the fastest step times found, ascending */
    llm4d_pp_balance_memo *balance; /* the balanced splits made (NULL under --no_memo: each computed) */
    llm4d_sched_memo *sched;        /* the stages' schedules built, lent to the layouts (NULL under --no_memo: each
                                     * layout builds its own) */
    int n_best;
    int prebound;      /* set aside a layout whose trace-free bound is past the K-th fastest before judging its
                        * memory (not when every layout's memory is asked for: --explain, --no_memo) */
    llm4d_bound bound; /* made at the first layout (bound_prec: its precision; -1: not yet) */
    int bound_prec;
} ctx;

/* A fitting layout's time among the K fastest: once there are K, a layout bound to be slower than the K-th is not
 * simulated (its bound ranks it below them). */
static void keep_best(ctx *x, double t) {
    if (x->top <= 0 || (x->n_best == x->top && t >= x->best[x->n_best - 1])) return;
    int i = x->n_best < x->top ? x->n_best++ : x->n_best - 1;
    for (; i > 0 && x->best[i - 1] > t; i--) x->best[i] = x->best[i - 1];
    x->best[i] = t;
    if (x->n_best == x->top) x->pr->time_above = x->best[x->top - 1];
}

/* Check, fit and time one layout. */
static llm4d_code consider(ctx *x, const llm4d_layout *l, llm4d_err *err) {
    llm4d_candidate c = {.layout = *l, .status = LLM4D_CAND_OK};
    llm4d_pp_plan pp;
    llm4d_err why = {0};
    const llm4d_code rc = llm4d_layout_config_memo(x->base, l, x->global, x->cfg, &pp, x->balance, &why);
    if (rc != LLM4D_OK) {
        if (rc != LLM4D_EUSER) return *err = why, rc;
        c.status = LLM4D_CAND_INVALID;
        if (x->reasons) c.reason = strdup(why.msg);
        return add(x->out, &c, err);
    }
    x->out->n_valid++;
    if (x->prebound && x->top > 0 && x->n_best == x->top) {
        const int prec = llm4d_memplan_precision(x->cfg);
        if (x->bound_prec != prec) llm4d_bound_init(&x->bound, x->pr, prec), x->bound_prec = prec;
        double lb = 0;
        const llm4d_code brc = llm4d_bound_step(&x->bound, x->pr, x->cfg, &pp, &lb, &why);
        if (brc != LLM4D_OK) {
            llm4d_pp_plan_free(&pp);
            return *err = why, brc;
        }
        if (lb > x->best[x->top - 1]) { /* slower than the K fastest whether it fits or not */
            llm4d_pp_plan_free(&pp);
            c.status = LLM4D_CAND_BOUND, c.step_s = lb;
            x->out->n_bound++;
            return add(x->out, &c, err);
        }
    }
    /* every stage's schedule built once for the block's layouts that share it, not once per use (every shortcut
     * off: built per use) */
    if (!x->pr->exhaustive && llm4d_sched_memo_lend(x->sched, &pp, &why) != LLM4D_OK) {
        llm4d_pp_plan_free(&pp);
        return *err = why, LLM4D_ENOMEM;
    }
    llm4d_code prc = llm4d_predict_memory(x->pr, x->cfg, &pp, &x->pred, &why);
    if (prc == LLM4D_OK) {
        c.peak_bytes = x->pred.peak_bytes, c.host_bytes = x->pred.host_bytes;
        /* a bound prediction is over the limit its bound crossed (the thresholds are the cluster's: verb_plan.c) */
        const int over = llm4d_prediction_over(&x->pred, &x->pr->cluster);
        if (x->pred.bound || over) {
            c.status = LLM4D_CAND_MEMORY;
            if (x->reasons) {
                char why_over[512];
                llm4d_prediction_over_text(&x->pred, &x->pr->cluster, over, why_over, sizeof why_over);
                c.reason = strdup(why_over);
            }
        } else {
            prc = llm4d_predict_time(x->pr, x->cfg, &pp, &x->pred, &why);
            c.step_s = x->pred.step_s;
            if (prc == LLM4D_OK) x->out->n_fit++;
            if (prc == LLM4D_OK && !x->pred.bound_time) keep_best(x, c.step_s);
        }
    }
    llm4d_sched_memo_return(x->sched, &pp);
    llm4d_pp_plan_free(&pp);
    if (prc != LLM4D_OK) { /* a layout the model's own code refuses (a part it cannot build) is rejected, not fatal */
        if (prc == LLM4D_ENOMEM) return *err = why, prc;
        c.status = LLM4D_CAND_ERROR;
        if (x->reasons) c.reason = strdup(why.msg);
    }
    return add(x->out, &c, err);
}

/* The pipeline choices of a layout with pp stages of num_layers blocks. */
static llm4d_code pipelines(const llm4d_config *base, llm4d_layout *l, llm4d_layout_fn fn, void *u, llm4d_err *err) {
    if (l->pp == 1) {
        l->vpp = 1, l->schedule = LLM4D_PP_1F1B, l->split = LLM4D_SPLIT_EVEN;
        return fn(u, l, err);
    }
    const int L = base->model.num_layers > 0 ? base->model.num_layers : 1;
    const int given = base->dist.pp_layers[0] != 0;
    for (int split = 0; split < 3; split++) {
        if (split == LLM4D_SPLIT_GIVEN && !given) continue;
        l->split = split;
        l->vpp = 1;
        l->schedule = LLM4D_PP_1F1B;
        LLM4D_TRY(fn(u, l, err));
        l->schedule = LLM4D_PP_ZBH1;
        LLM4D_TRY(fn(u, l, err));
        l->schedule = LLM4D_PP_INTERLEAVED;
        for (int v = 2; v <= 8 && l->pp * v <= L + 2; v++) {
            l->vpp = v;
            LLM4D_TRY(fn(u, l, err));
        }
    }
    return LLM4D_OK;
}

/* The layouts of one (mp, pp) pair, in the search's order. */
static llm4d_code layouts_of_pair(const llm4d_config *base, long long global, int W, int mp, int pp,
                                  llm4d_layout_fn fn, void *u, llm4d_err *err) {
    /* recompute on and off, unless on means nothing: at granularity core_attn nothing runs again (config.h
     * llm4d_recompute_blocks), so the "on" twin is the same work and memory and would list every layout twice */
    llm4d_model_config with = base->model;
    with.use_recompute = 1;
    const int rcp_max = llm4d_recompute_blocks(&with);
    for (int sh = 1; sh <= W / mp / pp; sh++) {
        if ((W / mp / pp) % sh) continue;
        llm4d_layout l = {.dp = W / mp / pp / sh, .sharding = sh, .mp = mp, .pp = pp};
        const long long dps = (long long)l.dp * sh;
        const long long local = global % dps ? 0 : global / dps;
        for (int stage = sh > 1 ? 1 : 0; stage <= (sh > 1 ? 3 : 0); stage++)
            for (int off = 0; off <= (sh > 1); off++)
                for (int sp = 0; sp <= (mp > 1); sp++)
                    for (long long mb = 1; mb <= (local ? local : 1); mb++) {
                        if (local && local % mb) continue;
                        for (int rcp = 0; rcp <= rcp_max; rcp++) {
                            l.stage = stage, l.offload = off, l.sp = sp, l.mb = (int)mb, l.recompute = rcp;
                            LLM4D_TRY(pipelines(base, &l, fn, u, err));
                        }
                    }
    }
    return LLM4D_OK;
}

typedef struct {
    int mp, pp;
} mp_pp;

/* The (mp, pp) pairs of W processes in the search's order (mp, then pp, ascending) into out (NULL: counted). */
static int pairs_walk(int W, mp_pp *out) {
    int n = 0;
    for (int mp = 1; mp <= W; mp++) {
        if (W % mp) continue;
        for (int pp = 1; pp <= W / mp; pp++) {
            if ((W / mp) % pp) continue;
            if (out) out[n] = (mp_pp){mp, pp};
            n++;
        }
    }
    return n;
}

/* Those pairs as a new array of *n (NULL: out of memory): the one list both the walk and the search take. */
static mp_pp *pairs_new(int W, int *n) {
    *n = pairs_walk(W, NULL);
    mp_pp *pair = malloc((size_t)(*n ? *n : 1) * sizeof *pair);
    if (pair) pairs_walk(W, pair);
    return pair;
}

llm4d_code llm4d_layouts_each(const llm4d_config *base, long long global, int W, llm4d_layout_fn fn, void *u,
                              llm4d_err *err) {
    int n;
    mp_pp *pair = pairs_new(W, &n);
    if (!pair) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    llm4d_code rc = LLM4D_OK;
    for (int i = 0; i < n && rc == LLM4D_OK; i++)
        rc = layouts_of_pair(base, global, W, pair[i].mp, pair[i].pp, fn, u, err);
    free(pair);
    return rc;
}

static llm4d_code consider_fn(void *u, const llm4d_layout *l, llm4d_err *err) { return consider(u, l, err); }

/* A thread of the search: its predictor (memos of its own; time_above following the K-th fastest it has found) and
 * scratch. own: the memos were made here (the first thread borrows the caller's). */
typedef struct {
    ctx x;
    llm4d_predictor pr;
    int own;
} worker;

static void worker_free(worker *w) {
    llm4d_prediction_free(&w->x.pred);
    free(w->x.cfg);
    free(w->x.best);
    llm4d_pp_balance_memo_destroy(w->x.balance);
    llm4d_sched_memo_destroy(w->x.sched);
    if (w->own) {
        llm4d_stagecost_cache_destroy(w->pr.cache);
        llm4d_memplan_memo_destroy(w->pr.memo);
        llm4d_sim_memo_destroy(w->pr.sim);
    }
}

static llm4d_code worker_init(worker *w, const llm4d_predictor *pr, const llm4d_config *base, long long global,
                              int reasons, int prebound, int own, llm4d_err *err) {
    memset(w, 0, sizeof *w);
    w->pr = *pr;
    w->own = own;
    if (own) {
        w->pr.cache = NULL, w->pr.memo = NULL, w->pr.sim = NULL;
        if (llm4d_stagecost_cache_create(&w->pr.cache, err) != LLM4D_OK ||
            (pr->memo && llm4d_memplan_memo_create(&w->pr.memo, err) != LLM4D_OK) ||
            (pr->sim && llm4d_sim_memo_create(&w->pr.sim, err) != LLM4D_OK))
            return LLM4D_ENOMEM;
        llm4d_stagecost_cache_by_count(w->pr.cache, 1); /* as a search's (only a search with memos has threads) */
    }
    const int top = pr->exhaustive ? 0 : base->plan.top;
    w->x = (ctx){.pr = &w->pr, .base = base, .global = global, .reasons = reasons, .top = top,
                 .prebound = prebound, .bound_prec = -1};
    w->x.cfg = malloc(sizeof *w->x.cfg);
    w->x.best = calloc(top > 0 ? (size_t)top : 1, sizeof *w->x.best);
    w->x.balance = pr->exhaustive ? NULL : llm4d_pp_balance_memo_create();
    if (!w->x.cfg || !w->x.best || (!pr->exhaustive && !w->x.balance))
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    if (!pr->exhaustive) LLM4D_TRY(llm4d_sched_memo_create(&w->x.sched, err));
    return LLM4D_OK;
}

/* parts[i] (the candidates of block i) put in out ranked (by_rank), each part emptied. The ranking is a stable sort
 * by status, then by step time (fitting) or host memory (too large): the candidates are placed by status in block
 * order, then only the fitting and the too large are sorted, stably as qsort sorted them all (a merge sort; the
 * others tie within their status). Sorting the whole list (two million candidates at 145B on 192 hosts, most of
 * them invalid or set aside) was a tenth of a large search, after its threads had ended. */
static llm4d_code gather(llm4d_search *out, llm4d_search *parts, int n, llm4d_err *err) {
    enum { NS = LLM4D_CAND_BOUND + 1 };
    int total = 0, at[NS + 1] = {0};
    for (int i = 0; i < n; i++) {
        total += parts[i].n;
        for (int j = 0; j < parts[i].n; j++) {
            const int st = parts[i].c[j].status;
            if (st < 0 || st >= NS) return llm4d_fail(err, LLM4D_EINTERNAL, "candidate status %d", st);
            at[st + 1]++;
        }
    }
    for (int st = 0; st < NS; st++) at[st + 1] += at[st]; /* where each status begins */
    out->c = malloc((size_t)(total ? total : 1) * sizeof *out->c);
    if (!out->c) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    out->cap = total ? total : 1;
    int next[NS];
    memcpy(next, at, sizeof next);
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < parts[i].n; j++) out->c[next[parts[i].c[j].status]++] = parts[i].c[j];
        out->n += parts[i].n, out->n_valid += parts[i].n_valid, out->n_fit += parts[i].n_fit;
        out->n_bound += parts[i].n_bound;
        free(parts[i].c);
        memset(&parts[i], 0, sizeof parts[i]);
    }
    const int sorted[] = {LLM4D_CAND_OK, LLM4D_CAND_MEMORY};
    for (int k = 0; k < 2; k++) {
        const int st = sorted[k];
        qsort(out->c + at[st], (size_t)(at[st + 1] - at[st]), sizeof *out->c, by_rank);
    }
    return LLM4D_OK;
}

/* One search; prebound: set layouts aside by their trace-free bound (consider); *rate: the fastest linear layer the
 * workers' traces priced. */
static llm4d_code search_once(const llm4d_predictor *pr, const llm4d_config *base, long long global, int reasons,
                              int prebound, llm4d_search *out, double *rate, llm4d_err *err) {
    memset(out, 0, sizeof *out);
    *rate = 0;
    out->memory_per_node = pr->cluster.memory_per_node;
    const int W = pr->cluster.nodes * pr->cluster.ranks_per_node;
    int npairs;
    mp_pp *pair = pairs_new(W, &npairs);
    /* every shortcut off (--no_memo, the tests' oracle): one thread with the caller's memos (none) */
    const int want = base->plan.search_threads > 0 ? base->plan.search_threads : omp_get_num_procs();
    const int nth = pr->exhaustive || npairs < 2 ? 1 : want < npairs ? want : npairs;
    llm4d_search *parts = calloc((size_t)(npairs ? npairs : 1), sizeof *parts);
    llm4d_err *perr = calloc((size_t)(npairs ? npairs : 1), sizeof *perr);
    llm4d_code *prc = calloc((size_t)(npairs ? npairs : 1), sizeof *prc);
    worker *wk = calloc((size_t)nth, sizeof *wk);
    llm4d_code rc = LLM4D_OK;
    if (!pair || !parts || !perr || !prc || !wk) {
        rc = llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
        goto out;
    }
    for (int t = 0; t < nth && rc == LLM4D_OK; t++)
        rc = worker_init(&wk[t], pr, base, global, reasons, prebound, t > 0, err);
    if (rc != LLM4D_OK) goto out;
#pragma omp parallel for num_threads(nth) schedule(dynamic, 1) if (nth > 1)
    for (int i = 0; i < npairs; i++) {
        worker *w = &wk[omp_get_thread_num()];
        w->x.out = &parts[i];
        llm4d_sched_memo_clear(w->x.sched); /* a block's P is its own: the memo holds one block's schedules */
        llm4d_memplan_memo_forget(w->pr.memo); /* a block's parts are its own (memplan.h) */
        parts[i].memory_per_node = out->memory_per_node;
        prc[i] = layouts_of_pair(base, global, W, pair[i].mp, pair[i].pp, consider_fn, &w->x, &perr[i]);
    }
    for (int i = 0; i < npairs && rc == LLM4D_OK; i++)
        if (prc[i] != LLM4D_OK) *err = perr[i], rc = prc[i]; /* the first failure in the search's order */
    if (rc == LLM4D_OK) rc = gather(out, parts, npairs, err);
    for (int t = 0; t < nth; t++) {
        const double r = llm4d_stagecost_cache_gemm_rate(wk[t].pr.cache);
        *rate = r > *rate ? r : *rate;
    }
out:
    for (int i = 0; parts && i < npairs; i++) llm4d_search_free(&parts[i]);
    for (int t = 0; wk && t < nth; t++) worker_free(&wk[t]);
    free(pair), free(parts), free(perr), free(prc), free(wk);
    if (rc != LLM4D_OK) llm4d_search_free(out);
    return rc;
}

llm4d_code llm4d_search_run(const llm4d_predictor *pr, const llm4d_config *base, long long global, int reasons,
                            llm4d_search *out, llm4d_err *err) {
    const double t0 = now_s();
    const int prebound = !reasons && !pr->exhaustive && base->plan.top > 0;
    double rate = 0;
    llm4d_code rc = search_once(pr, base, global, reasons, prebound, out, &rate, err);
    if (rc == LLM4D_OK && prebound) {
        /* the bound assumed no linear layer priced faster than the profile's fastest rate (bound.h); a pricing
         * that did (price.c changed without bound.c) would make it unsafe: searched again without it */
        llm4d_bound b;
        llm4d_bound_init(&b, pr, llm4d_memplan_precision(base));
        if (rate > b.gemm_rate * (1 + 1e-9)) {
            llm4d_search_free(out);
            rc = search_once(pr, base, global, reasons, 0, out, &rate, err);
        }
    }
    out->seconds = now_s() - t0;
    return rc;
}
