/* comm.c — the backend-neutral half of the communicator (see comm.h): argument checks, the byte and time
 * accounting every backend shares, and the groups of a topology made by splitting the world. Keeping the
 * accounting here means a new backend (NCCL) is measured exactly like MPI without repeating the formulas. */
#include "comm/comm.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <time.h>

#include "comm/comm_shm.h"
#include "comm/comm_trace.h"
#include "comm/host_check.h"
#include "core/fault.h"
#include "core/timer.h"

size_t llm4d_comm_dtype_size(llm4d_comm_dtype dt) {
    switch (dt) {
    case LLM4D_COMM_F32: return 4;
    case LLM4D_COMM_F64: return 8;
    case LLM4D_COMM_I64: return 8;
    case LLM4D_COMM_BYTE: return 1;
    case LLM4D_COMM_BF16: return 2;
    default: LLM4D_ASSERT(0, "dtype %d", (int)dt);
    }
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
    llm4d_comm_trace_bytes(c, (uint64_t)count * llm4d_comm_dtype_size(dt));
}

/* reduce: 0 data movement, 1 a sum, 2 a maximum */
static llm4d_code check_count(llm4d_comm *c, const char *what, size_t count, llm4d_comm_dtype dt, int reduce,
                              llm4d_err *err) {
    LLM4D_ASSERT(dt >= 0 && dt < LLM4D_COMM_NDTYPES, "%s on %s: dtype %d", what, c->name, (int)dt);
    LLM4D_ASSERT(!reduce || dt != LLM4D_COMM_BYTE, "%s on %s: raw bytes cannot be summed", what, c->name);
    LLM4D_ASSERT(reduce != 2 || dt != LLM4D_COMM_BF16, "%s on %s: bf16 payloads are summed only", what, c->name);
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

/* Fault injection (core/fault.h): LLM4D_FAULT=collective@K makes the first collective operation of training step K
 * fail on this rank (every rank, or LLM4D_FAULT_RANK's), as a broken link or a dead peer would: the caller sees an
 * I/O error from the operation, as from the backend. The state lives in the process's watch (watch.h), which
 * every group shares and which knows the step; read from the environment at the first operation. */
static llm4d_code fault_check(llm4d_comm *c, const char *what, llm4d_err *err) {
    llm4d_comm_watch *w = c->watch;
    if (!w) return LLM4D_OK;
    if (!w->fault_read) {
        w->fault_read = 1;
        w->fault_rc = llm4d_fault_from_env(&w->fault, c->world_rank, &w->fault_err);
    }
    if (w->fault_rc != LLM4D_OK) {
        if (err) *err = w->fault_err;
        return w->fault_rc;
    }
    if (w->fault.op == LLM4D_FAULT_CRASH && w->step == w->fault.at) {
        fflush(NULL);
        raise(SIGKILL); /* a machine dying under the rank: no message, no exit code (tests of restarts) */
    }
    if (w->fault.op != LLM4D_FAULT_COLLECTIVE || w->fault_fired || w->step != w->fault.at) return LLM4D_OK;
    w->fault_fired = 1;
    llm4d_fail(err, LLM4D_EIO, "%s (injected at step %lld by LLM4D_FAULT=%s)", strerror(w->fault.error),
               (long long)w->step, w->fault.spec);
    return llm4d_wrap(err, "%s on the %s group (rank %d of %d)", what, c->name, c->rank, c->size);
}

/* Wrap a backend error with the operation and group, so the user sees which collective failed where. */
static llm4d_code done(llm4d_comm *c, const char *what, llm4d_code rc, double t0, llm4d_err *err) {
    c->stats.blocked_s += llm4d_now() - t0;
    llm4d_comm_trace(c, what, t0);
    if (rc == LLM4D_ETIMEOUT) return rc; /* the watchdog's line already names the operation and the group */
    if (rc != LLM4D_OK) return llm4d_wrap(err, "%s on the %s group (rank %d of %d)", what, c->name, c->rank,
                                          c->size);
    return LLM4D_OK;
}

/* ---- routes ---- */

/* The method table that carries an operation: the group's path when it takes it (comm_shm.h), else the backend. */
static const llm4d_comm_ops *route(const llm4d_comm *c, llm4d_comm_op op, llm4d_comm_dtype dt, llm4d_comm_reduction red,
                                   size_t count) {
    return c->path && llm4d_shm_takes(c, op, dt, red, count) ? c->path : c->ops;
}

static const llm4d_comm_ops *ops_of(const llm4d_comm *c, const llm4d_comm_req *req) {
    return req->via ? req->via : c->ops;
}

/* ---- the watchdog (watch.h) ---- */

/* Whether waits on c run against the watchdog's deadline (a group of one never waits for anyone). */
static int watching(const llm4d_comm *c) { return c->watch && c->watch->timeout_s > 0 && c->size > 1; }

/* Whether a blocking operation runs as a started one and a polled wait (the deadline, or paths to keep moving).
 * Every member of a group must decide alike: MPI does not match a blocking collective with a non-blocking one, so
 * with paths it is whether the process has them (the same on every member), not whether this rank's are busy now
 * (a rank whose shared-memory sums had finished once called MPI_Allreduce while its peer, still moving its own,
 * had started MPI_Iallreduce: both waited for ever; test_comm_shm's in-flight case, 1 run in 12). */
static int polled(const llm4d_comm *c) { return watching(c) || c->hub != NULL; }

/* An operation starts: in the flight recorder and on the progress board. Collectives count per group. */
static uint64_t begin(llm4d_comm *c, const char *what, int peer, size_t count) {
    if (!c->watch) return 0;
    return llm4d_watch_begin(c->watch, what, c->name, c->key, peer < 0 ? ++c->seq : 0, peer, count);
}

static void end(llm4d_comm *c, uint64_t num) {
    if (c->watch && num) llm4d_watch_end(c->watch, num);
}

static llm4d_code timed_out(llm4d_comm *c, const llm4d_comm_req *req, double waited, llm4d_err *err) {
    llm4d_comm_watch *w = c->watch;
    const llm4d_flight *f = &w->ring[req->flight % LLM4D_FLIGHT_N];
    const int known = f->num == req->flight;
    char who[640], ranks[160];
    llm4d_watch_report(w, c->key, known ? f->seq : 0, known ? f->peer : -1, c->members, c->size, who, sizeof who);
    size_t k = 0;
    for (int i = 0; i < c->size && k < sizeof ranks; i++)
        k += (size_t)snprintf(ranks + k, sizeof ranks - k, "%s%d", i ? ", " : "", c->members[i]);
    char what[96] = "an operation";
    if (known && f->peer >= 0)
        snprintf(what, sizeof what, "%s %s rank %d", f->op, strstr(f->op, "recv") ? "from" : "to", f->peer);
    else if (known)
        snprintf(what, sizeof what, "%s #%llu", f->op, (unsigned long long)f->seq);
    return llm4d_fail(err, LLM4D_ETIMEOUT,
                      "%s on the %s group (world ranks [%s]) at step %lld has not completed after %.0f s "
                      "(comm_timeout %g s): %s; this rank's last operations are in its log", what, c->name, ranks,
                      (long long)w->step, waited, w->timeout_s, who);
}

/* Poll a started operation until it completes or, watched, its deadline (timeout_s after it started) passes; every
 * poll also moves the process's paths (a peer may wait for this rank's part of one of their operations before it
 * can answer the operation waited on). */
static llm4d_code wait_watched(llm4d_comm *c, llm4d_comm_req *req, llm4d_err *err) {
    const int watched = watching(c);
    const llm4d_flight *f = c->watch ? &c->watch->ring[req->flight % LLM4D_FLIGHT_N] : NULL;
    const double start = f && f->num == req->flight ? f->t_start : llm4d_now();
    const llm4d_comm_ops *o = ops_of(c, req);
    for (unsigned spin = 0;; spin++) {
        int is_done = 0;
        if (c->hub) LLM4D_TRY(llm4d_shm_progress_all(c->hub, 1, err));
        LLM4D_TRY(o->test(c, req, &is_done, err));
        if (is_done) {
            end(c, req->flight);
            return LLM4D_OK;
        }
        const double waited = llm4d_now() - start;
        if (watched && waited > c->watch->timeout_s) return timed_out(c, req, waited, err);
        if (spin > 1000) { /* a long wait: let the peers' processes have this core (oversubscribed jobs) */
            struct timespec ts = {0, 50000};
            nanosleep(&ts, NULL);
        }
    }
}

/* The end of a blocking operation started non-blocking: wait for it under the watchdog. */
static llm4d_code finish(llm4d_comm *c, const char *what, llm4d_code rc, llm4d_comm_req *req, uint64_t num, double t0,
                         llm4d_err *err) {
    if (rc == LLM4D_OK) {
        req->comm = c;
        req->flight = num;
        rc = wait_watched(c, req, err);
    }
    return done(c, what, rc, t0, err);
}

/* The end of a blocking backend call (no watchdog, or no non-blocking form). */
static llm4d_code finish_blocking(llm4d_comm *c, const char *what, llm4d_code rc, uint64_t num, double t0,
                                  llm4d_err *err) {
    if (rc == LLM4D_OK) end(c, num);
    return done(c, what, rc, t0, err);
}

/* The start of a non-blocking operation: the request remembers the operation for its wait. */
/* The operations outstanding on a communicator, for llm4d_comm_progress (a request the list cannot hold for want of
 * memory is only left out of progress: its wait still completes it). */
static void track(llm4d_comm *c, llm4d_comm_req *req) {
    if (c->n_pending == c->cap_pending) {
        const int cap = c->cap_pending ? 2 * c->cap_pending : 16;
        llm4d_comm_req **p = realloc(c->pending, (size_t)cap * sizeof *p);
        if (!p) return;
        c->pending = p;
        c->cap_pending = cap;
    }
    c->pending[c->n_pending++] = req;
}

static void untrack(llm4d_comm *c, const llm4d_comm_req *req) {
    for (int i = 0; i < c->n_pending; i++)
        if (c->pending[i] == req) {
            c->pending[i] = c->pending[--c->n_pending];
            return;
        }
}

static llm4d_code started(llm4d_comm *c, const char *what, llm4d_code rc, llm4d_comm_req *req, uint64_t num, double t0,
                          llm4d_err *err) {
    if (rc == LLM4D_OK) {
        req->comm = c;
        req->flight = num;
        track(c, req);
    }
    return done(c, what, rc, t0, err);
}

llm4d_code llm4d_comm_barrier(llm4d_comm *c, llm4d_err *err) {
    LLM4D_TRY(fault_check(c, "barrier", err));
    double t0 = llm4d_now();
    c->stats.calls[LLM4D_COMM_OP_BARRIER]++;
    const uint64_t num = begin(c, "barrier", -1, 0);
    if (polled(c) && c->ops->ibarrier) {
        llm4d_comm_req r = {0};
        return finish(c, "barrier", c->ops->ibarrier(c, &r, err), &r, num, t0, err);
    }
    return finish_blocking(c, "barrier", c->ops->barrier(c, err), num, t0, err);
}

static llm4d_code allreduce(llm4d_comm *c, const char *what, void *buf, size_t count, llm4d_comm_dtype dt,
                            llm4d_comm_reduction op, llm4d_err *err) {
    LLM4D_TRY(check_count(c, what, count, dt, op == LLM4D_COMM_MAX ? 2 : 1, err));
    LLM4D_TRY(fault_check(c, what, err));
    double t0 = llm4d_now();
    account(c, LLM4D_COMM_OP_ALLREDUCE, count, dt);
    const uint64_t num = begin(c, what, -1, count);
    const llm4d_comm_ops *o = route(c, LLM4D_COMM_OP_ALLREDUCE, dt, op, count);
    if (polled(c) || o != c->ops) {
        llm4d_comm_req r = {.via = o};
        return finish(c, what, o->iallreduce(c, buf, count, dt, op, &r, err), &r, num, t0, err);
    }
    return finish_blocking(c, what, c->ops->allreduce(c, buf, count, dt, op, err), num, t0, err);
}

llm4d_code llm4d_comm_allreduce(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt, llm4d_err *err) {
    return allreduce(c, "allreduce", buf, count, dt, LLM4D_COMM_SUM, err);
}

llm4d_code llm4d_comm_allreduce_max(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt, llm4d_err *err) {
    return allreduce(c, "allreduce (max)", buf, count, dt, LLM4D_COMM_MAX, err);
}

llm4d_code llm4d_comm_iallreduce(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt, llm4d_comm_req *req,
                                 llm4d_err *err) {
    LLM4D_TRY(check_count(c, "iallreduce", count, dt, 1, err));
    LLM4D_TRY(fault_check(c, "iallreduce", err));
    start_req(c, req);
    double t0 = llm4d_now();
    account(c, LLM4D_COMM_OP_ALLREDUCE, count, dt);
    const uint64_t num = begin(c, "iallreduce", -1, count);
    req->via = route(c, LLM4D_COMM_OP_ALLREDUCE, dt, LLM4D_COMM_SUM, count);
    return started(c, "iallreduce", req->via->iallreduce(c, buf, count, dt, LLM4D_COMM_SUM, req, err), req, num, t0,
                   err);
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
    const uint64_t num = begin(c, "reduce_scatter", -1, recv_count);
    const llm4d_comm_ops *o = route(c, LLM4D_COMM_OP_REDUCE_SCATTER, dt, LLM4D_COMM_SUM, recv_count);
    if (polled(c) || o != c->ops) {
        llm4d_comm_req r = {.via = o};
        return finish(c, "reduce_scatter", o->ireduce_scatter(c, send, recv, recv_count, dt, &r, err), &r, num, t0,
                      err);
    }
    return finish_blocking(c, "reduce_scatter", c->ops->reduce_scatter(c, send, recv, recv_count, dt, err), num, t0,
                           err);
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
    const uint64_t num = begin(c, "ireduce_scatter", -1, recv_count);
    req->via = route(c, LLM4D_COMM_OP_REDUCE_SCATTER, dt, LLM4D_COMM_SUM, recv_count);
    return started(c, "ireduce_scatter", req->via->ireduce_scatter(c, send, recv, recv_count, dt, req, err), req, num,
                   t0, err);
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
    const uint64_t num = begin(c, "allgather", -1, send_count);
    const llm4d_comm_ops *o = route(c, LLM4D_COMM_OP_ALLGATHER, dt, LLM4D_COMM_SUM, send_count);
    if (polled(c) || o != c->ops) {
        llm4d_comm_req r = {.via = o};
        return finish(c, "allgather", o->iallgather(c, send, recv, send_count, dt, &r, err), &r, num, t0, err);
    }
    return finish_blocking(c, "allgather", c->ops->allgather(c, send, recv, send_count, dt, err), num, t0, err);
}

llm4d_code llm4d_comm_iallgather(llm4d_comm *c, const void *send, void *recv, size_t send_count,
                                 llm4d_comm_dtype dt, llm4d_comm_req *req, llm4d_err *err) {
    LLM4D_TRY(check_count(c, "iallgather", send_count, dt, 0, err));
    LLM4D_TRY(fault_check(c, "iallgather", err));
    check_gather_alias(c, "iallgather", send, recv, send_count, dt);
    start_req(c, req);
    double t0 = llm4d_now();
    account(c, LLM4D_COMM_OP_ALLGATHER, send_count, dt);
    const uint64_t num = begin(c, "iallgather", -1, send_count);
    req->via = route(c, LLM4D_COMM_OP_ALLGATHER, dt, LLM4D_COMM_SUM, send_count);
    return started(c, "iallgather", req->via->iallgather(c, send, recv, send_count, dt, req, err), req, num, t0, err);
}

llm4d_code llm4d_comm_broadcast(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt, int root,
                                llm4d_err *err) {
    LLM4D_TRY(check_count(c, "broadcast", count, dt, 0, err));
    LLM4D_TRY(fault_check(c, "broadcast", err));
    check_peer(c, "broadcast root", root);
    double t0 = llm4d_now();
    account(c, LLM4D_COMM_OP_BROADCAST, count, dt);
    const uint64_t num = begin(c, "broadcast", -1, count);
    if (polled(c) && c->ops->ibroadcast) {
        llm4d_comm_req r = {0};
        return finish(c, "broadcast", c->ops->ibroadcast(c, buf, count, dt, root, &r, err), &r, num, t0, err);
    }
    return finish_blocking(c, "broadcast", c->ops->broadcast(c, buf, count, dt, root, err), num, t0, err);
}

llm4d_code llm4d_comm_send(llm4d_comm *c, const void *buf, size_t count, llm4d_comm_dtype dt, int peer, int tag,
                           llm4d_err *err) {
    LLM4D_TRY(check_count(c, "send", count, dt, 0, err));
    LLM4D_TRY(fault_check(c, "send", err));
    check_peer(c, "send", peer);
    LLM4D_ASSERT(tag >= 0, "send on %s: tag %d", c->name, tag);
    double t0 = llm4d_now();
    account(c, LLM4D_COMM_OP_SEND, count, dt);
    const uint64_t num = begin(c, "send", peer, count);
    if (polled(c)) {
        llm4d_comm_req r = {0};
        return finish(c, "send", c->ops->isend(c, buf, count, dt, peer, tag, &r, err), &r, num, t0, err);
    }
    return finish_blocking(c, "send", c->ops->send(c, buf, count, dt, peer, tag, err), num, t0, err);
}

llm4d_code llm4d_comm_recv(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt, int peer, int tag,
                           llm4d_err *err) {
    LLM4D_TRY(check_count(c, "recv", count, dt, 0, err));
    LLM4D_TRY(fault_check(c, "recv", err));
    check_peer(c, "recv", peer);
    LLM4D_ASSERT(tag >= 0, "recv on %s: tag %d", c->name, tag);
    double t0 = llm4d_now();
    account(c, LLM4D_COMM_OP_RECV, count, dt);
    const uint64_t num = begin(c, "recv", peer, count);
    if (polled(c)) {
        llm4d_comm_req r = {0};
        return finish(c, "recv", c->ops->irecv(c, buf, count, dt, peer, tag, &r, err), &r, num, t0, err);
    }
    return finish_blocking(c, "recv", c->ops->recv(c, buf, count, dt, peer, tag, err), num, t0, err);
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
    const uint64_t num = begin(c, "isend", peer, count);
    return started(c, "isend", c->ops->isend(c, buf, count, dt, peer, tag, req, err), req, num, t0, err);
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
    const uint64_t num = begin(c, "irecv", peer, count);
    return started(c, "irecv", c->ops->irecv(c, buf, count, dt, peer, tag, req, err), req, num, t0, err);
}

llm4d_code llm4d_comm_test(llm4d_comm_req *req, int *is_done, llm4d_err *err) {
    *is_done = 1;
    if (!req || !req->comm) return LLM4D_OK;
    llm4d_comm *c = req->comm;
    double t0 = llm4d_now();
    *is_done = 0;
    llm4d_code rc = ops_of(c, req)->test(c, req, is_done, err);
    if (rc == LLM4D_OK && *is_done) end(c, req->flight);
    if (rc != LLM4D_OK || *is_done) {
        untrack(c, req);
        req->comm = NULL;
        llm4d_comm_dev_finish(req, rc == LLM4D_OK); /* a staged operation's result to the device */
    }
    return done(c, "test", rc, t0, err);
}

llm4d_code llm4d_comm_progress(llm4d_comm *c, llm4d_err *err) {
    if (c->hub) LLM4D_TRY(llm4d_shm_progress_all(c->hub, 0, err));
    /* downwards: a request seen complete leaves the list, the last one taking its place */
    for (int i = c->n_pending - 1; i >= 0; i--) {
        if (i >= c->n_pending) continue;
        int is_done = 0;
        LLM4D_TRY(llm4d_comm_test(c->pending[i], &is_done, err));
    }
    /* the data plane's collectives on the group's NCCL communicator are outstanding there (comm/nccl/) */
    if (c->nccl) LLM4D_TRY(llm4d_comm_progress(c->nccl, err));
    return LLM4D_OK;
}

llm4d_code llm4d_comm_wait(llm4d_comm_req *req, llm4d_err *err) {
    if (!req || !req->comm) return LLM4D_OK;
    llm4d_comm *c = req->comm;
    double t0 = llm4d_now();
    llm4d_code rc;
    if (polled(c)) {
        rc = wait_watched(c, req, err);
    } else {
        rc = ops_of(c, req)->wait(c, req, err);
        if (rc == LLM4D_OK) end(c, req->flight);
    }
    untrack(c, req);
    req->comm = NULL;
    llm4d_comm_dev_finish(req, rc == LLM4D_OK);
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

/* The group's key on progress boards: its name, first member and size (the same string on every member). */
static void set_key(llm4d_comm *c) {
    snprintf(c->key, sizeof c->key, "%s:%d/%d", c->name, c->members[0], c->size);
}

llm4d_code llm4d_comm_watch_world(llm4d_comm *world, llm4d_comm_watch *watch, llm4d_err *err) {
    free(world->members);
    world->members = malloc((size_t)world->size * sizeof *world->members);
    if (!world->members) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    for (int i = 0; i < world->size; i++) world->members[i] = i;
    world->world_rank = world->rank;
    world->watch = watch;
    set_key(world);
    return LLM4D_OK;
}

llm4d_code llm4d_comm_split(llm4d_comm *c, int color, int key, const char *name, llm4d_comm **out,
                            llm4d_err *err) {
    *out = NULL;
    LLM4D_TRY(c->ops->split(c, color, key, name, out, err));
    llm4d_comm *s = *out;
    s->dev = c->dev; /* the data plane's device too */
    const int64_t mine = c->members ? c->world_rank : c->rank; /* an unwatched world: its rank is the world rank */
    s->watch = c->watch;
    s->world_rank = (int)mine;
    s->members = malloc((size_t)s->size * sizeof *s->members);
    /* every member's world rank, for messages and the watchdog's boards (once, when the group is made) */
    int64_t *all = calloc((size_t)s->size, sizeof *all);
    llm4d_code rc = s->members && all ? s->ops->allgather(s, &mine, all, 1, LLM4D_COMM_I64, err)
                                      : llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    for (int i = 0; rc == LLM4D_OK && i < s->size; i++) s->members[i] = (int)all[i];
    free(all);
    if (rc != LLM4D_OK) {
        llm4d_comm_destroy(s);
        *out = NULL;
        return llm4d_wrap(err, "creating the %s group", name);
    }
    set_key(s);
    s->hub = c->hub; /* and chooses its path, like every member of it at the same time */
    if (s->hub && (rc = llm4d_shm_attach(s, s->hub, err)) != LLM4D_OK) {
        llm4d_comm_destroy(s);
        *out = NULL;
        return llm4d_wrap(err, "choosing the %s group's path", name);
    }
    return LLM4D_OK;
}

llm4d_code llm4d_comm_use_paths(llm4d_comm *world, const char *policy, size_t slot_bytes, int progress_thread,
                                llm4d_err *err) {
    LLM4D_ASSERT(!world->hub, "the %s group has its paths already", world->name);
    const llm4d_shm_opts o = {.enabled = strcmp(policy, "mpi") != 0, .slot_bytes = slot_bytes,
                              .progress_thread = progress_thread};
    LLM4D_TRY(llm4d_shm_hub_create(&world->hub, &o, err));
    world->owns_hub = 1;
    return llm4d_shm_attach(world, world->hub, err);
}

void llm4d_comm_destroy(llm4d_comm *c) {
    if (!c) return;
    llm4d_comm_destroy(c->nccl);
    if (c->path) llm4d_shm_detach(c);
    if (c->owns_hub) llm4d_shm_hub_destroy(c->hub);
    c->hub = NULL;
    free(c->members);
    c->members = NULL;
    free(c->pending);
    c->pending = NULL;
    c->ops->destroy(c);
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
    llm4d_comm *here = NULL;
    int same = 1; /* names hashing alike put two hosts in one group: still a bound on the ranks sharing one */
    rc = llm4d_host_split(world, &here, &same, err);
    if (rc == LLM4D_OK) g->host_rank = here->rank, g->host_ranks = here->size;
    llm4d_comm_destroy(here);
    if (rc != LLM4D_OK) {
        llm4d_comm_groups_destroy(g);
        return llm4d_wrap(err, "finding the ranks of this host");
    }
    return LLM4D_OK;
}

void llm4d_comm_groups_destroy(llm4d_comm_groups *g) {
    for (int a = 0; a < LLM4D_NAXES; a++) llm4d_comm_destroy(g->axis[a]);
    llm4d_comm_destroy(g->data);
    memset(g, 0, sizeof *g);
}

/* a group's statistics with its NCCL communicator's (the data plane's collectives go there) */
static void add_group(llm4d_comm_stats *s, const llm4d_comm *c) {
    if (!c) return;
    llm4d_comm_stats_add(s, &c->stats);
    if (c->nccl) llm4d_comm_stats_add(s, &c->nccl->stats);
}

void llm4d_comm_groups_print_paths(const llm4d_comm_groups *g, const llm4d_log *log) {
    const llm4d_comm *all[LLM4D_NAXES + 2] = {g->world, g->data};
    for (int a = 0; a < LLM4D_NAXES; a++) all[2 + a] = g->axis[a];
    for (int k = 0; k < LLM4D_NAXES + 2; k++)
        if (all[k] && all[k]->size > 1)
            llm4d_log_info(log, "comm path of the %s group (%d ranks): %s", all[k]->name, all[k]->size,
                           all[k]->path_desc[0] ? all[k]->path_desc : "MPI");
}

llm4d_comm_stats llm4d_comm_groups_stats(const llm4d_comm_groups *g) {
    llm4d_comm_stats s = {0};
    add_group(&s, g->world);
    for (int a = 0; a < LLM4D_NAXES; a++) add_group(&s, g->axis[a]);
    add_group(&s, g->data);
    return s;
}

static void reset_group(llm4d_comm *c) {
    if (!c) return;
    llm4d_comm_stats_reset(c);
    if (c->nccl) llm4d_comm_stats_reset(c->nccl);
}

void llm4d_comm_groups_stats_reset(llm4d_comm_groups *g) {
    reset_group(g->world);
    for (int a = 0; a < LLM4D_NAXES; a++) reset_group(g->axis[a]);
    reset_group(g->data);
}
