/* sharding_policy.h — the two orthogonal parts a ZeRO engine (sharding.c) is composed of, chosen once when it is
 * created (llm4d_zero_policies), so that no hook, update or save asks which stage it runs:
 *
 *   parameter policy (sharding_params.c): whole parameters in the model, all-gathered after each update
 *                    (stages 1, 2), or only the own shards kept, each group gathered when used and the next one
 *                    prefetched (stage 3);
 *   gradient policy  (sharding_grads.c): a whole flat gradient, each group reduce-scattered once its last window of
 *                    the step is done (stage 1), or per-window buckets reduce-scattered into the own shards as each
 *                    window closes (stages 2, 3).
 *
 * Stage 1 = whole parameters + whole gradients, stage 2 = whole parameters + sharded gradients, stage 3 = sharded
 * parameters + sharded gradients; Adam's states are always sharded, and offload (offload.h) is where the states (and
 * a sharded parameter policy's shards) are stored, not a policy. The data fields say what a policy holds, which is
 * all the engine's allocation and its memory plan read (so the two cannot disagree); the functions are its
 * behaviour. Private to the sharding engine's files. */
#ifndef LLM4D_PARALLEL_SHARDING_POLICY_H
#define LLM4D_PARALLEL_SHARDING_POLICY_H

#include "parallel/sharding.h"
#include "parallel/traffic.h"

/* The first communication failure inside a hook is kept and reported at the end of the step (hooks cannot
 * return errors through the model); later calls become no-ops so the step ends quickly. */
#define HOOK_TRY(expr)                                                                                           \
    do {                                                                                                         \
        if (!s->failed && (expr) != LLM4D_OK) s->failed = 1;                                                     \
    } while (0)

typedef struct llm4d_zero_params {
    const char *what;  /* for the start-up line */
    int whole;         /* the model holds every parameter (its flat buffer); else the own shards are kept apart
                        * (a local buffer, or an offload stream) and two gather buffers of the largest group exist */
    int gather_at;     /* traffic.h: when a group is all-gathered: LLM4D_AT_UPDATE (after the update, blocking: the
                        * updated() below) or LLM4D_AT_USE (params_for, the next use prefetched) */
    float *(*params_for)(llm4d_sharding *s, int grp);
    void (*release)(llm4d_sharding *s, int grp);
    /* The parameter an update range starts at: flat its index in the table's layout, window the same element in
     * the update window's parameter stream (NULL when the policy keeps no stream). */
    float *(*at)(llm4d_sharding *s, size_t flat, float *window);
    /* After the update of the own shards: make the parameters the model reads current. */
    llm4d_code (*updated)(llm4d_sharding *s, llm4d_err *err);
    /* The initial values of what it keeps apart from the model (the model initialises its whole buffer). */
    llm4d_code (*init)(llm4d_sharding *s, uint64_t seed, llm4d_err *err);
    /* The parameters' box of a checkpoint, and the hash of what this rank holds (sh_param_hash). */
    void (*state)(llm4d_sharding *s, llm4d_engine_state *out);
    uint64_t (*hash)(llm4d_sharding *s, int which);
} llm4d_zero_params;

typedef struct llm4d_zero_grads {
    const char *what;
    int whole; /* the model holds the whole flat gradient; else the own shards (a local buffer) and two buckets of
                * the largest group */
    int rs_at;        /* traffic.h: when a group's gradient is reduce-scattered: LLM4D_AT_LAST_WINDOW (its last
                       * window of the step) or LLM4D_AT_WINDOW (every window); the engine calls grads_done then */
    int dp_per_group; /* hybrid dp: dp_reduce all-reduces each group's own shard (1) or all own shards at once (0) */
    /* The gradient an update range starts at: flat its index in the table's layout, local in the own shards. */
    float *(*at)(llm4d_sharding *s, size_t flat, size_t local);
    llm4d_store store; /* a reduce-scattered shard into the own gradient: written (whole: a block of the flat
                        * gradient, reduced once per step) or added (accumulated over the step's windows) */
    float *(*grads_for)(llm4d_sharding *s, int grp);
    void (*grads_done)(llm4d_sharding *s, int grp, const llm4d_event *ready);
    void (*begin)(llm4d_sharding *s); /* a step's gradients from zero */
    llm4d_code (*dp_reduce)(llm4d_sharding *s, llm4d_err *err); /* hybrid dp: the own shards across replicas */
} llm4d_zero_grads;

extern const llm4d_zero_params llm4d_zero_params_whole, llm4d_zero_params_gathered;
extern const llm4d_zero_grads llm4d_zero_grads_whole, llm4d_zero_grads_bucketed;

/* The policies of a ZeRO stage (1, 2, 3): the one place the stage number is read. */
void llm4d_zero_policies(int stage, const llm4d_zero_params **p, const llm4d_zero_grads **g);

/* Shared by the engine's files (sharding.c). */
static inline size_t llm4d_zero_group_len(const llm4d_sharding *s, int grp) {
    return s->g->table.g[grp].hi - s->g->table.g[grp].lo;
}
static inline size_t llm4d_zero_group_lo(const llm4d_sharding *s, int grp) { return s->g->table.g[grp].lo; }
/* Wait for the collective on r (if any), the time blocked added to *acc. */
void llm4d_zero_slot_wait(llm4d_sharding *s, llm4d_ring_slot *r, double *acc);
/* The gathers and reduce-scatters in flight, moved forward between kernels (comm.h llm4d_comm_progress). */
void llm4d_zero_progress(llm4d_sharding *s);
/* Every reduce-scatter in flight completed and landed (sharding_grads.c). */
void llm4d_zero_grads_drain(llm4d_sharding *s);
/* The part of entry i inside its group's own shard: its local elements [*j0, *j1) at local index *local (the
 * offset in the local buffers); 0 when the shard holds none of it. */
int llm4d_zero_own_part(const llm4d_sharding *s, int i, int64_t *j0, int64_t *j1, size_t *local);

#endif
