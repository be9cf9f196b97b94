/* test_dev_arena.c — the CUDA backend's allocator bookkeeping (src/backend/dev_arena.c), on plain host memory: the
 * arena never touches the memory it hands out, so its rules are checked on any machine.
 *   - blocks are aligned and rounded to the alignment, lie inside their region, and never overlap (a random
 *     sequence of allocations and frees against a byte map of what is in use: the oracle);
 *   - a freed block merges with free neighbours (after freeing everything the region is one block again);
 *   - first fit: a freed hole is reused by a request that fits;
 *   - a request larger than any free block fails (NULL) instead of returning overlapping memory, and succeeds once a
 *     region is added; blocks never span two regions;
 *   - freeing a pointer the arena did not hand out is refused. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/dev_arena.h"
#include "check.h"

#define ALIGN 256
#define REGION (1 << 20)

static unsigned rnd(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

int main(void) {
    char *mem = aligned_alloc(ALIGN, 2 * REGION);
    unsigned char *used = calloc(2 * REGION, 1);
    if (!mem || !used) return 1;
    llm4d_dev_arena *a = llm4d_dev_arena_create(ALIGN);
    check(a != NULL && llm4d_dev_arena_create(100) == NULL, "an arena with a power-of-two alignment, refused otherwise");
    check(llm4d_dev_arena_alloc(a, 16) == NULL, "no region: an allocation fails");
    check(llm4d_dev_arena_add(a, mem, REGION) && llm4d_dev_arena_capacity(a) == REGION, "a region added");

    /* random allocations and frees against the byte map */
    void *p[64] = {0};
    size_t len[64] = {0};
    unsigned seed = 7;
    int aligned = 1, inside = 1, disjoint = 1, failures = 0, bad_free = 0;
    for (int it = 0; it < 4000; it++) {
        const int k = (int)(rnd(&seed) % 64);
        if (p[k]) {
            const size_t off = (size_t)((char *)p[k] - mem);
            memset(used + off, 0, len[k]);
            if (!llm4d_dev_arena_free(a, p[k])) bad_free++;
            p[k] = NULL;
            continue;
        }
        const size_t want = 1 + rnd(&seed) % 80000;
        void *q = llm4d_dev_arena_alloc(a, want);
        if (!q) {
            failures++;
            continue;
        }
        const size_t off = (size_t)((char *)q - mem), rounded = (want + ALIGN - 1) / ALIGN * ALIGN;
        if (off % ALIGN) aligned = 0;
        if (off + rounded > REGION) inside = 0;
        for (size_t i = 0; i < rounded && off + i < REGION; i++)
            if (used[off + i]) {
                disjoint = 0;
                break;
            }
        memset(used + off, 1, rounded < REGION - off ? rounded : REGION - off);
        p[k] = q;
        len[k] = rounded;
    }
    check(aligned && inside && disjoint && !bad_free,
          "4000 random operations: blocks aligned, inside the region, never overlapping, every free accepted");
    check(failures > 0 && failures < 4000, "some requests did not fit a full region (%d) and returned NULL", failures);
    size_t expect = 0;
    for (int k = 0; k < 64; k++) expect += p[k] ? len[k] : 0;
    check(llm4d_dev_arena_used(a) == expect, "used bytes: %zu, the live blocks' %zu", llm4d_dev_arena_used(a), expect);
    for (int k = 0; k < 64; k++)
        if (p[k]) llm4d_dev_arena_free(a, p[k]), p[k] = NULL;
    check(llm4d_dev_arena_used(a) == 0 && llm4d_dev_arena_largest_free(a) == REGION,
          "everything freed: the region is one free block again (largest free %zu)", llm4d_dev_arena_largest_free(a));

    /* first fit reuses a hole */
    void *x = llm4d_dev_arena_alloc(a, 1000), *y = llm4d_dev_arena_alloc(a, 1000), *z = llm4d_dev_arena_alloc(a, 1000);
    llm4d_dev_arena_free(a, y);
    void *y2 = llm4d_dev_arena_alloc(a, 500);
    check(y2 == y, "a freed hole is reused first (first fit)");
    check(!llm4d_dev_arena_free(a, (char *)x + 256), "freeing a pointer inside a block is refused");
    llm4d_dev_arena_free(a, y2);
    check(!llm4d_dev_arena_free(a, y2), "freeing twice is refused");
    llm4d_dev_arena_free(a, x), llm4d_dev_arena_free(a, z);

    /* a request larger than the region, then a second region */
    void *big = llm4d_dev_arena_alloc(a, REGION + 1);
    check(big == NULL, "a request larger than every region fails");
    void *fill = llm4d_dev_arena_alloc(a, REGION);
    check(fill == mem, "the whole region in one block");
    check(llm4d_dev_arena_alloc(a, 1) == NULL, "a full arena refuses even one byte");
    check(llm4d_dev_arena_add(a, mem + REGION, REGION), "a second region");
    void *second = llm4d_dev_arena_alloc(a, 4096);
    check(second == mem + REGION && llm4d_dev_arena_owns(a, second) && llm4d_dev_arena_nregions(a) == 2,
          "the request lands in the second region");
    llm4d_dev_arena_free(a, fill);
    llm4d_dev_arena_free(a, second);
    /* freed blocks of the two regions do not merge into one spanning both (they are separate cudaMallocs) */
    check(llm4d_dev_arena_largest_free(a) == REGION && llm4d_dev_arena_alloc(a, REGION + ALIGN) == NULL,
          "blocks never span two regions");
    size_t rb = 0;
    check(llm4d_dev_arena_region(a, 1, &rb) == mem + REGION && rb == REGION, "the regions are listed for their owner");
    check(!llm4d_dev_arena_owns(a, mem + 2 * REGION), "memory past the regions is not the arena's");
    llm4d_dev_arena_destroy(a);
    free(mem);
    free(used);
    return check_summary();
}
