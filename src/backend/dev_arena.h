/* dev_arena.h — carving device memory out of a few large regions (the CUDA backend's allocator).
 *
 * Why: cudaMalloc and cudaFree are slow (milliseconds, and cudaFree synchronises the whole device), and many small
 * device allocations fragment the card. So the CUDA backend takes one region up front, the size the memory plan
 * counted (backend.h reserve), and every alloc is carved out of it; a request the regions cannot hold gets a new
 * region (the backend's cudaMalloc), so nothing fails that would fit on the device. The arena only does the
 * bookkeeping of addresses: it never touches the memory, so it is plain C, built in every configuration and tested
 * on machines without a GPU (tests/test_dev_arena.c).
 *
 * Blocks are first-fit in address order, rounded up to `align` bytes; a freed block merges with its free neighbours
 * of the same region. */
#ifndef LLM4D_BACKEND_DEV_ARENA_H
#define LLM4D_BACKEND_DEV_ARENA_H

#include <stddef.h>

typedef struct llm4d_dev_arena llm4d_dev_arena;

/* An empty arena whose blocks are multiples of align (a power of two); NULL when out of memory. */
llm4d_dev_arena *llm4d_dev_arena_create(size_t align);
/* Frees the bookkeeping, not the regions (their owner frees them: llm4d_dev_arena_region). */
void llm4d_dev_arena_destroy(llm4d_dev_arena *a);
/* Adds the region [base, base + bytes) (base aligned to align); 0 when out of memory for the bookkeeping. */
int llm4d_dev_arena_add(llm4d_dev_arena *a, void *base, size_t bytes);
/* A block of at least `bytes` (0 counts as 1), or NULL when no region has room. */
void *llm4d_dev_arena_alloc(llm4d_dev_arena *a, size_t bytes);
/* Returns the block at p to its region; 0 when p is not a block of this arena (a bug of the caller). */
int llm4d_dev_arena_free(llm4d_dev_arena *a, void *p);
/* Whether p lies inside one of the regions. */
int llm4d_dev_arena_owns(const llm4d_dev_arena *a, const void *p);
/* Bytes in blocks in use (rounded sizes), bytes of all regions, the largest free block. */
size_t llm4d_dev_arena_used(const llm4d_dev_arena *a);
size_t llm4d_dev_arena_capacity(const llm4d_dev_arena *a);
size_t llm4d_dev_arena_largest_free(const llm4d_dev_arena *a);
/* The regions, for their owner to free: the number of regions, and region i's base and size. */
int llm4d_dev_arena_nregions(const llm4d_dev_arena *a);
void *llm4d_dev_arena_region(const llm4d_dev_arena *a, int i, size_t *bytes);

#endif
