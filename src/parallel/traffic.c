/* traffic.c — a rank's step of collectives and messages, assembled from the engines' own statements (see
 * traffic.h): which engines a configuration runs is stack.c's rule (sharding: the ZeRO engine; else data parallel
 * over a data group of more than one rank, not in a forward-only run; tensor parallel over a model group of more
 * than one rank, its engine not in a forward-only run; the pipeline with more than one stage), what each moves is
 * the engine's function. */
#include "parallel/traffic.h"

#include <stdlib.h>
#include <string.h>

#include "model/shard_range.h"
#include "parallel/data_parallel.h"
#include "parallel/pipeline.h"
#include "parallel/sharding.h"
#include "parallel/stack.h"
#include "parallel/tensor_parallel.h"

llm4d_code llm4d_traffic_shape_make(llm4d_traffic_shape *s, const llm4d_param_table *t, size_t bucket_bytes,
                                    llm4d_err *err) {
    memset(s, 0, sizeof *s);
    const size_t G = (size_t)t->n_groups + 1;
    s->n_groups = t->n_groups;
    s->group_len = calloc(G, sizeof *s->group_len);
    s->windows = calloc(G, sizeof *s->windows);
    s->bucket_len = calloc(G, sizeof *s->bucket_len);
    s->bucket_of_group = calloc(G, sizeof *s->bucket_of_group);
    s->bucket_groups = calloc(G, sizeof *s->bucket_groups);
    size_t *lo = calloc(G, sizeof *lo), *hi = calloc(G, sizeof *hi);
    if (!s->group_len || !s->windows || !s->bucket_len || !s->bucket_of_group || !s->bucket_groups || !lo || !hi) {
        free(lo), free(hi);
        llm4d_traffic_shape_free(s);
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    }
    for (int g = 0; g < t->n_groups; g++) {
        s->group_len[g] = t->g[g].hi - t->g[g].lo;
        s->windows[g] = llm4d_param_windows(t, g);
    }
    s->n_buckets = llm4d_dp_buckets(t, bucket_bytes, s->bucket_of_group, lo, hi, s->bucket_groups);
    for (int b = 0; b < s->n_buckets; b++) s->bucket_len[b] = hi[b] - lo[b];
    free(lo), free(hi);
    s->reduced = calloc((size_t)t->n + 1, sizeof *s->reduced);
    if (!s->reduced) {
        llm4d_traffic_shape_free(s);
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    }
    for (int i = 0; i < t->n; i++) {
        const llm4d_param *p = &t->p[i];
        if (p->kind != LLM4D_P_WTE && !p->tp_partial) continue;
        s->reduced[s->n_reduced++] = (llm4d_traffic_entry){
            .group = p->group, .at = p->offset - t->g[p->group].lo, .numel = p->numel, .tp_slots = p->tp_slots,
            .wte = p->kind == LLM4D_P_WTE, .tp_partial = (uint8_t)(p->tp_partial != 0)};
    }
    return LLM4D_OK;
}

void llm4d_traffic_shape_free(llm4d_traffic_shape *s) {
    free(s->group_len), free(s->windows), free(s->bucket_len), free(s->bucket_of_group), free(s->bucket_groups);
    free(s->reduced);
    memset(s, 0, sizeof *s);
}

llm4d_code llm4d_traffic_add(llm4d_traffic *t, const llm4d_traffic_call *c, llm4d_err *err) {
    if (t->n == t->cap) {
        const int cap = t->cap ? 2 * t->cap : 16;
        llm4d_traffic_call *x = realloc(t->c, (size_t)cap * sizeof *x);
        if (!x) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
        t->c = x, t->cap = cap;
    }
    t->c[t->n++] = *c;
    return LLM4D_OK;
}

void llm4d_traffic_free(llm4d_traffic *t) {
    free(t->c);
    memset(t, 0, sizeof *t);
}

llm4d_code llm4d_traffic_list(const llm4d_traffic_ask *a, llm4d_traffic *out, llm4d_err *err) {
    memset(out, 0, sizeof *out);
    const llm4d_dist_config *d = &a->cfg->dist;
    const llm4d_topology *topo = a->topo;
    const int fwd = a->cfg->forward_only, bf16 = !strcmp(d->grad_comm_dtype, "bfloat16");
    out->size[LLM4D_TG_DATA] = topo->data_world;
    out->size[LLM4D_TG_SHARDING] = topo->degree[LLM4D_AXIS_SHARDING];
    out->size[LLM4D_TG_DP] = topo->degree[LLM4D_AXIS_DATA];
    out->size[LLM4D_TG_MODEL] = topo->degree[LLM4D_AXIS_MODEL];
    out->size[LLM4D_TG_PIPE] = topo->degree[LLM4D_AXIS_PIPE];
    out->size[LLM4D_TG_EMB] = 2;
    llm4d_code rc = LLM4D_OK;
    if (d->sharding_degree > 1)
        rc = llm4d_sharding_traffic(d, fwd, a->shape, a->uses, topo->degree[LLM4D_AXIS_DATA], out, err);
    else if (!fwd && topo->data_world > 1)
        rc = llm4d_dp_traffic(a->shape, bf16, a->overlap, out, err);
    const int P = topo->degree[LLM4D_AXIS_PIPE], M = topo->degree[LLM4D_AXIS_MODEL];
    if (rc == LLM4D_OK && a->pp && (P > 1 || M > 1)) { /* the rank's part, layout and schedule: the stage's */
        llm4d_model_part part;
        llm4d_gpt_layout layout;
        rc = llm4d_stack_layout(a->cfg, topo, a->pp, &part, &layout, err);
        /* the kept part of each entry the reducers sum: this rank's shard of its group under ZeRO, else whole */
        const llm4d_traffic_kept kept = {a->shape, d->sharding_degree > 1 ? d->sharding_degree : 1,
                                         topo->index[LLM4D_AXIS_SHARDING]};
        if (rc == LLM4D_OK && M > 1) rc = llm4d_tensor_parallel_traffic(&part, &layout, a->cfg, &kept, out, err);
        if (rc == LLM4D_OK && P > 1)
            rc = llm4d_pipeline_traffic(a->pp, topo->index[LLM4D_AXIS_PIPE], &part, &layout, a->cfg, &kept, out, err);
    }
    if (rc != LLM4D_OK) llm4d_traffic_free(out);
    return rc;
}

const char *llm4d_traffic_group_name(int group) {
    static const char *const name[LLM4D_TG_N] = {"data", "sharding", "dp", "mp", "pp", "embedding"};
    return group >= 0 && group < LLM4D_TG_N ? name[group] : "?";
}

const char *llm4d_traffic_when_name(int when) {
    static const char *const name[LLM4D_AT_N] = {"window",  "last_window", "backward_end", "use",
                                                 "update",  "forward",     "backward",     "weight"};
    return when >= 0 && when < LLM4D_AT_N ? name[when] : "?";
}

void llm4d_traffic_print(FILE *f, const llm4d_traffic *t, int M) {
    static const char *const what[LLM4D_TW_N] = {"dp_bucket", "zero_rs",  "zero_ag",  "hybrid",  "pp_act",
                                                 "pp_grad",   "pp_emb",   "tp_block", "tp_embed", "tp_head",
                                                 "tp_xent",   "tp_partial"};
    for (int i = 0; i < t->n; i++) {
        const llm4d_traffic_call *c = &t->c[i];
        const char *op = c->op == LLM4D_COMM_OP_ALLREDUCE        ? "allreduce"
                         : c->op == LLM4D_COMM_OP_REDUCE_SCATTER ? "reduce_scatter"
                         : c->op == LLM4D_COMM_OP_ALLGATHER      ? "allgather"
                         : c->op == LLM4D_COMM_OP_SEND           ? "send"
                         : c->op == LLM4D_COMM_OP_RECV           ? "recv"
                                                                 : "other";
        const char *dt = c->dtype == LLM4D_COMM_BF16 ? "bf16" : c->dtype == LLM4D_COMM_BYTE ? "byte" : "f32";
        fprintf(f, "traffic %s %s group %s %d dtype %s id %d bytes %llu calls %lld at %s %s\n",
                c->what < LLM4D_TW_N ? what[c->what] : "?", op, llm4d_traffic_group_name(c->group),
                t->size[c->group < LLM4D_TG_N ? c->group : 0], dt, c->id,
                (unsigned long long)llm4d_traffic_bytes(c), (long long)llm4d_traffic_calls(c, M),
                llm4d_traffic_when_name(c->when), c->blocking ? "blocking" : "started");
    }
}

size_t llm4d_traffic_kept_len(const llm4d_traffic_kept *k, int e) {
    const llm4d_traffic_entry *x = &k->shape->reduced[e];
    const int N = k->N > 1 ? k->N : 1;
    size_t j0, j1;
    if (!llm4d_shard_part(k->shape->group_len[x->group], x->at, x->numel, N, N > 1 ? k->rank : 0, &j0, &j1)) return 0;
    return j1 - j0;
}
