/* comm.h — the communicator: a method table, and its control plane and data plane.
 *
 * A communicator is a group of ranks plus a table of collective operations on host buffers (ggml style: a struct
 * of function pointers and an opaque backend context). Backends: `self` (a world of one process, comm_self.c:
 * collectives are copies or nothing), `mpi` (comm_mpi.c: one MPI communicator per group); a `nccl` backend will
 * fill the same table with device buffers. Callers never call the table directly: they call the llm4d_comm_*
 * functions below, which check arguments, time the call and count the bytes it moved, so every backend is
 * measured the same way.
 *
 * Two planes. The CONTROL plane (llm4d_comm_allreduce, ... on host memory) carries host scalars and host buffers:
 * the loss, token counts, norms, agreement on failures, the hashes and checkpoint gathers done on host views. The
 * DATA plane (llm4d_comm_dev_*, comm_dev.c) carries tensor buffers, device memory of the backend attached to the
 * communicator (llm4d_comm_attach): it orders each operation after the kernels that produce its buffer (an event,
 * or everything so far on the compute stream), and where the device is not host memory and the transport needs
 * host buffers (MPI) it stages them through pinned buffers of its pool: copied to the host before the operation, and
 * back to the device when it completes (llm4d_comm_test / llm4d_comm_wait finish a staged request). A group of one
 * moves nothing: its data plane copies on the device when the operation copies at all.
 *
 * Bytes moved are counted per rank with the cost of the standard bandwidth-optimal algorithms (what an NCCL/MPI
 * ring sends), for an operation on `bytes` of payload over n ranks:
 *   all-reduce        2 (n-1)/n x bytes      (reduce-scatter then all-gather around the ring)
 *   reduce-scatter    (n-1)/n x bytes         bytes = the whole input, n blocks
 *   all-gather        (n-1)/n x bytes         bytes = the whole output, n blocks
 *   broadcast         bytes                   (every rank, root included; 0 when n == 1)
 *   send / recv       bytes                   recv is counted apart and left out of the total "sent"
 * A world of one therefore moves zero bytes. Counts are integers (rounded down per call): exact whenever the
 * payload divides by n, as the trainer's buckets do. This is a model of the traffic, not a measurement of what
 * the MPI library chose to do; it is what ZeRO's and Megatron's formulas (docs/design.md, "Numbers to match")
 * are written in, so a step's printed volume can be compared with them.
 *
 * Non-blocking operations (iallreduce, ireduce_scatter, iallgather, isend, irecv) fill a caller-owned request
 * value, so a gradient bucket can start its reduction during backward and be waited on before the optimizer step
 * without any allocation. MPI runs with MPI_THREAD_FUNNELED (runtime.h): only the thread that initialised MPI
 * may call these functions, and Open MPI's non-blocking collectives advance only inside MPI calls, so code that
 * wants real overlap calls llm4d_comm_test on its outstanding requests now and then (for example after each
 * layer's backward); llm4d_comm_wait finishes the rest.
 *
 * Reductions are sums, or maxima for all-reduce (the vocabulary-parallel softmax combines its row maxima with
 * one). bf16 payloads (LLM4D_COMM_BF16) are summed in fp32 and rounded back to bf16 per element (a user-defined
 * MPI operation), for callers that want half the bytes. Counts are elements of the given type; one call moves at
 * most INT_MAX elements per rank block (an MPI limit) — larger buffers are refused with an internal error, so split
 * them into buckets. */
#ifndef LLM4D_COMM_COMM_H
#define LLM4D_COMM_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "core/error.h"
#include "comm/topology.h"
#include "comm/watch.h"

typedef enum {
    LLM4D_COMM_F32 = 0,
    LLM4D_COMM_F64,
    LLM4D_COMM_I64,
    LLM4D_COMM_BYTE, /* raw bytes: data movement only, no reductions */
    LLM4D_COMM_BF16, /* bfloat16 (uint16_t storage): sums only */
    LLM4D_COMM_NDTYPES
} llm4d_comm_dtype;

/* The reduction of an all-reduce. */
typedef enum { LLM4D_COMM_SUM = 0, LLM4D_COMM_MAX } llm4d_comm_reduction;

size_t llm4d_comm_dtype_size(llm4d_comm_dtype dt);

/* Operation kinds, for the statistics. */
typedef enum {
    LLM4D_COMM_OP_ALLREDUCE = 0,
    LLM4D_COMM_OP_REDUCE_SCATTER,
    LLM4D_COMM_OP_ALLGATHER,
    LLM4D_COMM_OP_BROADCAST,
    LLM4D_COMM_OP_SEND,
    LLM4D_COMM_OP_RECV,
    LLM4D_COMM_OP_BARRIER,
    LLM4D_COMM_NOPS
} llm4d_comm_op;


typedef struct {
    uint64_t calls[LLM4D_COMM_NOPS];
    uint64_t bytes[LLM4D_COMM_NOPS]; /* by the algorithm costs above */
    double blocked_s;                /* wall time spent inside blocking calls and waits/tests on requests */
} llm4d_comm_stats;

/* Bytes this rank sent: every kind except RECV. */
uint64_t llm4d_comm_stats_sent(const llm4d_comm_stats *s);
/* s += add (to sum the groups of a step). */
void llm4d_comm_stats_add(llm4d_comm_stats *s, const llm4d_comm_stats *add);

typedef struct llm4d_comm llm4d_comm;

/* An outstanding non-blocking operation. Owned by the caller (a gradient bucket embeds one); zero-initialise it.
 * comm == NULL means "nothing outstanding": waiting on such a request returns at once. */
typedef struct llm4d_comm_device llm4d_comm_device;

typedef struct {
    llm4d_comm *comm;
    uint64_t flight;                     /* the operation's number in the watch's flight recorder */
    _Alignas(16) unsigned char impl[32]; /* the backend's handle (an MPI_Request) */
    /* a staged data-plane operation (comm_dev.c): the pinned buffers it holds, and where the received one goes */
    const struct llm4d_comm_ops_s *via;  /* the method table that started it (the group's path or its backend) */
    llm4d_comm_device *dev;              /* NULL: nothing staged */
    void *stage[2];                      /* send, receive */
    size_t stage_bytes[2];
    void *dst;                           /* device memory receiving stage[1] at completion (NULL: none) */
} llm4d_comm_req;

/* The method table. Arguments have been checked by the llm4d_comm_* wrappers (counts in range, roots and peers
 * inside the group, dtypes reducible), so backends only do the work. */
typedef struct llm4d_comm_ops_s {
    const char *backend; /* "self", "mpi", "shm" (a path: comm_shm.h) */
    llm4d_code (*barrier)(llm4d_comm *c, llm4d_err *err);
    llm4d_code (*ibarrier)(llm4d_comm *c, llm4d_comm_req *req, llm4d_err *err); /* NULL: none */
    llm4d_code (*allreduce)(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt, llm4d_comm_reduction op,
                            llm4d_err *err);
    llm4d_code (*iallreduce)(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt, llm4d_comm_reduction op,
                             llm4d_comm_req *req, llm4d_err *err);
    llm4d_code (*reduce_scatter)(llm4d_comm *c, const void *send, void *recv, size_t recv_count,
                                 llm4d_comm_dtype dt, llm4d_err *err);
    llm4d_code (*ireduce_scatter)(llm4d_comm *c, const void *send, void *recv, size_t recv_count,
                                  llm4d_comm_dtype dt, llm4d_comm_req *req, llm4d_err *err);
    llm4d_code (*allgather)(llm4d_comm *c, const void *send, void *recv, size_t send_count, llm4d_comm_dtype dt,
                            llm4d_err *err);
    llm4d_code (*iallgather)(llm4d_comm *c, const void *send, void *recv, size_t send_count, llm4d_comm_dtype dt,
                             llm4d_comm_req *req, llm4d_err *err);
    llm4d_code (*broadcast)(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt, int root, llm4d_err *err);
    llm4d_code (*ibroadcast)(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt, int root,
                             llm4d_comm_req *req, llm4d_err *err); /* NULL: none */
    llm4d_code (*send)(llm4d_comm *c, const void *buf, size_t count, llm4d_comm_dtype dt, int peer, int tag,
                       llm4d_err *err);
    llm4d_code (*recv)(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt, int peer, int tag,
                       llm4d_err *err);
    llm4d_code (*isend)(llm4d_comm *c, const void *buf, size_t count, llm4d_comm_dtype dt, int peer, int tag,
                        llm4d_comm_req *req, llm4d_err *err);
    llm4d_code (*irecv)(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt, int peer, int tag,
                        llm4d_comm_req *req, llm4d_err *err);
    llm4d_code (*test)(llm4d_comm *c, llm4d_comm_req *req, int *done, llm4d_err *err);
    llm4d_code (*wait)(llm4d_comm *c, llm4d_comm_req *req, llm4d_err *err);
    /* A new communicator of the ranks that pass the same colour, ordered by key (MPI_Comm_split). */
    llm4d_code (*split)(llm4d_comm *c, int color, int key, const char *name, llm4d_comm **out, llm4d_err *err);
    void (*abort)(llm4d_comm *c, int code); /* ends the whole job with this exit code; does not return */
    void (*destroy)(llm4d_comm *c);         /* frees ctx and the llm4d_comm itself */
} llm4d_comm_ops;

struct llm4d_comm {
    const llm4d_comm_ops *ops;
    void *ctx;             /* the backend's state (its MPI_Comm) */
    int rank, size;        /* fixed when the communicator is made */
    char name[24];         /* "world", "dp", "pp", "sharding", "mp", "data": used in messages */
    llm4d_comm_stats stats;
    /* set by the wrappers (llm4d_comm_watch_world, llm4d_comm_split), not by backends: */
    llm4d_comm_watch *watch; /* the process's watchdog (shared; NULL: none) */
    int world_rank;        /* this process's rank in the world */
    int *members;          /* [size] the members' world ranks, in group rank order */
    uint64_t seq;          /* collectives started on this group */
    char key[40];          /* "dp:0/2": the group's name on progress boards, the same on every member */
    llm4d_comm_device *dev; /* the data plane's device (borrowed; NULL: tensor buffers are host memory) */
    llm4d_comm *nccl;      /* owned: the group's NCCL communicator for its data plane's collectives (comm/nccl/),
                            * a communicator of the same members whose buffers are device memory; NULL: none */
    llm4d_comm_req **pending; /* the non-blocking operations started and not yet seen complete (llm4d_comm_progress) */
    int n_pending, cap_pending;
    /* The group's path (comm_shm.h): a second method table for the collectives it takes (sums through shared memory
     * on one host, hierarchical across hosts), chosen once when the group is made; NULL: everything on `ops`. */
    const llm4d_comm_ops *path;
    void *path_ctx;
    char path_desc[240];       /* which path the group's collectives take, or why not shared memory (start-up log) */
    struct llm4d_shm_hub *hub; /* the process's paths (shared like watch; NULL: none); the world owns it */
    int owns_hub;
};

/* ---- the backends ---- */

/* A world of one process (no MPI at all). */
llm4d_code llm4d_comm_self_create(const char *name, llm4d_comm **out, llm4d_err *err);
/* MPI_COMM_WORLD (duplicated, errors returned rather than fatal). MPI must be initialised (runtime.h). */
llm4d_code llm4d_comm_mpi_world(llm4d_comm **out, llm4d_err *err);

/* ---- what callers use ---- */

static inline int llm4d_comm_rank(const llm4d_comm *c) { return c->rank; }
static inline int llm4d_comm_size(const llm4d_comm *c) { return c->size; }

llm4d_code llm4d_comm_barrier(llm4d_comm *c, llm4d_err *err);
/* In place: buf[i] = sum over ranks of buf[i]. */
llm4d_code llm4d_comm_allreduce(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt, llm4d_err *err);
/* The same, non-blocking: buf must stay untouched until the request completes. */
llm4d_code llm4d_comm_iallreduce(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt, llm4d_comm_req *req,
                                 llm4d_err *err);
/* In place: buf[i] = the maximum over ranks of buf[i] (F32, F64, I64). */
llm4d_code llm4d_comm_allreduce_max(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt, llm4d_err *err);
/* send holds size x recv_count elements (block i is destined for rank i); recv = the sum of every rank's block
 * [rank]. send and recv must not overlap. */
llm4d_code llm4d_comm_reduce_scatter(llm4d_comm *c, const void *send, void *recv, size_t recv_count,
                                     llm4d_comm_dtype dt, llm4d_err *err);
llm4d_code llm4d_comm_ireduce_scatter(llm4d_comm *c, const void *send, void *recv, size_t recv_count,
                                      llm4d_comm_dtype dt, llm4d_comm_req *req, llm4d_err *err);
/* recv (size x send_count elements) = every rank's send block in rank order. send may be the block of recv at
 * [rank * send_count] (then it is used in place). */
llm4d_code llm4d_comm_allgather(llm4d_comm *c, const void *send, void *recv, size_t send_count,
                                llm4d_comm_dtype dt, llm4d_err *err);
llm4d_code llm4d_comm_iallgather(llm4d_comm *c, const void *send, void *recv, size_t send_count,
                                 llm4d_comm_dtype dt, llm4d_comm_req *req, llm4d_err *err);
/* buf on every rank = buf on root (a rank of this communicator). */
llm4d_code llm4d_comm_broadcast(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt, int root,
                                llm4d_err *err);
/* Point to point (pipeline activations and gradients); peer is a rank of this communicator, tag >= 0. A blocking
 * send of a large message waits for the matching receive: two stages that must exchange in both directions use
 * isend/irecv and wait on both. */
llm4d_code llm4d_comm_send(llm4d_comm *c, const void *buf, size_t count, llm4d_comm_dtype dt, int peer, int tag,
                           llm4d_err *err);
llm4d_code llm4d_comm_recv(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt, int peer, int tag,
                           llm4d_err *err);
llm4d_code llm4d_comm_isend(llm4d_comm *c, const void *buf, size_t count, llm4d_comm_dtype dt, int peer, int tag,
                            llm4d_comm_req *req, llm4d_err *err);
llm4d_code llm4d_comm_irecv(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt, int peer, int tag,
                            llm4d_comm_req *req, llm4d_err *err);
/* *done = 1 when the request has completed (it is then cleared); drives progress of the operation. */
llm4d_code llm4d_comm_test(llm4d_comm_req *req, int *done, llm4d_err *err);
/* Advance every non-blocking operation outstanding on c, finishing those that completed as llm4d_comm_test does
 * (their requests cleared; a staged one's data on the device). A transport driven by the host (Open MPI moves a
 * non-blocking collective only inside its own calls) needs this now and then to overlap anything; the engines call it
 * from the model's hooks, between kernels, instead of testing their own requests. */
llm4d_code llm4d_comm_progress(llm4d_comm *c, llm4d_err *err);
/* Blocks until the request completes, then clears it. A cleared request returns at once. */
llm4d_code llm4d_comm_wait(llm4d_comm_req *req, llm4d_err *err);
llm4d_code llm4d_comm_waitall(llm4d_comm_req *reqs, int n, llm4d_err *err);
/* Attach the process's watchdog to the world (every group split from it shares it): from then on, with a timeout
 * set (llm4d_watch_set), every wait of more than one rank polls against the deadline (watch.h). */
llm4d_code llm4d_comm_watch_world(llm4d_comm *world, llm4d_comm_watch *watch, llm4d_err *err);
/* Collective over world, before the groups are split from it: policy "auto" gives every group whose ranks share a
 * host the shared-memory path (hierarchical when they span hosts; comm_shm.h), "mpi" leaves everything on MPI.
 * Groups split from world afterwards choose theirs as they are made (each group's path_desc says which). slot_bytes:
 * the path's chunk (0: its default); progress_thread: a thread moves the path's operations (comm_shm.h). */
llm4d_code llm4d_comm_use_paths(llm4d_comm *world, const char *policy, size_t slot_bytes, int progress_thread,
                                llm4d_err *err);
/* Ends the whole job (every rank) with this exit code, after the caller has printed why. */
void llm4d_comm_abort(llm4d_comm *c, int code) __attribute__((noreturn));
llm4d_code llm4d_comm_split(llm4d_comm *c, int color, int key, const char *name, llm4d_comm **out,
                            llm4d_err *err);
void llm4d_comm_destroy(llm4d_comm *c); /* NULL is fine */

static inline void llm4d_comm_stats_reset(llm4d_comm *c) { c->stats = (llm4d_comm_stats){0}; }

static inline llm4d_comm_stats llm4d_comm_stats_read(const llm4d_comm *c) { return c->stats; }

/* ---- the groups of a topology ---- */

/* One communicator per axis of the grid plus the dp x sharding data group, each made by splitting the world.
 * Inside each, a rank's rank is its coordinate (axis[a]->rank == topo->index[a], data->rank == topo->data_rank),
 * so pipeline neighbours are axis[LLM4D_AXIS_PIPE] ranks index-1 and index+1. Which group reduces what:
 *   data-parallel gradients, sharding off .......... data   (== dp when sharding is 1)
 *   ZeRO reduce-scatter / all-gather of states ..... axis[LLM4D_AXIS_SHARDING], then axis[LLM4D_AXIS_DATA]
 *   tensor-parallel activations .................... axis[LLM4D_AXIS_MODEL]
 *   pipeline p2p, last-stage loss broadcast ........ axis[LLM4D_AXIS_PIPE]
 *   loss averaging for the log, global grad norm ... world (or data) */
typedef struct {
    llm4d_comm *world;               /* borrowed (the runtime owns it) */
    llm4d_comm *axis[LLM4D_NAXES];   /* owned: dp, pp, sharding, mp (indexed by llm4d_axis) */
    llm4d_comm *data;                /* owned: dp x sharding */
    /* Where the rank runs: its index among the world's ranks on its host (ordered by world rank) and their number,
     * from the world itself (host_check.h llm4d_host_split, the split the shared-memory path makes its segments
     * by), not from a launcher's environment: which GPU the rank takes, how many ranks share the host's memory. */
    int host_rank, host_ranks;
} llm4d_comm_groups;

/* Collective over world: every rank must call it with its own topology of the same degrees. */
llm4d_code llm4d_comm_groups_create(llm4d_comm_groups *g, llm4d_comm *world, const llm4d_topology *t,
                                    llm4d_err *err);
void llm4d_comm_groups_destroy(llm4d_comm_groups *g);
/* One line per group of more than one rank: which path its collectives take (comm_shm.h), or why not shared memory. */
void llm4d_comm_groups_print_paths(const llm4d_comm_groups *g, const llm4d_log *log);
/* Statistics summed over world and every group (what a step moved), and their reset. */
llm4d_comm_stats llm4d_comm_groups_stats(const llm4d_comm_groups *g);
void llm4d_comm_groups_stats_reset(llm4d_comm_groups *g);

/* ---- the data plane (comm_dev.c): tensor buffers in the attached device's memory ----
 * The same operations and rules as the control plane's functions of the same name. ready: the event after which
 * the buffer to send holds its data (NULL: everything enqueued on the compute stream so far). A received buffer is
 * ready for the compute stream once the operation has completed (the blocking calls return, or test/wait saw it). */

/* The device of the data plane: its backend and the pinned staging pool (LLM4D_MEM_COMM in mem). */
llm4d_code llm4d_comm_device_create(llm4d_comm_device **out, llm4d_backend *be, llm4d_mem *mem, llm4d_err *err);
void llm4d_comm_device_destroy(llm4d_comm_device *d); /* NULL is fine; every staged request finished first */
/* Attach d to c (NULL detaches); groups split from c afterwards inherit it. */
void llm4d_comm_attach(llm4d_comm *c, llm4d_comm_device *d);
/* Attach d to every group of g and its world (NULL detaches them). */
void llm4d_comm_groups_attach(llm4d_comm_groups *g, llm4d_comm_device *d);

llm4d_code llm4d_comm_dev_allreduce(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt,
                                    llm4d_comm_reduction op, llm4d_err *err);
llm4d_code llm4d_comm_dev_iallreduce(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt,
                                     const llm4d_event *ready, llm4d_comm_req *req, llm4d_err *err);
llm4d_code llm4d_comm_dev_reduce_scatter(llm4d_comm *c, const void *send, void *recv, size_t recv_count,
                                         llm4d_comm_dtype dt, llm4d_err *err);
llm4d_code llm4d_comm_dev_ireduce_scatter(llm4d_comm *c, const void *send, void *recv, size_t recv_count,
                                          llm4d_comm_dtype dt, const llm4d_event *ready, llm4d_comm_req *req,
                                          llm4d_err *err);
llm4d_code llm4d_comm_dev_allgather(llm4d_comm *c, const void *send, void *recv, size_t send_count,
                                    llm4d_comm_dtype dt, llm4d_err *err);
llm4d_code llm4d_comm_dev_iallgather(llm4d_comm *c, const void *send, void *recv, size_t send_count,
                                     llm4d_comm_dtype dt, llm4d_comm_req *req, llm4d_err *err);
llm4d_code llm4d_comm_dev_isend(llm4d_comm *c, const void *buf, size_t count, llm4d_comm_dtype dt, int peer, int tag,
                                llm4d_comm_req *req, llm4d_err *err);
llm4d_code llm4d_comm_dev_irecv(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt, int peer, int tag,
                                llm4d_comm_req *req, llm4d_err *err);
/* comm.c calls this when a staged request completes or fails: the received data to the device, the staging back
 * to the pool. */
void llm4d_comm_dev_finish(llm4d_comm_req *req, int completed);

/* ---- NCCL (comm/nccl/comm_nccl.c; comm_nccl_none.c in builds without CUDA) ----
 * Collective over g's world. Where be is the CUDA backend and libnccl can be loaded, each group of more than one
 * rank whose members all have GPUs of their own gets an NCCL communicator (c->nccl): its data plane's all-reduces,
 * reduce-scatters and all-gathers then run on the GPUs, on a stream of the group's, with no staging. Groups whose
 * ranks share a GPU (NCCL refuses them) and every send and receive (a pipeline's exchanges, which NCCL would run
 * in order on one stream, where MPI lets them pass each other) stay on MPI, staged through pinned memory. Writes
 * one line into say saying which path each group takes (empty where nothing changes: not CUDA, one process). */
llm4d_code llm4d_comm_nccl_setup(llm4d_comm_groups *g, llm4d_backend *be, char *say, size_t n, llm4d_err *err);
/* The next operation on the NCCL communicator n starts after ready (NULL: after everything enqueued so far on the
 * compute stream). */
void llm4d_comm_nccl_order(llm4d_comm *n, const llm4d_event *ready);

#endif
