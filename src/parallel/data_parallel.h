/* data_parallel.h — gradient all-reduce in buckets, started during backward.
 *
 * Every data-parallel rank computes gradients on its own rows of the global batch; because each micro-batch's
 * loss gradient is already divided by the unmasked tokens of the WHOLE global batch, the gradient of the global
 * loss is the plain SUM of the ranks' gradients (no averaging step, so accumulation x dp x micro-batch never
 * changes a number beyond fp32 summation order).
 *
 * Buckets are contiguous ranges of the flat gradient buffer made of whole parameter groups (params.h), filled in
 * the order backward finishes them: final LayerNorm, block L-1, ..., block 0, then the embeddings (whose tied
 * weight receives its last contribution from the embedding lookup at the very end). When the last micro-batch's
 * backward reports a group done (the model's grads_done hook) and its bucket is complete, the bucket's
 * non-blocking all-reduce starts; outstanding buckets are tested after every group so that Open MPI progresses
 * them while backward computes; all are waited on before the optimizer step. */
#ifndef LLM4D_PARALLEL_DATA_PARALLEL_H
#define LLM4D_PARALLEL_DATA_PARALLEL_H

#include "dist/comm.h"
#include "model/gpt.h"

typedef struct {
    size_t lo, hi;          /* range of the flat gradient buffer */
    int n_groups, pending;  /* groups in the bucket; groups not yet done in this backward */
    llm4d_comm_req req;
    int started;
} llm4d_dp_bucket;

typedef struct {
    llm4d_comm *comm;       /* the data group (dp x sharding) */
    float *grads;           /* the flat gradient buffer */
    int n_buckets;
    llm4d_dp_bucket *buckets;
    int *bucket_of_group;   /* [n_groups] */
    int armed;              /* 1 during the last micro-batch's backward: reductions start as buckets fill */
    double comm_wait_s;     /* time blocked in the final wait of this step (not hidden behind backward) */
    double comm_total_s;    /* time spent inside communication calls this step */
    llm4d_err err;          /* first communication failure inside a hook, reported by finish */
    int failed;
} llm4d_dp;

/* Plan buckets of about bucket_bytes over the table's groups and install the model's grads_done hook. */
llm4d_code llm4d_dp_init(llm4d_dp *dp, llm4d_gpt *g, llm4d_comm *data_comm, size_t bucket_bytes, llm4d_err *err);
void llm4d_dp_free(llm4d_dp *dp);
/* Call before the last micro-batch's backward of a step (with 1) and after the step (0). */
void llm4d_dp_arm(llm4d_dp *dp, int armed);
/* Wait for every bucket; the gradients are then the sum over the data group. */
llm4d_code llm4d_dp_finish(llm4d_dp *dp, llm4d_err *err);

#endif
