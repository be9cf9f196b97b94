/* data_parallel.c — bucketed, overlapped gradient all-reduce (see data_parallel.h). */
#include "parallel/data_parallel.h"

#include <stdlib.h>
#include <string.h>

#include "core/timer.h"

static void start_bucket(llm4d_dp *dp, llm4d_dp_bucket *b) {
    if (dp->failed) return;
    const double t0 = llm4d_now();
    if (llm4d_comm_iallreduce(dp->comm, dp->grads + b->lo, b->hi - b->lo, LLM4D_COMM_F32, &b->req, &dp->err) !=
        LLM4D_OK)
        dp->failed = 1;
    b->started = 1;
    dp->comm_total_s += llm4d_now() - t0;
}

/* Drive the outstanding reductions forward (Open MPI progresses non-blocking collectives only inside MPI calls). */
static void progress(llm4d_dp *dp) {
    const double t0 = llm4d_now();
    for (int i = 0; i < dp->n_buckets && !dp->failed; i++) {
        llm4d_dp_bucket *b = &dp->buckets[i];
        if (!b->started || !b->req.comm) continue;
        int done = 0;
        if (llm4d_comm_test(&b->req, &done, &dp->err) != LLM4D_OK) dp->failed = 1;
    }
    dp->comm_total_s += llm4d_now() - t0;
}

static void on_grads_done(void *ctx, int group) {
    llm4d_dp *dp = ctx;
    if (!dp->armed) return;
    llm4d_dp_bucket *b = &dp->buckets[dp->bucket_of_group[group]];
    if (--b->pending == 0) start_bucket(dp, b);
    progress(dp);
}

llm4d_code llm4d_dp_init(llm4d_dp *dp, llm4d_gpt *g, llm4d_comm *data_comm, size_t bucket_bytes, llm4d_err *err) {
    memset(dp, 0, sizeof *dp);
    dp->comm = data_comm;
    dp->grads = g->grads;
    const llm4d_param_table *t = &g->table;
    const int G = t->n_groups;
    dp->buckets = calloc((size_t)G, sizeof *dp->buckets);
    dp->bucket_of_group = calloc((size_t)G, sizeof *dp->bucket_of_group);
    if (!dp->buckets || !dp->bucket_of_group) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    /* Walk groups in the order backward completes them: G-1 (final LayerNorm), G-2 .. 1 (blocks), 0 (embeddings).
     * Groups G-1 .. 1 are adjacent in the buffer in that order (descending addresses), so a run of them is one
     * range; the embeddings, finished last, close the last bucket. */
    const size_t bucket_elems = bucket_bytes / sizeof(float) > 0 ? bucket_bytes / sizeof(float) : 1;
    llm4d_dp_bucket *cur = NULL;
    for (int grp = G - 1; grp >= 0; grp--) {
        const size_t lo = t->group_lo[grp], hi = t->group_hi[grp];
        if (!cur || cur->hi - cur->lo >= bucket_elems) {
            cur = &dp->buckets[dp->n_buckets++];
            cur->lo = lo;
            cur->hi = hi;
        }
        LLM4D_ASSERT(hi == cur->lo || cur->n_groups == 0, "group %d [%zu,%zu) not adjacent to bucket [%zu,%zu)", grp,
                     lo, hi, cur->lo, cur->hi);
        cur->lo = lo;
        cur->n_groups++;
        dp->bucket_of_group[grp] = (int)(cur - dp->buckets);
    }
    for (int i = 0; i < dp->n_buckets; i++) dp->buckets[i].pending = dp->buckets[i].n_groups;
    g->hooks.ctx = dp;
    g->hooks.grads_done = on_grads_done;
    return LLM4D_OK;
}

void llm4d_dp_free(llm4d_dp *dp) {
    free(dp->buckets);
    free(dp->bucket_of_group);
    memset(dp, 0, sizeof *dp);
}

void llm4d_dp_arm(llm4d_dp *dp, int armed) {
    dp->armed = armed;
    if (armed) {
        dp->comm_wait_s = dp->comm_total_s = 0;
        for (int i = 0; i < dp->n_buckets; i++) {
            dp->buckets[i].pending = dp->buckets[i].n_groups;
            dp->buckets[i].started = 0;
        }
    }
}

llm4d_code llm4d_dp_finish(llm4d_dp *dp, llm4d_err *err) {
    const double t0 = llm4d_now();
    for (int i = 0; i < dp->n_buckets && !dp->failed; i++) {
        llm4d_dp_bucket *b = &dp->buckets[i];
        if (!b->started) start_bucket(dp, b); /* a bucket whose groups were not all reported (cannot happen) */
        if (!dp->failed && llm4d_comm_wait(&b->req, &dp->err) != LLM4D_OK) dp->failed = 1;
    }
    dp->comm_wait_s = llm4d_now() - t0;
    dp->comm_total_s += dp->comm_wait_s;
    dp->armed = 0;
    if (dp->failed) {
        *err = dp->err;
        return err->code;
    }
    return LLM4D_OK;
}
