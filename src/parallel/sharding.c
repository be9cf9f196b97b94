/* sharding.c — ZeRO stages 1-3 over the model's parameter groups (see sharding.h for the scheme). */
#include "parallel/sharding.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/hash.h"
#include "core/timer.h"

static size_t group_len(const llm4d_sharding *s, int grp) {
    return s->g->table.group_hi[grp] - s->g->table.group_lo[grp];
}
static size_t group_lo(const llm4d_sharding *s, int grp) { return s->g->table.group_lo[grp]; }

/* The first communication failure inside a hook is kept and reported at the end of the step (hooks cannot
 * return errors through the model); later calls become no-ops so the step ends quickly. */
#define HOOK_TRY(expr)                                                                                           \
    do {                                                                                                         \
        if (!s->failed && (expr) != LLM4D_OK) s->failed = 1;                                                     \
    } while (0)

static void gather(llm4d_sharding *s, int grp, float *buf) {
    const double t0 = llm4d_now();
    HOOK_TRY(llm4d_comm_allgather(s->sh, s->local_params + s->shard_off[grp], buf, s->shard_len[grp],
                                  LLM4D_COMM_F32, &s->err));
    s->gather_wait_s += llm4d_now() - t0;
}

/* Finish the prefetch in flight (if any). */
static void prefetch_wait(llm4d_sharding *s) {
    if (s->prefetch_group < 0) return;
    const double t0 = llm4d_now();
    HOOK_TRY(llm4d_comm_wait(&s->prefetch_req, &s->err));
    s->gather_wait_s += llm4d_now() - t0;
}

/* Start gathering block/final-LayerNorm group grp into prefetch_buf (grp outside 1..G-1: nothing). */
static void prefetch_start(llm4d_sharding *s, int grp) {
    if (grp < 1 || grp >= s->n_groups || s->failed || !s->prefetch_on) return;
    prefetch_wait(s);
    s->prefetch_group = grp;
    HOOK_TRY(llm4d_comm_iallgather(s->sh, s->local_params + s->shard_off[grp], s->prefetch_buf, s->shard_len[grp],
                                   LLM4D_COMM_F32, &s->prefetch_req, &s->err));
}

/* Open MPI advances a non-blocking collective only inside MPI calls: the hooks call this between kernels. */
static void prefetch_progress(llm4d_sharding *s) {
    if (s->prefetch_group < 0 || !s->prefetch_req.comm || s->failed) return;
    int done = 0;
    HOOK_TRY(llm4d_comm_test(&s->prefetch_req, &done, &s->err));
}

static float *params_for(void *ctx, int grp, int pass) {
    llm4d_sharding *s = ctx;
    if (s->stage < 3) return s->g->params + group_lo(s, grp);
    const int last = s->n_groups - 1; /* the final LayerNorm's group */
    if (grp == 0) {
        if (!s->emb_param_valid) {
            gather(s, 0, s->emb_param_buf);
            /* forward goes on with block 0 (group 1); backward does not read the embeddings (the LM head runs its
             * backward inside the forward, gpt.h): only forward asks for them today */
            prefetch_start(s, pass == 0 ? 1 : last);
        }
        s->emb_param_valid = 1;
        return s->emb_param_buf;
    }
    if (s->prefetch_group == grp) {
        prefetch_wait(s);
        s->prefetch_hits++;
        float *t = s->layer_param_buf; /* the prefetched buffer becomes the current one */
        s->layer_param_buf = s->prefetch_buf;
        s->prefetch_buf = t;
    } else {
        prefetch_wait(s);
        s->prefetch_group = -1;
        gather(s, grp, s->layer_param_buf);
    }
    s->prefetch_group = -1;
    prefetch_start(s, pass == 0 ? grp + 1 : grp - 1);
    return s->layer_param_buf;
}

static void release(void *ctx, int grp, int pass) {
    llm4d_sharding *s = ctx;
    if (s->stage >= 3) prefetch_progress(s);
    if (s->stage < 3 || grp != 0) return;
    /* forward uses the embeddings twice (lookup, LM head): keep the gathered copy between them */
    if (pass == 0 && ++s->emb_fwd_uses < 2) return;
    s->emb_fwd_uses = 0;
    s->emb_param_valid = 0;
}

static float *grads_for(void *ctx, int grp) {
    llm4d_sharding *s = ctx;
    if (s->stage < 2) return s->g->grads + group_lo(s, grp);
    if (grp == 0) {
        if (!s->emb_grad_live) s->be->zero(s->be, s->emb_buf, group_len(s, 0) * sizeof(float));
        s->emb_grad_live = 1;
        return s->emb_buf;
    }
    s->be->zero(s->be, s->layer_grad_buf, group_len(s, grp) * sizeof(float));
    return s->layer_grad_buf;
}

static void grads_done(void *ctx, int grp) {
    llm4d_sharding *s = ctx;
    const size_t n = s->shard_len[grp];
    if (s->stage >= 3) prefetch_progress(s);
    if (s->stage < 2) {
        if (!s->last_micro) return; /* stage 1 accumulates whole gradients, then reduces once */
        float *full = s->g->grads + group_lo(s, grp);
        const double t0 = llm4d_now();
        HOOK_TRY(llm4d_comm_reduce_scatter(s->sh, full, s->recv, n, LLM4D_COMM_F32, &s->err));
        s->rs_s += llm4d_now() - t0;
        s->be->copy(s->be, full + (size_t)s->rank * n, s->recv, n * sizeof(float));
        return;
    }
    float *bucket = grp == 0 ? s->emb_buf : s->layer_grad_buf;
    const double t0 = llm4d_now();
    HOOK_TRY(llm4d_comm_reduce_scatter(s->sh, bucket, s->recv, n, LLM4D_COMM_F32, &s->err));
    s->rs_s += llm4d_now() - t0;
    float *dst = s->local_grads + s->shard_off[grp];
    for (size_t i = 0; i < n; i++) dst[i] += s->recv[i];
    if (grp == 0) s->emb_grad_live = 0;
}

llm4d_gpt_layout llm4d_sharding_layout(int stage, int N) {
    return (llm4d_gpt_layout){.group_align = N, .no_params = stage >= 3, .no_grads = stage >= 2};
}

static float *alloc_f(llm4d_sharding *s, llm4d_mem_category c, size_t n, int *ok) {
    float *p = s->be->alloc(s->be, s->mem, c, n * sizeof(float));
    if (!p) *ok = 0;
    return p;
}

/* The offload pool: one file-backed shared mapping in offload_dir, unlinked at once so nothing is left behind. */
static llm4d_code offload_pool(llm4d_sharding *s, const char *dir, size_t bytes, llm4d_err *err) {
    snprintf(s->offload_path, sizeof s->offload_path, "%s/.llm4d_offload_rank%d_XXXXXX", dir, s->rank);
    int fd = mkstemp(s->offload_path);
    if (fd < 0)
        return llm4d_fail(err, LLM4D_EUSER, "sharding_offload: cannot create the offload pool %s: %s; set a writable "
                          "output_dir", s->offload_path, strerror(errno));
    unlink(s->offload_path);
    if (ftruncate(fd, (off_t)bytes) != 0) {
        close(fd);
        return llm4d_fail(err, LLM4D_EUSER, "sharding_offload: cannot size the offload pool to %zu bytes in %s: %s",
                          bytes, dir, strerror(errno));
    }
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return llm4d_fail(err, LLM4D_EUSER, "sharding_offload: cannot map the offload pool: %s", strerror(errno));
    s->offload_map = p;
    s->offload_bytes = bytes;
    llm4d_mem_account(s->mem, LLM4D_MEM_OPTIM, (long long)bytes);
    return LLM4D_OK;
}

llm4d_code llm4d_sharding_init(llm4d_sharding *s, llm4d_gpt *g, int stage, int offload, const char *offload_dir,
                               llm4d_comm *sharding_comm, llm4d_comm *dp_comm, float beta1, float beta2, float eps,
                               float weight_decay, uint64_t seed, llm4d_err *err) {
    memset(s, 0, sizeof *s);
    s->prefetch_group = -1;
    const char *pf = getenv("LLM4D_ZERO_PREFETCH");
    s->prefetch_on = !(pf && !strcmp(pf, "0"));
    s->beta1 = beta1;
    s->beta2 = beta2;
    s->eps = eps;
    s->weight_decay = weight_decay;
    s->stage = stage;
    s->N = llm4d_comm_size(sharding_comm);
    s->rank = llm4d_comm_rank(sharding_comm);
    s->offload = offload;
    s->sh = sharding_comm;
    s->dp = dp_comm && llm4d_comm_size(dp_comm) > 1 ? dp_comm : NULL;
    s->g = g;
    s->be = g->be;
    s->mem = g->mem;
    const llm4d_param_table *t = &g->table;
    s->n_groups = t->n_groups;
    s->shard_len = calloc((size_t)t->n_groups, sizeof *s->shard_len);
    s->shard_off = calloc((size_t)t->n_groups, sizeof *s->shard_off);
    if (!s->shard_len || !s->shard_off) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    size_t max_shard = 0;
    for (int grp = 0; grp < t->n_groups; grp++) {
        const size_t len = group_len(s, grp);
        LLM4D_ASSERT(len % (size_t)s->N == 0, "group %d of %zu elements not aligned to %d", grp, len, s->N);
        s->shard_len[grp] = len / (size_t)s->N;
        s->shard_off[grp] = s->local_total;
        s->local_total += s->shard_len[grp];
        if (s->shard_len[grp] > max_shard) max_shard = s->shard_len[grp];
        if (grp > 0 && len > s->max_group) s->max_group = len;
    }
    int ok = 1;
    s->recv = alloc_f(s, LLM4D_MEM_COMM, max_shard, &ok);
    if (stage >= 2) {
        s->local_grads = alloc_f(s, LLM4D_MEM_GRADS, s->local_total, &ok);
        s->emb_buf = alloc_f(s, LLM4D_MEM_COMM, group_len(s, 0), &ok);
        s->layer_grad_buf = alloc_f(s, LLM4D_MEM_COMM, s->max_group, &ok);
    }
    if (stage >= 3) {
        s->emb_param_buf = alloc_f(s, LLM4D_MEM_COMM, group_len(s, 0), &ok);
        s->layer_param_buf = alloc_f(s, LLM4D_MEM_COMM, s->max_group, &ok);
        s->prefetch_buf = alloc_f(s, LLM4D_MEM_COMM, s->max_group, &ok);
    }
    if (!ok) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory allocating the sharded training state");
    /* optimizer states (and at stage 3 the parameter shards the update writes): in the offload pool, or memory */
    const size_t n_states = 2 + (stage >= 3 ? 1 : 0);
    if (offload) {
        LLM4D_TRY(offload_pool(s, offload_dir, n_states * s->local_total * sizeof(float), err));
        s->m = (float *)s->offload_map;
        s->v = s->m + s->local_total;
        if (stage >= 3) s->local_params = s->v + s->local_total;
    } else {
        s->m = alloc_f(s, LLM4D_MEM_OPTIM, s->local_total, &ok);
        s->v = alloc_f(s, LLM4D_MEM_OPTIM, s->local_total, &ok);
        if (stage >= 3) s->local_params = alloc_f(s, LLM4D_MEM_PARAMS, s->local_total, &ok);
        if (!ok) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory allocating the optimizer states");
    }
    if (stage >= 3)
        for (int grp = 0; grp < t->n_groups; grp++) {
            const size_t lo = group_lo(s, grp) + (size_t)s->rank * s->shard_len[grp];
            llm4d_param_init_range(t, s->local_params + s->shard_off[grp], lo, lo + s->shard_len[grp], seed);
        }
    g->hooks = (llm4d_gpt_hooks){.ctx = s, .params_for = params_for, .release = release, .grads_for = grads_for,
                                 .grads_done = grads_done};
    return LLM4D_OK;
}

void llm4d_sharding_free(llm4d_sharding *s) {
    if (!s->g) return;
    llm4d_backend *be = s->be;
    const size_t max_shard_bytes = (s->max_group > group_len(s, 0) ? s->max_group : group_len(s, 0)) / (size_t)s->N *
                                   sizeof(float);
    if (s->recv) be->free(be, s->mem, LLM4D_MEM_COMM, s->recv, max_shard_bytes);
    if (s->local_grads) be->free(be, s->mem, LLM4D_MEM_GRADS, s->local_grads, s->local_total * sizeof(float));
    if (s->emb_buf) be->free(be, s->mem, LLM4D_MEM_COMM, s->emb_buf, group_len(s, 0) * sizeof(float));
    if (s->layer_grad_buf) be->free(be, s->mem, LLM4D_MEM_COMM, s->layer_grad_buf, s->max_group * sizeof(float));
    if (s->emb_param_buf) be->free(be, s->mem, LLM4D_MEM_COMM, s->emb_param_buf, group_len(s, 0) * sizeof(float));
    if (s->prefetch_group >= 0) prefetch_wait(s);
    if (s->layer_param_buf) be->free(be, s->mem, LLM4D_MEM_COMM, s->layer_param_buf, s->max_group * sizeof(float));
    if (s->prefetch_buf) be->free(be, s->mem, LLM4D_MEM_COMM, s->prefetch_buf, s->max_group * sizeof(float));
    if (s->offload_map) {
        munmap(s->offload_map, s->offload_bytes);
        llm4d_mem_account(s->mem, LLM4D_MEM_OPTIM, -(long long)s->offload_bytes);
    } else {
        if (s->m) be->free(be, s->mem, LLM4D_MEM_OPTIM, s->m, s->local_total * sizeof(float));
        if (s->v) be->free(be, s->mem, LLM4D_MEM_OPTIM, s->v, s->local_total * sizeof(float));
        if (s->local_params) be->free(be, s->mem, LLM4D_MEM_PARAMS, s->local_params, s->local_total * sizeof(float));
    }
    s->g->hooks = (llm4d_gpt_hooks){0};
    free(s->shard_len);
    free(s->shard_off);
    memset(s, 0, sizeof *s);
}

void llm4d_sharding_begin_step(llm4d_sharding *s) {
    s->gather_wait_s = s->rs_s = 0;
    if (s->stage < 2)
        s->be->zero(s->be, s->g->grads, s->g->table.total * sizeof(float));
    else
        s->be->zero(s->be, s->local_grads, s->local_total * sizeof(float));
    s->last_micro = 0;
}

void llm4d_sharding_micro(llm4d_sharding *s, int last) { s->last_micro = last; }

/* Pointer to the own shard of group grp in a flat (whole-model) buffer. */
static float *flat_shard(const llm4d_sharding *s, float *flat, int grp) {
    return flat + group_lo(s, grp) + (size_t)s->rank * s->shard_len[grp];
}

static llm4d_code check_failed(llm4d_sharding *s, llm4d_err *err) {
    if (!s->failed) return LLM4D_OK;
    *err = s->err;
    return err->code;
}

llm4d_code llm4d_sharding_finish_backward(llm4d_sharding *s, llm4d_err *err) {
    LLM4D_TRY(check_failed(s, err));
    if (!s->dp) return LLM4D_OK;
    /* hybrid dp: only the owned shards cross between the dp replicas */
    if (s->stage >= 2) return llm4d_comm_allreduce(s->dp, s->local_grads, s->local_total, LLM4D_COMM_F32, err);
    for (int grp = 0; grp < s->n_groups; grp++)
        LLM4D_TRY(llm4d_comm_allreduce(s->dp, flat_shard(s, s->g->grads, grp), s->shard_len[grp], LLM4D_COMM_F32,
                                       err));
    return LLM4D_OK;
}

llm4d_code llm4d_sharding_grad_sumsq(llm4d_sharding *s, double *sumsq, llm4d_err *err) {
    double acc = 0;
    if (s->stage >= 2)
        acc = s->be->sumsq(s->be, s->local_grads, s->local_total);
    else
        for (int grp = 0; grp < s->n_groups; grp++)
            acc += s->be->sumsq(s->be, flat_shard(s, s->g->grads, grp), s->shard_len[grp]);
    LLM4D_TRY(llm4d_comm_allreduce(s->sh, &acc, 1, LLM4D_COMM_F64, err));
    *sumsq = acc;
    return LLM4D_OK;
}

llm4d_code llm4d_sharding_update(llm4d_sharding *s, float lr, float grad_scale, llm4d_err *err) {
    const llm4d_param_table *t = &s->g->table;
    if (s->stage >= 3 && s->prefetch_group >= 0) { /* never let a gather in flight read shards being updated */
        prefetch_wait(s);
        s->prefetch_group = -1;
        LLM4D_TRY(check_failed(s, err));
    }
    s->t++;
    for (int i = 0; i < t->n; i++) {
        const llm4d_param *p = &t->p[i];
        const int grp = llm4d_param_group(p, s->g->cfg.num_layers);
        const size_t shard_lo = group_lo(s, grp) + (size_t)s->rank * s->shard_len[grp];
        const size_t shard_hi = shard_lo + s->shard_len[grp];
        const size_t a = p->offset > shard_lo ? p->offset : shard_lo;
        const size_t b = p->offset + p->numel < shard_hi ? p->offset + p->numel : shard_hi;
        if (a >= b) continue;
        const size_t local = s->shard_off[grp] + (a - shard_lo);
        float *w = s->stage >= 3 ? s->local_params + local : s->g->params + a;
        const float *gr = s->stage >= 2 ? s->local_grads + local : s->g->grads + a;
        s->be->adamw(s->be, w, gr, s->m + local, s->v + local, b - a, lr, s->beta1, s->beta2, s->eps,
                     p->decay ? s->weight_decay : 0.0f, (int)s->t, grad_scale);
    }
    if (s->stage >= 3) return LLM4D_OK; /* parameters are gathered when used */
    for (int grp = 0; grp < s->n_groups; grp++) {
        float *full = s->g->params + group_lo(s, grp);
        LLM4D_TRY(llm4d_comm_allgather(s->sh, full + (size_t)s->rank * s->shard_len[grp], full, s->shard_len[grp],
                                       LLM4D_COMM_F32, err));
    }
    return LLM4D_OK;
}

void llm4d_sharding_describe(const llm4d_sharding *s, char *buf, size_t n) {
    const char *opt = s->offload ? "offload pool (file-backed memory map in the output directory, unlinked)"
                                 : "memory";
    snprintf(buf, n,
             "sharding stage %d over %d ranks (rank %d)%s: parameters %s, gradients %s, Adam m/v in %s%s",
             s->stage, s->N, s->rank, s->dp ? ", hybrid with data parallel" : "",
             s->stage >= 3 ? "sharded (gathered per group when used)" : "whole",
             s->stage >= 2 ? "sharded (per-group buckets reduce-scattered in backward)" : "whole, reduce-scattered",
             opt, s->stage >= 3 && s->offload ? ", parameter shards in the offload pool" : "");
}

uint64_t llm4d_sharding_param_hash(const llm4d_sharding *s) {
    if (s->stage >= 3) return llm4d_hash_words(s->local_params, s->local_total);
    return llm4d_hash_words(s->g->params, s->g->table.total);
}
