/* record.c — the recording backend, communicator and hooks (see record.h). Every kernel method appends one call
 * with the sizes that decide its cost (d), the values only a replay needs (aux) and its pointers (p); nothing is
 * computed and no tensor memory exists. */
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

#define P(x) ((uintptr_t)(x))
#define REC(op_) llm4d_rc_call *c = push(rec_of(be), op_); if (!c) return

void llm4d_rec_clear(llm4d_rec *r) { r->n = 0; }

void llm4d_rec_free(llm4d_rec *r) {
    free(r->gbuf);
    free(r->calls);
    free(r->allocs);
    memset(r, 0, sizeof *r);
}

/* ---- memory, copies, streams ---- */

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
static void r_zero(llm4d_backend *be, void *p, size_t bytes) {
    REC(LLM4D_RC_ZERO);
    c->d[0] = (int64_t)bytes, c->p[0] = P(p);
}
static void r_copy(llm4d_backend *be, void *dst, const void *src, size_t bytes) {
    REC(LLM4D_RC_COPY);
    c->d[0] = (int64_t)bytes, c->p[0] = P(dst), c->p[1] = P(src);
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
static void r_event_destroy(llm4d_backend *be, llm4d_event *ev) { (void)be, (void)ev; }
static void r_event_record(llm4d_backend *be, llm4d_event *ev, llm4d_stream s) { (void)be, (void)ev, (void)s; }
static void r_stream_wait(llm4d_backend *be, llm4d_stream s, const llm4d_event *ev) { (void)be, (void)ev, (void)s; }
static void r_event_sync(llm4d_backend *be, const llm4d_event *ev) { (void)be, (void)ev; }
static void r_stream_sync(llm4d_backend *be, llm4d_stream s) { (void)be, (void)s; }

/* ---- kernels ---- */

/* Pointer slot i holds the typed tensor t: its address, and its type in the cost key (a tensor not given has none). */
static void put(llm4d_rc_call *c, int i, const void *p, llm4d_ftype t) {
    c->p[i] = P(p);
    if (p) c->ty |= (uint16_t)((unsigned)t << (2 * i));
}
#define PT(i, x) put(c, i, (x).p, (x).t)

static void lin_fwd(llm4d_backend *be, llm4d_tensor out, llm4d_ctensor inp, llm4d_act act, const float *w,
                    const float *b, int N, int C, int OC) {
    REC(LLM4D_RC_LINEAR_FWD);
    c->d[0] = N, c->d[1] = C, c->d[2] = OC, c->d[3] = act, c->d[4] = b != NULL;
    PT(0, out), PT(1, inp), c->p[2] = P(w), c->p[3] = P(b);
}
static void r_linear_forward(llm4d_backend *be, llm4d_tensor out, llm4d_ctensor inp, const float *w, const float *b,
                             int N, int C, int OC) {
    lin_fwd(be, out, inp, LLM4D_ACT_NONE, w, b, N, C, OC);
}
static void r_linear_forward_act(llm4d_backend *be, llm4d_tensor out, llm4d_ctensor inp, llm4d_act act,
                                 const float *w, const float *b, int N, int C, int OC) {
    lin_fwd(be, out, inp, act, w, b, N, C, OC);
}
static void lin_bwd(llm4d_backend *be, llm4d_tensor dinp, llm4d_store st, float *dw, float *db, llm4d_ctensor dout,
                    llm4d_ctensor inp, llm4d_act act, const float *w, int N, int C, int OC) {
    REC(LLM4D_RC_LINEAR_BWD);
    c->d[0] = N, c->d[1] = C, c->d[2] = OC, c->d[3] = act, c->d[4] = dinp.p != NULL, c->d[5] = dw != NULL;
    c->d[6] = db != NULL, c->d[7] = st;
    PT(0, dinp), c->p[1] = P(dw), c->p[2] = P(db), PT(3, dout), PT(4, inp), c->p[5] = P(w);
}
static void r_linear_backward(llm4d_backend *be, llm4d_tensor dinp, llm4d_store st, float *dw, float *db,
                              llm4d_ctensor dout, llm4d_ctensor inp, const float *w, int N, int C, int OC) {
    lin_bwd(be, dinp, st, dw, db, dout, inp, LLM4D_ACT_NONE, w, N, C, OC);
}
static void r_linear_backward_act(llm4d_backend *be, llm4d_tensor dinp, llm4d_store st, float *dw, float *db,
                                  llm4d_ctensor dout, llm4d_ctensor inp, llm4d_act act, const float *w, int N, int C,
                                  int OC) {
    lin_bwd(be, dinp, st, dw, db, dout, inp, act, w, N, C, OC);
}
static void r_embedding_forward(llm4d_backend *be, float *out, const int32_t *tokens, const float *w, int row0,
                                int nrows, int N, int C) {
    REC(LLM4D_RC_EMBED_FWD);
    c->d[0] = nrows, c->d[1] = N, c->d[2] = C, c->aux[0] = row0;
    c->p[0] = P(out), c->p[1] = P(tokens), c->p[2] = P(w);
}
static void r_embedding_backward(llm4d_backend *be, float *dw, const float *dout, const int32_t *tokens, int row0,
                                 int nrows, int N, int C) {
    REC(LLM4D_RC_EMBED_BWD);
    c->d[0] = nrows, c->d[1] = N, c->d[2] = C, c->aux[0] = row0;
    c->p[0] = P(dw), c->p[1] = P(dout), c->p[2] = P(tokens);
}
static void r_position_forward(llm4d_backend *be, float *out, const float *wpe, int N, int C, int T, int64_t tok0) {
    REC(LLM4D_RC_POS_FWD);
    c->d[0] = N, c->d[1] = C, c->d[2] = T, c->aux[0] = tok0, c->p[0] = P(out), c->p[1] = P(wpe);
}
static void r_position_backward(llm4d_backend *be, float *dwpe, const float *dout, int N, int C, int T,
                                int64_t tok0) {
    REC(LLM4D_RC_POS_BWD);
    c->d[0] = N, c->d[1] = C, c->d[2] = T, c->aux[0] = tok0, c->p[0] = P(dwpe), c->p[1] = P(dout);
}
static void r_bias_forward(llm4d_backend *be, float *out, const float *b, int N, int C) {
    REC(LLM4D_RC_BIAS_FWD);
    c->d[0] = N, c->d[1] = C, c->p[0] = P(out), c->p[1] = P(b);
}
static void r_bias_backward(llm4d_backend *be, float *db, llm4d_ctensor dout, int N, int C) {
    REC(LLM4D_RC_BIAS_BWD);
    c->d[0] = N, c->d[1] = C, c->p[0] = P(db), PT(1, dout);
}
static void r_layernorm_forward(llm4d_backend *be, llm4d_tensor out, float *mean, float *rstd, llm4d_ctensor inp,
                                const float *w, const float *b, int N, int C) {
    REC(LLM4D_RC_LN_FWD);
    c->d[0] = N, c->d[1] = C;
    PT(0, out), c->p[1] = P(mean), c->p[2] = P(rstd), PT(3, inp), c->p[4] = P(w), c->p[5] = P(b);
}
static void r_layernorm_backward(llm4d_backend *be, llm4d_tensor dinp, float *dw, float *db, llm4d_ctensor dout,
                                 llm4d_ctensor inp, const float *w, const float *mean, const float *rstd, int N,
                                 int C) {
    REC(LLM4D_RC_LN_BWD);
    c->d[0] = N, c->d[1] = C;
    PT(0, dinp), c->p[1] = P(dw), c->p[2] = P(db), PT(3, dout), PT(4, inp), c->p[5] = P(w);
    c->p[6] = P(mean), c->p[7] = P(rstd);
}
static void r_gelu_forward(llm4d_backend *be, llm4d_tensor out, llm4d_ctensor inp, size_t n) {
    REC(LLM4D_RC_GELU_FWD);
    c->d[0] = (int64_t)n, PT(0, out), PT(1, inp);
}
static void r_gelu_backward(llm4d_backend *be, llm4d_tensor dinp, llm4d_ctensor inp, llm4d_ctensor dout, size_t n) {
    REC(LLM4D_RC_GELU_BWD);
    c->d[0] = (int64_t)n, PT(0, dinp), PT(1, inp), PT(2, dout);
}
/* A dropout's cost depends on whether it draws (p > 0); a replay needs its T, first token and sample ids. */
static void drop_of(llm4d_rc_call *c, const llm4d_dropout *d, int slot) {
    c->drop = d ? d->p : 0.0f;
    if (!d) return;
    c->aux[2] = d->T, c->aux[3] = d->tok0;
    c->p[slot] = P(d->sample_ids);
}
static void attn_of(llm4d_rc_call *c, llm4d_attn_shape s) {
    c->d[0] = s.B, c->d[1] = s.T, c->d[2] = s.NH, c->d[3] = s.HS, c->aux[0] = s.head0, c->aux[1] = s.NH_total;
}
static void r_attention_forward(llm4d_backend *be, llm4d_tensor out, float *lse, llm4d_ctensor qkv,
                                llm4d_attn_shape s, const llm4d_dropout *drop) {
    REC(LLM4D_RC_ATTN_FWD);
    attn_of(c, s);
    PT(0, out), c->p[1] = P(lse), PT(2, qkv);
    drop_of(c, drop, 7);
}
static void r_attention_backward(llm4d_backend *be, llm4d_tensor dqkv, llm4d_ctensor dout, llm4d_ctensor out,
                                 llm4d_ctensor qkv, const float *lse, llm4d_attn_shape s, const llm4d_dropout *drop) {
    REC(LLM4D_RC_ATTN_BWD);
    attn_of(c, s);
    PT(0, dqkv), PT(1, dout), PT(2, out), PT(3, qkv), c->p[4] = P(lse);
    drop_of(c, drop, 7);
}
static void r_dropout_forward(llm4d_backend *be, llm4d_tensor out, llm4d_ctensor inp, int N, int C,
                              const llm4d_dropout *drop) {
    REC(LLM4D_RC_DROP_FWD);
    c->d[0] = N, c->d[1] = C, PT(0, out), PT(1, inp);
    drop_of(c, drop, 7);
}
static void r_dropout_backward(llm4d_backend *be, llm4d_tensor dinp, llm4d_ctensor dout, int N, int C,
                               const llm4d_dropout *drop) {
    REC(LLM4D_RC_DROP_BWD);
    c->d[0] = N, c->d[1] = C, PT(0, dinp), PT(1, dout);
    drop_of(c, drop, 7);
}
static void r_dropout_add_forward(llm4d_backend *be, llm4d_tensor out, llm4d_ctensor res, llm4d_ctensor x, int N,
                                  int C, const llm4d_dropout *drop) {
    REC(LLM4D_RC_DROPADD_FWD);
    c->d[0] = N, c->d[1] = C, PT(0, out), PT(1, res), PT(2, x);
    drop_of(c, drop, 7);
}
static void r_dropout_add_backward(llm4d_backend *be, llm4d_tensor dres, llm4d_tensor dx, llm4d_ctensor dout, int N,
                                   int C, const llm4d_dropout *drop) {
    REC(LLM4D_RC_DROPADD_BWD);
    c->d[0] = N, c->d[1] = C, PT(0, dres), PT(1, dx), PT(2, dout);
    drop_of(c, drop, 7);
}
static void r_xent_forward(llm4d_backend *be, float *stats, llm4d_ctensor logits, const int32_t *targets, int N,
                           int Vl, int v0, int V, int merge) {
    REC(LLM4D_RC_XENT_FWD);
    c->d[0] = N, c->d[1] = Vl, c->d[2] = merge, c->aux[0] = v0, c->aux[1] = V;
    c->p[0] = P(stats), PT(1, logits), c->p[2] = P(targets);
}
static void r_xent_rescale(llm4d_backend *be, float *stats, const float *gmax, int N) {
    REC(LLM4D_RC_XENT_RESCALE);
    c->d[0] = N, c->p[0] = P(stats), c->p[1] = P(gmax);
}
static void r_xent_backward(llm4d_backend *be, float *losses, llm4d_tensor dlogits, llm4d_ctensor logits,
                            const float *stats, const int32_t *targets, const float *dloss, int N, int Vl, int v0,
                            int V) {
    REC(LLM4D_RC_XENT_BWD);
    c->d[0] = N, c->d[1] = Vl, c->d[2] = losses != NULL, c->d[3] = dlogits.p != NULL, c->aux[0] = v0, c->aux[1] = V;
    c->p[0] = P(losses), PT(1, dlogits), PT(2, logits), c->p[3] = P(stats), c->p[4] = P(targets);
    c->p[5] = P(dloss);
}
static void r_adamw(llm4d_backend *be, float *params, float *grads, float *m, float *v, size_t n, float lr,
                    float beta1, float beta2, float eps, float wd, int t, float grad_scale, int zero_grads) {
    (void)lr, (void)beta1, (void)beta2, (void)eps, (void)wd, (void)t, (void)grad_scale;
    REC(LLM4D_RC_ADAMW);
    c->d[0] = (int64_t)n, c->d[1] = zero_grads, c->p[0] = P(params), c->p[1] = P(grads), c->p[2] = P(m);
    c->p[3] = P(v);
}
static double r_sumsq(llm4d_backend *be, const float *x, size_t n) {
    llm4d_rc_call *c = push(rec_of(be), LLM4D_RC_SUMSQ);
    if (c) c->d[0] = (int64_t)n, c->p[0] = P(x);
    return 0.0;
}
static double r_sumsq_many(llm4d_backend *be, int n, const float *const *x, const size_t *len, double *each) {
    size_t total = 0;
    for (int k = 0; k < n; k++) {
        total += len[k];
        if (each) each[k] = 0.0;
    }
    llm4d_rc_call *c = push(rec_of(be), LLM4D_RC_SUMSQ);
    if (c) c->d[0] = (int64_t)total, c->p[0] = n ? P(x[0]) : 0;
    return 0.0;
}
static double r_dot(llm4d_backend *be, const float *a, const float *b, size_t n) {
    llm4d_rc_call *c = push(rec_of(be), LLM4D_RC_DOT);
    if (c) c->d[0] = (int64_t)n, c->d[1] = b != NULL, c->p[0] = P(a), c->p[1] = P(b);
    return 0.0;
}
static void r_dot_acc(llm4d_backend *be, double *acc, const float *a, const float *b, size_t n) {
    REC(LLM4D_RC_DOT);
    c->d[0] = (int64_t)n, c->d[1] = b != NULL, c->p[0] = P(a), c->p[1] = P(b), c->p[2] = P(acc);
}
static void r_add(llm4d_backend *be, float *dst, const float *src, size_t n) {
    REC(LLM4D_RC_ADD);
    c->d[0] = (int64_t)n, c->p[0] = P(dst), c->p[1] = P(src);
}
static void r_scale(llm4d_backend *be, float *x, float s, size_t n) {
    (void)s;
    REC(LLM4D_RC_SCALE);
    c->d[0] = (int64_t)n, c->p[0] = P(x);
}
static void r_convert(llm4d_backend *be, llm4d_tensor dst, llm4d_ctensor src, size_t n) {
    REC(LLM4D_RC_CONVERT);
    c->d[0] = (int64_t)n, PT(0, dst), PT(1, src);
}
static void r_init_param(llm4d_backend *be, float *dst, const llm4d_init_spec *spec, int64_t j0, int64_t j1) {
    (void)be, (void)dst, (void)spec, (void)j0, (void)j1; /* creation, not a step's work */
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

llm4d_code llm4d_rec_backend_create(llm4d_backend **out, llm4d_rec *r, const llm4d_backend *like, llm4d_err *err) {
    llm4d_backend *be = calloc(1, sizeof *be);
    rec_ctx *x = calloc(1, sizeof *x);
    if (!be || !x) {
        free(be), free(x);
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory creating the recording backend");
    }
    x->r = r, x->like = like;
    *be = (llm4d_backend){
        .name = "record", .ctx = x, .nthreads = 1, .host_addressable = 0,
        .alloc = r_alloc, .free = r_free, .alloc_host = r_alloc_host, .free_host = r_free_host,
        .mem_info = r_mem_info, .zero = r_zero, .copy = r_copy, .copy_async = r_copy_async, .copy_2d = r_copy_2d,
        .event_create = r_event_create, .event_destroy = r_event_destroy, .event_record = r_event_record,
        .stream_wait = r_stream_wait, .event_sync = r_event_sync, .stream_sync = r_stream_sync,
        .linear_forward = r_linear_forward, .linear_backward = r_linear_backward,
        .linear_forward_act = r_linear_forward_act, .linear_backward_act = r_linear_backward_act,
        .embedding_forward = r_embedding_forward, .embedding_backward = r_embedding_backward,
        .position_forward = r_position_forward, .position_backward = r_position_backward,
        .bias_forward = r_bias_forward, .bias_backward = r_bias_backward,
        .layernorm_forward = r_layernorm_forward, .layernorm_backward = r_layernorm_backward,
        .gelu_forward = r_gelu_forward, .gelu_backward = r_gelu_backward,
        .attention_forward = r_attention_forward, .attention_backward = r_attention_backward,
        .dropout_forward = r_dropout_forward, .dropout_backward = r_dropout_backward,
        .dropout_add_forward = r_dropout_add_forward, .dropout_add_backward = r_dropout_add_backward,
        .xent_forward = r_xent_forward, .xent_rescale = r_xent_rescale, .xent_backward = r_xent_backward,
        .adamw = r_adamw, .sumsq = r_sumsq, .sumsq_many = r_sumsq_many, .dot = r_dot, .dot_acc = r_dot_acc,
        .add = r_add, .scale = r_scale, .convert = r_convert, .init_param = r_init_param,
        .weights_changed = like && like->weights_changed ? r_weights_changed : NULL,
        .weight_copy_bytes = r_weight_copy_bytes,
        .destroy = r_destroy,
    };
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

llm4d_work llm4d_rc_kind(const llm4d_rc_call *c) {
    switch (c->op) {
    case LLM4D_RC_LINEAR_FWD:
    case LLM4D_RC_LINEAR_BWD: return LLM4D_WORK_GEMM;
    case LLM4D_RC_ATTN_FWD:
    case LLM4D_RC_ATTN_BWD: return LLM4D_WORK_ATTN;
    case LLM4D_RC_XENT_FWD:
    case LLM4D_RC_XENT_RESCALE:
    case LLM4D_RC_XENT_BWD: return LLM4D_WORK_LOSS;
    case LLM4D_RC_ADAMW:
    case LLM4D_RC_SUMSQ: return LLM4D_WORK_OPTIM;
    case LLM4D_RC_CONVERT: return LLM4D_WORK_CONVERT;
    default: return LLM4D_WORK_ELEM;
    }
}

const char *llm4d_rc_name(int op) {
    static const char *const names[LLM4D_RC_NOPS] = {
        "linear_forward", "linear_backward", "embedding_forward", "embedding_backward", "position_forward",
        "position_backward", "bias_forward", "bias_backward", "layernorm_forward", "layernorm_backward",
        "gelu_forward", "gelu_backward", "attention_forward", "attention_backward", "dropout_forward",
        "dropout_backward", "dropout_add_forward", "dropout_add_backward", "xent_forward", "xent_rescale",
        "xent_backward", "adamw", "sumsq", "dot", "add", "scale", "zero", "copy", "convert", "collective",
        "params_for", "release", "grads_for", "grads_done"};
    return op >= 0 && op < LLM4D_RC_NOPS ? names[op] : "?";
}

double llm4d_rc_flops(const llm4d_rc_call *c) {
    switch (c->op) {
    case LLM4D_RC_LINEAR_FWD: return 2.0 * c->d[0] * c->d[1] * c->d[2];
    case LLM4D_RC_LINEAR_BWD: return 2.0 * c->d[0] * c->d[1] * c->d[2] * (double)(c->d[4] + c->d[5]);
    /* causal flash attention: S = Q K^T and O = P V over half the T x T square (forward), and backward's five
     * products (S again, dV, dP, dQ, dK): 2.5 times forward */
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
    /* qkv is 3 of the 4 (forward: qkv, out) or 8 (backward: dqkv, dout, out, qkv) [B, T, NH x HS] blocks */
    case LLM4D_RC_ATTN_FWD: return (3 * esz(c, 2) + esz(c, 0)) * (double)c->d[0] * c->d[1] * c->d[2] * c->d[3];
    case LLM4D_RC_ATTN_BWD:
        return (3 * esz(c, 0) + esz(c, 1) + esz(c, 2) + 3 * esz(c, 3)) * (double)c->d[0] * c->d[1] *
               c->d[2] * c->d[3];
    case LLM4D_RC_XENT_FWD: return esz(c, 1) * N * C;
    case LLM4D_RC_XENT_BWD: /* no dlogits (d[3] = 0) counts as logits */
        return (esz(c, c->d[3] ? 1 : 2) + esz(c, 2)) * N * C;
    case LLM4D_RC_XENT_RESCALE: return f * 3 * N;
    case LLM4D_RC_ADAMW: return f * 9 * N; /* params, grads, m, v read and written, the gradients zeroed */
    case LLM4D_RC_SUMSQ:
    case LLM4D_RC_DOT:
    case LLM4D_RC_SCALE: return f * N;
    case LLM4D_RC_ADD: return f * 3 * N;
    case LLM4D_RC_ZERO: return N;
    case LLM4D_RC_COPY: return 2 * N;
    case LLM4D_RC_CONVERT: return (esz(c, 0) + esz(c, 1)) * N;
    default: return 0.0;
    }
}
