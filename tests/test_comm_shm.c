/* test_comm_shm.c — the shared-memory collectives (comm/comm_shm.h) against a plain sum and against Open MPI.
 *
 * Alone (its ctest), it checks the vector kernels of comm/shm_sum.h: sums of 1..5 inputs of every length up to 200
 * (and a long one split over threads) equal the scalar sum in input order bit for bit, fp32 and bf16 (fp32
 * accumulation, one rounding, a NaN kept quiet), and the copies.
 *
 * Under mpirun (tests/test_comm.sh: 2, 3 and 4 ranks of one host) every rank makes the same pseudo-random data for
 * every rank, so each knows the plain sum in rank order ((x0 + x1) + x2 ...), which the path promises bit for bit:
 * all-reduce (fp32 and bf16; the one-phase small path, one chunk, many chunks with an odd tail, chunks of 4 KiB and
 * of the default size), reduce-scatter, all-gather (in place, out of place, 8-byte and 1-byte elements), several
 * operations in flight completed out of order with an MPI collective of the same group between them, and the same
 * calls on an MPI-only communicator, which must agree bit for bit on 2 ranks (a sum of two does not depend on the
 * order) and within 1e-6 relative on more; all-reduces over buffers shared in place (comm/shm_share.h), with and
 * without the progress thread (check_shared). Also: the path each group chose, operations the path does not take (a
 * maximum, int64 sums) still right, the byte counts unchanged.
 *
 * With --fault (2 ranks; LLM4D_PROGRESS_DIR set): rank 1 starts a shared-memory all-reduce and stops itself
 * (SIGSTOP) inside it, after copying its first chunk; rank 0's watched wait must end at the deadline (2 s) with the
 * watchdog's line naming the all-reduce, the group and rank 1 as STOPPED, instead of hanging. Rank 0 then wakes rank
 * 1 (SIGCONT) and both finish the operation, so the job still exits 0. */
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/comm.h"
#include "comm/comm_shm.h"
#include "comm/runtime.h"
#include "comm/shm_sum.h"
#include "core/bf16.h"
#include "core/timer.h"
#include "rank_tally.h"

/* rank r's element i of data set `set`: a full 24-bit mantissa times 2^e, e in [-12, 12], either sign, so that sums
 * round and their order shows in the bits */
static float val(int set, int r, size_t i) {
    uint64_t x = ((uint64_t)set * 1000003u + (uint64_t)r * 7919u + i) * 6364136223846793005ull + 1442695040888963407ull;
    x ^= x >> 29;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 32;
    const float m = (float)((x & 0xffffff) | 0x800000) / 16777216.0f; /* [0.5, 1) */
    return ldexpf((x >> 24) & 1 ? -m : m, (int)((x >> 25) % 25) - 12);
}

static float sum_in_order(int set, int n, size_t i) {
    float a = val(set, 0, i);
    for (int r = 1; r < n; r++) a += val(set, r, i);
    return a;
}

/* the sum of the magnitudes: what a difference in the order of a sum is measured against */
static float mag(int set, int n, size_t i) {
    float a = 0;
    for (int r = 0; r < n; r++) a += fabsf(val(set, r, i));
    return a;
}

static uint16_t bval(int set, int r, size_t i) { return llm4d_bf16_from_f32(val(set, r, i)); }

static uint16_t bsum_in_order(int set, int n, size_t i) {
    float a = llm4d_bf16_to_f32(bval(set, 0, i));
    for (int r = 1; r < n; r++) a += llm4d_bf16_to_f32(bval(set, r, i));
    return llm4d_bf16_from_f32(a);
}

/* ---- alone: the kernels ---- */

static void test_kernels(rank_tally *t) {
    enum { MAXN = 5, LEN = 200, LONG = 300000 };
    static float f[MAXN][LONG], out[LONG];
    static uint16_t h[MAXN][LONG], hout[LONG];
    for (int j = 0; j < MAXN; j++)
        for (size_t i = 0; i < LONG; i++) f[j][i] = val(1, j, i), h[j][i] = bval(1, j, i);
    h[2][77] = 0x7fc1; /* a NaN with payload */
    int ok_f = 1, ok_h = 1;
    for (int n = 1; n <= MAXN; n++)
        for (size_t len = 0; len <= LEN; len++) {
            const void *inf[MAXN], *inh[MAXN];
            for (int j = 0; j < n; j++) inf[j] = f[j] + (len % 3), inh[j] = h[j] + (len % 5);
            llm4d_shm_sum(out, inf, n, len, LLM4D_COMM_F32, 1);
            llm4d_shm_sum(hout, inh, n, len, LLM4D_COMM_BF16, 1);
            for (size_t i = 0; i < len; i++) {
                float a = f[0][i + len % 3], b = llm4d_bf16_to_f32(h[0][i + len % 5]);
                for (int j = 1; j < n; j++) a += f[j][i + len % 3], b += llm4d_bf16_to_f32(h[j][i + len % 5]);
                ok_f &= memcmp(&out[i], &a, 4) == 0;
                ok_h &= hout[i] == llm4d_bf16_from_f32(b);
            }
        }
    rank_check(t, ok_f, "fp32 sums of 1..5 inputs, lengths 0..200 at odd offsets: the scalar sum in input "
                               "order, bit for bit");
    rank_check(t, ok_h, "bf16 sums: fp32 accumulation in input order, rounded once to nearest even (NaN kept)");
    const void *in3[3] = {f[0], f[1], f[2]};
    llm4d_shm_sum(out, in3, 3, LONG, LLM4D_COMM_F32, 4);
    int ok = 1;
    for (size_t i = 0; i < LONG; i++) {
        const float a = f[0][i] + f[1][i] + f[2][i];
        ok &= memcmp(&out[i], &a, 4) == 0;
    }
    rank_check(t, ok, "a 1.2 MB sum split over 4 threads: the same bits");
    const void *hin2[2] = {h[0], h[1]};
    /* lengths over 2 and 3 threads where len / threads rounds down to whole lines: nothing left out */
    for (size_t len = 192001; len < 192001 + 14; len += 7) {
        memset(hout, 0, sizeof hout);
        llm4d_shm_sum(hout, hin2, 2, len, LLM4D_COMM_BF16, 2 + (int)(len % 2));
        ok = 1;
        for (size_t i = 0; i < len; i++)
            ok &= hout[i] == llm4d_bf16_from_f32(llm4d_bf16_to_f32(h[0][i]) + llm4d_bf16_to_f32(h[1][i]));
        if (!ok) break;
    }
    rank_check(t, ok, "bf16 sums of odd lengths split over 2 and 3 threads: every element, the same bits");
    llm4d_shm_sum(f[0], in3, 3, LONG, LLM4D_COMM_F32, 1); /* in place: out is the first input */
    rank_check(t, memcmp(f[0], out, sizeof out) == 0, "in place (out = the first input)");
    llm4d_shm_copy(out, f[3], sizeof out, 3);
    rank_check(t, memcmp(out, f[3], sizeof out) == 0, "copy split over 3 threads");
    (void)hout;
}

/* ---- under MPI: the collectives ---- */

static int bits_equal(const void *a, const void *b, size_t bytes) { return memcmp(a, b, bytes) == 0; }

/* All-reduce of count fp32 and bf16 elements on c (shared memory) and m (MPI), against the plain sum. */
static void check_allreduce(rank_tally *t, llm4d_comm *c, llm4d_comm *m, size_t count, int set, const char *what) {
    llm4d_err err = {0};
    const int n = c->size, r = c->rank;
    float *a = malloc(count * 4), *b = malloc(count * 4);
    uint16_t *ha = malloc(count * 2), *hb = malloc(count * 2);
    for (size_t i = 0; i < count; i++) a[i] = b[i] = val(set, r, i), ha[i] = hb[i] = bval(set, r, i);
    must(llm4d_comm_allreduce(c, a, count, LLM4D_COMM_F32, &err), &err);
    must(llm4d_comm_allreduce(m, b, count, LLM4D_COMM_F32, &err), &err);
    must(llm4d_comm_allreduce(c, ha, count, LLM4D_COMM_BF16, &err), &err);
    must(llm4d_comm_allreduce(m, hb, count, LLM4D_COMM_BF16, &err), &err);
    int plain = 1, plain_h = 1, near = 1;
    for (size_t i = 0; i < count; i++) {
        const float s = sum_in_order(set, n, i);
        plain &= bits_equal(&a[i], &s, 4);
        plain_h &= ha[i] == bsum_in_order(set, n, i);
        near &= fabsf(a[i] - b[i]) <= 1e-6f * mag(set, n, i);
    }
    char line[200];
    snprintf(line, sizeof line, "%s: fp32 all-reduce of %zu elements on %d ranks = the plain sum in rank order, bit "
             "for bit", what, count, n);
    rank_check(t, plain, line);
    snprintf(line, sizeof line, "%s: bf16 all-reduce = fp32 sum in rank order rounded once", what);
    rank_check(t, plain_h, line);
    if (n == 2) {
        snprintf(line, sizeof line, "%s: fp32 and bf16 = MPI's all-reduce bit for bit (two ranks)", what);
        rank_check(t, bits_equal(a, b, count * 4) && bits_equal(ha, hb, count * 2), line);
    } else {
        snprintf(line, sizeof line, "%s: fp32 = MPI's all-reduce within 1e-6 of the magnitudes' sum (its order differs)", what);
        rank_check(t, near, line);
    }
    free(a), free(b), free(ha), free(hb);
}

static void check_reduce_scatter(rank_tally *t, llm4d_comm *c, llm4d_comm *m, size_t block, const char *what) {
    llm4d_err err = {0};
    const int n = c->size, r = c->rank;
    const size_t total = block * (size_t)n;
    float *in = malloc(total * 4), *out = malloc(block * 4), *mout = malloc(block * 4);
    uint16_t *hin = malloc(total * 2), *hout = malloc(block * 2);
    for (size_t i = 0; i < total; i++) in[i] = val(3, r, i), hin[i] = bval(3, r, i);
    must(llm4d_comm_reduce_scatter(c, in, out, block, LLM4D_COMM_F32, &err), &err);
    must(llm4d_comm_reduce_scatter(m, in, mout, block, LLM4D_COMM_F32, &err), &err);
    must(llm4d_comm_reduce_scatter(c, hin, hout, block, LLM4D_COMM_BF16, &err), &err);
    int plain = 1, plain_h = 1, near = 1;
    for (size_t i = 0; i < block; i++) {
        const size_t k = (size_t)r * block + i;
        const float s = sum_in_order(3, n, k);
        plain &= bits_equal(&out[i], &s, 4);
        plain_h &= hout[i] == bsum_in_order(3, n, k);
        near &= fabsf(out[i] - mout[i]) <= 1e-6f * mag(3, n, k);
    }
    char line[200];
    snprintf(line, sizeof line, "%s: reduce-scatter of %d blocks of %zu (fp32 and bf16) = the plain sum of block "
             "rank, in rank order; MPI's within 1e-6", what, n, block);
    rank_check(t, plain && plain_h && near, line);
    free(in), free(out), free(mout), free(hin), free(hout);
}

static void check_allgather(rank_tally *t, llm4d_comm *c, size_t block, const char *what) {
    llm4d_err err = {0};
    const int n = c->size, r = c->rank;
    const size_t total = block * (size_t)n;
    float *own = malloc(block * 4), *out = malloc(total * 4), *inplace = malloc(total * 4);
    int64_t *q = malloc(total * 8);
    char *bytes = malloc(total + 1);
    for (size_t i = 0; i < block; i++) own[i] = val(4, r, i);
    for (size_t i = 0; i < total; i++) inplace[i] = (size_t)r * block <= i && i < (size_t)(r + 1) * block
                                                          ? val(4, r, i - (size_t)r * block) : -1.0f;
    for (size_t i = 0; i < block; i++) q[(size_t)r * block + i] = ((int64_t)r << 40) + (int64_t)i;
    for (size_t i = 0; i < block; i++) bytes[(size_t)r * block + i] = (char)(r * 31 + (int)i);
    must(llm4d_comm_allgather(c, own, out, block, LLM4D_COMM_F32, &err), &err);
    must(llm4d_comm_allgather(c, inplace + (size_t)r * block, inplace, block, LLM4D_COMM_F32, &err), &err);
    must(llm4d_comm_allgather(c, q + (size_t)r * block, q, block, LLM4D_COMM_I64, &err), &err);
    must(llm4d_comm_allgather(c, bytes + (size_t)r * block, bytes, block, LLM4D_COMM_BYTE, &err), &err);
    int ok = 1;
    for (int j = 0; j < n; j++)
        for (size_t i = 0; i < block; i++) {
            const float v = val(4, j, i);
            const size_t k = (size_t)j * block + i;
            ok &= bits_equal(&out[k], &v, 4) && bits_equal(&inplace[k], &v, 4);
            ok &= q[k] == ((int64_t)j << 40) + (int64_t)i && bytes[k] == (char)(j * 31 + (int)i);
        }
    char line[200];
    snprintf(line, sizeof line, "%s: all-gather of %zu per rank (fp32 out of place and in place, int64, bytes)",
             what, block);
    rank_check(t, ok, line);
    free(own), free(out), free(inplace), free(q), free(bytes);
}

/* Several operations in flight, an MPI-path collective between them, completed out of order. */
static void check_in_flight(rank_tally *t, llm4d_comm *c) {
    llm4d_err err = {0};
    const int n = c->size, r = c->rank;
    enum { NB = 4, K = 70001 };
    static float b[NB][K];
    llm4d_comm_req req[NB];
    memset(req, 0, sizeof req);
    for (int k = 0; k < NB; k++) {
        for (size_t i = 0; i < K; i++) b[k][i] = val(10 + k, r, i);
        must(llm4d_comm_iallreduce(c, b[k], K, LLM4D_COMM_F32, &req[k], &err), &err);
    }
    int64_t x = r + 1; /* not the path's: int64 sums stay on MPI */
    must(llm4d_comm_allreduce(c, &x, 1, LLM4D_COMM_I64, &err), &err);
    double mx = r; /* nor maxima */
    must(llm4d_comm_allreduce_max(c, &mx, 1, LLM4D_COMM_F64, &err), &err);
    int done = 0;
    const double t0 = llm4d_now(); /* a peer may be descheduled for a while: ranks > cores */
    for (int polls = 0; !done && llm4d_now() - t0 < 60; polls++) {
        must(llm4d_comm_test(&req[2], &done, &err), &err);
        if (polls > 1000) sched_yield();
    }
    must(llm4d_comm_wait(&req[3], &err), &err);
    must(llm4d_comm_progress(c, &err), &err);
    must(llm4d_comm_waitall(req, NB, &err), &err);
    int ok = done && x == (int64_t)n * (n + 1) / 2 && mx == n - 1;
    for (int k = 0; k < NB; k++)
        for (size_t i = 0; i < K; i++) {
            const float s = sum_in_order(10 + k, n, i);
            ok &= bits_equal(&b[k][i], &s, 4);
        }
    rank_check(t, ok, "4 all-reduces in flight with an int64 sum and an fp64 maximum (MPI) between them, "
                             "test / wait out of order: every sum right");
}

/* Sets buf[lo, hi) of fp32 (bf16: b16) to data set `set` of this rank, element i of the buffer being element i of
 * the set. */
static void fill(float *buf, uint16_t *b16, int set, int r, size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; i++)
        if (b16) b16[i] = bval(set, r, i);
        else buf[i] = val(set, r, i);
}

/* Whether buf[lo, hi) holds the plain sum in rank order (sum) or this rank's own data (!sum). */
static int holds(const float *buf, const uint16_t *b16, int set, int n, int r, size_t lo, size_t hi, int sum) {
    int ok = 1;
    if (b16) {
        for (size_t i = lo; i < hi; i++) ok &= b16[i] == (sum ? bsum_in_order(set, n, i) : bval(set, r, i));
        return ok;
    }
    if (!buf) return 0; /* said so that GCC 13, inlining a call with buf NULL, sees no read of it below */
    for (size_t i = lo; i < hi; i++) {
        const float want = sum ? sum_in_order(set, n, i) : val(set, r, i);
        ok &= bits_equal(&buf[i], &want, 4);
    }
    return ok;
}

/* All-reduces over a buffer shared in place (comm/shm_share.h), against the plain sum in rank order: ranges at
 * several offsets and lengths (the elements outside a range untouched), bf16 at an odd offset, two in flight with a
 * slot-path one between them, completed out of order; the contents kept through sharing and giving back; a buffer
 * that is not whole pages, or a group not on the path, not shared (and saying why); ranks that enter different
 * ranges fail rather than sum. */
static void check_shared(rank_tally *t, llm4d_comm *c, llm4d_comm *mpi) {
    llm4d_err err = {0};
    const int n = c->size, r = c->rank;
    const size_t bytes = (size_t)5 << 20, N = bytes / 4;
    float *buf = aligned_alloc(4096, bytes);
    fill(buf, NULL, 20, r, 0, N);
    int shared = 0;
    char why[200] = "", line[300];
    must(llm4d_shm_share(mpi, buf, bytes, &shared, why, sizeof why, &err), &err);
    snprintf(line, sizeof line, "a group not on the path shares nothing (%s)", why);
    rank_check(t, !shared && why[0], line);
    must(llm4d_shm_share(c, buf + 16, bytes - 4096, &shared, why, sizeof why, &err), &err);
    snprintf(line, sizeof line, "a buffer that is not whole pages is not shared (%s)", why);
    rank_check(t, !shared && strstr(why, "pages") && holds(buf, NULL, 20, n, r, 0, N, 0), line);
    must(llm4d_shm_share(c, buf, bytes, &shared, why, sizeof why, &err), &err);
    snprintf(line, sizeof line, "5 MiB shared in place on %d ranks, its contents kept (%s)", n, shared ? "" : why);
    rank_check(t, shared && holds(buf, NULL, 20, n, r, 0, N, 0), line);
    const size_t cases[][2] = {{0, 1}, {16, 1000}, {4097, 333333}, {1, N - 1}};
    for (int k = 0; k < 4; k++) {
        const size_t lo = cases[k][0], hi = lo + cases[k][1];
        fill(buf, NULL, 21 + k, r, 0, N);
        must(llm4d_comm_allreduce(c, buf + lo, hi - lo, LLM4D_COMM_F32, &err), &err);
        snprintf(line, sizeof line, "shared: all-reduce of [%zu, %zu) = the plain sum in rank order, the rest untouched",
                 lo, hi);
        rank_check(t, holds(buf, NULL, 21 + k, n, r, lo, hi, 1) && holds(buf, NULL, 21 + k, n, r, 0, lo, 0) &&
                          holds(buf, NULL, 21 + k, n, r, hi, N, 0), line);
    }
    uint16_t *b16 = (uint16_t *)buf;
    fill(NULL, b16, 30, r, 0, 2 * N);
    must(llm4d_comm_allreduce(c, b16 + 3, 777777, LLM4D_COMM_BF16, &err), &err);
    rank_check(t, holds(NULL, b16, 30, n, r, 3, 777780, 1) && holds(NULL, b16, 30, n, r, 0, 3, 0),
               "shared: bf16 all-reduce at an odd offset = fp32 sum in rank order rounded once");
    /* in flight: two ranges of the shared buffer and a slot-path all-reduce between them, waited in reverse */
    fill(buf, NULL, 31, r, 0, N);
    float *other = malloc(50000 * 4);
    fill(other, NULL, 32, r, 0, 50000);
    llm4d_comm_req q[3] = {{0}};
    must(llm4d_comm_iallreduce(c, buf, 100000, LLM4D_COMM_F32, &q[0], &err), &err);
    must(llm4d_comm_iallreduce(c, other, 50000, LLM4D_COMM_F32, &q[1], &err), &err);
    must(llm4d_comm_iallreduce(c, buf + 200000, 300000, LLM4D_COMM_F32, &q[2], &err), &err);
    for (int k = 2; k >= 0; k--) must(llm4d_comm_wait(&q[k], &err), &err);
    rank_check(t, holds(buf, NULL, 31, n, r, 0, 100000, 1) && holds(buf, NULL, 31, n, r, 100000, 200000, 0) &&
                      holds(buf, NULL, 31, n, r, 200000, 500000, 1) && holds(other, NULL, 32, n, r, 0, 50000, 1),
               "shared: two in flight with a slot-path all-reduce between, waited in reverse, each the plain sum");
    free(other);
    /* ranks that disagree on the range: an error on every rank, nothing summed */
    fill(buf, NULL, 33, r, 0, N);
    const llm4d_code rc = llm4d_comm_allreduce(c, buf + (r == 0 ? 0 : 16), 1000, LLM4D_COMM_F32, &err);
    snprintf(line, sizeof line, "shared: ranks entering different ranges fail (%.200s)", rc != LLM4D_OK ? err.msg : "no error");
    rank_check(t, rc != LLM4D_OK && holds(buf, NULL, 33, n, r, 0, N, 0), line);
    fill(buf, NULL, 34, r, 0, N);
    must(llm4d_comm_allreduce(c, buf, N, LLM4D_COMM_F32, &err), &err);
    llm4d_shm_unshare(c, buf);
    rank_check(t, holds(buf, NULL, 34, n, r, 0, N, 1), "shared: given back to private memory with its contents");
    buf[0] = (float)r; /* private again: a peer's write would show here */
    must(llm4d_comm_barrier(c, &err), &err);
    rank_check(t, buf[0] == (float)r, "shared: given back, writes stay private");
    free(buf);
}

static void test_mpi(rank_tally *t, llm4d_comm *world) {
    llm4d_err err = {0};
    llm4d_comm *mpi = NULL, *big = NULL, *small = NULL, *thr = NULL;
    /* split before any path is chosen: plain MPI communicators of the same ranks */
    must(llm4d_comm_split(world, 0, world->rank, "mpi", &mpi, &err), &err);
    must(llm4d_comm_split(world, 0, world->rank, "shm", &big, &err), &err);
    must(llm4d_comm_split(world, 0, world->rank, "shm-4k", &small, &err), &err);
    must(llm4d_comm_split(world, 0, world->rank, "shm-thread", &thr, &err), &err);
    must(llm4d_comm_use_paths(big, "auto", 0, 0, &err), &err);
    must(llm4d_comm_use_paths(small, "auto", 4096, 0, &err), &err);
    must(llm4d_comm_use_paths(thr, "auto", 8192, 1, &err), &err); /* a progress thread moves its operations */
    rank_check(t, !mpi->path && strcmp(mpi->path_desc, "") == 0, "a group split before paths stays on MPI");
    char line[300];
    snprintf(line, sizeof line, "one host: the shared-memory path (%s)", big->path_desc);
    rank_check(t, big->path && strstr(big->path_desc, "shared memory (") != NULL, line);
    llm4d_comm *sub = NULL; /* a group split from a group with paths chooses its own */
    must(llm4d_comm_split(big, big->rank % 2, big->rank, "half", &sub, &err), &err);
    snprintf(line, sizeof line, "a group split from it chooses its path too (%d ranks: %s)", sub->size, sub->path_desc);
    rank_check(t, sub->size == 1 ? !sub->path : sub->path != NULL, line);
    llm4d_comm_destroy(sub);

    check_allreduce(t, big, mpi, 1, 1, "default chunk");
    check_allreduce(t, big, mpi, 1000, 2, "default chunk");    /* the small path */
    check_allreduce(t, big, mpi, 4097, 3, "default chunk");    /* just over it */
    check_allreduce(t, big, mpi, 1 << 20, 4, "default chunk"); /* several chunks */
    check_allreduce(t, big, mpi, 3000001, 5, "default chunk");
    check_allreduce(t, small, mpi, 5, 6, "4 KiB chunks");
    check_allreduce(t, small, mpi, 33333, 7, "4 KiB chunks");  /* many chunks, odd tail */
    check_reduce_scatter(t, big, mpi, 1, "default chunk");
    check_reduce_scatter(t, big, mpi, 250001, "default chunk");
    check_reduce_scatter(t, small, mpi, 12345, "4 KiB chunks");
    check_allgather(t, big, 3, "default chunk");
    check_allgather(t, big, 300007, "default chunk");
    check_allgather(t, small, 5001, "4 KiB chunks");
    check_in_flight(t, big);
    check_in_flight(t, small);
    check_shared(t, big, mpi);
    snprintf(line, sizeof line, "with a progress thread: %s", thr->path_desc);
    rank_check(t, strstr(thr->path_desc, "by a thread") != NULL, line);
    check_allreduce(t, thr, mpi, 33333, 8, "progress thread, 8 KiB chunks");
    check_reduce_scatter(t, thr, mpi, 12345, "progress thread, 8 KiB chunks");
    check_allgather(t, thr, 5001, "progress thread, 8 KiB chunks");
    check_in_flight(t, thr);
    check_shared(t, thr, mpi); /* the thread sums the shared buffers */
    /* the byte counts are the algorithm's, whichever path moved them */
    llm4d_comm_stats_reset(big);
    float v[1024] = {0};
    must(llm4d_comm_allreduce(big, v, 1024, LLM4D_COMM_F32, &err), &err);
    const uint64_t want = 2 * (uint64_t)(big->size - 1) * 4096 / (uint64_t)big->size;
    snprintf(line, sizeof line, "byte count of a 4 KiB all-reduce on %d ranks: %llu (ring formula %llu)", big->size,
             (unsigned long long)big->stats.bytes[LLM4D_COMM_OP_ALLREDUCE], (unsigned long long)want);
    rank_check(t, big->stats.bytes[LLM4D_COMM_OP_ALLREDUCE] == want, line);
    llm4d_comm_destroy(thr);
    llm4d_comm_destroy(small);
    llm4d_comm_destroy(big);
    llm4d_comm_destroy(mpi);
}

/* Whether process pid is stopped (its state in /proc/pid/stat is T). */
static int stopped(pid_t pid) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    const size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *paren = strrchr(buf, ')');
    return paren && paren[1] && paren[2] == 'T';
}

/* --fault: rank 1 stops inside a shared-memory all-reduce; rank 0's watchdog must name it. */
static void test_fault(rank_tally *t, llm4d_comm *world) {
    llm4d_err err = {0};
    llm4d_comm *c = NULL;
    must(llm4d_comm_split(world, 0, world->rank, "shm", &c, &err), &err);
    must(llm4d_comm_use_paths(c, "auto", 4096, 0, &err), &err);
    int64_t pids[2] = {0, 0}, mine = getpid();
    must(llm4d_comm_allgather(world, &mine, pids, 1, LLM4D_COMM_I64, &err), &err);
    enum { K = 100000 }; /* many 4 KiB chunks: rank 1 stops after its first */
    static float b[K];
    for (size_t i = 0; i < K; i++) b[i] = val(20, c->rank, i);
    llm4d_watch_set(world->watch, 5, c->rank == 0 ? 2.0 : 60.0); /* rank 1 waits out its stop */
    if (c->rank == 1) {
        llm4d_comm_req req = {0};
        must(llm4d_comm_iallreduce(c, b, K, LLM4D_COMM_F32, &req, &err), &err);
        raise(SIGSTOP); /* inside the operation: its first chunk copied, the rest never comes until SIGCONT */
        must(llm4d_comm_wait(&req, &err), &err);
    } else {
        for (int i = 0; i < 3000 && !stopped((pid_t)pids[1]); i++) usleep(10000); /* until rank 1 has stopped */
        const double t0 = llm4d_now();
        const llm4d_code rc = llm4d_comm_allreduce(c, b, K, LLM4D_COMM_F32, &err);
        const double waited = llm4d_now() - t0;
        printf("rank 0 got: %s\n", err.msg);
        char want[64];
        snprintf(want, sizeof want, "rank 1 (pid %lld, STOPPED", (long long)pids[1]);
        rank_check(t, rc == LLM4D_ETIMEOUT && waited < 10, "a peer stopped inside a shared-memory all-reduce: "
                                                                 "the wait ends at the deadline (2 s), not a hang");
        rank_check(t, strstr(err.msg, "allreduce #") && strstr(err.msg, "on the shm group") &&
                                 strstr(err.msg, "has not completed after 2 s") && strstr(err.msg, want),
                          "the watchdog's line names the all-reduce, the group and rank 1 as STOPPED");
        kill((pid_t)pids[1], SIGCONT);
    }
    llm4d_watch_set(world->watch, 5, 60.0);
    /* the abandoned operation is still queued on rank 0: both finish it through the path's progress */
    must(llm4d_comm_barrier(c, &err), &err);
    while (llm4d_shm_pending(c->hub)) must(llm4d_comm_progress(c, &err), &err);
    must(llm4d_comm_barrier(world, &err), &err);
    llm4d_comm_destroy(c);
}

int main(int argc, char **argv) {
    llm4d_runtime rt;
    llm4d_err err = {0};
    must(llm4d_runtime_init(&rt, &argc, &argv, &err), &err);
    rank_tally t = {.rank = rt.rank};
    const int fault = argc > 1 && !strcmp(argv[1], "--fault");
    if (rt.world_size == 1) {
        printf("test_comm_shm alone: the kernels\n");
        test_kernels(&t);
    } else if (fault) {
        llm4d_watch_free(&rt.watch); /* again, with the boards */
        must(llm4d_watch_init(&rt.watch, rt.rank, getenv("LLM4D_PROGRESS_DIR"), &err), &err);
        test_fault(&t, rt.world);
    } else {
        printf("test_comm_shm: %d ranks\n", rt.world_size);
        test_mpi(&t, rt.world);
    }
    int64_t totals[2] = {t.pass, t.fail};
    must(llm4d_comm_allreduce(rt.world, totals, 2, LLM4D_COMM_I64, &err), &err);
    if (rt.rank == 0) printf("%lld passed, %lld failed\n", (long long)totals[0], (long long)totals[1]);
    llm4d_runtime_finalize(&rt);
    return totals[1] ? 1 : 0;
}
