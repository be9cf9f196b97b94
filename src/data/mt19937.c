/* mt19937.c — MT19937 as numpy's legacy RandomState runs it (see mt19937.h). The generator is Matsumoto and
 * Nishimura's; the parts that decide the sample order beyond the raw stream (how a bounded integer is drawn and
 * in which direction the shuffle walks) follow numpy's distributions.c and mtrand.pyx. */
#include "data/mt19937.h"

#define MT_N 624
#define MT_M 397

void llm4d_mt19937_seed(llm4d_mt19937 *m, uint32_t seed) {
    m->key[0] = seed;
    for (int i = 1; i < MT_N; i++)
        m->key[i] = 1812433253u * (m->key[i - 1] ^ (m->key[i - 1] >> 30)) + (uint32_t)i;
    m->pos = MT_N;
}

static void regenerate(llm4d_mt19937 *m) {
    uint32_t *k = m->key;
    for (int i = 0; i < MT_N; i++) {
        uint32_t y = (k[i] & 0x80000000u) | (k[(i + 1) % MT_N] & 0x7fffffffu);
        k[i] = k[(i + MT_M) % MT_N] ^ (y >> 1) ^ ((0u - (y & 1u)) & 0x9908b0dfu);
    }
    m->pos = 0;
}

uint32_t llm4d_mt19937_next32(llm4d_mt19937 *m) {
    if (m->pos == MT_N) regenerate(m);
    uint32_t y = m->key[m->pos++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    y ^= y >> 18;
    return y;
}

uint64_t llm4d_mt19937_next64(llm4d_mt19937 *m) {
    uint64_t hi = llm4d_mt19937_next32(m); /* sequenced explicitly: numpy's one-expression form leaves it to gcc */
    return hi << 32 | llm4d_mt19937_next32(m);
}

uint64_t llm4d_mt19937_interval(llm4d_mt19937 *m, uint64_t max) {
    if (max == 0) return 0;
    uint64_t mask = max, v;
    mask |= mask >> 1;
    mask |= mask >> 2;
    mask |= mask >> 4;
    mask |= mask >> 8;
    mask |= mask >> 16;
    mask |= mask >> 32;
    if (max <= 0xffffffffu) {
        while ((v = (llm4d_mt19937_next32(m) & mask)) > max) {
        }
    } else {
        while ((v = (llm4d_mt19937_next64(m) & mask)) > max) {
        }
    }
    return v;
}

void llm4d_mt19937_shuffle_u32(llm4d_mt19937 *m, uint32_t *x, int64_t n) {
    for (int64_t i = n - 1; i >= 1; i--) {
        int64_t j = (int64_t)llm4d_mt19937_interval(m, (uint64_t)i);
        uint32_t t = x[i];
        x[i] = x[j];
        x[j] = t;
    }
}

void llm4d_mt19937_shuffle_i64(llm4d_mt19937 *m, int64_t *x, int64_t n) {
    for (int64_t i = n - 1; i >= 1; i--) {
        int64_t j = (int64_t)llm4d_mt19937_interval(m, (uint64_t)i);
        int64_t t = x[i];
        x[i] = x[j];
        x[j] = t;
    }
}
