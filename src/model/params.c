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

/* One global tensor of a block, or a part of one (GPT-2's fused c_attn holds Q, K and V; c_fc under SwiGLU the
 * gate and up projections), and how it is laid out over the tensor-parallel group. */
typedef struct {
    llm4d_param_kind kind;
    const char *suffix;  /* after the block's prefix ("transformer.h.<l>." or "model.layers.<l>.") */
    int64_t gshape[2];   /* the global tensor's shape ([n, 1] for a vector) */
    int64_t row0, rows;  /* the rows of it this piece covers (a fused tensor's part), split over the group */
    int split_dim;       /* -1 replicated, 0 rows, 1 columns */
    int decay;
    int out_proj;        /* output projections get the 1/sqrt(2L) scaled init */
    int key;             /* its place in the block's order, the same whatever the group's size (a whole fused
                          * tensor has its first part's) */
    int kv;              /* the K or V part: split by whole key/value heads, replicated when there are fewer of
                          * them than ranks */
} block_piece;

#define MAX_PIECES 24

/* The global tensors of a block of m in buffer order, parts of a fused tensor split in `parts` when the group has
 * more than one rank (a whole fused tensor stays one entry: Hugging Face's tools read it). Returns the count. */
static int block_pieces(const llm4d_model_config *m, int M, block_piece out[MAX_PIECES]) {
    const int64_t C = m->hidden_size, F = m->ffn_hidden_size, NH = m->num_attention_heads;
    const int64_t NKV = llm4d_model_kv_heads(m), HS = C / NH;
    const int64_t Q = NH * HS, KV = NKV * HS;
    const int L = m->llama, bias = !m->no_bias, lnb = !m->rmsnorm;
    int n = 0, key = 0;
#define PIECE(k, sfx, g0, g1, r0, nr, sd, dec, op)                                                               \
    out[n++] = (block_piece){k, sfx, {g0, g1}, r0, nr, sd, dec, op, key, 0}
    /* one fused tensor [rows_total, cols] in parts of the given rows (GPT-2) or separate tensors (Llama) */
#define FUSED(k, gname, names, cols, nparts, prow, sd, dec)                                                      \
    do {                                                                                                        \
        int64_t tot = 0, at = 0;                                                                                \
        for (int q = 0; q < (nparts); q++) tot += (prow)[q];                                                    \
        for (int q = 0; q < (nparts); q++) {                                                                    \
            if (L) PIECE(k, (names)[q], (prow)[q], cols, 0, (prow)[q], sd, dec, 0);                             \
            else if (M > 1) PIECE(k, gname, tot, cols, at, (prow)[q], sd, dec, 0);                             \
            else if (q == 0) PIECE(k, gname, tot, cols, 0, tot, sd, dec, 0);                                    \
            if ((L || M > 1) && (nparts) == 3 && q > 0) out[n - 1].kv = 1;                                      \
            at += (prow)[q], key++;                                                                             \
        }                                                                                                       \
    } while (0)
#define ONE(...) (PIECE(__VA_ARGS__), key++)
    const int64_t qkv_rows[3] = {Q, KV, KV}, fc_rows[2] = {F, F};
    static const char *const qkvw[3] = {"self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                        "self_attn.v_proj.weight"};
    static const char *const qkvb[3] = {"self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"};
    static const char *const fcw[2] = {"mlp.gate_proj.weight", "mlp.up_proj.weight"};
    static const char *const fcb[2] = {"mlp.gate_proj.bias", "mlp.up_proj.bias"};
    const int fc_parts = llm4d_model_fc_parts(m);
    const int64_t fc_one[1] = {F};
    ONE(LLM4D_P_LN1W, L ? "input_layernorm.weight" : "ln_1.weight", C, 1, 0, C, -1, 0, 0);
    if (lnb) ONE(LLM4D_P_LN1B, L ? "input_layernorm.bias" : "ln_1.bias", C, 1, 0, C, -1, 0, 0);
    FUSED(LLM4D_P_QKVW, "attn.c_attn.weight", qkvw, C, 3, qkv_rows, 0, 1);
    if (bias) FUSED(LLM4D_P_QKVB, "attn.c_attn.bias", qkvb, 1, 3, qkv_rows, 0, 0);
    ONE(LLM4D_P_ATTPROJW, L ? "self_attn.o_proj.weight" : "attn.c_proj.weight", C, Q, 0, C, 1, 1, 1);
    if (bias) ONE(LLM4D_P_ATTPROJB, L ? "self_attn.o_proj.bias" : "attn.c_proj.bias", C, 1, 0, C, -1, 0, 0);
    ONE(LLM4D_P_LN2W, L ? "post_attention_layernorm.weight" : "ln_2.weight", C, 1, 0, C, -1, 0, 0);
    if (lnb) ONE(LLM4D_P_LN2B, L ? "post_attention_layernorm.bias" : "ln_2.bias", C, 1, 0, C, -1, 0, 0);
    if (L && !m->swiglu) {
        ONE(LLM4D_P_FCW, "mlp.up_proj.weight", F, C, 0, F, 0, 1, 0);
        if (bias) ONE(LLM4D_P_FCB, "mlp.up_proj.bias", F, 1, 0, F, 0, 0, 0);
    } else {
        FUSED(LLM4D_P_FCW, "mlp.c_fc.weight", fcw, C, fc_parts, m->swiglu ? fc_rows : fc_one, 0, 1);
        if (bias) FUSED(LLM4D_P_FCB, "mlp.c_fc.bias", fcb, 1, fc_parts, m->swiglu ? fc_rows : fc_one, 0, 0);
    }
    ONE(LLM4D_P_FCPROJW, L ? "mlp.down_proj.weight" : "mlp.c_proj.weight", C, F, 0, C, 1, 1, 1);
    if (bias) ONE(LLM4D_P_FCPROJB, L ? "mlp.down_proj.bias" : "mlp.c_proj.bias", C, 1, 0, C, -1, 0, 0);
#undef ONE
#undef FUSED
#undef PIECE
    return n;
}

/* The global names of the tensors outside the blocks. */
static const char *outer_name(const llm4d_model_config *m, llm4d_param_kind k) {
    const int L = m->llama;
    switch (k) {
    case LLM4D_P_WTE: return L ? "model.embed_tokens.weight" : "transformer.wte.weight";
    case LLM4D_P_WPE: return L ? "model.embed_positions.weight" : "transformer.wpe.weight";
    case LLM4D_P_LNFW: return L ? "model.norm.weight" : "transformer.ln_f.weight";
    case LLM4D_P_LNFB: return L ? "model.norm.bias" : "transformer.ln_f.bias";
    case LLM4D_P_HEAD: return "lm_head.weight";
    default: return "";
    }
}

/* The global shape of a tensor outside the blocks. */
static int outer_shape(llm4d_param_kind k, const llm4d_model_config *m, int64_t shape[2]) {
    shape[1] = 1;
    switch (k) {
    case LLM4D_P_LNFW: case LLM4D_P_LNFB: shape[0] = m->hidden_size; return 1;
    case LLM4D_P_WTE: case LLM4D_P_HEAD: shape[0] = m->padded_vocab_size; shape[1] = m->hidden_size; return 2;
    case LLM4D_P_WPE: shape[0] = m->max_position_embeddings; shape[1] = m->hidden_size; return 2;
    default: shape[0] = 0; return 1;
    }
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

/* snprintf(buf, n, "transformer.h.%d.%s", l, suffix) (Llama: "model.layers.%d.%s"), written out for the same
 * reason. */
static void block_name(char *buf, size_t n, int llama, int l, const char *suffix) {
    char t[LLM4D_PARAM_NAME_MAX + 32], d[16];
    size_t k = 0, nd = 0;
    const char *head = llama ? "model.layers." : "transformer.h.";
    const size_t hn = strlen(head);
    memcpy(t, head, hn), k = hn;
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
    int64_t gshape[2];   /* the global tensor's */
    int piece;           /* a block's: the block_piece it is */
    int replicas;        /* ranks holding this same box (a replicated key/value head); 0 or 1: one */
    int slots, slot;     /* replicas > 1: the key/value heads, and this one (params.h tp_slots, tp_slot) */
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
    p->ndim = pc->gshape[1] > 1 ? 2 : 1;
    p->gshape[0] = pc->gshape[0], p->gshape[1] = pc->gshape[1];
    if (kind == LLM4D_P_WTE || kind == LLM4D_P_WPE || kind == LLM4D_P_HEAD) p->ndim = 2;
    p->rows_real = kind == LLM4D_P_WTE || kind == LLM4D_P_HEAD ? b->m->vocab_size : p->gshape[0];
    p->piece = pc->piece;
    p->off[0] = off[0], p->off[1] = off[1];
    p->shape[0] = shape[0], p->shape[1] = shape[1];
    p->split_dim = split_dim;
    const int rep = pc->replicas > 1;
    p->tp_partial = (split_dim < 0 && t->part.sequence_parallel && t->part.mp_size > 1) || rep;
    p->tp_slots = rep ? pc->slots : 1;
    p->tp_slot = rep ? pc->slot : 0;
    /* a replicated box is saved and counted once: by the first of the ranks holding it */
    p->owner = owner && (rep ? t->part.mp_rank % pc->replicas == 0 : split_dim >= 0 || t->part.mp_rank == 0);
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

/* The token embedding's rows of this tensor-parallel rank (kind WTE), or an untied LM head's (HEAD), in vocabulary
 * blocks (one group each). Returns the number of groups. */
static int add_vocab(builder *b, llm4d_param_kind kind, int owner) {
    llm4d_param_table *t = b->t;
    const llm4d_model_part *pt = &t->part;
    const int64_t C = b->m->hidden_size, rows = b->m->padded_vocab_size / pt->mp_size;
    const int64_t r0 = rows * pt->mp_rank, blk = pt->wte_block_rows > 0 ? pt->wte_block_rows : rows;
    int n_groups = 0;
    for (int64_t a = 0; a < rows; a += blk) {
        const int64_t n = rows - a < blk ? rows - a : blk;
        const piece pc = {{r0 + a, 0}, {n, C}, 0, {b->m->padded_vocab_size, C}, -1, 0, 0, 0};
        add(b, kind, -1, outer_name(b->m, kind), &pc, owner, 1, (init_rule){b->m->initializer_range, 0});
        close_group(b, kind == LLM4D_P_HEAD ? LLM4D_G_HEAD : LLM4D_G_WTE, -1, r0 + a, n);
        n_groups++;
    }
    return n_groups;
}

static void add_wte(builder *b, int owner) {
    b->t->wte_first = b->t->n_groups;
    b->t->wte_groups = add_vocab(b, LLM4D_P_WTE, owner);
}

static void add_block(builder *b, int l) {
    const llm4d_model_config *m = b->m;
    const llm4d_model_part *pt = &b->t->part;
    const int M = pt->mp_size, r = pt->mp_rank;
    const float std = m->initializer_range, out_std = std / sqrtf(2.0f * (float)m->num_layers);
    block_piece bp[MAX_PIECES];
    const int np = block_pieces(m, M, bp);
    for (int s = 0; s < np; s++) {
        const block_piece *sp = &bp[s];
        char name[LLM4D_PARAM_NAME_MAX];
        block_name(name, sizeof name, m->llama, l, sp->suffix);
        const int is_norm_weight = sp->kind == LLM4D_P_LN1W || sp->kind == LLM4D_P_LN2W;
        const float s_std = sp->decay ? (sp->out_proj ? out_std : std) : 0.0f;
        const float s_const = is_norm_weight ? 1.0f : 0.0f;
        piece pc = {{sp->row0, 0}, {sp->rows, sp->gshape[1]}, sp->split_dim, {sp->gshape[0], sp->gshape[1]}, sp->key,
                    0, 0, 0};
        const int NKV = llm4d_model_kv_heads(m);
        if (sp->kv && NKV < M) { /* rank r holds key/value head r / (M / NKV), as the ranks before and after it */
            const int64_t HS = m->hidden_size / m->num_attention_heads, R = M / NKV, j = r / R;
            pc.off[0] = sp->row0 + j * HS;
            pc.shape[0] = HS;
            pc.replicas = (int)R, pc.slots = NKV, pc.slot = (int)j;
        } else if (sp->split_dim == 0) {
            const int64_t n = sp->rows / M;
            pc.off[0] = sp->row0 + (int64_t)r * n;
            pc.shape[0] = n;
        } else if (sp->split_dim == 1) {
            pc.off[1] = (int64_t)r * (sp->gshape[1] / M);
            pc.shape[1] = sp->gshape[1] / M;
        }
        add(b, sp->kind, l, name, &pc, 1, sp->decay, (init_rule){s_std, s_const});
    }
    close_group(b, LLM4D_G_BLOCK, l, 0, 0);
}

static void add_whole(builder *b, llm4d_param_kind kind, int decay, float std, float c) {
    int64_t g[2] = {0, 0};
    const int nd = outer_shape(kind, b->m, g);
    const piece pc = {{0, 0}, {g[0], nd == 2 ? g[1] : 1}, -1, {g[0], g[1]}, -1, 0, 0, 0};
    add(b, kind, -1, outer_name(b->m, kind), &pc, 1, decay, (init_rule){std, c});
}

llm4d_code llm4d_param_table_build(llm4d_param_table *t, const llm4d_model_config *m, const llm4d_model_part *part,
                                   llm4d_err *err) {
    memset(t, 0, sizeof *t);
    const llm4d_model_part whole = llm4d_model_part_whole(m);
    if (!part) part = &whole;
    t->part = *part;
    if (t->part.align < 1) t->part.align = 1;
    t->num_layers = m->num_layers;
    t->wte_first = t->head_first = -1;
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
    b.cap = 2 * wte_blocks + MAX_PIECES * n_blocks + 4;
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
        if (!m->rope) { /* rotary positions have no weights */
            add_whole(&b, LLM4D_P_WPE, 1, std, 0);
            close_group(&b, LLM4D_G_WPE, -1, 0, 0);
        }
    }
    for (int c = 0; c < part->n_chunks; c++)
        for (int l = part->layer_lo[c]; l < part->layer_hi[c]; l++) add_block(&b, l);
    if (part->head) {
        add_whole(&b, LLM4D_P_LNFW, 0, 0, 1.0f);
        if (!m->rmsnorm) add_whole(&b, LLM4D_P_LNFB, 0, 0, 0.0f);
        close_group(&b, LLM4D_G_LNF, -1, 0, 0);
        if (m->untied) { /* the LM head's own weight, vocabulary-parallel as the embedding */
            t->head_first = t->n_groups;
            t->head_groups = add_vocab(&b, LLM4D_P_HEAD, 1);
        } else {
            /* the tied LM head: a pipeline's last stage holds a copy of the first stage's token embedding, kept
             * identical by summing their gradients (parallel/pipeline.h); the first stage's copy is the owner */
            if (!part->embedding) add_wte(&b, 0);
            t->head_first = t->wte_first, t->head_groups = t->wte_groups;
        }
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

/* wte 0, wpe 1, block l's tensors at 2 + l x MAX_PIECES + piece, ln_f's and lm_head after the last block */
int64_t llm4d_param_order(const llm4d_model_config *m, const llm4d_param *p) {
    const int64_t end = 2 + (int64_t)m->num_layers * MAX_PIECES;
    switch (p->kind) {
    case LLM4D_P_WTE: return 0;
    case LLM4D_P_WPE: return 1;
    case LLM4D_P_LNFW: return end;
    case LLM4D_P_LNFB: return end + 1;
    case LLM4D_P_HEAD: return end + 2;
    default: return 2 + (int64_t)p->layer * MAX_PIECES + p->piece;  /* the block_piece's key */
    }
}

void llm4d_param_order_name(const llm4d_model_config *m, int64_t order, char *buf, size_t n) {
    const int64_t end = 2 + (int64_t)m->num_layers * MAX_PIECES;
    static const llm4d_param_kind outer[] = {LLM4D_P_LNFW, LLM4D_P_LNFB, LLM4D_P_HEAD};
    if (order == 0) snprintf(buf, n, "%s", outer_name(m, LLM4D_P_WTE));
    else if (order == 1) snprintf(buf, n, "%s", outer_name(m, LLM4D_P_WPE));
    else if (order >= end) snprintf(buf, n, "%s", outer_name(m, outer[order - end < 3 ? order - end : 2]));
    else {
        block_piece bp[MAX_PIECES];
        const int np = block_pieces(m, 1, bp), k = (int)((order - 2) % MAX_PIECES);
        const char *sfx = "?";
        for (int i = 0; i < np; i++)
            if (bp[i].key <= k) sfx = bp[i].suffix; /* a part of a fused tensor: the tensor's name */
        block_name(buf, n, m->llama, (int)((order - 2) / MAX_PIECES), sfx);
    }
}
