/* sharding_grads.c — the ZeRO engine's two gradient policies (sharding_policy.h).
 *
 * whole (stage 1): the model accumulates into a whole flat gradient; when a group's last window of the step is done,
 *   its range is reduce-scattered (non-blocking) into a receive shard of a ring of two, which is then written over
 *   the own block of the flat gradient. Traffic: every group reduce-scattered once per step ((N-1)/N of it per
 *   rank). Memory: the flat gradient (4 Psi) and two receive shards.
 * bucketed (stages 2, 3): a window hands out a bucket (a ring of two, the largest group's size), which is
 *   reduce-scattered (non-blocking) when the window closes and added into the own shard of the local gradient
 *   (accumulated over micro-batches and over the windows of a group). Traffic: every window reduce-scattered (the
 *   embedding's lookup and head windows apart when one rank holds both). Memory: 4 Psi/N plus two buckets and two
 *   receive shards.
 * With bf16 payloads the bucket (or the range) is rounded to bf16 first and the reduced bf16 shard is converted back
 * as it lands (written or added, as above). Hybrid dp all-reduces the own shards across the replicas after
 * backward (fp32). */
#include "parallel/sharding_policy.h"

#include "core/timer.h"

/* A reduce-scatter finished: its shard into the owner's gradient. */
static void grad_complete(llm4d_sharding *s, llm4d_ring_slot *r) {
    llm4d_zero_slot_wait(s, r, &s->rs_wait_s);
    if (r->group < 0) return;
    const int grp = r->group;
    const size_t n = s->shard_len[grp];
    const llm4d_zero_grads *gp = s->grads_policy;
    float *own = gp->at(s, s->range_lo[grp], s->shard_off[grp]);
    if (s->bf16) s->be->from_bf16(s->be, own, r->recv16, n, gp->store);
    else if (gp->store == LLM4D_ADD) s->be->add(s->be, own, r->recv, n);
    else s->be->copy(s->be, own, r->recv, n * sizeof(float));
    r->group = -1;
}

void llm4d_zero_grads_drain(llm4d_sharding *s) {
    for (int k = 0; k < 2; k++) grad_complete(s, &s->grad_ring[k]);
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

/* ---- whole: the model's flat gradient ---- */

static float *whole_at(llm4d_sharding *s, size_t flat, size_t local) {
    (void)local;
    return s->g->grads + flat;
}

static float *whole_for(llm4d_sharding *s, int grp) { return s->g->grads + llm4d_zero_group_lo(s, grp); }

static void whole_done(llm4d_sharding *s, int grp, const llm4d_event *ready) { /* its last window (rs_at) */
    rs_start(s, grad_slot(s), s->g->grads + llm4d_zero_group_lo(s, grp), grp, ready);
}

/* The flat gradient starts over (reset: the model settles each group's range at grads_done, before whole_done
 * reduce-scatters it). */
static void whole_begin(llm4d_sharding *s) {
    llm4d_grads_start(s->be, s->g->grads, s->g->table.total * sizeof(float));
}

static llm4d_code whole_dp_reduce(llm4d_sharding *s, llm4d_err *err) {
    for (int grp = 0; grp < s->n_groups; grp++)
        LLM4D_TRY(llm4d_comm_dev_allreduce(s->dp, whole_at(s, s->range_lo[grp], 0), s->shard_len[grp], LLM4D_COMM_F32,
                                           LLM4D_COMM_SUM, err));
    return LLM4D_OK;
}

const llm4d_zero_grads llm4d_zero_grads_whole = {
    .what = "whole, reduce-scattered during backward",
    .whole = 1,
    .rs_at = LLM4D_AT_LAST_WINDOW,
    .dp_per_group = 1,
    .at = whole_at,
    .store = LLM4D_WRITE,
    .grads_for = whole_for,
    .grads_done = whole_done,
    .begin = whole_begin,
    .dp_reduce = whole_dp_reduce,
};

/* ---- bucketed: per-window buckets into the own shards ---- */

static float *bucket_at(llm4d_sharding *s, size_t flat, size_t local) {
    (void)flat;
    return s->local_grads + local;
}

static float *bucket_for(llm4d_sharding *s, int grp) {
    LLM4D_ASSERT(s->grad_open < 0, "group %d: a gradient window opened inside another", grp);
    llm4d_ring_slot *r = grad_slot(s);
    s->grad_open = (int)(r - s->grad_ring);
    llm4d_grads_start(s->be, r->buf, llm4d_zero_group_len(s, grp) * sizeof(float)); /* settled at bucket_done */
    return r->buf;
}

static void bucket_done(llm4d_sharding *s, int grp, const llm4d_event *ready) {
    llm4d_ring_slot *r = &s->grad_ring[s->grad_open];
    s->grad_open = -1;
    /* what the window's kernels wrote nowhere is zeros before the bucket is reduced */
    if (s->be->grads_settle) s->be->grads_settle(s->be, r->buf, llm4d_zero_group_len(s, grp) * sizeof(float));
    rs_start(s, r, r->buf, grp, ready);
}

static void bucket_begin(llm4d_sharding *s) { s->be->zero(s->be, s->local_grads, s->local_total * sizeof(float)); }

static llm4d_code bucket_dp_reduce(llm4d_sharding *s, llm4d_err *err) {
    return llm4d_comm_dev_allreduce(s->dp, s->local_grads, s->local_total, LLM4D_COMM_F32, LLM4D_COMM_SUM, err);
}

const llm4d_zero_grads llm4d_zero_grads_bucketed = {
    .what = "sharded (per-window buckets reduce-scattered during backward)",
    .whole = 0,
    .rs_at = LLM4D_AT_WINDOW,
    .dp_per_group = 0,
    .at = bucket_at,
    .store = LLM4D_ADD,
    .grads_for = bucket_for,
    .grads_done = bucket_done,
    .begin = bucket_begin,
    .dp_reduce = bucket_dp_reduce,
};
