/* steptime.c — a layout's step time (see predict.h): each stage's micro-batch from its priced trace, the engines'
 * communication walked through the model's hook events, the pipeline through the schedule simulator, the end of
 * the step added.
 *
 * The walk keeps the rank's outstanding background collectives in issue order (Open MPI progresses them in order):
 * while the rank computes they advance at the profile's overlap rate (on a CPU the cores that compute are the ones
 * that would move the bytes; a device with its own copy engines hides nearly all of it), while it waits they
 * advance at full rate and the wait is exposed. What each engine moves, per group and bucket, and when it issues it
 * (every window, a group's last window of the step, after backward, at a parameter use, after the update) is read
 * from the list the engines publish (parallel/traffic.h: the same bucket plan, policies and placement their run
 * time uses; tests/test_traffic.sh checks it against a run's trace), priced at each call's buffer bytes; what
 * waits is what the engines do:
 *   data parallel (flat storage): in the step's last micro-batch a bucket's all-reduce starts when its last group's
 *     last window closes; the last bucket (the embeddings) is reduced blocking when backward ends; under
 *     dp_overlap off every bucket is reduced blocking, in order, after backward; under alternate the engine
 *     overlaps odd steps and blocks on even ones, so a step is priced as the mean of the two;
 *   grad_comm_dtype bfloat16: the list's bf16 payloads (data parallel's buckets, ZeRO's reduce-scatters) are
 *     rounded to bf16 and written back as often as they are reduced (two passes, priced as conversions);
 *   ZeRO stage 1: each group's reduce-scatter after its last window of the step; stages 2 and 3: after every window;
 *     at most two in flight (the gradient ring), a third waits for the oldest;
 *   ZeRO stage 3: params_for waits for the group's gather, then starts the next group's (the recorded order);
 *   hybrid dp: the own shards' all-reduces after backward, priced as one of all their bytes;
 *   tensor parallel: the model's collectives block (in the trace's time: the list's tensor-parallel entries are
 *     not read). The pipeline's messages are priced at the bytes of the list's activation, through the schedule
 *     simulator; its tied embedding, the partial gradients' sum and the step's scalars are priced here from the
 *     stage's extents (whole entries, not the list's kept parts).
 * The measurement switches zero_overlap and zero_prefetch off (the list says blocking) are not priced apart.
 * A stage's micro-batch is walked three times: the first, one in the middle (its durations are the schedule's F,
 * B, W) and the last (the data-parallel buckets and stage 1's reduce-scatters); what the last adds, and what is
 * still in flight after it, is waited for at the end of the step. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/layout.h"
#include "plan/predict.h"
#include "plan/simmemo.h"
#include "parallel/data_parallel.h"
#include "parallel/schedule.h"
#include "parallel/sharding.h"
#include "plan/memplan.h"
#include "model/shard_range.h"

#define QMAX 64

enum { Q_GATHER = 0, Q_RS, Q_AR };

typedef struct {
    double left;
    int eng, kind, id;
} qitem;

typedef struct {
    qitem q[QMAX];
    int n;
    double rate; /* the overlap rate while computing */
    double exposed[LLM4D_ENG_N], hidden[LLM4D_ENG_N];
} walker;

/* The rank computes for d seconds: the queue advances by rate x d, in order. */
static void w_compute(walker *w, double d) {
    double budget = d * w->rate;
    while (budget > 0 && w->n > 0) {
        qitem *x = &w->q[0];
        const double use = x->left < budget ? x->left : budget;
        x->left -= use, budget -= use;
        w->hidden[x->eng] += use;
        if (x->left <= 0) memmove(w->q, w->q + 1, (size_t)--w->n * sizeof *w->q);
    }
}

/* Wait until queue item i (and those before it) completes: the time waited, exposed. */
static double w_wait(walker *w, int i) {
    double t = 0;
    for (int k = 0; k <= i && k < w->n; k++) t += w->q[k].left, w->exposed[w->q[k].eng] += w->q[k].left;
    const int done = i + 1 < w->n ? i + 1 : w->n;
    memmove(w->q, w->q + done, (size_t)(w->n - done) * sizeof *w->q);
    w->n -= done;
    return t;
}

static double w_issue(walker *w, int eng, int kind, int id, double s) {
    double waited = 0;
    if (w->n == QMAX) waited = w_wait(w, 0);
    w->q[w->n++] = (qitem){s, eng, kind, id};
    return waited;
}

static int w_find(const walker *w, int kind, int id) {
    for (int k = 0; k < w->n; k++)
        if (w->q[k].kind == kind && w->q[k].id == id) return k;
    return -1;
}

/* The engines' context of one stage: their published traffic (parallel/traffic.h), priced, by group and bucket. */
typedef struct {
    const llm4d_stagecost *sc;
    double *t_ag, *t_rs; /* [groups] seconds of a group's gather and reduce-scatter */
    double *t_ar;        /* [buckets] seconds of a bucket's all-reduce */
    uint8_t *ag_at, *rs_at; /* [groups] when they are issued (traffic.h llm4d_traffic_when; LLM4D_AT_N: never) */
    uint8_t *ar_at;      /* [buckets] the same */
    int *next_pf;        /* [events] the group of the next params_for after event i (cyclic) */
    int *wleft, *bpend;  /* the step's windows left per group, groups pending per bucket */
} engines;

/* One micro-batch: every chunk's F, B and W in turn; dur[k][c] receives each pass's time (work + waits). */
static void walk_micro(walker *w, const engines *en, int last, double dur[LLM4D_TRACE_NPASS][LLM4D_MAX_CHUNKS]) {
    const llm4d_stagecost *sc = en->sc;
    int i = 0;
    for (int c = 0; c < sc->n_chunks; c++)
        for (int k = 0; k < LLM4D_TRACE_NPASS; k++) {
            double t = 0;
            for (; i < sc->n_ev && sc->ev[i].chunk == c && sc->ev[i].pass == k; i++) {
                const llm4d_hook_ev *e = &sc->ev[i];
                w_compute(w, e->dt);
                t += e->dt;
                const int g = e->group;
                if (e->type == LLM4D_RC_PARAMS_FOR && en->ag_at[g] == LLM4D_AT_USE) {
                    const int q = w_find(w, Q_GATHER, g);
                    if (q >= 0) t += w_wait(w, q);
                    else t += en->t_ag[g], w->exposed[LLM4D_ENG_AG] += en->t_ag[g];
                    const int nx = en->next_pf[i];
                    if (nx >= 0 && nx != g && w_find(w, Q_GATHER, nx) < 0) t += w_issue(w, LLM4D_ENG_AG, Q_GATHER, nx, en->t_ag[nx]);
                } else if (e->type == LLM4D_RC_GRADS_DONE) {
                    int rs = en->rs_at[g] == LLM4D_AT_WINDOW;
                    if (last && --en->wleft[g] == 0) {
                        if (en->rs_at[g] == LLM4D_AT_LAST_WINDOW) rs = 1;
                        const int b = sc->shape.bucket_of_group[g];
                        if (--en->bpend[b] == 0 && en->ar_at[b] == LLM4D_AT_LAST_WINDOW)
                            t += w_issue(w, LLM4D_ENG_DP, Q_AR, b, en->t_ar[b]);
                    }
                    if (rs) {
                        t += w_issue(w, LLM4D_ENG_RS, Q_RS, g, en->t_rs[g]);
                        int n_rs = 0, oldest = -1;
                        for (int q = 0; q < w->n; q++)
                            if (w->q[q].kind == Q_RS) n_rs++, oldest = oldest < 0 ? q : oldest;
                        if (n_rs > 2) t += w_wait(w, oldest); /* the ring of two buckets */
                    }
                }
            }
            w_compute(w, sc->chunk[c].tail[k]);
            dur[k][c] = t + sc->chunk[c].tail[k];
        }
}

static double total_kinds(const double *k) {
    double s = 0;
    for (int i = 0; i < LLM4D_WORK_N; i++) s += k[i];
    return s;
}

/* What a stage does in a step. */
typedef struct {
    double mid[LLM4D_TRACE_NPASS][LLM4D_MAX_CHUNKS]; /* the schedule's F, B, W of each chunk */
    double post;          /* after its last action: the last micro-batch's extra, what is in flight, the finish */
    double optim;
    double kinds[LLM4D_WORK_N]; /* kernels per step, alone */
    double kernels;       /* the micro-batches' kernels per step, alone, and their waits' spin (the part the host's
                           * sharing slows) */
    double exposed[LLM4D_ENG_N], hidden[LLM4D_ENG_N];
    double slow;          /* the kernels' slowdown with every rank of the host computing */
    double msg_bytes;     /* a pipeline message (the list's activation received or sent; 0: none) */
} stage_time;

/* The traffic the engines publish for the stage whose rank is at topo (parallel/traffic.h): their lists, the
 * stage-3 gathers counted from the trace's parameter uses. */
static llm4d_code stage_traffic(const llm4d_config *cfg, const llm4d_topology *topo, const llm4d_pp_plan *pp,
                                const llm4d_stagecost *sc, int overlap, llm4d_traffic *tr, llm4d_err *err) {
    int *uses = calloc((size_t)sc->shape.n_groups + 1, sizeof *uses);
    if (!uses) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    for (int i = 0; i < sc->n_ev; i++)
        if (sc->ev[i].type == LLM4D_RC_PARAMS_FOR) uses[sc->ev[i].group]++;
    const llm4d_code rc = llm4d_traffic_list(&(llm4d_traffic_ask){cfg, topo, &sc->shape, overlap, uses, pp}, tr, err);
    free(uses);
    return rc;
}

llm4d_code llm4d_predict_traffic(const llm4d_predictor *pr, const llm4d_config *cfg, const llm4d_pp_plan *pp,
                                 int stage, int overlap, llm4d_traffic *out, llm4d_err *err) {
    const int R = pr->cluster.ranks_per_node;
    const llm4d_pricer pc = {pr->prof, pr->cluster.threads, llm4d_memplan_precision(cfg)};
    llm4d_topology topo;
    const llm4d_stagecost *sc;
    LLM4D_TRY(llm4d_layout_stage_topo(cfg, stage, &topo, err));
    LLM4D_TRY(llm4d_stagecost_get(pr->cache, &pc, &(llm4d_stage_ref){cfg, &topo, pp}, pr->be, R,
                                  llm4d_group_hosts(&topo, LLM4D_AXIS_MODEL, R), &sc, err));
    return stage_traffic(cfg, &topo, pp, sc, overlap, out, err);
}

/* The stage whose rank is at topo: walk it, and price the end of its step. */
static llm4d_code stage_walk(const llm4d_predictor *pr, const llm4d_config *cfg, const llm4d_pp_plan *pp,
                             const llm4d_topology *topo, int M, int overlap, stage_time *st, llm4d_err *err) {
    memset(st, 0, sizeof *st);
    const llm4d_profile *prof = pr->prof;
    const int R = pr->cluster.ranks_per_node, prec = llm4d_memplan_precision(cfg);
    const llm4d_pricer pc = {prof, pr->cluster.threads, prec};
    const llm4d_stagecost *sc;
    LLM4D_TRY(llm4d_stagecost_get(pr->cache, &pc, &(llm4d_stage_ref){cfg, topo, pp}, pr->be, R,
                                  llm4d_group_hosts(topo, LLM4D_AXIS_MODEL, R), &sc, err));
    const llm4d_dist_config *d = &cfg->dist;
    const llm4d_traffic_shape *sh = &sc->shape;
    const int N = d->sharding_degree, G = sh->n_groups, NB = sh->n_buckets;
    engines en = {.sc = sc};
    en.t_ag = calloc((size_t)G + 1, sizeof *en.t_ag);
    en.t_rs = calloc((size_t)G + 1, sizeof *en.t_rs);
    en.t_ar = calloc((size_t)NB + 1, sizeof *en.t_ar);
    en.ag_at = malloc((size_t)G + 1), en.rs_at = malloc((size_t)G + 1), en.ar_at = malloc((size_t)NB + 1);
    en.next_pf = calloc((size_t)sc->n_ev + 1, sizeof *en.next_pf);
    en.wleft = calloc((size_t)G + 1, sizeof *en.wleft);
    en.bpend = calloc((size_t)NB + 1, sizeof *en.bpend);
    llm4d_traffic tr = {0};
    llm4d_code rc = en.t_ag && en.t_rs && en.t_ar && en.ag_at && en.rs_at && en.ar_at && en.next_pf && en.wleft &&
                            en.bpend
                        ? LLM4D_OK
                        : llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    /* what the engines move; the pipeline's and tensor parallelism's part (a part, layout and schedule more to
     * build) only on the last stage, whose message the pipeline's price reads (time_as) */
    const int last = d->pp_degree > 1 && topo->index[LLM4D_AXIS_PIPE] == d->pp_degree - 1;
    if (rc == LLM4D_OK) rc = stage_traffic(cfg, topo, last ? pp : NULL, sc, overlap, &tr, err);
    if (rc != LLM4D_OK) {
        free(en.t_ag), free(en.t_rs), free(en.t_ar), free(en.ag_at), free(en.rs_at), free(en.ar_at);
        free(en.next_pf), free(en.wleft), free(en.bpend);
        return rc;
    }
    memset(en.ag_at, LLM4D_AT_N, (size_t)G + 1), memset(en.rs_at, LLM4D_AT_N, (size_t)G + 1);
    memset(en.ar_at, LLM4D_AT_N, (size_t)NB + 1);
    const int sh_hosts = llm4d_group_hosts(topo, LLM4D_AXIS_SHARDING, R);
    const int data_hosts = llm4d_group_hosts(topo, LLM4D_AXIS_DATA, R);
    /* data-parallel gradients shared in place on the shared-memory path (data_parallel.h): one answer with the run */
    const int data_here = data_hosts > 0 ? topo->data_world / data_hosts : 0;
    const int data_shm = llm4d_memplan_path_ranks(cfg, data_here, data_here * data_hosts == topo->data_world);
    const int ar_op = llm4d_dp_grads_in_shm(llm4d_backend_host_addressable(cfg->device), data_shm, data_hosts, NULL)
                          ? LLM4D_PROF_AR_SHARED
                          : LLM4D_COMM_OP_ALLREDUCE;
    /* each call priced at its buffer's bytes (the profile's convention: a reduce-scatter or gather by its whole
     * buffer); the hybrid all-reduces as one of all of them */
    size_t hybrid_bytes = 0;
    int hybrid = 0;
    for (int i = 0; i < tr.n; i++) {
        const llm4d_traffic_call *c = &tr.c[i];
        const double bytes = (double)c->len * (double)llm4d_comm_dtype_size((llm4d_comm_dtype)c->dtype);
        if (c->what == LLM4D_TW_ZERO_AG) {
            en.t_ag[c->id] = llm4d_price_coll(prof, LLM4D_COMM_OP_ALLGATHER, bytes, N, R, sh_hosts, NULL);
            en.ag_at[c->id] = c->when;
        } else if (c->what == LLM4D_TW_ZERO_RS) {
            en.t_rs[c->id] = llm4d_price_coll(prof, LLM4D_COMM_OP_REDUCE_SCATTER, bytes, N, R, sh_hosts, NULL);
            en.rs_at[c->id] = c->when;
        } else if (c->what == LLM4D_TW_DP_BUCKET) {
            en.t_ar[c->id] = llm4d_price_coll(prof, ar_op, bytes, topo->data_world, R, data_hosts, NULL);
            en.ar_at[c->id] = c->when;
        } else if (c->what == LLM4D_TW_HYBRID) {
            hybrid_bytes += (size_t)llm4d_traffic_bytes(c), hybrid = 1;
        } else if (c->what == LLM4D_TW_PP_ACT) {
            st->msg_bytes = (double)llm4d_traffic_bytes(c);
        }
    }
    for (int i = 0; i < sc->n_ev; i++) { /* the next params_for, cyclically */
        en.next_pf[i] = -1;
        for (int j = 1; j <= sc->n_ev; j++) {
            const llm4d_hook_ev *e = &sc->ev[(i + j) % sc->n_ev];
            if (e->type == LLM4D_RC_PARAMS_FOR) {
                en.next_pf[i] = e->group;
                break;
            }
        }
    }
    for (int g = 0; g < G; g++) en.wleft[g] = sh->windows[g];
    for (int b = 0; b < NB; b++) en.bpend[b] = sh->bucket_groups[b];

    /* the first, a middle and the last micro-batch; the step's sums weigh the middle one M - 2 times */
    walker w = {.rate = prof->overlap};
    double dur[LLM4D_TRACE_NPASS][LLM4D_MAX_CHUNKS] = {{0}}, last_sum = 0, mid_sum = 0;
    double ex0[LLM4D_ENG_N], hd0[LLM4D_ENG_N];
    walk_micro(&w, &en, M == 1, dur);
    if (M > 1) {
        memcpy(ex0, w.exposed, sizeof ex0), memcpy(hd0, w.hidden, sizeof hd0);
        walk_micro(&w, &en, M == 2, dur);
        if (M > 2) { /* the middle micro-batch's share, M - 2 more times */
            for (int e = 0; e < LLM4D_ENG_N; e++)
                w.exposed[e] += (M - 3) * (w.exposed[e] - ex0[e]), w.hidden[e] += (M - 3) * (w.hidden[e] - hd0[e]);
        }
    }
    memcpy(st->mid, dur, sizeof dur);
    for (int c = 0; c < sc->n_chunks; c++)
        for (int k = 0; k < LLM4D_TRACE_NPASS; k++) {
            mid_sum += dur[k][c];
            for (int j = 0; j < LLM4D_WORK_N; j++) st->kinds[j] += M * sc->chunk[c].kinds[k][j];
        }
    st->kernels = total_kinds(st->kinds) + M * sc->spin;
    if (M > 2) {
        walk_micro(&w, &en, 1, dur);
        for (int c = 0; c < sc->n_chunks; c++)
            for (int k = 0; k < LLM4D_TRACE_NPASS; k++) last_sum += dur[k][c];
    } else {
        last_sum = mid_sum;
    }
    double post = last_sum - mid_sum; /* what the last micro-batch adds */
    /* the blocking waits of the step's end burn processor time on an oversubscribed host (price.h): spin */
    const int thr = pr->cluster.threads;
    double spin = w.n > 0 ? llm4d_price_wait(prof, thr, R, N > 1 ? N : topo->data_world) : 0;
    post += w_wait(&w, w.n - 1);      /* what is still in flight (the last bucket is blocking: below) */

    /* the end of the step */
    double slow[LLM4D_WORK_N];
    llm4d_price_share(prof, pr->cluster.threads, R, slow);
    const double kt = total_kinds(st->kinds);
    st->slow = 1.0;
    if (kt > 0) {
        double s = 0;
        for (int j = 0; j < LLM4D_WORK_N; j++) s += st->kinds[j] * slow[j];
        st->slow = s / kt;
    }
    double exposed[LLM4D_ENG_N] = {0};
    for (int b = 0; b < NB; b++) /* the buckets reduced blocking after backward (the last; without overlap, all) */
        if (en.ar_at[b] == LLM4D_AT_BACKWARD_END) {
            exposed[LLM4D_ENG_DP] += en.t_ar[b];
            spin += llm4d_price_wait(prof, thr, R, topo->data_world);
        }
    /* bf16 payloads: each reduction's buffer rounded to bf16 (to_bf16) and its result written back (from_bf16: the
     * whole bucket, or the reduce-scatter's own shard), on the rank's own stream, as often as it is reduced */
    double conv[LLM4D_WORK_N] = {0};
    for (int i = 0; i < tr.n; i++) {
        const llm4d_traffic_call *c = &tr.c[i];
        if (c->dtype == LLM4D_COMM_BF16) {
            const size_t len = c->len, back = c->op == LLM4D_COMM_OP_ALLREDUCE ? c->len : c->count;
            const double times = (double)llm4d_traffic_calls(c, M);
            double one[LLM4D_WORK_N] = {0};
            const llm4d_rc_call to = {.op = LLM4D_RC_CONVERT, .ty = LLM4D_BF16, .d = {(int64_t)len}};
            const llm4d_rc_call from = {.op = LLM4D_RC_CONVERT, .ty = LLM4D_BF16 << 2, .d = {(int64_t)back}};
            llm4d_price_call(&pc, &to, one);
            llm4d_price_call(&pc, &from, one);
            for (int k = 0; k < LLM4D_WORK_N; k++) conv[k] += times * one[k];
        }
    }
    size_t local = 0; /* the elements this rank updates: its shards (N = 1: the groups whole) */
    for (int g = 0; g < G; g++) local += llm4d_shard_len(sh->group_len[g], N > 1 ? N : 1);
    if (hybrid) { /* hybrid: the own shards over the dp group */
        exposed[LLM4D_ENG_DP] += llm4d_price_coll(prof, LLM4D_COMM_OP_ALLREDUCE, (double)hybrid_bytes,
                                                  d->dp_degree, R, llm4d_group_hosts(topo, LLM4D_AXIS_DATA, R), NULL);
        spin += llm4d_price_wait(prof, thr, R, d->dp_degree);
    }
    if (topo->degree[LLM4D_AXIS_MODEL] > 1 && sc->sp_partial) { /* (params.h tp_partial) */
        exposed[LLM4D_ENG_TP] += llm4d_price_coll(prof, LLM4D_COMM_OP_ALLREDUCE, (double)sc->sp_partial * sizeof(float),
                                                  topo->degree[LLM4D_AXIS_MODEL], R,
                                                  llm4d_group_hosts(topo, LLM4D_AXIS_MODEL, R), NULL);
        spin += llm4d_price_wait(prof, thr, R, topo->degree[LLM4D_AXIS_MODEL]);
    }
    const int P = d->pp_degree;
    if (P > 1 && sc->wte_elems && !cfg->model.untied) { /* the tied embedding's two copies (pipeline.c) */
        exposed[LLM4D_ENG_EMB] += llm4d_price_coll(prof, LLM4D_COMM_OP_ALLREDUCE,
                                                   (double)sc->wte_elems / (N > 1 ? N : 1) * sizeof(float), 2, R,
                                                   llm4d_group_hosts(topo, LLM4D_AXIS_PIPE, R) > 1 ? 2 : 1, NULL);
        spin += llm4d_price_wait(prof, thr, R, 2);
    }
    const int world = topo->world_size, world_hosts = (world + R - 1) / R;
    spin += llm4d_price_wait(prof, thr, R, world) + 2 * llm4d_price_wait(prof, thr, R, topo->data_world) +
            llm4d_price_wait(prof, thr, R, P); /* the step's scalars */
    exposed[LLM4D_ENG_STEP] += llm4d_price_coll(prof, LLM4D_COMM_OP_ALLREDUCE, 8, world, R, world_hosts, NULL) +
                               2 * llm4d_price_coll(prof, LLM4D_COMM_OP_ALLREDUCE, 8, topo->data_world, R, data_hosts,
                                                    NULL) +
                               llm4d_price_coll(prof, LLM4D_COMM_OP_ALLREDUCE, 8, P, R,
                                                llm4d_group_hosts(topo, LLM4D_AXIS_PIPE, R), NULL);
    /* the update: the norm's pass and AdamW over what this rank keeps; offload streams m, v (and stage 3's
     * parameters) from disk and back, overlapped with the update */
    double ks[LLM4D_WORK_N] = {0};
    const llm4d_rc_call norm = {.op = LLM4D_RC_SUMSQ, .d = {(int64_t)local}};
    /* the whole model's update zeroes the gradients in its pass, unless the backend starts them over (a sharded
     * update never does: its gradients are a bucket's, reset or zeroed where the reduce-scatter begins) */
    const llm4d_rc_call adam = {.op = LLM4D_RC_ADAMW, .d = {(int64_t)local, N > 1 || prof->grads_reset ? 0 : 1}};
    llm4d_price_call(&pc, &norm, ks);
    llm4d_price_call(&pc, &adam, ks);
    double optim = total_kinds(ks) * slow[LLM4D_WORK_OPTIM];
    if (N > 1 && d->sharding_offload) {
        const double streams = llm4d_sharding_traits(d).offload_streams, bytes = (double)local * sizeof(float) * streams;
        const double io = bytes / (prof->disk_read_gbps * 1e9) + bytes / (prof->disk_write_gbps * 1e9);
        optim = optim > io ? optim : io;
    }
    st->optim = optim;
    st->kinds[LLM4D_WORK_OPTIM] += ks[LLM4D_WORK_OPTIM];
    for (int k = 0; k < LLM4D_WORK_N; k++) st->kinds[k] += conv[k];
    post += total_kinds(conv) * st->slow;
    int after_update = 0; /* the groups' parameters gathered after the update (stages 1, 2) */
    for (int g = 0; g < G; g++)
        if (en.ag_at[g] == LLM4D_AT_UPDATE) exposed[LLM4D_ENG_AG] += en.t_ag[g], after_update++;
    if (after_update) spin += after_update * llm4d_price_wait(prof, thr, R, N);
    post += spin * st->slow;
    for (int e = 0; e < LLM4D_ENG_N; e++) {
        post += exposed[e];
        st->exposed[e] = w.exposed[e] + exposed[e];
        st->hidden[e] = w.hidden[e];
    }
    st->post = post + optim;
    free(en.t_ag), free(en.t_rs), free(en.t_ar), free(en.ag_at), free(en.rs_at), free(en.ar_at);
    free(en.next_pf), free(en.wleft), free(en.bpend);
    llm4d_traffic_free(&tr);
    return LLM4D_OK;
}

/* The seconds of work a computing stage does per second when k of the P stages compute at once (rate[P + 1]):
 * k / P of the host's ranks (the stages' ranks spread evenly over the hosts). */
static void stage_rates(const llm4d_predictor *pr, const stage_time *st, int P, double *rate) {
    const int R = pr->cluster.ranks_per_node;
    double slow_avg = 0;
    for (int s = 0; s < P; s++) slow_avg += st[s].slow / P;
    for (int k = 0; k <= P; k++) {
        const int active = k * R / P > 0 ? k * R / P : 1;
        double slow[LLM4D_WORK_N];
        llm4d_price_share(pr->prof, pr->cluster.threads, active, slow);
        /* the stages' mix of work at full occupancy, scaled by this occupancy's time-slicing */
        double full[LLM4D_WORK_N];
        llm4d_price_share(pr->prof, pr->cluster.threads, R, full);
        const double ratio = slow[LLM4D_WORK_GEMM] / full[LLM4D_WORK_GEMM];
        rate[k] = 1.0 / (slow_avg * ratio);
    }
}

/* A lower bound of the simulated span: no stage finishes before its forward and backward work of every
 * micro-batch is done at the fastest rate (its weight-gradient passes, sends and waits only add). 1e-9 below, for
 * the simulator ending an action within a rounding of its work. */
static double span_bound(const llm4d_pp_plan *pp, const stage_time *st, const double *rate) {
    double fastest = 0, most = 0;
    for (int k = 0; k <= pp->P; k++) fastest = rate[k] > fastest ? rate[k] : fastest;
    for (int s = 0; s < pp->P; s++) {
        double w = 0;
        for (int c = 0; c < pp->V; c++) w += st[s].mid[LLM4D_TRACE_F][c] + st[s].mid[LLM4D_TRACE_B][c];
        most = w > most ? w : most;
    }
    return fastest > 0 ? pp->M * most / fastest * (1 - 1e-9) : 0;
}

/* The pipeline: the stages' actions through the schedule simulator, the host's cores shared by the stages that
 * compute at once. */
static llm4d_code pipeline_span(const llm4d_predictor *pr, const llm4d_pp_plan *pp,
                                const stage_time *st, double p2p, double *span, double *busy, llm4d_err *err) {
    const int P = pp->P, V = pp->V;
    /* the plan's kept lists when it has them (the planner's), else built here */
    llm4d_pp_schedule *sch = pp->sched ? NULL : calloc((size_t)P, sizeof *sch);
    double *cost = calloc((size_t)P * 3 * V, sizeof *cost), *rate = calloc((size_t)P + 1, sizeof *rate);
    llm4d_code rc = (sch || pp->sched) && cost && rate ? LLM4D_OK : llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    for (int s = 0; rc == LLM4D_OK && s < P; s++) {
        if (sch) rc = llm4d_pp_schedule_build(&sch[s], pp->runs->kind, P, V, pp->M, s, err);
        for (int c = 0; c < V; c++)
            for (int k = 0; k < 3; k++) cost[((size_t)s * 3 + (size_t)k) * V + (size_t)c] = st[s].mid[k][c];
    }
    if (rc == LLM4D_OK) stage_rates(pr, st, P, rate);
    const llm4d_pp_costs costs = {cost, p2p, rate};
    if (rc == LLM4D_OK) rc = llm4d_sim_memo_simulate(pr->sim, sch ? sch : pp->sched, P, &costs, span, busy, err);
    for (int s = 0; sch && s < P; s++) llm4d_pp_schedule_free(&sch[s]);
    free(sch), free(cost), free(rate);
    return rc;
}

#define LLM4D_MAX_STAGES_BOUND 1024

/* The step with the data-parallel buckets overlapped with backward (overlap) or reduced blocking after it. */
static llm4d_code time_as(const llm4d_predictor *pr, const llm4d_config *cfg, const llm4d_pp_plan *pp, int overlap,
                          llm4d_prediction *out, llm4d_err *err) {
    out->bound_time = 0;
    const int P = cfg->dist.pp_degree, M = (int)cfg->accumulate_steps, R = pr->cluster.ranks_per_node;
    stage_time *st = calloc((size_t)P, sizeof *st);
    double *busy = calloc((size_t)P, sizeof *busy);
    llm4d_code rc = st && busy ? LLM4D_OK : llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    llm4d_topology topo = {0};
    for (int s = 0; rc == LLM4D_OK && s < P; s++) {
        rc = llm4d_layout_stage_topo(cfg, s, &topo, err);
        if (rc == LLM4D_OK) rc = stage_walk(pr, cfg, pp, &topo, M, overlap, &st[s], err);
    }
    double span = 0, post = 0;
    int crit = 0;
    if (rc == LLM4D_OK && P == 1) {
        double mb = 0;
        for (int c = 0; c < LLM4D_MAX_CHUNKS; c++)
            for (int k = 0; k < LLM4D_TRACE_NPASS; k++) mb += st[0].mid[k][c];
        span = busy[0] = M * mb + st[0].kernels * (st[0].slow - 1);
    } else if (rc == LLM4D_OK) {
        const int pipe_hosts = llm4d_group_hosts(&topo, LLM4D_AXIS_PIPE, R) > 1 ? 2 : 1;
        /* a message's bytes as the pipeline publishes them (the last stage receives every activation it runs) */
        if (!(st[P - 1].msg_bytes > 0))
            rc = llm4d_fail(err, LLM4D_EINTERNAL, "the last of %d stages publishes no pipeline message", P);
        const double p2p = rc == LLM4D_OK ? llm4d_price_coll(pr->prof, LLM4D_COMM_OP_SEND, st[P - 1].msg_bytes, 2, R,
                                                             pipe_hosts, NULL)
                                          : 0;
        /* a search that has its K fastest already: a layout bound to be slower is not simulated (its bound as its
         * time, bound_time) */
        if (rc == LLM4D_OK && pr->time_above > 0) {
            double rate[LLM4D_MAX_STAGES_BOUND + 1], post_max = 0;
            if (P <= LLM4D_MAX_STAGES_BOUND) {
                stage_rates(pr, st, P, rate);
                for (int s = 0; s < P; s++) post_max = st[s].post > post_max ? st[s].post : post_max;
                const double lb = span_bound(pp, st, rate) + post_max;
                if (lb > pr->time_above) {
                    out->step_s = lb, out->bound_time = 1;
                    free(st);
                    free(busy);
                    return LLM4D_OK;
                }
            }
        }
        double span0 = 0;
        /* the span without the sends only splits them into exposed and hidden: a search ranking by step time
         * (step_only) runs the simulation once */
        if (rc == LLM4D_OK && !pr->step_only) rc = pipeline_span(pr, pp, st, 0.0, &span0, busy, err);
        if (rc == LLM4D_OK) rc = pipeline_span(pr, pp, st, p2p, &span, busy, err);
        const double sends = 2.0 * M * pp->V * p2p;
        out->exposed_s[LLM4D_ENG_PP] = span > span0 ? span - span0 : 0;
        out->hidden_s[LLM4D_ENG_PP] = sends > out->exposed_s[LLM4D_ENG_PP] ? sends - out->exposed_s[LLM4D_ENG_PP] : 0;
    }
    if (rc == LLM4D_OK) {
        for (int s = 0; s < P; s++) {
            if (st[s].post > post) post = st[s].post;
            if (busy[s] > busy[crit]) crit = s;
        }
        out->step_s = span + post;
        out->tokens_per_s = out->step_s > 0 ? (double)cfg->global_batch_size * cfg->data.max_seq_len / out->step_s : 0;
        out->critical_stage = crit;
        out->bubble_s = span - busy[crit];
        out->share_slow = st[crit].slow;
        out->optimizer_s = st[crit].optim;
        memcpy(out->compute_s, st[crit].kinds, sizeof out->compute_s);
        for (int e = 0; e < LLM4D_ENG_N; e++)
            if (e != LLM4D_ENG_PP) out->exposed_s[e] = st[crit].exposed[e], out->hidden_s[e] = st[crit].hidden[e];
        /* the tensor-parallel collectives block inside the micro-batches */
        const llm4d_stagecost *sc;
        const llm4d_pricer pc = {pr->prof, pr->cluster.threads, llm4d_memplan_precision(cfg)};
        rc = llm4d_layout_stage_topo(cfg, crit, &topo, err);
        if (rc == LLM4D_OK)
            rc = llm4d_stagecost_get(pr->cache, &pc, &(llm4d_stage_ref){cfg, &topo, pp}, pr->be, R,
                                     llm4d_group_hosts(&topo, LLM4D_AXIS_MODEL, R), &sc, err);
        if (rc == LLM4D_OK) {
            for (int c = 0; c < sc->n_chunks; c++)
                for (int k = 0; k < LLM4D_TRACE_NPASS; k++) out->exposed_s[LLM4D_ENG_TP] += M * sc->chunk[c].tp[k];
            out->priced_exact = sc->priced_exact, out->priced_other = sc->priced_other;
        }
        memset(&out->beyond, 0, sizeof out->beyond);
        for (int s = 0; rc == LLM4D_OK && pr->prof->machine && !pr->step_only && s < P; s++) {
            rc = llm4d_layout_stage_topo(cfg, s, &topo, err);
            if (rc == LLM4D_OK)
                rc = llm4d_stagecost_get(pr->cache, &pc, &(llm4d_stage_ref){cfg, &topo, pp}, pr->be, R,
                                         llm4d_group_hosts(&topo, LLM4D_AXIS_MODEL, R), &sc, err);
            if (rc == LLM4D_OK) llm4d_beyond_merge(&out->beyond, &sc->beyond, (int)cfg->micro_batch_size,
                                                     cfg->dist.mp_degree);
        }
    }
    free(st);
    free(busy);
    return rc;
}

llm4d_code llm4d_predict_time(const llm4d_predictor *pr, const llm4d_config *cfg, const llm4d_pp_plan *pp,
                              llm4d_prediction *out, llm4d_err *err) {
    const char *ov = cfg->dist.dp_overlap;
    if (strcmp(ov, "alternate")) return time_as(pr, cfg, pp, strcmp(ov, "off") != 0, out, err);
    /* alternate (data_parallel.c): odd steps overlapped, even steps blocking, so the mean step is the mean of the
     * two; neither is cut short by a search's bound (the mean of a bound and a time bounds nothing) */
    llm4d_predictor whole = *pr;
    whole.time_above = 0;
    LLM4D_TRY(time_as(&whole, cfg, pp, 1, out, err));
    llm4d_prediction off = *out;
    LLM4D_TRY(time_as(&whole, cfg, pp, 0, &off, err));
    out->step_s = (out->step_s + off.step_s) / 2;
    out->tokens_per_s = out->step_s > 0 ? (double)cfg->global_batch_size * cfg->data.max_seq_len / out->step_s : 0;
    for (int k = 0; k < LLM4D_WORK_N; k++) out->compute_s[k] = (out->compute_s[k] + off.compute_s[k]) / 2;
    for (int e = 0; e < LLM4D_ENG_N; e++) {
        out->exposed_s[e] = (out->exposed_s[e] + off.exposed_s[e]) / 2;
        out->hidden_s[e] = (out->hidden_s[e] + off.hidden_s[e]) / 2;
    }
    out->bubble_s = (out->bubble_s + off.bubble_s) / 2;
    out->optimizer_s = (out->optimizer_s + off.optimizer_s) / 2;
    out->share_slow = (out->share_slow + off.share_slow) / 2;
    return LLM4D_OK;
}
