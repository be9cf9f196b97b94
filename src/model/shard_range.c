/* shard_range.c — ZeRO's shards of a parameter table (shard_range.h: the rule and why it is stated once). */
#include "model/shard_range.h"

#include "core/error.h"

size_t llm4d_shard_len(size_t len, int N) {
    LLM4D_ASSERT(N >= 1 && len % (size_t)N == 0, "a group of %zu elements is not aligned to %d: build the table "
                 "with a model part whose align is a multiple of %d", len, N, N);
    return len / (size_t)N;
}

int llm4d_shard_ranges(const llm4d_param_table *t, int N, int r, size_t *lo, size_t *hi, size_t *off,
                       llm4d_shard_sizes *sizes) {
    LLM4D_ASSERT(N >= 1 && r >= 0 && r < N, "shard %d of %d", r, N);
    llm4d_shard_sizes s = {0};
    for (int g = 0; g < t->n_groups; g++) {
        const size_t len = t->g[g].hi - t->g[g].lo, sl = llm4d_shard_len(len, N);
        if (lo) lo[g] = t->g[g].lo + (size_t)r * sl;
        if (hi) hi[g] = t->g[g].lo + (size_t)r * sl + sl;
        if (off) off[g] = s.local_total;
        s.local_total += sl;
        if (len > s.max_group) s.max_group = len;
        if (sl > s.max_shard) s.max_shard = sl;
    }
    if (sizes) *sizes = s;
    return t->n_groups;
}

int llm4d_shard_part(size_t len, size_t at, size_t numel, int N, int r, size_t *j0, size_t *j1) {
    LLM4D_ASSERT(N >= 1 && r >= 0 && r < N, "shard %d of %d", r, N);
    const size_t sl = llm4d_shard_len(len, N), lo = (size_t)r * sl, hi = lo + sl;
    const size_t a = at > lo ? at : lo, b = at + numel < hi ? at + numel : hi;
    if (a >= b) return 0;
    *j0 = a - at, *j1 = b - at;
    return 1;
}

int llm4d_shard_entry_part(const llm4d_param_table *t, int N, int r, int i, size_t *j0, size_t *j1) {
    LLM4D_ASSERT(i >= 0 && i < t->n, "entry %d of %d", i, t->n);
    const llm4d_param *p = &t->p[i];
    const llm4d_group *g = &t->g[p->group];
    return llm4d_shard_part(g->hi - g->lo, p->offset - g->lo, p->numel, N, r, j0, j1);
}
