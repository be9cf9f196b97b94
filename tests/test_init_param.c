/* test_init_param.c — the initial weights the host backends draw (backend/host_ops.c: Philox in vectorized lanes,
 * then Box-Muller through libm) against the scalar definition in core/rng.h (llm4d_rng_normal), bit for bit: the
 * draws must not depend on how a backend batches them, or layouts and backends would start from different models.
 *
 * Entries as params.c makes them: a whole 2-D tensor, a tensor-parallel column box (off1 > 0, cols < gcols) and row
 * box (off0 > 0), ranges starting and ending mid-row at odd elements and lengths that are not a multiple of the
 * lanes, the embedding's padding rows (elements at or beyond `real` are 0), a 1-D tensor, a constant, a stream
 * whose high words are set (seed and stream above 32 bits), and a large entry split over the OpenMP team. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "check.h"
#include "core/rng.h"

typedef struct {
    const char *what;
    llm4d_init_spec spec;
    int64_t j0, j1;
} init_case;

/* The definition: element j of the entry (backend.h llm4d_init_spec). */
static float expected(const llm4d_init_spec *s, int64_t j) {
    if (s->std == 0.0f) return s->value;
    const int64_t g = (s->off0 + j / s->cols) * s->gcols + s->off1 + j % s->cols;
    return g < s->real ? s->std * llm4d_rng_normal(s->seed, s->stream, (uint64_t)g) : 0.0f;
}

static void run_case(llm4d_backend *be, const init_case *c) {
    const int64_t n = c->j1 - c->j0;
    float *got = falloc((size_t)n);
    be->init_param(be, got, &c->spec, c->j0, c->j1);
    int64_t bad = -1, nonzero = 0;
    for (int64_t j = c->j0; j < c->j1; j++) {
        const float want = expected(&c->spec, j);
        nonzero += want != 0.0f;
        if (memcmp(&want, &got[j - c->j0], sizeof want) != 0 && bad < 0) bad = j;
    }
    if (bad < 0) check(1, "%s, %s: %lld elements [%lld, %lld) bit-identical to llm4d_rng_normal (%lld non-zero)",
                       be->name, c->what, (long long)n, (long long)c->j0, (long long)c->j1, (long long)nonzero);
    else check(0, "%s, %s: element %lld is %.9g, the definition says %.9g", be->name, c->what, (long long)bad,
               (double)got[bad - c->j0], (double)expected(&c->spec, bad));
    free(got);
}

int main(void) {
    const uint64_t stream = llm4d_rng_stream(LLM4D_RNG_INIT, 0, 0, 0x9e3779b9u);
    const init_case cases[] = {
        {"a whole 2-D tensor (64 x 96)",
         {.std = 0.02f, .seed = 1234, .stream = stream, .cols = 96, .gcols = 96, .real = 64 * 96}, 0, 64 * 96},
        {"a column box of a tensor-parallel rank (cols 48 of 96 from column 48), mid-row start and end",
         {.std = 0.02f, .seed = 1234, .stream = stream, .off0 = 0, .off1 = 48, .cols = 48, .gcols = 96,
          .real = 64 * 96},
         17, 48 * 30 + 5},
        {"a row box from row 32 (odd range, 1 element)",
         {.std = 0.5f, .seed = 7, .stream = stream + 1, .off0 = 32, .cols = 96, .gcols = 96, .real = 64 * 96}, 33,
         34},
        {"an embedding with padding rows (real 50 rows of 56)",
         {.std = 0.02f, .seed = 99, .stream = stream + 2, .cols = 40, .gcols = 40, .real = 50 * 40}, 3, 56 * 40 - 1},
        {"a 1-D tensor of 1000",
         {.std = 0.01f, .seed = 5, .stream = stream + 3, .cols = 1, .gcols = 1, .real = 1000}, 0, 1000},
        {"a constant (LayerNorm weight 1)", {.std = 0.0f, .value = 1.0f, .cols = 1, .gcols = 1, .real = 77}, 0, 77},
        {"seed and stream with high words set",
         {.std = 0.02f, .seed = 0xfedcba9876543210ull, .stream = 0x0123456789abcdefull, .cols = 33, .gcols = 33,
          .real = 33 * 33},
         1, 33 * 33},
        {"a large entry over the OpenMP team (768 x 3072)",
         {.std = 0.02f, .seed = 1234, .stream = stream + 4, .cols = 3072, .gcols = 3072, .real = 768 * 3072}, 0,
         768 * 3072},
    };
    const char *kinds[] = {"cpu", "ref"};
    for (int k = 0; k < 2; k++) {
        llm4d_backend *be = NULL;
        llm4d_err err = {0};
        if (llm4d_backend_create(&be, &(llm4d_backend_opts){.device = "cpu", .ref = k}, &err) != LLM4D_OK) {
            check(0, "%s backend: %s", kinds[k], err.msg);
            continue;
        }
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(be, &cases[i]);
        be->destroy(be);
    }
    return check_summary();
}
