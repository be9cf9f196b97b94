/* traffic.c — a rank's step of collectives, assembled from the engines' own statements (see traffic.h): which
 * engines a configuration runs is stack.c's rule (sharding: the ZeRO engine; else data parallel over a data group
 * of more than one rank, not in a forward-only run), what each moves is the engine's function. */
#include "parallel/traffic.h"

#include <stdlib.h>
#include <string.h>

#include "parallel/data_parallel.h"
#include "parallel/sharding.h"

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
    return LLM4D_OK;
}

void llm4d_traffic_shape_free(llm4d_traffic_shape *s) {
    free(s->group_len), free(s->windows), free(s->bucket_len), free(s->bucket_of_group), free(s->bucket_groups);
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
    llm4d_code rc = LLM4D_OK;
    if (d->sharding_degree > 1)
        rc = llm4d_sharding_traffic(d, fwd, a->shape, a->uses, topo->degree[LLM4D_AXIS_DATA], out, err);
    else if (!fwd && topo->data_world > 1)
        rc = llm4d_dp_traffic(a->shape, bf16, a->overlap, out, err);
    if (rc != LLM4D_OK) llm4d_traffic_free(out);
    return rc;
}

const char *llm4d_traffic_group_name(int group) {
    static const char *const name[LLM4D_TG_N] = {"data", "sharding", "dp"};
    return group >= 0 && group < LLM4D_TG_N ? name[group] : "?";
}

const char *llm4d_traffic_when_name(int when) {
    static const char *const name[LLM4D_AT_N] = {"window", "last_window", "backward_end", "use", "update"};
    return when >= 0 && when < LLM4D_AT_N ? name[when] : "?";
}

void llm4d_traffic_print(FILE *f, const llm4d_traffic *t, int M) {
    static const char *const what[LLM4D_TW_N] = {"dp_bucket", "zero_rs", "zero_ag", "hybrid"};
    for (int i = 0; i < t->n; i++) {
        const llm4d_traffic_call *c = &t->c[i];
        const char *op = c->op == LLM4D_COMM_OP_ALLREDUCE        ? "allreduce"
                         : c->op == LLM4D_COMM_OP_REDUCE_SCATTER ? "reduce_scatter"
                         : c->op == LLM4D_COMM_OP_ALLGATHER      ? "allgather"
                                                                 : "other";
        fprintf(f, "traffic %s %s group %s %d dtype %s id %d bytes %llu calls %lld at %s %s\n",
                c->what < LLM4D_TW_N ? what[c->what] : "?", op, llm4d_traffic_group_name(c->group),
                t->size[c->group < LLM4D_TG_N ? c->group : 0], c->dtype == LLM4D_COMM_BF16 ? "bf16" : "f32", c->id,
                (unsigned long long)llm4d_traffic_bytes(c), (long long)llm4d_traffic_calls(c, M),
                llm4d_traffic_when_name(c->when), c->blocking ? "blocking" : "started");
    }
}
