/* host_ops.c — two operations every CPU backend runs the same way (see host.h): the initial weights and the
 * attention of generation over a key/value cache. Both were host loops in the model (model/params.c,
 * model/generate.c); as backend operations a device draws the same weights and attends over its own cache. */
#include <math.h>

#include "backend/host.h"
#include "core/rng.h"

/* Element j's value is a function of its global index alone (backend.h llm4d_init_spec), so the split over threads
 * changes nothing. */
void llm4d_host_init_param(llm4d_backend *be, float *dst, const llm4d_init_spec *spec, int64_t j0, int64_t j1) {
    (void)be;
    if (spec->std == 0.0f) {
        for (int64_t j = j0; j < j1; j++) dst[j - j0] = spec->value;
        return;
    }
#pragma omp parallel for schedule(static)
    for (int64_t j = j0; j < j1; j++) {
        const int64_t gi = (spec->off0 + j / spec->cols) * spec->gcols + spec->off1 + j % spec->cols;
        dst[j - j0] = gi < spec->real ? spec->std * llm4d_rng_normal(spec->seed, spec->stream, (uint64_t)gi) : 0.0f;
    }
}

/* One query row per (row, head), parallel over them; each row's scores in its own stretch of the scratch. */
void llm4d_host_attention_cached(llm4d_backend *be, float *out, const float *qkv, const float *kc, const float *vc,
                                 int n, int p0, int NH, int HS, float *scores, int ld) {
    (void)be;
    const int C = NH * HS;
    const float scale = 1.0f / sqrtf((float)HS);
#pragma omp parallel for schedule(dynamic, 1)
    for (int r = 0; r < n * NH; r++) {
        const int i = r / NH, h = r % NH, last = p0 + i;
        const float *q = qkv + (size_t)i * 3 * C + h * HS;
        float *s = scores + (size_t)r * ld;
        float mx = -INFINITY;
        for (int j = 0; j <= last; j++) {
            const float *k = kc + (size_t)j * C + h * HS;
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
            const float a = s[j] * inv, *v = vc + (size_t)j * C + h * HS;
            for (int d = 0; d < HS; d++) o[d] += a * v[d];
        }
    }
}
