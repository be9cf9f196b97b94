/* shm_share.h — a rank's buffer moved into shared memory in place, and its peers' mapped beside it, so that the
 * shared-memory path (comm_shm.h) can sum the host's buffers directly instead of copying them through its slots.
 *
 * Why. The slot path copies each peer's piece into a slot, sums, and copies the sums back out: per rank about two
 * copies of the buffer beside the sum. Over buffers every rank of the host maps, an all-reduce is one pass: rank r
 * reads slice r of every rank's buffer and writes the sum into all of them (a read and a write of the buffer per
 * rank, what one memcpy moves), between two barriers. Gradient buffers are the ones that pay: they are made once
 * and all-reduced every step (parallel/data_parallel.c shares them).
 *
 * How, without changing who allocates the buffer. The caller's pages (page-aligned, whole pages: core/mem.c gives
 * large allocations that shape) are replaced in place by a POSIX shared-memory file holding the same bytes: the file
 * is filled with the buffer's contents through a second mapping, then mapped over the buffer (MAP_FIXED), so the
 * pointer and every view into it stay valid. The host's ranks exchange the files' names and map each other's; the
 * names are unlinked once all have mapped them (nothing outlives the job). Undoing it (llm4d_shm_region_free) moves
 * a private copy of the contents back over the buffer (mremap), so the owner can go on using or freeing it.
 *
 * Memory: the buffer's own pages count in the rank's resident set as before (as shared memory); the slices of the
 * peers' buffers it sums count too once touched, (n - 1) / n of the buffer (train/memplan_shm.c). /dev/shm must hold
 * every rank's buffer: where it cannot, the group stays on the slot path and says why. */
#ifndef LLM4D_COMM_SHM_SHARE_H
#define LLM4D_COMM_SHM_SHARE_H

#include <stddef.h>

#include "comm/comm_shm.h"

typedef struct llm4d_shm_region {
    char *base;   /* this rank's buffer (the caller's pointer) */
    size_t bytes; /* whole pages */
    int n;        /* the ranks of the host */
    char *at[LLM4D_SHM_MAX_RANKS]; /* every rank's buffer as mapped in this process (at[rank] == base for this rank) */
    int self;                      /* this rank's index */
    int given_back;                /* base is its owner's private memory again (llm4d_shm_region_give_back) */
    struct llm4d_shm_region *next;
} llm4d_shm_region;

/* Collective over c, whose ranks are all on this host (rank r of c is rank r of the region): shares buf (bytes,
 * the same on every rank). id: a number this process has not used for a region name. On success *out is the region;
 * when some rank cannot (not page-aligned, /dev/shm too small), every rank gets *out == NULL and why says what was
 * wrong here or that another rank failed; buffers are left as they were. Only a failing MPI call is an error. */
llm4d_code llm4d_shm_region_make(llm4d_comm *c, void *buf, size_t bytes, unsigned id, llm4d_shm_region **out,
                                 char *why, size_t why_n, llm4d_err *err);
/* This rank's buffer back to private memory (its contents kept); the peers' stay mapped. Local; once. */
void llm4d_shm_region_give_back(llm4d_shm_region *reg);
/* The buffer given back (unless it was), the peers' unmapped, reg freed. Local. */
void llm4d_shm_region_free(llm4d_shm_region *reg);

#endif
