/* data_parallel.h — gradient all-reduce in buckets, started during backward.
 *
 * Every data-parallel rank computes gradients on its own rows of the global batch; because each micro-batch's
 * loss gradient is already divided by the unmasked tokens of the WHOLE global batch, the gradient of the global
 * loss is the plain SUM of the ranks' gradients (no averaging step, so accumulation x dp x micro-batch never
 * changes a number beyond fp32 summation order).
 *
 * It is a reducer engine (engine.h) over the flat storage's gradient buffer. Buckets are contiguous ranges of the
 * flat gradient buffer made of whole parameter groups (params.h), filled in the order backward finishes them:
 * final LayerNorm, block L-1, ..., block 0, then the embeddings (whose tied weight receives its last contribution
 * from the embedding lookup at the very end). A group's gradient is final after its last window of the step
 * (n_micro x llm4d_gpt_windows: the model's grads_done hook counts them, so any schedule's order works); when all of
 * a bucket's groups are final, the bucket's non-blocking all-reduce starts (on the data plane, after the event of
 * its last gradient kernel); the communicator moves the outstanding ones forward after every group
 * (llm4d_comm_progress) so that Open MPI progresses them while backward computes; all are waited on before the
 * optimizer step. The last bucket (the embeddings) is complete only when backward ends, so there is nothing left to hide it
 * behind: finish reduces it with a blocking all-reduce, which is cheaper than MPI's non-blocking one
 * (bench/bench_dp.sh shows the figures).
 *
 * Measurement facilities (bench/bench_dp.sh), configuration keys (config/schema.c):
 *   dp_overlap off      nothing starts during backward; finish runs a BLOCKING all-reduce of each
 *                       bucket in the same order, so comm_wait_s is the standalone all-reduce time of the buckets
 *                       (the yardstick for how much of it the overlapped mode hides); alternate: steps
 *                       1, 3, 5, ... overlapped and 2, 4, 6, ... blocking, to compare both under the same load;
 *   dp_trace            finish prints one line per step on stdout: per bucket its size and the times,
 *                       from the start of the last backward, at which it started and was seen complete.
 *
 * bf16 payloads (grad_comm_dtype bfloat16): a bucket is rounded to bf16 into its range of a bf16 copy of the
 * gradient buffer (the backend's to_bf16, after its last gradient kernel), all-reduced as bf16 (each element summed
 * in fp32 over the ranks and rounded once on the shared-memory path; after each pairwise add on MPI's), and written
 * back to the fp32 gradients when it completes: half the bytes on the wire and in the shared segment, two more passes
 * over the bucket, and each rank's gradient rounded to 8 bits of mantissa before the sum.
 *
 * On the shared-memory path (one host, host memory), the payload buffer (the gradients, or their bf16 copy) is moved
 * into shared memory in place at init (comm/shm_share.h): a bucket's all-reduce then reads the host's buffers where
 * they are and writes every rank's sum into all of them, one pass instead of copies through the segment's slots.
 * Its cost in the resident set: (n - 1) / n of the buffer, the slices of the peers' buffers this rank sums. */
#ifndef LLM4D_PARALLEL_DATA_PARALLEL_H
#define LLM4D_PARALLEL_DATA_PARALLEL_H

#include "comm/comm.h"
#include "parallel/engine.h"
#include "parallel/traffic.h"

typedef struct {
    size_t lo, hi;          /* range of the flat gradient buffer */
    int n_groups, pending;  /* groups in the bucket; groups not yet done in this backward */
    llm4d_comm_req req;
    int started;
    int landed;             /* bf16: the result written back to the fp32 gradients */
    double t_start, t_done; /* seconds since arm (trace) */
} llm4d_dp_bucket;

typedef struct {
    llm4d_engine base;
    llm4d_gpt *g;
    llm4d_comm *comm;       /* the data group (dp x sharding) */
    float *grads;           /* the flat gradient buffer */
    uint16_t *g16;          /* bf16 payloads: a bf16 buffer the size of grads (NULL: fp32 payloads) */
    int n_buckets;
    llm4d_dp_bucket *buckets;
    int *bucket_of_group;   /* [n_groups] */
    int *windows_left;      /* [n_groups] gradient windows of the step still to come */
    llm4d_err err;          /* first communication failure inside a hook, reported by finish */
    int failed;
    int overlap;            /* this step: 0 = blocking all-reduces in finish */
    int overlap_mode;       /* dp_overlap: 0 off, 1 on (default), 2 alternate */
    long n_steps;           /* steps begun so far (the step count for the alternate mode) */
    int trace;              /* dp_trace */
    double t_arm, t_backward_end; /* arm time; time of the last grads_done (seconds since arm) */
    int tests;              /* progress calls this step */
    void *shared;           /* the payload buffer (grads or g16) when shared in place with the host's ranks */
    char share_why[160];    /* why not, on the shared-memory path */
} llm4d_dp;

/* Whether a flat data-parallel group sums its gradients in place in shared memory (the payload buffer shared with
 * the host's ranks, comm/shm_share.h; above) instead of through the path's slots or MPI. The one answer the engine
 * (at init, from its communicator), the memory plan (the peers' pages it touches, plan/memplan_shm.c) and the planner
 * (the all-reduce it prices, plan/steptime.c) take, each from what it knows:
 *   host_addressable  the device's memory is host memory (backend.h; a GPU's gradients are staged: nothing to map)
 *   shm_ranks         the group's ranks on this host when its collectives go through a segment, else 0 (comm_path
 *                     mpi, NCCL, a group the path did not take: comm_shm.h llm4d_shm_host_ranks)
 *   hosts             the hosts the group spans (the buffers are mapped by one host's ranks)
 * *why (may be NULL): when the answer is no although the group is on the path with peers here, why not; else "".
 * At run time the sharing can still fail (/dev/shm too small: the engine says why and uses the slots). */
int llm4d_dp_grads_in_shm(int host_addressable, int shm_ranks, int hosts, const char **why);

/* The buckets of about bucket_bytes over the table's groups, in the order backward completes them (the engine's
 * plan, as a pure function for the planner): bucket b is the flat range [lo[b], hi[b]) of n_groups[b] groups;
 * bucket_of_group[g] for every group. The arrays hold n_groups(t) entries; returns the number of buckets. The last
 * bucket (the embeddings) is reduced blocking when backward ends; the others start as soon as they are complete. */
int llm4d_dp_buckets(const llm4d_param_table *t, size_t bucket_bytes, int *bucket_of_group, size_t *lo, size_t *hi,
                     int *n_groups);
/* Appends to out the buckets' all-reduces of a step (traffic.h) over shape sh (its buckets: llm4d_dp_buckets):
 * bf16 payloads or fp32; overlap: this step's buckets start during backward (else all blocking in finish). */
llm4d_code llm4d_dp_traffic(const llm4d_traffic_shape *sh, int bf16, int overlap, llm4d_traffic *out, llm4d_err *err);
/* Plan buckets of about bucket_bytes over the table's groups (the engine's comm_wait_s: time blocked in the final
 * wait of a step, not hidden behind backward; comm_total_s: time inside communication calls). overlap: "on", "off"
 * or "alternate"; trace: the per-step line (both above); bf16: bf16 payloads (above). */
llm4d_code llm4d_dp_init(llm4d_dp *dp, llm4d_gpt *g, llm4d_comm *data_comm, size_t bucket_bytes, const char *overlap,
                         int trace, int bf16, llm4d_err *err);
/* Bytes llm4d_dp_init allocates for the table t (the memory plan): the bf16 copy, or nothing. */
static inline size_t llm4d_dp_bytes(const llm4d_param_table *t, int bf16) { return bf16 ? t->total * 2 : 0; }

#endif
