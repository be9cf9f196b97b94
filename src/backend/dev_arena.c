/* dev_arena.c — the address bookkeeping of device memory regions (see dev_arena.h).
 *
 * The blocks of all regions live in one array sorted by address, each tagged with its region, and tile every
 * region exactly (used and free blocks alternate as they come). An allocation takes the first free block that is
 * large enough and splits off the rest; a free merges with free neighbours of the same region. The arrays are
 * small (hundreds of blocks: a model's tensors are allocated once), so linear scans are fine. */
#include "backend/dev_arena.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    uintptr_t addr;
    size_t len;
    int region;
    int used;
} blk;

typedef struct {
    uintptr_t base;
    size_t bytes;
} region;

struct llm4d_dev_arena {
    size_t align;
    blk *b;
    int nb, capb;
    region *r;
    int nr, capr;
    size_t used;
};

llm4d_dev_arena *llm4d_dev_arena_create(size_t align) {
    if (!align || (align & (align - 1))) return NULL;
    llm4d_dev_arena *a = calloc(1, sizeof *a);
    if (a) a->align = align;
    return a;
}

void llm4d_dev_arena_destroy(llm4d_dev_arena *a) {
    if (!a) return;
    free(a->b);
    free(a->r);
    free(a);
}

static int grow_blocks(llm4d_dev_arena *a, int need) {
    if (a->nb + need <= a->capb) return 1;
    int cap = a->capb ? 2 * a->capb : 64;
    while (cap < a->nb + need) cap *= 2;
    blk *b = realloc(a->b, (size_t)cap * sizeof *b);
    if (!b) return 0;
    a->b = b;
    a->capb = cap;
    return 1;
}

int llm4d_dev_arena_add(llm4d_dev_arena *a, void *base, size_t bytes) {
    const uintptr_t addr = (uintptr_t)base;
    bytes &= ~(a->align - 1);
    if (!base || !bytes || (addr & (a->align - 1))) return 0;
    if (a->nr == a->capr) {
        const int cap = a->capr ? 2 * a->capr : 8;
        region *r = realloc(a->r, (size_t)cap * sizeof *r);
        if (!r) return 0;
        a->r = r;
        a->capr = cap;
    }
    if (!grow_blocks(a, 1)) return 0;
    int k = 0; /* keep the blocks sorted by address */
    while (k < a->nb && a->b[k].addr < addr) k++;
    memmove(&a->b[k + 1], &a->b[k], (size_t)(a->nb - k) * sizeof *a->b);
    a->b[k] = (blk){addr, bytes, a->nr, 0};
    a->nb++;
    a->r[a->nr++] = (region){addr, bytes};
    return 1;
}

void *llm4d_dev_arena_alloc(llm4d_dev_arena *a, size_t bytes) {
    const size_t len = ((bytes ? bytes : 1) + a->align - 1) & ~(a->align - 1);
    if (len < bytes) return NULL; /* overflow */
    for (int k = 0; k < a->nb; k++) {
        blk *e = &a->b[k];
        if (e->used || e->len < len) continue;
        if (e->len > len) { /* split: the rest stays free */
            if (!grow_blocks(a, 1)) return NULL;
            e = &a->b[k];
            memmove(&a->b[k + 2], &a->b[k + 1], (size_t)(a->nb - k - 1) * sizeof *a->b);
            a->b[k + 1] = (blk){e->addr + len, e->len - len, e->region, 0};
            e->len = len;
            a->nb++;
        }
        e->used = 1;
        a->used += e->len;
        return (void *)e->addr;
    }
    return NULL;
}

int llm4d_dev_arena_free(llm4d_dev_arena *a, void *p) {
    const uintptr_t addr = (uintptr_t)p;
    int k = 0;
    while (k < a->nb && a->b[k].addr != addr) k++;
    if (k == a->nb || !a->b[k].used) return 0;
    a->b[k].used = 0;
    a->used -= a->b[k].len;
    if (k + 1 < a->nb && !a->b[k + 1].used && a->b[k + 1].region == a->b[k].region) {
        a->b[k].len += a->b[k + 1].len;
        memmove(&a->b[k + 1], &a->b[k + 2], (size_t)(a->nb - k - 2) * sizeof *a->b);
        a->nb--;
    }
    if (k > 0 && !a->b[k - 1].used && a->b[k - 1].region == a->b[k].region) {
        a->b[k - 1].len += a->b[k].len;
        memmove(&a->b[k], &a->b[k + 1], (size_t)(a->nb - k - 1) * sizeof *a->b);
        a->nb--;
    }
    return 1;
}

int llm4d_dev_arena_owns(const llm4d_dev_arena *a, const void *p) {
    const uintptr_t addr = (uintptr_t)p;
    for (int i = 0; i < a->nr; i++)
        if (addr >= a->r[i].base && addr < a->r[i].base + a->r[i].bytes) return 1;
    return 0;
}

size_t llm4d_dev_arena_used(const llm4d_dev_arena *a) { return a->used; }

size_t llm4d_dev_arena_capacity(const llm4d_dev_arena *a) {
    size_t n = 0;
    for (int i = 0; i < a->nr; i++) n += a->r[i].bytes;
    return n;
}

size_t llm4d_dev_arena_largest_free(const llm4d_dev_arena *a) {
    size_t m = 0;
    for (int k = 0; k < a->nb; k++)
        if (!a->b[k].used && a->b[k].len > m) m = a->b[k].len;
    return m;
}

int llm4d_dev_arena_nregions(const llm4d_dev_arena *a) { return a->nr; }

void *llm4d_dev_arena_region(const llm4d_dev_arena *a, int i, size_t *bytes) {
    if (i < 0 || i >= a->nr) return NULL;
    if (bytes) *bytes = a->r[i].bytes;
    return (void *)a->r[i].base;
}
