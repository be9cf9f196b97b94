/* topology.c — the 4D rank grid (see topology.h): coordinates from a rank, members of a rank's groups, the
 * validation of the degrees and the seeds' group printout. All of it is arithmetic on the row-major layout
 * (data, pipe, sharding, model) with the model axis fastest. */
#include "comm/topology.h"

#include <stdio.h>
#include <string.h>

static const char *const axis_names[LLM4D_NAXES] = {"dp", "pp", "sharding", "mp"};
static const char *const degree_keys[LLM4D_NAXES] = {"dp_degree", "pp_degree", "sharding_degree", "mp_degree"};

const char *llm4d_axis_name(llm4d_axis a) {
    LLM4D_ASSERT(a >= 0 && a < LLM4D_NAXES, "axis %d", (int)a);
    return axis_names[a];
}

llm4d_code llm4d_topology_init(llm4d_topology *t, int world_size, int rank, int dp, int pp, int sharding, int mp,
                               llm4d_err *err) {
    const int deg[LLM4D_NAXES] = {dp, pp, sharding, mp};
    for (int a = 0; a < LLM4D_NAXES; a++)
        if (deg[a] < 1)
            return llm4d_fail(err, LLM4D_EUSER,
                              "Distributed.%s is %d; every parallel degree must be >= 1 (1 turns that axis off)",
                              degree_keys[a], deg[a]);
    /* four int degrees can overflow even 64 bits; an overflowing product is simply "too many" */
    long long product = 1;
    int overflow = 0;
    for (int a = 0; a < LLM4D_NAXES; a++) overflow |= __builtin_mul_overflow(product, (long long)deg[a], &product);
    if (overflow || product != world_size) {
        char shown[32];
        if (overflow) snprintf(shown, sizeof shown, "more than 2^63");
        else snprintf(shown, sizeof shown, "%lld", product);
        return llm4d_fail(err, LLM4D_EUSER,
                          "parallel degrees dp_degree %d x pp_degree %d x sharding_degree %d x mp_degree %d = %s, "
                          "but the job has %d process%s; choose degrees whose product is %d (or launch %s "
                          "processes)",
                          dp, pp, sharding, mp, shown, world_size, world_size == 1 ? "" : "es", world_size, shown);
    }
    LLM4D_ASSERT(rank >= 0 && rank < world_size, "rank %d of world %d", rank, world_size);

    memset(t, 0, sizeof *t);
    t->world_size = world_size;
    t->rank = rank;
    memcpy(t->degree, deg, sizeof deg);
    int r = rank;
    for (int a = LLM4D_NAXES - 1; a >= 0; a--) { /* model is the fastest axis: peel it off first */
        t->index[a] = r % deg[a];
        r /= deg[a];
    }
    t->data_world = dp * sharding;
    t->data_rank = t->index[LLM4D_AXIS_DATA] * sharding + t->index[LLM4D_AXIS_SHARDING];
    return LLM4D_OK;
}

llm4d_code llm4d_topology_derive_dp(int world_size, int pp, int sharding, int mp, int *dp, llm4d_err *err) {
    const int deg[LLM4D_NAXES] = {1, pp, sharding, mp};
    for (int a = 1; a < LLM4D_NAXES; a++)
        if (deg[a] < 1)
            return llm4d_fail(err, LLM4D_EUSER,
                              "Distributed.%s is %d; every parallel degree must be >= 1 (1 turns that axis off)",
                              degree_keys[a], deg[a]);
    long long inner = (long long)pp * sharding * mp;
    if (world_size % inner != 0)
        return llm4d_fail(err, LLM4D_EUSER,
                          "cannot derive dp_degree: %d processes / (pp_degree %d x sharding_degree %d x mp_degree %d "
                          "= %lld) is not a whole number; launch a multiple of %lld processes or set the degrees",
                          world_size, pp, sharding, mp, inner, inner);
    *dp = (int)(world_size / inner);
    return LLM4D_OK;
}

int llm4d_topology_rank_at(const llm4d_topology *t, const int idx[LLM4D_NAXES]) {
    int r = 0;
    for (int a = 0; a < LLM4D_NAXES; a++) {
        LLM4D_ASSERT(idx[a] >= 0 && idx[a] < t->degree[a], "axis %s index %d of degree %d", axis_names[a], idx[a],
                     t->degree[a]);
        r = r * t->degree[a] + idx[a];
    }
    return r;
}

int llm4d_topology_group_member(const llm4d_topology *t, llm4d_axis a, int i) {
    LLM4D_ASSERT(a >= 0 && a < LLM4D_NAXES, "axis %d", (int)a);
    int idx[LLM4D_NAXES];
    memcpy(idx, t->index, sizeof idx);
    idx[a] = i;
    return llm4d_topology_rank_at(t, idx);
}

void llm4d_topology_group_ranks(const llm4d_topology *t, llm4d_axis a, int *ranks) {
    for (int i = 0; i < t->degree[a]; i++) ranks[i] = llm4d_topology_group_member(t, a, i);
}

void llm4d_topology_data_group_ranks(const llm4d_topology *t, int *ranks) {
    int idx[LLM4D_NAXES];
    memcpy(idx, t->index, sizeof idx);
    for (int d = 0; d < t->degree[LLM4D_AXIS_DATA]; d++)
        for (int s = 0; s < t->degree[LLM4D_AXIS_SHARDING]; s++) {
            idx[LLM4D_AXIS_DATA] = d;
            idx[LLM4D_AXIS_SHARDING] = s;
            ranks[d * t->degree[LLM4D_AXIS_SHARDING] + s] = llm4d_topology_rank_at(t, idx);
        }
}

int llm4d_topology_group_id(const llm4d_topology *t, llm4d_axis a) {
    int id = 0;
    for (int b = 0; b < LLM4D_NAXES; b++)
        if (b != (int)a) id = id * t->degree[b] + t->index[b];
    return id;
}

int llm4d_topology_data_group_id(const llm4d_topology *t) {
    return t->index[LLM4D_AXIS_PIPE] * t->degree[LLM4D_AXIS_MODEL] + t->index[LLM4D_AXIS_MODEL];
}

/* "[0, 1, 4]" into buf; a group too long for one log line is elided in the middle. */
static void format_ranks(char *buf, size_t cap, const llm4d_topology *t, llm4d_axis a) {
    size_t n = 0;
    int size = t->degree[a];
    n += (size_t)snprintf(buf + n, cap - n, "[");
    for (int i = 0; i < size && n < cap; i++) {
        if (size > 16 && i == 8) {
            n += (size_t)snprintf(buf + n, cap - n, ", ...");
            i = size - 4; /* print the last four */
        }
        n += (size_t)snprintf(buf + n, cap - n, "%s%d", i ? ", " : "", llm4d_topology_group_member(t, a, i));
    }
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

void llm4d_topology_print(const llm4d_topology *t, const llm4d_log *log) {
    static const llm4d_axis order[LLM4D_NAXES] = {LLM4D_AXIS_MODEL, LLM4D_AXIS_SHARDING, LLM4D_AXIS_PIPE,
                                                  LLM4D_AXIS_DATA}; /* the seeds' order */
    llm4d_log_info(log, "global world size: %d", t->world_size);
    llm4d_log_info(log, "global rank: %d", t->rank);
    for (int k = 0; k < LLM4D_NAXES; k++) {
        llm4d_axis a = order[k];
        char ranks[256];
        format_ranks(ranks, sizeof ranks, t, a);
        llm4d_log_info(log, "##############################");
        llm4d_log_info(log, "%s group size: %d", axis_names[a], t->degree[a]);
        llm4d_log_info(log, "%s rank: %d", axis_names[a], t->index[a]);
        llm4d_log_info(log, "%s group ranks: %s", axis_names[a], ranks);
    }
    llm4d_log_info(log, "##############################");
    llm4d_log_info(log, "data rank: %d of %d (dp x sharding)", t->data_rank, t->data_world);
}
