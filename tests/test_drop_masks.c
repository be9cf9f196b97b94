/* test_drop_masks.c — every compiled version of the CPU backend's dropout mask (src/backend/cpu_drop.h: portable C,
 * AVX2, AVX-512) against the definition in core/rng.h, computed here word by word with llm4d_rng_block.
 *
 * test_kernels checks the dropouts and the attention through whichever version the build selects; this test reaches
 * the others too (an AVX-512 build also compiles the AVX2 one), and the cases a kernel rarely meets: every start
 * offset within a block and every run length up to DROP_CHUNK, block counters whose low word wraps inside a vector
 * (the carry into the high word), seeds and streams with high bits set, and a word exactly at the threshold
 * (llm4d_rng_u01(w) == p keeps the position; the next float above p drops it). Results must be identical bits. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "backend/cpu_drop.h"
#include "check.h"

typedef void (*mask_fn)(const llm4d_dropout *d, uint64_t pos0, int n, float *mult);

static const struct {
    const char *name;
    mask_fn fn;
} versions[] = {
    {"portable", drop_mults_portable},
#if defined(__AVX2__)
    {"avx2", drop_mults_avx2},
#endif
#if LLM4D_DROP_AVX512
    {"avx512", drop_mults_avx512},
#endif
    {"selected", drop_mults},
};

/* The definition: position pos keeps when word pos % 4 of block pos / 4 gives llm4d_rng_u01 >= p. */
static float want_mult(const llm4d_dropout *d, uint64_t pos) {
    uint32_t w[4];
    llm4d_rng_block(d->seed, d->stream, pos >> 2, w);
    return llm4d_rng_u01(w[pos & 3]) >= d->p ? 1.0f / (1.0f - d->p) : 0.0f;
}

/* Every start offset 0..3 past base and every length 1..DROP_CHUNK (overlapping stretches): the positions whose
 * multiplier differs from the definition's, and the writes past n. */
static void sweep(mask_fn fn, const llm4d_dropout *d, uint64_t base, long *bad, long *total) {
    float mult[DROP_CHUNK];
    for (int off = 0; off < 4; off++)
        for (int n = 1; n <= DROP_CHUNK; n++) {
            const uint64_t pos0 = base + (uint64_t)off + 4 * (uint64_t)n; /* a different stretch for each n */
            for (int i = 0; i < DROP_CHUNK; i++) mult[i] = -1.0f;
            fn(d, pos0, n, mult);
            for (int i = 0; i < n; i++) {
                const float w = want_mult(d, pos0 + (uint64_t)i);
                *bad += memcmp(&mult[i], &w, sizeof w) != 0;
            }
            for (int i = n; i < DROP_CHUNK; i++) *bad += mult[i] != -1.0f; /* nothing written past n */
            *total += n;
        }
}

int main(void) {
    const float ps[] = {0.1f, 0.5f, 0.25f, 0.9f, 1e-7f};
    /* block counters: small, low word wrapping at 2^32 inside the first and the second vector, and at 2^33 */
    const uint64_t bases[] = {0, 4 * (((uint64_t)1 << 32) - 5) - 1024, 4 * (((uint64_t)1 << 32) - 13) - 1024,
                              4 * (((uint64_t)1 << 33) - 30) - 1024};
    const uint64_t seeds[][2] = {{1234, 77}, {0xF00DFACEDEADBEEFull, 0x8123456789ABCDEFull}};
    for (size_t v = 0; v < sizeof versions / sizeof versions[0]; v++)
        for (size_t k = 0; k < sizeof seeds / sizeof seeds[0]; k++)
            for (size_t q = 0; q < sizeof ps / sizeof ps[0]; q++) {
                const llm4d_dropout d = {.p = ps[q], .seed = seeds[k][0], .stream = seeds[k][1]};
                long bad = 0, total = 0;
                for (size_t b = 0; b < sizeof bases / sizeof bases[0]; b++)
                    sweep(versions[v].fn, &d, bases[b], &bad, &total);
                /* the rate over 2^16 distinct positions (its standard deviation is at most 0.002) */
                long dropped = 0;
                float mult[DROP_CHUNK];
                for (uint64_t c = 0; c < 256; c++) {
                    versions[v].fn(&d, 1000 + c * DROP_CHUNK, DROP_CHUNK, mult);
                    for (int i = 0; i < DROP_CHUNK; i++) dropped += mult[i] == 0.0f;
                }
                const double frac = (double)dropped / (256.0 * DROP_CHUNK);
                check(bad == 0 && fabs(frac - ps[q]) < 0.01,
                      "%s seed %zu p=%g: %ld multipliers, %ld differ from rng.h; %.4f of 65536 dropped",
                      versions[v].name, k, (double)ps[q], total, bad, frac);
            }
    /* a word exactly at the threshold: p = u01(w) keeps its position, the next float above p drops it */
    const llm4d_dropout base = {.seed = 99, .stream = 5};
    for (uint64_t pos = 8; pos < 64; pos += 9) {
        uint32_t w[4];
        llm4d_rng_block(base.seed, base.stream, pos >> 2, w);
        const float u = llm4d_rng_u01(w[pos & 3]);
        if (u <= 0.0f || u >= 0.99f) continue;
        for (size_t v = 0; v < sizeof versions / sizeof versions[0]; v++) {
            llm4d_dropout at = base, above = base;
            at.p = u;
            above.p = nextafterf(u, 1.0f);
            float m_at[DROP_CHUNK], m_above[DROP_CHUNK];
            versions[v].fn(&at, pos - 5, 11, m_at);
            versions[v].fn(&above, pos - 5, 11, m_above);
            check(m_at[5] == 1.0f / (1.0f - u) && m_above[5] == 0.0f,
                  "%s position %llu at its own threshold p=%.9g: kept (%g), and dropped just above (%g)",
                  versions[v].name, (unsigned long long)pos, (double)u, (double)m_at[5], (double)m_above[5]);
        }
    }
    return check_summary();
}
