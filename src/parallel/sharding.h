/* sharding.h — group-sharded data parallelism (ZeRO stages 1, 2, 3), offload, and sharding-hybrid-dp: the storage
 * engine (engine.h) of a sharded run.
 *
 * Every parameter group (params.h: vocabulary blocks of the token embedding, the position embedding, each block,
 * the final LayerNorm) is padded to a multiple of the sharding degree N and split into N equal shards; rank r of
 * the sharding group owns shard r of every group. Its "local" buffers hold its shards back to back, in group
 * order. Per step and rank, with Psi parameters held by the rank (its tensor-parallel / pipeline part):
 *
 *   stage 1  params whole (flat), grads whole (flat); Adam m, v of the own shards. A group's gradient is
 *            reduce-scattered (non-blocking, into a small receive ring) once its last window of the step is done;
 *            the owner updates its shard; every group's parameters are all-gathered after the update.
 *            Model states 4 Psi + 4 Psi + 8 Psi/N.
 *   stage 2  gradients are never held whole: a window hands out a bucket (a ring of two, the size of the largest
 *            group), which is reduce-scattered (non-blocking) into the own shard (accumulated over micro-batches)
 *            when the window closes. Model states 4 Psi + 12 Psi/N.
 *   stage 3  parameters are sharded too: a group is all-gathered into a gather buffer right before it is used and
 *            released right after. While a group computes, the next one's all-gather is already in flight (in a
 *            second buffer, moved forward from the hooks by the communicator); the order of use is recorded in the
 *            first step and replayed (a schedule's order, the head's passes over vocabulary blocks). Model states
 *            16 Psi/N.
 *
 * No buffer the size of the embedding exists at stages 2 and 3: the token embedding is cut into vocabulary blocks
 * no larger than the largest block group (and at least 2^20 elements; llm4d_sharding_part), which the lookup and
 * the LM head take one at a time (model/embed.c). Communication buffers per rank: stage 1 two receive shards;
 * stage 2 two buckets and two receive shards; stage 3 also two gather buffers: at most 4 G + 2 G/N elements for
 * G = the largest group, whatever the vocabulary.
 *
 * Traffic per rank per step, one micro-batch, ring costs ((N-1)/N of the payload per reduce-scatter or all-gather),
 * Psi_e = the token embedding's elements, K its blocks: stage 1 and 2: every window reduce-scattered, every group
 * all-gathered after the update: 2 Psi, plus Psi_e at stage 2 when the embedding and the head share a rank (its two
 * windows, head and lookup, are reduced apart). Stage 3: gathers of each block, the final LayerNorm (forward and
 * backward) and the position embedding (forward), the embedding three times with K > 1 (lookup, the head's
 * statistics pass and its gradient pass) or twice with K = 1, and the reduce-scatters of every window:
 * 3 Psi + 2 Psi_e - Psi_wpe with K > 1 (docs/design.md lists each term). Hybrid dp adds an all-reduce of the own
 * shards (2 Psi/N x (dp-1)/dp).
 *
 * The stages are not switched on inside the engine: each is a parameter policy (whole / sharded and gathered when
 * used) composed with a gradient policy (whole flat gradient / per-window buckets into shards), chosen once at
 * creation (sharding_policy.h; sharding_params.c, sharding_grads.c); Adam's states are always sharded.
 *
 * Sharding-hybrid-dp: with dp_degree > 1 beside sharding, every collective above stays inside the sharding group;
 * after backward only the owned shards (1/N of the gradients) are all-reduced across the dp group.
 * bf16 payloads (grad_comm_dtype bfloat16): a window's bucket (stage 1: the group's range of the flat gradients) is
 * rounded to bf16 into the slot's send16 and reduce-scattered as bf16 into recv16, whose shard is then added (stage
 * 1: written) to the fp32 gradients; two more buffers per ring slot (a group and a shard of bf16). The hybrid dp
 * all-reduce of the owned shards stays fp32.
 * Offload: Adam m, v (and, at stage 3, the fp32 shard of the parameters) live in a file on a node-local directory
 * and stream through a bounded window during the update (parallel/offload.h). Where the backend has a host backend
 * (backend.h llm4d_backend.host: the guard; a device), the offloaded update runs there, as ZeRO-Offload's CPU Adam
 * does: per window, the own gradients (and, stages 1 and 2, the own parameters) are copied device to host into
 * pinned staging buffers, AdamW runs on the host over host memory, and the parameters are copied back; elsewhere
 * (cpu: device memory is host memory) the update reads the tensors in place, no staging.
 * Forward only (`llm4d eval`): the parameter policy alone: stages 1 and 2 hold the model's whole parameters, stage 3
 * its own shards in memory (offload or not: no file, no window) and the two gather buffers; no gradient shards,
 * buckets or receive shards, no Adam states, no staging; update is refused, state() reports NULL moments. */
#ifndef LLM4D_PARALLEL_SHARDING_H
#define LLM4D_PARALLEL_SHARDING_H

#include "comm/comm.h"
#include "optim/optimizer.h"
#include "parallel/engine.h"
#include "parallel/traffic.h"

struct llm4d_offload;
struct llm4d_zero_params;
struct llm4d_zero_grads;

/* A ring slot: a buffer and the collective in flight on it. */
typedef struct {
    float *buf;          /* gather buffer or gradient bucket (a group's size) */
    float *recv;         /* bucket ring: the reduce-scatter's output (a shard's size) */
    uint16_t *send16, *recv16; /* bucket ring, bf16 payloads: the bucket rounded to bf16, the reduced shard */
    int group;           /* the group it holds / reduces, -1 free */
    int busy;            /* a collective is in flight */
    llm4d_comm_req req;
} llm4d_ring_slot;

typedef struct llm4d_sharding {
    llm4d_engine base;
    int stage;               /* for the start-up line; what the stage means is in the two policies below */
    const struct llm4d_zero_params *params_policy; /* whole, or sharded and gathered when used (sharding_params.c) */
    const struct llm4d_zero_grads *grads_policy;   /* whole, or per-window buckets into shards (sharding_grads.c) */
    int N, rank, offload;
    int forward_only;        /* llm4d eval: parameters only (above) */
    llm4d_comm *sh;          /* sharding group */
    llm4d_comm *dp;          /* pure dp group (hybrid), NULL when dp_degree is 1 */
    int counts;              /* dp index 0: this rank's shards count in the norm and are saved */
    llm4d_gpt *g;
    llm4d_backend *be;
    llm4d_mem *mem;
    llm4d_optimizer opt;     /* on the model's backend, or (offload) on its host backend (backend.h llm4d_backend.host) */
    llm4d_opt_range *ranges; /* [table entries]: scratch for the ranges of one update window */
    /* Offload with a host backend (ZeRO-Offload's CPU Adam): a window's gradients (and whole parameters) staged
     * device to host into these pinned buffers of a window's length, AdamW on the host, the parameters back. */
    llm4d_opt_range *host_ranges; /* [table entries]: the window's ranges as the host optimizer sees them */
    float *stage_g, *stage_p;     /* stage_p NULL when the parameter shards are in the window already (stage 3) */
    size_t stage_n;
    int n_groups;
    size_t *shard_len;       /* [G] elements of each group's shard */
    size_t *shard_off;       /* [G] offset of each group's shard in the local buffers */
    size_t *range_lo, *range_hi; /* [G] the own shard of each group in the table's layout (checkpoints) */
    size_t local_total;
    size_t max_group, max_shard;
    float *local_params;     /* sharded parameters (stage 3): own shards of the parameters (NULL when offloaded) */
    float *local_grads;      /* sharded gradients (stages 2, 3): own shards of the gradients, accumulated over micro-batches */
    float *m, *v;            /* Adam states of the own shards (NULL when offloaded) */
    int *windows_left;       /* [G] gradient windows of the step still to come (stage 1 reduces at 0) */
    llm4d_ring_slot grad_ring[2]; /* stage 1: receive shards; stages 2, 3: buckets + receive shards */
    int grad_open;           /* stages 2, 3: the bucket of the open window, -1 none */
    llm4d_ring_slot gather[2];    /* stage 3: the group in use and the prefetch */
    int cur;                 /* stage 3: the gather slot of the group in use, -1 none */
    int *trace;              /* stage 3: the order of parameter use recorded in the first step */
    int trace_n, trace_cap, trace_pos, traced, in_step;
    int prefetch_on;         /* zero_prefetch; off: every gather blocking (measurement) */
    int overlap_on;          /* zero_overlap; off: every reduce-scatter blocking (measurement) */
    int bf16;                /* grad_comm_dtype bfloat16: reduce-scatters carry bf16 payloads */
    int64_t prefetch_hits, gathers;
    double gather_wait_s;    /* this step: time blocked waiting for parameter gathers (stage 3) */
    double rs_wait_s;        /* this step: time blocked in or waiting for gradient reduce-scatters */
    struct llm4d_offload *off;
    llm4d_err err;
    int failed;
} llm4d_sharding;

/* The model part and layout a sharded run needs: groups aligned to N, vocabulary blocks (stages 2, 3), no flat
 * parameters (stage 3) or gradients (stages 2, 3). */
void llm4d_sharding_part(int stage, int N, const llm4d_model_config *m, llm4d_model_part *part,
                         llm4d_gpt_layout *layout);

/* Adds to bytes[category] what llm4d_sharding_init allocates for the table t (a memory plan); bf16: with bf16
 * gradient payloads; forward_only: as llm4d_sharding_init's. */
void llm4d_sharding_bytes(const llm4d_param_table *t, int stage, int N, int offload, int bf16, int forward_only,
                         size_t bytes[]);
/* What a configuration's ZeRO engine holds and does, as data (its policies', sharding_policy.h): what the memory
 * plan and the planner read instead of the stage number, which only llm4d_zero_policies reads. */
typedef struct {
    int on;              /* sharding_degree > 1: a ZeRO engine is the storage */
    int params_whole;    /* every parameter in the model, all-gathered after each update (stages 1, 2); else each
                          * group gathered when used, the next prefetched (3) */
    int grads_whole;     /* a whole flat gradient, each group reduce-scattered after its last window of the step
                          * (1); else per-window buckets reduce-scattered as each window closes (2, 3) */
    int offload_streams; /* with sharding_offload: the streams an element's state is offloaded in (m, v; and its
                          * parameter shard when the parameters are not whole) */
} llm4d_zero_traits;
llm4d_zero_traits llm4d_sharding_traits(const llm4d_dist_config *d);
/* Appends to out the collectives a step of the engine issues (traffic.h) for a rank of shape sh: forward_only as
 * llm4d_sharding_init's; uses: [groups] parameter uses per micro-batch (stage 3's gathers; NULL: none counted);
 * dp_size: the hybrid dp group's ranks (1: none). */
llm4d_code llm4d_sharding_traffic(const llm4d_dist_config *d, int forward_only, const llm4d_traffic_shape *sh,
                                  const int *uses, int dp_size, llm4d_traffic *out, llm4d_err *err);

/* The elements of t whose state (parameters, Adam's m and v) a rank of a sharding group of N keeps: its shard of
 * every group. */
size_t llm4d_sharding_kept(const llm4d_param_table *t, int N);
/* The pinned staging buffers an offloaded update on a host backend adds (device: the run's --device). */
void llm4d_sharding_staging_bytes(const llm4d_param_table *t, int stage, int N, int offload, int forward_only,
                                 const char *device, size_t bytes[]);
/* The groups a rank's shards are kept and reduced over: the sharding group, and the pure dp group of hybrid
 * sharding (NULL or size 1: none) with this rank's index in it. */
typedef struct {
    llm4d_comm *sharding;
    llm4d_comm *dp;
    int dp_index;
} llm4d_sharding_groups;

/* The model must have been created with llm4d_sharding_part's part and layout. d: the stage, the offload (and
 * its offload_dir), the measurement switches zero_prefetch and zero_overlap. */
llm4d_code llm4d_sharding_init(llm4d_sharding *s, llm4d_gpt *g, const llm4d_dist_config *d,
                               const llm4d_sharding_groups *groups, llm4d_adamw opt, uint64_t seed, int forward_only,
                               llm4d_err *err);

#endif
