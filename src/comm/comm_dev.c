/* comm_dev.c — the communicator's data plane: collectives and transfers on tensor buffers (see comm.h).
 *
 * Four cases, decided per call:
 *   - the group has an NCCL communicator (comm/nccl/comm_nccl.c: a CUDA backend, one GPU per rank): the
 *     collectives run there, on device memory, after the producing kernels; sends and receives take the cases below;
 *   - a group of one: nothing moves; an operation that copies (reduce-scatter, all-gather out of place) is a device
 *     copy on the compute stream, so no host code touches the tensors;
 *   - the device is host memory (the cpu backends) or no device is attached: the control plane's operation on the
 *     buffers themselves, once the kernels producing them have run: no copy, no cost;
 *   - otherwise (the guard backend; a GPU under MPI): staged. The bytes to send are copied into pinned buffers of
 *     the pool on the communication stream, after the producing kernels; the operation runs on those; what is
 *     received goes back to the device when the operation completes: at once for the blocking calls, in
 *     llm4d_comm_test / llm4d_comm_wait for the non-blocking ones (llm4d_comm_dev_finish), which also return the
 *     request's buffers to the pool.
 * The pool keeps every pinned buffer it made (a step reuses the same sizes: the buckets, the gather and reduce
 * buffers, the pipeline's activations), taking the smallest free one that fits; its bytes are COMM memory. */
#include <stdlib.h>
#include <string.h>

#include "comm/comm.h"

typedef struct {
    void *p;
    size_t bytes;
    int busy;
} stage_buf;

struct llm4d_comm_device {
    llm4d_backend *be;
    llm4d_mem *mem;
    stage_buf *buf;
    int n, cap;
};

llm4d_code llm4d_comm_device_create(llm4d_comm_device **out, llm4d_backend *be, llm4d_mem *mem, llm4d_err *err) {
    *out = calloc(1, sizeof **out);
    if (!*out) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    (*out)->be = be;
    (*out)->mem = mem;
    return LLM4D_OK;
}

void llm4d_comm_device_destroy(llm4d_comm_device *d) {
    if (!d) return;
    for (int k = 0; k < d->n; k++) d->be->free_host(d->be, d->mem, LLM4D_MEM_COMM, d->buf[k].p, d->buf[k].bytes);
    free(d->buf);
    free(d);
}

void llm4d_comm_attach(llm4d_comm *c, llm4d_comm_device *d) {
    if (c) c->dev = d;
}

void llm4d_comm_groups_attach(llm4d_comm_groups *g, llm4d_comm_device *d) {
    llm4d_comm_attach(g->world, d);
    for (int a = 0; a < LLM4D_NAXES; a++) llm4d_comm_attach(g->axis[a], d);
    llm4d_comm_attach(g->data, d);
}

/* ---- the pool ---- */

static void *take(llm4d_comm_device *d, size_t bytes, llm4d_err *err) {
    int best = -1;
    for (int k = 0; k < d->n; k++)
        if (!d->buf[k].busy && d->buf[k].bytes >= bytes && (best < 0 || d->buf[k].bytes < d->buf[best].bytes))
            best = k;
    if (best < 0) {
        if (d->n == d->cap) {
            const int cap = d->cap ? 2 * d->cap : 16;
            stage_buf *b = realloc(d->buf, (size_t)cap * sizeof *b);
            if (!b) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory"), NULL;
            d->buf = b;
            d->cap = cap;
        }
        void *p = d->be->alloc_host(d->be, d->mem, LLM4D_MEM_COMM, bytes);
        if (!p) return llm4d_fail(err, LLM4D_ENOMEM, "out of pinned memory staging %zu bytes", bytes), NULL;
        d->buf[d->n] = (stage_buf){p, bytes, 0};
        best = d->n++;
    }
    d->buf[best].busy = 1;
    return d->buf[best].p;
}

static void give_back(llm4d_comm_device *d, void *p) {
    for (int k = 0; p && k < d->n; k++)
        if (d->buf[k].p == p) d->buf[k].busy = 0;
}

/* ---- the three cases ---- */

static int staged(const llm4d_comm *c) { return c->dev && !c->dev->be->host_addressable; }

/* The host may hand a buffer to the transport once the kernels writing it have run. */
static void after(const llm4d_comm *c, const llm4d_event *ready) {
    if (!c->dev) return;
    llm4d_backend *be = c->dev->be;
    if (ready) be->event_sync(be, ready);
    else be->stream_sync(be, LLM4D_STREAM_COMPUTE);
}

/* A pinned copy of bytes of device memory, made after `ready`. */
static void *stage_out(llm4d_comm *c, const void *src, size_t bytes, const llm4d_event *ready, llm4d_err *err) {
    llm4d_backend *be = c->dev->be;
    void *h = take(c->dev, bytes, err);
    if (!h) return NULL;
    if (ready) be->stream_wait(be, LLM4D_STREAM_COMM, ready);
    else be->stream_sync(be, LLM4D_STREAM_COMPUTE); /* everything so far on the compute stream */
    be->copy_async(be, h, src, bytes, LLM4D_D2H, LLM4D_STREAM_COMM);
    be->stream_sync(be, LLM4D_STREAM_COMM); /* MPI reads it from the host next */
    return h;
}

/* Received bytes back to the device, ordered before later kernels. */
static void stage_in(llm4d_comm_device *d, void *dst, const void *h, size_t bytes) {
    llm4d_backend *be = d->be;
    be->copy_async(be, dst, h, bytes, LLM4D_H2D, LLM4D_STREAM_COMM);
    be->stream_sync(be, LLM4D_STREAM_COMM);
}

void llm4d_comm_dev_finish(llm4d_comm_req *req, int completed) {
    llm4d_comm_device *d = req->dev;
    if (!d) return;
    if (completed && req->dst) stage_in(d, req->dst, req->stage[1], req->stage_bytes[1]);
    give_back(d, req->stage[0]);
    give_back(d, req->stage[1]);
    req->dev = NULL;
    req->stage[0] = req->stage[1] = req->dst = NULL;
}

/* A non-blocking staged operation has started: the request holds its buffers until it completes. */
static void hold(llm4d_comm *c, llm4d_comm_req *req, void *send, size_t sbytes, void *recv, size_t rbytes, void *dst) {
    req->dev = c->dev;
    req->stage[0] = send, req->stage_bytes[0] = sbytes;
    req->stage[1] = recv, req->stage_bytes[1] = rbytes;
    req->dst = dst;
}

/* A group with an NCCL communicator runs its collectives there, after the kernels producing the buffer. */
static llm4d_comm *nccl_of(llm4d_comm *c, const llm4d_event *ready) {
    if (!c->nccl || !c->dev) return NULL;
    llm4d_comm_nccl_order(c->nccl, ready);
    return c->nccl;
}

/* ---- the operations ---- */

llm4d_code llm4d_comm_dev_allreduce(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt,
                                    llm4d_comm_reduction op, llm4d_err *err) {
    if (c->size == 1) return LLM4D_OK;
    llm4d_comm *n = nccl_of(c, NULL);
    if (n)
        return op == LLM4D_COMM_MAX ? llm4d_comm_allreduce_max(n, buf, count, dt, err)
                                    : llm4d_comm_allreduce(n, buf, count, dt, err);
    if (!staged(c)) {
        after(c, NULL);
        return op == LLM4D_COMM_MAX ? llm4d_comm_allreduce_max(c, buf, count, dt, err)
                                    : llm4d_comm_allreduce(c, buf, count, dt, err);
    }
    const size_t bytes = count * llm4d_comm_dtype_size(dt);
    void *h = stage_out(c, buf, bytes, NULL, err);
    if (!h) return err->code;
    llm4d_code rc = op == LLM4D_COMM_MAX ? llm4d_comm_allreduce_max(c, h, count, dt, err)
                                        : llm4d_comm_allreduce(c, h, count, dt, err);
    if (rc == LLM4D_OK) stage_in(c->dev, buf, h, bytes);
    give_back(c->dev, h);
    return rc;
}

llm4d_code llm4d_comm_dev_iallreduce(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt,
                                     const llm4d_event *ready, llm4d_comm_req *req, llm4d_err *err) {
    if (c->size == 1) return LLM4D_OK;
    llm4d_comm *n = nccl_of(c, ready);
    if (n) return llm4d_comm_iallreduce(n, buf, count, dt, req, err);
    if (!staged(c)) {
        after(c, ready);
        return llm4d_comm_iallreduce(c, buf, count, dt, req, err);
    }
    const size_t bytes = count * llm4d_comm_dtype_size(dt);
    void *h = stage_out(c, buf, bytes, ready, err);
    if (!h) return err->code;
    llm4d_code rc = llm4d_comm_iallreduce(c, h, count, dt, req, err);
    if (rc != LLM4D_OK) give_back(c->dev, h);
    else hold(c, req, NULL, 0, h, bytes, buf);
    return rc;
}

/* A group of one: the result is the input, copied on the device when it is elsewhere. */
static llm4d_code alone_copy(llm4d_comm *c, const void *send, void *recv, size_t bytes) {
    if (send == recv) return LLM4D_OK;
    if (c->dev) c->dev->be->copy(c->dev->be, recv, send, bytes);
    else memmove(recv, send, bytes); /* host buffers of a communicator without a device */
    return LLM4D_OK;
}

llm4d_code llm4d_comm_dev_reduce_scatter(llm4d_comm *c, const void *send, void *recv, size_t recv_count,
                                         llm4d_comm_dtype dt, llm4d_err *err) {
    const size_t rbytes = recv_count * llm4d_comm_dtype_size(dt), sbytes = rbytes * (size_t)c->size;
    if (c->size == 1) return alone_copy(c, send, recv, rbytes);
    llm4d_comm *n = nccl_of(c, NULL);
    if (n) return llm4d_comm_reduce_scatter(n, send, recv, recv_count, dt, err);
    if (!staged(c)) {
        after(c, NULL);
        return llm4d_comm_reduce_scatter(c, send, recv, recv_count, dt, err);
    }
    void *hs = stage_out(c, send, sbytes, NULL, err), *hr = hs ? take(c->dev, rbytes, err) : NULL;
    llm4d_code rc = hr ? llm4d_comm_reduce_scatter(c, hs, hr, recv_count, dt, err) : err->code;
    if (rc == LLM4D_OK) stage_in(c->dev, recv, hr, rbytes);
    give_back(c->dev, hs);
    give_back(c->dev, hr);
    return rc;
}

llm4d_code llm4d_comm_dev_ireduce_scatter(llm4d_comm *c, const void *send, void *recv, size_t recv_count,
                                          llm4d_comm_dtype dt, const llm4d_event *ready, llm4d_comm_req *req,
                                          llm4d_err *err) {
    const size_t rbytes = recv_count * llm4d_comm_dtype_size(dt), sbytes = rbytes * (size_t)c->size;
    if (c->size == 1) return alone_copy(c, send, recv, rbytes);
    llm4d_comm *n = nccl_of(c, ready);
    if (n) return llm4d_comm_ireduce_scatter(n, send, recv, recv_count, dt, req, err);
    if (!staged(c)) {
        after(c, ready);
        return llm4d_comm_ireduce_scatter(c, send, recv, recv_count, dt, req, err);
    }
    void *hs = stage_out(c, send, sbytes, ready, err), *hr = hs ? take(c->dev, rbytes, err) : NULL;
    llm4d_code rc = hr ? llm4d_comm_ireduce_scatter(c, hs, hr, recv_count, dt, req, err) : err->code;
    if (rc == LLM4D_OK) {
        hold(c, req, hs, sbytes, hr, rbytes, recv);
        return rc;
    }
    give_back(c->dev, hs);
    give_back(c->dev, hr);
    return rc;
}

/* send may be recv's own block (in place): then it is staged inside the received buffer. */
static llm4d_code gather_staged(llm4d_comm *c, const void *send, void *recv, size_t send_count, llm4d_comm_dtype dt,
                                llm4d_comm_req *req, llm4d_err *err) {
    const size_t sbytes = send_count * llm4d_comm_dtype_size(dt), rbytes = sbytes * (size_t)c->size;
    char *hr = take(c->dev, rbytes, err);
    if (!hr) return err->code;
    char *own = hr + (size_t)c->rank * sbytes;
    llm4d_backend *be = c->dev->be;
    be->stream_sync(be, LLM4D_STREAM_COMPUTE); /* the shard's producers have run */
    be->copy_async(be, own, send, sbytes, LLM4D_D2H, LLM4D_STREAM_COMM);
    be->stream_sync(be, LLM4D_STREAM_COMM);
    llm4d_code rc = req ? llm4d_comm_iallgather(c, own, hr, send_count, dt, req, err)
                        : llm4d_comm_allgather(c, own, hr, send_count, dt, err);
    if (rc == LLM4D_OK && req) {
        hold(c, req, NULL, 0, hr, rbytes, recv);
        return rc;
    }
    if (rc == LLM4D_OK) stage_in(c->dev, recv, hr, rbytes);
    give_back(c->dev, hr);
    return rc;
}

llm4d_code llm4d_comm_dev_allgather(llm4d_comm *c, const void *send, void *recv, size_t send_count,
                                    llm4d_comm_dtype dt, llm4d_err *err) {
    if (c->size == 1) return alone_copy(c, send, recv, send_count * llm4d_comm_dtype_size(dt));
    llm4d_comm *n = nccl_of(c, NULL);
    if (n) return llm4d_comm_allgather(n, send, recv, send_count, dt, err);
    if (!staged(c)) {
        after(c, NULL);
        return llm4d_comm_allgather(c, send, recv, send_count, dt, err);
    }
    return gather_staged(c, send, recv, send_count, dt, NULL, err);
}

llm4d_code llm4d_comm_dev_iallgather(llm4d_comm *c, const void *send, void *recv, size_t send_count,
                                     llm4d_comm_dtype dt, llm4d_comm_req *req, llm4d_err *err) {
    if (c->size == 1) return alone_copy(c, send, recv, send_count * llm4d_comm_dtype_size(dt));
    llm4d_comm *n = nccl_of(c, NULL);
    if (n) return llm4d_comm_iallgather(n, send, recv, send_count, dt, req, err);
    if (!staged(c)) {
        after(c, NULL);
        return llm4d_comm_iallgather(c, send, recv, send_count, dt, req, err);
    }
    return gather_staged(c, send, recv, send_count, dt, req, err);
}

llm4d_code llm4d_comm_dev_isend(llm4d_comm *c, const void *buf, size_t count, llm4d_comm_dtype dt, int peer, int tag,
                                llm4d_comm_req *req, llm4d_err *err) {
    if (!staged(c)) {
        after(c, NULL);
        return llm4d_comm_isend(c, buf, count, dt, peer, tag, req, err);
    }
    const size_t bytes = count * llm4d_comm_dtype_size(dt);
    void *h = stage_out(c, buf, bytes, NULL, err);
    if (!h) return err->code;
    llm4d_code rc = llm4d_comm_isend(c, h, count, dt, peer, tag, req, err);
    if (rc != LLM4D_OK) give_back(c->dev, h);
    else hold(c, req, h, bytes, NULL, 0, NULL);
    return rc;
}

llm4d_code llm4d_comm_dev_irecv(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt, int peer, int tag,
                                llm4d_comm_req *req, llm4d_err *err) {
    if (!staged(c)) return llm4d_comm_irecv(c, buf, count, dt, peer, tag, req, err);
    const size_t bytes = count * llm4d_comm_dtype_size(dt);
    void *h = take(c->dev, bytes, err);
    if (!h) return err->code;
    llm4d_code rc = llm4d_comm_irecv(c, h, count, dt, peer, tag, req, err);
    if (rc != LLM4D_OK) give_back(c->dev, h);
    else hold(c, req, NULL, 0, h, bytes, buf);
    return rc;
}
