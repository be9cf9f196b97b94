/* comm_nccl.c — NCCL for the data plane's collectives on GPUs (comm.h llm4d_comm_nccl_setup), in CUDA builds.
 *
 * Why this shape:
 * - Chosen at run time: libnccl.so.2 is opened with dlopen, so a CUDA build needs neither NCCL's header nor its
 *   library to build or to start; where the library is missing on any rank, every group stays on MPI (the ranks
 *   agree first). The few functions used are declared here; where nccl.h is present at build time, the enum
 *   values and the id's size are checked against it.
 * - Per group: a group takes NCCL when its members each have a GPU of their own (nccl_pick.h); ranks sharing a GPU
 *   stay on MPI staged through pinned memory, because NCCL refuses two ranks on one device. The start-up line
 *   says which group took which path.
 * - Only collectives. A group's NCCL communicator is a second llm4d_comm of the same members (c->nccl) whose
 *   method table runs all-reduce, reduce-scatter and all-gather on device buffers, so the wrappers of comm.c count
 *   its bytes, time it and record it in the flight recorder like any other. Sends and receives stay on MPI: NCCL's
 *   point-to-point calls block their stream until the peer's matching call, and a pipeline schedule's exchanges,
 *   posted one by one, would then wait on each other in stream order.
 * - Each group's operations run on a stream of its own, after the producing kernels (an event of the compute
 *   stream, or the caller's ready event), so collectives of different groups do not queue behind each other. A
 *   non-blocking operation's request holds an event recorded after it: test queries it, wait synchronises on it,
 *   and the received data is then in device memory for the kernels launched afterwards. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_api.h"
#include "comm/comm.h"
#include "comm/nccl/nccl_pick.h"

#if defined(__has_include)
#if __has_include(<nccl.h>)
#include <nccl.h>
#define LLM4D_HAVE_NCCL_H 1
#endif
#endif

/* NCCL's ABI, as far as used */
typedef struct {
    char internal[128];
} nccl_uid;
enum { N_UINT8 = 1, N_INT64 = 4, N_FLOAT32 = 7, N_FLOAT64 = 8, N_BF16 = 9 };
enum { N_SUM = 0, N_MAX = 2 };
#ifdef LLM4D_HAVE_NCCL_H
_Static_assert(sizeof(ncclUniqueId) == sizeof(nccl_uid), "ncclUniqueId is 128 bytes");
_Static_assert((int)ncclUint8 == N_UINT8 && (int)ncclInt64 == N_INT64 && (int)ncclFloat32 == N_FLOAT32 &&
                   (int)ncclFloat64 == N_FLOAT64 && (int)ncclBfloat16 == N_BF16,
               "NCCL's data types");
_Static_assert((int)ncclSum == N_SUM && (int)ncclMax == N_MAX, "NCCL's reductions");
#endif

typedef struct {
    void *lib;
    int (*get_version)(int *);
    int (*get_unique_id)(nccl_uid *);
    int (*comm_init_rank)(void **, int, nccl_uid, int);
    int (*comm_destroy)(void *);
    int (*all_reduce)(const void *, void *, size_t, int, int, void *, cudaStream_t);
    int (*reduce_scatter)(const void *, void *, size_t, int, int, void *, cudaStream_t);
    int (*all_gather)(const void *, void *, size_t, int, void *, cudaStream_t);
    const char *(*error_string)(int);
} nccl_fns;

typedef struct {
    nccl_fns f;
    void *comm;             /* ncclComm_t */
    cudaStream_t stream;    /* the group's */
    cudaStream_t compute;   /* the backend's compute stream */
    cudaEvent_t after;      /* recorded on the compute stream when an operation has no ready event */
    cudaEvent_t ready;      /* the next operation's ready event (NULL: after the compute stream) */
} nccl_ctx;

_Static_assert(sizeof(cudaEvent_t) <= sizeof(((llm4d_comm_req *)0)->impl), "a cudaEvent_t fits in impl");

static int load(nccl_fns *f) {
    memset(f, 0, sizeof *f);
    f->lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!f->lib) return 0;
#define SYM(field, name) (*(void **)&f->field = dlsym(f->lib, name)) != NULL
    if (SYM(get_version, "ncclGetVersion") && SYM(get_unique_id, "ncclGetUniqueId") &&
        SYM(comm_init_rank, "ncclCommInitRank") && SYM(comm_destroy, "ncclCommDestroy") &&
        SYM(all_reduce, "ncclAllReduce") && SYM(reduce_scatter, "ncclReduceScatter") &&
        SYM(all_gather, "ncclAllGather") && SYM(error_string, "ncclGetErrorString"))
        return 1;
#undef SYM
    dlclose(f->lib);
    f->lib = NULL;
    return 0;
}

static nccl_ctx *nx(const llm4d_comm *c) { return (nccl_ctx *)c->ctx; }

static llm4d_code nccl_check(const nccl_ctx *x, int rc, const char *call, llm4d_err *err) {
    if (rc == 0) return LLM4D_OK;
    return llm4d_fail(err, LLM4D_EINTERNAL, "%s failed: %s", call, x->f.error_string(rc));
}

static llm4d_code cuda_check(cudaError_t e, const char *call, llm4d_err *err) {
    if (e == cudaSuccess) return LLM4D_OK;
    return llm4d_fail(err, LLM4D_EINTERNAL, "%s failed: %s", call, cudaGetErrorString(e));
}

static int nccl_type(llm4d_comm_dtype dt) {
    switch (dt) {
    case LLM4D_COMM_F32: return N_FLOAT32;
    case LLM4D_COMM_F64: return N_FLOAT64;
    case LLM4D_COMM_I64: return N_INT64;
    case LLM4D_COMM_BF16: return N_BF16;
    default: return N_UINT8;
    }
}

/* The group's stream waits for the producers of the operation's buffers. */
static llm4d_code order(llm4d_comm *c, llm4d_err *err) {
    nccl_ctx *x = nx(c);
    cudaEvent_t ev = x->ready;
    x->ready = NULL;
    if (!ev) {
        LLM4D_TRY(cuda_check(cudaEventRecord(x->after, x->compute), "cudaEventRecord", err));
        ev = x->after;
    }
    return cuda_check(cudaStreamWaitEvent(x->stream, ev, 0), "cudaStreamWaitEvent", err);
}

/* After an enqueued operation: block (req NULL) or hand the request an event recorded after it. */
static llm4d_code complete(llm4d_comm *c, llm4d_comm_req *req, llm4d_err *err) {
    nccl_ctx *x = nx(c);
    if (!req) return cuda_check(cudaStreamSynchronize(x->stream), "cudaStreamSynchronize", err);
    cudaEvent_t ev;
    LLM4D_TRY(cuda_check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), "cudaEventCreate", err));
    memcpy(req->impl, &ev, sizeof ev);
    return cuda_check(cudaEventRecord(ev, x->stream), "cudaEventRecord", err);
}

static llm4d_code do_allreduce(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt, llm4d_comm_reduction op,
                               llm4d_comm_req *req, llm4d_err *err) {
    nccl_ctx *x = nx(c);
    LLM4D_TRY(order(c, err));
    LLM4D_TRY(nccl_check(x, x->f.all_reduce(buf, buf, count, nccl_type(dt), op == LLM4D_COMM_MAX ? N_MAX : N_SUM,
                                            x->comm, x->stream),
                         "ncclAllReduce", err));
    return complete(c, req, err);
}

static llm4d_code n_allreduce(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt, llm4d_comm_reduction op,
                              llm4d_err *err) {
    return do_allreduce(c, buf, count, dt, op, NULL, err);
}

static llm4d_code n_iallreduce(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt, llm4d_comm_reduction op,
                               llm4d_comm_req *req, llm4d_err *err) {
    return do_allreduce(c, buf, count, dt, op, req, err);
}

static llm4d_code do_reduce_scatter(llm4d_comm *c, const void *send, void *recv, size_t recv_count,
                                    llm4d_comm_dtype dt, llm4d_comm_req *req, llm4d_err *err) {
    nccl_ctx *x = nx(c);
    LLM4D_TRY(order(c, err));
    LLM4D_TRY(nccl_check(x, x->f.reduce_scatter(send, recv, recv_count, nccl_type(dt), N_SUM, x->comm, x->stream),
                         "ncclReduceScatter", err));
    return complete(c, req, err);
}

static llm4d_code n_reduce_scatter(llm4d_comm *c, const void *send, void *recv, size_t recv_count,
                                   llm4d_comm_dtype dt, llm4d_err *err) {
    return do_reduce_scatter(c, send, recv, recv_count, dt, NULL, err);
}

static llm4d_code n_ireduce_scatter(llm4d_comm *c, const void *send, void *recv, size_t recv_count,
                                    llm4d_comm_dtype dt, llm4d_comm_req *req, llm4d_err *err) {
    return do_reduce_scatter(c, send, recv, recv_count, dt, req, err);
}

static llm4d_code do_allgather(llm4d_comm *c, const void *send, void *recv, size_t send_count, llm4d_comm_dtype dt,
                               llm4d_comm_req *req, llm4d_err *err) {
    nccl_ctx *x = nx(c);
    LLM4D_TRY(order(c, err));
    LLM4D_TRY(nccl_check(x, x->f.all_gather(send, recv, send_count, nccl_type(dt), x->comm, x->stream),
                         "ncclAllGather", err));
    return complete(c, req, err);
}

static llm4d_code n_allgather(llm4d_comm *c, const void *send, void *recv, size_t send_count, llm4d_comm_dtype dt,
                              llm4d_err *err) {
    return do_allgather(c, send, recv, send_count, dt, NULL, err);
}

static llm4d_code n_iallgather(llm4d_comm *c, const void *send, void *recv, size_t send_count, llm4d_comm_dtype dt,
                               llm4d_comm_req *req, llm4d_err *err) {
    return do_allgather(c, send, recv, send_count, dt, req, err);
}

static llm4d_code n_test(llm4d_comm *c, llm4d_comm_req *req, int *done, llm4d_err *err) {
    (void)c;
    cudaEvent_t ev;
    memcpy(&ev, req->impl, sizeof ev);
    const cudaError_t e = cudaEventQuery(ev);
    if (e == cudaErrorNotReady) {
        *done = 0;
        return LLM4D_OK;
    }
    cudaEventDestroy(ev);
    *done = 1;
    return cuda_check(e, "an NCCL operation", err);
}

static llm4d_code n_wait(llm4d_comm *c, llm4d_comm_req *req, llm4d_err *err) {
    (void)c;
    cudaEvent_t ev;
    memcpy(&ev, req->impl, sizeof ev);
    const cudaError_t e = cudaEventSynchronize(ev);
    cudaEventDestroy(ev);
    return cuda_check(e, "an NCCL operation", err);
}

/* What the data plane never asks of this table (sends, receives, broadcasts and barriers stay on MPI). */
static llm4d_code n_unused(llm4d_comm *c, llm4d_err *err) {
    return llm4d_fail(err, LLM4D_EINTERNAL, "the %s group's NCCL communicator runs collectives only", c->name);
}
static llm4d_code n_barrier(llm4d_comm *c, llm4d_err *err) { return n_unused(c, err); }
static llm4d_code n_broadcast(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt, int root, llm4d_err *err) {
    (void)buf, (void)count, (void)dt, (void)root;
    return n_unused(c, err);
}
static llm4d_code n_send(llm4d_comm *c, const void *buf, size_t count, llm4d_comm_dtype dt, int peer, int tag,
                         llm4d_err *err) {
    (void)buf, (void)count, (void)dt, (void)peer, (void)tag;
    return n_unused(c, err);
}
static llm4d_code n_recv(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt, int peer, int tag,
                         llm4d_err *err) {
    (void)buf, (void)count, (void)dt, (void)peer, (void)tag;
    return n_unused(c, err);
}
static llm4d_code n_isend(llm4d_comm *c, const void *buf, size_t count, llm4d_comm_dtype dt, int peer, int tag,
                          llm4d_comm_req *req, llm4d_err *err) {
    (void)buf, (void)count, (void)dt, (void)peer, (void)tag, (void)req;
    return n_unused(c, err);
}
static llm4d_code n_irecv(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt, int peer, int tag,
                          llm4d_comm_req *req, llm4d_err *err) {
    (void)buf, (void)count, (void)dt, (void)peer, (void)tag, (void)req;
    return n_unused(c, err);
}
static llm4d_code n_split(llm4d_comm *c, int color, int key, const char *name, llm4d_comm **out, llm4d_err *err) {
    (void)color, (void)key, (void)name, (void)out;
    return n_unused(c, err);
}
static void n_abort(llm4d_comm *c, int code) {
    (void)c;
    exit(code);
}

static void n_destroy(llm4d_comm *c) {
    nccl_ctx *x = nx(c);
    if (x) {
        if (x->stream) cudaStreamSynchronize(x->stream);
        if (x->comm) x->f.comm_destroy(x->comm);
        if (x->after) cudaEventDestroy(x->after);
        if (x->stream) cudaStreamDestroy(x->stream);
        if (x->f.lib) dlclose(x->f.lib);
        free(x);
    }
    free(c);
}

static const llm4d_comm_ops nccl_ops = {
    .backend = "nccl",
    .barrier = n_barrier,
    .allreduce = n_allreduce,
    .iallreduce = n_iallreduce,
    .reduce_scatter = n_reduce_scatter,
    .ireduce_scatter = n_ireduce_scatter,
    .allgather = n_allgather,
    .iallgather = n_iallgather,
    .broadcast = n_broadcast,
    .send = n_send,
    .recv = n_recv,
    .isend = n_isend,
    .irecv = n_irecv,
    .test = n_test,
    .wait = n_wait,
    .split = n_split,
    .abort = n_abort,
    .destroy = n_destroy,
};

void llm4d_comm_nccl_order(llm4d_comm *n, const llm4d_event *ready) {
    nx(n)->ready = ready ? (cudaEvent_t)llm4d_cuda_event_handle(ready) : NULL;
}

/* The NCCL twin of group c (collective over c's members). */
static llm4d_code twin(llm4d_comm *c, llm4d_backend *be, llm4d_err *err) {
    llm4d_comm *n = calloc(1, sizeof *n);
    nccl_ctx *x = calloc(1, sizeof *x);
    int *members = malloc((size_t)c->size * sizeof *members);
    if (!n || !x || !members) {
        free(n), free(x), free(members);
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    }
    n->ops = &nccl_ops;
    n->ctx = x;
    n->rank = c->rank, n->size = c->size, n->watch = c->watch, n->world_rank = c->world_rank;
    for (int i = 0; i < c->size; i++) members[i] = c->members ? c->members[i] : i;
    n->members = members;
    snprintf(n->name, sizeof n->name, "%s", c->name);
    snprintf(n->key, sizeof n->key, "%s", c->key);
    llm4d_code rc = load(&x->f) ? LLM4D_OK : llm4d_fail(err, LLM4D_EINTERNAL, "libnccl.so.2 went away");
    x->compute = (cudaStream_t)llm4d_cuda_stream(be, LLM4D_STREAM_COMPUTE);
    if (rc == LLM4D_OK)
        rc = cuda_check(cudaStreamCreateWithFlags(&x->stream, cudaStreamNonBlocking), "cudaStreamCreate", err);
    if (rc == LLM4D_OK)
        rc = cuda_check(cudaEventCreateWithFlags(&x->after, cudaEventDisableTiming), "cudaEventCreate", err);
    nccl_uid id;
    memset(&id, 0, sizeof id);
    if (rc == LLM4D_OK && c->rank == 0) rc = nccl_check(x, x->f.get_unique_id(&id), "ncclGetUniqueId", err);
    /* the id to every member over MPI (the control plane); every member reaches this line, so no one waits alone */
    llm4d_err berr = {0};
    llm4d_code brc = llm4d_comm_broadcast(c, &id, sizeof id, LLM4D_COMM_BYTE, 0, &berr);
    /* and whether every member got this far: NCCL's initialisation waits for all of them */
    int64_t failed = rc != LLM4D_OK || brc != LLM4D_OK;
    if (brc == LLM4D_OK) brc = llm4d_comm_allreduce(c, &failed, 1, LLM4D_COMM_I64, &berr);
    if (rc == LLM4D_OK && brc != LLM4D_OK) rc = brc, *err = berr;
    if (rc == LLM4D_OK && failed)
        rc = llm4d_fail(err, LLM4D_EINTERNAL, "another member of the %s group could not prepare NCCL", c->name);
    if (rc == LLM4D_OK) rc = nccl_check(x, x->f.comm_init_rank(&x->comm, c->size, id, c->rank), "ncclCommInitRank", err);
    if (rc != LLM4D_OK) {
        llm4d_comm_destroy(n);
        return llm4d_wrap(err, "creating the %s group's NCCL communicator", c->name);
    }
    c->nccl = n;
    return LLM4D_OK;
}

#define KEYLEN 96

llm4d_code llm4d_comm_nccl_setup(llm4d_comm_groups *g, llm4d_backend *be, char *say, size_t n, llm4d_err *err) {
    if (n) say[0] = '\0';
    llm4d_comm *w = g->world;
    if (!llm4d_cuda_is(be) || !w || w->size == 1) return LLM4D_OK;
    /* every rank's GPU: host name and PCI location */
    char mine[KEYLEN] = {0}, host[64] = {0}, pci[32] = {0};
    gethostname(host, sizeof host - 1);
    if (llm4d_cuda_device_id(be, pci, sizeof pci)) snprintf(mine, sizeof mine, "%s/%s", host, pci);
    char *keys = calloc((size_t)w->size, KEYLEN);
    if (!keys) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    llm4d_code rc = llm4d_comm_allgather(w, mine, keys, KEYLEN, LLM4D_COMM_BYTE, err);
    /* the library on every rank, or NCCL for no one */
    nccl_fns f;
    int64_t missing = load(&f) ? 0 : 1;
    int version = 0;
    if (!missing) {
        f.get_version(&version);
        dlclose(f.lib);
    }
    if (rc == LLM4D_OK) rc = llm4d_comm_allreduce(w, &missing, 1, LLM4D_COMM_I64, err);
    if (rc != LLM4D_OK) {
        free(keys);
        return rc;
    }
    llm4d_comm *groups[LLM4D_NAXES + 2];
    int ng = 0;
    groups[ng++] = w;
    for (int a = 0; a < LLM4D_NAXES; a++) groups[ng++] = g->axis[a];
    groups[ng++] = g->data;
    size_t k = (size_t)snprintf(say, n, "data plane:");
    for (int i = 0; i < ng && rc == LLM4D_OK; i++) {
        llm4d_comm *c = groups[i];
        if (!c || c->size == 1) continue;
        int *ids = malloc((size_t)c->size * sizeof *ids);
        if (!ids) {
            rc = llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
            break;
        }
        for (int r = 0; r < c->size; r++) ids[r] = c->members ? c->members[r] : r;
        const int distinct = llm4d_nccl_distinct(keys, KEYLEN, ids, c->size);
        free(ids);
        const char *path = "MPI staged through pinned memory (its ranks share a GPU; NCCL needs one per rank)";
        if (missing) path = "MPI staged through pinned memory (libnccl.so.2 is not on every rank)";
        else if (distinct) path = "NCCL collectives, MPI sends and receives";
        if (!missing && distinct) rc = twin(c, be, err);
        if (k < n)
            k += (size_t)snprintf(say + k, n - k, "%s %s (%d ranks): %s", i ? ";" : "", c->name, c->size, path);
    }
    if (!missing && k < n)
        snprintf(say + k, n - k, "; NCCL %d.%d.%d", version / 10000, version / 100 % 100, version % 100);
    free(keys);
    return rc;
}
