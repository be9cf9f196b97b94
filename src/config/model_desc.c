/* model_desc.c — what decoder a run trains: the presets, the families, and the one reading of the model's
 * description that every part of llm4d uses (see config.h, llm4d_model_describe).
 *
 * Two families. GPT-2/GPT-3 (the seeds' models): LayerNorm with bias, learned absolute positions, GELU MLP of 4h,
 * biases on every linear layer, the LM head tied to the token embedding, multi-head attention, Hugging Face GPT-2's
 * tensor names. Llama (Llama 2 and 3, and what Megatron-LM trains with `--normalization RMSNorm
 * --position-embedding-type rope --swiglu --group-query-attention --disable-bias-linear
 * --untie-embeddings-and-output-weights`): RMSNorm, rotary positions on Q and K, SwiGLU MLP, no biases, an untied
 * LM head, grouped-query attention, Hugging Face Llama's tensor names. The family sets the defaults; each part of
 * the description can be set on its own in either family, in the spellings of PaddleNLP / Hugging Face
 * (hidden_act, rms_norm_eps, rope_theta, num_key_value_heads, intermediate_size, tie_word_embeddings) and
 * Megatron-LM (normalization, norm_epsilon, position_embedding_type, rotary_base, swiglu, num_query_groups,
 * add_bias_linear, untie_embeddings_and_output_weights), which schema.c lists.
 *
 * The presets are shapes only (llm4d downloads no weights): the Llama ones are the published configurations of
 * meta-llama's Hugging Face repositories (config.json: hidden_size, num_hidden_layers, num_attention_heads,
 * num_key_value_heads, intermediate_size, vocab_size, max_position_embeddings, rope_theta, rms_norm_eps), for the
 * planner and the memory plan; llama-tiny is for tests. */
#include "config/config.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "config/schema.h"

typedef struct {
    const char *name;
    int llama;
    int hidden, layers, heads, kv_heads, ffn, vocab, max_pos;
    float theta, eps;
    int eos;
    const char *what;
} model_preset;

static const model_preset presets[] = {
    {"gpt2-tiny", 0, 64, 2, 4, 4, 256, 50257, 256, 0, 1e-5f, 50256, "tests and quick start"},
    {"gpt2-en", 0, 768, 12, 12, 12, 3072, 50257, 1024, 0, 1e-5f, 50256, "GPT-2 124M"},
    {"gpt2-medium-en", 0, 1024, 24, 16, 16, 4096, 50257, 1024, 0, 1e-5f, 50256, "GPT-2 345M"},
    {"gpt3-125m", 0, 768, 12, 12, 12, 3072, 50257, 2048, 0, 1e-5f, 50256, "GPT-3 paper sizes"},
    {"gpt3-350m", 0, 1024, 24, 16, 16, 4096, 50257, 2048, 0, 1e-5f, 50256, ""},
    {"gpt3-760m", 0, 1536, 24, 16, 16, 6144, 50257, 2048, 0, 1e-5f, 50256, ""},
    {"gpt3-1.3b", 0, 2048, 24, 16, 16, 8192, 50257, 2048, 0, 1e-5f, 50256, ""},
    {"gpt3-2.7b", 0, 2560, 32, 32, 32, 10240, 50257, 2048, 0, 1e-5f, 50256, ""},
    {"gpt3-6.7b", 0, 4096, 32, 32, 32, 16384, 50257, 2048, 0, 1e-5f, 50256, ""},
    {"gpt3-13b", 0, 5120, 40, 40, 40, 20480, 50257, 2048, 0, 1e-5f, 50256, ""},
    {"gpt3-175b", 0, 12288, 96, 96, 96, 49152, 50257, 2048, 0, 1e-5f, 50256, ""},
    /* the GPT-2 vocabulary, so the quick start's data trains it; grouped-query (4 heads, 2 key/value heads) */
    {"llama-tiny", 1, 64, 2, 4, 2, 192, 50257, 256, 10000.0f, 1e-5f, 50256, "tests (Llama-shaped, GPT-2 vocabulary)"},
    {"llama2-7b", 1, 4096, 32, 32, 32, 11008, 32000, 4096, 10000.0f, 1e-5f, 2, "Llama 2 (meta-llama/Llama-2-*-hf)"},
    {"llama2-13b", 1, 5120, 40, 40, 40, 13824, 32000, 4096, 10000.0f, 1e-5f, 2, ""},
    {"llama2-70b", 1, 8192, 80, 64, 8, 28672, 32000, 4096, 10000.0f, 1e-5f, 2, ""},
    {"llama3-8b", 1, 4096, 32, 32, 8, 14336, 128256, 8192, 500000.0f, 1e-5f, 128001, "Llama 3 (Meta-Llama-3-*)"},
    {"llama3-70b", 1, 8192, 80, 64, 8, 28672, 128256, 8192, 500000.0f, 1e-5f, 128001, ""},
    {"llama3-405b", 1, 16384, 126, 128, 8, 53248, 128256, 8192, 500000.0f, 1e-5f, 128001, "Llama 3.1 405B"},
};
static const int n_presets = (int)(sizeof presets / sizeof presets[0]);

void llm4d_model_preset_names(char *buf, size_t n) {
    size_t pos = 0;
    buf[0] = 0;
    for (int i = 0; i < n_presets && pos < n; i++)
        pos += (size_t)snprintf(buf + pos, n - pos, "%s%s", i ? ", " : "", presets[i].name);
}

llm4d_code llm4d_model_preset(llm4d_model_config *m, const char *name, llm4d_err *err) {
    for (int i = 0; i < n_presets; i++) {
        const model_preset *p = &presets[i];
        if (strcmp(p->name, name)) continue;
        snprintf(m->model_type, sizeof m->model_type, "%s", p->llama ? "LLaMA" : "GPT");
        m->vocab_size = p->vocab;
        m->hidden_size = p->hidden;
        m->num_layers = p->layers;
        m->num_attention_heads = p->heads;
        m->num_kv_heads = p->kv_heads;
        m->ffn_hidden_size = p->ffn;
        m->max_position_embeddings = p->max_pos;
        /* Llama is pretrained without dropout; GPT-2 with 0.1 */
        m->hidden_dropout_prob = p->llama ? 0.0f : 0.1f;
        m->attention_probs_dropout_prob = p->llama ? 0.0f : 0.1f;
        m->initializer_range = 0.02f;
        m->eos_token_id = p->eos;
        m->rope_theta = p->llama ? p->theta : 10000.0f;
        m->norm_epsilon = p->eps;
        return LLM4D_OK;
    }
    char names[1024];
    llm4d_model_preset_names(names, sizeof names);
    return llm4d_fail(err, LLM4D_EUSER, "unknown model preset '%s'; the presets are %s (or give a checkpoint "
                      "directory)", name, names);
}

static int is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

llm4d_code llm4d_model_apply_preset(llm4d_config *cfg, llm4d_err *err) {
    llm4d_model_config *m = &cfg->model;
    static const char *const geometry[] = {"Model.vocab_size", "Model.hidden_size", "Model.num_layers",
                                           "Model.num_attention_heads", "Model.ffn_hidden_size",
                                           "Model.max_position_embeddings"};
    if (!m->name_or_path[0]) {
        for (size_t i = 0; i < sizeof geometry / sizeof geometry[0]; i++)
            if (llm4d_config_is_explicit(cfg, geometry[i])) return LLM4D_OK; /* the YAML describes the model */
        snprintf(m->name_or_path, sizeof m->name_or_path, "gpt2-en");
    }
    llm4d_model_config p = *m;
    if (llm4d_model_preset(&p, m->name_or_path, err) != LLM4D_OK) {
        if (is_dir(m->name_or_path)) return LLM4D_OK; /* a checkpoint: its meta.json gives the geometry later */
        char names[1024];
        llm4d_model_preset_names(names, sizeof names);
        return llm4d_fail(err, LLM4D_EUSER, "model_name_or_path '%s' is neither a model preset nor an existing "
                          "checkpoint directory; the presets are %s", m->name_or_path, names);
    }
#define FROM_PRESET(field, key)                                                                                  \
    if (!llm4d_config_is_explicit(cfg, key)) m->field = p.field
    FROM_PRESET(vocab_size, "Model.vocab_size");
    FROM_PRESET(hidden_size, "Model.hidden_size");
    FROM_PRESET(num_layers, "Model.num_layers");
    FROM_PRESET(num_attention_heads, "Model.num_attention_heads");
    FROM_PRESET(max_position_embeddings, "Model.max_position_embeddings");
    FROM_PRESET(hidden_dropout_prob, "Model.hidden_dropout_prob");
    FROM_PRESET(attention_probs_dropout_prob, "Model.attention_probs_dropout_prob");
    FROM_PRESET(initializer_range, "Model.initializer_range");
    FROM_PRESET(num_kv_heads, "Model.num_key_value_heads");
    FROM_PRESET(rope_theta, "Model.rope_theta");
    FROM_PRESET(norm_epsilon, "Model.norm_epsilon");
#undef FROM_PRESET
    if (!llm4d_config_is_explicit(cfg, "Model.name")) snprintf(m->model_type, sizeof m->model_type, "%s", p.model_type);
    const int llama = !strcmp(p.model_type, "LLaMA");
    /* GPT's MLP is 4h of the final width, so an explicit hidden_size keeps the 4x ratio; Llama's is the preset's */
    if (!llm4d_config_is_explicit(cfg, "Model.ffn_hidden_size"))
        m->ffn_hidden_size = llama && !llm4d_config_is_explicit(cfg, "Model.hidden_size") ? p.ffn_hidden_size : 0;
    /* a grouped-query preset with explicit heads: multi-head unless key/value heads are given too */
    if (llm4d_config_is_explicit(cfg, "Model.num_attention_heads") &&
        !llm4d_config_is_explicit(cfg, "Model.num_key_value_heads"))
        m->num_kv_heads = 0;
    m->eos_token_id = p.eos_token_id;
    return LLM4D_OK;
}

const char *llm4d_model_family(const llm4d_model_config *m) { return m->llama ? "Llama" : "GPT-2"; }

/* A string key's value against its accepted spellings: the index of the match (case-insensitive), -1 if none;
 * "" gives `dflt`. */
static int one_of(const char *v, const char *const *names, int n, int dflt) {
    if (!v[0]) return dflt;
    for (int i = 0; i < n; i++)
        if (!strcasecmp(v, names[i])) return i;
    return -1;
}

llm4d_code llm4d_model_describe(llm4d_config *cfg, llm4d_err *err) {
    llm4d_model_config *m = &cfg->model;
    const char *t = m->model_type;
    static const char *const gpt[] = {"GPT", "gpt", "gpt2", "GPTForPretraining"};
    static const char *const llama[] = {"LLaMA", "llama", "Llama", "LlamaForCausalLM"};
    int fam = -1;
    for (int i = 0; i < 4 && fam < 0; i++)
        if (!strcmp(t, gpt[i])) fam = 0;
    for (int i = 0; i < 4 && fam < 0; i++)
        if (!strcmp(t, llama[i])) fam = 1;
    if (fam < 0)
        return llm4d_fail(err, LLM4D_EUSER, "Model.name / --model_type '%s' is not supported; llm4d trains GPT (gpt, "
                          "gpt2) and LLaMA (llama, LlamaForCausalLM) decoders", t);
    m->llama = fam;
    static const char *const norms[] = {"LayerNorm", "RMSNorm"};
    static const char *const pos[] = {"learned_absolute", "rope"};
    static const char *const acts[] = {"gelu", "swiglu", "silu"};
    const int nrm = one_of(m->normalization, norms, 2, fam), pe = one_of(m->position_embedding_type, pos, 2, fam);
    const int act = one_of(m->hidden_act, acts, 3, fam);
    if (nrm < 0)
        return llm4d_fail(err, LLM4D_EUSER, "Model.normalization '%s' is not supported; use LayerNorm or RMSNorm",
                          m->normalization);
    if (pe < 0)
        return llm4d_fail(err, LLM4D_EUSER, "Model.position_embedding_type '%s' is not supported; use "
                          "learned_absolute or rope", m->position_embedding_type);
    if (act < 0)
        return llm4d_fail(err, LLM4D_EUSER, "Model.hidden_act '%s' is not supported; use gelu, or swiglu (silu: "
                          "Llama's gated MLP)", m->hidden_act);
    if (m->swiglu_flag && act == 0 && m->hidden_act[0])
        return llm4d_fail(err, LLM4D_EUSER, "Model.swiglu is set but Model.hidden_act is gelu; drop one of them");
    m->rmsnorm = nrm == 1;
    m->rope = pe == 1;
    m->swiglu = act > 0 || m->swiglu_flag;
    /* a checkpoint's description (model_name_or_path DIR) gives biases and tying as they are */
    const int given = m->from_checkpoint;
    m->no_bias = given || llm4d_config_is_explicit(cfg, "Model.add_bias_linear") ? !m->add_bias_linear : fam;
    const int tie_set = given || llm4d_config_is_explicit(cfg, "Model.tie_word_embeddings");
    const int untie_set = !given && llm4d_config_is_explicit(cfg, "Model.untie_embeddings_and_output_weights");
    if (tie_set && untie_set && m->tie_word_embeddings == m->untie_embeddings)
        return llm4d_fail(err, LLM4D_EUSER, "Model.tie_word_embeddings and untie_embeddings_and_output_weights "
                          "disagree; set one of them");
    m->untied = tie_set ? !m->tie_word_embeddings : untie_set ? m->untie_embeddings : fam;
    if (!(m->norm_epsilon > 0 && isfinite(m->norm_epsilon)))
        return llm4d_fail(err, LLM4D_EUSER, "Model.norm_epsilon (rms_norm_eps) must be > 0, got %g", m->norm_epsilon);
    if (!m->rmsnorm && m->norm_epsilon != 1e-5f)
        return llm4d_fail(err, LLM4D_EUSER, "Model.norm_epsilon %g: llm4d's LayerNorm uses 1e-5 (GPT-2's); set "
                          "normalization RMSNorm for another epsilon, or drop the key", m->norm_epsilon);
    if (m->rope && !(m->rope_theta > 0 && isfinite(m->rope_theta)))
        return llm4d_fail(err, LLM4D_EUSER, "Model.rope_theta (rotary_base) must be > 0, got %g", m->rope_theta);
    const int H = m->num_attention_heads, mp = cfg->dist.mp_degree;
    if (m->num_kv_heads < 0)
        return llm4d_fail(err, LLM4D_EUSER, "Model.num_key_value_heads must be >= 1 (or 0/empty: one per attention "
                          "head), got %d", m->num_kv_heads);
    if (m->num_kv_heads == 0) m->num_kv_heads = H;
    if (H > 0 && H % m->num_kv_heads)
        return llm4d_fail(err, LLM4D_EUSER, "Model.num_key_value_heads %d does not divide num_attention_heads %d; "
                          "each key/value head serves a whole group of query heads", m->num_kv_heads, H);
    /* whole key/value heads per rank, or (fewer heads than ranks) each head on a whole number of ranks */
    const int kv = m->num_kv_heads;
    if (mp > 1 && H % mp == 0 && (kv >= mp ? kv % mp : mp % kv))
        return llm4d_fail(err, LLM4D_EUSER, "Model.num_key_value_heads %d and mp_degree %d: tensor parallelism gives "
                          "each rank whole key/value heads (or, with fewer heads than ranks, one head shared by "
                          "mp_degree / heads ranks), so one of them must divide the other", kv, mp);
    if (m->rope && m->hidden_size % H == 0 && (m->hidden_size / H) % 2)
        return llm4d_fail(err, LLM4D_EUSER, "rotary positions turn pairs of a head's values, but the head size "
                          "hidden_size / num_attention_heads = %d is odd; choose heads that make it even",
                          m->hidden_size / H);
    return LLM4D_OK;
}
