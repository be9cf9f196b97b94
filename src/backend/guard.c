/* guard.c — the guard backend (`--device guard`): the cpu backend's kernels on device memory the host cannot touch.
 *
 * Why: backend.h's contract says nothing outside src/backend reads or writes a tensor with the CPU; on the cpu
 * backend a violation is invisible (device memory is host memory), and on a GPU it is a crash or, worse, a read of
 * garbage. The guard makes every violation a crash on any machine: device memory is one arena of virtual memory
 * kept PROT_NONE except while a backend method runs (each method opens it on entry and closes it on exit), so a
 * host access to a tensor is a SIGSEGV whose handler prints the faulting address and the stack. It also refuses, by
 * name, a kernel argument that is neither device memory nor pinned host memory (a batch passed to a kernel without
 * being uploaded, for example), or that does not hold what the method touches there (its extent, as the method list
 * backend/methods.h states it: a slice past its buffer's end), and says it is not host-addressable, so the
 * communicator stages tensor buffers through pinned memory and host views are copies: the code paths of a real
 * device.
 *
 * The arena: one reservation of address space (MAP_NORESERVE, PROT_NONE), carved first-fit in whole pages; freed
 * blocks are returned to the kernel (MADV_DONTNEED), so a new block reads as zeros as alloc promises. One mprotect of
 * [arena start, highest block end) opens or closes all of it. Pinned host memory is ordinary host memory, listed
 * so that kernel arguments can be checked against it. Everything runs synchronously on the calling thread, as the
 * cpu backend does (its streams and events are the trivial ones of host_device.c).
 *
 * The methods are made from the list (methods.h): a kernel (OPEN there) opens the arena, checks its arguments and
 * runs the cpu backend's method; host bookkeeping (HOST) is forwarded as it is; what the list cannot describe (OWN:
 * memory, copies whose sides depend on their kind, sumsq_many's array of tensors) is written below.
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
    size_t bytes;    /* what alloc was asked for (a used block): the extent arguments are checked against */
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

/* The arena's block holding p (blocks are sorted and tile the arena), or NULL. */
static const block *block_of(const guard_ctx *g, const void *p) {
    if (!in_arena(g, p)) return NULL;
    const size_t off = (size_t)((const char *)p - g->base);
    int lo = 0, hi = g->nblk - 1;
    while (lo <= hi) {
        const int mid = (lo + hi) / 2;
        if (off < g->blk[mid].off) hi = mid - 1;
        else if (off >= g->blk[mid].off + g->blk[mid].len) lo = mid + 1;
        else return &g->blk[mid];
    }
    return NULL;
}

static const pinned_buf *pinned_of(const guard_ctx *g, const void *p) {
    for (int k = 0; k < g->npin; k++) {
        const char *a = g->pin[k].p;
        if ((const char *)p >= a && (const char *)p < a + g->pin[k].bytes) return &g->pin[k];
    }
    return NULL;
}

static void die_with_stack(void) {
    void *frames[64];
    backtrace_symbols_fd(frames, backtrace(frames, 64), 2);
    abort();
}

/* A kernel argument must be device or pinned memory holding the `bytes` the method touches from p: anything else
 * would be unreadable on a device, or a read or write past an allocation. what: the argument's name; role: what the
 * method does with it ("an input", "an output"). An extent of 0 bytes (an empty slice, which may sit at a buffer's
 * end) only has to point into device or pinned memory. */
static void arg(const guard_ctx *g, const char *method, const char *what, const char *role, const void *p,
                size_t bytes) {
    if (!p) return;
    const char *a = p, *lo = NULL, *end = NULL;
    const block *b = block_of(g, p);
    const pinned_buf *pb = b ? NULL : pinned_of(g, p);
    if (b && b->used) lo = g->base + b->off, end = lo + b->bytes;
    if (pb) lo = pb->p, end = lo + pb->bytes;
    if (!bytes && (b || pb)) return;
    if (!lo && b) {
        fprintf(stderr, "llm4d guard: %s was given %p (%s, %s of %zu bytes), which is in the device arena but in "
                "no allocation: memory freed, or never allocated\n", method, p, what, role, bytes);
        die_with_stack();
    }
    if (!lo) {
        fprintf(stderr, "llm4d guard: %s was given %p (%s, %s of %zu bytes), which is neither device memory (the "
                "arena [%p, %p)) nor pinned host memory: upload it first (backend.h, the contract)\n", method, p,
                what, role, bytes, (void *)g->base, (void *)(g->base + g->hi));
        die_with_stack();
    }
    if (bytes > (size_t)(end - a)) {
        fprintf(stderr, "llm4d guard: %s was given %p (%s, %s of %zu bytes), which runs past the end of its %s "
                "[%p, %p) by %zu bytes\n", method, p, what, role, bytes, pb ? "pinned buffer" : "device allocation",
                (const void *)lo, (const void *)end, bytes - (size_t)(end - a));
        die_with_stack();
    }
}

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
        g->blk[g->nblk++] = (block){off, len, bytes, 1};
    } else if (g->blk[k].len > len) { /* split: the rest stays free */
        memmove(&g->blk[k + 2], &g->blk[k + 1], (size_t)(g->nblk - k - 1) * sizeof *g->blk);
        g->blk[k + 1] = (block){g->blk[k].off + len, g->blk[k].len - len, 0, 0};
        g->blk[k].len = len;
        g->blk[k].bytes = bytes;
        g->blk[k].used = 1;
        g->nblk++;
    } else {
        g->blk[k].bytes = bytes;
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

/* ---- the methods the list leaves to this file (OWN) ---- */

/* The device side of a copy must be device memory holding the bytes it spans there; the host side of H2D/D2H must
 * not be (any host memory will do: pageable copies are synchronous). */
static void copy_args(guard_ctx *g, const char *m, void *dst, size_t dspan, const void *src, size_t sspan,
                      llm4d_copy_kind kind) {
    if (kind != LLM4D_H2D) arg(g, m, "src", "an input", src, sspan);
    if (kind != LLM4D_D2H) arg(g, m, "dst", "an output", dst, dspan);
    if ((kind == LLM4D_H2D && in_arena(g, src)) || (kind == LLM4D_D2H && in_arena(g, dst))) {
        fprintf(stderr, "llm4d guard: %s %s with device memory on the host side\n", m,
                kind == LLM4D_H2D ? "H2D" : "D2H");
        abort();
    }
}

static void g_copy_async(llm4d_backend *be, void *dst, const void *src, size_t bytes, llm4d_copy_kind kind,
                         llm4d_stream s) {
    guard_ctx *g = enter(be);
    copy_args(g, "copy_async", dst, bytes, src, bytes, kind);
    g->in->copy_async(g->in, dst, src, bytes, kind, s);
    leave(g);
}

/* A strided copy spans, on either side, its rows apart by that side's pitch, the last one `width` bytes. */
static void g_copy_2d(llm4d_backend *be, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                      size_t rows, llm4d_copy_kind kind, llm4d_stream s) {
    guard_ctx *g = enter(be);
    const size_t dspan = rows ? (rows - 1) * dpitch + width : 0, sspan = rows ? (rows - 1) * spitch + width : 0;
    copy_args(g, "copy_2d", dst, dspan, src, sspan, kind);
    g->in->copy_2d(g->in, dst, dpitch, src, spitch, width, rows, kind, s);
    leave(g);
}

static double g_sumsq_many(llm4d_backend *be, int n, const float *const *x, const size_t *len, double *each) {
    guard_ctx *g = enter(be);
    for (int k = 0; k < n; k++) arg(g, "sumsq_many", "x[k]", "an input", x[k], len[k] * sizeof(float));
    const double r = g->in->sumsq_many(g->in, n, x, len, each);
    leave(g);
    return r;
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

/* ---- the methods the list describes: the cpu backend's, with the arena open (OPEN) or as they are (HOST) ---- */

/* A method's result while the arena closes: kept (RET) or none (VOID). */
#define KEEP_VOID
#define KEEP_RET(t_) t_ r_ =
#define GIVE_VOID
#define GIVE_RET(t_) return r_;

/* The list's pointer arguments and dropouts, checked (m_: the method's name). */
#define FIN(p_, n_) arg(g, m_, #p_, "an input", (p_), (size_t)(n_) * sizeof(float))
#define FOUT(p_, n_) arg(g, m_, #p_, "an output", (p_), (size_t)(n_) * sizeof(float))
#define IN(p_, bytes_) arg(g, m_, #p_, "an input", (p_), (size_t)(bytes_))
#define OUT(p_, bytes_) arg(g, m_, #p_, "an output", (p_), (size_t)(bytes_))
#define TIN(x_, n_) arg(g, m_, #x_, "an input", (x_).p, (size_t)(n_) * llm4d_ftype_size((x_).t))
#define TOUT(x_, n_) arg(g, m_, #x_, "an output", (x_).p, (size_t)(n_) * llm4d_ftype_size((x_).t))
#define GDROP_NODROP
#define GDROP_DROP(d_, rows_, bits_)                                                                                 \
    if ((d_) && (d_)->p > 0) {                                                                                       \
        arg(g, m_, #d_ "->sample_ids", "an input", (d_)->sample_ids, (size_t)(rows_) * sizeof(int64_t));             \
        if ((bits_) > 0) arg(g, m_, #d_ "->bits", "the dropout's mask", (d_)->bits, (size_t)(bits_));                \
    }

/* The call itself, made on the cpu backend `in_` (inside the block, `be`, the name args_ pass, is that backend),
 * then `after_`, then the result returned. */
#define FORWARD(shape_, name_, args_, in_, after_)                                                                   \
    {                                                                                                                \
        llm4d_backend *const be = (in_);                                                                             \
        KEEP_##shape_ be->name_ args_;                                                                               \
        after_ GIVE_##shape_                                                                                         \
    }
#define G_OPEN(shape_, name_, params_, args_, ptrs_, drop_)                                                          \
    static LLM4D_RT_##shape_ g_##name_ params_ {                                                                     \
        guard_ctx *const g = enter(be);                                                                              \
        static const char m_[] = #name_;                                                                             \
        LLM4D_UNPAREN ptrs_;                                                                                         \
        GDROP_##drop_                                                                                                \
        FORWARD(shape_, name_, args_, g->in, leave(g);)                                                              \
    }
#define G_HOST(shape_, name_, params_, args_, ptrs_, drop_)                                                          \
    static LLM4D_RT_##shape_ g_##name_ params_ {                                                                     \
        llm4d_backend *const in = gctx(be)->in;                                                                      \
        FORWARD(shape_, name_, args_, in, )                                                                          \
    }
#define G_OWN(...)
#define G_METHOD(shape_, name_, params_, args_, guard_, ptrs_, drop_, ...)                                           \
    G_##guard_(shape_, name_, params_, args_, ptrs_, drop_)
LLM4D_BACKEND_METHODS(G_METHOD)

/* The table: every method of the list, the cpu backend's NULL staying NULL (nothing to forward to). */
#define G_SET_OPEN(name_) be->name_ = in->name_ ? g_##name_ : NULL;
#define G_SET_HOST(name_) be->name_ = in->name_ ? g_##name_ : NULL;
#define G_SET_OWN(name_) be->name_ = g_##name_;
#define G_SET(shape_, name_, params_, args_, guard_, ...) G_SET_##guard_(name_)

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
    LLM4D_BACKEND_METHODS(G_SET)
    *out = be;
    return LLM4D_OK;
}
