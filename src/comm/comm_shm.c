/* comm_shm.c — the shared-memory path of a group: its segment, the operations' state machines, the method table
 * (see comm_shm.h for the algorithms and why). */
#include "comm/comm_shm.h"

#include <errno.h>
#include <fcntl.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "comm/host_check.h"
#include "comm/shm_share.h"
#include "comm/shm_sum.h"

#define SEG_MAGIC 0x6d73346cu /* "l4sm" */

/* ---- the process's hub ---- */

struct llm4d_shm_hub {
    llm4d_shm_opts opts;
    struct shm_group **groups; /* every attached group, for llm4d_shm_progress_all */
    int n_groups, cap_groups;
    unsigned made;             /* segments this process created: their names' counter */
    /* comm_progress thread: the queues, their operations and the spare records are the lock's */
    pthread_mutex_t lock;
    pthread_cond_t wake;       /* an operation was queued, or stop */
    pthread_t thread;
    int thread_on, stop;
    int multi_host;            /* a group spans hosts: its cross-host phase needs the main thread's progress */
};

static void *progress_main(void *arg);

llm4d_code llm4d_shm_hub_create(llm4d_shm_hub **out, const llm4d_shm_opts *o, llm4d_err *err) {
    *out = calloc(1, sizeof **out);
    if (!*out) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    (*out)->opts = *o;
    if (!(*out)->opts.slot_bytes) (*out)->opts.slot_bytes = LLM4D_SHM_SLOT_BYTES;
    (*out)->opts.slot_bytes = ((*out)->opts.slot_bytes + 4095) & ~(size_t)4095;
    pthread_mutex_init(&(*out)->lock, NULL);
    pthread_cond_init(&(*out)->wake, NULL);
    return LLM4D_OK;
}

void llm4d_shm_hub_destroy(llm4d_shm_hub *h) {
    if (!h) return;
    if (h->thread_on) {
        pthread_mutex_lock(&h->lock);
        h->stop = 1;
        pthread_cond_signal(&h->wake);
        pthread_mutex_unlock(&h->lock);
        pthread_join(h->thread, NULL);
    }
    pthread_cond_destroy(&h->wake);
    pthread_mutex_destroy(&h->lock);
    free(h->groups);
    free(h);
}

/* ---- a group's segment and queue ---- */

typedef struct {
    _Alignas(LLM4D_SHM_LINE) _Atomic uint64_t phase; /* phases this rank has finished: written by it alone */
    /* an all-reduce over shared buffers: which one this rank has entered (written before its arrival is
     * published, read by the peers after they see it), so that ranks that disagree fail instead of summing
     * different ranges */
    uint64_t z_seq, z_off, z_count, z_dt;
} flag_line;

typedef struct {
    uint32_t magic;
    int32_t n;
    uint64_t slot_bytes;
    char pad[LLM4D_SHM_LINE - 16];
    flag_line flag[];
} seg_head;

typedef struct shm_op shm_op;

typedef struct shm_group {
    llm4d_shm_hub *hub;
    llm4d_comm *cross;       /* raw MPI group of this local rank on every host (NULL: one host) */
    int n, r, hosts;         /* ranks on this host, this rank's index among them, hosts */
    seg_head *seg;
    size_t seg_bytes, slot_bytes;
    char *slots;             /* [n][2][slot_bytes] */
    uint64_t phase;          /* this rank's flag */
    uint64_t chunks;         /* chunks run so far: chunk k uses slot k mod 2 */
    shm_op *head, *tail;     /* the queue: started, not finished, in start order */
    shm_op *spare;           /* finished records, reused */
    shm_op *records;         /* every record this group allocated (through `owned`): freed at detach, also one whose
                              * request was given up (a wait past its deadline never finishes it into `spare`) */
    int pending;
    llm4d_shm_region *regions; /* buffers shared with the host's peers (shm_share.h) */
    llm4d_shm_region *retired; /* given back with an abandoned operation still queued on them (llm4d_shm_unshare) */
    uint64_t started;          /* operations started on the group: the same sequence on every rank */
} shm_group;

enum { K_RS, K_AG, K_AR };
enum { S_RS, S_RS_WAIT, S_CROSS, S_CROSS_WAIT, S_AG, S_AG_WAIT, S_SMALL_WAIT, S_AR, S_AR_SUM, S_AR_OUT, S_Z, S_Z_SUM,
       S_Z_END, S_DONE };

struct shm_op {
    shm_group *g;
    int kind, state, small;
    llm4d_comm_dtype dt;
    size_t esz;
    const char *send;        /* RS: n blocks; AG: the own block; AR: the buffer */
    char *recv;              /* RS: the own block; AG: n blocks; AR: the buffer */
    size_t S;                /* block (slice) stride in elements */
    size_t total;            /* elements of all blocks (AR: count; RS, AG: n S) */
    size_t off;              /* elements of the blocks done in the current half */
    int parity;
    uint64_t target;
    llm4d_comm_req xreq;     /* the cross-host all-reduce */
    const llm4d_shm_region *reg; /* AR over a shared buffer: its region (NULL: the slots) */
    size_t zoff;             /* ... and the buffer's byte offset in it */
    uint64_t seq;            /* g->started when this one started */
    int done;
    llm4d_code rc;
    llm4d_err err;
    shm_op *next;
    shm_op *owned;           /* the group's list of all its records (kept when the record is reused) */
};

static char *slot(const shm_group *g, int j, int parity) {
    return g->slots + ((size_t)j * 2 + (size_t)parity) * g->slot_bytes;
}

/* Elements of block j at offset off, at most L. */
static size_t clen(const shm_op *op, int j, size_t off, size_t L) {
    const size_t start = (size_t)j * op->S + off, end = (size_t)j * op->S + op->S;
    const size_t stop = end < op->total ? end : op->total;
    if (start >= stop) return 0;
    return stop - start < L ? stop - start : L;
}

static int threads(void) { return omp_in_parallel() ? 1 : omp_get_max_threads(); }

static void publish(shm_group *g) {
    g->phase++;
    atomic_store_explicit(&g->seg->flag[g->r].phase, g->phase, memory_order_release);
}

/* This rank has finished a phase: published, and the operation waits for its peers to reach it in state next. */
static int arrive(shm_op *op, int next) {
    publish(op->g);
    op->target = op->g->phase;
    op->state = next;
    return 1;
}

static int peers_at(const shm_group *g, uint64_t target) {
    for (int j = 0; j < g->n; j++)
        if (j != g->r && atomic_load_explicit(&g->seg->flag[j].phase, memory_order_acquire) < target) return 0;
    return 1;
}

/* The own block: where this rank's slice is read from and written to. */
static const char *own_in(const shm_op *op) {
    return op->kind == K_AG ? op->send : op->send + (size_t)op->g->r * op->S * op->esz;
}
static char *own_out(const shm_op *op) {
    return op->kind == K_RS ? op->recv : op->recv + (size_t)op->g->r * op->S * op->esz;
}

/* An all-reduce on one host, chunk by chunk (the fused form): the chunk at op->off, of *len elements, is cut into n
 * pieces of *piece elements (whole cache lines), piece k summed by rank k. Returns the element where piece k starts
 * and sets *plen to its length. */
static size_t fused_piece(const shm_op *op, size_t chunk, int k, size_t *plen) {
    const size_t len = op->total - op->off < chunk ? op->total - op->off : chunk, line = LLM4D_SHM_LINE / op->esz;
    const size_t n = (size_t)op->g->n, piece = ((len + n - 1) / n + line - 1) / line * line;
    const size_t lo = (size_t)k * piece < len ? (size_t)k * piece : len;
    *plen = lo + piece < len ? piece : len - lo;
    return lo;
}

/* Every rank entered the same all-reduce over shared buffers (the same operation, range and type). */
static llm4d_code z_agree(shm_op *op) {
    const shm_group *g = op->g;
    for (int j = 0; j < g->n; j++) {
        const flag_line *f = &g->seg->flag[j];
        if (f->z_seq != op->seq || f->z_off != op->zoff || f->z_count != op->total || f->z_dt != (uint64_t)op->dt)
            return llm4d_fail(&op->err, LLM4D_EINTERNAL,
                              "all-reduce over shared buffers: local rank %d entered operation %llu at byte %llu, "
                              "%llu elements, where rank %d entered %llu at byte %llu, %llu elements",
                              j, (unsigned long long)f->z_seq, (unsigned long long)f->z_off,
                              (unsigned long long)f->z_count, g->r, (unsigned long long)op->seq,
                              (unsigned long long)op->zoff, (unsigned long long)op->total);
    }
    return LLM4D_OK;
}

/* One step of the state machine; 0 when it must wait for a peer (or the network), 1 when it moved. on_main: the
 * thread that may call MPI (the cross-host phase waits for it) and use the OpenMP team. */
static int step(shm_op *op, int on_main) {
    shm_group *g = op->g;
    const int n = g->n, r = g->r, th = on_main ? threads() : 1;
    if (!on_main && (op->state == S_CROSS || op->state == S_CROSS_WAIT)) return 0;
    const size_t esz = op->esz, slot_elems = g->slot_bytes / esz, line = LLM4D_SHM_LINE / esz;
    const size_t L_rs = slot_elems / (size_t)n / line * line, L_ag = slot_elems, chunk = L_rs * (size_t)n;
    size_t plen;
    switch (op->state) {
    /* the fused all-reduce: per chunk, the peers' pieces in, the own piece summed (into the slot, then the buffer),
     * the others' sums out; the sums a peer reads are still in the cache of the core that wrote them */
    case S_AR:
        if (op->off >= op->total) {
            op->state = S_DONE;
            return 1;
        }
        op->parity = (int)(g->chunks++ & 1);
        for (int k = 0; k < n; k++) {
            const size_t lo = fused_piece(op, chunk, k, &plen);
            if (k != r) llm4d_shm_copy(slot(g, r, op->parity) + lo * esz, op->send + (op->off + lo) * esz, plen * esz, th);
        }
        return arrive(op, S_AR_SUM);
    case S_AR_SUM: {
        if (!peers_at(g, op->target)) return 0;
        const size_t lo = fused_piece(op, chunk, r, &plen);
        const void *in[LLM4D_SHM_MAX_RANKS];
        for (int j = 0; j < n; j++) in[j] = j == r ? op->send + (op->off + lo) * esz : slot(g, j, op->parity) + lo * esz;
        /* the sums into the slot (for the peers) and the buffer in one pass */
        llm4d_shm_sum2(slot(g, r, op->parity) + lo * esz, op->recv + (op->off + lo) * esz, in, n, plen, op->dt, th);
        return arrive(op, S_AR_OUT);
    }
    case S_AR_OUT:
        if (!peers_at(g, op->target)) return 0;
        for (int j = 0; j < n; j++) {
            const size_t lo = fused_piece(op, chunk, j, &plen);
            if (j != r) llm4d_shm_copy(op->recv + (op->off + lo) * esz, slot(g, j, op->parity) + lo * esz, plen * esz, th);
        }
        op->off += chunk;
        op->state = S_AR;
        return 1;
    /* the all-reduce over shared buffers (shm_share.h): arrive; sum slice r of every rank's buffer into all of them,
     * a slot's worth per step; arrive again: once every rank has, every buffer holds every slice's sum */
    case S_Z: {
        flag_line *me = &g->seg->flag[r];
        me->z_seq = op->seq, me->z_off = op->zoff, me->z_count = op->total, me->z_dt = (uint64_t)op->dt;
        op->off = 0;
        return arrive(op, S_Z_SUM);
    }
    case S_Z_SUM: {
        if (!peers_at(g, op->target)) return 0;
        const size_t len = clen(op, r, 0, op->S);
        if (op->off == 0 && (op->rc = z_agree(op)) != LLM4D_OK) op->off = len; /* no sum: the step fails */
        if (op->off < len) {
            const size_t c = len - op->off < slot_elems ? len - op->off : slot_elems;
            const size_t at = op->zoff + ((size_t)r * op->S + op->off) * esz;
            void *ptr[LLM4D_SHM_MAX_RANKS];
            for (int j = 0; j < n; j++) ptr[j] = op->reg->at[j] + at;
            llm4d_shm_sum_to(ptr, n, (const void *const *)ptr, n, c, op->dt, th);
            if ((op->off += c) < len) return 1;
        }
        return arrive(op, S_Z_END);
    }
    case S_Z_END:
        if (!peers_at(g, op->target)) return 0;
        op->state = S_DONE;
        return 1;
    case S_RS: /* copy the peers' pieces of this chunk into the own slot, then tell them */
        if (op->off >= op->S) {
            op->off = 0;
            op->state = op->kind == K_RS ? S_DONE : g->hosts > 1 ? S_CROSS : S_AG;
            return 1;
        }
        op->parity = (int)(g->chunks++ & 1);
        if (op->small) { /* the whole buffer, summed by every rank */
            llm4d_shm_copy(slot(g, r, op->parity), op->send, op->total * esz, th);
        } else {
            for (int k = 0; k < n; k++)
                if (k != r)
                    llm4d_shm_copy(slot(g, r, op->parity) + (size_t)k * L_rs * esz,
                                   op->send + ((size_t)k * op->S + op->off) * esz, clen(op, k, op->off, L_rs) * esz, th);
        }
        return arrive(op, op->small ? S_SMALL_WAIT : S_RS_WAIT);
    case S_RS_WAIT: { /* every peer's pieces are there: sum the own slice, in rank order */
        if (!peers_at(g, op->target)) return 0;
        const void *in[LLM4D_SHM_MAX_RANKS];
        for (int j = 0; j < n; j++)
            in[j] = j == r ? own_in(op) + op->off * esz : slot(g, j, op->parity) + (size_t)r * L_rs * esz;
        llm4d_shm_sum(own_out(op) + op->off * esz, in, n, clen(op, r, op->off, L_rs), op->dt, th);
        op->off += L_rs;
        op->state = S_RS;
        return 1;
    }
    case S_SMALL_WAIT: {
        if (!peers_at(g, op->target)) return 0;
        const void *in[LLM4D_SHM_MAX_RANKS];
        for (int j = 0; j < n; j++) in[j] = slot(g, j, op->parity);
        llm4d_shm_sum(op->recv, in, n, op->total, op->dt, 1);
        op->state = S_DONE;
        return 1;
    }
    case S_CROSS: { /* the own slice summed over the hosts (MPI, rank r of every host) */
        const size_t len = clen(op, r, 0, op->S);
        op->state = S_AG;
        if (!len) return 1;
        llm4d_comm *x = g->cross;
        op->rc = x->ops->iallreduce(x, own_out(op), len, op->dt, LLM4D_COMM_SUM, &op->xreq, &op->err);
        if (op->rc != LLM4D_OK) {
            op->state = S_DONE;
            return 1;
        }
        op->state = S_CROSS_WAIT;
        return 1;
    }
    case S_CROSS_WAIT: {
        llm4d_comm *x = g->cross;
        int is_done = 0;
        op->rc = x->ops->test(x, &op->xreq, &is_done, &op->err);
        if (op->rc != LLM4D_OK) {
            op->state = S_DONE;
            return 1;
        }
        if (!is_done) return 0;
        op->state = S_AG;
        return 1;
    }
    case S_AG: /* the own block's chunk into the own slot */
        if (op->off >= op->S) {
            op->state = S_DONE;
            return 1;
        }
        if (op->kind == K_AG && op->off == 0 && own_out(op) != op->send) /* out of place: the own block too */
            llm4d_shm_copy(own_out(op), op->send, clen(op, r, 0, op->S) * esz, th);
        op->parity = (int)(g->chunks++ & 1);
        llm4d_shm_copy(slot(g, r, op->parity), (op->kind == K_AG ? op->send : own_out(op)) + op->off * esz,
                       clen(op, r, op->off, L_ag) * esz, th);
        return arrive(op, S_AG_WAIT);
    case S_AG_WAIT:
        if (!peers_at(g, op->target)) return 0;
        for (int j = 0; j < n; j++)
            if (j != r)
                llm4d_shm_copy(op->recv + ((size_t)j * op->S + op->off) * esz, slot(g, j, op->parity),
                               clen(op, j, op->off, L_ag) * esz, th);
        op->off += L_ag;
        op->state = S_AG;
        return 1;
    case S_DONE:
    default: return 0;
    }
}

/* Runs the group's queue, in order, until an operation must wait or budget steps were taken (budget < 0: no limit);
 * whether anything moved. The hub's lock held. */
static int advance(shm_group *g, int on_main, int budget) {
    int moved = 0;
    while (g->head) {
        shm_op *op = g->head;
        while (op->state != S_DONE && budget != 0 && step(op, on_main)) moved = 1, budget -= budget > 0;
        if (op->state != S_DONE) return moved;
        op->done = 1;
        g->head = op->next;
        if (!g->head) g->tail = NULL;
        g->pending--;
    }
    return moved;
}

/* With the progress thread, the main thread moves the queues only while it waits (in a hook it goes back to
 * computing and leaves the copies to the thread), except the cross-host phases, which only it can run. */
llm4d_code llm4d_shm_progress_all(llm4d_shm_hub *h, int waiting, llm4d_err *err) {
    (void)err;
    if (!h || !h->n_groups || (h->thread_on && !waiting && !h->multi_host)) return LLM4D_OK; /* the thread's */
    pthread_mutex_lock(&h->lock);
    for (int i = 0; i < h->n_groups; i++)
        if (h->groups[i]->head && (!h->thread_on || waiting || h->groups[i]->hosts > 1)) advance(h->groups[i], 1, -1);
    pthread_mutex_unlock(&h->lock);
    return LLM4D_OK;
}

int llm4d_shm_pending(llm4d_shm_hub *h) {
    int n = 0;
    if (!h) return 0;
    pthread_mutex_lock(&h->lock);
    for (int i = 0; i < h->n_groups; i++) n += h->groups[i]->pending;
    pthread_mutex_unlock(&h->lock);
    return n;
}

/* The progress thread (comm_progress thread): moves every queue a step (a chunk) at a time, letting go of the lock
 * between steps so that the main thread can queue, test and wait meanwhile; when the peers hold it up it spins
 * briefly, yields and sleeps in turn; it sleeps on `wake` while nothing is queued. It never calls MPI. */
static void *progress_main(void *arg) {
    llm4d_shm_hub *h = arg;
    unsigned idle = 0;
    pthread_mutex_lock(&h->lock);
    while (!h->stop) {
        int pending = 0, moved = 0;
        for (int i = 0; i < h->n_groups; i++)
            if (h->groups[i]->head) pending = 1, moved |= advance(h->groups[i], 0, 1);
        if (!pending) {
            pthread_cond_wait(&h->wake, &h->lock);
            continue;
        }
        pthread_mutex_unlock(&h->lock);
        idle = moved ? 0 : idle + 1;
        if (idle > 2000) {
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
        } else if (idle > 50) {
            sched_yield();
        }
        pthread_mutex_lock(&h->lock);
    }
    pthread_mutex_unlock(&h->lock);
    return NULL;
}

/* ---- the method table ---- */

static shm_group *group_of(const llm4d_comm *c) { return c->path_ctx; }

static shm_op *op_of(llm4d_comm_req *req) {
    shm_op *op;
    memcpy(&op, req->impl, sizeof op);
    return op;
}

/* A collective as its caller asks for it: the kind, the buffers, the elements of a rank's block and of all of them,
 * and their type. */
typedef struct {
    int kind;
    const void *send;
    void *recv;
    size_t block, total;
    llm4d_comm_dtype dt;
} shm_call;

static llm4d_code start(llm4d_comm *c, const shm_call *call, llm4d_comm_req *req, llm4d_err *err) {
    const int kind = call->kind;
    const void *send = call->send;
    void *recv = call->recv;
    const size_t block = call->block, total = call->total;
    const llm4d_comm_dtype dt = call->dt;
    shm_group *g = group_of(c);
    llm4d_shm_hub *h = g->hub;
    pthread_mutex_lock(&h->lock);
    shm_op *op = g->spare, *owned;
    if (op) {
        g->spare = op->next;
        owned = op->owned;
    } else if ((op = malloc(sizeof *op))) {
        owned = g->records;
        g->records = op;
    } else {
        pthread_mutex_unlock(&h->lock);
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    }
    const size_t esz = llm4d_comm_dtype_size(dt);
    *op = (shm_op){.g = g, .kind = kind, .dt = dt, .esz = esz, .send = send, .recv = recv, .S = block,
                   .total = total, .state = kind == K_AG ? S_AG : S_RS, .owned = owned};
    op->seq = g->started++;
    if (kind == K_AR && g->hosts == 1) { /* over a shared buffer: in place; else through the slots */
        for (const llm4d_shm_region *reg = g->regions; reg && !op->reg; reg = reg->next)
            if ((const char *)send >= reg->base && (const char *)send + total * esz <= reg->base + reg->bytes)
                op->reg = reg, op->zoff = (size_t)((const char *)send - reg->base);
    }
    op->small = kind == K_AR && g->hosts == 1 && !op->reg && total * esz <= LLM4D_SHM_SMALL_BYTES &&
                total * esz <= g->slot_bytes;
    if (op->reg) op->state = S_Z;
    else if (op->small) op->S = 1; /* one chunk */
    else if (kind == K_AR && g->hosts == 1) op->state = S_AR; /* the fused form; hierarchical: RS, MPI, AG */
    if (g->tail) g->tail->next = op;
    else g->head = op;
    g->tail = op;
    g->pending++;
    memcpy(req->impl, &op, sizeof op);
    if (h->thread_on) pthread_cond_signal(&h->wake); /* the thread takes it from here */
    else advance(g, 1, -1);                          /* as far as it goes now: the first chunk is in */
    pthread_mutex_unlock(&h->lock);
    return LLM4D_OK;
}

/* A slice of an all-reduce: ceil(count / n) elements, rounded up to whole cache lines. */
static size_t slice(size_t count, int n, size_t esz) {
    const size_t line = LLM4D_SHM_LINE / esz, per = (count + (size_t)n - 1) / (size_t)n;
    return (per + line - 1) / line * line;
}

static llm4d_code shm_iallreduce(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt,
                                 llm4d_comm_reduction op, llm4d_comm_req *req, llm4d_err *err) {
    (void)op;
    const shm_call call = {K_AR, buf, buf, slice(count, group_of(c)->n, llm4d_comm_dtype_size(dt)), count, dt};
    return start(c, &call, req, err);
}

static llm4d_code shm_ireduce_scatter(llm4d_comm *c, const void *send, void *recv, size_t recv_count,
                                      llm4d_comm_dtype dt, llm4d_comm_req *req, llm4d_err *err) {
    return start(c, &(shm_call){K_RS, send, recv, recv_count, recv_count * (size_t)c->size, dt}, req, err);
}

static llm4d_code shm_iallgather(llm4d_comm *c, const void *send, void *recv, size_t send_count,
                                 llm4d_comm_dtype dt, llm4d_comm_req *req, llm4d_err *err) {
    return start(c, &(shm_call){K_AG, send, recv, send_count, send_count * (size_t)c->size, dt}, req, err);
}

/* Whether op has completed; if so its record goes back to the spares and its result is returned. */
static llm4d_code finish_locked(shm_op *op, int *done, llm4d_err *err) {
    *done = op->done;
    llm4d_code rc = LLM4D_OK;
    if (op->done) {
        rc = op->rc;
        if (rc != LLM4D_OK && err) *err = op->err;
        op->next = op->g->spare;
        op->g->spare = op;
    }
    return rc;
}

static llm4d_code finish_op(shm_op *op, int *done, llm4d_err *err) {
    llm4d_shm_hub *h = op->g->hub;
    pthread_mutex_lock(&h->lock);
    const llm4d_code rc = finish_locked(op, done, err);
    pthread_mutex_unlock(&h->lock);
    return rc;
}

/* A test never blocks the computing thread behind the progress thread's copy: with the lock taken, "not yet". */
static llm4d_code shm_test(llm4d_comm *c, llm4d_comm_req *req, int *done, llm4d_err *err) {
    llm4d_shm_hub *h = group_of(c)->hub;
    if (h->thread_on && !h->multi_host) {
        *done = 0;
        if (pthread_mutex_trylock(&h->lock) != 0) return LLM4D_OK;
        const llm4d_code rc = finish_locked(op_of(req), done, err);
        pthread_mutex_unlock(&h->lock);
        return rc;
    }
    llm4d_shm_progress_all(h, 0, err);
    return finish_op(op_of(req), done, err);
}

/* A wait without deadline (comm_timeout 0, or the blocking calls): spin briefly, then give the core away, as a
 * job with more ranks than cores needs. */
static llm4d_code shm_wait(llm4d_comm *c, llm4d_comm_req *req, llm4d_err *err) {
    shm_op *op = op_of(req);
    for (unsigned spin = 0;; spin++) {
        llm4d_shm_progress_all(group_of(c)->hub, 1, err);
        int done;
        const llm4d_code rc = finish_op(op, &done, err);
        if (done) return rc;
        if (spin > 2000) {
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
        } else if (spin > 200) {
            sched_yield();
        }
    }
}

static llm4d_code shm_allreduce(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt, llm4d_comm_reduction op,
                                llm4d_err *err) {
    llm4d_comm_req r = {0};
    LLM4D_TRY(shm_iallreduce(c, buf, count, dt, op, &r, err));
    return shm_wait(c, &r, err);
}

static llm4d_code shm_reduce_scatter(llm4d_comm *c, const void *send, void *recv, size_t recv_count,
                                     llm4d_comm_dtype dt, llm4d_err *err) {
    llm4d_comm_req r = {0};
    LLM4D_TRY(shm_ireduce_scatter(c, send, recv, recv_count, dt, &r, err));
    return shm_wait(c, &r, err);
}

static llm4d_code shm_allgather(llm4d_comm *c, const void *send, void *recv, size_t send_count, llm4d_comm_dtype dt,
                                llm4d_err *err) {
    llm4d_comm_req r = {0};
    LLM4D_TRY(shm_iallgather(c, send, recv, send_count, dt, &r, err));
    return shm_wait(c, &r, err);
}

const llm4d_comm_ops llm4d_shm_ops = {
    .backend = "shm",
    .allreduce = shm_allreduce,
    .iallreduce = shm_iallreduce,
    .reduce_scatter = shm_reduce_scatter,
    .ireduce_scatter = shm_ireduce_scatter,
    .allgather = shm_allgather,
    .iallgather = shm_iallgather,
    .test = shm_test,
    .wait = shm_wait,
};

int llm4d_shm_takes(const llm4d_comm *c, llm4d_comm_op op, llm4d_comm_dtype dt, llm4d_comm_reduction red,
                    size_t count) {
    const shm_group *g = c->path_ctx;
    if (c->path != &llm4d_shm_ops || !g || count == 0) return 0;
    if (op == LLM4D_COMM_OP_ALLREDUCE) return red == LLM4D_COMM_SUM && (dt == LLM4D_COMM_F32 || dt == LLM4D_COMM_BF16);
    if (g->hosts > 1) return 0; /* reduce-scatter and all-gather over hosts: MPI's */
    if (op == LLM4D_COMM_OP_REDUCE_SCATTER) return dt == LLM4D_COMM_F32 || dt == LLM4D_COMM_BF16;
    return op == LLM4D_COMM_OP_ALLGATHER;
}

/* ---- attaching a group ---- */

static void unmap(shm_group *g) {
    if (g->seg) munmap(g->seg, g->seg_bytes);
    g->seg = NULL;
}

/* Whole pages: the header (a line per rank after the first line), then the slots. */
size_t llm4d_shm_head_bytes(int n) { return ((size_t)(n + 1) * LLM4D_SHM_LINE + 4095) & ~(size_t)4095; }

/* The host's first rank makes the segment; *why is set when it cannot. */
static void create_segment(shm_group *g, char *name, size_t name_n, char *why, size_t why_n) {
    snprintf(name, name_n, "/llm4d-%d-%u", (int)getpid(), g->hub->made++);
    const int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) {
        snprintf(why, why_n, "shm_open %s: %s", name, strerror(errno));
        return;
    }
    /* reserve the pages now: a full /dev/shm then fails here, not with SIGBUS at the first touch */
    const int e = posix_fallocate(fd, 0, (off_t)g->seg_bytes);
    if (e) {
        snprintf(why, why_n, "a %.0f MiB segment does not fit in /dev/shm (%s; %.0f MiB free there); enlarge it "
                 "(docker run --shm-size=1g, or mount -o remount,size=1G /dev/shm)", (double)g->seg_bytes / 1048576.0,
                 strerror(e), llm4d_shm_free_mib());
        close(fd);
        shm_unlink(name);
        return;
    }
    void *p = mmap(NULL, g->seg_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        snprintf(why, why_n, "mmap of the segment: %s", strerror(errno));
        shm_unlink(name);
        return;
    }
    g->seg = p;
    memset(p, 0, llm4d_shm_head_bytes(g->n));
    g->seg->n = g->n;
    g->seg->slot_bytes = g->slot_bytes;
    atomic_thread_fence(memory_order_release);
    g->seg->magic = SEG_MAGIC;
}

static void open_segment(shm_group *g, const char *name, char *why, size_t why_n) {
    const int fd = shm_open(name, O_RDWR, 0600);
    if (fd < 0) {
        snprintf(why, why_n, "shm_open %s made by this host's first rank: %s", name, strerror(errno));
        return;
    }
    void *p = mmap(NULL, g->seg_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        snprintf(why, why_n, "mmap of %s: %s", name, strerror(errno));
        return;
    }
    g->seg = p;
    if (g->seg->magic != SEG_MAGIC || g->seg->n != g->n || g->seg->slot_bytes != g->slot_bytes) {
        snprintf(why, why_n, "segment %s is not this group's", name);
        unmap(g);
    }
}

llm4d_code llm4d_shm_agree(llm4d_comm *c, const char *why, int *all_ok, llm4d_err *err) {
    int64_t bad = why[0] != 0;
    LLM4D_TRY(c->ops->allreduce(c, &bad, 1, LLM4D_COMM_I64, LLM4D_COMM_MAX, err));
    *all_ok = bad == 0;
    return LLM4D_OK;
}

double llm4d_shm_free_mib(void) {
    struct statvfs sv;
    return statvfs("/dev/shm", &sv) == 0 ? (double)sv.f_bavail * (double)sv.f_frsize / 1048576.0 : -1;
}

/* The segment of g's host: made, mapped by all, then unlinked (the name is gone; the mappings stay). */
static llm4d_code make_segment(llm4d_comm *c, llm4d_comm *local, shm_group *g, char *why, size_t why_n,
                               llm4d_err *err) {
    g->seg_bytes = llm4d_shm_head_bytes(g->n) + (size_t)g->n * 2 * g->slot_bytes;
    char name[64] = "";
    if (g->r == 0) create_segment(g, name, sizeof name, why, why_n);
    if (why[0]) name[0] = 0; /* tells the others */
    LLM4D_TRY(local->ops->broadcast(local, name, sizeof name, LLM4D_COMM_BYTE, 0, err));
    if (g->r != 0 && !name[0]) snprintf(why, why_n, "this host's first rank could not make the segment");
    else if (g->r != 0) open_segment(g, name, why, why_n);
    LLM4D_TRY(local->ops->barrier(local, err)); /* everyone has mapped it (or failed) */
    if (g->r == 0 && name[0]) shm_unlink(name);
    int ok;
    LLM4D_TRY(llm4d_shm_agree(c, why, &ok, err));
    if (!ok && !why[0]) snprintf(why, why_n, "another rank of the group could not map its host's segment");
    if (!ok) unmap(g);
    g->slots = g->seg ? (char *)g->seg + llm4d_shm_head_bytes(g->n) : NULL;
    return LLM4D_OK;
}

llm4d_code llm4d_shm_attach(llm4d_comm *c, llm4d_shm_hub *h, llm4d_err *err) {
    snprintf(c->path_desc, sizeof c->path_desc, "MPI");
    if (!h || c->size == 1 || strcmp(c->ops->backend, "mpi")) return LLM4D_OK;
    if (!h->opts.enabled) {
        snprintf(c->path_desc, sizeof c->path_desc, "MPI (comm_path mpi)");
        return LLM4D_OK;
    }
    /* the ranks of this host */
    llm4d_comm *local = NULL;
    int same = 1;
    LLM4D_TRY(llm4d_host_split(c, &local, &same, err));
    shm_group *g = calloc(1, sizeof *g);
    int64_t *sizes = calloc((size_t)c->size, sizeof *sizes);
    char why[200] = "";
    llm4d_code rc = g && sizes ? LLM4D_OK : llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
    if (!same) snprintf(why, sizeof why, "two hosts' names hash alike");
    int64_t mine = local->size;
    if (rc == LLM4D_OK) rc = c->ops->allgather(c, &mine, sizes, 1, LLM4D_COMM_I64, err);
    if (rc == LLM4D_OK) {
        g->hub = h;
        g->n = local->size;
        g->r = local->rank;
        g->hosts = c->size / g->n;
        g->slot_bytes = h->opts.slot_bytes;
        for (int j = 0; j < c->size && !why[0]; j++)
            if (sizes[j] != mine)
                snprintf(why, sizeof why, "its hosts hold different numbers of its ranks (%d here, %lld on another)",
                         g->n, (long long)sizes[j]);
        if (!why[0] && g->n == 1) snprintf(why, sizeof why, "one rank per host");
        if (!why[0] && g->n > LLM4D_SHM_MAX_RANKS)
            snprintf(why, sizeof why, "more than %d ranks on a host", LLM4D_SHM_MAX_RANKS);
    }
    int ok = 0;
    if (rc == LLM4D_OK) rc = llm4d_shm_agree(c, why, &ok, err); /* the same decision on every host */
    if (rc == LLM4D_OK && ok) rc = make_segment(c, local, g, why, sizeof why, err);
    if (rc == LLM4D_OK && g->seg && g->hosts > 1) /* rank r of every host */
        rc = c->ops->split(c, g->r, c->rank, "cross-host", &g->cross, err);
    free(sizes);
    llm4d_comm_destroy(local);
    if (rc != LLM4D_OK || !g->seg) {
        if (g) unmap(g);
        free(g);
        if (rc == LLM4D_OK) snprintf(c->path_desc, sizeof c->path_desc, "MPI (no shared memory: %s)", why);
        return rc;
    }
    pthread_mutex_lock(&h->lock);
    if (h->n_groups == h->cap_groups) {
        const int cap = h->cap_groups ? 2 * h->cap_groups : 8;
        shm_group **p = realloc(h->groups, (size_t)cap * sizeof *p);
        if (!p) {
            pthread_mutex_unlock(&h->lock);
            unmap(g);
            llm4d_comm_destroy(g->cross);
            free(g);
            return llm4d_fail(err, LLM4D_ENOMEM, "out of memory");
        }
        h->groups = p;
        h->cap_groups = cap;
    }
    h->groups[h->n_groups++] = g;
    h->multi_host |= g->hosts > 1;
    pthread_mutex_unlock(&h->lock);
    if (h->opts.progress_thread && !h->thread_on) {
        if (pthread_create(&h->thread, NULL, progress_main, h) != 0)
            return llm4d_fail(err, LLM4D_EINTERNAL, "cannot start the communication progress thread");
        h->thread_on = 1;
    }
    c->path = &llm4d_shm_ops;
    c->path_ctx = g;
    const double mib = (double)g->seg_bytes / 1048576.0;
    if (g->hosts > 1)
        snprintf(c->path_desc, sizeof c->path_desc, "hierarchical: shared memory among the %d ranks of each of %d "
                 "hosts (%.1f MiB segment), MPI between hosts for all-reduce; reduce-scatter and all-gather on MPI",
                 g->n, g->hosts, mib);
    else
        snprintf(c->path_desc, sizeof c->path_desc, "shared memory (%d ranks, %.1f MiB segment, progressed %s)", g->n,
                 mib, h->opts.progress_thread ? "by a thread" : "in waits and between layers");
    return LLM4D_OK;
}

llm4d_code llm4d_shm_share(llm4d_comm *c, void *buf, size_t bytes, int *shared, char *why, size_t why_n,
                           llm4d_err *err) {
    shm_group *g = c->path == &llm4d_shm_ops ? c->path_ctx : NULL;
    *shared = 0;
    if (!g || g->hosts > 1) { /* the same answer on every rank: the path is chosen for the whole group */
        snprintf(why, why_n, "%s", g ? "the group spans hosts" : "the group is not on the shared-memory path");
        return LLM4D_OK;
    }
    llm4d_shm_region *reg = NULL;
    LLM4D_TRY(llm4d_shm_region_make(c, buf, bytes, g->hub->made++, &reg, why, why_n, err));
    if (!reg) return LLM4D_OK;
    pthread_mutex_lock(&g->hub->lock);
    reg->next = g->regions;
    g->regions = reg;
    pthread_mutex_unlock(&g->hub->lock);
    *shared = 1;
    return LLM4D_OK;
}

void llm4d_shm_unshare(llm4d_comm *c, void *buf) {
    shm_group *g = c && c->path == &llm4d_shm_ops ? c->path_ctx : NULL;
    if (!g) return;
    pthread_mutex_lock(&g->hub->lock);
    llm4d_shm_region **at = &g->regions;
    while (*at && (*at)->base != buf) at = &(*at)->next;
    llm4d_shm_region *reg = *at;
    if (reg) *at = reg->next;
    /* an operation on it still queued is one a wait gave up on (a peer hung past the deadline; the job is ending):
     * abandoned, never advanced again, and the record kept for it until the group goes; the buffer is its owner's */
    int abandoned = 0;
    for (shm_op *op = g->head; reg && op; op = op->next)
        if (op->reg == reg && op->state != S_DONE) {
            op->rc = llm4d_fail(&op->err, LLM4D_EINTERNAL, "an all-reduce over a shared buffer of group %s abandoned "
                                "when its buffer was given back", c->name);
            op->state = S_DONE, abandoned = 1;
        }
    if (abandoned) reg->next = g->retired, g->retired = reg;
    pthread_mutex_unlock(&g->hub->lock);
    if (abandoned) llm4d_shm_region_give_back(reg);
    else llm4d_shm_region_free(reg);
}

int llm4d_shm_host_ranks(const llm4d_comm *c, int *hosts) {
    const shm_group *g = c && c->path == &llm4d_shm_ops ? c->path_ctx : NULL;
    if (hosts) *hosts = g ? g->hosts : 0;
    return g ? g->n : 0;
}

void llm4d_shm_detach(llm4d_comm *c) {
    shm_group *g = c->path_ctx;
    if (!g) return;
    llm4d_shm_hub *h = g->hub;
    pthread_mutex_lock(&h->lock);
    for (int i = 0; i < h->n_groups; i++)
        if (h->groups[i] == g) {
            h->groups[i] = h->groups[--h->n_groups];
            break;
        }
    pthread_mutex_unlock(&h->lock);
    for (llm4d_shm_region **list = &g->regions; list; list = list == &g->regions ? &g->retired : NULL)
        while (*list) { /* the buffers still shared go back to their owners' private memory */
            llm4d_shm_region *reg = *list;
            *list = reg->next;
            llm4d_shm_region_free(reg);
        }
    unmap(g);
    llm4d_comm_destroy(g->cross);
    while (g->records) { /* the spares, and any record whose request was given up */
        shm_op *op = g->records;
        g->records = op->owned;
        free(op);
    }
    free(g);
    c->path = NULL;
    c->path_ctx = NULL;
}
