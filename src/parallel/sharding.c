/* sharding.c — ZeRO stages 1-3 over the model's parameter groups (see sharding.h for the scheme). */
#include "parallel/sharding.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/hash.h"
#include "core/timer.h"
#include "parallel/offload.h"

static llm4d_sharding *of(llm4d_engine *e) { return (llm4d_sharding *)e; }
static size_t group_len(const llm4d_sharding *s, int grp) { return s->g->table.g[grp].hi - s->g->table.g[grp].lo; }
static size_t group_lo(const llm4d_sharding *s, int grp) { return s->g->table.g[grp].lo; }

/* The first communication failure inside a hook is kept and reported at the end of the step (hooks cannot
 * return errors through the model); later calls become no-ops so the step ends quickly. */
#define HOOK_TRY(expr)                                                                                           \
    do {                                                                                                         \
        if (!s->failed && (expr) != LLM4D_OK) s->failed = 1;                                                     \
    } while (0)

/* Elements of a block group of model m with tensor-parallel degree M (params.h's layout, before alignment). */
static size_t block_group_elems(const llm4d_model_config *m, int M) {
    const size_t C = m->hidden_size, F = m->ffn_hidden_size;
    return 4 * C + (3 * C * C + 3 * C + C * C + F * C + F + C * F) / (size_t)M + 2 * C;
}

void llm4d_sharding_part(int stage, int N, const llm4d_model_config *m, llm4d_model_part *part,
                         llm4d_gpt_layout *layout) {
    part->align = N;
    layout->no_params = stage >= 3;
    layout->no_grads = stage >= 2;
    if (stage >= 2) {
        /* vocabulary blocks no larger than a block group (so no buffer is sized by the vocabulary), but at least
         * 2^20 elements (a small model's blocks would otherwise cut the embedding into hundreds of collectives) */
        size_t elems = block_group_elems(m, part->mp_size > 0 ? part->mp_size : 1);
        if (elems < ((size_t)1 << 20)) elems = (size_t)1 << 20;
        part->wte_block_rows = (int64_t)((elems + (size_t)m->hidden_size - 1) / (size_t)m->hidden_size);
    }
}

/* ---- stage 3: gathers, with the order of use recorded in the first step and prefetched after ---- */

static const float *own_params(const llm4d_sharding *s, int grp) {
    return s->local_params ? s->local_params + s->shard_off[grp] : NULL;
}

/* Start gathering group grp into gather slot k (non-blocking unless blocking). */
static void gather_start(llm4d_sharding *s, int k, int grp, int blocking) {
    llm4d_ring_slot *r = &s->gather[k];
    r->group = grp;
    s->gathers++;
    const size_t n = s->shard_len[grp];
    const float *own = own_params(s, grp);
    if (s->off) { /* an offloaded shard comes from the file, straight into this rank's block (gathered in place) */
        float *block = r->buf + (size_t)s->rank * n;
        HOOK_TRY(llm4d_offload_read(s->off, LLM4D_OFFLOAD_PARAMS, s->shard_off[grp], n, block, &s->err));
        own = block;
    }
    const double t0 = llm4d_now();
    if (blocking) {
        HOOK_TRY(llm4d_comm_dev_allgather(s->sh, own, r->buf, n, LLM4D_COMM_F32, &s->err));
        s->gather_wait_s += llm4d_now() - t0;
        return;
    }
    HOOK_TRY(llm4d_comm_dev_iallgather(s->sh, own, r->buf, n, LLM4D_COMM_F32, &r->req, &s->err));
    r->busy = 1;
}

static void slot_wait(llm4d_sharding *s, llm4d_ring_slot *r, double *acc) {
    if (!r->busy) return;
    const double t0 = llm4d_now();
    HOOK_TRY(llm4d_comm_wait(&r->req, &s->err));
    *acc += llm4d_now() - t0;
    r->busy = 0;
}

/* The gathers and reduce-scatters in flight, moved forward between kernels (comm.h llm4d_comm_progress). */
static void progress(llm4d_sharding *s) { HOOK_TRY(llm4d_comm_progress(s->sh, &s->err)); }

/* The group the recorded order says comes after the current position, -1 when none is known. */
static int predicted_next(const llm4d_sharding *s) {
    if (!s->traced || !s->in_step || !s->prefetch_on || s->trace_pos >= s->trace_n) return -1;
    return s->trace[s->trace_pos];
}

static void trace_record(llm4d_sharding *s, int grp) {
    if (s->traced || !s->in_step) return;
    if (s->trace_n == s->trace_cap) {
        const int cap = s->trace_cap ? 2 * s->trace_cap : 256;
        int *t = realloc(s->trace, (size_t)cap * sizeof *t);
        if (!t) { /* no recording, no prefetch: gathers stay correct, only blocking */
            s->prefetch_on = 0;
            return;
        }
        s->trace = t;
        s->trace_cap = cap;
    }
    s->trace[s->trace_n++] = grp;
}

/* Advance the replay position past grp (a schedule replays the recorded order exactly; anything else turns the
 * prediction off for the rest of the step, which costs only the overlap). */
static void trace_follow(llm4d_sharding *s, int grp) {
    if (!s->traced || !s->in_step) return;
    if (s->trace_pos < s->trace_n && s->trace[s->trace_pos] == grp) {
        s->trace_pos++;
        return;
    }
    s->trace_pos = s->trace_n;
}

static float *sh_params_for(llm4d_engine *e, int grp, int pass) {
    (void)pass;
    llm4d_sharding *s = of(e);
    if (s->stage < 3) return s->g->params + group_lo(s, grp);
    LLM4D_ASSERT(s->cur < 0, "group %d asked for while group %d is in use", grp,
                 s->cur >= 0 ? s->gather[s->cur].group : -1);
    trace_record(s, grp);
    trace_follow(s, grp);
    int k = -1;
    for (int j = 0; j < 2; j++)
        if (s->gather[j].group == grp) k = j;
    if (k >= 0) { /* prefetched */
        slot_wait(s, &s->gather[k], &s->gather_wait_s);
        s->prefetch_hits++;
    } else { /* a free slot; the other may hold a prefetch that guessed wrong, finished before it is reused */
        k = s->gather[0].group < 0 && !s->gather[0].busy ? 0 : 1;
        slot_wait(s, &s->gather[k], &s->gather_wait_s);
        gather_start(s, k, grp, 1);
    }
    s->cur = k;
    const int next = predicted_next(s), other = 1 - k;
    if (next >= 0 && next != grp && !s->failed) {
        if (s->gather[other].busy) slot_wait(s, &s->gather[other], &s->gather_wait_s);
        gather_start(s, other, next, 0);
    } else if (!s->gather[other].busy) {
        s->gather[other].group = -1;
    }
    return s->gather[k].buf;
}

static void sh_release(llm4d_engine *e, int grp, int pass) {
    (void)pass;
    llm4d_sharding *s = of(e);
    if (s->stage < 3) return;
    if (s->cur >= 0 && s->gather[s->cur].group == grp) {
        s->gather[s->cur].group = -1;
        s->cur = -1;
    }
    progress(s);
}

/* ---- gradients: windows, buckets and non-blocking reduce-scatters ---- */

/* A reduce-scatter finished: its shard into the owner's gradient. */
static void grad_complete(llm4d_sharding *s, llm4d_ring_slot *r) {
    slot_wait(s, r, &s->rs_wait_s);
    if (r->group < 0) return;
    const int grp = r->group;
    const size_t n = s->shard_len[grp];
    float *own = s->stage >= 2 ? s->local_grads + s->shard_off[grp] /* stage 1: the own block of the flat gradient */
                               : s->g->grads + group_lo(s, grp) + (size_t)s->rank * n;
    if (s->bf16)
        s->be->from_bf16(s->be, own, r->recv16, n, s->stage >= 2 ? LLM4D_ADD : LLM4D_WRITE);
    else if (s->stage >= 2)
        s->be->add(s->be, own, r->recv, n);
    else
        s->be->copy(s->be, own, r->recv, n * sizeof(float));
    r->group = -1;
}

/* A free ring slot (the oldest in flight is completed when both are taken). */
static llm4d_ring_slot *grad_slot(llm4d_sharding *s) {
    for (int k = 0; k < 2; k++)
        if (s->grad_ring[k].group < 0 && (int)(&s->grad_ring[k] - s->grad_ring) != s->grad_open)
            return &s->grad_ring[k];
    for (int k = 0; k < 2; k++)
        if (k != s->grad_open) {
            grad_complete(s, &s->grad_ring[k]);
            return &s->grad_ring[k];
        }
    LLM4D_ASSERT(0, "no free gradient bucket");
    return NULL;
}

static void rs_start(llm4d_sharding *s, llm4d_ring_slot *r, const float *src, int grp, const llm4d_event *ready) {
    r->group = grp;
    const size_t n = s->shard_len[grp];
    const double t0 = llm4d_now();
    const void *send = src;
    void *recv = r->recv;
    const llm4d_comm_dtype dt = s->bf16 ? LLM4D_COMM_BF16 : LLM4D_COMM_F32;
    if (s->bf16) { /* rounded after the gradient kernels, on their stream: ready is then the whole stream */
        s->be->to_bf16(s->be, r->send16, src, n * (size_t)s->N);
        send = r->send16, recv = r->recv16, ready = NULL;
    }
    if (!s->overlap_on) {
        HOOK_TRY(llm4d_comm_dev_reduce_scatter(s->sh, send, recv, n, dt, &s->err));
        s->rs_wait_s += llm4d_now() - t0;
        grad_complete(s, r);
        return;
    }
    HOOK_TRY(llm4d_comm_dev_ireduce_scatter(s->sh, send, recv, n, dt, ready, &r->req, &s->err));
    r->busy = 1;
}

static float *sh_grads_for(llm4d_engine *e, int grp) {
    llm4d_sharding *s = of(e);
    if (s->stage < 2) return s->g->grads + group_lo(s, grp);
    LLM4D_ASSERT(s->grad_open < 0, "group %d: a gradient window opened inside another", grp);
    llm4d_ring_slot *r = grad_slot(s);
    s->grad_open = (int)(r - s->grad_ring);
    s->be->zero(s->be, r->buf, group_len(s, grp) * sizeof(float));
    return r->buf;
}

static void sh_grads_done(llm4d_engine *e, int grp, const llm4d_event *ready) {
    llm4d_sharding *s = of(e);
    LLM4D_ASSERT(s->windows_left[grp] > 0, "group %d: more gradient windows than the step has", grp);
    s->windows_left[grp]--;
    if (s->stage < 2) {
        if (s->windows_left[grp] == 0) rs_start(s, grad_slot(s), s->g->grads + group_lo(s, grp), grp, ready);
    } else {
        llm4d_ring_slot *r = &s->grad_ring[s->grad_open];
        s->grad_open = -1;
        rs_start(s, r, r->buf, grp, ready);
    }
    progress(s);
}

static void sh_begin_step(llm4d_engine *e, int n_micro) {
    llm4d_sharding *s = of(e);
    for (int grp = 0; grp < s->n_groups; grp++) s->windows_left[grp] = n_micro * llm4d_gpt_windows(s->g, grp);
    if (s->stage >= 2) s->be->zero(s->be, s->local_grads, s->local_total * sizeof(float));
    else s->be->zero(s->be, s->g->grads, s->g->table.total * sizeof(float));
    s->gather_wait_s = s->rs_wait_s = 0;
    s->in_step = 1;
    s->trace_pos = 0;
}

static llm4d_code check_failed(llm4d_sharding *s, llm4d_err *err) {
    if (!s->failed) return LLM4D_OK;
    s->failed = 0;
    *err = s->err;
    return err->code;
}

/* Pointer to the own shard of group grp in a flat (whole-model) buffer. */
static float *flat_shard(const llm4d_sharding *s, float *flat, int grp) {
    return flat + group_lo(s, grp) + (size_t)s->rank * s->shard_len[grp];
}

static llm4d_code sh_finish(llm4d_engine *e, llm4d_err *err) {
    llm4d_sharding *s = of(e);
    for (int k = 0; k < 2; k++) grad_complete(s, &s->grad_ring[k]);
    for (int grp = 0; grp < s->n_groups; grp++)
        LLM4D_ASSERT(s->windows_left[grp] == 0, "group %d: %d gradient windows never came", grp,
                     s->windows_left[grp]);
    LLM4D_TRY(check_failed(s, err));
    s->base.comm_wait_s = s->rs_wait_s + s->gather_wait_s;
    if (!s->dp) return LLM4D_OK;
    /* hybrid dp: only the owned shards cross between the dp replicas */
    if (s->stage >= 2)
        return llm4d_comm_dev_allreduce(s->dp, s->local_grads, s->local_total, LLM4D_COMM_F32, LLM4D_COMM_SUM, err);
    for (int grp = 0; grp < s->n_groups; grp++)
        LLM4D_TRY(llm4d_comm_dev_allreduce(s->dp, flat_shard(s, s->g->grads, grp), s->shard_len[grp], LLM4D_COMM_F32,
                                           LLM4D_COMM_SUM, err));
    return LLM4D_OK;
}

/* The part of entry i inside its group's own shard: its local elements [*j0, *j1) at local index *local (the
 * offset in the local buffers); 0 when the shard holds none of it. */
static int own_part(const llm4d_sharding *s, int i, int64_t *j0, int64_t *j1, size_t *local) {
    const llm4d_param *p = &s->g->table.p[i];
    const int grp = p->group;
    const size_t lo = group_lo(s, grp) + (size_t)s->rank * s->shard_len[grp], hi = lo + s->shard_len[grp];
    const size_t a = p->offset > lo ? p->offset : lo, b = p->offset + p->numel < hi ? p->offset + p->numel : hi;
    if (a >= b) return 0;
    *j0 = (int64_t)(a - p->offset);
    *j1 = (int64_t)(b - p->offset);
    *local = s->shard_off[grp] + (a - lo);
    return 1;
}

static float *sh_grad_view(llm4d_engine *e, int i, int64_t *j0, int64_t *j1) {
    llm4d_sharding *s = of(e);
    size_t local;
    if (!own_part(s, i, j0, j1, &local)) return NULL;
    if (s->stage >= 2) return s->local_grads + local;
    return s->g->grads + s->g->table.p[i].offset + (size_t)*j0;
}

static double sh_grad_sumsq(llm4d_engine *e) {
    llm4d_sharding *s = of(e);
    return s->counts ? llm4d_engine_grad_sumsq(e, s->g, 1, NULL) : 0.0;
}

/* The AdamW update of local elements [off, off + len) (a window of the offloaded states, or everything), the
 * entries cut at the window's edges. m, v and (stage 3) params point at local element off. */
typedef struct {
    llm4d_sharding *s;
    float lr, grad_scale;
} update_ctx;

static void update_window(void *ctx, size_t off, size_t len, float **bufs) {
    update_ctx *u = ctx;
    llm4d_sharding *s = u->s;
    const size_t end = off + len;
    int n = 0;
    for (int i = 0; i < s->g->table.n; i++) {
        int64_t j0, j1;
        size_t local;
        if (!own_part(s, i, &j0, &j1, &local)) continue;
        size_t a = local, b = local + (size_t)(j1 - j0);
        if (a < off) a = off;
        if (b > end) b = end;
        if (a >= b) continue;
        const llm4d_param *p = &s->g->table.p[i];
        const size_t flat = p->offset + (size_t)j0 + (a - local); /* its place in the table's layout */
        float *w = s->stage >= 3 ? bufs[LLM4D_OFFLOAD_PARAMS] + (a - off) : s->g->params + flat;
        float *gr = s->stage >= 2 ? s->local_grads + a : s->g->grads + flat;
        s->ranges[n++] = (llm4d_opt_range){w, gr, bufs[LLM4D_OFFLOAD_M] + (a - off), bufs[LLM4D_OFFLOAD_V] + (a - off),
                                           b - a, p->decay};
    }
    llm4d_optimizer_apply(&s->opt, s->ranges, n, u->lr, u->grad_scale, 0);
}

static llm4d_code sh_update(llm4d_engine *e, float lr, float grad_scale, llm4d_err *err) {
    llm4d_sharding *s = of(e);
    /* never let a gather in flight read shards being updated */
    for (int k = 0; k < 2; k++) slot_wait(s, &s->gather[k], &s->gather_wait_s);
    for (int k = 0; k < 2; k++) s->gather[k].group = -1;
    s->cur = -1;
    LLM4D_TRY(check_failed(s, err));
    if (s->in_step && !s->traced && s->stage >= 3) s->traced = 1; /* the first step's order is the schedule's */
    s->in_step = 0;
    llm4d_optimizer_next(&s->opt);
    update_ctx u = {s, lr, grad_scale};
    if (s->off) {
        LLM4D_TRY(llm4d_offload_stream(s->off, update_window, &u, err));
    } else {
        float *bufs[3] = {s->m, s->v, s->local_params};
        update_window(&u, 0, s->local_total, bufs);
    }
    if (s->stage >= 3) return LLM4D_OK; /* parameters are gathered when used */
    for (int grp = 0; grp < s->n_groups; grp++) {
        float *full = s->g->params + group_lo(s, grp);
        LLM4D_TRY(llm4d_comm_dev_allgather(s->sh, full + (size_t)s->rank * s->shard_len[grp], full,
                                           s->shard_len[grp], LLM4D_COMM_F32, err));
    }
    return LLM4D_OK;
}

static void sh_state(llm4d_engine *e, llm4d_engine_state *out) {
    llm4d_sharding *s = of(e);
    const size_t n = s->local_total;
    *out = (llm4d_engine_state){.n = s->n_groups, .lo = s->range_lo, .hi = s->range_hi,
                                .params = s->stage >= 3 ? (llm4d_state_buf){s->local_params, n, 0}
                                                        : (llm4d_state_buf){s->g->params, s->g->table.total, 0},
                                .params_off = s->stage >= 3 ? NULL : s->range_lo, .m = {s->m, n, 0}, .v = {s->v, n, 0},
                                .state_off = s->shard_off, .params_whole = s->stage < 3, .writes = s->counts};
    if (s->off) { /* the offloaded states, mapped from their file (host memory) for the duration of a save or load */
        out->m = (llm4d_state_buf){llm4d_offload_map(s->off, LLM4D_OFFLOAD_M), n, 1};
        out->v = (llm4d_state_buf){llm4d_offload_map(s->off, LLM4D_OFFLOAD_V), n, 1};
        if (s->stage >= 3) out->params = (llm4d_state_buf){llm4d_offload_map(s->off, LLM4D_OFFLOAD_PARAMS), n, 1};
    }
}

static llm4d_code sh_state_done(llm4d_engine *e, llm4d_err *err) {
    llm4d_sharding *s = of(e);
    return s->off ? llm4d_offload_unmap(s->off, err) : LLM4D_OK;
}

static uint64_t sh_param_hash(llm4d_engine *e, int which) {
    llm4d_sharding *s = of(e);
    const llm4d_param_table *t = &s->g->table;
    llm4d_view v = {0};
    llm4d_err verr;
    const float *p = s->stage >= 3 && s->off ? llm4d_offload_map(s->off, LLM4D_OFFLOAD_PARAMS) : NULL; /* host */
    if (!p) { /* device memory: through a host view */
        float *dev = s->stage < 3 ? s->g->params : s->local_params;
        const size_t n = s->stage < 3 ? t->total : s->local_total;
        if (llm4d_view_open(&v, s->be, s->mem, dev, n * sizeof(float), LLM4D_VIEW_READ, &verr) != LLM4D_OK) return 0;
        p = v.host;
    }
    uint64_t h = LLM4D_HASH_INIT;
    if (!p) return 0;
    if (which == LLM4D_HASH_ALL) {
        h = llm4d_hash_words(p, s->stage < 3 ? t->total : s->local_total);
    } else {
        for (int i = 0; i < t->n; i++) {
            int64_t j0, j1;
            size_t local;
            if (!llm4d_hash_takes(&t->p[i], which)) continue;
            if (s->stage < 3) h = llm4d_hash_more(h, p + t->p[i].offset, t->p[i].numel);
            else if (own_part(s, i, &j0, &j1, &local)) h = llm4d_hash_more(h, p + local, (size_t)(j1 - j0));
        }
    }
    llm4d_err ignored;
    if (s->off && s->stage >= 3) llm4d_offload_unmap(s->off, &ignored);
    llm4d_view_close(&v, s->be, s->mem);
    return h;
}

static int64_t sh_adam_steps(llm4d_engine *e, int64_t set) {
    llm4d_sharding *s = of(e);
    if (set >= 0) s->opt.hp.t = set;
    return s->opt.hp.t;
}

static void sh_describe(llm4d_engine *e, char *buf, size_t n) {
    llm4d_sharding *s = of(e);
    char off[256] = "";
    if (s->off) llm4d_offload_describe(s->off, off, sizeof off);
    snprintf(buf, n,
             "sharding stage %d over %d ranks (rank %d)%s: parameters %s, gradients %s, Adam m/v %s%s%s",
             s->stage, s->N, s->rank, s->dp ? ", hybrid with data parallel" : "",
             s->stage >= 3 ? "sharded (gathered per group when used, the next group prefetched)" : "whole",
             s->stage >= 2 ? "sharded (per-window buckets reduce-scattered during backward)"
                           : "whole, reduce-scattered during backward",
             s->off ? "offloaded" : "sharded in memory", s->off ? ": " : "", off);
}

static void sh_stats(llm4d_engine *e, llm4d_engine_stats *out) {
    llm4d_sharding *s = of(e);
    out->zero_gather_wait_s += s->gather_wait_s;
    out->zero_rs_wait_s += s->rs_wait_s;
}

/* The sharding group's shards of a local buffer (host memory) into a whole buffer of the table's layout. */
static llm4d_code gather_full(llm4d_sharding *s, const float *local, float *full, llm4d_err *err) {
    for (int grp = 0; grp < s->n_groups; grp++)
        LLM4D_TRY(llm4d_comm_allgather(s->sh, local + s->shard_off[grp], full + group_lo(s, grp), s->shard_len[grp],
                                       LLM4D_COMM_F32, err));
    return LLM4D_OK;
}

/* A consolidated checkpoint: the group's first rank (of the first data replica) writes whole tensors. */
static llm4d_code sh_gather_state(llm4d_engine *e, const llm4d_state_host *h, float *params, float *m, float *v,
                                  int *writes, llm4d_err *err) {
    llm4d_sharding *s = of(e);
    *writes = s->rank == 0 && s->counts;
    LLM4D_TRY(gather_full(s, h->m, m, err));
    LLM4D_TRY(gather_full(s, h->v, v, err));
    if (params) LLM4D_TRY(gather_full(s, h->params, params, err));
    return LLM4D_OK;
}

static void sh_destroy(llm4d_engine *e) {
    llm4d_sharding *s = of(e);
    for (int k = 0; k < 2; k++) {
        slot_wait(s, &s->gather[k], &s->gather_wait_s);
        slot_wait(s, &s->grad_ring[k], &s->rs_wait_s);
    }
    if (s->off) llm4d_offload_close(s->off);
    const struct {
        void *p;
        size_t n;
        llm4d_mem_category c;
    } bufs[] = {{s->local_params, s->local_total, LLM4D_MEM_PARAMS}, {s->local_grads, s->local_total, LLM4D_MEM_GRADS},
                {s->m, s->local_total, LLM4D_MEM_OPTIM},             {s->v, s->local_total, LLM4D_MEM_OPTIM},
                {s->gather[0].buf, s->max_group, LLM4D_MEM_COMM},   {s->gather[1].buf, s->max_group, LLM4D_MEM_COMM},
                {s->grad_ring[0].buf, s->max_group, LLM4D_MEM_COMM}, {s->grad_ring[1].buf, s->max_group, LLM4D_MEM_COMM},
                {s->grad_ring[0].recv, s->max_shard, LLM4D_MEM_COMM}, {s->grad_ring[1].recv, s->max_shard, LLM4D_MEM_COMM}};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++)
        if (bufs[k].p) s->be->free(s->be, s->mem, bufs[k].c, bufs[k].p, bufs[k].n * sizeof(float));
    for (int k = 0; k < 2; k++) {
        if (s->grad_ring[k].send16) s->be->free(s->be, s->mem, LLM4D_MEM_COMM, s->grad_ring[k].send16, s->max_group * 2);
        if (s->grad_ring[k].recv16) s->be->free(s->be, s->mem, LLM4D_MEM_COMM, s->grad_ring[k].recv16, s->max_shard * 2);
    }
    free(s->shard_len);
    free(s->shard_off);
    free(s->range_lo);
    free(s->range_hi);
    free(s->windows_left);
    free(s->trace);
    free(s->ranges);
    memset(s, 0, sizeof *s);
}

static const llm4d_engine_ops sharding_ops = {
    .name = "sharding",
    .params_for = sh_params_for,
    .release = sh_release,
    .grads_for = sh_grads_for,
    .grads_done = sh_grads_done,
    .begin_step = sh_begin_step,
    .finish_backward = sh_finish,
    .grad_view = sh_grad_view,
    .grad_sumsq = sh_grad_sumsq,
    .update = sh_update,
    .state = sh_state,
    .state_done = sh_state_done,
    .param_hash = sh_param_hash,
    .adam_steps = sh_adam_steps,
    .gather_state = sh_gather_state,
    .describe = sh_describe,
    .stats = sh_stats,
    .destroy = sh_destroy,
};

/* The sizes the scheme derives from the groups: the elements a rank keeps, the largest group and shard. */
static void sizes(const llm4d_param_table *t, int N, size_t *local_total, size_t *max_group, size_t *max_shard) {
    *local_total = *max_group = *max_shard = 0;
    for (int grp = 0; grp < t->n_groups; grp++) {
        const size_t len = t->g[grp].hi - t->g[grp].lo;
        *local_total += len / (size_t)N;
        if (len > *max_group) *max_group = len;
        if (len / (size_t)N > *max_shard) *max_shard = len / (size_t)N;
    }
}

void llm4d_sharding_plan(const llm4d_param_table *t, int stage, int N, int offload, int bf16, size_t bytes[]) {
    size_t local, group, shard;
    sizes(t, N, &local, &group, &shard);
    const size_t f = sizeof(float);
    if (offload) bytes[LLM4D_MEM_OPTIM] += llm4d_offload_memory(local, stage >= 3 ? 3 : 2);
    else bytes[LLM4D_MEM_OPTIM] += 2 * local * f, bytes[LLM4D_MEM_PARAMS] += stage >= 3 ? local * f : 0;
    if (stage >= 2) bytes[LLM4D_MEM_GRADS] += local * f;
    bytes[LLM4D_MEM_COMM] += 2 * (shard + (stage >= 2 ? group : 0) + (stage >= 3 ? group : 0)) * f;
    if (bf16) bytes[LLM4D_MEM_COMM] += 2 * (group + shard) * 2; /* the ring's bf16 payloads */
}

/* The initial parameters of local elements [off, off + len) into dst (the elements from off on): each group's
 * shard is a range of the table's flat layout, drawn where it lies. */
static void init_local(llm4d_sharding *s, float *dst, size_t off, size_t len, uint64_t seed) {
    for (int grp = 0; grp < s->n_groups; grp++) {
        const size_t lo = s->shard_off[grp], hi = lo + s->shard_len[grp];
        const size_t a = lo > off ? lo : off, b = hi < off + len ? hi : off + len;
        if (a >= b) continue;
        llm4d_param_init_range(&s->g->table, s->be, dst + (a - off), s->range_lo[grp] + (a - lo),
                               s->range_lo[grp] + (b - lo), seed);
    }
}

typedef struct {
    llm4d_sharding *s;
    uint64_t seed;
} init_ctx;

static void init_window(void *ctx, size_t off, size_t len, float **bufs) {
    const init_ctx *ic = ctx;
    init_local(ic->s, bufs[LLM4D_OFFLOAD_PARAMS], off, len, ic->seed);
}

static float *alloc_f(llm4d_sharding *s, llm4d_mem_category c, size_t n, int *ok) {
    float *p = s->be->alloc(s->be, s->mem, c, n * sizeof(float));
    if (!p) *ok = 0;
    return p;
}

llm4d_code llm4d_sharding_init(llm4d_sharding *s, llm4d_gpt *g, const llm4d_dist_config *d, llm4d_comm *sharding_comm,
                               llm4d_comm *dp_comm, int dp_index, llm4d_adamw opt, uint64_t seed, llm4d_err *err) {
    memset(s, 0, sizeof *s);
    s->base.ops = &sharding_ops;
    const int stage = d->sharding_stage, offload = d->sharding_offload;
    const char *offload_dir = d->offload_dir;
    s->prefetch_on = d->zero_prefetch;
    s->overlap_on = d->zero_overlap;
    s->bf16 = !strcmp(d->grad_comm_dtype, "bfloat16");
    s->opt = llm4d_optimizer_make(opt, g->be);
    s->stage = stage;
    s->N = llm4d_comm_size(sharding_comm);
    s->rank = llm4d_comm_rank(sharding_comm);
    s->sh = sharding_comm;
    s->dp = dp_comm && llm4d_comm_size(dp_comm) > 1 ? dp_comm : NULL;
    s->counts = dp_index == 0;
    s->g = g;
    s->be = g->be;
    s->mem = g->mem;
    s->cur = s->grad_open = -1;
    for (int k = 0; k < 2; k++) s->gather[k].group = s->grad_ring[k].group = -1;
    const llm4d_param_table *t = &g->table;
    const int G = s->n_groups = t->n_groups;
    s->shard_len = calloc((size_t)G, sizeof *s->shard_len);
    s->shard_off = calloc((size_t)G, sizeof *s->shard_off);
    s->range_lo = calloc((size_t)G, sizeof *s->range_lo);
    s->range_hi = calloc((size_t)G, sizeof *s->range_hi);
    s->windows_left = calloc((size_t)G, sizeof *s->windows_left);
    s->ranges = calloc((size_t)t->n, sizeof *s->ranges);
    if (!s->shard_len || !s->shard_off || !s->range_lo || !s->range_hi || !s->windows_left || !s->ranges) {
        sh_destroy(&s->base);
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    }
    size_t at = 0;
    for (int grp = 0; grp < G; grp++) {
        const size_t len = group_len(s, grp);
        LLM4D_ASSERT(len % (size_t)s->N == 0, "group %d of %zu elements not aligned to %d", grp, len, s->N);
        s->shard_len[grp] = len / (size_t)s->N;
        s->shard_off[grp] = at;
        s->range_lo[grp] = group_lo(s, grp) + (size_t)s->rank * s->shard_len[grp];
        s->range_hi[grp] = s->range_lo[grp] + s->shard_len[grp];
        at += s->shard_len[grp];
    }
    sizes(t, s->N, &s->local_total, &s->max_group, &s->max_shard);
    int ok = 1;
    if (offload) {
        llm4d_code rc = llm4d_offload_open(&s->off, offload_dir, llm4d_comm_rank(sharding_comm), s->local_total,
                                           stage >= 3 ? 3 : 2, s->be, s->mem, err);
        if (rc != LLM4D_OK) {
            sh_destroy(&s->base);
            return rc;
        }
        s->offload = 1;
    } else {
        s->m = alloc_f(s, LLM4D_MEM_OPTIM, s->local_total, &ok);
        s->v = alloc_f(s, LLM4D_MEM_OPTIM, s->local_total, &ok);
        if (stage >= 3) s->local_params = alloc_f(s, LLM4D_MEM_PARAMS, s->local_total, &ok);
    }
    if (stage >= 2) s->local_grads = alloc_f(s, LLM4D_MEM_GRADS, s->local_total, &ok);
    if (s->bf16 && (!s->be->to_bf16 || !s->be->from_bf16)) {
        sh_destroy(&s->base);
        return llm4d_fail(err, LLM4D_EUSER, "grad_comm_dtype bfloat16: the %s backend cannot convert gradients to "
                          "bf16; use grad_comm_dtype float32", g->be->name);
    }
    for (int k = 0; k < 2; k++) {
        if (s->bf16) {
            ok &= (s->grad_ring[k].send16 = s->be->alloc(s->be, s->mem, LLM4D_MEM_COMM, s->max_group * 2)) != NULL;
            ok &= (s->grad_ring[k].recv16 = s->be->alloc(s->be, s->mem, LLM4D_MEM_COMM, s->max_shard * 2)) != NULL;
        }
        s->grad_ring[k].recv = alloc_f(s, LLM4D_MEM_COMM, s->max_shard, &ok);
        if (stage >= 2) s->grad_ring[k].buf = alloc_f(s, LLM4D_MEM_COMM, s->max_group, &ok);
        if (stage >= 3) s->gather[k].buf = alloc_f(s, LLM4D_MEM_COMM, s->max_group, &ok);
    }
    if (!ok) {
        sh_destroy(&s->base);
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory allocating the sharded states");
    }
    if (stage >= 3) { /* the same numbers as the whole model's init (keyed by global name and index) */
        init_ctx ic = {s, seed};
        llm4d_code rc = LLM4D_OK;
        if (s->off) rc = llm4d_offload_stream(s->off, init_window, &ic, err); /* window by window into the file */
        else init_local(s, s->local_params, 0, s->local_total, seed);
        if (rc != LLM4D_OK) {
            sh_destroy(&s->base);
            return rc;
        }
    }
    return LLM4D_OK;
}
