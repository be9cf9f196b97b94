/* tp.h — the tensor-parallel context the model carries: the group, sequence parallelism on or off, and the
 * communication operators of Megatron's tensor parallelism (Shoeybi et al. 2019; Korthikanti et al. 2022).
 *
 * A tensor-parallel group of M ranks splits every block: attn.c_attn and mlp.c_fc are column-parallel (each rank
 * computes its heads / its F/M output features), attn.c_proj and mlp.c_proj are row-parallel (each rank multiplies
 * its slice of the input features and holds a partial sum of the output). Megatron's conjugate operators make the
 * split invisible to the rest of the model:
 *   f  before a column-parallel layer: identity forward, all-reduce of the input gradient backward;
 *   g  after a row-parallel layer:     all-reduce forward (the partial sums), identity backward.
 * With sequence parallelism the LayerNorm and dropout regions between them are split too, along the B*T tokens
 * (rank r holds tokens [r*BT/M, (r+1)*BT/M)), and the operators become
 *   f  all-gather of the tokens forward, reduce-scatter of the input gradient backward;
 *   g  reduce-scatter forward, all-gather of the output gradient backward.
 * An all-reduce is a reduce-scatter followed by an all-gather, so both move the same bytes; sequence parallelism
 * only stops every rank from holding (and computing) the LayerNorm/dropout activations of all tokens.
 *
 * The activations are device memory: the operators are the communicator's data plane (comm.h). Sums are fp32: the
 * model reduces partial sums (a row-parallel layer's output, a column-parallel layer's input gradient) before it
 * rounds them to 16 bits, so a value is rounded at the same point whatever the group's size, and the tensor-parallel
 * layouts train the one-process model under AMP too. All-gathers move whole values, in the tensor's own type (half
 * the bytes for 16-bit activations).
 * Every call records the first communication failure in the context instead of returning it (the model's forward
 * and backward run inside the trainer's step and report through llm4d_tp_check afterwards); later calls do
 * nothing, so a failed step ends quickly. With M == 1 every operator is the identity and costs nothing. */
#ifndef LLM4D_MODEL_TP_H
#define LLM4D_MODEL_TP_H

#include <stddef.h>

#include "comm/comm.h"
#include "core/error.h"

typedef struct {
    llm4d_comm *comm;  /* the tensor-parallel group; NULL: none (M = 1) */
    llm4d_backend *be; /* where the activations live (set by the model): a group of one copies with it */
    int size, rank;    /* M, and this rank's index in the group */
    int sp;            /* sequence parallel */
    llm4d_err err;     /* the first failure */
    int failed;
} llm4d_tp;

/* A context over comm (NULL: no tensor parallelism); sp needs comm of size > 1 to mean anything. */
llm4d_tp llm4d_tp_make(llm4d_comm *comm, int sequence_parallel);

/* x[n] = the sum over the group (in place). */
void llm4d_tp_allreduce(llm4d_tp *tp, float *x, size_t n);
/* x[n] = the maximum over the group (in place). */
void llm4d_tp_allreduce_max(llm4d_tp *tp, float *x, size_t n);
/* full[M * n] = every rank's local[n], in rank order (local may be full's own block); both of one type. */
void llm4d_tp_allgather(llm4d_tp *tp, llm4d_ctensor local, llm4d_tensor full, size_t n);
/* local[n] = block `rank` of the sum over the group of full[M * n]. */
void llm4d_tp_reduce_scatter(llm4d_tp *tp, const float *full, float *local, size_t n);

/* The first failure of the step, as a return code (and clears it for the next step). */
llm4d_code llm4d_tp_check(llm4d_tp *tp, llm4d_err *err);

#endif
