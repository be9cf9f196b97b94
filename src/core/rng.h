/* rng.h — counter-based random numbers (Philox4x32-10, Salmon et al. 2011).
 *
 * Every random number in llm4d is a pure function of (seed, stream, position): initial weights are keyed by the
 * parameter and the element's index in the *global* tensor, dropout masks by (step, layer, site) and the global
 * position of the element (global sample index, token, feature). So the numbers do not depend on how the work is
 * split over threads or ranks, which is what lets every parallel layout train the same model (docs/design.md,
 * "layout-invariant results"), and a resumed run needs only the seed and the step to continue bit-identically.
 * Philox is the generator cuRAND and PyTorch's CUDA backend use; one call yields four 32-bit words. */
#ifndef LLM4D_CORE_RNG_H
#define LLM4D_CORE_RNG_H

#include <math.h>
#include <stdint.h>

/* The same functions compile as device code in the CUDA backend (src/backend/cuda), so a GPU draws the CPU's numbers
 * from this one definition. */
#ifdef __CUDACC__
#define LLM4D_HD __host__ __device__
#else
#define LLM4D_HD
#endif

/* Purposes, the top byte of a stream id, so that streams of different uses never collide. */
enum { LLM4D_RNG_INIT = 1, LLM4D_RNG_DROPOUT = 2, LLM4D_RNG_SAMPLE = 3 };

/* Dropout sites within a layer. */
enum { LLM4D_DROP_EMBED = 0, LLM4D_DROP_ATTN_PROBS = 1, LLM4D_DROP_ATTN_OUT = 2, LLM4D_DROP_MLP_OUT = 3 };

LLM4D_HD static inline void llm4d_philox4x32_10(uint32_t key0, uint32_t key1, const uint32_t ctr_in[4],
                                                uint32_t out[4]) {
    uint32_t c0 = ctr_in[0], c1 = ctr_in[1], c2 = ctr_in[2], c3 = ctr_in[3];
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0;
        uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ key0;
        uint32_t n1 = (uint32_t)p1;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ key1;
        uint32_t n3 = (uint32_t)p0;
        c0 = n0; c1 = n1; c2 = n2; c3 = n3;
        key0 += 0x9E3779B9u;
        key1 += 0xBB67AE85u;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

/* A stream id: purpose, then up to 16 bits of layer, 8 of site, 32 of step (or parameter id for init). */
LLM4D_HD static inline uint64_t llm4d_rng_stream(unsigned purpose, unsigned layer, unsigned site, uint32_t step) {
    return ((uint64_t)(purpose & 0xff) << 56) | ((uint64_t)(layer & 0xffff) << 40) | ((uint64_t)(site & 0xff) << 32) |
           step;
}

/* The four words of block `block` (positions 4*block .. 4*block+3) of a stream. */
LLM4D_HD static inline void llm4d_rng_block(uint64_t seed, uint64_t stream, uint64_t block, uint32_t out[4]) {
    const uint32_t ctr[4] = {(uint32_t)block, (uint32_t)(block >> 32), (uint32_t)stream, (uint32_t)(stream >> 32)};
    llm4d_philox4x32_10((uint32_t)seed, (uint32_t)(seed >> 32), ctr, out);
}

/* uniform in [0, 1) with 24 bits, from one word */
LLM4D_HD static inline float llm4d_rng_u01(uint32_t w) { return (float)(w >> 8) * (1.0f / 16777216.0f); }

/* Standard normal for position `pos` of a stream: Box-Muller on the two words of its half-block. */
LLM4D_HD static inline float llm4d_rng_normal(uint64_t seed, uint64_t stream, uint64_t pos) {
    uint32_t w[4];
    llm4d_rng_block(seed, stream, pos >> 1, w);
    uint32_t a = w[(pos & 1) * 2], b = w[(pos & 1) * 2 + 1];
    double u1 = ((double)a + 1.0) / 4294967297.0; /* (0, 1], so log is finite */
    double u2 = (double)b / 4294967296.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

#endif
