/* tp.c — the tensor-parallel group's communication operators (see tp.h). */
#include "model/tp.h"

#include <string.h>

llm4d_tp llm4d_tp_make(llm4d_comm *comm, int sequence_parallel) {
    llm4d_tp tp = {.comm = comm, .size = 1};
    if (comm) {
        tp.size = llm4d_comm_size(comm);
        tp.rank = llm4d_comm_rank(comm);
    }
    tp.sp = sequence_parallel && tp.size > 1;
    return tp;
}

static int active(const llm4d_tp *tp) { return tp->size > 1 && !tp->failed; }

static void record(llm4d_tp *tp, llm4d_code rc) {
    if (rc != LLM4D_OK) tp->failed = 1;
}

void llm4d_tp_allreduce(llm4d_tp *tp, float *x, size_t n) {
    if (active(tp)) record(tp, llm4d_comm_allreduce(tp->comm, x, n, LLM4D_COMM_F32, &tp->err));
}

void llm4d_tp_allreduce_max(llm4d_tp *tp, float *x, size_t n) {
    if (active(tp)) record(tp, llm4d_comm_allreduce_max(tp->comm, x, n, LLM4D_COMM_F32, &tp->err));
}

void llm4d_tp_allgather(llm4d_tp *tp, const float *local, float *full, size_t n) {
    if (tp->size == 1) {
        if (full != local) memmove(full, local, n * sizeof(float));
        return;
    }
    if (active(tp)) record(tp, llm4d_comm_allgather(tp->comm, local, full, n, LLM4D_COMM_F32, &tp->err));
}

void llm4d_tp_reduce_scatter(llm4d_tp *tp, const float *full, float *local, size_t n) {
    if (tp->size == 1) {
        if (full != local) memmove(local, full, n * sizeof(float));
        return;
    }
    if (active(tp)) record(tp, llm4d_comm_reduce_scatter(tp->comm, full, local, n, LLM4D_COMM_F32, &tp->err));
}

llm4d_code llm4d_tp_check(llm4d_tp *tp, llm4d_err *err) {
    if (!tp->failed) return LLM4D_OK;
    *err = tp->err;
    tp->failed = 0;
    return err->code;
}
