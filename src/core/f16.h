/* f16.h — IEEE half precision (fp16) to and from fp32 in integer arithmetic, for host code: the reference backend,
 * tests and tools (backend/tensor.h's element access). The kernels use the hardware's conversions (F16C's
 * VCVTPH2PS / VCVTPS2PH, CUDA's __half2float / __float2half_rn), and these give the same bits: round to nearest
 * even, fp16 subnormals kept, overflow to infinity, a NaN quiet with its payload's top bits. Written without
 * _Float16, which clang 14 (the fuzzers' compiler) does not support on x86. */
#ifndef LLM4D_CORE_F16_H
#define LLM4D_CORE_F16_H

#include <stdint.h>
#include <string.h>

static inline uint16_t llm4d_f16_from_f32(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu)); /* NaN, quiet */
    if (a >= 0x38800000u) {             /* fp16's normal range (2^-14 and up), or beyond it */
        uint32_t r = a - 0x38000000u;   /* the exponent rebiased from 127 to 15 */
        r += 0x0fffu + ((r >> 13) & 1u); /* round to nearest even at the 13 bits dropped */
        r >>= 13;
        return (uint16_t)(sign | (r >= 0x7c00u ? 0x7c00u : r)); /* past 65504: infinity */
    }
    if (a < 0x33000000u) return (uint16_t)sign; /* below half the smallest subnormal (2^-25, a tie, goes to 0) */
    /* a subnormal: the value in units of 2^-24, rounded to nearest even (rounding up to 0x400 is the smallest
     * normal, whose encoding that is) */
    const uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u, s = 126u - e; /* s in 14..24 */
    uint32_t q = m >> s;
    const uint32_t rem = m & ((1u << s) - 1u), half = 1u << (s - 1u);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return (uint16_t)(sign | q);
}

static inline float llm4d_f16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
    if (e == 0x1fu) {
        x = sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u); /* infinity, or a NaN made quiet */
    } else if (e) {
        x = sign | ((e + 112u) << 23) | (m << 13);
    } else if (!m) {
        x = sign;
    } else { /* a subnormal: m 2^-24, normalised */
        int s = 0;
        while (!(m & 0x400u)) m <<= 1, s++;
        x = sign | ((uint32_t)(113 - s) << 23) | ((m & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &x, 4);
    return f;
}

#endif
