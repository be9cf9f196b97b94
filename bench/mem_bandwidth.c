/* mem_bandwidth.c — what the memory system can do, and how close the optimizer's passes get to it.
 *
 * The optimizer touches every parameter, gradient and Adam state once per step and does little arithmetic on
 * them, so its target is stated against this machine's copy bandwidth, measured here the way STREAM does: bytes
 * read plus bytes written per second of a parallel copy between two arrays far larger than the caches (OpenMP
 * threads, static chunks, best of several runs). Two copies are timed, glibc's memcpy per thread chunk and a loop
 * of non-temporal (streaming) stores, and the better is the machine's copy bandwidth: the optimizer reads every
 * line it writes, so it pays no write-allocate traffic, and the copy it is held to must not pay it either.
 *
 * Output (machine-readable lines):  copy_gbps: X
 * Usage: mem_bandwidth [--optim] [--mib N (per array, default 512)] [--reps N]
 * With --optim it then times the backend's optimizer passes over GPT-2 124M's parameter count (the gradient
 * norm's sum of squares, then AdamW with the gradients zeroed in the same pass) and prints their GB/s against the
 * copy bandwidth. */
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/timer.h"

static void *xalloc(size_t bytes) {
    void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    if (!p) {
        fprintf(stderr, "mem_bandwidth: out of memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

/* thread t's chunk [*lo, *hi) of n bytes, 64-byte aligned */
static void chunk_of(size_t n, int t, int nt, size_t *lo, size_t *hi) {
    const size_t per = (n / (size_t)nt + 63) & ~(size_t)63;
    *lo = per * (size_t)t < n ? per * (size_t)t : n;
    *hi = *lo + per < n ? *lo + per : n;
}

static void copy_memcpy(char *d, const char *s, size_t n) {
#pragma omp parallel
    {
        size_t lo, hi;
        chunk_of(n, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
        memcpy(d + lo, s + lo, hi - lo);
    }
}

/* AVX2's 32-byte streaming stores: every CPU this runs on has them (an AVX2-only Zen 3 included), and a
 * non-temporal store's bandwidth does not depend on its width */
__attribute__((target("avx2"))) static void copy_stream(char *d, const char *s, size_t n) {
#pragma omp parallel
    {
        size_t lo, hi;
        chunk_of(n, omp_get_thread_num(), omp_get_num_threads(), &lo, &hi);
        size_t i = lo;
        for (; i + 256 <= hi; i += 256)
            for (int k = 0; k < 256; k += 32)
                _mm256_stream_si256((__m256i *)(d + i + k), _mm256_load_si256((const __m256i *)(s + i + k)));
        memcpy(d + i, s + i, hi - i);
        _mm_sfence();
    }
}

static double best_gbps(void (*fn)(char *, const char *, size_t), char *d, const char *s, size_t n, int reps) {
    fn(d, s, n); /* warm-up: page faults, thread pool */
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        const double t0 = llm4d_now();
        fn(d, s, n);
        const double dt = llm4d_now() - t0;
        if (dt < best) best = dt;
    }
    return 2.0 * (double)n / best / 1e9;
}

/* The optimizer's passes over n parameters, best of reps: GB/s of the traffic they need (4 n for the sum of
 * squares; AdamW reads params, grads, m, v and writes params, m, v and the zeroed grads: 32 n). */
static void bench_optim(size_t n, int reps, double copy) {
    llm4d_backend *be;
    llm4d_err err = {0};
    if (llm4d_backend_cpu_create(&be, 0, &err) != LLM4D_OK) {
        fprintf(stderr, "mem_bandwidth: %s\n", err.msg);
        exit(1);
    }
    float *p = xalloc(n * 4), *g = xalloc(n * 4), *m = xalloc(n * 4), *v = xalloc(n * 4);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        p[i] = 0.02f * (float)(i % 101) - 1.0f;
        g[i] = 0.001f * (float)(i % 37) - 0.018f;
        m[i] = v[i] = 0.0f;
    }
    double t_sq = 1e30, t_ad = 1e30, sink = 0;
    for (int r = 0; r <= reps; r++) { /* r = 0 warms up */
        double t0 = llm4d_now();
        sink += be->sumsq(be, g, n);
        const double t1 = llm4d_now();
        be->adamw(be, p, g, m, v, n, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.01f, r + 1, 0.5f, 1);
        const double t2 = llm4d_now();
        if (r > 0 && t1 - t0 < t_sq) t_sq = t1 - t0;
        if (r > 0 && t2 - t1 < t_ad) t_ad = t2 - t1;
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) g[i] = 0.001f * (float)(i % 37) - 0.018f; /* the next step's gradients */
    }
    const double b_sq = 4.0 * (double)n, b_ad = 32.0 * (double)n;
    printf("optimizer over %zu parameters (%d threads): sum of squares %.1f ms %.1f GB/s, AdamW + zeroing %.1f ms "
           "%.1f GB/s; together %.1f ms for %.2f GB: %.1f GB/s = %.2fx the time the copy bandwidth needs "
           "(checksum %.3g)\n",
           n, be->nthreads, t_sq * 1e3, b_sq / t_sq / 1e9, t_ad * 1e3, b_ad / t_ad / 1e9, (t_sq + t_ad) * 1e3,
           (b_sq + b_ad) / 1e9, (b_sq + b_ad) / (t_sq + t_ad) / 1e9, (t_sq + t_ad) / ((b_sq + b_ad) / (copy * 1e9)),
           sink);
    free(p), free(g), free(m), free(v);
    be->destroy(be);
}

int main(int argc, char **argv) {
    int optim = 0, reps = 10;
    size_t mib = 512;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--optim") == 0)
            optim = 1;
        else if (strcmp(argv[i], "--mib") == 0 && i + 1 < argc && atoi(argv[i + 1]) > 0)
            mib = (size_t)atoi(argv[++i]);
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc && atoi(argv[i + 1]) > 0)
            reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: mem_bandwidth [--optim] [--mib N (per array)] [--reps N]\n");
            return 2;
        }
    }
    const size_t n = mib << 20;
    char *s = xalloc(n), *d = xalloc(n);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i += 4096) s[i] = d[i] = (char)i; /* first touch by the threads that copy */
    memset(s, 1, n);
    const double g_memcpy = best_gbps(copy_memcpy, d, s, n, reps), g_stream = best_gbps(copy_stream, d, s, n, reps);
    free(s), free(d);
    const double copy = g_memcpy > g_stream ? g_memcpy : g_stream;
    printf("# copy of %zu MiB, %d threads, read + write bytes per second: memcpy %.1f GB/s, streaming stores %.1f "
           "GB/s\n", mib, omp_get_max_threads(), g_memcpy, g_stream);
    printf("copy_gbps: %.1f\n", copy);
    fflush(stdout);
    if (optim) bench_optim((size_t)124475904, reps, copy); /* GPT-2 124M with the vocabulary padded to 50304 */
    return 0;
}
