/* host_ops.c — two operations every CPU backend runs the same way (see host.h): the initial weights and the
 * attention of generation over a key/value cache. Both were host loops in the model (model/params.c,
 * model/generate.c); as backend operations a device draws the same weights and attends over its own cache. */
#include <math.h>
#include <stdint.h>

#include "backend/host.h"
#include "core/rng.h"

/* INIT_LANES elements at a time: their Philox blocks in lanes the compiler vectorizes (integer arithmetic, so the
 * words are exactly llm4d_rng_block's), then Box-Muller per element through libm's own log and cos, in the order
 * llm4d_rng_normal takes them, so every value is the scalar definition's to the bit (tests/test_init_param.c). The
 * generator was 56 % of a scalar draw, log and cos 34 %; with the lanes a draw takes 44 ns instead of 84 (one Zen 5
 * core). */
#define INIT_LANES 16

static void init_lanes(const llm4d_init_spec *spec, const int64_t *gi, int n, float *dst) {
    uint32_t c0[INIT_LANES], c1[INIT_LANES], c2[INIT_LANES], c3[INIT_LANES];
    for (int l = 0; l < INIT_LANES; l++) {
        const uint64_t block = (uint64_t)(l < n ? gi[l] : 0) >> 1;
        c0[l] = (uint32_t)block, c1[l] = (uint32_t)(block >> 32);
        c2[l] = (uint32_t)spec->stream, c3[l] = (uint32_t)(spec->stream >> 32);
    }
    uint32_t key0 = (uint32_t)spec->seed, key1 = (uint32_t)(spec->seed >> 32);
    for (int round = 0; round < 10; round++) { /* llm4d_philox4x32_10, lane by lane */
        for (int l = 0; l < INIT_LANES; l++) {
            const uint64_t p0 = (uint64_t)0xD2511F53u * c0[l], p1 = (uint64_t)0xCD9E8D57u * c2[l];
            const uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1[l] ^ key0, n2 = (uint32_t)(p0 >> 32) ^ c3[l] ^ key1;
            c0[l] = n0, c1[l] = (uint32_t)p1, c2[l] = n2, c3[l] = (uint32_t)p0;
        }
        key0 += 0x9E3779B9u;
        key1 += 0xBB67AE85u;
    }
    for (int l = 0; l < n; l++) {
        if (gi[l] >= spec->real) {
            dst[l] = 0.0f;
            continue;
        }
        const int odd = (int)(gi[l] & 1); /* a position takes words 0, 1 of its block when even, 2, 3 when odd */
        const uint32_t a = odd ? c2[l] : c0[l], b = odd ? c3[l] : c1[l];
        const double u1 = ((double)a + 1.0) / 4294967297.0, u2 = (double)b / 4294967296.0;
        dst[l] = spec->std * (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
    }
}

/* Element j's value is a function of its global index alone (backend.h llm4d_init_spec), so the split over threads
 * changes nothing. */
void llm4d_host_init_param(llm4d_backend *be, float *dst, const llm4d_init_spec *spec, int64_t j0, int64_t j1) {
    (void)be;
    if (spec->std == 0.0f) {
        for (int64_t j = j0; j < j1; j++) dst[j - j0] = spec->value;
        return;
    }
    const int64_t chunks = (j1 - j0 + INIT_LANES - 1) / INIT_LANES;
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < chunks; c++) {
        const int64_t a = j0 + c * INIT_LANES, b = a + INIT_LANES < j1 ? a + INIT_LANES : j1;
        int64_t gi[INIT_LANES], row = a / spec->cols, col = a % spec->cols; /* one division per chunk */
        for (int64_t j = a; j < b; j++) {
            gi[j - a] = (spec->off0 + row) * spec->gcols + spec->off1 + col;
            if (++col == spec->cols) col = 0, row++;
        }
        init_lanes(spec, gi, (int)(b - a), dst + (a - j0));
    }
}

/* One query row per (row, head), parallel over them; each row's scores in its own stretch of the scratch. Query
 * head h reads key/value head h / (NH / NKV) (grouped-query attention; NKV == NH: its own). */
void llm4d_host_attention_cached(llm4d_backend *be, float *out, const float *qkv, const float *kc, const float *vc,
                                 int n, int p0, int NH, int NKV, int HS, float *scores, int ld) {
    (void)be;
    const int C = NH * HS, KV = NKV * HS, W = C + 2 * KV, group = NH / NKV;
    const float scale = 1.0f / sqrtf((float)HS);
#pragma omp parallel for schedule(dynamic, 1)
    for (int r = 0; r < n * NH; r++) {
        const int i = r / NH, h = r % NH, last = p0 + i, hk = h / group;
        const float *q = qkv + (size_t)i * W + h * HS;
        float *s = scores + (size_t)r * ld;
        float mx = -INFINITY;
        for (int j = 0; j <= last; j++) {
            const float *k = kc + (size_t)j * KV + hk * HS;
            float dot = 0.0f;
            for (int d = 0; d < HS; d++) dot += q[d] * k[d];
            s[j] = dot * scale;
            if (s[j] > mx) mx = s[j];
        }
        float sum = 0.0f;
        for (int j = 0; j <= last; j++) {
            s[j] = expf(s[j] - mx);
            sum += s[j];
        }
        const float inv = 1.0f / sum;
        float *o = out + (size_t)i * C + h * HS;
        for (int d = 0; d < HS; d++) o[d] = 0.0f;
        for (int j = 0; j <= last; j++) {
            const float a = s[j] * inv, *v = vc + (size_t)j * KV + hk * HS;
            for (int d = 0; d < HS; d++) o[d] += a * v[d];
        }
    }
}
