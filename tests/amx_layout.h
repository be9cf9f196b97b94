/* amx_layout.h — the AMX kernel's tile layouts written again from cpu_amx.h's description, for the tests that check
 * the packers and the GEMM against them (test_amx.c, test_amx_blocking.c): where an element of an A or B operand
 * sits in its tiles, and a bf16's value. Header-only (static inline): each test is its own executable. */
#ifndef LLM4D_TESTS_AMX_LAYOUT_H
#define LLM4D_TESTS_AMX_LAYOUT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline double val(uint16_t h) {
    const uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline int64_t pad(int64_t n, int64_t g) { return (n + g - 1) / g * g; }

/* the position of A[m][k] in A tiles of K columns, of B[k][n] in B tiles of K rows */
static inline size_t pos_a(int64_t K, int64_t m, int64_t k) {
    return (size_t)(((m / 16) * (pad(K, 32) / 32) + k / 32) * 512 + (m % 16) * 32 + k % 32);
}
static inline size_t pos_b(int64_t K, int64_t k, int64_t n) {
    return (size_t)(((n / 16) * (pad(K, 32) / 32) + k / 32) * 512 + ((k % 32) / 2) * 32 + (n % 16) * 2 + (k & 1));
}

#endif
