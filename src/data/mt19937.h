/* mt19937.h — numpy's legacy RandomState generator (MT19937) and its shuffle, bit for bit.
 *
 * PaddleNLP shuffles the GPT sample index with `np.random.RandomState(seed).shuffle`. To visit exactly the samples
 * PaddleNLP visits, in the same order, llm4d reproduces: seeding from an integer (MT19937's init_genrand, which is
 * numpy's `_legacy_seeding` for an int seed), the 32-bit output, numpy's 64-bit output (two 32-bit outputs, the
 * first one high), `random_interval(max)` (draw under the smallest all-ones mask >= max, reject values > max;
 * 64-bit draws when max > 0xffffffff), and the legacy Fisher-Yates shuffle `for i = n-1 .. 1: swap(x[i],
 * x[random_interval(i)])`. The state is a value owned by the caller. */
#ifndef LLM4D_DATA_MT19937_H
#define LLM4D_DATA_MT19937_H

#include <stdint.h>

typedef struct {
    uint32_t key[624];
    int pos;
} llm4d_mt19937;

void llm4d_mt19937_seed(llm4d_mt19937 *m, uint32_t seed);
uint32_t llm4d_mt19937_next32(llm4d_mt19937 *m);
uint64_t llm4d_mt19937_next64(llm4d_mt19937 *m);
/* A uniform integer in [0, max], numpy's random_interval. */
uint64_t llm4d_mt19937_interval(llm4d_mt19937 *m, uint64_t max);
/* numpy RandomState.shuffle of a 1-D array of n elements. */
void llm4d_mt19937_shuffle_u32(llm4d_mt19937 *m, uint32_t *x, int64_t n);
void llm4d_mt19937_shuffle_i64(llm4d_mt19937 *m, int64_t *x, int64_t n);

#endif
