/* data_parallel.c — bucketed, overlapped gradient all-reduce (see data_parallel.h). */
#include "parallel/data_parallel.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_shm.h"
#include "core/timer.h"

static llm4d_dp *of(llm4d_engine *e) { return (llm4d_dp *)e; }

/* Whether bucket b of n starts during backward (as its last group's last window closes) rather than blocking in
 * finish: every bucket but the last (the embeddings: nothing left to hide it behind) of an overlapped step. The
 * hooks, finish and the published traffic (llm4d_dp_traffic) read this one answer. */
static int started_in_backward(int b, int n, int overlap) { return overlap && b != n - 1; }

static void start_bucket(llm4d_dp *dp, llm4d_dp_bucket *b, const llm4d_event *ready) {
    if (dp->failed) return;
    const double t0 = llm4d_now();
    llm4d_code rc;
    if (dp->g16) { /* rounded after the gradient kernels, on the same stream: ready is then the whole stream */
        dp->g->be->to_bf16(dp->g->be, dp->g16 + b->lo, dp->grads + b->lo, b->hi - b->lo);
        rc = llm4d_comm_dev_iallreduce(dp->comm, dp->g16 + b->lo, b->hi - b->lo, LLM4D_COMM_BF16, NULL, &b->req,
                                       &dp->err);
    } else {
        rc = llm4d_comm_dev_iallreduce(dp->comm, dp->grads + b->lo, b->hi - b->lo, LLM4D_COMM_F32, ready, &b->req,
                                       &dp->err);
    }
    if (rc != LLM4D_OK) dp->failed = 1;
    b->started = 1;
    b->t_start = t0 - dp->t_arm;
    dp->base.comm_total_s += llm4d_now() - t0;
}

/* bf16 payloads: a completed bucket's sum back into the fp32 gradients (once). */
static void land(llm4d_dp *dp, llm4d_dp_bucket *b) {
    if (!dp->g16 || b->landed || dp->failed) return;
    dp->g->be->from_bf16(dp->g->be, dp->grads + b->lo, dp->g16 + b->lo, b->hi - b->lo, LLM4D_WRITE);
    b->landed = 1;
}

/* Drive the outstanding reductions forward (comm.h llm4d_comm_progress); a bucket seen complete gets its time. */
static void progress(llm4d_dp *dp) {
    const double t0 = llm4d_now();
    if (!dp->failed && llm4d_comm_progress(dp->comm, &dp->err) != LLM4D_OK) dp->failed = 1;
    for (int i = 0; i < dp->n_buckets; i++) {
        llm4d_dp_bucket *b = &dp->buckets[i];
        if (b->started && !b->req.comm && b->t_done < 0) {
            b->t_done = llm4d_now() - dp->t_arm;
            land(dp, b);
        }
    }
    dp->tests++;
    dp->base.comm_total_s += llm4d_now() - t0;
}

static void dp_grads_done(llm4d_engine *e, int group, const llm4d_event *ready) {
    llm4d_dp *dp = of(e);
    LLM4D_ASSERT(dp->windows_left[group] > 0, "group %d: more gradient windows than the step has", group);
    if (--dp->windows_left[group] > 0) return; /* not final yet: later micro-batches add to it */
    dp->t_backward_end = llm4d_now() - dp->t_arm;
    if (!dp->overlap) return;
    llm4d_dp_bucket *b = &dp->buckets[dp->bucket_of_group[group]];
    /* The last bucket (it holds the embeddings, whose gradient is finished by the very last op of backward) has
     * no compute left to hide behind: llm4d_dp_finish reduces it with a blocking all-reduce, which MPI libraries
     * implement better than their non-blocking one (Open MPI 4.1's libnbc does a binomial reduce to rank 0 then a
     * broadcast for fewer than 4 ranks or in-place buffers; measured in bench/bench_dp.sh). */
    if (--b->pending == 0 && started_in_backward((int)(b - dp->buckets), dp->n_buckets, dp->overlap))
        start_bucket(dp, b, ready);
    progress(dp);
}

static void dp_begin_step(llm4d_engine *e, int n_micro) {
    llm4d_dp *dp = of(e);
    /* dp_overlap alternate: odd steps overlapped, even steps blocking (the same on every rank), so a
     * benchmark compares both under the same machine load */
    if (dp->overlap_mode == 2) dp->overlap = dp->n_steps % 2 == 0;
    dp->n_steps++;
    dp->t_arm = llm4d_now();
    dp->tests = 0;
    for (int grp = 0; grp < dp->g->table.n_groups; grp++)
        dp->windows_left[grp] = n_micro * llm4d_gpt_windows(dp->g, grp);
    for (int i = 0; i < dp->n_buckets; i++) {
        dp->buckets[i].pending = dp->buckets[i].n_groups;
        dp->buckets[i].started = dp->buckets[i].landed = 0;
        dp->buckets[i].t_start = dp->buckets[i].t_done = -1;
    }
}

/* One line per step (dp_trace): where each bucket's reduction ran relative to backward. */
static void print_trace(const llm4d_dp *dp) {
    printf("llm4d dp trace: rank %d %s backward %.4f s, %d progress calls, wait %.4f s, comm %.4f s, buckets "
           "(MB start done):",
           dp->comm->rank, dp->overlap ? "overlap" : "blocking", dp->t_backward_end, dp->tests,
           dp->base.comm_wait_s, dp->base.comm_total_s);
    for (int i = 0; i < dp->n_buckets; i++) {
        const llm4d_dp_bucket *b = &dp->buckets[i];
        printf(" %.2f %.4f %.4f", (double)(b->hi - b->lo) * sizeof(float) / 1e6, b->t_start, b->t_done);
    }
    printf("\n");
    fflush(stdout);
}

static llm4d_code dp_finish(llm4d_engine *e, llm4d_err *err) {
    llm4d_dp *dp = of(e);
    const double t0 = llm4d_now();
    /* blocking mode: every bucket in order; overlapped: the last bucket first (the others progress meanwhile) */
    for (int k = 0; k < dp->n_buckets && !dp->failed; k++) {
        const int i = dp->overlap ? (k + dp->n_buckets - 1) % dp->n_buckets : k;
        llm4d_dp_bucket *b = &dp->buckets[i];
        if (!started_in_backward(i, dp->n_buckets, dp->overlap)) {
            b->t_start = llm4d_now() - dp->t_arm;
            const size_t n = b->hi - b->lo;
            llm4d_backend *be = dp->g->be;
            if (dp->g16) be->to_bf16(be, dp->g16 + b->lo, dp->grads + b->lo, n);
            if ((dp->g16 ? llm4d_comm_dev_allreduce(dp->comm, dp->g16 + b->lo, n, LLM4D_COMM_BF16, LLM4D_COMM_SUM,
                                                    &dp->err)
                         : llm4d_comm_dev_allreduce(dp->comm, dp->grads + b->lo, n, LLM4D_COMM_F32, LLM4D_COMM_SUM,
                                                    &dp->err)) != LLM4D_OK)
                dp->failed = 1;
            land(dp, b);
            b->t_done = llm4d_now() - dp->t_arm;
            continue;
        }
        LLM4D_ASSERT(b->started, "bucket %d of %d: not all of its groups reported done", i, dp->n_buckets);
        if (!dp->failed && b->req.comm && llm4d_comm_wait(&b->req, &dp->err) != LLM4D_OK) dp->failed = 1;
        land(dp, b);
        if (b->t_done < 0) b->t_done = llm4d_now() - dp->t_arm;
    }
    dp->base.comm_wait_s = llm4d_now() - t0;
    dp->base.comm_total_s += dp->base.comm_wait_s;
    if (dp->trace && !dp->failed) print_trace(dp);
    if (dp->failed) {
        dp->failed = 0;
        *err = dp->err;
        return err->code;
    }
    return LLM4D_OK;
}

static void dp_destroy(llm4d_engine *e) {
    llm4d_dp *dp = of(e);
    if (dp->shared) llm4d_shm_unshare(dp->comm, dp->shared); /* private again before its owner frees it */
    dp->shared = NULL;
    if (dp->g16) dp->g->be->free(dp->g->be, dp->g->mem, LLM4D_MEM_COMM, dp->g16, llm4d_dp_bytes(&dp->g->table, 1));
    dp->g16 = NULL;
    free(dp->buckets);
    free(dp->bucket_of_group);
    free(dp->windows_left);
    dp->buckets = NULL;
    dp->bucket_of_group = dp->windows_left = NULL;
}

static void dp_describe(llm4d_engine *e, char *buf, size_t n) {
    llm4d_dp *dp = of(e);
    snprintf(buf, n, "data parallel over %d ranks: gradients all-reduced in %d buckets as backward completes them, "
             "%s payloads%s%s%s", dp->comm->size, dp->n_buckets, dp->g16 ? "bf16" : "fp32",
             dp->shared ? ", summed in place in memory the host's ranks share" : "",
             !dp->shared && dp->share_why[0] ? ", not shared in place: " : "", dp->shared ? "" : dp->share_why);
}

static const llm4d_engine_ops dp_ops = {
    .name = "data_parallel",
    .grads_done = dp_grads_done,
    .begin_step = dp_begin_step,
    .finish_backward = dp_finish,
    .describe = dp_describe,
    .destroy = dp_destroy,
};

int llm4d_dp_grads_in_shm(int host_addressable, int shm_ranks, int hosts, const char **why) {
    const int peers = host_addressable && shm_ranks > 1;
    if (why) *why = peers && hosts > 1 ? "the group spans hosts" : "";
    return peers && hosts == 1;
}

int llm4d_dp_buckets(const llm4d_param_table *t, size_t bucket_bytes, int *bucket_of_group, size_t *lo, size_t *hi,
                     int *n_groups) {
    /* Walk groups in the order backward completes them: the last group (final LayerNorm) first, down to the
     * embeddings. Groups are adjacent in the buffer in that order (descending addresses), so a run of them is one
     * range. */
    const size_t bucket_elems = bucket_bytes / sizeof(float) > 0 ? bucket_bytes / sizeof(float) : 1;
    int n = 0;
    for (int grp = t->n_groups - 1; grp >= 0; grp--) {
        const size_t glo = t->g[grp].lo, ghi = t->g[grp].hi;
        if (n == 0 || hi[n - 1] - lo[n - 1] >= bucket_elems) {
            lo[n] = glo, hi[n] = ghi, n_groups[n] = 0;
            n++;
        }
        LLM4D_ASSERT(ghi == lo[n - 1] || n_groups[n - 1] == 0, "group %d [%zu,%zu) not adjacent to bucket [%zu,%zu)",
                     grp, glo, ghi, lo[n - 1], hi[n - 1]);
        lo[n - 1] = glo;
        n_groups[n - 1]++;
        bucket_of_group[grp] = n - 1;
    }
    return n;
}

llm4d_code llm4d_dp_traffic(const llm4d_traffic_shape *sh, int bf16, int overlap, llm4d_traffic *out, llm4d_err *err) {
    for (int b = 0; b < sh->n_buckets; b++) {
        const int early = started_in_backward(b, sh->n_buckets, overlap);
        const llm4d_traffic_call c = {.what = LLM4D_TW_DP_BUCKET, .op = LLM4D_COMM_OP_ALLREDUCE, .group = LLM4D_TG_DATA,
                                      .dtype = bf16 ? LLM4D_COMM_BF16 : LLM4D_COMM_F32,
                                      .when = early ? LLM4D_AT_LAST_WINDOW : LLM4D_AT_BACKWARD_END, .blocking = !early,
                                      .id = b, .count = sh->bucket_len[b], .len = sh->bucket_len[b], .per_step = 1};
        LLM4D_TRY(llm4d_traffic_add(out, &c, err));
    }
    return LLM4D_OK;
}

llm4d_code llm4d_dp_init(llm4d_dp *dp, llm4d_gpt *g, llm4d_comm *data_comm, size_t bucket_bytes, const char *overlap,
                         int trace, int bf16, llm4d_err *err) {
    memset(dp, 0, sizeof *dp);
    dp->base.ops = &dp_ops;
    dp->g = g;
    dp->comm = data_comm;
    dp->grads = g->grads;
    const llm4d_param_table *t = &g->table;
    const int G = t->n_groups;
    dp->buckets = calloc((size_t)G, sizeof *dp->buckets);
    dp->bucket_of_group = calloc((size_t)G, sizeof *dp->bucket_of_group);
    dp->windows_left = calloc((size_t)G, sizeof *dp->windows_left);
    if (!dp->buckets || !dp->bucket_of_group || !dp->windows_left) {
        dp_destroy(&dp->base);
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    }
    size_t *lo = calloc((size_t)G, sizeof *lo), *hi = calloc((size_t)G, sizeof *hi);
    int *ng = calloc((size_t)G, sizeof *ng);
    if (!lo || !hi || !ng) {
        free(lo), free(hi), free(ng);
        dp_destroy(&dp->base);
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    }
    dp->n_buckets = llm4d_dp_buckets(t, bucket_bytes, dp->bucket_of_group, lo, hi, ng);
    for (int i = 0; i < dp->n_buckets; i++)
        dp->buckets[i].lo = lo[i], dp->buckets[i].hi = hi[i], dp->buckets[i].n_groups = ng[i];
    free(lo), free(hi), free(ng);
    for (int i = 0; i < dp->n_buckets; i++) dp->buckets[i].pending = dp->buckets[i].n_groups;
    if (bf16 && (!g->be->to_bf16 || !g->be->from_bf16)) {
        dp_destroy(&dp->base);
        return llm4d_fail(err, LLM4D_EUSER, "grad_comm_dtype bfloat16: the %s backend cannot convert gradients to "
                          "bf16; use grad_comm_dtype float32", g->be->name);
    }
    if (bf16 && !(dp->g16 = g->be->alloc(g->be, g->mem, LLM4D_MEM_COMM, llm4d_dp_bytes(t, 1)))) {
        dp_destroy(&dp->base);
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory for the bf16 gradient payloads");
    }
    /* On the shared-memory path the payload buffer is moved into shared memory where it is (comm/shm_share.h), so
     * that a bucket's all-reduce sums the host's buffers directly instead of copying them through the slots. Host
     * memory only (a device's gradients are staged), and only where the whole group can (else it says why). */
    int hosts = 0;
    const int shm_ranks = data_comm->nccl ? 0 : llm4d_shm_host_ranks(data_comm, &hosts);
    const char *why;
    if (!llm4d_dp_grads_in_shm(g->be->host_addressable, shm_ranks, hosts, &why)) {
        snprintf(dp->share_why, sizeof dp->share_why, "%s", why);
    } else {
        void *payload = dp->g16 ? (void *)dp->g16 : (void *)dp->grads;
        const size_t bytes = LLM4D_MEM_SPAN(dp->g16 ? llm4d_dp_bytes(t, 1) : t->total * sizeof(float));
        int shared = 0;
        llm4d_code rc = llm4d_shm_share(data_comm, payload, bytes, &shared, dp->share_why, sizeof dp->share_why, err);
        if (rc != LLM4D_OK) {
            dp_destroy(&dp->base);
            return rc;
        }
        if (shared) dp->shared = payload;
    }
    dp->overlap_mode = !strcmp(overlap, "off") ? 0 : !strcmp(overlap, "alternate") ? 2 : 1;
    dp->overlap = dp->overlap_mode != 0;
    dp->trace = trace;
    return LLM4D_OK;
}
