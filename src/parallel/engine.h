/* engine.h — the interface every parallel engine implements, and the stack of engines the trainer drives.
 *
 * An engine is a struct of function pointers (ggml style) embedded at the start of the engine's own state. The
 * trainer never branches on which engines run: it builds a stack and drives it through one protocol per step:
 *
 *   begin_step(n_micro)   arm: gradients zeroed, per-group window counters reset (each group's gradient is final
 *                         after n_micro x llm4d_gpt_windows(group) windows, whatever order a schedule runs them in)
 *   the model's hooks     params_for / release / grads_for / grads_done, called by the model during forward and
 *                         backward of every micro-batch (gpt.h)
 *   finish_backward       every reduction of the step completed, in stack order
 *   grad_sumsq            this rank's share of the squared gradient norm (each element counted once over the job:
 *                         the trainer sums the shares over the world)
 *   update                AdamW at the given learning rate and gradient scale (the clip factor)
 *   state                 what this rank keeps, as ranges of the parameter layout, for checkpoints
 *                         (train/checkpoint.c writes and reads them through ckpt/gpt_ckpt.h)
 *
 * Exactly one engine of a stack is the STORAGE engine: it owns the parameters, gradients and optimizer states
 * (flat.c: whole buffers; sharding.c: ZeRO shards) and answers the hooks. The others are REDUCERS that act on the
 * storage's gradients: data_parallel.c (bucketed all-reduce over the data group, during backward),
 * tensor_parallel.c (the sequence-parallel partial gradients over the tensor-parallel group), pipeline.c (the tied
 * embedding's gradient over the first and last stage). They stack: a run with every dimension has
 * [pipeline, tensor_parallel, sharding] or [pipeline, tensor_parallel, data_parallel, flat]. Hooks go to the first
 * engine that defines them, except grads_done, which every engine that defines it sees in stack order. Finish runs
 * the storage engine first (its data-parallel reductions complete the gradients of the elements it keeps), then the
 * reducers, which all-reduce what the storage keeps of their parameters: sums commute, so the order is free. */
#ifndef LLM4D_PARALLEL_ENGINE_H
#define LLM4D_PARALLEL_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "backend/view.h"
#include "comm/comm.h"
#include "model/gpt.h"
#include "parallel/executor.h"

typedef struct llm4d_engine llm4d_engine;

/* One buffer of a storage engine's state: len elements at p, in device memory, or host memory where the engine
 * keeps it there (offloaded states, mapped from their file for the duration of a checkpoint). */
typedef struct {
    float *p;
    size_t len;
    int host;
} llm4d_state_buf;

/* The state a storage engine keeps, for checkpoints (the placement of ckpt/gpt_ckpt.h's *_ranges functions): n
 * boxes, the ranges [lo[k], hi[k]) of the table's flat layout; range k's parameters at params + params_off[k]
 * (params_off NULL: placed like m and v), its Adam m and v at m + state_off[k], v + state_off[k] (state_off NULL:
 * back to back). params_whole: the parameters are the whole flat buffer (every entry is read on load, not only the
 * ranges). The buffers are read and written on the host only through llm4d_engine_state_open: the one place where a
 * checkpoint stages device memory. */
typedef struct {
    int n;
    const size_t *lo, *hi;
    llm4d_state_buf params, m, v;
    const size_t *params_off;
    const size_t *state_off;
    int params_whole;
    int writes; /* 0: this rank keeps a data-parallel replica of what another rank saves */
} llm4d_engine_state;

/* Host views of a state's three buffers (backend/view.h): the device buffers themselves where the backend is
 * host-addressable or the engine keeps them on the host, else staged copies (read: filled from the device; write:
 * copied back at close). */
typedef struct {
    float *params, *m, *v;
    llm4d_view view[3];
} llm4d_state_host;

llm4d_code llm4d_engine_state_open(const llm4d_engine_state *st, llm4d_backend *be, llm4d_mem *mem, int mode,
                                   llm4d_state_host *h, llm4d_err *err);
void llm4d_engine_state_close(llm4d_state_host *h, llm4d_backend *be, llm4d_mem *mem);

/* What the engines measured in a step (their stats op adds what applies to it; the trainer writes it to
 * metrics.jsonl and the end-of-run report). */
typedef struct {
    double zero_gather_wait_s;   /* ZeRO-3: blocked waiting for parameter gathers */
    double zero_rs_wait_s;       /* ZeRO: blocked in or waiting for gradient reduce-scatters */
    double pp_idle_s, pp_busy_s; /* pipeline: waiting for the neighbours, computing */
    double pp_op_s[3];           /* pipeline: time in forwards, backwards, weight passes ... */
    int pp_op_n[3];              /* ... and how many ran */
    int pp_stage;                /* pipeline: this rank's stage (-1: no pipeline) */
    llm4d_comm_stats comm;       /* traffic on groups the engines own (the pipeline's embedding group) */
} llm4d_engine_stats;

typedef struct {
    const char *name;
    /* the model's hooks (gpt.h); NULL: not this engine's business */
    float *(*params_for)(llm4d_engine *e, int grp, int pass);
    void (*release)(llm4d_engine *e, int grp, int pass);
    float *(*grads_for)(llm4d_engine *e, int grp);
    void (*grads_done)(llm4d_engine *e, int grp, const llm4d_event *ready);
    /* the step protocol */
    void (*begin_step)(llm4d_engine *e, int n_micro);
    llm4d_code (*finish_backward)(llm4d_engine *e, llm4d_err *err);
    /* storage only: the elements [*j0, *j1) of entry i (params.h) whose gradient this rank keeps after finish, at
     * the returned pointer (NULL when it keeps none) */
    float *(*grad_view)(llm4d_engine *e, int i, int64_t *j0, int64_t *j1);
    /* storage only: this rank's share of the squared norm (entries whose `owner` flag is set, one data replica) */
    double (*grad_sumsq)(llm4d_engine *e);
    llm4d_code (*update)(llm4d_engine *e, float lr, float grad_scale, llm4d_err *err);
    /* storage only: what this rank keeps (valid until the engine is destroyed) */
    void (*state)(llm4d_engine *e, llm4d_engine_state *out);
    /* storage only: the checkpoint is done with what state() returned (offloaded states are mapped for it); NULL:
     * nothing to do */
    llm4d_code (*state_done)(llm4d_engine *e, llm4d_err *err);
    /* storage only: a hash of the parameters this rank holds: all of them (LLM4D_HASH_ALL), the entries replicated
     * over the tensor-parallel group (LLM4D_HASH_REPLICATED: equal on its ranks), the token embedding
     * (LLM4D_HASH_EMBEDDING: equal on a pipeline's first and last stage) */
    uint64_t (*param_hash)(llm4d_engine *e, int which);
    int64_t (*adam_steps)(llm4d_engine *e, int64_t set); /* storage only: Adam's t; set >= 0 sets it */
    /* storage only: the state's shards gathered over the engine's group into whole buffers of the table's layout
     * (host memory, from the state's host views h; params NULL where the state's parameters are whole already),
     * for a consolidated checkpoint; *writes: whether this rank writes it. NULL: the state is whole. */
    llm4d_code (*gather_state)(llm4d_engine *e, const llm4d_state_host *h, float *params, float *m, float *v,
                               int *writes, llm4d_err *err);
    void (*describe)(llm4d_engine *e, char *buf, size_t n); /* one line for the start-up log (may be NULL) */
    void (*stats)(llm4d_engine *e, llm4d_engine_stats *out); /* this step's measurements, added (may be NULL) */
    /* the executor that runs a step's micro-batches, if this engine brings one (the pipeline); NULL otherwise */
    llm4d_executor *(*executor)(llm4d_engine *e);
    void (*destroy)(llm4d_engine *e);
} llm4d_engine_ops;

struct llm4d_engine {
    const llm4d_engine_ops *ops;
    double comm_wait_s;   /* this step: time blocked in the engine's communication */
    double comm_total_s;  /* this step: time inside its communication calls */
};

enum { LLM4D_HASH_ALL = 0, LLM4D_HASH_REPLICATED, LLM4D_HASH_EMBEDDING };

/* Whether entry p belongs to a hash of kind `which`. */
static inline int llm4d_hash_takes(const llm4d_param *p, int which) {
    return which == LLM4D_HASH_ALL || (which == LLM4D_HASH_REPLICATED && p->split_dim < 0) ||
           (which == LLM4D_HASH_EMBEDDING && p->kind == LLM4D_P_WTE);
}

#define LLM4D_MAX_ENGINES 8

typedef struct {
    llm4d_engine *e[LLM4D_MAX_ENGINES]; /* owned: heap-allocated engines, freed by llm4d_engines_destroy */
    int n;
    llm4d_engine *storage;
    llm4d_gpt *g;
    llm4d_sequential seq;               /* the executor when no engine brings one */
} llm4d_engine_stack;

/* Start a stack on model g; push the storage engine first, then the reducers. The stack takes e (allocated with
 * malloc): destroying the stack destroys and frees it. */
void llm4d_engines_init(llm4d_engine_stack *s, llm4d_gpt *g);
void llm4d_engines_push(llm4d_engine_stack *s, llm4d_engine *e, int is_storage);
/* Point the model's hooks at the stack (call after every push). */
void llm4d_engines_install(llm4d_engine_stack *s);
void llm4d_engines_destroy(llm4d_engine_stack *s);
/* The executor of a step's micro-batches: the one an engine brings (the pipeline's), else the sequential one. */
llm4d_executor *llm4d_engines_executor(llm4d_engine_stack *s);
/* What the engines measured this step (every field summed over them; pp_stage -1 without a pipeline). */
void llm4d_engines_stats(llm4d_engine_stack *s, llm4d_engine_stats *out);

void llm4d_engines_begin_step(llm4d_engine_stack *s, int n_micro);
llm4d_code llm4d_engines_finish_backward(llm4d_engine_stack *s, llm4d_err *err);
llm4d_code llm4d_engines_update(llm4d_engine_stack *s, float lr, float grad_scale, llm4d_err *err);
/* Time blocked in communication this step, summed over the engines. */
double llm4d_engines_comm_wait(const llm4d_engine_stack *s);

/* The squares of the gradient elements a storage engine keeps (its grad_view of every entry, or of the entries whose
 * `owner` flag is set), summed per entry in one fused pass of the backend (sumsq_many: one read-back): each[i] for
 * entry i (0 where it keeps none; each may be NULL), and their sum taken in entry order. */
double llm4d_engine_grad_sumsq(llm4d_engine *storage, llm4d_gpt *g, int owners_only, double *each);

/* The gradient elements the storage keeps of entry i (see grad_view). */
static inline float *llm4d_engines_grad_view(llm4d_engine_stack *s, int i, int64_t *j0, int64_t *j1) {
    return s->storage->ops->grad_view(s->storage, i, j0, j1);
}

#endif
