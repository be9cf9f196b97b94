/* mem.c — category-tagged allocation accounting (see mem.h). */
#include "core/mem.h"

#include "core/error.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static const char *const category_names[LLM4D_MEM_NCATEGORIES] = {
    "params", "grads", "optimizer", "activations", "comm", "workspace",
};

const char *llm4d_mem_category_name(llm4d_mem_category c) {
    return (c >= 0 && c < LLM4D_MEM_NCATEGORIES) ? category_names[c] : "?";
}

size_t llm4d_mem_total(const llm4d_mem *mem) {
    size_t t = 0;
    for (int c = 0; c < LLM4D_MEM_NCATEGORIES; c++) t += mem->bytes[c];
    return t;
}

void llm4d_mem_account(llm4d_mem *mem, llm4d_mem_category c, long long delta) {
    if (!mem) return;
    mem->bytes[c] = (size_t)((long long)mem->bytes[c] + delta);
    if (mem->bytes[c] > mem->peak[c]) mem->peak[c] = mem->bytes[c];
    size_t t = llm4d_mem_total(mem);
    if (t > mem->total_peak) mem->total_peak = t;
}

/* The first touch of memory is what start-up spends its time on: 2 GiB took 8.4 s in 4 KiB pages on a 2-core VM
 * (a fault per page, each costlier under virtualisation) and 4.7 s in 2 MiB pages. So the large blocks (the
 * weights, gradients, Adam states, activations) ask for transparent huge pages, which Debian's default ("madvise")
 * grants to regions that ask. Only whole 2 MiB ranges inside the block get them, so no memory is added to the
 * block (its ends stay in small pages) and the resident set still counts exactly the pages touched. */
static void prefer_huge(void *p, size_t bytes) {
#ifdef MADV_HUGEPAGE
    const uintptr_t a = ((uintptr_t)p + LLM4D_MEM_PAGE - 1) & ~(uintptr_t)(LLM4D_MEM_PAGE - 1);
    const uintptr_t b = ((uintptr_t)p + bytes) & ~(uintptr_t)(LLM4D_MEM_PAGE - 1);
    if (b > a) (void)madvise((void *)a, b - a, MADV_HUGEPAGE); /* advice: refused or ignored, nothing changes */
#else
    (void)p, (void)bytes;
#endif
}

/* Colours. The kernel places every large anonymous mapping at a 2 MiB boundary, and malloc puts a page-aligned
 * block one page into its mapping, so all large blocks started at the same offset within a huge page: once huge
 * pages back them, element i of every activation has the same physical address bits 12-20 and falls into the same
 * L2 sets, and a kernel streaming three such tensors at once (LayerNorm, the residual dropout-add) missed in L2 on
 * its stores: gpt2-en's element-wise kernels took 0.22 s a step at B=2 T=1024 instead of 0.12 s with huge pages off
 * (Zen 5 VM, 2 threads). Each large block therefore starts COLOURS pages' worth of different offsets apart: the
 * n-th block at 1 + (n x COLOUR_STEP mod COLOURS) pages into what it allocates, the page before the block holding
 * what free() needs. The offset pages are never touched but that one, so the resident set grows by a page per
 * large block. */
#define COLOURS 64u
#define COLOUR_STEP 37u /* odd: the colours cycle through all 64 before repeating */
#define COLOUR_MAGIC ((uintptr_t)0x6c6c6d3464636f6cULL)

static int coloured(size_t rounded) { return rounded >= LLM4D_MEM_HUGE_MIN; }

static void *alloc_rounded(llm4d_mem *mem, llm4d_mem_category c, size_t bytes, size_t align, size_t rounded) {
    void *p;
    if (coloured(rounded)) {
        const size_t lead = (1 + (size_t)((mem ? mem->coloured++ : 0u) * COLOUR_STEP % COLOURS)) * LLM4D_MEM_PAGE;
        char *base = aligned_alloc(LLM4D_MEM_PAGE, lead + rounded);
        if (!base) return NULL;
        p = base + lead;
        ((uintptr_t *)p)[-1] = (uintptr_t)base;
        ((uintptr_t *)p)[-2] = (uintptr_t)p ^ COLOUR_MAGIC;
        prefer_huge(p, rounded);
    } else {
        p = aligned_alloc(align, rounded);
        if (!p) return NULL;
    }
    memset(p, 0, rounded);
    llm4d_mem_account(mem, c, (long long)bytes);
    return p;
}

void *llm4d_mem_alloc(llm4d_mem *mem, llm4d_mem_category c, size_t bytes) {
    const size_t align =
        c == LLM4D_MEM_GRADS || c == LLM4D_MEM_COMM || bytes >= LLM4D_MEM_PAGED_MIN ? LLM4D_MEM_PAGE : 64;
    size_t rounded = (bytes + align - 1) & ~(align - 1);
    if (rounded == 0) rounded = 64;
    return alloc_rounded(mem, c, bytes, align, rounded);
}

void *llm4d_mem_alloc_pages(llm4d_mem *mem, llm4d_mem_category c, size_t bytes) {
    return alloc_rounded(mem, c, bytes, LLM4D_MEM_PAGE, bytes ? LLM4D_MEM_SPAN(bytes) : LLM4D_MEM_PAGE);
}

void llm4d_mem_free(llm4d_mem *mem, llm4d_mem_category c, void *ptr, size_t bytes) {
    if (!ptr) return;
    if (coloured(LLM4D_MEM_SPAN(bytes))) { /* every block this large was page-aligned, so its span is its size */
        LLM4D_ASSERT((((uintptr_t *)ptr)[-2] ^ COLOUR_MAGIC) == (uintptr_t)ptr,
                     "llm4d_mem_free: %p was not allocated as a block of %zu bytes", ptr, bytes);
        free((void *)((uintptr_t *)ptr)[-1]);
    } else {
        free(ptr);
    }
    llm4d_mem_account(mem, c, -(long long)bytes);
}

void llm4d_mem_print(const llm4d_mem *mem, FILE *f, const char *prefix) {
    const double mib = 1024.0 * 1024.0;
    for (int c = 0; c < LLM4D_MEM_NCATEGORIES; c++)
        fprintf(f, "%s%-12s %10.2f MiB (peak %10.2f MiB)\n", prefix, category_names[c], mem->bytes[c] / mib,
                mem->peak[c] / mib);
    fprintf(f, "%s%-12s %10.2f MiB (peak %10.2f MiB)\n", prefix, "total", llm4d_mem_total(mem) / mib,
            mem->total_peak / mib);
}
