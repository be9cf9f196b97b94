/* config.c — defaults, command line, YAML application, presets, derivation and validation (see config.h).
 *
 * Order of sources, later winning: built-in defaults (schema.c's table), the YAML file given with -c (its
 * `_base_` chain merged first), the flags, then the -o overrides, each kind in command-line order. So `-o` beats a
 * flag for the same key whatever their order, as in PaddleFleetX where overrides are applied last. The model
 * preset is applied in llm4d_config_finalize to every Model field that no source set explicitly.
 *
 * The presets and the model's description are in model_desc.c.
 *
 * Validation happens once, in finalize, and every message names the key, the value and the fix: a config error
 * found after hours of queueing for a cluster is the complaint this layer exists to prevent. */
#include "config/config.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "config/pyval.h"
#include "core/devname.h"
#include "core/trace.h"
#include "config/schema.h"
#include "config/yamltree.h"

/* ---- defaults ---- */

void llm4d_config_defaults(llm4d_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    int n;
    const llm4d_key *k = llm4d_keys(&n);
    for (int i = 0; i < n; i++) {
        if (k[i].type == LLM4D_KT_NOEFFECT || k[i].type == LLM4D_KT_ALIAS) continue;
        llm4d_pv v;
        llm4d_err err = {0};
        LLM4D_ASSERT(llm4d_pv_from_text(k[i].def, &v) == 0, "out of memory");
        llm4d_code rc = llm4d_key_set(cfg, &k[i], &v, k[i].def, k[i].key, "", 0, &err);
        llm4d_pv_free(&v);
        LLM4D_ASSERT(rc == LLM4D_OK, "default of %s: %s", k[i].key, err.msg);
    }
    cfg->model.eos_token_id = 50256;
}

/* ---- YAML ---- */

static int node_to_pv(const llm4d_ynode *n, llm4d_pv *out) {
    memset(out, 0, sizeof *out);
    if (n->kind == LLM4D_YN_SCALAR) return llm4d_pv_from_yaml_scalar(n->text, n->plain, out);
    if (n->kind == LLM4D_YN_MAP) {
        out->kind = LLM4D_PV_MAP;
        out->i = n->n;
        return 0;
    }
    out->kind = LLM4D_PV_LIST;
    if (n->n == 0) return 0;
    out->items = calloc((size_t)n->n, sizeof *out->items);
    if (!out->items) return -1;
    for (int i = 0; i < n->n; i++) {
        out->n = i + 1;
        if (node_to_pv(n->kids[i], &out->items[i])) return -1;
    }
    return 0;
}

static llm4d_code unknown_key(const char *path, const char *where, llm4d_err *err) {
    char near[LLM4D_NAME_MAX * 2];
    if (llm4d_key_suggest(path, near, sizeof near))
        return llm4d_fail(err, LLM4D_EUSER, "unknown key '%s'%s; did you mean '%s'?", path, where, near);
    return llm4d_fail(err, LLM4D_EUSER, "unknown key '%s'%s; `llm4d train --help` lists the recognised keys", path,
                      where);
}

static llm4d_code apply_node(llm4d_config *cfg, const char *path, const llm4d_ynode *node, llm4d_err *err) {
    char where[LLM4D_PATH_MAX + 64];
    snprintf(where, sizeof where, " in %s (line %d)", node->file, node->line);
    const llm4d_key *k = llm4d_key_find(path);
    int section = llm4d_key_is_section(path);
    if (node->kind == LLM4D_YN_MAP && section) {
        for (int i = 0; i < node->n; i++) {
            if (!strcmp(node->keys[i], "_inherited_")) continue;
            char sub[LLM4D_NAME_MAX * 4];
            if ((size_t)snprintf(sub, sizeof sub, "%s.%s", path, node->keys[i]) >= sizeof sub)
                return unknown_key(node->keys[i], where, err);
            LLM4D_TRY(apply_node(cfg, sub, node->kids[i], err));
        }
        return LLM4D_OK;
    }
    if (!k) {
        if (section && node->kind == LLM4D_YN_SCALAR && node->plain && !node->text[0]) return LLM4D_OK; /* "Model:" */
        if (section)
            return llm4d_fail(err, LLM4D_EUSER, "'%s'%s must be a mapping of keys (a section), not a value", path,
                              where);
        return unknown_key(path, where, err);
    }
    llm4d_pv v;
    if (node_to_pv(node, &v)) {
        llm4d_pv_free(&v);
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory reading %s", node->file);
    }
    llm4d_code rc = llm4d_key_set(cfg, k, &v, node->kind == LLM4D_YN_SCALAR ? node->text : NULL, path, where, 1,
                                  err);
    llm4d_pv_free(&v);
    return rc;
}

static llm4d_code apply_yaml(llm4d_config *cfg, const char *path, llm4d_err *err) {
    llm4d_ytree t;
    LLM4D_TRY(llm4d_ytree_load(&t, path, err));
    llm4d_code rc = LLM4D_OK;
    for (int i = 0; i < t.root->n && rc == LLM4D_OK; i++) {
        if (!strcmp(t.root->keys[i], "_inherited_")) continue;
        rc = apply_node(cfg, t.root->keys[i], t.root->kids[i], err);
    }
    llm4d_ytree_free(&t);
    return rc;
}

/* ---- command line ---- */

static llm4d_code set_from_text(llm4d_config *cfg, const llm4d_key *k, const char *text, const char *subject,
                                const char *where, llm4d_err *err) {
    llm4d_pv v;
    if (llm4d_pv_from_text(text, &v)) return llm4d_fail(err, LLM4D_ENOMEM, "out of memory parsing %s", subject);
    llm4d_code rc = llm4d_key_set(cfg, k, &v, text, subject, where, 1, err);
    llm4d_pv_free(&v);
    return rc;
}

static llm4d_code apply_override(llm4d_config *cfg, const char *arg, llm4d_err *err) {
    const char *eq = strchr(arg, '=');
    if (!eq || strchr(eq + 1, '='))
        return llm4d_fail(err, LLM4D_EUSER, "-o '%s' must contain exactly one '=', as in -o Optimizer.lr.max_lr=1e-4",
                          arg);
    char path[LLM4D_NAME_MAX * 4];
    size_t len = (size_t)(eq - arg);
    while (len > 0 && arg[len - 1] == ' ') len--;
    const char *p = arg;
    while (*p == ' ' && p < eq) p++, len--;
    if (len == 0 || len >= sizeof path)
        return llm4d_fail(err, LLM4D_EUSER, "-o '%s' needs a key before '=', as in -o Engine.max_steps=100", arg);
    memcpy(path, p, len);
    path[len] = 0;
    const char *val = eq + 1;
    while (*val == ' ') val++;
    char where[LLM4D_NAME_MAX * 4 + 16];
    snprintf(where, sizeof where, " (in -o %s)", arg);
    const llm4d_key *k = llm4d_key_find(path);
    if (!k) {
        if (llm4d_key_is_section(path))
            return llm4d_fail(err, LLM4D_EUSER, "-o %s: '%s' is a section; name a key inside it, as in -o %s.<key>=...",
                              arg, path, path);
        return unknown_key(path, where, err);
    }
    return set_from_text(cfg, k, val, path, where, err);
}

/* "--x", "-c", "-o": the flag before it has no value; "-1e-4" and "-.5" are values */
static int looks_like_option(const char *s) {
    return s[0] == '-' && s[1] && !(s[1] >= '0' && s[1] <= '9') && s[1] != '.';
}

llm4d_code llm4d_config_parse_args(llm4d_config *cfg, int argc, char **argv, llm4d_err *err) {
    const char *config_file = NULL;
    /* flags and overrides are collected first so that the YAML, wherever -c appears, is applied before them */
    int *flag_at = calloc((size_t)argc + 1, sizeof *flag_at);
    const char **flag_val = calloc((size_t)argc + 1, sizeof *flag_val);
    const llm4d_key **flag_key = calloc((size_t)argc + 1, sizeof *flag_key);
    const char **over = calloc((size_t)argc + 1, sizeof *over);
    if (!flag_at || !flag_val || !flag_key || !over) {
        free(flag_at), free(flag_val), free(flag_key), free(over);
        return llm4d_fail(err, LLM4D_ENOMEM, "out of memory parsing the command line");
    }
    int nflags = 0, nover = 0;
    llm4d_code rc = LLM4D_OK;
    for (int i = 0; i < argc && rc == LLM4D_OK; i++) {
        const char *a = argv[i];
        const char *val = NULL;
        int is_c = 0, is_o = 0;
        if (!strcmp(a, "-c") || !strcmp(a, "--config")) is_c = 1;
        else if (!strncmp(a, "--config=", 9)) is_c = 1, val = a + 9;
        else if (!strncmp(a, "-c", 2) && a[2] != '-') is_c = 1, val = a + 2;
        else if (!strcmp(a, "-o") || !strcmp(a, "--override")) is_o = 1;
        else if (!strncmp(a, "--override=", 11)) is_o = 1, val = a + 11;
        else if (!strncmp(a, "-o", 2) && a[2] != '-') is_o = 1, val = a + 2;
        if (is_c || is_o) {
            if (!val) {
                if (i + 1 >= argc) {
                    rc = llm4d_fail(err, LLM4D_EUSER, "%s needs a value: %s", a,
                                    is_c ? "-c path/to/config.yaml" : "-o Section.key=value");
                    break;
                }
                val = argv[++i];
            }
            if (is_c) {
                if (config_file)
                    rc = llm4d_fail(err, LLM4D_EUSER, "-c given twice ('%s' and '%s'); give one config file (use "
                                    "_base_ inside it to combine files)", config_file, val);
                config_file = val;
            } else {
                over[nover++] = val;
            }
            continue;
        }
        if (strncmp(a, "--", 2) || !a[2]) {
            rc = llm4d_fail(err, LLM4D_EUSER, "unexpected argument '%s'; options are --flag value, -c FILE and -o "
                            "Section.key=value (`llm4d train --help`)", a);
            break;
        }
        char name[LLM4D_NAME_MAX];
        const char *eq = strchr(a, '=');
        size_t nlen = eq ? (size_t)(eq - a) : strlen(a);
        if (nlen >= sizeof name) nlen = sizeof name - 1;
        memcpy(name, a, nlen);
        name[nlen] = 0;
        const llm4d_key *k = llm4d_key_by_flag(name);
        if (!k) {
            const char *near = llm4d_flag_suggest(name);
            if (near) rc = llm4d_fail(err, LLM4D_EUSER, "unknown flag '%s'; did you mean '%s'?", name, near);
            else rc = llm4d_fail(err, LLM4D_EUSER, "unknown flag '%s'; `llm4d train --help` lists the flags", name);
            break;
        }
        if (eq) {
            val = eq + 1;
        } else {
            if (i + 1 >= argc || looks_like_option(argv[i + 1])) {
                rc = llm4d_fail(err, LLM4D_EUSER, "flag %s needs a value, as in %s VALUE or %s=VALUE", name, name,
                                name);
                break;
            }
            val = argv[++i];
        }
        flag_at[nflags] = i;
        flag_key[nflags] = k;
        flag_val[nflags] = val;
        nflags++;
    }
    if (rc == LLM4D_OK && config_file) rc = apply_yaml(cfg, config_file, err);
    for (int f = 0; f < nflags && rc == LLM4D_OK; f++)
        rc = set_from_text(cfg, flag_key[f], flag_val[f], flag_key[f]->flag, "", err);
    for (int o = 0; o < nover && rc == LLM4D_OK; o++) rc = apply_override(cfg, over[o], err);
    free(flag_at), free(flag_val), free(flag_key), free(over);
    return rc;
}

/* ---- finalize ---- */

static llm4d_code check_degrees(llm4d_config *cfg, int world, llm4d_err *err) {
    llm4d_dist_config *d = &cfg->dist;
    static const char *const names[] = {"Distributed.mp_degree", "Distributed.pp_degree",
                                        "Distributed.sharding.sharding_degree"};
    const int vals[] = {d->mp_degree, d->pp_degree, d->sharding_degree};
    for (int i = 0; i < 3; i++)
        if (vals[i] < 1) return llm4d_fail(err, LLM4D_EUSER, "%s must be >= 1, got %d", names[i], vals[i]);
    if (d->dp_degree < 0)
        return llm4d_fail(err, LLM4D_EUSER, "Distributed.dp_degree must be >= 1 (or 0/empty to derive it), got %d",
                          d->dp_degree);
    long long inner = (long long)d->mp_degree * d->pp_degree * d->sharding_degree;
    if (d->dp_degree == 0) {
        if (world % inner)
            return llm4d_fail(err, LLM4D_EUSER, "mp_degree %d x pp_degree %d x sharding_degree %d = %lld does not "
                              "divide the %d process%s started, so dp_degree cannot be derived; choose degrees whose "
                              "product divides the number of processes", d->mp_degree, d->pp_degree,
                              d->sharding_degree, inner, world, world == 1 ? "" : "es");
        d->dp_degree = (int)(world / inner);
    }
    long long prod = inner * d->dp_degree;
    if (prod != world)
        return llm4d_fail(err, LLM4D_EUSER, "dp_degree %d x mp_degree %d x pp_degree %d x sharding_degree %d = %lld, "
                          "but %d process%s started; make the product equal the number of processes", d->dp_degree,
                          d->mp_degree, d->pp_degree, d->sharding_degree, prod, world,
                          world == 1 ? " was" : "es were");
    if (d->sharding_stage < 1 || d->sharding_stage > 3)
        return llm4d_fail(err, LLM4D_EUSER, "Distributed.sharding.sharding_stage must be 1, 2 or 3, got %d",
                          d->sharding_stage);
    if (d->sharding_offload && d->sharding_degree <= 1)
        return llm4d_fail(err, LLM4D_EUSER, "Distributed.sharding.sharding_offload needs sharding_degree > 1 (got "
                          "%d); set sharding_degree or turn offload off", d->sharding_degree);
    if (!llm4d_config_is_explicit(cfg, "Distributed.use_sharding")) d->use_sharding = d->sharding_degree > 1;
    else if (!d->use_sharding && d->sharding_degree > 1)
        return llm4d_fail(err, LLM4D_EUSER, "--use_sharding false contradicts sharding_degree %d; drop one of them",
                          d->sharding_degree);
    if (d->bucket_size_bytes < 1)
        return llm4d_fail(err, LLM4D_EUSER, "Distributed.bucket_size_mb must be > 0");
    return LLM4D_OK;
}

static llm4d_code check_batch(llm4d_config *cfg, llm4d_err *err) {
    const llm4d_dist_config *d = &cfg->dist;
    long long dps = (long long)d->dp_degree * d->sharding_degree;
    long long micro = cfg->micro_batch_size, local = cfg->local_batch_size, global = cfg->global_batch_size;
    if (micro < 1) return llm4d_fail(err, LLM4D_EUSER, "Global.micro_batch_size must be >= 1, got %lld", micro);
    if (local < 0 || global < 0)
        return llm4d_fail(err, LLM4D_EUSER, "Global.%s_batch_size must be >= 1 (or 0/empty to derive it), got %lld",
                          local < 0 ? "local" : "global", local < 0 ? local : global);
    if (global == 0 && local == 0) {
        local = micro;
        global = local * dps;
    } else if (global && local) {
        if (global != local * dps)
            return llm4d_fail(err, LLM4D_EUSER, "Global.global_batch_size %lld must equal local_batch_size %lld x "
                              "dp_degree %d x sharding_degree %d = %lld; set only one of the two", global, local,
                              d->dp_degree, d->sharding_degree, local * dps);
    } else if (global) {
        if (global % (micro * dps))
            return llm4d_fail(err, LLM4D_EUSER, "Global.global_batch_size %lld is not a multiple of micro_batch_size "
                              "%lld x dp_degree %d x sharding_degree %d = %lld; make it a multiple of %lld", global,
                              micro, d->dp_degree, d->sharding_degree, micro * dps, micro * dps);
        local = global / dps;
    } else {
        global = local * dps;
    }
    if (local % micro)
        return llm4d_fail(err, LLM4D_EUSER, "Global.local_batch_size %lld is not a multiple of micro_batch_size %lld; "
                          "make local_batch_size (global / (dp x sharding)) a multiple of micro_batch_size", local,
                          micro);
    cfg->local_batch_size = local;
    cfg->global_batch_size = global;
    cfg->accumulate_steps = local / micro;
    return LLM4D_OK;
}

static llm4d_code check_model(llm4d_config *cfg, llm4d_err *err) {
    llm4d_model_config *m = &cfg->model;
    const llm4d_dist_config *d = &cfg->dist;
    LLM4D_TRY(llm4d_model_describe(cfg, err));
    static const char *const gnames[] = {"Model.vocab_size", "Model.hidden_size", "Model.num_layers",
                                         "Model.num_attention_heads", "Model.max_position_embeddings",
                                         "Model.vocab_size_divisible_unit"};
    const int gvals[] = {m->vocab_size, m->hidden_size, m->num_layers, m->num_attention_heads,
                         m->max_position_embeddings, m->vocab_size_divisible_unit};
    for (int i = 0; i < 6; i++)
        if (gvals[i] < 1) return llm4d_fail(err, LLM4D_EUSER, "%s must be >= 1, got %d", gnames[i], gvals[i]);
    if (m->ffn_hidden_size < 0)
        return llm4d_fail(err, LLM4D_EUSER, "Model.ffn_hidden_size must be >= 1 (or 0/empty for 4 x hidden_size), "
                          "got %d", m->ffn_hidden_size);
    /* GPT's 4h; SwiGLU's two thirds of it (the same parameters in three matrices), Megatron's rounding to 64 */
    if (m->ffn_hidden_size == 0)
        m->ffn_hidden_size = m->swiglu ? (8 * m->hidden_size / 3 + 63) / 64 * 64 : 4 * m->hidden_size;
    if (m->hidden_size % m->num_attention_heads)
        return llm4d_fail(err, LLM4D_EUSER, "Model.num_attention_heads %d does not divide hidden_size %d; choose "
                          "heads so that hidden_size / heads is a whole head size", m->num_attention_heads,
                          m->hidden_size);
    if (m->num_attention_heads % d->mp_degree)
        return llm4d_fail(err, LLM4D_EUSER, "Model.num_attention_heads %d is not divisible by mp_degree %d; tensor "
                          "parallelism splits whole heads, so choose an mp_degree that divides the heads",
                          m->num_attention_heads, d->mp_degree);
    if (m->ffn_hidden_size % d->mp_degree)
        return llm4d_fail(err, LLM4D_EUSER, "Model.ffn_hidden_size %d is not divisible by mp_degree %d; choose an "
                          "mp_degree that divides it", m->ffn_hidden_size, d->mp_degree);
    if (!(d->comm_timeout >= 0 && d->comm_timeout_first >= 0) || !isfinite(d->comm_timeout) ||
        !isfinite(d->comm_timeout_first))
        return llm4d_fail(err, LLM4D_EUSER, "comm_timeout %g / comm_timeout_first %g must be seconds >= 0 (0: no "
                          "watchdog)", d->comm_timeout, d->comm_timeout_first);
    if (m->virtual_pp_degree < 1)
        return llm4d_fail(err, LLM4D_EUSER, "Model.virtual_pp_degree must be >= 1, got %d", m->virtual_pp_degree);
    if (m->virtual_pp_degree > 1 && d->pp_degree == 1)
        return llm4d_fail(err, LLM4D_EUSER, "virtual_pp_degree %d interleaves pipeline stages, but pp_degree is 1; "
                          "set pp_degree > 1 or virtual_pp_degree 1", m->virtual_pp_degree);
    int seq = cfg->data.max_seq_len;
    if (seq < 1) return llm4d_fail(err, LLM4D_EUSER, "max_seq_len must be >= 1, got %d", seq);
    if (seq > m->max_position_embeddings)
        return llm4d_fail(err, LLM4D_EUSER, "max_seq_len %d exceeds Model.max_position_embeddings %d; lower "
                          "max_seq_len or raise max_position_embeddings", seq, m->max_position_embeddings);
    if (m->sequence_parallel && d->mp_degree > 1 && seq % d->mp_degree)
        return llm4d_fail(err, LLM4D_EUSER, "max_seq_len %d is not divisible by mp_degree %d; sequence parallelism "
                          "splits every sequence's tokens over the tensor-parallel ranks, so choose a max_seq_len that "
                          "mp_degree divides or turn Model.sequence_parallel off", seq, d->mp_degree);
    long long unit = (long long)m->vocab_size_divisible_unit * d->mp_degree;
    long long padded = (m->vocab_size + unit - 1) / unit * unit;
    if (padded > 0x7fffffff) return llm4d_fail(err, LLM4D_EUSER, "Model.vocab_size %d is too large", m->vocab_size);
    m->padded_vocab_size = (int)padded;
    struct { const char *name; float v; } drop[] = {{"Model.hidden_dropout_prob", m->hidden_dropout_prob},
                                                    {"Model.attention_probs_dropout_prob",
                                                     m->attention_probs_dropout_prob}};
    for (int i = 0; i < 2; i++)
        if (!(drop[i].v >= 0 && drop[i].v < 1))
            return llm4d_fail(err, LLM4D_EUSER, "%s must be in [0, 1), got %g", drop[i].name, drop[i].v);
    if (!(m->initializer_range >= 0 && isfinite(m->initializer_range)))
        return llm4d_fail(err, LLM4D_EUSER, "Model.initializer_range must be >= 0, got %g", m->initializer_range);
    if (!m->recompute_granularity[0]) snprintf(m->recompute_granularity, sizeof m->recompute_granularity, "full");
    const char *g = m->recompute_granularity;
    if (!strcmp(g, "full_attn"))
        return llm4d_fail(err, LLM4D_EUSER, "Model.recompute_granularity full_attn (recompute the attention sublayer "
                          "only) is not implemented in llm4d; use full (the whole block) or core_attn (the attention "
                          "core, Megatron's selective recompute)");
    if (strcmp(g, "full") && strcmp(g, "core_attn"))
        return llm4d_fail(err, LLM4D_EUSER, "Model.recompute_granularity must be full or core_attn, got '%s'", g);
    return LLM4D_OK;
}

int llm4d_recompute_blocks(const llm4d_model_config *m) {
    return m->use_recompute && strcmp(m->recompute_granularity, "core_attn") != 0;
}

static llm4d_code check_optim(llm4d_config *cfg, llm4d_err *err) {
    llm4d_optim_config *o = &cfg->optim;
    if (!(o->max_lr >= 0 && isfinite(o->max_lr)))
        return llm4d_fail(err, LLM4D_EUSER, "max_lr (Optimizer.lr.max_lr) must be >= 0, got %g", o->max_lr);
    if (!(o->min_lr >= 0 && isfinite(o->min_lr)))
        return llm4d_fail(err, LLM4D_EUSER, "min_lr (Optimizer.lr.min_lr) must be >= 0, got %g", o->min_lr);
    if (o->min_lr > o->max_lr)
        return llm4d_fail(err, LLM4D_EUSER, "min_lr %g is above max_lr %g; the schedule decays from max_lr down to "
                          "min_lr, so swap them", o->min_lr, o->max_lr);
    if (!(o->warmup_rate >= 0 && o->warmup_rate <= 1))
        return llm4d_fail(err, LLM4D_EUSER, "warmup_rate must be in [0, 1] (a fraction of decay_steps), got %g",
                          o->warmup_rate);
    if (!(o->weight_decay >= 0 && isfinite(o->weight_decay)))
        return llm4d_fail(err, LLM4D_EUSER, "weight_decay must be >= 0, got %g", o->weight_decay);
    if (!(o->beta1 >= 0 && o->beta1 < 1) || !(o->beta2 >= 0 && o->beta2 < 1))
        return llm4d_fail(err, LLM4D_EUSER, "Optimizer.beta1 and beta2 must be in [0, 1), got %g and %g", o->beta1,
                          o->beta2);
    if (!(o->epsilon > 0 && isfinite(o->epsilon)))
        return llm4d_fail(err, LLM4D_EUSER, "Optimizer.epsilon must be > 0, got %g", o->epsilon);
    if (!(o->grad_clip >= 0 && isfinite(o->grad_clip)))
        return llm4d_fail(err, LLM4D_EUSER, "grad_clip (Optimizer.grad_clip.clip_norm) must be >= 0 (0 disables "
                          "clipping), got %g", o->grad_clip);
    if (cfg->max_steps < 1)
        return llm4d_fail(err, LLM4D_EUSER, "max_steps (Engine.max_steps) must be >= 1, got %lld",
                          (long long)cfg->max_steps);
    if (o->decay_steps < 0)
        return llm4d_fail(err, LLM4D_EUSER, "decay_steps must be >= 1 (or 0/empty for max_steps), got %lld",
                          (long long)o->decay_steps);
    if (o->decay_steps == 0) o->decay_steps = cfg->max_steps;
    if (!(cfg->scale_loss > 0 && isfinite(cfg->scale_loss)))
        return llm4d_fail(err, LLM4D_EUSER, "Engine.mix_precision.scale_loss must be > 0, got %g", cfg->scale_loss);
    return LLM4D_OK;
}

static llm4d_code check_run(llm4d_config *cfg, llm4d_err *err) {
    if (!llm4d_device_name_known(cfg->device))
        return llm4d_fail(err, LLM4D_EUSER, "device (Global.device) '%s' is not supported; the devices are "
                          LLM4D_DEVICE_NAMES, cfg->device);
    const char *ov = cfg->dist.dp_overlap;
    if (strcmp(ov, "on") && strcmp(ov, "off") && strcmp(ov, "alternate"))
        return llm4d_fail(err, LLM4D_EUSER, "dp_overlap (Distributed.dp_overlap) must be on, off or alternate, got "
                          "'%s'", ov);
    if (strcmp(cfg->dist.grad_comm_dtype, "float32") && strcmp(cfg->dist.grad_comm_dtype, "bfloat16"))
        return llm4d_fail(err, LLM4D_EUSER, "grad_comm_dtype (Distributed.grad_comm_dtype) must be float32 or "
                          "bfloat16, got '%s'", cfg->dist.grad_comm_dtype);
    if (strcmp(cfg->dist.pp_split, "balanced") && strcmp(cfg->dist.pp_split, "even"))
        return llm4d_fail(err, LLM4D_EUSER, "pp_split (Distributed.pp_split) must be balanced or even, got '%s'",
                          cfg->dist.pp_split);
    if (strcmp(cfg->dist.comm_progress, "hooks") && strcmp(cfg->dist.comm_progress, "thread"))
        return llm4d_fail(err, LLM4D_EUSER, "comm_progress (Distributed.comm_progress) must be hooks or thread, got "
                          "'%s'", cfg->dist.comm_progress);
    if (strcmp(cfg->dist.comm_path, "auto") && strcmp(cfg->dist.comm_path, "mpi"))
        return llm4d_fail(err, LLM4D_EUSER, "comm_path (Distributed.comm_path) must be auto or mpi, got '%s'",
                          cfg->dist.comm_path);
    if (cfg->dist.comm_chunk_kb < 0 || cfg->dist.comm_chunk_kb > (1 << 20))
        return llm4d_fail(err, LLM4D_EUSER, "comm_chunk_kb (Distributed.comm_chunk_kb) must be 0 (the default, 1024) "
                          "to 1048576 KiB, got %lld", (long long)cfg->dist.comm_chunk_kb);
    if (strcmp(cfg->amp_dtype, "bfloat16") && strcmp(cfg->amp_dtype, "float16") && strcmp(cfg->amp_dtype, "tfloat32"))
        return llm4d_fail(err, LLM4D_EUSER, "Engine.mix_precision.dtype must be bfloat16, float16 or tfloat32, got "
                          "'%s'", cfg->amp_dtype);
    if (!strcmp(cfg->amp_level, "o1") || !strcmp(cfg->amp_level, "o2")) cfg->amp_level[0] = 'O';
    if (strcmp(cfg->amp_level, "O1") && strcmp(cfg->amp_level, "O2"))
        return llm4d_fail(err, LLM4D_EUSER, "Engine.mix_precision.level (--fp16_opt_level) must be O1 or O2, got "
                          "'%s'", cfg->amp_level);
    if (cfg->logging_freq < 1)
        return llm4d_fail(err, LLM4D_EUSER, "logging_freq (Engine.logging_freq) must be >= 1, got %d",
                          cfg->logging_freq);
    if (cfg->eval_freq < 0) cfg->eval_freq = 0;
    if (!(cfg->loss_spike_threshold == 0 || cfg->loss_spike_threshold > 1) || !isfinite(cfg->loss_spike_threshold))
        return llm4d_fail(err, LLM4D_EUSER, "loss_spike_threshold (Engine.loss_spike_threshold) must be 0 (off) or a "
                          "factor > 1 such as 3, got %g", cfg->loss_spike_threshold);
    if (cfg->loss_spike_window < 1 || cfg->loss_spike_window > LLM4D_LOSS_WINDOW_MAX)
        return llm4d_fail(err, LLM4D_EUSER, "loss_spike_window (Engine.loss_spike_window) must be 1 to %d steps, got "
                          "%d", LLM4D_LOSS_WINDOW_MAX, cfg->loss_spike_window);
    if (cfg->eval_iters < (cfg->eval_freq > 0 ? 1 : 0))
        return llm4d_fail(err, LLM4D_EUSER, "eval_iters (Engine.eval_iters) must be >= 1 when eval_freq is set, got "
                          "%d", cfg->eval_iters);
    if (cfg->save_steps < -1)
        return llm4d_fail(err, LLM4D_EUSER, "save_steps must be >= 0 (0: at the end only) or -1 (never), got %lld",
                          (long long)cfg->save_steps);
    if (cfg->max_restarts < 0 || cfg->max_restarts > 1000)
        return llm4d_fail(err, LLM4D_EUSER, "max_restarts must be in [0, 1000] (0: no restarts), got %d",
                          cfg->max_restarts);
    if (cfg->keep_last < 0)
        return llm4d_fail(err, LLM4D_EUSER, "keep_last must be >= 0 (0 keeps all checkpoints), got %d",
                          cfg->keep_last);
    if (cfg->threads < 0)
        return llm4d_fail(err, LLM4D_EUSER, "threads must be >= 0 (0: all cores), got %d", cfg->threads);
    if (!cfg->output_dir[0])
        return llm4d_fail(err, LLM4D_EUSER, "output_dir (Engine.save_load.output_dir) must not be empty");
    if (!cfg->data.input_dir[0])
        return llm4d_fail(err, LLM4D_EUSER, "input_dir (Data.Train.dataset.input_dir) must not be empty");
    double sum = 0;
    for (const char *p = cfg->data.split; *p;) {
        char *end;
        double x = strtod(p, &end);
        if (end == p) break;
        sum += x;
        p = *end == ',' ? end + 1 : end;
    }
    if (!(sum > 0))
        return llm4d_fail(err, LLM4D_EUSER, "split '%s' must have a positive total, as in 949,50,1", cfg->data.split);
    LLM4D_TRY(llm4d_trace_parse_steps(cfg->trace_steps, &cfg->trace_first, &cfg->trace_last, err));
    if (cfg->trace_dir[0] && cfg->trace_first > cfg->max_steps)
        return llm4d_fail(err, LLM4D_EUSER, "trace_steps %s starts after the run's last step (max_steps %lld); choose "
                          "steps between 1 and %lld", cfg->trace_steps, (long long)cfg->max_steps,
                          (long long)cfg->max_steps);
    return LLM4D_OK;
}

void llm4d_config_act_types(const llm4d_config *cfg, llm4d_ftype *act, llm4d_ftype *res) {
    *act = *res = LLM4D_F32;
    if (!cfg->use_amp || strcmp(cfg->amp_level, "O2") || !strcmp(cfg->amp_dtype, "tfloat32")) return;
    *act = !strcmp(cfg->amp_dtype, "float16") ? LLM4D_F16 : LLM4D_BF16;
    *res = cfg->model.fp32_residual_connection ? LLM4D_F32 : *act;
}

llm4d_code llm4d_config_check_plan(const llm4d_config *cfg, llm4d_err *err) {
    const llm4d_plan_config *p = &cfg->plan;
    if (p->nodes < 1) return llm4d_fail(err, LLM4D_EUSER, "Plan.nodes (--nodes) must be >= 1 host, got %d", p->nodes);
    if (p->ranks_per_node < 0)
        return llm4d_fail(err, LLM4D_EUSER, "Plan.ranks_per_node (--ranks_per_node) must be >= 1 (0: derived), got %d",
                          p->ranks_per_node);
    if (p->threads_per_rank < 0)
        return llm4d_fail(err, LLM4D_EUSER, "Plan.threads_per_rank (--threads_per_rank) must be >= 1 (0: derived), "
                          "got %d", p->threads_per_rank);
    if (p->search_threads < 0)
        return llm4d_fail(err, LLM4D_EUSER, "Plan.search_threads (--search_threads) must be >= 1 (0: this machine's "
                          "processors), got %d", p->search_threads);
    if (!(p->memory_per_node_gib >= 0) || !isfinite(p->memory_per_node_gib))
        return llm4d_fail(err, LLM4D_EUSER, "Plan.memory_per_node (--memory_per_node) must be GiB >= 0 (0: the "
                          "machine profile's), got %g", p->memory_per_node_gib);
    if (!(p->memory_per_rank_gib >= 0) || !isfinite(p->memory_per_rank_gib))
        return llm4d_fail(err, LLM4D_EUSER, "Plan.memory_per_rank (--memory_per_rank) must be GiB >= 0 (0: the "
                          "machine profile's), got %g", p->memory_per_rank_gib);
    if (p->top < 1) return llm4d_fail(err, LLM4D_EUSER, "Plan.top (--top) must be >= 1, got %d", p->top);
    return LLM4D_OK;
}

llm4d_code llm4d_config_finalize(llm4d_config *cfg, int world_size, llm4d_err *err) {
    LLM4D_ASSERT(world_size >= 1, "world_size %d", world_size);
    LLM4D_TRY(llm4d_model_apply_preset(cfg, err));
    LLM4D_TRY(check_degrees(cfg, world_size, err));
    LLM4D_TRY(check_model(cfg, err));
    LLM4D_TRY(check_batch(cfg, err));
    LLM4D_TRY(check_optim(cfg, err));
    LLM4D_TRY(check_run(cfg, err));
    LLM4D_TRY(llm4d_config_check_plan(cfg, err));
    return LLM4D_OK;
}

/* ---- help ---- */

static void print_key(FILE *f, const llm4d_key *k) {
    const char *def = k->def ? k->def : "";
    fprintf(f, "  %-44s %-14s %s%s\n", k->key, def[0] ? def : "''", k->help, k->ext ? " [llm4d]" : "");
}

void llm4d_config_print_help(FILE *f) {
    int n;
    const llm4d_key *k = llm4d_keys(&n);
    char names[1024];
    llm4d_model_preset_names(names, sizeof names);
    fprintf(f,
            "usage: llm4d train [-c config.yaml] [--flag VALUE | --flag=VALUE ...] [-o Section.key=VALUE ...]\n"
            "\n"
            "Values come from, later winning: the defaults below, the YAML file (-c; PaddleFleetX layout, `_base_:`\n"
            "inheritance), the flags, then the -o overrides (so -o beats a flag for the same key; within flags or\n"
            "within overrides, the later argument wins). Values are read like PaddleFleetX does (Python literals:\n"
            "1e-5, True, [949, 50, 1]; anything else is a string). Booleans accept true/false/True/False/1/0.\n"
            "\n"
            "Model presets (--model_name_or_path): %s.\n"
            "  gpt2-* and gpt3-* (Model.name GPT) have vocab_size 50257, ffn 4 x hidden, dropouts 0.1,\n"
            "  initializer_range 0.02; gpt2-tiny is h64 L2 H4 with 256 positions, gpt2-* have 1024 positions and\n"
            "  gpt3-* 2048. llama2-* and llama3-* (Model.name LLaMA) are the shapes of meta-llama's Hugging Face\n"
            "  configs (RMSNorm, rotary positions, SwiGLU, grouped-query attention, no biases, untied LM head, no\n"
            "  dropout); llama-tiny is h64 L2 H4 with 2 key/value heads, ffn 192 and GPT-2's vocabulary, for tests.\n"
            "  The family sets the description's defaults; each part can be set alone in either family, in\n"
            "  PaddleNLP / Hugging Face spellings (hidden_act, rms_norm_eps, rope_theta, num_key_value_heads,\n"
            "  intermediate_size, tie_word_embeddings) or Megatron-LM's (normalization, norm_epsilon,\n"
            "  position_embedding_type, rotary_base, swiglu, num_query_groups, add_bias_linear,\n"
            "  untie_embeddings_and_output_weights). Model.* keys given explicitly beat the preset.\n"
            "  With no preset and no Model geometry key (vocab_size, hidden_size, num_layers, num_attention_heads,\n"
            "  ffn_hidden_size, max_position_embeddings) the preset is gpt2-en; with geometry keys and no\n"
            "  preset, the keys missing take the Model defaults below. An existing directory instead of a preset is\n"
            "  a checkpoint, whose geometry is read when it is loaded.\n"
            "\n"
            "Derived in this order: dp_degree (0: processes / (mp x pp x sharding)); the product of the four degrees\n"
            "must equal the number of processes; global = local x dp x sharding (with neither given, local =\n"
            "micro_batch_size); accumulate_steps = local / micro; decay_steps 0 -> max_steps; ffn 0 -> 4 x hidden\n"
            "(SwiGLU: 8/3 x hidden rounded up to 64); padded vocabulary = vocab_size rounded up to\n"
            "vocab_size_divisible_unit x mp_degree.\n"
            "\n"
            "Flags (each sets the key shown):\n",
            names);
    for (int i = 0; i < n; i++) {
        if (!k[i].flag) continue;
        char lhs[80];
        snprintf(lhs, sizeof lhs, "%s VALUE", k[i].flag);
        fprintf(f, "  %-26s %-40s default %s\n", lhs, k[i].key, k[i].def[0] ? k[i].def : "''");
    }
    fprintf(f, "  %-26s %s\n", "-c, --config FILE", "the YAML config");
    fprintf(f, "  %-26s %s\n", "-o, --override KEY=VALUE", "set any key below (repeatable; exactly one '=')");
    fprintf(f, "\nKeys (key, default, meaning; [llm4d] marks llm4d's additions to PaddleFleetX's schema):\n");
    for (int i = 0; i < n; i++)
        if (k[i].type != LLM4D_KT_NOEFFECT && k[i].type != LLM4D_KT_ALIAS) print_key(f, &k[i]);
    fprintf(f, "\nLegacy spellings (PaddleFleetX 2022 configs), read as the key named:\n");
    for (int i = 0; i < n; i++)
        if (k[i].type == LLM4D_KT_ALIAS) fprintf(f, "  %-44s -> %s\n", k[i].key, k[i].extra);
    fprintf(f, "\nKeys accepted but without effect in llm4d (PaddleFleetX default shown; one set to anything else\n"
               "is listed at start-up as having no effect):\n");
    for (int i = 0; i < n; i++)
        if (k[i].type == LLM4D_KT_NOEFFECT) print_key(f, &k[i]);
}
