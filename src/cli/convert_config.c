/* convert_config.c — Hugging Face config.json for `llm4d convert` (convert_hf.h): GPT2LMHeadModel's and
 * LlamaForCausalLM's, written for an export and read for an import.
 *
 * GPT-2 (model_type gpt2): n_embd, n_layer, n_head, n_positions, n_inner; what llm4d's GPT cannot compute exactly is
 * refused: another activation than the tanh GELU, a LayerNorm epsilon other than 1e-5, attention scaled otherwise
 * than by 1/sqrt(head size).
 *
 * Llama (model_type llama), with LlamaConfig's defaults where a key is absent (rms_norm_eps 1e-6, rope_theta 10000,
 * tie_word_embeddings false, attention_bias and mlp_bias false, hidden_act silu, max_position_embeddings 2048,
 * eos_token_id 2): the description is llm4d's Llama family (RMSNorm, rotary positions with rotate_half, SwiGLU) with
 * the config's epsilon, theta, key/value heads, biases and tying. Refused, because llm4d would compute another
 * function: rope_scaling (Llama 3.1's "llama3" frequency scaling, linear, dynamic, yarn: llm4d's rotary positions
 * are unscaled), another hidden_act, a head_dim other than hidden_size / num_attention_heads, attention_bias
 * differing from mlp_bias (llm4d's add_bias_linear puts biases on every linear layer or none), key/value heads that
 * do not divide the heads, an odd head size. pretraining_tp only splits HF's matrix products (the same function) and
 * is accepted. */
#include <math.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "cli/convert_hf.h"
#include "ckpt/gpt_ckpt.h"

/* ---- GPT-2 ---- */

static cJSON *gpt2_config_json(const llm4d_model_config *m) {
    cJSON *j = cJSON_CreateObject();
    cJSON *arch = cJSON_AddArrayToObject(j, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("GPT2LMHeadModel"));
    cJSON_AddStringToObject(j, "model_type", "gpt2");
    cJSON_AddStringToObject(j, "activation_function", "gelu_new");
    cJSON_AddNumberToObject(j, "vocab_size", m->vocab_size);
    cJSON_AddNumberToObject(j, "n_positions", m->max_position_embeddings);
    cJSON_AddNumberToObject(j, "n_ctx", m->max_position_embeddings);
    cJSON_AddNumberToObject(j, "n_embd", m->hidden_size);
    cJSON_AddNumberToObject(j, "n_layer", m->num_layers);
    cJSON_AddNumberToObject(j, "n_head", m->num_attention_heads);
    cJSON_AddNumberToObject(j, "n_inner", m->ffn_hidden_size);
    cJSON_AddNumberToObject(j, "resid_pdrop", llm4d_json_float(m->hidden_dropout_prob));
    cJSON_AddNumberToObject(j, "embd_pdrop", llm4d_json_float(m->hidden_dropout_prob));
    cJSON_AddNumberToObject(j, "attn_pdrop", llm4d_json_float(m->attention_probs_dropout_prob));
    cJSON_AddNumberToObject(j, "layer_norm_epsilon", 1e-5);
    cJSON_AddNumberToObject(j, "initializer_range", llm4d_json_float(m->initializer_range));
    cJSON_AddNumberToObject(j, "bos_token_id", m->eos_token_id);
    cJSON_AddNumberToObject(j, "eos_token_id", m->eos_token_id);
    cJSON_AddBoolToObject(j, "scale_attn_weights", 1);
    cJSON_AddBoolToObject(j, "scale_attn_by_inverse_layer_idx", 0);
    cJSON_AddBoolToObject(j, "reorder_and_upcast_attn", 0);
    cJSON_AddBoolToObject(j, "tie_word_embeddings", 1);
    cJSON_AddBoolToObject(j, "use_cache", 1);
    cJSON_AddStringToObject(j, "summary_type", "cls_index");
    cJSON_AddBoolToObject(j, "summary_use_proj", 1);
    cJSON_AddNullToObject(j, "summary_activation");
    cJSON_AddBoolToObject(j, "summary_proj_to_labels", 1);
    cJSON_AddNumberToObject(j, "summary_first_dropout", 0.1);
    cJSON_AddStringToObject(j, "torch_dtype", "float32");
    cJSON_AddStringToObject(j, "llm4d_note", "exported by llm4d convert --to hf");
    return j;
}

static llm4d_code cfg_int(const cJSON *j, const char *path, const char *key, int required, int *out, llm4d_err *err) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!x || cJSON_IsNull(x)) {
        if (required) return llm4d_fail(err, LLM4D_EUSER, "%s has no \"%s\"; is it the config.json of a Hugging Face GPT-2 or "
                                             "Llama model?", path, key);
        return LLM4D_OK;
    }
    /* the range first: converting a double outside int's range is undefined */
    if (!cJSON_IsNumber(x) || !(x->valuedouble >= 1 && x->valuedouble <= INT_MAX) ||
        x->valuedouble != (double)(int)x->valuedouble)
        return llm4d_fail(err, LLM4D_EUSER, "%s: \"%s\" must be a positive integer", path, key);
    *out = (int)x->valuedouble;
    return LLM4D_OK;
}

static llm4d_code gpt2_config(const cJSON *j, const char *path, llm4d_model_config *m, int *tied, llm4d_err *err) {
    const cJSON *x;
    LLM4D_TRY(cfg_int(j, path, "vocab_size", 1, &m->vocab_size, err));
    LLM4D_TRY(cfg_int(j, path, "n_embd", 1, &m->hidden_size, err));
    LLM4D_TRY(cfg_int(j, path, "n_layer", 1, &m->num_layers, err));
    LLM4D_TRY(cfg_int(j, path, "n_head", 1, &m->num_attention_heads, err));
    LLM4D_TRY(cfg_int(j, path, "n_positions", 1, &m->max_position_embeddings, err));
    m->ffn_hidden_size = 4 * m->hidden_size;
    LLM4D_TRY(cfg_int(j, path, "n_inner", 0, &m->ffn_hidden_size, err));
    if (m->hidden_size % m->num_attention_heads)
        return llm4d_fail(err, LLM4D_EUSER, "%s: n_head %d does not divide n_embd %d", path, m->num_attention_heads,
                          m->hidden_size);
    x = cJSON_GetObjectItemCaseSensitive(j, "activation_function");
    if (x && !(cJSON_IsString(x) && (!strcmp(x->valuestring, "gelu_new") ||
                                     !strcmp(x->valuestring, "gelu_pytorch_tanh"))))
        return llm4d_fail(err, LLM4D_EUSER, "%s: activation_function is %s; llm4d's GPT uses the tanh GELU "
                          "(gelu_new), so this model cannot be imported exactly", path,
                          cJSON_IsString(x) ? x->valuestring : "not a string");
    x = cJSON_GetObjectItemCaseSensitive(j, "layer_norm_epsilon");
    if (x && !(cJSON_IsNumber(x) && fabs(x->valuedouble - 1e-5) <= 1e-12))
        return llm4d_fail(err, LLM4D_EUSER, "%s: layer_norm_epsilon is %g; llm4d's LayerNorm uses 1e-5, so this "
                          "model cannot be imported exactly", path, cJSON_IsNumber(x) ? x->valuedouble : NAN);
    x = cJSON_GetObjectItemCaseSensitive(j, "scale_attn_weights");
    if (cJSON_IsFalse(x))
        return llm4d_fail(err, LLM4D_EUSER, "%s: scale_attn_weights is false; llm4d scales attention by "
                          "1/sqrt(head size), so this model cannot be imported exactly", path);
    x = cJSON_GetObjectItemCaseSensitive(j, "scale_attn_by_inverse_layer_idx");
    if (cJSON_IsTrue(x))
        return llm4d_fail(err, LLM4D_EUSER, "%s: scale_attn_by_inverse_layer_idx is true; llm4d does not scale "
                          "attention by layer, so this model cannot be imported exactly", path);
    x = cJSON_GetObjectItemCaseSensitive(j, "tie_word_embeddings");
    *tied = !cJSON_IsFalse(x);
    m->hidden_dropout_prob = 0.1f;
    m->attention_probs_dropout_prob = 0.1f;
    m->initializer_range = 0.02f;
    m->eos_token_id = 50256;
    if (cJSON_IsNumber(x = cJSON_GetObjectItemCaseSensitive(j, "resid_pdrop")))
        m->hidden_dropout_prob = (float)x->valuedouble;
    if (cJSON_IsNumber(x = cJSON_GetObjectItemCaseSensitive(j, "attn_pdrop")))
        m->attention_probs_dropout_prob = (float)x->valuedouble;
    if (cJSON_IsNumber(x = cJSON_GetObjectItemCaseSensitive(j, "initializer_range")))
        m->initializer_range = (float)x->valuedouble;
    if (cJSON_IsNumber(x = cJSON_GetObjectItemCaseSensitive(j, "eos_token_id"))) m->eos_token_id = x->valueint;
    m->vocab_size_divisible_unit = 128;
    m->padded_vocab_size = (m->vocab_size + 127) / 128 * 128;
    snprintf(m->model_type, sizeof m->model_type, "GPT");
    return LLM4D_OK;
}


/* ---- Llama ---- */

static llm4d_code cfg_bool(const cJSON *j, const char *path, const char *key, int dflt, int *out, llm4d_err *err) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!x || cJSON_IsNull(x)) return *out = dflt, LLM4D_OK;
    if (!cJSON_IsBool(x)) return llm4d_fail(err, LLM4D_EUSER, "%s: \"%s\" must be true or false", path, key);
    *out = cJSON_IsTrue(x);
    return LLM4D_OK;
}

static llm4d_code cfg_pos(const cJSON *j, const char *path, const char *key, double dflt, double *out,
                          llm4d_err *err) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!x || cJSON_IsNull(x)) return *out = dflt, LLM4D_OK;
    if (!cJSON_IsNumber(x) || !(x->valuedouble > 0) || !isfinite(x->valuedouble))
        return llm4d_fail(err, LLM4D_EUSER, "%s: \"%s\" must be a number > 0", path, key);
    *out = x->valuedouble;
    return LLM4D_OK;
}

/* rope_scaling: absent, null, or the "default" type (no scaling) is what llm4d computes */
static llm4d_code check_rope_scaling(const cJSON *j, const char *path, llm4d_err *err) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, "rope_scaling");
    if (!x || cJSON_IsNull(x)) return LLM4D_OK;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(x, "rope_type");
    if (!cJSON_IsString(t)) t = cJSON_GetObjectItemCaseSensitive(x, "type");
    const char *type = cJSON_IsString(t) ? t->valuestring : "?";
    if (cJSON_IsObject(x) && !strcmp(type, "default") && cJSON_GetArraySize(x) == 1) return LLM4D_OK;
    return llm4d_fail(err, LLM4D_EUSER, "%s: rope_scaling is set (type '%.40s'%s); llm4d's rotary positions are "
                      "unscaled (rope_theta only: Llama 3.1's \"llama3\" frequency scaling, linear, dynamic and yarn "
                      "are not implemented), so this model cannot be imported exactly", path, type,
                      !strcmp(type, "llama3") ? ", Llama 3.1's" : "");
}

static llm4d_code llama_config(const cJSON *j, const char *path, llm4d_model_config *m, int *tied, llm4d_err *err) {
    LLM4D_TRY(cfg_int(j, path, "vocab_size", 1, &m->vocab_size, err));
    LLM4D_TRY(cfg_int(j, path, "hidden_size", 1, &m->hidden_size, err));
    LLM4D_TRY(cfg_int(j, path, "intermediate_size", 1, &m->ffn_hidden_size, err));
    LLM4D_TRY(cfg_int(j, path, "num_hidden_layers", 1, &m->num_layers, err));
    LLM4D_TRY(cfg_int(j, path, "num_attention_heads", 1, &m->num_attention_heads, err));
    const int C = m->hidden_size, H = m->num_attention_heads;
    m->num_kv_heads = H;
    LLM4D_TRY(cfg_int(j, path, "num_key_value_heads", 0, &m->num_kv_heads, err));
    m->max_position_embeddings = 2048;
    LLM4D_TRY(cfg_int(j, path, "max_position_embeddings", 0, &m->max_position_embeddings, err));
    if (C % H)
        return llm4d_fail(err, LLM4D_EUSER, "%s: num_attention_heads %d does not divide hidden_size %d", path, H, C);
    int head_dim = C / H;
    LLM4D_TRY(cfg_int(j, path, "head_dim", 0, &head_dim, err));
    if (head_dim != C / H)
        return llm4d_fail(err, LLM4D_EUSER, "%s: head_dim is %d, not hidden_size / num_attention_heads = %d; llm4d's "
                          "heads are hidden_size / num_attention_heads wide, so this model cannot be imported", path,
                          head_dim, C / H);
    if (head_dim % 2)
        return llm4d_fail(err, LLM4D_EUSER, "%s: the head size %d is odd; rotary positions turn pairs of values",
                          path, head_dim);
    if (H % m->num_kv_heads)
        return llm4d_fail(err, LLM4D_EUSER, "%s: num_key_value_heads %d does not divide num_attention_heads %d", path,
                          m->num_kv_heads, H);
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, "hidden_act");
    if (x && !cJSON_IsNull(x) &&
        !(cJSON_IsString(x) && (!strcmp(x->valuestring, "silu") || !strcmp(x->valuestring, "swish"))))
        return llm4d_fail(err, LLM4D_EUSER, "%s: hidden_act is %s; llm4d's Llama MLP is SwiGLU (silu), so this "
                          "model cannot be imported exactly", path, cJSON_IsString(x) ? x->valuestring : "not a string");
    LLM4D_TRY(check_rope_scaling(j, path, err));
    int abias, mbias, tie;
    LLM4D_TRY(cfg_bool(j, path, "attention_bias", 0, &abias, err));
    LLM4D_TRY(cfg_bool(j, path, "mlp_bias", 0, &mbias, err));
    if (abias != mbias)
        return llm4d_fail(err, LLM4D_EUSER, "%s: attention_bias is %s but mlp_bias is %s; llm4d's add_bias_linear puts "
                          "biases on every linear layer or on none, so this model cannot be imported", path,
                          abias ? "true" : "false", mbias ? "true" : "false");
    LLM4D_TRY(cfg_bool(j, path, "tie_word_embeddings", 0, &tie, err));
    double eps, theta, drop = 0, init = 0.02;
    LLM4D_TRY(cfg_pos(j, path, "rms_norm_eps", 1e-6, &eps, err));
    LLM4D_TRY(cfg_pos(j, path, "rope_theta", 10000.0, &theta, err));
    if ((x = cJSON_GetObjectItemCaseSensitive(j, "attention_dropout")) && cJSON_IsNumber(x)) drop = x->valuedouble;
    if (!(drop >= 0 && drop < 1))
        return llm4d_fail(err, LLM4D_EUSER, "%s: attention_dropout %g is not in [0, 1)", path, drop);
    LLM4D_TRY(cfg_pos(j, path, "initializer_range", 0.02, &init, err));
    /* eos_token_id: one id or a list (Llama 3.1's instruct models: the first is the end of text) */
    m->eos_token_id = 2;
    x = cJSON_GetObjectItemCaseSensitive(j, "eos_token_id");
    if (cJSON_IsArray(x)) x = cJSON_GetArrayItem(x, 0);
    if (cJSON_IsNumber(x) && x->valuedouble >= 0 && x->valuedouble <= INT_MAX) m->eos_token_id = (int)x->valuedouble;
    snprintf(m->model_type, sizeof m->model_type, "LLaMA");
    m->llama = m->rmsnorm = m->rope = m->swiglu = 1;
    m->no_bias = !abias;
    m->untied = !tie;
    *tied = tie;
    m->norm_epsilon = (float)eps;
    m->rope_theta = (float)theta;
    m->hidden_dropout_prob = 0.0f; /* LlamaForCausalLM has no dropout but the attention's */
    m->attention_probs_dropout_prob = (float)drop;
    m->initializer_range = (float)init;
    m->vocab_size_divisible_unit = 128;
    m->padded_vocab_size = (m->vocab_size + 127) / 128 * 128;
    return LLM4D_OK;
}

static cJSON *llama_config_json(const llm4d_model_config *m, int bos) {
    cJSON *j = cJSON_CreateObject();
    if (!j) return NULL;
    cJSON *arch = cJSON_AddArrayToObject(j, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("LlamaForCausalLM"));
    cJSON_AddStringToObject(j, "model_type", "llama");
    cJSON_AddNumberToObject(j, "vocab_size", m->vocab_size);
    cJSON_AddNumberToObject(j, "hidden_size", m->hidden_size);
    cJSON_AddNumberToObject(j, "intermediate_size", m->ffn_hidden_size);
    cJSON_AddNumberToObject(j, "num_hidden_layers", m->num_layers);
    cJSON_AddNumberToObject(j, "num_attention_heads", m->num_attention_heads);
    cJSON_AddNumberToObject(j, "num_key_value_heads", llm4d_model_kv_heads(m));
    cJSON_AddNumberToObject(j, "head_dim", m->hidden_size / m->num_attention_heads);
    cJSON_AddNumberToObject(j, "max_position_embeddings", m->max_position_embeddings);
    cJSON_AddNumberToObject(j, "rms_norm_eps", llm4d_json_float(m->norm_epsilon));
    cJSON_AddNumberToObject(j, "rope_theta", llm4d_json_float(m->rope_theta));
    cJSON_AddNullToObject(j, "rope_scaling");
    cJSON_AddStringToObject(j, "hidden_act", "silu");
    cJSON_AddBoolToObject(j, "attention_bias", !m->no_bias);
    cJSON_AddBoolToObject(j, "mlp_bias", !m->no_bias);
    cJSON_AddNumberToObject(j, "attention_dropout", llm4d_json_float(m->attention_probs_dropout_prob));
    cJSON_AddBoolToObject(j, "tie_word_embeddings", !m->untied);
    cJSON_AddNumberToObject(j, "initializer_range", llm4d_json_float(m->initializer_range));
    if (bos >= 0) cJSON_AddNumberToObject(j, "bos_token_id", bos);
    if (m->eos_token_id >= 0) cJSON_AddNumberToObject(j, "eos_token_id", m->eos_token_id);
    cJSON_AddNumberToObject(j, "pretraining_tp", 1);
    cJSON_AddBoolToObject(j, "use_cache", 1);
    cJSON_AddStringToObject(j, "torch_dtype", "float32");
    cJSON_AddStringToObject(j, "llm4d_note", "exported by llm4d convert --to hf");
    return j;
}

/* ---- either ---- */

llm4d_code llm4d_hf_config_read(const cJSON *j, const char *path, llm4d_model_config *m, int *tied, llm4d_err *err) {
    memset(m, 0, sizeof *m);
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(j, "model_type");
    if (cJSON_IsString(x) && !strcmp(x->valuestring, "llama")) return llama_config(j, path, m, tied, err);
    if (cJSON_IsString(x) && strcmp(x->valuestring, "gpt2"))
        return llm4d_fail(err, LLM4D_EUSER, "%s: model_type is '%s'; llm4d imports GPT-2 (model_type gpt2) and Llama "
                          "(model_type llama) models", path, x->valuestring);
    return gpt2_config(j, path, m, tied, err);
}

int llm4d_hf_unexportable(const llm4d_model_config *m, char *why, size_t n) {
    const int kv = llm4d_model_kv_heads(m);
    if (m->llama) {
        const char *miss = !m->rmsnorm ? "LayerNorm" : !m->rope ? "learned positions" : !m->swiglu ? "a GELU MLP" : NULL;
        if (!miss) return 0;
        snprintf(why, n, "this checkpoint's Llama-family model has %s, which transformers' LlamaForCausalLM does not "
                 "compute (it has RMSNorm, rotary positions and a SwiGLU MLP)", miss);
        return 1;
    }
    const char *miss = m->rmsnorm ? "RMSNorm" : m->rope ? "rotary positions" : m->swiglu ? "a SwiGLU MLP"
                     : m->no_bias ? "no biases" : m->untied ? "an untied LM head"
                     : kv != m->num_attention_heads ? "grouped-query attention" : NULL;
    if (!miss) return 0;
    snprintf(why, n, "this checkpoint's GPT-2-family model has %s, which transformers' GPT2LMHeadModel does not "
             "compute; only GPT-2 and Llama-shaped models are exported", miss);
    return 1;
}

cJSON *llm4d_hf_config_json(const llm4d_model_config *m, int bos_token_id) {
    return m->llama ? llama_config_json(m, bos_token_id) : gpt2_config_json(m);
}
