/* shm_sum.c — the vector sums and copies of the shared-memory collectives (see shm_sum.h). */
#include "comm/shm_sum.h"

#include <omp.h>
#include <stdint.h>
#include <string.h>

#include "core/bf16.h"

/* The 64-byte vectors pass between static functions of this file only, never across an ABI boundary: GCC's note that
 * their passing convention differs with AVX-512 on or off (an error under -Werror in a build without -march, such as
 * CMake's Debug, where nothing is inlined) does not apply. */
#pragma GCC diagnostic ignored "-Wpsabi"

typedef float v16f __attribute__((vector_size(64)));
typedef uint32_t v16u __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));
typedef uint16_t v16h __attribute__((vector_size(32)));

/* unaligned loads and stores: user buffers have any alignment (memcpy compiles to one vmovups) */
static inline v16f ld_f32(const float *p) {
    v16f v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline v16f ld_bf16(const uint16_t *p) {
    v16h h;
    memcpy(&h, p, sizeof h);
    const v16u u = __builtin_convertvector(h, v16u) << 16;
    v16f f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline void st_bf16(uint16_t *p, v16f f) {
    v16u u;
    memcpy(&u, &f, sizeof u);
    const v16u nan = (v16u)((u & 0x7fffffffu) > 0x7f800000u); /* all ones where f is a NaN */
    const v16u rounded = u + 0x7fffu + ((u >> 16) & 1u), quiet = u | 0x00400000u;
    const v16u r = (quiet & nan) | (rounded & ~nan);
    const v16h h = __builtin_convertvector(r >> 16, v16h);
    memcpy(p, &h, sizeof h);
}

/* the sums stored to every one of the n_out outputs from the registers (one pass where copies would read them again) */
static void sum_f32(float *const *out, int n_out, const float *const *in, int n, size_t lo, size_t hi) {
    size_t i = lo;
    for (; i + 32 <= hi; i += 32) { /* two vectors per round: two independent chains of adds */
        v16f a = ld_f32(in[0] + i), b = ld_f32(in[0] + i + 16);
        for (int j = 1; j < n; j++) {
            a += ld_f32(in[j] + i);
            b += ld_f32(in[j] + i + 16);
        }
        for (int o = 0; o < n_out; o++) {
            memcpy(out[o] + i, &a, sizeof a);
            memcpy(out[o] + i + 16, &b, sizeof b);
        }
    }
    for (; i < hi; i++) {
        float a = in[0][i];
        for (int j = 1; j < n; j++) a += in[j][i];
        for (int o = 0; o < n_out; o++) out[o][i] = a;
    }
}

static void sum_bf16(uint16_t *const *out, int n_out, const uint16_t *const *in, int n, size_t lo, size_t hi) {
    size_t i = lo;
    for (; i + 16 <= hi; i += 16) {
        v16f a = ld_bf16(in[0] + i);
        for (int j = 1; j < n; j++) a += ld_bf16(in[j] + i);
        uint16_t h[16];
        st_bf16(h, a);
        for (int o = 0; o < n_out; o++) memcpy(out[o] + i, h, sizeof h);
    }
    for (; i < hi; i++) {
        float a = llm4d_bf16_to_f32(in[0][i]);
        for (int j = 1; j < n; j++) a += llm4d_bf16_to_f32(in[j][i]);
        const uint16_t h = llm4d_bf16_from_f32(a);
        for (int o = 0; o < n_out; o++) out[o][i] = h;
    }
}

static void sum_range(void *const *out, int n_out, const void *const *in, int n, size_t lo, size_t hi,
                      llm4d_comm_dtype dt) {
    if (dt == LLM4D_COMM_BF16) sum_bf16((uint16_t *const *)out, n_out, (const uint16_t *const *)in, n, lo, hi);
    else sum_f32((float *const *)out, n_out, (const float *const *)in, n, lo, hi);
}

/* Below this many bytes a piece is not worth waking the thread team for. */
#define PAR_MIN_BYTES ((size_t)256 << 10)

/* thread t's part [*lo, *hi) of len elements, in whole cache lines of `per_line` elements */
static void part_of(size_t len, size_t per_line, int t, int nt, size_t *lo, size_t *hi) {
    const size_t per = ((len + (size_t)nt - 1) / (size_t)nt + per_line - 1) / per_line * per_line;
    *lo = per * (size_t)t < len ? per * (size_t)t : len;
    *hi = *lo + per < len ? *lo + per : len;
}

void llm4d_shm_sum_to(void *const *out, int n_out, const void *const *in, int n, size_t len, llm4d_comm_dtype dt,
                      int threads) {
    const size_t esz = llm4d_comm_dtype_size(dt);
    if (threads <= 1 || len * esz < PAR_MIN_BYTES) {
        sum_range(out, n_out, in, n, 0, len, dt);
        return;
    }
#pragma omp parallel num_threads(threads)
    {
        size_t lo, hi;
        part_of(len, 64 / esz, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
        sum_range(out, n_out, in, n, lo, hi, dt);
    }
}

void llm4d_shm_sum2(void *out, void *out2, const void *const *in, int n, size_t len, llm4d_comm_dtype dt,
                    int threads) {
    void *const outs[2] = {out, out2};
    llm4d_shm_sum_to(outs, out2 ? 2 : 1, in, n, len, dt, threads);
}

void llm4d_shm_sum(void *out, const void *const *in, int n, size_t len, llm4d_comm_dtype dt, int threads) {
    llm4d_shm_sum_to(&out, 1, in, n, len, dt, threads);
}

void llm4d_shm_copy(void *dst, const void *src, size_t bytes, int threads) {
    if (!bytes || dst == src) return;
    if (threads <= 1 || bytes < PAR_MIN_BYTES) {
        memcpy(dst, src, bytes);
        return;
    }
#pragma omp parallel num_threads(threads)
    {
        size_t lo, hi;
        part_of(bytes, 64, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
        memcpy((char *)dst + lo, (const char *)src + lo, hi - lo);
    }
}
