/* cpu_drop.h — dropout masks of the fast CPU backend: the multipliers of a run of consecutive positions.
 *
 * Position pos of a dropout site is kept when llm4d_rng_u01(w) >= p for w, word pos % 4 of Philox-4x32-10 block
 * pos / 4 of the site's stream (core/rng.h, backend.h). The mask is never stored: forward, recompute and backward
 * evaluate the words again at the same positions. That makes the words the dropout's whole cost, and the attention
 * evaluates B NH T (T + 1) / 2 of them per pass (at GPT-2 124M, B=8, T=1024: 50M per layer, in forward and again
 * in backward), so they are computed in vector registers, blocks in structure-of-arrays form, 8 per AVX2 vector
 * or 16 per AVX-512 one. All three versions give the same bits; drop_mults is the widest the compiler targets, and
 * tests/test_drop_masks.c checks every one compiled against llm4d_rng_block.
 *
 * The comparison is on integers: llm4d_rng_u01(w) >= p exactly when (w >> 8) >= ceil(p 2^24), as (w >> 8) 2^-24
 * and p 2^24 are exact in float. */
#ifndef LLM4D_BACKEND_CPU_DROP_H
#define LLM4D_BACKEND_CPU_DROP_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backend/backend.h"
#include "core/rng.h"

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif
#if defined(__AVX512F__) && defined(__BMI2__)
#define LLM4D_DROP_AVX512 1
#else
#define LLM4D_DROP_AVX512 0
#endif

#define DROP_CHUNK 256 /* positions per mask chunk (stack buffers) */

/* Words of blocks blk0 .. blk0+nb-1 of the stream, 4 per block (GCC vectorises the inlined rounds). */
static inline void philox_blocks(uint64_t seed, uint64_t stream, uint64_t blk0, int nb, uint32_t *out) {
#pragma omp simd
    for (int j = 0; j < nb; j++) llm4d_rng_block(seed, stream, blk0 + (uint64_t)j, out + 4 * j);
}

/* mult[i] = 1/(1-p) if position pos0+i is kept, else 0, for 0 < n <= DROP_CHUNK positions. */
static inline void drop_mults_portable(const llm4d_dropout *d, uint64_t pos0, int n, float *mult) {
    uint32_t words[DROP_CHUNK + 8];
    uint64_t blk0 = pos0 >> 2;
    int off = (int)(pos0 & 3), nb = (off + n + 3) >> 2;
    philox_blocks(d->seed, d->stream, blk0, nb, words);
    const float p = d->p, s = 1.0f / (1.0f - d->p);
#pragma omp simd
    for (int i = 0; i < n; i++) mult[i] = llm4d_rng_u01(words[off + i]) >= p ? s : 0.0f;
}

#if LLM4D_DROP_AVX512
/* The two 32-bit halves of every 64-bit lane swapped: where only one half is used afterwards, what a 32-bit shift
 * would give, on the shuffle port instead of the one the multiplies need. */
static inline __m512i swap32(__m512i v) { return _mm512_shuffle_epi32(v, _MM_PERM_CDAB); }

/* The same words with AVX-512, 16 blocks per vector in structure-of-arrays form: a 32 x 32 -> 64-bit product of
 * 16 lanes is two VPMULUDQs (even and odd lanes) blended, the two XORs of a round one VPTERNLOGD. A vector's ten
 * rounds are a chain of dependent multiplies, so G vectors (blocks b .. b + 16G - 1) go side by side; the
 * 32-bit moves between halves of a lane are shuffles (swap32), which leaves the multiplies' port to them. The four
 * words' comparison masks (unsigned, against ceil(p 2^24) << 8) are interleaved into positions 4i + k with PDEP,
 * and the keep multipliers of the 64G positions left in out. */
static inline __attribute__((always_inline)) void drop_vectors_avx512(int G, const llm4d_dropout *d, uint64_t b,
                                                                      float *out) {
    const __m512i M0 = _mm512_set1_epi64(0xD2511F53u), M1 = _mm512_set1_epi64(0xCD9E8D57u);
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i thr = _mm512_set1_epi32((int)((uint32_t)ceilf(d->p * 16777216.0f) << 8));
    const __m512 keep = _mm512_set1_ps(1.0f / (1.0f - d->p));
    __m512i c0[2], c1[2], c2[2], c3[2];
    for (int g = 0; g < G; g++) {
        const uint64_t bg = b + 16 * (uint64_t)g;
        const __m512i lo = _mm512_set1_epi32((int)(uint32_t)bg), hi = _mm512_set1_epi32((int)(uint32_t)(bg >> 32));
        c0[g] = _mm512_add_epi32(lo, lane);
        c1[g] = _mm512_mask_add_epi32(hi, _mm512_cmplt_epu32_mask(c0[g], lo), hi, _mm512_set1_epi32(1)); /* carry */
        c2[g] = _mm512_set1_epi32((int)(uint32_t)d->stream);
        c3[g] = _mm512_set1_epi32((int)(uint32_t)(d->stream >> 32));
    }
    uint32_t key0 = (uint32_t)d->seed, key1 = (uint32_t)(d->seed >> 32);
    for (int round = 0; round < 10; round++) {
        const __m512i k0 = _mm512_set1_epi32((int)key0), k1 = _mm512_set1_epi32((int)key1);
        for (int g = 0; g < G; g++) {
            const __m512i pe0 = _mm512_mul_epu32(c0[g], M0), po0 = _mm512_mul_epu32(swap32(c0[g]), M0);
            const __m512i pe1 = _mm512_mul_epu32(c2[g], M1), po1 = _mm512_mul_epu32(swap32(c2[g]), M1);
            const __m512i hi0 = _mm512_mask_blend_epi32(0xAAAA, swap32(pe0), po0);
            const __m512i lo0 = _mm512_mask_blend_epi32(0xAAAA, pe0, swap32(po0));
            const __m512i hi1 = _mm512_mask_blend_epi32(0xAAAA, swap32(pe1), po1);
            const __m512i lo1 = _mm512_mask_blend_epi32(0xAAAA, pe1, swap32(po1));
            c0[g] = _mm512_ternarylogic_epi32(hi1, c1[g], k0, 0x96); /* hi1 ^ c1 ^ key0 */
            c2[g] = _mm512_ternarylogic_epi32(hi0, c3[g], k1, 0x96);
            c1[g] = lo1;
            c3[g] = lo0;
        }
        key0 += 0x9E3779B9u;
        key1 += 0xBB67AE85u;
    }
    for (int g = 0; g < G; g++) {
        const uint64_t m = _pdep_u64(_mm512_cmpge_epu32_mask(c0[g], thr), 0x1111111111111111ull) |
                           _pdep_u64(_mm512_cmpge_epu32_mask(c1[g], thr), 0x2222222222222222ull) |
                           _pdep_u64(_mm512_cmpge_epu32_mask(c2[g], thr), 0x4444444444444444ull) |
                           _pdep_u64(_mm512_cmpge_epu32_mask(c3[g], thr), 0x8888888888888888ull);
        for (int q = 0; q < 4; q++)
            _mm512_storeu_ps(out + 64 * g + 16 * q, _mm512_maskz_mov_ps((__mmask16)(m >> (16 * q)), keep));
    }
}

/* mult[i] for 0 < n <= DROP_CHUNK positions from pos0: two vectors at a time while 32 or more blocks are left.
 * Sapphire Rapids, one thread: 0.51 ns per position, against 0.66 one vector at a time with the swaps as shifts
 * (the same machine, back to back) and 0.95 for the portable loop (an earlier measurement). */
static inline void drop_mults_avx512(const llm4d_dropout *d, uint64_t pos0, int n, float *mult) {
    const uint64_t blk0 = pos0 >> 2;
    const int off = (int)(pos0 & 3), nb = (off + n + 3) >> 2;
    float buf[128];
    int done = 0;
    for (int j = 0; j < nb;) {
        const int G = nb - j >= 32 ? 2 : 1;
        if (G == 2) drop_vectors_avx512(2, d, blk0 + (uint64_t)j, buf);
        else drop_vectors_avx512(1, d, blk0 + (uint64_t)j, buf);
        const int from = j == 0 ? off : 0, cnt = 64 * G - from < n - done ? 64 * G - from : n - done;
        memcpy(mult + done, buf + from, (size_t)cnt * sizeof(float));
        done += cnt;
        j += 16 * G;
    }
}
#endif

#if defined(__AVX2__)
/* The Philox rounds of G vectors of 8 blocks each, blocks b .. b + 8G - 1, side by side: a vector's ten rounds are
 * a chain of dependent multiplies, and independent chains keep the multipliers busy. The high halves of the
 * 32 x 32 -> 64-bit products are two VPMULUDQs (even lanes, then odd lanes shifted down) blended back into lane
 * order; the low halves are VPMULLD. AVX2 has no unsigned comparison: the counter's carry into its high word
 * compares with the sign bit flipped. Leaves the keep multipliers of the 32G positions in out, in position order. */
static inline __attribute__((always_inline)) void drop_vectors_avx2(int G, const llm4d_dropout *d, uint64_t b,
                                                                    float *out) {
    const __m256i M0 = _mm256_set1_epi32((int)0xD2511F53u), M1 = _mm256_set1_epi32((int)0xCD9E8D57u);
    const __m256i sign = _mm256_set1_epi32(INT32_MIN);
    __m256i c0[3], c1[3], c2[3], c3[3];
    for (int g = 0; g < G; g++) {
        const uint64_t bg = b + 8 * (uint64_t)g;
        const __m256i lo = _mm256_set1_epi32((int)(uint32_t)bg), hi = _mm256_set1_epi32((int)(uint32_t)(bg >> 32));
        c0[g] = _mm256_add_epi32(lo, _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        const __m256i carry = _mm256_cmpgt_epi32(_mm256_xor_si256(lo, sign), _mm256_xor_si256(c0[g], sign));
        c1[g] = _mm256_sub_epi32(hi, carry); /* carry is -1 where the low word wrapped */
        c2[g] = _mm256_set1_epi32((int)(uint32_t)d->stream);
        c3[g] = _mm256_set1_epi32((int)(uint32_t)(d->stream >> 32));
    }
    uint32_t key0 = (uint32_t)d->seed, key1 = (uint32_t)(d->seed >> 32);
    for (int round = 0; round < 10; round++) {
        const __m256i k0 = _mm256_set1_epi32((int)key0), k1 = _mm256_set1_epi32((int)key1);
        for (int g = 0; g < G; g++) {
            const __m256i pe0 = _mm256_mul_epu32(c0[g], M0), po0 = _mm256_mul_epu32(_mm256_srli_epi64(c0[g], 32), M0);
            const __m256i pe1 = _mm256_mul_epu32(c2[g], M1), po1 = _mm256_mul_epu32(_mm256_srli_epi64(c2[g], 32), M1);
            const __m256i hi0 = _mm256_blend_epi32(_mm256_srli_epi64(pe0, 32), po0, 0xAA);
            const __m256i hi1 = _mm256_blend_epi32(_mm256_srli_epi64(pe1, 32), po1, 0xAA);
            const __m256i lo0 = _mm256_mullo_epi32(c0[g], M0), lo1 = _mm256_mullo_epi32(c2[g], M1);
            c0[g] = _mm256_xor_si256(_mm256_xor_si256(hi1, c1[g]), k0);
            c2[g] = _mm256_xor_si256(_mm256_xor_si256(hi0, c3[g]), k1);
            c1[g] = lo1;
            c3[g] = lo0;
        }
        key0 += 0x9E3779B9u;
        key1 += 0xBB67AE85u;
    }
    /* keep when w >> 8 (24 bits, so non-negative) > ceil(p 2^24) - 1; then word k of block i to position 4i + k,
     * a 4 x 8 transpose (unpacks within 128-bit lanes, then the lanes' halves swapped) */
    const __m256i thr = _mm256_set1_epi32((int)ceilf(d->p * 16777216.0f) - 1);
    const __m256 keep = _mm256_set1_ps(1.0f / (1.0f - d->p));
    for (int g = 0; g < G; g++) {
#define DROP_KEEP_AVX2(c) _mm256_and_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_srli_epi32(c, 8), thr)), keep)
        const __m256 m0 = DROP_KEEP_AVX2(c0[g]), m1 = DROP_KEEP_AVX2(c1[g]);
        const __m256 m2 = DROP_KEEP_AVX2(c2[g]), m3 = DROP_KEEP_AVX2(c3[g]);
#undef DROP_KEEP_AVX2
        const __m256 t0 = _mm256_unpacklo_ps(m0, m1), t1 = _mm256_unpackhi_ps(m0, m1);
        const __m256 t2 = _mm256_unpacklo_ps(m2, m3), t3 = _mm256_unpackhi_ps(m2, m3);
        const __m256 b04 = _mm256_shuffle_ps(t0, t2, 0x44), b15 = _mm256_shuffle_ps(t0, t2, 0xEE);
        const __m256 b26 = _mm256_shuffle_ps(t1, t3, 0x44), b37 = _mm256_shuffle_ps(t1, t3, 0xEE);
        float *o = out + 32 * g;
        _mm256_storeu_ps(o, _mm256_permute2f128_ps(b04, b15, 0x20));
        _mm256_storeu_ps(o + 8, _mm256_permute2f128_ps(b26, b37, 0x20));
        _mm256_storeu_ps(o + 16, _mm256_permute2f128_ps(b04, b15, 0x31));
        _mm256_storeu_ps(o + 24, _mm256_permute2f128_ps(b26, b37, 0x31));
    }
}

/* The same words with AVX2: three vectors (24 blocks) at a time, and only as many as the last 16 or 8 blocks need
 * (three chains keep Zen 3's multipliers busy; four spill registers). Zen 3, one thread: 0.75 ns per position in
 * 256-position chunks, 0.94 in chunks of random length, against 2.5 for the portable loop (which GCC vectorises,
 * but in 64-bit lanes and with a scatter of the words). */
static inline void drop_mults_avx2(const llm4d_dropout *d, uint64_t pos0, int n, float *mult) {
    const uint64_t blk0 = pos0 >> 2;
    const int off = (int)(pos0 & 3), nb = (off + n + 3) >> 2;
    float buf[96];
    int done = 0;
    for (int j = 0; j < nb;) {
        const int G = nb - j > 16 ? 3 : nb - j > 8 ? 2 : 1;
        /* one call per width, each with a constant G, so that each is inlined with its vectors in registers */
        if (G == 3)
            drop_vectors_avx2(3, d, blk0 + (uint64_t)j, buf);
        else if (G == 2)
            drop_vectors_avx2(2, d, blk0 + (uint64_t)j, buf);
        else
            drop_vectors_avx2(1, d, blk0 + (uint64_t)j, buf);
        const int from = j == 0 ? off : 0, cnt = 32 * G - from < n - done ? 32 * G - from : n - done;
        memcpy(mult + done, buf + from, (size_t)cnt * sizeof(float));
        done += cnt;
        j += 8 * G;
    }
}
#endif

/* mult[i] = 1/(1-p) if position pos0+i is kept, else 0, for 0 < n <= DROP_CHUNK positions and 0 < p < 1. */
static inline void drop_mults(const llm4d_dropout *d, uint64_t pos0, int n, float *mult) {
#if LLM4D_DROP_AVX512
    drop_mults_avx512(d, pos0, n, mult);
#elif defined(__AVX2__)
    drop_mults_avx2(d, pos0, n, mult);
#else
    drop_mults_portable(d, pos0, n, mult);
#endif
}

static inline int drop_on(const llm4d_dropout *d) { return d && d->p > 0.0f; }

/* A mask kept as bits (llm4d_dropout.bits): the n multipliers of drop_mults as bits of words[0 .. (n+31)/32), bit i
 * of word w set where mult[32 w + i] is not zero (the bits past n cleared), and back: mult[i] = keep where the bit
 * is set, else 0. keep must be drop_mults' 1/(1-p), so that both give a multiplier the same bits. */
static inline void drop_bits_store(uint32_t *words, const float *mult, int n) {
    for (int w = 0; 32 * w < n; w++) {
        const int len = n - 32 * w < 32 ? n - 32 * w : 32;
        uint32_t v = 0;
#if LLM4D_DROP_AVX512
        const __m512 z = _mm512_setzero_ps();
        const uint32_t lo = _mm512_mask_cmp_ps_mask((__mmask16)(len >= 16 ? 0xffff : (1u << len) - 1),
                                                    _mm512_loadu_ps(mult + 32 * w), z, _CMP_NEQ_UQ);
        const uint32_t hi = len > 16 ? _mm512_mask_cmp_ps_mask((__mmask16)(len >= 32 ? 0xffff : (1u << (len - 16)) - 1),
                                                               _mm512_loadu_ps(mult + 32 * w + 16), z, _CMP_NEQ_UQ)
                                     : 0;
        v = lo | hi << 16;
#else
        for (int i = 0; i < len; i++) v |= (uint32_t)(mult[32 * w + i] != 0.0f) << i;
#endif
        words[w] = v;
    }
}

static inline void drop_bits_mults(const uint32_t *words, int n, float keep, float *mult) {
#if LLM4D_DROP_AVX512
    const __m512 k = _mm512_set1_ps(keep);
    for (int w = 0; 32 * w < n; w++) {
        _mm512_storeu_ps(mult + 32 * w, _mm512_maskz_mov_ps((__mmask16)words[w], k));
        _mm512_storeu_ps(mult + 32 * w + 16, _mm512_maskz_mov_ps((__mmask16)(words[w] >> 16), k));
    }
#else
#pragma omp simd
    for (int i = 0; i < n; i++) mult[i] = (words[i / 32] >> (i % 32) & 1u) ? keep : 0.0f;
#endif
}

#endif
