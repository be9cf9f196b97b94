/* xent_ranks.h — the tensor-parallel ranks' combination of the softmax cross-entropy's statistics, as the model does
 * it (model/embed.c combine: a MAX of the row maxima, each part rescaled to it, a SUM of the sums and the target's
 * logits), for the kernel tests that compute a vocabulary in parts (test_kernels.c, test_kernels16.c). */
#ifndef LLM4D_TESTS_XENT_RANKS_H
#define LLM4D_TESTS_XENT_RANKS_H

#include <math.h>
#include <string.h>

#include "backend/backend.h"

/* rk: the parts' statistics, 3 N floats each (backend.h xent_forward, planar); gmax [N] and sum [3 N] receive the
 * combined statistics (the parts in rk are rescaled in place). */
static inline void xent_combine_ranks(llm4d_backend *be, float *rk, int parts, int N, float *gmax, float *sum) {
    for (int i = 0; i < N; i++) {
        gmax[i] = -INFINITY;
        for (int q = 0; q < parts; q++) gmax[i] = fmaxf(gmax[i], rk[3 * (size_t)q * N + i]);
    }
    memset(sum, 0, 3 * (size_t)N * sizeof(float));
    for (int q = 0; q < parts; q++) {
        be->xent_rescale(be, rk + 3 * (size_t)q * N, gmax, N);
        for (int i = 0; i < 2 * N; i++) sum[N + i] += rk[3 * (size_t)q * N + N + i];
    }
    memcpy(sum, gmax, (size_t)N * sizeof(float));
}

#endif
