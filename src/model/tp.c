/* tp.c — the tensor-parallel group's communication operators (see tp.h). */
#include "model/tp.h"

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
    if (active(tp)) record(tp, llm4d_comm_dev_allreduce(tp->comm, x, n, LLM4D_COMM_F32, LLM4D_COMM_SUM, &tp->err));
}

void llm4d_tp_allreduce_max(llm4d_tp *tp, float *x, size_t n) {
    if (active(tp)) record(tp, llm4d_comm_dev_allreduce(tp->comm, x, n, LLM4D_COMM_F32, LLM4D_COMM_MAX, &tp->err));
}

/* A group of one: the tokens are all here already, copied on the device when they are elsewhere. */
static void alone(llm4d_tp *tp, void *dst, const void *src, size_t bytes) {
    if (dst != src) tp->be->copy(tp->be, dst, src, bytes);
}

void llm4d_tp_allgather(llm4d_tp *tp, llm4d_ctensor local, llm4d_tensor full, size_t n) {
    LLM4D_ASSERT(local.t == full.t, "all-gather from %s into %s", llm4d_ftype_name(local.t), llm4d_ftype_name(full.t));
    if (tp->size == 1) {
        alone(tp, full.p, local.p, n * llm4d_ftype_size(local.t));
        return;
    }
    /* 16-bit values only move: as raw bytes, which every path of the data plane carries */
    const int f32 = local.t == LLM4D_F32;
    if (active(tp))
        record(tp, llm4d_comm_dev_allgather(tp->comm, local.p, full.p, f32 ? n : 2 * n,
                                            f32 ? LLM4D_COMM_F32 : LLM4D_COMM_BYTE, &tp->err));
}

void llm4d_tp_reduce_scatter(llm4d_tp *tp, const float *full, float *local, size_t n) {
    if (tp->size == 1) {
        alone(tp, local, full, n * sizeof(float));
        return;
    }
    if (active(tp)) record(tp, llm4d_comm_dev_reduce_scatter(tp->comm, full, local, n, LLM4D_COMM_F32, &tp->err));
}

llm4d_code llm4d_tp_check(llm4d_tp *tp, llm4d_err *err) {
    if (!tp->failed) return LLM4D_OK;
    *err = tp->err;
    tp->failed = 0;
    return err->code;
}
