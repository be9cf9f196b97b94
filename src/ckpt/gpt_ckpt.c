/* gpt_ckpt.c — saving and loading a GPT training state through the checkpoint store (see gpt_ckpt.h).
 *
 * A table entry (model/params.h) is a box of a global tensor: local row r, column c is global (off0 + r, off1 + c).
 * A run of its local C-order elements [j0, j1) is at most three boxes of the global tensor (the rest of a first
 * row, whole rows, the start of a last row), each contiguous in local memory, which is what the store saves and
 * reads. The token embedding's padding rows (global rows >= vocab_size) are cut off: a checkpoint holds the
 * unpadded tensor, and padding reads back as zero. */
#include "ckpt/gpt_ckpt.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/shape.h"

#define FORMAT_NAME "llm4d-gpt"
#define FORMAT_VERSION 1

int llm4d_gpt_ckpt_shape(const llm4d_param *p, int64_t shape[2]) {
    shape[0] = p->rows_real;
    shape[1] = p->ndim == 2 ? p->gshape[1] : 0;
    return p->ndim;
}

/* The local elements [*j0, *j1) of p inside the flat range [lo, hi); 0 when none. */
static int intersect(const llm4d_param *p, size_t lo, size_t hi, int64_t *j0, int64_t *j1) {
    const size_t a = lo > p->offset ? lo : p->offset;
    const size_t z = hi < p->offset + p->numel ? hi : p->offset + p->numel;
    if (a >= z) return 0;
    *j0 = (int64_t)(a - p->offset);
    *j1 = (int64_t)(z - p->offset);
    return 1;
}

/* The boxes (global offset, shape, first local element) that local elements [j0, j1) of p are made of, padding
 * rows left out; returns how many (at most 3). */
typedef struct {
    int64_t off[2], shape[2], j;
} box;

static int boxes_of(const llm4d_param *p, int64_t j0, int64_t j1, box out[3]) {
    const int64_t W = p->shape[1], real_rows = p->rows_real - p->off[0]; /* local rows below the padding */
    int n = 0;
    while (j0 < j1) {
        const int64_t r = j0 / W, c = j0 % W;
        int64_t rows, cols;
        if (c != 0 || j1 - j0 < W) { /* part of one row */
            rows = 1;
            cols = (j1 - j0 < W - c) ? j1 - j0 : W - c;
        } else { /* whole rows */
            rows = (j1 - j0) / W;
            cols = W;
        }
        if (r < real_rows) {
            const int64_t keep = r + rows <= real_rows ? rows : real_rows - r;
            LLM4D_ASSERT(n < 3, "more than 3 boxes for elements [%lld, %lld) of %s", (long long)j0, (long long)j1,
                         p->name);
            out[n++] = (box){{p->off[0] + r, p->off[1] + (p->ndim == 2 ? c : 0)}, {keep, cols}, j0};
            if (p->ndim == 1) out[n - 1].off[0] = p->off[0] + r, out[n - 1].shape[0] = keep;
        }
        j0 += rows * cols;
    }
    return n;
}

llm4d_code llm4d_gpt_ckpt_add_slice(llm4d_ckpt_saver *s, const char *file, const llm4d_param *p, int64_t j0,
                                    int64_t j1, const float *data, llm4d_err *err) {
    box bx[3];
    int64_t shape[2];
    const int nd = llm4d_gpt_ckpt_shape(p, shape);
    const int nb = boxes_of(p, j0, j1, bx);
    for (int k = 0; k < nb; k++) {
        const int64_t off1[1] = {bx[k].off[0]}, sh1[1] = {bx[k].shape[0] * bx[k].shape[1]};
        const llm4d_ckpt_box b = {LLM4D_ST_F32, nd, shape, nd == 2 ? bx[k].off : off1, nd == 2 ? bx[k].shape : sh1};
        LLM4D_TRY(llm4d_ckpt_save_tensor(s, file, p->name, &b, data + (bx[k].j - j0), err));
    }
    return LLM4D_OK;
}

llm4d_code llm4d_gpt_ckpt_read_slice(const llm4d_ckpt *c, const char *stem, const llm4d_param *p, int64_t j0,
                                     int64_t j1, float *data, llm4d_err *err) {
    box bx[3];
    int64_t shape[2];
    const int nd = llm4d_gpt_ckpt_shape(p, shape);
    memset(data, 0, (size_t)(j1 - j0) * sizeof(float)); /* padding rows */
    const int nb = boxes_of(p, j0, j1, bx);
    for (int k = 0; k < nb; k++) {
        const int64_t off1[1] = {bx[k].off[0]}, sh1[1] = {bx[k].shape[0] * bx[k].shape[1]};
        const llm4d_ckpt_box b = {LLM4D_ST_F32, nd, shape, nd == 2 ? bx[k].off : off1, nd == 2 ? bx[k].shape : sh1};
        LLM4D_TRY(llm4d_ckpt_read(c, stem, p->name, &b, data + (bx[k].j - j0), err));
    }
    return LLM4D_OK;
}

static void file_name(char *buf, size_t n, const char *stem, const char *tag) {
    snprintf(buf, n, "%s%s.safetensors", stem, tag ? tag : "");
}

/* Where range k of st starts in m and v (*state) and in params (*par); *next: where a back-to-back range k+1
 * starts. */
static void range_at(const llm4d_ckpt_state *st, int k, size_t *next, size_t *par, size_t *state) {
    *state = st->state_off ? st->state_off[k] : *next;
    *next = *state + (st->hi[k] - st->lo[k]);
    *par = st->params_off ? st->params_off[k] : *state;
}

/* One range [range[0], range[1]) of t into the files of tag (the buffers hold its elements). */
static llm4d_code add_range(llm4d_ckpt_saver *s, const llm4d_param_table *t, const float *params, const float *m,
                            const float *v, const size_t range[2], const char *tag, llm4d_err *err) {
    const size_t lo = range[0], hi = range[1];
    LLM4D_ASSERT((m == NULL) == (v == NULL), "m %p and v %p must be both given or both NULL", (const void *)m,
                 (const void *)v);
    LLM4D_ASSERT(lo <= hi && hi <= t->total, "range [%zu, %zu) outside the %zu parameters", lo, hi, t->total);
    const char *stems[3] = {LLM4D_GPT_CKPT_MODEL, LLM4D_GPT_CKPT_OPTIM_M, LLM4D_GPT_CKPT_OPTIM_V};
    const float *bufs[3] = {params, m, v};
    for (int k = 0; k < 3; k++) {
        if (!bufs[k]) continue;
        char file[LLM4D_CKPT_FILE_MAX];
        file_name(file, sizeof file, stems[k], tag);
        for (int i = 0; i < t->n; i++) {
            const llm4d_param *p = &t->p[i];
            int64_t j0, j1;
            if (!p->owner || !intersect(p, lo, hi, &j0, &j1)) continue; /* replicas are saved by their owner */
            LLM4D_TRY(llm4d_gpt_ckpt_add_slice(s, file, p, j0, j1, bufs[k] + (p->offset + (size_t)j0 - lo), err));
        }
    }
    return LLM4D_OK;
}

llm4d_code llm4d_gpt_ckpt_add(llm4d_ckpt_saver *s, const llm4d_ckpt_state *st, const char *tag, llm4d_err *err) {
    size_t next = 0, pa, so;
    for (int k = 0; k < st->n; k++) {
        range_at(st, k, &next, &pa, &so);
        const size_t range[2] = {st->lo[k], st->hi[k]};
        LLM4D_TRY(add_range(s, st->t, st->params ? st->params + pa : NULL, st->m ? st->m + so : NULL,
                            st->v ? st->v + so : NULL, range, tag, err));
    }
    return LLM4D_OK;
}

double llm4d_json_float(float f) {
    char buf[32];
    for (int digits = 6; digits <= 9; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, (double)f);
        if ((float)strtod(buf, NULL) == f) break;
    }
    return strtod(buf, NULL);
}

static cJSON *model_json(const llm4d_model_config *m) {
    cJSON *j = cJSON_CreateObject();
    if (!j) return NULL;
    cJSON_AddNumberToObject(j, "vocab_size", m->vocab_size);
    cJSON_AddNumberToObject(j, "hidden_size", m->hidden_size);
    cJSON_AddNumberToObject(j, "num_layers", m->num_layers);
    cJSON_AddNumberToObject(j, "num_attention_heads", m->num_attention_heads);
    cJSON_AddNumberToObject(j, "ffn_hidden_size", m->ffn_hidden_size);
    cJSON_AddNumberToObject(j, "max_position_embeddings", m->max_position_embeddings);
    cJSON_AddNumberToObject(j, "hidden_dropout_prob", llm4d_json_float(m->hidden_dropout_prob));
    cJSON_AddNumberToObject(j, "attention_probs_dropout_prob", llm4d_json_float(m->attention_probs_dropout_prob));
    cJSON_AddNumberToObject(j, "initializer_range", llm4d_json_float(m->initializer_range));
    cJSON_AddNumberToObject(j, "eos_token_id", m->eos_token_id);
    /* informational: the padding of the run that wrote it (the stored wte is unpadded) */
    cJSON_AddNumberToObject(j, "padded_vocab_size", m->padded_vocab_size);
    cJSON_AddStringToObject(j, "type", m->llama ? "LLaMA" : "GPT");
    /* the description (config/model_desc.c), in the keys' own spellings */
    cJSON_AddStringToObject(j, "normalization", m->rmsnorm ? "RMSNorm" : "LayerNorm");
    cJSON_AddNumberToObject(j, "norm_epsilon", llm4d_json_float(m->norm_epsilon > 0 ? m->norm_epsilon : 1e-5f));
    cJSON_AddStringToObject(j, "position_embedding_type", m->rope ? "rope" : "learned_absolute");
    if (m->rope) cJSON_AddNumberToObject(j, "rope_theta", llm4d_json_float(m->rope_theta));
    cJSON_AddStringToObject(j, "hidden_act", m->swiglu ? "swiglu" : "gelu");
    cJSON_AddNumberToObject(j, "num_key_value_heads", llm4d_model_kv_heads(m));
    cJSON_AddBoolToObject(j, "add_bias_linear", !m->no_bias);
    cJSON_AddBoolToObject(j, "tie_word_embeddings", !m->untied);
    return j;
}

/* The description from meta.json's model object into m (a checkpoint written before it had one is GPT-2's). */
static llm4d_code description_from_meta(const cJSON *mj, const char *what, llm4d_model_config *m, llm4d_err *err) {
    const cJSON *x;
#define STR_IS(key, val) (cJSON_IsString(x = cJSON_GetObjectItemCaseSensitive(mj, key)) && !strcmp(x->valuestring, val))
    m->llama = STR_IS("type", "LLaMA");
    snprintf(m->model_type, sizeof m->model_type, "%s", m->llama ? "LLaMA" : "GPT");
    m->rmsnorm = STR_IS("normalization", "RMSNorm");
    m->rope = STR_IS("position_embedding_type", "rope");
    m->swiglu = STR_IS("hidden_act", "swiglu");
#undef STR_IS
    m->no_bias = cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(mj, "add_bias_linear"));
    m->untied = cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(mj, "tie_word_embeddings"));
    m->norm_epsilon = 1e-5f;
    if (cJSON_IsNumber(x = cJSON_GetObjectItemCaseSensitive(mj, "norm_epsilon")))
        m->norm_epsilon = (float)x->valuedouble;
    if (cJSON_IsNumber(x = cJSON_GetObjectItemCaseSensitive(mj, "rope_theta"))) m->rope_theta = (float)x->valuedouble;
    /* the inputs too, so that llm4d_model_describe of a run from this checkpoint (model_name_or_path DIR) resolves
     * them to the same model whatever its family's defaults */
    snprintf(m->normalization, sizeof m->normalization, "%s", m->rmsnorm ? "RMSNorm" : "LayerNorm");
    snprintf(m->position_embedding_type, sizeof m->position_embedding_type, "%s",
             m->rope ? "rope" : "learned_absolute");
    snprintf(m->hidden_act, sizeof m->hidden_act, "%s", m->swiglu ? "swiglu" : "gelu");
    m->swiglu_flag = 0;
    m->add_bias_linear = !m->no_bias;
    m->tie_word_embeddings = !m->untied;
    m->untie_embeddings = m->untied;
    m->from_checkpoint = 1;
    m->num_kv_heads = m->num_attention_heads;
    if ((x = cJSON_GetObjectItemCaseSensitive(mj, "num_key_value_heads"))) {
        if (!cJSON_IsNumber(x) || x->valuedouble < 1 || x->valuedouble > m->num_attention_heads ||
            m->num_attention_heads % (int)x->valuedouble)
            return llm4d_fail(err, LLM4D_EUSER, "%s: meta.json's model.num_key_value_heads does not divide its %d "
                              "heads; the checkpoint's meta.json is damaged", what, m->num_attention_heads);
        m->num_kv_heads = (int)x->valuedouble;
    }
    if (!(m->norm_epsilon > 0) || (m->rope && !(m->rope_theta > 0)))
        return llm4d_fail(err, LLM4D_EUSER, "%s: meta.json's model.norm_epsilon or rope_theta is not positive; the "
                          "checkpoint's meta.json is damaged", what);
    return LLM4D_OK;
}

llm4d_code llm4d_gpt_ckpt_meta(cJSON *meta, const llm4d_model_config *model, int has_optim, llm4d_err *err) {
    cJSON *mj = model_json(model), *fj = cJSON_CreateObject();
    if (!mj || !fj) {
        cJSON_Delete(mj);
        cJSON_Delete(fj);
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory building meta.json");
    }
    cJSON_AddStringToObject(fj, "name", FORMAT_NAME);
    cJSON_AddNumberToObject(fj, "version", FORMAT_VERSION);
    cJSON_AddStringToObject(fj, "weights", model->llama ? "model*.safetensors, float32, HF Llama names, linear "
                                                          "weights [out, in], embed_tokens and lm_head unpadded"
                                                        : "model*.safetensors, float32, HF GPT-2 names, linear "
                                                          "weights [out, in], wte unpadded");
    if (has_optim) cJSON_AddStringToObject(fj, "optimizer", "adamw: optim_m*.safetensors, optim_v*.safetensors");
    else cJSON_AddNullToObject(fj, "optimizer");
    cJSON_DeleteItemFromObjectCaseSensitive(meta, "model");
    cJSON_DeleteItemFromObjectCaseSensitive(meta, "format");
    cJSON_AddItemToObject(meta, "model", mj);
    cJSON_AddItemToObject(meta, "format", fj);
    return LLM4D_OK;
}

llm4d_code llm4d_gpt_ckpt_save_prepare(llm4d_ckpt_saver **out, cJSON **meta_out, llm4d_comm *comm,
                                       const llm4d_ckpt_dest *d, const llm4d_model_config *model,
                                       const llm4d_ckpt_state *st, const cJSON *meta, llm4d_err *err) {
    *meta_out = NULL;
    llm4d_ckpt_saver *s = NULL;
    LLM4D_TRY(llm4d_ckpt_save_begin_collective(&s, comm, d->output_dir, d->step, d->writes, err));
    const char *tag = d->tag;
    char own_tag[32];
    if (!tag) {
        snprintf(own_tag, sizeof own_tag, "_r%03d", llm4d_comm_rank(comm));
        tag = own_tag;
    }
    /* failures below are kept by the saver and make the collective commit fail on every rank */
    llm4d_err le = {0};
    cJSON *mj = NULL;
    if (llm4d_comm_rank(comm) == 0) {
        mj = meta ? cJSON_Duplicate(meta, 1) : cJSON_CreateObject();
        if (!mj || !cJSON_IsObject(mj)) {
            llm4d_fail(&le, mj ? LLM4D_EINTERNAL : LLM4D_ENOMEM, "checkpoint meta must be a JSON object (or memory "
                       "ran out copying it)");
            llm4d_ckpt_save_mark_failed(s, &le);
        } else if (llm4d_gpt_ckpt_meta(mj, model, st->m != NULL, &le) != LLM4D_OK) {
            llm4d_ckpt_save_mark_failed(s, &le);
        }
    }
    llm4d_gpt_ckpt_add(s, st, tag, &le);
    *out = s;
    *meta_out = mj;
    return LLM4D_OK;
}

llm4d_code llm4d_gpt_ckpt_save_collective(llm4d_comm *comm, const llm4d_ckpt_dest *d, const llm4d_model_config *model,
                                          const llm4d_ckpt_state *st, const cJSON *meta, llm4d_err *err) {
    llm4d_ckpt_saver *s = NULL;
    cJSON *mj = NULL;
    LLM4D_TRY(llm4d_gpt_ckpt_save_prepare(&s, &mj, comm, d, model, st, meta, err));
    llm4d_code rc = llm4d_ckpt_save_commit_collective(s, mj, d->keep_last, err); /* consumes s */
    cJSON_Delete(mj);
    return rc;
}

llm4d_code llm4d_gpt_ckpt_save(const llm4d_ckpt_dest *d, const llm4d_model_config *model, const llm4d_ckpt_state *st,
                               const cJSON *meta, llm4d_err *err) {
    cJSON *mj = meta ? cJSON_Duplicate(meta, 1) : cJSON_CreateObject();
    if (!mj) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory building meta.json");
    if (!cJSON_IsObject(mj)) {
        cJSON_Delete(mj);
        return llm4d_fail(err, LLM4D_EINTERNAL, "checkpoint meta must be a JSON object");
    }
    llm4d_code rc = llm4d_gpt_ckpt_meta(mj, model, st->m != NULL, err);
    llm4d_ckpt_saver *s = NULL;
    if (!rc) rc = llm4d_ckpt_save_begin(&s, d->output_dir, d->step, err);
    if (!rc) {
        rc = llm4d_gpt_ckpt_add(s, st, "", err);
        if (!rc) rc = llm4d_ckpt_save_commit(s, mj, d->keep_last, err); /* consumes s */
        else llm4d_ckpt_save_abort(s);
    }
    cJSON_Delete(mj);
    return rc;
}

/* ---- meta.json's model ---- */

static const struct {
    const char *key;
    size_t off;
} geometry[] = {
    {"vocab_size", offsetof(llm4d_model_config, vocab_size)},
    {"hidden_size", offsetof(llm4d_model_config, hidden_size)},
    {"num_layers", offsetof(llm4d_model_config, num_layers)},
    {"num_attention_heads", offsetof(llm4d_model_config, num_attention_heads)},
    {"ffn_hidden_size", offsetof(llm4d_model_config, ffn_hidden_size)},
    {"max_position_embeddings", offsetof(llm4d_model_config, max_position_embeddings)},
};
#define N_GEOMETRY ((int)(sizeof geometry / sizeof geometry[0]))

static llm4d_code meta_model(const cJSON *meta, const char *what, const cJSON **out, llm4d_err *err) {
    const cJSON *mj = cJSON_GetObjectItemCaseSensitive(meta, "model");
    if (!cJSON_IsObject(mj))
        return llm4d_fail(err, LLM4D_EUSER, "%s: meta.json has no \"model\" object, so it is not an llm4d GPT "
                          "checkpoint; pass a directory written by llm4d train or llm4d convert", what);
    *out = mj;
    return LLM4D_OK;
}

static llm4d_code meta_int(const cJSON *mj, const char *what, const char *key, int *out, llm4d_err *err) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(mj, key);
    /* range before the cast: converting a double outside int's range to int is undefined behaviour */
    if (!cJSON_IsNumber(x) || !(x->valuedouble >= 1 && x->valuedouble <= INT_MAX) ||
        x->valuedouble != (double)(int)x->valuedouble)
        return llm4d_fail(err, LLM4D_EUSER, "%s: meta.json's model.%s is missing or not a positive integer; the "
                          "checkpoint's meta.json is damaged", what, key);
    *out = (int)x->valuedouble;
    return LLM4D_OK;
}

llm4d_code llm4d_gpt_ckpt_model_from_meta(const cJSON *meta, const char *what, llm4d_model_config *m, int vocab_unit,
                                          llm4d_err *err) {
    const cJSON *mj = NULL;
    LLM4D_TRY(meta_model(meta, what, &mj, err));
    llm4d_model_config r = *m;
    for (int i = 0; i < N_GEOMETRY; i++)
        LLM4D_TRY(meta_int(mj, what, geometry[i].key, (int *)((char *)&r + geometry[i].off), err));
    if (r.hidden_size % r.num_attention_heads)
        return llm4d_fail(err, LLM4D_EUSER, "%s: meta.json's model has %d heads, which do not divide hidden_size %d; "
                          "the checkpoint's meta.json is damaged", what, r.num_attention_heads, r.hidden_size);
    const cJSON *x;
    if (cJSON_IsNumber(x = cJSON_GetObjectItemCaseSensitive(mj, "hidden_dropout_prob")))
        r.hidden_dropout_prob = (float)x->valuedouble;
    if (cJSON_IsNumber(x = cJSON_GetObjectItemCaseSensitive(mj, "attention_probs_dropout_prob")))
        r.attention_probs_dropout_prob = (float)x->valuedouble;
    if (cJSON_IsNumber(x = cJSON_GetObjectItemCaseSensitive(mj, "initializer_range")))
        r.initializer_range = (float)x->valuedouble;
    if (cJSON_IsNumber(x = cJSON_GetObjectItemCaseSensitive(mj, "eos_token_id"))) r.eos_token_id = x->valueint;
    LLM4D_TRY(description_from_meta(mj, what, &r, err));
    const long long unit = vocab_unit > 0 ? vocab_unit : 128;
    r.padded_vocab_size = (int)((r.vocab_size + unit - 1) / unit * unit);
    *m = r;
    return LLM4D_OK;
}

llm4d_code llm4d_gpt_ckpt_read_model(const char *path, llm4d_model_config *m, int vocab_unit, llm4d_err *err) {
    llm4d_ckpt *c;
    LLM4D_TRY(llm4d_ckpt_open(&c, path, err));
    llm4d_code rc = llm4d_gpt_ckpt_model_from_meta(llm4d_ckpt_meta(c), llm4d_ckpt_dir(c), m, vocab_unit, err);
    llm4d_ckpt_close(c);
    return rc;
}

llm4d_code llm4d_gpt_ckpt_check_model(const cJSON *meta, const char *what, const llm4d_model_config *m,
                                      llm4d_err *err) {
    const cJSON *mj = NULL;
    LLM4D_TRY(meta_model(meta, what, &mj, err));
    for (int i = 0; i < N_GEOMETRY; i++) {
        int have = 0;
        LLM4D_TRY(meta_int(mj, what, geometry[i].key, &have, err));
        const int want = *(const int *)((const char *)m + geometry[i].off);
        if (have != want)
            return llm4d_fail(err, LLM4D_EUSER, "checkpoint %s holds a model with %s %d, but this model has %s %d; "
                              "load a checkpoint of this model or set the model to the checkpoint's geometry", what,
                              geometry[i].key, have, geometry[i].key, want);
    }
    llm4d_model_config d = *m;
    LLM4D_TRY(description_from_meta(mj, what, &d, err));
    const int kv = llm4d_model_kv_heads(m);
    const struct { const char *what; int have, want; } desc[] = {
        {"family (Model.name)", d.llama, m->llama}, {"normalization", d.rmsnorm, m->rmsnorm},
        {"position_embedding_type", d.rope, m->rope}, {"hidden_act (SwiGLU)", d.swiglu, m->swiglu},
        {"add_bias_linear", !d.no_bias, !m->no_bias}, {"tie_word_embeddings", !d.untied, !m->untied},
        {"num_key_value_heads", d.num_kv_heads, kv}};
    for (size_t i = 0; i < sizeof desc / sizeof desc[0]; i++)
        if (desc[i].have != desc[i].want)
            return llm4d_fail(err, LLM4D_EUSER, "checkpoint %s holds a model whose %s differs from this model's "
                              "(its meta.json's model says); load a checkpoint of this model or describe the model as "
                              "the checkpoint's", what, desc[i].what);
    return LLM4D_OK;
}

/* ---- loading ---- */

/* Every tensor the range needs is there with the expected global shape (checked before anything is written). */
static llm4d_code check_present(const llm4d_ckpt *c, const char *stem, const llm4d_param_table *t, size_t lo,
                                size_t hi, llm4d_err *err) {
    for (int i = 0; i < t->n; i++) {
        const llm4d_param *p = &t->p[i];
        int64_t j0, j1, shape[2];
        if (!intersect(p, lo, hi, &j0, &j1)) continue;
        const int nd = llm4d_gpt_ckpt_shape(p, shape);
        llm4d_ckpt_info info;
        if (!llm4d_ckpt_find(c, stem, p->name, &info))
            return llm4d_fail(err, LLM4D_EUSER, "checkpoint %s has no tensor '%s' in its %s*.safetensors files; it "
                              "was written for a different model or is incomplete", llm4d_ckpt_dir(c), p->name, stem);
        if (info.ndim != nd || memcmp(info.shape, shape, (size_t)nd * sizeof(int64_t)) != 0) {
            char a[96], w[96];
            llm4d_fmt_shape(a, sizeof a, info.ndim, info.shape);
            llm4d_fmt_shape(w, sizeof w, nd, shape);
            return llm4d_fail(err, LLM4D_EUSER, "checkpoint %s: tensor '%s' has shape %s but the model expects %s; the "
                              "checkpoint was written for a different model configuration", llm4d_ckpt_dir(c),
                              p->name, a, w);
        }
    }
    return LLM4D_OK;
}

/* Read [lo, hi) of one kind into buf (element 0 = flat index lo). Elements of no tensor (alignment holes) become
 * zero, so a compact shard buffer comes back fully defined. */
static llm4d_code read_kind(const llm4d_ckpt *c, const char *stem, const llm4d_param_table *t, float *buf, size_t lo,
                            size_t hi, llm4d_err *err) {
    memset(buf, 0, (hi - lo) * sizeof(float));
    for (int i = 0; i < t->n; i++) {
        const llm4d_param *p = &t->p[i];
        int64_t j0, j1;
        if (!intersect(p, lo, hi, &j0, &j1)) continue;
        LLM4D_TRY(llm4d_gpt_ckpt_read_slice(c, stem, p, j0, j1, buf + (p->offset + (size_t)j0 - lo), err));
    }
    return LLM4D_OK;
}

llm4d_code llm4d_gpt_ckpt_read(const llm4d_ckpt *c, const llm4d_model_config *model, const llm4d_ckpt_state *st,
                               int *has_optim, llm4d_err *err) {
    const llm4d_param_table *t = st->t;
    const size_t *lo = st->lo, *hi = st->hi;
    const int n = st->n;
    for (int k = 0; k < n; k++)
        LLM4D_ASSERT(lo[k] <= hi[k] && hi[k] <= t->total, "range %d [%zu, %zu) outside the %zu parameters", k, lo[k],
                     hi[k], t->total);
    const char *dir = llm4d_ckpt_dir(c);
    const cJSON *mj = NULL;
    LLM4D_TRY(meta_model(llm4d_ckpt_meta(c), dir, &mj, err));
    const int optim = llm4d_ckpt_names(c, LLM4D_GPT_CKPT_OPTIM_M, NULL, 0) > 0;
    for (int k = 0; k < n; k++) {
        if (st->params) LLM4D_TRY(check_present(c, LLM4D_GPT_CKPT_MODEL, t, lo[k], hi[k], err));
        if (optim && (st->m || st->v)) {
            LLM4D_TRY(check_present(c, LLM4D_GPT_CKPT_OPTIM_M, t, lo[k], hi[k], err));
            LLM4D_TRY(check_present(c, LLM4D_GPT_CKPT_OPTIM_V, t, lo[k], hi[k], err));
        }
    }
    if (model) LLM4D_TRY(llm4d_gpt_ckpt_check_model(llm4d_ckpt_meta(c), dir, model, err));
    float *bufs[3] = {st->params, st->m, st->v};
    const char *stems[3] = {LLM4D_GPT_CKPT_MODEL, LLM4D_GPT_CKPT_OPTIM_M, LLM4D_GPT_CKPT_OPTIM_V};
    size_t next = 0, pa, so;
    for (int k = 0; k < n; k++) {
        range_at(st, k, &next, &pa, &so);
        for (int j = 0; j < 3; j++) {
            if (!bufs[j]) continue;
            const size_t at = j == 0 ? pa : so;
            if (j == 0 || optim) LLM4D_TRY(read_kind(c, stems[j], t, bufs[j] + at, lo[k], hi[k], err));
            else memset(bufs[j] + at, 0, (hi[k] - lo[k]) * sizeof(float));
        }
    }
    if (has_optim) *has_optim = optim;
    return LLM4D_OK;
}

llm4d_code llm4d_gpt_ckpt_load(const char *path, const llm4d_model_config *model, const llm4d_ckpt_state *st,
                               int *has_optim, cJSON **meta_out, int64_t *step_out, llm4d_err *err) {
    llm4d_ckpt *c;
    if (meta_out) *meta_out = NULL;
    LLM4D_TRY(llm4d_ckpt_open(&c, path, err));
    llm4d_code rc = llm4d_gpt_ckpt_read(c, model, st, has_optim, err);
    if (!rc && meta_out) {
        *meta_out = cJSON_Duplicate(llm4d_ckpt_meta(c), 1);
        if (!*meta_out) rc = llm4d_fail(err, LLM4D_ENOMEM, "out of memory copying meta.json");
    }
    if (!rc && step_out) *step_out = llm4d_ckpt_step(c);
    llm4d_ckpt_close(c);
    return rc;
}
