/* bf16.h — bfloat16 rounding, in one place: the backend's operand conversion (backend/cpu.c), the bf16 sums of the
 * MPI communicator (comm/comm_mpi.c) and the safetensors writer (ckpt/safetensors.c) must all round the same way,
 * or a tensor written, reduced and converted would carry three slightly different values.
 *
 * bf16 keeps the top 16 bits of an fp32: rounding to nearest even adds 0x7fff plus the kept part's lowest bit
 * before truncating; a NaN stays a (quiet) NaN instead of carrying into the exponent. */
#ifndef LLM4D_CORE_BF16_H
#define LLM4D_CORE_BF16_H

#include <stdint.h>
#include <string.h>

static inline uint16_t llm4d_bf16_from_f32(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);                                          /* round to nearest even */
    return (uint16_t)(u >> 16);
}

static inline float llm4d_bf16_to_f32(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* f rounded to bf16 precision, kept in fp32 (the 16 bits llm4d_bf16_from_f32 keeps, the rest zero). Written
 * without a call so that GCC vectorises the loops that apply it. */
static inline float llm4d_bf16_round(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    const uint32_t r = (u & 0x7fffffffu) > 0x7f800000u ? u | 0x00400000u : u + 0x7fffu + ((u >> 16) & 1u);
    const uint32_t k = r & 0xffff0000u;
    memcpy(&f, &k, 4);
    return f;
}

#endif
