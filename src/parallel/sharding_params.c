/* sharding_params.c — the ZeRO engine's two parameter policies (sharding_policy.h).
 *
 * whole (stages 1, 2): the model holds every parameter in its flat buffer; the owner updates its shard of each
 *   group in place and every group is all-gathered after the update. Traffic: Psi x (N-1)/N per rank per step.
 *   Memory: 4 Psi.
 * gathered (stage 3): only the own shards are kept (a local buffer, or the offload file's parameter stream); a group
 *   is all-gathered into a gather buffer right before it is used and released right after. While a group computes,
 *   the next one's all-gather is already in flight (in the second buffer, moved forward from the hooks by the
 *   communicator); the order of use is recorded in the first step and replayed (a schedule's order, the head's passes
 *   over vocabulary blocks). Traffic: every use of a group gathered (docs/design.md lists the terms). Memory:
 *   4 Psi/N plus two gather buffers of the largest group. */
#include "parallel/sharding_policy.h"

#include <stdlib.h>

#include "core/hash.h"
#include "core/timer.h"
#include "parallel/offload.h"

/* ---- whole: the model's flat parameters ---- */

static float *whole_for(llm4d_sharding *s, int grp) { return s->g->params + llm4d_zero_group_lo(s, grp); }

static void whole_release(llm4d_sharding *s, int grp) {
    (void)s;
    (void)grp;
}

static float *whole_at(llm4d_sharding *s, size_t flat, float *window) {
    (void)window;
    return s->g->params + flat;
}

static llm4d_code whole_updated(llm4d_sharding *s, llm4d_err *err) {
    for (int grp = 0; grp < s->n_groups; grp++) {
        LLM4D_TRY(llm4d_comm_dev_allgather(s->sh, s->g->params + s->range_lo[grp],
                                           s->g->params + llm4d_zero_group_lo(s, grp), s->shard_len[grp],
                                           LLM4D_COMM_F32, err));
    }
    return LLM4D_OK;
}

static llm4d_code whole_init(llm4d_sharding *s, uint64_t seed, llm4d_err *err) {
    (void)s, (void)seed, (void)err;
    return LLM4D_OK;
}

static void whole_state(llm4d_sharding *s, llm4d_engine_state *out) {
    out->params = (llm4d_state_buf){s->g->params, s->g->table.total, 0};
    out->params_off = s->range_lo;
    out->params_whole = 1;
}

static uint64_t whole_hash(llm4d_sharding *s, int which) {
    const llm4d_param_table *t = &s->g->table;
    llm4d_view v = {0};
    llm4d_err verr;
    if (llm4d_view_open(&v, s->be, s->mem, s->g->params, t->total * sizeof(float), LLM4D_VIEW_READ, &verr) !=
        LLM4D_OK)
        return 0;
    const float *p = v.host;
    uint64_t h = LLM4D_HASH_INIT;
    if (!p) return 0;
    if (which == LLM4D_HASH_ALL) {
        h = llm4d_hash_words(p, t->total);
    } else {
        for (int i = 0; i < t->n; i++)
            if (llm4d_hash_takes(&t->p[i], which)) h = llm4d_hash_more(h, p + t->p[i].offset, t->p[i].numel);
    }
    llm4d_view_close(&v, s->be, s->mem);
    return h;
}

const llm4d_zero_params llm4d_zero_params_whole = {
    .what = "whole",
    .whole = 1,
    .gather_at = LLM4D_AT_UPDATE,
    .params_for = whole_for,
    .release = whole_release,
    .at = whole_at,
    .updated = whole_updated,
    .init = whole_init,
    .state = whole_state,
    .hash = whole_hash,
};

/* ---- gathered: the own shards, gathered per group when used, with the order of use recorded in the first step
 * and prefetched after ---- */

/* Start gathering group grp into gather slot k (non-blocking unless blocking). */
static void gather_start(llm4d_sharding *s, int k, int grp, int blocking) {
    llm4d_ring_slot *r = &s->gather[k];
    r->group = grp;
    s->gathers++;
    const size_t n = s->shard_len[grp];
    const float *own = s->local_params ? s->local_params + s->shard_off[grp] : NULL;
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

static float *gathered_for(llm4d_sharding *s, int grp) {
    LLM4D_ASSERT(s->cur < 0, "group %d asked for while group %d is in use", grp,
                 s->cur >= 0 ? s->gather[s->cur].group : -1);
    trace_record(s, grp);
    trace_follow(s, grp);
    int k = -1;
    for (int j = 0; j < 2; j++)
        if (s->gather[j].group == grp) k = j;
    if (k >= 0) { /* prefetched */
        llm4d_zero_slot_wait(s, &s->gather[k], &s->gather_wait_s);
        s->prefetch_hits++;
    } else { /* a free slot; the other may hold a prefetch that guessed wrong, finished before it is reused */
        k = s->gather[0].group < 0 && !s->gather[0].busy ? 0 : 1;
        llm4d_zero_slot_wait(s, &s->gather[k], &s->gather_wait_s);
        gather_start(s, k, grp, 1);
    }
    s->cur = k;
    const int next = predicted_next(s), other = 1 - k;
    if (next >= 0 && next != grp && !s->failed) {
        if (s->gather[other].busy) llm4d_zero_slot_wait(s, &s->gather[other], &s->gather_wait_s);
        gather_start(s, other, next, 0);
    } else if (!s->gather[other].busy) {
        s->gather[other].group = -1;
    }
    return s->gather[k].buf;
}

static void gathered_release(llm4d_sharding *s, int grp) {
    if (s->cur >= 0 && s->gather[s->cur].group == grp) {
        s->gather[s->cur].group = -1;
        s->cur = -1;
    }
    llm4d_zero_progress(s);
}

static float *gathered_at(llm4d_sharding *s, size_t flat, float *window) {
    (void)s, (void)flat;
    return window;
}

static llm4d_code gathered_updated(llm4d_sharding *s, llm4d_err *err) {
    (void)err;
    if (s->in_step) s->traced = 1; /* the first step's order is the schedule's; it is replayed from now on */
    return LLM4D_OK;               /* parameters are gathered when used */
}

/* The initial parameters of local elements [off, off + len) into dst (the elements from off on): each group's
 * shard is a range of the table's flat layout, drawn where it lies (the same numbers as the whole model's init,
 * keyed by global name and index). */
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

static llm4d_code gathered_init(llm4d_sharding *s, uint64_t seed, llm4d_err *err) {
    init_ctx ic = {s, seed};
    if (s->off) return llm4d_offload_stream(s->off, init_window, &ic, err); /* window by window into the file */
    init_local(s, s->local_params, 0, s->local_total, seed);
    return LLM4D_OK;
}

static void gathered_state(llm4d_sharding *s, llm4d_engine_state *out) {
    const size_t n = s->local_total;
    out->params = (llm4d_state_buf){s->local_params, n, 0};
    if (s->off) out->params = (llm4d_state_buf){llm4d_offload_map(s->off, LLM4D_OFFLOAD_PARAMS), n, 1};
    out->params_off = NULL;
    out->params_whole = 0;
}

static uint64_t gathered_hash(llm4d_sharding *s, int which) {
    const llm4d_param_table *t = &s->g->table;
    llm4d_view v = {0};
    llm4d_err verr;
    const float *p = s->off ? llm4d_offload_map(s->off, LLM4D_OFFLOAD_PARAMS) : NULL; /* host */
    if (!p) { /* device memory: through a host view */
        if (llm4d_view_open(&v, s->be, s->mem, s->local_params, s->local_total * sizeof(float), LLM4D_VIEW_READ,
                            &verr) != LLM4D_OK)
            return 0;
        p = v.host;
    }
    uint64_t h = LLM4D_HASH_INIT;
    if (!p) return 0;
    if (which == LLM4D_HASH_ALL) {
        h = llm4d_hash_words(p, s->local_total);
    } else {
        for (int i = 0; i < t->n; i++) {
            int64_t j0, j1;
            size_t local;
            if (llm4d_hash_takes(&t->p[i], which) && llm4d_zero_own_part(s, i, &j0, &j1, &local))
                h = llm4d_hash_more(h, p + local, (size_t)(j1 - j0));
        }
    }
    llm4d_err ignored;
    if (s->off) llm4d_offload_unmap(s->off, &ignored);
    llm4d_view_close(&v, s->be, s->mem);
    return h;
}

const llm4d_zero_params llm4d_zero_params_gathered = {
    .what = "sharded (gathered per group when used, the next group prefetched)",
    .whole = 0,
    .gather_at = LLM4D_AT_USE,
    .params_for = gathered_for,
    .release = gathered_release,
    .at = gathered_at,
    .updated = gathered_updated,
    .init = gathered_init,
    .state = gathered_state,
    .hash = gathered_hash,
};
