/* stagecost.h — what one rank's micro-batch costs, from its trace (plan/trace.h) priced by a profile
 * (plan/price.h): per chunk and pass (F, B, W), the seconds of its kernels by kind of work and of its
 * tensor-parallel collectives (blocking: always exposed), and the model's hook events in order with the computing
 * time before each, which the step's walk (plan/steptime.c) turns into the engines' communication (ZeRO's gathers
 * and reduce-scatters, the data-parallel buckets) and what of it is hidden.
 *
 * Ranks of many layouts share a model part (the same stage of the same split at the same micro-batch, tensor
 * degree, recompute, ZeRO alignment), so priced traces are memoised by part and layout: a plan over thousands of
 * layouts records and prices each distinct part once. */
#ifndef LLM4D_PLAN_STAGECOST_H
#define LLM4D_PLAN_STAGECOST_H

#include "plan/beyond.h"
#include "plan/price.h"
#include "plan/trace.h"
#include "parallel/traffic.h"

/* A hook event of the trace: params_for or grads_done of `group`, after `dt` seconds of work since the previous
 * event of the same chunk and pass (or its start). */
typedef struct {
    uint8_t pass, type; /* LLM4D_TRACE_*; LLM4D_RC_PARAMS_FOR or LLM4D_RC_GRADS_DONE */
    uint16_t chunk;
    int group;
    double dt;
} llm4d_hook_ev;

/* One chunk's passes (F, B, W). */
typedef struct {
    double kinds[LLM4D_TRACE_NPASS][LLM4D_WORK_N]; /* kernels alone, by kind */
    double tp[LLM4D_TRACE_NPASS];                  /* tensor-parallel collectives */
    double tail[LLM4D_TRACE_NPASS];                /* work after the pass's last event */
} llm4d_stagecost_chunk;

typedef struct {
    int n_chunks, split;
    llm4d_stagecost_chunk *chunk; /* [n_chunks] */
    double spin;                /* of tp: the processor time their waits burn per micro-batch on an oversubscribed
                                 * host (price.h llm4d_price_wait), which the host's sharing slows as it does the
                                 * kernels */
    double tp_max_bytes;        /* the largest tensor-parallel collective's buffer */
    int tp_max_op;
    int n_ev;
    llm4d_hook_ev *ev;          /* in order: chunk by chunk, F then B then W */
    llm4d_traffic_shape shape; /* the groups' elements and gradient windows, the data-parallel buckets over them
                                * (parallel/traffic.h: what the engines' traffic follows) */
    size_t total, sp_partial;   /* the table's elements; those summed by the tensor-parallel engine */
    size_t wte_elems;           /* the token embedding's elements on this rank (0: none) */
    size_t act_elems;           /* an activation crossing a stage boundary */
    size_t act_bytes;           /* and its bytes (what a pipeline send moves) */
    int priced_exact, priced_other; /* calls priced by an exact measurement, and otherwise */
    llm4d_beyond beyond;        /* its calls a machine profile's grid did not measure (plan/beyond.h) */
    double gemm_rate;           /* the fastest linear layer priced (FLOP/s): the search's trace-free bound
                                 * (plan/bound.h) assumes none faster than llm4d_bound_gemm_rate */
} llm4d_stagecost;

typedef struct llm4d_stagecost_cache llm4d_stagecost_cache;

llm4d_code llm4d_stagecost_cache_create(llm4d_stagecost_cache **out, llm4d_err *err);
void llm4d_stagecost_cache_destroy(llm4d_stagecost_cache *c);
/* Key parts by their chunks' block counts, not ranges (a search's shortcut: the middle stages of a pipeline share
 * one trace), and record a part once whatever its ZeRO alignment (stagecost.c); off by default, and under
 * `llm4d plan --no_memo`. */
void llm4d_stagecost_cache_by_count(llm4d_stagecost_cache *c, int on);
/* The fastest linear layer (FLOP/s) of every trace the cache priced (0: none). */
double llm4d_stagecost_cache_gemm_rate(const llm4d_stagecost_cache *c);

/* A stage of a configuration as the rank at topo's coordinates runs it (pp: the configuration's pipeline plan). */
typedef struct {
    const llm4d_config *cfg;
    const llm4d_topology *topo;
    const llm4d_pp_plan *pp;
} llm4d_stage_ref;

/* The priced trace of the stage at, from the cache or recorded (on a backend like `like`), priced and cached (the
 * result belongs to the cache). tp_hosts: hosts the tensor-parallel group spans; ranks_on_host: the job's ranks
 * per host. */
llm4d_code llm4d_stagecost_get(llm4d_stagecost_cache *cache, const llm4d_pricer *pr, const llm4d_stage_ref *at,
                               const llm4d_backend *like, int ranks_on_host, int tp_hosts,
                               const llm4d_stagecost **out, llm4d_err *err);
void llm4d_stagecost_free(llm4d_stagecost *s);

/* Price a trace (the cache's work, exposed for the tests); coll_ranks, the ranks per host its collectives are
 * priced at (ranks_on_host prices the processor time their waits burn). */
llm4d_code llm4d_stagecost_price(const llm4d_mbtrace *t, const llm4d_pricer *pr, int ranks_on_host, int coll_ranks,
                                 int tp_hosts, size_t bucket_bytes, llm4d_stagecost *out, llm4d_err *err);

#endif
