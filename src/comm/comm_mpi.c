/* comm_mpi.c — the communicator method table on MPI (CPU buffers), one MPI communicator per group.
 *
 * The world is a duplicate of MPI_COMM_WORLD, so the error handler we set (MPI_ERRORS_RETURN: failures come back
 * as llm4d_err lines naming the collective and the group, rather than MPI's own abort) does not change the
 * behaviour of MPI_COMM_WORLD for anyone else. Groups are MPI_Comm_split of the world by the topology's group id
 * with the axis coordinate as key, so a rank's rank in a group is its coordinate on that axis. Non-blocking
 * collectives map onto MPI-3's MPI_Iallreduce / MPI_Ireduce_scatter_block / MPI_Iallgather; the MPI_Request is
 * kept inside the caller's llm4d_comm_req. Communicators must be destroyed before MPI_Finalize (runtime.h).
 *
 * bf16 has no MPI type: it travels as a committed 2-byte type and is summed by a user-defined operation (fp32
 * addition, rounded to nearest even), both created with the world communicator and shared by every group split
 * from it (the world frees them). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"
#include "core/bf16.h"

_Static_assert(sizeof(MPI_Request) <= sizeof(((llm4d_comm_req *)0)->impl), "MPI_Request must fit in impl");

typedef struct {
    MPI_Comm comm;
    MPI_Datatype bf16;   /* 2 contiguous bytes */
    MPI_Op bf16_sum;
    int owns_bf16;       /* the world: frees the two above */
} mpi_ctx;

static MPI_Comm comm_of(const llm4d_comm *c) { return ((const mpi_ctx *)c->ctx)->comm; }

static MPI_Datatype mpi_type(const llm4d_comm *c, llm4d_comm_dtype dt) {
    switch (dt) {
    case LLM4D_COMM_F32: return MPI_FLOAT;
    case LLM4D_COMM_F64: return MPI_DOUBLE;
    case LLM4D_COMM_I64: return MPI_INT64_T;
    case LLM4D_COMM_BYTE: return MPI_BYTE;
    case LLM4D_COMM_BF16: return ((const mpi_ctx *)c->ctx)->bf16;
    default: LLM4D_ASSERT(0, "dtype %d", (int)dt);
    }
}

static MPI_Op mpi_op(const llm4d_comm *c, llm4d_comm_dtype dt, llm4d_comm_reduction op) {
    if (dt == LLM4D_COMM_BF16) return ((const mpi_ctx *)c->ctx)->bf16_sum;
    return op == LLM4D_COMM_MAX ? MPI_MAX : MPI_SUM;
}

/* MPI_User_function: inout[i] = bf16(in[i] + inout[i]) */
static void bf16_sum(void *in, void *inout, int *len, MPI_Datatype *type) {
    (void)type;
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++) b[i] = llm4d_bf16_from_f32(llm4d_bf16_to_f32(a[i]) + llm4d_bf16_to_f32(b[i]));
}

static MPI_Request *req_of(llm4d_comm_req *req) { return (MPI_Request *)(void *)req->impl; }

static llm4d_code check(int rc, const char *call, llm4d_err *err) {
    if (rc == MPI_SUCCESS) return LLM4D_OK;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "MPI error code %d", rc);
    return llm4d_fail(err, LLM4D_EINTERNAL, "%s failed: %s", call, text);
}

static llm4d_code mpi_barrier(llm4d_comm *c, llm4d_err *err) {
    return check(MPI_Barrier(comm_of(c)), "MPI_Barrier", err);
}

static llm4d_code mpi_ibarrier(llm4d_comm *c, llm4d_comm_req *req, llm4d_err *err) {
    return check(MPI_Ibarrier(comm_of(c), req_of(req)), "MPI_Ibarrier", err);
}

static llm4d_code mpi_allreduce(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt,
                                llm4d_comm_reduction op, llm4d_err *err) {
    return check(MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, mpi_type(c, dt), mpi_op(c, dt, op), comm_of(c)),
                 "MPI_Allreduce", err);
}

static llm4d_code mpi_iallreduce(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt,
                                 llm4d_comm_reduction op, llm4d_comm_req *req, llm4d_err *err) {
    return check(MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, mpi_type(c, dt), mpi_op(c, dt, op), comm_of(c),
                                req_of(req)),
                 "MPI_Iallreduce", err);
}

static llm4d_code mpi_reduce_scatter(llm4d_comm *c, const void *send, void *recv, size_t recv_count,
                                     llm4d_comm_dtype dt, llm4d_err *err) {
    return check(MPI_Reduce_scatter_block(send, recv, (int)recv_count, mpi_type(c, dt), mpi_op(c, dt, 0), comm_of(c)),
                 "MPI_Reduce_scatter_block", err);
}

static llm4d_code mpi_ireduce_scatter(llm4d_comm *c, const void *send, void *recv, size_t recv_count,
                                      llm4d_comm_dtype dt, llm4d_comm_req *req, llm4d_err *err) {
    return check(MPI_Ireduce_scatter_block(send, recv, (int)recv_count, mpi_type(c, dt), mpi_op(c, dt, 0), comm_of(c),
                                           req_of(req)),
                 "MPI_Ireduce_scatter_block", err);
}

/* The wrapper allows send to be this rank's own block of recv: that is MPI_IN_PLACE for MPI. */
static const void *gather_send(const llm4d_comm *c, const void *send, const void *recv, size_t send_count,
                               llm4d_comm_dtype dt) {
    const char *own = (const char *)recv + (size_t)c->rank * send_count * llm4d_comm_dtype_size(dt);
    return (const char *)send == own ? MPI_IN_PLACE : send;
}

static llm4d_code mpi_allgather(llm4d_comm *c, const void *send, void *recv, size_t send_count,
                                llm4d_comm_dtype dt, llm4d_err *err) {
    MPI_Datatype t = mpi_type(c, dt);
    return check(MPI_Allgather(gather_send(c, send, recv, send_count, dt), (int)send_count, t, recv,
                               (int)send_count, t, comm_of(c)),
                 "MPI_Allgather", err);
}

static llm4d_code mpi_iallgather(llm4d_comm *c, const void *send, void *recv, size_t send_count,
                                 llm4d_comm_dtype dt, llm4d_comm_req *req, llm4d_err *err) {
    MPI_Datatype t = mpi_type(c, dt);
    return check(MPI_Iallgather(gather_send(c, send, recv, send_count, dt), (int)send_count, t, recv,
                                (int)send_count, t, comm_of(c), req_of(req)),
                 "MPI_Iallgather", err);
}

static llm4d_code mpi_broadcast(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt, int root,
                                llm4d_err *err) {
    return check(MPI_Bcast(buf, (int)count, mpi_type(c, dt), root, comm_of(c)), "MPI_Bcast", err);
}

static llm4d_code mpi_ibroadcast(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt, int root,
                                 llm4d_comm_req *req, llm4d_err *err) {
    return check(MPI_Ibcast(buf, (int)count, mpi_type(c, dt), root, comm_of(c), req_of(req)), "MPI_Ibcast", err);
}

static llm4d_code mpi_send(llm4d_comm *c, const void *buf, size_t count, llm4d_comm_dtype dt, int peer, int tag,
                           llm4d_err *err) {
    return check(MPI_Send(buf, (int)count, mpi_type(c, dt), peer, tag, comm_of(c)), "MPI_Send", err);
}

static llm4d_code mpi_recv(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt, int peer, int tag,
                           llm4d_err *err) {
    return check(MPI_Recv(buf, (int)count, mpi_type(c, dt), peer, tag, comm_of(c), MPI_STATUS_IGNORE), "MPI_Recv",
                 err);
}

static llm4d_code mpi_isend(llm4d_comm *c, const void *buf, size_t count, llm4d_comm_dtype dt, int peer, int tag,
                            llm4d_comm_req *req, llm4d_err *err) {
    return check(MPI_Isend(buf, (int)count, mpi_type(c, dt), peer, tag, comm_of(c), req_of(req)), "MPI_Isend", err);
}

static llm4d_code mpi_irecv(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt, int peer, int tag,
                            llm4d_comm_req *req, llm4d_err *err) {
    return check(MPI_Irecv(buf, (int)count, mpi_type(c, dt), peer, tag, comm_of(c), req_of(req)), "MPI_Irecv", err);
}

static llm4d_code mpi_test(llm4d_comm *c, llm4d_comm_req *req, int *done, llm4d_err *err) {
    (void)c;
    return check(MPI_Test(req_of(req), done, MPI_STATUS_IGNORE), "MPI_Test", err);
}

static llm4d_code mpi_wait(llm4d_comm *c, llm4d_comm_req *req, llm4d_err *err) {
    (void)c;
    return check(MPI_Wait(req_of(req), MPI_STATUS_IGNORE), "MPI_Wait", err);
}

static llm4d_code wrap_comm(MPI_Comm comm, const char *name, const mpi_ctx *parent, llm4d_comm **out,
                            llm4d_err *err);

static llm4d_code mpi_split(llm4d_comm *c, int color, int key, const char *name, llm4d_comm **out,
                            llm4d_err *err) {
    MPI_Comm sub;
    LLM4D_TRY(check(MPI_Comm_split(comm_of(c), color, key, &sub), "MPI_Comm_split", err));
    return wrap_comm(sub, name, c->ctx, out, err);
}

static void mpi_abort(llm4d_comm *c, int code) {
    (void)c;
    /* the world, not the group: Open MPI kills the whole job either way, but the standard only promises the
     * processes of the communicator */
    MPI_Abort(MPI_COMM_WORLD, code);
}

static void mpi_destroy(llm4d_comm *c) {
    mpi_ctx *x = c->ctx;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && x->comm != MPI_COMM_NULL) MPI_Comm_free(&x->comm);
    if (!finalized && x->owns_bf16) {
        if (x->bf16_sum != MPI_OP_NULL) MPI_Op_free(&x->bf16_sum);
        if (x->bf16 != MPI_DATATYPE_NULL) MPI_Type_free(&x->bf16);
    }
    free(x);
    free(c);
}

static const llm4d_comm_ops mpi_ops = {
    .backend = "mpi",
    .barrier = mpi_barrier,
    .ibarrier = mpi_ibarrier,
    .allreduce = mpi_allreduce,
    .iallreduce = mpi_iallreduce,
    .reduce_scatter = mpi_reduce_scatter,
    .ireduce_scatter = mpi_ireduce_scatter,
    .allgather = mpi_allgather,
    .iallgather = mpi_iallgather,
    .broadcast = mpi_broadcast,
    .ibroadcast = mpi_ibroadcast,
    .send = mpi_send,
    .recv = mpi_recv,
    .isend = mpi_isend,
    .irecv = mpi_irecv,
    .test = mpi_test,
    .wait = mpi_wait,
    .split = mpi_split,
    .abort = mpi_abort,
    .destroy = mpi_destroy,
};

static llm4d_code wrap_comm(MPI_Comm comm, const char *name, const mpi_ctx *parent, llm4d_comm **out,
                            llm4d_err *err) {
    llm4d_comm *c = calloc(1, sizeof *c);
    mpi_ctx *x = calloc(1, sizeof *x);
    if (!c || !x) {
        free(c);
        free(x);
        MPI_Comm_free(&comm);
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory creating the %s communicator", name);
    }
    x->comm = comm;
    x->bf16 = MPI_DATATYPE_NULL;
    x->bf16_sum = MPI_OP_NULL;
    c->ops = &mpi_ops;
    c->ctx = x;
    snprintf(c->name, sizeof c->name, "%s", name);
    llm4d_code rc = check(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", err);
    if (rc == LLM4D_OK) rc = check(MPI_Comm_rank(comm, &c->rank), "MPI_Comm_rank", err);
    if (rc == LLM4D_OK) rc = check(MPI_Comm_size(comm, &c->size), "MPI_Comm_size", err);
    if (rc == LLM4D_OK && parent) {
        x->bf16 = parent->bf16;
        x->bf16_sum = parent->bf16_sum;
    } else if (rc == LLM4D_OK) {
        x->owns_bf16 = 1;
        rc = check(MPI_Type_contiguous(2, MPI_BYTE, &x->bf16), "MPI_Type_contiguous", err);
        if (rc == LLM4D_OK) rc = check(MPI_Type_commit(&x->bf16), "MPI_Type_commit", err);
        if (rc == LLM4D_OK) rc = check(MPI_Op_create(bf16_sum, 1, &x->bf16_sum), "MPI_Op_create", err);
    }
    if (rc != LLM4D_OK) {
        mpi_destroy(c);
        return rc;
    }
    *out = c;
    return LLM4D_OK;
}

llm4d_code llm4d_comm_mpi_world(llm4d_comm **out, llm4d_err *err) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    LLM4D_ASSERT(initialized, "llm4d_comm_mpi_world before MPI_Init (call llm4d_runtime_init)");
    MPI_Comm dup;
    LLM4D_TRY(check(MPI_Comm_dup(MPI_COMM_WORLD, &dup), "MPI_Comm_dup", err));
    return wrap_comm(dup, "world", NULL, out, err);
}
