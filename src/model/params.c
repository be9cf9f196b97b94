/* params.c — building the GPT parameter table and the initial weights (see params.h). */
#include "model/params.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"

typedef struct {
    llm4d_param_kind kind;
    const char *suffix;  /* after "transformer.h.<l>." */
    int decay;
    int is_out_proj;     /* output projections get the 1/sqrt(2L) scaled init */
} layer_param_spec;

static const layer_param_spec layer_specs[] = {
    {LLM4D_P_LN1W, "ln_1.weight", 0, 0},          {LLM4D_P_LN1B, "ln_1.bias", 0, 0},
    {LLM4D_P_QKVW, "attn.c_attn.weight", 1, 0},   {LLM4D_P_QKVB, "attn.c_attn.bias", 0, 0},
    {LLM4D_P_ATTPROJW, "attn.c_proj.weight", 1, 1}, {LLM4D_P_ATTPROJB, "attn.c_proj.bias", 0, 0},
    {LLM4D_P_LN2W, "ln_2.weight", 0, 0},          {LLM4D_P_LN2B, "ln_2.bias", 0, 0},
    {LLM4D_P_FCW, "mlp.c_fc.weight", 1, 0},       {LLM4D_P_FCB, "mlp.c_fc.bias", 0, 0},
    {LLM4D_P_FCPROJW, "mlp.c_proj.weight", 1, 1}, {LLM4D_P_FCPROJB, "mlp.c_proj.bias", 0, 0},
};
#define N_LAYER_SPECS ((int)(sizeof layer_specs / sizeof layer_specs[0]))

static void layer_shape(llm4d_param_kind k, const llm4d_model_config *m, int *ndim, int64_t shape[2]) {
    const int64_t C = m->hidden_size, F = m->ffn_hidden_size;
    *ndim = 1;
    shape[1] = 0;
    switch (k) {
    case LLM4D_P_LN1W: case LLM4D_P_LN1B: case LLM4D_P_LN2W: case LLM4D_P_LN2B:
    case LLM4D_P_ATTPROJB: case LLM4D_P_FCPROJB: case LLM4D_P_LNFW: case LLM4D_P_LNFB:
        shape[0] = C; break;
    case LLM4D_P_QKVB: shape[0] = 3 * C; break;
    case LLM4D_P_FCB: shape[0] = F; break;
    case LLM4D_P_QKVW: *ndim = 2; shape[0] = 3 * C; shape[1] = C; break;
    case LLM4D_P_ATTPROJW: *ndim = 2; shape[0] = C; shape[1] = C; break;
    case LLM4D_P_FCW: *ndim = 2; shape[0] = F; shape[1] = C; break;
    case LLM4D_P_FCPROJW: *ndim = 2; shape[0] = C; shape[1] = F; break;
    case LLM4D_P_WTE: *ndim = 2; shape[0] = m->padded_vocab_size; shape[1] = C; break;
    case LLM4D_P_WPE: *ndim = 2; shape[0] = m->max_position_embeddings; shape[1] = C; break;
    }
}

static void add_param(llm4d_param_table *t, llm4d_param_kind kind, int layer, const char *name, int decay,
                      float init_std, float init_const, const llm4d_model_config *m) {
    llm4d_param *p = &t->p[t->n++];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->kind = kind;
    p->layer = layer;
    layer_shape(kind, m, &p->ndim, p->shape);
    p->rows_real = kind == LLM4D_P_WTE ? m->vocab_size : p->shape[0];
    p->numel = (size_t)p->shape[0] * (size_t)(p->ndim == 2 ? p->shape[1] : 1);
    p->offset = t->total;
    p->decay = decay;
    p->init_std = init_std;
    p->init_const = init_const;
    t->total += p->numel;
    t->total_real += (size_t)p->rows_real * (size_t)(p->ndim == 2 ? p->shape[1] : 1);
}

llm4d_code llm4d_param_table_build(llm4d_param_table *t, const llm4d_model_config *m, llm4d_err *err) {
    return llm4d_param_table_build_aligned(t, m, 1, err);
}

static void align_total(llm4d_param_table *t, int align) {
    t->total = (t->total + (size_t)align - 1) / (size_t)align * (size_t)align;
}

llm4d_code llm4d_param_table_build_aligned(llm4d_param_table *t, const llm4d_model_config *m, int align,
                                           llm4d_err *err) {
    memset(t, 0, sizeof *t);
    if (align < 1) align = 1;
    if (m->num_layers > (int)(sizeof t->layer_first / sizeof t->layer_first[0]))
        return llm4d_fail(err, LLM4D_EUSER, "num_layers %d is more than llm4d supports (%d)", m->num_layers,
                          (int)(sizeof t->layer_first / sizeof t->layer_first[0]));
    int cap = 4 + N_LAYER_SPECS * m->num_layers;
    t->p = calloc((size_t)cap, sizeof *t->p);
    if (!t->p) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory building the parameter table");
    const float std = m->initializer_range;
    const float out_std = std / sqrtf(2.0f * (float)m->num_layers);
    add_param(t, LLM4D_P_WTE, -1, "transformer.wte.weight", 1, std, 0, m);
    add_param(t, LLM4D_P_WPE, -1, "transformer.wpe.weight", 1, std, 0, m);
    align_total(t, align);
    for (int l = 0; l < m->num_layers; l++) {
        t->layer_first[l] = t->n;
        for (int s = 0; s < N_LAYER_SPECS; s++) {
            const layer_param_spec *sp = &layer_specs[s];
            char name[LLM4D_PARAM_NAME_MAX];
            snprintf(name, sizeof name, "transformer.h.%d.%s", l, sp->suffix);
            int is_ln_weight = sp->kind == LLM4D_P_LN1W || sp->kind == LLM4D_P_LN2W;
            float s_std = sp->decay ? (sp->is_out_proj ? out_std : std) : 0.0f;
            add_param(t, sp->kind, l, name, sp->decay, s_std, is_ln_weight ? 1.0f : 0.0f, m);
        }
        align_total(t, align);
    }
    add_param(t, LLM4D_P_LNFW, -1, "transformer.ln_f.weight", 0, 0, 1.0f, m);
    add_param(t, LLM4D_P_LNFB, -1, "transformer.ln_f.bias", 0, 0, 0.0f, m);
    align_total(t, align);
    t->n_groups = m->num_layers + 2;
    for (int g = 0; g < t->n_groups; g++) t->group_lo[g] = (size_t)-1, t->group_hi[g] = 0;
    for (int i = 0; i < t->n; i++) {
        const llm4d_param *p = &t->p[i];
        int g = llm4d_param_group(p, m->num_layers);
        if (p->offset < t->group_lo[g]) t->group_lo[g] = p->offset;
        if (p->offset + p->numel > t->group_hi[g]) t->group_hi[g] = p->offset + p->numel;
    }
    /* a group's range includes its alignment padding: it ends where the next group starts */
    for (int g = 0; g + 1 < t->n_groups; g++) t->group_hi[g] = t->group_lo[g + 1];
    t->group_hi[t->n_groups - 1] = t->total;
    return LLM4D_OK;
}

void llm4d_param_table_free(llm4d_param_table *t) {
    free(t->p);
    memset(t, 0, sizeof *t);
}

const llm4d_param *llm4d_param_find(const llm4d_param_table *t, const char *name) {
    for (int i = 0; i < t->n; i++)
        if (!strcmp(t->p[i].name, name)) return &t->p[i];
    return NULL;
}

/* The init stream of a parameter is keyed by a hash of its global name, not by its position in the table, so
 * that a pipeline stage or a tensor-parallel shard, which holds a different table, draws the same numbers. */
static uint32_t name_hash(const char *s) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

void llm4d_param_init_range(const llm4d_param_table *t, float *dst, size_t lo, size_t hi, uint64_t seed) {
    for (size_t j = 0; j < hi - lo; j++) dst[j] = 0.0f; /* alignment padding between groups */
    for (int i = 0; i < t->n; i++) {
        const llm4d_param *p = &t->p[i];
        const size_t a = p->offset > lo ? p->offset : lo, b = p->offset + p->numel < hi ? p->offset + p->numel : hi;
        if (a >= b) continue;
        const int64_t cols = p->ndim == 2 ? p->shape[1] : 1;
        const int64_t real = p->rows_real * cols;
        float *w = dst + (a - lo);
        const int64_t j0 = (int64_t)(a - p->offset), j1 = (int64_t)(b - p->offset);
        if (p->init_std == 0.0f) {
            for (int64_t j = j0; j < j1; j++) w[j - j0] = p->init_const;
            continue;
        }
        const uint64_t stream = llm4d_rng_stream(LLM4D_RNG_INIT, 0, 0, name_hash(p->name));
#pragma omp parallel for schedule(static)
        for (int64_t j = j0; j < j1; j++)
            w[j - j0] = j < real ? p->init_std * llm4d_rng_normal(seed, stream, (uint64_t)j) : 0.0f;
    }
}

void llm4d_param_init(const llm4d_param_table *t, float *params, uint64_t seed) {
    llm4d_param_init_range(t, params, 0, t->total, seed);
}
