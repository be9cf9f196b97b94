/* shm_sum.h — the vector kernels of the shared-memory collectives (comm_shm.h): sums of n buffers in a fixed order
 * and copies, split over the calling rank's OpenMP threads when there are several and the piece is large.
 *
 * The sums add the inputs in the order given (in[0] + in[1] + ... + in[n-1]) in fp32, 16 lanes at a time (GCC vector
 * extensions: AVX-512 registers on an AVX-512 machine, two AVX2 halves elsewhere), and the tail element by element
 * in the same order, so every element is the plain sum in rank order. bf16 inputs are widened to fp32, summed, and
 * rounded to nearest even once (core/bf16.h's rule, NaN kept quiet); MPI's bf16 operation (comm_mpi.c) rounds after
 * each pairwise add, which gives the same bits for two ranks. */
#ifndef LLM4D_COMM_SHM_SUM_H
#define LLM4D_COMM_SHM_SUM_H

#include <stddef.h>

#include "comm/comm.h"

/* out[i] = in[0][i] + ... + in[n-1][i] for i < len (elements of dt: F32 or BF16). out may be one of the inputs.
 * threads > 1: split over that many OpenMP threads (the caller is outside any parallel region). */
void llm4d_shm_sum(void *out, const void *const *in, int n, size_t len, llm4d_comm_dtype dt, int threads);
/* The same sums written to out and to out2 (either may be one of the inputs, at the same offset): an all-reduce's
 * own piece goes to the segment, for the peers, and to the caller's buffer in one pass instead of a sum and a copy. */
void llm4d_shm_sum2(void *out, void *out2, const void *const *in, int n, size_t len, llm4d_comm_dtype dt,
                    int threads);
/* The same sums written to each of out[0 .. n_out-1] (an input may also be an output, at the same offset): the
 * all-reduce over shared buffers writes its slice's sums into every rank's buffer in the pass that reads them. */
void llm4d_shm_sum_to(void *const *out, int n_out, const void *const *in, int n, size_t len, llm4d_comm_dtype dt,
                      int threads);
/* memcpy, split over threads the same way. */
void llm4d_shm_copy(void *dst, const void *src, size_t bytes, int threads);

#endif
