/* traffic.h — what the engines move in one step, as data: the list of a rank's collectives per engine, stated by
 * the engines themselves so that whoever prices or checks the traffic (the planner's step time, plan/steptime.c;
 * tests/test_traffic.sh against a run's trace) reads it instead of deriving it again.
 *
 * Each entry is one collective of one engine on one parameter group (or data-parallel bucket): its kind and group,
 * the payload per call in comm.h's terms (an all-reduce's buffer, a reduce-scatter's received shard, an
 * all-gather's sent shard) and its dtype, how many calls a step makes, when they are issued and whether the engine
 * blocks on them there. The engines' parts are built beside their code from what their run time reads: the
 * data-parallel buckets from llm4d_dp_buckets, the engine's own plan (data_parallel.c llm4d_dp_traffic); ZeRO's
 * reduce-scatters, gathers and hybrid all-reduce from its two policies' data (sharding_policy.h) and the placement
 * (model/shard_range.h) (sharding.c llm4d_sharding_traffic); the windows per micro-batch from the table
 * (model/params.h llm4d_param_windows), which the model's hooks count.
 *
 * What the list leaves to its reader: the pipeline's sends and its tied-embedding all-reduce, the tensor-parallel
 * collectives (they are the model's calls, in the planner's recorded trace) and the trainer's scalars (loss, norm);
 * and the order of a stage-3 run's parameter uses, which is the model's (the reader says how many uses each group
 * has per micro-batch: ask.uses). */
#ifndef LLM4D_PARALLEL_TRAFFIC_H
#define LLM4D_PARALLEL_TRAFFIC_H

#include <stdint.h>
#include <stdio.h>

#include "comm/comm.h"
#include "config/config.h"
#include "model/params.h"

/* The group a collective runs on (comm.h llm4d_comm_groups): the data group (dp x sharding; data parallelism
 * without sharding), the sharding group, the pure dp group of hybrid sharding. */
typedef enum { LLM4D_TG_DATA = 0, LLM4D_TG_SHARDING, LLM4D_TG_DP, LLM4D_TG_N } llm4d_traffic_group;

/* When an engine issues a call:
 *   WINDOW        as each gradient window of its group closes (grads_done), every micro-batch
 *   LAST_WINDOW   when its group's (a bucket's: its last group's) last window of the step closes
 *   BACKWARD_END  after backward (finish_backward)
 *   USE           when its group's parameters are asked for (params_for), every use of every micro-batch
 *   UPDATE        after the optimizer's update */
typedef enum {
    LLM4D_AT_WINDOW = 0,
    LLM4D_AT_LAST_WINDOW,
    LLM4D_AT_BACKWARD_END,
    LLM4D_AT_USE,
    LLM4D_AT_UPDATE,
    LLM4D_AT_N
} llm4d_traffic_when;

/* Which engine's call, for what. */
typedef enum {
    LLM4D_TW_DP_BUCKET = 0, /* data parallel: a bucket's gradient all-reduce */
    LLM4D_TW_ZERO_RS,       /* ZeRO: a group's gradient reduce-scattered into its owners' shards */
    LLM4D_TW_ZERO_AG,       /* ZeRO: a group's parameters all-gathered from its shards */
    LLM4D_TW_HYBRID,        /* ZeRO with dp beside: the own gradient shards all-reduced over the dp group */
    LLM4D_TW_N
} llm4d_traffic_what;

typedef struct {
    uint8_t what;     /* llm4d_traffic_what */
    uint8_t op;       /* llm4d_comm_op */
    uint8_t group;    /* llm4d_traffic_group */
    uint8_t dtype;    /* llm4d_comm_dtype */
    uint8_t when;     /* llm4d_traffic_when */
    uint8_t blocking; /* 1: the engine waits for it where it issues it; 0: started there, waited for later (at the
                       * next use, when the ring of two needs the slot, or at the end of backward) */
    int id;           /* the parameter group (DP_BUCKET: the bucket; HYBRID of all own shards at once: -1) */
    size_t count;     /* elements per call as comm.h counts the payload (per rank block) */
    size_t len;       /* elements of the buffer reduced or gathered (count x the group's size for RS and AG) */
    int per_micro;    /* calls per micro-batch (WINDOW, USE) ... */
    int per_step;     /* ... and per step besides (LAST_WINDOW, BACKWARD_END, UPDATE) */
} llm4d_traffic_call;

typedef struct {
    int n, cap;
    llm4d_traffic_call *c; /* in issue order within each engine: groups (buckets) by index */
    int size[LLM4D_TG_N];  /* ranks in each group */
} llm4d_traffic;

/* The shape of a rank's parameters that its engines' traffic follows, from its table: per group its elements and
 * gradient windows per micro-batch, and the data-parallel buckets over the groups (llm4d_dp_buckets). */
typedef struct {
    int n_groups;
    size_t *group_len;    /* [n_groups] elements, padding included */
    int *windows;         /* [n_groups] gradient windows per micro-batch */
    int n_buckets;
    size_t *bucket_len;   /* [n_buckets] elements */
    int *bucket_of_group; /* [n_groups] */
    int *bucket_groups;   /* [n_buckets] groups in each */
} llm4d_traffic_shape;

llm4d_code llm4d_traffic_shape_make(llm4d_traffic_shape *s, const llm4d_param_table *t, size_t bucket_bytes,
                                    llm4d_err *err);
void llm4d_traffic_shape_free(llm4d_traffic_shape *s);

/* What a list is asked for: a configuration (finalized), the rank's topology and shape; overlap: whether this
 * step's data-parallel buckets start during backward (dp_overlap on, or an odd step of alternate); uses: [n_groups]
 * the parameter uses of each group per micro-batch (params_for calls; NULL: none counted), which a stage-3 run
 * gathers each. */
typedef struct {
    const llm4d_config *cfg;
    const llm4d_topology *topo;
    const llm4d_traffic_shape *shape;
    int overlap;
    const int *uses;
} llm4d_traffic_ask;

llm4d_code llm4d_traffic_list(const llm4d_traffic_ask *a, llm4d_traffic *out, llm4d_err *err);
void llm4d_traffic_free(llm4d_traffic *t);
/* Append a call (the engines' parts); LLM4D_ENOMEM when the list cannot grow. */
llm4d_code llm4d_traffic_add(llm4d_traffic *t, const llm4d_traffic_call *c, llm4d_err *err);

/* Calls of c in a step of M micro-batches, and the bytes of one (what a comm trace records as its payload). */
static inline int64_t llm4d_traffic_calls(const llm4d_traffic_call *c, int M) {
    return (int64_t)c->per_micro * M + c->per_step;
}
static inline uint64_t llm4d_traffic_bytes(const llm4d_traffic_call *c) {
    return (uint64_t)c->count * llm4d_comm_dtype_size((llm4d_comm_dtype)c->dtype);
}
const char *llm4d_traffic_group_name(int group); /* "data", "sharding", "dp": the communicators' names */
const char *llm4d_traffic_when_name(int when);

/* One line per call, for a step of M micro-batches:
 *   traffic <what> <op> group <name> <size> dtype <f32|bf16> id <i> bytes <per call> calls <per step> at <when>
 *   <blocking|started> */
void llm4d_traffic_print(FILE *f, const llm4d_traffic *t, int M);

#endif
