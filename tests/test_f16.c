/* test_f16.c — core/f16.h's integer fp16 conversions (what the reference backend, the tests and the tools use for
 * fp16 tensors) against the CPU's own (F16C's VCVTPH2PS / VCVTPS2PH, round to nearest even: what the CPU backend's
 * kernels use), bit for bit: every one of the 65536 halves to fp32, and fp32 to half over every 97th bit pattern
 * (all exponents, signs, NaNs, infinities, the subnormal and overflow boundaries among them) plus the values at and
 * around each rounding tie of the subnormal and the largest normal binades. */
#include <immintrin.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "core/f16.h"

__attribute__((target("f16c"))) static float hw_to(uint16_t h) { return _cvtsh_ss(h); }
__attribute__((target("f16c"))) static uint16_t hw_from(float f) {
    return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float of(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

int main(void) {
    if (!__builtin_cpu_supports("f16c")) {
        printf("skipped: this CPU has no F16C to compare with\n");
        return 77;
    }
    long bad = 0, n = 0;
    for (uint32_t h = 0; h < 65536; h++, n++) bad += bits(hw_to((uint16_t)h)) != bits(llm4d_f16_to_f32((uint16_t)h));
    check(bad == 0, "fp16 -> fp32: %ld of %ld halves differ from VCVTPH2PS", bad, n);
    bad = n = 0;
    for (uint64_t u = 0; u <= 0xffffffffull; u += 97, n++) bad += hw_from(of((uint32_t)u)) != llm4d_f16_from_f32(of((uint32_t)u));
    /* each tie and its neighbours: halfway between consecutive halves, in every binade and sign */
    for (uint32_t h = 0; h < 0x7c00u; h++)
        for (int sgn = 0; sgn < 2; sgn++) {
            const float lo = llm4d_f16_to_f32((uint16_t)h), hi = llm4d_f16_to_f32((uint16_t)(h + 1));
            const uint32_t mid = bits((float)(((double)lo + (double)hi) / 2)) | (sgn ? 0x80000000u : 0u);
            for (int d = -1; d <= 1; d++, n++) bad += hw_from(of(mid + (uint32_t)d)) != llm4d_f16_from_f32(of(mid + (uint32_t)d));
        }
    check(bad == 0, "fp32 -> fp16: %ld of %ld values differ from VCVTPS2PH (round to nearest even)", bad, n);
    return check_summary();
}
