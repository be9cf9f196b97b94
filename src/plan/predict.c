/* predict.c — a layout's prediction: the memory of every rank (here) and the step time (steptime.c); see
 * predict.h. */
#include "plan/predict.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/price.h"
#include "plan/memplan.h"

const char *llm4d_eng_name(int e) {
    static const char *const n[LLM4D_ENG_N] = {"tensor_parallel", "pipeline", "data_parallel", "zero_reduce_scatter",
                                               "zero_all_gather", "embedding", "step"};
    return e >= 0 && e < LLM4D_ENG_N ? n[e] : "?";
}

const char *llm4d_pm_name(int k) {
    static const char *const n[LLM4D_PM_N] = {"params", "grads", "optimizer", "activations", "comm", "workspace",
                                              "weight_copies", "operands", "mpi", "shm", "libraries", "base", "data",
                                              "residual"};
    return k >= 0 && k < LLM4D_PM_N ? n[k] : "?";
}

int llm4d_group_hosts(const llm4d_topology *topo, int axis, int ranks_per_node) {
    const int n = topo->degree[axis], R = ranks_per_node > 0 ? ranks_per_node : 1;
    if (n <= 0) return 0;
    /* member i is base + i stride (ranks are mixed-radix in the axes, the later ones faster): a stride of a host
     * or more puts every member on its own host; else count the host changes, without building each rank */
    long long stride = 1;
    for (int a = axis + 1; a < LLM4D_NAXES; a++) stride *= topo->degree[a];
    if (stride >= R) return n;
    const long long base = llm4d_topology_group_member(topo, axis, 0);
    int hosts = 0;
    long long last = -1;
    for (int i = 0; i < n; i++) { /* members are in increasing rank order: count the host changes */
        const long long h = (base + i * stride) / R;
        if (h != last) hosts++, last = h;
    }
    return hosts;
}

int llm4d_prediction_over(const llm4d_prediction *p, const llm4d_cluster *cl) {
    return (p->host_bytes > cl->memory_per_node ? LLM4D_OVER_HOST : 0) |
           (cl->memory_per_rank > 0 && p->peak_bytes > cl->memory_per_rank ? LLM4D_OVER_RANK : 0);
}

void llm4d_prediction_over_text(const llm4d_prediction *p, const llm4d_cluster *cl, int over, char *buf, size_t n) {
    const char *least = p->bound ? "at least " : "";
    const double G = 1073741824.0;
    if (!(over & LLM4D_OVER_RANK)) /* the host's (a bound one's too): as before ranks had memory of their own */
        snprintf(buf, n, "needs %s%.2f GiB on its fullest host (%.2f GiB on rank %d), %.2f GiB there", least,
                 p->host_bytes / G, p->peak_bytes / G, p->peak_rank, cl->memory_per_node / G);
    else if (!(over & LLM4D_OVER_HOST))
        snprintf(buf, n, "rank %d needs %s%.2f GiB of its device's %.2f GiB (%.2f GiB on its fullest host)",
                 p->peak_rank, least, p->peak_bytes / G, cl->memory_per_rank / G, p->host_bytes / G);
    else
        snprintf(buf, n, "rank %d needs %s%.2f GiB of its device's %.2f GiB, and its fullest host %s%.2f GiB of the "
                 "host's %.2f GiB", p->peak_rank, least, p->peak_bytes / G, cl->memory_per_rank / G, least,
                 p->host_bytes / G, cl->memory_per_node / G);
}

void llm4d_prediction_free(llm4d_prediction *p) {
    free(p->stage_peak);
    free(p->rank_peak);
    free(p->rank_plan);
    p->stage_peak = p->rank_peak = p->rank_plan = NULL;
}

/* The profile's resident base for r ranks on a host: the measured count nearest (linear between two). */
static double base_bytes(const llm4d_profile *p, int r) {
    if (p->n_base == 0) return 0;
    int lo = -1, hi = -1;
    for (int i = 0; i < p->n_base; i++) {
        if (p->base_ranks[i] <= r && (lo < 0 || p->base_ranks[i] > p->base_ranks[lo])) lo = i;
        if (p->base_ranks[i] >= r && (hi < 0 || p->base_ranks[i] < p->base_ranks[hi])) hi = i;
    }
    if (lo < 0) return p->base_bytes[hi];
    if (hi < 0 || p->base_ranks[hi] == p->base_ranks[lo]) return p->base_bytes[lo];
    const double f = (double)(r - p->base_ranks[lo]) / (p->base_ranks[hi] - p->base_ranks[lo]);
    return p->base_bytes[lo] + f * (p->base_bytes[hi] - p->base_bytes[lo]);
}

#define LLM4D_MAX_SH_CLASSES 72 /* sharding_classes: 2 + 2 log2 of any int */

/* The collective library's temporaries the rank's largest collectives leave (the largest of them: each is freed
 * when it ends), except ZeRO's reduce-scatters, which the memory plan holds. */
static double coll_temp(const llm4d_predictor *pr, const llm4d_config *cfg, const llm4d_topology *topo,
                        const llm4d_stagecost *sc) {
    const int R = pr->cluster.ranks_per_node;
    double best = 0, t[3];
    if (cfg->dist.sharding_degree <= 1 && topo->data_world > 1) { /* the largest data-parallel bucket */
        size_t len = 0;
        for (int b = 0; b < sc->shape.n_buckets; b++) len = sc->shape.bucket_len[b] > len ? sc->shape.bucket_len[b] : len;
        llm4d_price_coll(pr->prof, LLM4D_COMM_OP_ALLREDUCE, (double)len * sizeof(float), topo->data_world, R,
                         llm4d_group_hosts(topo, LLM4D_AXIS_DATA, R), t);
        best = llm4d_coll_temp_of(t, topo->data_rank);
    }
    if (topo->degree[LLM4D_AXIS_MODEL] > 1 && sc->tp_max_bytes > 0) {
        llm4d_price_coll(pr->prof, sc->tp_max_op, sc->tp_max_bytes, topo->degree[LLM4D_AXIS_MODEL], R,
                         llm4d_group_hosts(topo, LLM4D_AXIS_MODEL, R), t);
        const double x = llm4d_coll_temp_of(t, topo->index[LLM4D_AXIS_MODEL]);
        best = x > best ? x : best;
    }
    if (cfg->dist.pp_degree > 1 && sc->wte_elems && !cfg->model.untied) { /* the tied embedding's all-reduce */
        const int N = cfg->dist.sharding_degree > 1 ? cfg->dist.sharding_degree : 1;
        llm4d_price_coll(pr->prof, LLM4D_COMM_OP_ALLREDUCE, (double)sc->wte_elems / N * sizeof(float), 2, R,
                         llm4d_group_hosts(topo, LLM4D_AXIS_PIPE, R) > 1 ? 2 : 1, t);
        const double x = llm4d_coll_temp_of(t, topo->index[LLM4D_AXIS_PIPE] == 0 ? 0 : 1);
        best = x > best ? x : best;
    }
    if (cfg->dist.sharding_degree > 1) { /* the parameter gathers of the largest group */
        size_t len = 0;
        for (int g = 0; g < sc->shape.n_groups; g++) len = sc->shape.group_len[g] > len ? sc->shape.group_len[g] : len;
        llm4d_price_coll(pr->prof, LLM4D_COMM_OP_ALLGATHER, (double)len * sizeof(float), cfg->dist.sharding_degree,
                         R, llm4d_group_hosts(topo, LLM4D_AXIS_SHARDING, R), t);
        const double x = llm4d_coll_temp_of(t, topo->index[LLM4D_AXIS_SHARDING]);
        best = x > best ? x : best;
    }
    return best;
}

/* One rank's memory by kind, but the collective library's temporaries beyond the plan's (rank_coll_temp); mpi[0]
 * and mpi[1]: the plan's reduce-scatter and all-reduce temporaries (mem holds their sum). */
static llm4d_code rank_memory(const llm4d_predictor *pr, const llm4d_config *cfg, const llm4d_pp_plan *pp,
                              const llm4d_topology *topo, double mem[LLM4D_PM_N], double mpi[2], llm4d_err *err) {
    llm4d_memplan mp;
    const int R = pr->cluster.ranks_per_node;
    /* the groups' paths as comm_shm.c chooses them for R ranks per host */
    llm4d_memplan_paths paths;
    llm4d_memplan_paths_predict_memo(pr->memo, cfg, topo, R, &paths);
    LLM4D_TRY(llm4d_memplan_make_memo(cfg, topo, pp, pr->be, &paths, pr->memo, &mp, err));
    for (int c = 0; c < LLM4D_MEM_NCATEGORIES; c++) mem[c] = (double)mp.cat[c];
    mem[LLM4D_PM_COPIES] = (double)mp.weight_copies;
    mem[LLM4D_PM_OPERANDS] = (double)mp.operands;
    mem[LLM4D_PM_MPI] = (double)llm4d_memplan_mpi(&mp);
    mpi[0] = (double)mp.mpi_temporaries, mpi[1] = (double)mp.mpi_allreduce;
    mem[LLM4D_PM_SHM] = (double)mp.shm_segments;
    mem[LLM4D_PM_LIBS] = (double)mp.libraries;
    /* a rank alone on its host still runs MPI when the job has several: its base is a 2-rank job's (with a hostfile
     * the calibration measures that one across hosts) */
    mem[LLM4D_PM_BASE] = base_bytes(pr->prof, topo->world_size > 1 && R < 2 ? 2 : R);
    mem[LLM4D_PM_DATA] = pr->data_bytes;
    mem[LLM4D_PM_RESIDUAL] = llm4d_profile_residual(pr->prof, (double)llm4d_memplan_total(&mp)); /* by the plan */
    return LLM4D_OK;
}

/* The temporaries of the rank's largest collectives, from its priced trace: mem[LLM4D_PM_MPI] becomes the larger
 * of the plan's (which models the all-reduces' and ZeRO's reduce-scatters') and the largest one measured. */
static llm4d_code rank_coll_temp(const llm4d_predictor *pr, const llm4d_config *cfg, const llm4d_pp_plan *pp,
                                 const llm4d_topology *topo, double mem[LLM4D_PM_N], llm4d_err *err) {
    const int R = pr->cluster.ranks_per_node;
    const llm4d_pricer pc = {pr->prof, pr->cluster.threads, llm4d_memplan_precision(cfg)};
    const llm4d_stagecost *sc;
    LLM4D_TRY(llm4d_stagecost_get(pr->cache, &pc, &(llm4d_stage_ref){cfg, topo, pp}, pr->be, R,
                                  llm4d_group_hosts(topo, LLM4D_AXIS_MODEL, R), &sc, err));
    const double measured = coll_temp(pr, cfg, topo, sc);
    if (measured > mem[LLM4D_PM_MPI]) mem[LLM4D_PM_MPI] = measured;
    return LLM4D_OK;
}

static double sum(const double *x, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += x[i];
    return s;
}

/* The distinct ranks of a stage within its sharding group: the group's first rank, and the others by how many
 * children they reduce-scatter from over Open MPI where the group reduce-scatters there (rs_mpi; memplan.h
 * llm4d_memplan_rs_children: each holds a temporary) and by their index's parity where the profile measured
 * collectives (parity: price.h llm4d_coll_temp_of). class_of[i] is index i's class, rep[k] class k's first index
 * (index 1, a leaf, is class 1's); returns the number of classes (at most 2 + 2 log2 N). A search asks this of
 * every layout: classes that cannot differ are not made. */
static int sharding_classes(int N, int rs_mpi, int parity, int *class_of, int *rep) {
    int n = 0, key[LLM4D_MAX_SH_CLASSES];
    for (int i = 0; i < N; i++) {
        const int kv = i == 0 ? -1 : 2 * (rs_mpi ? llm4d_memplan_rs_children(N, i) : 0) + (parity ? i % 2 : 0);
        int k = 0;
        while (k < n && key[k] != kv) k++;
        if (k == n) key[n] = kv, rep[n] = i, n++;
        class_of[i] = k;
    }
    return n;
}

/* The distinct ranks of a layout, per stage: the sharding classes, and where a flat data-parallel group's
 * all-reduce leaves temporaries by rank (price.h llm4d_coll_temp_of: the first, the odd, the other even ranks),
 * its data index's class too. */
typedef struct {
    int dcs, ks;       /* data classes (1 to 3), sharding classes: a stage has dcs x ks */
    const int *sh_of;  /* [N] a sharding index's class */
    int nruns;         /* the sharding indices as runs of one class: */
    const int *run_first, *run_len; /* [nruns] each run's first index and length */
} class_map;

static int class_at(const class_map *m, int pipe, int data, int sh) {
    const int dc = m->dcs == 1 || data == 0 ? 0 : data % 2 ? 1 : 2;
    return (pipe * m->dcs + dc) * m->ks + m->sh_of[sh];
}

/* The rank walk of ranks_and_hosts without visiting every rank: ranks are (data, pipe, sharding, model) with the
 * model index fastest, so one data replica is, stage by stage, runs of mp ranks of each sharding index's class
 * (consecutive indices of one class as one run), and the replicas repeat it. A host inside one run sums R equal
 * peaks; its sum is made once per run by the same additions one at a time, so every sum is bit for bit the one
 * the walk makes. When a replica fills whole hosts the hosts repeat with it: one replica is walked. */
static void ranks_by_runs(int R, int dp, int P, int N, int MP, const class_map *m, const double *cls,
                          llm4d_prediction *out) {
    const long long per = (long long)P * N * MP, world = per * dp;
    /* replicas filling whole hosts: one of each data class (data indices 0, 1, 2 are the first, an odd, an even) */
    const int reps = per % R == 0 ? (m->dcs < dp ? m->dcs : dp) : dp;
    int in_host = 0;
    out->peak_class = 0;
    double host = 0;
    for (int rep = 0; rep < reps; rep++) {
        long long r = rep * per;
        for (int p = 0; p < P; p++)
            for (int u = 0; u < m->nruns; u++) {
                const int c = class_at(m, p, rep, m->run_first[u]);
                const double b = cls[c];
                long long len = (long long)m->run_len[u] * MP;
                if (b > out->peak_bytes) out->peak_bytes = b, out->peak_rank = (int)r, out->peak_class = c;
                r += len;
                while (len > 0 && in_host > 0) { /* the host begun before the run */
                    host += b, len--;
                    if (++in_host == R) {
                        if (host > out->host_bytes) out->host_bytes = host;
                        host = 0, in_host = 0;
                    }
                }
                if (len >= R) { /* whole hosts of this class */
                    double full = 0;
                    for (int q = 0; q < R; q++) full += b;
                    if (full > out->host_bytes) out->host_bytes = full;
                    len %= R;
                }
                for (; len > 0; len--) host += b, in_host++; /* the start of the next host */
            }
    }
    if (in_host > 0 && reps * per == world && host > out->host_bytes) out->host_bytes = host; /* the last, short */
}

/* The memory of each class of ranks: its peak, its bytes by kind, and the trainer's plan of it. */
typedef struct {
    const double *peak;
    const double (*kinds)[LLM4D_PM_N];
    const double *plan;
} class_mem;

/* Every rank's peak from its class (fill: rank_peak too, when asked), the largest and the fullest host: rank by
 * rank (the oracle, and whenever every rank's peak is wanted), or by runs. The layout is d's. */
static llm4d_code ranks_and_hosts(const llm4d_predictor *pr, const llm4d_dist_config *d, const class_map *m,
                                  const class_mem *cm, int fill, llm4d_prediction *out, llm4d_err *err) {
    const int P = d->pp_degree, N = d->sharding_degree, world = d->dp_degree * P * N * d->mp_degree;
    const double *cls = cm->peak, (*cmem)[LLM4D_PM_N] = cm->kinds, *cplan = cm->plan;
    const int R = pr->cluster.ranks_per_node > 0 ? pr->cluster.ranks_per_node : world;
    if (fill) {
        free(out->rank_peak);
        free(out->rank_plan);
        out->rank_peak = pr->per_rank ? calloc((size_t)world, sizeof *out->rank_peak) : NULL;
        out->rank_plan = pr->per_rank ? calloc((size_t)world, sizeof *out->rank_plan) : NULL;
        if (pr->per_rank && (!out->rank_peak || !out->rank_plan)) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    }
    llm4d_topology t0;
    LLM4D_TRY(llm4d_topology_init(&t0, world, 0, d->dp_degree, P, N, d->mp_degree, err));
    out->peak_bytes = 0, out->host_bytes = 0;
    if (!pr->exhaustive && !out->rank_peak) {
        ranks_by_runs(R, d->dp_degree, P, N, d->mp_degree, m, cls, out);
        if (out->peak_bytes > 0) memcpy(out->mem, cmem[out->peak_class], sizeof out->mem);
        return LLM4D_OK;
    }
    double host = 0;
    /* every rank's class from its coordinates (ranks fill a host's slots in order, as Open MPI maps them) */
    for (int r = 0; r < world; r++) {
        int rem = r, idx[LLM4D_NAXES];
        for (int a = LLM4D_NAXES - 1; a >= 0; a--) idx[a] = rem % t0.degree[a], rem /= t0.degree[a];
        const int c = class_at(m, idx[LLM4D_AXIS_PIPE], idx[LLM4D_AXIS_DATA], idx[LLM4D_AXIS_SHARDING]);
        const double b = cls[c];
        if (out->rank_peak) out->rank_peak[r] = b;
        if (out->rank_plan) out->rank_plan[r] = cplan[c];
        if (b > out->peak_bytes) {
            out->peak_bytes = b, out->peak_rank = r;
            memcpy(out->mem, cmem[c], sizeof out->mem);
        }
        host += b;
        if ((r + 1) % R == 0 || r == world - 1) {
            if (host > out->host_bytes) out->host_bytes = host;
            host = 0;
        }
    }
    return LLM4D_OK;
}

llm4d_code llm4d_predict_memory(const llm4d_predictor *pr, const llm4d_config *cfg, const llm4d_pp_plan *pp,
                                llm4d_prediction *out, llm4d_err *err) {
    const llm4d_dist_config *d = &cfg->dist;
    const int P = d->pp_degree, N = d->sharding_degree, world = d->dp_degree * P * N * d->mp_degree;
    /* the distinct ranks: each stage, as each class of its ZeRO group's ranks and of a flat data group's, made
     * only where they can differ: library temporaries by a rank's parity where the profile measured collectives,
     * ZeRO's reduce-scatter children where its group reduce-scatters over MPI */
    const int parity = pr->prof->n_colls > 0, dp = d->dp_degree;
    const int dcs = parity && N <= 1 && dp > 1 ? (dp < 3 ? dp : 3) : 1;
    llm4d_topology t0; /* rank 0's: the grid the classes' first ranks are placed in */
    LLM4D_TRY(llm4d_topology_init(&t0, world, 0, dp, P, N, d->mp_degree, err));
    int rs_mpi = 0;
    if (N > 1) {
        llm4d_memplan_paths paths;
        llm4d_memplan_paths_predict_memo(pr->memo, cfg, &t0, pr->cluster.ranks_per_node, &paths);
        rs_mpi = !llm4d_memplan_rs_in_shm(&paths);
    }
    int *class_of = malloc((size_t)N * 3 * sizeof *class_of), rep[LLM4D_MAX_SH_CLASSES], nruns = 0;
    const int ks = class_of ? sharding_classes(N, rs_mpi, parity, class_of, rep) : 1;
    const int per_stage = dcs * ks, classes = P * per_stage;
    int *run_first = class_of ? class_of + N : NULL, *run_len = class_of ? class_of + 2 * N : NULL;
    for (int i = 0, j; class_of && i < N; i = j, nruns++) { /* made once per layout: the walk repeats them */
        for (j = i + 1; j < N && class_of[j] == class_of[i]; j++) {}
        run_first[nruns] = i, run_len[nruns] = j - i;
    }
    const class_map m = {dcs, ks, class_of, nruns, run_first, run_len};
    double *cls = calloc((size_t)classes, sizeof *cls);
    double (*cmem)[LLM4D_PM_N] = calloc((size_t)classes, sizeof *cmem);
    double (*cmpi)[2] = calloc((size_t)classes, sizeof *cmpi); /* each class's rank_memory mpi */
    free(out->stage_peak);
    out->stage_peak = calloc((size_t)P, sizeof *out->stage_peak);
    out->n_stages = P;
    llm4d_code rc = class_of && cls && cmem && cmpi && out->stage_peak ? LLM4D_OK
                                                               : llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    /* every class without its collectives' temporaries first: when that already overflows a host by
     * pr->reject_above, or one rank by pr->reject_rank_above, the layout is rejected without recording and pricing
     * its traces (the temporaries only add) */
    llm4d_topology *ct = malloc((size_t)classes * sizeof *ct);
    if (rc == LLM4D_OK && !ct) rc = llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    /* the fullest host holds at least the mean of the hosts: the classes planned so far, each times its ranks, over
     * the hosts. Once that alone is over pr->reject_above (with room for the sums' rounding), the layout is
     * rejected without planning its other classes (the search's large layouts overflow by far: most of their
     * classes were planned only to be rejected). */
    int *kcount = calloc((size_t)ks, sizeof *kcount), early = -1;
    if (rc == LLM4D_OK && !kcount) rc = llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    for (int i = 0; kcount && class_of && i < N; i++) kcount[class_of[i]]++;
    const int R = pr->cluster.ranks_per_node > 0 ? pr->cluster.ranks_per_node : world;
    const double hosts = (double)((world + R - 1) / R);
    double so_far = 0, lb_host = 0; /* bytes of the ranks of the classes planned; the host's bound at a rejection */
    /* a stage's ranks of one data index are N x mp consecutive ranks: when that is a multiple of the ranks per host,
     * every host holds ranks of one stage alone, at least R times the stage's lightest class */
    const int whole_hosts = (N * d->mp_degree) % R == 0;
    for (int s = 0; rc == LLM4D_OK && early < 0 && s < P; s++)
        /* data indices 0, 1, 2: the classes' first ranks */
        for (int dc = 0; rc == LLM4D_OK && early < 0 && dc < dcs; dc++)
            for (int k = 0; rc == LLM4D_OK && early < 0 && k < ks; k++) {
                const int idx[LLM4D_NAXES] = {dc, s, rep[k], 0}, c = class_at(&m, s, dc, rep[k]);
                llm4d_topology *topo = &ct[c];
                rc = llm4d_topology_init(topo, world, llm4d_topology_rank_at(&t0, idx), dp, P, N, d->mp_degree, err);
                const int children = rs_mpi && k > 1 ? llm4d_memplan_rs_children(N, rep[k]) : 0;
                if (rc == LLM4D_OK && children == 0) rc = rank_memory(pr, cfg, pp, topo, cmem[c], cmpi[c], err);
                if (rc == LLM4D_OK && children > 0) {
                    /* an inner rank plans as the leaf (class 1, index 1) but for its reduce-scatter temporaries,
                     * one per child as the first rank's (memplan.c mpi_temporaries): not planned again (a search
                     * over 1024 hosts meets sharding groups of 64 ranks, 7 classes) */
                    const int leaf = class_at(&m, s, dc, rep[1]), first = class_at(&m, s, dc, 0);
                    memcpy(cmem[c], cmem[leaf], sizeof cmem[c]);
                    cmpi[c][0] = cmpi[first][0] / llm4d_memplan_rs_children(N, 0) * children;
                    cmpi[c][1] = cmpi[leaf][1];
                    cmem[c][LLM4D_PM_MPI] = cmpi[c][0] + cmpi[c][1];
                }
                if (rc == LLM4D_OK && (pr->reject_above > 0 || pr->reject_rank_above > 0)) {
                    const long long dranks = dcs == 1 ? dp : dc == 0 ? 1 : dc == 1 ? dp / 2 : (dp - 1) / 2;
                    const double b = sum(cmem[c], LLM4D_PM_N);
                    so_far += (double)(dranks * kcount[k] * d->mp_degree) * b;
                    if (pr->reject_above > 0 && so_far / hosts > pr->reject_above * (1 + 1e-9))
                        early = c, lb_host = so_far / hosts;
                    /* a rank over its own memory already: the temporaries only raise one of its kinds, and the
                     * full peak is the same sum of them (no rounding room needed); the mean host stays a bound */
                    if (pr->reject_rank_above > 0 && b > pr->reject_rank_above) early = c, lb_host = so_far / hosts;
                }
                if (rc == LLM4D_OK && pr->reject_above > 0 && early < 0 && whole_hosts && dc == dcs - 1 &&
                    k == ks - 1) {
                    double least = -1; /* the stage's lightest class */
                    for (int e = 0; e < dcs; e++)
                        for (int f = 0; f < ks; f++) {
                            const double b = sum(cmem[class_at(&m, s, e, rep[f])], LLM4D_PM_N);
                            if (least < 0 || b < least) least = b;
                        }
                    if (R * least > pr->reject_above * (1 + 1e-9)) early = c, lb_host = R * least;
                }
            }
    free(kcount);
    out->bound = 0;
    /* the trainer's plan of each class: its kinds up to the libraries' working set, before rank_coll_temp adds the
     * temporaries of the rank's largest collectives (the planner's, beyond the plan's own) */
    double *cplan = calloc((size_t)classes, sizeof *cplan);
    if (rc == LLM4D_OK && !cplan) rc = llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    for (int c = 0; rc == LLM4D_OK && c < classes; c++) cplan[c] = sum(cmem[c], LLM4D_PM_LIBS + 1);
    if (rc == LLM4D_OK && early >= 0) { /* bounds: the mean host, the largest class planned */
        out->host_bytes = lb_host, out->peak_bytes = 0, out->peak_rank = 0, out->peak_class = 0, out->bound = 1;
        for (int c = 0; c < classes; c++) {
            const double b = sum(cmem[c], LLM4D_PM_N); /* 0: not planned */
            if (b > out->peak_bytes) out->peak_bytes = b, out->peak_rank = ct[c].rank, out->peak_class = c;
        }
        memcpy(out->mem, cmem[out->peak_class], sizeof out->mem);
    } else if (rc == LLM4D_OK && pr->reject_above > 0) {
        for (int c = 0; c < classes; c++) cls[c] = sum(cmem[c], LLM4D_PM_N);
        rc = ranks_and_hosts(pr, d, &m, &(class_mem){cls, (const double(*)[LLM4D_PM_N])cmem, cplan}, 0, out, err);
        /* peak and host: lower bounds (no class is over reject_rank_above here: it would have stopped above) */
        out->bound = rc == LLM4D_OK && out->host_bytes > pr->reject_above;
    }
    for (int c = 0; rc == LLM4D_OK && !out->bound && c < classes; c++)
        rc = rank_coll_temp(pr, cfg, pp, &ct[c], cmem[c], err);
    free(ct);
    if (rc == LLM4D_OK) {
        for (int c = 0; c < classes; c++) cls[c] = sum(cmem[c], LLM4D_PM_N);
        for (int c = 0; c < classes; c++)
            if (cls[c] > out->stage_peak[c / per_stage]) out->stage_peak[c / per_stage] = cls[c];
    }
    if (rc == LLM4D_OK && !out->bound)
        rc = ranks_and_hosts(pr, d, &m, &(class_mem){cls, (const double(*)[LLM4D_PM_N])cmem, cplan}, 1, out, err);
    free(cplan);
    free(class_of);
    free(cls);
    free(cmem);
    free(cmpi);
    return rc;
}

llm4d_code llm4d_predict(const llm4d_predictor *pr, const llm4d_config *cfg, const llm4d_pp_plan *pp,
                         llm4d_prediction *out, llm4d_err *err) {
    double *sp = out->stage_peak, *rp = out->rank_peak, *rq = out->rank_plan;
    memset(out, 0, sizeof *out);
    out->stage_peak = sp, out->rank_peak = rp, out->rank_plan = rq;
    out->layout = llm4d_layout_of(cfg);
    out->world = llm4d_layout_world(&out->layout);
    out->M = (int)cfg->accumulate_steps;
    out->ranks_on_host = pr->cluster.ranks_per_node;
    LLM4D_TRY(llm4d_predict_memory(pr, cfg, pp, out, err));
    return llm4d_predict_time(pr, cfg, pp, out, err);
}
