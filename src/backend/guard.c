/* guard.c — the guard backend (`--device guard`): the cpu backend's kernels on device memory the host cannot touch.
 *
 * Why: backend.h's contract says nothing outside src/backend reads or writes a tensor with the CPU; on the cpu
 * backend a violation is invisible (device memory is host memory), and on a GPU it is a crash or, worse, a read of
 * garbage. The guard makes every violation a crash on any machine: device memory is one arena of virtual memory
 * kept PROT_NONE except while a backend method runs (each method opens it on entry and closes it on exit), so a
 * host access to a tensor is a SIGSEGV whose handler prints the faulting address and the stack. It also refuses, by
 * name, a kernel argument that is neither device memory nor pinned host memory (a batch passed to a kernel without
 * being uploaded, for example), and says it is not host-addressable, so the communicator stages tensor buffers
 * through pinned memory and host views are copies: the code paths of a real device.
 *
 * The arena: one reservation of address space (MAP_NORESERVE, PROT_NONE), carved first-fit in whole pages; freed
 * blocks are returned to the kernel (MADV_DONTNEED), so a new block reads as zeros as alloc promises. One mprotect of
 * [arena start, highest block end) opens or closes all of it. Pinned host memory is ordinary host memory, listed
 * so that kernel arguments can be checked against it. Everything runs synchronously on the calling thread, as the
 * cpu backend does (its streams and events are the trivial ones of host_device.c).
 *
 * Cost: two mprotect calls per backend method, each proportional to the arena's resident pages. */
#define _GNU_SOURCE
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "backend/backend.h"

#define RESERVE ((size_t)1 << 40) /* address space only: 1 TiB */
#define PAGE ((size_t)4096)       /* blocks are whole pages */

typedef struct {
    size_t off, len; /* bytes from the arena's start; len a multiple of PAGE */
    int used;
} block;

typedef struct {
    void *p;
    size_t bytes;
} pinned_buf;

typedef struct {
    llm4d_backend *in;  /* the cpu backend whose kernels run */
    char *base;         /* the arena */
    size_t hi;          /* end of the highest block in use */
    block *blk;         /* sorted by off, tiling [0, end of the last) */
    int nblk, capblk;
    pinned_buf *pin;
    int npin, cappin;
    int depth;          /* backend methods running (a method's kernels may not call back, but be safe) */
} guard_ctx;

static guard_ctx *gctx(llm4d_backend *be) { return (guard_ctx *)be->ctx; }

/* ---- opening and closing the arena ---- */

static void protect(guard_ctx *g, int prot) {
    if (g->hi && mprotect(g->base, g->hi, prot) != 0) {
        perror("llm4d guard: mprotect");
        abort();
    }
}

static guard_ctx *enter(llm4d_backend *be) {
    guard_ctx *g = gctx(be);
    if (g->depth++ == 0) protect(g, PROT_READ | PROT_WRITE);
    return g;
}

static void leave(guard_ctx *g) {
    if (--g->depth == 0) protect(g, PROT_NONE);
}

static int in_arena(const guard_ctx *g, const void *p) {
    return (const char *)p >= g->base && (const char *)p < g->base + g->hi;
}

static int is_pinned(const guard_ctx *g, const void *p) {
    for (int k = 0; k < g->npin; k++) {
        const char *a = g->pin[k].p;
        if ((const char *)p >= a && (const char *)p < a + g->pin[k].bytes) return 1;
    }
    return 0;
}

/* A kernel argument must be device or pinned memory: anything else would be unreadable on a device. */
static void arg(const guard_ctx *g, const char *method, const void *p) {
    if (!p || in_arena(g, p) || is_pinned(g, p)) return;
    fprintf(stderr, "llm4d guard: %s was given %p, which is neither device memory (the arena [%p, %p)) nor pinned "
            "host memory: upload it first (backend.h, the contract)\n", method, p, (void *)g->base,
            (void *)(g->base + g->hi));
    void *frames[64];
    backtrace_symbols_fd(frames, backtrace(frames, 64), 2);
    abort();
}

#define A(p) arg(g, __func__ + 2, (p)) /* the method's name without the g_ prefix */

/* A host access to the closed arena: say where, show the stack, then die of the signal as usual. */
static void on_segv(int sig, siginfo_t *si, void *uc) {
    (void)uc;
    char line[200];
    const int n = snprintf(line, sizeof line, "llm4d guard: segmentation fault at address %p: if that is in the "
                           "device arena (the start-up log names it), the host touched a tensor; stack:\n",
                           si->si_addr);
    if (write(2, line, (size_t)n) < 0) { /* nothing more to do about it */
    }
    void *frames[64];
    backtrace_symbols_fd(frames, backtrace(frames, 64), 2);
    signal(sig, SIG_DFL);
}

/* ---- the arena's blocks ---- */

static int grow_blocks(guard_ctx *g) {
    if (g->nblk < g->capblk) return 1;
    const int cap = g->capblk ? 2 * g->capblk : 64;
    block *b = realloc(g->blk, (size_t)cap * sizeof *b);
    if (!b) return 0;
    g->blk = b;
    g->capblk = cap;
    return 1;
}

static void recompute_hi(guard_ctx *g) {
    g->hi = 0;
    for (int k = 0; k < g->nblk; k++)
        if (g->blk[k].used) g->hi = g->blk[k].off + g->blk[k].len;
}

static void *g_alloc(llm4d_backend *be, llm4d_mem *mem, llm4d_mem_category c, size_t bytes) {
    guard_ctx *g = gctx(be);
    const size_t len = ((bytes ? bytes : 1) + PAGE - 1) / PAGE * PAGE;
    int k = 0;
    while (k < g->nblk && (g->blk[k].used || g->blk[k].len < len)) k++;
    if (!grow_blocks(g)) return NULL;
    if (k == g->nblk) { /* a new block at the end */
        const size_t off = g->nblk ? g->blk[g->nblk - 1].off + g->blk[g->nblk - 1].len : 0;
        if (off + len > RESERVE) return NULL;
        g->blk[g->nblk++] = (block){off, len, 1};
    } else if (g->blk[k].len > len) { /* split: the rest stays free */
        memmove(&g->blk[k + 2], &g->blk[k + 1], (size_t)(g->nblk - k - 1) * sizeof *g->blk);
        g->blk[k + 1] = (block){g->blk[k].off + len, g->blk[k].len - len, 0};
        g->blk[k].len = len;
        g->blk[k].used = 1;
        g->nblk++;
    } else {
        g->blk[k].used = 1;
    }
    const int was_open = g->depth > 0;
    if (was_open) protect(g, PROT_NONE);
    recompute_hi(g);
    if (was_open) protect(g, PROT_READ | PROT_WRITE);
    llm4d_mem_account(mem, c, (long long)bytes);
    return g->base + g->blk[k].off;
}

static void g_free(llm4d_backend *be, llm4d_mem *mem, llm4d_mem_category c, void *p, size_t bytes) {
    guard_ctx *g = gctx(be);
    if (!p) return;
    const size_t off = (size_t)((char *)p - g->base);
    int k = 0;
    while (k < g->nblk && g->blk[k].off != off) k++;
    if (k == g->nblk || !g->blk[k].used) {
        fprintf(stderr, "llm4d guard: free of %p, which the arena did not allocate\n", p);
        abort();
    }
    /* the cpu backend's low-precision copies of a weight that lived here must not serve what comes next */
    if (g->in->weights_changed) g->in->weights_changed(g->in, p, bytes);
    madvise(p, g->blk[k].len, MADV_DONTNEED); /* zeros when reused */
    g->blk[k].used = 0;
    if (k + 1 < g->nblk && !g->blk[k + 1].used) { /* merge with the free neighbours */
        g->blk[k].len += g->blk[k + 1].len;
        memmove(&g->blk[k + 1], &g->blk[k + 2], (size_t)(g->nblk - k - 2) * sizeof *g->blk);
        g->nblk--;
    }
    if (k > 0 && !g->blk[k - 1].used) {
        g->blk[k - 1].len += g->blk[k].len;
        memmove(&g->blk[k], &g->blk[k + 1], (size_t)(g->nblk - k - 1) * sizeof *g->blk);
        g->nblk--;
    }
    recompute_hi(g);
    llm4d_mem_account(mem, c, -(long long)bytes);
}

static void *g_alloc_host(llm4d_backend *be, llm4d_mem *mem, llm4d_mem_category c, size_t bytes) {
    guard_ctx *g = gctx(be);
    if (g->npin == g->cappin) {
        const int cap = g->cappin ? 2 * g->cappin : 16;
        pinned_buf *b = realloc(g->pin, (size_t)cap * sizeof *b);
        if (!b) return NULL;
        g->pin = b;
        g->cappin = cap;
    }
    void *p = g->in->alloc_host(g->in, mem, c, bytes);
    if (p) g->pin[g->npin++] = (pinned_buf){p, bytes ? bytes : 1};
    return p;
}

static void g_free_host(llm4d_backend *be, llm4d_mem *mem, llm4d_mem_category c, void *p, size_t bytes) {
    guard_ctx *g = gctx(be);
    for (int k = 0; k < g->npin; k++)
        if (g->pin[k].p == p) {
            g->pin[k] = g->pin[--g->npin];
            break;
        }
    g->in->free_host(g->in, mem, c, p, bytes);
}

/* ---- the methods: the cpu backend's, with the arena open ---- */

#define CALL(m, ...)                                                                                             \
    do {                                                                                                         \
        g->in->m(g->in, __VA_ARGS__);                                                                            \
        leave(g);                                                                                                \
    } while (0)

static void g_mem_info(llm4d_backend *be, size_t *f, size_t *t) { gctx(be)->in->mem_info(gctx(be)->in, f, t); }

static void g_zero(llm4d_backend *be, void *p, size_t bytes) {
    guard_ctx *g = enter(be);
    A(p);
    CALL(zero, p, bytes);
}

static void g_copy(llm4d_backend *be, void *dst, const void *src, size_t bytes) {
    guard_ctx *g = enter(be);
    A(dst), A(src);
    CALL(copy, dst, src, bytes);
}

/* The device side of a copy must be device memory; the host side of H2D/D2H must not be (any host memory will do:
 * pageable copies are synchronous). */
static void copy_args(guard_ctx *g, const char *m, void *dst, const void *src, llm4d_copy_kind kind) {
    if (kind != LLM4D_H2D) arg(g, m, src);
    if (kind != LLM4D_D2H) arg(g, m, dst);
    if ((kind == LLM4D_H2D && in_arena(g, src)) || (kind == LLM4D_D2H && in_arena(g, dst))) {
        fprintf(stderr, "llm4d guard: %s %s with device memory on the host side\n", m,
                kind == LLM4D_H2D ? "H2D" : "D2H");
        abort();
    }
}

static void g_copy_async(llm4d_backend *be, void *dst, const void *src, size_t bytes, llm4d_copy_kind kind,
                         llm4d_stream s) {
    guard_ctx *g = enter(be);
    copy_args(g, "copy_async", dst, src, kind);
    CALL(copy_async, dst, src, bytes, kind, s);
}

static void g_copy_2d(llm4d_backend *be, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                      size_t rows, llm4d_copy_kind kind, llm4d_stream s) {
    guard_ctx *g = enter(be);
    copy_args(g, "copy_2d", dst, src, kind);
    CALL(copy_2d, dst, dpitch, src, spitch, width, rows, kind, s);
}

static llm4d_event *g_event_create(llm4d_backend *be) { return gctx(be)->in->event_create(gctx(be)->in); }
static void g_event_destroy(llm4d_backend *be, llm4d_event *ev) { gctx(be)->in->event_destroy(gctx(be)->in, ev); }
static void g_event_record(llm4d_backend *be, llm4d_event *ev, llm4d_stream s) {
    gctx(be)->in->event_record(gctx(be)->in, ev, s);
}
static void g_stream_wait(llm4d_backend *be, llm4d_stream s, const llm4d_event *ev) {
    gctx(be)->in->stream_wait(gctx(be)->in, s, ev);
}
static void g_event_sync(llm4d_backend *be, const llm4d_event *ev) { gctx(be)->in->event_sync(gctx(be)->in, ev); }
static void g_stream_sync(llm4d_backend *be, llm4d_stream s) { gctx(be)->in->stream_sync(gctx(be)->in, s); }

static void g_linear_forward(llm4d_backend *be, llm4d_tensor out, llm4d_ctensor inp, const float *w, const float *b,
                             int N, int C, int OC) {
    guard_ctx *g = enter(be);
    A(out.p), A(inp.p), A(w), A(b);
    CALL(linear_forward, out, inp, w, b, N, C, OC);
}

static void g_linear_backward(llm4d_backend *be, llm4d_tensor dinp, llm4d_store st, float *dw, float *db,
                              llm4d_ctensor dout, llm4d_ctensor inp, const float *w, int N, int C, int OC) {
    guard_ctx *g = enter(be);
    A(dinp.p), A(dw), A(db), A(dout.p), A(inp.p), A(w);
    CALL(linear_backward, dinp, st, dw, db, dout, inp, w, N, C, OC);
}

static void g_linear_forward_act(llm4d_backend *be, llm4d_tensor out, llm4d_ctensor inp, llm4d_act act,
                                 const float *w, const float *b, int N, int C, int OC) {
    guard_ctx *g = enter(be);
    A(out.p), A(inp.p), A(w), A(b);
    CALL(linear_forward_act, out, inp, act, w, b, N, C, OC);
}

static void g_linear_backward_act(llm4d_backend *be, llm4d_tensor dinp, llm4d_store st, float *dw, float *db,
                                  llm4d_ctensor dout, llm4d_ctensor inp, llm4d_act act, const float *w, int N, int C,
                                  int OC) {
    guard_ctx *g = enter(be);
    A(dinp.p), A(dw), A(db), A(dout.p), A(inp.p), A(w);
    CALL(linear_backward_act, dinp, st, dw, db, dout, inp, act, w, N, C, OC);
}

static void g_embedding_forward(llm4d_backend *be, float *out, const int32_t *tokens, const float *w, int row0,
                                int nrows, int N, int C) {
    guard_ctx *g = enter(be);
    A(out), A(tokens), A(w);
    CALL(embedding_forward, out, tokens, w, row0, nrows, N, C);
}

static void g_embedding_backward(llm4d_backend *be, float *dw, const float *dout, const int32_t *tokens, int row0,
                                 int nrows, int N, int C) {
    guard_ctx *g = enter(be);
    A(dw), A(dout), A(tokens);
    CALL(embedding_backward, dw, dout, tokens, row0, nrows, N, C);
}

static void g_position_forward(llm4d_backend *be, float *out, const float *wpe, int N, int C, int T, int64_t tok0) {
    guard_ctx *g = enter(be);
    A(out), A(wpe);
    CALL(position_forward, out, wpe, N, C, T, tok0);
}

static void g_position_backward(llm4d_backend *be, float *dwpe, const float *dout, int N, int C, int T, int64_t tok0) {
    guard_ctx *g = enter(be);
    A(dwpe), A(dout);
    CALL(position_backward, dwpe, dout, N, C, T, tok0);
}

static void g_bias_forward(llm4d_backend *be, float *out, const float *b, int N, int C) {
    guard_ctx *g = enter(be);
    A(out), A(b);
    CALL(bias_forward, out, b, N, C);
}

static void g_bias_backward(llm4d_backend *be, float *db, llm4d_ctensor dout, int N, int C) {
    guard_ctx *g = enter(be);
    A(db), A(dout.p);
    CALL(bias_backward, db, dout, N, C);
}

static void g_layernorm_forward(llm4d_backend *be, llm4d_tensor out, float *mean, float *rstd, llm4d_ctensor inp,
                                const float *w, const float *b, int N, int C) {
    guard_ctx *g = enter(be);
    A(out.p), A(mean), A(rstd), A(inp.p), A(w), A(b);
    CALL(layernorm_forward, out, mean, rstd, inp, w, b, N, C);
}

static void g_layernorm_backward(llm4d_backend *be, llm4d_tensor dinp, float *dw, float *db, llm4d_ctensor dout,
                                 llm4d_ctensor inp, const float *w, const float *mean, const float *rstd, int N,
                                 int C) {
    guard_ctx *g = enter(be);
    A(dinp.p), A(dw), A(db), A(dout.p), A(inp.p), A(w), A(mean), A(rstd);
    CALL(layernorm_backward, dinp, dw, db, dout, inp, w, mean, rstd, N, C);
}

static void g_gelu_forward(llm4d_backend *be, llm4d_tensor out, llm4d_ctensor inp, size_t n) {
    guard_ctx *g = enter(be);
    A(out.p), A(inp.p);
    CALL(gelu_forward, out, inp, n);
}

static void g_gelu_backward(llm4d_backend *be, llm4d_tensor dinp, llm4d_ctensor inp, llm4d_ctensor dout, size_t n) {
    guard_ctx *g = enter(be);
    A(dinp.p), A(inp.p), A(dout.p);
    CALL(gelu_backward, dinp, inp, dout, n);
}

static void drop_arg(guard_ctx *g, const char *m, const llm4d_dropout *d) {
    if (d && d->p > 0) arg(g, m, d->sample_ids);
}

static void g_attention_forward(llm4d_backend *be, llm4d_tensor out, float *lse, llm4d_ctensor qkv,
                                llm4d_attn_shape s, const llm4d_dropout *drop) {
    guard_ctx *g = enter(be);
    A(out.p), A(lse), A(qkv.p);
    drop_arg(g, "attention_forward", drop);
    CALL(attention_forward, out, lse, qkv, s, drop);
}

static void g_attention_backward(llm4d_backend *be, llm4d_tensor dqkv, llm4d_ctensor dout, llm4d_ctensor out,
                                 llm4d_ctensor qkv, const float *lse, llm4d_attn_shape s, const llm4d_dropout *drop) {
    guard_ctx *g = enter(be);
    A(dqkv.p), A(dout.p), A(out.p), A(qkv.p), A(lse);
    drop_arg(g, "attention_backward", drop);
    CALL(attention_backward, dqkv, dout, out, qkv, lse, s, drop);
}

static void g_dropout_forward(llm4d_backend *be, llm4d_tensor out, llm4d_ctensor inp, int N, int C,
                              const llm4d_dropout *drop) {
    guard_ctx *g = enter(be);
    A(out.p), A(inp.p);
    drop_arg(g, "dropout_forward", drop);
    CALL(dropout_forward, out, inp, N, C, drop);
}

static void g_dropout_backward(llm4d_backend *be, llm4d_tensor dinp, llm4d_ctensor dout, int N, int C,
                               const llm4d_dropout *drop) {
    guard_ctx *g = enter(be);
    A(dinp.p), A(dout.p);
    drop_arg(g, "dropout_backward", drop);
    CALL(dropout_backward, dinp, dout, N, C, drop);
}

static void g_dropout_add_forward(llm4d_backend *be, llm4d_tensor out, llm4d_ctensor res, llm4d_ctensor x, int N,
                                  int C, const llm4d_dropout *drop) {
    guard_ctx *g = enter(be);
    A(out.p), A(res.p), A(x.p);
    drop_arg(g, "dropout_add_forward", drop);
    CALL(dropout_add_forward, out, res, x, N, C, drop);
}

static void g_dropout_add_backward(llm4d_backend *be, llm4d_tensor dres, llm4d_tensor dx, llm4d_ctensor dout, int N,
                                   int C, const llm4d_dropout *drop) {
    guard_ctx *g = enter(be);
    A(dres.p), A(dx.p), A(dout.p);
    drop_arg(g, "dropout_add_backward", drop);
    CALL(dropout_add_backward, dres, dx, dout, N, C, drop);
}

static void g_xent_forward(llm4d_backend *be, float *stats, llm4d_ctensor logits, const int32_t *targets, int N,
                           int Vl, int v0, int V, int merge) {
    guard_ctx *g = enter(be);
    A(stats), A(logits.p), A(targets);
    CALL(xent_forward, stats, logits, targets, N, Vl, v0, V, merge);
}

static void g_xent_rescale(llm4d_backend *be, float *stats, const float *gmax, int N) {
    guard_ctx *g = enter(be);
    A(stats), A(gmax);
    CALL(xent_rescale, stats, gmax, N);
}

static void g_xent_backward(llm4d_backend *be, float *losses, llm4d_tensor dlogits, llm4d_ctensor logits,
                            const float *stats, const int32_t *targets, const float *dloss, int N, int Vl, int v0,
                            int V) {
    guard_ctx *g = enter(be);
    A(losses), A(dlogits.p), A(logits.p), A(stats), A(targets), A(dloss);
    CALL(xent_backward, losses, dlogits, logits, stats, targets, dloss, N, Vl, v0, V);
}

static void g_adamw(llm4d_backend *be, float *params, float *grads, float *m, float *v, size_t n, float lr,
                    float beta1, float beta2, float eps, float wd, int t, float grad_scale, int zero_grads) {
    guard_ctx *g = enter(be);
    A(params), A(grads), A(m), A(v);
    CALL(adamw, params, grads, m, v, n, lr, beta1, beta2, eps, wd, t, grad_scale, zero_grads);
}

static double g_sumsq(llm4d_backend *be, const float *x, size_t n) {
    guard_ctx *g = enter(be);
    A(x);
    const double r = g->in->sumsq(g->in, x, n);
    leave(g);
    return r;
}

static double g_sumsq_many(llm4d_backend *be, int n, const float *const *x, const size_t *len, double *each) {
    guard_ctx *g = enter(be);
    for (int k = 0; k < n; k++) A(x[k]);
    const double r = g->in->sumsq_many(g->in, n, x, len, each);
    leave(g);
    return r;
}

static double g_dot(llm4d_backend *be, const float *a, const float *b, size_t n) {
    guard_ctx *g = enter(be);
    A(a), A(b);
    const double r = g->in->dot(g->in, a, b, n);
    leave(g);
    return r;
}

static void g_dot_acc(llm4d_backend *be, double *acc, const float *a, const float *b, size_t n) {
    guard_ctx *g = enter(be);
    A(acc), A(a), A(b);
    CALL(dot_acc, acc, a, b, n);
}

static void g_add(llm4d_backend *be, float *dst, const float *src, size_t n) {
    guard_ctx *g = enter(be);
    A(dst), A(src);
    CALL(add, dst, src, n);
}

static void g_scale(llm4d_backend *be, float *x, float s, size_t n) {
    guard_ctx *g = enter(be);
    A(x);
    CALL(scale, x, s, n);
}

static void g_convert(llm4d_backend *be, llm4d_tensor dst, llm4d_ctensor src, size_t n) {
    guard_ctx *g = enter(be);
    A(dst.p), A(src.p);
    CALL(convert, dst, src, n);
}

static void g_to_bf16(llm4d_backend *be, uint16_t *dst, const float *src, size_t n) {
    guard_ctx *g = enter(be);
    A(dst), A(src);
    CALL(to_bf16, dst, src, n);
}

static void g_from_bf16(llm4d_backend *be, float *dst, const uint16_t *src, size_t n, llm4d_store store) {
    guard_ctx *g = enter(be);
    A(dst), A(src);
    CALL(from_bf16, dst, src, n, store);
}

static void g_init_param(llm4d_backend *be, float *dst, const llm4d_init_spec *spec, int64_t j0, int64_t j1) {
    guard_ctx *g = enter(be);
    A(dst);
    CALL(init_param, dst, spec, j0, j1);
}

static void g_attention_cached(llm4d_backend *be, float *out, const float *qkv, const float *kc, const float *vc,
                               int n, int p0, int NH, int HS, float *scores, int ld) {
    guard_ctx *g = enter(be);
    A(out), A(qkv), A(kc), A(vc), A(scores);
    CALL(attention_cached, out, qkv, kc, vc, n, p0, NH, HS, scores, ld);
}

static int32_t g_sample(llm4d_backend *be, const float *logits, int V, const llm4d_sampling *s, uint64_t j,
                        void *scratch) {
    guard_ctx *g = enter(be);
    A(logits), A(scratch);
    const int32_t r = g->in->sample(g->in, logits, V, s, j, scratch);
    leave(g);
    return r;
}

static llm4d_code g_set_precision(llm4d_backend *be, llm4d_precision p, llm4d_err *err) {
    return gctx(be)->in->set_precision(gctx(be)->in, p, err);
}
static double g_matmul_peak_gflops(llm4d_backend *be) { return gctx(be)->in->matmul_peak_gflops(gctx(be)->in); }
static size_t g_workspace_bytes(llm4d_backend *be) { return gctx(be)->in->workspace_bytes(gctx(be)->in); }
static size_t g_operand_workspace(llm4d_backend *be, llm4d_operand_sizes s, llm4d_precision prec) {
    return gctx(be)->in->operand_workspace(gctx(be)->in, s, prec);
}
static void g_weights_changed(llm4d_backend *be, const void *p, size_t bytes) {
    gctx(be)->in->weights_changed(gctx(be)->in, p, bytes);
}
static size_t g_weight_copy_bytes(llm4d_backend *be, llm4d_precision prec) {
    return gctx(be)->in->weight_copy_bytes(gctx(be)->in, prec);
}
static void g_work_stats(llm4d_backend *be, llm4d_work_stats *out) { gctx(be)->in->work_stats(gctx(be)->in, out); }
static void g_describe_gemms(llm4d_backend *be, char *buf, size_t n) {
    gctx(be)->in->describe_gemms(gctx(be)->in, buf, n);
}

static void g_describe_memory(llm4d_backend *be, char *buf, size_t n) {
    const guard_ctx *g = gctx(be);
    snprintf(buf, n, "device memory: the guard's arena [%p, %p) of reserved address space, closed (PROT_NONE) "
             "outside backend methods; a host access to it is a segmentation fault with a stack", (void *)g->base,
             (void *)(g->base + RESERVE));
}

static void g_destroy(llm4d_backend *be) {
    if (!be) return;
    guard_ctx *g = gctx(be);
    if (g) {
        if (g->in) g->in->destroy(g->in);
        if (g->base) munmap(g->base, RESERVE);
        free(g->blk);
        free(g->pin);
        free(g);
    }
    free(be);
}

llm4d_code llm4d_backend_guard_create(llm4d_backend **out, int nthreads, llm4d_err *err) {
    *out = NULL;
    llm4d_backend *be = calloc(1, sizeof *be);
    guard_ctx *g = calloc(1, sizeof *g);
    if (!be || !g) {
        free(be);
        free(g);
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory creating the guard backend");
    }
    be->ctx = g;
    llm4d_code rc = llm4d_backend_cpu_create(&g->in, nthreads, err);
    if (rc != LLM4D_OK) {
        g_destroy(be);
        return rc;
    }
    void *base = mmap(NULL, RESERVE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) {
        g_destroy(be);
        return llm4d_fail(err, LLM4D_ENOMEM, "the guard backend cannot reserve %zu GiB of address space",
                          RESERVE >> 30);
    }
    g->base = base;
    void *warm[1];
    backtrace(warm, 1); /* loads the unwinder now: the signal handler must not be the first to (it allocates) */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
    sigaction(SIGSEGV, &sa, NULL);
    const llm4d_backend *in = g->in;
    *be = *in; /* the names, sizes and flags; every method replaced below */
    be->ctx = g;
    be->name = "guard";
    be->host_addressable = 0;
    be->host = g->in; /* host-side kernels (an offloaded AdamW) on pinned memory: never inside the arena */
    be->alloc = g_alloc, be->free = g_free, be->alloc_host = g_alloc_host, be->free_host = g_free_host;
    be->mem_info = g_mem_info, be->zero = g_zero, be->copy = g_copy, be->copy_async = g_copy_async;
    be->copy_2d = g_copy_2d;
    be->event_create = g_event_create, be->event_destroy = g_event_destroy, be->event_record = g_event_record;
    be->stream_wait = g_stream_wait, be->event_sync = g_event_sync, be->stream_sync = g_stream_sync;
    be->linear_forward = g_linear_forward, be->linear_backward = g_linear_backward;
    be->linear_forward_act = g_linear_forward_act, be->linear_backward_act = g_linear_backward_act;
    be->embedding_forward = g_embedding_forward, be->embedding_backward = g_embedding_backward;
    be->position_forward = g_position_forward, be->position_backward = g_position_backward;
    be->bias_forward = g_bias_forward, be->bias_backward = g_bias_backward;
    be->layernorm_forward = g_layernorm_forward, be->layernorm_backward = g_layernorm_backward;
    be->gelu_forward = g_gelu_forward, be->gelu_backward = g_gelu_backward;
    be->attention_forward = g_attention_forward, be->attention_backward = g_attention_backward;
    be->dropout_forward = g_dropout_forward, be->dropout_backward = g_dropout_backward;
    be->dropout_add_forward = g_dropout_add_forward, be->dropout_add_backward = g_dropout_add_backward;
    be->xent_forward = g_xent_forward, be->xent_rescale = g_xent_rescale, be->xent_backward = g_xent_backward;
    be->adamw = g_adamw, be->sumsq = g_sumsq, be->sumsq_many = g_sumsq_many, be->dot = g_dot;
    be->dot_acc = g_dot_acc, be->add = g_add, be->scale = g_scale, be->convert = g_convert;
    be->to_bf16 = g_to_bf16, be->from_bf16 = g_from_bf16;
    be->init_param = g_init_param, be->attention_cached = g_attention_cached, be->sample = g_sample;
    be->set_precision = g_set_precision, be->matmul_peak_gflops = g_matmul_peak_gflops;
    be->workspace_bytes = g_workspace_bytes, be->operand_workspace = g_operand_workspace;
    be->weights_changed = g_weights_changed, be->weight_copy_bytes = g_weight_copy_bytes;
    be->work_stats = g_work_stats, be->describe_gemms = g_describe_gemms, be->describe_memory = g_describe_memory;
    be->destroy = g_destroy;
    *out = be;
    return LLM4D_OK;
}
