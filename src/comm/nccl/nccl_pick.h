/* nccl_pick.h — which groups may use NCCL: those whose members each have a GPU of their own.
 *
 * NCCL refuses a communicator in which two ranks share a GPU (that is how the layouts are tested on a one-GPU
 * machine), so the communicator asks every rank for a key naming its GPU (host name and PCI location), and a group
 * takes NCCL only if its members' keys are all present and pairwise different. Header-only and pure, so
 * tests/test_cuda_host.c checks the rule on any machine. */
#ifndef LLM4D_COMM_NCCL_PICK_H
#define LLM4D_COMM_NCCL_PICK_H

#include <stddef.h>
#include <string.h>

/* keys: one per world rank, keylen bytes each (NUL-terminated inside); members: the group's world ranks. */
static inline int llm4d_nccl_distinct(const char *keys, size_t keylen, const int *members, int n) {
    for (int i = 0; i < n; i++) {
        const char *a = keys + (size_t)members[i] * keylen;
        if (!a[0]) return 0; /* a rank without a GPU */
        for (int j = 0; j < i; j++)
            if (!strncmp(a, keys + (size_t)members[j] * keylen, keylen)) return 0;
    }
    return n > 1;
}

#endif
