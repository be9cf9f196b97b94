/* memplan.c — a rank's memory plan: what the rank of a layout will allocate, as a pure function of the
 * configuration, its place in the topology and the backend's size functions (memplan.h).
 *
 * A layout that cannot fit should be refused in a second with the numbers, not after minutes of allocation and an
 * out-of-memory kill (gpt3-175b in one process needs ~2.8 TB of model states). Every buffer of a step is
 * allocated once, before step 1, by the model (its parameters, gradients, activation slots and workspaces) and
 * the engines (Adam states, ZeRO shards and buffers, the sequence-parallel and pipeline buffers), so the plan is
 * exact: the model's share comes from running its allocation code in counting mode (llm4d_gpt_plan), each
 * engine's from the size function its init uses (a forward-only stack's, for `llm4d eval`: no gradients, no
 * optimizer state, by the same functions). The trainer (train/memplan_check.c) makes it for its own rank before
 * allocating and refuses a plan that does not fit; the planner makes it for every rank of every layout it
 * considers. It lives here, below both, so that the trainer may call the planner (train/predict_run.c) without
 * the planner calling back into the trainer. tests/test_memory_plan.sh checks the plan per category against the
 * memory arena after allocation, and the total against the measured peak resident set. */
#include <stdlib.h>
#include <string.h>

#include "comm/comm_shm.h"
#include "core/hmap.h"
#include "model/batch.h"
#include "parallel/sharding.h"
#include "parallel/stack.h"
#include "plan/memplan.h"

static size_t weight_copies(const llm4d_config *cfg, llm4d_backend *be, size_t per_elem,
                            const llm4d_param_table *t) {
    if (!cfg->use_amp || !be->weights_changed) return 0;
    size_t n = 0;
    if (!llm4d_sharding_traits(&cfg->dist).params_whole) { /* copies of the two gathered groups */
        for (int g = 0; g < t->n_groups; g++)
            if (t->g[g].hi - t->g[g].lo > n) n = t->g[g].hi - t->g[g].lo;
        n *= 2;
    } else {
        for (int i = 0; i < t->n; i++)
            if (t->p[i].decay && t->p[i].kind != LLM4D_P_WPE) n += t->p[i].numel;
    }
    return n * per_elem;
}

/* Bytes Open MPI allocates for ZeRO's gradient reduce-scatters (every stage) on a rank of the sharding group: its
 * non-blocking MPI_Ireduce_scatter_block (libnbc) reduces the whole buffer to the group's first rank over a binomial
 * tree and scatters from there, so a rank holds a temporary the size of the group being reduce-scattered for each
 * child it receives from (index 0: one per power of two below N; index i > 0: one per power of two below i's lowest
 * set bit with i + 2^j < N), at most two groups at once (the gradient ring): the two largest groups; the leaves
 * none. Measured at GPT-2 124M sharding2, rank 0 against rank 1: stage 1 +147 MiB (the whole embedding is one group
 * there), stage 3 +50-60 MiB (two 27 MiB blocks); gpt2-tiny (8 blocks) sharding4 stage 1 and 2: rank 0 twice rank
 * 2's, ranks 1 and 3 none. A sharding group on the shared-memory path (comm/comm_shm.h) reduce-scatters in its
 * segment: no temporaries. */
int llm4d_memplan_rs_in_shm(const llm4d_memplan_paths *paths) {
    return paths && paths->host_ranks[LLM4D_SHMG_SHARDING] > 1 && paths->hosts[LLM4D_SHMG_SHARDING] == 1;
}

int llm4d_memplan_rs_children(int N, int i) {
    int children = 0;
    const int low = i == 0 ? N : (i & -i);
    for (int step = 1; step < low && i + step < N; step <<= 1) children++;
    return children;
}

static size_t mpi_temporaries(const llm4d_config *cfg, const llm4d_topology *topo, int rs_in_shm,
                              const llm4d_param_table *t) {
    const int N = cfg->dist.sharding_degree;
    if (N < 2 || rs_in_shm || cfg->forward_only) return 0; /* forward only (llm4d eval): no reduce-scatters */
    const int children = llm4d_memplan_rs_children(N, topo->index[LLM4D_AXIS_SHARDING]);
    size_t first = 0, second = 0;
    for (int g = 0; g < t->n_groups; g++) {
        const size_t len = t->g[g].hi - t->g[g].lo;
        if (len > first) second = first, first = len;
        else if (len > second) second = len;
    }
    return (size_t)children * (first + second) * sizeof(float);
}

llm4d_precision llm4d_memplan_precision(const llm4d_config *cfg) {
    if (!cfg->use_amp) return LLM4D_PREC_FP32;
    return strcmp(cfg->amp_dtype, "float16") == 0 ? LLM4D_PREC_FP16 : LLM4D_PREC_BF16;
}

/* ---- the planner's memo ----
 * A search asks for the plans of thousands of ranks whose model parts repeat (the same stage of the same split
 * under every ZeRO stage, offload, schedule and micro-batch choice): the model's counting run and its parameter
 * table, the slow parts (the table names every parameter), are kept by the part, the tensor-parallel context and
 * the activation layout they are a pure function of. The model's configuration is the same for a whole search; a
 * call with another one empties the memo. */

#define MEMO_KEY (21 + 2 * LLM4D_MAX_CHUNKS)

typedef struct {
    int used, has_plan;
    llm4d_param_table table;                 /* by the part alone (has_plan 0 entries) */
    size_t cat[LLM4D_MEM_NCATEGORIES];       /* the model's counting run (has_plan 1 entries) */
    size_t operands;                         /* and the backend's converted operands for it */
    size_t len;
    int64_t k[];                             /* the key without the chunk words past n_chunks (memo_compact) */
} memo_entry;

/* The paths comm_shm.c would choose (llm4d_memplan_paths_predict), by everything they depend on: comm_path is
 * "mpi", comm_chunk_kb, the topology's world, rank, degrees and indices, the ranks per host. */
#define PATHS_KEY (5 + 2 * LLM4D_NAXES)
typedef struct {
    int64_t k[PATHS_KEY];
    llm4d_memplan_paths paths;
} paths_entry;

struct llm4d_memplan_memo {
    llm4d_hmap paths;                        /* of paths_entry; not emptied with the model's entries: the paths
                                              * ignore the model */
    llm4d_model_config model;
    int have_model;
    size_t copy_bytes[LLM4D_PREC_TF32 + 1];  /* the backend's bytes per weight copy element, by precision (+1) */
    llm4d_hmap parts;                        /* of memo_entry */
};

llm4d_code llm4d_memplan_memo_create(llm4d_memplan_memo **out, llm4d_err *err) {
    llm4d_memplan_memo *m = calloc(1, sizeof *m);
    if (!m || !llm4d_hmap_init(&m->parts, 1024) || !llm4d_hmap_init(&m->paths, 256)) {
        if (m) llm4d_hmap_free(&m->parts), llm4d_hmap_free(&m->paths);
        free(m);
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    }
    *out = m;
    return LLM4D_OK;
}

static void memo_clear(llm4d_memplan_memo *m) {
    for (size_t i = 0; i < m->parts.cap; i++) {
        memo_entry *e = m->parts.s[i].e;
        if (!e) continue;
        if (e->used && !e->has_plan) llm4d_param_table_free(&e->table);
        free(e);
    }
    llm4d_hmap_clear(&m->parts);
}

void llm4d_memplan_memo_forget(llm4d_memplan_memo *m) {
    if (m) memo_clear(m);
}

void llm4d_memplan_memo_destroy(llm4d_memplan_memo *m) {
    if (!m) return;
    memo_clear(m);
    for (size_t i = 0; i < m->paths.cap; i++) free(m->paths.s[i].e);
    llm4d_hmap_free(&m->parts);
    llm4d_hmap_free(&m->paths);
    free(m);
}

static int same_paths(const void *entry, const void *key) {
    return !memcmp(((const paths_entry *)entry)->k, key, PATHS_KEY * sizeof(int64_t));
}

void llm4d_memplan_paths_predict_memo(llm4d_memplan_memo *m, const llm4d_config *cfg, const llm4d_topology *topo,
                                      int ranks_per_node, llm4d_memplan_paths *out) {
    if (!m) {
        llm4d_memplan_paths_predict(cfg, topo, ranks_per_node, out);
        return;
    }
    int64_t k[PATHS_KEY] = {!strcmp(cfg->dist.comm_path, "mpi"), cfg->dist.comm_chunk_kb, topo->world_size,
                            topo->rank, ranks_per_node};
    for (int a = 0; a < LLM4D_NAXES; a++) k[5 + a] = topo->degree[a], k[5 + LLM4D_NAXES + a] = topo->index[a];
    const uint64_t h = llm4d_hmap_hash(k, PATHS_KEY);
    llm4d_hslot *s = llm4d_hmap_find(&m->paths, h, same_paths, k);
    paths_entry *e = s && !s->e ? malloc(sizeof *e) : NULL;
    if (e) { /* without room: computed each time */
        memcpy(e->k, k, sizeof k);
        llm4d_memplan_paths_predict(cfg, topo, ranks_per_node, &e->paths);
        s->h = h, s->e = e, m->paths.n++;
    }
    if (s && s->e) *out = ((const paths_entry *)s->e)->paths;
    else llm4d_memplan_paths_predict(cfg, topo, ranks_per_node, out);
}

/* The key of a part (with_layout 0: the parameter table's) or of a part, context and layout (the counting run's). */
static void memo_key(int64_t k[MEMO_KEY], const llm4d_model_config *m, llm4d_precision prec,
                     const llm4d_model_part *p, const llm4d_gpt_layout *l, int with_layout) {
    int64_t *v = k;
    memset(k, 0, MEMO_KEY * sizeof *k);
    /* the precision and the layout's activation types in one word (they take 2 bits each) */
    *v++ = with_layout ? (int64_t)prec + 4 * ((int64_t)l->act + 4 * (int64_t)l->res) : 0;
    *v++ = m->sequence_parallel, *v++ = llm4d_recompute_blocks(m), *v++ = m->virtual_pp_degree;
    *v++ = with_layout, *v++ = p->mp_size, *v++ = p->mp_rank, *v++ = p->n_chunks;
    /* a chunk's blocks by their count, not their place: every block of the model is the same size and holds the
     * same activations, so the middle stages of a pipeline share one entry */
    for (int c = 0; c < LLM4D_MAX_CHUNKS; c++) *v++ = c < p->n_chunks ? p->layer_hi[c] - p->layer_lo[c] : 0;
    *v++ = p->embedding, *v++ = p->head, *v++ = p->sequence_parallel, *v++ = p->align, *v++ = p->wte_block_rows;
    if (!with_layout) return;
    *v++ = l->B, *v++ = l->T, *v++ = l->recompute, *v++ = l->split_backward, *v++ = l->no_params, *v++ = l->no_grads;
    for (int c = 0; c < LLM4D_MAX_CHUNKS; c++) *v++ = l->slots[c];
}

/* The key without the chunk words past n_chunks (k[7]): a key is mostly those (64 chunks' room); into c, its length
 * returned. */
static size_t memo_compact(const int64_t k[MEMO_KEY], int64_t c[MEMO_KEY]) {
    const int64_t n = k[7] < 0 ? 0 : k[7] > LLM4D_MAX_CHUNKS ? LLM4D_MAX_CHUNKS : k[7];
    const int64_t slots = 8 + LLM4D_MAX_CHUNKS + 11; /* where the layout's slots begin (memo_key) */
    size_t len = 0;
    for (int64_t i = 0; i < MEMO_KEY; i++) {
        if (i == 8 + n) i = 8 + LLM4D_MAX_CHUNKS;
        if (i == slots + n) i = slots + LLM4D_MAX_CHUNKS;
        if (i >= MEMO_KEY) break;
        c[len++] = k[i];
    }
    return len;
}

typedef struct {
    const int64_t *k;
    size_t len;
} memo_probe;

static int same_memo(const void *entry, const void *key) {
    const memo_entry *e = entry;
    const memo_probe *p = key;
    return e->len == p->len && !memcmp(e->k, p->k, p->len * sizeof *p->k);
}

/* The entry of key k (made, unused, when absent); NULL: out of memory. Entries never move. */
static memo_entry *memo_find(llm4d_memplan_memo *m, const int64_t k[MEMO_KEY]) {
    int64_t c[MEMO_KEY];
    const memo_probe p = {c, memo_compact(k, c)};
    const uint64_t h = llm4d_hmap_hash(c, p.len);
    llm4d_hslot *s = llm4d_hmap_find(&m->parts, h, same_memo, &p);
    if (!s) return NULL;
    if (!s->e) {
        memo_entry *e = calloc(1, sizeof *e + p.len * sizeof *c);
        if (!e) return NULL;
        e->len = p.len;
        memcpy(e->k, c, p.len * sizeof *c);
        s->h = h, s->e = e, m->parts.n++;
    }
    return s->e;
}

static llm4d_code part_table(llm4d_memplan_memo *m, const llm4d_model_config *model, const llm4d_model_part *part,
                             llm4d_param_table *own, const llm4d_param_table **t, llm4d_err *err);

/* The model's counting run and the backend's converted operands it implies, from the memo when it has them. */
static llm4d_code model_plan(llm4d_memplan_memo *m, const llm4d_gpt_spec *spec, llm4d_backend *be,
                             llm4d_precision prec, size_t cat[LLM4D_MEM_NCATEGORIES], size_t *operands,
                             llm4d_err *err) {
    const llm4d_model_config *model = spec->cfg;
    const llm4d_model_part *part = spec->part;
    const llm4d_tp *tp = spec->tp;
    const llm4d_gpt_layout *layout = spec->layout;
    llm4d_operand_sizes sizes = {0, 0, 0, 0, LLM4D_F32};
    if (!m) {
        LLM4D_TRY(llm4d_gpt_plan(model, part, tp, layout, cat, &sizes, err));
        *operands = be->operand_workspace ? be->operand_workspace(be, sizes, prec) : 0;
        return LLM4D_OK;
    }
    int64_t k[MEMO_KEY];
    memo_key(k, model, prec, part, layout, 1);
    memo_entry *s = memo_find(m, k);
    if (!s) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    if (!s->used) { /* the counting run with the memo's table of the part */
        llm4d_param_table own;
        const llm4d_param_table *t;
        LLM4D_TRY(part_table(m, model, part, &own, &t, err));
        LLM4D_TRY(llm4d_gpt_plan_table(model, part, tp, layout, t, s->cat, &sizes, err));
        s->operands = be->operand_workspace ? be->operand_workspace(be, sizes, prec) : 0;
        s->used = s->has_plan = 1;
    }
    for (int c = 0; c < LLM4D_MEM_NCATEGORIES; c++) cat[c] += s->cat[c];
    *operands = s->operands;
    return LLM4D_OK;
}

/* The part's parameter table: built into own (freed by the caller), or the memo's. */
static llm4d_code part_table(llm4d_memplan_memo *m, const llm4d_model_config *model, const llm4d_model_part *part,
                             llm4d_param_table *own, const llm4d_param_table **t, llm4d_err *err) {
    if (!m) {
        LLM4D_TRY(llm4d_param_table_build(own, model, part, err));
        *t = own;
        return LLM4D_OK;
    }
    int64_t k[MEMO_KEY];
    memo_key(k, model, LLM4D_PREC_FP32, part, NULL, 0);
    memo_entry *s = memo_find(m, k);
    if (!s) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    if (!s->used) {
        LLM4D_TRY(llm4d_param_table_build(&s->table, model, part, err));
        s->used = 1;
    }
    *t = &s->table;
    return LLM4D_OK;
}

llm4d_code llm4d_memplan_make_memo(const llm4d_config *cfg, const llm4d_topology *topo, const llm4d_pp_plan *pp,
                                   llm4d_backend *be, const llm4d_memplan_paths *paths, llm4d_memplan_memo *memo,
                                   llm4d_memplan *out, llm4d_err *err) {
    memset(out, 0, sizeof *out);
    const int rs_in_shm = llm4d_memplan_rs_in_shm(paths);
    if (memo) { /* the model's configuration but the keys' fields, which the layouts of a search change */
        llm4d_model_config mc = cfg->model;
        mc.sequence_parallel = 0, mc.use_recompute = 0, mc.virtual_pp_degree = 0;
        if (!memo->have_model || memcmp(&memo->model, &mc, sizeof mc)) {
            memo_clear(memo);
            memo->model = mc, memo->have_model = 1;
        }
    }
    const llm4d_precision prec = llm4d_memplan_precision(cfg);
    llm4d_model_part part;
    llm4d_gpt_layout layout;
    LLM4D_TRY(llm4d_stack_layout(cfg, topo, pp, &part, &layout, err));
    /* the tensor-parallel context as the model sees it: its size, this rank's index, sequence parallelism */
    const llm4d_tp tp = {.size = part.mp_size, .rank = part.mp_rank, .sp = part.sequence_parallel};
    /* the backend's converted operands: outside the arena's categories, like the weight copies */
    const llm4d_gpt_spec spec = {&cfg->model, &part, &tp, &layout};
    LLM4D_TRY(model_plan(memo, &spec, be, prec, out->cat, &out->operands, err));
    llm4d_param_table own;
    const llm4d_param_table *t = NULL;
    LLM4D_TRY(part_table(memo, &cfg->model, &part, &own, &t, err));
    const size_t crossing = (size_t)(tp.sp ? layout.B * layout.T / tp.size : layout.B * layout.T) *
                            (size_t)cfg->model.hidden_size; /* an activation crossing a pipeline stage */
    const llm4d_code rc =
        llm4d_stack_bytes(cfg, topo, pp, t, crossing * llm4d_ftype_size(layout.res), out->cat, err);
    size_t per_elem = 0;
    if (cfg->use_amp && be->weights_changed) { /* the backend asks its CPU each time: once per memo */
        if (!memo) per_elem = be->weight_copy_bytes(be, prec);
        else if (memo->copy_bytes[prec]) per_elem = memo->copy_bytes[prec] - 1;
        else per_elem = be->weight_copy_bytes(be, prec), memo->copy_bytes[prec] = per_elem + 1;
    }
    out->weight_copies = weight_copies(cfg, be, per_elem, t);
    out->mpi_temporaries = mpi_temporaries(cfg, topo, rs_in_shm, t);
    out->mpi_allreduce = llm4d_memplan_mpi_allreduce_bytes(cfg, topo, t, crossing, paths);
    if (paths) out->shm_segments = llm4d_memplan_shm_bytes(cfg, topo, t, crossing, paths);
    out->libraries = be->host_addressable ? LLM4D_MEMPLAN_LIBRARIES : 0;
    out->cat[LLM4D_MEM_WORKSPACE] += llm4d_stack_snapshot_bytes(cfg, topo, t); /* --async_save */
    if (!memo) llm4d_param_table_free(&own);
    LLM4D_TRY(rc);
    out->cat[LLM4D_MEM_WORKSPACE] += llm4d_batch_bytes((int)cfg->local_batch_size, cfg->data.max_seq_len);
    return LLM4D_OK;
}

llm4d_code llm4d_memplan_make(const llm4d_config *cfg, const llm4d_topology *topo, const llm4d_pp_plan *pp,
                              llm4d_backend *be, const llm4d_memplan_paths *paths, llm4d_memplan *out,
                              llm4d_err *err) {
    return llm4d_memplan_make_memo(cfg, topo, pp, be, paths, NULL, out, err);
}

size_t llm4d_memplan_mpi(const llm4d_memplan *p) { return p->mpi_temporaries + p->mpi_allreduce; }

size_t llm4d_memplan_total(const llm4d_memplan *p) {
    size_t n = p->weight_copies + p->operands + llm4d_memplan_mpi(p) + p->shm_segments + p->libraries;
    for (int c = 0; c < LLM4D_MEM_NCATEGORIES; c++) n += p->cat[c];
    return n;
}

