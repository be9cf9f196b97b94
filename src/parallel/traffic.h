/* traffic.h — what the engines move in one step, as data: the list of a rank's collectives and messages per engine,
 * stated by the engines themselves so that whoever prices or checks the traffic (the planner's step time,
 * plan/steptime.c; tests/test_traffic.sh against a run's trace) reads it instead of deriving it again.
 *
 * Each entry is one collective (or point-to-point message) of one engine on one parameter group, data-parallel
 * bucket or model chunk: its kind and group, the payload per call in comm.h's terms (an all-reduce's buffer, a
 * reduce-scatter's received shard, an all-gather's sent shard, a message's elements) and its dtype, how many calls a
 * step makes, when they are issued and whether the engine blocks on them there. The engines' parts are built beside
 * their code from what their run time reads: the data-parallel buckets from llm4d_dp_buckets, the engine's own plan
 * (data_parallel.c llm4d_dp_traffic); ZeRO's reduce-scatters, gathers and hybrid all-reduce from its two policies'
 * data (sharding_policy.h) and the placement (model/shard_range.h) (sharding.c llm4d_sharding_traffic); the windows
 * per micro-batch from the table (model/params.h llm4d_param_windows), which the model's hooks count; the
 * pipeline's sends and receives per chunk and micro-batch as every schedule runs them (schedule.h) and the
 * activation's shape and type, its tied-embedding all-reduce from the entries the storage keeps (pipeline.c
 * llm4d_pipeline_traffic); the tensor-parallel collectives the model issues per block, lookup and head (model/tp.h
 * f and g, block.c, embed.c) and the engine's sum of the partial gradients (tensor_parallel.c
 * llm4d_tensor_parallel_traffic), from the stage's part and layout (stack.h llm4d_stack_layout).
 *
 * What the list leaves to its reader: the trainer's scalars (loss, gradient norm, found-inf: 8-byte all-reduces
 * over the world, data and pipe groups, not an engine's); and the order of a stage-3 run's parameter uses, which is
 * the model's (the reader says how many uses each group has per micro-batch: ask.uses). The planner reads the
 * data-parallel and ZeRO entries and the pipeline's message bytes; the tensor-parallel collectives it times in its
 * recorded trace of the model (the same calls), the tied embedding's and the partial gradients' sums it prices from
 * the stage's whole entries. */
#ifndef LLM4D_PARALLEL_TRAFFIC_H
#define LLM4D_PARALLEL_TRAFFIC_H

#include <stdint.h>
#include <stdio.h>

#include "comm/comm.h"
#include "config/config.h"
#include "model/params.h"
#include "parallel/pp_plan.h"

/* The group a collective runs on (comm.h llm4d_comm_groups): the data group (dp x sharding; data parallelism
 * without sharding), the sharding group, the pure dp group of hybrid sharding, the tensor-parallel group, the pipe
 * group (a message goes to one neighbour of it) and the pipeline's embedding group (the first and last stage). */
typedef enum {
    LLM4D_TG_DATA = 0,
    LLM4D_TG_SHARDING,
    LLM4D_TG_DP,
    LLM4D_TG_MODEL,
    LLM4D_TG_PIPE,
    LLM4D_TG_EMB,
    LLM4D_TG_N
} llm4d_traffic_group;

/* When an engine issues a call:
 *   WINDOW        as each gradient window of its group closes (grads_done), every micro-batch
 *   LAST_WINDOW   when its group's (a bucket's: its last group's) last window of the step closes
 *   BACKWARD_END  after backward (finish_backward)
 *   USE           when its group's parameters are asked for (params_for), every use of every micro-batch
 *   UPDATE        after the optimizer's update
 *   FORWARD       inside a chunk's forward, every micro-batch (a pipeline's message: around it)
 *   BACKWARD      inside a chunk's backward (with recompute: the forward it runs again), every micro-batch
 *   WEIGHT        inside a split backward's weight pass, every micro-batch */
typedef enum {
    LLM4D_AT_WINDOW = 0,
    LLM4D_AT_LAST_WINDOW,
    LLM4D_AT_BACKWARD_END,
    LLM4D_AT_USE,
    LLM4D_AT_UPDATE,
    LLM4D_AT_FORWARD,
    LLM4D_AT_BACKWARD,
    LLM4D_AT_WEIGHT,
    LLM4D_AT_N
} llm4d_traffic_when;

/* Which engine's call, for what. */
typedef enum {
    LLM4D_TW_DP_BUCKET = 0, /* data parallel: a bucket's gradient all-reduce */
    LLM4D_TW_ZERO_RS,       /* ZeRO: a group's gradient reduce-scattered into its owners' shards */
    LLM4D_TW_ZERO_AG,       /* ZeRO: a group's parameters all-gathered from its shards */
    LLM4D_TW_HYBRID,        /* ZeRO with dp beside: the own gradient shards all-reduced over the dp group */
    LLM4D_TW_PP_ACT,        /* pipeline: a chunk's output activation sent to the next stage, its input received */
    LLM4D_TW_PP_GRAD,       /* pipeline: a chunk's input gradient sent to the previous stage, its output's received */
    LLM4D_TW_PP_EMB,        /* pipeline: the tied embedding's gradient all-reduced by the first and last stage */
    LLM4D_TW_TP_BLOCK,      /* tensor parallel: a block's f and g (model/tp.h), and its LayerNorm outputs gathered
                             * again for the weight gradients (sequence parallel) */
    LLM4D_TW_TP_EMBED,      /* tensor parallel: the vocabulary-parallel lookup's sum, its gradient's gather */
    LLM4D_TW_TP_HEAD,       /* tensor parallel: ln_f's output gathered, the head's input gradient summed */
    LLM4D_TW_TP_XENT,       /* tensor parallel: the cross-entropy's statistics (maxima, sums) per chunk of rows */
    LLM4D_TW_TP_PARTIAL,    /* tensor parallel: the engine's sum of the partial gradients (params.h tp_partial) */
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
    int id;           /* the parameter group (DP_BUCKET: the bucket; HYBRID of all own shards at once, PP_EMB,
                       * TP_PARTIAL: -1; the pipeline's messages and the model's collectives: the local chunk) */
    size_t count;     /* elements per call as comm.h counts the payload (per rank block) */
    size_t len;       /* elements of the buffer reduced or gathered (count x the group's size for RS and AG; a
                       * message: count) */
    int per_micro;    /* calls per micro-batch (WINDOW, USE) ... */
    int per_step;     /* ... and per step besides (LAST_WINDOW, BACKWARD_END, UPDATE) */
} llm4d_traffic_call;

typedef struct {
    int n, cap;
    llm4d_traffic_call *c; /* in issue order within each engine: groups (buckets) by index */
    int size[LLM4D_TG_N];  /* ranks in each group */
} llm4d_traffic;

/* An entry of the table as a reducer reads it: where it lies in its group, and what it is. */
typedef struct {
    int group;
    size_t at, numel;  /* elements [at, at + numel) of the group */
    int tp_slots;      /* the pack's slots of a partial entry (params.h tp_slots) */
    uint8_t wte;       /* the token embedding (kind LLM4D_P_WTE) */
    uint8_t tp_partial;
} llm4d_traffic_entry;

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
    int n_reduced;        /* the entries whose gradient a reducer sums whole after backward (the tied embedding's,
                           * the tensor-parallel partial ones), in table order */
    llm4d_traffic_entry *reduced;
} llm4d_traffic_shape;

llm4d_code llm4d_traffic_shape_make(llm4d_traffic_shape *s, const llm4d_param_table *t, size_t bucket_bytes,
                                    llm4d_err *err);
void llm4d_traffic_shape_free(llm4d_traffic_shape *s);

/* What a list is asked for: a configuration (finalized), the rank's topology and shape; overlap: whether this
 * step's data-parallel buckets start during backward (dp_overlap on, or an odd step of alternate); uses: [n_groups]
 * the parameter uses of each group per micro-batch (params_for calls; NULL: none counted), which a stage-3 run
 * gathers each; pp: the run's pipeline plan (pp_plan.h), from which the rank's part, layout and schedule follow
 * (NULL: the pipeline's and the tensor-parallel traffic are left out). */
typedef struct {
    const llm4d_config *cfg;
    const llm4d_topology *topo;
    const llm4d_traffic_shape *shape;
    int overlap;
    const int *uses;
    const llm4d_pp_plan *pp;
} llm4d_traffic_ask;

/* The part of the reducers' entries (shape->reduced) a rank's storage keeps (the gradient a reducer sums): rank
 * `rank`'s shard of the entry's group over N sharding ranks (model/shard_range.h), or the entry whole (N 1). */
typedef struct {
    const llm4d_traffic_shape *shape;
    int N, rank;
} llm4d_traffic_kept;
/* The elements of entry e kept (0: none on this rank). */
size_t llm4d_traffic_kept_len(const llm4d_traffic_kept *k, int e);

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
/* "data", "sharding", "dp", "mp", "pp", "embedding": the communicators' names */
const char *llm4d_traffic_group_name(int group);
const char *llm4d_traffic_when_name(int when);

/* One line per call, for a step of M micro-batches:
 *   traffic <what> <op> group <name> <size> dtype <f32|bf16|byte> id <i> bytes <per call> calls <per step> at <when>
 *   <blocking|started>
 * op: allreduce, reduce_scatter, allgather, send, recv. */
void llm4d_traffic_print(FILE *f, const llm4d_traffic *t, int M);

#endif
