/* record.h — what a model part really calls, recorded by running the model's own code against a backend and a
 * communicator that only write down their calls.
 *
 * The planner needs, for every layout it considers, the kernels a micro-batch runs on a rank (which, how many, at
 * which shapes), the tensor-parallel collectives between them, and the order in which the model asks the engines
 * for a group's weights and hands back its gradients. Rather than a second description of the model that could
 * drift from it, the planner runs the model itself (model/gpt.h: create, forward and backward of one micro-batch)
 * on a recording backend: every kernel appends a call (its sizes, the element types of its activations, and its
 * pointer arguments for a replay) and does no work; which methods record, under which op and with which sizes as
 * the key, is stated with each method in backend/methods.h, from which the recording methods are made. Memory it
 * "allocates" is a range of addresses no page backs (the device boundary of issue 25 guarantees nothing outside the
 * backend dereferences a tensor: a slip would crash, not read garbage). The tensor-parallel group is a recording
 * communicator of the group's size; the hooks record every params_for, release, grads_for and grads_done.
 *
 * A recording is priced by a machine profile (plan/profile.h) and, on the machine itself, replayed on the real
 * backend call by call to measure it (plan/calibrate.c): the allocations are made real (same sizes, the same
 * aliasing) and every call is made again with its pointers translated. */
#ifndef LLM4D_PLAN_RECORD_H
#define LLM4D_PLAN_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "comm/comm.h"
#include "model/gpt.h"

typedef enum {
    /* kernels (backend methods: backend/methods.h names each one's op); linear_*_act are the linear ops with an
     * activation, sumsq_many a sumsq of the total, dot_acc a dot, copy_async and copy_2d copies. Machine profiles
     * store these numbers: a new method is appended after the last (convert), never inserted. */
    LLM4D_RC_LINEAR_FWD = 0, LLM4D_RC_LINEAR_BWD, LLM4D_RC_EMBED_FWD, LLM4D_RC_EMBED_BWD, LLM4D_RC_POS_FWD,
    LLM4D_RC_POS_BWD, LLM4D_RC_BIAS_FWD, LLM4D_RC_BIAS_BWD, LLM4D_RC_LN_FWD, LLM4D_RC_LN_BWD, LLM4D_RC_GELU_FWD,
    LLM4D_RC_GELU_BWD, LLM4D_RC_ATTN_FWD, LLM4D_RC_ATTN_BWD, LLM4D_RC_DROP_FWD, LLM4D_RC_DROP_BWD,
    LLM4D_RC_DROPADD_FWD, LLM4D_RC_DROPADD_BWD, LLM4D_RC_XENT_FWD, LLM4D_RC_XENT_RESCALE, LLM4D_RC_XENT_BWD,
    LLM4D_RC_ADAMW, LLM4D_RC_SUMSQ, LLM4D_RC_DOT, LLM4D_RC_ADD, LLM4D_RC_SCALE, LLM4D_RC_ZERO, LLM4D_RC_COPY,
    LLM4D_RC_CONVERT, LLM4D_RC_RMSNORM_FWD, LLM4D_RC_RMSNORM_BWD, LLM4D_RC_ROPE_FWD, LLM4D_RC_ROPE_BWD,
    LLM4D_RC_SWIGLU_FWD, LLM4D_RC_SWIGLU_BWD,
    LLM4D_RC_NKERNELS,
    /* not kernels: a collective of the tensor-parallel group (d[0] its llm4d_comm_op, d[1] bytes per rank block,
     * d[2] the group's size), and the model's hooks (d[0] the group, d[1] the pass) */
    LLM4D_RC_COMM = LLM4D_RC_NKERNELS, LLM4D_RC_PARAMS_FOR, LLM4D_RC_RELEASE, LLM4D_RC_GRADS_FOR,
    LLM4D_RC_GRADS_DONE,
    LLM4D_RC_NOPS
} llm4d_rc_op;

#define LLM4D_RC_DIMS 8 /* sizes that decide a call's cost */
#define LLM4D_RC_AUX 4  /* values a replay needs that do not (offsets, the vocabulary, a dropout's T) */
#define LLM4D_RC_PTRS 8

typedef struct {
    uint16_t op;                  /* llm4d_rc_op */
    uint16_t ty;                  /* the element type (llm4d_ftype) of typed pointer argument i in bits 2i, 2i+1
                                   * (0: fp32, also every untyped or NULL argument); part of the cost key: a bf16
                                   * LayerNorm moves half the bytes of an fp32 one */
    int64_t d[LLM4D_RC_DIMS];     /* the cost key with op, ty and drop (unused dims 0) */
    int64_t aux[LLM4D_RC_AUX];
    float drop;                   /* a dropout's probability (0: none drawn) */
    uintptr_t p[LLM4D_RC_PTRS];   /* pointer arguments, in the method's order (0: NULL) */
} llm4d_rc_call;

/* The element type of pointer argument i of c (llm4d_rc_call.ty). */
static inline llm4d_ftype llm4d_rc_type(const llm4d_rc_call *c, int i) {
    return (llm4d_ftype)((c->ty >> (2 * i)) & 3u);
}

/* A fake allocation: [base, base + bytes) of the recording's address range. */
typedef struct {
    uintptr_t base;
    size_t bytes;
} llm4d_rc_alloc;

typedef struct {
    llm4d_rc_call *calls;
    int n, cap;
    llm4d_rc_alloc *allocs; /* in address order (the bump pointer only grows) */
    int n_allocs, cap_allocs;
    uintptr_t next;         /* the next fake address */
    const llm4d_param_table *table; /* the hooks' groups */
    uintptr_t *gbuf;        /* [2 x groups] the hooks' fake weight and gradient buffers, made on first use */
    int failed;             /* out of memory while recording */
    int paused;             /* calls are not appended (model creation: its initialisation is not a step's work) */
} llm4d_rec;

/* The recording backend: its kernels append to r; memory is fake (alloc_host is real host memory: the host may
 * touch it). like (may be NULL) lends its weight_copy_bytes, and whether it has weights_changed. Free with
 * be->destroy. */
llm4d_code llm4d_rec_backend_create(llm4d_backend **out, llm4d_rec *r, const llm4d_backend *like, llm4d_err *err);
/* A recording communicator of `size` ranks in which this process is `rank`: collectives append LLM4D_RC_COMM calls
 * to r and move nothing. Free with llm4d_comm_destroy. */
llm4d_code llm4d_rec_comm_create(llm4d_comm **out, llm4d_rec *r, int size, int rank, llm4d_err *err);
/* Hooks that record params_for / release / grads_for / grads_done and hand out fake buffers of a group's size
 * (t: the model's table, which must outlive the recording). */
llm4d_gpt_hooks llm4d_rec_hooks(llm4d_rec *r, const llm4d_param_table *t);
/* A fake allocation of `bytes` in r (a micro-batch's tokens, a hook's buffer); 0 when out of memory. */
uintptr_t llm4d_rec_fake(llm4d_rec *r, size_t bytes);
/* The allocation holding address a, or NULL when a is not one of r's (a host pointer). */
const llm4d_rc_alloc *llm4d_rec_find(const llm4d_rec *r, uintptr_t a);

void llm4d_rec_free(llm4d_rec *r);

/* The kind of work (backend.h llm4d_work) the backend's timers count a kernel as (its method's, methods.h). */
llm4d_work llm4d_rc_kind(const llm4d_rc_call *c);
/* Floating-point operations of a call (GEMMs and attention; 0 for the others), and the bytes it moves at least
 * (every operand read or written once, a typed one at its type's size: llm4d_rc_call.ty). */
double llm4d_rc_flops(const llm4d_rc_call *c);
double llm4d_rc_bytes(const llm4d_rc_call *c);

#endif
