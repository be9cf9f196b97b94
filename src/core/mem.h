/* mem.h — memory accounted by category.
 *
 * Every buffer llm4d allocates goes through an llm4d_mem tracker tagged with what it holds, so a rank can print
 * what it holds per category and compare with the ZeRO formulas (docs/design.md). Allocations are large and few (the
 * flat parameter/gradient/optimizer buffers and the activation arena are allocated once before step 1), so this
 * is a bookkeeping layer over aligned malloc, not a general-purpose allocator. The tracker is a value passed
 * explicitly; there is no global state. */
#ifndef LLM4D_CORE_MEM_H
#define LLM4D_CORE_MEM_H

#include <stddef.h>
#include <stdio.h>

typedef enum {
    LLM4D_MEM_PARAMS = 0,   /* model weights used by forward/backward */
    LLM4D_MEM_GRADS,        /* parameter gradients */
    LLM4D_MEM_OPTIM,        /* optimizer states: Adam m, v, fp32 master weights */
    LLM4D_MEM_ACTIVATIONS,  /* tensors kept from forward for backward */
    LLM4D_MEM_COMM,         /* communication buffers (buckets, gather buffers) */
    LLM4D_MEM_WORKSPACE,    /* scratch reused inside a step; data batches */
    LLM4D_MEM_NCATEGORIES
} llm4d_mem_category;

typedef struct {
    size_t bytes[LLM4D_MEM_NCATEGORIES]; /* held now */
    size_t peak[LLM4D_MEM_NCATEGORIES];  /* most held at once */
    size_t total_peak;                   /* most held at once over all categories */
} llm4d_mem;

const char *llm4d_mem_category_name(llm4d_mem_category c);

/* Gradient and communication buffers, and any allocation of at least LLM4D_MEM_PAGED_MIN bytes, are page-aligned
 * and own whole pages, so that shared memory can be mapped over them in place (comm/shm_share.h: the data-parallel
 * gradients); LLM4D_MEM_SPAN(bytes) is what such a one owns. */
#define LLM4D_MEM_PAGE ((size_t)4096)
#define LLM4D_MEM_PAGED_MIN ((size_t)1 << 20)
#define LLM4D_MEM_SPAN(bytes) (((bytes) + LLM4D_MEM_PAGE - 1) & ~(LLM4D_MEM_PAGE - 1))
/* Blocks of at least this many bytes ask the kernel for transparent huge pages (mem.c llm4d_mem_prefer_huge). */
#define LLM4D_MEM_HUGE_MIN ((size_t)4 << 20)
void llm4d_mem_prefer_huge(void *p, size_t bytes);

/* 64-byte aligned (or page-aligned, above), zero-filled. Returns NULL when the system is out of
 * memory (callers report it). */
void *llm4d_mem_alloc(llm4d_mem *mem, llm4d_mem_category c, size_t bytes);
void llm4d_mem_free(llm4d_mem *mem, llm4d_mem_category c, void *ptr, size_t bytes);
/* Account bytes held elsewhere (for example memory owned by a library) without allocating. */
void llm4d_mem_account(llm4d_mem *mem, llm4d_mem_category c, long long delta_bytes);
size_t llm4d_mem_total(const llm4d_mem *mem);

/* One line per category with MiB held and peak, then the total, each line prefixed by `prefix`. */
void llm4d_mem_print(const llm4d_mem *mem, FILE *f, const char *prefix);

#endif
