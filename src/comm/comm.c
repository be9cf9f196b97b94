/* comm.c — the backend-neutral half of the communicator (see comm.h): argument checks, the byte and time
 * accounting every backend shares, and the groups of a topology made by splitting the world. Keeping the
 * accounting here means a new backend (NCCL) is measured exactly like MPI without repeating the formulas. */
#include "comm/comm.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/fault.h"
#include "core/timer.h"

size_t llm4d_comm_dtype_size(llm4d_comm_dtype dt) {
    switch (dt) {
    case LLM4D_COMM_F32: return 4;
    case LLM4D_COMM_F64: return 8;
    case LLM4D_COMM_I64: return 8;
    case LLM4D_COMM_BYTE: return 1;
    default: LLM4D_ASSERT(0, "dtype %d", (int)dt);
    }
}

const char *llm4d_comm_op_name(llm4d_comm_op op) {
    static const char *const names[LLM4D_COMM_NOPS] = {"allreduce", "reduce_scatter", "allgather", "broadcast",
                                                       "send",      "recv",           "barrier"};
    LLM4D_ASSERT(op >= 0 && op < LLM4D_COMM_NOPS, "op %d", (int)op);
    return names[op];
}

uint64_t llm4d_comm_stats_sent(const llm4d_comm_stats *s) {
    uint64_t total = 0;
    for (int op = 0; op < LLM4D_COMM_NOPS; op++)
        if (op != LLM4D_COMM_OP_RECV) total += s->bytes[op];
    return total;
}

void llm4d_comm_stats_add(llm4d_comm_stats *s, const llm4d_comm_stats *add) {
    for (int op = 0; op < LLM4D_COMM_NOPS; op++) {
        s->calls[op] += add->calls[op];
        s->bytes[op] += add->bytes[op];
    }
    s->blocked_s += add->blocked_s;
}

/* The algorithm cost of one call (comm.h), for `count` elements of payload per rank block. */
static uint64_t cost_bytes(llm4d_comm_op op, uint64_t n, uint64_t block_bytes) {
    switch (op) {
    case LLM4D_COMM_OP_ALLREDUCE: return 2 * (n - 1) * block_bytes / n;
    case LLM4D_COMM_OP_REDUCE_SCATTER: /* whole input = n blocks; (n-1)/n of it leaves this rank */
    case LLM4D_COMM_OP_ALLGATHER: return (n - 1) * block_bytes;
    case LLM4D_COMM_OP_BROADCAST: return n > 1 ? block_bytes : 0;
    case LLM4D_COMM_OP_SEND:
    case LLM4D_COMM_OP_RECV: return block_bytes;
    default: return 0;
    }
}

static void account(llm4d_comm *c, llm4d_comm_op op, size_t count, llm4d_comm_dtype dt) {
    c->stats.calls[op]++;
    c->stats.bytes[op] += cost_bytes(op, (uint64_t)c->size, (uint64_t)count * llm4d_comm_dtype_size(dt));
}

static llm4d_code check_count(llm4d_comm *c, const char *what, size_t count, llm4d_comm_dtype dt, int reduce,
                              llm4d_err *err) {
    LLM4D_ASSERT(dt >= 0 && dt < LLM4D_COMM_NDTYPES, "%s on %s: dtype %d", what, c->name, (int)dt);
    LLM4D_ASSERT(!reduce || dt != LLM4D_COMM_BYTE, "%s on %s: raw bytes cannot be summed", what, c->name);
    if (count > (size_t)INT_MAX)
        return llm4d_fail(err, LLM4D_EINTERNAL,
                          "%s on the %s group: %zu elements exceed MPI's limit of %d per call; split the buffer "
                          "into buckets",
                          what, c->name, count, INT_MAX);
    return LLM4D_OK;
}

static void check_peer(const llm4d_comm *c, const char *what, int peer) {
    LLM4D_ASSERT(peer >= 0 && peer < c->size, "%s on %s: rank %d outside a group of %d", what, c->name, peer,
                 c->size);
}

static void start_req(llm4d_comm *c, llm4d_comm_req *req) {
    LLM4D_ASSERT(req != NULL && req->comm == NULL, "request on %s still outstanding (wait on it before reuse)",
                 c->name);
    memset(req, 0, sizeof *req);
}

/* Fault injection (core/fault.h): LLM4D_FAULT=collective@K makes the first collective operation of the K-th training
 * step this process runs fail on this rank (every rank, or LLM4D_FAULT_RANK's), as a broken link or a dead peer
 * would: the caller sees an I/O error from the operation, as from the backend. The trainer resets the groups'
 * statistics once at the start of every step, and that call is the step count here. The state is process-wide, and
 * has to be: "the K-th step" spans every group of the process (world, dp, sharding, data ...), which share nothing
 * a counter could live in without changing the communicator's structure; it is set once from the environment and
 * only the thread that calls MPI (MPI_THREAD_FUNNELED) touches it. */
static struct {
    int init;           /* LLM4D_FAULT read (at the first step) */
    llm4d_code bad;     /* a malformed LLM4D_FAULT: reported by the first collective */
    llm4d_err bad_err;
    llm4d_fault f;
    long long steps;    /* steps started */
    int fired;
} comm_fault;

static void fault_step(int world_rank) {
    if (!comm_fault.init) {
        comm_fault.init = 1;
        comm_fault.bad = llm4d_fault_from_env(&comm_fault.f, world_rank, &comm_fault.bad_err);
    }
    comm_fault.steps++;
}

static llm4d_code fault_check(llm4d_comm *c, const char *what, llm4d_err *err) {
    if (comm_fault.bad != LLM4D_OK) {
        if (err) *err = comm_fault.bad_err;
        return comm_fault.bad;
    }
    if (comm_fault.f.op != LLM4D_FAULT_COLLECTIVE || comm_fault.fired || comm_fault.steps != comm_fault.f.at)
        return LLM4D_OK;
    comm_fault.fired = 1;
    llm4d_fail(err, LLM4D_EIO, "%s (injected at step %lld by LLM4D_FAULT=%s)", strerror(comm_fault.f.error),
               comm_fault.steps, comm_fault.f.spec);
    return llm4d_wrap(err, "%s on the %s group (rank %d of %d)", what, c->name, c->rank, c->size);
}

/* Wrap a backend error with the operation and group, so the user sees which collective failed where. */
static llm4d_code done(llm4d_comm *c, const char *what, llm4d_code rc, double t0, llm4d_err *err) {
    c->stats.blocked_s += llm4d_now() - t0;
    if (rc != LLM4D_OK) return llm4d_wrap(err, "%s on the %s group (rank %d of %d)", what, c->name, c->rank,
                                          c->size);
    return LLM4D_OK;
}

llm4d_code llm4d_comm_barrier(llm4d_comm *c, llm4d_err *err) {
    LLM4D_TRY(fault_check(c, "barrier", err));
    double t0 = llm4d_now();
    c->stats.calls[LLM4D_COMM_OP_BARRIER]++;
    return done(c, "barrier", c->ops->barrier(c, err), t0, err);
}

llm4d_code llm4d_comm_allreduce(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt, llm4d_err *err) {
    LLM4D_TRY(check_count(c, "allreduce", count, dt, 1, err));
    LLM4D_TRY(fault_check(c, "allreduce", err));
    double t0 = llm4d_now();
    account(c, LLM4D_COMM_OP_ALLREDUCE, count, dt);
    return done(c, "allreduce", c->ops->allreduce(c, buf, count, dt, err), t0, err);
}

llm4d_code llm4d_comm_iallreduce(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt, llm4d_comm_req *req,
                                 llm4d_err *err) {
    LLM4D_TRY(check_count(c, "iallreduce", count, dt, 1, err));
    LLM4D_TRY(fault_check(c, "iallreduce", err));
    start_req(c, req);
    double t0 = llm4d_now();
    account(c, LLM4D_COMM_OP_ALLREDUCE, count, dt);
    llm4d_code rc = c->ops->iallreduce(c, buf, count, dt, req, err);
    if (rc == LLM4D_OK) req->comm = c;
    return done(c, "iallreduce", rc, t0, err);
}

static void check_disjoint(const llm4d_comm *c, const char *what, const void *a, size_t a_bytes, const void *b,
                           size_t b_bytes) {
    const char *pa = a, *pb = b;
    LLM4D_ASSERT(pa + a_bytes <= pb || pb + b_bytes <= pa, "%s on %s: send and recv buffers overlap", what,
                 c->name);
}

llm4d_code llm4d_comm_reduce_scatter(llm4d_comm *c, const void *send, void *recv, size_t recv_count,
                                     llm4d_comm_dtype dt, llm4d_err *err) {
    LLM4D_TRY(check_count(c, "reduce_scatter", recv_count, dt, 1, err));
    LLM4D_TRY(fault_check(c, "reduce_scatter", err));
    size_t esz = llm4d_comm_dtype_size(dt);
    check_disjoint(c, "reduce_scatter", send, recv_count * esz * (size_t)c->size, recv, recv_count * esz);
    double t0 = llm4d_now();
    account(c, LLM4D_COMM_OP_REDUCE_SCATTER, recv_count, dt);
    return done(c, "reduce_scatter", c->ops->reduce_scatter(c, send, recv, recv_count, dt, err), t0, err);
}

llm4d_code llm4d_comm_ireduce_scatter(llm4d_comm *c, const void *send, void *recv, size_t recv_count,
                                      llm4d_comm_dtype dt, llm4d_comm_req *req, llm4d_err *err) {
    LLM4D_TRY(check_count(c, "ireduce_scatter", recv_count, dt, 1, err));
    LLM4D_TRY(fault_check(c, "ireduce_scatter", err));
    size_t esz = llm4d_comm_dtype_size(dt);
    check_disjoint(c, "ireduce_scatter", send, recv_count * esz * (size_t)c->size, recv, recv_count * esz);
    start_req(c, req);
    double t0 = llm4d_now();
    account(c, LLM4D_COMM_OP_REDUCE_SCATTER, recv_count, dt);
    llm4d_code rc = c->ops->ireduce_scatter(c, send, recv, recv_count, dt, req, err);
    if (rc == LLM4D_OK) req->comm = c;
    return done(c, "ireduce_scatter", rc, t0, err);
}

/* send may alias recv's own block (in place) but not partly overlap it. */
static void check_gather_alias(const llm4d_comm *c, const char *what, const void *send, const void *recv,
                               size_t send_count, llm4d_comm_dtype dt) {
    size_t block = send_count * llm4d_comm_dtype_size(dt);
    const char *own = (const char *)recv + (size_t)c->rank * block;
    if ((const char *)send == own) return;
    check_disjoint(c, what, send, block, recv, block * (size_t)c->size);
}

llm4d_code llm4d_comm_allgather(llm4d_comm *c, const void *send, void *recv, size_t send_count,
                                llm4d_comm_dtype dt, llm4d_err *err) {
    LLM4D_TRY(check_count(c, "allgather", send_count, dt, 0, err));
    LLM4D_TRY(fault_check(c, "allgather", err));
    check_gather_alias(c, "allgather", send, recv, send_count, dt);
    double t0 = llm4d_now();
    account(c, LLM4D_COMM_OP_ALLGATHER, send_count, dt);
    return done(c, "allgather", c->ops->allgather(c, send, recv, send_count, dt, err), t0, err);
}

llm4d_code llm4d_comm_iallgather(llm4d_comm *c, const void *send, void *recv, size_t send_count,
                                 llm4d_comm_dtype dt, llm4d_comm_req *req, llm4d_err *err) {
    LLM4D_TRY(check_count(c, "iallgather", send_count, dt, 0, err));
    LLM4D_TRY(fault_check(c, "iallgather", err));
    check_gather_alias(c, "iallgather", send, recv, send_count, dt);
    start_req(c, req);
    double t0 = llm4d_now();
    account(c, LLM4D_COMM_OP_ALLGATHER, send_count, dt);
    llm4d_code rc = c->ops->iallgather(c, send, recv, send_count, dt, req, err);
    if (rc == LLM4D_OK) req->comm = c;
    return done(c, "iallgather", rc, t0, err);
}

llm4d_code llm4d_comm_broadcast(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt, int root,
                                llm4d_err *err) {
    LLM4D_TRY(check_count(c, "broadcast", count, dt, 0, err));
    LLM4D_TRY(fault_check(c, "broadcast", err));
    check_peer(c, "broadcast root", root);
    double t0 = llm4d_now();
    account(c, LLM4D_COMM_OP_BROADCAST, count, dt);
    return done(c, "broadcast", c->ops->broadcast(c, buf, count, dt, root, err), t0, err);
}

llm4d_code llm4d_comm_send(llm4d_comm *c, const void *buf, size_t count, llm4d_comm_dtype dt, int peer, int tag,
                           llm4d_err *err) {
    LLM4D_TRY(check_count(c, "send", count, dt, 0, err));
    LLM4D_TRY(fault_check(c, "send", err));
    check_peer(c, "send", peer);
    LLM4D_ASSERT(tag >= 0, "send on %s: tag %d", c->name, tag);
    double t0 = llm4d_now();
    account(c, LLM4D_COMM_OP_SEND, count, dt);
    return done(c, "send", c->ops->send(c, buf, count, dt, peer, tag, err), t0, err);
}

llm4d_code llm4d_comm_recv(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt, int peer, int tag,
                           llm4d_err *err) {
    LLM4D_TRY(check_count(c, "recv", count, dt, 0, err));
    LLM4D_TRY(fault_check(c, "recv", err));
    check_peer(c, "recv", peer);
    LLM4D_ASSERT(tag >= 0, "recv on %s: tag %d", c->name, tag);
    double t0 = llm4d_now();
    account(c, LLM4D_COMM_OP_RECV, count, dt);
    return done(c, "recv", c->ops->recv(c, buf, count, dt, peer, tag, err), t0, err);
}

llm4d_code llm4d_comm_isend(llm4d_comm *c, const void *buf, size_t count, llm4d_comm_dtype dt, int peer, int tag,
                            llm4d_comm_req *req, llm4d_err *err) {
    LLM4D_TRY(check_count(c, "isend", count, dt, 0, err));
    LLM4D_TRY(fault_check(c, "isend", err));
    check_peer(c, "isend", peer);
    LLM4D_ASSERT(tag >= 0, "isend on %s: tag %d", c->name, tag);
    start_req(c, req);
    double t0 = llm4d_now();
    account(c, LLM4D_COMM_OP_SEND, count, dt);
    llm4d_code rc = c->ops->isend(c, buf, count, dt, peer, tag, req, err);
    if (rc == LLM4D_OK) req->comm = c;
    return done(c, "isend", rc, t0, err);
}

llm4d_code llm4d_comm_irecv(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt, int peer, int tag,
                            llm4d_comm_req *req, llm4d_err *err) {
    LLM4D_TRY(check_count(c, "irecv", count, dt, 0, err));
    LLM4D_TRY(fault_check(c, "irecv", err));
    check_peer(c, "irecv", peer);
    LLM4D_ASSERT(tag >= 0, "irecv on %s: tag %d", c->name, tag);
    start_req(c, req);
    double t0 = llm4d_now();
    account(c, LLM4D_COMM_OP_RECV, count, dt);
    llm4d_code rc = c->ops->irecv(c, buf, count, dt, peer, tag, req, err);
    if (rc == LLM4D_OK) req->comm = c;
    return done(c, "irecv", rc, t0, err);
}

llm4d_code llm4d_comm_test(llm4d_comm_req *req, int *is_done, llm4d_err *err) {
    *is_done = 1;
    if (!req || !req->comm) return LLM4D_OK;
    llm4d_comm *c = req->comm;
    double t0 = llm4d_now();
    *is_done = 0;
    llm4d_code rc = c->ops->test(c, req, is_done, err);
    if (rc != LLM4D_OK || *is_done) req->comm = NULL;
    return done(c, "test", rc, t0, err);
}

llm4d_code llm4d_comm_wait(llm4d_comm_req *req, llm4d_err *err) {
    if (!req || !req->comm) return LLM4D_OK;
    llm4d_comm *c = req->comm;
    double t0 = llm4d_now();
    llm4d_code rc = c->ops->wait(c, req, err);
    req->comm = NULL;
    return done(c, "wait", rc, t0, err);
}

llm4d_code llm4d_comm_waitall(llm4d_comm_req *reqs, int n, llm4d_err *err) {
    llm4d_code first = LLM4D_OK;
    for (int i = 0; i < n; i++) { /* wait on every one even after a failure: none may stay pending */
        llm4d_err e = {0};
        llm4d_code rc = llm4d_comm_wait(&reqs[i], &e);
        if (rc != LLM4D_OK && first == LLM4D_OK) {
            first = rc;
            if (err) *err = e;
        }
    }
    return first;
}

void llm4d_comm_abort(llm4d_comm *c, int code) {
    fflush(stdout);
    fflush(stderr);
    c->ops->abort(c, code);
    exit(code); /* a backend's abort should not return; make sure the process ends anyway */
}

llm4d_code llm4d_comm_split(llm4d_comm *c, int color, int key, const char *name, llm4d_comm **out,
                            llm4d_err *err) {
    *out = NULL;
    return c->ops->split(c, color, key, name, out, err);
}

void llm4d_comm_destroy(llm4d_comm *c) {
    if (c) c->ops->destroy(c);
}

llm4d_code llm4d_comm_groups_create(llm4d_comm_groups *g, llm4d_comm *world, const llm4d_topology *t,
                                    llm4d_err *err) {
    memset(g, 0, sizeof *g);
    if (world->size != t->world_size || world->rank != t->rank)
        return llm4d_fail(err, LLM4D_EINTERNAL, "topology for rank %d of %d used on world rank %d of %d", t->rank,
                          t->world_size, world->rank, world->size);
    g->world = world;
    for (int a = 0; a < LLM4D_NAXES; a++) {
        llm4d_code rc = llm4d_comm_split(world, llm4d_topology_group_id(t, (llm4d_axis)a), t->index[a],
                                         llm4d_axis_name((llm4d_axis)a), &g->axis[a], err);
        if (rc != LLM4D_OK) {
            llm4d_comm_groups_destroy(g);
            return llm4d_wrap(err, "creating the %s group", llm4d_axis_name((llm4d_axis)a));
        }
        LLM4D_ASSERT(g->axis[a]->size == t->degree[a] && g->axis[a]->rank == t->index[a],
                     "%s group: rank %d of %d, topology says %d of %d", llm4d_axis_name((llm4d_axis)a),
                     g->axis[a]->rank, g->axis[a]->size, t->index[a], t->degree[a]);
    }
    llm4d_code rc = llm4d_comm_split(world, llm4d_topology_data_group_id(t), t->data_rank, "data", &g->data, err);
    if (rc != LLM4D_OK) {
        llm4d_comm_groups_destroy(g);
        return llm4d_wrap(err, "creating the data (dp x sharding) group");
    }
    LLM4D_ASSERT(g->data->size == t->data_world && g->data->rank == t->data_rank,
                 "data group: rank %d of %d, topology says %d of %d", g->data->rank, g->data->size, t->data_rank,
                 t->data_world);
    return LLM4D_OK;
}

void llm4d_comm_groups_destroy(llm4d_comm_groups *g) {
    for (int a = 0; a < LLM4D_NAXES; a++) llm4d_comm_destroy(g->axis[a]);
    llm4d_comm_destroy(g->data);
    memset(g, 0, sizeof *g);
}

llm4d_comm_stats llm4d_comm_groups_stats(const llm4d_comm_groups *g) {
    llm4d_comm_stats s = {0};
    if (g->world) llm4d_comm_stats_add(&s, &g->world->stats);
    for (int a = 0; a < LLM4D_NAXES; a++)
        if (g->axis[a]) llm4d_comm_stats_add(&s, &g->axis[a]->stats);
    if (g->data) llm4d_comm_stats_add(&s, &g->data->stats);
    return s;
}

void llm4d_comm_groups_stats_reset(llm4d_comm_groups *g) {
    if (g->world) fault_step(g->world->rank); /* a step starts (see fault_check) */
    if (g->world) llm4d_comm_stats_reset(g->world);
    for (int a = 0; a < LLM4D_NAXES; a++)
        if (g->axis[a]) llm4d_comm_stats_reset(g->axis[a]);
    if (g->data) llm4d_comm_stats_reset(g->data);
}
