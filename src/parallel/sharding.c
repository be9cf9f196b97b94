/* sharding.c — ZeRO stages 1-3 over the model's parameter groups (see sharding.h for the scheme): the engine's
 * hooks, update, checkpoint boxes and construction, composed of a parameter policy and a gradient policy chosen once
 * from the stage (sharding_policy.h); what differs between the stages lives in those policies. */
#include "parallel/sharding_policy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/hash.h"
#include "core/timer.h"
#include "model/shard_range.h"
#include "parallel/offload.h"

static llm4d_sharding *of(llm4d_engine *e) { return (llm4d_sharding *)e; }

void llm4d_zero_policies(int stage, const llm4d_zero_params **p, const llm4d_zero_grads **g) {
    *p = stage >= 3 ? &llm4d_zero_params_gathered : &llm4d_zero_params_whole;
    *g = stage >= 2 ? &llm4d_zero_grads_bucketed : &llm4d_zero_grads_whole;
}

/* Elements of a block group of model m with tensor-parallel degree M (params.h's layout, before alignment). */
static size_t block_group_elems(const llm4d_model_config *m, int M) {
    const size_t C = m->hidden_size, F = m->ffn_hidden_size;
    return 4 * C + (3 * C * C + 3 * C + C * C + F * C + F + C * F) / (size_t)M + 2 * C;
}

void llm4d_sharding_part(int stage, int N, const llm4d_model_config *m, llm4d_model_part *part,
                         llm4d_gpt_layout *layout) {
    const llm4d_zero_params *pp;
    const llm4d_zero_grads *gp;
    llm4d_zero_policies(stage, &pp, &gp);
    part->align = N;
    layout->no_params = !pp->whole;
    layout->no_grads = !gp->whole;
    if (!pp->whole || !gp->whole) { /* group-sized ring buffers (gather buffers, buckets) */
        /* vocabulary blocks no larger than a block group (so no buffer is sized by the vocabulary), but at least
         * 2^20 elements (a small model's blocks would otherwise cut the embedding into hundreds of collectives) */
        size_t elems = block_group_elems(m, part->mp_size > 0 ? part->mp_size : 1);
        if (elems < ((size_t)1 << 20)) elems = (size_t)1 << 20;
        part->wte_block_rows = (int64_t)((elems + (size_t)m->hidden_size - 1) / (size_t)m->hidden_size);
    }
}

void llm4d_zero_slot_wait(llm4d_sharding *s, llm4d_ring_slot *r, double *acc) {
    if (!r->busy) return;
    const double t0 = llm4d_now();
    HOOK_TRY(llm4d_comm_wait(&r->req, &s->err));
    *acc += llm4d_now() - t0;
    r->busy = 0;
}

/* The gathers and reduce-scatters in flight, moved forward between kernels (comm.h llm4d_comm_progress). */
void llm4d_zero_progress(llm4d_sharding *s) { HOOK_TRY(llm4d_comm_progress(s->sh, &s->err)); }

static float *sh_params_for(llm4d_engine *e, int grp, int pass) {
    (void)pass;
    llm4d_sharding *s = of(e);
    return s->params_policy->params_for(s, grp);
}

static void sh_release(llm4d_engine *e, int grp, int pass) {
    (void)pass;
    llm4d_sharding *s = of(e);
    s->params_policy->release(s, grp);
}

static float *sh_grads_for(llm4d_engine *e, int grp) {
    llm4d_sharding *s = of(e);
    return s->grads_policy->grads_for(s, grp);
}

static void sh_grads_done(llm4d_engine *e, int grp, const llm4d_event *ready) {
    llm4d_sharding *s = of(e);
    LLM4D_ASSERT(s->windows_left[grp] > 0, "group %d: more gradient windows than the step has", grp);
    s->windows_left[grp]--;
    /* the policy's reduce-scatter: every window, or the group's last of the step (its rs_at, traffic.h) */
    if (s->grads_policy->rs_at == LLM4D_AT_WINDOW || s->windows_left[grp] == 0)
        s->grads_policy->grads_done(s, grp, ready);
    llm4d_zero_progress(s);
}

static void sh_begin_step(llm4d_engine *e, int n_micro) {
    llm4d_sharding *s = of(e);
    for (int grp = 0; grp < s->n_groups; grp++) s->windows_left[grp] = n_micro * llm4d_gpt_windows(s->g, grp);
    s->grads_policy->begin(s);
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

static llm4d_code sh_finish(llm4d_engine *e, llm4d_err *err) {
    llm4d_sharding *s = of(e);
    llm4d_zero_grads_drain(s);
    for (int grp = 0; grp < s->n_groups; grp++)
        LLM4D_ASSERT(s->windows_left[grp] == 0, "group %d: %d gradient windows never came", grp,
                     s->windows_left[grp]);
    LLM4D_TRY(check_failed(s, err));
    s->base.comm_wait_s = s->rs_wait_s + s->gather_wait_s;
    if (!s->dp) return LLM4D_OK;
    /* hybrid dp: only the owned shards cross between the dp replicas */
    return s->grads_policy->dp_reduce(s, err);
}

int llm4d_zero_own_part(const llm4d_sharding *s, int i, int64_t *j0, int64_t *j1, size_t *local) {
    const llm4d_param_table *t = &s->g->table;
    size_t a, b;
    if (!llm4d_shard_entry_part(t, s->N, s->rank, i, &a, &b)) return 0;
    const int grp = t->p[i].group;
    *j0 = (int64_t)a, *j1 = (int64_t)b;
    *local = s->shard_off[grp] + (t->p[i].offset + a - s->range_lo[grp]);
    return 1;
}

static float *sh_grad_view(llm4d_engine *e, int i, int64_t *j0, int64_t *j1) {
    llm4d_sharding *s = of(e);
    size_t local;
    if (!llm4d_zero_own_part(s, i, j0, j1, &local)) return NULL;
    return s->grads_policy->at(s, s->g->table.p[i].offset + (size_t)*j0, local);
}

static double sh_grad_sumsq(llm4d_engine *e) {
    llm4d_sharding *s = of(e);
    return s->counts ? llm4d_engine_grad_sumsq(e, s->g, 1, NULL) : 0.0;
}

/* The AdamW update of local elements [off, off + len) (a window of the offloaded states, or everything), the
 * entries cut at the window's edges. m, v and (a sharded parameter policy's) params point at local element off. */
typedef struct {
    llm4d_sharding *s;
    float lr, grad_scale;
} update_ctx;

/* The window's n ranges (device gradients, device or window parameters, window states from m0 on) updated on the
 * host backend: what is on the device staged into the pinned buffers at the range's place in the window, AdamW on
 * host memory only, the parameters copied back (offload_stream waits for those copies before the next window). */
static void update_on_host(llm4d_sharding *s, int n, const float *m0, float lr, float grad_scale) {
    llm4d_backend *be = s->be;
    for (int k = 0; k < n; k++) {
        const llm4d_opt_range *r = &s->ranges[k];
        const size_t at = (size_t)(r->m - m0), bytes = r->n * sizeof(float);
        s->host_ranges[k] = *r;
        be->copy_async(be, s->stage_g + at, r->g, bytes, LLM4D_D2H, LLM4D_STREAM_COMPUTE);
        s->host_ranges[k].g = s->stage_g + at;
        if (s->stage_p) {
            be->copy_async(be, s->stage_p + at, r->p, bytes, LLM4D_D2H, LLM4D_STREAM_COMPUTE);
            s->host_ranges[k].p = s->stage_p + at;
        }
    }
    be->stream_sync(be, LLM4D_STREAM_COMPUTE); /* the staged copies are in host memory */
    llm4d_optimizer_apply(&s->opt, s->host_ranges, n, lr, grad_scale, 0);
    s->opt.be->stream_sync(s->opt.be, LLM4D_STREAM_COMPUTE);
    for (int k = 0; s->stage_p && k < n; k++)
        be->copy_async(be, s->ranges[k].p, s->host_ranges[k].p, s->ranges[k].n * sizeof(float), LLM4D_H2D,
                       LLM4D_STREAM_COMPUTE);
}

static void update_window(void *ctx, size_t off, size_t len, float **bufs) {
    update_ctx *u = ctx;
    llm4d_sharding *s = u->s;
    const size_t end = off + len;
    int n = 0;
    for (int i = 0; i < s->g->table.n; i++) {
        int64_t j0, j1;
        size_t local;
        if (!llm4d_zero_own_part(s, i, &j0, &j1, &local)) continue;
        size_t a = local, b = local + (size_t)(j1 - j0);
        if (a < off) a = off;
        if (b > end) b = end;
        if (a >= b) continue;
        const llm4d_param *p = &s->g->table.p[i];
        const size_t flat = p->offset + (size_t)j0 + (a - local); /* its place in the table's layout */
        float *w = s->params_policy->at(s, flat, bufs[LLM4D_OFFLOAD_PARAMS] ? bufs[LLM4D_OFFLOAD_PARAMS] + (a - off)
                                                                              : NULL);
        float *gr = s->grads_policy->at(s, flat, a);
        s->ranges[n++] = (llm4d_opt_range){w, gr, bufs[LLM4D_OFFLOAD_M] + (a - off), bufs[LLM4D_OFFLOAD_V] + (a - off),
                                           b - a, p->decay};
    }
    if (s->stage_g) update_on_host(s, n, bufs[LLM4D_OFFLOAD_M], u->lr, u->grad_scale);
    else llm4d_optimizer_apply(&s->opt, s->ranges, n, u->lr, u->grad_scale, 0);
}

static llm4d_code sh_update(llm4d_engine *e, float lr, float grad_scale, llm4d_err *err) {
    llm4d_sharding *s = of(e);
    /* never let a gather in flight read shards being updated */
    for (int k = 0; k < 2; k++) llm4d_zero_slot_wait(s, &s->gather[k], &s->gather_wait_s);
    for (int k = 0; k < 2; k++) s->gather[k].group = -1;
    s->cur = -1;
    LLM4D_TRY(check_failed(s, err));
    if (s->forward_only) return llm4d_fail(err, LLM4D_EINTERNAL, "a forward-only stack has no optimizer to update");
    llm4d_optimizer_next(&s->opt);
    update_ctx u = {s, lr, grad_scale};
    if (s->off) {
        LLM4D_TRY(llm4d_offload_stream(s->off, update_window, &u, err));
    } else {
        float *bufs[3] = {s->m, s->v, s->local_params};
        update_window(&u, 0, s->local_total, bufs);
    }
    const llm4d_code rc = s->params_policy->updated(s, err);
    s->in_step = 0;
    return rc;
}

static void sh_state(llm4d_engine *e, llm4d_engine_state *out) {
    llm4d_sharding *s = of(e);
    const size_t n = s->local_total;
    *out = (llm4d_engine_state){.n = s->n_groups, .lo = s->range_lo, .hi = s->range_hi, .m = {s->m, n, 0},
                                .v = {s->v, n, 0}, .state_off = s->shard_off, .writes = s->counts};
    if (s->off) { /* the offloaded states, mapped from their file (host memory) for the duration of a save or load */
        out->m = (llm4d_state_buf){llm4d_offload_map(s->off, LLM4D_OFFLOAD_M), n, 1};
        out->v = (llm4d_state_buf){llm4d_offload_map(s->off, LLM4D_OFFLOAD_V), n, 1};
    }
    s->params_policy->state(s, out);
}

static llm4d_code sh_state_done(llm4d_engine *e, llm4d_err *err) {
    llm4d_sharding *s = of(e);
    return s->off ? llm4d_offload_unmap(s->off, err) : LLM4D_OK;
}

static uint64_t sh_param_hash(llm4d_engine *e, int which) {
    llm4d_sharding *s = of(e);
    return s->params_policy->hash(s, which);
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
    if (s->forward_only) {
        snprintf(buf, n, "sharding stage %d over %d ranks (rank %d)%s: parameters %s; forward only: no gradients, no "
                 "Adam m/v", s->stage, s->N, s->rank, s->dp ? ", hybrid with data parallel" : "", s->params_policy->what);
        return;
    }
    snprintf(buf, n,
             "sharding stage %d over %d ranks (rank %d)%s: parameters %s, gradients %s, Adam m/v %s%s%s%s%s",
             s->stage, s->N, s->rank, s->dp ? ", hybrid with data parallel" : "",
             s->params_policy->what, s->grads_policy->what,
             s->off ? "offloaded" : "sharded in memory", s->off ? ": " : "", off,
             s->stage_g ? "; AdamW on the host backend (gradients staged to pinned memory" : "",
             s->stage_g ? (s->stage_p ? ", parameters there and back)" : ")") : "");
}

static void sh_stats(llm4d_engine *e, llm4d_engine_stats *out) {
    llm4d_sharding *s = of(e);
    out->zero_gather_wait_s += s->gather_wait_s;
    out->zero_rs_wait_s += s->rs_wait_s;
}

/* The sharding group's shards of a local buffer (host memory) into a whole buffer of the table's layout. */
static llm4d_code gather_full(llm4d_sharding *s, const float *local, float *full, llm4d_err *err) {
    for (int grp = 0; grp < s->n_groups; grp++)
        LLM4D_TRY(llm4d_comm_allgather(s->sh, local + s->shard_off[grp], full + llm4d_zero_group_lo(s, grp),
                                       s->shard_len[grp], LLM4D_COMM_F32, err));
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
        llm4d_zero_slot_wait(s, &s->gather[k], &s->gather_wait_s);
        llm4d_zero_slot_wait(s, &s->grad_ring[k], &s->rs_wait_s);
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
    if (s->stage_g) s->be->free_host(s->be, s->mem, LLM4D_MEM_OPTIM, s->stage_g, s->stage_n * sizeof(float));
    if (s->stage_p) s->be->free_host(s->be, s->mem, LLM4D_MEM_OPTIM, s->stage_p, s->stage_n * sizeof(float));
    free(s->host_ranges);
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

size_t llm4d_sharding_kept(const llm4d_param_table *t, int N) {
    llm4d_shard_sizes z;
    llm4d_shard_ranges(t, N, 0, NULL, NULL, NULL, &z);
    return z.local_total;
}

void llm4d_sharding_staging_bytes(const llm4d_param_table *t, int stage, int N, int offload, int forward_only,
                                 const char *device, size_t bytes[]) {
    if (!offload || forward_only || !llm4d_backend_has_host(device)) return;
    const llm4d_zero_params *pp;
    const llm4d_zero_grads *gp;
    llm4d_zero_policies(stage, &pp, &gp);
    llm4d_shard_sizes z;
    llm4d_shard_ranges(t, N, 0, NULL, NULL, NULL, &z);
    bytes[LLM4D_MEM_OPTIM] += (pp->whole ? 2 : 1) * llm4d_offload_window(z.local_total) * sizeof(float);
}

/* Offload streams: Adam m and v, and the parameter shards when the parameter policy keeps them apart. */
static int offload_streams(const llm4d_zero_params *pp) { return pp->whole ? 2 : 3; }

llm4d_zero_traits llm4d_sharding_traits(const llm4d_dist_config *d) {
    if (d->sharding_degree <= 1) return (llm4d_zero_traits){.params_whole = 1, .grads_whole = 1};
    const llm4d_zero_params *pp;
    const llm4d_zero_grads *gp;
    llm4d_zero_policies(d->sharding_stage, &pp, &gp);
    return (llm4d_zero_traits){.on = 1, .params_whole = pp->whole, .grads_whole = gp->whole,
                               .offload_streams = offload_streams(pp)};
}

/* What a step of the engine moves (traffic.h), from its policies' data and the placement, as its hooks do it:
 * the reduce-scatters (bf16 payloads with grad_comm_dtype bfloat16, blocking under zero_overlap off), the hybrid
 * all-reduce of the own shards (fp32), the gathers (after the update, or at each use, blocking under zero_prefetch
 * off). Forward only: the gathers at use alone. */
llm4d_code llm4d_sharding_traffic(const llm4d_dist_config *d, int forward_only, const llm4d_traffic_shape *sh,
                                  const int *uses, int dp_size, llm4d_traffic *out, llm4d_err *err) {
    const llm4d_zero_params *pp;
    const llm4d_zero_grads *gp;
    llm4d_zero_policies(d->sharding_stage, &pp, &gp);
    const int N = d->sharding_degree, bf16 = !strcmp(d->grad_comm_dtype, "bfloat16");
    const int G = sh->n_groups;
    if (!forward_only) {
        for (int g = 0; g < G; g++) {
            const int every = gp->rs_at == LLM4D_AT_WINDOW;
            const llm4d_traffic_call c = {
                .what = LLM4D_TW_ZERO_RS, .op = LLM4D_COMM_OP_REDUCE_SCATTER, .group = LLM4D_TG_SHARDING,
                .dtype = bf16 ? LLM4D_COMM_BF16 : LLM4D_COMM_F32, .when = (uint8_t)gp->rs_at,
                .blocking = !d->zero_overlap, .id = g, .count = llm4d_shard_len(sh->group_len[g], N),
                .len = sh->group_len[g], .per_micro = every ? sh->windows[g] : 0, .per_step = every ? 0 : 1};
            LLM4D_TRY(llm4d_traffic_add(out, &c, err));
        }
        if (dp_size > 1) { /* after backward, the own shards over the replicas (dp_reduce) */
            size_t local = 0;
            for (int g = 0; g < G; g++) local += llm4d_shard_len(sh->group_len[g], N);
            for (int g = 0; g < (gp->dp_per_group ? G : 1); g++) {
                const size_t n = gp->dp_per_group ? llm4d_shard_len(sh->group_len[g], N) : local;
                const llm4d_traffic_call c = {
                    .what = LLM4D_TW_HYBRID, .op = LLM4D_COMM_OP_ALLREDUCE, .group = LLM4D_TG_DP,
                    .dtype = LLM4D_COMM_F32, .when = LLM4D_AT_BACKWARD_END, .blocking = 1,
                    .id = gp->dp_per_group ? g : -1, .count = n, .len = n, .per_step = 1};
                LLM4D_TRY(llm4d_traffic_add(out, &c, err));
            }
        }
    }
    const int at_use = pp->gather_at == LLM4D_AT_USE;
    if (!at_use && forward_only) return LLM4D_OK; /* no update, nothing gathered after it */
    for (int g = 0; g < G; g++) {
        const llm4d_traffic_call c = {
            .what = LLM4D_TW_ZERO_AG, .op = LLM4D_COMM_OP_ALLGATHER, .group = LLM4D_TG_SHARDING,
            .dtype = LLM4D_COMM_F32, .when = (uint8_t)pp->gather_at, .blocking = at_use ? !d->zero_prefetch : 1,
            .id = g, .count = llm4d_shard_len(sh->group_len[g], N), .len = sh->group_len[g],
            .per_micro = at_use && uses ? uses[g] : 0, .per_step = at_use ? 0 : 1};
        LLM4D_TRY(llm4d_traffic_add(out, &c, err));
    }
    return LLM4D_OK;
}

/* What follows reads the policies' data, as llm4d_sharding_init's allocation does. */
void llm4d_sharding_bytes(const llm4d_param_table *t, int stage, int N, int offload, int bf16, int forward_only,
                         size_t bytes[]) {
    const llm4d_zero_params *pp;
    const llm4d_zero_grads *gp;
    llm4d_zero_policies(stage, &pp, &gp);
    llm4d_shard_sizes z;
    llm4d_shard_ranges(t, N, 0, NULL, NULL, NULL, &z);
    const size_t local = z.local_total, group = z.max_group, shard = z.max_shard, f = sizeof(float);
    if (forward_only) { /* the parameter policy's shards and gather buffers only */
        if (!pp->whole) bytes[LLM4D_MEM_PARAMS] += local * f, bytes[LLM4D_MEM_COMM] += 2 * group * f;
        return;
    }
    if (offload) bytes[LLM4D_MEM_OPTIM] += llm4d_offload_memory(local, offload_streams(pp));
    else bytes[LLM4D_MEM_OPTIM] += 2 * local * f, bytes[LLM4D_MEM_PARAMS] += pp->whole ? 0 : local * f;
    if (!gp->whole) bytes[LLM4D_MEM_GRADS] += local * f;
    bytes[LLM4D_MEM_COMM] += 2 * (shard + (gp->whole ? 0 : group) + (pp->whole ? 0 : group)) * f;
    if (bf16) bytes[LLM4D_MEM_COMM] += 2 * (group + shard) * 2; /* the ring's bf16 payloads */
}

static float *alloc_f(llm4d_sharding *s, llm4d_mem_category c, size_t n, int *ok) {
    float *p = s->be->alloc(s->be, s->mem, c, n * sizeof(float));
    if (!p) *ok = 0;
    return p;
}

llm4d_code llm4d_sharding_init(llm4d_sharding *s, llm4d_gpt *g, const llm4d_dist_config *d,
                               const llm4d_sharding_groups *groups, llm4d_adamw opt, uint64_t seed, int forward_only,
                               llm4d_err *err) {
    llm4d_comm *sharding_comm = groups->sharding, *dp_comm = groups->dp;
    const int dp_index = groups->dp_index;
    memset(s, 0, sizeof *s);
    s->base.ops = &sharding_ops;
    s->forward_only = forward_only;
    /* forward only, offload has nothing to move: the parameter shards (stage 3) stay in memory */
    const int stage = d->sharding_stage, offload = d->sharding_offload && !forward_only;
    const char *offload_dir = d->offload_dir;
    s->prefetch_on = d->zero_prefetch;
    s->overlap_on = d->zero_overlap;
    s->bf16 = !strcmp(d->grad_comm_dtype, "bfloat16");
    s->opt = llm4d_optimizer_make(opt, g->be);
    s->stage = stage;
    llm4d_zero_policies(stage, &s->params_policy, &s->grads_policy);
    const llm4d_zero_params *pp = s->params_policy;
    const llm4d_zero_grads *gp = s->grads_policy;
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
    llm4d_shard_sizes z;
    llm4d_shard_ranges(t, s->N, s->rank, s->range_lo, s->range_hi, s->shard_off, &z);
    for (int grp = 0; grp < G; grp++) s->shard_len[grp] = s->range_hi[grp] - s->range_lo[grp];
    s->local_total = z.local_total, s->max_group = z.max_group, s->max_shard = z.max_shard;
    int ok = 1;
    if (forward_only) {
        if (!pp->whole) s->local_params = alloc_f(s, LLM4D_MEM_PARAMS, s->local_total, &ok);
    } else if (offload) {
        llm4d_code rc = llm4d_offload_open(&s->off, offload_dir, llm4d_comm_rank(sharding_comm), s->local_total,
                                           offload_streams(pp), s->be, s->mem, err);
        if (rc != LLM4D_OK) {
            sh_destroy(&s->base);
            return rc;
        }
        s->offload = 1;
        if (llm4d_backend_host(s->be) != s->be) { /* AdamW on the host backend, through pinned staging buffers */
            s->opt.be = llm4d_backend_host(s->be);
            s->stage_n = llm4d_offload_window(s->local_total);
            s->host_ranges = calloc((size_t)t->n, sizeof *s->host_ranges);
            s->stage_g = s->be->alloc_host(s->be, s->mem, LLM4D_MEM_OPTIM, s->stage_n * sizeof(float));
            if (pp->whole) s->stage_p = s->be->alloc_host(s->be, s->mem, LLM4D_MEM_OPTIM, s->stage_n * sizeof(float));
            ok = s->host_ranges && s->stage_g && (s->stage_p || !pp->whole);
        }
    } else {
        s->m = alloc_f(s, LLM4D_MEM_OPTIM, s->local_total, &ok);
        s->v = alloc_f(s, LLM4D_MEM_OPTIM, s->local_total, &ok);
        if (!pp->whole) s->local_params = alloc_f(s, LLM4D_MEM_PARAMS, s->local_total, &ok);
    }
    if (!gp->whole && !forward_only) s->local_grads = alloc_f(s, LLM4D_MEM_GRADS, s->local_total, &ok);
    if (s->bf16 && !forward_only && (!s->be->to_bf16 || !s->be->from_bf16)) {
        sh_destroy(&s->base);
        return llm4d_fail(err, LLM4D_EUSER, "grad_comm_dtype bfloat16: the %s backend cannot convert gradients to "
                          "bf16; use grad_comm_dtype float32", g->be->name);
    }
    for (int k = 0; k < 2; k++) {
        if (!pp->whole) s->gather[k].buf = alloc_f(s, LLM4D_MEM_COMM, s->max_group, &ok);
        if (forward_only) continue; /* no gradient ring */
        if (s->bf16) {
            ok &= (s->grad_ring[k].send16 = s->be->alloc(s->be, s->mem, LLM4D_MEM_COMM, s->max_group * 2)) != NULL;
            ok &= (s->grad_ring[k].recv16 = s->be->alloc(s->be, s->mem, LLM4D_MEM_COMM, s->max_shard * 2)) != NULL;
        }
        s->grad_ring[k].recv = alloc_f(s, LLM4D_MEM_COMM, s->max_shard, &ok);
        if (!gp->whole) s->grad_ring[k].buf = alloc_f(s, LLM4D_MEM_COMM, s->max_group, &ok);
    }
    if (!ok) {
        sh_destroy(&s->base);
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory allocating the sharded states");
    }
    const llm4d_code rc = pp->init(s, seed, err);
    if (rc != LLM4D_OK) sh_destroy(&s->base);
    return rc;
}
