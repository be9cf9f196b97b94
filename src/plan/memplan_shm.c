/* memplan_shm.c — the shared-memory segments of a rank's collectives (comm/comm_shm.h) in its memory plan.
 *
 * Every group of size > 1 whose ranks on a host collect through a segment maps one; what the rank holds of it is
 * the pages its collectives touch (comm/shm_footprint.c), so the plan needs each group's largest all-reduce,
 * reduce-scatter block and all-gather block, which follow from the layout and the engines:
 *   data       data parallel without ZeRO: the gradient buckets, all-reduced (the largest holds a parameter group)
 *   sharding   ZeRO: gradients reduce-scattered and parameters all-gathered, a group's shard per block
 *   dp         ZeRO hybrid with data parallel: the owned shards all-reduced (stage >= 2: all of them in one call)
 *   model      tensor parallel: activations all-reduced, or with sequence parallelism all-gathered and
 *              reduce-scattered, and the partial gradients of the replicated tensors all-reduced once a step
 *   embedding  pipeline: the tied embedding's gradient all-reduced between the first and the last stage (with ZeRO:
 *              the part of it the rank's shard holds, model/shard_range.h llm4d_shard_entry_part)
 * On a CPU and one host, the data group's gradients are shared in place (data_parallel.h): their all-reduces take no
 * slot; instead the rank touches, in each peer's buffer, the slice of every bucket it sums.
 * Gradient payloads are bf16 with grad_comm_dtype bfloat16. Groups that carry only MPI's traffic (the world, the
 * pipeline's point to point, an unused one) hold the segment's header. A group spanning hosts reduces hierarchically:
 * a reduce-scatter and an all-gather of its host's ranks in the segment, the rest on MPI.
 *
 * The same messages size the temporaries of the all-reduces that go to Open MPI instead (comm_path mpi, a group
 * that spans hosts unevenly or has one rank per host): llm4d_memplan_mpi_allreduce_bytes. */
#include <stdlib.h>
#include <string.h>

#include "comm/comm_shm.h"
#include "parallel/data_parallel.h"
#include "model/params.h"
#include "model/shard_range.h"
#include "parallel/sharding.h"
#include "parallel/tensor_parallel.h"
#include "plan/memplan.h"

/* The axis of the group kinds that are one axis of the grid (the others are the world, the data group and the
 * embedding group). */
static const int kind_axis[LLM4D_SHMG_N] = {[LLM4D_SHMG_DP] = LLM4D_AXIS_DATA, [LLM4D_SHMG_PIPE] = LLM4D_AXIS_PIPE,
                                            [LLM4D_SHMG_SHARDING] = LLM4D_AXIS_SHARDING,
                                            [LLM4D_SHMG_MODEL] = LLM4D_AXIS_MODEL};

/* Member i of this rank's group kind k (n members: members()), in world ranks, which grow with i in every kind. */
static int member(const llm4d_topology *t, int k, int i) {
    int idx[LLM4D_NAXES];
    switch (k) {
    case LLM4D_SHMG_WORLD: return i;
    case LLM4D_SHMG_DATA: /* dp x sharding, by data rank */
        memcpy(idx, t->index, sizeof idx);
        idx[LLM4D_AXIS_DATA] = i / t->degree[LLM4D_AXIS_SHARDING];
        idx[LLM4D_AXIS_SHARDING] = i % t->degree[LLM4D_AXIS_SHARDING];
        return llm4d_topology_rank_at(t, idx);
    case LLM4D_SHMG_EMBEDDING: /* the stages holding the first and the last virtual stage: 0 and P - 1 */
        return llm4d_topology_group_member(t, LLM4D_AXIS_PIPE, i ? t->degree[LLM4D_AXIS_PIPE] - 1 : 0);
    default: return llm4d_topology_group_member(t, (llm4d_axis)kind_axis[k], i);
    }
}

/* Members of this rank's group kind k (0 when the rank is in none of that kind). */
static int members(const llm4d_topology *t, int k) {
    switch (k) {
    case LLM4D_SHMG_WORLD: return t->world_size;
    case LLM4D_SHMG_DATA: return t->data_world;
    case LLM4D_SHMG_EMBEDDING: {
        const int P = t->degree[LLM4D_AXIS_PIPE], s = t->index[LLM4D_AXIS_PIPE];
        return P >= 2 && (s == 0 || s == P - 1) ? 2 : 0;
    }
    default: return t->degree[kind_axis[k]];
    }
}

int llm4d_memplan_path_ranks(const llm4d_config *cfg, int here, int equal) {
    return strcmp(cfg->dist.comm_path, "mpi") && equal && here > 1 && here <= LLM4D_SHM_MAX_RANKS ? here : 0;
}

void llm4d_memplan_paths_predict(const llm4d_config *cfg, const llm4d_topology *t, int ranks_per_node,
                                 llm4d_memplan_paths *out) {
    memset(out, 0, sizeof *out);
    out->slot_bytes = (size_t)cfg->dist.comm_chunk_kb << 10;
    if (!strcmp(cfg->dist.comm_path, "mpi") || t->world_size < 2) return;
    const int R = ranks_per_node > 0 ? ranks_per_node : t->world_size, me = t->rank / R;
    for (int k = 0; k < LLM4D_SHMG_N; k++) {
        const int n = members(t, k);
        if (n < 2) continue;
        /* ranks fill hosts in order and members grow, so each host's members are one run: comm_shm.c's rule is
         * the same number on every host, more than one (the world needs no walk) */
        int hosts = 0, here = 0, run = 0, first = -1, equal = 1, host = -1;
        if (k == LLM4D_SHMG_WORLD) {
            here = t->world_size < R ? t->world_size : R, hosts = (t->world_size + R - 1) / R;
            equal = t->world_size % here == 0;
        } else {
            for (int i = 0; i <= n; i++) {
                const int h = i < n ? member(t, k, i) / R : -1;
                if (h == host) { run++; continue; }
                if (host >= 0) equal &= first < 0 || run == first, first = first < 0 ? run : first;
                if (host == me) here = run;
                host = h, run = 1, hosts += i < n;
            }
        }
        if (llm4d_memplan_path_ranks(cfg, here, equal)) out->host_ranks[k] = here, out->hosts[k] = hosts;
    }
}

void llm4d_memplan_paths_of(const llm4d_comm_groups *g, const llm4d_config *cfg, llm4d_memplan_paths *out) {
    memset(out, 0, sizeof *out);
    out->slot_bytes = (size_t)cfg->dist.comm_chunk_kb << 10;
    const llm4d_comm *c[LLM4D_SHMG_N] = {[LLM4D_SHMG_WORLD] = g->world, [LLM4D_SHMG_DATA] = g->data,
                                         [LLM4D_SHMG_DP] = g->axis[LLM4D_AXIS_DATA],
                                         [LLM4D_SHMG_PIPE] = g->axis[LLM4D_AXIS_PIPE],
                                         [LLM4D_SHMG_SHARDING] = g->axis[LLM4D_AXIS_SHARDING],
                                         [LLM4D_SHMG_MODEL] = g->axis[LLM4D_AXIS_MODEL]};
    for (int k = 0; k < LLM4D_SHMG_N; k++)
        if (c[k]) out->host_ranks[k] = llm4d_shm_host_ranks(c[k], &out->hosts[k]);
    /* the embedding group is split from the pipeline's by the pipeline engine, later: its first and last stage
     * (the middle stages drop the group they are split into, and so do the ends of an untied head: pipeline.c) */
    const llm4d_comm *pp = g->axis[LLM4D_AXIS_PIPE];
    const int end = pp && (pp->rank == 0 || pp->rank == pp->size - 1);
    if (end && !cfg->model.untied && out->host_ranks[LLM4D_SHMG_PIPE] > 0 && out->hosts[LLM4D_SHMG_PIPE] == 1)
        out->host_ranks[LLM4D_SHMG_EMBEDDING] = 2, out->hosts[LLM4D_SHMG_EMBEDDING] = 1;
}

static size_t max_z(size_t a, size_t b) { return a > b ? a : b; }

/* Bytes of the pages of one peer's shared gradient buffer that a rank of n sums in: per bucket, its slice of the
 * bucket (comm_shm.c: ceil(count / n) elements rounded up to cache lines), in whole pages of the buffer; the most
 * any of the n ranks sums in. A slice's pages differ by a page or two from one rank to the next (where it meets the
 * buffer's page boundaries); planning each rank the most keeps a flat data group's ranks one class for the planner
 * (plan/predict.c), which plans one rank for all of them: gpt2-tiny dp4's ranks 1-3 were planned 0.02 MiB more by
 * the trainer than by `llm4d plan --evaluate` when each rank planned its own slice. */
static size_t shared_pages(const llm4d_param_table *tab, size_t bucket_bytes, size_t esz, int n) {
    const int G = tab->n_groups;
    int *of = calloc((size_t)G, sizeof *of), *ng = calloc((size_t)G, sizeof *ng);
    size_t *lo = calloc((size_t)G, sizeof *lo), *hi = calloc((size_t)G, sizeof *hi), most = 0;
    const int nb = of && ng && lo && hi ? llm4d_dp_buckets(tab, bucket_bytes, of, lo, hi, ng) : 0;
    const size_t line = LLM4D_SHM_LINE / esz, P = 4096;
    for (int r = 0; r < n; r++) {
        size_t bytes = 0;
        for (int b = 0; b < nb; b++) {
            const size_t count = hi[b] - lo[b], S = ((count + (size_t)n - 1) / (size_t)n + line - 1) / line * line;
            const size_t a = (size_t)r * S, e = (size_t)(r + 1) * S < count ? (size_t)(r + 1) * S : count;
            if (a < e) bytes += (((lo[b] + e) * esz - 1) / P - (lo[b] + a) * esz / P + 1) * P;
        }
        most = max_z(most, bytes);
    }
    free(of), free(ng), free(lo), free(hi);
    return most;
}

/* The largest gradient bucket of a flat data group, in elements (data_parallel.h: one all-reduce each). */
static size_t largest_bucket(const llm4d_param_table *tab, size_t bucket_bytes) {
    const int G = tab->n_groups;
    int *of = calloc((size_t)G, sizeof *of), *ng = calloc((size_t)G, sizeof *ng);
    size_t *lo = calloc((size_t)G, sizeof *lo), *hi = calloc((size_t)G, sizeof *hi), best = 0;
    const int nb = of && ng && lo && hi ? llm4d_dp_buckets(tab, bucket_bytes, of, lo, hi, ng) : 0;
    for (int b = 0; b < nb; b++) best = max_z(best, hi[b] - lo[b]);
    if (!nb) best = tab->total; /* without room to walk them: the whole buffer, an upper bound */
    free(of), free(ng), free(lo), free(hi);
    return best;
}

/* What each group kind's collectives carry (use, for a segment's slots) and the bytes of the largest all-reduce
 * each issues (allreduce, as one call: a flat data group's largest bucket, not its largest slot), and the pages of
 * the peers' shared gradient buffers the rank sums in (*shared). */
static void group_uses(const llm4d_config *cfg, const llm4d_topology *t, const llm4d_param_table *tab,
                       size_t crossing, const llm4d_memplan_paths *paths, llm4d_shm_use use[LLM4D_SHMG_N],
                       size_t allreduce[LLM4D_SHMG_N], size_t *shared) {
    const llm4d_dist_config *d = &cfg->dist;
    const int N = d->sharding_degree, sharded = N > 1;
    const size_t gsz = strcmp(d->grad_comm_dtype, "bfloat16") ? sizeof(float) : 2;
    size_t group_max = 0, wte_max = 0, partial = 0; /* elements */
    for (int g = 0; g < tab->n_groups; g++) group_max = max_z(group_max, tab->g[g].hi - tab->g[g].lo);
    for (int i = 0; i < tab->n; i++) { /* what a ZeRO rank keeps of it: its shard's part (the most any rank keeps,
                                        * so that a sharding group's ranks stay one class for the planner) */
        if (tab->p[i].kind != LLM4D_P_WTE) continue;
        for (int r = 0; r < (sharded ? N : 1); r++) {
            size_t j0, j1;
            if (llm4d_shard_entry_part(tab, sharded ? N : 1, r, i, &j0, &j1)) wte_max = max_z(wte_max, j1 - j0);
        }
    }
    partial = llm4d_tensor_parallel_bytes(tab) / sizeof(float);
    memset(use, 0, LLM4D_SHMG_N * sizeof *use);
    *shared = 0; /* the pages of the peers' gradient buffers this rank sums in (data_parallel.h) */
    const int nd = paths->host_ranks[LLM4D_SHMG_DATA];
    if (!sharded && t->data_world > 1 &&
        llm4d_dp_grads_in_shm(llm4d_backend_host_addressable(cfg->device), nd, paths->hosts[LLM4D_SHMG_DATA], NULL)) {
        use[LLM4D_SHMG_DATA].allreduce = sizeof(double); /* the slots carry the loss's sums only */
        *shared = (size_t)(nd - 1) * shared_pages(tab, (size_t)d->bucket_size_bytes, gsz, nd);
    } else if (!sharded && t->data_world > 1) {
        use[LLM4D_SHMG_DATA].allreduce = group_max * gsz;
    }
    if (sharded) { /* a block is a group's shard (model/shard_range.h) */
        llm4d_shard_sizes z;
        llm4d_shard_ranges(tab, N, 0, NULL, NULL, NULL, &z);
        use[LLM4D_SHMG_SHARDING].rs_block = z.max_shard * gsz;
        use[LLM4D_SHMG_SHARDING].ag_block = z.max_shard * sizeof(float);
        if (t->degree[LLM4D_AXIS_DATA] > 1) /* sharded gradients: the whole local shard in one all-reduce */
            use[LLM4D_SHMG_DP].allreduce =
                (llm4d_sharding_traits(d).grads_whole ? z.max_shard : z.local_total) * sizeof(float);
    }
    if (t->degree[LLM4D_AXIS_MODEL] > 1) {
        llm4d_shm_use *u = &use[LLM4D_SHMG_MODEL];
        if (cfg->model.sequence_parallel) {
            u->rs_block = u->ag_block = crossing * sizeof(float);
            u->allreduce = partial * sizeof(float);
        } else {
            u->allreduce = crossing * sizeof(float);
        }
    }
    /* the tied embedding's gradient between the first and the last stage; an untied head has no such group */
    use[LLM4D_SHMG_EMBEDDING].allreduce = cfg->model.untied ? 0 : wte_max * sizeof(float);
    for (int k = 0; k < LLM4D_SHMG_N; k++) allreduce[k] = use[k].allreduce;
    if (!sharded && t->data_world > 1)
        allreduce[LLM4D_SHMG_DATA] = largest_bucket(tab, (size_t)d->bucket_size_bytes) * gsz;
}

size_t llm4d_memplan_shm_bytes(const llm4d_config *cfg, const llm4d_topology *t, const llm4d_param_table *tab,
                               size_t crossing, const llm4d_memplan_paths *paths) {
    llm4d_shm_use use[LLM4D_SHMG_N];
    size_t allreduce[LLM4D_SHMG_N], shared;
    group_uses(cfg, t, tab, crossing, paths, use, allreduce, &shared);
    size_t bytes = shared;
    for (int k = 0; k < LLM4D_SHMG_N; k++) {
        const int n = paths->host_ranks[k];
        if (n < 2) continue;
        llm4d_shm_use u = use[k];
        if (paths->hosts[k] > 1) /* hierarchical: the all-reduce's host phases; reduce-scatter and all-gather on MPI */
            u = (llm4d_shm_use){0, u.allreduce / (size_t)n, u.allreduce / (size_t)n};
        bytes += llm4d_shm_resident(n, paths->slot_bytes, u);
    }
    return bytes;
}

/* Members of group kind k the rank is in that it all-reduces with: the world and the pipeline carry no all-reduce
 * of a size that matters (the loss's sums, point to point). */
static int reduces(const llm4d_topology *t, int k) {
    return k != LLM4D_SHMG_WORLD && k != LLM4D_SHMG_PIPE && members(t, k) > 1;
}

size_t llm4d_memplan_mpi_allreduce_bytes(const llm4d_config *cfg, const llm4d_topology *t,
                                         const llm4d_param_table *tab, size_t crossing,
                                         const llm4d_memplan_paths *paths) {
    static const llm4d_memplan_paths none; /* NULL: every group on MPI */
    if (!paths) paths = &none;
    llm4d_shm_use use[LLM4D_SHMG_N];
    size_t allreduce[LLM4D_SHMG_N], shared, best = 0;
    group_uses(cfg, t, tab, crossing, paths, use, allreduce, &shared);
    for (int k = 0; k < LLM4D_SHMG_N; k++) {
        if (!reduces(t, k)) continue;
        const int n = paths->host_ranks[k];
        if (n < 2) best = max_z(best, allreduce[k]);                      /* all of it on MPI */
        else if (paths->hosts[k] > 1) best = max_z(best, allreduce[k] / (size_t)n); /* the hosts' phase on MPI */
    }
    return best;
}
