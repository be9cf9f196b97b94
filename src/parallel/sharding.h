/* sharding.h — group-sharded data parallelism (ZeRO stages 1, 2, 3), offload, and sharding-hybrid-dp.
 *
 * Every parameter group (params.h: embeddings, each block, final LayerNorm) is padded to a multiple of the
 * sharding degree N and split into N equal shards; rank r of the sharding group owns shard r of every group. Its
 * "local" buffers hold its shards back to back, in group order. Per step and rank, with Psi parameters:
 *
 *   stage 1  params full (flat), grads full (flat); Adam m, v of the own shards.
 *            After the last micro-batch, each group's gradient is reduce-scattered (sum) in the sharding group
 *            as backward finishes it; the owner updates its shard; every group's parameters are all-gathered.
 *            Model states 4Psi + 4Psi + 8Psi/N; traffic Psi (reduce-scatter) + Psi (all-gather).
 *   stage 2  as stage 1, but gradients are never held whole: backward writes a group's gradient into a bucket
 *            buffer, which is reduce-scattered into the own shard (accumulated over micro-batches) as soon as the
 *            group is done. Model states 4Psi + 12Psi/N.
 *   stage 3  parameters are sharded too: a group is all-gathered into a gather buffer right before it is used
 *            (forward, and again in backward) and released right after. Model states 16Psi/N; traffic 3Psi.
 *            The tied embedding is gathered once in forward (kept from the lookup to the LM head) and once in
 *            backward; its gradient bucket lives through the whole backward (both uses add to it). While a group
 *            computes, the next one's all-gather is already in flight (non-blocking, in a second buffer, driven by
 *            test calls from the hooks), in both directions: forward prefetches block l+1, backward block l-1.
 *
 * The bucket and gather buffers are the declared communication buffers (category comm): one of the largest
 * group for layers, one for the embeddings.
 *
 * Sharding-hybrid-dp: with dp_degree > 1 beside sharding, every collective above stays inside the sharding group;
 * after the last micro-batch only the owned shards (1/N of the gradients) are all-reduced across the dp group.
 * Offload: Adam m, v (and, at stage 3, the fp32 shard of the parameters the update writes) live in a separate
 * host pool; on a CPU machine it is a file-backed memory map, so optimizer state larger than RAM still trains. */
#ifndef LLM4D_PARALLEL_SHARDING_H
#define LLM4D_PARALLEL_SHARDING_H

#include <stdio.h>

#include "comm/comm.h"
#include "model/gpt.h"

typedef struct {
    int stage, N, rank, offload;
    llm4d_comm *sh;          /* sharding group */
    llm4d_comm *dp;          /* pure dp group (hybrid), NULL when dp_degree is 1 */
    llm4d_gpt *g;
    llm4d_backend *be;
    llm4d_mem *mem;
    int n_groups;
    size_t *shard_len;       /* [G] elements of each group's shard */
    size_t *shard_off;       /* [G] offset of each group's shard in the local buffers */
    size_t local_total;
    size_t max_group;        /* elements of the largest non-embedding group */
    float *local_params;     /* stage 3: own shards of the parameters */
    float *local_grads;      /* stages 2, 3: own shards of the gradients, accumulated over micro-batches */
    float *m, *v;            /* Adam states of the own shards */
    float *recv;             /* reduce-scatter output, one shard of the largest group (comm) */
    float *emb_buf;          /* embeddings' gradient bucket (stages 2, 3) and gather buffer (stage 3) (comm) */
    float *layer_grad_buf;   /* bucket of the group being back-propagated (stages 2, 3) (comm) */
    float *layer_param_buf;  /* gather buffer of the group in use (stage 3) (comm) */
    float *prefetch_buf;     /* stage 3: the next group's gather, in flight while the current group computes */
    int prefetch_group;      /* the group being prefetched into prefetch_buf, -1 none */
    llm4d_comm_req prefetch_req;
    int64_t prefetch_hits;   /* gathers that were already in flight when the group was needed */
    int prefetch_on;         /* 0 with LLM4D_ZERO_PREFETCH=0 (measurement: every gather blocking) */
    double gather_wait_s;    /* this step: time blocked waiting for parameter gathers (stage 3) */
    double rs_s;             /* this step: time in gradient reduce-scatters */
    float *emb_param_buf;    /* stage 3: gathered embeddings (comm) */
    int emb_param_valid;     /* stage 3: emb_param_buf holds the gathered embeddings */
    int emb_fwd_uses;        /* stage 3: forward uses of the embeddings so far in this micro-batch */
    int emb_grad_live;       /* stages 2, 3: the embeddings' bucket is accumulating this backward */
    int last_micro;          /* stage 1: reduce only after the last micro-batch */
    int64_t t;               /* Adam updates done */
    float beta1, beta2, eps, weight_decay;
    char offload_path[1024]; /* the file behind the offload pool */
    size_t offload_bytes;
    void *offload_map;
    llm4d_err err;
    int failed;
} llm4d_sharding;

/* The model must have been created with llm4d_sharding_layout(stage, N). Installs the model's hooks. */
llm4d_code llm4d_sharding_init(llm4d_sharding *s, llm4d_gpt *g, int stage, int offload, const char *offload_dir,
                               llm4d_comm *sharding_comm, llm4d_comm *dp_comm, float beta1, float beta2, float eps,
                               float weight_decay, uint64_t seed, llm4d_err *err);
void llm4d_sharding_free(llm4d_sharding *s);
llm4d_gpt_layout llm4d_sharding_layout(int stage, int N);

/* A step: begin (zero the gradients), then per micro-batch forward/backward with micro(s, k == last), then
 * finish_backward (hybrid dp all-reduce), grad_sumsq (the global squared norm), update. */
void llm4d_sharding_begin_step(llm4d_sharding *s);
void llm4d_sharding_micro(llm4d_sharding *s, int last);
llm4d_code llm4d_sharding_finish_backward(llm4d_sharding *s, llm4d_err *err);
llm4d_code llm4d_sharding_grad_sumsq(llm4d_sharding *s, double *sumsq, llm4d_err *err);
llm4d_code llm4d_sharding_update(llm4d_sharding *s, float lr, float grad_scale, llm4d_err *err);
/* Where each category lives, for the start-up log. */
void llm4d_sharding_describe(const llm4d_sharding *s, char *buf, size_t n);
/* A hash of the parameters this rank holds (test facility). */
uint64_t llm4d_sharding_param_hash(const llm4d_sharding *s);

#endif
