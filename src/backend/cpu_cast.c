/* cpu_cast.c — typed tensors to and from fp32 for the CPU backend's kernels (cpu_impl.h llm4d_cpu_load/store), and
 * the backend's `convert` method.
 *
 * bf16: widening is a shift, rounding the bit trick of core/bf16.h (to nearest even, NaN kept quiet, subnormals
 * kept), both written so that GCC vectorises them; the same rounding on every CPU, so what the element-wise kernels
 * store is the same on an AVX2 machine as on an AVX512-BF16 one (whose VCVTNE2PS2BF16 would flush subnormals; the
 * bf16 GEMMs of oneDNN there do flush subnormal results, below 1.2e-38, which no activation of a GPT reaches).
 * fp16: F16C's VCVTPH2PS / VCVTPS2PH (round to nearest even), 8 elements an instruction; GCC 12 does not vectorise
 * C's _Float16 conversions, and every CPU llm4d targets has F16C (Zen 3 and later, Sapphire Rapids). */
#include <immintrin.h>
#include <omp.h>
#include <stdlib.h>

#include "backend/cpu_impl.h"

static void load_bf16(float *restrict dst, const uint16_t *restrict s, size_t n) {
#pragma omp simd
    for (size_t k = 0; k < n; k++) {
        const uint32_t u = (uint32_t)s[k] << 16;
        float f;
        memcpy(&f, &u, 4);
        dst[k] = f;
    }
}

static void store_bf16(uint16_t *restrict d, const float *restrict src, size_t n) {
#pragma omp simd
    for (size_t k = 0; k < n; k++) {
        const float r = llm4d_bf16_round(src[k]);
        uint32_t u;
        memcpy(&u, &r, 4);
        d[k] = (uint16_t)(u >> 16);
    }
}

__attribute__((target("avx,f16c"))) static void load_f16(float *restrict dst, const uint16_t *restrict s, size_t n) {
    size_t k = 0;
    for (; k + 8 <= n; k += 8) _mm256_storeu_ps(dst + k, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + k))));
    for (; k < n; k++) dst[k] = _cvtsh_ss(s[k]);
}

__attribute__((target("avx,f16c"))) static void store_f16(uint16_t *restrict d, const float *restrict src, size_t n) {
    size_t k = 0;
    for (; k + 8 <= n; k += 8)
        _mm_storeu_si128((__m128i *)(d + k),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + k), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; k < n; k++) d[k] = _cvtss_sh(src[k], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}

void llm4d_cpu_load(float *dst, llm4d_ctensor t, size_t i, size_t n) {
    switch (t.t) {
    case LLM4D_BF16: load_bf16(dst, (const uint16_t *)t.p + i, n); return;
    case LLM4D_F16: load_f16(dst, (const uint16_t *)t.p + i, n); return;
    default: memcpy(dst, (const float *)t.p + i, n * sizeof(float)); return;
    }
}

void llm4d_cpu_store(llm4d_tensor t, size_t i, const float *src, size_t n) {
    switch (t.t) {
    case LLM4D_BF16: store_bf16((uint16_t *)t.p + i, src, n); return;
    case LLM4D_F16: store_f16((uint16_t *)t.p + i, src, n); return;
    default:
        if ((float *)t.p + i != src) memcpy((float *)t.p + i, src, n * sizeof(float));
        return;
    }
}

float *llm4d_cpu_thread_buf(size_t n) {
    if (n == 0) return NULL;
    float *b = aligned_alloc(64, (n * sizeof(float) + 63) & ~(size_t)63);
    LLM4D_ASSERT(b, "out of memory for a kernel's row buffer of %zu floats", n);
    return b;
}

#define CAST_BLOCK 4096 /* elements per task (a 16 KiB stack buffer between two types that are not fp32) */

static void cpu_convert(llm4d_backend *be, llm4d_tensor dst, llm4d_ctensor src, size_t n) {
    WORK_SCOPE(ctx_of(be), LLM4D_WORK_CONVERT);
    if (dst.t == src.t) {
        be->copy(be, dst.p, src.p, n * llm4d_ftype_size(dst.t));
        return;
    }
    const long ntasks = (long)((n + CAST_BLOCK - 1) / CAST_BLOCK);
#pragma omp parallel for schedule(static) if (ntasks > 1)
    for (long k = 0; k < ntasks; k++) {
        const size_t i0 = (size_t)k * CAST_BLOCK, len = n - i0 < CAST_BLOCK ? n - i0 : CAST_BLOCK;
        float buf[CAST_BLOCK];
        llm4d_cpu_store(dst, i0, cpu_in(src, i0, len, buf), len);
    }
}

void llm4d_cpu_cast_install(llm4d_backend *be) { be->convert = cpu_convert; }
