/* cpu_owed.c — gradients that start over without being zeroed (backend.h grads_reset / grads_settle), the CPU's
 * set of the ranges owed zeros.
 *
 * Why: a storage engine's gradients accumulate over a step's micro-batches from zero, and zeroing them is a write of
 * 4 bytes per parameter (a tenth of the optimizer's traffic), after which the first micro-batch's weight-gradient
 * GEMMs read the zeros back to add to them: oneDNN's bf16 GEMM with its sum post-op ran 10-15 % slower than the same
 * GEMM storing its result (GPT-2 124M's four linear layers at 256 tokens, oneDNN timed on its own, best of 30, Zen 4,
 * 2 threads: 9.4 against 8.5 ms per block; fp32 2-4 %). PyTorch's zero_grad(set_to_none=True) lets the first
 * backward write the gradient instead; here the engine says the gradients start over (grads_reset: nothing is
 * written), the first kernel that writes a range owed zeros writes it instead of adding (a GEMM with beta 0; take
 * below), a kernel that can only add zeroes the part it is about to add to first (settle), and grads_settle writes
 * the zeros nothing wrote over (the model after each group's backward, the trainer after the step's: before
 * anything outside the backend reads them).
 *
 * The set is a sorted list of disjoint byte ranges [lo, hi), merged when they touch; a step's takes cut it into at
 * most a few per parameter group. Every method of this backend that reads or writes a gradient asks it first; the
 * grad-writing kernels are cpu_linear.c (weight and bias gradients), cpu_elem.c (embeddings, LayerNorm) and
 * cpu_llama.c (RMSNorm), and the optimizer's passes, the copies and zero settle or drop what they touch. */
#include <stdlib.h>

#include "backend/cpu_impl.h"

static void drop_at(llm4d_cpu_owed *o, int i) {
    memmove(o->r + i, o->r + i + 1, (size_t)(o->n - i - 1) * sizeof *o->r);
    o->n--;
}

static void insert_at(llm4d_cpu_owed *o, int i, uintptr_t lo, uintptr_t hi) {
    if (o->n == o->cap) {
        const int cap = o->cap ? 2 * o->cap : 16;
        llm4d_cpu_range *r = realloc(o->r, (size_t)cap * sizeof *r);
        LLM4D_ASSERT(r != NULL, "out of memory for %d owed gradient ranges", cap);
        o->r = r, o->cap = cap;
    }
    memmove(o->r + i + 1, o->r + i, (size_t)(o->n - i) * sizeof *o->r);
    o->r[i] = (llm4d_cpu_range){lo, hi};
    o->n++;
}

/* Remove [lo, hi) from the set; zero: write zeros over the removed parts first. */
static void remove_span(llm4d_cpu_owed *o, uintptr_t lo, uintptr_t hi, int zero) {
    for (int i = 0; i < o->n && o->r[i].lo < hi;) {
        llm4d_cpu_range *r = &o->r[i];
        if (r->hi <= lo) {
            i++;
            continue;
        }
        const uintptr_t a = r->lo > lo ? r->lo : lo, b = r->hi < hi ? r->hi : hi;
        if (zero) llm4d_cpu_memzero((void *)a, b - a);
        if (r->lo < a && r->hi > b) { /* the middle of one range: it splits in two */
            const uintptr_t end = r->hi;
            r->hi = a;
            insert_at(o, i + 1, b, end);
            return;
        }
        if (r->lo < a) r->hi = a, i++;
        else if (r->hi > b) r->lo = b, i++;
        else drop_at(o, i);
    }
}

static void owed_add(llm4d_cpu_owed *o, const void *p, size_t bytes) {
    if (!p || !bytes) return;
    uintptr_t lo = (uintptr_t)p, hi = lo + bytes;
    int i = 0;
    while (i < o->n && o->r[i].hi < lo) i++;
    /* ranges that overlap or touch [lo, hi) merge into it */
    while (i < o->n && o->r[i].lo <= hi) {
        if (o->r[i].lo < lo) lo = o->r[i].lo;
        if (o->r[i].hi > hi) hi = o->r[i].hi;
        drop_at(o, i);
    }
    insert_at(o, i, lo, hi);
}

int llm4d_cpu_grad_take(cpu_ctx *cx, const void *p, size_t bytes) {
    llm4d_cpu_owed *o = &cx->owed;
    if (!o->n || !p || !bytes) return 0;
    const uintptr_t lo = (uintptr_t)p, hi = lo + bytes;
    for (int i = 0; i < o->n && o->r[i].lo < hi; i++)
        if (o->r[i].lo <= lo && o->r[i].hi >= hi) { /* wholly owed: the caller writes it all */
            remove_span(o, lo, hi, 0);
            return 1;
        }
    remove_span(o, lo, hi, 1);
    return 0;
}

void llm4d_cpu_grad_settle(cpu_ctx *cx, const void *p, size_t bytes) {
    llm4d_cpu_owed *o = &cx->owed;
    if (!o->n) return;
    if (!p) remove_span(o, 0, UINTPTR_MAX, 1);
    else if (bytes) remove_span(o, (uintptr_t)p, (uintptr_t)p + bytes, 1);
}

void llm4d_cpu_grad_written(cpu_ctx *cx, const void *p, size_t bytes) {
    if (cx->owed.n && p && bytes) remove_span(&cx->owed, (uintptr_t)p, (uintptr_t)p + bytes, 0);
}

static void cpu_grads_reset(llm4d_backend *be, void *p, size_t bytes) { owed_add(&ctx_of(be)->owed, p, bytes); }

static void cpu_grads_settle(llm4d_backend *be, void *p, size_t bytes) { llm4d_cpu_grad_settle(ctx_of(be), p, bytes); }

void llm4d_cpu_owed_install(llm4d_backend *be) {
    be->grads_reset = cpu_grads_reset;
    be->grads_settle = cpu_grads_settle;
}
