/* params.c — building a rank's GPT parameter table and the initial weights (see params.h). */
#include "model/params.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"

llm4d_model_part llm4d_model_part_whole(const llm4d_model_config *m) {
    llm4d_model_part p = {.mp_size = 1, .n_chunks = 1, .embedding = 1, .head = 1, .align = 1};
    p.layer_hi[0] = m->num_layers;
    return p;
}

/* How one kind of block parameter is laid out over the tensor-parallel group. */
typedef struct {
    llm4d_param_kind kind;
    const char *suffix;  /* after "transformer.h.<l>." */
    int decay;
    int is_out_proj;     /* output projections get the 1/sqrt(2L) scaled init */
    int split_dim;       /* -1 replicated, 0 rows, 1 columns */
    int qkv_parts;       /* 3: rows come as Q, K, V parts, each split over the group */
} layer_param_spec;

static const layer_param_spec layer_specs[] = {
    {LLM4D_P_LN1W, "ln_1.weight", 0, 0, -1, 0},          {LLM4D_P_LN1B, "ln_1.bias", 0, 0, -1, 0},
    {LLM4D_P_QKVW, "attn.c_attn.weight", 1, 0, 0, 3},    {LLM4D_P_QKVB, "attn.c_attn.bias", 0, 0, 0, 3},
    {LLM4D_P_ATTPROJW, "attn.c_proj.weight", 1, 1, 1, 0}, {LLM4D_P_ATTPROJB, "attn.c_proj.bias", 0, 0, -1, 0},
    {LLM4D_P_LN2W, "ln_2.weight", 0, 0, -1, 0},          {LLM4D_P_LN2B, "ln_2.bias", 0, 0, -1, 0},
    {LLM4D_P_FCW, "mlp.c_fc.weight", 1, 0, 0, 0},        {LLM4D_P_FCB, "mlp.c_fc.bias", 0, 0, 0, 0},
    {LLM4D_P_FCPROJW, "mlp.c_proj.weight", 1, 1, 1, 0},  {LLM4D_P_FCPROJB, "mlp.c_proj.bias", 0, 0, -1, 0},
};
#define N_LAYER_SPECS ((int)(sizeof layer_specs / sizeof layer_specs[0]))

/* The global shape of a kind. */
static int global_shape(llm4d_param_kind k, const llm4d_model_config *m, int64_t shape[2]) {
    const int64_t C = m->hidden_size, F = m->ffn_hidden_size;
    shape[1] = 1;
    switch (k) {
    case LLM4D_P_LN1W: case LLM4D_P_LN1B: case LLM4D_P_LN2W: case LLM4D_P_LN2B:
    case LLM4D_P_ATTPROJB: case LLM4D_P_FCPROJB: case LLM4D_P_LNFW: case LLM4D_P_LNFB:
        shape[0] = C; return 1;
    case LLM4D_P_QKVB: shape[0] = 3 * C; return 1;
    case LLM4D_P_FCB: shape[0] = F; return 1;
    case LLM4D_P_QKVW: shape[0] = 3 * C; shape[1] = C; return 2;
    case LLM4D_P_ATTPROJW: shape[0] = C; shape[1] = C; return 2;
    case LLM4D_P_FCW: shape[0] = F; shape[1] = C; return 2;
    case LLM4D_P_FCPROJW: shape[0] = C; shape[1] = F; return 2;
    case LLM4D_P_WTE: shape[0] = m->padded_vocab_size; shape[1] = C; return 2;
    case LLM4D_P_WPE: shape[0] = m->max_position_embeddings; shape[1] = C; return 2;
    }
    return 0;
}

typedef struct {
    llm4d_param_table *t;
    const llm4d_model_config *m;
    int cap, group_cap;
    int group_open;      /* entries since this one belong to the group being built */
} builder;

/* snprintf(dst, n, "%s", src) of a src of k bytes, without the formatter: the planner builds parameter tables by the
 * thousand (every model part it counts), and formatting the names was a tenth of a large search. */
static void copy_name(char *dst, size_t n, const char *src, size_t k) {
    if (k >= n) k = n - 1;
    memcpy(dst, src, k);
    dst[k] = 0;
}

/* snprintf(buf, n, "transformer.h.%d.%s", l, suffix), written out for the same reason. */
static void block_name(char *buf, size_t n, int l, const char *suffix) {
    char t[LLM4D_PARAM_NAME_MAX + 32], d[16];
    size_t k = 0, nd = 0;
    static const char head[] = "transformer.h.";
    memcpy(t, head, sizeof head - 1), k = sizeof head - 1;
    long long x = l;
    if (x < 0) t[k++] = '-', x = -x;
    do d[nd++] = (char)('0' + x % 10), x /= 10; while (x > 0);
    while (nd > 0) t[k++] = d[--nd];
    t[k++] = '.';
    for (const char *c = suffix; *c && k < sizeof t - 1; c++) t[k++] = *c;
    copy_name(buf, n, t, k);
}

/* This rank's piece of a tensor: its offset in the global tensor, its shape, and the dimension the global tensor is
 * split along over the tensor-parallel group (-1 replicated, 0 rows, 1 columns). */
typedef struct {
    int64_t off[2], shape[2];
    int split_dim;
} piece;

/* How a tensor starts: normal(0, std), or the constant c where std is 0 (params.h init_std, init_const). */
typedef struct {
    float std, c;
} init_rule;

static llm4d_param *add(builder *b, llm4d_param_kind kind, int layer, const char *name, const piece *pc, int owner,
                        int decay, init_rule init) {
    const int64_t *off = pc->off, *shape = pc->shape;
    const int split_dim = pc->split_dim;
    const float init_std = init.std, init_const = init.c;
    llm4d_param_table *t = b->t;
    LLM4D_ASSERT(t->n < b->cap, "parameter table capacity %d exceeded", b->cap);
    llm4d_param *p = &t->p[t->n++];
    memset(p, 0, sizeof *p);
    copy_name(p->name, sizeof p->name, name, strlen(name));
    p->kind = kind;
    p->layer = layer;
    p->ndim = global_shape(kind, b->m, p->gshape);
    p->rows_real = kind == LLM4D_P_WTE ? b->m->vocab_size : p->gshape[0];
    p->off[0] = off[0], p->off[1] = off[1];
    p->shape[0] = shape[0], p->shape[1] = shape[1];
    p->split_dim = split_dim;
    p->sp_partial = split_dim < 0 && t->part.sequence_parallel && t->part.mp_size > 1;
    p->owner = owner && (split_dim >= 0 || t->part.mp_rank == 0);
    p->group = t->n_groups;
    p->numel = (size_t)shape[0] * (size_t)shape[1];
    p->offset = t->total;
    p->decay = decay;
    p->init_std = init_std;
    p->init_const = init_const;
    t->total += p->numel;
    int64_t real_rows = p->rows_real - off[0] < shape[0] ? p->rows_real - off[0] : shape[0];
    if (real_rows < 0) real_rows = 0;
    t->total_real += (size_t)real_rows * (size_t)shape[1];
    return p;
}

/* Close the group made of the entries added since the last close: pad the buffer to the alignment. */
static void close_group(builder *b, llm4d_group_kind kind, int layer, int64_t row0, int64_t nrows) {
    llm4d_param_table *t = b->t;
    LLM4D_ASSERT(t->n_groups < b->group_cap, "group capacity %d exceeded", b->group_cap);
    llm4d_group *g = &t->g[t->n_groups++];
    g->kind = kind;
    g->layer = layer;
    g->row0 = row0;
    g->nrows = nrows;
    g->p0 = b->group_open;
    g->p1 = t->n;
    g->lo = t->p[g->p0].offset;
    t->total = llm4d_param_align_up(t->total, t->part.align);
    g->hi = t->total;
    b->group_open = t->n;
}

/* The token embedding's rows of this tensor-parallel rank, in vocabulary blocks (one group each). */
static void add_wte(builder *b, int owner) {
    llm4d_param_table *t = b->t;
    const llm4d_model_part *pt = &t->part;
    const int64_t C = b->m->hidden_size, rows = b->m->padded_vocab_size / pt->mp_size;
    const int64_t r0 = rows * pt->mp_rank, blk = pt->wte_block_rows > 0 ? pt->wte_block_rows : rows;
    t->wte_first = t->n_groups;
    t->wte_groups = 0;
    for (int64_t a = 0; a < rows; a += blk) {
        const int64_t n = rows - a < blk ? rows - a : blk;
        const piece pc = {{r0 + a, 0}, {n, C}, 0};
        add(b, LLM4D_P_WTE, -1, "transformer.wte.weight", &pc, owner, 1, (init_rule){b->m->initializer_range, 0});
        close_group(b, LLM4D_G_WTE, -1, r0 + a, n);
        t->wte_groups++;
    }
}

static void add_block(builder *b, int l) {
    const llm4d_model_config *m = b->m;
    const llm4d_model_part *pt = &b->t->part;
    const int M = pt->mp_size, r = pt->mp_rank;
    const float std = m->initializer_range, out_std = std / sqrtf(2.0f * (float)m->num_layers);
    for (int s = 0; s < N_LAYER_SPECS; s++) {
        const layer_param_spec *sp = &layer_specs[s];
        char name[LLM4D_PARAM_NAME_MAX];
        block_name(name, sizeof name, l, sp->suffix);
        int64_t g[2] = {0, 0};
        const int nd = global_shape(sp->kind, m, g);
        const int is_ln_weight = sp->kind == LLM4D_P_LN1W || sp->kind == LLM4D_P_LN2W;
        const float s_std = sp->decay ? (sp->is_out_proj ? out_std : std) : 0.0f;
        const float s_const = is_ln_weight ? 1.0f : 0.0f;
        const int parts = sp->qkv_parts && M > 1 ? sp->qkv_parts : 1; /* one entry when whole: HF tools read it */
        for (int k = 0; k < parts; k++) {
            piece pc = {{0, 0}, {g[0], nd == 2 ? g[1] : 1}, sp->split_dim};
            if (sp->split_dim == 0) {
                const int64_t part_rows = g[0] / parts, n = part_rows / M;
                pc.off[0] = k * part_rows + (int64_t)r * n;
                pc.shape[0] = n;
            } else if (sp->split_dim == 1) {
                pc.off[1] = (int64_t)r * (g[1] / M);
                pc.shape[1] = g[1] / M;
            }
            add(b, sp->kind, l, name, &pc, 1, sp->decay, (init_rule){s_std, s_const});
        }
    }
    close_group(b, LLM4D_G_BLOCK, l, 0, 0);
}

static void add_whole(builder *b, llm4d_param_kind kind, const char *name, int decay, float std, float c) {
    int64_t g[2] = {0, 0};
    const int nd = global_shape(kind, b->m, g);
    const piece pc = {{0, 0}, {g[0], nd == 2 ? g[1] : 1}, -1};
    add(b, kind, -1, name, &pc, 1, decay, (init_rule){std, c});
}

llm4d_code llm4d_param_table_build(llm4d_param_table *t, const llm4d_model_config *m, const llm4d_model_part *part,
                                   llm4d_err *err) {
    memset(t, 0, sizeof *t);
    const llm4d_model_part whole = llm4d_model_part_whole(m);
    if (!part) part = &whole;
    t->part = *part;
    if (t->part.align < 1) t->part.align = 1;
    t->num_layers = m->num_layers;
    t->wte_first = -1;
    if (part->n_chunks < 0 || part->n_chunks > LLM4D_MAX_CHUNKS)
        return llm4d_fail(err, LLM4D_EUSER, "%d pipeline chunks on one rank; llm4d supports at most %d",
                          part->n_chunks, LLM4D_MAX_CHUNKS);
    int n_blocks = 0;
    for (int c = 0; c < part->n_chunks; c++) {
        if (part->layer_lo[c] < 0 || part->layer_hi[c] > m->num_layers || part->layer_lo[c] > part->layer_hi[c])
            return llm4d_fail(err, LLM4D_EINTERNAL, "chunk %d holds layers [%d, %d) of a %d-layer model", c,
                              part->layer_lo[c], part->layer_hi[c], m->num_layers);
        n_blocks += part->layer_hi[c] - part->layer_lo[c];
    }
    const int M = part->mp_size > 0 ? part->mp_size : 1;
    const int64_t rows = m->padded_vocab_size / M, blk = part->wte_block_rows > 0 ? part->wte_block_rows : rows;
    const int wte_blocks = (int)((rows + blk - 1) / blk);
    builder b = {.t = t, .m = m};
    b.group_cap = 2 * wte_blocks + n_blocks + 3;
    b.cap = 2 * wte_blocks + 16 * n_blocks + 4;
    /* not zeroed: add() clears each entry it takes, and the capacity is a bound, not the count (zeroing it all was
     * a tenth of a large search's time: the planner builds tens of thousands of tables) */
    t->p = malloc((size_t)b.cap * sizeof *t->p);
    t->g = calloc((size_t)b.group_cap, sizeof *t->g);
    if (!t->p || !t->g) {
        llm4d_param_table_free(t);
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory building the parameter table");
    }
    const float std = m->initializer_range;
    if (part->embedding) {
        add_wte(&b, 1);
        add_whole(&b, LLM4D_P_WPE, "transformer.wpe.weight", 1, std, 0);
        close_group(&b, LLM4D_G_WPE, -1, 0, 0);
    }
    for (int c = 0; c < part->n_chunks; c++)
        for (int l = part->layer_lo[c]; l < part->layer_hi[c]; l++) add_block(&b, l);
    if (part->head) {
        add_whole(&b, LLM4D_P_LNFW, "transformer.ln_f.weight", 0, 0, 1.0f);
        add_whole(&b, LLM4D_P_LNFB, "transformer.ln_f.bias", 0, 0, 0.0f);
        close_group(&b, LLM4D_G_LNF, -1, 0, 0);
        /* the tied LM head: a pipeline's last stage holds a copy of the first stage's token embedding, kept
         * identical by summing their gradients (parallel/pipeline.h); the first stage's copy is the owner */
        if (!part->embedding) add_wte(&b, 0);
    }
    return LLM4D_OK;
}

void llm4d_param_table_free(llm4d_param_table *t) {
    free(t->p);
    free(t->g);
    memset(t, 0, sizeof *t);
}

const llm4d_param *llm4d_param_find(const llm4d_param_table *t, const char *name) {
    for (int i = 0; i < t->n; i++)
        if (!strcmp(t->p[i].name, name)) return &t->p[i];
    return NULL;
}

int llm4d_param_group_of(const llm4d_param_table *t, llm4d_group_kind kind, int layer) {
    for (int g = 0; g < t->n_groups; g++)
        if (t->g[g].kind == kind && (kind != LLM4D_G_BLOCK || t->g[g].layer == layer)) return g;
    return -1;
}

/* The init stream of a parameter is keyed by a hash of its global name, not by its position in the table, so
 * that a pipeline stage or a tensor-parallel shard, which holds a different table, draws the same numbers. */
static uint32_t name_hash(const char *s) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 16777619u;
    return h;
}

void llm4d_param_init_range(const llm4d_param_table *t, llm4d_backend *be, float *dst, size_t lo, size_t hi,
                            uint64_t seed) {
    be->zero(be, dst, (hi - lo) * sizeof(float)); /* alignment padding between groups */
    for (int i = 0; i < t->n; i++) {
        const llm4d_param *p = &t->p[i];
        const size_t a = p->offset > lo ? p->offset : lo, b = p->offset + p->numel < hi ? p->offset + p->numel : hi;
        if (a >= b) continue;
        const int64_t gcols = p->ndim == 2 ? p->gshape[1] : 1;
        const llm4d_init_spec spec = {.std = p->init_std, .value = p->init_const, .seed = seed,
                                      .stream = llm4d_rng_stream(LLM4D_RNG_INIT, 0, 0, name_hash(p->name)),
                                      .off0 = p->off[0], .off1 = p->off[1], .cols = p->shape[1], .gcols = gcols,
                                      .real = p->rows_real * gcols};
        be->init_param(be, dst + (a - lo), &spec, (int64_t)(a - p->offset), (int64_t)(b - p->offset));
    }
}

void llm4d_param_init(const llm4d_param_table *t, llm4d_backend *be, float *params, uint64_t seed) {
    llm4d_param_init_range(t, be, params, 0, t->total, seed);
}

/* wte 0, wpe 1, block l's kinds at 2 + l x N_LAYER_SPECS + (kind - LN1W), ln_f's after the last block */
int64_t llm4d_param_order(const llm4d_param *p, int num_layers) {
    switch (p->kind) {
    case LLM4D_P_WTE: return 0;
    case LLM4D_P_WPE: return 1;
    case LLM4D_P_LNFW:
    case LLM4D_P_LNFB: return 2 + (int64_t)num_layers * N_LAYER_SPECS + (p->kind - LLM4D_P_LNFW);
    default: return 2 + (int64_t)p->layer * N_LAYER_SPECS + (p->kind - LLM4D_P_LN1W);
    }
}

void llm4d_param_order_name(int64_t order, int num_layers, char *buf, size_t n) {
    const int64_t blocks = (int64_t)num_layers * N_LAYER_SPECS;
    if (order == 0) snprintf(buf, n, "transformer.wte.weight");
    else if (order == 1) snprintf(buf, n, "transformer.wpe.weight");
    else if (order - 2 >= blocks) snprintf(buf, n, "transformer.ln_f.%s", order - 2 == blocks ? "weight" : "bias");
    else snprintf(buf, n, "transformer.h.%lld.%s", (long long)((order - 2) / N_LAYER_SPECS),
                  layer_specs[(order - 2) % N_LAYER_SPECS].suffix);
}
