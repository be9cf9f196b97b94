/* record.c — the recording backend, communicator and hooks (see record.h). Every kernel method appends one call
 * with the sizes that decide its cost (d), the values only a replay needs (aux) and its pointers (p); nothing is
 * computed and no tensor memory exists. The kernel methods are made from the method list (backend/methods.h, whose
 * entries say what each records); memory, the copies to and from the host, and the sizes are written here. */
#include "plan/record.h"

#include <stdlib.h>
#include <string.h>

/* Fake addresses start high in the user address space, where nothing is mapped on x86-64 Linux, 64-byte aligned. */
#define FAKE_BASE ((uintptr_t)1 << 45)

struct llm4d_event {
    int unused;
};

typedef struct {
    llm4d_rec *r;
    const llm4d_backend *like;
    struct llm4d_event ev;
} rec_ctx;

static llm4d_rec *rec_of(llm4d_backend *be) { return ((rec_ctx *)be->ctx)->r; }

uintptr_t llm4d_rec_fake(llm4d_rec *r, size_t bytes) {
    if (!r->next) r->next = FAKE_BASE;
    if (r->n_allocs == r->cap_allocs) {
        const int cap = r->cap_allocs ? 2 * r->cap_allocs : 256;
        llm4d_rc_alloc *na = realloc(r->allocs, (size_t)cap * sizeof *na);
        if (!na) {
            r->failed = 1;
            return 0;
        }
        r->allocs = na, r->cap_allocs = cap;
    }
    const uintptr_t a = r->next;
    r->allocs[r->n_allocs++] = (llm4d_rc_alloc){a, bytes};
    r->next += (bytes + 127) / 64 * 64; /* a gap of at least 64 bytes: one past the end is nobody else's */
    return a;
}

const llm4d_rc_alloc *llm4d_rec_find(const llm4d_rec *r, uintptr_t a) {
    int lo = 0, hi = r->n_allocs - 1;
    while (lo <= hi) {
        const int mid = (lo + hi) / 2;
        const llm4d_rc_alloc *x = &r->allocs[mid];
        if (a < x->base) hi = mid - 1;
        else if (a >= x->base + (x->bytes ? x->bytes : 1)) lo = mid + 1;
        else return x;
    }
    return NULL;
}

static llm4d_rc_call *push(llm4d_rec *r, int op) {
    if (r->paused) return NULL;
    if (r->n == r->cap) {
        const int cap = r->cap ? 2 * r->cap : 256;
        llm4d_rc_call *nc = realloc(r->calls, (size_t)cap * sizeof *nc);
        if (!nc) {
            r->failed = 1;
            return NULL;
        }
        r->calls = nc, r->cap = cap;
    }
    llm4d_rc_call *c = &r->calls[r->n++];
    memset(c, 0, sizeof *c);
    c->op = (uint16_t)op;
    return c;
}


void llm4d_rec_free(llm4d_rec *r) {
    free(r->gbuf);
    free(r->calls);
    free(r->allocs);
    memset(r, 0, sizeof *r);
}

/* ---- the kernels the method list describes (backend/methods.h, rec CALL) ---- */

/* A pointer argument as a call records it: its address, and its element type (fp32 for every untyped one). */
typedef struct {
    const void *p;
    llm4d_ftype t;
} rc_ptr;

/* Append the call k (op, d, aux) with pointer arguments p[0..np) in slots 0.. (a typed one's type in the cost key,
 * a tensor not given having none) and, for a dropout d, its probability (the cost depends on whether it draws),
 * and what a replay needs: its T, first token and sample ids (slot 7). */
static void rec_call(llm4d_backend *be, const llm4d_rc_call *k, const rc_ptr *p, int np, const llm4d_dropout *d) {
    llm4d_rc_call *c = push(rec_of(be), k->op);
    if (!c) return;
    *c = *k;
    for (int i = 0; i < np; i++) {
        c->p[i] = (uintptr_t)p[i].p;
        if (p[i].p) c->ty |= (uint16_t)((unsigned)p[i].t << (2 * i));
    }
    if (!d) return;
    c->drop = d->p;
    c->aux[2] = d->T, c->aux[3] = d->tok0;
    c->p[7] = (uintptr_t)d->sample_ids;
}

/* Names every argument of a generated method once, unevaluated (sizeof): those its key does not name (an AdamW's
 * hyperparameters) are no cost, and would be unused parameters. Declared only: it is never called. */
int llm4d_rec_mention(llm4d_backend *be, ...);

/* A value a method returns to the host: zero (VOID: none). A copy back to the host writes zeros (below). */
#define ZERO_VOID
#define ZERO_RET(t_) return (t_){0};

/* The list's pointer arguments as slots (the extents are the guard's), and its dropouts. */
#define FIN(p_, n_) {(p_), LLM4D_F32}
#define FOUT(p_, n_) {(p_), LLM4D_F32}
#define IN(p_, bytes_) {(p_), LLM4D_F32}
#define OUT(p_, bytes_) {(p_), LLM4D_F32}
#define TIN(x_, n_) {(x_).p, (x_).t}
#define TOUT(x_, n_) {(x_).p, (x_).t}
#define RDROP_NODROP NULL
#define RDROP_DROP(d_, rows_, bits_) (d_)
#define SLOTS_NODROP LLM4D_RC_PTRS
#define SLOTS_DROP(d_, rows_, bits_) (LLM4D_RC_PTRS - 1)
#define KEY(op_, kind_, ...) .op = LLM4D_RC_##op_, __VA_ARGS__

#define R_CALL(shape_, name_, params_, args_, ptrs_, drop_, key_)                                                   \
    static LLM4D_RT_##shape_ r_##name_ params_ {                                                                     \
        (void)sizeof(llm4d_rec_mention args_);                                                                       \
        const llm4d_rc_call k_ = {KEY key_};                                                                         \
        const rc_ptr p_[] = {LLM4D_UNPAREN ptrs_};                                                                   \
        _Static_assert(sizeof p_ / sizeof *p_ <= SLOTS_##drop_, #name_ ": more pointers than a call's slots");      \
        rec_call(be, &k_, p_, (int)(sizeof p_ / sizeof *p_), RDROP_##drop_);                                         \
        ZERO_##shape_                                                                                                \
    }
#define R_SKIP(shape_, name_, params_, args_, ptrs_, drop_, key_)                                                   \
    static LLM4D_RT_##shape_ r_##name_ params_ {                                                                     \
        (void)sizeof(llm4d_rec_mention args_);                                                                       \
        ZERO_##shape_                                                                                                \
    }
#define R_OWN(...)
#define R_NONE(...)
#define R_METHOD(shape_, name_, params_, args_, guard_, ptrs_, drop_, rec_, key_)                                   \
    R_##rec_(shape_, name_, params_, args_, ptrs_, drop_, key_)
LLM4D_BACKEND_METHODS(R_METHOD)

/* ---- the methods the list leaves to this file (rec OWN): memory, copies to and from the host, sizes ---- */

static void *r_alloc(llm4d_backend *be, llm4d_mem *mem, llm4d_mem_category c, size_t bytes) {
    const uintptr_t a = llm4d_rec_fake(rec_of(be), bytes);
    if (a && mem) llm4d_mem_account(mem, c, (long long)bytes);
    return (void *)a;
}
static void r_free(llm4d_backend *be, llm4d_mem *mem, llm4d_mem_category c, void *p, size_t bytes) {
    (void)be, (void)p;
    if (mem) llm4d_mem_account(mem, c, -(long long)bytes);
}
static void *r_alloc_host(llm4d_backend *be, llm4d_mem *mem, llm4d_mem_category c, size_t bytes) {
    (void)be;
    return llm4d_mem_alloc(mem, c, bytes ? bytes : 1);
}
static void r_free_host(llm4d_backend *be, llm4d_mem *mem, llm4d_mem_category c, void *p, size_t bytes) {
    (void)be;
    llm4d_mem_free(mem, c, p, bytes ? bytes : 1);
}
static void r_mem_info(llm4d_backend *be, size_t *free_bytes, size_t *total_bytes) {
    (void)be;
    *free_bytes = *total_bytes = (size_t)1 << 62;
}
/* A copy to the host (the loss read back) writes zeros where the host reads: the host never sees fake memory. */
static void r_copy_async(llm4d_backend *be, void *dst, const void *src, size_t bytes, llm4d_copy_kind kind,
                         llm4d_stream s) {
    (void)s;
    if (kind == LLM4D_D2H) memset(dst, 0, bytes);
    if (kind != LLM4D_D2D) return; /* transfers to and from the host are not a step's kernels */
    r_copy(be, dst, src, bytes);
}
static void r_copy_2d(llm4d_backend *be, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                      size_t rows, llm4d_copy_kind kind, llm4d_stream s) {
    (void)dpitch, (void)spitch, (void)s;
    if (kind == LLM4D_D2H)
        for (size_t i = 0; i < rows; i++) memset((char *)dst + i * dpitch, 0, width);
    if (kind != LLM4D_D2D) return;
    r_copy(be, dst, src, width * rows);
}
static llm4d_event *r_event_create(llm4d_backend *be) { return &((rec_ctx *)be->ctx)->ev; }
/* One call of the total's size: what the fused pass costs is a sumsq over all of it. */
static double r_sumsq_many(llm4d_backend *be, int n, const float *const *x, const size_t *len, double *each) {
    size_t total = 0;
    for (int k = 0; k < n; k++) {
        total += len[k];
        if (each) each[k] = 0.0;
    }
    llm4d_rc_call *c = push(rec_of(be), LLM4D_RC_SUMSQ);
    if (c) c->d[0] = (int64_t)total, c->p[0] = n ? (uintptr_t)x[0] : 0;
    return 0.0;
}
static size_t r_weight_copy_bytes(llm4d_backend *be, llm4d_precision prec) {
    const rec_ctx *x = be->ctx;
    if (x->like && x->like->weight_copy_bytes) return x->like->weight_copy_bytes((llm4d_backend *)x->like, prec);
    return prec == LLM4D_PREC_FP32 ? 4 : 2;
}
static void r_weights_changed(llm4d_backend *be, const void *p, size_t bytes) { (void)be, (void)p, (void)bytes; }
static void r_destroy(llm4d_backend *be) {
    free(be->ctx);
    free(be);
}

/* The table: every method of the list, NULL where the recorder has none. */
#define R_SET_CALL(name_) be->name_ = r_##name_;
#define R_SET_SKIP(name_) be->name_ = r_##name_;
#define R_SET_OWN(name_) be->name_ = r_##name_;
#define R_SET_NONE(name_) be->name_ = NULL;
#define R_SET(shape_, name_, params_, args_, guard_, ptrs_, drop_, rec_, ...) R_SET_##rec_(name_)

llm4d_code llm4d_rec_backend_create(llm4d_backend **out, llm4d_rec *r, const llm4d_backend *like, llm4d_err *err) {
    llm4d_backend *be = calloc(1, sizeof *be);
    rec_ctx *x = calloc(1, sizeof *x);
    if (!be || !x) {
        free(be), free(x);
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory creating the recording backend");
    }
    x->r = r, x->like = like;
    *be = (llm4d_backend){.name = "record", .ctx = x, .nthreads = 1, .host_addressable = 0};
    LLM4D_BACKEND_METHODS(R_SET)
    /* a backend without weight copies has nothing to be told (the model asks whether it must tell) */
    if (!like || !like->weights_changed) be->weights_changed = NULL;
    *out = be;
    return LLM4D_OK;
}

/* ---- the communicator ---- */

static void comm_rec(llm4d_comm *c, llm4d_comm_op op, size_t count, llm4d_comm_dtype dt) {
    llm4d_rc_call *x = push((llm4d_rec *)c->ctx, LLM4D_RC_COMM);
    if (x) x->d[0] = op, x->d[1] = (int64_t)(count * llm4d_comm_dtype_size(dt)), x->d[2] = c->size;
}
static llm4d_code c_barrier(llm4d_comm *c, llm4d_err *err) {
    (void)c, (void)err;
    return LLM4D_OK;
}
static llm4d_code c_allreduce(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt, llm4d_comm_reduction op,
                              llm4d_err *err) {
    (void)buf, (void)op, (void)err;
    comm_rec(c, LLM4D_COMM_OP_ALLREDUCE, count, dt);
    return LLM4D_OK;
}
static llm4d_code c_iallreduce(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt, llm4d_comm_reduction op,
                               llm4d_comm_req *req, llm4d_err *err) {
    (void)req;
    return c_allreduce(c, buf, count, dt, op, err);
}
static llm4d_code c_reduce_scatter(llm4d_comm *c, const void *send, void *recv, size_t recv_count,
                                   llm4d_comm_dtype dt, llm4d_err *err) {
    (void)send, (void)recv, (void)err;
    comm_rec(c, LLM4D_COMM_OP_REDUCE_SCATTER, recv_count, dt);
    return LLM4D_OK;
}
static llm4d_code c_ireduce_scatter(llm4d_comm *c, const void *send, void *recv, size_t recv_count,
                                    llm4d_comm_dtype dt, llm4d_comm_req *req, llm4d_err *err) {
    (void)req;
    return c_reduce_scatter(c, send, recv, recv_count, dt, err);
}
static llm4d_code c_allgather(llm4d_comm *c, const void *send, void *recv, size_t send_count, llm4d_comm_dtype dt,
                              llm4d_err *err) {
    (void)send, (void)recv, (void)err;
    comm_rec(c, LLM4D_COMM_OP_ALLGATHER, send_count, dt);
    return LLM4D_OK;
}
static llm4d_code c_iallgather(llm4d_comm *c, const void *send, void *recv, size_t send_count, llm4d_comm_dtype dt,
                               llm4d_comm_req *req, llm4d_err *err) {
    (void)req;
    return c_allgather(c, send, recv, send_count, dt, err);
}
static llm4d_code c_broadcast(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt, int root, llm4d_err *err) {
    (void)buf, (void)root, (void)err;
    comm_rec(c, LLM4D_COMM_OP_BROADCAST, count, dt);
    return LLM4D_OK;
}
static llm4d_code c_p2p(llm4d_comm *c, const void *buf, size_t count, llm4d_comm_dtype dt, int peer, int tag,
                        llm4d_err *err) {
    (void)c, (void)buf, (void)count, (void)dt, (void)peer, (void)tag;
    return llm4d_fail(err, LLM4D_EINTERNAL, "a tensor-parallel group does not send point to point");
}
static llm4d_code c_ip2p(llm4d_comm *c, const void *buf, size_t count, llm4d_comm_dtype dt, int peer, int tag,
                         llm4d_comm_req *req, llm4d_err *err) {
    (void)req;
    return c_p2p(c, buf, count, dt, peer, tag, err);
}
static llm4d_code c_recv(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt, int peer, int tag,
                         llm4d_err *err) {
    return c_p2p(c, buf, count, dt, peer, tag, err);
}
static llm4d_code c_irecv(llm4d_comm *c, void *buf, size_t count, llm4d_comm_dtype dt, int peer, int tag,
                          llm4d_comm_req *req, llm4d_err *err) {
    return c_ip2p(c, buf, count, dt, peer, tag, req, err);
}
static llm4d_code c_test(llm4d_comm *c, llm4d_comm_req *req, int *done, llm4d_err *err) {
    (void)c, (void)req, (void)err;
    *done = 1;
    return LLM4D_OK;
}
static llm4d_code c_wait(llm4d_comm *c, llm4d_comm_req *req, llm4d_err *err) {
    (void)c, (void)req, (void)err;
    return LLM4D_OK;
}
static llm4d_code c_split(llm4d_comm *c, int color, int key, const char *name, llm4d_comm **out, llm4d_err *err) {
    (void)c, (void)color, (void)key, (void)name, (void)out;
    return llm4d_fail(err, LLM4D_EINTERNAL, "the recording communicator is not split");
}
static void c_abort(llm4d_comm *c, int code) {
    (void)c;
    exit(code);
}
static void c_destroy(llm4d_comm *c) { free(c); }

static const llm4d_comm_ops rec_comm_ops = {
    .backend = "record", .barrier = c_barrier, .allreduce = c_allreduce, .iallreduce = c_iallreduce,
    .reduce_scatter = c_reduce_scatter, .ireduce_scatter = c_ireduce_scatter, .allgather = c_allgather,
    .iallgather = c_iallgather, .broadcast = c_broadcast, .send = c_p2p, .recv = c_recv, .isend = c_ip2p,
    .irecv = c_irecv, .test = c_test, .wait = c_wait, .split = c_split, .abort = c_abort, .destroy = c_destroy,
};

llm4d_code llm4d_rec_comm_create(llm4d_comm **out, llm4d_rec *r, int size, int rank, llm4d_err *err) {
    llm4d_comm *c = calloc(1, sizeof *c);
    if (!c) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory creating the recording communicator");
    c->ops = &rec_comm_ops;
    c->ctx = r;
    c->rank = rank, c->size = size;
    snprintf(c->name, sizeof c->name, "mp");
    *out = c;
    return LLM4D_OK;
}

/* ---- the hooks ---- */

static void hook_rec(llm4d_rec *r, int op, int group, int pass) {
    llm4d_rc_call *c = push(r, op);
    if (c) c->d[0] = group, c->d[1] = pass;
}
/* A group's weights and gradients: one fake buffer of the group's size per group and kind, made on first use (the
 * same buffer every time, as the engines' flat buffers are). */
static float *group_buf(llm4d_rec *r, int group, int kind) {
    if (!r->table || group < 0 || group >= r->table->n_groups) return NULL;
    if (!r->gbuf) r->gbuf = calloc(2 * (size_t)r->table->n_groups, sizeof *r->gbuf);
    if (!r->gbuf) {
        r->failed = 1;
        return NULL;
    }
    uintptr_t *b = &r->gbuf[2 * group + kind];
    if (!*b) *b = llm4d_rec_fake(r, (r->table->g[group].hi - r->table->g[group].lo) * sizeof(float));
    return (float *)*b;
}
static float *h_params_for(void *ctx, int group, int pass) {
    hook_rec(ctx, LLM4D_RC_PARAMS_FOR, group, pass);
    return group_buf(ctx, group, 0);
}
static void h_release(void *ctx, int group, int pass) { hook_rec(ctx, LLM4D_RC_RELEASE, group, pass); }
static float *h_grads_for(void *ctx, int group) {
    hook_rec(ctx, LLM4D_RC_GRADS_FOR, group, 0);
    return group_buf(ctx, group, 1);
}
static void h_grads_done(void *ctx, int group, const llm4d_event *ready) {
    (void)ready;
    hook_rec(ctx, LLM4D_RC_GRADS_DONE, group, 0);
}

llm4d_gpt_hooks llm4d_rec_hooks(llm4d_rec *r, const llm4d_param_table *t) {
    r->table = t;
    free(r->gbuf);
    r->gbuf = NULL;
    return (llm4d_gpt_hooks){.ctx = r, .params_for = h_params_for, .release = h_release, .grads_for = h_grads_for,
                             .grads_done = h_grads_done};
}

/* ---- what a call is ---- */

/* A kernel's kind and name are its method's in the list (methods that share an op, linear_forward and
 * linear_forward_act, share them: the first one's name). */
#define OP_OF(op_, kind_, ...) LLM4D_RC_##op_
#define KIND_OF(op_, kind_, ...) LLM4D_WORK_##kind_
#define KIND_CALL(name_, key_) if (c->op == OP_OF key_) return KIND_OF key_;
#define KIND_SKIP(name_, key_)
#define KIND_OWN(name_, key_)
#define KIND_NONE(name_, key_)
#define KIND(shape_, name_, params_, args_, guard_, ptrs_, drop_, rec_, key_) KIND_##rec_(name_, key_)

llm4d_work llm4d_rc_kind(const llm4d_rc_call *c) {
    LLM4D_BACKEND_METHODS(KIND)
    return LLM4D_WORK_ELEM;
}

double llm4d_rc_flops(const llm4d_rc_call *c) {
    switch (c->op) {
    case LLM4D_RC_LINEAR_FWD: return 2.0 * c->d[0] * c->d[1] * c->d[2];
    case LLM4D_RC_LINEAR_BWD: return 2.0 * c->d[0] * c->d[1] * c->d[2] * (double)(c->d[4] + c->d[5]);
    /* causal flash attention: S = Q K^T and O = P V over half the T x T square (forward), and backward's five
     * products (S again, dV, dP, dQ, dK): 2.5 times forward; per query head (d[2]), grouped-query or not */
    case LLM4D_RC_ATTN_FWD: return 2.0 * c->d[0] * c->d[2] * (double)c->d[1] * c->d[1] * c->d[3];
    case LLM4D_RC_ATTN_BWD: return 5.0 * c->d[0] * c->d[2] * (double)c->d[1] * c->d[1] * c->d[3];
    default: return 0.0;
    }
}

/* Bytes of one element of pointer argument i (4: fp32, every weight and statistic). */
static double esz(const llm4d_rc_call *c, int i) { return (double)llm4d_ftype_size(llm4d_rc_type(c, i)); }

double llm4d_rc_bytes(const llm4d_rc_call *c) {
    const double f = sizeof(float);
    const double N = (double)c->d[0], C = (double)c->d[1];
    switch (c->op) {
    case LLM4D_RC_LINEAR_FWD:
        return esz(c, 1) * N * C + f * (double)c->d[2] * C + esz(c, 0) * N * (double)c->d[2];
    case LLM4D_RC_LINEAR_BWD: /* dinp not computed (d[4] = 0) counts as inp, as it counted before types */
        return (esz(c, c->d[4] ? 0 : 4) + esz(c, 4)) * N * C + f * 2 * (double)c->d[2] * C +
               esz(c, 3) * 2 * N * (double)c->d[2];
    case LLM4D_RC_EMBED_FWD:
    case LLM4D_RC_EMBED_BWD: return f * 2 * (double)c->d[1] * (double)c->d[2];
    case LLM4D_RC_POS_FWD:
    case LLM4D_RC_POS_BWD:
    case LLM4D_RC_BIAS_FWD: return f * 2 * N * C;
    case LLM4D_RC_BIAS_BWD: return esz(c, 1) * 2 * N * C;
    case LLM4D_RC_DROP_FWD:
    case LLM4D_RC_DROP_BWD: return (esz(c, 0) + esz(c, 1)) * N * C;
    case LLM4D_RC_LN_FWD: return (esz(c, 0) + 2 * esz(c, 3)) * N * C; /* the input read twice */
    case LLM4D_RC_DROPADD_FWD:
    case LLM4D_RC_DROPADD_BWD: return (esz(c, 0) + esz(c, 1) + esz(c, 2)) * N * C;
    case LLM4D_RC_LN_BWD: return (2 * esz(c, 0) + esz(c, 3) + esz(c, 4)) * N * C; /* dinp read, written */
    case LLM4D_RC_GELU_FWD: return (esz(c, 0) + esz(c, 1)) * N;
    case LLM4D_RC_GELU_BWD: return (esz(c, 0) + esz(c, 1) + esz(c, 2)) * N;
    /* qkv is 3 of the 4 (forward: qkv, out) or 8 (backward: dqkv, dout, out, qkv) [B, T, NH x HS] blocks; with
     * grouped-query attention (d[4] = NKV key/value heads, 0: NH) 1 + 2 NKV / NH of them */
    case LLM4D_RC_ATTN_FWD:
        if (c->d[4]) return (esz(c, 2) * (double)(c->d[2] + 2 * c->d[4]) + esz(c, 0) * (double)c->d[2]) *
                            (double)c->d[0] * c->d[1] * c->d[3];
        return (3 * esz(c, 2) + esz(c, 0)) * (double)c->d[0] * c->d[1] * c->d[2] * c->d[3];
    case LLM4D_RC_ATTN_BWD:
        if (c->d[4])
            return ((esz(c, 0) + esz(c, 3)) * (double)(c->d[2] + 2 * c->d[4]) +
                    (esz(c, 1) + esz(c, 2)) * (double)c->d[2]) * (double)c->d[0] * c->d[1] * c->d[3];
        return (3 * esz(c, 0) + esz(c, 1) + esz(c, 2) + 3 * esz(c, 3)) * (double)c->d[0] * c->d[1] *
               c->d[2] * c->d[3];
    case LLM4D_RC_XENT_FWD: return esz(c, 1) * N * C;
    case LLM4D_RC_XENT_BWD: /* no dlogits (d[3] = 0) counts as logits */
        return (esz(c, c->d[3] ? 1 : 2) + esz(c, 2)) * N * C;
    case LLM4D_RC_XENT_RESCALE: return f * 3 * N;
    /* params, grads, m, v read, params, m, v written; the gradients zeroed (d[1]): written, read for ownership */
    case LLM4D_RC_ADAMW: return f * (c->d[1] ? 9 : 7) * N;
    case LLM4D_RC_SUMSQ:
    case LLM4D_RC_DOT:
    case LLM4D_RC_SCALE: return f * N;
    case LLM4D_RC_ADD: return f * 3 * N;
    case LLM4D_RC_ZERO: return N;
    case LLM4D_RC_COPY: return 2 * N;
    case LLM4D_RC_CONVERT: return (esz(c, 0) + esz(c, 1)) * N;
    case LLM4D_RC_RMSNORM_FWD: return (esz(c, 0) + 2 * esz(c, 2)) * N * C; /* the input read twice */
    case LLM4D_RC_RMSNORM_BWD: return (2 * esz(c, 0) + esz(c, 2) + esz(c, 3)) * N * C; /* dinp read, written */
    /* the N x NH x HS values a RoPE turns (d: N, NH, HS, ld), read and written */
    case LLM4D_RC_ROPE_FWD:
    case LLM4D_RC_ROPE_BWD: return (esz(c, 0) + esz(c, 1)) * N * C * (double)c->d[2];
    /* C is F: the [N, 2F] gate and up values, the [N, F] output or output gradient */
    case LLM4D_RC_SWIGLU_FWD: return (esz(c, 0) + 2 * esz(c, 1)) * N * C;
    case LLM4D_RC_SWIGLU_BWD: return (2 * esz(c, 0) + 2 * esz(c, 1) + esz(c, 2)) * N * C;
    default: return 0.0;
    }
}
