/* comm_self.c — the communicator of a world of one process, used when llm4d runs without an MPI launcher (and for
 * every group of size 1 in tests). Every collective over one rank is the identity: all-reduce and broadcast leave
 * the buffer as it is, reduce-scatter and all-gather copy send to recv, requests complete at once. There is no
 * peer to send to, so point-to-point calls are internal errors (a pipeline of one stage never sends). No MPI
 * symbol is touched, so a single-process run works where MPI is absent or broken. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"

static llm4d_code self_barrier(llm4d_comm *c, llm4d_err *err) {
    (void)c, (void)err;
    return LLM4D_OK;
}

static llm4d_code self_allreduce(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt,
                                 llm4d_comm_reduction op, llm4d_err *err) {
    (void)c, (void)buf, (void)count, (void)dt, (void)op, (void)err;
    return LLM4D_OK;
}

static llm4d_code self_iallreduce(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt,
                                  llm4d_comm_reduction op, llm4d_comm_req *req, llm4d_err *err) {
    (void)req;
    return self_allreduce(c, buf, count, dt, op, err);
}

static llm4d_code self_copy(const void *send, void *recv, size_t count, llm4d_comm_dtype dt) {
    if (send != recv) memmove(recv, send, count * llm4d_comm_dtype_size(dt));
    return LLM4D_OK;
}

static llm4d_code self_reduce_scatter(llm4d_comm *c, const void *send, void *recv, size_t recv_count,
                                      llm4d_comm_dtype dt, llm4d_err *err) {
    (void)c, (void)err;
    return self_copy(send, recv, recv_count, dt);
}

static llm4d_code self_ireduce_scatter(llm4d_comm *c, const void *send, void *recv, size_t recv_count,
                                       llm4d_comm_dtype dt, llm4d_comm_req *req, llm4d_err *err) {
    (void)c, (void)req, (void)err;
    return self_copy(send, recv, recv_count, dt);
}

static llm4d_code self_allgather(llm4d_comm *c, const void *send, void *recv, size_t send_count,
                                 llm4d_comm_dtype dt, llm4d_err *err) {
    (void)c, (void)err;
    return self_copy(send, recv, send_count, dt);
}

static llm4d_code self_iallgather(llm4d_comm *c, const void *send, void *recv, size_t send_count,
                                  llm4d_comm_dtype dt, llm4d_comm_req *req, llm4d_err *err) {
    (void)c, (void)req, (void)err;
    return self_copy(send, recv, send_count, dt);
}

static llm4d_code self_broadcast(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt, int root,
                                 llm4d_err *err) {
    (void)c, (void)buf, (void)count, (void)dt, (void)root, (void)err;
    return LLM4D_OK;
}

static llm4d_code self_no_peer(llm4d_comm *c, const char *what) {
    LLM4D_ASSERT(0, "%s on the one-process %s communicator: there is no peer", what, c->name);
    return LLM4D_EINTERNAL;
}

static llm4d_code self_send(llm4d_comm *c, const void *buf, size_t count, llm4d_comm_dtype dt, int peer, int tag,
                            llm4d_err *err) {
    (void)buf, (void)count, (void)dt, (void)peer, (void)tag, (void)err;
    return self_no_peer(c, "send");
}

static llm4d_code self_recv(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt, int peer, int tag,
                            llm4d_err *err) {
    (void)buf, (void)count, (void)dt, (void)peer, (void)tag, (void)err;
    return self_no_peer(c, "recv");
}

static llm4d_code self_isend(llm4d_comm *c, const void *buf, size_t count, llm4d_comm_dtype dt, int peer, int tag,
                             llm4d_comm_req *req, llm4d_err *err) {
    (void)buf, (void)count, (void)dt, (void)peer, (void)tag, (void)req, (void)err;
    return self_no_peer(c, "isend");
}

static llm4d_code self_irecv(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt, int peer, int tag,
                             llm4d_comm_req *req, llm4d_err *err) {
    (void)buf, (void)count, (void)dt, (void)peer, (void)tag, (void)req, (void)err;
    return self_no_peer(c, "irecv");
}

static llm4d_code self_test(llm4d_comm *c, llm4d_comm_req *req, int *done, llm4d_err *err) {
    (void)c, (void)req, (void)err;
    *done = 1;
    return LLM4D_OK;
}

static llm4d_code self_wait(llm4d_comm *c, llm4d_comm_req *req, llm4d_err *err) {
    (void)c, (void)req, (void)err;
    return LLM4D_OK;
}

static llm4d_code self_split(llm4d_comm *c, int color, int key, const char *name, llm4d_comm **out,
                             llm4d_err *err) {
    (void)c, (void)color, (void)key;
    return llm4d_comm_self_create(name, out, err);
}

static void self_abort(llm4d_comm *c, int code) {
    (void)c;
    exit(code);
}

static void self_destroy(llm4d_comm *c) { free(c); }

static const llm4d_comm_ops self_ops = {
    .backend = "self",
    .barrier = self_barrier,
    .allreduce = self_allreduce,
    .iallreduce = self_iallreduce,
    .reduce_scatter = self_reduce_scatter,
    .ireduce_scatter = self_ireduce_scatter,
    .allgather = self_allgather,
    .iallgather = self_iallgather,
    .broadcast = self_broadcast,
    .send = self_send,
    .recv = self_recv,
    .isend = self_isend,
    .irecv = self_irecv,
    .test = self_test,
    .wait = self_wait,
    .split = self_split,
    .abort = self_abort,
    .destroy = self_destroy,
};

llm4d_code llm4d_comm_self_create(const char *name, llm4d_comm **out, llm4d_err *err) {
    llm4d_comm *c = calloc(1, sizeof *c);
    if (!c) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory creating the %s communicator", name);
    c->ops = &self_ops;
    c->rank = 0;
    c->size = 1;
    snprintf(c->name, sizeof c->name, "%s", name);
    *out = c;
    return LLM4D_OK;
}
