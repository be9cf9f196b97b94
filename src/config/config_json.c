/* config_json.c — a configuration as JSON, key by key, for run.json (train/runinfo.c) and so for the report.
 *
 * Written from schema.c's table, like --help and the parser, so every key llm4d acts on is there under its dotted
 * name with its final value (after presets and derivation), and a new key needs no edit here. Keys without effect
 * and legacy spellings are left out; the keys the user set explicitly and the ones set without effect are listed
 * apart, so a reader can tell a choice from a default. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>

#include "config/config.h"
#include "config/schema.h"

/* A float as the shortest decimal that reads back as the same float: 0.001, not 0.0010000000474974513. */
static double float_value(float f) {
    char buf[32];
    snprintf(buf, sizeof buf, "%.7g", (double)f);
    return strtod(buf, NULL);
}

static cJSON *key_value(const llm4d_config *cfg, const llm4d_key *k) {
    const void *field = (const char *)cfg + k->off;
    switch (k->type) {
    case LLM4D_KT_INT: return cJSON_CreateNumber(*(const int *)field);
    case LLM4D_KT_I64:
    case LLM4D_KT_MB: return cJSON_CreateNumber((double)*(const int64_t *)field);
    case LLM4D_KT_U64: return cJSON_CreateNumber((double)*(const uint64_t *)field);
    case LLM4D_KT_FLOAT: return cJSON_CreateNumber(float_value(*(const float *)field));
    case LLM4D_KT_BOOL: return cJSON_CreateBool(*(const int *)field);
    case LLM4D_KT_BACKEND: return cJSON_CreateString(*(const int *)field ? "ref" : "cpu");
    case LLM4D_KT_STR:
    case LLM4D_KT_SPLIT:
    case LLM4D_KT_COUNTS: return cJSON_CreateString((const char *)field);
    default: return NULL;
    }
}

cJSON *llm4d_config_json(const llm4d_config *cfg) {
    cJSON *root = cJSON_CreateObject(), *values = cJSON_AddObjectToObject(root, "values");
    int n;
    const llm4d_key *k = llm4d_keys(&n);
    for (int i = 0; values && i < n; i++) {
        if (k[i].type == LLM4D_KT_NOEFFECT || k[i].type == LLM4D_KT_ALIAS) continue;
        cJSON *v = key_value(cfg, &k[i]);
        if (v) cJSON_AddItemToObject(values, k[i].key, v);
    }
    cJSON *set = cJSON_AddArrayToObject(root, "explicit");
    for (int i = 0; set && i < cfg->n_explicit; i++) cJSON_AddItemToArray(set, cJSON_CreateString(cfg->explicit_keys[i]));
    cJSON *noeff = cJSON_AddArrayToObject(root, "no_effect");
    for (int i = 0; noeff && i < cfg->n_noeffect; i++) cJSON_AddItemToArray(noeff, cJSON_CreateString(cfg->noeffect[i]));
    return root;
}
